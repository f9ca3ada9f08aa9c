"""What one run saw, frozen: the record every path of a run ends with.

Step 0 has :class:`slurm_fsm.step0.table.Observation` and one pure decider; the job after
step 0 has :class:`RunFacts` and one pure judge, :func:`slurm_fsm.results.report_of`.
A path (:mod:`slurm_fsm.persistent`, :mod:`slurm_fsm.oneshot`) only observes: it
returns a ``RunFacts`` and decides no status; the judge turns it into the
:class:`~slurm_fsm.report.Report`. Nothing here does I/O, and this room imports no
other room of the package but :mod:`slurm_fsm.jobstate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import attrs

from slurm_fsm.jobstate import JobState

__all__ = ["Failure", "Mode", "OutputSnapshot", "PartEnd", "Phase", "RunFacts", "StateSource",
           "StepEnd"]


class Mode(Enum):
    """How a run used Slurm; the report's ``mode`` is its value."""

    PERSISTENT = "persistent"
    ONE_SHOT = "one-shot"
    RELEASE = "release"
    #: the CLI's ``run`` command, stopped before its spec said which mode
    RUN = "run"


class Phase(Enum):
    """The phases of a run after the machine's own states; the value is the name the
    progress display shows and ``Report.path`` lists (a one-shot run's path is its
    phases; a persistent run's is the machine's states)."""

    #: the CLI read its arguments and the spec (no run had started)
    INPUT = "Input"
    PRE_STEP = "PreStep"
    STEP0 = "Step0"
    RUNNING = "Running"
    SUBMITTING = "Submitting"
    MONITORING = "Monitoring"
    COLLECTED = "Collected"
    DONE = "Done"


class StateSource(Enum):
    """Where a final Slurm state came from."""

    ACCOUNTING = "accounting"  # sacct (or scontrol when accounting is off)
    LOG_MARK = "log"  # srun's "DUE TO TIME LIMIT" in the job's log
    ASSUMED = "assumed"  # Slurm could not say; the allocation is gone: taken as cancelled


@attrs.frozen(kw_only=True)
class Failure:
    """A run that stopped before its job could be judged by its output: a pre-step
    (build) that failed, a step-0 or pre-flight failure, a command that failed."""

    #: where it stopped (PreStep: the build, so the status is BUILD_FAILED)
    phase: Phase
    #: one line saying what failed (the report's summary)
    message: str
    #: the report's errors, when they are not ``message`` alone (sbatch's own words,
    #: without "sbatch failed: "; the CLI's list of problems)
    errors: tuple[str, ...] = ()
    #: a setup step's output, from which its pyxis / enroot / pip lines are taken
    detail: str = ""


@attrs.frozen(kw_only=True)
class OutputSnapshot:
    """What :class:`slurm_fsm.joboutput.JobOutput` kept of a job's files, frozen after
    they were read to the last byte (never the live follower)."""

    #: the first lines of the whole output
    head: tuple[str, ...] = ()
    #: the last lines of the whole output (up to 200)
    tail: tuple[str, ...] = ()
    #: the last lines of the ``.err`` file (one-shot), when it is another file
    err_tail: tuple[str, ...] = ()
    #: what the workflow's parser reads: its relevant lines and the last 100
    parser_lines: tuple[str, ...] = ()
    #: lines matched per success / failure pattern
    pattern_hits: Mapping[str, int] = attrs.field(factory=dict)
    #: the first line with the hang marker, when seen while following
    hang_line: str = ""
    #: no file had a byte
    empty: bool = True


@attrs.frozen(kw_only=True)
class StepEnd:
    """How one step a run started ended, as accounting says: a persistent run's
    (``sacct -j ALLOC.N``), never a step the run itself cancelled (a hang, its monitor's
    timeout, what its script left running), never a sibling run's step; a one-shot
    job's numbered steps (``JOB.N``, the rows of ``sacct -j JOB``)."""

    #: ``ALLOC.N`` (one-shot: ``JOB.N``)
    step: str
    state: JobState
    exit_code: int = 0
    signal: int = 0
    #: the uid in ``CANCELLED by <uid>``; empty when Slurm names nobody (a task that
    #: died of a signal is ``CANCELLED`` alone)
    cancelled_by: str = ""
    #: accounting's ``MaxRSS`` of the step (its largest task), in bytes, when it has one
    max_rss: int | None = None
    #: the memory the step was given on each node, in bytes (``AllocTRES``), when known
    memory_limit: int | None = None
    #: slurmstepd's own line about the step's end (``*** STEP 5.1 ON n1 CANCELLED AT ...
    #: ***``), when that, not accounting, told it: sacct had no row for the step yet
    logged: str = ""

    @property
    def over_memory_limit(self) -> bool:
        """Its ``MaxRSS`` is above the memory it was given on a node, by more than the
        rounding of a limit accounting prints in gigabytes with two decimals (1%): one
        task alone held more than its node's share."""
        return (self.max_rss is not None and self.memory_limit is not None
                and self.max_rss > self.memory_limit + self.memory_limit // 100)


@attrs.frozen(kw_only=True)
class PartEnd:
    """How one task of an array job (``16_1``) or one component of a heterogeneous job
    (``19+1``) ended, as accounting says, and what its own files held."""

    #: ``16_1``, ``19+1`` (a pending rest ``16_[2-3]`` when the job was stopped)
    part: str
    #: ``array task`` or ``het component``
    kind: str
    state: JobState
    #: the exit status as the shell says it (``128 + signal`` for a signal); None when
    #: accounting did not say
    exit_code: int | None = None
    #: the task's own stdout file (array tasks); empty when it has none of its own
    log: str = ""
    #: what its own files held (array tasks); None when it has none of its own
    output: OutputSnapshot | None = None

    @property
    def passed(self) -> bool:
        """COMPLETED with exit status 0."""
        return self.state is JobState.COMPLETED and self.exit_code == 0


@attrs.frozen(kw_only=True)
class RunFacts:
    """What one run saw (module docstring). Built once at the end of a path."""

    mode: Mode
    #: the last phase reached
    phase: Phase
    #: set when the run stopped before its job could be judged
    failure: Failure | None = None
    #: a release that ended in the machine's Released state
    released: bool = False
    #: why the run was stopped from outside (a signal, Ctrl-C), when it was
    interrupted: str | None = None
    #: who asked to cancel the run (``slurm-fsm cancel``, written beside it before any
    #: process was told), when one did: a run that did not pass is then CANCELLED
    cancel_asked: str | None = None
    #: the one-shot job
    job_id: str | None = None
    #: the persistent allocation
    allocation_id: str | None = None
    #: the final Slurm state, when one decides (accounting; or the allocation's own end)
    slurm_state: JobState | None = None
    state_source: StateSource | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    #: the watch: the hang marker seen, and whether only after the job had ended
    hang: bool = False
    hang_after_end: bool = False
    #: monitor_timeout_seconds passed
    timed_out: bool = False
    cancelled_steps: tuple[str, ...] = ()
    uncancelled_steps: tuple[str, ...] = ()
    #: the job's output; None when no job ran
    output: OutputSnapshot | None = None
    #: ``{"stdout": ..., "stderr": ...}`` as the report shows them
    stdout: str | None = None
    stderr: str | None = None
    #: the log lines a report shows when there is no job output (salloc's, a build's)
    log_tail: tuple[str, ...] = ()
    #: the summary after the status word when it is not the usual one (an allocation
    #: that ended under the job says so)
    summary: str | None = None
    #: the machine's states, then the run's phases
    path: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: persistent mode: how the run's own steps ended, by accounting (asked when the
    #: script exited non-zero on an allocation that still runs)
    step_ends: tuple[StepEnd, ...] = ()
    #: why accounting could not say how they ended, when it could not (slurmstepd's own
    #: lines in the log, else the exit code, decide then)
    step_ends_unknown: str | None = None
    #: one-shot, an array or heterogeneous job: how each task or component ended
    #: (the job's own state and exit code are the worst part's)
    parts: tuple[PartEnd, ...] = ()
    #: the run's own steps (``ALLOC.N``) accounting had no final row for when asked
    steps_unaccounted: tuple[str, ...] = ()
    #: what went wrong without failing the run, before the parser's warnings
    warnings: tuple[str, ...] = ()
    #: what the monitor said (after the parser's warnings; each once)
    messages: tuple[str, ...] = ()
    #: accounting's figures (``max_rss``, ``accounting_source``, ``cancelled_by``)
    extra_metrics: Mapping[str, Any] = attrs.field(factory=dict)
    #: seconds per phase
    timings: Mapping[str, float] = attrs.field(factory=dict)
    #: why progress output stopped (a closed stderr, a sink that raised), when it did
    progress_problem: str | None = None
