"""run_many's shared view of the allocation on the real local Slurm cluster (issue 28,
"At the step-rate limit"): the runs share step 0's squeue, the GPU pre-flight and the
allocation-end squeue; every run still passes on the allocation Slurm has now."""

from __future__ import annotations

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
