"""Step 0A's work: release this checkout's allocation (``release()``).

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1): it is handed the machine's
:class:`~slurm_fsm.step0.context.Step0Context`, never the machine, and returns what it
did as one :class:`Released`; the machine keeps its own memory (the allocation, the
released id) and does the warm successor's part (:func:`slurm_fsm.handoff.release_successor`).

0A's cancel is this work's own, not an edge's effect: releasing *is* cancelling. It
goes through the lease gate (:func:`slurm_fsm.step0.effects.cancel_gated`: never under
another run's job) and only after the allocation is found to be this checkout's:

* with a state file: its job, when Slurm's job of that id is the one recorded (same
  submit time) and ours (:func:`~slurm_fsm.step0.table.owner_of`); another checkout's
  raises :class:`~slurm_fsm.errors.NotOurJobError` and the state file is kept;
* without one (lost or corrupt): this checkout's allocations by their tag, and only
  by their tag (an untagged one of the procedure's job name may be another checkout's,
  following the procedure by hand).

Then the state file and salloc's log are deleted
(:func:`slurm_fsm.step0.effects.drop_files`).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from slurm_fsm.backend import JobInfo
from slurm_fsm.errors import JobNotFound, NotOurJobError, StateFileError
from slurm_fsm.ownership import Ownership, describe
from slurm_fsm.state import AllocState
from slurm_fsm.step0 import effects
from slurm_fsm.step0.context import Step0Context, Step0Memory, user_of, warn
from slurm_fsm.step0.table import State, owner_of, repo_tag, same_generation, state_job_names

__all__ = ["Released", "release", "releasing"]


@attrs.frozen(kw_only=True)
class Released:
    """What 0A did."""

    #: the transition's reason, in words
    summary: str
    #: the allocation released (the first of those found by tag); None: none
    job_id: str | None
    #: the state file named it (then its warm successor is released too)
    from_state_file: bool


def release(ctx: Step0Context, alloc: AllocState | None, *, user: Callable[[], str],
            warn: Callable[[str], None]) -> Released:
    """0A on ``alloc`` (the state file's allocation; None: lost or unreadable)."""
    if alloc is None:
        return _release_by_tag(ctx, user(), warn)
    job_id = alloc.job_id
    try:
        info: JobInfo | None = ctx.backend.query_job(job_id)
    except JobNotFound:
        info = None
    if info is not None and not same_generation(alloc, info):
        warn(effects.reused_id(alloc, info))
        info = None  # not the allocation the state file recorded: nothing to cancel
    if info is not None:
        who = user()
        owner = owner_of(info, who, ctx.spec, state_job_names(alloc, ctx.spec))
        if not owner.ours:
            raise NotOurJobError(
                job_id,
                f"it is {describe(info, owner)}, not this checkout's "
                f"({repo_tag(ctx.spec)}, user {who!r}); the state file "
                f"{ctx.store.path} is kept",
            )
        effects.cancel_gated(ctx, job_id, "releasing it")
    effects.drop_files(ctx, [job_id] if info is not None else [])
    ctx.say(f"Allocation {job_id} released.")
    return Released(summary=f"Allocation {job_id} released.", job_id=job_id,
                    from_state_file=True)


def _release_by_tag(ctx: Step0Context, user: str, warn: Callable[[str], None]
                    ) -> Released:
    """A lost or corrupt state file: this checkout's allocation by its tag, and only by
    its tag."""
    found = [j.job_id for j in ctx.backend.find_jobs(None, user)
             if j.state.is_live and owner_of(j, user, ctx.spec) is Ownership.TAGGED]
    for job_id in found:  # never under another run's job
        effects.cancel_gated(ctx, job_id, "releasing it")
    effects.drop_files(ctx, found)
    if not found:
        ctx.say("No allocation to release.")
        return Released(summary="no allocation to release", job_id=None,
                        from_state_file=False)
    text = (f"Allocation {', '.join(found)} released (found by this checkout's tag; "
            "the state file was missing or unreadable).")
    ctx.say(text)
    return Released(summary=text, job_id=found[0], from_state_file=False)


def releasing(ctx: Step0Context, mem: Step0Memory, state: State) -> str:
    """The ``release`` trigger's work: from NoState, the state file read first; 0A on
    its allocation (:func:`release`), then the queued warm successor's
    (:func:`slurm_fsm.handoff.release_successor`). ``mem.released_job_id``: the
    allocation cancelled. The transition's summary."""
    from slurm_fsm import handoff  # a release's only (issue 42)

    def say(text: str) -> None:
        warn(ctx, mem, text)

    if state is State.NoState:
        try:
            mem.alloc = ctx.store.read()
        except StateFileError as exc:
            say(f"{exc}; nothing to cancel from it")
            mem.alloc = None
    done = release(ctx, mem.alloc, user=lambda: user_of(ctx, mem), warn=say)
    if not done.from_state_file:
        mem.released_job_id = done.job_id or mem.released_job_id
        return done.summary
    mem.alloc = None
    mem.released_job_id = done.job_id
    # a queued warm successor goes too
    succ = handoff.release_successor(ctx, mem)
    if succ is not None:
        return f"Allocation {done.job_id} released (and its successor {succ})."
    return done.summary
