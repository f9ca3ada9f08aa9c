"""A one-shot run never returns while the job it cancelled still holds its nodes
(issue 23, K2: Slurm 24.11 keeps a job cancelled right after its start COMPLETING)."""

from __future__ import annotations

from pathlib import Path

from slurm_fsm import monitor
from slurm_fsm.backend import JobInfo
from slurm_fsm.errors import JobNotFound
from slurm_fsm.jobstate import JobState
from slurm_fsm.testing.fake import FakeClock


class Completing:
    """squeue's answers: RUNNING until cancelled, then COMPLETING ``rows`` times, then
    no row (``rows`` None: COMPLETING for ever)."""

    def __init__(self, clock: FakeClock, rows: int | None) -> None:
        self.clock = clock
        self.rows = rows
        self.cancelled_at: float | None = None
        self.queries_after_cancel: list[float] = []

    def cancel(self, job_id: str, step_id: str | None = None) -> None:
        self.cancelled_at = self.clock.now()

    def query_job(self, job_id: str) -> JobInfo:
        if self.cancelled_at is None:
            return JobInfo(job_id=job_id, state=JobState.RUNNING)
        self.queries_after_cancel.append(self.clock.now())
        if self.rows is not None and len(self.queries_after_cancel) > self.rows:
            raise JobNotFound(job_id)
        return JobInfo(job_id=job_id, state=JobState.COMPLETING)


def watch(tmp_path: Path, backend: Completing, clock: FakeClock) -> monitor.Watch:
    log = tmp_path / "job.out"
    log.write_text("working\n")
    messages: list[str] = []
    result = monitor.watch_batch_job(
        "7", backend=backend, log_path=log, timeout_s=0.0,  # type: ignore[arg-type]
        clock=clock, on_message=messages.append)
    result.messages.extend(m for m in messages if m not in result.messages)
    return result


def test_a_cancelled_job_that_is_completing_is_waited_for(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = Completing(clock, rows=3)
    result = watch(tmp_path, backend, clock)
    assert result.timed_out and backend.cancelled_at is not None
    # asked until squeue had no row: 3 COMPLETING answers, then gone
    assert len(backend.queries_after_cancel) == 4
    assert clock.now() > backend.cancelled_at
    assert not [m for m in result.messages if "still" in m]


def test_a_job_completing_for_ever_is_waited_for_within_reason(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = Completing(clock, rows=None)
    result = watch(tmp_path, backend, clock)
    assert backend.cancelled_at is not None
    waited = clock.now() - backend.cancelled_at
    assert monitor.CANCEL_SETTLE_S <= waited <= monitor.CANCEL_SETTLE_S + 5
    assert any("still COMPLETING" in m and "after it was cancelled" in m
               for m in result.messages), result.messages


def test_a_job_gone_at_once_costs_one_question(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = Completing(clock, rows=0)
    watch(tmp_path, backend, clock)
    assert len(backend.queries_after_cancel) == 1
    assert backend.queries_after_cancel[0] == backend.cancelled_at
