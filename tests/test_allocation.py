"""The Allocation object: many specs through one allocation, status, release."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from slurm_fsm import (
    SHARING_RULES,
    Allocation,
    FakeCluster,
    FakeScript,
    SpecError,
    Status,
)
from slurm_fsm.allocation import batch_size
from slurm_fsm.events import Events

from conftest import SpecFactory

PYTEST_OK = ("===== 3 passed in 2.50s =====",)


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def test_three_specs_share_one_allocation_and_release(make_spec: SpecFactory,
                                                      fake: FakeCluster) -> None:
    specs = [make_spec(model_name=name) for name in ("llama", "mistral", "qwen")]
    fake.script(specs[0].script_path, FakeScript(lines=PYTEST_OK))
    with Allocation(specs[0].repo_root, fake) as alloc:
        reports = [alloc.run(s) for s in specs]
        assert [r.status for r in reports] == [Status.PASSED] * 3
        assert len({r.allocation_id for r in reports}) == 1
        assert fake.ops().count("allocate") == 1
        status = alloc.status()
        assert status.alive and status.job_id == reports[0].allocation_id
        assert status.slurm_state == "RUNNING"
        left = alloc.time_left()
        assert left is not None and left.is_finite and (left.seconds or 0) > 3600
    # released on leaving the block
    assert fake.ops().count("cancel") == 1
    assert not specs[0].state_path.exists()
    assert alloc.reports[-1].status is Status.RELEASED
    assert not alloc.status().exists


def test_without_with_nothing_is_released(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    alloc = Allocation.for_spec(spec, fake)
    assert alloc.run(spec).status is Status.PASSED
    assert "cancel" not in fake.ops()
    assert alloc.status().alive
    report = alloc.release()
    assert report.status is Status.RELEASED
    assert not alloc.status().exists


def test_a_spec_of_another_checkout_is_refused_before_slurm(make_spec: SpecFactory,
                                                           fake: FakeCluster,
                                                           tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = make_spec()
    alloc = Allocation(tmp_path / "elsewhere", fake)
    with pytest.raises(SpecError, match="repo_root"):
        alloc.run(spec)
    with pytest.raises(SpecError, match="persistent_mode"):
        Allocation(spec.repo_root, fake).run(make_spec(persistent_mode=False,
                                                        log_file_pattern="x_%j.out"))
    assert fake.calls == []


def test_release_needs_a_spec(tmp_path, fake: FakeCluster) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError, match="no spec"):
        Allocation(tmp_path, fake).release()
    assert fake.calls == []


def test_reuse_problems_apply_the_machine_rules_without_slurm(make_spec: SpecFactory,
                                                             fake: FakeCluster) -> None:
    spec = make_spec(docker_image="/img/a.sqsh", container_name="c1")
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    alloc = Allocation.for_spec(spec, fake)
    assert alloc.reuse_problems(spec) == [
        "no allocation yet (no state file): the first run allocates"]
    alloc.run(spec)
    fake.reset_calls()
    assert alloc.reuse_problems(spec) == []
    assert alloc.reuse_problems(make_spec(docker_image="/img/a.sqsh", container_name="c2"))[0] \
        .startswith("container_name 'c2' is not the imported 'c1'")
    bigger = make_spec(docker_image="/img/b.sqsh", container_name="c1",
                       slurm_params={"nodes": 2, "partition": "other"})
    problems = alloc.reuse_problems(bigger)
    assert any(p.startswith("partition 'other'") for p in problems)
    assert any(p.startswith("nodes 2 is more") for p in problems)
    assert any(p.startswith("docker_image '/img/b.sqsh'") for p in problems)
    assert fake.calls == []
    alloc.release()


def test_sharing_rules_are_written_down() -> None:
    text = " ".join(SHARING_RULES)
    for word in ("repo_root", "partition", "account", "nodes", "docker_image",
                 "container_name", "5 minutes"):
        assert word in text


def test_the_fake_clock_is_the_default(make_spec: SpecFactory, fake: FakeCluster) -> None:
    alloc = Allocation(make_spec().repo_root, fake)
    assert alloc.clock is fake.clock


# ------------------------------------------------------------ several jobs at once


def test_run_many_returns_the_reports_in_the_order_of_the_specs(make_spec: SpecFactory,
                                                                fake: FakeCluster) -> None:
    specs = [make_spec(model_name=name) for name in ("llama", "mistral", "qwen", "phi")]
    fake.script(specs[0].script_path, FakeScript(lines=PYTEST_OK))
    alloc = Allocation(specs[0].repo_root, fake)
    reports = alloc.run_many(specs, max_parallel=2)
    assert [r.status for r in reports] == [Status.PASSED] * 4
    logs = [Path(r.log_files["stdout"] or "").name for r in reports]
    assert [n.split("_")[0] for n in logs] == ["llama", "mistral", "qwen", "phi"]
    assert len({r.allocation_id for r in reports}) == 1
    assert fake.ops().count("allocate") == 1
    assert len(alloc.reports) == 4


def test_run_many_checks_every_spec_before_any_runs(make_spec: SpecFactory,
                                                    fake: FakeCluster, tmp_path: Path) -> None:
    good = make_spec()
    other = make_spec(repo_root=str(tmp_path / "elsewhere"))
    one_shot = make_spec(persistent_mode=False, log_file_pattern="x_%j.out")
    alloc = Allocation(good.repo_root, fake)
    with pytest.raises(SpecError) as err:
        alloc.run_many([good, other, one_shot])
    text = str(err.value)
    assert "specs[1] repo_root" in text and "specs[2] persistent_mode" in text
    assert fake.ops() == []
    with pytest.raises(ValueError, match="max_parallel"):
        alloc.run_many([good], max_parallel=0)
    assert alloc.run_many([]) == []


def test_submit_returns_a_handle_whose_result_is_the_report(make_spec: SpecFactory,
                                                            fake: FakeCluster) -> None:
    spec = make_spec()
    fake.script(spec.script_path, FakeScript(lines=PYTEST_OK))
    with Allocation(spec.repo_root, fake) as alloc:
        handles = [alloc.submit(spec), alloc.submit(spec)]
        reports = [h.result(timeout=60) for h in handles]
        assert all(h.done() for h in handles) and handles[0].spec is spec
        assert [r.status for r in reports] == [Status.PASSED] * 2
        assert reports[0].allocation_id == reports[1].allocation_id
    assert alloc.reports[-1].status is Status.RELEASED  # released after both ended


# ------------------------------------------------------ run_many sizes its allocation


class RecordingEvents(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def _gpu_specs(make_spec: SpecFactory, n: int, gpus: int = 1) -> list:  # type: ignore[type-arg]
    return [make_spec(model_name=f"m{i}", slurm_params={"gpus_per_node": gpus})
            for i in range(n)]


def _asked_gpus(fake: FakeCluster) -> list[int | None]:
    return [c.args["request"].gpus_per_node for c in fake.calls if c.op == "allocate"]


@pytest.mark.parametrize(("parallel", "node_gpus", "want"), [
    (None, 8, 4),   # four 1-GPU jobs at once: 4 GPUs
    (2, 8, 2),      # two at a time: 2
    (None, 2, 2),   # within what one node has
])
def test_run_many_makes_an_allocation_its_batch_fits_in(
        make_spec: SpecFactory, parallel: int | None, node_gpus: int, want: int) -> None:
    """The "Many jobs at once" example: without sizing, four 1-GPU jobs took turns on a
    1-GPU allocation. run_many sizes the allocation it makes for its batch."""
    fake = FakeCluster(preflight=True, gpus_per_node=node_gpus)
    specs = _gpu_specs(make_spec, 4)
    events = RecordingEvents()
    alloc = Allocation(specs[0].repo_root, fake, events=events)
    reports = alloc.run_many(specs, max_parallel=parallel)
    assert [r.status for r in reports] == [Status.PASSED] * 4
    assert _asked_gpus(fake) == [want]
    assert any(f"{want} GPU(s) per node" in m and "run_many" in m for m in events.messages)


def test_run_many_keeps_an_existing_allocation_and_an_explicit_size(
        make_spec: SpecFactory) -> None:
    fake = FakeCluster(preflight=True, gpus_per_node=8)
    specs = _gpu_specs(make_spec, 3)
    alloc = Allocation(specs[0].repo_root, fake)
    assert alloc.run(specs[0]).status is Status.PASSED  # a 1-GPU allocation exists
    alloc.run_many(specs)
    assert _asked_gpus(fake) == [1]  # kept: its size stands
    alloc.release()
    explicit = [attrs.evolve(s, alloc_gpus_per_node=2) for s in specs]
    alloc.run_many(explicit)
    assert _asked_gpus(fake) == [1, 2]  # the spec's own alloc_gpus_per_node wins


def test_run_many_does_not_guess_a_nodes_gpus() -> None:
    """Where the partition's GPUs per node are unknown, asking more than a node has
    would never start: the batch size is not raised."""
    from slurm_fsm.testing import make_spec as build

    assert batch_size([build(Path("/tmp/x"), slurm_params={"gpus_per_node": 1})] * 4,
                      4, None) is None
