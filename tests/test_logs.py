"""slurm_fsm.logs: the bounded tail and the LogFollower."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm import logs
from slurm_fsm.logs import LogFollower, tail_lines


class CountingFile(io.RawIOBase):
    """Wraps a binary file and counts the bytes read through it."""

    def __init__(self, inner: Any, counter: dict[str, int]) -> None:
        self.inner = inner
        self.counter = counter

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.inner.read(size)
        self.counter["bytes"] += len(data)
        self.counter["reads"] += 1
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        pos: int = self.inner.seek(offset, whence)
        return pos

    def fileno(self) -> int:
        fd: int = self.inner.fileno()
        return fd

    def close(self) -> None:
        self.inner.close()
        super().close()


@pytest.fixture
def read_counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Every open() in slurm_fsm.logs goes through CountingFile."""
    counter = {"bytes": 0, "reads": 0, "opens": 0}

    def spy_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> CountingFile:
        counter["opens"] += 1
        return CountingFile(open(path, mode, *args, **kwargs), counter)

    real_open_for_reading = logs.open_for_reading

    def spy_open_for_reading(path: Any, **kwargs: Any) -> CountingFile:
        counter["opens"] += 1
        return CountingFile(real_open_for_reading(path, **kwargs), counter)

    monkeypatch.setattr(logs, "open", spy_open, raising=False)
    monkeypatch.setattr(logs, "open_for_reading", spy_open_for_reading)
    yield counter


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 50 MB: 'line <i> ...' lines, with markers at known places."""
    path = tmp_path_factory.mktemp("big") / "big.log"
    filler = "x" * 60
    n = 700_000
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            if i == 123:
                f.write(f"line {i} ERROR: early failure\n")
            elif i % 100_000 == 7:
                f.write(f"line {i} PASSED marker {filler}\n")
            else:
                f.write(f"line {i} {filler}\n")
    assert path.stat().st_size > 45_000_000
    return path


# ------------------------------------------------------------------ tail_lines
def test_tail_small_file(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_text("one\ntwo\nthree\n")
    assert tail_lines(p, 2) == ["two", "three"]
    assert tail_lines(p, 10) == ["one", "two", "three"]
    assert tail_lines(p, 0) == []


def test_tail_without_final_newline_and_crlf(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"one\r\ntwo\r\nthree")
    assert tail_lines(p, 2) == ["two", "three"]


def test_tail_keeps_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_text("a\n\nb\n\n")
    assert tail_lines(p, 3) == ["", "b", ""]


def test_tail_missing_and_empty(tmp_path: Path) -> None:
    assert tail_lines(tmp_path / "nope.log", 5) == []
    (tmp_path / "empty.log").write_bytes(b"")
    assert tail_lines(tmp_path / "empty.log", 5) == []


@pytest.mark.parametrize("block", [1, 2, 3, 5, 7, 64])
def test_tail_any_block_size(tmp_path: Path, block: int) -> None:
    p = tmp_path / "a.log"
    lines = [f"l{i}" * (i % 4) for i in range(40)]
    p.write_text("\n".join(lines) + "\n")
    for n in (1, 2, 7, 39, 40, 41):
        assert tail_lines(p, n, block=block) == lines[-n:], (n, block)


def test_tail_invalid_utf8_replaced(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(b"ok\n\xff\xfebad \xe2\x82\xac\n")
    assert tail_lines(p, 2) == ["ok", "\ufffd\ufffdbad \u20ac"]


def test_tail_multibyte_across_block_boundary(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_text("ééé\nüüü\n", encoding="utf-8")
    assert tail_lines(p, 2, block=3) == ["ééé", "üüü"]


def test_tail_large_file_reads_little(big_log: Path, read_counter: dict[str, int]) -> None:
    got = tail_lines(big_log, 100)
    assert len(got) == 100
    assert got[0].startswith("line 699900 ")
    assert got[-1].startswith("line 699999 ")
    assert read_counter["bytes"] < 3 * 65536
    assert read_counter["opens"] == 1


def test_tail_huge_final_line_is_bounded(tmp_path: Path, read_counter: dict[str, int]) -> None:
    p = tmp_path / "a.log"
    with open(p, "wb") as f:
        f.write(b"first\n")
        f.write(b"y" * 5_000_000)
    got = tail_lines(p, 3, max_bytes=100_000, max_line=50)
    assert len(got) == 1
    assert got[0].startswith("y" * 50) and "more characters" in got[0]
    assert read_counter["bytes"] <= 100_000


# ------------------------------------------------------------------ LogFollower
def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_follower_reads_each_byte_once(tmp_path: Path, read_counter: dict[str, int]) -> None:
    p = tmp_path / "job.log"
    seen: list[str] = []
    fol = LogFollower(p, on_text=seen.append)
    assert fol.poll() == ""  # not there yet
    parts = [b"start\n", b"", b"step 1 of 3\nstep 2", b" of 3\n", b"done\n"]
    for part in parts:
        _append(p, part)
        fol.poll()
    assert fol.poll() == ""
    assert fol.bytes_read == p.stat().st_size
    assert read_counter["bytes"] == p.stat().st_size
    assert "".join(seen) == p.read_text()
    assert fol.last_line == "done"
    assert not fol.hang_detected


def test_follower_returns_new_text_only(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    p.write_text("a\n")
    fol = LogFollower(p)
    assert fol.poll() == "a\n"
    _append(p, b"b\n")
    assert fol.poll() == "b\n"
    assert fol.offset == 4


@pytest.mark.parametrize("split", range(1, 13))
def test_follower_marker_split_across_polls(tmp_path: Path, split: int) -> None:
    p = tmp_path / "job.log"
    text = b"NCCL: HANG Detected on rank 3\n"
    start = text.index(b"HANG")
    cut = start + split
    fol = LogFollower(p)
    _append(p, b"running\n" + text[:cut])
    fol.poll()
    assert not fol.hang_detected
    _append(p, text[cut:])
    fol.poll()
    assert fol.hang_detected


def test_follower_marker_over_many_tiny_polls(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    fol = LogFollower(p)
    for ch in b"xx hang detected yy":
        _append(p, bytes([ch]))
        fol.poll()
    assert fol.hang_detected
    assert fol.bytes_read == p.stat().st_size


def test_follower_keeps_only_a_small_tail(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    fol = LogFollower(p)
    _append(p, b"h" * 100_000 + b"\n" + b"p" * 100_000)
    fol.poll()
    assert len(fol._tail) <= len("hang detected") - 1
    assert len(fol._partial) <= LogFollower.PARTIAL_LINE_CHARS


def test_follower_custom_marker(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    p.write_text("Watchdog caught collective operation timeout\n")
    fol = LogFollower(p, hang_marker="collective operation TIMEOUT")
    fol.poll()
    assert fol.hang_detected


def test_follower_truncation_restarts_at_zero(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    p.write_text("old content that is long\n")
    fol = LogFollower(p)
    fol.poll()
    p.write_text("new\n")  # truncates, shorter than the offset
    assert fol.poll() == "new\n"
    assert fol.restarts == 1
    assert fol.last_line == "new"
    assert fol.bytes_read == len("old content that is long\n") + 4


def test_follower_replaced_file_restarts(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    p.write_text("first file\n")
    fol = LogFollower(p)
    fol.poll()
    keep = tmp_path / "keep"  # hold the old inode so it cannot be reused
    os.rename(p, keep)
    p.write_text("second file, longer than the first\n")
    assert fol.poll() == "second file, longer than the first\n"
    assert fol.restarts == 1


def test_follower_deleted_file_then_recreated(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    p.write_text("abc\n")
    fol = LogFollower(p)
    fol.poll()
    p.unlink()
    assert fol.poll() == ""
    p.write_text("x\n")
    assert fol.poll() == "x\n"


def test_follower_utf8_split_across_polls(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    fol = LogFollower(p)
    data = "température €\n".encode()
    cut = data.index("€".encode()) + 1
    _append(p, data[:cut])
    first = fol.poll()
    _append(p, data[cut:])
    second = fol.poll()
    assert first + second == "température €\n"
    assert "\ufffd" not in first + second


def test_follower_last_line(tmp_path: Path) -> None:
    p = tmp_path / "job.log"
    fol = LogFollower(p)
    _append(p, b"[ 10%] Building a\n")
    fol.poll()
    assert fol.last_line == "[ 10%] Building a"
    _append(p, b"\n\n   \n")
    fol.poll()
    assert fol.last_line == "[ 10%] Building a"
    _append(p, b"[ 20%] Buil")
    fol.poll()
    assert fol.last_line == "[ 20%] Buil"
    _append(p, b"ding b\n")
    fol.poll()
    assert fol.last_line == "[ 20%] Building b"
    _append(p, b"progress 1/3\rprogress 2/3\rprogress 3/3\r\n")
    fol.poll()
    assert fol.last_line == "progress 3/3"


def test_follower_on_big_file(big_log: Path, read_counter: dict[str, int]) -> None:
    fol = LogFollower(big_log)
    fol.poll()
    fol.poll()
    size = big_log.stat().st_size
    assert fol.bytes_read == size
    assert read_counter["bytes"] == size
    assert fol.last_line.startswith("line 699999 ")
    assert not fol.hang_detected


def test_follower_reads_a_burst_in_bounded_chunks(tmp_path: Path) -> None:
    from slurm_fsm.logs import LogFollower

    log = tmp_path / "burst.log"
    line = "x" * 1023 + "\n"
    log.write_text(line * 3000 + "tail: Hang Detected\n")
    pieces: list[str] = []
    follower = LogFollower(log, on_text=pieces.append)
    follower.CHUNK_BYTES = 64 * 1024
    read = follower.advance()
    assert read == log.stat().st_size == follower.bytes_read
    assert len(pieces) == -(-read // follower.CHUNK_BYTES)
    assert max(len(p) for p in pieces) <= follower.CHUNK_BYTES
    assert follower.hang_detected
    assert follower.last_line == "tail: Hang Detected"
    assert follower.advance() == 0


def test_follower_never_reads_through_a_planted_link(tmp_path: Path) -> None:
    """Issue 20 item 10: a link planted at a job's .err is refused, and said so."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hang detected: not the job's words\n")
    err = tmp_path / "job_1.err"
    err.symlink_to(secret)
    fol = LogFollower(err)
    assert fol.poll() == "" and not fol.hang_detected
    assert "symbolic link" in fol.problem


def test_a_log_deleted_while_followed_is_said(tmp_path: Path) -> None:
    """Issue 26 item 6: a log deleted while it is followed gave FAILED "no success
    pattern" with no word that the log went away."""
    from slurm_fsm.logs import LogFollower

    log = tmp_path / "job.log"
    log.write_text("started\n")
    follower = LogFollower(log)
    assert follower.poll() == "started\n" and follower.problem == ""
    log.unlink()
    assert follower.poll() == ""
    assert "deleted while it was followed" in follower.problem
    log.write_text("again\n")  # a new file at the path: read, and the deletion still said
    assert follower.poll() == "again\n"
    assert "deleted while it was followed" in follower.problem
    fresh = LogFollower(tmp_path / "not-yet.log")  # missing from the start: no problem
    assert fresh.poll() == "" and fresh.problem == ""
