"""The one cattrs converter: how job specs, state files and reports cross the edge.

Every per-field check lives in a structure hook here, so that cattrs' detailed
validation collects *all* bad fields of a document with their paths, and
:func:`problems_of` turns them into ``path: what is wrong`` lines.
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any, NewType

import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from slurm_fsm.duration import Duration

__all__ = [
    "NonNegativeInt",
    "Patterns",
    "PositiveInt",
    "converter",
    "problems_of",
    "show",
]

PositiveInt = NewType("PositiveInt", int)
NonNegativeInt = NewType("NonNegativeInt", int)
#: Comma-separated text or a list of strings; stored as a tuple of non-empty strings.
Patterns = NewType("Patterns", tuple[str, ...])

converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=False)


_SHOW = reprlib.Repr()
_SHOW.maxstring = 60
_SHOW.maxother = 60
_SHOW.maxlong = 40


def show(value: object) -> str:
    """``repr`` for a message: bounded in length and depth, whatever the value."""
    return _SHOW.repr(value)


#: ASCII digits only (``str.isdigit`` also takes ``²``), and few enough of them that
#: ``int()`` never meets Python's digit limit.
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,100}", re.ASCII)


def _int(value: object, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, got {show(value)}")
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise ValueError(f"must be an integer, got {show(value)}")
    if value < minimum:
        raise ValueError(f"must be >= {minimum}, got {show(value)}")
    return value


def _bool(value: object, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"must be true or false, got {show(value)}")


def _str(value: object, _: Any) -> str:
    if isinstance(value, str):
        if "\0" in value:
            raise ValueError(f"must not contain a NUL byte, got {show(value)}")
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # job ids written as numbers by other tools
    raise ValueError(f"must be a string, got {show(value)}")


def _duration(value: object, _: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Duration.parse(str(value))  # Slurm reads a bare number as minutes
    if not isinstance(value, str):
        raise ValueError(f"must be a Slurm time such as 04:00:00, got {show(value)}")
    return Duration.parse(value)


def _patterns(value: object, _: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise ValueError(
            f"must be comma-separated text or a list of strings, got {show(value)}")
    return tuple(s.strip() for s in items if s.strip())


def _path(value: object, _: Any) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty path, got {show(value)}")
    if "\0" in value:
        raise ValueError(f"must not contain a NUL byte, got {show(value)}")
    return Path(value).expanduser()


converter.register_structure_hook(PositiveInt, lambda v, _: PositiveInt(_int(v, 1)))
converter.register_structure_hook(NonNegativeInt, lambda v, _: NonNegativeInt(_int(v, 0)))
converter.register_structure_hook(bool, _bool)
converter.register_structure_hook(str, _str)
converter.register_structure_hook(Duration, _duration)
converter.register_structure_hook(Patterns, lambda v, t: Patterns(_patterns(v, t)))
converter.register_structure_hook(Path, _path)
converter.register_unstructure_hook(Duration, lambda d: d.as_slurm())
converter.register_unstructure_hook(Path, str)


def _message(exc: BaseException) -> str:
    """What a person is shown: the message of a ValueError raised by a hook here; never
    Python's own text (``string indices must be integers``) for anything else."""
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    return "invalid value"


def problems_of(exc: BaseException, path: str = "") -> list[str]:
    """Flatten a cattrs validation error into ``a.b.c: what is wrong`` lines."""
    out: list[str] = []
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            name = getattr(note, "name", None)
            index = getattr(note, "index", None)
            if name is not None:
                child = f"{path}.{name}" if path else str(name)
            else:
                child = f"{path}[{index}]"
            out.extend(problems_of(sub, child))
        for sub in without:
            out.extend(problems_of(sub, path))
    elif isinstance(exc, ForbiddenExtraKeysError):
        out.append(f"{path or '(top)'}: unknown keys {sorted(exc.extra_fields)}")
    elif isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            out.extend(problems_of(inner, path))
    else:
        out.append(f"{path or '(top)'}: {_message(exc)}")
    return out
