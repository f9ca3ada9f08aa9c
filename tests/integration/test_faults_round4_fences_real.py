"""Issue 43 (round 4) items 6 and 3 on real Slurm: nothing another user makes first
turns a checkout's fences off, and one checkout's fence does not hold another's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, cli_report, job_state, spec_dict
from .test_faults_round2_real import other_user  # noqa: F401 - a fixture

pytestmark = pytest.mark.slurm

#: a script whose scancel goes through /bin/sh and env (what drops a bash function)
SH_SCANCEL = """#!/bin/bash
env sh -c 'scancel $SLURM_JOB_ID'
echo "after scancel: $?"
echo shim done
"""


def test_a_squatted_shim_folder_still_keeps_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        other_user: str) -> None:  # noqa: F811 - the fixture
    """Item 6: another user makes ``slurm_fsm-<uid>`` in the temp folder first. The
    run's ``scancel $SLURM_JOB_ID`` through ``/bin/sh`` and ``env`` still reaches the
    shim (a fresh private folder), and the shared allocation stays RUNNING."""
    tmp = Path(tempfile.mkdtemp(prefix="sfm-rel4-tmp-", dir="/tmp"))
    try:
        tmp.chmod(0o1777)  # as /tmp: anyone may make a folder there first
        squat = tmp / f"slurm_fsm-{os.getuid()}"
        subprocess.run(["runuser", "-u", other_user, "--", "mkdir", "-m", "0777",
                        str(squat)], check=True, timeout=30)
        assert squat.stat().st_uid != os.getuid()
        script = tmp_path / "job.slurm"
        script.write_text(SH_SCANCEL)
        spec = tmp_path / "job.json"
        spec.write_text(json.dumps(spec_dict(
            local_cluster, tmp_path, names.new("squat"), script_path=str(script),
            work_dir=str(tmp_path / "work"), success_patterns=["shim done"])))
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        env.update(SLURM_CONF=str(local_cluster.slurm_conf), TMPDIR=str(tmp))
        proc = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec),
                                 "--json", "--quiet"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        report = cli_report(proc)
        assert (report["_rc"], report["status"]) == (0, "PASSED"), report
        alloc = report["allocation_id"]
        assert job_state(alloc) == "RUNNING"
        log = Path(report["log_files"]["stdout"]).read_text()
        assert "after scancel: 0" in log and "shared allocation" in log, log
        assert list(squat.iterdir()) == []  # nothing of ours went into the squat
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(tmp_path /
                        "job.json"), "--quiet"], timeout=120, check=False,
                       capture_output=True,
                       env={**os.environ, "SLURM_CONF": str(local_cluster.slurm_conf)})
        shutil.rmtree(tmp, ignore_errors=True)
