"""Run a command tied to the life of the orchestrator that started it.

:meth:`slurm_fsm.subprocess_backend.SubprocessBackend.start_script` runs the
job's ``bash <script>`` under this guard, which is the leader of the script's
session and process group::

    python -I -S scriptguard.py <orchestrator pid> bash <script>

* ``PR_SET_PDEATHSIG``: when the orchestrator dies, even by ``kill -9``, the
  kernel sends the guard SIGTERM (the signal is set before the check that the
  orchestrator is still there, so there is no window);
* on SIGTERM, SIGHUP or SIGINT (from the kernel, or the orchestrator's own
  ``killpg`` of the group) the guard passes SIGTERM to its whole group (bash,
  ``srun``, which then ends its step, and whatever else the script started),
  waits up to :data:`GRACE_S` for them, then SIGKILLs the group (itself
  included) and otherwise exits ``128 + signal``;
* else it exits with the command's exit status, ``128 + N`` when the command
  was killed by signal N (the shell's convention, used everywhere in slurm_fsm).

Each guard holds a secret token in its environment (:data:`TOKEN_ENV`, set by
the orchestrator that starts it, inherited by bash, ``srun`` and whatever the script
starts). ``/proc/PID/environ`` is readable only by the process's owner (and root), and
the run record that names the group holds the same token in a file only its owner can
read: :func:`proven_members` is the only way a later run decides that a process group
is an earlier run's guard, and nothing is stopped on anything less (a pid, a start
time, a host name: all world-readable, all plantable).

Standard library only, no slurm_fsm import: it starts in a few milliseconds
with ``-I -S``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# the guard's own start imports only what it runs with: hmac, threading and contextlib
# cost it about 4 ms of CPU of its 22 (tests/test_scriptguard.py)
if __name__ != "__main__":  # the orchestrator's copy: its threads share /proc scans
    import threading
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["FORK_SLOP", "GRACE_S", "GUARD_ENV", "SRUN_SETTLE_S", "STATUS_ENV", "TOKEN_ENV",
           "boot_id",
           "command", "describe", "fork_count", "group_members", "is_srun", "is_srun_helper",
           "is_step_srun",
           "live_start_ticks", "main", "new_pids", "process_name", "proven_members",
           "signal_group", "start_ticks", "stop_group", "strays_of", "token_holders",
           "write_status"]

#: The environment variable that carries the guard's secret token.
TOKEN_ENV = "SLURM_FSM_GUARD_TOKEN"
#: The environment variable naming the file where the guard writes its command's exit
#: status (a line, atomically: a temp file renamed) once the command ended by itself,
#: before the guard exits; never when the guard is stopped. Taken out of the command's
#: environment. A run rebuilt after its owner died judges a script that had ended by it
#: (:meth:`slurm_fsm.runowner.RunFiles.script_status`).
STATUS_ENV = "SLURM_FSM_GUARD_STATUS"

GRACE_S = 10.0
PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def signal_group(pgid: int, sig: int) -> None:
    """``killpg``; a group that is gone, or not ours to signal, is no error."""
    try:  # noqa: SIM105 - not contextlib.suppress: the guard does not import contextlib
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_strays(strays: Mapping[int, int], sig: int) -> None:
    """``sig`` to each of ``strays`` (pid: start ticks) that is still that very process
    (the same start time: never a process that merely reuses its pid)."""
    for pid, ticks in strays.items():
        if live_start_ticks(pid) == ticks:
            try:  # noqa: SIM105 - not contextlib.suppress: the guard does not import it
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def stop_group(pgid: int | None, grace_s: float, *, ended: Callable[[], bool],
               sleep: Callable[[float], None] = time.sleep,
               now: Callable[[], float] = time.monotonic,
               may_kill: Callable[[], bool] = lambda: True, poll_s: float = 0.05,
               strays: Mapping[int, int] | None = None, term: bool = True) -> bool:
    """The one stop policy: SIGTERM to the process group ``pgid`` (None: no group) and
    to ``strays`` (pid: start ticks, :func:`strays_of`: what left the group), up to
    ``grace_s`` for ``ended()`` (asked every ``poll_s``) and the strays' end, then
    SIGKILL to what is left: the group unless ``may_kill()`` says it can no longer be
    proven the one meant, each stray that is still that very process. True when it all
    ended within the grace period. ``term`` False: the group had its SIGTERM already
    (:meth:`slurm_fsm.subprocess_backend.LocalLease.begin_stop`), none is sent again.

    The grace covers the whole group: ``srun`` passes SIGTERM on to its step and needs
    a moment to see the step end (killed earlier, it would leave the step running)."""
    strays = dict(strays or {})

    def done() -> bool:
        return ended() and not any(live_start_ticks(p) == t for p, t in strays.items())

    if pgid is not None and term:
        signal_group(pgid, signal.SIGTERM)
    _signal_strays(strays, signal.SIGTERM)
    deadline = now() + grace_s
    while True:
        if done():
            return True
        if now() >= deadline:
            break
        sleep(poll_s)
    if pgid is not None and may_kill():
        signal_group(pgid, signal.SIGKILL)
    _signal_strays(strays, signal.SIGKILL)
    return False


#: ``SLURM_FSM_GUARD=python``: every guard is the Python one (:func:`command`)
GUARD_ENV = "SLURM_FSM_GUARD"
_LEAN: list[tuple[str, str, str] | None] = []  # the lean guard's tools, once probed
_LEAN_LOCK = threading.Lock() if __name__ != "__main__" else None


def _lean_tools() -> tuple[str, str, str] | None:
    """``setpriv``, ``/bin/sh`` and ``env`` when they can run the lean guard (util-linux
    2.33's ``--pdeathsig``, coreutils 8.31's ``--default-signal``): asked once per
    process, by running them; None where one is missing or too old (RHEL 8)."""
    assert _LEAN_LOCK is not None  # the orchestrator's copy: the guard never probes
    with _LEAN_LOCK:
        if not _LEAN:
            import shutil
            import subprocess

            setpriv, env = shutil.which("setpriv"), shutil.which("env")
            found: tuple[str, str, str] | None = None
            if setpriv and env and os.access("/bin/sh", os.X_OK):
                try:
                    probe = subprocess.run(  # noqa: S603 - an argument list
                        [setpriv, "--pdeathsig", "TERM", "--", "/bin/sh", "-c",
                         'exec "$0" --default-signal=INT,QUIT true', env],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=30, check=False)
                    if probe.returncode == 0:
                        found = (setpriv, "/bin/sh", env)
                except (OSError, subprocess.SubprocessError):
                    pass
            _LEAN.append(found)
        return _LEAN[0]


def command(parent: int, argv: list[str], *, python: str, lean: bool | None = None
            ) -> list[str]:
    """``argv`` under a guard tied to the life of process ``parent`` (its starter).

    The lean guard (``setpriv --pdeathsig TERM -- /bin/sh scriptguard.sh ...``, about
    3 ms of CPU) where this host's tools can run it, else the Python guard
    (``python -I -S scriptguard.py ...``, about 20 ms): the same death signal, the same
    exit codes, the same stop (the lean guard execs the Python one to stop). ``lean``:
    None decides by the tools and :data:`GUARD_ENV` (``python``: never lean), True or
    False forces one form (True falls back when the tools cannot)."""
    here = os.path.dirname(os.path.abspath(__file__))
    guard_py = os.path.join(here, "scriptguard.py")
    if lean is None:
        lean = os.environ.get(GUARD_ENV, "") != "python"
    tools = _lean_tools() if lean else None
    if tools is None:
        return [python, "-I", "-S", guard_py, str(parent), *argv]
    setpriv, sh, env = tools
    return [setpriv, "--pdeathsig", "TERM", "--", sh, os.path.join(here, "scriptguard.sh"),
            str(parent), python, guard_py, env, *argv]


def start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks since boot), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def live_start_ticks(pid: int) -> int | None:
    """:func:`start_ticks` of a process that still runs: None when it is gone or a
    zombie (killed, not yet reaped by its parent: it runs nothing and holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[-1].split()
        return None if fields[0] in ("Z", "X", "x") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``); empty when unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read(64).strip()
    except OSError:
        return ""


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, _frame: object) -> None:
    raise _Stop(signum)


def _set_pdeathsig(sig: int) -> bool:
    """Ask the kernel for ``sig`` when our parent dies (Linux); False elsewhere. (ctypes
    is loaded here, in the guard's process: the run's own never needs it.)"""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


#: An ``srun`` of a run's script is asked about (``scontrol show step``: its step's
#: id, whether it waits for GPUs) once it has run this long: the ``srun`` of a tiny job
#: is gone by then, and a controller call for each would cost more than the job
#: (issue 28); a step that waits for GPUs is said to wait half a second later.
SRUN_SETTLE_S = 0.5


def is_srun(pid: int) -> bool:
    """Process ``pid`` runs ``srun`` (``/proc/PID/comm``); False when it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/comm", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.read(fd, 64).strip() == b"srun"
    except OSError:
        return False
    finally:
        os.close(fd)


def is_srun_helper(pid: int) -> bool:
    """Process ``pid`` is an ``srun`` whose parent is an ``srun``: the helper every
    ``srun`` forks (seen on Slurm 22.05, 24.11, 26.05). Its pid is no step's
    ``SrunPid``: only its parent's step is asked about. False when it is gone."""
    stat = _read_stat(str(pid))
    if stat is None:
        return False
    fields = stat.rpartition(b")")[2].split(None, 3)  # state, ppid, ...
    return len(fields) > 1 and fields[1].isdigit() and is_srun(int(fields[1]))


def is_step_srun(pid: int) -> bool:
    """Process ``pid`` is an ``srun`` that runs a step of its own (its pid the step's
    ``SrunPid``): an ``srun``, not the helper an ``srun`` forks. What a run asks Slurm
    about (:class:`slurm_fsm.runsteps.RunSteps`, :class:`slurm_fsm.placement.PendingSteps`):
    asked about the helper, it would ask for as long as the job runs."""
    return is_srun(pid) and not is_srun_helper(pid)


def group_members(pgid: int, *, exclude: int | None = None) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc``: a scan
    that started after this call (:func:`_process_groups`: concurrent callers of one
    process share one scan). A group the kernel says does not exist (``killpg`` with
    signal 0: no such process) is empty without a scan: after most scripts, their
    group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except OSError:  # another user's process in it, or pgid not valid: read /proc
        pass
    return [pid for pid in _process_groups().get(pgid, ()) if pid != exclude]


class _Scans:
    """One ``/proc`` scan for many threads: the callers that arrive while a scan runs
    share the next one (it starts after each of them asked, so its answer is as fresh
    as a scan of their own). Many runs at once in one process (``run_many``) each read
    ``/proc`` every sample; one scan a round instead of one each (issue 28)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.started = 0  # scans begun
        self.done = 0  # the scan whose table is kept
        self.running = False
        self.table: dict[int, list[int]] = {}

    def get(self) -> dict[int, list[int]]:
        with self.cond:
            want = self.started + 1  # a scan that begins after this call
            while self.done < want:
                if self.running:
                    self.cond.wait()
                    continue
                self.running = True
                self.started += 1
                mine = self.started
                self.cond.release()
                try:
                    table = _scan_groups()
                finally:
                    self.cond.acquire()
                    self.running = False
                    self.cond.notify_all()
                self.table, self.done = table, mine
            return self.table


def _scan_groups() -> dict[int, list[int]]:
    # raw reads and bytes: a text file object per process costs three times as much,
    # and many runs at once scan every sample (issue 28)
    found: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        stat = _read_stat(name)
        if stat is None:
            continue
        # after the command's name: state, ppid, pgrp, ...
        fields = stat.rpartition(b")")[2].split(None, 3)
        if len(fields) > 2 and fields[0] != b"Z" and fields[2].isdigit():
            found.setdefault(int(fields[2]), []).append(int(name))
    return found


#: the orchestrator's shared scans; None in the guard (one thread: it scans itself)
_SCANS = _Scans() if __name__ != "__main__" else None


def _process_groups() -> dict[int, list[int]]:
    """Every live process's pid by its process group, from a ``/proc`` scan begun after
    this call."""
    return _SCANS.get() if _SCANS is not None else _scan_groups()


def _environ_token(pid: int) -> str | None:
    """The :data:`TOKEN_ENV` value in ``/proc/PID/environ`` (readable by its owner only)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(1 << 20)
    except OSError:
        return None
    prefix = TOKEN_ENV.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("ascii", "replace")
    return None


def _is_guard(pid: int) -> bool:
    """``/proc/PID/cmdline`` is a guard's: ``python ... scriptguard.py ...`` or
    ``/bin/sh .../scriptguard.sh ...`` (:func:`command`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(65536).split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(a) in (b"scriptguard.py", b"scriptguard.sh")
               for a in argv[:6])


#: Forks that may happen between a guard's start and the moment its identity reads the
#: fork count (:func:`fork_count`): a margin for :func:`new_pids`' bound.
FORK_SLOP = 1000
#: Linux gives pids from 300 up once they wrap past ``pid_max``.
_RESERVED_PIDS = 300


def _read_int(path: str, key: bytes = b"") -> int | None:
    """The integer in file ``path`` (or after ``key`` on one of its lines), or None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)
    if key:
        _, found, rest = raw.partition(b"\n" + key + b" ")
        raw = rest.split(b"\n", 1)[0] if found else b""
    try:
        return int(raw.split()[0])
    except (ValueError, IndexError):
        return None


def fork_count() -> int | None:
    """Processes and threads made since boot (``/proc/stat``'s ``processes``)."""
    return _read_int("/proc/stat", b"processes")


def new_pids(pids: Iterable[int], first_pid: int, forks_then: int, *, forks_now: int,
             last_pid: int, pid_max: int, tasks: int) -> list[int] | None:
    """Which of ``pids`` can be processes started after process ``first_pid`` (when
    :func:`fork_count` said ``forks_then``): pure. Pids are handed out in a cycle; those
    given since lie between ``first_pid`` and ``last_pid`` (``ns_last_pid``), around the
    wrap, unless the cycle went all the way round: more forks since (and ``tasks`` live
    ones skipped) than ``pid_max`` has pids. None then, or when a count is unknown: every
    pid is a candidate."""
    if forks_now - forks_then + FORK_SLOP + tasks >= pid_max - _RESERVED_PIDS:
        return None
    if last_pid >= first_pid:
        return [p for p in pids if first_pid < p <= last_pid]
    return [p for p in pids if p > first_pid or p <= last_pid]


def _candidates(after: tuple[int, int] | None) -> list[int]:
    """The pids in ``/proc``; with ``after`` (a process's pid and the fork count just
    after its start), only those of processes that can have started since
    (:func:`new_pids`): a few files read instead of every process's."""
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    if after is None:
        return pids
    forks, last = fork_count(), _read_int("/proc/sys/kernel/ns_last_pid")
    pid_max = _read_int("/proc/sys/kernel/pid_max")
    try:  # "0.10 0.20 0.30 2/629 14748": 629 tasks (threads too) live
        with open("/proc/loadavg", "rb") as fh:
            tasks = int(fh.read(256).split()[3].split(b"/")[1])
    except (OSError, ValueError, IndexError):
        return pids
    if forks is None or last is None or pid_max is None:
        return pids
    new = new_pids(pids, after[0], after[1], forks_now=forks, last_pid=last,
                   pid_max=pid_max, tasks=tasks)
    return pids if new is None else new


def _read_stat(pid: str) -> bytes | None:
    """``/proc/<pid>/stat`` (one read of at most 4 KiB); None when it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _started_since(since_ticks: int, after: tuple[int, int] | None = None
                   ) -> dict[int, int]:
    """Every live (not zombie) process started at or after ``since_ticks``: pid: start
    ticks, from one ``/proc`` scan (of the pids :func:`_candidates` leaves)."""
    found: dict[int, int] = {}
    for name in map(str, _candidates(after)):
        stat = _read_stat(name)
        if stat is None:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 19 and fields[0] != b"Z" and fields[19].isdigit():
            ticks = int(fields[19])
            if ticks >= since_ticks:
                found[int(name)] = ticks
    return found


def token_holders(token: str, *, since_ticks: int = 0,
                  after: tuple[int, int] | None = None) -> dict[int, int]:
    """The live processes of this unix user whose environment holds :data:`TOKEN_ENV`
    ``= token``, started at or after ``since_ticks`` (a guard's start: nothing older is
    its script's), never this process: pid: start ticks.

    Whatever a script started holds its guard's token, in any process group or session
    (``setsid``, ``nohup``, a daemon's double fork: the environment is inherited) unless
    it emptied its environment; ``/proc/PID/environ`` is readable by its owner only. A
    token shorter than 16 characters finds nothing (never a guessable one). One
    ``/proc`` scan, and the environment of each process started since ``since_ticks``;
    ``after``: a process's pid and :func:`fork_count` just after its start (the guard's,
    in its identity): only the pids given since are read (:func:`new_pids`)."""
    if not token or len(token) < 16:
        return {}
    import hmac

    me, uid = os.getpid(), os.getuid()
    found: dict[int, int] = {}
    for pid, ticks in _started_since(since_ticks, after).items():
        if pid == me:
            continue
        held = _environ_token(pid)
        if held is None or not hmac.compare_digest(held, token):
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found[pid] = ticks
        except OSError:
            continue
    return found


def strays_of(identity: Mapping[str, object]) -> dict[int, int]:
    """What the script of a guard left outside its process group (``setsid``, ``nohup``,
    a double fork), still running: the :func:`token_holders` of ``identity``'s token (a
    :attr:`~slurm_fsm.subprocess_backend.LocalScript.identity`) started since its guard,
    not members of its group; pid: start ticks. Empty for a script of another host or
    boot, or without a token (the fake's)."""
    import socket

    token, pgid, since = identity.get("token"), identity.get("pgid"), identity.get(
        "start_ticks")
    if (not isinstance(token, str) or identity.get("host") != socket.gethostname()
            or identity.get("boot_id") != boot_id()):
        return {}
    pid, forks = identity.get("pid"), identity.get("forks")
    found = token_holders(token, since_ticks=since if isinstance(since, int) else 0,
                          after=(pid, forks) if isinstance(pid, int) and isinstance(
                              forks, int) and forks >= 0 else None)
    out: dict[int, int] = {}
    for pid, ticks in found.items():
        try:
            if os.getpgid(pid) == pgid:
                continue  # a member of the group: stopped with the group
        except OSError:
            continue  # gone meanwhile
        out[pid] = ticks
    return out


def describe(pids: Iterable[int]) -> str:
    """``srun 123, sleep 124``: each process's name (:func:`process_name`) and pid."""
    return ", ".join(f"{process_name(p)} {p}" for p in sorted(pids))


def process_name(pid: int) -> str:
    """``/proc/PID/comm`` (``srun``, ``sleep``...); ``?`` when it is gone."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read(64).strip().decode("utf-8", "replace") or "?"
    except OSError:
        return "?"


def proven_members(pgid: int, token: str) -> list[int]:
    """The live processes of group ``pgid`` when it is provably a guard's group whose
    token is ``token``, else ``[]``.

    Proof: every member belongs to this user; and the leader (pid ``pgid``) is alive,
    runs :mod:`scriptguard` and holds ``token`` in its environment, or, the leader gone,
    a member holds ``token`` in its environment (a token nobody but the owner can read:
    a planted record cannot name it). Start times are never enough."""
    if not token or len(token) < 16 or pgid <= 1:
        return []
    members = group_members(pgid)
    if not members:
        return []
    uid = os.getuid()
    for pid in members:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                return []
        except OSError:
            continue
    import hmac

    if pgid in members:
        held = _environ_token(pgid)
        ok = _is_guard(pgid) and held is not None and hmac.compare_digest(held, token)
        return members if ok else []
    for pid in members:
        held = _environ_token(pid)
        if held is not None and hmac.compare_digest(held, token):
            return members
    return []


def write_status(path: str, code: int) -> None:
    """``code`` and a newline into ``path``, atomically (a temp file beside it, created
    exclusively, renamed over it); a failure is ignored (the rebuild then knows less)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f"{code}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:  # noqa: SIM105 - contextlib is not imported by the guard (its start's cost)
            os.unlink(tmp)
        except OSError:
            pass


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _stop(child: int, signum: int) -> int:
    """SIGTERM to the group, grace, SIGKILL (:func:`stop_group`; the SIGKILL ends the
    guard too): the exit code ``128 + signum``."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    me = os.getpid()
    reaped = child == 0

    def ended() -> bool:
        nonlocal reaped
        if not reaped:
            try:
                reaped = os.waitpid(child, os.WNOHANG)[0] != 0
            except ChildProcessError:
                reaped = True
        return reaped and not group_members(me, exclude=me)

    if stop_group(me, GRACE_S, ended=ended):
        return 128 + signum
    return 128 + signal.SIGKILL  # pragma: no cover


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "--stop":  # the lean guard asked to stop: exec'd here
        return _stop(int(argv[2]), int(argv[3]))
    if len(argv) < 3:
        print("usage: scriptguard.py ORCHESTRATOR_PID COMMAND [ARG...]", file=sys.stderr)
        return 2
    parent, command = int(argv[1]), argv[2:]
    status_path = os.environ.pop(STATUS_ENV, "")  # the guard's, not the command's
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _raise_stop)
    _set_pdeathsig(signal.SIGTERM)
    child = 0
    try:
        if os.getppid() != parent:  # died before the death signal was armed
            raise _Stop(signal.SIGTERM)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child execs at once
            for sig in (*_STOP_SIGNALS, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            try:
                os.execvp(command[0], command)
            finally:
                os._exit(127)
        _, status = os.waitpid(child, 0)
        code = _exit_code(status)
        if status_path:
            write_status(status_path, code)
        return code
    except _Stop as stop:
        return _stop(child, stop.signum)


if __name__ == "__main__":  # pragma: no cover - run as a script by LocalScript
    sys.exit(main(sys.argv))
