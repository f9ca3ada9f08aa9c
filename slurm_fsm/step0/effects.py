"""The only place step 0 cancels an allocation or deletes a state file.

Theory of operation
-------------------

Step 0's destructive acts, each named for why it may happen (issue 40 item 1): the
driver (:mod:`slurm_fsm.machine`), the hand-off work (:mod:`slurm_fsm.handoff`) and
every room of :mod:`slurm_fsm.step0` call these and never ``backend.cancel``,
:func:`slurm_fsm.lease.cancel_allocation`, ``StateStore.delete`` or an ``unlink``
themselves (``tests/test_step0_package.py`` scans for it). A reader who asks "what
can step 0 destroy, and when?" reads this module.

* An allocation another run may use is cancelled through the lease gate
  (:func:`cancel_gated`: a closing marker, then a last look for another run's lease),
  the CANCEL effect's :func:`cancel_replaced` included.
* A whole allocation on which no lease can exist (a new one still PENDING, one whose
  state file could not be written, a successor that never started) is cancelled at
  once (:func:`cancel_unleased`).
* A state file is deleted whole (:func:`delete_state`), or only while it names the
  allocation meant (:func:`delete_state_if_names`, never waiting for its lock);
  DROP_STATE_FILE is :func:`drop_state_file`, a release's files :func:`drop_files`,
  a successor's :func:`forget_successor_files` (or, switched to, its record:
  :func:`forget_successor_record`).

Every :class:`~slurm_fsm.step0.table.Effect` an edge carries has its work here
(``on_<effect>``), one function of the context, the memory, the observation the edge
was chosen on and the state it leaves; the warm successor's two are the hand-off's
(:func:`slurm_fsm.handoff.drop_successor`, :func:`slurm_fsm.handoff.release_drained`,
which cancel through this module). :data:`slurm_fsm.step0.work.EFFECT_WORK` is the
whole table the driver runs the chosen edge's effects through (this module imports no
room above it: the import graph has no circle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from slurm_fsm.backend import JobInfo
from slurm_fsm.duration import Duration
from slurm_fsm.errors import StateFileError
from slurm_fsm.lease import cancel_allocation
from slurm_fsm.ownership import describe
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0.checks import require
from slurm_fsm.step0.context import Step0Context, Step0Memory, user_of, warn
from slurm_fsm.step0.outcome import Failure
from slurm_fsm.step0.table import (
    CONDITIONS,
    EXPIRY_MARGIN_S,
    Observation,
    State,
    owner_of,
    repo_tag,
    same_generation,
    state_job_names,
)
from slurm_fsm.successor import clear_successor

__all__ = [
    "EffectWork",
    "cancel_gated",
    "cancel_replaced",
    "cancel_unleased",
    "delete_state",
    "delete_state_if_names",
    "drop_files",
    "drop_state_file",
    "forget_successor_files",
    "forget_successor_record",
    "on_cancel",
    "on_complete_nodelist",
    "on_drop_state_file",
    "on_record_failure",
    "on_warn_expiring",
    "on_warn_not_ours",
    "on_warn_too_short",
    "reused_id",
]


def cancel_gated(ctx: Step0Context, job_id: str, why: str, *, wait: bool = True) -> None:
    """Cancel ``job_id`` through the lease gate (:func:`slurm_fsm.lease.cancel_allocation`:
    never under another run's job; ``wait=False``: refuse at once with
    :class:`~slurm_fsm.lease.AllocationInUse` instead of waiting for its leases)."""
    cancel_allocation(ctx.leases, ctx.backend, job_id, why, wait=wait)


def cancel_unleased(ctx: Step0Context, job_id: str) -> None:
    """Cancel a whole allocation on which no lease can exist: this run's new one still
    PENDING (it never starts, or waited too long), one whose state file could not be
    written (no run knows it: never leaked), a successor that never started."""
    ctx.backend.cancel(job_id)


def cancel_replaced(ctx: Step0Context, mem: Step0Memory, job_id: str, why: str) -> None:
    """The effect CANCEL: the state file's allocation, replaced (Expiring, TooShort,
    Incompatible), through the lease gate; remembered (never an orphan to cancel
    again) and in the notes."""
    ctx.say(f"Cancelling allocation {job_id} ({why}).")
    cancel_gated(ctx, job_id, f"replacing it ({why})")
    mem.cancelled.add(job_id)
    mem.notes.append(f"allocation {job_id} replaced ({why})")


def delete_state(store: StateStore) -> None:
    """Delete the state file of ``store`` (and its record), whatever it names."""
    store.delete()


def delete_state_if_names(store: StateStore, job_id: str) -> bool:
    """Delete the state file of ``store`` only while it names ``job_id``, never waiting
    for its lock; False when it was left (another allocation, or the lock is held)."""
    return store.delete_if_names(job_id)


def forget_successor_files(store: StateStore, record: Path) -> None:
    """Drop a warm successor's state file and its record (no job is cancelled)."""
    store.delete()
    clear_successor(record)


def forget_successor_record(record: Path) -> None:
    """Drop a warm successor's record (its state file became the state file)."""
    clear_successor(record)


def drop_state_file(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                    alloc: AllocState | None) -> None:
    """The effect DROP_STATE_FILE: say why, then drop only that allocation's file and
    forget it (``mem.alloc``). Never cancels."""
    job_id = alloc.job_id if alloc else "?"
    if obs.gone and obs.info is None:
        ctx.say(f"Allocation {job_id} no longer exists; dropping the state file.")
    elif obs.info is not None and not CONDITIONS["job_is_ours"](obs, ctx.spec):
        ctx.say(f"Job {job_id} is not ours; dropping the state file.")
    elif obs.info is not None:
        ctx.say(f"Allocation {job_id} is {obs.info.state}; dropping the state file.")
    else:
        ctx.say(f"Dropping the state file of allocation {job_id}.")
    # only the file of that allocation, and never waiting for the lock: after a
    # job (finish), another run's step 0 may hold it, and may have written a new
    # allocation there; then its own validation drops this one's file
    if alloc is None:  # a corrupt file, in step 0 (the lock is held)
        delete_state(ctx.store)
    elif not delete_state_if_names(ctx.store, alloc.job_id):
        mem.notes.append(f"the state file was left for the next run's validation "
                         f"(another run holds its lock or it names another "
                         f"allocation than {job_id})")
    mem.alloc = None


def drop_files(ctx: Step0Context, cancelled: Sequence[str]) -> None:
    """After a release (0A): remove the state file and salloc's log; a failure says
    what was already cancelled (the allocation is gone even though its file is not)."""
    try:
        ctx.store.delete()
        ctx.salloc_log.unlink(missing_ok=True)
    except OSError as exc:
        done = (f"allocation {', '.join(cancelled)} was cancelled, but "
                if cancelled else "")
        raise StateFileError(str(ctx.store.path), f"{done}the state file cannot be "
                             f"deleted ({exc.strerror or exc}); delete it by hand") from exc


# The work of each effect an edge carries ---------------------------------------------
#: one effect's work: True when it did something (False: no allocation to cancel, a
#: nodelist already complete, no job to warn about); ``state``: the state the edge leaves
EffectWork = Callable[[Step0Context, Step0Memory, Observation, State], bool]


def on_drop_state_file(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                        state: State) -> bool:
    """DROP_STATE_FILE: :func:`drop_state_file` of the state file's allocation."""
    drop_state_file(ctx, mem, obs, mem.alloc)
    return True


def on_cancel(ctx: Step0Context, mem: Step0Memory, obs: Observation, state: State) -> bool:
    """CANCEL (through the lease gate: :func:`cancel_replaced`), never before the
    pre-flight's questions that need no allocation
    (:func:`slurm_fsm.step0.checks.require`: a spec the cluster cannot run fails
    with the allocation left as it was)."""
    if mem.alloc is None:  # nothing the state file names: nothing to cancel
        return False
    require(ctx, mem, user_of(ctx, mem), lambda text: warn(ctx, mem, text))
    cancel_replaced(ctx, mem, mem.alloc.job_id, mem.replace_why or state.value)
    return True


def on_record_failure(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                       state: State) -> bool:
    """RECORD_FAILURE: the observation's failure (or summary) as ``mem.failure``."""
    mem.failure = Failure(state.value, obs.failure or obs.summary,
                          state_file_kept=ctx.store.exists())
    return True


def on_complete_nodelist(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                          state: State) -> bool:
    """COMPLETE_NODELIST: the grant (nodelist, CPUs) written to a state file saved
    while PENDING; False when it was complete."""
    alloc, info = mem.alloc, obs.info
    if alloc is None or not (mem.grant_unsaved or (
            not alloc.nodelist and info is not None and info.nodelist)):
        return False
    # written while PENDING by a run that was interrupted (or by an older version
    # without the grant): complete it
    if not alloc.nodelist and info is not None:
        alloc = mem.alloc = attrs.evolve(alloc, nodelist=info.nodelist)
    mem.grant_unsaved = False
    ctx.store.write(alloc)
    return True


def on_warn_not_ours(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                      state: State) -> bool:
    """WARN_NOT_OURS: why the state file's job is left alone (an id Slurm gave to
    another job, or another user's or checkout's job)."""
    alloc, spec = mem.alloc, ctx.spec
    if obs.info is None:  # no job row: nobody's job to describe
        return False
    if not same_generation(alloc, obs.info):
        warn(ctx, mem, reused_id(alloc, obs.info))
        mem.reused.add(obs.info.job_id)  # nor cancelled as an orphan (0D)
        return True
    owner = owner_of(obs.info, obs.user, spec, state_job_names(alloc, spec))
    warn(ctx, mem,
         f"state file names job {obs.info.job_id}, but it is not ours: it is "
         f"{describe(obs.info, owner)}, and this checkout is {repo_tag(spec)} of "
         f"user {obs.user!r}; it is left alone (never reused, never cancelled) and the "
         "state file is dropped")
    return True


def on_warn_expiring(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                      state: State) -> bool:
    """WARN_EXPIRING: the allocation has <= 5 min left."""
    info = obs.info
    if info is None:
        return False
    warn(ctx, mem, f"Allocation expiring soon: {info.job_id} has {info.time_left} left.")
    return True


def on_warn_too_short(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                       state: State) -> bool:
    """WARN_TOO_SHORT: the job does not fit the time left; the allocation is replaced."""
    if obs.info is None:
        return False
    warn(ctx, mem, f"Allocation {obs.info.job_id} has {obs.info.time_left} left; the job "
         f"{obs.expected} and needs {Duration.of_seconds(EXPIRY_MARGIN_S)} more of "
         "margin: it is not started on it; the allocation is replaced once no other "
         "run's job uses it.")
    return True


def reused_id(alloc: AllocState | None, info: JobInfo) -> str:
    """The warning for a state file whose job id Slurm gave to another job."""
    return (f"state file names job {info.job_id} submitted at "
            f"{alloc.submit_time if alloc else '?'}, but Slurm's job {info.job_id} was "
            f"submitted at {info.submit_time}: the id was reused by another job; it is "
            "left alone (never reused, never cancelled) and the state file is dropped")
