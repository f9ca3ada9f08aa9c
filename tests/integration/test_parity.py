"""The fake cluster and real Slurm agree: the step-0 scenarios the fake can express run
from one parametrized test over ``backend in ["fake", "real"]`` and must take the same
path of states to the same outcome (final state, state file, which jobs live).

The fake is built to look like the local cluster (its partition, accounts, nodes and
user); the only difference a scenario sees is how an allocation comes close to its
end: the fake's clock is advanced, the real one is made with a 5-minute limit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs
import pytest

from slurm_fsm.backend import AllocationRequest, SlurmBackend
from slurm_fsm.duration import Duration
from slurm_fsm.lease import LeaseGate
from slurm_fsm.machine import AllocationMachine, SetupFailed
from slurm_fsm.paths import StatePaths
from slurm_fsm.results import setup_error_lines
from slurm_fsm.runrecord import RunBook
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm.testing import FakeCluster
from slurm_fsm_dev.localcluster import DEF_CPU_PER_GPU, GPUS_PER_NODE, ClusterInfo

from .containers import ContainerNames, make_install_repo, pyxis_or_skip
from .helpers import (
    RELAYS_WITH_TIMESTAMPS,
    JobNames,
    job_state,
    jobs_named,
    make_spec,
    slurm,
    slurm_version,
    until,
    wait_gone,
)

pytestmark = pytest.mark.slurm


class World(Protocol):
    """What a scenario may do to a cluster, fake or real."""

    kind: str
    backend: SlurmBackend

    def spec(self, **over: Any) -> JobSpec: ...

    def machine(self, spec: JobSpec) -> AllocationMachine: ...

    def running(self, job_id: str) -> bool: ...

    def our_jobs(self) -> list[str]: ...

    def cancel_behind_our_back(self, job_id: str) -> None: ...

    def expiring_time_limit(self) -> str: ...

    def let_it_age(self) -> None: ...

    def leave_minutes(self, minutes: int) -> None: ...

    def image_in(self, job_id: str, name: str) -> list[str]: ...

    def live(self, name: str) -> list[str]: ...

    def wait_running(self, job_id: str) -> None: ...

    def leases(self, spec: JobSpec) -> LeaseGate: ...

    def wait_gone(self, job_id: str) -> None: ...

    def forget_containers(self, name: str) -> None: ...


class FakeWorld:
    kind = "fake"

    def __init__(self, cluster: ClusterInfo, root: Path, name: str) -> None:
        self.cluster = cluster
        self.root = root
        self.name = name
        # like the local cluster: image files and mount sources on this filesystem,
        # no registry
        self.fake = FakeCluster(partitions={cluster.partition: cluster.nodes},
                                accounts=[cluster.account, cluster.other_account],
                                user=cluster.user, path_exists=os.path.exists,
                                registry=False, preflight=True,  # sinfo/sacctmgr too
                                gpus_per_node=GPUS_PER_NODE,
                                cpus_per_node=cluster.cpus_per_node)
        if cluster.has("defcpu"):
            self.fake.default_cpus_per_gpu = DEF_CPU_PER_GPU
        if cluster.has("jobscope"):  # pyxis' container_scope=job
            self.fake.container_scope = "job"
        # and srun relays slurmstepd's lines as the real cluster's Slurm does (a version
        # not measured yet is a KeyError: measure it, do not guess)
        self.fake.relay_timestamps = RELAYS_WITH_TIMESTAMPS[slurm_version()]
        self.backend: SlurmBackend = self.fake

    def spec(self, **over: Any) -> JobSpec:
        return make_spec(self.cluster, self.root, self.name, **over)

    def machine(self, spec: JobSpec) -> AllocationMachine:
        return AllocationMachine(spec, self.fake, clock=self.fake.clock)

    def running(self, job_id: str) -> bool:
        job = self.fake.jobs.get(job_id)
        return job is not None and job.active and job.state == "RUNNING"

    def our_jobs(self) -> list[str]:
        return self.live(self.name)

    def live(self, name: str) -> list[str]:
        return [j.job_id for j in self.fake.active_jobs() if j.name == name]

    def wait_running(self, job_id: str) -> None:
        assert self.fake.query_job(job_id).state.is_running  # the fake runs it at once

    def leases(self, spec: JobSpec) -> LeaseGate:
        return LeaseGate(RunBook(spec.state_path), wait_s=0, clock=self.fake.clock,
                         backend=self.fake)

    def cancel_behind_our_back(self, job_id: str) -> None:
        self.fake.end_job(job_id, "CANCELLED")

    def wait_gone(self, job_id: str) -> None:
        assert not self.running(job_id)  # the fake ends a cancelled job at once

    def forget_containers(self, name: str) -> None:
        for node in self.fake.nodes.values():
            node.containers.pop(name, None)

    def expiring_time_limit(self) -> str:
        return "01:00:00"

    def let_it_age(self) -> None:
        self.fake.clock.advance(3600 - 240)  # 4 minutes left

    def leave_minutes(self, minutes: int) -> None:
        """``minutes`` left of the 30-minute allocation."""
        self.fake.clock.advance((30 - minutes) * 60)

    def image_in(self, job_id: str, name: str) -> list[str]:
        """Which of the cluster's images each node's container ``name`` was made from."""
        assert self.cluster.containers is not None
        label = {str(p): k for k, p in self.cluster.containers.images.items()}
        job = self.fake.jobs[job_id]
        return [label[self.fake.nodes[n].containers[name].image] for n in job.nodes]


class RealWorld:
    kind = "real"

    def __init__(self, cluster: ClusterInfo, root: Path, names: JobNames) -> None:
        self.cluster = cluster
        self.root = root
        self.name = names.new("parity")
        names.names.append(self.name + "-b")  # a warm successor's twin name: cleaned too
        self.backend: SlurmBackend = SubprocessBackend()

    def spec(self, **over: Any) -> JobSpec:
        return make_spec(self.cluster, self.root, self.name, **over)

    def machine(self, spec: JobSpec) -> AllocationMachine:
        return AllocationMachine(spec, self.backend)

    def running(self, job_id: str) -> bool:
        return job_state(job_id) == "RUNNING"

    def our_jobs(self) -> list[str]:
        return self.live(self.name)

    def live(self, name: str) -> list[str]:
        return [job_id for job_id, state in jobs_named(name, self.cluster.user)
                if state not in ("COMPLETING", "CANCELLED")]

    def wait_running(self, job_id: str) -> None:
        until(f"job {job_id} RUNNING", lambda: True if self.running(job_id) else None)

    def leases(self, spec: JobSpec) -> LeaseGate:
        return LeaseGate(RunBook(spec.state_path), wait_s=0, backend=self.backend)

    def cancel_behind_our_back(self, job_id: str) -> None:
        assert slurm("scancel", job_id).returncode == 0
        wait_gone(job_id)

    def wait_gone(self, job_id: str) -> None:
        wait_gone(job_id)

    def forget_containers(self, name: str) -> None:
        """The nodes lose pyxis' container ``name`` (as other nodes would not have it)."""
        assert self.cluster.containers is not None
        for d in self.cluster.containers.state_dir.glob(f"*/*/data/pyxis_{name}"):
            shutil.rmtree(d)

    def expiring_time_limit(self) -> str:
        return "00:30:00"

    def let_it_age(self) -> None:
        (job_id,) = self.our_jobs()  # shortened by hand: the spec refuses <= 5 minutes
        assert slurm("scontrol", "update", f"JobId={job_id}", "TimeLimit=00:04:00").returncode == 0
        left = slurm("squeue", "-j", job_id, "-h", "-o", "%L").stdout.strip()
        assert left.startswith(("3:", "4:")), left

    def leave_minutes(self, minutes: int) -> None:
        """At most ``minutes`` left (shortened by hand, as root may)."""
        (job_id,) = self.our_jobs()
        assert slurm("scontrol", "update", f"JobId={job_id}",
                     f"TimeLimit={minutes}").returncode == 0

    def image_in(self, job_id: str, name: str) -> list[str]:
        assert self.cluster.containers is not None
        label = {text: k for k, text in self.cluster.containers.image_ids.items()}
        result = slurm("srun", f"--jobid={job_id}", "-N", "2", "--ntasks-per-node=1",
                       f"--container-name={name}", "cat", "/etc/image-id")
        assert result.returncode == 0, result.stderr
        return [label[line] for line in result.stdout.splitlines()]


@attrs.frozen
class Outcome:
    path: tuple[str, ...]
    state: State
    state_file: bool
    first_job_running: bool  # the allocation of the first run, after the scenario
    same_job: bool | None  # the allocation at the end is the first one (None: none)
    live_jobs: int  # our jobs that hold the allocation at the end
    image: tuple[str, ...] = ()  # container scenarios: the image each node's container has
    errors: tuple[str, ...] = ()  # pyxis' lines of a failed import (tmp path as <root>)
    setup: str | None = None  # how the last run's step 0 came by its container (issue 42)


def _outcome(world: World, spec: JobSpec, first: str, m: AllocationMachine) -> Outcome:
    final = m.alloc.job_id if m.alloc is not None else None
    return Outcome(
        path=tuple(m.path),
        state=m.state,
        state_file=spec.state_path.exists(),
        first_job_running=world.running(first),
        same_job=None if final is None else final == first,
        live_jobs=len(world.our_jobs()),
    )


def _first(world: World, spec: JobSpec) -> str:
    m = world.machine(spec)
    assert m.prepare().state is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    return m.alloc.job_id


def first_run(world: World) -> Outcome:
    spec = world.spec()
    m = world.machine(spec)
    m.prepare()
    assert m.alloc is not None
    return _outcome(world, spec, m.alloc.job_id, m)


def reuse(world: World) -> Outcome:
    spec = world.spec()
    first = _first(world, spec)
    m = world.machine(spec)
    m.prepare()
    return _outcome(world, spec, first, m)


def incompatible(world: World) -> Outcome:
    first = _first(world, world.spec())
    spec = world.spec(slurm_params={"nodes": 2})
    m = world.machine(spec)
    m.prepare()
    return _outcome(world, spec, first, m)


def expiring(world: World) -> Outcome:
    spec = world.spec(alloc_time_limit=world.expiring_time_limit())
    first = _first(world, spec)
    world.let_it_age()
    m = world.machine(spec)
    m.prepare()
    assert any(w.startswith(f"Allocation expiring soon: {first}") for w in m.warnings)
    return _outcome(world, spec, first, m)


def too_short_for_the_job(world: World) -> Outcome:
    """Admission by time left: 20 minutes left, the job expects 20 (+ 5 of margin)."""
    spec = world.spec(alloc_time_limit="00:30:00", expected_duration_seconds=1200)
    first = _first(world, spec)
    world.leave_minutes(20)
    m = world.machine(spec)
    m.prepare()
    assert any(w.startswith(f"Allocation {first} has ") and "not started on it" in w
               for w in m.warnings), m.warnings
    return _outcome(world, spec, first, m)


def orphan(world: World) -> Outcome:
    spec = world.spec()
    first = _first(world, spec)
    spec.state_path.unlink()
    m = world.machine(spec)
    m.orphan_grace_s = 0.0  # an orphan at any age (a moment-old one is adopted: its tests)
    m.prepare()
    assert f"Released orphaned allocation {first} - state file was missing." in m.warnings
    return _outcome(world, spec, first, m)


def cancelled_behind_our_back(world: World) -> Outcome:
    spec = world.spec()
    first = _first(world, spec)
    world.cancel_behind_our_back(first)
    m = world.machine(spec)
    m.prepare()
    return _outcome(world, spec, first, m)


def release(world: World) -> Outcome:
    spec = world.spec()
    first = _first(world, spec)
    m = world.machine(world.spec(release_allocation=True))
    m.prepare()
    assert m.history[-1].reason == f"Allocation {first} released."
    return _outcome(world, spec, first, m)


def bad_partition(world: World) -> Outcome:
    spec = world.spec(slurm_params={"partition": "nope"})
    m = world.machine(spec)
    m.prepare()
    # caught before salloc, by the same check in both worlds, naming what there is
    assert m.failure is not None
    assert "no partition 'nope' on this cluster; it has: " in m.failure.message
    return Outcome(path=tuple(m.path), state=m.state, state_file=spec.state_path.exists(),
                   first_job_running=False, same_job=None, live_jobs=len(world.our_jobs()))


def _images(world: World) -> dict[str, str]:
    containers = pyxis_or_skip(world.cluster)  # type: ignore[attr-defined]
    return {k: str(p) for k, p in containers.images.items()}


def _container_spec(world: World, image: str, name: str, **over: Any) -> JobSpec:
    return world.spec(docker_image=image, container_name=name, skip_install=True,
                      slurm_params={"nodes": 2}, **over)


def container_first_run(world: World) -> Outcome:
    name = world.container_name()  # type: ignore[attr-defined]
    spec = _container_spec(world, _images(world)["busybox"], name)
    m = world.machine(spec)
    m.prepare()
    assert m.alloc is not None
    return attrs.evolve(_outcome(world, spec, m.alloc.job_id, m),
                        image=tuple(world.image_in(m.alloc.job_id, name)))


def container_image_change(world: World) -> Outcome:
    """A new image under the same name, an old container of that name on the nodes."""
    name = world.container_name()  # type: ignore[attr-defined]
    images = _images(world)
    first = _first(world, _container_spec(world, images["busybox"], name))
    spec = _container_spec(world, images["busybox2"], name)
    m = world.machine(spec)
    m.prepare()
    assert m.alloc is not None
    return attrs.evolve(_outcome(world, spec, first, m),
                        image=tuple(world.image_in(m.alloc.job_id, name)))


def container_switch(world: World) -> Outcome:
    """0F: another container name in the same allocation: only the new one is imported."""
    images = _images(world)
    old = world.container_name()  # type: ignore[attr-defined]
    first = _first(world, _container_spec(world, images["busybox2"], old))
    name = world.container_name()  # type: ignore[attr-defined]
    spec = _container_spec(world, images["busybox2"], name)
    m = world.machine(spec)
    m.prepare()
    assert m.alloc is not None
    return attrs.evolve(_outcome(world, spec, first, m),
                        image=tuple(world.image_in(m.alloc.job_id, name)))


def _installed_after_release(world: World, change: bool, forget: bool = False) -> Outcome:
    """Issue 42 item 1: a container set up (python image, installs) on every node, the
    allocation released; the next run's new allocation on the same nodes uses it, or
    (``change``: requirements-dev.txt changed) imports and installs it again."""
    name = world.container_name()  # type: ignore[attr-defined]
    repo = make_install_repo(world.root / "repo")  # type: ignore[attr-defined]
    spec = world.spec(docker_image=_images(world)["python"], container_name=name,
                      workflow_type="pytest", container_mounts=f"{repo}:{repo}",
                      slurm_params={"nodes": len(world.cluster.nodes)})  # type: ignore[attr-defined]
    first = _first(world, spec)
    released = world.machine(attrs.evolve(spec, release_allocation=True))
    assert released.prepare().state is State.Released, released.path
    world.wait_gone(first)
    if forget:  # the next allocation's nodes do not hold it (issue 42 item 2)
        world.forget_containers(name)
    if change:
        (repo / "requirements-dev.txt").write_text("./devtool\n# changed\n")
    m = world.machine(spec)
    m.prepare()
    return attrs.evolve(_outcome(world, spec, first, m), setup=m.container_setup)


def container_reused_after_release(world: World) -> Outcome:
    return _installed_after_release(world, change=False)


def container_input_changed_after_release(world: World) -> Outcome:
    return _installed_after_release(world, change=True)


def container_from_the_cache_on_other_nodes(world: World) -> Outcome:
    return _installed_after_release(world, change=False, forget=True)


def _container_error(world: World, **over: Any) -> Outcome:
    images = _images(world)
    over.setdefault("docker_image", images["busybox"])
    image = over.pop("docker_image")
    name = world.container_name()  # type: ignore[attr-defined]
    spec = _container_spec(world, image, name, **over)
    m = world.machine(spec)
    m.prepare()
    assert m.failure is not None and m.alloc is not None
    assert m.alloc.container_name is None  # the next run imports again
    root = str(world.root)  # type: ignore[attr-defined]
    assert isinstance(m.failure.error, SetupFailed)
    lines = [line.replace(root, "<root>") for line in setup_error_lines(m.failure.error.output)]
    return attrs.evolve(_outcome(world, spec, m.alloc.job_id, m), errors=tuple(lines))


def missing_image(world: World) -> Outcome:
    return _container_error(world, docker_image=str(world.root / "nope.sqsh"))  # type: ignore[attr-defined]


def registry_image(world: World) -> Outcome:
    return _container_error(world, docker_image="registry.invalid/it/nope:1")


def missing_mount_source(world: World) -> Outcome:
    return _container_error(world, container_mounts=f"{world.root}/no-such-dir:/x")  # type: ignore[attr-defined]


def _hold_name(world: World, name: str) -> str:
    """A RUNNING allocation of ``name`` that is not this checkout's (untagged): a
    singleton successor of that name pends (``Dependency``) until it ends. The queue
    wait of a hand-off, the same in both worlds."""
    tmp = world.root  # type: ignore[attr-defined]
    cluster = world.cluster  # type: ignore[attr-defined]
    job_id = world.backend.allocate(AllocationRequest(
        partition=cluster.partition, account=cluster.account, nodes=1,
        time_limit=Duration.parse("00:30:00"), job_name=name,
        log_path=tmp / "blocker.salloc.log"))
    world.wait_running(job_id)
    return job_id


def _hand_off(world: World, *, drain: bool) -> Outcome:
    """Warm successor (issue 27): 6 minutes left of the allocation (expiry emulated: the
    fake's clock, ``scontrol update TimeLimit`` on real), a run queues the successor,
    which pends (its singleton name is held); the job still fits and runs on the old
    one. Once it runs, the next run switches to it. ``drain``: another run's job is on
    the old one then (a live run record), so it drains; that run dies (kill -9) and the
    run after releases the old one. Paths of the runs, ``|`` between them."""
    # due: 360 s left <= 30 + the default lead time 600 + the margin 300; fits: Slurm
    # shows 5:59 left a moment later, >= 30 + 300
    spec = world.spec(alloc_time_limit="00:30:00", expected_duration_seconds=30,
                      warm_successor=True)
    twin = world.name + "-b"  # type: ignore[attr-defined]
    first = _first(world, spec)
    blocker = _hold_name(world, twin)
    world.leave_minutes(6)
    queue = world.machine(spec)
    assert queue.prepare().state is State.Ready, (queue.path, queue.failure)
    assert queue.alloc is not None and queue.alloc.job_id == first
    (succ,) = [j for j in world.live(twin) if j != blocker]
    world.cancel_behind_our_back(blocker)
    world.wait_running(succ)
    book = RunBook(spec.state_path)
    other = book.start(first, model="on-the-old-one") if drain else None
    switch = world.machine(spec)
    switch.leases = world.leases(spec)
    switch.prepare()
    paths = [*queue.path, "|", *switch.path]
    last = switch
    if other is not None:
        assert world.running(first)  # never cut under the other run's job
        assert StatePaths.for_state_file(spec.state_path).drained_state.exists()
        book.save(attrs.evolve(other, pid=_dead_pid()))  # kill -9: no finish
        last = world.machine(spec)
        last.leases = world.leases(spec)
        last.prepare()
        paths += ["|", *last.path]
    assert last.alloc is not None and last.alloc.job_id == succ
    return Outcome(path=tuple(paths), state=last.state, state_file=spec.state_path.exists(),
                   first_job_running=world.running(first), same_job=False,
                   live_jobs=len(world.our_jobs()) + len(world.live(twin)))


def _dead_pid() -> int:
    pid = 2**22 - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        pid -= 1


def hand_off(world: World) -> Outcome:
    return _hand_off(world, drain=False)


def hand_off_drain_after_kill_9(world: World) -> Outcome:
    return _hand_off(world, drain=True)


NEW = ("NoState", "Allocating", "Ready")
QUEUE = ("NoState", "Validating", "QueueingSuccessor", "Validating", "Ready")
SWITCH = ("NoState", "Validating", "Switching", "Validating", "Ready")
IMPORTED = ("NoState", "Allocating", "Importing", "Ready")
IMPORT_FAILED = ("NoState", "Allocating", "Importing", "Failed")
SCENARIOS: dict[str, tuple[Callable[[World], Outcome], Outcome]] = {
    "first run": (first_run, Outcome(NEW, State.Ready, True, True, True, 1)),
    "reuse": (reuse, Outcome(("NoState", "Validating", "Ready"), State.Ready, True, True,
                             True, 1)),
    "incompatible": (incompatible, Outcome(
        ("NoState", "Validating", "Incompatible", "Allocating", "Ready"), State.Ready, True,
        False, False, 1)),
    "expiring": (expiring, Outcome(
        ("NoState", "Validating", "Expiring", "Allocating", "Ready"), State.Ready, True,
        False, False, 1)),
    "too short for the job": (too_short_for_the_job, Outcome(
        ("NoState", "Validating", "TooShort", "Allocating", "Ready"), State.Ready, True,
        False, False, 1)),
    "orphan": (orphan, Outcome(NEW, State.Ready, True, False, False, 1)),
    "cancelled behind our back": (cancelled_behind_our_back, Outcome(
        ("NoState", "Validating", "NoState", "Allocating", "Ready"), State.Ready, True,
        False, False, 1)),
    "release": (release, Outcome(("NoState", "Released"), State.Released, False, False,
                                 None, 0)),
    "hand-off": (hand_off, Outcome((*QUEUE, "|", *SWITCH), State.Ready, True, False,
                                   False, 1)),
    "hand-off, drain, kill -9": (hand_off_drain_after_kill_9, Outcome(
        (*QUEUE, "|", *SWITCH, "|", "NoState", "Validating", "Ready"), State.Ready, True,
        False, False, 1)),
    "bad partition": (bad_partition, Outcome(("NoState", "Allocating", "Failed"),
                                             State.Failed, False, False, None, 0)),
    "container first run": (container_first_run, Outcome(
        IMPORTED, State.Ready, True, True, True, 1, ("busybox", "busybox"))),
    "container image change": (container_image_change, Outcome(
        ("NoState", "Validating", "Incompatible", "Allocating", "Importing", "Ready"),
        State.Ready, True, False, False, 1, ("busybox2", "busybox2"))),
    "container switch": (container_switch, Outcome(
        ("NoState", "Validating", "Importing", "Ready"), State.Ready, True, True, True, 1,
        ("busybox2", "busybox2"))),
    "container reused after release": (container_reused_after_release, Outcome(
        IMPORTED, State.Ready, True, False, False, 1, setup="reused on node")),
    "container input changed after release": (container_input_changed_after_release, Outcome(
        ("NoState", "Allocating", "Importing", "Installing", "Ready"), State.Ready, True,
        False, False, 1, setup="cold")),
    "container from the cache on other nodes": (
        container_from_the_cache_on_other_nodes, Outcome(
            IMPORTED, State.Ready, True, False, False, 1, setup="from the cache")),
    "missing image": (missing_image, Outcome(
        IMPORT_FAILED, State.Failed, True, True, True, 1, errors=(
            "pyxis: failed to create container filesystem for image: <root>/nope.sqsh",
            "pyxis:     [ERROR] No such file or directory: <root>/nope.sqsh"))),
    "registry image": (registry_image, Outcome(
        IMPORT_FAILED, State.Failed, True, True, True, 1, errors=(
            "pyxis: failed to import docker image: registry.invalid#it/nope:1",
            "pyxis:     curl: (6) Could not resolve host: registry.invalid"))),
    "missing mount source": (missing_mount_source, Outcome(
        IMPORT_FAILED, State.Failed, True, True, True, 1, errors=(
            "pyxis: --container-mounts: source path does not exist: <root>/no-such-dir",
            "pyxis: couldn't create enroot start configuration script"))),
}


#: the scenarios that need the cluster's real pyxis + enroot (:func:`_images`), on
#: both backends: marked ``containers``, deselected (one line) on a machine without them
NEEDS_PYXIS = frozenset(name for name, (run, _) in SCENARIOS.items()
                        if run in (container_first_run, container_image_change,
                                   container_switch, container_reused_after_release,
                                   container_input_changed_after_release, missing_image,
                                   registry_image, missing_mount_source))


@pytest.mark.parametrize("scenario", [
    pytest.param(s, marks=pytest.mark.containers) if s in NEEDS_PYXIS else s
    for s in SCENARIOS])
@pytest.mark.parametrize("backend", ["fake", "real"])
def test_fake_and_real_slurm_take_the_same_path(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        backend: str, scenario: str) -> None:
    world: World = (FakeWorld(local_cluster, tmp_path, names.new("parity-fake"))
                    if backend == "fake" else RealWorld(local_cluster, tmp_path, names))
    containers = ContainerNames(local_cluster.containers) if local_cluster.containers else None
    world.container_name = lambda: containers.new("parity") if containers else "c"  # type: ignore[attr-defined]
    run, expected = SCENARIOS[scenario]
    try:
        outcome = run(world)
    finally:
        names.cleanup()
        if containers is not None:
            containers.cleanup()
    assert outcome == expected


@pytest.mark.config()
@pytest.mark.parametrize("backend", ["fake", "real"])
def test_fake_and_real_slurm_size_the_allocation_s_cpus_alike(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, backend: str) -> None:
    """Issue 44.4: a 4-GPU allocation made by a 1-GPU spec holds the cluster's CPUs per
    GPU for each GPU (the nodes' CPUs in proportion, or DefCpuPerGPU); one without GPUs
    its tasks' CPUs. The state file says what was granted."""
    world: World = (FakeWorld(local_cluster, tmp_path, names.new("parity-fake"))
                    if backend == "fake" else RealWorld(local_cluster, tmp_path, names))
    try:
        got = []
        for over in ({"slurm_params": {"gpus_per_node": 1}, "alloc_gpus_per_node": 4},
                     {"slurm_params": {"ntasks_per_node": 2}}):
            spec = world.spec(**over)
            m = world.machine(spec)
            assert m.prepare().state is State.Ready, m.path
            assert m.alloc is not None
            got.append(m.alloc.cpus_per_node)
            m.release()
    finally:
        names.cleanup()
    assert got == [local_cluster.cpus_per_gpu * GPUS_PER_NODE, 2]
