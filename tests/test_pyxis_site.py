"""Issue 42 item 3: the cluster's pyxis options (plugstack config where readable, else
``srun --help`` and pyxis' defaults) choose what a new allocation tries for its
container, and ``plan`` says it. The real twin (a ``container_scope=job`` cluster) is in
tests/integration/test_image_cache_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_image_cache import FROM_CACHE, _cache, _job_scope
from test_reuse_on_node import _image, _run, _spec

from slurm_fsm import imagecache, pyxissite, slurmcli
from slurm_fsm.plan import make_plan
from slurm_fsm.pyxissite import PyxisSite, new_allocation_tries
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory


def test_the_plugstack_line_of_pyxis_gives_its_options(tmp_path: Path) -> None:
    conf = tmp_path / "plugstack.conf"
    conf.write_text("# site config\noptional /usr/lib/other/spank_x.so a=b\n"
                    "include plugstack.conf.d/*.conf\n")
    (tmp_path / "plugstack.conf.d").mkdir()
    (tmp_path / "plugstack.conf.d" / "pyxis.conf").write_text(
        "required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so runtime_path=/run/pyxis "
        "container_scope=job importer=/usr/bin/enroot-importer use_squashfuse=1 # note\n")
    options = pyxissite.read_plugstack(conf)
    assert options == {"runtime_path": "/run/pyxis", "container_scope": "job",
                       "importer": "/usr/bin/enroot-importer", "use_squashfuse": "1"}
    site = pyxissite.site_from_options(options, f"plugstack {conf}")
    assert site == PyxisSite(container_scope="job", importer="/usr/bin/enroot-importer",
                             use_squashfuse=True, source=f"plugstack {conf}")
    assert not site.keeps_containers
    assert pyxissite.site_from_options({}, "x") == PyxisSite(source="x")  # pyxis' defaults
    assert pyxissite.read_plugstack(tmp_path / "missing.conf") is None
    (tmp_path / "plugstack.conf.d" / "pyxis.conf").write_text("")
    assert pyxissite.read_plugstack(conf) is None  # no pyxis line anywhere


def test_the_plugstack_path_comes_from_scontrol_show_config() -> None:
    text = "PlugStackConfig         = /etc/slurm/site/plugstack.conf\nSlurmctldPlugstack = (null)\n"
    assert pyxissite.plugstack_path(text) == Path("/etc/slurm/site/plugstack.conf")
    assert pyxissite.plugstack_path("PlugStackConfig = (null)\n") == pyxissite.DEFAULT_PLUGSTACK


@pytest.mark.parametrize(("scope", "keyed", "cached", "tries"), [
    ("global", True, True, ["reused on node", "from the cache", "cold"]),
    ("global", True, False, ["reused on node", "cold"]),
    ("job", True, True, ["from the cache", "cold"]),
    ("job", True, False, ["cold"]),
    ("global", False, True, ["cold"]),  # no setup key: never reused, never cached
])
def test_what_a_new_allocation_tries(scope: str, keyed: bool, cached: bool,
                                     tries: list[str]) -> None:
    site = PyxisSite(container_scope=scope, source="t")
    assert new_allocation_tries(site, keyed=keyed, cached=cached) == tries
    assert new_allocation_tries(None, keyed=keyed, cached=cached) == []


def test_under_container_scope_job_the_nodes_are_not_checked(make_spec: SpecFactory,
                                                             tmp_path: Path) -> None:
    """The check of the nodes' keys could only miss: no step for it (one step saved);
    under the default scope it runs."""
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    for fake, checks in ((_job_scope(), 0), (FakeCluster(), 1)):
        _run(spec, fake)
        for node in fake.nodes.values():
            node.containers.clear()
        before = len(fake.calls)
        m, _ = _run(spec, fake)
        assert m.path == FROM_CACHE
        named_only = [c for c in fake.calls[before:] if c.op == "run_step"
                      and c.args["request"].container is not None
                      and c.args["request"].container.image is None
                      and slurmcli.SETUP_KEY_READ in c.args["request"].argv]
        assert len(named_only) == checks, fake.container_scope


def test_plan_says_what_the_next_new_allocation_would_do(make_spec: SpecFactory,
                                                          tmp_path: Path) -> None:
    fake = _job_scope()
    spec = _spec(make_spec, tmp_path, _image(tmp_path))
    cold = make_plan(spec, fake)
    assert cold.container is not None
    assert cold.container["tries"] == ["cold"]
    assert cold.container["cache_entry"] is None
    assert "a cold install is exported to " in str(cold.container["says"])
    assert "container_scope=job" in str(cold.container["says"])
    assert cold.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"]
    assert cold.warnings == []
    _run(spec, fake)  # the first run: cold, exported
    [entry] = _cache(spec).entries()
    used = entry.path.stat().st_mtime
    plan = make_plan(spec, fake)
    assert plan.container is not None
    assert plan.container["tries"] == ["from the cache", "cold"]
    assert plan.container["cache_entry"] == str(entry.path)
    assert plan.path == FROM_CACHE and plan.warnings == []
    assert any(f"--container-image={entry.path}" in line for line in plan.would_change)
    assert entry.path.stat().st_mtime == used  # a plan only looks
    doc = json.loads(json.dumps(plan.to_dict()))
    assert doc["container"]["pyxis"] == {"container_scope": "job", "importer": None,
                                         "use_squashfuse": False, "source": "fake cluster"}
    assert "container: a new allocation's container: from the cache, else cold" in \
        plan.render_text()


def test_plan_of_a_spec_without_a_container_says_nothing_of_one(
        make_spec: SpecFactory) -> None:
    plan = make_plan(make_spec(), FakeCluster())
    assert plan.container is None and plan.to_dict()["container"] is None
    assert "container:" not in plan.render_text()


def test_a_backend_that_cannot_say_is_taken_as_pyxis_defaults() -> None:
    site = imagecache.site_of(object())
    assert site is not None and site.keeps_containers
