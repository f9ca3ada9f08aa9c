"""Issue 28: Slurm is the arbiter. A run's lease is a step Slurm lists
(``fsm-lease.<run>.<max_until>``); the gate that decides cancel / replace / release asks
Slurm for the other runs' lease steps. The rule (:func:`holders_of`) table-tested, then
the gate and a release on the fake cluster, whose lease steps die with their owner."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import attrs
import pytest

from slurm_fsm.backend import StepInfo
from slurm_fsm.errors import AllocationFailed, AllocationVanished, CommandFailed
from slurm_fsm.executor import Executor
from slurm_fsm.lease import (
    AllocationInUse,
    LeaseGate,
    LeaseStep,
    holders_of,
    lease_name,
    lease_steps,
)
from slurm_fsm.results import Status
from slurm_fsm.runrecord import RunBook, RunRecord
from slurm_fsm.slurmcli import LEASE_TASK, srun_lease_argv
from slurm_fsm.state import StateStore
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

HERE = socket.gethostname()
NOW = 1_800_000_000
A, B, OWN = "raaaaaaaaaaaa", "rbbbbbbbbbbbb", "rcccccccccccc"


def step(step_id: str, name: str, job: str = "12", state: str = "RUNNING") -> StepInfo:
    return StepInfo(job_id=job, step_id=step_id, name=name, state=state)


def lease(step_id: str, run_id: str, until: int = NOW + 60) -> StepInfo:
    return step(step_id, lease_name(run_id, until))


def record(run_id: str, *, host: str = HERE, container: str = "", job: str = "12",
           ended: bool = False) -> RunRecord:
    return RunRecord(run_id=run_id, allocation=job, pid=1, pid_ticks=1, host=host,
                     boot_id="b", uid=0, since="2026-01-01T00:00:00+00:00",
                     container=container, ended=ended)


def test_a_lease_step_name_is_parsed_back_and_nothing_else_is_a_lease() -> None:
    assert lease_name(A, 1765000000.9) == f"fsm-lease.{A}.1765000000"
    (found,) = lease_steps([lease("3", A, 1765000000), step("0", "bash"),
                            step("batch", lease_name(A, 1)), step("4", "fsm-lease.x.1"),
                            step("5", f"fsm-lease.{A}.12x"), step("extern", "extern"),
                            step("6", f"lease.{B}.7")])
    assert found == LeaseStep(run_id=A, max_until=1765000000, step=lease("3", A, 1765000000))
    assert lease_steps([attrs.evolve(lease("3", A), state="COMPLETING")]) == []


def test_the_lease_argv_is_one_overlapping_step_without_gpus() -> None:
    argv = srun_lease_argv("12", lease_name(A, NOW))
    assert argv[:7] == ["srun", "--jobid=12", "-N1", "-n1", "--overlap", "--gres=none",
                        f"--job-name=fsm-lease.{A}.{NOW}"]
    # the task lives until its srun ends or its srun's host is gone (test_lease_probe)
    assert argv[7:] == ["sh", "-c", LEASE_TASK]


# (steps Slurm lists or None, records, container asked) -> (holders' run ids, broken)
CASES = {
    "nobody": ([], [], None, [], []),
    "another run's lease": ([lease("1", A)], [], None, [A], []),
    "this run's own lease": ([lease("1", OWN)], [record(OWN)], None, [], []),
    "a lease past its max_until is broken": ([lease("1", A, NOW - 1)], [record(A)], None,
                                             [], ["12.1"]),
    "a lease at its max_until still holds": ([lease("1", A, NOW)], [], None, [A], []),
    "this host's dead owner's lease is broken": ([lease("1", A)], [record(A, host="x")],
                                                 None, [], ["12.1"]),
    "another host's record without a lease: dead": ([], [record(A, host="login-b")], None,
                                                    [], []),
    "another host's record with its lease": ([lease("2", A)], [record(A, host="login-b")],
                                             None, [A], []),
    "no view of Slurm: another host's record holds": (None, [record(A, host="login-b")],
                                                      None, [A], []),
    "this host's live record without a lease yet": ([], [record(A)], None, [A], []),
    "an ended record": ([], [record(A, ended=True)], None, [], []),
    "a record of another allocation": ([], [record(A, job="13")], None, [], []),
    "another container's lease": ([lease("1", A)], [record(A, container="c2")], "c1", [], []),
    "this container's lease": ([lease("1", A)], [record(A, container="c1")], "c1", [A], []),
    "a lease without a record, for a container: held": ([lease("1", A)], [], "c1", [A], []),
    "lease and record of one run: one holder": ([lease("1", A), step("2", "bash")],
                                                [record(A), record(B, host="x")], None,
                                                [A], []),
}


@pytest.mark.parametrize("case", CASES)
def test_who_holds_an_allocation(case: str) -> None:
    steps, records, container, want, broken = CASES[case]
    here = "x" if case.startswith("this host's dead") else HERE
    found, stale = holders_of(steps, records, job_id="12", own=OWN, now=NOW, host=here,
                              alive=lambda r: r.host != "x", container=container)
    assert [h.run_id for h in found] == want
    assert [s.step.full_id for s in stale] == broken


def test_the_gate_asks_slurm_and_the_lease_dies_with_its_owner(tmp_path: Path) -> None:
    """Another host's run (its record says login-b) holds the allocation as long as its
    lease step runs; once its orchestrator is killed the step is gone and the gate
    clears at once, its record notwithstanding."""
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    book.save(attrs.evolve(record(A, host="login-b", job=job), uid=0))
    fake.start_lease(job, lease_name(A, NOW + 3600))
    gate = LeaseGate(book, wait_s=0, clock=fake.clock, backend=fake, wall=lambda: NOW)
    with pytest.raises(AllocationInUse, match=rf"in use by 1 .*lease step {job}\.0"):
        gate.clear(job, "releasing it")
    assert fake.lease_owner_dies(A) == [f"{job}.0"]
    gate.clear(job, "releasing it")
    assert "cancel" not in fake.ops()


def test_the_gate_waits_for_a_lease_then_breaks_it_past_max_until(tmp_path: Path) -> None:
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    fake.start_lease(job, lease_name(B, NOW + 30))
    said: list[str] = []
    gate = LeaseGate(book, wait_s=600, clock=fake.clock, backend=fake, say=said.append,
                     wall=lambda: NOW + fake.clock.now() - start)
    start = fake.clock.now()
    gate.clear(job, "releasing it")
    assert gate.broken == [f"{job}.0"] and fake.jobs[job].steps == {}
    assert [c.args for c in fake.calls if c.op == "cancel"] == [{"job_id": job, "step_id": "0"}]
    assert said[0].startswith(f"waiting before releasing it on allocation {job}: 1 running")
    assert "broke the lease of run " + B in said[-1] and "past its max_until" in said[-1]
    assert 30 < fake.clock.now() - start <= 30 + 5 + 1  # polled at most every 5 s
    assert fake.count("list_steps") <= 2 + 30 / 0.5


def test_a_gone_allocation_has_no_lease(tmp_path: Path) -> None:
    fake = FakeCluster()
    gate = LeaseGate(RunBook(tmp_path / ".slurm_alloc.json"), wait_s=0, backend=fake)
    assert gate.holders("999") == []


def test_a_run_holds_a_lease_step_while_its_job_runs_and_not_after(
        make_spec: SpecFactory) -> None:
    """One extra step per run, named for the run, gone once its job's steps are."""
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("a", "b", "c")))
    first = Executor(spec, fake, clock=fake.clock).run()
    assert first.status is Status.PASSED
    job = first.allocation_id or ""
    starts = [c.args for c in fake.calls if c.op == "start_lease"]
    assert len(starts) == 1 and starts[0]["job_id"] == job
    assert starts[0]["name"].startswith("fsm-lease.r")
    assert fake.jobs[job].steps == {}  # the lease ended with the run
    assert RunBook(spec.state_path).records() == []


def test_release_no_wait_refuses_under_another_hosts_lease_and_goes_once_it_dies(
        make_spec: SpecFactory) -> None:
    """Done-when of issue 28 on the fake: node B's ``release --no-wait`` never cancels
    while node A's job (its lease step) runs; after node A's orchestrator is killed,
    ``release`` goes through though node A's record is still there."""
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    alloc = StateStore(spec.state_path).read()
    assert alloc is not None
    book = RunBook(spec.state_path)
    book.save(record(A, host="login-a", job=alloc.job_id))  # node A's run, mid-job
    fake.start_lease(alloc.job_id, lease_name(A, 4_000_000_000))
    release = attrs.evolve(spec, release_allocation=True)
    refused = Executor(release, fake, clock=fake.clock, lease_wait_s=0).run()
    assert refused.status is Status.ERROR
    assert "in use by 1 running job" in (refused.summary or "")
    assert fake.jobs[alloc.job_id].state == "RUNNING"
    assert not any(c.op == "cancel" and c.args["step_id"] is None for c in fake.calls)
    fake.lease_owner_dies(A)  # kill -9 of node A's orchestrator
    done = Executor(release, fake, clock=fake.clock, lease_wait_s=0).run()
    assert done.status is Status.RELEASED
    assert fake.jobs[alloc.job_id].state == "CANCELLED"


# ------------------------------------------------------------- never the wrong allocation


def _reused(spec_root: SpecFactory, fake: FakeCluster, *, tagged: bool
            ) -> tuple[object, str, str]:
    """A state file of allocation J (its submit time recorded); J ended and Slurm gave
    its id to another job of ours by name (untagged, or with this checkout's tag),
    submitted later."""
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.step0.table import State, repo_tag

    spec = spec_root()
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    first = StateStore(spec.state_path).read()
    assert first is not None and first.submit_time  # recorded with the allocation
    fake.clock.advance(3600 * 24)
    other = fake.make_job(spec.job_name, fake.user, job_id=first.job_id,
                          comment=repo_tag(spec) if tagged else "")
    assert fake.query_job(first.job_id).submit_time != first.submit_time
    fake.reset_calls()
    return spec, first.job_id, other.job_id


@pytest.mark.parametrize("tagged", [False, True])
def test_a_reused_job_id_is_never_released(make_spec: SpecFactory, tagged: bool) -> None:
    """0A: the state file names J, but Slurm's J was submitted at another time: another
    job. Before issue 28 it was cancelled (ours by name or tag); now the state file is
    dropped with a warning and nothing is cancelled."""
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.step0.table import State

    fake = FakeCluster()
    spec, job_id, _ = _reused(make_spec, fake, tagged=tagged)
    m = AllocationMachine(attrs.evolve(spec, release_allocation=True), fake, clock=fake.clock)
    assert m.prepare().state is State.Released
    assert "cancel" not in fake.ops()
    assert fake.jobs[job_id].state == "RUNNING"
    assert not spec.state_path.exists()
    assert any("the id was reused by another job" in w for w in m.warnings), m.warnings


@pytest.mark.parametrize("tagged", [False, True])
def test_a_reused_job_id_is_never_reused_nor_cancelled_as_an_orphan(
        make_spec: SpecFactory, tagged: bool) -> None:
    """0C: the job of the recorded id is another generation: not reused; the state file
    is dropped; the orphan search (0D) leaves it too; a new allocation is made."""
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.step0.table import State

    fake = FakeCluster()
    spec, job_id, _ = _reused(make_spec, fake, tagged=tagged)
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    assert m.path[:3] == ["NoState", "Validating", "NoState"]
    assert "cancel" not in fake.ops()
    assert fake.jobs[job_id].state == "RUNNING"
    assert m.alloc is not None and m.alloc.job_id != job_id
    assert any("the id was reused by another job" in w for w in m.warnings), m.warnings


def test_a_state_file_without_a_submit_time_is_judged_as_before(
        make_spec: SpecFactory) -> None:
    """A state file of an older version (or of the procedure) has no submit_time: the
    id and the tag decide, as before; the file written anew gets it."""
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.step0.table import State

    fake = FakeCluster()
    spec = make_spec()
    assert AllocationMachine(spec, fake, clock=fake.clock).prepare().state is State.Ready
    data = json.loads(spec.state_path.read_text())
    assert "submit_time" in data
    del data["submit_time"]
    spec.state_path.write_text(json.dumps(data))
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready and m.path == ["NoState", "Validating", "Ready"]


def test_the_next_run_stops_a_dead_runs_lease_step_slurm_kept(tmp_path: Path) -> None:
    """A lease whose srun was killed with its whole group (SIGKILL to every process,
    e.g. a pid namespace torn down) stays listed: the next run on this host stops it
    with the dead run's other leftovers, and the gate breaks it meanwhile."""
    from slurm_fsm.runsteps import stop_leftovers

    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    dead = attrs.evolve(book.start(job), pid_ticks=-1, srun_pids=(999_999,), ended=True)
    book.save(dead)
    fake.start_lease(job, lease_name(dead.run_id, 4_000_000_000))
    gate = LeaseGate(book, wait_s=0, backend=fake)
    assert gate.holders(job) == [] and gate.broken == [f"{job}.0"]
    fake.start_lease(job, lease_name(dead.run_id, 4_000_000_000))  # listed again
    warnings = stop_leftovers(fake, book, job, fake.clock)
    assert fake.jobs[job].steps == {}, warnings
    assert any(f"step {job}.1" in w for w in warnings), warnings
    assert book.records() == []


class _ReleasedBeforeTheLease(FakeCluster):
    """Another login node's ``release`` (its lock is not ours: a filesystem whose
    locks do not hold across hosts) cancels the allocation in the moment between this
    run's step 0 and its lease step: found by the race campaign (race 2 of seed 1)."""

    def __init__(self, times: int = 1, says: str = "") -> None:
        super().__init__()
        self.times = times
        self.says = says

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
        if self.times > 0:
            self.times -= 1
            self.cancel(job_id)
            if self.says:  # srun failed with a text not known as "gone" (race 20)
                raise CommandFailed(["srun"], 1, self.says, "lease step did not start")
        return super().start_lease(job_id, name, timeout_s)


@pytest.mark.parametrize(("warm", "says"), [(False, ""), (True, ""), (True, "srun: bye")],
                         ids=["cold", "warm", "warm-unknown-text"])
def test_an_allocation_released_by_another_host_before_the_lease_is_allocated_anew(
        make_spec: SpecFactory, warm: bool, says: str) -> None:
    """Issue 28, the race campaign: the run's allocation is cancelled by another
    host's release after step 0 and before the run's lease step (no lease of this run
    yet: the release was right to go). Before: ``MachineError`` "Can't trigger event
    finish from state Ready", an ERROR. Now the run starts step 0 again (a new
    allocation) and PASSES; never a second live allocation."""
    fake = _ReleasedBeforeTheLease(times=0, says=says)
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    if warm:
        assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    fake.times = 1
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, (report.summary, report.errors)
    live = [j for j, job in fake.jobs.items() if job.state == "RUNNING"]
    assert live == [report.allocation_id]
    assert len(fake.jobs) == 2
    stored = StateStore(spec.state_path).read()
    assert stored is not None and stored.job_id == report.allocation_id


def test_a_lease_that_cannot_start_for_another_reason_is_an_error_not_a_crash(
        make_spec: SpecFactory) -> None:
    """The lease step fails while the allocation lives (not a crash of the machine:
    ``finish`` is no edge from Ready): ERROR naming the lease, the allocation kept."""
    fake = _ReleasedBeforeTheLease(times=0)
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED

    def broken(job_id: str, name: str, timeout_s: float = 60.0) -> None:
        raise CommandFailed(["srun"], 1, "srun: error: something else", "lease failed")

    fake.start_lease = broken  # type: ignore[method-assign,assignment]
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.ERROR
    assert "could not take this run's lease" in (report.summary or "")
    assert "internal error" not in (report.summary or "")
    assert [j for j, job in fake.jobs.items() if job.state == "RUNNING"] == \
        [report.allocation_id]


class _ReleasedWhilePending(FakeCluster):
    """Another login node's release cancels the allocation this run has just asked
    for, before it starts (race 2 of the campaign's seed 28)."""

    def __init__(self) -> None:
        super().__init__()
        self.times = 1

    def allocate(self, request, wait_s: float = 10.0) -> str:  # type: ignore[no-untyped-def]
        job = super().allocate(request, wait_s)
        if self.times > 0:
            self.times -= 1
            self.cancel(job)
        return job


def test_an_allocation_released_by_another_host_before_it_started_is_asked_again(
        make_spec: SpecFactory) -> None:
    """Before: ERROR "allocation N ended as CANCELLED before it started". Now step 0
    again: a new allocation, PASSED, the first one never used."""
    fake = _ReleasedWhilePending()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, (report.summary, report.errors)
    assert len(fake.jobs) == 2 and report.allocation_id == max(fake.jobs, key=int)
    assert any("before it started" in w and "step 0 again" in w for w in report.warnings)


@pytest.mark.parametrize(("log", "gone", "vanished"), [
    ("salloc: Granted job allocation 155\nsalloc: Job allocation 155 has been revoked.\n",
     True, True),
    ("salloc: Pending job allocation 155\nsalloc: job 155 queued and waiting for resources\n",
     True, True),
    ("salloc: Granted job allocation 155\n", False, False),  # squeue did not answer
    ("salloc: error: invalid partition specified: nope\n", True, False),
], ids=["granted-revoked", "pending", "unknown", "never-made"])
def test_an_allocate_whose_job_was_made_and_is_gone_says_it_vanished(
        tmp_path: Path, log: str, gone: bool, vanished: bool) -> None:
    """Race 133 of the campaign (seed 28): node A's salloc got job 155, node A was
    paused, node B's release cancelled 155 (no lease yet), node A resumed and found no
    job within 10 s: plain AllocationFailed, ERROR. A job salloc named and Slurm no
    longer lists is AllocationVanished: the run does step 0 again."""
    path = tmp_path / ".salloc.log"
    path.write_text(log)
    error = SubprocessBackend._allocation_failed(["salloc"], 1, path, "no job appeared",
                                                 gone=gone)
    assert isinstance(error, AllocationFailed)
    assert isinstance(error, AllocationVanished) is vanished
    assert ("was made and is gone" in str(error)) is vanished


class _VanishedInAllocate(FakeCluster):
    """salloc's job is cancelled from outside while allocate still polls for it."""

    def __init__(self) -> None:
        super().__init__()
        self.times = 1

    def allocate(self, request, wait_s: float = 10.0) -> str:  # type: ignore[no-untyped-def]
        job = super().allocate(request, wait_s)
        if self.times > 0:
            self.times -= 1
            self.cancel(job)
            raise AllocationVanished(["salloc"], 1, "", f"its job {job} was made and is "
                                     "gone, cancelled from outside")
        return job


def test_a_run_whose_allocate_found_its_job_cancelled_allocates_again(
        make_spec: SpecFactory) -> None:
    fake = _VanishedInAllocate()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    report = Executor(spec, fake, clock=fake.clock).run()
    assert report.status is Status.PASSED, (report.summary, report.errors)
    assert len(fake.jobs) == 2
    assert any("was made and is gone" in w and "step 0 again" in w for w in report.warnings)


def _owner_of(tmp_path: Path, run_id: str, *, host: str, age_s: float,
              lease: str) -> None:
    """Run ``run_id``'s owner record, of ``host``, last touched ``age_s`` ago."""
    import os
    import time

    from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles

    files = RunFiles(tmp_path / ".slurm_alloc.json")
    files.write_owner(attrs.evolve(
        OwnerRecord.new(run_id, Owner.FOREGROUND, mode="persistent", spec_path="s.yaml",
                        spec={}), host=host, lease=lease))
    then = time.time() - age_s
    os.utime(files.owner_path(run_id), (then, then))


@pytest.mark.parametrize("age_s, broken", [(200.0, True), (20.0, False)])
def test_a_lease_step_without_a_task_whose_owner_is_gone_is_broken_at_once(
        tmp_path: Path, age_s: float, broken: bool) -> None:
    """Issue 39 (b): login node A died between its lease ``srun``'s step creation and the
    task's launch: Slurm lists the step RUNNING until the allocation ends, and no task
    is there to notice its host is gone. Its run's owner record (of host login-a) was
    last touched 200 s ago, past ``HEARTBEAT_STALE_S``: the owner is gone, the gate
    breaks the step (``scancel`` of the step only) and says why, never waiting its
    600 s. With a fresh heartbeat (20 s) the run is alive: a holder, as before."""
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    name = lease_name(A, NOW + 3600)
    book.save(attrs.evolve(record(A, host="login-a", job=job), uid=0, lease=name))
    _owner_of(tmp_path, A, host="login-a", age_s=age_s, lease=name)
    step_id = fake.step_without_task(job, name)
    assert fake.lease_owner_dies(A) == []  # nothing of its owner's ends it
    said: list[str] = []
    gate = LeaseGate(book, wait_s=600, clock=fake.clock, backend=fake, say=said.append,
                     wall=lambda: NOW)
    if not broken:
        with pytest.raises(AllocationInUse):
            LeaseGate(book, wait_s=0, backend=fake, wall=lambda: NOW).clear(job, "x")
        assert fake.jobs[job].steps and gate.broken == []
        return
    start = fake.clock.now()
    gate.clear(job, "releasing it")
    assert fake.clock.now() == start  # no wait at all
    assert gate.broken == [step_id] and fake.jobs[job].steps == {}
    assert [c.args for c in fake.calls if c.op == "cancel"] == [
        {"job_id": job, "step_id": step_id.split(".")[1]}]
    assert fake.jobs[job].state.is_running  # the step only: the allocation stays
    assert any("login-a" in m and "not touched" in m for m in said), said


def test_a_paused_owner_s_lease_whose_task_runs_is_never_broken_for_its_heartbeat(
        tmp_path: Path) -> None:
    """A run on login node A whose orchestrator is stopped (Ctrl-Z, SIGSTOP, a paused VM)
    stops touching its owner record, but its host lives and so does its lease step's
    task (it ends the step when the host dies): design-handoff-and-arbiter.md, "a paused
    owner's lease is never broken before max_until". A stale heartbeat breaks a lease
    step only when Slurm says no task of it runs (``sstat``: the step of issue 39 (b))."""
    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    name = lease_name(A, NOW + 3600)
    book.save(attrs.evolve(record(A, host="login-a", job=job), uid=0, lease=name))
    _owner_of(tmp_path, A, host="login-a", age_s=200.0, lease=name)
    fake.start_lease(job, name)
    gate = LeaseGate(book, wait_s=0, backend=fake, wall=lambda: NOW)
    with pytest.raises(AllocationInUse):
        gate.clear(job, "releasing it")
    assert gate.broken == [] and fake.jobs[job].steps  # kept: its task runs
