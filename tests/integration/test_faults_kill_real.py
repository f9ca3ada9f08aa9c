"""``kill -9`` of the orchestrator at several moments of a run, on the real cluster.

The fault campaign of issue 10 killed ``slurm-fsm run`` at many moments; this keeps
it alive. Each case starts a run and kills it with SIGKILL as soon as it reaches a
phase (at start, salloc started, the allocation tracked in the state file, the
script started, mid-step, the script done but not yet reported), then checks what a
user needs after such a crash:

- the next run PASSES, in an allocation of ours, and never reads the dead run's
  output as its own;
- there is at most one allocation of ours at any time (nothing leaked), and after
  ``release`` none;
- no step of the dead run is left on the allocation.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, jobs_named, spec_dict, step_ids, until

pytestmark = pytest.mark.slurm

#: when to kill: the first moment the run has visibly reached a phase (polled every
#: 5 ms; files the run writes as it goes)
MOMENTS = {
    "at start": lambda work_dirs, log: True,
    "salloc started": lambda work_dirs, log: (work_dirs / ".salloc.log").exists(),
    "allocation tracked": lambda work_dirs, log: (work_dirs / ".slurm_alloc.json").exists(),
    "script started": lambda work_dirs, log: any(
        '"pgid"' in _read(p) for p in work_dirs.glob(".slurm_run.r*.json")),
    "mid-step": lambda work_dirs, log: "FAILED" in _read(log),
    "script done": lambda work_dirs, log: "step done" in _read(log),
}


def _read(log: Path) -> str:
    try:
        return log.read_text()
    except OSError:
        return ""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurm_fsm", *args]


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_kill_9_at_any_moment_leaves_nothing_behind(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, moment: str) -> None:
    name = names.new("k9")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsleep 0.3\necho 'FAILED: written by the run that will "
                      "die'\nsrun sleep 2\necho 'step done'\nsleep 0.5\n")
    data = spec_dict(local_cluster, tmp_path, name, script_path=str(script),
                     failure_patterns=["FAILED"])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))

    dying = subprocess.Popen(_cli("run", str(spec), "--json", "--quiet"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work_dirs = tmp_path / "repo" / "work_dirs"
    latest = tmp_path / "work" / "itmodel_custom.log"
    reached = MOMENTS[moment]
    deadline = time.monotonic() + 60
    while not reached(work_dirs, latest) and dying.poll() is None:
        assert time.monotonic() < deadline, f"the run never reached {moment!r}"
        time.sleep(0.005)
    assert dying.poll() is None, f"the run ended before {moment!r}"
    dying.send_signal(signal.SIGKILL)
    dying.wait(timeout=10)
    ours = jobs_named(name, local_cluster.user)
    assert len(ours) <= 1, ours  # never two allocations

    script.write_text("#!/bin/bash\nsrun true\necho 'all good'\n")
    data["success_patterns"] = ["all good"]
    spec.write_text(json.dumps(data))
    rerun = subprocess.run(_cli("run", str(spec), "--json", "--quiet"), capture_output=True,
                           text=True, timeout=120, check=False)
    report = json.loads(rerun.stdout)
    assert rerun.returncode == 0 and report["status"] == "PASSED", report
    log = Path(report["log_files"]["stdout"])
    assert log.read_text() == "all good\n"  # its own log, not the dead run's
    ours = jobs_named(name, local_cluster.user)
    assert [job for job, _ in ours] == [report["allocation_id"]], ours
    assert step_ids(report["allocation_id"]) == []  # the dead run's step is gone

    released = subprocess.run(_cli("release", str(spec), "--json"), capture_output=True,
                              text=True, timeout=60, check=False)
    assert released.returncode == 0, released.stdout + released.stderr
    until("no allocation of ours", lambda: True if not jobs_named(
        name, local_cluster.user) else None, 20)
