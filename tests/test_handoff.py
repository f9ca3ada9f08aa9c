"""The warm successor's hand-off (issue 27) on the fake cluster: queue, switch, drain,
wait for it, lose it, the warmer and its death. Every test has ``warm_successor`` on;
with it off nothing here happens (the rest of the suite, untouched, is that proof)."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest

from slurm_fsm.lease import LeaseGate
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.runrecord import RunBook
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0.table import EDGES, Edge, Effect, Observation, State, choose
from slurm_fsm.successor import (
    DEFAULT_LEAD_S,
    SINGLETON,
    Phase,
    read_successor,
    write_successor,
)
from slurm_fsm.testing import FakeCluster
from slurm_fsm.warmer import warm

from conftest import SpecFactory

HOUR = 3600
MARGIN = 300
EXPECTED = 600
#: the time left at which a successor is due: longest job + lead time + margin
DUE_AT = EXPECTED + DEFAULT_LEAD_S + MARGIN


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def spec(make_spec: SpecFactory) -> JobSpec:
    return make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True)


def machine(spec: JobSpec, fake: FakeCluster, **kw: object) -> AllocationMachine:
    return AllocationMachine(spec, fake, clock=fake.clock, **kw)  # type: ignore[arg-type]


def first_allocation(spec: JobSpec, fake: FakeCluster) -> AllocState:
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.alloc is not None
    return m.alloc


def successor_file(spec: JobSpec) -> AllocState | None:
    return StateStore(StatePaths.for_state_file(spec.state_path).successor_state).read()


def queue_pending(spec: JobSpec, fake: FakeCluster, pending_s: float = 120) -> AllocState:
    """A run near expiry queues the successor, which pends ``pending_s``."""
    fake.pending_s = pending_s
    fake.clock.advance(HOUR - DUE_AT)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "QueueingSuccessor", "Validating", "Ready"]
    fake.pending_s = 0
    succ = successor_file(spec)
    assert succ is not None
    return succ


def live_allocations(fake: FakeCluster) -> list[str]:
    return [j.job_id for j in fake.jobs.values() if j.kind == "alloc" and j.active]


def test_plenty_of_time_left_queues_nothing(spec: JobSpec, fake: FakeCluster) -> None:
    first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT - 1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]
    assert successor_file(spec) is None


def test_near_expiry_the_first_run_queues_a_singleton_successor(spec: JobSpec,
                                                                fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    assert succ.job_id != old.job_id and not succ.nodelist
    job = fake.jobs[succ.job_id]
    assert job.name == spec.job_name + "-b" and job.dependency == SINGLETON
    record = read_successor(StatePaths.for_state_file(spec.state_path).successor_record)
    assert record is not None and record.predecessor == old.job_id
    assert record.phase is Phase.PENDING  # no warmer on the fake
    # the next run sees it queued: never a second one (at most 2 allocations)
    m2 = machine(spec, fake)
    assert m2.prepare().state is State.Ready
    assert m2.path == ["NoState", "Validating", "Ready"]
    assert m2.alloc is not None and m2.alloc.job_id == old.job_id  # the job fits the old
    assert len(live_allocations(fake)) == 2


def test_a_successor_up_at_once_takes_the_job_at_once(spec: JobSpec,
                                                      fake: FakeCluster) -> None:
    """No queue wait, nothing to set up: the successor is ready when validated again,
    has the most time left, so the job goes there and the idle old one is released."""
    old = first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "QueueingSuccessor", "Validating",
                      "Switching", "Validating", "Ready"]
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert len(live_allocations(fake)) == 1


def test_a_ready_successor_takes_new_jobs_and_the_idle_old_one_is_released(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.clock.advance(121)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Switching", "Validating", "Ready"]
    assert m.alloc is not None and m.alloc.job_id == succ.job_id
    state = StateStore(spec.state_path).read()
    assert state is not None and state.job_id == succ.job_id  # the procedure's file
    assert successor_file(spec) is None
    assert read_successor(StatePaths.for_state_file(spec.state_path).successor_record) is None
    assert fake.jobs[old.job_id].state == "CANCELLED"  # nothing on it: released now
    assert live_allocations(fake) == [succ.job_id]
    # the switched-to allocation, named -b, is reused (not "Incompatible")
    again = machine(spec, fake)
    assert again.prepare().state is State.Ready
    assert again.path == ["NoState", "Validating", "Ready"]


def test_the_old_one_drains_under_another_runs_job_and_its_end_releases_it(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    book = RunBook(spec.state_path)
    other = book.start(old.job_id, model="other-model")
    queue_pending(spec, fake)
    fake.clock.advance(121)
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Ready
    assert m.path[-3:] == ["Switching", "Validating", "Ready"]
    assert fake.jobs[old.job_id].state == "RUNNING"  # never cut under the other job
    assert any("drains" in n for n in m.notes)
    # the other run's job ends: its finish releases the old allocation
    on_old = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    on_old.alloc = old
    on_old.machine.set_state(State.Running)
    book.delete(other)
    assert on_old.finish(reason="job finished")
    assert on_old.state is State.Ready
    assert Effect.RELEASE_DRAINED.value in on_old.history[-1].reason or \
        fake.jobs[old.job_id].state == "CANCELLED"
    assert fake.jobs[old.job_id].state == "CANCELLED"


def test_a_job_that_does_not_fit_waits_for_the_successor_never_cold(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake, pending_s=900)
    fake.clock.advance(DUE_AT - EXPECTED - MARGIN + 1)  # the job no longer fits the old
    said: list[str] = []
    m = machine(spec, fake, log=said.append)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "AwaitingSuccessor"]
    assert m.path[-3:] == ["Switching", "Validating", "Ready"]
    assert "TooShort" not in m.path and "Allocating" not in m.path
    assert any("waiting for successor" in s.lower() and "PENDING" in s for s in said)
    assert m.alloc is not None and m.alloc.job_id == succ.job_id != old.job_id
    assert len(live_allocations(fake)) == 1


def test_a_successor_that_never_starts_is_cancelled_and_today_path_follows(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    fake.pending_s = 10 * HOUR
    fake.pending_reason = "PartitionTimeLimit"
    fake.clock.advance(HOUR - DUE_AT)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "QueueingSuccessor", "Validating",
                      "Validating", "Ready"]
    (succ_id,) = [j for j in fake.jobs if j != old.job_id]
    assert fake.jobs[succ_id].state == "CANCELLED"
    assert any("cannot start" in w for w in m.warnings)
    assert successor_file(spec) is None
    assert m.alloc is not None and m.alloc.job_id == old.job_id


def test_with_the_state_file_gone_a_queued_successor_becomes_the_allocation(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.clock.advance(121)
    fake.cancel(old.job_id)  # the old allocation dies early
    StateStore(spec.state_path).delete()
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Switching", "Validating", "Ready"]
    assert m.alloc is not None and m.alloc.job_id == succ.job_id
    assert live_allocations(fake) == [succ.job_id]  # no orphan search, no third one


def test_the_orphan_search_never_cancels_the_queued_successor(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.jobs[old.job_id].state = "CANCELLED"  # gone, with its state file
    m = machine(spec, fake)
    m.prepare()
    assert fake.jobs[succ.job_id].state != "CANCELLED"


def test_the_warmer_sets_the_successor_up_and_marks_it_ready(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, docker_image="nvcr.io/x:1", container_name="c")
    first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    started: list[JobSpec] = []
    alive = os.getpid()  # a live process stands for the warmer
    m = machine(spec, fake, warmer=lambda s: started.append(s) or alive)
    assert m.prepare().state is State.Ready
    # the warmer works on the successor: the job runs on the old one meanwhile
    assert m.path == ["NoState", "Validating", "QueueingSuccessor", "Validating", "Ready"]
    (succ_spec,) = started
    assert succ_spec.job_name == spec.job_name + "-b" and not succ_spec.warm_successor
    record = read_successor(StatePaths.for_state_file(spec.state_path).successor_record)
    assert record is not None and record.phase is Phase.WARMING and record.warmer_pid == alive
    said: list[str] = []
    assert warm(succ_spec, fake, spec.state_path, clock=fake.clock,
                log=said.append) is State.Ready
    # which path the successor's container took, and how long: in the warmer's log
    assert any(line.startswith("successor set up: container 'c': ") and " s)" in line
               for line in said), said
    succ = successor_file(spec)
    assert succ is not None and succ.installed and succ.container_name == "c"
    record = read_successor(StatePaths.for_state_file(spec.state_path).successor_record)
    assert record is not None and record.phase is Phase.READY
    n = machine(spec, fake)
    assert n.prepare().state is State.Ready
    assert n.path == ["NoState", "Validating", "Switching", "Validating", "Ready"]
    assert n.alloc is not None and n.alloc.job_id == succ.job_id


def test_a_dead_warmer_leaves_a_successor_the_next_run_finishes(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """kill -9 of the warmer: the successor runs, its file says not installed, nobody
    holds its lock; the run that needs it switches and finishes the set-up (0F)."""
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, docker_image="nvcr.io/x:1", container_name="c")
    first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    machine(spec, fake, warmer=lambda _s: os.getpid()).prepare()
    path = StatePaths.for_state_file(spec.state_path).successor_record
    record = read_successor(path)
    assert record is not None
    write_successor(path, attrs.evolve(record, warmer_pid=dead_pid()))  # kill -9
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path[:4] == ["NoState", "Validating", "Switching", "Validating"]
    assert "Importing" in m.path and "Installing" in m.path
    state = StateStore(spec.state_path).read()
    assert state is not None and state.installed


def test_a_job_that_does_not_fit_waits_while_the_warmer_works_then_finishes_it(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, docker_image="nvcr.io/x:1", container_name="c")
    first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    machine(spec, fake, warmer=lambda _s: os.getpid()).prepare()
    fake.clock.advance(DUE_AT - EXPECTED - MARGIN + 1)  # no longer fits the old one
    path = StatePaths.for_state_file(spec.state_path).successor_record
    record = read_successor(path)
    assert record is not None

    class WarmerDies(type(fake.clock)):  # type: ignore[misc]
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            write_successor(path, attrs.evolve(record, warmer_pid=dead_pid()))

    m = AllocationMachine(spec, fake, clock=WarmerDies(fake.clock.now()))
    assert m.prepare().state is State.Ready
    assert m.path[:5] == ["NoState", "Validating", "AwaitingSuccessor", "AwaitingSuccessor",
                          "Switching"]
    assert "Importing" in m.path


def dead_pid() -> int:
    """A pid no process has."""
    pid = 2**22 - 1  # above the default pid_max of most systems
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        pid -= 1


def test_without_warm_successor_the_table_never_takes_the_new_edges(
        make_spec: SpecFactory) -> None:
    spec = make_spec(alloc_time_limit="01:00:00")
    obs = Observation(trigger="advance", source=State.Validating, successor_due=True,
                      successor="ready")
    new = {State.QueueingSuccessor, State.AwaitingSuccessor, State.Switching}
    for source in (State.NoState, State.Validating):
        for trigger in ("start", "advance"):
            edge = choose(trigger, source, obs, spec)
            assert edge is None or edge.dest not in new


def _edges(dest: State) -> list[Edge]:
    return [e for e in EDGES if e.dest is dest]


def test_every_edge_into_the_successor_states_needs_warm_successor() -> None:
    for dest in (State.QueueingSuccessor, State.AwaitingSuccessor, State.Switching):
        for e in _edges(dest):
            if e.source in (State.NoState, State.Validating):
                assert "warm_successor" in e.conditions, e


@pytest.mark.parametrize(("obs", "dest"), [
    ({"successor": "ready"}, State.Switching),
    ({"successor": "running", "warmer_alive": True, "pending_wait_left_s": 5.0},
     State.AwaitingSuccessor),
    ({"successor": "running", "warmer_alive": False}, State.Switching),
    ({"successor": "pending", "pending_wait_left_s": 5.0}, State.AwaitingSuccessor),
    ({"successor": "pending", "pending_wait_left_s": 0.0}, State.Failed),
    ({"successor": "lost"}, State.Validating),
])
def test_awaiting_successor_edges(make_spec: SpecFactory, obs: dict[str, object],
                                  dest: State) -> None:
    spec = make_spec(warm_successor=True)
    o = Observation(trigger="advance", source=State.AwaitingSuccessor, **obs)  # type: ignore[arg-type]
    edge = choose("advance", State.AwaitingSuccessor, o, spec)
    assert edge is not None and edge.dest is dest


def test_the_successor_state_file_sits_beside_the_state_file(tmp_path: Path) -> None:
    assert StatePaths.for_state_file(tmp_path / ".slurm_alloc.json").successor_state == \
        tmp_path / ".slurm_alloc.successor.json"


def test_status_shows_both_allocations_and_the_successor_state(
        spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.allocation import Allocation

    old = first_allocation(spec, fake)
    alloc = Allocation(spec.repo_root, backend=fake, clock=fake.clock)  # type: ignore[arg-type]
    assert alloc.status(spec).successor is None
    assert "successor" not in alloc.status(spec).to_dict()  # keys unchanged without one
    succ = queue_pending(spec, fake)
    status = alloc.status(spec)
    assert status.job_id == old.job_id
    assert status.successor is not None
    assert status.successor["job_id"] == succ.job_id
    assert status.successor["slurm_state"] == "PENDING"
    assert status.successor["phase"] == "pending"
    assert status.successor["predecessor"] == old.job_id
    text = status.render_text()
    assert f"successor allocation {succ.job_id} ({spec.job_name}-b): PENDING" in text
    assert f"follows {old.job_id}" in text
    fake.clock.advance(121)
    assert alloc.status(spec).successor["phase"] == "ready"  # type: ignore[index]
    assert alloc.status(spec).to_dict()["successor"]["slurm_state"] == "RUNNING"


def test_a_release_releases_the_queued_successor_too(spec: JobSpec,
                                                     fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    m = machine(attrs.evolve(spec, release_allocation=True), fake)
    assert m.prepare().state is State.Released
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert fake.jobs[succ.job_id].state == "CANCELLED"
    assert successor_file(spec) is None
    assert read_successor(StatePaths.for_state_file(spec.state_path).successor_record) is None
    assert f"its successor {succ.job_id}" in m.history[-1].reason


def test_plan_says_what_the_next_hand_off_does_and_changes_nothing(
        spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.plan import make_plan

    old = first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    plan = make_plan(spec, fake, clock=fake.clock)
    assert plan.path == ["NoState", "Validating", "QueueingSuccessor", "Validating", "Ready"]
    (salloc,) = [c.argv for c in plan.commands if c.argv[0] == "salloc"]
    assert f"--job-name={spec.job_name}-b" in salloc and "--dependency=singleton" in salloc
    assert successor_file(spec) is None and live_allocations(fake) == [old.job_id]
    # with one queued (pending), the plan sees it: nothing more is queued
    fake.pending_s = 120
    machine(spec, fake).prepare()
    plan = make_plan(spec, fake, clock=fake.clock)
    assert plan.path == ["NoState", "Validating", "Ready"]
    assert not [c for c in plan.commands if c.argv[0] == "salloc"]


# --------------------------------------------------------------------------------------
# issue 27, the rest: the report names the wait; the drain after a kill -9; a successor
# of another shape.


def test_the_report_says_the_job_waited_for_the_successor_and_how_long(
        spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.executor import Executor
    from slurm_fsm.results import Status

    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake, pending_s=900)
    fake.clock.advance(DUE_AT - EXPECTED - MARGIN + 1)  # the job no longer fits the old
    pending_for = fake.jobs[succ.job_id].pending_until - fake.clock.now()
    assert pending_for > 0
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, report.render_text()
    assert report.allocation_id == succ.job_id != old.job_id
    assert "AwaitingSuccessor" in report.path
    waited = report.timings["successor_wait_s"]
    # it waited until the successor ran (the fake clock: the polls' back-off past it)
    assert pending_for <= waited <= pending_for + 11
    assert waited <= report.timings["step0_s"]
    assert any(n.startswith(f"waited {waited:.1f} s for successor allocation {succ.job_id}")
               for n in report.notes), report.notes
    text = report.render_text()
    assert "hand-off:" in text and "for a successor allocation" in text
    assert _round_trips(report)


def test_a_job_that_fits_reports_no_successor_wait(spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.executor import Executor

    first_allocation(spec, fake)
    queue_pending(spec, fake, pending_s=900)
    report = Executor(spec, fake, clock=fake.clock).run()
    assert "successor_wait_s" not in report.timings
    assert "hand-off:" not in report.render_text()


def _round_trips(report: object) -> bool:
    from slurm_fsm.report import Report

    assert isinstance(report, Report)
    back = Report.from_json(report.to_json())
    return back.timings == report.timings


def drained_file(spec: JobSpec) -> AllocState | None:
    return StateStore(StatePaths.for_state_file(spec.state_path).drained_state).read()


def switch_under_another_run(spec: JobSpec, fake: FakeCluster) -> tuple[AllocState, RunBook,
                                                                         str]:
    """A run's job is on the old allocation when another run switches to the successor:
    the old one drains (recorded beside the state file). The old one, the run book and
    the successor's id."""
    old = first_allocation(spec, fake)
    book = RunBook(spec.state_path)
    book.start(old.job_id, model="on-the-old-one")  # this process: alive
    succ = queue_pending(spec, fake)
    fake.clock.advance(121)
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Ready
    assert m.path[-3:] == ["Switching", "Validating", "Ready"]
    assert fake.jobs[old.job_id].state == "RUNNING"  # drains under the other run's job
    recorded = drained_file(spec)
    assert recorded is not None and recorded.job_id == old.job_id
    assert recorded.submit_time  # its generation
    return old, book, succ.job_id


def kill_9(book: RunBook) -> None:
    """The run on the old allocation dies by kill -9: its record stays, its pid is gone
    (its lease step, tied to it, is gone with it on real Slurm)."""
    for record in book.records():
        book.save(attrs.evolve(record, pid=dead_pid()))


def test_a_drained_allocation_whose_last_run_was_killed_is_released_by_the_next_run(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, succ = switch_under_another_run(spec, fake)
    kill_9(book)  # its finish never comes: today the old one lives to its walltime
    said: list[str] = []
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock),
                log=said.append)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]
    assert m.alloc is not None and m.alloc.job_id == succ
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert any(f"Releasing drained allocation {old.job_id}" in s for s in said)
    assert drained_file(spec) is None
    assert live_allocations(fake) == [succ]


def test_a_drained_allocation_with_a_live_lease_is_never_released(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, _ = switch_under_another_run(spec, fake)
    for _ in range(2):  # the other run's job still runs: every next run leaves it
        m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
        assert m.prepare().state is State.Ready
        assert fake.jobs[old.job_id].state == "RUNNING"
        assert any(f"allocation {old.job_id} drains" in n for n in m.notes), m.notes
    assert drained_file(spec) is not None  # still looked for by the next runs


def test_a_drained_record_whose_id_slurm_reused_never_cancels_that_job(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, _ = switch_under_another_run(spec, fake)
    kill_9(book)
    fake.jobs[old.job_id].submitted_at += 7 * 24 * HOUR  # another job under that id
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Ready
    assert fake.jobs[old.job_id].state == "RUNNING"
    assert any("reused by another job" in w for w in m.warnings), m.warnings
    assert drained_file(spec) is None


def test_a_drained_record_naming_another_checkouts_job_never_cancels_it(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, _ = switch_under_another_run(spec, fake)
    kill_9(book)
    fake.jobs[old.job_id].comment = "slurm_fsm:repo=0123456789ab"
    fake.jobs[old.job_id].name = "someone-else"
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Ready
    assert fake.jobs[old.job_id].state == "RUNNING"
    assert drained_file(spec) is None


def test_a_release_releases_a_drained_allocation_too(spec: JobSpec,
                                                     fake: FakeCluster) -> None:
    old, book, succ = switch_under_another_run(spec, fake)
    kill_9(book)
    m = machine(attrs.evolve(spec, release_allocation=True), fake,
                leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Released
    assert fake.jobs[succ].state == "CANCELLED"
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert drained_file(spec) is None


def test_the_finish_of_the_last_run_on_a_drained_one_forgets_its_record(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, _ = switch_under_another_run(spec, fake)
    on_old = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    on_old.alloc = old
    on_old.machine.set_state(State.Running)
    for record in book.records():
        book.delete(record)
    assert on_old.finish(reason="job finished")
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert drained_file(spec) is None


def test_a_successor_granted_another_shape_is_cancelled_and_reported(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """Asked for 2 nodes, granted 1 (a --nodes=1-2 range, a site's rewrite): it cannot
    serve the spec. Cancelled, said why, and today's path: the job runs on the old one."""
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, slurm_params={"nodes": 2})
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    job = fake.jobs[succ.job_id]
    job.num_nodes, job.nodes = 1, job.nodes[:1]  # the grant: one node
    fake.clock.advance(121)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert "Switching" not in m.path
    assert m.alloc is not None and m.alloc.job_id == old.job_id
    assert fake.jobs[succ.job_id].state == "CANCELLED"
    (warning,) = [w for w in m.warnings if succ.job_id in w]
    assert "granted another shape" in warning and "nodes 2" in warning, warning
    assert successor_file(spec) is None
    assert read_successor(StatePaths.for_state_file(spec.state_path).successor_record) is None
    assert live_allocations(fake) == [old.job_id]


def test_a_successor_granted_fewer_gpus_is_cancelled_before_a_job_waits_on_it(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, slurm_params={"gpus_per_node": 2})
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.jobs[succ.job_id].gpus_per_node = 1  # granted fewer GPUs than asked
    fake.clock.advance(121)
    fake.clock.advance(DUE_AT - EXPECTED - MARGIN + 1 - 121)  # the job no longer fits old
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    # never waits for it, never switches to it: today's path (a fresh allocation)
    assert "AwaitingSuccessor" not in m.path and "Switching" not in m.path
    assert fake.jobs[succ.job_id].state == "CANCELLED"
    assert any("granted another shape" in w and "gpus_per_node 2" in w for w in m.warnings)
    assert m.alloc is not None and m.alloc.job_id not in (old.job_id, succ.job_id)


def test_plan_says_it_would_release_a_drained_allocation_and_changes_nothing(
        spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.plan import make_plan

    old, book, _ = switch_under_another_run(spec, fake)
    kill_9(book)
    plan = make_plan(spec, fake, clock=fake.clock)
    assert ["scancel", old.job_id] in [list(c.argv) for c in plan.commands], plan.commands
    assert fake.jobs[old.job_id].state == "RUNNING"
    assert drained_file(spec) is not None  # the real record: untouched


def test_status_shows_the_draining_allocation(spec: JobSpec, fake: FakeCluster) -> None:
    from slurm_fsm.allocation import Allocation

    alloc = Allocation(spec.repo_root, backend=fake, clock=fake.clock)  # type: ignore[arg-type]
    old, book, succ = switch_under_another_run(spec, fake)
    status = alloc.status(spec)
    assert status.job_id == succ
    assert status.drained is not None and status.drained["job_id"] == old.job_id
    assert status.to_dict()["drained"]["slurm_state"] == "RUNNING"
    assert f"draining allocation {old.job_id}: RUNNING" in status.render_text()
    assert fake.jobs[old.job_id].state == "RUNNING"  # status releases nothing
    kill_9(book)
    machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock)).prepare()
    assert alloc.status(spec).drained is None
    assert "drained" not in alloc.status(spec).to_dict()


def test_a_release_leaves_a_drained_allocation_in_use_and_says_so(
        spec: JobSpec, fake: FakeCluster) -> None:
    old, book, succ = switch_under_another_run(spec, fake)  # its run's job still runs
    m = machine(attrs.evolve(spec, release_allocation=True), fake,
                leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Released
    assert fake.jobs[succ].state == "CANCELLED"
    assert fake.jobs[old.job_id].state == "RUNNING"  # never under a running job
    assert any(f"the drained allocation {old.job_id} was not released" in w
               for w in m.warnings), m.warnings


# --------------------------------------------------------------------------------------
# Issue 44 item 3: the successor on the node of the allocation it follows (pyxis: one
# container of a name per node) never touches the container the old one's jobs use.


def _warm_beside_old(make_spec: SpecFactory, fake: FakeCluster,
                     image: str = "nvcr.io/x:1") -> tuple[JobSpec, JobSpec, AllocState]:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, docker_image="nvcr.io/x:1", container_name="c")
    old = first_allocation(spec, fake)
    fake.clock.advance(HOUR - DUE_AT)
    started: list[JobSpec] = []
    m = machine(spec, fake, warmer=lambda s: started.append(s) or os.getpid())
    assert m.prepare().state is State.Ready
    (succ_spec,) = started
    return spec, attrs.evolve(succ_spec, docker_image=image), old


def test_a_successor_on_the_old_ones_node_uses_its_ready_container_and_imports_nothing(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec, succ_spec, old = _warm_beside_old(make_spec, fake)
    (node,) = fake.jobs[old.job_id].nodes
    before = fake.nodes[node].containers["c"]
    installed = list(before.packages)
    said: list[str] = []
    assert warm(succ_spec, fake, spec.state_path, clock=fake.clock,
                log=said.append) is State.Ready
    # nothing installed again into the container the old allocation's jobs run in
    assert before.packages == installed
    assert not any(s.startswith("Installing") for s in said), said
    succ = successor_file(spec)
    assert succ is not None and succ.nodelist == old.nodelist  # both on one node
    assert succ.installed and succ.container_name == "c"
    # the very container the old allocation's jobs use: not removed, not re-imported
    assert fake.nodes[node].containers["c"] is before
    assert before.packages  # its install is kept


def test_a_successor_beside_a_container_not_set_up_yet_imports_nothing_there(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """The old allocation's container is being set up (its state file says not
    installed): the warmer leaves the node alone; the run that switches sets it up."""
    spec, succ_spec, old = _warm_beside_old(make_spec, fake)
    StateStore(spec.state_path).write(attrs.evolve(old, installed=False))
    (node,) = fake.jobs[old.job_id].nodes
    before = fake.nodes[node].containers["c"]
    assert warm(succ_spec, fake, spec.state_path, clock=fake.clock) is State.Failed
    assert fake.nodes[node].containers["c"] is before
    succ = successor_file(spec)
    assert succ is not None and not succ.installed
    record = read_successor(StatePaths.for_state_file(spec.state_path).successor_record)
    assert record is not None and record.phase is Phase.FAILED
    assert "may be in use by its jobs" in record.detail


# --------------------------------------------------------------------------------------
# Issue 43 item 4: a successor state file is checked against Slurm (owner, generation,
# grant) before anything is switched to, released or cancelled.

FOREIGN_TAG = "slurm_fsm:repo=0123456789ab"


def test_a_successor_file_naming_another_checkouts_allocation_is_never_switched_to(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.clock.advance(121)
    fake.jobs[succ.job_id].comment = FOREIGN_TAG  # another checkout's (same user)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert "Switching" not in m.path
    assert m.alloc is not None and m.alloc.job_id == old.job_id  # its own one serves
    assert fake.jobs[old.job_id].state == "RUNNING"  # never released
    assert fake.jobs[succ.job_id].state == "RUNNING"  # never cancelled: not ours
    assert any(succ.job_id in w and "not this checkout's" in w for w in m.warnings), \
        m.warnings
    again = successor_file(spec)  # forgotten (a successor of its own may be queued)
    assert again is None or again.job_id != succ.job_id


def test_a_successor_file_whose_id_slurm_reused_is_never_switched_to_nor_cancelled(
        spec: JobSpec, fake: FakeCluster) -> None:
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    recorded = successor_file(spec)
    assert recorded is not None and recorded.submit_time  # its generation is recorded
    fake.clock.advance(121)
    fake.jobs[succ.job_id].submitted_at += 7 * 24 * HOUR  # another job under that id
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert "Switching" not in m.path
    assert m.alloc is not None and m.alloc.job_id == old.job_id
    assert fake.jobs[succ.job_id].state == "RUNNING"
    assert any("reused by another job" in w for w in m.warnings), m.warnings
    again = successor_file(spec)
    assert again is None or again.job_id != succ.job_id


def test_a_lost_successor_that_is_not_ours_is_never_cancelled(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """drop_successor: a successor granted another shape is cancelled only when it is
    this checkout's; a foreign job the file names is left alone."""
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, slurm_params={"gpus_per_node": 2})
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.jobs[succ.job_id].gpus_per_node = 1
    fake.jobs[succ.job_id].comment = FOREIGN_TAG
    fake.clock.advance(121)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert fake.jobs[succ.job_id].state == "RUNNING"
    assert m.alloc is not None and m.alloc.job_id == old.job_id
    again = successor_file(spec)
    assert again is None or again.job_id != succ.job_id


def test_a_successor_file_recording_a_shape_slurm_did_not_grant_is_judged_on_the_grant(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    """The file says 2 GPUs per node with its grant read (nodelist, CPUs); Slurm
    granted 1: it is judged on Slurm's grant, cancelled, never switched to."""
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=EXPECTED,
                     warm_successor=True, slurm_params={"gpus_per_node": 2})
    old = first_allocation(spec, fake)
    succ = queue_pending(spec, fake)
    fake.clock.advance(121)
    fake.jobs[succ.job_id].gpus_per_node = 1
    path = StatePaths.for_state_file(spec.state_path).successor_state
    written = StateStore(path).read()
    assert written is not None
    StateStore(path).write(attrs.evolve(
        written, nodelist=",".join(fake.jobs[succ.job_id].nodes), gpus_per_node=2,
        cpus_per_node=old.cpus_per_node or 2, installed=True))
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert "Switching" not in m.path
    assert fake.jobs[succ.job_id].state == "CANCELLED"
    assert m.alloc is not None and m.alloc.job_id == old.job_id


def test_another_checkouts_singleton_never_holds_this_checkouts_allocation(
        tmp_path: Path, fake: FakeCluster) -> None:
    """Issue 43 item 3: Slurm's ``--dependency=singleton`` is per user and job name, and
    the default name comes from the account. Two warm-successor checkouts of one user
    each get a name of their own (the checkout's hash in it), so the second checkout's
    first allocation runs at once instead of PENDING (Dependency) behind the first's;
    the fence "at most 2 per checkout" stays per checkout."""
    from slurm_fsm.testing import make_spec

    one, two = (make_spec(tmp_path / c, alloc_time_limit="01:00:00",
                          expected_duration_seconds=EXPECTED, warm_successor=True)
                for c in ("one", "two"))
    assert one.job_name != two.job_name
    assert one.slurm_params.account in one.job_name
    first = first_allocation(one, fake)
    fake.clock.advance(5)
    m = machine(two, fake)
    assert m.prepare().state is State.Ready
    assert m.alloc is not None and m.alloc.job_id != first.job_id
    assert m.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"] or \
        m.path[-1] == "Ready"
    assert fake.jobs[m.alloc.job_id].started_at == fake.jobs[m.alloc.job_id].submitted_at
    assert sorted(live_allocations(fake)) == sorted([first.job_id, m.alloc.job_id])


def test_the_name_without_warm_successor_or_when_set_is_unchanged(tmp_path: Path) -> None:
    from slurm_fsm.testing import make_spec

    plain = make_spec(tmp_path / "a")
    assert plain.job_name == f"{plain.slurm_params.account}-trtllm.persistent"
    named = make_spec(tmp_path / "b", warm_successor=True, alloc_job_name="mine")
    assert named.job_name == "mine"
    again = make_spec(tmp_path / "a", warm_successor=True)
    assert again.job_name == make_spec(tmp_path / "a", warm_successor=True).job_name


@pytest.mark.parametrize("planted", ["link", "foreign"])
def test_a_planted_successor_log_leaves_todays_path(
        spec: JobSpec, fake: FakeCluster, tmp_path: Path, planted: str) -> None:
    """Issue 43 item 8: a link or another user's file at ``.salloc.log.successor``
    makes the optional hand-off fail, never the run: the job still runs on the current
    allocation (today's path), nothing is written through the link, no successor."""
    first = first_allocation(spec, fake)
    log = StatePaths.for_state_file(spec.state_path).successor_salloc_log
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    if planted == "link":
        log.symlink_to(target)
    else:
        log.write_text("theirs\n")
        os.chown(log, 12345, 12345)
    fake.clock.advance(HOUR - DUE_AT)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready, m.path
    assert m.alloc is not None and m.alloc.job_id == first.job_id
    assert "QueueingSuccessor" in m.path
    assert successor_file(spec) is None
    assert live_allocations(fake) == [first.job_id]
    assert target.read_text() == "keep\n"
    assert any("successor" in t.reason and "salloc log" in t.reason for t in m.history)
    again = machine(spec, fake)  # the next run tries again, and falls back again
    assert again.prepare().state is State.Ready and again.alloc is not None
    assert again.alloc.job_id == first.job_id
