"""Issue 42 item 5: the report never waits for clean-up that can follow it. A run's
lease step is signalled when its job's steps are gone and the report is handed back
while the step ends (slurm_fsm.leasestop); whatever relies on the lease being gone (the
next run or release of the process, the lease gate) waits for it first.

The lease here stops in two halves like the real one (``begin_stop`` the signal,
``stop`` the wait), its wait held until the test lets it go: no timing is asserted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import attrs
import pytest

from slurm_fsm import leasestop
from slurm_fsm.executor import Executor
from slurm_fsm.lease import LeaseGate
from slurm_fsm.results import Status
from slurm_fsm.runrecord import RunBook
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

HELD_S = 20.0  # the bound of a held wait (only a broken build reaches it)


class SlowStop:
    """A fake lease whose stop is two halves; the wait ends when ``release`` is set."""

    def __init__(self, inner: object, log: list[str], release: threading.Event,
                 calls: Callable[[], int]) -> None:
        self.inner = inner
        self.log = log
        self.release = release
        self.calls = calls
        #: how many backend calls had been made when the step was gone
        self.calls_when_gone: int | None = None

    @property
    def name(self) -> str:
        return self.inner.name  # type: ignore[attr-defined, no-any-return]

    def alive(self) -> bool:
        return self.inner.alive()  # type: ignore[attr-defined, no-any-return]

    def begin_stop(self) -> None:
        self.log.append("signalled")

    def stop(self) -> None:
        if self.calls_when_gone is not None:
            return
        self.release.wait(HELD_S)
        self.inner.stop()  # type: ignore[attr-defined]
        self.calls_when_gone = self.calls()
        self.log.append("gone")


class SlowLeaseCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        self.release = threading.Event()
        self.leases: list[SlowStop] = []

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0
                    ) -> SlowStop:  # type: ignore[override]
        lease = SlowStop(super().start_lease(job_id, name, timeout_s), self.log,
                         self.release, lambda: len(self.calls))
        self.leases.append(lease)
        return lease


@pytest.fixture
def fake() -> Iterator[SlowLeaseCluster]:
    cluster = SlowLeaseCluster()
    yield cluster
    cluster.release.set()
    leasestop.settle()


def _settle_releases(fake: SlowLeaseCluster, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Whoever waits for the stopping leases lets the held wait go (and is noted)."""
    real = leasestop.settle
    waited: list[str] = []

    def settle(job_id: str | None = None) -> None:
        waited.append(job_id or "all")
        fake.release.set()
        real(job_id)

    monkeypatch.setattr(leasestop, "settle", settle)
    return waited


def test_the_report_is_handed_back_before_the_lease_step_has_ended(
        fake: SlowLeaseCluster, make_spec: SpecFactory) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED
    job = report.allocation_id or ""
    # the step was told to end; its end is waited for after the report
    assert fake.log == ["signalled"]
    assert leasestop.pending(job) == 1
    assert RunBook(spec.state_path).records() == []  # the run's own clean-up is done
    fake.release.set()
    leasestop.settle(job)
    assert fake.log == ["signalled", "gone"] and leasestop.pending() == 0
    assert fake.jobs[job].steps == {}


def test_the_next_run_of_the_process_waits_for_the_last_runs_lease_to_be_gone(
        fake: SlowLeaseCluster, make_spec: SpecFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    first = fake.leases[0]
    calls_after_first = len(fake.calls)
    assert first.calls_when_gone is None  # still ending
    waited = _settle_releases(fake, monkeypatch)
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    assert waited and first.calls_when_gone == calls_after_first  # before any call of its


def test_a_release_in_the_same_process_finds_no_holder_in_the_last_runs_lease(
        fake: SlowLeaseCluster, make_spec: SpecFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``lease_wait_s=0`` refuses at once when held: the run's own lease, still ending
    after its report, must not count."""
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    job = Executor(spec, fake, clock=fake.clock).run().allocation_id or ""
    waited = _settle_releases(fake, monkeypatch)
    gate = LeaseGate(RunBook(spec.state_path), wait_s=0, backend=fake, clock=fake.clock)
    assert gate.holders(job) == [] and waited == [job]
    release = attrs.evolve(spec, release_allocation=True)
    assert Executor(release, fake, clock=fake.clock, lease_wait_s=0).run().status \
        is Status.RELEASED


def test_a_lease_without_two_halves_is_stopped_at_once(make_spec: SpecFactory) -> None:
    """The fake cluster's lease (no ``begin_stop``): gone when the report is given."""
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert fake.jobs[report.allocation_id or ""].steps == {}
    assert leasestop.pending() == 0


def test_run_many_hands_back_its_reports_before_the_shared_lease_step_has_ended(
        fake: SlowLeaseCluster, make_spec: SpecFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Several runs in one process (``run_many``: one lease step shared by the batch):
    the last share given back signals the step, its end is waited for after the
    reports, and the next run of the process waits for it before any Slurm call."""
    from slurm_fsm import Allocation

    specs = [make_spec(model_name=f"m{i}") for i in range(3)]
    for spec in specs:
        fake.script(spec.script_path, FakeScript(lines=("ok",)))
    alloc = Allocation(specs[0].repo_root, fake, clock=fake.clock)
    reports = alloc.run_many(specs, max_parallel=3)
    assert [r.status for r in reports] == [Status.PASSED] * 3
    job = reports[0].allocation_id or ""
    assert fake.log == ["signalled"]  # the batch's one lease step, told to end
    assert leasestop.pending(job) == 1 and fake.leases[0].calls_when_gone is None
    calls_after_batch = len(fake.calls)
    waited = _settle_releases(fake, monkeypatch)
    assert alloc.run(specs[0]).status is Status.PASSED
    assert waited and fake.leases[0].calls_when_gone == calls_after_batch
    assert RunBook(specs[0].state_path).records() == []  # the batch's record dropped too


def test_a_settle_from_another_thread_never_finds_a_stop_not_started_yet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """run_many's runs stop and settle leases in threads of their own: a ``settle`` that
    comes while a stop is being registered must wait for it, never fail ("cannot join
    thread before it is started": a batch on the real cluster). The stop's thread lets a
    settle of another thread run just before it starts."""
    real_thread = threading.Thread
    errors: list[BaseException] = []
    settlers: list[threading.Thread] = []

    def settle_elsewhere() -> None:
        try:
            leasestop.settle()
        except BaseException as exc:  # what the other run would raise
            errors.append(exc)

    class Racing(real_thread):
        def start(self) -> None:
            other = real_thread(target=settle_elsewhere)
            settlers.append(other)
            other.start()
            other.join(0.5)  # a settle that waits (the fix) is let go by the start below
            super().start()

    class Lease:
        def begin_stop(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(leasestop.threading, "Thread", Racing)
    leasestop.stop_soon(Lease(), "7")
    monkeypatch.undo()
    for other in settlers:
        other.join(HELD_S)
    leasestop.settle()
    assert errors == [] and leasestop.pending() == 0
