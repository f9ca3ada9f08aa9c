"""slurm_fsm.workflows: one class per workflow type, in one registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm import results
from slurm_fsm.results import Status, decide, diagnose
from slurm_fsm.spec import WorkflowType
from slurm_fsm.workflows import WORKFLOWS, Workflow, register, workflow


def test_every_workflow_type_has_one_class() -> None:
    assert set(WORKFLOWS) == set(WorkflowType)
    for kind, wf in WORKFLOWS.items():
        assert wf.type is kind and workflow(kind) is wf


def test_results_has_no_workflow_chains() -> None:
    """The five ``if workflow_type is ...`` chains are gone: results.py asks the registry."""
    source = Path(results.__file__).read_text()
    assert "WorkflowType.PYTEST" not in source and "WorkflowType.EVAL" not in source
    assert "WorkflowType.BENCHMARK" not in source


@pytest.fixture
def fake_workflow(monkeypatch: pytest.MonkeyPatch) -> Workflow:
    """Adding a workflow is one class: here it stands in for CUSTOM."""

    class Gpu(Workflow):
        type = WorkflowType.CUSTOM

        def parse(self, lines: Sequence[str], work_dir: Path) -> dict[str, Any]:
            return {"gflops": [float(x.split()[-1]) for x in lines if x.startswith("GFLOPS")]}

        def summarize(self, metrics: Mapping[str, Any]) -> str:
            return f"{len(metrics['gflops'])} figures"

        def warnings(self, metrics: Mapping[str, Any]) -> list[str]:
            return [] if metrics["gflops"] else ["no GFLOPS line"]

        def verdict(self, metrics: Mapping[str, Any]) -> str | None:
            low = [g for g in metrics["gflops"] if g < 100]
            return f"GFLOPS below 100: {low}" if low else None

        def diagnosis(self, metrics: Mapping[str, Any]) -> list[dict[str, str]]:
            return [{"symptom": "slow GPU", "cause": "c", "advice": "a"}]

    monkeypatch.setitem(WORKFLOWS, WorkflowType.CUSTOM, WORKFLOWS[WorkflowType.CUSTOM])
    register(Gpu)
    return WORKFLOWS[WorkflowType.CUSTOM]


def test_a_new_workflow_is_one_class(fake_workflow: Workflow, tmp_path: Path) -> None:
    kind = WorkflowType.CUSTOM
    metrics = WORKFLOWS[kind].parse(["GFLOPS 50"], tmp_path)
    assert metrics == {"gflops": [50.0]}
    assert WORKFLOWS[kind].summarize(metrics) == "1 figures"
    assert WORKFLOWS[kind].warnings({"gflops": []}) == ["no GFLOPS line"]
    decision = decide(exit_code=0, slurm_state="COMPLETED", hang=False, timed_out=False,
                      success_hits={}, failure_hits={}, success_patterns=[],
                      workflow_type=kind, metrics=metrics)
    assert decision == results.Decision(Status.FAILED, "GFLOPS below 100: [50.0]")
    rows = diagnose(Status.FAILED, exit_code=0, slurm_state=None, log_empty=False,
                    log_lines=[], metrics=metrics, workflow_type=kind)
    assert {"symptom": "slow GPU", "cause": "c", "advice": "a"} in rows


def test_verdicts_of_the_shipped_workflows() -> None:
    assert workflow(WorkflowType.PYTEST).verdict({"failed": 1}) == "pytest: 1 failed, 0 errors"
    assert workflow(WorkflowType.PYTEST).verdict({"passed": 3}) is None
    assert workflow(WorkflowType.EVAL).verdict({"threshold_not_met": True}) == (
        "accuracy below the --check_accuracy threshold")
    assert workflow(WorkflowType.BENCHMARK).verdict({}) is None
    assert workflow(WorkflowType.CUSTOM).verdict({}) is None
