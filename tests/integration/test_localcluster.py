"""The local cluster is a real, usable Slurm: several nodes, accounting, enforced accounts;
its configurations (``SLURM_FSM_LOCAL_CONFIG``) are what they say."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import hostlist
import pytest
from filelock import FileLock

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
@pytest.mark.config()
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
    assert config["AccountingStorageEnforce"] == (
        "none" if local_cluster.has("noenforce") else "associations,limits,qos")
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
@pytest.mark.config(noenforce=False)
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


@pytest.mark.slurm
@pytest.mark.config(noenforce=True)
def test_without_enforcement_a_job_under_an_unknown_account_runs_under_the_default_one(
        local_cluster: ClusterInfo) -> None:
    proc = slurm(local_cluster, "srun", "-N", "1", f"--account={localcluster.BAD_ACCOUNT}",
                 f"--job-name={JOB_NAME}", "bash", "-c", 'echo "account=$SLURM_JOB_ACCOUNT"')
    assert proc.returncode == 0, proc.stderr
    assert f"account={local_cluster.account}" in proc.stdout


@pytest.mark.slurm
@pytest.mark.config(cgroup=False)  # one cgroup cluster per host: this one makes its own
def test_another_configuration_restarts_the_cluster_and_down_leaves_no_cgroup_folder(
        local_cluster: ClusterInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second cluster of its own (its base folder, its ports): up with ``cgroup``
    (a step makes the nodes' cgroup folders), then up with ``typed`` restarts it rather
    than reuse it (and removes those folders), then down.

    One cgroup cluster per host: ``make test`` runs the 24.11 and 26.05 suites at the
    same time, each with this test; a lock in the checkout (which both chroots see)
    keeps the two from overlapping."""
    CGROUP_LOCK.parent.mkdir(exist_ok=True)
    with FileLock(str(CGROUP_LOCK), timeout=900):
        _cgroup_then_typed(local_cluster, monkeypatch)


#: Held by a test that brings a cgroup cluster up (the checkout's build folder: every
#: chroot of make test sees it at the same path)
CGROUP_LOCK = Path(__file__).resolve().parents[2] / "build" / "cgroup-cluster.lock"


def _cgroup_then_typed(local_cluster: ClusterInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    assert localcluster.cgroup_folders() == [], "another cgroup cluster runs on this host"
    monkeypatch.setenv(localcluster.ENV_BASE_DIR, f"{local_cluster.base_dir}-second")
    try:
        monkeypatch.setenv(localcluster.ENV_CONFIG, "cgroup")
        first = localcluster.bring_up(install=False)
        assert first.started and first.info.config == ("cgroup",)
        env = {**os.environ, **first.info.env}
        step = subprocess.run(["srun", "-N", "1", f"--account={first.info.account}",
                               "--gpus-per-node=1", "bash", "-c",
                               "cat /proc/self/cgroup; nvidia-smi -L"],
                              capture_output=True, text=True, timeout=60, env=env, check=False)
        assert step.returncode == 0, step.stderr
        assert "slurm_n" in step.stdout  # the step ran in the node's cgroup folders
        assert step.stdout.count("GPU ") == 1, step.stdout  # and saw its one GPU only
        assert localcluster.cgroup_folders()
        shown = localcluster.main(["status"])
        assert shown == 0

        monkeypatch.setenv(localcluster.ENV_CONFIG, "typed")
        second = localcluster.bring_up(install=False)
        assert second.started, "a cluster of another configuration was reused"
        assert second.info.config == ("typed",)
        assert localcluster.cgroup_folders() == []  # the restart removed them
        node = subprocess.run(["scontrol", "show", "node", "n1"], capture_output=True,
                              text=True, timeout=30, env={**os.environ, **second.info.env},
                              check=False).stdout
        assert "Gres=gpu:h100:4" in node
        assert not localcluster.bring_up(install=False).started  # same one: reused
    finally:
        localcluster.down()
    assert localcluster.status().state == "down"
    assert localcluster.cgroup_folders() == []


@pytest.mark.slurm
def test_restart_ctld_restarts_the_controller_and_keeps_the_running_steps(
    local_cluster: ClusterInfo, tmp_path: Path,
) -> None:
    """``restart_ctld`` (the kill-point campaign's ``ctld`` kind): slurmctld stopped and
    started again as ``up`` starts it; the state file names the new pid, the old one is
    gone, the job and its step running across the restart are still there, and the
    cluster is healthy again once the nodes have registered."""
    try:
        alloc = slurm(
            local_cluster, "salloc", "--no-shell", "-N", "1",
            f"--partition={local_cluster.partition}", f"--account={local_cluster.account}",
            "--time=5", f"--job-name={JOB_NAME}",
        )  # fmt: skip
        match = re.search(r"Granted job allocation (\d+)", alloc.stderr)
        assert match, alloc.stderr
        job_id = match.group(1)
        step = subprocess.Popen(  # a step that runs across the restart
            ["srun", f"--jobid={job_id}", "--overlap", "-n1", "sleep", "120"],
            env={**os.environ, **local_cluster.env}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while f"{job_id}.0" not in slurm(local_cluster, "squeue", "-h", "-s", "-j",
                                              job_id, "-o", "%i").stdout.split():
                assert time.monotonic() < deadline, "the step never ran"
                time.sleep(0.2)
            old = localcluster.daemon_pids()["slurmctld"]
            new = localcluster.restart_ctld()
            assert new != old
            assert not Path(f"/proc/{old}").exists() or "slurmctld" not in Path(
                f"/proc/{old}/cmdline").read_bytes().decode(errors="replace")
            assert localcluster.daemon_pids()["slurmctld"] == new
            assert "slurmctld" in Path(f"/proc/{new}/cmdline").read_bytes().decode()
            steps_after = slurm(local_cluster, "squeue", "-h", "-s", "-j", job_id,
                                "-o", "%i").stdout.split()
            assert f"{job_id}.0" in steps_after
            state = slurm(local_cluster, "squeue", "-h", "-j", job_id, "-o", "%T").stdout
            assert state.strip() == "RUNNING"
            assert step.poll() is None  # its srun never noticed
            # the nodes register again (they are "unknown" for a few seconds): healthy,
            # as `up` sees it
            deadline = time.monotonic() + 60
            while localcluster.current() is None:
                assert time.monotonic() < deadline, "the cluster never became healthy"
                time.sleep(0.5)
        finally:
            step.kill()
            step.wait(timeout=30)
    finally:
        cancel_ours(local_cluster)
