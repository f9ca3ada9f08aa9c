"""Admission by time left (issue 27, part 1) on the fake cluster: every edge of it,
the run history feeding it, and what plan, status and the CLI say.

A job is started on the allocation only when the time left covers its expected
duration plus the 5-minute margin; one that does not fit replaces the allocation once
no other run's job uses it; one that no new allocation could hold is bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm.cli import main
from slurm_fsm.executor import Executor
from slurm_fsm.history import RunEntry, RunHistory, spec_key
from slurm_fsm.lease import AllocationInUse, LeaseGate
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.plan import make_plan
from slurm_fsm.results import Status
from slurm_fsm.runrecord import RunBook
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.testing.fake import CONTROLLER_OPS, FakeClock

from conftest import SpecFactory

HOUR = 3600


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def machine(spec: JobSpec, fake: FakeCluster, **kw: object) -> AllocationMachine:
    return AllocationMachine(spec, fake, clock=fake.clock, **kw)  # type: ignore[arg-type]


def ready_allocation(spec: JobSpec, fake: FakeCluster) -> AllocState:
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    state = m.store.read()
    assert state is not None
    fake.reset_calls()
    return state


def slurm_ops(fake: FakeCluster) -> list[str]:
    return [op for op in fake.ops() if op in CONTROLLER_OPS]


def test_a_job_that_fits_the_time_left_reuses_the_allocation(make_spec: SpecFactory,
                                                              fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=600)
    old = ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 900)  # 15 min left = 10 min expected + 5 min margin
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]
    assert slurm_ops(fake) == ["query_job"]
    assert m.alloc is not None and m.alloc.job_id == old.job_id
    assert "expects 00:10:00 (expected_duration_seconds)" in m.history[-1].reason


def test_a_job_that_does_not_fit_replaces_the_allocation(make_spec: SpecFactory,
                                                          fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=600)
    old = ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 899)  # one second short
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "TooShort", "Allocating", "Ready"]
    assert slurm_ops(fake) == ["query_job", "cancel", "find_jobs", "allocate", "query_job",
                               "granted"]
    assert fake.jobs[old.job_id].state == "CANCELLED"
    assert m.alloc is not None and m.alloc.job_id != old.job_id
    (warning,) = m.warnings
    assert warning.startswith(f"Allocation {old.job_id} has 00:14:59 left; the job expects "
                              "00:10:00 (expected_duration_seconds)")
    assert "not started on it" in warning


def test_a_job_that_does_not_fit_waits_for_the_other_runs_jobs(make_spec: SpecFactory,
                                                                fake: FakeCluster) -> None:
    """Another run's job holds the allocation: it is not cut under that job; the
    gate says whose job it waits for and why, then the allocation is replaced."""
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=1800)
    old = ready_allocation(spec, fake)
    book = RunBook(spec.state_path)
    other = book.start(old.job_id, model="other-model")
    said: list[str] = []

    class Ends(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            book.delete(other)  # the other run's job ends while this run waits

    clock = Ends(fake.clock.now())
    gate = LeaseGate(book, wait_s=600, clock=clock, say=said.append)
    fake.clock.advance(HOUR - 1800)
    m = machine(spec, fake, leases=gate)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "TooShort", "Allocating", "Ready"]
    (waiting,) = said
    assert "waiting before replacing it (TooShort: 00:30:00 left, the job expects " \
           "00:30:00" in waiting
    assert "the allocation ends by " in waiting and " UTC (in 00:30:00) in any case" in waiting
    assert "other-model" in waiting
    assert fake.jobs[old.job_id].state == "CANCELLED"


def test_a_job_that_does_not_fit_is_refused_when_told_not_to_wait(make_spec: SpecFactory,
                                                                   fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=1800)
    old = ready_allocation(spec, fake)
    book = RunBook(spec.state_path)
    book.start(old.job_id, model="other-model")
    fake.clock.advance(HOUR - 1800)
    m = machine(spec, fake, leases=LeaseGate(book, wait_s=0, clock=fake.clock))
    assert m.prepare().state is State.Failed
    assert m.path == ["NoState", "Validating", "TooShort", "Failed"]
    assert m.failure is not None and isinstance(m.failure.error, AllocationInUse)
    assert "TooShort" in m.failure.message and "other-model" in m.failure.message
    assert m.failure.state_file_kept
    assert fake.jobs[old.job_id].state == "RUNNING"  # never cut under the other job
    assert "cancel" not in slurm_ops(fake)


def test_past_runs_decide_when_the_spec_gives_no_figure(make_spec: SpecFactory,
                                                        fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", monitor_timeout_seconds=300)
    history = RunHistory(StatePaths.for_state_file(spec.state_path).history)
    for run_s in (1000.0, 1100.0, 1200.0):  # p95: 20 min
        history.append(RunEntry(key=spec_key(spec), status="PASSED", run_s=run_s))
    old = ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 1500)  # 25 min left = 20 + 5: fits
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready and m.path == ["NoState", "Validating", "Ready"]
    assert m.estimate().source == "history"
    fake.clock.advance(1)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "TooShort", "Allocating", "Ready"]
    assert fake.jobs[old.job_id].state == "CANCELLED"


def test_an_unknown_duration_is_admitted_by_the_margin_alone(make_spec: SpecFactory,
                                                             fake: FakeCluster) -> None:
    """No figure, no history, and a monitor timeout (1 h) no new 1-hour allocation could
    hold: replacing would not help, so the job is admitted as before admission."""
    spec = make_spec(alloc_time_limit="01:00:00")
    ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 360)
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready and m.path == ["NoState", "Validating", "Ready"]
    assert m.estimate().seconds is None and "unknown" in m.history[-1].reason


def test_a_run_that_does_not_fit_runs_on_a_new_allocation_and_is_remembered(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", success_patterns="ok",
                     expected_duration_seconds=1200)
    fake.script(spec.script_path, FakeScript(lines=("ok",) * 10, line_interval_s=60.0))
    first = Executor(spec, fake, clock=fake.clock).run()
    assert first.status is Status.PASSED
    fake.clock.advance(HOUR - 600 - 1500)  # 15 min left now (the job took 10 min)
    second = Executor(spec, fake, clock=fake.clock).run()
    assert second.status is Status.PASSED
    assert second.path[:5] == ["NoState", "Validating", "TooShort", "Allocating", "Ready"]
    assert second.allocation_id != first.allocation_id
    assert fake.jobs[first.allocation_id or ""].state == "CANCELLED"
    assert any("not started on it" in w for w in second.warnings)
    entries = RunHistory(StatePaths.for_state_file(spec.state_path).history).entries()
    assert [e.run_s for e in entries] == [first.elapsed_s, second.elapsed_s]
    assert all(e.status == "PASSED" and e.key == spec_key(spec) for e in entries)
    assert entries[0].queue_wait_s is not None  # both allocated: the lead time recorded
    assert entries[1].queue_wait_s is not None


def test_a_run_records_its_setup_lead_times(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(docker_image="img:1", container_name="c", success_patterns="ok")
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    (entry,) = RunHistory(StatePaths.for_state_file(spec.state_path).history).entries()
    assert entry.queue_wait_s is not None and entry.import_s is not None
    assert entry.install_s is not None and entry.image == "img:1"


def test_an_unwritable_history_never_fails_the_run(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    spec = make_spec(success_patterns="ok")
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    path = StatePaths.for_state_file(spec.state_path).history
    path.mkdir(parents=True)  # a folder where the file should be
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED
    assert any(w.startswith(f"run history not written to {path}") for w in report.warnings)


def write_spec(tmp_path: Path, **over: object) -> Path:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\n")
    data: dict[str, object] = {
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".",
        "slurm_params": {"partition": "debug", "account": "acct"},
    }
    data.update(over)
    path = tmp_path / "job_spec.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("over", "field"), [
    ({"alloc_time_limit": "00:30:00", "expected_duration_seconds": 1800},
     "expected_duration_seconds"),
])
def test_a_job_no_new_allocation_can_hold_exits_2_before_slurm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        over: dict[str, object], field: str) -> None:
    import slurm_fsm.cli as cli

    asked: list[str] = []
    monkeypatch.setattr(cli, "_fake_for", lambda _args: asked.append("backend") or FakeCluster())
    spec = write_spec(tmp_path, **over)
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "BAD_INPUT"
    assert any(p.startswith(f"{field}: the job expects") for p in doc["problems"])
    assert asked == []  # no backend made, no Slurm command
    assert not (tmp_path / "work_dirs").exists()


def test_plan_says_what_admission_decides(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=600)
    plan = make_plan(spec, fake, clock=fake.clock)
    assert plan.admission.startswith("the job expects 00:10:00")
    assert "no running allocation" in plan.admission
    old = ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 1200)
    plan = make_plan(spec, fake, clock=fake.clock)
    assert plan.admission == (f"allocation {old.job_id} has 00:20:00 left; the job expects "
                              "00:10:00 (expected_duration_seconds) + 00:05:00 margin: fits")
    assert plan.would_change == [] and plan.final_state == "Ready"
    fake.clock.advance(301)
    plan = make_plan(spec, fake, clock=fake.clock)
    assert "does not fit, so it is not started on it" in plan.admission
    assert plan.path[:4] == ["NoState", "Validating", "TooShort", "Allocating"]
    assert any(c.startswith("scancel") for c in plan.would_change)
    assert any(c.startswith("salloc") for c in plan.would_change)
    assert "admission: " in plan.render_text() and plan.to_dict()["admission"] == plan.admission
    assert fake.jobs[old.job_id].state == "RUNNING"  # a plan changes nothing


def test_status_shows_the_time_left_against_the_expected_duration(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    from slurm_fsm.allocation import Allocation

    spec = make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=600)
    ready_allocation(spec, fake)
    fake.clock.advance(HOUR - 1200)
    status = Allocation.for_spec(spec, fake).status(spec)
    assert status.admission is not None and status.admission["fits"] is True
    assert status.admission["expected_s"] == 600
    assert status.to_dict()["admission"]["source"] == "expected_duration_seconds"
    assert "admission: this job expects 00:10:00" in status.render_text()
    fake.clock.advance(301)
    later = Allocation.for_spec(spec, fake).status(spec)
    assert later.admission is not None and later.admission["fits"] is False
    assert "does not fit" in later.render_text()
    assert "admission" not in Allocation.for_spec(spec, fake).status().to_dict()
