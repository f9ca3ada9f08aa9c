"""Issue 42 item 2 on real pyxis + enroot with ``container_scope=job`` (the ``jobscope``
configuration: a named container goes with its job, so the next allocation's nodes
hold nothing): the first run's install is exported once to the image cache beside the
state file (``enroot export`` on the node), and the next run in a new allocation starts
from that squashfs: no import of the spec's image, no install. A changed image or
install input misses the cache: imported and installed again, and the job sees the new
image.

``SLURM_FSM_LOCAL_CONFIG=jobscope`` selects these tests (``make test-jobscope``); the
fake's twin is tests/test_image_cache.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_fsm import imagecache, slurmcli
from slurm_fsm.machine import SETUP_CACHED, SETUP_COLD
from slurm_fsm.plan import make_plan
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames
from .helpers import JobNames, RecordingBackend
from .test_containers_real import container_spec, imports, installs
from .test_reuse_on_node_real import NODES, _release, _run, _sees

pytestmark = [pytest.mark.slurm, pytest.mark.config(jobscope=True)]

COLD = ["NoState", "Allocating", "Importing", "Installing", "Ready"]
FROM_CACHE = ["NoState", "Allocating", "Importing", "Ready"]
TOOL_TIMEOUT_S = 600


def _entries(spec: JobSpec) -> list[imagecache.CacheEntry]:
    cache = imagecache.cache_of(spec, spec.state_path, environ={})
    assert cache is not None
    return cache.entries()


def _exports(backend: RecordingBackend) -> list[tuple[str, ...]]:
    return [a for a in backend.argvs if slurmcli.IMAGE_EXPORT in a]


def _retagged(image: Path, text: str) -> None:
    """``image`` made again with ``/etc/image-id`` saying ``text`` (another image at
    the same path)."""
    root = image.with_suffix(".root")
    subprocess.run(["unsquashfs", "-q", "-d", str(root), str(image)], check=True,
                   stdout=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_S)
    (root / "etc" / "image-id").write_text(text + "\n")
    subprocess.run(["mksquashfs", str(root), str(image), "-noappend", "-all-root", "-quiet",
                    "-no-progress"], check=True, stdout=subprocess.DEVNULL,
                   timeout=TOOL_TIMEOUT_S)
    shutil.rmtree(root)


def test_container_scope_job_is_served_from_the_cache(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    name = cnames.new("cache")
    spec = container_spec(local_cluster, tmp_path, names.new("ct-cache"),
                          image=pyxis.images["python"], name=name, install=True,
                          slurm_params={"nodes": NODES})
    first, backend = _run(spec)
    assert (first.path, first.container_setup) == (COLD, SETUP_COLD)
    assert len(imports(backend)) == 1 and len(installs(backend)) == 2
    assert len(_exports(backend)) == 1
    [entry] = _entries(spec)
    assert entry.size > 0 and "cache_write_s" in first.setup_seconds()
    _release(spec, first)
    plan = make_plan(spec, SubprocessBackend())  # item 3: what the next one would do
    assert plan.container is not None
    assert plan.container["tries"] == ["from the cache", "cold"]
    assert plan.container["cache_entry"] == str(entry.path)
    again, backend = _run(spec)
    assert again.path == FROM_CACHE, [t.reason for t in again.history]
    assert again.container_setup == SETUP_CACHED
    # item 3: under container_scope=job the nodes' keys are not read (no step that
    # names the container without an image)
    assert not [a for a in backend.argvs if slurmcli.SETUP_KEY_READ in a
                and not any(x.startswith("--container-image=") for x in a)]
    assert installs(backend) == [] and _exports(backend) == []  # installed once in all
    [made] = imports(backend)  # the one import: the cache's file, not the spec's image
    assert f"--container-image={entry.path}" in made
    assert _sees(again, backend, spec, name) == [
        "installed-from-repo devtool python image False"] * NODES
    seconds = again.setup_seconds()
    assert "cache_import_s" in seconds and "install_s" not in seconds
    _release(spec, again)


@pytest.mark.parametrize("change", ["image", "requirements"])
def test_a_changed_image_or_install_input_misses_the_cache(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path, change: str) -> None:
    name = cnames.new(f"cache-{change}")
    image = tmp_path / "python-copy.sqsh"
    shutil.copyfile(pyxis.images["python"], image)
    spec = container_spec(local_cluster, tmp_path, names.new(f"ct-cache-{change}"),
                          image=image, name=name, install=True,
                          slurm_params={"nodes": NODES})
    first, _ = _run(spec)
    assert first.path == COLD and len(_entries(spec)) == 1
    _release(spec, first)
    seen_image = "python image"
    if change == "image":  # another image at the same path
        seen_image = "python image, rebuilt"
        _retagged(image, seen_image)
    else:
        (spec.repo_root / "requirements-dev.txt").write_text("./devtool\n# pinned again\n")
    again, backend = _run(spec)
    assert (again.path, again.container_setup) == (COLD, SETUP_COLD)
    assert len(installs(backend)) == 2
    assert [a for a in imports(backend) if f"--container-image={image}" in a]
    assert len(_entries(spec)) == 2  # the new setup's own entry
    assert _sees(again, backend, spec, name) == [
        f"installed-from-repo devtool {seen_image} False"] * NODES
    _release(spec, again)


def test_the_cluster_s_pyxis_options_are_read_from_its_plugstack_config(
        local_cluster: ClusterInfo, pyxis: ContainerInfo) -> None:
    """Item 3: ``scontrol show config`` names the plugstack config; pyxis' line in it
    says container_scope=job."""
    site = SubprocessBackend().pyxis_site()
    assert site is not None
    assert (site.container_scope, site.importer, site.use_squashfuse) == ("job", "", False)
    assert site.source == f"plugstack {local_cluster.slurm_conf.parent / 'plugstack.conf'}"
