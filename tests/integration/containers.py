"""Shared pieces of the real-pyxis tests: the cluster's images, container names that
are removed again, and (from slurm_fsm_dev.localpyxis) a repository whose
``pip install -e .`` works offline.

Containers outlive their jobs (pyxis' default scope is global), so every test that
makes one names it through :class:`ContainerNames`, whose :meth:`~ContainerNames.cleanup`
removes it from every node; the session ends with a check that none is left.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from slurm_fsm.backend import ContainerOptions, StepRequest, StepResult
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev import localpyxis
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo
from slurm_fsm_dev.localpyxis import make_install_repo


def pyxis_or_skip(cluster: ClusterInfo) -> ContainerInfo:
    """The cluster's containers. Without the vendored sources: skip (one line). With
    them but no containers (a failed build): fail, never skip."""
    if cluster.containers is not None:
        return cluster.containers
    absent = localpyxis.sources_problem()
    if absent:
        pytest.skip(f"no containers on this machine: {absent}")
    pytest.fail(f"the local cluster has no containers although the sources are there: "
                f"{cluster.containers_problem}", pytrace=False)


class ContainerNames:
    """Unique container names for one test; :meth:`cleanup` removes them on every node."""

    def __init__(self, containers: ContainerInfo) -> None:
        self.containers = containers
        self.names: list[str] = []

    def new(self, tag: str) -> str:
        name = f"it{os.getpid()}-{tag}-{uuid.uuid4().hex[:6]}"
        self.names.append(name)
        return name

    def on_nodes(self, name: str) -> dict[str, Path]:
        """``{node: container dir}`` of pyxis' container ``name`` (any user, global scope)."""
        found: dict[str, Path] = {}
        for d in self.containers.state_dir.glob(f"*/*/data/pyxis_{name}"):
            found[d.parent.parent.name] = d
        return found

    def leftovers(self) -> list[Path]:
        return [d for name in self.names
                for pattern in (f"pyxis_{name}", f"pyxis_*_{name}")
                for d in self.containers.state_dir.glob(f"*/*/data/{pattern}")]

    def cleanup(self) -> None:
        for d in self.leftovers():
            shutil.rmtree(d, ignore_errors=True)


def in_container(backend: SubprocessBackend, job_id: str, nodes: int, name: str,
                 *argv: str, image: str | None = None, writable: bool = False,
                 mounts: str = "") -> StepResult:
    """One step on every node of the allocation inside the named container."""
    return backend.run_step(StepRequest(
        job_id=job_id, argv=tuple(argv), nodes=nodes, timeout_s=120,
        container=ContainerOptions(name=name, image=image, writable=writable, mounts=mounts),
    ))

__all__ = ["ContainerNames", "in_container", "make_install_repo", "pyxis_or_skip"]
