"""The one cattrs converter: how job specs, state files, reports and the run's records
cross the edge.

:func:`configure_converter` registers every hook, in one place (as cattrs' own
``preconf`` modules do); :data:`converter` is the one converter it configured. Every
per-field check lives in a structure hook here, so that cattrs' detailed validation
collects *all* bad fields of a document with their paths, and :func:`problems_of` turns
them into ``path: what is wrong`` lines. The classes that cross the edge say what is
theirs declaratively (an enum's values, a field's ``metadata``): this module imports
none of them, and every module above it may import it.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, NewType

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from slurm_fsm.duration import Duration

__all__ = [
    "ARCHES",
    "GOOD_ITEMS",
    "OMIT",
    "OR_DEFAULT",
    "READ_AS",
    "Arch",
    "Digits",
    "JsonInt",
    "JsonObject",
    "Mount",
    "Mounts",
    "NodeCount",
    "NonEmptyText",
    "NonNegativeInt",
    "NonNegativeJsonInt",
    "Patterns",
    "PositiveInt",
    "PositiveJsonInt",
    "Scalars",
    "Seconds",
    "StepId",
    "Text",
    "configure_converter",
    "converter",
    "make_converter",
    "problems_of",
    "show",
    "structure_record",
]

PositiveInt = NewType("PositiveInt", int)
NonNegativeInt = NewType("NonNegativeInt", int)
#: Comma-separated text or a list of strings; stored as a tuple of non-empty strings.
Patterns = NewType("Patterns", tuple[str, ...])

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


@attrs.frozen
class Mount:
    """One ``host:container[:flags]`` entry of ``container_mounts``."""

    host: str
    container: str
    flags: str = ""

    @classmethod
    def parse(cls, text: str) -> Mount:
        parts = text.strip().split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise ValueError(f"must be host:container[:flags], got {show(text)}")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else "")

    def __str__(self) -> str:
        return f"{self.host}:{self.container}" + (f":{self.flags}" if self.flags else "")


#: The spec's ``container_mounts``: comma-separated text or a list; written as text.
Mounts = NewType("Mounts", tuple[Mount, ...])


def _mounts(value: object, _: Any) -> Mounts:
    if value is None or value == "":
        return Mounts(())
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError(f"must be comma-separated host:container pairs, got {show(value)}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"must be host:container[:flags] text, got {show(item)}")
        out.append(Mount.parse(item))
    return Mounts(tuple(out))


#: The spec's ``arch``: one of :data:`ARCHES`.
Arch = NewType("Arch", str)
ARCHES = ("x86_64", "aarch64")


def _arch(value: object, _: Any) -> Arch:
    if not isinstance(value, str) or value not in ARCHES:
        raise ValueError(f"must be one of {', '.join(ARCHES)}, got {show(value)}")
    return Arch(value)


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Enum)


def _enum_structure(kind: type[Enum]) -> Callable[[object, Any], Enum]:
    """An enum is read by its value; one whose values are its names (``Status``) also
    by its name in any case, around spaces (``" passed"``)."""
    by_name = all(m.name == m.value for m in kind)

    def structure(value: object, _: Any) -> Enum:
        if isinstance(value, kind):
            return value
        for member in kind:
            if isinstance(value, str) and value == member.value:
                return member
        if by_name and isinstance(value, str) and value.strip().upper() in kind.__members__:
            return kind[value.strip().upper()]
        allowed = ", ".join(str(m.value) for m in kind)
        raise ValueError(f"must be one of {allowed}, got {show(value)}")
    return structure


#: ``attrs.field(metadata={OMIT: True})``: a field that is never written (a spec's
#: ``load_warnings``: what loading it said, not part of it).
OMIT = "slurm_fsm.convert.omit"


def _has_omitted(kind: Any) -> bool:
    return attrs.has(kind) and any(f.metadata.get(OMIT) for f in attrs.fields(kind))


def _omitting(conv: cattrs.Converter) -> Callable[[Any], Callable[[Any], Any]]:
    def factory(kind: Any) -> Callable[[Any], Any]:
        omitted: dict[str, Any] = {f.name: override(omit=True) for f in attrs.fields(kind)
                                     if f.metadata.get(OMIT)}
        return make_dict_unstructure_fn(kind, conv, **omitted)
    return factory


#: ``metadata={READ_AS: kind}``: the field is read as ``kind``, a stricter type of the
#: same values (:data:`JsonInt`, :data:`StepId`).
READ_AS = "slurm_fsm.convert.read_as"
#: ``metadata={OR_DEFAULT: True}``: a bad value is read as the field's default (a hint
#: of a record, never a reason to refuse the whole record).
OR_DEFAULT = "slurm_fsm.convert.or_default"
#: ``metadata={GOOD_ITEMS: kind}``: a tuple field keeps the items that read as ``kind``
#: and drops the others (an older record's bare step ids); anything not a list is ().
GOOD_ITEMS = "slurm_fsm.convert.good_items"

#: An integer as JSON writes it: not a bool, not text.
JsonInt = NewType("JsonInt", int)
#: A Slurm step id: ``3``, or ``3+1`` (a heterogeneous job's component).
StepId = NewType("StepId", str)
_STEP_ID = re.compile(r"\d+(\+\d+)?", re.ASCII)
#: A record's text: a string, nothing else (no number read as text).
Text = NewType("Text", str)
#: A record's JSON scalars by name (a script's identity): values that are not text or
#: integers are dropped; null or empty is {}.
Scalars = NewType("Scalars", dict[str, str | int])


#: A :data:`JsonInt` above 0 (a pid), and one of 0 or more (seconds of lead time).
PositiveJsonInt = NewType("PositiveJsonInt", int)
NonNegativeJsonInt = NewType("NonNegativeJsonInt", int)
#: A node count a record may hold: 1 to 2**20.
NodeCount = NewType("NodeCount", int)
MAX_NODE_COUNT = 1 << 20
#: Seconds a record may hold: a finite number, 0 to 366 days (an int stays an int).
Seconds = NewType("Seconds", float)
MAX_RECORD_SECONDS = 366 * 24 * 3600
#: Text that is not empty (a job name).
NonEmptyText = NewType("NonEmptyText", str)
#: A job id as a record holds it: decimal digits only.
Digits = NewType("Digits", str)
#: A JSON object (a spec as a run used it), as it is.
JsonObject = NewType("JsonObject", dict[str, Any])


def _json_int(value: object, minimum: int | None = None, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"must be an integer, got {show(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"must be >= {minimum}, got {show(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"must be <= {maximum}, got {show(value)}")
    return value


def _seconds(value: object, _: Any) -> Seconds:
    """A number of seconds: finite, 0 to :data:`MAX_RECORD_SECONDS` (an int past float
    range is no such number: no OverflowError)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and (
        0 <= value <= MAX_RECORD_SECONDS if isinstance(value, int)
        else math.isfinite(value) and 0 <= value <= MAX_RECORD_SECONDS)
    if not ok:
        raise ValueError(f"must be seconds from 0 to {MAX_RECORD_SECONDS}, got {show(value)}")
    return Seconds(value)  # type: ignore[arg-type]


def _non_empty_text(value: object, _: Any) -> NonEmptyText:
    if isinstance(value, str) and value:
        return NonEmptyText(value)
    raise ValueError(f"must be a non-empty string, got {show(value)}")


def _digits(value: object, _: Any) -> Digits:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return Digits(value)
    raise ValueError(f"must be a job id (digits), got {show(value)}")


def _json_object(value: object, _: Any) -> JsonObject:
    if isinstance(value, dict):
        return JsonObject(value)
    raise ValueError(f"must be an object, got {show(value)}")


def _step_id(value: object, _: Any) -> StepId:
    if isinstance(value, str) and _STEP_ID.fullmatch(value):
        return StepId(value)
    raise ValueError(f"must be a step id such as 3 or 3+1, got {show(value)}")


def _text(value: object, _: Any) -> Text:
    if isinstance(value, str):
        return Text(value)
    raise ValueError(f"must be a string, got {show(value)}")


def _scalars(value: object, _: Any) -> Scalars:
    if not value:
        return Scalars({})
    if not isinstance(value, dict):
        raise ValueError(f"must be an object, got {show(value)}")
    return Scalars({str(k): v for k, v in value.items() if isinstance(v, str | int)})


_BAD = (ValueError, TypeError, KeyError, cattrs.BaseValidationError)


def _field_hook(conv: cattrs.Converter, field: Any) -> Callable[[object, Any], Any] | None:
    """The structure hook of one field of a record, from its metadata; None: cattrs'.
    The hooks of the types read are looked up once (a history has thousands of lines)."""
    meta, kind = field.metadata, field.metadata.get(READ_AS, field.type)
    if GOOD_ITEMS in meta:
        item = meta[GOOD_ITEMS]
        read_item = conv.get_structure_hook(item)

        def good(value: object, _: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                return ()
            out = []
            for v in value:
                try:
                    out.append(read_item(v, item))
                except _BAD:
                    continue
            return tuple(out)
        return good
    read = conv.get_structure_hook(kind)
    if meta.get(OR_DEFAULT):
        default = field.default

        def or_default(value: object, _: Any) -> Any:
            try:
                return read(value, kind)
            except _BAD:
                return default.factory() if hasattr(default, "factory") else default
        return or_default
    if READ_AS in meta:
        return lambda value, _: read(value, kind)
    return None


_RECORD_KEYS = (READ_AS, OR_DEFAULT, GOOD_ITEMS)


def _is_record(kind: Any) -> bool:
    return attrs.has(kind) and any(k in f.metadata for f in attrs.fields(kind)
                                   for k in _RECORD_KEYS)


def _reading(conv: cattrs.Converter) -> Callable[[Any], Callable[[Any, Any], Any]]:
    def factory(kind: Any) -> Callable[[Any, Any], Any]:
        attrs.resolve_types(kind)
        hooks = {f.name: _field_hook(conv, f) for f in attrs.fields(kind)}
        fields: dict[str, Any] = {name: override(struct_hook=hook)
                                  for name, hook in hooks.items() if hook is not None}
        return make_dict_structure_fn(kind, conv, **fields)
    return factory


def configure_converter(conv: cattrs.Converter) -> None:
    """Register every hook of slurm_fsm on ``conv``: the checked values (counts, flags,
    text, durations, patterns, paths, mounts, arch; a record's strict integers, step
    ids, text and scalars), every enum by its value, the fields a class marks
    :data:`OMIT`, and the record fields marked :data:`READ_AS`, :data:`OR_DEFAULT` or
    :data:`GOOD_ITEMS`."""
    conv.register_structure_hook(PositiveInt, lambda v, _: PositiveInt(_int(v, 1)))
    conv.register_structure_hook(NonNegativeInt, lambda v, _: NonNegativeInt(_int(v, 0)))
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook(Duration, _duration)
    conv.register_structure_hook(Patterns, lambda v, t: Patterns(_patterns(v, t)))
    conv.register_structure_hook(Path, _path)
    conv.register_structure_hook(Mounts, _mounts)
    conv.register_structure_hook(Arch, _arch)
    conv.register_structure_hook(JsonInt, lambda v, _: JsonInt(_json_int(v)))
    conv.register_structure_hook(PositiveJsonInt, lambda v, _: PositiveJsonInt(_json_int(v, 1)))
    conv.register_structure_hook(NonNegativeJsonInt,
                                 lambda v, _: NonNegativeJsonInt(_json_int(v, 0)))
    conv.register_structure_hook(NodeCount,
                                 lambda v, _: NodeCount(_json_int(v, 1, MAX_NODE_COUNT)))
    conv.register_structure_hook(Seconds, _seconds)
    conv.register_structure_hook(NonEmptyText, _non_empty_text)
    conv.register_structure_hook(Digits, _digits)
    conv.register_structure_hook(JsonObject, _json_object)
    conv.register_structure_hook(StepId, _step_id)
    conv.register_structure_hook(Text, _text)
    conv.register_structure_hook(Scalars, _scalars)
    conv.register_structure_hook_factory(_is_record, _reading(conv))
    conv.register_structure_hook_factory(_is_enum, _enum_structure)
    conv.register_unstructure_hook(Duration, lambda d: d.as_slurm())
    conv.register_unstructure_hook(Path, str)
    conv.register_unstructure_hook(Mounts, lambda ms: ",".join(str(m) for m in ms))
    conv.register_unstructure_hook_func(_is_enum, lambda e: e.value)
    conv.register_unstructure_hook_factory(_has_omitted, _omitting(conv))


def make_converter() -> cattrs.Converter:
    """A converter configured by :func:`configure_converter` (detailed validation,
    unknown keys ignored: the files are shared with other tools and other versions)."""
    conv = cattrs.Converter(detailed_validation=True, forbid_extra_keys=False)
    configure_converter(conv)
    return conv


#: The one converter: every document of slurm_fsm crosses the edge through it.
converter = make_converter()


def structure_record(data: object, kind: type[Any], what: str) -> Any:
    """``data`` read as a ``kind`` with :data:`converter`; raises ValueError naming
    every bad field (``not a run record: pid: must be an integer, got 'x'``)."""
    if not isinstance(data, dict):
        raise ValueError(f"not a {what}: must be a JSON object, got {type(data).__name__}")
    try:
        return converter.structure(data, kind)
    except cattrs.BaseValidationError as exc:
        raise ValueError(f"not a {what}: {'; '.join(problems_of(exc))}") from None


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
