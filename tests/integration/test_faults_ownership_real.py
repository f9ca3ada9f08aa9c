"""Ownership and state-file faults on the real local Slurm cluster (issue 10, items 3-6
and 13): a copied checkout, a job-name change, a state path that cannot be written, a
FIFO at the state path, a job id that is an option. Each test leaves no job behind
(the ``names`` fixture cancels what is left of its job names).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from slurm_fsm.backend import is_job_id
from slurm_fsm.errors import NotOurJobError
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.ownership import split_comment
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0.table import State, repo_tag
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    RecordingBackend,
    job_state,
    jobs_named,
    make_spec,
    slurm,
    spec_dict,
    wait_gone,
)

pytestmark = pytest.mark.slurm


def ready(m: AllocationMachine) -> str:
    assert m.prepare().state is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    return m.alloc.job_id


def comment_of(job_id: str) -> str:
    """The checkout tag of the job's comment (``squeue %k``: ``<tag>;req=<nonce>``)."""
    comment = slurm("squeue", "-j", job_id, "-h", "-o", "%k").stdout.strip()
    tag, nonce = split_comment(comment)
    assert nonce is not None, comment  # every request carries its nonce
    return tag


def scancels(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if Path(a[0]).name == "scancel"]


@pytest.mark.parametrize("nodes", [1, 2], ids=["compatible", "incompatible"])
def test_copied_checkout_leaves_the_originals_allocation_alone(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, nodes: int) -> None:
    name = names.new("copy")
    original = make_spec(local_cluster, tmp_path / "a", name)
    theirs = ready(AllocationMachine(original, SubprocessBackend()))
    assert comment_of(theirs) == repo_tag(original)
    copy_root = tmp_path / "b" / "repo"
    shutil.copytree(original.repo_root, copy_root)  # cp -r, work_dirs/ included
    copy = make_spec(local_cluster, tmp_path / "b", name, slurm_params={"nodes": nodes})
    assert copy.repo_root == copy_root
    assert json.loads(copy.state_path.read_text())["job_id"] == theirs

    backend = RecordingBackend()
    m = AllocationMachine(copy, backend)
    mine = ready(m)
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert mine != theirs
    assert scancels(backend) == []  # nothing cancelled, least of all theirs
    assert job_state(theirs) == "RUNNING"
    assert any(f"job {theirs}" in w and "another checkout's allocation" in w
               for w in m.warnings)
    assert comment_of(mine) == repo_tag(copy) != repo_tag(original)
    assert json.loads(copy.state_path.read_text())["job_id"] == mine
    # the original still reuses its own
    again = AllocationMachine(original, SubprocessBackend())
    assert ready(again) == theirs
    assert again.path == ["NoState", "Validating", "Ready"]

    # release in the copy cancels the copy's, never the original's
    assert AllocationMachine(attrs.evolve(copy, release_allocation=True),
                             SubprocessBackend()).prepare().state is State.Released
    wait_gone(mine)
    assert job_state(theirs) == "RUNNING"


def test_copy_whose_own_state_file_was_dropped_refuses_to_release_theirs(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("copyrel")
    original = make_spec(local_cluster, tmp_path / "a", name)
    theirs = ready(AllocationMachine(original, SubprocessBackend()))
    shutil.copytree(original.repo_root, tmp_path / "b" / "repo")
    copy = make_spec(local_cluster, tmp_path / "b", name, release_allocation=True)
    m = AllocationMachine(copy, SubprocessBackend())
    assert m.prepare().state is State.Failed
    assert m.failure is not None and isinstance(m.failure.error, NotOurJobError)
    assert job_state(theirs) == "RUNNING"


def test_job_name_change_replaces_the_old_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    old_name, new_name = names.new("oldname"), names.new("newname")
    old = ready(AllocationMachine(make_spec(local_cluster, tmp_path, old_name),
                                  SubprocessBackend()))
    m = AllocationMachine(make_spec(local_cluster, tmp_path, new_name), SubprocessBackend())
    new = ready(m)
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert new != old
    wait_gone(old)
    assert jobs_named(old_name, local_cluster.user) == []
    assert jobs_named(new_name, local_cluster.user) == [(new, "RUNNING")]


def test_job_name_change_without_state_file_finds_the_orphan_by_tag(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    old_name, new_name = names.new("oldorphan"), names.new("neworphan")
    spec = make_spec(local_cluster, tmp_path, old_name)
    old = ready(AllocationMachine(spec, SubprocessBackend()))
    spec.state_path.unlink()
    m = AllocationMachine(make_spec(local_cluster, tmp_path, new_name), SubprocessBackend())
    new = ready(m)
    assert f"Released orphaned allocation {old} - state file was missing." in m.warnings
    wait_gone(old)
    assert jobs_named(old_name, local_cluster.user) == []
    assert jobs_named(new_name, local_cluster.user) == [(new, "RUNNING")]


def test_state_path_that_is_a_directory_allocates_nothing(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("statedir")
    spec = make_spec(local_cluster, tmp_path, name)
    spec.state_path.mkdir(parents=True)
    backend = RecordingBackend()
    for _ in range(2):  # every run: an error, never a leaked allocation
        m = AllocationMachine(spec, backend)
        assert m.prepare().state is State.Failed
        assert jobs_named(name, local_cluster.user) == []
        assert not spec.salloc_log.exists()  # salloc never started
        assert backend.argvs == []  # nor any other Slurm command
        assert m.failure is not None
        assert f"state file {spec.state_path}: is a directory" in m.failure.message


@pytest.mark.parametrize("bad", ["--help", "-1", "12;rm"])
def test_a_job_id_that_is_an_option_never_reaches_squeue(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, bad: str) -> None:
    name = names.new("badid")
    spec = make_spec(local_cluster, tmp_path, name)
    lost = ready(AllocationMachine(spec, SubprocessBackend()))
    data = json.loads(spec.state_path.read_text())
    data["job_id"] = bad
    spec.state_path.write_text(json.dumps(data))

    backend = RecordingBackend()
    # the lost allocation is seconds old: with the grace it would be adopted as another
    # run's (test_nonce_real); here it is the orphan the corrupt id lost
    m = AllocationMachine(spec, backend, orphan_grace_s=0)
    new = ready(m)  # the next run recovers, no hand deletion
    assert backend.argvs and not any(bad in argv for argv in backend.argvs)
    for argv in backend.argvs:  # every id that reached squeue -j / scancel is a job id
        tool = Path(argv[0]).name
        if tool == "scancel" or (tool == "squeue" and "-j" in argv):
            assert is_job_id(argv[argv.index("-j") + 1] if "-j" in argv else argv[1]), argv
    assert any("not a Slurm job id" in w for w in m.warnings)
    wait_gone(lost)  # found by its tag and cancelled, not leaked
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]


def test_run_status_release_on_a_fifo_state_path_do_not_hang(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("fifo")
    data = spec_dict(local_cluster, tmp_path, name)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(data))
    spec = JobSpec.from_dict(data)
    spec.state_path.parent.mkdir(parents=True)

    def cli(command: str) -> subprocess.CompletedProcess[str]:
        if spec.state_path.exists():
            spec.state_path.unlink()
        os.mkfifo(spec.state_path)
        return subprocess.run([sys.executable, "-m", "slurm_fsm", command, str(spec_file)],
                              capture_output=True, text=True, timeout=240, check=False,
                              env={**os.environ, **local_cluster.env})

    status = cli("status")
    assert status.returncode == 2 and "a FIFO, not a regular file" in status.stderr
    run = cli("run")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "a FIFO, not a regular file" in run.stderr
    (job_id, _), = jobs_named(name, local_cluster.user)
    # the FIFO was replaced by the state file of the new allocation
    assert AllocState(**json.loads(spec.state_path.read_text())).job_id == job_id
    release = cli("release")  # the state file is unusable: the allocation found by its tag
    assert release.returncode == 0, release.stderr[-2000:]
    assert "found by this checkout's tag" in release.stdout + release.stderr
    wait_gone(job_id)  # issue 20 item 13: release cancels it, as run would
