"""Leases: nothing changes an allocation under another run's job.

A running persistent job holds a lease on its allocation: its run record
(:mod:`slurm_fsm.runrecord`), alive while its orchestrator process lives. Before step 0
cancels an allocation (``release``, the replacement of an expiring or incompatible
allocation, an orphan found by its tag) or re-imports or installs into a container,
it asks :class:`LeaseGate` to clear the way: the gate waits for the leases on that
allocation (the container's users only, for a container) to end, saying whose it waits
for, or, when told not to wait (``wait_s=0``) or past ``wait_s``, raises
:class:`AllocationInUse` and nothing is changed. The state file's lock is held
meanwhile: no new lease can be taken while the gate waits.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_fsm.clock import Clock, SystemClock
from slurm_fsm.errors import SlurmFsmError
from slurm_fsm.runrecord import RunBook, RunRecord

__all__ = ["AllocationInUse", "LeaseGate"]


class AllocationInUse(SlurmFsmError):
    """Other runs' jobs still use the allocation (or container); nothing was changed."""

    def __init__(self, job_id: str, what: str, holders: list[RunRecord]) -> None:
        self.job_id = job_id
        self.holders = holders
        whose = "; ".join(r.describe() for r in holders)
        super().__init__(
            f"not {what}: allocation {job_id} is in use by {len(holders)} running job(s) of "
            f"other runs ({whose}); nothing was changed. Wait for them, or run again later")


class LeaseGate:
    """Waits for (or refuses on) the live leases of an allocation. ``own``: this run's
    own record, never waited for."""

    def __init__(self, book: RunBook, *, wait_s: float, clock: Clock | None = None,
                 say: Callable[[str], None] | None = None, poll_s: float = 0.5) -> None:
        self.book = book
        self.wait_s = wait_s
        self.clock = clock or SystemClock()
        self.say = say or (lambda _m: None)
        self.poll_s = poll_s
        self.own: str | None = None

    def holders(self, job_id: str, container: str | None = None) -> list[RunRecord]:
        """Live leases on ``job_id`` (of runs using ``container``, when given)."""
        return [r for r in self.book.live(job_id) if r.run_id != self.own
                and (container is None or r.container == container)]

    def clear(self, job_id: str, what: str, container: str | None = None) -> None:
        """Return once no other run's job holds ``job_id`` (or ``container`` on it);
        raise :class:`AllocationInUse` when told not to wait or after ``wait_s``."""
        holders = self.holders(job_id, container)
        if not holders:
            return
        if self.wait_s <= 0:
            raise AllocationInUse(job_id, what, holders)
        deadline = self.clock.now() + self.wait_s
        said: set[str] = set()
        while holders:
            key = ",".join(r.run_id for r in holders)
            if key not in said:
                said.add(key)
                self.say(f"waiting before {what} on allocation {job_id}: "
                         f"{len(holders)} running job(s) use it: "
                         + "; ".join(r.describe() for r in holders)
                         + f" (at most {self.wait_s:g} s)")
            if self.clock.now() >= deadline:
                raise AllocationInUse(job_id, what, holders)
            self.clock.sleep(self.poll_s)
            holders = self.holders(job_id, container)
