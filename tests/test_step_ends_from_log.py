"""Issue 44 items 6 and 7: a persistent run's step that Slurm ended by its own time
limit, and a step cancelled from outside whose accounting row came too late.

A step past its own ``--time`` is TIMEOUT in accounting and slurmstepd's line says
``*** STEP 5.1 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***``: the run is TIMEOUT, not
FAILED 143. A step cancelled from outside whose row sacct does not have yet when the
run asks (slurmdbd lags): slurmstepd's own ``*** STEP 5.1 ON n1 CANCELLED AT ... ***``
line in the log says what accounting cannot, so the verdict no longer depends on
accounting's timing. The lines come relayed in every form Slurm relays them
(``slurmstepd-n1: error:``, 26.05's ``[2026-12-06T18:00:24.403] error:``).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.oneshot import step_ends_of
from slurm_fsm.results import Status, logged_step_ends, report_of, step_verdict
from slurm_fsm.runfacts import Mode, OutputSnapshot, Phase, RunFacts, StateSource, StepEnd
from slurm_fsm.slurmcli import parse_sacct
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.testing import make_spec as spec_of

from conftest import SpecFactory

RELAYS = ("slurmstepd-n1: error: ", "[2026-12-06T18:00:24.403] error: ", "slurmstepd: error: ")
CANCEL = "*** STEP 5.1 ON n1 CANCELLED AT 2026-12-06T18:00:24 ***"
TIME_LIMIT = "*** STEP 5.1 ON n1 CANCELLED AT 2026-12-06T18:01:24 DUE TO TIME LIMIT ***"


def test_a_step_accounting_says_timed_out_is_timeout() -> None:
    end = StepEnd(step="5.1", state=JobState.TIMEOUT, signal=15)
    verdict = step_verdict([end], 143)
    assert verdict is not None and verdict.status is Status.TIMEOUT, verdict
    assert verdict.reason == "step 5.1 reached its own time limit (sacct: TIMEOUT)"


def test_a_script_that_went_on_after_its_step_timed_out_is_judged_by_its_exit() -> None:
    # as for a cancelled step: a script that exited by itself says what happened
    assert step_verdict([StepEnd(step="5.1", state=JobState.TIMEOUT)], 1) is None


@pytest.mark.parametrize("relay", RELAYS)
@pytest.mark.parametrize(("line", "state"), [(CANCEL, JobState.CANCELLED),
                                             (TIME_LIMIT, JobState.TIMEOUT)])
def test_slurmstepds_line_tells_how_a_step_ended(relay: str, line: str,
                                                 state: JobState) -> None:
    lines = ["step starts", relay + line, "srun: error: n1: task 0: Terminated"]
    got = logged_step_ends(lines, ["5.1", "5.2"])
    assert got == [StepEnd(step="5.1", state=state, logged=line)]
    assert logged_step_ends(lines, ["5.2"]) == []  # another step's line says nothing


def test_slurm_26_05s_cancel_line_names_the_signal() -> None:
    """The real 26.05.5 cluster's log of ``scancel 296.1`` (its real test, issue 44):
    ``DUE to SIGNAL Killed``, with a lower-case ``to``."""
    log = ["step starts",
           "[2026-12-06T18:45:54.969] error: *** STEP 296.1 ON n1 CANCELLED AT "
           "2026-12-06T18:45:54 DUE to SIGNAL Killed ***",
           "srun: Job step aborted: Waiting up to 3 seconds for job step to finish.",
           "srun: error: n1: task 0: Killed"]
    (end,) = logged_step_ends(log, ["296.1"])
    assert end.state is JobState.CANCELLED
    assert end.logged == ("*** STEP 296.1 ON n1 CANCELLED AT 2026-12-06T18:45:54 DUE to "
                          "SIGNAL Killed ***")


def test_a_step_cancelled_as_the_log_says_is_cancelled_without_accounting() -> None:
    ends = logged_step_ends(["slurmstepd-n1: error: " + CANCEL], ["5.1"])
    verdict = step_verdict(ends, 137)
    assert verdict is not None and verdict.status is Status.CANCELLED, verdict
    assert verdict.reason == ("step 5.1 was cancelled (accounting had no row for it; "
                              "slurmstepd's line in the log: " + CANCEL + ")")
    timed = step_verdict(logged_step_ends([TIME_LIMIT], ["5.1"]), 143)
    assert timed is not None and timed.status is Status.TIMEOUT
    assert timed.reason == ("step 5.1 reached its own time limit (accounting had no row "
                            "for it; slurmstepd's line in the log: " + TIME_LIMIT + ")")


def test_a_job_line_or_a_line_in_the_middle_of_text_is_no_step_end() -> None:
    assert logged_step_ends(["*** JOB 5 ON n1 CANCELLED AT 2026-12-06T18:00:24 ***",
                             "echo '*** STEP 5.1 ON n1 CANCELLED AT x ***' > /dev/null"],
                            ["5.1"]) == []


# ------------------------------------------------------------------ on the fake cluster
def _lines(relay: str, line: str) -> tuple[str, ...]:
    return ("step starts", relay + line, "working", "working", "working", "working")


def _hit_script_step(fake: FakeCluster, act: str) -> object:
    def hit() -> None:
        alloc = next(j for j in fake.jobs.values() if j.kind == "alloc" and j.active)
        step = next(s.step_id for s in alloc.steps.values()
                    if not s.name.startswith("fsm-lease."))
        getattr(fake, act)(alloc.job_id, step)
    return hit


class _OnLine(Events):
    def __init__(self, line: str, act: object) -> None:
        self.line, self.act, self.done = line, act, False

    def output(self, text: str) -> None:
        if not self.done and self.line in text:
            self.done = True
            self.act()  # type: ignore[operator]


@pytest.mark.parametrize("relay", RELAYS[:2])
def test_a_fake_step_past_its_own_time_limit_is_timeout(make_spec: SpecFactory,
                                                        relay: str) -> None:
    fake = FakeCluster()
    spec = make_spec()
    line = TIME_LIMIT.replace("5.1", "100.1")  # the fake's first allocation, its step 1
    fake.script(spec.script_path, FakeScript(lines=_lines(relay, line)))
    report = Executor(spec, fake, clock=fake.clock, events=_OnLine(
        "DUE TO TIME LIMIT", _hit_script_step(fake, "time_limit_step"))).run()
    assert (report.status, report.exit_code) == (Status.TIMEOUT, 143), report.summary
    assert "step 100.1 reached its own time limit (sacct: TIMEOUT)" in report.summary
    assert report.metrics["step_states"] == {"100.1": "TIMEOUT"}
    symptoms = [r["symptom"] for r in report.diagnosis]
    assert "TIMEOUT (step 100.1: its own time limit)" in symptoms, symptoms
    assert not [s for s in symptoms if "monitor_timeout_seconds" in s]  # not the monitor's


@pytest.mark.parametrize("relay", RELAYS[:2])
def test_a_fake_step_cancelled_before_accounting_has_its_row_is_cancelled(
        make_spec: SpecFactory, relay: str) -> None:
    """slurmdbd lags past every question the run asks (7.5 s): slurmstepd's line in the
    log says the step was cancelled, so the verdict does not depend on the lag."""
    fake = FakeCluster()
    fake.accounting_lag_s = 60.0
    spec = make_spec()
    line = CANCEL.replace("5.1", "100.1")
    fake.script(spec.script_path, FakeScript(lines=_lines(relay, line)))
    report = Executor(spec, fake, clock=fake.clock, events=_OnLine(
        "CANCELLED AT", _hit_script_step(fake, "cancel_step"))).run()
    assert report.status is Status.CANCELLED, report.summary
    assert ("step 100.1 was cancelled (accounting had no row for it; slurmstepd's line "
            f"in the log: {line})") in report.summary
    assert report.metrics["step_states"] == {"100.1": "CANCELLED (slurmstepd's line)"}
    assert any("slurmstepd's line in the log decided" in n for n in report.notes), \
        report.notes
    # without the line, the exit code decides, and the note says so
    fake = FakeCluster()
    fake.accounting_lag_s = 60.0
    fake.script(spec.script_path, FakeScript(lines=_lines("", "step 100.1 runs")))
    bare = Executor(spec, fake, clock=fake.clock, events=_OnLine(
        "runs", _hit_script_step(fake, "cancel_step"))).run()
    assert (bare.status, bare.exit_code) == (Status.FAILED, 143), bare.summary


# ------------------------------------------------------------------ one-shot
DATA = Path(__file__).parent / "data" / "real" / "local" / "slurm-22.05"


def _one_shot_spec(tmp_path: Path) -> JobSpec:
    return spec_of(tmp_path, persistent_mode=False, log_file_pattern="oneshot_%j.out",
                   workflow_type="custom")


def _recorded_one_shot(name: str, job: str, exit_code: int) -> RunFacts:
    """What a one-shot run of the recorded job saw: accounting's rows (the job's exit
    code as ``scontrol show job`` says it, sacct's being modulo 128) and its output."""
    outcome = parse_sacct((DATA / f"sacct_{name}.stdout").read_text(), job)
    assert outcome is not None
    lines = tuple((DATA / f"{name}.out").read_text().splitlines())
    out = OutputSnapshot(head=lines, tail=lines, parser_lines=lines, empty=not lines)
    return RunFacts(mode=Mode.ONE_SHOT, phase=Phase.COLLECTED, job_id=job,
                    slurm_state=outcome.state, state_source=StateSource.ACCOUNTING,
                    exit_code=exit_code, output=out, stdout=f"/w/oneshot_{job}.out",
                    step_ends=step_ends_of(outcome))


def test_a_one_shot_step_past_its_own_time_limit_is_timeout_real_22_05(tmp_path: Path) -> None:
    """Slurm 22.05's own rows and log (issue 44 item 6, one-shot): the script's
    ``srun --time=1 sleep 300`` is ended at its limit, the script exits with srun's 143,
    the job is FAILED; its step's row says TIMEOUT. Judged as a persistent run's step:
    TIMEOUT, with the step's own diagnosis row (FAILED 143 before)."""
    facts = _recorded_one_shot("oneshot_step_timeout", "7", 143)
    assert facts.step_ends == (StepEnd(step="7.0", state=JobState.TIMEOUT, signal=15),)
    report = report_of(facts, _one_shot_spec(tmp_path))
    assert (report.status, report.exit_code, report.slurm_state) == (
        Status.TIMEOUT, 143, "FAILED"), report.summary
    assert report.summary.startswith(
        "TIMEOUT: step 7.0 reached its own time limit (sacct: TIMEOUT)"), report.summary
    assert report.metrics["step_states"] == {"7.0": "TIMEOUT"}
    symptoms = [r["symptom"] for r in report.diagnosis]
    assert symptoms == ["TIMEOUT (step 7.0: its own time limit)"], report.diagnosis


def test_a_one_shot_job_past_its_own_time_limit_is_timeout_by_its_state_real_22_05(
        tmp_path: Path) -> None:
    """The job's own limit ends it (its step ``CANCELLED``, both lines ``DUE TO TIME
    LIMIT``): the job's state decides, with the job's row, not a step's."""
    facts = _recorded_one_shot("oneshot_job_timeout", "2", 0)
    report = report_of(facts, _one_shot_spec(tmp_path))
    assert (report.status, report.slurm_state) == (Status.TIMEOUT, "TIMEOUT")
    assert report.summary.startswith("TIMEOUT: the job "), report.summary
    assert "(Slurm state TIMEOUT)" in report.summary
    assert [r["symptom"] for r in report.diagnosis] == ["TIMEOUT (Slurm state TIMEOUT)"]


def test_a_one_shot_script_that_went_on_after_its_step_timed_out_is_judged_by_its_exit(
        tmp_path: Path) -> None:
    facts = attrs.evolve(_recorded_one_shot("oneshot_step_timeout", "7", 0),
                         slurm_state=JobState.COMPLETED)
    report = report_of(facts, _one_shot_spec(tmp_path))
    assert report.status is Status.PASSED, report.summary


def test_a_one_shot_jobs_batch_and_extern_rows_are_not_its_steps() -> None:
    outcome = parse_sacct("9|FAILED|3:0|00:00:05|\n9.batch|FAILED|3:0|00:00:05|1K\n"
                          "9.extern|COMPLETED|0:0|00:00:05|1K\n9.0|TIMEOUT|0:15|00:00:04|1K\n"
                          "9.1|RUNNING|0:0|00:00:01|\n", "9")
    assert [e.step for e in step_ends_of(outcome)] == ["9.0"]
    assert step_ends_of(None) == ()


def test_a_fake_one_shot_step_past_its_own_time_limit_is_timeout(
        make_spec: SpecFactory) -> None:
    """The fake's batch job: its step 0 ended at its own limit (``time_limit_step``),
    the script exits 143; accounting lists the step as TIMEOUT among the job's rows."""
    fake = FakeCluster()
    spec = make_spec(persistent_mode=False, log_file_pattern="slurm-%j.out",
                     workflow_type="custom")

    def hit() -> None:
        job = next(j for j in fake.jobs.values() if j.kind == "batch")
        fake.time_limit_step(job.job_id, "0")

    line = TIME_LIMIT.replace("5.1", "1.0")
    fake.script(spec.script_path, FakeScript(lines=_lines(RELAYS[0], line), exit_code=143))
    report = Executor(spec, fake, clock=fake.clock,
                      events=_OnLine("DUE TO TIME LIMIT", hit)).run()
    job = report.job_id
    assert (report.status, report.exit_code, report.slurm_state) == (
        Status.TIMEOUT, 143, "FAILED"), report.summary
    assert f"step {job}.0 reached its own time limit (sacct: TIMEOUT)" in report.summary
    assert report.metrics["step_states"] == {f"{job}.0": "TIMEOUT"}
    symptoms = [r["symptom"] for r in report.diagnosis]
    assert symptoms == [f"TIMEOUT (step {job}.0: its own time limit)"], symptoms
