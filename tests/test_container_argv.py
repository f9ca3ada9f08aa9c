"""The exact container command lines of steps 0E and 0F, as srun argv.

The machine is driven on the fake cluster; every step it asks for is rendered by the
real backend's pure builder (what SubprocessBackend would run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import ContainerOptions, StepRequest
from slurm_fsm.machine import AllocationMachine, State
from slurm_fsm.subprocess_backend import CommandResult, SubprocessBackend
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
PYXIS_IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"


def step_argvs(fake: FakeCluster) -> list[list[str]]:
    return [slurmcli.srun_step_argv(c.args["request"]) for c in fake.calls if c.op == "run_step"]


def test_0e_import_warm_install_command_lines(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec(docker_image=IMAGE, container_name="llama_auto_test",
                     container_mounts="/data:/data:ro,/home/u/repo:/workspace",
                     slurm_params={"nodes": 2})
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare() is State.Ready
    job = m.alloc.job_id if m.alloc else ""
    mounts = "--container-mounts=/data:/data:ro,/home/u/repo:/workspace"
    # setup steps are helpers: beside the allocation's jobs, with no GPU of theirs
    base = ["srun", f"--jobid={job}", "-N", "2", "--ntasks-per-node=1", "--overlap",
            "--gres=none"]
    repo = str(spec.repo_root)
    assert step_argvs(fake) == [
        [*base, f"--container-image={PYXIS_IMAGE}", "--container-name=llama_auto_test:create",
         mounts, "true"],
        [*base, "--container-name=llama_auto_test", mounts, "ls", "/data"],
        [*base, "--container-name=llama_auto_test", mounts, "ls", "/workspace"],
        [*base, f"--chdir={repo}", "--container-name=llama_auto_test", mounts,
         "--container-writable", f"--container-workdir={repo}", "pip", "install", "-e", "."],
        [*base, f"--chdir={repo}", "--container-name=llama_auto_test", mounts,
         "--container-writable", f"--container-workdir={repo}",
         "pip", "install", "-r", "requirements-dev.txt"],
    ]
    gpu = slurmcli.gpu_processes_argv(job, 2)
    assert gpu[:7] == base and "--container-name" not in " ".join(gpu)  # on the host


def test_0f_container_switch_imports_the_new_name_only(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    first = make_spec(docker_image=IMAGE, container_name="llama", skip_install=True,
                      workflow_type="custom")
    assert AllocationMachine(first, fake, clock=fake.clock).prepare() is State.Ready
    fake.reset_calls()
    switch = make_spec(docker_image=IMAGE, container_name="mistral", skip_install=True,
                       workflow_type="custom")
    m = AllocationMachine(switch, fake, clock=fake.clock)
    assert m.prepare() is State.Ready
    job = m.alloc.job_id if m.alloc else ""
    assert step_argvs(fake) == [
        ["srun", f"--jobid={job}", "-N", "1", "--ntasks-per-node=1", "--overlap", "--gres=none",
         f"--container-image={PYXIS_IMAGE}", "--container-name=mistral:create", "true"],
    ]


def test_no_image_means_no_container_options(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    m = AllocationMachine(make_spec(), fake, clock=fake.clock)
    assert m.prepare() is State.Ready
    assert step_argvs(fake) == []
    assert any("skipped" in n for n in m.notes)


def _recording(results: dict[str, int]) -> tuple[SubprocessBackend, list[list[str]]]:
    """A SubprocessBackend whose runner records argv; ``bash`` (the removal) and the
    ``--container-image`` import exit with the codes given."""
    seen: list[list[str]] = []

    def runner(argv: Sequence[str], timeout_s: float, env: Mapping[str, str]) -> CommandResult:
        seen.append(list(argv))
        key = "import" if any(a.startswith("--container-image") for a in argv) else "remove"
        rc = results.get(key, 0)
        return CommandResult(argv=tuple(argv), returncode=rc, stdout="",
                             stderr="enroot: boom\n" if rc else "", seconds=0.1,
                             timeout_s=timeout_s)

    return SubprocessBackend(runner=runner), seen


def fresh_request(job: str = "42", nodes: int = 2) -> StepRequest:
    return StepRequest(job_id=job, argv=("true",), nodes=nodes, container=ContainerOptions(
        name="llama", image="/img/a.sqsh", fresh=True))


def test_fresh_import_removes_the_name_on_every_node_then_creates() -> None:
    backend, seen = _recording({})
    assert backend.run_step(fresh_request()).exit_code == 0
    remove, imp = seen
    assert remove[:5] == ["srun", "--jobid=42", "-N", "2", "--ntasks-per-node=1"]
    assert "--container-name" not in " ".join(remove)  # on the host
    assert remove[5:7] == ["bash", "-c"] and remove[-2:] == ["pyxis_llama", "pyxis_42_llama"]
    assert "enroot remove -f" in remove[7] and "llama" not in remove[7]  # names are args
    assert imp == ["srun", "--jobid=42", "-N", "2", "--ntasks-per-node=1",
                   "--container-image=/img/a.sqsh", "--container-name=llama:create", "true"]


def test_failed_removal_is_the_result_and_nothing_is_imported() -> None:
    backend, seen = _recording({"remove": 1})
    result = backend.run_step(fresh_request())
    assert result.exit_code == 1 and len(seen) == 1
    assert "removing the old container 'llama' before the import failed" in result.stderr
    assert "enroot: boom" in result.stderr


def test_fresh_needs_an_image() -> None:
    with pytest.raises(ValueError, match="needs an image"):
        ContainerOptions(name="x", fresh=True)


def test_reuse_is_plain_name() -> None:
    argv = slurmcli.srun_step_argv(StepRequest(job_id="1", argv=("ls",), nodes=1,
                                               container=ContainerOptions(name="llama")))
    assert "--container-name=llama" in argv and not any(":create" in a for a in argv)
