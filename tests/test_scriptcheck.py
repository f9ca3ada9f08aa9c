"""Issue 17 item 9: the script's own ``--container-name`` is compared with the spec's
``container_name`` before Slurm is asked; a mismatch names both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm.cli import main
from slurm_fsm.errors import SpecError
from slurm_fsm.executor import Executor
from slurm_fsm.scriptcheck import container_name_problems, script_container_names
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


@pytest.mark.parametrize(("script", "names"), [
    ("srun --container-name=llama true\n", [(1, "llama")]),
    ("srun --container-image=x --container-name llama true\n", [(1, "llama")]),
    ("srun --container-name='llama' true\n", [(1, "llama")]),
    ('srun --container-name="llama:exec" true\n', [(1, "llama")]),
    ("#SBATCH --container-name=llama\nsrun true\n", [(1, "llama")]),
    ("# srun --container-name=old\nsrun true  # --container-name=old2\n", []),
    ('NAME=llama\nsrun --container-name=${NAME} true\n', [(2, "llama")]),
    ('export NAME="llama"\nsrun --container-name=$NAME true\n', [(2, "llama")]),
    ('srun --container-name=${NAME:-llama} true\n', [(1, "llama")]),
    ('srun --container-name=$NAME true\n', [(1, "$NAME")]),  # set at run time
    ('NAME=a\nNAME=b\nsrun --container-name=$NAME true\n', [(3, "$NAME")]),
    ('srun --container-name=a bash -c "x" && srun --container-name=b y\n',
     [(1, "a"), (1, "b")]),
])
def test_the_scripts_container_names_are_read(script: str,
                                              names: list[tuple[int, str]]) -> None:
    assert script_container_names(script) == names


def _spec(make_spec: SpecFactory, tmp_path: Path, body: str, **over: object):  # type: ignore[no-untyped-def]
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n" + body)
    return make_spec(docker_image=IMAGE, container_name="llama", script_path=str(script),
                     **over)


def test_a_mismatch_names_both_and_no_slurm_command_runs(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    spec = _spec(make_spec, tmp_path, "srun --container-name=llama_test pytest\n")
    problems = container_name_problems(spec)
    assert len(problems) == 1
    assert "--container-name=llama_test" in problems[0] and "'llama'" in problems[0]
    assert problems[0].startswith(f"script_path: line 2 of {spec.script_path}")
    fake = FakeCluster()
    with pytest.raises(SpecError) as err:
        Executor(spec, fake, clock=fake.clock).run()  # type: ignore[arg-type]
    assert err.value.problems == problems
    assert fake.calls == []


@pytest.mark.parametrize("body", [
    "srun --container-name=llama pytest\n",
    "srun --container-name=$RUNTIME_NAME pytest\n",  # decided at run time: not judged
    "srun pytest\n",
])
def test_a_match_or_an_unknowable_name_is_no_problem(
        make_spec: SpecFactory, tmp_path: Path, body: str) -> None:
    assert container_name_problems(_spec(make_spec, tmp_path, body)) == []


def test_one_shot_and_imageless_specs_are_not_judged(make_spec: SpecFactory,
                                                     tmp_path: Path) -> None:
    body = "srun --container-name=other true\n"
    assert container_name_problems(_spec(make_spec, tmp_path, body, persistent_mode=False,
                                         log_file_pattern="x_%j.out")) == []
    script = tmp_path / "plain.slurm"
    script.write_text(body)
    assert container_name_problems(make_spec(script_path=str(script))) == []


def test_the_cli_refuses_it_with_exit_2(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun --container-name=old true\n")
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "repo_root": ".", "docker_image": IMAGE, "container_name": "new",
        "slurm_params": {"partition": "debug", "account": "acct"}}))
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "BAD_INPUT"
    assert any("--container-name=old" in p and "'new'" in p for p in doc["problems"])


# --------------------------------------------------------- 17.15: one-shot #SBATCH lines


@pytest.mark.parametrize(("header", "want", "warned"), [
    ("", ("batch", "acct"), []),
    ("#SBATCH --account=other\n", ("batch", None), ["account=other"]),
    ("#SBATCH -p gpu\n#SBATCH -A acct\n", (None, None), ["partition=gpu"]),
    ("#SBATCH --partition=batch\n", (None, "acct"), []),
])
def test_the_scripts_own_partition_and_account_win(
        make_spec: SpecFactory, tmp_path: Path, header: str,
        want: tuple[str | None, str | None], warned: list[str]) -> None:
    from slurm_fsm.scriptcheck import batch_placement

    script = tmp_path / "one.sh"
    script.write_text("#!/bin/bash\n" + header + "echo done\n")
    spec = make_spec(script_path=str(script), persistent_mode=False,
                     log_file_pattern="one_%j.out")
    partition, account, warnings = batch_placement(spec)
    assert (partition, account) == want
    assert len(warnings) == len(warned)
    for needle, warning in zip(warned, warnings, strict=True):
        assert f"#SBATCH --{needle} is used, not slurm_params." in warning


def test_the_one_shot_submission_leaves_the_scripts_account(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster(accounts=("acct", "other"))
    script = tmp_path / "one.sh"
    script.write_text("#!/bin/bash\n#SBATCH --account=other\n"
                      f"#SBATCH --output={tmp_path}/work/one_%j.out\necho done\n")
    spec = make_spec(script_path=str(script), persistent_mode=False,
                     log_file_pattern="one_%j.out")
    report = Executor(spec, fake, clock=fake.clock).run()  # type: ignore[arg-type]
    request = next(c.args["request"] for c in fake.calls if c.op == "submit")
    assert request.account is None and request.partition == "batch"
    assert fake.jobs[report.job_id or ""].account == "other"
    assert any("--account=other is used" in w for w in report.warnings)
