"""Packing parity: several jobs in one allocation, each on its own GPUs, the same on the
fake cluster (its GPU ledger) and on real Slurm (the local cluster's emulated GPUs).

Each scenario runs over ``backend in ["fake", "real"]``: 1-GPU steps get distinct
``CUDA_VISIBLE_DEVICES`` and a fifth waits; a job started beside siblings gets the free
GPU and its pre-flight names only the foreign process; a job queued behind siblings
says "waiting for GPUs" and passes.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.placement import STARTED_MARKER, WAITING_MARKER
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm.testing import FakeCluster
from slurm_fsm_dev import localgpu
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

from .helpers import SRUN_SAYS_WAITING, JobNames, make_spec, slurm_version, until

pytestmark = pytest.mark.slurm


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


class World:
    def __init__(self, kind: str, cluster: ClusterInfo, root: Path, name: str) -> None:
        self.kind, self.cluster, self.root, self.name = kind, cluster, root, name
        self.fake = FakeCluster(partitions={cluster.partition: cluster.nodes},
                                accounts=[cluster.account, cluster.other_account],
                                user=cluster.user, run_scripts=True,
                                gpus_per_node=GPUS_PER_NODE) if kind == "fake" else None
        self.backend: SlurmBackend = self.fake or SubprocessBackend()

    def spec(self, body: str, file: str, **over: Any) -> JobSpec:
        script = self.root / file
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("#!/bin/bash\n" + body)
        return make_spec(self.cluster, self.root, self.name, script_path=str(script),
                         workflow_type="custom", **over)

    def run(self, spec: JobSpec, events: Events | None = None) -> Report:
        return Executor(spec, self.backend, events=events).run()

    def allocation(self) -> tuple[str, str]:
        """A 4-GPU allocation (made by a job that asks them all): its id and node."""
        big = self.spec("srun true\n", "big.slurm",
                        slurm_params={"gpus_per_node": GPUS_PER_NODE,
                                      "ntasks_per_node": GPUS_PER_NODE})
        r = self.run(big)
        assert r.status is Status.PASSED, r.render_text()
        assert r.allocation_id is not None
        node = (self.backend.query_job(r.allocation_id).nodelist)
        return r.allocation_id, node

    def steps(self, job_id: str, n: int, body: str) -> list[subprocess.Popen[str]]:
        """``n`` 1-GPU steps of another job of the allocation, started here."""
        if self.fake is not None:
            env = self.fake.srun_env(job_id)
            argv = ["srun", "-N", "1", "-n", "1"]
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
            env.update(self.cluster.env)
            argv = ["srun", f"--jobid={job_id}", "-N", "1", "-n", "1"]
        env.update(SLURM_EXACT="1", SLURM_GPUS_PER_NODE="1")
        return [subprocess.Popen([*argv, "bash", "-c", body], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(n)]

    def put_process(self, node: str, gpu: int, pid: int, name: str, memory: str) -> None:
        if self.fake is not None:
            self.fake.add_gpu_process(node, pid, name, memory)
        else:
            localgpu.put_process(self.cluster.base_dir, node, gpu, pid, name, memory)


@pytest.fixture(params=["fake", "real"])
def world(request: pytest.FixtureRequest, local_cluster: ClusterInfo, names: JobNames,
          tmp_path: Path) -> Iterator[World]:
    yield World(request.param, local_cluster, tmp_path, names.new(f"pack-{request.param}"))
    localgpu.reset(local_cluster.base_dir)


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_five_one_gpu_steps_on_four_gpus_one_waits(world: World) -> None:
    job, _ = world.allocation()
    procs = world.steps(job, 5, 'echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 2')
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 5, outs
    assert {o.strip() for o, _ in outs} == {f"cvd={i}" for i in range(GPUS_PER_NODE)}
    # srun prints "Step created for" only after a wait, on the fake, 22.05 and 24.11;
    # only the fake and 22.05 say "temporarily disabled" while it waits (issue 23, K1)
    assert sum(STARTED_MARKER in e for _, e in outs) == 1
    says = True if world.fake is not None else SRUN_SAYS_WAITING[slurm_version()]
    assert sum(WAITING_MARKER in e for _, e in outs) == int(says)


def _whole(folder: Path) -> list[Path]:
    """The files renamed into place (not the ``.N`` ones still being written)."""
    return [f for f in folder.iterdir() if not f.name.startswith(".")]


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_a_job_beside_siblings_gets_the_free_gpu_and_warns_only_of_strangers(
        world: World, tmp_path: Path) -> None:
    job, node = world.allocation()
    pids = tmp_path / "pids"
    pids.mkdir()
    siblings = world.steps(job, GPUS_PER_NODE - 1,
                           f'echo "$$" > {pids}/.$CUDA_VISIBLE_DEVICES && '
                           f'mv {pids}/.$CUDA_VISIBLE_DEVICES {pids}/$CUDA_VISIBLE_DEVICES; '
                           'sleep 8')  # a file appears whole: never read empty
    try:
        until("siblings running",
              lambda: True if len(_whole(pids)) == GPUS_PER_NODE - 1 else None, 30)
        held = {int(f.name): int(f.read_text()) for f in _whole(pids)}
        free = (set(range(GPUS_PER_NODE)) - set(held)).pop()
        for gpu, pid in held.items():
            world.put_process(node, gpu, pid, "python3", "20000 MiB")
        world.put_process(node, free, 4242, "/usr/bin/ollama", "5012 MiB")
        one = world.spec("srun bash -c 'echo \"cvd=$CUDA_VISIBLE_DEVICES\"'\n", "one.slurm",
                         slurm_params={"gpus_per_node": 1})
        r = world.run(one)
        assert r.status is Status.PASSED, r.render_text()
        assert f"cvd={free}" in r.log_tail
        gpu = [w for w in r.warnings if "GPU processes" in w]
        assert len(gpu) == 1 and "4242 /usr/bin/ollama" in gpu[0], r.warnings
        assert all(str(p) not in gpu[0] for p in held.values())
    finally:
        for p in siblings:
            p.communicate(timeout=60)


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_a_job_behind_siblings_waits_for_gpus_then_passes(world: World,
                                                          tmp_path: Path) -> None:
    job, _ = world.allocation()
    t0 = time.monotonic()
    started = tmp_path / "started"
    started.mkdir()
    siblings = world.steps(job, GPUS_PER_NODE,
                           f'touch {started}/$CUDA_VISIBLE_DEVICES; sleep 3')
    try:
        until("siblings running",
              lambda: True if len(list(started.iterdir())) == GPUS_PER_NODE else None, 30)
        one = world.spec("srun bash -c 'echo \"cvd=$CUDA_VISIBLE_DEVICES\"'\n", "one.slurm",
                         slurm_params={"gpus_per_node": 1})
        events = Recorder()
        r = world.run(one, events)
        assert r.status is Status.PASSED, r.render_text()
        assert any(m.startswith("waiting for GPUs") for m in events.messages), events.messages
        assert any(m.startswith("step started after waiting") for m in events.messages)
        assert time.monotonic() - t0 >= 2.5
    finally:
        for p in siblings:
            p.communicate(timeout=60)
