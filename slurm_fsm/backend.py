"""The boundary between the procedure and Slurm.

``SlurmBackend`` is one small protocol: one method per Slurm operation the
procedure needs. It takes and returns the attrs values of this module, never
raw command-line text, and its failures are the typed errors of
:mod:`slurm_fsm.errors`:

* :class:`~slurm_fsm.errors.JobNotFound` - Slurm does not know the job;
* :class:`~slurm_fsm.errors.ControllerUnreachable` - slurmctld did not answer
  (never "job gone");
* :class:`~slurm_fsm.errors.CommandTimedOut` - a command hit its timeout;
* :class:`~slurm_fsm.errors.CommandFailed` - anything else, with argv, exit
  code and the tail of stderr.

Two implementations ship: :class:`slurm_fsm.subprocess_backend.SubprocessBackend`
(the real Slurm tools) and :class:`slurm_fsm.testing.FakeCluster`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

from slurm_fsm.clock import Clock
from slurm_fsm.duration import Duration
from slurm_fsm.jobstate import JobState, to_job_state

__all__ = [
    "AgentHandle",
    "AgentLauncher",
    "AllocationRequest",
    "BatchRequest",
    "ContainerOptions",
    "GpuProcess",
    "Granted",
    "JobFiles",
    "JobInfo",
    "JobOutcome",
    "LeaseHandle",
    "RunningScript",
    "ScriptRequest",
    "SlurmBackend",
    "StepInfo",
    "StepRequest",
    "StepResult",
    "TaskLister",
    "check_job_id",
    "check_step_id",
    "is_job_id",
    "part_kind",
    "part_of",
    "worst_part",
]

#: A Slurm job id as the tools print it: digits, optionally an array task (``123_4``) or
#: a heterogeneous component (``123+1``). Never a sign, an option, a space or a ``;``.
JOB_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,10}|\+[0-9]{1,5})?")
#: A step id: its number, or one of Slurm's named steps.
STEP_ID = re.compile(r"[0-9]{1,10}|batch|extern|interactive")


#: The largest job id Slurm's tools read: ``squeue -j 2147483648`` (and 4294967295,
#: Slurm's NO_VAL/INFINITE) is "Invalid job id", never a job that is gone (issue 43
#: item 8; measured on 22.05).
MAX_JOB_ID = 2**31 - 1


def is_job_id(text: object) -> bool:
    """True when ``text`` is a Slurm job id (:data:`JOB_ID`, its job number at most
    :data:`MAX_JOB_ID`), safe on a command line."""
    if not isinstance(text, str) or JOB_ID.fullmatch(text) is None:
        return False
    return int(re.split(r"[_+]", text, maxsplit=1)[0]) <= MAX_JOB_ID


#: A part of a job ``N``, as squeue and sacct print it: an array task (``N_3``), the
#: pending rest of an array (``N_[1-2%1]``) or a heterogeneous component (``N+1``).
_PART = re.compile(r"(?P<job>[1-9][0-9]{0,9})(?:_(?:[0-9]{1,10}|\[[^\]]*\])|\+[0-9]{1,5})")


def part_of(part_id: str, job_id: str) -> bool:
    """True when ``part_id`` is an array task (``16_0``, the pending ``16_[1-2]``) or a
    heterogeneous component (``19+1``) of job ``job_id`` (``16``, ``19``)."""
    m = _PART.fullmatch(part_id.strip())
    return m is not None and m.group("job") == str(job_id)


def part_kind(part_id: str) -> str:
    """``array task`` (``16_0``), ``het component`` (``19+1``), or "" (a plain job)."""
    if "+" in part_id:
        return "het component"
    return "array task" if "_" in part_id else ""


def check_job_id(text: str) -> str:
    """``text`` when it is a job id; ValueError otherwise. Every job id that reaches a
    command line (squeue, scancel, srun, sacct, scontrol) passes here first."""
    if not is_job_id(text):
        raise ValueError(f"not a Slurm job id: {text!r}")
    return text


def check_step_id(text: str) -> str:
    """``text`` when it is a step id (number, ``batch``, ``extern``); ValueError otherwise."""
    if not (isinstance(text, str) and STEP_ID.fullmatch(text)):
        raise ValueError(f"not a Slurm step id: {text!r}")
    return text


#: Pending reasons that can never clear for the request as it is (Slurm's job reason
#: codes: the request exceeds a per-job limit of its partition, association or QOS, or
#: names what does not exist). A pending allocation with one of these is cancelled at
#: once instead of waited for. ``PartitionNodeLimit`` can also mean that the nodes
#: the request needs are DOWN or DRAINED: then too it does not start by waiting.
NEVER_STARTS_REASONS = frozenset({
    "PartitionNodeLimit", "PartitionTimeLimit", "AccountNotAllowed", "QOSNotAllowed",
    "BadConstraints", "DependencyNeverSatisfied", "InvalidAccount", "InvalidQOS",
    "AssocMaxNodePerJobLimit", "AssocMaxCpuPerJobLimit", "AssocMaxWallDurationPerJobLimit",
    "AssocMaxMemPerJob", "AssocMaxGRESPerJob", "AssocMaxBillingPerJob",
    "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit", "QOSMaxWallDurationPerJobLimit",
    "QOSMaxMemoryPerJob", "QOSMaxGRESPerJob", "QOSMaxBillingPerJob",
})


@attrs.frozen(kw_only=True)
class JobInfo:
    """One row of ``squeue`` for a job."""

    job_id: str
    #: %T, read by :meth:`JobState.parse` (so it still compares equal to the text)
    state: JobState = attrs.field(converter=to_job_state)
    name: str = ""  # %j
    user: str = ""  # %u
    partition: str = ""  # %P
    num_nodes: int = 0  # %D
    nodelist: str = ""  # %N (compressed form, e.g. n[1-2]); empty while pending
    time_left: Duration = Duration.parse("INVALID")  # %L
    elapsed: Duration = Duration.parse("0:00")  # %M
    reason: str = ""  # %r
    start_time: str = ""  # %S (ISO-like text, or N/A)
    comment: str = ""  # %k; slurm_fsm tags its allocations with their repo root
    #: %V, as squeue prints it (local time, ``2026-12-04T13:44:37``); with the job id
    #: and the tag it names one job: Slurm reuses ids (they wrap at MaxJobId)
    submit_time: str = ""
    #: an array or heterogeneous job: the ids of the parts squeue listed
    #: (:meth:`of_parts`); empty for a plain job
    parts: tuple[str, ...] = ()

    @property
    def is_active(self) -> bool:
        """The job holds (or will hold) resources: :attr:`JobState.is_active`."""
        return self.state.is_active

    @property
    def never_starts(self) -> bool:
        """PENDING for a reason of :data:`NEVER_STARTS_REASONS`: waiting will not help."""
        return self.state is JobState.PENDING and self.reason in NEVER_STARTS_REASONS

    @classmethod
    def of_parts(cls, job_id: str, parts: Sequence[JobInfo]) -> JobInfo:
        """One row for an array or heterogeneous job ``job_id`` from the rows of its
        parts (``squeue -j 16`` lists ``16_0``, ``16_[1-2]``; ``squeue -j 19`` lists
        ``19+0``, ``19+1``, never ``16`` or ``19`` itself): RUNNING while a part runs,
        else the state of the first part that is still active (PENDING, with its reason,
        while one waits), else the first part's; the job is active while any part is."""
        if not parts:
            raise ValueError(f"job {job_id}: no part to make its row of")
        running = [p for p in parts if p.state.is_running]
        active = [p for p in parts if p.state.is_active]
        lead = (running or active or list(parts))[0]
        waiting = next((p for p in parts if p.state.is_pending), None)
        return attrs.evolve(
            lead, job_id=str(job_id),
            reason=waiting.reason if waiting is not None and not running else lead.reason,
            parts=tuple(p.job_id for p in parts))


@attrs.frozen(kw_only=True)
class Granted:
    """What Slurm granted a job (``scontrol show job -d -o``), not what was asked: Slurm
    may give fewer nodes (``--nodes=2 --ntasks=1`` gets one) or more CPUs (whole cores,
    memory) than the request named."""

    job_id: str
    nodes: int  # NumNodes
    nodelist: str  # NodeList (compressed form)
    cpus: int  # NumCPUs: on all nodes together
    #: the fewest CPUs any node of the job has (the per-node lines of ``-d``; without
    #: them NumCPUs spread evenly)
    cpus_per_node: int
    #: the fewest GPUs any node has: ``gres/gpu`` of AllocTRES (TRES before 19.05)
    #: spread over the nodes, 0 without GPUs
    gpus_per_node: int = 0


@attrs.frozen(kw_only=True)
class StepInfo:
    """One step of a job (``squeue -s``)."""

    job_id: str
    step_id: str  # "0", "1", "batch", "extern", ...
    name: str = ""
    state: JobState = attrs.field(default=JobState.RUNNING, converter=to_job_state)
    #: from ``scontrol show step`` (:meth:`SlurmBackend.step_details`) only: where the
    #: step's ``srun`` runs, and what the step holds (``cpu=1,...,gres/gpu=1``)
    srun_host: str = ""
    srun_pid: int | None = None
    tres: str = ""
    nodelist: str = ""
    #: from ``scontrol show step`` only: the step's owner (``UserId``) and its
    #: ``StartTime`` as Slurm prints it (local time, ``2026-12-03T13:08:53``)
    user_id: int | None = None
    start_time: str = ""

    @property
    def gpus(self) -> int | None:
        """The GPUs the step holds, from its TRES (``gres/gpu=2`` or
        ``gres/gpu:a100=2``); None when Slurm did not say."""
        for item in self.tres.split(","):
            key, _, value = item.partition("=")
            if key.startswith("gres/gpu") and value.isdigit():
                return int(value)
        return None

    @property
    def full_id(self) -> str:
        return f"{self.job_id}.{self.step_id}"


@attrs.frozen(kw_only=True)
class AllocationRequest:
    """What the persistent allocation asks for (step 0E)."""

    partition: str
    account: str
    nodes: int
    time_limit: Duration
    job_name: str
    log_path: Path  # <repo_root>/work_dirs/.salloc.log
    gpus_per_node: int | None = None
    user: str = ""
    ntasks_per_node: int | None = None
    ntasks: int | None = None
    #: ``--comment``: which checkout (repo root) the allocation belongs to
    comment: str | None = None
    #: this request's nonce, sent in the comment as ``<comment>;req=<nonce>``
    #: (:func:`slurm_fsm.ownership.request_comment`): after a lost answer the job this
    #: request made is told from another run's. None: the backend picks one.
    nonce: str | None = None
    #: ``--dependency``: ``"singleton"`` for a warm-successor checkout (at most one job
    #: of ``job_name`` of the user runs at once: :mod:`slurm_fsm.successor`)
    dependency: str | None = None
    #: ``--time-min``: backfill may start it sooner with at least this much
    time_min: Duration | None = None


@attrs.frozen(kw_only=True)
class ContainerOptions:
    """pyxis options for one step. ``image`` imports; ``name`` names/reuses.

    ``fresh`` (with ``image``): the container is made anew from ``image`` in this
    step, whatever the nodes hold. pyxis keeps named containers after their job and
    silently reuses one of the same name even for another image, so a backend must
    remove any container of this name on the step's nodes first and make the import
    fail rather than reuse one it missed.
    """

    name: str
    image: str | None = None
    mounts: str = ""  # host:container[:flags],... as pyxis takes it
    writable: bool = False
    workdir: str | None = None
    fresh: bool = False
    #: With ``fresh``: who makes it, ``"<checkout tag> <repo_root>"``. A container of
    #: that name that another checkout made is then neither removed nor reused: the
    #: step fails naming that checkout. Empty: no owner check.
    owner: str = ""

    def __attrs_post_init__(self) -> None:
        if self.fresh and not self.image:
            raise ValueError("ContainerOptions(fresh=True) needs an image to make it from")


@attrs.frozen(kw_only=True)
class StepRequest:
    """A step inside an allocation: ``srun --jobid=ID -N nodes --ntasks-per-node=k``."""

    job_id: str
    argv: tuple[str, ...]
    nodes: int
    ntasks_per_node: int = 1
    container: ContainerOptions | None = None
    timeout_s: float = 600.0
    overlap: bool = False
    chdir: str | None = None
    #: ``--gres=none``: the step takes none of the allocation's GPUs (a helper step)
    no_gpus: bool = False
    #: Run the command at most once per node of this allocation (and container): on
    #: each node it runs under a node-local lock and is skipped (exit 0) when a marker
    #: says that it already succeeded there, e.g. the install of step 0F when two runs
    #: race into one allocation. The text names the work (the same text, the same
    #: marker). None: an ordinary step.
    once: str | None = None


@attrs.frozen
class StepResult:
    """What :meth:`SlurmBackend.run_step` returns: a step's exit code (``128 + N`` when
    killed by signal N) and its captured stdout and stderr (for the machine's own steps:
    the GPU check, the container import, the installs)."""

    exit_code: int
    stdout: str
    stderr: str


@attrs.frozen(kw_only=True)
class GpuProcess:
    """One compute process as ``nvidia-smi --query-compute-apps`` lists it."""

    node: str
    pid: int
    name: str
    used_memory: str  # as printed, e.g. "1024 MiB"


@attrs.frozen(kw_only=True)
class BatchRequest:
    """``sbatch`` of a script (one-shot path, or the pre-step build)."""

    script_path: Path
    work_dir: Path
    job_name: str | None = None
    partition: str | None = None
    account: str | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    user: str = ""


@attrs.frozen(kw_only=True)
class JobOutcome:
    """How a finished job ended, from accounting (or scontrol when it is off)."""

    job_id: str
    #: COMPLETED, FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, ... (parsed)
    state: JobState = attrs.field(converter=to_job_state)
    exit_code: int  # the job's (or batch step's) exit code
    signal: int = 0
    elapsed: Duration = Duration.of_seconds(0)
    max_rss: str = ""
    #: ``max_rss`` in bytes, where it was read (a step's row of ``sacct_steps_argv``)
    max_rss_bytes: int | None = None
    #: the memory a step was given on each of its nodes, in bytes (its ``AllocTRES``
    #: ``mem`` over its ``node`` count): the limit ``OverMemoryKill`` holds it to
    memory_limit: int | None = None
    cancelled_by: str = ""  # uid from "CANCELLED by <uid>"
    source: str = "sacct"  # sacct | scontrol | fake
    steps: tuple[JobOutcome, ...] = ()
    #: an array or heterogeneous job: how each task (``16_0``) or component (``19+1``)
    #: ended, in Slurm's order; the job's own fields are those of :func:`worst_part`
    #: (:meth:`of_parts`). Empty for a plain job.
    parts: tuple[JobOutcome, ...] = ()

    @property
    def exit_status(self) -> int:
        """The exit code as the shell says it: ``128 + signal`` for a job killed by a
        signal (``0:9`` -> 137), else the code."""
        return 128 + self.signal if self.exit_code == 0 and self.signal else self.exit_code

    @classmethod
    def of_parts(cls, job_id: str, parts: Sequence[JobOutcome]) -> JobOutcome:
        """The outcome of an array or heterogeneous job from its parts': the state,
        exit code, signal and ``cancelled_by`` of the worst part (:func:`worst_part`:
        one still active keeps the whole job active), the longest elapsed, the largest
        MaxRSS, every part's steps, and ``parts``."""
        if not parts:
            raise ValueError(f"job {job_id}: no part to make its outcome of")
        worst = worst_part(parts)
        sized = [p.max_rss for p in parts if p.max_rss and _size_of(p.max_rss) >= 0]
        seconds = [p.elapsed.seconds for p in parts if p.elapsed.seconds is not None]
        return cls(job_id=str(job_id), state=worst.state, exit_code=worst.exit_code,
                   signal=worst.signal,
                   elapsed=Duration.of_seconds(max(seconds)) if seconds else worst.elapsed,
                   max_rss=max(sized, key=_size_of) if sized else "",
                   cancelled_by=worst.cancelled_by, source=worst.source,
                   steps=tuple(s for p in parts for s in p.steps), parts=tuple(parts))


#: How bad a part's end is (:func:`worst_part`): the states that decide a report's
#: status by themselves first, then a failure, then a completion.
_PART_RANK = {
    JobState.OUT_OF_MEMORY: 7, JobState.NODE_FAIL: 6, JobState.BOOT_FAIL: 6,
    JobState.TIMEOUT: 5, JobState.DEADLINE: 5, JobState.CANCELLED: 4,
    JobState.PREEMPTED: 4, JobState.REVOKED: 4, JobState.FAILED: 3,
}


def _rank(part: JobOutcome) -> int:
    if part.state.is_active:
        return 9  # not ended: the job has not ended either
    rank = _PART_RANK.get(part.state, 2 if part.state is not JobState.COMPLETED else 0)
    return max(rank, 3) if part.exit_status else rank


def worst_part(parts: Sequence[JobOutcome]) -> JobOutcome:
    """The part that decides an array's or heterogeneous job's outcome: one still
    active (the job has not ended), else OUT_OF_MEMORY, NODE_FAIL / BOOT_FAIL, TIMEOUT /
    DEADLINE, CANCELLED / PREEMPTED / REVOKED, then a non-zero exit or FAILED, then
    COMPLETED; the first in Slurm's order among equals. A task that failed is never
    hidden behind tasks that passed."""
    return max(parts, key=_rank)  # max keeps the first of equal ranks


def _size_of(text: str) -> float:
    """``423048K`` -> bytes; -1 when it is not a size."""
    m = re.match(r"^([\d.]+)([KMGTP]?)$", text.strip())
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
    return float(m.group(1)) * units[m.group(2)] if m else -1.0


@attrs.frozen(kw_only=True)
class JobFiles:
    """Where a batch job writes its stdout and stderr, as Slurm says (``scontrol show
    job``: ``StdOut=``, ``StdErr=``), with sbatch's filename patterns (``%j``, ``%x``,
    ``%u``, ``%N``, ...) expanded. ``stderr`` is ``stdout`` when the job has no
    ``--error`` of its own."""

    job_id: str
    stdout: Path
    stderr: Path
    #: who said so: ``scontrol`` (the controller, until MinJobAge after the job's end),
    #: ``sacct`` (accounting, on a Slurm whose sacct has a ``StdOut`` field), ``fake``
    source: str = "scontrol"
    #: the job has no node yet (pending: no ``BatchHost``), so a ``%N`` in its file
    #: names is not known (Slurm 22.05 shows it as it is): ask again once it has run
    needs_node: bool = False
    #: an array job: each task's own files (``slurm-16_0.out``, ...), the tasks Slurm
    #: has a record of; ``stdout`` / ``stderr`` are then the first task's. Empty for
    #: any other job.
    tasks: tuple[JobFiles, ...] = ()
    #: an array job with tasks not yet started (whose files Slurm does not name yet:
    #: ``scontrol show job`` shows ``%a`` as 4294967294 for them): ask again
    tasks_pending: bool = False


@attrs.frozen(kw_only=True)
class ScriptRequest:
    """``bash <script>`` on this host with the SLURM_* of the allocation exported."""

    script_path: Path
    log_path: Path
    env: Mapping[str, str]
    cwd: Path
    #: where the script's guard writes its exit status once it ends by itself (never
    #: when it is stopped): a rebuild reads it after the owner died
    #: (:meth:`slurm_fsm.runowner.RunFiles.script_status`). None: nowhere.
    status_path: Path | None = None
    #: the guard's secret token (the backend makes one when empty), written into the
    #: run's record before the script starts: a run killed at any moment after leaves a
    #: record that proves what its script detached (:func:`~slurm_fsm.runsteps.stop_leftovers`)
    token: str = ""


class RunningScript(Protocol):
    """A script started by :meth:`SlurmBackend.start_script`."""

    @property
    def log_path(self) -> Path: ...

    def poll(self) -> int | None:
        """Exit code once finished, else None."""
        ...

    def wait_up_to(self, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` for the script to end; its exit code, or None."""
        ...

    def terminate(self) -> None:
        """Stop the local script (its process group)."""
        ...

    @property
    def identity(self) -> dict[str, str | int]:
        """What identifies the running script for :meth:`SlurmBackend.stop_stale_script`
        of a later run (host, pid, process group, start time): JSON-ready."""
        ...


class LeaseHandle(Protocol):
    """A run's lease step, started by :meth:`SlurmBackend.start_lease`: it runs until
    :meth:`stop` or until the process that started it dies (even by ``kill -9``)."""

    @property
    def name(self) -> str:
        """The step's name (``fsm-lease.<run id>.<max_until>``)."""
        ...

    def alive(self) -> bool:
        """Its ``srun`` still runs (no Slurm call)."""
        ...

    def stop(self) -> None:
        """End the step (its ``srun``) and wait for it; stopping twice is harmless."""
        ...


class AgentHandle(Protocol):
    """A detached run's agent step as its starter sees it (its ``srun``), from
    :meth:`AgentLauncher.start_agent`."""

    def alive(self) -> bool:
        """Its ``srun`` still runs (no Slurm call)."""
        ...

    def stderr_text(self) -> str:
        """What ``srun`` (and the agent, before it took its own output) said so far."""
        ...

    def stop(self) -> None:
        """End the agent's step (its ``srun``), and wait for it."""
        ...

    def let_go(self) -> None:
        """Leave the agent's step to itself, once the agent holds the run: end its
        ``srun`` (and anything of it on this host) so that nothing here can end the
        step. A SIGTERM to ``srun`` cancels its step (``srun: forcing job
        termination``): a login session's end, or a CI runner's stop, would otherwise
        end the run it was detached to keep."""
        ...


@runtime_checkable
class AgentLauncher(Protocol):
    """What a backend that can run a detached run's agent inside its allocation has
    besides :class:`SlurmBackend` (:mod:`slurm_fsm.agent`). Optional: where a backend
    has not got it (the fake cluster), the run's supervisor runs the job itself."""

    def start_agent(self, job_id: str, node: str, name: str, argv: Sequence[str],
                    task: bytes) -> AgentHandle:
        """Start ``argv`` as step ``name`` of allocation ``job_id`` on ``node`` (one
        task, no GPU, overlapping), ``task`` on its stdin, in a session of its own: it
        outlives the caller (never tied to its life, unlike a lease). OSError or a
        BackendError when it cannot be started."""
        ...

    def signal_step(self, job_id: str, step_id: str, signal_name: str) -> None:
        """Send signal ``signal_name`` (``TERM``) to the tasks of step ``step_id``."""
        ...


@runtime_checkable
class TaskLister(Protocol):
    """What a backend that can tell a step whose tasks run from one whose task was never
    launched has besides :class:`SlurmBackend` (``sstat``). Optional: where a backend
    has not got it, a lease step is never broken for its owner's silence alone
    (:class:`slurm_fsm.lease.LeaseGate`)."""

    def steps_with_tasks(self, job_id: str) -> set[str]:
        """The ids of ``job_id``'s numbered steps whose tasks run on their nodes. A
        BackendError when it cannot be told."""
        ...


@runtime_checkable
class SlurmBackend(Protocol):
    """Every Slurm operation the procedure needs, and the clock it waits on."""

    @property
    def clock(self) -> Clock:
        """The clock every wait and deadline of this backend uses (the system clock for
        :class:`~slurm_fsm.subprocess_backend.SubprocessBackend`, the fake one for a
        :class:`~slurm_fsm.testing.FakeCluster`). Whoever waits alongside the backend
        (the executor, the machine, the pre-step) defaults to it."""
        ...

    def current_user(self) -> str:
        """The user name Slurm jobs run as."""
        ...

    def query_job(self, job_id: str) -> JobInfo:
        """One job's squeue row. Raises JobNotFound when Slurm has no row."""
        ...

    def find_jobs(self, name: str | None, user: str) -> list[JobInfo]:
        """Jobs of ``user`` named ``name``, or all of ``user``'s jobs when ``name`` is
        None (never all users)."""
        ...

    def granted(self, job_id: str) -> Granted:
        """What Slurm granted a RUNNING job (nodes, CPUs, GPUs). Raises JobNotFound
        when Slurm has no record of it."""
        ...

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        """Start a detached persistent allocation and return its job id.

        The allocation outlives the caller. The id is found by job name and
        user within ``wait_s``; otherwise AllocationFailed with salloc's message.
        """
        ...

    def run_step(self, request: StepRequest) -> StepResult:
        """Run a step in an allocation and wait for it. A non-zero exit is a result."""
        ...

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None = None
                      ) -> list[GpuProcess]:
        """Compute processes on every node of the allocation (host, no container), seen
        by a step holding the allocation's ``gpus_per_node`` GPUs per node."""
        ...

    def probe_gpu_name(self, partition: str, account: str | None = None) -> str | None:
        """The GPU name of one node of ``partition`` (pre-step), or None."""
        ...

    def list_steps(self, job_id: str) -> list[StepInfo]:
        """Every step of a job that ``squeue -s`` lists, with its name (one controller
        call, from any host). Raises JobNotFound when Slurm has no such job."""
        ...

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> LeaseHandle:
        """Start a run's lease step ``name`` in allocation ``job_id`` (one ``srun``,
        tied to this process's life) and return once Slurm lists it. Raises
        JobNotFound when the allocation is gone, another BackendError when the step
        did not start within ``timeout_s``."""
        ...

    def step_details(self, job_id: str) -> list[StepInfo]:
        """The numbered steps of a job with the host and pid of the ``srun`` that started
        each and what each holds (``scontrol show step``); ``[]`` when it has none."""
        ...

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        """scancel a job, or only one of its steps. A gone job is not an error."""
        ...

    def submit(self, request: BatchRequest) -> str:
        """sbatch a script; return the job id."""
        ...

    def job_outcome(self, job_id: str) -> JobOutcome:
        """How a finished job ended. Raises JobNotFound when no source knows it."""
        ...

    def job_files(self, job_id: str) -> JobFiles:
        """Where a batch job writes its stdout and stderr (:class:`JobFiles`). Raises
        JobNotFound when no source says (the controller has forgotten the job and
        accounting has no such field)."""
        ...

    def step_outcomes(self, job_id: str, step_ids: Sequence[str]) -> list[JobOutcome]:
        """How the steps ``step_ids`` of ``job_id`` ended, as accounting says (``sacct
        -j ID.3,ID.4``): one :class:`JobOutcome` per step it has a row for (``job_id``
        ``ID.3``; a step not yet in accounting, or still running, may be missing or not
        final: ask again). Raises a BackendError when accounting does not answer
        (JobNotFound when it is off)."""
        ...

    def has_container_support(self) -> bool:
        """True when srun takes pyxis' ``--container-image``."""
        ...

    def expand_nodelist(self, nodelist: str) -> list[str]:
        """``n[1-3]`` -> ``["n1", "n2", "n3"]``."""
        ...

    def start_script(self, request: ScriptRequest) -> RunningScript:
        """Start ``bash <script>`` locally, output to ``request.log_path``; it ends with
        the orchestrator where the platform allows (Linux: ``PR_SET_PDEATHSIG``)."""
        ...

    def stop_stale_script(self, identity: Mapping[str, object]) -> str | None:
        """Stop what is left of a script of an earlier run that died, given its
        :attr:`RunningScript.identity`, after checking that it is that very script
        (never a process that merely reuses its pid). What was stopped, or None."""
        ...


