"""One fresh view of the allocation shared by the runs of one ``run_many`` (issue 28)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from slurm_fsm import Allocation, FakeCluster, Status
from slurm_fsm.errors import ControllerUnreachable
from slurm_fsm.sharedview import GPU_MAX_AGE_S, JOB_MAX_AGE_S, SharedView, active, current
from slurm_fsm.testing.fake import FakeClock

from conftest import SpecFactory


def _view(fake: FakeCluster) -> tuple[SharedView, str]:
    """A view over a fake with one running allocation."""
    from slurm_fsm.backend import AllocationRequest
    from slurm_fsm.duration import Duration
    from slurm_fsm.testing.specs import DEFAULT_ACCOUNT, DEFAULT_PARTITION

    view = SharedView(fake, fake.clock)
    job_id = fake.allocate(AllocationRequest(
        job_name="x", partition=DEFAULT_PARTITION, account=DEFAULT_ACCOUNT, nodes=1,
        gpus_per_node=1,
        time_limit=Duration.parse("01:00:00"), log_path=Path("/dev/null")))
    return view, job_id


def _ops(fake: FakeCluster) -> Counter[str]:
    return Counter(c.op for c in fake.calls)


def test_an_answer_is_reused_only_within_its_age() -> None:
    fake = FakeCluster()
    view, job_id = _view(fake)
    clock = view.clock
    assert isinstance(clock, FakeClock)
    before = _ops(fake)["query_job"]
    info, at = view.query_job(job_id)
    again, at2 = view.query_job(job_id)
    assert again == info and at2 == at  # reused: when it was asked, not when reused
    assert _ops(fake)["query_job"] == before + 1 and view.reused == 1
    clock.advance(JOB_MAX_AGE_S + 0.01)  # too old: asked again
    _, at3 = view.query_job(job_id)
    assert at3 > at and _ops(fake)["query_job"] == before + 2


def test_not_before_never_gives_an_answer_seen_or_older() -> None:
    fake = FakeCluster()
    view, job_id = _view(fake)
    before = _ops(fake)["query_job"]
    _, at = view.query_job(job_id)
    _, at2 = view.query_job(job_id, not_before=at)  # within the age, but already seen
    assert _ops(fake)["query_job"] == before + 2
    assert view.reused == 0 and at2 >= at


def test_errors_are_not_shared() -> None:
    calls = []

    class Flaky(FakeCluster):
        def query_job(self, job_id: str):  # type: ignore[no-untyped-def]
            calls.append(job_id)
            if len(calls) == 1:
                raise ControllerUnreachable("down")
            return super().query_job(job_id)

    fake = Flaky()
    view, job_id = _view(fake)
    with pytest.raises(ControllerUnreachable):
        view.query_job(job_id)
    view.query_job(job_id)  # asked again: the failure was not kept
    assert len(calls) == 2


def test_one_question_in_flight_at_a_time() -> None:
    """Siblings that ask while an answer is being asked wait for it: one srun."""
    started, release = threading.Event(), threading.Event()

    class Slow(FakeCluster):
        def gpu_processes(self, job_id, nodes, gpus_per_node=None):  # type: ignore[no-untyped-def]
            started.set()
            release.wait(10)
            return super().gpu_processes(job_id, nodes, gpus_per_node)

    fake = Slow(preflight=True)
    view, job_id = _view(fake)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(view.gpu_processes(job_id, 1, 1)))
               for _ in range(4)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert len(got) == 4 and _ops(fake)["gpu_processes"] == 1
    assert view.asked == 1 and view.reused == 3
    assert GPU_MAX_AGE_S >= JOB_MAX_AGE_S


def test_the_view_is_active_only_where_it_was_made_active() -> None:
    fake = FakeCluster()
    view, _ = _view(fake)
    assert current(fake) is None
    assert active(view).run(current, fake) is view
    assert active(view).run(current, FakeCluster()) is None  # another backend: not shared
    assert current(fake) is None


def _run_ops(make_spec: SpecFactory, many: bool) -> Counter[str]:
    fake = FakeCluster(preflight=True, gpus_per_node=8)
    specs = [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": 1})
             for i in range(4)]
    alloc = Allocation(specs[0].repo_root, fake)
    assert alloc.run(specs[0]).status is Status.PASSED  # warm
    n0 = len(fake.calls)
    reports = alloc.run_many(specs, max_parallel=4) if many else [alloc.run(s) for s in specs]
    assert [r.status for r in reports] == [Status.PASSED] * 4
    return Counter(c.op for c in fake.calls[n0:])


def test_run_many_shares_the_job_row_and_the_gpu_check(make_spec: SpecFactory) -> None:
    """Each run still validates and checks the GPUs; siblings share the answers."""
    ops = _run_ops(make_spec, many=True)
    assert ops["start_script"] == 4
    assert 1 <= ops["gpu_processes"] < 4
    assert 1 <= ops["query_job"] < 8  # step 0's and the allocation-end check's


def test_runs_one_after_another_each_ask_slurm(make_spec: SpecFactory) -> None:
    ops = _run_ops(make_spec, many=False)
    assert ops["gpu_processes"] == 4 and ops["query_job"] == 8
