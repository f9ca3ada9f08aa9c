"""A whole job: optional pre-step, step 0, then steps 1-5 -> :class:`Report`.

``Executor(spec, backend).run()`` is the one entry point, and the face of a run: it
checks the inputs once, runs the pre-step, picks the path
(:class:`~slurm_fsm.persistent.PersistentRun` or :class:`~slurm_fsm.oneshot.OneShotRun`),
and turns what the path saw (:class:`~slurm_fsm.runfacts.RunFacts`) into the report
with the one judge, :func:`slurm_fsm.results.report_of`. A run that is interrupted ends
the same way: what its path saw so far, judged once (:meth:`Executor.interrupted_report`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.errors import SpecError
from slurm_fsm.events import Events, GuardedEvents, PreStep
from slurm_fsm.history import record_run
from slurm_fsm.monitor import PollPolicy
from slurm_fsm.paths import StatePaths
from slurm_fsm.persistent import PersistentRun, point_latest, run_book, run_log_path
from slurm_fsm.report import Report
from slurm_fsm.runfacts import Failure, Mode, Phase, RunFacts
from slurm_fsm.runowner import OnStarted, OwnedRun, Owner, RunFiles
from slurm_fsm.runrecord import new_run_id
from slurm_fsm.scriptcheck import input_problems
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState

if TYPE_CHECKING:  # the one-shot path is imported when a run takes it (a warm run never)
    from slurm_fsm.oneshot import OneShotRun, err_path_for, log_path_for, outcome_exit_code

__all__ = [
    "Executor",
    "err_path_for",
    "log_path_for",
    "outcome_exit_code",
    "point_latest",
    "run_book",
    "run_log_path",
]


#: Names of the one-shot path this module gives too, loaded on first use (PEP 562): a
#: persistent run never imports :mod:`slurm_fsm.oneshot` (tests/test_cli.py checks it).
_ONESHOT_NAMES = ("err_path_for", "log_path_for", "outcome_exit_code")


def __getattr__(name: str) -> Any:
    if name in _ONESHOT_NAMES:
        from slurm_fsm import oneshot

        return getattr(oneshot, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        run_id: str | None = None,
        owner: Owner = Owner.FOREGROUND,
        spec_path: str = "",
        progress: str = "",
    ) -> None:
        self.spec = spec
        #: this run's id (:func:`slurm_fsm.runrecord.new_run_id` unless given): its
        #: lease, its owner record and its saved report are named after it
        self.run_id = run_id or new_run_id()
        #: who owns it, its owner record and its saved report (slurm_fsm.runowner)
        #: the allocation's state file: ``spec.state_path`` unless given (the fake
        #: backend of the CLI keeps its own, ``.slurm_alloc.fake.json``); the run record
        #: lives beside it and is named after it
        self.state_path = state_path or spec.state_path
        self.owned = OwnedRun(RunFiles(self.state_path), self.run_id, owner,
                              spec_path=spec_path or str(spec.script_path), progress=progress)
        #: how long a release or replacement waits for other runs' jobs (0: refuse)
        self.lease_wait_s = (float(spec.monitor_timeout_seconds) + 900.0
                             if lease_wait_s is None else lease_wait_s)
        self.backend = backend
        # the backend's own clock unless told otherwise (a FakeCluster's fake clock)
        self.clock: Clock = clock or backend.clock
        # progress is best effort: nothing a sink does can fail or stall the run
        self.events = GuardedEvents(OnStarted(events or Events(), self._mark_started))
        self.policy = policy or PollPolicy()
        self.pre_step = pre_step
        self._path: PersistentRun | OneShotRun | None = None
        #: a detached persistent run's hand-over to its agent (PersistentRun.hand_over)
        self.hand_over: Callable[[AllocState], str | None] | None = None
        self._timings: dict[str, float] = {}
        self._pre_notes: list[str] = []
        self._t0: float | None = None

    # ------------------------------------------------------------------------ public
    def run(self) -> Report:
        """Run the job. Raises SpecError (no Slurm call made) when the script is missing."""
        spec = self.spec
        self._t0 = self.clock.now()
        if not spec.release_allocation:
            self._check_inputs()
        warnings: list[str] = list(spec.load_warnings)  # did-you-mean keys
        if not spec.release_allocation:
            warnings.extend(self.owned.begin(mode=self._mode().value, spec=spec.to_dict()))
        if spec.build_project and not spec.release_allocation:
            failed = self._pre(warnings)
            if failed is not None:
                return self._judge(failed)
        path = self._path = self._path_for(self.spec, warnings)
        if isinstance(path, PersistentRun):
            path.on_script_end = self.owned.script_ended
            path.hand_over = self.hand_over
            path.on_held = self.owned.held  # the owner record names the lease
        if isinstance(path, PersistentRun) and self.spec.release_allocation:
            return self._judge(path.release())
        return self._judge(path.run())

    def note(self, text: str) -> None:
        """Add ``text`` to the report's notes (before the path's own): who ran the job,
        for a detached run."""
        self._pre_notes.append(text)

    def interrupted_report(self, why: str, signum: int | None = None) -> Report:
        """What is known of a run stopped by a signal or Ctrl-C, as a CANCELLED report
        (the CLI prints it, so that ``--json`` always gives one document). By then the
        monitor has cancelled the running step (persistent) or the job (one-shot)."""
        if self._path is not None:
            return self._judge(self._path.facts_so_far(why, signum))
        return self._judge(RunFacts(mode=self._mode(), phase=Phase.PRE_STEP, interrupted=why,
                                    timings=dict(self._timings)))

    # ----------------------------------------------------------------------- steps
    def _check_inputs(self) -> None:
        """Input problems found before any Slurm command: a missing script, a work_dir
        that cannot be made or written."""
        problems = input_problems(self.spec)
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

    def _pre(self, warnings: list[str]) -> RunFacts | None:
        """The pre-step (image and build): None when it passed (the spec it returns
        runs), else the facts of its failure."""
        t0 = self.clock.now()
        self.events.state(Phase.PRE_STEP.value, "resolving image and building")
        pre_step = self.pre_step
        if pre_step is None:  # imported when used: the build's libraries are heavy
            from slurm_fsm.build import default_pre_step

            pre_step = default_pre_step
        pre = pre_step(self.spec, self.backend, self.events)
        self._timings["pre_step_s"] = self.clock.now() - t0
        warnings.extend(pre.warnings)
        if not pre.ok:
            return RunFacts(
                mode=self._mode(), phase=Phase.PRE_STEP, job_id=pre.job_id,
                failure=Failure(phase=Phase.PRE_STEP, message=pre.summary or "build failed"),
                stdout=pre.log_path, log_tail=tuple(pre.log_tail), warnings=tuple(warnings),
                path=(Phase.PRE_STEP.value,), notes=("nothing allocated, nothing run",))
        self.spec = pre.spec
        self._pre_notes.append(
            f"pre-step: {pre.summary or 'build passed'}"
            + (f" (build job {pre.job_id}, log {pre.log_path})" if pre.job_id else ""))
        return None

    def _mark_started(self) -> None:
        """The job has started: its log and job or allocation id, for other shells."""
        path = self._path
        if path is None:
            return
        machine = path.machine if isinstance(path, PersistentRun) else None
        lease = path.lease if isinstance(path, PersistentRun) else None
        self.owned.started(log=str(path.log_path or ""),
                           job_id=None if isinstance(path, PersistentRun) else path.job_id,
                           allocation_id=machine.alloc.job_id
                           if machine is not None and machine.alloc else None,
                           lease=lease.name if lease is not None else "")

    def _mode(self) -> Mode:
        spec = self.spec
        return (Mode.RELEASE if spec.release_allocation else
                Mode.PERSISTENT if spec.persistent_mode else Mode.ONE_SHOT)

    def _path_for(self, spec: JobSpec, warnings: list[str]) -> PersistentRun | OneShotRun:
        if self._mode() is Mode.ONE_SHOT:
            from slurm_fsm.oneshot import OneShotRun

            return OneShotRun(spec, self.backend, clock=self.clock, events=self.events,
                              policy=self.policy, warnings=warnings)
        return PersistentRun(spec, self.backend, clock=self.clock, events=self.events,
                             policy=self.policy, state_path=self.state_path,
                             lease_wait_s=self.lease_wait_s, warnings=warnings,
                             run_id=self.run_id)

    def _judge(self, facts: RunFacts) -> Report:
        """The one report of the run: the facts with the pre-step's notes first, the
        face's timings (``total_s`` on the executor's clock), a cancel asked and whether
        progress output stopped, judged by :func:`~slurm_fsm.results.report_of`."""
        from slurm_fsm.results import report_of  # loaded when judged: not before Slurm

        timings = {**self._timings, **facts.timings}
        if self._t0 is not None:
            timings["total_s"] = round(self.clock.now() - self._t0, 4)
        facts = attrs.evolve(facts, notes=(*self._pre_notes, *facts.notes), timings=timings,
                             cancel_asked=self.owned.cancel_asked())
        report = report_of(facts, self.spec)
        unkept = self._record(report)
        if unkept is not None:  # admission's run history could not be written
            facts = attrs.evolve(facts, warnings=(*facts.warnings, unkept))
            report = report_of(facts, self.spec)
        self.events.state(Phase.DONE.value, report.summary)
        if self.events.problem is not None:
            # a sink broke on the way (perhaps on this last event): the report says so
            report = report_of(attrs.evolve(facts, progress_problem=self.events.problem),
                               self.spec)
        if (problem := self.owned.save(report)) is not None:
            self.events.message(f"WARNING: {problem}")
        return report

    def _record(self, report: Report) -> str | None:
        """Add the run to admission's history (slurm_fsm.history): the job's wall time
        and step 0's lead-time parts; a warning when the file cannot be written."""
        path = self._path
        machine = path.machine if isinstance(path, PersistentRun) else None
        return record_run(StatePaths.for_state_file(self.state_path).history, self.spec, report,
                          machine.lead_history() if machine is not None else ())

