"""Which room does the work of a trigger: the observation the driver fires the table with.

Theory of operation
-------------------

The driver (:class:`~slurm_fsm.machine.AllocationMachine`) fires a trigger in three
moves: an edge of the trigger must leave the current state, :func:`observe` does the
state's work in its room and returns one frozen
:class:`~slurm_fsm.step0.table.Observation`, then ``transitions`` takes the first edge
whose conditions hold on it. This module is the one place that says which room works
for which trigger and state (issue 40 item 1):

* ``start``: :func:`slurm_fsm.step0.validate.read_state_file` (the state file, no
  Slurm call; with a warm successor, whether one is queued);
* ``advance`` in Validating: :func:`slurm_fsm.step0.validate.validate` (0C; with a
  warm successor, :func:`slurm_fsm.handoff.with_successor`); in
  Expiring, TooShort, Incompatible: :func:`slurm_fsm.step0.allocate.to_replace`; in
  Allocating: :func:`slurm_fsm.step0.allocate.allocating` (0D-0E); in Importing and
  Installing: :mod:`slurm_fsm.step0.container` (loaded only then); in the warm successor's
  states: :mod:`slurm_fsm.handoff` (loaded only then, issue 42);
* ``release``: :func:`slurm_fsm.step0.release.releasing` (0A); ``run``:
  :func:`slurm_fsm.step0.checks.preflight` (step 1); ``finish``: what the driver knows
  (:func:`seen`: no Slurm question, the hand-off's ``replaced`` with a warm successor).

A room returns either its observation or a summary in words, which :func:`seen` makes
an observation of what the memory holds.

:data:`EFFECT_WORK` is, in the same way, the one table of the work of each effect an
edge carries: :mod:`slurm_fsm.step0.effects`' ``on_<effect>``, and the warm
successor's two in :mod:`slurm_fsm.handoff` (which cancels through the effects room;
the table sits here, above both, so the import graph has no circle).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from slurm_fsm.step0 import allocate, checks, effects, release, validate
from slurm_fsm.step0.context import Step0Context, Step0Memory, user_of, warn
from slurm_fsm.step0.table import Effect, Observation, State

__all__ = ["EFFECT_WORK", "observe", "seen"]

#: a room's work in an in-progress state: (ctx, mem, state, why the edge into it was
#: taken, the last observation) -> the transition's summary
StateWork = Callable[[Step0Context, Step0Memory, State, str, Observation], str]


def seen(ctx: Step0Context, mem: Step0Memory, trigger: str, state: State, summary: str,
         **fields: Any) -> Observation:
    """An observation of step 0's own knowledge (no Slurm question asked)."""
    return Observation(trigger=trigger, source=state, at=ctx.clock.now(), alloc=mem.alloc,
                       info=mem.job[0] if mem.job else None, user=mem.user or "",
                       summary=summary, **fields)


def observe(ctx: Step0Context, mem: Step0Memory, trigger: str, state: State,
            last: Observation, why: str, kwargs: Mapping[str, Any]) -> Observation:
    """The work of ``trigger`` in ``state`` (``last``: the observation before it;
    ``why``: the rules the edge into ``state`` was taken for), as one observation."""
    if trigger == "start":
        return _starting(ctx, mem, state)
    if trigger == "advance" and state is State.Validating:
        return _validating(ctx, mem, last)
    if trigger == "advance" and state is State.AwaitingSuccessor:
        from slurm_fsm import handoff  # the warm successor's only (issue 42)

        return handoff.await_successor(ctx, mem, last)
    if trigger == "finish":
        return seen(ctx, mem, trigger, state,
                    str(kwargs.get("reason", "") or "job finished"),
                    gone=bool(kwargs.get("allocation_gone", False)),
                    replaced=_replaced(ctx, mem))
    if trigger == "release":
        summary = release.releasing(ctx, mem, state)
    elif trigger == "run":
        summary = checks.preflight(ctx, mem)
    else:
        summary = _ADVANCE[state](ctx, mem, state, why, last)
    return seen(ctx, mem, trigger, state, summary)


def _starting(ctx: Step0Context, mem: Step0Memory, source: State) -> Observation:
    """``start``'s work: :func:`slurm_fsm.step0.validate.read_state_file`; with
    ``warm_successor`` and no allocation named, whether a successor is queued (then
    ``successor="pending"``)."""
    obs = validate.read_state_file(ctx, mem, source, lambda text: warn(ctx, mem, text))
    if ctx.spec.warm_successor and mem.alloc is None:
        from slurm_fsm import handoff  # the warm successor's only (issue 42)

        if handoff.queued_successor(ctx, mem):
            obs = attrs.evolve(obs, successor="pending")
    return obs


def _validating(ctx: Step0Context, mem: Step0Memory, last: Observation) -> Observation:
    """Validating's work: 0C (:func:`slurm_fsm.step0.validate.validate`), then the warm
    successor's part (:func:`slurm_fsm.handoff.with_successor`)."""
    obs = validate.validate(ctx, mem, last, user=lambda: user_of(ctx, mem),
                   estimate=lambda: validate.estimate(ctx, mem))
    if obs.info is None or not ctx.spec.warm_successor:
        return obs
    from slurm_fsm import handoff  # the warm successor's only (issue 42)

    return handoff.with_successor(ctx, mem, obs, obs.info, validate.estimate(ctx, mem))


def _replaced(ctx: Step0Context, mem: Step0Memory) -> bool:
    """At ``finish``: the state file names another allocation (a warm successor's)."""
    if not ctx.spec.warm_successor:
        return False
    from slurm_fsm import handoff  # the warm successor's only (issue 42)

    return handoff.replaced(ctx, mem)


def _allocating(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
                last: Observation) -> str:
    return allocate.allocating(ctx, mem)


def _setting_up(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
                last: Observation) -> str:
    """Importing / Installing (:mod:`slurm_fsm.step0.container`, loaded here: a warm
    run, which sets no container up, never loads it, the setup room nor the setup key)."""
    from slurm_fsm.step0 import container

    work = container.importing if state is State.Importing else container.installing
    return work(ctx, mem)


def _queueing(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
              last: Observation) -> str:
    from slurm_fsm import handoff  # the warm successor's only (issue 42)

    return handoff.queue_successor(ctx, mem, last)


def _switching(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
               last: Observation) -> str:
    from slurm_fsm import handoff  # the warm successor's only (issue 42)

    return handoff.switch(ctx, mem)


#: ``advance``'s work in each in-progress state but Validating and AwaitingSuccessor
#: (which observe more than a summary)
_ADVANCE: dict[State, StateWork] = {
    State.Expiring: allocate.to_replace,
    State.TooShort: allocate.to_replace,
    State.Incompatible: allocate.to_replace,
    State.Allocating: _allocating,
    State.Importing: _setting_up,
    State.Installing: _setting_up,
    State.QueueingSuccessor: _queueing,
    State.Switching: _switching,
}


def _on_drop_successor(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                       state: State) -> bool:
    from slurm_fsm import handoff  # the warm successor's edges only (issue 42)

    return handoff.drop_successor(ctx, mem)


def _on_release_drained(ctx: Step0Context, mem: Step0Memory, obs: Observation,
                        state: State) -> bool:
    from slurm_fsm import handoff  # the warm successor's edges only (issue 42)

    alloc = mem.alloc
    drained = (mem.handoff.drained if state is State.Switching
               else alloc.job_id if alloc else None)
    return handoff.release_drained(ctx, mem, drained)


#: The work of each effect an edge names: the one place that says what an effect does;
#: every :class:`~slurm_fsm.step0.table.Effect` has a row (a test checks). True when it
#: did something (the transition's reason names it).
EFFECT_WORK: dict[Effect, effects.EffectWork] = {
    Effect.DROP_STATE_FILE: effects.on_drop_state_file,
    Effect.CANCEL: effects.on_cancel,
    Effect.RECORD_FAILURE: effects.on_record_failure,
    Effect.COMPLETE_NODELIST: effects.on_complete_nodelist,
    Effect.WARN_NOT_OURS: effects.on_warn_not_ours,
    Effect.WARN_EXPIRING: effects.on_warn_expiring,
    Effect.WARN_TOO_SHORT: effects.on_warn_too_short,
    Effect.DROP_SUCCESSOR: _on_drop_successor,
    Effect.RELEASE_DRAINED: _on_release_drained,
}
