"""The warm successor (issue 27) on the real local Slurm cluster.

Nothing here waits for an allocation's walltime: the time left is shortened with
``scontrol update TimeLimit`` (root on the local cluster). No assertion depends on how
fast Slurm grants a job: where the successor may or may not be RUNNING yet, the test
waits for it (``until``) and then asserts what must follow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_fsm.backend import AllocationRequest
from slurm_fsm.duration import Duration
from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.paths import StatePaths
from slurm_fsm.results import Status
from slurm_fsm.slurmcli import salloc_argv
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import StateStore
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm.successor import SINGLETON, read_successor
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames
from .helpers import (
    JobNames,
    job_state,
    jobs_named,
    make_spec,
    slurm,
    spec_dict,
    until,
    wait_gone,
)

pytestmark = pytest.mark.slurm


def shorten(job_id: str, limit: str) -> None:
    proc = slurm("scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit}")
    assert proc.returncode == 0, proc.stderr


def test_two_racing_singleton_requests_give_one_running_and_one_pending(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Slurm is the fence: two sallocs of one name started at once, both singleton,
    give 1 RUNNING + 1 PENDING (Dependency); the other name of the pair runs beside;
    a third allocation of the checkout never runs."""
    name = names.new("race")
    names.names.append(name + "-b")
    procs = []
    for i, job_name in enumerate((name, name, name + "-b")):
        request = AllocationRequest(
            partition=local_cluster.partition, account=local_cluster.account, nodes=1,
            time_limit=Duration.parse("00:05:00"), job_name=job_name,
            log_path=tmp_path / f"salloc{i}.log", dependency=SINGLETON)
        with open(tmp_path / f"salloc{i}.log", "wb") as log:
            procs.append(subprocess.Popen(salloc_argv(request), stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    try:
        rows = until("three jobs listed",
                     lambda: (r if len(r := jobs_named(name, local_cluster.user)) == 2
                              and jobs_named(name + "-b", local_cluster.user) else None))
        running = until("one RUNNING of the name", lambda: [
            j for j, s in jobs_named(name, local_cluster.user) if s == "RUNNING"] or None)
        assert len(running) == 1, rows
        (pending,) = [j for j, _ in jobs_named(name, local_cluster.user) if j not in running]
        reason = slurm("squeue", "-j", pending, "-h", "-o", "%T %r").stdout.split()
        assert reason == ["PENDING", "Dependency"], reason
        other = until("the -b one RUNNING", lambda: [
            j for j, s in jobs_named(name + "-b", local_cluster.user) if s == "RUNNING"] or None)
        assert len(other) == 1
        # the running one ends: only then does the pending one of its name run
        slurm("scancel", running[0])
        wait_gone(running[0])
        until("the pending one RUNNING", lambda: True if jobs_named(
            name, local_cluster.user) == [(pending, "RUNNING")] else None)
    finally:
        names.cleanup()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def test_a_hand_off_queues_a_successor_switches_to_it_and_releases_the_old_one(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("handoff")
    names.names.append(name + "-b")
    script = tmp_path / "job.slurm"
    script.write_text('#!/bin/bash\nset -e\necho "ran in allocation $SLURM_JOB_ID"\n'
                      'srun true\n')
    spec = make_spec(local_cluster, tmp_path, name, alloc_time_limit="00:30:00",
                     expected_duration_seconds=30, warm_successor=True)
    first = Executor(spec, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    old = first.allocation_id
    assert old is not None

    # the lead time is now measured (history): about 60 s + the queue wait; with 6
    # minutes left (Slurm keeps whole minutes) a successor is due (30 + lead + 300 >= 360)
    # and the job still fits (360 >= 30 + 300)
    shorten(old, "00:06:00")
    second = Executor(spec, SubprocessBackend()).run()
    assert second.status is Status.PASSED, second.render_text()
    assert second.path[:3] == ["NoState", "Validating", "QueueingSuccessor"], second.path
    succ = [j for j, _ in jobs_named(name + "-b", local_cluster.user)]
    switched = "Switching" in second.path
    if switched:  # granted at once: the job ran on it, the idle old one released
        assert second.allocation_id == succ[0]
    else:  # still pending when validated again: the job ran on the old one
        assert second.allocation_id == old
        (succ_id,) = succ
        until("the successor RUNNING", lambda: True if jobs_named(
            name + "-b", local_cluster.user) == [(succ_id, "RUNNING")] else None)
        third = Executor(spec, SubprocessBackend()).run()
        assert third.status is Status.PASSED, third.render_text()
        assert third.path[:3] == ["NoState", "Validating", "Switching"], third.path
        assert third.allocation_id == succ_id
    wait_gone(old)
    (new, state) = jobs_named(name + "-b", local_cluster.user)[0]
    assert state == "RUNNING" and jobs_named(name, local_cluster.user) == []
    named = StateStore(spec.state_path).read()
    assert named is not None and named.job_id == new  # the procedure's state file
    assert not StatePaths.for_state_file(spec.state_path).successor_state.exists()

    release = Executor(make_spec(local_cluster, tmp_path, name, alloc_time_limit="00:30:00",
                                 warm_successor=True, release_allocation=True),
                       SubprocessBackend()).run()
    assert release.status is Status.RELEASED, release.render_text()
    wait_gone(new)


def test_kill_9_of_the_run_that_started_the_warmer_leaves_a_successor_the_next_run_uses(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """The warmer is detached: the run that started it dies (kill -9) while its job runs
    on the old allocation; the successor is still imported (by the warmer, or, if the
    warmer is gone too, by the next run through 0F), and the next run uses it."""
    name = names.new("k9warm")
    names.names.append(name + "-b")
    container = cnames.new("k9warm")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nsrun true\necho started\nsleep 60\n")
    data = spec_dict(local_cluster, tmp_path, name, script_path=str(script),
                     docker_image=str(pyxis.images["busybox"]), container_name=container,
                     workflow_type="custom", skip_install=True,
                     expected_duration_seconds=30, warm_successor=True)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(data))
    spec = JobSpec.from_dict(data)
    quick = dict(data, script_path=str(tmp_path / "quick.slurm"))
    (tmp_path / "quick.slurm").write_text("#!/bin/bash\nsrun true\n")
    first = Executor(JobSpec.from_dict(quick), SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    old = first.allocation_id
    assert old is not None
    shorten(old, "00:06:00")  # due, and the job still fits (see the test above)

    dying = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec_file),
                              "--json", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record_path = StatePaths.for_state_file(spec.state_path).successor_record
    log = tmp_path / "work" / "itmodel_custom.log"
    try:
        record = until("the successor queued, its warmer started", lambda: (
            r if (r := read_successor(record_path)) is not None and r.warmer_pid else None),
            timeout=60)
        until("the run's job running", lambda: True if log.exists()
              and "started" in log.read_text() else None, timeout=60)
    finally:
        dying.send_signal(signal.SIGKILL)
        dying.wait(timeout=10)
    assert record.predecessor == old
    # the warmer outlives the run: it ends by itself (its pid goes)
    until("the warmer done", lambda: True if not _alive(record.warmer_pid) else None,
          timeout=120)
    assert len(jobs_named(name, local_cluster.user)) + len(
        jobs_named(name + "-b", local_cluster.user)) <= 2

    nxt = Executor(JobSpec.from_dict(quick), SubprocessBackend()).run()
    assert nxt.status is Status.PASSED, nxt.render_text()
    assert nxt.allocation_id == record.job_id, nxt.path
    assert "Switching" in nxt.path and "Allocating" not in nxt.path, nxt.path
    ready = read_successor(record_path)  # gone with the switch
    assert ready is None
    named = StateStore(spec.state_path).read()
    assert named is not None and named.job_id == record.job_id
    assert named.container_name == container
    wait_gone(old)  # the dead run's lease is no lease: the old one is released

    release = Executor(JobSpec.from_dict(dict(quick, release_allocation=True)),
                       SubprocessBackend()).run()
    assert release.status is Status.RELEASED, release.render_text()
    wait_gone(record.job_id)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_drained_allocation_whose_last_run_is_killed_is_released_by_the_next_run(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Run A's job is on the old allocation when run B switches to the successor: the
    old one drains under A's lease. A is killed (kill -9): its finish never comes. The
    next run's validation releases the old one (it no longer lives to its walltime)."""
    name = names.new("k9drain")
    names.names.append(name + "-b")
    quick = spec_dict(local_cluster, tmp_path, name, expected_duration_seconds=30,
                      warm_successor=True)
    long_script = tmp_path / "long.slurm"
    long_script.write_text("#!/bin/bash\nsrun true\necho started\nsleep 300\n")
    spec_file = tmp_path / "long.json"
    spec_file.write_text(json.dumps(dict(quick, script_path=str(long_script))))
    spec = JobSpec.from_dict(quick)
    first = Executor(spec, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    old = first.allocation_id
    assert old is not None

    run_a = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec_file),
                              "--json", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        log = tmp_path / "work" / "itmodel_custom.log"
        until("run A's job running on the old allocation", lambda: True if log.exists()
              and "started" in log.read_text() else None, timeout=60)
        shorten(old, "00:06:00")  # a successor is due; a 30 s job still fits
        second = Executor(spec, SubprocessBackend()).run()
        assert second.status is Status.PASSED, second.render_text()
        assert second.path[:3] == ["NoState", "Validating", "QueueingSuccessor"], second.path
        (succ_id,) = [j for j, _ in jobs_named(name + "-b", local_cluster.user)]
        if "Switching" not in second.path:  # pending when validated again: once more
            until("the successor RUNNING", lambda: True if jobs_named(
                name + "-b", local_cluster.user) == [(succ_id, "RUNNING")] else None)
            third = Executor(spec, SubprocessBackend()).run()
            assert third.status is Status.PASSED, third.render_text()
            assert "Switching" in third.path, third.path
        # switched: the old one drains under A's job (its lease step), never cut
        assert jobs_named(name, local_cluster.user) == [(old, "RUNNING")]
        drained = StateStore(StatePaths.for_state_file(spec.state_path).drained_state).read()
        assert drained is not None and drained.job_id == old
    finally:
        run_a.send_signal(signal.SIGKILL)  # its finish never comes
        run_a.wait(timeout=10)

    nxt = Executor(spec, SubprocessBackend()).run()
    assert nxt.status is Status.PASSED, nxt.render_text()
    assert nxt.allocation_id == succ_id
    # released by that run (scancel'd: at most COMPLETING for a moment), not at walltime
    assert job_state(old) in (None, "CANCELLED", "COMPLETING"), job_state(old)
    assert not StatePaths.for_state_file(spec.state_path).drained_state.exists()
    wait_gone(old)

    release = Executor(JobSpec.from_dict(dict(quick, release_allocation=True)),
                       SubprocessBackend()).run()
    assert release.status is Status.RELEASED, release.render_text()
    wait_gone(succ_id)


def _hold_name(cluster: ClusterInfo, tmp_path: Path, name: str) -> str:
    """A RUNNING untagged allocation named ``name``: a singleton successor of that name
    pends (Dependency) until it ends, a queue wait the test ends when it chooses."""
    job_id = SubprocessBackend().allocate(AllocationRequest(
        partition=cluster.partition, account=cluster.account, nodes=1,
        time_limit=Duration.parse("00:30:00"), job_name=name,
        log_path=tmp_path / "blocker.salloc.log"))
    until("the blocker RUNNING", lambda: True if job_state(job_id) == "RUNNING" else None)
    return job_id


def _queue_behind(cluster: ClusterInfo, tmp_path: Path, spec: JobSpec,
                  name: str) -> tuple[str, str, str]:
    """First run, then a run with 6 minutes left that queues the successor behind a
    blocker of its name: (old allocation, blocker, successor)."""
    first = Executor(spec, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    old = first.allocation_id
    assert old is not None
    blocker = _hold_name(cluster, tmp_path, name + "-b")
    shorten(old, "00:06:00")  # due; a 30 s job still fits
    second = Executor(spec, SubprocessBackend()).run()
    assert second.status is Status.PASSED, second.render_text()
    assert second.path[:5] == ["NoState", "Validating", "QueueingSuccessor", "Validating",
                               "Ready"], second.path
    assert second.allocation_id == old
    assert "successor_wait_s" not in second.timings  # it fitted: it waited for nothing
    (succ,) = [j for j, _ in jobs_named(name + "-b", cluster.user) if j != blocker]
    assert job_state(succ) == "PENDING"
    return old, blocker, succ


class _OnWait(Events):
    """Cancels the blocker when the run says it waits for the successor."""

    def __init__(self, blocker: str) -> None:
        self.blocker = blocker
        self.said: list[str] = []

    def message(self, text: str) -> None:
        self.said.append(text)
        if text.startswith("Waiting for successor") and self.blocker:
            assert slurm("scancel", self.blocker).returncode == 0
            self.blocker = ""


def test_a_job_that_does_not_fit_waits_for_the_successor_and_the_report_says_how_long(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("waitsucc")
    names.names.append(name + "-b")
    spec = make_spec(local_cluster, tmp_path, name, expected_duration_seconds=30,
                     warm_successor=True)
    old, blocker, succ = _queue_behind(local_cluster, tmp_path, spec, name)
    shorten(old, "00:05:00")  # 5 minutes or less left: the job does not fit the old one
    events = _OnWait(blocker)
    third = Executor(spec, SubprocessBackend(), events=events).run()
    assert third.status is Status.PASSED, third.render_text()
    assert not events.blocker, events.said  # it waited: the blocker went only then
    assert third.path[:3] == ["NoState", "Validating", "AwaitingSuccessor"], third.path
    assert "Switching" in third.path and third.allocation_id == succ
    waited = third.timings["successor_wait_s"]
    assert 0 < waited <= third.timings["step0_s"]
    assert any(n.startswith(f"waited {waited:.1f} s for successor allocation {succ}")
               for n in third.notes), third.notes
    assert "hand-off:" in third.render_text()
    wait_gone(old)  # nothing else on it: released at the switch

    release = Executor(make_spec(local_cluster, tmp_path, name, warm_successor=True,
                                 release_allocation=True), SubprocessBackend()).run()
    assert release.status is Status.RELEASED, release.render_text()
    wait_gone(succ)


def test_a_successor_granted_another_shape_is_cancelled_and_the_job_runs_as_before(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The successor asked 2 nodes; while it pends, its request becomes 1 node (as a
    ``--nodes=1-2`` range or a site's submit filter would grant): it cannot serve the
    spec. The next run cancels it, says why, and runs the job on the old allocation."""
    name = names.new("shape")
    names.names.append(name + "-b")
    spec = make_spec(local_cluster, tmp_path, name, expected_duration_seconds=30,
                     warm_successor=True, slurm_params={"nodes": 2})
    old, blocker, succ = _queue_behind(local_cluster, tmp_path, spec, name)
    # Slurm 22.05 keeps NumNodes=2 unless the task count drops too; then the request
    # reads NumNodes=1-2, and Slurm grants 1 node: a range granted its low end
    proc = slurm("scontrol", "update", f"JobId={succ}", "NumTasks=1", "NumNodes=1")
    assert proc.returncode == 0, proc.stderr
    slurm("scancel", blocker)
    until("the successor RUNNING", lambda: True if job_state(succ) == "RUNNING" else None)
    nodes = slurm("squeue", "-j", succ, "-h", "-o", "%D").stdout.strip()
    assert nodes == "1", nodes  # granted another shape than the spec asks
    third = Executor(spec, SubprocessBackend()).run()
    assert third.status is Status.PASSED, third.render_text()
    assert "Switching" not in third.path and "AwaitingSuccessor" not in third.path, third.path
    assert third.allocation_id == old
    (warning,) = [w for w in third.warnings if succ in w]
    assert "granted another shape" in warning and "nodes 2" in warning, warning
    assert job_state(succ) in (None, "CANCELLED", "COMPLETING")
    assert not StatePaths.for_state_file(spec.state_path).successor_state.exists()

    release = Executor(make_spec(local_cluster, tmp_path, name, warm_successor=True,
                                 slurm_params={"nodes": 2}, release_allocation=True),
                       SubprocessBackend()).run()
    assert release.status is Status.RELEASED, release.render_text()
    wait_gone(old)


def _drain(nodes: str, state: str) -> None:
    extra = ["Reason=slurm_fsm test: one node"] if state == "DRAIN" else []
    proc = slurm("scontrol", "update", f"NodeName={nodes}", f"State={state}", *extra)
    assert proc.returncode == 0, proc.stderr


def test_a_successor_on_the_old_ones_node_never_reimports_the_container_its_jobs_start(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """Issue 44 item 3: with n2 and n3 drained both allocations share n1, where pyxis
    keeps one container of a name (container_scope=global). The warmer sets the
    successor up while the old allocation's job starts that container again and again:
    the container is the very one (same directory, never removed and imported again),
    the job passes, and the successor is ready on n1, using it."""
    name = names.new("shnode")
    names.names.append(name + "-b")
    container = cnames.new("shnode")
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nfor i in $(seq 1 12); do\n"
                      f"  srun --container-name={container} cat /etc/passwd >/dev/null"
                      " || exit 1\ndone\necho started\n")
    data = spec_dict(local_cluster, tmp_path, name, script_path=str(script),
                     docker_image=str(pyxis.images["busybox"]), container_name=container,
                     workflow_type="custom", skip_install=True,
                     slurm_params={"gpus_per_node": 1},
                     expected_duration_seconds=30, warm_successor=True)
    spec = JobSpec.from_dict(data)
    quick = dict(data, script_path=str(tmp_path / "quick.slurm"))
    (tmp_path / "quick.slurm").write_text(
        f"#!/bin/bash\nsrun --container-name={container} true\n")
    _drain("n2,n3", "DRAIN")
    try:
        first = Executor(JobSpec.from_dict(quick), SubprocessBackend()).run()
        assert first.status is Status.PASSED, first.render_text()
        old = first.allocation_id
        assert old is not None
        before = cnames.on_nodes(container)
        assert list(before) == ["n1"], before
        inode = before["n1"].stat().st_ino
        shorten(old, "00:06:00")  # a successor is due; the job still fits the old one

        report = Executor(spec, SubprocessBackend()).run()
        assert report.status is Status.PASSED, report.render_text()
        assert report.allocation_id == old
        record_path = StatePaths.for_state_file(spec.state_path).successor_record
        record = read_successor(record_path)
        assert record is not None and record.predecessor == old
        until("the warmer done", lambda: True if not _alive(record.warmer_pid) else None,
              timeout=180)
        done = read_successor(record_path)
        succ = StateStore(StatePaths.for_state_file(spec.state_path).successor_state).read()
        assert succ is not None and succ.nodelist == "n1", succ
        assert done is not None and done.phase.value == "ready", done
        assert succ.container_name == container
        after = cnames.on_nodes(container)
        assert list(after) == ["n1"] and after["n1"].stat().st_ino == inode, \
            "the old allocation's container was removed and imported again"

        release = Executor(JobSpec.from_dict(dict(quick, release_allocation=True)),
                           SubprocessBackend()).run()
        assert release.status is Status.RELEASED, release.render_text()
        wait_gone(old)
        wait_gone(record.job_id)
    finally:
        _drain("n2,n3", "RESUME")


def test_a_successor_file_naming_another_checkouts_allocation_is_left_alone(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 43 item 4: the successor state file names a live allocation of another
    checkout of this user (its comment is that checkout's tag; written by hand, a
    stale copy, or a hostile member of the group). Slurm's comment and submit time are
    asked first: it is never switched to, never cancelled, this checkout's own
    allocation is never released; the file is forgotten."""
    name = names.new("foreignsucc")
    names.names.extend((name + "-b", name + "-x"))
    mine_dir, theirs_dir = tmp_path / "mine", tmp_path / "theirs"
    mine = spec_dict(local_cluster, mine_dir, name, expected_duration_seconds=30,
                     warm_successor=True)
    theirs = spec_dict(local_cluster, theirs_dir, name + "-x")
    first = Executor(JobSpec.from_dict(mine), SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    other = Executor(JobSpec.from_dict(theirs), SubprocessBackend()).run()
    assert other.status is Status.PASSED, other.render_text()
    old, foreign = first.allocation_id, other.allocation_id
    assert old is not None and foreign is not None and old != foreign
    spec = JobSpec.from_dict(mine)
    planted = StateStore(JobSpec.from_dict(theirs).state_path).read()
    assert planted is not None
    StateStore(StatePaths.for_state_file(spec.state_path).successor_state).write(planted)
    shorten(old, "00:10:00")  # the planted one has more time left: it would be chosen

    report = Executor(spec, SubprocessBackend()).run()
    assert report.status is Status.PASSED, report.render_text()
    assert report.allocation_id != foreign, report.path
    # never switched to: the state file never named it
    assert not any(f"names job {foreign}, but it is not ours" in w
                   for w in report.warnings), report.warnings
    assert job_state(foreign) == "RUNNING"  # never cancelled, never released
    assert any(foreign in w and "not this checkout's" in w for w in report.warnings), \
        report.warnings
    again = StateStore(StatePaths.for_state_file(spec.state_path).successor_state).read()
    assert again is None or again.job_id != foreign

    for data in (mine, theirs):
        done = Executor(JobSpec.from_dict(dict(data, release_allocation=True)),
                        SubprocessBackend()).run()
        assert done.status is Status.RELEASED, done.render_text()
    wait_gone(foreign)
    wait_gone(old)
