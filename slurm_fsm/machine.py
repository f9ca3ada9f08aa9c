"""Step 0 of procedure.md as an explicit finite-state machine: the driver.

Theory of operation
-------------------

:mod:`slurm_fsm.step0.table` decides, the rooms of :mod:`slurm_fsm.step0` act, this
module drives: it runs no command line and imports no Slurm tool (a test checks).
The work is handed one :class:`~slurm_fsm.step0.context.Step0Context` and remembers
in one :class:`~slurm_fsm.step0.context.Step0Memory`; the machine's attributes
(``spec``, ``alloc``, ``notes``...) are views of the two.

* A trigger (``start()``, ``advance()``, ``release()``, ``run()``, ``finish()``)
  checks that an edge of :data:`~slurm_fsm.step0.table.EDGES` leaves the current state
  for it (else :class:`transitions.MachineError`, nothing done); a trigger of step 0
  (:data:`LOCKED_TRIGGERS`) takes the state-file lock; the state's room does its work
  (:func:`slurm_fsm.step0.work.observe`) and returns one frozen
  :class:`~slurm_fsm.step0.table.Observation` (:attr:`AllocationMachine.observation`).
* transitions takes the first edge whose conditions hold on it and, before the state
  changes, does its :class:`~slurm_fsm.step0.table.Effect` s
  (:data:`slurm_fsm.step0.work.EFFECT_WORK`; only :mod:`~slurm_fsm.step0.effects`
  cancels or deletes).
* ``may_<trigger>()`` and :meth:`AllocationMachine.possible_edges` make no Slurm call.
* An exception of the work or an effect is routed into ``Failed`` with a
  :class:`Failure` (which step, whether the state file was kept).

Drive it one trigger at a time (a notebook), or to the end of step 0 with
:meth:`AllocationMachine.prepare`::

    m = AllocationMachine(spec, backend, clock=clock)
    m.start(); m.state            # State.Validating
    m.possible_edges()            # what advance may do, on the last observation
    m.advance(); m.state          # State.Ready
    m.history                     # [Transition(...), ...]
    m                             # in a notebook: the diagram, current state marked
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from transitions import EventData, Machine, MachineError

from slurm_fsm.errors import SetupFailed, SlurmFsmError
from slurm_fsm.step0 import allocate, checks, validate, view, work
from slurm_fsm.step0.context import (
    ORPHAN_GRACE_S,
    REUSE_CHECK_TIMEOUT_S,
    HandoffState,
    Held,
    MachinePolicy,
    Step0Context,
    Step0Memory,
    new_context,
    user_of,
)
from slurm_fsm.step0.outcome import (
    SETUP_CACHED,
    SETUP_COLD,
    SETUP_REUSED,
    SETUP_SHARED,
    Failure,
    Step0Outcome,
    SuccessorWait,
    Transition,
)
from slurm_fsm.step0.table import (
    EDGES,
    IN_PROGRESS,
    Edge,
    Effect,
    Observation,
    State,
    edges_from,
    mermaid_diagram,
)
from slurm_fsm.step0.view import PossibleEdge, PossibleEdges

if TYPE_CHECKING:  # types only: the driver loads no Slurm tool, no hand-off, no history
    from pathlib import Path

    from slurm_fsm.backend import JobInfo, SlurmBackend
    from slurm_fsm.capacity import RequestSize
    from slurm_fsm.clock import Clock
    from slurm_fsm.duration import Duration
    from slurm_fsm.handoff import Warmer
    from slurm_fsm.history import Estimate, RunHistory
    from slurm_fsm.lease import LeaseGate
    from slurm_fsm.spec import JobSpec
    from slurm_fsm.state import AllocState, StateStore

# AllocationMachine is defined here, the other names in the wing (named here too); the
# table (State, Edge, EDGES, ...) is slurm_fsm.step0.table's, not named here.
__all__ = [
    "ORPHAN_GRACE_S", "REUSE_CHECK_TIMEOUT_S", "SETUP_CACHED", "SETUP_COLD", "SETUP_REUSED",
    "SETUP_SHARED", "AllocationMachine", "Failure", "MachineError", "MachinePolicy",
    "PossibleEdge", "PossibleEdges", "SetupFailed", "Step0Outcome", "Transition",
]

TRIGGERS = ("start", "advance", "release", "run", "finish", "fail")
#: The triggers of step 0: they take the state file's lock (``run``, ``finish`` never).
LOCKED_TRIGGERS = frozenset({"start", "advance", "release"})


class _Model:
    """The object transitions drives (``state``, ``is_<State>``, ``may_<trigger>``...):
    no helper of transitions is bound to :class:`AllocationMachine`, none is skipped."""

    state: State


# transitions logs each callback at INFO, which would drown what happens in an
# orchestrator's INFO logging; a level the application set is left as it is
if logging.getLogger("transitions").level == logging.NOTSET:
    logging.getLogger("transitions").setLevel(logging.WARNING)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class AllocationMachine:
    """One persistent allocation for one spec, stepped by triggers.

    Triggers: ``start()``, ``advance()``, ``release()``, ``run()``, ``finish()``; each
    does the current state's work under the state-file lock, then takes the edge the
    table chooses. ``may_<trigger>()`` and :meth:`possible_edges` answer from the
    current state and the last :attr:`observation`, with no Slurm call. An illegal
    trigger raises :class:`transitions.MachineError` and does nothing.
    """

    #: the rules the last edge was taken for, in words (:meth:`Edge.why`)
    _why: str = ""

    def __init__(
        self,
        spec: JobSpec,
        backend: SlurmBackend,
        *,
        clock: Clock | None = None,
        store: StateStore | None = None,
        log: Callable[[str], None] | None = None,
        unreachable_retries: int = 3,
        pending_wait_s: float = 600.0,
        alloc_wait_s: float = 600.0,
        pending_report_s: float = 300.0,
        setup_timeout_s: float = 3600.0,
        user: str | None = None,
        salloc_log: Path | None = None,
        leases: LeaseGate | None = None,
        run_history: RunHistory | None = None,
        warmer: Warmer | None = None,
        orphan_grace_s: float = ORPHAN_GRACE_S,
    ) -> None:
        #: what the work is handed: spec, backend, store, clock, leases, history,
        #: warmer, salloc's log and the tuning options (:class:`MachinePolicy`)
        self.ctx: Step0Context = new_context(
            spec, backend, clock=clock, store=store, say=log, leases=leases,
            run_history=run_history, warmer=warmer, salloc_log=salloc_log,
            policy=MachinePolicy(
                unreachable_retries=unreachable_retries, pending_wait_s=pending_wait_s,
                alloc_wait_s=alloc_wait_s, pending_report_s=pending_report_s,
                setup_timeout_s=setup_timeout_s, orphan_grace_s=orphan_grace_s))
        #: what the work remembers between triggers (lent to the worker rooms)
        self.mem = Step0Memory(user=user)
        #: what the work of the last trigger saw; the conditions read only this and the spec
        self.observation = Observation()
        self.history: list[Transition] = []
        self.edges: tuple[Edge, ...] = tuple(EDGES)
        self._taken: Edge | None = None
        self._applied: list[Effect] = []  # the effects of the last edge that did something
        self._model = _Model()
        self.machine = self._transitions_machine()

    def _transitions_machine(self) -> Machine:
        """The ``transitions`` machine over :attr:`edges`: every edge a transition whose
        condition is its check (:meth:`_holds`) and whose ``before`` takes it."""
        machine = Machine(
            model=self._model, states=State, initial=State.NoState,
            auto_transitions=False, queued=True, send_event=True,
            after_state_change=self._record, on_exception=self._on_exception,
        )
        for e in self.edges:
            machine.add_transition(
                e.trigger, e.source, e.dest,
                conditions=[partial(self._holds, e)], before=[partial(self._take, e)],
            )
        return machine

    # The context and the memory, as the machine's attributes (public API, as before)
    spec: Held[JobSpec] = Held("ctx")
    """The job spec."""
    backend: Held[SlurmBackend] = Held("ctx")
    """The Slurm backend."""
    clock: Held[Clock] = Held("ctx")
    """The injected clock."""
    store: Held[StateStore] = Held("ctx")
    """The state file's store."""
    leases: Held[LeaseGate | None] = Held("ctx", settable=True)
    """The lease gate (None: leases not checked); settable (a test's world's gate)."""
    run_history: Held[RunHistory] = Held("ctx")
    """The run history (admission by time left)."""
    warmer: Held[Warmer | None] = Held("ctx")
    """The warm successor's warmer (None: none started)."""
    salloc_log: Held[Path] = Held("ctx")
    """salloc's output beside the state file."""
    alloc: Held[AllocState | None] = Held("mem", settable=True)
    """The allocation of the state file (None: none, or dropped)."""
    notes: Held[list[str]] = Held("mem")
    """Steps skipped, waits, replacements... in words (the report's notes)."""
    warnings: Held[list[str]] = Held("mem")
    """What went wrong but did not stop step 0 (the report's warnings)."""
    handoff: Held[HandoffState] = Held("mem")
    """The warm successor's hand-off memory (:mod:`slurm_fsm.handoff`)."""
    container_setup: Held[str | None] = Held("mem", settable=True)
    """How step 0 came by its container (:data:`SETUP_COLD`, :data:`SETUP_REUSED`,
    :data:`SETUP_SHARED`, :data:`SETUP_CACHED`); None: no container set up by it."""
    cache_write_s: Held[float | None] = Held("mem", settable=True)
    """Seconds of the export to the image cache (a part of Installing's time, said
    apart); None: nothing exported."""
    failure: Held[Failure | None] = Held("mem", settable=True)
    """Why step 0 failed (None: it did not)."""
    released_job_id: Held[str | None] = Held("mem", settable=True)
    """The allocation a release (0A) cancelled."""
    salloc_requested: Held[bool] = Held("mem")
    """This machine asked for an allocation (0E's salloc, or adopted another run's
    request): only then is :attr:`salloc_log` this run's to quote in a report."""
    # the tuning options, :class:`MachinePolicy`'s of the context (set: a new policy)
    unreachable_retries: Held[int] = Held("policy")
    pending_wait_s: Held[float] = Held("policy")
    alloc_wait_s: Held[float] = Held("policy")
    pending_report_s: Held[float] = Held("policy")
    setup_timeout_s: Held[float] = Held("policy")
    orphan_grace_s: Held[float] = Held("policy")

    # Triggers ---------------------------------------------------------------------
    @property
    def state(self) -> State:
        """The current state."""
        return self._model.state

    def start(self) -> bool:
        """Leave NoState: check the state file can be written, read it (no Slurm call)."""
        return self._fire("start")

    def advance(self) -> bool:
        """Do the work of the current in-progress state, then take the chosen edge."""
        return self._fire("advance")

    def release(self) -> bool:
        """0A: cancel our allocation (after checking it is ours) and drop the files."""
        return self._fire("release")

    def run(self) -> bool:
        """Step 1's pre-flight on a Ready allocation (time left, GPU processes), then
        Running. It does not start the job (:attr:`next_step` says how to run it)."""
        return self._fire("run")

    @property
    def next_step(self) -> str:
        """What to call next, in one sentence (under the notebook's diagram); in Running,
        how to run the job, which the machine never starts itself. No Slurm call."""
        return view.next_step(self.state, self.alloc, self.spec)

    def start_gpu_check(self) -> None:
        """Begin step 1's GPU check now, in the background, on a Ready allocation
        (:func:`slurm_fsm.step0.checks.start_gpu_check`): :meth:`run`'s pre-flight takes
        its answer. Call it once what a dead run left is stopped."""
        checks.start_gpu_check(self.ctx, self.mem, self.state)

    def finish(self, reason: str = "", allocation_gone: bool = False) -> bool:
        """The job on the allocation ended; ``allocation_gone``: the allocation ended too."""
        return self._fire("finish", {"reason": reason, "allocation_gone": allocation_gone})

    def may(self, trigger: str) -> bool:
        """Whether ``trigger`` is legal now and an edge of it holds on the last
        observation. Reads only the state and :attr:`observation`: no Slurm call."""
        if trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger {trigger!r}; triggers: {', '.join(TRIGGERS)}")
        return bool(getattr(self._model, f"may_{trigger}")())

    def may_start(self) -> bool:
        """:meth:`may` ``("start")``."""
        return self.may("start")

    def may_advance(self) -> bool:
        """:meth:`may` ``("advance")``."""
        return self.may("advance")

    def may_release(self) -> bool:
        """:meth:`may` ``("release")``."""
        return self.may("release")

    def may_run(self) -> bool:
        """:meth:`may` ``("run")``."""
        return self.may("run")

    def may_finish(self) -> bool:
        """:meth:`may` ``("finish")``."""
        return self.may("finish")

    def triggers(self) -> list[str]:
        """The triggers with an edge out of the current state (``fail`` is internal)."""
        out: list[str] = []
        for e in edges_from(None, self.state, self.edges):
            if e.trigger != "fail" and e.trigger not in out:
                out.append(e.trigger)
        return out

    def possible_edges(self, trigger: str | None = None) -> PossibleEdges:
        """The edges out of the current state (of ``trigger``, or of every trigger but
        the internal ``fail``), in table order, each judged on the last observation
        (``stale``, printed with ``?``: not made by its trigger here). No Slurm call."""
        return view.possible_edges(self.edges, self.state, self.observation, self.spec,
                                   trigger)

    def _fire(self, trigger: str, kwargs: Mapping[str, Any] | None = None) -> bool:
        if not edges_from(trigger, self.state, self.edges):
            raise MachineError(f"Can't trigger event {trigger} from state "
                               f"{self.state.value}!")
        with self.locked() if trigger in LOCKED_TRIGGERS else contextlib.nullcontext():
            self._taken = None
            self._applied = []
            try:
                self.observation = work.observe(self.ctx, self.mem, trigger, self.state,
                                                self.observation, self._why, kwargs or {})
            except (SlurmFsmError, OSError) as exc:
                self._fail_with(exc)
                return True
            return bool(getattr(self._model, trigger)())

    # Driving ------------------------------------------------------------------------
    @property
    def user(self) -> str:
        """The Slurm user (asked of the backend once)."""
        return user_of(self.ctx, self.mem)

    @property
    def path(self) -> list[str]:
        """States visited, starting with the initial one."""
        if not self.history:
            return [self.state.value]
        return [self.history[0].source] + [t.dest for t in self.history]

    def setup_seconds(self) -> dict[str, float]:
        """Seconds of step 0's setup work, by part, of the states visited
        (:func:`slurm_fsm.step0.view.setup_seconds`)."""
        return view.setup_seconds(self.history, self.container_setup, self.cache_write_s)

    def lead_history(self) -> list[Transition]:
        """The history as lead-time parts (:func:`~slurm_fsm.step0.view.lead_history`)."""
        return view.lead_history(self.history, self.container_setup)

    def setup_note(self) -> str | None:
        """One line for the notes: how the container was set up, how long each part took."""
        return view.setup_note(self.setup_seconds(), self.container_setup, self.alloc,
                               self.spec)

    def prepare(self, *, within: frozenset[State] = IN_PROGRESS,
                until: Callable[[Step0Outcome], bool] | None = None) -> Step0Outcome:
        """Run step 0 to its end (Ready, Released or Failed) under the state-file lock:
        :meth:`start`, then :meth:`advance` while the state is one of ``within`` (the
        warmer passes its own few), or until ``until`` (asked with :meth:`outcome` after
        each trigger: ``plan`` stops at a PENDING allocation). Returns :meth:`outcome`."""
        with self.locked():
            if self.spec.release_allocation:
                self.release()
                return self.outcome()
            while self.state in within or self.state is State.NoState:
                if self.state is State.NoState:
                    self.start()
                else:
                    self.advance()
                if until is not None and until(self.outcome()):
                    break
            return self.outcome()

    def outcome(self) -> Step0Outcome:
        """What the machine knows now, as one frozen value (no Slurm call): what
        :meth:`prepare` returns and a caller reads instead of the machine's fields."""
        waited = self.handoff.waited_s
        return Step0Outcome(
            state=self.state, alloc=self.alloc, failure=self.failure,
            path=tuple(self.path), history=tuple(self.history), notes=tuple(self.notes),
            warnings=tuple(self.warnings), observation=self.observation,
            released_job_id=self.released_job_id, salloc_requested=self.salloc_requested,
            salloc_log=self.salloc_log, container_setup=self.container_setup,
            setup_note=self.setup_note(), setup_seconds=tuple(self.setup_seconds().items()),
            successor_wait=None if waited is None else SuccessorWait(
                seconds=waited, job_id=self.handoff.waited_for),
        )

    def note(self, text: str) -> None:
        """Add one line of the caller's own to the notes (how long the job waited for
        its successor or its GPUs...), in order among the machine's."""
        self.notes.append(text)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state file's lock (two orchestrators never allocate twice).

        Re-entrant: :meth:`prepare` and every trigger of step 0 take it (a
        :class:`~slurm_fsm.state.StateLockTimeout` from a trigger: another run holds it,
        nothing was done); hold ``with m.locked():`` around hand-stepped triggers to
        keep it between them. A machine whose run holds a lease and not the lock
        refuses (RuntimeError, a bug): a release holds the lock while it waits for the
        leases, so a lease holder that waited for the lock would wait for itself."""
        if self.leases is not None and self.leases.own is not None \
                and not self.store.holds_lock():
            raise RuntimeError("a run that holds a lease never waits for the state file's "
                               "lock (a release waiting for that lease holds it)")
        # run_many's runs take step 0 in turn: a wait for a sibling is not "another run"
        with self.store.locked(on_wait=self._waiting,
                               siblings_quiet=validate.in_batch(self.ctx)):
            if self.store.unlocked and self.store.unlocked not in self.warnings:
                self.warnings.append(self.store.unlocked)
            yield

    def estimate(self) -> Estimate:
        """The job's expected duration, read once (:func:`slurm_fsm.step0.validate.estimate`)."""
        return validate.estimate(self.ctx, self.mem)

    def info_now(self) -> tuple[JobInfo | None, Duration | None]:
        """The last job row seen and the time left it implies now (no Slurm call)."""
        return validate.info_now(self.ctx, self.mem)

    # Display ------------------------------------------------------------------------
    @staticmethod
    def mermaid() -> str:
        """The state diagram, generated from :data:`~slurm_fsm.step0.table.EDGES`."""
        return mermaid_diagram(EDGES)

    def diagram(self) -> str:
        """The mermaid diagram of the part the machine is in, its state highlighted."""
        return view.diagram(self.edges, self.state)

    def _repr_markdown_(self) -> str:
        """A notebook shows the machine as its diagram, the current state marked."""
        return view.markdown(self.edges, self.state, self.alloc, self.spec)

    def __repr__(self) -> str:
        return f"<AllocationMachine {self.state.value} {self.spec.job_name}>"

    # The table, as transitions calls it ------------------------------------------------
    def _holds(self, edge: Edge, _event: EventData) -> bool:  # on the last observation
        return edge.holds(self.observation, self.spec)

    def _take(self, edge: Edge, _event: EventData) -> None:
        """The edge is chosen: its effects, before the state changes, each through
        :data:`slurm_fsm.step0.work.EFFECT_WORK` (those that did something: named)."""
        self._taken = edge
        self._applied = [e for e in edge.effects if work.EFFECT_WORK[e](
            self.ctx, self.mem, self.observation, self.state)]

    def request_size(self) -> RequestSize:
        """What ``salloc`` asks for this spec (:func:`slurm_fsm.step0.allocate.request_size`)."""
        return allocate.request_size(self.ctx)

    # Bookkeeping ----------------------------------------------------------------------
    def _waiting(self, text: str) -> None:
        """A wait (the state file's lock): said, and in the report's notes."""
        self.ctx.say(text)
        self.notes.append(text)

    def _record(self, event: EventData) -> None:
        source = event.transition.source if event.transition else ""
        dest = event.transition.dest if event.transition else ""
        edge = self._taken
        if event.event.name == "fail" and self.failure is not None:
            reason = self.failure.message
        else:
            self._why = edge.why(self.observation, self.spec) if edge is not None else ""
            reason = "; ".join(part for part in (self.observation.summary, self._why,
                                                 *(e.value for e in self._applied)) if part)
        self.history.append(Transition(
            clock=self.clock.now(), at=_now_iso(), trigger=event.event.name,
            source=str(source), dest=str(dest), reason=reason, edge=edge))
        if self.state is State.Failed and self.failure is None:  # defensive: always recorded
            self.failure = Failure(source or "?", reason or "failed")
        self.ctx.say(f"[{source} -> {dest}] {reason}")

    def _on_exception(self, event: EventData) -> None:
        """An effect raised (the work's errors are caught in the trigger)."""
        error = event.error
        if error is None:  # pragma: no cover - transitions always sets it here
            return
        if not isinstance(error, SlurmFsmError | OSError):
            raise error  # a bug: do not hide it behind a Failed state
        self._fail_with(error)

    def _fail_with(self, error: BaseException) -> None:
        self.failure = Failure.of(self.state.value, error, state_file_kept=self.store.exists())
        self._taken = None
        self._applied = []
        self._model.fail()  # type: ignore[attr-defined]  # bound by transitions

