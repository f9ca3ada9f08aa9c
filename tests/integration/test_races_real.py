"""Issue 28's race campaign, a handful of its races in the suite: ``run`` /
``release`` / ``release --no-wait`` / kill -9 / SIGSTOP across two emulated login
nodes on one repo_root, the state file's lock local to each node (this kernel has no
NFS: a filesystem whose locks do not hold across hosts). After each race: no double
allocation, no cancel under a foreign lease, no job killed that was not asked to be
(:func:`slurm_fsm_dev.races.check`). The whole campaign: ``python -m
slurm_fsm_dev.races`` (docs/reliability.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo
from slurm_fsm_dev.races import KINDS, run_race, schedule

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="emulating a login node needs unshare as root"),
]

#: a seed whose first 5 races are one of each kind and cover each second command
SEED = 37
RACES = 5


def test_the_schedule_of_the_suites_races_covers_every_kind() -> None:
    races = schedule(RACES, SEED)
    assert {r.kind for r in races} == set(KINDS)


@pytest.mark.parametrize("race", schedule(RACES, SEED), ids=lambda r: f"{r.index}-{r.kind}")
def test_a_race_across_two_login_nodes_holds_the_three_invariants(
        local_cluster: ClusterInfo, tmp_path: Path, race: object) -> None:
    from slurm_fsm_dev.races import Race

    assert isinstance(race, Race)
    result = run_race(race, root=tmp_path / "race", env={**os.environ, **local_cluster.env},
                      partition=local_cluster.partition, account=local_cluster.account,
                      user=local_cluster.user,
                      slurmctld_log=local_cluster.log_dir / "slurmctld.log")
    print(result["events"], [(o["command"], o["status"]) for o in result["outcomes"]])
    assert result["violations"] == {"double": [], "foreign_cancel": [], "unasked_kill": []}, \
        result
    assert result["samples"] > 0, result  # the sampler saw the race
