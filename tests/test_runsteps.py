"""Which steps are a run's: :func:`slurm_fsm.runsteps.steps_of`, the one rule, as a table
(issue 26 item 1: a dead run's leftovers were taken to be everything in the allocation)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from slurm_fsm.backend import StepInfo
from slurm_fsm.runrecord import RunRecord, StepMark
from slurm_fsm.runsteps import steps_of

HOST, UID = "login1", 1000
RECORD = RunRecord(run_id="r0123456789ab", allocation="42", pid=100, pid_ticks=5, host=HOST,
                   boot_id="b", uid=UID, since="2026-12-03T12:00:00+00:00",
                   srun_pids=(300,))
#: Slurm prints a step's StartTime in local time; this one is after ``since`` anywhere
LATER = "2026-12-04T12:00:00"


def step(sid: str = "3", **kw: Any) -> StepInfo:
    base: dict[str, Any] = {"job_id": "42", "step_id": sid, "name": "srun-job",
                            "srun_host": HOST, "srun_pid": 300, "user_id": UID,
                            "start_time": LATER}
    base.update(kw)
    return StepInfo(**base)


MARK = StepMark(step_id="5", name="python", srun_host=HOST, srun_pid=999,
                start_time=LATER)

# (what, record changes, the step Slurm lists, pids, members, alive, the run's?)
CASES: list[tuple[str, dict[str, Any], StepInfo, set[int], set[int], set[int], bool]] = [
    ("its srun, dead now", {}, step(), {300}, set(), set(), True),
    ("its srun, alive in its group", {}, step(), {300}, {300}, {300}, True),
    ("its pid reused by someone's live srun", {}, step(), {300}, set(), {300}, False),
    ("an srun pid the run never had", {}, step(srun_pid=301), {300}, set(), set(), False),
    ("its pid on another host", {}, step(srun_host="login2"), {300}, set(), set(), False),
    ("a record written on another host", {"host": "login2"}, step(), {300}, set(), set(),
     False),
    ("another unix user's step", {}, step(user_id=0), {300}, set(), set(), False),
    ("a record of another user", {"uid": 0}, step(), {300}, set(), set(), False),
    ("a step of another allocation", {}, step(job_id="43"), {300}, set(), set(), False),
    ("a step started a day before the run", {}, step(start_time="2026-12-02T12:00:00"),
     {300}, set(), set(), False),
    ("the batch step", {}, step("batch"), {300}, set(), set(), False),
    ("the extern step", {}, step("extern"), {300}, set(), set(), False),
    ("no srun known (the old 'alone' rule)", {}, step(srun_host="", srun_pid=None), set(),
     set(), set(), False),
    ("no pid known at all", {}, step(), set(), set(), set(), False),
    ("a recorded step Slurm still describes so", {"steps": (MARK,)},
     step("5", name="python", srun_pid=999), set(), set(), set(), True),
    ("a recorded id, another name", {"steps": (MARK,)},
     step("5", name="bash", srun_pid=999), set(), set(), set(), False),
    ("a recorded id, another srun pid", {"steps": (MARK,)},
     step("5", name="python", srun_pid=998), set(), set(), set(), False),
    ("a recorded id, another start", {"steps": (MARK,)},
     step("5", name="python", srun_pid=999, start_time="2026-12-04T12:00:01"), set(), set(),
     set(), False),
    ("a recorded step of another user", {"steps": (MARK,)},
     step("5", name="python", srun_pid=999, user_id=0), set(), set(), set(), False),
    ("the script itself is the step (fake)", {"script": {"fake_job": "42", "fake_step": "3"}},
     step(srun_host="", srun_pid=None), set(), set(), set(), True),
    ("the fake script step of another allocation",
     {"script": {"fake_job": "41", "fake_step": "3"}}, step(srun_host="", srun_pid=None),
     set(), set(), set(), False),
]


@pytest.mark.parametrize(("what", "changes", "listed", "pids", "members", "alive", "ours"),
                         CASES, ids=[c[0] for c in CASES])
def test_steps_of(what: str, changes: dict[str, Any], listed: StepInfo, pids: set[int],
                  members: set[int], alive: set[int], ours: bool) -> None:
    record = attrs.evolve(RECORD, **changes)
    found = steps_of(record, [listed], host=HOST, uid=UID, pids=pids, members=members,
                     alive=alive)
    assert found == ([listed] if ours else []), what


def test_a_user_step_beside_the_dead_runs_is_never_its() -> None:
    """The real fault: kill -9, the user's own ``srun --overlap`` debug step and another
    live run's step on the allocation: only the dead run's own step is its."""
    dead_run = step("1")
    users_own = step("2", name="bash", srun_pid=4000)
    other_run = step("3", srun_pid=5000)
    found = steps_of(RECORD, [dead_run, users_own, other_run], host=HOST, uid=UID,
                     pids={300}, alive={4000, 5000})
    assert found == [dead_run]


def test_marks_round_trip_and_bare_ids_prove_nothing() -> None:
    rec = attrs.evolve(RECORD, steps=(MARK,))
    back = RunRecord.from_dict(json.loads(rec.to_json()))
    assert back == rec and back.step_ids == ("5",)
    old = RunRecord.from_dict({**json.loads(rec.to_json()), "steps": ["5", "6"]})
    assert old is not None and old.steps == ()  # an id alone, from an older record


# ------------------------------------------ the steps a run sees (issue 25, item 2)
class _Steps:
    """A backend that lists one step, started by the srun of pid ``pid`` on this host."""

    def __init__(self, job_id: str, pid: int) -> None:
        import os
        import socket
        self.step = StepInfo(job_id=job_id, step_id="3", name="sleep",
                             srun_host=socket.gethostname(), srun_pid=pid,
                             user_id=os.getuid(), start_time="")
        self.asked = 0
        self.listing: list[StepInfo] | None = None  # else [self.step]

    def step_details(self, job_id: str) -> list[StepInfo]:
        self.asked += 1
        return list(self.listing) if self.listing is not None else [self.step]


def test_a_run_notes_the_steps_of_its_sruns_while_they_run(tmp_path: Any) -> None:
    """An ``srun`` of the script's group: its step is noted in the record (``seen_steps``,
    not among the marks the next run stops), once it has run SRUN_SETTLE_S (a tiny job's
    srun costs no question, issue 28); Slurm is asked again only while an srun has no
    step seen, at most every MARK_EVERY_S."""
    import os
    import shutil
    import subprocess

    from slurm_fsm.runrecord import RunBook
    from slurm_fsm.runsteps import MARK_EVERY_S, RunSteps
    from slurm_fsm.scriptguard import SRUN_SETTLE_S
    from slurm_fsm.testing import FakeClock

    srun = tmp_path / "srun"  # a process whose name is srun
    shutil.copy(shutil.which("sleep") or "/bin/sleep", srun)
    proc = subprocess.Popen([str(srun), "30"], start_new_session=True)
    try:
        book = RunBook(tmp_path / ".slurm_alloc.json")
        record = book.start("42")
        backend = _Steps("42", proc.pid)
        clock = FakeClock()
        steps = RunSteps(backend, book, record, clock=clock)  # type: ignore[arg-type]
        steps.pgid = os.getpgid(proc.pid)
        steps.sample()
        assert backend.asked == 0  # a new srun: asked about once it has run a while
        assert steps.record.srun_pids == (proc.pid,)  # but in the record at once
        clock.advance(SRUN_SETTLE_S)
        steps.sample()
        assert backend.asked == 1
        assert steps.record.seen_steps == ("3",) and steps.record.steps == ()
        saved = book.records()[0]
        assert saved.seen_steps == ("3",) and saved.step_ids == ()
        assert steps.own_step_ids() == ["3"]
        clock.advance(MARK_EVERY_S + 1)
        steps.sample()
        assert backend.asked == 1  # its step is seen: nothing more to ask
        steps.cancelled.add("3")  # a step the run cancelled itself is not asked about
        assert steps.own_step_ids() == []
    finally:
        proc.kill()
        proc.wait()


def test_the_first_sample_waits_a_sample_period_after_the_start(
        tmp_path: Any, monkeypatch: Any) -> None:
    """A script just started is only its guard (its bash has not yet started an srun):
    a ``/proc`` scan then finds nothing to record and costs every tiny job one scan
    (issue 28). The first sample comes SAMPLE_EVERY_S after the start."""
    from slurm_fsm import scriptguard
    from slurm_fsm.runrecord import RunBook
    from slurm_fsm.runsteps import SAMPLE_EVERY_S, RunSteps
    from slurm_fsm.testing import FakeClock

    scans: list[int] = []
    monkeypatch.setattr(scriptguard, "group_members",
                        lambda pgid, **_kw: scans.append(pgid) or [])

    class Script:
        identity = {"pgid": 4242, "pid": 4242, "token": "t" * 32}

    book = RunBook(tmp_path / ".slurm_alloc.json")
    clock = FakeClock()
    steps = RunSteps(_Steps("42", 1), book, book.start("42"), clock=clock)  # type: ignore[arg-type]
    steps.started(Script(), str(tmp_path / "log"))  # type: ignore[arg-type]
    steps.sample()
    clock.advance(SAMPLE_EVERY_S / 2)
    steps.sample()
    assert scans == []
    clock.advance(SAMPLE_EVERY_S / 2)
    steps.sample()
    assert scans == [4242]


def test_a_gone_hosts_steps_are_told_by_that_hosts_srun_pids() -> None:
    """Issue 39, item 4: a run of login node A, whose whole host died, is found dead by
    its lease step's end; its steps are told by A's srun pids (never by this host's)."""
    from slurm_fsm.backend import StepInfo
    from slurm_fsm.jobstate import JobState
    from slurm_fsm.runrecord import RunRecord
    from slurm_fsm.runsteps import steps_of

    record = RunRecord(run_id="r0123456789ab", allocation="7", pid=4, pid_ticks=1,
                       host="login-a", boot_id="b", uid=0, since="2026-01-01T00:00:00",
                       srun_pids=(25, 26))

    def step(sid: str, host: str, pid: int) -> StepInfo:
        return StepInfo(job_id="7", step_id=sid, name="bash", state=JobState.RUNNING,
                        srun_host=host, srun_pid=pid, user_id=0,
                        start_time="2026-01-01T00:00:05")

    steps = [step("1", "login-a", 25), step("2", "login-b", 25), step("3", "login-a", 99)]
    here = {"host": "login-b", "uid": 0, "pids": {25, 26}}
    assert steps_of(record, steps, **here) == []  # its host may live: nothing by pid
    assert [s.step_id for s in steps_of(record, steps, **here, host_gone=True)] == ["1"]


def test_the_watch_s_readers_share_one_question_per_period(tmp_path: Any) -> None:
    """Noted at stop 46: a run asked Slurm about each ``srun`` twice (``scontrol show
    step`` for its step's mark, and again for the wait for GPUs), and twice every period
    while its step waited for GPUs. Both readers now take :meth:`RunSteps.listed`: one
    answer per period, whoever asks first."""
    import os
    import shutil
    import subprocess

    from slurm_fsm.placement import PENDING_POLL_S, PendingSteps
    from slurm_fsm.runrecord import RunBook
    from slurm_fsm.runsteps import MARK_EVERY_S, RunSteps
    from slurm_fsm.scriptguard import SRUN_SETTLE_S
    from slurm_fsm.testing import FakeClock

    srun = tmp_path / "srun"  # a process whose name is srun
    shutil.copy(shutil.which("sleep") or "/bin/sleep", srun)
    proc = subprocess.Popen([str(srun), "30"], start_new_session=True)
    try:
        book = RunBook(tmp_path / ".slurm_alloc.json")
        backend = _Steps("42", proc.pid)
        backend.step = attrs.evolve(backend.step, step_id="TDB", state="PENDING")
        clock = FakeClock()
        steps = RunSteps(backend, book, book.start("42"), clock=clock)  # type: ignore[arg-type]
        steps.pgid = os.getpgid(proc.pid)
        pending = PendingSteps(steps.listed, steps.pids, clock)

        def tick() -> list[StepInfo]:  # as the persistent path's watch ticks
            steps.sample()
            return pending()

        tick()
        clock.advance(SRUN_SETTLE_S)
        assert [s.srun_pid for s in tick()] == [proc.pid]  # the wait for GPUs is seen
        assert backend.asked == 1  # and the mark was looked for in the same answer
        period = max(MARK_EVERY_S, PENDING_POLL_S)
        for _ in range(4):  # the step waits: one question per period, not two
            clock.advance(period)
            tick()
        assert backend.asked == 5
    finally:
        proc.kill()
        proc.wait()


def test_only_runsteps_asks_slurm_for_step_details() -> None:
    """The class of the defect above: a second reader of ``scontrol show step`` in a
    run asks Slurm again for what the run already knows. Only :mod:`slurm_fsm.runsteps`
    calls ``step_details`` (the plan's dry-run backend passes it on); a new reader takes
    :meth:`~slurm_fsm.runsteps.RunSteps.listed`."""
    import ast
    from pathlib import Path

    import slurm_fsm

    root = Path(slurm_fsm.__file__).parent
    callers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step_details"):
                callers.add(path.relative_to(root).as_posix())
    assert callers == {"runsteps.py", "plan.py"}


def test_a_new_srun_s_mark_never_reads_an_answer_older_than_its_srun(tmp_path: Any) -> None:
    """Review of the shared answer: the steps' list the wait for GPUs had asked for just
    before a new ``srun`` started was read for that srun's mark: its step was not in it,
    and a step that ended before the next mark (2 s on) was never marked (accounting
    not asked how it ended). An srun's mark reads an answer taken once it had run
    SRUN_SETTLE_S, as before the answer was shared."""
    import os
    import shutil
    import subprocess

    from slurm_fsm.runrecord import RunBook
    from slurm_fsm.runsteps import RunSteps
    from slurm_fsm.scriptguard import SRUN_SETTLE_S
    from slurm_fsm.testing import FakeClock

    srun = tmp_path / "srun"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", srun)
    proc = subprocess.Popen([str(srun), "30"], start_new_session=True)
    try:
        book = RunBook(tmp_path / ".slurm_alloc.json")
        backend = _Steps("42", proc.pid)
        step, backend.step = backend.step, None  # type: ignore[assignment]
        clock = FakeClock()
        steps = RunSteps(backend, book, book.start("42"), clock=clock)  # type: ignore[arg-type]
        steps.pgid = os.getpgid(proc.pid)
        backend.listing = []
        steps.listed()  # the wait for GPUs asks: no step of the new srun yet
        steps.sample()  # the srun is seen
        backend.listing = [step]  # its step is made
        clock.advance(SRUN_SETTLE_S)
        steps.sample()  # its mark
        assert steps.record.seen_steps == ("3",)
        assert backend.asked == 2
    finally:
        proc.kill()
        proc.wait()
