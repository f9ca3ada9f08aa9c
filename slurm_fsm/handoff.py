"""The work of the warm successor's states (issue 27), for :mod:`slurm_fsm.machine`.

:mod:`slurm_fsm.successor` holds the rules; :mod:`slurm_fsm.step0.table` the edges
(QueueingSuccessor, AwaitingSuccessor, Switching, the drain at ``finish``); this module
does the work of those states and effects on the machine it is given, through the
machine's backend (no command line here).

The successor is tracked in a second state file beside the first,
``.slurm_alloc.successor.json`` (:attr:`~slurm_fsm.paths.StatePaths.successor_state`):
the same keys as the state file (the procedure's), so that its setup (import, install)
is done by the machine's own step 0 on that file (:mod:`slurm_fsm.warmer`), under that
file's own lock.
The successor record ``.slurm_fsm_successor.json`` says, for people and ``status``,
which allocation it follows, since when, and the warmer's pid. At the switch the
successor's file becomes the state file; the old allocation is released at once when
no other run's job is on it, else by the last run whose job ends on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import attrs
import filelock

from slurm_fsm.backend import AllocationRequest, JobInfo, SlurmBackend
from slurm_fsm.capacity import RequestSize, capacity_problems, with_grant
from slurm_fsm.clock import Clock
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    ContainerShared,
    JobNotFound,
    StateFileError,
)
from slurm_fsm.history import Estimate, RunHistory
from slurm_fsm.lease import AllocationInUse, LeaseGate
from slurm_fsm.ownership import describe
from slurm_fsm.paths import StatePaths, successor_log_of
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0 import effects
from slurm_fsm.step0.context import Step0Context
from slurm_fsm.step0.table import (
    Observation,
    State,
    is_ours,
    owner_of,
    repo_tag,
    same_container,
    same_generation,
)
from slurm_fsm.successor import (
    SINGLETON,
    Phase,
    Sharing,
    SuccessorRecord,
    SuccessorVerdict,
    judge_successor,
    lead_time,
    node_sharing,
    other_name,
    parity_names,
    read_successor,
    successor_due,
    time_min_s,
    write_successor,
)

__all__ = [
    "SWITCHED_MARGIN_S",
    "SWITCH_LOCK_S",
    "ContainerShared",
    "HandoffState",
    "Machine",
    "Warmer",
    "await_successor",
    "before_import",
    "drop_successor",
    "forget_successor",
    "job_names",
    "observe_successor",
    "queue_successor",
    "queued_successor",
    "release_drained",
    "release_stale_drained",
    "release_successor",
    "replaced",
    "shared_container",
    "successor_alloc",
    "successor_ids",
    "switch",
    "warmer_alive",
    "with_successor",
]

#: Starts the process that sets the successor up (import, install) and returns its pid;
#: None: none started (the run that needs the successor then finishes its setup, 0F).
Warmer = Callable[[JobSpec], int | None]
#: The margin a job is admitted with on the successor this run switched to: the freshest
#: allocation there is (one queued now would have no more time once set up), so a job
#: whose expected duration fits its time left only without the full
#: :data:`~slurm_fsm.spec.EXPIRY_MARGIN_S` runs there, rather than wait for a chain of
#: successors (measured on 7-minute allocations under load: three in a row, 100 s).
SWITCHED_MARGIN_S = 60
#: How long the switch waits for the successor file's lock (a warmer whose set-up is
#: done only writes its last lines under it).
SWITCH_LOCK_S = 120.0


class Machine(Protocol):
    """What the hand-off work uses of :class:`slurm_fsm.machine.AllocationMachine`."""

    alloc: AllocState | None
    observation: Observation
    handoff: HandoffState

    @property
    def notes(self) -> list[str]: ...

    # the machine's context (slurm_fsm.step0.context), read only
    @property
    def ctx(self) -> Step0Context: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def backend(self) -> SlurmBackend: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def leases(self) -> LeaseGate | None: ...
    @property
    def run_history(self) -> RunHistory: ...
    @property
    def salloc_log(self) -> Path: ...
    @property
    def pending_wait_s(self) -> float: ...
    @property
    def warmer(self) -> Warmer | None: ...
    @property
    def state(self) -> State: ...
    @property
    def user(self) -> str: ...
    def _log(self, text: str) -> None: ...
    def _warn(self, text: str) -> None: ...
    def request_size(self) -> RequestSize: ...


@attrs.define
class HandoffState:
    """The machine's own memory of the hand-off, within one run."""

    #: a successor failed in this run: today's path, no new one queued
    failed: bool = False
    #: this run queued one already: never a second (even when its file cannot be read
    #: back, as in ``plan``'s dry run)
    queued: bool = False
    #: when this run began waiting for the successor (clock reading)
    await_since: float | None = None
    polls: int = 0
    #: seconds this run's job waited for a successor (it did not fit the old allocation's
    #: time left): the report's ``timings.successor_wait_s``; None: it never waited
    waited_s: float | None = None
    #: the successor it waited for
    waited_for: str | None = None
    #: the allocation replaced by the switch, to release once no job is on it
    drained: str | None = None
    #: the successor this run switched to: its job is admitted there with
    #: :data:`SWITCHED_MARGIN_S`, never sent on to wait for yet another
    switched_to: str | None = None
    #: the job ids cancelled here
    cancelled: set[str] = attrs.field(factory=set)
    #: a drained allocation left by an earlier switch was looked for in this run
    swept: bool = False
    #: successors whose grant was judged in this run: job id -> what the spec needs
    #: that the grant lacks (``[]``: it can serve the spec)
    misfits: dict[str, list[str]] = attrs.field(factory=dict)
    #: successors Slurm confirmed in this run as this checkout's own (tag, user) and the
    #: very job their file recorded (submit time): only these are switched to
    vetted: set[str] = attrs.field(factory=set)


def _neighbours(m: Machine) -> list[AllocState]:
    """The allocations the checkout's other files name (state, successor, drained)."""
    found = []
    for path in StatePaths.of_allocation_file(m.store.path).allocation_files:
        if path == m.store.path:
            continue
        try:
            other = StateStore(path).read()
        except StateFileError:
            continue
        if other is not None and other.nodelist and (
                m.alloc is None or other.job_id != m.alloc.job_id):
            found.append(other)
    return found


def _live_same(m: Machine, other: AllocState) -> bool:
    """Slurm still runs the very job ``other`` recorded (not a reused id)."""
    try:
        info = m.backend.query_job(other.job_id)
    except JobNotFound:
        return False
    return info.state.is_live and same_generation(other, info)


def shared_container(m: Machine) -> tuple[Sharing, AllocState | None]:
    """How the machine's allocation shares its nodes with the checkout's other live
    allocations (:func:`~slurm_fsm.successor.node_sharing`): a conflict with any of them
    wins; else the one whose ready container it may use; else NONE."""
    assert m.alloc is not None
    spec = m.spec
    if spec.docker_image is None or not m.alloc.nodelist:
        return Sharing.NONE, None
    mine = m.backend.expand_nodelist(m.alloc.nodelist)
    found: tuple[Sharing, AllocState | None] = (Sharing.NONE, None)
    for other in _neighbours(m):
        verdict = node_sharing(mine, m.backend.expand_nodelist(other.nodelist), other,
                               name=spec.container_name, image=spec.docker_image,
                               mounts=spec.mounts_text, installs=spec.installs)
        if verdict is Sharing.NONE or not _live_same(m, other):
            continue
        if verdict is Sharing.CONFLICT:
            return verdict, other
        found = (verdict, other)
    return found


def before_import(m: Machine) -> str | None:
    """Before an import (pyxis: one container of a name per node): on nodes another live
    allocation of the checkout holds, never touch the container its jobs may use. When
    it holds the same container, ready, on all of this allocation's nodes, use it (the
    state becomes imported and installed; the summary is returned); when a node holds
    another one or one not set up, wait for that allocation's jobs to end (a run's
    leases) or, without leases (the warmer), raise :class:`ContainerShared`. None: go
    on importing."""
    assert m.alloc is not None
    verdict, other = shared_container(m)
    if verdict is Sharing.NONE or other is None:
        return None
    name = m.spec.container_name or ""
    if verdict is Sharing.ADOPT:
        m.alloc = attrs.evolve(m.alloc, container_name=name, installed=other.installed)
        m.store.write(m.alloc)
        m._log(f"Container {name!r} is on {m.alloc.nodelist} already, set up from "
               f"{m.spec.docker_image} by allocation {other.job_id}: used as it is.")
        return (f"container {name!r} of allocation {other.job_id} used on "
                f"{m.alloc.nodelist} (same image, ready): nothing imported")
    what = f"importing container {name!r} on nodes allocation {other.job_id} shares"
    if m.leases is None:
        raise ContainerShared(
            f"not {what}: its container of that name (image {other.docker_image or '-'}, "
            f"{'installed' if other.installed else 'not set up'}) may be in use by its "
            "jobs; the run that switches to this allocation sets it up once they end")
    m.leases.clear(other.job_id, what, name)
    return None


def _paths(m: Machine) -> StatePaths:
    """The files beside the machine's state file."""
    return StatePaths.for_state_file(m.store.path)


def _store(m: Machine) -> StateStore:
    return StateStore(_paths(m).successor_state)


def successor_alloc(m: Machine) -> AllocState | None:
    """The successor's state file (None: none, or unreadable)."""
    try:
        return _store(m).read()
    except StateFileError:
        return None


def warmer_alive(m: Machine) -> bool:
    """Someone (a warmer) holds the successor file's lock now."""
    probe = filelock.FileLock(str(_store(m).lock_path), timeout=0)
    try:
        probe.acquire()
    except filelock.Timeout:
        return True
    probe.release()
    return False


def _set_up(alloc: AllocState, spec: JobSpec) -> bool:
    return same_container(alloc, spec) and (
        alloc.installed or spec.docker_image is None or not spec.installs)


def observe_successor(m: Machine, current: str | None) -> dict[str, Any]:
    """The successor fields of an observation: ``successor`` ("", "pending", "running",
    "ready", "lost") and ``warmer_alive``; one ``squeue`` of the successor when its file
    names one other than ``current``."""
    succ = successor_alloc(m)
    if succ is None or succ.job_id == current:
        return {"successor": "", "warmer_alive": False}
    info: JobInfo | None
    try:
        info = m.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    if info is not None and not _vet(m, succ, info):
        forget_successor(m)
        return {"successor": "", "warmer_alive": False}
    verdict = judge_successor(info)
    if verdict is SuccessorVerdict.SET_UP and info is not None and _misfit(m, succ, info):
        state = "lost"  # granted another shape than the spec needs: DROP_SUCCESSOR
    elif verdict is SuccessorVerdict.SET_UP:
        state = "ready" if _set_up(succ, m.spec) else "running"
    elif verdict is SuccessorVerdict.WAIT:
        state = "pending"
    else:
        state = "lost"
    record = read_successor(_paths(m).successor_record)
    pid = record.warmer_pid if record is not None and record.job_id == succ.job_id else None
    return {"successor": state, "warmer_alive": warmer_alive(m) or _pid_alive(pid)}


def _vet(m: Machine, succ: AllocState, info: JobInfo) -> bool:
    """The job the successor file names is this checkout's (its tag, this user) and the
    very job the file recorded (same submit time); else it is warned about and False:
    the file is a hint, never a reason to switch to, release or cancel a job."""
    if not same_generation(succ, info):
        m._warn(f"the successor file names job {succ.job_id} submitted at "
                f"{succ.submit_time}, but Slurm's job {info.job_id} was submitted at "
                f"{info.submit_time}: the id was reused by another job; it is left alone "
                "and the file forgotten")
        return False
    owner = owner_of(info, m.user, m.spec, set(parity_names(m.spec.job_name)))
    if not owner.ours:
        m._warn(f"the successor file names job {succ.job_id}, which is not this "
                f"checkout's ({describe(info, owner)}): it is left alone and the file "
                "forgotten")
        return False
    m.handoff.vetted.add(succ.job_id)
    return True


def queued_successor(m: Machine) -> bool:
    """With no state file: the successor file names a live job Slurm confirms as this
    checkout's own, the very one recorded (:func:`_vet`); one gone, foreign or reused
    is forgotten (never cancelled), one Slurm cannot be asked about now is left."""
    succ = successor_alloc(m)
    if succ is None:
        return False
    try:
        info = m.backend.query_job(succ.job_id)
    except JobNotFound:
        forget_successor(m)
        return False
    except BackendError as exc:
        m.notes.append(f"the queued successor {succ.job_id} was not checked ({exc})")
        return False
    if not info.state.is_live or not _vet(m, succ, info):
        forget_successor(m)
        return False
    return True


def forget_successor(m: Machine) -> None:
    """Drop the successor's state file and record (no job is cancelled)."""
    effects.forget_successor_files(_store(m), _paths(m).successor_record)


def _misfit(m: Machine, succ: AllocState, info: JobInfo) -> list[str]:
    """What the spec needs that the RUNNING successor was not granted (another node
    count, fewer GPUs or CPUs per node: a ``--nodes=1-2`` range, a site's rewrite of the
    request); ``[]`` when it can serve the spec. Judged once per run and successor, on
    one ``scontrol show job`` (:meth:`~slurm_fsm.backend.SlurmBackend.granted`): never
    on the shape its file records (a file is a hint anyone with write access made)."""
    if succ.job_id in m.handoff.misfits:
        return m.handoff.misfits[succ.job_id]
    try:  # Slurm's grant, never the shape the file records (anyone may write it)
        alloc = with_grant(attrs.evolve(succ, nodelist=info.nodelist or succ.nodelist),
                           m.backend.granted(succ.job_id))
    except (BackendError, ValueError) as exc:  # not judged now: judged at its use
        m.notes.append(f"what Slurm granted successor {succ.job_id} could not be read "
                       f"({exc}); judged once it is the allocation")
        return []
    problems = capacity_problems(alloc, m.spec)
    m.handoff.misfits[succ.job_id] = problems
    return problems


def _pid_alive(pid: int | None) -> bool:
    """The warmer's process exists (on this host: the record's pid; a warmer on another
    host shows by its lock). Between its start and its taking the lock, this says so."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def with_successor(m: Machine, obs: Observation, info: JobInfo,
                   estimate: Estimate) -> Observation:
    """The Validating observation of a warm-successor spec, completed: the successor's
    state, and whether one is due (time left <= longest job + lead time + margin).
    ``obs`` as it is without ``warm_successor`` or for an allocation that is ending."""
    if not m.spec.warm_successor:
        return obs
    release_stale_drained(m)  # a drained one whose last run died: released now
    if not info.state.is_live:
        return obs
    fields = observe_successor(m, info.job_id)
    due = False
    if not (m.handoff.failed or m.handoff.queued) and info.state.is_running \
            and info.time_left.is_finite:
        spec = m.spec
        lead = lead_time(m.run_history.entries(), partition=spec.slurm_params.partition,
                         nodes=spec.alloc_nodes or spec.slurm_params.nodes,
                         image=spec.docker_image)
        due = successor_due(info.time_left.seconds, estimate.seconds, lead.seconds)
    if m.handoff.switched_to == info.job_id:
        fields["admit_margin_s"] = SWITCHED_MARGIN_S
    summary = obs.summary
    if fields["successor"]:
        summary += f"; successor {fields['successor']}"
    elif due:
        summary += "; a successor is due"
    return attrs.evolve(obs, successor_due=due, summary=summary, **fields)


def queue_successor(m: Machine) -> str:
    """QueueingSuccessor: ``salloc`` under the other name, ``--dependency=singleton``
    (Slurm then never runs two of that name: racing runs get 1 RUNNING + 1 PENDING),
    its state file written from the moment it exists, the record, then the warmer."""
    assert m.alloc is not None
    spec, params = m.spec, m.spec.slurm_params
    info = m.observation.info
    current_name = info.name if info is not None and info.name else spec.job_name
    name = other_name(current_name, spec.job_name)
    size = m.request_size()
    estimate = m.observation.expected_s
    request = AllocationRequest(
        partition=params.partition, account=params.account, nodes=size.nodes,
        time_limit=spec.alloc_time_limit, job_name=name,
        log_path=successor_log_of(m.salloc_log),
        gpus_per_node=size.gpus_per_node, user=m.user,
        ntasks_per_node=size.ntasks_per_node, comment=repo_tag(spec),
        dependency=SINGLETON,
        time_min=_time_min(spec.alloc_time_limit, estimate),
    )
    try:
        job_id = m.backend.allocate(request)
    except AllocationFailed as exc:  # no job left (the backend's word): today's path
        m.handoff.failed = True
        m._warn(f"the successor was not queued: {exc}; this run goes on without one")
        return f"successor not queued ({exc}): today's path"
    m.handoff.queued = True
    pending = AllocState(submit_time=_submit_time(m, job_id),
        job_id=job_id, nodelist="", partition=params.partition, account=params.account,
        nodes=size.nodes, gpus_per_node=size.gpus_per_node, docker_image=spec.docker_image,
        container_mounts=spec.mounts_text, time_limit=spec.alloc_time_limit.as_slurm(),
        installed=False,
    )
    try:
        _store(m).write(pending)
    except OSError as exc:  # never leaked: nothing would name it
        effects.cancel_unleased(m.ctx, job_id)
        raise StateFileError(str(_paths(m).successor_state),
                             f"cannot be written ({exc}); successor {job_id} was cancelled") \
            from exc
    pid = None
    if m.warmer is not None:
        pid = m.warmer(attrs.evolve(spec, alloc_job_name=name, warm_successor=False))
    record = SuccessorRecord(job_id=job_id, job_name=name, predecessor=m.alloc.job_id,
                             phase=Phase.WARMING if pid else Phase.PENDING,
                             requested_at=datetime.now(UTC).isoformat(timespec="seconds"),
                             warmer_pid=pid)
    try:
        write_successor(_paths(m).successor_record, record)
    except OSError as exc:
        m.notes.append(f"the successor record was not written ({exc}); status shows less")
    warmed = f", warmer pid {pid}" if pid else ", no warmer: the run that needs it sets it up"
    m._log(f"Queued successor allocation {job_id} ({name}, singleton) to follow "
           f"{m.alloc.job_id}{warmed}.")
    return f"successor {job_id} queued as {name}{warmed}"


def _submit_time(m: Machine, job_id: str) -> str | None:
    """Slurm's submit time of the successor just queued: its generation (a job id Slurm
    reuses later is another job); None when it cannot be read now."""
    try:
        return m.backend.query_job(job_id).submit_time or None
    except BackendError:
        return None


def _time_min(limit: Duration, expected_s: int | None) -> Duration | None:
    want = time_min_s(expected_s)
    if not limit.is_finite or want >= (limit.seconds or 0):
        return None
    return Duration.of_seconds(want)


def await_successor(m: Machine) -> Observation:
    """AwaitingSuccessor: poll the successor (backing off) until it is ready, lost, its
    warmer gone, or ``pending_wait_s`` passed; says what it waits for and why."""
    h = m.handoff
    now = m.clock.now()
    if h.await_since is None:
        h.await_since = now
    elif m.observation.source is State.AwaitingSuccessor:
        m.clock.sleep(min(10.0, 0.5 * 2 ** min(h.polls, 5)))
        h.polls += 1
        now = m.clock.now()
    succ = successor_alloc(m)
    fields = observe_successor(m, m.alloc.job_id if m.alloc else None)
    job = succ.job_id if succ else "?"
    why = fields["successor"] or "gone"
    if fields["successor"] == "pending":
        try:
            row = m.backend.query_job(job)
            why = f"PENDING ({row.reason or 'unknown'}), est. start {row.start_time or 'N/A'}"
        except JobNotFound:
            why = "gone"
    summary = f"waiting for successor {job}: {why}"
    m._log(summary.capitalize() + ".")
    waited = now - h.await_since
    h.waited_s, h.waited_for = waited, job
    return Observation(trigger="advance", source=m.state, at=now, alloc=m.alloc,
                       user=m.user, summary=summary,
                       pending_wait_left_s=max(0.0, m.pending_wait_s - waited),
                       failure=f"successor {job} not ready after {waited:.0f} s ({why}); "
                               "both allocations kept, run again", **fields)


def switch(m: Machine) -> str:
    """Switching: the successor's file becomes the state file (new jobs go to it); the
    old allocation is remembered to release once no job is on it (the edge's effect)."""
    store = StateStore(_paths(m).successor_state, lock_timeout_s=SWITCH_LOCK_S)
    with store.locked(on_wait=m._log):  # a warmer finishing its last write
        succ = successor_alloc(m)
        if succ is None:
            raise StateFileError(str(store.path),
                                 "the successor's state file vanished while switching")
        if succ.job_id not in m.handoff.vetted:  # the file changed since it was checked
            raise StateFileError(str(store.path),
                                 f"names job {succ.job_id}, which this run did not check "
                                 "with Slurm: not switched to")
        old = m.alloc
        m.store.write(succ)
        effects.delete_state(store)
    effects.forget_successor_record(_paths(m).successor_record)
    m.alloc = succ
    if m.handoff.await_since is not None:  # the job waited for it: the report says so
        m.handoff.waited_s = m.clock.now() - m.handoff.await_since
        m.handoff.waited_for = succ.job_id
    m.handoff.await_since = None
    m.handoff.switched_to = succ.job_id
    if old is not None and old.job_id != succ.job_id:
        m.handoff.drained = old.job_id
        try:  # the next runs release it if its last run dies (kill -9) before its end
            StateStore(_paths(m).drained_state).write(old)
        except OSError as exc:
            m.notes.append(f"the drained allocation {old.job_id} was not recorded ({exc}): "
                           "if its last run dies, it is released only at its walltime")
    m._log(f"Switched to allocation {succ.job_id}"
           + (f"; {old.job_id} takes no new job and drains." if old else "."))
    return f"state file names successor {succ.job_id}" + (
        f"; {old.job_id} drains" if old else "")


def drop_successor(m: Machine) -> bool:
    """Effect DROP_SUCCESSOR: cancel a successor pending for a reason that does not pass
    (a gone one needs nothing), forget its files, go today's path for this run."""
    succ = successor_alloc(m)
    m.handoff.failed = True
    if succ is None:
        return False
    try:
        info: JobInfo | None = m.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    misfit = m.handoff.misfits.get(succ.job_id)
    if info is not None and not _vet(m, succ, info):
        info = None  # never cancelled: not ours, or another job under its id
    elif info is not None and info.state.is_live:
        effects.cancel_unleased(m.ctx, succ.job_id)
        m.handoff.cancelled.add(succ.job_id)
        if misfit:
            m._warn(f"successor allocation {succ.job_id} was granted another shape than "
                    f"the job needs: {'; '.join(misfit)}; cancelled; the allocation is "
                    "replaced at expiry as before")
        else:
            m._warn(f"successor allocation {succ.job_id} cannot start ({info.state}, "
                    f"reason {info.reason}): cancelled; the allocation is replaced at "
                    "expiry as before")
    elif info is None or not info.state.is_live:
        m._warn(f"successor allocation {succ.job_id} is gone: the allocation is replaced "
                "at expiry as before")
    forget_successor(m)
    return True


def release_drained(m: Machine, job_id: str | None) -> bool:
    """Effect RELEASE_DRAINED: release ``job_id`` (replaced by a successor) when no other
    run's job is on it; else the last of them does, when its job ends."""
    if job_id is None or job_id in m.handoff.cancelled:
        return False
    current = _named(m)
    if current == job_id:
        return False  # named again: it serves
    holders = m.leases.holders(job_id) if m.leases is not None else []
    if holders:
        m.notes.append(f"allocation {job_id} drains: {len(holders)} job(s) of other runs "
                       "still on it; the last one releases it")
        return False
    try:
        info = m.backend.query_job(job_id)
    except JobNotFound:
        _forget_drained(m, job_id)
        return False
    if not info.state.is_live:
        _forget_drained(m, job_id)
        return False
    m._log(f"Releasing drained allocation {job_id} (no job on it).")
    try:
        effects.cancel_gated(m.ctx, job_id, "releasing it", wait=False)
    except AllocationInUse:
        m.notes.append(f"allocation {job_id} drains: a job of another run came up on it; "
                       "the last one releases it")
        return False
    m.handoff.cancelled.add(job_id)
    _forget_drained(m, job_id)
    return True


def _forget_drained(m: Machine, job_id: str) -> None:
    """Drop the drained record when it names ``job_id`` (never waits for its lock)."""
    effects.delete_state_if_names(StateStore(_paths(m).drained_state), job_id)


def release_stale_drained(m: Machine, *, wait: bool = False) -> str | None:
    """Release the allocation an earlier switch left draining, once no job of any run is
    on it: its last run died (``kill -9``) before its ``finish`` could release it. Never
    one with a live lease (Slurm's lease steps; a dead run's lease on this host is
    broken), never another checkout's or user's, never a job that reused its id (other
    submit time: :func:`~slurm_fsm.step0.table.same_generation`); the record is dropped for
    those, and for one gone or named again. ``wait``: at a release (0A), wait for its
    leases as for the allocation itself. Once per run; the released job id or None."""
    if m.handoff.swept:
        return None
    m.handoff.swept = True
    store = StateStore(_paths(m).drained_state)
    try:
        old = store.read()
    except StateFileError:
        effects.delete_state(store)
        return None
    if old is None:
        return None
    if old.job_id == m.handoff.drained:
        return None  # this run's own switch: RELEASE_DRAINED did what can be done
    if m.alloc is not None and old.job_id == m.alloc.job_id:
        effects.delete_state_if_names(store, old.job_id)  # named again: it serves
        return None
    if not _still_ours_and_live(m, store, old) or _drained_in_use(m, old.job_id, wait):
        return None
    m._log(f"Releasing drained allocation {old.job_id}: no job of any run is on it (its "
           "last run ended without releasing it).")
    try:
        effects.cancel_gated(m.ctx, old.job_id, "releasing it", wait=False)
    except AllocationInUse:
        m.notes.append(f"allocation {old.job_id} drains: a job of another run came up on "
                       "it; the last one releases it")
        return None
    m.handoff.cancelled.add(old.job_id)
    effects.delete_state_if_names(store, old.job_id)
    return old.job_id


def _still_ours_and_live(m: Machine, store: StateStore, old: AllocState) -> bool:
    """The drained allocation still lives and is still the one the record names (same
    submit time) and this checkout's; else its record is dropped (or kept for the next
    run when Slurm could not be asked) and False."""
    try:
        info = m.backend.query_job(old.job_id)
    except JobNotFound:
        info = None
    except BackendError as exc:  # asked again by the next run
        m.notes.append(f"the drained allocation {old.job_id} was not checked ({exc})")
        return False
    if info is None or not info.state.is_live:
        effects.delete_state_if_names(store, old.job_id)
        return False
    if not same_generation(old, info):
        m._warn(f"the drained allocation {old.job_id} was submitted at {old.submit_time}, "
                f"but Slurm's job {info.job_id} was submitted at {info.submit_time}: the "
                "id was reused by another job; it is left alone and its record dropped")
        effects.delete_state_if_names(store, old.job_id)
        return False
    if not is_ours(info, m.user, m.spec, set(parity_names(m.spec.job_name))):
        m.notes.append(f"the drained allocation {old.job_id} is not this checkout's now: "
                       "left alone, its record dropped")
        effects.delete_state_if_names(store, old.job_id)
        return False
    return True


def _drained_in_use(m: Machine, job_id: str, wait: bool) -> bool:
    """Another run's job is still on the drained allocation (a live lease): it is left
    to drain. ``wait`` (a release): wait for those leases first, as for the allocation."""
    if m.leases is None:
        return False
    if wait:
        try:
            m.leases.clear(job_id, "releasing it")
        except AllocationInUse as exc:  # the release itself is done: not failed
            m._warn(f"the drained allocation {job_id} was not released: {exc}; "
                    "its last run releases it when its job ends")
            return True
        return False
    if m.leases.holders(job_id):
        m.notes.append(f"allocation {job_id} drains: job(s) of other runs still "
                       "on it; the last one releases it")
        return True
    return False


def _named(m: Machine) -> str | None:
    try:
        alloc = m.store.read()
    except StateFileError:
        return None
    return alloc.job_id if alloc else None


def replaced(m: Machine) -> bool:
    """At ``finish``: the state file names an allocation other than this run's."""
    if not m.spec.warm_successor or m.alloc is None:
        return False
    named = _named(m)
    return named is not None and named != m.alloc.job_id


def release_successor(m: Machine) -> str | None:
    """At a release (0A): cancel the queued successor too (when it is this checkout's)
    and drop its files; its job id, or None when there was none."""
    if m.spec.warm_successor:
        drained = release_stale_drained(m, wait=True)
        if drained is not None:
            m.notes.append(f"drained allocation {drained} released too")
    succ = successor_alloc(m)
    if succ is None:
        return None
    try:
        info: JobInfo | None = m.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    if info is not None and info.state.is_live and same_generation(succ, info) and is_ours(
            info, m.user, m.spec, set(parity_names(m.spec.job_name))):
        # never under another run's job
        effects.cancel_gated(m.ctx, succ.job_id, "releasing it")
        m._log(f"Successor allocation {succ.job_id} released.")
    effects.forget_successor_files(_store(m), _paths(m).successor_record)
    return succ.job_id


def job_names(spec: JobSpec) -> tuple[str, ...]:
    """The names the state file's allocation may carry: the spec's job name, and with
    ``warm_successor`` its ``-b`` twin too."""
    return parity_names(spec.job_name) if spec.warm_successor else (spec.job_name,)


def successor_ids(m: Machine) -> set[str]:
    """The job the successor file names (never an orphan)."""
    succ = successor_alloc(m)
    return {succ.job_id} if succ else set()
