"""The judge alone (test_edges' style): build what a run saw (``RunFacts``), ask
``report_of`` for the report, assert the status, the first words of the summary and the
diagnosis rows. No fake cluster, no clock, no file: the judge is pure.

Every status of ``Status`` and every rule of docs/report.md's "How the status of a job
is decided" has a row (``RULES`` is read from the page).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm.jobstate import JobState
from slurm_fsm.report import Status
from slurm_fsm.results import report_of
from slurm_fsm.runfacts import Failure, Mode, OutputSnapshot, Phase, RunFacts
from slurm_fsm.spec import JobSpec, WorkflowType
from slurm_fsm.testing import make_spec

DOCS = Path(__file__).resolve().parents[1] / "docs" / "report.md"


def ran(*lines: str, exit_code: int | None = 0, hits: dict[str, int] | None = None,
        **over: Any) -> RunFacts:
    """A persistent job that ran and wrote ``lines``."""
    out = OutputSnapshot(head=lines[:50], tail=lines, parser_lines=lines,
                         pattern_hits=hits or {}, empty=not lines,
                         hang_line=next((x for x in lines if "hang detected" in x.lower()), ""))
    base: dict[str, Any] = dict(mode=Mode.PERSISTENT, phase=Phase.COLLECTED,
                                allocation_id="77", exit_code=exit_code, output=out,
                                stdout="/w/run.log", path=("Ready", "Running", "Ready"))
    return RunFacts(**{**base, **over})


def one_shot(*lines: str, state: JobState | None = JobState.COMPLETED,
             exit_code: int | None = 0, **over: Any) -> RunFacts:
    return ran(*lines, mode=Mode.ONE_SHOT, allocation_id=None, job_id="1234",
               slurm_state=state, exit_code=exit_code, **over)


def failed(phase: Phase, message: str, detail: str = "", **over: Any) -> RunFacts:
    return RunFacts(mode=Mode.PERSISTENT, phase=phase,
                    failure=Failure(phase=phase, message=message, detail=detail), **over)


PYTEST_OK = ("collected 4 items", "===== 3 passed, 1 skipped in 2.50s =====")

#: (rule of docs/report.md, spec overrides, facts, status, summary's first words,
#:  diagnosis symptoms)
ROWS: list[tuple[str, dict[str, Any], RunFacts, Status, str, list[str]]] = [
    # a. stopped from outside
    ("a", {}, ran("step 1", interrupted="interrupted by SIGTERM"), Status.CANCELLED,
     "CANCELLED: interrupted by SIGTERM; allocation 77 is kept", ["CANCELLED"]),
    ("a", {}, RunFacts(mode=Mode.RUN, phase=Phase.INPUT, interrupted="Ctrl-C"),
     Status.CANCELLED, "CANCELLED: Ctrl-C", ["CANCELLED"]),
    # b. the pre-step
    ("b", {}, RunFacts(mode=Mode.PERSISTENT, phase=Phase.PRE_STEP,
                       failure=Failure(phase=Phase.PRE_STEP, message="build failed: exit 2"),
                       log_tail=("a.cpp:1:1: error: boom",)),
     Status.BUILD_FAILED, "build failed: exit 2", ["BUILD_FAILED"]),
    ("b", {}, RunFacts(mode=Mode.ONE_SHOT, phase=Phase.PRE_STEP,
                       failure=Failure(phase=Phase.PRE_STEP, message="build failed")),
     Status.BUILD_FAILED, "build failed", ["empty output log", "BUILD_FAILED"]),
    # c. a failure before the job could be judged
    ("c", {}, failed(Phase.STEP0, "salloc failed: Invalid account"), Status.ERROR,
     "salloc failed: Invalid account", ["ERROR"]),
    ("c", {}, failed(Phase.STEP0, "import failed",
                     detail="pyxis: importing docker image\npyxis: failed to import docker "
                            "image\ncurl: (6) Could not resolve host"),
     Status.ERROR, "import failed", ["pyxis: failed to import docker image"]),
    ("c", {}, RunFacts(mode=Mode.ONE_SHOT, phase=Phase.SUBMITTING, failure=Failure(
        phase=Phase.SUBMITTING, message="sbatch failed: Invalid partition",
        errors=("Invalid partition",))), Status.ERROR, "sbatch failed: Invalid partition",
     ["ERROR"]),
    ("c", {}, RunFacts(mode=Mode.RUN, phase=Phase.INPUT, failure=Failure(
        phase=Phase.INPUT, message="job spec x.json: 1 problem",
        errors=("script_path: no such file: /s.sh",))), Status.ERROR, "job spec x.json",
     ["ERROR"]),
    ("c", {}, RunFacts(mode=Mode.RELEASE, phase=Phase.STEP0, failure=Failure(
        phase=Phase.STEP0, message="scancel failed")), Status.ERROR, "scancel failed",
     ["ERROR"]),
    # d. a release
    ("d", {}, RunFacts(mode=Mode.RELEASE, phase=Phase.STEP0, released=True,
                       allocation_id="77", summary="released allocation 77"),
     Status.RELEASED, "released allocation 77", []),
    # 1. the hang marker
    ("1", {}, ran("step 1", "NCCL watchdog: Hang Detected", exit_code=143, hang=True,
                  cancelled_steps=("77.0",)),
     Status.HANG_DETECTED, "HANG_DETECTED: the log reported a hang: 'NCCL watchdog: Hang "
     "Detected'; step on allocation 77, exit code 143; hang detected, cancelled 77.0",
     ["HANG_DETECTED"]),
    ("1", {}, ran("Hang detected after 5 seconds.", exit_code=137, hang=True,
                  hang_after_end=True),
     Status.HANG_DETECTED, "HANG_DETECTED: the log reported a hang", ["HANG_DETECTED"]),
    ("1", {}, one_shot("hang detected", state=JobState.CANCELLED, exit_code=None, hang=True),
     Status.HANG_DETECTED, "HANG_DETECTED: the log reported a hang", ["HANG_DETECTED"]),
    # 2. the monitor's timeout
    ("2", {"monitor_timeout_seconds": 600}, ran("working", exit_code=143, timed_out=True),
     Status.TIMEOUT, "TIMEOUT: monitor_timeout_seconds (600 s) passed before the job ended",
     ["TIMEOUT (monitor_timeout_seconds)"]),
    # 3. Slurm's final state
    ("3", {}, one_shot("x", state=JobState.TIMEOUT, exit_code=0), Status.TIMEOUT,
     "TIMEOUT: the job reached its time limit (Slurm state TIMEOUT)", ["TIMEOUT (Slurm state "
                                                                       "TIMEOUT)"]),
    ("3", {}, one_shot("x", state=JobState.DEADLINE, exit_code=0), Status.TIMEOUT,
     "TIMEOUT: the job", ["TIMEOUT (Slurm state DEADLINE)"]),
    ("3", {}, one_shot("x", state=JobState.OUT_OF_MEMORY, exit_code=0),
     Status.OUT_OF_MEMORY, "OUT_OF_MEMORY: the job", ["OUT_OF_MEMORY"]),
    ("3", {}, one_shot("x", state=JobState.CANCELLED, exit_code=0), Status.CANCELLED,
     "CANCELLED: the job", ["CANCELLED"]),
    ("3", {}, one_shot("x", state=JobState.PREEMPTED, exit_code=0), Status.CANCELLED,
     "CANCELLED: the job", ["CANCELLED (PREEMPTED)"]),
    ("3", {}, one_shot("x", state=JobState.NODE_FAIL, exit_code=1), Status.FAILED,
     "FAILED: the job", ["exit 1 and FAILED", "NODE_FAIL"]),
    ("3", {}, ran("x", exit_code=143, slurm_state=JobState.CANCELLED,
                  summary="allocation 77 was cancelled and ended under the job"),
     Status.CANCELLED, "CANCELLED: allocation 77 was cancelled and ended under the job",
     ["CANCELLED"]),
    # 4. a failure pattern
    ("4", {"failure_patterns": "CUDA error"}, ran("CUDA error: boom", "ALL DONE",
                                                  hits={"CUDA error": 1}),
     Status.FAILED, "FAILED: failure pattern matched: 'CUDA error' (1 lines)",
     ["failure pattern matched: CUDA error"]),
    # 5. the workflow's verdict
    ("5", {}, ran("E   AssertionError: boom", "=== 1 failed, 2 passed in 1.00s ===",
                  exit_code=0),
     Status.FAILED, "FAILED: pytest: 1 failed, 0 errors; step on allocation 77, exit code 0",
     ["pytest: 1 failed, 0 errors"]),
    # 6. the exit code unknown
    ("6", {}, one_shot("ok", state=None, exit_code=None), Status.ERROR,
     "ERROR: the exit code is unknown", ["ERROR"]),
    ("6", {}, one_shot(*PYTEST_OK, state=JobState.COMPLETED, exit_code=None),
     Status.PASSED, "PASSED: job 1234, exit code None", []),
    # 7. a non-zero exit code
    ("7", {}, ran(*PYTEST_OK, exit_code=3), Status.FAILED,
     "FAILED: exit code 3; step on allocation 77, exit code 3", ["exit 3 and FAILED"]),
    # 8. success patterns missing
    ("8", {"success_patterns": "ALL DONE"}, ran("finished", hits={"ALL DONE": 0}),
     Status.FAILED, "FAILED: no success pattern found in the log: 'ALL DONE'",
     ["no success pattern in the log"]),
    # 9. otherwise
    ("9", {}, ran(*PYTEST_OK), Status.PASSED,
     "PASSED: step on allocation 77, exit code 0; 3 passed, 1 skipped", []),
]


def documented_rules() -> list[str]:
    """The rule ids of docs/report.md's decision order (a-d, then 1-9)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### How the status of a job is decided", 1)[1]
    section = section.split("\n## ", 1)[0].split("\n### ", 1)[0]
    return [a or b for a, b in re.findall(r"^(?:- ([a-z])\.|(\d+)\.) ", section, re.M)]


@pytest.fixture
def spec(tmp_path: Path) -> JobSpec:
    return make_spec(tmp_path)


@pytest.mark.parametrize(("rule", "over", "facts", "status", "summary", "symptoms"), ROWS,
                         ids=[f"{r[0]}-{r[3].name}-{i}" for i, r in enumerate(ROWS)])
def test_the_judge(tmp_path: Path, rule: str, over: dict[str, Any], facts: RunFacts,
                   status: Status, summary: str, symptoms: list[str]) -> None:
    spec = make_spec(tmp_path, workflow_type=WorkflowType.PYTEST.value, **over)
    report = report_of(facts, spec)
    assert report.status is status
    assert report.summary.startswith(summary), report.summary
    assert [d["symptom"] for d in report.diagnosis] == symptoms
    assert report.mode == facts.mode.value
    assert report.task_type == "pytest"


def test_every_status_and_every_documented_rule_has_a_row() -> None:
    rules = documented_rules()
    assert rules == [*"abcd", *map(str, range(1, 10))]  # the page is really read
    assert sorted({r[0] for r in ROWS}) == sorted(rules)
    assert {r[3] for r in ROWS} == set(Status)


def test_a_run_that_was_not_judged_by_its_output_needs_no_spec() -> None:
    report = report_of(RunFacts(mode=Mode.RUN, phase=Phase.INPUT, failure=Failure(
        phase=Phase.INPUT, message="bad", errors=("a", "b"))), None)
    assert (report.status, report.task_type, report.mode, report.errors) == (
        Status.ERROR, "unknown", "run", ["a", "b"])
    with pytest.raises(ValueError, match="needs its spec"):
        report_of(ran("x"), None)


def test_a_setup_step_s_pyxis_lines_are_errors_of_their_own(spec: JobSpec) -> None:
    facts = failed(Phase.STEP0, "import failed",
                   detail="slurmstepd-n1: error: pyxis: failed to import docker image\n"
                          "slurmstepd-n2: error: pyxis: failed to import docker image\n")
    assert report_of(facts, spec).errors == ["import failed",
                                             "pyxis: failed to import docker image"]


def test_a_setup_step_s_own_lines_are_diagnosed_whatever_the_message_holds(
        spec: JobSpec) -> None:
    """The real import step's message held n2's output and n1's last line, the line that
    says why (n1's) only in the step's detail: the diagnosis said "ERROR" one run in
    four (test_containers_real, missing mount source)."""
    facts = failed(Phase.STEP0, "container import of /i.sqsh failed with exit code 1:\n"
                   "slurmstepd-n2: error: pyxis: container was not started successfully "
                   "by another task\nslurmstepd-n1: error: pyxis: couldn't create enroot "
                   "start configuration script",
                   detail="slurmstepd-n1: error: pyxis: --container-mounts: source path "
                          "does not exist: /no-such-dir\n")
    assert [row["symptom"] for row in report_of(facts, spec).diagnosis] == [
        "pyxis: --container-mounts: source path does not exist"]


def test_the_judge_keeps_the_order_of_warnings_and_says_when_progress_stopped(
        spec: JobSpec) -> None:
    facts = ran(*PYTEST_OK, warnings=("spec: did you mean x?",), messages=(
        "could not check allocation 77: boom", "spec: did you mean x?"),
        progress_problem="BrokenPipeError")
    assert report_of(facts, spec).warnings == [
        "spec: did you mean x?", "could not check allocation 77: boom",
        "progress output stopped (BrokenPipeError); the run went on without it"]


def test_accounting_figures_add_to_the_metrics(spec: JobSpec) -> None:
    facts = one_shot(*PYTEST_OK, extra_metrics={"max_rss": "1G", "passed": 99,
                                                "cancelled_by": "0"})
    metrics = report_of(facts, spec).metrics
    assert (metrics["max_rss"], metrics["passed"], metrics["cancelled_by"]) == ("1G", 3, "0")


def test_a_hang_keeps_200_lines_of_tail_others_100(spec: JobSpec) -> None:
    lines = (*(f"line {i}" for i in range(199)), "hang detected")
    assert len(report_of(ran(*lines, hang=True), spec).log_tail) == 200
    assert len(report_of(ran(*lines, exit_code=1), spec).log_tail) == 100


def test_facts_are_frozen() -> None:
    facts = ran("x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        facts.exit_code = 1  # type: ignore[misc]
