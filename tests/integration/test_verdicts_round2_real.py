"""Issue 25 item 3 on the real cluster: a passing pytest run whose unit test exercises a
TensorRT-LLM-shaped hang detector (it logs ``Hang detected after 1 seconds.`` in
TensorRT-LLM's logger format, on stderr) is PASSED in both modes, with ``-rA`` (the line
is reprinted in pytest's captured sections) and with ``-s`` (the raw line, inside the
running session: the monitor must not cancel the healthy job), also under ``srun -l``
with two ranks. The test module is tests/data/real/local/pytest/hangunit_suite.py.txt.
"""

from __future__ import annotations

import shlex
import sys
import threading
from pathlib import Path

import pytest

from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, slurm, until
from .test_run_real import one_shot, persistent, run

pytestmark = pytest.mark.slurm

SUITE = (Path(__file__).resolve().parents[1] / "data" / "real" / "local" / "pytest"
         / "hangunit_suite.py.txt")


def _body(suite_dir: Path, args: str, srun: str = "srun") -> str:
    """The job: pytest over the detector's unit test, run as a step (a rank's output
    goes where the step's goes: persistent, the one log; one-shot, .out and .err)."""
    python = shlex.quote(sys.executable)
    return f"""
        cd {shlex.quote(str(suite_dir))}
        {srun} {python} -m pytest -p no:cacheprovider -p no:timeout {args} test_hangunit.py
    """


def _suite(root: Path) -> Path:
    folder = root / "suite"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_hangunit.py").write_text(SUITE.read_text(encoding="utf-8"))
    return folder


def _both(cluster: ClusterInfo, root: Path, names: JobNames, tag: str,
          body: str) -> tuple[Report, Report]:
    kept = persistent(cluster, root / "persistent", names.new(tag), body,
                      workflow_type="pytest", monitor_timeout_seconds=120)
    batch = one_shot(cluster, root / "oneshot", names.new(tag, suffix=""), body,
                     workflow_type="pytest", monitor_timeout_seconds=120)
    return run(kept), run(batch)


@pytest.mark.parametrize("args", ["-rA", "-s", "-s -v"])
def test_a_passing_hang_detector_unit_test_is_passed_in_both_modes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, args: str) -> None:
    suite = _suite(tmp_path)
    kept, batch = _both(local_cluster, tmp_path, names, "hangunit", _body(suite, args))
    for report in (kept, batch):
        assert report.status is Status.PASSED, report.render_text()
        assert report.metrics["passed"] == 4, report.render_text()
        assert report.metrics.get("cancelled_steps", []) == [], report.render_text()
    assert batch.mode == "one-shot"
    # the detector's line was there, in the output read (the .err in one-shot mode)
    assert any("Hang detected after 1 seconds." in line
               for line in kept.log_tail), kept.render_text()


def test_two_ranks_each_with_the_detectors_unit_test_pass(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    body = _body(suite, "-s", srun="srun -l -n2")
    spec = persistent(local_cluster, tmp_path, names.new("hangranks"), body,
                      workflow_type="pytest", monitor_timeout_seconds=120,
                      slurm_params={"ntasks_per_node": 2})
    report = run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert report.metrics["passed"] == 8 and report.metrics["ranks"] == 2, report.metrics


def test_a_job_held_in_special_exit_says_it_was_held(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 7: the job is requeued and held (``scontrol requeuehold State=SpecialExit``):
    it never ends by itself; the report says it was requeued, how to see whether it is
    held and how to release it, not to raise the timeout."""
    job_name = names.new("held", suffix="")
    spec = one_shot(local_cluster, tmp_path, job_name, 'echo "started"\nsleep 120\n',
                    monitor_timeout_seconds=20)
    holder = threading.Thread(target=_hold_when_running, args=(job_name,), daemon=True)
    holder.start()
    report = run(spec)
    holder.join(timeout=60)
    assert report.status is Status.TIMEOUT, report.render_text()
    # the executor passes the final state (CANCELLED: it cancelled the held job when the
    # monitor gave up); slurmstepd's "DUE TO JOB REQUEUE" line says what happened
    assert report.diagnosis[0]["symptom"] == "job requeued by Slurm (... DUE TO JOB REQUEUE)", \
        report.render_text()
    assert f"scontrol release {report.job_id}" in report.diagnosis[0]["advice"]
    assert not any("raise" in d["advice"] and "timeout" in d["advice"]
                   for d in report.diagnosis), report.render_text()


def _hold_when_running(job_name: str) -> None:
    job_id = until("the job is running", lambda: _running(job_name), 60)
    slurm("scontrol", "requeuehold", "State=SpecialExit", job_id)


def _running(job_name: str) -> str | None:
    out = slurm("squeue", f"--name={job_name}", "-h", "-o", "%i %T").stdout.split()
    return out[0] if len(out) == 2 and out[1] == "RUNNING" else None


DETECTOR_LINE = ("[12/03/2026-17:00:00] [TRT-LLM] [RANK $SLURM_PROCID] [E] "
                 "Hang detected after 3 seconds.")
DETECTOR_UNDER_SRUN_L = f"""
    srun -l -n2 bash -c 'echo "{DETECTOR_LINE}" >&2; sleep 120'
"""


def test_the_detectors_own_line_under_srun_l_still_cancels_in_both_modes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The real detector's line, as TensorRT-LLM's logger prints it (timestamp, tags,
    ``[RANK n]``) under ``srun -l`` labels, while the job still runs: the monitor
    cancels it as a hang in both modes (before monitor_timeout_seconds)."""
    kept = persistent(local_cluster, tmp_path / "persistent", names.new("hangl"),
                      DETECTOR_UNDER_SRUN_L, monitor_timeout_seconds=90,
                      slurm_params={"ntasks_per_node": 2})
    batch = one_shot(local_cluster, tmp_path / "oneshot", names.new("hangl", suffix=""),
                     DETECTOR_UNDER_SRUN_L, monitor_timeout_seconds=90,
                     sbatch=("--ntasks=2",))
    for report in (run(kept), run(batch)):
        assert report.status is Status.HANG_DETECTED, report.render_text()
        assert "[E] Hang detected after 3 seconds." in report.summary, report.summary
        assert report.elapsed_s is not None and report.elapsed_s < 80, report.render_text()
