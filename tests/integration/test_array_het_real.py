"""Issue 44 items 1 and 2 on the real local cluster: a one-shot array job is judged by
every task (the worst decides, each task's counts added up, each task's own log read),
and a heterogeneous job is judged once every component has ended (the backfill
scheduler starts it, tens of seconds after sbatch here)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import spec_dict
from .test_run_real import run, script

pytestmark = pytest.mark.slurm

#: each task prints pytest's summary; task 1 fails one test and exits 1
ARRAY_BODY = """
    echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"
    sleep 2
    if [ "$SLURM_ARRAY_TASK_ID" = "$FAILING_TASK" ]; then
        echo "FAILED test_x.py::test_{task} - assert 0"
        echo "1 failed, 2 passed in 0.10s"
        exit 1
    fi
    echo "3 passed in 0.10s"
"""


def batch_spec(cluster: ClusterInfo, root: Path, name: str, header: str, body: str
               ) -> JobSpec:
    """A one-shot pytest spec whose script has ``header``'s #SBATCH lines only (sbatch's
    own file names: ``slurm-%A_%a.out`` for an array, ``slurm-%j.out`` otherwise)."""
    text = header + textwrap.dedent(body).lstrip("\n")
    path = script(root / name, text)
    return JobSpec.from_dict(spec_dict(
        cluster, root, "unused-by-one-shot", script_path=str(path), persistent_mode=False,
        log_file_pattern="slurm-%j.out", workflow_type="pytest"))


def test_an_array_whose_task_1_fails_is_failed_by_it(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = batch_spec(local_cluster, tmp_path, "array.sh",
                      "#SBATCH --array=0-2\n", "FAILING_TASK=1\n" + ARRAY_BODY)
    report = run(spec)
    job = report.job_id
    assert report.status is Status.FAILED, report.render_text()
    assert report.exit_code == 1 and report.slurm_state == "FAILED"
    parts = {p["id"]: (p["state"], p["exit_code"], Path(p["log"]).name)
             for p in report.metrics["parts"]}
    assert parts == {f"{job}_0": ("COMPLETED", 0, f"slurm-{job}_0.out"),
                     f"{job}_1": ("FAILED", 1, f"slurm-{job}_1.out"),
                     f"{job}_2": ("COMPLETED", 0, f"slurm-{job}_2.out")}
    # every task's log was read: its counts added up, task 1's failure among the errors
    assert (report.metrics["passed"], report.metrics["failed"]) == (8, 1)
    assert any(f"array task {job}_1 FAILED, exit code 1" in e for e in report.errors)
    assert "3 array tasks, 1 did not pass" in report.summary
    assert "4294967294" not in str(report.log_files)
    assert Path(report.log_files["stdout"] or "").is_file()


def test_an_array_whose_tasks_all_pass_passes_with_every_tasks_counts(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = batch_spec(local_cluster, tmp_path, "array-ok.sh",
                      "#SBATCH --array=0-2%2\n#SBATCH --output=arr-%A_%a.log\n",
                      "FAILING_TASK=none\n" + ARRAY_BODY)
    report = run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert report.metrics["passed"] == 9
    assert [Path(p["log"]).name for p in report.metrics["parts"]] == [
        f"arr-{report.job_id}_{task}.log" for task in range(3)]
    assert "3 array tasks, all passed" in report.summary


HET_HEADER = "#SBATCH --nodes=1\n#SBATCH hetjob\n#SBATCH --nodes=1\n"


def test_a_het_job_is_judged_once_every_component_has_ended(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = batch_spec(local_cluster, tmp_path, "het.sh", HET_HEADER, """
        srun --het-group=0,1 hostname
        echo "3 passed in 0.10s"
    """)
    report = run(spec)
    job = report.job_id
    assert report.status is Status.PASSED, report.render_text()
    assert report.exit_code == 0 and report.slurm_state == "COMPLETED"
    assert [(p["id"], p["state"]) for p in report.metrics["parts"]] == [
        (f"{job}+0", "COMPLETED"), (f"{job}+1", "COMPLETED")]
    assert report.metrics["passed"] == 3
    assert len([line for line in report.log_tail if line.startswith("n")]) == 2  # 2 nodes


def test_a_het_job_whose_script_fails_after_its_step_is_failed(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = batch_spec(local_cluster, tmp_path, "het-fails.sh", HET_HEADER, """
        srun --het-group=0,1 hostname
        echo "1 failed in 0.10s"
        exit 3
    """)
    report = run(spec)
    job = report.job_id
    assert report.status is Status.FAILED, report.render_text()
    assert report.exit_code == 3
    # Slurm ends every component FAILED 3:0 (recorded: arrays_hetjobs.txt)
    assert {p["id"]: (p["state"], p["exit_code"]) for p in report.metrics["parts"]} == {
        f"{job}+0": ("FAILED", 3), f"{job}+1": ("FAILED", 3)}
    assert f"het component {job}+0 FAILED, exit code 3" in report.errors
