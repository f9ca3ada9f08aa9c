"""What the cluster's pyxis does with containers, and so what a new allocation tries
first (issue 42 item 3).

pyxis takes its options from its line of the SPANK plugstack config
(``required /usr/lib/.../spank_pyxis.so container_scope=job importer=... ...``):

- ``container_scope``: ``global`` (its default) keeps a named container on the node
  after its job; ``job`` removes it with its job (``pyxis_<job>_<name>``). Only under
  ``global`` can a new allocation find the container its node kept (issue 42 item 1);
  under ``job`` that check is never made (it could only miss: one step saved).
- ``importer``: a program that turns a registry image into a squashfs. It is not used
  for an image given as a file, which a cache entry is: no change to the choice.
- ``use_squashfuse``: mounts an image file instead of unpacking it, for unnamed
  containers only; step 0's containers are named, so they are unpacked either way.

:func:`read_plugstack` reads the config where the login host can read it (the path
``scontrol show config`` names as ``PlugStackConfig``, its ``include`` lines followed);
where it cannot, ``srun --help`` says only whether pyxis is there, and pyxis' defaults
are assumed. A backend answers :class:`PyxisQuery`; :func:`new_allocation_tries` turns
the answer, the setup key and the image cache into what the next new allocation
tries, in order (``plan`` says it).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

__all__ = [
    "DEFAULT_PLUGSTACK",
    "MAX_PLUGSTACK_BYTES",
    "SCOPE_GLOBAL",
    "SCOPE_JOB",
    "TRY_CACHE",
    "TRY_COLD",
    "TRY_NODE",
    "PyxisQuery",
    "PyxisSite",
    "new_allocation_tries",
    "parse_plugstack",
    "plugstack_path",
    "read_plugstack",
    "site_from_options",
]

SCOPE_GLOBAL = "global"
SCOPE_JOB = "job"
#: Slurm's ``PlugStackConfig`` when ``scontrol show config`` names none.
DEFAULT_PLUGSTACK = Path("/etc/slurm/plugstack.conf")
#: A plugstack file (or one it includes) is read up to this many bytes.
MAX_PLUGSTACK_BYTES = 256 * 1024
#: ``include`` lines are followed this deep.
_MAX_DEPTH = 4
#: What a new allocation tries, in order (:func:`new_allocation_tries`).
TRY_NODE = "reused on node"
TRY_CACHE = "from the cache"
TRY_COLD = "cold"


@attrs.frozen(kw_only=True)
class PyxisSite:
    """The cluster's pyxis options, and where they were read."""

    container_scope: str = SCOPE_GLOBAL
    #: ``importer=`` (a path), "" for none
    importer: str = ""
    use_squashfuse: bool = False
    #: ``plugstack <path>``, or ``srun --help`` when the config could not be read
    #: (pyxis' defaults assumed)
    source: str = ""

    @property
    def keeps_containers(self) -> bool:
        """Whether a named container outlives its job on the node (``global``)."""
        return self.container_scope != SCOPE_JOB

    def describe(self) -> str:
        """One line: the options and where they were read."""
        return (f"pyxis container_scope={self.container_scope}, importer="
                f"{self.importer or '-'}, use_squashfuse="
                f"{'true' if self.use_squashfuse else 'false'} ({self.source})")

    def to_dict(self) -> dict[str, object]:
        return {"container_scope": self.container_scope, "importer": self.importer or None,
                "use_squashfuse": self.use_squashfuse, "source": self.source}


@runtime_checkable
class PyxisQuery(Protocol):
    """What a backend answers about the cluster's pyxis (read-only)."""

    def pyxis_site(self) -> PyxisSite | None:
        """The pyxis options (:class:`PyxisSite`); None when pyxis is not there."""
        ...


_TRUE = frozenset({"1", "true", "yes", "y", "on"})


def parse_plugstack(text: str) -> tuple[dict[str, str] | None, list[str]]:
    """``(options of pyxis' line, include patterns)`` of a plugstack file's text: the
    ``key=value`` words after the line naming ``spank_pyxis.so`` (None: no such line).
    Comments (``#``) and blank lines are skipped."""
    options: dict[str, str] | None = None
    includes: list[str] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "include":
            includes += words[1:]
        elif len(words) >= 2 and words[0] in ("required", "optional") \
                and os.path.basename(words[1]).startswith("spank_pyxis"):
            options = dict(w.split("=", 1) for w in words[2:] if "=" in w)
    return options, includes


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_PLUGSTACK_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def read_plugstack(path: Path, *, _depth: int = 0) -> dict[str, str] | None:
    """pyxis' options in the plugstack config ``path`` or a file it includes (glob
    patterns, relative to its folder); None when no readable file holds pyxis' line."""
    text = _read(path)
    if text is None or _depth > _MAX_DEPTH:
        return None
    options, includes = parse_plugstack(text)
    if options is not None:
        return options
    for pattern in includes:
        full = pattern if pattern.startswith("/") else str(path.parent / pattern)
        for found in sorted(glob.glob(full))[:64]:
            if (options := read_plugstack(Path(found), _depth=_depth + 1)) is not None:
                return options
    return None


def plugstack_path(config_text: str) -> Path:
    """``PlugStackConfig`` of ``scontrol show config``, else :data:`DEFAULT_PLUGSTACK`."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PlugStackConfig" and value.strip().startswith("/"):
            return Path(value.strip())
    return DEFAULT_PLUGSTACK


def site_from_options(options: Mapping[str, str], source: str) -> PyxisSite:
    """The site of pyxis' ``options`` (pyxis' defaults for what is not there)."""
    scope = options.get("container_scope", SCOPE_GLOBAL).strip().lower()
    return PyxisSite(
        container_scope=SCOPE_JOB if scope == SCOPE_JOB else SCOPE_GLOBAL,
        importer=options.get("importer", "").strip(),
        use_squashfuse=options.get("use_squashfuse", "").strip().lower() in _TRUE,
        source=source)


def new_allocation_tries(site: PyxisSite | None, *, keyed: bool, cached: bool) -> list[str]:
    """What a new allocation's step 0 tries for its container, in order, the last one
    sure: the container its nodes kept (only where pyxis keeps containers, and only for
    a spec with a setup key), the image cache's entry (``cached``: the cache holds the
    spec's key), else a cold import and install. Without pyxis: ``[]``."""
    if site is None:
        return []
    tries = [TRY_NODE] if keyed and site.keeps_containers else []
    if keyed and cached:
        tries.append(TRY_CACHE)
    return [*tries, TRY_COLD]
