"""The exact container command lines of steps 0E and 0F, as srun argv.

The machine is driven on the fake cluster; every step it asks for is rendered by the
real backend's pure builder (what SubprocessBackend would run).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import ContainerOptions, StepRequest
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import CommandResult, SubprocessBackend
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
PYXIS_IMAGE = "nvcr.io#nvidia/pytorch:24.05-py3"


def step_argvs(fake: FakeCluster) -> list[list[str]]:
    return [slurmcli.srun_step_argv(c.args["request"]) for c in fake.calls if c.op == "run_step"]


def once(job: str, repo: str, what: str, argv: Sequence[str]) -> list[str]:
    key = "\0".join((job, repo, f"install llama_auto_test {what}"))
    return slurmcli.once_argv(argv, key, slurmcli.ONCE_DIR_CONTAINER)


def test_0e_import_warm_install_command_lines(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec(docker_image=IMAGE, container_name="llama_auto_test",
                     container_mounts="/data:/data:ro,/home/u/repo:/workspace",
                     slurm_params={"nodes": 2})
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    job = m.alloc.job_id if m.alloc else ""
    mounts = "--container-mounts=/data:/data:ro,/home/u/repo:/workspace"
    # setup steps are helpers: beside the allocation's jobs, with no GPU of theirs
    base = ["srun", f"--jobid={job}", "-N", "2", "--ntasks-per-node=1", "--overlap",
            "--gres=none"]
    repo = str(spec.repo_root)
    assert step_argvs(fake) == [
        [*base, f"--container-image={PYXIS_IMAGE}", "--container-name=llama_auto_test:create",
         mounts, "true"],
        # one warm-up step, one ls loop over both targets (procedure.md 0E.2)
        [*base, "--container-name=llama_auto_test", mounts, "sh", "-c",
         'for d in /data /workspace; do ls "$d" > /dev/null || true; done'],
        # the installs: node-locked, each done once per node (issue 28)
        [*base, f"--chdir={repo}", "--container-name=llama_auto_test", mounts,
         "--container-writable", f"--container-workdir={repo}",
         *once(job, repo, "pip install -e .", ("pip", "install", "-e", "."))],
        [*base, f"--chdir={repo}", "--container-name=llama_auto_test", mounts,
         "--container-writable", f"--container-workdir={repo}",
         *once(job, repo, "pip install -r requirements-dev.txt",
               ("pip", "install", "-r", "requirements-dev.txt"))],
    ]
    install = step_argvs(fake)[2]
    assert install[-4:] == ["pip", "install", "-e", "."]
    script = install[install.index("-c") + 1]
    assert 'exec flock "$lock"' in script  # the node-local lock
    assert '[ -e "$done" ]' in script  # the marker re-checked under it
    assert install[install.index("-c") + 3] == slurmcli.ONCE_DIR_CONTAINER
    gpu = slurmcli.gpu_processes_argv(job, 2)
    assert gpu[:7] == base and "--container-name" not in " ".join(gpu)  # on the host


def test_0f_container_switch_imports_the_new_name_only(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    first = make_spec(docker_image=IMAGE, container_name="llama", skip_install=True,
                      workflow_type="custom")
    assert AllocationMachine(first, fake, clock=fake.clock).prepare().state is State.Ready
    fake.reset_calls()
    switch = make_spec(docker_image=IMAGE, container_name="mistral", skip_install=True,
                       workflow_type="custom")
    m = AllocationMachine(switch, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    job = m.alloc.job_id if m.alloc else ""
    assert step_argvs(fake) == [
        ["srun", f"--jobid={job}", "-N", "1", "--ntasks-per-node=1", "--overlap", "--gres=none",
         f"--container-image={PYXIS_IMAGE}", "--container-name=mistral:create", "true"],
    ]


def test_no_image_means_no_container_options(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    m = AllocationMachine(make_spec(), fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
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


# ------------------------------------------------- the owner marks of the removal step


def _removal(tmp_path: Path, tag: str, existing: list[str]) -> subprocess.CompletedProcess[str]:
    """The removal script of a fresh import, run by bash against a stand-in ``enroot``
    (``list`` prints the names in ``containers``, ``remove -f -- NAME`` drops one)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    listing = tmp_path / "containers"
    listing.write_text("".join(f"{n}\n" for n in existing))
    enroot = bin_dir / "enroot"
    enroot.write_text(f"""#!/bin/bash
list={shlex.quote(str(listing))}
case "$1" in
  list) cat "$list" ;;
  remove) grep -vxF -- "$4" "$list" > "$list.new"; mv "$list.new" "$list" ;;
esac
""")
    enroot.chmod(0o755)
    argv = slurmcli.container_remove_argv("7", 1, "c", tag, "/home/u/repo")
    script_args = argv[argv.index("-c") + 1:]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
           "SLURMD_NODENAME": "n1"}
    return subprocess.run(["bash", "-c", *script_args], capture_output=True, text=True,
                          timeout=30, env=env, check=False)


def _mark(tmp_path: Path, name: str = "pyxis_c") -> Path:
    return tmp_path / "home/.local/state/slurm_fsm/containers/n1" / name


def test_removal_marks_the_name_before_the_import(tmp_path: Path) -> None:
    done = _removal(tmp_path, "slurm_fsm:repo=aaaa", [])
    assert done.returncode == 0, done.stderr
    assert _mark(tmp_path).read_text() == "slurm_fsm:repo=aaaa /home/u/repo\n"


def test_removal_refuses_another_checkouts_container(tmp_path: Path) -> None:
    _mark(tmp_path).parent.mkdir(parents=True)
    _mark(tmp_path).write_text("slurm_fsm:repo=bbbb /home/u/other\n")
    done = _removal(tmp_path, "slurm_fsm:repo=aaaa", ["pyxis_c"])
    assert done.returncode == 3
    assert slurmcli.foreign_container(done.stderr) == (
        "n1", "pyxis_c", "slurm_fsm:repo=bbbb /home/u/other")
    assert (tmp_path / "containers").read_text() == "pyxis_c\n"  # not removed
    assert _mark(tmp_path).read_text() == "slurm_fsm:repo=bbbb /home/u/other\n"
    message = slurmcli.foreign_container_message("c", *slurmcli.foreign_container(
        done.stderr) or ("", "", ""))
    assert "belongs to another checkout: /home/u/other (slurm_fsm:repo=bbbb)" in message


@pytest.mark.parametrize("mark", ["slurm_fsm:repo=aaaa /home/u/repo\n", None])
def test_removal_replaces_its_own_or_an_unmarked_container(tmp_path: Path,
                                                           mark: str | None) -> None:
    if mark is not None:
        _mark(tmp_path).parent.mkdir(parents=True)
        _mark(tmp_path).write_text(mark)
    done = _removal(tmp_path, "slurm_fsm:repo=aaaa", ["pyxis_c", "other"])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "containers").read_text() == "other\n"
    assert _mark(tmp_path).read_text() == "slurm_fsm:repo=aaaa /home/u/repo\n"


def test_a_mark_that_cannot_be_written_is_a_warning_not_a_failed_import(
        tmp_path: Path) -> None:
    (tmp_path / "home").write_text("not a folder: the marks cannot be made")
    done = _removal(tmp_path, "slurm_fsm:repo=aaaa", ["pyxis_c"])
    assert done.returncode == 0, done.stderr
    assert "cannot mark pyxis_c on n1" in done.stderr
    assert (tmp_path / "containers").read_text() == ""
