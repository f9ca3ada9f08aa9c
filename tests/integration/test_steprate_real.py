"""run_many's shared view of the allocation on the real local Slurm cluster (issue 28,
"At the step-rate limit"): the runs share step 0's squeue, the GPU pre-flight and the
allocation-end squeue; every run still passes on the allocation Slurm has now."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_fsm.allocation import Allocation
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, RecordingBackend, make_spec, slurm

pytestmark = pytest.mark.slurm


def _specs(cluster: ClusterInfo, root: Path, name: str, n: int) -> list[JobSpec]:
    specs = []
    for i in range(n):
        script = root / f"job{i}" / "job.slurm"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("#!/bin/bash\nsrun true\n")
        specs.append(make_spec(cluster, root, name, script_path=str(script),
                               model_name=f"m{i}", work_dir=str(root / f"job{i}" / "work"),
                               slurm_params={"gpus_per_node": 1}))
    return specs


def _gpu_checks(backend: RecordingBackend) -> int:
    return sum(1 for a in backend.argvs
               if a and Path(a[0]).name == "srun" and "nvidia-smi" in " ".join(a))


def test_run_many_shares_the_questions_and_every_run_passes(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("steprate")
    backend = RecordingBackend()
    warm = make_spec(local_cluster, tmp_path, name, slurm_params={"gpus_per_node": 4})
    alloc = Allocation(warm.repo_root, backend)
    try:
        first = alloc.run(warm)
        assert first.status is Status.PASSED, first.render_text()
        job_id = first.allocation_id
        specs = _specs(local_cluster, tmp_path, name, 8)
        since = len(backend.argvs)
        reports = alloc.run_many(specs, max_parallel=4)
        assert [r.status for r in reports] == [Status.PASSED] * 8, \
            [r.render_text() for r in reports if r.status is not Status.PASSED]
        assert {r.allocation_id for r in reports} == {job_id}
        assert not [w for r in reports for w in r.warnings if "GPU processes" in w]
        after = RecordingBackend()
        after.argvs = backend.argvs[since:]
        # every run asked or shared; never more than one question each
        assert 1 <= _gpu_checks(after) <= 8
        assert after.tools().count("squeue") <= 16

        # the allocation is cancelled under the state file: no shared row of it is
        # taken; the next batch allocates anew and runs there
        assert job_id is not None
        slurm("scancel", job_id)
        again = alloc.run_many(specs[:3], max_parallel=3)
        assert [r.status for r in again] == [Status.PASSED] * 3, \
            [r.render_text() for r in again]
        new_ids = {r.allocation_id for r in again}
        assert len(new_ids) == 1 and job_id not in new_ids
    finally:
        alloc.release()


def test_run_many_holds_one_lease_step_that_slurm_lists_while_its_jobs_run(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """The batch's lease is a step Slurm lists (any host's ``squeue -s`` sees it) while
    each run's script runs; the runs of the batch start fewer lease steps than runs;
    none is left after the batch."""
    name = names.new("steprate-lease")
    backend = RecordingBackend()
    warm = make_spec(local_cluster, tmp_path, name, slurm_params={"gpus_per_node": 4})
    alloc = Allocation(warm.repo_root, backend)
    try:
        first = alloc.run(warm)
        assert first.status is Status.PASSED, first.render_text()
        job_id = first.allocation_id
        assert job_id is not None
        specs = _specs(local_cluster, tmp_path, name, 6)
        started = tmp_path / "started"
        started.mkdir()
        for i, spec in enumerate(specs):
            # the first 3 scripts wait for each other (their runs overlap for sure), then
            # each says which lease steps Slurm lists while it runs
            spec.script_path.write_text(
                f"#!/bin/bash\nsrun true\ntouch {started}/{i}\n"
                f"for _ in $(seq 300); do [ $(ls {started} | wc -l) -ge 3 ] && break; "
                "sleep 0.1; done\n"
                "squeue -s -h -j \"$SLURM_JOB_ID\" -O StepName:200 "
                "| grep '^fsm-lease\\.' > \"$PWD/leases.txt\"\n")
        reports = alloc.run_many(specs, max_parallel=3)
        assert [r.status for r in reports] == [Status.PASSED] * 6, \
            [r.render_text() for r in reports if r.status is not Status.PASSED]
        seen = [set((spec.work_dir / "leases.txt").read_text().split()) for spec in specs]
        assert all(seen), seen  # every script saw a lease step listed
        assert len(set().union(*seen)) < 6  # shared: fewer lease steps than runs
        deadline = time.monotonic() + 30  # slurmctld forgets an ended step soon, not at once
        while True:
            left = slurm("squeue", "-s", "-h", "-j", job_id, "-O", "StepName:200")
            assert left.returncode == 0, left.stderr
            if "fsm-lease." not in left.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "fsm-lease." not in left.stdout
    finally:
        alloc.release()


def test_the_split_benchmark_pins_the_daemons_then_gives_their_cpus_back(
        local_cluster: ClusterInfo) -> None:
    """``benchmarks/steprate.py --split-cpus``: while measuring, every thread of the
    local cluster's daemons runs on one CPU and the benchmark (with all it starts) on
    another; afterwards each has its own CPUs back."""
    import os
    import sys

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo))
    try:
        from benchmarks import steprate
    finally:
        sys.path.remove(str(repo))
    from slurm_fsm_dev import localcluster

    daemons = localcluster.daemon_pids()
    assert "slurmctld" in daemons and any(n.startswith("slurmd") for n in daemons), daemons

    def masks() -> dict[int, set[int]]:
        got = {}
        for pid in daemons.values():
            for tid in steprate._threads(pid):
                try:
                    got[tid] = os.sched_getaffinity(tid)
                except OSError:  # a thread that ended meanwhile (slurmctld's RPC threads)
                    continue
        return got

    before, mine = masks(), os.sched_getaffinity(0)
    if len(mine) < 2:
        with pytest.raises(SystemExit, match="needs 2 CPUs"), steprate.split_cpus():
            pass
        return
    with steprate.split_cpus() as split:
        assert split["cluster_cpu"] != split["login_cpu"]
        during = masks()
        assert during and set(map(frozenset, during.values())) == {
            frozenset({split["cluster_cpu"]})}
        assert os.sched_getaffinity(0) == {split["login_cpu"]}
    after = masks()
    assert {tid: m for tid, m in after.items() if tid in before} == \
        {tid: before[tid] for tid in after if tid in before}
    assert os.sched_getaffinity(0) == mine
