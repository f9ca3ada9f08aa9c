"""A persistent job's share of the allocation, on the real local cluster with its
emulated GPUs: the script's own srun is confined to the job's slurm_params, Slurm
places it beside the allocation's other jobs, and queues it when they hold the GPUs."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.executor import Events, Executor
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev import localgpu
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

from .helpers import SRUN_SAYS_WAITING, JobNames, slurm, slurm_version, spec_dict, until

pytestmark = pytest.mark.slurm


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def spec(cluster: ClusterInfo, root: Path, name: str, body: str, **over: Any) -> JobSpec:
    root.mkdir(parents=True, exist_ok=True)
    script = root / "job.slurm"
    script.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip("\n"))
    return JobSpec.from_dict(spec_dict(cluster, root, name, script_path=str(script), **over))


def run(s: JobSpec, events: Events | None = None) -> Report:
    return Executor(s, SubprocessBackend(), events=events).run()


@pytest.fixture
def gpus(local_cluster: ClusterInfo) -> Iterator[Path]:
    yield local_cluster.base_dir
    localgpu.reset(local_cluster.base_dir)


def test_ntasks_runs_that_many_ranks_in_persistent_mode(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """#17.5: ``ntasks: 2`` without ``ntasks_per_node`` runs 2 ranks, as one-shot does."""
    s = spec(local_cluster, tmp_path, names.new("ntasks"),
             'srun bash -c \'echo "rank=$SLURM_PROCID of $SLURM_NTASKS"\'\n',
             slurm_params={"ntasks": 2})
    r = run(s)
    assert r.status is Status.PASSED, r.render_text()
    ranks = sorted(line for line in r.log_tail if line.startswith("rank="))
    assert ranks == ["rank=0 of 2", "rank=1 of 2"]


def _sibling_steps(cluster: ClusterInfo, job_id: str, n: int, seconds: float,
                   pid_dir: Path) -> list[subprocess.Popen[str]]:
    """``n`` 1-GPU steps of another job of the allocation, each writing its pid and GPU."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(cluster.env, SLURM_EXACT="1", SLURM_GPUS_PER_NODE="1")
    pid_dir.mkdir(parents=True, exist_ok=True)
    body = (f'echo "$$ $CUDA_VISIBLE_DEVICES" > {pid_dir}/$SLURM_STEP_ID; '
            f"sleep {seconds}")
    procs = [subprocess.Popen(["srun", f"--jobid={job_id}", "-N", "1", "-n", "1",
                               "bash", "-c", body], env=env, text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(n)]
    until(f"{n} sibling steps running",
          lambda: True if len(list(pid_dir.iterdir())) == n else None, 30.0)
    return procs


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_a_one_gpu_job_gets_a_free_gpu_beside_siblings_and_ignores_their_processes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("share")
    big = spec(local_cluster, tmp_path / "big", name, "srun true\n",
               slurm_params={"gpus_per_node": GPUS_PER_NODE,
                             "ntasks_per_node": GPUS_PER_NODE})
    first = run(big)
    assert first.status is Status.PASSED, first.render_text()
    job_id = first.allocation_id
    assert job_id is not None
    node = slurm("squeue", "-j", job_id, "-h", "-o", "%N").stdout.strip()
    siblings = _sibling_steps(local_cluster, job_id, GPUS_PER_NODE - 1, 30, tmp_path / "pids")
    try:
        held = {}
        for f in (tmp_path / "pids").iterdir():
            pid, cvd = f.read_text().split()
            held[int(cvd)] = int(pid)
            localgpu.put_process(gpus, node, int(cvd), int(pid), "python3", "20000 MiB")
        free = (set(range(GPUS_PER_NODE)) - set(held)).pop()
        localgpu.put_process(gpus, node, free, 4242, "/usr/bin/ollama", "5012 MiB")
        one = spec(local_cluster, tmp_path / "big", name,
                   'srun bash -c \'echo "cvd=$CUDA_VISIBLE_DEVICES"\'\n',
                   slurm_params={"gpus_per_node": 1})
        r = run(one)
        assert r.status is Status.PASSED, r.render_text()
        assert r.allocation_id == job_id
        assert f"cvd={free}" in r.log_tail  # the free GPU, while the siblings hold theirs
        gpu_warnings = [w for w in r.warnings if "GPU processes" in w]
        assert len(gpu_warnings) == 1, r.warnings
        assert "4242 /usr/bin/ollama" in gpu_warnings[0]
        assert all(str(pid) not in gpu_warnings[0] for pid in held.values())
    finally:
        for p in siblings:
            p.terminate()
        for p in siblings:
            p.wait(timeout=30)


def test_a_job_waits_for_gpus_while_siblings_hold_them_then_passes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("wait")
    big = spec(local_cluster, tmp_path / "big", name, "srun true\n",
               slurm_params={"gpus_per_node": GPUS_PER_NODE,
                             "ntasks_per_node": GPUS_PER_NODE})
    first = run(big)
    assert first.status is Status.PASSED, first.render_text()
    assert first.allocation_id is not None
    t0 = time.monotonic()
    siblings = _sibling_steps(local_cluster, first.allocation_id, GPUS_PER_NODE, 4,
                              tmp_path / "pids")
    try:
        one = spec(local_cluster, tmp_path / "big", name,
                   'srun bash -c \'echo "cvd=$CUDA_VISIBLE_DEVICES"\'\n',
                   slurm_params={"gpus_per_node": 1})
        events = Recorder()
        r = run(one, events)
        assert r.status is Status.PASSED, r.render_text()
        waiting = [m for m in events.messages if m.startswith("waiting for GPUs")]
        assert waiting, events.messages
        # how it knew, whichever came first: the pending step Slurm lists for this run's
        # srun (22.05 and 24.11), srun's own line (22.05 only: 24.11 waits silently)
        signs = ["of this run is PENDING", "srun waited"]
        if SRUN_SAYS_WAITING[slurm_version()]:
            signs.append("step creation temporarily disabled")
        assert any(sign in waiting[0] for sign in signs), (signs, waiting[0])
        assert any(m.startswith("step started after waiting") for m in events.messages)
        assert time.monotonic() - t0 >= 3  # it really waited for a sibling to end
    finally:
        for p in siblings:
            p.wait(timeout=60)
