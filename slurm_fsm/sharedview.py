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
  instead of asking again (single flight); a run whose need the kept answer meets
  takes it at once, never waiting behind a question asked for a newer one (the
  allocation-end checks of the jobs that just ended: the next jobs' step 0 does not
  wait for them);
- only answers are shared, never errors: a failed question is asked again by the next
  run, as without sharing.

Step 0's proof that the state file's folder is writable (a probe file written, synced
and removed) is shared the same way (:meth:`SharedView.writable_problem`, at most
:data:`WRITABLE_MAX_AGE_S` old); a problem is never shared.

The checks all still happen for every run: the run judges the shared answer as its
own (state, name, time left from the moment asked). A run of the batch gets the view
with its backend: ``run_many`` hands each run a :class:`SharedBackend`, the real
backend wrapped with the batch's view (no ambient state: :func:`view_of` reads it from
the backend a run was given). Outside ``run_many`` (:func:`view_of` is None) every run
asks Slurm itself, as before.

The allocation-end checks of jobs that end while other jobs of the batch still run
wait for each other, at most :data:`END_GATHER_S`, and share one ``squeue``
(:meth:`SharedView.allocation_end_row`): at most one such question per
:data:`END_GATHER_S` for a batch, however fast its jobs end; a report comes that much
later at most, and the batch's last jobs ask at once.

The runs of one ``run_many`` also share one **lease step** per allocation and
container (:meth:`SharedView.lease`): the first run to need it starts it (under the
state file's lock, as a run's own lease), the others join it while it runs and its
``max_until`` is at least their own; the last run to give its share back stops it.
So the lease is listed in Slurm (every host sees it) from the end of the first run's
step 0 until the last run's steps are gone, and a batch pays one lease step, not one
per run. A run that needs a later ``max_until`` than the running lease's starts a
new one (:data:`LEASE_HEADROOM_S` later than it needs, so that the runs after it
join it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar, cast

import attrs

from slurm_fsm import leasestop
from slurm_fsm.backend import GpuProcess, JobInfo, LeaseHandle, SlurmBackend
from slurm_fsm.clock import Clock

__all__ = ["END_GATHER_S", "GPU_MAX_AGE_S", "JOB_MAX_AGE_S", "LEASE_HEADROOM_S",
           "WRITABLE_MAX_AGE_S", "SharedBackend", "SharedLease", "SharedView", "unwrap",
           "view_of"]

#: The oldest job row (``squeue`` of the allocation) a run takes from a sibling, in s.
JOB_MAX_AGE_S = 1.0
#: The oldest GPU check (pre-flight ``srun nvidia-smi``) a run takes from a sibling, in s.
GPU_MAX_AGE_S = 2.0
#: The oldest proof that the state file's folder is writable (step 0's probe file) a
#: run takes from a sibling, in s. Only a proof is shared, never a problem.
WRITABLE_MAX_AGE_S = 1.0
#: The longest an allocation-end check waits for other jobs of the batch to end and
#: share its ``squeue`` (only while another job of the batch holds a slot), in s.
END_GATHER_S = 0.1
#: A shared lease step is started this much later a ``max_until`` than the run that
#: starts it needs, so that the runs that follow within that time join it, in s.
LEASE_HEADROOM_S = 300.0

#: What :meth:`SharedView.lease` calls to start a lease breakable after ``max_until``:
#: the step's handle, its run id, and what to do once it is stopped (its record).
TakeLease = Callable[[float], tuple[LeaseHandle, str, Callable[[], None]]]

T = TypeVar("T")

class SharedView:
    """Answers of one backend, shared by the runs of one process (see the module)."""

    def __init__(self, backend: SlurmBackend, clock: Clock, *,
                 job_max_age_s: float = JOB_MAX_AGE_S,
                 gpu_max_age_s: float = GPU_MAX_AGE_S, slots: int | None = None,
                 end_gather_s: float = END_GATHER_S) -> None:
        self.backend = backend
        #: at most this many jobs' scripts at once (``run_many``'s ``max_parallel``)
        self._slots = threading.BoundedSemaphore(slots) if slots else None
        self._held = threading.local()
        self._slot_change = threading.Condition()
        self._slots_held = 0
        self.end_gather_s = end_gather_s
        #: allocation-end checks waiting for more ends (tests)
        self.gathering = 0
        self.clock = clock
        self.job_max_age_s = job_max_age_s
        self.gpu_max_age_s = gpu_max_age_s
        self._mutex = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._answers: dict[Hashable, tuple[float, object]] = {}
        #: questions asked of Slurm / answers reused (for tests and the benchmark)
        self.asked = 0
        self.reused = 0
        self._lease_lock = threading.Lock()
        self._leases: dict[Hashable, _Lease] = {}
        #: lease steps started / shares of a running one given (tests, the benchmark)
        self.leases_started = 0
        self.leases_joined = 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """One of the batch's job slots, held by this thread around its run: taken
        before step 0 (the job is admitted with it in hand), given back by
        :meth:`free_slot` once the job's script and its steps have ended, or at the end
        of the run. The checks after the script (the allocation-end ``squeue``, the
        report) then overlap the next job's script: ``max_parallel`` bounds the jobs
        running at once, not the runs reporting."""
        if self._slots is None:
            yield
            return
        self._slots.acquire()
        self._held.slot = True
        with self._slot_change:
            self._slots_held += 1
        try:
            yield
        finally:
            self.free_slot()

    def free_slot(self) -> None:
        """Give this thread's job slot back (its script has ended); a no-op when it
        holds none."""
        if self._slots is not None and getattr(self._held, "slot", False):
            self._held.slot = False
            self._slots.release()
            with self._slot_change:
                self._slots_held -= 1
                self._slot_change.notify_all()

    def _shared(self, key: Hashable, max_age_s: float, not_before: float | None,
                ask: Callable[[], T]) -> tuple[T, float]:
        kept: tuple[T, float] | None
        with self._mutex:
            kept = self._kept(key, max_age_s, not_before)
            if kept is not None:  # no wait behind a question in flight for a newer one
                return kept
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # single flight: a sibling asking the same waits for its answer
            with self._mutex:  # asked while this one waited?
                kept = self._kept(key, max_age_s, not_before)
            if kept is not None:
                return kept
            asked_at = self.clock.now()
            answer_new = ask()  # an error propagates and is not kept
            with self._mutex:
                self._answers[key] = (asked_at, answer_new)
                self.asked += 1
            return answer_new, asked_at

    def _kept(self, key: Hashable, max_age_s: float, not_before: float | None
              ) -> tuple[T, float] | None:
        """The kept answer to ``key`` when it meets the caller's need (at most
        ``max_age_s`` old, asked after ``not_before``), counted as reused; else None.
        Under :attr:`_mutex`."""
        got = self._answers.get(key)
        if got is None:
            return None
        at, answer = got
        if self.clock.now() - at > max_age_s or (not_before is not None and at <= not_before):
            return None
        self.reused += 1
        return answer, at  # type: ignore[return-value]

    def query_job(self, job_id: str, *, not_before: float | None = None
                  ) -> tuple[JobInfo, float]:
        """The job's row and when it was asked (at most :attr:`job_max_age_s` ago)."""
        return self._shared(("job", job_id), self.job_max_age_s, not_before,
                            lambda: self.backend.query_job(job_id))

    def allocation_end_row(self, job_id: str, *, ended_at: float) -> tuple[JobInfo, float]:
        """The allocation's row asked after ``ended_at`` (a job's end, on :attr:`clock`),
        and when it was asked: the check whether the allocation ended under the job.

        While another job of the batch holds a slot (its script may end any moment), the
        check first waits up to :attr:`end_gather_s` (real time) for more ends, so that
        the jobs ending together share one ``squeue``; with no job running (the batch's
        last ones) it asks at once. Called without a slot in hand (the job has ended)."""
        with self._slot_change:
            self.gathering += 1
            try:
                self._slot_change.wait_for(lambda: self._slots_held == 0,
                                           timeout=self.end_gather_s)
            finally:
                self.gathering -= 1
        return self.query_job(job_id, not_before=ended_at)

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None
                      ) -> list[GpuProcess]:
        """The GPU check's processes (asked at most :attr:`gpu_max_age_s` ago)."""
        answer, _at = self._shared(("gpu", job_id, nodes, gpus_per_node),
                                   self.gpu_max_age_s, None,
                                   lambda: self.backend.gpu_processes(job_id, nodes,
                                                                      gpus_per_node))
        return list(answer)


    def writable_problem(self, folder: str, ask: Callable[[], str | None]) -> str | None:
        """Why the state file in ``folder`` cannot be written (``ask()``, step 0's probe
        file), or None: a sibling's proof (None) asked at most
        :data:`WRITABLE_MAX_AGE_S` ago is taken; a problem is never kept."""
        key = ("writable", folder)
        with self._mutex:
            got = self._answers.get(key)
        if got is not None and self.clock.now() - got[0] <= WRITABLE_MAX_AGE_S:
            with self._mutex:
                self.reused += 1
            return None
        asked_at = self.clock.now()
        problem = ask()
        if problem is None:
            with self._mutex:
                self._answers[key] = (asked_at, None)
                self.asked += 1
        return problem

    def lease(self, key: Hashable, max_until: float, take: TakeLease
              ) -> tuple[SharedLease, str]:
        """A share of the batch's lease step ``key`` (an allocation and container),
        breakable no earlier than ``max_until``, and its run id: the running one's
        when it runs and lasts that long, else a new one (``take(until)``, ``until``
        :data:`LEASE_HEADROOM_S` past ``max_until``; an error propagates and nothing is
        kept). The share's :meth:`SharedLease.stop` gives it back; the last share
        given back stops the step."""
        with self._lease_lock:
            cur = self._leases.get(key)
            if (cur is not None and cur.holders > 0 and cur.max_until >= max_until
                    and cur.handle.alive()):
                cur.holders += 1
                self.leases_joined += 1
                return SharedLease(self, key, cur), cur.run_id
            until = max_until + LEASE_HEADROOM_S
            handle, run_id, drop = take(until)
            cur = _Lease(handle=handle, run_id=run_id, max_until=until, drop=drop)
            self._leases[key] = cur  # an older one ends with its last holder
            self.leases_started += 1
            return SharedLease(self, key, cur), run_id

    def _give_back(self, key: Hashable, lease: _Lease) -> bool:
        """One share of ``lease`` given back; True when it was the last (the step is
        gone from the table: no new share is given of it, and the caller stops it)."""
        with self._lease_lock:
            lease.holders -= 1
            last = lease.holders == 0
            if last and self._leases.get(key) is lease:
                del self._leases[key]
        return last


@attrs.define(kw_only=True)
class _Lease:
    handle: LeaseHandle
    run_id: str
    max_until: float
    drop: Callable[[], None]
    holders: int = 1


class SharedLease:
    """One run's share of a batch's lease step (:meth:`SharedView.lease`): a
    :class:`~slurm_fsm.backend.LeaseHandle` whose :meth:`stop` gives the share back
    (once); the step ends when the last share is given back."""

    def __init__(self, view: SharedView, key: Hashable, lease: _Lease) -> None:
        self._view = view
        self._key = key
        self._lease = lease
        self._given = False
        #: the last share, given back: the step was signalled, its end not waited for
        self._ending = False
        self._mutex = threading.Lock()

    @property
    def name(self) -> str:
        """The shared step's name."""
        return self._lease.handle.name

    @property
    def run_id(self) -> str:
        """The run id in the step's name (the batch's, not a run's)."""
        return self._lease.run_id

    def alive(self) -> bool:
        """This share is held and the step's ``srun`` runs."""
        return not self._given and self._lease.handle.alive()

    def begin_stop(self) -> None:
        """Give this share back without waiting: the last one asks the step to end (the
        signal, :func:`slurm_fsm.leasestop.stop_soon`'s first half; :meth:`stop` waits).
        A step that cannot be signalled without waiting (the fake cluster's, instant) is
        stopped here. Twice is harmless."""
        with self._mutex:
            if self._given:
                return
            self._given = True
        if not self._view._give_back(self._key, self._lease):
            return
        handle = self._lease.handle
        if isinstance(handle, leasestop.StopsInTwo):
            handle.begin_stop()
            with self._mutex:
                self._ending = True
        else:
            handle.stop()
            self._lease.drop()

    def stop(self) -> None:
        """Give this share back; when it was the last, wait until the step is gone,
        then drop its record. Twice, or after :meth:`begin_stop`, is harmless."""
        self.begin_stop()
        with self._mutex:
            ending, self._ending = self._ending, False
        if ending:
            self._lease.handle.stop()
            self._lease.drop()


class SharedBackend:
    """The backend a run of a ``run_many`` batch is given: ``inner`` in everything,
    carrying the batch's :class:`SharedView` (:func:`view_of`). Whoever asks Slurm
    through a run's backend takes the view from it, explicitly; it answers nothing
    itself (what is shared, and how fresh, is the view's rule)."""

    def __init__(self, inner: SlurmBackend, view: SharedView) -> None:
        self.inner = inner
        self.view = view

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @classmethod
    def wrap(cls, inner: SlurmBackend, view: SharedView) -> SlurmBackend:
        """``inner`` with ``view``, typed as the backend it stands for."""
        return cast(SlurmBackend, cls(inner, view))


def view_of(backend: SlurmBackend) -> SharedView | None:
    """The batch's view a run's ``backend`` carries (None: ask Slurm directly)."""
    return backend.view if isinstance(backend, SharedBackend) else None


def unwrap(backend: SlurmBackend) -> SlurmBackend:
    """The backend a run's ``backend`` wraps (itself when it wraps none)."""
    return backend.inner if isinstance(backend, SharedBackend) else backend
