"""Issue 28 on the real cluster: Slurm is the arbiter of who uses an allocation.

Two emulated login nodes share one repo_root: each command runs under
``unshare --uts --pid --fork --mount-proc`` with a host name of its own (``login-a``,
``login-b``), so neither can check the other's pids and a run record of the other
node is a black box. This machine's kernel has no NFS (no loopback NFS mount): the
repo_root is a shared folder, and the state file's lock still works between the
namespaces (one kernel); what is tested is that the decision no longer depends on
the run records of another host but on the lease steps Slurm lists.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fsm_dev.chroot import LOGIN_NODES
from slurm_fsm_dev.localcluster import ClusterInfo
from slurm_fsm_dev.loginnodes import on_node, orchestrator

from .helpers import JobNames, cli_report, job_state, spec_dict, steps, until

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="emulating a login node needs unshare as root"),
]

#: a job that runs until told to end: its step shares the node's CPUs
LONG_JOB = "#!/bin/bash\necho start\nsrun --overlap -n1 sleep {s}\necho end\n"


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _on_node(cluster: ClusterInfo, host: str, *args: str,
             linger_s: int = 0) -> subprocess.Popen[str]:
    """``slurm-fsm ARGS --json --quiet`` on the emulated login node ``host``
    (:func:`slurm_fsm_dev.loginnodes.on_node`, the shared lock)."""
    return on_node(host, [*args, "--json", "--quiet"], env=_env(cluster), linger_s=linger_s)


def _orchestrator(root: int) -> int | None:
    return orchestrator(root)


def _specs(cluster: ClusterInfo, tmp_path: Path, name: str, seconds: float) -> list[Path]:
    (tmp_path / "job.slurm").write_text(LONG_JOB.format(s=seconds))
    out = []
    for node in ("a", "b"):
        data = spec_dict(cluster, tmp_path, name, work_dir=str(tmp_path / f"work-{node}"),
                         success_patterns=["end"])
        path = tmp_path / f"spec-{node}.json"
        path.write_text(json.dumps(data))
        out.append(path)
    return out


def _leases(alloc: str) -> list[str]:
    return [n for n in steps(alloc).values() if n.startswith("fsm-lease.r")]


def test_another_login_nodes_release_never_cancels_under_a_job_and_goes_once_it_dies(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Done-when of issue 28: node B's ``release --no-wait`` never cancels while node
    A's job runs (nor while node A's orchestrator is paused); after node A's
    orchestrator is killed mid-job, node B's ``release`` finishes within 30 s with the
    allocation gone (before: node A's record counted as alive for 75 minutes)."""
    spec_a, spec_b = _specs(local_cluster, tmp_path, names.new("arbiter"), 300)
    work_dirs = tmp_path / "repo" / "work_dirs"
    node_a = _on_node(local_cluster, LOGIN_NODES[0], "run", str(spec_a), linger_s=20)
    try:
        record = until("node A's job to run", lambda: next(
            (p for p in work_dirs.glob(".slurm_run.r????????????.json")
             if '"pgid"' in p.read_text()),
            None), 120)
        data = json.loads(record.read_text())
        assert data["host"] == LOGIN_NODES[0]
        alloc = data["allocation"]
        (lease,) = _leases(alloc)
        assert lease.startswith(f"fsm-lease.{data['run_id']}.")
        assert int(lease.rsplit(".", 1)[1]) > time.time() + 600  # its max_until
        refused = cli_report(_on_node(local_cluster, LOGIN_NODES[1], "release", str(spec_b),
                                      "--no-wait"))
        assert refused["_rc"] == 3 and refused["status"] == "ERROR", refused
        assert "in use by 1 running job(s)" in refused["summary"]
        assert LOGIN_NODES[0] in refused["summary"] and "lease step" in refused["summary"]
        assert job_state(alloc) == "RUNNING"
        orchestrator = until("node A's orchestrator", lambda: _orchestrator(node_a.pid), 10)
        os.kill(orchestrator, signal.SIGSTOP)  # paused: its lease holds
        try:
            paused = cli_report(_on_node(local_cluster, LOGIN_NODES[1], "release", str(spec_b),
                                         "--no-wait"))
            assert paused["_rc"] == 3 and "in use by 1" in paused["summary"], paused
            assert job_state(alloc) == "RUNNING" and _leases(alloc) == [lease]
        finally:
            os.kill(orchestrator, signal.SIGCONT)
        os.kill(orchestrator, signal.SIGKILL)  # mid-job
        killed = time.monotonic()
        released = cli_report(_on_node(local_cluster, LOGIN_NODES[1], "release", str(spec_b)),
                              timeout=60)
        took = time.monotonic() - killed
        print(f"node B's release went {took:.1f} s after node A's kill -9")
        assert released["status"] == "RELEASED" and released["allocation_id"] == alloc, \
            (released.get("summary"), released.get("errors"), released.get("notes"))
        assert took < 30, took
        until("the allocation gone", lambda: True if job_state(alloc) in (
            None, "CANCELLED", "COMPLETED") else None, 30)
        assert record.exists()  # node A's record is still there: it decided nothing
    finally:
        if node_a.poll() is None:
            node_a.kill()
        node_a.communicate(timeout=30)
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec_b), "--quiet"],
                       env=_env(local_cluster), timeout=120, check=False,
                       capture_output=True)


def test_a_lease_step_ends_with_its_owners_kill_9(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The lease is tied to the orchestrator's life: gone from squeue soon after a
    kill -9 of the process that started it (measured 0.02-0.07 s here)."""
    env = _env(local_cluster)
    name = names.new("leasek9")
    subprocess.run(["salloc", "--no-shell", f"--partition={local_cluster.partition}",
                    f"--account={local_cluster.account}", "-N1", "-t", "5", "-J", name],
                   env=env, check=True, capture_output=True, timeout=60)
    alloc = until("the allocation", lambda: next(iter(j for j, _ in names.jobs()), None), 30)
    code = ("import sys, time\nfrom slurm_fsm.subprocess_backend import SubprocessBackend\n"
            "SubprocessBackend().start_lease(sys.argv[1], sys.argv[2])\n"
            "print('up', flush=True)\ntime.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", code, alloc,
                              "fsm-lease.r0123456789ab.4000000000"],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "up"
        assert _leases(alloc) == ["fsm-lease.r0123456789ab.4000000000"]
        owner.kill()
        killed = time.monotonic()
        until("the lease step gone", lambda: True if not _leases(alloc) else None, 10)
        assert time.monotonic() - killed < 10
        assert job_state(alloc) == "RUNNING"  # only the lease ended
    finally:
        owner.kill()
        owner.communicate(timeout=10)
        names.cleanup()


def test_a_state_file_naming_a_reused_job_id_never_cancels_that_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 28, never the wrong allocation: Slurm reuses job ids. A state file names
    job J, submitted at another time than Slurm's J (the procedure's own job, untagged
    under this checkout's job name: ours by name). Before, ``release`` cancelled it;
    now it is left alone and the state file is dropped with a warning; ``run``
    neither reuses it nor cancels it as an orphan."""
    env = _env(local_cluster)
    name = names.new("reused")
    subprocess.run(["salloc", "--no-shell", f"--partition={local_cluster.partition}",
                    f"--account={local_cluster.account}", "-N1", "-t", "10", "-J", name],
                   env=env, check=True, capture_output=True, timeout=60)
    job = until("the other job", lambda: next(iter(j for j, _ in names.jobs()), None), 30)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name)))
    state = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"

    def forge() -> None:
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({
            "job_id": job, "container_name": None, "nodelist": "n1",
            "partition": local_cluster.partition, "account": local_cluster.account,
            "nodes": 1, "gpus_per_node": None, "docker_image": None, "container_mounts": "",
            "allocated_at": "2020-01-01T00:00:00+00:00", "time_limit": "00:10:00",
            "installed": True, "submit_time": "2020-01-01T00:00:00"}))

    try:
        forge()
        done = subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec),
                               "--json"], capture_output=True, text=True, timeout=120,
                              env=env, check=False)
        report = json.loads(done.stdout)
        assert report["status"] == "RELEASED", report
        assert any("the id was reused by another job" in w for w in report["warnings"]), \
            report
        assert job_state(job) == "RUNNING"
        assert not state.exists()
        forge()
        ran = subprocess.run([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json"],
                             capture_output=True, text=True, timeout=180, env=env,
                             check=False)
        report = json.loads(ran.stdout)
        assert report["status"] == "PASSED", report
        assert report["allocation_id"] != job
        assert job_state(job) == "RUNNING"
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       env=env, timeout=120, check=False, capture_output=True)
        names.cleanup()


def _node_init(unshare_pid: int) -> int:
    """The emulated login node's first process (pid 1 of its namespace): its end is the
    node's death, every process of it killed at once by the kernel."""
    from slurm_fsm_dev.loginnodes import children

    (init,) = children().get(unshare_pid, [])
    return init


def test_a_lease_ends_with_its_login_node_and_the_other_node_can_release(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 39, item 4: every process of login node A killed at once mid-job (its
    ``srun`` s included, so nobody cancels the lease step). Before, A's lease step
    stayed RUNNING until the allocation's end and node B's release waited for it (at
    most 1200 s) or refused; now the lease task finds its ``srun``'s socket gone and
    ends, and B's ``release --no-wait`` releases."""
    spec_a, spec_b = _specs(local_cluster, tmp_path, names.new("nodedies"), 300)
    work_dirs = tmp_path / "repo" / "work_dirs"
    node_a = _on_node(local_cluster, LOGIN_NODES[0], "run", str(spec_a), linger_s=600)
    try:
        record = until("node A's job to run", lambda: next(
            (p for p in work_dirs.glob(".slurm_run.r????????????.json")
             if '"pgid"' in p.read_text()),
            None), 120)
        alloc = json.loads(record.read_text())["allocation"]
        until("node A's lease step", lambda: True if _leases(alloc) else None, 30)
        os.kill(_node_init(node_a.pid), signal.SIGKILL)  # the whole node, at once
        node_a.communicate(timeout=30)
        until("node A's lease step ended by itself", lambda: True if not _leases(alloc)
              else None, 60)
        assert job_state(alloc) == "RUNNING"  # only the lease ended
        released = cli_report(_on_node(local_cluster, LOGIN_NODES[1], "release", str(spec_b),
                                       "--no-wait"), timeout=120)
        assert released["status"] == "RELEASED" and released["allocation_id"] == alloc, \
            (released.get("summary"), released.get("errors"))
        until("the allocation gone", lambda: True if job_state(alloc) in (
            None, "CANCELLED", "COMPLETED") else None, 30)
    finally:
        if node_a.poll() is None:
            node_a.kill()
            node_a.communicate(timeout=30)
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec_b), "--quiet"],
                       env=_env(local_cluster), timeout=120, check=False,
                       capture_output=True)
