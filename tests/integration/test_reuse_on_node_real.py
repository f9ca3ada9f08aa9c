"""Issue 42 item 1 on real pyxis + enroot (``container_scope=global``, all 3 nodes): after a
release, the next run in a new allocation on the same nodes uses the container the nodes
kept when it was set up from the same image and install inputs (one step reads the key
the install wrote inside it: no import, no install); a changed image or changed install
inputs are imported and installed again, never a stale container.

The fake's twin: tests/test_reuse_on_node.py; the parity scenarios in test_parity.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

from slurm_fsm import slurmcli
from slurm_fsm.machine import SETUP_COLD, SETUP_REUSED, AllocationMachine
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames, in_container
from .helpers import JobNames, RecordingBackend, wait_gone
from .test_containers_real import container_spec, imports, installs

pytestmark = pytest.mark.slurm

COLD = ["NoState", "Allocating", "Importing", "Installing", "Ready"]
REUSED = ["NoState", "Allocating", "Importing", "Ready"]
#: A file planted in the container after the first run: gone once it is imported again.
PLANTED = "/var/lib/slurm_fsm/planted-by-the-test"
#: Every node of the local cluster: the allocation after a release is on the same nodes.
NODES = 3


def _run(spec: JobSpec) -> tuple[AllocationMachine, RecordingBackend]:
    """Step 0 of one run in a new allocation (the state file's was released)."""
    backend = RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert m.prepare().state is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    assert sorted(backend.expand_nodelist(m.alloc.nodelist)) == ["n1", "n2", "n3"]
    return m, backend


def _release(spec: JobSpec, m: AllocationMachine) -> None:
    assert m.alloc is not None
    released = AllocationMachine(attrs.evolve(spec, release_allocation=True),
                                 RecordingBackend())
    assert released.prepare().state is State.Released, released.path
    wait_gone(m.alloc.job_id)


def _plant(m: AllocationMachine, backend: RecordingBackend, name: str) -> None:
    assert m.alloc is not None
    done = in_container(backend, m.alloc.job_id, NODES, name, "sh", "-c",
                        f"echo x > {PLANTED}", writable=True)
    assert done.exit_code == 0, done.stderr


def _sees(m: AllocationMachine, backend: RecordingBackend, spec: JobSpec, name: str
          ) -> list[str]:
    """What the job would see in the container on each node: the installed package,
    the image, the planted file."""
    assert m.alloc is not None
    seen = in_container(backend, m.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo, it_devtool, os; "
                        "print(it_demo.MARKER, it_devtool.MARKER, "
                        "open('/etc/image-id').read().strip(), "
                        f"os.path.exists({PLANTED!r}))", mounts=spec.mounts_text)
    assert seen.exit_code == 0, seen.stderr
    return seen.stdout.splitlines()


def test_after_a_release_the_next_allocation_uses_what_the_nodes_kept(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("reuse")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-reuse"),
                          image=pyxis.images["python"], name=name, install=True,
                          slurm_params={"nodes": NODES})
    first, backend = _run(spec)
    assert (first.path, first.container_setup) == (COLD, SETUP_COLD)
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    _plant(first, backend, name)
    _release(spec, first)
    again, backend = _run(spec)
    assert again.path == REUSED, [t.reason for t in again.history]
    assert again.container_setup == SETUP_REUSED
    assert imports(backend) == [] and installs(backend) == []  # the install ran once in all
    # one step: the keys read, the mounts warmed (no GPUs asked: no GPU check)
    [check] = [a for a in backend.argvs if a[0] == "srun" and a[1].startswith("--jobid=")]
    assert slurmcli.SETUP_KEY_READ in check and str(spec.repo_root) in check
    assert f"--container-name={name}" in check and not any(
        x.startswith("--container-image") for x in check)
    assert _sees(again, backend, spec, name) == [
        "installed-from-repo devtool python image True"] * NODES
    assert again.setup_seconds()["reuse_check_s"] < first.setup_seconds()["import_s"] + \
        first.setup_seconds()["install_s"]


@pytest.mark.parametrize("change", ["image", "requirements"])
def test_a_changed_image_or_install_input_is_imported_and_installed_again(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path, change: str) -> None:
    name = cnames.new(f"change-{change}")
    image = tmp_path / "python-copy.sqsh"
    shutil.copyfile(pyxis.images["python"], image)
    spec = container_spec(local_cluster, tmp_path, names.new(f"ct-change-{change}"),
                          image=image, name=name, install=True,
                          slurm_params={"nodes": NODES})
    first, backend = _run(spec)
    assert first.path == COLD
    _plant(first, backend, name)
    _release(spec, first)
    if change == "image":  # another image file at the same path (rewritten in place)
        with image.open("r+b") as fh:
            fh.seek(0, 2)
            fh.write(b"\0" * 4096)  # squashfs ignores bytes past its end
    else:
        repo = spec.repo_root
        (repo / "requirements-dev.txt").write_text("./devtool\n# pinned again\n")
    again, backend = _run(spec)
    assert (again.path, again.container_setup) == (COLD, SETUP_COLD)
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    assert _sees(again, backend, spec, name) == [
        "installed-from-repo devtool python image False"] * NODES  # a new container
