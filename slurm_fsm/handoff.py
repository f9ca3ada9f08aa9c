"""The work of the warm successor's states (issue 27), for :mod:`slurm_fsm.machine`.

:mod:`slurm_fsm.successor` holds the rules; :mod:`slurm_fsm.step0.table` the edges
(QueueingSuccessor, AwaitingSuccessor, Switching, the drain at ``finish``); this module
does the work of those states and effects as functions of step 0's
:class:`~slurm_fsm.step0.context.Step0Context` and the driver's
:class:`~slurm_fsm.step0.context.Step0Memory` (its allocation, notes, warnings and
:class:`~slurm_fsm.step0.context.HandoffState`), never of the machine, through the
context's backend (no command line here); cancels and deletes are
:mod:`slurm_fsm.step0.effects`'.

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
from typing import Any

import attrs
import filelock

from slurm_fsm.backend import AllocationRequest, JobInfo
from slurm_fsm.capacity import allocation_request_size, capacity_problems, with_grant
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    ContainerShared,
    JobNotFound,
    StateFileError,
)
from slurm_fsm.history import Estimate
from slurm_fsm.lease import AllocationInUse
from slurm_fsm.ownership import describe
from slurm_fsm.paths import StatePaths, successor_log_of
from slurm_fsm.preflight import node_cpus
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0 import effects
from slurm_fsm.step0.context import HandoffState, Step0Context, Step0Memory, user_of, warn
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
    "Warmer",
    "await_successor",
    "before_import",
    "drop_successor",
    "forget_successor",
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


def _neighbours(ctx: Step0Context, mem: Step0Memory) -> list[AllocState]:
    """The allocations the checkout's other files name (state, successor, drained)."""
    found = []
    for path in StatePaths.of_allocation_file(ctx.store.path).allocation_files:
        if path == ctx.store.path:
            continue
        try:
            other = StateStore(path).read()
        except StateFileError:
            continue
        if other is not None and other.nodelist and (
                mem.alloc is None or other.job_id != mem.alloc.job_id):
            found.append(other)
    return found


def _live_same(ctx: Step0Context, mem: Step0Memory, other: AllocState) -> bool:
    """Slurm still runs the very job ``other`` recorded (not a reused id)."""
    try:
        info = ctx.backend.query_job(other.job_id)
    except JobNotFound:
        return False
    return info.state.is_live and same_generation(other, info)


def shared_container(ctx: Step0Context, mem: Step0Memory) -> tuple[Sharing, AllocState | None]:
    """How the machine's allocation shares its nodes with the checkout's other live
    allocations (:func:`~slurm_fsm.successor.node_sharing`): a conflict with any of them
    wins; else the one whose ready container it may use; else NONE."""
    assert mem.alloc is not None
    spec = ctx.spec
    if spec.docker_image is None or not mem.alloc.nodelist:
        return Sharing.NONE, None
    mine = ctx.backend.expand_nodelist(mem.alloc.nodelist)
    found: tuple[Sharing, AllocState | None] = (Sharing.NONE, None)
    for other in _neighbours(ctx, mem):
        verdict = node_sharing(mine, ctx.backend.expand_nodelist(other.nodelist), other,
                               name=spec.container_name, image=spec.docker_image,
                               mounts=spec.mounts_text, installs=spec.installs)
        if verdict is Sharing.NONE or not _live_same(ctx, mem, other):
            continue
        if verdict is Sharing.CONFLICT:
            return verdict, other
        found = (verdict, other)
    return found


def before_import(ctx: Step0Context, mem: Step0Memory) -> str | None:
    """Before an import (pyxis: one container of a name per node): on nodes another live
    allocation of the checkout holds, never touch the container its jobs may use. When
    it holds the same container, ready, on all of this allocation's nodes, use it (the
    state becomes imported and installed; the summary is returned); when a node holds
    another one or one not set up, wait for that allocation's jobs to end (a run's
    leases) or, without leases (the warmer), raise :class:`ContainerShared`. None: go
    on importing."""
    assert mem.alloc is not None
    verdict, other = shared_container(ctx, mem)
    if verdict is Sharing.NONE or other is None:
        return None
    name = ctx.spec.container_name or ""
    if verdict is Sharing.ADOPT:
        mem.alloc = attrs.evolve(mem.alloc, container_name=name, installed=other.installed)
        ctx.store.write(mem.alloc)
        ctx.say(f"Container {name!r} is on {mem.alloc.nodelist} already, set up from "
               f"{ctx.spec.docker_image} by allocation {other.job_id}: used as it is.")
        return (f"container {name!r} of allocation {other.job_id} used on "
                f"{mem.alloc.nodelist} (same image, ready): nothing imported")
    what = f"importing container {name!r} on nodes allocation {other.job_id} shares"
    if ctx.leases is None:
        raise ContainerShared(
            f"not {what}: its container of that name (image {other.docker_image or '-'}, "
            f"{'installed' if other.installed else 'not set up'}) may be in use by its "
            "jobs; the run that switches to this allocation sets it up once they end")
    ctx.leases.clear(other.job_id, what, name)
    return None


def _paths(ctx: Step0Context, mem: Step0Memory) -> StatePaths:
    """The files beside the machine's state file."""
    return StatePaths.for_state_file(ctx.store.path)


def _store(ctx: Step0Context, mem: Step0Memory) -> StateStore:
    return StateStore(_paths(ctx, mem).successor_state)


def successor_alloc(ctx: Step0Context, mem: Step0Memory) -> AllocState | None:
    """The successor's state file (None: none, or unreadable)."""
    try:
        return _store(ctx, mem).read()
    except StateFileError:
        return None


def warmer_alive(ctx: Step0Context, mem: Step0Memory) -> bool:
    """Someone (a warmer) holds the successor file's lock now."""
    probe = filelock.FileLock(str(_store(ctx, mem).lock_path), timeout=0)
    try:
        probe.acquire()
    except filelock.Timeout:
        return True
    probe.release()
    return False


def _set_up(alloc: AllocState, spec: JobSpec) -> bool:
    return same_container(alloc, spec) and (
        alloc.installed or spec.docker_image is None or not spec.installs)


def observe_successor(ctx: Step0Context, mem: Step0Memory, current: str | None) -> dict[str, Any]:
    """The successor fields of an observation: ``successor`` ("", "pending", "running",
    "ready", "lost") and ``warmer_alive``; one ``squeue`` of the successor when its file
    names one other than ``current``."""
    succ = successor_alloc(ctx, mem)
    if succ is None or succ.job_id == current:
        return {"successor": "", "warmer_alive": False}
    info: JobInfo | None
    try:
        info = ctx.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    if info is not None and not _vet(ctx, mem, succ, info):
        forget_successor(ctx, mem)
        return {"successor": "", "warmer_alive": False}
    verdict = judge_successor(info)
    if verdict is SuccessorVerdict.SET_UP and info is not None and _misfit(ctx, mem, succ, info):
        state = "lost"  # granted another shape than the spec needs: DROP_SUCCESSOR
    elif verdict is SuccessorVerdict.SET_UP:
        state = "ready" if _set_up(succ, ctx.spec) else "running"
    elif verdict is SuccessorVerdict.WAIT:
        state = "pending"
    else:
        state = "lost"
    record = read_successor(_paths(ctx, mem).successor_record)
    pid = record.warmer_pid if record is not None and record.job_id == succ.job_id else None
    return {"successor": state, "warmer_alive": warmer_alive(ctx, mem) or _pid_alive(pid)}


def _vet(ctx: Step0Context, mem: Step0Memory, succ: AllocState, info: JobInfo) -> bool:
    """The job the successor file names is this checkout's (its tag, this user) and the
    very job the file recorded (same submit time); else it is warned about and False:
    the file is a hint, never a reason to switch to, release or cancel a job."""
    if not same_generation(succ, info):
        warn(ctx, mem, f"the successor file names job {succ.job_id} submitted at "
                f"{succ.submit_time}, but Slurm's job {info.job_id} was submitted at "
                f"{info.submit_time}: the id was reused by another job; it is left alone "
                "and the file forgotten")
        return False
    owner = owner_of(info, user_of(ctx, mem), ctx.spec, set(parity_names(ctx.spec.job_name)))
    if not owner.ours:
        warn(ctx, mem, f"the successor file names job {succ.job_id}, which is not this "
                f"checkout's ({describe(info, owner)}): it is left alone and the file "
                "forgotten")
        return False
    mem.handoff.vetted.add(succ.job_id)
    return True


def queued_successor(ctx: Step0Context, mem: Step0Memory) -> bool:
    """With no state file: the successor file names a live job Slurm confirms as this
    checkout's own, the very one recorded (:func:`_vet`); one gone, foreign or reused
    is forgotten (never cancelled), one Slurm cannot be asked about now is left."""
    succ = successor_alloc(ctx, mem)
    if succ is None:
        return False
    try:
        info = ctx.backend.query_job(succ.job_id)
    except JobNotFound:
        forget_successor(ctx, mem)
        return False
    except BackendError as exc:
        mem.notes.append(f"the queued successor {succ.job_id} was not checked ({exc})")
        return False
    if not info.state.is_live or not _vet(ctx, mem, succ, info):
        forget_successor(ctx, mem)
        return False
    return True


def forget_successor(ctx: Step0Context, mem: Step0Memory) -> None:
    """Drop the successor's state file and record (no job is cancelled)."""
    effects.forget_successor_files(_store(ctx, mem), _paths(ctx, mem).successor_record)


def _misfit(ctx: Step0Context, mem: Step0Memory, succ: AllocState, info: JobInfo) -> list[str]:
    """What the spec needs that the RUNNING successor was not granted (another node
    count, fewer GPUs or CPUs per node: a ``--nodes=1-2`` range, a site's rewrite of the
    request); ``[]`` when it can serve the spec. Judged once per run and successor, on
    one ``scontrol show job`` (:meth:`~slurm_fsm.backend.SlurmBackend.granted`): never
    on the shape its file records (a file is a hint anyone with write access made)."""
    if succ.job_id in mem.handoff.misfits:
        return mem.handoff.misfits[succ.job_id]
    try:  # Slurm's grant, never the shape the file records (anyone may write it)
        alloc = with_grant(attrs.evolve(succ, nodelist=info.nodelist or succ.nodelist),
                           ctx.backend.granted(succ.job_id))
    except (BackendError, ValueError) as exc:  # not judged now: judged at its use
        mem.notes.append(f"what Slurm granted successor {succ.job_id} could not be read "
                       f"({exc}); judged once it is the allocation")
        return []
    problems = capacity_problems(alloc, ctx.spec)
    mem.handoff.misfits[succ.job_id] = problems
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


def with_successor(ctx: Step0Context, mem: Step0Memory, obs: Observation, info: JobInfo,
                   estimate: Estimate) -> Observation:
    """The Validating observation of a warm-successor spec, completed: the successor's
    state, and whether one is due (time left <= longest job + lead time + margin).
    ``obs`` as it is without ``warm_successor`` or for an allocation that is ending."""
    if not ctx.spec.warm_successor:
        return obs
    release_stale_drained(ctx, mem)  # a drained one whose last run died: released now
    if not info.state.is_live:
        return obs
    fields = observe_successor(ctx, mem, info.job_id)
    due = False
    if not (mem.handoff.failed or mem.handoff.queued) and info.state.is_running \
            and info.time_left.is_finite:
        spec = ctx.spec
        lead = lead_time(ctx.run_history.entries(), partition=spec.slurm_params.partition,
                         nodes=spec.alloc_nodes or spec.slurm_params.nodes,
                         image=spec.docker_image)
        due = successor_due(info.time_left.seconds, estimate.seconds, lead.seconds)
    if mem.handoff.switched_to == info.job_id:
        fields["admit_margin_s"] = SWITCHED_MARGIN_S
    summary = obs.summary
    if fields["successor"]:
        summary += f"; successor {fields['successor']}"
    elif due:
        summary += "; a successor is due"
    return attrs.evolve(obs, successor_due=due, summary=summary, **fields)


def queue_successor(ctx: Step0Context, mem: Step0Memory, last: Observation) -> str:
    """QueueingSuccessor: ``salloc`` under the other name, ``--dependency=singleton``
    (Slurm then never runs two of that name: racing runs get 1 RUNNING + 1 PENDING),
    its state file written from the moment it exists, the record, then the warmer.
    ``last``: the observation that chose to queue it (the job row, the estimate)."""
    assert mem.alloc is not None
    spec, params = ctx.spec, ctx.spec.slurm_params
    info = last.info
    current_name = info.name if info is not None and info.name else spec.job_name
    name = other_name(current_name, spec.job_name)
    size = allocation_request_size(spec, node_cpus(spec, ctx.backend))  # as 0E asks
    estimate = last.expected_s
    request = AllocationRequest(
        partition=params.partition, account=params.account, nodes=size.nodes,
        time_limit=spec.alloc_time_limit, job_name=name,
        log_path=successor_log_of(ctx.salloc_log),
        gpus_per_node=size.gpus_per_node, user=user_of(ctx, mem),
        ntasks_per_node=size.ntasks_per_node, comment=repo_tag(spec),
        dependency=SINGLETON,
        time_min=_time_min(spec.alloc_time_limit, estimate),
    )
    try:
        job_id = ctx.backend.allocate(request)
    except AllocationFailed as exc:  # no job left (the backend's word): today's path
        mem.handoff.failed = True
        warn(ctx, mem, f"the successor was not queued: {exc}; this run goes on without one")
        return f"successor not queued ({exc}): today's path"
    mem.handoff.queued = True
    pending = AllocState(submit_time=_submit_time(ctx, mem, job_id),
        job_id=job_id, nodelist="", partition=params.partition, account=params.account,
        nodes=size.nodes, gpus_per_node=size.gpus_per_node, docker_image=spec.docker_image,
        container_mounts=spec.mounts_text, time_limit=spec.alloc_time_limit.as_slurm(),
        installed=False,
    )
    try:
        _store(ctx, mem).write(pending)
    except OSError as exc:  # never leaked: nothing would name it
        effects.cancel_unleased(ctx, job_id)
        raise StateFileError(str(_paths(ctx, mem).successor_state),
                             f"cannot be written ({exc}); successor {job_id} was cancelled") \
            from exc
    pid = None
    if ctx.warmer is not None:
        pid = ctx.warmer(attrs.evolve(spec, alloc_job_name=name, warm_successor=False))
    record = SuccessorRecord(job_id=job_id, job_name=name, predecessor=mem.alloc.job_id,
                             phase=Phase.WARMING if pid else Phase.PENDING,
                             requested_at=datetime.now(UTC).isoformat(timespec="seconds"),
                             warmer_pid=pid)
    try:
        write_successor(_paths(ctx, mem).successor_record, record)
    except OSError as exc:
        mem.notes.append(f"the successor record was not written ({exc}); status shows less")
    warmed = f", warmer pid {pid}" if pid else ", no warmer: the run that needs it sets it up"
    ctx.say(f"Queued successor allocation {job_id} ({name}, singleton) to follow "
           f"{mem.alloc.job_id}{warmed}.")
    return f"successor {job_id} queued as {name}{warmed}"


def _submit_time(ctx: Step0Context, mem: Step0Memory, job_id: str) -> str | None:
    """Slurm's submit time of the successor just queued: its generation (a job id Slurm
    reuses later is another job); None when it cannot be read now."""
    try:
        return ctx.backend.query_job(job_id).submit_time or None
    except BackendError:
        return None


def _time_min(limit: Duration, expected_s: int | None) -> Duration | None:
    want = time_min_s(expected_s)
    if not limit.is_finite or want >= (limit.seconds or 0):
        return None
    return Duration.of_seconds(want)


def await_successor(ctx: Step0Context, mem: Step0Memory, last: Observation) -> Observation:
    """AwaitingSuccessor: poll the successor (backing off) until it is ready, lost, its
    warmer gone, or ``pending_wait_s`` passed; says what it waits for and why.
    ``last``: the previous observation (a poll after one of this state backs off)."""
    h = mem.handoff
    now = ctx.clock.now()
    if h.await_since is None:
        h.await_since = now
    elif last.source is State.AwaitingSuccessor:
        ctx.clock.sleep(min(10.0, 0.5 * 2 ** min(h.polls, 5)))
        h.polls += 1
        now = ctx.clock.now()
    succ = successor_alloc(ctx, mem)
    fields = observe_successor(ctx, mem, mem.alloc.job_id if mem.alloc else None)
    job = succ.job_id if succ else "?"
    why = fields["successor"] or "gone"
    if fields["successor"] == "pending":
        try:
            row = ctx.backend.query_job(job)
            why = f"PENDING ({row.reason or 'unknown'}), est. start {row.start_time or 'N/A'}"
        except JobNotFound:
            why = "gone"
    summary = f"waiting for successor {job}: {why}"
    ctx.say(summary.capitalize() + ".")
    waited = now - h.await_since
    h.waited_s, h.waited_for = waited, job
    return Observation(trigger="advance", source=State.AwaitingSuccessor, at=now, alloc=mem.alloc,
                       user=user_of(ctx, mem), summary=summary,
                       pending_wait_left_s=max(0.0, ctx.policy.pending_wait_s - waited),
                       failure=f"successor {job} not ready after {waited:.0f} s ({why}); "
                               "both allocations kept, run again", **fields)


def switch(ctx: Step0Context, mem: Step0Memory) -> str:
    """Switching: the successor's file becomes the state file (new jobs go to it); the
    old allocation is remembered to release once no job is on it (the edge's effect)."""
    store = StateStore(_paths(ctx, mem).successor_state, lock_timeout_s=SWITCH_LOCK_S)
    with store.locked(on_wait=ctx.say):  # a warmer finishing its last write
        succ = successor_alloc(ctx, mem)
        if succ is None:
            raise StateFileError(str(store.path),
                                 "the successor's state file vanished while switching")
        if succ.job_id not in mem.handoff.vetted:  # the file changed since it was checked
            raise StateFileError(str(store.path),
                                 f"names job {succ.job_id}, which this run did not check "
                                 "with Slurm: not switched to")
        old = mem.alloc
        ctx.store.write(succ)
        effects.delete_state(store)
    effects.forget_successor_record(_paths(ctx, mem).successor_record)
    mem.alloc = succ
    if mem.handoff.await_since is not None:  # the job waited for it: the report says so
        mem.handoff.waited_s = ctx.clock.now() - mem.handoff.await_since
        mem.handoff.waited_for = succ.job_id
    mem.handoff.await_since = None
    mem.handoff.switched_to = succ.job_id
    if old is not None and old.job_id != succ.job_id:
        mem.handoff.drained = old.job_id
        try:  # the next runs release it if its last run dies (kill -9) before its end
            StateStore(_paths(ctx, mem).drained_state).write(old)
        except OSError as exc:
            mem.notes.append(f"the drained allocation {old.job_id} was not recorded ({exc}): "
                           "if its last run dies, it is released only at its walltime")
    ctx.say(f"Switched to allocation {succ.job_id}"
           + (f"; {old.job_id} takes no new job and drains." if old else "."))
    return f"state file names successor {succ.job_id}" + (
        f"; {old.job_id} drains" if old else "")


def drop_successor(ctx: Step0Context, mem: Step0Memory) -> bool:
    """Effect DROP_SUCCESSOR: cancel a successor pending for a reason that does not pass
    (a gone one needs nothing), forget its files, go today's path for this run."""
    succ = successor_alloc(ctx, mem)
    mem.handoff.failed = True
    if succ is None:
        return False
    try:
        info: JobInfo | None = ctx.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    misfit = mem.handoff.misfits.get(succ.job_id)
    if info is not None and not _vet(ctx, mem, succ, info):
        info = None  # never cancelled: not ours, or another job under its id
    elif info is not None and info.state.is_live:
        effects.cancel_unleased(ctx, succ.job_id)
        mem.handoff.cancelled.add(succ.job_id)
        if misfit:
            warn(ctx, mem, f"successor allocation {succ.job_id} was granted another shape than "
                    f"the job needs: {'; '.join(misfit)}; cancelled; the allocation is "
                    "replaced at expiry as before")
        else:
            warn(ctx, mem, f"successor allocation {succ.job_id} cannot start ({info.state}, "
                    f"reason {info.reason}): cancelled; the allocation is replaced at "
                    "expiry as before")
    elif info is None or not info.state.is_live:
        warn(ctx, mem, f"successor allocation {succ.job_id} is gone: the allocation is replaced "
                "at expiry as before")
    forget_successor(ctx, mem)
    return True


def release_drained(ctx: Step0Context, mem: Step0Memory, job_id: str | None) -> bool:
    """Effect RELEASE_DRAINED: release ``job_id`` (replaced by a successor) when no other
    run's job is on it; else the last of them does, when its job ends."""
    if job_id is None or job_id in mem.handoff.cancelled:
        return False
    current = _named(ctx, mem)
    if current == job_id:
        return False  # named again: it serves
    holders = ctx.leases.holders(job_id) if ctx.leases is not None else []
    if holders:
        mem.notes.append(f"allocation {job_id} drains: {len(holders)} job(s) of other runs "
                       "still on it; the last one releases it")
        return False
    try:
        info = ctx.backend.query_job(job_id)
    except JobNotFound:
        _forget_drained(ctx, mem, job_id)
        return False
    if not info.state.is_live:
        _forget_drained(ctx, mem, job_id)
        return False
    ctx.say(f"Releasing drained allocation {job_id} (no job on it).")
    try:
        effects.cancel_gated(ctx, job_id, "releasing it", wait=False)
    except AllocationInUse:
        mem.notes.append(f"allocation {job_id} drains: a job of another run came up on it; "
                       "the last one releases it")
        return False
    mem.handoff.cancelled.add(job_id)
    _forget_drained(ctx, mem, job_id)
    return True


def _forget_drained(ctx: Step0Context, mem: Step0Memory, job_id: str) -> None:
    """Drop the drained record when it names ``job_id`` (never waits for its lock)."""
    effects.delete_state_if_names(StateStore(_paths(ctx, mem).drained_state), job_id)


def release_stale_drained(ctx: Step0Context, mem: Step0Memory, *, wait: bool = False) -> str | None:
    """Release the allocation an earlier switch left draining, once no job of any run is
    on it: its last run died (``kill -9``) before its ``finish`` could release it. Never
    one with a live lease (Slurm's lease steps; a dead run's lease on this host is
    broken), never another checkout's or user's, never a job that reused its id (other
    submit time: :func:`~slurm_fsm.step0.table.same_generation`); the record is dropped for
    those, and for one gone or named again. ``wait``: at a release (0A), wait for its
    leases as for the allocation itself. Once per run; the released job id or None."""
    if mem.handoff.swept:
        return None
    mem.handoff.swept = True
    store = StateStore(_paths(ctx, mem).drained_state)
    try:
        old = store.read()
    except StateFileError:
        effects.delete_state(store)
        return None
    if old is None:
        return None
    if old.job_id == mem.handoff.drained:
        return None  # this run's own switch: RELEASE_DRAINED did what can be done
    if mem.alloc is not None and old.job_id == mem.alloc.job_id:
        effects.delete_state_if_names(store, old.job_id)  # named again: it serves
        return None
    if not _still_ours_and_live(ctx, mem, store, old) \
            or _drained_in_use(ctx, mem, old.job_id, wait):
        return None
    ctx.say(f"Releasing drained allocation {old.job_id}: no job of any run is on it (its "
           "last run ended without releasing it).")
    try:
        effects.cancel_gated(ctx, old.job_id, "releasing it", wait=False)
    except AllocationInUse:
        mem.notes.append(f"allocation {old.job_id} drains: a job of another run came up on "
                       "it; the last one releases it")
        return None
    mem.handoff.cancelled.add(old.job_id)
    effects.delete_state_if_names(store, old.job_id)
    return old.job_id


def _still_ours_and_live(ctx: Step0Context, mem: Step0Memory, store: StateStore,
                         old: AllocState) -> bool:
    """The drained allocation still lives and is still the one the record names (same
    submit time) and this checkout's; else its record is dropped (or kept for the next
    run when Slurm could not be asked) and False."""
    try:
        info = ctx.backend.query_job(old.job_id)
    except JobNotFound:
        info = None
    except BackendError as exc:  # asked again by the next run
        mem.notes.append(f"the drained allocation {old.job_id} was not checked ({exc})")
        return False
    if info is None or not info.state.is_live:
        effects.delete_state_if_names(store, old.job_id)
        return False
    if not same_generation(old, info):
        warn(ctx, mem, f"the drained allocation {old.job_id} was submitted at {old.submit_time}, "
                f"but Slurm's job {info.job_id} was submitted at {info.submit_time}: the "
                "id was reused by another job; it is left alone and its record dropped")
        effects.delete_state_if_names(store, old.job_id)
        return False
    if not is_ours(info, user_of(ctx, mem), ctx.spec, set(parity_names(ctx.spec.job_name))):
        mem.notes.append(f"the drained allocation {old.job_id} is not this checkout's now: "
                       "left alone, its record dropped")
        effects.delete_state_if_names(store, old.job_id)
        return False
    return True


def _drained_in_use(ctx: Step0Context, mem: Step0Memory, job_id: str, wait: bool) -> bool:
    """Another run's job is still on the drained allocation (a live lease): it is left
    to drain. ``wait`` (a release): wait for those leases first, as for the allocation."""
    if ctx.leases is None:
        return False
    if wait:
        try:
            ctx.leases.clear(job_id, "releasing it")
        except AllocationInUse as exc:  # the release itself is done: not failed
            warn(ctx, mem, f"the drained allocation {job_id} was not released: {exc}; "
                    "its last run releases it when its job ends")
            return True
        return False
    if ctx.leases.holders(job_id):
        mem.notes.append(f"allocation {job_id} drains: job(s) of other runs still "
                       "on it; the last one releases it")
        return True
    return False


def _named(ctx: Step0Context, mem: Step0Memory) -> str | None:
    try:
        alloc = ctx.store.read()
    except StateFileError:
        return None
    return alloc.job_id if alloc else None


def replaced(ctx: Step0Context, mem: Step0Memory) -> bool:
    """At ``finish``: the state file names an allocation other than this run's."""
    if not ctx.spec.warm_successor or mem.alloc is None:
        return False
    named = _named(ctx, mem)
    return named is not None and named != mem.alloc.job_id


def release_successor(ctx: Step0Context, mem: Step0Memory) -> str | None:
    """At a release (0A): cancel the queued successor too (when it is this checkout's)
    and drop its files; its job id, or None when there was none."""
    if ctx.spec.warm_successor:
        drained = release_stale_drained(ctx, mem, wait=True)
        if drained is not None:
            mem.notes.append(f"drained allocation {drained} released too")
    succ = successor_alloc(ctx, mem)
    if succ is None:
        return None
    try:
        info: JobInfo | None = ctx.backend.query_job(succ.job_id)
    except JobNotFound:
        info = None
    if info is not None and info.state.is_live and same_generation(succ, info) and is_ours(
            info, user_of(ctx, mem), ctx.spec, set(parity_names(ctx.spec.job_name))):
        # never under another run's job
        effects.cancel_gated(ctx, succ.job_id, "releasing it")
        ctx.say(f"Successor allocation {succ.job_id} released.")
    effects.forget_successor_files(_store(ctx, mem), _paths(ctx, mem).successor_record)
    return succ.job_id


def successor_ids(ctx: Step0Context, mem: Step0Memory) -> set[str]:
    """The job the successor file names (never an orphan)."""
    succ = successor_alloc(ctx, mem)
    return {succ.job_id} if succ else set()
