"""Shared pieces of the real-pyxis tests: the cluster's images, container names that
are removed again, and a repository whose ``pip install -e .`` works offline.

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

from slurm_fsm import localpyxis
from slurm_fsm.backend import ContainerOptions, StepRequest, StepResult
from slurm_fsm.localcluster import ClusterInfo, ContainerInfo
from slurm_fsm.subprocess_backend import SubprocessBackend


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


BACKEND = '''\
"""A PEP 517 backend in the tree: builds {name} without setuptools or a network."""
import base64, hashlib, os, zipfile

NAME, VERSION = "{name}", "0.1"


def _wheel(directory, files):
    dist = f"{{NAME}}-{{VERSION}}"
    files = dict(files)
    files[f"{{dist}}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n")
    files[f"{{dist}}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\\nGenerator: it\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    record = []
    filename = f"{{dist}}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{{path}},sha256={{digest.decode()}},{{len(data)}}")
        record.append(f"{{dist}}.dist-info/RECORD,,")
        z.writestr(f"{{dist}}.dist-info/RECORD", "\\n".join(record) + "\\n")
    return filename


def build_wheel(directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(NAME, "__init__.py")) as fh:
        return _wheel(directory, {{f"{{NAME}}/__init__.py": fh.read()}})


def build_editable(directory, config_settings=None, metadata_directory=None):
    return _wheel(directory, {{f"{{NAME}}.pth": os.path.abspath(".") + "\\n"}})
'''


def _package(root: Path, name: str, marker: str) -> None:
    (root / "_backend").mkdir(parents=True, exist_ok=True)
    (root / "_backend" / "it_backend.py").write_text(BACKEND.format(name=name))
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "it_backend"\n'
        'backend-path = ["_backend"]\n'
        f'\n[project]\nname = "{name}"\nversion = "0.1"\n')
    (root / name).mkdir(exist_ok=True)
    (root / name / "__init__.py").write_text(f"MARKER = {marker!r}\n")


def make_install_repo(repo: Path, marker: str = "installed-from-repo") -> Path:
    """A repo whose ``pip install -e .`` installs ``it_demo`` (editable) and whose
    ``requirements-dev.txt`` installs ``it_devtool`` from ``./devtool``: no index needed."""
    _package(repo, "it_demo", marker)
    _package(repo / "devtool", "it_devtool", "devtool")
    (repo / "requirements-dev.txt").write_text("./devtool\n")
    return repo
