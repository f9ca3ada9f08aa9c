"""Issue 28 on the real local cluster: never two allocations, never the wrong one.

* The request nonce (``--comment=<tag>;req=<nonce>``): a salloc whose answer is lost
  (its process killed once the job exists) is adopted by the next attempt, never
  allocated again; two requests that race past the existence check end with one
  allocation (the older wins, the newer request cancels its own job).
* The node-local lock of the install: two setup steps racing on one allocation and
  container run the install once per node (the second waits for the lock, finds the
  marker and skips); a run that finds ``installed: false`` in a container another run
  installed skips each install on the nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import AllocationRequest, ContainerOptions, StepRequest, StepResult
from slurm_fsm.duration import Duration
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.ownership import checkout_tag, split_comment
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo, ContainerInfo

from .containers import ContainerNames
from .helpers import JobNames, RecordingBackend, jobs_named, slurm, until
from .test_containers_real import NODES, container_spec, prepared

pytestmark = pytest.mark.slurm


def request_of(cluster: ClusterInfo, tmp_path: Path, name: str, nonce: str,
               tag: str) -> AllocationRequest:
    return AllocationRequest(
        partition=cluster.partition, account=cluster.account, nodes=1,
        time_limit=Duration.parse("00:10:00"), job_name=name,
        log_path=tmp_path / f".salloc.{nonce}.log", user=cluster.user, comment=tag,
        nonce=nonce)


def live(name: str, user: str) -> list[str]:
    return [job_id for job_id, state in jobs_named(name, user)
            if state in ("PENDING", "RUNNING", "CONFIGURING")]


def test_a_lost_salloc_answer_is_adopted_by_the_next_attempt(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The process that ran salloc is killed once its job exists (the answer never
    reaches anyone). The next attempt with the same request (the machine's retry)
    adopts that job exactly, and so does a new request (another run): one job."""
    name = names.new("nonce-lost")
    tag = checkout_tag(tmp_path / "repo")
    request = request_of(local_cluster, tmp_path, name, "0123abcd", tag)
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import json, sys, time, attrs\n"
         "from pathlib import Path\n"
         "from slurm_fsm.backend import AllocationRequest\n"
         "from slurm_fsm.duration import Duration\n"
         "from slurm_fsm.subprocess_backend import SubprocessBackend\n"
         "d = json.loads(sys.argv[1])\n"
         "r = AllocationRequest(partition=d['partition'], account=d['account'], nodes=1,\n"
         "    time_limit=Duration.parse('00:10:00'), job_name=d['name'],\n"
         "    log_path=Path(d['log']), user=d['user'], comment=d['tag'], nonce=d['nonce'])\n"
         "SubprocessBackend().allocate(r, wait_s=120)\n"
         "time.sleep(600)\n",
         json.dumps({"partition": request.partition, "account": request.account,
                     "name": name, "log": str(tmp_path / ".salloc.child.log"),
                     "user": request.user, "tag": tag, "nonce": "0123abcd"})],
        env=os.environ.copy(), start_new_session=True)
    try:
        (job_id,) = until("the child's job in squeue",
                          lambda: live(name, local_cluster.user) or None, 60)
        os.killpg(child.pid, signal.SIGKILL)  # the answer is lost with its process
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    comment = slurm("squeue", "-j", job_id, "-h", "-o", "%k").stdout.strip()
    assert split_comment(comment) == (tag, "0123abcd")  # what squeue %k shows

    backend = RecordingBackend()
    assert backend.allocate(request, wait_s=60) == job_id  # the same request: adopted
    assert backend.allocate(request_of(local_cluster, tmp_path, name, "fedcba98", tag),
                            wait_s=60) == job_id  # another run's request: adopted too
    assert not [a for a in backend.argvs if Path(a[0]).name == "salloc"]  # none started
    assert live(name, local_cluster.user) == [job_id]  # never two allocations


def test_two_requests_racing_past_the_check_end_with_one_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Both requests are past the existence check before either salloc submits (a
    salloc wrapper waits until both started): each sees only its own nonce as its own;
    the newer cancels its own job and both use the older."""
    name = names.new("nonce-race")
    tag = checkout_tag(tmp_path / "repo")
    real = shutil.which("salloc")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gate = tmp_path / "gate"
    gate.mkdir()
    wrapper = bin_dir / "salloc"
    wrapper.write_text(
        "#!/bin/sh\n"
        f': > "{gate}/$$"\n'
        f'while [ "$(ls "{gate}" | wc -l)" -lt 2 ]; do sleep 0.05; done\n'
        f'exec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    backend = SubprocessBackend(env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    got: dict[str, str | BaseException] = {}

    def run(nonce: str) -> None:
        try:
            got[nonce] = backend.allocate(request_of(local_cluster, tmp_path, name, nonce,
                                                     tag), wait_s=120)
        except BaseException as exc:
            got[nonce] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in ("aaaaaaaa", "bbbbbbbb")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert all(isinstance(v, str) for v in got.values()), got
    assert got["aaaaaaaa"] == got["bbbbbbbb"], got
    winner = str(got["aaaaaaaa"])
    until("one allocation left", lambda: live(name, local_cluster.user) == [winner] or None,
          30)


def test_two_install_steps_racing_run_the_install_once_per_node(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """Two setup steps with the same ``once`` key race into one allocation's fresh
    container (each as a run on another login node would start its install): the
    install's side effect (a line per run in a shared counter file) shows one install
    per node; the loser waited for the node's lock and skipped."""
    name = names.new("once-race")
    container = cnames.new("once")
    shared = tmp_path / "shared"
    shared.mkdir()
    backend = SubprocessBackend()
    job_id = backend.allocate(AllocationRequest(
        partition=local_cluster.partition, account=local_cluster.account, nodes=NODES,
        time_limit=Duration.parse("00:10:00"), job_name=name,
        log_path=tmp_path / ".salloc.log", user=local_cluster.user,
        comment=checkout_tag(tmp_path / "repo")), wait_s=60)
    until("allocation running", lambda: backend.query_job(job_id).state.is_running or None,
          60)
    imported = backend.run_step(StepRequest(
        job_id=job_id, argv=("true",), nodes=NODES, timeout_s=180, overlap=True,
        container=ContainerOptions(name=container, image=str(pyxis.images["python"]),
                                   fresh=True)))
    assert imported.exit_code == 0, imported.stderr
    counter = shared / "installs"
    install = StepRequest(
        job_id=job_id, nodes=NODES, timeout_s=180, overlap=True, chdir=str(shared),
        argv=("sh", "-c", f'echo "$(hostname)" >> {counter}; sleep 3'),
        container=ContainerOptions(name=container, mounts=f"{shared}:{shared}",
                                   writable=True),
        once="install it")
    results: list[StepResult] = []
    threads = [threading.Thread(target=lambda: results.append(backend.run_step(install)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r.exit_code for r in results] == [0, 0], results
    assert sorted(counter.read_text().split()) == ["n1", "n2"]  # once per node, not twice
    skipped = "".join(r.stderr for r in results).count(slurmcli.ONCE_SKIPPED)
    assert skipped == NODES, results  # the other run skipped on each node
    assert "not node-locked" not in "".join(r.stderr for r in results)


def test_a_run_that_read_installed_false_skips_what_another_installed(
        local_cluster: ClusterInfo, pyxis: ContainerInfo, names: JobNames,
        cnames: ContainerNames, tmp_path: Path) -> None:
    """Run A imports and installs. Run B had read the state file before A recorded the
    install (another login node): B's Installing steps find A's markers on every node
    and skip; B is Ready in the same container."""
    job_name = names.new("once-machine")
    container = cnames.new("oncem")
    spec = container_spec(local_cluster, tmp_path, job_name, image=pyxis.images["python"],
                          name=container, install=True)
    a, _ = prepared(spec)
    assert a.path == ["NoState", "Allocating", "Importing", "Installing", "Ready"]
    record = json.loads(spec.state_path.read_text())
    record["installed"] = False  # what B read before A wrote
    spec.state_path.write_text(json.dumps(record))

    results: list[StepResult] = []

    class Recording(RecordingBackend):
        def run_step(self, request: StepRequest) -> StepResult:
            result = super().run_step(request)
            if request.once is not None:
                results.append(result)
            return result

    b = AllocationMachine(spec, Recording())
    assert b.prepare().state is State.Ready, (b.path, b.failure)
    assert b.path == ["NoState", "Validating", "Installing", "Ready"]
    assert b.alloc is not None and a.alloc is not None and b.alloc.job_id == a.alloc.job_id
    assert len(results) == 2  # pip install -e . and -r requirements-dev.txt
    for result in results:
        assert result.stderr.count(slurmcli.ONCE_SKIPPED) == NODES, result.stderr


def test_a_moment_old_allocation_of_another_run_is_adopted_not_cancelled(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The race campaign's races 72, 98, 204, 636, 963: run A's allocation is granted
    (another request's nonce), A has not written its state file yet; run B must not
    cancel it as an orphan (A would allocate again): B adopts it. (The grace is an hour
    here, so that no slowness of the machine makes the job look old.)"""
    from .test_run_real import persistent

    spec = persistent(local_cluster, tmp_path, names.new("adopt"), "srun true")
    request = AllocationRequest(
        partition=local_cluster.partition, account=local_cluster.account, nodes=1,
        time_limit=spec.alloc_time_limit, job_name=spec.job_name,
        log_path=tmp_path / ".salloc.a.log", user=local_cluster.user,
        comment=checkout_tag(spec.repo_root), nonce="a1b2c3d4")
    theirs = SubprocessBackend().allocate(request, wait_s=60)  # run A's; no state file
    assert not spec.state_path.exists()

    backend = RecordingBackend()
    m = AllocationMachine(spec, backend, orphan_grace_s=3600)
    assert m.prepare().state is State.Ready, m.failure
    assert m.alloc is not None and m.alloc.job_id == theirs
    used = [Path(a[0]).name for a in backend.argvs]
    assert "scancel" not in used and "salloc" not in used  # neither cancelled nor a 2nd
    assert live(spec.job_name, local_cluster.user) == [theirs]
    assert f'"job_id": "{theirs}"' in spec.state_path.read_text()
    assert any(f"allocation {theirs} has no state file yet" in n for n in m.notes)
