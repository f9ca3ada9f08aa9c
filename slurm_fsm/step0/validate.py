"""Step 0B-0C's work: read the state file, validate its allocation, say why it is replaced.

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1), in the style of
:mod:`slurm_fsm.step0.release`: functions of the driver's
:class:`~slurm_fsm.step0.context.Step0Context` and
:class:`~slurm_fsm.step0.context.Step0Memory`, never of the machine. Each returns the
frozen :class:`~slurm_fsm.step0.table.Observation` (or the summary) the driver fires
the table with; none decides an edge, cancels or deletes.

* :func:`read_state_file` (``start``): can the state file be written, what does it name
  (no Slurm call).
* :func:`validate` (0C): one ``squeue`` of the state file's job (in ``run_many``, a
  sibling's answer at most a second old, :mod:`slurm_fsm.sharedview`), with the
  unreachable and PENDING backoffs between tries; an allocation written while PENDING
  is completed with what Slurm granted (:func:`complete_grant`), judged against the
  job's expected duration (:func:`estimate`, read once). The warm successor's part is
  :mod:`slurm_fsm.step0.work`'s (this module imports no hand-off).
* :func:`replacing` (Expiring, TooShort, Incompatible): why the allocation is replaced,
  in words; the edge's CANCEL does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from slurm_fsm import sharedview
from slurm_fsm.backend import JobInfo
from slurm_fsm.capacity import with_grant
from slurm_fsm.clock import backoff
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    BackendError,
    CommandTimedOut,
    ControllerUnreachable,
    JobNotFound,
    StateFileError,
)
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.context import Step0Context, Step0Memory
from slurm_fsm.step0.table import (
    CONDITIONS,
    EXPIRY_MARGIN_S,
    Observation,
    State,
    remaining_after,
)
from slurm_fsm.successor import parity_names

if TYPE_CHECKING:  # the run history is the caller's (the context's); its types only
    from slurm_fsm.history import Estimate

__all__ = [
    "complete_grant",
    "estimate",
    "in_batch",
    "info_now",
    "job_names",
    "query_job",
    "read_state_file",
    "replacing",
    "validate",
]


def read_state_file(ctx: Step0Context, mem: Step0Memory, source: State,
                    warn: Callable[[str], None]) -> Observation:
    """``start``: refuse a state file that cannot be written (before anything is
    allocated), then read it into ``mem.alloc``; a corrupt one is warned about and
    handled like a missing one. No Slurm call."""
    store = ctx.store
    view = sharedview.view_of(ctx.backend)  # run_many: a sibling's proof, 1 s old
    problem = (store.writable_problem() if view is None else
               view.writable_problem(str(store.path), store.writable_problem))
    if problem is not None:
        # checked before anything is allocated: an allocation whose state file cannot
        # be written would be leaked by every run
        raise StateFileError(str(store.path), f"{problem}; the state file cannot "
                             "be written, so nothing was allocated")
    read_problem = ""
    try:
        mem.alloc = store.read()
    except StateFileError as exc:
        mem.alloc = None
        read_problem = str(exc)
        warn(f"{exc}; handled like a missing state file")
    summary = (f"state file names allocation {mem.alloc.job_id}" if mem.alloc
               else read_problem or "no state file")
    return Observation(trigger="start", source=source, at=ctx.clock.now(),
                       alloc=mem.alloc, state_file_problem=read_problem, summary=summary)


def _between_tries(ctx: Step0Context, mem: Step0Memory, last: Observation) -> None:
    """0C asked again: back off after an unreachable controller or a PENDING job."""
    if last.source is State.Validating and last.unreachable:
        ctx.clock.sleep(backoff(mem.attempt - 1, first=1.0, cap=15.0))
    elif last.source is State.Validating and CONDITIONS["job_pending"](last, ctx.spec):
        ctx.clock.sleep(backoff(mem.pending_polls, first=0.5, cap=10.0))
        mem.pending_polls += 1


def _unreachable(ctx: Step0Context, mem: Step0Memory, base: Observation,
                 exc: Exception) -> Observation:
    job_id = base.alloc.job_id if base.alloc else "?"
    mem.attempt += 1
    return attrs.evolve(
        base, at=ctx.clock.now(), unreachable=True, error=str(exc),
        retries_left=max(0, ctx.policy.unreachable_retries + 1 - mem.attempt),
        summary=f"controller unreachable ({exc}); attempt {mem.attempt}",
        failure=f"Slurm controller unreachable while validating allocation {job_id}: "
                f"{exc}. The state file is kept; run again when the controller is "
                "back.",
    )


def validate(ctx: Step0Context, mem: Step0Memory, last: Observation, *,
             user: Callable[[], str], estimate: Callable[[], Estimate]) -> Observation:
    """0C: one ``squeue`` of the state file's job. Decides nothing: it observes."""
    assert mem.alloc is not None
    job_id = mem.alloc.job_id
    _between_tries(ctx, mem, last)
    base = Observation(trigger="advance", source=State.Validating, alloc=mem.alloc)
    try:
        info, asked_at = query_job(ctx, mem, job_id)
    except JobNotFound:
        return attrs.evolve(base, at=ctx.clock.now(), gone=True,
                            summary=f"allocation {job_id} is gone")
    except (ControllerUnreachable, CommandTimedOut) as exc:
        return _unreachable(ctx, mem, base, exc)
    now = ctx.clock.now()  # the one reading every time of this observation uses
    mem.attempt = 0
    mem.job = (info, now if asked_at is None else asked_at)
    if info.state.is_running and info.nodelist and (
            not mem.alloc.nodelist or mem.alloc.cpus_per_node is None):
        # written while PENDING, or by an older version: complete it with what Slurm
        # granted before anything is judged on it (the COMPLETE_NODELIST effect saves it)
        mem.alloc = complete_grant(ctx, mem, mem.alloc, info)
        base = attrs.evolve(base, alloc=mem.alloc)
    who = user()
    if info.state.is_pending:
        if mem.pending_since is None:
            mem.pending_since = now
        wait_left = ctx.policy.pending_wait_s - (now - mem.pending_since)
    else:
        mem.pending_since = None
        wait_left = 0.0
    expected = estimate()
    return attrs.evolve(
        base, at=now, info=info, user=who, pending_wait_left_s=max(0.0, wait_left),
        summary=_summary(ctx, info, expected), expected_s=expected.seconds,
        expected=expected.describe(),
        failure=f"allocation {job_id} still {info.state} after "
                f"{ctx.policy.pending_wait_s:g} s (reason {info.reason or 'unknown'}); "
                "state file kept, not cancelled",
    )


def _summary(ctx: Step0Context, info: JobInfo, expected: Estimate) -> str:
    """What 0C saw of the job, in words (the transition's reason)."""
    summary = f"allocation {info.job_id} {info.state}, {info.time_left} left"
    if info.state.is_running:
        summary += f"; job {expected.describe()}"
    if not info.state.is_live:
        summary = f"allocation {info.job_id} is {info.state}: ending, not reusable"
    elif info.name not in job_names(ctx.spec):
        summary += f", named {info.name!r} (not {ctx.spec.job_name!r})"
    return summary


def query_job(ctx: Step0Context, mem: Step0Memory, job_id: str
              ) -> tuple[JobInfo, float | None]:
    """The job's row; in ``run_many``, the row a sibling run asked at most
    :data:`~slurm_fsm.sharedview.JOB_MAX_AGE_S` ago (newer than this machine's last)
    and when it was asked (:mod:`slurm_fsm.sharedview`)."""
    view = sharedview.view_of(ctx.backend)
    if view is None:
        return ctx.backend.query_job(job_id), None
    return view.query_job(job_id, not_before=mem.job[1] if mem.job else None)


def complete_grant(ctx: Step0Context, mem: Step0Memory, alloc: AllocState,
                   info: JobInfo) -> AllocState:
    """``alloc`` with the nodelist and what Slurm granted (``scontrol show job``); not
    written (``mem.grant_unsaved``: the COMPLETE_NODELIST effect or 0E writes it). What
    cannot be read is a note, and the state file's values stand."""
    alloc = attrs.evolve(alloc, nodelist=alloc.nodelist or info.nodelist)
    try:
        granted = ctx.backend.granted(alloc.job_id)
    except (BackendError, ValueError) as exc:
        mem.notes.append(f"what Slurm granted allocation {alloc.job_id} could not be "
                         f"read ({exc}); judged on the state file")
        return alloc
    mem.grant_unsaved = True
    return with_grant(alloc, granted)


def info_now(ctx: Step0Context, mem: Step0Memory) -> tuple[JobInfo | None, Duration | None]:
    """The last job row seen and the time left it implies now (no Slurm call)."""
    if mem.job is None:
        return None, None
    info, at = mem.job
    return info, remaining_after(info, at, ctx.clock.now())


def replacing(ctx: Step0Context, mem: Step0Memory, state: State, why: str,
              expected: str) -> str:
    """Expiring / TooShort / Incompatible: why the allocation is replaced, in words
    (``why``: the rules the edge was taken for). The driver keeps it for the edge's
    CANCEL, which goes through the lease gate and drops the state file."""
    assert mem.alloc is not None
    why = f"{state.value}: {why}" if why else state.value
    if state is State.TooShort:
        _, left = info_now(ctx, mem)
        why = (f"TooShort: {left} left, the job {expected} + the "
               f"{Duration.of_seconds(EXPIRY_MARGIN_S)} margin; the job is not started "
               "on it")
        if left is not None and left.is_finite:  # until when, at the latest
            ends = datetime.now(UTC) + timedelta(seconds=left.seconds or 0)
            why += (f"; the allocation ends by {ends.strftime('%H:%M:%S')} UTC (in "
                    f"{left}) in any case")
    return why


def job_names(spec: JobSpec) -> tuple[str, ...]:
    """The names the state file's allocation may carry: the spec's job name, and with
    ``warm_successor`` its ``-b`` twin too."""
    return parity_names(spec.job_name) if spec.warm_successor else (spec.job_name,)


def in_batch(ctx: Step0Context) -> bool:
    """A run of ``run_many`` (its shared view wraps the backend): its siblings take step
    0 in turn, so a wait for the state file's lock is not "another run"."""
    return sharedview.view_of(ctx.backend) is not None


def estimate(ctx: Step0Context, mem: Step0Memory) -> Estimate:
    """The job's expected duration (admission by time left), read once from the spec
    and the run history (:func:`slurm_fsm.history.expected_duration`)."""
    if mem.estimate is None:
        mem.estimate = ctx.run_history.estimate(ctx.spec)
    return mem.estimate
