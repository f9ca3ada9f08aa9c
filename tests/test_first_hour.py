"""Issue 41, "the first hour": a typo must not cost the warm allocation, a replaced
allocation says why, and a time limit is an upper bound, not an estimate. On the
fake cluster (the real one's twin for item 1: tests/integration/test_preflight_real.py)."""

from __future__ import annotations

import json
import logging

import pytest

from slurm_fsm import Allocation, Status
from slurm_fsm.errors import SpecError
from slurm_fsm.events import PROGRESS_LOGGER
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.plan import make_plan
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

PYTEST_OK = ("===== 3 passed in 2.50s =====",)
#: every report these tests' runs end with is kept in tests/data/golden_reports/
pytestmark = pytest.mark.usefixtures("golden_reports")


def machine(spec: JobSpec, fake: FakeCluster) -> AllocationMachine:
    return AllocationMachine(spec, fake, clock=fake.clock)  # type: ignore[arg-type]


def held(spec: JobSpec, fake: FakeCluster) -> str:
    """A Ready allocation for ``spec``: its job id."""
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.alloc is not None
    fake.reset_calls()
    return m.alloc.job_id


# ------------------------------------------------- 1. a typo costs the warm allocation

@pytest.mark.parametrize("params", [{"partition": "gpu"}, {"account": "nosuch"},
                                    {"gpus_per_node": 9}])
def test_a_spec_the_cluster_cannot_run_leaves_the_held_allocation(
        make_spec: SpecFactory, params: dict[str, object]) -> None:
    fake = FakeCluster(preflight=True)
    good = held(make_spec(), fake)
    before = make_spec().state_path.read_text()
    m = machine(make_spec(slurm_params=params), fake)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "slurm_params." in m.failure.message
    assert "cancel" not in fake.ops()  # asked before anything is cancelled
    assert fake.jobs[good].state == "RUNNING"
    assert make_spec().state_path.read_text() == before  # the state file still names it


def test_the_plan_of_a_misspelt_partition_cancels_nothing(make_spec: SpecFactory) -> None:
    fake = FakeCluster(preflight=True)
    held(make_spec(), fake)
    plan = make_plan(make_spec(slurm_params={"partition": "gpu"}), fake)
    assert plan.final_state == "Failed"
    assert not any(line.startswith("scancel") for line in plan.would_change), plan.would_change
    assert any("no partition 'gpu'" in w for w in plan.warnings), plan.warnings


# ------------------------------------------------- 2. a replaced allocation says why

def test_a_replaced_allocation_says_which_rule_it_broke(make_spec: SpecFactory) -> None:
    fake = FakeCluster(preflight=True)
    old = held(make_spec(slurm_params={"gpus_per_node": 0}), fake)
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    rule = "gpus_per_node 1 is more than the allocation's 0"
    plan = make_plan(spec, fake)
    assert plan.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert any(rule in r for r in plan.reasons), plan.render_text()
    assert rule in plan.render_text()
    assert any(rule in r for r in json.loads(json.dumps(plan.to_dict()))["reasons"])
    lines: list[str] = []
    m = AllocationMachine(spec, fake, clock=fake.clock, log=lines.append)  # type: ignore[arg-type]
    assert m.prepare().state is State.Ready
    into = next(t for t in m.history if t.dest == "Incompatible")
    assert rule in into.reason
    assert any("-> Incompatible]" in line and rule in line for line in lines), lines
    assert any(old in n and rule in n for n in m.notes), m.notes


# ------------------------------------------------- 3. a time limit is an upper bound

def test_a_time_limit_equal_to_the_allocations_is_accepted(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_params={"time_limit": "04:00:00"}, alloc_time_limit="04:00:00")
    assert spec.slurm_params.time_limit == spec.alloc_time_limit
    with pytest.raises(SpecError, match="expected_duration_seconds"):
        make_spec(expected_duration_seconds=4 * 3600, alloc_time_limit="04:00:00")


def test_a_time_limit_longer_than_the_time_left_warns_and_runs(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    old = held(make_spec(), fake)
    fake.clock.advance(4 * 3600 - 19 * 60)  # 19 minutes left of 04:00:00
    spec = make_spec(slurm_params={"time_limit": "00:30:00"})
    m = machine(spec, fake)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Validating", "Ready"]  # no estimate: kept, not replaced
    assert m.alloc is not None and m.alloc.job_id == old
    assert m.run() and m.state is State.Running
    assert any("may be killed early" in w and "00:30:00" in w for w in m.warnings), m.warnings


def test_the_time_limit_warning_is_in_the_report(make_spec: SpecFactory) -> None:
    """The procedure's warning, kept where a user reads a run: the report (persistent
    mode, the only one with an allocation's time left; one-shot asks Slurm for the job's
    own time)."""
    fake = FakeCluster()
    first = make_spec()
    fake.script(first.script_path, FakeScript(lines=PYTEST_OK))
    alloc = Allocation(first.repo_root, fake)
    old = alloc.run(first).allocation_id
    fake.clock.advance(4 * 3600 - 19 * 60)  # 19 minutes left of 04:00:00
    report = alloc.run(make_spec(slurm_params={"time_limit": "00:30:00"}))
    assert (report.status, report.allocation_id) == (Status.PASSED, old), report.render_text()
    assert any("may be killed early" in w and "00:30:00" in w for w in report.warnings), \
        report.warnings
    alloc.release()


# ------------------------------------------------- 4. the library is not silent

def test_the_library_logs_under_slurm_fsm_and_is_quiet_unless_configured() -> None:
    import slurm_fsm  # noqa: F401  (the package sets the library's handler up)

    handlers = logging.getLogger("slurm_fsm").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers), handlers


def test_an_orchestrators_logging_shows_a_replacement_and_the_report_notes_it(
        make_spec: SpecFactory, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeCluster(pending_s=4.0)
    first = make_spec(slurm_params={"gpus_per_node": 0})
    fake.script(first.script_path, FakeScript(lines=PYTEST_OK))
    alloc = Allocation(first.repo_root, fake)  # no Events: the orchestrator's logging only
    old = alloc.run(first).allocation_id
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    with caplog.at_level(logging.INFO, logger="slurm_fsm"):
        report = alloc.run(spec)
    assert report.status is Status.PASSED and report.allocation_id != old
    rule = "gpus_per_node 1 is more than the allocation's 0"
    logged = [(r.name, r.getMessage()) for r in caplog.records]
    assert any(name == PROGRESS_LOGGER and "-> Incompatible]" in text and rule in text
               for name, text in logged), logged
    assert any(f"allocation {old} replaced (Incompatible: {rule}" in n
               for n in report.notes), report.notes
    assert any(f"allocation {report.allocation_id} was PENDING" in n
               for n in report.notes), report.notes  # the wait for the new one
    alloc.release()


def test_the_cli_configures_the_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_fsm.cli import LOG_LEVEL_ENV, configure_logging, main

    assert configure_logging({LOG_LEVEL_ENV: "debug"}) is None
    logger = logging.getLogger("slurm_fsm")
    assert logger.level == logging.DEBUG and not logger.propagate
    (handler,) = [h for h in logger.handlers if not isinstance(h, logging.NullHandler)]
    progress = logging.LogRecord(PROGRESS_LOGGER, logging.INFO, "", 0, "x", None, None)
    backend = logging.LogRecord("slurm_fsm.subprocess_backend", logging.DEBUG, "", 0, "x",
                                None, None)
    assert not handler.filter(progress) and handler.filter(backend)  # shown once
    assert configure_logging({}) is None and logger.level == logging.WARNING
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    assert main(["diagram"]) == 2


def test_a_machine_without_a_callback_logs_its_lines_and_warnings(
        make_spec: SpecFactory, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeCluster()
    held(make_spec(), fake)
    fake.clock.advance(4 * 3600 - 19 * 60)
    with caplog.at_level(logging.INFO):
        machine(make_spec(expected_duration_seconds=1200), fake).prepare()
    ours = [(r.name, r.levelno, r.getMessage()) for r in caplog.records
            if r.name.startswith("slurm_fsm")]
    assert any(level == logging.WARNING and "not started on it" in text
               and not text.startswith("WARNING") for _, level, text in ours), ours
    assert any("-> TooShort]" in text for _, _, text in ours), ours
    assert not [r for r in caplog.records if r.name.startswith("transitions")]  # its noise
