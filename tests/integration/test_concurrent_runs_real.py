"""Several `slurm-fsm run` processes at once on one repo_root, on the real cluster.

The state file's lock covers step 0 only: the runs overlap in one allocation. Each
running job holds a lease (its run record); a release, a replacement or a kill -9 of
one run never cancels the allocation under another run's job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, job_state, spec_dict, step_ids, until

pytestmark = pytest.mark.slurm

#: a job whose step shares the node's CPUs (--overlap): several run at once on 1 node
OVERLAP_JOB = ("#!/bin/bash\necho start $(date +%s.%N)\nsrun --overlap -n1 sleep {s}\n"
               "echo end $(date +%s.%N)\n")
#: the same job, its step waiting for a gate file instead of a time: "while the jobs
#: run" is then a fact the test makes, not a race with the machine's load
GATED_JOB = ("#!/bin/bash\necho start $(date +%s.%N)\n"
             "srun --overlap -n1 bash -c 'until [ -e {gate} ]; do sleep 0.1; done'\n"
             "echo end $(date +%s.%N)\n")


def _specs(cluster: ClusterInfo, tmp_path: Path, name: str, n: int, seconds: float | None,
           **over: Any) -> list[Path]:
    """``n`` specs of one job: a step of ``seconds``, or (None) one that waits for the
    file ``tmp_path/gate``."""
    job = GATED_JOB.format(gate=tmp_path / "gate") if seconds is None \
        else OVERLAP_JOB.format(s=seconds)
    (tmp_path / "job.slurm").write_text(job)
    out = []
    for i in range(n):
        data = spec_dict(cluster, tmp_path, name, work_dir=str(tmp_path / f"work{i}"),
                         success_patterns=["end"], **over)
        path = tmp_path / f"spec{i}.json"
        path.write_text(json.dumps(data))
        out.append(path)
    return out


def _env(cluster: ClusterInfo) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cluster.slurm_conf)}


def _start(cluster: ClusterInfo, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "slurm_fsm", *args, "--json", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(cluster))


def _report(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert out, err
    report: dict[str, Any] = json.loads(out)
    report["_rc"] = proc.returncode
    return report


def _span(report: dict[str, Any]) -> tuple[float, float]:
    words = Path(report["log_files"]["stdout"]).read_text().split()
    return float(words[words.index("start") + 1]), float(words[words.index("end") + 1])


def _running(tmp_path: Path, n: int) -> None:
    """Until ``n`` runs have their script started (their records name its group)."""
    work_dirs = tmp_path / "repo" / "work_dirs"
    until(f"{n} running jobs", lambda: True if sum(
        '"pgid"' in p.read_text() for p in work_dirs.glob(".slurm_run.r????????????.json")) >= n
        else None, 90)


def _release(cluster: ClusterInfo, spec: Path) -> None:
    subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(spec), "--quiet"],
                   env=_env(cluster), timeout=120, check=False, capture_output=True)


def test_four_runs_at_once_overlap_in_one_allocation_and_all_pass(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    specs = _specs(local_cluster, tmp_path, names.new("overlap"), 4, 4)
    try:
        procs = [_start(local_cluster, "run", str(p)) for p in specs]
        reports = [_report(p) for p in procs]
        assert [(r["_rc"], r["status"]) for r in reports] == [(0, "PASSED")] * 4, reports
        assert len({r["allocation_id"] for r in reports}) == 1  # one allocation
        assert sum(r["path"][:2] == ["NoState", "Allocating"] for r in reports) == 1
        spans = [_span(r) for r in reports]
        # they ran at once: every job started before any of them ended
        assert max(s for s, _ in spans) < min(e for _, e in spans), spans
        assert not list((tmp_path / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"))
        assert step_ids(reports[0]["allocation_id"]) == []
    finally:
        _release(local_cluster, specs[0])


#: a 1-GPU job: its plain ``srun`` is confined to its share by the exported environment
GPU_JOB = ("#!/bin/bash\nsrun -n1 bash -c 'echo gpu=$CUDA_VISIBLE_DEVICES; "
           "echo start $(date +%s.%N); sleep {s}; echo end $(date +%s.%N)'\n")


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_four_one_gpu_runs_at_once_each_get_their_own_gpu_in_one_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Issue 18, done when: four concurrent runs of 1-GPU jobs on a 4-GPU allocation all
    PASS in one allocation, at once, each with its own CUDA_VISIBLE_DEVICES (Slurm's
    step scheduler places them; nothing but the exported environment confines them),
    and `slurm-fsm status` lists the four jobs with the GPU each holds."""
    name = names.new("gpus")
    (tmp_path / "job.slurm").write_text(GPU_JOB.format(s=6))
    specs = []
    for i in range(4):
        data = spec_dict(local_cluster, tmp_path, name, work_dir=str(tmp_path / f"work{i}"),
                         success_patterns=["end"], alloc_gpus_per_node=4,
                         slurm_params={"gpus_per_node": 1})
        path = tmp_path / f"spec{i}.json"
        path.write_text(json.dumps(data))
        specs.append(path)
    try:
        procs = [_start(local_cluster, "run", str(p)) for p in specs]

        def each_holds_a_gpu() -> list[Any] | None:
            """`slurm-fsm status --json`: four running jobs, each with a 1-GPU step."""
            done = subprocess.run([sys.executable, "-m", "slurm_fsm", "status", str(specs[0]),
                                   "--json"], capture_output=True, text=True, timeout=60,
                                  env=_env(local_cluster), check=False)
            jobs = json.loads(done.stdout or "{}").get("jobs", [])
            held = [[st.get("gpus") for st in j.get("steps", [])] for j in jobs]
            return held if sorted(held) == [[1]] * 4 else None

        until("status to list four jobs holding one GPU each", each_holds_a_gpu, 60)
        reports = [_report(p) for p in procs]
        assert [(r["_rc"], r["status"]) for r in reports] == [(0, "PASSED")] * 4, reports
        assert len({r["allocation_id"] for r in reports}) == 1  # one allocation
        gpus = [Path(r["log_files"]["stdout"]).read_text().split("gpu=")[1].split()[0]
                for r in reports]
        assert sorted(gpus) == ["0", "1", "2", "3"], gpus  # each its own GPU
        spans = [_span(r) for r in reports]
        assert max(s for s, _ in spans) < min(e for _, e in spans), spans  # at once
    finally:
        _release(local_cluster, specs[0])


def test_a_release_while_two_jobs_run_refuses_or_waits_and_never_cancels_them(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    specs = _specs(local_cluster, tmp_path, names.new("relwait"), 2, None)
    try:
        procs = [_start(local_cluster, "run", str(p)) for p in specs]
        _running(tmp_path, 2)
        # status lists both jobs, each with its pid and its own step
        def listed() -> list[dict[str, Any]] | None:
            out = subprocess.run([sys.executable, "-m", "slurm_fsm", "status", str(specs[0]),
                                  "--json"], capture_output=True, text=True, timeout=60,
                                 env=_env(local_cluster), check=False).stdout
            jobs: list[dict[str, Any]] = json.loads(out)["jobs"]
            return jobs if len(jobs) == 2 and all(len(j["steps"]) == 1 for j in jobs) \
                else None

        jobs = until("status to list both jobs and their steps", listed, 30)
        assert {j["pid"] for j in jobs} == {p.pid for p in procs}
        assert len({j["steps"][0]["id"] for j in jobs}) == 2
        assert all(j["steps"][0]["nodes"] for j in jobs)
        # told not to wait: it says whose jobs use it and changes nothing
        refused = _report(_start(local_cluster, "release", str(specs[0]), "--no-wait"))
        assert refused["_rc"] == 3 and refused["status"] == "ERROR", refused
        assert "in use by 2 running job(s)" in refused["summary"]
        alloc = refused["allocation_id"]
        assert job_state(alloc) == "RUNNING"
        assert (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()
        # a release that waits: it returns once both jobs have passed
        waiting = _start(local_cluster, "release", str(specs[1]))
        (tmp_path / "gate").touch()
        reports = [_report(p) for p in procs]
        released = _report(waiting)
        assert [r["status"] for r in reports] == ["PASSED", "PASSED"], reports
        assert released["status"] == "RELEASED", released
        assert released["allocation_id"] == alloc == reports[0]["allocation_id"]
        assert max(_span(r)[1] for r in reports) <= time.time()
        until("the allocation gone", lambda: True if job_state(alloc) in (
            None, "CANCELLED", "COMPLETED") else None, 30)
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, specs[0])


def test_kill_9_of_one_of_three_runs_leaves_the_others_and_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    specs = _specs(local_cluster, tmp_path, names.new("k9one"), 3, 8)
    try:
        procs = [_start(local_cluster, "run", str(p)) for p in specs]
        _running(tmp_path, 3)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].communicate(timeout=10)
        reports = [_report(procs[0]), _report(procs[2])]
        assert [r["status"] for r in reports] == ["PASSED", "PASSED"], reports
        alloc = reports[0]["allocation_id"]
        assert reports[1]["allocation_id"] == alloc
        assert job_state(alloc) == "RUNNING"
        assert step_ids(alloc) == []  # the killed run's step ended with it
        # the next run finds the dead run's record and finishes it
        after = _report(_start(local_cluster, "run", str(specs[1])))
        assert after["status"] == "PASSED" and after["allocation_id"] == alloc, after
        assert not list((tmp_path / "repo" / "work_dirs").glob(".slurm_run.r????????????.json"))
    finally:
        _release(local_cluster, specs[0])


def test_an_incompatible_spec_while_jobs_run_never_cancels_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("incompat")
    specs = _specs(local_cluster, tmp_path, name, 2, None)
    other = tmp_path / "other.json"
    data = spec_dict(local_cluster, tmp_path, name, work_dir=str(tmp_path / "w-other"),
                     success_patterns=["end"], slurm_params={"nodes": 2})
    other.write_text(json.dumps(data))
    try:
        procs = [_start(local_cluster, "run", str(p)) for p in specs]
        _running(tmp_path, 2)
        refused = _report(_start(local_cluster, "run", str(other), "--no-wait"))
        assert refused["status"] == "ERROR" and "in use by 2 running job(s)" in \
            refused["summary"], refused
        alloc = refused["allocation_id"]
        assert job_state(alloc) == "RUNNING"
        # waiting: it replaces the allocation only once both jobs have passed
        replacing = _start(local_cluster, "run", str(other))
        (tmp_path / "gate").touch()
        reports = [_report(p) for p in procs]
        assert [r["status"] for r in reports] == ["PASSED", "PASSED"], reports
        assert {r["allocation_id"] for r in reports} == {alloc}
        after = _report(replacing)
        assert after["status"] == "PASSED", after
        assert "Incompatible" in after["path"] and after["allocation_id"] != alloc
        assert max(_span(r)[1] for r in reports) <= _span(after)[0]
    finally:
        (tmp_path / "gate").touch()
        _release(local_cluster, other)


def test_two_checkouts_sharing_an_account_leave_each_other_alone(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    from slurm_fsm.executor import Executor
    from slurm_fsm.results import Status
    from slurm_fsm.subprocess_backend import SubprocessBackend

    from .helpers import job_state, make_spec

    name = names.new("checkouts")  # the same job name for both, as with the default
    first = make_spec(local_cluster, tmp_path / "a", name)
    second = make_spec(local_cluster, tmp_path / "b", name)
    backend = SubprocessBackend()
    try:
        r1 = Executor(first, backend).run()
        r2 = Executor(second, backend).run()
        assert r1.status is Status.PASSED and r2.status is Status.PASSED
        assert r1.allocation_id != r2.allocation_id
        assert job_state(r1.allocation_id or "") == "RUNNING"  # not taken for an orphan
        assert any("belongs to another checkout" in n for n in r2.notes)
    finally:
        for spec in (first, second):
            Executor(attrs.evolve(spec, release_allocation=True), backend).run()
