"""A run's lease stopped after its report, not before: the wait for the step to end
moves off the report's path, and whatever relies on the lease being gone waits for it.

Stopping a lease step (:class:`slurm_fsm.subprocess_backend.LocalLease`) is a SIGTERM
to its ``srun``'s group and a wait until ``srun`` has ended the step (about 80 ms on the
local cluster: ``srun`` tells slurmd, slurmd ends the step). A run's report does not
depend on that wait: its job and its steps are gone before the lease is stopped. So
:func:`stop_soon` sends the signal at once and waits in a thread of this process; the
report is handed back meanwhile.

The lease's guarantees are kept:

* whatever relies on a lease of this process being gone waits for it first
  (:func:`settle`): the lease gate (:class:`slurm_fsm.lease.LeaseGate`, before a
  release, a replacement or a re-import counts an allocation's holders) and the next
  run or release of this process (:class:`slurm_fsm.persistent.PersistentRun`);
* the thread is not a daemon: the process exits only once the step is gone, as before
  (another process, a ``slurm-fsm release`` after a ``slurm-fsm run``, never sees it);
* the step is tied to this process's life as before (:mod:`slurm_fsm.scriptguard`):
  should the process die meanwhile, Slurm ends it a fraction of a second later.

A lease that cannot signal without waiting (no ``begin_stop``: the fake cluster's,
whose stop is instant) is stopped at once, in the caller's thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["StopsInTwo", "pending", "settle", "stop_soon"]


class _Stoppable(Protocol):
    def stop(self) -> None: ...


@runtime_checkable
class StopsInTwo(Protocol):
    """A lease whose stop is two halves: :meth:`begin_stop` (the signal, no wait) and
    ``stop()`` (the wait until the step is gone; twice is harmless)."""

    def begin_stop(self) -> None:
        """Ask the step to end (a signal), without waiting."""
        ...

    def stop(self) -> None:
        """Wait until the step is gone (after :meth:`begin_stop`: the wait alone)."""
        ...


_mutex = threading.Lock()
#: the stops under way in this process: allocation job id -> their threads
_pending: dict[str, list[threading.Thread]] = {}


def stop_soon(lease: _Stoppable, job_id: str,
              on_error: Callable[[BaseException], None] | None = None) -> None:
    """Stop ``lease`` (a lease step of allocation ``job_id``): the signal now, the wait
    in a thread of this process (:func:`settle` waits for it). A lease without
    ``begin_stop`` is stopped here. ``on_error``: told what the wait raised."""
    if not isinstance(lease, StopsInTwo):
        lease.stop()
        return
    lease.begin_stop()

    def wait() -> None:
        try:
            lease.stop()
        except Exception as exc:
            if on_error is not None:
                on_error(exc)
        finally:
            with _mutex:
                threads = _pending.get(job_id, [])
                if me in threads:
                    threads.remove(me)
                if not threads:
                    _pending.pop(job_id, None)

    me = threading.Thread(target=wait, name=f"slurm-fsm-lease-stop-{job_id}", daemon=False)
    with _mutex:  # started under the lock: a settle() never finds it not started yet
        _pending.setdefault(job_id, []).append(me)
        me.start()


def pending(job_id: str | None = None) -> int:
    """How many lease stops of this process are under way (on ``job_id``, or all)."""
    with _mutex:
        if job_id is not None:
            return len(_pending.get(job_id, []))
        return sum(len(t) for t in _pending.values())


def settle(job_id: str | None = None) -> None:
    """Return once this process's leases being stopped (on ``job_id``, or all) are
    gone. Each stop is bounded by its lease's own grace (SIGKILL after it)."""
    with _mutex:
        threads = [t for key, ts in _pending.items() if job_id in (None, key) for t in ts]
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join()
