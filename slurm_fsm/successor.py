"""The warm successor before expiry (issue 27): the rules, and the successor record.

Theory of operation
-------------------

A persistent allocation lives ``alloc_time_limit``. With ``warm_successor`` on, a run
that finds the time left near the longest expected job plus the *lead time* (what a
new allocation takes to be usable: queue wait + import + install) queues the next
allocation early, under the *other* of the checkout's two names, so that it is set up
while the old one still serves. Everything that decides is a pure function here
(table-tested in ``tests/test_successor.py``); this module runs no command, reads no
clock and knows no command line.

* **Two alternating names** (:func:`parity_names`): the checkout's job name (parity
  ``a``, today's name, so an existing allocation is parity ``a``) and the same name
  with :data:`PARITY_SUFFIX` (parity ``b``). Every allocation of a warm-successor
  checkout asks ``--dependency=singleton`` (:data:`SINGLETON`): Slurm then runs at
  most one job of each name of the user, so at most **2** allocations of the checkout
  run at once, whatever races between runs or hosts (two racing sallocs of one name
  give 1 RUNNING + 1 PENDING(Dependency); a third name never exists).
* **When to queue** (:func:`successor_due`): when the time left is at most the longest
  expected job + the lead time + :data:`~slurm_fsm.spec.EXPIRY_MARGIN_S`.
* **The lead time** (:func:`lead_time`): p90 of each measured part (``queue_wait_s``,
  ``import_s``, ``install_s``) of the run history beside the state file
  (:mod:`slurm_fsm.history` already records them, keyed by partition, nodes and
  image) + :data:`LEAD_SLACK_S`; :data:`DEFAULT_LEAD_S` when nothing was measured.
* **Drain and release** (:func:`slurm_fsm.handoff.release_drained`): an allocation that
  is no longer the one the state file names takes no new job, and is released as soon
  as no job of any run is on it: never cut under a running job, never left idle until
  its walltime.
* **The successor record** (:class:`SuccessorRecord`): a small JSON file beside the
  state file (``.slurm_fsm_successor.json``,
  :attr:`slurm_fsm.paths.StatePaths.successor_record`). It is additive: the state
  file keeps exactly the procedure's keys and names the allocation new jobs should
  use; the record only says which allocation is coming and how far its setup got
  (pending, warming, ready, failed). A bad or missing record is no record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from slurm_fsm import files
from slurm_fsm.backend import JobInfo
from slurm_fsm.convert import (
    OR_DEFAULT,
    READ_AS,
    Digits,
    NonEmptyText,
    NonNegativeJsonInt,
    PositiveJsonInt,
    Text,
    converter,
    structure_record,
)
from slurm_fsm.spec import EXPIRY_MARGIN_S
from slurm_fsm.state import AllocState

if TYPE_CHECKING:  # the run history is loaded where a lead time is computed
    from slurm_fsm.history import RunEntry

__all__ = [
    "DEFAULT_LEAD_S",
    "LEAD_SLACK_S",
    "MAX_RECORD_BYTES",
    "PARITY_SUFFIX",
    "SINGLETON",
    "LeadTime",
    "Phase",
    "Sharing",
    "SuccessorRecord",
    "SuccessorVerdict",
    "clear_successor",
    "judge_successor",
    "lead_time",
    "node_sharing",
    "other_name",
    "p90",
    "parity_names",
    "parity_of",
    "read_successor",
    "successor_due",
    "time_min_s",
    "write_successor",
]

#: The second name of a checkout's allocations: ``<job name>-b``.
PARITY_SUFFIX = "-b"
#: The ``--dependency`` every allocation of a warm-successor checkout asks.
SINGLETON = "singleton"
#: Added to the measured parts of the lead time (the design's "+ 60 s").
LEAD_SLACK_S = 60
#: The lead time before any was measured: queue wait, a cold import and the installs.
DEFAULT_LEAD_S = 600
#: A record is a few hundred bytes; anything larger is not one.
MAX_RECORD_BYTES = 16 * 1024


# --------------------------------------------------------------------------------------
# Names: two alternating names per checkout, each a Slurm singleton.


def parity_names(base: str) -> tuple[str, str]:
    """The checkout's two allocation names: ``(base, base + "-b")``. ``base`` is the
    spec's job name; an allocation made before warm successors existed is parity a."""
    if not base:
        raise ValueError("an allocation name is needed")
    return base, base + PARITY_SUFFIX


def parity_of(name: str, base: str) -> str | None:
    """``"a"`` or ``"b"`` for one of ``base``'s two names, else None."""
    a, b = parity_names(base)
    return "a" if name == a else "b" if name == b else None


def other_name(name: str, base: str) -> str:
    """The name the successor of an allocation named ``name`` takes: the other one of
    ``base``'s pair (a name outside the pair counts as parity a: its successor is b)."""
    a, b = parity_names(base)
    return a if name == b else b


# --------------------------------------------------------------------------------------
# The lead time and when to queue a successor.


def p90(values: Sequence[float]) -> float:
    """The 90th percentile by nearest rank (one of the values, never interpolated)."""
    from slurm_fsm.history import nearest_rank

    return nearest_rank(values, 90)


@attrs.frozen
class LeadTime:
    """How long before it is needed a successor must be asked for."""

    seconds: int
    #: p90 of each measured part, by history field (only the parts measured)
    parts: dict[str, float] = attrs.field(factory=dict)
    #: one line for people
    detail: str = ""


_PARTS = ("queue_wait_s", "import_s", "install_s")


def lead_time(entries: Iterable[RunEntry], *, partition: str | None, nodes: int | None,
              image: str | None, last: int = 20) -> LeadTime:
    """The lead time of an allocation of this shape: p90 of the last ``last`` measures
    of each part (queue wait, import, install) among ``entries`` of the same partition,
    nodes and image, plus :data:`LEAD_SLACK_S`; :data:`DEFAULT_LEAD_S` when no part was
    ever measured. A part never measured (no image: no import) counts 0."""
    same = [e for e in entries
            if e.partition == partition and e.nodes == nodes and (e.image or None) == image]
    parts: dict[str, float] = {}
    for field in _PARTS:
        values = [v for v in (getattr(e, field) for e in same) if v is not None][-last:]
        if values:
            parts[field] = p90(values)
    if not parts:
        return LeadTime(DEFAULT_LEAD_S, {}, f"nothing measured yet: {DEFAULT_LEAD_S} s")
    total = math.ceil(sum(parts.values())) + LEAD_SLACK_S
    shown = " + ".join(f"{k[:-2]} {v:g} s" for k, v in parts.items())
    return LeadTime(total, parts, f"p90 {shown} + {LEAD_SLACK_S} s")


def successor_due(time_left_s: int | None, longest_expected_s: int | None, lead_s: int,
                  margin_s: int = EXPIRY_MARGIN_S) -> bool:
    """Queue a successor now: the allocation's time left (None: unlimited) is at most
    the longest expected job (None: unknown, counts 0) + the lead time + the margin."""
    if time_left_s is None:
        return False
    return time_left_s <= (longest_expected_s or 0) + lead_s + margin_s


def time_min_s(longest_expected_s: int | None, margin_s: int = EXPIRY_MARGIN_S) -> int:
    """The successor's ``--time-min``: the longest expected job plus the margin, at
    least a minute (backfill may start it sooner with that much)."""
    return max(60, (longest_expected_s or 0) + margin_s)


class SuccessorVerdict(Enum):
    """What to do with a queued successor, seen in ``squeue``."""

    #: PENDING for a reason that may pass: keep it, the old one serves what fits
    WAIT = "wait"
    #: RUNNING: set it up (or use it when set up)
    SET_UP = "set up"
    #: PENDING for a reason that never passes: cancel it, report, today's path
    CANCEL = "cancel"
    #: Slurm no longer knows it, or it ended: forget the record, today's path
    FORGET = "forget"


def judge_successor(info: JobInfo | None) -> SuccessorVerdict:
    """:class:`SuccessorVerdict` of the successor whose ``squeue`` row is ``info``
    (None: not listed)."""
    if info is None or not info.state.is_live:
        return SuccessorVerdict.FORGET
    if info.never_starts:
        return SuccessorVerdict.CANCEL
    if info.state.is_pending:
        return SuccessorVerdict.WAIT
    return SuccessorVerdict.SET_UP


class Sharing(Enum):
    """What an import may do on nodes another live allocation of the checkout holds.

    pyxis' named containers are one per node and name (``container_scope=global``): an
    import of the name on a node where another allocation's jobs start that container
    breaks them (``cannot create symbolic link .../pyxis_<name>/etc/localtime``)."""

    #: no node in common (or no container): import as usual
    NONE = "none"
    #: every node holds the other's container, ready, of the same name, image and
    #: mounts: use it as it is, import and install nothing
    ADOPT = "adopt"
    #: a node in common holds another container of the name, or one not set up yet:
    #: never imported there while the other allocation's jobs may use it
    CONFLICT = "conflict"


def node_sharing(mine: Collection[str], other_nodes: Collection[str],
                 other: AllocState, *, name: str | None, image: str | None, mounts: str,
                 installs: bool) -> Sharing:
    """:class:`Sharing` of an allocation on nodes ``mine`` that needs container ``name``
    of ``image`` with ``mounts`` (``installs``: the install must be done in it) beside
    the live allocation ``other`` on ``other_nodes``."""
    shared = set(mine) & set(other_nodes)
    if image is None or not shared:
        return Sharing.NONE
    same = (other.container_name == name and other.docker_image == image
            and other.container_mounts == mounts and (other.installed or not installs))
    return Sharing.ADOPT if same and set(mine) <= set(other_nodes) else Sharing.CONFLICT


# --------------------------------------------------------------------------------------
# The successor record beside the state file.


#: a successor record's text that is only a hint: anything but text is read as ""
_HINT_TEXT = {READ_AS: Text, OR_DEFAULT: True}


class Phase(Enum):
    """How far a successor got."""

    PENDING = "pending"
    WARMING = "warming"
    READY = "ready"
    FAILED = "failed"


@attrs.frozen(kw_only=True)
class SuccessorRecord:
    """``.slurm_fsm_successor.json``: the allocation that follows the state file's."""

    job_id: str = attrs.field(metadata={READ_AS: Digits})
    job_name: str = attrs.field(metadata={READ_AS: NonEmptyText})
    #: the job id of the allocation it follows (the state file's when it was asked)
    predecessor: str = attrs.field(metadata={READ_AS: NonEmptyText})
    phase: Phase = Phase.PENDING
    requested_at: str = attrs.field(default="", metadata=_HINT_TEXT)
    ready_at: str = attrs.field(default="", metadata=_HINT_TEXT)
    #: the pid of the detached warmer, when one was started (a hint: same host only)
    warmer_pid: int | None = attrs.field(
        default=None, metadata={READ_AS: PositiveJsonInt | None, OR_DEFAULT: True})
    #: the lead time the decision used, seconds
    lead_s: int | None = attrs.field(
        default=None, metadata={READ_AS: NonNegativeJsonInt | None, OR_DEFAULT: True})
    #: one line: why it failed, what it waits for
    detail: str = attrs.field(default="", metadata=_HINT_TEXT)

    def to_json(self) -> str:
        data: dict[str, Any] = converter.unstructure(self)
        return json.dumps({k: v for k, v in data.items() if v is not None and v != ""},
                          indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> SuccessorRecord | None:
        """None for anything that is not a record (unknown keys are ignored: additive;
        a bad hint, such as a warmer pid of 0, is read as none)."""
        try:
            record: SuccessorRecord = structure_record(json.loads(text), cls,
                                                       "successor record")
        except (ValueError, RecursionError):
            return None
        return record


def read_successor(path: Path) -> SuccessorRecord | None:
    """The record at ``path``; None when there is none or it cannot be read (a record is
    a hint: Slurm is asked before anything is done with it)."""
    try:
        raw = files.read_bounded(path, MAX_RECORD_BYTES)
    except OSError:  # FileProblem included
        return None
    try:
        return SuccessorRecord.from_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None


def write_successor(path: Path, record: SuccessorRecord) -> None:
    """Write the record atomically (private). Raises OSError when it cannot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, record.to_json().encode("utf-8"))


def clear_successor(path: Path) -> None:
    """Remove the record (none is fine)."""
    path.unlink(missing_ok=True)
