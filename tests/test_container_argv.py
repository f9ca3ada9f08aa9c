"""The exact container command lines of steps 0E and 0F, as srun argv.

The machine is driven on the fake cluster; every step it asks for is rendered by the
real backend's pure builder (what SubprocessBackend would run).
"""

from __future__ import annotations

from slurm_fsm import slurmcli
from slurm_fsm.machine import AllocationMachine, State
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
    base = ["srun", f"--jobid={job}", "-N", "2", "--ntasks-per-node=1"]
    repo = str(spec.repo_root)
    assert step_argvs(fake) == [
        [*base, f"--container-image={PYXIS_IMAGE}", "--container-name=llama_auto_test",
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
    assert gpu[:5] == base and "--container-name" not in " ".join(gpu)  # on the host


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
        ["srun", f"--jobid={job}", "-N", "1", "--ntasks-per-node=1",
         f"--container-image={PYXIS_IMAGE}", "--container-name=mistral", "true"],
    ]


def test_no_image_means_no_container_options(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    m = AllocationMachine(make_spec(), fake, clock=fake.clock)
    assert m.prepare() is State.Ready
    assert step_argvs(fake) == []
    assert any("skipped" in n for n in m.notes)
