"""Golden reports: the JSON of every report a fake-cluster scenario ends with, kept in
``tests/data/golden_reports/<test>.json`` and compared on every run, so a change to how
a report is built shows up as a diff of these files. Beside it, ``<test>.progress.txt``:
the progress lines the CLI would have printed for each run of the test (the caller's
events teed into a :class:`slurm_fsm.progress.StderrEvents` with ``report_follows``, as
``slurm-fsm run`` makes it), so that a change to what a person watching a run reads
shows up too (issue 41: the texts are part of the corpus, both modes).

A test opts in with ``pytestmark = pytest.mark.usefixtures("golden_reports")``. Volatile
parts are normalised: the test's tmp_path, the UTC stamps of run logs, run ids, and the
timing figures (their keys are kept) and ``elapsed_s`` (some scenarios run real
scripts). ``SLURM_FSM_UPDATE_GOLDEN=1`` rewrites the files; ``=new`` writes only the missing
ones (a new test's), leaving every existing file to compare.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.progress import StderrEvents
from slurm_fsm.report import Report

GOLDEN = Path(__file__).parent / "data" / "golden_reports"
_STAMP = re.compile(r"\d{8}T\d{6}(?:\.\d{3})?Z(?:-\d+)?")
_RUN_ID = re.compile(r"\br?[0-9a-f]{12,32}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")
#: a duration a real script's run makes vary ("in 0.4 s", "after 1.23s")
_SECONDS = re.compile(r"\b\d+\.\d+ ?s\b")


class _Tee(Events):
    """The caller's events, and a copy of each phase and message to ``shown`` (the
    job's own output and the ticks are not progress lines of the corpus)."""

    def __init__(self, caller: Events | None, shown: StderrEvents) -> None:
        self.caller = caller or Events()
        self.shown = shown

    def state(self, machine_state: str, detail: str = "") -> None:
        self.shown.state(machine_state, detail)
        self.caller.state(machine_state, detail)

    def message(self, text: str) -> None:
        self.shown.message(text)
        self.caller.message(text)

    def output(self, text: str) -> None:
        self.caller.output(text)

    def job_state(self, slurm_state: str) -> None:
        self.shown.job_state(slurm_state)
        self.caller.job_state(slurm_state)

    def tick(self, elapsed_s: float, last_line: str) -> None:
        self.caller.tick(elapsed_s, last_line)

    def __getattr__(self, name: str) -> Any:
        """What else the executor asks of the caller's sink (``silenced``, ``close``)."""
        return getattr(self.caller, name)


def normalise(doc: Any, tmp: str) -> Any:
    if isinstance(doc, dict):
        return {k: (sorted(v) if k == "timings" and isinstance(v, dict) else
                    "<seconds>" if k == "elapsed_s" and v is not None else normalise(v, tmp))
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [normalise(v, tmp) for v in doc]
    if isinstance(doc, str):
        text = doc.replace(tmp, "<tmp>")
        text = _TIME.sub("<time>", text)
        return _RUN_ID.sub("<id>", _STAMP.sub("<stamp>", text))
    return doc


def golden_name(nodeid: str, suffix: str = ".json") -> str:
    name = nodeid.split("::", 1)[1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") + suffix


def _progress_text(streams: list[io.StringIO], tmp: str) -> str:
    """Each run's progress lines, a ``# run N`` line before each, normalised."""
    out: list[str] = []
    for n, stream in enumerate(streams, 1):
        out.append(f"# run {n}")
        out.extend(_SECONDS.sub("<s>", str(normalise(line, tmp)))
                   for line in stream.getvalue().splitlines())
    return "\n".join(out) + "\n"


def _compare(path: Path, text: str, what: str) -> None:
    update = os.environ.get("SLURM_FSM_UPDATE_GOLDEN")
    if update == "1" or (update == "new" and not path.exists()):
        path.write_text(text)
        return
    assert path.exists(), f"no golden {what} {path}: run with SLURM_FSM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"the {what} differ from {path} (SLURM_FSM_UPDATE_GOLDEN=1 rewrites it after a "
        "change that is meant)")


@pytest.fixture
def golden_reports(request: pytest.FixtureRequest, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Report]]:
    """Every report ``Executor.run`` and ``Executor.interrupted_report`` return during
    the test, compared with the golden file at the end."""
    seen: list[Report] = []
    streams: list[io.StringIO] = []
    run, interrupted, init = Executor.run, Executor.interrupted_report, Executor.__init__

    def recording_run(self: Executor) -> Report:
        report = run(self)
        seen.append(report)
        return report

    def recording_interrupted(self: Executor, why: str) -> Report:
        report = interrupted(self, why)
        seen.append(report)
        return report

    def teeing_init(self: Executor, *args: Any, **kwargs: Any) -> None:
        stream = io.StringIO()
        streams.append(stream)
        shown = StderrEvents(stream=stream, report_follows=True, plain_interval_s=1e9)
        kwargs["events"] = _Tee(kwargs.get("events"), shown)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Executor, "run", recording_run)
    monkeypatch.setattr(Executor, "interrupted_report", recording_interrupted)
    monkeypatch.setattr(Executor, "__init__", teeing_init)
    yield seen
    if not seen:
        return
    tmp = str(tmp_path)
    text = json.dumps([normalise(r.to_dict(), tmp) for r in seen],
                      indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    _compare(GOLDEN / golden_name(request.node.nodeid), text, "reports")
    _compare(GOLDEN / golden_name(request.node.nodeid, ".progress.txt"),
             _progress_text(streams, tmp), "progress lines")
