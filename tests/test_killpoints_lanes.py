"""benchmarks/killpoints.py's lanes (issue 39, item 6): the parts that need no Slurm.
Which files name a run, each lane's runs' phases as the controller goes down, a lane
that stops releases the others waiting at a controller restart, and the docs' table."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
try:
    from benchmarks import killpoints
finally:
    sys.path.remove(str(REPO))

A, B = "raaaaaaaaaaaa", "rbbbbbbbbbbbb"


def _owner(root: Path, run_id: str, phase: str, name: str | None = None) -> None:
    work = root / "repo" / "work_dirs"
    work.mkdir(parents=True, exist_ok=True)
    (work / (name or f".slurm_run.{run_id}.owner.json")).write_text(
        json.dumps({"run_id": run_id, "phase": phase}))


def test_a_run_is_named_by_its_owner_record_only(tmp_path: Path) -> None:
    _owner(tmp_path, A, "running")
    _owner(tmp_path, B, "running", name=f".slurm_run.{B}.report.json")
    _owner(tmp_path, B, "running", name=f".slurm_run.fake.{B}.owner.json")
    assert killpoints._run_ids(tmp_path / "repo") == {A}


def test_each_lanes_recent_runs_phases_are_read_apart(tmp_path: Path) -> None:
    one, two = tmp_path / "lane0", tmp_path / "lane1"
    _owner(one, A, "running")
    _owner(two, B, "starting")
    assert killpoints._phases([one, two]) == {"0": {A: "running"}, "1": {B: "starting"}}


def test_a_lane_that_stops_lets_the_others_go_from_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lane 1 has no points left (its --until) while lane 0 waits for it at a
    controller restart: lane 0 stops too, at once, instead of waiting BARRIER_S."""
    def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 0, json.dumps(
            {"status": "PASSED", "allocation_id": "7"}), "")

    def point(lane: killpoints.Lane, kind: str, delay: float, agent: bool,
              ctld: Any = None) -> dict[str, Any]:
        if ctld is not None:
            ctld[0].barrier.wait(timeout=60)
        return {"kind": kind}

    monkeypatch.setattr(killpoints, "_cli", cli)
    monkeypatch.setattr(killpoints, "_point", point)
    barrier = threading.Barrier(2)
    shared = killpoints.Shared(barrier, (tmp_path,), tmp_path)
    lanes = [killpoints.Lane(k, tmp_path, {"job": tmp_path / "job.json"}) for k in (0, 1)]
    far = time.monotonic() + 3600
    waiting = threading.Thread(target=killpoints._lane,
                               args=(lanes[0], shared, 12, 1, far, tmp_path / "0.jsonl"))
    waiting.start()
    killpoints._lane(lanes[1], shared, 0, 1, far, tmp_path / "1.jsonl")
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    kinds = [json.loads(ln).get("kind") for ln in (tmp_path / "0.jsonl").read_text()
             .splitlines()[1:]]
    assert kinds == list(killpoints.KINDS[:killpoints.KINDS.index("ctld")])
    assert json.loads((tmp_path / "0.jsonl").read_text().splitlines()[0])[
        "allocation_id"] == "7"


def _summary(right: int, wrong: int, version: str) -> dict[str, Any]:
    points = [{"kind": "owner", "right": i < right, "lost": False, "never_started": False,
               "lane": i % 2} for i in range(right + wrong)]
    return killpoints.summarize(points, {"slurm": f"slurm-wlm {version}", "lanes": 2,
                                         "cli_import_floor_s": {"median": 0.3},
                                         "load_1min": 3.0, "minutes": 1.0})


def test_the_docs_table_has_a_column_per_results_file(tmp_path: Path) -> None:
    files = []
    for version, (right, wrong) in {"22.05.8": (3, 1), "24.11.5": (2, 0)}.items():
        files.append(tmp_path / f"{version}.json")
        files[-1].write_text(json.dumps({"summary": _summary(right, wrong, version)}))
    text = killpoints.table(files)
    assert text.splitlines()[0] == "| figure | Slurm 22.05.8 | Slurm 24.11.5 |"
    assert "| `owner`: right / wrong / unsettled | 3 / 1 / 0 | 2 / 0 / 0 |" in text
    assert "| points (kill moments); lanes | 4; 2 | 2; 2 |" in text


def test_an_owner_killed_before_the_log_s_last_line_is_right_cancelled() -> None:
    """The 2026-12-07 campaign: an agent killed 80-95 ms before its job's log got its last
    line was counted wrong (rebuilt CANCELLED, the log ending ``end``). The script still
    ran at the kill: CANCELLED is the rule's verdict (and PASSED, had it exited by itself
    first); a log that ended before the kill still asks PASSED."""
    from benchmarks import killpoints

    after = {"kind": "owner", "log_ended": True, "hit_at": 100.0, "log_written_at": 100.09}
    before = {**after, "log_written_at": 99.9}
    assert killpoints._ended_after_hit(after) and not killpoints._ended_after_hit(before)
    assert killpoints._right("owner", "CANCELLED", "rebuilt", True, "agent",
                             ended_after_hit=True)
    assert killpoints._right("owner", "PASSED", "rebuilt", True, "agent",
                             ended_after_hit=True)
    assert not killpoints._right("owner", "CANCELLED", "rebuilt", True, "agent")
    assert not killpoints._right("owner", "FAILED", "rebuilt", True, "agent",
                                 ended_after_hit=True)
