"""The allocation state file ``<repo_root>/work_dirs/.slurm_alloc.json``.

Exactly the keys of procedure.md, so that files written by the original agent
procedure and by slurm_fsm are readable both ways. Writes are atomic (temp file
in the same folder, fsync, rename) and private (mode 0600). :class:`StateStore`
also holds the inter-process lock that step 0 keeps from validation to Ready.

Reads are bounded and of regular files only: a FIFO, a device (``/dev/zero``), a
directory or a file over :data:`MAX_STATE_BYTES` at the state path is a
:class:`~slurm_fsm.errors.StateFileError`, never a hang or a MemoryError. A
``job_id`` that is not a Slurm job id (``-1``, ``--help``, ``12;rm``) makes the
file corrupt too (:meth:`StateStore.read` refuses it, and the backends refuse such
an id again), so no such text ever reaches a command line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import stat
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import filelock
from cattrs.errors import BaseValidationError

from slurm_fsm.backend import is_job_id
from slurm_fsm.convert import converter, problems_of
from slurm_fsm.errors import StateFileError, StateLockTimeout
from slurm_fsm.files import FileProblem, Problem, prove_writable, read_bounded, write_atomic
from slurm_fsm.paths import StatePaths

__all__ = ["KEYS", "MAX_STATE_BYTES", "ORIGINAL_KEYS", "AllocState", "StateLockTimeout",
           "StateStore", "read_regular_file"]

#: A state file is a few hundred bytes; anything larger is not one.
MAX_STATE_BYTES = 64 * 1024


#: The probe of :meth:`StateStore.writable_problem`: more bytes than any state file.
PROBE_BYTES = 4096

#: The keys of the state file, in the order procedure.md writes them, then the keys
#: slurm_fsm adds (a file without them still loads: they have defaults).
KEYS = (
    "job_id", "container_name", "nodelist", "partition", "account", "nodes", "gpus_per_node",
    "docker_image", "container_mounts", "allocated_at", "time_limit", "installed",
    "cpus_per_node", "submit_time", "request",
)
#: The keys procedure.md lists (always written).
ORIGINAL_KEYS = KEYS[:12]


@attrs.frozen(kw_only=True)
class AllocState:
    """What is known about the persistent allocation. Keys match procedure.md.

    ``nodes``, ``nodelist``, ``gpus_per_node`` and ``cpus_per_node`` are what Slurm
    GRANTED (:func:`slurm_fsm.capacity.with_grant`), not what was asked; only a file
    written while the allocation was still PENDING holds the request (it is completed
    when the allocation runs). ``cpus_per_node`` is None in files written before it
    was recorded (and by the original agent procedure)."""

    job_id: str
    nodelist: str
    partition: str
    account: str
    nodes: int
    container_name: str | None = None
    gpus_per_node: int | None = None
    docker_image: str | None = None
    container_mounts: str = ""
    allocated_at: str = attrs.field(factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    time_limit: str = "04:00:00"
    installed: bool = False
    cpus_per_node: int | None = None
    #: Slurm's submit time of the job (``squeue %V``), written once the job is seen:
    #: with ``job_id`` and the tag it names the allocation, and a job that reused the
    #: id (another submit time) is never reused nor cancelled. None in older files.
    submit_time: str | None = None
    #: the nonce of the request that made the job (its comment ``<tag>;req=<nonce>``,
    #: :mod:`slurm_fsm.ownership`), written once the job is seen. None in older files
    #: and for a job made before the nonce.
    request: str | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = converter.unstructure(self)
        # an added key is written only when known: an original file round-trips as it was
        return json.dumps({k: data[k] for k in KEYS
                           if k in ORIGINAL_KEYS or data[k] is not None}, indent=2) + "\n"


#: The threads of one process that want one state file's lock queue here first
#: (:func:`_in_process_lock`): woken at a sibling's release, never polling the file lock.
_IN_PROCESS: dict[str, threading.Lock] = {}
_IN_PROCESS_GUARD = threading.Lock()
#: How often a process that waits for another process's lock tries it again, in s.
LOCK_POLL_S = 0.02


def _in_process_lock(lock_path: Path) -> threading.Lock:
    """The one in-process lock of ``lock_path`` (by its absolute path)."""
    key = os.path.abspath(lock_path)
    with _IN_PROCESS_GUARD:
        return _IN_PROCESS.setdefault(key, threading.Lock())


#: What ``flock`` says on a filesystem whose locks do not work (NFS without its lock
#: daemon: ENOLCK; a FUSE or overlay mount without flock: EOPNOTSUPP, ENOSYS). The lock
#: is then skipped with a warning, never a failure: it only saves duplicate work on one
#: host; who uses an allocation is Slurm's to say (leases, closing markers, nonces).
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})


class StateStore:
    """Reads, writes and locks one state file."""

    def __init__(self, path: Path, lock_timeout_s: float = 900.0) -> None:
        self.path = Path(path)
        self.lock_path = StatePaths.for_state_file(self.path).lock
        self.lock_timeout_s = lock_timeout_s
        self._lock = filelock.FileLock(str(self.lock_path), timeout=lock_timeout_s,
                                       poll_interval=LOCK_POLL_S)
        #: why the file lock could not be taken on this filesystem (:data:`NO_LOCKS`),
        #: once it was found so; the runs go on without it
        self.unlocked: str | None = None
        #: this thread's entries of locked() held without the file lock (NO_LOCKS)
        self._unlocked = threading.local()

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> AllocState | None:
        """The state, or None when there is no file.

        Raises StateFileError when the file is unreadable, half-written or
        lacks keys; callers treat that like a missing file.
        """
        raw = read_regular_file(self.path, MAX_STATE_BYTES)
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StateFileError(str(self.path), "not UTF-8 text") from None
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
            raise StateFileError(str(self.path), f"not valid JSON ({why})") from None
        if not isinstance(data, dict):
            raise StateFileError(str(self.path), "not a JSON object")
        if isinstance(data.get("job_id"), str) and not data["job_id"].strip():
            raise StateFileError(str(self.path), "job_id: empty")
        try:
            state = converter.structure(data, AllocState)
        except BaseValidationError as exc:
            raise StateFileError(str(self.path), "; ".join(problems_of(exc))) from None
        if not is_job_id(state.job_id):
            # the one check of ids from a file: -1, --help, "12;rm" never reach a command
            # line (the backends refuse them too: slurm_fsm.backend.check_job_id)
            raise StateFileError(str(self.path), f"job_id: not a Slurm job id: "
                                 f"{state.job_id!r}")
        return state

    def writable_problem(self) -> str | None:
        """Why the state file could not be written here, or None when it can.

        Step 0 asks before it allocates anything: an allocation whose state file
        cannot be written would be leaked. The check is real (a temporary file is
        created and removed next to the state file), so it holds for root too."""
        where = self.path.parent
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"its folder {where} cannot be created ({exc.strerror or exc})"
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            return f"cannot be inspected ({exc.strerror or exc})"
        if mode is not None and stat.S_ISDIR(mode):
            return "is a directory, not a file"
        return self.owner_problem() or prove_writable(where, PROBE_BYTES)

    def owner_problem(self) -> str | None:
        """Why this user must not use this state file: it (or its lock) belongs to
        another user. Two users sharing one repo_root would each take the other's
        allocation for a lost one (replace the state file, cancel their own previous
        allocation as an orphan): refused, with the owner named."""
        me = os.geteuid()
        for path in (self.path, self.lock_path):
            try:
                uid = os.lstat(path).st_uid
            except OSError:
                continue
            if uid != me:
                return (f"{path.name} belongs to user {_user_name(uid)} (uid {uid}), not to "
                        f"{_user_name(me)} (uid {me}) who runs slurm_fsm: two users cannot "
                        "share one repo_root's work_dirs (each would take the other's "
                        "allocation for a lost one); use a checkout of your own. Nothing "
                        "was allocated or cancelled")
        return None

    def write(self, state: AllocState) -> None:
        """Atomically replace the file with ``state`` (mode 0600), through an ``O_EXCL``
        temp file (:func:`slurm_fsm.files.write_atomic`): a link planted at the state path
        is replaced, never written through. ``OSError`` (ENOSPC) leaves the old file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, state.to_json().encode("utf-8"))

    def delete(self) -> bool:
        """Remove the file (or whatever unusable thing is at its path, not a directory);
        True when there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def holds_lock(self) -> bool:
        """This store (this process) holds the lock now (or is inside :meth:`locked`
        where the filesystem has no working locks)."""
        return bool(self._lock.is_locked) or self._unlocked_depth() > 0

    def _unlocked_depth(self) -> int:
        return int(getattr(self._unlocked, "depth", 0))

    def delete_if_names(self, job_id: str) -> bool:
        """Delete the file when it names ``job_id`` (or is gone, or unreadable), under
        the lock, but only if the lock is free now (or held here): never waits. True
        when no file names ``job_id`` afterwards; False when the lock is another's, it
        cannot be taken, or the file names another allocation (it is left alone)."""
        try:
            self._lock.acquire(timeout=0)
        except (filelock.Timeout, OSError):
            return False
        try:
            try:
                current = self.read()
            except StateFileError:
                current = None
                if not self.path.exists():
                    return True
            if current is not None and current.job_id != job_id:
                return False
            self.delete()
            return True
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def locked(self, on_wait: Callable[[str], None] | None = None, *,
               siblings_quiet: bool = False) -> Iterator[None]:
        """Hold the inter-process lock of this state file (re-entrant in a process).

        ``on_wait`` hears once when another process holds it and this one waits; also
        when another thread of this process does, unless ``siblings_quiet`` (the runs
        of one ``run_many`` take step 0 in turn by design: not "another run").
        StateFileError at once when the state file or the lock is another user's
        (:meth:`owner_problem`), checked when the lock is first taken only: taken again
        inside (re-entrant, step 0's triggers) nothing is checked, nothing can fail, so
        a StateFileError (exit 2 on the CLI) never comes after a Slurm command."""
        if self._lock.is_locked:  # held by this thread already (its context is per
            yield                 # thread): an entry nested in the one that releases it
            return
        if self._unlocked_depth():  # held here, without the file lock (NO_LOCKS)
            self._unlocked.depth += 1
            try:
                yield
            finally:
                self._unlocked.depth -= 1
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        problem = self.owner_problem()
        if problem is not None:
            raise StateFileError(str(self.path), problem)
        # the threads of this process first (a run_many's runs): one at a time, each
        # woken at once by the release before it; then the file lock (other processes)
        siblings = _in_process_lock(self.lock_path)
        said = False
        if not siblings.acquire(blocking=False):
            # a sibling's turn is not said; another process's lock after it still is
            said = False if siblings_quiet else self._said_wait(on_wait)
            if not siblings.acquire(timeout=self.lock_timeout_s):
                raise self._timeout()
        try:
            with self._file_lock(on_wait, said):
                yield
        finally:
            siblings.release()

    @contextlib.contextmanager
    def _file_lock(self, on_wait: Callable[[str], None] | None, said: bool
                   ) -> Iterator[None]:
        """The inter-process lock (this process's siblings are queued already); none
        where the filesystem has no working locks (:data:`NO_LOCKS`: :attr:`unlocked`
        says why)."""
        try:
            try:
                self._lock.acquire(timeout=0)
            except filelock.Timeout:
                if not said:
                    self._said_wait(on_wait)
                self._lock.acquire()
        except filelock.Timeout:
            raise self._timeout() from None
        except OSError as exc:  # not a Timeout (an OSError too): a planted link (ELOOP)
            if exc.errno not in NO_LOCKS:
                raise StateFileError(str(self.path), f"its lock {self.lock_path} cannot be "
                                     f"taken ({exc.strerror or exc}); nothing was "
                                     "done") from None
            self.unlocked = (f"the state file's lock {self.lock_path} cannot be taken on "
                             f"this filesystem ({exc.strerror or exc}): going on without "
                             "it (it only saves duplicate work on one host; Slurm decides "
                             "who uses the allocation)")
            self._unlocked.depth = 1
            try:
                yield
            finally:
                self._unlocked.depth = 0
            return
        try:
            yield
        finally:
            self._lock.release()

    def _said_wait(self, on_wait: Callable[[str], None] | None) -> bool:
        if on_wait is not None:
            on_wait(f"waiting for {self.lock_path}: another run on this repo_root "
                    f"holds it (at most {self.lock_timeout_s:g} s)")
        return True

    def _timeout(self) -> StateLockTimeout:
        return StateLockTimeout(
            str(self.lock_path),
            f"another orchestrator has held this lock for {self.lock_timeout_s:g} s "
            "(step 0 of another run on the same repo_root); nothing was done")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def read_regular_file(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path``, or None when nothing is there.

    Only a regular file of this user of at most ``limit`` bytes is read, never through
    a symbolic link (the state file lives in the shared ``work_dirs``); anything else
    raises StateFileError at once (:func:`slurm_fsm.files.read_bounded` with
    ``follow=False, owned=True``: the open never blocks, the read is bounded)."""
    try:
        return read_bounded(path, limit, follow=False, owned=True)
    except FileProblem as problem:
        if problem.kind is Problem.MISSING:
            return None
        if problem.kind is Problem.NOT_REGULAR:
            raise StateFileError(str(path), f"{problem.detail}, not a regular file") from None
        if problem.kind is Problem.TOO_BIG:
            size = f"{problem.size} bytes, larger" if problem.size is not None else "larger"
            raise StateFileError(str(path), f"{size} than any state file ({limit} bytes at "
                                 "most)") from None
        raise StateFileError(str(path), f"cannot read: {problem.detail}") from None
