"""Issue 25, item 2: a persistent run asks accounting how its own steps ended.

A step cancelled from outside (``scancel ALLOC.STEP``: sacct ``CANCELLED by 0``) is
CANCELLED, a step killed for memory (sacct ``OUT_OF_MEMORY``) is OUT_OF_MEMORY; a step
that completed or failed leaves the verdict to the exit code, as does accounting that
does not answer (after a few polite retries). A sibling run's steps are never asked
about, nor the steps the run cancelled itself.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from slurm_fsm.errors import ControllerUnreachable, JobNotFound
from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.persistent import STEP_ACCOUNTING_WAITS_S
from slurm_fsm.report import Report
from slurm_fsm.results import Status, decide, step_verdict
from slurm_fsm.runfacts import StepEnd
from slurm_fsm.slurmcli import (
    SACCT_FIELDS,
    SACCT_STEP_FIELDS,
    parse_sacct_steps,
    sacct_steps_argv,
)
from slurm_fsm.spec import JobSpec, WorkflowType
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")

DATA = Path(__file__).resolve().parent / "data"
REAL = DATA / "real"
LINES = ("step starts", "working", "working", "working", "working", "done")


class _OnLine(Events):
    """Calls ``act`` once, when the script's output shows ``line``."""

    def __init__(self, line: str, act: object) -> None:
        self.line, self.act, self.done = line, act, False

    def output(self, text: str) -> None:
        if not self.done and self.line in text:
            self.done = True
            self.act()  # type: ignore[operator]


def _run(spec: JobSpec, fake: FakeCluster, events: Events | None = None) -> Report:
    return Executor(spec, fake, clock=fake.clock, events=events).run()


def _alloc(fake: FakeCluster) -> str:
    return next(j.job_id for j in fake.jobs.values() if j.kind == "alloc" and j.active)


def _script_step(fake: FakeCluster) -> str:
    """The running script's step on the allocation (the run's lease is a step too)."""
    steps = fake.jobs[_alloc(fake)].steps.values()
    return next(s.step_id for s in steps if not s.name.startswith("fsm-lease."))


class _Hit:
    """Acts on the script's own step when ``line`` is printed; remembers which it was."""

    def __init__(self, fake: FakeCluster, act: str, **kw: str) -> None:
        self.fake, self.act, self.kw, self.step = fake, act, kw, ""

    def __call__(self) -> None:
        self.step = _script_step(self.fake)
        getattr(self.fake, self.act)(_alloc(self.fake), self.step, **self.kw)


def _step_asks(fake: FakeCluster) -> int:
    return fake.count("step_outcomes")


def test_a_step_cancelled_from_outside_is_cancelled(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES, exit_code=0))
    hit = _Hit(fake, "cancel_step", by="0")
    report = _run(spec, fake, _OnLine("step starts", hit))
    alloc = report.allocation_id
    assert report.exit_code == 143  # what the script said: a signal
    assert report.status is Status.CANCELLED, report.summary
    assert f"step {alloc}.{hit.step} was cancelled by uid 0" in report.summary
    assert report.metrics["step_states"] == {f"{alloc}.{hit.step}": "CANCELLED by 0"}
    assert report.metrics["cancelled_by"] == "0"
    assert fake.query_job(alloc or "").state == "RUNNING"  # the allocation lives on


def test_a_step_killed_for_memory_is_out_of_memory(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES))
    hit = _Hit(fake, "oom_step")
    report = _run(spec, fake, _OnLine("step starts", hit))
    alloc = report.allocation_id
    assert report.exit_code == 137
    assert report.status is Status.OUT_OF_MEMORY, report.summary
    assert f"step {alloc}.{hit.step} ran out of memory (sacct: OUT_OF_MEMORY)" in report.summary
    assert any(d["symptom"] == "OUT_OF_MEMORY" for d in report.diagnosis)
    assert fake.query_job(alloc or "").state == "RUNNING"


def test_a_failed_script_step_leaves_the_exit_code_to_decide(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("boom",), exit_code=3))
    report = _run(spec, fake)
    assert report.status is Status.FAILED and report.exit_code == 3
    assert "step_states" not in report.metrics  # only a step that did not just fail
    # the fake's first run: its lease is step 0, its script step 1
    assert [c.args for c in fake.calls if c.op == "step_outcomes"] == [
        {"job_id": report.allocation_id, "step_ids": ("1",)}]


def test_a_passing_run_does_not_ask_accounting(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    report = _run(spec, fake)
    assert report.status is Status.PASSED
    assert _step_asks(fake) == 0 and "step_states" not in report.metrics


def test_a_hang_cancels_its_step_and_never_asks(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("Hang detected",), hang=True))
    report = _run(spec, fake)
    assert report.status is Status.HANG_DETECTED
    assert _step_asks(fake) == 0


def test_accounting_off_falls_back_to_the_exit_code(make_spec: SpecFactory) -> None:
    fake = FakeCluster(accounting=False)
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES))
    events = _OnLine("step starts", _Hit(fake, "cancel_step"))
    report = _run(spec, fake, events)
    assert (report.status, report.exit_code) == (Status.FAILED, 143)
    assert _step_asks(fake) == 1  # off: asking again would not help
    assert any("accounting could not say how this run's steps ended" in n
               and "accounting is disabled" in n and "the exit code decided" in n
               for n in report.notes), report.notes


def test_accounting_that_does_not_answer_is_asked_a_few_times_then_the_exit_code_decides(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES))
    fake.fail_next("step_outcomes", ControllerUnreachable(
        "sacct: error: Problem talking to the database: Connection refused"), times=99)
    events = _OnLine("step starts", _Hit(fake, "cancel_step"))
    before = fake.clock.now()
    report = _run(spec, fake, events)
    assert (report.status, report.exit_code) == (Status.FAILED, 143)
    assert _step_asks(fake) == len(STEP_ACCOUNTING_WAITS_S) + 1
    assert fake.clock.now() - before >= sum(STEP_ACCOUNTING_WAITS_S)
    assert any("Problem talking to the database" in n for n in report.notes), report.notes


def test_accounting_that_lags_is_asked_again(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    fake.accounting_lag_s = 1.2  # the row comes after the first two questions
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES))
    events = _OnLine("step starts", _Hit(fake, "cancel_step"))
    report = _run(spec, fake, events)
    assert report.status is Status.CANCELLED, report.summary
    assert 2 <= _step_asks(fake) <= len(STEP_ACCOUNTING_WAITS_S) + 1


def test_a_siblings_step_is_never_asked_about(make_spec: SpecFactory) -> None:
    """Another run's step on the same allocation, cancelled from outside too: this run
    asks about its own step only, and its verdict is its own."""
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    assert _run(spec, fake).status is Status.PASSED
    alloc = _alloc(fake)
    job = fake.jobs[alloc]
    # a sibling's step 7, ended by someone's scancel, sits in accounting
    from slurm_fsm.backend import StepInfo
    job.steps["7"] = StepInfo(job_id=alloc, step_id="7", name="sibling.sh")
    fake.cancel_step(alloc, "7", by="0")
    fake.script(spec.script_path, FakeScript(lines=("boom",), exit_code=2))
    fake.reset_calls()
    report = _run(spec, fake)
    asked = [c.args for c in fake.calls if c.op == "step_outcomes"]
    # its own step only (the second run: its lease is step 2, its script step 3)
    assert asked == [{"job_id": alloc, "step_ids": ("3",)}]
    assert "step_states" not in report.metrics  # the sibling's step 7 is not there
    assert (report.status, report.exit_code) == (Status.FAILED, 2)


# ------------------------------------------------------------------ the judge, alone
def _end(state: str, by: str = "") -> StepEnd:
    return StepEnd(step="5.1", state=JobState.parse(state), cancelled_by=by)


@pytest.mark.parametrize(("ends", "exit_code", "status"), [
    ([_end("CANCELLED", "0")], 137, Status.CANCELLED),
    ([_end("CANCELLED", "1000")], 143, Status.CANCELLED),
    # the script went on after its step was cancelled and exited by itself
    ([_end("CANCELLED", "0")], 1, None),
    # a task that died of a signal (kill -9): sacct names nobody
    ([_end("CANCELLED")], 137, None),
    ([_end("OUT_OF_MEMORY")], 137, Status.OUT_OF_MEMORY),
    ([_end("OUT_OF_MEMORY")], 1, Status.OUT_OF_MEMORY),
    ([_end("COMPLETED"), _end("CANCELLED", "0")], 137, Status.CANCELLED),
    ([_end("COMPLETED")], 137, None),
    ([_end("FAILED")], 2, None),
    ([], 137, None),
])
def test_step_verdict(ends: list[StepEnd], exit_code: int, status: Status | None) -> None:
    got = step_verdict(ends, exit_code)
    assert (got.status if got else None) is status


def test_the_jobs_own_state_and_a_hang_come_first() -> None:
    common = {"success_hits": {}, "failure_hits": {}, "success_patterns": [],
              "workflow_type": WorkflowType.CUSTOM, "metrics": {}}
    oom = [_end("OUT_OF_MEMORY")]
    assert decide(exit_code=137, slurm_state=None, hang=True, timed_out=False,
                  step_ends=oom, **common).status is Status.HANG_DETECTED
    assert decide(exit_code=137, slurm_state="TIMEOUT", hang=False, timed_out=False,
                  step_ends=oom, **common).status is Status.TIMEOUT
    assert decide(exit_code=137, slurm_state=None, hang=False, timed_out=False,
                  step_ends=oom, **common).status is Status.OUT_OF_MEMORY


# --------------------------------------------------- the command line and its parser
def test_sacct_asks_for_those_steps_only() -> None:
    assert sacct_steps_argv("2", ["0", "1"]) == [
        "sacct", "-j", "2.0,2.1", "--format=JobID,State,ExitCode,Elapsed,MaxRSS,AllocTRES",
        "-n", "-P"]
    with pytest.raises(ValueError):
        sacct_steps_argv("2", [])


def _recorded(block: str, fields: tuple[str, ...] = SACCT_FIELDS) -> str:
    """The rows of a block of tests/data/real/slurm/sacct_steps.txt, as sacct prints
    them with ``fields`` (the block's header row off)."""
    text = (REAL / "slurm" / "sacct_steps.txt").read_text(encoding="utf-8")
    rows = text.split(f"## {block} ", 1)[1].split("\n## ", 1)[0].splitlines()[2:]
    header = rows and [c.lower() for c in
                       text.split(f"## {block} ", 1)[1].splitlines()[1].split("|")]
    header = ["jobid" if c == "jobidraw" else c for c in header]
    pick = [header.index(f.lower()) if f.lower() in header else None for f in fields]
    return "\n".join("|".join(r.split("|")[i] if i is not None else "" for i in pick)
                     for r in rows if r.strip()) + "\n"


def test_recorded_sacct_of_a_step_cancelled_from_outside() -> None:
    """Slurm 22.05 on the local cluster: ``scancel 2.0`` of a running step, a step that
    ran to its end, a step whose task killed itself (``kill -9 $$``: no uid)."""
    got = parse_sacct_steps(_recorded("local_scancel_step"), "2")
    assert [(o.job_id, o.state, o.cancelled_by, o.signal) for o in got] == [
        ("2.0", JobState.CANCELLED, "0", 9), ("2.1", JobState.COMPLETED, "", 0),
        ("2.2", JobState.CANCELLED, "", 9)]
    ends = [StepEnd(step=o.job_id, state=o.state, cancelled_by=o.cancelled_by) for o in got]
    verdict = step_verdict(ends, 137)
    assert verdict is not None and verdict.status is Status.CANCELLED
    assert "2.2" not in verdict.reason  # the self-killed task is no cancel
    assert step_verdict(ends[2:], 137) is None
    # the job's own row, its batch step and another job's rows are no step of it
    assert parse_sacct_steps("2|RUNNING|0:0|00:00:11|\n3.0|COMPLETED|0:0|00:00:01|\n"
                             "2.batch|COMPLETED|0:0|00:00:01|\n", "2") == []


def test_recorded_sacct_of_a_step_killed_for_memory() -> None:
    """OLCF Frontier's job 4979526: its step 0 OUT_OF_MEMORY (``0:125``)."""
    got = parse_sacct_steps(_recorded("frontier_oom_step"), "4979526")
    assert [(o.job_id, o.state, o.signal) for o in got] == [
        ("4979526.0", JobState.OUT_OF_MEMORY, 125)]
    ends = [StepEnd(step=o.job_id, state=o.state) for o in got]
    verdict = step_verdict(ends, 137)
    assert verdict is not None and verdict.status is Status.OUT_OF_MEMORY


def test_accounting_off_is_job_not_found_in_the_fake() -> None:
    fake = FakeCluster(accounting=False)
    job = fake.make_job("a", "tester")
    with pytest.raises(JobNotFound):
        fake.step_outcomes(job.job_id, ["0"])


# ------------------------------------- a step killed for memory without a memory cgroup
def test_recorded_over_memory_kill_is_out_of_memory() -> None:
    """``JobAcctGatherParams=OverMemoryKill`` (no memory cgroup), recorded on the local
    cluster: slurmstepd kills the step for exceeding its ``--mem`` and accounting says
    ``CANCELLED by 0``; the log's ``StepId=40.0 exceeded memory limit`` line names that
    step, so the verdict is OUT_OF_MEMORY (a real run on that cluster said so)."""
    got = parse_sacct_steps(_recorded("local_overmemorykill_step"), "40")
    ends = [StepEnd(step=o.job_id, state=o.state, cancelled_by=o.cancelled_by) for o in got]
    assert [(e.step, e.state, e.cancelled_by) for e in ends] == [
        ("40.0", JobState.CANCELLED, "0")]
    log = (REAL / "local" / "slurm" / "step_over_memory_limit.txt").read_text().splitlines()
    verdict = step_verdict(ends, 137, log)
    assert verdict is not None and verdict.status is Status.OUT_OF_MEMORY
    assert "step 40.0 was killed for exceeding its memory limit" in verdict.reason
    # without the line, or with the line of another step, it is a cancel
    assert (step_verdict(ends, 137) or verdict).status is Status.CANCELLED
    other = [line.replace("StepId=40.0", "StepId=40.1") for line in log]
    assert (step_verdict(ends, 137, other) or verdict).status is Status.CANCELLED


@pytest.mark.parametrize("name", ["slurm_oom_kill_step.txt", "slurm_oom_kill_step_8538204.txt"])
def test_slurmstepds_oom_kill_line_names_its_step(name: str) -> None:
    """The real ``Detected 1 oom_kill event in StepId=...`` lines (the kernel's OOM
    killer in a step's cgroup) name the step they killed."""
    lines = (REAL / "failures" / name).read_text().splitlines()
    step = "128435.1" if "128435" in lines[0] else "8538204.0"
    ends = [StepEnd(step=step, state=JobState.CANCELLED, cancelled_by="0")]
    verdict = step_verdict(ends, 137, lines)
    assert verdict is not None and verdict.status is Status.OUT_OF_MEMORY


def test_a_fake_step_killed_over_its_memory_limit_is_out_of_memory(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    alloc = "100"  # the fake's first job
    step = "1"  # its first run's lease is step 0, the script step 1 (asserted below)
    fake.script(spec.script_path, FakeScript(lines=(
        "step starts", f"slurmstepd-node01: error: StepId={alloc}.{step} exceeded memory limit "
        "(433336320 > 104857600), being killed", "working", "working", "working")))
    hit = _Hit(fake, "cancel_step", by="0")
    report = _run(spec, fake, _OnLine("exceeded memory limit", hit))
    assert (report.allocation_id, hit.step) == (alloc, step)
    assert report.status is Status.OUT_OF_MEMORY, report.summary
    assert report.metrics["step_states"] == {f"{alloc}.{step}": "CANCELLED by 0"}


# ------------------- the memory kill told by accounting alone (its log line not relayed)
MIB = 1 << 20


def _killed(by: str = "0", rss: int | None = 413 * MIB, limit: int | None = 100 * MIB
            ) -> StepEnd:
    return StepEnd(step="5.1", state=JobState.CANCELLED, signal=9, cancelled_by=by,
                   max_rss=rss, memory_limit=limit)


@pytest.mark.parametrize(("end", "status"), [
    # slurmstepd's OverMemoryKill: CANCELLED by 0, MaxRSS past its limit
    (_killed(), Status.OUT_OF_MEMORY),
    # someone's scancel of a step past its --mem where nothing enforces it: a cancel
    (_killed(by="1000"), Status.CANCELLED),
    # a step under its limit, or one within the rounding of a limit in gigabytes
    (_killed(rss=90 * MIB), Status.CANCELLED),
    (_killed(rss=101 * MIB), Status.CANCELLED),
    (_killed(rss=102 * MIB), Status.OUT_OF_MEMORY),
    # accounting without a MaxRSS, or without the step's memory
    (_killed(rss=None), Status.CANCELLED),
    (_killed(limit=None), Status.CANCELLED),
])
def test_accountings_maxrss_past_the_limit_is_the_memory_kill(end: StepEnd,
                                                              status: Status) -> None:
    verdict = step_verdict([end], 137)
    assert verdict is not None and verdict.status is status, verdict


def test_the_memory_kill_says_what_told_it() -> None:
    alone = step_verdict([_killed()], 137)
    assert alone is not None and alone.reason == (
        "step 5.1 was killed for exceeding its memory limit (sacct: CANCELLED by 0, "
        "MaxRSS 413 MiB above its 100 MiB)")
    line = "slurmstepd-n1: error: StepId=5.1 exceeded memory limit (433 > 104), being killed"
    both = step_verdict([_killed()], 137, [line])
    assert both is not None and both.reason == (
        "step 5.1 was killed for exceeding its memory limit (the log says so; sacct: "
        "CANCELLED by 0, MaxRSS 413 MiB above its 100 MiB)")
    two = step_verdict([_killed(), attrs.evolve(_killed(rss=None), step="5.2")], 137,
                       [line.replace("5.1", "5.2")])
    assert two is not None and two.reason == (
        "step 5.1, 5.2 was killed for exceeding its memory limit (5.1: sacct: CANCELLED "
        "by 0, MaxRSS 413 MiB above its 100 MiB; 5.2: the log says so; sacct: CANCELLED "
        "by 0)")


def test_recorded_over_memory_kill_is_out_of_memory_by_accounting_alone() -> None:
    """The same kill on the local cluster's ``memkill`` configuration, asked with the
    steps' ``AllocTRES``: accounting alone tells it, whether or not the log has
    slurmstepd's line; root's ``scancel`` of a small step beside it stays a cancel."""
    got = parse_sacct_steps(_recorded("local_overmemorykill_step_tres", SACCT_STEP_FIELDS),
                            "1")
    assert [(o.job_id, o.state, o.cancelled_by, o.max_rss_bytes, o.memory_limit)
            for o in got] == [("1.0", JobState.CANCELLED, "0", 409488 << 10, 100 * MIB),
                              ("1.1", JobState.CANCELLED, "0", 1432 << 10, 512 * MIB)]
    ends = [StepEnd(step=o.job_id, state=o.state, cancelled_by=o.cancelled_by,
                    max_rss=o.max_rss_bytes, memory_limit=o.memory_limit) for o in got]
    verdict = step_verdict(ends[:1], 137)
    assert verdict is not None and verdict.status is Status.OUT_OF_MEMORY
    assert verdict.reason == ("step 1.0 was killed for exceeding its memory limit (sacct: "
                              "CANCELLED by 0, MaxRSS 400 MiB above its 100 MiB)")
    cancel = step_verdict(ends[1:], 137)
    assert cancel is not None and cancel.status is Status.CANCELLED


@pytest.mark.parametrize(("tres", "per_node"), [
    ("cpu=1,mem=100M,node=1", 100 * MIB),
    ("billing=4,cpu=4,gres/gpu=2,mem=2G,node=2", 1 << 30),
    ("cpu=2,mem=1.50G,node=1", int(1.5 * (1 << 30))),
    ("cpu=1,mem=4000,node=1", 4000 * MIB),  # no unit: megabytes
    ("cpu=1,node=1", None),
    ("cpu=1,mem=0,node=1", None),
    ("", None),
])
def test_a_steps_memory_per_node_from_its_alloctres(tres: str, per_node: int | None) -> None:
    row = f"7.0|CANCELLED by 0|0:9|00:00:01|1024K|{tres}\n"
    assert [o.memory_limit for o in parse_sacct_steps(row, "7")] == [per_node]


def test_a_fake_step_killed_past_its_limit_without_its_log_line_is_out_of_memory(
        make_spec: SpecFactory) -> None:
    """The fake's ``memory_kill_step``: no ``exceeded memory limit`` line in the log,
    accounting's MaxRSS decides."""
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=LINES))
    hit = _Hit(fake, "memory_kill_step")
    report = _run(spec, fake, _OnLine("step starts", hit))
    step = f"{report.allocation_id}.{hit.step}"
    assert (report.status, report.exit_code) == (Status.OUT_OF_MEMORY, 137), report.summary
    assert (f"step {step} was killed for exceeding its memory limit (sacct: CANCELLED by 0, "
            "MaxRSS 413 MiB above its 100 MiB)") in report.summary
    assert report.metrics["step_states"] == {step: "CANCELLED by 0"}
