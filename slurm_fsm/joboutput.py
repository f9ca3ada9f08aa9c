"""One view of a job's output: every file it writes, followed together, read once.

A persistent run writes one log (stdout and stderr of ``bash <script>``); a one-shot
job writes its ``.out`` and, when the script says ``#SBATCH --error=...``, an ``.err``
beside it (TensorRT-LLM's logger writes to stderr: its accuracy lines, its
``trtllm-bench`` report and its hang detector's ``Hang detected after N seconds.`` land
there). :class:`JobOutput` follows all of them with one
:class:`~slurm_fsm.logs.LogFollower` each (opened through
:func:`slurm_fsm.files.open_for_reading`: never through a planted link), and while it
follows it keeps, with bounded memory, everything the verdict needs:

* the hang marker, in any file (and the line that carried it);
* the first :data:`HEAD_LINES` and the last :data:`TAIL_LINES` lines of the whole
  output, and the last :data:`ERR_TAIL_LINES` of each file;
* the **relevant region**: every line the workflow says it needs
  (:meth:`Workflow.relevant <slurm_fsm.workflows.Workflow.relevant>`: a pytest summary,
  an accuracy line, a throughput figure...), however far from the end it is, up to
  :data:`RELEVANT_LINES` of them (the latest kept);
* for each success/failure pattern, how many lines contain it.

The monitor calls :meth:`JobOutput.advance` while the job runs and
:meth:`JobOutput.finish` once it has ended, **before** anything is judged: the last
bytes (a hang line written just before the job killed itself, a report printed at
exit) are read, and the partial last line of each file counted, before the verdict.
Nothing re-reads the files afterwards: the parsers get :meth:`JobOutput.parser_lines`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from slurm_fsm.logs import DEFAULT_HANG_MARKER, MAX_LINE_CHARS, LogFollower
from slurm_fsm.spec import JobSpec
from slurm_fsm.workflows import workflow

__all__ = [
    "ERR_TAIL_LINES",
    "HEAD_LINES",
    "LINE_BUFFER_CHARS",
    "RELEVANT_LINES",
    "TAIL_LINES",
    "JobOutput",
    "output_for_spec",
]

#: The first lines of the output kept for the report (``log_head``).
HEAD_LINES = 50
#: The last lines of the output kept (the parsers' tail, ``log_tail``, the hang context).
TAIL_LINES = 200
#: The last lines of each file kept (``err_tail``).
ERR_TAIL_LINES = 50
#: At most this many relevant lines are kept (the latest ones).
RELEVANT_LINES = 5000
#: An unfinished line is kept up to this many characters; the rest of it is dropped.
LINE_BUFFER_CHARS = 65536


class _Lines:
    """Splits one file's text into lines (bounded: an endless line is cut)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._partial: list[str] = []
        self._size = 0

    def feed(self, text: str) -> None:
        while text:
            nl = text.find("\n")
            if nl < 0:
                self._keep(text)
                return
            self._keep(text[:nl])
            self.flush()
            text = text[nl + 1:]

    def _keep(self, piece: str) -> None:
        room = LINE_BUFFER_CHARS - self._size
        if room > 0:
            piece = piece[:room]
            self._partial.append(piece)
            self._size += len(piece)

    def flush(self) -> None:
        line = "".join(self._partial)
        self._partial, self._size = [], 0
        self._emit(line.rstrip("\r"))

    @property
    def pending(self) -> bool:
        return bool(self._partial)


class JobOutput:
    """Follows every file of one job; keeps what the verdict needs (module docstring).

    ``relevant`` says which lines a workflow's parser needs beyond the tail;
    ``patterns`` are counted per line (``pattern in line``, as :func:`slurm_fsm.logs.grep`
    counts them); ``on_text`` gets every new piece of text (progress display).
    """

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        hang_marker: str = DEFAULT_HANG_MARKER,
        relevant: Callable[[str], bool] | None = None,
        patterns: Iterable[str] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        unique: list[Path] = []
        for path in paths:
            if Path(path) not in unique:
                unique.append(Path(path))
        self.paths: tuple[Path, ...] = tuple(unique)
        self._relevant = relevant
        self._on_text = on_text
        self._marker = hang_marker.lower()
        self.pattern_hits: dict[str, int] = {p: 0 for p in patterns}
        self.head: list[str] = []
        self._tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self._kept: deque[tuple[int, str]] = deque(maxlen=RELEVANT_LINES)
        self._file_tails: dict[Path, deque[str]] = {
            p: deque(maxlen=ERR_TAIL_LINES) for p in self.paths}
        self._seq = 0
        self.lines_seen = 0
        self.hang_line = ""
        self.finished = False
        self._followers: dict[Path, LogFollower] = {}
        self._splitters: dict[Path, _Lines] = {}
        for path in self.paths:
            splitter = _Lines(self._emitter(path))
            self._splitters[path] = splitter
            self._followers[path] = LogFollower(
                path, hang_marker=hang_marker, on_text=self._text(splitter))

    def _emitter(self, path: Path) -> Callable[[str], None]:
        def emit(line: str) -> None:
            self._line(path, line)
        return emit

    def _text(self, splitter: _Lines) -> Callable[[str], None]:
        def take(text: str) -> None:
            splitter.feed(text)
            if self._on_text is not None:
                self._on_text(text)
        return take

    def _line(self, path: Path, line: str) -> None:
        self._seq += 1
        self.lines_seen += 1
        cut = line[:MAX_LINE_CHARS]
        if len(self.head) < HEAD_LINES:
            self.head.append(cut)
        self._tail.append((self._seq, cut))
        self._file_tails[path].append(cut)
        if self._relevant is not None and self._relevant(line):
            self._kept.append((self._seq, cut))
        for pattern in self.pattern_hits:
            if pattern in line:
                self.pattern_hits[pattern] += 1
        if self._marker and not self.hang_line and self._marker in line.lower():
            self.hang_line = cut

    # ------------------------------------------------------------------ following
    def advance(self) -> int:
        """Read what every file gained since the last call; how many bytes."""
        return sum(f.advance() for f in self._followers.values())

    def finish(self) -> None:
        """The job has ended: read every file to its end, and count each file's
        unfinished last line. Call it before anything is judged; later calls do
        nothing more than read what may still have been appended."""
        self.advance()
        for splitter in self._splitters.values():
            if splitter.pending:
                splitter.flush()
        self.finished = True

    # ------------------------------------------------------------------ what it saw
    @property
    def hang_detected(self) -> bool:
        """The hang marker appeared in any file (also split across two reads)."""
        return any(f.hang_detected for f in self._followers.values())

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self._followers.values())

    @property
    def last_line(self) -> str:
        """The last non-blank line seen in the file read most recently (progress)."""
        lines = [f.last_line for f in self._followers.values() if f.last_line]
        return lines[-1] if lines else ""

    @property
    def problems(self) -> list[str]:
        """Files that could not be read (a planted link, another user's file)."""
        return [f.problem for f in self._followers.values() if f.problem]

    @property
    def empty(self) -> bool:
        """No file had a byte."""
        return self.bytes_read == 0

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last ``n`` lines of the whole output (at most :data:`TAIL_LINES`)."""
        lines = [line for _, line in self._tail]
        return lines[-n:] if n > 0 else []

    def file_tail(self, path: Path) -> list[str]:
        """The last lines of one file (at most :data:`ERR_TAIL_LINES`)."""
        tail = self._file_tails.get(Path(path))
        return list(tail) if tail is not None else []

    def parser_lines(self, tail: int = 100) -> list[str]:
        """What a workflow's parser reads: every relevant line kept, and the last
        ``tail`` lines, in the order they were read, each once."""
        last = list(self._tail)[-tail:] if tail > 0 else []
        merged = dict(self._kept)
        merged.update(last)
        return [merged[k] for k in sorted(merged)]


def output_for_spec(
    spec: JobSpec,
    paths: Sequence[Path],
    *,
    extra_patterns: Iterable[str] = (),
    on_text: Callable[[str], None] | None = None,
) -> JobOutput:
    """The :class:`JobOutput` of a job of ``spec``: its workflow's relevant lines, its
    success and failure patterns (and ``extra_patterns``) counted."""
    patterns = [*spec.success_patterns, *spec.failure_patterns, *extra_patterns]
    return JobOutput(paths, relevant=workflow(spec.workflow_type).relevant,
                     patterns=dict.fromkeys(patterns), on_text=on_text)
