"""The script guard and the stale-group stop, with real local processes (no Slurm)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_fsm import scriptguard
from slurm_fsm.backend import ScriptRequest
from slurm_fsm.scriptguard import group_members
from slurm_fsm.subprocess_backend import SubprocessBackend, guarded, stop_stale_group

# Every behaviour of a guard, in both of its forms: the lean one (setpriv + /bin/sh, what
# this host runs) and the Python one (hosts without setpriv --pdeathsig, and the stop)
FORMS = ("lean", "python")


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The guard's form for this test: ``SLURM_FSM_GUARD`` as a user would set it (an
    orchestrator started by the test inherits it)."""
    if request.param == "python":
        monkeypatch.setenv(scriptguard.GUARD_ENV, "python")
    else:
        monkeypatch.delenv(scriptguard.GUARD_ENV, raising=False)
    return str(request.param)


def guard(*command: str, parent: int | None = None) -> list[str]:
    """``command`` under the guard of this environment's form (:func:`form`)."""
    return scriptguard.command(os.getpid() if parent is None else parent, list(command),
                               python=sys.executable)


def test_this_host_runs_the_lean_guard_and_the_user_can_ask_for_the_python_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean guard (about 2 ms of CPU, not 20: issue 28) is what this host runs: its
    tools are here; ``SLURM_FSM_GUARD=python`` asks for the Python guard."""
    monkeypatch.delenv(scriptguard.GUARD_ENV, raising=False)
    lean = guarded(["bash", "job.sh"])
    assert os.path.basename(lean[0]) == "setpriv" and lean[1:4] == ["--pdeathsig", "TERM", "--"]
    assert lean[5].endswith("scriptguard.sh") and lean[-2:] == ["bash", "job.sh"]
    monkeypatch.setenv(scriptguard.GUARD_ENV, "python")
    py = guarded(["bash", "job.sh"])
    assert py[:3] == [sys.executable, "-I", "-S"] and py[3].endswith("scriptguard.py")
    assert py[4:] == [str(os.getpid()), "bash", "job.sh"]


def wait_for(what: str, probe, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_lean_guard_runs_no_python_until_it_stops(tmp_path: Path) -> None:
    """What the lean guard is for (issue 28: a Python start is about 20 ms of CPU per
    script, the shell's about 1): while the command runs, its guard is the shell, the
    group's leader; asked to stop, the same process becomes the Python guard and stops
    the group."""
    (tmp_path / "job.sh").write_text("sleep 600\n")
    argv = scriptguard.command(os.getpid(), ["bash", str(tmp_path / "job.sh")],
                               python=sys.executable, lean=True)
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        wait_for("bash and sleep", lambda: len(group_members(proc.pid)) >= 3)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[0] == b"/bin/sh" and cmdline[1].endswith(b"scriptguard.sh")
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in group_members(proc.pid)}
        assert not any(n.startswith("python") for n in names), names
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 128 + signal.SIGTERM
        assert not group_members(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_guard_passes_the_exit_code_on_as_the_shell_does(form: str) -> None:
    assert subprocess.run(guard("bash", "-c", "exit 7"), timeout=30).returncode == 7
    for sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGTERM):
        killed = subprocess.run(guard("bash", "-c", f"echo said >&2; kill -{sig.name} $$"),
                                capture_output=True, timeout=30)
        assert killed.returncode == 128 + sig  # 137, never -9
        assert killed.stderr == b"said\n"  # the guard adds no "Killed" to the job's log
        assert killed.stdout == b""


def test_the_command_gets_sigint_and_sigquit_as_a_command_of_its_own(form: str) -> None:
    """A shell starts an asynchronous command with SIGINT and SIGQUIT ignored; the lean
    guard gives them back: under either guard, the command sees the default."""
    out = subprocess.run(guard("bash", "-c", "kill -INT $$; echo survived"),
                         capture_output=True, timeout=30)
    assert out.returncode == 128 + signal.SIGINT and b"survived" not in out.stdout
    mask = subprocess.run(guard("grep", "^SigIgn", "/proc/self/status"),
                          capture_output=True, text=True, timeout=30)
    ignored = int(mask.stdout.split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1)), mask.stdout


def test_a_guard_whose_starter_is_already_gone_runs_nothing(tmp_path: Path, form: str) -> None:
    """The death signal is armed before the guard checks its starter: a guard whose
    starter is not its parent (gone before the signal was armed) never starts the
    command and ends as stopped."""
    marker = tmp_path / "ran"
    out = subprocess.run(guard("touch", str(marker), parent=1), timeout=30)
    assert out.returncode == 128 + signal.SIGTERM
    assert not marker.exists()


def test_the_script_dies_with_the_orchestrator(tmp_path: Path, form: str) -> None:
    """kill -9 of the process that started the script: the script's whole group ends."""
    pidfile = tmp_path / "pgid"
    starter = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from slurm_fsm.backend import ScriptRequest\n"
        "from slurm_fsm.subprocess_backend import SubprocessBackend\n"
        f"d = Path({str(tmp_path)!r})\n"
        "s = SubprocessBackend().start_script(ScriptRequest(script_path=d / 'job.sh',"
        " log_path=d / 'job.log', env={}, cwd=d))\n"
        f"Path({str(pidfile)!r}).write_text(str(s.pid))\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "job.sh").write_text("sleep 600 &\nsleep 600\n")
    orchestrator = subprocess.Popen([sys.executable, "-c", starter])
    try:
        wait_for("the script", lambda: pidfile.exists() and pidfile.read_text() != "")
        pgid = int(pidfile.read_text())
        wait_for("bash and its sleeps", lambda: len(group_members(pgid)) >= 3)
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=10)
        wait_for("the script's group gone", lambda: not group_members(pgid), timeout=15)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()


def test_a_stale_group_is_stopped_only_when_it_is_provably_the_same(tmp_path: Path,
                                                                     form: str) -> None:
    (tmp_path / "job.sh").write_text("sleep 600\n")
    script = SubprocessBackend().start_script(ScriptRequest(
        script_path=tmp_path / "job.sh", log_path=tmp_path / "job.log", env={},
        cwd=tmp_path))
    try:
        identity = script.identity
        assert isinstance(identity["token"], str) and len(identity["token"]) >= 32
        wait_for("bash and sleep", lambda: len(group_members(script.pid)) >= 3)
        wrong = {**identity, "token": "0" * 32}
        assert stop_stale_group(wrong) is None  # the token is the proof
        assert stop_stale_group({k: v for k, v in identity.items() if k != "token"}) is None
        assert stop_stale_group({**identity, "host": "elsewhere"}) is None
        assert script.poll() is None
        stopped = stop_stale_group(identity)
        assert stopped is not None and f"process group {script.pid}" in stopped
        assert script.wait(10) == 128 + signal.SIGTERM
        assert not group_members(script.pid)
        assert stop_stale_group(identity) is None  # nothing left to stop
    finally:
        if script.poll() is None:
            script.terminate()


def _record_of(pgid: int, token: str) -> dict[str, object]:
    """What a planted run record would say about group ``pgid``: every world-readable
    fact right (host, boot, pid, start time), and a token of the planter's choice."""
    from slurm_fsm.runrecord import boot_id, start_ticks

    return {"host": __import__("socket").gethostname(), "boot_id": boot_id(), "pid": pgid,
            "pgid": pgid, "start_ticks": start_ticks(pgid) or 0, "uid": os.getuid(),
            "token": token}


def test_a_planted_record_never_makes_a_run_kill_an_unrelated_group() -> None:
    """Issue 20.2: a record naming any process group (here a `sleep` of this very user,
    its own leader, alive, with its true start time) stops nothing: it is not a guard
    and holds no token."""
    victim = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        wait_for("the sleep", lambda: bool(group_members(victim.pid)))
        for token in ("", "0" * 32, "guess" * 8):
            assert stop_stale_group(_record_of(victim.pid, token)) is None
        assert scriptguard.proven_members(victim.pid, "0" * 32) == []
        time.sleep(0.2)
        assert victim.poll() is None  # alive
    finally:
        victim.kill()
        victim.wait()


def test_a_guard_with_another_token_is_not_stopped(tmp_path: Path, form: str) -> None:
    """A real guard of another run (its cmdline is scriptguard's), named by a record
    whose token is not its own: left alone."""
    env = {**os.environ, scriptguard.TOKEN_ENV: "a" * 32}
    other = subprocess.Popen(guard("sleep", "600"), env=env, start_new_session=True)
    try:
        wait_for("the guard and its sleep", lambda: len(group_members(other.pid)) >= 2)
        assert stop_stale_group(_record_of(other.pid, "b" * 32)) is None
        assert other.poll() is None
        assert scriptguard.proven_members(other.pid, "a" * 32)  # its own token proves it
    finally:
        other.kill()
        other.wait()
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(other.pid, signal.SIGKILL)


def test_with_the_guard_gone_only_the_token_proves_the_group(tmp_path: Path,
                                                             form: str) -> None:
    """kill -9 of the guard leaves bash and its child in the group, leaderless: a start
    time cannot prove anything then; a member holding the token does."""
    (tmp_path / "job.sh").write_text("sleep 600\n")
    script = SubprocessBackend().start_script(ScriptRequest(
        script_path=tmp_path / "job.sh", log_path=tmp_path / "job.log", env={},
        cwd=tmp_path))
    pgid = script.pid
    try:
        identity = script.identity
        wait_for("bash and sleep", lambda: len(group_members(pgid)) >= 3)
        os.kill(pgid, signal.SIGKILL)  # the guard
        script.wait(10)
        wait_for("the leaderless group", lambda: pgid not in group_members(pgid))
        assert group_members(pgid)
        assert stop_stale_group({**identity, "token": "f" * 32}) is None
        assert group_members(pgid)  # still there: nothing killed on a wrong word
        assert stop_stale_group(identity) is not None
        wait_for("the group gone", lambda: not group_members(pgid))
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def _group(script: str) -> subprocess.Popen[bytes]:
    """A process group of its own running ``script``, once it said it is ready (its
    traps are set)."""
    proc = subprocess.Popen(["bash", "-c", f"{script.split('#')[0]}; echo ready; "
                             f"{script.split('#')[1]}"], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_stop_group_ends_a_group_that_obeys_sigterm_within_the_grace() -> None:
    with _group(":#sleep 30 & wait") as proc:
        assert scriptguard.stop_group(proc.pid, 5.0, ended=lambda: proc.poll() is not None)
        assert proc.wait(5) == -signal.SIGTERM


def test_stop_group_kills_what_ignores_sigterm_after_the_grace() -> None:
    with _group("trap '' TERM#while :; do sleep 0.05; done") as proc:
        started = time.monotonic()
        assert not scriptguard.stop_group(proc.pid, 0.5,
                                          ended=lambda: proc.poll() is not None)
        assert proc.wait(5) == -signal.SIGKILL
        assert time.monotonic() - started >= 0.5


def test_stop_group_kills_nothing_it_can_no_longer_prove() -> None:
    with _group("trap '' TERM#while :; do sleep 0.05; done") as proc:
        try:
            assert not scriptguard.stop_group(proc.pid, 0.3,
                                              ended=lambda: proc.poll() is not None,
                                              may_kill=lambda: False)
            assert proc.poll() is None  # still there: not killed
        finally:
            os.killpg(proc.pid, signal.SIGKILL)


def test_concurrent_callers_share_one_proc_scan_begun_after_they_asked(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """issue 28: many runs of one process read /proc at once; the callers that arrive
    while a scan runs share the next scan (never one begun before they asked)."""
    import threading

    from slurm_fsm import scriptguard

    me = os.getpgrp()  # a group that exists (a gone one is known empty without a scan)
    scans: list[int] = []
    first_started, go_on = threading.Event(), threading.Event()

    def slow_scan() -> dict[int, list[int]]:
        n = len(scans) + 1
        scans.append(n)
        if n == 1:
            first_started.set()
            go_on.wait(10)
        return {me: [n]}  # which scan answered, as the "pid"

    monkeypatch.setattr(scriptguard, "_scan_groups", slow_scan)
    monkeypatch.setattr(scriptguard, "_SCANS", scriptguard._Scans())
    got: dict[str, list[int]] = {}
    first = threading.Thread(target=lambda: got.update(first=scriptguard.group_members(me)))
    first.start()
    assert first_started.wait(10)
    late = [threading.Thread(target=lambda i=i: got.update({f"late{i}":  # type: ignore[misc]
                                                            scriptguard.group_members(me)}))
            for i in range(6)]
    for t in late:
        t.start()
    scans_state = scriptguard._SCANS
    wait_for("the late callers waiting", lambda: len(scans_state.cond._waiters) == 6)  # type: ignore[attr-defined]
    go_on.set()
    for t in [first, *late]:
        t.join(10)
    assert got["first"] == [1]
    assert all(got[f"late{i}"] == [2] for i in range(6))  # one scan, begun after they asked
    assert scans == [1, 2]
    assert scriptguard.group_members(me, exclude=3) == []  # a new call: a new scan
    assert scans == [1, 2, 3]


def test_the_guard_starts_without_what_only_the_orchestrator_needs() -> None:
    """Every job's script starts under a guard, a Python process of its own: what it
    imports is much of what it costs (22 ms of CPU with hmac, threading and contextlib,
    about 18 without, the interpreter alone 6; 24 tiny jobs of one run_many pay it 24
    times, issue 28).
    Its start imports the modules it uses to run and stop a command, nothing more."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", scriptguard.__file__,
         str(os.getpid()), "true"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "ctypes" in imported  # the death signal is armed
    assert not imported & {"hmac", "threading", "contextlib", "typing", "_hashlib"}, \
        sorted(imported)


def test_a_group_with_no_process_is_known_empty_without_a_proc_scan(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After every script the run asks what is left of its group; usually nothing: the
    kernel says so (``killpg(pgid, 0)``: no such process group) and ``/proc`` is not
    read (issue 28). A live group is still read from ``/proc``."""
    scans: list[int] = []
    real = scriptguard._scan_groups
    monkeypatch.setattr(scriptguard, "_scan_groups", lambda: scans.append(1) or real())
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    assert group_members(gone.pid) == [] and scans == []
    alive = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert group_members(alive.pid) == [alive.pid] and scans == [1]
    finally:
        alive.kill()
        alive.wait()
    assert group_members(alive.pid) == []  # reaped: gone, no scan
    assert scans == [1]


def test_srun_s_own_helper_is_no_step_srun(tmp_path: Path) -> None:
    """Every ``srun`` forks a helper, its child, also named ``srun`` (seen on Slurm 22.05:
    ``SrunHost:Pid`` names the parent only). A run asked Slurm about that helper's step
    every 2 s for as long as the job ran; :func:`scriptguard.is_step_srun` tells them
    apart (a stand-in ``srun`` that forks itself, as the real one does)."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\nif [ -z "$HELPER" ]; then HELPER=1 "$0" & wait; '
                    'else sleep 30; fi\n')  # both stay a shell running "srun"
    srun.chmod(0o755)
    parent = subprocess.Popen([str(srun)], stdin=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        helper = None
        while helper is None and time.monotonic() < deadline:
            children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
            kids = [int(p) for p in children.read_text().split()] if children.exists() else []
            helper = next((k for k in kids if scriptguard.is_srun(k)), None)
            time.sleep(0.05)
        assert helper is not None
        assert scriptguard.is_srun(parent.pid) and scriptguard.is_step_srun(parent.pid)
        assert scriptguard.is_srun_helper(helper) and not scriptguard.is_step_srun(helper)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # its own group: the stand-ins and their sleep
        parent.wait(timeout=10)


def test_the_guard_writes_its_commands_exit_status_and_keeps_the_variable_to_itself(
        tmp_path: Path, form: str) -> None:
    """Issue 39 (c): the guard writes the command's exit status (atomically) beside the
    run's record as the command ends by itself, so a rebuild after its owner's death
    knows it; the variable naming the file is not in the command's environment."""
    status = tmp_path / "status"
    env = {**os.environ, scriptguard.STATUS_ENV: str(status)}
    out = subprocess.run(guard("bash", "-c", f"echo ${{{scriptguard.STATUS_ENV}-unset}}; exit 7"),
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 7 and out.stdout == "unset\n", out
    assert status.read_text() == "7\n"
    killed = subprocess.run(guard("bash", "-c", "kill -KILL $$"), timeout=30, env=env)
    assert killed.returncode == 137 and status.read_text() == "137\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status"]  # no temp file left


def test_a_stopped_guard_writes_no_status(tmp_path: Path, form: str) -> None:
    """Stopped (its owner died, or it was asked), the guard writes nothing: the script
    did not end by itself, and the rebuild says CANCELLED."""
    status = tmp_path / "status"
    started = tmp_path / "started"
    env = {**os.environ, scriptguard.STATUS_ENV: str(status)}
    proc = subprocess.Popen(guard("bash", "-c", f"touch {started}; sleep 600"), env=env,
                            start_new_session=True)
    try:
        wait_for("the command", started.exists)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not status.exists()


def test_a_script_that_ended_before_its_orchestrators_kill_9_keeps_its_status(
        tmp_path: Path, form: str) -> None:
    """The orchestrator never looks (it sleeps) after starting the script; the script
    ends, its guard writes 0; then the orchestrator is killed with SIGKILL: the status
    stays for the rebuild (no timing: the kill comes once the file is there)."""
    status = tmp_path / "status"
    starter = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from slurm_fsm.backend import ScriptRequest\n"
        "from slurm_fsm.subprocess_backend import SubprocessBackend\n"
        f"d = Path({str(tmp_path)!r})\n"
        "SubprocessBackend().start_script(ScriptRequest(script_path=d / 'job.sh',"
        " log_path=d / 'job.log', env={}, cwd=d, status_path=d / 'status'))\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "job.sh").write_text("echo end\n")
    orchestrator = subprocess.Popen([sys.executable, "-c", starter])
    try:
        wait_for("the script's status", status.exists, timeout=60)
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=10)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
    assert status.read_text() == "0\n"
    assert (tmp_path / "job.log").read_text() == "end\n"


def test_a_record_that_names_only_the_token_stops_what_holds_it() -> None:
    """A run killed as its script started leaves a record naming only its guard's token
    (written before the script, :meth:`slurm_fsm.runsteps.RunSteps.starting`): what
    holds that token (a ``setsid`` process the script detached) is stopped; nothing
    that does not hold it is (CI, 26.05 under load: the next run stopped nothing)."""
    import secrets
    import socket

    token = secrets.token_hex(16)
    holder = subprocess.Popen(["sleep", "600"], start_new_session=True,
                              env={**os.environ, scriptguard.TOKEN_ENV: token})
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        wait_for("the sleeps", lambda: bool(group_members(holder.pid))
                 and bool(group_members(other.pid)))
        named = {"token": token, "host": socket.gethostname(),
                 "boot_id": scriptguard.boot_id()}
        assert stop_stale_group({**named, "token": "0" * 32}) is None
        assert stop_stale_group({**named, "host": "elsewhere"}) is None
        stopped = stop_stale_group(named)
        assert stopped is not None and "detached from its group" in stopped, stopped
        assert holder.wait(10) == -signal.SIGTERM
        assert other.poll() is None
    finally:
        for proc in (holder, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
