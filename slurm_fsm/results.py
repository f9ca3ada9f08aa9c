"""What a finished job's output means (procedure.md steps 4 and 5).

Pure functions over lines that :class:`slurm_fsm.joboutput.JobOutput` kept while it
followed the job (the workflow's relevant lines and the last 100, the first 50 on
failure): nothing here opens a log.

* per-workflow parsers - :func:`parse_pytest`, :func:`parse_eval`,
  :func:`parse_benchmark`, :func:`parse_custom`, which the workflow classes of
  :mod:`slurm_fsm.workflows` call (each workflow also gives the report's one-line
  summary and its parse warnings);
* the status decision - :class:`Status`, :data:`EXIT_CODES`, :func:`decide`, and
  :func:`status_of_state`, the one place that maps a final Slurm state to a status;
* the failure diagnosis table of procedure.md - :func:`diagnose`;
* the error-looking lines of a log - :func:`errors_from`.

The decision order of :func:`decide` (first match wins):

1. hang marker seen -> HANG_DETECTED
2. monitor_timeout_seconds passed -> TIMEOUT
3. Slurm's final state (:func:`status_of_state`): TIMEOUT/DEADLINE -> TIMEOUT,
   OUT_OF_MEMORY -> OUT_OF_MEMORY, CANCELLED/PREEMPTED/REVOKED -> CANCELLED,
   NODE_FAIL/BOOT_FAIL -> FAILED; in persistent mode, how the run's own steps ended
   (:func:`step_verdict`): a step OUT_OF_MEMORY (or killed for its memory limit, as the
   log or accounting's MaxRSS says) -> OUT_OF_MEMORY, a step ``CANCELLED by <uid>``
   when the script died of a signal (exit code above 128) -> CANCELLED
4. a failure pattern matched -> FAILED
5. the workflow's verdict (:meth:`~slurm_fsm.workflows.Workflow.verdict`) ->
   FAILED: eval, a ``--check_accuracy`` assertion; pytest, failed or errors in
   the summary
6. exit code unknown (and no failure in the log) -> ERROR: nobody can say it passed
   (a COMPLETED state counts as exit 0)
7. exit code non-zero -> FAILED
8. success patterns given and none matched -> FAILED
9. PASSED
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from slurm_fsm.jobstate import JobState
from slurm_fsm.logs import DEFAULT_HANG_MARKER
from slurm_fsm.report import EXIT_CODES, Report, Status
from slurm_fsm.runfacts import (
    Failure,
    Mode,
    OutputSnapshot,
    PartEnd,
    Phase,
    RunFacts,
    StepEnd,
)
from slurm_fsm.spec import JobSpec, WorkflowType
from slurm_fsm.workflows import (  # the parsers live with their workflow classes
    _TRACEBACK,
    WORKFLOWS,
    _clean,
    _unlabel,
    parse_benchmark,
    parse_custom,
    parse_eval,
    parse_pytest,
    workflow,
)

__all__ = [
    "EXIT_CODES",
    "MAX_ERRORS",
    "Decision",
    "Status",
    "decide",
    "diagnose",
    "errors_from",
    "logged_step_ends",
    "normalize_slurm_state",
    "parse_benchmark",
    "parse_custom",
    "parse_eval",
    "parse_pytest",
    "report_of",
    "setup_error_lines",
    "status_of_state",
    "step_verdict",
    "without_relay_prefix",
]


#: errors_from returns at most this many lines.
MAX_ERRORS = 20
_MAX_ERROR_CHARS = 500


# -------------------------------------------------------------------- decision
#: The one place that says which report status a final Slurm state decides by itself.
#: COMPLETED and FAILED are not here: then the exit code and the log decide.
_STATUS_OF_STATE: dict[JobState, Status] = {
    JobState.TIMEOUT: Status.TIMEOUT,
    JobState.DEADLINE: Status.TIMEOUT,
    JobState.OUT_OF_MEMORY: Status.OUT_OF_MEMORY,
    JobState.CANCELLED: Status.CANCELLED,
    JobState.PREEMPTED: Status.CANCELLED,
    JobState.REVOKED: Status.CANCELLED,
    JobState.NODE_FAIL: Status.FAILED,
    JobState.BOOT_FAIL: Status.FAILED,
}


def status_of_state(state: JobState | str | None) -> Status | None:
    """The report status a final Slurm state decides by itself (TIMEOUT and DEADLINE ->
    TIMEOUT, OUT_OF_MEMORY, CANCELLED/PREEMPTED/REVOKED -> CANCELLED, NODE_FAIL and
    BOOT_FAIL -> FAILED), or None when the exit code and the log decide (COMPLETED,
    FAILED) or the state is not final. Slurm's text is read with
    :meth:`JobState.parse <slurm_fsm.jobstate.JobState.parse>`."""
    return _STATUS_OF_STATE.get(JobState.parse(state)) if state is not None else None


def normalize_slurm_state(state: str | None) -> JobState | None:
    """``CANCELLED by 0`` / ``CANCELLED+`` -> ``CANCELLED``; blank -> None; text that is
    no Slurm state -> ``UNKNOWN`` (:meth:`JobState.parse
    <slurm_fsm.jobstate.JobState.parse>`, which compares equal to the text)."""
    if state is None or not state.strip():
        return None
    return JobState.parse(state)


@attrs.frozen
class Decision:
    """A status and the one-line reason for it (the report's summary starts with it)."""

    status: Status
    reason: str


#: slurmstepd's word that it killed a step for memory: the kernel's OOM killer in the
#: step's cgroup (``Detected 1 oom_kill event in StepId=12.0``; older ``oom-kill
#: event(s) in step 12.0``), or ``JobAcctGatherParams=OverMemoryKill`` (``StepId=12.0
#: exceeded memory limit (433324032 > 104857600), being killed``; accounting then says
#: ``CANCELLED by 0``, Slurm 22.05).
_STEP_MEMORY_KILL = re.compile(
    r"oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )(\d+\.\d+)"
    r"|(?:StepId=|Step )(\d+\.\d+) exceeded memory limit", re.I)


def _memory_killed(lines: Sequence[str]) -> set[str]:
    """The ``ALLOC.N`` of the steps slurmstepd says it killed for memory in ``lines``."""
    found: set[str] = set()
    for line in lines:
        for m in _STEP_MEMORY_KILL.finditer(line):
            found.add(m.group(1) or m.group(2))
    return found


#: Who accounting says cancelled a step slurmstepd killed past its memory limit
#: (``OverMemoryKill``: slurmstepd, as root, asks the controller to cancel it).
_SLURMSTEPD_UID = "0"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


def _memory_kill_evidence(end: StepEnd, logged: bool) -> str:
    """What says ``end``'s step was killed for its memory: the log's line, and
    accounting (its state, and its ``MaxRSS`` above its limit when it is)."""
    acct = f"sacct: {end.state}" + (f" by {end.cancelled_by}" if end.cancelled_by else "")
    if end.over_memory_limit:
        assert end.max_rss is not None and end.memory_limit is not None
        acct += f", MaxRSS {_mib(end.max_rss)} above its {_mib(end.memory_limit)}"
    return f"the log says so; {acct}" if logged else acct


def step_verdict(step_ends: Sequence[StepEnd], exit_code: int | None,
                 lines: Sequence[str] = ()) -> Decision | None:
    """What accounting's word on a persistent run's own steps decides (rule 3), or None
    when the exit code and the log decide.

    A step that ran out of memory (``OUT_OF_MEMORY``; or ``CANCELLED`` while the job's
    output ``lines`` have slurmstepd's memory kill of that very step, as
    ``OverMemoryKill`` does it; or ``CANCELLED by 0`` with a ``MaxRSS`` above the memory
    it was given per node, :attr:`StepEnd.over_memory_limit`: the same kill told by
    accounting alone: slurmstepd's line reaches the log only as srun relays it, which
    Slurm does not promise before srun ends) -> OUT_OF_MEMORY. A step that
    someone cancelled (``CANCELLED by <uid>``: ``scancel ALLOC.N`` from outside; the
    steps the run cancelled itself are never among ``step_ends``) -> CANCELLED, when
    the script died of a signal (exit code above 128: its ``srun`` was killed with the
    step); a script that went on and exited by itself is judged by that exit. A
    ``CANCELLED`` without a uid is a task that died of a signal (``kill -9``): the exit
    code decides."""
    oom = [e for e in step_ends if e.state is JobState.OUT_OF_MEMORY]
    if oom:
        return Decision(Status.OUT_OF_MEMORY, "step " + ", ".join(e.step for e in oom)
                        + " ran out of memory (sacct: OUT_OF_MEMORY)")
    killed = _memory_killed(lines) if step_ends else set()
    over = [e for e in step_ends if e.state is JobState.CANCELLED and (
        e.step in killed or (e.cancelled_by == _SLURMSTEPD_UID and e.over_memory_limit))]
    if over:
        said = [_memory_kill_evidence(e, e.step in killed) for e in over]
        if len(over) > 1:
            said = [f"{e.step}: {why}" for e, why in zip(over, said, strict=True)]
        return Decision(Status.OUT_OF_MEMORY, "step " + ", ".join(e.step for e in over)
                        + " was killed for exceeding its memory limit ("
                        + "; ".join(said) + ")")
    if exit_code is None or exit_code <= 128:
        return None
    return _ended_by_slurm(step_ends)


def _told_by(end: StepEnd) -> str:
    """What said how ``end``'s step ended: accounting, or slurmstepd's line."""
    if end.logged:
        return f"accounting had no row for it; slurmstepd's line in the log: {end.logged}"
    return f"sacct: {end.state}" + (f" by {end.cancelled_by}" if end.cancelled_by else "")


def _ended_by_slurm(step_ends: Sequence[StepEnd]) -> Decision | None:
    """A script that died of a signal with a step Slurm ended: by the step's own time
    limit -> TIMEOUT; cancelled by someone (``CANCELLED by <uid>``, or slurmstepd's
    ``*** STEP ... CANCELLED AT ... ***`` when accounting had no row) -> CANCELLED."""
    timed = [e for e in step_ends if e.state in (JobState.TIMEOUT, JobState.DEADLINE)]
    if timed:
        return Decision(Status.TIMEOUT, "; ".join(
            f"step {e.step} reached its own time limit ({_told_by(e)})" for e in timed))
    cancelled = [e for e in step_ends
                 if e.state is JobState.CANCELLED and (e.cancelled_by or e.logged)]
    if cancelled:
        return Decision(Status.CANCELLED, "; ".join(
            f"step {e.step} was cancelled" + (f" by uid {e.cancelled_by}" if e.cancelled_by
                                              else "") + f" ({_told_by(e)})"
            for e in cancelled))
    return None


#: slurmstepd's line when Slurm ends a step: ``*** STEP 5.1 ON n1 CANCELLED AT <time>
#: ***`` (``scancel 5.1``; 26.05: ``... DUE to SIGNAL Killed ***``), ``... DUE TO TIME
#: LIMIT ***`` (the step's own ``--time``), as srun relays it (:func:`without_relay_prefix`)
_STEP_END_LINE = re.compile(
    r"^\*\*\* STEP (\d+\.\d+) ON \S+ CANCELLED AT \S+(?: DUE [Tt][Oo] (.+?))? \*\*\*$")


def logged_step_ends(lines: Sequence[str], steps: Sequence[str]) -> list[StepEnd]:
    """How slurmstepd's own lines in ``lines`` say ``steps`` (``ALLOC.N``) ended, for
    the steps accounting has no row for yet (issue 44): ``DUE TO TIME LIMIT`` ->
    TIMEOUT, any other -> CANCELLED; a step without such a line is left out."""
    wanted = set(steps)
    found: dict[str, StepEnd] = {}
    for raw in lines:
        line = without_relay_prefix(_unlabel(_clean(raw)))
        m = _STEP_END_LINE.match(line)
        if m is None or m.group(1) not in wanted or m.group(1) in found:
            continue
        state = JobState.TIMEOUT if m.group(2) == "TIME LIMIT" else JobState.CANCELLED
        found[m.group(1)] = StepEnd(step=m.group(1), state=state, logged=m.group(0))
    return [found[s] for s in steps if s in found]


def decide(
    *,
    exit_code: int | None,
    slurm_state: str | None,
    hang: bool,
    timed_out: bool,
    success_hits: Mapping[str, int],
    failure_hits: Mapping[str, int],
    success_patterns: Sequence[str],
    workflow_type: WorkflowType,
    metrics: Mapping[str, Any],
    hang_line: str | None = None,
    timeout_s: float | None = None,
    step_ends: Sequence[StepEnd] = (),
    step_lines: Sequence[str] = (),
) -> Decision:
    """The status of a finished run, and why (order in the module docstring).

    The reason names what decided: the hang line (``hang_line``, when known), the
    monitor timeout (``timeout_s``), Slurm's state, the failure patterns matched, the
    workflow's verdict (:meth:`Workflow.verdict
    <slurm_fsm.workflows.Workflow.verdict>`), the exit code, or the missing success
    patterns. ``step_ends``: how the run's own steps ended (a persistent run's, a
    one-shot job's numbered ones), ``step_lines``: the output slurmstepd's lines about
    them are in (:func:`step_verdict`); they decide only where Slurm's state does not."""
    if hang:
        return Decision(Status.HANG_DETECTED, "the log reported a hang" + (
            f": {hang_line.strip()[:200]!r}" if hang_line else ""))
    if timed_out:
        limit = f" ({timeout_s:g} s)" if timeout_s is not None else ""
        return Decision(Status.TIMEOUT,
                        f"monitor_timeout_seconds{limit} passed before the job ended")
    state = JobState.parse(slurm_state) if slurm_state else None
    by_state = status_of_state(state)
    if by_state is not None and state is not None:
        return Decision(by_state, f"the job {state.ended_how} (Slurm state {state})")
    # Slurm's state leaves it to the exit code (none: a persistent run's allocation
    # lives on; COMPLETED or FAILED: a one-shot job's script exited by itself): the
    # run's own steps may say more (a step past its own --time in either mode)
    by_steps = step_verdict(step_ends, exit_code, step_lines)
    if by_steps is not None:
        return by_steps
    if exit_code is None and state is JobState.COMPLETED:
        exit_code = 0
    hits = [f"{p!r} ({n} lines)" for p, n in failure_hits.items() if n > 0]
    if hits:
        return Decision(Status.FAILED, f"failure pattern matched: {', '.join(hits)}")
    verdict = workflow(workflow_type).verdict(metrics)
    if verdict:
        return Decision(Status.FAILED, verdict)
    if exit_code is None:  # nobody can say how it ended, and the log shows no failure
        return Decision(Status.ERROR, "the exit code is unknown (Slurm could not say how "
                        "the job ended) and the log shows no failure")
    if exit_code != 0:
        return Decision(Status.FAILED, f"exit code {exit_code}")
    if success_patterns and not any(success_hits.get(p, 0) > 0 for p in success_patterns):
        return Decision(Status.FAILED, "no success pattern found in the log: "
                        + ", ".join(repr(p) for p in success_patterns))
    return Decision(Status.PASSED, "exit code 0" + (
        ", success pattern found" if success_patterns else ""))


# ------------------------------------------------------------------- diagnosis
_UNABLE_TO_CREATE_STEP = re.compile(
    r"srun: error: (?:Unable to create step.*(?:expired|already completing|completed)"
    r"|Slurm job \d+ has expired)", re.I)
#: a node refused a step's launch: the credential slurmctld signed for it had expired
_CRED_EXPIRED = re.compile(r"(?:Task launch for \S+ failed on node (?P<node>[^\s:]+): )?"
                           r"Job credential expired", re.I)
_TOO_MANY_TASKS = re.compile(r"(?:for job (?P<job>\d+)\S*: )?More processors requested than "
                             r"permitted", re.I)
_CONTAINER_MISSING = re.compile(
    r"srun: error: .*does not exist|container with name .* does not exist", re.I
)
#: pyxis / enroot / pip lines worth showing in a report's ``errors``
_SETUP_LINE = re.compile(r"pyxis:|\[ERROR\]|curl: \(\d+\)|Read-only file system|^ERROR: ")
_SETUP_NOISE = re.compile(r"printing enroot log file|child \d+ failed with error code|\[INFO\]"
                          r"|not started successfully by another task|^\s*pyxis:\s*$")
#: Who relayed a line slurmstepd logged on a node, as srun prints it: Slurm 22.05 and
#: 24.11 name slurmstepd and the node (``slurmstepd-n1:``; ``slurmstepd:`` without a
#: node name), 26.05 the time it was logged (``[2026-12-06T18:00:24.403]``, in any
#: ``LogTimeFormat``), slurmd's own log the time and the step
#: (``[2025-11-06T20:36:19.163] [19.0]``). Then the level: ``error:`` (lower ones have
#: none). The one place that knows these forms (issue 44).
_RELAY_SOURCE = (r"(?:slurmstepd(?:-[\w.-]+)?:"
                 r"|\[[^\]]*\d\d:\d\d:\d\d[^\]]*\](?: \[[\w.+]+\])?)")
_RELAY_PREFIX = re.compile(rf"^{_RELAY_SOURCE} (?:error: )?")
_RELAYED_ERROR = re.compile(rf"^{_RELAY_SOURCE} error:")


def without_relay_prefix(line: str) -> str:
    """``line`` without the prefix srun relays a slurmstepd line with
    (``slurmstepd-n1: error:``, ``[2026-12-06T18:00:24.403] error:``, ...): the line as
    the plugin or Slurm wrote it, the same whichever node and Slurm version relayed it."""
    return _RELAY_PREFIX.sub("", line, count=1)


#: enroot's log lines (pyxis prints them indented) that say why: errors, and the
#: reasons of issue 41's pyxis cases (a directory it cannot create, a full disk, a
#: command enroot-switchroot cannot run)
_ENROOT_ERROR = re.compile(r"\[ERROR\]|curl: \(\d+\)|error|Permission denied"
                           r"|No space left on device|failed to execute|FATAL", re.I)
_IMPORT_ROW = "pyxis: failed to import docker image"
#: (pattern, symptom, cause, advice) of container setup failures, as pyxis 0.24 words them
_CONTAINER_ROWS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"failed to create container filesystem for image|Invalid image format"),
     "pyxis: failed to create container filesystem for image",
     "the image file is missing or not a squashfs image on the nodes",
     "check docker_image: a .sqsh file every node can read, given as /path or ./path"),
    (re.compile(r"failed to import docker image|curl: \(\d+\)"),
     _IMPORT_ROW,
     "docker_image does not start with / or ., so pyxis took it for a registry image, "
     "and the registry could not be reached",
     "give an image file as an absolute path, or check the registry name, the nodes' "
     "network and enroot's credentials"),
    (re.compile(r"--container-mounts: source path does not exist"),
     "pyxis: --container-mounts: source path does not exist",
     "the host side of a container_mounts entry is missing on the nodes",
     "create it on every node or fix container_mounts; the allocation is kept and the "
     "next run imports again"),
    (re.compile(r'"create" flag was passed to --container-name but the container already'),
     "pyxis: the container already exists",
     "an old container of this name was still on a node after the removal",
     "remove it on the nodes (srun --jobid=ID -N n --ntasks-per-node=1 "
     "enroot remove -f pyxis_<name>) and re-run"),
    (re.compile(r"^pip install .* failed with exit code", re.M),
     "pip install failed in the container",
     "an install of step 0E/0F failed (see errors)",
     "fix the requirements; the state file keeps installed=false, so the next run "
     "installs again in the same allocation"),
    (re.compile(r"Read-only file system"),
     "Read-only file system in the container",
     "a step wrote to the container without --container-writable",
     "write to a mount, or run that step with --container-writable"),
)


def setup_error_lines(text: str) -> list[str]:
    """The pyxis, enroot and pip lines of a failed setup step, once each (the node
    relay prefix dropped, :func:`without_relay_prefix`: two nodes' identical lines are
    one, whichever Slurm version relayed them).
    Of enroot's log, which pyxis prints indented, only the error lines are kept."""
    out: list[str] = []
    for raw in text.splitlines():
        line = without_relay_prefix(raw.strip())
        if not _SETUP_LINE.search(line) or _SETUP_NOISE.search(line) or line in out:
            continue
        if line.startswith("pyxis:  ") and not _ENROOT_ERROR.search(line):
            continue  # enroot's progress (unsquashfs counts...)
        out.append(line)
    return out


#: Why an import failed, when enroot's log says so: then the image path and the
#: registry (the import row) are not to blame. ``mkdir: cannot create directory
#: '/run/enroot': Permission denied`` (pyxis issue 12: the node's enroot.conf),
#: ``Write failed because No space left on device`` (pyxis issue 53: the node's disk).
#: (coreutils quotes the path with ' or, in a UTF-8 locale, with \u2018 \u2019)
_QUOTE = "'`\"\u2018\u2019"
_ENROOT_NO_DIR = re.compile(
    rf"pyxis:.*cannot create directory [{_QUOTE}]?(?P<path>[^{_QUOTE}:]+)[{_QUOTE}]?: "
    "Permission denied")
_ENROOT_NO_SPACE = re.compile(r"pyxis:.*No space left on device")
#: enroot reached the registry before it failed (``[INFO] Authentication succeeded``)
_REGISTRY_ANSWERED = re.compile(r"pyxis:.*\[INFO\] (?:Authentication succeeded"
                                r"|Fetching image manifest|Found all layers)")
#: the container was there but did not start (pyxis issue 61)
_SWITCHROOT = re.compile(r"pyxis:\s*(?P<what>enroot-switchroot: failed to execute: .*?)\s*$",
                         re.M)
_NOT_STARTED = re.compile(r"pyxis: (?:couldn't start container|container start failed)")


def _import_cause(text: str) -> dict[str, str] | None:
    """The row of a cause enroot's log names for a failed import, or None."""
    no_dir = _ENROOT_NO_DIR.search(text)
    if no_dir:
        path = no_dir.group("path").strip()
        return _row(f"enroot: cannot create directory {path} (Permission denied)",
                    f"the node's configuration: enroot, run as the job's user, cannot create "
                    f"{path} on the node (not the image path or its name)",
                    "ask the cluster's administrators: the directories of enroot.conf "
                    "(ENROOT_RUNTIME_PATH, ENROOT_DATA_PATH, ENROOT_CACHE_PATH) must be "
                    "writable by users on every node; running again does not help")
    if _ENROOT_NO_SPACE.search(text):
        answered = ("; the registry answered (authentication succeeded), so the image's name "
                    "and the credentials are right" if _REGISTRY_ANSWERED.search(text) else "")
        return _row("enroot: No space left on device while importing the image",
                    "disk full on the node: the file system enroot writes the image to "
                    "(ENROOT_CACHE_PATH / ENROOT_DATA_PATH, often under /tmp) is full" + answered,
                    "free space there on the node (or ask the administrators), or import the "
                    "image once to a .sqsh file on a shared file system (`enroot import -o "
                    "/shared/x.sqsh docker://...`) and give docker_image as its path")
    return None


def _container_rows(text: str) -> list[dict[str, str]]:
    """The rows of a container setup failure (``text``: the output's lines): pyxis 0.24's
    messages (:data:`_CONTAINER_ROWS`), the import row replaced by its cause when enroot's
    log names one (:func:`_import_cause`), and a container that did not start."""
    rows: list[dict[str, str]] = []
    cause = _import_cause(text)
    for pattern, symptom, why, advice in _CONTAINER_ROWS:
        if pattern.search(text):
            rows.append(cause if symptom == _IMPORT_ROW and cause else
                        _row(symptom, why, advice))
    if cause is not None and cause not in rows:
        rows.append(cause)
    switchroot = _SWITCHROOT.search(text)
    if switchroot:
        rows.append(_row(
            f"pyxis: couldn't start container ({switchroot.group('what')})",
            "the image was imported, but enroot-switchroot could not run the command in "
            "the container: the program is not in the image, or the image's entrypoint is "
            "unusual",
            "use an image that has the program, or start the container without its "
            "entrypoint (pyxis's --no-container-entrypoint)"))
    elif _NOT_STARTED.search(text) and not rows:
        rows.append(_row("pyxis: couldn't start container",
                         "the container did not start on a node",
                         "read the pyxis and enroot lines in errors; check docker_image and "
                         "container_mounts"))
    return rows


#: GPU memory: PyTorch's ``CUDA out of memory``, TensorRT-LLM's C++ ``[TensorRT-LLM][ERROR]
#: CUDA runtime error in ::cudaMallocAsync(...): out of memory`` and ``CUDA runtime error in
#: error: out of memory``, the driver's CUDA_ERROR_OUT_OF_MEMORY.
_CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY"
                       r"|CUDA (?:runtime )?error\b.*\bout of memory"
                       r"|cudaMalloc\w*\b.*\bout of memory"
                       # NCCL's own allocations (include/alloc.h, enqueue.cc)
                       r"|NCCL WARN Cuda failure 'out of memory'|NCCL WARN Failed to CUDA c?alloc",
                       re.I)
#: Host memory: Slurm's ``Detected 1 oom_kill event``, ``OOM Killed``, srun's ``task 1:
#: Out Of Memory`` (Slurm's wording, capitalised; a lower-case "out of memory" is not it).
_HOST_OOM = re.compile(r"(?i:oom[-_]kill)|Out Of Memory|(?i:OOM Killed)")
#: NCCL's ``WARN`` lines of a failure (not every WARN is one): a CUDA call that failed
#: inside NCCL (``Cuda failure 'out of memory'``, ``Failed to CUDA calloc 6291456
#: bytes``), a peer's socket gone (``socketProgress: Connection closed by remote peer``,
#: ``Socket recv failed``), a timeout. Both errors_from and the NCCL row read them.
_NCCL_FAILURE_WARN = re.compile(
    r"NCCL WARN .*(?:Cuda failure|Failed to CUDA|Connection closed by remote peer"
    r"|Connection (?:refused|reset)|Socket (?:recv|send) failed|unhandled|timeout|timed out"
    r"|Call to \w+ failed)", re.I)
_NCCL = re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
                   rf"{_NCCL_FAILURE_WARN.pattern}|Watchdog caught collective", re.I)
#: The GPU driver's word that a GPU is gone: ``NVRM: Xid (PCI:0000:02:00): 79, GPU has
#: fallen off the bus.`` (dmesg; a health check prints it, ``host: `` in front when a
#: tool such as pdsh names the node)
_XID = re.compile(r"^(?:(?P<node>[A-Za-z][\w.-]*):\s+)?(?:\[[^\]]*\]\s*)*"
                  r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)\b")
#: torch elastic (torchrun) on a worker that died: ``... failed (exitcode: -9)
#: local_rank: 5 (pid: 2630) of binary: ...`` (a negative exit code: the signal)
_ELASTIC_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
#: States of a job Slurm holds instead of ending it: no timeout makes it run.
_HELD = frozenset({JobState.SPECIAL_EXIT, JobState.REQUEUE_HOLD, JobState.RESV_DEL_HOLD})
#: slurmstepd's line when Slurm pre-empts a job (or a step of it)
_PREEMPTED = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION")
#: slurmstepd's line when Slurm requeues a running job (``scontrol requeue``/``requeuehold``)
_REQUEUED = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT \S+ DUE TO JOB REQUEUE")


def _row(symptom: str, cause: str, advice: str) -> dict[str, str]:
    return {"symptom": symptom, "cause": cause, "advice": advice}


def _xid_row(m: re.Match[str], job_id: str | None) -> dict[str, str]:
    node = m.group("node")
    where = f"on node {node}" if node else "on a node of this job"
    find = ("" if node else f"find the node (`sacct -j {job_id or '<job id>'} -X -o NodeList`"
            ", or the node whose log has this line), then ")
    name = node or "<node>"
    if m.group("xid") == "79":
        return _row("NVRM: Xid 79 (GPU has fallen off the bus)",
                    f"a GPU was lost {where} ({m.group('pci')}): the driver no longer "
                    "reaches it; no job can use it until the node is repaired",
                    f"{find}drain it (`scontrol update NodeName={name} State=DRAIN "
                    "Reason=\"Xid 79\"`, an administrator's step), release an allocation "
                    "that holds it, and re-run: Slurm then gives other nodes")
    return _row(f"NVRM: Xid {m.group('xid')}",
                f"the GPU driver reported an error {where} ({m.group('pci')})",
                f"{find}look the Xid up in NVIDIA's Xid table; tell the node's "
                "administrators")


def _gpu_rows(cleaned: Sequence[str], job_id: str | None) -> list[dict[str, str]]:
    """The rows of the driver's Xid lines (the first of each Xid) and of a torch elastic
    worker killed by a signal."""
    rows: list[dict[str, str]] = []
    xids: set[str] = set()
    for line in cleaned:
        body = _unlabel(line)
        xid = _XID.search(body) if "NVRM: Xid" in body else None
        if xid and xid.group("xid") not in xids:
            xids.add(xid.group("xid"))
            rows.append(_xid_row(xid, job_id))
        elastic = _ELASTIC_FAILED.search(body) if "exitcode" in body else None
        if elastic and int(elastic.group("code")) < 0 and len(rows) < 10:
            sig = -int(elastic.group("code"))
            try:
                name = f" ({signal.Signals(sig).name})"
            except ValueError:
                name = ""
            row = _row(f"torch elastic: local_rank {elastic.group('rank')} failed "
                       f"(exitcode {elastic.group('code')})",
                       f"a worker process was killed by signal {sig}{name}"
                       + (": most often the kernel's OOM killer (host memory), or a cancel"
                          if sig == 9 else ""),
                       "read the node's memory use (sacct MaxRSS, dmesg) and the worker's "
                       "last lines")
            if row not in rows:
                rows.append(row)
    return rows


def _credential_row(case: _Case) -> list[dict[str, str]]:
    """srun's ``Task launch ... failed on node N: Job credential expired``: node N
    refused the step, its credential (signed by slurmctld at the step's creation) too
    old by N's clock (fractal-server#2835)."""
    nodes = sorted({m.group("node") for line in case.cleaned
                    if (m := _CRED_EXPIRED.search(line)) and m.group("node")})
    on = f" on node {', '.join(nodes)}" if nodes else ""
    where = f"node {', '.join(nodes)}" if nodes else "the node that refused it"
    return [_row(f"srun: error: Task launch failed{on}: Job credential expired",
                 "the node refused the step: by its clock, the credential slurmctld signed "
                 "for the step had expired (the node's clock is off from the controller's, "
                 "or its slurmd took the launch too late: a busy or stuck node)",
                 f"re-run; if it repeats, check the clock (chrony/NTP) and slurmd of {where} "
                 "against the controller's, and tell the admins")]


def _too_many_tasks(lines: Sequence[str], allocation_id: str | None) -> list[dict[str, str]]:
    """srun's ``More processors requested than permitted``: the persistent allocation's
    size, unless the step was one of a job the script submitted itself (another job id
    than the allocation's: its own ``salloc``/``sbatch``), which got the run's placement
    (issue 44.5)."""
    found = [m for line in lines if (m := _TOO_MANY_TASKS.search(line))]
    if not found:
        return []
    symptom = "srun: error: ... More processors requested than permitted"
    others = sorted({m.group("job") for m in found if m.group("job")} - {allocation_id})
    if allocation_id and others:
        return [_row(f"srun: error: ... for job {', '.join(others)} (not the allocation "
                     f"{allocation_id}): More processors requested than permitted",
                     "a job the script submitted itself (salloc, sbatch) asks more than "
                     "its own allocation holds",
                     "run salloc/sbatch by name, not by absolute path (slurm_fsm's own "
                     "drop the run's SRUN_CPUS_PER_TASK, SLURM_GPUS_PER_NODE...), or "
                     "give that job the CPUs its srun asks (-c)")]
    return [_row(symptom, "the job asks for more tasks than the allocation holds",
                 "set slurm_params.ntasks_per_node (it is passed to salloc), then "
                 "release the allocation and re-run")]


@attrs.frozen
class _Case:
    """What the diagnosis rules read: one failed run's facts (:func:`diagnose`)."""

    status: Status
    state: JobState | str | None
    exit_code: int | None
    log_empty: bool
    cleaned: list[str]  # the log lines, labels and relay prefixes taken off
    job_id: str | None
    allocation_id: str | None
    failure_hits: Mapping[str, int]
    success_missing: bool
    metrics: Mapping[str, Any]
    workflow_type: WorkflowType | None
    timed_out_steps: Sequence[str]
    container: bool
    requeued: bool  # slurmstepd's "... DUE TO JOB REQUEUE" in the (raw) log

    @property
    def held(self) -> bool:
        return self.state in _HELD

    @property
    def job(self) -> str:
        return self.job_id or "<job id>"

    @property
    def release(self) -> str:
        return (f"`scontrol release {self.job}` to run it again, or `scancel` it; raising a "
                "timeout does not help")

    @property
    def timed_out(self) -> bool:
        """TIMEOUT from a time limit (not a held or requeued job's)."""
        return self.status is Status.TIMEOUT and not (self.held or self.requeued)

    def has(self, pattern: re.Pattern[str]) -> bool:
        return any(pattern.search(line) for line in self.cleaned)


_Rows = list[dict[str, str]]


@attrs.frozen
class _Rule:
    """One row of the diagnosis: when it applies, and the row(s) it adds."""

    when: Callable[[_Case], bool]
    rows: Callable[[_Case], _Rows]


def _fixed(symptom: str, cause: str, advice: str) -> Callable[[_Case], _Rows]:
    return lambda _c: [_row(symptom, cause, advice)]


def _always(_c: _Case) -> bool:
    return True


def _cancelled_row(c: _Case) -> _Rows:
    symptom = (c.status.value if c.state in (None, JobState.CANCELLED)
               else f"{c.status.value} ({c.state})")
    return [_row(symptom, "pre-empted or cancelled",
                 f"sacct -j {c.job} --format=JobID,State,Reason")]


def _workflow_rows(c: _Case) -> _Rows:
    workflows = (list(WORKFLOWS.values()) if c.workflow_type is None
                 else [workflow(c.workflow_type)])
    return [row for wf in workflows for row in wf.diagnosis(c.metrics)]


#: procedure.md's failure diagnosis table and the rows this project added, in the order
#: a report lists them: each a predicate and the row it adds (docs/report.md)
_RULES: tuple[_Rule, ...] = (
    _Rule(lambda c: c.held, lambda c: [_row(
        f"job held in {c.state}",
        "Slurm requeued the job and holds it (SPECIAL_EXIT: its exit code is one of "
        "RequeueExitHold, or `scontrol requeuehold State=SpecialExit`); a held job does not "
        "run again by itself", c.release)]),
    _Rule(lambda c: c.requeued and not c.held, lambda c: [_row(
        "job requeued by Slurm (... DUE TO JOB REQUEUE)",
        "Slurm requeued the running job (`scontrol requeue` or `requeuehold`): it went back "
        "to waiting, held when requeued with a hold (SPECIAL_EXIT, REQUEUE_HOLD), and did "
        "not run again before the monitor gave up",
        f"`squeue -j {c.job} -o %T,%r` says whether it is held; " + c.release)]),
    _Rule(lambda c: c.timed_out and status_of_state(c.state) is Status.TIMEOUT,
          lambda c: [_row(f"TIMEOUT (Slurm state {c.state})", "over the time limit",
                          "raise the time limit (slurm_params.time_limit / #SBATCH --time; "
                          "persistent mode: alloc_time_limit)")]),
    _Rule(lambda c: c.timed_out and status_of_state(c.state) is not Status.TIMEOUT
          and bool(c.timed_out_steps), lambda c: [_row(
              f"TIMEOUT (step {', '.join(c.timed_out_steps)}: its own time limit)",
              "a step ran past the time limit its srun gave it (srun --time / -t)",
              "raise that srun's --time, or drop it (the step then has the job's or the "
              "allocation's time)")]),
    _Rule(lambda c: c.timed_out and status_of_state(c.state) is not Status.TIMEOUT
          and not c.timed_out_steps,
          _fixed("TIMEOUT (monitor_timeout_seconds)", "over the time limit",
                 "raise monitor_timeout_seconds; the job was killed")),
    _Rule(lambda c: c.status is Status.OUT_OF_MEMORY,
          _fixed(Status.OUT_OF_MEMORY.value, "OOM on a node", "lower the batch size")),
    _Rule(lambda c: c.status is Status.FAILED and c.exit_code not in (None, 0),
          lambda c: [_row(f"exit {c.exit_code} and FAILED",
                          "the job's script (or a step of it) exited non-zero",
                          "read the log tail (one-shot mode: the .err file)")]),
    _Rule(lambda c: c.status is Status.CANCELLED, _cancelled_row),
    _Rule(lambda c: c.state in (JobState.NODE_FAIL, JobState.BOOT_FAIL),
          lambda c: [_row(str(c.state), "a node of the job failed",
                          "re-run; `sinfo -R` shows why the node is down")]),
    _Rule(lambda c: c.log_empty and c.container,
          _fixed("empty output log", "container did not start",
                 "check .err / .salloc.log for mount or image errors")),
    _Rule(lambda c: c.log_empty and not c.container,
          _fixed("empty output log",
                 "the script wrote nothing to the log read here: it writes its output "
                 "elsewhere (its own --output, a redirection), or it did not start",
                 "check .err and the files the script writes; the spec's "
                 "log_file_pattern names the log read")),
    _Rule(lambda c: c.status is Status.HANG_DETECTED,
          _fixed("HANG_DETECTED", "deadlock, NCCL timeout",
                 "job cancelled (persistent mode: only its step); read the last 200 log "
                 "lines")),
    _Rule(lambda c: c.status is Status.BUILD_FAILED,
          _fixed("BUILD_FAILED", "the build did not compile",
                 "read the last 100 lines of the build log")),
    _Rule(lambda c: c.has(_PREEMPTED),
          _fixed("*** JOB ... CANCELLED ... DUE TO PREEMPTION ***",
                 "pre-empted: Slurm stopped the job for a job of higher priority (a "
                 "partition or QOS with PreemptMode)",
                 "resubmit, or let Slurm requeue it (sbatch --requeue); a partition or QOS "
                 "that is not preemptible avoids it")),
    _Rule(lambda c: c.has(_UNABLE_TO_CREATE_STEP),
          _fixed("srun: error: Unable to create step", "allocation expired",
                 "drop the state file and re-run (re-allocates)")),
    _Rule(lambda c: c.has(_CRED_EXPIRED), _credential_row),
    _Rule(_always, lambda c: _too_many_tasks(c.cleaned, c.allocation_id)),
    _Rule(_always, lambda c: _container_rows("\n".join(c.cleaned))),
    _Rule(lambda c: c.has(_CONTAINER_MISSING),
          _fixed("srun: error: ... does not exist", "named container missing",
                 "drop the state file and re-run (re-imports)")),
    _Rule(lambda c: c.status is not Status.OUT_OF_MEMORY and c.has(_CUDA_OOM),
          _fixed("CUDA out of memory in the log", "GPU memory exhausted",
                 "lower the batch size (or max_num_tokens / KV cache fraction)")),
    _Rule(lambda c: c.status is not Status.OUT_OF_MEMORY and not c.has(_CUDA_OOM)
          and c.has(_HOST_OOM),
          _fixed("oom-kill in the log", "OOM on a node", "lower the batch size")),
    _Rule(lambda c: c.status is not Status.HANG_DETECTED and any(  # NCCL's OOM: the CUDA row
        _NCCL.search(line) and not _CUDA_OOM.search(line) for line in c.cleaned),
          _fixed("NCCL error in the log", "GPU communication failed or timed out",
                 "re-run with NCCL_DEBUG=INFO; check the nodes' network")),
    _Rule(_always, lambda c: _gpu_rows(c.cleaned, c.job_id or c.allocation_id)),
    _Rule(lambda c: any(n > 0 for n in c.failure_hits.values()), lambda c: [_row(
        "failure pattern matched: " + ", ".join(p for p, n in c.failure_hits.items() if n > 0),
        "the job printed a failure pattern", "see errors and the log tail")]),
    _Rule(lambda c: c.success_missing and c.exit_code in (None, 0),  # a non-zero exit says more
          _fixed("no success pattern in the log", "the job did not reach its end",
                 "read the log tail; check success_patterns")),
    _Rule(_always, _workflow_rows),
)
#: an ERROR that no rule explains (symptom, cause, advice)
_ERROR_ROW = ("ERROR", "a Slurm command or a setup step failed",
              "the summary names the command or step and its message")


def diagnose(
    status: Status,
    *,
    exit_code: int | None,
    slurm_state: str | None,
    log_empty: bool,
    log_lines: Sequence[str],
    job_id: str | None = None,
    failure_hits: Mapping[str, int] | None = None,
    success_missing: bool = False,
    metrics: Mapping[str, Any] | None = None,
    workflow_type: WorkflowType | None = None,
    allocation_id: str | None = None,
    timed_out_steps: Sequence[str] = (),
    container: bool = True,
) -> list[dict[str, str]]:
    """Rows of procedure.md's failure diagnosis table that apply, plus a few more.

    Each row is ``{"symptom", "cause", "advice"}``. Rows come from the status,
    the Slurm state, the exit code, whether the output log is empty, and
    known lines in ``log_lines`` (allocation expired, container missing, CUDA
    or host OOM, NCCL errors). The optional keywords add rows for a matched
    failure pattern, a missing success pattern, and the rows the workflow's
    :meth:`~slurm_fsm.workflows.Workflow.diagnosis` finds in ``metrics`` (pytest
    failures, eval threshold; every workflow's when ``workflow_type`` is None).
    A PASSED or RELEASED run gets no rows. ``allocation_id``: the allocation a
    persistent run's steps ran in (whose nodes a row about a node looks up; it tells a
    step of the allocation from one of a job the script submitted itself).
    ``timed_out_steps``: the steps (``ALLOC.N``) Slurm ended at their own time limit.
    ``container``: the spec runs a container (an empty log is not blamed on one
    otherwise).
    """
    if status in (Status.PASSED, Status.RELEASED):
        return []
    case = _Case(
        status=status, state=normalize_slurm_state(slurm_state), exit_code=exit_code,
        log_empty=log_empty, cleaned=[_clean(line) for line in log_lines], job_id=job_id,
        allocation_id=allocation_id, failure_hits=failure_hits or {},
        success_missing=success_missing, metrics=metrics or {}, workflow_type=workflow_type,
        timed_out_steps=timed_out_steps, container=container,
        requeued=any(_REQUEUED.search(line) for line in log_lines))
    rows = [row for rule in _RULES if rule.when(case) for row in rule.rows(case)]
    if not rows and status is Status.ERROR:
        rows.append(_row(*_ERROR_ROW))
    return rows


# ---------------------------------------------------------------------- errors
_ERROR_LINE: list[re.Pattern[str]] = [
    # Slurm 22.05+ names the node: ``slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED``
    re.compile(r"\b(?:srun|slurmstepd(?:-[\w.-]+)?|salloc|sbatch|pyxis|enroot): error:",
               re.I),
    _RELAYED_ERROR,  # and Slurm 26.05's ``[2026-12-06T18:00:24.403] error: ...``
    re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b(?::|$)"),
    re.compile(r"\bError:"),
    re.compile(r"\bERROR\b"),
    re.compile(r"(?:^|\s)FAILED(?:\s|$)"),
    # pytest 9: a failed subtest, ``SUBFAILED(i=1) path::test``, ``SUBFAILED[msg] path::test``
    re.compile(r"^SUBFAILED(?:\[[^\]]*\]|\([^)]*\))* \S+::"),
    re.compile(r"CUDA out of memory|Segmentation fault|core dumped|oom[-_]kill", re.I),
    # TensorRT-LLM's C++ plugins: ``Failed, NCCL error <file>:<line> '<reason>'``
    re.compile(r"\bNCCL error\b"),
    _NCCL_FAILURE_WARN,  # NCCL's WARN lines of a failure (not its INFO lines)
    # the GPU driver: ``NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.``
    re.compile(r"\bNVRM: (?:Xid\b|.*fallen off the bus)"),
    # glog's error and fatal lines (torch elastic's ``E0325 20:57:27.620000 2606 .../api.py:869]
    # failed (exitcode: -9) local_rank: 5 ...``)
    re.compile(r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] "),
    # slurmd's / slurmstepd's own log form: ``[2025-11-06T20:36:19.163] [19.0] error: pyxis:``
    re.compile(r"^(?:\[[^\]]*\]\s*)+error: "),
    re.compile(r"\bMPI_ABORT was invoked\b"),  # Open MPI's block when a rank aborted
    re.compile(r"hang detected", re.I),
    # pytest-timeout's thread method: ``+++ Timeout +++`` (and the test's frame below)
    re.compile(r"\+{5,} Timeout \+{5,}$"),
    # compilers and build tools: a.cpp:1:1: error: ..., a.cu(12): error: ..., CMake Error at
    re.compile(r"^\S+?(?::\d+(?::\d+)?|\(\d+\)):\s*(?:fatal )?error\b", re.I),
    re.compile(r"\bCMake Error\b"),
    re.compile(r"^(?:g?make|ninja)(?:\[\d+\])?: \*\*\*|^ninja: build stopped"),
]


#: A line that names a failing test: pytest's short summary (``FAILED path::test - ...``,
#: ``ERROR path::test``, pytest 9's ``SUBFAILED(i=1) path::test`` and
#: ``SUBFAILED[a message with spaces] path::test``), pytest-pretty's live line
#: (``test_x.py:7 test_two - assert ...``), the frame of the test pytest-timeout stopped.
_NAMES_TEST = (r"(?:FAILED|ERROR|SUBFAILED(?:\[[^\]]*\]|\([^)]*\))*) \S+::\S"
               r"|\S+\.py:\d+ \w+(?:\[[^\]]*\])? - ")
_PRETTY_FAILURE = re.compile(r"^\S+\.py:\d+ \w+(?:\[[^\]]*\])? - ")
_FAILING_TEST = re.compile(rf'^(?:{_NAMES_TEST}|File "[^"]+", line \d+, in test\w*$)')
_TIMEOUT_BANNER = re.compile(r"\+{5,} Timeout \+{5,}$")


def errors_from(lines: Sequence[str]) -> list[str]:
    """The error-looking lines, without repeats, at most 20: the failing tests first
    (pytest's ``FAILED path::test`` / ``ERROR path::test`` / ``SUBFAILED[...]
    path::test`` lines, so 41 failures are named before any traceback line takes the
    room), then the rest in order.

    The last line of each Python traceback (the exception), Slurm/pyxis
    ``error:`` lines (relayed ones too: ``slurmstepd-n1: error:``, 26.05's
    ``[2026-12-06T18:00:24.403] error:``), ``XxxError:``/``Exception`` lines,
    logging ``ERROR``, pytest ``FAILED`` lines, CUDA OOM, ``NCCL error`` lines,
    segfaults, the hang marker, pytest-timeout's banner and the frame of the test it
    stopped. Lines under ``srun -l`` labels (``1: FAILED ...``) are read without the
    label and kept with it; the same line from two ranks is kept once.
    """
    named: list[str] = []
    out: list[str] = []
    seen: set[str] = set()

    def add(line: str, body: str) -> None:
        text = line[:_MAX_ERROR_CHARS]
        key = body[:_MAX_ERROR_CHARS]
        if text and key not in seen:
            seen.add(key)
            (named if _FAILING_TEST.match(key) else out).append(text)

    in_traceback = False
    in_timeout = False
    for raw in lines:
        line = _clean(raw)
        body = _unlabel(line)
        indented = _unlabel(raw.rstrip("\r\n"))[:1].isspace()
        if _TRACEBACK in line:
            in_traceback = True
            continue
        if in_traceback:
            if not line or indented:
                continue
            if body.startswith(("During handling", "The above exception")):
                continue
            in_traceback = False
            add(line, body)
            continue
        if _TIMEOUT_BANNER.search(body):
            in_timeout = not in_timeout
        elif in_timeout and body.startswith('File "') and _FAILING_TEST.match(body):
            add(line, body)
        if _PRETTY_FAILURE.match(body) or any(rx.search(body) for rx in _ERROR_LINE):
            add(line, body)
        if len(named) >= MAX_ERRORS:
            break
    return (named + out)[:MAX_ERRORS]


# ------------------------------------------------------------------- the judge
def report_of(facts: RunFacts, spec: JobSpec | None) -> Report:
    """The one :class:`~slurm_fsm.report.Report` of a run, from what it saw: pure, no
    I/O. ``spec`` is None only when the CLI stopped before a spec was read.

    In front of :func:`decide`'s rules: a run stopped from outside (``interrupted``) is
    CANCELLED; a failure before the job could be judged is BUILD_FAILED (the pre-step)
    or ERROR; a release that ended in Released is RELEASED. A run whose cancel was
    asked (``cancel_asked``) and that did not pass was cancelled: its script may die of
    the cancel before its owner hears of it (exit code 143), and that is no failure."""
    if facts.cancel_asked is not None and facts.interrupted is None:
        judged = report_of(attrs.evolve(facts, cancel_asked=None), spec)
        if judged.status in (Status.PASSED, Status.RELEASED):
            return judged
        facts = attrs.evolve(facts, interrupted=f"cancelled: {facts.cancel_asked} asked")
    elif facts.cancel_asked is not None and facts.interrupted is not None:
        facts = attrs.evolve(facts, interrupted=(f"cancelled: {facts.cancel_asked} asked "
                                                 f"({facts.interrupted})"))
    if facts.interrupted is not None:
        return _report(facts, spec, Status.CANCELLED, **_interrupted(facts))
    if facts.failure is not None:
        if facts.failure.phase is Phase.PRE_STEP:
            return _report(facts, spec, Status.BUILD_FAILED, **_build_failed(facts))
        return _report(facts, spec, Status.ERROR, **_failed(facts.failure))
    if facts.released:
        return _report(facts, spec, Status.RELEASED, summary=facts.summary or "released")
    if spec is None:
        raise ValueError("a run that was judged by its output needs its spec")
    return _judged(facts, spec)


def _report(facts: RunFacts, spec: JobSpec | None, status: Status, *, summary: str,
            errors: Sequence[str] = (), diagnosis: Sequence[dict[str, str]] = (),
            log_tail: Sequence[str] | None = None) -> Report:
    """A report of a run that was not judged by its output (the one ``Report(`` of the
    package beside :func:`_judged`'s)."""
    return Report(
        status=status, task_type=spec.workflow_type.value if spec else "unknown",
        mode=facts.mode.value, job_id=facts.job_id, allocation_id=facts.allocation_id,
        log_files={"stdout": facts.stdout, "stderr": facts.stderr},
        work_dir=str(spec.work_dir) if spec else None, summary=summary,
        errors=list(errors), warnings=_warnings_of(facts, list(facts.warnings)),
        diagnosis=list(diagnosis), path=list(facts.path), notes=list(facts.notes),
        log_tail=list(facts.log_tail if log_tail is None else log_tail),
        timings=dict(facts.timings),
    )


def _interrupted(facts: RunFacts) -> dict[str, Any]:
    why = facts.interrupted or ""
    kept = (f"; allocation {facts.allocation_id} is kept"
            if facts.allocation_id and facts.mode is Mode.PERSISTENT else "")
    return {"summary": f"CANCELLED: {why}{kept}", "errors": [why],
            "diagnosis": diagnose(Status.CANCELLED, exit_code=None, slurm_state=None,
                                  log_empty=False, log_lines=facts.log_tail,
                                  job_id=facts.job_id)}


def _build_failed(facts: RunFacts) -> dict[str, Any]:
    assert facts.failure is not None
    lines = list(facts.log_tail)
    return {"summary": facts.failure.message, "errors": errors_from(lines),
            "diagnosis": diagnose(Status.BUILD_FAILED, exit_code=None, slurm_state=None,
                                  log_empty=not lines, log_lines=lines)}


def _failed(failure: Failure) -> dict[str, Any]:
    """ERROR: the failure's message (or its own errors), then the pyxis / enroot / pip
    lines of a setup step's output; the diagnosis from the message."""
    errors = list(failure.errors or (failure.message,))
    detail = setup_error_lines(failure.detail) if failure.detail else []
    errors += detail
    # the diagnosis reads the setup step's own error lines too: the message holds only
    # part of its output, and which node's lines it holds varies from run to run
    return {"summary": failure.message, "errors": errors,
            "diagnosis": diagnose(Status.ERROR, exit_code=None, slurm_state=None,
                                  log_empty=False,
                                  log_lines=[*failure.message.splitlines(), *detail])}


def _warnings_of(facts: RunFacts, warnings: list[str]) -> list[str]:
    """``warnings``, then the monitor's messages not said yet, then a note when the
    progress output stopped."""
    warnings += [w for w in facts.messages if w not in warnings]
    if facts.progress_problem is not None:
        warnings.append(f"progress output stopped ({facts.progress_problem}); the run went "
                        "on without it")
    return warnings


def _hang_line(lines: Sequence[str]) -> str | None:
    """The first line of ``lines`` with the hang marker (any case), or None."""
    marker = DEFAULT_HANG_MARKER.lower()
    return next((line for line in lines if marker in line.lower()), None)


def _judged(facts: RunFacts, spec: JobSpec) -> Report:
    """A job that ran: :func:`decide`, :func:`errors_from`, :func:`diagnose`, the
    summary and the warnings, from the output it left."""
    output = facts.output or OutputSnapshot()
    wf = workflow(spec.workflow_type)
    hits = output.pattern_hits
    success_hits = {p: hits.get(p, 0) for p in spec.success_patterns}
    failure_hits = {p: hits.get(p, 0) for p in spec.failure_patterns}
    relevant = list(output.parser_lines)
    metrics = _parsed(facts.parts, relevant, spec)
    ends = _step_ends_of(facts, output)
    decision = decide(
        exit_code=facts.exit_code, slurm_state=facts.slurm_state, hang=facts.hang,
        timed_out=facts.timed_out, success_hits=success_hits, failure_hits=failure_hits,
        success_patterns=list(spec.success_patterns), workflow_type=spec.workflow_type,
        metrics=metrics, timeout_s=float(spec.monitor_timeout_seconds),
        hang_line=(output.hang_line or _hang_line(output.tail)) if facts.hang else None,
        step_ends=ends, step_lines=[*output.head, *output.tail],
    )
    status = decision.status
    failed = status is not Status.PASSED
    head = list(output.head) if failed else []
    err_tail = list(output.err_tail)
    tail = list(output.tail[-(200 if status is Status.HANG_DETECTED else 100):])
    errors = _part_errors(facts.parts) if failed else []
    errors += errors_from(head + relevant + err_tail) if failed else []
    errors += [f"failure pattern found: {p!r} ({n} line(s))"
               for p, n in failure_hits.items() if n]
    success_missing = bool(spec.success_patterns) and not any(success_hits.values())
    if success_missing and failed:
        errors.append("no success pattern found: " + ", ".join(spec.success_patterns))
    diagnosis = diagnose(status, exit_code=facts.exit_code, slurm_state=facts.slurm_state,
                         log_empty=output.empty, log_lines=head + tail + err_tail,
                         job_id=facts.job_id, failure_hits=failure_hits,
                         success_missing=success_missing, metrics=metrics,
                         workflow_type=spec.workflow_type, allocation_id=facts.allocation_id,
                         timed_out_steps=_timed_out(ends),
                         container=spec.docker_image is not None or bool(spec.container_name))
    summary = (f"{status.value}: {facts.summary}" if facts.summary is not None
               else _summary(status, decision.reason, facts, wf.summarize(metrics)))
    metrics = _with_run_metrics(facts, {**metrics, "success_hits": success_hits,
                                        "failure_hits": failure_hits})
    warnings = _warnings_of(facts, list(facts.warnings) + wf.warnings(metrics))
    notes = _step_notes(facts, ends, status, metrics)
    elapsed = facts.elapsed_s
    return Report(
        status=status, task_type=spec.workflow_type.value, mode=facts.mode.value,
        job_id=facts.job_id, allocation_id=facts.allocation_id,
        slurm_state=str(facts.slurm_state) if facts.slurm_state is not None else None,
        exit_code=facts.exit_code,
        elapsed_s=round(elapsed, 3) if elapsed is not None else None,
        log_files={"stdout": facts.stdout, "stderr": facts.stderr},
        work_dir=str(spec.work_dir), summary=summary, errors=errors,
        warnings=warnings, metrics=metrics, diagnosis=diagnosis,
        path=list(facts.path), notes=notes, log_head=head, log_tail=tail,
        err_tail=err_tail, timings=dict(facts.timings),
    )


def _with_run_metrics(facts: RunFacts, metrics: dict[str, Any]) -> dict[str, Any]:
    """The parser's ``metrics`` with accounting's figures, the steps the run cancelled
    and the parts of an array or heterogeneous job added."""
    for key, value in facts.extra_metrics.items():
        if key == "cancelled_by":
            metrics[key] = value
        else:
            metrics.setdefault(key, value)
    if facts.cancelled_steps:
        metrics["cancelled_steps"] = list(facts.cancelled_steps)
    if facts.parts:
        metrics["parts"] = [_part_row(p) for p in facts.parts]
    return metrics


def _parsed(parts: Sequence[PartEnd], relevant: list[str], spec: JobSpec) -> dict[str, Any]:
    """The workflow parser's metrics: of the whole output, or, for an array job whose
    tasks wrote files of their own, of each task's output added up (:func:`_summed`)."""
    wf = workflow(spec.workflow_type)
    own = [p.output for p in parts if p.output is not None]
    if not own:
        return wf.parse(relevant, spec.work_dir)
    return _summed([wf.parse(list(o.parser_lines), spec.work_dir) for o in own])


def _summed(each: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several tasks' metrics as one: counts (whole numbers) added up, ``seconds`` the
    longest, anything else (a rate, an accuracy) the first task's that has it."""
    out: dict[str, Any] = {}
    for metrics in each:
        for key, value in metrics.items():
            have = out.get(key)
            if key not in out:
                out[key] = value
            elif key == "seconds" and isinstance(value, int | float) and \
                    isinstance(have, int | float):
                out[key] = max(float(have), float(value))
            elif (isinstance(value, int) and isinstance(have, int)
                  and not isinstance(value, bool) and not isinstance(have, bool)):
                out[key] = have + value
    return out


def _part_row(part: PartEnd) -> dict[str, Any]:
    """One task or component in the report's ``metrics.parts``."""
    row: dict[str, Any] = {"id": part.part, "kind": part.kind, "state": str(part.state),
                           "exit_code": part.exit_code}
    if part.log:
        row["log"] = part.log
    return row


def _part_says(part: PartEnd) -> str:
    code = "exit code unknown" if part.exit_code is None else f"exit code {part.exit_code}"
    return f"{part.part} {part.state}, {code}"


def _part_errors(parts: Sequence[PartEnd]) -> list[str]:
    """A line per task or component that did not pass, then the error lines of its
    own output (an array task's)."""
    out: list[str] = []
    for part in parts:
        if part.passed:
            continue
        log = f" (log {part.log})" if part.log else ""
        out.append(f"{part.kind} {_part_says(part)}{log}")
        if part.output is not None:
            own = [*part.output.head, *part.output.tail, *part.output.err_tail]
            out += [line for line in errors_from(own) if line not in out]
    return out[:MAX_ERRORS]


def _parts_text(parts: Sequence[PartEnd]) -> str:
    """``3 array tasks, 1 did not pass: 16_1 FAILED, exit code 1``."""
    bad = [p for p in parts if not p.passed]
    kind = parts[0].kind
    text = f"{len(parts)} {kind}s, " + (
        f"{len(bad)} did not pass: " + "; ".join(_part_says(p) for p in bad[:5])
        + ("; ..." if len(bad) > 5 else "") if bad else "all passed")
    return text


def _step_ends_of(facts: RunFacts, output: OutputSnapshot) -> tuple[StepEnd, ...]:
    """Accounting's word on a persistent run's own steps, then slurmstepd's own lines
    for the steps accounting had no row for yet (:func:`logged_step_ends`)."""
    return (*facts.step_ends, *logged_step_ends([*output.head, *output.tail],
                                                facts.steps_unaccounted))


def _timed_out(ends: Sequence[StepEnd]) -> list[str]:
    """The steps of ``ends`` Slurm ended at their own time limit."""
    return [e.step for e in ends if e.state in (JobState.TIMEOUT, JobState.DEADLINE)]


def _step_notes(facts: RunFacts, ends: Sequence[StepEnd], status: Status,
                metrics: dict[str, Any]) -> list[str]:
    """The report's notes; how a persistent run's own steps ended (``ends``: accounting's
    rows, slurmstepd's lines for those it had none for) goes into ``metrics``
    (``step_states`` when a step did more than complete or fail, and ``cancelled_by``),
    and a note says when accounting could not say it."""
    if any(e.state not in (JobState.COMPLETED, JobState.FAILED) for e in ends):
        metrics["step_states"] = {e.step: str(e.state) + (
            f" by {e.cancelled_by}" if e.cancelled_by else "") + (
            " (slurmstepd's line)" if e.logged else "") for e in ends}
        by = next((e.cancelled_by for e in ends
                   if e.state is JobState.CANCELLED and e.cancelled_by), "")
        if status is Status.CANCELLED and by:
            metrics.setdefault("cancelled_by", by)
    if facts.step_ends_unknown and status is not Status.PASSED:
        decided = ("slurmstepd's line in the log decided" if any(e.logged for e in ends)
                   else "the exit code decided")
        return [*facts.notes, f"accounting could not say how this run's steps ended "
                f"({facts.step_ends_unknown}): {decided}"]
    return list(facts.notes)


def _summary(status: Status, reason: str, facts: RunFacts, found: str) -> str:
    """``STATUS: <the deciding reason>; <where>, exit code N; <details>; <what the
    parser found>``. A PASSED summary has no reason: ``PASSED: <where>, ...``."""
    where = (f"step on allocation {facts.allocation_id}" if facts.allocation_id
             else f"job {facts.job_id}")
    lead = f"{status.value}: " if status is Status.PASSED else f"{status.value}: {reason}; "
    text = f"{lead}{where}, exit code {facts.exit_code}"
    if facts.hang_after_end:
        text += "; hang reported in the output, the job then ended by itself"
    elif facts.hang:
        if facts.cancelled_steps:
            text += f"; hang detected, cancelled {', '.join(facts.cancelled_steps)}"
        elif facts.uncancelled_steps:
            text += ("; hang detected, script stopped; step(s) could not be cancelled: "
                     + ", ".join(facts.uncancelled_steps))
        elif facts.allocation_id:
            text += "; hang detected, script stopped (no step was running)"
        else:
            text += f"; hang detected, cancelled job {facts.job_id}"
    if facts.timed_out:
        text += "; monitor timeout"
    if facts.parts:
        text += f"; {_parts_text(facts.parts)}"
    if found:
        text += f"; {found}"
    return text
