"""Two emulated login nodes on one machine (issue 28): ``slurm-fsm`` run on a node of
its own, as a user on another login node would run it.

Each command runs under ``unshare --uts --pid --fork --mount-proc`` with a host name
of its own (:data:`slurm_fsm_dev.chroot.LOGIN_NODES`), so neither node can check the
other's pids and a run record of the other node is a black box. Both nodes share one
``repo_root``.

This machine's kernel has no NFS (no loopback NFS mount to share between the nodes):
the ``repo_root`` is a plain shared folder. Where ``lock_dir`` is given, the state
file's lock is **node-local**: :func:`main` (``python -m slurm_fsm_dev.loginnodes
--lock-dir DIR -- ARGS``) runs ``slurm-fsm ARGS`` with every
:class:`slurm_fsm.state.StateStore` locking a file under the node's own ``DIR``
instead of the one beside the state file. The lock then excludes the processes of
one node and never those of the other: it stands for a filesystem whose locks do not
hold across hosts (``flock`` across NFS clients, a ``local_lock`` or ``nolock``
mount, Lustre's ``localflock``). Without ``lock_dir`` the lock is the shared one (one
kernel: it excludes across the namespaces).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["children", "main", "node_local_lock", "on_node", "orchestrator"]

#: the module names whose ``python -m`` process is a node's orchestrator
_ORCHESTRATORS = (b"slurm_fsm", b"slurm_fsm_dev.loginnodes")


def on_node(host: str, args: Sequence[str], *, env: Mapping[str, str],
            linger_s: float = 0, lock_dir: Path | None = None,
            python: str = sys.executable) -> subprocess.Popen[str]:
    """``slurm-fsm ARGS`` on the emulated login node ``host``: its own host name and
    pid namespace; with ``lock_dir``, a state-file lock local to the node (the
    module's text). stdout and stderr are pipes.

    The orchestrator is not the namespace's pid 1 (a shell is, and stays ``linger_s``
    after it), so a kill -9 of it is the kill of one process, as on a real node (the
    end of pid 1 would SIGKILL every process of the namespace at once, ``srun`` s
    included: a node that died, not a process)."""
    if lock_dir is None:
        command = [python, "-m", "slurm_fsm", *args]
    else:
        command = [python, "-m", "slurm_fsm_dev.loginnodes", "--lock-dir", str(lock_dir),
                   "--", *args]
    inner = (f"hostname {shlex.quote(host)} && {shlex.join(command)}; rc=$?; "
             f"sleep {float(linger_s):g}; exit $rc")
    return subprocess.Popen(["unshare", "--uts", "--pid", "--fork", "--mount-proc",  # noqa: S603
                             "sh", "-c", inner],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env))


def children() -> dict[int, list[int]]:
    """``{pid: [child pids]}`` of every process on the machine (from /proc)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        out.setdefault(int(stat[1]), []).append(int(name))
    return out


def orchestrator(root: int) -> int | None:
    """The host pid of the ``python -m slurm_fsm`` (or of this module) under the
    ``unshare`` process ``root``; None when there is none (yet, or any more)."""
    tree, todo = children(), [root]
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and argv[1] == b"-m" and argv[2] in _ORCHESTRATORS:
            return pid
        todo.extend(tree.get(pid, []))
    return None


def node_local_lock(lock_dir: Path) -> None:
    """Make every :class:`~slurm_fsm.state.StateStore` made from now on in this
    process lock ``lock_dir/<state file name>.<hash of its path>.lock``: a lock that
    holds between the processes of this node only."""
    import filelock

    from slurm_fsm import state

    original = state.StateStore.__init__
    lock_dir.mkdir(parents=True, exist_ok=True)

    def init(self: state.StateStore, path: Path, lock_timeout_s: float = 900.0) -> None:
        original(self, path, lock_timeout_s)
        digest = hashlib.sha256(str(self.path.absolute()).encode()).hexdigest()[:16]
        self.lock_path = lock_dir / f"{self.path.name}.{digest}.lock"
        self._lock = filelock.FileLock(str(self.lock_path), timeout=lock_timeout_s)

    state.StateStore.__init__ = init  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slurm_fsm_dev.loginnodes --lock-dir DIR -- ARGS``: ``slurm-fsm
    ARGS`` with the state file's lock local to this node (:func:`node_local_lock`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "--lock-dir" or args[2] != "--":
        print("usage: python -m slurm_fsm_dev.loginnodes --lock-dir DIR -- SLURM_FSM_ARGS",
              file=sys.stderr)
        return 2
    node_local_lock(Path(args[1]))
    from slurm_fsm.cli import main as cli_main

    return cli_main(args[3:])


if __name__ == "__main__":
    sys.exit(main())
