"""The script guard and the stale-group stop, with real local processes (no Slurm)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from slurm_fsm import scriptguard
from slurm_fsm.backend import ScriptRequest
from slurm_fsm.scriptguard import group_members
from slurm_fsm.subprocess_backend import SubprocessBackend, stop_stale_group


def guard(*command: str) -> list[str]:
    return [sys.executable, "-I", "-S", scriptguard.__file__, str(os.getpid()), *command]


def wait_for(what: str, probe, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_guard_passes_the_exit_code_on_as_the_shell_does() -> None:
    assert subprocess.run(guard("bash", "-c", "exit 7"), timeout=30).returncode == 7
    killed = subprocess.run(guard("bash", "-c", "kill -KILL $$"), timeout=30)
    assert killed.returncode == 128 + signal.SIGKILL  # 137, never -9


def test_the_script_dies_with_the_orchestrator(tmp_path: Path) -> None:
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


def test_a_stale_group_is_stopped_only_when_it_is_provably_the_same(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("sleep 600\n")
    script = SubprocessBackend().start_script(ScriptRequest(
        script_path=tmp_path / "job.sh", log_path=tmp_path / "job.log", env={},
        cwd=tmp_path))
    try:
        identity = script.identity
        wait_for("bash and sleep", lambda: len(group_members(script.pid)) >= 3)
        other_start = {**identity, "start_ticks": int(identity["start_ticks"]) + 1}
        assert stop_stale_group(other_start) is None  # a pid reused by another process
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
