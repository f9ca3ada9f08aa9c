"""The pyxis + enroot sources where ``../shared/vendor/pyxis-enroot`` is not beside the
checkout: the pinned upstream releases, fetched with git and checked.

``pyxis-sources.json`` (beside this file) pins each repository by tag *and* commit (a
content hash): :func:`fetch` fetches the tag, and refuses to use it unless
``git rev-parse`` gives the pinned commit; enroot's submodules (musl, makeself, the
kernel headers) likewise, and the commit enroot's own tree records for each submodule
must be the pinned one too. What passes is written in the vendored folder's layout
(``pyxis-src.tar.gz``, ``enroot-src.tar.gz`` with the submodules filled in, and the
recipe ``setup-pyxis.sh``, the repository's copy of the vendored one), so
:mod:`slurm_fsm_dev.localpyxis` builds from it as from the vendored folder.

The repositories are ``<base>/<owner>/<name>.git`` with base ``https://github.com``
(``$SLURM_FSM_PYXIS_GIT`` overrides it: a mirror, or a ``file://`` folder in the tests).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["ENV_GIT", "PINS_FILE", "RECIPE", "Pin", "SourceFetchError", "Sources", "fetch",
           "load_pins", "pins_key"]

ENV_GIT = "SLURM_FSM_PYXIS_GIT"
PINS_FILE = Path(__file__).with_name("pyxis-sources.json")
RECIPE = Path(__file__).with_name("setup-pyxis.sh")
_FETCH_TIMEOUT_S = 600.0
_GIT_TIMEOUT_S = 120.0


class SourceFetchError(RuntimeError):
    """The pinned sources could not be fetched, or what came is not what is pinned."""


@attrs.frozen
class Pin:
    """One repository at one commit: ``path`` is where it goes in its parent's tree
    (a submodule), "" for a top-level source."""

    repo: str  # "NVIDIA/pyxis"
    tag: str
    commit: str
    path: str = ""


@attrs.frozen
class Sources:
    """One archive of the vendored layout: its repository and its submodules."""

    name: str  # "pyxis": the top folder inside the archive
    archive: str  # "pyxis-src.tar.gz"
    pin: Pin
    submodules: tuple[Pin, ...] = ()


def _pin(raw: Mapping[str, Any], where: str) -> Pin:
    try:
        pin = Pin(repo=str(raw["repo"]), tag=str(raw["tag"]), commit=str(raw["commit"]),
                  path=str(raw.get("path", "")))
    except KeyError as exc:
        raise SourceFetchError(f"{where}: no {exc.args[0]!r}") from exc
    if len(pin.commit) != 40 or any(c not in "0123456789abcdef" for c in pin.commit):
        raise SourceFetchError(f"{where}: commit {pin.commit!r} is not a full git hash")
    return pin


def load_pins(path: Path | None = None) -> tuple[dict[str, Any], list[Sources]]:
    """The pins file (default :data:`PINS_FILE`): its whole text and its sources."""
    path = path or PINS_FILE
    try:
        data = json.loads(path.read_text())
        raw_sources = data["sources"]
        found = [Sources(name=str(s["name"]), archive=str(s["archive"]),
                         pin=_pin(s, f"{path}: sources[{i}]"),
                         submodules=tuple(_pin(m, f"{path}: sources[{i}].submodules[{j}]")
                                          for j, m in enumerate(s.get("submodules", []))))
                 for i, s in enumerate(raw_sources)]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SourceFetchError(f"{path}: not a pins file ({exc})") from exc
    return data, found


def pins_key(path: Path | None = None) -> str:
    """What names a fetch of these pins in the cache (a hash of the pins file)."""
    return hashlib.sha256((path or PINS_FILE).read_bytes()).hexdigest()[:12]


def git_base() -> str:
    return os.environ.get(ENV_GIT, "").strip().rstrip("/") or "https://github.com"


def _git(*args: str, timeout: float = _GIT_TIMEOUT_S) -> bytes:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    argv = ["git", *args]
    try:
        proc = subprocess.run(  # noqa: S603 - an argument list
            argv, capture_output=True, timeout=timeout, check=False, env=env,
            stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise SourceFetchError(f"{' '.join(argv)}: timed out after {timeout:g}s") from exc
    except OSError as exc:
        raise SourceFetchError(f"{' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        fatal = [line for line in err if line.startswith(("fatal:", "error:"))]
        raise SourceFetchError(f"{' '.join(argv[:3])}...: exit {proc.returncode}: "
                               f"{(fatal or err or [''])[0]}")
    return proc.stdout


def _fetch_pin(pin: Pin, gitdir: Path, pins_file: Path) -> None:
    """Fetch ``pin``'s tag into the bare ``gitdir``; refuse another commit."""
    url = f"{git_base()}/{pin.repo}.git"
    _git("init", "--bare", "-q", str(gitdir))
    try:
        _git("--git-dir", str(gitdir), "fetch", "-q", "--depth", "1", "--no-tags", url,
             f"+refs/tags/{pin.tag}:refs/tags/{pin.tag}", timeout=_FETCH_TIMEOUT_S)
    except SourceFetchError as exc:
        said = str(exc).split(": ", 2)[-1]
        raise SourceFetchError(f"cannot fetch {url} tag {pin.tag}: {said}") from exc
    got = _git("--git-dir", str(gitdir), "rev-parse", "--verify",
               f"refs/tags/{pin.tag}^{{commit}}").decode().strip()
    if got != pin.commit:
        raise SourceFetchError(
            f"{url} tag {pin.tag} is commit {got}, not the pinned {pin.commit} "
            f"({pins_file.name}): refusing to build from it")


def _recorded_submodule(gitdir: Path, commit: str, sub: Pin) -> str:
    """The commit the parent's tree records at ``sub.path`` ("" when none)."""
    out = _git("--git-dir", str(gitdir), "ls-tree", commit, "--", sub.path).decode().split()
    return out[2] if len(out) >= 3 and out[1] == "commit" else ""


def _write_archive(dest: Path, parts: list[tuple[bytes, str]]) -> None:
    """One .tar.gz of ``git archive`` outputs (each already under its prefix): the same
    bytes for the same commits (sorted as git writes them, gzip without a time)."""
    seen: set[str] = set()
    with dest.open("wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as out:
        for data, _prefix in parts:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as part:
                for member in part.getmembers():
                    if member.name in seen:
                        continue  # a submodule's folder: the parent has it (empty)
                    seen.add(member.name)
                    out.addfile(member, part.extractfile(member) if member.isfile() else None)


def _one(src: Sources, work: Path, pins_file: Path) -> list[str]:
    """Fetch, check and archive one source; its lines for SOURCES.txt."""
    gitdir = work / f"{src.name}.git"
    _fetch_pin(src.pin, gitdir, pins_file)
    parts = [(_git("--git-dir", str(gitdir), "archive", "--format=tar",
                   f"--prefix={src.name}/", src.pin.commit), src.name)]
    lines = [f"{src.archive}: {src.pin.repo} tag {src.pin.tag} = {src.pin.commit}"]
    for sub in src.submodules:
        recorded = _recorded_submodule(gitdir, src.pin.commit, sub)
        if recorded != sub.commit:
            raise SourceFetchError(
                f"{src.pin.repo} {src.pin.tag} records {sub.path} at commit "
                f"{recorded or '(none)'}, not the pinned {sub.commit} ({pins_file.name}): "
                f"refusing to build from it")
        subdir = work / f"{src.name}-{sub.path.replace('/', '-')}.git"
        _fetch_pin(sub, subdir, pins_file)
        parts.append((_git("--git-dir", str(subdir), "archive", "--format=tar",
                           f"--prefix={src.name}/{sub.path}/", sub.commit), sub.path))
        lines.append(f"  {sub.path}: {sub.repo} tag {sub.tag} = {sub.commit}")
    _write_archive(work / src.archive, parts)
    return lines


def fetch(dest: Path, *, pins_file: Path | None = None,
          say: Callable[[str], None] = print) -> Path:
    """Fetch the pinned sources into ``dest`` (made whole or not at all); ``dest``.

    Raises :class:`SourceFetchError` naming the repository and both commits when a tag
    is not the pinned commit, and what git said when it cannot fetch.
    """
    pins_file = pins_file or PINS_FILE
    data, sources = load_pins(pins_file)
    recipe_sum = hashlib.sha256(RECIPE.read_bytes()).hexdigest()
    if recipe_sum != data.get("recipe_sha256"):
        raise SourceFetchError(f"{RECIPE} has sha256 {recipe_sum}, not the "
                               f"{data.get('recipe_sha256')} of {pins_file}")
    work = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        say(f"fetching the pinned pyxis + enroot sources from {git_base()} into {dest}")
        lines = [f"fetched from {git_base()} by slurm_fsm_dev.pyxissources, "
                 f"checked against {pins_file.name}"]
        for src in sources:
            lines += _one(src, work, pins_file)
        shutil.copy2(RECIPE, work / RECIPE.name)
        (work / "SOURCES.txt").write_text("\n".join(lines) + "\n")
        for src in sources:
            shutil.rmtree(work / f"{src.name}.git")
            for sub in src.submodules:
                shutil.rmtree(work / f"{src.name}-{sub.path.replace('/', '-')}.git")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(work, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
