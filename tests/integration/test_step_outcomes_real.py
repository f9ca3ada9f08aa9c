"""A persistent run's step cancelled from outside or killed for memory (issue 25, item
2), on real Slurm.

``scancel ALLOC.STEP`` of the run's step: srun exits 137, sacct says ``CANCELLED by
<uid>``. The run asks accounting about its own steps and ends CANCELLED (not FAILED
137); the allocation lives on, and the next run on it is judged by its own steps only.

A step past its ``--mem`` on the ``memkill`` configuration (``OverMemoryKill``, no
memory cgroup): slurmstepd kills it (``StepId=N exceeded memory limit``), sacct says
``CANCELLED by 0`` with the step's MaxRSS above its ``--mem``; the run ends OUT_OF_MEMORY
and the allocation lives on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from slurm_fsm.jobstate import JobState
from slurm_fsm.results import logged_step_ends
from slurm_fsm.runfacts import StepEnd
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, cli_report, job_state, slurm, spec_dict, until

pytestmark = pytest.mark.slurm


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _start(cluster: ClusterInfo, spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(cluster))


def _seen_steps(work_dirs: Path) -> tuple[str, list[str]] | None:
    """(allocation, the steps the live run has seen running) from its run record."""
    for path in work_dirs.glob(".slurm_run.r????????????.json"):
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("seen_steps"):
            return str(data["allocation"]), list(data["seen_steps"])
    return None


def test_a_step_cancelled_from_outside_ends_cancelled_and_the_allocation_lives_on(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("stepcancel")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\necho step starts\nsrun --overlap -n1 sleep 300\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         script_path=str(script))))
    try:
        run = _start(local_cluster, spec)
        # the run has seen its step running (its record says so): cancel it from outside
        alloc, seen = until("the run's step seen by the run", lambda: _seen_steps(
            tmp_path / "repo" / "work_dirs"), 120)
        cancel = slurm("scancel", f"{alloc}.{seen[0]}", env=_env(local_cluster))
        assert cancel.returncode == 0, cancel.stderr
        report = cli_report(run)
        uid = str(os.getuid())
        # slurmstepd's own line about the cancel, as this Slurm relays it, tells it
        # when accounting has no row yet (issue 44 item 7)
        assert logged_step_ends(_log(report), [f"{alloc}.{seen[0]}"]) == [StepEnd(
            step=f"{alloc}.{seen[0]}", state=JobState.CANCELLED, logged=ANY)], _log(report)
        assert (report["_rc"], report["status"]) == (1, "CANCELLED"), report
        assert report["exit_code"] == 137
        assert (f"step {alloc}.{seen[0]} was cancelled by uid {uid} (sacct: CANCELLED by "
                f"{uid})") in report["summary"], report["summary"]
        assert report["metrics"]["step_states"] == {f"{alloc}.{seen[0]}": f"CANCELLED by {uid}"}
        assert report["allocation_id"] == alloc
        assert job_state(alloc, _env(local_cluster)) == "RUNNING"
        # the next run on the same allocation: its own failing step decides, not the
        # cancelled step of the run before
        script.write_text("#!/bin/bash\nsrun --overlap -n1 bash -c 'sleep 3; exit 3'\n")
        again = cli_report(_start(local_cluster, spec))
        assert (again["_rc"], again["status"], again["exit_code"]) == (1, "FAILED", 3), again
        assert again["allocation_id"] == alloc
        assert "step_states" not in again["metrics"]
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       env=_env(local_cluster), timeout=120, check=False, capture_output=True)


def _log(report: dict[str, Any]) -> list[str]:
    return Path(report["log_files"]["stdout"]).read_text().splitlines()


def test_a_step_past_its_own_time_limit_ends_timeout_and_the_allocation_lives_on(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 44 item 6: ``srun --time=1`` of a step that runs longer. Slurm ends it at
    its time limit (about a minute: the shortest ``--time``); accounting says TIMEOUT,
    slurmstepd's line ``DUE TO TIME LIMIT``; the run is TIMEOUT, not FAILED 143."""
    name = names.new("steptime")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\necho step starts\nsrun --overlap -n1 --time=1 sleep 300\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         script_path=str(script))))
    try:
        report = cli_report(_start(local_cluster, spec), timeout=300)
        alloc = report["allocation_id"]
        (step,) = report["metrics"]["step_states"]
        assert (report["_rc"], report["status"]) == (1, "TIMEOUT"), report
        assert report["metrics"]["step_states"] == {step: "TIMEOUT"}, report["metrics"]
        assert f"step {step} reached its own time limit (sacct: TIMEOUT)" in \
            report["summary"], report["summary"]
        assert f"TIMEOUT (step {step}: its own time limit)" in [
            r["symptom"] for r in report["diagnosis"]], report["diagnosis"]
        # slurmstepd's line says it too, as this Slurm relays it
        assert logged_step_ends(_log(report), [step]) == [StepEnd(
            step=step, state=JobState.TIMEOUT, logged=ANY)], _log(report)
        assert job_state(alloc, _env(local_cluster)) == "RUNNING"
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       env=_env(local_cluster), timeout=120, check=False, capture_output=True)


#: what the step asks (``srun --mem``) and what it then touches: four times as much
STEP_MEM_MB = 100
TOUCH_MB = 400


@pytest.mark.config(memkill=True)
@pytest.mark.parametrize("relayed", [True, False], ids=["stderr-to-log", "stderr-dropped"])
def test_a_step_past_its_memory_limit_ends_out_of_memory_and_the_allocation_lives_on(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, relayed: bool) -> None:
    """``relayed=False``: the step's stderr goes to /dev/null (``srun --error``), so
    slurmstepd's ``exceeded memory limit`` line never reaches the log, as when srun ends
    before relaying it (CI once judged this step CANCELLED for want of that line):
    accounting alone tells the kill."""
    name = names.new("stepoom")
    go = tmp_path / "go"
    # The step waits until the run has seen it (the test then makes `go`), then touches
    # four times its limit and holds it: the kill never races the step's own exit, nor
    # the run's look at its steps.
    hog = (f"import time; b = b'x' * ({TOUCH_MB} << 20); print('touched', flush=True); "
           "time.sleep(300)")
    step = (f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.2; done; "
            f"exec {shlex.quote(sys.executable)} -c {shlex.quote(hog)}")
    script = tmp_path / "job.slurm"
    dropped = "" if relayed else "--error=/dev/null "
    script.write_text(f"#!/bin/bash\nsrun --overlap -n1 --mem={STEP_MEM_MB}M {dropped}"
                      f"bash -c {shlex.quote(step)}\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         script_path=str(script))))
    try:
        run = _start(local_cluster, spec)
        alloc, seen = until("the run's step seen by the run", lambda: _seen_steps(
            tmp_path / "repo" / "work_dirs"), 120)
        go.write_text("")
        report = cli_report(run)
        step_id = f"{alloc}.{seen[0]}"
        assert (report["_rc"], report["status"]) == (1, "OUT_OF_MEMORY"), report
        # accounting tells the kill whether or not srun relayed slurmstepd's line to the
        # log: the step's MaxRSS above its --mem
        summary = report["summary"]
        if not relayed:
            log = "\n".join(report["log_tail"])
            assert "exceeded memory limit" not in log, log
            assert "the log says so" not in summary, summary
        assert f"step {step_id} was killed for exceeding its memory limit (" in summary
        assert re.search(r"sacct: CANCELLED by 0, MaxRSS \d+ MiB above its "
                         f"{STEP_MEM_MB} MiB\\)", summary), summary
        assert report["metrics"]["step_states"] == {step_id: "CANCELLED by 0"}
        assert report["allocation_id"] == alloc
        assert job_state(alloc, _env(local_cluster)) == "RUNNING"
        # the allocation serves the next run, judged by its own step only
        script.write_text("#!/bin/bash\nsrun --overlap -n1 true\n")
        again = cli_report(_start(local_cluster, spec))
        assert (again["_rc"], again["status"]) == (0, "PASSED"), again
        assert again["allocation_id"] == alloc
        assert "step_states" not in again["metrics"]
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       env=_env(local_cluster), timeout=120, check=False, capture_output=True)


def _one_shot_spec(cluster: ClusterInfo, tmp_path: Path, name: str, body: str,
                   job_time: str) -> Path:
    """A one-shot spec whose script (named ``name``) runs ``body`` under
    ``#SBATCH --time=<job_time>``, its output in ``work/oneshot_%j.out``."""
    work = tmp_path / "work"
    script = tmp_path / name
    script.write_text(f"#!/bin/bash\n#SBATCH --output={work}/oneshot_%j.out\n"
                      f"#SBATCH --time={job_time}\n{body}")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(
        cluster, tmp_path, "unused-by-one-shot", script_path=str(script),
        persistent_mode=False, log_file_pattern="oneshot_%j.out",
        monitor_timeout_seconds=400)))
    return spec


def test_a_one_shot_step_past_its_own_time_limit_ends_timeout(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 44 item 6, one-shot: the job's script runs ``srun --time=1 sleep 300`` (a
    step with its own limit, one minute, inside a job of ten). Slurm ends the step at
    its limit, the script exits with srun's 143 and the job is FAILED 143 in
    accounting; the step's row says TIMEOUT and slurmstepd's line ``DUE TO TIME LIMIT``.
    The run is TIMEOUT with the step's own diagnosis row, as a persistent run is. The
    run waits for the job's end by its state (monitor_timeout_seconds 400: Slurm ends
    the step within OverTimeLimit + its timer's cadence of the minute)."""
    spec = _one_shot_spec(local_cluster, tmp_path, names.new("steptime1", ".slurm"),
                          "echo step starts\nsrun -n1 --time=1 sleep 300\n", "10")
    report = cli_report(_start(local_cluster, spec), timeout=500)
    job = report["job_id"]
    step = f"{job}.0"
    assert report["mode"] == "one-shot"
    assert report["slurm_state"] == "FAILED", report  # the script exited with srun's 143
    assert (report["_rc"], report["status"]) == (1, "TIMEOUT"), report
    assert report["exit_code"] == 143
    assert report["metrics"]["step_states"] == {step: "TIMEOUT"}, report["metrics"]
    assert f"step {step} reached its own time limit (sacct: TIMEOUT)" in \
        report["summary"], report["summary"]
    symptoms = [r["symptom"] for r in report["diagnosis"]]
    assert f"TIMEOUT (step {step}: its own time limit)" in symptoms, report["diagnosis"]
    assert not [s for s in symptoms if "monitor_timeout_seconds" in s], symptoms
    # slurmstepd's line says it too, as this Slurm relays it
    assert logged_step_ends(_log(report), [step]) == [StepEnd(
        step=step, state=JobState.TIMEOUT, logged=ANY)], _log(report)


def test_a_one_shot_job_past_its_own_time_limit_stays_timeout_by_its_state(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The job's own limit (one minute) ends it while its step runs: the job is TIMEOUT
    in accounting and that decides (the job's row, not a step's)."""
    spec = _one_shot_spec(local_cluster, tmp_path, names.new("jobtime1", ".slurm"),
                          "echo step starts\nsrun -n1 sleep 300\n", "1")
    report = cli_report(_start(local_cluster, spec), timeout=500)
    assert (report["_rc"], report["status"]) == (1, "TIMEOUT"), report
    assert report["slurm_state"] == "TIMEOUT"
    assert "(Slurm state TIMEOUT)" in report["summary"], report["summary"]
    symptoms = [r["symptom"] for r in report["diagnosis"]]
    assert "TIMEOUT (Slurm state TIMEOUT)" in symptoms, report["diagnosis"]
    assert not [s for s in symptoms if "its own time limit" in s], symptoms
