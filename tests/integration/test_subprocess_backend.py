"""SubprocessBackend against the real local Slurm 22.05 cluster.

Every job a test makes has a name of its own (``sfsm-sb-<pid>-<test>``) and is
cancelled at the end of the test by the ``cleanup`` fixture, whatever happens.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    JobInfo,
    JobOutcome,
    ScriptRequest,
    SlurmBackend,
    StepRequest,
    StepResult,
)
from slurm_fsm.convert import PositiveInt
from slurm_fsm.duration import Duration
from slurm_fsm.errors import AllocationFailed, CommandTimedOut, JobNotFound
from slurm_fsm.placement import script_env
from slurm_fsm.spec import SlurmParams
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev import localgpu
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import until, without_pyxis

pytestmark = pytest.mark.slurm

PREFIX = f"sfsm-sb-{os.getpid()}"


class Cleanup:
    """Names and ids of what a test made; all of it is cancelled at teardown."""

    def __init__(self, backend: SubprocessBackend, user: str) -> None:
        self.backend = backend
        self.user = user
        self.names: list[str] = []
        self.ids: list[str] = []

    def name(self, suffix: str) -> str:
        name = f"{PREFIX}-{suffix}"
        self.names.append(name)
        return name

    def close(self) -> None:
        ids = set(self.ids)
        for name in self.names:
            ids |= {j.job_id for j in self.backend.find_jobs(name, self.user)}
        for job_id in ids:
            self.backend.cancel(job_id)


@pytest.fixture
def backend(local_cluster: ClusterInfo) -> SubprocessBackend:
    assert os.environ["SLURM_CONF"] == str(local_cluster.slurm_conf)
    return SubprocessBackend(timeout_s=30)


@pytest.fixture
def cleanup(backend: SubprocessBackend, local_cluster: ClusterInfo) -> Iterator[Cleanup]:
    c = Cleanup(backend, local_cluster.user)
    try:
        yield c
    finally:
        c.close()


def alloc_request(
    cluster: ClusterInfo, name: str, tmp_path: Path, *, nodes: int = 2, **over: object
) -> AllocationRequest:
    fields: dict[str, object] = {
        "partition": cluster.partition,
        "account": cluster.account,
        "nodes": nodes,
        "time_limit": Duration.parse("10:00"),
        "job_name": name,
        "log_path": tmp_path / "work_dirs" / ".salloc.log",
        "user": cluster.user,
    }
    fields.update(over)
    return AllocationRequest(**fields)  # type: ignore[arg-type]


def running(backend: SubprocessBackend, job_id: str) -> JobInfo:
    def probe() -> JobInfo | None:
        info = backend.query_job(job_id)
        return info if info.state == "RUNNING" else None

    return until(f"job {job_id} RUNNING", probe)


def gone(backend: SubprocessBackend, job_id: str) -> JobNotFound:
    def probe() -> JobNotFound | None:
        try:
            backend.query_job(job_id)
        except JobNotFound as exc:
            return exc
        return None

    return until(f"job {job_id} gone from squeue", probe)


def test_is_a_slurm_backend(backend: SubprocessBackend, local_cluster: ClusterInfo) -> None:
    assert isinstance(backend, SlurmBackend)
    assert backend.current_user() == local_cluster.user


def two_nodes(cluster: ClusterInfo) -> SlurmParams:
    """A job of one task on each of two nodes (what the scripts here ask)."""
    return SlurmParams(cluster.partition, cluster.account, nodes=PositiveInt(2),
                       ntasks_per_node=PositiveInt(1))


def test_allocation_lifecycle(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """allocate 2 nodes -> RUNNING -> a step on both -> list/cancel a step -> cancel the job."""
    request = alloc_request(local_cluster, cleanup.name("life"), tmp_path)
    t0 = time.monotonic()
    job_id = backend.allocate(request)
    cleanup.ids.append(job_id)
    info = running(backend, job_id)
    print(f"allocate -> RUNNING: {time.monotonic() - t0:.3f} s")
    assert info.name == request.job_name
    assert info.user == local_cluster.user
    assert info.partition == local_cluster.partition
    assert info.num_nodes == 2
    nodes = backend.expand_nodelist(info.nodelist)
    assert len(nodes) == 2 and set(nodes) <= set(local_cluster.nodes)
    assert backend.compress_nodelist(nodes) == info.nodelist
    assert info.time_left.is_finite and 0 < (info.time_left.seconds or 0) <= 600
    assert "Granted job allocation" in request.log_path.read_text()

    t0 = time.monotonic()
    result = backend.run_step(StepRequest(job_id=job_id, argv=("hostname",), nodes=2))
    print(f"run_step hostname on 2 nodes: {time.monotonic() - t0:.3f} s")
    assert result.exit_code == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(nodes)

    failing = backend.run_step(
        StepRequest(job_id=job_id, argv=("bash", "-c", "echo oops >&2; exit 3"), nodes=1)
    )
    assert failing.exit_code == 3
    assert "oops" in failing.stderr

    assert backend.gpu_processes(job_id, 2) == []  # no nvidia-smi on these nodes
    assert backend.list_steps(job_id) == []

    # a long step, seen by list_steps, cancelled alone: the allocation stays.
    # Its tasks say when they run: a step cancelled while srun still launches it
    # ends with "aborted before step completely launched", not "CANCELLED" (seen in CI).
    outcome: list[StepResult] = []
    started = tmp_path / "started"
    started.mkdir()
    script = f"touch {shlex.quote(str(started))}/$SLURM_PROCID; exec sleep 60"
    long_step = StepRequest(job_id=job_id, argv=("bash", "-c", script), nodes=2, timeout_s=60)
    thread = threading.Thread(target=lambda: outcome.append(backend.run_step(long_step)))
    thread.start()
    try:
        until("both tasks run", lambda: len(list(started.iterdir())) == 2 or None)
        steps = until("the long step", lambda: backend.list_steps(job_id) or None)
        (step,) = steps
        assert step.job_id == job_id and step.step_id.isdigit()
        assert step.name == "bash" and step.state == "RUNNING"
        t0 = time.monotonic()
        backend.cancel(job_id, step.step_id)
        thread.join(timeout=30)
        print(f"cancel step until srun returned: {time.monotonic() - t0:.3f} s")
    finally:
        if thread.is_alive():
            backend.cancel(job_id)
            thread.join(timeout=30)
    assert outcome and outcome[0].exit_code != 0
    assert f"STEP {job_id}.{step.step_id}" in outcome[0].stderr
    assert "CANCELLED" in outcome[0].stderr
    assert until("no steps", lambda: backend.list_steps(job_id) == [] or None)
    assert backend.query_job(job_id).state == "RUNNING"

    t0 = time.monotonic()
    backend.cancel(job_id)
    err = gone(backend, job_id)
    print(f"cancel job until gone from squeue: {time.monotonic() - t0:.3f} s")
    assert err.job_id == job_id
    with pytest.raises(JobNotFound):
        backend.run_step(StepRequest(job_id=job_id, argv=("true",), nodes=1))
    backend.cancel(job_id)  # a gone job is not an error
    assert backend.find_jobs(request.job_name, local_cluster.user) == []


def test_step_timeout_ends_the_step_not_the_allocation(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    job_id = backend.allocate(alloc_request(local_cluster, cleanup.name("tmo"), tmp_path, nodes=1))
    cleanup.ids.append(job_id)
    running(backend, job_id)
    t0 = time.monotonic()
    with pytest.raises(CommandTimedOut) as caught:
        backend.run_step(StepRequest(job_id=job_id, argv=("sleep", "60"), nodes=1, timeout_s=1))
    assert time.monotonic() - t0 < 15
    assert caught.value.timeout_s == 1
    assert caught.value.argv[-2:] == ["sleep", "60"]
    assert until("the step ended", lambda: backend.list_steps(job_id) == [] or None)
    assert backend.query_job(job_id).state == "RUNNING"


def test_script_srun_lands_in_the_allocation(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    job_id = backend.allocate(alloc_request(local_cluster, cleanup.name("script"), tmp_path))
    cleanup.ids.append(job_id)
    info = running(backend, job_id)
    script = tmp_path / "job.slurm"
    script.write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            #SBATCH --nodes=2
            echo "job=$SLURM_JOB_ID pwd=$(pwd)"
            srun hostname
            exit 4
            """
        )
    )
    log_path = tmp_path / "work" / "llama_custom.log"
    log_path.parent.mkdir()
    log_path.write_text("old content that must go\n")
    t0 = time.monotonic()
    running_script = backend.start_script(
        ScriptRequest(script_path=script, log_path=log_path, cwd=tmp_path,
                      env=script_env(info, two_nodes(local_cluster)))
    )
    assert running_script.log_path == log_path
    code = until("the script", running_script.poll)
    print(f"bash script with srun in the allocation: {time.monotonic() - t0:.3f} s")
    assert code == 4
    text = log_path.read_text()
    assert "old content" not in text
    assert f"job={job_id} pwd={tmp_path}" in text
    assert sorted(text.splitlines()[1:]) == sorted(backend.expand_nodelist(info.nodelist))


def test_terminate_script_ends_its_step(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    job_id = backend.allocate(alloc_request(local_cluster, cleanup.name("term"), tmp_path))
    cleanup.ids.append(job_id)
    info = running(backend, job_id)
    script = tmp_path / "hang.sh"
    script.write_text("srun sleep 120\n")
    started = backend.start_script(
        ScriptRequest(script_path=script, log_path=tmp_path / "hang.log",
                      env=script_env(info, two_nodes(local_cluster)), cwd=tmp_path)
    )
    until("the hanging step", lambda: backend.list_steps(job_id) or None)
    t0 = time.monotonic()
    started.terminate()
    print(f"terminate script: {time.monotonic() - t0:.3f} s")
    assert started.poll() is not None
    assert until("no steps", lambda: backend.list_steps(job_id) == [] or None)
    assert backend.query_job(job_id).state == "RUNNING"


def test_allocate_bad_partition(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    request = alloc_request(
        local_cluster, cleanup.name("badpart"), tmp_path, partition="nope", nodes=1
    )
    t0 = time.monotonic()
    with pytest.raises(AllocationFailed) as caught:
        backend.allocate(request)
    print(f"allocate with a bad partition fails in {time.monotonic() - t0:.3f} s")
    assert "Invalid partition name specified" in str(caught.value)
    assert "Invalid partition name specified" in caught.value.stderr_tail
    assert caught.value.returncode == 1
    assert caught.value.argv[:2] == ["salloc", "--no-shell"]
    assert "Invalid partition name specified" in request.log_path.read_text()
    assert backend.find_jobs(request.job_name, local_cluster.user) == []


def test_allocate_bad_account(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    request = alloc_request(
        local_cluster, cleanup.name("badacct"), tmp_path, account="nope", nodes=1
    )
    with pytest.raises(AllocationFailed) as caught:
        backend.allocate(request)
    assert "Invalid account or account/partition combination specified" in str(caught.value)
    assert backend.find_jobs(request.job_name, local_cluster.user) == []


def test_allocate_twice_makes_one_job(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    request = alloc_request(local_cluster, cleanup.name("twice"), tmp_path, nodes=1)
    first = backend.allocate(request)
    cleanup.ids.append(first)
    assert backend.allocate(request) == first
    assert [j.job_id for j in backend.find_jobs(request.job_name, local_cluster.user)] == [first]


def test_allocation_outlives_its_creator(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """A child python allocates, is SIGKILLed: the job stays RUNNING, no salloc is left."""
    name = cleanup.name("orphan")
    child = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from slurm_fsm.backend import AllocationRequest
        from slurm_fsm.duration import Duration
        from slurm_fsm.subprocess_backend import SubprocessBackend
        request = AllocationRequest(
            partition={local_cluster.partition!r}, account={local_cluster.account!r},
            nodes=1, time_limit=Duration.parse("10:00"), job_name={name!r},
            log_path=Path({str(tmp_path / ".salloc.log")!r}), user={local_cluster.user!r},
        )
        print(SubprocessBackend().allocate(request), flush=True)
        time.sleep(300)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert proc.stdout is not None
        job_id = proc.stdout.readline().strip()
        assert job_id.isdigit(), job_id
        cleanup.ids.append(job_id)
        running(backend, job_id)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    time.sleep(1.0)
    assert backend.query_job(job_id).state == "RUNNING"
    assert until("salloc to exit", lambda: not salloc_processes(name) or None)
    result = backend.run_step(StepRequest(job_id=job_id, argv=("true",), nodes=1))
    assert result.exit_code == 0


def salloc_processes(job_name: str) -> list[int]:
    """Pids of salloc processes of ours on this host with ``job_name`` (read-only scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"salloc") and f"--job-name={job_name}".encode() in argv:
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
    return found


def test_find_jobs_sees_only_our_named_job(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    ours = cleanup.name("find-ours")
    other = cleanup.name("find-other")
    job_id = backend.allocate(alloc_request(local_cluster, ours, tmp_path, nodes=1))
    cleanup.ids.append(job_id)
    script = tmp_path / "other.sh"
    script.write_text("#!/bin/bash\nsleep 60\n")
    other_id = backend.submit(
        BatchRequest(
            script_path=script,
            work_dir=tmp_path,
            job_name=other,
            partition=local_cluster.partition,
            account=local_cluster.account,
        )
    )
    cleanup.ids.append(other_id)
    found = backend.find_jobs(ours, local_cluster.user)
    assert [j.job_id for j in found] == [job_id]
    assert found[0].name == ours and found[0].user == local_cluster.user
    assert [j.job_id for j in backend.find_jobs(other, local_cluster.user)] == [other_id]
    assert backend.find_jobs(f"{PREFIX}-nothing", local_cluster.user) == []
    assert backend.find_jobs(ours, "nobody") == []


def wait_outcome(backend: SubprocessBackend, job_id: str) -> JobOutcome:
    gone(backend, job_id)

    def probe() -> JobOutcome | None:
        # sacct may still say RUNNING for a moment after the job left squeue
        outcome = backend.job_outcome(job_id)
        ended = outcome.state not in ("RUNNING", "PENDING", "COMPLETING")
        return outcome if outcome.source == "sacct" and ended else None

    return until(f"sacct row of {job_id}", probe)


@pytest.mark.parametrize(
    ("body", "state", "code"), [("echo hi", "COMPLETED", 0), ("exit 3", "FAILED", 3)]
)
def test_submit_and_outcome(
    backend: SubprocessBackend,
    cleanup: Cleanup,
    local_cluster: ClusterInfo,
    tmp_path: Path,
    body: str,
    state: str,
    code: int,
) -> None:
    script = tmp_path / "job.slurm"
    script.write_text(f'#!/bin/bash\necho "from=$FROM_ENV"\n{body}\n')
    work = tmp_path / "work"
    work.mkdir()
    t0 = time.monotonic()
    job_id = backend.submit(
        BatchRequest(
            script_path=script,
            work_dir=work,
            job_name=cleanup.name(f"batch-{code}"),
            partition=local_cluster.partition,
            account=local_cluster.account,
            env={"FROM_ENV": "passed"},
        )
    )
    cleanup.ids.append(job_id)
    assert job_id.isdigit()
    outcome = wait_outcome(backend, job_id)
    print(f"sbatch until sacct row: {time.monotonic() - t0:.3f} s")
    assert (outcome.job_id, outcome.state, outcome.exit_code) == (job_id, state, code)
    assert [s.job_id for s in outcome.steps] == [f"{job_id}.batch"]
    assert outcome.elapsed.is_finite
    output = work / f"slurm-{job_id}.out"
    assert output.read_text().startswith("from=passed\n")  # --chdir=work_dir, env passed
    # scontrol agrees while the job is within MinJobAge
    scontrol = backend.job_outcome_from_scontrol(job_id)
    assert (scontrol.state, scontrol.exit_code, scontrol.source) == (state, code, "scontrol")


def test_outcome_without_accounting_comes_from_scontrol(
    backend: SubprocessBackend, cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """The same cluster seen through a slurm.conf copy with accounting_storage/none."""
    conf = tmp_path / "noacct.conf"
    conf.write_text(
        re.sub(
            r"(?m)^AccountingStorageType=.*$",
            "AccountingStorageType=accounting_storage/none",
            local_cluster.slurm_conf.read_text(),
        )
    )
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\nexit 3\n")
    job_id = backend.submit(
        BatchRequest(
            script_path=script,
            work_dir=tmp_path,
            job_name=cleanup.name("noacct"),
            partition=local_cluster.partition,
            account=local_cluster.account,
        )
    )
    cleanup.ids.append(job_id)
    gone(backend, job_id)
    no_accounting = SubprocessBackend(env={"SLURM_CONF": str(conf)})
    outcome = no_accounting.job_outcome(job_id)
    assert (outcome.state, outcome.exit_code, outcome.source) == ("FAILED", 3, "scontrol")
    with pytest.raises(JobNotFound):
        no_accounting.job_outcome("999999")


def test_unknown_job(backend: SubprocessBackend) -> None:
    with pytest.raises(JobNotFound):
        backend.query_job("999999")
    with pytest.raises(JobNotFound):
        backend.job_outcome("999999")
    backend.cancel("999999")
    backend.cancel("999999", "0")
    assert backend.list_steps("999999") == []


def test_no_pyxis_here(cleanup: Cleanup, local_cluster: ClusterInfo, tmp_path: Path) -> None:
    """A client without pyxis (the cluster's config with an empty plugstack)."""
    backend = SubprocessBackend(timeout_s=30, env=without_pyxis(local_cluster, tmp_path))
    assert backend.has_container_support() is False
    job_id = backend.allocate(
        alloc_request(local_cluster, cleanup.name("pyxis"), tmp_path, nodes=1)
    )
    cleanup.ids.append(job_id)
    running(backend, job_id)
    result = backend.run_step(
        StepRequest(
            job_id=job_id,
            argv=("true",),
            nodes=1,
            container=ContainerOptions(name="c", image="ubuntu:24.04"),
        )
    )
    assert result.exit_code != 0
    assert "--container-image" in result.stderr


def test_probe_gpu_name_reads_the_nodes_nvidia_smi(
    backend: SubprocessBackend, local_cluster: ClusterInfo
) -> None:
    """The local cluster's emulated GPUs answer as the real nvidia-smi does: the name
    and the compute capability (``--query-gpu=name,compute_cap``)."""
    name = backend.probe_gpu_name(local_cluster.partition, local_cluster.account)
    assert name == "NVIDIA H100 80GB HBM3 (sm_90)"


def test_probe_gpu_name_without_nvidia_smi(local_cluster: ClusterInfo) -> None:
    """A node with no nvidia-smi on its PATH: no GPU name, no error."""
    stand_in = str(localgpu.bin_dir(local_cluster.base_dir))
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != stand_in)
    backend = SubprocessBackend(timeout_s=30, env={"PATH": path})
    assert backend.probe_gpu_name(local_cluster.partition, local_cluster.account) is None
