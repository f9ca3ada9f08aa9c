"""Slurm durations: what ``--time`` takes and what ``squeue %L`` prints."""

from __future__ import annotations

import re
import reprlib
from enum import Enum

import attrs

__all__ = ["Duration", "DurationKind"]


class DurationKind(Enum):
    FINITE = "finite"
    UNLIMITED = "UNLIMITED"
    NOT_SET = "NOT_SET"
    INVALID = "INVALID"


_D_HMS = re.compile(r"^(?:(?P<d>[0-9]+)-)?(?P<rest>[0-9]+(?::[0-9]+){0,2})$", re.ASCII)
#: Longer text is no Slurm time (and ``int()`` of it could meet Python's digit limit).
_MAX_TEXT = 32


def _show(text: str) -> str:
    return reprlib.repr(text)


@attrs.frozen(order=False)
class Duration:
    """A parsed Slurm time value. ``seconds`` is None unless ``kind`` is FINITE."""

    kind: DurationKind
    seconds: int | None = None

    @classmethod
    def of_seconds(cls, seconds: int) -> Duration:
        if seconds < 0:
            raise ValueError(f"negative duration: {seconds}")
        return cls(DurationKind.FINITE, int(seconds))

    @classmethod
    def parse(cls, text: str) -> Duration:
        """Parse ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``,
        ``UNLIMITED``/``INFINITE``, ``NOT_SET``, ``INVALID``.

        Raises ValueError with the text on anything else.
        """
        t = text.strip()
        if len(t) > _MAX_TEXT:
            raise ValueError(f"not a Slurm duration: {_show(text)}")
        upper = t.upper()
        if upper in ("UNLIMITED", "INFINITE"):
            return cls(DurationKind.UNLIMITED)
        if upper in ("NOT_SET", "N/A"):
            return cls(DurationKind.NOT_SET)
        if upper == "INVALID":
            return cls(DurationKind.INVALID)
        m = _D_HMS.match(t)
        if not m:
            raise ValueError(f"not a Slurm duration: {_show(text)}")
        parts = [int(p) for p in m.group("rest").split(":")]
        if m.group("d") is not None:
            days = int(m.group("d"))
            # D-HH, D-HH:MM, D-HH:MM:SS
            h, mi, s = [*parts, 0, 0][:3]
        else:
            days = 0
            if len(parts) == 1:  # minutes
                h, mi, s = 0, parts[0], 0
            elif len(parts) == 2:  # MM:SS
                h, mi, s = 0, parts[0], parts[1]
            else:
                h, mi, s = parts
        if (m.group("d") is not None or len(parts) == 3) and (mi >= 60 or s >= 60):
            raise ValueError(f"not a Slurm duration: {_show(text)} (minutes/seconds >= 60)")
        if len(parts) == 2 and m.group("d") is None and s >= 60:
            raise ValueError(f"not a Slurm duration: {_show(text)} (seconds >= 60)")
        return cls(DurationKind.FINITE, ((days * 24 + h) * 60 + mi) * 60 + s)

    @property
    def is_finite(self) -> bool:
        return self.kind is DurationKind.FINITE

    def as_slurm(self) -> str:
        """The ``[D-]HH:MM:SS`` form (or the keyword), as Slurm prints it."""
        if self.seconds is None:
            return self.kind.value
        d, rem = divmod(self.seconds, 86400)
        h, rem = divmod(rem, 3600)
        m, s = divmod(rem, 60)
        return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"

    def __str__(self) -> str:
        return self.as_slurm()
