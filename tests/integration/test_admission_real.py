"""Admission by time left (issue 27, part 1) on the real local Slurm cluster.

The allocation's time left is shortened with ``scontrol update TimeLimit`` (root on
the local cluster; users can only lower it too), so nothing here waits for time to
pass: a job whose expected duration plus the 5-minute margin exceeds the time left is
not started on the allocation; it runs on a new one, and the old one is cancelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.executor import Executor
from slurm_fsm.history import RunHistory, spec_key
from slurm_fsm.paths import StatePaths
from slurm_fsm.results import Status
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, jobs_named, make_spec, slurm, wait_gone

pytestmark = pytest.mark.slurm


def shorten(job_id: str, limit: str) -> None:
    proc = slurm("scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit}")
    assert proc.returncode == 0, proc.stderr


def test_a_job_longer_than_the_time_left_is_not_started_on_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("admit")
    script = tmp_path / "job.slurm"
    script.write_text('#!/bin/bash\nset -e\necho "ran in allocation $SLURM_JOB_ID"\n'
                      'srun true\n')
    # 20 minutes expected + 5 of margin: a 30-minute allocation admits it when fresh
    spec = make_spec(local_cluster, tmp_path, name, alloc_time_limit="00:30:00",
                     expected_duration_seconds=1200)
    first = Executor(spec, SubprocessBackend()).run()
    assert first.status is Status.PASSED, first.render_text()
    old = first.allocation_id
    assert old is not None

    shorten(old, "00:27:00")  # about 27 minutes left: 20 + 5 fits
    fits = Executor(spec, SubprocessBackend()).run()
    assert fits.status is Status.PASSED, fits.render_text()
    assert fits.allocation_id == old
    assert fits.path == ["NoState", "Validating", "Ready", "Running", "Ready"]

    shorten(old, "00:24:00")  # less than 25 minutes left: does not fit
    moved = Executor(spec, SubprocessBackend()).run()
    assert moved.status is Status.PASSED, moved.render_text()
    assert moved.path == ["NoState", "Validating", "TooShort", "Allocating", "Ready",
                          "Running", "Ready"]
    new = moved.allocation_id
    assert new is not None and new != old  # the job ran on the new allocation
    assert any(w.startswith(f"Allocation {old} has ") and "not started on it" in w
               for w in moved.warnings), moved.warnings
    wait_gone(old)
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]
    log = Path(moved.log_files["stdout"] or "").read_text()
    assert f"ran in allocation {new}\n" in log and old not in log, log
    history = RunHistory(StatePaths.for_state_file(spec.state_path).history)
    assert len(history.durations(spec_key(spec))) == 3
    assert [e.queue_wait_s is not None for e in history.entries()] == [True, False, True]
