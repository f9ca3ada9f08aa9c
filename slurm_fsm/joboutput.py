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

import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from slurm_fsm.logs import (
    DEFAULT_HANG_MARKER,
    MAX_LINE_CHARS,
    LogFollower,
    cut_line,
    is_hang_line,
)
from slurm_fsm.runfacts import OutputSnapshot
from slurm_fsm.spec import JobSpec
from slurm_fsm.workflows import _PYTEST_SUMMARY, workflow

__all__ = [
    "ERR_TAIL_LINES",
    "FINAL_READ_BYTES",
    "FOLLOW_READ_BYTES",
    "HEAD_LINES",
    "HEAD_READ_BYTES",
    "LINE_BUFFER_CHARS",
    "RELEVANT_LINES",
    "SCAN_BYTES",
    "TAIL_LINES",
    "HangJudge",
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
#: While the job runs, one look (:meth:`JobOutput.advance`) reads at most this many
#: bytes of its files, shared between them (about half a second of CPU here): the
#: monitor comes back to the job's state, the clock and the hang marker that often,
#: however fast the job writes.
FOLLOW_READ_BYTES = 32 << 20
#: Once the job has ended (:meth:`JobOutput.finish`), at most about this many bytes not
#: read yet are read line by line (about half a second of CPU): the end of each file.
#: What lies before that end is skipped: its last part searched for the success and
#: failure patterns only (:data:`SCAN_BYTES`), the rest not read; :attr:`JobOutput.gaps`
#: says so.
FINAL_READ_BYTES = 32 << 20
#: Before a skip, a file whose first bytes were never read gives this many of them
#: (the report's ``log_head``).
HEAD_READ_BYTES = 64 << 10
#: The skipped bytes searched for the patterns, times the number of patterns (about half
#: a second of CPU): with two patterns, the last 512 MiB before the end read as lines.
SCAN_BYTES = 1 << 30


def _hinted(text: str, words: tuple[str, ...]) -> Iterable[tuple[int, str]]:
    """(index, line) of each line of ``text`` that contains one of ``words`` (lower
    case; matched in any case), once each, in order; found with ``str.find``."""
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case is longer: no shortcut
        return enumerate(text.split("\n"))
    starts: set[int] = set()
    for word in words:
        pos = 0
        while (i := low.find(word, pos)) >= 0:
            starts.add(low.rfind("\n", 0, i) + 1)
            end = low.find("\n", i + len(word))
            if end < 0:
                break
            pos = end + 1
    found: list[tuple[int, str]] = []
    index = counted_to = 0
    for start in sorted(starts):
        index += text.count("\n", counted_to, start)
        counted_to = start
        end = text.find("\n", start)
        found.append((index, text[start:len(text) if end < 0 else end].removesuffix("\r")))
    return found


_LABEL = re.compile(r"^\s*(\d+):\s")
_SESSION_START = re.compile(r"^=+ test session starts")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CAPTURED = re.compile(r"^-+ Captured (?:stdout|stderr|log) \w+ -+$")
_SECTION_END = re.compile(r"^(?:_{3,} .* _{3,}|={3,}.*={3,}|-{3,} generated xml)")


class HangJudge:
    """Which hang-marker lines are the hang detector's own (docs/report.md, "The hang
    marker"). Fed every line that holds the marker or may change pytest's context
    (:data:`HangJudge.HINTS`), in the order read:

    * the line must **be** the detector's line (:func:`slurm_fsm.logs.is_hang_line`:
      the marker begins its message), not one that mentions the words;
    * a line inside one of pytest's ``Captured stdout/stderr/log ...`` sections is a
      test's output that pytest reprints (``-rA``, a failure's report): never a hang;
    * a line printed while a pytest session is running (after its ``test session
      starts`` header, per ``srun -l`` rank) is **pending**: the monitor does not act on
      it. A real detector kills its rank, so the session never prints its summary; a
      detector's unit test (``-s``) passes and the session ends with its summary;
    * pytest's summary line (of the same rank) drops every marker line read since that
      rank's previous summary: the run that printed them went on and completed;
    * two files (one-shot ``.out`` and ``.err``) read in the same :meth:`new_read` have no
      known order between them: a marker line of one file read in the same read as a
      summary of the other is taken as printed before that summary (dropped too).

    :attr:`hang_line` is the first line still standing; pending lines stand once
    :meth:`close` says the job has ended.
    """

    #: A line that may matter holds one of these (lower case; the marker is added): a
    #: session's header, a captured section's, a summary's count word.
    HINTS = ("session starts", "captured ", "passed", "failed", "error", "skipped",
             "deselected", "xfail", "xpass", "warning", "rerun", "no tests ran")
    #: ... and, while a captured section is open, what may end it.
    SECTION_HINTS = ("___", "===", "generated xml")

    def __init__(self, marker: str = DEFAULT_HANG_MARKER) -> None:
        self.marker = marker
        self._low = marker.strip().lower()
        self._sessions: dict[str, int] = {}  # rank label -> open sessions
        self._captured: set[tuple[object, str]] = set()  # (file, rank) in a Captured section
        self._lines: list[tuple[str, bool, str]] = []  # (rank, pending, line)
        self._read = 0  # which read (new_read) the lines come from
        self._ended: dict[str, tuple[int, object]] = {}  # rank -> (read, file) of its summary
        self.closed = False

    def new_read(self) -> None:
        """The lines fed from now on come from one new read of the files."""
        self._read += 1

    def hints(self, sections: bool = False) -> tuple[str, ...]:
        """The words of the lines :meth:`feed` must see (``sections``: also the lines
        that may end a captured section)."""
        words = self.HINTS + (self.SECTION_HINTS if sections else ())
        return (*words, self._low) if self._low else words

    @property
    def in_section(self) -> bool:
        """A captured section is open (in some file or rank)."""
        return bool(self._captured)

    def feed(self, line: str, source: object = None) -> None:
        """One line of the output (``source`` tells files apart for pytest sections)."""
        clean = (_ANSI.sub("", line) if "\x1b" in line else line).strip()
        rank = ""
        if clean[:1].isdigit():
            m = _LABEL.match(clean)
            if m:
                rank, clean = m.group(1), clean[m.end():].strip()
        body = clean.replace("\r", "") if "\r" in clean else clean
        key = (source, rank)
        if "session starts" in body and _SESSION_START.match(body):
            self._sessions[rank] = self._sessions.get(rank, 0) + 1
            self._captured.discard(key)
            return
        if "Captured " in body and _CAPTURED.match(body):
            self._captured.add(key)
            return
        summary = " in " in body and _PYTEST_SUMMARY.search(body) is not None
        if summary or (key in self._captured and _SECTION_END.match(body)):
            self._captured.discard(key)
        if summary:
            self._sessions[rank] = max(0, self._sessions.get(rank, 0) - 1)
            self._lines = [entry for entry in self._lines if entry[0] != rank]
            self._ended[rank] = (self._read, source)
            return
        if (self._low and self._low in body.lower() and key not in self._captured
                and is_hang_line(body, self.marker)):
            ended = self._ended.get(rank)
            if ended is not None and ended[0] == self._read and ended[1] != source:
                return  # read with another file's summary: no order known, taken as before
            self._lines.append((rank, self._sessions.get(rank, 0) > 0, line))

    def close(self) -> None:
        """The job has ended: pending lines (no summary followed them) stand."""
        self.closed = True

    @property
    def hang_line(self) -> str:
        """The first detector line that stands, or ""."""
        return next((line for _, pending, line in self._lines
                     if self.closed or not pending), "")

    @property
    def pending(self) -> bool:
        """A detector line was read inside a pytest session still running."""
        return any(pending for _, pending, _ in self._lines) and not self.closed


def _count_lines(text: str, pattern: str) -> int:
    """How many lines of ``text`` contain ``pattern`` (each line once; ``""`` matches
    every line), with ``str.find`` only."""
    if not pattern:
        return text.count("\n") + 1
    count = pos = 0
    while (i := text.find(pattern, pos)) >= 0:
        count += 1
        nl = text.find("\n", i + len(pattern))
        if nl < 0:
            break
        pos = nl + 1
    return count


class _PatternScan:
    """Occurrences of each pattern in skipped bytes (no decoding, no lines); a pattern
    across two chunks is found once. ``budget``: how many bytes it is given (the
    :data:`SCAN_BYTES` shared by the patterns)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.needles = {p: p.encode("utf-8") for p in patterns if p and "\n" not in p}
        self.counts = dict.fromkeys(self.needles, 0)
        self.budget = SCAN_BYTES // len(self.needles) if self.needles else 0
        self.scanned = 0
        self._carry = b""

    def feed(self, data: bytes) -> None:
        self.scanned += len(data)
        for p, needle in self.needles.items():
            keep = len(needle) - 1
            carry = self._carry[len(self._carry) - keep:] if keep else b""
            self.counts[p] += (carry + data).count(needle)
        self._carry = data[-max((len(n) for n in self.needles.values()), default=1):]


class JobOutput:
    """Follows every file of one job; keeps what the verdict needs (module docstring).

    ``relevant`` says which lines a workflow's parser needs beyond the tail (asked only
    of the lines holding one of the lower-case words of ``hint``, when given: a
    superset, found with ``str.find`` over a whole chunk);
    ``patterns`` are counted per line (``pattern in line``, as a streaming grep
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
        hint: tuple[str, ...] | None = None,
    ) -> None:
        unique: list[Path] = []
        for path in paths:
            if Path(path) not in unique:
                unique.append(Path(path))
        self.paths: tuple[Path, ...] = tuple(unique)
        self._relevant = relevant
        self._hint = hint
        self._on_text = on_text
        self.pattern_hits: dict[str, int] = {p: 0 for p in patterns}
        self.head: list[str] = []
        self._tail: deque[tuple[int, str]] = deque(maxlen=TAIL_LINES)
        self._kept: deque[tuple[int, str]] = deque(maxlen=RELEVANT_LINES)
        self._file_tails: dict[Path, deque[str]] = {
            p: deque(maxlen=ERR_TAIL_LINES) for p in self.paths}
        self._seq = 0
        self.lines_seen = 0
        self.hang_judge = HangJudge(hang_marker)
        self._hang_hints = self.hang_judge.hints()
        self._section_hints = self.hang_judge.hints(sections=True)
        self._partial_judged: dict[Path, bool] = {}  # its unfinished line was judged
        self.finished = False
        #: what was not read line by line, one sentence per file (:meth:`finish`)
        self.gaps: list[str] = []
        self._followers: dict[Path, LogFollower] = {}
        self._partial: dict[Path, str] = {}  # each file's unfinished last line (bounded)
        #: characters of that unfinished line dropped past LINE_BUFFER_CHARS: its cut
        #: says how long it really was
        self._dropped: dict[Path, int] = {}
        self._open: dict[Path, bool] = {}  # an unfinished line is open (perhaps empty)
        for path in self.paths:
            self._partial[path] = ""
            self._dropped[path] = 0
            self._open[path] = False
            self._partial_judged[path] = False
            self._followers[path] = LogFollower(  # the marker is judged here, by line
                path, hang_marker="", on_text=self._taker(path))

    def _taker(self, path: Path) -> Callable[[str], None]:
        def take(text: str) -> None:
            self._take(path, text)
            if self._on_text is not None:
                self._on_text(text)
        return take

    def _take(self, path: Path, text: str) -> None:
        """A piece of one file's text: its complete lines are taken in bulk (no Python
        call per line but the workflow's ``relevant``); the unfinished last one waits,
        cut at :data:`LINE_BUFFER_CHARS`."""
        if not text:
            return
        buf = self._partial[path] + text
        complete, newline, last = buf.rpartition("\n")
        if not newline:
            complete, last = "", buf
        self._partial[path] = last[:LINE_BUFFER_CHARS]
        dropped = max(0, len(last) - LINE_BUFFER_CHARS)
        self._open[path] = bool(last) or (self._open[path] and not newline)
        if newline:  # the unfinished line's dropped part belongs to the first line now
            first_extra, self._dropped[path] = self._dropped[path], dropped
            self._lines(path, complete, first_extra)
        else:
            self._dropped[path] += dropped
        self._judge_partial(path)

    def _judge_partial(self, path: Path) -> None:
        """A detector line whose newline has not come yet is judged now (once)."""
        partial = self._partial[path]
        marker = self.hang_judge._low
        if (marker and not self._partial_judged[path] and marker in partial.lower()
                and is_hang_line(partial, self.hang_judge.marker)):
            self._partial_judged[path] = True
            self.hang_judge.feed(partial[:MAX_LINE_CHARS], path)

    def _lines(self, path: Path, complete: str, first_extra: int = 0) -> None:
        """``complete``: whole lines, without the newline of the last one; the first
        was ``first_extra`` characters longer (dropped while it was unfinished)."""
        lines = complete.split("\n")
        if "\r" in complete:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        base = self._seq
        self._seq += len(lines)
        self.lines_seen += len(lines)
        def cut(i: int) -> str:
            return cut_line(lines[i], extra=first_extra if i == 0 else 0)

        room = HEAD_LINES - len(self.head)
        if room > 0:
            self.head.extend(cut(i) for i in range(min(room, len(lines))))
        first = max(0, len(lines) - TAIL_LINES)
        self._tail.extend((base + 1 + i, cut(i)) for i in range(first, len(lines)))
        self._file_tails[path].extend(
            cut(i) for i in range(max(0, len(lines) - ERR_TAIL_LINES), len(lines)))
        relevant = self._relevant
        if relevant is not None:
            candidates = (enumerate(lines) if self._hint is None
                          else _hinted(complete, self._hint))
            self._kept.extend((base + 1 + i, cut(i))
                              for i, line in candidates if relevant(line))
        for pattern in self.pattern_hits:
            self.pattern_hits[pattern] += _count_lines(complete, pattern)
        judged_first = self._partial_judged[path]
        self._partial_judged[path] = False
        judge = self.hang_judge
        sections = judge.in_section or "Captured " in complete
        hints = self._section_hints if sections else self._hang_hints
        for i, line in _hinted(complete, hints):
            if i == 0 and judged_first:
                continue  # its start was judged while unfinished
            judge.feed(line[:MAX_LINE_CHARS], path)

    # ------------------------------------------------------------------ following
    def advance(self) -> int:
        """Read what every file gained since the last call, at most
        :data:`FOLLOW_READ_BYTES` (shared between the files); how many bytes."""
        self.hang_judge.new_read()
        share = max(1, FOLLOW_READ_BYTES // len(self._followers))
        return sum(f.advance(max_bytes=share) for f in self._followers.values())

    def finish(self) -> None:
        """The job has ended: read every file to its end (past a backlog of more than
        :data:`FINAL_READ_BYTES`, only its end: :meth:`_skip_backlog`), and count each
        file's unfinished last line. Call it before anything is judged; later calls do
        nothing more than read what may still have been appended."""
        self._skip_backlog()
        self.hang_judge.new_read()
        for f in self._followers.values():
            f.advance()
        for path in self.paths:
            if self._open[path] or self._partial[path]:
                last, self._partial[path], self._open[path] = self._partial[path], "", False
                extra, self._dropped[path] = self._dropped[path], 0
                self._lines(path, last, extra)
        self.hang_judge.close()
        self.finished = True

    def _skip_backlog(self) -> None:
        """More than :data:`FINAL_READ_BYTES` were not read yet (the job wrote faster
        than it could be read): read each file's first lines when none were read, then
        skip to the last ``FINAL_READ_BYTES / files`` bytes of each, the skipped bytes
        searched for the patterns only; :attr:`gaps` says so."""
        pending = {path: f.pending_bytes() for path, f in self._followers.items()}
        if sum(pending.values()) <= FINAL_READ_BYTES:
            return
        if len(self.head) < HEAD_LINES:
            self.hang_judge.new_read()
            for f in self._followers.values():
                if f.offset == 0:
                    f.advance(max_bytes=HEAD_READ_BYTES)
        share = FINAL_READ_BYTES // len(self._followers)
        for path, f in self._followers.items():
            if self._open[path] or self._partial[path]:  # a line cut by the skip
                last, self._partial[path], self._open[path] = self._partial[path], "", False
                extra, self._dropped[path] = self._dropped[path], 0
                self._lines(path, last, extra)
            scan = _PatternScan(self.pattern_hits)
            skipped = f.skip(share, scan.feed, hand=scan.budget)
            if not skipped:
                continue
            for pattern, count in scan.counts.items():
                self.pattern_hits[pattern] += count
            searched = (
                "not searched: no patterns" if not scan.needles else
                "searched for the success and failure patterns only"
                if scan.scanned >= skipped else
                f"the last {scan.scanned} of them searched for the success and failure "
                "patterns only, the ones before not at all")
            self.gaps.append(
                f"{path}: the job wrote faster than its output could be read: {skipped} "
                f"bytes before its last {share} were skipped after it ended ({searched}; "
                "a hang marker, a test's or a figure's line among them was not seen)")

    # ------------------------------------------------------------------ what it saw
    @property
    def hang_detected(self) -> bool:
        """The hang detector's own line appeared in a file and stands
        (:class:`HangJudge`): not a test's output, not pending in a running pytest
        session (until :meth:`finish`)."""
        return bool(self.hang_judge.hang_line)

    @property
    def hang_line(self) -> str:
        """The detector's line that stands (:attr:`hang_detected`), or ""."""
        return self.hang_judge.hang_line

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self._followers.values())

    @property
    def bytes_skipped(self) -> int:
        """Bytes :meth:`finish` skipped (:attr:`gaps`)."""
        return sum(f.bytes_skipped for f in self._followers.values())

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

    def snapshot(self, err: Path | None = None) -> OutputSnapshot:
        """What was kept, frozen for the judge (:class:`slurm_fsm.runfacts.RunFacts`):
        ``err`` names the ``.err`` file whose own tail is kept apart (one-shot)."""
        return OutputSnapshot(
            head=tuple(self.head), tail=tuple(self.tail()),
            err_tail=tuple(self.file_tail(err)) if err is not None and err != self.paths[0]
            else (),
            parser_lines=tuple(self.parser_lines(100)), pattern_hits=dict(self.pattern_hits),
            hang_line=self.hang_line, empty=self.empty)


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
    wf = workflow(spec.workflow_type)
    return JobOutput(paths, relevant=wf.relevant, hint=wf.relevant_hint,
                     patterns=dict.fromkeys(patterns), on_text=on_text)
