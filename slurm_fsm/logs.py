"""Reading job logs without loading them whole (procedure.md steps 3 and 4).

Every function here reads a bounded number of bytes or streams the file in
fixed-size blocks; none of them holds a whole log in memory:

* :func:`tail_lines` reads backwards from the end in blocks until it has the
  last ``n`` lines (at most ``max_bytes``);
* :class:`LogFollower` is the monitor's eye on a growing log: each
  :meth:`~LogFollower.poll` reads only the bytes appended since the previous
  one, and looks for the hang marker in them (also across two polls).

Text is decoded as UTF-8 with ``errors="replace"``: a job log is not
guaranteed to be valid UTF-8, and a report must still be written.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from slurm_fsm.files import FileProblem, Problem, open_for_reading

__all__ = [
    "DEFAULT_HANG_MARKER",
    "MAX_LINE_CHARS",
    "TAIL_MAX_BYTES",
    "LogFollower",
    "cut_line",
    "hang_line_pattern",
    "is_hang_line",
    "strip_log_prefix",
    "tail_lines",
]

#: The text that makes the monitor cancel a job (matched case-insensitively).
DEFAULT_HANG_MARKER = "hang detected"
#: Lines longer than this (in characters) are cut in what head/tail return.
MAX_LINE_CHARS = 8192
#: tail_lines stops after this many bytes even without n lines.
TAIL_MAX_BYTES = 8 * 1024 * 1024

_BLOCK = 65536

# ------------------------------------------------------------ the hang detector's line
#: ``srun --label``'s ``0: `` (also padded, ``12: ``)
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")
#: A timestamp as loggers print them: TensorRT-LLM's ``12/03/2026-17:00:00``, Go's
#: ``2024/07/11 23:37:56``, ISO ``2026-12-03T17:00:00.123Z``, logging's ``... ,123``.
_TIMESTAMP = (r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}"
              r"(?:[-T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"
              r"|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?")
#: What a logger puts before its message: timestamps, ``[bracketed]`` tags
#: (``[TRT-LLM]``, ``[RANK 2]``, ``[MPI_Rank 1]``, ``[E]``), level words, separators.
_PREFIX_TOKEN = (rf"(?:\[[^\]]*\]|(?:{_TIMESTAMP})(?![\w:])"
                 r"|(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)(?![\w-]):?|[-|]+(?=\s))")
_LOG_PREFIX = re.compile(rf"^(?:{_PREFIX_TOKEN}\s*)+")
#: A source naming itself before the message: ``NCCL watchdog: ``, ``rank0: `` (one to
#: three words, single spaces, a colon and a space).
_SOURCE = r"[A-Za-z][\w.\-]*(?: [A-Za-z][\w.\-]*){0,2}: "


def strip_log_prefix(line: str) -> str:
    """``line`` without the ``srun -l`` label, timestamps, bracketed logger tags and
    level words before its message: ``0: [12/03/2026-17:00:00] [TRT-LLM] [RANK 1] [E]
    Hang detected after 300 seconds.`` -> ``Hang detected after 300 seconds.``,
    ``2024/07/11 23:37:56 Request throughput (req/sec): 3.014`` -> ``Request
    throughput (req/sec): 3.014``."""
    return _LOG_PREFIX.sub("", _SRUN_LABEL.sub("", line.strip(), count=1), count=1)


def hang_line_pattern(marker: str = DEFAULT_HANG_MARKER) -> re.Pattern[str]:
    """The hang detector's own line: ``marker`` (any case) **begins the message**, after
    what a logger puts before it (:func:`strip_log_prefix`) and at most a short
    ``source: `` (``NCCL watchdog: Hang detected on rank 3``). A line where the words
    come after other text (pytest's captured-log ``ERROR    TRT-LLM:hang_detector.py:62
    Hang detected ...``, an assertion, a test name, an echoed command) does not match."""
    return re.compile(rf"^(?:{_PREFIX_TOKEN}\s*)*(?:{_SOURCE}\s*(?:{_PREFIX_TOKEN}\s*)*)?"
                      rf"{re.escape(marker.strip())}", re.I)


_DEFAULT_HANG_LINE = hang_line_pattern()


def is_hang_line(line: str, marker: str = DEFAULT_HANG_MARKER) -> bool:
    """Is ``line`` (``srun -l`` label and ANSI colours allowed) the hang detector's own
    line (:func:`hang_line_pattern`)? ``[12/03/2026-17:00:00] [TRT-LLM] [E] Hang detected
    after 300 seconds.`` is; ``ERROR    TRT-LLM:hang_detector.py:62 Hang detected after 2
    seconds.`` (pytest's captured log) is not."""
    if not marker.strip():
        return False
    rx = _DEFAULT_HANG_LINE if marker == DEFAULT_HANG_MARKER else hang_line_pattern(marker)
    text = _SRUN_LABEL.sub("", _ANSI.sub("", line).strip().replace("\r", ""), count=1)
    return rx.match(text) is not None


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cut_line(text: str, max_chars: int = MAX_LINE_CHARS, *, extra: int = 0) -> str:
    """``text`` cut to ``max_chars`` characters, saying what was left out:
    ``<first max_chars> [... N more characters]``; ``extra``: characters of the line
    already dropped before ``text`` was kept. Every line a report keeps goes through it
    (docs/report.md), never a bare slice."""
    length = len(text) + extra
    if length > max_chars:
        return f"{text[:max_chars]} [... {length - max_chars} more characters]"
    return text


def _decode(raw: bytes, max_chars: int) -> str:
    text = raw.decode("utf-8", errors="replace")
    if text.endswith("\r"):
        text = text[:-1]
    return cut_line(text, max_chars)


def tail_lines(
    path: Path,
    n: int,
    *,
    block: int = _BLOCK,
    max_bytes: int = TAIL_MAX_BYTES,
    max_line: int = MAX_LINE_CHARS,
    shared: bool = False,
) -> list[str]:
    """The last ``n`` lines of ``path``, oldest first, without their newline.
    ``shared``: ``path`` is under a shared folder (``.salloc.log``): opened with
    :func:`slurm_fsm.files.open_for_reading`, a link or another user's file gives ``[]``.

    Reads backwards from the end in ``block``-sized pieces and stops as soon
    as ``n`` complete lines are in hand, or after ``max_bytes`` (then the
    oldest line returned may be the end of a longer one). A missing file
    gives ``[]``. Lines longer than ``max_line`` characters are cut.
    """
    if n <= 0:
        return []
    block = max(1, block)
    try:
        f = (open_for_reading(path) if shared
             else open(path, "rb"))  # noqa: SIM115 - closed below, seeks need the raw handle
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return []
    except FileProblem:
        return []
    with f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        chunks: list[bytes] = []
        newlines = 0
        read = 0
        # A trailing newline ends the last line; it does not start a new one.
        trailing = 0
        while pos > 0 and read < max_bytes:
            size = min(block, pos, max_bytes - read)
            pos -= size
            f.seek(pos)
            chunk = f.read(size)
            read += len(chunk)
            if not chunks and chunk.endswith(b"\n"):
                trailing = 1
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
            # n lines need n newlines before the oldest (plus the trailing one).
            if newlines - trailing >= n:
                break
    data = b"".join(reversed(chunks))
    if not data:
        return []
    parts = data.split(b"\n")
    if trailing:
        parts.pop()
    # When more than n pieces were read, the first is the end of an older line
    # and falls outside parts[-n:]; when max_bytes stopped the read, it is kept.
    return [_decode(p, max_line) for p in parts[-n:]]


class LogFollower:
    """Follows a growing log: each :meth:`poll` reads only the new bytes.

    ``poll`` opens the file, seeks to where the previous poll stopped, reads
    to the end, closes it, and passes the new text to ``on_text``. A file
    that does not exist yet gives ``""``; a file that got shorter (truncated)
    or was replaced by another file (new inode) is read again from offset 0.
    No byte of the same file is ever read twice: ``bytes_read`` counts them.
    (A file truncated and refilled past the old offset between two polls
    cannot be told from one that grew; its first bytes are then skipped.)

    ``hang_detected`` turns true once ``hang_marker`` appears, in any case,
    also when it is split across two polls (a tail of ``len(marker) - 1``
    characters is kept between polls, never the whole text). ``last_line`` is
    the last non-empty line seen, complete or not, for progress display; for
    ``\\r``-updated progress bars it is the last segment after a ``\\r``.
    """

    #: At most this many characters of an unfinished line are kept for last_line.
    PARTIAL_LINE_CHARS = 4096

    def __init__(
        self,
        path: Path,
        *,
        hang_marker: str = DEFAULT_HANG_MARKER,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.hang_marker = hang_marker
        self.on_text = on_text
        self.bytes_read = 0
        #: bytes :meth:`skip` moved past without reading them as text
        self.bytes_skipped = 0
        self._size = 0
        self.hang_detected = False
        self.last_line = ""
        #: Where the next poll starts reading.
        self.offset = 0
        #: How many times the file was found truncated or replaced.
        self.restarts = 0
        #: Why the last poll could not read the file (a link, another user's file), or
        #: that the file was deleted while it was followed (said from then on), or "".
        self.problem = ""
        self._deleted = ""
        self._marker = hang_marker.lower()
        self._tail = ""  # last len(marker)-1 lowercased characters seen
        self._partial = ""  # the unfinished last line (bounded)
        self._inode: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _restart(self) -> None:
        self.offset = 0
        self.restarts += 1
        self._tail = ""
        self._partial = ""
        self._decoder.reset()

    #: New bytes are read, decoded and scanned this many at a time, so that memory stays
    #: bounded however much the log grew between two polls.
    CHUNK_BYTES = 1 << 20
    #: :meth:`skip` looks this far for the start of a line.
    LINE_SEARCH_BYTES = 1 << 16

    def poll(self) -> str:
        """Read what was appended since the last call; return it as text.

        The returned text is as large as what was appended; a monitor that only needs
        the side effects (``on_text``, ``hang_detected``, ``last_line``) calls
        :meth:`advance`, which holds one chunk at a time.
        """
        parts: list[str] = []
        self.advance(parts.append)
        return "".join(parts)

    def _open(self) -> BinaryIO | None:
        """The log, opened with :func:`slurm_fsm.files.open_for_reading` and positioned
        at :attr:`offset` (from 0 again when it was truncated or replaced), or None (a
        planted link, a FIFO, another user's file: ``problem`` says why; a missing file
        is no problem: it may not exist yet)."""
        try:
            f = open_for_reading(self.path)
        except FileProblem as exc:
            if exc.kind is not Problem.MISSING:
                self.problem = str(exc)
            elif self._inode is not None:  # it was there, and went away
                self._deleted = self.problem = (
                    f"{self.path} was deleted while it was followed (after "
                    f"{self.bytes_read} bytes): what it said after that was never read")
            return None
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"
            return None
        self.problem = self._deleted
        st = os.fstat(f.fileno())
        replaced = self._inode is not None and st.st_ino != self._inode
        if replaced or st.st_size < self.offset:
            self._restart()
        self._inode = st.st_ino
        self._size = st.st_size
        f.seek(self.offset)
        return f

    def pending_bytes(self) -> int:
        """How many bytes the file holds past :attr:`offset` (0 when it cannot be read)."""
        f = self._open()
        if f is None:
            return 0
        f.close()
        return max(0, self._size - self.offset)

    def skip(self, keep: int, on_skipped: Callable[[bytes], None] | None = None,
             hand: int = 0) -> int:
        """Move past all but about the last ``keep`` bytes without decoding them: the
        next :meth:`advance` starts at the first line that begins in them. ``on_skipped``
        gets the last ``hand`` of the skipped bytes, chunk by chunk. Returns how many
        bytes were skipped (also added to :attr:`bytes_skipped`)."""
        f = self._open()
        if f is None:
            return 0
        with f:
            target = self._size - keep
            if target <= self.offset:
                return 0
            f.seek(target)
            newline = f.read(self.LINE_SEARCH_BYTES).find(b"\n")
            end = target + newline + 1 if newline >= 0 else target
            start = max(self.offset, end - hand)
            f.seek(start)
            left = end - start
            while left > 0 and on_skipped is not None:
                raw = f.read(min(self.CHUNK_BYTES, left))
                if not raw:
                    break
                left -= len(raw)
                on_skipped(raw)
        skipped = end - self.offset
        self.offset = end
        self.bytes_skipped += skipped
        self._tail = self._partial = ""
        self._decoder.reset()
        return skipped

    def advance(self, collect: Callable[[str], None] | None = None,
                max_bytes: int | None = None) -> int:
        """Read the new bytes chunk by chunk, at most ``max_bytes`` of them (None: to
        the end); return how many were read."""
        f = self._open()
        if f is None:
            return 0
        total = 0
        with f:
            while max_bytes is None or total < max_bytes:
                size = self.CHUNK_BYTES if max_bytes is None else min(
                    self.CHUNK_BYTES, max_bytes - total)
                raw = f.read(size)
                if not raw:
                    break
                self.offset += len(raw)
                self.bytes_read += len(raw)
                total += len(raw)
                text = self._decoder.decode(raw)
                if not text:
                    continue
                self._scan(text)
                if self.on_text is not None:
                    self.on_text(text)
                if collect is not None:
                    collect(text)
        return total

    def _scan(self, text: str) -> None:
        if self._marker and not self.hang_detected:
            window = self._tail + text.lower()
            if self._marker in window:
                self.hang_detected = True
            keep = len(self._marker) - 1
            self._tail = window[-keep:] if keep > 0 else ""
        combined = self._partial + text
        head, _, rest = combined.rpartition("\n")
        self._partial = rest[-self.PARTIAL_LINE_CHARS :]
        for candidate in (rest, head):
            line = _last_nonempty_line(candidate)
            if line:
                self.last_line = line
                break


def _last_nonempty_line(text: str) -> str:
    """The last non-blank line of ``text`` (after the last non-blank ``\\r``)."""
    end = len(text)
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end]
        for segment in reversed(line.split("\r")):
            if segment.strip():
                return segment.strip()[: MAX_LINE_CHARS]
        end = start - 1
    return ""
