"""Time, injectable: the real clock, or a fake one that tests advance by hand."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = [
    "Clock",
    "SystemClock",
    "backend_clock",
    "backoff",
]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


def backoff(attempt: int, first: float = 0.2, factor: float = 2.0, cap: float = 10.0) -> float:
    """Delay before poll number ``attempt`` (0-based): fast at first, then bounded."""
    return float(min(cap, first * factor ** min(attempt, 60)))


@runtime_checkable
class _HasClock(Protocol):
    clock: Clock


def backend_clock(backend: object) -> Clock:
    """The clock a run on ``backend`` keeps time with when the caller names none: the
    backend's own (a :class:`~slurm_fsm.testing.FakeCluster`'s fake clock, so that its
    allocations expire and its scripts time out on the time the test moves), else the
    system clock. The one place that asks; once ``SlurmBackend`` declares ``clock``
    this is ``return backend.clock``."""
    if isinstance(backend, _HasClock):
        return backend.clock
    return SystemClock()
