"""The pre-flight's GPU check is asked while the run's lease step starts (issue 28, one
warm run's time above its bare script): both are a step each, and one waited for the
other. Its answer, or its error, is the pre-flight's, as when it was asked there."""

from __future__ import annotations

import threading
from collections import Counter

from slurm_fsm import Allocation, FakeCluster, Status
from slurm_fsm.backend import GpuProcess
from slurm_fsm.errors import ControllerUnreachable
from slurm_fsm.nvsmi import NvidiaSmiFailed, NvidiaSmiFailure

from conftest import SpecFactory


class _Overlap(FakeCluster):
    """The lease step starts only once the GPU check has begun (or 10 s have passed):
    whether it had is noted for each lease."""

    def __init__(self) -> None:
        super().__init__(preflight=True, gpus_per_node=8)
        self.armed = False
        self.checking = threading.Event()
        self.seen: list[bool] = []

    def gpu_processes(self, job_id: str, nodes: int, gpus_per_node: int | None = None
                      ) -> list[GpuProcess]:
        self.checking.set()
        return super().gpu_processes(job_id, nodes, gpus_per_node)

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
        if self.armed:
            self.seen.append(self.checking.wait(10))
        return super().start_lease(job_id, name, timeout_s)


def test_the_gpu_check_is_asked_while_the_lease_step_starts(make_spec: SpecFactory) -> None:
    fake = _Overlap()
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED  # warm
    fake.armed, fake.checking = True, threading.Event()
    n0 = len(fake.calls)
    report = alloc.run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert fake.seen == [True]  # begun before the lease step was started
    ops = Counter(c.op for c in fake.calls[n0:])
    assert ops["gpu_processes"] == 1 and ops["start_lease"] == 1  # asked once, not twice


def test_the_early_check_finds_what_the_preflight_found(make_spec: SpecFactory) -> None:
    fake = FakeCluster(preflight=True, gpus_per_node=8)
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED
    node = next(iter(fake.nodes))
    fake.nodes[node].gpu_processes.append((4242, "python", "1000 MiB"))
    report = alloc.run(spec)
    assert report.status is Status.PASSED
    assert [w for w in report.warnings if "GPU processes found on" in w and "4242" in w]


def test_an_early_check_whose_nvidia_smi_failed_warns_as_before(
        make_spec: SpecFactory) -> None:
    class Failing(FakeCluster):
        def gpu_processes(self, job_id, nodes, gpus_per_node=None):  # type: ignore[no-untyped-def]
            super().gpu_processes(job_id, nodes, gpus_per_node)
            raise NvidiaSmiFailed([NvidiaSmiFailure(node="n1", exit_code=9,
                                                    text="NVIDIA-SMI has failed")])

    fake = Failing(preflight=True, gpus_per_node=8)
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    alloc = Allocation(spec.repo_root, fake)
    report = alloc.run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert [w for w in report.warnings if w.startswith("GPU check:")]


def test_an_early_check_that_could_not_ask_fails_the_preflight_as_before(
        make_spec: SpecFactory) -> None:
    class Down(FakeCluster):
        down = False

        def gpu_processes(self, job_id, nodes, gpus_per_node=None):  # type: ignore[no-untyped-def]
            super().gpu_processes(job_id, nodes, gpus_per_node)
            if self.down:
                raise ControllerUnreachable("srun: error: Unable to contact slurm controller")
            return []

    fake = Down(preflight=True, gpus_per_node=8)
    spec = make_spec(slurm_params={"gpus_per_node": 1})
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED
    fake.down = True
    n0 = len(fake.calls)
    report = alloc.run(spec)
    assert report.status is not Status.PASSED
    assert "Unable to contact slurm controller" in report.render_text()
    assert "start_script" not in [c.op for c in fake.calls[n0:]]  # the job never started


def test_a_job_without_gpus_asks_no_gpu_check(make_spec: SpecFactory) -> None:
    fake = FakeCluster(preflight=True, gpus_per_node=8)
    spec = make_spec(slurm_params={"gpus_per_node": 0})
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED
    assert "gpu_processes" not in [c.op for c in fake.calls]
