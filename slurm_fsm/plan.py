"""``slurm-fsm plan``: what step 0 would do from the current state, changing nothing.

:class:`PlanBackend` wraps a real backend. Questions (``squeue``, ``srun --help``)
go to the real cluster; everything that would change something (``salloc``,
``scancel``, ``srun``) is only recorded, with the command line it would run,
and answered as if it had worked.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from slurm_fsm import imagecache, slurmcli
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    GpuProcess,
    Granted,
    JobFiles,
    JobInfo,
    JobOutcome,
    LeaseHandle,
    RunningScript,
    ScriptRequest,
    SlurmBackend,
    StepInfo,
    StepRequest,
    StepResult,
)
from slurm_fsm.clock import Clock
from slurm_fsm.duration import Duration
from slurm_fsm.errors import JobNotFound, StateFileError
from slurm_fsm.history import RunHistory
from slurm_fsm.jobstate import JobState
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.preflight import (
    ClusterPartition,
    ClusterQueries,
    CpuDefaultsQuery,
    EnforcementQuery,
    sacctmgr_assoc_argv,
    scontrol_config_argv,
    scontrol_partition_argv,
    sinfo_partitions_argv,
)
from slurm_fsm.pyxissite import PyxisQuery, PyxisSite
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import MAX_STATE_BYTES, StateStore, read_regular_file
from slurm_fsm.step0.outcome import Step0Outcome
from slurm_fsm.step0.table import CONDITIONS, EXPIRY_MARGIN_S, State, job_fits

__all__ = ["Plan", "PlanBackend", "PlanCommand", "admission_text", "make_plan"]

PLANNED_JOB = "<new-allocation>"


@attrs.frozen
class PlanCommand:
    """One Slurm command of a plan: asked (read-only, it ran) or one that would change
    something (it did not run)."""

    argv: tuple[str, ...]
    #: True: it would change something (salloc, scancel, srun) and was not run
    changes: bool

    @property
    def line(self) -> str:
        """The command line, quoted for a shell."""
        return shlex.join(self.argv)


@attrs.frozen(kw_only=True)
class Plan:
    """The outcome of a dry run of step 0."""

    path: list[str]
    #: where step 0 would stop: Ready, Released, Failed, or Validating when it would
    #: wait for a PENDING allocation of the state file (:attr:`waits_for`)
    final_state: str
    #: every Slurm command, in order
    commands: list[PlanCommand]
    reasons: list[str]
    warnings: list[str]
    #: the job id of a PENDING allocation step 0 would wait for (not a failure)
    waits_for: str | None = None
    #: what admission by time left would decide: the job's expected duration and
    #: whether the allocation's time left covers it with the margin
    admission: str = ""
    #: what a new allocation would do for the spec's container, in order (reused on
    #: node, from the cache, cold), the pyxis options read, the cache's entry
    #: (:func:`slurm_fsm.imagecache.new_allocation`); None: no container
    container: Mapping[str, object] | None = None

    @property
    def would_change(self) -> list[str]:
        """The command lines that would change something."""
        return [c.line for c in self.commands if c.changes]

    def to_dict(self) -> dict[str, object]:
        """The JSON document of ``plan --json``: ``commands`` as ``{"argv": [...],
        "changes": bool}``, and ``would_change`` the command lines of those that would."""
        return {
            "path": list(self.path),
            "final_state": self.final_state,
            "waits_for": self.waits_for,
            "admission": self.admission,
            "container": dict(self.container) if self.container is not None else None,
            "commands": [{"argv": list(c.argv), "changes": c.changes} for c in self.commands],
            "would_change": self.would_change,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
        }

    def render_text(self) -> str:
        lines = [f"step 0 would go: {' -> '.join(self.path)}"]
        if self.admission:
            lines.append(f"admission: {self.admission}")
        if self.container is not None:
            lines.append(f"container: {self.container['says']}")
        lines += [f"  {r}" for r in self.reasons]
        lines.append("Slurm commands:")
        lines += [f"  {c.line}" + ("" if c.changes else "   (asked)")
                  for c in self.commands] or ["  (none)"]
        if self.warnings:
            lines.append("warnings:")
            lines += [f"  {w}" for w in self.warnings]
        return "\n".join(lines) + "\n"


class _PlannedLease:
    """The lease a dry run would take: nothing runs."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def alive(self) -> bool:
        return False

    def stop(self) -> None:
        return None


class PlanBackend:
    """Asks the real backend, records (and does not run) what would change things."""

    #: a dry run: step 0's work that reads what a step printed takes the planned
    #: step as done (:mod:`slurm_fsm.imagecache`)
    dry_run = True

    def __init__(self, real: SlurmBackend) -> None:
        self.real = real
        self.commands: list[PlanCommand] = []
        self._planned: AllocationRequest | None = None  # the salloc it would run

    @property
    def clock(self) -> Clock:
        """The wrapped backend's clock: a dry run waits like the real one would."""
        return self.real.clock

    def _ask(self, argv: list[str]) -> None:
        self.commands.append(PlanCommand(tuple(argv), changes=False))

    def _would(self, argv: list[str]) -> None:
        self.commands.append(PlanCommand(tuple(argv), changes=True))

    def current_user(self) -> str:
        return self.real.current_user()

    def query_job(self, job_id: str) -> JobInfo:
        self._ask(slurmcli.squeue_job_argv(job_id))
        if job_id == PLANNED_JOB:
            return JobInfo(job_id=job_id, state=JobState.RUNNING, nodelist="<nodes>",
                           time_left=Duration.parse("UNLIMITED"))
        return self.real.query_job(job_id)

    def find_jobs(self, name: str | None, user: str) -> list[JobInfo]:
        self._ask(slurmcli.squeue_find_argv(name, user))
        return self.real.find_jobs(name, user)

    def granted(self, job_id: str) -> Granted:
        self._ask(slurmcli.scontrol_granted_argv(job_id))
        if job_id == PLANNED_JOB:  # as asked: the plan assumes Slurm grants the request
            asked = self._planned
            nodes = asked.nodes if asked else 1
            tpn = (asked.ntasks_per_node if asked else None) or 1
            return Granted(job_id=job_id, nodes=nodes, nodelist="<nodes>", cpus=nodes * tpn,
                           cpus_per_node=tpn,
                           gpus_per_node=(asked.gpus_per_node if asked else None) or 0)
        return self.real.granted(job_id)

    def allocate(self, request: AllocationRequest, wait_s: float = 10.0) -> str:
        self._planned = request
        self._would(slurmcli.salloc_argv(request))
        return PLANNED_JOB

    def run_step(self, request: StepRequest) -> StepResult:
        self._would(slurmcli.srun_step_argv(request))
        return StepResult(0, "", "")

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None = None
                      ) -> list[GpuProcess]:
        self._would(slurmcli.gpu_processes_argv(job_id, nodes, gpus_per_node))
        return []

    def probe_gpu_name(self, partition: str, account: str | None = None) -> str | None:
        self._would(slurmcli.probe_gpu_argv(partition, account))
        return None

    def step_details(self, job_id: str) -> list[StepInfo]:
        self._ask(slurmcli.scontrol_show_steps_argv(job_id))
        return [] if job_id == PLANNED_JOB else self.real.step_details(job_id)

    def list_steps(self, job_id: str) -> list[StepInfo]:
        self._ask(slurmcli.squeue_steps_argv(job_id))
        return [] if job_id == PLANNED_JOB else self.real.list_steps(job_id)

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> LeaseHandle:
        self._would(slurmcli.srun_lease_argv(job_id, name))
        return _PlannedLease(name)

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        self._would(slurmcli.scancel_argv(job_id, step_id))

    def submit(self, request: BatchRequest) -> str:
        self._would(slurmcli.sbatch_argv(request))
        return PLANNED_JOB

    def job_outcome(self, job_id: str) -> JobOutcome:
        return self.real.job_outcome(job_id)

    def job_files(self, job_id: str) -> JobFiles:
        self._ask(slurmcli.scontrol_show_job_argv(job_id))
        if job_id == PLANNED_JOB:
            raise JobNotFound(job_id, "a planned job writes nothing")
        return self.real.job_files(job_id)

    def step_outcomes(self, job_id: str, step_ids: Sequence[str]) -> list[JobOutcome]:
        if step_ids:
            self._ask(slurmcli.sacct_steps_argv(job_id, list(step_ids)))
        return [] if job_id == PLANNED_JOB else self.real.step_outcomes(job_id, step_ids)

    def has_container_support(self) -> bool:
        self._ask(slurmcli.srun_help_argv())
        return self.real.has_container_support()

    def cluster_partitions(self) -> list[ClusterPartition]:
        if not isinstance(self.real, ClusterQueries):
            return []
        self._ask(sinfo_partitions_argv())
        return self.real.cluster_partitions()

    def user_associations(self, user: str) -> list[tuple[str, str]] | None:
        if not isinstance(self.real, ClusterQueries):
            return None
        self._ask(sacctmgr_assoc_argv(user))
        return self.real.user_associations(user)

    def accounting_enforce(self) -> str | None:
        if not isinstance(self.real, EnforcementQuery):
            return None
        self._ask(scontrol_config_argv())
        return self.real.accounting_enforce()

    def pyxis_site(self) -> PyxisSite | None:
        if not isinstance(self.real, PyxisQuery):
            return None
        self._ask(scontrol_config_argv())
        return self.real.pyxis_site()

    def def_cpu_per_gpu(self, partition: str) -> int | None:
        if not isinstance(self.real, CpuDefaultsQuery):
            return None
        self._ask(scontrol_partition_argv(partition))
        return self.real.def_cpu_per_gpu(partition)

    def expand_nodelist(self, nodelist: str) -> list[str]:
        return self.real.expand_nodelist(nodelist)

    def start_script(self, request: ScriptRequest) -> RunningScript:
        raise NotImplementedError("a plan never runs the job")

    def stop_stale_script(self, identity: Mapping[str, object]) -> str | None:
        raise NotImplementedError("a plan never stops a script")


def admission_text(m: AllocationMachine, seen: Step0Outcome | None = None) -> str:
    """What admission by time left decides on the last observation of the state file's
    allocation (``seen``: the machine's outcome, by default :meth:`AllocationMachine.outcome`
    now; a Validating observation, otherwise there is none to admit to): the expected
    duration (the machine's estimate), the time left, fits or not, and what follows."""
    est = m.estimate()
    obs = (seen or m.outcome()).observation
    info = obs.info
    if obs.source is State.Validating and info is not None and info.state.is_pending:
        return (f"allocation {info.job_id} is {info.state}; the job {est.describe()}: "
                "judged against its time left once it runs")
    if obs.source is not State.Validating or info is None or not info.state.is_running:
        return (f"the job {est.describe()}; no running allocation to admit it to: a new "
                f"allocation of {m.spec.alloc_time_limit} holds it")
    margin = Duration.of_seconds(EXPIRY_MARGIN_S)
    head = f"allocation {info.job_id} has {info.time_left} left; the job {est.describe()}"
    if not job_fits(info, est.seconds):
        return (f"{head} + {margin} margin: does not fit, so it is not started on it; the "
                "allocation is replaced once no other run's job uses it")
    return f"{head} + {margin} margin: fits"


class _PlanStop:
    """Where the plan's step 0 stops (``until`` of
    :meth:`~slurm_fsm.machine.AllocationMachine.prepare`): a PENDING allocation of the
    state file is where a run would wait (:attr:`waits_for`), not a failure. Each
    Validating observation is judged for admission on the way."""

    def __init__(self, m: AllocationMachine, spec: JobSpec) -> None:
        self.m, self.spec = m, spec
        self.admission = ""
        self.waits_for: str | None = None

    def __call__(self, seen: Step0Outcome) -> bool:
        if seen.observation.source is State.Validating:
            self.admission = admission_text(self.m, seen)
        if seen.state is State.Validating and CONDITIONS["job_pending"](seen.observation,
                                                                       self.spec):
            self.waits_for = seen.alloc.job_id if seen.alloc else None
            return True
        return False


def _copy_successor(real: StatePaths, scratch: StatePaths) -> None:
    """The warm successor's state file (and record), and the drained allocation's
    record, as a run would see them."""
    from slurm_fsm.successor import MAX_RECORD_BYTES

    for source, target in ((real.successor_state, scratch.successor_state),
                           (real.successor_record, scratch.successor_record),
                           (real.drained_state, scratch.drained_state)):
        try:
            raw = read_regular_file(source, max(MAX_STATE_BYTES, MAX_RECORD_BYTES))
        except StateFileError:
            continue
        if raw is not None:
            target.write_bytes(raw)


def make_plan(spec: JobSpec, real: SlurmBackend, *, clock: Clock | None = None,
              history: RunHistory | None = None) -> Plan:
    """Dry-run step 0 for ``spec`` against ``real``: the state file and the
    ``.salloc.log`` are copied to a scratch folder, so nothing on disk changes.

    The machine is stepped as :meth:`AllocationMachine.prepare` steps it, with no retry
    of an unreachable controller, and stops where a run would wait: a PENDING
    allocation of the state file is reported (:attr:`Plan.waits_for`), not failed.
    ``history``: the run history admission reads (default: beside ``spec.state_path``).
    """
    backend = PlanBackend(real)
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-plan-") as tmp:
        real_paths = StatePaths.for_state_file(spec.state_path)
        paths = real_paths.moved_to(Path(tmp))
        problem = ""
        try:  # bounded, regular files only: a FIFO or /dev/zero there is not copied
            raw = read_regular_file(spec.state_path, MAX_STATE_BYTES)
        except StateFileError as exc:
            raw, problem = None, f"{exc}; handled like a missing state file"
        if raw is not None:
            paths.state.write_bytes(raw)
        _copy_successor(real_paths, paths)
        m = AllocationMachine(
            spec, backend, clock=clock, store=StateStore(paths.state),
            salloc_log=paths.salloc_log, unreachable_retries=0,
            run_history=history or RunHistory(real_paths.history),
        )
        stop = _PlanStop(m, spec)
        done = m.prepare(until=None if spec.release_allocation else stop)
        admission = stop.admission
        if not admission and not spec.release_allocation:
            admission = admission_text(m, done)
    reasons = [f"{t.source} -> {t.dest}: {t.reason}" for t in done.history]
    if stop.waits_for is not None:
        reasons.append(f"a run would wait for allocation {stop.waits_for} (up to "
                       f"{m.pending_wait_s:g} s), not cancel it, then reuse it")
    return Plan(
        path=list(done.path),
        final_state=done.state.value,
        commands=backend.commands,
        reasons=reasons,
        warnings=([problem] if problem else []) + list(done.warnings)
        + ([done.failure.message] if done.failure and done.state is State.Failed else []),
        waits_for=stop.waits_for,
        admission=admission,
        container=imagecache.new_allocation(spec, backend),
    )
