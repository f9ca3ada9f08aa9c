"""Step 0D-0E's work: orphans, then a new allocation (salloc), waited for until RUNNING.

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1), in the style of
:mod:`slurm_fsm.step0.release`: functions of the driver's
:class:`~slurm_fsm.step0.context.Step0Context` and
:class:`~slurm_fsm.step0.context.Step0Memory`, never of the machine. :func:`allocate`
returns the transition's summary; the allocation it got is ``mem.alloc`` (written to
the state file).

* The pre-flight's questions (:func:`slurm_fsm.step0.checks.require`: ``sinfo``,
  ``sacctmgr``; they change nothing) are asked once before anything is cancelled or
  allocated.
* :func:`release_orphans` (0D): this user's allocations of this checkout that no state
  file names are cancelled through the lease gate; one a moment old with a request's
  nonce is another run's (:data:`~slurm_fsm.step0.context.ORPHAN_GRACE_S`): adopted.
* :func:`to_replace` (Expiring, TooShort, Incompatible): the pre-flight's questions,
  then why the allocation is replaced (``mem.replace_why``, for the edge's CANCEL).
* :func:`allocating` is the Allocating state's work: :func:`allocate` with the
  context's user and warnings (the queued warm successor is never an orphan).
* :func:`allocate` (0E): ``salloc`` with a nonce (an answer lost to the controller is
  asked again with the same request, which adopts its job), the state file from the
  moment the job exists, the wait until RUNNING (a job that can never start, or waits
  longer than ``alloc_wait_s``, is cancelled: never left to start unused), then what
  Slurm granted is written and judged against what the job needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

import attrs

from slurm_fsm import files
from slurm_fsm.backend import AllocationRequest, JobInfo
from slurm_fsm.capacity import RequestSize, allocation_request_size, capacity_problems
from slurm_fsm.clock import backoff
from slurm_fsm.errors import (
    AllocationFailed,
    AllocationVanished,
    CommandTimedOut,
    ContainerSupportMissing,
    ControllerUnreachable,
    JobNotFound,
    StateFileError,
)
from slurm_fsm.jobstate import JobState
from slurm_fsm.lease import AllocationInUse
from slurm_fsm.ownership import Ownership, new_nonce, request_of
from slurm_fsm.preflight import node_cpus
from slurm_fsm.state import AllocState
from slurm_fsm.step0 import effects
from slurm_fsm.step0.checks import require
from slurm_fsm.step0.context import Step0Context, Step0Memory, user_of, warn
from slurm_fsm.step0.table import Observation, State, owner_of, repo_tag
from slurm_fsm.step0.validate import complete_grant, replacing
from slurm_fsm.successor import SINGLETON

__all__ = [
    "allocate",
    "allocating",
    "release_orphans",
    "request_size",
    "salloc_log_tail",
    "to_replace",
]

#: what the work says and warns through (the driver's)
Say = Callable[[str], None]


def request_size(ctx: Step0Context) -> RequestSize:
    """What ``salloc`` asks for this spec, its CPUs per node from what the cluster
    says (:func:`slurm_fsm.preflight.node_cpus`: ``DefCpuPerGPU``, else the nodes'
    CPUs per GPU); step 0E and the warm successor ask alike."""
    return allocation_request_size(ctx.spec, node_cpus(ctx.spec, ctx.backend))


def release_orphans(ctx: Step0Context, mem: Step0Memory, user: str, warn: Say,
                    successors: Callable[[], Collection[str]]) -> set[str]:
    """0D: cancel this user's allocations of this checkout that no state file names
    and no running job of this checkout uses; the ids of those left alone because
    running jobs use them (held). ``successors``: the queued successor's id (its own
    state file names it)."""
    # 0D: orphans: this user's jobs with this checkout's tag (whatever their name, an
    # earlier alloc_job_name included) or untagged under our job name. One squeue of
    # this user's jobs; the name is not a filter, the tag decides.
    spec = ctx.spec
    held: set[str] = set()  # orphans left alone: running jobs of this checkout use them
    mem.adopt = None
    for job in ctx.backend.find_jobs(None, user):
        if job.job_id in mem.cancelled or job.job_id in mem.reused \
                or not job.state.is_live:
            continue  # already cancelled by us, another job of a recorded id, ending
        if spec.warm_successor and job.job_id in successors():
            continue  # the queued successor: its own state file names it
        owner = owner_of(job, user, spec)
        if owner is Ownership.OTHER_CHECKOUT and job.name == spec.job_name:
            mem.notes.append(f"allocation {job.job_id} has our job name but belongs to "
                             f"another checkout ({job.comment}); left alone")
        if not owner.ours:
            continue
        if _in_flight(ctx, job):
            mem.notes.append(
                f"allocation {job.job_id} has no state file yet, but another request "
                f"made it {job.elapsed} ago (req={request_of(job)}): a run on another "
                "host may be writing it; adopted, not cancelled")
            mem.adopt = mem.adopt or job.job_id
            held.add(job.job_id)  # never cancelled, even when it is too small
            continue
        try:
            effects.cancel_gated(ctx, job.job_id, "an orphan", wait=False)
        except AllocationInUse:
            mem.notes.append(f"allocation {job.job_id} has no state file but running "
                             "jobs of this checkout use it; left alone")
            held.add(job.job_id)
            continue
        mem.cancelled.add(job.job_id)
        ctx.say(f"Released orphaned allocation {job.job_id} - state file was missing.")
        warn(f"Released orphaned allocation {job.job_id} - state file was missing.")
    return held


def _in_flight(ctx: Step0Context, job: JobInfo) -> bool:
    """A job of ours with no state file that may be another run's, made a moment ago
    (its salloc answered, its state file not yet written: two login nodes without a
    shared lock; issue 28's race campaign): a job of the spec's name, of a request's
    nonce, pending or running for less than ``orphan_grace_s`` (default
    :data:`~slurm_fsm.step0.context.ORPHAN_GRACE_S`). Step 0E adopts it; an older one
    is an orphan."""
    return (job.name == ctx.spec.job_name and request_of(job) is not None
            and (job.elapsed.seconds or 0) < ctx.policy.orphan_grace_s)


def _track_pending(ctx: Step0Context, job_id: str, size: RequestSize) -> AllocState:
    """The state file of ``job_id`` from the moment it exists (nodelist not yet
    known); when it cannot be written the job is cancelled, never leaked."""
    # tracked from the moment it exists: a run interrupted while it is PENDING leaves
    # a state file, and the next run waits for it (0C) instead of leaking it
    spec, params = ctx.spec, ctx.spec.slurm_params
    pending = AllocState(
        job_id=job_id, nodelist="", partition=params.partition, account=params.account,
        nodes=size.nodes, gpus_per_node=size.gpus_per_node,
        docker_image=spec.docker_image, container_mounts=spec.mounts_text,
        time_limit=spec.alloc_time_limit.as_slurm(), installed=False,
    )
    try:
        ctx.store.write(pending)
    except OSError as exc:  # nothing may stay allocated that no file records
        effects.cancel_unleased(ctx, job_id)
        raise StateFileError(str(ctx.store.path), f"cannot be written "
                             f"({exc.strerror or exc}); allocation {job_id} was "
                             "cancelled so that it is not leaked") from exc
    return pending


def _judge_grant(ctx: Step0Context, alloc: AllocState, held: set[str], warn: Say) -> None:
    """What Slurm granted against what the job needs: a warning, or a failure when
    the backend gave back an allocation running jobs of this checkout hold."""
    job_id = alloc.job_id
    short = capacity_problems(alloc, ctx.spec)
    if short and job_id in held:
        # not Slurm's grant: the backend never makes a second allocation of this
        # checkout and gave back the one running jobs use (its state file was lost)
        raise AllocationFailed(
            ["salloc"], 1, "",
            f"allocation {job_id} is this checkout's (its state file was lost) and "
            f"running jobs of this checkout use it, but it is smaller than this job "
            f"needs: {'; '.join(short)}. It was not used; its state file is written "
            "again, and the next run replaces it once those jobs end")
    if short:
        warn(f"Slurm granted allocation {job_id} less than the job needs: "
             f"{'; '.join(short)}")


def _request(ctx: Step0Context, size: RequestSize, user: str) -> AllocationRequest:
    """0E's request: the spec's partition, account, shape and time, this checkout's
    tag, a fresh nonce; with ``warm_successor`` a singleton (one of the pair runs)."""
    spec, params = ctx.spec, ctx.spec.slurm_params
    return AllocationRequest(
        partition=params.partition,
        account=params.account,
        nodes=size.nodes,
        time_limit=spec.alloc_time_limit,
        job_name=spec.job_name,
        log_path=ctx.salloc_log,
        gpus_per_node=size.gpus_per_node,
        user=user,
        ntasks_per_node=size.ntasks_per_node,
        comment=repo_tag(spec),
        nonce=new_nonce(),
        dependency=SINGLETON if spec.warm_successor else None,
    )


def allocate(ctx: Step0Context, mem: Step0Memory, user: str, warn: Say,
             successors: Callable[[], Collection[str]]) -> str:
    """0D then 0E: the orphans, then a new allocation (or another run's, a moment old,
    adopted), RUNNING, in ``mem.alloc`` and the state file. The transition's summary."""
    spec = ctx.spec
    if spec.docker_image is not None and not ctx.backend.has_container_support():
        raise ContainerSupportMissing(
            f"docker_image {spec.docker_image!r} is set but this Slurm has no pyxis "
            "(srun --help lacks --container-image); nothing was allocated"
        )
    require(ctx, mem, user, warn)  # before salloc
    held = release_orphans(ctx, mem, user, warn, successors)
    size = request_size(ctx)
    ctx.say(
        f"No reusable allocation found. Allocating {size.nodes} node(s) on partition "
        f"{spec.slurm_params.partition} for {spec.alloc_time_limit}, "
        f"{size.ntasks_per_node} CPU(s) per node ({size.cpus_from})."
    )
    # 0E
    ctx.salloc_log.parent.mkdir(parents=True, exist_ok=True)
    request = _request(ctx, size, user)
    mem.salloc_requested = True
    if mem.adopt:  # another request's, a moment old (0D): never a second one
        job_id = mem.adopt
        ctx.say(f"Adopting allocation {job_id}, made a moment ago by another run.")
    else:
        job_id = _request_allocation(ctx, request, warn)
    pending = _track_pending(ctx, job_id, size)
    try:
        info = _wait_running(ctx, mem, job_id)
    except AllocationFailed:
        effects.delete_state(ctx.store)  # the job is gone or was cancelled: nothing to track
        raise
    # the state file holds what Slurm GRANTED (it may differ from the request); when
    # it cannot be read now, the next run's validation reads it
    mem.alloc = complete_grant(ctx, mem, attrs.evolve(
        pending, nodelist=info.nodelist, installed=spec.docker_image is None,
        submit_time=info.submit_time or None, request=request_of(info)), info)
    mem.grant_unsaved = False
    ctx.store.write(mem.alloc)
    _judge_grant(ctx, mem.alloc, held, warn)
    if spec.docker_image is None:
        mem.notes.append(
            "no docker_image: container import, mount warm-up and install skipped")
    return f"allocation {job_id} RUNNING on {info.nodelist}"


def _request_allocation(ctx: Step0Context, request: AllocationRequest, warn: Say) -> str:
    """0E's salloc. An answer lost to the controller (unreachable, timed out) is
    asked again with the *same* request: its nonce makes the backend adopt the job
    the first attempt made, never a second one."""
    attempt = 0
    while True:
        try:
            return ctx.backend.allocate(request)
        except (ControllerUnreachable, CommandTimedOut) as exc:
            attempt += 1
            if attempt > ctx.policy.unreachable_retries:
                raise
            warn(f"the allocation request's answer was lost ({exc}); asking "
                 f"again with the same request (req={request.nonce}), which "
                 "adopts its job if Slurm made one")
            ctx.clock.sleep(backoff(attempt - 1, first=1.0, cap=15.0))


def _never_running(ctx: Step0Context, info: JobInfo, waited: float) -> None:
    """A PENDING new allocation that can never start, or has waited longer than
    ``alloc_wait_s``: cancelled (never left to start unused), AllocationFailed."""
    job_id, wait_s = info.job_id, ctx.policy.alloc_wait_s
    if info.never_starts:
        effects.cancel_unleased(ctx, job_id)
        raise AllocationFailed(
            ["salloc"], 1, "",
            f"allocation {job_id} can never start: Slurm keeps it PENDING with "
            f"reason {info.reason} (the request exceeds a limit of its partition, "
            "account or QOS); cancelled. Ask for less (nodes, time) or another "
            "partition or account",
        )
    if waited >= wait_s:
        effects.cancel_unleased(ctx, job_id)
        raise AllocationFailed(
            ["salloc"], 1, "",
            f"allocation {job_id} still {info.state} after {wait_s:g} s "
            f"(reason {info.reason or 'unknown'}); cancelled so that it does not "
            "start later unused",
        )


def _wait_running(ctx: Step0Context, mem: Step0Memory, job_id: str) -> JobInfo:
    """Poll the new allocation until RUNNING: fast at first, then every 10 s.

    A pending reason that can never clear (:attr:`JobInfo.never_starts`) ends the
    wait at once; a long wait says why after ``pending_report_s``.
    """
    clock, policy = ctx.clock, ctx.policy
    started = clock.now()
    attempt = 0
    reported = False
    pending_reason: str | None = None  # None: never seen PENDING
    while True:
        try:
            info = ctx.backend.query_job(job_id)
        except JobNotFound:
            raise AllocationVanished(
                ["salloc"], 1, salloc_log_tail(ctx),
                f"allocation {job_id} disappeared before it started",
            ) from None
        if info.state.is_running and info.nodelist:
            mem.job = (info, clock.now())
            if attempt and pending_reason is not None:  # it waited in the queue
                mem.notes.append(f"allocation {job_id} was PENDING (reason "
                                 f"{pending_reason or 'unknown'}) for "
                                 f"{clock.now() - started:.1f} s before it ran")
            return info
        if not info.state.is_pending:
            vanished = info.state is JobState.CANCELLED or info.state.is_ending
            raise (AllocationVanished if vanished else AllocationFailed)(
                ["salloc"], 1, salloc_log_tail(ctx),
                f"allocation {job_id} ended as {info.state} before it started",
            )
        waited = clock.now() - started
        pending_reason = info.reason or ""
        _never_running(ctx, info, waited)
        if not reported and waited >= policy.pending_report_s:
            reported = True
            ctx.say(f"allocation {job_id} pending for {waited:.0f} s: reason "
                    f"{info.reason or 'unknown'}, expected start "
                    f"{info.start_time or '?'}; still waiting (up to "
                    f"{policy.alloc_wait_s:g} s)")
        clock.sleep(backoff(attempt, first=0.1, cap=10.0))
        attempt += 1


def salloc_log_tail(ctx: Step0Context) -> str:
    """The last 4,000 bytes of salloc's log ('' when it cannot be read)."""
    try:  # never through a link planted in the shared work_dirs
        with files.open_for_reading(ctx.salloc_log) as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4000))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _warner(ctx: Step0Context, mem: Step0Memory) -> Say:
    return lambda text: warn(ctx, mem, text)


def to_replace(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
               last: Observation) -> str:
    """Expiring / TooShort / Incompatible's work: a spec the cluster cannot run stops
    here (:func:`require`: nothing cancelled); else why the allocation is replaced
    (:func:`slurm_fsm.step0.validate.replacing`, ``why``: the rules the edge was taken
    for) kept in ``mem.replace_why`` for the edge's CANCEL, which goes through the
    lease gate. The transition's summary."""
    assert mem.alloc is not None
    require(ctx, mem, user_of(ctx, mem), _warner(ctx, mem))
    mem.replace_why = replacing(ctx, mem, state, why, last.expected)
    return f"replacing allocation {mem.alloc.job_id} ({mem.replace_why})"


def _successor_ids(ctx: Step0Context, mem: Step0Memory) -> set[str]:
    """The queued warm successor's job (its own state file names it: never an orphan)."""
    from slurm_fsm import handoff  # the warm successor's only (issue 42)

    return handoff.successor_ids(ctx, mem)


def allocating(ctx: Step0Context, mem: Step0Memory) -> str:
    """The Allocating state's work: 0D-0E (:func:`allocate`)."""
    return allocate(ctx, mem, user_of(ctx, mem), _warner(ctx, mem),
                    lambda: _successor_ids(ctx, mem))
