"""A real Slurm 22.05 cluster on this one host, for tests, the demo and CI.

``python -m slurm_fsm_dev.localcluster up|down|status|env`` (or ``scripts/local-slurm``).

``up`` installs the Debian packages when they are missing, writes a config under a
fixed base folder (``/tmp/slurm_fsm-local``, or ``$SLURM_FSM_LOCAL_DIR``), and starts,
each with a pid file of ours:

- ``munged`` with its own key and socket under the base folder (``auth/munge``);
  when it cannot start, the cluster falls back to ``auth/none``;
- a private MariaDB (fresh data folder every time) and ``slurmdbd``, so that
  ``sacct`` works and accounts are enforced (``acct`` and ``other``; anything else
  is refused);
- ``slurmctld`` and several ``slurmd`` (``n1``, ``n2``, ``n3``), each in its own UTS
  namespace so that ``hostname`` differs per node, each with 8 CPUs (more than the
  machine has, so that several steps fit) and 4 emulated GPUs that Slurm schedules
  for real (``gres/gpu``, ``CUDA_VISIBLE_DEVICES`` per step) and an ``nvidia-smi``
  stand-in that :attr:`ClusterInfo.env` puts first on ``PATH`` (srun carries it to
  every task; :mod:`slurm_fsm_dev.localgpu`).

``$SLURM_FSM_LOCAL_CONFIG`` picks a configuration: a comma list of features
(:data:`FEATURES`), empty for the default one (``task/none``,
``proctrack/linuxproc``, association enforcement on, untyped GRES ``gpu:4``):

- ``cgroup``: ``ProctrackType=proctrack/cgroup``,
  ``TaskPlugin=task/cgroup,task/affinity`` and a ``cgroup.conf`` with
  ``CgroupPlugin=cgroup/v1``, ``ConstrainCores=yes``, ``ConstrainDevices=yes``: what
  real GPU clusters run. Each step is confined to its CPUs and its GPUs' device files;
  ``CUDA_VISIBLE_DEVICES`` is renumbered from 0. Slurm 22.05 makes
  ``/sys/fs/cgroup/<controller>/slurm_<node>``; ``down`` removes the empty ones. One
  cgroup cluster per host at a time (the node names are fixed): ``up`` refuses a
  second one.
- ``noenforce``: no ``AccountingStorageEnforce`` key (Slurm's default): a job under
  an account without an association runs under the user's default account.
- ``typed``: typed GRES ``gpu:h100:4`` (``Type=h100`` in gres.conf).
- ``memkill``: memory enforced without a memory cgroup:
  ``JobAcctGatherParams=OverMemoryKill`` and ``JobAcctGatherFrequency=task=1``.
  slurmstepd samples each step's RSS every second and kills a step past its memory
  limit (``StepId=N exceeded memory limit (...), being killed``; accounting says
  ``CANCELLED by 0``). Memory stays a consumable with ``DefMemPerCPU=512``: a step
  without ``--mem`` gets 512 MB per CPU, far more than the tests' steps touch.
- ``wide``: nodes of :data:`WIDE_CPUS_PER_NODE` (12) CPUs, not 8: 3 per GPU.
- ``defcpu``: ``DefCpuPerGPU=2`` (:data:`DEF_CPU_PER_GPU`, in ``JobDefaults``): Slurm
  gives a job that names no CPUs per GPU that many per GPU it holds.
- ``jobscope``: pyxis' ``container_scope=job`` in plugstack.conf: a named container
  goes with its job (pyxis names it ``pyxis_<job>_<name>`` and removes it when the job
  ends), as on sites where containers do not outlive their job; the next allocation
  finds none on its nodes (issue 42's image cache serves it).

A cluster running another configuration than the one asked is restarted by ``up``.

It then waits until every node is idle and checks that the controller that answers
is ours (ClusterName, node list): Slurm daemons exit 0 even when they die at once.
``up`` is idempotent: a healthy cluster is reused as it is (its jobs are kept); a
half-dead one is torn down and started again. ``down`` ends every process it
started, by pid, plus anything left in the nodes' UTS namespaces (slurmstepd, job
tasks), and is idempotent too.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
from filelock import FileLock

from slurm_fsm.errors import SlurmFsmError
from slurm_fsm_dev import localgpu, localpyxis
from slurm_fsm_dev.localpyxis import ContainerInfo

__all__ = [
    "ACCOUNT",
    "BAD_ACCOUNT",
    "CLUSTER_NAME",
    "CPUS_PER_NODE",
    "DEFAULT_BASE_DIR",
    "DEF_CPU_PER_GPU",
    "ENV_AUTH",
    "ENV_BASE_DIR",
    "ENV_CONFIG",
    "FEATURES",
    "GPUS_PER_NODE",
    "OTHER_ACCOUNT",
    "PACKAGES",
    "PARTITION",
    "WIDE_CPUS_PER_NODE",
    "ClusterInfo",
    "ClusterStatus",
    "ContainerInfo",
    "LocalClusterError",
    "UpResult",
    "base_dir",
    "bring_up",
    "cgroup_folders",
    "config_features",
    "config_name",
    "current",
    "daemon_pids",
    "down",
    "ensure_packages",
    "log_tails",
    "main",
    "missing_commands",
    "node_cpus",
    "restart_ctld",
    "status",
    "up",
]

ENV_BASE_DIR = "SLURM_FSM_LOCAL_DIR"
#: "munge" (the default; falls back to "none" when munged cannot start) or "none"
ENV_AUTH = "SLURM_FSM_LOCAL_AUTH"
DEFAULT_BASE_DIR = Path("/tmp/slurm_fsm-local")
#: the configuration: a comma list of :data:`FEATURES` (empty: the default one)
ENV_CONFIG = "SLURM_FSM_LOCAL_CONFIG"
#: configuration features, in their canonical order (see the module docstring)
FEATURES = ("cgroup", "noenforce", "typed", "memkill", "wide", "defcpu", "jobscope")
#: the GPU type of the ``typed`` configuration
GPU_TYPE = "h100"
#: cgroup v1 controllers under which Slurm 22.05 makes ``slurm_<node>`` folders
_CGROUP_ROOT = Path("/sys/fs/cgroup")
#: who runs the one cgroup cluster of this host (its base folder)
_CGROUP_CLAIM = Path("/tmp/slurm_fsm-cgroup.owner")
CLUSTER_NAME = "slurmfsm"
PARTITION = "debug"
ACCOUNT = "acct"
OTHER_ACCOUNT = "other"
#: An account that does not exist: jobs under it are refused (with enforcement; under
#: ``noenforce`` Slurm runs them under the default account).
BAD_ACCOUNT = "nope"
DEFAULT_NODES = 3
CPUS_PER_NODE = 8
#: CPUs per node of the ``wide`` configuration: 3 per GPU, not 2
WIDE_CPUS_PER_NODE = 12
#: ``DefCpuPerGPU`` of the ``defcpu`` configuration: with ``wide`` fewer than the 3 per
#: GPU the nodes' CPUs give in proportion, more than one per task
DEF_CPU_PER_GPU = 2
#: emulated GPUs (see slurm_fsm_dev.localgpu): Slurm schedules them for real
GPUS_PER_NODE = localgpu.GPUS_PER_NODE
MEMORY_PER_NODE_MB = 8192

PACKAGES = ("slurm-wlm", "slurm-client", "slurmdbd", "mariadb-server", "munge")
#: command -> Debian package that provides it
REQUIRED_COMMANDS: Mapping[str, str] = {
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "slurmdbd": "slurmdbd",
    "sinfo": "slurm-client",
    "squeue": "slurm-client",
    "scontrol": "slurm-client",
    "sacct": "slurm-client",
    "sacctmgr": "slurm-client",
    "salloc": "slurm-client",
    "srun": "slurm-client",
    "scancel": "slurm-client",
    "munged": "munge",
    "munge": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-server",
    "unshare": "util-linux",
    "setsid": "util-linux",
}

_DB_PASSWORD_BYTES = 12
_DAEMON_MARKER = "SLURM_FSM_LOCALCLUSTER_DAEMON"
_T = TypeVar("_T")
_STATE_FILE = "cluster.json"
_HEALTHY_NODE_STATES = frozenset({"idle", "allocated", "mixed", "completing"})
_PORT_BLOCK = 100
_PORT_FIRST_BLOCK = 10000
_PORT_BLOCKS = 200  # 10000..29999, below the kernel's ephemeral range


class LocalClusterError(SlurmFsmError, RuntimeError):
    """The local cluster could not be installed, started, checked or stopped."""


@attrs.frozen
class ClusterInfo:
    """What a caller needs to use the local cluster."""

    slurm_conf: Path
    base_dir: Path
    cluster_name: str
    partition: str
    account: str
    other_account: str
    nodes: list[str]
    user: str
    auth: str  # "munge" or "none"
    slurmctld_port: int
    slurmdbd_port: int
    log_dir: Path
    #: pyxis + enroot and the test images; None when the cluster has no containers
    containers: ContainerInfo | None = None
    #: why ``containers`` is None ("" when it is not)
    containers_problem: str = ""
    #: the configuration's features (:data:`FEATURES`); () is the default configuration
    config: tuple[str, ...] = ()

    @property
    def config_name(self) -> str:
        """``cgroup,noenforce``, or ``default``."""
        return config_name(self.config)

    def has(self, feature: str) -> bool:
        """Whether the cluster runs with ``feature`` (one of :data:`FEATURES`)."""
        if feature not in FEATURES:
            raise ValueError(f"unknown configuration feature {feature!r}; known: "
                             f"{', '.join(FEATURES)}")
        return feature in self.config

    @property
    def cpus_per_node(self) -> int:
        """CPUs of each node (:func:`node_cpus`)."""
        return node_cpus(self.config)

    @property
    def cpus_per_gpu(self) -> int:
        """CPUs per GPU an allocation that names none gets here: ``DefCpuPerGPU`` under
        ``defcpu``, else the node's CPUs in proportion to its GPUs."""
        return DEF_CPU_PER_GPU if "defcpu" in self.config else self.cpus_per_node // GPUS_PER_NODE

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point Slurm clients at this cluster: ``SLURM_CONF``,
        and ``PATH`` with the nvidia-smi stand-in first (srun carries the caller's
        ``PATH`` to every task: that is how the stand-in is on the nodes' ``PATH``)."""
        return {"SLURM_CONF": str(self.slurm_conf),
                "PATH": localgpu.path_with_stand_in(self.base_dir,
                                                    os.environ.get("PATH", os.defpath))}

    @property
    def export_line(self) -> str:
        return _export_line(self.base_dir)

    def to_json(self) -> dict[str, Any]:
        data = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in attrs.asdict(self, recurse=False).items()
        }
        data["containers"] = self.containers.to_json() if self.containers else None
        data["config"] = list(self.config)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterInfo:
        return cls(
            slurm_conf=Path(data["slurm_conf"]),
            base_dir=Path(data["base_dir"]),
            cluster_name=str(data["cluster_name"]),
            partition=str(data["partition"]),
            account=str(data["account"]),
            other_account=str(data["other_account"]),
            nodes=[str(n) for n in data["nodes"]],
            user=str(data["user"]),
            auth=str(data["auth"]),
            slurmctld_port=int(data["slurmctld_port"]),
            slurmdbd_port=int(data["slurmdbd_port"]),
            log_dir=Path(data["log_dir"]),
            containers=(ContainerInfo.from_json(data["containers"])
                        if data.get("containers") else None),
            containers_problem=str(data.get("containers_problem", "")),
            # a state file of an older `up` has no key: the default configuration
            config=tuple(str(f) for f in data.get("config", ())),
        )


@attrs.frozen
class UpResult:
    info: ClusterInfo
    started: bool  # False: a healthy cluster was already up and is reused
    seconds: float


@attrs.frozen
class ClusterStatus:
    state: str  # "up", "down" or "unhealthy"
    info: ClusterInfo | None
    problems: list[str]
    nodes: list[str]  # "n1 idle" lines
    jobs: list[str]  # squeue lines


@attrs.frozen
class _Daemon:
    name: str  # "slurmd-n1", ...
    pid: int
    exe: str  # the program name expected in /proc/PID/cmdline
    uts_ns: str | None = None  # "uts:[4026532...]" for the nodes


# ---------------------------------------------------------------- paths and state


def config_features(raw: str | None = None) -> tuple[str, ...]:
    """The features of ``raw`` (default ``$SLURM_FSM_LOCAL_CONFIG``) in canonical order;
    an unknown one is a :class:`LocalClusterError` naming the variable."""
    text = os.environ.get(ENV_CONFIG, "") if raw is None else raw
    wanted = {f.strip() for f in text.split(",") if f.strip()}
    unknown = sorted(wanted - set(FEATURES))
    if unknown:
        raise LocalClusterError(f"{ENV_CONFIG}={text!r}: unknown feature(s) "
                                f"{', '.join(unknown)}; known: {', '.join(FEATURES)}")
    return tuple(f for f in FEATURES if f in wanted)


def config_name(features: Sequence[str]) -> str:
    """``cgroup,noenforce`` for those features, ``default`` for none."""
    return ",".join(features) or "default"


def base_dir() -> Path:
    """The base folder: ``$SLURM_FSM_LOCAL_DIR`` or ``/tmp/slurm_fsm-local``."""
    raw = os.environ.get(ENV_BASE_DIR, "").strip()
    return Path(raw).absolute() if raw else DEFAULT_BASE_DIR


@attrs.frozen
class _Layout:
    base: Path

    @property
    def etc(self) -> Path:
        return self.base / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def dbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def log(self) -> Path:
        return self.base / "log"

    @property
    def run(self) -> Path:
        return self.base / "run"

    @property
    def spool(self) -> Path:
        return self.base / "spool"

    @property
    def munge_key_dir(self) -> Path:
        return self.base / "munge-key"

    @property
    def munge_key(self) -> Path:
        return self.munge_key_dir / "munge.key"

    @property
    def munge_run(self) -> Path:
        return self.base / "munge-run"

    @property
    def munge_socket(self) -> Path:
        return self.munge_run / "munge.socket.2"

    @property
    def db_dir(self) -> Path:
        return self.base / "mariadb"

    @property
    def db_data(self) -> Path:
        return self.db_dir / "data"

    @property
    def db_socket(self) -> Path:
        return self.db_dir / "mariadb.sock"

    @property
    def state_file(self) -> Path:
        return self.base / _STATE_FILE

    @property
    def cache(self) -> Path:
        """Kept across ``up``s (the base folder is wiped): the MariaDB template."""
        return self.base.parent / f"{self.base.name}.cache"

    @property
    def lock_file(self) -> Path:
        return self.base.parent / f"{self.base.name}.lock"


def _lock(layout: _Layout, timeout: float = 300.0) -> FileLock:
    layout.base.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(layout.lock_file), timeout=timeout)


def _read_state(layout: _Layout) -> tuple[ClusterInfo | None, list[_Daemon]]:
    try:
        data = json.loads(layout.state_file.read_text())
    except (OSError, ValueError):
        return None, []
    daemons = [
        _Daemon(name=str(d["name"]), pid=int(d["pid"]), exe=str(d["exe"]), uts_ns=d.get("uts_ns"))
        for d in data.get("daemons", [])
    ]
    info_data = data.get("info")
    try:
        info = ClusterInfo.from_json(info_data) if info_data else None
    except (KeyError, TypeError, ValueError):
        info = None
    return info, daemons


def _write_state(layout: _Layout, info: ClusterInfo | None, daemons: Sequence[_Daemon]) -> None:
    data = {
        "info": info.to_json() if info else None,
        "daemons": [attrs.asdict(d) for d in daemons],
    }
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(layout.state_file)


# ---------------------------------------------------------------- subprocesses


def _clean_env(conf: Path | None = None) -> dict[str, str]:
    """The caller's environment without SLURM_* (a job's variables would mislead)."""
    prefixes = ("SLURM_", "SALLOC_", "SBATCH_", "SRUN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    if conf is not None:
        env["SLURM_CONF"] = str(conf)
    env["PATH"] = _search_path()
    return env


def _run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (a list, never a shell string) with a timeout; capture text output."""
    try:
        proc = subprocess.run(  # noqa: S603
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalClusterError(f"{' '.join(argv)}: timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise LocalClusterError(f"{' '.join(argv)}: {exc}") from exc
    if check and proc.returncode != 0:
        out = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise LocalClusterError(f"{' '.join(argv)}: exit {proc.returncode}: {out}")
    return proc


def _spawn(
    name: str,
    argv: Sequence[str],
    *,
    layout: _Layout,
    env: Mapping[str, str],
    exe: str,
    hostname: str | None = None,
) -> _Daemon:
    """Start a long-running daemon detached from us (own session), return its pid.

    ``setsid -f`` forks, so the daemon is not our child (nothing to reap, it outlives
    us). The shell writes its pid and ``exec``s the daemon, so the pid stays the
    daemon's. With ``hostname`` the daemon runs in a new UTS namespace with that name.
    """
    pid_file = layout.run / f"{name}.spawn.pid"
    pid_file.unlink(missing_ok=True)
    out = layout.log / f"{name}.out"
    if hostname is None:
        cmd = ["sh", "-c", 'echo $$ > "$1"; shift; exec "$@"', "sh", str(pid_file), *argv]
    else:
        cmd = [
            "unshare", "--uts", "sh", "-c",
            'hostname "$1" && echo $$ > "$2" && shift 2 && exec "$@"',
            "sh", hostname, str(pid_file), *argv,
        ]  # fmt: skip
    with out.open("ab") as log_fh:
        _run_detached(["setsid", "-f", *cmd], env=env, log_fh=log_fh)
    pid = _wait_for(
        lambda: _read_pid(pid_file), timeout=5.0, what=f"{name} to start (pid file {pid_file})"
    )
    uts = None
    if hostname is not None:
        with contextlib.suppress(OSError):
            uts = os.readlink(f"/proc/{pid}/ns/uts")
    return _Daemon(name=name, pid=pid, exe=exe, uts_ns=uts)


def _run_detached(argv: Sequence[str], *, env: Mapping[str, str], log_fh: Any) -> None:
    try:
        subprocess.run(  # noqa: S603
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=log_fh,
            env=dict(env),
            timeout=10,
            check=True,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        raise LocalClusterError(f"cannot start {' '.join(argv)}: {exc}") from exc


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _wait_for(probe: Callable[[], _T | None], *, timeout: float, what: str) -> _T:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise LocalClusterError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


# ---------------------------------------------------------------- processes


def _proc_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state follows the ")" that closes the command name
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _is_ours(d: _Daemon) -> bool:
    """The pid is alive and still runs the program we started (no pid reuse)."""
    return _proc_alive(d.pid) and d.exe in _cmdline(d.pid)


def _pids_in_uts(namespaces: set[str]) -> list[int]:
    found: list[int] = []
    if not namespaces:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ns = os.readlink(entry / "ns" / "uts")
        except OSError:
            continue
        if ns in namespaces:
            found.append(int(entry.name))
    return found


def _hold_namespaces(namespaces: set[str]) -> dict[str, int]:
    """An open descriptor on each of these UTS namespaces that still has a process
    (a namespace lives, and keeps its number, while a descriptor on it is open)."""
    held: dict[str, int] = {}
    for pid in _pids_in_uts(namespaces):
        try:
            fd = os.open(f"/proc/{pid}/ns/uts", os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile
        ns = os.readlink(f"/proc/self/fd/{fd}")
        if ns in namespaces and ns not in held:
            held[ns] = fd
        else:
            os.close(fd)  # a number reused since the scan, or one held already
    return held


def _marked_pids(base: Path) -> list[int]:
    """Live processes started by us for ``base`` (the marker in their environment)."""
    marker = f"{_DAEMON_MARKER}={base}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if (environ.startswith(marker) or b"\0" + marker in environ) and _proc_alive(
            int(entry.name)
        ):
            found.append(int(entry.name))
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _our_namespaces(daemons: Sequence[_Daemon]) -> set[str]:
    """The UTS namespaces of our nodes that are still ours.

    A namespace whose slurmd still runs is ours. Once its slurmd is gone, the kernel
    may give its number to a new namespace, so it only counts while a slurmstepd
    (left behind by our slurmd) still lives in it.
    """
    namespaces = {d.uts_ns for d in daemons if d.uts_ns and _is_ours(d)}
    orphaned = {d.uts_ns for d in daemons if d.uts_ns} - namespaces
    for pid in _pids_in_uts(orphaned):
        if _comm(pid) == "slurmstepd":
            with contextlib.suppress(OSError):
                namespaces.add(os.readlink(f"/proc/{pid}/ns/uts"))
    return namespaces


def _kill_all(pids: Sequence[int], *, grace: float) -> list[int]:
    """SIGTERM, wait up to ``grace`` s, SIGKILL what is left, wait; return survivors."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        alive = [p for p in pids if _proc_alive(p)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = [p for p in alive if _proc_alive(p)]
        if not alive:
            return []
    return [p for p in pids if _proc_alive(p)]


# ---------------------------------------------------------------- packages


def _search_path() -> str:
    """$PATH with the sbin folders (daemons live there; a user's PATH may lack them)."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    for extra in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if extra not in parts:
            parts.append(extra)
    return os.pathsep.join(parts)


def missing_commands() -> list[str]:
    """Required commands not found on $PATH plus the sbin folders."""
    path = _search_path()
    return [c for c in REQUIRED_COMMANDS if shutil.which(c, path=path) is None]


def ensure_packages() -> None:
    """Install the Debian packages when a command is missing (as root); else no-op."""
    missing = missing_commands()
    if not missing:
        return
    pkgs = sorted({REQUIRED_COMMANDS[c] for c in missing} | set(PACKAGES))
    if os.geteuid() != 0:
        raise LocalClusterError(
            f"missing commands: {', '.join(missing)}; install them as root: "
            f"apt-get update && apt-get install -y {' '.join(pkgs)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    t0 = time.monotonic()
    _say(f"installing {' '.join(pkgs)} (missing: {', '.join(missing)})")
    _run(["apt-get", "update"], env=env, timeout=600)
    _run(["apt-get", "install", "-y", *pkgs], env=env, timeout=1800)
    still = missing_commands()
    if still:
        raise LocalClusterError(f"still missing after apt-get install: {', '.join(still)}")
    _say(f"packages installed in {time.monotonic() - t0:.1f}s")


# ---------------------------------------------------------------- config


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))  # a probe, closed at once
        except OSError:
            return False
    return True


def _choose_ports(base: Path, n_nodes: int) -> int:
    """First port of a free block of 100, derived from the base folder's path."""
    first = zlib.crc32(str(base).encode()) % _PORT_BLOCKS
    for i in range(_PORT_BLOCKS):
        start = _PORT_FIRST_BLOCK + ((first + i) % _PORT_BLOCKS) * _PORT_BLOCK
        needed = [start, start + 1, start + 2, *(start + 10 + k for k in range(n_nodes))]
        if all(_port_free(p) for p in needed):
            return start
    raise LocalClusterError("no free block of ports between 10000 and 29999")


def _slurm_conf(layout: _Layout, *, port0: int, nodes: Sequence[str], auth: str,
                config: Sequence[str] = ()) -> str:
    b = layout.base
    if auth == "munge":
        auth_lines = [
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={layout.munge_socket}",
            # the munge socket for talking to slurmdbd (sacctmgr, sacct, slurmctld)
            f"AccountingStoragePass={layout.munge_socket}",
        ]
    else:
        auth_lines = ["AuthType=auth/none", "CredType=cred/none"]
    lines = [
        "# written by slurm_fsm_dev.localcluster; regenerated on every `up`",
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={port0}",
        f"SlurmdPort={port0 + 10}",
        "SlurmUser=root",
        "SlurmdUser=root",
        *auth_lines,
        f"StateSaveLocation={b}/spool/slurmctld",
        f"SlurmdSpoolDir={b}/spool/slurmd-%n",
        f"SlurmctldPidFile={b}/run/slurmctld.pid",
        f"SlurmdPidFile={b}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={b}/log/slurmctld.log",
        f"SlurmdLogFile={b}/log/slurmd-%n.log",
        f"PlugStackConfig={b}/etc/plugstack.conf",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # TaskPluginParam=None: no CPU binding by default (a task's --cpu-bind still
        # binds). The nodes declare more CPUs than the host has, and task/affinity
        # cannot lay out a step of more CPUs than the host's ("Unable to layout tasks
        # on given cpus"); ConstrainCores still confines each step to its CPUs.
        *(["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity",
           "TaskPluginParam=None"]
          if "cgroup" in config else
          ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"]),
        "JobAcctGatherType=jobacct_gather/linux",
        # memkill: slurmstepd samples each task's RSS every second and kills the step
        # past its memory limit (no memory cgroup here)
        *(["JobAcctGatherParams=OverMemoryKill", "JobAcctGatherFrequency=task=1"]
          if "memkill" in config else []),
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=512",
        *([f"DefCpuPerGPU={DEF_CPU_PER_GPU}"] if "defcpu" in config else []),
        # CPUs and GPUs as declared here, not as found: more than the machine has
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
        "ReturnToService=2",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SchedulerType=sched/backfill",
        # never `defer`: in 22.05 it also delays srun and salloc
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "MessageTimeout=5",
        "KillWait=1",
        "MinJobAge=30",
        "InactiveLimit=0",
        "SlurmdTimeout=30",
        "EnforcePartLimits=ALL",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={port0 + 1}",
        # noenforce: no key at all (22.05 refuses the literal `none`)
        *([] if "noenforce" in config else ["AccountingStorageEnforce=associations,limits,qos"]),
        "JobCompType=jobcomp/none",
    ]
    for i, node in enumerate(nodes):
        lines.append(
            f"NodeName={node} NodeHostname={node} NodeAddr=127.0.0.1 Port={port0 + 10 + i} "
            f"CPUs={node_cpus(config)} RealMemory={MEMORY_PER_NODE_MB} "
            f"{localgpu.gres_node_field(GPUS_PER_NODE, _gpu_type(config))} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def node_cpus(config: Sequence[str]) -> int:
    """CPUs of each node of a cluster of configuration ``config``."""
    return WIDE_CPUS_PER_NODE if "wide" in config else CPUS_PER_NODE


def _gpu_type(config: Sequence[str]) -> str | None:
    return GPU_TYPE if "typed" in config else None


def _cgroup_conf() -> str:
    """cgroup.conf of the ``cgroup`` configuration (22.05 and 24.11 read it alike)."""
    lines = [
        "# written by slurm_fsm_dev.localcluster; regenerated on every `up`",
        "CgroupPlugin=cgroup/v1",
        f"CgroupMountpoint={_CGROUP_ROOT}",
        "ConstrainCores=yes",
        "ConstrainDevices=yes",
    ]
    return "\n".join(lines) + "\n"


def _dbd_conf(layout: _Layout, *, port0: int, auth: str, db_password: str) -> str:
    b = layout.base
    auth_lines = (
        ["AuthType=auth/munge", f"AuthInfo=socket={layout.munge_socket}"]
        if auth == "munge"
        else ["AuthType=auth/none"]
    )
    lines = [
        "# written by slurm_fsm_dev.localcluster; regenerated on every `up`",
        *auth_lines,
        "DbdHost=localhost",
        f"DbdPort={port0 + 1}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={b}/log/slurmdbd.log",
        f"PidFile={b}/run/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={port0 + 2}",
        "StorageUser=slurm",
        f"StoragePass={db_password}",
        "StorageLoc=slurm_acct_db",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- start-up steps


def _export_line(base: Path) -> str:
    """``export SLURM_CONF=... PATH=<nvidia-smi stand-in>:$PATH`` for a shell."""
    conf = shlex.quote(str(_Layout(base).slurm_conf))
    return f'export SLURM_CONF={conf} PATH={shlex.quote(str(localgpu.bin_dir(base)))}:"$PATH"'


def _say(msg: str) -> None:
    print(f"local-slurm: {msg}", file=sys.stderr, flush=True)


def _start_munge(layout: _Layout, daemons: list[_Daemon], env: Mapping[str, str]) -> bool:
    """Start a private munged; False (and nothing left running) when it cannot."""
    layout.munge_key_dir.mkdir(mode=0o700)
    layout.munge_run.mkdir(mode=0o755)
    os.chmod(layout.munge_run, 0o755)  # the socket folder must be searchable by all
    layout.munge_key.write_bytes(secrets.token_bytes(1024))
    os.chmod(layout.munge_key, 0o400)
    argv = [
        "munged", "--foreground", "--force",
        f"--socket={layout.munge_socket}",
        f"--key-file={layout.munge_key}",
        f"--pid-file={layout.munge_run / 'munged.pid'}",
        f"--seed-file={layout.munge_key_dir / 'munged.seed'}",
        f"--log-file={layout.log / 'munged.log'}",
    ]  # fmt: skip
    d = _spawn("munged", argv, layout=layout, env=env, exe="munged")
    daemons.append(d)

    def works() -> bool | None:
        if not _proc_alive(d.pid):
            raise LocalClusterError("munged exited")
        if not layout.munge_socket.exists():
            return None
        probe = _run(["munge", "-n", f"--socket={layout.munge_socket}"], timeout=5, check=False)
        return True if probe.returncode == 0 else None

    try:
        _wait_for(works, timeout=5.0, what="munged to answer")
    except LocalClusterError as exc:
        _say(f"munged does not work ({exc}); falling back to auth/none")
        _kill_all([d.pid], grace=1.0)
        daemons.remove(d)
        return False
    return True


def _mariadb_template(layout: _Layout, env: Mapping[str, str]) -> Path:
    """An empty data folder made by ``mariadb-install-db`` once per MariaDB version.

    Each ``up`` copies it (a few hundredths of a second) instead of running the
    installer (most of a second): the result is the same fresh, empty database.
    """
    version = _run(["mariadbd", "--version"], timeout=30, env=env).stdout.strip()
    template = layout.cache / f"mariadb-{zlib.crc32(version.encode()):08x}"
    if (template / "complete").exists():
        return template / "data"
    shutil.rmtree(template, ignore_errors=True)
    template.mkdir(parents=True)
    _run(
        [
            "mariadb-install-db", "--no-defaults", f"--datadir={template / 'data'}",
            "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root",
        ],
        timeout=120,
        env=env,
    )  # fmt: skip
    (template / "complete").write_text(version + "\n")
    return template / "data"


def _start_mariadb(
    layout: _Layout, daemons: list[_Daemon], env: Mapping[str, str], *, port: int, password: str
) -> None:
    layout.db_dir.mkdir()
    shutil.copytree(_mariadb_template(layout, env), layout.db_data, symlinks=True)
    argv = [
        "mariadbd", "--no-defaults", "--user=root",
        f"--datadir={layout.db_data}",
        f"--socket={layout.db_socket}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={layout.db_dir / 'mariadbd.pid'}",
        f"--log-error={layout.log / 'mariadb.log'}",
        "--skip-log-bin",
        # slurmdbd's recommended settings
        "--innodb-lock-wait-timeout=900",
        # speed over durability: the database is thrown away with the cluster
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        "--innodb-flush-method=nosync",
    ]  # fmt: skip
    d = _spawn("mariadbd", argv, layout=layout, env=env, exe="mariadbd")
    daemons.append(d)
    client = ["mariadb", "--no-defaults", f"--socket={layout.db_socket}", "-uroot"]

    def ready() -> bool | None:
        if not _proc_alive(d.pid):
            raise LocalClusterError("mariadbd exited")
        probe = _run([*client, "-e", "SELECT 1"], timeout=5, check=False)
        return True if probe.returncode == 0 else None

    _wait_for(ready, timeout=30.0, what="MariaDB to accept connections")
    sql = (
        "CREATE DATABASE slurm_acct_db;"
        f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
        f"CREATE USER 'slurm'@'localhost' IDENTIFIED BY '{password}';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    )
    _run([*client, "-e", sql], timeout=30)


def _tcp_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start_slurmdbd(
    layout: _Layout, daemons: list[_Daemon], env: Mapping[str, str], *, port: int
) -> None:
    d = _spawn("slurmdbd", ["slurmdbd", "-D"], layout=layout, env=env, exe="slurmdbd")
    daemons.append(d)

    def ready() -> bool | None:
        if not _proc_alive(d.pid):
            raise LocalClusterError("slurmdbd exited")
        return True if _tcp_open(port) else None

    _wait_for(ready, timeout=60.0, what=f"slurmdbd to listen on port {port}")


def _add_associations(env: Mapping[str, str], user: str) -> None:
    sacctmgr = ["sacctmgr", "-i"]
    _run([*sacctmgr, "add", "cluster", CLUSTER_NAME], timeout=30, env=env)
    _run(
        [
            *sacctmgr, "add", "account", f"{ACCOUNT},{OTHER_ACCOUNT}",
            f"Cluster={CLUSTER_NAME}", "Description=slurm_fsm test", "Organization=slurm_fsm",
        ],
        timeout=30,
        env=env,
    )  # fmt: skip
    users = ["root"] if user == "root" else ["root", user]
    for u in users:
        _run(
            [
                *sacctmgr, "add", "user", u, f"Account={ACCOUNT},{OTHER_ACCOUNT}",
                f"DefaultAccount={ACCOUNT}", f"Cluster={CLUSTER_NAME}",
            ],
            timeout=30,
            env=env,
        )  # fmt: skip


def _node_states(env: Mapping[str, str]) -> dict[str, str]:
    proc = _run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15, env=env, check=False)
    if proc.returncode != 0:
        return {}
    states: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def _verify_ours(info: ClusterInfo, env: Mapping[str, str]) -> list[str]:
    """Problems found when checking that the controller that answers is ours."""
    problems = []
    proc = _run(["scontrol", "show", "config"], timeout=15, env=env, check=False)
    if proc.returncode != 0:
        return [f"scontrol show config: exit {proc.returncode}: {proc.stderr.strip()[-500:]}"]
    config: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    if config.get("ClusterName") != info.cluster_name:
        problems.append(
            f"ClusterName is {config.get('ClusterName')!r}, expected {info.cluster_name!r}"
        )
    if config.get("SlurmctldPort") != str(info.slurmctld_port):
        problems.append(
            f"SlurmctldPort is {config.get('SlurmctldPort')!r}, expected {info.slurmctld_port}"
        )
    if config.get("SLURM_CONF") not in (None, str(info.slurm_conf)):
        problems.append(f"SLURM_CONF is {config.get('SLURM_CONF')!r}, expected {info.slurm_conf}")
    nodes = _run(["sinfo", "-h", "-N", "-o", "%N"], timeout=15, env=env, check=False)
    seen = sorted(set(nodes.stdout.split()))
    if seen != sorted(info.nodes):
        problems.append(f"sinfo lists nodes {seen}, expected {sorted(info.nodes)}")
    return problems


def log_tails(base: Path | None = None, lines: int = 15) -> str:
    """The last ``lines`` lines of every daemon log (for error messages)."""
    log_dir = _Layout(base or base_dir()).log
    if not log_dir.is_dir():
        return f"(no log folder {log_dir})"
    chunks = []
    order = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadb")

    def rank(path: Path) -> tuple[int, str]:
        stem = path.name.split(".")[0].split("-")[0]
        return (order.index(stem) if stem in order else len(order), path.name)

    for path in sorted(log_dir.iterdir(), key=rank):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        tail = text.splitlines()[-lines:]
        if tail:
            chunks.append(f"--- {path} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(chunks) if chunks else f"(all logs in {log_dir} are empty)"


def _daemon_env(layout: _Layout) -> dict[str, str]:
    """The environment every daemon of the cluster starts with."""
    env = _clean_env(layout.slurm_conf)
    env[_DAEMON_MARKER] = str(layout.base)  # marks our processes, see _marked_pids
    return env


def _spawn_ctld(layout: _Layout, env: Mapping[str, str]) -> _Daemon:
    """slurmctld, as the cluster runs it (in the foreground of a session of its own)."""
    return _spawn("slurmctld", ["slurmctld", "-D", "-f", str(layout.slurm_conf)],
                  layout=layout, env=env, exe="slurmctld")


def _wait_ctld_listens(ctld: _Daemon, port: int) -> None:
    def ctld_listens() -> bool | None:
        if not _proc_alive(ctld.pid):
            raise LocalClusterError("slurmctld exited")
        return True if _tcp_open(port) else None

    # a client that finds no controller retries only after a second
    _wait_for(ctld_listens, timeout=30.0, what=f"slurmctld to listen on port {port}")


def _start(layout: _Layout, n_nodes: int, config: tuple[str, ...] = ()) -> ClusterInfo:
    """Start everything from scratch; on failure stop what was started and raise."""
    if layout.base.exists():
        shutil.rmtree(layout.base)
    for d in (layout.base, layout.etc, layout.log, layout.run, layout.spool):
        d.mkdir(parents=True, exist_ok=True)
    (layout.spool / "slurmctld").mkdir()
    # pyxis + enroot (built once per machine) before any daemon reads plugstack.conf
    containers, containers_problem = localpyxis.prepare(
        layout.base, layout.etc / "plugstack.conf", say=_say,
        scope="job" if "jobscope" in config else "global")
    if containers_problem:
        _say(f"no containers: {containers_problem}")
    nodes = [f"n{i + 1}" for i in range(n_nodes)]
    for node in nodes:
        (layout.spool / f"slurmd-{node}").mkdir()
    port0 = _choose_ports(layout.base, n_nodes)
    env = _daemon_env(layout)
    daemons: list[_Daemon] = []
    _write_state(layout, None, daemons)
    user = getpass.getuser()
    try:
        wanted = os.environ.get(ENV_AUTH, "munge").strip() or "munge"
        if wanted not in ("munge", "none"):
            raise LocalClusterError(f"{ENV_AUTH}={wanted!r}: use munge or none")
        auth = "munge" if wanted == "munge" and _start_munge(layout, daemons, env) else "none"
        _write_state(layout, None, daemons)
        info = ClusterInfo(
            slurm_conf=layout.slurm_conf,
            base_dir=layout.base,
            cluster_name=CLUSTER_NAME,
            partition=PARTITION,
            account=ACCOUNT,
            other_account=OTHER_ACCOUNT,
            nodes=nodes,
            user=user,
            auth=auth,
            slurmctld_port=port0,
            slurmdbd_port=port0 + 1,
            log_dir=layout.log,
            containers=containers,
            containers_problem=containers_problem,
            config=config,
        )
        password = secrets.token_hex(_DB_PASSWORD_BYTES)
        (layout.etc / "gres.conf").write_text(
            localgpu.prepare(layout.base, nodes, gpu_type=_gpu_type(config)))
        if "cgroup" in config:
            (layout.etc / "cgroup.conf").write_text(_cgroup_conf())
        layout.slurm_conf.write_text(
            _slurm_conf(layout, port0=port0, nodes=nodes, auth=auth, config=config))
        layout.dbd_conf.write_text(_dbd_conf(layout, port0=port0, auth=auth, db_password=password))
        os.chmod(layout.dbd_conf, 0o600)
        _write_state(layout, info, daemons)

        _start_mariadb(layout, daemons, env, port=port0 + 2, password=password)
        _write_state(layout, info, daemons)
        _start_slurmdbd(layout, daemons, env, port=port0 + 1)
        _write_state(layout, info, daemons)
        _add_associations(env, user)

        conf = str(layout.slurm_conf)
        daemons.append(_spawn_ctld(layout, env))
        _write_state(layout, info, daemons)
        _wait_ctld_listens(daemons[-1], port0)
        for node in nodes:
            daemons.append(
                _spawn(f"slurmd-{node}", ["slurmd", "-D", "-f", conf, "-N", node], layout=layout,
                       env=env, exe="slurmd", hostname=node)
            )  # fmt: skip
            _write_state(layout, info, daemons)

        def all_idle() -> bool | None:
            dead = [d.name for d in daemons if not _proc_alive(d.pid)]
            if dead:
                raise LocalClusterError(f"daemon(s) exited: {', '.join(dead)}")
            states = _node_states(env)
            return True if states and all(states.get(n) == "idle" for n in nodes) else None

        _wait_for(all_idle, timeout=60.0, what=f"nodes {','.join(nodes)} to be idle")
        problems = _verify_ours(info, env)
        if problems:
            raise LocalClusterError("reached a cluster that is not ours: " + "; ".join(problems))
    except (LocalClusterError, OSError) as exc:
        tails = log_tails(layout.base)
        _stop(layout)
        raise LocalClusterError(
            f"local Slurm cluster did not come up: {exc}\nlogs in {layout.log}:\n{tails}"
        ) from exc
    return info


# ---------------------------------------------------------------- public API


def _containers_problem(info: ClusterInfo, *, as_brought_up: bool = False) -> str:
    """A cluster started without containers although the sources are now there
    (an older ``up``), or whose images are gone: it is not the cluster asked for.

    ``as_brought_up`` (``status``): judged as it was brought up, not as this shell
    would bring it up. ``make demo`` brings it up with
    ``SLURM_FSM_LOCAL_CONTAINERS=if-built`` and builds no pyxis: that cluster is
    healthy without containers (``status`` says "up" and why there are none), while an
    ``up`` that wants containers still restarts it with them."""
    if info.containers is None:
        # "" : started by a version without containers; a failed build is not retried
        # here (that would restart a shared cluster at every look)
        before = info.containers_problem
        not_built = before.startswith(localpyxis.NOT_BUILT) and not as_brought_up and \
            os.environ.get(localpyxis.ENV_CONTAINERS, "").strip() != "if-built"
        if (not before or not_built or before.startswith("no pyxis/enroot sources")) and \
                not localpyxis.sources_problem():
            return f"started without containers, but the sources are at {localpyxis.sources_dir()}"
        return ""
    gone = [str(p) for p in (info.containers.plugin, *info.containers.images.values())
            if not p.exists()]
    return f"container files are gone: {', '.join(gone)}" if gone else ""


def _check(info: ClusterInfo, daemons: Sequence[_Daemon], *,
           as_brought_up: bool = False) -> list[str]:
    """Problems of a cluster believed up (empty: healthy); ``as_brought_up``: see
    :func:`_containers_problem`."""
    problems = [f"{d.name} (pid {d.pid}) is not running" for d in daemons if not _is_ours(d)]
    containers = _containers_problem(info, as_brought_up=as_brought_up)
    if containers:
        problems.append(containers)
    if not (info.base_dir / "etc" / "gres.conf").exists():
        problems.append("started without GPUs (by an older `up`)")
    names = {d.name for d in daemons}
    expected = {"mariadbd", "slurmdbd", "slurmctld", *(f"slurmd-{n}" for n in info.nodes)}
    if info.auth == "munge":
        expected.add("munged")
    problems += [f"{name} was never started" for name in sorted(expected - names)]
    if problems:
        return problems  # do not ask a dead controller: clients wait for MessageTimeout
    env = _clean_env(info.slurm_conf)
    problems = _verify_ours(info, env)
    if not problems:
        states = _node_states(env)
        problems += [
            f"node {n} is {states.get(n, 'missing')}"
            for n in info.nodes
            if states.get(n) not in _HEALTHY_NODE_STATES
        ]
    return problems


def current() -> ClusterInfo | None:
    """The running cluster if it is up and healthy, else None (starts nothing)."""
    layout = _Layout(base_dir())
    info, daemons = _read_state(layout)
    if info is None or _check(info, daemons):
        return None
    return info


def daemon_pids() -> dict[str, int]:
    """The running daemons of the local cluster (munged, mariadbd, slurmdbd, slurmctld,
    each slurmd) by name: the pids started here that still run their program."""
    _info, daemons = _read_state(_Layout(base_dir()))
    return {d.name: d.pid for d in daemons if _is_ours(d)}


def bring_up(nodes: int = DEFAULT_NODES, *, install: bool = True) -> UpResult:
    """Make sure the local cluster is up; reuse a healthy one, else start afresh."""
    if nodes < 2:
        raise LocalClusterError(f"nodes must be >= 2, got {nodes}")
    t0 = time.monotonic()
    config = config_features()
    layout = _Layout(base_dir())
    info, daemons = _read_state(layout)
    if info is not None and len(info.nodes) == nodes and info.config == config and \
            not _check(info, daemons):
        return UpResult(info=info, started=False, seconds=time.monotonic() - t0)
    if install:
        ensure_packages()
    if os.geteuid() != 0:
        raise LocalClusterError("the local Slurm cluster must be started as root")
    with _lock(layout):
        info, daemons = _read_state(layout)  # someone may have started it meanwhile
        if info is not None and info.config != config:
            _say(f"the running cluster has configuration {info.config_name}, "
                 f"{ENV_CONFIG} asks {config_name(config)}; restarting it")
        elif info is not None and len(info.nodes) == nodes:
            problems = _check(info, daemons)
            if not problems:
                return UpResult(info=info, started=False, seconds=time.monotonic() - t0)
            _say("cluster is unhealthy (" + "; ".join(problems) + "); restarting it")
        # also ends daemons of an earlier `up` whose state file was lost (by marker)
        survivors = _stop(layout)
        if survivors:
            raise LocalClusterError(f"cannot stop the old cluster: {', '.join(survivors)}")
        if "cgroup" in config:
            _claim_cgroups(layout)
        info = _start(layout, nodes, config)
    return UpResult(info=info, started=True, seconds=time.monotonic() - t0)


def up(nodes: int = DEFAULT_NODES, *, install: bool = True) -> ClusterInfo:
    """Make sure the local cluster is up and return how to reach it."""
    return bring_up(nodes, install=install).info


def restart_ctld(*, stop_timeout: float = 60.0) -> int:
    """Restart the running cluster's slurmctld (a controller restart, as an admin's
    ``systemctl restart slurmctld``): under the cluster's lock, SIGTERM and wait for it
    to exit (it saves its state), start it again exactly as :func:`bring_up` does (same
    argv and environment: it recovers the jobs and steps from its state folder), record
    the new pid in the state file and wait until it listens. The new pid. The nodes are
    ``unknown`` until their slurmd registers again (about 5 s here), as after a real
    restart: :func:`current` is None meanwhile."""
    layout = _Layout(base_dir())
    with _lock(layout):
        info, daemons = _read_state(layout)
        old = next((d for d in daemons if d.name == "slurmctld"), None)
        if info is None or old is None or not _is_ours(old):
            raise LocalClusterError(f"no running slurmctld of the cluster in {layout.base}")
        os.kill(old.pid, signal.SIGTERM)
        _wait_for(lambda: not _proc_alive(old.pid), timeout=stop_timeout,
                  what=f"slurmctld (pid {old.pid}) to exit on SIGTERM")
        new = _spawn_ctld(layout, _daemon_env(layout))
        _write_state(layout, info, [new if d is old else d for d in daemons])
        _wait_ctld_listens(new, info.slurmctld_port)
    return new.pid


def _stop(layout: _Layout) -> list[str]:
    """Kill every process of ours; return the survivors (the caller holds the lock).

    Ours: the pids in the state file (when they still run the program we started),
    everything in the nodes' UTS namespaces (slurmstepd, job tasks), and any process
    carrying our daemon marker in its environment (started by an ``up`` that died
    before it could record the pid).
    """
    _info, daemons = _read_state(layout)
    namespaces = _our_namespaces(daemons)
    # Hold each node namespace open while we stop it: the kernel gives a freed
    # namespace's number to the next one made (lowest free), so without a hold the
    # recount below could find another cluster's or a test's `unshare --uts`
    # processes under our old number and call them ours.
    held = _hold_namespaces(namespaces)
    try:
        # the nodes first: slurmd, slurmstepd and the job tasks
        node_pids = {d.pid for d in daemons if d.uts_ns and _is_ours(d)}
        node_pids.update(_pids_in_uts(namespaces))
        survivors = _kill_all(sorted(node_pids), grace=2.0)
        # then the rest together; their state is thrown away, so a short grace is
        # enough (slurmctld takes 1.5 s to stop on SIGTERM)
        rest = {d.pid for d in daemons if not d.uts_ns and _is_ours(d)}
        rest.update(_marked_pids(layout.base))
        rest.difference_update(node_pids)
        survivors += _kill_all(sorted(rest), grace=0.5)
        survivors += [p for p in _pids_in_uts(set(held)) if p not in survivors]
    finally:
        for fd in held.values():
            os.close(fd)
    if not survivors:
        _release_cgroups(layout)
    layout.state_file.unlink(missing_ok=True)
    return [f"pid {p} ({_cmdline(p).strip()})" for p in survivors]


def _claim_owner() -> Path | None:
    try:
        text = _CGROUP_CLAIM.read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def _claim_cgroups(layout: _Layout) -> None:
    """Take the host's cgroup folders (``slurm_n1``...) for this cluster, or refuse when
    another local cluster of the ``cgroup`` configuration runs (the node names are
    fixed, so two would share their folders and job ids)."""
    owner = _claim_owner()
    if owner is not None and owner != layout.base:
        other, daemons = _read_state(_Layout(owner))
        if other is not None and other.has("cgroup") and any(_is_ours(d) for d in daemons):
            raise LocalClusterError(
                f"the local cluster at {owner} runs the cgroup configuration; a second one "
                f"would share its folders {_CGROUP_ROOT}/<controller>/slurm_<node>: stop it "
                f"first ({ENV_BASE_DIR}={owner} python -m slurm_fsm_dev.localcluster down)")
        _release_cgroups(_Layout(owner), force=True)  # its cluster is gone: tidy after it
    _CGROUP_CLAIM.write_text(f"{layout.base}\n")


def _release_cgroups(layout: _Layout, *, force: bool = False) -> None:
    """Remove the empty cgroup folders Slurm made for the nodes (``slurm_<node>`` under
    each v1 controller, depth first) when this cluster holds the claim; then drop it.
    A folder that still holds a process (rmdir: EBUSY) stays."""
    if not force and _claim_owner() != layout.base:
        return
    for folder in cgroup_folders():
        for dirpath, _dirs, _files in os.walk(folder, topdown=False):  # children first
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    if _claim_owner() == layout.base:
        _CGROUP_CLAIM.unlink(missing_ok=True)


def cgroup_folders() -> list[Path]:
    """The ``slurm_<node>`` folders of the local cluster's nodes under the host's cgroup
    v1 controllers (``/sys/fs/cgroup/cpuset/slurm_n1``...) that exist now."""
    if not _CGROUP_ROOT.is_dir():
        return []
    found = []
    for controller in sorted(_CGROUP_ROOT.iterdir()):
        with contextlib.suppress(OSError):
            found += sorted(p for p in controller.glob("slurm_n*")
                            if p.is_dir() and p.name[len("slurm_n"):].isdigit())
    return found


def down() -> None:
    """Stop the local cluster (idempotent). Logs stay until the next ``up``."""
    layout = _Layout(base_dir())
    with _lock(layout):
        survivors = _stop(layout)
    if survivors:
        raise LocalClusterError(f"processes survived SIGKILL: {', '.join(survivors)}")


def status() -> ClusterStatus:
    """Up, down or unhealthy, with the nodes and the jobs when it answers."""
    layout = _Layout(base_dir())
    info, daemons = _read_state(layout)
    if info is None:
        alive = [d.name for d in daemons if _is_ours(d)]
        problems = [f"half-started: {', '.join(alive)} running"] if alive else []
        return ClusterStatus("unhealthy" if alive else "down", None, problems, [], [])
    problems = _check(info, daemons, as_brought_up=True)
    nodes: list[str] = []
    jobs: list[str] = []
    if not any("not running" in p or "never started" in p for p in problems):
        env = _clean_env(info.slurm_conf)
        nodes = [f"{n} {s}" for n, s in sorted(_node_states(env).items())]
        q = _run(["squeue", "-h", "-o", "%i %P %j %u %T %M %N"], timeout=15, env=env, check=False)
        jobs = q.stdout.splitlines()
    return ClusterStatus("unhealthy" if problems else "up", info, problems, nodes, jobs)


# ---------------------------------------------------------------- command line


def _containers_line(info: ClusterInfo) -> str:
    c = info.containers
    if c is None:
        return f"containers: unavailable ({info.containers_problem or 'not set up'})"
    images = ", ".join(f"{k}={v}" for k, v in c.images.items())
    return f"containers: pyxis + enroot ({c.plugin}); images {images}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="local-slurm",
        description="A local Slurm cluster for slurm_fsm's tests. Base folder: "
        f"${ENV_BASE_DIR} or {DEFAULT_BASE_DIR}.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start (or reuse) the cluster; print the SLURM_CONF line")
    p_up.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="slurmd nodes (>= 2)")
    p_up.add_argument("--no-install", action="store_true", help="never run apt-get")
    sub.add_parser("down", help="stop every process the cluster started")
    sub.add_parser("status", help="up/down/unhealthy, nodes and jobs (exit 0 only when up)")
    sub.add_parser("env", help="print the `export SLURM_CONF=...` line")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            result = bring_up(args.nodes, install=not args.no_install)
            verb = "started" if result.started else "already up"
            _say(
                f"{verb} in {result.seconds:.2f}s: cluster {result.info.cluster_name}, "
                f"nodes {','.join(result.info.nodes)}, partition {result.info.partition}, "
                f"accounts {result.info.account},{result.info.other_account}, "
                f"auth/{result.info.auth}, configuration {result.info.config_name}, "
                f"logs {result.info.log_dir}"
            )
            _say(_containers_line(result.info))
            print(result.info.export_line, flush=True)
            return 0
        if args.command == "down":
            t0 = time.monotonic()
            down()
            _say(f"down ({time.monotonic() - t0:.2f}s)")
            return 0
        if args.command == "env":
            print(_export_line(base_dir()))
            return 0
        st = status()
        print(st.state)
        if st.info is not None:
            print(f"SLURM_CONF={st.info.slurm_conf}")
            print(f"cluster {st.info.cluster_name}, auth/{st.info.auth}, "
                  f"configuration {st.info.config_name}, logs {st.info.log_dir}")
            print(_containers_line(st.info))
        for p in st.problems:
            print(f"problem: {p}")
        if st.nodes:
            print("nodes:")
            print("\n".join(f"  {line}" for line in st.nodes))
        if st.info is not None and not st.problems:
            print(f"jobs: {len(st.jobs)}")
            print("\n".join(f"  {line}" for line in st.jobs))
        return {"up": 0, "down": 3}.get(st.state, 1)
    except LocalClusterError as exc:
        print(f"local-slurm: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
