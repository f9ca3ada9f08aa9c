"""The structured result of a run (procedure.md step 5).

A :class:`Report` is what every path of the executor ends with: a job that
ran (PASSED, FAILED, ...), a setup that failed (ERROR, BUILD_FAILED) or a
release (RELEASED). It crosses the edge as JSON through the one cattrs
converter (:meth:`Report.to_dict` / :meth:`Report.from_dict`), and is shown
to people by :meth:`Report.render_text`. ``docs/report.md`` describes every
key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

import attrs
from cattrs.errors import BaseValidationError

from slurm_fsm.convert import converter, problems_of

__all__ = ["EXIT_CODES", "TIMING_DIGITS", "Report", "Status", "format_seconds"]


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


#: Decimal places of :attr:`Report.timings` (milliseconds: a clock reading carries
#: 17 significant digits, of which the sub-millisecond ones say nothing).
TIMING_DIGITS = 3


def _round_timings(value: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, seconds in dict(value).items():
        try:
            out[key] = round(float(seconds), TIMING_DIGITS)
        except (TypeError, ValueError):
            out[key] = seconds  # not a number: from_dict's validation names it
    return out


@attrs.frozen(kw_only=True)
class Report:
    """The result of one run: frozen and keyword-only, built once by the executor
    (``attrs.evolve`` makes a changed copy)."""

    #: The final status; its name is the report's ``status``.
    status: Status
    #: The workflow type: pytest, eval, benchmark or custom.
    task_type: str
    #: "persistent", "one-shot" or "release".
    mode: str
    #: The one-shot job id (None for a step in a persistent allocation).
    job_id: str | None = None
    #: The persistent allocation's job id.
    allocation_id: str | None = None
    #: Slurm's final state as printed (``CANCELLED by 0``), when known.
    slurm_state: str | None = None
    #: The job's (or script's) exit code, when known.
    exit_code: int | None = None
    #: Wall-clock seconds of the job itself.
    elapsed_s: float | None = None
    #: ``{"stdout": path, "stderr": path}``; None where there is no such file.
    log_files: dict[str, str | None] = attrs.field(
        factory=lambda: {"stdout": None, "stderr": None}
    )
    work_dir: str | None = None
    #: One line saying what happened.
    summary: str = ""
    errors: list[str] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)
    #: What the workflow parser found, plus pattern hits and accounting extras.
    metrics: dict[str, Any] = attrs.field(factory=dict)
    #: Rows ``{"symptom", "cause", "advice"}`` of the failure diagnosis table.
    diagnosis: list[dict[str, str]] = attrs.field(factory=list)
    #: The allocation machine's states, in the order visited.
    path: list[str] = attrs.field(factory=list)
    #: Steps skipped, and why.
    notes: list[str] = attrs.field(factory=list)
    #: First lines of the output log (on failure).
    log_head: list[str] = attrs.field(factory=list)
    #: Last lines of the output log.
    log_tail: list[str] = attrs.field(factory=list)
    #: Last lines of the .err file (one-shot).
    err_tail: list[str] = attrs.field(factory=list)
    #: Seconds per phase on the executor's clock: ``pre_step_s``, ``step0_s``,
    #: ``successor_wait_s``, ``start_s``, ``run_s``, ``total_s`` (those of the path
    #: taken; docs/report.md),
    #: rounded to the millisecond (:data:`TIMING_DIGITS`) when the report is made.
    timings: dict[str, float] = attrs.field(factory=dict, converter=_round_timings)

    @property
    def exit_code_for_cli(self) -> int:
        """0 success, 1 the job failed, 3 slurm_fsm or the build failed."""
        return EXIT_CODES[self.status]

    # ------------------------------------------------------------------ edges
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``status`` is the status name."""
        data: dict[str, Any] = converter.unstructure(self)
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text. Values JSON cannot hold are written as text."""
        return json.dumps(self.to_dict(), indent=indent, default=str, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """Read a dict written by :meth:`to_dict` (unknown keys are ignored).

        Raises ValueError naming every bad field.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a report must be a JSON object, got {type(data).__name__}")
        # cattrs would read a string as a list of characters: refuse it here.
        problems = [f"{name}: must be a list, got {type(data[name]).__name__}"
                    for name in _LIST_FIELDS
                    if name in data and not isinstance(data[name], list | tuple)]
        report: Report | None = None
        try:
            report = converter.structure(dict(data), cls)
        except BaseValidationError as exc:
            problems = problems_of(exc) + problems
        if problems or report is None:
            raise ValueError(f"not a report: {'; '.join(problems)}")
        return report

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Read JSON written by :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    # ------------------------------------------------------------------ people
    def render_text(self) -> str:
        """A short block for people: status, ids, exit, elapsed, logs, summary,
        warnings, errors and diagnosis."""
        out = [f"{self.status.name}  ({self.task_type}, {self.mode})"]

        def field(name: str, value: object) -> None:
            text = str(value).replace("\n", "\n" + " " * 15)
            out.append(f"  {name + ':':<13}{text}")

        ids = []
        if self.job_id:
            ids.append(f"job {self.job_id}")
        if self.allocation_id:
            ids.append(f"allocation {self.allocation_id}")
        if ids:
            field("job", ", ".join(ids))
        if self.exit_code is not None or self.slurm_state:
            exit_text = "unknown" if self.exit_code is None else str(self.exit_code)
            state = f" (Slurm state {self.slurm_state})" if self.slurm_state else ""
            field("exit code", exit_text + state)
        if self.elapsed_s is not None:
            field("elapsed", format_seconds(self.elapsed_s))
        stdout, stderr = self.log_files.get("stdout"), self.log_files.get("stderr")
        if stdout:
            field("log", stdout)
        if stderr and stderr != stdout:
            field("err", stderr)
        if self.work_dir:
            field("work dir", self.work_dir)
        waited = self.timings.get("successor_wait_s")
        if isinstance(waited, int | float):
            field("hand-off", f"waited {format_seconds(waited)} for a successor allocation "
                  "(the job did not fit the old one's time left)")
        if (setup := _container_setup(self.timings)) is not None:
            field("container", setup)
        if self.summary:
            field("summary", self.summary)
        # an error the summary already says is not printed again
        errors = [e for e in self.errors if e.strip() not in self.summary]
        for title, items in (("warnings", self.warnings), ("errors", errors)):
            if items:
                out.append(f"  {title}:")
                out.extend(f"    - {item}" for item in items)
        if self.diagnosis:
            out.append("  diagnosis:")
            for row in self.diagnosis:
                out.append(f"    - {row.get('symptom', '')}: {row.get('cause', '')}"
                           f" -> {row.get('advice', '')}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render_text()


def _container_setup(timings: Mapping[str, float]) -> str | None:
    """``reused on node: reuse check 0.4s``, ``cold: import 5.1s, install 10.2s, cache
    write 20.3s``, ``from the cache: cache import 4.0s`` or ``shared with a live
    allocation: share check 0.1s`` from a persistent run's step-0 timings (None: no
    container set up)."""
    kinds = {"reuse_check_s": "reused on node", "share_check_s": "shared with a live "
             "allocation", "cache_import_s": "from the cache", "import_s": "cold"}
    parts = [(key, timings[key]) for key in (*kinds, "install_s", "cache_write_s")
             if isinstance(timings.get(key), int | float)]
    if not parts or parts[0][0] not in kinds:
        return None
    kind = kinds[parts[0][0]]
    return f"{kind}: " + ", ".join(
        f"{key.removesuffix('_s').replace('_', ' ')} {format_seconds(value)}"
        for key, value in parts)


_LIST_FIELDS = tuple(
    f.name for f in attrs.fields(Report) if str(f.type).startswith("list[")
)


def format_seconds(seconds: float) -> str:
    """``12.3`` -> ``12.3s``; ``3723`` -> ``1h 02m 03s``; ``125`` -> ``2m 05s``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    h, rem = divmod(whole, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"
