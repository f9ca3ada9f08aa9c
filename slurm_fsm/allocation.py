"""The persistent allocation as an object an orchestrator holds.

One checkout (``repo_root``) has at most one persistent allocation; its state file
``<repo_root>/work_dirs/.slurm_alloc.json`` is what identifies it. An
:class:`Allocation` stands for it::

    from slurm_fsm import Allocation, JobSpec, SubprocessBackend

    with Allocation(repo_root, SubprocessBackend()) as alloc:   # released on exit
        for path in spec_paths:
            report = alloc.run(JobSpec.from_file(path))          # one allocation for all
        print(alloc.status().time_left)

Several jobs at once, each on its own share of the allocation (see
:mod:`slurm_fsm.placement`)::

    with Allocation(repo_root, SubprocessBackend()) as alloc:
        reports = alloc.run_many(specs, max_parallel=4)          # in the order of specs
        handle = alloc.submit(spec)                               # or one at a time
        report = handle.result()

Without ``with`` nothing is ever released automatically: call :meth:`release`.
Whether a spec reuses the allocation or replaces it is decided by the machine's
conditions; :data:`SHARING_RULES` writes them down and :meth:`Allocation.reuse_problems`
applies them to a spec, without any Slurm call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, overload

import attrs

from slurm_fsm import sharedview
from slurm_fsm.clock import Clock
from slurm_fsm.duration import Duration
from slurm_fsm.errors import JobNotFound, SlurmFsmError, SpecError, StateFileError
from slurm_fsm.paths import StatePaths
from slurm_fsm.runrecord import RunBook

if TYPE_CHECKING:
    from slurm_fsm.backend import JobInfo, SlurmBackend
    from slurm_fsm.detach import DetachedRun
    from slurm_fsm.events import Events
    from slurm_fsm.monitor import PollPolicy
    from slurm_fsm.report import Report
    from slurm_fsm.spec import JobSpec
    from slurm_fsm.state import AllocState

__all__ = ["SHARING_RULES", "Allocation", "AllocationStatus", "BatchSize", "RunHandle",
           "batch_size"]

SHARING_RULES: tuple[str, ...] = (
    "same repo_root: the allocation is found through <repo_root>/work_dirs/.slurm_alloc.json",
    "the job is still in Slurm, RUNNING (a PENDING one is waited for), and carries this "
    "checkout's tag",
    "more than 5 minutes left (otherwise it is cancelled as expiring and replaced)",
    "same partition and same account",
    "the allocation, as Slurm granted it, can hold the job: at least its nodes, as many "
    "CPUs per node as its tasks per node, and its GPUs per node",
    "same docker_image (a different image replaces the allocation)",
    "enough time left for the job: its expected duration plus 5 minutes (admission by "
    "time left; otherwise it is replaced once no other run's job uses it)",
    "a different container_name reuses the allocation but imports and installs that "
    "container first (step 0F)",
)
"""When a spec runs in the allocation that is already there, in this order (the first
that fails decides; :meth:`Allocation.reuse_problems` says which). Each rule is a pure
function of the state file and the spec in :mod:`slurm_fsm.step0.table`, except the time
left, which needs ``squeue``."""


@attrs.frozen(kw_only=True)
class AllocationStatus:
    """What the state file says about the allocation and what Slurm says now."""

    state_file: Path
    job_id: str | None  # None: no state file, no allocation
    nodelist: str | None = None
    partition: str | None = None
    account: str | None = None
    nodes: int | None = None
    container_name: str | None = None
    docker_image: str | None = None
    installed: bool | None = None
    slurm_state: str | None = None  # None: gone from Slurm (or no allocation)
    time_left: Duration | None = None
    job_name: str | None = None
    user: str | None = None
    #: the jobs running on it now (their leases): run id, pid, host, spec, model,
    #: since, log, steps and the GPUs each step holds where Slurm says
    jobs: tuple[dict[str, Any], ...] = ()
    #: admission by time left for the spec asked about (``status(spec)``): its expected
    #: duration (``expected_s``, ``source``, ``detail``) and whether it ``fits``
    admission: dict[str, Any] | None = None
    #: the warm successor (issue 27), when one is queued: its job id, name, Slurm state
    #: (and pending reason, estimated start), time left, phase (pending, warming,
    #: ready, failed), the allocation it follows, its warmer's pid
    successor: dict[str, Any] | None = None
    #: the allocation a hand-off replaced, while it drains (issue 27): its job id, Slurm
    #: state and time left (None: none recorded, or gone)
    drained: dict[str, Any] | None = None

    @property
    def exists(self) -> bool:
        """The state file names an allocation."""
        return self.job_id is not None

    @property
    def alive(self) -> bool:
        """The allocation named by the state file is still in Slurm."""
        return self.slurm_state is not None

    def to_dict(self) -> dict[str, Any]:
        """The ``slurm-fsm status --json`` document (its keys are unchanged)."""
        data: dict[str, Any] = {"allocation": self.job_id, "state_file": str(self.state_file)}
        if self.successor is not None:
            data["successor"] = dict(self.successor)
        if self.drained is not None:
            data["drained"] = dict(self.drained)
        if self.job_id is None:
            return data
        data.update(nodelist=self.nodelist, partition=self.partition, nodes=self.nodes,
                    container_name=self.container_name, installed=self.installed,
                    slurm_state=self.slurm_state,
                    time_left=self.time_left.as_slurm() if self.time_left else None)
        if self.slurm_state is not None:
            data.update(job_name=self.job_name, user=self.user)
        data["jobs"] = [dict(j) for j in self.jobs]
        if self.admission is not None:
            data["admission"] = dict(self.admission)
        return data

    def render_text(self) -> str:
        text = self._render_text()
        d = self.drained
        if d is not None:
            text += (f"\ndraining allocation {d['job_id']}: {d['slurm_state']}, "
                     f"{d['time_left']} left; takes no new job, released once no job of "
                     "any run is on it")
        s = self.successor
        if s is None:
            return text
        where = (f"{s['slurm_state']}" + (f" ({s['reason']}), est. start {s['start_time']}"
                                          if s["phase"] == "pending" else
                                          f", {s['time_left']} left")
                 if s["slurm_state"] else "gone from Slurm")
        warmer = f", warmer pid {s['warmer_pid']}" if s.get("warmer_pid") else ""
        return (text + f"\nsuccessor allocation {s['job_id']} ({s['job_name']}): {where}, "
                f"{s['phase']}{warmer}; follows {s['predecessor'] or '-'}")

    def _render_text(self) -> str:
        if self.job_id is None:
            return f"no allocation (no state file at {self.state_file})"
        if self.slurm_state is None:
            return (f"allocation {self.job_id}: gone from Slurm (the state file is stale; "
                    "the next run drops it)")
        if self.container_name is None and self.docker_image is None:
            container = "no container (nothing to import or install)"
        else:  # imports and installs happen only in a container (steps 0E-0F)
            container = (f"container {self.container_name or '-'}, "
                         f"{'installed' if self.installed else 'not installed yet'}")
        text = (f"allocation {self.job_id}: {self.slurm_state}, {self.time_left} left, "
                f"{self.nodes} node(s) {self.nodelist} on {self.partition}, {container}")
        if self.admission is not None:
            a = self.admission
            text += (f"\nadmission: this job {a['text']} + 5 min margin against "
                     f"{self.time_left} left: "
                     + ("fits" if a["fits"] else "does not fit (a run replaces the allocation "
                        "once no other run's job uses it)"))
        if not self.jobs:
            return text + "\nno job running on it"
        lines = [text, f"{len(self.jobs)} job(s) running on it:"]
        for j in self.jobs:
            steps = ", ".join(
                f"{s['id']}" + (f" ({s['gpus']} GPU(s) on {s['nodes']})" if s.get("gpus")
                                else f" (on {s['nodes']})" if s.get("nodes") else "")
                for s in j.get("steps", [])) or "none"
            lines.append(f"  pid {j['pid']} on {j['host']}: model {j['model'] or '-'}, "
                         f"{j['spec']}, since {j['since']}; steps: {steps}")
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class BatchSize:
    """The allocation :meth:`Allocation.run_many` makes for its batch."""

    nodes: int
    gpus_per_node: int
    #: why, in words (for the run's messages)
    reason: str


def batch_size(specs: list[JobSpec], parallel: int,
               node_gpus: int | None, partition_nodes: int | None = None) -> BatchSize | None:
    """The allocation that runs ``parallel`` of ``specs`` at once, within one node's
    GPUs (``node_gpus``, the most a node of the partition has; None: not known).

    Nodes: the most any spec asks (``alloc_nodes`` or ``nodes``), at most
    ``partition_nodes``. GPUs per node: the GPUs of the ``parallel`` biggest jobs
    (``gpus_per_node x nodes`` each) spread over those nodes, at least what any spec
    asks, at most ``node_gpus``. None when that is no bigger than the first spec would
    make anyway, when a spec sets ``alloc_gpus_per_node`` itself, or when a node's GPUs
    are not known (asking for more than a node has would never start)."""
    if not specs or parallel < 1 or any(s.alloc_gpus_per_node is not None for s in specs):
        return None
    nodes: int = max(s.alloc_nodes or s.slurm_params.nodes for s in specs)
    if partition_nodes:
        nodes = max(min(nodes, partition_nodes), max(s.slurm_params.nodes for s in specs))
    demands = sorted(((s.slurm_params.gpus_per_node or 0) * s.slurm_params.nodes
                      for s in specs), reverse=True)[:parallel]
    own = max(s.slurm_params.gpus_per_node or 0 for s in specs)
    if not sum(demands) or node_gpus is None:
        return None
    gpus = max(own, min(-(-sum(demands) // nodes), node_gpus))
    first = specs[0]
    first_nodes = first.alloc_nodes or first.slurm_params.nodes
    if gpus <= (first.slurm_params.gpus_per_node or 0) and nodes <= first_nodes:
        return None
    return BatchSize(nodes=nodes, gpus_per_node=gpus, reason=(
        f"{len(demands)} job(s) at once asking {sum(demands)} GPU(s) in all; a node of the "
        f"partition has {node_gpus}"))


@attrs.frozen
class RunHandle:
    """A run started by :meth:`Allocation.submit`: its spec and the future of its report."""

    spec: JobSpec
    future: Future[Report]

    def result(self, timeout: float | None = None) -> Report:
        """The report, once the run has ended (raises what the run raised)."""
        return self.future.result(timeout)

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> bool:
        """Drop a run that has not started yet (a started run is not stopped here)."""
        return self.future.cancel()


class Allocation:
    """The persistent allocation of one checkout (``repo_root``), held by an orchestrator.

    :meth:`run` runs a spec through it (allocating on first use, reusing it after);
    :meth:`status` and :meth:`time_left` ask Slurm about it; :meth:`release` cancels
    it. Used as a context manager it is released when the block ends, whatever
    happened in it. The state file format is the one of procedure.md, so the CLI and
    other tools see the same allocation.
    """

    def __init__(
        self,
        repo_root: str | Path,
        backend: SlurmBackend,
        *,
        clock: Clock | None = None,
        events: Events | None = None,
        policy: PollPolicy | None = None,
        state_path: str | Path | None = None,
    ) -> None:
        self.repo_root = Path(repo_root).resolve()
        #: ``None``: the real state file of ``repo_root``; a path: another one (the fake
        #: backend of the CLI keeps ``.slurm_alloc.fake.json``), same format
        self._state_path = Path(state_path) if state_path is not None else None
        self.backend = backend
        # the backend's own clock unless told otherwise (a FakeCluster's fake clock)
        self.clock: Clock = clock or backend.clock
        self.events = events
        self.policy = policy
        self.reports: list[Report] = []
        self._last_spec: JobSpec | None = None
        self._mutex = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        #: how many runs :meth:`submit` starts at once (its thread pool's size)
        self.max_parallel = 8

    @classmethod
    def for_spec(cls, spec: JobSpec, backend: SlurmBackend, **kwargs: Any) -> Allocation:
        """The allocation that ``spec`` would use (the one of its ``repo_root``)."""
        alloc = cls(spec.repo_root, backend, **kwargs)
        alloc._last_spec = spec
        return alloc

    def __repr__(self) -> str:
        return f"Allocation(repo_root={str(self.repo_root)!r})"

    # --------------------------------------------------------------------- where
    @property
    def state_path(self) -> Path:
        """The state file that identifies the allocation:
        ``<repo_root>/work_dirs/.slurm_alloc.json`` unless another was given."""
        return self._state_path or StatePaths.for_repo(self.repo_root).state

    def state(self) -> AllocState | None:
        """What the state file says (no Slurm call); ``None`` without a state file."""
        from slurm_fsm.state import StateStore

        return StateStore(self.state_path).read()

    # ----------------------------------------------------------------------- run
    def _check(self, spec: JobSpec) -> None:
        problems = []
        if spec.repo_root.resolve() != self.repo_root:
            problems.append(f"repo_root: {spec.repo_root} is not this allocation's "
                            f"{self.repo_root}")
        if not spec.persistent_mode:
            problems.append("persistent_mode: false runs a one-shot sbatch job, not in an "
                            "allocation; use Executor for it")
        if problems:
            raise SpecError("job spec", problems)

    def run(self, spec: JobSpec) -> Report:
        """Run one spec in this allocation (allocating it first when there is none).

        A spec with ``release_allocation: true`` is what it says (step 0A, as for the
        Executor and the CLI): the allocation is released (:meth:`release`) and nothing
        is run; the report is ``RELEASED``.

        Raises :class:`SpecError` (no Slurm call) when the spec belongs to another
        checkout or is one-shot.
        """
        self._check(spec)
        return self._run_checked(spec)

    def _run_checked(self, spec: JobSpec, backend: SlurmBackend | None = None) -> Report:
        from slurm_fsm.executor import Executor

        if spec.release_allocation:
            return self.release(spec)
        self._check(spec)
        report = Executor(spec, backend or self.backend, clock=self.clock, events=self.events,
                          policy=self.policy, state_path=self._state_path).run()
        with self._mutex:
            self._last_spec = spec
            self.reports.append(report)
        return report

    @overload
    def submit(self, spec: JobSpec, *, detach: Literal[False] = False) -> RunHandle: ...

    @overload
    def submit(self, spec: JobSpec, *, detach: Literal[True]) -> DetachedRun: ...

    def submit(self, spec: JobSpec, *, detach: bool = False) -> RunHandle | DetachedRun:
        """Start ``spec`` in this allocation in a thread of its own and return at once.

        ``detach=True``: the run is handed to a supervisor process of its own
        (:func:`slurm_fsm.detach.submit`, on this machine's Slurm), which outlives this
        process; returns once its job has started, a
        :class:`~slurm_fsm.detach.DetachedRun` whose ``run_id`` any shell of the
        checkout can :func:`~slurm_fsm.detach.attach` to.

        Each run is a whole :class:`~slurm_fsm.executor.Executor` run; runs started
        together share the allocation, each job on its own share of it (the script's
        ``srun`` is confined to its ``slurm_params``, Slurm queues it while the
        allocation is full). At most :attr:`max_parallel` runs go at once; the
        others wait for a thread. Raises :class:`SpecError` at once (nothing starts)
        when the spec belongs to another checkout or is one-shot.
        """
        self._check(spec)
        if detach:
            from slurm_fsm.detach import submit
            from slurm_fsm.subprocess_backend import SubprocessBackend

            if not isinstance(self.backend, SubprocessBackend):
                raise SpecError("job spec", [
                    "detach=True: a detached run is owned by a process of its own, which "
                    "drives this machine's Slurm; a backend in this process (a fake "
                    "cluster) cannot go with it (the CLI's `run --detach --backend fake` "
                    "gives the supervisor a fake cluster of its own)"])
            return submit(spec, state_path=self._state_path)
        with self._mutex:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_parallel,
                                                thread_name_prefix="slurm_fsm-run")
            pool = self._pool
        return RunHandle(spec, pool.submit(self._run_checked, spec))

    def run_many(self, specs: Iterable[JobSpec], *, max_parallel: int | None = None,
                 ) -> list[Report]:
        """Run ``specs`` at once (at most ``max_parallel`` jobs at a time, default all)
        and return their reports in the order of ``specs``.

        A run takes one of the ``max_parallel`` job slots before its step 0 and gives it
        back once its script and the steps it started have ended: the checks after a
        script (did the allocation end under it? the report) overlap the next job.

        Every spec is checked first: one that does not belong here raises
        :class:`SpecError` naming it, and nothing runs. When there is no allocation
        yet, the one made is sized for the batch (:func:`batch_size`: the GPUs of
        ``max_parallel`` jobs at once, within one node of the partition). All runs
        are waited for even when one raises; the first exception is then raised.
        """
        specs = list(specs)
        if max_parallel is not None and max_parallel < 1:
            raise ValueError(f"max_parallel: must be >= 1, not {max_parallel}")
        problems = []
        for i, spec in enumerate(specs):
            try:
                self._check(spec)
            except SpecError as exc:
                problems += [f"specs[{i}] {p}" for p in exc.problems]
        if problems:
            raise SpecError("run_many", problems)
        if not specs:
            return []
        workers = min(len(specs), max_parallel or len(specs))
        specs = self._sized_for(specs, workers)
        # the runs share one fresh view of the allocation (slurm_fsm.sharedview); at
        # most `workers` jobs run at once (its slots), and as many runs again may be
        # reporting on jobs that ended (the checks after a script hold no slot)
        view = sharedview.SharedView(self.backend, self.clock, slots=workers)
        with ThreadPoolExecutor(max_workers=min(len(specs), 2 * workers),
                                thread_name_prefix="slurm_fsm-run") as pool:
            futures = [pool.submit(self._run_in_slot, view, spec) for spec in specs]
            for f in futures:
                f.exception()  # wait for every run, whatever one of them raised
        return [f.result() for f in futures]

    def _run_in_slot(self, view: sharedview.SharedView, spec: JobSpec) -> Report:
        with view.slot():  # the run's backend carries the batch's view
            return self._run_checked(spec, sharedview.SharedBackend.wrap(self.backend, view))

    def _sized_for(self, specs: list[JobSpec], workers: int) -> list[JobSpec]:
        """``specs`` with ``alloc_nodes`` / ``alloc_gpus_per_node`` set for the batch
        (:func:`batch_size`) when no allocation exists yet: the first of them to run
        makes one the batch fits in. An existing allocation keeps its size."""
        from slurm_fsm.preflight import ClusterQueries

        if self.state() is not None or not isinstance(self.backend, ClusterQueries):
            return specs
        partition = specs[0].slurm_params.partition
        try:
            found = [p for p in self.backend.cluster_partitions() if p.name == partition]
        except SlurmFsmError:
            return specs  # sinfo failed: the first spec decides, as without run_many
        node_gpus = max(found[0].gpus_per_node, default=None) if found else None
        size = batch_size(specs, workers, node_gpus, found[0].nodes if found else None)
        if size is None:
            return specs
        if self.events is not None:
            self.events.message(
                f"run_many: the allocation is made for the batch: {size.nodes} node(s), "
                f"{size.gpus_per_node} GPU(s) per node ({size.reason})")
        from slurm_fsm.convert import NonNegativeInt, PositiveInt

        return [attrs.evolve(s, alloc_nodes=PositiveInt(max(size.nodes, s.slurm_params.nodes)),
                             alloc_gpus_per_node=NonNegativeInt(size.gpus_per_node))
                if s.slurm_params.partition == partition else s for s in specs]

    def reuse_problems(self, spec: JobSpec) -> list[str]:
        """Why ``spec`` would not simply reuse the allocation of the state file, by the
        rules of :data:`SHARING_RULES` that need no Slurm call; ``[]`` when it would
        (Slurm may still say the job is gone or expiring)."""
        from slurm_fsm.step0.table import incompatibilities, same_container

        if spec.repo_root.resolve() != self.repo_root:
            return [f"repo_root differs ({spec.repo_root} vs {self.repo_root})"]
        alloc = self.state()
        if alloc is None:
            return ["no allocation yet (no state file): the first run allocates"]
        problems = incompatibilities(alloc, spec)
        if not problems and not same_container(alloc, spec):
            problems.append(f"container_name {spec.container_name!r} is not the imported "
                            f"{alloc.container_name!r}: it is imported and installed first "
                            "(the allocation is kept)")
        return problems

    # ---------------------------------------------------------------- ask Slurm
    def status(self, spec: JobSpec | None = None) -> AllocationStatus:
        """The state file and one ``squeue -j`` of its job (no lock, changes nothing).
        With ``spec``: also whether its job would be admitted on the allocation's time
        left (its expected duration from the run history beside the state file)."""
        alloc = self.state()
        successor = self._successor(spec)
        drained = self._drained(alloc.job_id if alloc else None)
        if alloc is None:
            return AllocationStatus(state_file=self.state_path, job_id=None,
                                    successor=successor, drained=drained)
        known = AllocationStatus(
            state_file=self.state_path, job_id=alloc.job_id, nodelist=alloc.nodelist,
            partition=alloc.partition, account=alloc.account, nodes=alloc.nodes,
            container_name=alloc.container_name, docker_image=alloc.docker_image,
            installed=alloc.installed, successor=successor, drained=drained,
        )
        try:
            info = self.backend.query_job(alloc.job_id)
        except JobNotFound:
            return known
        from slurm_fsm.runsteps import running_jobs

        admission = None
        if spec is not None:
            from slurm_fsm.history import RunHistory
            from slurm_fsm.step0.table import job_fits

            est = RunHistory(StatePaths.for_state_file(self.state_path).history).estimate(spec)
            admission = {"expected_s": est.seconds, "source": est.source,
                         "detail": est.detail, "text": est.describe(),
                         "fits": job_fits(info, est.seconds)}
        return attrs.evolve(known, slurm_state=info.state, time_left=info.time_left,
                            job_name=info.name, user=info.user,
                            jobs=tuple(running_jobs(self.backend, RunBook(self.state_path),
                                                    alloc.job_id)),
                            admission=admission)

    def _drained(self, current: str | None) -> dict[str, Any] | None:
        """The allocation a hand-off left draining (its record beside the state file)
        and one ``squeue -j`` of it; None when there is none, or it is gone. Status
        releases nothing: the next run's validation does."""
        from slurm_fsm.state import StateStore
        from slurm_fsm.step0.table import same_generation

        try:
            old = StateStore(StatePaths.for_state_file(self.state_path).drained_state).read()
        except StateFileError:
            return None
        if old is None or old.job_id == current:
            return None
        try:
            info = self.backend.query_job(old.job_id)
        except JobNotFound:
            return None
        if not info.state.is_live or not same_generation(old, info):
            return None
        return {"job_id": old.job_id, "slurm_state": str(info.state),
                "time_left": info.time_left.as_slurm()}

    def _successor(self, spec: JobSpec | None) -> dict[str, Any] | None:
        """The warm successor's state file and record, and one ``squeue -j`` of it."""
        from slurm_fsm.state import StateStore
        from slurm_fsm.successor import read_successor

        try:
            succ = StateStore(StatePaths.for_state_file(self.state_path).successor_state).read()
        except StateFileError:
            return None
        if succ is None:
            return None
        record = read_successor(StatePaths.for_state_file(self.state_path).successor_record)
        if record is not None and record.job_id != succ.job_id:
            record = None
        try:
            info: JobInfo | None = self.backend.query_job(succ.job_id)
        except JobNotFound:
            info = None
        set_up = succ.installed or succ.docker_image is None or (
            spec is not None and not spec.installs and succ.container_name is not None)
        if info is None or not info.state.is_live:
            phase = "gone"
        elif info.state.is_pending:
            phase = "pending"
        elif set_up:
            phase = "ready"
        elif record is not None and record.phase.value == "failed":
            phase = "failed"
        else:
            phase = ("installing" if succ.container_name else "importing") \
                if record is not None and record.warmer_pid else "not set up (no warmer)"
        return {"job_id": succ.job_id, "job_name": record.job_name if record else None,
                "slurm_state": info.state.value if info else None,
                "reason": info.reason if info else None,
                "start_time": info.start_time if info else None,
                "time_left": info.time_left.as_slurm() if info else None,
                "phase": phase, "predecessor": record.predecessor if record else None,
                "warmer_pid": record.warmer_pid if record else None,
                "requested_at": record.requested_at if record else None}

    def time_left(self) -> Duration | None:
        """Time left of the allocation, ``None`` when there is none (or it is gone)."""
        return self.status().time_left

    # ------------------------------------------------------------------- release
    def release(self, spec: JobSpec | None = None) -> Report:
        """Cancel the allocation (step 0A: only when it is ours) and drop its state file.

        ``spec`` defaults to the last spec run (or given to :meth:`for_spec`); one is
        needed because the job name and account decide what "ours" is.
        """
        from slurm_fsm.executor import Executor

        spec = spec or self._last_spec
        if spec is None:
            raise SpecError("release", ["(spec): no spec was run through this allocation; "
                                        "pass the spec whose allocation to release"])
        self._check(attrs.evolve(spec, persistent_mode=True))
        spec = attrs.evolve(spec, release_allocation=True)
        report = Executor(spec, self.backend, clock=self.clock, events=self.events,
                          policy=self.policy, state_path=self._state_path).run()
        self.reports.append(report)
        return report

    # ----------------------------------------------------------- context manager
    def __enter__(self) -> Allocation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._mutex:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)  # submitted runs end before the release
        if self._last_spec is not None and self.state() is not None:
            self.release()
