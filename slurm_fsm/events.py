"""What a run tells the person (or program) watching it, and the pre-step's contract.

:class:`Events` is the sink a caller gives the executor (``StderrEvents`` prints
progress on stderr); :class:`GuardedEvents` is how the executor calls it: best
effort, never fatal. :class:`PreStep` and :class:`PreStepResult` are what a pre-step
(image resolution and build, :mod:`slurm_fsm.build`) takes and returns. They live
here, below both the executor and the build, so that neither imports the other for
them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from slurm_fsm.backend import SlurmBackend
    from slurm_fsm.spec import JobSpec

__all__ = ["PROGRESS_LOGGER", "Events", "GuardedEvents", "PreStep", "PreStepResult"]

#: The logger every run's progress goes to (:class:`GuardedEvents`), whatever
#: :class:`Events` the caller gave: ``slurm_fsm.progress``, under the library's
#: ``slurm_fsm`` logger, which is quiet unless the application configures logging
#: (a ``NullHandler``). Messages are INFO, those that start with ``WARNING:`` WARNING;
#: phases and the job's Slurm states are INFO; the job's own output is not logged.
PROGRESS_LOGGER = "slurm_fsm.progress"
_PROGRESS = logging.getLogger(PROGRESS_LOGGER)


def _log_progress(name: str, args: tuple[Any, ...]) -> None:
    """One call of an :class:`Events` method, as a log record (never raises)."""
    if name == "message" and args:
        text = str(args[0])
        if text.startswith("WARNING: "):
            _PROGRESS.warning("%s", text[len("WARNING: "):])
        else:
            _PROGRESS.info("%s", text)
    elif name == "state" and args:
        _PROGRESS.info("%s%s", args[0], f": {args[1]}" if len(args) > 1 and args[1] else "")
    elif name == "job_state" and args:
        _PROGRESS.info("job %s", args[0])


class Events:
    """What a run tells the person watching it. Subclass and override what you show."""

    def state(self, machine_state: str, detail: str = "") -> None:
        """The run entered a new phase (:class:`slurm_fsm.runfacts.Phase`: ``PreStep``,
        ``Step0``, ``Running``, ``Submitting``, ``Monitoring``, ``Done``); the
        machine's own transitions are told by :meth:`message`."""

    def message(self, text: str) -> None:
        """A line of progress (allocation made, warnings, state changes)."""

    def output(self, text: str) -> None:
        """New text of the job's log, as it arrives."""

    def job_state(self, slurm_state: str) -> None:
        """The job's Slurm state changed (PENDING, RUNNING, COMPLETING, ...)."""

    def tick(self, elapsed_s: float, last_line: str) -> None:
        """Called on every monitor poll while a job runs."""


class GuardedEvents(Events):
    """The executor's view of the caller's :class:`Events`: best effort, never fatal.

    Every public attribute of the wrapped sink that is callable (today's methods
    and any added later: the guard is in ``__getattribute__``, not per method)
    is called through a guard. The first exception (a closed stderr, a bug in a
    sink) switches the sink off for the rest of the run and is kept in
    :attr:`problem`; it never reaches the run. Every message, phase and job state
    also goes to the :data:`PROGRESS_LOGGER` logger, sink or no sink, so that an
    orchestrator's own logging shows what a run does. ``KeyboardInterrupt`` and other
    ``BaseException`` that are not ``Exception`` pass: they are the user's.
    """

    def __init__(self, inner: Events) -> None:
        self._inner = inner
        self._problem: str | None = None

    @property
    def problem(self) -> str | None:
        """Why progress output stopped: the sink's first exception, or its own word
        (a :class:`~slurm_fsm.progress.StderrEvents` silenced by a dead stream)."""
        if self._problem is not None:
            return self._problem
        silenced = getattr(self._inner, "silenced", None)
        return silenced if isinstance(silenced, str) else None

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name == "problem":
            return object.__getattribute__(self, name)
        target = getattr(object.__getattribute__(self, "_inner"), name)
        if not callable(target):
            return target

        def guarded(*args: Any, **kwargs: Any) -> Any:
            _log_progress(name, args)
            if object.__getattribute__(self, "_problem") is not None:
                return None
            try:
                return target(*args, **kwargs)
            except Exception as exc:
                self._problem = f"{type(exc).__name__}: {exc}"
                return None

        return guarded


@attrs.frozen(kw_only=True)
class PreStepResult:
    """What the pre-step (image resolution and build) decided."""

    ok: bool
    spec: JobSpec  # possibly with docker_image resolved
    summary: str = ""
    log_tail: tuple[str, ...] = ()
    log_path: str | None = None
    job_id: str | None = None
    warnings: tuple[str, ...] = ()


class PreStep(Protocol):
    """Runs before step 0 when ``build_project`` is true (see :mod:`slurm_fsm.build`)."""

    def __call__(self, spec: JobSpec, backend: SlurmBackend, events: Events) -> PreStepResult: ...
