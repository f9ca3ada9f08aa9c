"""The pre-flight checks on the real local cluster: ``plan`` and ``run`` name what the
cluster has (sinfo, sacctmgr) and no ``salloc`` is tried for a spec it cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.preflight import check_request
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, jobs_named, spec_dict

pytestmark = pytest.mark.slurm


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=False)


@pytest.mark.parametrize(("params", "needle"), [
    ({"partition": "gpu"},
     "no partition 'gpu' on this cluster; it has: debug (up, 3 nodes, 4 GPUs per node)"),
    pytest.param({"account": "nosuch"}, "'nosuch' is not an account of user",
                 marks=pytest.mark.config(noenforce=False)),  # warned, not refused, else
    ({"nodes": 5}, "5 nodes asked; partition 'debug' has 3 such nodes"),
    ({"gpus_per_node": 5}, "1 node with 5 GPUs each asked; partition 'debug' has 0 such"),
])
def test_plan_and_run_name_what_the_cluster_has(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        params: dict[str, Any], needle: str) -> None:
    name = names.new("pre")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name, slurm_params=params)))

    plan = _cli("plan", str(spec))
    assert plan.returncode == 3, plan.stdout + plan.stderr
    assert needle in plan.stdout
    assert "salloc" not in plan.stdout  # stops at the check: no salloc line offered

    run = _cli("run", str(spec))
    assert run.returncode == 3, run.stdout + run.stderr
    terminal = run.stdout + run.stderr
    assert terminal.count(needle) == 1, terminal  # once: in the report
    assert "salloc:" not in terminal  # Slurm's own refusal never came: salloc never ran
    assert not (tmp_path / "work_dirs" / ".salloc.log").exists()
    assert jobs_named(name, local_cluster.user) == []


def test_a_good_spec_passes_every_check(local_cluster: ClusterInfo, names: JobNames,
                                        tmp_path: Path) -> None:
    spec = JobSpec.from_dict(spec_dict(local_cluster, tmp_path, names.new("pre")))
    backend = SubprocessBackend()
    assert check_request(spec, backend, backend.current_user()) == []
    assert backend.user_associations(backend.current_user())  # accounting answers here


def test_a_misspelt_partition_leaves_the_held_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 41, the first hour 1: the pre-flight's questions (sinfo, sacctmgr) are asked
    before Incompatible cancels anything: the warm allocation survives a typo."""
    name = names.new("typo")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name)))
    first = _cli("run", str(good), "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    held = json.loads(first.stdout)["allocation_id"]
    state = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"
    before = state.read_text()

    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name,
                                         slurm_params={"partition": "gpu"})))
    run = _cli("run", str(typo))
    assert run.returncode == 3, run.stdout + run.stderr
    assert "no partition 'gpu' on this cluster" in run.stdout + run.stderr
    assert jobs_named(name, local_cluster.user) == [(held, "RUNNING")]  # not cancelled
    assert state.read_text() == before  # the state file still names it
    again = _cli("run", str(good), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["allocation_id"] == held  # reused, warm
