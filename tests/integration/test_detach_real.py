"""Runs that outlive the shell (issue 39) on the real cluster: ``run --detach`` returns
while the job's step runs in the allocation, owned by its agent on the allocation's
node; another login node (an emulated one: its own host name and pid namespace) waits
for it and gets its verdict; the login node that started it can die whole and the run
still ends with its live verdict; an agent or supervisor killed with ``kill -9`` leaves
no step running and a rebuilt report; where the agent cannot run, the supervisor runs
the job and says why. The fake-cluster twin of each is in tests/test_detach.py (the
fake has no agent: its supervisor runs the job)."""

from __future__ import annotations

import contextlib
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
from slurm_fsm_dev.loginnodes import on_node

from .helpers import JobNames, job_state, spec_dict, steps, until

pytestmark = pytest.mark.slurm

#: the job's own step waits for a gate file: "the command returned while the job ran"
#: is a fact the test makes
GATED = ("#!/bin/bash\necho \"script pid $$\"\n"
         "srun --overlap -n1 bash -c 'until [ -e {gate} ]; do sleep 0.1; done'\n"
         "echo end\n")


def _env(cluster: ClusterInfo, **extra: str) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf), **extra}


#: a detached run stays with its supervisor on the login node (no agent)
NO_AGENT = {"SLURM_FSM_AGENT": "off"}


def _cli(cluster: ClusterInfo, *args: str, cwd: Path, timeout: float = 120,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,
                          env=_env(cluster, **(env or {})), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _spec(cluster: ClusterInfo, tmp_path: Path, name: str) -> Path:
    (tmp_path / "job.slurm").write_text(GATED.format(gate=tmp_path / "gate"))
    data = spec_dict(cluster, tmp_path, name, success_patterns=["end"])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    (tmp_path / "repo").mkdir(exist_ok=True)
    return path


def _job_steps(alloc: str) -> list[str]:
    """The allocation's steps that are neither leases nor a run's agent."""
    return [s for s, n in steps(alloc).items() if not n.startswith(("fsm-lease.",
                                                                     "fsm-agent."))]


def _detach(cluster: ClusterInfo, spec: Path, repo: Path, owner: str = "agent",
            env: dict[str, str] | None = None) -> dict[str, object]:
    done = _cli(cluster, "run", str(spec), "--detach", "--json", "--quiet", cwd=repo,
                env=env)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    assert doc["state"] == "running" and doc["owner"] == owner, doc
    if owner == "agent":  # on the allocation's node, as its own step
        assert doc["host"] in cluster.nodes, doc
        assert "--agent" in Path(f"/proc/{doc['pid']}/cmdline").read_text(), doc
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


@pytest.mark.parametrize("owner", ["agent", "supervisor"])
def test_a_killed_owner_leaves_no_step_and_a_rebuilt_report(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, owner: str) -> None:
    """The run's owner (its agent in the allocation; its supervisor where there is no
    agent) killed with kill -9: its script stops with it, nothing of it is left
    running, and the verdict is rebuilt."""
    spec = _spec(local_cluster, tmp_path, names.new("detachk9"))
    repo = tmp_path / "repo"
    try:
        doc = _detach(local_cluster, spec, repo, owner,
                      env=NO_AGENT if owner == "supervisor" else None)
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


ONE_SHOT = ("#!/bin/bash\n#SBATCH --time=00:05:00\necho \"script pid $$\"\n"
            "until [ -e {gate} ]; do sleep 0.1; done\necho '7 passed in 1.00s'\n")


def _one_shot_spec(cluster: ClusterInfo, tmp_path: Path, name: str) -> Path:
    (tmp_path / "oneshot.slurm").write_text(ONE_SHOT.format(gate=tmp_path / "gate"))
    data = spec_dict(cluster, tmp_path, name, script_path=str(tmp_path / "oneshot.slurm"),
                     persistent_mode=False, workflow_type="pytest",
                     success_patterns=["passed"], log_file_pattern="oneshot_%j.out")
    path = tmp_path / "oneshot.json"
    path.write_text(json.dumps(data))
    (tmp_path / "repo").mkdir(exist_ok=True)
    return path


def test_a_one_shot_job_outlives_its_killed_supervisor_and_is_judged_as_live(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """A batch job outlives the process that submitted it: the rebuilt verdict waits for
    the job's end and equals the live one (status, exit code, metrics)."""
    spec = _one_shot_spec(local_cluster, tmp_path, names.new("oneshotk9", ""))
    repo = tmp_path / "repo"
    (tmp_path / "gate").touch()
    live = json.loads(_cli(local_cluster, "run", str(spec), "--json", "--quiet",
                           cwd=repo).stdout)
    assert live["status"] == "PASSED", live
    (tmp_path / "gate").unlink()
    doc = _detach(local_cluster, spec, repo, "supervisor")  # a batch job needs no agent
    run_id, job = str(doc["run_id"]), str(doc["job_id"])
    until("the batch job running", lambda: True if job_state(job) == "RUNNING" else None, 60)
    os.kill(int(str(doc["pid"])), signal.SIGKILL)
    assert job_state(job) == "RUNNING"  # it outlives its supervisor
    early = _cli(local_cluster, "report", run_id, cwd=repo)
    assert early.returncode == 3 and "still" in early.stderr  # never before its end
    (tmp_path / "gate").touch()
    waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
    assert waited.returncode == 0, waited.stderr
    [rebuilt] = json.loads(waited.stdout)
    assert rebuilt["report_source"] == "rebuilt"
    assert (rebuilt["status"], rebuilt["exit_code"], rebuilt["metrics"]["passed"]) == (
        live["status"], live["exit_code"], live["metrics"]["passed"])
    assert rebuilt["job_id"] == job
    assert any("followed to its end" in n for n in rebuilt["notes"]), rebuilt["notes"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="emulating a login node needs unshare as root")
def test_a_run_outlives_the_login_node_that_started_it(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Node A detaches a run, then dies whole (every process at once, the ``srun`` of
    the agent's step included): the agent in the allocation goes on; this host's
    ``wait`` gets the live PASSED verdict once the job ends, and nothing of the run is
    left running."""
    from slurm_fsm_dev.loginnodes import children

    spec = _spec(local_cluster, tmp_path, names.new("nodegone"))
    repo = tmp_path / "repo"
    node_a = on_node(LOGIN_NODES[0], ["run", str(spec), "--detach", "--json", "--quiet"],
                     env=_env(local_cluster), linger_s=600)
    try:
        doc = until("node A's run, with its agent", lambda: next(
            (r for r in json.loads(_cli(local_cluster, "runs", "--json", cwd=repo).stdout)
             if r["state"] == "running" and r["owner"] == "agent"), None), 120)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        assert doc["host"] in local_cluster.nodes, doc
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        (init,) = children().get(node_a.pid, [])
        os.kill(init, signal.SIGKILL)  # node A, whole
        node_a.communicate(timeout=30)
        (tmp_path / "gate").touch()
        waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
        assert waited.returncode == 0, waited.stderr
        [report] = json.loads(waited.stdout)
        assert (report["status"], report["report_source"]) == ("PASSED", "live"), report
        assert report["allocation_id"] == alloc
        assert any(n.startswith(f"run by its agent on {doc['host']}") and
                   f"a step of allocation {alloc}" in n for n in report["notes"]), report
        until("no step of the run left", lambda: True if not steps(alloc) else None, 30)
        assert job_state(alloc) == "RUNNING"  # kept for the next run
    finally:
        if node_a.poll() is None:
            node_a.kill()
            node_a.communicate(timeout=30)
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(root: int) -> list[int]:
    from slurm_fsm_dev.loginnodes import children

    tree, found, todo = children(), [], [root]
    while todo:
        kids = tree.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="emulating a login node needs unshare as root")
def test_a_run_outlives_the_end_of_its_login_session(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Node A detaches a run; once its agent holds it, every process node A has left
    gets SIGTERM, then SIGKILL (what a CI runner's service stop, or logind's end of a
    session, does). Before, the agent's ``srun`` was still there on node A: SIGTERM
    made it cancel its step ("srun: forcing job termination"), the agent with it, and
    the run ended CANCELLED. Now nothing on node A holds the run: PASSED, live."""
    spec = _spec(local_cluster, tmp_path, names.new("session"))
    repo = tmp_path / "repo"
    node_a = on_node(LOGIN_NODES[0], ["run", str(spec), "--detach", "--json", "--quiet"],
                     env=_env(local_cluster), linger_s=600)
    try:
        doc = until("node A's run, with its agent", lambda: next(
            (r for r in json.loads(_cli(local_cluster, "runs", "--json", cwd=repo).stdout)
             if r["state"] == "running" and r["owner"] == "agent"), None), 120)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        until("run --detach returned on node A", lambda: True if not any(
            b"\0--detach\0" in _cmdline(p) for p in _descendants(node_a.pid)) else None, 60)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # all but the node's init (the lingering sh), as they are at each signal
            for pid in _descendants(node_a.pid)[1:]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(2)
        (tmp_path / "gate").touch()
        waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
        [report] = json.loads(waited.stdout)
        assert (report["status"], report["report_source"]) == ("PASSED", "live"), report
        assert waited.returncode == 0, waited.stderr
        until("no step of the run left", lambda: True if not steps(alloc) else None, 30)
        assert job_state(alloc) == "RUNNING"  # kept for the next run
    finally:
        from slurm_fsm_dev.loginnodes import children

        for init in children().get(node_a.pid, []):  # the node ends whole: no pipe held
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        try:
            node_a.communicate(timeout=30)
        finally:
            for stream in (node_a.stdout, node_a.stderr):
                if stream is not None:
                    stream.close()
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


def test_where_the_agent_cannot_run_the_supervisor_runs_the_job_and_says_why(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """A node where slurm_fsm cannot start (here: every Python started inside a step
    exits at once, as one without the checkout's venv would): the supervisor on the
    login node runs the job itself, and the report says why."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('SLURM_STEP_ID'):\n"
        "    os.write(2, b'no slurm_fsm on this node\\n'); os._exit(1)\n")
    spec = _spec(local_cluster, tmp_path, names.new("noagent"))
    repo = tmp_path / "repo"
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH"))
                                 if p)
    try:
        doc = _detach(local_cluster, spec, repo, "supervisor",
                      env={"PYTHONPATH": pythonpath})
        (tmp_path / "gate").touch()
        done = _cli(local_cluster, "wait", str(doc["run_id"]), "--json", cwd=repo,
                    timeout=180)
        [report] = json.loads(done.stdout)
        assert report["status"] == "PASSED", report
        assert any(n.startswith("run by its supervisor on ") and "login node" in n
                   for n in report["notes"]), report["notes"]
        assert any("agent on" in w and "ended before it took the run over" in w
                   and "no slurm_fsm on this node" in w
                   and "the supervisor on this login node runs the job" in w
                   for w in report["warnings"]), report["warnings"]
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


def test_cancel_tells_the_agent_which_keeps_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """``slurm-fsm cancel`` of a run its agent owns (on a node, not a pid of this host):
    the agent is told through Slurm, stops the job's steps and saves the CANCELLED
    report; the allocation stays."""
    spec = _spec(local_cluster, tmp_path, names.new("agentcancel"))
    repo = tmp_path / "repo"
    try:
        doc = _detach(local_cluster, spec, repo)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        told = _cli(local_cluster, "cancel", run_id, cwd=repo)
        assert told.returncode == 0 and "agent" in told.stdout + told.stderr, told
        waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
        [report] = json.loads(waited.stdout)
        assert (report["status"], report["report_source"]) == ("CANCELLED", "live"), report
        until("no step of the run left", lambda: True if not steps(alloc) else None, 30)
        assert job_state(alloc) == "RUNNING"
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="emulating a login node needs unshare as root")
def test_cancel_from_another_login_node_stops_a_run_its_supervisor_owns(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """``slurm-fsm cancel`` on another login node than the run's supervisor (no agent):
    it cannot signal that host's pid, so it writes the ask; the supervisor looks for it
    every second, stops the job's steps and saves the CANCELLED report naming who
    asked; the allocation stays. (Before: "cancel it there".)"""
    spec = _spec(local_cluster, tmp_path, names.new("farcancel"))
    repo = tmp_path / "repo"
    try:
        doc = _detach(local_cluster, spec, repo, "supervisor", env=NO_AGENT)
        run_id, alloc = str(doc["run_id"]), str(doc["allocation_id"])
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        far = on_node(LOGIN_NODES[1], ["cancel", run_id, "--repo", str(repo)],
                      env=_env(local_cluster))
        out, err = far.communicate(timeout=120)
        assert far.returncode == 0, err
        assert "asked its supervisor" in out, out
        waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
        [report] = json.loads(waited.stdout)
        assert (report["status"], report["report_source"]) == ("CANCELLED", "live"), report
        assert f"on {LOGIN_NODES[1]}) asked" in report["summary"], report["summary"]
        until("no step of the run left", lambda: True if not steps(alloc) else None, 30)
        assert job_state(alloc) == "RUNNING"
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="emulating a login node needs unshare as root")
def test_without_an_agent_a_run_whose_login_node_died_gets_a_verdict_elsewhere(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Where no agent runs (``SLURM_FSM_AGENT=off``), the run's owner on another host
    cannot be checked by pid: its lease step, which ends with its host, tells. Node A
    detaches a run, then dies whole; this host's ``wait`` gets a rebuilt CANCELLED
    verdict naming the lost owner, and no step of the run is left."""
    from slurm_fsm_dev.loginnodes import children

    spec = _spec(local_cluster, tmp_path, names.new("nodelost"))
    repo = tmp_path / "repo"
    node_a = on_node(LOGIN_NODES[0], ["run", str(spec), "--detach", "--json", "--quiet"],
                     env=_env(local_cluster, **NO_AGENT), linger_s=600)
    try:
        run_id = until("node A's run", lambda: next(
            (r["run_id"] for r in json.loads(_cli(local_cluster, "runs", "--json",
                                                  cwd=repo).stdout)
             if r["state"] == "running" and r["allocation_id"]), None), 120)
        alloc = json.loads(_cli(local_cluster, "runs", "--json", cwd=repo).stdout)[0][
            "allocation_id"]
        until("the job's step running", lambda: True if _job_steps(alloc) else None, 60)
        # the run's record names its step's srun (a step started just before its host
        # died, whose srun the run had not seen yet, cannot be proven the run's)
        from slurm_fsm.subprocess_backend import SubprocessBackend

        (job_step,) = [s for s in SubprocessBackend().step_details(alloc)
                       if not s.name.startswith("fsm-lease.")]
        record = repo / "work_dirs" / f".slurm_run.{run_id}.json"
        until("the record naming the step's srun", lambda: True if job_step.srun_pid in
              json.loads(record.read_text())["srun_pids"] else None, 60)
        (init,) = children().get(node_a.pid, [])
        os.kill(init, signal.SIGKILL)  # node A, whole
        node_a.communicate(timeout=30)
        waited = _cli(local_cluster, "wait", run_id, "--json", cwd=repo, timeout=180)
        assert waited.returncode == 1, waited.stderr
        [report] = json.loads(waited.stdout)
        assert (report["status"], report["report_source"]) == ("CANCELLED", "rebuilt")
        assert any(LOGIN_NODES[0] in n and "lease step ended" in n
                   for n in report["notes"]), report["notes"]
        # reported once none of its steps runs any more: what it left was stopped
        assert _job_steps(alloc) == []
        assert any("stopped what an earlier run that died left running" in n
                   for n in report["notes"]), report["notes"]
    finally:
        if node_a.poll() is None:
            node_a.kill()
            node_a.communicate(timeout=30)
        (tmp_path / "gate").touch()
        _release(local_cluster, spec)
