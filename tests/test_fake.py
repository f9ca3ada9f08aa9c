"""The FakeCluster itself: it must behave like Slurm where the procedure looks."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    ScriptRequest,
    SlurmBackend,
    StepRequest,
)
from slurm_fsm.duration import Duration
from slurm_fsm.errors import AllocationFailed, CommandFailed, ControllerUnreachable, JobNotFound
from slurm_fsm.testing import FakeCluster, FakeScript


def alloc(fake: FakeCluster, tmp_path: Path, nodes: int = 2, limit: str = "01:00:00") -> str:
    return fake.allocate(AllocationRequest(
        partition="batch", account="acct", nodes=nodes, time_limit=Duration.parse(limit),
        job_name="acct-trtllm.persistent", log_path=tmp_path / ".salloc.log"))


def test_fixture_from_the_pytest_plugin(fake_cluster: FakeCluster) -> None:
    assert isinstance(fake_cluster, SlurmBackend)
    assert fake_cluster.partitions == {"batch": ["node01", "node02", "node03", "node04"]}
    assert fake_cluster.calls == []


def test_time_left_shrinks_and_allocation_expires(fake_cluster: FakeCluster,
                                                  tmp_path: Path) -> None:
    job = alloc(fake_cluster, tmp_path, limit="00:10:00")
    info = fake_cluster.query_job(job)
    assert (info.state, info.time_left.seconds, info.nodelist) == ("RUNNING", 600, "node[01-02]")
    fake_cluster.clock.advance(240)
    assert fake_cluster.query_job(job).time_left.seconds == 360
    fake_cluster.clock.advance(360)
    with pytest.raises(JobNotFound):
        fake_cluster.query_job(job)
    assert fake_cluster.job_outcome(job).state == "TIMEOUT"


def test_fault_injection_and_controller_down(fake_cluster: FakeCluster, tmp_path: Path) -> None:
    job = alloc(fake_cluster, tmp_path)
    fake_cluster.fail_next("query_job", JobNotFound(job), times=2)
    for _ in range(2):
        with pytest.raises(JobNotFound):
            fake_cluster.query_job(job)
    assert fake_cluster.query_job(job).state == "RUNNING"
    fake_cluster.controller_down()
    with pytest.raises(ControllerUnreachable, match="Unable to contact slurm controller"):
        fake_cluster.find_jobs("x", "tester")
    assert fake_cluster.expand_nodelist("n[1-3,5]") == ["n1", "n2", "n3", "n5"]
    fake_cluster.bring_controller_up()
    assert [j.job_id for j in fake_cluster.find_jobs("acct-trtllm.persistent", "tester")] == [job]
    assert fake_cluster.ops().count("query_job") == 3


def test_named_containers_persist_per_node(fake_cluster: FakeCluster, tmp_path: Path) -> None:
    job = alloc(fake_cluster, tmp_path)
    missing = fake_cluster.run_step(StepRequest(job_id=job, argv=("true",), nodes=2,
                                                            container=ContainerOptions(name="c")))
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    imported = fake_cluster.run_step(
        StepRequest(job_id=job, argv=("true",), nodes=2,
                    container=ContainerOptions(name="c", image="img:1")))
    assert imported.exit_code == 0
    fake_cluster.run_step(StepRequest(job_id=job, argv=("pip", "install", "x"), nodes=2,
                                      container=ContainerOptions(name="c", writable=True)))
    fake_cluster.run_step(StepRequest(job_id=job, argv=("pip", "install", "y"), nodes=2,
                                      container=ContainerOptions(name="c")))
    assert fake_cluster.nodes["node02"].containers["c"].packages == ["pip install x"]
    assert "c" not in fake_cluster.nodes["node03"].containers
    hosts = fake_cluster.run_step(StepRequest(job_id=job, argv=("hostname",), nodes=2))
    assert hosts.stdout.split() == ["node01", "node02"]


def test_allocation_errors_write_the_salloc_log(fake_cluster: FakeCluster, tmp_path: Path) -> None:
    with pytest.raises(AllocationFailed, match="Invalid partition name specified"):
        fake_cluster.allocate(AllocationRequest(
            partition="nope", account="acct", nodes=1, time_limit=Duration.parse("10"),
            job_name="n", log_path=tmp_path / ".salloc.log"))
    assert "invalid partition specified: nope" in (tmp_path / ".salloc.log").read_text()
    with pytest.raises(AllocationFailed, match="Requested node configuration"):
        alloc(fake_cluster, tmp_path, nodes=9)


def test_batch_job_runs_writes_its_output_and_is_accounted(fake_cluster: FakeCluster,
                                                           tmp_path: Path) -> None:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --output=out_%j.log\n#SBATCH -t 00:05:00\nsrun x\n")
    fake_cluster.script(script, FakeScript(lines=("a", "b", "c"), exit_code=3))
    job = fake_cluster.submit(BatchRequest(script_path=script, work_dir=tmp_path, job_name="t"))
    assert fake_cluster.query_job(job).state == "RUNNING"
    fake_cluster.clock.advance(10)
    with pytest.raises(JobNotFound):
        fake_cluster.query_job(job)
    out = fake_cluster.job_outcome(job)
    assert (out.state, out.exit_code, out.elapsed.seconds) == ("FAILED", 3, 3)
    assert (tmp_path / f"out_{job}.log").read_text() == "a\nb\nc\n"
    with pytest.raises(CommandFailed, match="Invalid account"):
        fake_cluster.submit(BatchRequest(script_path=script, work_dir=tmp_path, account="bad"))


def test_persistent_script_is_a_step_that_can_be_cancelled(fake_cluster: FakeCluster,
                                                           tmp_path: Path) -> None:
    job = alloc(fake_cluster, tmp_path)
    script = tmp_path / "hang.slurm"
    fake_cluster.script(script, FakeScript(lines=("start", "Hang detected"), hang=True))
    run = fake_cluster.start_script(ScriptRequest(script_path=script, log_path=tmp_path / "log.txt",
                                                  env={"SLURM_JOB_ID": job}, cwd=tmp_path))
    fake_cluster.clock.advance(5)
    assert run.poll() is None
    steps = fake_cluster.list_steps(job)
    assert [s.full_id for s in steps] == [f"{job}.0"]
    fake_cluster.cancel(job, "0")
    assert run.poll() == 143
    assert fake_cluster.query_job(job).state == "RUNNING"  # the allocation stays
    assert (tmp_path / "log.txt").read_text() == "start\nHang detected\n"


def test_make_spec_fits_the_default_fake_and_checks_like_a_file(tmp_path: Path) -> None:
    from slurm_fsm import Executor, SpecError, Status
    from slurm_fsm.testing import make_spec

    spec = make_spec(tmp_path, model_name="qwen", slurm_params={"nodes": 2})
    assert spec.model_name == "qwen" and spec.slurm_params.nodes == 2
    assert spec.slurm_params.partition == "batch" and spec.script_path.is_file()
    fake = FakeCluster()
    fake.script(spec.script_path, FakeScript(lines=("=== 1 passed in 0.1s ===",)))
    assert Executor(spec, fake, clock=fake.clock).run().status is Status.PASSED
    with pytest.raises(SpecError, match=r"slurm_params\.nodes"):
        make_spec(tmp_path, slurm_params={"nodes": 0})


def test_executor_on_a_fake_uses_the_fakes_clock_by_default(tmp_path: Path) -> None:
    """Without ``clock=``: a hung script is a TIMEOUT on the fake's clock, at once, and
    no real sleep happens (the system clock gave FAILED/143 after real seconds)."""
    import time

    from slurm_fsm import Executor, Status
    from slurm_fsm.testing import make_spec

    spec = make_spec(tmp_path, monitor_timeout_seconds=60)
    fake = FakeCluster()
    fake.script(spec.script_path, FakeScript(lines=("started",), hang=True))
    executor = Executor(spec, fake)
    assert executor.clock is fake.clock
    t = time.monotonic()
    report = executor.run()
    assert time.monotonic() - t < 5
    assert report.status is Status.TIMEOUT, report.summary
    assert fake.clock.now() - 1_000_000.0 >= 60  # the monitor waited on fake time


def test_allocation_on_a_fake_uses_the_fakes_clock(tmp_path: Path) -> None:
    from slurm_fsm import Allocation

    fake = FakeCluster()
    assert Allocation(tmp_path, fake).clock is fake.clock


# ----------------------------------------------------- run_scripts: the script runs here


def _srun(tmp_path: Path, *args: str, nodes: int = 2, tpn: int = 1) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NTASKS_PER_NODE": str(tpn),
           "SLURM_FSM_FAKE_NODES": " ".join(f"node{i:02d}" for i in range(1, nodes + 1))}
    from slurm_fsm.testing import srun

    proc = subprocess.run([sys.executable, "-I", "-S", srun.__file__, *args], env=env,
                          capture_output=True, text=True, timeout=30, cwd=tmp_path)
    return proc.returncode, proc.stdout, proc.stderr


TASK = 'echo "$SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $SLURMD_NODENAME"'


@pytest.mark.parametrize(("args", "lines"), [
    ((), ["0 0 0 node01", "1 1 0 node02"]),  # default: every node, its tasks per node
    (("-N", "1"), ["0 0 0 node01"]),
    (("-N2", "--ntasks-per-node=2"), ["0 0 0 node01", "1 0 1 node01", "2 1 0 node02",
                                      "3 1 1 node02"]),
    (("--ntasks", "3", "--jobid=5", "--overlap"), ["0 0 0 node01", "1 0 1 node01",
                                                   "2 1 0 node02"]),
])
def test_srun_shim_runs_one_process_per_task(tmp_path: Path, args: tuple[str, ...],
                                             lines: list[str]) -> None:
    code, out, _err = _srun(tmp_path, *args, "bash", "-c", TASK)
    assert code == 0
    assert sorted(out.splitlines()) == lines


def test_srun_shim_errors_as_srun_does(tmp_path: Path) -> None:
    code, _out, err = _srun(tmp_path, "-N", "3", "true")
    assert code == 1 and "srun: error: Only allocated 2 nodes asked for 3" in err
    code, _out, err = _srun(tmp_path, "bash", "-c", 'exit $((SLURM_PROCID + 3))')
    assert code == 4
    assert "srun: error: node02: task 1: Exited with exit code 4" in err
    code, _out, err = _srun(tmp_path, "no-such-command-here")
    assert code == 2 and "execve(): no-such-command-here" in err
    code, _out, err = _srun(tmp_path, "--container-name=c", "true")
    assert code == 0 and "--container-name ignored" in err


def test_run_scripts_persistent_failure_and_timeout_are_real(tmp_path: Path) -> None:
    from slurm_fsm import Executor, Status
    from slurm_fsm.testing import make_spec

    spec = make_spec(tmp_path, workflow_type="custom", success_patterns="never printed",
                     monitor_timeout_seconds=1)
    spec.script_path.write_text("#!/bin/bash\necho \"job $SLURM_JOB_ID\"\nsrun -N1 true\n"
                                "exit 7\n")
    fake = FakeCluster(run_scripts=True)
    report = Executor(spec, fake).run()
    assert report.status is Status.FAILED and report.exit_code == 7
    assert "job 100" in Path(str(report.log_files["stdout"])).read_text()
    spec.script_path.write_text("#!/bin/bash\necho started\nsrun sleep 30\n")
    report = Executor(spec, fake).run()
    assert report.status is Status.TIMEOUT, report.summary
    assert (report.elapsed_s or 0) < 15
    assert fake.active_jobs()[0].steps == {}  # the step is gone, the allocation stays


def test_run_scripts_one_shot_runs_the_batch_script(tmp_path: Path) -> None:
    from slurm_fsm import Executor, Status
    from slurm_fsm.testing import make_spec

    spec = make_spec(tmp_path, workflow_type="custom", success_patterns="done on",
                     persistent_mode=False, log_file_pattern="out_%j.log")
    spec.script_path.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output=out_%j.log\n"
                                "srun bash -c 'echo \"done on $SLURMD_NODENAME\"'\n")
    report = Executor(spec, FakeCluster(run_scripts=True)).run()
    assert report.status is Status.PASSED, report.summary
    log = Path(str(report.log_files["stdout"])).read_text()
    assert sorted(log.split("\n")[:2]) == ["done on node01", "done on node02"]
    spec.script_path.write_text("#!/bin/bash\n#SBATCH --output=out_%j.log\necho nope\nexit 3\n")
    report = Executor(spec, FakeCluster(run_scripts=True)).run()
    assert report.status is Status.FAILED and report.exit_code == 3
