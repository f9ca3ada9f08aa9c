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

from slurm_fsm.spec import JobSpec
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, cli_report, job_state, jobs_named, spec_dict
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


def test_two_warm_checkouts_of_one_user_do_not_hold_each_other(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Item 3: two checkouts of one user, both ``warm_successor``, no
    ``alloc_job_name``: each allocation asks ``--dependency=singleton``, which Slurm
    applies per user and job name. The second checkout's first allocation runs while
    the first checkout's is still RUNNING (before: PENDING (Dependency) behind it)."""
    specs = []
    for which in ("one", "two"):
        root = tmp_path / which
        data = spec_dict(local_cluster, root, "unused", warm_successor=True,
                         expected_duration_seconds=30)
        del data["alloc_job_name"]
        path = root / "job.json"
        path.write_text(json.dumps(data))
        spec = JobSpec.from_dict(data)
        names.names.extend([spec.job_name, spec.job_name + "-b"])
        specs.append((path, spec))
    (one, spec_one), (two, spec_two) = specs
    env = {**os.environ, "SLURM_CONF": str(local_cluster.slurm_conf)}
    procs: list[subprocess.Popen[str]] = []
    try:
        for path in (one, two):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "slurm_fsm", "run", str(path), "--json", "--quiet"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
            report = cli_report(procs[-1], 120)
            assert (report["_rc"], report["status"]) == (0, "PASSED"), report
        first, second = (jobs_named(s.job_name, local_cluster.user)
                         for s in (spec_one, spec_two))
        assert [state for _, state in first] == ["RUNNING"]
        assert [state for _, state in second] == ["RUNNING"]
        assert spec_one.job_name != spec_two.job_name
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for path, _ in specs:
            subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(path),
                            "--quiet"], timeout=120, check=False, capture_output=True,
                           env=env)


@pytest.mark.parametrize("job_id", ["4294967295", "2147483648"])
def test_a_state_file_job_id_squeue_refuses_does_not_block_the_checkout(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, job_id: str) -> None:
    """Item 8: ``squeue -j 4294967295`` says "Invalid job id" (not "gone"). Such a
    ``job_id`` in the state file is a corrupt state file: dropped with a warning, the
    checkout's allocation found again by its tag, the run PASSED (before: every run,
    status and release ERROR until the file was deleted)."""
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("bigid"))))
    env = {**os.environ, "SLURM_CONF": str(local_cluster.slurm_conf)}

    def cli(*args: str) -> dict[str, object]:
        return cli_report(subprocess.Popen(
            [sys.executable, "-m", "slurm_fsm", *args, str(spec), "--json", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), 120)

    try:
        first = cli("run")
        assert first["status"] == "PASSED", first
        state = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"
        data = json.loads(state.read_text())
        data["job_id"] = job_id
        state.write_text(json.dumps(data))
        again = cli("run")
        assert (again["_rc"], again["status"]) == (0, "PASSED"), again
        assert again["allocation_id"] == first["allocation_id"]
        assert json.loads(state.read_text())["job_id"] == first["allocation_id"]
    finally:
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                       timeout=120, check=False, capture_output=True, env=env)
