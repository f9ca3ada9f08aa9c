"""A whole job: optional pre-step, step 0, then steps 1-5 -> :class:`Report`.

``Executor(spec, backend).run()`` is the one entry point. It owns no Slurm
knowledge of its own: step 0 and the pre-flight are the machine's, command
lines are the backend's, log reading and status decisions are in
:mod:`slurm_fsm.logs` and :mod:`slurm_fsm.results`.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm import placement
from slurm_fsm.backend import BatchRequest, JobOutcome, ScriptRequest, SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.errors import (
    BackendError,
    JobNotFound,
    SpecError,
)

# Events, GuardedEvents, PreStep and PreStepResult live in slurm_fsm.events (below the
# build, which needs them too); importable from here as before
from slurm_fsm.events import Events, GuardedEvents, PreStep
from slurm_fsm.events import PreStepResult as PreStepResult  # re-exported
from slurm_fsm.joboutput import output_for_spec
from slurm_fsm.jobstate import JobState
from slurm_fsm.lease import LeaseGate
from slurm_fsm.logs import DEFAULT_HANG_MARKER, grep, tail_lines
from slurm_fsm.machine import AllocationMachine, SetupFailed, State
from slurm_fsm.monitor import (
    PollPolicy,
    Watch,
    final_outcome,
    watch_batch_job,
    watch_script,
)
from slurm_fsm.report import Report
from slurm_fsm.results import (
    Status,
    decide,
    diagnose,
    errors_from,
    parse_output,
    result_warnings,
    setup_error_lines,
    summarize,
)
from slurm_fsm.runrecord import RunBook, RunRecord
from slurm_fsm.runsteps import RunSteps, stop_leftovers
from slurm_fsm.scriptcheck import batch_placement, container_name_problems
from slurm_fsm.spec import JobSpec, WorkflowType, script_problems
from slurm_fsm.state import StateStore

__all__ = [
    "Executor",
    "err_path_for",
    "log_path_for",
    "outcome_exit_code",
    "point_latest",
    "run_book",
    "run_log_path",
]


def log_path_for(spec: JobSpec, job_id: str) -> Path:
    """One-shot stdout log: ``<work_dir>/<log_file_pattern with %j>``."""
    pattern = spec.log_file_pattern or "slurm-%j.out"
    return spec.work_dir / pattern.replace("%j", job_id)


def err_path_for(out: Path) -> Path:
    """The ``.err`` beside a ``.out`` (or ``<name>.err`` when it has no ``.out``)."""
    return out.with_suffix(".err") if out.suffix == ".out" else out.with_name(out.name + ".err")


#: What srun prints when Slurm ends a step at its job's time limit.
TIME_LIMIT_MARK = "DUE TO TIME LIMIT"


def outcome_exit_code(outcome: JobOutcome | None) -> int | None:
    """Accounting's ``ExitCode`` (``code:signal``) as one number: the code, or
    ``128 + signal`` for a job killed by a signal (``0:9`` -> 137), as the shell says."""
    if outcome is None:
        return None
    if outcome.exit_code == 0 and outcome.signal:
        return 128 + outcome.signal
    return outcome.exit_code


def run_log_path(spec: JobSpec, now: datetime | None = None) -> Path:
    """This persistent run's own log: ``<model>_<workflow>.<UTC stamp>.log`` in
    ``work_dir`` (``spec.persistent_log`` is a symlink to the latest one)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%f")[:-3] + "Z"
    base = spec.persistent_log
    path = base.with_name(f"{base.stem}.{stamp}{base.suffix}")
    n = 1
    while path.exists() or path.is_symlink():
        n += 1
        path = base.with_name(f"{base.stem}.{stamp}-{n}{base.suffix}")
    return path


def point_latest(link: Path, target: Path) -> str:
    """Make ``link`` a relative symlink to ``target`` (atomically). A regular file at
    ``link`` (a log of an older version) is kept under a stamped name first. A
    problem comes back as a warning text, never raised."""
    try:
        if link.exists() and not link.is_symlink():
            stamp = datetime.fromtimestamp(link.stat().st_mtime, UTC).strftime(
                "%Y%m%dT%H%M%S")
            link.rename(link.with_name(f"{link.stem}.{stamp}Z-old{link.suffix}"))
        # an unguessable name: os.symlink never replaces what someone planted there
        tmp = link.with_name(f".{link.name}.{secrets.token_hex(8)}.tmp")
        os.symlink(target.name, tmp)
        os.replace(tmp, link)
    except OSError as exc:
        return f"could not point {link} at this run's log {target}: {exc}"
    return ""


def run_book(spec: JobSpec, state_path: Path | None = None) -> RunBook:
    """The run records (one per persistent run, each its lease) beside the state file
    (``spec.state_path`` unless given): ``.slurm_run.<run id>.json``
    (``.slurm_run.fake.<run id>.json`` beside the fake's ``.slurm_alloc.fake.json``)."""
    return RunBook(state_path or spec.state_path)


def _hang_line(lines: list[str]) -> str | None:
    """The first line of ``lines`` with the hang marker (any case), or None."""
    marker = DEFAULT_HANG_MARKER.lower()
    return next((line for line in lines if marker in line.lower()), None)


@attrs.frozen(kw_only=True)
class _AllocationEnd:
    state: JobState  # how the allocation ended: TIMEOUT, CANCELLED, ...
    what: str  # in words
    note: str = ""
    cancelled_by: str = ""


def _beside(state_name: str, prefix: str, suffix: str) -> str:
    """The name of a file that belongs with the state file ``state_name``, made by
    replacing its ``.slurm_alloc`` with ``prefix`` (``.slurm_alloc.fake.json`` ->
    ``.slurm_run.fake.json``); ``<name>.<suffix>`` for a state file of another name."""
    if ".slurm_alloc" in state_name:
        return state_name.replace(".slurm_alloc", prefix, 1)
    return f"{state_name}.{suffix}"


class Executor:
    """Runs one job spec over one backend and returns a :class:`Report`."""

    def __init__(
        self,
        spec: JobSpec,
        backend: SlurmBackend,
        *,
        clock: Clock | None = None,
        events: Events | None = None,
        policy: PollPolicy | None = None,
        pre_step: PreStep | None = None,  # default: slurm_fsm.build.default_pre_step
        state_path: Path | None = None,
        lease_wait_s: float | None = None,
    ) -> None:
        self.spec = spec
        #: the allocation's state file: ``spec.state_path`` unless given (the fake
        #: backend of the CLI keeps its own, ``.slurm_alloc.fake.json``); the run record
        #: lives beside it and is named after it
        self.state_path = state_path or spec.state_path
        name = self.state_path.name
        self.runs = run_book(spec, self.state_path)
        #: how long a release or replacement waits for other runs' jobs (0: refuse)
        self.lease_wait_s = (float(spec.monitor_timeout_seconds) + 900.0
                             if lease_wait_s is None else lease_wait_s)
        #: salloc's output, beside the state file (the fake's own: ``.salloc.fake.log``)
        self.salloc_log = (spec.salloc_log if self.state_path == spec.state_path else
                           self.state_path.with_name(
                               _beside(name, ".salloc", "salloc").removesuffix(".json")
                               + ".log"))
        self.backend = backend
        # the backend's own clock unless told otherwise (a FakeCluster's fake clock)
        self.clock: Clock = clock or backend.clock
        # progress is best effort: nothing a sink does can fail or stall the run
        self.events = GuardedEvents(events or Events())
        self.policy = policy or PollPolicy()
        self.pre_step = pre_step
        self.machine: AllocationMachine | None = None
        self._timings: dict[str, float] = {}
        self._pre_notes: list[str] = []
        self._log_path: Path | None = None  # this run's job log, once known
        self._job_id: str | None = None  # the one-shot job, once submitted

    # ------------------------------------------------------------------------ public
    def run(self) -> Report:
        """Run the job. Raises SpecError (no Slurm call made) when the script is missing."""
        spec = self.spec
        t0 = self.clock.now()
        if not spec.release_allocation:
            self._check_inputs()
        warnings: list[str] = list(spec.load_warnings)  # did-you-mean keys
        if spec.build_project and not spec.release_allocation:
            pre_step = self.pre_step
            if pre_step is None:
                from slurm_fsm.build import default_pre_step  # build imports this module

                pre_step = default_pre_step
            self.events.state("PreStep", "resolving image and building")
            pre = pre_step(spec, self.backend, self.events)
            self._timings["pre_step_s"] = self.clock.now() - t0
            warnings.extend(pre.warnings)
            if not pre.ok:
                return self._finish(Report(
                    status=Status.BUILD_FAILED, task_type=spec.workflow_type.value,
                    mode="persistent" if spec.persistent_mode else "one-shot",
                    job_id=pre.job_id, log_files={"stdout": pre.log_path, "stderr": None},
                    work_dir=str(spec.work_dir), summary=pre.summary or "build failed",
                    errors=errors_from(list(pre.log_tail)), warnings=warnings,
                    diagnosis=diagnose(Status.BUILD_FAILED, exit_code=None, slurm_state=None,
                                       log_empty=not pre.log_tail, log_lines=list(pre.log_tail)),
                    path=["PreStep"], notes=["nothing allocated, nothing run"],
                    log_tail=list(pre.log_tail), timings=dict(self._timings),
                ), t0)
            spec = pre.spec
            self.spec = spec
            self._pre_notes.append(
                f"pre-step: {pre.summary or 'build passed'}"
                + (f" (build job {pre.job_id}, log {pre.log_path})" if pre.job_id else ""))
        if spec.release_allocation:
            return self._finish(self._release(), t0)
        if not spec.persistent_mode:
            return self._finish(self._one_shot(warnings), t0)
        return self._finish(self._persistent(warnings), t0)

    def interrupted_report(self, why: str) -> Report:
        """What is known of a run stopped by a signal or Ctrl-C, as a CANCELLED report
        (the CLI prints it, so that ``--json`` always gives one document). By then the
        monitor has cancelled the running step (persistent) or the job (one-shot)."""
        spec = self.spec
        m = self.machine
        log = self._log_path
        tail = tail_lines(log, 50) if log is not None else []
        mode = ("release" if spec.release_allocation else
                "persistent" if spec.persistent_mode else "one-shot")
        alloc = m.alloc.job_id if m is not None and m.alloc is not None else None
        kept = (f"; allocation {alloc} is kept" if alloc and mode == "persistent" else "")
        problem = self.events.problem
        return Report(
            status=Status.CANCELLED, task_type=spec.workflow_type.value, mode=mode,
            job_id=self._job_id, allocation_id=alloc,
            log_files={"stdout": str(log) if log else None, "stderr": None},
            work_dir=str(spec.work_dir), summary=f"CANCELLED: {why}{kept}", errors=[why],
            warnings=(list(m.warnings) if m else []) + (
                [f"progress output stopped ({problem})"] if problem else []),
            path=m.path if m else [], notes=(list(m.notes) if m else []) + self._pre_notes,
            log_tail=tail, timings=dict(self._timings),
        )

    # ---------------------------------------------------------------------- checks
    def _check_inputs(self) -> None:
        """Input problems found before any Slurm command: a missing script, a work_dir
        that cannot be made or written."""
        problems = script_problems(self.spec.script_path)
        problems += container_name_problems(self.spec)  # the script's own --container-name
        work = self.spec.work_dir
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problems.append(f"work_dir: cannot create {work}: {exc.strerror}")
        else:
            if not os.access(work, os.W_OK | os.X_OK):
                problems.append(f"work_dir: not writable: {work}")
        if problems:
            raise SpecError("job spec", problems)

    # ---------------------------------------------------------------------- release
    def _new_machine(self) -> AllocationMachine:
        # the lock covers step 0 (and the lease); the jobs of several runs overlap in
        # the allocation, and their leases keep it (and their container) from change
        store = StateStore(self.state_path,
                           lock_timeout_s=self.spec.monitor_timeout_seconds + 900.0)
        gate = LeaseGate(self.runs, wait_s=self.lease_wait_s, clock=self.clock,
                         say=self.events.message)
        m = AllocationMachine(self.spec, self.backend, clock=self.clock,
                              log=self.events.message, store=store, salloc_log=self.salloc_log,
                              leases=gate)
        self.machine = m
        return m

    def _release(self) -> Report:
        m = self._new_machine()
        state = m.prepare()
        job_id = m.released_job_id
        if state is State.Released:
            status, summary = Status.RELEASED, m.history[-1].reason
        else:
            status = Status.ERROR
            summary = m.failure.message if m.failure else "release failed"
        return self._base_report(m, status=status, mode="release", summary=summary,
                                 allocation_id=job_id)

    # -------------------------------------------------------------------- persistent
    def _persistent(self, warnings: list[str]) -> Report:
        m = self._new_machine()
        with m.locked():  # step 0, the dead runs' leftovers, this run's lease
            done = self._step0(m, warnings)
        if isinstance(done, Report):
            return done
        steps = RunSteps(self.backend, self.runs, done, clock=self.clock,
                         say=self.events.message)
        try:
            return self._persistent_run(m, steps, warnings)
        finally:  # an error or an interrupt on the way: the same end as a normal one
            if not steps.finished and (steps.script is None or steps.script.poll() is not None):
                steps.finish()

    def _step0(self, m: AllocationMachine, warnings: list[str]) -> Report | RunRecord:
        """Under the state file's lock: step 0, then what dead runs left is stopped and
        this run's lease is taken. The lease, or the report of a failure."""
        spec = self.spec
        t = self.clock.now()
        self.events.state("Step0", "validating or allocating")
        state = m.prepare()
        self._timings["step0_s"] = self.clock.now() - t
        if state is not State.Ready or m.alloc is None:
            msg = m.failure.message if m.failure else f"step 0 ended in {state.value}"
            # a failed setup step: its pyxis / pip lines each on their own
            error = m.failure.error if m.failure else None
            errors = [msg, *setup_error_lines(
                error.output if isinstance(error, SetupFailed) else msg)]
            return self._base_report(m, status=Status.ERROR, mode="persistent", summary=msg,
                                     errors=errors, extra_warnings=warnings,
                                     diagnosis=diagnose(Status.ERROR, exit_code=None,
                                                        slurm_state=None, log_empty=False,
                                                        log_lines=msg.splitlines()))
        alloc = m.alloc
        # before the pre-flight's own step: a dead run's step would hold the nodes
        for text in stop_leftovers(self.backend, self.runs, alloc.job_id, self.clock):
            warnings.append(text)
            self.events.message(f"WARNING: {text}")
        try:
            lease = self.runs.start(alloc.job_id, spec=str(spec.script_path),
                                    model=spec.model_name or "",
                                    container=spec.container_name or "")
        except OSError as exc:
            msg = (f"could not write this run's record (its lease on allocation "
                   f"{alloc.job_id}) in {self.runs.folder}: {exc}; the job was not started")
            m.finish(reason=msg)
            return self._base_report(m, status=Status.ERROR, mode="persistent", summary=msg,
                                     errors=[msg], allocation_id=alloc.job_id,
                                     extra_warnings=warnings)
        if m.leases is not None:
            m.leases.own = lease.run_id
        return lease

    def _persistent_run(self, m: AllocationMachine, steps: RunSteps, warnings: list[str]
                        ) -> Report:
        """Pre-flight, the script, the report (the lock is free: other runs overlap)."""
        spec = self.spec
        assert m.alloc is not None
        alloc = m.alloc
        t = self.clock.now()
        m.run()  # pre-flight; a failure routes the machine into Failed
        if m.state is not State.Running:
            msg = m.failure.message if m.failure else "pre-flight failed"
            return self._base_report(m, status=Status.ERROR, mode="persistent", summary=msg,
                                     errors=[msg], allocation_id=alloc.job_id,
                                     extra_warnings=warnings)
        info, left = m.info_now()
        assert info is not None
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        log = self._log_path = run_log_path(spec)
        self.events.message(
            f"Running {spec.script_path} on allocation {alloc.job_id} ({alloc.nodelist}, "
            f"{left} left), container {spec.container_name or '-'}; log {log}"
        )
        env = placement.script_env(attrs.evolve(info, nodelist=info.nodelist or alloc.nodelist),
                                   spec.slurm_params, spec.script_path)
        try:
            script = self.backend.start_script(ScriptRequest(
                script_path=spec.script_path, log_path=log, env=env, cwd=spec.work_dir,
            ))
        except OSError as exc:  # bash missing, log not writable, ...
            m.finish(reason=f"script did not start: {exc}")
            msg = f"could not start bash {spec.script_path}: {exc}"
            return self._base_report(m, status=Status.ERROR, mode="persistent", summary=msg,
                                     errors=[msg], allocation_id=alloc.job_id,
                                     extra_warnings=warnings)
        problem = point_latest(spec.persistent_log, log)
        if problem:
            warnings.append(problem)
        steps.started(script, str(log))
        self._timings["start_s"] = self.clock.now() - t
        self.events.state("Running", f"job on allocation {alloc.job_id}")
        self.events.job_state(f"RUNNING (a step of allocation {alloc.job_id})")

        # "waiting for GPUs": this run's PENDING step in Slurm, or srun's line (22.05 only)
        queue = placement.QueueWatch(
            self.events.output, self.events.message, spec.slurm_params.gpus_per_node or 0,
            pending=placement.PendingSteps(self.backend, alloc.job_id, steps.pids,
                                           self.clock))

        def tick(elapsed: float, line: str) -> None:
            steps.sample()
            queue.poll()
            self.events.tick(elapsed, line)

        watch = watch_script(
            script, backend=self.backend, job_id=alloc.job_id,
            timeout_s=float(spec.monitor_timeout_seconds), clock=self.clock,
            policy=self.policy, on_message=self.events.message, on_tick=tick,
            stop=steps.stop,
            output=output_for_spec(spec, [log], on_text=queue),
        )
        # a step never outlives its run: what the script left is stopped now
        for problem in steps.finish():
            self.events.message(f"WARNING: {problem}")
            watch.messages.append(problem)
        self._timings["run_s"] = watch.elapsed_s
        ended = self._allocation_end(alloc.job_id, watch, log)
        if ended is not None:
            m.finish(reason=f"allocation {alloc.job_id} ended under the job ({ended.state})",
                     allocation_gone=True)
            return self._collect(
                m, watch, mode="persistent", job_id=None, allocation_id=alloc.job_id,
                slurm_state=ended.state, exit_code=watch.exit_code, elapsed=watch.elapsed_s,
                out=log, err=None, extra_warnings=warnings,
                notes=[ended.note] if ended.note else [],
                summary=(f"allocation {alloc.job_id} {ended.what} and ended under the job; "
                         f"the step exited {watch.exit_code}. The state file is dropped: the "
                         "next run allocates anew"),
                extra_metrics={"cancelled_by": ended.cancelled_by} if ended.cancelled_by
                else {},
            )
        m.finish(reason=self._finish_reason(watch))
        return self._collect(
            m, watch, mode="persistent", job_id=None, allocation_id=alloc.job_id,
            slurm_state=None, exit_code=watch.exit_code, elapsed=watch.elapsed_s,
            out=log, err=None, extra_warnings=warnings,
        )

    def _allocation_end(self, alloc_id: str, watch: Watch, log: Path) -> _AllocationEnd | None:
        """After every job: did the allocation itself end under it (scancel of the
        allocation, its time limit, a node failure)? None when it still runs.

        Asked whatever the script's exit code: srun exits 0 when the one node of its
        allocation fails (``srun: error: Node failure on n1``, Slurm 22.05)."""
        if watch.hang or watch.timed_out:
            return None
        try:
            info = self.backend.query_job(alloc_id)
        except JobNotFound:
            pass
        except BackendError as exc:
            watch.messages.append(f"could not check allocation {alloc_id}: {exc}")
            return None
        else:
            if info.state.is_live:
                return None
        outcome, _why = final_outcome(self.backend, alloc_id, self.clock, attempts=4)
        time_limit = bool(grep(log, [TIME_LIMIT_MARK]).get(TIME_LIMIT_MARK)) \
            if log.exists() else False
        if outcome is not None and not outcome.state.exited:
            state = outcome.state
            note = ""
        elif time_limit:
            state, note = JobState.TIMEOUT, (f"Slurm could not say how allocation {alloc_id} "
                                             "ended; the log says DUE TO TIME LIMIT")
        else:
            state, note = JobState.CANCELLED, (f"Slurm could not say how allocation "
                                               f"{alloc_id} ended; taken as cancelled")
        what = state.ended_how
        by = outcome.cancelled_by if outcome is not None else ""
        if state is JobState.CANCELLED and by:
            what += f" (by uid {by})"
        return _AllocationEnd(state=state, what=what, note=note, cancelled_by=by)

    @staticmethod
    def _finish_reason(watch: Watch) -> str:
        if watch.hang:
            return f"hang detected; cancelled {', '.join(watch.cancelled_steps) or 'no step'}"
        if watch.timed_out:
            return "monitor timeout; step cancelled"
        return f"script exited {watch.exit_code}"

    # ---------------------------------------------------------------------- one-shot
    def _one_shot(self, warnings: list[str]) -> Report:
        spec = self.spec
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        self.events.state("Submitting", f"sbatch {spec.script_path}")
        path = ["Submitting"]
        # the script's own #SBATCH --partition/--account win (said when they differ)
        partition, account, notes = batch_placement(spec)
        warnings.extend(notes)
        try:
            job_id = self.backend.submit(BatchRequest(
                script_path=spec.script_path, work_dir=spec.work_dir,
                partition=partition, account=account,
            ))
        except BackendError as exc:
            return Report(
                status=Status.ERROR, task_type=spec.workflow_type.value, mode="one-shot",
                work_dir=str(spec.work_dir), summary=f"sbatch failed: {exc}",
                errors=[str(exc)], warnings=warnings, path=path, timings=dict(self._timings),
            )
        self._job_id = job_id
        out = self._log_path = log_path_for(spec, job_id)
        err = err_path_for(out)
        self.events.message(
            f"Submitted batch job {job_id}: script {spec.script_path}, work dir "
            f"{spec.work_dir}, logs {out} and {err}; monitor with `squeue -j {job_id}` or "
            f"`sacct -j {job_id}`"
        )
        self.events.state("Monitoring", f"job {job_id}")
        path.append("Monitoring")
        watch = watch_batch_job(
            job_id, backend=self.backend, log_path=out,
            timeout_s=float(spec.monitor_timeout_seconds), clock=self.clock, policy=self.policy,
            on_output=self.events.output, on_message=self.events.message,
            on_tick=self.events.tick, on_state=self.events.job_state,
            output=output_for_spec(spec, [out, err], on_text=self.events.output),
        )
        if watch.never_starts:
            msg = (f"job {job_id} can never start: Slurm keeps it PENDING with reason "
                   f"{watch.never_starts} (the request exceeds a limit of its partition, "
                   "account or QOS); cancelled")
            return Report(
                status=Status.ERROR, task_type=spec.workflow_type.value, mode="one-shot",
                job_id=job_id, work_dir=str(spec.work_dir), summary=msg, errors=[msg],
                warnings=warnings + watch.messages, path=[*path, "Collected"],
                timings=dict(self._timings),
            )
        outcome, why = final_outcome(self.backend, job_id, self.clock)
        note = (f"{why}; the exit code is unknown: FAILED if the log shows a failure, "
                "otherwise ERROR" if why else "")
        path.append("Collected")
        notes = [note] if note else []
        elapsed = float(outcome.elapsed.seconds) if outcome and outcome.elapsed.seconds \
            is not None else watch.elapsed_s
        self._timings["run_s"] = watch.elapsed_s
        extra: dict[str, Any] = {}
        if outcome is not None:
            if outcome.cancelled_by:
                extra["cancelled_by"] = outcome.cancelled_by
            extra["max_rss"] = outcome.max_rss
            extra["accounting_source"] = outcome.source
        return self._collect(
            None, watch, mode="one-shot", job_id=job_id, allocation_id=None,
            slurm_state=outcome.state if outcome else None,
            exit_code=outcome_exit_code(outcome), elapsed=elapsed, out=out, err=err,
            extra_warnings=warnings, path=path, notes=notes, extra_metrics=extra,
        )

    # ---------------------------------------------------------------------- collect
    def _collect(
        self,
        m: AllocationMachine | None,
        watch: Watch,
        *,
        mode: str,
        job_id: str | None,
        allocation_id: str | None,
        slurm_state: str | None,
        exit_code: int | None,
        elapsed: float | None,
        out: Path,
        err: Path | None,
        extra_warnings: list[str],
        path: list[str] | None = None,
        notes: list[str] | None = None,
        summary: str | None = None,
        extra_metrics: dict[str, Any] | None = None,
    ) -> Report:
        """The report of a job that ran, built once. ``summary`` (after the status word)
        replaces the usual one: an allocation that ended under the job says so.
        ``extra_metrics`` (accounting's figures) add to the parser's metrics where those
        have no such key (``cancelled_by`` always)."""
        spec = self.spec
        output = watch.output
        if output is None:  # a Watch built by hand: read the files now, the same way
            output = output_for_spec(spec, [out] if err is None else [out, err])
            output.finish()
        hits = output.pattern_hits
        success_hits = {p: hits.get(p, 0) for p in spec.success_patterns}
        failure_hits = {p: hits.get(p, 0) for p in spec.failure_patterns}
        relevant = output.parser_lines(100)
        metrics = parse_output(spec.workflow_type, relevant, spec.work_dir)
        decision = decide(
            exit_code=exit_code, slurm_state=slurm_state, hang=watch.hang,
            timed_out=watch.timed_out, success_hits=success_hits, failure_hits=failure_hits,
            success_patterns=list(spec.success_patterns), workflow_type=spec.workflow_type,
            metrics=metrics, timeout_s=float(spec.monitor_timeout_seconds),
            hang_line=(output.hang_line or _hang_line(output.tail())) if watch.hang else None,
        )
        status = decision.status
        failed = status is not Status.PASSED
        head = list(output.head) if failed else []
        err_tail = output.file_tail(err) if err is not None and err != out else []
        tail = output.tail(200 if status is Status.HANG_DETECTED else 100)
        log_empty = output.empty
        errors = errors_from(head + relevant + err_tail) if failed else []
        errors += [f"failure pattern found: {p!r} ({n} line(s))"
                   for p, n in failure_hits.items() if n]
        success_missing = bool(spec.success_patterns) and not any(success_hits.values())
        if success_missing and failed:
            errors.append("no success pattern found: " + ", ".join(spec.success_patterns))
        diagnosis = diagnose(status, exit_code=exit_code, slurm_state=slurm_state,
                             log_empty=log_empty, log_lines=head + tail + err_tail,
                             job_id=job_id, failure_hits=failure_hits,
                             success_missing=success_missing, metrics=metrics,
                             workflow_type=spec.workflow_type)
        if summary is not None:
            summary = f"{status.value}: {summary}"
        else:
            summary = self._summary(status, decision.reason, job_id, allocation_id,
                                    exit_code, watch, metrics, spec.workflow_type)
        metrics = {**metrics, "success_hits": success_hits, "failure_hits": failure_hits}
        for key, value in (extra_metrics or {}).items():
            if key == "cancelled_by":
                metrics[key] = value
            else:
                metrics.setdefault(key, value)
        if watch.cancelled_steps:
            metrics["cancelled_steps"] = list(watch.cancelled_steps)
        warnings = list(extra_warnings) + (list(m.warnings) if m else [])
        warnings += result_warnings(spec.workflow_type, metrics)
        warnings += [w for w in watch.messages if w not in warnings]
        return Report(
            status=status, task_type=spec.workflow_type.value, mode=mode, job_id=job_id,
            allocation_id=allocation_id,
            slurm_state=str(slurm_state) if slurm_state is not None else None,
            exit_code=exit_code,
            elapsed_s=round(elapsed, 3) if elapsed is not None else None,
            log_files={"stdout": str(out), "stderr": str(err) if err else None},
            work_dir=str(spec.work_dir), summary=summary, errors=errors,
            warnings=warnings, metrics=metrics, diagnosis=diagnosis,
            path=(m.path if m else []) + (path or []), notes=(m.notes if m else []) +
            (notes or []), log_head=head, log_tail=tail, err_tail=err_tail,
            timings=dict(self._timings),
        )

    @staticmethod
    def _summary(status: Status, reason: str, job_id: str | None, allocation_id: str | None,
                 exit_code: int | None, watch: Watch, metrics: dict[str, Any],
                 workflow_type: WorkflowType) -> str:
        """``STATUS: <the deciding reason>; <where>, exit code N; <details>; <what the
        parser found>``. A PASSED summary has no reason: ``PASSED: <where>, ...``."""
        where = f"step on allocation {allocation_id}" if allocation_id else f"job {job_id}"
        lead = f"{status.value}: " if status is Status.PASSED else f"{status.value}: {reason}; "
        text = f"{lead}{where}, exit code {exit_code}"
        if watch.hang_after_end:
            text += "; hang reported in the output, the job then ended by itself"
        elif watch.hang:
            if watch.cancelled_steps:
                text += f"; hang detected, cancelled {', '.join(watch.cancelled_steps)}"
            elif watch.uncancelled_steps:
                text += ("; hang detected, script stopped; step(s) could not be cancelled: "
                         + ", ".join(watch.uncancelled_steps))
            elif allocation_id:
                text += "; hang detected, script stopped (no step was running)"
            else:
                text += f"; hang detected, cancelled job {job_id}"
        if watch.timed_out:
            text += "; monitor timeout"
        found = summarize(workflow_type, metrics)
        if found:
            text += f"; {found}"
        return text

    def _base_report(self, m: AllocationMachine, *, status: Status, mode: str, summary: str,
                     errors: list[str] | None = None, allocation_id: str | None = None,
                     extra_warnings: list[str] | None = None,
                     diagnosis: list[dict[str, str]] | None = None) -> Report:
        spec = self.spec
        log = self._log_path if mode == "persistent" else None
        from_salloc = m.failure is not None and m.failure.step == State.Allocating.value
        salloc_tail = tail_lines(m.salloc_log, 20) if from_salloc else []
        return Report(
            status=status, task_type=spec.workflow_type.value, mode=mode,
            allocation_id=allocation_id or (m.alloc.job_id if m.alloc else None),
            log_files={"stdout": str(log) if log else None,
                       "stderr": str(m.salloc_log) if salloc_tail else None},
            work_dir=str(spec.work_dir), summary=summary, errors=errors or [],
            warnings=(extra_warnings or []) + list(m.warnings),
            diagnosis=diagnosis or [], path=m.path, notes=list(m.notes),
            log_tail=salloc_tail, timings=dict(self._timings),
        )

    def _finish(self, report: Report, t0: float) -> Report:
        """The final report: ``total_s`` on the executor's clock, the pre-step's notes
        first, and a warning when progress output stopped. (A :class:`Report` is frozen:
        this is a new one.)"""
        self.events.state("Done", report.summary)
        problem = self.events.problem
        stopped = ([f"progress output stopped ({problem}); the run went on without it"]
                   if problem is not None else [])
        return attrs.evolve(
            report,
            timings={**report.timings, "total_s": round(self.clock.now() - t0, 4)},
            notes=[*self._pre_notes, *report.notes],
            warnings=[*report.warnings, *stopped],
        )
