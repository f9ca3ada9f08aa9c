"""The FakeCluster does what real pyxis 0.24 + enroot 4.1 do (measured on the local
cluster; tests/integration/test_parity.py runs the same scenarios on both), and the
reports of pyxis errors carry their lines and a diagnosis row."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.backend import ContainerOptions, StepRequest, StepResult
from slurm_fsm.executor import Executor
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.results import Status, diagnose, setup_error_lines
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")


def alloc(fake: FakeCluster, nodes: int = 2) -> str:
    return fake.make_job("x", fake.user, nodes=nodes).job_id


def step(fake: FakeCluster, job: str, *argv: str, nodes: int = 2, **container: object
         ) -> StepResult:
    return fake.run_step(StepRequest(job_id=job, argv=argv or ("true",), nodes=nodes,
                                     container=ContainerOptions(**container)))  # type: ignore[arg-type]


def test_named_container_per_node_outlives_its_job() -> None:
    fake = FakeCluster()
    job = alloc(fake)
    assert step(fake, job, name="c", image="/img/a.sqsh").exit_code == 0
    fake.end_job(job)
    assert [n for n, node in fake.nodes.items() if "c" in node.containers] == \
        ["node01", "node02"]
    later = alloc(fake)
    assert step(fake, later, name="c").exit_code == 0  # the old one, no image needed


def test_name_reused_with_another_image_keeps_the_old_container() -> None:
    fake = FakeCluster()
    job = alloc(fake)
    step(fake, job, name="c", image="/img/a.sqsh")
    assert step(fake, job, name="c", image="/img/b.sqsh").exit_code == 0  # rc 0, silently
    assert fake.nodes["node01"].containers["c"].image == "/img/a.sqsh"
    assert step(fake, job, name="c", image="/img/b.sqsh", fresh=True).exit_code == 0
    assert fake.nodes["node01"].containers["c"].image == "/img/b.sqsh"


def test_a_fresh_import_never_removes_another_checkouts_container() -> None:
    """Issue 20 item 3, as SubprocessBackend's removal step does it on real enroot."""
    fake = FakeCluster()
    job = alloc(fake)
    mine = "slurm_fsm:repo=aaaa /home/u/a"
    assert step(fake, job, name="c", image="/img/a.sqsh", fresh=True, owner=mine).exit_code == 0
    theirs = step(fake, job, name="c", image="/img/b.sqsh", fresh=True,
                  owner="slurm_fsm:repo=bbbb /home/u/b")
    assert theirs.exit_code == 3
    assert "belongs to another checkout: /home/u/a (slurm_fsm:repo=aaaa)" in theirs.stderr
    assert fake.nodes["node01"].containers["c"].image == "/img/a.sqsh"
    again = step(fake, job, name="c", image="/img/b.sqsh", fresh=True, owner=mine)
    assert again.exit_code == 0  # its own: replaced
    assert fake.nodes["node01"].containers["c"].image == "/img/b.sqsh"


def test_read_only_without_writable() -> None:
    fake = FakeCluster()
    job = alloc(fake)
    step(fake, job, name="c", image="/img/a.sqsh")
    ro = step(fake, job, "pip", "install", "-e", ".", name="c")
    assert ro.exit_code == 1 and "Read-only file system" in ro.stderr
    assert step(fake, job, "pip", "install", "-e", ".", name="c", writable=True).exit_code == 0
    assert fake.nodes["node01"].containers["c"].packages == ["pip install -e ."]


@pytest.mark.parametrize(("options", "line"), [
    ({"image": "/nope.sqsh"}, "pyxis: failed to create container filesystem for image: "
                              "/nope.sqsh"),
    ({"image": "nvcr.io#nv/x:1"}, "pyxis: failed to import docker image: nvcr.io#nv/x:1"),
    ({"image": "/img/a.sqsh", "mounts": "/nodir:/x"},
     "pyxis: --container-mounts: source path does not exist: /nodir"),
    ({}, 'pyxis: error: a container with name "pyxis_c" does not exist, and '
         "--container-image is not set"),
])
def test_error_texts(options: dict[str, str], line: str) -> None:
    fake = FakeCluster(path_exists=lambda p: p.startswith("/img"), registry=False)
    result = step(fake, alloc(fake), name="c", **options)
    assert result.exit_code == 1
    assert f"slurmstepd-node01: error: {line}" in result.stderr.splitlines()
    assert f"slurmstepd-node02: error: {line}" in result.stderr.splitlines()
    assert line in setup_error_lines(result.stderr)


def test_setup_error_lines_once_without_node_prefix_or_noise() -> None:
    text = ("slurmstepd-n1: error: pyxis: child 1 failed with error code: 1\n"
            "slurmstepd-n1: error: pyxis: failed to create container filesystem for image: /x\n"
            "slurmstepd-n1: error: pyxis: printing enroot log file:\n"
            "slurmstepd-n1: error: pyxis:     [ERROR] No such file or directory: /x\n"
            "slurmstepd-n2: error: pyxis: failed to create container filesystem for image: /x\n"
            "srun: error: n2: task 1: Exited with exit code 1\n")
    assert setup_error_lines(text) == [
        "pyxis: failed to create container filesystem for image: /x",
        "pyxis:     [ERROR] No such file or directory: /x",
    ]


def test_diagnosis_rows_of_container_errors() -> None:
    def symptoms(text: str) -> list[str]:
        return [r["symptom"] for r in diagnose(Status.ERROR, exit_code=None, slurm_state=None,
                                               log_empty=False, log_lines=text.splitlines())]
    assert "pyxis: failed to import docker image" in symptoms(
        "pyxis: failed to import docker image: x\ncurl: (6) Could not resolve host: x")
    assert "pip install failed in the container" in symptoms(
        "pip install -e . failed with exit code 1:\nERROR: boom")
    assert "pyxis: the container already exists" in symptoms(
        'pyxis: error: "create" flag was passed to --container-name but the container '
        "already exists")
    assert not [s for s in symptoms("all fine") if "pyxis" in s or "pip" in s]


@pytest.mark.parametrize(("over", "symptom", "step0"), [
    ({"docker_image": "/nope.sqsh"}, "pyxis: failed to create container filesystem for image",
     "Importing"),
    ({"docker_image": "registry.invalid/x:1"}, "pyxis: failed to import docker image",
     "Importing"),
    ({"container_mounts": "/nodir:/x"}, "pyxis: --container-mounts: source path does not exist",
     "Importing"),
])
def test_reports_of_import_errors(make_spec: SpecFactory, over: dict[str, str], symptom: str,
                                  step0: str, tmp_path: Path) -> None:
    fake = FakeCluster(path_exists=lambda p: p == "/img/a.sqsh", registry=False)
    fields = {"docker_image": "/img/a.sqsh", "container_name": "c", "workflow_type": "custom",
              "skip_install": True, **over}
    spec = make_spec(**fields)
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.ERROR
    assert symptom in [r["symptom"] for r in report.diagnosis]
    assert any(e.startswith("pyxis: ") for e in report.errors[1:])
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Failed and m.failure is not None
    assert m.failure.step == step0
    assert m.alloc is not None and m.alloc.container_name is None  # the next run imports
    assert len(fake.active_jobs()) == 1  # the allocation stays
