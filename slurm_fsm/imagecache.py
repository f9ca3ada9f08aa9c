"""A cache of installed container images (issue 42 item 2): where it is, what an entry
is called, when one is evicted, and step 0's two uses of it.

pyxis keeps a named container on its node only under ``container_scope=global``; under
``container_scope=job``, or when a new allocation lands on other nodes, the installed
container is gone and every new allocation imports and installs again. After the first
install, the installed container is exported once (``enroot export`` of pyxis' named
container, in a step on the node: :func:`slurm_fsm.slurmcli.image_export_argv`) to a
squashfs file in the cache; a later allocation whose spec has the same setup key
(:mod:`slurm_fsm.setupkey`: the image's identity, the install commands and the files
they read, the commit) starts from that file with ``--container-image=<file>``: no
import of the spec's image, no install.

- **The entry** of a setup key is ``<folder>/<key>.sqsh``. Its name is its key: a
  changed image or install input has another key, so it misses (never a stale image).
  It is written aside (``.<key>.sqsh.<node>.<pid>``) and renamed, under the folder's
  lock (``<folder>/lock``, ``flock`` on the node): a reader sees a whole file or none,
  and two allocations that finish their install at once export it once.
- **The folder**: the spec's ``image_cache_dir``, else ``$SLURM_FSM_IMAGE_CACHE``, else
  ``.slurm_fsm_image_cache`` beside the state file
  (:attr:`slurm_fsm.paths.StatePaths.image_cache`). The nodes must see it at the same
  path (a shared filesystem, as the repo they install from).
- **The size limit**: the spec's ``image_cache_max_gb``, else
  ``$SLURM_FSM_IMAGE_CACHE_MAX_GB``, else :data:`DEFAULT_MAX_GB`; ``0`` turns the cache
  off. After an export, entries are removed **oldest first** (by last use: a hit
  touches its entry) until the folder holds at most the limit; the entry just written
  is kept unless it alone is larger than the limit. Leftover temporary files of an
  export that died are removed after :data:`STALE_TEMP_S`.

:func:`start_from_cache` and :func:`fill` are what step 0 calls (one line each in
:mod:`slurm_fsm.machine`): like a room of :mod:`slurm_fsm.step0`, functions of the
:class:`~slurm_fsm.step0.context.Step0Context`, the allocation, the spec's setup key
and the driver's warning, never of the machine; the command lines are
:mod:`slurm_fsm.slurmcli`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs

from slurm_fsm import setupkey
from slurm_fsm.backend import StepRequest, StepResult
from slurm_fsm.errors import CommandTimedOut, SetupFailed
from slurm_fsm.paths import StatePaths
from slurm_fsm.pyxissite import PyxisQuery, PyxisSite, new_allocation_tries
from slurm_fsm.setupkey import SetupKey
from slurm_fsm.slurmcli import image_export_argv, image_exported, setup_key_read_argv, setup_keys
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState
from slurm_fsm.step0 import setup
from slurm_fsm.step0.context import Step0Context

__all__ = [
    "DEFAULT_MAX_GB",
    "ENV_DIR",
    "ENV_MAX_GB",
    "LOCK_NAME",
    "STALE_TEMP_S",
    "SUFFIX",
    "CacheEntry",
    "ImageCache",
    "cache_of",
    "fill",
    "new_allocation",
    "nodes_may_keep",
    "site_of",
    "start_from_cache",
]

#: A shared folder for the cache (the spec's ``image_cache_dir`` comes first).
ENV_DIR = "SLURM_FSM_IMAGE_CACHE"
#: The cache's size limit in GB (the spec's ``image_cache_max_gb`` comes first); 0: off.
ENV_MAX_GB = "SLURM_FSM_IMAGE_CACHE_MAX_GB"
#: The size limit when neither names one: a few installed CUDA devel images.
DEFAULT_MAX_GB = 100
#: An entry's file name is ``<setup key><SUFFIX>``.
SUFFIX = ".sqsh"
#: The folder's lock: the export on the node and the eviction here take it.
LOCK_NAME = "lock"
#: A temporary file of an export older than this is a dead export's: removed.
STALE_TEMP_S = 24 * 3600.0
_GB = 1000**3


@attrs.frozen(kw_only=True)
class CacheEntry:
    """One installed image in the cache."""

    key: str
    path: Path
    size: int
    #: the last use (its modification time: written, or touched by a hit)
    used: float


@attrs.frozen(kw_only=True)
class ImageCache:
    """The cache folder and its size limit (see the module)."""

    folder: Path
    max_bytes: int

    def entry_path(self, key: str) -> Path:
        """Where the installed image of setup key ``key`` is (or would be)."""
        return self.folder / f"{key}{SUFFIX}"

    def entries(self) -> list[CacheEntry]:
        """The cache's entries, oldest use first."""
        found = []
        try:
            paths = list(self.folder.glob(f"*{SUFFIX}"))
        except OSError:
            return []
        for path in paths:
            if path.name.startswith("."):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            found.append(CacheEntry(key=path.name.removesuffix(SUFFIX), path=path,
                                    size=st.st_size, used=st.st_mtime))
        return sorted(found, key=lambda e: (e.used, e.key))

    def lookup(self, key: str) -> Path | None:
        """The entry of ``key`` when the cache holds it whole (a regular, non-empty file:
        only a finished export is renamed to its name); its use is recorded (its
        modification time), so that eviction removes the least recently used first."""
        path = self.entry_path(key)
        try:
            if not path.is_file() or path.stat().st_size == 0:
                return None
            os.utime(path)
        except OSError:
            return None
        return path

    def lookup_quietly(self, key: str) -> Path | None:
        """The entry of ``key`` as :meth:`lookup` finds it, its use not recorded (a
        plan only looks)."""
        path = self.entry_path(key)
        try:
            return path if path.is_file() and path.stat().st_size > 0 else None
        except OSError:
            return None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The folder's lock (:data:`LOCK_NAME`), the one the export takes on a node."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def evict(self, keep: str | None = None, *, now: float | None = None) -> list[Path]:
        """Under the folder's lock: remove entries oldest use first until the folder
        holds at most :attr:`max_bytes`, never ``keep`` unless it alone is larger than
        the limit; remove stale temporary files. Returns what was removed."""
        removed: list[Path] = []
        with self.locked():
            entries = self.entries()
            total = sum(e.size for e in entries)
            for entry in [e for e in entries if e.key != keep] + \
                    [e for e in entries if e.key == keep]:
                if total <= self.max_bytes:
                    break
                with contextlib.suppress(FileNotFoundError):
                    entry.path.unlink()
                total -= entry.size
                removed.append(entry.path)
            removed += self._stale_temps(time.time() if now is None else now)
        return removed

    def _stale_temps(self, now: float) -> list[Path]:
        removed = []
        for path in self.folder.glob(f".*{SUFFIX}.*"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_TEMP_S:
                    path.unlink()
                    removed.append(path)
        return removed


def _max_gb(spec: JobSpec, environ: Mapping[str, str]) -> float:
    if spec.image_cache_max_gb is not None:
        return float(spec.image_cache_max_gb)
    raw = environ.get(ENV_MAX_GB, "").strip()
    if not raw:
        return float(DEFAULT_MAX_GB)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_MAX_GB} must be a number of GB, got {raw!r}") from None
    if not value >= 0:
        raise ValueError(f"{ENV_MAX_GB} must be >= 0, got {raw!r}")
    return value


def cache_of(spec: JobSpec, state_path: Path,
             environ: Mapping[str, str] | None = None) -> ImageCache | None:
    """The image cache of ``spec`` whose state file is ``state_path`` (see the module
    for the folder and the limit), or None: the cache is off (a limit of 0), or the
    spec sets up no container. Raises ValueError for an environment variable that is
    not a number."""
    env = os.environ if environ is None else environ
    if spec.docker_image is None or not spec.installs:
        return None
    limit = _max_gb(spec, env)
    if limit <= 0:
        return None
    raw = spec.image_cache_dir or env.get(ENV_DIR, "").strip()
    folder = (Path(raw) if raw
              else StatePaths.of_allocation_file(state_path).image_cache)
    return ImageCache(folder=folder.absolute(), max_bytes=int(limit * _GB))


def _dry(ctx: Step0Context) -> bool:
    """A plan's machine (:class:`slurm_fsm.plan.PlanBackend`): no step runs."""
    return getattr(ctx.backend, "dry_run", False) is True


def _cache(ctx: Step0Context, warn: Callable[[str], None]) -> ImageCache | None:
    try:  # a plan's state file is a scratch copy: the checkout's own cache is meant
        return cache_of(ctx.spec, ctx.spec.state_path if _dry(ctx) else ctx.store.path)
    except ValueError as exc:
        warn(f"image cache: {exc}; not used")
        return None


def start_from_cache(ctx: Step0Context, alloc: AllocState, key: SetupKey | None,
                     warn: Callable[[str], None]) -> tuple[str, AllocState] | None:
    """Before a cold import into a new allocation: when the cache holds the spec's
    setup key, one step makes the container from that file (``--container-image=<file>``,
    a fresh container as every import), reads the key it holds and warms the mounts.
    When every node's key is the spec's, the state becomes imported and installed
    (nothing of the spec's image imported, nothing installed) and the summary is
    returned. Else (no key for the spec, no entry, a failed step, another key): None,
    the cold import follows (and replaces whatever the step made)). With the summary,
    the allocation marked imported and installed (written to the state file).
    ``key``: the spec's setup key (:func:`slurm_fsm.setupkey.setup_key`)."""
    cache = _cache(ctx, warn) if key is not None else None
    look = (cache.lookup_quietly if _dry(ctx) else cache.lookup) if cache is not None else None
    entry = look(key.key) if look is not None and key is not None else None
    if key is None or entry is None:
        return None
    spec, name = ctx.spec, ctx.spec.container_name or ""
    ctx.say(f"The image cache holds setup key {key.key[:12]}: container {name!r} is made "
            f"from {entry}.")
    try:  # step 0's one import, of the entry: its key read, the mounts warmed
        result = setup.import_fresh(ctx, alloc, str(entry), setup_key_read_argv(
            [mt.container for mt in spec.container_mounts]))
    except SetupFailed as exc:
        result = exc.result
    except CommandTimedOut as exc:
        result = StepResult(124, "", str(exc))
    found = setup_keys(result.stdout) if result.exit_code == 0 else {}
    nodes = ctx.backend.expand_nodelist(alloc.nodelist)
    if not _dry(ctx) and (not nodes or any(found.get(n) != key.key for n in nodes)):
        why = (result.stderr.strip().splitlines() or ["another setup key"])[-1]
        warn(f"image cache: {entry} did not start on {alloc.nodelist} ({why}): "
             "imported and installed afresh")
        return None
    alloc = attrs.evolve(alloc, container_name=name, installed=True)
    ctx.store.write(alloc)
    return (f"container {name!r} made on {alloc.nodelist} from the image cache "
            f"({entry.name}: same image and install inputs): nothing installed"), alloc


def fill(ctx: Step0Context, alloc: AllocState, key: SetupKey | None,
         warn: Callable[[str], None]) -> float | None:
    """After a finished install (its setup key written in the container): export the
    installed container once to the cache, in a step on the allocation's first node
    (``enroot export`` under the folder's lock, written aside and renamed), then evict
    oldest first down to the size limit. A failure is a warning: the run goes on.
    Returns the step's seconds (None: nothing exported: no key, the cache off, or the
    entry there already). ``key``: the spec's setup key."""
    cache = _cache(ctx, warn) if key is not None else None
    if key is None or cache is None or cache.lookup(key.key) is not None:
        return None
    name = ctx.spec.container_name or ""
    ctx.say(f"Exporting container {name!r} to the image cache {cache.folder}.")
    started = ctx.clock.now()
    try:
        result = ctx.backend.run_step(StepRequest(
            job_id=alloc.job_id, argv=tuple(image_export_argv(
                str(cache.folder), key.key, alloc.job_id, name)),
            nodes=1, timeout_s=ctx.policy.setup_timeout_s, overlap=True, no_gpus=True,
        ))
    except CommandTimedOut as exc:
        result = StepResult(124, "", str(exc))
    took = ctx.clock.now() - started
    if _dry(ctx):
        return None
    if result.exit_code != 0 or image_exported(result.stdout) is None:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:]) or f"exit {result.exit_code}"
        warn(f"image cache: export of container {name!r} failed (the run goes on): "
             f"{tail}")
        return took
    for path in cache.evict(keep=key.key):
        ctx.say(f"Image cache: removed {path.name} (oldest first, over "
                f"{cache.max_bytes / _GB:g} GB).")
    return took


def site_of(backend: object) -> PyxisSite | None:
    """The backend's answer about pyxis (:class:`slurm_fsm.pyxissite.PyxisQuery`); a
    backend that cannot say is taken as pyxis with its defaults."""
    if isinstance(backend, PyxisQuery):
        return backend.pyxis_site()
    return PyxisSite(source="not asked: pyxis' defaults assumed")


def nodes_may_keep(ctx: Step0Context) -> bool:
    """Whether a new allocation's nodes may hold the container a former one set up:
    not where pyxis removes a container with its job (``container_scope=job``), where
    the check of the nodes' setup keys could only miss (issue 42 item 3)."""
    site = site_of(ctx.backend)
    if site is not None and not site.keeps_containers:
        ctx.say(f"Not checking the nodes for container {ctx.spec.container_name!r}: "
                f"{site.describe()} removes it with its job.")
        return False
    return True


def new_allocation(spec: JobSpec, backend: object,
                   environ: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """What step 0 of the next new allocation would do for ``spec``'s container (``plan``
    says it): ``tries`` in order (:func:`slurm_fsm.pyxissite.new_allocation_tries`: the
    nodes' container, the cache's entry, cold), the ``cache_entry`` it would start from,
    the ``cache_folder`` a cold install is exported to, the ``pyxis`` options read, and
    ``says``, one sentence. None: the spec sets up no container."""
    if spec.docker_image is None or not spec.persistent_mode:
        return None
    site = site_of(backend)
    key = setupkey.setup_key(spec)
    try:
        cache = cache_of(spec, spec.state_path, environ)
    except ValueError:
        cache = None
    entry = cache.lookup_quietly(key.key) if cache is not None and key is not None else None
    tries = new_allocation_tries(site, keyed=key is not None, cached=entry is not None)
    why = ("no setup key (an image named by tag only, no install, or an input not "
           "readable): imported and installed" if key is None else
           f"setup key {key.key[:12]}")
    says = (f"a new allocation's container: {', else '.join(tries) or 'none (no pyxis)'}"
            f" ({why}; {site.describe() if site else 'no pyxis'})")
    if cache is not None and key is not None and entry is None:
        says += f"; a cold install is exported to {cache.entry_path(key.key)}"
    return {"tries": tries, "cache_entry": str(entry) if entry else None,
            "cache_folder": str(cache.folder) if cache else None,
            "pyxis": site.to_dict() if site else None, "says": says}
