"""Issue 17 item 8 on the real local cluster with pyxis + enroot: ``skip_install: true``
must not record the container as installed, so that a later pytest/eval job in the same
container gets its installs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames, in_container
from .helpers import JobNames
from .test_containers_real import NODES, container_spec, installs, prepared

pytestmark = pytest.mark.slurm


def test_a_skip_install_job_leaves_the_install_to_the_next_job(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    job_name = names.new("skip-install")
    name = cnames.new("skip")
    image = pyxis.images["python"]
    custom = container_spec(local_cluster, tmp_path, job_name, image=image, name=name,
                            install=True, workflow_type="custom", skip_install=True)
    m, backend = prepared(custom)
    assert m.path == ["NoState", "Allocating", "Importing", "Ready"]
    assert installs(backend) == []
    assert json.loads(custom.state_path.read_text())["installed"] is False

    tests = container_spec(local_cluster, tmp_path, job_name, image=image, name=name,
                           install=True)  # a pytest job in the same container
    m2, backend2 = prepared(tests)
    assert m2.path == ["NoState", "Validating", "Installing", "Ready"]
    assert len(installs(backend2)) == 2
    assert m2.alloc is not None and m.alloc is not None
    assert m2.alloc.job_id == m.alloc.job_id
    assert json.loads(tests.state_path.read_text())["installed"] is True
    seen = in_container(backend2, m2.alloc.job_id, NODES, name, "python3", "-c",
                        "import it_demo; print(it_demo.MARKER)", mounts=tests.mounts_text)
    assert seen.stdout.splitlines() == ["installed-from-repo"] * NODES, seen.stderr

    # a skip_install job after it still reuses the installed container as it is
    m3, backend3 = prepared(custom)
    assert m3.path == ["NoState", "Validating", "Ready"] and installs(backend3) == []
    assert json.loads(custom.state_path.read_text())["installed"] is True
