"""Issue 17's parser items: pytest 9 subtests (3), TensorRT-LLM's accuracy report (16),
failing tests named first (18). The real texts themselves are in tests/data/real/
(test_golden_corpus.py); these pin the single behaviours."""

from __future__ import annotations

import pytest

from slurm_fsm.results import Status, decide, parse_eval, parse_pytest
from slurm_fsm.spec import WorkflowType
from slurm_fsm.workflows import workflow

from conftest import SpecFactory


def test_pytest9_subtests_summary() -> None:
    line = "========= 1 failed, 1401 passed, 10 skipped, 1 xfailed, 3 subtests passed in 11.13s ="
    assert parse_pytest([line]) == {"failed": 1, "passed": 1401, "skipped": 10, "xfailed": 1,
                                    "subtests_passed": 3, "seconds": 11.13}


def test_pytest9_failed_subtests_fail_the_run() -> None:
    metrics = parse_pytest(["3 passed, 2 subtests failed, 5 subtests passed in 0.20s"])
    assert metrics["subtests_failed"] == 2
    decision = decide(exit_code=1, slurm_state="FAILED", hang=False, timed_out=False,
                      success_hits={}, failure_hits={}, success_patterns=[],
                      workflow_type=WorkflowType.PYTEST, metrics=metrics)
    assert decision.status is Status.FAILED and "pytest: 1 failed" in decision.reason
    assert "2 subtests failed" in workflow(WorkflowType.PYTEST).summarize(metrics)


def test_reference_accuracy_is_not_a_measured_figure() -> None:
    lines = ["[12/03/2026-11:00:00] [TRT-LLM] [I] lm-eval gsm8k average accuracy: 73.88",
             "Reference accuracy: 74.450", "Threshold: 71.247",
             "===========================================================",
             "Evaluated accuracy: 73.880"]
    m = parse_eval(lines)
    assert m["accuracy_by_task"] == {"gsm8k": 73.88}
    assert 74.45 not in m["accuracy"]
    assert m["reference_accuracy"] == 74.45 and m["threshold"] == 71.247
    assert m["evaluated_accuracy"] == 73.88


def test_lm_eval_task_with_a_scores_filter() -> None:
    m = parse_eval(["[TRT-LLM] [I] lm-eval gpqa_diamond_cot_zeroshot_aa "
                    "exact_match,flexible-extract accuracy: 45.96"])
    assert m["accuracy_by_task"] == {"gpqa_diamond_cot_zeroshot_aa": 45.96}


def test_failing_tests_are_named_before_traceback_lines() -> None:
    """Item 18: 41 failures, each with its traceback: the 20 lines name 20 tests."""
    from slurm_fsm.results import MAX_ERRORS, errors_from
    lines: list[str] = []
    for i in range(41):
        lines += ["Traceback (most recent call last):", '  File "t.py", line 1',
                  f"ValueError: bad value {i}", f"E   AssertionError: case {i}"]
    lines += [f"FAILED tests/test_a.py::test_{i} - AssertionError: case {i}" for i in range(41)]
    lines.append("==== 41 failed, 3 passed in 1.00s ====")
    errors = errors_from(lines)
    assert len(errors) == MAX_ERRORS
    assert all(e.startswith("FAILED tests/test_a.py::test_") for e in errors)


# --------------------------------------------------------------------- item 17
# Recorded on the local Slurm 22.05.8 cluster: a batch script whose last command is
# `srun bash -c 'kill -9 $$'` (scontrol: ExitCode=137:0), and one ending `exit 9`
# after such a step (scontrol: ExitCode=9:0); sacct prints both as 9:0.
SACCT_SRUN_KILLED = "3|FAILED|9:0|00:00:01|\n3.batch|FAILED|9:0|00:00:01|1K\n" \
                    "3.0|CANCELLED|0:9|00:00:01|1K\n"


def test_sacct_modulo_128_exit_code_is_corrected_by_scontrol() -> None:
    from slurm_fsm.slurmcli import parse_sacct, parse_scontrol_job, with_true_exit_code
    sacct = parse_sacct(SACCT_SRUN_KILLED, "3")
    assert sacct is not None and sacct.exit_code == 9  # what sacct says
    killed = parse_scontrol_job("JobId=3 JobName=x\n   JobState=FAILED Reason=NonZeroExitCode"
                                " ExitCode=137:0\n", "3")
    assert with_true_exit_code(sacct, killed).exit_code == 137
    exit9 = parse_scontrol_job("JobId=3 JobName=x\n   JobState=FAILED ExitCode=9:0\n", "3")
    assert with_true_exit_code(sacct, exit9).exit_code == 9


def test_without_scontrol_a_step_killed_by_the_same_signal_gives_128_plus_n() -> None:
    from slurm_fsm.slurmcli import parse_sacct, with_true_exit_code
    sacct = parse_sacct(SACCT_SRUN_KILLED, "3")
    assert sacct is not None
    assert with_true_exit_code(sacct, None).exit_code == 137
    plain = parse_sacct("4|FAILED|3:0|00:00:01|\n4.batch|FAILED|3:0|00:00:01|1K\n", "4")
    assert plain is not None and with_true_exit_code(plain, None).exit_code == 3


# --------------------------------------------------------------------- item 12
@pytest.mark.parametrize("held", ["REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT",
                                  "REQUEUE_FED"])
def test_a_held_allocation_keeps_its_state_file(make_spec: SpecFactory, held: str) -> None:
    """Step 0C: a held allocation is still there: waited for, then reported with its
    state file kept; never dropped while a new one is allocated beside it."""
    from test_machine import machine, ready_allocation, slurm_ops

    from slurm_fsm.step0.table import State
    from slurm_fsm.testing import FakeCluster
    fake = FakeCluster()
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.jobs[old.job_id].state = held
    m = machine(spec, fake, pending_wait_s=60)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and f"still {held}" in m.failure.message
    assert "allocate" not in slurm_ops(fake) and "cancel" not in slurm_ops(fake)
    assert spec.state_path.exists()


@pytest.mark.parametrize("stopped", ["STOPPED", "SIGNALING"])
def test_a_stopped_allocation_is_replaced_not_left_behind(make_spec: SpecFactory,
                                                          stopped: str) -> None:
    """Like SUSPENDED: it holds its nodes but cannot run a step now: cancelled, then a
    new one is allocated (the old one is never left running beside it)."""
    from test_machine import machine, ready_allocation

    from slurm_fsm.step0.table import State
    from slurm_fsm.testing import FakeCluster
    fake = FakeCluster()
    spec = make_spec()
    old = ready_allocation(spec, fake)
    fake.jobs[old.job_id].state = stopped
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert fake.jobs[old.job_id].state == "CANCELLED"
