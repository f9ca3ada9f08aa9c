"""A lease step ends with its ``srun``'s host (issue 39, item 4).

When a login node dies whole, nobody cancels its runs' lease steps and Slurm never
notices (measured on 22.05 and 24.11): the lease blocked every other host's release
and replacement until the allocation's end. The lease task now asks its own ``srun``'s
listening socket (``SLURM_SRUN_COMM_HOST:PORT``) and ends when it is gone. Here the
task (:data:`slurm_fsm.slurmcli.LEASE_TASK`) runs under ``sh`` against a socket of the
test's: answered, refused, never there."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from slurm_fsm.slurmcli import LEASE_ORPHANED, LEASE_TASK, LEASE_UP


def _task(env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_SRUN_COMM")}
    return subprocess.Popen(["sh", "-c", LEASE_TASK], env={**clean, **env},
                            stdout=subprocess.PIPE, text=True)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode() for a in raw.split(b"\0")[:-1]]


def _assert_sleeps_until_its_srun_ends(task: subprocess.Popen[str]) -> None:
    """The task said it is up, then became ``sleep infinity`` (no probing)."""
    try:
        assert task.stdout is not None and task.stdout.readline().strip() == LEASE_UP
        deadline = time.monotonic() + 30
        while _cmdline(task.pid) != ["sleep", "infinity"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cmdline(task.pid) == ["sleep", "infinity"]
    finally:
        task.kill()
        task.communicate()


def test_the_lease_lives_while_its_srun_answers_and_ends_once_it_is_gone() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    task = _task({"SLURM_SRUN_COMM_HOST": "127.0.0.1", "SLURM_SRUN_COMM_PORT": str(port)})
    try:
        assert task.stdout is not None and task.stdout.readline().strip() == LEASE_UP
        server.settimeout(30)
        for _ in range(2):  # it asks, and is answered: it lives on
            conn, _addr = server.accept()
            conn.close()
        assert task.poll() is None
        server.close()  # srun gone: refused from now on
        out, _ = task.communicate(timeout=60)
        assert out.strip() == LEASE_ORPHANED
        assert task.returncode == 0
    finally:
        task.kill()
        server.close()


def test_without_an_address_to_ask_the_lease_sleeps_until_its_srun_ends() -> None:
    _assert_sleeps_until_its_srun_ends(_task({}))


def test_a_first_question_that_fails_means_no_probing_not_an_orphan() -> None:
    """A network that never lets the node reach the login host must not end every
    lease at once: the first question failing turns the probing off."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    _assert_sleeps_until_its_srun_ends(
        _task({"SLURM_SRUN_COMM_HOST": "127.0.0.1", "SLURM_SRUN_COMM_PORT": str(port)}))
