"""Workflow types, one class each: how a workflow's log is read and judged.

A :class:`Workflow` knows six things about its kind of job: which lines it needs
(:meth:`~Workflow.relevant`, kept by :class:`~slurm_fsm.joboutput.JobOutput` wherever
they are in the output, with the last 100), how to **parse** them into
metrics, a one-line **summary** of those metrics, the **warnings** (what it
expected and did not find), its **verdict** (why the metrics alone make the run
FAILED, or None) and its rows of the failure **diagnosis**. :data:`WORKFLOWS`
holds one instance per :class:`~slurm_fsm.spec.WorkflowType`; adding a
workflow is one subclass registered with :func:`register` (and its member of
``WorkflowType``).

The parsers are also plain functions (:func:`parse_pytest`, :func:`parse_eval`,
:func:`parse_benchmark`, :func:`parse_custom`), re-exported by
:mod:`slurm_fsm.results`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from slurm_fsm.logs import strip_log_prefix
from slurm_fsm.spec import WorkflowType

__all__ = [
    "DONE_MARKER_GLOB",
    "WORKFLOWS",
    "BenchmarkWorkflow",
    "CustomWorkflow",
    "EvalWorkflow",
    "PytestWorkflow",
    "Workflow",
    "parse_benchmark",
    "parse_custom",
    "parse_eval",
    "parse_pytest",
    "register",
    "workflow",
]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")  # srun --label prefix "0: "
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")


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
    # pytest 9's built-in subtests (``3 subtests passed``; category words of
    # _pytest/subtests.py pytest_report_teststatus)
    "subtests passed": "subtests_passed",
    "subtests failed": "subtests_failed",
}
_PYTEST_COUNT = (r"\d+ (?:subtests (?:passed|failed)|passed|failed|errors?|skipped|xfailed"
                 r"|xpassed|warnings?|deselected|rerun)")
_PYTEST_SUMMARY = re.compile(
    rf"(?P<body>{_PYTEST_COUNT}(?:, {_PYTEST_COUNT})*|no tests ran)"
    rf" in (?P<time>\d+(?:\.\d+)?(?:s| seconds)|\d+(?::\d+){{1,2}}(?:\.\d+)?)(?![\w:])"
)
_PYTEST_ITEM = re.compile(r"(\d+) (subtests \w+|\w+)")


def _seconds(text: str) -> float:
    """``12.34s`` -> 12.34; ``213.99 seconds`` (pytest before 5.1) -> 213.99;
    ``1:02:03`` -> 3723.0; ``2:03`` -> 123.0."""
    if text.endswith("s"):
        return float(text.split()[0].rstrip("s"))
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + float(part)
    return total


_PYTEST_LABEL = re.compile(r"^\s*(\d+):\s")
#: pytest-pretty 1.x's summary: ``Results (0.24s):`` then one ``   N word`` line per count
_PRETTY_RESULTS = re.compile(r"^Results \((?P<time>\d+(?:\.\d+)?s|\d+(?::\d+){1,2}(?:\.\d+)?)\):$")
_PRETTY_COUNT = re.compile(r"^\s+(\d+) (subtests (?:passed|failed)|passed|failed|errors?|skipped"
                           r"|xfailed|xpassed|warnings?|deselected|rerun)$")
#: pytest-timeout's thread method: ``+++... Timeout +++...`` around the stacks it dumps
#: before it ends the process (no summary line follows)
_TIMEOUT_BANNER = re.compile(r"\+{5,} Timeout \+{5,}$")
_TEST_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line \d+, in (?P<func>test\w*)$')
_STACK_OF = re.compile(r"^~+ Stack of (?P<thread>\S+)")


def _pytest_counts(body: str) -> dict[str, int | float] | None:
    m = _PYTEST_SUMMARY.search(body)
    if not m:
        return None
    out: dict[str, int | float] = {}
    for count, word in _PYTEST_ITEM.findall(m.group("body")):
        key = _PYTEST_WORDS[word]
        out[key] = int(out.get(key, 0)) + int(count)
    out["seconds"] = _seconds(m.group("time"))
    return out


def _timed_out_test(lines: Sequence[str]) -> str | None:
    """The test pytest-timeout's thread method stopped: the last ``in test_*`` frame of
    the main thread's stack between two ``+++ Timeout +++`` banners (``path::test``)."""
    found: str | None = None
    inside = False
    thread = ""
    best: dict[str, str] = {}
    for raw in lines:
        body = _unlabel(_clean(raw))
        if _TIMEOUT_BANNER.search(body):
            if inside:
                found = best.get("MainThread") or next(iter(best.values()), None) or found
                best, inside = {}, False
            else:
                inside, thread = True, ""
            continue
        if not inside:
            continue
        st = _STACK_OF.match(body)
        if st:
            thread = st.group("thread")
            continue
        fr = _TEST_FRAME.match(body)
        if fr:
            best[thread] = f"{fr.group('path')}::{fr.group('func')}"
    if inside and best:
        found = best.get("MainThread") or next(iter(best.values()))
    return found


def parse_pytest(lines: Sequence[str]) -> dict[str, Any]:
    """Counts and duration from pytest's summary line.

    ``==== 3 passed, 1 failed, 2 skipped, 1 error in 12.34s ====`` ->
    ``{"passed": 3, "failed": 1, "skipped": 2, "errors": 1, "seconds": 12.34}``.
    Keys are among passed, failed, errors, skipped, xfailed, xpassed,
    warnings, deselected, rerun, subtests_passed, subtests_failed (pytest 9) and
    seconds; only those printed appear. ``in 1:02:03`` is read as hh:mm:ss.
    pytest-pretty's ``Results (0.24s):`` block (one count per line) is a summary too.

    * **Several ranks** (``srun -l``: ``0: ``, ``1: `` prefixes): the last summary of
      each rank counts, and the counts are added up (``seconds``: the longest;
      ``"ranks"``: how many ranks printed one), so a failing rank fails the run.
      Without labels, the last summary of the log counts.
    * **pytest-timeout, thread method**: it prints ``+++ Timeout +++``, the stacks, and
      ends the process without a summary: ``"timed_out_test"`` names the test
      (``path::test_name``, from the main thread's stack).

    No summary line gives ``{}`` (or only ``"timed_out_test"``).
    """
    by_rank: dict[str, dict[str, int | float]] = {}
    pretty: tuple[str, dict[str, int | float]] | None = None
    for raw in lines:
        clean = _clean(raw)
        m = _PYTEST_LABEL.match(raw)
        rank = m.group(1) if m else ""
        body = _unlabel(clean) if m else clean
        if pretty is not None and pretty[0] == rank:
            pc = _PRETTY_COUNT.match(_SRUN_LABEL.sub("", raw.rstrip("\r\n"), count=1))
            if pc:
                key = _PYTEST_WORDS[pc.group(2)]
                pretty[1][key] = int(pretty[1].get(key, 0)) + int(pc.group(1))
                continue
            pretty = None
        pr = _PRETTY_RESULTS.match(body)
        if pr:
            counts: dict[str, int | float] = {"seconds": _seconds(pr.group("time"))}
            by_rank[rank] = counts
            pretty = (rank, counts)
            continue
        found = _pytest_counts(body) if " in " in body else None
        if found is not None:
            by_rank[rank] = found
    out: dict[str, Any] = {}
    if len(by_rank) == 1:
        out.update(next(iter(by_rank.values())))
    elif by_rank:
        for counts in by_rank.values():
            for key, value in counts.items():
                if key == "seconds":
                    out[key] = max(float(out.get(key, 0.0)), float(value))
                else:
                    out[key] = int(out.get(key, 0)) + int(value)
        out["ranks"] = len(by_rank)
    if not by_rank:
        stopped = _timed_out_test(lines)
        if stopped:
            out["timed_out_test"] = stopped
    return out


# ------------------------------------------------------------------------ eval
_ACCURACY = re.compile(rf"(?P<pre>[^:=,;|]*?)\baccuracy\s*[:=]\s*(?P<value>{_NUMBER})", re.I)
_NAME = re.compile(r"^[A-Za-z][\w.\-/]*$")
_NOT_A_TASK = frozenset(
    {"average", "avg", "weighted", "mean", "overall", "final", "total", "eval",
     "evaluation", "the", "model", "best", "score", "-", "lm-eval", "result", "results",
     # a logger's level word before the message (``... 17:00:00 INFO gsm8k accuracy``)
     "info", "debug", "warning", "warn", "error", "critical"}
)


#: Words after a task's name that qualify the figure, not the task (``MMLU weighted
#: average accuracy``).
_QUALIFIER = frozenset({"average", "avg", "weighted", "mean", "overall", "final", "total"})
#: A task's name has at most this many words (``JSON Mode Eval grammar``).
_MAX_TASK_WORDS = 4


def _task_name(prefix: str) -> str | None:
    """The task name just before ``accuracy``: ``gsm8k`` in ``lm-eval gsm8k average``,
    ``MMLU`` in ``MMLU weighted average``, ``JSON Mode Eval`` in ``JSON Mode Eval``
    (TensorRT-LLM's json_mode_eval.py): the name-like words before it (at most
    :data:`_MAX_TASK_WORDS`, stopping at a bracketed tag, a number or punctuation),
    without the qualifiers after the name and the filler words before it."""
    words: list[str] = []
    for token in reversed(strip_log_prefix(prefix).split()):
        word = token.strip("'\"()")
        if word.startswith("[") or word.endswith("]") or not _NAME.match(word):
            break
        words.insert(0, word)
        if len(words) == _MAX_TASK_WORDS:
            break
    while words and words[-1].lower() in _QUALIFIER:
        words.pop()
    while words and words[0].lower() in _NOT_A_TASK:
        words.pop(0)
    if not words or all(w.lower() in _NOT_A_TASK for w in words):
        return None
    return " ".join(words)


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


#: TensorRT-LLM's hypothesis-testing report (tests/integration/defs/accuracy/
#: accuracy_core.py ``HypothesisTestingParams.report``): ``Reference accuracy: 74.450``,
#: ``Threshold: 71.247``, ``Evaluated accuracy: 73.880``, also inside pytest's ``E`` lines.
_REPORT_FIGURE = re.compile(
    r"^(?:E\s+)?(?P<what>Reference accuracy|Evaluated accuracy|Threshold)\s*:\s*"
    rf"(?P<value>{_NUMBER})\s*$")
_REPORT_KEYS = {"Reference accuracy": "reference_accuracy",
                "Evaluated accuracy": "evaluated_accuracy", "Threshold": "threshold"}
#: ``lm-eval {task} [{scores_filter}] accuracy:`` (tensorrt_llm/evaluate/lm_eval.py)
_LM_EVAL_TASK = re.compile(r"\blm-eval\s+(?P<task>[A-Za-z][\w.\-/]*)\s")


#: Named figures that are no accuracy: TensorRT-LLM's cnn_dailymail ``rouge1: 30.45``,
#: ``Per-token perplexity: 5.81`` (its perplexity evaluation), ``bleu``/``exact_match``/``f1``.
_SCORE = re.compile(rf"^(?P<name>rouge[\w-]*|(?:[A-Za-z][\w-]* ){{0,3}}perplexity|bleu|"
                    rf"exact_match|f1)\s*[:=]\s*(?P<value>{_NUMBER})\s*$", re.I)
#: One row of lm-evaluation-harness's results table (``make_table``): ``|gsm8k|3|...|``
_TABLE_ROW = re.compile(r"^\|.*\|$")


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


#: The first column of a results table: ``Tasks`` (lm-eval 0.4), ``Groups`` (its group
#: table), ``Task`` (lm-eval 0.3, lighteval).
_TASK_COLUMNS = frozenset({"tasks", "groups", "task"})
#: A row of the table that is no score: early lm-eval 0.4's ``samples`` (how many
#: samples the task had, ``3270.0000``).
_NOT_A_SCORE = frozenset({"samples"})


def _lm_eval_table(lines: Sequence[str]) -> dict[str, float]:
    """lm-evaluation-harness's results table, as ``lm_eval`` prints it (and TensorRT-LLM's
    lm_eval.py logs it): ``|Tasks|Version|Filter|n-shot|Metric| |Value| |Stderr|`` then a
    row per task, metric and filter (a blank Tasks cell repeats the task above); lm-eval
    0.3's and lighteval's ``|Task|Version|Metric|Value| |Stderr|`` too (no Filter or
    n-shot column; lighteval's task ``custom:arc:challenge:0``, its average ``all``).
    ``{"gsm8k exact_match,flexible-extract": 0.9538, ...}``: task, then metric and filter
    joined as TensorRT-LLM's ``lm-eval {task} {metric},{filter}`` names them (a filter of
    ``none`` is left out). ``samples`` rows are counts, not scores: left out."""
    out: dict[str, float] = {}
    columns: dict[str, int] | None = None
    task = ""
    for raw in lines:
        line = _unlabel(_clean(raw))
        if not _TABLE_ROW.match(line):
            columns = None
            continue
        cells = _cells(line)
        names = [c.lower() for c in cells]
        if (_TASK_COLUMNS & set(names)) and "metric" in names and "value" in names:
            columns = {n: i for i, n in enumerate(names) if n}
            columns.setdefault("tasks", columns.get("task", columns.get("groups", 0)))
            task = ""
            continue
        if columns is None or set(line) <= set("|-: "):
            continue
        row = {name: cells[i] for name, i in columns.items() if i < len(cells)}
        task = row.get("tasks", "").lstrip("- ").strip() or task
        metric, value = row.get("metric", ""), row.get("value", "")
        if not task or not metric or metric in _NOT_A_SCORE or not re.fullmatch(_NUMBER, value):
            continue
        filt = row.get("filter", "")
        key = f"{task} {metric}" + (f",{filt}" if filt and filt.lower() != "none" else "")
        out[key] = float(value)
    return out


def _accuracy_figures(line: str) -> list[tuple[str | None, float]]:
    """(task or None, value) of each ``accuracy: <number>`` of a line."""
    out: list[tuple[str | None, float]] = []
    for m in _ACCURACY.finditer(line):
        lm = _LM_EVAL_TASK.search(line, 0, m.start("value"))
        out.append((lm.group("task") if lm else _task_name(m.group("pre")),
                    float(m.group("value"))))
    return out


def parse_eval(lines: Sequence[str]) -> dict[str, Any]:
    """Accuracy figures of an eval run.

    Every ``accuracy: <number>`` (any case, ``=`` too, several per line) goes
    into ``"accuracy"`` in order; when a task name precedes it
    (``gsm8k accuracy: 71.2``, ``MMLU weighted average accuracy: 68.6``,
    ``lm-eval gpqa_diamond exact_match,flexible-extract accuracy: 45.96``)
    it also goes into ``"accuracy_by_task"`` (the last value per task).
    TensorRT-LLM's hypothesis-testing report is read as what it is:
    ``Reference accuracy:`` -> ``"reference_accuracy"`` (never a measured figure),
    ``Threshold:`` -> ``"threshold"``, ``Evaluated accuracy:`` ->
    ``"evaluated_accuracy"`` (measured, so also in ``"accuracy"``; no task of that name).
    ``"threshold_not_met": True`` when a ``--check_accuracy`` assertion
    failed. Lines of an AssertionError are not read as figures.

    ``"scores"`` is the one place of every figure the eval printed (name -> value, the
    last one winning): the accuracy lines (``"gsm8k accuracy": 71.2``; ``"accuracy"``
    without a task; ``"Evaluated accuracy"``), lm-evaluation-harness's and lighteval's
    results tables (:func:`_lm_eval_table`: ``"gsm8k exact_match,flexible-extract":
    0.9538``), ``rouge1: 30.45``, ``Per-token perplexity: 5.81``. ``"accuracy"``,
    ``"accuracy_by_task"``: the accuracy lines alone, for earlier reports' readers; no key
    is there empty. A timestamp or logger tag before a line is never part of a name.
    """
    values: list[float] = []
    by_task: dict[str, float] = {}
    report: dict[str, float] = {}
    scores: dict[str, float] = {}
    for raw in lines:
        line = _unlabel(_clean(raw))
        if "AssertionError" in line:
            continue
        score = _SCORE.match(strip_log_prefix(line))
        if score:
            scores[score.group("name")] = float(score.group("value"))
            continue
        rep = _REPORT_FIGURE.match(_LOG_PREFIX.sub("", line).strip())
        if rep:
            key = _REPORT_KEYS[rep.group("what")]
            report[key] = float(rep.group("value"))
            if key == "evaluated_accuracy":
                values.append(report[key])
                scores[rep.group("what")] = report[key]
            continue
        for name, value in _accuracy_figures(line):
            values.append(value)
            if name:
                by_task[name] = value
            scores[f"{name} accuracy" if name else "accuracy"] = value
    out: dict[str, Any] = {}
    if values:
        out["accuracy"] = values
    if by_task:
        out["accuracy_by_task"] = by_task
    scores.update(_lm_eval_table(lines))
    if scores:
        out["scores"] = scores
    out.update(report)
    if _threshold_not_met(lines):
        out["threshold_not_met"] = True
    return out


# ------------------------------------------------------------------- benchmark
_FIGURE = re.compile(rf"^(?P<label>.+?)\s*:\s*(?P<value>{_NUMBER})\s*(?P<unit>[^\s\d:][^\s:]*)?$")
_LATENCY_WORD = re.compile(
    r"latency|\bTTFT\b|\bTPOT\b|\bITL\b|\bE2EL\b|time to first token|time per output token",
    re.I,
)
#: ``Per User Output Speed (tps/user)`` and the ``[GTPS]`` (generation tokens per second)
#: breakdown of trtllm-bench 0.21's streaming report are throughput figures too.
_THROUGHPUT_WORD = re.compile(r"throughput|\bGTPS\b|output speed", re.I)
#: A line that may hold a figure names one of these (a superset of both kinds' words).
_FIGURE_HINT = re.compile(r"throughput|latency|TTFT|TPOT|ITL|E2EL|time to first|"
                          r"time per output|GTPS|output speed", re.I)
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
    """Drop log prefixes (``[TRT-LLM] [I]``, ``0:``, ``... INFO:``, a timestamp such as
    Go's ``2024/07/11 23:37:56``) that do not carry the figure's name."""
    label = _unlabel(label).strip()
    bare = strip_log_prefix(label)
    if bare and _figure_kind(bare):  # ``[Latency] AVERAGE``: the tag is the name
        label = bare
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


#: A row of a box-drawn table (GenAI-Perf's ``LLM Metrics``, drawn by rich):
#: ``│ Time to first token (ms) │  16.26 │  12.39 │ ...``
_BOX = "│┃"
_BOX_ROW = re.compile(rf"^[{_BOX}]\s*(?P<label>[^{_BOX}]+?)\s*[{_BOX}]\s*(?P<value>{_NUMBER})"
                      rf"\s*[{_BOX}]")
_BOX_HEADER = re.compile(rf"^[{_BOX}]\s*Statistic\s*[{_BOX}]\s*(?P<first>\w+)\s*[{_BOX}]")


def _box_figures(lines: Sequence[str]) -> dict[str, tuple[str, float]]:
    """GenAI-Perf's table: each row's first figure, keyed ``<label> <column>`` (the
    column is the header's, ``avg``): ``Request throughput (per sec) avg``."""
    out: dict[str, tuple[str, float]] = {}
    column = ""
    for raw in lines:
        line = _unlabel(_clean(raw))
        if not line or line[0] not in _BOX:
            continue
        head = _BOX_HEADER.match(line)
        if head:
            column = head.group("first")
            continue
        m = _BOX_ROW.match(line)
        if m and column:
            label = f"{m.group('label')} {column}"
            kind = _figure_kind(label)
            if kind is not None and len(label) <= _MAX_LABEL:
                out[label] = (kind, float(m.group("value")))
    return out


#: Several figures after one label, each with its unit (vLLM's ``benchmark_throughput``:
#: ``Throughput: 89.27 requests/s, 22853.37 total tokens/s, 11426.69 output tokens/s``)
_UNIT = r"[^\s\d,:{}][^,:{}]*?"
_MULTI_FIGURE = re.compile(rf"^(?P<label>.+?)\s*:\s*(?P<rest>{_NUMBER}\s+{_UNIT}"
                           rf"(?:\s*,\s*{_NUMBER}\s+{_UNIT})+)\s*$")
_UNIT_FIGURE = re.compile(rf"(?P<value>{_NUMBER})\s+(?P<unit>{_UNIT})\s*(?:,|$)")
#: A two-cell row of a grid or markdown table (evalscope's summary:
#: ``| Output token throughput (tok/s)   |  963.856  |``)
_GRID_ROW = re.compile(rf"^\|\s*(?P<label>[^|]*[^|\s])\s*\|\s*(?P<value>{_NUMBER})\s*\|$")


def _figure(kind: str | None, label: str, value: str) -> list[tuple[str, str, float]]:
    if kind is None or len(label) > _MAX_LABEL:
        return []
    return [(kind, label, float(value))]


def _line_figures(line: str) -> list[tuple[str, str, float]]:
    """(kind, label, value) of each figure one line holds: ``<label>: <number> [unit]``,
    ``<label>: <n> <unit>, <n> <unit>...`` (each keyed ``<label> (<unit>)``), or a
    two-cell grid row ``| <label> | <number> |``."""
    clean = _clean(line)
    if "|" in clean:
        grid = _GRID_ROW.match(_unlabel(clean))
        if grid:
            label = grid.group("label")
            return _figure(_figure_kind(label), label, grid.group("value"))
    m = _FIGURE.match(clean)
    if m:
        label = _figure_label(m.group("label"))
        return _figure(_figure_kind(label), label, m.group("value"))
    multi = _MULTI_FIGURE.match(clean)
    if not multi:
        return []
    label = _figure_label(multi.group("label"))
    kind = _figure_kind(label)
    if kind is None or len(label) > _MAX_LABEL:
        return []
    return [(kind, f"{label} ({f.group('unit').strip()})", float(f.group("value")))
            for f in _UNIT_FIGURE.finditer(multi.group("rest"))]


def parse_benchmark(lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
    """Throughput and latency figures, and the ``8_done_*.txt`` marker.

    A line ``<label>: <number> [unit]`` whose label says throughput goes into
    ``"throughput"``; one that says latency (or TTFT, TPOT, ITL, E2EL) into
    ``"latency"``; keyed by the label as printed (``Request Throughput
    (req/sec)``; a timestamp or logger tag before it is not part of the name), the
    last value winning. Several figures after one label, each with its unit (vLLM's
    ``Throughput: 89.27 requests/s, 22853.37 total tokens/s``), are keyed
    ``Throughput (requests/s)``, ``Throughput (total tokens/s)``; a grid or markdown row
    of two cells (evalscope's ``| Output token throughput (tok/s) | 963.856 |``) is a
    figure too. GenAI-Perf's box-drawn table gives each row's first column
    (``Time to first token (ms) avg``). ``"done_marker"`` is the name of
    the newest ``8_done_*.txt`` in ``work_dir``, or None.
    """
    throughput: dict[str, float] = {}
    latency: dict[str, float] = {}
    for raw in lines:
        for kind, label, value in _line_figures(raw):
            (latency if kind == "latency" else throughput)[label] = value
    for label, (kind, value) in _box_figures(lines).items():
        (latency if kind == "latency" else throughput)[label] = value
    return {"throughput": throughput, "latency": latency, "done_marker": _done_marker(work_dir)}


# ---------------------------------------------------------------------- custom
def parse_custom(lines: Sequence[str]) -> dict[str, Any]:
    """``{"last_lines": <the last 10 lines>}``."""
    return {"last_lines": [line.rstrip("\r\n") for line in lines[-10:]]}



# ------------------------------------------------------------------- the classes
def _row(symptom: str, cause: str, advice: str) -> dict[str, str]:
    return {"symptom": symptom, "cause": cause, "advice": advice}


class Workflow:
    """One workflow type. Subclass it, set :attr:`type`, override what differs, and
    :func:`register` it. The defaults: no metrics beyond the log's last lines, no
    warnings, no verdict, no diagnosis rows."""

    #: The ``workflow_type`` of the spec this class reads.
    type: ClassVar[WorkflowType]
    #: Every line :meth:`relevant` keeps holds one of these lower-case words, in any case
    #: (a cheap superset, searched over a whole chunk of output at once); None:
    #: :meth:`relevant` is asked of every line.
    relevant_hint: ClassVar[tuple[str, ...] | None] = None

    def parse(self, lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
        """The metrics of the log's relevant lines and last lines (``work_dir`` for
        marker files)."""
        return parse_custom(lines)

    def relevant(self, line: str) -> bool:
        """Does the parser need this line even when it is far from the end of the
        output? (:class:`~slurm_fsm.joboutput.JobOutput` keeps such lines while it
        follows the job, bounded; the last lines are always kept.)"""
        return False

    def summarize(self, metrics: Mapping[str, Any]) -> str:
        """One line on what the parser found, for the report's ``summary``."""
        last: Sequence[str] = metrics.get("last_lines") or []
        tail = [line.strip() for line in last if line.strip()]
        return tail[-1][:200] if tail else "no output"

    def warnings(self, metrics: Mapping[str, Any]) -> list[str]:
        """What the parser expected and did not find (a warning, not a failure)."""
        return []

    def verdict(self, metrics: Mapping[str, Any]) -> str | None:
        """Why these metrics make the run FAILED (the deciding reason), or None."""
        return None

    def diagnosis(self, metrics: Mapping[str, Any]) -> list[dict[str, str]]:
        """Rows ``{"symptom", "cause", "advice"}`` that the metrics explain."""
        return []


#: One instance per workflow type, in the order registered.
WORKFLOWS: dict[WorkflowType, Workflow] = {}

W = TypeVar("W", bound=type[Workflow])


def register(cls: W) -> W:
    """Class decorator: make ``cls()`` the workflow of ``cls.type``."""
    WORKFLOWS[cls.type] = cls()
    return cls


def workflow(workflow_type: WorkflowType) -> Workflow:
    """The registered workflow of ``workflow_type``."""
    return WORKFLOWS[workflow_type]


_PYTEST_KEYS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed",
                "warnings", "deselected", "rerun", "subtests_passed", "subtests_failed")


def _pytest_failures(metrics: Mapping[str, Any]) -> tuple[int, int]:
    """(failed, errors); a failed subtest counts as a failure (pytest 9 also fails its
    test, so ``failed`` is at least 1 then), and so does a test pytest-timeout stopped."""
    failed = max(int(metrics.get("failed", 0) or 0),
                 1 if int(metrics.get("subtests_failed", 0) or 0) else 0,
                 1 if metrics.get("timed_out_test") else 0)
    return failed, int(metrics.get("errors", 0) or 0)


#: An eval's summary names this many figures of ``scores``.
_SUMMARY_FIGURES = 4


@register
class EvalWorkflow(Workflow):
    """An accuracy eval: the accuracy figures; a ``--check_accuracy`` assertion fails it."""

    type = WorkflowType.EVAL
    relevant_hint = ("accuracy", "threshold", "assertionerror", "traceback", "rouge",
                     "perplexity", "bleu", "exact_match", "f1", "|")

    def parse(self, lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
        return parse_eval(lines)

    def relevant(self, line: str) -> bool:
        low = line.lower()
        if ("accuracy" in low or "threshold" in low or "assertionerror" in low
                or _TRACEBACK in line):
            return True
        if "|" in line and _TABLE_ROW.match(_unlabel(_clean(line))):
            return True  # a row of lm-eval's results table
        return _SCORE.match(strip_log_prefix(_unlabel(_clean(line)))) is not None

    def summarize(self, metrics: Mapping[str, Any]) -> str:
        """The first figures of ``scores`` (the one place of them all); ``accuracy``'s
        values when there are no scores (metrics of earlier reports)."""
        scores: Mapping[str, float] = metrics.get("scores") or {}
        values: Sequence[float] = metrics.get("accuracy") or []
        if scores:
            text = (", ".join(f"{k} {v:g}" for k, v in list(scores.items())[:_SUMMARY_FIGURES])
                    + (f" (+{len(scores) - _SUMMARY_FIGURES} more)"
                       if len(scores) > _SUMMARY_FIGURES else ""))
        elif values:
            text = "accuracy " + ", ".join(f"{v:g}" for v in values)
        else:
            text = "no eval figures found"
        if metrics.get("threshold_not_met"):
            text += "; accuracy threshold not met"
        return text

    def warnings(self, metrics: Mapping[str, Any]) -> list[str]:
        if metrics.get("accuracy") or metrics.get("scores"):
            return []
        return ["no eval figures (accuracy lines, results tables, scores) in the log"]

    def verdict(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("threshold_not_met"):
            return "accuracy below the --check_accuracy threshold"
        return None

    def diagnosis(self, metrics: Mapping[str, Any]) -> list[dict[str, str]]:
        if not metrics.get("threshold_not_met"):
            return []
        return [_row("accuracy below threshold", "--check_accuracy assertion failed",
                     "compare the accuracy figures with the reference")]


@register
class PytestWorkflow(Workflow):
    """pytest: the counts of the last summary line; failed tests or errors fail the run."""

    type = WorkflowType.PYTEST
    relevant_hint = ("failed", "error", " in ", "timeout", "stack of", "results (")

    def parse(self, lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
        return dict(parse_pytest(lines))

    def relevant(self, line: str) -> bool:
        clean = _unlabel(_clean(line))
        if clean.startswith(("FAILED ", "ERROR ", "SUBFAILED")):
            return True
        if " in " in clean and (_PYTEST_SUMMARY.search(clean) is not None
                                or _TEST_FRAME.match(clean) is not None):
            return True  # a summary; a test's frame in pytest-timeout's stacks
        return (_TIMEOUT_BANNER.search(clean) is not None or _STACK_OF.match(clean) is not None
                or _PRETTY_RESULTS.match(clean) is not None)

    def summarize(self, metrics: Mapping[str, Any]) -> str:
        parts = [f"{metrics[k]} {k.replace('_', ' ')}" for k in _PYTEST_KEYS if k in metrics]
        stopped = metrics.get("timed_out_test")
        if not parts:
            return (f"pytest-timeout stopped {stopped} (no summary line)" if stopped
                    else "no pytest summary line found")
        secs = metrics.get("seconds")
        text = ", ".join(parts) + (f" in {secs:g}s" if isinstance(secs, int | float) else "")
        ranks = metrics.get("ranks")
        return text + (f" ({ranks} ranks added up)" if ranks else "")

    def warnings(self, metrics: Mapping[str, Any]) -> list[str]:
        if "seconds" in metrics:
            return []
        if metrics.get("timed_out_test"):
            return ["no pytest summary line: pytest-timeout (thread method) ended pytest"]
        return ["no pytest summary line in the log tail"]

    def verdict(self, metrics: Mapping[str, Any]) -> str | None:
        if metrics.get("timed_out_test") and "seconds" not in metrics:
            return f"pytest-timeout stopped {metrics['timed_out_test']}"
        failed, errors = _pytest_failures(metrics)
        return f"pytest: {failed} failed, {errors} errors" if failed or errors else None

    def diagnosis(self, metrics: Mapping[str, Any]) -> list[dict[str, str]]:
        stopped = metrics.get("timed_out_test")
        if stopped and "seconds" not in metrics:
            return [_row(f"pytest-timeout: {stopped} timed out", "a test ran past "
                         "pytest-timeout's limit (thread method: pytest itself was ended)",
                         "read the stack pytest-timeout printed; raise --timeout or fix "
                         "the hang")]
        failed, errors = _pytest_failures(metrics)
        if not (failed or errors):
            return []
        return [_row(f"pytest: {failed} failed, {errors} errors", "test failures",
                     "see the FAILED lines in errors")]


@register
class BenchmarkWorkflow(Workflow):
    """A benchmark: throughput and latency figures, and the ``8_done_*.txt`` marker."""

    type = WorkflowType.BENCHMARK
    relevant_hint = ("throughput", "latency", "ttft", "tpot", "itl", "e2el", "time to first",
                     "time per output", "gtps", "output speed", "statistic")

    def parse(self, lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
        return parse_benchmark(lines, work_dir)

    def relevant(self, line: str) -> bool:
        if "Statistic" in line and _BOX_HEADER.match(_unlabel(_clean(line))):
            return True  # GenAI-Perf's table header names the column of its figures
        if not _FIGURE_HINT.search(line):
            return False  # the cheap test first: most lines name no figure
        clean = _unlabel(_clean(line))
        if clean[:1] in _BOX:
            return _BOX_ROW.match(clean) is not None
        if ":" not in line and "|" not in line:
            return False
        return bool(_line_figures(line))

    def summarize(self, metrics: Mapping[str, Any]) -> str:
        figures = {**(metrics.get("throughput") or {}), **(metrics.get("latency") or {})}
        text = ", ".join(f"{k} {v:g}" for k, v in list(figures.items())[:4])
        text = text or "no throughput or latency figures found"
        marker = metrics.get("done_marker")
        return text + (f"; done marker {marker}" if marker else "; no done marker")

    def warnings(self, metrics: Mapping[str, Any]) -> list[str]:
        out = []
        if not metrics.get("throughput") and not metrics.get("latency"):
            out.append("no throughput or latency figures in the log tail")
        if not metrics.get("done_marker"):
            out.append(f"no {DONE_MARKER_GLOB} completion marker in the work dir")
        return out


@register
class CustomWorkflow(Workflow):
    """Anything else: the last lines of the log; the exit code and patterns decide."""

    type = WorkflowType.CUSTOM

