"""``slurm-fsm plan``: a dry run of step 0 that changes nothing and tells the truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm import cli
from slurm_fsm.cli import main
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.plan import make_plan
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster, make_spec


def pending_allocation(spec: JobSpec, fake: FakeCluster) -> str:
    """A Ready allocation of ``spec`` whose job Slurm now shows PENDING (requeued, or a
    run interrupted while it waited)."""
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready and m.alloc is not None
    job = fake.jobs[m.alloc.job_id]
    job.state, job.pending_until = "PENDING", fake.clock.now() + 10_000
    fake.reset_calls()
    return m.alloc.job_id


def test_plan_on_a_pending_allocation_reports_it_pending(tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    job_id = pending_allocation(spec, fake)
    before = spec.state_path.read_bytes()
    plan = make_plan(spec, fake, clock=fake.clock)
    assert plan.final_state == "Validating" and plan.waits_for == job_id
    assert plan.path == ["NoState", "Validating", "Validating"]
    assert not any("Failed" in r or "failure" in r for r in plan.reasons + plan.warnings)
    assert f"a run would wait for allocation {job_id}" in plan.render_text()
    assert plan.would_change == []
    assert [op for op in fake.ops() if op != "current_user"] == ["query_job"]
    assert fake.clock.slept == [] and spec.state_path.read_bytes() == before


def test_cli_plan_on_a_pending_allocation_exits_0(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    job_id = pending_allocation(spec, fake)
    path = tmp_path / "job_spec.json"
    path.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": str(spec.work_dir), "model_name": "llama",
        "repo_root": "repo", "slurm_params": {"partition": "batch", "account": "acct"},
        "workflow_type": spec.workflow_type.value,
    }))
    monkeypatch.setattr(cli, "_fake_for", lambda _spec: fake)
    assert main(["plan", str(path), "--json", "--backend", "fake"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["final_state"] == "Validating" and out["waits_for"] == job_id


def test_plan_json_commands_are_argv_lists(tmp_path: Path) -> None:
    fake = FakeCluster()
    plan = make_plan(make_spec(tmp_path), fake, clock=fake.clock)
    doc = json.loads(json.dumps(plan.to_dict()))
    commands = doc["commands"]
    assert commands and all(set(c) == {"argv", "changes"} for c in commands)
    assert all(isinstance(c["argv"], list) and all(isinstance(a, str) for a in c["argv"])
               for c in commands)
    assert not any("(asked)" in a for c in commands for a in c["argv"])
    salloc = [c for c in commands if c["argv"][0] == "salloc"]
    assert len(salloc) == 1 and salloc[0]["changes"] is True
    squeue = [c for c in commands if c["argv"][0] == "squeue"]
    assert squeue and all(c["changes"] is False for c in squeue)
    assert doc["would_change"][0].startswith("salloc --no-shell")
    text = plan.render_text()
    assert "   (asked)" in text and "salloc --no-shell" in text
