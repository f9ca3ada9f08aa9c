"""A job that fits no successor with the margin (issue 27, found by benchmarks/stream.py).

On real 7-minute allocations under load, a job expecting 75 s (75 s + the 5-minute
margin = 375 s) arrived when the old allocation had 349 s left: it waited for the
successor, switched to it, found it had less than 375 s left too (it had been queued
for the short jobs before), queued another, waited, switched, and again: three
allocations and 100 s of step 0 for one job. A run that switched to a successor (the
freshest allocation there is: one queued now would have no more time left once set up)
starts its job there when the time left covers the job's expected duration +
:data:`slurm_fsm.handoff.SWITCHED_MARGIN_S`: never killed by the walltime, never a
chain of successors."""

from __future__ import annotations

import os

import pytest

from slurm_fsm.handoff import SWITCHED_MARGIN_S
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.paths import StatePaths
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import StateStore
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

HOUR = 3600
MARGIN = 300


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def machine(spec: JobSpec, fake: FakeCluster, *, warmer: bool = False) -> AllocationMachine:
    """A machine; with ``warmer`` a successor it queues is being set up by a (pretend)
    live warmer, as on a real cluster, so it is not usable at once."""
    return AllocationMachine(spec, fake, clock=fake.clock,  # type: ignore[arg-type]
                             warmer=(lambda _s: os.getpid()) if warmer else None)


def prepared_path(m: AllocationMachine) -> list[str]:
    assert m.prepare().state is State.Ready
    return list(m.path)


def live_allocations(fake: FakeCluster) -> list[str]:
    return [j.job_id for j in fake.jobs.values() if j.kind == "alloc" and j.active]


def spec_expecting(make_spec: SpecFactory, seconds: int) -> JobSpec:
    return make_spec(alloc_time_limit="01:00:00", expected_duration_seconds=seconds,
                     warm_successor=True, docker_image="nvcr.io/x:1", container_name="c")


def successor_up(make_spec: SpecFactory, fake: FakeCluster, up_s: int) -> str:
    """The state file's allocation and a successor queued for short jobs, RUNNING for
    ``up_s`` seconds (``3600 - up_s`` left), its set-up left to the run that needs it."""
    short = spec_expecting(make_spec, 600)
    assert machine(short, fake).prepare().state is State.Ready
    fake.clock.advance(HOUR - (600 + 600 + MARGIN))  # a successor is due for short jobs
    fake.pending_s = 120
    assert "QueueingSuccessor" in prepared_path(machine(short, fake))
    fake.pending_s = 0
    succ = StateStore(StatePaths.for_state_file(short.state_path).successor_state).read()
    assert succ is not None
    fake.clock.advance(120 + up_s)
    return succ.job_id


def test_a_job_that_fits_a_ready_successor_only_without_the_margin_runs_there(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    succ = successor_up(make_spec, fake, 300)  # 3300 s left
    long = spec_expecting(make_spec, 3100)  # 3100 + 300 > 3300 >= 3100 + 60
    m = machine(long, fake, warmer=True)
    assert m.prepare().state is State.Ready
    assert m.path.count("Switching") == 1, " ".join(m.path) + " | " + " ".join(m.notes)
    assert "AwaitingSuccessor" not in m.path and "TooShort" not in m.path, m.path
    assert m.alloc is not None and m.alloc.job_id == succ
    assert len(live_allocations(fake)) <= 2


def test_a_job_that_does_not_fit_it_even_so_is_not_run_there(
        make_spec: SpecFactory, fake: FakeCluster) -> None:
    succ = successor_up(make_spec, fake, 300)  # 3300 s left
    long = spec_expecting(make_spec, 3300 - SWITCHED_MARGIN_S + 1)
    m = machine(long, fake)  # no warmer: the run sets the next successor up itself
    assert m.prepare().state is State.Ready
    assert m.alloc is not None and m.alloc.job_id != succ, m.path
    assert fake.jobs[m.alloc.job_id].active
    assert len(live_allocations(fake)) <= 2
