"""examples/orchestrator: three specs through one Allocation on the real cluster."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from slurm_fsm_dev.localcluster import ClusterInfo

pytestmark = pytest.mark.slurm

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "orchestrator" / "three_specs.py"


def test_three_specs_one_allocation_then_released(local_cluster: ClusterInfo, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("three_specs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rc = module.main([str(tmp_path), "--partition", local_cluster.partition,
                      "--account", local_cluster.account])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [line for line in out.splitlines() if " PASSED " in line]
    assert len(lines) == 3, out
    allocations = {line.split()[3] for line in lines}
    assert len(allocations) == 1, out
    assert "Allocating" in lines[0] and "Allocating" not in lines[1] + lines[2]
    assert "will not reuse" not in out.split(lines[0])[1]
    assert "released: Allocation" in out
    job_id = allocations.pop()
    left = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert left.stdout.strip() in ("", "COMPLETING", "CANCELLED"), left.stdout
    assert not (tmp_path / "work_dirs" / ".slurm_alloc.json").exists()
