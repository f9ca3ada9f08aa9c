"""What a container's setup was made from: the key an install writes inside the container
and a new allocation compares before it imports (issue 42 item 1).

pyxis (``container_scope=global``, its default) keeps a named container on the node after
its job. A new allocation whose nodes hold the spec's container, made from the same image
and installed from the same inputs, may use it as it is: no import, no install. This
module says what "the same" means, as one hex key (:func:`setup_key`):

- the image: a digest (``name@sha256:...``) is its identity; an image file (a squashfs
  path) is identified by its real path, size, modification time and inode (a file
  rewritten in place or replaced by a rename is another image). An image named by a tag
  only has no identity here (a tag can move): such a container is never reused.
- the install commands (:func:`slurm_fsm.project.install_commands`), the container's
  mounts and the repo root (``pip install -e .`` points into it);
- the files those commands read (:func:`slurm_fsm.project.install_inputs`): their
  contents, a missing one as missing; a local directory a requirements file names
  (``./devtool``) with its whole tree;
- the repo's commit (``git rev-parse HEAD``; none outside a git checkout).

Anything that cannot be read makes the key None: never a container that cannot be shown
to match. Reading is bounded (:data:`MAX_TREE_FILES`, :data:`MAX_TREE_BYTES`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import attrs

from slurm_fsm.project import install_commands, install_inputs
from slurm_fsm.spec import JobSpec

__all__ = [
    "KEY_VERSION",
    "MAX_TREE_BYTES",
    "MAX_TREE_FILES",
    "SetupKey",
    "image_identity",
    "repo_commit",
    "setup_key",
]

#: The version of the key's recipe: a change of what goes into it changes every key.
KEY_VERSION = 1
#: A local directory a requirements file installs is hashed whole, up to this many files
#: and bytes; a larger one has no key (its container is not reused).
MAX_TREE_FILES = 2000
MAX_TREE_BYTES = 64 * 1024 * 1024
#: Folders of a local requirement that are not part of what pip installs.
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "build", "dist", ".eggs"})
#: Folders of that name prefix are the image cache's (beside a state file in the repo:
#: :attr:`slurm_fsm.paths.StatePaths.image_cache`), never an install input.
SKIPPED_PREFIX = ".slurm_fsm_image_cache"
#: ``git rev-parse HEAD`` may take this long.
GIT_TIMEOUT_S = 10.0
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


@attrs.frozen(kw_only=True)
class SetupKey:
    """The key of a spec's container setup and, for the log, what went into it."""

    #: sha256 hex of the canonical JSON of the inputs
    key: str
    #: one line: the image's identity, the commit, how many input files
    described: str


class _Unreadable(Exception):
    """An input that cannot be read: no key."""


def image_identity(image: str) -> str | None:
    """The identity of ``image``: ``digest sha256:...`` for a reference pinned by digest,
    ``file <realpath> <size> <mtime_ns> <inode>`` for an image file, None for a tag."""
    if (pinned := _DIGEST.search(image)) is not None:
        return f"digest {pinned.group(1)}"
    if not image.startswith(("/", ".")):
        return None  # a tag can move: no proof that the node's container is this image
    try:
        path = os.path.realpath(image)
        st = os.stat(path)
    except OSError:
        return None
    return f"file {path} {st.st_size} {st.st_mtime_ns} {st.st_ino}"


def repo_commit(repo_root: Path) -> str:
    """``git rev-parse HEAD`` of ``repo_root``; "" outside a git checkout (or without
    git)."""
    try:
        done = subprocess.run(  # noqa: S603 - an argument list, no shell
            ["git", "-C", str(repo_root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
            check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise _Unreadable(f"{path}: {exc.strerror or exc}") from exc
    return h.hexdigest()


def _tree_digest(root: Path) -> str:
    """sha256 over the relative paths and contents of the files under ``root``."""
    h = hashlib.sha256()
    count = size = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS
                         and not d.startswith(SKIPPED_PREFIX))
        for name in sorted(names):
            path = Path(folder, name)
            count += 1
            size += path.stat().st_size if path.is_file() else 0
            if count > MAX_TREE_FILES or size > MAX_TREE_BYTES:
                raise _Unreadable(f"{root}: more than {MAX_TREE_FILES} files or "
                                  f"{MAX_TREE_BYTES} bytes")
            h.update(f"{path.relative_to(root)}\0{_file_digest(path)}\0".encode())
    return h.hexdigest()


def _inputs(repo_root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in install_inputs(repo_root):
        rel = os.path.relpath(path, repo_root)
        found[rel] = _tree_digest(path) if path.is_dir() else _file_digest(path)
    return found


def setup_key(spec: JobSpec) -> SetupKey | None:
    """The key of ``spec``'s container setup (see the module), or None when the spec
    has no image, does not install, names its image by tag only, or an input cannot be
    read: then no container is reused."""
    if spec.docker_image is None or not spec.installs:
        return None
    image = image_identity(spec.docker_image)
    if image is None:
        return None
    try:
        files = _inputs(spec.repo_root)
    except (_Unreadable, OSError):
        return None
    commit = repo_commit(spec.repo_root)
    data = {
        "v": KEY_VERSION, "image": image, "repo_root": str(spec.repo_root),
        "mounts": spec.mounts_text, "commit": commit, "files": files,
        "commands": [list(argv) for _, argv in install_commands(spec.repo_root)],
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return SetupKey(
        key=hashlib.sha256(text.encode()).hexdigest(),
        described=(f"{image.split(' ')[0]} {spec.docker_image}, commit {commit[:12] or '-'}, "
                   f"{len(files)} install input(s)"),
    )
