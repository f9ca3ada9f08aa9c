"""Batch-job parity (issue 44 items 1-2): the same one-shot array and heterogeneous job
scripts run on the fake cluster (its scripts run for real, ``run_scripts=True``) and on
real Slurm, and are judged alike: the same status, exit code and state, the same tasks
or components each ending the same way with its own log, the same counts.

The one difference: real Slurm starts a het job from its backfill scheduler (tens of
seconds here), the fake at once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.executor import Executor
from slurm_fsm.report import Report
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm.testing import FakeCluster
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import spec_dict

pytestmark = pytest.mark.slurm

ARRAY = """#!/bin/bash
#SBATCH --array=0-2
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"
if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then
    echo "1 failed, 2 passed in 0.10s"
    exit 1
fi
echo "3 passed in 0.10s"
"""

HET = """#!/bin/bash
#SBATCH --nodes=1
#SBATCH hetjob
#SBATCH --nodes=1
srun --het-group=0,1 bash -c 'echo "on $SLURMD_NODENAME"'
echo "3 passed in 0.10s"
exit {code}
"""

SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "array, task 1 fails": (ARRAY, {
        "status": "FAILED", "exit_code": 1, "slurm_state": "FAILED",
        "parts": [("_0", "COMPLETED", 0, "slurm-JOB_0.out"),
                  ("_1", "FAILED", 1, "slurm-JOB_1.out"),
                  ("_2", "COMPLETED", 0, "slurm-JOB_2.out")],
        "counts": (8, 1), "nodes_said": 0}),
    "het job passes": (HET.format(code=0), {
        "status": "PASSED", "exit_code": 0, "slurm_state": "COMPLETED",
        "parts": [("+0", "COMPLETED", 0, ""), ("+1", "COMPLETED", 0, "")],
        "counts": (3, None), "nodes_said": 2}),
    "het script fails": (HET.format(code=3), {
        "status": "FAILED", "exit_code": 3, "slurm_state": "FAILED",
        "parts": [("+0", "FAILED", 3, ""), ("+1", "FAILED", 3, "")],
        "counts": (3, None), "nodes_said": 2}),
}


def _seen(report: Report) -> dict[str, Any]:
    job = report.job_id or "?"
    return {
        "status": report.status.value, "exit_code": report.exit_code,
        "slurm_state": report.slurm_state,
        "parts": [(p["id"][len(job):], p["state"], p["exit_code"],
                   Path(p.get("log", "")).name.replace(job, "JOB"))
                  for p in report.metrics.get("parts", [])],
        "counts": (report.metrics.get("passed"), report.metrics.get("failed")),
        "nodes_said": len([line for line in report.log_tail
                           if re.fullmatch(r"on n\d+", line)]),
    }


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("backend", ["fake", "real"])
def test_fake_and_real_slurm_judge_a_batch_job_alike(
        local_cluster: ClusterInfo, tmp_path: Path, backend: str, scenario: str) -> None:
    text, expected = SCENARIOS[scenario]
    path = tmp_path / "job.sh"
    path.write_text(text)
    spec = JobSpec.from_dict(spec_dict(
        local_cluster, tmp_path, "unused-by-one-shot", script_path=str(path),
        persistent_mode=False, log_file_pattern="slurm-%j.out", workflow_type="pytest"))
    impl: SlurmBackend = (FakeCluster(
        partitions={local_cluster.partition: local_cluster.nodes},
        accounts=[local_cluster.account, local_cluster.other_account],
        user=local_cluster.user, run_scripts=True) if backend == "fake"
        else SubprocessBackend())
    report = Executor(spec, impl).run()
    assert _seen(report) == expected, report.render_text()
