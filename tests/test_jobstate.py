"""slurm_fsm.jobstate: one vocabulary for Slurm job states, and no strings elsewhere."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from slurm_fsm.backend import JobInfo, JobOutcome, StepInfo
from slurm_fsm.jobstate import JobState
from slurm_fsm.results import Status, status_of_state

PACKAGE = Path(__file__).resolve().parent.parent / "slurm_fsm"


@pytest.mark.parametrize(("text", "state"), [
    ("CANCELLED by 0", JobState.CANCELLED), ("CANCELLED+", JobState.CANCELLED),
    ("running", JobState.RUNNING), (" PENDING ", JobState.PENDING),
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY), ("SOMETHING_NEW", JobState.UNKNOWN),
    ("", JobState.UNKNOWN), (None, JobState.UNKNOWN),
])
def test_parse(text: str | None, state: JobState) -> None:
    assert JobState.parse(text) is state


def test_it_is_the_slurm_text() -> None:
    assert JobState.RUNNING == "RUNNING" and JobState.PENDING == "PENDING"
    assert json.dumps({"s": JobState.COMPLETING}) == '{"s": "COMPLETING"}'
    assert f"{JobState.TIMEOUT}" == "TIMEOUT"


def test_records_parse_their_state() -> None:
    info = JobInfo(job_id="1", state="CANCELLED by 0")
    assert info.state is JobState.CANCELLED and info.state == "CANCELLED"
    assert not info.is_active
    assert JobInfo(job_id="1", state="PENDING", reason="PartitionNodeLimit").never_starts
    assert JobOutcome(job_id="1", state="TIMEOUT", exit_code=0).state is JobState.TIMEOUT
    assert StepInfo(job_id="1", step_id="0").state is JobState.RUNNING


@pytest.mark.parametrize("state", list(JobState))
def test_predicates_agree(state: JobState) -> None:
    assert state.is_live == (state.is_active and state is not JobState.COMPLETING)
    assert not (state.is_active and state.is_final)
    assert state.is_pending == (state in (JobState.PENDING, JobState.CONFIGURING))
    assert state.is_running == (state is JobState.RUNNING)
    assert state.is_ending == (state is JobState.COMPLETING)
    if state.exited:
        assert state.is_final and status_of_state(state) is None
    if status_of_state(state) is not None:
        assert state.is_final  # only a final state decides a status by itself


def test_one_map_from_final_state_to_status() -> None:
    assert {s: status_of_state(s) for s in JobState if status_of_state(s)} == {
        JobState.TIMEOUT: Status.TIMEOUT, JobState.DEADLINE: Status.TIMEOUT,
        JobState.OUT_OF_MEMORY: Status.OUT_OF_MEMORY, JobState.CANCELLED: Status.CANCELLED,
        JobState.PREEMPTED: Status.CANCELLED, JobState.REVOKED: Status.CANCELLED,
        JobState.NODE_FAIL: Status.FAILED, JobState.BOOT_FAIL: Status.FAILED,
    }
    assert status_of_state("CANCELLED by 1000") is Status.CANCELLED
    assert status_of_state(None) is None


#: Converted by the lead after the edge-table rewrite lands (issue 13 item 1).
NOT_YET: set[str] = set()


def _state_literals(path: Path) -> list[str]:
    """String constants equal to a job state's name, outside docstrings and enum bodies."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.ClassDef) and any(
                getattr(b, "id", "") in ("Enum", "StrEnum") for b in node.bases):
            skip.update(id(n) for n in ast.walk(node))  # Status, JobState themselves
    names = {s.value for s in JobState} - {"UNKNOWN"}
    return [f"{path.name}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in names and id(n) not in skip]


def test_no_job_state_is_written_as_a_string() -> None:
    """Job states are JobState members everywhere (the hand-kept sets and literals that
    drifted apart are gone), so that a new predicate has one home."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name not in NOT_YET
             for hit in _state_literals(path)]
    assert found == []
