"""Issue 25 item 6 on the real local cluster: a one-shot script that names its own
output files (``#SBATCH --output=%x-%j.out``, ``--error=%x-%j-%u-%N.err``), which the
spec's ``log_file_pattern`` does not match, is judged from the files the job wrote,
found with ``scontrol show job`` (StdOut=, StdErr=), and the report names them."""

from __future__ import annotations

import getpass
import uuid
from pathlib import Path

import pytest

from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import spec_dict
from .test_run_real import run, script

pytestmark = pytest.mark.slurm


def own_output(cluster: ClusterInfo, root: Path, directives: str, body: str) -> JobSpec:
    """A one-shot pytest spec whose script (its file name is the job name, unique)
    writes where ``directives`` say, not to ``log_file_pattern`` (``pattern_%j.out``)."""
    name = f"own-{uuid.uuid4().hex[:8]}.sh"
    path = script(root / name, directives + body)
    data = spec_dict(cluster, root, "unused-by-one-shot", script_path=str(path),
                     persistent_mode=False, log_file_pattern="pattern_%j.out",
                     workflow_type="pytest", success_patterns="passed")
    return JobSpec.from_dict(data)


def test_a_passing_script_with_its_own_output_is_passed_and_names_the_file(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    spec = own_output(local_cluster, tmp_path, "#SBATCH --output=%x-%j.out\n", """
        echo "collected 2 items"
        echo "tests/test_a.py .."
        echo "=== 2 passed in 0.10s ==="
    """)
    report = run(spec)
    job = report.job_id or ""
    wrote = spec.work_dir / f"{spec.script_path.name}-{job}.out"
    assert report.status is Status.PASSED, report.render_text()
    assert report.metrics["passed"] == 2
    assert wrote.is_file() and not (spec.work_dir / f"pattern_{job}.out").exists()
    assert report.log_files == {"stdout": str(wrote), "stderr": str(wrote)}
    assert any(f"output read from {wrote}, where Slurm says job {job} writes (scontrol" in n
               for n in report.notes), report.notes


def test_a_failing_script_with_its_own_files_is_failed_naming_the_test(
        local_cluster: ClusterInfo, tmp_path: Path) -> None:
    """stdout and stderr apart, ``%u`` and ``%N`` in the error file's name (Slurm 22.05's
    scontrol shows ``%N`` unexpanded: the run expands it with the job's BatchHost)."""
    spec = own_output(local_cluster, tmp_path,
                      "#SBATCH --output=%x-%j.out\n#SBATCH --error=%x-%j-%u-%N.err\n", """
        echo "collected 2 items"
        echo "FAILED tests/test_a.py::test_two - assert 1 == 2"
        echo "=== 1 failed, 1 passed in 0.10s ==="
        echo "E   assert 1 == 2" >&2
        exit 1
    """)
    report = run(spec)
    job = report.job_id or ""
    out = spec.work_dir / f"{spec.script_path.name}-{job}.out"
    err_files = list(spec.work_dir.glob(f"{spec.script_path.name}-{job}-*.err"))
    assert len(err_files) == 1, sorted(p.name for p in spec.work_dir.iterdir())
    err = err_files[0]
    assert err.name.startswith(f"{spec.script_path.name}-{job}-{getpass.getuser()}-")
    assert "%" not in err.name
    assert report.status is Status.FAILED, report.render_text()
    assert report.exit_code == 1
    assert report.log_files == {"stdout": str(out), "stderr": str(err)}
    assert any("tests/test_a.py::test_two" in e for e in report.errors), report.errors
    assert report.err_tail == ["E   assert 1 == 2"]
    assert not any(d["symptom"] == "empty output log" for d in report.diagnosis)
