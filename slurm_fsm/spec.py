"""The job spec (``job_spec.json``): every field of procedure.md's input table.

Read with :meth:`JobSpec.from_file` or :meth:`JobSpec.from_dict`. A bad spec
raises one :class:`~slurm_fsm.errors.SpecError` listing every bad field by its
path (``slurm_params.nodes: must be >= 1, got 0``), cross-field problems included,
in one pass. Unknown keys are allowed (job_spec.json is shared with other tools);
one close to a known key (``sucess_patterns``) is a did-you-mean warning in
:attr:`JobSpec.load_warnings`, or a problem with ``strict=True``.

The rules live in one table per class (``_RULES``) and are checked on the typed
values, both when a document is loaded and when an object is built in Python
(``SlurmParams(partition="", nodes=0)`` raises the same SpecError lines, without
the ``slurm_params.`` prefix).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import attrs
from cattrs.errors import BaseValidationError

from slurm_fsm.convert import (
    ARCHES,  # noqa: F401  (kept importable from here)
    OMIT,
    Arch,
    Mount,
    Mounts,
    NonNegativeInt,
    Patterns,
    PositiveInt,
    converter,
    problems_of,
    show,
)
from slurm_fsm.duration import Duration, DurationKind
from slurm_fsm.errors import SpecError
from slurm_fsm.files import FileProblem, Problem, read_bounded
from slurm_fsm.paths import StatePaths
from slurm_fsm.project import DEFAULT_JOB_NAME_SUFFIX

__all__ = [
    "EXPIRY_MARGIN_S",
    "MAX_NAME_LEN",
    "MAX_SPEC_BYTES",
    "JobSpec",
    "Mount",
    "PartitionInfo",
    "SlurmEnv",
    "SlurmParams",
    "WorkflowType",
    "default_job_name",
    "script_problems",
]


#: An allocation with this much time left or less is not reused (procedure 0C): the
#: machine cancels it as expiring, so ``alloc_time_limit`` must be longer. Defined here,
#: the lowest module that needs it (the edge table imports it from here).
EXPIRY_MARGIN_S = 300
#: A job spec is a few hundred bytes; a larger file is refused unread.
MAX_SPEC_BYTES = 1 << 20
#: Partition, account, job and container names.
MAX_NAME_LEN = 128
#: ``model_name`` and ``log_file_pattern``: file names in ``work_dir`` (NAME_MAX is 255
#: bytes, and a suffix is added).
MAX_FILE_NAME_BYTES = 200
MAX_IMAGE_LEN = 512
MAX_PATH_BYTES = 4096
MAX_TEXT_LEN = 4096
MAX_PATTERNS = 256
MAX_PATTERN_LEN = 1024
MAX_NODES = 65_536
MAX_NTASKS = 16_777_216
MAX_NTASKS_PER_NODE = 4096
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_TASK = 4096
MAX_CPUS_PER_NODE = 65536
#: 365 days: the bound of ``monitor_timeout_seconds`` and of finite Slurm times.
MAX_SECONDS = 365 * 86_400
#: The image cache's size limit, at most (GB).
MAX_CACHE_GB = 1_000_000
#: Unknown keys looked at for a did-you-mean, per object (a 1 MiB spec of keys stays fast).
_UNKNOWN_KEYS_EXAMINED = 200


class WorkflowType(Enum):
    """The spec's ``workflow_type``: which parser reads the job's output for the
    report's ``metrics`` (pytest's counts, an eval's scores, a benchmark's figures);
    ``custom`` reads only the success and failure patterns."""

    PYTEST = "pytest"
    EVAL = "eval"
    BENCHMARK = "benchmark"
    CUSTOM = "custom"


# --------------------------------------------------------------------------------------
# Rules: each takes a typed value and raises ValueError with what is wrong. The same
# functions check a loaded document and an object built in Python.

Rule = Callable[[Any], None]

#: What Slurm takes in a partition, account or job name without reading it as a list
#: (``,``), an option (a leading ``-``) or a format field (``|``, ``%``).
_SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*", re.ASCII)
_SLURM_NAME_HELP = ("must be letters, digits and . _ - + (starting with a letter, digit or _; "
                    "Slurm reads ',' as a list)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _text_basics(value: object, max_len: int, *, empty_ok: bool = False,
                 spaces_ok: bool = True) -> str:
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise ValueError(f"must be non-empty text, got {show(value)}")
    if "\0" in value:
        raise ValueError(f"must not contain a NUL byte, got {show(value)}")
    if len(value) > max_len:
        raise ValueError(f"must be at most {max_len} characters, got {len(value)}")
    if not spaces_ok and any(c.isspace() for c in value):
        raise ValueError(f"must not contain spaces, got {show(value)}")
    if _CONTROL.search(value):
        raise ValueError(f"must not contain control characters, got {show(value)}")
    return value


def _slurm_name(value: object) -> None:
    """Partition, account, job and container names: they go on Slurm command lines."""
    text = _text_basics(value, MAX_NAME_LEN, spaces_ok=False)
    if not _SLURM_NAME.fullmatch(text):
        raise ValueError(f"{_SLURM_NAME_HELP}, got {show(text)}")


def _file_name(value: object) -> None:
    """``model_name``, ``log_file_pattern``: one name inside ``work_dir``, never a path."""
    text = _text_basics(value, MAX_FILE_NAME_BYTES, spaces_ok=False)
    if "/" in text or text in (".", ".."):
        raise ValueError(f"must be a file name in work_dir, not a path, got {show(text)}")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_NAME_BYTES:
        raise ValueError(f"must be at most {MAX_FILE_NAME_BYTES} bytes in UTF-8")


def _image(value: object) -> None:
    text = _text_basics(value, MAX_IMAGE_LEN, spaces_ok=False)
    if text.startswith("-"):
        raise ValueError(f"must not start with '-', got {show(text)}")


def _short_text(value: object) -> None:
    _text_basics(value, MAX_NAME_LEN)


def _text(value: object) -> None:
    _text_basics(value, MAX_TEXT_LEN)


def _path(value: object) -> None:
    if not isinstance(value, Path) or not str(value).strip():
        raise ValueError(f"must be a non-empty path, got {show(value)}")
    text = str(value)
    if "\0" in text:
        raise ValueError(f"must not contain a NUL byte, got {show(text)}")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"must be at most {MAX_PATH_BYTES} bytes, got {len(text)} characters")


def _absolute_text(value: object) -> None:
    text = _text_basics(value, MAX_PATH_BYTES)
    if not text.startswith("/"):
        raise ValueError(f"must be an absolute path (the nodes see it too), got {show(text)}")


def _optional(rule: Rule) -> Rule:
    def check(value: object) -> None:
        if value is not None:
            rule(value)

    return check


def _integer(lo: int, hi: int) -> Rule:
    def check(value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"must be an integer, got {show(value)}")
        if value < lo:
            raise ValueError(f"must be >= {lo}, got {show(value)}")
        if value > hi:
            raise ValueError(f"must be <= {hi}, got {show(value)}")

    return check


def _bool(value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {show(value)}")


def _instance(cls: type, what: str) -> Rule:
    def check(value: object) -> None:
        if not isinstance(value, cls):
            raise ValueError(f"must be {what}, got {show(value)}")

    return check


def _time(value: object) -> None:
    if not isinstance(value, Duration):
        raise ValueError(f"must be a Slurm time such as 04:00:00, got {show(value)}")
    if value.is_finite and (value.seconds or 0) > MAX_SECONDS:
        raise ValueError(f"must be at most {Duration.of_seconds(MAX_SECONDS)} or UNLIMITED, "
                         f"got {value}")


def _alloc_time(value: object) -> None:
    """A time limit that leaves the allocation reusable: one with EXPIRY_MARGIN_S or less
    left is cancelled as expiring by the next run (procedure 0C)."""
    _time(value)
    assert isinstance(value, Duration)
    if value.kind in (DurationKind.NOT_SET, DurationKind.INVALID):
        raise ValueError(f"must be a time limit, got {value}")
    margin = Duration.of_seconds(EXPIRY_MARGIN_S)
    if value.is_finite and (value.seconds or 0) <= EXPIRY_MARGIN_S:
        raise ValueError(
            f"must be more than {margin}: an allocation with {margin} or less left is "
            f"cancelled as expiring, so it could never be reused; got {value}")


def _patterns(value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"must be a tuple of strings, got {show(value)}")
    if len(value) > MAX_PATTERNS:
        raise ValueError(f"must be at most {MAX_PATTERNS} patterns, got {len(value)}")
    for v in value:
        if "\0" in v:
            raise ValueError(f"must not contain a NUL byte, got {show(v)}")
        if len(v) > MAX_PATTERN_LEN:
            raise ValueError(f"each must be at most {MAX_PATTERN_LEN} characters, "
                             f"got {len(v)}")


def _mount_list(value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(m, Mount) for m in value):
        raise ValueError(f"must be a tuple of Mount, got {show(value)}")
    for m in value:
        for part in (m.host, m.container, m.flags):
            if not isinstance(part, str):
                raise ValueError(f"must be host:container[:flags] text, got {show(part)}")
            if "\0" in part:
                raise ValueError(f"must not contain a NUL byte, got {show(str(m))}")
            if _CONTROL.search(part) or "," in part:
                raise ValueError(f"must not contain control characters or ',', "
                                 f"got {show(str(m))}")


def _arch_rule(value: object) -> None:
    converter.structure(value, Arch)


# --------------------------------------------------------------------------------------
# The classes. Each checks its rules after __init__ (also on attrs.evolve).


_not_set = object()

#: Per class: field name -> rule on the typed value (filled in below the classes).
_RULES: dict[type, dict[str, Rule]] = {}
#: Per class: checks that need more than one field, on the fields that are themselves good.
_CROSS: dict[type, Callable[[Mapping[str, Any]], list[tuple[str, str]]]] = {}


def _rule_problem(cls: type, name: str, value: object) -> str | None:
    rule = _RULES.get(cls, {}).get(name)
    if rule is None:
        return None
    try:
        rule(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check(cls: type, values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every rule of ``cls`` on ``values`` in field order, then the cross-field checks on
    the fields that passed."""
    problems: list[tuple[str, str]] = []
    good = dict(values)
    for f in attrs.fields(cls):
        if f.name in values and (msg := _rule_problem(cls, f.name, values[f.name])):
            problems.append((f.name, msg))
            del good[f.name]
    cross = _CROSS.get(cls)
    return problems + (cross(good) if cross is not None else [])


def _validate(self: Any) -> None:
    cls = type(self)
    values = {f.name: getattr(self, f.name) for f in attrs.fields(cls)}
    problems = _check(cls, values)
    if problems:
        raise SpecError(cls.__name__, [f"{path}: {msg}" for path, msg in problems])


@attrs.frozen
class SlurmParams:
    """The spec's ``slurm_params``: what the job asks of Slurm (partition, account,
    nodes, tasks, GPUs and CPUs, its time limit). The persistent allocation is sized
    from them (unless ``alloc_*`` says more) and the job's ``SLURM_*`` are set from them;
    one-shot passes them to sbatch where the script's ``#SBATCH`` lines do not. Each
    field is checked as it is built (``SpecError`` naming it; docs/spec.md)."""

    partition: str
    account: str
    nodes: PositiveInt = PositiveInt(1)
    ntasks: PositiveInt | None = None
    ntasks_per_node: PositiveInt | None = None
    gpus_per_node: NonNegativeInt | None = None
    time_limit: Duration | None = None
    #: CPUs of each task (``--cpus-per-task``); None: the job's share of the
    #: allocation's CPUs (:mod:`slurm_fsm.placement`)
    cpus_per_task: PositiveInt | None = None

    __attrs_post_init__ = _validate


@attrs.frozen
class PartitionInfo:
    """One ``slurm_env.partitions[]`` entry of the spec: a partition's ``name`` (a Slurm
    name) and its CPU ``arch`` (``x86_64``/``aarch64``), which the pre-step build uses
    when Slurm does not say it (:mod:`slurm_fsm.build`)."""

    name: str
    arch: Arch | None = None

    __attrs_post_init__ = _validate


@attrs.frozen
class SlurmEnv:
    """The spec's ``slurm_env``: what the spec says of the cluster that Slurm may not
    (today the :class:`PartitionInfo` of each partition it names). Optional; empty by
    default."""

    partitions: tuple[PartitionInfo, ...] = ()

    __attrs_post_init__ = _validate


def default_job_name(account: str, repo_root: Path, *, warm_successor: bool) -> str:
    """The allocation's job name when ``alloc_job_name`` is not set:
    ``<account>-trtllm.persistent``. A warm-successor checkout asks
    ``--dependency=singleton``, which Slurm applies per user and job name: its name
    carries the checkout (the first 8 hex digits of the hash in its ``--comment`` tag,
    :func:`slurm_fsm.ownership.checkout_tag`), so one checkout's fence never holds
    another checkout's allocations (issue 43 item 3)."""
    if not warm_successor:
        return f"{account}{DEFAULT_JOB_NAME_SUFFIX}"
    digest = hashlib.sha256(str(repo_root).encode()).hexdigest()[:8]
    return f"{account}-{digest}{DEFAULT_JOB_NAME_SUFFIX}"


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
    #: the pre-step build's own wall-clock limit (a build takes far longer than a test)
    build_timeout_seconds: PositiveInt = PositiveInt(10800)
    device_type: str | None = None
    slurm_env: SlurmEnv = SlurmEnv()
    user_root_dir: str | None = None
    skip_install: bool = False
    #: Job name of the persistent allocation; how orphans are found.
    alloc_job_name: str | None = None
    #: Nodes of the persistent allocation to make (default: ``slurm_params.nodes``); at
    #: least the job's own. A bigger allocation can hold several jobs.
    alloc_nodes: PositiveInt | None = None
    #: GPUs per node of the persistent allocation to make (default:
    #: ``slurm_params.gpus_per_node``); at least the job's own.
    alloc_gpus_per_node: NonNegativeInt | None = None
    #: CPUs per node of the persistent allocation to make (default: the cluster's
    #: DefCpuPerGPU per GPU, else the node's CPUs in proportion to the GPUs asked, else
    #: the job's tasks: :func:`slurm_fsm.capacity.allocation_request_size`); at least
    #: the job's own tasks per node x cpus_per_task.
    alloc_cpus_per_node: PositiveInt | None = None
    #: How long the job is expected to run, in seconds: a job is started on an allocation
    #: only when its time left covers this plus EXPIRY_MARGIN_S (admission, step 0C).
    #: Default: the p95 of past PASSED runs, else unknown (admitted by the margin alone:
    #: a time limit, slurm_params.time_limit or monitor_timeout_seconds, is an upper
    #: bound, not an estimate).
    expected_duration_seconds: PositiveInt | None = None
    #: Queue the next allocation before this one expires, and set it up while this one
    #: still serves (issue 27, :mod:`slurm_fsm.successor`). Off: exactly as before.
    warm_successor: bool = False
    #: A folder the login host and the nodes share for the cache of installed container
    #: images (:mod:`slurm_fsm.imagecache`, issue 42): an absolute path. Default:
    #: ``$SLURM_FSM_IMAGE_CACHE``, else ``.slurm_fsm_image_cache`` beside the state file.
    image_cache_dir: str | None = None
    #: The image cache's size limit in GB (oldest entries evicted first); 0 turns it
    #: off. Default: ``$SLURM_FSM_IMAGE_CACHE_MAX_GB``, else 100.
    image_cache_max_gb: NonNegativeInt | None = None
    #: What loading noticed but let pass (an unknown key close to a known one). Not a
    #: key of the document; the report and the CLI show them.
    load_warnings: tuple[str, ...] = attrs.field(default=(), kw_only=True, eq=False,
                                                 repr=False, metadata={OMIT: True})

    __attrs_post_init__ = _validate

    @property
    def job_name(self) -> str:
        """``alloc_job_name`` when set, else :func:`default_job_name`:
        ``<account>-trtllm.persistent``, with ``warm_successor`` the checkout's own
        ``<account>-<8 hex of repo_root>-trtllm.persistent``."""
        return self.alloc_job_name or default_job_name(
            self.slurm_params.account, self.repo_root, warm_successor=self.warm_successor)

    @property
    def state_path(self) -> Path:
        """``<repo_root>/work_dirs/.slurm_alloc.json`` (:class:`~slurm_fsm.paths.StatePaths`)."""
        return StatePaths.for_repo(self.repo_root).state

    @property
    def salloc_log(self) -> Path:
        """``<repo_root>/work_dirs/.salloc.log``, beside the state file."""
        return StatePaths.for_repo(self.repo_root).salloc_log

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
                  source: str = "job spec", strict: bool = False,
                  check_script: bool = False) -> JobSpec:
        """Build a spec from parsed JSON. Relative paths resolve against ``base_dir``
        (default: the current directory). ``strict``: an unknown key close to a known
        one is a problem, not a warning. ``check_script``: a ``script_path`` that is not
        a file is a problem of the same pass (for a spec about to run; release and
        status do not need the script). What the script itself says is checked by
        :func:`slurm_fsm.scriptcheck.input_problems`."""
        load = _Load(strict)
        spec = load.obj(cls, data, "")
        problems = [f"{p or '(top)'}: {m}" for p, m in load.problems]
        if strict or problems:  # a refused spec lists its likely typos too, in one pass
            problems += [f"{p}: {m}" for p, m in sorted(load.warnings)]
        base = (base_dir or Path.cwd()).resolve()
        if check_script:
            problems += _script_problems(data, base)
        if problems or not isinstance(spec, JobSpec):
            raise SpecError(source, problems or ["(top): invalid"])
        try:
            spec = attrs.evolve(
                spec,
                script_path=_absolute(spec.script_path, base),
                work_dir=_absolute(spec.work_dir, base),
                repo_root=_absolute(spec.repo_root, base),
                load_warnings=tuple(f"{p}: {m}" for p, m in sorted(load.warnings)),
            )
        except SpecError as exc:  # a path too long once made absolute
            raise SpecError(source, exc.problems) from None
        return spec

    @classmethod
    def from_file(cls, path: str | Path, *, strict: bool = False,
                  check_script: bool = False) -> JobSpec:
        """Read ``job_spec.json`` (a regular file of at most MAX_SPEC_BYTES, UTF-8).
        Relative paths in it resolve against its folder."""
        p = Path(path)
        data = _parse(_read_spec_text(p), str(p))
        return cls.from_dict(data, base_dir=p.resolve().parent, source=str(p), strict=strict,
                             check_script=check_script)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = converter.unstructure(self)
        return out


_RULES.update({
    SlurmParams: {
        "partition": _slurm_name,
        "account": _slurm_name,
        "nodes": _integer(1, MAX_NODES),
        "ntasks": _optional(_integer(1, MAX_NTASKS)),
        "ntasks_per_node": _optional(_integer(1, MAX_NTASKS_PER_NODE)),
        "gpus_per_node": _optional(_integer(0, MAX_GPUS_PER_NODE)),
        "time_limit": _optional(_time),
        "cpus_per_task": _optional(_integer(1, MAX_CPUS_PER_TASK)),
    },
    PartitionInfo: {"name": _slurm_name, "arch": _optional(_arch_rule)},
    SlurmEnv: {},  # partitions: checked item by item when loaded, typed below
    JobSpec: {
        "script_path": _path,
        "work_dir": _path,
        "model_name": _file_name,
        "repo_root": _path,
        "slurm_params": _instance(SlurmParams, "a SlurmParams"),
        "workflow_type": _instance(WorkflowType, "a WorkflowType"),
        "success_patterns": _patterns,
        "failure_patterns": _patterns,
        "log_file_pattern": _optional(_file_name),
        "monitor_timeout_seconds": _integer(1, MAX_SECONDS),
        "persistent_mode": _bool,
        "release_allocation": _bool,
        "alloc_time_limit": _alloc_time,
        "docker_image": _optional(_image),
        "container_name": _optional(_slurm_name),
        "container_mounts": _mount_list,
        "build_project": _bool,
        "build_timeout_seconds": _integer(1, MAX_SECONDS),
        "device_type": _optional(_short_text),
        "slurm_env": _instance(SlurmEnv, "a SlurmEnv"),
        "user_root_dir": _optional(_text),
        "skip_install": _bool,
        "alloc_job_name": _optional(_slurm_name),
        "alloc_nodes": _optional(_integer(1, MAX_NODES)),
        "alloc_gpus_per_node": _optional(_integer(0, MAX_GPUS_PER_NODE)),
        "alloc_cpus_per_node": _optional(_integer(1, MAX_CPUS_PER_NODE)),
        "expected_duration_seconds": _optional(_integer(1, MAX_SECONDS)),
        "warm_successor": _bool,
        "image_cache_dir": _optional(_absolute_text),
        "image_cache_max_gb": _optional(_integer(0, MAX_CACHE_GB)),
        "load_warnings": _instance(tuple, "a tuple"),
    },
})


def _partitions_rule(value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(p, PartitionInfo) for p in value):
        raise ValueError(f"must be a tuple of PartitionInfo, got {show(value)}")


_RULES[SlurmEnv]["partitions"] = _partitions_rule


def _jobspec_cross(v: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    persistent, release = v.get("persistent_mode", _not_set), v.get("release_allocation")
    if persistent is False and release is False and v.get("log_file_pattern", _not_set) is None:
        out.append(("log_file_pattern", "required when persistent_mode is false"))
    if (v.get("docker_image", _not_set) not in (None, _not_set) and persistent is True
            and v.get("container_name", _not_set) is None):
        out.append(("container_name", "required when docker_image is set "
                                      "(it must equal the script's --container-name)"))
    out += _alloc_size_problems(v)
    out += _admission_problems(v)
    return out


def _admission_problems(v: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The job's own expected duration (``expected_duration_seconds``) must fit a new
    allocation of ``alloc_time_limit`` with the EXPIRY_MARGIN_S margin: otherwise no
    allocation could ever admit it. ``slurm_params.time_limit`` is an upper bound, not
    an estimate: equal to ``alloc_time_limit`` (the common case) the job runs, and the
    pre-flight warns when the time left is shorter (issue 41)."""
    if v.get("persistent_mode", _not_set) is not True or v.get("release_allocation"):
        return []
    limit = v.get("alloc_time_limit")
    if not isinstance(limit, Duration) or not limit.is_finite:
        return []
    room = (limit.seconds or 0) - EXPIRY_MARGIN_S
    field, seconds = "expected_duration_seconds", v.get("expected_duration_seconds")
    if not isinstance(seconds, int) or seconds <= room:
        return []
    shown = Duration.of_seconds(seconds)
    return [(field, f"the job expects {shown}, but a new allocation of alloc_time_limit "
                    f"{limit} admits at most {Duration.of_seconds(max(0, room))} (it keeps "
                    f"{Duration.of_seconds(EXPIRY_MARGIN_S)} of margin): raise "
                    "alloc_time_limit or lower the job's duration")]


def _alloc_size_problems(v: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``alloc_nodes`` / ``alloc_gpus_per_node`` / ``alloc_cpus_per_node``: the allocation
    must hold the job."""
    params = v.get("slurm_params")
    if not isinstance(params, SlurmParams):
        return []
    out = []
    nodes = v.get("alloc_nodes")
    if isinstance(nodes, int) and nodes < params.nodes:
        out.append(("alloc_nodes", f"must be >= slurm_params.nodes ({params.nodes}): the "
                                   f"allocation must hold the job, got {nodes}"))
    gpus = v.get("alloc_gpus_per_node")
    wanted = params.gpus_per_node or 0
    if isinstance(gpus, int) and gpus < wanted:
        out.append(("alloc_gpus_per_node", f"must be >= slurm_params.gpus_per_node "
                                           f"({wanted}): the allocation must hold the job, "
                                           f"got {gpus}"))
    cpus = v.get("alloc_cpus_per_node")
    tpn = _tasks_per_node(params)
    cpt = params.cpus_per_task or 1
    if isinstance(cpus, int) and cpus < tpn * cpt:
        out.append(("alloc_cpus_per_node", f"must be >= the job's CPUs per node ({tpn * cpt}: "
                                           f"{tpn} task(s) x cpus_per_task {cpt}): the "
                                           f"allocation must hold the job, got {cpus}"))
    return out


def _tasks_per_node(params: SlurmParams) -> int:
    """``ntasks_per_node``, else ``ntasks`` spread over the nodes, else 1."""
    if params.ntasks_per_node is not None:
        return int(params.ntasks_per_node)
    if params.ntasks is not None:
        return -(-int(params.ntasks) // int(params.nodes))
    return 1


_CROSS[JobSpec] = _jobspec_cross


# --------------------------------------------------------------------------------------
# Loading a document: one pass, every problem and warning by path.

_BAD = object()

#: Fields read from the document as plain text: a number or a list is a mistake there.
_TEXT_FIELDS = {"partition", "account", "name", "model_name", "log_file_pattern",
                "docker_image", "container_name", "device_type", "user_root_dir",
                "alloc_job_name", "image_cache_dir"}
_NOT_KEYS = {"load_warnings"}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _did_you_mean(key: str, names: list[str]) -> str | None:
    if len(key) > 64:
        return None
    k = key.strip().lower()
    close = difflib.get_close_matches(k, names, n=1, cutoff=0.8)
    if close:
        return close[0]
    for name in names:  # monitor_timeout -> monitor_timeout_seconds
        if len(k) >= 6 and (name.startswith(k) or k.startswith(name)):
            return name
    return None


class _Load:
    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.problems: list[tuple[str, str]] = []
        self.warnings: list[tuple[str, str]] = []

    def obj(self, cls: type, data: object, path: str) -> Any:
        if not isinstance(data, Mapping):
            self.problems.append((path, f"must be a JSON object, got {show(data)}"))
            return _BAD
        fields = [f for f in attrs.fields(cls) if f.name not in _NOT_KEYS]
        names = [f.name for f in fields]
        values: dict[str, Any] = {}
        before = len(self.problems)
        for f in fields:
            sub = _join(path, f.name)
            if f.name not in data:
                if f.default is attrs.NOTHING:
                    self.problems.append((sub, "required field missing"))
                else:
                    values[f.name] = f.default
                continue
            value = self.field(cls, f, data[f.name], sub)
            if value is not _BAD and (msg := _rule_problem(cls, f.name, value)):
                self.problems.append((sub, msg))
                value = _BAD
            if value is not _BAD:
                values[f.name] = value
        cross = _CROSS.get(cls)
        if cross is not None:
            self.problems.extend((_join(path, n), m) for n, m in cross(values))
        self.unknown(data, names, path)
        if len(self.problems) > before:
            return _BAD
        try:
            return cls(**values)
        except SpecError as exc:  # not expected: every rule ran above
            self.problems.extend(_split(_join(path, line)) for line in exc.problems)
            return _BAD

    def field(self, cls: type, f: attrs.Attribute[Any], raw: object, path: str) -> Any:
        kind = _field_types(cls)[f.name]
        if kind in (SlurmParams, SlurmEnv):
            return self.obj(kind, raw, path)
        if cls is SlurmEnv and f.name == "partitions":
            if not isinstance(raw, list | tuple):
                self.problems.append((path, f"must be a list of {{name, arch}} objects, "
                                            f"got {show(raw)}"))
                return _BAD
            items = [self.obj(PartitionInfo, item, f"{path}[{i}]") for i, item in enumerate(raw)]
            return _BAD if any(i is _BAD for i in items) else tuple(items)
        if f.name in _TEXT_FIELDS:
            if raw is None and f.default is None:
                return None
            if not isinstance(raw, str) or not raw.strip():
                self.problems.append((path, f"must be non-empty text, got {show(raw)}"))
                return _BAD
            return raw.strip()
        try:
            return converter.structure(raw, kind)
        except BaseValidationError as exc:
            self.problems.extend(_split(line) for line in problems_of(exc, path))
        except (ValueError, TypeError) as exc:
            msg = str(exc) if isinstance(exc, ValueError) and str(exc) else "invalid value"
            self.problems.append((path, msg))
        return _BAD

    def unknown(self, data: Mapping[Any, Any], names: list[str], path: str) -> None:
        extra = [k for k in data if k not in names]
        for key in extra[:_UNKNOWN_KEYS_EXAMINED]:
            if not isinstance(key, str):
                continue
            match = _did_you_mean(key, names)
            if match is not None:
                self.warnings.append((_join(path, key),
                                      f"unknown key; did you mean {match}?"))


def _split(line: str) -> tuple[str, str]:
    path, _, msg = line.partition(": ")
    return path, msg


_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    if cls not in _TYPES:
        attrs.resolve_types(cls)
        _TYPES[cls] = {f.name: f.type for f in attrs.fields(cls)}
    return _TYPES[cls]


# --------------------------------------------------------------------------------------
# Reading the file: bounded, a regular file only, UTF-8, not too deep.


def _read_spec_text(p: Path) -> str:
    def bad(what: str) -> SpecError:
        return SpecError(str(p), [f"(file): {what}"])

    try:
        raw = read_bounded(p, MAX_SPEC_BYTES)
    except FileProblem as problem:
        if problem.kind is Problem.MISSING:
            raise bad("no such file") from None
        if problem.kind is Problem.TOO_BIG:
            raise bad(f"larger than {MAX_SPEC_BYTES} bytes (1 MiB); a job spec is a few "
                      "hundred bytes") from None
        if problem.detail == "a directory":
            raise bad("is a directory, not a job spec file") from None
        if problem.kind is Problem.NOT_REGULAR:
            raise bad(f"not a regular file ({problem.detail})") from None
        raise bad(f"cannot read: {problem.detail}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
                  ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark some editors write


def _json_int(text: str) -> int:
    if len(text) > 100:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _json_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _parse(text: str, source: str) -> Any:
    def bad(what: str) -> SpecError:
        return SpecError(source, [f"(file): {what}"])

    try:
        return json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise bad(f"not valid JSON: {exc.msg} at {where}") from None
    except RecursionError:
        raise bad("not a job spec: nested too deeply") from None
    except ValueError as exc:
        raise bad(f"not valid JSON: {exc}") from None


def _script_problems(data: Mapping[str, Any], base: Path) -> list[str]:
    """``script_path: no such file: ...`` when the raw ``script_path`` names no file (a
    value that is not a usable path is the field rules' problem, not this one's)."""
    raw = data.get("script_path") if isinstance(data, Mapping) else None
    if not isinstance(raw, str) or not raw or "\0" in raw or len(raw) > MAX_PATH_BYTES:
        return []
    return script_problems(_absolute(Path(raw), base))


def script_problems(script: Path) -> list[str]:
    """``script_path: no such file: ...`` (or ``is a directory``) when ``script`` is not
    a file; the one wording of this check, for the spec pass and the executor."""
    if script.is_file():
        return []
    return [f"script_path: {'is a directory' if script.is_dir() else 'no such file'}: {script}"]


def _absolute(p: Path, base: Path) -> Path:
    return Path(os.path.normpath(p if p.is_absolute() else base / p))
