"""Step 0 of procedure.md as an explicit finite-state machine.

Theory of operation
-------------------

Everything that decides *where the allocation goes next* lives in this module,
and this module runs no command line: every Slurm operation goes through the
injected :class:`~slurm_fsm.backend.SlurmBackend`.

* The states are :class:`State`. The in-progress states (Validating, Expiring,
  Incompatible, Allocating, Importing, Installing) each own one piece of work.
* The trigger ``advance`` does the current state's work (one Slurm
  interaction, in the ``prepare_event`` callback), stores what it saw in
  :attr:`AllocationMachine.seen`, and the first edge of :data:`EDGES` whose
  conditions hold picks the next state. Conditions are small pure functions of
  typed backend results and the spec (the ``is_*`` / ``job_*`` functions below).
* ``start`` leaves NoState (reading the state file), ``release`` is step 0A,
  ``run``/``finish`` bracket a job on a Ready allocation.
* An exception raised by the work is routed into :attr:`State.Failed` with a
  :class:`Failure` that says which step failed and whether the state file was
  kept. A trigger that is not legal in the current state raises
  :class:`transitions.MachineError` and changes nothing.

Drive it one trigger at a time (a notebook)::

    m = AllocationMachine(spec, backend)
    m.start(); m.state            # State.Validating
    m.advance(); m.state          # State.Ready
    m.history                     # [Transition(...), ...]

or to the end of step 0 with :meth:`AllocationMachine.prepare`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

import attrs
from transitions import EventData, Machine, MachineError

from slurm_fsm.backend import (
    AllocationRequest,
    ContainerOptions,
    GpuProcess,
    JobInfo,
    SlurmBackend,
    StepRequest,
    StepResult,
)
from slurm_fsm.clock import Clock, SystemClock, backoff
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    CommandTimedOut,
    ContainerSupportMissing,
    ControllerUnreachable,
    JobNotFound,
    NotOurJobError,
    SlurmFsmError,
    StateFileError,
)
from slurm_fsm.ownership import Ownership, checkout_tag, describe, ownership
from slurm_fsm.spec import DEFAULT_JOB_NAME_SUFFIX, JobSpec
from slurm_fsm.state import AllocState, StateStore

__all__ = [
    "EDGES",
    "AllocationMachine",
    "Edge",
    "Failure",
    "MachineError",
    "Seen",
    "SetupFailed",
    "State",
    "Transition",
    "dot_diagram",
    "incompatibilities",
    "is_compatible",
    "is_ours",
    "job_expiring",
    "mermaid_diagram",
    "owner_of",
    "remaining_after",
    "repo_tag",
    "same_container",
    "state_job_names",
]

#: An allocation with this much time left or less is not reused (procedure 0C).
EXPIRY_MARGIN_S = 300

#: pip installs of step 0E/0F, run in ``repo_root`` inside the writable container.
INSTALL_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pip install -e .", ("pip", "install", "-e", ".")),
    ("pip install -r requirements-dev.txt", ("pip", "install", "-r", "requirements-dev.txt")),
)
EVAL_REQUIREMENTS = "examples/trtllm-eval/requirements.txt"


class State(Enum):
    """The allocation states of the design card, plus Failed."""

    NoState = "NoState"
    Validating = "Validating"
    Expiring = "Expiring"
    Incompatible = "Incompatible"
    Allocating = "Allocating"
    Importing = "Importing"
    Installing = "Installing"
    Ready = "Ready"
    Running = "Running"
    Gone = "Gone"  # the allocation ended under a running job (scancel, time limit)
    Released = "Released"
    Failed = "Failed"


class SetupFailed(SlurmFsmError):
    """A setup command (import, mount warm-up, install) exited non-zero."""

    def __init__(self, what: str, result: StepResult) -> None:
        self.what = what
        self.result = result
        text = result.stderr.strip() or result.stdout.strip()
        tail = text[-2000:]
        if len(text) > len(tail):  # whole lines only
            tail = tail.split("\n", 1)[-1]
        super().__init__(f"{what} failed with exit code {result.exit_code}:\n{tail}")

    @property
    def output(self) -> str:
        """Everything the step printed (stderr, then stdout)."""
        return self.result.stderr + self.result.stdout


@attrs.frozen
class Transition:
    """One entry of the machine's history."""

    at: str
    trigger: str
    source: str
    dest: str
    reason: str


@attrs.frozen
class Failure:
    """Why the machine is in Failed."""

    step: str  # the state whose work failed, e.g. "Allocating"
    message: str
    error: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    state_file_kept: bool = True


@attrs.define
class Seen:
    """What the last piece of work observed; conditions read only this and the spec."""

    info: JobInfo | None = None
    at: float = 0.0  # clock time of ``info``
    gone: bool = False
    unreachable: bool = False
    error: str = ""
    state_file: AllocState | None = None
    state_file_problem: str = ""
    owner: Ownership | None = None  # whose ``info`` is (slurm_fsm.ownership)


# --------------------------------------------------------------------------------------
# Conditions: pure functions of typed values.


def job_expiring(info: JobInfo, margin_s: int = EXPIRY_MARGIN_S) -> bool:
    """True when the allocation has ``margin_s`` seconds or less left."""
    return info.time_left.is_finite and (info.time_left.seconds or 0) <= margin_s


def incompatibilities(alloc: AllocState, spec: JobSpec) -> list[str]:
    """Why the allocation cannot serve the spec, one line per rule broken: same
    partition, at least as many nodes, same image (procedure 0C); also the same account
    (hours are charged to it) and, when the spec asks for GPUs per node, at least as
    many. ``[]`` means compatible."""
    p = spec.slurm_params
    out = []
    if alloc.partition != p.partition:
        out.append(f"partition {p.partition!r} is not the allocation's {alloc.partition!r}")
    if alloc.account != p.account:
        out.append(f"account {p.account!r} is not the allocation's {alloc.account!r}")
    if alloc.nodes < p.nodes:
        out.append(f"nodes {p.nodes} is more than the allocation's {alloc.nodes}")
    if (alloc.docker_image or None) != (spec.docker_image or None):
        out.append(f"docker_image {spec.docker_image!r} is not the allocation's "
                   f"{alloc.docker_image!r}")
    if p.gpus_per_node is not None and (alloc.gpus_per_node or 0) < p.gpus_per_node:
        out.append(f"gpus_per_node {p.gpus_per_node} is more than the allocation's "
                   f"{alloc.gpus_per_node or 0}")
    return out


def is_compatible(alloc: AllocState, spec: JobSpec) -> bool:
    """No rule of :func:`incompatibilities` is broken."""
    return not incompatibilities(alloc, spec)


def same_container(alloc: AllocState, spec: JobSpec) -> bool:
    """The allocation already holds the spec's named container (or none is needed)."""
    return spec.docker_image is None or alloc.container_name == spec.container_name


def owner_of(info: JobInfo, user: str, spec: JobSpec,
             names: Collection[str] | None = None) -> Ownership:
    """Whose ``info`` is, seen from ``spec``'s checkout: :func:`slurm_fsm.ownership.ownership`
    with this checkout's tag; ``names`` (default: the spec's job name) are the names an
    untagged job of ours may carry."""
    return ownership(info, user=user, tag=repo_tag(spec),
                     names=names if names is not None else {spec.job_name})


def is_ours(info: JobInfo, user: str, spec: JobSpec,
            names: Collection[str] | None = None) -> bool:
    """Ours to reuse, cancel or release: this checkout's tag whatever the job name, or
    untagged under one of ``names`` (see :mod:`slurm_fsm.ownership`)."""
    return owner_of(info, user, spec, names).ours


def state_job_names(alloc: AllocState | None, spec: JobSpec) -> set[str]:
    """Names an allocation of this state file may carry: the spec's, and the default
    name of the account the state file was written for (the spec's account changed)."""
    names = {spec.job_name}
    if alloc is not None and spec.alloc_job_name is None:
        names.add(f"{alloc.account}{DEFAULT_JOB_NAME_SUFFIX}")
    return names


def repo_tag(spec: JobSpec) -> str:
    """The ``--comment`` of this checkout's allocations: which repo root they serve."""
    return checkout_tag(spec.repo_root)


def remaining_after(info: JobInfo, seen_at: float, now: float) -> Duration:
    """``%L`` as observed at ``seen_at``, aged to ``now``."""
    if not info.time_left.is_finite:
        return info.time_left
    return Duration.of_seconds(max(0, (info.time_left.seconds or 0) - int(now - seen_at)))


# --------------------------------------------------------------------------------------
# The edges, top to bottom as the procedure's branches. The first edge whose
# conditions all hold (and whose ``unless`` do not) is taken.


@attrs.frozen
class Edge:
    trigger: str
    source: State | str  # "*" for every state
    dest: State
    conditions: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    step: str = ""
    doc: str = ""


S = State
EDGES: tuple[Edge, ...] = (
    # 0A release
    Edge("release", S.NoState, S.Released, step="0A", doc="release: verify owner, scancel"),
    Edge("release", S.Ready, S.Released, step="0A", doc="release: verify owner, scancel"),
    # 0C / 0D
    Edge("start", S.NoState, S.Validating, ("has_state_file",), step="0C", doc="state file"),
    Edge("start", S.NoState, S.Allocating, step="0D", doc="no state file"),
    Edge("advance", S.Validating, S.NoState, ("job_gone",), step="0C",
         doc="job gone: state file deleted"),
    Edge("advance", S.Validating, S.Validating, ("controller_unreachable", "retries_left"),
         step="0C", doc="controller unreachable: retry with backoff"),
    Edge("advance", S.Validating, S.Failed, ("controller_unreachable",), step="0C",
         doc="controller unreachable: give up, state file kept"),
    Edge("advance", S.Validating, S.NoState, unless=("job_is_ours",), step="0C",
         doc="job id names a job that is not ours (another user, another checkout's "
             "tag, untagged under another name): state dropped, never cancelled"),
    Edge("advance", S.Validating, S.Validating, ("job_pending", "pending_wait_left"),
         step="0C", doc="allocation still pending: wait, do not cancel"),
    Edge("advance", S.Validating, S.Failed, ("job_pending",), step="0C",
         doc="allocation pending too long: state file kept"),
    Edge("advance", S.Validating, S.Expiring, ("job_running", "job_expiring"), step="0C",
         doc="<= 5 min left"),
    Edge("advance", S.Validating, S.Incompatible, unless=("job_running",), step="0C",
         doc="not RUNNING"),
    Edge("advance", S.Validating, S.Incompatible, unless=("is_compatible",), step="0C",
         doc="params incompatible"),
    Edge("advance", S.Validating, S.Incompatible, unless=("same_job_name",), step="0C",
         doc="ours under another job name (alloc_job_name changed)"),
    Edge("advance", S.Validating, S.Ready, ("same_container", "setup_complete"), step="0C/0F",
         doc="reuse"),
    Edge("advance", S.Validating, S.Importing, unless=("same_container",), step="0F",
         doc="other container"),
    Edge("advance", S.Validating, S.Installing, step="0F", doc="install not finished"),
    Edge("advance", S.Expiring, S.Allocating, step="0C", doc="scancel, delete state"),
    Edge("advance", S.Incompatible, S.Allocating, step="0C", doc="scancel, delete state"),
    # 0D + 0E
    Edge("advance", S.Allocating, S.Importing, ("has_image",), step="0E",
         doc="granted; image set"),
    Edge("advance", S.Allocating, S.Ready, step="0E", doc="granted; no image: setup skipped"),
    Edge("advance", S.Importing, S.Installing, ("installs",), step="0E/0F",
         doc="imported, mounts warm, GPUs checked"),
    Edge("advance", S.Importing, S.Ready, step="0E/0F", doc="imported; install skipped"),
    Edge("advance", S.Installing, S.Ready, step="0E/0F", doc="installed; state file written"),
    # Step 1
    Edge("run", S.Ready, S.Running, step="1", doc="pre-flight: time left, GPUs"),
    Edge("finish", S.Running, S.Gone, ("job_gone",), step="3-5",
         doc="the allocation ended under the job: state file dropped"),
    Edge("finish", S.Running, S.Ready, step="3-5", doc="job finished; allocation stays"),
    # failures of any work
    Edge("fail", "*", S.Failed, doc="the work of the current state failed"),
)

IN_PROGRESS = frozenset(
    {S.Validating, S.Expiring, S.Incompatible, S.Allocating, S.Importing, S.Installing}
)
FINAL = frozenset({S.Ready, S.Gone, S.Released, S.Failed})


class _SkipBindingFilter(logging.Filter):
    """transitions logs a warning for every helper it does not bind under
    ``model_override=True`` (``is_<State>``, ``trigger``...): expected here, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "due to model override policy" not in record.getMessage()


logging.getLogger("transitions.core").addFilter(_SkipBindingFilter())


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class AllocationMachine:
    """The model of the transitions machine: one persistent allocation for one spec.

    Triggers (added by transitions): ``start()``, ``advance()``, ``release()``,
    ``run()``, ``finish()``; ``may_<trigger>()`` tells whether one is legal now.
    """

    state: State

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
    ) -> None:
        self.spec = spec
        self.salloc_log = salloc_log or spec.salloc_log
        self.backend = backend
        self.clock: Clock = clock or SystemClock()
        self.store = store or StateStore(spec.state_path)
        self._log = log or (lambda _msg: None)
        self.unreachable_retries = unreachable_retries
        self.pending_wait_s = pending_wait_s
        self.alloc_wait_s = alloc_wait_s
        self.pending_report_s = pending_report_s
        self.setup_timeout_s = setup_timeout_s
        self._user = user
        self.alloc: AllocState | None = None
        self.seen = Seen()
        self.history: list[Transition] = []
        self.messages: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []  # steps skipped and why
        self.failure: Failure | None = None
        self.released_job_id: str | None = None  # set by release (0A)
        self._attempt = 0
        self._pending_since: float | None = None
        self._pending_polls = 0
        self._cancelled: set[str] = set()
        self._reason = ""
        self.machine = Machine(
            model=self,
            states=State,
            initial=State.NoState,
            auto_transitions=False,
            queued=True,
            send_event=True,
            prepare_event="_work",
            after_state_change="_record",
            on_exception="_on_exception",
            model_override=True,
        )
        for e in EDGES:
            self.machine.add_transition(
                e.trigger,
                e.source,
                e.dest,
                conditions=list(e.conditions),
                unless=list(e.unless),
            )

    # Trigger stubs (transitions overrides them; model_override=True). -----------------
    def start(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def advance(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def release(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def run(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def finish(self, reason: str = "", allocation_gone: bool = False) -> bool:
        raise NotImplementedError  # pragma: no cover

    def fail(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def may_start(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def may_advance(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def may_release(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def may_run(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    def may_finish(self) -> bool:
        raise NotImplementedError  # pragma: no cover

    # Driving ------------------------------------------------------------------------
    @property
    def user(self) -> str:
        if self._user is None:
            self._user = self.backend.current_user()
        return self._user

    @property
    def path(self) -> list[str]:
        """States visited, starting with the initial one."""
        if not self.history:
            return [self.state.value]
        return [self.history[0].source] + [t.dest for t in self.history]

    def prepare(self) -> State:
        """Run step 0 to its end (Ready, Released or Failed) under the state-file lock."""
        with self.locked():
            if self.spec.release_allocation:
                self.release()
                return self.state
            while self.state in IN_PROGRESS or self.state is S.NoState:
                if self.state is S.NoState:
                    self.start()
                else:
                    self.advance()
            return self.state

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state file's lock (two orchestrators never allocate twice)."""
        with self.store.locked(on_wait=self._log):
            yield

    def info_now(self) -> tuple[JobInfo | None, Duration | None]:
        """The last job row seen and the time left it implies now (no Slurm call)."""
        info = self.seen.info
        if info is None:
            return None, None
        return info, remaining_after(info, self.seen.at, self.clock.now())

    # Conditions (thin wrappers over the pure functions, named for the diagram) --------
    def has_state_file(self, _: EventData) -> bool:
        return self.seen.state_file is not None

    def job_gone(self, _: EventData) -> bool:
        return self.seen.gone

    def controller_unreachable(self, _: EventData) -> bool:
        return self.seen.unreachable

    def retries_left(self, _: EventData) -> bool:
        return self._attempt <= self.unreachable_retries

    def job_pending(self, _: EventData) -> bool:
        return self.seen.info is not None and self.seen.info.state in ("PENDING", "CONFIGURING")

    def pending_wait_left(self, _: EventData) -> bool:
        since = self._pending_since
        return since is None or self.clock.now() - since < self.pending_wait_s

    def job_is_ours(self, _: EventData) -> bool:
        return self.seen.info is not None and self.seen.owner is not None and self.seen.owner.ours

    def same_job_name(self, _: EventData) -> bool:
        return self.seen.info is not None and self.seen.info.name == self.spec.job_name

    def job_running(self, _: EventData) -> bool:
        return self.seen.info is not None and self.seen.info.state == "RUNNING"

    def job_expiring(self, _: EventData) -> bool:
        return self.seen.info is not None and job_expiring(self.seen.info)

    def is_compatible(self, _: EventData) -> bool:
        return self.alloc is not None and is_compatible(self.alloc, self.spec)

    def same_container(self, _: EventData) -> bool:
        return self.alloc is not None and same_container(self.alloc, self.spec)

    def setup_complete(self, _: EventData) -> bool:
        a = self.alloc
        return a is not None and (a.installed or self.spec.docker_image is None
                                  or not self.spec.installs)

    def has_image(self, _: EventData) -> bool:
        return self.spec.docker_image is not None

    def installs(self, _: EventData) -> bool:
        return self.spec.installs

    # The work of each state (prepare_event) -----------------------------------------
    def _work(self, event: EventData) -> None:
        name = event.event.name
        self._reason = ""
        if name == "start":
            self._read_state_file()
        elif name == "release":
            self._release()
        elif name == "run":
            self._preflight()
        elif name == "finish":
            self._reason = str(event.kwargs.get("reason", "") or "job finished")
            self.seen.gone = bool(event.kwargs.get("allocation_gone", False))
            if self.seen.gone:  # scancel'd or expired under the job: nothing to reuse
                self.store.delete()
                self.alloc = None
        elif name == "advance":
            work = {
                S.Validating: self._validate,
                S.Expiring: self._drop_allocation,
                S.Incompatible: self._drop_allocation,
                S.Allocating: self._allocate,
                S.Importing: self._import,
                S.Installing: self._install,
            }.get(self.state)
            if work is not None:
                work()

    def _read_state_file(self) -> None:
        self.seen = Seen()
        problem = self.store.writable_problem()
        if problem is not None:
            # checked before anything is allocated: an allocation whose state file cannot
            # be written would be leaked by every run
            raise StateFileError(str(self.store.path), f"{problem}; the state file cannot "
                                 "be written, so nothing was allocated")
        try:
            self.alloc = self.store.read()
        except StateFileError as exc:
            self.alloc = None
            self.seen.state_file_problem = str(exc)
            self._warn(f"{exc}; handled like a missing state file")
        self.seen.state_file = self.alloc
        if self.alloc is not None:
            self._reason = f"state file names allocation {self.alloc.job_id}"
        else:
            self._reason = self.seen.state_file_problem or "no state file"

    def _validate(self) -> None:
        assert self.alloc is not None
        job_id = self.alloc.job_id
        if self.seen.unreachable:
            self.clock.sleep(backoff(self._attempt - 1, first=1.0, cap=15.0))
        elif self.seen.info is not None and self.seen.info.state in ("PENDING", "CONFIGURING"):
            self.clock.sleep(backoff(self._pending_polls, first=0.5, cap=10.0))
            self._pending_polls += 1
        keep = self.seen.state_file
        self.seen = Seen(state_file=keep)
        try:
            info = self.backend.query_job(job_id)
        except JobNotFound:
            self.seen.gone = True
            self._reason = f"allocation {job_id} is gone"
            self._log(f"Allocation {job_id} no longer exists; dropping the state file.")
            self.store.delete()
            self.alloc = None
            return
        except (ControllerUnreachable, CommandTimedOut) as exc:
            self.seen.unreachable = True
            self.seen.error = str(exc)
            self._attempt += 1
            self._reason = f"controller unreachable ({exc}); attempt {self._attempt}"
            if self._attempt > self.unreachable_retries:
                self.failure = Failure(
                    "Validating",
                    f"Slurm controller unreachable while validating allocation {job_id}: {exc}. "
                    "The state file is kept; run again when the controller is back.",
                    exc,
                    state_file_kept=True,
                )
            return
        self._attempt = 0
        if not info.is_active or info.state == "COMPLETING":
            # ending or ended (cancelled moments ago, timed out): as good as gone
            self.seen.gone = True
            self._reason = f"allocation {job_id} is {info.state}: ending, not reusable"
            self._log(f"Allocation {job_id} is {info.state}; dropping the state file.")
            self.store.delete()
            self.alloc = None
            return
        self.seen.info = info
        self.seen.at = self.clock.now()
        self._reason = f"allocation {job_id} {info.state}, {info.time_left} left"
        owner = self.seen.owner = owner_of(info, self.user, self.spec,
                                           state_job_names(self.alloc, self.spec))
        if not owner.ours:
            # never reused, never cancelled, whatever its state (a pending job of another
            # checkout is not waited for either)
            self._warn(
                f"state file names job {job_id}, but it is not ours: it is "
                f"{describe(info, owner)}, and this checkout is {repo_tag(self.spec)} of user "
                f"{self.user!r}; it is left alone (never reused, never cancelled) and the "
                "state file is dropped"
            )
            self._reason = f"job {job_id} is {owner.value}: state file dropped"
            self.store.delete()
            self.alloc = None
            return
        if info.state in ("PENDING", "CONFIGURING"):
            if self._pending_since is None:
                self._pending_since = self.clock.now()
            elif self.clock.now() - self._pending_since >= self.pending_wait_s:
                self.failure = Failure(
                    "Validating",
                    f"allocation {job_id} still {info.state} after {self.pending_wait_s:g} s "
                    f"(reason {info.reason or 'unknown'}); state file kept, not cancelled",
                )
            return
        self._pending_since = None
        if info.name != self.spec.job_name:
            self._log(f"Allocation {job_id} is this checkout's but named {info.name!r}, not "
                      f"{self.spec.job_name!r} (alloc_job_name changed): it is replaced.")
        if info.state == "RUNNING" and job_expiring(info):
            self._warn(f"Allocation expiring soon: {job_id} has {info.time_left} left.")
        if info.state == "RUNNING" and self.alloc is not None and not self.alloc.nodelist:
            # written while PENDING by a run that was interrupted: complete it
            self.alloc = attrs.evolve(self.alloc, nodelist=info.nodelist)
            self.store.write(self.alloc)

    def _drop_allocation(self) -> None:
        assert self.alloc is not None and self.seen.info is not None
        job_id = self.alloc.job_id
        self._log(f"Cancelling allocation {job_id} ({self.state.value}).")
        self.backend.cancel(job_id)
        self._cancelled.add(job_id)
        self.store.delete()
        self.alloc = None
        self._reason = f"allocation {job_id} cancelled, state file deleted"

    def _allocate(self) -> None:
        spec = self.spec
        params = spec.slurm_params
        if spec.docker_image is not None and not self.backend.has_container_support():
            raise ContainerSupportMissing(
                f"docker_image {spec.docker_image!r} is set but this Slurm has no pyxis "
                "(srun --help lacks --container-image); nothing was allocated"
            )
        # 0D: orphans: this user's jobs with this checkout's tag (whatever their name, an
        # earlier alloc_job_name included) or untagged under our job name. One squeue of
        # this user's jobs; the name is not a filter, the tag decides.
        for job in self.backend.find_jobs(None, self.user):
            if job.job_id in self._cancelled or job.state == "COMPLETING" or not job.is_active:
                continue  # already cancelled by us, or ending anyway
            owner = owner_of(job, self.user, spec)
            if owner is Ownership.OTHER_CHECKOUT and job.name == spec.job_name:
                self.notes.append(f"allocation {job.job_id} has our job name but belongs to "
                                  f"another checkout ({job.comment}); left alone")
            if not owner.ours:
                continue
            self.backend.cancel(job.job_id)
            self._cancelled.add(job.job_id)
            self._log(f"Released orphaned allocation {job.job_id} - state file was missing.")
            self._warn(f"Released orphaned allocation {job.job_id} - state file was missing.")
        self._log(
            f"No reusable allocation found. Allocating {params.nodes} node(s) on partition "
            f"{params.partition} for {spec.alloc_time_limit}."
        )
        # 0E
        self.salloc_log.parent.mkdir(parents=True, exist_ok=True)
        request = AllocationRequest(
            partition=params.partition,
            account=params.account,
            nodes=params.nodes,
            time_limit=spec.alloc_time_limit,
            job_name=spec.job_name,
            log_path=self.salloc_log,
            gpus_per_node=params.gpus_per_node,
            user=self.user,
            ntasks_per_node=params.ntasks_per_node,
            ntasks=params.ntasks,
            comment=repo_tag(spec),
        )
        job_id = self.backend.allocate(request)
        # tracked from the moment it exists: a run interrupted while it is PENDING leaves
        # a state file, and the next run waits for it (0C) instead of leaking it
        pending = AllocState(
            job_id=job_id, nodelist="", partition=params.partition, account=params.account,
            nodes=params.nodes, gpus_per_node=params.gpus_per_node,
            docker_image=spec.docker_image, container_mounts=spec.mounts_text,
            time_limit=spec.alloc_time_limit.as_slurm(), installed=False,
        )
        self.store.write(pending)
        try:
            info = self._wait_running(job_id)
        except AllocationFailed:
            self.store.delete()  # the job is gone or was cancelled: nothing to track
            raise
        self.alloc = AllocState(
            job_id=job_id,
            nodelist=info.nodelist,
            allocated_at=pending.allocated_at,
            partition=params.partition,
            account=params.account,
            nodes=params.nodes,
            container_name=None,
            gpus_per_node=params.gpus_per_node,
            docker_image=spec.docker_image,
            container_mounts=spec.mounts_text,
            time_limit=spec.alloc_time_limit.as_slurm(),
            installed=spec.docker_image is None or not spec.installs,
        )
        self.store.write(self.alloc)
        if spec.docker_image is None:
            self.notes.append(
                "no docker_image: container import, mount warm-up and install skipped"
            )
        self._reason = f"allocation {job_id} RUNNING on {info.nodelist}"

    def _wait_running(self, job_id: str) -> JobInfo:
        """Poll the new allocation until RUNNING: fast at first, then every 10 s.

        A pending reason that can never clear (:attr:`JobInfo.never_starts`) ends the
        wait at once; a long wait says why after ``pending_report_s``.
        """
        started = self.clock.now()
        attempt = 0
        reported = False
        while True:
            try:
                info = self.backend.query_job(job_id)
            except JobNotFound:
                raise AllocationFailed(
                    ["salloc"], 1, self._salloc_log_tail(),
                    f"allocation {job_id} disappeared before it started",
                ) from None
            if info.state == "RUNNING" and info.nodelist:
                self.seen = Seen(info=info, at=self.clock.now())
                return info
            if info.state not in ("PENDING", "CONFIGURING"):
                raise AllocationFailed(
                    ["salloc"], 1, self._salloc_log_tail(),
                    f"allocation {job_id} ended as {info.state} before it started",
                )
            waited = self.clock.now() - started
            if info.never_starts:
                self.backend.cancel(job_id)
                raise AllocationFailed(
                    ["salloc"], 1, "",
                    f"allocation {job_id} can never start: Slurm keeps it PENDING with "
                    f"reason {info.reason} (the request exceeds a limit of its partition, "
                    "account or QOS); cancelled. Ask for less (nodes, time) or another "
                    "partition or account",
                )
            if waited >= self.alloc_wait_s:
                self.backend.cancel(job_id)
                raise AllocationFailed(
                    ["salloc"], 1, "",
                    f"allocation {job_id} still {info.state} after {self.alloc_wait_s:g} s "
                    f"(reason {info.reason or 'unknown'}); cancelled so that it does not "
                    "start later unused",
                )
            if not reported and waited >= self.pending_report_s:
                reported = True
                self._log(f"allocation {job_id} pending for {waited:.0f} s: reason "
                          f"{info.reason or 'unknown'}, expected start "
                          f"{info.start_time or '?'}; still waiting (up to "
                          f"{self.alloc_wait_s:g} s)")
            self.clock.sleep(backoff(attempt, first=0.1, cap=10.0))
            attempt += 1

    def _salloc_log_tail(self) -> str:
        try:
            with open(self.salloc_log, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 4000))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _setup_step(self, what: str, argv: Sequence[str], container: ContainerOptions | None,
                    *, chdir: str | None = None) -> StepResult:
        assert self.alloc is not None
        result = self.backend.run_step(StepRequest(
            job_id=self.alloc.job_id,
            argv=tuple(argv),
            nodes=self.alloc.nodes,
            ntasks_per_node=1,
            container=container,
            timeout_s=self.setup_timeout_s,
            chdir=chdir,
        ))
        if result.exit_code != 0:
            raise SetupFailed(what, result)
        return result

    def _import(self) -> None:
        assert self.alloc is not None
        spec = self.spec
        name = spec.container_name or ""
        image = spec.docker_image
        self._log(f"Importing {image} as container {name!r} on {self.alloc.nodelist}.")
        # Importing is entered only when this allocation holds no container of the
        # spec's name that the state file vouches for: a new allocation, another
        # container, or one the state file does not name. pyxis would silently reuse
        # any container of that name the nodes still hold (from an earlier allocation,
        # maybe of another image): ask for a fresh one.
        self._setup_step(
            f"container import of {image}", ("true",),
            ContainerOptions(name=name, image=image, mounts=spec.mounts_text, fresh=True),
        )
        for mount in spec.container_mounts:
            self._setup_step(
                f"mount warm-up of {mount.container}", ("ls", mount.container),
                ContainerOptions(name=name, mounts=spec.mounts_text),
            )
        self._gpu_check()
        self.alloc = attrs.evolve(self.alloc, container_name=name,
                                  installed=not spec.installs)
        self.store.write(self.alloc)
        self._reason = f"container {name!r} imported on {self.alloc.nodelist}"

    def _install(self) -> None:
        assert self.alloc is not None
        spec = self.spec
        options = ContainerOptions(
            name=spec.container_name or "", mounts=spec.mounts_text, writable=True,
            workdir=str(spec.repo_root),
        )
        commands = list(INSTALL_COMMANDS)
        if (spec.repo_root / EVAL_REQUIREMENTS).exists():
            commands.append((f"pip install -r {EVAL_REQUIREMENTS}",
                             ("pip", "install", "-r", EVAL_REQUIREMENTS)))
        for what, argv in commands:
            self._log(f"Installing: {what}")
            self._setup_step(what, argv, options, chdir=str(spec.repo_root))
        self.alloc = attrs.evolve(self.alloc, installed=True)
        self.store.write(self.alloc)
        self._reason = "installed: " + "; ".join(w for w, _ in commands)

    def _gpu_check(self) -> list[GpuProcess]:
        assert self.alloc is not None
        procs = self.backend.gpu_processes(self.alloc.job_id, self.alloc.nodes)
        by_node: dict[str, list[str]] = {}
        for p in procs:
            by_node.setdefault(p.node, []).append(f"{p.pid} {p.name} ({p.used_memory})")
        for node, items in sorted(by_node.items()):
            self._warn(
                f"GPU processes found on {node}: {', '.join(items)}. "
                "These may interfere with the job."
            )
        return procs

    def _preflight(self) -> None:
        """Step 1's pre-flight. Reuses the validation's answer: no extra job query."""
        _, left = self.info_now()
        wanted = self.spec.slurm_params.time_limit
        if (left is not None and wanted is not None and wanted.is_finite and left.is_finite
                and (left.seconds or 0) < (wanted.seconds or 0)):
            self._warn(
                f"Allocation has {left} left but job expects {wanted}. "
                "The job may be killed early."
            )
        self._gpu_check()
        self._reason = f"job started on allocation {self.alloc.job_id if self.alloc else '?'}"

    def _release(self) -> None:
        """0A: cancel our allocation (after checking it is ours), drop the files."""
        if self.state is S.NoState:
            try:
                self.alloc = self.store.read()
            except StateFileError as exc:
                self._warn(f"{exc}; nothing to cancel from it")
                self.alloc = None
        alloc = self.alloc
        if alloc is None:
            self.store.delete()
            self.salloc_log.unlink(missing_ok=True)
            self._reason = "no allocation to release"
            self._log("No allocation to release.")
            return
        job_id = alloc.job_id
        try:
            info = self.backend.query_job(job_id)
        except JobNotFound:
            info = None
        if info is not None:
            owner = owner_of(info, self.user, self.spec, state_job_names(alloc, self.spec))
            if not owner.ours:
                raise NotOurJobError(
                    job_id,
                    f"it is {describe(info, owner)}, not this checkout's "
                    f"({repo_tag(self.spec)}, user {self.user!r}); the state file "
                    f"{self.store.path} is kept",
                )
            self.backend.cancel(job_id)
        self.store.delete()
        self.salloc_log.unlink(missing_ok=True)
        self.alloc = None
        self.released_job_id = job_id
        self._reason = f"Allocation {job_id} released."
        self._log(f"Allocation {job_id} released.")

    # Bookkeeping ----------------------------------------------------------------------
    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
        self._log(f"WARNING: {text}")

    def _record(self, event: EventData) -> None:
        source = event.transition.source if event.transition else ""
        dest = event.transition.dest if event.transition else ""
        reason = self._reason
        if event.event.name == "fail" and self.failure is not None:
            reason = self.failure.message
        self.history.append(Transition(
            at=_now_iso(), trigger=event.event.name, source=str(source), dest=str(dest),
            reason=reason,
        ))
        if self.state is S.Failed and self.failure is None:  # an edge to Failed on a condition
            self.failure = Failure(source or "?", reason or "failed")
        self._log(f"[{source} -> {dest}] {reason}")

    def _on_exception(self, event: EventData) -> None:
        error = event.error
        if error is None:  # pragma: no cover - transitions always sets it here
            return
        if not isinstance(error, SlurmFsmError | OSError):
            raise error  # a bug: do not hide it behind a Failed state
        step = self.state.value
        kept = self.store.exists()
        if isinstance(error, AllocationFailed) and error.stderr_tail:
            message = f"{error}"
        elif isinstance(error, BackendError | SetupFailed | NotOurJobError):
            message = str(error)
        else:
            message = f"{type(error).__name__}: {error}"
        self.failure = Failure(step, message, error, state_file_kept=kept)
        self.fail()

    # Diagram --------------------------------------------------------------------------
    @staticmethod
    def mermaid() -> str:
        """The state diagram, generated from :data:`EDGES`."""
        return mermaid_diagram(EDGES)


def _label(edge: Edge) -> str:
    parts = [edge.trigger]
    conds = list(edge.conditions) + [f"not {u}" for u in edge.unless]
    if conds:
        parts.append("[" + " and ".join(conds) + "]")
    return " ".join(parts)


def mermaid_diagram(edges: Sequence[Edge]) -> str:
    """A mermaid ``stateDiagram-v2`` of ``edges`` (the ``fail`` fan-in drawn once)."""
    lines = ["stateDiagram-v2", f"    [*] --> {S.NoState.value}"]
    for e in edges:
        if e.source == "*":
            lines.append(f"    note right of {e.dest.value}: any state --{e.trigger}--> here")
            continue
        assert isinstance(e.source, State)
        lines.append(f"    {e.source.value} --> {e.dest.value}: {_label(e)}")
    for final in (S.Ready, S.Gone, S.Released, S.Failed):
        lines.append(f"    {final.value} --> [*]")
    return "\n".join(lines) + "\n"


def dot_diagram(edges: Sequence[Edge] = EDGES) -> str:
    """The same diagram in Graphviz dot."""
    lines = ["digraph slurm_fsm {", "  rankdir=LR;", "  node [shape=box];"]
    for e in edges:
        src = "any" if e.source == "*" else e.source.value if isinstance(e.source, State) else ""
        lines.append(f'  "{src}" -> "{e.dest.value}" [label="{_label(e)}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
