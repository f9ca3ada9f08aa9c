"""Exceptions raised by slurm_fsm.

The tree (every exception class slurm_fsm defines for others to catch is here;
tests/test_errors_tree.py checks that, and that each is drawn below)::

    SlurmFsmError
    ├── SpecError (ValueError)            bad job_spec.json: every bad field by path
    ├── StateFileError (ValueError)       a corrupt or unreadable .slurm_alloc.json
    ├── NotOurJobError (PermissionError)  a state file points at another user's job
    ├── StateLockTimeout (TimeoutError)   another run held the state file's lock too long
    ├── UnknownRun (LookupError)          a run id that names no run of the checkout
    ├── NoSlurmConfig                     no Slurm configuration to read: nothing was run
    ├── PreflightFailed                   the cluster lacks what the spec asks (each check)
    ├── BuildError                        the pre-step cannot go on (no GPU type, no image)
    ├── SetupFailed                       an import, mount warm-up or install exited non-zero
    ├── ContainerShared                   a live allocation on the node uses the container
    ├── AllocationInUse                   other runs' jobs hold it: nothing was changed
    └── BackendError (RuntimeError)       a Slurm operation failed
        ├── JobNotFound (LookupError)     the job (or step) is gone
        ├── ControllerUnreachable (ConnectionError)   never means "job gone"
        ├── CommandTimedOut (TimeoutError)
        ├── ContainerSupportMissing       an image was asked for; no pyxis here
        ├── NvidiaSmiFailed               nvidia-smi failed on a node (the others' rows kept)
        └── CommandFailed                 argv, exit code, stderr tail
            └── AllocationFailed          salloc's own message from .salloc.log
                └── AllocationVanished    the new allocation ended before it started

    FileProblem (OSError)                 a file the spec or the checkout names was not read
                                          (missing, not regular, too big); callers turn it
                                          into SpecError or StateFileError

    scancelshim.Refused                   the scancel shim will not pass a call on (the
                                          shim runs as a file of its own, importing nothing
                                          of slurm_fsm: it is defined there)
    HandedOver                            not an error: a detached run's supervisor handed
                                          the run to its agent (slurm_fsm.agent)
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from slurm_fsm.backend import GpuProcess, StepResult

__all__ = [
    "AllocationFailed",
    "AllocationInUse",
    "AllocationVanished",
    "BackendError",
    "BuildError",
    "CommandFailed",
    "CommandTimedOut",
    "ContainerShared",
    "ContainerSupportMissing",
    "ControllerUnreachable",
    "FileProblem",
    "HandedOver",
    "JobNotFound",
    "NoSlurmConfig",
    "NotOurJobError",
    "NvidiaSmiFailed",
    "PreflightFailed",
    "Problem",
    "SetupFailed",
    "SlurmFsmError",
    "SpecError",
    "StateFileError",
    "StateLockTimeout",
    "UnknownRun",
]


class _Said(Protocol):
    """What an error lists and says in its message (a lease's holder, a node's
    nvidia-smi failure): this module imports none of the modules that raise it."""

    def describe(self) -> str: ...


class SlurmFsmError(Exception):
    """Base class of every error slurm_fsm raises on purpose."""


class SpecError(SlurmFsmError, ValueError):
    """A job spec is invalid. ``problems`` lists every bad field as ``path: what``."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid job spec {source}:\n{lines}")


class StateFileError(SlurmFsmError, ValueError):
    """The allocation state file exists but cannot be used."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"state file {path}: {reason}")


class NotOurJobError(SlurmFsmError, PermissionError):
    """A job named in a state file belongs to someone else or has another name."""

    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"job {job_id} is not ours ({reason}); refusing to cancel it")


class StateLockTimeout(SlurmFsmError, TimeoutError):
    """The state file's lock was not free within the store's timeout."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"state file lock {path}: {reason}")


class UnknownRun(SlurmFsmError, LookupError):
    """A run id that is not one, or names no run of the checkout (``slurm-fsm report``,
    :func:`slurm_fsm.detach.attach`): bad input, exit 2 on the CLI."""


class NoSlurmConfig(SlurmFsmError):
    """No Slurm configuration can be found: no Slurm command was run."""


class PreflightFailed(SlurmFsmError):
    """The cluster does not have what the spec asks for: each failed check, naming
    what the cluster has. Nothing was changed on the cluster."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"the cluster cannot run this spec as it is:\n{lines}")


class ContainerShared(SlurmFsmError):
    """The allocation shares a node with another live allocation of the checkout whose
    container of the same name its jobs may use: nothing was imported."""


class AllocationInUse(SlurmFsmError):
    """Other runs' jobs still use the allocation (or container); nothing was changed."""

    def __init__(self, job_id: str, what: str, holders: Sequence[_Said]) -> None:
        self.job_id = job_id
        self.holders = list(holders)
        whose = "; ".join(r.describe() for r in holders)
        super().__init__(
            f"not {what}: allocation {job_id} is in use by {len(holders)} running job(s) of "
            f"other runs ({whose}); nothing was changed. Wait for them, or run again later")


class BuildError(SlurmFsmError):
    """The pre-step cannot go on (no GPU type, no image, a bad tags file, ...)."""


class BackendError(SlurmFsmError, RuntimeError):
    """A Slurm operation failed."""


class JobNotFound(BackendError, LookupError):
    """Slurm does not know the job (or step) any more."""

    def __init__(self, job_id: str, detail: str = "") -> None:
        self.job_id = job_id
        self.detail = detail
        super().__init__(f"job {job_id} not found" + (f": {detail}" if detail else ""))


class ControllerUnreachable(BackendError, ConnectionError):
    """slurmctld could not be reached. This never means that a job is gone."""

    def __init__(self, detail: str, argv: Sequence[str] = ()) -> None:
        self.detail = detail
        self.argv = list(argv)
        super().__init__(f"Slurm controller unreachable: {detail}")


class CommandTimedOut(BackendError, TimeoutError):
    """A Slurm command did not answer within its timeout."""

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        super().__init__(f"{' '.join(self.argv)!s} timed out after {timeout_s:g} s")


class ContainerSupportMissing(BackendError):
    """The spec needs a container image but this Slurm has no pyxis."""


class NvidiaSmiFailed(BackendError):
    """nvidia-smi failed on a node; ``failures`` say where and what it printed,
    ``processes`` are the rows of the nodes where it worked."""

    def __init__(self, failures: Sequence[_Said],
                 processes: list[GpuProcess] | None = None) -> None:
        self.failures = list(failures)
        self.processes = processes or []
        super().__init__("; ".join(f.describe() for f in failures))


class CommandFailed(BackendError):
    """A Slurm command exited non-zero for a reason not classified above."""

    def __init__(
        self, argv: Sequence[str], returncode: int, stderr_tail: str, message: str = ""
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        text = message or f"{' '.join(self.argv)} exited {returncode}"
        if stderr_tail:
            text += f": {stderr_tail.strip()}"
        super().__init__(text)


class AllocationFailed(CommandFailed):
    """salloc did not produce an allocation; ``stderr_tail`` is its own message."""


class AllocationVanished(AllocationFailed):
    """The new allocation ended before it started: cancelled from outside (another
    run's ``release`` on another login node, whose state-file lock is not this one's,
    found it with no lease), or gone from Slurm. A run may ask for one again."""


class SetupFailed(SlurmFsmError):
    """A setup command (import, mount warm-up, install) exited non-zero."""

    def __init__(self, what: str, result: StepResult) -> None:
        self.what = what
        self.result = result
        text = result.stderr.strip() or result.stdout.strip()
        tail = text[-2000:]
        if len(text) > len(tail):  # whole lines only
            tail = tail.split("\n", 1)[-1]
        super().__init__(f"{what} failed with exit code {result.exit_code}:\n{tail}")

    @property
    def output(self) -> str:
        """Everything the step printed (stderr, then stdout)."""
        return self.result.stderr + self.result.stdout


class Problem(Enum):
    """What kind of :class:`FileProblem`."""

    MISSING = "missing"
    UNREADABLE = "unreadable"  # open or read failed (permissions, I/O)
    NOT_REGULAR = "not regular"  # a directory, FIFO, device or socket
    TOO_BIG = "too big"
    LINK = "a symbolic link"  # refused where links are not followed (shared folders)
    NOT_OURS = "owned by another user"  # refused where the owner must be us


class FileProblem(OSError):
    """Why a file was not read (:func:`slurm_fsm.files.read_bounded`). ``kind`` says
    what; ``detail`` is the OS's words or the kind of file found; ``size`` the size seen
    when it was too big (None: it grew while read)."""

    def __init__(self, path: Path, kind: Problem, detail: str = "",
                 size: int | None = None) -> None:
        super().__init__(f"{path}: {kind.value}{': ' + detail if detail else ''}")
        self.path = path
        self.kind = kind
        self.detail = detail
        self.size = size


class HandedOver(Exception):
    """Not an error: a detached run's supervisor handed the run to its agent inside the
    allocation (:mod:`slurm_fsm.agent`); the supervisor ends without a report."""

    def __init__(self, allocation_id: str) -> None:
        super().__init__(f"the run is handed over to its agent in allocation "
                         f"{allocation_id}")
        self.allocation_id = allocation_id
