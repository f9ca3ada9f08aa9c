"""Issue 23, the configuration half: what holds on the configuration real GPU clusters
have (``task/cgroup`` + ``proctrack/cgroup``, ``ConstrainCores``, ``ConstrainDevices``;
``SLURM_FSM_LOCAL_CONFIG=cgroup``), without association enforcement (``noenforce``),
and on the default one. Each test names the configuration it needs
(``@pytest.mark.config``); ``make test-confined`` runs them on ``cgroup,noenforce,memkill``.

- an account accounting does not list: refused before ``salloc`` where Slurm enforces
  associations, run with a warning where it does not (fix 1);
- a job's share includes CPUs: a 1-GPU job on a 4-GPU, 8-CPU allocation gets more than
  one CPU under ``ConstrainCores``, and 4 such jobs at once each get their own GPU
  and CPUs (fix 2);
- the GPU pre-flight sees the allocation's GPUs under ``ConstrainDevices``: it names
  an intruding process and is quiet on a clean node; the build's probe finds the GPU
  name (fix 3);
- a job that asks no GPU sees none, neither waits for nor blocks GPU jobs, and says
  it waits for CPUs when it does (fix 4, issue 26 item 5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.events import Events
from slurm_fsm.executor import Executor
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev import localcluster, localgpu
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

from .helpers import JobNames, jobs_named, slurm, spec_dict, until

pytestmark = pytest.mark.slurm

#: CPUs per node of the allocations made here (alloc_cpus_per_node): 4 GPUs x 2 CPUs
ALLOC_CPUS = 8


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def spec(cluster: ClusterInfo, root: Path, name: str, body: str, **over: Any) -> JobSpec:
    root.mkdir(parents=True, exist_ok=True)
    script = root / f"job-{len(list(root.glob('job-*.slurm')))}.slurm"
    script.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip("\n"))
    return JobSpec.from_dict(spec_dict(cluster, root, name, script_path=str(script), **over))


def run(s: JobSpec, events: Events | None = None) -> Report:
    return Executor(s, SubprocessBackend(), events=events).run()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], capture_output=True,
                          text=True, timeout=180, env=dict(os.environ), check=False)


@pytest.fixture
def gpus(local_cluster: ClusterInfo) -> Iterator[Path]:
    yield local_cluster.base_dir
    localgpu.reset(local_cluster.base_dir)


#: what a step prints: its CPUs and the GPUs its process may open (the devices cgroup
#: answers EPERM for the others)
PROBE = r"""
n=$(hostname); ok=""
for i in 0 1 2 3; do
  err=$( { exec 3<"$BASE/dev/$n/nvidia$i"; } 2>&1 )
  case "$err" in *"not permitted"*) ;; *) ok="$ok$i" ;; esac
done
echo "probe nproc=$(nproc) gpus=${ok:-none} cvd=${CUDA_VISIBLE_DEVICES-unset} step=$SLURM_STEP_ID"
"""


def _probe_script(cluster: ClusterInfo, root: Path, after: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "probe.sh"
    path.write_text(f"#!/bin/bash\nBASE={cluster.base_dir}\n{PROBE}\n{after}\n")
    path.chmod(0o755)
    return path


def _probe_lines(r: Report) -> list[dict[str, str]]:
    out = []
    for line in r.log_tail:
        if line.startswith("probe "):
            out.append(dict(w.split("=", 1) for w in line.split()[1:]))
    return out


def _gpu_allocation(cluster: ClusterInfo, root: Path, name: str, *,
                    cpus: int | None = ALLOC_CPUS) -> str:
    """A persistent allocation of 4 GPUs on one node, made by a 1-GPU job: of ``cpus``
    CPUs (``alloc_cpus_per_node``, the same on every configuration), or (None) of what
    the allocation asks by itself (issue 44.4: the cluster's CPUs per GPU, 2 here); its
    id."""
    over: dict[str, Any] = {} if cpus is None else {"alloc_cpus_per_node": cpus}
    big = spec(cluster, root, name, "srun true\n", slurm_params={"gpus_per_node": 1},
               alloc_gpus_per_node=GPUS_PER_NODE, **over)
    first = run(big)
    assert first.status is Status.PASSED, first.render_text()
    assert first.allocation_id is not None
    shown = slurm("scontrol", "show", "job", first.allocation_id).stdout
    want = cpus or cluster.cpus_per_gpu * GPUS_PER_NODE
    assert f"NumCPUs={want} " in shown, shown
    return first.allocation_id


# ------------------------------------------------------------------ fix 1: accounts


def _unlisted_account_spec(cluster: ClusterInfo, tmp_path: Path, name: str) -> Path:
    """A spec file whose account (``projx``) has no association in accounting."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec_dict(cluster, tmp_path, name,
                                         slurm_params={"account": "projx"})))
    return path


@pytest.mark.config(noenforce=False)
def test_an_account_without_association_is_refused_before_salloc_where_slurm_enforces(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("acct")
    path = _unlisted_account_spec(local_cluster, tmp_path, name)
    r = _cli("run", str(path))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "'projx' is not an account of user" in r.stdout + r.stderr
    assert not (tmp_path / "repo" / "work_dirs" / ".salloc.log").exists()  # no salloc
    assert jobs_named(name, local_cluster.user) == []


@pytest.mark.config(noenforce=True)
def test_an_account_without_association_runs_with_a_warning_where_slurm_does_not_enforce(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("acct")
    path = _unlisted_account_spec(local_cluster, tmp_path, name)
    r = _cli("run", str(path))
    terminal = r.stdout + r.stderr
    assert r.returncode == 0, terminal
    assert "PASSED" in terminal
    assert "'projx' is not an account of user" in terminal
    assert "does not enforce associations" in terminal
    assert "default account" in terminal


# ------------------------------------------------------------------ fix 2: CPUs


@pytest.mark.config(cgroup=True)
def test_a_one_gpu_job_alone_on_a_four_gpu_eight_cpu_allocation_gets_more_than_one_cpu(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    """Without a CPU share, ``SLURM_EXACT=1`` gives the step exactly one CPU, and
    ``ConstrainCores`` confines it to that one (``nproc`` = 1)."""
    name = names.new("cpu")
    root = tmp_path / "alloc"
    _gpu_allocation(local_cluster, root, name)
    probe = _probe_script(local_cluster, tmp_path)
    one = spec(local_cluster, root, name, f"srun {probe}\n", slurm_params={"gpus_per_node": 1})
    r = run(one)
    assert r.status is Status.PASSED, r.render_text()
    (line,) = _probe_lines(r)
    assert int(line["nproc"]) > 1, line  # 8 CPUs x 1/4 GPUs = 2 (the host has 2)
    assert len(line["gpus"]) == 1, line  # and only its own GPU
    assert line["cvd"] == "0", line  # task/cgroup renumbers from 0
    explicit = spec(local_cluster, root, name, f"srun {probe}\n",
                    slurm_params={"gpus_per_node": 1, "cpus_per_task": 2})
    r = run(explicit)
    assert r.status is Status.PASSED, r.render_text()
    assert int(_probe_lines(r)[0]["nproc"]) == 2


@pytest.mark.config(cgroup=True)
def test_a_detached_job_run_by_its_agent_gets_the_gpu_and_cpus_a_foreground_one_gets(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    """Issue 39: a detached run's script runs inside its agent's step (one CPU, no GPU,
    confined by ``ConstrainCores``/``ConstrainDevices``), not on the login node; its
    ``srun`` is still a step of the allocation placed as a foreground run's (none of the
    agent step's variables reach it: the backend's clean environment, and the agent's
    own clearing): one GPU of its own, and the same CPUs."""
    name = names.new("agentgpu")
    root = tmp_path / "alloc"
    _gpu_allocation(local_cluster, root, name)
    probe = _probe_script(local_cluster, tmp_path)
    one = spec(local_cluster, root, name, f"srun {probe}\n",
               slurm_params={"gpus_per_node": 1})
    foreground = _probe_lines(run(one))
    # the same job, held at a gate until `run --detach` has said who owns it (a probe
    # ends in a blink: the run could be judged before the command looks)
    gate = tmp_path / "gate"
    held = spec(local_cluster, root, name,
                f"until [ -e {gate} ]; do sleep 0.1; done\nsrun {probe}\n",
                slurm_params={"gpus_per_node": 1})
    path = tmp_path / "detached.json"
    path.write_text(json.dumps(held.to_dict()))
    try:
        done = _cli("run", str(path), "--detach", "--json", "--quiet")
        doc = json.loads(done.stdout or "{}")
        assert doc.get("owner") == "agent", done.stdout + done.stderr
    finally:
        gate.touch()
    waited = _cli("wait", str(doc["run_id"]), "--json", "--repo", str(held.repo_root))
    [report] = json.loads(waited.stdout)
    assert report["status"] == "PASSED", report
    log = Path(report["log_files"]["stdout"]).read_text()
    detached = [dict(w.split("=", 1) for w in line.split()[1:])
                for line in log.splitlines() if line.startswith("probe ")]
    assert len(detached) == 1 and len(foreground) == 1, (detached, foreground)
    assert detached[0]["gpus"] == foreground[0]["gpus"] and len(detached[0]["gpus"]) == 1
    assert detached[0]["nproc"] == foreground[0]["nproc"] and \
        int(detached[0]["nproc"]) > 1, (detached, foreground)
    assert detached[0]["cvd"] == foreground[0]["cvd"] == "0"


@pytest.mark.config(cgroup=True)
def test_four_one_gpu_jobs_at_once_each_get_their_own_gpu_and_cpus(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("four")
    root = tmp_path / "alloc"
    # sized by the allocation itself (issue 44.4: 4 CPUs before, one per job)
    alloc = _gpu_allocation(local_cluster, root, name, cpus=None)
    share = local_cluster.cpus_per_gpu
    started = tmp_path / "started"
    started.mkdir()
    # each job's step waits (up to 60 s) until all four run: they hold their CPUs and
    # GPUs at the same time, so what each got was its own
    probe = _probe_script(local_cluster, tmp_path, after=(
        f'touch {started}/$SLURM_STEP_ID; for _ in $(seq 600); do '
        f'[ "$(ls {started} | wc -l)" -ge 4 ] && break; sleep 0.1; done'))
    # four runs of their own (separate processes, as users start them)
    (root / "four.slurm").write_text(f"#!/bin/bash\nsrun {probe}\n")
    procs = []
    for i in range(4):
        path = tmp_path / f"spec{i}.json"
        path.write_text(json.dumps(spec_dict(
            local_cluster, root, name, script_path=str(root / "four.slurm"),
            work_dir=str(tmp_path / f"work{i}"), slurm_params={"gpus_per_node": 1})))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "slurm_fsm", "run", str(path), "--json", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        report = json.loads(out or "{}")
        assert (proc.returncode, report.get("status")) == (0, "PASSED"), out + err
        assert report["allocation_id"] == alloc  # one allocation
        log = Path(report["log_files"]["stdout"]).read_text()
        lines += [dict(w.split("=", 1) for w in line.split()[1:])
                  for line in log.splitlines() if line.startswith("probe ")]
    assert len(lines) == 4, lines
    assert sorted(line["gpus"] for line in lines) == ["0", "1", "2", "3"], lines
    host = len(os.sched_getaffinity(0))
    assert all(int(line["nproc"]) == min(share, host) for line in lines), lines
    # Slurm's own account of the steps: 2 CPUs each, 8 together: the allocation's
    steps = {line["step"] for line in lines}
    rows = slurm("sacct", "-j", alloc, "-n", "-P", "--format=JobID,AllocCPUS").stdout
    cpus = {row.split("|")[0].split(".")[-1]: row.split("|")[1]
            for row in rows.splitlines() if "|" in row}
    assert {s: cpus.get(s) for s in steps} == {s: str(share) for s in steps}, rows


# ------------------------------------------------------------------ fix 3: GPU checks


@pytest.mark.config(cgroup=True)
def test_the_gpu_preflight_names_an_intruder_and_is_quiet_on_a_clean_node(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("intr")
    root = tmp_path / "alloc"
    alloc = _gpu_allocation(local_cluster, root, name)
    node = slurm("squeue", "-j", alloc, "-h", "-o", "%N").stdout.strip()
    one = spec(local_cluster, root, name, "srun true\n", slurm_params={"gpus_per_node": 1})
    clean = run(one)
    assert clean.status is Status.PASSED, clean.render_text()
    assert not [w for w in clean.warnings if "GPU" in w], clean.warnings
    localgpu.put_process(gpus, node, 2, 4242, "/usr/bin/ollama", "5012 MiB")
    dirty = run(one)
    assert dirty.status is Status.PASSED, dirty.render_text()
    found = [w for w in dirty.warnings if "GPU processes found" in w]
    assert len(found) == 1, dirty.warnings
    assert "4242 /usr/bin/ollama" in found[0]
    assert not [w for w in dirty.warnings if "nvidia-smi failed" in w], dirty.warnings


@pytest.mark.config(cgroup=True)
def test_the_build_gpu_probe_finds_the_gpu_name_under_device_confinement(
        local_cluster: ClusterInfo) -> None:
    name = SubprocessBackend().probe_gpu_name(local_cluster.partition, local_cluster.account)
    assert name is not None and localgpu.DEFAULT_MODEL[0] in name


# ------------------------------------------------------------------ fix 4: no GPU asked


@pytest.mark.config()
def test_a_job_that_asks_no_gpu_sees_none_and_neither_waits_for_nor_blocks_gpu_jobs(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("nogpu")
    root = tmp_path / "alloc"
    alloc = _gpu_allocation(local_cluster, root, name)
    # four 1-GPU, 1-CPU steps of a sibling hold every GPU (4 of the 8 CPUs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(local_cluster.env, SLURM_EXACT="1", SLURM_GPUS_PER_NODE="1")
    held = tmp_path / "held"
    held.mkdir()
    siblings = [subprocess.Popen(
        ["srun", f"--jobid={alloc}", "-N", "1", "-n", "1", "bash", "-c",
         f"touch {held}/$SLURM_STEP_ID; sleep 20"], env=env, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(GPUS_PER_NODE)]
    try:
        until("4 sibling steps holding the 4 GPUs",
              lambda: True if len(list(held.iterdir())) == GPUS_PER_NODE else None, 60.0)
        probe = _probe_script(local_cluster, tmp_path, after="nvidia-smi -L || true")
        events = Recorder()
        t0 = time.monotonic()
        cpu = spec(local_cluster, root, name, f"srun {probe}\n",
                   slurm_params={"gpus_per_node": 0})
        r = run(cpu, events)
        took = time.monotonic() - t0
        assert r.status is Status.PASSED, r.render_text()
        assert not [m for m in events.messages if m.startswith("waiting for")], events.messages
        assert took < 15, took  # it did not wait for the siblings' 20 s
        (line,) = _probe_lines(r)
        assert line["cvd"] == "unset", line
        if local_cluster.has("cgroup"):
            assert line["gpus"] == "none", line
            assert "No devices were found" in r.log_tail
        # and while it holds no GPU, a GPU job is not blocked by it: a 1-GPU step of
        # the siblings' kind starts as soon as a GPU is free (not tested by time here)
    finally:
        for p in siblings:
            p.wait(timeout=60)


@pytest.mark.config()
def test_a_job_that_asks_no_gpu_says_it_waits_for_cpus(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, gpus: Path) -> None:
    name = names.new("cpuwait")
    root = tmp_path / "alloc"
    alloc = _gpu_allocation(local_cluster, root, name)
    # siblings hold every CPU (4 steps x 2 CPUs), so a CPU job must wait
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(local_cluster.env, SLURM_EXACT="1", SLURM_GPUS_PER_NODE="1",
               SRUN_CPUS_PER_TASK="2")
    held = tmp_path / "held"
    held.mkdir()
    siblings = [subprocess.Popen(
        ["srun", f"--jobid={alloc}", "-N", "1", "-n", "1", "-c", "2", "bash", "-c",
         f"touch {held}/$SLURM_STEP_ID; sleep 4"], env=env, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(GPUS_PER_NODE)]
    try:
        until("4 sibling steps holding the 8 CPUs",
              lambda: True if len(list(held.iterdir())) == GPUS_PER_NODE else None, 60.0)
        events = Recorder()
        cpu = spec(local_cluster, root, name, "srun true\n", slurm_params={"gpus_per_node": 0})
        r = run(cpu, events)
        assert r.status is Status.PASSED, r.render_text()
        waiting = [m for m in events.messages if m.startswith("waiting for")]
        assert waiting, events.messages
        assert waiting[0].startswith("waiting for CPUs (1 CPU per task; no GPU asked)"), waiting
        assert "GPUs (" not in waiting[0]
    finally:
        for p in siblings:
            p.wait(timeout=60)


# ------------------------------------------------------------------ the configuration


@pytest.mark.config()
def test_the_cluster_runs_the_configuration_asked(local_cluster: ClusterInfo) -> None:
    assert local_cluster.config == localcluster.config_features()
    shown = dict((k.strip(), v.strip()) for k, _, v in (
        line.partition("=") for line in slurm("scontrol", "show", "config").stdout.splitlines()))
    if local_cluster.has("cgroup"):
        assert shown["TaskPlugin"] == "task/cgroup,task/affinity"
        assert shown["ProctrackType"] == "proctrack/cgroup"
    else:
        # task/none: Slurm 24.11 shows no task plugin as "(null)"
        assert shown["TaskPlugin"] in ("task/none", "(null)")
        assert shown["ProctrackType"] == "proctrack/linuxproc"
    expected = "none" if local_cluster.has("noenforce") else "associations,limits,qos"
    assert shown["AccountingStorageEnforce"] == expected
    expected = f"DefCpuPerGPU={localcluster.DEF_CPU_PER_GPU}" if local_cluster.has(
        "defcpu") else "(null)"
    assert shown["JobDefaults"] == expected
    assert f"CPUTot={local_cluster.cpus_per_node} " in slurm(
        "scontrol", "show", "node", local_cluster.nodes[0]).stdout
