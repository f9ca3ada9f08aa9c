"""One fresh view of the allocation shared by the runs of one ``run_many`` (issue 28)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from slurm_fsm import Allocation, FakeCluster, Status
from slurm_fsm.errors import ControllerUnreachable
from slurm_fsm.sharedview import (
    GPU_MAX_AGE_S,
    JOB_MAX_AGE_S,
    SharedBackend,
    SharedView,
    unwrap,
    view_of,
)
from slurm_fsm.testing.fake import FakeClock

from conftest import SpecFactory


def _view(fake: FakeCluster, tmp_path: Path) -> tuple[SharedView, str]:
    """A view over a fake with one running allocation."""
    from slurm_fsm.backend import AllocationRequest
    from slurm_fsm.duration import Duration
    from slurm_fsm.testing.specs import DEFAULT_ACCOUNT, DEFAULT_PARTITION

    view = SharedView(fake, fake.clock)
    job_id = fake.allocate(AllocationRequest(
        job_name="x", partition=DEFAULT_PARTITION, account=DEFAULT_ACCOUNT, nodes=1,
        gpus_per_node=1,
        time_limit=Duration.parse("01:00:00"), log_path=tmp_path / ".salloc.log"))
    return view, job_id


def _ops(fake: FakeCluster) -> Counter[str]:
    return Counter(c.op for c in fake.calls)


def test_an_answer_is_reused_only_within_its_age(tmp_path: Path) -> None:
    fake = FakeCluster()
    view, job_id = _view(fake, tmp_path)
    clock = view.clock
    assert isinstance(clock, FakeClock)
    before = _ops(fake)["query_job"]
    info, at = view.query_job(job_id)
    again, at2 = view.query_job(job_id)
    assert again == info and at2 == at  # reused: when it was asked, not when reused
    assert _ops(fake)["query_job"] == before + 1 and view.reused == 1
    clock.advance(JOB_MAX_AGE_S + 0.01)  # too old: asked again
    _, at3 = view.query_job(job_id)
    assert at3 > at and _ops(fake)["query_job"] == before + 2


def test_not_before_never_gives_an_answer_seen_or_older(tmp_path: Path) -> None:
    fake = FakeCluster()
    view, job_id = _view(fake, tmp_path)
    before = _ops(fake)["query_job"]
    _, at = view.query_job(job_id)
    _, at2 = view.query_job(job_id, not_before=at)  # within the age, but already seen
    assert _ops(fake)["query_job"] == before + 2
    assert view.reused == 0 and at2 >= at


def test_errors_are_not_shared(tmp_path: Path) -> None:
    calls = []

    class Flaky(FakeCluster):
        def query_job(self, job_id: str):  # type: ignore[no-untyped-def]
            calls.append(job_id)
            if len(calls) == 1:
                raise ControllerUnreachable("down")
            return super().query_job(job_id)

    fake = Flaky()
    view, job_id = _view(fake, tmp_path)
    with pytest.raises(ControllerUnreachable):
        view.query_job(job_id)
    view.query_job(job_id)  # asked again: the failure was not kept
    assert len(calls) == 2


def test_one_question_in_flight_at_a_time(tmp_path: Path) -> None:
    """Siblings that ask while an answer is being asked wait for it: one srun."""
    started, release = threading.Event(), threading.Event()

    class Slow(FakeCluster):
        def gpu_processes(self, job_id, nodes, gpus_per_node=None):  # type: ignore[no-untyped-def]
            started.set()
            release.wait(10)
            return super().gpu_processes(job_id, nodes, gpus_per_node)

    fake = Slow(preflight=True)
    view, job_id = _view(fake, tmp_path)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(view.gpu_processes(job_id, 1, 1)))
               for _ in range(4)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert len(got) == 4 and _ops(fake)["gpu_processes"] == 1
    assert view.asked == 1 and view.reused == 3
    assert GPU_MAX_AGE_S >= JOB_MAX_AGE_S


def test_a_fresh_answer_is_taken_without_waiting_for_a_question_in_flight(tmp_path: Path) -> None:
    """Measured on the real cluster: the first step 0 of a run_many's second wave
    waited 97 ms behind the first wave's allocation-end questions (each needs an answer
    asked after its own script's end, so each asks anew, one at a time), though the
    answer it could take (asked well within its age) was there all the while; every
    other run of the wave waited behind it for the state file's lock. A caller whose
    need a kept answer meets takes it at once; only one that needs a newer answer
    waits for the question in flight."""
    asking, release = threading.Event(), threading.Event()
    slow = threading.Event()

    class Slow(FakeCluster):
        def query_job(self, job_id: str):  # type: ignore[no-untyped-def]
            if slow.is_set():
                asking.set()
                release.wait(10)
            return super().query_job(job_id)

    fake = Slow()
    view, job_id = _view(fake, tmp_path)
    _, at = view.query_job(job_id)  # a fresh answer is kept
    slow.set()
    later = threading.Thread(target=view.query_job, args=(job_id,),
                             kwargs={"not_before": at})  # needs a newer one: asks
    later.start()
    try:
        assert asking.wait(10)
        got: list[float] = []
        fast = threading.Thread(target=lambda: got.append(view.query_job(job_id)[1]))
        fast.start()
        fast.join(5)
        assert got == [at]  # the kept answer, while the newer question is still asked
        assert not fast.is_alive()
    finally:
        release.set()
        later.join(10)
    assert view.asked == 2 and view.reused == 1


def _hold_slot(view: SharedView) -> tuple[threading.Thread, threading.Event]:
    """A thread that holds one of the view's job slots (a job still running) until the
    event is set."""
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with view.slot():
            holding.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(10)
    return t, done


def test_end_checks_of_jobs_ending_together_share_one_question(tmp_path: Path) -> None:
    """The allocation-end checks of jobs that end while other jobs of the batch run
    wait for each other (at most ``end_gather_s``) and share one ``squeue``: measured
    on the real cluster, 24 tiny jobs asked 21 of them, one per job. The wait ends at
    once when no job of the batch holds a slot any more (here: the holder's end)."""
    fake = FakeCluster()
    view, job_id = _view(fake, tmp_path)
    view = SharedView(fake, fake.clock, slots=3, end_gather_s=30.0)
    holder, done = _hold_slot(view)
    before = _ops(fake)["query_job"]
    got: list[float] = []
    enders = [threading.Thread(target=lambda: got.append(
        view.allocation_end_row(job_id, ended_at=fake.clock.now())[1])) for _ in range(2)]
    for t in enders:
        t.start()
    pause = threading.Event()
    for _ in range(1000):  # both checks wait for more ends while a job still runs
        if view.gathering == 2 or pause.wait(0.01):
            break
    assert view.gathering == 2 and _ops(fake)["query_job"] == before
    clock = fake.clock
    assert isinstance(clock, FakeClock)
    clock.advance(0.01)  # the question comes after both ends
    done.set()  # the last running job ends: nothing more to wait for
    holder.join(10)
    for t in enders:
        t.join(10)
    assert len(got) == 2 and got[0] == got[1]
    assert _ops(fake)["query_job"] == before + 1


def test_an_end_check_with_no_job_running_asks_at_once(tmp_path: Path) -> None:
    """No other job of the batch runs (the batch's last ones): nothing to wait for."""
    fake = FakeCluster()
    _, job_id = _view(fake, tmp_path)
    view = SharedView(fake, fake.clock, slots=3, end_gather_s=60.0)
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(
        view.allocation_end_row(job_id, ended_at=fake.clock.now())))
    t.start()
    t.join(10)
    assert not t.is_alive() and len(got) == 1


def test_an_end_check_waits_no_longer_than_its_gather_time(tmp_path: Path) -> None:
    fake = FakeCluster()
    _, job_id = _view(fake, tmp_path)
    view = SharedView(fake, fake.clock, slots=3, end_gather_s=0.05)
    holder, done = _hold_slot(view)
    try:
        info, _at = view.allocation_end_row(job_id, ended_at=fake.clock.now())
        assert info.job_id == job_id  # asked while the other job still runs
        assert view.gathering == 0
    finally:
        done.set()
        holder.join(10)


def test_an_end_check_never_takes_an_answer_asked_before_its_end(tmp_path: Path) -> None:
    fake = FakeCluster()
    _, job_id = _view(fake, tmp_path)
    view = SharedView(fake, fake.clock, slots=3, end_gather_s=0.0)
    _, at = view.query_job(job_id)
    _, at2 = view.allocation_end_row(job_id, ended_at=at)
    assert at2 >= at and view.asked == 2


def test_the_view_goes_with_the_backend_a_run_is_given(tmp_path: Path) -> None:
    """No ambient state (issue 40, item 4): a run shares answers when the backend it was
    given carries the batch's view, and only then; the wrapped backend answers as the
    real one does."""
    fake = FakeCluster()
    view, _ = _view(fake, tmp_path)
    run_backend = SharedBackend.wrap(fake, view)
    assert view_of(run_backend) is view and unwrap(run_backend) is fake
    assert view_of(fake) is None and unwrap(fake) is fake
    assert run_backend.current_user() == fake.current_user()
    assert run_backend.clock is fake.clock


def _run_ops(make_spec: SpecFactory, many: bool) -> Counter[str]:
    fake = FakeCluster(preflight=True, gpus_per_node=8)
    specs = [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": 1})
             for i in range(4)]
    alloc = Allocation(specs[0].repo_root, fake)
    assert alloc.run(specs[0]).status is Status.PASSED  # warm
    n0 = len(fake.calls)
    reports = alloc.run_many(specs, max_parallel=4) if many else [alloc.run(s) for s in specs]
    assert [r.status for r in reports] == [Status.PASSED] * 4
    return Counter(c.op for c in fake.calls[n0:])


def test_run_many_shares_the_job_row_and_the_gpu_check(make_spec: SpecFactory) -> None:
    """Each run still validates and checks the GPUs; siblings share the answers."""
    ops = _run_ops(make_spec, many=True)
    assert ops["start_script"] == 4
    assert 1 <= ops["gpu_processes"] < 4
    assert 1 <= ops["query_job"] < 8  # step 0's and the allocation-end check's


def test_runs_one_after_another_each_ask_slurm(make_spec: SpecFactory) -> None:
    ops = _run_ops(make_spec, many=False)
    assert ops["gpu_processes"] == 4 and ops["query_job"] == 8


# ---------------------------------------------------------------- the batch's lease step
class _Handle:
    """A lease handle that says when it is stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = 0

    def alive(self) -> bool:
        return self.stopped == 0

    def stop(self) -> None:
        self.stopped += 1


def _taker(log: list[tuple[str, float]], handles: list[_Handle], dropped: list[str]):  # type: ignore[no-untyped-def]
    def take(until: float):  # type: ignore[no-untyped-def]
        run_id = f"r{len(log):012x}"
        log.append((run_id, until))
        handles.append(_Handle(f"fsm-lease.{run_id}.{int(until)}"))
        return handles[-1], run_id, lambda: dropped.append(run_id)
    return take


def test_the_runs_of_a_batch_share_one_lease_step_until_the_last_gives_it_back() -> None:
    from slurm_fsm.sharedview import LEASE_HEADROOM_S

    view = SharedView(FakeCluster(), FakeClock())
    log: list[tuple[str, float]] = []
    handles: list[_Handle] = []
    dropped: list[str] = []
    take = _taker(log, handles, dropped)
    a, ida = view.lease(("7", ""), 1000.0, take)
    b, idb = view.lease(("7", ""), 1000.0 + LEASE_HEADROOM_S, take)  # within its max_until
    assert ida == idb and len(log) == 1 and log[0][1] == 1000.0 + LEASE_HEADROOM_S
    assert view.leases_started == 1 and view.leases_joined == 1
    a.stop()
    a.stop()  # twice: one share given back
    assert handles[0].stopped == 0 and b.alive() and not a.alive()
    b.stop()  # the last share: the step ends, then its record is dropped
    assert handles[0].stopped == 1 and dropped == [ida]
    c, idc = view.lease(("7", ""), 1000.0, take)  # none runs now: a new one
    assert idc != ida and len(log) == 2
    c.stop()


def test_a_lease_that_ends_too_early_or_is_gone_is_not_joined() -> None:
    from slurm_fsm.sharedview import LEASE_HEADROOM_S

    view = SharedView(FakeCluster(), FakeClock())
    log: list[tuple[str, float]] = []
    handles: list[_Handle] = []
    dropped: list[str] = []
    take = _taker(log, handles, dropped)
    a, ida = view.lease(("7", ""), 1000.0, take)
    later, idl = view.lease(("7", ""), 1000.0 + LEASE_HEADROOM_S + 1, take)  # too early
    assert idl != ida and len(log) == 2
    other, ido = view.lease(("7", "c2"), 1000.0, take)  # another container: its own
    assert ido not in (ida, idl)
    handles[1].stopped = 1  # its srun died
    again, idg = view.lease(("7", ""), 1000.0, take)
    assert idg not in (ida, idl, ido) and len(log) == 4
    a.stop()  # the first one still ends with its own last holder
    assert handles[0].stopped == 1 and ida in dropped
    for share in (later, other, again):
        share.stop()


def test_a_lease_that_could_not_be_taken_is_not_kept() -> None:
    view = SharedView(FakeCluster(), FakeClock())

    def fail(until: float):  # type: ignore[no-untyped-def]
        raise ControllerUnreachable("down")

    with pytest.raises(ControllerUnreachable):
        view.lease(("7", ""), 1000.0, fail)
    log: list[tuple[str, float]] = []
    share, _ = view.lease(("7", ""), 1000.0, _taker(log, [], []))
    assert len(log) == 1
    share.stop()


def test_run_many_holds_one_lease_step_every_host_sees(make_spec: SpecFactory) -> None:
    """4 runs at once: one lease step, listed while their jobs run, seen by another
    process's gate as a holder, and by each run's own gate as its own; gone after."""
    from slurm_fsm.lease import LeaseGate, lease_steps
    from slurm_fsm.persistent import run_book

    seen: dict[str, object] = {}
    barrier = threading.Barrier(4, timeout=20)

    class Together(FakeCluster):
        batch = False

        def start_script(self, request):  # type: ignore[no-untyped-def]
            if self.batch and barrier.wait() == 0:  # every run of the batch is past its step 0 here
                job = request.env["SLURM_JOB_ID"]
                seen["leases"] = lease_steps(self.list_steps(job))
                other = LeaseGate(run_book(specs[0]), wait_s=0, backend=self)
                seen["holders"] = other.holders(job)
            return super().start_script(request)

    fake = Together(preflight=True, gpus_per_node=8)
    specs = [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": 1})
             for i in range(4)]
    alloc = Allocation(specs[0].repo_root, fake)
    assert alloc.run(specs[0]).status is Status.PASSED  # warm: a run alone, its own lease
    fake.reset_calls()
    fake.batch = True
    reports = alloc.run_many(specs, max_parallel=4)
    assert [r.status for r in reports] == [Status.PASSED] * 4
    assert fake.count("start_lease") == 1
    leases = seen["leases"]
    assert isinstance(leases, list) and len(leases) == 1
    holders = seen["holders"]
    assert isinstance(holders, list) and leases[0].run_id in {h.run_id for h in holders}
    state = alloc.state()
    assert state is not None
    assert lease_steps(fake.list_steps(state.job_id)) == []  # stopped with the last run
    assert run_book(specs[0]).records() == []  # every record deleted, the batch's too



def test_a_proof_of_a_writable_folder_is_shared_a_problem_never() -> None:
    from slurm_fsm.sharedview import WRITABLE_MAX_AGE_S

    view = SharedView(FakeCluster(), FakeClock())
    clock = view.clock
    assert isinstance(clock, FakeClock)
    answers = iter(["disk full", None, None])
    asked: list[int] = []

    def ask() -> str | None:
        asked.append(1)
        return next(answers)

    assert view.writable_problem("/x", ask) == "disk full"
    assert view.writable_problem("/x", ask) is None  # the problem was not kept: asked
    assert view.writable_problem("/x", ask) is None and len(asked) == 2  # the proof taken
    clock.advance(WRITABLE_MAX_AGE_S + 0.01)
    assert view.writable_problem("/x", ask) is None and len(asked) == 3  # too old: asked


# ------------------------------------------------------ the budget of controller calls
#: The published budget (docs/steprate.md): the controller calls of one warm run that
#: asks GPUs, besides its script's own srun: step 0's squeue, the GPU check (a step), the
#: lease step, the allocation-end squeue.
#: 3 query/list calls (2 squeue, 1 squeue -s: the taker's check for a closing marker)
WARM_RUN_BUDGET = {"query_job": 2, "list_steps": 1, "gpu_processes": 1, "start_lease": 1}


def test_a_warm_run_keeps_to_the_budget_of_controller_calls(make_spec: SpecFactory) -> None:
    from slurm_fsm.testing.fake import CONTROLLER_OPS

    fake = FakeCluster(preflight=True, gpus_per_node=8)
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED  # the first run allocates
    fake.reset_calls()
    assert alloc.run(spec).status is Status.PASSED
    assert Counter(op for op in fake.ops() if op in CONTROLLER_OPS) == WARM_RUN_BUDGET


def test_a_batch_keeps_to_the_budget_per_run(make_spec: SpecFactory) -> None:
    """8 runs, 4 at once, that overlap: one lease step for the batch, one GPU check,
    and at most the single run's squeues each; nothing else asked of Slurm."""
    from slurm_fsm.testing.fake import CONTROLLER_OPS

    barrier = threading.Barrier(4, timeout=20)

    class Overlapping(FakeCluster):
        batch = False

        def start_script(self, request):  # type: ignore[no-untyped-def]
            if self.batch:
                barrier.wait()  # 4 runs past their step 0 at once, twice
            return super().start_script(request)

    fake = Overlapping(preflight=True, gpus_per_node=8)
    specs = [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": 1})
             for i in range(8)]
    alloc = Allocation(specs[0].repo_root, fake)
    assert alloc.run(specs[0]).status is Status.PASSED
    fake.reset_calls()
    fake.batch = True
    reports = alloc.run_many(specs, max_parallel=4)
    assert [r.status for r in reports] == [Status.PASSED] * 8
    ops = Counter(op for op in fake.ops() if op in CONTROLLER_OPS)
    assert set(ops) <= set(WARM_RUN_BUDGET)
    assert ops["start_lease"] <= 2  # one per batch (a second if every share was given back)
    assert ops["list_steps"] == ops["start_lease"]  # the closing check: one per lease step
    assert ops["gpu_processes"] <= 2  # the fake's clock stands: one check, shared
    assert ops["query_job"] <= 8 * WARM_RUN_BUDGET["query_job"]


def test_run_many_bounds_the_jobs_at_once_not_the_runs_reporting(
        make_spec: SpecFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_parallel`` jobs' scripts at once, never more; a run whose script has ended
    gives its slot to the next job before its own checks after the script (the
    allocation-end ``squeue``, the report): those overlap the next script. Here the
    first runs' checks after their scripts wait until a third script has started: with
    the slot held to the end of the run, none would (and each would wait 20 s)."""
    from slurm_fsm import persistent

    parallel, total = 2, 5
    lock = threading.Lock()
    started = threading.Condition(lock)
    state = {"scripts": 0, "running": 0, "most": 0}

    class Counting(FakeCluster):
        def start_script(self, request):  # type: ignore[no-untyped-def]
            with lock:
                state["scripts"] += 1
                state["running"] += 1
                state["most"] = max(state["most"], state["running"])
                started.notify_all()
            return super().start_script(request)

    real_watch, real_ended = persistent.PersistentRun._watch, persistent.PersistentRun._ended
    overlapped: list[bool] = []

    def watch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with lock:  # the fake's scripts end at once: each runs until a sibling runs too
            started.wait_for(lambda: state["running"] >= parallel
                             or state["scripts"] == total, timeout=20)
        out = real_watch(self, *args, **kwargs)  # the script has ended: its slot is free
        with lock:
            state["running"] -= 1
        return out

    def ended(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        with lock:
            overlapped.append(started.wait_for(lambda: state["scripts"] > parallel
                                               or state["scripts"] == total, timeout=20))
        return real_ended(self, *args, **kwargs)

    monkeypatch.setattr(persistent.PersistentRun, "_watch", watch)
    monkeypatch.setattr(persistent.PersistentRun, "_ended", ended)
    fake = Counting(preflight=True, gpus_per_node=8)
    specs = [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": 1})
             for i in range(total)]
    alloc = Allocation(specs[0].repo_root, fake)
    reports = alloc.run_many(specs, max_parallel=parallel)
    assert [r.status for r in reports] == [Status.PASSED] * total
    assert state["scripts"] == total
    assert state["most"] == parallel  # never more jobs at once than asked
    assert overlapped == [True] * total
