"""The persistent path's phase boundary (issue 40 item 2): ``start()`` gives a ticket
once the script runs, ``collect(ticket)`` watches it to its end; ``run()`` is the two."""

from __future__ import annotations

from pathlib import Path

from slurm_fsm.events import Events
from slurm_fsm.monitor import PollPolicy
from slurm_fsm.persistent import PersistentRun, RunTicket
from slurm_fsm.runfacts import RunFacts
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory


def _path(spec: JobSpec, fake: FakeCluster) -> PersistentRun:
    return PersistentRun(spec, fake, clock=fake.clock, events=Events(), policy=PollPolicy(),
                         state_path=spec.state_path, lease_wait_s=60.0, warnings=[])


def test_start_gives_a_ticket_while_the_script_runs_and_collect_its_end(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=("3 passed in 1.0s",), exit_code=0))
    path = _path(spec, fake)
    ticket = path.start()
    assert isinstance(ticket, RunTicket)
    assert ticket.script.poll() is None  # started, not yet watched
    assert path.runs.path(ticket.run_id).exists()  # its record, for a reader elsewhere
    assert ticket.log.parent == spec.work_dir
    facts = path.collect(ticket)
    assert isinstance(facts, RunFacts) and facts.exit_code == 0
    assert not path.runs.path(ticket.run_id).exists()  # its steps are gone: record deleted


def test_a_run_that_ends_before_its_script_gives_facts_not_a_ticket(
        make_spec: SpecFactory, tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = make_spec(slurm_params={"partition": "nowhere"})
    fake.script(spec.script_path, FakeScript(lines=("ok",)))
    began = _path(spec, fake).start()
    assert isinstance(began, RunFacts) and began.failure is not None
