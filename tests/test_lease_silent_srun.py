"""A lease ``srun`` that hangs silent is asked again (the kill-point campaign, issue 39:
an ``srun --overlap`` that asks for its step as slurmctld goes down prints nothing and
makes no step, for 90 s and more; the run ended ERROR after 60 s, its job not started,
in 21 of 61 controller restarts). The real ``SubprocessBackend`` runs stand-ins for
``srun`` and ``squeue`` from ``PATH``: the first ``srun`` hangs silent, the next starts
its task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_fsm import subprocess_backend
from slurm_fsm.errors import CommandTimedOut, JobNotFound
from slurm_fsm.slurmcli import LEASE_UP, SEP
from slurm_fsm.subprocess_backend import SubprocessBackend

SRUN = """#!/bin/bash
# a stand-in for srun: the first call hangs silent (its step never made), the others
# start their task
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt {silent} ]; then exec sleep 300; fi
echo {up}; exec sleep 300
"""
#: squeue -s of an allocation whose only steps are the ones named in {listed}
SQUEUE = """#!/bin/bash
cat {listed} 2>/dev/null; exit 0
"""


def _backend(tmp_path: Path, silent: int, listed: str = "") -> SubprocessBackend:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("squeue", SQUEUE)):
        path = bin_dir / name
        path.write_text(text.format(count=tmp_path / "count", silent=silent, up=LEASE_UP,
                                    listed=tmp_path / "listed"))
        path.chmod(0o755)
    (tmp_path / "listed").write_text(listed)
    return SubprocessBackend(env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})


def _calls(tmp_path: Path) -> int:
    return int((tmp_path / "count").read_text())


def test_a_silent_srun_with_no_step_listed_is_started_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess_backend, "LEASE_SILENT_S", 0.5)
    lease = _backend(tmp_path, silent=1).start_lease("7", "fsm-lease.r0123456789ab.1",
                                                     timeout_s=30)
    try:
        assert lease.alive()
        assert _calls(tmp_path) == 2  # the silent one stopped, the second took
    finally:
        lease.stop(grace_s=2)


def test_a_silent_srun_whose_step_is_listed_is_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listed: its task is only slow to start; it is not asked twice (a second lease
    step of the same name would be a second holder)."""
    monkeypatch.setattr(subprocess_backend, "LEASE_SILENT_S", 0.3)
    name = "fsm-lease.r0123456789ab.1"
    listed = f"7.0{SEP}RUNNING{SEP}{name}\n"
    with pytest.raises(CommandTimedOut):
        _backend(tmp_path, silent=5, listed=listed).start_lease("7", name, timeout_s=2)
    assert _calls(tmp_path) == 1


def test_at_most_lease_attempts_sruns_then_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess_backend, "LEASE_SILENT_S", 0.3)
    with pytest.raises(CommandTimedOut):
        _backend(tmp_path, silent=99).start_lease("7", "fsm-lease.r0123456789ab.1",
                                                  timeout_s=3)
    assert _calls(tmp_path) == subprocess_backend.LEASE_ATTEMPTS


#: a stand-in for srun: the first {failing} calls close their stdout, then say {error}
#: on stderr a moment later and exit 1 (as an srun whose step request met slurmctld
#: going down); the others start their task
SRUN_ENDS = """#!/bin/bash
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt {failing} ]; then exec >&-; sleep 1; echo "srun: error: {error}" >&2; exit 1; fi
echo {up}; exec sleep 300
"""


def _ending(tmp_path: Path, failing: int, error: str) -> SubprocessBackend:
    backend = _backend(tmp_path, silent=0)
    (tmp_path / "bin" / "srun").write_text(SRUN_ENDS.format(
        count=tmp_path / "count", failing=failing, error=error, up=LEASE_UP))
    return backend


def test_an_srun_that_ends_as_the_controller_restarts_is_asked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The campaign's 24.11 ``ctld`` point (run r1324644913a2): the agent's lease
    ``srun``, started 2.5 s before slurmctld was told to stop, ended without its task
    and the run ended ERROR 3.7 s later, its job not started."""
    monkeypatch.setattr(subprocess_backend, "LEASE_RETRY_PAUSE_S", 0.1)
    lease = _ending(tmp_path, 1, "Unable to create step for job 7: Zero Bytes were "
                    "transmitted or received").start_lease("7", "fsm-lease.r0123456789ab.1",
                                                           timeout_s=30)
    try:
        assert lease.alive()
        assert _calls(tmp_path) == 2
    finally:
        lease.stop(grace_s=2)


def test_an_srun_that_ends_says_why_not_that_it_timed_out(tmp_path: Path) -> None:
    """Its stdout closed before it exited: the error is what it said (the allocation
    gone: not asked again), never "timed out after 60 s" (the 24.11 run's report said
    so 3.7 s after its start)."""
    with pytest.raises(JobNotFound, match="Invalid job id"):
        _ending(tmp_path, 9, "Unable to create step for job 7: Invalid job id specified"
                ).start_lease("7", "fsm-lease.r0123456789ab.1", timeout_s=60)
    assert _calls(tmp_path) == 1
