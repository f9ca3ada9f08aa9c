"""Runs that outlive the shell (issue 39), on the fake cluster: every run saves its
verdict by run id; ``run --detach`` hands the run to a supervisor and returns while the
job runs; ``runs``, ``logs``, ``attach``, ``wait``, ``report`` and ``cancel`` find it by
its id; a supervisor killed with ``kill -9`` leaves a run whose report is rebuilt.

The scripts wait for a gate file, so "the command returned while the job ran" is a fact
the test makes, not a timing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm.detach import RunState, attach, runs
from slurm_fsm.errors import SlurmFsmError
from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles, RunPhase
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

GATED = """#!/bin/bash
echo "script pid $$"
until [ -e {gate} ]; do sleep 0.05; done
echo "3 passed in 0.5s"
"""


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "job.slurm").write_text(GATED.format(gate=tmp_path / "gate"))
    (tmp_path / "spec.json").write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "pytest", "success_patterns": "passed", "persistent_mode": True,
        "alloc_time_limit": "01:00:00", "repo_root": ".", "monitor_timeout_seconds": 120,
        "slurm_params": {"partition": "debug", "account": "acct", "nodes": 1,
                         "time_limit": "00:05:00"}}))
    return tmp_path


def detach(repo: Path) -> str:
    done = cli("run", "spec.json", "--detach", "--backend", "fake", "--json", "--quiet",
               cwd=repo)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["state"] == "running" and doc["owner"] == "supervisor", doc
    assert doc["allocation_id"] and doc["log"], doc
    assert doc["attach"] == f"slurm-fsm attach {doc['run_id']}"
    return str(doc["run_id"])


def until(what: str, check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_foreground_run_saves_its_report_by_run_id(make_spec: SpecFactory) -> None:
    spec = make_spec()
    fake = FakeCluster()
    executor = Executor(spec, fake)
    report = executor.run()
    files = RunFiles(spec.state_path)
    saved = files.report(executor.run_id)
    assert saved is not None and saved.source == "live"
    assert saved.report == report
    record = files.owner(executor.run_id)
    assert record is not None and record.owner is Owner.FOREGROUND
    assert record.phase is RunPhase.DONE and record.pid == os.getpid()
    assert record.allocation_id == report.allocation_id
    assert record.log == report.log_files["stdout"]
    # the lease of the run carried the same id
    assert [v.run_id for v in runs(spec.repo_root)] == [executor.run_id]


def test_detach_returns_while_the_job_runs_and_the_verdict_is_found_by_id(
        repo: Path) -> None:
    run_id = detach(repo)
    # the job is blocked on its gate: the command returned before its end
    listed = json.loads(cli("runs", "--json", cwd=repo).stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [(run_id, "running")]
    until("the script's first line", lambda: "script pid" in cli("logs", run_id,
                                                                  cwd=repo).stdout)
    assert cli("report", run_id, cwd=repo).returncode == 3  # no verdict yet
    waiting = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "wait", run_id, "--json"],
                               cwd=repo, stdout=subprocess.PIPE, text=True)
    (repo / "gate").touch()
    out, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 0
    [doc] = json.loads(out)
    assert (doc["run_id"], doc["status"], doc["report_source"]) == (run_id, "PASSED", "live")
    assert doc["metrics"]["passed"] == 3
    report = json.loads(cli("report", run_id, "--json", cwd=repo).stdout)
    assert report == doc
    assert json.loads(cli("runs", "--json", cwd=repo).stdout)[0]["status"] == "PASSED"
    follow = cli("logs", run_id, "-f", cwd=repo)
    assert follow.stdout.splitlines()[-1] == "3 passed in 0.5s"


def test_attach_replays_the_progress_then_prints_the_report(repo: Path) -> None:
    run_id = detach(repo)
    attached = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "attach", run_id],
                                cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    (repo / "gate").touch()
    out, err = attached.communicate(timeout=60)
    assert attached.returncode == 0, err
    assert "Step0: validating or allocating" in err  # step 0's progress, replayed
    assert "3 passed in 0.5s" in err
    assert out.startswith(f"run {run_id}\nPASSED")


def _script_pid(repo: Path, run_id: str) -> int:
    until("the script's pid", lambda: "script pid" in cli("logs", run_id, cwd=repo).stdout)
    line = cli("logs", run_id, cwd=repo).stdout.splitlines()[0]
    return int(line.split()[-1])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_a_killed_supervisor_leaves_a_rebuilt_report_and_no_script(repo: Path) -> None:
    run_id = detach(repo)
    script = _script_pid(repo, run_id)
    owner = json.loads(cli("runs", "--json", cwd=repo).stdout)[0]["pid"]
    os.kill(owner, signal.SIGKILL)
    until("the script stopped with its owner", lambda: _gone(script))
    until("the run lost", lambda: runs(repo)[0].state == RunState.LOST)
    done = cli("report", run_id, "--json", cwd=repo)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert (doc["status"], doc["report_source"]) == ("CANCELLED", "rebuilt")
    assert any(f"supervisor (pid {owner}" in n and "rebuilt by" in n for n in doc["notes"])
    # rebuilt once, then read: the same document
    assert json.loads(cli("report", run_id, "--json", cwd=repo).stdout) == doc
    assert cli("wait", run_id, cwd=repo).returncode == 1


def test_cancel_stops_the_job_and_wait_gives_the_worst_exit_code(repo: Path) -> None:
    first = detach(repo)
    _script_pid(repo, first)
    done = cli("cancel", first, cwd=repo)
    assert done.returncode == 0 and "told to stop" in done.stdout
    assert attach(first, repo).result(60).status.name == "CANCELLED"
    second = detach(repo)
    (repo / "gate").touch()
    waited = cli("wait", first, second, cwd=repo)
    assert waited.returncode == 1  # CANCELLED (1) beside PASSED (0)
    assert f"{second}: PASSED" in waited.stdout
    assert cli("cancel", second, cwd=repo).stdout.endswith("has ended already\n")


def test_a_foreground_run_stopped_by_sigterm_saves_a_report_that_says_so(
        repo: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", "spec.json",
                             "--backend", "fake", "--quiet"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until("the foreground run's job", lambda: any(v.state == RunState.RUNNING
                                                  for v in runs(repo)))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    [view] = runs(repo)
    assert view.saved is not None and view.saved.source == "live"
    assert view.saved.report.status.name == "CANCELLED"
    assert "stopped by SIGTERM" in view.saved.report.summary
    assert view.record is not None and view.record.owner is Owner.FOREGROUND


@pytest.mark.parametrize("bad", ["rnotanid", "r000000000000", "../etc"])
def test_an_unknown_run_id_is_bad_input(repo: Path, bad: str) -> None:
    for command in ("report", "logs", "attach", "wait", "cancel"):
        done = cli(command, bad, cwd=repo)
        assert done.returncode == 2, (command, done.stderr)
        assert bad in done.stderr


def test_logs_of_a_run_not_started_answers_at_once(repo: Path) -> None:
    files = RunFiles(repo / "work_dirs" / ".slurm_alloc.json")
    record = OwnerRecord.new("r0123456789ab", Owner.FOREGROUND, mode="persistent",
                             spec_path="spec.json", spec={})
    files.write_owner(record)
    done = cli("logs", "r0123456789ab", cwd=repo, timeout=10)
    assert done.returncode == 0 and "no log yet" in done.stderr
    assert cli("runs", cwd=repo).stdout.splitlines()[1].split()[:2] == [
        "r0123456789ab", "starting"]


def test_an_owner_record_or_report_planted_as_a_link_is_not_read(tmp_path: Path) -> None:
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    victim = tmp_path / "victim.json"
    record = OwnerRecord.new("r0123456789ab", Owner.FOREGROUND, mode="persistent",
                             spec_path="x", spec={})
    victim.write_bytes(record.to_json())
    files.owner_path("r0123456789ab").symlink_to(victim)
    assert files.owner("r0123456789ab") is None
    assert files.owners() == []


def test_a_run_whose_owner_died_after_its_script_ended_is_judged_as_live(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    """The owner record keeps the script's exit code the moment it ends: a verdict
    rebuilt after the owner died before judging equals the live one."""
    import attrs

    from slurm_fsm.detach import find, settle

    spec = make_spec()
    fake = FakeCluster()
    executor = Executor(spec, fake)
    live = executor.run()
    files = RunFiles(spec.state_path)
    record = files.owner(executor.run_id)
    assert record is not None and record.exit_code == 0  # kept when the script ended
    # the same run, its owner dead (a pid that is gone) before it judged: no report
    dead = subprocess.Popen(["true"])
    dead.wait()
    files.report_path(executor.run_id).unlink()
    files.write_owner(attrs.evolve(record, phase=RunPhase.ENDED, pid=dead.pid))
    saved = settle(find(spec.repo_root, executor.run_id))
    assert saved is not None and saved.source == "rebuilt"
    rebuilt = saved.report
    assert (rebuilt.status, rebuilt.exit_code, rebuilt.allocation_id) == (
        live.status, live.exit_code, live.allocation_id)
    assert {k: v for k, v in rebuilt.metrics.items() if k != "accounting_source"} == {
        k: v for k, v in live.metrics.items() if k != "accounting_source"}
    assert any("its script had ended (exit code 0)" in n for n in rebuilt.notes)


def test_the_oldest_finished_runs_files_go_beyond_the_kept_number(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_fsm import runowner
    from slurm_fsm.report import Report, Status
    from slurm_fsm.runowner import OwnedRun

    monkeypatch.setattr(runowner, "KEEP_RUNS", 3)
    files = RunFiles(tmp_path / ".slurm_alloc.json")
    ids = [f"r{i:012x}" for i in range(5)]
    for n, run_id in enumerate(ids):
        owned = OwnedRun(files, run_id, Owner.FOREGROUND, spec_path="s")
        assert owned.begin(mode="persistent", spec={}) == []
        assert owned.record is not None
        owned.record = attrs.evolve(owned.record, since=f"2026-01-01T00:00:0{n}+00:00")
        files.write_owner(owned.record)
        assert owned.save(Report(status=Status.PASSED, task_type="custom",
                                 mode="persistent")) is None
    assert [r.run_id for r in files.owners()] == ids[2:]
    assert files.report(ids[0]) is None and files.report(ids[4]) is not None


def test_a_stop_after_the_script_ended_is_judged_from_the_job_not_cancelled(
        make_spec: SpecFactory) -> None:
    """The kill-point campaign: ``slurm-fsm cancel`` reached a supervisor after its
    script had ended but before it judged, and a passed job was reported CANCELLED. A
    stop then cancels nothing of the job: it is judged from its exit code and log."""
    spec = make_spec()
    executor = Executor(spec, FakeCluster())
    live = executor.run()
    stopped = executor.interrupted_report("stopped by SIGTERM")
    assert (stopped.status, stopped.exit_code) == (live.status, live.exit_code)
    assert live.status.name == "PASSED"
    assert any("stopped by SIGTERM after the script had ended (exit code 0)" in n
               for n in stopped.notes)


def test_a_script_killed_by_the_very_signal_that_stopped_the_run_is_cancelled(
        make_spec: SpecFactory) -> None:
    """The kill-point campaign (26.05): ``slurm-fsm cancel`` of an agent's run signals
    every process of the agent's step, the script's too; the script ended 143 a moment
    before the agent's own SIGTERM was handled, and the run was judged FAILED. A script
    that died of the stop's own signal was stopped by it: CANCELLED. (One that died of
    another signal, or ended by itself, is still judged from its end.)"""
    import signal as sig

    from slurm_fsm.testing import FakeScript

    spec = make_spec()
    fake = FakeCluster()
    fake.script(spec.script_path.name, FakeScript(lines=("killed",), exit_code=143))
    executor = Executor(spec, fake)
    live = executor.run()
    assert live.status.name == "FAILED"  # as the agent saw it, before its own SIGTERM
    stopped = executor.interrupted_report("stopped by SIGTERM", sig.SIGTERM)
    assert stopped.status.name == "CANCELLED", stopped.summary
    other = executor.interrupted_report("stopped by SIGINT", sig.SIGINT)
    assert other.status.name == "FAILED"  # died of SIGTERM, stopped by SIGINT


def test_the_progress_file_repeats_the_jobs_output_only_up_to_a_bound(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_fsm import supervise

    monkeypatch.setattr(supervise, "OUTPUT_LIMIT", 100)
    events = supervise._events()
    for i in range(50):
        events.output(f"line {i:04d}\n")
    out = capsys.readouterr().out
    assert "line 0000" in out and "line 0049" not in out
    assert out.count("goes on in its log only") == 1


def _checkout_on(tmp_path: Path) -> tuple[FakeCluster, str, RunFiles]:
    """A fake cluster with one allocation, and a checkout whose state file names it."""
    from slurm_fsm.state import AllocState, StateStore

    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    StateStore(files.paths.state).write(AllocState(
        job_id=job, nodelist="node01", partition="batch", account="acct", nodes=1))
    return fake, job, files


def _foreign_starting_record(files: RunFiles, run_id: str) -> OwnerRecord:
    """A supervisor's record from another login node, still in step 0 (no lease)."""
    rec = OwnerRecord.new(run_id, Owner.SUPERVISOR, mode="persistent", spec_path="s.json",
                          spec={})
    rec = attrs.evolve(rec, host="login-a-gone", pid=4242)
    files.write_owner(rec)
    return rec


def test_an_owner_on_another_host_whose_heartbeat_stopped_in_step0_is_settled(
        tmp_path: Path) -> None:
    """Before its job starts a run holds no lease step, so nothing in Slurm tells that
    its owner on another host died: before, ``wait`` waited forever. Its owner record's
    heartbeat does: stale past HEARTBEAT_STALE_S, the run is rebuilt CANCELLED."""
    from slurm_fsm.detach import find, settle
    from slurm_fsm.runowner import HEARTBEAT_STALE_S

    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    _foreign_starting_record(files, run_id)
    view = find(tmp_path, run_id)
    assert settle(view) is None  # a fresh heartbeat: it may be queued for hours
    old = time.time() - HEARTBEAT_STALE_S - 5
    os.utime(files.owner_path(run_id), (old, old))
    saved = settle(find(tmp_path, run_id))
    assert saved is not None and saved.source == "rebuilt"
    assert saved.report.status.name == "CANCELLED"
    assert any("login-a-gone" in n and "heartbeat stopped" in n
               for n in saved.report.notes), saved.report.notes


def test_a_live_owner_keeps_its_record_touched(tmp_path: Path) -> None:
    from slurm_fsm.runowner import OwnedRun

    files = RunFiles(tmp_path / ".slurm_alloc.json")
    owned = OwnedRun(files, "r0123456789ab", Owner.SUPERVISOR, spec_path="s")
    assert owned.begin(mode="persistent", spec={}) == []
    old = time.time() - 1000
    os.utime(files.owner_path("r0123456789ab"), (old, old))
    owned._beat(interval_s=0.05)  # a second beat, quicker than HEARTBEAT_S
    until("the record touched", lambda: (files.heartbeat_age("r0123456789ab") or 1e9) < 60,
          timeout=10)


def _as_if_its_owner_died_running(files: RunFiles, run_id: str) -> None:
    """A finished run's files as if its owner had died while the script ran: no report,
    the record RUNNING, its pid one that has exited."""
    record = files.owner(run_id)
    assert record is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    files.report_path(run_id).unlink()
    files.write_owner(attrs.evolve(record, phase=RunPhase.RUNNING, exit_code=None,
                                   pid=dead.pid))


@pytest.mark.parametrize("status, want", [("0\n", "PASSED"), (None, "CANCELLED")])
def test_a_script_that_ended_just_before_its_owner_died_is_judged_by_its_guards_status(
        make_spec: SpecFactory, tmp_path: Path, status: str | None, want: str) -> None:
    """Issue 39 (c): the agent was killed about 35 ms after its script exited, before it
    wrote that the script ended (its record still RUNNING, the log complete): rebuilt
    CANCELLED though the live verdict was PASSED. The script's guard now writes the
    exit status beside the run's record as the script ends; the rebuild judges by it.
    Without it (the guard was stopped: the script outlived its owner), CANCELLED."""
    from slurm_fsm.detach import find, settle

    spec = make_spec()
    fake = FakeCluster()
    executor = Executor(spec, fake)
    live = executor.run()
    assert live.status.value == "PASSED"
    files = RunFiles(spec.state_path)
    _as_if_its_owner_died_running(files, executor.run_id)
    if status is not None:
        files.status_path(executor.run_id).write_text(status)
    saved = settle(find(spec.repo_root, executor.run_id))
    assert saved is not None and saved.source == "rebuilt"
    assert saved.report.status.value == want, saved.report.notes
    if status is not None:
        assert saved.report.exit_code == live.exit_code
        assert any("exit code 0 as its guard wrote it" in n for n in saved.report.notes)


@pytest.mark.parametrize("task", [False, True])
def test_a_dead_host_s_run_whose_lease_step_never_had_a_task_is_settled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: bool) -> None:
    """Issue 39 (b), the reader's side: login node A died between its lease ``srun``'s
    step creation and the task's launch. Slurm lists the lease step until the
    allocation ends, so ``wait``/``report`` took the run for alive and waited. Its
    owner's silence (heartbeat stale) and Slurm's word that no task of the step runs
    (``sstat``) tell: rebuilt, the step cancelled (the step alone). A silent owner whose
    lease task runs (a paused one) is not: its run may go on."""
    from slurm_fsm import detach
    from slurm_fsm.detach import find, settle
    from slurm_fsm.lease import lease_name
    from slurm_fsm.runowner import HEARTBEAT_STALE_S

    monkeypatch.setattr(detach, "LEASE_GONE_GRACE_S", 0.0)
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    lease = lease_name(run_id, time.time() + 3600)
    step: str | None = None
    if task:
        fake.start_lease(job, lease)
    else:
        step = fake.step_without_task(job, lease)
    rec = attrs.evolve(_foreign_starting_record(files, run_id), lease=lease,
                       allocation_id=job, phase=RunPhase.RUNNING)
    files.write_owner(rec)
    old = time.time() - HEARTBEAT_STALE_S - 5
    os.utime(files.owner_path(run_id), (old, old))
    saved = settle(find(tmp_path, run_id), fake)
    if task:
        assert saved is None and fake.jobs[job].steps  # a paused owner's run goes on
        return
    assert saved is not None and saved.source == "rebuilt", saved
    assert saved.report.status.name == "CANCELLED"
    assert step is not None and step.split(".")[1] not in fake.jobs[job].steps
    assert fake.jobs[job].state.is_running  # the step alone


@pytest.mark.parametrize("agent_step", [False, True])
def test_a_run_whose_host_died_after_its_lease_before_its_job_is_settled_by_the_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_step: bool) -> None:
    """Issue 39's campaign (24.11, a ``node`` point 2.5 s into the run): login node A
    died after its supervisor took the run's lease and before the job started. Its
    record named no lease yet, so only the heartbeat told (after HEARTBEAT_STALE_S).
    The record names the lease as soon as it is held: the lease's end settles the run
    at once. Unless the run's agent step is listed: the agent may hold the run now."""
    from slurm_fsm import detach
    from slurm_fsm.detach import find, settle
    from slurm_fsm.lease import lease_name
    from slurm_fsm.slurmcli import AGENT_STEP_PREFIX

    monkeypatch.setattr(detach, "LEASE_GONE_GRACE_S", 0.0)
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    run_id = "r0123456789ab"
    if agent_step:
        fake.start_lease(job, AGENT_STEP_PREFIX + run_id)
    rec = attrs.evolve(_foreign_starting_record(files, run_id), allocation_id=job,
                       lease=lease_name(run_id, time.time() + 3600))  # its step: gone
    files.write_owner(rec)
    saved = settle(find(tmp_path, run_id), fake)  # a fresh heartbeat
    if agent_step:
        assert saved is None
        return
    assert saved is not None and saved.source == "rebuilt", saved
    assert saved.report.status.name == "CANCELLED"


def test_the_owner_record_names_the_lease_as_soon_as_it_is_held(
        make_spec: SpecFactory) -> None:
    """The writer's side of the test above: when the run is handed over (after its lease
    is taken, before its job starts), its owner record already names the allocation and
    the lease."""
    spec = make_spec()
    fake = FakeCluster()
    executor = Executor(spec, fake, clock=fake.clock)
    seen: list[OwnerRecord | None] = []

    def hand(alloc: object) -> str:
        seen.append(executor.owned.files.owner(executor.owned.run_id))
        return "no agent in this test"

    executor.hand_over = hand  # type: ignore[assignment]
    report = executor.run()
    assert report.status.name == "PASSED", report.summary
    (rec,) = seen
    assert rec is not None and rec.phase is RunPhase.STARTING
    assert rec.allocation_id == report.allocation_id and rec.lease.startswith("fsm-lease.")


def test_a_silent_owner_s_run_settled_in_step0_leaves_no_lease_step_of_its_own(
        tmp_path: Path) -> None:
    """Issue 39's 24.11 campaign: login node A died 0.65 s after its run's supervisor
    asked for its lease: slurmctld made the step (``fsm-lease.<run id>...``), the task
    never ran, and the record named no lease yet. The run was settled by its heartbeat,
    but the step stayed listed through 18 later points (and every ``squeue -s``). The
    run settled in step 0 now cancels the steps named for it on the checkout's
    allocation (the step alone); no other step is touched."""
    from slurm_fsm.detach import find, settle
    from slurm_fsm.lease import lease_name
    from slurm_fsm.runowner import HEARTBEAT_STALE_S

    fake, job, files = _checkout_on(tmp_path)
    run_id = "r0123456789ab"
    ghost = fake.step_without_task(job, lease_name(run_id, time.time() + 3600))
    other = fake.step_without_task(job, lease_name("rba9876543210", time.time() + 3600))
    _foreign_starting_record(files, run_id)
    old = time.time() - HEARTBEAT_STALE_S - 5
    os.utime(files.owner_path(run_id), (old, old))
    saved = settle(find(tmp_path, run_id), fake)
    assert saved is not None and saved.report.status.name == "CANCELLED"
    steps = fake.jobs[job].steps
    assert ghost.split(".")[1] not in steps and other.split(".")[1] in steps
    assert fake.jobs[job].state.is_running  # the step alone
    assert any("fsm-lease." + run_id in n for n in saved.report.notes), saved.report.notes


def test_a_dead_host_s_agent_step_that_never_had_a_task_does_not_keep_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of the lease-held record: login node A died as its supervisor's agent step
    was made (the step's task never launched), its lease gone. The listed agent step
    kept the run forever (no verdict until the allocation's end). A silent owner's agent
    step with no task is cancelled and the run settled; one whose task runs keeps it."""
    from slurm_fsm import detach
    from slurm_fsm.detach import find, settle
    from slurm_fsm.lease import lease_name
    from slurm_fsm.runowner import HEARTBEAT_STALE_S
    from slurm_fsm.slurmcli import AGENT_STEP_PREFIX

    monkeypatch.setattr(detach, "LEASE_GONE_GRACE_S", 0.0)
    for task in (True, False):
        fake = FakeCluster()
        job = fake.make_job("alloc", fake.user).job_id
        files = RunFiles(tmp_path / f"t{task}" / "work_dirs" / ".slurm_alloc.json")
        run_id = "r0123456789ab"
        if task:
            fake.start_lease(job, AGENT_STEP_PREFIX + run_id)
            agent = next(iter(fake.jobs[job].steps))
        else:
            agent = fake.step_without_task(job, AGENT_STEP_PREFIX + run_id).split(".")[1]
        rec = attrs.evolve(_foreign_starting_record(files, run_id), allocation_id=job,
                           lease=lease_name(run_id, time.time() + 3600))  # gone
        files.write_owner(rec)
        old = time.time() - HEARTBEAT_STALE_S - 5
        os.utime(files.owner_path(run_id), (old, old))
        saved = settle(find(tmp_path / f"t{task}", run_id), fake)
        if task:
            assert saved is None and agent in fake.jobs[job].steps  # the agent may hold it
        else:
            assert saved is not None and saved.report.status.name == "CANCELLED"
            assert agent not in fake.jobs[job].steps  # the step alone
            assert fake.jobs[job].state.is_running


def test_a_step_named_for_a_silent_run_whose_task_runs_is_left_alone(
        tmp_path: Path) -> None:
    """Review: a run settled in step 0 cancelled every step named for it, also one whose
    task runs (an owner paused past HEARTBEAT_STALE_S, its lease just taken). Only a step
    with no task is cancelled; one whose task runs is left, and the report says so."""
    from slurm_fsm.detach import find, settle
    from slurm_fsm.lease import lease_name
    from slurm_fsm.runowner import HEARTBEAT_STALE_S

    fake, job, files = _checkout_on(tmp_path)
    run_id = "r0123456789ab"
    fake.start_lease(job, lease_name(run_id, time.time() + 3600))  # its task runs
    (live,) = fake.jobs[job].steps
    _foreign_starting_record(files, run_id)
    old = time.time() - HEARTBEAT_STALE_S - 5
    os.utime(files.owner_path(run_id), (old, old))
    saved = settle(find(tmp_path, run_id), fake)
    assert saved is not None
    assert live in fake.jobs[job].steps
    assert any("left: its task runs" in n for n in saved.report.notes), saved.report.notes


@pytest.mark.parametrize(("exit_code", "want"), [(143, "CANCELLED"), (1, "CANCELLED"),
                                                 (0, "PASSED")])
def test_a_cancel_asked_before_the_judge_is_the_verdict_whoever_judges(
        make_spec: SpecFactory, exit_code: int, want: str) -> None:
    """The kill-point campaign (22.05, run r59157e415c6e; 26.05 before): ``slurm-fsm
    cancel`` of an agent's run, and the run was judged FAILED, exit code 143: the
    script died of the cancel before its owner learned of it. A cancel is now written
    beside the run (``RunFiles.ask_cancel``) before any process is signalled, and every
    judge reads it: a run whose cancel was asked and whose script did not pass is
    CANCELLED, live or rebuilt. A script that passed ran to its end: PASSED."""
    from slurm_fsm.detach import find, settle
    from slurm_fsm.testing import FakeScript

    spec = make_spec()
    fake = FakeCluster()
    fake.script(spec.script_path.name, FakeScript(lines=("3 passed in 0.5s",),
                                                  exit_code=exit_code))
    files = RunFiles(spec.state_path)

    class AskWhileItRuns(Events):
        def output(self, text: str) -> None:  # the script runs: the cancel comes
            files.ask_cancel(executor.run_id, "slurm-fsm cancel (pid 1 on h)")

    executor = Executor(spec, fake, events=AskWhileItRuns())
    live = executor.run()
    assert live.status.value == want, live.summary
    if want == "CANCELLED":
        assert "slurm-fsm cancel (pid 1 on h)" in live.summary
    # the same verdict when it is rebuilt from the guard's status
    _as_if_its_owner_died_running(files, executor.run_id)
    files.status_path(executor.run_id).write_text(str(exit_code))
    saved = settle(find(spec.repo_root, executor.run_id))
    assert saved is not None and saved.source == "rebuilt"
    assert saved.report.status.value == want, saved.report.summary


def test_cancel_writes_the_ask_before_it_signals_the_owner(repo: Path) -> None:
    run_id = detach(repo)
    _script_pid(repo, run_id)
    files = RunFiles(repo / "work_dirs" / ".slurm_alloc.fake.json")
    assert files.cancel_asked(run_id) is None
    assert cli("cancel", run_id, cwd=repo).returncode == 0
    asked = files.cancel_asked(run_id)
    assert asked is not None and "slurm-fsm cancel" in asked
    report = attach(run_id, repo).result(60)
    assert report.status.name == "CANCELLED"


def test_a_cancel_asked_from_a_host_that_cannot_signal_the_owner_stops_the_run(
        repo: Path) -> None:
    """``slurm-fsm cancel`` on another login node than a supervisor's (no agent:
    ``SLURM_FSM_AGENT=off``, or no slurm_fsm on the nodes) could only say "cancel it
    there". It now writes the ask untold; the owner looks for one every
    :data:`~slurm_fsm.runowner.CANCEL_POLL_S` and stops as a local cancel stops it."""
    run_id = detach(repo)
    script = _script_pid(repo, run_id)
    files = RunFiles(repo / "work_dirs" / ".slurm_alloc.fake.json")
    files.ask_cancel(run_id, "slurm-fsm cancel (pid 7 on login2)", told=False)
    report = attach(run_id, repo).result(60)
    assert report.status.name == "CANCELLED", report.summary
    assert "slurm-fsm cancel (pid 7 on login2) asked" in report.summary
    until("the script stopped", lambda: _gone(script))


def test_cancel_of_an_owner_on_another_host_asks_it_instead_of_refusing(
        tmp_path: Path) -> None:
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    record = OwnerRecord.new("r0123456789ab", Owner.SUPERVISOR, mode="persistent",
                             spec_path="spec.json", spec={}, progress="")
    files.write_owner(attrs.evolve(record, host="login-elsewhere", pid=4242,
                                   phase=RunPhase.RUNNING))
    said = attach("r0123456789ab", tmp_path).cancel()
    assert "asked" in said and "login-elsewhere" in said, said
    assert files.cancel_untold("r0123456789ab")
    files.ask_cancel("r0123456789ab", "x", told=True)
    assert not files.cancel_untold("r0123456789ab")


def _elsewhere(files: RunFiles, run_id: str = "r0123456789ab", **over: Any) -> None:
    """A run's owner record as if its owner ran on another login node."""
    record = OwnerRecord.new(run_id, Owner.SUPERVISOR, mode="persistent",
                             spec_path="spec.json", spec={}, progress="")
    files.write_owner(attrs.evolve(record, **{"host": "login-elsewhere", "pid": 4242,
                                              "phase": RunPhase.RUNNING, **over}))


def test_an_ask_after_the_script_ended_is_not_the_runs_verdict(tmp_path: Path) -> None:
    """Review: an ask that came after the script had ended by itself turned its FAILED
    verdict CANCELLED. The live judge reads the ask as it was at the script's end; a
    rebuild, only an ask older than the end the script's guard wrote."""
    from slurm_fsm.runowner import OwnedRun

    files = RunFiles(tmp_path / ".slurm_alloc.json")
    late = OwnedRun(files, "r0123456789ab", Owner.FOREGROUND, spec_path="s")
    late.begin(mode="persistent", spec={})
    late.script_ended(1)
    files.ask_cancel("r0123456789ab", "someone")
    assert late.cancel_asked() is None
    early = OwnedRun(files, "r0123456789ac", Owner.FOREGROUND, spec_path="s")
    early.begin(mode="persistent", spec={})
    files.ask_cancel("r0123456789ac", "someone")
    early.script_ended(143)
    assert early.cancel_asked() == "someone"
    # the rebuild: by the order of the ask and the guard's status
    files.status_path("r0123456789ac").write_text("143")
    for ask_at, status_at, want in ((100, 200, "someone"), (300, 200, None)):
        os.utime(files.cancel_path("r0123456789ac"), (ask_at, ask_at))
        os.utime(files.status_path("r0123456789ac"), (status_at, status_at))
        assert files.cancel_asked_before("r0123456789ac") == want
    files.status_path("r0123456789ac").unlink()  # stopped, not ended by itself
    assert files.cancel_asked_before("r0123456789ac") == "someone"


def test_a_new_run_given_an_old_run_id_drops_its_ask(tmp_path: Path) -> None:
    from slurm_fsm.runowner import OwnedRun

    files = RunFiles(tmp_path / ".slurm_alloc.json")
    files.ask_cancel("r0123456789ab", "long ago", told=False)
    OwnedRun(files, "r0123456789ab", Owner.FOREGROUND, spec_path="s").begin(
        mode="persistent", spec={})
    assert files.cancel_asked("r0123456789ab") is None
    files.ask_cancel("r0123456789ab", "its supervisor's", told=True)
    OwnedRun(files, "r0123456789ab", Owner.AGENT, spec_path="s").begin(
        mode="persistent", spec={})  # the agent keeps its supervisor's ask
    assert files.cancel_asked("r0123456789ab") == "its supervisor's"


@pytest.mark.parametrize("case", ["ended", "silent"])
def test_cancel_asks_nothing_of_a_run_that_ended_or_whose_owner_is_gone(
        tmp_path: Path, case: str) -> None:
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    if case == "ended":
        _elsewhere(files, phase=RunPhase.ENDED, exit_code=1)
    else:
        _elsewhere(files)
        old = time.time() - 1000
        os.utime(files.owner_path("r0123456789ab"), (old, old))
    said = attach("r0123456789ab", tmp_path).cancel()
    assert ("script has ended" if case == "ended" else "gone already") in said, said
    assert files.cancel_asked("r0123456789ab") is None


def test_an_ask_nobody_could_be_told_of_is_withdrawn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: an agent that could not be told (Slurm not answering, a backend that
    cannot reach it) left a "told" ask, and the run's later failure was CANCELLED."""
    from slurm_fsm import detach as detach_module

    monkeypatch.setattr(detach_module, "backend_for", lambda _files: FakeCluster())
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    _elsewhere(files, owner=Owner.AGENT, allocation_id="5")
    with pytest.raises(SlurmFsmError, match="cannot be told from here"):
        attach("r0123456789ab", tmp_path).cancel()
    assert files.cancel_asked("r0123456789ab") is None


def test_an_untold_ask_stops_the_main_thread_only_where_it_handles_sigterm() -> None:
    """Review: a library's run (no SIGTERM handler) was stopped as by Ctrl-C and saved
    no report, so ``wait`` on another host waited for ever. Only a process that handles
    SIGTERM (the CLI, a supervisor, an agent) is stopped, and not once its run ends."""
    import threading

    from slurm_fsm.runowner import _stop_main

    class Stop(BaseException):
        pass

    def stop_in_a_thread(ending: threading.Event) -> None:
        thread = threading.Thread(target=_stop_main, args=(ending,))
        thread.start()
        thread.join()
        time.sleep(0.2)  # a pending handler runs here

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    stop_in_a_thread(threading.Event())  # nothing happens
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Stop()))
    try:
        ended = threading.Event()
        ended.set()
        stop_in_a_thread(ended)  # nothing: the run is ending
        with pytest.raises(Stop):
            stop_in_a_thread(threading.Event())
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_cancel_of_a_one_shot_run_owned_elsewhere_cancels_its_batch_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot run's job is a batch job Slurm knows: from another login node than
    its owner, ``cancel`` cancels that job (its owner judges it from accounting)."""
    from slurm_fsm import detach as detach_module

    fake = FakeCluster()
    cancelled: list[tuple[str, str | None]] = []
    fake.cancel = lambda job_id, step_id=None: cancelled.append((job_id, step_id))  # type: ignore[method-assign]
    monkeypatch.setattr(detach_module, "backend_for", lambda _files: fake)
    files = RunFiles(tmp_path / "work_dirs" / ".slurm_alloc.json")
    _elsewhere(files, mode="one-shot", job_id="77")
    said = attach("r0123456789ab", tmp_path).cancel()
    assert "batch job 77 was cancelled" in said, said
    assert cancelled == [("77", None)]
    assert not files.cancel_untold("r0123456789ab")
