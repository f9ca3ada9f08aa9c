"""The job spec (``job_spec.json``): every field of procedure.md's input table.

Read with :meth:`JobSpec.from_file` or :meth:`JobSpec.from_dict`. A bad spec
raises one :class:`~slurm_fsm.errors.SpecError` listing every bad field by its
path (``slurm_params.nodes: must be >= 1, got 0``); unknown keys are ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any, NewType

import attrs
from cattrs.errors import BaseValidationError
from cattrs.gen import make_dict_structure_fn, override

from slurm_fsm.convert import NonNegativeInt, Patterns, PositiveInt, converter, problems_of
from slurm_fsm.duration import Duration, DurationKind
from slurm_fsm.errors import SpecError

__all__ = [
    "DEFAULT_JOB_NAME_SUFFIX",
    "JobSpec",
    "Mount",
    "PartitionInfo",
    "SlurmEnv",
    "SlurmParams",
    "WorkflowType",
]

DEFAULT_JOB_NAME_SUFFIX = "-trtllm.persistent"


class WorkflowType(Enum):
    PYTEST = "pytest"
    EVAL = "eval"
    BENCHMARK = "benchmark"
    CUSTOM = "custom"


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
            raise ValueError(f"must be host:container[:flags], got {text!r}")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else "")

    def __str__(self) -> str:
        return f"{self.host}:{self.container}" + (f":{self.flags}" if self.flags else "")


def _mounts(value: object, _: Any) -> tuple[Mount, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError(f"must be comma-separated host:container pairs, got {value!r}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"must be host:container[:flags] text, got {item!r}")
        out.append(Mount.parse(item))
    return tuple(out)


def _workflow(value: object, _: Any) -> WorkflowType:
    for w in WorkflowType:
        if value == w.value:
            return w
    allowed = ", ".join(w.value for w in WorkflowType)
    raise ValueError(f"must be one of {allowed}, got {value!r}")


converter.register_structure_hook(WorkflowType, _workflow)
converter.register_unstructure_hook(WorkflowType, lambda w: w.value)

Mounts = NewType("Mounts", tuple[Mount, ...])
converter.register_structure_hook(Mounts, lambda v, t: Mounts(_mounts(v, t)))
converter.register_unstructure_hook(Mounts, lambda ms: ",".join(str(m) for m in ms))


def _non_empty(value: object, _: Any) -> str:
    """Names that end up on a Slurm command line: non-empty, no spaces."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be non-empty text, got {value!r}")
    if any(c.isspace() for c in value.strip()):
        raise ValueError(f"must not contain spaces, got {value!r}")
    return value.strip()


def _optional_non_empty(value: object, t: Any) -> str | None:
    return None if value is None else _non_empty(value, t)


_NAME = override(struct_hook=_non_empty)
_OPTIONAL_NAME = override(struct_hook=_optional_non_empty)


@attrs.frozen
class SlurmParams:
    partition: str
    account: str
    nodes: PositiveInt = PositiveInt(1)
    ntasks: PositiveInt | None = None
    ntasks_per_node: PositiveInt | None = None
    gpus_per_node: NonNegativeInt | None = None
    time_limit: Duration | None = None


Arch = NewType("Arch", str)
ARCHES = ("x86_64", "aarch64")


def _arch(value: object, _: Any) -> Arch:
    if value not in ARCHES:
        raise ValueError(f"must be one of {', '.join(ARCHES)}, got {value!r}")
    return Arch(str(value))


converter.register_structure_hook(Arch, _arch)


@attrs.frozen
class PartitionInfo:
    name: str
    arch: Arch | None = None


@attrs.frozen
class SlurmEnv:
    partitions: tuple[PartitionInfo, ...] = ()


@attrs.frozen
class JobSpec:
    """A job for slurm_fsm. Paths are absolute (relative ones resolved on load)."""

    script_path: Path
    work_dir: Path
    model_name: str
    repo_root: Path
    slurm_params: SlurmParams
    workflow_type: WorkflowType = WorkflowType.CUSTOM
    success_patterns: Patterns = Patterns(())
    failure_patterns: Patterns = Patterns(())
    log_file_pattern: str | None = None
    monitor_timeout_seconds: PositiveInt = PositiveInt(3600)
    persistent_mode: bool = True
    release_allocation: bool = False
    alloc_time_limit: Duration = Duration.parse("04:00:00")
    docker_image: str | None = None
    container_name: str | None = None
    container_mounts: Mounts = Mounts(())
    build_project: bool = False
    device_type: str | None = None
    slurm_env: SlurmEnv = SlurmEnv()
    user_root_dir: str | None = None
    skip_install: bool = False
    #: Job name of the persistent allocation; how orphans are found.
    alloc_job_name: str | None = None

    @property
    def job_name(self) -> str:
        """``<account>-trtllm.persistent`` unless ``alloc_job_name`` is set."""
        return self.alloc_job_name or f"{self.slurm_params.account}{DEFAULT_JOB_NAME_SUFFIX}"

    @property
    def state_path(self) -> Path:
        return self.repo_root / "work_dirs" / ".slurm_alloc.json"

    @property
    def salloc_log(self) -> Path:
        return self.repo_root / "work_dirs" / ".salloc.log"

    @property
    def persistent_log(self) -> Path:
        return self.work_dir / f"{self.model_name}_{self.workflow_type.value}.log"

    @property
    def mounts_text(self) -> str:
        return ",".join(str(m) for m in self.container_mounts)

    @property
    def installs(self) -> bool:
        """Whether step 0E/0F runs the install (not for custom with skip_install)."""
        return not (self.workflow_type is WorkflowType.CUSTOM and self.skip_install)

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: Path | None = None,
                  source: str = "job spec") -> JobSpec:
        """Build a spec from parsed JSON. Relative paths resolve against ``base_dir``
        (default: the current directory)."""
        if not isinstance(data, Mapping):
            raise SpecError(source, [f"(top): must be a JSON object, got {type(data).__name__}"])
        problems = _cross_field_problems(data)
        spec: JobSpec | None = None
        try:
            spec = converter.structure(dict(data), cls)
        except BaseValidationError as exc:
            problems = problems_of(exc) + problems
        if problems or spec is None:
            raise SpecError(source, problems)
        base = (base_dir or Path.cwd()).resolve()
        return attrs.evolve(
            spec,
            script_path=_absolute(spec.script_path, base),
            work_dir=_absolute(spec.work_dir, base),
            repo_root=_absolute(spec.repo_root, base),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> JobSpec:
        """Read ``job_spec.json``. Relative paths in it resolve against its folder."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(str(p), ["(file): no such file"]) from None
        except OSError as exc:
            raise SpecError(str(p), [f"(file): cannot read: {exc.strerror}"]) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno} column {exc.colno}"
            raise SpecError(str(p), [f"(file): not valid JSON: {exc.msg} at {where}"]) from None
        return cls.from_dict(data, base_dir=p.resolve().parent, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = converter.unstructure(self)
        return out


converter.register_structure_hook(
    SlurmParams,
    make_dict_structure_fn(SlurmParams, converter, partition=_NAME, account=_NAME),
)
converter.register_structure_hook(
    JobSpec,
    make_dict_structure_fn(
        JobSpec, converter, model_name=_NAME, docker_image=_OPTIONAL_NAME,
        container_name=_OPTIONAL_NAME, alloc_job_name=_OPTIONAL_NAME,
    ),
)


def _absolute(p: Path, base: Path) -> Path:
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


def _cross_field_problems(data: Mapping[str, Any]) -> list[str]:
    """Checks that need more than one field; done on the raw document so that they
    are reported together with the per-field problems."""
    out: list[str] = []

    def flag(key: str, default: bool) -> bool | None:
        """The boolean value of ``key``, or None when it is not one (reported elsewhere)."""
        v = data.get(key, default)
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
            return v.strip().lower() in ("true", "yes", "1")
        return None

    persistent = flag("persistent_mode", True)
    if persistent is False and flag("release_allocation", False) is False:
        pattern = data.get("log_file_pattern")
        if not pattern:
            out.append("log_file_pattern: required when persistent_mode is false")
        elif isinstance(pattern, str) and "/" in pattern:
            out.append("log_file_pattern: must be a file name in work_dir, not a path")
    image = data.get("docker_image")
    if image and persistent and not data.get("container_name"):
        out.append("container_name: required when docker_image is set "
                   "(it must equal the script's --container-name)")
    alloc = data.get("alloc_time_limit")
    if isinstance(alloc, str | int) and not isinstance(alloc, bool):
        try:
            d = Duration.parse(str(alloc))
        except ValueError:
            pass  # reported by the converter
        else:
            if d.kind in (DurationKind.NOT_SET, DurationKind.INVALID):
                out.append(f"alloc_time_limit: must be a time limit, got {alloc!r}")
            elif d.is_finite and (d.seconds or 0) < 60:
                out.append(f"alloc_time_limit: must be at least one minute, got {alloc!r}")
    return out
