"""Faults of the run itself, on the real local Slurm cluster (issue 10).

A closed stderr pipe, ``kill -9`` of the orchestrator mid-job, a dead run's
leftovers, a request that can never start, an allocation cancelled or expired
under a running job, and the stop signals with ``--json``. Every test drives the
``slurm-fsm`` CLI as a subprocess (the way an orchestrator or a shell does) or the
Executor, and leaves no job, step or process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm.backend import JobInfo, ScriptRequest
from slurm_fsm.executor import run_book
from slurm_fsm.placement import script_env
from slurm_fsm.scriptguard import group_members
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, job_state, jobs_named, slurm, spec_dict, step_ids, steps, until

pytestmark = pytest.mark.slurm


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip("\n"))
    return path


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


def spec_file(cluster: ClusterInfo, root: Path, name: str, body: str, file: str,
              **over: Any) -> Path:
    path = script(root / f"{file}.slurm", body)
    return write_spec(root / f"{file}.json", spec_dict(cluster, root, name,
                                                       script_path=str(path), **over))


def start_cli(spec: Path, stdout: Path, *extra: str,
              pipe_stderr: bool = False) -> subprocess.Popen[str]:
    """``slurm-fsm run SPEC --json``, stdout to a file; stderr to a pipe or to a file
    beside it (``<stdout>.err``)."""
    with open(stdout, "w", encoding="utf-8") as out, \
            open(stdout.with_suffix(".err"), "w", encoding="utf-8") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json", *extra],
            stdout=out, stderr=subprocess.PIPE if pipe_stderr else err, text=True,
        )


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, float]:
    """Wait (bounded) for the CLI; its exit code and how long that took."""
    t0 = time.monotonic()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"slurm-fsm did not end within {timeout:g} s") from None
    return rc, time.monotonic() - t0


def one_report(stdout: Path) -> dict[str, Any]:
    """stdout holds exactly one JSON document (json.loads fails on anything more)."""
    data = json.loads(stdout.read_text())
    assert isinstance(data, dict)
    return data


def release(spec: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def allocation_of(name: str, cluster: ClusterInfo) -> str:
    ((job_id, _),) = until("our allocation", lambda: jobs_named(name, cluster.user) or None, 60)
    return job_id


# ------------------------------------------------------------------ 1. closed stderr
@pytest.mark.parametrize("close_at", ["first line", "job running"])
def test_a_closed_stderr_pipe_only_silences_progress(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, close_at: str) -> None:
    """``slurm-fsm run SPEC 2>&1 | head -1``: the reader of stderr goes away."""
    name = names.new("pipe")
    spec = spec_file(local_cluster, tmp_path, name, "srun true\nsleep 3\necho all-done\n",
                     "job", success_patterns=["all-done"])
    out = tmp_path / "report.json"
    proc = start_cli(spec, out, pipe_stderr=True)
    assert proc.stderr is not None
    try:
        while True:
            line = proc.stderr.readline()
            assert line, "stderr ended before the moment to close it"
            if close_at == "first line" or "] Running: job on allocation" in line:
                break
        proc.stderr.close()  # as `head -1` exits
        rc, took = finish(proc, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = one_report(out)
    assert rc == 0, report
    assert report["status"] == "PASSED"
    assert took < 60
    assert Path(report["log_files"]["stdout"]).read_text().endswith("all-done\n")
    job_id = report["allocation_id"]
    assert step_ids(job_id) == []  # nothing runs on unwatched
    release(spec)
    assert jobs_named(name, local_cluster.user) == []


# ---------------------------------------------------------------- 2. kill -9 mid-job
def test_kill_9_mid_job_leaves_nothing_the_next_run_can_confuse(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("kill9")
    dying = spec_file(local_cluster, tmp_path, name,
                      "echo 'FAILED: the killed run wrote this'\nsrun sleep 300\n", "dying",
                      failure_patterns=["FAILED"])
    proc = start_cli(dying, tmp_path / "dying.out", "--quiet")
    job_id = allocation_of(name, local_cluster)
    until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 60)
    record_paths = list((tmp_path / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"))
    assert len(record_paths) == 1, record_paths  # one record: this run's
    record_path = record_paths[0]
    record = json.loads(record_path.read_text())
    pgid = int(record["script"]["pgid"])
    assert group_members(pgid), "the script's process group runs"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # tied to the orchestrator's life: the script, its srun and its step end with it
    until("the dead run's script gone", lambda: True if not group_members(pgid) else None, 20)
    until("the dead run's step gone", lambda: True if not step_ids(job_id) else None, 20)
    dead_log = Path(record["log"])
    assert "FAILED: the killed run" in dead_log.read_text()

    passing = spec_file(local_cluster, tmp_path, name, "srun true\necho 'all good'\n", "next",
                        failure_patterns=["FAILED"], success_patterns=["all good"])
    proc2 = start_cli(passing, tmp_path / "next.out", "--quiet")
    rc, _ = finish(proc2, 90)
    report = one_report(tmp_path / "next.out")
    assert rc == 0 and report["status"] == "PASSED", report
    assert report["allocation_id"] == job_id
    own = Path(report["log_files"]["stdout"])
    assert own != dead_log and own.read_text() == "all good\n"
    assert "FAILED: the killed run" in dead_log.read_text()  # not lost either
    assert not record_path.exists()
    release(passing)


def test_a_dead_run_s_leftovers_are_stopped_by_the_next_run(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Where the orchestrator's death could not stop them (another platform, a guard
    killed first): the next run finds the script and step through the run record."""
    name = names.new("leftover")
    spec_path = spec_file(local_cluster, tmp_path, name, "srun true\necho ok\n", "job")
    try:
        proc = start_cli(spec_path, tmp_path / "first.out", "--quiet")
        rc, _ = finish(proc, 90)
        assert rc == 0, one_report(tmp_path / "first.out")
        job_id = allocation_of(name, local_cluster)
        node = slurm("squeue", "-j", job_id, "-h", "-o", "%N").stdout.strip()
        # a script of a run that "died": started by this test, recorded as a run's
        spec = JobSpec.from_dict(json.loads(spec_path.read_text()))
        stale = SubprocessBackend().start_script(ScriptRequest(
            script_path=script(tmp_path / "stale.slurm", "srun sleep 300\n"),
            log_path=tmp_path / "stale.log", cwd=tmp_path,
            env=script_env(JobInfo(job_id=job_id, state="RUNNING", nodelist=node),
                           spec.slurm_params)))
        book = run_book(spec)
        book.save(attrs.evolve(book.start(job_id), pid_ticks=-1, log=str(tmp_path / "stale.log"),
                               script=stale.identity))  # a record whose run is gone
        until("the stale step", lambda: "sleep" in steps(job_id).values() or None, 30)

        proc = start_cli(spec_path, tmp_path / "next.out", "--quiet")
        rc, took = finish(proc, 90)
        report = one_report(tmp_path / "next.out")
        assert rc == 0 and report["status"] == "PASSED", report
        warning = next(w for w in report["warnings"] if "earlier run" in w)
        assert f"process group {stale.pid}" in warning
        assert stale.poll() is not None  # stopped, and its step with it
        assert "sleep" not in steps(job_id).values()
        assert took < 40
    finally:
        release(spec_path)


# ------------------------------------------------------ 3. a request that never starts
def test_a_request_that_can_never_start_ends_at_once(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """2 nodes for an account limited to 1 node per job: Slurm accepts the request and
    keeps it PENDING (AssocMaxNodePerJobLimit) for ever. (``nodes: 4`` on this 3-node
    partition is refused by salloc itself here: EnforcePartLimits=ALL.)"""
    account = "other"
    limit = slurm("sacctmgr", "-i", "modify", "account", account, "set", "MaxNodes=1")
    assert limit.returncode == 0, limit.stderr
    try:
        name = names.new("never")
        spec = spec_file(local_cluster, tmp_path, name, "srun true\n", "job",
                         slurm_params={"account": account, "nodes": 2})
        proc = start_cli(spec, tmp_path / "report.json", "--quiet")
        rc, took = finish(proc, 120)
        report = one_report(tmp_path / "report.json")
        assert rc == 3 and report["status"] == "ERROR", report
        assert "AssocMaxNodePerJobLimit" in report["summary"]
        assert "never start" in report["summary"]
        assert took < 30  # not the 600 s pending wait
        until("the pending job cancelled",
              lambda: True if not jobs_named(name, local_cluster.user) else None, 15)
        assert not (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()
    finally:
        slurm("sacctmgr", "-i", "modify", "account", account, "set", "MaxNodes=-1")


# ---------------------------------------------- 4. the allocation ends under the job
def test_allocation_cancelled_under_a_running_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("scancel")
    spec = spec_file(local_cluster, tmp_path, name, "srun sleep 300\n", "job")
    proc = start_cli(spec, tmp_path / "report.json", "--quiet")
    job_id = allocation_of(name, local_cluster)
    until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 60)
    assert slurm("scancel", job_id).returncode == 0
    rc, _ = finish(proc, 90)
    report = one_report(tmp_path / "report.json")
    assert rc == 1 and report["status"] == "CANCELLED", report
    assert report["summary"].startswith(f"CANCELLED: allocation {job_id} was cancelled")
    assert "ended under the job" in report["summary"]
    assert report["path"][-2:] == ["Running", "Gone"]
    assert not (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()
    assert job_state(job_id) in (None, "COMPLETING", "CANCELLED")


def test_allocation_time_limit_under_a_running_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Slurm's time limits are whole minutes and checked every 30 s: this takes ~80 s."""
    name = names.new("expire")
    spec = spec_file(local_cluster, tmp_path, name, "srun sleep 300\n", "job")
    proc = start_cli(spec, tmp_path / "report.json", "--quiet")
    job_id = allocation_of(name, local_cluster)
    until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 60)
    assert slurm("scontrol", "update", f"jobid={job_id}", "timelimit=1").returncode == 0
    rc, _ = finish(proc, 180)
    report = one_report(tmp_path / "report.json")
    assert rc == 1 and report["status"] == "TIMEOUT", report
    assert "reached its time limit" in report["summary"]
    assert any("DUE TO TIME LIMIT" in line for line in report["log_tail"])
    assert report["path"][-1] == "Gone"
    assert not (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()


# ------------------------------------------------------- 5. signals and --json
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_a_stopped_run_still_prints_one_json_report(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, sig: int) -> None:
    name = names.new("sig")
    spec = spec_file(local_cluster, tmp_path, name, "echo started\nsrun sleep 300\n", "job")
    proc = start_cli(spec, tmp_path / "report.json", "--quiet")
    job_id = allocation_of(name, local_cluster)
    until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 60)
    proc.send_signal(sig)
    rc, _ = finish(proc, 60)
    report = one_report(tmp_path / "report.json")
    assert rc == 128 + sig
    assert report["status"] == "CANCELLED"
    assert signal.Signals(sig).name in report["summary"]
    assert report["allocation_id"] == job_id
    assert report["log_tail"] == ["started"] or report["log_tail"][0] == "started"
    until("no step left", lambda: True if not step_ids(job_id) else None, 15)
    assert job_state(job_id) == "RUNNING"  # the allocation is kept
    release(spec)
    assert os.path.exists(report["log_files"]["stdout"])
