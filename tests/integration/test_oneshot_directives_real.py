"""Issue 17 item 15 on the real local cluster: the one-shot ``sbatch`` leaves the
script's own ``#SBATCH --partition`` / ``--account`` in force (a command-line option
would override them without a word) and says so when they differ from the spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.results import Status
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import slurm
from .test_run_real import one_shot, run

pytestmark = pytest.mark.slurm


def account_of(job_id: str) -> str:
    out = slurm("sacct", "-j", job_id, "-X", "-n", "-P", "--format=Account").stdout
    return out.strip()


def test_the_scripts_own_account_line_wins_and_is_reported(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    assert local_cluster.account != "other"
    spec = one_shot(local_cluster, tmp_path, "own-account.sh", "echo done\n",
                    sbatch=("--account=other",))
    report = run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert report.job_id is not None
    assert account_of(report.job_id) == "other"
    assert any("#SBATCH --account=other is used, not slurm_params.account" in w
               for w in report.warnings), report.warnings


def test_without_a_line_of_its_own_the_spec_decides(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = one_shot(local_cluster, tmp_path, "spec-account.sh", "echo done\n")
    report = run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert account_of(report.job_id or "") == local_cluster.account
    assert not any("#SBATCH" in w for w in report.warnings)
