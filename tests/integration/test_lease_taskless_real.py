"""Issue 39 (b) on the real cluster: a lease step whose task never ran.

A login node killed between its lease ``srun``'s step creation and the task's launch
leaves a step slurmctld lists RUNNING until the allocation's end (seen once in 51
``node`` kill points on 24.11: step ``1.250``, no launch in slurmd's log). Its task,
whose probe ends a lease with its host, never ran. The state is made here without a
race: ``srun --prolog=HOLD`` runs HOLD on the submit host after slurmctld made the step
and before the launch; HOLD waits, and the ``srun``'s whole group is then killed with
SIGKILL, as by its host's death. Measured on 22.05: the step stays RUNNING,
``scontrol show step`` says ``Tasks=1``, slurmd's log has no launch of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from slurm_fsm.lease import lease_name
from slurm_fsm.runowner import HEARTBEAT_STALE_S, Owner, OwnerRecord, RunFiles
from slurm_fsm.runrecord import RunBook, RunRecord, new_run_id
from slurm_fsm.slurmcli import srun_lease_argv
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, job_state, spec_dict, steps, until

pytestmark = [pytest.mark.slurm]


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def step_without_task(cluster: ClusterInfo, alloc: str, name: str, tmp: Path) -> str:
    """A step ``name`` of ``alloc`` made by slurmctld whose task was never launched: its
    ``srun`` held in ``--prolog`` (after the step's creation, before the launch), then
    its whole process group killed. The step's id."""
    mark = tmp / "held"
    hold = tmp / "hold.sh"
    hold.write_text(f'#!/bin/sh\necho "$SLURM_STEP_ID" > {mark}.tmp\n'
                    f"mv {mark}.tmp {mark}\nexec sleep 600\n")
    hold.chmod(0o755)
    argv = srun_lease_argv(alloc, name)
    argv.insert(1, f"--prolog={hold}")
    srun = subprocess.Popen(argv, env=_env(cluster), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        step_id = until("the lease srun held after its step was made",
                        lambda: mark.read_text().strip() if mark.exists() else None, 60)
    finally:
        os.killpg(srun.pid, signal.SIGKILL)  # srun, its helper and HOLD: its host dies
        srun.communicate(timeout=30)
    return f"{alloc}.{step_id}"


def _plant_owner(work_dirs: Path, run_id: str, alloc: str, lease: str, age_s: float) -> None:
    """Run ``run_id`` of login node ``login-a`` (another host): its run record and its
    owner record, last touched ``age_s`` ago."""
    state = work_dirs / ".slurm_alloc.json"
    record = OwnerRecord.new(run_id, Owner.SUPERVISOR, mode="persistent", spec_path="s.json",
                             spec={})
    RunBook(state).save(RunRecord(
        run_id=run_id, allocation=alloc, pid=10, pid_ticks=1, host="login-a",
        boot_id="b", uid=os.getuid(), since=record.since, lease=lease))
    files = RunFiles(state)
    files.write_owner(attrs.evolve(record, host="login-a", pid=10, lease=lease,
                                   allocation_id=alloc))
    then = time.time() - age_s
    os.utime(files.owner_path(run_id), (then, then))


def _allocation_and_lease(cluster: ClusterInfo, spec: Path) -> tuple[str, str, str]:
    """A first run of ``spec`` (it makes the persistent allocation, and must pass), then
    a new run id and its lease step's name: the allocation, the run id, the name."""
    ran = subprocess.run([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json"],
                         capture_output=True, text=True, timeout=300, env=_env(cluster),
                         check=False)
    first = json.loads(ran.stdout)
    assert first["status"] == "PASSED", first
    run_id = new_run_id()
    return str(first["allocation_id"]), run_id, lease_name(run_id, time.time() + 3600)


def _report(cluster: ClusterInfo, repo: Path, run_id: str) -> dict[str, object]:
    """``slurm-fsm report RUN_ID --json`` of the checkout ``repo``, read."""
    done = subprocess.run([sys.executable, "-m", "slurm_fsm", "report", run_id, "--json",
                           "--repo", str(repo)], capture_output=True, text=True, timeout=120,
                          env=_env(cluster), check=False)
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _release(cluster: ClusterInfo, spec: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--json",
                           "--no-wait"], capture_output=True, text=True, timeout=180,
                          env=_env(cluster), check=False)
    report: dict[str, object] = json.loads(done.stdout)
    report["_rc"] = done.returncode
    return report


def test_a_lease_step_whose_task_never_ran_is_broken_once_its_owner_is_gone(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Before: ``release`` counted the taskless lease step as a holder: ``--no-wait``
    refused, and a waiting release waited its whole limit (the campaign's 300 s, the
    allocation left RUNNING). Now: while the run's owner (on another host) keeps its
    heartbeat the step is a holder as before; once the heartbeat is older than
    ``HEARTBEAT_STALE_S`` the release cancels that step (the step alone, said),
    then the allocation."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("taskless"))))
    work_dirs = tmp_path / "repo" / "work_dirs"
    try:
        alloc, run_id, name = _allocation_and_lease(local_cluster, spec)
        step = step_without_task(local_cluster, alloc, name, tmp_path)
        assert steps(alloc) == {step: name}  # listed RUNNING, with no task
        shown = subprocess.run(["scontrol", "show", "step", step], capture_output=True,
                               text=True, timeout=30, env=_env(local_cluster), check=True)
        assert "State=RUNNING" in shown.stdout, shown.stdout

        _plant_owner(work_dirs, run_id, alloc, name, age_s=0)  # its owner beats
        held = _release(local_cluster, spec)
        assert held["_rc"] == 3 and "in use by 1" in str(held["summary"]), held
        assert steps(alloc) == {step: name} and job_state(alloc) == "RUNNING"

        _plant_owner(work_dirs, run_id, alloc, name, age_s=HEARTBEAT_STALE_S + 60)
        released = _release(local_cluster, spec)
        assert released["status"] == "RELEASED", released
        said = json.dumps(released)
        assert f"broke the lease of run {run_id}" in said and step in said, said
        assert "login-a" in said, said
        until("the allocation gone", lambda: True if job_state(alloc) in (
            None, "CANCELLED", "COMPLETED") else None, 30)
    finally:
        names.cleanup()  # scancel of this test's jobs: never a release that could wait


def test_a_paused_owner_s_lease_whose_task_runs_is_kept_however_old_its_heartbeat(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The other side of the rule: a run of login node A whose orchestrator is stopped
    (Ctrl-Z, SIGSTOP, a paused VM) stops touching its owner record while its host and
    its lease step's task live on. ``sstat`` lists that task: the release refuses, the
    step stays (design-handoff-and-arbiter.md: a paused owner's lease is never broken
    before its max_until)."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("paused"))))
    work_dirs = tmp_path / "repo" / "work_dirs"
    srun = None
    try:
        alloc, run_id, name = _allocation_and_lease(local_cluster, spec)
        srun = subprocess.Popen(srun_lease_argv(alloc, name), env=_env(local_cluster),
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        step = until("the lease step with its task", lambda: next(
            (s for s, n in steps(alloc).items() if n == name), None), 60)
        until("its task running (sstat)", lambda: True if step in subprocess.run(
            ["sstat", "-a", "-j", alloc, "--noheader", "--parsable2", "-o", "JobID"],
            capture_output=True, text=True, timeout=30, env=_env(local_cluster),
            check=False).stdout.split() else None, 60)
        _plant_owner(work_dirs, run_id, alloc, name, age_s=HEARTBEAT_STALE_S + 60)
        held = _release(local_cluster, spec)
        assert held["_rc"] == 3 and "in use by 1" in str(held["summary"]), held
        assert steps(alloc).get(step) == name and job_state(alloc) == "RUNNING"
    finally:
        if srun is not None:
            os.killpg(srun.pid, signal.SIGKILL)
            srun.communicate(timeout=30)
        names.cleanup()


def test_a_reader_settles_a_dead_host_s_run_whose_lease_step_never_had_a_task(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The reader's side of issue 39 (b): ``report RUN_ID`` of a run whose login node
    died between its lease step's creation and the task's launch took the run for alive
    (Slurm lists the step) and never gave a verdict. Its owner's silence and ``sstat``
    (no task of the step) tell: rebuilt at once, the step cancelled, the allocation
    kept."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("readtl"))))
    repo = tmp_path / "repo"
    try:
        alloc, run_id, name = _allocation_and_lease(local_cluster, spec)
        step = step_without_task(local_cluster, alloc, name, tmp_path)
        assert steps(alloc).get(step) == name  # Slurm lists it: "gone" cannot tell
        _plant_owner(repo / "work_dirs", run_id, alloc, name, age_s=HEARTBEAT_STALE_S + 60)
        report = _report(local_cluster, repo, run_id)
        assert report["status"] == "CANCELLED", report
        assert "never ran a task" in json.dumps(report), report
        # the reader cancels the step (``scancel ALLOC.STEP``), but Slurm 22.05 keeps a
        # step with no task listed whatever its scancel (measured: still RUNNING after
        # scancel, scancel -s KILL and --full): it goes with the allocation
        assert job_state(alloc) == "RUNNING"  # the allocation is kept
    finally:
        names.cleanup()


def test_a_run_settled_in_step0_cancels_the_lease_step_its_dead_host_left(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 39's 24.11 campaign: login node A died as its run's lease ``srun`` was
    made, before the record named the lease (the run still in step 0 for other hosts).
    Settled by its owner's silent heartbeat, the run left that step listed through 18
    later points. ``report RUN_ID`` now cancels the steps named for the run on the
    checkout's allocation (``scancel ALLOC.STEP``; Slurm 22.05 keeps a step with no task
    listed even so) and says so; the allocation is kept."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_dict(local_cluster, tmp_path, names.new("readsz"))))
    repo = tmp_path / "repo"
    try:
        alloc, run_id, name = _allocation_and_lease(local_cluster, spec)
        step = step_without_task(local_cluster, alloc, name, tmp_path)
        files = RunFiles(repo / "work_dirs" / ".slurm_alloc.json")
        record = OwnerRecord.new(run_id, Owner.SUPERVISOR, mode="persistent",
                                 spec_path="s.json", spec={})
        files.write_owner(attrs.evolve(record, host="login-a", pid=10))  # no lease named
        then = time.time() - HEARTBEAT_STALE_S - 60
        os.utime(files.owner_path(run_id), (then, then))
        report = _report(local_cluster, repo, run_id)
        assert report["status"] == "CANCELLED", report
        assert f"its step {step} ({name}) cancelled" in json.dumps(report), report
        assert job_state(alloc) == "RUNNING"  # the allocation is kept
    finally:
        names.cleanup()
