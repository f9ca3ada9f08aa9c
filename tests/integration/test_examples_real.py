"""The examples under examples/ and the demo, on the real local cluster."""

from __future__ import annotations

import uuid
from pathlib import Path

import attrs
import pytest

from slurm_fsm import demo
from slurm_fsm.executor import Executor
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slurm


def example_spec(kind: str, root: Path, cluster: ClusterInfo, **over: object) -> JobSpec:
    spec = JobSpec.from_file(EXAMPLES / kind / "job_spec.json")
    return attrs.evolve(
        spec, repo_root=root, work_dir=root / "work",
        slurm_params=attrs.evolve(spec.slurm_params, partition=cluster.partition,
                                  account=cluster.account),
        alloc_job_name=f"{cluster.account}-examples-{uuid.uuid4().hex[:8]}.persistent",
        **over,
    )


@pytest.mark.parametrize(("kind", "check"), [
    ("pytest", lambda r: r.metrics["passed"] == 2 and r.metrics["skipped"] == 1),
    ("eval", lambda r: r.metrics["accuracy"] == [71.25, 68.4]),
    ("benchmark", lambda r: r.metrics["done_marker"] == "8_done_example.txt"
     and r.metrics["throughput"]["Request Throughput (req/sec)"] == 12.5),
    ("custom", lambda r: r.metrics["last_lines"][-1] == "custom job done"
     and r.metrics["last_lines"][:2] == ["n1", "n2"]),
])
def test_example_persistent_then_one_shot(local_cluster: ClusterInfo, tmp_path: Path,
                                          kind: str, check: object) -> None:
    backend = SubprocessBackend()
    spec = example_spec(kind, tmp_path, local_cluster)
    try:
        report = Executor(spec, backend).run()
        assert report.status is Status.PASSED, report.render_text()
        assert callable(check) and check(report)
        one_shot = attrs.evolve(spec, persistent_mode=False)
        report2 = Executor(one_shot, backend).run()
        assert report2.status is Status.PASSED, report2.render_text()
        assert report2.slurm_state == "COMPLETED"
        assert check(report2)
    finally:
        released = Executor(attrs.evolve(spec, release_allocation=True), backend).run()
        assert released.status is Status.RELEASED


def test_the_demo_on_the_real_cluster(local_cluster: ClusterInfo, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_FSM_DEMO_PARTITION", local_cluster.partition)
    monkeypatch.setenv("SLURM_FSM_DEMO_ACCOUNT", local_cluster.account)
    assert demo.run_demo(quiet=True) == 0
    out = capsys.readouterr().out
    assert "running on this machine's Slurm" in out
    assert "NoState -> Validating -> Ready -> Running -> Ready" in out
    assert "the second reused allocation" in out
    assert "released." in out
