"""What a finished job's output means (procedure.md steps 4 and 5).

Pure functions over lines that :mod:`slurm_fsm.logs` read (the last 100, the
first 50 on failure): nothing here opens a log.

* per-workflow parsers - :func:`parse_pytest`, :func:`parse_eval`,
  :func:`parse_benchmark`, :func:`parse_custom`, dispatched by
  :func:`parse_output`;
* the status decision - :class:`Status`, :data:`EXIT_CODES`,
  :func:`decide` / :func:`decide_status`;
* the failure diagnosis table of procedure.md - :func:`diagnose`;
* the error-looking lines of a log - :func:`errors_from`;
* a one-line :func:`summarize` and the parse :func:`result_warnings` for
  the report.

The decision order of :func:`decide` (first match wins):

1. hang marker seen -> HANG_DETECTED
2. monitor_timeout_seconds passed -> TIMEOUT
3. Slurm's final state: TIMEOUT/DEADLINE -> TIMEOUT, OUT_OF_MEMORY ->
   OUT_OF_MEMORY, CANCELLED/PREEMPTED/REVOKED -> CANCELLED, NODE_FAIL/BOOT_FAIL
   -> FAILED
4. exit code unknown -> FAILED (a COMPLETED state counts as exit 0)
5. a failure pattern matched -> FAILED
6. eval: ``--check_accuracy`` assertion -> FAILED; pytest: failed or errors
   in the summary -> FAILED
7. exit code non-zero -> FAILED
8. success patterns given and none matched -> FAILED
9. PASSED
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import attrs

from slurm_fsm.convert import converter
from slurm_fsm.spec import WorkflowType

__all__ = [
    "EXIT_CODES",
    "MAX_ERRORS",
    "Decision",
    "Status",
    "decide",
    "decide_status",
    "diagnose",
    "errors_from",
    "normalize_slurm_state",
    "parse_benchmark",
    "parse_custom",
    "parse_eval",
    "parse_output",
    "parse_pytest",
    "result_warnings",
    "setup_error_lines",
    "summarize",
]


class Status(Enum):
    """The final status of a run. Values equal names."""

    PASSED = "PASSED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    HANG_DETECTED = "HANG_DETECTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"
    BUILD_FAILED = "BUILD_FAILED"
    RELEASED = "RELEASED"


#: The CLI's exit code per status: 0 success, 1 the job failed, 3 we failed.
EXIT_CODES: dict[Status, int] = {
    Status.PASSED: 0,
    Status.RELEASED: 0,
    Status.FAILED: 1,
    Status.TIMEOUT: 1,
    Status.HANG_DETECTED: 1,
    Status.OUT_OF_MEMORY: 1,
    Status.CANCELLED: 1,
    Status.ERROR: 3,
    Status.BUILD_FAILED: 3,
}


def _structure_status(value: object, _: Any) -> Status:
    if isinstance(value, Status):
        return value
    if isinstance(value, str):
        try:
            return Status[value.strip().upper()]
        except KeyError:
            pass
    allowed = ", ".join(s.name for s in Status)
    raise ValueError(f"must be one of {allowed}, got {value!r}")


converter.register_structure_hook(Status, _structure_status)
converter.register_unstructure_hook(Status, lambda s: s.name)

#: errors_from returns at most this many lines.
MAX_ERRORS = 20
_MAX_ERROR_CHARS = 500

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")  # srun --label prefix "0: "
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def _clean(line: str) -> str:
    """A log line without ANSI colours and surrounding whitespace/CR."""
    return _ANSI.sub("", line).strip().replace("\r", "")


def _unlabel(line: str) -> str:
    return _SRUN_LABEL.sub("", line, count=1)


# ---------------------------------------------------------------------- pytest
_PYTEST_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "errors",
    "errors": "errors",
    "skipped": "skipped",
    "xfailed": "xfailed",
    "xpassed": "xpassed",
    "warning": "warnings",
    "warnings": "warnings",
    "deselected": "deselected",
    "rerun": "rerun",
}
_PYTEST_COUNT = r"\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)"
_PYTEST_SUMMARY = re.compile(
    rf"(?P<body>{_PYTEST_COUNT}(?:, {_PYTEST_COUNT})*|no tests ran)"
    rf" in (?P<time>\d+(?:\.\d+)?s|\d+(?::\d+){{1,2}}(?:\.\d+)?)(?![\w:])"
)
_PYTEST_ITEM = re.compile(r"(\d+) (\w+)")


def _seconds(text: str) -> float:
    """``12.34s`` -> 12.34; ``1:02:03`` -> 3723.0; ``2:03`` -> 123.0."""
    if text.endswith("s"):
        return float(text[:-1])
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + float(part)
    return total


def parse_pytest(lines: Sequence[str]) -> dict[str, int | float]:
    """Counts and duration from the last pytest summary line.

    ``==== 3 passed, 1 failed, 2 skipped, 1 error in 12.34s ====`` ->
    ``{"passed": 3, "failed": 1, "skipped": 2, "errors": 1, "seconds": 12.34}``.
    Keys are among passed, failed, errors, skipped, xfailed, xpassed,
    warnings, deselected, rerun and seconds; only those printed appear.
    ``in 1:02:03`` is read as hh:mm:ss. No summary line gives ``{}``.
    """
    for raw in reversed(lines):
        m = _PYTEST_SUMMARY.search(_clean(raw))
        if not m:
            continue
        out: dict[str, int | float] = {}
        for count, word in _PYTEST_ITEM.findall(m.group("body")):
            key = _PYTEST_WORDS[word]
            out[key] = int(out.get(key, 0)) + int(count)
        out["seconds"] = _seconds(m.group("time"))
        return out
    return {}


# ------------------------------------------------------------------------ eval
_ACCURACY = re.compile(rf"(?P<pre>[^:=,;|]*?)\baccuracy\s*[:=]\s*(?P<value>{_NUMBER})", re.I)
_NAME = re.compile(r"^[A-Za-z][\w.\-/]*$")
_NOT_A_TASK = frozenset(
    {"average", "avg", "weighted", "mean", "overall", "final", "total", "eval",
     "evaluation", "the", "model", "best", "score", "-", "lm-eval", "result", "results"}
)


def _task_name(prefix: str) -> str | None:
    """The task name just before ``accuracy``: ``gsm8k`` in ``lm-eval gsm8k average``."""
    for token in reversed(prefix.split()):
        word = token.strip("'\"()")
        if word.lower() in _NOT_A_TASK:
            continue
        if word.startswith("[") or word.endswith("]") or not _NAME.match(word):
            return None
        return word
    return None


_TRACEBACK = "Traceback (most recent call last)"


def _threshold_not_met(lines: Sequence[str]) -> bool:
    """An AssertionError about accuracy: the ``--check_accuracy`` threshold failed.

    Either one line carries both ``AssertionError`` and ``accuracy``, or an
    ``AssertionError`` ends a traceback whose frames mention accuracy (such as
    ``in check_accuracy``). A bare ``--check_accuracy`` in an echoed command
    line is not a failure.
    """
    in_traceback = False
    mentions = False
    for raw in lines:
        line = _unlabel(_clean(raw))
        low = line.lower()
        if "assertionerror" in low and "accuracy" in low:
            return True
        if _TRACEBACK in line:
            in_traceback, mentions = True, False
            continue
        if not in_traceback:
            continue
        if raw[:1].isspace() or _unlabel(raw.rstrip())[:1].isspace() or not line:
            mentions = mentions or "accuracy" in low
            continue
        if line.startswith("AssertionError") and mentions:
            return True
        in_traceback = False
    return False


def parse_eval(lines: Sequence[str]) -> dict[str, Any]:
    """Accuracy figures of an eval run.

    Every ``accuracy: <number>`` (any case, ``=`` too, several per line) goes
    into ``"accuracy"`` in order; when a task name precedes it
    (``gsm8k accuracy: 71.2``, ``MMLU weighted average accuracy: 68.6``)
    it also goes into ``"accuracy_by_task"`` (the last value per task).
    ``"threshold_not_met": True`` when a ``--check_accuracy`` assertion
    failed. Lines of an AssertionError are not read as figures.
    """
    values: list[float] = []
    by_task: dict[str, float] = {}
    for raw in lines:
        line = _clean(raw)
        if "AssertionError" in line:
            continue
        for m in _ACCURACY.finditer(line):
            value = float(m.group("value"))
            values.append(value)
            name = _task_name(m.group("pre"))
            if name:
                by_task[name] = value
    out: dict[str, Any] = {"accuracy": values}
    if by_task:
        out["accuracy_by_task"] = by_task
    if _threshold_not_met(lines):
        out["threshold_not_met"] = True
    return out


# ------------------------------------------------------------------- benchmark
_FIGURE = re.compile(rf"^(?P<label>.+?)\s*:\s*(?P<value>{_NUMBER})\s*(?P<unit>[^\s\d:][^\s:]*)?$")
_LATENCY_WORD = re.compile(
    r"latency|\bTTFT\b|\bTPOT\b|\bITL\b|\bE2EL\b|time to first token|time per output token",
    re.I,
)
_THROUGHPUT_WORD = re.compile(r"throughput", re.I)
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")
_MAX_LABEL = 100
#: The completion marker a benchmark script leaves in its work dir.
DONE_MARKER_GLOB = "8_done_*.txt"


def _figure_kind(label: str) -> str | None:
    if _LATENCY_WORD.search(label):
        return "latency"
    if _THROUGHPUT_WORD.search(label):
        return "throughput"
    return None


def _figure_label(label: str) -> str:
    """Drop log prefixes (``[TRT-LLM] [I]``, ``0:``, ``... INFO:``) that do not
    carry the figure's name."""
    label = _unlabel(label).strip()
    if ": " in label:
        last = label.rsplit(": ", 1)[1].strip()
        if _figure_kind(last):
            label = last
    stripped = _LOG_PREFIX.sub("", label).strip()
    if stripped and _figure_kind(stripped):
        label = stripped
    return label


def _done_marker(work_dir: Path) -> str | None:
    try:
        found = [p for p in work_dir.glob(DONE_MARKER_GLOB) if p.is_file()]
    except OSError:
        return None
    if not found:
        return None
    newest = max(found, key=lambda p: (p.stat().st_mtime, p.name))
    return newest.name


def parse_benchmark(lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
    """Throughput and latency figures, and the ``8_done_*.txt`` marker.

    A line ``<label>: <number> [unit]`` whose label says throughput goes into
    ``"throughput"``; one that says latency (or TTFT, TPOT, ITL, E2EL) into
    ``"latency"``; keyed by the label as printed (``Request Throughput
    (req/sec)``), the last value winning. ``"done_marker"`` is the name of
    the newest ``8_done_*.txt`` in ``work_dir``, or None.
    """
    throughput: dict[str, float] = {}
    latency: dict[str, float] = {}
    for raw in lines:
        m = _FIGURE.match(_clean(raw))
        if not m:
            continue
        label = _figure_label(m.group("label"))
        kind = _figure_kind(label)
        if kind is None or len(label) > _MAX_LABEL:
            continue
        (latency if kind == "latency" else throughput)[label] = float(m.group("value"))
    return {"throughput": throughput, "latency": latency, "done_marker": _done_marker(work_dir)}


# ---------------------------------------------------------------------- custom
def parse_custom(lines: Sequence[str]) -> dict[str, Any]:
    """``{"last_lines": <the last 10 lines>}``."""
    return {"last_lines": [line.rstrip("\r\n") for line in lines[-10:]]}


def parse_output(
    workflow_type: WorkflowType, lines: Sequence[str], work_dir: Path
) -> dict[str, Any]:
    """The parser of ``workflow_type`` applied to ``lines``."""
    if workflow_type is WorkflowType.PYTEST:
        return dict(parse_pytest(lines))
    if workflow_type is WorkflowType.EVAL:
        return parse_eval(lines)
    if workflow_type is WorkflowType.BENCHMARK:
        return parse_benchmark(lines, work_dir)
    return parse_custom(lines)


# -------------------------------------------------------------------- decision
_STATE_TO_STATUS = {
    "TIMEOUT": Status.TIMEOUT,
    "DEADLINE": Status.TIMEOUT,
    "OUT_OF_MEMORY": Status.OUT_OF_MEMORY,
    "CANCELLED": Status.CANCELLED,
    "PREEMPTED": Status.CANCELLED,
    "REVOKED": Status.CANCELLED,
    "NODE_FAIL": Status.FAILED,
    "BOOT_FAIL": Status.FAILED,
}


def normalize_slurm_state(state: str | None) -> str | None:
    """``CANCELLED by 0`` / ``CANCELLED+`` -> ``CANCELLED``; blank -> None."""
    if state is None:
        return None
    words = state.strip().split()
    if not words:
        return None
    return words[0].rstrip("+").upper()


@attrs.frozen
class Decision:
    """A status and the one-line reason for it."""

    status: Status
    reason: str


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
) -> Decision:
    """The status of a finished run, and why (order in the module docstring)."""
    if hang:
        return Decision(Status.HANG_DETECTED, "the log reported a hang")
    if timed_out:
        return Decision(Status.TIMEOUT, "monitor_timeout_seconds passed before the job ended")
    state = normalize_slurm_state(slurm_state)
    if state in _STATE_TO_STATUS:
        return Decision(_STATE_TO_STATUS[state], f"Slurm state {state}")
    if exit_code is None and state == "COMPLETED":
        exit_code = 0
    if exit_code is None:
        return Decision(Status.FAILED, "the exit code is unknown")
    hits = [f"{p!r} ({n} lines)" for p, n in failure_hits.items() if n > 0]
    if hits:
        return Decision(Status.FAILED, f"failure pattern matched: {', '.join(hits)}")
    if workflow_type is WorkflowType.EVAL and metrics.get("threshold_not_met"):
        return Decision(Status.FAILED, "accuracy below the --check_accuracy threshold")
    if workflow_type is WorkflowType.PYTEST:
        failed, errors = int(metrics.get("failed", 0)), int(metrics.get("errors", 0))
        if failed or errors:
            return Decision(Status.FAILED, f"pytest: {failed} failed, {errors} errors")
    if exit_code != 0:
        return Decision(Status.FAILED, f"exit code {exit_code}")
    if success_patterns and not any(success_hits.get(p, 0) > 0 for p in success_patterns):
        return Decision(Status.FAILED, "no success pattern found in the log")
    return Decision(Status.PASSED, "exit code 0" + (
        ", success pattern found" if success_patterns else ""))


def decide_status(
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
) -> Status:
    """The status of a finished run: :func:`decide` without the reason."""
    return decide(
        exit_code=exit_code,
        slurm_state=slurm_state,
        hang=hang,
        timed_out=timed_out,
        success_hits=success_hits,
        failure_hits=failure_hits,
        success_patterns=success_patterns,
        workflow_type=workflow_type,
        metrics=metrics,
    ).status


# ------------------------------------------------------------------- diagnosis
_UNABLE_TO_CREATE_STEP = re.compile(
    r"srun: error: (?:Unable to create step.*(?:expired|already completing|completed)"
    r"|Slurm job \d+ has expired)", re.I)
_TOO_MANY_TASKS = re.compile(r"More processors requested than permitted", re.I)
_CONTAINER_MISSING = re.compile(
    r"srun: error: .*does not exist|container with name .* does not exist", re.I
)
#: pyxis / enroot / pip lines worth showing in a report's ``errors``
_SETUP_LINE = re.compile(r"pyxis:|\[ERROR\]|curl: \(\d+\)|Read-only file system|^ERROR: ")
_SETUP_NOISE = re.compile(r"printing enroot log file|child \d+ failed with error code|\[INFO\]"
                          r"|not started successfully by another task|^\s*pyxis:\s*$")
_NODE_PREFIX = re.compile(r"^slurmstepd-\S+: error: ")
_ENROOT_ERROR = re.compile(r"\[ERROR\]|curl: \(\d+\)|error", re.I)
#: (pattern, symptom, cause, advice) of container setup failures, as pyxis 0.24 words them
_CONTAINER_ROWS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"failed to create container filesystem for image|Invalid image format"),
     "pyxis: failed to create container filesystem for image",
     "the image file is missing or not a squashfs image on the nodes",
     "check docker_image: a .sqsh file every node can read, given as /path or ./path"),
    (re.compile(r"failed to import docker image|curl: \(\d+\)"),
     "pyxis: failed to import docker image",
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
    prefix ``slurmstepd-n1: error:`` dropped, so two nodes' identical lines are one).
    Of enroot's log, which pyxis prints indented, only the error lines are kept."""
    out: list[str] = []
    for raw in text.splitlines():
        line = _NODE_PREFIX.sub("", raw.strip())
        if not _SETUP_LINE.search(line) or _SETUP_NOISE.search(line) or line in out:
            continue
        if line.startswith("pyxis:  ") and not _ENROOT_ERROR.search(line):
            continue  # enroot's progress (unsquashfs counts...)
        out.append(line)
    return out


_CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY", re.I)
_HOST_OOM = re.compile(r"oom[-_]kill|Out Of Memory", re.I)
_NCCL = re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|"
                   r"NCCL WARN .*(?:timeout|timed out)|Watchdog caught collective", re.I)


def _row(symptom: str, cause: str, advice: str) -> dict[str, str]:
    return {"symptom": symptom, "cause": cause, "advice": advice}


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
) -> list[dict[str, str]]:
    """Rows of procedure.md's failure diagnosis table that apply, plus a few more.

    Each row is ``{"symptom", "cause", "advice"}``. Rows come from the status,
    the Slurm state, the exit code, whether the output log is empty, and
    known lines in ``log_lines`` (allocation expired, container missing, CUDA
    or host OOM, NCCL errors). The optional keywords add rows for a matched
    failure pattern, a missing success pattern, and workflow metrics (pytest
    failures, eval threshold). A PASSED or RELEASED run gets no rows.
    """
    if status in (Status.PASSED, Status.RELEASED):
        return []
    state = normalize_slurm_state(slurm_state)
    rows: list[dict[str, str]] = []
    sacct = f"sacct -j {job_id} --format=JobID,State,Reason" if job_id else (
        "sacct -j <job id> --format=JobID,State,Reason")

    if status is Status.TIMEOUT:
        if state in ("TIMEOUT", "DEADLINE"):
            rows.append(_row(f"TIMEOUT (Slurm state {state})", "over the time limit",
                             "raise the time limit (slurm_params.time_limit / #SBATCH --time; "
                             "persistent mode: alloc_time_limit)"))
        else:
            rows.append(_row("TIMEOUT (monitor_timeout_seconds)", "over the time limit",
                             "raise monitor_timeout_seconds; the job was killed"))
    if status is Status.OUT_OF_MEMORY:
        rows.append(_row("OUT_OF_MEMORY", "OOM on a node", "lower the batch size"))
    if status is Status.FAILED and exit_code not in (None, 0):
        rows.append(_row(f"exit {exit_code} and FAILED", "the srun exited non-zero",
                         "read the .err file (persistent mode: the log)"))
    if status is Status.CANCELLED:
        symptom = "CANCELLED" if state in (None, "CANCELLED") else f"CANCELLED ({state})"
        rows.append(_row(symptom, "pre-empted or cancelled", sacct))
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        rows.append(_row(state, "a node of the job failed",
                         "re-run; `sinfo -R` shows why the node is down"))
    if log_empty:
        rows.append(_row("empty output log", "container did not start",
                         "check .err / .salloc.log for mount or image errors"))
    if status is Status.HANG_DETECTED:
        rows.append(_row("HANG_DETECTED", "deadlock, NCCL timeout",
                         "job cancelled (persistent mode: only its step); "
                         "read the last 200 log lines"))
    if status is Status.BUILD_FAILED:
        rows.append(_row("BUILD_FAILED", "the build did not compile",
                         "read the last 100 lines of the build log"))

    cleaned = [_clean(line) for line in log_lines]
    if any(_UNABLE_TO_CREATE_STEP.search(line) for line in cleaned):
        rows.append(_row("srun: error: Unable to create step", "allocation expired",
                         "drop the state file and re-run (re-allocates)"))
    if any(_TOO_MANY_TASKS.search(line) for line in cleaned):
        rows.append(_row("srun: error: ... More processors requested than permitted",
                         "the job asks for more tasks than the allocation holds",
                         "set slurm_params.ntasks_per_node (it is passed to salloc), then "
                         "release the allocation and re-run"))
    text = "\n".join(cleaned)
    for pattern, symptom, cause, advice in _CONTAINER_ROWS:
        if pattern.search(text):
            rows.append(_row(symptom, cause, advice))
    if any(_CONTAINER_MISSING.search(line) for line in cleaned):
        rows.append(_row("srun: error: ... does not exist", "named container missing",
                         "drop the state file and re-run (re-imports)"))
    if status is not Status.OUT_OF_MEMORY:
        if any(_CUDA_OOM.search(line) for line in cleaned):
            rows.append(_row("CUDA out of memory in the log", "GPU memory exhausted",
                             "lower the batch size (or max_num_tokens / KV cache fraction)"))
        elif any(_HOST_OOM.search(line) for line in cleaned):
            rows.append(_row("oom-kill in the log", "OOM on a node", "lower the batch size"))
    if status is not Status.HANG_DETECTED and any(_NCCL.search(line) for line in cleaned):
        rows.append(_row("NCCL error in the log", "GPU communication failed or timed out",
                         "re-run with NCCL_DEBUG=INFO; check the nodes' network"))

    hits = [p for p, n in (failure_hits or {}).items() if n > 0]
    if hits:
        rows.append(_row(f"failure pattern matched: {', '.join(hits)}",
                         "the job printed a failure pattern", "see errors and the log tail"))
    if success_missing:
        rows.append(_row("no success pattern in the log", "the job did not reach its end",
                         "read the log tail; check success_patterns"))
    m = metrics or {}
    if m.get("threshold_not_met"):
        rows.append(_row("accuracy below threshold", "--check_accuracy assertion failed",
                         "compare the accuracy figures with the reference"))
    if int(m.get("failed", 0) or 0) or int(m.get("errors", 0) or 0):
        rows.append(_row(f"pytest: {int(m.get('failed', 0) or 0)} failed, "
                         f"{int(m.get('errors', 0) or 0)} errors",
                         "test failures", "see the FAILED lines in errors"))
    if status is Status.ERROR and not rows:
        rows.append(_row("ERROR", "a Slurm command or a setup step failed",
                         "see errors; the state file says what was done"))
    return rows


# ---------------------------------------------------------------------- errors
_ERROR_LINE: list[re.Pattern[str]] = [
    re.compile(r"\b(?:srun|slurmstepd|salloc|sbatch|pyxis|enroot): error:", re.I),
    re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b(?::|$)"),
    re.compile(r"\bError:"),
    re.compile(r"\bERROR\b"),
    re.compile(r"(?:^|\s)FAILED(?:\s|$)"),
    re.compile(r"CUDA out of memory|Segmentation fault|core dumped|oom[-_]kill", re.I),
    re.compile(r"hang detected", re.I),
    # compilers and build tools: a.cpp:1:1: error: ..., a.cu(12): error: ..., CMake Error at
    re.compile(r"^\S+?(?::\d+(?::\d+)?|\(\d+\)):\s*(?:fatal )?error\b", re.I),
    re.compile(r"\bCMake Error\b"),
    re.compile(r"^(?:g?make|ninja)(?:\[\d+\])?: \*\*\*|^ninja: build stopped"),
]


def errors_from(lines: Sequence[str]) -> list[str]:
    """The error-looking lines, in order, without repeats, at most 20.

    The last line of each Python traceback (the exception), Slurm/pyxis
    ``error:`` lines, ``XxxError:``/``Exception`` lines, logging ``ERROR``,
    pytest ``FAILED`` lines, CUDA OOM, segfaults, the hang marker.
    """
    out: list[str] = []
    seen: set[str] = set()

    def add(line: str) -> None:
        text = line[:_MAX_ERROR_CHARS]
        if text and text not in seen:
            seen.add(text)
            out.append(text)

    in_traceback = False
    for raw in lines:
        line = _clean(raw)
        body = _unlabel(raw.rstrip("\r\n"))
        if _TRACEBACK in line:
            in_traceback = True
            continue
        if in_traceback:
            if not line or body[:1].isspace():
                continue
            if line.startswith(("During handling", "The above exception")):
                continue
            in_traceback = False
            add(line)
            continue
        if any(rx.search(line) for rx in _ERROR_LINE):
            add(line)
        if len(out) >= MAX_ERRORS:
            break
    return out[:MAX_ERRORS]


# --------------------------------------------------------------------- summary
def summarize(workflow_type: WorkflowType, metrics: Mapping[str, Any]) -> str:
    """One line on what the parser found, for the report's ``summary``."""
    if workflow_type is WorkflowType.PYTEST:
        keys = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed",
                "warnings", "deselected", "rerun")
        parts = [f"{metrics[k]} {k}" for k in keys if k in metrics]
        if not parts:
            return "no pytest summary line found"
        secs = metrics.get("seconds")
        return ", ".join(parts) + (f" in {secs:g}s" if isinstance(secs, int | float) else "")
    if workflow_type is WorkflowType.EVAL:
        by_task: Mapping[str, float] = metrics.get("accuracy_by_task") or {}
        values: Sequence[float] = metrics.get("accuracy") or []
        if by_task:
            text = "accuracy " + ", ".join(f"{k} {v:g}" for k, v in by_task.items())
        elif values:
            text = "accuracy " + ", ".join(f"{v:g}" for v in values)
        else:
            text = "no accuracy figures found"
        if metrics.get("threshold_not_met"):
            text += "; accuracy threshold not met"
        return text
    if workflow_type is WorkflowType.BENCHMARK:
        figures = {**(metrics.get("throughput") or {}), **(metrics.get("latency") or {})}
        text = ", ".join(f"{k} {v:g}" for k, v in list(figures.items())[:4])
        text = text or "no throughput or latency figures found"
        marker = metrics.get("done_marker")
        return text + (f"; done marker {marker}" if marker else "; no done marker")
    last: Sequence[str] = metrics.get("last_lines") or []
    tail = [line.strip() for line in last if line.strip()]
    return tail[-1][:200] if tail else "no output"


def result_warnings(workflow_type: WorkflowType, metrics: Mapping[str, Any]) -> list[str]:
    """What the parser expected and did not find (a warning, not a failure)."""
    if workflow_type is WorkflowType.PYTEST and "seconds" not in metrics:
        return ["no pytest summary line in the log tail"]
    if workflow_type is WorkflowType.EVAL and not metrics.get("accuracy"):
        return ["no 'accuracy:' line in the log tail"]
    if workflow_type is WorkflowType.BENCHMARK:
        out = []
        if not metrics.get("throughput") and not metrics.get("latency"):
            out.append("no throughput or latency figures in the log tail")
        if not metrics.get("done_marker"):
            out.append(f"no {DONE_MARKER_GLOB} completion marker in the work dir")
        return out
    return []
