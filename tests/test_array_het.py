"""Array and heterogeneous batch jobs (issue 44 items 1 and 2), on the outputs recorded on
the real Slurm 22.05 cluster (tests/data/real/local/slurm/arrays_hetjobs.txt): every task
or component is read, the worst decides, and a job is not judged while a part of it has
not ended."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import JobOutcome, part_of, worst_part
from slurm_fsm.errors import JobNotFound
from slurm_fsm.jobstate import JobState

RECORDED = (Path(__file__).parent / "data" / "real" / "local" / "slurm"
            / "arrays_hetjobs.txt")


def recorded(block: str, command: str) -> str:
    """The output of the first command of ``block`` starting with ``command``."""
    text = RECORDED.read_text(encoding="utf-8")
    body = re.split(r"(?m)^## ", text)
    found = next(b for b in body if b.startswith(block + " "))
    for cmd in re.split(r"(?m)^\$ ", found)[1:]:
        line, _, out = cmd.partition("\n")
        if line.startswith(command):
            return out.rsplit("[exit ", 1)[0]
    raise KeyError(f"{block}: no {command!r}")


# ------------------------------------------------------------------------- squeue
def test_a_running_array_is_active_though_squeue_lists_only_its_tasks() -> None:
    info = slurmcli.parse_job(recorded("issue_array_running", "squeue"), "11")
    assert info.job_id == "11" and info.state is JobState.RUNNING and info.is_active
    assert info.parts == ("11_2", "11_1", "11_0")


def test_a_pending_het_job_is_pending_though_squeue_lists_only_its_components() -> None:
    info = slurmcli.parse_job(recorded("issue_het_pending", "squeue"), "12")
    assert info.state is JobState.PENDING and info.parts == ("12+0", "12+1")


def test_the_pending_rest_of_a_throttled_array_is_a_part() -> None:
    info = slurmcli.parse_job(recorded("throttled_array_running", "squeue"), "6")
    assert info.state is JobState.PENDING and info.parts == ("6_[0-2%1]",)


def test_an_ended_array_has_no_squeue_row() -> None:
    with pytest.raises(JobNotFound):
        slurmcli.parse_job(recorded("issue_array_ended", "squeue"), "11")


def test_another_jobs_parts_are_not_this_jobs() -> None:
    assert part_of("16_0", "16") and part_of("16_[1-2%1]", "16") and part_of("19+1", "19")
    assert not part_of("160_0", "16") and not part_of("16", "16")
    assert not part_of("1+0", "16") and not part_of("16.batch", "16")


# -------------------------------------------------------------------------- sacct
def test_an_array_is_judged_by_every_task_the_failed_one_decides() -> None:
    outcome = slurmcli.parse_sacct(recorded("issue_array_ended", "sacct"), "11")
    assert outcome is not None
    assert [(p.job_id, str(p.state), p.exit_code) for p in outcome.parts] == [
        ("11_0", "COMPLETED", 0), ("11_1", "FAILED", 1), ("11_2", "COMPLETED", 0)]
    assert outcome.state is JobState.FAILED and outcome.exit_code == 1
    assert {s.job_id for s in outcome.steps} == {"11_0.batch", "11_1.batch", "11_2.batch"}


def test_an_array_accounting_still_shows_as_pending_is_not_final() -> None:
    """While the tasks ran, sacct showed ``11 PENDING`` (and ``11.batch RUNNING``)."""
    outcome = slurmcli.parse_sacct(recorded("issue_array_running", "sacct"), "11")
    assert outcome is not None and outcome.state.is_active


def test_a_het_job_is_read_from_its_component_rows() -> None:
    outcome = slurmcli.parse_sacct(recorded("issue_het_ended", "sacct"), "12")
    assert outcome is not None
    assert outcome.state is JobState.COMPLETED and outcome.exit_code == 0
    assert [p.job_id for p in outcome.parts] == ["12+0", "12+1"]
    assert {s.job_id for s in outcome.steps} == {"12+0.batch", "12+0.0", "12+1.0"}


def test_a_het_job_pending_in_accounting_is_not_final() -> None:
    outcome = slurmcli.parse_sacct(recorded("het_pending_accounting", "sacct"), "2")
    assert outcome is not None and outcome.state is JobState.PENDING
    assert [p.job_id for p in outcome.parts] == ["2+0", "2+1"]


def test_a_het_job_with_no_accounting_row_yet_is_unknown() -> None:
    assert slurmcli.parse_sacct(recorded("issue_het_pending", "sacct"), "12") is None


# ----------------------------------------------------------------------- scontrol
def test_scontrol_of_an_array_is_every_task_not_its_first_record() -> None:
    """The first record of ``scontrol show job 11`` is task 2 (COMPLETED): the array
    failed by task 1."""
    outcome = slurmcli.parse_scontrol_job(recorded("issue_array_ended", "scontrol"), "11")
    assert outcome.state is JobState.FAILED and outcome.exit_code == 1
    assert [p.job_id for p in outcome.parts] == ["11_0", "11_1", "11_2"]


def test_scontrol_of_a_pending_het_job_keeps_it_active() -> None:
    outcome = slurmcli.parse_scontrol_job(recorded("issue_het_pending", "scontrol"), "12")
    assert outcome.state is JobState.PENDING
    assert [p.job_id for p in outcome.parts] == ["12+0", "12+1"]


def test_the_true_exit_code_is_each_tasks_own() -> None:
    """scontrol's records replace sacct's exit code task by task, never task 2's for the
    whole array (the first record)."""
    sacct = slurmcli.parse_sacct(recorded("throttled_array_ended", "sacct"), "6")
    controller = slurmcli.parse_scontrol_job(recorded("throttled_array_ended", "scontrol"), "6")
    assert sacct is not None
    true = slurmcli.with_true_exit_code(sacct, controller)
    assert true.state is JobState.FAILED and true.exit_code == 3
    assert [p.exit_code for p in true.parts] == [0, 0, 3]


def test_each_array_task_names_its_own_files() -> None:
    files = slurmcli.parse_scontrol_files(recorded("issue_array_ended", "scontrol"), "11")
    assert [t.stdout.name for t in files.tasks] == [
        "slurm-11_0.out", "slurm-11_1.out", "slurm-11_2.out"]
    assert [t.job_id for t in files.tasks] == ["11_0", "11_1", "11_2"]
    assert not files.tasks_pending and "4294967294" not in str(files.stdout)


def test_tasks_not_started_name_no_file() -> None:
    """The pending record shows %a as 4294967294: no task's file."""
    files = slurmcli.parse_scontrol_files(recorded("throttled_array_running", "scontrol"),
                                          "6")
    assert files.tasks == () and files.tasks_pending


def test_a_het_job_writes_where_component_0_says() -> None:
    files = slurmcli.parse_scontrol_files(recorded("issue_het_ended", "scontrol"), "12")
    assert files.stdout.name == "slurm-12.out" and files.tasks == ()


# ------------------------------------------------------------------ the worst part
def _part(job_id: str, state: str, code: int = 0, signal: int = 0) -> JobOutcome:
    return JobOutcome(job_id=job_id, state=state, exit_code=code, signal=signal)


@pytest.mark.parametrize(("states", "worst"), [
    (["COMPLETED", "FAILED", "COMPLETED"], 1),
    (["COMPLETED", "RUNNING"], 1),
    (["FAILED", "TIMEOUT"], 1),
    (["CANCELLED", "OUT_OF_MEMORY", "TIMEOUT"], 1),
    (["COMPLETED", "COMPLETED"], 0),
])
def test_the_worst_part_decides(states: list[str], worst: int) -> None:
    parts = [_part(f"5_{i}", s, 1 if s == "FAILED" else 0) for i, s in enumerate(states)]
    assert worst_part(parts) is parts[worst]


def test_a_completed_part_with_a_signal_is_worse_than_one_that_passed() -> None:
    parts = [_part("5+0", "COMPLETED"), _part("5+1", "COMPLETED", 0, 9)]
    assert worst_part(parts) is parts[1]
    whole = JobOutcome.of_parts("5", parts)
    assert whole.exit_status == 137 and whole.parts == tuple(parts)
