"""Issue 43 item 7: what a run's script detaches (``setsid nohup srun ... &``,
``setsid nohup cmd &``) does not outlive the run. It leaves the script's process group
and session, but not its environment: every process the script started holds the
guard's secret token (:func:`slurm_fsm.scriptguard.token_holders`). The real-Slurm
side (its step, by ``SrunHost:Pid``) is tests/integration/test_faults_round4_detached_real.py;
the fake cluster runs the same script here."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from slurm_fsm import scriptguard
from slurm_fsm.runrecord import RunBook
from slurm_fsm.testing import FakeCluster, make_spec

#: unique to this test process: nothing else on a shared machine sleeps this long
TAG = f"{7000 + os.getpid() % 1000}.{os.getpid() % 97}"


def _holding(tag: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if tag in cmd and "bash" not in cmd and scriptguard.live_start_ticks(
                int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the test started: killed at its end, whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _detached(token: str, secs: str, procs: list[subprocess.Popen[bytes]]
              ) -> subprocess.Popen[bytes]:
    """``sleep secs`` in a session of its own, holding ``token`` as a script's would."""
    env = {**os.environ, scriptguard.TOKEN_ENV: token}
    proc = subprocess.Popen(["sleep", secs], env=env, start_new_session=True)
    procs.append(proc)
    deadline = time.monotonic() + 30
    while scriptguard.live_start_ticks(proc.pid) is None or b"sleep" not in Path(
            f"/proc/{proc.pid}/cmdline").read_bytes():  # exec'd: its environ is sleep's
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


def test_token_holders_finds_a_process_in_another_session(
        reaper: list[subprocess.Popen[bytes]]) -> None:
    """A process of its own session and group holding the token is found; one holding
    another token is not; nor one started before ``since_ticks``."""
    token, other = secrets.token_hex(16), secrets.token_hex(16)
    mine = _detached(token, f"{TAG}1", reaper)
    theirs = _detached(other, f"{TAG}2", reaper)
    assert mine.pid in scriptguard.token_holders(token)
    assert theirs.pid not in scriptguard.token_holders(token)
    assert theirs.pid in scriptguard.token_holders(other)
    ticks = scriptguard.start_ticks(mine.pid)
    assert ticks is not None
    assert mine.pid not in scriptguard.token_holders(token, since_ticks=ticks + 1)
    assert mine.pid in scriptguard.token_holders(token, since_ticks=ticks)
    assert not scriptguard.token_holders("short")  # never a guessable token
    assert os.getpid() not in scriptguard.token_holders(token)


def test_a_fake_run_stops_what_its_script_detached(tmp_path: Path) -> None:
    """The fake cluster runs a script that detaches its ``srun`` (the fake's, which runs
    the command here) and a host process with ``setsid nohup ... &`` and exits 0: the
    run PASSES, both are stopped before the report, which says so. Before: both ran on
    after the report."""
    from slurm_fsm import Executor, Status

    spec = make_spec(tmp_path, workflow_type="custom", success_patterns="done")
    spec.script_path.write_text(
        "#!/bin/bash\n"
        f"setsid nohup srun -n1 sleep {TAG}3 >/dev/null 2>&1 &\n"
        f"setsid nohup sleep {TAG}4 >/dev/null 2>&1 &\n"
        f"until pgrep -f 'sleep {TAG}4' >/dev/null; do sleep 0.05; done\n"
        "echo done\n")
    try:
        report = Executor(spec, FakeCluster(run_scripts=True)).run()
        assert report.status.value == Status.PASSED.value, report.summary
        assert _holding(f"sleep {TAG}3") == [] and _holding(f"sleep {TAG}4") == []
        assert any("detached" in w for w in report.warnings), report.warnings
    finally:
        for pid in _holding(f"sleep {TAG}3") + _holding(f"sleep {TAG}4"):
            os.kill(pid, signal.SIGKILL)


def test_the_next_run_stops_what_a_dead_runs_script_detached(
        tmp_path: Path, reaper: list[subprocess.Popen[bytes]]) -> None:
    """A run killed with ``kill -9``: its guard stopped the script's group, not the
    process the script detached. The next run (:func:`slurm_fsm.runsteps.stop_leftovers`)
    finds it by the dead run's token and stops it; the record is deleted."""
    from slurm_fsm.runsteps import stop_leftovers

    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    token = secrets.token_hex(16)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)  # the dead guard's pid and group: nobody's now
    since = scriptguard.start_ticks(os.getpid())
    stray = _detached(token, f"{TAG}5", reaper)
    script = {"host": socket.gethostname(), "boot_id": scriptguard.boot_id(),
              "pid": gone.pid, "pgid": gone.pid, "start_ticks": since or 0,
              "uid": os.getuid(), "token": token}
    book.save(attrs.evolve(book.start(job), pid_ticks=-1, script=script))
    warnings = stop_leftovers(fake, book, job, fake.clock)
    assert stray.wait(timeout=30) == -signal.SIGTERM, warnings
    assert any("detached" in w and "earlier run" in w for w in warnings), warnings
    assert book.records() == []


def test_a_dead_runs_token_stops_nothing_of_another_user_or_token(
        tmp_path: Path, reaper: list[subprocess.Popen[bytes]]) -> None:
    """A record naming a token no process holds stops nothing: a process with another
    token runs on."""
    from slurm_fsm.runsteps import stop_leftovers

    fake = FakeCluster()
    job = fake.make_job("alloc", fake.user).job_id
    book = RunBook(tmp_path / ".slurm_alloc.json")
    other = _detached(secrets.token_hex(16), f"{TAG}6", reaper)
    script = {"host": socket.gethostname(), "boot_id": scriptguard.boot_id(),
              "pid": 999_999_999, "pgid": 999_999_999, "start_ticks": 0,
              "uid": os.getuid(), "token": secrets.token_hex(16)}
    book.save(attrs.evolve(book.start(job), pid_ticks=-1, script=script))
    warnings = stop_leftovers(fake, book, job, fake.clock)
    assert other.poll() is None, warnings
    assert not any("detached" in w for w in warnings), warnings


# (what, pids, first pid, forks then, forks now, last pid, pid_max, tasks, candidates)
NEW_PIDS = [
    ("no wrap: the pids between", [10, 100, 150, 200, 300], 100, 5000, 5050, 200, 32768, 50,
     [150, 200]),
    ("wrapped: above the first and up to the last", [10, 100, 150, 30000, 400], 29000,
     5000, 9000, 120, 32768, 50, [10, 100, 30000]),
    ("all the way round: every pid", [10, 100, 150], 100, 5000, 40000, 50, 32768, 50, None),
    ("round with the live tasks skipped: every pid", [10, 100], 100, 5000, 25000, 90, 32768,
     12000, None),
]


@pytest.mark.parametrize(("what", "pids", "first", "then", "now", "last", "pid_max",
                          "tasks", "want"), NEW_PIDS, ids=[c[0] for c in NEW_PIDS])
def test_new_pids(what: str, pids: list[int], first: int, then: int, now: int, last: int,
                  pid_max: int, tasks: int, want: list[int] | None) -> None:
    """Which pids a process started after ``first`` can have: only those are read for
    a token at a run's end (0.4 ms of CPU, not 4 to 16 for all of ``/proc``)."""
    assert scriptguard.new_pids(pids, first, then, forks_now=now, last_pid=last,
                                pid_max=pid_max, tasks=tasks) == want


def test_token_holders_after_a_start_reads_only_newer_pids(
        reaper: list[subprocess.Popen[bytes]]) -> None:
    """Given a process's pid and the fork count after its start, a holder started
    since is found; one started before it is not even read."""
    token = secrets.token_hex(16)
    older = _detached(token, f"{TAG}7", reaper)
    mark = (older.pid, scriptguard.fork_count() or 0)
    newer = _detached(token, f"{TAG}8", reaper)
    found = scriptguard.token_holders(token, after=mark)
    assert newer.pid in found and older.pid not in found
    assert {older.pid, newer.pid} <= set(scriptguard.token_holders(token))


def test_a_timed_out_run_stops_what_its_script_detached(tmp_path: Path) -> None:
    """The monitor's timeout stops the script (``LocalScript.terminate``): what the
    script detached from its group is stopped with it."""
    from slurm_fsm import Executor, Status

    spec = make_spec(tmp_path, workflow_type="custom", success_patterns="never printed",
                     monitor_timeout_seconds=1)
    spec.script_path.write_text(
        "#!/bin/bash\n"
        f"setsid nohup sleep {TAG}9 >/dev/null 2>&1 &\n"
        "sleep 60\n")
    try:
        report = Executor(spec, FakeCluster(run_scripts=True)).run()
        assert report.status.value == Status.TIMEOUT.value, report.summary
        assert _holding(f"sleep {TAG}9") == []
    finally:
        for pid in _holding(f"sleep {TAG}9"):
            os.kill(pid, signal.SIGKILL)


def test_a_run_killed_as_its_script_started_leaves_its_token_in_the_record(
        tmp_path: Path, reaper: list[subprocess.Popen[bytes]]) -> None:
    """CI, 26.05 under load: a run was killed with ``kill -9`` between its script's
    start and the record's naming of its guard's token; the next run found a record
    that named nothing and stopped nothing, and the detached step and process ran on.
    The token is now in the record before the script starts (the backend is handed it),
    and a record naming only the token stops what holds it."""
    from slurm_fsm import Executor
    from slurm_fsm.backend import ScriptRequest
    from slurm_fsm.runsteps import stop_leftovers

    spec = make_spec(tmp_path, workflow_type="custom", success_patterns="done")
    spec.script_path.write_text("#!/bin/bash\necho done\n")
    fake = FakeCluster(run_scripts=True)
    book = RunBook(spec.state_path)
    seen: list[tuple[str, object]] = []
    start = fake.start_script

    def start_script(request: ScriptRequest) -> object:
        [record] = book.records()  # as it is on disk the moment the script starts
        seen.append((request.token, record.script.get("token")))
        return start(request)

    fake.start_script = start_script  # type: ignore[method-assign,assignment]
    assert Executor(spec, fake).run().status.value == "PASSED"
    [(token, recorded)] = seen
    assert token and recorded == token
    # a record as such a killed run leaves it: the token alone
    job = fake.make_job("alloc", fake.user).job_id
    other = RunBook(tmp_path / "other" / ".slurm_alloc.json")
    token = secrets.token_hex(16)
    stray = _detached(token, f"{TAG}6", reaper)
    named = {"token": token, "host": socket.gethostname(), "boot_id": scriptguard.boot_id()}
    other.save(attrs.evolve(other.start(job), pid_ticks=-1, script=named))
    warnings = stop_leftovers(fake, other, job, fake.clock)
    assert stray.wait(timeout=30) == -signal.SIGTERM, warnings
    assert any("detached" in w and "earlier run" in w for w in warnings), warnings
