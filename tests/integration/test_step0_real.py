"""Step 0 (procedure.md 0A-0F) over SubprocessBackend on the real local Slurm cluster.

Every allocation has a job name of its own (helpers.JobNames) and a repo root in
tmp_path; the ``names`` fixture cancels what is left of them at the end of each
test. The controller test runs on a second, private cluster of its own, never on
the shared one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import attrs
import pytest

from slurm_fsm.backend import StepRequest
from slurm_fsm.errors import NotOurJobError
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.preflight import ClusterPartition
from slurm_fsm.state import KEYS, AllocState
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    RecordingBackend,
    is_job_query,
    job_state,
    jobs_named,
    make_spec,
    slurm,
    spec_dict,
    until,
    wait_gone,
)

pytestmark = pytest.mark.slurm

T = TypeVar("T")


def state_of(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def ready(m: AllocationMachine) -> str:
    """Run step 0 to Ready and return the allocation's job id."""
    state = m.prepare().state
    assert state is State.Ready, (m.path, m.failure)
    assert m.alloc is not None
    return m.alloc.job_id


# ------------------------------------------------------------------------- 0C/0D/0E


def test_first_run_allocates_and_writes_the_state_file(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("first")
    spec = make_spec(local_cluster, tmp_path, name)
    backend = RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert m.prepare().state is State.Ready
    assert m.path == ["NoState", "Allocating", "Ready"]
    assert any("no docker_image" in n for n in m.notes)
    assert "srun" not in backend.tools()  # no image: no import, warm-up, install

    state = state_of(spec.state_path)
    assert list(state) == list(KEYS)
    job_id = str(state["job_id"])
    assert jobs_named(name, local_cluster.user) == [(job_id, "RUNNING")]
    nodelist = slurm("squeue", "-j", job_id, "-h", "-o", "%N").stdout.strip()
    assert state["nodelist"] == nodelist and nodelist in local_cluster.nodes
    assert state["partition"] == local_cluster.partition
    assert state["account"] == local_cluster.account
    assert state["nodes"] == 1 and state["time_limit"] == "00:30:00"
    assert state["container_name"] is None and state["docker_image"] is None
    assert state["installed"] is True
    assert f"Granted job allocation {job_id}" in spec.salloc_log.read_text()


def test_second_run_reuses_with_a_single_job_query(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = make_spec(local_cluster, tmp_path, names.new("reuse"))
    job_id = ready(AllocationMachine(spec, SubprocessBackend()))
    before = spec.state_path.read_bytes()

    backend = RecordingBackend()
    m = AllocationMachine(spec, backend)
    assert ready(m) == job_id
    assert m.path == ["NoState", "Validating", "Ready"]
    assert backend.tools() == ["squeue"]
    assert is_job_query(backend.argvs[0]) and job_id in backend.argvs[0]
    assert spec.state_path.read_bytes() == before


def test_more_nodes_reallocate_fewer_nodes_reuse(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("nodes")
    backend = SubprocessBackend()
    one = make_spec(local_cluster, tmp_path, name)
    two = make_spec(local_cluster, tmp_path, name, slurm_params={"nodes": 2})
    old = ready(AllocationMachine(one, backend))

    m = AllocationMachine(two, backend)
    new = ready(m)
    assert m.path == ["NoState", "Validating", "Incompatible", "Allocating", "Ready"]
    assert new != old
    wait_gone(old)
    assert slurm("squeue", "-j", new, "-h", "-o", "%T %D").stdout.split() == ["RUNNING", "2"]
    assert state_of(two.state_path)["nodes"] == 2

    m = AllocationMachine(one, backend)  # fewer nodes than the allocation has: reuse
    assert ready(m) == new
    assert m.path == ["NoState", "Validating", "Ready"]
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]


@pytest.mark.parametrize("limit", ["00:04:00", "00:05:00"])
def test_expiring_allocation_is_cancelled_and_replaced(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, limit: str) -> None:
    """An allocation with 5 minutes or less left (shortened with scontrol: the spec
    refuses an alloc_time_limit that short) is cancelled and replaced."""
    name = names.new("expiring")
    spec = make_spec(local_cluster, tmp_path, name, alloc_time_limit="00:30:00")
    backend = SubprocessBackend()
    old = ready(AllocationMachine(spec, backend))
    proc = slurm("scontrol", "update", f"JobId={old}", f"TimeLimit={limit}")
    assert proc.returncode == 0, proc.stderr
    left = slurm("squeue", "-j", old, "-h", "-o", "%L").stdout.strip()
    assert left.startswith(("3:", "4:", "5:0")), left  # <= 5 minutes left

    m = AllocationMachine(spec, backend)
    new = ready(m)
    assert m.path == ["NoState", "Validating", "Expiring", "Allocating", "Ready"]
    assert any(w.startswith(f"Allocation expiring soon: {old} has") for w in m.warnings)
    assert new != old
    wait_gone(old)
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]


def test_orphan_of_a_deleted_state_file_is_found_by_name_and_cancelled(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("orphan")
    spec = make_spec(local_cluster, tmp_path, name)
    backend = SubprocessBackend()
    orphan = ready(AllocationMachine(spec, backend))
    spec.state_path.unlink()

    # an orphan at any age (seconds old here, it would be adopted as another run's:
    # test_nonce_real.py::test_a_moment_old_allocation_of_another_run_is_adopted_...)
    m = AllocationMachine(spec, backend, orphan_grace_s=0)
    new = ready(m)
    assert m.path == ["NoState", "Allocating", "Ready"]
    assert new != orphan
    assert f"Released orphaned allocation {orphan} - state file was missing." in m.warnings
    wait_gone(orphan)
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]
    assert state_of(spec.state_path)["job_id"] == new


def test_allocation_cancelled_behind_our_back_is_dropped_and_replaced(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("gone")
    spec = make_spec(local_cluster, tmp_path, name)
    backend = SubprocessBackend()
    old = ready(AllocationMachine(spec, backend))
    assert slurm("scancel", old).returncode == 0
    wait_gone(old)

    logs: list[str] = []
    m = AllocationMachine(spec, backend, log=logs.append)
    new = ready(m)
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert f"Allocation {old} no longer exists; dropping the state file." in logs
    assert new != old
    assert state_of(spec.state_path)["job_id"] == new
    assert jobs_named(name, local_cluster.user) == [(new, "RUNNING")]


# ------------------------------------------------------------------------------- 0A


def test_release_cancels_and_removes_the_files(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("release")
    spec = make_spec(local_cluster, tmp_path, name)
    job_id = ready(AllocationMachine(spec, SubprocessBackend()))
    assert spec.salloc_log.exists()

    backend = RecordingBackend()
    m = AllocationMachine(make_spec(local_cluster, tmp_path, name, release_allocation=True),
                          backend)
    assert m.prepare().state is State.Released
    assert m.path == ["NoState", "Released"]
    assert m.history[-1].reason == f"Allocation {job_id} released."
    assert backend.tools() == ["squeue", "scancel"]  # verify owner, then cancel
    assert not spec.state_path.exists()
    assert not spec.salloc_log.exists()
    wait_gone(job_id, timeout=5)
    assert jobs_named(name, local_cluster.user) == []


def test_a_state_file_naming_another_job_never_cancels_it(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Someone else's job (here: ours, under another name) in the state file is refused by
    release and dropped by validation; it keeps running either way."""
    other_name = names.new("other", ".interactive")
    proc = slurm("salloc", "--no-shell", f"--partition={local_cluster.partition}",
                 f"--account={local_cluster.account}", "--time=10", f"--job-name={other_name}")
    assert proc.returncode == 0, proc.stderr
    ((other, _),) = until("the other job", lambda: jobs_named(other_name, local_cluster.user)
                          or None)
    name = names.new("mine")
    spec = make_spec(local_cluster, tmp_path, name)
    spec.state_path.parent.mkdir(parents=True)
    spec.state_path.write_text(AllocState(
        job_id=other, nodelist="n1", partition=local_cluster.partition,
        account=local_cluster.account, nodes=1, installed=True).to_json())
    before = spec.state_path.read_bytes()

    m = AllocationMachine(make_spec(local_cluster, tmp_path, name, release_allocation=True),
                          SubprocessBackend())
    assert m.prepare().state is State.Failed
    assert m.failure is not None and isinstance(m.failure.error, NotOurJobError)
    assert spec.state_path.read_bytes() == before
    assert job_state(other) == "RUNNING"

    m = AllocationMachine(spec, SubprocessBackend())
    new = ready(m)
    assert m.path == ["NoState", "Validating", "NoState", "Allocating", "Ready"]
    assert any("not ours" in w for w in m.warnings)
    assert new != other and job_state(other) == "RUNNING"


# ----------------------------------------------------------------------- salloc fails


@pytest.mark.parametrize(("params", "message"), [
    ({"partition": "nope"}, "Invalid partition name specified"),
    pytest.param({"account": localcluster.BAD_ACCOUNT},
                 "Invalid account or account/partition combination specified",
                 marks=pytest.mark.config(noenforce=False)),  # Slurm refuses it
], ids=["bad partition", "bad account"])
def test_salloc_refused_fails_with_slurms_message_and_leaves_nothing(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        params: dict[str, str], message: str) -> None:
    name = names.new("refused")
    spec = make_spec(local_cluster, tmp_path, name, slurm_params=params)

    class NoPreflight(SubprocessBackend):
        """What the pre-flight checks cannot see (a QOS limit, a changed cluster):
        salloc itself refuses. The checks catch these two first (test_preflight_real)."""

        def cluster_partitions(self) -> list[ClusterPartition]:
            return []

        def user_associations(self, user: str) -> None:
            return None

    m = AllocationMachine(spec, NoPreflight())
    assert m.prepare().state is State.Failed
    assert m.path == ["NoState", "Allocating", "Failed"]
    assert m.failure is not None and m.failure.step == "Allocating"
    assert message in m.failure.message
    assert not m.failure.state_file_kept
    assert not spec.state_path.exists()
    assert message in spec.salloc_log.read_text()
    assert jobs_named(name, local_cluster.user) == []


# ---------------------------------------------------------------------- multi-node


def test_two_node_allocation_runs_a_step_on_both_nodes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = make_spec(local_cluster, tmp_path, names.new("two"), slurm_params={"nodes": 2})
    backend = SubprocessBackend()
    job_id = ready(AllocationMachine(spec, backend))
    state = state_of(spec.state_path)
    nodes = backend.expand_nodelist(str(state["nodelist"]))
    assert len(nodes) == 2 and set(nodes) <= set(local_cluster.nodes)

    result = backend.run_step(StepRequest(job_id=job_id, argv=("hostname",), nodes=2,
                                          ntasks_per_node=1))
    assert result.exit_code == 0, result.stderr
    hosts = result.stdout.split()
    assert len(hosts) == 2 and len(set(hosts)) == 2
    assert sorted(hosts) == sorted(nodes)


# ------------------------------------------------ a private cluster: pending, controller down


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


@attrs.frozen
class Private:
    info: ClusterInfo
    env: dict[str, str]  # SLURM_CONF of a client config with MessageTimeout=1


@pytest.fixture(scope="module")
def private() -> Iterator[Private]:
    """A second local cluster, in a folder (and on ports) of its own: it can be filled up
    and its controller stopped without touching the shared one. Torn down at the end of
    the module, whatever happens."""
    base = Path(tempfile.mkdtemp(prefix="sfsm-it-private-")) / "cluster"

    def at_base(action: Callable[[], T]) -> T:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(localcluster.ENV_BASE_DIR, str(base))
            return action()

    try:
        result = at_base(lambda: localcluster.bring_up(install=False))
        info = result.info
        assert result.started and info.base_dir == base
        # clients give up at once on a dead controller with MessageTimeout=1
        conf = info.slurm_conf.read_text()
        assert "\nMessageTimeout=5\n" in conf
        client = base.parent / "client.conf"
        client.write_text(conf.replace("\nMessageTimeout=5\n", "\nMessageTimeout=1\n"))
        yield Private(info, {"SLURM_CONF": str(client)})
    finally:
        at_base(localcluster.down)


@contextlib.contextmanager
def cluster_full(p: Private, names: JobNames) -> Iterator[str]:
    """Every node of the private cluster held by one exclusive job (its id)."""
    blocker = names.new("blocker", ".blocker")
    proc = slurm("salloc", "--no-shell", "--exclusive", f"--nodes={len(p.info.nodes)}",
                 "--time=10", f"--job-name={blocker}", env=p.env)
    assert proc.returncode == 0, proc.stderr
    ((job_id, state),) = jobs_named(blocker, p.info.user, p.env)
    assert state == "RUNNING"
    try:
        yield job_id
    finally:
        slurm("scancel", job_id, env=p.env)


def test_new_allocation_pending_too_long_is_cancelled_not_left_behind(
        private: Private, tmp_path: Path) -> None:
    names = JobNames(private.info.user, private.env)
    try:
        with cluster_full(private, names):
            name = names.new("pending")
            spec = make_spec(private.info, tmp_path, name)
            m = AllocationMachine(spec, SubprocessBackend(env=private.env), alloc_wait_s=2)
            assert m.prepare().state is State.Failed
            assert m.path == ["NoState", "Allocating", "Failed"]
            assert m.failure is not None and "still PENDING after 2 s" in m.failure.message
            assert "cancelled" in m.failure.message
            assert not spec.state_path.exists()
            until("the pending job gone", lambda: True if not jobs_named(
                name, private.info.user, private.env) else None, 10)
    finally:
        names.cleanup()


def test_pending_allocation_of_the_state_file_is_waited_for_never_cancelled(
        private: Private, tmp_path: Path) -> None:
    info, env = private.info, private.env
    names = JobNames(info.user, env)
    name = names.new("waited")
    spec = make_spec(info, tmp_path, name)
    backend = SubprocessBackend(env=env)
    salloc: subprocess.Popen[bytes] | None = None
    try:
        with cluster_full(private, names) as blocker:
            # our allocation, asked for while the cluster is full: it pends
            salloc = subprocess.Popen(
                ["salloc", "--no-shell", f"--partition={info.partition}",
                 f"--account={info.account}", "--nodes=1", "--time=10", f"--job-name={name}"],
                env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ((job_id, state),) = until("our pending job", lambda: jobs_named(
                name, info.user, env) or None)
            assert state == "PENDING"
            spec.state_path.parent.mkdir(parents=True)
            spec.state_path.write_text(AllocState(
                job_id=job_id, nodelist="", partition=info.partition, account=info.account,
                nodes=1, installed=True).to_json())
            before = spec.state_path.read_bytes()

            m = AllocationMachine(spec, backend, pending_wait_s=1)
            assert m.prepare().state is State.Failed
            assert m.path[:3] == ["NoState", "Validating", "Validating"]
            assert m.failure is not None and "still PENDING" in m.failure.message
            assert spec.state_path.read_bytes() == before
            assert job_state(job_id, env) == "PENDING"

            # the cluster frees up while the machine waits: the same job becomes Ready
            threading.Timer(1.0, lambda: slurm("scancel", blocker, env=env)).start()
            m = AllocationMachine(spec, backend, pending_wait_s=30)
            assert ready(m) == job_id
            assert m.path[:3] == ["NoState", "Validating", "Validating"]
            assert m.path[-1] == "Ready" and "Allocating" not in m.path
            assert job_state(job_id, env) == "RUNNING"
    finally:
        names.cleanup()
        if salloc is not None:
            salloc.wait(timeout=10)


def test_controller_down_keeps_the_state_file_and_the_allocation_survives_a_restart(
        private: Private, tmp_path: Path) -> None:
    info, env = private.info, private.env
    names = JobNames(info.user, env)
    name = names.new("ctld")
    spec = make_spec(info, tmp_path, name)
    backend = SubprocessBackend(env=env, timeout_s=10)
    job_id = ready(AllocationMachine(spec, backend))
    assert job_state(job_id, env) == "RUNNING"
    before = spec.state_path.read_bytes()

    pid_file = info.base_dir / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text().strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert argv[0] == "slurmctld" and str(info.slurm_conf) in argv
    daemon_env = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item
    )
    os.kill(pid, signal.SIGTERM)
    until("slurmctld to stop", lambda: True if not _alive(pid) else None, 15)
    try:
        t0 = time.monotonic()
        m = AllocationMachine(spec, backend, unreachable_retries=1)
        assert m.prepare().state is State.Failed
        seconds = time.monotonic() - t0
        assert m.path == ["NoState", "Validating", "Validating", "Failed"]
        assert m.failure is not None and m.failure.step == "Validating"
        assert "controller unreachable" in m.failure.message.lower()
        assert "Unable to contact slurm controller" in m.failure.message
        assert m.failure.state_file_kept
        assert spec.state_path.read_bytes() == before
        assert seconds < 8, f"validation against a dead controller took {seconds:.1f} s"
    finally:
        # the same argv and environment (the daemon marker lets `down` find it)
        subprocess.run(["setsid", "-f", *argv], env=daemon_env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10,
                       check=True)
        until("sinfo to answer", lambda: True if slurm("sinfo", "-h", env=env).returncode == 0
              else None, 30)
    log = (info.log_dir / "slurmctld.log").read_text()
    assert f"Recovered JobId={job_id}" in log

    m = AllocationMachine(spec, backend)
    assert ready(m) == job_id
    assert m.path == ["NoState", "Validating", "Ready"]
    assert job_state(job_id, env) == "RUNNING"
    names.cleanup()


# -------------------------------------------------------------- several processes

CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from slurm_fsm.machine import AllocationMachine
    from slurm_fsm.spec import JobSpec
    from slurm_fsm.subprocess_backend import SubprocessBackend

    spec = JobSpec.from_file(sys.argv[1])
    go = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    m = AllocationMachine(spec, SubprocessBackend())
    print("ready", flush=True)
    while go is not None and not go.exists():
        time.sleep(0.002)
    state = m.prepare().state
    print(json.dumps({"state": state.value, "path": m.path,
                      "job_id": m.alloc.job_id if m.alloc else None}), flush=True)
    if go is None:
        time.sleep(600)  # an orchestrator that lingers until it is killed
""")


def _child(spec_file: Path, *extra: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(spec_file), *map(str, extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_two_orchestrators_at_once_make_one_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("twice")
    spec_file = tmp_path / "job_spec.json"
    spec_file.write_text(json.dumps(spec_dict(local_cluster, tmp_path, name)))
    go = tmp_path / "go"
    procs = [_child(spec_file, go) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        go.touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [r["state"] for r in results] == ["Ready", "Ready"]
    assert results[0]["job_id"] == results[1]["job_id"]
    assert sorted(r["path"] for r in results) == [["NoState", "Allocating", "Ready"],
                                                  ["NoState", "Validating", "Ready"]]
    job_id = results[0]["job_id"]
    assert jobs_named(name, local_cluster.user) == [(job_id, "RUNNING")]
    spec_path = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"
    assert state_of(spec_path)["job_id"] == job_id


def test_the_allocation_outlives_a_killed_orchestrator(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("outlive")
    data = spec_dict(local_cluster, tmp_path, name)
    spec_file = tmp_path / "job_spec.json"
    spec_file.write_text(json.dumps(data))
    p = _child(spec_file)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        line = p.stdout.readline()
        result = json.loads(line)
        assert result["state"] == "Ready", (line, p.stderr.read() if p.stderr else "")
    finally:
        p.kill()  # SIGKILL: no cleanup of any kind in the orchestrator
        p.communicate(timeout=10)
    assert p.returncode == -signal.SIGKILL
    job_id = result["job_id"]
    time.sleep(1.0)
    assert job_state(job_id) == "RUNNING"
    assert jobs_named(name, local_cluster.user) == [(job_id, "RUNNING")]

    m = AllocationMachine(make_spec(local_cluster, tmp_path, name), SubprocessBackend())
    assert ready(m) == job_id  # the next orchestrator picks it up
    assert m.path == ["NoState", "Validating", "Ready"]
