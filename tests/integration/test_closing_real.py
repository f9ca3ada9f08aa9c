"""Issue 28, the closing marker on the real local cluster: a canceller's marker
(``fsm-closing.<run>.<max_until>``, started here by hand on a real allocation) makes a
run on another emulated login node wait once its lease is up; the allocation then
cancelled, the run does step 0 again and passes on a new allocation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fsm.lease import closing_name
from slurm_fsm_dev.chroot import LOGIN_NODES
from slurm_fsm_dev.localcluster import ClusterInfo
from slurm_fsm_dev.loginnodes import on_node

from .helpers import JobNames, cli_report, job_state, slurm, spec_dict, steps, until

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="emulating a login node needs unshare as root"),
]

MARKER = ("import sys, time\nfrom slurm_fsm.subprocess_backend import SubprocessBackend\n"
          "SubprocessBackend().start_lease(sys.argv[1], sys.argv[2])\n"
          "print('up', flush=True)\ntime.sleep(600)\n")


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _run(cluster: ClusterInfo, host: str, spec: Path) -> subprocess.Popen[str]:
    return on_node(host, ["run", str(spec), "--json", "--quiet"], env=_env(cluster))


def test_a_run_on_another_node_waits_out_a_closing_marker_then_allocates_anew(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    env = _env(local_cluster)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("closing"))))
    first = cli_report(_run(local_cluster, LOGIN_NODES[0], spec))
    assert first["status"] == "PASSED", first.get("summary")
    alloc = first["allocation_id"]
    marker_name = closing_name("r0123456789ab", time.time() + 120)
    marker = subprocess.Popen([sys.executable, "-c", MARKER, alloc, marker_name],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert marker.stdout is not None and marker.stdout.readline().strip() == "up"
        second = _run(local_cluster, LOGIN_NODES[1], spec)
        until("node B's lease beside the marker", lambda: True if any(
            n.startswith("fsm-lease.r") for n in steps(alloc).values()) else None, 60)
        time.sleep(3)  # node B waits: its job does not start while the marker is up
        assert sorted(n.split(".")[0] for n in steps(alloc).values()) == \
            ["fsm-closing", "fsm-lease"]
        slurm("scancel", alloc, env=env)  # the canceller's cancel: the marker ends with it
        report = cli_report(second, timeout=180)
        assert report["status"] == "PASSED", report.get("summary")
        assert report["allocation_id"] != alloc  # step 0 again: a new allocation
        assert job_state(alloc) in (None, "CANCELLED", "COMPLETED")
    finally:
        marker.kill()
        marker.communicate(timeout=10)
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       env=env, timeout=120, check=False, capture_output=True)
        names.cleanup()
