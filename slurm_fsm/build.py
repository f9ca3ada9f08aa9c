"""The pre-step (procedure.md "Pre-step: resolve image and build").

When a job spec has ``build_project: true`` the executor calls a
:class:`~slurm_fsm.executor.PreStep` before step 0. :func:`default_pre_step`
does what procedure.md lists, in order:

1. GPU type: ``device_type``, else :meth:`SlurmBackend.probe_gpu_name`
   (:func:`resolve_gpu`);
2. CPU arch of the partition: ``slurm_env.partitions[]``, else inferred from
   the GPU name (Grace parts ``GB*``/``GH*`` and Thor are ``aarch64``)
   (:func:`partition_arch`);
3. image: ``docker_image``, else the tag for that CPU arch in
   ``<repo_root>/jenkins/current_image_tags.properties`` (:func:`resolve_image`);
4. build arch (the ``-a`` flag) from the GPU name (:func:`build_arch`);
5. the build, by a :class:`Builder`; the default :class:`SlurmBuilder`
   submits a batch job that builds inside the image on the partition and
   waits for it with the same monitor as a one-shot job, passing
   ``[ NN%] Building ...`` lines to ``events.message``;
6. on failure nothing is allocated: the result carries the last 100 lines
   of the build log, its path and the build job's id, and the executor
   reports ``BUILD_FAILED``.

The image goes into the spec the run uses only when the build ran in it
(:attr:`Builder.uses_container`): the run then uses the environment the
build was made for. Images are kept in their canonical form
(``registry.host/path:tag``); :func:`enroot_image` rewrites one for pyxis at
the moment it is passed to ``--container-image``.

Plug your own build with :func:`make_pre_step`::

    executor = Executor(spec, backend, pre_step=make_pre_step(MyBuilder()))
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import attrs
import javaproperties

from slurm_fsm.backend import BatchRequest, SlurmBackend
from slurm_fsm.clock import Clock
from slurm_fsm.errors import BackendError, BuildError
from slurm_fsm.events import Events, PreStep, PreStepResult
from slurm_fsm.jobstate import JobState
from slurm_fsm.logs import tail_lines
from slurm_fsm.monitor import PollPolicy, final_outcome, watch_batch_job
from slurm_fsm.nvsmi import arch_of_compute_cap
from slurm_fsm.project import (  # TensorRT-LLM's arch table and image tags file
    ARCH_TABLE,
    DEFAULT_BUILD_ARCH,
    IMAGE_KEY_SUFFIXES,
    IMAGE_KEYS,
    TAGS_FILE,
)
from slurm_fsm.slurmcli import enroot_image
from slurm_fsm.spec import JobSpec

__all__ = [
    "BUILD_LOG_PATTERN",
    "BUILD_SCRIPT_NAME",
    "EXIT_MARKER",
    "PROGRESS_LINE",
    "BuildError",
    "BuildOutcome",
    "BuildRequest",
    "Builder",
    "SlurmBuilder",
    "build_arch",
    "build_job_name",
    "default_build_command",
    "default_pre_step",
    "enroot_image",
    "gpu_tokens",
    "image_key",
    "make_pre_step",
    "parse_properties",
    "partition_arch",
    "read_properties",
    "resolve_gpu",
    "resolve_image",
    "run_pre_step",
]

#: The batch script :class:`SlurmBuilder` writes, in ``<work_dir>/build/``.
BUILD_SCRIPT_NAME = "build.sbatch"
#: Its log, in ``<work_dir>/build/``; ``%j`` is the build job's id.
BUILD_LOG_PATTERN = "build_%j.log"
#: The last line the batch script prints: how the build command exited.
EXIT_MARKER = "[slurm_fsm] build command exited with status"
#: A progress line of make/CMake (``[ 42%] Building CXX object ...``) or ninja (``[12/345] ...``).
PROGRESS_LINE = re.compile(r"^\s*\[\s*(?:\d{1,3}%|\d+/\d+)\]")

_GRACE = re.compile(r"^G[BH]\d")
#: Arm parts that are no Grace superchip: Jetson/DRIVE Thor (an Arm SoC)
ARM_GPU_TOKENS = frozenset({"THOR"})
_CONFLICT_MARKER = re.compile(r"^(?:<{7}(?:\s|$)|={7}\s*$|>{7}(?:\s|$))")
_EXIT_LINE = re.compile(re.escape(EXIT_MARKER) + r" (\d+)\s*$")


# --------------------------------------------------------------------------- GPU and arch
def gpu_tokens(gpu_name: str) -> list[str]:
    """The upper-case alphanumeric words of a GPU name.

    ``"NVIDIA A100-SXM4-80GB"`` -> ``["NVIDIA", "A100", "SXM4", "80GB"]``. Models
    are matched against whole words, so ``GB200`` never matches ``B200`` and
    ``H100`` inside a longer word is no H100.
    """
    return re.findall(r"[A-Z0-9]+", gpu_name.upper())


def build_arch(gpu_name: str) -> str:
    """The build arch (``-a``) for a GPU name as nvidia-smi prints it, or a bare model.

    Hopper (H100, H200, H800, H20, GH200) -> ``90-real``; Thor -> ``110-real``;
    B200/GB200/B300/GB300 -> ``100-real``; A100 -> ``80-real``; L40S -> ``89-real``.
    The first word of the name that is in :data:`ARCH_TABLE` decides; a name not in
    the table decides by its compute capability when it carries one (the probe asks
    nvidia-smi for it:
    ``NVIDIA GH200 480GB (sm_90)`` -> ``90-real``); anything else ``100-real``.
    """
    for token in gpu_tokens(gpu_name):
        if token in ARCH_TABLE:
            return ARCH_TABLE[token]
    return arch_of_compute_cap(gpu_name) or DEFAULT_BUILD_ARCH


def _partition_arch(spec: JobSpec, gpu_name: str) -> tuple[str, str]:
    """(arch, where it came from)."""
    partition = spec.slurm_params.partition
    for entry in spec.slurm_env.partitions:
        if entry.name == partition and entry.arch is not None:
            return str(entry.arch), f"slurm_env.partitions[{partition}]"
    tokens = gpu_tokens(gpu_name)
    if any(_GRACE.match(t) for t in tokens):
        return "aarch64", f"inferred: {gpu_name!r} is a Grace part"
    if ARM_GPU_TOKENS.intersection(tokens):
        return "aarch64", f"inferred: {gpu_name!r} is an Arm part"
    return "x86_64", f"inferred: {gpu_name!r} is not an Arm part (Grace, Thor)"


def partition_arch(spec: JobSpec, gpu_name: str) -> str:
    """CPU arch of the spec's partition: ``x86_64`` or ``aarch64``.

    The ``slurm_env.partitions[]`` entry named like the partition, when its
    ``arch`` is set; otherwise ``aarch64`` for Grace parts (a word of
    ``gpu_name`` starting ``GB``/``GH`` and a digit, e.g. ``NVIDIA GB200``)
    and for Thor (:data:`ARM_GPU_TOKENS`), ``x86_64`` for everything else.
    Never asks Slurm.
    """
    return _partition_arch(spec, gpu_name)[0]


def resolve_gpu(spec: JobSpec, backend: SlurmBackend) -> str:
    """The GPU type: ``device_type`` when set, else probed on one node of the partition.

    Raises BuildError when the probe fails or finds no GPU name.
    """
    if spec.device_type and spec.device_type.strip():
        return spec.device_type.strip()
    partition, account = spec.slurm_params.partition, spec.slurm_params.account
    try:
        name = backend.probe_gpu_name(partition, account)
    except BackendError as exc:
        raise BuildError(
            f"cannot probe the GPU type on partition {partition}: {exc}. "
            "Set device_type in the job spec (e.g. \"H100\")."
        ) from exc
    if not name or not name.strip():
        raise BuildError(
            f"the GPU probe on partition {partition} found no GPU name (no nvidia-smi or "
            "no GPU on the node). Set device_type in the job spec (e.g. \"H100\")."
        )
    return name.strip()


# --------------------------------------------------------------------------- properties
def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text into a dict (a later key wins), with ``javaproperties``
    (comments, ``=``/``:``/blank separators, continuation lines, escapes and
    ``\\uXXXX`` as Java reads them). One difference from Java: values are stripped
    of surrounding whitespace. Raises ValueError on a malformed ``\\u`` escape, and on
    git merge-conflict markers (``<<<<<<<``, ``=======``, ``>>>>>>>``: a file committed
    mid-merge holds two images per key, and which one is meant nobody can say).
    """
    for number, line in enumerate(text.splitlines(), 1):
        if _CONFLICT_MARKER.match(line):
            raise ValueError(
                f"line {number}: git merge-conflict marker {line.strip()[:40]!r}; the file "
                "holds both sides of a merge: resolve it, or set docker_image in the job spec")
    return {key: value.strip() for key, value in javaproperties.loads(text).items()}


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java properties file (UTF-8) with :func:`parse_properties`.

    Raises BuildError naming the file when it is missing, unreadable or malformed.
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise BuildError(f"{path}: no such file") from None
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return parse_properties(text)
    except ValueError as exc:
        raise BuildError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------- image
def image_key(properties: dict[str, str], arch: str, *, source: str = TAGS_FILE.name) -> str:
    """The key of the image for ``arch`` in a tags file's properties.

    :data:`IMAGE_KEYS` (``LLM_DOCKER_IMAGE`` for x86_64,
    ``LLM_SBSA_DOCKER_IMAGE`` for aarch64) when present; otherwise the single
    key ending in ``_X86_64`` / ``_AARCH64`` (any case). None, or several of
    the latter, is a BuildError naming ``source`` and the keys it has.
    """
    if arch not in IMAGE_KEYS:
        raise BuildError(f"unknown CPU arch {arch!r}: expected one of {', '.join(IMAGE_KEYS)}")
    preferred = IMAGE_KEYS[arch]
    if preferred in properties:
        return preferred
    suffix = IMAGE_KEY_SUFFIXES[arch]
    matches = [k for k in properties if k.upper().endswith(suffix)]
    if len(matches) == 1:
        return matches[0]
    have = ", ".join(sorted(properties)) or "no keys at all"
    if matches:
        raise BuildError(
            f"{source}: no {preferred} and several keys end in {suffix} "
            f"({', '.join(sorted(matches))}); cannot tell which image is for {arch}. "
            "Set docker_image in the job spec."
        )
    raise BuildError(
        f"{source}: no image for {arch}: expected the key {preferred} (or one key ending "
        f"in {suffix}); the file has {have}. Set docker_image in the job spec."
    )


def _image(spec: JobSpec, arch: str) -> tuple[str, str]:
    """(image, where it came from)."""
    if spec.docker_image:
        return spec.docker_image, "docker_image in the job spec"
    path = spec.repo_root / TAGS_FILE
    props = read_properties(path)
    key = image_key(props, arch, source=str(path))
    value = props[key]
    if not value:
        raise BuildError(f"{path}: {key} is empty")
    if "$" in value:
        raise BuildError(
            f"{path}: {key}={value} uses $-interpolation, which slurm_fsm does not expand. "
            "Set docker_image in the job spec."
        )
    return value, f"{path} key {key}"


def resolve_image(spec: JobSpec, arch: str) -> str:
    """The build image: ``docker_image`` when set, else the tags file's image for ``arch``.

    The tags file is ``<repo_root>/jenkins/current_image_tags.properties``; the
    key is chosen by :func:`image_key`. A missing file, a missing or empty
    key is a BuildError naming the file (and the keys it has).
    """
    return _image(spec, arch)[0]




# --------------------------------------------------------------------------- builders
@attrs.frozen(kw_only=True)
class BuildRequest:
    """What a build needs. ``image`` is canonical (see :func:`enroot_image`)."""

    repo_root: Path
    partition: str
    account: str
    image: str
    user_root_dir: str | None
    arch: str  # the build arch, e.g. "90-real"
    work_dir: Path  # the build's files go to <work_dir>/build/
    cpu_arch: str = "x86_64"
    gpu_name: str = ""
    job_name: str = "slurm_fsm.build"
    timeout_s: float = 3600.0


@attrs.frozen(kw_only=True)
class BuildOutcome:
    """How a build ended. ``log_tail`` is the last 100 lines of the build log."""

    ok: bool
    job_id: str | None
    log_path: Path | None
    log_tail: tuple[str, ...]
    summary: str


class Builder(Protocol):
    """A build step for the pre-step. :class:`SlurmBuilder` is the default."""

    @property
    def uses_container(self) -> bool:
        """True when :meth:`build` runs inside ``request.image``: the run then uses that
        image too (it goes into the spec's ``docker_image``)."""
        ...

    def build(self, request: BuildRequest, backend: SlurmBackend, events: Events) -> BuildOutcome:
        """Build, wait for the end, and say how it went. A failed build is an outcome,
        not an exception; a BackendError (e.g. sbatch refused) is reported as a failure."""
        ...


def default_build_command(request: BuildRequest) -> list[str]:
    """The build command, run in the repo root.

    ``./build.sh -a <arch>`` when the repo root has an executable ``build.sh``;
    otherwise TensorRT-LLM's ``python3 scripts/build_wheel.py -a <arch>``.
    """
    script = request.repo_root / "build.sh"
    if script.is_file() and os.access(script, os.X_OK):
        return ["./build.sh", "-a", request.arch]
    return ["python3", "scripts/build_wheel.py", "-a", request.arch]


class _ProgressLines:
    """Cuts the log text the monitor passes on into lines; sends progress lines on."""

    MAX_PARTIAL = 8192

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self._partial = ""

    def feed(self, text: str) -> None:
        *lines, self._partial = re.split(r"\r\n|\n|\r", self._partial + text)
        self._partial = self._partial[-self.MAX_PARTIAL :]
        for line in lines:
            self._line(line)

    def flush(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""

    def _line(self, line: str) -> None:
        if PROGRESS_LINE.match(line):
            self.emit(line.strip())


@attrs.frozen(kw_only=True)
class SlurmBuilder:
    """The default build: one Slurm batch job on the partition.

    It writes ``<work_dir>/build/build.sbatch`` (``#SBATCH --partition``,
    ``--account``, ``--nodes=1``, ``--ntasks=1``, the CPUs: ``--exclusive``, the
    whole node, or ``--cpus-per-task=<cpus_per_task>``,
    ``--output=<work_dir>/build/build_%j.log``, then ``sbatch_args``), which runs,
    in the repo root, ``command(request)`` (default :func:`default_build_command`):

    * ``container=True``: ``srun --cpus-per-task=$SLURM_CPUS_ON_NODE
      --container-image=<image>
      --container-mounts=<repo>:<repo>[,<user_root_dir>:<user_root_dir>]
      bash -c 'cd <repo> && <command>'``;
    * ``container=False``: ``bash -c 'cd <repo> && <command>'`` on the batch
      node itself (for clusters without pyxis; the image is not used).

    ``SLURM_FSM_BUILD_ARCH``, ``SLURM_FSM_CPU_ARCH`` and (when set)
    ``SLURM_FSM_USER_ROOT_DIR`` are exported to the command. It submits with
    ``backend.submit``, waits with :func:`~slurm_fsm.monitor.watch_batch_job`
    (``request.timeout_s``; a hang marker or the timeout cancels the build),
    passes progress lines (:data:`PROGRESS_LINE`) to ``events.message``, then
    asks ``backend.job_outcome``: ok means COMPLETED with exit code 0. When
    accounting cannot say, the script's last line (:data:`EXIT_MARKER`) does.

    ``clock``: how to wait; default the backend's own
    (:attr:`~slurm_fsm.backend.SlurmBackend.clock`).
    """

    container: bool = True
    command: Callable[[BuildRequest], Sequence[str]] | None = None
    sbatch_args: tuple[str, ...] = ()
    #: CPUs for the build's one task (``#SBATCH --cpus-per-task``); None: the whole node
    #: (``#SBATCH --exclusive``): a compile uses every core it is given, and one task
    #: without a CPU count is given one.
    cpus_per_task: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    clock: Clock | None = None
    policy: PollPolicy = PollPolicy()

    @property
    def uses_container(self) -> bool:
        """Whether the build runs inside the image (``container``)."""
        return self.container

    # ------------------------------------------------------------------ script
    def script_text(self, request: BuildRequest, log_path: Path) -> str:
        """The batch script for ``request``, writing its output to ``log_path``."""
        for what, value in (("log path", str(log_path)), ("partition", request.partition),
                            ("account", request.account), ("job name", request.job_name)):
            if not value or any(c.isspace() for c in value):
                raise BuildError(f"the build {what} {value!r} is empty or has whitespace, "
                                 "which #SBATCH lines cannot carry")
        for what, value in (("image", request.image), ("arch", request.arch),
                            ("CPU arch", request.cpu_arch)):
            if any(not c.isprintable() for c in value):
                raise BuildError(f"the build {what} {value!r} has control characters")
        argv = list((self.command or default_build_command)(request))
        if not argv:
            raise BuildError("the build command is empty")
        repo = str(request.repo_root)
        inner = f"cd {shlex.quote(repo)} && {shlex.join(argv)}"
        env = {"SLURM_FSM_BUILD_ARCH": request.arch, "SLURM_FSM_CPU_ARCH": request.cpu_arch}
        if request.user_root_dir:
            env["SLURM_FSM_USER_ROOT_DIR"] = request.user_root_dir
        if self.container:
            mounts = [f"{repo}:{repo}"]
            root = request.user_root_dir
            if root and root != repo and not repo.startswith(root.rstrip("/") + "/"):
                mounts.append(f"{root}:{root}")
            # the step takes every CPU of the job on the node (srun does not inherit
            # the job's --cpus-per-task since Slurm 22.05)
            run = shlex.join(["srun", "--nodes=1", "--ntasks=1"]) + \
                ' --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" ' + shlex.join([
                    f"--container-image={enroot_image(request.image)}",
                    f"--container-mounts={','.join(mounts)}",
                    "bash", "-c", inner,
                ])
            where = f"in the container {request.image}"
        else:
            run = shlex.join(["bash", "-c", inner])
            where = "on the batch node, no container"
        directives = [
            f"--job-name={request.job_name}",
            f"--partition={request.partition}",
            f"--account={request.account}",
            "--nodes=1",
            "--ntasks=1",
            *(["--exclusive"] if self.cpus_per_task is None
              else [f"--cpus-per-task={self.cpus_per_task}"]),
            f"--output={log_path}",
            *self.sbatch_args,
        ]
        lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives),
                 f"# Written by slurm_fsm.build: build {repo} for {request.arch} "
                 f"({request.cpu_arch}) {where}.",
                 *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
                 run,
                 "status=$?",
                 f'echo "{EXIT_MARKER} $status"',
                 'exit "$status"']
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------- build
    def build(self, request: BuildRequest, backend: SlurmBackend, events: Events) -> BuildOutcome:
        """Submit the build job, follow it, and say how it ended (see the class)."""
        if self.container and not backend.has_container_support():
            return BuildOutcome(ok=False, job_id=None, log_path=None, log_tail=(), summary=(
                f"the build runs in the container {request.image}, but this Slurm's srun has "
                "no pyxis (--container-image); nothing submitted. Build on the host with "
                "make_pre_step(SlurmBuilder(container=False)) or install pyxis."))
        build_dir = request.work_dir / "build"
        build_dir.mkdir(parents=True, exist_ok=True)
        script = build_dir / BUILD_SCRIPT_NAME
        script.write_text(self.script_text(request, build_dir / BUILD_LOG_PATTERN),
                          encoding="utf-8")
        clock = self.clock or backend.clock
        job_id = backend.submit(BatchRequest(
            script_path=script, work_dir=build_dir, job_name=request.job_name,
            partition=request.partition, account=request.account,
        ))
        log_path = build_dir / BUILD_LOG_PATTERN.replace("%j", job_id)
        events.message(f"Submitted build job {job_id} on partition {request.partition} "
                       f"(arch {request.arch}); log {log_path}")
        progress = _ProgressLines(events.message)
        watch = watch_batch_job(
            job_id, backend=backend, log_path=log_path, timeout_s=request.timeout_s,
            clock=clock, policy=self.policy, on_output=progress.feed,
            on_message=events.message, on_tick=events.tick,
        )
        progress.flush()
        tail = tuple(tail_lines(log_path, 100))
        if watch.hang:
            return BuildOutcome(ok=False, job_id=job_id, log_path=log_path, log_tail=tail,
                                summary=f"build job {job_id}: hang detected in the log; "
                                "job cancelled")
        if watch.timed_out:
            return BuildOutcome(ok=False, job_id=job_id, log_path=log_path, log_tail=tail,
                                summary=f"build job {job_id}: not done after "
                                f"{request.timeout_s:g} s "
                                "(build_timeout_seconds); job cancelled")
        outcome, why = final_outcome(backend, job_id, clock)
        if outcome is not None:
            ok = outcome.state is JobState.COMPLETED and outcome.exit_code == 0
            how = f"{outcome.state}, exit code {outcome.exit_code}"
            if outcome.signal:
                how += f" (signal {outcome.signal})"
        else:
            code = _marker_exit_code(tail)
            ok = code == 0
            how = (f"exit code {code} (from the log; {why})" if code is not None
                   else f"unknown ({why}; the log has no exit line)")
        verdict = "succeeded" if ok else "failed"
        return BuildOutcome(ok=ok, job_id=job_id, log_path=log_path, log_tail=tail,
                            summary=f"build job {job_id} {verdict}: {how}; log {log_path}")


def _marker_exit_code(tail: Sequence[str]) -> int | None:
    for line in reversed(tail):
        m = _EXIT_LINE.search(line)
        if m:
            return int(m.group(1))
    return None


# --------------------------------------------------------------------------- the pre-step
def build_job_name(spec: JobSpec) -> str:
    """The build job's name: the allocation's name with ``.build`` for ``.persistent``.

    ``acct-trtllm.persistent`` -> ``acct-trtllm.build``; a name without the
    ``.persistent`` suffix gets ``.build`` appended. Never the allocation's
    own name, so the build job is never taken for an orphaned allocation.
    """
    name = spec.job_name
    stem = name[: -len(".persistent")] if name.endswith(".persistent") else name
    return f"{stem}.build"


def run_pre_step(spec: JobSpec, backend: SlurmBackend, events: Events,
                 builder: Builder) -> PreStepResult:
    """Resolve GPU, CPU arch, image and build arch, then build with ``builder``.

    ``ok=True``: the spec to run with (``docker_image`` set to the image when
    ``builder.uses_container``). ``ok=False``: nothing was allocated; the
    summary says why, with the build log's last 100 lines, path and job id
    when a build ran.
    """
    def fail(summary: str, outcome: BuildOutcome | None = None) -> PreStepResult:
        events.message(f"Pre-step failed: {summary}")
        if outcome is None:
            return PreStepResult(ok=False, spec=spec, summary=summary)
        return PreStepResult(
            ok=False, spec=spec, summary=summary, log_tail=outcome.log_tail,
            log_path=str(outcome.log_path) if outcome.log_path else None,
            job_id=outcome.job_id,
        )

    try:
        gpu = resolve_gpu(spec, backend)
        cpu_arch, cpu_source = _partition_arch(spec, gpu)
        image, image_source = _image(spec, cpu_arch)
    except BuildError as exc:
        return fail(str(exc))
    arch = build_arch(gpu)
    gpu_source = "device_type" if spec.device_type else "probed"
    events.message(f"GPU {gpu} ({gpu_source}) -> build arch {arch}; partition "
                   f"{spec.slurm_params.partition} is {cpu_arch} ({cpu_source}); "
                   f"image {image} ({image_source})")
    run_image = image if builder.uses_container else spec.docker_image
    if run_image and spec.persistent_mode and not spec.container_name:
        return fail(f"container_name: required when the run uses an image ({image} from "
                    f"{image_source}); it must equal the script's --container-name")
    request = BuildRequest(
        repo_root=spec.repo_root, partition=spec.slurm_params.partition,
        account=spec.slurm_params.account, image=image, user_root_dir=spec.user_root_dir,
        arch=arch, work_dir=spec.work_dir, cpu_arch=cpu_arch, gpu_name=gpu,
        job_name=build_job_name(spec), timeout_s=float(spec.build_timeout_seconds),
    )
    try:
        outcome = builder.build(request, backend, events)
    except BuildError as exc:
        return fail(str(exc))
    except BackendError as exc:
        return fail(f"the build could not run: {exc}")
    except OSError as exc:
        return fail(f"the build could not run: {exc}")
    if not outcome.ok:
        return fail(outcome.summary, outcome)
    new_spec = attrs.evolve(spec, docker_image=run_image)
    note = (f"; the run uses image {run_image}" if run_image
            else "; the build used no container and the run uses none")
    events.message(f"Build done: {outcome.summary}{note}")
    return PreStepResult(
        ok=True, spec=new_spec, summary=outcome.summary + note, log_tail=outcome.log_tail,
        log_path=str(outcome.log_path) if outcome.log_path else None, job_id=outcome.job_id,
    )


def make_pre_step(builder: Builder) -> PreStep:
    """A :class:`~slurm_fsm.executor.PreStep` that builds with ``builder``."""

    def pre_step(spec: JobSpec, backend: SlurmBackend, events: Events) -> PreStepResult:
        return run_pre_step(spec, backend, events, builder)

    return pre_step


def default_pre_step(spec: JobSpec, backend: SlurmBackend, events: Events) -> PreStepResult:
    """The pre-step with the default :class:`SlurmBuilder` (build inside the image)."""
    return run_pre_step(spec, backend, events, SlurmBuilder())
