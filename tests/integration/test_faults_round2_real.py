"""Round 2 of the fault campaign on the real local Slurm cluster (issue 20): files,
containers, nodes and environment. Each test failed on the code before its fix and
leaves no job behind (the ``names`` fixture cancels what is left of its job names).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from slurm_fsm.errors import AllocationFailed, StateFileError
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames
from .helpers import (
    JobNames,
    RecordingBackend,
    job_state,
    jobs_named,
    make_spec,
    slurm,
    spec_dict,
    steps,
    until,
    wait_gone,
)
from .test_containers_real import NODES, container_spec, image_ids, prepared
from .test_faults_ownership_real import ready
from .test_faults_runtime_real import allocation_of, finish, one_report, spec_file, start_cli

pytestmark = pytest.mark.slurm



@contextlib.contextmanager
def full_tmpfs(where: Path, size_kib: int = 64) -> Iterator[Path]:
    """A tiny tmpfs mounted at ``where`` and filled up: every write there fails with
    ENOSPC, while creating an empty file still works (as on a real full disk)."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                   check=True, timeout=30)
    try:
        for i, chunk in enumerate((b"x" * 4096, b"x")):  # whole blocks, then the rest
            with open(where / f"filler{i}", "wb", buffering=0) as fh, \
                    contextlib.suppress(OSError):
                while True:
                    fh.write(chunk)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def test_salloc_log_is_never_written_through_a_planted_link(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 1: ``work_dirs/.salloc.log`` planted as a link to a file of the running user
    (root here): the file is neither truncated nor written, and nothing is allocated."""
    name = names.new("salloclink")
    spec = make_spec(local_cluster, tmp_path, name)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    spec.salloc_log.parent.mkdir(parents=True)
    spec.salloc_log.symlink_to(victim)
    backend = RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert m.prepare().state is State.Failed
    assert victim.read_text() == "precious\n"
    assert m.failure is not None and ".salloc.log" in m.failure.message
    assert "symbolic link" in m.failure.message
    assert "salloc" not in backend.tools()
    assert jobs_named(name, local_cluster.user) == []


def test_a_full_disk_under_work_dirs_allocates_nothing(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 4: ``work_dirs`` on a full tmpfs: the run fails before salloc, every time,
    with a message naming the state file, and no allocation is leaked."""
    name = names.new("fulldisk")
    spec = make_spec(local_cluster, tmp_path, name)
    with full_tmpfs(spec.state_path.parent):
        backend = RecordingBackend()
        for _ in range(2):
            m = AllocationMachine(spec, backend)
            assert m.prepare().state is State.Failed
            assert m.failure is not None
            assert isinstance(m.failure.error, StateFileError | AllocationFailed)
            assert str(spec.state_path) in m.failure.message
            assert jobs_named(name, local_cluster.user) == []
        assert "salloc" not in backend.tools()
        assert not spec.state_path.exists()


def test_a_state_write_that_fails_after_salloc_cancels_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 4, the other half: the disk fills between the check and the write of the
    pending state (ENOSPC on the write after salloc): the new job is cancelled."""
    name = names.new("fulllate")
    spec = make_spec(local_cluster, tmp_path, name)
    m = AllocationMachine(spec, SubprocessBackend())

    def full(state: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(m.store, "writable_problem", lambda: None)
    monkeypatch.setattr(m.store, "write", full)
    assert m.prepare().state is State.Failed
    assert m.failure is not None and "No space left on device" in m.failure.message
    assert "cancelled" in m.failure.message
    until("the new allocation gone",
          lambda: True if not jobs_named(name, local_cluster.user) else None, 15.0)


def node_of(job_id: str) -> str:
    return slurm("squeue", "-j", job_id, "-h", "-o", "%N").stdout.strip()


@contextlib.contextmanager
def node_downed(node: str) -> Iterator[None]:
    """``scontrol update nodename=NODE state=down``; resumed on the way out."""
    try:
        assert slurm("scontrol", "update", f"nodename={node}", "state=down",
                     "reason=slurm_fsm-test").returncode == 0
        yield
    finally:
        slurm("scontrol", "update", f"nodename={node}", "state=resume")
        until(f"{node} back", lambda: True if slurm(
            "sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() in ("idle", "mixed",
                                                                      "allocated") else None,
              30.0)


def test_a_node_failure_under_a_one_node_allocation_is_not_passed(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 5: Slurm 22.05's srun prints ``srun: error: Node failure on NODE`` and exits
    0 when the one node of its allocation fails; the script then exits 0. The run asks
    Slurm about the allocation after every job: not PASSED, the allocation's fate named."""
    name = names.new("nodefail")
    spec = spec_file(local_cluster, tmp_path, name, "srun sleep 300\n", "job")
    proc = start_cli(spec, tmp_path / "report.json", "--quiet")
    job_id = allocation_of(name, local_cluster)
    until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 60)
    with node_downed(node_of(job_id)):
        rc, _ = finish(proc, 120)
    report = one_report(tmp_path / "report.json")
    assert report["status"] != "PASSED", report
    assert rc != 0
    assert "NODE_FAIL" in report["summary"] or "node" in report["summary"].lower(), report
    assert not (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()


#: Variables of the caller's shell that change what Slurm's tools print or do.
OUTPUT_CHANGING_ENV = {
    "SQUEUE_NAMES": "someone-elses-job",
    "SQUEUE_ACCOUNT": "other",
    "SQUEUE_FORMAT": "%i %j",
    "SQUEUE_SORT": "-i",
    "SQUEUE_STATES": "PENDING",
    "SLURM_TIME_FORMAT": "%s|%H",
    "SACCT_FORMAT": "JobID,State",
    "SINFO_FORMAT": "%N",
    "SCONTROL_ALL": "1",
    "SALLOC_PARTITION": "nosuchpartition",
    "SBATCH_PARTITION": "nosuchpartition",
}


def test_the_callers_slurm_output_variables_change_nothing(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 14: with squeue/sacct/salloc variables in the caller's environment a run
    still finds (and reuses) its own allocation instead of leaking it; the script's
    own srun still gets the allocation's SLURM_* exports."""
    name = names.new("env")
    body = "env | grep -E '^(SQUEUE|SACCT|SALLOC|SBATCH)_' || true\nsrun hostname\n"
    spec = spec_file(local_cluster, tmp_path, name, body, "job")
    reports = []
    for _ in range(2):
        out = tmp_path / "report.json"
        with open(out, "w", encoding="utf-8") as fh:
            proc = subprocess.run(
                [sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json", "--quiet"],
                stdout=fh, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                env={**os.environ, **OUTPUT_CHANGING_ENV})
        reports.append(one_report(out))
        assert proc.returncode == 0, (reports[-1], proc.stderr)
    cold, warm = reports
    assert warm["path"][:3] == ["NoState", "Validating", "Ready"], warm
    assert warm["allocation_id"] == cold["allocation_id"]
    assert len(jobs_named(name, local_cluster.user)) == 1
    assert not any(line.startswith(("SQUEUE_", "SALLOC_")) for line in warm["log_tail"])
    assert warm["log_tail"][-1].startswith("n")  # hostname of a node: srun ran in it


def test_two_checkouts_with_one_container_name_never_share_a_container(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """Item 3: checkout A imports ``busybox`` as NAME; checkout B (another repo_root,
    same user, same nodes, same container_name) asks for ``busybox2`` as NAME. B's
    import neither removes nor reuses A's container: it fails naming checkout A, and
    A's next run still runs in its own image."""
    name = cnames.new("shared")
    spec_a = container_spec(local_cluster, tmp_path / "a", names.new("ct-a"),
                            image=pyxis.images["busybox"], name=name)
    first, backend = prepared(spec_a)
    assert image_ids(first, backend, name) == ["hello from image"] * NODES
    spec_b = container_spec(local_cluster, tmp_path / "b", names.new("ct-b"),
                            image=pyxis.images["busybox2"], name=name)
    b = AllocationMachine(spec_b, RecordingBackend())
    assert b.prepare().state is State.Failed
    assert b.failure is not None
    assert str(spec_a.repo_root) in b.failure.message, b.failure.message
    assert "another checkout" in b.failure.message
    again, backend = prepared(spec_a)
    assert again.path == ["NoState", "Validating", "Ready"]
    assert image_ids(again, backend, name) == ["hello from image"] * NODES


def released(spec: JobSpec) -> AllocationMachine:
    m = AllocationMachine(attrs.evolve(spec, release_allocation=True), SubprocessBackend())
    m.prepare()
    return m


@pytest.mark.parametrize("state_file", ["lost", "corrupt"])
def test_release_without_a_good_state_file_finds_the_allocation_by_its_tag(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, state_file: str) -> None:
    """Item 13: ``release`` with a lost or corrupt state file finds this checkout's
    tagged allocation as ``run`` does, and cancels it; another checkout's stays."""
    name = names.new(f"rel{state_file}")
    spec = make_spec(local_cluster, tmp_path / "a", name)
    other = make_spec(local_cluster, tmp_path / "b", name)
    mine, theirs = (ready(AllocationMachine(s, SubprocessBackend())) for s in (spec, other))
    if state_file == "lost":
        spec.state_path.unlink()
    else:
        spec.state_path.write_text('{"job_id": ')
    m = released(spec)
    assert m.state is State.Released, m.failure
    assert m.released_job_id == mine
    wait_gone(mine)
    assert job_state(theirs) == "RUNNING"
    assert not spec.state_path.exists()


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i path``: nobody, root included, can delete or replace it."""
    subprocess.run(["chattr", "+i", str(path)], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False, timeout=30)


def test_release_that_cannot_delete_the_state_file_says_it_cancelled(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 15: the allocation is cancelled, the state file cannot be removed (a
    state file that cannot be deleted, ``chattr +i``): the error says both."""
    name = names.new("relro")
    spec = make_spec(local_cluster, tmp_path, name)
    job_id = ready(AllocationMachine(spec, SubprocessBackend()))
    with immutable(spec.state_path):
        m = released(spec)
    assert m.state is State.Failed
    assert m.failure is not None
    assert f"allocation {job_id} was cancelled" in m.failure.message.lower()
    assert str(spec.state_path) in m.failure.message
    wait_gone(job_id)
    spec.state_path.unlink()


OTHER_USER = "sfm-rel2b"


@pytest.fixture
def other_user(local_cluster: ClusterInfo) -> str:
    """A second unix user (created here, as root) with an association on the cluster."""
    if subprocess.run(["id", OTHER_USER], capture_output=True, timeout=30,
                      check=False).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/bin/bash", OTHER_USER], check=True,
                       timeout=30)
    slurm("sacctmgr", "-i", "add", "user", OTHER_USER, f"Account={local_cluster.account}",
          f"DefaultAccount={local_cluster.account}")
    return OTHER_USER


def as_other_user_python() -> list[str]:
    """A Python the other user may run: the venv's may live under root's own home
    (pyenv); the system's of the same minor version then runs with the venv's packages."""
    if subprocess.run(["runuser", "-u", OTHER_USER, "--", sys.executable, "-c", ""],
                      capture_output=True, timeout=30, check=False).returncode == 0:
        return [sys.executable]
    return [f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"]


def other_user_pythonpath() -> str:
    import slurm_fsm

    repo = Path(slurm_fsm.__file__).resolve().parent.parent
    return os.pathsep.join([str(repo), *(p for p in sys.path if p.endswith("site-packages"))])


def test_a_second_user_on_the_same_repo_root_refuses_instead_of_taking_over(
        local_cluster: ClusterInfo, names: JobNames, other_user: str) -> None:
    """Item 11: two unix users share one repo_root (a group-shared checkout, here a
    world-writable one). The second user's run does not overwrite the first's state
    file nor allocate its own: it fails naming the owner, allocates nothing, and the
    first user's next run reuses its allocation (no "orphan" cancelled)."""
    base = Path(tempfile.mkdtemp(prefix="sfm-rel2-shared-", dir="/tmp"))
    try:
        name = names.new("twousers")
        data = spec_dict(local_cluster, base, name)
        for d in (base, base / "repo", base / "repo" / "work_dirs", base / "work"):
            d.mkdir(exist_ok=True)
            d.chmod(0o777)
        spec_path = base / "job.json"
        spec_path.write_text(json.dumps(data))
        spec = JobSpec.from_dict(data)
        first = ready(AllocationMachine(spec, SubprocessBackend()))
        before = spec.state_path.read_bytes()
        lock = spec.state_path.with_name(spec.state_path.name + ".lock")
        if lock.exists():  # as in a group-shared checkout: the lock lets the other in
            lock.chmod(0o666)
        proc = subprocess.run(
            ["runuser", "-u", other_user, "--", *as_other_user_python(), "-m", "slurm_fsm",
             "run", str(spec_path), "--json", "--quiet"],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "HOME": str(base), "PYTHONPATH": other_user_pythonpath()})
        assert proc.returncode != 0, proc.stdout
        assert proc.stdout.strip(), proc.stderr
        report = json.loads(proc.stdout)
        assert report["status"] == "BAD_INPUT" and proc.returncode == 2, report
        assert "root" in report["summary"] and str(spec.state_path) in report["summary"], \
            report["summary"]
        assert jobs_named(name, other_user) == []
        assert spec.state_path.read_bytes() == before
        m = AllocationMachine(spec, SubprocessBackend())
        assert ready(m) == first
        assert m.path == ["NoState", "Validating", "Ready"]
    finally:
        slurm("scancel", "-u", other_user)
        shutil.rmtree(base, ignore_errors=True)
