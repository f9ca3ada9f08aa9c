"""Issue 26 (reliability, round 3), on the real local cluster: each fault as the
campaign reproduced it, each test failing before its fix.

- a dead run stops only what it is proven to have started: a user's own
  ``srun --jobid ... --overlap`` step and a live run whose record was deleted survive
  the run after a ``kill -9`` (item 1);
- a finished job's report never waits for the state file's lock: it comes while
  another process holds the lock; a run with ``work_dirs`` made read-only
  (``chattr +i``) under it still reports PASSED (item 2);
- a zombie orchestrator (killed, not reaped) holds no lease: ``release --no-wait``
  releases, ``status`` does not list it (item 4);
- ``release`` without a state file leaves an untagged allocation of the procedure's
  job name (item 6).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, cli_report, job_state, slurm, spec_dict, step_ids, steps, until

pytestmark = pytest.mark.slurm


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurm_fsm", *args]


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_cli(*args, "--json", "--quiet"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)




def _run(spec: Path, *extra: str, timeout: float = 180) -> dict[str, Any]:
    return cli_report(_start("run", str(spec), *extra), timeout)


def _spec(cluster: ClusterInfo, tmp_path: Path, name: str, script: str, tag: str,
          **over: Any) -> Path:
    path = tmp_path / f"{tag}.slurm"
    path.write_text(script)
    data = spec_dict(cluster, tmp_path, name, script_path=str(path),
                     work_dir=str(tmp_path / f"work-{tag}"), **over)
    spec = tmp_path / f"{tag}.json"
    spec.write_text(json.dumps(data))
    return spec


def _work_dirs(tmp_path: Path) -> Path:
    return tmp_path / "repo" / "work_dirs"


def _records(tmp_path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in _work_dirs(tmp_path).glob(".slurm_run.r????????????.json"):
        try:
            out[str(p)] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    return out


def _record_of(tmp_path: Path, pid: int) -> str | None:
    """The record file of the run whose orchestrator is ``pid``, once its script runs."""
    for path, data in _records(tmp_path).items():
        if data.get("pid") == pid and "pgid" in data.get("script", {}):
            return path
    return None


def _alloc(tmp_path: Path) -> str:
    return str(json.loads((_work_dirs(tmp_path) / ".slurm_alloc.json").read_text())["job_id"])


def _step_names(job_id: str) -> dict[str, str]:
    return steps(job_id)


# ------------------------------------------------------------------------ item 1
def test_a_users_own_step_and_a_live_run_survive_the_run_after_a_kill_9(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """kill -9 of a run: the next run stops that run's step only. The user's own
    ``srun --jobid ... --overlap`` step and the step of a live run whose record was
    deleted keep running (before: both were cancelled, "every numbered step when
    alone")."""
    name = names.new("r3own")
    dying_spec = _spec(local_cluster, tmp_path, name,
                       "#!/bin/bash\nsrun --overlap -n1 sleep 307\n", "dying")
    live_spec = _spec(local_cluster, tmp_path, name,
                      "#!/bin/bash\nsrun --overlap -n1 -J livestep sleep 12\necho end\n",
                      "live", success_patterns=["end"])
    next_spec = _spec(local_cluster, tmp_path, name,
                      "#!/bin/bash\nsrun --overlap -n1 true\necho all good\n", "next",
                      success_patterns=["all good"])
    users = None
    dying = _start("run", str(dying_spec))
    live = None
    try:
        until("the dying run's script", lambda: _record_of(tmp_path, dying.pid), 120)
        alloc = _alloc(tmp_path)
        until("the dying run's step", lambda: True if "sleep" in _step_names(alloc).values()
              else None, 30)
        users = subprocess.Popen(["srun", f"--jobid={alloc}", "--overlap", "-n1",
                                  "-J", "usersdebug", "sleep", "311"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until("the user's own step", lambda: True if "usersdebug" in _step_names(alloc)
              .values() else None, 30)
        live = _start("run", str(live_spec))
        live_record = until("the live run's script", lambda: _record_of(tmp_path, live.pid),
                            120)
        until("the live run's step", lambda: True if "livestep" in _step_names(alloc)
              .values() else None, 30)
        Path(live_record).unlink()  # the live run's record is lost

        dying.send_signal(signal.SIGKILL)
        dying.communicate(timeout=10)
        report = _run(next_spec)
        assert report["status"] == "PASSED", report
        assert report["allocation_id"] == alloc
        steps = _step_names(alloc)
        assert "usersdebug" in steps.values(), (steps, report["warnings"])
        assert users.poll() is None  # the user's srun still runs
        assert live.poll() is None and "livestep" in steps.values(), (steps, report)
        live_report = cli_report(live)
        assert live_report["status"] == "PASSED", live_report
    finally:
        for proc in (dying, live, users):
            if proc is not None and proc.returncode is None:
                proc.kill()
                proc.communicate(timeout=30)
        subprocess.run(_cli("release", str(next_spec), "--quiet"), timeout=120,
                       check=False, capture_output=True)


# ------------------------------------------------------------------------ item 3
def test_a_planted_record_never_reaches_into_another_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """A dead run's record (this unix user's file) names another allocation, with the
    id, name, ``SrunHost:Pid`` and start time of a step running there: the next run
    touches nothing of it (before: that step was cancelled)."""
    name = names.new("r3plant")
    other = names.new("r3other", suffix="")
    spec = _spec(local_cluster, tmp_path, name, "#!/bin/bash\nsrun --overlap -n1 true\n"
                 "echo all good\n", "job", success_patterns=["all good"])
    said = slurm("salloc", "--no-shell", f"--job-name={other}",
                 f"--partition={local_cluster.partition}",
                 f"--account={local_cluster.account}", "-N1", "-t", "5").stderr
    theirs = next(w for w in said.split() if w.isdigit())
    until("their allocation", lambda: True if job_state(theirs) == "RUNNING" else None, 30)
    step = subprocess.Popen(["srun", f"--jobid={theirs}", "--overlap", "-n1", "-J", "theirs",
                             "sleep", "313"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        until("their step", lambda: True if "theirs" in steps(theirs).values() else None, 30)
        line = slurm("scontrol", "-o", "show", "step", theirs).stdout
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        host, _, pid = fields["SrunHost:Pid"].rpartition(":")
        sid = fields["StepId"].split(".", 1)[1]
        planted = {
            "run_id": "r0123456789ab", "allocation": theirs, "pid": 1, "pid_ticks": -1,
            "host": host, "boot_id": "", "uid": os.getuid(),
            "since": "2000-01-01T00:00:00+00:00", "script": {}, "ended": True,
            "steps": [{"step_id": sid, "name": fields["Name"], "srun_host": host,
                       "srun_pid": int(pid), "start_time": fields["StartTime"]}],
            "srun_pids": [int(pid)],
        }
        _work_dirs(tmp_path).mkdir(parents=True, exist_ok=True)
        record = _work_dirs(tmp_path) / ".slurm_run.r0123456789ab.json"
        record.write_text(json.dumps(planted))
        record.chmod(0o600)
        report = _run(spec)
        assert report["status"] == "PASSED", report
        assert "theirs" in steps(theirs).values(), report["warnings"]
        assert step.poll() is None
        assert not record.exists()  # a record that names another allocation is dropped
    finally:
        if step.returncode is None:
            step.kill()
            step.communicate(timeout=30)
        slurm("scancel", theirs)
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=120, check=False,
                       capture_output=True)


# ------------------------------------------------------------------------ item 2
#: a 3 s job that starts its step only once the test creates ``go``
GATED_JOB = ("#!/bin/bash\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
             "srun --overlap -n1 sleep 3\necho done\n")

HOLDER = textwrap.dedent("""
    import sys, filelock, pathlib
    lock = filelock.FileLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it (or 300 s: the test's own timeout)
    pathlib.Path(sys.argv[2]).write_text("released")
    lock.release()
""")


def test_a_finished_jobs_report_never_waits_for_the_state_files_lock(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Another process takes the state file's lock while a 3 s job runs (as another
    run's step 0 or a waiting release does) and keeps it: the job's report comes while
    the lock is still held (before: the end of the job took the lock again and the
    report waited for the holder)."""
    name = names.new("r3lock")
    go = tmp_path / "go"
    spec = _spec(local_cluster, tmp_path, name, GATED_JOB.format(go=go), "job",
                 success_patterns=["done"])
    go.touch()
    warm = _run(spec)  # allocates
    assert warm["status"] == "PASSED", warm
    go.unlink()
    released = tmp_path / "released"
    run = _start("run", str(spec))
    holder = None
    try:
        until("the job's script", lambda: _record_of(tmp_path, run.pid), 60)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(_work_dirs(tmp_path) / ".slurm_alloc.json.lock"),
             str(released)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        go.touch()  # the job ends only now, while the lock is held
        report = cli_report(run, timeout=300)
        assert not released.exists(), "the report waited for the lock's holder"
        assert holder.poll() is None  # it still holds the lock
        assert report["status"] == "PASSED", report
        assert report["allocation_id"] == warm["allocation_id"]
    finally:
        if holder is not None:
            holder.communicate(input="", timeout=30)
        if run.returncode is None:
            run.kill()
            run.communicate(timeout=30)
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=120, check=False,
                       capture_output=True)


def test_work_dirs_made_read_only_under_a_job_do_not_turn_a_pass_into_bad_input(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """``work_dirs`` and its files made immutable (``chattr -R +i``: read-only even for
    root) while the job runs: the job PASSES (before: BAD_INPUT, exit 2, "nothing was
    done": the end of the job took the state file's lock again, and its lock file
    could not be opened for writing)."""
    name = names.new("r3ro")
    work_dirs = _work_dirs(tmp_path)
    spec = _spec(local_cluster, tmp_path, name,
                 f"#!/bin/bash\nchattr -R +i {work_dirs}\nsrun --overlap -n1 true\n"
                 "echo done\n", "job", success_patterns=["done"])
    try:
        report = _run(spec)
        assert report["_rc"] == 0 and report["status"] == "PASSED", report
    finally:
        subprocess.run(["chattr", "-R", "-i", str(work_dirs)], check=False, timeout=30)
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=120, check=False,
                       capture_output=True)


# ------------------------------------------------------------------------ item 4
PARENT = textwrap.dedent("""
    import subprocess, sys
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    print(child.pid, flush=True)
    sys.stdin.read()  # never reaps the child until the test closes stdin
""")


def _state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "gone"


def test_a_zombie_orchestrator_holds_no_lease(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """A run killed but not reaped by its parent (a zombie): ``status`` does not list
    it and ``release --no-wait`` releases (before: its lease counted as alive)."""
    name = names.new("r3zombie")
    spec = _spec(local_cluster, tmp_path, name,
                 "#!/bin/bash\nsrun --overlap -n1 sleep 305\n", "job")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *_cli("run", str(spec),
                                                                     "--quiet")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        until("the run's script", lambda: _record_of(tmp_path, child), 120)
        alloc = _alloc(tmp_path)
        os.kill(child, signal.SIGKILL)
        until("a zombie", lambda: True if _state_of(child) == "Z" else None, 20)
        status = subprocess.run(_cli("status", str(spec), "--json"), capture_output=True,
                                text=True, timeout=60, check=False)
        assert [j["pid"] for j in json.loads(status.stdout).get("jobs", [])] == [], \
            status.stdout
        released = subprocess.run(_cli("release", str(spec), "--no-wait", "--json"),
                                  capture_output=True, text=True, timeout=120, check=False)
        report = json.loads(released.stdout)
        assert released.returncode == 0 and report["status"] == "RELEASED", report
        assert _state_of(child) == "Z"  # still not reaped: it was judged dead as a zombie
        until("the allocation gone", lambda: True if job_state(alloc) in (
            None, "CANCELLED") else None, 30)
        assert step_ids(alloc) == []
    finally:
        parent.communicate(input="", timeout=30)
        subprocess.run(_cli("release", str(spec), "--quiet"), timeout=120, check=False,
                       capture_output=True)


# ------------------------------------------------------------------------ item 6
def test_release_without_a_state_file_leaves_an_untagged_allocation_of_our_name(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Another checkout follows the procedure by hand: an allocation of the procedure's
    job name without our tag. ``release`` here, with no state file, leaves it alone
    (before: cancelled)."""
    name = names.new("r3hand")
    spec = _spec(local_cluster, tmp_path, name, "#!/bin/bash\ntrue\n", "job")
    by_hand = slurm("salloc", "--no-shell", f"--job-name={name}",
                    f"--partition={local_cluster.partition}",
                    f"--account={local_cluster.account}", "-N1", "-t", "5").stderr
    job_id = next(w for w in by_hand.split() if w.isdigit())
    until("the allocation by hand", lambda: True if job_state(job_id) == "RUNNING" else None,
          30)
    released = subprocess.run(_cli("release", str(spec), "--json"), capture_output=True,
                              text=True, timeout=120, check=False)
    report = json.loads(released.stdout)
    assert report["status"] == "RELEASED", report
    assert job_state(job_id) == "RUNNING"
