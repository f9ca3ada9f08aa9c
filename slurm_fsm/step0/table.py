"""The edge table of step 0: states, observations, conditions, edges. No I/O.

Theory of operation
-------------------

Everything that decides *where the allocation goes next* is in this module, and
this module does nothing: it reads no file, runs no command and reads no clock.
:mod:`slurm_fsm.machine` does the work of each state and executes what the
table chooses.

* The states are :class:`State`.
* The work of a trigger (``start``, ``advance`` in an in-progress state, ``run``,
  ``finish``, ``release``) ends with one frozen :class:`Observation`: everything the
  conditions need, read once (one clock reading, one ``squeue``).
* A condition is a pure function of ``(observation, spec)``, registered in
  :data:`CONDITIONS` under the name the edges use.
* :data:`EDGES` lists the edges top to bottom as the procedure's branches. For a
  trigger in a state, the first edge whose ``conditions`` all hold and whose
  ``unless`` all fail is taken (:func:`choose`).
* What must happen only *because* an edge is taken (drop the state file, scancel,
  record the failure, complete the nodelist, a warning) is one of the edge's
  :class:`Effect` s; the machine executes them when, and only when, it takes that
  edge. Reordering the table therefore never leaves the state file deleted while
  the machine goes elsewhere.

Ask the table directly, with no cluster, clock or file::

    obs = Observation(trigger="advance", source=State.Validating, alloc=alloc, info=info,
                      user="me", pending_wait_left_s=600.0)
    choose("advance", State.Validating, obs, spec).dest   # State.Validating: wait
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from enum import Enum
from typing import Literal

import attrs

from slurm_fsm.backend import JobInfo
from slurm_fsm.capacity import capacity_problems
from slurm_fsm.duration import Duration
from slurm_fsm.ownership import Ownership, checkout_tag, ownership
from slurm_fsm.spec import EXPIRY_MARGIN_S, JobSpec, default_job_name
from slurm_fsm.state import AllocState
from slurm_fsm.successor import parity_names

__all__ = [
    "CONDITIONS",
    "EDGES",
    "EXPIRY_MARGIN_S",
    "IN_PROGRESS",
    "PART_STATES",
    "RULES",
    "Condition",
    "DiagramPart",
    "Edge",
    "Effect",
    "Observation",
    "State",
    "choose",
    "dot_diagram",
    "edges_from",
    "incompatibilities",
    "is_compatible",
    "is_ours",
    "job_expiring",
    "job_fits",
    "mermaid_diagram",
    "owner_of",
    "part_edges",
    "part_of_edge",
    "part_of_state",
    "remaining_after",
    "repo_tag",
    "same_container",
    "same_generation",
    "state_job_names",
]



class State(Enum):
    """The allocation states of the design card, plus Failed."""

    NoState = "NoState"
    Validating = "Validating"
    Expiring = "Expiring"
    #: RUNNING with more than the margin left, but not enough for this job's expected
    #: duration plus the margin (admission by time left): replaced, never started on it
    TooShort = "TooShort"
    Incompatible = "Incompatible"
    #: warm successor (issue 27): the time left nears the longest job + the lead time:
    #: queue the next allocation under the other name, start its warmer
    QueueingSuccessor = "QueueingSuccessor"
    #: the job does not fit the old allocation and a successor is coming: wait for it
    AwaitingSuccessor = "AwaitingSuccessor"
    #: the successor is up: the state file names it; the old one drains
    Switching = "Switching"
    Allocating = "Allocating"
    Importing = "Importing"
    Installing = "Installing"
    Ready = "Ready"
    Running = "Running"
    Gone = "Gone"  # the allocation ended under a running job (scancel, time limit)
    Released = "Released"
    Failed = "Failed"


#: The states that own a piece of work: ``advance`` does it and leaves them.
IN_PROGRESS = frozenset({State.Validating, State.Expiring, State.TooShort, State.Incompatible,
                         State.Allocating, State.Importing, State.Installing,
                         State.QueueingSuccessor, State.AwaitingSuccessor, State.Switching})


class Effect(Enum):
    """What the machine does because it takes an edge (after the table chose it,
    before the state changes). The value is what the history says was done."""

    #: delete the state file and forget the allocation (never cancels it)
    DROP_STATE_FILE = "state file dropped"
    #: ``scancel`` the allocation of the state file
    CANCEL = "allocation cancelled"
    #: record :attr:`Observation.failure` as the machine's failure
    RECORD_FAILURE = "failure recorded"
    #: write the nodelist of a RUNNING job into a state file written while PENDING
    COMPLETE_NODELIST = "nodelist completed"
    #: warn that the state file names a job that is not ours
    WARN_NOT_OURS = "not ours: left alone"
    #: warn that the allocation expires soon
    WARN_EXPIRING = "expiring soon"
    #: say that the job does not fit in the allocation's time left (admission)
    WARN_TOO_SHORT = "too little time left for the job"
    #: cancel a successor that never starts (if live) and forget its record
    DROP_SUCCESSOR = "successor dropped"
    #: release the allocation this run used, replaced by a successor, if no other run's
    #: job is on it (drain)
    RELEASE_DRAINED = "drained allocation released"


@attrs.frozen(kw_only=True)
class Observation:
    """What the work of the last trigger saw: the only input of the conditions
    (with the spec). Built once per trigger, from one clock reading."""

    #: the trigger whose work made it ("" before the first trigger)
    trigger: str = ""
    #: the state the work ran in
    source: State | None = None
    #: the injected clock's reading when it was made
    at: float = 0.0
    #: the allocation the state file names (as read by ``start``, or written since)
    alloc: AllocState | None = None
    #: why the state file could not be read (then handled like a missing one)
    state_file_problem: str = ""
    #: the job row of ``alloc`` (``squeue``), when one was read
    info: JobInfo | None = None
    #: Slurm does not know the job any more, or the caller saw it end under a job
    gone: bool = False
    #: the controller did not answer (or ``squeue`` timed out)
    unreachable: bool = False
    #: the error text when ``unreachable``
    error: str = ""
    #: how many more times an unreachable controller is retried
    retries_left: int = 0
    #: how long a PENDING allocation of the state file is still waited for (seconds)
    pending_wait_left_s: float = 0.0
    #: the Slurm user this process runs as (ownership is judged against it)
    user: str = ""
    #: one line: what was seen (the history's reason)
    summary: str = ""
    #: the failure to record if an edge with :attr:`Effect.RECORD_FAILURE` is taken
    failure: str = ""
    #: the job's expected duration in seconds (admission by time left); None: unknown,
    #: admitted by the margin alone (:func:`slurm_fsm.history.expected_duration`)
    expected_s: int | None = None
    #: where ``expected_s`` came from, in words (``expects 00:20:00 (history: ...)``)
    expected: str = ""
    #: warm successor: the time left nears the longest job + the lead time
    successor_due: bool = False
    #: the successor's state: "" (none), "pending", "running" (set-up not done),
    #: "ready", "lost" (gone, or pending for a reason waiting does not cure)
    successor: str = ""
    #: a warmer is setting the successor up now (it holds the successor's lock)
    warmer_alive: bool = False
    #: at ``finish``: the state file names another allocation than the one this run used
    replaced: bool = False
    #: the margin the job is admitted with (None: :data:`EXPIRY_MARGIN_S`); smaller on
    #: the successor the run just switched to (:data:`slurm_fsm.handoff.SWITCHED_MARGIN_S`)
    admit_margin_s: int | None = None


# --------------------------------------------------------------------------------------
# Pure helpers over typed values.


def job_expiring(info: JobInfo, margin_s: int | None = None) -> bool:
    """True when the allocation has ``margin_s`` (default :data:`EXPIRY_MARGIN_S`)
    seconds or less left."""
    margin = EXPIRY_MARGIN_S if margin_s is None else margin_s
    return info.time_left.is_finite and (info.time_left.seconds or 0) <= margin


def job_fits(info: JobInfo, expected_s: int | None, margin_s: int | None = None) -> bool:
    """Admission by time left: the allocation's time left covers the job's expected
    duration plus ``margin_s`` (default :data:`EXPIRY_MARGIN_S`). An unknown duration
    (None) or an unlimited allocation always fits."""
    margin = EXPIRY_MARGIN_S if margin_s is None else margin_s
    if expected_s is None or not info.time_left.is_finite:
        return True
    return (info.time_left.seconds or 0) >= expected_s + margin


def incompatibilities(alloc: AllocState, spec: JobSpec) -> list[str]:
    """Why the allocation cannot serve the spec, one line per rule broken: same
    partition, same image (procedure 0C); also the same account (hours are charged to
    it); and the allocation, as Slurm granted it, can hold the job: nodes, CPUs per node
    for its tasks per node, GPUs per node (:func:`slurm_fsm.capacity.capacity_problems`).
    ``[]`` means compatible."""
    p = spec.slurm_params
    out = []
    if alloc.partition != p.partition:
        out.append(f"partition {p.partition!r} is not the allocation's {alloc.partition!r}")
    if alloc.account != p.account:
        out.append(f"account {p.account!r} is not the allocation's {alloc.account!r}")
    if (alloc.docker_image or None) != (spec.docker_image or None):
        out.append(f"docker_image {spec.docker_image!r} is not the allocation's "
                   f"{alloc.docker_image!r}")
    out += capacity_problems(alloc, spec)
    return out


def is_compatible(alloc: AllocState, spec: JobSpec) -> bool:
    """No rule of :func:`incompatibilities` is broken."""
    return not incompatibilities(alloc, spec)


def same_container(alloc: AllocState, spec: JobSpec) -> bool:
    """The allocation already holds the spec's named container (or none is needed)."""
    return spec.docker_image is None or alloc.container_name == spec.container_name


def repo_tag(spec: JobSpec) -> str:
    """The ``--comment`` of this checkout's allocations: which repo root they serve."""
    return checkout_tag(spec.repo_root)


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


def same_generation(alloc: AllocState | None, info: JobInfo) -> bool:
    """``info`` is the very job the state file recorded: same id and, when both are
    known, the same submit time. Slurm reuses job ids (they wrap at MaxJobId): a job
    submitted at another time is another job, never ours to reuse or cancel."""
    recorded = alloc.submit_time if alloc is not None else None
    return not (recorded and info.submit_time and recorded != info.submit_time)


def state_job_names(alloc: AllocState | None, spec: JobSpec) -> set[str]:
    """Names an allocation of this state file may carry: the spec's, and the default
    name of the account the state file was written for (the spec's account changed)."""
    names = {spec.job_name}
    if alloc is not None and spec.alloc_job_name is None:
        names.update(default_job_name(alloc.account, spec.repo_root, warm_successor=warm)
                     for warm in (False, True))
    return names


def remaining_after(info: JobInfo, seen_at: float, now: float) -> Duration:
    """``%L`` as observed at ``seen_at``, aged to ``now``."""
    if not info.time_left.is_finite:
        return info.time_left
    return Duration.of_seconds(max(0, (info.time_left.seconds or 0) - int(now - seen_at)))


# --------------------------------------------------------------------------------------
# Conditions: pure functions of (observation, spec), named as the edges name them.

#: A condition of an edge.
Condition = Callable[[Observation, JobSpec], bool]

def _has_state_file(o: Observation, _s: JobSpec) -> bool:
    return o.alloc is not None


def _job_gone(o: Observation, _s: JobSpec) -> bool:
    # ended or ending (cancelled moments ago, timed out): as good as gone
    return o.gone or (o.info is not None and not o.info.state.is_live)


def _controller_unreachable(o: Observation, _s: JobSpec) -> bool:
    return o.unreachable


def _retries_left(o: Observation, _s: JobSpec) -> bool:
    return o.retries_left > 0


def _job_is_ours(o: Observation, s: JobSpec) -> bool:
    return (o.info is not None and is_ours(o.info, o.user, s, state_job_names(o.alloc, s))
            and same_generation(o.alloc, o.info))


def _job_pending(o: Observation, _s: JobSpec) -> bool:
    return o.info is not None and o.info.state.is_pending


def _pending_wait_left(o: Observation, _s: JobSpec) -> bool:
    return o.pending_wait_left_s > 0


def _job_running(o: Observation, _s: JobSpec) -> bool:
    return o.info is not None and o.info.state.is_running


def _job_expiring(o: Observation, _s: JobSpec) -> bool:
    return o.info is not None and job_expiring(o.info)


def _job_fits(o: Observation, _s: JobSpec) -> bool:
    return o.info is None or job_fits(o.info, o.expected_s, o.admit_margin_s)


def _is_compatible(o: Observation, s: JobSpec) -> bool:
    return o.alloc is not None and is_compatible(o.alloc, s)


def _same_job_name(o: Observation, s: JobSpec) -> bool:
    # a warm-successor checkout's allocations alternate between its two names
    names = parity_names(s.job_name) if s.warm_successor else (s.job_name,)
    return o.info is not None and o.info.name in names


def _same_container(o: Observation, s: JobSpec) -> bool:
    return o.alloc is not None and same_container(o.alloc, s)


def _setup_complete(o: Observation, s: JobSpec) -> bool:
    a = o.alloc
    return a is not None and (a.installed or s.docker_image is None or not s.installs)


def _has_image(_o: Observation, s: JobSpec) -> bool:
    return s.docker_image is not None


def _installs(o: Observation, s: JobSpec) -> bool:
    """The spec installs, and the container is not installed yet (an import that used
    the ready container of another allocation on the same nodes installed nothing)."""
    return s.installs and not (o.alloc is not None and o.alloc.installed)


def _warm_successor(_o: Observation, s: JobSpec) -> bool:
    return s.warm_successor


def _successor_due(o: Observation, _s: JobSpec) -> bool:
    return o.successor_due


def _successor_queued(o: Observation, _s: JobSpec) -> bool:
    return o.successor in ("pending", "running", "ready")


def _successor_usable(o: Observation, _s: JobSpec) -> bool:
    # set up; or RUNNING with no warmer on it (it died): this run finishes it (0F)
    return o.successor == "ready" or (o.successor == "running" and not o.warmer_alive)


def _old_too_short(o: Observation, s: JobSpec) -> bool:
    return o.info is not None and (job_expiring(o.info) or not _job_fits(o, s))


def _successor_lost(o: Observation, _s: JobSpec) -> bool:
    return o.successor == "lost"


def _replaced(o: Observation, _s: JobSpec) -> bool:
    return o.replaced


#: Every condition an edge may name, by that name.
CONDITIONS: Mapping[str, Condition] = {
    "has_state_file": _has_state_file,
    "job_gone": _job_gone,
    "controller_unreachable": _controller_unreachable,
    "retries_left": _retries_left,
    "job_is_ours": _job_is_ours,
    "job_pending": _job_pending,
    "pending_wait_left": _pending_wait_left,
    "job_running": _job_running,
    "job_expiring": _job_expiring,
    "job_fits": _job_fits,
    "is_compatible": _is_compatible,
    "same_job_name": _same_job_name,
    "same_container": _same_container,
    "setup_complete": _setup_complete,
    "has_image": _has_image,
    "installs": _installs,
    "warm_successor": _warm_successor,
    "successor_due": _successor_due,
    "successor_queued": _successor_queued,
    "successor_usable": _successor_usable,
    "old_too_short": _old_too_short,
    "successor_lost": _successor_lost,
    "replaced": _replaced,
}


def _margin(o: Observation) -> Duration:
    return Duration.of_seconds(EXPIRY_MARGIN_S if o.admit_margin_s is None
                               else o.admit_margin_s)


#: The rule a condition stands for, in words, for a reader of the history: given
#: ``(observation, spec, holds)``, why the allocation is (``holds``) or is not what the
#: condition asks. Only the conditions that send an allocation away are worded; an edge
#: says every one of them it names (:meth:`Edge.why`).
RULES: Mapping[str, Callable[[Observation, JobSpec, bool], str]] = {
    "job_running": lambda o, _s, held: "" if held or o.info is None else (
        f"allocation {o.info.job_id} is {o.info.state}, not RUNNING"),
    "job_expiring": lambda o, _s, held: "" if not held or o.info is None else (
        f"{o.info.time_left} left is not more than the {_margin(o)} margin"),
    "is_compatible": lambda o, s, held: "" if held or o.alloc is None else (
        "; ".join(incompatibilities(o.alloc, s))),
    "same_job_name": lambda o, s, held: "" if held or o.info is None else (
        f"it is named {o.info.name!r}, not {s.job_name!r}"),
    "job_fits": lambda o, _s, held: "" if held or o.info is None else (
        f"{o.info.time_left} left does not cover the job's expected duration + the "
        f"{_margin(o)} margin"),
}


def _known(_inst: object, attribute: attrs.Attribute[tuple[str, ...]],
           value: tuple[str, ...]) -> None:
    unknown = [c for c in value if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"Edge.{attribute.name}: unknown condition(s) {unknown}; "
                         f"known: {sorted(CONDITIONS)}")


# --------------------------------------------------------------------------------------
# The edges, top to bottom as the procedure's branches.


@attrs.frozen
class Edge:
    """One row of the table: ``trigger`` in ``source`` goes to ``dest`` when every
    condition holds and no ``unless`` does, doing ``effects`` on the way."""

    trigger: str
    source: State | Literal["*"]  # "*" for every state
    dest: State
    conditions: tuple[str, ...] = attrs.field(default=(), kw_only=True, validator=_known)
    unless: tuple[str, ...] = attrs.field(default=(), kw_only=True, validator=_known)
    effects: tuple[Effect, ...] = attrs.field(default=(), kw_only=True)
    step: str = attrs.field(default="", kw_only=True)
    doc: str = attrs.field(default="", kw_only=True)

    def checks(self, obs: Observation, spec: JobSpec) -> tuple[tuple[str, bool], ...]:
        """Each condition (``not name`` for an ``unless``) with whether it holds."""
        return (*((c, CONDITIONS[c](obs, spec)) for c in self.conditions),
                *((f"not {u}", not CONDITIONS[u](obs, spec)) for u in self.unless))

    def holds(self, obs: Observation, spec: JobSpec) -> bool:
        """All conditions hold and no ``unless`` does, on ``obs``."""
        return (all(CONDITIONS[c](obs, spec) for c in self.conditions)
                and not any(CONDITIONS[u](obs, spec) for u in self.unless))

    def why(self, obs: Observation, spec: JobSpec) -> str:
        """The rules this edge is taken for on ``obs``, in words (:data:`RULES`): e.g.
        "gpus_per_node 1 is more than the allocation's 0 (as granted by Slurm)" for
        Validating -> Incompatible. "" when the edge names no worded rule."""
        said = [RULES[c](obs, spec, CONDITIONS[c](obs, spec)) for c in
                (*self.conditions, *self.unless) if c in RULES]
        return "; ".join(w for w in said if w)

    @property
    def label(self) -> str:
        """``trigger [cond and not other]``, as the diagrams write it."""
        conds = [*self.conditions, *(f"not {u}" for u in self.unless)]
        return self.trigger + (" [" + " and ".join(conds) + "]" if conds else "")


S = State
_DROP = (Effect.DROP_STATE_FILE,)
_REPLACE = (Effect.CANCEL, Effect.DROP_STATE_FILE)
_KEEP = (Effect.COMPLETE_NODELIST,)
EDGES: tuple[Edge, ...] = (
    # 0A release
    Edge("release", S.NoState, S.Released, step="0A", doc="release: verify owner, scancel"),
    Edge("release", S.Ready, S.Released, step="0A", doc="release: verify owner, scancel"),
    # 0C / 0D
    Edge("start", S.NoState, S.Validating, conditions=("has_state_file",), step="0C",
         doc="state file"),
    Edge("start", S.NoState, S.Switching, conditions=("warm_successor", "successor_queued"),
         step="0C", doc="no state file, a successor queued: it becomes the allocation"),
    Edge("start", S.NoState, S.Allocating, step="0D", doc="no state file"),
    Edge("advance", S.Validating, S.NoState, conditions=("job_gone",), effects=_DROP,
         step="0C", doc="job gone: state file deleted"),
    Edge("advance", S.Validating, S.Validating,
         conditions=("controller_unreachable", "retries_left"),
         step="0C", doc="controller unreachable: retry with backoff"),
    Edge("advance", S.Validating, S.Failed, conditions=("controller_unreachable",),
         effects=(Effect.RECORD_FAILURE,), step="0C",
         doc="controller unreachable: give up, state file kept"),
    Edge("advance", S.Validating, S.NoState, unless=("job_is_ours",),
         effects=(Effect.WARN_NOT_OURS, Effect.DROP_STATE_FILE), step="0C",
         doc="job id names a job that is not ours (another user, another checkout's "
             "tag, untagged under another name): state dropped, never cancelled"),
    Edge("advance", S.Validating, S.Validating, conditions=("job_pending", "pending_wait_left"),
         step="0C", doc="allocation still pending: wait, do not cancel"),
    Edge("advance", S.Validating, S.Failed, conditions=("job_pending",),
         effects=(Effect.RECORD_FAILURE,), step="0C",
         doc="allocation pending too long: state file kept"),
    # the warm successor (issue 27; only with the spec's warm_successor): never cold
    Edge("advance", S.Validating, S.Validating, conditions=("warm_successor", "successor_lost"),
         effects=(Effect.DROP_SUCCESSOR,), step="0C",
         doc="successor gone, never starts or granted another shape: cancel it, "
             "report, today's path"),
    Edge("advance", S.Validating, S.Switching,
         conditions=("warm_successor", "job_running", "successor_usable"), step="0C/0F",
         doc="successor ready (or running, its warmer dead: its setup finished here, 0F): "
             "new jobs go to it (most time left); the old one drains"),
    Edge("advance", S.Validating, S.AwaitingSuccessor,
         conditions=("warm_successor", "job_running", "successor_queued", "old_too_short"),
         step="0C", doc="the job does not fit the old one (or <= 5 min left), successor "
                        "coming: wait for it, never a cold replacement"),
    Edge("advance", S.Validating, S.QueueingSuccessor,
         conditions=("warm_successor", "job_running", "successor_due", "is_compatible",
                     "same_job_name"), unless=("successor_queued",), step="0C",
         doc="time left <= longest job + lead time + 5 min: queue the successor"),
    Edge("advance", S.Validating, S.Expiring, conditions=("job_running", "job_expiring"),
         effects=(Effect.WARN_EXPIRING,), step="0C", doc="<= 5 min left"),
    Edge("advance", S.Validating, S.Incompatible, unless=("job_running",), step="0C",
         doc="not RUNNING"),
    Edge("advance", S.Validating, S.Incompatible, unless=("is_compatible",), step="0C",
         doc="params incompatible"),
    Edge("advance", S.Validating, S.Incompatible, unless=("same_job_name",), step="0C",
         doc="ours under another job name (alloc_job_name changed)"),
    # admission by time left. The warm successor (issue 27, next part) adds its edges
    # before this one: a ready successor that fits -> reuse it; one still warming ->
    # wait for it. Until then a job that does not fit replaces the allocation (after
    # the other runs' jobs on it end: the lease gate), never starts on it.
    Edge("advance", S.Validating, S.TooShort, unless=("job_fits",),
         effects=(Effect.WARN_TOO_SHORT,), step="0C",
         doc="time left < the job's expected duration + 5 min: not started on it"),
    Edge("advance", S.Validating, S.Ready, conditions=("same_container", "setup_complete"),
         effects=_KEEP, step="0C/0F", doc="reuse"),
    Edge("advance", S.Validating, S.Importing, unless=("same_container",), effects=_KEEP,
         step="0F", doc="other container"),
    Edge("advance", S.Validating, S.Installing, effects=_KEEP, step="0F",
         doc="install not finished"),
    Edge("advance", S.Expiring, S.Allocating, effects=_REPLACE, step="0C",
         doc="scancel, delete state"),
    Edge("advance", S.TooShort, S.Allocating, effects=_REPLACE, step="0C",
         doc="other runs' jobs ended: scancel, delete state"),
    Edge("advance", S.Incompatible, S.Allocating, effects=_REPLACE, step="0C",
         doc="scancel, delete state"),
    # 0D + 0E
    Edge("advance", S.Allocating, S.Importing, conditions=("has_image",), step="0E",
         doc="granted; image set"),
    Edge("advance", S.Allocating, S.Ready, step="0E", doc="granted; no image: setup skipped"),
    Edge("advance", S.Importing, S.Installing, conditions=("installs",), step="0E/0F",
         doc="imported, mounts warm, GPUs checked"),
    Edge("advance", S.Importing, S.Ready, step="0E/0F", doc="imported; install skipped"),
    Edge("advance", S.Installing, S.Ready, step="0E/0F", doc="installed; state file written"),
    # Step 1
    Edge("run", S.Ready, S.Running, step="1", doc="pre-flight: time left, GPUs"),
    Edge("finish", S.Running, S.Gone, conditions=("job_gone",), effects=_DROP, step="3-5",
         doc="the allocation ended under the job: state file dropped"),
    Edge("finish", S.Running, S.Ready, conditions=("warm_successor", "replaced"),
         effects=(Effect.RELEASE_DRAINED,), step="3-5",
         doc="job finished on a replaced allocation: released if no other run's job is on it"),
    Edge("finish", S.Running, S.Ready, step="3-5", doc="job finished; allocation stays"),
    # the warm successor's own states
    Edge("advance", S.QueueingSuccessor, S.Validating, step="0C",
         doc="successor queued (other name, singleton), warmer started: validate again"),
    Edge("advance", S.AwaitingSuccessor, S.Switching, conditions=("successor_usable",),
         step="0C/0F", doc="successor ready, or running with its warmer gone (0F here)"),
    Edge("advance", S.AwaitingSuccessor, S.Validating, conditions=("successor_lost",),
         effects=(Effect.DROP_SUCCESSOR,), step="0C",
         doc="successor gone, never starts or granted another shape: cancel it, "
             "report, today's path"),
    Edge("advance", S.AwaitingSuccessor, S.AwaitingSuccessor,
         conditions=("pending_wait_left",), step="0C",
         doc="wait: the successor's pending reason and estimated start"),
    Edge("advance", S.AwaitingSuccessor, S.Failed, effects=(Effect.RECORD_FAILURE,),
         step="0C", doc="successor not ready in time: both allocations kept"),
    Edge("advance", S.Switching, S.Validating, effects=(Effect.RELEASE_DRAINED,), step="0C",
         doc="the state file names the successor; the old one released or draining"),
    # failures of any work
    Edge("fail", "*", S.Failed, doc="the work of the current state failed"),
)
"""The machine's table: every edge (trigger, source, destination, conditions, effects,
the procedure's step), in the order the machine tries them; the first whose conditions
hold on the observation is taken. The diagrams and docs/states.md are drawn from it."""


def edges_from(trigger: str | None, state: State,
               edges: Sequence[Edge] = EDGES) -> list[Edge]:
    """The edges of ``trigger`` (every trigger when None) that leave ``state``, in
    table order (``*`` edges included)."""
    return [e for e in edges if (trigger is None or e.trigger == trigger)
            and (e.source == state or e.source == "*")]


def choose(trigger: str, state: State, obs: Observation, spec: JobSpec,
           edges: Sequence[Edge] = EDGES) -> Edge | None:
    """The edge the table takes for ``trigger`` in ``state`` on ``obs``: the first whose
    conditions hold. None when no edge of ``trigger`` leaves ``state`` or none holds."""
    return next((e for e in edges_from(trigger, state, edges) if e.holds(obs, spec)), None)


# --------------------------------------------------------------------------------------
# Diagrams, generated from the table.

_FINAL = (S.Ready, S.Gone, S.Released, S.Failed)


class DiagramPart(Enum):
    """The drawings of the machine. The design card's states and their edges come first
    (``core``, at a page's width); each opt-in part is a drawing of its own, with the
    core states its edges touch as context. With 17 states and 42 edges in one picture
    it was several page-widths wide and opened on the successor states."""

    #: the design card's states (docs/design.md) and the machine's Failed and Gone
    CORE = "core"
    #: admission by time left: an allocation too short for the job's expected duration
    ADMISSION = "admission"
    #: the warm successor (``warm_successor: true``): the hand-off to the next allocation
    SUCCESSOR = "successor"


PART_STATES: dict[DiagramPart, frozenset[State]] = {
    DiagramPart.ADMISSION: frozenset({S.TooShort}),
    DiagramPart.SUCCESSOR: frozenset({S.QueueingSuccessor, S.AwaitingSuccessor,
                                      S.Switching}),
}
"""The states only an opt-in part has; every other state is the core's (the design
card's, plus Failed and Gone)."""


def part_of_state(state: State) -> DiagramPart:
    """The drawing ``state`` belongs to (a notebook shows the part its machine is in)."""
    return next((p for p, states in PART_STATES.items() if state in states),
                DiagramPart.CORE)


def part_of_edge(edge: Edge) -> DiagramPart:
    """The drawing ``edge`` belongs to: the successor's when it needs ``warm_successor``
    or touches a successor state, admission's when it touches TooShort, else the core's."""
    touched = {edge.dest} | ({edge.source} if edge.source != "*" else set())
    if "warm_successor" in edge.conditions or touched & PART_STATES[DiagramPart.SUCCESSOR]:
        return DiagramPart.SUCCESSOR
    if touched & PART_STATES[DiagramPart.ADMISSION]:
        return DiagramPart.ADMISSION
    return DiagramPart.CORE


def part_edges(part: DiagramPart, edges: Sequence[Edge] = EDGES
               ) -> list[tuple[int, Edge]]:
    """The edges of one drawing, with their index in ``edges`` (an arrow's id)."""
    return [(i, e) for i, e in enumerate(edges) if part_of_edge(e) is part]


def mermaid_diagram(edges: Sequence[Edge] = EDGES, current: State | None = None,
                    part: DiagramPart | None = None) -> str:
    """A mermaid ``stateDiagram-v2`` of ``edges`` (the ``fail`` fan-in drawn once);
    ``current`` is highlighted. ``part``: only that drawing's edges (a comment line
    names it: ``%% slurm_fsm part: core``)."""
    if part is not None:
        edges = [e for _, e in part_edges(part, edges)]
    drawn = {s for e in edges for s in (e.source, e.dest) if s != "*"}
    lines = ["stateDiagram-v2"]
    if part is not None:
        lines.append(f"    %% slurm_fsm part: {part.value}")
    if S.NoState in drawn:
        lines.append(f"    [*] --> {S.NoState.value}")
    for e in edges:
        if e.source == "*":
            lines.append(f"    note right of {e.dest.value}: any state --{e.trigger}--> here")
            continue
        lines.append(f"    {e.source.value} --> {e.dest.value}: {e.label}")
    for final in _FINAL:
        if final in drawn:
            lines.append(f"    {final.value} --> [*]")
    if current is not None:
        lines.append("    classDef current fill:#ffd54f,stroke:#e65100,stroke-width:3px")
        lines.append(f"    class {current.value} current")
    return "\n".join(lines) + "\n"


def dot_diagram(edges: Sequence[Edge] = EDGES) -> str:
    """The same diagram in Graphviz dot."""
    lines = ["digraph slurm_fsm {", "  rankdir=LR;", "  node [shape=box];"]
    for e in edges:
        src = "any" if e.source == "*" else e.source.value
        lines.append(f'  "{src}" -> "{e.dest.value}" [label="{e.label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
