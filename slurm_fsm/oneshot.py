"""The one-shot path: ``sbatch`` the script, watch the job, ask accounting how it ended.

:class:`OneShotRun` only observes: it returns what it saw as
:class:`~slurm_fsm.runfacts.RunFacts`, and :func:`slurm_fsm.results.report_of` judges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_fsm import placement
from slurm_fsm.backend import BatchRequest, JobFiles, JobOutcome, SlurmBackend, part_kind
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError
from slurm_fsm.events import Events
from slurm_fsm.joboutput import JobOutput, output_for_spec
from slurm_fsm.jobstate import JobState
from slurm_fsm.logs import tail_lines
from slurm_fsm.monitor import PollPolicy, Watch, final_outcome, step_end_of, watch_batch_job
from slurm_fsm.runfacts import Failure, Mode, PartEnd, Phase, RunFacts, StateSource, StepEnd
from slurm_fsm.scriptcheck import batch_placement, read_script_text
from slurm_fsm.slurmcli import (
    array_task_ids,
    batch_kind,
    batch_parts,
    expand_output_pattern,
    sbatch_directives,
)
from slurm_fsm.spec import JobSpec

__all__ = ["OneShotRun", "err_path_for", "log_path_for", "outcome_exit_code", "step_ends_of"]


def log_path_for(spec: JobSpec, job_id: str) -> Path:
    """One-shot stdout log: ``<work_dir>/<log_file_pattern with %j>``."""
    pattern = spec.log_file_pattern or "slurm-%j.out"
    return spec.work_dir / pattern.replace("%j", job_id)


def err_path_for(out: Path) -> Path:
    """The ``.err`` beside a ``.out`` (or ``<name>.err`` when it has no ``.out``)."""
    return out.with_suffix(".err") if out.suffix == ".out" else out.with_name(out.name + ".err")


def outcome_exit_code(outcome: JobOutcome | None) -> int | None:
    """Accounting's ``ExitCode`` (``code:signal``) as one number: the code, or
    ``128 + signal`` for a job killed by a signal (``0:9`` -> 137), as the shell says."""
    if outcome is None:
        return None
    if outcome.exit_code == 0 and outcome.signal:
        return 128 + outcome.signal
    return outcome.exit_code


def _accounting(outcome: JobOutcome | None) -> dict[str, Any]:
    """Accounting's figures for the report's metrics."""
    if outcome is None:
        return {}
    extra: dict[str, Any] = {"cancelled_by": outcome.cancelled_by} if outcome.cancelled_by \
        else {}
    extra["max_rss"] = outcome.max_rss
    extra["accounting_source"] = outcome.source
    return extra


def step_ends_of(outcome: JobOutcome | None) -> tuple[StepEnd, ...]:
    """How the job's numbered steps (``JOB.N``; an array task's ``16_0.N``, a het
    component's ``19+1.N``) ended, by accounting's rows of them: the script's own
    ``srun`` steps, which the judge reads as a persistent run's own steps (a step past
    its own ``--time`` is TIMEOUT in both modes, issue 44). ``batch`` and ``extern``
    are not the script's steps; a step not yet final is left out."""
    if outcome is None:
        return ()
    return tuple(step_end_of(s) for s in outcome.steps
                 if s.job_id.rpartition(".")[2].isdigit() and s.state.is_final)


class OneShotRun:
    """One ``sbatch`` job of ``spec``, watched to its end. :meth:`run` returns the facts;
    :meth:`facts_so_far` what is known when the run is stopped from outside."""

    def __init__(self, spec: JobSpec, backend: SlurmBackend, *, clock: Clock, events: Events,
                 policy: PollPolicy, warnings: list[str]) -> None:
        self.spec = spec
        self.backend = backend
        self.clock = clock
        self.events = events
        self.policy = policy
        self.warnings = list(warnings)
        self.path: list[str] = []
        self.job_id: str | None = None
        self.log_path: Path | None = None
        self.timings: dict[str, float] = {}
        #: the spec's log_file_pattern's .out and .err for this job
        self._pattern: tuple[Path, Path] = (Path(), Path())
        #: why Slurm did not say where the job writes (None: it did)
        self._files_unknown: str | None = None
        #: why Slurm is asked again once the job has ended (None: it is not)
        self._ask_again: str | None = None
        self._file_notes: list[str] = []
        #: an array job: the task ids its ``#SBATCH --array`` lists (None: no array)
        self._array: list[int] | None = None
        #: every file followed while the job runs (an array: each task's)
        self._follow: list[Path] = []
        #: the script as submitted, and its own ``#SBATCH`` options
        self._text = ""
        self._own: dict[str, str] = {}

    def _facts(self, phase: Phase, **what: Any) -> RunFacts:
        return RunFacts(mode=Mode.ONE_SHOT, phase=phase, job_id=self.job_id,
                        path=tuple(self.path), warnings=tuple(self.warnings),
                        timings=dict(self.timings), **what)

    def facts_so_far(self, interrupted: str, signum: int | None = None) -> RunFacts:
        """What is known of a run stopped by a signal or Ctrl-C (the monitor has
        cancelled the job by then; ``signum`` is the signal, unused here: a batch job
        gets no signal of the orchestrator's)."""
        log = self.log_path
        return self._facts(Phase(self.path[-1]) if self.path else Phase.SUBMITTING,
                           interrupted=interrupted,
                           stdout=str(log) if log is not None else None,
                           log_tail=tuple(tail_lines(log, 50)) if log is not None else ())

    def run(self) -> RunFacts:
        spec = self.spec
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        self.events.state(Phase.SUBMITTING.value, f"sbatch {spec.script_path}")
        self.path.append(Phase.SUBMITTING.value)
        # the script's own #SBATCH --partition/--account win (said when they differ)
        partition, account, notes = batch_placement(spec)
        cpu_args, cpu_notes = placement.batch_cpu_args(spec.slurm_params, spec.script_path)
        self.warnings.extend(notes + cpu_notes)
        try:
            job_id = self.backend.submit(BatchRequest(
                script_path=spec.script_path, work_dir=spec.work_dir,
                partition=partition, account=account, extra_args=tuple(cpu_args),
            ))
        except BackendError as exc:
            return self._facts(Phase.SUBMITTING, failure=Failure(
                phase=Phase.SUBMITTING, message=f"sbatch failed: {exc}", errors=(str(exc),)))
        return self.collect(job_id, submitted=True)

    def collect(self, job_id: str, *, submitted: bool = False) -> RunFacts:
        """Watch job ``job_id`` to its end and say what was seen: the second half of
        :meth:`run`, and how a run whose owner is gone is judged from another process
        (:func:`slurm_fsm.detach.settle`: a batch job outlives the process that
        submitted it)."""
        spec = self.spec
        if not submitted:
            self.path.append(Phase.SUBMITTING.value)
        self.job_id = job_id
        self._array = self._array_tasks()
        out, err = self._files(job_id)
        logs = f"log {out}" if err == out else f"logs {out} and {err}"
        self.events.message(
            f"{'Submitted' if submitted else 'Following'} batch job {job_id}: script "
            f"{spec.script_path}, work dir {spec.work_dir}, {logs}; monitor with "
            f"`squeue -j {job_id}` or `sacct -j {job_id}`"
        )
        watch = self._watch(job_id, out, err)
        self.path.append(Phase.COLLECTED.value)
        if watch.never_starts:
            msg = (f"job {job_id} can never start: Slurm keeps it PENDING with reason "
                   f"{watch.never_starts} (the request exceeds a limit of its partition, "
                   "account or QOS); cancelled")
            return self._facts(Phase.COLLECTED, messages=tuple(watch.messages),
                               failure=Failure(phase=Phase.MONITORING, message=msg))
        if self._ask_again is not None and self._array is None:  # it has a node now
            out, err = self._files_after_end(job_id, watch, out, err)
        return self._collected(job_id, watch, out, err)

    # ------------------------------------------------------------ the job's files
    def _ask_files(self, job_id: str) -> JobFiles | str:
        """Where Slurm says the job writes, or why it does not say."""
        try:
            return self.backend.job_files(job_id)
        except BackendError as exc:
            return str(exc)

    def _files(self, job_id: str) -> tuple[Path, Path]:
        """The files to follow: where Slurm says the job writes (``scontrol show job``:
        ``StdOut``, ``StdErr``), which wins over ``log_file_pattern``; the pattern's
        ``.out`` and the ``.err`` beside it when Slurm does not say. Slurm is asked again
        once the job has ended when it did not say, or when the job had no node yet."""
        pattern_out = log_path_for(self.spec, job_id)
        self._pattern = (pattern_out, err_path_for(pattern_out))
        files = self._ask_files(job_id)
        if isinstance(files, str):
            self._ask_again = self._files_unknown = files
            out, err = self._pattern
        else:
            out, err = files.stdout, files.stderr
            if files.needs_node:  # a %N is not known before the job has a node
                self._ask_again = "the job had no node yet"
            elif self._array is None:
                self._say_files(files)
        if self._array is not None:
            tasks = self._array_files(job_id, None if isinstance(files, str) else files)
            self._follow = [path for pair in tasks.values() for path in pair]
            self._ask_again = "an array's tasks are named as they start"
            out, err = next(iter(tasks.values()), (out, err))
        self.log_path = out
        return out, err

    # ------------------------------------------------------------ an array's tasks
    def _array_tasks(self) -> list[int] | None:
        """The task ids of the script's ``#SBATCH --array`` (None when it makes no array
        job; [] when sbatch took an index list this cannot read)."""
        self._text = text = read_script_text(self.spec.script_path)
        self._own = sbatch_directives(text)
        if batch_kind(text) != "array":
            return None
        try:
            return array_task_ids(self._own.get("array", ""))
        except ValueError:
            return []

    def _task_files(self, task: str) -> tuple[Path, Path]:
        """Where array task ``16_3`` writes when Slurm does not say: the script's
        ``--output`` / ``--error`` (sbatch's default for an array, ``slurm-%A_%a.out``)
        with ``%A`` and ``%a`` the task's, relative to the work dir."""
        own = self._own
        name = own.get("job-name") or self.spec.script_path.name
        paths = []
        for pattern in (own.get("output") or "slurm-%A_%a.out",
                        own.get("error") or own.get("output") or "slurm-%A_%a.out"):
            path = Path(expand_output_pattern(pattern, job_id=task, job_name=name))
            paths.append(path if path.is_absolute() else self.spec.work_dir / path)
        return paths[0], paths[1]

    def _array_files(self, job_id: str, files: JobFiles | None,
                     more: tuple[str, ...] = ()) -> dict[str, tuple[Path, Path]]:
        """Each task's files (``16_0`` -> its .out and .err): Slurm's where it names
        them (a task that has started), else :meth:`_task_files`; the tasks of the
        script's ``--array``, those Slurm names, and ``more`` (accounting's)."""
        named = {t.job_id: (t.stdout, t.stderr) for t in (files.tasks if files else ())}
        ids = [f"{job_id}_{task}" for task in self._array or ()]
        ids += [t for t in (*named, *more) if t not in ids and "[" not in t]
        return {task: named.get(task) or self._task_files(task) for task in ids}

    def _array_ended(self, job_id: str, watch: Watch, outcome: JobOutcome | None
                     ) -> tuple[Path, Path, tuple[PartEnd, ...]]:
        """An array that has ended: Slurm is asked where each task wrote, every task's
        files are read whole (all of them for the verdict, each alone for the task's
        own counts), and each task's end is accounting's."""
        files = self._ask_files(job_id)
        ends = {p.job_id: p for p in outcome.parts} if outcome is not None else {}
        tasks = self._array_files(job_id, None if isinstance(files, str) else files,
                                  tuple(ends))
        whole = output_for_spec(self.spec, [p for pair in tasks.values() for p in pair])
        whole.finish()
        if whole.hang_detected and not watch.hang:
            watch.hang = watch.hang_after_end = True
        watch.output = whole
        parts = []
        for task, (out, err) in tasks.items():
            own = output_for_spec(self.spec, [out, err])
            own.finish()
            end = ends.get(task)
            parts.append(PartEnd(
                part=task, kind="array task", state=end.state if end else JobState.UNKNOWN,
                exit_code=end.exit_status if end else None, log=str(out),
                output=own.snapshot(err)))
        first = next(iter(tasks.values()), self._pattern)
        self.log_path = first[0]
        names = [pair[0].name for pair in tasks.values()]
        self._file_notes.append(
            f"array job {job_id}: {len(tasks)} task(s), each read from its own files "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")
        return first[0], first[1], tuple(parts)

    def _say_files(self, files: JobFiles) -> None:
        """A note when Slurm's files are not the spec's ``log_file_pattern``."""
        if files.stdout == self._pattern[0]:
            return
        err = "" if files.stderr == files.stdout else f" and its StdErr {files.stderr}"
        self._file_notes.append(
            f"output read from {files.stdout}{err}, where Slurm says job {files.job_id} "
            f"writes ({files.source}: StdOut), not from {self._pattern[0]} "
            f"(log_file_pattern {self.spec.log_file_pattern!r}); the script's own "
            "#SBATCH --output/--error decide")

    def _files_after_end(self, job_id: str, watch: Watch, out: Path, err: Path
                         ) -> tuple[Path, Path]:
        """Slurm did not say where the job writes when it was submitted: ask again now
        that it has ended; other files than the ones followed are read whole."""
        files = self._ask_files(job_id)
        if isinstance(files, str):
            if self._files_unknown is None:  # it said, while the job was pending
                self._file_notes.append(
                    f"output read from {out} and {err}, where Slurm said job {job_id} "
                    f"writes while it was pending (after its end: {files})")
                return out, err
            self._file_notes.append(
                f"Slurm did not say where job {job_id} writes ({self._files_unknown}; "
                f"after its end: {files}): read log_file_pattern's {out} and {err}")
            return out, err
        self._say_files(files)
        if (files.stdout, files.stderr) == (out, err):
            return out, err
        output: JobOutput = output_for_spec(self.spec, [files.stdout, files.stderr])
        output.finish()
        watch.output = output
        watch.messages.extend(g for g in output.gaps if g not in watch.messages)
        self.log_path = files.stdout
        return files.stdout, files.stderr

    def _watch(self, job_id: str, out: Path, err: Path) -> Watch:
        spec = self.spec
        self.events.state(Phase.MONITORING.value, f"job {job_id}")
        self.path.append(Phase.MONITORING.value)
        return watch_batch_job(
            job_id, backend=self.backend, log_path=out,
            timeout_s=float(spec.monitor_timeout_seconds), clock=self.clock,
            policy=self.policy, on_output=self.events.output,
            on_message=self.events.message, on_tick=self.events.tick,
            on_state=self.events.job_state,
            output=output_for_spec(spec, self._follow or [out, err],
                                   on_text=self.events.output),
        )

    def _collected(self, job_id: str, watch: Watch, out: Path, err: Path) -> RunFacts:
        outcome, why = final_outcome(self.backend, job_id, self.clock,
                                     parts=batch_parts(self._text, job_id))
        parts: tuple[PartEnd, ...] = ()
        if self._array is not None:
            out, err, parts = self._array_ended(job_id, watch, outcome)
        elif outcome is not None:
            parts = tuple(PartEnd(part=p.job_id, kind=part_kind(p.job_id), state=p.state,
                                  exit_code=p.exit_status) for p in outcome.parts)
        note = (f"{why}; the exit code is unknown: FAILED if the log shows a failure, "
                "otherwise ERROR" if why else "")
        elapsed = float(outcome.elapsed.seconds) if outcome and outcome.elapsed.seconds \
            is not None else watch.elapsed_s
        self.timings["run_s"] = watch.elapsed_s
        assert watch.output is not None
        return self._facts(
            Phase.COLLECTED,
            slurm_state=outcome.state if outcome else None,
            state_source=StateSource.ACCOUNTING if outcome else None,
            exit_code=outcome_exit_code(outcome), elapsed_s=elapsed,
            hang=watch.hang, hang_after_end=watch.hang_after_end, timed_out=watch.timed_out,
            cancelled_steps=tuple(watch.cancelled_steps),
            uncancelled_steps=tuple(watch.uncancelled_steps),
            output=watch.output.snapshot(err), stdout=str(out), stderr=str(err),
            notes=(*self._file_notes, *((note,) if note else ())),
            messages=tuple(watch.messages), parts=parts, step_ends=step_ends_of(outcome),
            extra_metrics=_accounting(outcome),
        )
