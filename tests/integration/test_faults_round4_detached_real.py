"""Issue 43 (round 4) item 7 on real Slurm: a detached ``srun`` does not outlive its run.

A script that starts ``setsid nohup srun ... &`` puts that ``srun`` in a session and a
process group of its own: before, the run's end looked only at the script's process
group, so the step kept running in the shared allocation after a PASSED run (its CPUs
and GPUs unseen by packing), after ``kill -9`` of the orchestrator and after the next
run; a detached host process (``setsid nohup sleep ... &``) survived too. Every process
the script started holds its guard's secret token in its environment
(:func:`slurm_fsm.scriptguard.token_holders`): the run's end finds them there, and
their steps by what Slurm says (``SrunHost:Pid``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    assert_processes_end,
    job_state,
    jobs_named,
    local_pids,
    spec_dict,
    step_ids,
    steps,
    until,
)

pytestmark = pytest.mark.slurm


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurm_fsm", *args]


def _records(root: Path) -> list[Path]:
    return list((root / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"))


def _holding(tag: str) -> list[int]:
    """Local processes whose command line holds ``tag`` (the test's sleeps)."""
    return list(local_pids(tag, skip=("pytest", "bash")))


def _detaching(srun_secs: int, host_secs: int, then: str = "") -> str:
    """A script that detaches an ``srun`` step and a host process, then exits 0."""
    return ("#!/bin/bash\n"
            f"setsid nohup srun -n1 sleep {srun_secs} >/dev/null 2>&1 &\n"
            f"setsid nohup sleep {host_secs} >/dev/null 2>&1 &\n"
            f"{then}echo done\n")


def _work_steps(alloc: str) -> list[str]:
    return [s for s, n in steps(alloc).items() if not n.startswith("fsm-lease.")]


def _cleanup(spec: Path, *tags: str) -> None:
    subprocess.run(_cli("release", str(spec), "--quiet"), timeout=120, check=False,
                   capture_output=True)
    for tag in tags:
        for pid in _holding(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_detached_srun_and_host_process_end_with_a_passed_run(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The script detaches ``srun -n1 sleep`` and a host ``sleep`` with ``setsid nohup``
    and exits 0 once the step runs: the run PASSES, and before its report the step is
    cancelled, the host process stopped, the record deleted, and the report says what
    was stopped. Before: ``squeue -s`` still listed the step after the report."""
    name = names.new("detach")
    script = tmp_path / "job.slurm"
    # exit once Slurm lists the step: the run's end must find a step that runs
    wait = ('for i in $(seq 100); do squeue -h -s -j "$SLURM_JOB_ID" -o %j | '
            "grep -qx sleep && break; sleep 0.1; done\n")
    script.write_text(_detaching(611, 612, wait))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         success_patterns=["done"])))
    try:
        done = subprocess.run(_cli("run", str(spec), "--json", "--quiet"),
                              capture_output=True, text=True, timeout=180, check=False)
        report = json.loads(done.stdout)
        assert report["status"] == "PASSED", report
        alloc = str(report["allocation_id"])
        assert _work_steps(alloc) == []  # gone before the run returned
        assert step_ids(alloc) == []
        assert _holding("sleep 612") == []  # the run stops the host process itself
        assert_processes_end("sleep 611", "the cancelled step's srun", skip=("pytest", "bash"))
        assert any("detached" in w for w in report["warnings"]), report["warnings"]
        assert _records(tmp_path) == []
        assert job_state(alloc) == "RUNNING"  # the shared allocation is kept
    finally:
        _cleanup(spec, "sleep 611", "sleep 612")


def test_after_kill_9_of_the_orchestrator_the_next_run_stops_the_detached_step(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The orchestrator is killed with ``kill -9`` while the script's detached step and
    host process run: its guard stops the script's group, not them. The next run on the
    checkout finds them by the dead run's record (its token, then ``SrunHost:Pid``),
    stops them, says so, and PASSES. Before: the step ran on after the next run."""
    name = names.new("detach9")
    script = tmp_path / "job.slurm"
    script.write_text(_detaching(621, 622, "sleep 623\n"))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         success_patterns=["done"])))
    try:
        run = subprocess.Popen(_cli("run", str(spec), "--json", "--quiet"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ((alloc, _),) = until("the allocation", lambda: jobs_named(
            name, local_cluster.user) or None, 60)
        until("the detached step", lambda: _work_steps(alloc) or None, 60)
        until("the host process", lambda: _holding("sleep 622") or None, 30)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        until("the script's own sleep gone", lambda: True if not _holding("sleep 623")
              else None, 30)
        assert _work_steps(alloc) and _holding("sleep 622")  # what the guard cannot reach

        script.write_text("#!/bin/bash\nsrun true\necho done\n")
        done = subprocess.run(_cli("run", str(spec), "--json", "--quiet"),
                              capture_output=True, text=True, timeout=180, check=False)
        after = json.loads(done.stdout)
        assert after["status"] == "PASSED" and after["allocation_id"] == alloc, after
        assert any("earlier run" in w for w in after["warnings"]), after["warnings"]
        assert step_ids(alloc) == []
        assert _holding("sleep 622") == []  # the run stops the host process itself
        assert_processes_end("sleep 621", "the cancelled step's srun", skip=("pytest", "bash"))
        assert _records(tmp_path) == []
    finally:
        _cleanup(spec, "sleep 621", "sleep 622", "sleep 623")
