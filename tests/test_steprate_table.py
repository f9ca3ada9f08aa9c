"""benchmarks/steprate.py's tables in docs/steprate.md: the whole machine's and the
split machine's (``--split-cpus``) each between their own markers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
try:
    from benchmarks import steprate
finally:
    sys.path.remove(str(REPO))


def _results(split: bool) -> dict[str, Any]:
    res: dict[str, Any] = {
        "reps": 3, "jobs": 24, "parallel": 8, "nodes": 2, "gpus_per_node": 4,
        "median": {"raw_s": 0.5, "run_many_s": 0.8 if split else 1.0},
        "cpu_median": {"raw_s": 0.6, "run_many_s": 1.1},
        "command_total_per_run": 1.0, "commands_per_run": {"squeue": 1.0},
        "command_seconds_per_run": {"squeue": 0.01}, "run_timings_median_s": {"run_s": 0.1},
        "ratios": [1.6 if split else 2.0],
    }
    if split:
        res["split"] = {"cluster_cpu": 0, "login_cpu": 1, "daemons": ["slurmctld"]}
    return res


def test_each_table_goes_between_its_own_markers(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "steprate.md"
    doc.write_text(f"a\n{steprate.TABLE_BEGIN}\nold\n{steprate.TABLE_END}\nb\n"
                   f"{steprate.SPLIT_BEGIN}\n{steprate.SPLIT_END}\nc\n")
    monkeypatch.setattr(steprate, "DOC", doc)
    steprate.update_docs(_results(split=True))
    text = doc.read_text()
    first = text[text.index(steprate.TABLE_BEGIN):text.index(steprate.TABLE_END)]
    second = text[text.index(steprate.SPLIT_BEGIN):text.index(steprate.SPLIT_END)]
    assert "old" in first and "1.60x" not in first
    assert "| 0.80 | 1.60x (target <= 1.5x) |" in second
    assert "Slurm's daemons and every step on CPU 0" in second and "on CPU 1" in second
    steprate.update_docs(_results(split=False))
    text = doc.read_text()
    first = text[text.index(steprate.TABLE_BEGIN):text.index(steprate.TABLE_END)]
    assert "old" not in first and "| 1.00 | 2.00x (target <= 1.5x) |" in first
    assert "split:" not in first
    assert "1.60x" in text  # the split table stays
    assert text.startswith("a\n") and text.endswith("\nc\n")
