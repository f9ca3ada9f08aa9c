"""Every file slurm_fsm opens because a user, a checkout or an earlier run put it there.

Two kinds of paths:

* a path the user names (the job spec): :func:`read_bounded` with ``follow=True``; the
  open never blocks (a FIFO without a writer does not hang it), anything that is not a
  regular file is refused before a byte is read, and at most ``limit + 1`` bytes are read;
* a path under a shared folder (``<repo_root>/work_dirs``, a job's ``work_dir``): the
  state file, the run records and leases, ``.salloc.log``, the one-shot ``.out``/``.err``.
  Whoever can write that folder could plant a symbolic link there. These are opened with
  ``O_NOFOLLOW`` and checked to be regular files owned by the user running slurm_fsm
  (:func:`read_bounded` with ``follow=False``, :func:`open_private`,
  :func:`open_for_reading`); files are replaced atomically through an ``O_EXCL`` temp
  file with an unguessable name in the same folder (:func:`write_atomic`). A link, a
  FIFO or another user's file is refused with a :class:`FileProblem`, never written
  through.

Callers turn a :class:`FileProblem` into their own error (``SpecError``,
``StateFileError``) with their own wording.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from slurm_fsm.errors import FileProblem, Problem

__all__ = [
    "FileProblem",
    "Problem",
    "file_kind",
    "open_for_reading",
    "open_private",
    "prove_writable",
    "read_bounded",
    "umasked",
    "write_atomic",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def file_kind(mode: int) -> str:
    """``a directory``, ``a FIFO``, ... for an ``st_mode`` that is not a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _open(path: Path, flags: int, mode: int = 0o600, *, follow: bool) -> int:
    """``os.open`` that turns the OS's refusals into :class:`FileProblem`.

    Without ``follow``, a symbolic link at ``path`` (the last component) is refused:
    ``O_NOFOLLOW`` makes the open fail with ELOOP and nothing is opened through it."""
    flags |= os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= _NOFOLLOW
    try:
        return os.open(path, flags, mode)
    except FileNotFoundError:
        raise FileProblem(path, Problem.MISSING) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise FileProblem(path, Problem.LINK, "a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO on some systems
            raise FileProblem(path, Problem.NOT_REGULAR, "not a regular file") from None
        raise FileProblem(path, Problem.UNREADABLE, exc.strerror or str(exc)) from None


def _check_fd(path: Path, fd: int, *, owned: bool) -> os.stat_result:
    """The fstat of ``fd``; :class:`FileProblem` when it is not a regular file, or (with
    ``owned``) not owned by the effective user."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise FileProblem(path, Problem.NOT_REGULAR, file_kind(info.st_mode))
    if owned and info.st_uid != os.geteuid():
        raise FileProblem(path, Problem.NOT_OURS, f"owned by uid {info.st_uid}, not by uid "
                          f"{os.geteuid()} who runs slurm_fsm")
    return info


def read_bounded(path: Path, limit: int, *, follow: bool = True, owned: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them;
    :class:`FileProblem` otherwise.

    ``follow=False`` refuses a symbolic link at ``path``; ``owned=True`` refuses a file
    that another user owns (both for files under a shared folder)."""
    fd = _open(path, os.O_RDONLY, follow=follow)
    try:
        info = _check_fd(path, fd, owned=owned)
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


def open_for_reading(path: Path, *, owned: bool = True) -> BinaryIO:
    """A binary reader of the regular file ``path`` under a shared folder (a job's log,
    ``.err``, ``.salloc.log``): a symbolic link is refused (``O_NOFOLLOW``), so is a
    FIFO, a device, and (with ``owned``) another user's file. The caller closes it."""
    fd = _open(path, os.O_RDONLY, follow=False)
    try:
        _check_fd(path, fd, owned=owned)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def umasked(mode: int) -> int:
    """``mode`` as this process's umask lets it be (``0o644`` under umask 077:
    ``0o600``). The umask is read from ``/proc/self/status``, else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return mode & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mode & ~mask


def open_private(path: Path, *, append: bool = False, mode: int = 0o600) -> BinaryIO:
    """A binary writer of ``path`` (created with ``mode`` when missing), never through a
    symbolic link and never into a file of another user or a non-regular file.

    Truncated after the checks unless ``append``; an existing file gets ``mode`` too.
    A file with more than one hard link (another name of some other file, planted in a
    shared folder: ``O_NOFOLLOW`` stops symbolic links only) is never written: it is
    replaced by a new file (or, with ``append``, refused). The caller closes it."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
    try:
        fd = _open(path, flags, mode, follow=False)
    except FileProblem as problem:
        if problem.kind is Problem.UNREADABLE:  # the words fit a write better
            raise FileProblem(path, Problem.UNREADABLE, f"cannot write: {problem.detail}") \
                from None
        raise
    try:
        _check_fd(path, fd, owned=True)
        links = os.fstat(fd).st_nlink
        if links > 1:
            os.close(fd)
            fd = -1
            if append:
                raise FileProblem(path, Problem.NOT_REGULAR,
                                  f"a hard link ({links} names for one file)")
            os.unlink(path)  # the other name keeps its file, untouched
            fd = _open(path, flags | os.O_EXCL, mode, follow=False)
            _check_fd(path, fd, owned=True)
        os.fchmod(fd, mode)
        if not append:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab" if append else "wb")
    except FileProblem:
        if fd >= 0:
            os.close(fd)
        raise
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        raise FileProblem(path, Problem.UNREADABLE, f"cannot write: {exc.strerror or exc}") \
            from None


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` in one step (a reader sees the old or the new
    bytes, never a part).

    The bytes go first into a temp file in the same folder, created with ``O_EXCL`` and
    ``O_NOFOLLOW`` under a random name (nobody can plant a link at it in advance), then
    ``os.replace`` puts it at ``path``: a symbolic link planted at ``path`` is replaced,
    never written through. A failed write (``ENOSPC``) leaves ``path`` as it was and no
    temp file behind; it raises :class:`OSError` with the OS's words."""
    tmp = path.with_name(f".{path.name}.{os.urandom(8).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def prove_writable(folder: Path, size: int) -> str | None:
    """None when ``size`` bytes can really be written and synced in ``folder``; else
    why not, in the OS's words.

    Creating an empty file proves little (it works on a full disk, which refuses the
    first byte): the probe, an ``O_EXCL`` temp file with a random name, gets ``size``
    bytes and an ``fsync`` before it is removed."""
    probe = folder / f".probe.{os.urandom(8).hex()}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError as exc:
        return f"its folder {folder} is not writable ({exc.strerror or exc})"
    try:
        view = memoryview(b"\0" * size)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as exc:
        return f"{size} bytes cannot be written in its folder {folder} ({exc.strerror or exc})"
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None
