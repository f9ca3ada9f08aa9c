"""Issue 17 item 14: ``Allocation.run`` of a spec with ``release_allocation: true`` does
what the spec says (step 0A: release and stop), as the Executor and the CLI do; it no
longer clears the flag and runs the job."""

from __future__ import annotations

import pytest

from slurm_fsm.allocation import Allocation
from slurm_fsm.results import Status
from slurm_fsm.testing import FakeCluster

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")


def test_run_of_a_release_spec_releases_and_runs_nothing(make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec()
    alloc = Allocation(spec.repo_root, fake)  # type: ignore[arg-type]
    first = alloc.run(spec)
    assert first.status is Status.PASSED
    job_id = first.allocation_id
    assert job_id is not None and fake.jobs[job_id].active
    fake.reset_calls()
    report = alloc.run(make_spec(release_allocation=True))
    assert report.status is Status.RELEASED, report.render_text()
    assert not fake.jobs[job_id].active  # cancelled
    assert fake.count("start_script") == 0 and fake.count("allocate") == 0
    assert alloc.state() is None
    assert alloc.reports[-1] is report


def test_run_of_a_release_spec_without_an_allocation_allocates_nothing(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster()
    spec = make_spec(release_allocation=True)
    report = Allocation(spec.repo_root, fake).run(spec)  # type: ignore[arg-type]
    assert report.status is Status.RELEASED
    assert fake.count("allocate") == 0 and fake.count("start_script") == 0
