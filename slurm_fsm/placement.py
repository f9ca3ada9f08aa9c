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
per step) and queues it while the allocation is full. :class:`QueueWatch` turns that
into a "waiting for GPUs" message from either of two signs, whichever comes first:

- Slurm lists the queued step itself (22.05 and 24.11, measured): ``scontrol show
  step`` has a ``StepId=<job>.TDB ... State=PENDING ... SrunHost:Pid=<host>:<pid>``
  line, which :class:`PendingSteps` matches to this run's own ``srun`` processes;
- Slurm 22.05's srun says so on stderr (:data:`WAITING_MARKER`); 24.11's srun no longer
  does at its default verbosity (it waits silently).

Both versions print ``Step created for ...`` (:data:`STARTED_MARKER`) only when the
step had to wait, so a wait too short for either sign is still said when it ends. The
script's own ``srun`` options still win over these variables.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

import attrs

from slurm_fsm.backend import JobInfo, SlurmBackend, StepInfo
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError
from slurm_fsm.files import FileProblem, read_bounded
from slurm_fsm.jobstate import JobState
from slurm_fsm.slurmcli import sbatch_directives
from slurm_fsm.spec import SlurmParams

__all__ = [
    "PENDING_POLL_S",
    "STARTED_MARKER",
    "WAITING_MARKER",
    "PendingSteps",
    "Placement",
    "QueueWatch",
    "script_env",
    "script_memory",
]

#: srun's stderr while its step is queued: "srun: Job 7 step creation temporarily
#: disabled, retrying (Requested nodes are busy)"
WAITING_MARKER = "step creation temporarily disabled"
#: srun's stderr once a queued step got its resources: "srun: Step created for job 7"
#: (22.05), "srun: Step created for StepId=7.4" (24.11); printed only after a wait
STARTED_MARKER = "Step created for"
#: How often :class:`PendingSteps` asks Slurm while one of the run's sruns has no step
PENDING_POLL_S = 2.0

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
    (job id, node list) and the job's share of it (:class:`Placement`)."""
    memory = script_memory(script_path) if script_path is not None else {}
    return {
        "SLURM_JOB_ID": info.job_id,
        "SLURM_JOBID": info.job_id,
        "SLURM_NODELIST": info.nodelist,
        "SLURM_JOB_NODELIST": info.nodelist,
        **Placement.of(params, memory).env(),
    }


def _is_srun(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "srun"
    except OSError:
        return False


class PendingSteps:
    """This run's queued steps, as Slurm lists them (``scontrol show step`` has the
    pending step with its srun's host and pid, on 22.05 and 24.11).

    ``pids`` is the run's live view of its script's processes (``RunSteps.pids``). Slurm
    is asked only while one of those is an ``srun`` not yet seen running a step, at most
    every :data:`PENDING_POLL_S`: a run whose sruns all started asks nothing more.
    """

    def __init__(self, backend: SlurmBackend, job_id: str, pids: Collection[int],
                 clock: Clock, *, every_s: float = PENDING_POLL_S,
                 is_srun: Callable[[int], bool] = _is_srun) -> None:
        self._backend = backend
        self._job_id = job_id
        self._pids = pids
        self._clock = clock
        self._every_s = every_s
        self._is_srun = is_srun
        self._started: set[int] = set()  # srun pids seen running their step
        self._last: float | None = None
        self._pending: list[StepInfo] = []

    def __call__(self) -> list[StepInfo]:
        now = self._clock.now()
        if self._last is not None and now - self._last < self._every_s:
            return self._pending
        self._last = now
        sruns = {p for p in list(self._pids) if p not in self._started and self._is_srun(p)}
        if not sruns:
            self._pending = []
            return self._pending
        try:
            steps = self._backend.step_details(self._job_id)
        except BackendError:
            return self._pending  # Slurm did not answer: nothing new to say
        host = socket.gethostname()
        mine = [s for s in steps if s.srun_host == host and s.srun_pid in sruns]
        self._started.update(s.srun_pid for s in mine
                             if s.srun_pid is not None and s.step_id.isdigit())
        self._pending = [s for s in mine if s.state is JobState.PENDING]
        return self._pending


class QueueWatch:
    """Passes a running script's output lines on, and says when its step is queued
    behind other jobs' steps ("waiting for GPUs") and when it got them.

    The signs (see the module's docstring): srun's :data:`WAITING_MARKER` line (22.05),
    a PENDING step of this run in Slurm (``pending``, asked by :meth:`poll`), and
    the :data:`STARTED_MARKER` line srun prints only after a wait (both)."""

    def __init__(self, on_output: Callable[[str], None], on_message: Callable[[str], None],
                 gpus_per_node: int,
                 pending: Callable[[], list[StepInfo]] | None = None) -> None:
        self._on_output = on_output
        self._on_message = on_message
        self._what = (f"GPUs ({gpus_per_node} per node)" if gpus_per_node
                      else "CPUs (no GPUs asked)")
        self._pending = pending
        self._partial = ""
        self.waiting = False
        #: how many times a step of this job was queued
        self.queued = 0

    def poll(self) -> None:
        """Ask ``pending`` (rate-limited there) whether a step of this run is queued."""
        if self._pending is None or self.waiting:
            return
        queued = self._pending()
        if queued:
            step = queued[0]
            self._say_waiting(f"Slurm: step {step.job_id}.{step.step_id} of this run is "
                              f"{step.state}")

    def _say_waiting(self, why: str) -> None:
        self.waiting = True
        self.queued += 1
        self._on_message(
            f"waiting for {self._what}: the allocation's other jobs hold them; "
            f"the step starts when they are free ({why})")

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
                self._say_waiting(f"srun: {line.strip()}")
        elif STARTED_MARKER in line:
            if not self.waiting:  # a wait neither sign caught: srun says it only after one
                self._say_waiting(f"srun waited: {line.strip()}")
            self.waiting = False
            self._on_message(f"step started after waiting (srun: {line.strip()})")
