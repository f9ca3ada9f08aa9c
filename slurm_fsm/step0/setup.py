"""Step 0E/0F's setup work: the container import, the mount warm-up, the install.

Theory of operation
-------------------

A worker room of step 0 (issue 40 item 1): functions of the machine's
:class:`~slurm_fsm.step0.context.Step0Context`, the driver's
:class:`~slurm_fsm.step0.context.Step0Memory` and the allocation being set up, never
of the machine. Each Slurm interaction is one setup step (:func:`setup_step`): an
``srun`` with no GPU beside the allocation's running jobs (``--overlap``), bounded by
:attr:`~slurm_fsm.step0.context.MachinePolicy.setup_timeout_s`; a non-zero exit is
:class:`~slurm_fsm.errors.SetupFailed`.

Which of them runs is :mod:`slurm_fsm.step0.container`'s (a shared or reused container
needs none); :func:`setup_key_of` and :func:`read_keys` are the setup key this room
writes last in an install and reads back from the nodes' containers. This module is
loaded only when a run sets a container up: a warm run never.

To extend the import (an image cache, say), add its step to :func:`import_fresh`:
it is the one place a container is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from slurm_fsm import setupkey
from slurm_fsm.backend import ContainerOptions, StepRequest, StepResult
from slurm_fsm.errors import CommandTimedOut, SetupFailed
from slurm_fsm.project import install_commands
from slurm_fsm.setupkey import SetupKey
from slurm_fsm.slurmcli import (
    mount_warmup_argv,
    setup_key_read_argv,
    setup_key_write_argv,
    setup_keys,
)
from slurm_fsm.state import AllocState
from slurm_fsm.step0.context import REUSE_CHECK_TIMEOUT_S, Step0Context, Step0Memory
from slurm_fsm.step0.table import repo_tag

__all__ = [
    "import_fresh",
    "install",
    "read_keys",
    "setup_key_of",
    "setup_step",
    "warm_mounts",
]


def setup_step(ctx: Step0Context, alloc: AllocState, what: str, argv: Sequence[str],
               container: ContainerOptions | None, *, chdir: str | None = None,
               once: str | None = None) -> StepResult:
    """One setup step on every node of ``alloc``; SetupFailed unless it exits 0."""
    result = ctx.backend.run_step(StepRequest(
        job_id=alloc.job_id,
        argv=tuple(argv),
        nodes=alloc.nodes,
        ntasks_per_node=1,
        container=container,
        timeout_s=ctx.policy.setup_timeout_s,
        chdir=chdir,
        # a helper: no GPU, and beside the allocation's running jobs, not behind them
        overlap=True,
        no_gpus=True,
        once=once,
    ))
    if result.exit_code != 0:
        raise SetupFailed(what, result)
    return result


def import_fresh(ctx: Step0Context, alloc: AllocState, image: str | None = None,
                 argv: Sequence[str] = ("true",)) -> StepResult:
    """Import the spec's image as a fresh container of its name on ``alloc``'s nodes,
    once no other run's job uses a container of that name (the lease gate). ``image``:
    another image to make it from (the image cache's entry of the spec's setup key,
    :func:`slurm_fsm.imagecache.start_from_cache`); ``argv``: the step's command in the
    new container (its result is returned; SetupFailed unless it exits 0)."""
    spec = ctx.spec
    name, image = spec.container_name or "", image or spec.docker_image
    if ctx.leases is not None:
        ctx.leases.clear(alloc.job_id, f"re-importing container {name!r}", name)
    ctx.say(f"Importing {image} as container {name!r} on {alloc.nodelist}.")
    # Importing is entered only when this allocation holds no container of the
    # spec's name that the state file vouches for (nor one whose setup key matches):
    # a new allocation, another container, or one the state file does not name. pyxis
    # would silently reuse any container of that name the nodes still hold (from an
    # earlier allocation, maybe of another image): ask for a fresh one.
    return setup_step(
        ctx, alloc, f"container import of {image}", tuple(argv),
        ContainerOptions(name=name, image=image, mounts=spec.mounts_text, fresh=True,
                         owner=f"{repo_tag(spec)} {spec.repo_root}"),
    )


def warm_mounts(ctx: Step0Context, alloc: AllocState, warn: Callable[[str], None]) -> None:
    """0E.2: one ``ls`` loop over the container's mount targets, failures ignored
    (what ``ls`` said is a warning)."""
    spec = ctx.spec
    if not spec.container_mounts:
        return
    targets = [mount.container for mount in spec.container_mounts]
    warmed = setup_step(
        ctx, alloc, f"mount warm-up of {', '.join(targets)}", mount_warmup_argv(targets),
        ContainerOptions(name=spec.container_name or "", mounts=spec.mounts_text),
    )
    if warmed.stderr.strip():
        warn("mount warm-up: ls reported (ignored, the job goes on): "
             + " | ".join(warmed.stderr.strip().splitlines()[-5:]))


def install(ctx: Step0Context, alloc: AllocState, key: SetupKey | None
            ) -> tuple[AllocState, str]:
    """0F: the project's install commands in the container (node-locked, once per
    node), then the setup ``key`` (last: only a finished install has it). The
    allocation marked installed (written to the state file) and the summary."""
    spec = ctx.spec
    options = ContainerOptions(
        name=spec.container_name or "", mounts=spec.mounts_text, writable=True,
        workdir=str(spec.repo_root),
    )
    commands = install_commands(spec.repo_root)
    if ctx.leases is not None:
        ctx.leases.clear(alloc.job_id, f"installing into container {options.name!r}",
                         options.name)
    for what, argv in commands:
        ctx.say(f"Installing: {what}")
        # node-locked, done once per node: a run racing into this allocation (another
        # host, the state file not yet saying installed) waits, then skips it
        setup_step(ctx, alloc, what, argv, options, chdir=str(spec.repo_root),
                   once=f"install {options.name} {what}")
    if key is not None:
        setup_step(ctx, alloc, "setup key", setup_key_write_argv(key.key), options)
    alloc = attrs.evolve(alloc, installed=True)
    ctx.store.write(alloc)
    return alloc, "installed: " + "; ".join(w for w, _ in commands)


def setup_key_of(ctx: Step0Context, mem: Step0Memory) -> SetupKey | None:
    """The spec's setup key (:mod:`slurm_fsm.setupkey`), computed once per machine."""
    if mem.setup_key is None:
        mem.setup_key = (setupkey.setup_key(ctx.spec),)
    return mem.setup_key[0]


def read_keys(ctx: Step0Context, alloc: AllocState) -> dict[str, str]:
    """One step that reads the setup key each node's container of the spec's name holds
    and warms its mounts (a reused container costs one step); {} when it failed."""
    spec = ctx.spec
    targets = [mount.container for mount in spec.container_mounts]
    try:
        result = ctx.backend.run_step(StepRequest(
            job_id=alloc.job_id, argv=tuple(setup_key_read_argv(targets)),
            nodes=alloc.nodes,
            container=ContainerOptions(name=spec.container_name or "",
                                       mounts=spec.mounts_text),
            timeout_s=min(ctx.policy.setup_timeout_s, REUSE_CHECK_TIMEOUT_S),
            overlap=True, no_gpus=True,
        ))
    except CommandTimedOut as exc:  # a slow node: the import decides, as before
        result = StepResult(124, "", str(exc))
    return setup_keys(result.stdout) if result.exit_code == 0 else {}
