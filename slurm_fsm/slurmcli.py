"""Slurm command lines and their outputs, as pure functions.

Nothing here runs a process. Builders return argv lists for Slurm's own tools;
parsers take the text those tools print and return the attrs values of
:mod:`slurm_fsm.backend`; :func:`classify` turns a finished (or timed-out)
command into the typed error it means, at this one place.
:class:`slurm_fsm.subprocess_backend.SubprocessBackend` glues them to a runner.

Output formats are chosen so that parsing never guesses:

* ``squeue -o`` with ``|`` between fields and the free-text job name *last*,
  so that a ``|`` inside a name cannot shift the other fields;
* ``squeue -s -O`` (``--Format``) for steps, because ``%T`` is "valid for jobs
  only" in ``-o`` while ``StepState`` exists in ``-O``;
* ``sacct -n -P`` (``--parsable2``: ``|``-separated, no trailing ``|``);
* ``sbatch --parsable`` (``ID`` or ``ID;cluster``);
* ``srun -l`` for the per-node GPU listing, so that lines of different nodes
  can be told apart however they interleave.

Classification (:func:`classify`), in this order:

1. the command timed out (``returncode is None``) -> ``CommandTimedOut``, or
   ``ControllerUnreachable`` when its stderr already says so;
2. stderr says the controller cannot be reached ("Unable to contact slurm
   controller", "Connection refused", "Socket timed out on send/recv
   operation", "Zero Bytes were transmitted or received") ->
   ``ControllerUnreachable``; this check comes before any "job gone" check:
   an unreachable controller never reads as a gone job;
3. "Invalid job id specified", "Job/step already completing or completed",
   "Slurm job N has expired" -> ``JobNotFound``; so is an empty answer, exit 0,
   to a single-job query (``squeue -j ID`` without ``-s``, ``scontrol show job
   ID``, ``sacct -j ID``);
4. any other non-zero exit -> ``CommandFailed`` with argv, exit code and the
   last :data:`STDERR_TAIL_LINES` lines of stderr;
5. otherwise ``None``.

A subprocess timeout is reported as ``CommandTimedOut`` (a ``TimeoutError``),
not as ``ControllerUnreachable``: the tool may be slow for reasons of its own
(a long ``srun`` step). Callers that poll the controller treat both as
"try again later", and neither ever as "job gone".
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import hostlist

from slurm_fsm import nvsmi
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    GpuProcess,
    Granted,
    JobFiles,
    JobInfo,
    JobOutcome,
    StepInfo,
    StepRequest,
    part_of,
)
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    BackendError,
    CommandFailed,
    CommandTimedOut,
    ControllerUnreachable,
    JobNotFound,
)
from slurm_fsm.jobstate import JobState
from slurm_fsm.ownership import request_comment

__all__ = [
    "AGENT_STEP_PREFIX",
    "CONTAINER_MARKS_DIR",
    "CONTAINER_REMOVE_SCRIPT",
    "CONTROLLER_UNREACHABLE_MARKERS",
    "FOREIGN_CONTAINER_MARKER",
    "GPU_NODE_MARKER",
    "GPU_QUERY_ARGV",
    "IMAGE_EXPORT",
    "IMAGE_EXPORT_LINE",
    "IMAGE_EXPORT_SCRIPT",
    "JOB_FORMAT",
    "JOB_FORMAT_V1",
    "JOB_GONE_MARKERS",
    "LEASE_ORPHANED",
    "LEASE_PROBE_MISSES",
    "LEASE_PROBE_S",
    "LEASE_PROBE_TIMEOUT_S",
    "LEASE_TASK",
    "LEASE_UP",
    "NO_STEP_MARKER",
    "ONCE_DIR_CONTAINER",
    "ONCE_DIR_HOST",
    "ONCE_SKIPPED",
    "SACCT_FIELDS",
    "SACCT_STEP_FIELDS",
    "SEP",
    "SETUP_KEY_FILE",
    "SETUP_KEY_LINE",
    "SETUP_KEY_READ",
    "SETUP_KEY_WRITE",
    "STDERR_TAIL_LINES",
    "STEP_FORMAT",
    "TOOL_ENV_PREFIXES",
    "accounting_disabled",
    "array_task_ids",
    "batch_kind",
    "batch_parts",
    "classify",
    "clean_env",
    "compress_nodelist",
    "container_remove_argv",
    "enroot_image",
    "expand_nodelist",
    "expand_output_pattern",
    "foreign_container",
    "foreign_container_message",
    "gpu_processes_argv",
    "gpu_processes_script",
    "has_container_option",
    "image_export_argv",
    "image_exported",
    "mount_warmup_argv",
    "once_argv",
    "parse_gpu_name",
    "parse_gpu_processes",
    "parse_job",
    "parse_jobs",
    "parse_sacct",
    "parse_sacct_files",
    "parse_sacct_steps",
    "parse_sbatch",
    "parse_scontrol_files",
    "parse_scontrol_granted",
    "parse_scontrol_job",
    "parse_scontrol_steps",
    "parse_sstat_steps",
    "parse_steps",
    "probe_gpu_argv",
    "pyxis_container_names",
    "sacct_argv",
    "sacct_files_argv",
    "sacct_steps_argv",
    "salloc_argv",
    "salloc_error",
    "salloc_job_id",
    "sbatch_argv",
    "sbatch_directives",
    "scancel_argv",
    "scancel_signal_argv",
    "scontrol_granted_argv",
    "scontrol_show_job_argv",
    "scontrol_show_steps_argv",
    "setup_key_read_argv",
    "setup_key_write_argv",
    "setup_keys",
    "squeue_find_argv",
    "squeue_job_argv",
    "squeue_steps_argv",
    "srun_agent_argv",
    "srun_help_argv",
    "srun_lease_argv",
    "srun_step_argv",
    "sstat_tasks_argv",
    "stderr_tail",
    "with_true_exit_code",
]

#: Field separator of every ``squeue -o`` format here.
SEP = "|"

#: ``squeue -o`` for jobs: everything :class:`JobInfo` holds, the name last.
#: Fields: id, state, user, partition, nodes, nodelist, time left, elapsed,
#: reason, start time, comment, submit time, name.
JOB_FORMAT = SEP.join(["%i", "%T", "%u", "%P", "%D", "%N", "%L", "%M", "%r", "%S", "%k", "%V",
                       "%j"])
_JOB_FIELD_COUNT = 13
#: The format before the submit time was read (issue 28): rows of it still parse.
JOB_FORMAT_V1 = SEP.join(["%i", "%T", "%u", "%P", "%D", "%N", "%L", "%M", "%r", "%S", "%k",
                          "%j"])
_SUBMIT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|N/A|Unknown")

#: ``squeue -s -O`` for steps: id, state, name (the name last, unpadded).
STEP_FORMAT = f"StepId:64{SEP},StepState:24{SEP},StepName:0"

#: ``sacct --format`` fields parsed by :func:`parse_sacct`.
SACCT_FIELDS = ("JobID", "State", "ExitCode", "Elapsed", "MaxRSS")

#: ``sacct --format`` fields of a run's own steps (:func:`sacct_steps_argv`):
#: :data:`SACCT_FIELDS` and ``AllocTRES``, whose ``mem`` and ``node`` say the memory each
#: node of the step was given, the limit ``OverMemoryKill`` kills it past.
SACCT_STEP_FIELDS = (*SACCT_FIELDS, "AllocTRES")

#: The line each node prints before its nvidia-smi rows in :func:`gpu_processes_script`.
GPU_NODE_MARKER = nvsmi.NODE_MARKER

#: How nvidia-smi lists compute processes (procedure step 0E.3).
GPU_QUERY_ARGV = (
    "nvidia-smi",
    "--query-compute-apps=pid,name,used_memory",
    "--format=csv,noheader",
)

#: How many stderr lines a CommandFailed carries.
STDERR_TAIL_LINES = 20

#: stderr text meaning that slurmctld (or slurmdbd, for sacct) did not answer.
CONTROLLER_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Connection refused",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
)

#: stderr text meaning that Slurm does not know the job (or it is over).
JOB_GONE_MARKERS = (
    "Invalid job id specified",
    "Job/step already completing or completed",
)
#: Tools whose stderr also carries the user's command's output.
_RUNS_USER_COMMANDS = frozenset({"srun", "salloc"})
_EXPIRED = re.compile(r"Slurm job \d+\S* has expired")

#: SLURM_* variables kept from the caller's environment: the cluster to talk to. Every
#: other SLURM_* describes a job the caller may itself be running in (SLURM_JOB_ID,
#: SLURM_NTASKS, ...) or changes what the tools print (SLURM_TIME_FORMAT with a ``|``
#: breaks the parsers) and would silently change what srun/sbatch/salloc do.
_KEPT_SLURM_VARS = frozenset({"SLURM_CONF"})

#: Prefixes of the tools' own input variables, all dropped: SQUEUE_NAMES or
#: SQUEUE_ACCOUNT hide our own allocation from ``squeue -u``, SQUEUE_FORMAT,
#: SACCT_FORMAT, SINFO_FORMAT change the columns, SALLOC_*/SBATCH_* change the request.
TOOL_ENV_PREFIXES = ("SLURM_", "SQUEUE_", "SACCT_", "SACCTMGR_", "SINFO_", "SCONTROL_",
                     "SALLOC_", "SBATCH_", "SRUN_", "SCANCEL_", "SSTAT_", "SPRIO_", "SSHARE_",
                     "SREPORT_", "STRIGGER_", "SBCAST_", "SATTACH_")


# --------------------------------------------------------------------------- env


def clean_env(
    environ: Mapping[str, str], overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a Slurm tool: ``environ`` without the variables Slurm's
    tools read as input (:data:`TOOL_ENV_PREFIXES`).

    Only ``SLURM_CONF`` (which cluster) is kept. Every other ``SLURM_*`` is dropped,
    because it would make an ``srun`` or ``sbatch`` of ours inherit the sizes of a job
    the caller happens to run inside, or change the output format; ``SQUEUE_*``,
    ``SACCT_*``, ``SINFO_*``, ``SCONTROL_*``, ``SALLOC_*``, ``SBATCH_*`` ... are dropped
    because they filter or reshape what the tools print, or change what they ask for.
    ``overrides`` are applied last and always win (that is how a script gets its
    SLURM_*).
    """
    env = {k: v for k, v in environ.items()
           if not k.startswith(TOOL_ENV_PREFIXES) or k in _KEPT_SLURM_VARS}
    if overrides:
        env.update(overrides)
    return env


# ---------------------------------------------------------------------- builders


def squeue_job_argv(job_id: str) -> list[str]:
    """``squeue`` for one job, one :data:`JOB_FORMAT` row (no row: the job is gone)."""
    return ["squeue", "-j", str(job_id), "-h", "-o", JOB_FORMAT]


def squeue_find_argv(name: str | None, user: str) -> list[str]:
    """``squeue`` for the jobs of ``user`` named ``name``, or all of ``user``'s jobs when
    ``name`` is None (never all users)."""
    if not user:
        raise ValueError("squeue by name needs a user: never list all users' jobs")
    by_name = [f"--name={name}"] if name is not None else []
    return ["squeue", "-u", user, *by_name, "-h", "-o", JOB_FORMAT]


def squeue_steps_argv(job_id: str) -> list[str]:
    """``squeue -s`` for the steps of one job, one :data:`STEP_FORMAT` row each."""
    return ["squeue", "-s", "-j", str(job_id), "-h", "-O", STEP_FORMAT]


def sstat_tasks_argv(job_id: str) -> list[str]:
    """``sstat -a`` of one job: a row for each step whose tasks run on its nodes (asked
    of their slurmd). A step slurmctld made whose task was never launched has none."""
    return ["sstat", "-a", "-j", str(job_id), "--noheader", "--parsable2", "-o", "JobID"]


def parse_sstat_steps(text: str, job_id: str) -> set[str]:
    """The numeric step ids of ``job_id`` in :func:`sstat_tasks_argv`'s output."""
    out = set()
    for line in text.splitlines():
        job, _, step = line.strip().partition(".")
        if job == str(job_id) and step.isdigit():
            out.add(step)
    return out


#: The ``--dependency`` values an allocation may carry: ``singleton`` (the warm
#: successor's fence), or ``after[ok|any|notok]:<job id>[:<job id>...]``.
_DEPENDENCY = re.compile(r"singleton|after(?:ok|any|notok)?:[0-9]+(?::[0-9]+)*", re.ASCII)


def salloc_argv(request: AllocationRequest) -> list[str]:
    """``salloc --no-shell`` for the persistent allocation (step 0E).

    ``--no-shell`` makes salloc exit once the allocation is granted, leaving
    nothing local that could outlive (or be outlived by) the allocation.
    """
    argv = [
        "salloc",
        "--no-shell",
        f"--partition={request.partition}",
        f"--account={request.account}",
        f"--nodes={request.nodes}",
        f"--time={_time_arg(request.time_limit)}",
        f"--job-name={request.job_name}",
    ]
    if request.gpus_per_node is not None:
        argv.append(f"--gpus-per-node={request.gpus_per_node}")
    if request.comment:
        argv.append(f"--comment={request_comment(request.comment, request.nonce)}")
    if request.ntasks_per_node is not None:
        argv.append(f"--ntasks-per-node={request.ntasks_per_node}")
    if request.ntasks is not None:
        argv.append(f"--ntasks={request.ntasks}")
    if request.dependency:
        if not _DEPENDENCY.fullmatch(request.dependency):
            raise ValueError(f"not a dependency slurm_fsm asks: {request.dependency!r}")
        argv.append(f"--dependency={request.dependency}")
    if request.time_min is not None:
        argv.append(f"--time-min={_time_arg(request.time_min)}")
    return argv


def _time_arg(limit: Duration) -> str:
    if limit.is_finite or limit.kind.value == "UNLIMITED":
        return limit.as_slurm()
    raise ValueError(f"not a usable time limit: {limit.as_slurm()}")


def enroot_image(image: str) -> str:
    """The form pyxis/enroot takes: the first ``/`` after a registry host becomes ``#``.

    ``urm.nvidia.com/sw/trtllm:tag`` -> ``urm.nvidia.com#sw/trtllm:tag`` (enroot
    otherwise looks the image up on Docker Hub). A registry host is a first
    path part with a ``.`` or ``:``, or ``localhost``. Images that already
    have a ``#``, file paths and Docker Hub names are returned as they are.
    """
    if "#" in image or image.startswith(("/", ".")) or "/" not in image:
        return image
    user, at, rest = image.rpartition("@") if "@" in image.split("/")[0] else ("", "", image)
    host, _, path = rest.partition("/")
    if "." in host or ":" in host or host == "localhost":
        return f"{user}{at}{host}#{path}"
    return image


def _container_args(options: ContainerOptions) -> list[str]:
    args: list[str] = []
    if options.image:
        args.append(f"--container-image={enroot_image(options.image)}")
    # ":create": pyxis fails instead of reusing an existing container of that name
    args.append(f"--container-name={options.name}{':create' if options.fresh else ''}")
    if options.mounts:
        args.append(f"--container-mounts={options.mounts}")
    if options.writable:
        args.append("--container-writable")
    if options.workdir:
        args.append(f"--container-workdir={options.workdir}")
    return args


#: Where a ``once`` step keeps its lock and its done-markers on each node: inside the
#: container's own filesystem (it goes with the container: a fresh import starts
#: without markers), or the node's /tmp for a step without a container.
ONCE_DIR_CONTAINER = "/var/lib/slurm_fsm"
ONCE_DIR_HOST = "/tmp"
#: What a ``once`` step prints (stderr) on a node where the work was already done.
ONCE_SKIPPED = "slurm_fsm: already done on this node (node-locked), skipped:"

#: Where the install leaves the key of what the container was set up from
#: (:mod:`slurm_fsm.setupkey`), inside the container: it goes with the container, and a
#: fresh import starts without it (issue 42 item 1).
SETUP_KEY_FILE = f"{ONCE_DIR_CONTAINER}/setup.key"
#: The first word of each node's line of :func:`setup_key_read_argv`:
#: ``@@slurm_fsm-setup-key NODE KEY`` (``-``: none).
SETUP_KEY_LINE = "@@slurm_fsm-setup-key"
#: The name (``$0``) of the two steps' scripts: how a reader of a command line (the
#: fake cluster) knows them.
SETUP_KEY_READ = "slurm_fsm-setup-key-read"
SETUP_KEY_WRITE = "slurm_fsm-setup-key-write"
# $1 the key file, $2 the line's first word, then the mount targets to warm (0E.2, as
# mount_warmup_argv). ``read`` is the shell's own: any image.
_SETUP_KEY_READ_SCRIPT = (
    'k=; [ -r "$1" ] && read -r k < "$1"; '
    'echo "$2 ${SLURMD_NODENAME:-$(hostname)} ${k:--}"; shift 2; '
    'for d in "$@"; do ls "$d" > /dev/null || true; done'
)
# $1 the key file, $2 the key: written aside, then renamed (never a half key).
_SETUP_KEY_WRITE_SCRIPT = (
    'mkdir -p -- "${1%/*}" && printf "%s\\n" "$2" > "$1.$$" && mv -f -- "$1.$$" "$1"'
)


def setup_key_read_argv(warm: Sequence[str] = ()) -> list[str]:
    """``sh -c`` printing, on each node, ``@@slurm_fsm-setup-key NODE KEY`` (``-`` when
    the container holds no key): the one cheap step that says whether a container the
    node kept was set up from the same inputs (:func:`setup_keys` reads it). It also
    ``ls``-es the container-side mount targets ``warm`` (the mount warm-up of 0E.2,
    failures ignored), so that a reused container needs no second step."""
    return ["sh", "-c", _SETUP_KEY_READ_SCRIPT, SETUP_KEY_READ, SETUP_KEY_FILE,
            SETUP_KEY_LINE, *warm]


def setup_key_write_argv(key: str) -> list[str]:
    """``sh -c`` writing ``key`` to :data:`SETUP_KEY_FILE` (atomically), run in the
    writable container once its install succeeded."""
    if not re.fullmatch(r"[0-9a-f]{16,128}", key):
        raise ValueError(f"a setup key is lowercase hex, got {key!r}")
    return ["sh", "-c", _SETUP_KEY_WRITE_SCRIPT, SETUP_KEY_WRITE, SETUP_KEY_FILE, key]


def setup_keys(stdout: str) -> dict[str, str]:
    """``{node: key}`` from the output of :func:`setup_key_read_argv` (``-``: none)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == SETUP_KEY_LINE:
            found[words[1]] = words[2]
    return found


#: The name (``$0``) of the export step's script (:func:`image_export_argv`): how a
#: reader of a command line (the fake cluster) knows it.
IMAGE_EXPORT = "slurm_fsm-image-export"
#: The first word of the line the export prints on its node (stdout):
#: ``@@slurm_fsm-image-cache NODE exported|present PATH``.
IMAGE_EXPORT_LINE = "@@slurm_fsm-image-cache"
#: Run on one node, on the host (``bash -c SCRIPT NAME DIR KEY ENROOT_NAME...``): under
#: ``flock`` of ``DIR/lock`` (held by fd 9 until the script ends), an entry
#: ``DIR/KEY.sqsh`` already there is left as it is (``present``); else the first of
#: pyxis' names of the container that exists is exported (``enroot export``) to a file
#: of the node and pid beside it and renamed into place (``exported``). pyxis hides
#: the job's ENROOT_* path variables from enroot, so this does too.
IMAGE_EXPORT_SCRIPT = (
    "unset ENROOT_LIBRARY_PATH ENROOT_SYSCONF_PATH ENROOT_RUNTIME_PATH ENROOT_CACHE_PATH "
    "ENROOT_DATA_PATH ENROOT_TEMP_PATH; "
    'PATH="$PATH:/usr/local/bin:/usr/bin:/bin"; '
    'dir=$1; key=$2; shift 2; host=${SLURMD_NODENAME:-$(hostname)}; out="$dir/$key.sqsh"; '
    'mkdir -p -- "$dir" && exec 9>>"$dir/lock" || exit; '
    "if command -v flock >/dev/null 2>&1; then flock 9 || exit; fi; "
    f'if [ -s "$out" ]; then echo "{IMAGE_EXPORT_LINE} $host present $out"; exit 0; fi; '
    "names=$(enroot list) || exit; "
    'for n in "$@"; do '
    'if printf "%s\\n" "$names" | grep -qxF -- "$n"; then '
    'tmp="$dir/.$key.sqsh.$host.$$"; rm -f -- "$tmp"; '
    'enroot export -o "$tmp" -- "$n" >&2 && mv -f -- "$tmp" "$out" '
    '|| { rc=$?; rm -f -- "$tmp"; exit "$rc"; }; '
    f'echo "{IMAGE_EXPORT_LINE} $host exported $out"; exit 0; fi; '
    "done; "
    'echo "slurm_fsm: none of the containers $* is on $host: nothing to export" >&2; exit 4'
)


def image_export_argv(folder: str, key: str, job_id: str, name: str) -> list[str]:
    """srun on the allocation's first node (host side, no container) exporting pyxis'
    container ``name`` (``pyxis_NAME`` or, under ``container_scope=job``,
    ``pyxis_JOBID_NAME``) to the image cache entry ``<folder>/<key>.sqsh``
    (:data:`IMAGE_EXPORT_SCRIPT`; :mod:`slurm_fsm.imagecache`): the step's command,
    to run with ``nodes=1``. The folder and names are positional arguments."""
    if not re.fullmatch(r"[0-9a-f]{16,128}", key):
        raise ValueError(f"a setup key is lowercase hex, got {key!r}")
    if not folder.startswith("/"):
        raise ValueError(f"the image cache folder must be an absolute path, got {folder!r}")
    return ["bash", "-c", IMAGE_EXPORT_SCRIPT, IMAGE_EXPORT, folder, key,
            *pyxis_container_names(job_id, name)]


def image_exported(stdout: str) -> tuple[str, str, str] | None:
    """``(node, "exported" | "present", path)`` from the export step's output, or None
    (it printed no such line: nothing was exported)."""
    for line in stdout.splitlines():
        words = line.split(" ", 3)
        if len(words) == 4 and words[0] == IMAGE_EXPORT_LINE and words[2] in (
                "exported", "present"):
            return words[1], words[2], words[3].strip()
    return None


# Takes the lock on the file argv[1], keeps it across exec into argv[2:] (flock(2)
# locks belong to the open file, which the exec'd program inherits).
_PY_LOCK = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.set_inheritable(fd, True)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)
# Under the lock: the marker re-checked (a racer that waited finds it and skips), the
# command run, the marker written only when it succeeded. $1 = marker, then the argv.
_ONCE_BODY = (
    'done=$1; shift; '
    f'if [ -e "$done" ]; then echo "{ONCE_SKIPPED} $*" >&2; exit 0; fi; '
    '"$@" && : > "$done"'
)


def once_argv(argv: Sequence[str], key: str, directory: str) -> list[str]:
    """``sh -c`` that runs ``argv`` at most once per node under ``key``: ``flock`` on
    ``<directory>/once.lock`` (``flock(1)``, else Python's ``fcntl.flock``; with
    neither, unlocked with a warning), then the done-marker
    ``<directory>/<hash of key>.done`` re-checked under the lock. The command and
    paths are positional arguments; what the script embeds is ``shlex.quote``-d."""
    if not argv:
        raise ValueError("a step needs a command")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    lock, done = f"{directory}/once.lock", f"{directory}/{digest}.done"
    body = shlex.quote(_ONCE_BODY)
    script = (
        'dir=$1; lock=$2; done=$3; shift 3; '
        'mkdir -p "$dir" 2>/dev/null; '
        'if command -v flock >/dev/null 2>&1; then '
        f'exec flock "$lock" sh -c {body} slurm_fsm-once "$done" "$@"; fi; '
        'if command -v python3 >/dev/null 2>&1; then '
        f'exec python3 -c {shlex.quote(_PY_LOCK)} "$lock" '
        f'sh -c {body} slurm_fsm-once "$done" "$@"; fi; '
        'echo "slurm_fsm: neither flock nor python3 on $(hostname): not node-locked" >&2; '
        f'exec sh -c {body} slurm_fsm-once "$done" "$@"'
    )
    return ["sh", "-c", script, "slurm_fsm-once", directory, lock, done, *argv]


def srun_step_argv(request: StepRequest) -> list[str]:
    """``srun --jobid=ID -N n --ntasks-per-node=k [...] ARGV`` for a step in an allocation.

    ``-N`` is always passed: without it srun uses one node of a multi-node
    allocation. pyxis options appear only when ``request.container`` is set.
    """
    if not request.argv:
        raise ValueError("a step needs a command")
    argv = [
        "srun",
        f"--jobid={request.job_id}",
        "-N",
        str(request.nodes),
        f"--ntasks-per-node={request.ntasks_per_node}",
    ]
    if request.overlap:
        argv.append("--overlap")
    if request.no_gpus:
        argv.append("--gres=none")
    if request.chdir:
        argv.append(f"--chdir={request.chdir}")
    if request.container is not None:
        argv.extend(_container_args(request.container))
    if request.once is not None:
        directory = ONCE_DIR_HOST if request.container is None else ONCE_DIR_CONTAINER
        key = "\0".join((request.job_id, request.chdir or "", request.once))
        argv.extend(once_argv(request.argv, key, directory))
    else:
        argv.extend(request.argv)
    return argv


#: What a lease step's task prints once it runs: the step exists in slurmctld from then on.
LEASE_UP = "fsm-lease-up"


#: How often a lease step's task asks whether its ``srun`` is still there (seconds),
#: how long one question may take, and how many unanswered in a row end the lease.
LEASE_PROBE_S = 3
LEASE_PROBE_TIMEOUT_S = 2
LEASE_PROBE_MISSES = 2
#: What a lease step's task prints when it ends because its ``srun`` is gone.
LEASE_ORPHANED = "fsm-lease-orphaned"

#: The task of a lease step (``sh -c``). It prints :data:`LEASE_UP`, then connects to
#: its own ``srun``'s listening socket (``SLURM_SRUN_COMM_HOST:PORT``, in every task's
#: environment) every :data:`LEASE_PROBE_S` seconds and ends when
#: :data:`LEASE_PROBE_MISSES` connections in a row are refused or unanswered: the host
#: of its ``srun`` died whole (a login node lost: nobody is left to cancel the step,
#: and Slurm never notices by itself). Where it cannot probe (no address, no ``bash``
#: or ``timeout`` on the node, the first probe already fails: a network between node
#: and login host that forbids it), it sleeps until its ``srun`` ends, as before.
LEASE_TASK = (
    f"echo {LEASE_UP}; "
    'h="$SLURM_SRUN_COMM_HOST"; p="$SLURM_SRUN_COMM_PORT"; '
    f"probe() {{ timeout {LEASE_PROBE_TIMEOUT_S} "
    """bash -c ': <"/dev/tcp/$0/$1"' "$h" "$p" 2>/dev/null; }; """
    'if [ -z "$h" ] || [ -z "$p" ] || ! command -v bash >/dev/null '
    "|| ! command -v timeout >/dev/null || ! probe; then exec sleep infinity; fi; "
    f"m=0; while sleep {LEASE_PROBE_S}; do "
    "if probe; then m=0; else m=$((m+1)); fi; "
    f'if [ "$m" -ge {LEASE_PROBE_MISSES} ]; then echo {LEASE_ORPHANED}; exit 0; fi; done'
)


def srun_lease_argv(job_id: str, name: str) -> list[str]:
    """``srun --overlap --gres=none -N1 -n1 -J NAME`` of a run's lease: a step that
    lives until its ``srun`` ends, or its ``srun``'s host is gone (:data:`LEASE_TASK`),
    visible to every host in ``squeue -s`` under ``name``. ``--overlap`` shares
    everything it holds (one CPU of one node) with the allocation's other steps,
    ``--gres=none`` takes no GPU: it never delays a job. It prints :data:`LEASE_UP`
    once its task runs."""
    return ["srun", f"--jobid={job_id}", "-N1", "-n1", "--overlap", "--gres=none",
            f"--job-name={name}", "sh", "-c", LEASE_TASK]


#: The name of a detached run's agent step: ``fsm-agent.<run id>`` (:mod:`slurm_fsm.agent`).
AGENT_STEP_PREFIX = "fsm-agent."


def srun_agent_argv(job_id: str, node: str, name: str, argv: Sequence[str]) -> list[str]:
    """``srun --overlap --gres=none -N1 -n1 -w NODE -J NAME ARGV`` of a detached run's
    agent: one task on ``node`` that shares what it holds (one CPU) with the
    allocation's other steps and takes no GPU, as the lease step does. Its stdin is
    srun's (the agent's task)."""
    return ["srun", f"--jobid={job_id}", "-N1", "-n1", f"--nodelist={node}", "--overlap",
            "--gres=none", f"--job-name={name}", *argv]


def mount_warmup_argv(targets: Sequence[str]) -> tuple[str, ...]:
    """One ``sh -c`` loop that ``ls``-es each container-side mount target, ignoring a
    failure (procedure.md 0E.2: the mounts are warmed, not checked): its exit status
    is 0 unless the step itself (srun, the container) fails. A failed ``ls`` leaves
    its message on stderr. ``sh``, not ``bash``: a container may have no bash."""
    loop = " ".join(shlex.quote(t) for t in targets)
    return ("sh", "-c", f'for d in {loop}; do ls "$d" > /dev/null || true; done')


def pyxis_container_names(job_id: str, name: str) -> list[str]:
    """enroot's names of pyxis' container ``name``: ``pyxis_NAME`` (container_scope=global,
    pyxis' default) and ``pyxis_JOBID_NAME`` (container_scope=job)."""
    return [f"pyxis_{name}", f"pyxis_{job_id}_{name}"]


#: The first word of the line the removal prints, on stderr, when a container of the
#: name is another checkout's: ``@@slurm_fsm-foreign NODE ENROOT_NAME OWNER...``.
FOREIGN_CONTAINER_MARKER = "@@slurm_fsm-foreign"

#: Where each node keeps the owner marks of the containers slurm_fsm made (host side,
#: per user and node): one file per enroot name, ``<checkout tag> <repo_root>``.
CONTAINER_MARKS_DIR = '${XDG_STATE_HOME:-$HOME/.local/state}/slurm_fsm/containers/$host'

#: Run once per node on the host (``bash -c SCRIPT bash TAG DESC NAME...``): for each
#: enroot name that exists, refuse (exit 3, :data:`FOREIGN_CONTAINER_MARKER`) when its
#: owner mark names another checkout, else remove it; then mark the name as this
#: checkout's (before the import creates it, so an interrupted import leaves no
#: unmarked container of ours). A container without a mark (made by hand or by an
#: older slurm_fsm) is removed as before. A mark that cannot be written (a read-only
#: home on the nodes) is a warning line, not a failed import. pyxis hides the job's
#: ENROOT_* path variables from enroot, so this does too.
CONTAINER_REMOVE_SCRIPT = (
    "unset ENROOT_LIBRARY_PATH ENROOT_SYSCONF_PATH ENROOT_RUNTIME_PATH ENROOT_CACHE_PATH "
    "ENROOT_DATA_PATH ENROOT_TEMP_PATH; "
    'PATH="$PATH:/usr/local/bin:/usr/bin:/bin"; '
    'tag=$1; desc=$2; shift 2; host=${SLURMD_NODENAME:-$(hostname)}; '
    f'marks="{CONTAINER_MARKS_DIR}"; '
    'names=$(enroot list) || exit; '
    'for n in "$@"; do '
    'if printf "%s\\n" "$names" | grep -qxF -- "$n"; then '
    'owner=$(head -c 4096 -- "$marks/$n" 2>/dev/null); '
    'if [ -n "$tag" ] && [ -n "$owner" ] && [ "${owner%% *}" != "$tag" ]; then '
    f'echo "{FOREIGN_CONTAINER_MARKER} $host $n $owner" >&2; exit 3; fi; '
    'enroot remove -f -- "$n" || exit; echo "removed $n on $(hostname)"; fi; '
    'if [ -n "$tag" ]; then mkdir -p -- "$marks" && '
    'printf "%s %s\\n" "$tag" "$desc" > "$marks/.$n.$$" && mv -f -- "$marks/.$n.$$" "$marks/$n" '
    '|| echo "slurm_fsm: warning: cannot mark $n on $host as this checkout\'s ($marks)" >&2; '
    "fi; "
    "done"
)


def container_remove_argv(job_id: str, nodes: int, name: str, owner: str = "",
                          owner_desc: str = "") -> list[str]:
    """srun on every node of the allocation (host, no container) removing pyxis'
    container ``name`` where it exists: the first half of a fresh import.

    With ``owner`` (a checkout's tag; ``owner_desc`` its repo_root, for messages) a
    container that another checkout marked is not removed (the step exits 3 with a
    :data:`FOREIGN_CONTAINER_MARKER` line, see :func:`foreign_container`), and the
    name is marked as ``owner``'s before the import makes it."""
    return [
        "srun",
        f"--jobid={job_id}",
        "-N",
        str(nodes),
        "--ntasks-per-node=1",
        "bash",
        "-c",
        CONTAINER_REMOVE_SCRIPT,
        "bash",
        owner,
        owner_desc,
        *pyxis_container_names(job_id, name),
    ]


def foreign_container_message(name: str, node: str, enroot_name: str, mark: str) -> str:
    """Why a fresh import of container ``name`` stopped: ``enroot_name`` on ``node``
    carries another checkout's owner ``mark`` (``<tag> <repo_root>``)."""
    tag, _, root = mark.partition(" ")
    return (f"container {name!r} ({enroot_name} on {node}) belongs to another checkout: "
            f"{root or '?'} ({tag}); it is neither removed nor reused. Use another "
            f"container_name, or remove it there (enroot remove {enroot_name} on {node}) "
            "once that checkout no longer needs it")


def foreign_container(text: str) -> tuple[str, str, str] | None:
    """``(node, enroot name, owner mark)`` of the first container the removal refused
    as another checkout's (see :func:`container_remove_argv`), or None."""
    for line in text.splitlines():
        words = line.split(" ", 3)
        if len(words) == 4 and words[0] == FOREIGN_CONTAINER_MARKER:
            return words[1], words[2], words[3].strip()
    return None


def gpu_processes_script() -> str:
    """The ``bash -c`` text run once per node by :func:`gpu_processes_argv`
    (:func:`slurm_fsm.nvsmi.gpu_processes_script`): the node's name, nvidia-smi's
    compute processes and its exit status (a node without nvidia-smi lists nothing)."""
    return nvsmi.gpu_processes_script()


def gpu_processes_argv(job_id: str, nodes: int, gpus_per_node: int | None = None
                       ) -> list[str]:
    """srun on every node of the allocation (host, no container), labelled per task,
    holding all ``gpus_per_node`` GPUs of the allocation's nodes.

    ``--overlap`` keeps this read-only probe from waiting behind a running step: it
    starts at once even while other steps hold every GPU (22.05 and 24.11). The GPUs
    must be asked: under ``ConstrainDevices=yes`` a step sees only the device files of
    the GPUs it holds (with ``--gres=none`` nvidia-smi finds no device at all).
    Without GPUs (``gpus_per_node`` 0 or unknown) it asks none.
    """
    gpus = [f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else ["--gres=none"]
    return [
        "srun",
        f"--jobid={job_id}",
        "-N",
        str(nodes),
        "--ntasks-per-node=1",
        "--overlap",
        *gpus,
        "-l",
        "bash",
        "-c",
        gpu_processes_script(),
    ]


def probe_gpu_argv(partition: str, account: str | None = None) -> list[str]:
    """srun on one node of ``partition`` holding one GPU, printing its GPU names and
    compute capability (pre-step, step 1; :func:`slurm_fsm.nvsmi.probe_script`). One
    GPU is asked: under ``ConstrainDevices=yes`` a job that holds none sees none."""
    argv = ["srun", f"--partition={partition}"]
    if account:
        argv.append(f"--account={account}")
    argv += [
        "-N",
        "1",
        "--ntasks-per-node=1",
        "--gpus-per-node=1",
        "--job-name=slurm_fsm-gpu-probe",
        "bash",
        "-c",
        nvsmi.probe_script(),
    ]
    return argv


def sbatch_argv(request: BatchRequest) -> list[str]:
    """``sbatch --parsable`` of a script, run in ``work_dir`` (the one-shot path)."""
    argv = ["sbatch", "--parsable"]
    if request.job_name:
        argv.append(f"--job-name={request.job_name}")
    if request.partition:
        argv.append(f"--partition={request.partition}")
    if request.account:
        argv.append(f"--account={request.account}")
    argv.append(f"--chdir={request.work_dir}")
    argv.extend(request.extra_args)
    argv.append(str(request.script_path))
    return argv


def scancel_argv(job_id: str, step_id: str | None = None) -> list[str]:
    """``scancel ID`` or ``scancel ID.STEP`` (only the step: the allocation stays)."""
    target = f"{job_id}.{step_id}" if step_id is not None else str(job_id)
    return ["scancel", target]


def scancel_signal_argv(job_id: str, step_id: str, signal_name: str) -> list[str]:
    """``scancel --signal=NAME ID.STEP``: the signal to the step's tasks (the step is
    not cancelled by it)."""
    if not signal_name.isalnum():
        raise ValueError(f"signal name {signal_name!r}: letters and digits only")
    return ["scancel", f"--signal={signal_name}", f"{job_id}.{step_id}"]


def sacct_argv(job_id: str) -> list[str]:
    """``sacct`` rows of a job and its steps, ``|``-separated, no header."""
    return ["sacct", "-j", str(job_id), f"--format={','.join(SACCT_FIELDS)}", "-n", "-P"]


def sacct_steps_argv(job_id: str, step_ids: Sequence[str]) -> list[str]:
    """``sacct`` rows of some steps of a job only (``-j ALLOC.3,ALLOC.4``: neither the
    job's row nor its other steps'), ``|``-separated, no header. A step accounting has
    no row for yet is simply missing (exit 0)."""
    if not step_ids:
        raise ValueError("sacct_steps_argv needs at least one step id")
    ids = ",".join(f"{job_id}.{step}" for step in step_ids)
    return ["sacct", "-j", ids, f"--format={','.join(SACCT_STEP_FIELDS)}", "-n", "-P"]


def scontrol_show_job_argv(job_id: str) -> list[str]:
    """``scontrol show job ID``: the fallback when accounting is off or late."""
    return ["scontrol", "show", "job", str(job_id)]


#: What ``sacct_files_argv`` asks, in this order (``StdOut``/``StdErr``: Slurm 23.02 and
#: later; 22.05's sacct has no such field and says ``Invalid field requested``).
SACCT_FILE_FIELDS = ("JobID", "JobName", "User", "NodeList", "WorkDir", "StdOut", "StdErr")


def sacct_files_argv(job_id: str) -> list[str]:
    """``sacct -X``: where a job wrote its stdout and stderr, as accounting keeps them
    (the fallback once ``scontrol show job`` has forgotten the job)."""
    return ["sacct", "-j", str(job_id), "-X", f"--format={','.join(SACCT_FILE_FIELDS)}",
            "-n", "-P"]


def scontrol_granted_argv(job_id: str) -> list[str]:
    """``scontrol show job -d -o ID``: what a job was granted, one line with the per-node
    details (``Nodes=n1 CPU_IDs=0-3 Mem=.. GRES=gpu:4(IDX:0-3)``)."""
    return ["scontrol", "show", "job", "-d", "-o", str(job_id)]


def srun_help_argv() -> list[str]:
    """``srun --help``: lists ``--container-image`` when pyxis is installed."""
    return ["srun", "--help"]


# ----------------------------------------------------------------------- parsers


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _duration(text: str, default: str) -> Duration:
    try:
        return Duration.parse(text) if text.strip() else Duration.parse(default)
    except ValueError:
        return Duration.parse("INVALID")


def _int(text: str, default: int = 0) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return default


def parse_jobs(text: str) -> list[JobInfo]:
    """Rows of ``squeue -o JOB_FORMAT`` -> JobInfo. Raises ValueError on a foreign row."""
    jobs = []
    for line in _lines(text):
        fields = line.split(SEP, _JOB_FIELD_COUNT - 1)
        if len(fields) == _JOB_FIELD_COUNT and _SUBMIT.fullmatch(fields[11].strip()):
            submit = fields.pop(11).strip()
        else:  # a row of JOB_FORMAT_V1 (recorded before the submit time was read)
            fields, submit = line.split(SEP, _JOB_FIELD_COUNT - 2), ""
        if len(fields) != _JOB_FIELD_COUNT - 1:
            raise ValueError(f"not a squeue row of {JOB_FORMAT!r}: {line!r}")
        (job_id, state, user, partition, nodes, nodelist, left, used, reason, start, comment,
         name) = fields
        jobs.append(
            JobInfo(
                job_id=job_id.strip(),
                state=state.strip(),
                name=name,
                user=user.strip(),
                partition=partition.strip(),
                num_nodes=_int(nodes),
                nodelist=nodelist.strip(),
                time_left=_duration(left, "INVALID"),
                elapsed=_duration(used, "0:00"),
                reason=reason.strip(),
                start_time=start.strip(),
                comment="" if comment.strip() == "(null)" else comment.strip(),
                submit_time="" if submit in ("N/A", "Unknown") else submit,
            )
        )
    return jobs


def parse_job(text: str, job_id: str) -> JobInfo:
    """The row of ``job_id`` in ``squeue -j`` output; for an array or heterogeneous job,
    whose rows are its parts' (``16_0``, ``16_[1-2]``, ``19+0``, ``19+1``), one row made
    of them (:meth:`JobInfo.of_parts`: active while any part is). Raises JobNotFound
    when neither is there."""
    jobs = parse_jobs(text)
    for job in jobs:
        if job.job_id == str(job_id):
            return job
    parts = [job for job in jobs if part_of(job.job_id, job_id)]
    if parts:
        return JobInfo.of_parts(str(job_id), parts)
    raise JobNotFound(str(job_id), "squeue has no row for it")


def parse_steps(text: str, job_id: str) -> list[StepInfo]:
    """Rows of ``squeue -s -O STEP_FORMAT`` -> StepInfo, only those of ``job_id``.

    Every step squeue lists is returned, ``extern`` and ``batch`` included;
    callers that want the user's own steps keep the numeric ``step_id`` ones.
    """
    steps = []
    for line in _lines(text):
        fields = [f.strip() for f in line.split(SEP, 2)]
        if len(fields) != 3 or "." not in fields[0]:
            raise ValueError(f"not a squeue -s row of {STEP_FORMAT!r}: {line!r}")
        full_id, state, name = fields
        job, step = full_id.split(".", 1)
        if job != str(job_id):
            continue
        steps.append(StepInfo(job_id=job, step_id=step, name=name,
                              state=JobState.parse(state) if state else JobState.RUNNING))
    return steps


_CANCELLED_BY = re.compile(r"^CANCELLED by (\S+)$")


def _state(text: str) -> tuple[JobState, str]:
    """``CANCELLED by 0`` -> (CANCELLED, "0"); ``CANCELLED+`` -> (CANCELLED, "")."""
    text = text.strip()
    m = _CANCELLED_BY.match(text)
    return JobState.parse(text), (m.group(1) if m else "")


def _exit(text: str) -> tuple[int, int] | None:
    """``3:0`` -> (3, 0); ``0:125`` -> (0, 125); empty -> None."""
    text = text.strip()
    if not text:
        return None
    code, _, sig = text.partition(":")
    try:
        return int(code), int(sig or 0)
    except ValueError as exc:
        raise ValueError(f"not an exit code: {text!r}") from exc


_RSS_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _rss_bytes(text: str) -> float:
    m = re.match(r"^([\d.]+)([KMGTP]?)$", text.strip())
    return float(m.group(1)) * _RSS_UNITS[m.group(2)] if m else -1.0


def _size(text: str) -> int | None:
    """``423048K`` -> 433201152; empty or not a size -> None."""
    size = _rss_bytes(text)
    return int(size) if size >= 0 else None


def _memory_per_node(tres: str) -> int | None:
    """``cpu=1,mem=100M,node=1`` -> 104857600: a step's ``AllocTRES`` memory over its
    node count (``mem=100M``, ``mem=2G``, ``mem=1.95G``; a bare number is megabytes).
    None when it has no memory (or none to speak of)."""
    fields = dict(part.partition("=")[::2] for part in tres.split(",") if "=" in part)
    mem = fields.get("mem", "").strip()
    if mem and mem[-1].isdigit():
        mem += "M"
    size = _size(mem)
    try:
        nodes = max(int(fields.get("node", "1")), 1)
    except ValueError:
        nodes = 1
    return size // nodes if size else None


def _sacct_row(line: str) -> tuple[JobOutcome, tuple[int, int] | None]:
    """One row of :data:`SACCT_FIELDS` (and more) -> its outcome and raw exit code."""
    fields = line.split(SEP)
    if len(fields) < len(SACCT_FIELDS):
        raise ValueError(f"not a sacct -P row of {','.join(SACCT_FIELDS)}: {line!r}")
    jid, state_text, exit_text, elapsed_text, rss = (f.strip() for f in fields[:5])
    state, by = _state(state_text)
    ex = _exit(exit_text)
    code, sig = ex if ex is not None else (0, 0)
    return JobOutcome(job_id=jid, state=state, exit_code=code, signal=sig,
                      elapsed=_duration(elapsed_text, "0:00"), max_rss=rss,
                      cancelled_by=by, source="sacct"), ex


def _sacct_job(job_id: str, rows: Sequence[tuple[JobOutcome, tuple[int, int] | None]]
               ) -> JobOutcome | None:
    """The outcome of one job (or one part) from its own row and its steps' rows."""
    job_row = next((row for row, _ in rows if row.job_id == job_id), None)
    if job_row is None:
        return None
    raw_exit = next(ex for row, ex in rows if row is job_row)
    steps = [row for row, _ in rows if row is not job_row]
    code, sig = job_row.exit_code, job_row.signal
    batch = next((r for r in steps if r.job_id == f"{job_id}.batch"), None)
    if batch is not None and (raw_exit is None or ((code, sig) == (0, 0)
                              and batch.exit_code == 0 and 0 < batch.signal <= 64)):
        # no exit code on the job row; or 0:0 on a job whose batch script was killed
        # by a signal (22.05, measured: TIMEOUT|0:0 beside the batch's CANCELLED|0:15):
        # the script's own status, 143 as in persistent mode
        code, sig = batch.exit_code, batch.signal
    max_rss = job_row.max_rss
    if not max_rss:
        sized = [r for r in steps if r.max_rss and _rss_bytes(r.max_rss) >= 0]
        if sized:
            max_rss = max(sized, key=lambda r: _rss_bytes(r.max_rss)).max_rss
    return attrs.evolve(job_row, exit_code=code, signal=sig, max_rss=max_rss,
                        steps=tuple(steps))


def parse_sacct(text: str, job_id: str) -> JobOutcome | None:
    """``sacct -n -P --format=JobID,State,ExitCode,Elapsed,MaxRSS`` -> JobOutcome.

    The job row gives state, exit code and elapsed; its step rows become
    ``steps``. When the job row has no exit code, or says ``0:0`` while the batch step
    was killed by a signal (``0:15``: a time limit, a cancel), the batch step's is used;
    ``max_rss`` is the job row's, else the largest of its steps'. Returns
    None when there is no row for ``job_id`` (accounting has not seen it yet).

    An array job's rows are its tasks' (``16_0``, ``16_0.batch``, ...; a pending rest
    ``16_[1-2]``), a heterogeneous job's its components' (``19+0``, ``19+1.0``): each
    becomes one of ``parts`` the same way, and the job's outcome is theirs
    (:meth:`JobOutcome.of_parts`: the worst part decides; one not ended keeps the job
    active). A row of the bare id beside parts (sacct lags: ``16 PENDING`` while the
    task that kept id 16 runs) is one part more.
    """
    job_id = str(job_id)
    by_part: dict[str, list[tuple[JobOutcome, tuple[int, int] | None]]] = {}
    for line in _lines(text):
        row = _sacct_row(line)
        base = row[0].job_id.split(".", 1)[0]
        if base == job_id or part_of(base, job_id):
            by_part.setdefault(base, []).append(row)
    parts = [outcome for part, rows in by_part.items() if part != job_id
             and (outcome := _sacct_job(part, rows)) is not None]
    whole = _sacct_job(job_id, by_part.get(job_id, []))
    if not parts:
        return whole
    return JobOutcome.of_parts(job_id, [*parts, *([whole] if whole is not None else [])])


def parse_sacct_steps(text: str, job_id: str) -> list[JobOutcome]:
    """The numbered step rows of ``job_id`` in ``sacct -n -P`` output of
    :data:`SACCT_STEP_FIELDS` (:func:`sacct_steps_argv`): each step's state (``CANCELLED
    by 0`` -> CANCELLED, ``cancelled_by`` "0"; ``CANCELLED`` alone, a step whose task
    died of a signal, has no ``cancelled_by``), exit code and signal, its ``MaxRSS`` and
    the memory it was given per node (``AllocTRES``; rows of :data:`SACCT_FIELDS` alone
    have none). The job's own row, its ``batch`` / ``extern`` steps and other jobs' rows
    are left out."""
    out: list[JobOutcome] = []
    for line in _lines(text):
        fields = line.split(SEP)
        if len(fields) < len(SACCT_FIELDS):
            raise ValueError(f"not a sacct -P row of {','.join(SACCT_FIELDS)}: {line!r}")
        jid, state_text, exit_text, elapsed_text, rss = (f.strip() for f in fields[:5])
        base, _, step = jid.partition(".")
        if base != str(job_id) or not step.split("+", 1)[0].isdigit():
            continue
        state, by = _state(state_text)
        code, sig = _exit(exit_text) or (0, 0)
        tres = fields[5].strip() if len(fields) > 5 else ""
        out.append(JobOutcome(job_id=jid, state=state, exit_code=code, signal=sig,
                              elapsed=_duration(elapsed_text, "0:00"), max_rss=rss,
                              max_rss_bytes=_size(rss), memory_limit=_memory_per_node(tres),
                              cancelled_by=by, source="sacct"))
    return out


def with_true_exit_code(sacct: JobOutcome, controller: JobOutcome | None) -> JobOutcome:
    """sacct's outcome with the batch script's real exit status.

    Slurm 22.05's sacct prints an exit status above 127 modulo 128: a script whose
    ``srun`` step was SIGKILLed exits 137 (as a persistent run reports it), and sacct
    prints ``9:0``, as it does for ``exit 9`` (``exit 200`` -> ``72:0``). ``scontrol show
    job`` prints the status itself (``ExitCode=137:0``) while the controller still holds
    the job (``MinJobAge``): then its code and signal win. Without it, a code N in 1-64
    whose job has a step ended by signal N is read as 128 + N (the shell's status of a
    process killed by N, which a script ending with that step exits with)."""
    if sacct.parts:  # an array or het job: each part with its own record's code
        by_id = {p.job_id: p for p in controller.parts} if controller is not None else {}
        return JobOutcome.of_parts(sacct.job_id, [
            with_true_exit_code(part, by_id.get(part.job_id)) for part in sacct.parts])
    if controller is not None and controller.state.is_final and not controller.parts:
        return attrs.evolve(sacct, exit_code=controller.exit_code, signal=controller.signal)
    code = sacct.exit_code
    if sacct.signal == 0 and 1 <= code <= 64 and any(
            step.signal == code for step in sacct.steps
            if step.job_id.rpartition(".")[2].split("+")[0].isdigit()):
        return attrs.evolve(sacct, exit_code=128 + code)
    return sacct


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"(?<![\w/]){re.escape(key)}=(\S*)", text)
    return m.group(1) if m else None


def _records(text: str) -> list[str]:
    """The records of ``scontrol show job`` (one per array task or het component: each
    starts with ``JobId=`` at the start of a line)."""
    return [r for r in re.split(r"(?m)^(?=JobId=)", text) if r.strip()]


def _record_part(record: str, job_id: str) -> str | None:
    """The part of ``job_id`` one record is: ``16_2`` (``ArrayJobId=16 ArrayTaskId=2``;
    ``16_[0-2%1]`` for the pending rest), ``19+1`` (``HetJobId=19 HetJobOffset=1``);
    None when it is no part of ``job_id`` (a plain job's own record)."""
    if _field(record, "ArrayJobId") == job_id:
        task = _field(record, "ArrayTaskId") or ""
        return f"{job_id}_{task}" if task.isdigit() else f"{job_id}_[{task}]"
    if _field(record, "HetJobId") == job_id:
        return f"{job_id}+{_field(record, 'HetJobOffset') or '0'}"
    return None


def _scontrol_outcome(record: str, job_id: str) -> JobOutcome:
    state_text = _field(record, "JobState")
    if not state_text:
        raise ValueError(f"scontrol show job {job_id}: no JobState= in {record[:200]!r}")
    state, by = _state(state_text)
    ex = _exit(_field(record, "ExitCode") or "")
    code, sig = ex if ex is not None else (0, 0)
    return JobOutcome(job_id=job_id, state=state, exit_code=code, signal=sig,
                      elapsed=_duration(_field(record, "RunTime") or "", "0:00"),
                      cancelled_by=by, source="scontrol")


def parse_scontrol_job(text: str, job_id: str) -> JobOutcome:
    """``scontrol show job ID`` (JobState=, ExitCode=, RunTime=) -> JobOutcome.

    An array job has a record per task (``JobId=<task's id> ArrayJobId=ID
    ArrayTaskId=N``, the first one any task), a heterogeneous job one per component
    (``HetJobId=ID HetJobOffset=N``): each becomes one of ``parts`` (``ID_N``,
    ``ID+N``) and the job's outcome is theirs (:meth:`JobOutcome.of_parts`).
    Raises JobNotFound when the text holds no ``JobId=<job_id>``, ValueError
    when it holds the job but no JobState.
    """
    job_id = str(job_id)
    jid = _field(text, "JobId")
    if jid is None or jid != job_id:
        raise JobNotFound(job_id, "scontrol show job has no record of it")
    parts = [(part, record) for record in _records(text)
             if (part := _record_part(record, job_id)) is not None]
    if not parts:
        return _scontrol_outcome(text, job_id)
    return JobOutcome.of_parts(job_id, sorted(
        (_scontrol_outcome(record, part) for part, record in parts), key=_part_order))


def _part_order(outcome: JobOutcome) -> tuple[int, str]:
    """Array tasks and het components in their number's order (a pending rest last)."""
    tail = re.split(r"[_+]", outcome.job_id, maxsplit=1)[-1]
    return (int(tail), "") if tail.isdigit() else (1 << 40, tail)


#: sbatch's filename pattern: ``%%``, or ``%`` with an optional zero-padding width and
#: one letter (``man sbatch``, "filename pattern"); a backslash anywhere turns them off.
_OUTPUT_PATTERN = re.compile(r"%(%|(\d*)([AaJjNnstux]))")
#: What a job that is not an array shows for ``%a`` (NO_VAL - 1: Slurm 22.05 writes
#: ``4294967294`` into the file name).
NO_ARRAY_TASK = "4294967294"


def expand_output_pattern(pattern: str, *, job_id: str, job_name: str = "", user: str = "",
                          node: str = "") -> str:
    """An sbatch ``--output``/``--error`` file name with its pattern expanded as the
    batch step does: ``%j`` job id, ``%x`` job name, ``%u`` user, ``%N`` the (first)
    node (left as ``%N`` while ``node`` is empty), ``%A`` the job id, ``%a`` the array
    task (:data:`NO_ARRAY_TASK` for a job that is not an array), ``%J`` ``<id>.batch``,
    ``%s`` ``batch``, ``%n`` and ``%t`` ``0``, ``%%`` ``%``; a number after ``%`` pads
    with zeros (``%5j``). A name holding a backslash is not expanded: only its
    backslashes go, as in Slurm.
    ``scontrol show job`` of Slurm 22.05 shows ``%N``, ``%n``, ``%t``, ``%s`` and
    ``%%`` still unexpanded (the rest expanded): expanding its ``StdOut`` again with the
    job's ``BatchHost`` gives the file's name."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    base, _, task = job_id.partition("_")
    values = {"A": base, "a": task or NO_ARRAY_TASK, "J": f"{job_id}.batch", "j": job_id,
              "N": node, "n": "0", "s": "batch", "t": "0", "u": user, "x": job_name}

    def one(m: re.Match[str]) -> str:
        if m.group(1) == "%":
            return "%"
        letter, width = m.group(3), m.group(2)
        value = values[letter]
        if not value:
            return m.group(0)  # not known (yet): left as Slurm leaves it
        if width and value.isdigit():
            value = value.zfill(int(width))
        return value

    return _OUTPUT_PATTERN.sub(one, pattern)


def _line_field(text: str, key: str) -> str | None:
    """``key=`` of ``scontrol show job`` (not ``-o``) to the end of its line: a path
    with spaces in it is whole."""
    m = re.search(rf"(?m)^\s*{re.escape(key)}=(.*?)\s*$", text)
    return m.group(1) if m else None


def _job_files(job_id: str, out: str, err: str, *, work_dir: str, source: str,
               **names: str) -> JobFiles:
    paths = []
    for raw in (out, err or out):
        expanded = expand_output_pattern(raw, job_id=job_id, **names)
        path = Path(expanded)
        if not path.is_absolute() and work_dir:
            path = Path(work_dir) / path
        paths.append(path)
    return JobFiles(job_id=job_id, stdout=paths[0], stderr=paths[1], source=source,
                    needs_node=not names.get("node"))


def _record_files(record: str, job_id: str) -> JobFiles:
    out = _line_field(record, "StdOut")
    if not out or out == "(null)":
        raise ValueError(f"scontrol show job {job_id}: no StdOut= (not a batch job?)")
    err = _line_field(record, "StdErr") or ""
    host = _field(record, "BatchHost") or ""
    return _job_files(job_id, out, "" if err == "(null)" else err,
                      work_dir=_line_field(record, "WorkDir") or "", source="scontrol",
                      node="" if host == "(null)" else host)


def parse_scontrol_files(text: str, job_id: str) -> JobFiles:
    """``scontrol show job ID`` -> where the batch job writes (``StdOut=``, ``StdErr=``),
    each expanded with the job's ``BatchHost`` (Slurm 22.05 leaves ``%N`` to the batch
    step) and made absolute with its ``WorkDir``. Raises JobNotFound when the text
    holds no ``JobId=<job_id>``, ValueError when it has no ``StdOut=`` (not a batch
    job).

    An array job: each task's record names its files (``tasks``, in task order; the
    job's own files are the first task's); the record of tasks not started yet
    (``ArrayTaskId=1-2``, its ``%a`` shown as 4294967294) names none
    (``tasks_pending``). A heterogeneous job: the first record's (component 0 runs the
    batch script; the others' ``StdOut`` are never written)."""
    job_id = str(job_id)
    jid = _field(text, "JobId")
    if jid is None or jid != job_id:
        raise JobNotFound(job_id, "scontrol show job has no record of it")
    records = _records(text)
    tasks: list[JobFiles] = []
    pending = False
    for record in records:
        part = _record_part(record, job_id)
        if part is None or "+" in part:
            continue
        if "[" in part:
            pending = True
        else:
            tasks.append(_record_files(record, part))
    if not tasks:
        return attrs.evolve(_record_files(records[0], job_id), tasks_pending=pending)
    tasks.sort(key=lambda t: int(t.job_id.rpartition("_")[2]))
    return attrs.evolve(tasks[0], job_id=job_id, tasks=tuple(tasks), tasks_pending=pending,
                        needs_node=any(t.needs_node for t in tasks))


def parse_sacct_files(text: str, job_id: str) -> JobFiles:
    """``sacct -X`` of :func:`sacct_files_argv` -> where the job wrote: accounting keeps
    the patterns as given, so they are expanded here (job name, user, first node of
    ``NodeList``) and made absolute with ``WorkDir``. Raises JobNotFound without a row
    of the job, ValueError when the row has no ``StdOut``."""
    job_id = str(job_id)
    for line in _lines(text):
        fields = line.split(SEP)
        if len(fields) != len(SACCT_FILE_FIELDS) or fields[0] != job_id:
            continue
        _, name, user, nodelist, work, out, err = fields
        if not out:
            raise ValueError(f"sacct: no StdOut for job {job_id} in {line!r}")
        nodes = expand_nodelist(nodelist) if nodelist not in ("", "None assigned") else []
        return _job_files(job_id, out, err, work_dir=work, source="sacct", job_name=name,
                          user=user, node=nodes[0] if nodes else "")
    raise JobNotFound(job_id, "sacct has no row for it")


#: A per-node line of ``scontrol show job -d``: nodes, their CPU ids, their GRES.
_NODE_DETAIL = re.compile(r"(?<!\S)Nodes=(\S+)\s+CPU_IDs=(\S*)(?:\s+Mem=\S*)?"
                          r"(?:\s+GRES=(\S*))?")
#: ``gres/gpu=N`` (any type) in a TRES list.
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
#: ``gpu:4(IDX:0-3)``, ``gpu:a100:4(IDX:0-3)``, ``gpu(IDX:0-3)`` in a per-node GRES.
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?(?::(\d+))?(?:\(IDX:([^)]*)\))?")


def _count_ids(text: str) -> int:
    """How many ids a Slurm id list holds: ``0-3,8`` -> 5 (``N/A`` and empty: 0)."""
    total = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            total += (int(hi) - int(lo) + 1) if hi else 1
    return total


def _node_gpus(gres: str) -> int:
    total = 0
    for m in _GRES_GPU.finditer(gres):
        total += int(m.group(1)) if m.group(1) else _count_ids(m.group(2) or "")
    return total


def parse_scontrol_granted(text: str, job_id: str) -> Granted:
    """``scontrol show job -d [-o] ID`` -> what the job was granted.

    Nodes and nodelist from ``NumNodes``/``NodeList``; CPUs per node: the fewest of
    the per-node ``CPU_IDs`` lines when they account for all of ``NumCPUs``, else
    ``NumCPUs`` spread evenly; GPUs per node: the fewest of the per-node ``GRES`` when
    they name GPUs, else ``gres/gpu`` of ``AllocTRES`` (``TRES`` in Slurm 22.05)
    spread evenly. Raises JobNotFound when the text holds no ``JobId=<job_id>``,
    ValueError when it lacks ``NumNodes``/``NumCPUs`` (e.g. a job still PENDING)."""
    job_id = str(job_id)
    jid = _field(text, "JobId")
    if jid is None or jid != job_id:
        raise JobNotFound(job_id, "scontrol show job has no record of it")
    nodes = _int(_field(text, "NumNodes") or "", 0)
    cpus = _int(_field(text, "NumCPUs") or "", 0)
    nodelist = _field(text, "NodeList") or ""
    if nodes < 1 or cpus < 1 or nodelist in ("", "(null)"):
        raise ValueError(f"scontrol show job {job_id}: no granted NumNodes/NumCPUs/NodeList "
                         f"(not running yet?) in {text[:200]!r}")
    per_node_cpus: list[int] = []
    per_node_gpus: list[int] = []
    for m in _NODE_DETAIL.finditer(text):
        count = len(expand_nodelist(m.group(1)))
        per_node_cpus += [_count_ids(m.group(2))] * count
        per_node_gpus += [_node_gpus(m.group(3) or "")] * count
    if len(per_node_cpus) == nodes and sum(per_node_cpus) == cpus:
        cpus_per_node = min(per_node_cpus)
    else:
        cpus_per_node = cpus // nodes
    if len(per_node_gpus) == nodes and any(per_node_gpus):
        gpus_per_node = min(per_node_gpus)
    else:
        tres = _field(text, "AllocTRES") or _field(text, "TRES") or ""
        m_gpu = _TRES_GPU.search(tres)
        gpus_per_node = int(m_gpu.group(1)) // nodes if m_gpu else 0
    return Granted(job_id=job_id, nodes=nodes, nodelist=nodelist, cpus=cpus,
                   cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node)


_SBATCH_ID = re.compile(r"^(\d+)(?:;(\S+))?$")


def parse_sbatch(text: str) -> str:
    """``sbatch --parsable`` output (``123`` or ``123;cluster``) -> ``"123"``.

    Warnings sbatch may print before the id are skipped; ValueError when no
    line is an id.
    """
    for line in reversed(_lines(text)):
        m = _SBATCH_ID.match(line.strip())
        if m:
            return m.group(1)
    raise ValueError(f"no job id in sbatch --parsable output: {text.strip()[:200]!r}")


def has_container_option(help_text: str) -> bool:
    """True when ``srun --help`` lists pyxis' ``--container-image``."""
    return "--container-image" in help_text


def parse_gpu_processes(text: str) -> list[GpuProcess]:
    """Output of :func:`gpu_processes_argv` (``srun -l``) -> GpuProcess per row
    (:func:`slurm_fsm.nvsmi.parse_gpu_processes` without the failures)."""
    return nvsmi.parse_gpu_processes(text)[0]


def parse_gpu_name(text: str) -> str | None:
    """The probe's output (:func:`probe_gpu_argv`) -> the first GPU's name, with its
    compute capability when known (``NVIDIA GH200 480GB (sm_90)``); None when the node
    has no nvidia-smi. :class:`slurm_fsm.nvsmi.NvidiaSmiFailed` (a BackendError naming
    the node and nvidia-smi's words) when nvidia-smi failed there."""
    return nvsmi.parse_gpu_probe(text)


def expand_nodelist(nodelist: str) -> list[str]:
    """``n[1-3],m5`` -> ``["n1", "n2", "n3", "m5"]``; empty -> ``[]``."""
    if not nodelist.strip() or nodelist.strip() in ("(null)", "None assigned"):
        return []
    try:
        return list(hostlist.expand_hostlist(nodelist.strip()))
    except hostlist.BadHostlist as exc:
        raise ValueError(f"not a Slurm node list: {nodelist!r}: {exc}") from exc


def compress_nodelist(nodes: Iterable[str]) -> str:
    """``["n1", "n2", "n3"]`` -> ``n[1-3]`` (the form squeue prints)."""
    return str(hostlist.collect_hostlist(list(nodes)))


_DIRECTIVE = re.compile(r"^#SBATCH\s+(?:--([a-z-]+)(?:[=\s]+(\S+))?|-([a-zA-Z])\s*(\S+)?)")
_SHORT = {"o": "output", "e": "error", "p": "partition", "A": "account", "N": "nodes",
          "t": "time", "J": "job-name", "a": "array"}
#: ``#SBATCH hetjob`` (``packjob`` before Slurm 20.02): the components of a
#: heterogeneous job are separated by it
_HET_SEPARATOR = re.compile(r"^#SBATCH\s+(?:hetjob|packjob)\s*(?:#.*)?$")
#: an array's index list: ``0-15``, ``0,6,16-32``, ``0-15:4``, each with ``%N`` (at most
#: N tasks at once) or not
_ARRAY_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
#: at most this many task ids are listed from one ``--array`` (the files followed)
MAX_ARRAY_TASKS = 1000


def sbatch_directives(text: str) -> dict[str, str]:
    """``#SBATCH`` options of a script, as sbatch reads them (long names)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            break  # sbatch stops at the first command
        m = _DIRECTIVE.match(line.strip())
        if not m:
            continue
        if m.group(1):
            out[m.group(1)] = m.group(2) or ""
        elif m.group(3) in _SHORT:
            out[_SHORT[m.group(3)]] = m.group(4) or ""
    return out


def batch_kind(text: str) -> str:
    """``array`` when a script's ``#SBATCH --array`` (``-a``) makes an array job, ``het``
    when an ``#SBATCH hetjob`` line makes it heterogeneous, else "" (read as sbatch
    reads its directives: up to the first command)."""
    for line in text.splitlines():
        if line and not line.startswith("#"):
            break
        if _HET_SEPARATOR.match(line.strip()):
            return "het"
    return "array" if "array" in sbatch_directives(text) else ""


def batch_parts(text: str, job_id: str) -> list[str]:
    """The parts accounting will list for job ``job_id`` of a script: each array task
    (``16_0``, ... of its ``--array``), each het component (``19+0``, ``19+1``: one more
    than its ``#SBATCH hetjob`` lines); [] for a plain job (or an index list this cannot
    read)."""
    kind = batch_kind(text)
    if kind == "het":
        seps = 0
        for line in text.splitlines():
            if line and not line.startswith("#"):
                break
            seps += bool(_HET_SEPARATOR.match(line.strip()))
        return [f"{job_id}+{k}" for k in range(seps + 1)]
    if kind == "array":
        try:
            return [f"{job_id}_{task}" for task in
                    array_task_ids(sbatch_directives(text).get("array", ""))]
        except ValueError:
            return []
    return []


def array_task_ids(spec: str) -> list[int]:
    """The task ids of an ``--array`` index list: ``0-2`` -> [0, 1, 2], ``1,5-9:2%2``
    -> [1, 5, 7, 9]; at most :data:`MAX_ARRAY_TASKS`. ValueError when it is not one."""
    ids: list[int] = []
    for item in spec.split("%", 1)[0].split(","):
        m = _ARRAY_RANGE.fullmatch(item.strip())
        if not m:
            raise ValueError(f"not an --array index list: {spec!r}")
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        if hi < lo or step < 1:
            raise ValueError(f"not an --array index list: {spec!r}")
        ids.extend(range(lo, min(hi, lo + step * MAX_ARRAY_TASKS) + 1, step))
    return sorted(set(ids))[:MAX_ARRAY_TASKS]


_SALLOC_ID = re.compile(r"salloc: (?:Granted|Pending) job allocation (\d+)")


def salloc_job_id(log_text: str) -> str | None:
    """The job id salloc announced in its log (``Pending``/``Granted job allocation N``)."""
    m = _SALLOC_ID.search(log_text)
    return m.group(1) if m else None


def salloc_error(log_text: str, max_lines: int = STDERR_TAIL_LINES) -> str:
    """The lines of a ``.salloc.log`` that say what went wrong.

    Lines with ``error`` or ``failed`` (e.g. "Job submit/allocate failed:
    Invalid partition name specified"); when there are none, the last lines.
    """
    lines = _lines(log_text)
    bad = [ln for ln in lines if re.search(r"error|failed|denied|invalid", ln, re.IGNORECASE)]
    chosen = bad or lines
    return "\n".join(chosen[-max_lines:])


def accounting_disabled(stderr: str) -> bool:
    """True when sacct says that this cluster keeps no accounting."""
    return "accounting storage is disabled" in stderr.lower()


# ------------------------------------------------------------------- classifier


def stderr_tail(stderr: str, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of ``stderr``."""
    return "\n".join(_lines(stderr)[-lines:])


def _is_single_job_query(argv: Sequence[str]) -> str | None:
    """The job id when ``argv`` asks about exactly one job, else None."""
    if not argv:
        return None
    tool = argv[0].rsplit("/", 1)[-1]
    args = list(argv[1:])
    if tool == "scontrol" and args[:2] == ["show", "job"]:
        ids = [a for a in args[2:] if not a.startswith("-")]  # -d, -o are options
        return ids[0] if ids else None
    if tool in ("squeue", "sacct") and "-s" not in args and "--steps" not in args:
        for i, a in enumerate(args):
            if a == "-j" and i + 1 < len(args) and "," not in args[i + 1]:
                return args[i + 1]
            if a.startswith("--jobs=") and "," not in a:
                return a.split("=", 1)[1]
    return None


def classify(
    argv: Sequence[str],
    returncode: int | None,
    stdout: str,
    stderr: str,
    *,
    timeout_s: float | None = None,
) -> BackendError | None:
    """The typed error a finished command means, or None when it succeeded.

    ``returncode is None`` means the command was stopped at its timeout
    (``timeout_s``). See the module docstring for the order of the rules.
    """
    argv = [str(a) for a in argv]
    tool = argv[0].rsplit("/", 1)[-1] if argv else ""
    full_stderr = stderr
    if tool in _RUNS_USER_COMMANDS:
        # only srun's own lines speak for Slurm; the user's command may print anything
        stderr = "\n".join(ln for ln in stderr.splitlines() if ln.startswith(f"{tool}: "))
    unreachable = next((m for m in CONTROLLER_UNREACHABLE_MARKERS if m in stderr), None)
    if returncode is None:
        if unreachable:
            return ControllerUnreachable(_line_with(stderr, unreachable), argv)
        return CommandTimedOut(argv, timeout_s if timeout_s is not None else 0.0)
    job_id = _is_single_job_query(argv)
    if returncode != 0 or unreachable:
        if unreachable:
            return ControllerUnreachable(_line_with(stderr, unreachable), argv)
        gone = next((m for m in JOB_GONE_MARKERS if m in stderr), None)
        expired = _EXPIRED.search(stderr)
        if gone or expired:
            detail = _line_with(stderr, gone) if gone else expired.group(0) if expired else ""
            return JobNotFound(job_id or _job_of(argv), detail)
        return CommandFailed(argv, returncode, stderr_tail(full_stderr))
    if job_id is not None and not stdout.strip():
        return JobNotFound(job_id, f"{argv[0]} printed no row")
    return None


def _line_with(text: str, marker: str) -> str:
    for line in text.splitlines():
        if marker in line:
            return line.strip()
    return marker


def _job_of(argv: Sequence[str]) -> str:
    """The job id an argv is about, best effort (for JobNotFound's message)."""
    for a in argv:
        if a.startswith("--jobid="):
            return a.split("=", 1)[1]
    if argv and argv[0].rsplit("/", 1)[-1] == "scancel" and len(argv) > 1:
        return argv[-1].split(".", 1)[0]
    return _is_single_job_query(argv) or "?"


# ------------------------------------------------------------ steps, with their srun
def scontrol_show_steps_argv(job_id: str) -> list[str]:
    """``scontrol -o show step ID``: every step of a job, one line each, with the host
    and pid of the ``srun`` that started it and the resources it holds (TRES)."""
    return ["scontrol", "-o", "show", "step", str(job_id)]


#: What ``scontrol show step ID`` prints when the job has no step (exit code 1).
NO_STEP_MARKER = "not found"

_STEP_FIELD = re.compile(r"(\S+?)=(\S*)")


def parse_scontrol_steps(text: str, job_id: str) -> list[StepInfo]:
    """Lines of ``scontrol -o show step ID`` -> StepInfo with ``srun_host``,
    ``srun_pid`` and ``tres`` (``cpu=1,mem=512M,node=1,gres/gpu=1``), only those of
    ``job_id``. A line without ``StepId=`` is refused (ValueError)."""
    steps = []
    for line in _lines(text):
        if NO_STEP_MARKER in line and "StepId=" not in line:
            continue
        fields = dict(_STEP_FIELD.findall(line))
        full_id = fields.get("StepId", "")
        if "." not in full_id:
            raise ValueError(f"not a line of scontrol show step: {line!r}")
        job, step = full_id.split(".", 1)
        if job != str(job_id):
            continue
        host, _, pid = fields.get("SrunHost:Pid", "").rpartition(":")
        tres = fields.get("TRES", "") if fields.get("TRES") != "(null)" else ""
        if not _TRES_GPU.search(tres):  # Slurm 22.05: a step's GPUs are only asked ones
            gpus = _step_gpus(fields)
            if gpus:
                tres = f"{tres},gres/gpu={gpus}" if tres else f"gres/gpu={gpus}"
        steps.append(StepInfo(
            job_id=job, step_id=step, name=fields.get("Name", ""),
            state=JobState.parse(fields["State"]) if fields.get("State") else JobState.RUNNING,
            srun_host=host, srun_pid=int(pid) if pid.isdigit() else None,
            tres=tres,
            nodelist=fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
            user_id=_uid(fields.get("UserId", "")),
            start_time=fields.get("StartTime", "") if fields.get("StartTime") not in (
                "Unknown", "None", "(null)") else "",
        ))
    return steps


def _uid(text: str) -> int | None:
    """``UserId=0`` or ``UserId=alice(1000)``: the number."""
    m = re.fullmatch(r"(?:[^()]*\()?(\d+)\)?", text)
    return int(m.group(1)) if m else None


#: ``gres:gpu:2``, ``gres:gpu:a100:2``, ``gres/gpu:2`` in a step's TresPer* fields.
_PER_GPU = re.compile(r"(?:^|,)gres[:/]gpu(?::[^:,=]+)?[:=](\d+)(?:,|$)")


def _step_gpus(fields: Mapping[str, str]) -> int | None:
    """The GPUs a step was given, from what it asked (Slurm 22.05 leaves them out of
    the step's ``TRES``): ``TresPerNode`` x nodes, ``TresPerStep``, or ``TresPerTask``
    x tasks. None when it asked none."""
    for key, times in (("TresPerNode", "Nodes"), ("TresPerStep", None),
                       ("TresPerTask", "Tasks")):
        m = _PER_GPU.search(fields.get(key, ""))
        if m:
            count = fields.get(times, "1") if times else "1"
            return int(m.group(1)) * (int(count) if count.isdigit() else 1)
    return None
