"""An in-memory Slurm cluster implementing :class:`~slurm_fsm.backend.SlurmBackend`.

It is public API: test your own orchestrator against it. It has partitions,
accounts, a user, nodes with GPU processes, a controllable clock (allocations
expire, ``%L`` shrinks), jobs and steps with real Slurm state names, pyxis
named containers per node, job-name lookup, fault injection and a record of
every call::

    fake = FakeCluster()
    fake.script("job.slurm", FakeScript(lines=["3 passed in 1.0s"]))
    fake.fail_next("query_job", ControllerUnreachable("down"), times=2)
    fake.clock.advance(3600)            # allocations age
    fake.ops()                          # ["current_user", "find_jobs", "allocate", ...]
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal as signals
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import hostlist

from slurm_fsm import files
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    GpuProcess,
    Granted,
    JobFiles,
    JobInfo,
    JobOutcome,
    ScriptRequest,
    StepInfo,
    StepRequest,
    StepResult,
    check_job_id,
    check_step_id,
    part_of,
)
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    CommandFailed,
    ControllerUnreachable,
    FileProblem,
    JobNotFound,
)
from slurm_fsm.jobstate import JobState, to_job_state
from slurm_fsm.ownership import made_by, new_nonce, request_comment
from slurm_fsm.preflight import ClusterPartition, enforces_associations
from slurm_fsm.pyxissite import PyxisSite
from slurm_fsm.scriptguard import stop_group
from slurm_fsm.slurmcli import (
    IMAGE_EXPORT,
    IMAGE_EXPORT_LINE,
    ONCE_SKIPPED,
    SETUP_KEY_FILE,
    SETUP_KEY_LINE,
    SETUP_KEY_READ,
    SETUP_KEY_WRITE,
    array_task_ids,
    batch_kind,
    enroot_image,
    expand_output_pattern,
    foreign_container_message,
    sbatch_directives,
)

__all__ = [
    "Call",
    "FakeClock",
    "FakeCluster",
    "FakeContainer",
    "FakeJob",
    "FakeNode",
    "FakeScript",
    "StepRule",
]

#: Operations that talk to the controller (a down controller fails them).
CONTROLLER_OPS = frozenset({
    "query_job", "find_jobs", "allocate", "run_step", "gpu_processes", "probe_gpu_name",
    "list_steps", "step_details", "start_lease", "cancel", "submit", "job_outcome", "granted",
    "job_files", "steps_with_tasks",
    "cluster_partitions", "accounting_enforce", "def_cpu_per_gpu",
})

#: Operations that stand for a Slurm command of the real backend (``sacctmgr`` and
#: ``sacct`` reach slurmdbd, not the controller): what the demo counts. Not
#: ``current_user`` (no command) nor ``start_script`` (the job's own ``bash``).
SLURM_COMMAND_OPS = CONTROLLER_OPS | {"user_associations", "step_outcomes",
                                      "has_container_support", "pyxis_site"}


def _het_blocks(text: str) -> list[dict[str, str]]:
    """The ``#SBATCH`` options of each component of a heterogeneous job's script (the
    lines between ``#SBATCH hetjob`` separators); later components inherit nothing."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line and not line.startswith("#"):
            break
        if re.match(r"^#SBATCH\s+(?:hetjob|packjob)\s*$", line.strip()):
            blocks.append([])
        else:
            blocks[-1].append(line)
    return [sbatch_directives("\n".join(b)) for b in blocks]


def _relay_prefix(node: str, when: float | None = None) -> str:
    """What srun puts before an ``error:`` line slurmstepd logged on ``node``: Slurm
    22.05 and 24.11 name the node (``slurmstepd-n1: error: ``); with ``when`` (a Unix
    time), 26.05's form: the time slurmstepd logged it (``[2026-12-06T18:00:24.403]
    error: ``, UTC here), no node."""
    if when is None:
        return f"slurmstepd-{node}: error: "
    stamp = datetime.fromtimestamp(when, UTC)
    return f"[{stamp.strftime('%Y-%m-%dT%H:%M:%S')}.{stamp.microsecond // 1000:03d}] error: "


def _pyxis_failure(nodes: list[str], lines: list[str], child_rc: int | None = 1,
                   when: float | None = None) -> StepResult:
    """A step pyxis did not start: its lines per node, as srun prints them (relayed in
    26.05's form when ``when`` is given, :func:`_relay_prefix`)."""
    out = []
    for i, n in enumerate(nodes):
        relay = _relay_prefix(n, when)
        if child_rc is not None:
            out.append(f"{relay}pyxis: child {4000 + i} failed with error code: {child_rc}")
        out += [f"{relay}{line}" for line in lines]
        out += [f"{relay}spank: required plugin spank_pyxis.so: task_init() "
                "failed with rc=-1",
                f"{relay}Failed to invoke spank plugin stack",
                f"srun: error: {n}: task {i}: Exited with exit code 1"]
    return StepResult(1, "", "\n".join(out) + "\n")


#: What pyxis relays of enroot's log for each :attr:`FakeCluster.enroot_fault`, as the
#: real outputs of pyxis issues 12 and 53 word it (tests/data/real/round3/pyxis/).
_ENROOT_FAULTS: dict[str, list[str]] = {
    "runtime_dir": [
        "pyxis: failed to import docker image",
        "pyxis: printing contents of log file ...",
        "pyxis:     mkdir: cannot create directory '/run/enroot': Permission denied",
    ],
    "disk_full": [
        "pyxis: failed to import docker image",
        "pyxis: printing contents of log file ...",
        "pyxis:     [INFO] Querying registry for permission grant",
        "pyxis:     [INFO] Authentication succeeded",
        "pyxis:     [INFO] Creating squashfs filesystem...",
        "pyxis:     Write failed because No space left on device",
        "pyxis:     FATAL ERROR:Failed to write to output filesystem",
    ],
}


class FakeClock:
    """A clock that only moves when told to (``sleep`` moves it at once)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds


class _WallClock(FakeClock):
    """The clock of a cluster that runs scripts for real: real time (``sleep`` sleeps),
    which a test can still move forward with :meth:`advance` (allocations age)."""

    def __init__(self) -> None:
        super().__init__(time.monotonic())
        self._skew = 0.0

    def now(self) -> float:
        return time.monotonic() + self._skew

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds > 0:
            time.sleep(seconds)

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._skew += seconds


@attrs.define
class FakeContainer:
    image: str
    packages: list[str] = attrs.field(factory=list)  # what writable installs left
    owner: str = ""  # the owner mark of a fresh import: "<checkout tag> <repo_root>"
    done: set[str] = attrs.field(factory=set)  # markers of the ``once`` steps done in it
    #: the setup key a finished install wrote in it (slurmcli.SETUP_KEY_FILE); "" none
    setup_key: str = ""
    #: the job that made it: under ``container_scope=job`` it goes with that job
    job_id: str = ""


#: The key of the fake's squashfs (a cache entry the export step wrote: JSON of the
#: container): a container made from such a file holds its packages and setup key.
FAKE_SQUASHFS = "slurm_fsm-fake-squashfs"


def _made_from(c: ContainerOptions, job_id: str) -> FakeContainer:
    """The container pyxis makes from ``c.image``: an image, or a squashfs the export
    step wrote (with what was installed in it)."""
    made = FakeContainer(c.image or "", owner=c.owner if c.fresh else "", job_id=job_id)
    if c.image is not None and c.image.startswith("/"):
        try:
            with open(c.image, "rb") as fh:
                head = fh.read(2)
                data = json.loads(head + fh.read(1 << 20)) if head == b'{"' else {}
        except (OSError, ValueError):
            data = {}
        if isinstance(data, dict) and data.get(FAKE_SQUASHFS) == 1:
            made.packages = list(data.get("packages", []))
            made.setup_key = str(data.get("setup_key", ""))
    return made


@attrs.define
class FakeNode:
    name: str
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    gpu_processes: list[tuple[int, str, str]] = attrs.field(factory=list)  # pid, name, memory
    containers: dict[str, FakeContainer] = attrs.field(factory=dict)
    done: set[str] = attrs.field(factory=set)  # markers of ``once`` steps on the host


@attrs.frozen
class FakeScript:
    """What a script does on the fake cluster.

    ``lines`` are written to the log one per ``line_interval_s`` seconds of fake
    time; then the script exits with ``exit_code`` (``hang=True``: it never
    exits on its own). ``final_state`` overrides the batch job's end state
    (e.g. ``OUT_OF_MEMORY``).
    """

    lines: tuple[str, ...] = ("ok",)
    exit_code: int = 0
    line_interval_s: float = 1.0
    hang: bool = False
    err_lines: tuple[str, ...] = ()
    final_state: JobState | str | None = None
    #: an array job: what task N does when it differs from this (``{1: FakeScript(
    #: exit_code=1)}``)
    tasks: Mapping[int, FakeScript] = attrs.field(factory=dict)

    @property
    def duration_s(self) -> float:
        return len(self.lines) * self.line_interval_s


@attrs.frozen
class StepRule:
    """Make steps whose command contains ``match`` end with ``result``."""

    match: str
    result: StepResult
    times: int | None = None  # None: every time


@attrs.define
class FakeJob:
    job_id: str
    name: str
    user: str
    partition: str
    account: str
    num_nodes: int
    nodes: list[str]
    time_limit_s: int | None
    submitted_at: float
    kind: str  # "alloc" | "batch"
    pending_until: float
    started_at: float | None = None
    ended_at: float | None = None
    state: JobState = attrs.field(default=JobState.PENDING, converter=to_job_state)
    exit_code: int = 0
    signal: int = 0
    reason: str = "None"
    steps: dict[str, StepInfo] = attrs.field(factory=dict)
    next_step: int = 0
    script: FakeScript | None = None
    out_path: Path | None = None
    err_path: Path | None = None
    #: the script's ``--output`` and ``--error`` as written (``%j``, ``%x``, ...)
    out_pattern: str = ""
    err_pattern: str = ""
    work_dir: Path = Path()
    written: int = 0
    cancelled_by: str = ""
    comment: str = ""
    #: the batch script's process, when the cluster runs scripts (``run_scripts=True``)
    process: subprocess.Popen[bytes] | None = None
    #: what each node of the job was granted (one CPU per task asked, as CR_Core gives)
    cpus_per_node: int = 1
    gpus_per_node: int = 0
    #: accounting's rows of the numbered steps that ended (and when each ended)
    ended_steps: dict[str, tuple[JobOutcome, float]] = attrs.field(factory=dict)
    #: ``--dependency`` as asked (``"singleton"`` is honoured)
    dependency: str = ""
    #: a het job's component other than 0: the component whose script it ends with
    follows: str = ""

    @property
    def active(self) -> bool:
        return self.ended_at is None

    def end_step(self, step_id: str, state: JobState | str, *, at: float, exit_code: int = 0,
                 signal: int = 0, by: str = "", max_rss: int | None = None,
                 memory_limit: int | None = None) -> None:
        """Step ``step_id`` ends (it leaves :attr:`steps`; accounting keeps its row, with
        ``max_rss`` and the ``memory_limit`` per node in bytes when given)."""
        self.steps.pop(step_id, None)
        if step_id.isdigit() and step_id not in self.ended_steps:
            self.ended_steps[step_id] = (JobOutcome(
                job_id=f"{self.job_id}.{step_id}", state=state, exit_code=exit_code,
                signal=signal, cancelled_by=by,
                max_rss=f"{max_rss >> 10}K" if max_rss is not None else "",
                max_rss_bytes=max_rss, memory_limit=memory_limit), at)


@attrs.frozen
class Call:
    op: str
    args: Mapping[str, Any]


class _FakeRunningScript:
    """A persistent-path script on the fake cluster (implements RunningScript)."""

    def __init__(self, cluster: FakeCluster, request: ScriptRequest, script: FakeScript,
                 job_id: str, step_id: str) -> None:
        self.cluster = cluster
        self._log_path = request.log_path
        self.script = script
        self.job_id = job_id
        self.step_id = step_id
        self.started = cluster.clock.now()
        self.written = 0
        self.exit_code: int | None = None
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        request.log_path.write_text("", encoding="utf-8")

    @property
    def log_path(self) -> Path:
        return self._log_path

    def _write_due(self) -> None:
        due = self.script.lines
        if self.script.line_interval_s > 0:
            n = int((self.cluster.clock.now() - self.started) / self.script.line_interval_s) + 1
            due = due[: max(0, min(len(due), n))]
        if len(due) > self.written:
            with open(self._log_path, "a", encoding="utf-8") as fh:
                for line in due[self.written:]:
                    fh.write(line + "\n")
            self.written = len(due)

    def poll(self) -> int | None:
        if self.exit_code is not None:
            return self.exit_code
        self._write_due()
        job = self.cluster.jobs.get(self.job_id)
        if job is not None:
            self.cluster._tick()
        if job is None or not job.active or self.step_id not in job.steps:
            # the step was cancelled (scancel ID.STEP), killed for memory (srun says
            # 137), or the allocation ended
            ended = job.ended_steps.get(self.step_id) if job is not None else None
            oom = ended is not None and (ended[0].state is JobState.OUT_OF_MEMORY
                                         or ended[0].memory_limit is not None)
            self.exit_code = 137 if oom else 143
            if job is not None:
                job.steps.pop(self.step_id, None)
            return self.exit_code
        done = (not self.script.hang and self.written >= len(self.script.lines)
                and self.cluster.clock.now() - self.started >= self.script.duration_s)
        if done:
            code = self.exit_code = self.script.exit_code
            state = self.script.final_state or (JobState.COMPLETED if code == 0
                                                else JobState.FAILED)
            job.end_step(self.step_id, state, at=self.cluster.clock.now(),
                         exit_code=code if code < 128 else 0,
                         signal=code - 128 if code > 128 else 0)
        return self.exit_code

    def wait_up_to(self, timeout_s: float) -> int | None:
        """Sleep on the fake clock until the script ends or ``timeout_s`` passed."""
        code = self.poll()
        if code is not None:
            return code
        self.cluster.clock.sleep(timeout_s)
        return self.poll()

    @property
    def identity(self) -> dict[str, str | int]:
        return {"fake_job": self.job_id, "fake_step": self.step_id}

    def terminate(self) -> None:
        if self.exit_code is None:
            self.exit_code = 128 + 15  # killed by SIGTERM, as the shell says it
            job = self.cluster.jobs.get(self.job_id)
            if job is not None:
                job.end_step(self.step_id, JobState.CANCELLED, at=self.cluster.clock.now(),
                             signal=15, by=self.cluster.uid)


class _LocalFakeScript:
    """A persistent-path script a ``run_scripts=True`` cluster runs for real: a
    :class:`~slurm_fsm.subprocess_backend.LocalScript` that is also a step of the fake
    allocation (cancelling the step or ending the allocation stops it)."""

    def __init__(self, cluster: FakeCluster, local: Any, job_id: str, step_id: str) -> None:
        self.cluster = cluster
        self._local = local
        self.job_id = job_id
        self.step_id = step_id
        self.exit_code: int | None = None

    @property
    def log_path(self) -> Path:
        path: Path = self._local.log_path
        return path

    @property
    def identity(self) -> dict[str, str | int]:
        identity: dict[str, str | int] = self._local.identity
        return identity

    def _end(self, code: int) -> int:
        self.exit_code = code
        job = self.cluster.jobs.get(self.job_id)
        if job is not None:
            job.end_step(self.step_id, JobState.COMPLETED if code == 0 else JobState.FAILED,
                         at=self.cluster.clock.now(), exit_code=code if code < 128 else 0,
                         signal=code - 128 if code > 128 else 0)
        return code

    def poll(self) -> int | None:
        if self.exit_code is not None:
            return self.exit_code
        code: int | None = self._local.poll()
        if code is not None:
            return self._end(code)
        self.cluster._tick()
        job = self.cluster.jobs.get(self.job_id)
        if job is None or not job.active or self.step_id not in job.steps:
            self._local.terminate(grace_s=2.0)  # the step was cancelled or the job ended
            return self._end(128 + signals.SIGTERM)
        return None

    def wait_up_to(self, timeout_s: float) -> int | None:
        code = self.poll()
        if code is not None:
            return code
        self._local.wait_up_to(timeout_s)
        return self.poll()

    def terminate(self) -> None:
        """Stop the script (as :meth:`LocalScript.terminate`: its group and what it
        detached from it, even once it has ended); its step ends with it."""
        self._local.terminate(grace_s=2.0)
        if self.exit_code is None:
            self._end(self._local.poll() or 128 + signals.SIGTERM)


class _FakeLease:
    """A run's lease step on the fake cluster (implements
    :class:`~slurm_fsm.backend.LeaseHandle`): a step named for the run, gone when
    stopped, when its job ends, or when :meth:`FakeCluster.lease_owner_dies`."""

    def __init__(self, cluster: FakeCluster, job_id: str, step_id: str, name: str) -> None:
        self.cluster = cluster
        self.job_id = job_id
        self.step_id = step_id
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def alive(self) -> bool:
        job = self.cluster.jobs.get(self.job_id)
        return job is not None and job.active and self.step_id in job.steps

    def stop(self) -> None:
        job = self.cluster.jobs.get(self.job_id)
        if job is not None:
            job.steps.pop(self.step_id, None)


#: How the ``srun`` on a script's PATH starts (``{python}`` and ``{shim}`` shell-quoted).
_SRUN_WRAPPER = '#!/bin/bash\nexec {python} -I -S {shim} "$@"\n'


class FakeCluster:
    """An in-memory Slurm. Every backend call is recorded in :attr:`calls`.

    By default a job script does not run: what it does is a :class:`FakeScript`
    (``ok`` unless told otherwise, see :meth:`script`). With ``run_scripts=True`` the
    scripts run for real on this machine (the persistent path's ``bash <script>`` and
    the one-shot path's batch script), with the job's ``SLURM_*`` exported,
    ``SLURM_FSM_FAKE_NODES`` naming the allocated fake nodes and an ``srun`` first on
    ``PATH`` that runs its command here once per task (:mod:`slurm_fsm.testing.srun`);
    the clock is then real time (``clock.advance`` still ages allocations). Steps the
    machine itself runs (:meth:`run_step`: the GPU pre-flight, container setup) stay
    simulated. ``slurm-fsm run --backend fake`` uses this mode.

    With ``preflight=True`` it answers the pre-flight questions
    (:class:`slurm_fsm.preflight.ClusterQueries`: its partitions, all up, with
    ``gpus_per_node`` GPUs and ``cpus_per_node`` CPUs per node, its accounts, its
    :attr:`default_cpus_per_gpu`), so a wrong partition, account or node count is caught before
    ``salloc`` as on a real cluster; by default it answers nothing and only its
    ``salloc`` refuses them.

    ``relay_timestamps = True``: srun relays slurmstepd's error lines as Slurm 26.05
    does, with the time they were logged (``[2026-12-06T18:00:24.403] error: ``),
    instead of 22.05's and 24.11's ``slurmstepd-<node>: error: ``.
    """

    #: The next this many allocates make their job, then lose the answer (raise
    #: ControllerUnreachable "Socket timed out"), as salloc does when the reply to a
    #: granted request is lost.
    lose_allocate_answers: int = 0
    #: srun relays slurmstepd's error lines as Slurm 26.05 does (class docstring)
    relay_timestamps: bool = False
    #: a fault of the nodes that enroot meets when it imports an image (issue 41, the
    #: lines of pyxis issues 12 and 53): ``"runtime_dir"`` (it cannot create
    #: /run/enroot), ``"disk_full"`` (No space left on device); None: none
    enroot_fault: str | None = None
    #: ``DefCpuPerGPU`` (``JobDefaults``): an allocation that asks GPUs gets at least
    #: that many CPUs per GPU, as Slurm grants it (measured on 22.05); None: not set
    default_cpus_per_gpu: int | None = None
    #: pyxis' ``container_scope``: ``"global"`` (its default: a named container outlives
    #: its job on the node) or ``"job"`` (it goes with its job: the next job of the
    #: node starts without it)
    container_scope: str = "global"

    def __init__(
        self,
        partitions: Mapping[str, Iterable[str]] | None = None,
        accounts: Iterable[str] = ("acct",),
        user: str = "tester",
        clock: FakeClock | None = None,
        *,
        pyxis: bool = True,
        accounting: bool = True,
        first_job_id: int = 100,
        pending_s: float = 0.0,
        min_job_age_s: float = 300.0,
        path_exists: Callable[[str], bool] | None = None,
        registry: bool = True,
        pending_reason: str | None = None,
        run_scripts: bool = False,
        preflight: bool = False,
        gpus_per_node: int = 8,
        cpus_per_node: int | None = None,
    ) -> None:
        parts = partitions or {"batch": ["node01", "node02", "node03", "node04"]}
        self.partitions: dict[str, list[str]] = {k: list(v) for k, v in parts.items()}
        self.nodes: dict[str, FakeNode] = {
            n: FakeNode(n) for names in self.partitions.values() for n in names
        }
        self.accounts = set(accounts)
        self.user = user
        #: run job scripts for real on this machine (see the class docstring)
        self.run_scripts = run_scripts
        #: answer the pre-flight questions (see the class docstring)
        self.preflight = preflight
        #: ``AccountingStorageEnforce``: without ``associations``, an account that is
        #: not one of :attr:`accounts` runs (under the default account), as in Slurm
        self.enforce = "associations,limits,qos"
        self.clock = clock or (_WallClock() if run_scripts else FakeClock())
        self.pyxis = pyxis
        #: whether a host path (image file, mount source) exists on the nodes
        self.path_exists: Callable[[str], bool] = path_exists or (lambda _path: True)
        #: whether registry images (not starting with / or .) can be fetched
        self.registry = registry
        self.accounting = accounting
        #: seconds after a step (or an array's last task) ends before accounting has its row
        self.accounting_lag_s = 0.0
        #: the uid this user's ``scancel`` is recorded with (``CANCELLED by <uid>``)
        self.uid = str(os.getuid())
        self.pending_s = pending_s
        self.pending_reason = pending_reason  # the reason new allocations pend with
        self.min_job_age_s = min_job_age_s
        self._books(first_job_id)
        #: GPUs of every node (a script's real ``srun`` takes them from a ledger, waiting
        #: while taken: :meth:`gpus_in_use`); CPUs of every node as sinfo says (None: not)
        self.gpus_per_node, self.cpus_per_node = gpus_per_node, cpus_per_node

    def _books(self, first_job_id: int) -> None:
        """What the cluster keeps: its jobs, the calls made, the faults, scripts and
        step rules asked for, what runs."""
        self.jobs: dict[str, FakeJob] = {}
        self.calls: list[Call] = []
        self.controller_up = True
        self._ids = itertools.count(first_job_id)
        self._faults: dict[str, list[BaseException]] = {}
        self._scripts: dict[str, FakeScript] = {}
        self._step_rules: list[StepRule] = []
        self._running: list[_FakeRunningScript | _LocalFakeScript] = []
        #: steps made without a task (:meth:`step_without_task`): nothing of theirs ends them
        self._taskless: set[str] = set()
        self._bin: Path | None = None  # the srun shim's folder (run_scripts=True)

    # ---------------------------------------------------------------- test controls
    def fail_next(self, op: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``op`` raise ``error``."""
        self._faults.setdefault(op, []).extend([error] * times)

    def controller_down(self) -> None:
        """Every controller operation raises ControllerUnreachable until ``controller_up``."""
        self.controller_up = False

    def bring_controller_up(self) -> None:
        self.controller_up = True

    def script(self, path: str | Path, behaviour: FakeScript) -> None:
        """What the script at ``path`` (or any path ending with that name) does."""
        self._scripts[str(path)] = behaviour

    def on_step(self, match: str, result: StepResult, times: int | None = None) -> None:
        """Steps whose command line contains ``match`` end with ``result``."""
        self._step_rules.append(StepRule(match, result, times))

    def cancel_step(self, job_id: str, step_id: str, by: str = "0") -> None:
        """Someone else cancels step ``job_id.step_id`` (``scancel ID.STEP`` by uid
        ``by``): accounting says ``CANCELLED by <by>``, its srun exits 143."""
        self.jobs[job_id].end_step(step_id, JobState.CANCELLED, at=self.clock.now(),
                                   signal=9, by=by)

    def memory_kill_step(self, job_id: str, step_id: str, max_rss_mb: int = 413,
                         limit_mb: int = 100) -> None:
        """slurmstepd kills step ``job_id.step_id`` past its memory limit
        (``OverMemoryKill``, no memory cgroup): accounting says ``CANCELLED by 0`` with a
        ``MaxRSS`` of ``max_rss_mb`` and the step's ``limit_mb`` per node; its srun exits
        137. The log line slurmstepd may print is the script's to write."""
        self.jobs[job_id].end_step(step_id, JobState.CANCELLED, at=self.clock.now(),
                                   signal=9, by="0", max_rss=max_rss_mb << 20,
                                   memory_limit=limit_mb << 20)

    def time_limit_step(self, job_id: str, step_id: str) -> None:
        """Slurm ends step ``job_id.step_id`` at its own time limit (``srun --time``):
        accounting says TIMEOUT (in ``sacct -j ALLOC.N`` and, a batch job's step, among
        ``sacct -j JOB``'s rows), its srun exits 143. slurmstepd's ``*** STEP ... DUE TO
        TIME LIMIT ***`` line and the script's exit code are the script's to give."""
        self.jobs[job_id].end_step(step_id, JobState.TIMEOUT, at=self.clock.now(),
                                   signal=15)

    def oom_step(self, job_id: str, step_id: str) -> None:
        """The kernel kills step ``job_id.step_id`` for memory: accounting says
        OUT_OF_MEMORY (``0:125``), its srun exits 137."""
        self.jobs[job_id].end_step(step_id, JobState.OUT_OF_MEMORY, at=self.clock.now(),
                                   signal=125)

    def add_gpu_process(self, node: str, pid: int, name: str, memory: str = "1024 MiB") -> None:
        self.nodes[node].gpu_processes.append((pid, name, memory))

    def ops(self) -> list[str]:
        """The operations called, in order."""
        return [c.op for c in self.calls]

    def count(self, op: str) -> int:
        return sum(1 for c in self.calls if c.op == op)

    def reset_calls(self) -> None:
        self.calls.clear()

    def active_jobs(self) -> list[FakeJob]:
        self._tick()
        return [j for j in self.jobs.values() if j.active]

    def make_job(self, name: str, user: str, *, partition: str | None = None,
                 nodes: int = 1, time_limit_s: int | None = 3600,
                 state: JobState | str = JobState.RUNNING,
                 account: str = "acct", comment: str = "", cpus_per_node: int = 1,
                 gpus_per_node: int = 0, job_id: str | None = None) -> FakeJob:
        """Put a job on the cluster directly (someone else's, an orphan, ...).
        ``job_id``: reuse that id (Slurm's ids wrap): the job of that id, ended, is
        replaced, as Slurm forgets it."""
        part = partition or next(iter(self.partitions))
        if job_id is not None and job_id in self.jobs:
            self._finish(self.jobs[job_id], JobState.COMPLETED)
        job = FakeJob(
            job_id=job_id or str(next(self._ids)), name=name, user=user, partition=part,
            account=account, num_nodes=nodes, nodes=self.partitions[part][:nodes],
            time_limit_s=time_limit_s, submitted_at=self.clock.now(), kind="alloc",
            pending_until=self.clock.now(), state=state,
            started_at=self.clock.now() if state == JobState.RUNNING else None, comment=comment,
            cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node,
        )
        self.jobs[job.job_id] = job
        return job

    def end_job(self, job_id: str, state: JobState | str = JobState.CANCELLED, exit_code: int = 0,
                signal: int = 0) -> None:
        """End a job behind the orchestrator's back (scancel by someone, node failure);
        ``signal``: accounting's ``ExitCode`` is ``exit_code:signal``."""
        job = self.jobs[job_id]
        self._finish(job, state, exit_code, signal)

    # ------------------------------------------------------------------ internals
    def _call(self, op: str, **args: Any) -> None:
        self.calls.append(Call(op, args))
        # like SubprocessBackend: a job id that is not one never reaches a "command line"
        if args.get("job_id") is not None:
            check_job_id(args["job_id"])
        if args.get("step_id") is not None:
            check_step_id(args["step_id"])
        if op == "run_step":
            check_job_id(args["request"].job_id)
        queued = self._faults.get(op)
        if queued:
            raise queued.pop(0)
        if op in CONTROLLER_OPS and not self.controller_up:
            raise ControllerUnreachable(
                f"{op}: Unable to contact slurm controller (connect failure)"
            )
        self._tick()

    def _finish(self, job: FakeJob, state: JobState | str, exit_code: int = 0,
                signal: int = 0) -> None:
        if job.ended_at is not None:
            return
        self._stop_process(job)
        job.state = JobState.parse(state)
        job.exit_code = exit_code
        job.signal = signal
        job.ended_at = self.clock.now()
        if job.started_at is None:
            job.started_at = job.ended_at
        job.steps.clear()

    def _tick(self) -> None:
        now = self.clock.now()
        for job in self.jobs.values():
            if not job.active:
                continue
            if job.state is JobState.PENDING and now >= job.pending_until:
                if self._singleton_blocked(job):
                    job.reason = "Dependency"
                    continue
                job.state = JobState.RUNNING
                job.started_at = (self._freed_at(job) if job.dependency == "singleton"
                                  else job.pending_until)
                job.reason = "None"
            if job.state is not JobState.RUNNING or job.started_at is None:
                continue
            leader = self.jobs.get(job.follows) if job.follows else None
            if leader is not None:  # a het component: it ends with component 0
                if not leader.active:
                    self._finish(job, leader.state, leader.exit_code, leader.signal)
                    job.ended_at = leader.ended_at
                continue
            if job.time_limit_s is not None and now >= job.started_at + job.time_limit_s:
                if job.kind == "batch":
                    self._write_batch_output(job, job.started_at + job.time_limit_s)
                self._finish(job, JobState.TIMEOUT, 0, 0)
                job.ended_at = job.started_at + job.time_limit_s
                continue
            if job.process is not None:
                rc = job.process.poll()
                if rc is not None:
                    self._finish(job, JobState.COMPLETED if rc == 0 else JobState.FAILED,
                                 max(rc, 0), -rc if rc < 0 else 0)
                continue
            if job.kind == "batch" and job.script is not None:
                self._write_batch_output(job, now)
                s = job.script
                if not s.hang and now >= job.started_at + s.duration_s:
                    self._write_batch_err(job)
                    state = s.final_state or (JobState.COMPLETED if s.exit_code == 0
                                              else JobState.FAILED)
                    self._finish(job, state, s.exit_code)
                    job.ended_at = job.started_at + s.duration_s

    def _singleton_blocked(self, job: FakeJob) -> bool:
        """``--dependency=singleton``: another job of the same name and user runs (or is
        suspended), so this one waits, as Slurm makes it (reason ``Dependency``)."""
        if job.dependency != "singleton":
            return False
        return any(other is not job and other.name == job.name and other.user == job.user
                   and other.state in (JobState.RUNNING, JobState.SUSPENDED)
                   for other in self.jobs.values())

    def _freed_at(self, job: FakeJob) -> float:
        """When the last job that held ``job`` back by singleton ended (no earlier
        than its own queue wait)."""
        ends = [other.ended_at for other in self.jobs.values()
                if other is not job and other.name == job.name and other.user == job.user
                and other.ended_at is not None]
        return max([job.pending_until, *ends])

    def _write_batch_output(self, job: FakeJob, upto: float) -> None:
        if job.script is None or job.out_path is None or job.started_at is None:
            return
        lines = job.script.lines
        if job.script.line_interval_s > 0:
            n = int((upto - job.started_at) / job.script.line_interval_s) + 1
            lines = lines[: max(0, min(len(lines), n))]
        if len(lines) > job.written:
            with open(job.out_path, "a", encoding="utf-8") as fh:
                for line in lines[job.written:]:
                    fh.write(line + "\n")
            job.written = len(lines)

    def _write_batch_err(self, job: FakeJob) -> None:
        if job.script is None or not job.script.err_lines or job.err_path is None:
            return
        with open(job.err_path, "a", encoding="utf-8") as fh:
            for line in job.script.err_lines:
                fh.write(line + "\n")

    def _info(self, job: FakeJob) -> JobInfo:
        now = self.clock.now()
        left: Duration
        if job.time_limit_s is None:
            left = Duration.parse("UNLIMITED")
        elif job.started_at is None:
            left = Duration.of_seconds(job.time_limit_s)
        else:
            left = Duration.of_seconds(max(0, int(job.time_limit_s - (now - job.started_at))))
        elapsed = Duration.of_seconds(int(now - job.started_at)) if job.started_at else \
            Duration.of_seconds(0)
        running = job.state is not JobState.PENDING
        return JobInfo(
            job_id=job.job_id, state=job.state, name=job.name, user=job.user,
            partition=job.partition, num_nodes=job.num_nodes,
            nodelist=hostlist.collect_hostlist(job.nodes) if running else "",
            time_left=left, elapsed=elapsed,
            reason=job.reason if job.state is JobState.PENDING else "None",
            start_time="N/A", comment=job.comment,
            submit_time=datetime.fromtimestamp(job.submitted_at).strftime("%Y-%m-%dT%H:%M:%S"),
        )

    def _job(self, job_id: str) -> FakeJob:
        job = self.jobs.get(job_id.split(".")[0])
        if job is None or not job.active:
            raise JobNotFound(job_id, "slurm_load_jobs error: Invalid job id specified")
        return job

    def _srun_bin(self) -> Path:
        """A folder holding the ``srun`` shim (made once per cluster, removed with it)."""
        if self._bin is None:
            from slurm_fsm.testing import srun as shim

            folder = Path(tempfile.mkdtemp(prefix="slurm_fsm-fake-bin-"))
            weakref.finalize(self, shutil.rmtree, str(folder), True)
            wrapper = folder / "srun"
            wrapper.write_text(_SRUN_WRAPPER.format(python=shlex.quote(sys.executable),
                                                    shim=shlex.quote(str(shim.__file__))),
                               encoding="utf-8")
            wrapper.chmod(0o755)
            self._bin = folder
        return self._bin

    def _gpu_ledger(self) -> Path:
        """The GPU ledger of the scripts' ``srun`` (``<node>.gpu<i>`` per GPU taken)."""
        ledger = self._srun_bin() / "gpus"
        ledger.mkdir(exist_ok=True)
        return ledger

    def gpus_in_use(self) -> dict[str, dict[int, str]]:
        """``{node: {GPU index: job id}}`` of the GPUs that steps of scripts hold now."""
        out: dict[str, dict[int, str]] = {}
        if self._bin is None:
            return out
        for f in sorted(self._gpu_ledger().iterdir()):
            node, _, index = f.name.rpartition(".gpu")
            with contextlib.suppress(OSError, ValueError, IndexError):
                out.setdefault(node, {})[int(index)] = f.read_text().split()[1]
        return out

    def _our_pids(self, job_id: str) -> set[int]:
        """The pids of the steps of ``job_id`` that hold GPUs (srun and its tasks)."""
        pids: set[int] = set()
        if self._bin is None:
            return pids
        for f in self._gpu_ledger().iterdir():
            with contextlib.suppress(OSError):
                words = f.read_text().split()
                if len(words) > 1 and words[1] == job_id:
                    pids.update(int(w) for w in words if w.isdigit())
        return pids

    def _script_env(self, job: FakeJob, env: Mapping[str, str]) -> dict[str, str]:
        """What a script of ``job`` run for real gets on top of the caller's SLURM_*."""
        path = os.environ.get("PATH", os.defpath)
        return {"SLURM_FSM_FAKE_NODES": " ".join(job.nodes), **env,
                "SLURM_FSM_FAKE_GPU_DIR": str(self._gpu_ledger()),
                "SLURM_FSM_FAKE_GPUS_PER_NODE": str(self.gpus_per_node),
                "PATH": f"{self._srun_bin()}{os.pathsep}{path}"}

    def srun_env(self, job_id: str) -> dict[str, str]:
        """The environment in which a command run here (``srun ...``) is a step of
        ``job_id``, as for a script of that job (with ``run_scripts=True``)."""
        job = self._job(job_id)
        return self._script_env(job, {**os.environ, "SLURM_JOB_ID": job_id,
                                      "SLURM_JOB_NUM_NODES": str(len(job.nodes))})

    def _script_for(self, path: Path) -> FakeScript:
        key = str(path)
        if key in self._scripts:
            return self._scripts[key]
        for k, v in self._scripts.items():
            if key.endswith("/" + k) or Path(k).name == path.name:
                return v
        return FakeScript()

    # ------------------------------------------------------------- SlurmBackend
    def current_user(self) -> str:
        self.calls.append(Call("current_user", {}))
        return self.user

    def query_job(self, job_id: str) -> JobInfo:
        """squeue: the job's row; an array's or het job's made of its active parts'
        (:meth:`JobInfo.of_parts`), as squeue lists only those."""
        self._call("query_job", job_id=job_id)
        parts = [p for p in self._parts(job_id) if p.active]
        if job_id not in self.jobs and parts:
            return JobInfo.of_parts(job_id, [self._info(p) for p in parts])
        return self._info(self._job(job_id))

    def find_jobs(self, name: str | None, user: str) -> list[JobInfo]:
        self._call("find_jobs", name=name, user=user)
        return [self._info(j) for j in self.jobs.values()
                if j.active and (name is None or j.name == name) and j.user == user]

    def granted(self, job_id: str) -> Granted:
        self._call("granted", job_id=job_id)
        job = self._job(job_id)
        if job.state is JobState.PENDING:
            raise ValueError(f"job {job_id} is PENDING: nothing granted yet")
        return Granted(job_id=job.job_id, nodes=job.num_nodes,
                       nodelist=hostlist.collect_hostlist(job.nodes),
                       cpus=job.num_nodes * job.cpus_per_node, cpus_per_node=job.cpus_per_node,
                       gpus_per_node=job.gpus_per_node)

    def cluster_partitions(self) -> list[ClusterPartition]:
        """The declared partitions, all up, each node with ``gpus_per_node`` GPUs
        (``sinfo``); none unless ``preflight=True``."""
        if not self.preflight:
            return []
        self._call("cluster_partitions")
        cpus = self.cpus_per_node
        return [ClusterPartition(name=name, state="up", nodes=len(nodes),
                                 gpus_per_node=(self.gpus_per_node,) * len(nodes),
                                 cpus_per_node=(cpus,) * len(nodes) if cpus else ())
                for name, nodes in self.partitions.items()]

    def def_cpu_per_gpu(self, partition: str) -> int | None:
        """:attr:`default_cpus_per_gpu` (``scontrol show partition``/``config``); None
        unless ``preflight=True``."""
        if not self.preflight:
            return None
        self._call("def_cpu_per_gpu", partition=partition)
        return self.default_cpus_per_gpu

    def accounting_enforce(self) -> str | None:
        """:attr:`enforce` (``scontrol show config``); None unless ``preflight=True``."""
        if not self.preflight:
            return None
        self._call("accounting_enforce")
        return self.enforce

    def user_associations(self, user: str) -> list[tuple[str, str]] | None:
        """The declared accounts, for any partition (``sacctmgr show assoc``); None
        unless ``preflight=True``."""
        if not self.preflight:
            return None
        self._call("user_associations", user=user)
        return [(a, "") for a in sorted(self.accounts)] or None

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        """A job with the comment ``<tag>;req=<nonce>``. As
        :meth:`SubprocessBackend.allocate` does, a live job that this request's nonce
        made (its answer lost: :attr:`lose_allocate_answers`) is adopted, never a second
        one made. (The subprocess backend also adopts any live job of the name and
        checkout; the machine's orphan search leaves none in the fake's tests.)"""
        self._call("allocate", request=request)
        if request.comment and request.nonce is None:
            request = attrs.evolve(request, nonce=new_nonce())
        if request.comment and request.nonce:
            own = sorted((j for j in self.jobs.values()
                          if j.name == request.job_name and j.state.is_live
                          and made_by(self._info(j), user=self.user, tag=request.comment,
                                      nonce=request.nonce)),
                         key=lambda j: (len(j.job_id), j.job_id))
            if own:
                return own[0].job_id
        log = request.log_path
        log.parent.mkdir(parents=True, exist_ok=True)
        _write_salloc_log(log, "")  # as the subprocess backend: never through a link
        error = self._request_error(request.partition, request.account, request.nodes, "salloc")
        if error:
            _write_salloc_log(log, error)
            raise AllocationFailed(["salloc"], 1, error,
                                   "salloc did not create an allocation")
        # as salloc does: --nodes=2 --ntasks=1 "can't run 1 processes on 2 nodes, setting
        # nnodes to 1"; one CPU per task of a node
        nodes = min(request.nodes, request.ntasks) if request.ntasks else request.nodes
        tpn = request.ntasks_per_node or (-(-request.ntasks // nodes) if request.ntasks else 1)
        if request.gpus_per_node and self.default_cpus_per_gpu:  # Slurm's floor per GPU
            tpn = max(tpn, request.gpus_per_node * self.default_cpus_per_gpu)
        job = FakeJob(
            job_id=str(next(self._ids)), name=request.job_name, user=self.user,
            partition=request.partition, account=request.account, num_nodes=nodes,
            nodes=self.partitions[request.partition][:nodes],
            cpus_per_node=tpn, gpus_per_node=request.gpus_per_node or 0,
            time_limit_s=request.time_limit.seconds, submitted_at=self.clock.now(),
            kind="alloc", pending_until=self.clock.now() + self.pending_s,
            reason=(self.pending_reason or "Resources") if self.pending_s else "None",
            comment=request_comment(request.comment, request.nonce) if request.comment else "",
            dependency=request.dependency or "",
        )
        self.jobs[job.job_id] = job
        if self.lose_allocate_answers > 0:
            self.lose_allocate_answers -= 1
            raise ControllerUnreachable(
                "salloc: error: Socket timed out on send/recv operation (the answer for "
                f"job {job.job_id} was lost)")
        _write_salloc_log(log, f"salloc: Pending job allocation {job.job_id}\n"
                          f"salloc: job {job.job_id} queued and waiting for resources\n")
        return job.job_id

    def _request_error(self, partition: str | None, account: str | None, nodes: int,
                       tool: str) -> str:
        if partition is not None and partition not in self.partitions:
            return (f"{tool}: error: invalid partition specified: {partition}\n"
                    f"{tool}: error: Job submit/allocate failed: Invalid partition name "
                    "specified\n")
        if account is not None and account not in self.accounts and \
                enforces_associations(self.enforce):
            return (f"{tool}: error: Job submit/allocate failed: Invalid account or "
                    "account/partition combination specified\n")
        if partition is not None and nodes > len(self.partitions[partition]):
            return (f"{tool}: error: Job submit/allocate failed: Requested node "
                    "configuration is not available\n")
        return ""

    def run_step(self, request: StepRequest) -> StepResult:
        self._call("run_step", request=request)
        job = self._job(request.job_id)
        if job.state is not JobState.RUNNING:
            return StepResult(1, "", f"srun: error: Unable to create step for job {job.job_id}")
        if request.nodes > job.num_nodes or request.ntasks_per_node > job.cpus_per_node:
            return StepResult(1, "", "srun: error: Unable to create step for job "
                              f"{job.job_id}: More processors requested than permitted")
        nodes = job.nodes[: request.nodes]
        command = shlex.join(request.argv)
        if (ruled := self._step_rule(command)) is not None:
            return ruled
        c = request.container
        self._scope_containers(job.job_id)
        if c is None and request.argv[3:4] == (IMAGE_EXPORT,):
            return self._export_step(request, nodes[0])
        if c is not None:
            if not self.pyxis:
                return StepResult(255, "", "srun: unrecognized option "
                                  f"'--container-image={c.image or c.name}'")
            failed = self._pyxis_step(c, nodes, job.job_id)
            if failed is not None:
                return failed
        # a ``once`` step: under each node's lock, skipped where its marker is
        holders = ([self.nodes[n].containers[c.name] if c is not None else self.nodes[n]
                    for n in nodes] if request.once is not None else [])
        once_key = "\0".join((request.job_id, request.chdir or "", request.once or ""))
        if holders and all(once_key in h.done for h in holders):
            job.next_step += 1
            return StepResult(0, "", "".join(f"{ONCE_SKIPPED} {command}\n" for _ in nodes))
        if c is not None and request.argv[3:4] in ((SETUP_KEY_READ,), (SETUP_KEY_WRITE,)):
            return self._setup_key_step(request, c, nodes)
        if c is not None and request.argv[:2] == ("pip", "install"):
            if not c.writable:
                return StepResult(1, "", "".join(
                    f"ERROR: Could not install packages due to an OSError: [Errno 30] "
                    f"Read-only file system: '/usr/local/lib'\n"
                    f"srun: error: {n}: task {i}: Exited with exit code 1\n"
                    for i, n in enumerate(nodes)))
            for n in nodes:
                self.nodes[n].containers[c.name].packages.append(command)
        for holder in holders:
            holder.done.add(once_key)
        out = ""
        if request.argv and request.argv[0] == "hostname":
            out = "".join(f"{n}\n" for n in nodes)
        job.next_step += 1  # every srun makes a step, as in Slurm
        return StepResult(0, out, "")

    def _step_rule(self, command: str) -> StepResult | None:
        """The result of the first :meth:`on_step` rule ``command`` matches (one use of
        it), or None."""
        for idx, rule in enumerate(self._step_rules):
            if rule.match in command and rule.times != 0:
                if rule.times is not None:
                    self._step_rules[idx] = attrs.evolve(rule, times=rule.times - 1)
                return rule.result
        return None

    def _setup_key_step(self, request: StepRequest, c: ContainerOptions,
                        nodes: list[str]) -> StepResult:
        """The steps of :func:`~slurm_fsm.slurmcli.setup_key_read_argv` and
        :func:`~slurm_fsm.slurmcli.setup_key_write_argv` in each node's container: the
        key file lives in the container (a fresh import starts without it)."""
        job = self._job(request.job_id)
        job.next_step += 1
        held = [self.nodes[n].containers[c.name] for n in nodes]
        if request.argv[3] == SETUP_KEY_WRITE:
            if not c.writable:
                return StepResult(1, "", "".join(
                    f"sh: can't create {SETUP_KEY_FILE}.1: Read-only file system\n"
                    for _ in nodes))
            for container in held:
                container.setup_key = request.argv[-1]
            return StepResult(0, "", "")
        return StepResult(0, "".join(
            f"{SETUP_KEY_LINE} {n} {container.setup_key or '-'}\n"
            for n, container in zip(nodes, held, strict=True)), "")

    def _scope_containers(self, job_id: str) -> None:
        """``container_scope=job``: a container of another job is gone (pyxis removes
        it at its job's end)."""
        if self.container_scope != "job":
            return
        for node in self.nodes.values():
            for name in [n for n, c in node.containers.items() if c.job_id != job_id]:
                del node.containers[name]

    def _export_step(self, request: StepRequest, node: str) -> StepResult:
        """The step of :func:`~slurm_fsm.slurmcli.image_export_argv` on ``node``: the
        named container (its packages and setup key) written to the cache entry, a file
        of this machine (the fake's squashfs: :data:`FAKE_SQUASHFS`), aside and renamed;
        an entry there already is left as it is."""
        self._job(request.job_id).next_step += 1
        folder, key = Path(request.argv[4]), request.argv[5]
        out = folder / f"{key}.sqsh"
        if out.is_file() and out.stat().st_size > 0:
            return StepResult(0, f"{IMAGE_EXPORT_LINE} {node} present {out}\n", "")
        name = request.argv[-2].removeprefix("pyxis_")
        held = self.nodes[node].containers.get(name)
        if held is None:
            return StepResult(4, "", f"slurm_fsm: none of the containers "
                              f"{' '.join(request.argv[6:])} is on {node}: nothing to export\n")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.sqsh.{node}.{os.getpid()}"
        tmp.write_text(json.dumps({FAKE_SQUASHFS: 1, "image": held.image,
                                   "packages": held.packages, "setup_key": held.setup_key}))
        tmp.replace(out)
        return StepResult(0, f"{IMAGE_EXPORT_LINE} {node} exported {out}\n", "")

    def _relay_when(self) -> float | None:
        """The time a relayed line carries (:attr:`relay_timestamps`), else None."""
        return self.clock.now() if self.relay_timestamps else None

    def _pyxis_step(self, c: ContainerOptions, nodes: list[str], job_id: str
                    ) -> StepResult | None:
        """What pyxis does with a step's container options on each node, as measured on
        pyxis 0.24 / enroot 4.1 (tests/integration/test_parity.py runs both): named
        containers per node that outlive the job; a name that exists is reused even for
        another image (rc 0); ``fresh`` is the backend's removal plus ``NAME:create``;
        image files must exist, other images come from a registry; mount sources must
        exist (the container is made before the mounts fail). None: the step starts."""
        if c.image is not None and c.image.startswith(("/", ".")) \
                and not self.path_exists(c.image):
            return _pyxis_failure(nodes, [
                f"pyxis: failed to create container filesystem for image: {c.image}",
                "pyxis: printing enroot log file:",
                f"pyxis:     [ERROR] No such file or directory: {c.image}",
            ], when=self._relay_when())
        if c.image is not None and not c.image.startswith(("/", ".")) and not self.registry:
            image = enroot_image(c.image)
            host = image.split("#")[0] if "#" in image else "registry-1.docker.io"
            return _pyxis_failure(nodes, [
                f"pyxis: failed to import docker image: {image}",
                "pyxis: printing enroot log file:",
                "pyxis:     [INFO] Querying registry for permission grant",
                f"pyxis:     curl: (6) Could not resolve host: {host}",
            ], child_rc=6, when=self._relay_when())
        if c.image is not None and self.enroot_fault is not None:
            return _pyxis_failure(nodes, _ENROOT_FAULTS[self.enroot_fault],
                                  when=self._relay_when())
        for n in nodes:  # SubprocessBackend's removal refuses another checkout's
            old = self.nodes[n].containers.get(c.name)
            if (c.fresh and c.owner and old is not None and old.owner
                    and old.owner.split(" ")[0] != c.owner.split(" ")[0]):
                return StepResult(3, "", foreign_container_message(
                    c.name, n, f"pyxis_{c.name}", old.owner) + "\n")
        for n in nodes:
            node = self.nodes[n]
            if c.fresh:
                node.containers.pop(c.name, None)  # SubprocessBackend's enroot remove
            if c.image is not None and c.name not in node.containers:
                node.containers[c.name] = _made_from(c, job_id)
            elif c.name not in node.containers:
                return _pyxis_failure(nodes, [
                    f'pyxis: error: a container with name "pyxis_{c.name}" does not exist, '
                    "and --container-image is not set",
                ], child_rc=None, when=self._relay_when())
        for mount in filter(None, c.mounts.split(",")):
            source = mount.split(":")[0]
            if not self.path_exists(source):
                return _pyxis_failure(nodes, [
                    f"pyxis: --container-mounts: source path does not exist: {source}",
                    "pyxis: couldn't create enroot start configuration script",
                ], child_rc=None, when=self._relay_when())
        return None

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None = None
                      ) -> list[GpuProcess]:
        self._call("gpu_processes", job_id=job_id, nodes=nodes, gpus_per_node=gpus_per_node)
        job = self._job(job_id)
        ours = self._our_pids(job_id)  # the allocation's own jobs are not intruders
        return [GpuProcess(node=n, pid=pid, name=name, used_memory=mem)
                for n in job.nodes[:nodes] for pid, name, mem in self.nodes[n].gpu_processes
                if pid not in ours]

    def probe_gpu_name(self, partition: str, account: str | None = None) -> str | None:
        self._call("probe_gpu_name", partition=partition, account=account)
        names = self.partitions.get(partition)
        if not names:
            raise CommandFailed(["srun", "-p", partition], 1,
                                f"srun: error: invalid partition specified: {partition}")
        return self.nodes[names[0]].gpu_name

    def list_steps(self, job_id: str) -> list[StepInfo]:
        self._call("list_steps", job_id=job_id)
        job = self._job(job_id)
        for r in self._running:
            r.poll()
        return list(job.steps.values())

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> _FakeLease:
        """A run's lease step ``name``: one step of the job (a ``srun``, counted as
        one by :meth:`count`), until stopped or :meth:`lease_owner_dies`."""
        self._call("start_lease", job_id=job_id, name=name)
        return _FakeLease(self, job_id, self._new_step(job_id, name), name)

    def _new_step(self, job_id: str, name: str) -> str:
        """A RUNNING step ``name`` of running job ``job_id`` (JobNotFound, as srun's
        error, when the job does not run); its step id."""
        job = self._job(job_id)
        if job.state is not JobState.RUNNING:
            raise JobNotFound(job_id, f"srun: error: Unable to create step for job {job_id}")
        step_id = str(job.next_step)
        job.next_step += 1
        job.steps[step_id] = StepInfo(job_id=job_id, step_id=step_id, name=name,
                                     state=JobState.RUNNING)
        return step_id

    def lease_owner_dies(self, run_id: str) -> list[str]:
        """The orchestrator of run ``run_id`` is killed (``kill -9``): its lease step
        ends, as Slurm's does a fraction of a second later. The steps ended."""
        gone: list[str] = []
        for job in self.jobs.values():
            for sid, step in list(job.steps.items()):
                if step.full_id in self._taskless:
                    continue  # no task, no srun: nothing of its owner's ends it
                if step.name.startswith(f"fsm-lease.{run_id}."):
                    del job.steps[sid]
                    gone.append(step.full_id)
        return gone

    def step_without_task(self, job_id: str, name: str) -> str:
        """A step ``name`` of ``job_id`` that slurmctld made but whose task never ran: its
        ``srun`` (and the host it ran on) died between the step's creation and the
        task's launch. Slurm lists it RUNNING until the allocation ends; nothing ends it
        (no ``srun`` to stop it, no task to notice its host is gone, and
        :meth:`lease_owner_dies` leaves it): only a ``scancel`` of the step or the job.
        Its full id."""
        self._call("step_without_task", job_id=job_id, name=name)
        full_id = f"{job_id}.{self._new_step(job_id, name)}"
        self._taskless.add(full_id)
        return full_id

    def steps_with_tasks(self, job_id: str) -> set[str]:
        """The job's running numbered steps but those :meth:`step_without_task` made
        (``sstat -a``: :class:`slurm_fsm.backend.TaskLister`)."""
        self._call("steps_with_tasks", job_id=job_id)
        job = self._job(job_id)
        return {s for s in job.steps if s.isdigit() and f"{job_id}.{s}" not in self._taskless}

    def step_details(self, job_id: str) -> list[StepInfo]:
        """The job's running numbered steps, as :meth:`list_steps` (the fake has no
        srun process: ``srun_host`` and ``srun_pid`` stay empty)."""
        self._call("step_details", job_id=job_id)
        job = self._job(job_id)
        for r in self._running:
            r.poll()
        return [s for s in job.steps.values() if s.step_id.isdigit()]

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        self._call("cancel", job_id=job_id, step_id=step_id)
        if job_id not in self.jobs and step_id is None:
            for part in self._parts(job_id):  # scancel of an array or het job: all parts
                self.cancel(part.job_id)
        job = self.jobs.get(job_id)
        if job is None or not job.active:
            return  # scancel of a gone job prints nothing and exits 0
        if step_id is not None:
            if step_id in job.steps:
                job.end_step(step_id, JobState.CANCELLED, at=self.clock.now(), signal=9,
                             by=self.uid)
            return
        self._finish(job, JobState.CANCELLED, 0, 15)
        job.cancelled_by = "0"

    def submit(self, request: BatchRequest) -> str:
        """sbatch: one batch job; an array job (``#SBATCH --array``) is one job per task
        (``100_0``, ``100_1``, ... all started at once: a ``%N`` limit is not kept), a
        heterogeneous one (``#SBATCH hetjob``) one per component (``100+0``, ``100+1``,
        each on nodes of its own; component 0 runs the script and the others end as it
        does, as Slurm ends them). Both answer to the job id sbatch printed."""
        self._call("submit", request=request)
        text = request.script_path.read_text(encoding="utf-8") \
            if request.script_path.exists() else ""
        kind = batch_kind(text)
        blocks = _het_blocks(text) if kind == "het" else [sbatch_directives(text)]
        directives = blocks[0]
        partition = request.partition or directives.get("partition") or \
            next(iter(self.partitions))
        account = request.account or directives.get("account")
        sizes = [int(b.get("nodes", "1").split("-")[0]) for b in blocks]
        error = self._request_error(partition, account, sum(sizes), "sbatch")
        if error:
            raise CommandFailed(["sbatch", str(request.script_path)], 1, error)
        limit = directives.get("time")
        job_id = str(next(self._ids))
        base: dict[str, Any] = dict(
            name=request.job_name or directives.get("job-name") or request.script_path.name,
            user=self.user, partition=partition, account=account or "",
            time_limit_s=Duration.parse(limit).seconds if limit else 3600,
            submitted_at=self.clock.now(), kind="batch",
            pending_until=self.clock.now() + self.pending_s,
            reason=(self.pending_reason or "Priority") if self.pending_s else "None",
            work_dir=request.work_dir,
            out_pattern=directives.get("output") or (
                "slurm-%A_%a.out" if kind == "array" else "slurm-%j.out"),
            err_pattern=directives.get("error") or "")
        request.work_dir.mkdir(parents=True, exist_ok=True)
        if kind == "array":
            for task in array_task_ids(directives.get("array", "")):
                self._batch_job(f"{job_id}_{task}", request, sizes[0],
                                self.partitions[partition][:sizes[0]], base, {
                                    "SLURM_ARRAY_JOB_ID": job_id,
                                    "SLURM_ARRAY_TASK_ID": str(task)}, task=task)
            return job_id
        nodes = self.partitions[partition]
        leader = self._batch_job(job_id if kind != "het" else f"{job_id}+0", request,
                                 sum(sizes), nodes[:sum(sizes)], base,
                                 {"SLURM_HET_SIZE": str(len(sizes))} if kind == "het" else {})
        first = sizes[0]
        for k, size in enumerate(sizes[1:], start=1):
            self.jobs[f"{job_id}+{k}"] = attrs.evolve(
                leader, job_id=f"{job_id}+{k}", num_nodes=size, nodes=nodes[first:first + size],
                script=None, process=None, follows=leader.job_id, steps={}, ended_steps={})
            first += size
        if kind == "het":
            leader.num_nodes, leader.nodes = sizes[0], nodes[:sizes[0]]
        return job_id

    def _batch_job(self, job_id: str, request: BatchRequest, size: int, nodes: list[str],
                   base: Mapping[str, Any], env: Mapping[str, str],
                   task: int | None = None) -> FakeJob:
        """One batch job (or array task, or het component 0) on ``nodes`` (``size``:
        the first ones are its own; all of them its script's ``srun`` uses), started
        at once with ``run_scripts``."""
        script = self._script_for(request.script_path)
        job = FakeJob(job_id=job_id, num_nodes=size, nodes=list(nodes),
                      script=script.tasks.get(task, script) if task is not None else script,
                      **base)
        work = request.work_dir
        job.out_path = self._stdio_path(job, job.out_pattern, work)
        job.err_path = self._stdio_path(job, job.err_pattern or job.out_pattern, work)
        self.jobs[job_id] = job
        if self.run_scripts:  # the batch script runs for real, at once
            job.script = None
            job.pending_until = job.started_at = self.clock.now()
            job.state, job.reason = JobState.RUNNING, "None"
            raw = job_id if job_id.isdigit() else job_id.split("_")[0].split("+")[0]
            tpn = int(sbatch_directives(request.script_path.read_text(encoding="utf-8"))
                      .get("ntasks-per-node", "1") or 1)
            n = len(nodes)
            full = {"SLURM_JOB_ID": raw, "SLURM_JOBID": raw,
                    "SLURM_JOB_NUM_NODES": str(n), "SLURM_NNODES": str(n),
                    "SLURM_NTASKS": str(n * tpn), "SLURM_NTASKS_PER_NODE": str(tpn),
                    "SLURM_JOB_NODELIST": hostlist.collect_hostlist(nodes),
                    "SLURM_NODELIST": hostlist.collect_hostlist(nodes),
                    "SLURM_JOB_NAME": job.name, "SLURM_SUBMIT_DIR": str(work),
                    "SLURM_JOB_PARTITION": job.partition, **env, **request.env,
                    "SLURM_FSM_FAKE_NODES": " ".join(nodes)}
            job.process = self._start_batch(job, request.script_path, work,
                                            self._script_env(job, full))
        return job

    def _parts(self, job_id: str) -> list[FakeJob]:
        """The tasks of array job ``job_id`` or the components of het job ``job_id``."""
        return [job for key, job in self.jobs.items() if part_of(key, job_id)]

    def _stdio_path(self, job: FakeJob, pattern: str, work: Path, node: str | None = None
                    ) -> Path:
        """Where the batch step writes ``pattern`` (``%j``, ``%x``, ``%u``, ``%N``: the
        first node, ...), relative to the work dir, as sbatch does."""
        path = Path(expand_output_pattern(
            pattern, job_id=job.job_id, job_name=job.name, user=job.user,
            node=job.nodes[0] if node is None else node))
        return path if path.is_absolute() else work / path

    def job_files(self, job_id: str) -> JobFiles:
        """Where the batch job writes, as ``scontrol show job`` says: known until
        ``min_job_age_s`` after its end (this fake's accounting has no ``StdOut``, as
        Slurm 22.05's); ``%N`` stays unexpanded while the job is pending."""
        self._call("job_files", job_id=job_id)
        parts = self._parts(job_id)
        if job_id not in self.jobs and parts:
            if "+" in parts[0].job_id:  # het: component 0 runs the script
                return attrs.evolve(self.job_files(parts[0].job_id), job_id=job_id)
            tasks = [self.job_files(p.job_id) for p in parts]
            return attrs.evolve(tasks[0], job_id=job_id, tasks=tuple(tasks))
        job = self.jobs.get(job_id)
        if job is None or job.kind != "batch" or job.out_path is None or \
                job.err_path is None:
            raise JobNotFound(job_id, "slurm_load_jobs error: Invalid job id specified")
        if job.ended_at is not None and self.clock.now() - job.ended_at > self.min_job_age_s:
            raise JobNotFound(job_id, "scontrol: Invalid job id specified (MinJobAge); "
                              "sacct has no StdOut field")
        out, err = job.out_path, job.err_path
        pending = job.state is JobState.PENDING
        if pending:  # no node yet: %N as Slurm shows it
            out = self._stdio_path(job, job.out_pattern, job.work_dir, node="")
            err = self._stdio_path(job, job.err_pattern or job.out_pattern, job.work_dir,
                                   node="")
        return JobFiles(job_id=job_id, stdout=out, stderr=err, source="fake",
                        needs_node=pending)

    def _start_batch(self, job: FakeJob, script: Path, work: Path,
                     env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        from slurm_fsm.slurmcli import clean_env

        assert job.out_path is not None and job.err_path is not None
        job.out_path.parent.mkdir(parents=True, exist_ok=True)
        with open(job.out_path, "ab") as out, open(job.err_path, "ab") as err:
            return subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                ["bash", str(script)], cwd=work, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err if job.err_path != job.out_path else out,
                env=clean_env(os.environ, env), start_new_session=True)

    @staticmethod
    def _stop_process(job: FakeJob) -> int | None:
        """Stop a batch script run for real (its process group): its exit status."""
        proc = job.process
        if proc is None:
            return None
        if proc.poll() is None and not stop_group(proc.pid, 2.0,
                                                  ended=lambda: proc.poll() is not None):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5.0)
        return proc.poll()

    def job_outcome(self, job_id: str) -> JobOutcome:
        """sacct: how the job ended; an array's or het job's from its parts' (the worst
        decides: :meth:`JobOutcome.of_parts`), but for :attr:`accounting_lag_s` after its
        last part ended only a bare row of that part under the job's id, as Slurm
        22.05's sacct once showed."""
        self._call("job_outcome", job_id=job_id)
        parts = self._parts(job_id)
        if job_id not in self.jobs and parts:
            ends = [p.ended_at for p in parts]
            if self.accounting_lag_s and None not in ends and \
                    self.clock.now() - max(e for e in ends if e is not None) \
                    < self.accounting_lag_s:  # sacct lags: a bare row of the last part
                return attrs.evolve(self._outcome(parts[-1]), job_id=job_id)
            return JobOutcome.of_parts(job_id, [self._outcome(p) for p in parts])
        job = self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id, "neither sacct nor scontrol knows the job")
        return self._outcome(job)

    def _outcome(self, job: FakeJob) -> JobOutcome:
        job_id = job.job_id
        if not self.accounting and job.ended_at is not None and \
                self.clock.now() - job.ended_at > self.min_job_age_s:
            raise JobNotFound(job_id, "accounting is off and the job left scontrol")
        elapsed = 0
        if job.started_at is not None:
            elapsed = int((job.ended_at or self.clock.now()) - job.started_at)
        now = self.clock.now()
        # sacct lists the job's ended numbered steps too (once accounting has each);
        # scontrol has no step rows
        steps = tuple(row for row, at in job.ended_steps.values()
                      if now - at >= self.accounting_lag_s) if self.accounting else ()
        return JobOutcome(
            job_id=job_id, state=job.state, exit_code=job.exit_code, signal=job.signal,
            elapsed=Duration.of_seconds(elapsed),
            cancelled_by=job.cancelled_by,
            source="sacct" if self.accounting else "scontrol", steps=steps,
        )

    def step_outcomes(self, job_id: str, step_ids: Sequence[str]) -> list[JobOutcome]:
        """Accounting's rows of those steps: the ended ones (once
        :attr:`accounting_lag_s` has passed since each ended), RUNNING for the
        running ones. JobNotFound when accounting is off."""
        self._call("step_outcomes", job_id=job_id, step_ids=tuple(step_ids))
        for step in step_ids:
            check_step_id(step)
        if not self.accounting:
            raise JobNotFound(job_id, "accounting is disabled")
        job = self.jobs.get(job_id)
        if job is None:
            return []
        now = self.clock.now()
        out: list[JobOutcome] = []
        for step in step_ids:
            ended = job.ended_steps.get(step)
            if ended is not None and now - ended[1] >= self.accounting_lag_s:
                out.append(ended[0])
            elif step in job.steps and job.steps[step].state is JobState.RUNNING:
                out.append(JobOutcome(job_id=f"{job_id}.{step}", state=JobState.RUNNING,
                                      exit_code=0))
        return out

    def has_container_support(self) -> bool:
        self.calls.append(Call("has_container_support", {}))
        return self.pyxis

    def pyxis_site(self) -> PyxisSite | None:
        """Its pyxis options: :attr:`container_scope` (None without pyxis)."""
        self.calls.append(Call("pyxis_site", {}))
        return PyxisSite(container_scope=self.container_scope,
                         source="fake cluster") if self.pyxis else None

    def expand_nodelist(self, nodelist: str) -> list[str]:
        return list(hostlist.expand_hostlist(nodelist)) if nodelist else []

    def start_script(self, request: ScriptRequest) -> _FakeRunningScript | _LocalFakeScript:
        self._call("start_script", request=request)
        job_id = request.env.get("SLURM_JOB_ID", "")
        job = self._job(job_id)
        step_id = str(job.next_step)
        job.next_step += 1
        job.steps[step_id] = StepInfo(job_id=job_id, step_id=step_id, name=request.script_path.name,
                                     state=JobState.RUNNING)
        running: _FakeRunningScript | _LocalFakeScript
        if self.run_scripts:
            from slurm_fsm.subprocess_backend import SubprocessBackend

            env = self._script_env(job, request.env)
            try:
                local = SubprocessBackend().start_script(attrs.evolve(request, env=env))
            except BaseException:
                job.steps.pop(step_id, None)
                raise
            running = _LocalFakeScript(self, local, job_id, step_id)
        else:
            running = _FakeRunningScript(self, request, self._script_for(request.script_path),
                                         job_id, step_id)
        self._running.append(running)
        return running

    def stop_stale_script(self, identity: Mapping[str, object]) -> str | None:
        """Stop a script of this cluster that an earlier run left running."""
        self.calls.append(Call("stop_stale_script", {"identity": dict(identity)}))
        if "pgid" in identity or "token" in identity:  # a script run for real
            # (run_scripts=True), or a record naming only its token (killed as it began)
            from slurm_fsm.subprocess_backend import stop_stale_group

            return stop_stale_group(identity)
        for r in self._running:
            if r.identity == dict(identity) and r.exit_code is None:
                r.terminate()
                return f"fake script {r.job_id}.{r.step_id}"
        return None


def _write_salloc_log(log: Path, text: str) -> None:
    """``salloc``'s output at ``log``, opened as :class:`SubprocessBackend` opens it
    (:func:`slurm_fsm.files.open_private`): a link or another user's file there is an
    :class:`AllocationFailed` before anything is allocated."""
    try:
        with files.open_private(log) as fh:
            fh.write(text.encode("utf-8"))
    except FileProblem as problem:
        raise AllocationFailed(["salloc"], 1, "", f"the salloc log cannot be written: "
                               f"{problem}; nothing was allocated") from None
