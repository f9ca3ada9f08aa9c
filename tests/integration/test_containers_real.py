"""The container path (procedure.md 0E/0F) on real pyxis + enroot, 2 nodes.

The local cluster builds pyxis and enroot from the vendored sources and makes its test
images without a registry (``ClusterInfo.containers``). Without the sources these tests
skip with one line; with them they run and fail, never skip. Every container they make
is removed again (:class:`~tests.integration.containers.ContainerNames`), every job
cancelled (:class:`~tests.integration.helpers.JobNames`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.localcluster import ClusterInfo, ContainerInfo
from slurm_fsm.machine import AllocationMachine, State
from slurm_fsm.spec import JobSpec

from .containers import ContainerNames, in_container, make_install_repo, pyxis_or_skip
from .helpers import JobNames, RecordingBackend, make_spec, wait_gone

pytestmark = pytest.mark.slurm

NODES = 2


@pytest.fixture
def pyxis(local_cluster: ClusterInfo) -> ContainerInfo:
    return pyxis_or_skip(local_cluster)


@pytest.fixture
def names(local_cluster: ClusterInfo) -> Iterator[JobNames]:
    n = JobNames(local_cluster.user)
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def cnames(pyxis: ContainerInfo, names: JobNames) -> Iterator[ContainerNames]:
    c = ContainerNames(pyxis)
    try:
        yield c
    finally:
        c.cleanup()  # after the jobs (``names`` is torn down later: it was asked first)


def container_spec(cluster: ClusterInfo, root: Path, job_name: str, *, image: Path,
                   name: str, install: bool = False, **over: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "docker_image": str(image), "container_name": name,
        "slurm_params": {"nodes": NODES},
    }
    if install:
        repo = make_install_repo(root / "repo")
        fields.update(workflow_type="pytest", container_mounts=f"{repo}:{repo}")
    else:
        fields.update(workflow_type="custom", skip_install=True)
    fields.update(over)
    return make_spec(cluster, root, job_name, **fields)


def prepared(spec: JobSpec, backend: RecordingBackend | None = None
             ) -> tuple[AllocationMachine, RecordingBackend]:
    backend = backend or RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert m.prepare() is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    return m, backend


def imports(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if any(x.startswith("--container-image=") for x in a)]


def installs(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if "pip" in a]


def image_ids(m: AllocationMachine, backend: RecordingBackend, name: str) -> list[str]:
    assert m.alloc is not None
    result = in_container(backend, m.alloc.job_id, NODES, name, "cat", "/etc/image-id")
    assert result.exit_code == 0, result.stderr
    return sorted(result.stdout.split("\n")[:-1])


def test_first_run_imports_on_every_node_and_installs(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("first")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-first"),
                          image=pyxis.images["python"], name=name, install=True)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"]
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    assert sorted(cnames.on_nodes(name)) == ["n1", "n2"]  # a copy on each node
    state = json.loads(spec.state_path.read_text())
    assert state["container_name"] == name and state["installed"] is True
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo, it_devtool, socket; "
                        "print(socket.gethostname(), open('/etc/image-id').read().strip(), "
                        "it_demo.MARKER, it_devtool.MARKER)", mounts=spec.mounts_text)
    assert seen.exit_code == 0, seen.stderr
    assert sorted(seen.stdout.splitlines()) == [
        "n1 python image installed-from-repo devtool",
        "n2 python image installed-from-repo devtool",
    ]


def test_repeated_run_imports_and_installs_nothing(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("again")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-again"),
                          image=pyxis.images["python"], name=name, install=True)
    first, _ = prepared(spec)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id == first.alloc.job_id
    assert imports(backend) == [] and installs(backend) == []
    assert not any(a[0] == "srun" for a in backend.argvs if "nvidia-smi" not in " ".join(a))
    seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo; print(it_demo.MARKER)", mounts=spec.mounts_text)
    assert seen.stdout.splitlines() == ["installed-from-repo"] * NODES, seen.stderr


def test_container_switch_imports_only_the_new_one(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    job_name = names.new("ct-switch")
    old, new = cnames.new("old"), cnames.new("new")
    first, _ = prepared(container_spec(local_cluster, tmp_path, job_name,
                                       image=pyxis.images["busybox"], name=old))
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox"],
                          name=new)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Importing", "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id == first.alloc.job_id
    [imported] = imports(backend)
    assert f"--container-name={new}:create" in imported
    assert not any(f"--container-name={old}" in " ".join(a) for a in backend.argvs)
    assert sorted(cnames.on_nodes(new)) == ["n1", "n2"]
    assert sorted(cnames.on_nodes(old)) == ["n1", "n2"]  # left as it was
    assert json.loads(spec.state_path.read_text())["container_name"] == new


def test_image_change_gets_the_new_image_despite_an_old_container_of_that_name(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """pyxis keeps a named container after its job and silently reuses it for a new
    --container-image: the import must not let the old one through."""
    job_name = names.new("ct-image")
    name = cnames.new("img")
    first, backend = prepared(container_spec(local_cluster, tmp_path, job_name,
                                             image=pyxis.images["busybox"], name=name))
    assert image_ids(first, backend, name) == ["hello from image"] * NODES
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox2"],
                          name=name)
    m, backend = prepared(spec)
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Importing",
                      "Ready"]
    assert m.alloc is not None and first.alloc is not None
    assert m.alloc.job_id != first.alloc.job_id
    assert image_ids(m, backend, name) == ["hello from image2"] * NODES


@pytest.mark.parametrize("how", ["release", "expiry"])
def test_new_allocation_does_not_inherit_an_old_container(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path, how: str) -> None:
    """Same image and name: a new allocation still starts from a fresh container,
    not from the one an earlier allocation left (with its writes) on the nodes."""
    job_name = names.new(f"ct-{how}")
    name = cnames.new(how)
    limit = "00:05:00" if how == "expiry" else "00:30:00"
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["busybox"],
                          name=name, alloc_time_limit=limit)
    first, backend = prepared(spec)
    assert first.alloc is not None
    wrote = in_container(backend, first.alloc.job_id, NODES, name, "sh", "-c",
                         "echo left-behind > /stale", writable=True)
    assert wrote.exit_code == 0, wrote.stderr
    if how == "release":
        gone = AllocationMachine(container_spec(
            local_cluster, tmp_path, job_name, image=pyxis.images["busybox"], name=name,
            release_allocation=True), RecordingBackend())
        assert gone.prepare() is State.Released
        wait_gone(first.alloc.job_id)
    m, backend = prepared(spec)
    expected = (["NoState", "Allocating", "Importing", "Ready"] if how == "release" else
                ["NoState", "Validating", "Expiring", "Allocating", "Importing", "Ready"])
    assert m.path == expected
    assert m.alloc is not None and m.alloc.job_id != first.alloc.job_id
    seen = in_container(backend, m.alloc.job_id, NODES, name, "sh", "-c",
                        "cat /stale 2>/dev/null || echo fresh")
    assert seen.stdout.splitlines() == ["fresh"] * NODES, seen.stderr


def test_read_only_without_writable(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("ro")
    m, backend = prepared(container_spec(local_cluster, tmp_path, names.new("ct-ro"),
                                         image=pyxis.images["busybox"], name=name))
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "touch", "/x")
    assert seen.exit_code == 1 and "Read-only file system" in seen.stderr


def test_no_container_left_by_cleanup(pyxis: ContainerInfo) -> None:
    """The check the session ends with sees containers (it is not blind)."""
    c = ContainerNames(pyxis)
    name = c.new("probe")
    d = pyxis.state_dir / "0" / "n1" / "data" / f"pyxis_{name}"
    d.mkdir(parents=True)
    assert c.leftovers() == [d]
    c.cleanup()
    assert not d.exists()
