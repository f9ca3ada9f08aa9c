"""Issue 41 item 8 on the real cluster: the demo counts every Slurm command a run
issues (its lease ``srun`` was missed: 3 for the second run where the fake said 5),
and the real count is the fake's, command for command."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm import demo
from slurm_fsm_dev.localcluster import ClusterInfo

pytestmark = pytest.mark.slurm

#: the tool each fake call of a warm run stands for
TOOL = {"query_job": "squeue", "start_lease": "srun", "list_steps": "squeue"}


def _second_column(out: str) -> list[str]:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if "run 2 (" in line)
    column = lines[head].index("run 2 (")
    second = []
    for line in lines[head + 1:]:
        if not line.startswith("  "):
            break
        if line[column:].strip():
            second.append(line[column:].strip())
    return second


def test_the_demo_counts_the_lease_srun_as_the_fake_does(
        local_cluster: ClusterInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo.run_demo(fake=True, quiet=True) == 0
    fake = _second_column(capsys.readouterr().out)
    assert demo.run_demo(quiet=True) == 0
    out = capsys.readouterr().out
    assert "THE FAKE CLUSTER" not in out
    real = _second_column(out)
    assert "run 2 (4 commands)" in out, out
    assert [c.split()[0] for c in real] == [TOOL[op] for op in fake], (real, fake)
    assert real[1].startswith("srun --jobid=") and real[2].startswith("squeue -s"), real
