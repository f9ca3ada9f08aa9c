"""Issue 39 (c) on the real cluster: a script that ended just before its owner died.

The orchestrator of a foreground run is stopped (SIGSTOP) while its script runs, so it
cannot notice the script's end; the script is let go and ends; once its guard has
written the exit status beside the run's record, the orchestrator is killed with
SIGKILL. No timing: each step waits for a file. Before, ``report`` rebuilt it
CANCELLED (the exit status lived only in the owner); now it is judged by the status
its guard wrote, as the live run would have been: PASSED, exit code 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, spec_dict, until

pytestmark = [pytest.mark.slurm]

GATED = ("#!/bin/bash\nsrun -n1 true\necho ready\n"
         "while [ ! -e {gate} ]; do sleep 0.2; done\necho end\n")


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def test_a_script_that_ended_before_its_owners_kill_9_is_judged_by_its_exit_status(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    (tmp_path / "job.slurm").write_text(GATED.format(gate=tmp_path / "gate"))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("gstatus"),
                                         success_patterns=["end"])))
    work_dirs = tmp_path / "repo" / "work_dirs"
    owner = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json",
                              "--quiet"], env=_env(local_cluster), cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        record = until("the run's owner record with its log", lambda: next(
            (p for p in work_dirs.glob(".slurm_run.r????????????.owner.json")
             if json.loads(p.read_text()).get("log")), None), 180)
        run_id = json.loads(record.read_text())["run_id"]
        log = Path(json.loads(record.read_text())["log"])
        until("the script running", lambda: True if log.exists()
              and "ready" in log.read_text() else None, 120)
        os.kill(owner.pid, signal.SIGSTOP)  # it cannot notice the script's end
        (tmp_path / "gate").touch()
        status = work_dirs / f".slurm_run.{run_id}.status"
        until("the guard's status", lambda: True if status.exists() else None, 60)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
        assert status.read_text() == "0\n"
        assert json.loads(record.read_text())["phase"] != "ended"  # the owner never knew
        done = subprocess.run([sys.executable, "-m", "slurm_fsm", "report", run_id, "--json"],
                              cwd=tmp_path / "repo", env=_env(local_cluster),
                              capture_output=True, text=True, timeout=180, check=False)
        report = json.loads(done.stdout)
        assert report["status"] == "PASSED" and report["exit_code"] == 0, report
        assert any("as its guard wrote it" in n for n in report["notes"]), report["notes"]
    finally:
        if owner.poll() is None:
            os.kill(owner.pid, signal.SIGKILL)
            owner.wait(timeout=30)
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet",
                        "--no-wait"], env=_env(local_cluster), timeout=120, check=False,
                       capture_output=True)
        names.cleanup()
