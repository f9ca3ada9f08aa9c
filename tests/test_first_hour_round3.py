"""Issue 41, "the first hour", items 5 and 8: what a new user meets in a first hour
(progress lines, report lines, notebook cells, the fake's output) says what happens.
On the fake cluster; each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm import Allocation, Status
from slurm_fsm.cli import main
from slurm_fsm.events import Events
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

PYTEST_OK = ("===== 3 passed in 2.50s =====",)
#: the reports of these tests' runs are kept in tests/data/golden_reports/ (each test
#: marked so; not run_many's, whose four runs end in any order)
GOLDEN = pytest.mark.usefixtures("golden_reports")


def write_spec(tmp_path: Path, **over: object) -> Path:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\necho all done\n")
    data: dict[str, object] = {
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".", "success_patterns": "all done",
        "slurm_params": {"partition": "debug", "account": "acct"},
    }
    data.update(over)
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps(data))
    return spec


# ------------------------------------------- 5a. a passing one-shot job has no "why"

@GOLDEN
@pytest.mark.parametrize("persistent", [False, True])
def test_the_progress_of_a_passing_job_points_at_no_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], persistent: bool) -> None:
    over: dict[str, object] = {"persistent_mode": persistent}
    if not persistent:
        over["log_file_pattern"] = "m_%j.out"
    assert main(["run", str(write_spec(tmp_path, **over)), "--backend", "fake"]) == 0
    err = capsys.readouterr().err
    assert "(why:" not in err, err
    if not persistent:
        assert "[slurm-fsm] Monitoring: job " in err, err


@GOLDEN
def test_a_failed_run_still_points_at_the_report_for_its_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, slurm_params={"partition": "gpu", "account": "acct"})
    assert main(["run", str(spec), "--backend", "fake"]) == 3
    err = capsys.readouterr().err
    assert "[slurm-fsm] Done (why: in the report)" in err, err


# ---------------------------------- 5b. an ERROR before salloc names no old salloc log

@GOLDEN
@pytest.mark.parametrize("persistent", [True, False])
def test_an_error_before_salloc_names_no_old_salloc_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], persistent: bool) -> None:
    over: dict[str, object] = {"persistent_mode": persistent}
    if not persistent:  # one-shot: no salloc at all, and no sbatch before the pre-flight
        over["log_file_pattern"] = "m_%j.out"
    spec = write_spec(tmp_path, slurm_params={"partition": "gpu", "account": "acct"}, **over)
    old = tmp_path / "work_dirs" / ".salloc.fake.log"
    old.parent.mkdir()
    old.write_text("salloc: Granted job allocation 7 (yesterday)\n")
    assert main(["run", str(spec), "--backend", "fake"]) == 3
    out = capsys.readouterr().out
    # persistent: the pre-flight's words; one-shot: sbatch's own (no pre-flight there)
    assert ("no partition 'gpu'" if persistent else "invalid partition specified: gpu") in out
    assert ".salloc" not in out, out
    assert main(["run", str(spec), "--backend", "fake", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["log_files"]["stderr"] is None, doc["log_files"]
    assert not any("yesterday" in line for line in doc.get("log_tail", [])), doc


# ------------------------------- 5c. run_many's runs do not wait "for another run"

class Said(Events):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def test_run_many_runs_never_say_they_wait_for_another_run(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    specs = [make_spec(model_name=name) for name in ("llama", "mistral", "qwen", "phi")]
    fake.script(specs[0].script_path, FakeScript(lines=PYTEST_OK))
    said = Said()
    alloc = Allocation(specs[0].repo_root, fake, events=said)
    reports = alloc.run_many(specs)
    assert [r.status for r in reports] == [Status.PASSED] * 4
    waits = [t for t in said.lines if "another run" in t]
    assert not waits, waits
    assert not [n for r in reports for n in r.notes if "another run" in n]


# -------------------------------------- 5d. stepping by hand says how to run the job

def test_a_machine_stepped_to_running_says_how_to_run_the_job(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    assert "run()" in m.next_step and "pre-flight" in m.next_step
    assert m.run() and m.state is State.Running
    assert m.alloc is not None
    hint = m.next_step
    assert "Allocation(" in hint and ".run(spec)" in hint and "finish()" in hint, hint
    assert f"SLURM_JOB_ID={m.alloc.job_id}" in hint, hint
    assert hint in m._repr_markdown_()


# -------------------------------- 5e. possible_edges() in a notebook cell is readable

def test_possible_edges_display_as_the_lines_print_shows(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    m = AllocationMachine(make_spec(), fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    edges = m.possible_edges()
    shown = repr(edges)
    assert "PossibleEdge(" not in shown and "Edge(" not in shown, shown[:300]
    assert shown.splitlines() == [str(p) for p in edges]
    assert edges[0].edge.trigger in ("run", "release")  # still a list of PossibleEdge


# -------------------------------- 5f. the fake's first stdout line is the real one's form

@GOLDEN
@pytest.mark.parametrize("command", ["run", "status"])
def test_the_fake_results_first_line_has_the_real_form(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    from slurm_fsm.cli import FAKE_LABEL

    spec = write_spec(tmp_path)
    assert main(["run", str(spec), "--backend", "fake", "--quiet"]) == 0
    if command == "status":
        capsys.readouterr()
        assert main(["status", str(spec), "--backend", "fake"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("  " + FAKE_LABEL), first
    real_form = first[:-len("  " + FAKE_LABEL)]
    if command == "run":
        assert real_form.split()[0] == "PASSED" and real_form.startswith("PASSED  ("), first
    else:
        assert "allocation" in real_form.lower(), first


@GOLDEN
def test_the_persistent_running_line_names_the_work_dir(make_spec: SpecFactory) -> None:
    """Issue 41, item 6 (conformance): procedure step 1 runs ``bash <script>`` in the
    work dir; the "Running ..." line said where the log went but not where the script
    ran."""
    from slurm_fsm.events import Events
    from slurm_fsm.executor import Executor
    from slurm_fsm.testing import FakeCluster

    said: list[str] = []

    class Said(Events):
        def message(self, text: str) -> None:
            said.append(text)

    spec = make_spec()
    report = Executor(spec, FakeCluster(), events=Said()).run()
    assert report.status.name == "PASSED"
    (line,) = [t for t in said if t.startswith("Running ")]
    assert f" in {spec.work_dir} on allocation " in line, line
