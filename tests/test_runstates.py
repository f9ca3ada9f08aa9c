"""A run's own states (issue 39 item 7): one table that the owner's writes follow, the
docs' drawing and table, and ``slurm-fsm diagram --part``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurm_fsm.cli import main
from slurm_fsm.report import Report, Status
from slurm_fsm.runowner import OwnedRun, Owner, RunFiles
from slurm_fsm.runstates import (
    LOST,
    RUN_EDGES,
    RunEvent,
    RunPhase,
    next_phase,
    run_mermaid,
    run_states_markdown,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
RUN_ID = "r0123456789ab"


def _phase(files: RunFiles) -> str:
    data = json.loads(files.owner_path(RUN_ID).read_text())
    return str(data["phase"])


def _owned(tmp_path: Path) -> tuple[RunFiles, OwnedRun]:
    files = RunFiles(tmp_path / ".slurm_fsm_state.json")
    owned = OwnedRun(files, RUN_ID, Owner.FOREGROUND, spec_path="spec.yaml")
    assert owned.begin(mode="persistent", spec={}) == []
    return files, owned


def test_an_owned_run_moves_along_the_table(tmp_path: Path) -> None:
    files, owned = _owned(tmp_path)
    seen = [_phase(files)]
    owned.started(log="job.log", job_id=None, allocation_id="7")
    seen.append(_phase(files))
    owned.script_ended(0)
    seen.append(_phase(files))
    passed = Report(status=Status.PASSED, task_type="custom", mode="persistent", exit_code=0)
    assert owned.save(passed) is None
    seen.append(_phase(files))
    assert seen == ["starting", "running", "ended", "done"]
    walked = list(zip(["(none)", *seen], seen, strict=False))
    for source, dest in walked:
        assert any(source in e.sources and e.dest == dest for e in RUN_EDGES), (source, dest)


def test_a_late_write_never_takes_a_judged_run_back(tmp_path: Path) -> None:
    files, owned = _owned(tmp_path)
    owned.started(log="job.log", job_id=None, allocation_id="7")
    assert owned.save(Report(status=Status.CANCELLED, task_type="custom", mode="persistent",
                                      exit_code=130)) is None
    owned.started(log="other.log", job_id=None, allocation_id="8")  # e.g. a late event
    owned.script_ended(0)
    data = json.loads(files.owner_path(RUN_ID).read_text())
    assert (data["phase"], data["log"], data["exit_code"]) == ("done", "job.log", None)


@pytest.mark.parametrize(("current", "event", "expected"), [
    (None, RunEvent.BEGIN, RunPhase.STARTING),
    (RunPhase.STARTING, RunEvent.STARTED, RunPhase.RUNNING),
    (RunPhase.STARTING, RunEvent.SCRIPT_ENDED, None),
    (RunPhase.ENDED, RunEvent.STARTED, None),
    (RunPhase.DONE, RunEvent.STARTED, None),
    (RunPhase.DONE, RunEvent.JUDGED, RunPhase.DONE),
    (RunPhase.RUNNING, RunEvent.OWNER_GONE, None),  # lost is a reader's, never written
])
def test_next_phase(current: RunPhase | None, event: RunEvent,
                    expected: RunPhase | None) -> None:
    assert next_phase(current, event) is expected


def test_every_phase_is_reached_and_lost_only_by_a_reader() -> None:
    dests = {e.dest for e in RUN_EDGES}
    assert {p.value for p in RunPhase} | {LOST} == dests
    assert {e.by for e in RUN_EDGES if LOST in (e.dest, *e.sources)} == {"reader"}


def test_the_docs_show_the_table_and_drawing_the_code_has() -> None:
    page = (DOCS / "detach.md").read_text()
    blocks = re.findall(r"```mermaid\n(.*?)```", page, re.S)
    assert blocks == [run_mermaid()]
    assert run_states_markdown() in page


@pytest.mark.parametrize(("part", "fmt", "must"), [
    ("run", "mermaid", "%% slurm_fsm part: run"),
    ("run", "dot", '"lost" -> "done"'),
    ("core", "mermaid", "%% slurm_fsm part: core"),
    ("admission", "dot", '"TooShort"'),
])
def test_diagram_part(part: str, fmt: str, must: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--part", part, "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert must in out
    if part == "admission":
        assert "Switching" not in out  # one drawing, not the whole machine


def test_diagram_part_unknown_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--part", "detached"]) == 2
    assert "--part" in capsys.readouterr().err
