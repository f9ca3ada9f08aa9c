"""Issue 44 items 4 and 5 on the real local cluster: the CPUs of the persistent
allocation, and jobs a persistent script submits itself.

- item 4: ``salloc`` asked one CPU per task, so a 4-GPU allocation held 4 CPUs and a
  lone 1-GPU job in it one (``SLURM_CPUS_ON_NODE=1``; ``nproc`` 1 under
  ``ConstrainCores``). The allocation now asks the cluster's ``DefCpuPerGPU`` per GPU
  when set, else the node's CPUs in proportion to its GPUs (``alloc_cpus_per_node``
  when the spec gives it); the figures here follow the cluster's configuration
  (``wide``: 12-CPU nodes; ``defcpu``: ``DefCpuPerGPU=2``).
- item 5: what the persistent path exports for the run's own steps
  (``SRUN_CPUS_PER_TASK``, ``SLURM_GPUS_PER_NODE``...) reached the jobs the script
  submitted itself: ``salloc ... srun`` and ``sbatch --wait`` of a script with ``srun``
  failed with "More processors requested than permitted".
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.executor import Executor
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

from .helpers import JobNames, slurm, spec_dict

pytestmark = pytest.mark.slurm

#: what a step prints: the CPUs Slurm gave it on its node and those it may run on
PROBE = 'srun bash -c \'echo "probe cpus=$SLURM_CPUS_ON_NODE nproc=$(nproc)"\'\n'


def spec(cluster: ClusterInfo, root: Path, name: str, body: str, **over: Any) -> JobSpec:
    root.mkdir(parents=True, exist_ok=True)
    script = root / f"job-{len(list(root.glob('job-*.slurm')))}.slurm"
    script.write_text("#!/bin/bash\nset -e\n" + textwrap.dedent(body).lstrip("\n"))
    return JobSpec.from_dict(spec_dict(cluster, root, name, script_path=str(script), **over))


def run(s: JobSpec) -> Report:
    return Executor(s, SubprocessBackend()).run()


def probe(r: Report) -> dict[str, int]:
    (line,) = [line for line in r.log_tail if line.startswith("probe ")]
    return {k: int(v) for k, v in (w.split("=", 1) for w in line.split()[1:])}


def num_cpus(job_id: str) -> int:
    shown = slurm("scontrol", "show", "job", job_id).stdout
    (word,) = [w for w in shown.split() if w.startswith("NumCPUs=")]
    return int(word.split("=", 1)[1])


def host_cpus() -> int:
    return len(os.sched_getaffinity(0))


# ------------------------------------------------------------------ item 4: CPUs


@pytest.mark.config()
def test_a_lone_one_gpu_job_gets_its_share_of_an_allocation_sized_for_its_gpus(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """A 4-GPU allocation made by a 1-GPU spec holds the node's CPUs for 4 GPUs (or
    ``DefCpuPerGPU`` x 4), the lone 1-GPU job a quarter of them, and a job that asks
    all 4 GPUs all of them."""
    name = names.new("share")
    per_gpu = local_cluster.cpus_per_gpu
    one = spec(local_cluster, tmp_path, name, PROBE, slurm_params={"gpus_per_node": 1},
               alloc_gpus_per_node=GPUS_PER_NODE)
    r = run(one)
    assert r.status is Status.PASSED, r.render_text()
    assert r.allocation_id is not None
    assert num_cpus(r.allocation_id) == per_gpu * GPUS_PER_NODE
    seen = probe(r)
    assert seen["cpus"] == per_gpu, seen
    if local_cluster.has("cgroup"):  # ConstrainCores: the step runs on its CPUs only
        assert seen["nproc"] == min(per_gpu, host_cpus()), seen
    whole = spec(local_cluster, tmp_path, name, PROBE,
                 slurm_params={"gpus_per_node": GPUS_PER_NODE})
    r = run(whole)
    assert r.status is Status.PASSED, r.render_text()
    seen = probe(r)
    assert seen["cpus"] == per_gpu * GPUS_PER_NODE, seen
    if local_cluster.has("cgroup"):
        assert seen["nproc"] == min(per_gpu * GPUS_PER_NODE, host_cpus()), seen


@pytest.mark.config()
def test_alloc_cpus_per_node_is_what_the_allocation_asks(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("spec")
    one = spec(local_cluster, tmp_path, name, PROBE, slurm_params={"gpus_per_node": 1},
               alloc_gpus_per_node=2, alloc_cpus_per_node=6)
    r = run(one)
    assert r.status is Status.PASSED, r.render_text()
    assert r.allocation_id is not None
    # DefCpuPerGPU is Slurm's floor: 2 GPUs x 2 is below 6, so 6 either way
    assert num_cpus(r.allocation_id) == 6
    assert probe(r)["cpus"] == 3  # 1 GPU of 2


def test_an_allocation_without_gpus_still_asks_its_tasks_cpus(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """No GPU asked: one CPU per task as before (the node is not taken whole)."""
    r = run(spec(local_cluster, tmp_path, names.new("nogpu"), PROBE,
                 slurm_params={"ntasks_per_node": 2}))
    assert r.status is Status.PASSED, r.render_text()
    assert r.allocation_id is not None
    assert num_cpus(r.allocation_id) == 2


# ------------------------------------------------------------------ item 5: submissions


def test_jobs_the_script_submits_itself_get_none_of_the_runs_placement(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The run's own srun has its share (2 CPUs, 1 GPU); a ``salloc ... srun`` and an
    ``sbatch --wait`` of a script with ``srun`` are jobs of their own, asked as in
    one-shot mode."""
    name = names.new("nested")
    c = local_cluster
    inner = tmp_path / "inner.sh"
    inner.write_text("#!/bin/bash\n"
                     "srun bash -c 'echo \"inner cpt=${SRUN_CPUS_PER_TASK-unset} "
                     "gpus=${SLURM_GPUS_PER_NODE-unset}\"'\n")
    nested = tmp_path / "nested.sh"
    nested.write_text("#!/bin/bash\necho \"nested cpt=${SRUN_CPUS_PER_TASK-unset} "
                      "exact=${SLURM_EXACT-unset} gres=${SLURM_GRES-unset}\"\n")
    nested.chmod(0o755)
    submit = f"-A {c.account} -p {c.partition} -N1 -t 2 -J {name}"
    body = f"""\
        srun bash -c 'echo "own cpt=$SRUN_CPUS_PER_TASK cpus=$SLURM_CPUS_ON_NODE"'
        salloc {submit} srun {nested}
        sbatch --wait {submit} -o {tmp_path}/inner.out {inner}
        cat {tmp_path}/inner.out
        srun bash -c 'echo "after cpt=$SRUN_CPUS_PER_TASK"'
        """
    s = spec(c, tmp_path, name, body, slurm_params={"gpus_per_node": 1, "cpus_per_task": 2})
    r = run(s)
    assert r.status is Status.PASSED, r.render_text()
    tail = r.log_tail
    assert "own cpt=2 cpus=2" in tail, tail
    assert "nested cpt=unset exact=unset gres=unset" in tail, tail
    assert "inner cpt=unset gpus=unset" in tail, tail
    assert "after cpt=2" in tail, tail


def test_a_submitted_job_that_bypasses_the_shims_is_diagnosed_as_that_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """``salloc`` by absolute path gets the run's placement (``SRUN_CPUS_PER_TASK=2``):
    its srun fails, and the diagnosis names that job, not the persistent allocation."""
    name = names.new("bypass")
    c = local_cluster
    real = shutil.which("salloc")
    assert real is not None
    body = f"{real} -A {c.account} -p {c.partition} -N1 -t 2 -J {name} srun true\n"
    r = run(spec(c, tmp_path, name, body, slurm_params={"cpus_per_task": 2}))
    assert r.status is Status.FAILED, r.render_text()
    (row,) = [d for d in r.diagnosis if "More processors" in d["symptom"]]
    assert f"(not the allocation {r.allocation_id})" in row["symptom"], row
    assert row["cause"].startswith("a job the script submitted itself"), row
