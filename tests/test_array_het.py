"""Array and heterogeneous batch jobs (issue 44 items 1 and 2), on the outputs recorded on
the real Slurm 22.05 cluster (tests/data/real/local/slurm/arrays_hetjobs.txt): every task
or component is read, the worst decides, and a job is not judged while a part of it has
not ended."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import JobOutcome, part_of, worst_part
from slurm_fsm.cli import main
from slurm_fsm.errors import JobNotFound, SpecError
from slurm_fsm.executor import Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.results import Status
from slurm_fsm.scriptcheck import batch_job_problems
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

RECORDED = (Path(__file__).parent / "data" / "real" / "local" / "slurm"
            / "arrays_hetjobs.txt")


def recorded(block: str, command: str) -> str:
    """The output of the first command of ``block`` starting with ``command``."""
    text = RECORDED.read_text(encoding="utf-8")
    body = re.split(r"(?m)^## ", text)
    found = next(b for b in body if b.startswith(block + " "))
    for cmd in re.split(r"(?m)^\$ ", found)[1:]:
        line, _, out = cmd.partition("\n")
        if line.startswith(command):
            return out.rsplit("[exit ", 1)[0]
    raise KeyError(f"{block}: no {command!r}")


# ------------------------------------------------------------------------- squeue
def test_a_running_array_is_active_though_squeue_lists_only_its_tasks() -> None:
    info = slurmcli.parse_job(recorded("issue_array_running", "squeue"), "11")
    assert info.job_id == "11" and info.state is JobState.RUNNING and info.is_active
    assert info.parts == ("11_2", "11_1", "11_0")


def test_a_pending_het_job_is_pending_though_squeue_lists_only_its_components() -> None:
    info = slurmcli.parse_job(recorded("issue_het_pending", "squeue"), "12")
    assert info.state is JobState.PENDING and info.parts == ("12+0", "12+1")


def test_the_pending_rest_of_a_throttled_array_is_a_part() -> None:
    info = slurmcli.parse_job(recorded("throttled_array_running", "squeue"), "6")
    assert info.state is JobState.PENDING and info.parts == ("6_[0-2%1]",)


def test_an_ended_array_has_no_squeue_row() -> None:
    with pytest.raises(JobNotFound):
        slurmcli.parse_job(recorded("issue_array_ended", "squeue"), "11")


def test_another_jobs_parts_are_not_this_jobs() -> None:
    assert part_of("16_0", "16") and part_of("16_[1-2%1]", "16") and part_of("19+1", "19")
    assert not part_of("160_0", "16") and not part_of("16", "16")
    assert not part_of("1+0", "16") and not part_of("16.batch", "16")


# -------------------------------------------------------------------------- sacct
def test_an_array_is_judged_by_every_task_the_failed_one_decides() -> None:
    outcome = slurmcli.parse_sacct(recorded("issue_array_ended", "sacct"), "11")
    assert outcome is not None
    assert [(p.job_id, str(p.state), p.exit_code) for p in outcome.parts] == [
        ("11_0", "COMPLETED", 0), ("11_1", "FAILED", 1), ("11_2", "COMPLETED", 0)]
    assert outcome.state is JobState.FAILED and outcome.exit_code == 1
    assert {s.job_id for s in outcome.steps} == {"11_0.batch", "11_1.batch", "11_2.batch"}


def test_an_array_accounting_still_shows_as_pending_is_not_final() -> None:
    """While the tasks ran, sacct showed ``11 PENDING`` (and ``11.batch RUNNING``)."""
    outcome = slurmcli.parse_sacct(recorded("issue_array_running", "sacct"), "11")
    assert outcome is not None and outcome.state.is_active


def test_a_het_job_is_read_from_its_component_rows() -> None:
    outcome = slurmcli.parse_sacct(recorded("issue_het_ended", "sacct"), "12")
    assert outcome is not None
    assert outcome.state is JobState.COMPLETED and outcome.exit_code == 0
    assert [p.job_id for p in outcome.parts] == ["12+0", "12+1"]
    assert {s.job_id for s in outcome.steps} == {"12+0.batch", "12+0.0", "12+1.0"}


def test_a_het_job_pending_in_accounting_is_not_final() -> None:
    outcome = slurmcli.parse_sacct(recorded("het_pending_accounting", "sacct"), "2")
    assert outcome is not None and outcome.state is JobState.PENDING
    assert [p.job_id for p in outcome.parts] == ["2+0", "2+1"]


def test_a_het_job_with_no_accounting_row_yet_is_unknown() -> None:
    assert slurmcli.parse_sacct(recorded("issue_het_pending", "sacct"), "12") is None


# ----------------------------------------------------------------------- scontrol
def test_scontrol_of_an_array_is_every_task_not_its_first_record() -> None:
    """The first record of ``scontrol show job 11`` is task 2 (COMPLETED): the array
    failed by task 1."""
    outcome = slurmcli.parse_scontrol_job(recorded("issue_array_ended", "scontrol"), "11")
    assert outcome.state is JobState.FAILED and outcome.exit_code == 1
    assert [p.job_id for p in outcome.parts] == ["11_0", "11_1", "11_2"]


def test_scontrol_of_a_pending_het_job_keeps_it_active() -> None:
    outcome = slurmcli.parse_scontrol_job(recorded("issue_het_pending", "scontrol"), "12")
    assert outcome.state is JobState.PENDING
    assert [p.job_id for p in outcome.parts] == ["12+0", "12+1"]


def test_the_true_exit_code_is_each_tasks_own() -> None:
    """scontrol's records replace sacct's exit code task by task, never task 2's for the
    whole array (the first record)."""
    sacct = slurmcli.parse_sacct(recorded("throttled_array_ended", "sacct"), "6")
    controller = slurmcli.parse_scontrol_job(recorded("throttled_array_ended", "scontrol"), "6")
    assert sacct is not None
    true = slurmcli.with_true_exit_code(sacct, controller)
    assert true.state is JobState.FAILED and true.exit_code == 3
    assert [p.exit_code for p in true.parts] == [0, 0, 3]


def test_each_array_task_names_its_own_files() -> None:
    files = slurmcli.parse_scontrol_files(recorded("issue_array_ended", "scontrol"), "11")
    assert [t.stdout.name for t in files.tasks] == [
        "slurm-11_0.out", "slurm-11_1.out", "slurm-11_2.out"]
    assert [t.job_id for t in files.tasks] == ["11_0", "11_1", "11_2"]
    assert not files.tasks_pending and "4294967294" not in str(files.stdout)


def test_tasks_not_started_name_no_file() -> None:
    """The pending record shows %a as 4294967294: no task's file."""
    files = slurmcli.parse_scontrol_files(recorded("throttled_array_running", "scontrol"),
                                          "6")
    assert files.tasks == () and files.tasks_pending


def test_a_het_job_writes_where_component_0_says() -> None:
    files = slurmcli.parse_scontrol_files(recorded("issue_het_ended", "scontrol"), "12")
    assert files.stdout.name == "slurm-12.out" and files.tasks == ()


# ------------------------------------------------------------------ the worst part
def _part(job_id: str, state: str, code: int = 0, signal: int = 0) -> JobOutcome:
    return JobOutcome(job_id=job_id, state=state, exit_code=code, signal=signal)


@pytest.mark.parametrize(("states", "worst"), [
    (["COMPLETED", "FAILED", "COMPLETED"], 1),
    (["COMPLETED", "RUNNING"], 1),
    (["FAILED", "TIMEOUT"], 1),
    (["CANCELLED", "OUT_OF_MEMORY", "TIMEOUT"], 1),
    (["COMPLETED", "COMPLETED"], 0),
])
def test_the_worst_part_decides(states: list[str], worst: int) -> None:
    parts = [_part(f"5_{i}", s, 1 if s == "FAILED" else 0) for i, s in enumerate(states)]
    assert worst_part(parts) is parts[worst]


def test_a_completed_part_with_a_signal_is_worse_than_one_that_passed() -> None:
    parts = [_part("5+0", "COMPLETED"), _part("5+1", "COMPLETED", 0, 9)]
    assert worst_part(parts) is parts[1]
    whole = JobOutcome.of_parts("5", parts)
    assert whole.exit_status == 137 and whole.parts == tuple(parts)


# --------------------------------------------------------- the fake cluster, one-shot
def _script(tmp_path: Path, header: str, body: str = "srun true\n") -> str:
    path = tmp_path / "job.slurm"
    path.write_text("#!/bin/bash\n" + header + body)
    return str(path)


def _one_shot(make_spec: SpecFactory, tmp_path: Path, header: str) -> JobSpec:
    return make_spec(script_path=_script(tmp_path, header), persistent_mode=False,
                     log_file_pattern="slurm-%j.out")


def test_the_fake_runs_an_array_task_by_task_and_the_failed_task_decides(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster()
    fake.script("job.slurm", FakeScript(lines=("3 passed in 0.10s",), tasks={
        1: FakeScript(lines=("1 failed, 2 passed in 0.10s",), exit_code=1)}))
    spec = _one_shot(make_spec, tmp_path, "#SBATCH --array=0-2\n")
    report = Executor(spec, fake, clock=fake.clock).run()
    job = report.job_id
    assert report.status is Status.FAILED and report.exit_code == 1, report.render_text()
    assert [(p["id"], p["state"], Path(p["log"]).name) for p in report.metrics["parts"]] == [
        (f"{job}_0", "COMPLETED", f"slurm-{job}_0.out"),
        (f"{job}_1", "FAILED", f"slurm-{job}_1.out"),
        (f"{job}_2", "COMPLETED", f"slurm-{job}_2.out")]
    assert (report.metrics["passed"], report.metrics["failed"]) == (8, 1)
    assert "3 array tasks, 1 did not pass" in report.summary


def test_the_fake_judges_a_het_job_by_every_component(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster(pending_s=30.0)  # both components wait, as for the backfill
    fake.script("job.slurm", FakeScript(lines=("3 passed in 0.10s",)))
    spec = _one_shot(make_spec, tmp_path, "#SBATCH --nodes=1\n#SBATCH hetjob\n"
                     "#SBATCH --nodes=1\n")
    report = Executor(spec, fake, clock=fake.clock).run()
    job = report.job_id
    assert report.status is Status.PASSED, report.render_text()
    assert [(p["id"], p["state"]) for p in report.metrics["parts"]] == [
        (f"{job}+0", "COMPLETED"), (f"{job}+1", "COMPLETED")]
    assert fake.jobs[f"{job}+0"].nodes != fake.jobs[f"{job}+1"].nodes


def test_a_het_component_ends_as_component_0_does_on_the_fake(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    """Recorded (het_script_fails_ended): every component FAILED 3:0."""
    fake = FakeCluster()
    fake.script("job.slurm", FakeScript(exit_code=3))
    spec = _one_shot(make_spec, tmp_path, "#SBATCH hetjob\n")
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.FAILED and report.exit_code == 3
    assert [(p["state"], p["exit_code"]) for p in report.metrics["parts"]] == [
        ("FAILED", 3), ("FAILED", 3)]


# ------------------------------------------------------------ persistent: refused
@pytest.mark.parametrize(("header", "said"), [
    ("#SBATCH --array=0-2\n", "#SBATCH --array makes an array job"),
    ("#SBATCH -a 1-3\n", "#SBATCH --array makes an array job"),
    ("#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N1\n", "#SBATCH hetjob makes a heterogeneous"),
])
def test_persistent_mode_refuses_an_array_or_het_script_before_slurm_is_asked(
        make_spec: SpecFactory, tmp_path: Path, header: str, said: str) -> None:
    spec = make_spec(script_path=_script(tmp_path, header))
    fake = FakeCluster()
    with pytest.raises(SpecError) as err:
        Executor(spec, fake, clock=fake.clock).run()
    (problem,) = err.value.problems
    assert problem.startswith(f"script_path: {spec.script_path}: ") and said in problem
    assert "persistent_mode: false" in problem
    assert fake.calls == []


def test_a_commented_out_array_line_or_a_one_shot_spec_is_no_problem(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    assert batch_job_problems(make_spec(script_path=_script(
        tmp_path, "##SBATCH --array=0-2\n"))) == []
    assert batch_job_problems(_one_shot(make_spec, tmp_path, "#SBATCH --array=0-2\n")) == []


def test_the_cli_refuses_a_persistent_array_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\n#SBATCH --array=0-2\nsrun true\n")
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "repo_root": ".", "slurm_params": {"partition": "debug", "account": "acct"}}))
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "BAD_INPUT"
    assert any("#SBATCH --array makes an array job" in p for p in doc["problems"])


@pytest.mark.parametrize(("text", "ids"), [
    ("0-2", [0, 1, 2]), ("1,5-9:2%2", [1, 5, 7, 9]), ("3", [3]), ("0-3%1", [0, 1, 2, 3])])
def test_an_array_index_list_is_read_as_sbatch_reads_it(text: str, ids: list[int]) -> None:
    assert slurmcli.array_task_ids(text) == ids


@pytest.mark.parametrize("text", ["", "x", "3-1", "1-4:0"])
def test_an_index_list_sbatch_would_refuse_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="not an --array index list"):
        slurmcli.array_task_ids(text)


def test_an_array_is_not_judged_by_the_bare_row_accounting_shows_while_it_lags(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    """Real Slurm 22.05, once: at the array's end sacct had only ``13 COMPLETED`` (task 2,
    which kept the id) and the array was judged COMPLETED, exit 0; the tasks' rows came a
    moment later. The fake lags the same way."""
    fake = FakeCluster()
    fake.accounting_lag_s = 2.0
    fake.script("job.slurm", FakeScript(tasks={1: FakeScript(exit_code=1)}))
    report = Executor(_one_shot(make_spec, tmp_path, "#SBATCH --array=0-2\n"), fake,
                      clock=fake.clock).run()
    assert report.status is Status.FAILED and report.exit_code == 1, report.render_text()
    assert report.slurm_state == "FAILED"


@pytest.mark.parametrize(("header", "parts"), [
    ("#SBATCH --array=0-1\n", ["7_0", "7_1"]),
    ("#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N1\n#SBATCH hetjob\n", ["7+0", "7+1", "7+2"]),
    ("#SBATCH -N1\n", []),
])
def test_the_parts_accounting_must_list(header: str, parts: list[str]) -> None:
    assert slurmcli.batch_parts("#!/bin/bash\n" + header + "srun true\n", "7") == parts
