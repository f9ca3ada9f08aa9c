"""The real backend: Slurm's own tools of this machine, run as subprocesses.

:class:`SubprocessBackend` implements :class:`slurm_fsm.backend.SlurmBackend`.
Command lines, output parsing and error classification are the pure functions
of :mod:`slurm_fsm.slurmcli`; this module only runs them:

* one runner, :func:`run_command`: an argument list (never a shell), a
  timeout on every call, the caller's environment (``SLURM_CONF``, ``PATH``)
  less the ``SLURM_*`` of any job the caller itself runs in;
* on a timeout the tool gets SIGTERM first (``srun`` and ``salloc`` then give
  back what they hold), SIGKILL only after a grace period;
* three processes outlive a call on purpose: the detached ``salloc --no-shell``
  of :meth:`SubprocessBackend.allocate` (reaped by a daemon thread), the
  local script of :meth:`SubprocessBackend.start_script`
  (a :class:`LocalScript`) and a run's lease step of
  :meth:`SubprocessBackend.start_lease` (a :class:`LocalLease`).
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import pwd
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import attrs

from slurm_fsm import files, nvsmi, scancelshim, scriptguard, slurmcli
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    GpuProcess,
    Granted,
    JobFiles,
    JobInfo,
    JobOutcome,
    ScriptRequest,
    StepInfo,
    StepRequest,
    StepResult,
    check_job_id,
    check_step_id,
)
from slurm_fsm.clock import Clock, SystemClock
from slurm_fsm.errors import (
    AllocationFailed,
    AllocationVanished,
    BackendError,
    CommandFailed,
    CommandTimedOut,
    ControllerUnreachable,
    FileProblem,
    JobNotFound,
)
from slurm_fsm.ownership import Ownership, made_by, new_nonce, ownership
from slurm_fsm.preflight import (
    ClusterPartition,
    parse_accounting_enforce,
    parse_associations,
    parse_def_cpu_per_gpu,
    parse_sinfo_partitions,
    sacctmgr_assoc_argv,
    scontrol_config_argv,
    scontrol_partition_argv,
    sinfo_partitions_argv,
)

if TYPE_CHECKING:  # pyxis' options are read when a run asks (a warm run never)
    from slurm_fsm.pyxissite import PyxisSite

__all__ = [
    "CommandResult",
    "LocalAgent",
    "LocalLease",
    "LocalScript",
    "Runner",
    "SubprocessBackend",
    "guarded",
    "run_command",
    "stop_stale_group",
]

log = logging.getLogger(__name__)

#: salloc's line naming the job it was given (``salloc: Granted job allocation 155``)
_SALLOC_GAVE = re.compile(r"(?:Pending|Granted) job allocation (\d+)")

T = TypeVar("T")

@attrs.frozen(kw_only=True)
class CommandResult:
    """What one command did. ``returncode is None``: stopped at ``timeout_s``."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timeout_s: float


#: The injection point for tests: ``runner(argv, timeout_s, env) -> CommandResult``.
Runner = Callable[[Sequence[str], float, Mapping[str, str]], CommandResult]


def run_command(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str],
    *,
    grace_s: float = 5.0,
) -> CommandResult:
    """Run ``argv`` (a list, no shell) with ``env``; never raises for the tool's own failure.

    A missing executable comes back as exit code 127 with the OS error as
    stderr. The tool runs in a process group of its own: at ``timeout_s`` the
    group gets SIGTERM (srun then ends its step), SIGKILL ``grace_s`` later,
    and the result has ``returncode=None`` with whatever was printed. An
    interrupt of the caller (KeyboardInterrupt) stops the tool the same way.
    """
    argv = [str(a) for a in argv]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(argv=tuple(argv), returncode=127, stdout="", stderr=str(exc),
                             seconds=time.monotonic() - start, timeout_s=timeout_s)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        out, err = _stop_group(proc, grace_s)
        rc = None
    except BaseException:
        _stop_group(proc, grace_s)
        raise
    return CommandResult(argv=tuple(argv), returncode=rc, stdout=out or "", stderr=err or "",
                         seconds=time.monotonic() - start, timeout_s=timeout_s)


def _stop_group(proc: subprocess.Popen[str], grace_s: float) -> tuple[str, str]:
    """A tool's process group stopped (:func:`~slurm_fsm.scriptguard.stop_group`); what
    it printed meanwhile (its pipes read all the while)."""
    printed: list[str] = []

    def ended(wait_s: float) -> bool:
        try:
            out, err = proc.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        printed[:] = [out or "", err or ""]
        return True

    scriptguard.stop_group(proc.pid, grace_s, ended=lambda: ended(0.05), sleep=lambda _s: None)
    if printed or ended(grace_s):  # after the SIGKILL
        return printed[0], printed[1]
    # something that left the group still holds the pipes: stop reading
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()
    return "", ""


def _default_runner(argv: Sequence[str], timeout_s: float, env: Mapping[str, str]) -> CommandResult:
    return run_command(argv, timeout_s, env)


def _read_text(path: Path, limit: int = 65536, *, shared: bool = False) -> str:
    """The first ``limit`` bytes of a small file, or "" when it cannot be read.

    ``shared``: a file under a shared folder (``.salloc.log``): a link, a non-regular
    file or another user's file is not read (:func:`slurm_fsm.files.open_for_reading`)."""
    try:
        if shared:
            with files.open_for_reading(path) as fh:
                return fh.read(limit).decode("utf-8", "replace")
        return files.read_bounded(path, 1 << 20).decode("utf-8", "replace")[:limit]
    except OSError:
        return ""


def _id_order(job: JobInfo) -> tuple[int, str]:
    """Job ids in the order the controller assigned them (the oldest first)."""
    return (len(job.job_id), job.job_id)


def _exit_status(returncode: int) -> int:
    """Popen's ``-N`` (killed by signal N) as a shell prints it: ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` lives (zombies waiting for init do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():
        return True
    return bool(scriptguard.group_members(pgid))


def stop_stale_group(identity: Mapping[str, object], grace_s: float = 10.0,
                     clock: Clock | None = None) -> str | None:
    """Stop the process group of an earlier run's script (see
    :meth:`SubprocessBackend.stop_stale_script`). Only when it is provably that group:
    same host and boot, every member ours, and the record's secret ``token`` held by
    the group's guard (or, the guard gone, by a member) in its environment
    (:func:`slurm_fsm.scriptguard.proven_members`). A pid, a start time or a host name
    (world-readable, so plantable) is never enough: a record without the token stops
    nothing."""
    pgid, token = identity.get("pgid"), identity.get("token")
    if not isinstance(token, str):
        return None
    if (identity.get("host") != socket.gethostname()
            or identity.get("boot_id") != scriptguard.boot_id()):
        return None
    # no group: the record named only the token (its run died as its script started);
    # what holds the token is all there is to stop
    gid = pgid if isinstance(pgid, int) and pgid > 1 and pgid != os.getpgrp() else None
    if gid is None and "pgid" in identity:
        return None
    members = scriptguard.proven_members(gid, token) if gid is not None else []
    strays = scriptguard.strays_of(identity)  # what the script detached: its token
    if not members and not strays:
        return None
    clock = clock or SystemClock()
    scriptguard.stop_group(gid if members else None, grace_s,
                           ended=lambda: gid is None or not members or not _group_alive(gid),
                           sleep=clock.sleep, now=clock.now, strays=strays,
                           may_kill=lambda: gid is not None and bool(
                               scriptguard.proven_members(gid, token)))
    said = [f"process group {gid} ({len(members)} process(es))"] if members else []
    if strays:
        said.append(f"{len(strays)} process(es) it detached from its group "
                    f"({scriptguard.describe(strays)})")
    return ", ".join(said)


def guarded(argv: Sequence[str]) -> list[str]:
    """``argv`` under :mod:`slurm_fsm.scriptguard`, tied to this process's life: when
    this process dies (even by ``kill -9``) the guard ends ``argv``'s whole group (an
    ``srun`` then ends its step). The lean guard where the host can run it
    (:func:`slurm_fsm.scriptguard.command`). Unchanged where there is no Python
    executable."""
    if not sys.executable:
        return list(argv)
    return scriptguard.command(os.getpid(), list(argv), python=sys.executable)


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Block until process ``pid`` exits or ``timeout_s`` passes, without polling (a pidfd
    becomes readable when the process exits). False, at once, where pidfds are not
    available: the caller's ``Popen.wait`` then does the waiting."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or already reaped
        return False
    try:
        select.select([fd], [], [], max(0.0, timeout_s))
    finally:
        os.close(fd)
    return True


class LocalScript:
    """``bash <script>`` started by :meth:`SubprocessBackend.start_script`.

    Implements :class:`slurm_fsm.backend.RunningScript`. The script runs under
    :mod:`slurm_fsm.scriptguard` in a session (process group) of its own, so that
    :meth:`terminate` reaches its ``srun`` and everything else it started, and so
    that all of it ends when the orchestrator dies (``PR_SET_PDEATHSIG``).
    """

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path, log_file: IO[bytes],
                 clock: Clock | None = None, token: str = ""):
        self._proc = proc
        self._clock: Clock = clock or SystemClock()
        self._log_path = log_path
        self._log_file = log_file
        self._identity: dict[str, str | int] = {
            "host": socket.gethostname(), "boot_id": scriptguard.boot_id(), "pid": proc.pid,
            "pgid": proc.pid, "start_ticks": scriptguard.start_ticks(proc.pid) or 0,
            "uid": os.getuid(), "token": token,
            # what was forked since: the pids what the script detaches can have
            # (scriptguard.strays_of); read after the guard's start, -1 when unknown
            "forks": scriptguard.fork_count() or -1,
        }

    @property
    def log_path(self) -> Path:
        """Where stdout and stderr of the script go."""
        return self._log_path

    @property
    def pid(self) -> int:
        """The pid of the script's guard, which is also its process-group id."""
        return self._proc.pid

    @property
    def identity(self) -> dict[str, str | int]:
        """Host, boot, uid, pid, process group, start time and the guard's secret token:
        what a later run needs to find this very group again and prove it is ours
        (:func:`stop_stale_group`). Holds a secret: keep it in owner-only files."""
        return dict(self._identity)

    def poll(self) -> int | None:
        """Exit code once finished (``128 + N`` when killed by signal N), else None."""
        rc = self._proc.poll()
        if rc is None:
            return None
        self._close()
        return _exit_status(rc)

    def wait_up_to(self, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` for the script to end: its exit code, or None."""
        try:
            return self.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the script to end; raise ``subprocess.TimeoutExpired`` at ``timeout_s``.

        The end is seen the moment it happens: with a timeout, ``Popen.wait`` polls with
        sleeps of up to 50 ms, so this waits on a pidfd instead (Linux 5.3+; elsewhere
        it falls back to ``Popen.wait``)."""
        if (timeout_s is not None and self._proc.returncode is None
                and _wait_exit(self._proc.pid, timeout_s)):
            polled = self._proc.poll()
            if polled is None:
                raise subprocess.TimeoutExpired(self._proc.args, timeout_s)
            rc = polled
        else:
            rc = self._proc.wait(timeout=timeout_s)
        self._close()
        return _exit_status(rc)

    def terminate(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the script's process group and to what the script detached from it
        (:func:`slurm_fsm.scriptguard.strays_of`: its token); SIGKILL to what is left after
        ``grace_s``.

        The grace period covers the whole group, not only bash: srun passes
        SIGTERM on to its step and needs a moment to see the step end (killed
        earlier, it would leave the step running). The allocation itself is
        never touched.
        """
        # an ended script's group is signalled only while it has members: its id is
        # then nobody else's (an empty one's may be a new process's by now)
        alive = self._proc.returncode is None or self._group_alive()
        scriptguard.stop_group(
            self._proc.pid if alive else None, grace_s, sleep=self._clock.sleep,
            now=self._clock.now, poll_s=0.02, strays=scriptguard.strays_of(self._identity),
            ended=lambda: self._proc.poll() is not None and not self._group_alive())
        self._proc.wait()
        self._close()

    def _group_alive(self) -> bool:
        return _group_alive(self._proc.pid)

    def _close(self) -> None:
        if not self._log_file.closed:
            self._log_file.close()


class LocalLease:
    """A run's lease step: its ``srun`` (:func:`slurmcli.srun_lease_argv`) under
    :mod:`slurm_fsm.scriptguard`, in a session of its own. Implements
    :class:`slurm_fsm.backend.LeaseHandle`. When this process dies, even by
    ``kill -9``, the kernel signals the guard, the guard stops ``srun`` and ``srun``
    ends the step: Slurm lists it no more a fraction of a second later."""

    def __init__(self, proc: subprocess.Popen[bytes], name: str, stderr: IO[bytes]) -> None:
        self._proc = proc
        self._name = name
        self._stderr = stderr
        self._signalled = False  # begin_stop sent the SIGTERM
        self._said = ""  # stderr as it was when the stream was closed

    @property
    def name(self) -> str:
        """The step's name."""
        return self._name

    @property
    def pid(self) -> int:
        """The guard's pid (its process group)."""
        return self._proc.pid

    def alive(self) -> bool:
        """The guard (and so its ``srun``) still runs."""
        return self._proc.poll() is None

    @property
    def stdout(self) -> IO[bytes]:
        """The ``srun``'s stdout (a pipe)."""
        assert self._proc.stdout is not None  # started with stdout=PIPE
        return self._proc.stdout

    @property
    def returncode(self) -> int | None:
        """The guard's exit status once it ended."""
        return self._proc.returncode

    def begin_stop(self) -> None:
        """SIGTERM to the group now, without waiting (:func:`slurm_fsm.leasestop.stop_soon`
        waits in a thread: :meth:`stop`)."""
        if self._proc.poll() is None and not self._signalled:
            self._signalled = True
            scriptguard.signal_group(self._proc.pid, signal.SIGTERM)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the group (``srun`` ends its step; not again after
        :meth:`begin_stop`), until it is gone; SIGKILL after ``grace_s``."""
        if self._proc.poll() is None:
            scriptguard.stop_group(
                self._proc.pid, grace_s,
                ended=lambda: self._proc.poll() is not None and not _group_alive(
                    self._proc.pid), poll_s=0.02, term=not self._signalled)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=grace_s)
        self._said = self.stderr_text()  # kept: why it ended, read after the stop
        for stream in (self._proc.stdout, self._stderr):
            if stream is not None and not stream.closed:
                stream.close()

    def exited_within(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the guard (and its ``srun``) to exit: one that
        closed its output still writes why it ended; whether it exited."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=timeout_s)
        return self._proc.poll() is not None

    def stderr_text(self) -> str:
        """What ``srun`` said on stderr so far (after :meth:`stop`: until then)."""
        if self._stderr.closed:
            return self._said
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return self._said


class LocalAgent(LocalLease):
    """A detached run's agent step, as started by :meth:`SubprocessBackend.start_agent`
    (:class:`slurm_fsm.backend.AgentHandle`): its ``srun`` in a session and process
    group of its own, not guarded."""

    def let_go(self) -> None:
        """SIGKILL to ``srun``'s process group: ``srun`` and its helper end at once and
        the step goes on by itself, as when its host dies whole (measured on 22.05,
        24.11 and 26.05: the agent outlives its login node). Killed alone, ``srun``'s
        helper would cancel the step; SIGTERM to ``srun`` cancels it. The agent never
        writes through ``srun``: it took its own output before it held the run."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        self._said = self.stderr_text()
        if not self._stderr.closed:
            self._stderr.close()


#: A lease ``srun`` silent this long, with no step of its name listed, is started again.
LEASE_SILENT_S = 15.0
#: The most ``srun`` s one lease step is asked with (the last waits to the deadline).
LEASE_ATTEMPTS = 3
#: The pause (times the attempt) before a lease ``srun`` that ended without its task is
#: asked again: slurmctld is back within seconds of a restart.
LEASE_RETRY_PAUSE_S = 2.0
#: How long an ``srun`` that closed its output may take to exit and say why.
LEASE_END_WAIT_S = 10.0


def _await_lease_mark(lease: LocalLease, deadline: float, silent_until: float | None
                      ) -> tuple[bytes, str]:
    """Read the lease's srun until it prints :data:`slurmcli.LEASE_UP` (``up``), ends
    (``ended``), the deadline passes (``timeout``), or ``silent_until`` passes with
    nothing read (``silent``). What it printed, and how the wait ended."""
    out = lease.stdout
    seen = b""
    mark = slurmcli.LEASE_UP.encode()
    while mark not in seen:
        now = time.monotonic()
        if now >= deadline:
            return seen, "timeout"
        if silent_until is not None and not seen and now >= silent_until:
            return seen, "silent"
        until = deadline if silent_until is None or seen else min(deadline, silent_until)
        ready, _, _ = select.select([out], [], [], max(0.0, min(until - now, 1.0)))
        if ready:
            chunk = os.read(out.fileno(), 4096)
            if not chunk:  # srun ended before its task ran
                return seen, "ended"
            seen += chunk
    return seen, "up"


class SubprocessBackend:
    """:class:`~slurm_fsm.backend.SlurmBackend` over salloc, squeue, srun, sbatch,
    scancel, sacct and scontrol.

    ``timeout_s`` bounds every query (squeue, scancel, sacct, scontrol,
    sbatch); ``probe_timeout_s`` the GPU probes, which start steps; a step of
    :meth:`run_step` has its own ``StepRequest.timeout_s``. ``env`` entries are
    added to (or override) the caller's environment, read anew at each call.
    ``runner`` replaces :func:`run_command` (tests). ``clock`` (the system clock by
    default) is :attr:`~slurm_fsm.backend.SlurmBackend.clock`: every pause and deadline
    of the backend's own waits (the polls of :meth:`allocate`, the look-ups after a
    lost sbatch answer) reads and sleeps on it.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 30.0,
        probe_timeout_s: float = 300.0,
        env: Mapping[str, str] | None = None,
        runner: Runner | None = None,
        clock: Clock | None = None,
        on_command: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        #: told every Slurm command this backend issues, as it starts: those run to
        #: their end (``squeue``, ``sacct``, the GPU pre-flight ``srun``) and those it
        #: starts and leaves running (``salloc``, a run's lease ``srun``); not the job's
        #: own ``bash``, whose commands are the job's (the demo counts with it)
        self.on_command = on_command
        self.probe_timeout_s = probe_timeout_s
        self.env_overrides: dict[str, str] = dict(env or {})
        self._runner: Runner = runner or _default_runner
        self.clock: Clock = clock or SystemClock()
        self._container_support: bool | None = None

    # ------------------------------------------------------------- plumbing

    def _announce(self, argv: Sequence[str]) -> None:
        if self.on_command is not None:
            self.on_command(list(argv))

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a Slurm tool gets: see :func:`slurmcli.clean_env`."""
        return slurmcli.clean_env(os.environ, {**self.env_overrides, **(extra or {})})

    def _run(
        self,
        argv: Sequence[str],
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run and classify: the result of a success, or the typed error raised."""
        result = self._exec(argv, timeout_s, env)
        err = self._classify(result)
        if err is not None:
            raise err
        return result

    def _exec(
        self,
        argv: Sequence[str],
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self._announce(argv)
        result = self._runner(list(argv), timeout, self.environment(env))
        log.debug("%s -> %s in %.3f s", " ".join(result.argv), result.returncode, result.seconds)
        return result

    def _exec_step(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """A setup step's ``srun`` (import, warm-up, install), tied to this process's
        life like the script (:func:`guarded`): ``kill -9`` of the orchestrator leaves
        no ``pip install`` running. A test's runner sees the plain ``argv``."""
        if self._runner is not _default_runner:
            return self._exec(argv, timeout_s)
        result = self._exec(guarded(argv), timeout_s)
        return attrs.evolve(result, argv=tuple(str(a) for a in argv))

    @staticmethod
    def _classify(result: CommandResult) -> BackendError | None:
        return slurmcli.classify(
            result.argv,
            result.returncode,
            result.stdout,
            result.stderr,
            timeout_s=result.timeout_s,
        )

    @staticmethod
    def _parse(result: CommandResult, parse: Callable[[str], T]) -> T:
        """Apply a parser; output it cannot read is a CommandFailed, not a ValueError."""
        try:
            return parse(result.stdout)
        except ValueError as exc:
            raise CommandFailed(
                result.argv,
                result.returncode if result.returncode is not None else -1,
                slurmcli.stderr_tail(result.stderr),
                message=f"unexpected output of {' '.join(result.argv)} ({exc})",
            ) from exc

    # ------------------------------------------------------------ protocol

    def current_user(self) -> str:
        """The effective user's name: the user Slurm jobs of ours run as."""
        try:
            return pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            return getpass.getuser()

    def query_job(self, job_id: str) -> JobInfo:
        """``squeue -j ID``: the job's row; JobNotFound when squeue has none."""
        result = self._run(slurmcli.squeue_job_argv(check_job_id(job_id)))
        return self._parse(result, lambda text: slurmcli.parse_job(text, job_id))

    def find_jobs(self, name: str | None, user: str) -> list[JobInfo]:
        """``squeue -u USER --name=NAME``: that user's jobs of that exact name (every job
        of that user when ``name`` is None)."""
        result = self._run(slurmcli.squeue_find_argv(name, user))
        jobs = self._parse(result, slurmcli.parse_jobs)
        return [j for j in jobs if (name is None or j.name == name) and j.user == user]

    def granted(self, job_id: str) -> Granted:
        """``scontrol show job -d -o ID``: what Slurm granted the job."""
        result = self._run(slurmcli.scontrol_granted_argv(check_job_id(job_id)))
        return self._parse(result, lambda text: slurmcli.parse_scontrol_granted(text, job_id))

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        """Start ``salloc --no-shell`` detached and return the job id it creates.

        An existing live job of this name, user and checkout tag is returned as it is
        (an earlier allocate whose answer was lost: the one of this request's nonce
        first, else the oldest): never two allocations. salloc carries the request's
        nonce in its comment (``<tag>;req=<nonce>``, a nonce picked here when the
        request has none), and only the job of that nonce is taken as the one it
        made: another run's concurrent request is never mistaken for it. When another
        run's job of the name is older than ours, ours is cancelled and theirs is
        returned (the lowest id wins: racing requests end with one allocation).
        salloc writes to ``request.log_path``; when it exits non-zero, or no job of
        ours appears within ``wait_s``, AllocationFailed carries its error lines and
        no job of this request is left behind. RUNNING is not awaited here.
        """
        user = request.user or self.current_user()
        if request.comment and request.nonce is None:
            request = attrs.evolve(request, nonce=new_nonce())
        existing = self._existing(request, user)
        if existing is not None:
            return existing

        argv = slurmcli.salloc_argv(request)
        proc = self._start_salloc(argv, request.log_path)

        deadline = self.clock.now() + wait_s
        pause = 0.02
        transient: BackendError | None = None
        while True:
            rc = proc.poll()
            try:
                jobs = self._live_jobs(request.job_name, user, request.comment)
            except (ControllerUnreachable, CommandTimedOut) as exc:
                jobs, transient = [], exc  # keep polling: salloc may still get the job
            own = [j for j in jobs if self._made(j, request, user)]
            if own:
                return self._reconcile(own[0], jobs)
            if rc is not None and rc != 0 and not self._answer_lost(request.log_path):
                raise self._allocation_failed(argv, rc, request.log_path,
                                              gone=transient is None)
            # salloc lost the controller's answer ("Socket timed out"): the job it asked
            # for may exist all the same; it is looked for by this request's nonce until
            # the deadline, then cancelled if it turns up late
            if self.clock.now() >= deadline:
                break
            self.clock.sleep(pause)
            pause = min(pause * 2, 0.5)

        # nothing appeared in time: stop salloc (it withdraws its request) and
        # make sure that no late job of ours survives the failure we report
        ended = proc.poll() is not None  # salloc had its answer (--no-shell: granted)
        if not ended:
            self._stop(proc)
        self._cancel_late(request, user)
        rc = proc.returncode if proc.returncode is not None else -1
        why = f"no job named {request.job_name} of {user} appeared within {wait_s:g} s"
        if transient is not None:
            why += f" (last squeue: {transient})"
        raise self._allocation_failed(argv, rc, request.log_path, why,
                                      gone=ended and transient is None)

    def _existing(self, request: AllocationRequest, user: str) -> str | None:
        """A live job of the request's name and checkout, to adopt: the one of its
        nonce (an earlier attempt whose answer was lost) first, else the oldest."""
        existing = self._live_jobs(request.job_name, user, request.comment)
        if not existing:
            return None
        own = [j for j in existing if self._made(j, request, user)]
        job = (own or existing)[0]
        log.warning("job %s named %s already exists (%s); not allocating another",
                    job.job_id, request.job_name,
                    "this request's" if own else "an earlier request's")
        return job.job_id

    @staticmethod
    def _answer_lost(log_path: Path) -> bool:
        """salloc failed because the controller's answer did not reach it, not because
        the request was refused: its log names the controller unreachable."""
        text = _read_text(log_path, shared=True)
        return any(m in text for m in slurmcli.CONTROLLER_UNREACHABLE_MARKERS)

    @staticmethod
    def _made(job: JobInfo, request: AllocationRequest, user: str) -> bool:
        """``job`` is the one this request made: its nonce (a request without a tag or
        nonce: any job of the name that the search returned)."""
        if not request.comment or request.nonce is None:
            return True
        return made_by(job, user=user, tag=request.comment, nonce=request.nonce)

    def _reconcile(self, own: JobInfo, jobs: Sequence[JobInfo]) -> str:
        """Racing requests of one checkout and name end with one allocation: the
        oldest (lowest id) wins; this request cancels only its own newer job."""
        older = [j for j in jobs if _id_order(j) < _id_order(own)]
        if not older:
            return own.job_id
        winner = older[0]
        log.warning("allocation %s of a concurrent request is older than ours (%s): "
                    "cancelling ours and using %s", winner.job_id, own.job_id, winner.job_id)
        try:
            self.cancel(own.job_id)
        except BackendError as exc:
            log.warning("could not cancel our duplicate allocation %s: %s", own.job_id, exc)
            return own.job_id  # never leave a job of ours behind untracked
        return winner.job_id

    def _start_salloc(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """``salloc`` detached, its output in ``log_path`` (opened privately: never
        through a link planted in the shared work_dirs), reaped in the background."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            log_file = files.open_private(log_path)
        except FileProblem as problem:
            raise AllocationFailed(argv, 1, "", f"the salloc log cannot be written: "
                                   f"{problem}; nothing was allocated") from None
        with log_file:
            self._announce(argv)
            try:
                proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=self.environment(),
                    start_new_session=True,
                )
            except OSError as exc:
                raise AllocationFailed(argv, 127, str(exc), "salloc could not start") from exc
        self._reap_later(proc)
        return proc

    def _cancel_late(self, request: AllocationRequest, user: str) -> None:
        """After a failed allocate: no late job of ours survives (the one salloc
        announced in its log, and any live job of the request's name)."""
        late: set[str] = set()
        announced = slurmcli.salloc_job_id(_read_text(request.log_path, shared=True))
        if announced:
            late.add(announced)  # salloc said so even if squeue did not answer
        try:  # only this request's: another run's concurrent request is not ours to cancel
            late |= {j.job_id for j in self._live_jobs(request.job_name, user, request.comment)
                     if self._made(j, request, user)}
        except BackendError as exc:
            log.warning("could not look for a late allocation: %s", exc)
        for job_id in sorted(late):
            log.warning("cancelling late allocation %s after a failed allocate", job_id)
            try:
                self.cancel(job_id)
            except BackendError as exc:
                log.warning("could not cancel late allocation %s: %s", job_id, exc)

    def _live_jobs(self, name: str, user: str, checkout: str | None = None) -> list[JobInfo]:
        """Live jobs of that name and user that this request could have made, oldest
        first: with ``checkout`` (a checkout's tag), only jobs that
        :func:`~slurm_fsm.ownership.ownership` calls that checkout's (``TAGGED``; an
        untagged or another checkout's job of the same name is never returned nor
        cancelled); without one, any job of that name."""
        jobs = [j for j in self.find_jobs(name, user) if j.state.is_live
                and (not checkout
                     or ownership(j, user=user, tag=checkout, names=name) is Ownership.TAGGED)]
        return sorted(jobs, key=_id_order)

    def _reap_later(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for the detached salloc in a daemon thread, so it never lingers a zombie."""
        thread = threading.Thread(target=proc.wait, name=f"reap-salloc-{proc.pid}", daemon=True)
        thread.start()

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes], grace_s: float = 3.0) -> None:
        """salloc stopped (it withdraws its request): its group, as every group."""
        if not scriptguard.stop_group(proc.pid, grace_s,
                                      ended=lambda: proc.poll() is not None):
            proc.wait(timeout=grace_s)

    @staticmethod
    def _allocation_failed(
        argv: Sequence[str], rc: int, log_path: Path, why: str = "", *, gone: bool = False
    ) -> AllocationFailed:
        """The failure of an allocate. ``gone``: Slurm was asked after salloc and listed
        no live job of the request: when salloc's log names the job it was given, that
        job was cancelled from outside (another login node's release found it with no
        lease: issue 28's races) and :class:`AllocationVanished` says so."""
        text = _read_text(log_path, shared=True)
        detail = slurmcli.salloc_error(text)
        message = why or f"salloc exited {rc}"
        made = _SALLOC_GAVE.search(text) if gone else None
        if made is not None:
            return AllocationVanished(argv, rc, detail, (
                f"{message}: its job {made.group(1)} was made and is gone, cancelled from "
                f"outside (log: {log_path})"))
        return AllocationFailed(argv, rc, detail, f"{message} (log: {log_path})")

    def run_step(self, request: StepRequest) -> StepResult:
        """``srun --jobid=ID -N n ...``: wait for it; its exit code is a result.

        Raises JobNotFound when srun says the allocation is gone (invalid,
        expired, completing), ControllerUnreachable, or CommandTimedOut at
        ``request.timeout_s`` (srun is sent SIGTERM, which ends the step).

        A fresh container (``request.container.fresh``) is two steps: any container
        of that name is removed on the step's nodes (host side, ``enroot remove``),
        then the import runs with ``--container-name=NAME:create``, which pyxis
        fails rather than reuse a container that is still there. A failed removal
        is the step's result (non-zero, its output), and no import is tried.
        """
        check_job_id(request.job_id)
        container = request.container
        if container is not None and container.fresh:
            tag, _, desc = container.owner.partition(" ")
            removal = self._exec_step(
                slurmcli.container_remove_argv(request.job_id, request.nodes, container.name,
                                               tag, " ".join(desc.split())),
                request.timeout_s,
            )
            err = self._classify(removal)
            if isinstance(err, JobNotFound | ControllerUnreachable | CommandTimedOut):
                raise err
            assert removal.returncode is not None
            foreign = slurmcli.foreign_container(removal.stderr)
            if removal.returncode != 0 and foreign is not None:
                return StepResult(removal.returncode, removal.stdout,
                                  slurmcli.foreign_container_message(container.name, *foreign))
            if removal.returncode != 0:
                return StepResult(
                    removal.returncode, removal.stdout,
                    f"removing the old container {container.name!r} before the import "
                    f"failed:\n{removal.stderr}",
                )
        result = self._exec_step(slurmcli.srun_step_argv(request), request.timeout_s)
        err = self._classify(result)
        if isinstance(err, JobNotFound | ControllerUnreachable | CommandTimedOut):
            raise err
        assert result.returncode is not None
        return StepResult(_exit_status(result.returncode), result.stdout, result.stderr)

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None = None
                      ) -> list[GpuProcess]:
        """nvidia-smi's compute processes on every node of the allocation (host side),
        seen by a step holding its ``gpus_per_node`` GPUs per node."""
        result = self._run(slurmcli.gpu_processes_argv(check_job_id(job_id), nodes,
                                                       gpus_per_node),
                           self.probe_timeout_s)
        procs, failures = self._parse(result, nvsmi.parse_gpu_processes)
        if failures:  # the machine warns, naming each node and nvidia-smi's words
            raise nvsmi.NvidiaSmiFailed(failures, procs)
        return procs

    def probe_gpu_name(self, partition: str, account: str | None = None) -> str | None:
        """The GPU name of one node of ``partition``; None when it has no nvidia-smi."""
        result = self._run(slurmcli.probe_gpu_argv(partition, account), self.probe_timeout_s)
        return slurmcli.parse_gpu_name(result.stdout)

    def list_steps(self, job_id: str) -> list[StepInfo]:
        """``squeue -s -j ID``: every step squeue lists (numeric, ``batch``, ``extern``)."""
        result = self._run(slurmcli.squeue_steps_argv(check_job_id(job_id)))
        return self._parse(result, lambda text: slurmcli.parse_steps(text, job_id))

    def steps_with_tasks(self, job_id: str) -> set[str]:
        """``sstat -a -j ID``: the numbered steps whose tasks run on their nodes
        (:class:`slurm_fsm.backend.TaskLister`). sstat exits 0 whatever it found; its
        "couldn't get steps" (no such job, or no answer) is a CommandFailed."""
        result = self._run(slurmcli.sstat_tasks_argv(check_job_id(job_id)))
        if not result.stdout.strip() and "couldn't get steps" in result.stderr:
            raise CommandFailed(result.argv, result.returncode or 0,
                                slurmcli.stderr_tail(result.stderr),
                                message=f"sstat could not list the steps of {job_id}")
        return self._parse(result, lambda text: slurmcli.parse_sstat_steps(text, job_id))

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> LocalLease:
        """A run's lease step ``name`` (:func:`slurmcli.srun_lease_argv`), tied to this
        process's life (:func:`guarded`); returns once its task runs, i.e. once every
        host's ``squeue -s`` lists it. JobNotFound when the allocation is gone,
        ControllerUnreachable, or CommandTimedOut at ``timeout_s`` (srun is stopped).

        An ``srun`` that says nothing for :data:`LEASE_SILENT_S` while Slurm lists no
        step of its name is stopped and started again (at most
        :data:`LEASE_ATTEMPTS` in all): one that asked for its step as slurmctld went
        down hangs silent, its step never made (the kill-point campaign's ``ctld``).
        One that ends without its task is asked again likewise, after a pause, unless
        the allocation is gone (:meth:`_asked_again`): one that met slurmctld going
        down ends so."""
        argv = slurmcli.srun_lease_argv(check_job_id(job_id), name)
        started = time.monotonic()
        deadline = started + timeout_s
        for attempt in range(1, LEASE_ATTEMPTS + 1):
            self._announce(argv)
            lease = self._spawn_lease(argv, name)
            silent_until = (time.monotonic() + LEASE_SILENT_S if attempt < LEASE_ATTEMPTS
                            else None)
            while True:
                seen, how = _await_lease_mark(lease, deadline, silent_until)
                if how == "up":
                    return lease
                if how == "ended":
                    error = self._lease_error(argv, lease, seen, started, timeout_s,
                                              ended=True)
                    if not self._asked_again(job_id, name, error, attempt, deadline):
                        raise error
                    break
                if how != "silent":
                    raise self._lease_error(argv, lease, seen, started, timeout_s)
                if self._step_listed(job_id, name):  # its task is slow: wait for it
                    silent_until = None
                    continue
                log.warning("lease step %s: srun said nothing in %.0f s and Slurm lists no "
                            "such step: started again", name, LEASE_SILENT_S)
                lease.stop(grace_s=5.0)
                break
        raise AssertionError("unreachable: the last attempt has no silent limit")

    def _spawn_lease(self, argv: Sequence[str], name: str) -> LocalLease:
        err = tempfile.TemporaryFile()  # noqa: SIM115 - LocalLease closes it
        try:
            proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                guarded(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=err, env=self.environment(), start_new_session=True)
        except BaseException:
            err.close()
            raise
        return LocalLease(proc, name, err)

    def _step_listed(self, job_id: str, name: str) -> bool:
        """Slurm lists a step ``name`` of ``job_id`` (False when it cannot say)."""
        try:
            return any(s.name == name for s in self.list_steps(job_id))
        except BackendError:
            return False

    def _asked_again(self, job_id: str, name: str, error: BackendError, attempt: int,
                     deadline: float) -> bool:
        """A lease ``srun`` that ended without its task: True after a pause, to ask
        again; False when it was the last attempt, the allocation is gone, the pause
        would pass the deadline or a step of its name is listed (never two)."""
        pause = LEASE_RETRY_PAUSE_S * attempt
        if (attempt >= LEASE_ATTEMPTS or isinstance(error, JobNotFound)
                or time.monotonic() + pause >= deadline or self._step_listed(job_id, name)):
            return False
        log.warning("lease step %s: srun ended without its task (%s): asked again in "
                    "%.0f s", name, error, pause)
        time.sleep(pause)
        return True

    def _lease_error(self, argv: Sequence[str], lease: LocalLease, seen: bytes,
                     started: float, timeout_s: float, *, ended: bool = False
                     ) -> BackendError:
        """Why the lease step did not start (its srun is stopped first; one that
        ``ended`` its output is given :data:`LEASE_END_WAIT_S` to exit and say why)."""
        timed_out = not lease.exited_within(LEASE_END_WAIT_S) if ended else lease.alive()
        lease.stop(grace_s=5.0)
        code = lease.returncode
        result = CommandResult(argv=tuple(argv), returncode=None if timed_out else
                               (code or 1), stdout=seen.decode("utf-8", "replace"),
                               stderr=lease.stderr_text(),
                               seconds=time.monotonic() - started, timeout_s=timeout_s)
        error = self._classify(result)
        return error or CommandFailed(argv, result.returncode or 1, result.stderr,
                                      f"lease step {lease.name} did not start")

    def start_agent(self, job_id: str, node: str, name: str, argv: Sequence[str],
                    task: bytes) -> LocalAgent:
        """A detached run's agent (:func:`slurmcli.srun_agent_argv`), ``task`` on its
        stdin, in a session of its own and not guarded: it outlives this process (see
        :class:`~slurm_fsm.backend.AgentLauncher`). OSError when srun cannot be run."""
        srun = slurmcli.srun_agent_argv(check_job_id(job_id), node, name, argv)
        err = tempfile.TemporaryFile()  # noqa: SIM115 - LocalLease closes it
        try:
            proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                srun, stdin=subprocess.PIPE, stdout=err, stderr=err,
                env=self.environment(), start_new_session=True, close_fds=True)
        except BaseException:
            err.close()
            raise
        try:
            assert proc.stdin is not None  # stdin=PIPE above
            with proc.stdin:
                proc.stdin.write(task)
        except OSError:  # srun ended before it read its task: its stderr says why
            pass
        return LocalAgent(proc, name, err)

    def signal_step(self, job_id: str, step_id: str, signal_name: str) -> None:
        """``scancel --signal=NAME ID.STEP``; a gone step is not an error."""
        check_job_id(job_id)
        check_step_id(step_id)
        with contextlib.suppress(JobNotFound):
            self._run(slurmcli.scancel_signal_argv(job_id, step_id, signal_name))

    def step_details(self, job_id: str) -> list[StepInfo]:
        """``scontrol -o show step ID``: the job's steps with their srun's host and pid
        and their TRES; ``[]`` when it has none (scontrol says "not found", exit 1)."""
        result = self._exec(slurmcli.scontrol_show_steps_argv(check_job_id(job_id)))
        if (result.returncode == 1 and slurmcli.NO_STEP_MARKER in result.stdout + result.stderr
                and "Invalid job id" not in result.stderr):
            return []
        err = self._classify(result)
        if err is not None:
            raise err
        return self._parse(result, lambda text: slurmcli.parse_scontrol_steps(text, job_id))

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        """``scancel ID`` or ``scancel ID.STEP``; a job that is already gone is fine."""
        check_job_id(job_id)
        if step_id is not None:
            check_step_id(step_id)
        with contextlib.suppress(JobNotFound):
            self._run(slurmcli.scancel_argv(job_id, step_id))

    def submit(self, request: BatchRequest) -> str:
        """``sbatch --parsable``; the job id.

        sbatch that timed out or lost the controller may still have created
        the job: then the jobs of this name and user are looked up, and a
        single one that was not there before the submission is returned.
        The name is ``request.job_name``, else the script's ``#SBATCH --job-name``,
        else its file name.
        """
        argv = slurmcli.sbatch_argv(request)
        # the name sbatch will give the job: ours, the script's own #SBATCH --job-name,
        # else the script's file name
        directives = slurmcli.sbatch_directives(_read_text(request.script_path))
        name = request.job_name or directives.get("job-name") or request.script_path.name
        user = request.user or self.current_user()
        try:
            before: set[str] | None = {j.job_id for j in self.find_jobs(name, user)}
        except BackendError:
            before = None
        result = self._exec(argv, env=request.env)
        err = self._classify(result)
        if err is None:
            return self._parse(result, slurmcli.parse_sbatch)
        if isinstance(err, ControllerUnreachable | CommandTimedOut) and before is not None:
            job_id = self._find_new_job(name, user, before)
            if job_id is not None:
                log.warning("sbatch reported %r but created job %s", str(err), job_id)
                return job_id
        raise err

    def _find_new_job(self, name: str, user: str, before: set[str]) -> str | None:
        for pause in (0.5, 1.0, 2.0):
            try:
                new = [j.job_id for j in self.find_jobs(name, user) if j.job_id not in before]
            except BackendError:
                new = []
            if len(new) == 1:
                return new[0]
            if len(new) > 1:
                return None
            self.clock.sleep(pause)
        return None

    def job_outcome(self, job_id: str) -> JobOutcome:
        """sacct first; ``scontrol show job`` when accounting is off or has no row yet.

        JobNotFound when neither knows the job; when sacct failed for another
        reason (slurmdbd unreachable) and scontrol does not know the job
        either, sacct's error is raised: that is not "job gone".
        """
        check_job_id(job_id)
        sacct_error: BackendError | None
        try:
            result = self._run(slurmcli.sacct_argv(job_id))
            outcome = self._parse(result, lambda text: slurmcli.parse_sacct(text, job_id))
            if outcome is not None:
                return slurmcli.with_true_exit_code(outcome, self._controller_outcome(outcome))
            sacct_error = JobNotFound(job_id, "sacct has no row for it")
        except JobNotFound as exc:
            sacct_error = exc
        except CommandFailed as exc:
            if not slurmcli.accounting_disabled(exc.stderr_tail):
                sacct_error = exc
            else:
                sacct_error = JobNotFound(job_id, "accounting is disabled")
        except (ControllerUnreachable, CommandTimedOut) as exc:
            sacct_error = exc
        try:
            return self.job_outcome_from_scontrol(job_id)
        except JobNotFound:
            raise sacct_error from None

    def step_outcomes(self, job_id: str, step_ids: Sequence[str]) -> list[JobOutcome]:
        """``sacct -j ID.3,ID.4``: how those steps ended (the rows accounting has; none
        yet is ``[]``). JobNotFound when accounting is off; ControllerUnreachable,
        CommandTimedOut or CommandFailed when slurmdbd does not answer."""
        check_job_id(job_id)
        for step in step_ids:
            check_step_id(step)
        if not step_ids:
            return []
        try:
            result = self._run(slurmcli.sacct_steps_argv(job_id, list(step_ids)))
        except JobNotFound:
            return []  # one step asked, and accounting has no row for it yet
        except CommandFailed as exc:
            if slurmcli.accounting_disabled(exc.stderr_tail):
                raise JobNotFound(job_id, "accounting is disabled") from None
            raise
        return self._parse(result, lambda text: slurmcli.parse_sacct_steps(text, job_id))

    def _controller_outcome(self, outcome: JobOutcome) -> JobOutcome | None:
        """scontrol's record of a job sacct says ended with a non-zero code (its ExitCode
        is the real status, sacct's is modulo 128), or None when it has none. A status
        that is a signal only (``0:15``) is not mangled: nothing to ask (scontrol's
        job record says ``0:0`` where the batch step was SIGTERMed at a time limit)."""
        if not outcome.state.is_final or outcome.exit_code == 0:
            return None
        try:
            return self.job_outcome_from_scontrol(outcome.job_id)
        except (BackendError, ValueError):
            return None

    def job_outcome_from_scontrol(self, job_id: str) -> JobOutcome:
        """``scontrol show job ID`` alone (known only until MinJobAge has passed)."""
        result = self._run(slurmcli.scontrol_show_job_argv(check_job_id(job_id)))
        return self._parse(result, lambda text: slurmcli.parse_scontrol_job(text, job_id))

    def job_files(self, job_id: str) -> JobFiles:
        """Where a batch job writes its stdout and stderr: ``scontrol show job ID``
        (``StdOut=``, ``StdErr=``); once the controller has forgotten the job
        (MinJobAge), accounting's ``StdOut``/``StdErr`` (Slurm 23.02 and later). Raises
        JobNotFound when neither says (22.05's sacct has no such field)."""
        check_job_id(job_id)
        try:
            result = self._run(slurmcli.scontrol_show_job_argv(job_id))
            return self._parse(result, lambda text: slurmcli.parse_scontrol_files(text, job_id))
        except JobNotFound as gone:
            try:
                result = self._run(slurmcli.sacct_files_argv(job_id))
                return self._parse(result,
                                   lambda text: slurmcli.parse_sacct_files(text, job_id))
            except CommandFailed as exc:
                raise JobNotFound(job_id, f"{gone.detail}; sacct cannot say either: "
                                  f"{exc.stderr_tail or exc}") from None

    def has_container_support(self) -> bool:
        """True when ``srun --help`` lists ``--container-image`` (pyxis); cached."""
        if self._container_support is None:
            result = self._run(slurmcli.srun_help_argv())
            self._container_support = slurmcli.has_container_option(result.stdout + result.stderr)
        return self._container_support

    def pyxis_site(self) -> PyxisSite | None:
        """The cluster's pyxis options (:class:`slurm_fsm.pyxissite.PyxisQuery`): its line
        in the plugstack config ``scontrol show config`` names, where this host can read
        it; else, when ``srun --help`` lists pyxis' options, pyxis' defaults; None
        without pyxis."""
        from slurm_fsm.pyxissite import (
            DEFAULT_PLUGSTACK,
            plugstack_path,
            read_plugstack,
            site_from_options,
        )

        try:
            path = plugstack_path(self._run(scontrol_config_argv()).stdout)
        except BackendError:
            path = DEFAULT_PLUGSTACK
        options = read_plugstack(path)
        if options is not None:
            return site_from_options(options, f"plugstack {path}")
        if not self.has_container_support():
            return None
        return site_from_options({}, f"srun --help: {path} not readable here, pyxis' "
                                     "defaults assumed")

    # ------------------------------------------- pre-flight (preflight.ClusterQueries)

    def cluster_partitions(self) -> list[ClusterPartition]:
        """``sinfo``: every partition, its state, nodes and GPUs per node."""
        result = self._run(sinfo_partitions_argv())
        return self._parse(result, parse_sinfo_partitions)

    def accounting_enforce(self) -> str | None:
        """``AccountingStorageEnforce`` of ``scontrol show config``; None when scontrol
        fails or does not say (:class:`slurm_fsm.preflight.EnforcementQuery`)."""
        try:
            result = self._run(scontrol_config_argv())
        except BackendError:
            return None
        return parse_accounting_enforce(result.stdout)

    def def_cpu_per_gpu(self, partition: str) -> int | None:
        """``DefCpuPerGPU`` of ``scontrol show partition``'s ``JobDefaults``, else of
        ``scontrol show config``'s; None when neither sets it or scontrol fails
        (:class:`slurm_fsm.preflight.CpuDefaultsQuery`)."""
        for argv in (scontrol_partition_argv(partition), scontrol_config_argv()):
            try:
                result = self._run(argv)
            except BackendError:
                return None
            found = parse_def_cpu_per_gpu(result.stdout)
            if found:
                return found
        return None

    def user_associations(self, user: str) -> list[tuple[str, str]] | None:
        """``sacctmgr show assoc``: the user's ``(account, partition)`` pairs; None when
        accounting cannot answer (no slurmdbd, a failure) or lists none."""
        try:
            result = self._run(sacctmgr_assoc_argv(user))
        except BackendError:
            return None
        return parse_associations(result.stdout) or None

    def expand_nodelist(self, nodelist: str) -> list[str]:
        """``n[1-3]`` -> ``["n1", "n2", "n3"]`` (python-hostlist, no subprocess)."""
        return slurmcli.expand_nodelist(nodelist)

    def compress_nodelist(self, nodes: Sequence[str]) -> str:
        """``["n1", "n2", "n3"]`` -> ``n[1-3]``."""
        return slurmcli.compress_nodelist(nodes)

    def start_script(self, request: ScriptRequest) -> LocalScript:
        """``bash <script>`` here, in its own session, output (truncated first) to the log.

        bash runs under :mod:`slurm_fsm.scriptguard`, the session leader, which the
        kernel signals when this process dies (``PR_SET_PDEATHSIG``): a killed
        orchestrator leaves no script, ``srun`` or step running behind it.
        """
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        # the run's log sits in the shared work_dir: never opened through a planted link;
        # it may hold tokens: readable by others only as the umask allows (077: 0600)
        log_file = files.open_private(request.log_path, mode=files.umasked(0o644))
        token = request.token or secrets.token_hex(16)  # proves the group ours to a later run
        env = {**self.environment(request.env), scriptguard.TOKEN_ENV: token}
        if request.status_path is not None:  # the guard takes it out of the script's env
            env[scriptguard.STATUS_ENV] = str(request.status_path)
        if env.get(scancelshim.ALLOCATION_ENV):  # scancel of the allocation: our steps only
            env.update(scancelshim.shim_env(env.get("PATH", os.defpath)))
        try:
            proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                guarded(["bash", str(request.script_path)]),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=request.cwd,
                env=env,
                start_new_session=True,
            )
        except BaseException:
            log_file.close()
            raise
        return LocalScript(proc, request.log_path, log_file, self.clock, token)

    def stop_stale_script(self, identity: Mapping[str, object]) -> str | None:
        """Stop an earlier run's script group, if it is provably still that group."""
        return stop_stale_group(identity, clock=self.clock)
