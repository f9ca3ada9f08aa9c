"""Issue 25 item 6: a one-shot run reads the files the job actually wrote.

Where a batch job writes is the script's own ``#SBATCH --output/--error`` (or sbatch's
``slurm-%j.out``), not the spec's ``log_file_pattern``: the run asks Slurm
(``scontrol show job``: ``StdOut=``, ``StdErr=``) and reads those, and falls back to the
pattern, saying so, only when Slurm does not say. Parsers are tested on text recorded
from the real Slurm 22.05 cluster (tests/data/README.md, ``--files``); the run on the
fake cluster, which writes where the script says (``%x``, ``%j``, ``%u``, ``%N``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_slurmcli import answer, manifest, recorded, replay_backend

from slurm_fsm.backend import JobFiles
from slurm_fsm.errors import ControllerUnreachable, JobNotFound
from slurm_fsm.executor import Executor
from slurm_fsm.results import Status
from slurm_fsm.slurmcli import (
    NO_ARRAY_TASK,
    expand_output_pattern,
    parse_sacct_files,
    parse_scontrol_files,
    sacct_files_argv,
    scontrol_show_job_argv,
)
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

PASSING = ("collected 2 items", "===== 2 passed in 0.50s =====")
FAILING = ("collected 2 items", "FAILED tests/test_a.py::test_two - assert 1 == 2",
           "===== 1 failed, 1 passed in 0.50s =====")


# ------------------------------------------------------------------ the parsers


def test_scontrol_text_of_a_finished_job_gives_the_files_it_wrote() -> None:
    """Slurm 22.05's scontrol expands %x, %j, %u but shows %N as it is: the parser
    expands it with BatchHost, and the names are the ones the job wrote (ls)."""
    argv, rc, text, _ = recorded("scontrol_show_job_own_output")
    job = argv[-1]
    assert rc == 0 and "%N" in text  # as recorded: scontrol leaves it
    files = parse_scontrol_files(text, job)
    _, _, listing, _ = recorded("own_output_files")
    folder = Path(manifest()["own_output_files"][1][-1])
    assert files.stdout == folder / f"own-output.sh-{job}.out"
    assert files.stderr == folder / f"own-output.sh-{job}-root-n1.err"
    assert {files.stdout.name, files.stderr.name} <= set(listing.split())
    assert (files.source, files.needs_node) == ("scontrol", False)


def test_scontrol_text_of_a_pending_job_says_the_node_is_not_known_yet() -> None:
    argv, _, text, _ = recorded("scontrol_show_job_own_output_held")
    files = parse_scontrol_files(text, argv[-1])
    assert files.needs_node and str(files.stderr).endswith("-root-%N.err")
    assert files.stdout.name == f"own-output.sh-{argv[-1]}.out"


def test_without_an_error_file_stderr_is_stdout() -> None:
    _, _, text, _ = recorded("scontrol_show_job_completed")
    files = parse_scontrol_files(text, "6")
    assert files.stderr == files.stdout and files.stdout.name == "slurm-6.out"


def test_scontrol_parser_refuses_another_job_and_a_record_without_stdout() -> None:
    _, _, text, _ = recorded("scontrol_show_job_own_output")
    with pytest.raises(JobNotFound):
        parse_scontrol_files(text, "99")
    with pytest.raises(ValueError, match="no StdOut"):
        parse_scontrol_files("JobId=4 JobName=x\n   JobState=RUNNING\n", "4")


def test_a_path_with_spaces_is_read_to_the_end_of_its_line() -> None:
    text = ("JobId=7 JobName=a b\n   BatchHost=n2\n   WorkDir=/w d\n"
            "   StdErr=/w d/x y-%N.err\n   StdIn=/dev/null\n   StdOut=rel dir/o-7.out\n")
    files = parse_scontrol_files(text, "7")
    assert files.stdout == Path("/w d/rel dir/o-7.out")
    assert files.stderr == Path("/w d/x y-n2.err")


@pytest.mark.parametrize(("pattern", "expanded"), [
    # the name Slurm 22.05's batch step gave this pattern (job 3 on node n1, user root)
    ("sub/%x.%j.%N.%n.%t.%s.%A.%a.%%.out",
     f"sub/p.sh.3.n1.0.0.batch.3.{NO_ARRAY_TASK}.%.out"),
    ("%x-%j.out", "p.sh-3.out"),
    ("%u_%5j.log", "root_00003.log"),
    ("%J.out", "3.batch.out"),
    ("plain.log", "plain.log"),
    ("no\\%j.out", "no%j.out"),  # a backslash: nothing expanded, only it goes
    ("%q%j", "%q3"),  # not a pattern letter: left
])
def test_expanding_sbatch_filename_patterns(pattern: str, expanded: str) -> None:
    assert expand_output_pattern(pattern, job_id="3", job_name="p.sh", user="root",
                                 node="n1") == expanded


def test_an_unknown_node_leaves_percent_n() -> None:
    assert expand_output_pattern("%x-%N.out", job_id="3", job_name="j") == "j-%N.out"


def test_sacct_files_expands_the_patterns_accounting_keeps() -> None:
    """sacct (23.02 and later) keeps the patterns as given: the row's name, user and
    first node expand them. (Written by hand: 22.05 has no such field.)"""
    row = "12|own.sh|alice|n[2-3]|/w|%x-%j.out|/logs/%u-%N.err\n"
    files = parse_sacct_files(row, "12")
    assert files == JobFiles(job_id="12", stdout=Path("/w/own.sh-12.out"),
                             stderr=Path("/logs/alice-n2.err"), source="sacct")
    with pytest.raises(JobNotFound):
        parse_sacct_files("", "12")
    assert sacct_files_argv("12")[:4] == ["sacct", "-j", "12", "-X"]


def test_the_backend_asks_scontrol_and_nothing_else_while_it_knows_the_job() -> None:
    backend, runner = replay_backend({"scontrol": [answer("scontrol_show_job_own_output")]})
    job = manifest()["scontrol_show_job_own_output"][1][-1]
    files = backend.job_files(job)
    assert files.stderr.name == f"own-output.sh-{job}-root-n1.err"
    assert runner.calls == [scontrol_show_job_argv(job)]


def test_once_scontrol_forgot_the_job_sacct_without_the_field_means_not_found() -> None:
    """22.05: scontrol says "Invalid job id" after MinJobAge, and its sacct has no
    StdOut field: JobNotFound, naming both, so that the run says why it read the
    pattern."""
    backend, runner = replay_backend({"scontrol": [answer("scontrol_invalid_job")],
                                      "sacct": [answer("sacct_files_no_field")]})
    with pytest.raises(JobNotFound) as caught:
        backend.job_files("999999")
    assert "Invalid job id" in str(caught.value)
    assert 'Invalid field requested: "StdOut"' in str(caught.value)
    assert [c[0] for c in runner.calls] == ["scontrol", "sacct"]


def test_an_unreachable_controller_is_not_a_gone_job() -> None:
    backend, runner = replay_backend({"scontrol": [answer("scontrol_controller_down")]})
    with pytest.raises(ControllerUnreachable):
        backend.job_files("5")
    assert [c[0] for c in runner.calls] == ["scontrol"]


# ------------------------------------------------------ one-shot runs on the fake


def one_shot(make_spec: SpecFactory, directives: str, **over: object) -> JobSpec:
    """A one-shot spec whose log_file_pattern is ``llama_%j.out`` and whose script
    says ``directives``."""
    spec = make_spec(persistent_mode=False, log_file_pattern="llama_%j.out",
                     workflow_type="pytest", **over)
    spec.script_path.write_text(f"#!/bin/bash\n{directives}#SBATCH -t 00:10:00\nsrun x\n")
    return spec


def run(spec: JobSpec, fake: FakeCluster):  # type: ignore[no-untyped-def]
    return Executor(spec, fake, clock=fake.clock).run()


def test_the_scripts_own_output_is_read_and_named(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = one_shot(make_spec, "#SBATCH --output=%x-%j.out\n", success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PASSING))
    report = run(spec, fake)
    job = report.job_id or ""
    wrote = spec.work_dir / f"{spec.script_path.name}-{job}.out"
    assert report.status is Status.PASSED, report.render_text()
    assert report.metrics["passed"] == 2
    assert report.log_files == {"stdout": str(wrote), "stderr": str(wrote)}
    assert any(f"output read from {wrote}, where Slurm says job {job} writes" in n
               and f"not from {spec.work_dir / f'llama_{job}.out'}" in n
               for n in report.notes), report.notes


def test_a_separate_error_file_is_read_too(make_spec: SpecFactory) -> None:
    """``-e`` with %u and %N (the first node): the failure written to stderr counts."""
    fake = FakeCluster(user="alice")
    spec = one_shot(make_spec, "#SBATCH -o out/%x-%j.out\n#SBATCH -e out/%u-%N-%j.err\n")
    (spec.work_dir / "out").mkdir(parents=True)  # sbatch makes no folder
    fake.script(spec.script_path, FakeScript(lines=("collected 2 items",), exit_code=1,
                                             err_lines=FAILING[1:]))
    report = run(spec, fake)
    job = report.job_id or ""
    err = spec.work_dir / "out" / f"alice-node01-{job}.err"
    assert report.status is Status.FAILED, report.render_text()
    assert report.log_files["stderr"] == str(err)
    assert report.err_tail == list(FAILING[1:])
    assert "tests/test_a.py::test_two" in report.render_text()


def test_when_the_pattern_is_where_the_job_writes_nothing_is_said(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = one_shot(make_spec, "#SBATCH --output=llama_%j.out\n#SBATCH --error=llama_%j.err\n")
    fake.script(spec.script_path, FakeScript(lines=PASSING))
    report = run(spec, fake)
    job = report.job_id or ""
    assert report.status is Status.PASSED
    assert report.log_files == {"stdout": str(spec.work_dir / f"llama_{job}.out"),
                                "stderr": str(spec.work_dir / f"llama_{job}.err")}
    assert not any("output read from" in n for n in report.notes), report.notes


def test_slurm_asked_again_after_the_end_when_it_did_not_answer_at_first(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    fake.fail_next("job_files", ControllerUnreachable("connect failure"))
    spec = one_shot(make_spec, "#SBATCH --output=%x-%j.out\n")
    fake.script(spec.script_path, FakeScript(lines=PASSING))
    report = run(spec, fake)
    assert report.status is Status.PASSED, report.render_text()
    assert fake.count("job_files") == 2
    assert report.log_files["stdout"] == str(
        spec.work_dir / f"{spec.script_path.name}-{report.job_id}.out")


def test_when_slurm_never_says_the_pattern_is_read_and_the_report_says_so(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    fake.fail_next("job_files", ControllerUnreachable("connect failure"), times=2)
    spec = one_shot(make_spec, "#SBATCH --output=%x-%j.out\n", success_patterns="passed")
    fake.script(spec.script_path, FakeScript(lines=PASSING))
    report = run(spec, fake)
    job = report.job_id or ""
    pattern = spec.work_dir / f"llama_{job}.out"
    # what every run did before issue 25 item 6: the pattern's file is empty
    assert report.status is Status.FAILED, report.render_text()
    assert any(d["symptom"] == "empty output log" for d in report.diagnosis)
    assert report.log_files["stdout"] == str(pattern)
    assert any(f"Slurm did not say where job {job} writes" in n
               and f"read log_file_pattern's {pattern}" in n for n in report.notes), \
        report.notes


def test_a_pattern_that_waits_for_a_node_is_read_once_the_job_has_one(
        make_spec: SpecFactory) -> None:
    """While the job pends, Slurm shows %N unexpanded: the run asks again at the end
    and reads the files whole."""
    fake = FakeCluster(pending_s=30)
    spec = one_shot(make_spec, "#SBATCH --output=%N-%j.out\n")
    fake.script(spec.script_path, FakeScript(lines=FAILING, exit_code=1))
    report = run(spec, fake)
    job = report.job_id or ""
    assert report.status is Status.FAILED, report.render_text()
    assert report.log_files["stdout"] == str(spec.work_dir / f"node01-{job}.out")
    assert report.metrics["failed"] == 1
    assert fake.count("job_files") == 2


def test_the_fake_forgets_where_a_job_wrote_after_min_job_age(make_spec: SpecFactory) -> None:
    fake = FakeCluster(min_job_age_s=10)
    spec = one_shot(make_spec, "#SBATCH --output=%x-%j.out\n")
    run(spec, fake)
    job = next(iter(fake.jobs))
    assert fake.job_files(job).stdout.name == f"{spec.script_path.name}-{job}.out"
    fake.clock.advance(60)
    with pytest.raises(JobNotFound, match="MinJobAge"):
        fake.job_files(job)


def test_a_pending_job_s_files_are_followed_and_asked_again_after_its_end(
        make_spec: SpecFactory) -> None:
    """Without %N, the names Slurm gives a pending job are already right: followed
    while the job runs (a hang line in them is acted on), and the same after its end."""
    fake = FakeCluster(pending_s=30)
    spec = one_shot(make_spec, "#SBATCH --output=%x-%j.out\n")
    fake.script(spec.script_path, FakeScript(lines=("a", "Hang detected after 60 seconds."),
                                             hang=True))
    report = run(spec, fake)
    assert report.status is Status.HANG_DETECTED, report.render_text()
    assert fake.jobs[report.job_id or ""].state == "CANCELLED"
    assert fake.count("job_files") == 2
    assert report.log_files["stdout"] == str(
        spec.work_dir / f"{spec.script_path.name}-{report.job_id}.out")
