"""A persistent job's share of the allocation: what confines the script's own ``srun``.

Under ``bash <script>`` the script's ``#SBATCH`` lines are comments; what its
``srun`` takes comes from the environment the persistent path exports. Without
more than the job id and node list, every ``srun`` of every job takes the whole
allocation (all its GPUs and CPUs): two jobs in one allocation then wait for each
other's turn. :func:`script_env` exports, from the spec's ``slurm_params``:

- ``SLURM_NNODES`` / ``SLURM_JOB_NUM_NODES``: ``nodes``;
- ``SLURM_NTASKS``: ``ntasks`` when given, else ``nodes x ntasks_per_node``
  (``ntasks: 2`` runs 2 ranks in persistent mode as in one-shot);
- ``SLURM_NTASKS_PER_NODE``: ``ntasks_per_node``, or ``ntasks / nodes`` when that
  divides evenly (never a figure that contradicts ``SLURM_NTASKS``);
- ``SLURM_EXACT=1``: a step gets exactly the CPUs (and memory) of its tasks, not
  the rest of the node, so that steps of other jobs fit beside it;
- ``SLURM_GPUS_PER_NODE``: ``gpus_per_node`` when the job asks GPUs; a job that
  asks none takes none;
- ``SLURM_MEM_PER_NODE`` / ``SLURM_MEM_PER_CPU`` / ``SLURM_MEM_PER_GPU``: from the
  script's own ``#SBATCH --mem``, ``--mem-per-cpu``, ``--mem-per-gpu`` lines.

Slurm's step scheduler then places each step on free GPUs (``CUDA_VISIBLE_DEVICES``
per step) and queues it while the allocation is full; srun says so on stderr
(:data:`WAITING_MARKER`), which :class:`QueueWatch` turns into a "waiting for GPUs"
message. The script's own ``srun`` options still win over these variables.

``SLURM_JOB_ID`` is the shared allocation: a script's ``scancel ${SLURM_JOB_ID}``
goes to the ``scancel`` shim (:mod:`slurm_fsm.scancelshim`), which cancels this run's
own steps instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from slurm_fsm.backend import JobInfo
from slurm_fsm.files import FileProblem, read_bounded
from slurm_fsm.scancelshim import ALLOCATION_ENV
from slurm_fsm.slurmcli import sbatch_directives
from slurm_fsm.spec import SlurmParams

__all__ = [
    "STARTED_MARKER",
    "WAITING_MARKER",
    "Placement",
    "QueueWatch",
    "script_env",
    "script_memory",
    "waiting_advice",
]

#: srun's stderr while its step is queued: "srun: Job 7 step creation temporarily
#: disabled, retrying (Requested nodes are busy)"
WAITING_MARKER = "step creation temporarily disabled"
#: srun's stderr once a queued step got its resources: "srun: Step created for job 7"
STARTED_MARKER = "Step created for"

#: ``#SBATCH`` memory option -> the srun input variable that carries it
_MEMORY_VARS = {
    "mem": "SLURM_MEM_PER_NODE",
    "mem-per-cpu": "SLURM_MEM_PER_CPU",
    "mem-per-gpu": "SLURM_MEM_PER_GPU",
}
_MAX_SCRIPT_BYTES = 4 * 1024 * 1024
_MAX_PARTIAL = 4096


@attrs.frozen(kw_only=True)
class Placement:
    """What one job's steps may take of the allocation."""

    nodes: int
    ntasks: int
    ntasks_per_node: int | None
    gpus_per_node: int
    #: srun input variable -> value (``SLURM_MEM_PER_NODE`` -> ``"4G"``)
    memory: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def of(cls, params: SlurmParams, memory: Mapping[str, str] | None = None) -> Placement:
        nodes = int(params.nodes)
        tpn = int(params.ntasks_per_node) if params.ntasks_per_node is not None else None
        if params.ntasks is not None:
            ntasks = int(params.ntasks)
            if tpn is None and ntasks % nodes == 0:
                tpn = ntasks // nodes
        else:
            tpn = tpn or 1
            ntasks = nodes * tpn
        return cls(nodes=nodes, ntasks=ntasks, ntasks_per_node=tpn,
                   gpus_per_node=int(params.gpus_per_node or 0), memory=dict(memory or {}))

    def env(self) -> dict[str, str]:
        """The SLURM_* variables (no job id or node list: see :func:`script_env`)."""
        env = {
            "SLURM_JOB_NUM_NODES": str(self.nodes),
            "SLURM_NNODES": str(self.nodes),
            "SLURM_NTASKS": str(self.ntasks),
            "SLURM_EXACT": "1",
        }
        if self.ntasks_per_node is not None:
            env["SLURM_NTASKS_PER_NODE"] = str(self.ntasks_per_node)
        if self.gpus_per_node:
            env["SLURM_GPUS_PER_NODE"] = str(self.gpus_per_node)
        env.update(self.memory)
        return env


def script_memory(script_path: Path) -> dict[str, str]:
    """The memory the script's own ``#SBATCH`` lines ask, as srun input variables.
    An unreadable script asks nothing here (starting it reports the problem)."""
    try:
        text = read_bounded(script_path, _MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except FileProblem:
        return {}
    directives = sbatch_directives(text)
    return {var: directives[opt] for opt, var in _MEMORY_VARS.items() if directives.get(opt)}


def script_env(info: JobInfo, params: SlurmParams,
               script_path: Path | None = None) -> dict[str, str]:
    """Everything the persistent path exports to ``bash <script>``: the allocation
    (job id, node list), the job's share of it (:class:`Placement`), and
    :data:`~slurm_fsm.scancelshim.ALLOCATION_ENV`, with which the real backend puts the
    ``scancel`` shim first on the script's ``PATH`` (:mod:`slurm_fsm.scancelshim`:
    ``scancel $SLURM_JOB_ID`` cancels this run's steps, never the shared allocation)."""
    memory = script_memory(script_path) if script_path is not None else {}
    return {
        ALLOCATION_ENV: info.job_id,
        "SLURM_JOB_ID": info.job_id,
        "SLURM_JOBID": info.job_id,
        "SLURM_NODELIST": info.nodelist,
        "SLURM_JOB_NODELIST": info.nodelist,
        **Placement.of(params, memory).env(),
    }


def waiting_advice(gpus_per_node: int, allocation_gpus_per_node: int | None = None,
                   allocation_id: str | None = None) -> str:
    """Why a step waits and how to run more jobs at once: the allocation's size (when
    known; else where to read it) and the spec fields that make it bigger."""
    which = f"allocation {allocation_id}" if allocation_id else "the allocation"
    if not gpus_per_node:
        return (f"the other jobs of {which} hold its CPUs; it has the CPUs its first "
                "job's tasks asked for (`slurm-fsm status` shows them)")
    size = (f"{which} has {allocation_gpus_per_node} GPU(s) per node"
            if allocation_gpus_per_node is not None
            else f"{which} is as big as the spec that made it asked "
                 "(`slurm-fsm status` shows its size)")
    return (f"{size} and its other jobs hold them; to run more jobs at once, make it "
            "bigger: alloc_gpus_per_node (and alloc_nodes) in the spec, then release it so "
            "that the next run makes the bigger one (Allocation.run_many sizes a new one "
            "for its batch by itself)")


class QueueWatch:
    """Passes a running script's output lines on, and says when its step is queued
    behind other jobs' steps ("waiting for GPUs") and when it got them."""

    def __init__(self, on_output: Callable[[str], None], on_message: Callable[[str], None],
                 gpus_per_node: int, *, allocation_gpus_per_node: int | None = None,
                 allocation_id: str | None = None) -> None:
        self._on_output = on_output
        self._on_message = on_message
        self._what = (f"GPUs (this job asks {gpus_per_node} per node)" if gpus_per_node
                      else "CPUs (no GPUs asked)")
        self._why = waiting_advice(gpus_per_node, allocation_gpus_per_node, allocation_id)
        self._partial = ""
        self.waiting = False
        #: how many times a step of this job was queued
        self.queued = 0

    def __call__(self, text: str) -> None:
        """New output (any chunk: lines are put together across chunks)."""
        self._on_output(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[-_MAX_PARTIAL:]
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        if WAITING_MARKER in line:
            if not self.waiting:
                self.waiting = True
                self.queued += 1
                self._on_message(
                    f"waiting for {self._what}: {self._why}; the step starts when they "
                    f"are free (srun: {line.strip()})")
        elif STARTED_MARKER in line and self.waiting:
            self.waiting = False
            self._on_message(f"step started after waiting (srun: {line.strip()})")
