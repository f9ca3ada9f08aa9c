"""Issue 44, item 8 (low): a pre-empted job says so; a script with Windows line endings
meets the same answer in both modes (refused before Slurm); an empty log is not blamed
on a container the spec does not have."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm.report import Status
from slurm_fsm.results import diagnose

PREEMPTED = ("slurmstepd: error: *** JOB 17 ON n1 CANCELLED AT 2026-12-06T18:00:00 DUE TO "
             "PREEMPTION ***")


def test_a_preempted_job_is_said_to_be_preempted() -> None:
    rows = diagnose(Status.CANCELLED, exit_code=143, slurm_state="CANCELLED",
                    log_empty=False, log_lines=["step 1", PREEMPTED])
    [row] = [r for r in rows if "PREEMPTION" in r["symptom"]]
    assert "pre-empted" in row["cause"]
    assert "requeue" in row["advice"] and "resubmit" in row["advice"]


def test_an_empty_log_without_a_container_is_not_blamed_on_one() -> None:
    rows = diagnose(Status.FAILED, exit_code=1, slurm_state="FAILED", log_empty=True,
                    log_lines=[], container=False)
    [row] = [r for r in rows if r["symptom"] == "empty output log"]
    assert "container" not in row["cause"]
    assert "elsewhere" in row["cause"]
    with_container = diagnose(Status.FAILED, exit_code=1, slurm_state="FAILED",
                              log_empty=True, log_lines=[], container=True)
    assert any(r["cause"] == "container did not start" for r in with_container)


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "one-shot"])
def test_a_script_with_windows_line_endings_is_refused_before_slurm_in_both_modes(
        tmp_path: Path, persistent: bool) -> None:
    script = tmp_path / "job.slurm"
    script.write_bytes(b"#!/bin/bash\r\necho hello\r\n")
    spec = tmp_path / "spec.json"
    data = {"script_path": "job.slurm", "work_dir": "work", "model_name": "m",
            "workflow_type": "custom", "persistent_mode": persistent, "repo_root": ".",
            "slurm_params": {"partition": "debug", "account": "acct", "nodes": 1}}
    if not persistent:
        data["log_file_pattern"] = "m_%j.out"
    spec.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json",
                           "--backend", "fake"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout
    doc = json.loads(done.stdout)
    assert doc["status"] == "BAD_INPUT"
    assert any("Windows line endings" in e and "script_path" in e for e in doc["errors"])
    assert not (tmp_path / "work_dirs").exists() or not any(
        (tmp_path / "work_dirs").glob(".slurm_alloc*.json"))  # nothing was allocated
