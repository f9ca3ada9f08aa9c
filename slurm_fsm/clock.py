"""Time, injectable: the real clock, or a fake one that tests advance by hand."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = [
    "Clock",
    "SystemClock",
    "backoff",
]


class Clock(Protocol):
    """What the machine, the monitor and the executor read time from: ``now()`` on a
    monotonic scale and ``sleep()``. :class:`SystemClock` is the real one; the fake
    cluster's clock moves only when told, so tests never wait."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real :class:`Clock`: ``time.monotonic()`` and ``time.sleep()`` (the default
    of every component that takes a ``clock``)."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


def backoff(attempt: int, first: float = 0.2, factor: float = 2.0, cap: float = 10.0) -> float:
    """Delay before poll number ``attempt`` (0-based): fast at first, then bounded."""
    return float(min(cap, first * factor ** min(attempt, 60)))
