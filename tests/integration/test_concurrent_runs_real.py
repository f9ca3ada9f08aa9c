"""Two `slurm-fsm run` processes at once on one repo_root, on the real cluster.

The state file's lock covers a whole persistent run, so the second run waits for
the first, then reuses its allocation: one allocation, both runs served, and no run
cancels (or shares) the allocation while the other's job runs on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import JobNames, spec_dict

pytestmark = pytest.mark.slurm


def test_two_runs_at_once_share_one_allocation_one_after_the_other(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("concurrent")
    (tmp_path / "job.slurm").write_text(
        "#!/bin/bash\necho start $(date +%s.%N)\nsrun sleep 1\necho end $(date +%s.%N)\n")
    specs = []
    for i in (1, 2):
        data = spec_dict(local_cluster, tmp_path, name, work_dir=str(tmp_path / f"work{i}"),
                         success_patterns="end")
        path = tmp_path / f"spec{i}.json"
        path.write_text(json.dumps(data))
        specs.append(path)
    env = {**os.environ, "SLURM_CONF": str(local_cluster.slurm_conf)}
    procs = [subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(p), "--json",
                               "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for p in specs]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert [r["status"] for r in reports] == ["PASSED", "PASSED"]
    assert reports[0]["allocation_id"] == reports[1]["allocation_id"]
    paths = sorted(tuple(r["path"]) for r in reports)
    assert paths[0][:2] == ("NoState", "Allocating")  # one of them made the allocation
    assert paths[1][:2] == ("NoState", "Validating")  # the other reused it
    # the jobs did not overlap: one ended before the other started
    spans = []
    for r in reports:
        lines = Path(r["log_files"]["stdout"]).read_text().split()
        spans.append((float(lines[lines.index("start") + 1]), float(lines[lines.index("end") + 1])))
    first, second = sorted(spans)
    assert first[1] <= second[0]
    released = subprocess.run([sys.executable, "-m", "slurm_fsm", "release", str(specs[0]),
                               "--json", "--quiet"], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
    assert json.loads(released.stdout)["status"] == "RELEASED"


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
