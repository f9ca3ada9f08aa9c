"""How long a job takes, and what setting up an allocation took: the run history.

Theory of operation
-------------------

Admission by time left (step 0C, :mod:`slurm_fsm.step0.table`) starts a job on an
allocation only when the time left covers the job's *expected duration* plus
:data:`~slurm_fsm.spec.EXPIRY_MARGIN_S`. The expected duration is, first that applies
(:func:`expected_duration`, pure, table-tested):

1. the spec's ``expected_duration_seconds``;
2. the p95 of the last :data:`HISTORY_RUNS` PASSED runs of the *same* spec
   (:func:`spec_key`), as this file records them.

A time limit (``slurm_params.time_limit``, ``monitor_timeout_seconds``) is an upper
bound, not an estimate: a 30-minute limit says the job ends within 30 minutes, not
that it takes them. Without an estimate the job is admitted by the margin alone (the
source reads ``unknown``) and step 1's pre-flight warns when the allocation's time
left is less than the job's time limit, as the procedure does (issue 41).

The first is the user's word: one that no new allocation of ``alloc_time_limit`` can
hold is refused when the spec is loaded (exit 2, no Slurm command). The second is a
guess: one that no new allocation could hold either says nothing a replacement could
fix, so the job is then admitted by the margin alone.

The history is one JSON object a line in ``work_dirs/.slurm_fsm_history.jsonl``,
beside the state file (:attr:`slurm_fsm.paths.StatePaths.history`). It is additive
(new keys may come; unknown keys and bad lines are skipped), bounded (past
:data:`MAX_HISTORY_BYTES` the newest half is kept) and never fails a run:
:func:`record_run` returns a warning when the file cannot be written. Reading it is
total: a line is an entry or skipped (longer than :data:`MAX_LINE_CHARS`, nested past
the parser's depth, a number past range: skipped, never raised), and a file the group
or others can write is neither read nor extended (the next entry starts a new file of
the user's alone). A line is always appended whole, after a newline if the file's last
line was never ended. Each line also
carries the lead-time parts a run measured (``queue_wait_s``, ``import_s``,
``install_s``: seconds spent in the Allocating, Importing and Installing states), keyed
by partition, node count and image: what a warm successor needs to know how early to
ask for the next allocation.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import attrs

from slurm_fsm import files
from slurm_fsm.convert import OR_DEFAULT, READ_AS, NodeCount, Seconds, Text, structure_record
from slurm_fsm.errors import FileProblem, Problem
from slurm_fsm.spec import EXPIRY_MARGIN_S, JobSpec

if TYPE_CHECKING:
    from slurm_fsm.report import Report

__all__ = [
    "HISTORY_RUNS",
    "MAX_HISTORY_BYTES",
    "MAX_LINE_CHARS",
    "SOURCES",
    "Estimate",
    "RunEntry",
    "RunHistory",
    "expected_duration",
    "lead_times",
    "nearest_rank",
    "p95",
    "record_run",
    "spec_key",
]

#: The PASSED runs of one spec the estimate looks at (the newest).
HISTORY_RUNS = 20
#: Past this size the file keeps its newest half (a line is about 300 bytes).
MAX_HISTORY_BYTES = 256 * 1024
#: Where an :class:`Estimate` came from, strongest first.
SOURCES = ("expected_duration_seconds", "history", "unknown")
#: The machine's states whose time is a lead-time part, by history field.
#: A line longer than this (characters) is skipped unread: an entry is about 300.
MAX_LINE_CHARS = 4096
#: Mode bits of a history file that make it anyone's: such a file is neither read nor
#: extended.
_OPEN_TO_OTHERS = 0o022
_LEAD_STATES = {"queue_wait_s": "Allocating", "import_s": "Importing",
                "install_s": "Installing"}


def spec_key(spec: JobSpec) -> str:
    """What makes two specs "the same job" for its duration: the script, the workflow,
    the model, where and on what shape it runs, the image. 16 hex digits."""
    p = spec.slurm_params
    same = {"script_path": str(spec.script_path), "workflow_type": spec.workflow_type.value,
            "model_name": spec.model_name, "partition": p.partition, "nodes": p.nodes,
            "ntasks": p.ntasks, "ntasks_per_node": p.ntasks_per_node,
            "gpus_per_node": p.gpus_per_node, "docker_image": spec.docker_image}
    text = json.dumps(same, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def nearest_rank(values: Sequence[float], percent: int) -> float:
    """The ``percent``-th percentile by nearest rank (one of the values, never
    interpolated)."""
    if not values:
        raise ValueError(f"p{percent} of no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def p95(values: Sequence[float]) -> float:
    """The 95th percentile by nearest rank (one of the values, never interpolated)."""
    return nearest_rank(values, 95)


@attrs.frozen
class Estimate:
    """The expected duration of a job and where it came from."""

    #: seconds; None when unknown (admitted by the margin alone)
    seconds: int | None
    #: one of :data:`SOURCES`
    source: str
    #: one line for people: ``20m (p95 of 7 PASSED runs)``
    detail: str = ""

    @property
    def known(self) -> bool:
        return self.seconds is not None

    def describe(self) -> str:
        """``expects 00:20:00 (history: p95 of 7 PASSED runs)``, or why it is unknown."""
        if self.seconds is None:
            return f"expected duration unknown ({self.detail})"
        detail = f": {self.detail}" if self.detail else ""
        return f"expects {_hms(self.seconds)} ({self.source}{detail})"


def _hms(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"


def expected_duration(spec: JobSpec, durations: Sequence[float] = ()) -> Estimate:
    """The expected duration of ``spec``'s job (see the module's order); ``durations``:
    the wall times of its past PASSED runs, newest last (:meth:`RunHistory.durations`).

    A time limit is an upper bound, never an estimate: with neither the spec's word nor
    a PASSED run the duration is unknown. A guess from history that a new allocation of
    ``alloc_time_limit`` could not hold with the margin is no reason to replace an
    allocation: it comes back unknown, the job admitted by the margin alone."""
    if spec.expected_duration_seconds is not None:
        return Estimate(int(spec.expected_duration_seconds), SOURCES[0])
    capacity = (spec.alloc_time_limit.seconds if spec.alloc_time_limit.is_finite
                else None)
    recent = [d for d in durations[-HISTORY_RUNS:] if d >= 0]
    if not recent:
        return Estimate(None, SOURCES[2], "no expected_duration_seconds, no PASSED run "
                        "recorded yet; a time limit is not an estimate: admitted by the "
                        "margin alone")
    guess = Estimate(max(1, math.ceil(p95(recent))), SOURCES[1],
                     f"p95 of {len(recent)} PASSED run(s)")
    if capacity is not None and (guess.seconds or 0) + EXPIRY_MARGIN_S > capacity:
        return Estimate(None, SOURCES[2],
                        f"{guess.source} gives {_hms(guess.seconds or 0)}, more than a new "
                        f"allocation of {spec.alloc_time_limit} holds with the "
                        f"{_hms(EXPIRY_MARGIN_S)} margin: admitted by the margin alone")
    return guess


#: a history field of the wrong type or out of range is dropped (read as None)
_SECONDS = {READ_AS: Seconds | None, OR_DEFAULT: True}
_TEXT = {READ_AS: Text | None, OR_DEFAULT: True}


@attrs.frozen(kw_only=True)
class RunEntry:
    """One line of the history. Every field but ``key`` may be missing (None)."""

    key: str = attrs.field(metadata={READ_AS: Text})
    at: str = attrs.field(default="", metadata={READ_AS: Text, OR_DEFAULT: True})
    status: str = attrs.field(default="", metadata={READ_AS: Text, OR_DEFAULT: True})
    mode: str = attrs.field(default="", metadata={READ_AS: Text, OR_DEFAULT: True})
    #: the job's own wall time (the report's ``elapsed_s``)
    run_s: float | None = attrs.field(default=None, metadata=_SECONDS)
    allocation: str | None = attrs.field(default=None, metadata=_TEXT)
    #: seconds in Allocating (salloc until RUNNING: the queue wait, mostly)
    queue_wait_s: float | None = attrs.field(default=None, metadata=_SECONDS)
    #: seconds in Importing (container import, mount warm-up, GPU check)
    import_s: float | None = attrs.field(default=None, metadata=_SECONDS)
    #: seconds in Installing
    install_s: float | None = attrs.field(default=None, metadata=_SECONDS)
    partition: str | None = attrs.field(default=None, metadata=_TEXT)
    nodes: int | None = attrs.field(default=None,
                                    metadata={READ_AS: NodeCount | None, OR_DEFAULT: True})
    image: str | None = attrs.field(default=None, metadata=_TEXT)

    def to_json(self) -> str:
        data = {k: v for k, v in attrs.asdict(self).items() if v is not None and v != ""}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> RunEntry | None:
        """None for a line that is not a history entry (cut, garbled, another version's
        without a key, longer than :data:`MAX_LINE_CHARS`, nested past the parser's
        depth); unknown keys are ignored, a field of the wrong type or out of range is
        dropped. Total: any text gives an entry or None, never an exception."""
        if len(line) > MAX_LINE_CHARS:
            return None
        try:
            entry: RunEntry = structure_record(json.loads(line), cls, "history entry")
        except (ValueError, RecursionError):  # ValueError: int past 4300 digits too
            return None
        return entry


@attrs.frozen
class _Parsed:
    """What :meth:`RunHistory.entries` parsed of one history file: the bytes from
    ``start`` to ``end`` (complete lines), their first bytes (``head``: the file was
    not rewritten in place when they are still there) and the entries."""

    start: int
    end: int
    head: bytes
    entries: tuple[RunEntry, ...]


#: the history files last read, by file (path, device, inode). The file only grows by
#: appends between trims (a trim writes a new file: another inode), so a read parses
#: only the lines appended since the last one: every run of a ``run_many`` reads the
#: history for its estimate, and a full history is thousands of lines (issue 28).
_PARSED: dict[tuple[str, int, int], _Parsed] = {}
_PARSED_KEPT = 8
_PARSED_LOCK = threading.Lock()
_HEAD_BYTES = 256


def _parse_lines(raw: bytes) -> tuple[RunEntry, ...]:
    return tuple(e for e in (RunEntry.from_json(line) for line in
                             raw.decode("utf-8", "replace").splitlines()) if e is not None)


class RunHistory:
    """The history file: read (bounded, bad lines skipped), appended, trimmed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[RunEntry]:
        """Every readable entry, oldest first; [] when there is no file or it cannot be
        read (the estimate then falls back: a history is a hint, never a failure)."""
        try:
            with files.open_for_reading(self.path) as fh:
                if os.fstat(fh.fileno()).st_mode & _OPEN_TO_OTHERS:
                    return []  # anyone's lines: not a hint of ours
                parsed = self._read(fh.fileno())
        except OSError:  # FileProblem included
            return []
        return list(parsed.entries)

    def _read(self, fd: int) -> _Parsed:
        """The file's entries: the lines appended since the last read of this file
        parsed and added to what that read found, else every line of its last
        ``2 * MAX_HISTORY_BYTES``. A line still being written (no newline yet) waits."""
        st = os.fstat(fd)
        key = (str(self.path), st.st_dev, st.st_ino)
        size = st.st_size
        with _PARSED_LOCK:
            known = _PARSED.get(key)
        if (known is not None and known.end <= size
                and size - known.start <= 2 * MAX_HISTORY_BYTES
                and os.pread(fd, len(known.head), known.start) == known.head):
            if known.end == size:
                return known
            raw = os.pread(fd, size - known.end, known.end)
            raw = raw[:raw.rfind(b"\n") + 1]
            parsed = _Parsed(start=known.start, end=known.end + len(raw), head=known.head,
                             entries=known.entries + _parse_lines(raw))
        else:
            start = max(0, size - 2 * MAX_HISTORY_BYTES)
            raw = os.pread(fd, size - start, start)
            if start > 0:  # a cut first line
                cut = raw.find(b"\n") + 1
                raw, start = raw[cut:], start + cut
            raw = raw[:raw.rfind(b"\n") + 1]
            parsed = _Parsed(start=start, end=start + len(raw), head=raw[:_HEAD_BYTES],
                             entries=_parse_lines(raw))
        with _PARSED_LOCK:
            _PARSED.pop(key, None)
            _PARSED[key] = parsed
            while len(_PARSED) > _PARSED_KEPT:
                del _PARSED[next(iter(_PARSED))]
        return parsed

    def durations(self, key: str) -> list[float]:
        """The wall times of the PASSED runs under ``key``, oldest first."""
        return [e.run_s for e in self.entries()
                if e.key == key and e.status == "PASSED" and e.run_s is not None]

    def estimate(self, spec: JobSpec) -> Estimate:
        """:func:`expected_duration` of ``spec`` over this history."""
        return expected_duration(spec, self.durations(spec_key(spec)))

    def append(self, entry: RunEntry) -> None:
        """Add one line (one ``write`` in append mode); past :data:`MAX_HISTORY_BYTES`
        the file is rewritten with its newest half. Raises OSError (or
        :class:`~slurm_fsm.files.FileProblem`) when it cannot be written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (entry.to_json() + "\n").encode("utf-8")
        tail = self._tail()
        if tail is None:  # a file others could write: a new file, ours alone
            files.write_atomic(self.path, line, mode=0o644, fsync=False)
            return
        with files.open_private(self.path, append=True, mode=0o644) as fh:
            fh.write(line if tail in (b"", b"\n") else b"\n" + line)
            size = fh.tell()
        if size > MAX_HISTORY_BYTES:
            self._trim()

    def _tail(self) -> bytes | None:
        """The file's last byte (b"" when missing or empty: a line ends there); None
        when the group or others can write it (only its owner can change that). A last
        byte that is not a newline (a line cut, or never ended) gets one before this
        run's line, so the run's own line is whole."""
        try:
            with files.open_for_reading(self.path) as fh:
                st = os.fstat(fh.fileno())
                if st.st_mode & _OPEN_TO_OTHERS:
                    return None
                return os.pread(fh.fileno(), 1, st.st_size - 1) if st.st_size else b""
        except FileProblem as problem:
            if problem.kind is Problem.MISSING:
                return b""
            raise

    def _trim(self) -> None:
        keep: list[str] = []
        total = 0
        for e in reversed(self.entries()):
            line = e.to_json() + "\n"
            if total + len(line) > MAX_HISTORY_BYTES // 2:
                break
            keep.append(line)
            total += len(line)
        files.write_atomic(self.path, "".join(reversed(keep)).encode("utf-8"), mode=0o644,
                           fsync=False)


class _Step(Protocol):
    """What :func:`lead_times` reads of a machine transition."""

    @property
    def clock(self) -> float: ...
    @property
    def source(self) -> str: ...
    @property
    def dest(self) -> str: ...


def lead_times(transitions: Iterable[_Step]) -> dict[str, float]:
    """The seconds spent in Allocating, Importing and Installing, from the machine's
    history (each entry's clock is when its state was entered); only the parts this run
    went through."""
    out: dict[str, float] = {}
    entered: dict[str, float] = {}
    for t in transitions:
        if t.source in entered:
            for field, state in _LEAD_STATES.items():
                if state == t.source:
                    out[field] = round(out.get(field, 0.0) + t.clock - entered[t.source], 3)
            del entered[t.source]
        entered[t.dest] = t.clock
    return out


def record_run(path: Path, spec: JobSpec, report: Report,
               transitions: Iterable[_Step] = ()) -> str | None:
    """Append what the run of ``report`` measured: the job's wall time (``elapsed_s``)
    and the lead-time parts of step 0 (from the machine's ``transitions``). None when
    written or nothing was measured (a release, a run stopped before its job and its
    setup); else a warning: the run's outcome never depends on its history."""
    lead = lead_times(transitions)
    run_s = report.elapsed_s
    if run_s is None and not lead:
        return None
    p = spec.slurm_params
    entry = RunEntry(key=spec_key(spec), at=datetime.now(UTC).isoformat(timespec="seconds"),
                     status=report.status.name, mode=report.mode,
                     run_s=round(run_s, 3) if run_s is not None else None,
                     allocation=report.allocation_id, partition=p.partition,
                     nodes=spec.alloc_nodes or p.nodes, image=spec.docker_image, **lead)
    try:
        RunHistory(path).append(entry)
    except OSError as exc:  # FileProblem included
        return (f"run history not written to {path}: {exc}; the next runs' expected "
                "duration does not include this run")
    return None
