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
