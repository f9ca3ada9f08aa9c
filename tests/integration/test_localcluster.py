"""The local cluster is a real, usable Slurm: several nodes, accounting, enforced accounts."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import hostlist
import pytest

from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localcluster import ClusterInfo

JOB_NAME = f"slurm_fsm-localcluster-test-{os.getpid()}"


def slurm(info: ClusterInfo, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **info.env},
        check=False,
    )


def cancel_ours(info: ClusterInfo) -> None:
    slurm(info, "scancel", f"--name={JOB_NAME}")


def node_states(info: ClusterInfo) -> dict[str, str]:
    out = slurm(info, "sinfo", "-h", "-N", "-o", "%N %T").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def busy_nodes(info: ClusterInfo) -> set[str]:
    """Nodes that jobs in squeue use (someone else may share the cluster)."""
    out = slurm(info, "squeue", "-h", "-o", "%N").stdout
    return {n for expr in out.split() for n in hostlist.expand_hostlist(expr)}


@pytest.mark.slurm
def test_every_node_is_idle(local_cluster: ClusterInfo) -> None:
    """Every node is idle, except those that someone else's running job uses."""
    assert len(local_cluster.nodes) >= 2
    deadline = time.monotonic() + 20  # a job of an earlier test may still be completing
    while True:
        states = node_states(local_cluster)
        busy = busy_nodes(local_cluster)
        expected_idle = [n for n in local_cluster.nodes if n not in busy]
        if all(states.get(n) == "idle" for n in expected_idle) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(states) == sorted(local_cluster.nodes)
    assert {n: states[n] for n in expected_idle} == {n: "idle" for n in expected_idle}
    for n in busy:
        assert states[n] in ("mixed", "allocated", "completing"), (n, states[n])


@pytest.mark.slurm
def test_the_controller_that_answers_is_ours(local_cluster: ClusterInfo) -> None:
    assert os.environ["SLURM_CONF"] == str(local_cluster.slurm_conf)
    proc = slurm(local_cluster, "scontrol", "show", "config")
    assert proc.returncode == 0, proc.stderr
    config = dict(
        (k.strip(), v.strip())
        for k, _, v in (line.partition("=") for line in proc.stdout.splitlines())
    )
    assert config["ClusterName"] == local_cluster.cluster_name
    assert config["SlurmctldPort"] == str(local_cluster.slurmctld_port)
    assert config["AccountingStorageEnforce"] == "associations,limits,qos"
    partitions = slurm(local_cluster, "sinfo", "-h", "-o", "%P").stdout.split()
    assert partitions == [f"{local_cluster.partition}*"]


@pytest.mark.slurm
def test_up_again_reuses_the_running_cluster(local_cluster: ClusterInfo) -> None:
    result = localcluster.bring_up(install=False)
    assert not result.started
    assert result.info == local_cluster
    assert result.seconds < 5


@pytest.mark.slurm
def test_two_node_allocation_runs_a_step_on_two_distinct_hosts(
    local_cluster: ClusterInfo,
) -> None:
    try:
        alloc = slurm(
            local_cluster, "salloc", "--no-shell", "-N", "2",
            f"--partition={local_cluster.partition}", f"--account={local_cluster.account}",
            "--time=5", f"--job-name={JOB_NAME}",
        )  # fmt: skip
        assert alloc.returncode == 0, alloc.stderr
        match = re.search(r"Granted job allocation (\d+)", alloc.stderr)
        assert match, alloc.stderr
        job_id = match.group(1)
        step = slurm(
            local_cluster, "srun", f"--jobid={job_id}", "-N", "2", "--ntasks-per-node=1",
            "hostname",
        )  # fmt: skip
        assert step.returncode == 0, step.stderr
        hosts = step.stdout.split()
        assert len(hosts) == 2
        assert len(set(hosts)) == 2
        assert set(hosts) <= set(local_cluster.nodes)
    finally:
        cancel_ours(local_cluster)


@pytest.mark.slurm
def test_sacct_sees_a_finished_job(local_cluster: ClusterInfo, tmp_path: Path) -> None:
    try:
        sub = slurm(
            local_cluster, "sbatch", "--parsable", f"--account={local_cluster.account}",
            f"--job-name={JOB_NAME}", f"--output={tmp_path}/%j.out", "--wrap", "exit 0",
        )  # fmt: skip
        assert sub.returncode == 0, sub.stderr
        job_id = sub.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 30
        row = ""
        while time.monotonic() < deadline:
            row = slurm(
                local_cluster, "sacct", "-j", job_id, "-X", "-n", "-P",
                "--format=JobID,State,ExitCode,Account",
            ).stdout.strip()  # fmt: skip
            if row.startswith(f"{job_id}|COMPLETED"):
                break
            time.sleep(0.2)
        assert row == f"{job_id}|COMPLETED|0:0|{local_cluster.account}"
    finally:
        cancel_ours(local_cluster)


@pytest.mark.slurm
def test_only_the_configured_accounts_are_accepted(local_cluster: ClusterInfo) -> None:
    try:
        bad = slurm(
            local_cluster, "salloc", "--no-shell", "-N", "1",
            f"--account={localcluster.BAD_ACCOUNT}", f"--job-name={JOB_NAME}",
        )  # fmt: skip
        assert bad.returncode != 0
        assert "Invalid account or account/partition combination specified" in bad.stderr
        good = slurm(
            local_cluster, "salloc", "--no-shell", "-N", "1",
            f"--account={local_cluster.other_account}", f"--job-name={JOB_NAME}",
        )  # fmt: skip
        assert good.returncode == 0, good.stderr
        assert "Granted job allocation" in good.stderr
    finally:
        cancel_ours(local_cluster)


@pytest.mark.slurm
def test_more_nodes_than_exist_fail_at_once(local_cluster: ClusterInfo) -> None:
    try:
        proc = slurm(
            local_cluster, "salloc", "--no-shell", "-N", str(len(local_cluster.nodes) + 1),
            f"--account={local_cluster.account}", f"--job-name={JOB_NAME}", timeout=30,
        )  # fmt: skip
        assert proc.returncode != 0
        assert "Node count specification invalid" in proc.stderr
    finally:
        cancel_ours(local_cluster)
