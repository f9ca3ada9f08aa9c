"""One fresh view of the allocation shared by the concurrent runs of one process
(issue 28, "At the step-rate limit").

:meth:`slurm_fsm.Allocation.run_many` runs many jobs at once in one allocation. Each
run asks Slurm the same questions: step 0's ``squeue`` of the allocation (under the
state file's lock, so one after the other) and the pre-flight's GPU check (an
``srun`` on every node). Asked by 8 runs within a fraction of a second, the answers
are the same; the runs of one ``run_many`` share them through a :class:`SharedView`:

- an answer is reused only when it was asked at most ``max_age_s`` ago
  (:data:`JOB_MAX_AGE_S` for the job row, :data:`GPU_MAX_AGE_S` for the GPU check),
  measured from the moment the question was *asked* (the answer is at least that
  fresh), and never when the caller needs an answer asked after a given moment
  (``not_before``: a run never takes again an answer it has already seen);
- one question at a time per key: a run that needs an answer being asked waits for it
  instead of asking again (single flight);
- only answers are shared, never errors: a failed question is asked again by the next
  run, as without sharing.

The checks all still happen for every run: the run judges the shared answer as its
own (state, name, time left from the moment asked). Outside ``run_many`` (no view
active, :func:`current` is None) every run asks Slurm itself, as before.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from slurm_fsm.backend import GpuProcess, JobInfo, SlurmBackend
from slurm_fsm.clock import Clock

__all__ = ["GPU_MAX_AGE_S", "JOB_MAX_AGE_S", "SharedView", "active", "current"]

#: The oldest job row (``squeue`` of the allocation) a run takes from a sibling, in s.
JOB_MAX_AGE_S = 1.0
#: The oldest GPU check (pre-flight ``srun nvidia-smi``) a run takes from a sibling, in s.
GPU_MAX_AGE_S = 2.0

T = TypeVar("T")

_CURRENT: contextvars.ContextVar[SharedView | None] = contextvars.ContextVar(
    "slurm_fsm_shared_view", default=None)


class SharedView:
    """Answers of one backend, shared by the runs of one process (see the module)."""

    def __init__(self, backend: SlurmBackend, clock: Clock, *,
                 job_max_age_s: float = JOB_MAX_AGE_S,
                 gpu_max_age_s: float = GPU_MAX_AGE_S) -> None:
        self.backend = backend
        self.clock = clock
        self.job_max_age_s = job_max_age_s
        self.gpu_max_age_s = gpu_max_age_s
        self._mutex = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._answers: dict[Hashable, tuple[float, object]] = {}
        #: questions asked of Slurm / answers reused (for tests and the benchmark)
        self.asked = 0
        self.reused = 0

    def _shared(self, key: Hashable, max_age_s: float, not_before: float | None,
                ask: Callable[[], T]) -> tuple[T, float]:
        with self._mutex:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # single flight: a sibling asking the same waits for its answer
            now = self.clock.now()
            got = self._answers.get(key)
            if got is not None:
                at, answer = got
                if now - at <= max_age_s and (not_before is None or at > not_before):
                    self.reused += 1
                    return answer, at  # type: ignore[return-value]
            asked_at = now
            answer_new = ask()  # an error propagates and is not kept
            self._answers[key] = (asked_at, answer_new)
            self.asked += 1
            return answer_new, asked_at

    def query_job(self, job_id: str, *, not_before: float | None = None
                  ) -> tuple[JobInfo, float]:
        """The job's row and when it was asked (at most :attr:`job_max_age_s` ago)."""
        return self._shared(("job", job_id), self.job_max_age_s, not_before,
                            lambda: self.backend.query_job(job_id))

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None
                      ) -> list[GpuProcess]:
        """The GPU check's processes (asked at most :attr:`gpu_max_age_s` ago)."""
        answer, _at = self._shared(("gpu", job_id, nodes, gpus_per_node),
                                   self.gpu_max_age_s, None,
                                   lambda: self.backend.gpu_processes(job_id, nodes,
                                                                      gpus_per_node))
        return list(answer)


def current(backend: SlurmBackend) -> SharedView | None:
    """The view active in this context for ``backend`` (None: ask Slurm directly)."""
    view = _CURRENT.get()
    return view if view is not None and view.backend is backend else None


def active(view: SharedView) -> contextvars.Context:
    """A copy of the current context with ``view`` active: ``ctx.run(fn, ...)``."""
    ctx = contextvars.copy_context()
    ctx.run(_CURRENT.set, view)
    return ctx
