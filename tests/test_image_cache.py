"""Issue 42 item 2 on the fake: the cache of installed images. After the first install
the installed container is exported once to the cache (``<setup key>.sqsh``); a later
allocation whose nodes do not hold it (pyxis ``container_scope=job``, other nodes)
starts from that file: no import of the spec's image, no install. A changed image or
install input misses. The rules of the cache itself (folder, limit, eviction oldest
first) and the export script, run by bash with a stand-in ``enroot``. The real-pyxis
tests are in tests/integration/test_image_cache_real.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import attrs
import pytest
from test_reuse_on_node import _image, _pips, _repo, _run, _spec

from slurm_fsm import imagecache, slurmcli
from slurm_fsm.backend import StepResult
from slurm_fsm.imagecache import ImageCache
from slurm_fsm.machine import SETUP_CACHED, SETUP_COLD, State
from slurm_fsm.paths import StatePaths
from slurm_fsm.spec import JobSpec, SpecError
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

COLD = ["NoState", "Allocating", "Importing", "Installing", "Ready"]
FROM_CACHE = ["NoState", "Allocating", "Importing", "Ready"]


def _exports(steps: list[str]) -> list[str]:
    return [s for s in steps if slurmcli.IMAGE_EXPORT in s]


def _cache(spec: JobSpec) -> ImageCache:
    cache = imagecache.cache_of(spec, spec.state_path, environ={})
    assert cache is not None
    return cache


def _job_scope() -> FakeCluster:
    fake = FakeCluster()
    fake.container_scope = "job"
    return fake


def test_container_scope_job_is_served_from_the_cache(make_spec: SpecFactory,
                                                       tmp_path: Path) -> None:
    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    first, steps = _run(spec, fake)
    assert (first.path, first.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)
    assert len(_exports(steps)) == 1  # exported once, after the install
    [entry] = _cache(spec).entries()
    assert entry.path.parent == StatePaths.for_repo(spec.repo_root).image_cache
    again, steps = _run(spec, fake)
    assert again.path == FROM_CACHE, [t.reason for t in again.history]
    assert again.container_setup == SETUP_CACHED
    assert _pips(steps) == [] and _exports(steps) == []  # nothing installed, nor exported
    imports = [c.args["request"].container for c in fake.calls
               if c.op == "run_step" and c.args["request"].container is not None
               and c.args["request"].container.image]
    assert imports[-1].image == str(entry.path) and imports[-1].fresh
    held = fake.nodes["node01"].containers["llama"]
    assert len(held.packages) == 2 and held.setup_key  # what the install left in it
    assert again.alloc is not None and again.alloc.installed
    assert any("from the image cache" in t.reason for t in again.history)


def test_the_key_on_a_node_comes_first_then_the_cache(make_spec: SpecFactory,
                                                      tmp_path: Path) -> None:
    """Global scope: the node's container is reused (one step); a new allocation on
    other nodes (here: the nodes lost it) is made from the cache."""
    fake = FakeCluster()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    _run(spec, fake)
    again, _ = _run(spec, fake)
    assert again.container_setup == "reused on node"
    for node in fake.nodes.values():
        node.containers.clear()
    third, steps = _run(spec, fake)
    assert (third.path, third.container_setup, _pips(steps)) == (FROM_CACHE, SETUP_CACHED, [])


@pytest.mark.parametrize("change", ["install input", "image"])
def test_a_changed_image_or_install_input_misses_the_cache(
        make_spec: SpecFactory, tmp_path: Path, change: str) -> None:
    fake = _job_scope()
    image = _image(tmp_path)
    spec = _spec(make_spec, tmp_path, image)
    _run(spec, fake)
    if change == "image":
        image.write_bytes(b"another image")
    else:
        (tmp_path / "repo" / "requirements-test.txt").write_text("pytest==9\n")
    m, steps = _run(spec, fake)
    assert (m.path, m.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)
    assert len(_exports(steps)) == 1
    assert len(_cache(spec).entries()) == 2  # the new setup has an entry of its own
    assert fake.nodes["node01"].containers["llama"].image == str(image)


def test_the_cache_off_exports_nothing(make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path), image_cache_max_gb=0)
    _, steps = _run(spec, fake)
    assert _exports(steps) == []
    m, steps = _run(spec, fake)
    assert (m.path, len(_pips(steps))) == (COLD, 2)


def test_a_shared_folder_from_the_spec_or_the_environment(
        make_spec: SpecFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    beside = StatePaths.for_repo(spec.repo_root).image_cache
    assert _cache(spec).folder == beside
    assert _cache(spec).max_bytes == imagecache.DEFAULT_MAX_GB * 1000**3
    env = {imagecache.ENV_DIR: str(tmp_path / "shared"), imagecache.ENV_MAX_GB: "0.5"}
    cache = imagecache.cache_of(spec, spec.state_path, environ=env)
    assert cache == ImageCache(folder=tmp_path / "shared", max_bytes=500_000_000)
    named = attrs.evolve(spec, image_cache_dir=str(tmp_path / "mine"), image_cache_max_gb=2)
    assert imagecache.cache_of(named, spec.state_path, environ=env) == ImageCache(
        folder=tmp_path / "mine", max_bytes=2 * 1000**3)
    assert imagecache.cache_of(spec, spec.state_path, environ={imagecache.ENV_MAX_GB: "0"}
                               ) is None
    with pytest.raises(ValueError, match=imagecache.ENV_MAX_GB):
        imagecache.cache_of(spec, spec.state_path, environ={imagecache.ENV_MAX_GB: "lots"})
    fake_state = StatePaths.for_repo(spec.repo_root, fake=True).state
    assert _cache(spec) != imagecache.cache_of(spec, fake_state, environ={})
    no_image = attrs.evolve(spec, docker_image=None, container_name=None)
    assert imagecache.cache_of(no_image, spec.state_path, environ={}) is None
    # a shared folder works end to end: the run's entry is there
    monkeypatch.setenv(imagecache.ENV_DIR, str(tmp_path / "shared"))
    _run(spec, _job_scope())
    assert len(list((tmp_path / "shared").glob("*.sqsh"))) == 1


def test_bad_cache_fields_are_refused_naming_the_field(make_spec: SpecFactory,
                                                       tmp_path: Path) -> None:
    data = make_spec().to_dict()
    for field, value, words in (("image_cache_dir", "relative/dir", "an absolute path"),
                                ("image_cache_max_gb", -1, ">= 0"),
                                ("image_cache_max_gb", 1.5, "an integer")):
        with pytest.raises(SpecError, match=f"{field}: must be {words}"):
            JobSpec.from_dict({**data, field: value})


def test_a_failed_export_is_a_warning_and_the_run_goes_on(make_spec: SpecFactory,
                                                          tmp_path: Path) -> None:
    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    fake.on_step(slurmcli.IMAGE_EXPORT, StepResult(1, "", "mksquashfs: No space left\n"))
    m, _ = _run(spec, fake)
    assert m.state is State.Ready
    assert any("export of container 'llama' failed (the run goes on): mksquashfs: No space"
               in w for w in m.warnings)
    assert _cache(spec).entries() == []


def test_an_entry_that_does_not_hold_its_key_is_not_used(make_spec: SpecFactory,
                                                         tmp_path: Path) -> None:
    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    _run(spec, fake)
    [entry] = _cache(spec).entries()
    entry.path.write_text("not the fake's squashfs")  # e.g. a file copied over it
    m, steps = _run(spec, fake)
    assert (m.path, m.container_setup, len(_pips(steps))) == (COLD, SETUP_COLD, 2)
    assert any("did not start" in w for w in m.warnings)


def test_the_report_says_from_the_cache_and_the_seconds_of_each_part(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    from slurm_fsm.executor import Executor
    from slurm_fsm.results import Status
    from slurm_fsm.testing import FakeScript

    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    fake.script(spec.script_path, FakeScript(lines=["ok"]))
    cold = Executor(spec, fake, clock=fake.clock).run()
    assert cold.status is Status.PASSED, cold.summary
    assert {"import_s", "install_s", "cache_write_s"} <= set(cold.timings)
    Executor(attrs.evolve(spec, release_allocation=True), fake, clock=fake.clock).run()
    warm = Executor(spec, fake, clock=fake.clock).run()
    assert warm.status is Status.PASSED, warm.summary
    assert {"queue_wait_s", "cache_import_s"} <= set(warm.timings)
    assert not {"import_s", "install_s", "cache_write_s"} & set(warm.timings)
    assert any(n.startswith("container 'llama': from the cache on node01 (") for n in warm.notes)
    assert "  container:   from the cache: cache import 0.0s" in warm.render_text()


# ------------------------------------------------------------------ the cache's rules


def _entry(folder: Path, key: str, size: int, age_s: float) -> Path:
    path = folder / f"{key}.sqsh"
    path.write_bytes(b"x" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_eviction_removes_the_oldest_first_down_to_the_limit(tmp_path: Path) -> None:
    cache = ImageCache(folder=tmp_path, max_bytes=250)
    old, mid, new = (_entry(tmp_path, k, 100, age) for k, age in (("a", 30), ("b", 20),
                                                                  ("c", 10)))
    assert cache.evict(keep="c") == [old]
    assert [e.key for e in cache.entries()] == ["b", "c"]
    assert cache.lookup("b") == mid  # a hit is a use: b is now the newest
    _entry(tmp_path, "d", 100, 0)
    assert cache.evict(keep="d") == [new]  # c, not b: oldest use first
    assert cache.lookup("a") is None and cache.lookup("zz") is None


def test_an_entry_alone_over_the_limit_is_not_kept(tmp_path: Path) -> None:
    cache = ImageCache(folder=tmp_path, max_bytes=50)
    big = _entry(tmp_path, "big", 100, 0)
    assert cache.evict(keep="big") == [big]


def test_stale_temporary_files_of_a_dead_export_are_removed(tmp_path: Path) -> None:
    cache = ImageCache(folder=tmp_path, max_bytes=10**9)
    stale = tmp_path / ".k.sqsh.n1.123"
    fresh = tmp_path / ".k.sqsh.n2.456"
    for path in (stale, fresh):
        path.write_bytes(b"half")
    os.utime(stale, (time.time() - imagecache.STALE_TEMP_S - 60,) * 2)
    assert cache.evict() == [stale]
    assert fresh.exists()
    assert cache.entries() == []  # a temporary file is never an entry


# ------------------------------------------------------- the export step's command line

_ENROOT = """#!/bin/bash
# a stand-in enroot: list prints $FAKE_ENROOT_LIST; export -o FILE -- NAME writes FILE
case "$1" in
list) printf '%s\\n' $FAKE_ENROOT_LIST ;;
export) [ -e "$3" ] && { echo "File already exists" >&2; exit 1; }
        echo "rootfs of $5" > "$3"; echo "$5" >> "$FAKE_ENROOT_LOG" ;;
esac
"""


def _export(tmp_path: Path, listed: str, key: str = "ab" * 16) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "enroot").write_text(_ENROOT)
    (bin_dir / "enroot").chmod(0o755)
    argv = slurmcli.image_export_argv(str(tmp_path / "cache dir"), key, "42", "llama")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_ENROOT_LIST": listed,
           "FAKE_ENROOT_LOG": str(tmp_path / "log"), "SLURMD_NODENAME": "n1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30,
                          check=False)


def test_the_export_script_writes_aside_renames_and_exports_once(tmp_path: Path) -> None:
    done = _export(tmp_path, "other pyxis_42_llama")  # container_scope=job's name
    assert done.returncode == 0, done.stderr
    out = tmp_path / "cache dir" / f"{'ab' * 16}.sqsh"
    assert slurmcli.image_exported(done.stdout) == ("n1", "exported", str(out))
    assert out.read_text() == "rootfs of pyxis_42_llama\n"
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name, "lock"]  # no temp
    again = _export(tmp_path, "pyxis_llama")
    assert slurmcli.image_exported(again.stdout) == ("n1", "present", str(out))
    assert (tmp_path / "log").read_text() == "pyxis_42_llama\n"  # exported once


def test_the_export_script_without_the_container_fails_and_leaves_nothing(
        tmp_path: Path) -> None:
    done = _export(tmp_path, "pyxis_other")
    assert done.returncode == 4
    assert "nothing to export" in done.stderr
    assert slurmcli.image_exported(done.stdout) is None
    assert [p.name for p in (tmp_path / "cache dir").iterdir()] == ["lock"]


def test_the_export_command_line_takes_only_a_hex_key_and_an_absolute_folder() -> None:
    with pytest.raises(ValueError, match="lowercase hex"):
        slurmcli.image_export_argv("/c", "$(reboot)", "1", "x")
    with pytest.raises(ValueError, match="absolute"):
        slurmcli.image_export_argv("c", "ab" * 16, "1", "x")
    argv = slurmcli.image_export_argv("/c d", "ab" * 16, "7", "x")
    assert argv[3:] == [slurmcli.IMAGE_EXPORT, "/c d", "ab" * 16, "pyxis_x", "pyxis_7_x"]


def test_a_repo_cache_folder_is_never_an_install_input(make_spec: SpecFactory,
                                                       tmp_path: Path) -> None:
    """A requirements file that installs the repo (``.``) hashes its tree: the cache
    beside the state file, inside it, is no part of it."""
    from slurm_fsm import setupkey

    repo = _repo(tmp_path / "repo")
    (repo / "requirements-dev.txt").write_text(".\n")
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    before = setupkey.setup_key(spec)
    folder = StatePaths.for_repo(repo).image_cache
    folder.mkdir(parents=True)
    (folder / "x.sqsh").write_bytes(b"y")
    assert setupkey.setup_key(spec) == before
