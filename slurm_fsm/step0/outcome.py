"""What step 0 ends with: one frozen record, read instead of the machine's attributes.

Theory of operation
-------------------

:meth:`slurm_fsm.machine.AllocationMachine.prepare` returns a :class:`Step0Outcome`
(issue 40 item 1): the state step 0 stopped in, the allocation, the failure, the path
and history, the notes and warnings, the warm successor's wait and how the container
was set up. :meth:`~slurm_fsm.machine.AllocationMachine.outcome` gives the same record
at any moment (after the pre-flight, after the job's end, or for a run interrupted
mid-step): the persistent path, the warmer and ``slurm-fsm plan`` read this record,
never the machine's fields. The record is a snapshot: later triggers do not change
it.

:class:`Transition` (one history entry) and :class:`Failure` (why the machine is in
Failed) live here because the outcome carries them; ``slurm_fsm.machine`` names them
too. No Slurm call, no I/O: this module only holds values.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    NotOurJobError,
    PreflightFailed,
    SetupFailed,
)
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import Edge, Observation, State

__all__ = [
    "SETUP_CACHED",
    "SETUP_COLD",
    "SETUP_REUSED",
    "SETUP_SHARED",
    "Failure",
    "Step0Outcome",
    "SuccessorWait",
    "Transition",
]

#: How step 0 came by its container (:attr:`Step0Outcome.container_setup`, the
#: report's ``container`` note): imported and installed; the one the node kept, set up
#: from the same image and inputs (issue 42 item 1); a live allocation's on the same
#: nodes (issue 44 item 3).
SETUP_COLD = "cold"
SETUP_REUSED = "reused on node"
SETUP_SHARED = "shared with a live allocation"
#: made from the image cache's squashfs of the same setup (issue 42 item 2)
SETUP_CACHED = "from the cache"


@attrs.frozen(kw_only=True)
class Transition:
    """One entry of the machine's history."""

    #: the injected clock's reading (a FakeClock's in tests)
    clock: float
    #: wall time, ISO 8601 UTC
    at: str
    trigger: str
    source: str
    dest: str
    reason: str
    #: the row of :data:`~slurm_fsm.step0.table.EDGES` taken
    edge: Edge | None = None


@attrs.frozen
class Failure:
    """Why the machine is in Failed."""

    step: str  # the state whose work failed, e.g. "Allocating"
    message: str
    error: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    state_file_kept: bool = True

    @classmethod
    def of(cls, step: str, error: BaseException, *, state_file_kept: bool) -> Failure:
        """The failure of ``step`` by ``error``: a Slurm, setup, ownership or pre-flight
        error says itself (salloc's with its stderr's tail); any other is named by its
        type."""
        if isinstance(error, AllocationFailed) and error.stderr_tail:
            message = f"{error}"
        elif isinstance(error, BackendError | SetupFailed | NotOurJobError | PreflightFailed):
            message = str(error)
        else:
            message = f"{type(error).__name__}: {error}"
        return cls(step, message, error, state_file_kept=state_file_kept)


@attrs.frozen(kw_only=True)
class SuccessorWait:
    """The job did not fit the old allocation's time left and waited for its warm
    successor (AwaitingSuccessor): how long, and for which allocation."""

    seconds: float
    job_id: str | None


@attrs.frozen(kw_only=True)
class Step0Outcome:
    """Step 0's end (or the machine's state now), as one frozen value."""

    #: the state the machine is in (Ready, Released, Failed, ... Running after ``run``)
    state: State
    #: the allocation the state file names (None: none, or released)
    alloc: AllocState | None
    #: why the machine is in Failed (None otherwise)
    failure: Failure | None
    #: the states visited, the initial one first
    path: tuple[str, ...]
    history: tuple[Transition, ...]
    #: steps skipped and why, waits; the report's notes
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    #: what the last trigger's work saw
    observation: Observation
    #: the allocation 0A released (None: no release)
    released_job_id: str | None = None
    #: this machine asked for an allocation (0E): only then is :attr:`salloc_log` this
    #: run's to quote in a report
    salloc_requested: bool = False
    salloc_log: Path | None = None
    #: how the container was come by (``SETUP_COLD``, ``SETUP_REUSED``,
    #: ``SETUP_SHARED``; None: no container set up by this machine)
    container_setup: str | None = None
    #: :meth:`~slurm_fsm.machine.AllocationMachine.setup_note` (None: no container set up)
    setup_note: str | None = None
    #: :meth:`~slurm_fsm.machine.AllocationMachine.setup_seconds`, as (name, seconds)
    setup_seconds: tuple[tuple[str, float], ...] = ()
    #: the wait for the warm successor (None: no wait)
    successor_wait: SuccessorWait | None = None

    @property
    def summary(self) -> str:
        """The last transition's reason ("" before the first)."""
        return self.history[-1].reason if self.history else ""

    @property
    def ready(self) -> bool:
        """Step 0 ended Ready with an allocation: the job may be started on it."""
        return self.state is State.Ready and self.alloc is not None
