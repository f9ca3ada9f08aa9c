"""Golden reports: the JSON of every report a fake-cluster scenario ends with, kept in
``tests/data/golden_reports/<test>.json`` and compared on every run, so a change to how
a report is built shows up as a diff of these files.

A test opts in with ``pytestmark = pytest.mark.usefixtures("golden_reports")``. Volatile
parts are normalised: the test's tmp_path, the UTC stamps of run logs, run ids, and the
timing figures (their keys are kept) and ``elapsed_s`` (some scenarios run real
scripts). ``SLURM_FSM_UPDATE_GOLDEN=1`` rewrites the files; ``=new`` writes only the missing
ones (a new test's), leaving every existing file to compare.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.executor import Executor
from slurm_fsm.report import Report

GOLDEN = Path(__file__).parent / "data" / "golden_reports"
_STAMP = re.compile(r"\d{8}T\d{6}(?:\.\d{3})?Z(?:-\d+)?")
_RUN_ID = re.compile(r"\br?[0-9a-f]{12,32}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")


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


def golden_name(nodeid: str) -> str:
    name = nodeid.split("::", 1)[1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") + ".json"


@pytest.fixture
def golden_reports(request: pytest.FixtureRequest, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Report]]:
    """Every report ``Executor.run`` and ``Executor.interrupted_report`` return during
    the test, compared with the golden file at the end."""
    seen: list[Report] = []
    run, interrupted = Executor.run, Executor.interrupted_report

    def recording_run(self: Executor) -> Report:
        report = run(self)
        seen.append(report)
        return report

    def recording_interrupted(self: Executor, why: str) -> Report:
        report = interrupted(self, why)
        seen.append(report)
        return report

    monkeypatch.setattr(Executor, "run", recording_run)
    monkeypatch.setattr(Executor, "interrupted_report", recording_interrupted)
    yield seen
    if not seen:
        return
    text = json.dumps([normalise(r.to_dict(), str(tmp_path)) for r in seen],
                      indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    path = GOLDEN / golden_name(request.node.nodeid)
    update = os.environ.get("SLURM_FSM_UPDATE_GOLDEN")
    if update == "1" or (update == "new" and not path.exists()):
        path.write_text(text)
        return
    assert path.exists(), f"no golden report {path}: run with SLURM_FSM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"the reports differ from {path} (SLURM_FSM_UPDATE_GOLDEN=1 rewrites it after a "
        "change that is meant)")
