"""The ``srun`` that a :class:`~slurm_fsm.testing.FakeCluster` with ``run_scripts=True``
puts first on a script's ``PATH``: it runs the command on this machine, once per task.

It understands what a job script's own ``srun`` inside its allocation needs:
``-N``/``--nodes``, ``-n``/``--ntasks``, ``--ntasks-per-node`` (defaults from the
allocation's ``SLURM_*``, as srun takes them), and it refuses more nodes than the
allocation has with srun's own message. Every task gets ``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURMD_NODENAME`` (the fake node's name: the
command itself runs here, so ``hostname`` prints this machine's name) and
``SLURM_STEP_NUM_TASKS``/``SLURM_STEP_NUM_NODES``. Tasks run at the same time; the exit
code is the highest of the tasks' (``128 + N`` for a task killed by signal N), and a
failed task is reported as srun does (``srun: error: node01: task 0: Exited with exit
code 3``). Other options (``--jobid``, ``--overlap``, ``--container-*``, ...) are
accepted and ignored; container options are named on stderr, since nothing runs in a
container here.

Standard library only: it runs as ``python -I -S srun.py ARGS`` (no site-packages).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["main"]

#: srun options that take a value (``--opt VALUE`` or ``--opt=VALUE``; short ones also
#: ``-N2``); anything else starting with ``-`` is a flag.
_WITH_VALUE = frozenset({
    "-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node", "--jobid", "-J", "--job-name",
    "-p", "--partition", "-A", "--account", "-t", "--time", "-c", "--cpus-per-task",
    "--gpus-per-node", "--gpus", "-G", "--gres", "--mem", "--mem-per-cpu", "-o", "--output",
    "-e", "--error", "-D", "--chdir", "-w", "--nodelist", "-x", "--exclude", "--mpi",
    "--export", "--container-image", "--container-name", "--container-mounts",
    "--container-workdir", "--cpu-bind", "--distribution", "-m", "--signal", "--comment",
    "--constraint", "-C",
})


def _parse(argv: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    opts: dict[str, str | None] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        arg = argv[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            opts[key] = value
        elif arg in _WITH_VALUE:
            if i >= len(argv):
                raise SystemExit(f"srun: option '{arg}' requires an argument")
            opts[arg] = argv[i]
            i += 1
        elif not arg.startswith("--") and len(arg) > 2 and arg[:2] in _WITH_VALUE:
            opts[arg[:2]] = arg[2:]
        else:
            opts[arg] = None
    return opts, list(argv[i:])


def _int(opts: dict[str, str | None], *names: str) -> int | None:
    for name in names:
        value = opts.get(name)
        if value is not None:
            try:
                return int(value.split("-")[0])
            except ValueError:
                raise SystemExit(f"srun: error: Invalid numeric value \"{value}\" for "
                                 f"{name}") from None
    return None


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``srun ARGS`` here; the exit code srun would give."""
    opts, command = _parse(list(sys.argv[1:] if argv is None else argv))
    if not command:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    names = os.environ.get("SLURM_FSM_FAKE_NODES", "").split() or ["localhost"]
    allocated = _env_int("SLURM_JOB_NUM_NODES", len(names))
    nodes = _int(opts, "-N", "--nodes")
    ntasks = _int(opts, "-n", "--ntasks")
    per_node = _int(opts, "--ntasks-per-node")
    if nodes is None:
        nodes = allocated if ntasks is None else min(allocated, ntasks)
    if nodes < 1 or nodes > allocated:
        print(f"srun: error: Only allocated {allocated} nodes asked for {nodes}",
              file=sys.stderr)
        return 1
    if ntasks is None:
        if per_node is None:
            per_node = (_env_int("SLURM_NTASKS_PER_NODE", 1) if "-N" not in opts
                        and "--nodes" not in opts else 1)
        ntasks = nodes * per_node
    containers = sorted(k for k in opts if k.startswith("--container"))
    if containers:
        print(f"srun (fake cluster): {', '.join(containers)} ignored: the command runs "
              "on this machine, not in a container", file=sys.stderr)
    block = -(-ntasks // nodes)  # tasks per node, filled node by node as srun's block
    procs: list[tuple[int, str, subprocess.Popen[bytes]]] = []
    for task in range(ntasks):
        index = min(task // block, nodes - 1)
        node = names[index % len(names)]
        env = dict(os.environ, SLURM_PROCID=str(task), SLURM_LOCALID=str(task % block),
                   SLURM_NODEID=str(index), SLURMD_NODENAME=node,
                   SLURM_STEP_NUM_TASKS=str(ntasks), SLURM_STEP_NUM_NODES=str(nodes))
        try:
            proc = subprocess.Popen(  # noqa: S603 - the user's argument list, as srun runs it
                command, env=env, stdin=None if task == 0 else subprocess.DEVNULL)
        except OSError as exc:
            print(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}",
                  file=sys.stderr)
            print(f"srun: error: {node}: task {task}: Exited with exit code 2",
                  file=sys.stderr)
            for _t, _n, p in procs:
                p.wait()
            return 2
        procs.append((task, node, proc))
    worst = 0
    for task, node, proc in procs:
        rc = proc.wait()
        code = 128 - rc if rc < 0 else rc
        if code:
            how = (f"Killed by signal {-rc}" if rc < 0 else f"Exited with exit code {code}")
            print(f"srun: error: {node}: task {task}: {how}", file=sys.stderr)
        worst = max(worst, code)
    return worst


if __name__ == "__main__":  # pragma: no cover - run as a script by the fake's PATH
    sys.exit(main())
