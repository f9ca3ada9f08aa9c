"""Issue 41 item 7: a clone without ``../shared``. The pinned pyxis + enroot releases
are fetched with git and checked against ``slurm_fsm_dev/pyxis-sources.json`` (tag and
commit, submodules likewise); where neither they nor the vendored sources can be had,
a run says so once and deselects the container tests instead of 34 skips and a failure.

The fetch is tested against local git repositories (``$SLURM_FSM_PYXIS_GIT`` a
``file://`` folder) made from the vendored tarballs when they are beside the checkout
(then the fetched archives must hold exactly the vendored files), else from a small tree
of the same layout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from slurm_fsm_dev import localpyxis, pyxissources

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO.parent / "shared" / "vendor" / "pyxis-enroot"
SUBMODULES = {"deps/musl": "bminor/musl", "deps/makeself": "megastep/makeself",
              "deps/linux-headers": "sabotage-linux/kernel-headers"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         "-c", "init.defaultBranch=main", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=True).stdout.strip()


def _commit_and_tag(tree: Path, tag: str) -> str:
    _git(tree, "init", "-q")
    _git(tree, "add", "-A", "-f")  # upstream tracks some ignored names
    _git(tree, "commit", "-q", "--allow-empty", "-m", tag)
    _git(tree, "tag", "-a", tag, "-m", tag)  # annotated, as upstream's
    return _git(tree, "rev-parse", "HEAD")


def _trees(root: Path) -> tuple[Path, Path]:
    """The pyxis and enroot trees: the vendored tarballs extracted, else a small stand-in."""
    if (VENDORED / "enroot-src.tar.gz").is_file():
        for name in ("pyxis", "enroot"):
            with tarfile.open(VENDORED / f"{name}-src.tar.gz") as t:
                t.extractall(root, filter="tar")
        return root / "pyxis", root / "enroot"
    for rel in ("pyxis/Makefile", "pyxis/args.c", "enroot/Makefile", "enroot/bin/enroot.in",
                *(f"enroot/{sub}/README" for sub in SUBMODULES)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    (root / "enroot/bin/link").symlink_to("enroot.in")
    return root / "pyxis", root / "enroot"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    """``file://`` repositories of the five upstreams and the pins that name them."""
    root = tmp_path_factory.mktemp("upstream")
    pyxis, enroot = _trees(root / "trees")
    git = root / "git"
    subs = []
    for path, repo in SUBMODULES.items():
        where = git / f"{repo}.git"
        where.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(enroot / path, where)
        (enroot / path).mkdir()
        tag = f"v-{where.stem}"
        subs.append({"path": path, "repo": repo, "tag": tag,
                     "commit": _commit_and_tag(where, tag)})
    (git / "NVIDIA").mkdir()
    shutil.move(pyxis, git / "NVIDIA/pyxis.git")
    shutil.move(enroot, git / "NVIDIA/enroot.git")
    pyxis_commit = _commit_and_tag(git / "NVIDIA/pyxis.git", "v0.24.0")
    e = git / "NVIDIA/enroot.git"
    _git(e, "init", "-q")
    _git(e, "add", "-A", "-f")
    for sub in subs:  # the submodules as gitlinks at their commits, as upstream has them
        _git(e, "update-index", "--add", "--cacheinfo", f"160000,{sub['commit']},{sub['path']}")
    _git(e, "commit", "-q", "-m", "v4.1.2")
    _git(e, "tag", "-a", "v4.1.2", "-m", "v4.1.2")
    pins = json.loads(pyxissources.PINS_FILE.read_text())
    pins["sources"][0]["commit"] = pyxis_commit
    pins["sources"][1]["commit"] = _git(e, "rev-parse", "HEAD")
    pins["sources"][1]["submodules"] = subs
    return f"file://{git}", pins


def _pins(tmp_path: Path, pins: dict[str, object]) -> Path:
    path = tmp_path / "pins.json"
    path.write_text(json.dumps(pins))
    return path


def _files(archive: Path) -> dict[str, bytes]:
    """Every file and link of a .tar.gz: name -> content (a link: its target)."""
    out: dict[str, bytes] = {}
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            if m.isfile():
                f = t.extractfile(m)
                assert f is not None
                out[m.name.rstrip("/")] = f.read()
            elif m.issym():
                out[m.name] = f"-> {m.linkname}".encode()
    return out


def test_the_pinned_commits_are_accepted_and_give_the_vendored_layout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        upstream: tuple[str, dict[str, object]]) -> None:
    url, pins = upstream
    monkeypatch.setenv(pyxissources.ENV_GIT, url)
    dest = pyxissources.fetch(tmp_path / "src", pins_file=_pins(tmp_path, pins),
                              say=lambda _m: None)
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [*localpyxis.SOURCE_FILES, "SOURCES.txt"])
    assert localpyxis.sources_problem(dest) == ""
    assert (dest / "setup-pyxis.sh").read_bytes() == pyxissources.RECIPE.read_bytes()
    enroot = _files(dest / "enroot-src.tar.gz")
    assert any(name.startswith("enroot/deps/musl/") for name in enroot)  # filled in
    if (VENDORED / "enroot-src.tar.gz").is_file():  # exactly the vendored files
        for name in ("pyxis-src.tar.gz", "enroot-src.tar.gz"):
            assert _files(dest / name) == _files(VENDORED / name), name
    sources = (dest / "SOURCES.txt").read_text()
    assert str(pins["sources"][1]["commit"]) in sources  # type: ignore[index]
    again = pyxissources.fetch(tmp_path / "src2", pins_file=_pins(tmp_path, pins),
                               say=lambda _m: None)
    for name in ("pyxis-src.tar.gz", "enroot-src.tar.gz"):  # the same bytes every time
        assert (again / name).read_bytes() == (dest / name).read_bytes()


@pytest.mark.parametrize("which", ["pyxis", "musl"])
def test_another_commit_is_refused_with_both_hashes_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        upstream: tuple[str, dict[str, object]], which: str) -> None:
    url, pins = upstream
    pins = json.loads(json.dumps(pins))
    pinned = "0" * 40
    entry = pins["sources"][0] if which == "pyxis" else pins["sources"][1]["submodules"][0]  # type: ignore[index]
    got = entry["commit"]
    entry["commit"] = pinned
    monkeypatch.setenv(pyxissources.ENV_GIT, url)
    with pytest.raises(pyxissources.SourceFetchError) as caught:
        pyxissources.fetch(tmp_path / "src", pins_file=_pins(tmp_path, pins),
                           say=lambda _m: None)
    text = str(caught.value)
    assert f"not the pinned {pinned}" in text and got in text and "refusing" in text
    if which == "musl":
        assert "deps/musl" in text
    assert not (tmp_path / "src").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["pins.json"]  # nothing half-made left


def test_the_repository_s_pins_are_the_vendored_commits() -> None:
    """The pins file names the commits SOURCES.txt of the vendored folder names, and the
    repository's recipe is the one it pins."""
    _data, sources = pyxissources.load_pins()
    pins = {s.pin.repo: s.pin.commit for s in sources}
    pins.update({m.path: m.commit for s in sources for m in s.submodules})
    assert pins == {
        "NVIDIA/pyxis": "107519944221822ea1dace4db8e7234b2eaa4cd5",
        "NVIDIA/enroot": "bd51f53b6fa954805ae3e1985c5dc7594ff66d05",
        "deps/musl": "0784374d561435f7c787a555aeab8ede699ed298",
        "deps/makeself": "5742be6410bfad2c619fb1e98bf795e8fa0913c7",
        "deps/linux-headers": "c79004ad7f82165c86396b11bc6958ee53febb63"}
    recipe = hashlib.sha256(pyxissources.RECIPE.read_bytes()).hexdigest()
    assert recipe == _data["recipe_sha256"]
    if (VENDORED / "setup-pyxis.sh").is_file():
        assert (VENDORED / "setup-pyxis.sh").read_bytes() == pyxissources.RECIPE.read_bytes()


def test_a_bad_pins_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pins.json"
    bad.write_text('{"sources": [{"name": "pyxis", "archive": "a", "repo": "r", '
                   '"tag": "t", "commit": "abc"}]}')
    with pytest.raises(pyxissources.SourceFetchError, match=r"pins.json: sources\[0\]: commit"):
        pyxissources.load_pins(bad)


def test_prepare_builds_from_the_fetched_sources_when_none_are_vendored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        upstream: tuple[str, dict[str, object]]) -> None:
    url, pins = upstream
    monkeypatch.setattr(pyxissources, "PINS_FILE", _pins(tmp_path, pins))
    monkeypatch.setenv(pyxissources.ENV_GIT, url)
    monkeypatch.setenv(localpyxis.ENV_SOURCES, str(tmp_path / "no-shared"))
    monkeypatch.setenv(localpyxis.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(localpyxis.ENV_CONTAINERS, raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    built_from: list[Path] = []

    def build(src: Path, build: Path, _say: object) -> None:  # the recipe's outputs
        built_from.append(src)
        for rel in ("pyxis/lib/slurm/spank_pyxis.so", "enroot/bin/enroot",
                    *(f for f, _ in localpyxis.IMAGE_NAMES.values()),
                    "enroot/etc/enroot/enroot.conf.d/.keep"):
            (build / rel).parent.mkdir(parents=True, exist_ok=True)
            (build / rel).write_text("")

    monkeypatch.setattr(localpyxis, "_build", build)
    said: list[str] = []
    info, problem = localpyxis.prepare(tmp_path / "base", tmp_path / "plugstack.conf",
                                       say=said.append)
    assert problem == "" and info is not None
    assert built_from == [localpyxis.fetched_dir()] == [info.sources]
    assert localpyxis.sources_dir() == localpyxis.fetched_dir()  # found again later
    assert any("fetching the pinned" in line for line in said)


NOWHERE = {localpyxis.ENV_SOURCES: "/nonexistent/shared/vendor/pyxis-enroot",
           pyxissources.ENV_GIT: "file:///nonexistent/git"}


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **NOWHERE, localpyxis.ENV_CACHE: str(tmp_path / "cache")}


def test_a_clone_without_shared_says_so_once_at_the_start(tmp_path: Path) -> None:
    """``make test``'s first line: no sources and no network is one clear line, exit 0."""
    proc = subprocess.run([sys.executable, "-m", "slurm_fsm_dev.localpyxis", "sources"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=_env(tmp_path), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "NO CONTAINERS" in line]
    assert len(lines) == 1
    assert NOWHERE[localpyxis.ENV_SOURCES] in lines[0]
    assert "file:///nonexistent/git/NVIDIA/pyxis.git" in lines[0]
    makefile = (REPO / "Makefile").read_text()
    test_rule = makefile[makefile.index("\ntest:"):].split("\n\n")[0]
    assert test_rule.split()[1] == "pyxis-sources"  # make test's first prerequisite
    rule = makefile[makefile.index("\npyxis-sources:"):].split("\n\n")[0]
    assert rule.splitlines()[2].strip().endswith("-m slurm_fsm_dev.localpyxis sources")


def test_a_clone_without_shared_deselects_the_container_tests_in_one_line(
        tmp_path: Path) -> None:
    """No 34 skips: the session's collection deselects every test that needs pyxis (its
    ``pyxis`` fixture, or the ``containers`` mark) and says why in one line; the
    check of ``make demo`` no longer needs the vendored sources."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/integration/test_containers_real.py", "tests/integration/test_parity.py"],
        capture_output=True, text=True, timeout=300, check=False, env=_env(tmp_path),
        cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines()
            if line.startswith(localpyxis.NO_CONTAINERS)]
    assert len(said) == 1, proc.stdout
    assert "tests that need pyxis + enroot deselected" in said[0]
    collected = proc.stdout
    assert "test_containers_real.py" not in collected.replace(said[0], "")
    assert "container first run" not in collected and "[real-reuse]" in collected
    demo = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_demo.py",
         "-k", "does_not_build_containers"],
        capture_output=True, text=True, timeout=300, check=False, env=_env(tmp_path),
        cwd=REPO)
    assert demo.returncode == 0, demo.stdout + demo.stderr
