"""The allocation state file ``<repo_root>/work_dirs/.slurm_alloc.json``.

Exactly the keys of procedure.md, so that files written by the original agent
procedure and by slurm_fsm are readable both ways. Writes are atomic (temp file
in the same folder, fsync, rename) and private (mode 0600). :class:`StateStore`
also holds the inter-process lock that step 0 keeps from validation to Ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import filelock
from cattrs.errors import BaseValidationError

from slurm_fsm.convert import converter, problems_of
from slurm_fsm.errors import SlurmFsmError, StateFileError

__all__ = ["KEYS", "AllocState", "StateLockTimeout", "StateStore"]


class StateLockTimeout(SlurmFsmError, TimeoutError):
    """The state file's lock was not free within the store's timeout."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"state file lock {path}: {reason}")

#: The keys of the state file, in the order procedure.md writes them.
KEYS = (
    "job_id", "container_name", "nodelist", "partition", "account", "nodes", "gpus_per_node",
    "docker_image", "container_mounts", "allocated_at", "time_limit", "installed",
)


@attrs.frozen
class AllocState:
    """What is known about the persistent allocation. Keys match procedure.md."""

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

    def to_json(self) -> str:
        data: dict[str, Any] = converter.unstructure(self)
        return json.dumps({k: data[k] for k in KEYS}, indent=2) + "\n"


class StateStore:
    """Reads, writes and locks one state file."""

    def __init__(self, path: Path, lock_timeout_s: float = 900.0) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout_s = lock_timeout_s
        self._lock = filelock.FileLock(str(self.lock_path), timeout=lock_timeout_s)

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> AllocState | None:
        """The state, or None when there is no file.

        Raises StateFileError when the file is unreadable, half-written or
        lacks keys; callers treat that like a missing file.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateFileError(str(self.path), f"cannot read: {exc.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateFileError(str(self.path), f"not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise StateFileError(str(self.path), "not a JSON object")
        try:
            state = converter.structure(data, AllocState)
        except BaseValidationError as exc:
            raise StateFileError(str(self.path), "; ".join(problems_of(exc))) from None
        if not state.job_id.strip():
            raise StateFileError(str(self.path), "job_id: empty")
        return state

    def write(self, state: AllocState) -> None:
        """Atomically replace the file with ``state`` (mode 0600)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".slurm_alloc.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                os.fchmod(fh.fileno(), 0o600)
                fh.write(state.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def delete(self) -> bool:
        """Remove the file; True when there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @contextlib.contextmanager
    def locked(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the inter-process lock of this state file (re-entrant in a process).

        ``on_wait`` hears once when another process holds it and this one waits."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            try:
                self._lock.acquire(timeout=0)
            except filelock.Timeout:
                if on_wait is not None:
                    on_wait(f"waiting for {self.lock_path}: another run on this repo_root "
                            f"holds it (at most {self.lock_timeout_s:g} s)")
                self._lock.acquire()
        except filelock.Timeout:
            raise StateLockTimeout(
                str(self.lock_path),
                f"another orchestrator has held this lock for {self.lock_timeout_s:g} s "
                "(step 0 of another run on the same repo_root); nothing was done",
            ) from None
        try:
            yield
        finally:
            self._lock.release()
