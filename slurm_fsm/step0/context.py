"""What step 0's work is handed and what it remembers: one context, one policy, one memory.

Theory of operation
-------------------

:class:`Step0Context` names everything the work of a state needs from outside the
machine (issue 40 item 1): the spec, the backend, the state store, the clock, where
progress is said, the lease gate, the run history, the warmer, salloc's log and the
:class:`MachinePolicy` of tuning options. :class:`~slurm_fsm.machine.AllocationMachine`
builds one from its keywords (:func:`new_context`) and hands it to each worker room.

:class:`MachinePolicy` is the one record of the waits, retries and grace times that
tune step 0 (before, six keywords stored as six attributes). Frozen: a change is
``attrs.evolve``. No Slurm call, no I/O here.

:class:`Step0Memory` is what step 0's work remembers from one trigger to the next (the
state file's allocation, the last job row, the ids cancelled or reused, the
unreachable and pending counts, the notes, the failure, how the container was set
up): the driver owns one and hands it, with the context, to each worker room of
:mod:`slurm_fsm.step0`; a room reads and updates it and returns what the driver needs
to fire. The machine's ``spec``, ``alloc``, ``pending_wait_s``... are typed views of
the two (:class:`Held`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload

import attrs

_LOG = logging.getLogger("slurm_fsm.machine")

if TYPE_CHECKING:  # types only: this module loads nothing heavy
    from concurrent.futures import Future

    from slurm_fsm.backend import GpuProcess, JobInfo, SlurmBackend
    from slurm_fsm.clock import Clock
    from slurm_fsm.history import Estimate, RunHistory
    from slurm_fsm.lease import LeaseGate
    from slurm_fsm.setupkey import SetupKey
    from slurm_fsm.spec import JobSpec
    from slurm_fsm.state import AllocState, StateStore
    from slurm_fsm.step0.outcome import Failure

__all__ = [
    "ORPHAN_GRACE_S",
    "POLICY_FIELDS",
    "REUSE_CHECK_TIMEOUT_S",
    "HandoffState",
    "Held",
    "MachinePolicy",
    "Step0Context",
    "Step0Memory",
    "new_context",
    "user_of",
    "warn",
]

#: Step 0D leaves alone a job of the spec's name and of a request's nonce that no state
#: file names while it is pending or has run less than this: it may be another run's,
#: whose state file is not written yet (that run's salloc has just answered); step 0E
#: adopts it. Older, it is an orphan (cancelled).
ORPHAN_GRACE_S = 60.0
#: The step that reads the nodes' setup keys gives up after this long (a fresh import
#: follows).
REUSE_CHECK_TIMEOUT_S = 300.0


@attrs.frozen(kw_only=True)
class MachinePolicy:
    """The tuning options of step 0, the machine's keywords of the same names."""

    #: 0C: an unreachable controller is asked again this many times, then Failed
    unreachable_retries: int = 3
    #: 0C: a PENDING allocation of the state file is waited for this long
    pending_wait_s: float = 600.0
    #: 0E: a new allocation is waited for this long (then cancelled, never left)
    alloc_wait_s: float = 600.0
    #: 0E: a new allocation PENDING this long is said (once)
    pending_report_s: float = 300.0
    #: each setup step (import, install) gives up after this long
    setup_timeout_s: float = 3600.0
    #: 0D: a moment-old job of a request is another run's (:data:`ORPHAN_GRACE_S`)
    orphan_grace_s: float = ORPHAN_GRACE_S


#: the names of :class:`MachinePolicy`'s fields (the machine's keywords)
POLICY_FIELDS: tuple[str, ...] = tuple(a.name for a in attrs.fields(MachinePolicy))


@attrs.define(kw_only=True)
class Step0Context:
    """Everything step 0's work needs from outside the machine."""

    spec: JobSpec
    backend: SlurmBackend
    clock: Clock
    store: StateStore
    #: where progress is said (the orchestrator's events, else the logger)
    say: Callable[[str], None]
    #: other runs' running jobs: waited for (or refused on) before a cancel, a
    #: re-import or an install would change what they use (None: not checked)
    leases: LeaseGate | None
    #: past runs' durations, for admission by time left (beside the state file)
    run_history: RunHistory
    #: warm successor: sets a queued successor up (None: none is started)
    warmer: Callable[[JobSpec], int | None] | None
    #: salloc's output (beside the state file)
    salloc_log: Path
    policy: MachinePolicy = MachinePolicy()


def new_context(spec: JobSpec, backend: SlurmBackend, *, clock: Clock | None,
                store: StateStore | None, say: Callable[[str], None] | None,
                leases: LeaseGate | None, run_history: RunHistory | None,
                warmer: Callable[[JobSpec], int | None] | None, salloc_log: Path | None,
                policy: MachinePolicy) -> Step0Context:
    """The context of the machine's keywords, a default for each left out: the system
    clock, the spec's state file, the logger, the run history beside the state file,
    salloc's log of the spec."""
    from slurm_fsm.clock import SystemClock
    from slurm_fsm.history import RunHistory
    from slurm_fsm.paths import StatePaths
    from slurm_fsm.state import StateStore

    store = store or StateStore(spec.state_path)
    return Step0Context(
        spec=spec, backend=backend, clock=clock or SystemClock(), store=store,
        say=say or _LOG.info, leases=leases, warmer=warmer,
        run_history=run_history or RunHistory(StatePaths(store.path).history),
        salloc_log=salloc_log or spec.salloc_log, policy=policy)


@attrs.define
class HandoffState:
    """Step 0's memory of the warm successor's hand-off, within one run
    (:mod:`slurm_fsm.handoff`'s work reads and writes it)."""

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
    #: :data:`slurm_fsm.handoff.SWITCHED_MARGIN_S`, never sent on to wait for yet another
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


@attrs.define(kw_only=True)
class Step0Memory:
    """What step 0's work remembers between triggers (the driver's, lent to the rooms)."""

    #: the allocation of the state file (None: none, or dropped)
    alloc: AllocState | None = None
    #: the last job row seen of it, and when (on the context's clock)
    job: tuple[JobInfo, float] | None = None
    #: steps skipped, waits, replacements... in words (the report's notes)
    notes: list[str] = attrs.field(factory=list)
    #: what went wrong but did not stop step 0 (the report's warnings), each once
    warnings: list[str] = attrs.field(factory=list)
    #: the Slurm user (asked once: :func:`user_of`); None: not asked yet
    user: str | None = None
    #: the warm successor's hand-off (:mod:`slurm_fsm.handoff`)
    handoff: HandoffState = attrs.field(factory=HandoffState)
    #: 0D: ids this machine cancelled (never cancelled twice)
    cancelled: set[str] = attrs.field(factory=set)
    #: ids the state file named that Slurm gave to another job (never an orphan)
    reused: set[str] = attrs.field(factory=set)
    #: 0D: another run's job, a moment old, that 0E adopts instead of a salloc
    adopt: str | None = None
    #: the grant was read into ``alloc`` and not yet written to the state file
    grant_unsaved: bool = False
    #: 0C: the controller was unreachable this many times in a row
    attempt: int = 0
    #: 0C: PENDING polls of the state file's allocation (the backoff's count)
    pending_polls: int = 0
    #: 0C: when the state file's allocation was first seen PENDING
    pending_since: float | None = None
    #: 0E asked for an allocation (or adopted another run's request)
    salloc_requested: bool = False
    #: the pre-flight's questions were asked (:func:`slurm_fsm.step0.allocate.require`)
    required: bool = False
    #: why the allocation is replaced (set by Expiring/TooShort/Incompatible's work,
    #: read by the CANCEL effect)
    replace_why: str = ""
    #: why step 0 failed (the RECORD_FAILURE effect's, or the driver's failure routing)
    failure: Failure | None = None
    #: the pre-flight's GPU check begun early
    #: (:func:`slurm_fsm.step0.checks.start_gpu_check`): the allocation it asks about,
    #: and its answer to come
    gpu_ahead: tuple[str, Future[list[GpuProcess]]] | None = None
    #: how step 0 came by its container (``SETUP_COLD``... of
    #: :mod:`slurm_fsm.step0.outcome`); None: no container set up by this machine
    container_setup: str | None = None
    #: seconds of the export of the installed container to the image cache (a part of
    #: the Installing state's time, said apart); None: nothing exported
    cache_write_s: float | None = None
    #: the spec's setup key, once computed (:func:`slurm_fsm.step0.setup.setup_key_of`)
    setup_key: tuple[SetupKey | None] | None = None
    #: the job's expected duration, once read (:func:`slurm_fsm.step0.validate.estimate`)
    estimate: Estimate | None = None
    #: the allocation a release (0A) cancelled
    released_job_id: str | None = None


def warn(ctx: Step0Context, mem: Step0Memory, text: str) -> None:
    """A warning: kept once in ``mem.warnings`` and said (``WARNING: ...`` through the
    context's ``say``; with no progress callback, at the logger's WARNING level)."""
    if text not in mem.warnings:
        mem.warnings.append(text)
    if ctx.say == _LOG.info:  # no progress callback: the logger's own level
        _LOG.warning("%s", text)
    else:
        ctx.say(f"WARNING: {text}")


def user_of(ctx: Step0Context, mem: Step0Memory) -> str:
    """The Slurm user, asked of the backend once (kept in ``mem.user``)."""
    if mem.user is None:
        mem.user = ctx.backend.current_user()
    return mem.user


_T = TypeVar("_T")


class _Driver(Protocol):
    """What holds a context and a memory: the driver (``AllocationMachine``)."""

    ctx: Step0Context
    mem: Step0Memory


class Held(Generic[_T]):
    """An attribute of the driver held by its context (``ctx``), its memory (``mem``)
    or its context's policy (``policy``: set, a new policy with that option). Read-only
    (AttributeError when set) unless ``settable`` (a policy option always is): the
    machine's ``spec``, ``alloc``, ``pending_wait_s``... are views of the two records,
    typed, and documented where they are declared."""

    def __init__(self, where: Literal["ctx", "mem", "policy"], *, settable: bool = False):
        self.where, self.settable, self.name = where, settable or where == "policy", ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def _home(self, driver: _Driver) -> Any:
        return driver.ctx.policy if self.where == "policy" else getattr(driver, self.where)

    @overload
    def __get__(self, driver: None, owner: type) -> Held[_T]: ...
    @overload
    def __get__(self, driver: _Driver, owner: type) -> _T: ...
    def __get__(self, driver: _Driver | None, owner: type) -> Held[_T] | _T:
        return self if driver is None else getattr(self._home(driver), self.name)

    def __set__(self, driver: _Driver, value: _T) -> None:
        if not self.settable:
            raise AttributeError(f"{type(driver).__name__}.{self.name} is read-only")
        if self.where == "policy":
            option: dict[str, Any] = {self.name: value}
            driver.ctx.policy = attrs.evolve(driver.ctx.policy, **option)
        else:
            setattr(self._home(driver), self.name, value)
