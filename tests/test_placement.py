"""slurm_fsm.placement: the environment that confines a persistent job's own srun."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.backend import JobInfo
from slurm_fsm.placement import (
    Placement,
    QueueWatch,
    script_env,
    script_memory,
    waiting_advice,
)
from slurm_fsm.spec import SlurmParams

INFO = JobInfo(job_id="42", state="RUNNING", nodelist="n[1-2]")


def params(**kw: object) -> SlurmParams:
    return SlurmParams(partition="p", account="a", **kw)  # type: ignore[arg-type]


def test_ntasks_given_wins_over_nodes_times_tasks_per_node() -> None:
    """#17.5: ntasks: 2 (no ntasks_per_node) runs 2 ranks, as one-shot does."""
    env = Placement.of(params(ntasks=2)).env()
    assert env["SLURM_NTASKS"] == "2"
    assert env["SLURM_NTASKS_PER_NODE"] == "2"
    assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "1"


def test_ntasks_per_node_alone_multiplies_by_nodes() -> None:
    env = Placement.of(params(nodes=2, ntasks_per_node=4)).env()
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"]) == ("8", "4")


def test_uneven_ntasks_exports_no_contradicting_tasks_per_node() -> None:
    env = Placement.of(params(nodes=2, ntasks=3)).env()
    assert env["SLURM_NTASKS"] == "3"
    assert "SLURM_NTASKS_PER_NODE" not in env


def test_defaults_one_task_per_node() -> None:
    env = Placement.of(params(nodes=2)).env()
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"]) == ("2", "1")


@pytest.mark.parametrize("gpus", [None, 0])
def test_no_gpus_asked_takes_none_but_stays_exact(gpus: int | None) -> None:
    env = Placement.of(params(gpus_per_node=gpus)).env()
    assert "SLURM_GPUS_PER_NODE" not in env
    assert env["SLURM_EXACT"] == "1"


def test_gpus_per_node_and_exact() -> None:
    env = Placement.of(params(gpus_per_node=2)).env()
    assert (env["SLURM_GPUS_PER_NODE"], env["SLURM_EXACT"]) == ("2", "1")


def test_script_env_has_the_allocation_and_the_share(tmp_path: Path) -> None:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --mem=4G\n#SBATCH --mem-per-gpu=10G\nsrun true\n"
                      "#SBATCH --mem-per-cpu=1G\n")
    env = script_env(INFO, params(nodes=2, gpus_per_node=1), script)
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "42"
    assert env["SLURM_NODELIST"] == env["SLURM_JOB_NODELIST"] == "n[1-2]"
    assert env["SLURM_MEM_PER_NODE"] == "4G"
    assert env["SLURM_MEM_PER_GPU"] == "10G"
    assert "SLURM_MEM_PER_CPU" not in env  # after the first command: not a directive


def test_unreadable_script_asks_no_memory(tmp_path: Path) -> None:
    assert script_memory(tmp_path / "missing.slurm") == {}


def test_queue_watch_says_waiting_once_and_started() -> None:
    out: list[str] = []
    msgs: list[str] = []
    w = QueueWatch(out.append, msgs.append, gpus_per_node=1)
    w("hello\nsrun: Job 7 step creation tempor")
    w("arily disabled, retrying (Requested nodes are busy)\n")
    w("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert len(msgs) == 1 and msgs[0].startswith("waiting for GPUs (this job asks 1 per node)")
    assert "alloc_gpus_per_node" in msgs[0]  # how to make the allocation bigger
    w("srun: Step created for job 7\nresult\n")
    assert msgs[1].startswith("step started after waiting")
    assert "".join(out).endswith("result\n")
    assert w.queued == 1 and not w.waiting


def test_the_waiting_message_says_the_allocations_size_and_how_to_grow_it() -> None:
    msgs: list[str] = []
    w = QueueWatch(lambda _t: None, msgs.append, gpus_per_node=1,
                   allocation_gpus_per_node=2, allocation_id="7")
    w("srun: Job 7 step creation temporarily disabled, retrying (Requested nodes are busy)\n")
    assert "allocation 7 has 2 GPU(s) per node" in msgs[0]
    assert "alloc_gpus_per_node" in msgs[0] and "release" in msgs[0]
    unknown = waiting_advice(1)
    assert "slurm-fsm status" in unknown and "alloc_gpus_per_node" in unknown
    assert "CPUs" in waiting_advice(0)
