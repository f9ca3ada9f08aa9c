"""slurm_fsm.files: nothing is written or read through a planted link, a FIFO or
another user's file under a shared folder; atomic writes leave no temp behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from slurm_fsm.files import (
    FileProblem,
    Problem,
    open_for_reading,
    open_private,
    read_bounded,
    write_atomic,
)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    return victim


def test_open_private_refuses_a_planted_link_and_leaves_its_target(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    link = tmp_path / ".salloc.log"
    link.symlink_to(victim)
    with pytest.raises(FileProblem) as info:
        open_private(link)
    assert info.value.kind is Problem.LINK
    assert victim.read_bytes() == b"precious"


def test_open_private_writes_a_new_private_file_and_truncates_an_old_one(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with open_private(path) as fh:
        fh.write(b"long first text")
    with open_private(path) as fh:
        fh.write(b"short")
    assert path.read_bytes() == b"short"
    assert path.stat().st_mode & 0o777 == 0o600
    with open_private(path, append=True) as fh:
        fh.write(b"+more")
    assert path.read_bytes() == b"short+more"


def test_open_private_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileProblem) as info:
        open_private(fifo)
    assert info.value.kind in (Problem.NOT_REGULAR, Problem.UNREADABLE)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_open_private_and_reading_refuse_another_users_file(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.write_bytes(b"theirs")
    os.chown(other, 65534, 65534)
    with pytest.raises(FileProblem) as info:
        open_private(other)
    assert info.value.kind is Problem.NOT_OURS
    assert other.read_bytes() == b"theirs"
    with pytest.raises(FileProblem) as info2:
        open_for_reading(other)
    assert info2.value.kind is Problem.NOT_OURS
    with pytest.raises(FileProblem):
        read_bounded(other, 100, follow=False, owned=True)
    assert read_bounded(other, 100) == b"theirs"  # a path the user names: allowed


def test_reading_under_a_shared_folder_refuses_a_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    link = tmp_path / "job_1.err"
    link.symlink_to(victim)
    with pytest.raises(FileProblem) as info:
        open_for_reading(link)
    assert info.value.kind is Problem.LINK
    with pytest.raises(FileProblem) as info2:
        read_bounded(link, 100, follow=False)
    assert info2.value.kind is Problem.LINK
    assert read_bounded(link, 100) == b"precious"  # follow=True: the spec's own path
    with open_for_reading(victim) as fh:
        assert fh.read() == b"precious"


def test_write_atomic_replaces_a_planted_link_instead_of_writing_through_it(
        tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    state = tmp_path / ".slurm_alloc.json"
    state.symlink_to(victim)
    write_atomic(state, b"{}")
    assert victim.read_bytes() == b"precious"
    assert not state.is_symlink()
    assert state.read_bytes() == b"{}"
    assert state.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [".slurm_alloc.json", "victim"]


def test_write_atomic_leaves_the_old_file_and_no_temp_when_the_write_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as info:
        write_atomic(path, b"new")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_hard_link_is_never_written_through(tmp_path: Path) -> None:
    """Issue 26 item 6: ``.salloc.log`` as a hard link to another file of the user:
    O_NOFOLLOW stops symbolic links only. The link is replaced by a new file; the other
    file is untouched; appending to one is refused."""
    from slurm_fsm.files import open_private

    precious = tmp_path / "precious"
    precious.write_bytes(b"keep me\n")
    log = tmp_path / ".salloc.log"
    os.link(precious, log)
    with open_private(log) as fh:
        fh.write(b"salloc output\n")
    assert precious.read_bytes() == b"keep me\n"
    assert log.read_bytes() == b"salloc output\n" and log.stat().st_nlink == 1
    os.unlink(log)
    os.link(precious, log)
    with pytest.raises(FileProblem, match="hard link"):
        open_private(log, append=True)
    assert precious.read_bytes() == b"keep me\n"


@pytest.mark.parametrize(("umask", "mode"), [(0o077, 0o600), (0o022, 0o644),
                                             (0o027, 0o640)])
def test_the_run_log_mode_honours_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Issue 26 item 6: the run log was made 0644 even under umask 077 (logs can hold
    tokens)."""
    from slurm_fsm.files import open_private, umasked

    old = os.umask(umask)
    try:
        assert umasked(0o644) == mode
        with open_private(tmp_path / "run.log", mode=umasked(0o644)) as fh:
            fh.write(b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "run.log").stat().st_mode & 0o777 == mode
