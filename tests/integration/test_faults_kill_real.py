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
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    assert_processes_end,
    job_state,
    jobs_named,
    spec_dict,
    step_ids,
    steps,
    until,
)

pytestmark = pytest.mark.slurm

#: when to kill: the first moment the run has visibly reached a phase (polled every
#: 5 ms; files the run writes as it goes)
MOMENTS = {
    "at start": lambda work_dirs, log: True,
    "salloc started": lambda work_dirs, log: (work_dirs / ".salloc.log").exists(),
    "allocation tracked": lambda work_dirs, log: (work_dirs / ".slurm_alloc.json").exists(),
    "script started": lambda work_dirs, log: any(
        '"pgid"' in _read(p) for p in work_dirs.glob(".slurm_run.r????????????.json")),
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


# ------------------------------------------ round 2: a step never outlives its run (20.6)
def _records(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"))


def _run_json(spec: Path, timeout: float = 120) -> dict[str, object]:
    done = subprocess.run(_cli("run", str(spec), "--json", "--quiet"), capture_output=True,
                          text=True, timeout=timeout, check=False)
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_a_script_that_exits_with_a_step_in_the_background_leaves_no_step(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """20.6: ``srun ... &`` still running when the script exits: the run stops that step
    (by id) before it returns, and leaves no record."""
    name = names.new("bgstep")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsrun --overlap -n1 sleep 313 &\nsleep 1.5\necho done\n")
    data = spec_dict(local_cluster, tmp_path, name, success_patterns=["done"])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))
    try:
        report = _run_json(spec)
        assert report["status"] == "PASSED", report
        alloc = str(report["allocation_id"])
        assert step_ids(alloc) == []  # gone before the run returned
        assert_processes_end("sleep 313", "the step's srun and task")
        assert any("stopped what the script left running" in w
                   for w in report["warnings"]), report["warnings"]  # type: ignore[union-attr]
        assert _records(tmp_path) == []
    finally:
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=60, check=False,
                       capture_output=True)


@pytest.mark.parametrize("victim", ["guard", "bash"])
def test_kill_9_of_the_script_s_guard_or_bash_stops_its_step(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, victim: str) -> None:
    """20.6: kill -9 of the guard (or of the script's bash) ends the script for the
    orchestrator, while the srun and its step live on: the run stops them."""
    name = names.new(f"k9{victim}")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsrun --overlap -n1 sleep 317\necho never\n")
    data = spec_dict(local_cluster, tmp_path, name)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))
    try:
        run = subprocess.Popen(_cli("run", str(spec), "--json", "--quiet"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ((alloc, _),) = until("the allocation", lambda: jobs_named(
            name, local_cluster.user) or None, 60)
        until("the script's step", lambda: [s for s, n in steps(alloc).items()
                                            if not n.startswith("fsm-lease.")] or None, 60)
        pgid = until("the run record", lambda: next((
            json.loads(r.read_text())["script"].get("pgid") for r in _records(tmp_path)),
            None), 30)
        if victim == "guard":
            target = pgid
        else:
            from slurm_fsm.scriptguard import group_members

            target = next(p for p in group_members(pgid) if p != pgid and b"bash" in
                          Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0])
        os.kill(target, signal.SIGKILL)
        out, _ = run.communicate(timeout=90)
        report = json.loads(out)
        assert report["status"] != "PASSED"
        assert step_ids(alloc) == []
        assert_processes_end("sleep 317", f"the step's srun and task (script group {pgid})")
        assert _records(tmp_path) == []
        assert job_state(alloc) == "RUNNING"  # the allocation is kept
    finally:
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=60, check=False,
                       capture_output=True)


def test_kill_9_during_a_setup_step_leaves_nothing_running(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """20.8: a setup step (import, warm-up, pip install) is tied to the orchestrator's
    life like the script: kill -9 of the orchestrator mid-step ends the step."""
    name = names.new("k9setup")
    got = subprocess.run(["salloc", "--no-shell", "-N1", "-t", "10", f"--job-name={name}",
                          f"--partition={local_cluster.partition}",
                          f"--account={local_cluster.account}"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr
    ((alloc, _),) = jobs_named(name, local_cluster.user)
    child = (
        "from slurm_fsm.backend import StepRequest\n"
        "from slurm_fsm.subprocess_backend import SubprocessBackend\n"
        f"SubprocessBackend().run_step(StepRequest(job_id={alloc!r}, "
        "argv=('sleep', '331'), nodes=1, overlap=True))\n"
    )
    try:
        orchestrator = subprocess.Popen([sys.executable, "-c", child])
        until("the setup step", lambda: step_ids(alloc) or None, 60)
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=10)
        until("the setup step gone", lambda: True if not step_ids(alloc) else None, 30)
        assert_processes_end("sleep 331", "its srun")
    finally:
        subprocess.run(["scancel", alloc], timeout=30, check=False)


def test_with_the_controller_away_the_record_stays_and_the_next_run_stops_the_step(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """20.7: the script leaves ``srun ... &`` behind while slurmctld does not answer
    (stopped with SIGSTOP): the step cannot be cancelled; the run says so, keeps its
    record (with the srun's pid), and the next run, the controller back, stops it."""
    name = names.new("ctldaway")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsrun --overlap -n1 sleep 347 &\n"
                      "while [ ! -e away ]; do sleep 0.1; done\necho done\n")
    data = spec_dict(local_cluster, tmp_path, name, success_patterns=["done"])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))
    ctld = int((local_cluster.base_dir / "run" / "slurmctld.pid").read_text().strip())
    stopped = False
    try:
        run = subprocess.Popen(_cli("run", str(spec), "--json", "--quiet"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ((alloc, _),) = until("the allocation", lambda: jobs_named(
            name, local_cluster.user) or None, 60)
        (step,) = until("the step", lambda: [s for s, n in steps(alloc).items()
                                             if not n.startswith("fsm-lease.")] or None, 60)
        os.kill(ctld, signal.SIGSTOP)
        stopped = True
        (tmp_path / "work" / "away").touch()  # the script ends, its step does not
        out, _ = run.communicate(timeout=240)
        os.kill(ctld, signal.SIGCONT)
        stopped = False
        report = json.loads(out)
        assert any("is kept" in w for w in report["warnings"]), report["warnings"]
        (record,) = _records(tmp_path)
        kept = json.loads(record.read_text())
        assert kept["ended"] and kept["srun_pids"]
        until("the controller back", lambda: True if subprocess.run(
            ["squeue", "-h"], capture_output=True, timeout=30, check=False).returncode == 0
            else None, 30)
        # the srun's own cancel may reach the controller once it is back, or not
        survived = step in step_ids(alloc)

        script.write_text("#!/bin/bash\nsrun true\necho done\n")
        after = _run_json(spec)
        assert after["status"] == "PASSED" and after["allocation_id"] == alloc, after
        if survived:  # the next run stopped it, by the srun pid the record kept
            assert any("earlier run" in w and f"step {step}" in w
                       for w in after["warnings"]), after["warnings"]  # type: ignore[union-attr]
        assert step_ids(alloc) == []
        assert _records(tmp_path) == []
    finally:
        if stopped:
            os.kill(ctld, signal.SIGCONT)
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=60, check=False,
                       capture_output=True)
