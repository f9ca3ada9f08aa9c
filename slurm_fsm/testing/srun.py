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

GPUs: a step that asks GPUs (``--gpus-per-node`` or ``SLURM_GPUS_PER_NODE``, unless
``--gres=none``) takes them from the cluster's GPU ledger (``SLURM_FSM_FAKE_GPU_DIR``:
one file per node and GPU, made with ``O_EXCL``, naming the holder; a dead holder's
file is taken over), all or none. While they are taken by other steps it waits, saying
so as srun does (``srun: Job N step creation temporarily disabled, retrying
(Requested nodes are busy)``, then ``srun: Step created for job N``); each task gets
``CUDA_VISIBLE_DEVICES`` (its node's GPU indices, as Slurm with ``task/none``).

Standard library only: it runs as ``python -I -S srun.py ARGS`` (no site-packages).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
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


def _holder(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_take(ledger: str, nodes: Sequence[str], gpus: int, total: int, job: str,
              ) -> dict[str, list[int]] | None:
    """Take ``gpus`` GPUs on each of ``nodes`` (all or none): their indices per node."""
    taken: dict[str, list[int]] = {n: [] for n in nodes}
    made: list[str] = []
    for node in nodes:
        for i in range(total):
            if len(taken[node]) == gpus:
                break
            path = os.path.join(ledger, f"{node}.gpu{i}")
            holder = _holder(path)
            if holder is not None and not _alive(holder):
                with contextlib.suppress(OSError):
                    os.unlink(path)  # a dead step's GPU
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(f"{os.getpid()} {job}\n")
            made.append(path)
            taken[node].append(i)
        if len(taken[node]) < gpus:
            _release(made)
            return None
    return taken


def _release(paths: Sequence[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _note_tasks(ledger: str, taken: dict[str, list[int]], pids: Sequence[int]) -> None:
    """Name the tasks' pids in the ledger (the fake's GPU pre-flight knows them as ours)."""
    for node, indices in taken.items():
        for i in indices:
            with contextlib.suppress(OSError), \
                    open(os.path.join(ledger, f"{node}.gpu{i}"), "a", encoding="ascii") as fh:
                fh.write(" ".join(str(p) for p in pids) + "\n")


def _take_gpus(opts: dict[str, str | None], nodes: Sequence[str]) -> dict[str, list[int]] | None:
    """The GPUs of this step, waited for; None when it asks none."""
    if opts.get("--gres") == "none":
        return None
    gpus = _int(opts, "--gpus-per-node")
    if gpus is None:
        gpus = _env_int("SLURM_GPUS_PER_NODE", 0)
    ledger = os.environ.get("SLURM_FSM_FAKE_GPU_DIR", "")
    if gpus <= 0 or not ledger:
        return None
    total = _env_int("SLURM_FSM_FAKE_GPUS_PER_NODE", 8)
    job = os.environ.get("SLURM_JOB_ID", "?")
    if gpus > total:
        print(f"srun: error: Unable to create step for job {job}: Requested node "
              "configuration is not available", file=sys.stderr)
        raise SystemExit(1)
    waited = False
    while True:
        taken = _try_take(ledger, nodes, gpus, total, job)
        if taken is not None:
            if waited:
                print(f"srun: Step created for job {job}", file=sys.stderr, flush=True)
            return taken
        if not waited:
            print(f"srun: Job {job} step creation temporarily disabled, retrying "
                  "(Requested nodes are busy)", file=sys.stderr, flush=True)
            waited = True
        time.sleep(0.05)


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
    step_nodes = [names[i % len(names)] for i in range(nodes)]
    # stopped (scancel of the step, the script's end): give the GPUs back on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    gpus = _take_gpus(opts, step_nodes)
    try:
        return _run_tasks(command, step_nodes, ntasks, gpus)
    finally:
        if gpus is not None:
            ledger = os.environ["SLURM_FSM_FAKE_GPU_DIR"]
            _release([os.path.join(ledger, f"{n}.gpu{i}") for n, idx in gpus.items()
                      for i in idx])


def _run_tasks(command: Sequence[str], step_nodes: Sequence[str], ntasks: int,
               gpus: dict[str, list[int]] | None) -> int:
    nodes = len(step_nodes)
    block = -(-ntasks // nodes)  # tasks per node, filled node by node as srun's block
    procs: list[tuple[int, str, subprocess.Popen[bytes]]] = []
    for task in range(ntasks):
        index = min(task // block, nodes - 1)
        node = step_nodes[index]
        env = dict(os.environ, SLURM_PROCID=str(task), SLURM_LOCALID=str(task % block),
                   SLURM_NODEID=str(index), SLURMD_NODENAME=node,
                   SLURM_STEP_NUM_TASKS=str(ntasks), SLURM_STEP_NUM_NODES=str(nodes))
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus[node])
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
    if gpus is not None:
        _note_tasks(os.environ["SLURM_FSM_FAKE_GPU_DIR"], gpus, [p.pid for _t, _n, p in procs])
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
