"""The size of the persistent allocation on the real local Slurm cluster (issue 17
items 6 and 7, issue 18's allocation size): the state file holds what Slurm GRANTED,
and reuse is judged on what the allocation can hold (nodes, CPUs per node)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.allocation import Allocation
from slurm_fsm.executor import Executor
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, RecordingBackend, job_state, slurm, spec_dict

pytestmark = pytest.mark.slurm


def spec_with(cluster: ClusterInfo, root: Path, name: str, body: str, file: str,
              **over: Any) -> JobSpec:
    path = root / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\nset -e\n" + textwrap.dedent(body).lstrip("\n"))
    return JobSpec.from_dict(spec_dict(cluster, root, name, script_path=str(path), **over))


def granted(job_id: str) -> tuple[int, int]:
    """Nodes and CPUs Slurm granted the job (squeue %D %C)."""
    nodes, cpus = slurm("squeue", "-j", job_id, "-h", "-o", "%D %C").stdout.split()
    return int(nodes), int(cpus)


def state_of(spec: JobSpec) -> dict[str, Any]:
    data = json.loads(spec.state_path.read_text())
    assert isinstance(data, dict)
    return data


def test_more_nodes_than_tasks_gets_the_nodes_and_every_run_reuses_them(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """17.6: ``nodes: 2, ntasks: 1``: salloc ``--nodes=2 --ntasks=1`` was shrunk to one
    node while the state file said 2, and every later run ended ERROR."""
    spec = spec_with(local_cluster, tmp_path, names.new("n2t1"), "srun hostname\n",
                     "job.slurm", slurm_params={"nodes": 2, "ntasks": 1})
    first = Executor(spec, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    job_id = first.allocation_id
    assert job_id is not None
    state = state_of(spec)
    assert (state["nodes"], state["cpus_per_node"] * state["nodes"]) == granted(job_id)
    assert state["nodes"] == 2
    for _ in range(2):
        backend = RecordingBackend()
        again = Executor(spec, backend).run()
        assert again.status is Status.PASSED, again.render_text()
        assert again.allocation_id == job_id
        assert again.path == ["NoState", "Validating", "Ready", "Running", "Ready"]
        assert "scontrol" not in backend.tools()  # the grant is in the state file


def test_a_state_file_that_records_the_request_is_judged_on_the_grant(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """17.6 as left by earlier versions: the state file says 2 nodes (the request) of an
    allocation Slurm shrank to 1. The next run reads the grant, sees the allocation
    cannot hold the job and replaces it, instead of ending ERROR."""
    name = names.new("shrunk")
    spec = spec_with(local_cluster, tmp_path, name, "srun -N 2 hostname\n", "job.slurm",
                     slurm_params={"nodes": 2})
    out = slurm("salloc", "--no-shell", f"--partition={local_cluster.partition}",
                f"--account={local_cluster.account}", "--nodes=2", "--ntasks=1",
                "--time=30", f"--job-name={name}")
    assert "setting nnodes to 1" in out.stderr
    shrunk = next(w.split()[-1] for w in out.stderr.splitlines() if "Granted" in w)
    assert granted(shrunk)[0] == 1
    spec.state_path.parent.mkdir(parents=True)
    nodelist = slurm("squeue", "-j", shrunk, "-h", "-o", "%N").stdout.strip()
    spec.state_path.write_text(json.dumps({  # the keys of procedure.md, as asked
        "job_id": shrunk, "container_name": None, "nodelist": nodelist,
        "partition": local_cluster.partition, "account": local_cluster.account,
        "nodes": 2, "gpus_per_node": None, "docker_image": None, "container_mounts": "",
        "allocated_at": "2026-12-03T13:00:00+00:00", "time_limit": "00:30:00",
        "installed": True}))
    report = Executor(spec, SubprocessBackend()).run()
    assert report.status is Status.PASSED, report.render_text()
    assert report.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert report.allocation_id != shrunk
    assert len({line for line in report.log_tail if line.startswith("n")}) == 2
    assert state_of(spec)["nodes"] == 2 == granted(report.allocation_id or "")[0]


def test_an_allocation_for_one_task_is_not_reused_for_two_tasks_per_node(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """17.7: an allocation made for a 1-task (pytest) spec was reused for a spec with
    more tasks per node, and its step failed with ``More processors requested than
    permitted``. Reuse is judged on the CPUs granted, before running."""
    name = names.new("tasks")
    one = spec_with(local_cluster, tmp_path, name, "srun -N 1 -n 1 hostname\n", "one.slurm")
    two = spec_with(local_cluster, tmp_path, name, "srun -N 1 -n 2 hostname\n", "two.slurm",
                    slurm_params={"ntasks_per_node": 2})
    first = Executor(one, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    assert granted(first.allocation_id or "")[1] == 1
    problems = Allocation(one.repo_root, SubprocessBackend()).reuse_problems(two)
    assert any("2 task(s) per node need 2 CPU(s) per node, the allocation has 1" in p
               for p in problems), problems
    second = Executor(two, SubprocessBackend()).run()
    assert second.status is Status.PASSED, second.render_text()
    assert second.path[:3] == ["NoState", "Validating", "Incompatible"]
    assert second.allocation_id != first.allocation_id
    assert job_state(first.allocation_id or "") in (None, "CANCELLED", "COMPLETING")
    assert state_of(two)["cpus_per_node"] == 2 == granted(second.allocation_id or "")[1]
    # and the 1-task spec fits in the 2-CPU allocation: reused
    third = Executor(one, SubprocessBackend()).run()
    assert third.status is Status.PASSED and third.allocation_id == second.allocation_id


def test_alloc_nodes_makes_a_bigger_allocation_that_holds_the_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """18: ``alloc_nodes`` asks for more nodes than the job; the job runs in it, a job of
    two nodes reuses it."""
    name = names.new("big")
    one = spec_with(local_cluster, tmp_path, name, "srun hostname\n", "one.slurm",
                    alloc_nodes=2)
    two = spec_with(local_cluster, tmp_path, name, "srun -N 2 hostname\n", "two.slurm",
                    slurm_params={"nodes": 2})
    first = Executor(one, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    assert granted(first.allocation_id or "")[0] == 2 == state_of(one)["nodes"]
    second = Executor(two, SubprocessBackend()).run()
    assert second.status is Status.PASSED, second.render_text()
    assert second.allocation_id == first.allocation_id
