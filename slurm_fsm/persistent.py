"""The persistent path: step 0 (the allocation machine), this run's lease, the
pre-flight, ``bash <script>`` on the allocation, and how the allocation ended; and the
release.

:class:`PersistentRun` only observes: it returns what it saw as
:class:`~slurm_fsm.runfacts.RunFacts`, and :func:`slurm_fsm.results.report_of` judges.
It owns its :class:`~slurm_fsm.monitor.Watch` and its warnings.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm import leasestop, placement, sharedview
from slurm_fsm.backend import LeaseHandle, RunningScript, ScriptRequest, SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.errors import AllocationVanished, BackendError, JobNotFound
from slurm_fsm.events import Events
from slurm_fsm.joboutput import output_for_spec
from slurm_fsm.jobstate import JobState
from slurm_fsm.lease import LeaseGate, lease_name, wait_out_closing
from slurm_fsm.logs import tail_lines
from slurm_fsm.machine import AllocationMachine, SetupFailed
from slurm_fsm.monitor import PollPolicy, Watch, final_outcome, step_end_of, watch_script
from slurm_fsm.paths import StatePaths
from slurm_fsm.runfacts import Failure, Mode, Phase, RunFacts, StateSource, StepEnd
from slurm_fsm.runrecord import RunBook, RunRecord, new_run_id
from slurm_fsm.runsteps import RunSteps, stop_leftovers
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState, StateStore
from slurm_fsm.step0.outcome import SuccessorWait
from slurm_fsm.step0.table import State

__all__ = ["PersistentRun", "RunTicket", "point_latest", "run_book", "run_log_path"]

#: A lease may be broken this long after its job's monitor timeout (its ``max_until``).
LEASE_MARGIN_S = 900.0
#: Step 0 is done at most this often in one run: again when its allocation ended before
#: the run's lease step started (another login node's release; issue 28's races).
STEP0_ATTEMPTS = 3

#: What srun prints when Slurm ends a step at its job's time limit.
TIME_LIMIT_MARK = "DUE TO TIME LIMIT"
#: The pauses between the questions to accounting about how this run's steps ended
#: (slurmdbd may lag a step's end by a moment): at most 5 ``sacct``, 7.5 s in all.
STEP_ACCOUNTING_WAITS_S = (0.5, 1.0, 2.0, 4.0)


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


@attrs.frozen(kw_only=True)
class _AllocationEnd:
    state: JobState  # how the allocation ended: TIMEOUT, CANCELLED, ...
    source: StateSource
    what: str  # in words
    note: str = ""
    cancelled_by: str = ""


def _died_of(exit_code: int | None, signum: int | None) -> bool:
    """``exit_code`` is that of a process killed by ``signum`` (bash's 128+N, or -N)."""
    return signum is not None and exit_code in (128 + signum, -signum)


def _finish_reason(watch: Watch) -> str:
    if watch.hang:
        return f"hang detected; cancelled {', '.join(watch.cancelled_steps) or 'no step'}"
    if watch.timed_out:
        return "monitor timeout; step cancelled"
    return f"script exited {watch.exit_code}"


@attrs.frozen
class RunTicket:
    """A started persistent run between :meth:`PersistentRun.start` and
    :meth:`PersistentRun.collect`: the machine it stepped, its allocation, its steps'
    keeper (the run record), the running script and its log."""

    machine: AllocationMachine
    alloc: AllocState
    steps: RunSteps
    script: RunningScript
    log: Path

    @property
    def run_id(self) -> str:
        """The run's id (its record's)."""
        return self.steps.record.run_id


class PersistentRun:
    """One run of ``spec`` on the persistent allocation of the state file
    ``state_path`` (:meth:`run`), or its release (:meth:`release`)."""

    def __init__(self, spec: JobSpec, backend: SlurmBackend, *, clock: Clock, events: Events,
                 policy: PollPolicy, state_path: Path, lease_wait_s: float,
                 warnings: list[str], run_id: str | None = None) -> None:
        self.spec = spec
        #: this run's id: its lease step, its record and its owner's files
        self.run_id = run_id or new_run_id()
        self.backend = backend
        self.clock = clock
        self.events = events
        self.policy = policy
        self.state_path = state_path
        self.runs = run_book(spec, state_path)
        self.lease_wait_s = lease_wait_s
        #: salloc's output beside the state file (``.salloc.log``, ``.salloc.fake.log``)
        self.salloc_log = StatePaths.for_state_file(state_path).salloc_log
        self.warnings = list(warnings)
        #: what the monitor and the wind-down said (the report's warnings, after the
        #: parser's)
        self.messages: list[str] = []
        #: the machine this run steps (its driver: triggers, and :meth:`outcome` to
        #: read what it knows; never its fields)
        self.machine: AllocationMachine | None = None
        #: the lease gate this run's machine waits with (``own``: this run's lease)
        self.gate: LeaseGate | None = None
        self.log_path: Path | None = None  # this run's job log, once known
        self.timings: dict[str, float] = {}
        #: this run's lease step (from the end of step 0 until its job's steps are gone)
        self.lease: LeaseHandle | None = None
        #: told the script's exit code the moment the script has ended (before its
        #: steps are stopped and accounting is asked): the owner record keeps it, so that
        #: a verdict rebuilt after the owner died equals the one it would have given
        self.on_script_end: Callable[[int | None], None] | None = None
        #: the watch of a script that ended by itself (not a hang, not the monitor's
        #: timeout): a stop after it is judged from it (:meth:`facts_so_far`)
        self.ended_watch: Watch | None = None
        #: a detached run's hand-over to its agent (:func:`slurm_fsm.agent.hand_over`),
        #: asked once step 0 is done and the lease held: None when the agent holds the
        #: run (this run then raises :class:`~slurm_fsm.agent.HandedOver`), else why not
        #: (this process runs the job, and the report says why)
        self.hand_over: Callable[[AllocState], str | None] | None = None
        #: told the allocation's id and this run's lease step as soon as the lease is
        #: held, before the job starts (the owner record names them: issue 39)
        self.on_held: Callable[[str, str], None] | None = None

    # ----------------------------------------------------------------------- facts
    def _facts(self, phase: Phase, mode: Mode = Mode.PERSISTENT, **what: Any) -> RunFacts:
        """The facts with what the machine knows: its path, notes and warnings, the
        allocation, and salloc's last lines when step 0 failed allocating (only when
        this run asked for one: a failure before salloc names no older salloc log)."""
        o = self.machine.outcome() if self.machine is not None else None
        log = self.log_path if mode is Mode.PERSISTENT else None
        from_salloc = (o is not None and o.failure is not None and o.salloc_requested
                       and o.failure.step == State.Allocating.value)
        salloc_log = o.salloc_log if o is not None and from_salloc else None
        salloc_tail = (tuple(tail_lines(salloc_log, 20, shared=True))
                       if salloc_log is not None else ())
        known: dict[str, Any] = {
            "allocation_id": o.alloc.job_id if o is not None and o.alloc else None,
            "stdout": str(log) if log else None,
            "stderr": str(salloc_log) if salloc_log is not None and salloc_tail else None,
            "log_tail": salloc_tail,
        }
        known.update(what)
        return RunFacts(
            mode=mode, phase=phase, path=o.path if o else (),
            notes=(*(o.notes if o else ()), *known.pop("notes", ())),
            warnings=(*self.warnings, *(o.warnings if o else ())),
            messages=tuple(self.messages), timings=dict(self.timings), **known)

    def facts_so_far(self, interrupted: str, signum: int | None = None) -> RunFacts:
        """What is known of a run stopped by a signal or Ctrl-C (the monitor has
        cancelled the running step by then; the allocation is kept). A script that had
        ended by itself is judged from its end, unless it died of the very signal that
        stopped the run (``signum``): Ctrl-C reaches the whole process group, and a
        cancel of a run's agent every process of its step, the script's too, so the
        script may be seen ending a moment before the stop itself."""
        mode = Mode.RELEASE if self.spec.release_allocation else Mode.PERSISTENT
        log = self.log_path
        watch = self.ended_watch
        if (watch is not None and watch.output is not None and log is not None
                and not _died_of(watch.exit_code, signum)):
            # the script had ended: a stop now cancels nothing of the job; it is judged
            # from its exit code and its log (accounting is not asked)
            return self._facts(
                Phase.COLLECTED, exit_code=watch.exit_code, elapsed_s=watch.elapsed_s,
                output=watch.output.snapshot(), stdout=str(log), stderr=None,
                notes=(f"{interrupted} after the script had ended (exit code "
                       f"{watch.exit_code}): judged from that and its log",))
        return self._facts(Phase.RUNNING if log else Phase.STEP0, mode,
                           interrupted=interrupted,
                           log_tail=tuple(tail_lines(log, 50)) if log is not None else ())

    # ------------------------------------------------------------------- the machine
    def _new_machine(self) -> AllocationMachine:
        # this process's leases still being stopped are gone before step 0 (a run's
        # report does not wait for its lease: slurm_fsm.leasestop)
        leasestop.settle()
        # the lock covers step 0 (and the lease); the jobs of several runs overlap in
        # the allocation, and their leases keep it (and their container) from change
        store = StateStore(self.state_path,
                           lock_timeout_s=self.spec.monitor_timeout_seconds + 900.0)
        self.gate = LeaseGate(self.runs, wait_s=self.lease_wait_s, clock=self.clock,
                              say=self._waiting, backend=self.backend)
        m = AllocationMachine(self.spec, self.backend, clock=self.clock,
                              log=self.events.message, store=store, salloc_log=self.salloc_log,
                              leases=self.gate,
                              warmer=self._warmer())
        self.machine = m
        return m

    def _warmer(self) -> Callable[[JobSpec], int | None] | None:
        """The warmer of the spec's successor (:func:`slurm_fsm.warmer.warmer_for`);
        None without ``warm_successor``, its module not loaded (a warm run's start)."""
        if not self.spec.warm_successor:
            return None
        from slurm_fsm.warmer import warmer_for

        return warmer_for(self.spec, self.backend, self.state_path)

    def _waiting(self, text: str) -> None:
        """A wait for other runs' jobs (the lease gate): said, and in the report's notes."""
        self.events.message(text)
        if self.machine is not None:
            self.machine.note(text)

    def release(self) -> RunFacts:
        """Release the allocation (waiting for other runs' leases)."""
        done = self._new_machine().prepare()
        alloc_id = done.released_job_id or (done.alloc.job_id if done.alloc else None)
        if done.state is State.Released:
            return self._facts(Phase.STEP0, Mode.RELEASE, released=True,
                               summary=done.summary, allocation_id=alloc_id)
        msg = done.failure.message if done.failure else "release failed"
        return self._facts(Phase.STEP0, Mode.RELEASE,
                           failure=Failure(phase=Phase.STEP0, message=msg),
                           allocation_id=alloc_id)

    # ---------------------------------------------------------------------- the run
    def run(self) -> RunFacts:
        """Step 0, the lease, the script started (:meth:`start`), then watched to its
        end and judged (:meth:`collect`)."""
        began = self.start()
        return began if isinstance(began, RunFacts) else self.collect(began)

    def start(self) -> RunTicket | RunFacts:
        """The first half of a run (issue 40's phase boundary): step 0, what dead runs
        left stopped, this run's lease, the pre-flight and the script started, its
        record written. A :class:`RunTicket` for :meth:`collect`, or the facts of a run
        that ended here (step 0 or the pre-flight failed, the script did not start: its
        steps and lease are then wound down already)."""
        for attempt in range(1, STEP0_ATTEMPTS + 1):
            m = self._new_machine()
            with m.locked():  # step 0, the dead runs' leftovers, this run's lease
                done = self._step0(m, again=attempt < STEP0_ATTEMPTS)
            if done is not None:
                break
        if isinstance(done, RunFacts):
            return done
        assert done is not None
        lease, alloc = done
        if self.on_held is not None and self.lease is not None:
            self.on_held(alloc.job_id, self.lease.name)
        if self.hand_over is not None:
            self._hand_over(alloc)
        steps = RunSteps(self.backend, self.runs, lease, clock=self.clock,
                         say=self.events.message)
        try:
            began = self._begin(m, alloc, steps)
        except BaseException:
            self._wind_down(steps, alloc)
            raise
        if isinstance(began, RunFacts):
            self._wind_down(steps, alloc)
        return began

    def collect(self, ticket: RunTicket) -> RunFacts:
        """The second half: the started script watched to its end, what it left
        stopped, and the facts the judge reads; the lease's step stopped after."""
        try:
            watch = self._watch(ticket.script, ticket.steps, ticket.log, ticket.alloc)
            return self._ended(ticket.machine, watch, ticket.alloc.job_id, ticket.log,
                               ticket.steps)
        finally:  # an error or an interrupt on the way: the same end as a normal one
            self._wind_down(ticket.steps, ticket.alloc)

    def _wind_down(self, steps: RunSteps, alloc: AllocState) -> None:
        """What the script left is stopped; once its steps are gone, the lease step is
        stopped (the report does not wait for it, :mod:`slurm_fsm.leasestop`: the next
        run, release or gate of this process does, and its exit)."""
        if not steps.finished and (steps.script is None or steps.script.poll() is not None):
            steps.finish()
        if steps.finished and self.lease is not None:  # its job's steps are gone
            leasestop.stop_soon(self.lease, alloc.job_id, on_error=self._lease_error)

    def _lease_error(self, exc: BaseException) -> None:
        """The wait for this run's lease step to end failed (after the report): said."""
        self.events.message(f"WARNING: stopping this run's lease step failed: {exc}")

    def _hand_over(self, alloc: AllocState) -> None:
        """Hand the run to its agent; HandedOver when it holds it (this run's lease is
        stopped then: the agent's own holds the allocation), else a warning saying why
        this process runs the job."""
        from slurm_fsm.agent import HandedOver

        assert self.hand_over is not None
        why = self.hand_over(alloc)
        if why is None:
            if self.lease is not None:
                self.lease.stop()
            raise HandedOver(alloc.job_id)
        self._warn(f"{why}; the supervisor on this login node runs the job (it ends with "
                   "the login node)")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.events.message(f"WARNING: {text}")

    def _step0(self, m: AllocationMachine, *, again: bool = False
               ) -> RunFacts | tuple[RunRecord, AllocState] | None:
        """Under the state file's lock: step 0, then what dead runs left is stopped and
        this run's lease is taken. The lease, or the facts of a failure; None (when
        ``again``) when the allocation was gone before the lease step could start: a
        release or a replacement on another login node (the state file's lock does
        not hold across hosts) had found no lease of this run, rightly: step 0 again."""
        t = self.clock.now()
        self.events.state(Phase.STEP0.value, "validating or allocating")
        done = m.prepare()
        self.timings["step0_s"] = self.clock.now() - t
        self._note_successor_wait(m, done.successor_wait)
        if done.setup_note is not None:  # issue 42: the parts of step 0
            self.timings.update(done.setup_seconds)
            m.note(done.setup_note)
        failure = done.failure
        if not done.ready or done.alloc is None:
            if again and failure is not None and isinstance(failure.error,
                                                            AllocationVanished):
                self._again(f"{failure.message} (cancelled by another run's release, "
                            "on another login node: no lease of this run held it yet)")
                return None
            msg = failure.message if failure else f"step 0 ended in {done.state.value}"
            # a failed setup step: its pyxis / pip lines each on their own
            error = failure.error if failure else None
            detail = error.output if isinstance(error, SetupFailed) else msg
            return self._facts(Phase.STEP0, failure=Failure(
                phase=Phase.STEP0, message=msg, detail=detail))
        alloc = done.alloc
        # before the pre-flight's own step: a dead run's step would hold the nodes
        for text in stop_leftovers(self.backend, self.runs, alloc.job_id, self.clock):
            self.warnings.append(text)
            self.events.message(f"WARNING: {text}")
        if self.hand_over is None:  # an agent asks its own
            m.start_gpu_check()  # the pre-flight's step, while the lease step starts
        lease = self._take_lease(alloc, again=again)
        return (lease, alloc) if isinstance(lease, RunRecord) else lease

    def _take_lease(self, alloc: AllocState, *, again: bool) -> RunFacts | RunRecord | None:
        """This run's lease on ``alloc``: the lease step first (every host sees it; a
        ``run_many`` batch shares one), then the record that names its run. The lease,
        the facts of a failure, or None (``again``): the allocation ended first."""
        spec = self.spec
        run_id = self.run_id
        max_until = time.time() + spec.monitor_timeout_seconds + LEASE_MARGIN_S
        shared: str | None = None
        try:
            view = sharedview.view_of(self.backend)
            if view is None:
                self.lease = self._lease_past_closing(alloc.job_id,
                                                      lease_name(run_id, max_until), run_id)
            else:  # run_many: one lease step for the batch's runs (sharedview)
                self.lease, shared = view.lease(
                    (alloc.job_id, spec.container_name or ""), max_until,
                    self._batch_lease_taker(alloc.job_id))
        except BackendError as exc:
            self.lease = None
            if again and (isinstance(exc, JobNotFound) or self._gone(alloc.job_id)):
                self._again(f"allocation {alloc.job_id} ended before this run's lease "
                            "step started (released or replaced by another run, on another "
                            "login node: no lease of this run held it yet)")
                return None
            msg = (f"could not take this run's lease on allocation {alloc.job_id} (a step "
                   f"every host sees in squeue -s): {exc}; the job was not started")
            # the machine stays in Ready (finish is no edge from it): the next run's
            # step 0 validates the allocation anew
            return self._facts(Phase.STEP0, failure=Failure(phase=Phase.STEP0, message=msg))
        except OSError as exc:  # the batch lease's record
            msg = (f"could not write the record of this batch's lease on allocation "
                   f"{alloc.job_id} in {self.runs.folder}: {exc}; the job was not started")
            return self._facts(Phase.STEP0, failure=Failure(phase=Phase.STEP0, message=msg))
        try:
            lease = self.runs.start(alloc.job_id, spec=str(spec.script_path),
                                    model=spec.model_name or "",
                                    container=spec.container_name or "", run_id=run_id,
                                    lease=self.lease.name)
        except OSError as exc:
            self.lease.stop()
            msg = (f"could not write this run's record (its lease on allocation "
                   f"{alloc.job_id}) in {self.runs.folder}: {exc}; the job was not started")
            return self._facts(Phase.STEP0, failure=Failure(phase=Phase.STEP0, message=msg))
        # the gate this run's machine waits with: this run's own lease is never waited for
        if self.gate is not None:
            self.gate.own = lease.run_id
            if shared is not None:
                self.gate.shared.add(shared)
        return lease

    def _note_successor_wait(self, m: AllocationMachine, wait: SuccessorWait | None
                             ) -> None:
        """The job did not fit the old allocation and waited for the successor: how long."""
        if wait is not None:
            self.timings["successor_wait_s"] = wait.seconds
            m.note(f"waited {wait.seconds:.1f} s for successor allocation {wait.job_id}: "
                   "the job did not fit the time left of the allocation it replaces")

    def _batch_lease_taker(self, job_id: str) -> sharedview.TakeLease:
        """How a ``run_many`` batch takes its shared lease on ``job_id``: the step, then
        a record of its own (the batch's run id, this process: a dead process's lease
        is broken on this host as a run's is), deleted once the step is stopped."""
        spec = self.spec

        def take(until: float) -> tuple[LeaseHandle, str, Callable[[], None]]:
            batch_id = new_run_id()
            handle = self._lease_past_closing(job_id, lease_name(batch_id, until), batch_id)
            try:
                record = self.runs.start(job_id, spec="(the shared lease of a run_many)",
                                         container=spec.container_name or "",
                                         run_id=batch_id)
            except OSError:
                handle.stop()
                raise
            return handle, batch_id, lambda: self.runs.delete(record)

        return take

    def _lease_past_closing(self, job_id: str, name: str, run_id: str) -> LeaseHandle:
        """Start lease step ``name``, then (the taker's half of Dekker's order) wait out
        another run's closing marker (:func:`slurm_fsm.lease.wait_out_closing`): the
        lease, or JobNotFound (the step stopped) when the canceller cancelled it."""
        handle = self.backend.start_lease(job_id, name)
        try:
            wait_out_closing(self.backend, job_id, own=(run_id,), clock=self.clock,
                             say=self.events.message)
        except BaseException:
            handle.stop()
            raise
        return handle

    def _again(self, why: str) -> None:
        """Say (a warning) why step 0 is done again."""
        text = f"{why}; step 0 again"
        self.warnings.append(text)
        self.events.message(f"WARNING: {text}")

    def _gone(self, job_id: str) -> bool:
        """Slurm no longer runs allocation ``job_id`` (a lease step that failed with a
        text of srun's not known as "gone": asked, not guessed); False when unknown."""
        try:
            return not self.backend.query_job(job_id).state.is_running
        except JobNotFound:
            return True
        except BackendError:
            return False

    def _begin(self, m: AllocationMachine, alloc: AllocState, steps: RunSteps
               ) -> RunTicket | RunFacts:
        """Pre-flight and the script started (the lock is free: other runs overlap)."""
        spec = self.spec
        t = self.clock.now()
        m.run()  # pre-flight; a failure routes the machine into Failed
        checked = m.outcome()
        if checked.state is not State.Running:
            msg = checked.failure.message if checked.failure else "pre-flight failed"
            return self._facts(Phase.STEP0, failure=Failure(phase=Phase.STEP0, message=msg))
        info, left = m.info_now()
        assert info is not None
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path = run_log_path(spec)
        self.events.message(
            f"Running {spec.script_path} in {spec.work_dir} on allocation {alloc.job_id} "
            f"({alloc.nodelist}, {left} left), container {spec.container_name or '-'}; "
            f"log {log}"
        )
        env = placement.script_env(attrs.evolve(info, nodelist=info.nodelist or alloc.nodelist),
                                   spec.slurm_params, spec.script_path,
                                   alloc_cpus_per_node=alloc.cpus_per_node,
                                   alloc_gpus_per_node=alloc.gpus_per_node)
        token = secrets.token_hex(16)  # in the record before any process holds it
        steps.starting(token)
        try:
            script = self.backend.start_script(ScriptRequest(
                script_path=spec.script_path, log_path=log, env=env, cwd=spec.work_dir,
                status_path=self.runs.paths.run_status(self.run_id), token=token,
            ))
        except OSError as exc:  # bash missing, log not writable, ...
            m.finish(reason=f"script did not start: {exc}")
            msg = f"could not start bash {spec.script_path}: {exc}"
            return self._facts(Phase.RUNNING, failure=Failure(phase=Phase.RUNNING, message=msg))
        problem = point_latest(spec.persistent_log, log)
        if problem:
            self.warnings.append(problem)
        steps.started(script, str(log))
        self.timings["start_s"] = self.clock.now() - t
        self.events.state(Phase.RUNNING.value, f"job on allocation {alloc.job_id}")
        self.events.job_state(f"RUNNING (a step of allocation {alloc.job_id})")
        return RunTicket(machine=m, alloc=alloc, steps=steps, script=script, log=log)

    def _watch(self, script: RunningScript, steps: RunSteps, log: Path,
               alloc: AllocState) -> Watch:
        """The script, watched to its end; a step never outlives its run: what the
        script left is stopped now."""
        spec = self.spec

        share = placement.Placement.of(spec.slurm_params,
                                       alloc_cpus_per_node=alloc.cpus_per_node,
                                       alloc_gpus_per_node=alloc.gpus_per_node)

        # "waiting for GPUs": this run's PENDING step in Slurm, or srun's line (22.05 only)
        queue = placement.QueueWatch(
            self.events.output, self.events.message, share,
            allocation_gpus_per_node=alloc.gpus_per_node, allocation_id=alloc.job_id,
            pending=placement.PendingSteps(steps.listed, steps.pids, self.clock))

        def tick(elapsed: float, line: str) -> None:
            steps.sample()
            queue.poll()
            self.events.tick(elapsed, line)

        watch = watch_script(
            script, timeout_s=float(spec.monitor_timeout_seconds), clock=self.clock,
            policy=self.policy, on_message=self.events.message, on_tick=tick,
            stop=steps.stop,
            output=output_for_spec(spec, [log], extra_patterns=[TIME_LIMIT_MARK],
                                   on_text=queue),
        )
        self.messages.extend(watch.messages)
        if not (watch.hang or watch.timed_out):
            self.ended_watch = watch
            if self.on_script_end is not None:
                self.on_script_end(watch.exit_code)
        if queue.queued and self.machine is not None:  # the wait for GPUs, in the notes
            self.machine.note(f"the job's steps waited for their GPUs/CPUs on "
                   f"allocation {alloc.job_id} ({queue.queued} time(s))")
        for problem in steps.finish():
            self.events.message(f"WARNING: {problem}")
            self.messages.append(problem)
        self.timings["run_s"] = watch.elapsed_s
        view = sharedview.view_of(self.backend)
        if view is not None:  # run_many: the job's slot, for the next job's script
            view.free_slot()
        return watch

    def _ended(self, m: AllocationMachine, watch: Watch, alloc_id: str, log: Path,
               steps: RunSteps | None = None) -> RunFacts:
        """The facts of a script that ran: its exit code, what the watch saw, whether
        the allocation itself ended under it, and (a script that exited non-zero on an
        allocation that still runs) how accounting says its steps ended."""
        assert watch.output is not None
        seen: dict[str, Any] = {
            "allocation_id": alloc_id, "exit_code": watch.exit_code,
            "elapsed_s": watch.elapsed_s, "hang": watch.hang,
            "hang_after_end": watch.hang_after_end, "timed_out": watch.timed_out,
            "cancelled_steps": tuple(watch.cancelled_steps),
            "uncancelled_steps": tuple(watch.uncancelled_steps),
            "output": watch.output.snapshot(), "stdout": str(log), "stderr": None,
        }
        ended = self._allocation_end(alloc_id, watch)
        if ended is None:
            if (steps is not None and watch.exit_code not in (None, 0) and not watch.hang
                    and not watch.timed_out):
                ends, unknown = self._step_ends(alloc_id, steps.own_step_ids())
                told = {e.step for e in ends}
                seen.update(step_ends=ends, step_ends_unknown=unknown, steps_unaccounted=tuple(
                    f"{alloc_id}.{s}" for s in steps.own_step_ids()
                    if f"{alloc_id}.{s}" not in told))
            m.finish(reason=_finish_reason(watch))
            return self._facts(Phase.COLLECTED, **seen)
        m.finish(reason=f"allocation {alloc_id} ended under the job ({ended.state})",
                 allocation_gone=True)
        return self._facts(
            Phase.COLLECTED, **seen, slurm_state=ended.state, state_source=ended.source,
            notes=(ended.note,) if ended.note else (),
            summary=(f"allocation {alloc_id} {ended.what} and ended under the job; "
                     f"the step exited {watch.exit_code}. The state file is dropped: the "
                     "next run allocates anew"),
            extra_metrics={"cancelled_by": ended.cancelled_by} if ended.cancelled_by else {},
        )

    def _step_ends(self, alloc_id: str, step_ids: list[str]
                   ) -> tuple[tuple[StepEnd, ...], str | None]:
        """How accounting says ``step_ids`` (this run's own steps, none it cancelled
        itself) ended, asked again after each of :data:`STEP_ACCOUNTING_WAITS_S` while a
        step has no final row yet; and why it could not say, when it could not (then the
        exit code decides)."""
        if not step_ids:
            return (), None
        rows: dict[str, StepEnd] = {}
        waits = iter(STEP_ACCOUNTING_WAITS_S)
        while True:
            try:
                got = self.backend.step_outcomes(alloc_id, step_ids)
            except JobNotFound as exc:  # accounting is off: asking again will not help
                return tuple(rows.values()), f"sacct: {exc}"
            except BackendError as exc:
                why = f"sacct: {exc}"
            else:
                rows.update((o.job_id, step_end_of(o)) for o in got
                            if o.state.is_final)
                missing = [f"{alloc_id}.{s}" for s in step_ids if f"{alloc_id}.{s}" not in rows]
                if not missing:
                    return tuple(rows[f"{alloc_id}.{s}"] for s in step_ids), None
                why = f"no final sacct row yet for {', '.join(missing)}"
            pause = next(waits, None)
            if pause is None:
                break
            self.clock.sleep(pause)
        return tuple(rows.values()), why

    def _allocation_end(self, alloc_id: str, watch: Watch) -> _AllocationEnd | None:
        """After every job: did the allocation itself end under it (scancel of the
        allocation, its time limit, a node failure)? None when it still runs. When
        Slurm cannot say, srun's time-limit line in the output (counted while it was
        followed) means TIMEOUT, else the allocation is taken as cancelled.

        Asked whatever the script's exit code: srun exits 0 when the one node of its
        allocation fails (``srun: error: Node failure on n1``, Slurm 22.05)."""
        if watch.hang or watch.timed_out:
            return None
        view = sharedview.view_of(self.backend)  # run_many: a row asked after this end
        ended_at = self.clock.now()
        try:
            info = (self.backend.query_job(alloc_id) if view is None
                    else view.allocation_end_row(alloc_id, ended_at=ended_at)[0])
        except JobNotFound:
            pass
        except BackendError as exc:
            self.messages.append(f"could not check allocation {alloc_id}: {exc}")
            return None
        else:
            if info.state.is_live:
                return None
        outcome, _why = final_outcome(self.backend, alloc_id, self.clock, attempts=4)
        by = outcome.cancelled_by if outcome is not None else ""
        if outcome is not None and not outcome.state.exited:
            state, source, note = outcome.state, StateSource.ACCOUNTING, ""
        elif watch.output is not None and watch.output.pattern_hits.get(TIME_LIMIT_MARK):
            state, source, note = JobState.TIMEOUT, StateSource.LOG_MARK, (
                f"Slurm could not say how allocation {alloc_id} ended; the log says "
                "DUE TO TIME LIMIT")
        else:
            state, source, note = JobState.CANCELLED, StateSource.ASSUMED, (
                f"Slurm could not say how allocation {alloc_id} ended; taken as cancelled")
        what = state.ended_how
        if state is JobState.CANCELLED and by:
            what += f" (by uid {by})"
        return _AllocationEnd(state=state, source=source, what=what, note=note,
                              cancelled_by=by)
