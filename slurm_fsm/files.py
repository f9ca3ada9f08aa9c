"""Reading a file the spec or the checkout names, bounded and only when it is regular.

Every file slurm_fsm reads because a user or an earlier run pointed at it (the job
spec, the state file) goes through :func:`read_bounded`: the open never blocks (a
FIFO without a writer does not hang it), anything that is not a regular file (a
directory, a FIFO, ``/dev/zero``) is refused before a byte is read, and at most
``limit + 1`` bytes are ever read. Callers turn a :class:`FileProblem` into their
own error (``SpecError``, ``StateFileError``) with their own wording.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from slurm_fsm.errors import FileProblem, Problem

__all__ = ["FileProblem", "Problem", "file_kind", "read_bounded"]


def file_kind(mode: int) -> str:
    """``a directory``, ``a FIFO``, ... for an ``st_mode`` that is not a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (a symlink to one is fine), at most
    ``limit`` of them; :class:`FileProblem` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileProblem(path, Problem.MISSING) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO on some systems
            raise FileProblem(path, Problem.NOT_REGULAR, "not a regular file") from None
        raise FileProblem(path, Problem.UNREADABLE, exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileProblem(path, Problem.NOT_REGULAR, file_kind(info.st_mode))
        if info.st_size > limit:
            raise FileProblem(path, Problem.TOO_BIG, size=info.st_size)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while read
            raise FileProblem(path, Problem.TOO_BIG)
        return b"".join(chunks)
    except FileProblem:
        raise
    except OSError as exc:
        raise FileProblem(path, Problem.UNREADABLE, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
