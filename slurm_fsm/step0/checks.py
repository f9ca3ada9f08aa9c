"""The pre-flight's questions, and step 1's pre-flight: the time left, the GPU check.

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1): functions of the
:class:`~slurm_fsm.step0.context.Step0Context` and the driver's
:class:`~slurm_fsm.step0.context.Step0Memory`, never of the machine.

* :func:`preflight` is the ``run`` trigger's work: the allocation's time left (from
  the validation's job row: no extra job query) against the job's time limit, a
  warning when it is shorter, then :func:`gpu_check`.
* :func:`gpu_check` asks each node which processes hold its GPUs (``nvidia-smi``
  through the backend; in ``run_many``, a sibling's fresh answer through the shared
  view) and warns of each node's; a node whose GPUs nobody can see is warned about,
  not judged clean. The import and the reuse of a container check too (their GPU
  check is part of the Importing state's time).
* :func:`require` asks the pre-flight's questions of the spec (``sinfo``,
  ``sacctmgr``) once, before anything is cancelled or allocated (0D-0E, the CANCEL
  effect).
* :func:`start_gpu_check` begins the check early in a thread (the caller starts its
  lease step meanwhile); the next :func:`gpu_check` on the same allocation takes its
  answer, or its error, as its own (``mem.gpu_ahead``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from slurm_fsm import sharedview
from slurm_fsm.backend import GpuProcess
from slurm_fsm.nvsmi import NvidiaSmiFailed
from slurm_fsm.preflight import require as preflight_require
from slurm_fsm.state import AllocState
from slurm_fsm.step0.context import Step0Context, Step0Memory, warn
from slurm_fsm.step0.table import State
from slurm_fsm.step0.validate import info_now

__all__ = ["ask_gpus", "gpu_check", "preflight", "require", "start_gpu_check"]


def start_gpu_check(ctx: Step0Context, mem: Step0Memory, state: State) -> None:
    """Begin step 1's GPU check now, in the background, on a Ready allocation (a no-op
    otherwise, or when the job asks no GPU); :func:`gpu_check` takes its answer."""
    alloc = mem.alloc
    if state is not State.Ready or alloc is None or not ctx.spec.slurm_params.gpus_per_node:
        return
    future: Future[list[GpuProcess]] = Future()

    def ask() -> None:
        try:
            future.set_result(ask_gpus(ctx, alloc))
        except BaseException as exc:  # the pre-flight's, as if asked there
            future.set_exception(exc)

    threading.Thread(target=ask, name="slurm_fsm-gpu-check", daemon=True).start()
    mem.gpu_ahead = (alloc.job_id, future)


def gpu_check(ctx: Step0Context, mem: Step0Memory) -> list[GpuProcess]:
    """The GPU processes on the allocation's nodes, each node's warned about (none
    asked when the job asks no GPU)."""
    assert mem.alloc is not None
    if not ctx.spec.slurm_params.gpus_per_node:
        return []  # no GPUs asked: nothing to judge, no srun
    ahead, mem.gpu_ahead = mem.gpu_ahead, None
    try:
        procs = (ahead[1].result() if ahead is not None and ahead[0] == mem.alloc.job_id
                 else ask_gpus(ctx, mem.alloc))
    except NvidiaSmiFailed as exc:  # a node whose GPUs nobody can see is not clean
        procs = exc.processes
        for failure in exc.failures:
            warn(ctx, mem, f"GPU check: {failure.describe()}")
    by_node: dict[str, list[str]] = {}
    for p in procs:
        by_node.setdefault(p.node, []).append(f"{p.pid} {p.name} ({p.used_memory})")
    for node, items in sorted(by_node.items()):
        warn(ctx, mem, f"GPU processes found on {node}: {', '.join(items)}. "
             "These may interfere with the job.")
    return procs


def ask_gpus(ctx: Step0Context, alloc: AllocState) -> list[GpuProcess]:
    """The backend's answer (in ``run_many``, the shared view's: a sibling's fresh one)."""
    view = sharedview.view_of(ctx.backend)
    return (view or ctx.backend).gpu_processes(alloc.job_id, alloc.nodes,
                                               alloc.gpus_per_node)


def preflight(ctx: Step0Context, mem: Step0Memory) -> str:
    """Step 1's pre-flight. Reuses the validation's answer: no extra job query."""
    _, left = info_now(ctx, mem)
    wanted = ctx.spec.slurm_params.time_limit
    if (left is not None and wanted is not None and wanted.is_finite and left.is_finite
            and (left.seconds or 0) < (wanted.seconds or 0)):
        warn(ctx, mem, f"Allocation has {left} left but job expects {wanted}. "
             "The job may be killed early.")
    gpu_check(ctx, mem)
    return f"job started on allocation {mem.alloc.job_id if mem.alloc else '?'}"


def require(ctx: Step0Context, mem: Step0Memory, user: str, warn: Callable[[str], None]) -> None:
    """The pre-flight's questions (``sinfo``, ``sacctmgr``: they change nothing),
    asked once, before anything is cancelled or allocated: a spec the cluster cannot
    run (a misspelt partition) fails here with
    :class:`~slurm_fsm.preflight.PreflightFailed`, and the allocation of the state file
    is left as it was."""
    if mem.required:
        return
    for warning in preflight_require(ctx.spec, ctx.backend, user):
        warn(warning)
    mem.required = True
