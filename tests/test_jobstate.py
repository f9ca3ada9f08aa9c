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
    assert state.is_live == (state.is_active and not state.is_ending)
    assert not (state.is_active and state.is_final)
    assert state.is_pending == (state in (
        JobState.PENDING, JobState.CONFIGURING, JobState.REQUEUED, JobState.REQUEUE_HOLD,
        JobState.REQUEUE_FED, JobState.RESV_DEL_HOLD, JobState.SPECIAL_EXIT))
    assert state.is_running == (state is JobState.RUNNING)
    assert state.is_ending == (state in (JobState.COMPLETING, JobState.STAGE_OUT))
    assert state.meaning  # every state says what it means
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
    """String constants equal to a job state's name, outside docstrings and enum bodies
    and lines marked ``# not a job state`` (pytest's own FAILED, say)."""
    text = path.read_text()
    marked = {i for i, line in enumerate(text.splitlines(), 1) if "# not a job state" in line}
    tree = ast.parse(text)
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
            if isinstance(n, ast.Constant) and n.value in names and id(n) not in skip
            and n.lineno not in marked]


def test_no_job_state_is_written_as_a_string() -> None:
    """Job states are JobState members everywhere (the hand-kept sets and literals that
    drifted apart are gone), so that a new predicate has one home."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name not in NOT_YET
             for hit in _state_literals(path)]
    assert found == []


#: The JOB STATE CODES of squeue(1), Slurm 22.05.8 (Debian 12 slurm-client), in order.
SQUEUE_MAN_STATES = [
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "CONFIGURING", "COMPLETING", "DEADLINE", "FAILED",
    "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "PREEMPTED", "RUNNING", "RESV_DEL_HOLD",
    "REQUEUE_FED", "REQUEUE_HOLD", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING",
    "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "SUSPENDED", "TIMEOUT",
]


@pytest.mark.parametrize("name", SQUEUE_MAN_STATES)
def test_every_squeue_state_is_known(name: str) -> None:
    state = JobState.parse(name)
    assert state is not JobState.UNKNOWN and state == name
    # every state is either still there (active) or ended (final), never neither
    assert state.is_active != state.is_final


@pytest.mark.parametrize("name", ["STOPPED", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED",
                                  "RESV_DEL_HOLD", "SPECIAL_EXIT", "STAGE_OUT"])
def test_held_stopped_and_staging_jobs_are_still_there(name: str) -> None:
    """The one-shot monitor keeps watching them; step 0C keeps their state file."""
    assert JobState.parse(name).is_active
    assert JobInfo(job_id="1", state=name).is_active


def test_the_man_page_lists_no_state_we_do_not_know() -> None:
    """When squeue(1) is installed, its JOB STATE CODES are all known (a newer Slurm
    adding a state makes this fail, not the monitor)."""
    import re
    import shutil
    import subprocess
    if shutil.which("man") is None:
        pytest.fail("man is not installed: cannot read squeue(1)")
    proc = subprocess.run(["man", "-P", "cat", "squeue"], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"})
    text = proc.stdout
    start = re.search(r"^JOB STATE CODES\s*$", text, re.M)
    assert start, "squeue(1) has no JOB STATE CODES section"
    end = re.search(r"^[A-Z][A-Z ]+$", text[start.end():], re.M)  # the next heading
    section = text[start.end():start.end() + (end.start() if end else len(text))]
    names = re.findall(r"^\s+[A-Z]{1,3}\s+([A-Z_]{4,})\s", section, re.M)
    assert sorted(names) == sorted(SQUEUE_MAN_STATES)


@pytest.mark.parametrize(("text", "state"), [
    ("OUT_OF_ME+", JobState.OUT_OF_MEMORY), ("REQUEUE_H+", JobState.REQUEUE_HOLD),
    ("RESV_DEL_+", JobState.RESV_DEL_HOLD), ("SPECIAL_E+", JobState.SPECIAL_EXIT),
    ("REQUEUE+", JobState.UNKNOWN),  # three states start so: not guessed
])
def test_sacct_truncated_states(text: str, state: JobState) -> None:
    assert JobState.parse(text) is state
