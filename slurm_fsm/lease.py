"""Leases: nothing changes an allocation under another run's job. Slurm is the arbiter.

A running persistent job holds a lease on its allocation, in two forms:

* a **lease step** that Slurm itself lists: ``srun --overlap --gres=none -N1 -n1
  -J fsm-lease.<run id>.<max_until> sleep`` (:func:`lease_name`), one CPU shared with
  every other step, no GPU. It is tied to the run's orchestrator
  (:mod:`slurm_fsm.scriptguard`): when the orchestrator dies, even by ``kill -9``,
  the step ends a fraction of a second later. Any process on any login node sees it
  with one ``squeue -s -j <job>``: the lease of a run on another host is a question
  to Slurm, never a guess. ``max_until`` (seconds since the epoch) is when it may be
  broken: the run's own job has outlived its monitor timeout by 15 minutes then;
* its **run record** (:mod:`slurm_fsm.runrecord`), a hint: it says whose the lease is
  (pid, host, model, container) and lists what a dead run left.

Before step 0 cancels an allocation (``release``, the replacement of an expiring or
incompatible allocation, an orphan found by its tag) or re-imports or installs into a
container, it asks :class:`LeaseGate` to clear the way. The gate's holders
(:meth:`LeaseGate.holders`, :func:`holders_of`) are:

* every lease step Slurm lists on the allocation, but this run's own, a lease past its
  ``max_until`` or whose run's owner is provably gone: its record of this host with its
  orchestrator dead, or its owner record (:func:`owner_gone`) with its pid dead here or,
  from another host, its heartbeat stale (a ``srun`` killed with its whole group leaves
  its step behind, and a step whose task never ran, its host dead between the step's
  creation and the launch, lives until the allocation's end; all broken: ``scancel
  <job>.<step>``, and said) and, for a container, a run whose record names another
  container;
* every live run record of **this host** (its orchestrator's pid checked here) with no
  lease step: a run of this host in the moment before its lease step runs, or of a
  backend without lease steps. A record of another host without a lease step is not a
  holder: its run is dead (Slurm ended its lease) or never took one.

A whole allocation is cancelled only through :func:`cancel_allocation`
(:meth:`LeaseGate.cancel`), in Dekker's order with Slurm the one store every host
reads in order: wait for the holders with nothing up, start a **closing marker**
(:func:`closing_name`: ``fsm-closing.<run id>.<max_until>``, a step like a lease,
``max_until`` = now + :data:`CLOSING_S`), list the steps once more, then ``scancel``,
or stop the marker and wait again when a lease came up. A taker, once its lease step
runs, lists the steps once (:func:`wait_out_closing`) and waits out another run's
live marker: either side sees the other, never neither. A marker is not a holder,
and one past its ``max_until`` is ignored.

The gate waits for the holders to go (polling Slurm, at most every
:data:`MAX_POLL_S`), saying whose it waits for, or, when told not to wait
(``wait_s=0``) or past ``wait_s``, raises :class:`AllocationInUse` and nothing is
changed. The state file's lock is held meanwhile: on one host, no new lease is taken
while the gate waits (the lock saves work; the lease steps decide).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Collection, Iterable, Sequence

import attrs

from slurm_fsm import leasestop, runowner
from slurm_fsm.backend import SlurmBackend, StepInfo, TaskLister
from slurm_fsm.clock import Clock, SystemClock, backoff
from slurm_fsm.errors import AllocationInUse, BackendError, JobNotFound
from slurm_fsm.runowner import RunFiles
from slurm_fsm.runrecord import RunBook, RunRecord, new_run_id, owner_alive

__all__ = ["CLOSING_PREFIX", "CLOSING_S", "LEASE_PREFIX", "MAX_POLL_S", "AllocationInUse",
           "Holder", "LeaseGate", "LeaseStep", "cancel_allocation", "closing_markers",
           "closing_name", "holders_of", "lease_apart", "lease_name", "lease_steps", "owner_gone",
           "wait_out_closing"]

#: Every lease step's name starts with this.
LEASE_PREFIX = "fsm-lease"
#: The gate asks Slurm again at most this often while it waits.
MAX_POLL_S = 5.0
_LEASE = re.compile(re.escape(LEASE_PREFIX) + r"\.(r[0-9a-f]{12})\.(\d{1,12})")
#: Every closing marker's name starts with this (never a lease: not a holder).
CLOSING_PREFIX = "fsm-closing"
#: A closing marker may be ignored this many seconds after it was started (its
#: ``max_until``): a canceller paused longer than that withdraws and checks again.
CLOSING_S = 120.0
_CLOSING = re.compile(re.escape(CLOSING_PREFIX) + r"\.(r[0-9a-f]{12})\.(\d{1,12})")


def closing_name(run_id: str, max_until: float) -> str:
    """The step name of run ``run_id``'s closing marker, ignored after ``max_until``."""
    return f"{CLOSING_PREFIX}.{run_id}.{int(max_until)}"


def closing_markers(steps: Iterable[StepInfo], *, own: Collection[str] = (),
                    now: float) -> list[LeaseStep]:
    """The live closing markers among ``steps`` of runs not in ``own``, not past their
    ``max_until`` at ``now``."""
    out: list[LeaseStep] = []
    for step in steps:
        found = _CLOSING.fullmatch(step.name.strip())
        if found is None or not step.state.is_live or found.group(1) in own:
            continue
        if now <= int(found.group(2)):
            out.append(LeaseStep(run_id=found.group(1), max_until=int(found.group(2)),
                                 step=step))
    return out


def wait_out_closing(backend: SlurmBackend, job_id: str, *, own: Collection[str],
                     clock: Clock, wall: Callable[[], float] = time.time,
                     say: Callable[[str], None] | None = None) -> None:
    """The taker's half (its lease step is up): list ``job_id``'s steps once; while
    another run's closing marker is live (not past its ``max_until``), wait (backoff,
    at most every :data:`MAX_POLL_S`) and list again. Returns once none is (go on);
    raises :class:`JobNotFound` when the allocation is gone (step 0 again)."""
    attempt = 0
    said = False
    while True:
        steps = backend.list_steps(job_id)  # JobNotFound: the canceller cancelled it
        if not steps or not any(s.state.is_live for s in steps):
            raise JobNotFound(job_id, f"allocation {job_id} ended while its closing "
                              "marker was up")
        markers = closing_markers(steps, own=own, now=wall())
        if not markers:
            return
        if not said and say is not None:
            said = True
            say(f"allocation {job_id} is being closed by run {markers[0].run_id} (step "
                f"{markers[0].step.full_id}): waiting until it cancels or withdraws")
        clock.sleep(backoff(attempt, first=0.2, factor=1.5, cap=MAX_POLL_S))
        attempt += 1


def lease_name(run_id: str, max_until: float) -> str:
    """The step name of run ``run_id``'s lease, breakable after ``max_until`` (epoch s)."""
    return f"{LEASE_PREFIX}.{run_id}.{int(max_until)}"


def lease_apart(name: str, other: str) -> str:
    """``name``, or, when it is ``other`` (the lease another process holds for the same
    run: a supervisor's, before its agent takes its own in the same second), the same
    run's lease breakable one second later. A backend reads a step listed under its
    lease's name as its own ``srun`` 's (a silent one as slow, not gone): two takers
    must never share a name."""
    found = _LEASE.fullmatch(name)
    if name != other or found is None:
        return name
    return lease_name(found.group(1), int(found.group(2)) + 1)


@attrs.frozen(kw_only=True)
class LeaseStep:
    """A lease step as Slurm lists it: whose run, until when, which step."""

    run_id: str
    max_until: int
    step: StepInfo

    @classmethod
    def of(cls, step: StepInfo) -> LeaseStep | None:
        """The lease ``step`` is, or None for any other step."""
        found = _LEASE.fullmatch(step.name.strip())
        if found is None or not step.step_id.isdigit() or not step.state.is_live:
            return None
        return cls(run_id=found.group(1), max_until=int(found.group(2)), step=step)


def lease_steps(steps: Iterable[StepInfo]) -> list[LeaseStep]:
    """The lease steps among ``steps``."""
    return [lease for lease in map(LeaseStep.of, steps) if lease is not None]


@attrs.frozen(kw_only=True)
class Holder:
    """A run whose job holds the allocation: its lease step (as Slurm lists it), its
    run record (when one is readable here), or both."""

    run_id: str
    lease: LeaseStep | None = None
    record: RunRecord | None = None

    def describe(self) -> str:
        """``pid 123 on h (model m, ...), lease step 7.3`` for progress messages."""
        where = f"lease step {self.lease.step.full_id}" if self.lease else \
            "no lease step yet"
        if self.record is not None:
            return f"{self.record.describe()}, {where}"
        return f"run {self.run_id} ({where}; no run record here)"


def owner_gone(files: RunFiles, run_id: str, *, now: float | None = None,
               task_runs: Callable[[], bool | None] = lambda: None) -> str | None:
    """Why run ``run_id``'s owner is known gone, from its owner record
    (:mod:`slurm_fsm.runowner`), or None (alive, or it cannot be told: no record). On
    this host: its pid (with its start time, same boot) is dead. On another host: its
    heartbeat (the record touched every :data:`~slurm_fsm.runowner.HEARTBEAT_S` while
    its owner lives) is older than :data:`~slurm_fsm.runowner.HEARTBEAT_STALE_S` at
    ``now`` (epoch seconds of this host's clock, the file's; None: now), **and**
    ``task_runs()`` says its lease step has no task (False; True or None: it runs, or
    it cannot be told). A silent owner whose lease task runs is a paused one (Ctrl-Z,
    SIGSTOP, a paused VM): its host lives, and the task would end the step if it died
    (design-handoff-and-arbiter.md: a paused owner's lease is never broken early)."""
    record = files.owner(run_id)
    if record is None:
        return None
    alive = runowner.owner_alive(record)
    if alive is False:
        return f"its owner, pid {record.pid} on {record.host}, is gone"
    if alive is None:
        age = files.heartbeat_age(run_id, now)
        if age is not None and age > runowner.HEARTBEAT_STALE_S and task_runs() is False:
            return (f"its owner on {record.host} has not touched its record for "
                    f"{age:.0f} s and no task of its lease step runs (its host died "
                    "before the task's launch)")
    return None


def holders_of(steps: Sequence[StepInfo] | None, records: Sequence[RunRecord], *,
               job_id: str, own: str | None, now: float, host: str,
               alive: Callable[[RunRecord], bool] = owner_alive,
               container: str | None = None, shared: Collection[str] = (),
               gone: Callable[[str], str | None] = lambda _run: None,
               ) -> tuple[list[Holder], list[LeaseStep]]:
    """The holders of allocation ``job_id`` (the module's rule), and the lease steps
    past their ``max_until`` (to break). Pure but for ``alive``: table-tested.

    ``steps``: what Slurm lists on the job (None: no lease steps to be had, the
    records alone decide, another host's counting as alive); ``records``: the run
    records beside the state file; ``own``: this run's id; ``now``: epoch seconds;
    ``shared``: the run ids of the batch lease steps this run shares with its siblings
    of one ``run_many`` (:meth:`slurm_fsm.sharedview.SharedView.lease`): not holders
    for it (its siblings hold the allocation by their own records, of this host);
    ``gone``: why a run's owner is known gone (:func:`owner_gone`), or None: its lease
    step is broken whatever Slurm lists (a step whose task never ran, its host dead
    between the step's creation and the task's launch, lives until the allocation's
    end: no task is there to notice its host is gone)."""
    by_run = {r.run_id: r for r in records}
    out: list[Holder] = []
    stale: list[LeaseStep] = []
    leased: set[str] = set()
    for lease in lease_steps(steps or ()):
        leased.add(lease.run_id)
        if lease.run_id == own or lease.run_id in shared:
            continue
        record = by_run.get(lease.run_id)
        if now > lease.max_until or (record is not None and record.host == host
                                     and not alive(record)) or gone(lease.run_id):
            stale.append(lease)  # past max_until, or its owner is provably gone
            continue
        if container is not None and record is not None and record.container != container:
            continue
        out.append(Holder(run_id=lease.run_id, lease=lease, record=record))
    for record in records:
        if (record.run_id == own or record.run_id in leased or record.run_id in shared
                or record.ended
                or record.allocation != job_id
                or (container is not None and record.container != container)):
            continue
        if steps is not None and record.host != host:
            continue  # another host's run without a lease step: Slurm says it is gone
        if alive(record):
            out.append(Holder(run_id=record.run_id, record=record))
    return out, stale


class LeaseGate:
    """Waits for (or refuses on) the leases of an allocation. ``own``: this run's id,
    never waited for. ``backend``: where the lease steps are asked (None: the run
    records alone, another host's counting as alive until it ends). ``wall``: epoch
    seconds, what ``max_until`` is compared with."""

    def __init__(self, book: RunBook, *, wait_s: float, clock: Clock | None = None,
                 say: Callable[[str], None] | None = None, poll_s: float = 0.5,
                 backend: SlurmBackend | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.book = book
        self.wait_s = wait_s
        self.clock = clock or SystemClock()
        self.say = say or (lambda _m: None)
        self.poll_s = poll_s
        self.backend = backend
        self.wall = wall
        self.own: str | None = None
        #: the batch lease steps this run shares (``run_many``): its own, as ``own``
        self.shared: set[str] = set()
        #: lease steps this gate broke (past their max_until), as ``job.step``
        self.broken: list[str] = []

    def holders(self, job_id: str, container: str | None = None) -> list[Holder]:
        """Who holds ``job_id`` (of runs using ``container``, when given): one
        ``squeue -s`` when there is a backend. A lease past its ``max_until`` is broken
        here (``scancel job.step``)."""
        leasestop.settle(job_id)  # a lease this process is stopping is gone first
        steps: list[StepInfo] | None = None
        if self.backend is not None:
            try:
                steps = self.backend.list_steps(job_id)
            except JobNotFound:
                steps = []  # no job, no lease on it
        now = self.wall()
        files = RunFiles(self.book.paths.state)
        why: dict[str, str] = {}

        lease_of = {lease.run_id: lease.step.step_id for lease in lease_steps(steps or ())}
        tasks: list[set[str] | None] = []

        def task_runs(run_id: str) -> bool | None:
            """Whether a task of ``run_id``'s lease step runs (one ``sstat`` a call of
            holders, asked only for a silent owner of another host); None: unknown."""
            if not isinstance(self.backend, TaskLister) or run_id not in lease_of:
                return None
            if not tasks:
                try:
                    tasks.append(self.backend.steps_with_tasks(job_id))
                except BackendError:
                    tasks.append(None)
            return None if tasks[0] is None else lease_of[run_id] in tasks[0]

        def gone(run_id: str) -> str | None:
            if run_id not in why:
                why[run_id] = owner_gone(  # the files' clock
                    files, run_id, task_runs=lambda: task_runs(run_id)) or ""
            return why[run_id] or None

        found, stale = holders_of(steps, self.book.records(), job_id=job_id, own=self.own,
                                  now=now, host=socket.gethostname(),
                                  container=container, shared=self.shared, gone=gone)
        for lease in stale:
            assert self.backend is not None
            self.backend.cancel(job_id, lease.step.step_id)  # the step only
            self.broken.append(lease.step.full_id)
            self.say(f"broke the lease of run {lease.run_id} on allocation {job_id} "
                     f"(step {lease.step.full_id} {lease.step.name}): "
                     + (why.get(lease.run_id) or "past its max_until "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(lease.max_until))}"
                        " UTC, or its orchestrator on this host is gone"))
        return found

    def cancel(self, job_id: str, what: str, *, wait: bool = True) -> bool:
        """Cancel allocation ``job_id`` once no other run's job holds it (Dekker's order,
        Slurm the one store): wait for the holders (:meth:`clear`, no marker up), start
        a closing marker (:func:`closing_name`, every host sees it), list the steps once
        more: another run's lease up -> withdraw the marker and wait again (or raise
        :class:`AllocationInUse`); none -> ``scancel`` (the marker ends with the job).
        ``wait`` False: raise at once when held. True: cancelled; False: it was gone."""
        if self.backend is None:
            raise RuntimeError("a gate without a backend cannot cancel: cancel_allocation")
        while True:
            if wait:
                self.clear(job_id, what)
            elif self.holders(job_id):
                raise AllocationInUse(job_id, what, self.holders(job_id))
            decided = self._close(job_id, what, wait=wait)
            if decided is not None:
                return decided

    def _close(self, job_id: str, what: str, *, wait: bool) -> bool | None:
        """One try of the marker: True cancelled, False gone, None withdrawn (again)."""
        assert self.backend is not None
        try:
            if not self.backend.query_job(job_id).state.is_running:
                # a step never starts on a PENDING job (the marker's srun would wait):
                # nor does a taker's lease, which needs it RUNNING
                self.backend.cancel(job_id)
                return True
        except JobNotFound:
            return False
        until = self.wall() + CLOSING_S
        try:
            marker = self.backend.start_lease(job_id, closing_name(self.own or new_run_id(),
                                                                    until))
        except JobNotFound:
            return False  # no job: nothing to cancel
        try:
            holders = self.holders(job_id)
            if not holders and self.wall() < until - MAX_POLL_S:
                self.backend.cancel(job_id)
                return True
        finally:
            marker.stop()
        if holders and (not wait or self.wait_s <= 0):
            raise AllocationInUse(job_id, what, holders)
        self.say(f"not {what} yet: a lease on allocation {job_id} came up as it was "
                 "being closed; closing marker withdrawn, waiting again")
        return None

    def clear(self, job_id: str, what: str, container: str | None = None) -> None:
        """Return once no other run's job holds ``job_id`` (or ``container`` on it);
        raise :class:`AllocationInUse` when told not to wait or after ``wait_s``."""
        holders = self.holders(job_id, container)
        if not holders:
            return
        if self.wait_s <= 0:
            raise AllocationInUse(job_id, what, holders)
        deadline = self.clock.now() + self.wait_s
        said: set[str] = set()
        attempt = 0
        while holders:
            key = ",".join(r.run_id for r in holders)
            if key not in said:
                said.add(key)
                self.say(f"waiting before {what} on allocation {job_id}: "
                         f"{len(holders)} running job(s) use it: "
                         + "; ".join(r.describe() for r in holders)
                         + f" (at most {self.wait_s:g} s)")
            if self.clock.now() >= deadline:
                raise AllocationInUse(job_id, what, holders)
            self.clock.sleep(backoff(attempt, first=self.poll_s, factor=1.5,
                                     cap=max(self.poll_s, MAX_POLL_S)))
            attempt += 1
            holders = self.holders(job_id, container)


def cancel_allocation(gate: LeaseGate | None, backend: SlurmBackend, job_id: str,
                      what: str, *, wait: bool = True) -> bool:
    """Cancel a whole allocation: through ``gate`` (:meth:`LeaseGate.cancel`) when it
    asks Slurm, after its run records when it does not, ``scancel`` alone without one.
    The only whole-allocation cancel of step 0 (``tests/test_closing.py`` guards it)."""
    if gate is not None and gate.backend is not None:
        return gate.cancel(job_id, what, wait=wait)
    if gate is not None:
        if wait:
            gate.clear(job_id, what)
        elif gate.holders(job_id):
            raise AllocationInUse(job_id, what, gate.holders(job_id))
    backend.cancel(job_id)
    return True
