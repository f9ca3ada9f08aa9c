"""Step 0 of procedure.md as an explicit finite-state machine: the work of each state.

Theory of operation
-------------------

:mod:`slurm_fsm.step0.table` decides; this module acts. Every Slurm operation goes
through the injected :class:`~slurm_fsm.backend.SlurmBackend`; this module runs
no command line.

* A trigger (``start()``, ``advance()``, ``release()``, ``run()``, ``finish()``)
  first checks that an edge of :data:`~slurm_fsm.step0.table.EDGES` leaves the current
  state for it (else :class:`transitions.MachineError`, nothing done), then, for a
  trigger of step 0 (``start``, ``advance``, ``release``: :data:`LOCKED_TRIGGERS`),
  takes the state-file lock, does the current state's work (at most one Slurm
  interaction for Validating) and stores what it saw as one frozen
  :class:`~slurm_fsm.step0.table.Observation` in :attr:`AllocationMachine.observation`.
  ``run`` (the pre-flight) and ``finish`` (the job's end) never take the lock: a
  finished job's report never waits behind another run's step 0 or a release that
  waits for this run's lease. A run that holds a lease never waits for the lock
  (:meth:`AllocationMachine.locked` refuses), so the lease and the lock cannot wait
  on each other.
* transitions then takes the first edge whose conditions hold on that observation
  and executes the edge's :class:`~slurm_fsm.step0.table.Effect` s (drop the state file,
  scancel, record the failure, ...) before the state changes. Every cancel and
  delete of step 0 is a function of :mod:`slurm_fsm.step0.effects` (a test scans
  for any other); the work of a state (its room) records no failure on its own.
* ``may_<trigger>()`` and :meth:`AllocationMachine.possible_edges` only read the
  current state and the last observation: they make no Slurm call.
* An exception raised by the work or an effect is routed into
  :attr:`~slurm_fsm.step0.table.State.Failed` with a :class:`Failure` that says which
  step failed and whether the state file was kept.

Drive it one trigger at a time (a notebook)::

    m = AllocationMachine(spec, backend, clock=clock)
    m.start(); m.state            # State.Validating
    m.possible_edges()            # what advance may do, on the last observation
    m.advance(); m.state          # State.Ready
    m.history                     # [Transition(...), ...]
    m                             # in a notebook: the diagram, current state marked

or to the end of step 0 with :meth:`AllocationMachine.prepare`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from transitions import EventData, Machine, MachineError

from slurm_fsm.backend import (
    JobInfo,
    SlurmBackend,
)
from slurm_fsm.capacity import (
    RequestSize,
)
from slurm_fsm.clock import Clock, SystemClock
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    NotOurJobError,
    SetupFailed,
    SlurmFsmError,
)
from slurm_fsm.history import Estimate, RunHistory
from slurm_fsm.lease import LeaseGate
from slurm_fsm.paths import StatePaths
from slurm_fsm.preflight import PreflightFailed
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0 import allocate, checks, effects, validate, view, work
from slurm_fsm.step0.context import (
    ORPHAN_GRACE_S,
    REUSE_CHECK_TIMEOUT_S,
    HandoffState,
    MachinePolicy,
    Step0Context,
    Step0Memory,
    user_of,
    warn,
)

if TYPE_CHECKING:
    from slurm_fsm.handoff import Warmer

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

# AllocationMachine and PossibleEdge are defined here (SetupFailed lives in errors.py,
# Failure, Step0Outcome and Transition in step0/outcome.py: named here too); the table
# (State, Edge, EDGES, ...) is slurm_fsm.step0.table's, imported from there (or from
# slurm_fsm), not from here.
__all__ = [
    "ORPHAN_GRACE_S",
    "REUSE_CHECK_TIMEOUT_S",
    "SETUP_CACHED",
    "SETUP_COLD",
    "SETUP_REUSED",
    "SETUP_SHARED",
    "AllocationMachine",
    "Failure",
    "MachineError",
    "MachinePolicy",
    "PossibleEdge",
    "PossibleEdges",
    "SetupFailed",
    "Step0Outcome",
    "Transition",
]

TRIGGERS = ("start", "advance", "release", "run", "finish", "fail")
#: The triggers of step 0: they take the state file's lock. ``run`` and ``finish``
#: never do (the lock covers step 0 only).
LOCKED_TRIGGERS = frozenset({"start", "advance", "release"})


class _Model:
    """The object transitions drives (it holds ``state`` and transitions' own helpers:
    ``is_<State>``, ``may_<trigger>``...). :class:`AllocationMachine` is the public face:
    no helper of transitions is bound to it, so none is skipped with a warning."""

    state: State


_LOG = logging.getLogger("slurm_fsm.machine")


# transitions logs each callback it runs at INFO: an orchestrator's INFO logging would
# show those, not what happens; a level the application set is left as it is
if logging.getLogger("transitions").level == logging.NOTSET:
    logging.getLogger("transitions").setLevel(logging.WARNING)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _policy_option(name: str) -> Any:
    """A tuning option of :class:`MachinePolicy` as the machine's attribute: read from
    its context's policy; set, a new policy with that option."""

    def get(self: AllocationMachine) -> Any:
        return getattr(self.ctx.policy, name)

    def put(self: AllocationMachine, value: Any) -> None:
        self.ctx.policy = attrs.evolve(self.ctx.policy, **{name: value})

    return property(get, put, doc=f"``MachinePolicy.{name}`` of the machine's context.")


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
        store = store or StateStore(spec.state_path)
        #: what the work is handed: spec, backend, store, clock, leases, history,
        #: warmer, salloc's log and the tuning options (:class:`MachinePolicy`)
        self.ctx = Step0Context(
            spec=spec, backend=backend, clock=clock or SystemClock(), store=store,
            say=log or _LOG.info, leases=leases, warmer=warmer,
            run_history=run_history or RunHistory(StatePaths(store.path).history),
            salloc_log=salloc_log or spec.salloc_log,
            policy=MachinePolicy(
                unreachable_retries=unreachable_retries, pending_wait_s=pending_wait_s,
                alloc_wait_s=alloc_wait_s, pending_report_s=pending_report_s,
                setup_timeout_s=setup_timeout_s, orphan_grace_s=orphan_grace_s),
        )
        self._log = self.ctx.say  # else the slurm_fsm.machine logger
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
            model=self._model,
            states=State,
            initial=State.NoState,
            auto_transitions=False,
            queued=True,
            send_event=True,
            after_state_change=self._record,
            on_exception=self._on_exception,
        )
        for e in self.edges:
            machine.add_transition(
                e.trigger, e.source, e.dest,
                conditions=[partial(self._holds, e)], before=[partial(self._take, e)],
            )
        return machine

    # The context, as the machine's attributes (public API: read, and the tuning
    # options set, as before) --------------------------------------------------------
    @property
    def spec(self) -> JobSpec:
        """The job spec."""
        return self.ctx.spec

    @property
    def backend(self) -> SlurmBackend:
        """The Slurm backend."""
        return self.ctx.backend

    @property
    def clock(self) -> Clock:
        """The injected clock."""
        return self.ctx.clock

    @property
    def store(self) -> StateStore:
        """The state file's store."""
        return self.ctx.store

    @property
    def leases(self) -> LeaseGate | None:
        """The lease gate (None: leases not checked); settable, as before the context
        (a test hands a machine the gate of its world)."""
        return self.ctx.leases

    @leases.setter
    def leases(self, gate: LeaseGate | None) -> None:
        self.ctx.leases = gate

    @property
    def run_history(self) -> RunHistory:
        """The run history (admission by time left)."""
        return self.ctx.run_history

    @property
    def warmer(self) -> Warmer | None:
        """The warm successor's warmer (None: none started)."""
        return self.ctx.warmer

    @property
    def salloc_log(self) -> Path:
        """salloc's output beside the state file."""
        return self.ctx.salloc_log

    # The memory, as the machine's attributes (public API, as before) ------------------
    @property
    def alloc(self) -> AllocState | None:
        """The allocation of the state file (None: none, or dropped)."""
        return self.mem.alloc

    @alloc.setter
    def alloc(self, alloc: AllocState | None) -> None:
        self.mem.alloc = alloc

    @property
    def notes(self) -> list[str]:
        """Steps skipped, waits, replacements... in words (the report's notes)."""
        return self.mem.notes

    @property
    def warnings(self) -> list[str]:
        """What went wrong but did not stop step 0 (the report's warnings)."""
        return self.mem.warnings

    @property
    def handoff(self) -> HandoffState:
        """The warm successor's hand-off memory (:mod:`slurm_fsm.handoff`)."""
        return self.mem.handoff

    @property
    def container_setup(self) -> str | None:
        """How step 0 came by its container: :data:`SETUP_COLD` (imported, installed),
        :data:`SETUP_REUSED` (the node's, same setup key), :data:`SETUP_SHARED` (a live
        allocation's on the same nodes), :data:`SETUP_CACHED` (the image cache's);
        None: no container set up by this machine."""
        return self.mem.container_setup

    @property
    def cache_write_s(self) -> float | None:
        """Seconds of the export of the installed container to the image cache (a part
        of the Installing state's time, said apart); None: nothing exported."""
        return self.mem.cache_write_s

    @property
    def failure(self) -> Failure | None:
        """Why step 0 failed (None: it did not)."""
        return self.mem.failure

    @failure.setter
    def failure(self, failure: Failure | None) -> None:
        self.mem.failure = failure

    @property
    def released_job_id(self) -> str | None:
        """The allocation a release (0A) cancelled."""
        return self.mem.released_job_id

    @property
    def salloc_requested(self) -> bool:
        """This machine asked for an allocation (0E's salloc, or adopted another run's
        request): only then is :attr:`salloc_log` this run's to quote in a report."""
        return self.mem.salloc_requested

    unreachable_retries = _policy_option("unreachable_retries")
    pending_wait_s = _policy_option("pending_wait_s")
    alloc_wait_s = _policy_option("alloc_wait_s")
    pending_report_s = _policy_option("pending_report_s")
    setup_timeout_s = _policy_option("setup_timeout_s")
    orphan_grace_s = _policy_option("orphan_grace_s")

    # Triggers -------------------------------------------------------------------------
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
        Running. It does not start the job: the machine holds the allocation, the job
        is its caller's (:attr:`next_step` says how to run it)."""
        return self._fire("run")

    @property
    def next_step(self) -> str:
        """What to call next, in one sentence (shown under the notebook's diagram):
        the trigger of the current state, and in Running how to run the job, which
        the machine never starts itself. No Slurm call."""
        return view.next_step(self.state, self.alloc, self.spec)

    def start_gpu_check(self) -> None:
        """Begin step 1's GPU check now, in the background, on a Ready allocation (a
        no-op otherwise, or when the job asks no GPU): the caller starts its lease step
        meanwhile, and :meth:`run`'s pre-flight takes this check's answer, or its
        error, as its own. Call it once what a dead run left is stopped (the check
        would see its GPU processes). :func:`slurm_fsm.step0.checks.start_gpu_check`."""
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
        the internal ``fail``), in table order, each judged on the last observation.

        A trigger observes afresh before the table chooses: an edge whose trigger did not
        make the last observation in this state is marked ``stale`` (printed with ``?`` for
        every value and no ``=>``). No Slurm call.
        """
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
        return user_of(self.ctx, self.mem)

    @property
    def path(self) -> list[str]:
        """States visited, starting with the initial one."""
        if not self.history:
            return [self.state.value]
        return [self.history[0].source] + [t.dest for t in self.history]

    def setup_seconds(self) -> dict[str, float]:
        """Seconds of step 0's setup work, by part (:func:`slurm_fsm.step0.view.setup_seconds`:
        ``queue_wait_s``, ``import_s`` or what was done instead, ``install_s``,
        ``cache_write_s``); only the states visited."""
        return view.setup_seconds(self.history, self.container_setup, self.cache_write_s)

    def lead_history(self) -> list[Transition]:
        """The history as a measure of what setting up an allocation takes (the run
        history's lead-time parts, :func:`slurm_fsm.step0.view.lead_history`)."""
        return view.lead_history(self.history, self.container_setup)

    def setup_note(self) -> str | None:
        """One line for the report's notes: which path step 0's container took and how
        long each part took (None: no container set up by this run)."""
        return view.setup_note(self.setup_seconds(), self.container_setup, self.alloc,
                               self.spec)

    def prepare(self, *, within: frozenset[State] = IN_PROGRESS,
                until: Callable[[Step0Outcome], bool] | None = None) -> Step0Outcome:
        """Run step 0 to its end (Ready, Released or Failed) under the state-file lock:
        :meth:`start`, then :meth:`advance` while the state is one of ``within`` (every
        in-progress state; the warmer passes its own few), stopping early when
        ``until`` (asked with :meth:`outcome` after each trigger) says so
        (``slurm-fsm plan`` stops at a PENDING allocation, the warmer when the
        successor is gone). What it ended with: :meth:`outcome`."""
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
        :meth:`prepare` returns, and what a caller reads after :meth:`run` or
        :meth:`finish`, instead of the machine's fields."""
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
        """Add one line to the notes (the caller's own: how long the job waited for
        its successor or its GPUs, how step 0's container was set up), in the order
        it happens among the machine's."""
        self.notes.append(text)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state file's lock (two orchestrators never allocate twice).

        Re-entrant: :meth:`prepare` holds it around its triggers, and every trigger of
        step 0 takes it, so hand-stepping in a notebook is as safe as :meth:`prepare`
        (a :class:`~slurm_fsm.state.StateLockTimeout` from a trigger means another
        run holds it; nothing was done). Between two hand-stepped triggers the lock
        is free: hold ``with m.locked():`` around them to keep it.

        A machine whose run holds a lease (``leases.own`` set) and does not hold the
        lock already refuses (RuntimeError, a bug): a release or a replacement holds
        the lock while it waits for the leases, so a lease holder that waited for
        the lock would wait for itself."""
        if self.leases is not None and self.leases.own is not None \
                and not self.store.holds_lock():
            raise RuntimeError("a run that holds a lease never waits for the state file's "
                               "lock (a release waiting for that lease holds it)")
        # run_many's runs take step 0 in turn: a wait for a sibling is not "another run"
        batch = validate.in_batch(self.ctx)
        with self.store.locked(on_wait=self._waiting, siblings_quiet=batch):
            if self.store.unlocked and self.store.unlocked not in self.warnings:
                self.warnings.append(self.store.unlocked)
            yield

    def estimate(self) -> Estimate:
        """The job's expected duration (admission by time left), read once from the spec
        and the run history (:func:`slurm_fsm.step0.validate.estimate`)."""
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
        """The mermaid diagram of the part the machine is in (:class:`DiagramPart`: the
        design card's states, or an opt-in part) with the current state highlighted."""
        return view.diagram(self.edges, self.state)

    def _repr_markdown_(self) -> str:
        """A notebook shows the machine as its diagram, the current state marked."""
        return view.markdown(self.edges, self.state, self.alloc, self.spec)

    def __repr__(self) -> str:
        return f"<AllocationMachine {self.state.value} {self.spec.job_name}>"

    # The table, as transitions calls it ------------------------------------------------
    def _holds(self, edge: Edge, _event: EventData) -> bool:
        return edge.holds(self.observation, self.spec)

    def _take(self, edge: Edge, _event: EventData) -> None:
        """The edge is chosen: execute its effects (before the state changes)."""
        self._taken = edge
        self._applied = [effect for effect in edge.effects if self._effect(effect)]

    def _effect(self, effect: Effect) -> bool:
        """Carry out one effect of the chosen edge
        (:data:`slurm_fsm.step0.effects.EFFECT_WORK`); False when there was nothing to
        do (no allocation to cancel, a nodelist already complete, no job to warn about)."""
        return effects.EFFECT_WORK[effect](self.ctx, self.mem, self.observation, self.state)

    def request_size(self) -> RequestSize:
        """What ``salloc`` asks for this spec (:func:`slurm_fsm.step0.allocate.request_size`);
        step 0E and the warm successor ask alike."""
        return allocate.request_size(self.ctx)

    # Bookkeeping ----------------------------------------------------------------------
    def _waiting(self, text: str) -> None:
        """A wait (the state file's lock, a PENDING allocation): said, and in the
        report's notes."""
        self._log(text)
        self.notes.append(text)

    def _warn(self, text: str) -> None:
        """A warning, kept once and said (:func:`slurm_fsm.step0.context.warn`)."""
        warn(self.ctx, self.mem, text)

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
            source=str(source), dest=str(dest), reason=reason, edge=edge,
        ))
        if self.state is State.Failed and self.failure is None:  # defensive: always recorded
            self.failure = Failure(source or "?", reason or "failed")
        self._log(f"[{source} -> {dest}] {reason}")

    def _on_exception(self, event: EventData) -> None:
        """An effect raised (the work's errors are caught in the trigger)."""
        error = event.error
        if error is None:  # pragma: no cover - transitions always sets it here
            return
        if not isinstance(error, SlurmFsmError | OSError):
            raise error  # a bug: do not hide it behind a Failed state
        self._fail_with(error)

    def _fail_with(self, error: BaseException) -> None:
        step = self.state.value
        kept = self.store.exists()
        if isinstance(error, AllocationFailed) and error.stderr_tail:
            message = f"{error}"
        elif isinstance(error, BackendError | SetupFailed | NotOurJobError | PreflightFailed):
            message = str(error)
        else:
            message = f"{type(error).__name__}: {error}"
        self.failure = Failure(step, message, error, state_file_kept=kept)
        self._taken = None
        self._applied = []
        self._model.fail()  # type: ignore[attr-defined]  # bound by transitions

