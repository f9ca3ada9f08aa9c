"""Runs that outlive the shell (issue 39) on the real cluster: ``run --detach`` returns
while the job's step runs in the allocation; another login node (an emulated one: its
own host name and pid namespace) waits for it and gets its verdict; a supervisor killed
with ``kill -9`` leaves no step running and a rebuilt report. The fake-cluster twin of
each is in tests/test_detach.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm_dev.chroot import LOGIN_NODES
from slurm_fsm_dev.localcluster import ClusterInfo
from slurm_fsm_dev.loginnodes import on_node

from .helpers import JobNames, job_state, spec_dict, steps, until

pytestmark = pytest.mark.slurm

#: the job's own step waits for a gate file: "the command returned while the job ran"
#: is a fact the test makes
GATED = ("#!/bin/bash\necho \"script pid $$\"\n"
         "srun --overlap -n1 bash -c 'until [ -e {gate} ]; do sleep 0.1; done'\n"
         "echo end\n")


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _cli(cluster: ClusterInfo, *args: str, cwd: Path,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,
                          env=_env(cluster), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _spec(cluster: ClusterInfo, tmp_path: Path, name: str) -> Path:
    (tmp_path / "job.slurm").write_text(GATED.format(gate=tmp_path / "gate"))
    data = spec_dict(cluster, tmp_path, name, success_patterns=["end"])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    (tmp_path / "repo").mkdir(exist_ok=True)
    return path


def _job_steps(alloc: str) -> list[str]:
    """The allocation's steps that are not leases."""
    return [s for s, n in steps(alloc).items() if not n.startswith("fsm-lease.")]


def _detach(cluster: ClusterInfo, spec: Path, repo: Path) -> dict[str, object]:
    done = _cli(cluster, "run", str(spec), "--detach", "--json", "--quiet", cwd=repo)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    assert doc["state"] == "running" and doc["owner"] == "supervisor", doc
    return doc


def _release(cluster: ClusterInfo, spec: Path) -> None:
    subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                   env=_env(cluster), timeout=120, check=False, capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="emulating a login node needs unshare as root")
def test_a_detached_run_is_waited_for_from_another_login_node(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = _spec(local_cluster, tmp_path, names.new("detach"))
    repo = tmp_path / "repo"
    try:
        doc = _detach(local_cluster, spec, repo)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        listed = json.loads(_cli(local_cluster, "runs", "--json", cwd=repo).stdout)
        assert [(r["run_id"], r["state"], r["allocation_id"]) for r in listed] == [
            (run_id, "running", alloc)]
        waiting = on_node(LOGIN_NODES[1], ["wait", run_id, "--repo", str(repo), "--json"],
                          env=_env(local_cluster))
        (tmp_path / "gate").touch()
        out, err = waiting.communicate(timeout=180)
        assert waiting.returncode == 0, err
        [report] = json.loads(out)
        assert (report["run_id"], report["status"], report["report_source"]) == (
            run_id, "PASSED", "live")
        assert report["allocation_id"] == alloc
        until("no step of the run left", lambda: True if not steps(alloc) else None, 30)
        assert job_state(alloc) == "RUNNING"  # the allocation is kept for the next run
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


def test_a_killed_supervisor_leaves_no_step_and_a_rebuilt_report(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = _spec(local_cluster, tmp_path, names.new("detachk9"))
    repo = tmp_path / "repo"
    try:
        doc = _detach(local_cluster, spec, repo)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        os.kill(int(str(doc["pid"])), signal.SIGKILL)
        until("the run's steps gone with its owner", lambda: True if not steps(alloc)
              else None, 60)
        done = _cli(local_cluster, "report", run_id, "--json", cwd=repo)
        assert done.returncode == 1, done.stderr
        report = json.loads(done.stdout)
        assert (report["status"], report["report_source"]) == ("CANCELLED", "rebuilt")
        assert report["allocation_id"] == alloc
        assert job_state(alloc) == "RUNNING"
        # the next run reuses the allocation: nothing of the dead run is in its way
        (tmp_path / "gate").touch()
        again = _cli(local_cluster, "run", str(spec), "--json", "--quiet", cwd=repo)
        assert json.loads(again.stdout)["status"] == "PASSED", again.stderr
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)
