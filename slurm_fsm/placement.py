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
- ``SLURM_CPUS_PER_TASK`` and ``SRUN_CPUS_PER_TASK`` (22.05 reads only the second,
  later versions both): the job's CPUs per task (:meth:`Placement.of`):
  ``slurm_params.cpus_per_task`` when given; else the node's CPUs of the allocation
  divided among its tasks when the job asks every GPU of the node or the
  allocation has no GPUs (it has the node to itself), and else a share in
  proportion to its GPUs (1 GPU of 4 on 8 CPUs: 2 CPUs); a job that asks no GPU
  beside GPU jobs gets one CPU per task. Without it, ``SLURM_EXACT=1`` gives a
  1-task step exactly one CPU, which ``task/cgroup`` with ``ConstrainCores=yes``
  enforces (``nproc`` = 1);
- ``SLURM_GPUS_PER_NODE``: ``gpus_per_node`` when the job asks GPUs; a job that
  asks none takes none: ``SLURM_GRES=none`` (else its steps would take every GPU
  of the allocation, see no others' and make GPU jobs wait for them);
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

``SLURM_JOB_ID`` is the shared allocation: a script's ``scancel ${SLURM_JOB_ID}``
goes to the ``scancel`` shim (:mod:`slurm_fsm.scancelshim`), which cancels this run's
own steps instead.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

import attrs

from slurm_fsm import scriptguard
from slurm_fsm.backend import JobInfo, StepInfo
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError
from slurm_fsm.files import FileProblem, read_bounded
from slurm_fsm.jobstate import JobState
from slurm_fsm.scancelshim import ALLOCATION_ENV, SCRIPT_VARS_ENV
from slurm_fsm.slurmcli import sbatch_directives
from slurm_fsm.spec import SlurmParams

__all__ = [
    "PENDING_POLL_S",
    "STARTED_MARKER",
    "WAITING_MARKER",
    "PendingSteps",
    "Placement",
    "QueueWatch",
    "batch_cpu_args",
    "cpu_share",
    "script_env",
    "script_memory",
    "waiting_advice",
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
    #: CPUs per task (:func:`cpu_share`); None: Slurm's default (one)
    cpus_per_task: int | None = None

    @classmethod
    def of(cls, params: SlurmParams, memory: Mapping[str, str] | None = None, *,
           alloc_cpus_per_node: int | None = None,
           alloc_gpus_per_node: int | None = None) -> Placement:
        """The share of ``params``' job in an allocation of ``alloc_cpus_per_node`` CPUs
        and ``alloc_gpus_per_node`` GPUs per node (as granted; None: not known, and no
        CPU share beyond Slurm's default is exported)."""
        nodes = int(params.nodes)
        tpn = int(params.ntasks_per_node) if params.ntasks_per_node is not None else None
        if params.ntasks is not None:
            ntasks = int(params.ntasks)
            if tpn is None and ntasks % nodes == 0:
                tpn = ntasks // nodes
        else:
            tpn = tpn or 1
            ntasks = nodes * tpn
        gpus = int(params.gpus_per_node or 0)
        cpt = cpu_share(params, alloc_cpus_per_node, alloc_gpus_per_node)
        return cls(nodes=nodes, ntasks=ntasks, ntasks_per_node=tpn, gpus_per_node=gpus,
                   memory=dict(memory or {}), cpus_per_task=cpt)

    @property
    def what(self) -> str:
        """What a step of this job waits for when the allocation is full."""
        cpus = (f"{self.cpus_per_task} CPU(s) per task" if self.cpus_per_task
                else "1 CPU per task")
        if self.gpus_per_node:
            return f"GPUs (this job asks {self.gpus_per_node} per node, {cpus})"
        return f"CPUs ({cpus}; no GPU asked)"

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
        else:  # else the step inherits the allocation's GRES: every GPU
            env["SLURM_GRES"] = "none"
        if self.cpus_per_task:
            env["SLURM_CPUS_PER_TASK"] = str(self.cpus_per_task)
            env["SRUN_CPUS_PER_TASK"] = str(self.cpus_per_task)
        env.update(self.memory)
        return env


def _tasks_per_node(params: SlurmParams) -> int:
    if params.ntasks_per_node is not None:
        return int(params.ntasks_per_node)
    if params.ntasks is not None:
        return -(-int(params.ntasks) // int(params.nodes))
    return 1


def cpu_share(params: SlurmParams, alloc_cpus_per_node: int | None,
              alloc_gpus_per_node: int | None) -> int | None:
    """CPUs per task of ``params``' job in the allocation (see the module docstring);
    None when nothing beyond Slurm's one CPU per task is to be asked (the allocation's
    CPUs are not known, or the share is one CPU per task)."""
    if params.cpus_per_task is not None:
        return int(params.cpus_per_task)
    if not alloc_cpus_per_node:
        return None
    tpn = _tasks_per_node(params)
    have = int(alloc_gpus_per_node or 0)
    asks = int(params.gpus_per_node or 0)
    if have == 0 or asks >= have:
        per_node = alloc_cpus_per_node  # the node's CPUs are the job's
    elif asks == 0:
        return None  # beside GPU jobs: one CPU per task
    else:
        per_node = alloc_cpus_per_node * asks // have
    cpt = per_node // tpn
    return cpt if cpt > 1 else None


def batch_cpu_args(params: SlurmParams, script_path: Path) -> tuple[list[str], list[str]]:
    """The one-shot ``sbatch``'s ``--cpus-per-task`` from ``slurm_params.cpus_per_task``,
    and warnings. The script's own ``#SBATCH --cpus-per-task`` (``-c``) wins, as its
    ``--partition`` does (:func:`slurm_fsm.scriptcheck.batch_placement`)."""
    if params.cpus_per_task is None:
        return [], []
    try:
        text = read_bounded(script_path, _MAX_SCRIPT_BYTES).decode("utf-8", "replace")
    except FileProblem:
        text = ""  # starting it reports the problem
    own = sbatch_directives(text).get("cpus-per-task")
    if own:
        warn = ([] if own == str(params.cpus_per_task) else
                [f"the script's own #SBATCH --cpus-per-task={own} is used, not "
                 f"slurm_params.cpus_per_task {params.cpus_per_task} (a script's #SBATCH "
                 "lines win in one-shot mode)"])
        return [], warn
    return [f"--cpus-per-task={params.cpus_per_task}"], []


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
               script_path: Path | None = None, *,
               alloc_cpus_per_node: int | None = None,
               alloc_gpus_per_node: int | None = None) -> dict[str, str]:
    """Everything the persistent path exports to ``bash <script>``: the allocation
    (job id, node list), the job's share of it (:class:`Placement`) in an allocation
    of ``alloc_cpus_per_node`` CPUs and ``alloc_gpus_per_node`` GPUs per node (as
    granted), and :data:`~slurm_fsm.scancelshim.ALLOCATION_ENV`, with which the real
    backend puts the ``scancel`` shim first on the script's ``PATH``
    (:mod:`slurm_fsm.scancelshim`: ``scancel $SLURM_JOB_ID`` cancels this run's steps,
    never the shared allocation)."""
    memory = script_memory(script_path) if script_path is not None else {}
    share = Placement.of(params, memory, alloc_cpus_per_node=alloc_cpus_per_node,
                         alloc_gpus_per_node=alloc_gpus_per_node)
    env = {
        ALLOCATION_ENV: info.job_id,
        "SLURM_JOB_ID": info.job_id,
        "SLURM_JOBID": info.job_id,
        "SLURM_NODELIST": info.nodelist,
        "SLURM_JOB_NODELIST": info.nodelist,
        **share.env(),
    }
    # for this run's steps only: a job the script submits itself (salloc, sbatch) gets
    # none of them (the shims of slurm_fsm.scancelshim unset what this names)
    env[SCRIPT_VARS_ENV] = " ".join(sorted(env))
    return env


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


class PendingSteps:
    """This run's queued steps, as Slurm lists them (``scontrol show step`` has the
    pending step with its srun's host and pid, on 22.05 and 24.11).

    ``listed(newer_than)`` answers the allocation's steps as listed not before
    ``newer_than`` (the clock's time): the run's shared answer
    (:meth:`slurm_fsm.runsteps.RunSteps.listed`, which its steps' marks read too: one
    question per period for both), taken once each srun asked about had settled.
    ``pids`` is the run's live view of its script's processes (``RunSteps.pids``).
    Slurm is asked only while one of those is an ``srun`` not yet seen running a step,
    at most every :data:`PENDING_POLL_S`: a run whose sruns all started asks nothing
    more; and not about an ``srun`` younger than
    ``settle_s``
    (:data:`~slurm_fsm.scriptguard.SRUN_SETTLE_S`): most tiny jobs' are gone by then.
    """

    def __init__(self, listed: Callable[[float], list[StepInfo]], pids: Collection[int],
                 clock: Clock, *, every_s: float = PENDING_POLL_S,
                 is_srun: Callable[[int], bool] = scriptguard.is_step_srun,
                 settle_s: float = scriptguard.SRUN_SETTLE_S) -> None:
        self._listed = listed
        self._pids = pids
        self._clock = clock
        self._every_s = every_s
        self._is_srun = is_srun
        self._settle_s = settle_s
        self._seen: dict[int, float] = {}  # srun pid: when it was first seen
        self._started: set[int] = set()  # srun pids seen running their step
        self._last: float | None = None
        self._pending: list[StepInfo] = []

    def __call__(self) -> list[StepInfo]:
        now = self._clock.now()
        if self._last is not None and now - self._last < self._every_s:
            return self._pending
        sruns = {p for p in list(self._pids) if p not in self._started and self._is_srun(p)}
        for p in sruns:
            self._seen.setdefault(p, now)
        sruns = {p for p in sruns if now - self._seen[p] >= self._settle_s}
        if not sruns:  # none, or only sruns too young to ask about (a tiny job's)
            self._pending = []
            return self._pending
        self._last = now
        try:
            steps = self._listed(max(self._seen[p] for p in sruns) + self._settle_s)
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
                 gpus_per_node: int | Placement, *,
                 allocation_gpus_per_node: int | None = None,
                 allocation_id: str | None = None,
                 pending: Callable[[], list[StepInfo]] | None = None) -> None:
        """``gpus_per_node``: the job's :class:`Placement` (what it waits for), or only
        its GPUs per node; the allocation's GPUs per node and id, when known, make the
        message say its size and how to make it bigger (:func:`waiting_advice`);
        ``pending``: this run's queued steps in Slurm (:class:`PendingSteps`)."""
        self._on_output = on_output
        self._on_message = on_message
        if isinstance(gpus_per_node, Placement):
            self._what = gpus_per_node.what
            gpus = gpus_per_node.gpus_per_node
        else:
            self._what = (f"GPUs (this job asks {gpus_per_node} per node)" if gpus_per_node
                          else "CPUs (no GPU asked)")
            gpus = gpus_per_node
        self._why = waiting_advice(gpus, allocation_gpus_per_node, allocation_id)
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
            f"waiting for {self._what}: {self._why}; the step starts when they are "
            f"free ({why})")

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
