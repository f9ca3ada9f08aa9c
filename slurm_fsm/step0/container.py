"""How step 0 comes by its container: the Importing and Installing states' work.

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1): functions of the
:class:`~slurm_fsm.step0.context.Step0Context` and the driver's
:class:`~slurm_fsm.step0.context.Step0Memory`. :func:`importing` chooses, in this
order: a live allocation's container on the same nodes
(:func:`slurm_fsm.handoff.before_import`), the one the nodes kept with the spec's setup
key (:func:`reuse_on_node`), the image cache's
(:func:`slurm_fsm.imagecache.start_from_cache`), else a fresh import
(:func:`slurm_fsm.step0.setup.import_fresh`) and its mount warm-up; each but the shared
one checks the GPUs (:func:`slurm_fsm.step0.checks.gpu_check`). :func:`installing`
installs (:func:`slurm_fsm.step0.setup.install`), then exports to the image cache.
What was chosen is ``mem.container_setup``; the allocation, ``mem.alloc`` (and the
state file).

The steps themselves are :mod:`slurm_fsm.step0.setup`'s; this module sits above it and
above the image cache (which imports from the setup room), so the import graph has no
circle. It is loaded only when a run sets a container up: a warm run never.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from slurm_fsm import handoff, imagecache
from slurm_fsm.step0 import checks, setup
from slurm_fsm.step0.context import Step0Context, Step0Memory, warn
from slurm_fsm.step0.outcome import SETUP_CACHED, SETUP_COLD, SETUP_REUSED, SETUP_SHARED

__all__ = ["importing", "installing", "reuse_on_node"]


def importing(ctx: Step0Context, mem: Step0Memory) -> str:
    """The Importing state's work: the container shared, reused, made from the image
    cache or imported afresh (in that order); the summary."""
    assert mem.alloc is not None
    name = ctx.spec.container_name or ""
    if (shared := handoff.before_import(ctx, mem)) is not None:
        mem.container_setup = SETUP_SHARED
        return shared  # a container a live allocation of the checkout uses: kept
    if (kept := reuse_on_node(ctx, mem)) is not None:
        return kept
    say = _warner(ctx, mem)
    cached = imagecache.start_from_cache(ctx, mem.alloc, setup.setup_key_of(ctx, mem), say)
    if cached is not None:
        summary, mem.alloc = cached
        mem.container_setup = SETUP_CACHED
        checks.gpu_check(ctx, mem)
        return summary
    setup.import_fresh(ctx, mem.alloc)  # the one place a container is imported
    mem.container_setup = SETUP_COLD
    setup.warm_mounts(ctx, mem.alloc, say)
    checks.gpu_check(ctx, mem)
    # not installed yet, also when this job skips the install (skip_install): the
    # next job in this container that installs must find it not done
    mem.alloc = attrs.evolve(mem.alloc, container_name=name, installed=False)
    ctx.store.write(mem.alloc)
    return f"container {name!r} imported on {mem.alloc.nodelist}"


def _held(found: str, key: str) -> str:
    """What a node's container holds, said against the spec's setup ``key``."""
    return "same setup" if found == key else "no setup key" if found == "-" else "other setup"


def _warner(ctx: Step0Context, mem: Step0Memory) -> Callable[[str], None]:
    """A warning as the rooms' callbacks take it (:func:`slurm_fsm.step0.context.warn`)."""
    return lambda text: warn(ctx, mem, text)


def reuse_on_node(ctx: Step0Context, mem: Step0Memory) -> str | None:
    """Issue 42 item 1: before a fresh import into a new allocation, one step reads
    the setup key the install left in the container of the spec's name on each node
    (pyxis' global scope keeps it after its job) and warms its mounts. When every
    node's key is the spec's (same image, same install inputs:
    :mod:`slurm_fsm.setupkey`), that container is used as it is: the state becomes
    imported and installed, nothing is imported or installed. Else (no container,
    no key, another key, a failed or timed-out step): None, a fresh import. No key
    for the spec (a tag, no install): no step at all."""
    assert mem.alloc is not None
    key = setup.setup_key_of(ctx, mem)
    if key is None or not imagecache.nodes_may_keep(ctx):  # item 3: pyxis' scope
        return None
    name, alloc = ctx.spec.container_name or "", mem.alloc
    found = setup.read_keys(ctx, alloc)
    nodes = ctx.backend.expand_nodelist(alloc.nodelist)
    if not nodes or any(found.get(n) != key.key for n in nodes):
        held = ", ".join(f"{n}: {_held(found.get(n, '-'), key.key)}" for n in nodes)
        ctx.say(f"Container {name!r} not reusable on {alloc.nodelist} "
                f"({held}): imported and installed afresh.")
        return None
    mem.container_setup = SETUP_REUSED
    checks.gpu_check(ctx, mem)
    mem.alloc = attrs.evolve(alloc, container_name=name, installed=True)
    ctx.store.write(mem.alloc)
    ctx.say(f"Container {name!r} on {alloc.nodelist} was set up from the same "
            f"image and install inputs ({key.described}): used as it is.")
    return (f"container {name!r} reused on {alloc.nodelist} (setup key "
            f"{key.key[:12]}: same image and install inputs): nothing imported or "
            "installed")


def installing(ctx: Step0Context, mem: Step0Memory) -> str:
    """The Installing state's work: :func:`install`, then the export to the image cache
    (issue 42 item 2: its seconds are ``mem.cache_write_s``); the summary."""
    assert mem.alloc is not None
    mem.alloc, summary = setup.install(ctx, mem.alloc, setup.setup_key_of(ctx, mem))
    mem.cache_write_s = imagecache.fill(ctx, mem.alloc, setup.setup_key_of(ctx, mem),
                                        _warner(ctx, mem))
    return summary
