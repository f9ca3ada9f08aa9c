"""Steps 1-5 on the fake cluster: every status, the call budget, the reuse."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from slurm_fsm.errors import SpecError
from slurm_fsm.executor import Events, Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.testing.fake import CONTROLLER_OPS

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")

PYTEST_OK = ("collected 4 items", "tests/test_a.py ....",
             "===== 3 passed, 1 skipped in 2.50s =====")


def run(spec: JobSpec, fake: FakeCluster, events: Events | None = None):  # type: ignore[no-untyped-def]
    return Executor(spec, fake, clock=fake.clock, events=events).run()


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def one_shot(make_spec: SpecFactory, **over: object) -> JobSpec:
    spec = make_spec(persistent_mode=False, log_file_pattern="llama_%j.out", **over)
    spec.script_path.write_text("#!/bin/bash\n#SBATCH --output=llama_%j.out\n"
                                "#SBATCH --error=llama_%j.err\n#SBATCH -t 00:10:00\nsrun x\n")
    return spec


def test_persistent_pass_then_reuse_with_one_query(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    spec = make_spec(success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    first = run(spec, fake)
    assert first.status is Status.PASSED
    assert first.mode == "persistent" and first.exit_code == 0
    assert first.metrics["passed"] == 3 and first.metrics["skipped"] == 1
    assert first.path == ["NoState", "Allocating", "Ready", "Running", "Ready"]
    own = Path(first.log_files["stdout"] or "")
    assert own.parent == spec.work_dir and own.name.startswith("llama_pytest.")
    assert (spec.work_dir / "llama_pytest.log").resolve() == own.resolve()  # the latest
    assert Path(first.log_files["stdout"] or "").read_text().endswith("2.50s =====\n")
    fake.reset_calls()
    second = run(spec, fake)
    assert second.status is Status.PASSED
    assert second.allocation_id == first.allocation_id
    assert second.path == ["NoState", "Validating", "Ready", "Running", "Ready"]
    before_start = fake.ops()[: fake.ops().index("start_script")]
    assert [op for op in before_start if op == "query_job"] == ["query_job"]
    # no GPUs asked: no GPU pre-flight srun; the run's lease step (issue 28) is the one
    # srun, then one squeue -s: a closing marker of another run? (docs/reliability.md)
    assert [op for op in before_start if op in CONTROLLER_OPS] == ["query_job", "start_lease",
                                                                   "list_steps"]
    env = next(c for c in fake.calls if c.op == "start_script").args["request"].env
    assert env["SLURM_JOB_ID"] == first.allocation_id
    assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "1"
    assert env["SLURM_NODELIST"] == env["SLURM_JOB_NODELIST"] == "node01"
    assert fake.query_job(first.allocation_id or "").state == "RUNNING"  # never released


def test_persistent_failure(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(
        lines=("E   AssertionError: boom", "=== 1 failed, 2 passed in 1.00s ==="), exit_code=1))
    report = run(spec, fake)
    assert report.status is Status.FAILED
    assert report.exit_code == 1
    assert report.metrics["failed"] == 1
    assert any("AssertionError: boom" in e for e in report.errors)
    assert report.log_head[0] == "E   AssertionError: boom"


def test_patterns_decide(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(success_patterns="ALL DONE", failure_patterns="CUDA error")
    fake.script(spec.script_path, FakeScript(lines=("CUDA error: out of memory", "ALL DONE")))
    report = run(spec, fake)
    assert report.status is Status.FAILED
    assert report.metrics["failure_hits"] == {"CUDA error": 1}
    spec2 = make_spec(success_patterns="ALL DONE")
    fake.script(spec2.script_path, FakeScript(lines=("finished",)))
    report2 = run(spec2, fake)
    assert report2.status is Status.FAILED
    assert any("no success pattern" in e for e in report2.errors)


def test_persistent_hang_cancels_only_the_step(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("step 1", "NCCL watchdog: Hang Detected"),
                                             hang=True))
    report = run(spec, fake)
    assert report.status is Status.HANG_DETECTED
    alloc = report.allocation_id or ""
    cancels = [c.args for c in fake.calls if c.op == "cancel"]
    # step 0 is the run's lease step (issue 28), step 1 its script
    assert cancels == [{"job_id": alloc, "step_id": "1"}]
    assert fake.query_job(alloc).state == "RUNNING"
    assert report.metrics["cancelled_steps"] == [f"{alloc}.1"]
    assert report.log_tail[-1] == "NCCL watchdog: Hang Detected"
    assert any(d["symptom"] == "HANG_DETECTED" for d in report.diagnosis)
    # the next run reuses the same allocation
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    again = run(spec, fake)
    assert again.status is Status.PASSED and again.allocation_id == alloc


def test_persistent_monitor_timeout(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(monitor_timeout_seconds=60)
    fake.script(spec.script_path, FakeScript(lines=("working",), hang=True))
    report = run(spec, fake)
    assert report.status is Status.TIMEOUT
    assert report.elapsed_s is not None and 60 <= report.elapsed_s < 62
    assert fake.query_job(report.allocation_id or "").state == "RUNNING"


def test_step0_failure_is_error(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(slurm_params={"partition": "nope"})
    report = run(spec, fake)
    assert report.status is Status.ERROR
    assert "Invalid partition name specified" in report.summary
    assert report.path == ["NoState", "Allocating", "Failed"]
    assert report.exit_code_for_cli == 3
    assert "start_script" not in fake.ops()
    assert (report.log_files["stderr"] or "").endswith("work_dirs/.salloc.log")
    assert any("invalid partition specified: nope" in line for line in report.log_tail)


def test_unreachable_controller_is_error_and_keeps_the_allocation(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    first = run(spec, fake)
    fake.controller_down()
    report = run(spec, fake)
    assert report.status is Status.ERROR
    assert "unreachable" in report.summary and "state file is kept" in report.summary
    assert report.log_files["stderr"] is None and report.log_tail == []
    assert spec.state_path.exists()
    fake.bring_controller_up()
    assert run(spec, fake).allocation_id == first.allocation_id


def test_missing_script_is_bad_input_before_any_slurm_call(make_spec: SpecFactory,
                                                           fake: FakeCluster) -> None:
    spec = make_spec()
    spec.script_path.unlink()
    with pytest.raises(SpecError, match="script_path: no such file"):
        run(spec, fake)
    assert fake.calls == []


def test_release(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    first = run(spec, fake)
    report = run(make_spec(release_allocation=True), fake)
    assert report.status is Status.RELEASED
    assert report.summary == f"Allocation {first.allocation_id} released."
    assert report.exit_code_for_cli == 0
    assert fake.active_jobs() == []


def test_one_shot_pass(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = one_shot(make_spec, success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    report = run(spec, fake)
    assert report.status is Status.PASSED
    assert report.mode == "one-shot" and report.slurm_state == "COMPLETED"
    job = report.job_id or ""
    assert report.log_files == {"stdout": str(spec.work_dir / f"llama_{job}.out"),
                                "stderr": str(spec.work_dir / f"llama_{job}.err")}
    assert report.metrics["passed"] == 3
    assert "allocate" not in fake.ops()


@pytest.mark.parametrize(("script", "status", "state"), [
    (FakeScript(lines=("x",), exit_code=2, err_lines=("Traceback", "ValueError: bad")),
     Status.FAILED, "FAILED"),
    (FakeScript(lines=("x",), hang=False, line_interval_s=1000), Status.TIMEOUT, "TIMEOUT"),
    (FakeScript(lines=("x",), final_state="OUT_OF_MEMORY", exit_code=0),
     Status.OUT_OF_MEMORY, "OUT_OF_MEMORY"),
])
def test_one_shot_outcomes_from_accounting(make_spec: SpecFactory, fake: FakeCluster,
                                           script: FakeScript, status: Status,
                                           state: str) -> None:
    spec = one_shot(make_spec)
    fake.script(spec.script_path, script)
    report = run(spec, fake)
    assert report.status is status
    assert report.slurm_state == state
    assert report.metrics["accounting_source"] == "sacct"
    if status is Status.FAILED:
        assert report.err_tail == ["Traceback", "ValueError: bad"]
        assert report.exit_code == 2


def test_one_shot_cancelled_behind_our_back(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = one_shot(make_spec)
    fake.script(spec.script_path, FakeScript(lines=("x",), hang=True))

    class Canceller(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            if elapsed_s > 5:
                for j in fake.active_jobs():
                    fake.end_job(j.job_id, "CANCELLED")

    report = run(spec, fake, Canceller())
    assert report.status is Status.CANCELLED
    assert any(d["symptom"] == "CANCELLED" for d in report.diagnosis)


def test_one_shot_hang_cancels_the_job(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = one_shot(make_spec)
    fake.script(spec.script_path, FakeScript(lines=("a", "hang detected"), hang=True))
    report = run(spec, fake)
    assert report.status is Status.HANG_DETECTED
    assert fake.jobs[report.job_id or ""].state == "CANCELLED"


def test_sbatch_error_is_reported_at_once(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = one_shot(make_spec, slurm_params={"account": "nobody"})
    report = run(spec, fake)
    assert report.status is Status.ERROR
    assert "Invalid account" in report.summary
    assert fake.ops().count("query_job") == 0


@pytest.mark.parametrize(("lines", "status"), [(("ok",), Status.ERROR),
                                                (("==== 1 failed, 2 passed in 0.50s ====",),
                                                 Status.FAILED)])
def test_accounting_off_and_job_forgotten(make_spec: SpecFactory, lines: tuple[str, ...],
                                          status: Status) -> None:
    """Issue 20 item 12: nobody knows the exit code: ERROR (not FAILED "exit code
    unknown" under a note saying the log decided), unless the log shows a failure."""
    fake = FakeCluster(accounting=False, min_job_age_s=0)
    spec = one_shot(make_spec)
    fake.script(spec.script_path, FakeScript(lines=lines))
    report = run(spec, fake)
    assert report.status is status, report.summary
    assert any("accounting does not know how job" in n and "exit code is unknown" in n
               for n in report.notes), report.notes
    if status is Status.ERROR:
        assert "exit code is unknown" in report.summary


def test_long_job_polls_back_off_to_30s(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = one_shot(make_spec, monitor_timeout_seconds=7200)
    spec.script_path.write_text("#!/bin/bash\n#SBATCH --output=llama_%j.out\n"
                                "#SBATCH -t 02:00:00\nsrun x\n")
    fake.script(spec.script_path, FakeScript(lines=("tick",) * 60, line_interval_s=60))
    times: list[float] = []
    original = fake.query_job

    def timed(job_id: str):  # type: ignore[no-untyped-def]
        times.append(fake.clock.now())
        return original(job_id)

    fake.query_job = timed  # type: ignore[method-assign]
    report = run(spec, fake)
    assert report.status is Status.PASSED
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] < 1.0  # fast at first
    assert max(gaps) <= 30.0 + 1e-6  # bounded
    assert sum(1 for g in gaps if g >= 29.9) >= len(gaps) - 12  # then one every 30 s
    assert len(times) < 3600 / 30 + 15  # about one query per 30 s for an hour's job


def test_interrupt_stops_the_step_and_keeps_the_allocation(make_spec: SpecFactory,
                                                           fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("working",), hang=True))

    class CtrlC(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            if elapsed_s > 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(spec, fake, CtrlC())
    alloc = next(j for j in fake.jobs.values() if j.kind == "alloc")
    assert alloc.state == "RUNNING" and alloc.steps == {}
    assert [c.args for c in fake.calls if c.op == "cancel"] == [
        {"job_id": alloc.job_id, "step_id": "1"}]  # 0: the run's lease step


@pytest.mark.parametrize("persistent", [True, False])
def test_an_interrupted_run_is_judged_once_from_what_its_path_saw(
        make_spec: SpecFactory, fake: FakeCluster, persistent: bool) -> None:
    spec = (make_spec() if persistent else one_shot(make_spec))
    fake.script(spec.script_path, FakeScript(lines=("working",), hang=True))

    class CtrlC(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            if elapsed_s > 2:
                raise KeyboardInterrupt

    executor = Executor(spec, fake, clock=fake.clock, events=CtrlC())
    with pytest.raises(KeyboardInterrupt):
        executor.run()
    report = executor.interrupted_report("interrupted by SIGINT")
    assert report.status is Status.CANCELLED
    assert report.errors == ["interrupted by SIGINT"]
    assert [d["symptom"] for d in report.diagnosis] == ["CANCELLED"]
    assert report.log_tail == ["working"]
    assert "total_s" in report.timings
    if persistent:
        assert report.mode == "persistent" and report.path[-1] == "Running"
        assert report.summary == (f"CANCELLED: interrupted by SIGINT; allocation "
                                  f"{report.allocation_id} is kept")
    else:
        assert report.mode == "one-shot" and report.job_id is not None
        assert report.path == ["Submitting", "Monitoring"]
        assert report.summary == "CANCELLED: interrupted by SIGINT"


def test_build_project_uses_the_default_pre_step(make_spec: SpecFactory, fake: FakeCluster,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_fsm import build
    from slurm_fsm.events import PreStepResult

    seen: list[JobSpec] = []

    def fake_pre_step(spec: JobSpec, backend: object, events: Events) -> PreStepResult:
        seen.append(spec)
        return PreStepResult(ok=True, spec=spec, summary="built in 3 s", job_id="9",
                             log_path="/tmp/build_9.log")

    monkeypatch.setattr(build, "default_pre_step", fake_pre_step)
    report = run(make_spec(build_project=True), fake)
    assert len(seen) == 1
    assert report.status is Status.PASSED
    assert report.notes[0] == "pre-step: built in 3 s (build job 9, log /tmp/build_9.log)"


def test_the_lock_covers_step_0_only_and_a_lease_is_held_while_the_job_runs(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    import threading

    import filelock

    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("a", "b", "c")))
    lock_path = str(spec.state_path) + ".lock"
    held: list[bool] = []
    leases: list[int] = []

    def probe() -> None:
        from slurm_fsm.executor import run_book

        leases.append(len(run_book(spec).live()))
        other = filelock.FileLock(lock_path)
        try:
            other.acquire(timeout=0)
        except filelock.Timeout:
            held.append(True)
        else:
            other.release()
            held.append(False)

    class Probe(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            t = threading.Thread(target=probe)
            t.start()
            t.join()

    report = run(spec, fake, Probe())
    assert report.status is Status.PASSED
    # while the job runs another run may take the lock (and overlap); the job's lease
    # keeps the allocation from a release or a replacement
    assert held and not any(held)
    assert leases and all(n == 1 for n in leases)
    probe()
    assert leases[-1] == 0  # the lease ends with the run


def test_failing_scancel_on_hang_still_stops_the_script(make_spec: SpecFactory,
                                                         fake: FakeCluster) -> None:
    from slurm_fsm.errors import ControllerUnreachable

    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("x", "hang detected"), hang=True))
    fake.fail_next("cancel", ControllerUnreachable("Socket timed out on send/recv operation"))
    report = run(spec, fake)
    assert report.status is Status.HANG_DETECTED
    assert any(w.startswith("could not cancel step") for w in report.warnings)
    alloc = next(j for j in fake.jobs.values() if j.kind == "alloc")
    assert alloc.steps == {}  # the script was terminated, its step is gone


def test_a_step_slurm_could_not_cancel_is_said_and_its_record_kept(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """20.7: the controller does not answer when a hang is detected: the report never
    says "no step was running", and the run record stays for the next run, which
    finishes the job and deletes it."""
    from slurm_fsm.errors import ControllerUnreachable
    from slurm_fsm.executor import run_book

    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("x", "hang detected"), hang=True))
    first = run(spec, fake)  # allocates; then the controller goes away at the hang
    fake.script(spec.script_path, FakeScript(lines=("y", "hang detected"), hang=True))
    for _ in range(3):
        fake.fail_next("step_details", ControllerUnreachable("Unable to contact slurm "
                                                             "controller"))
    report = run(spec, fake)
    assert report.status is Status.HANG_DETECTED
    assert report.allocation_id == first.allocation_id
    assert "no step was running" not in report.summary
    assert "could not be cancelled" in report.summary, report.summary
    (kept,) = run_book(spec).records()
    assert any(str(run_book(spec).path(kept.run_id)) in w for w in report.warnings)
    fake._faults.pop("step_details", None)  # the controller is back
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    after = run(spec, fake)
    assert after.status is Status.PASSED
    assert run_book(spec).records() == []


def test_benchmark_without_figures_warns(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(workflow_type="benchmark")
    fake.script(spec.script_path, FakeScript(lines=("done",)))
    report = run(spec, fake)
    assert report.status is Status.PASSED
    assert report.warnings, "a benchmark that printed no figure must say so"


# ----------------------------------------------------------------- reliability (issue 10)
def _raising_sink(error: BaseException) -> Events:
    """An Events whose every public method (today's and any added later) raises."""

    def boom(*_a: object, **_k: object) -> None:
        raise error

    names = [n for n in dir(Events) if not n.startswith("_") and callable(getattr(Events, n))]
    assert {"state", "message", "output", "job_state", "tick"} <= set(names)
    return type("Raising", (Events,), {n: boom for n in names})()


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), ValueError("a bug")])
def test_a_sink_that_raises_never_reaches_the_run(make_spec: SpecFactory, fake: FakeCluster,
                                                  error: BaseException) -> None:
    spec = make_spec(success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    report = run(spec, fake, _raising_sink(error))
    assert report.status is Status.PASSED
    assert report.path[-2:] == ["Running", "Ready"]
    assert any("progress output stopped" in w and str(error) in w for w in report.warnings)
    alloc = next(j for j in fake.jobs.values() if j.kind == "alloc")
    assert alloc.state == "RUNNING" and alloc.steps == {}


def test_a_closed_stderr_does_not_change_the_job_s_fate(make_spec: SpecFactory,
                                                        fake: FakeCluster) -> None:
    from test_progress import ClosedPipe

    from slurm_fsm.progress import StderrEvents

    spec = make_spec(success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    out = ClosedPipe()
    report = run(spec, fake, StderrEvents(stream=out, stream_output=True, plain_interval_s=0))
    assert report.status is Status.PASSED and out.writes == 1


def test_a_killed_step_exits_128_plus_the_signal(make_spec: SpecFactory,
                                                 fake: FakeCluster) -> None:
    spec = make_spec(monitor_timeout_seconds=60)
    fake.script(spec.script_path, FakeScript(lines=("working",), hang=True))
    report = run(spec, fake)
    assert report.status is Status.TIMEOUT
    assert report.exit_code == 143  # SIGTERM, as the shell prints it; never -15


def test_each_persistent_run_keeps_its_own_log(make_spec: SpecFactory,
                                               fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("FAILED first run",), exit_code=1))
    first = run(spec, fake)
    fake.script(spec.script_path, FakeScript(lines=("second run ok",)))
    second = run(spec, fake)
    one, two = Path(first.log_files["stdout"] or ""), Path(second.log_files["stdout"] or "")
    assert one != two and one.parent == two.parent == spec.work_dir
    assert one.name.startswith("llama_pytest.") and one.suffix == ".log"
    assert one.read_text() == "FAILED first run\n"  # not lost by the next run
    assert two.read_text() == "second run ok\n"
    assert first.status is Status.FAILED and second.status is Status.PASSED
    latest = spec.work_dir / "llama_pytest.log"
    assert latest.is_symlink() and latest.resolve() == two.resolve()


def test_leftover_steps_of_a_dead_run_are_stopped_before_the_next(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    import attrs

    from slurm_fsm.backend import StepInfo
    from slurm_fsm.executor import run_book
    from slurm_fsm.runrecord import StepMark

    spec = make_spec()
    first = run(spec, fake)
    alloc = fake.jobs[first.allocation_id or ""]
    # a run killed with -9 left its step running on the allocation, and its record;
    # the user runs a step of their own (8), and step 9 is described otherwise than the
    # dead run recorded it
    for sid, name in (("7", "job.slurm"), ("8", "debug"), ("9", "python")):
        alloc.steps[sid] = StepInfo(job_id=alloc.job_id, step_id=sid, name=name,
                                    state=JobState.RUNNING)
    book = run_book(spec)
    marks = (StepMark(step_id="7", name="job.slurm"), StepMark(step_id="9", name="job.slurm"))
    dead = attrs.evolve(book.start(alloc.job_id), pid_ticks=-1, log=str(spec.work_dir / "o"),
                        script={"pid": 1}, steps=marks)  # its orchestrator is gone
    book.save(dead)
    second = run(spec, fake)
    assert second.status is Status.PASSED
    cancels = [c.args for c in fake.calls if c.op == "cancel"]
    assert {"job_id": alloc.job_id, "step_id": "7"} in cancels
    assert not any(c.get("step_id") in ("8", "9") for c in cancels), cancels
    assert set(alloc.steps) == {"8", "9"}  # only what the dead run is proven to have started
    for sid in ("8", "9"):
        del alloc.steps[sid]
    assert any(f"{alloc.job_id}.7" in w and "left by an earlier run" in w
               for w in second.warnings)
    assert alloc.state == "RUNNING"
    assert book.records() == []  # a run that ended leaves no record; the dead one is done
    fake.reset_calls()
    assert run(spec, fake).status is Status.PASSED
    # no record, no leftover search: the one squeue -s is the lease's closing check
    assert fake.ops().count("list_steps") == 1


def test_a_pending_reason_that_never_clears_ends_the_wait_at_once(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=1e9, pending_reason="AssocMaxNodePerJobLimit")
    spec = make_spec()
    start = fake.clock.now()
    report = run(spec, fake)
    assert report.status is Status.ERROR
    assert "AssocMaxNodePerJobLimit" in report.summary and "never" in report.summary
    assert fake.clock.now() - start < 5
    assert fake.active_jobs() == []  # the pending job was cancelled
    assert not spec.state_path.exists()


def test_a_long_pending_wait_says_why_after_5_minutes(make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=420, pending_reason="Resources")
    spec = make_spec()
    seen: list[str] = []

    class Collect(Events):
        def message(self, text: str) -> None:
            seen.append(text)

    report = run(spec, fake, Collect())
    assert report.status is Status.PASSED
    said = [m for m in seen if "pending for" in m]
    assert len(said) == 1 and "Resources" in said[0]


@pytest.mark.parametrize("end_state", ["CANCELLED", "TIMEOUT"])
def test_an_allocation_that_ends_under_the_job_is_reported_as_such(
        make_spec: SpecFactory, fake: FakeCluster, end_state: str) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("working",), hang=True))

    class KillAlloc(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            if elapsed_s > 2:
                alloc = next(j for j in fake.jobs.values() if j.kind == "alloc")
                fake.end_job(alloc.job_id, end_state)

    report = run(spec, fake, KillAlloc())
    assert report.status is Status(end_state)
    assert "allocation" in report.summary and "ended under the job" in report.summary
    assert report.path[-1] == "Gone"  # not Ready: the allocation is gone
    assert not spec.state_path.exists()


def test_time_limit_in_the_log_means_timeout_when_accounting_cannot_say(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster(accounting=False, min_job_age_s=0)
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=(
        "working", "srun: error: *** STEP 100.0 ON node01 CANCELLED AT 2026-01-01T00:00:00 "
        "DUE TO TIME LIMIT ***"), hang=True))

    class Expire(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            if "TIME LIMIT" in last_line:
                alloc = next(j for j in fake.jobs.values() if j.kind == "alloc")
                fake.end_job(alloc.job_id, "TIMEOUT")
                fake.clock.advance(1000)  # accounting (scontrol) forgets it

    report = run(spec, fake, Expire())
    assert report.status is Status.TIMEOUT
    assert "time limit" in report.summary


def test_a_one_shot_job_that_can_never_start_is_cancelled_at_once(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster(pending_s=1e9, pending_reason="PartitionTimeLimit")
    spec = one_shot(make_spec)
    start = fake.clock.now()
    report = run(spec, fake)
    assert report.status is Status.ERROR
    assert "PartitionTimeLimit" in report.summary and "never start" in report.summary
    assert fake.clock.now() - start < 10
    assert fake.active_jobs() == []


def test_a_one_shot_job_killed_by_a_signal_exits_128_plus_it(make_spec: SpecFactory,
                                                             fake: FakeCluster) -> None:
    spec = one_shot(make_spec)
    fake.script(spec.script_path, FakeScript(lines=("x",), hang=True))

    class Kill(Events):
        def tick(self, elapsed_s: float, last_line: str) -> None:
            job = next((j for j in fake.jobs.values() if j.kind == "batch" and j.active), None)
            if job is not None and elapsed_s > 2:
                fake.end_job(job.job_id, "FAILED", exit_code=0, signal=9)  # ExitCode 0:9

    report = run(spec, fake, Kill())
    assert report.exit_code == 137
    assert report.status is Status.FAILED  # not PASSED on a "0" exit code


def test_one_shot_passes_the_specs_cpus_per_task_to_sbatch(make_spec: SpecFactory,
                                                          fake: FakeCluster) -> None:
    """Issue 23: ``slurm_params.cpus_per_task`` is ``sbatch --cpus-per-task`` in one-shot
    mode (the script has no ``#SBATCH --cpus-per-task`` of its own)."""
    spec = one_shot(make_spec, success_patterns="passed", slurm_params={"cpus_per_task": 6})
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    assert run(spec, fake).status is Status.PASSED
    submit = next(c for c in fake.calls if c.op == "submit").args["request"]
    assert submit.extra_args == ("--cpus-per-task=6",)


def test_a_persistent_job_gets_its_cpu_share_of_the_granted_allocation(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """Issue 23: 1 GPU of the allocation's 4, on its granted 8 CPUs: 2 CPUs per task."""
    spec = make_spec(alloc_gpus_per_node=4, slurm_params={"gpus_per_node": 1,
                                                          "cpus_per_task": None})
    big = make_spec(slurm_params={"gpus_per_node": 4, "cpus_per_task": 2})
    fake.script(big.script_path, FakeScript(lines=PYTEST_OK))
    assert run(big, fake).status is Status.PASSED  # the allocation: 8 CPUs, 4 GPUs
    fake.reset_calls()
    assert run(spec, fake).status is Status.PASSED
    env = next(c for c in fake.calls if c.op == "start_script").args["request"].env
    assert (env["SRUN_CPUS_PER_TASK"], env["SLURM_GPUS_PER_NODE"]) == ("2", "1")
