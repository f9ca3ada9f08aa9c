"""The package is the product: a wheel built from this tree, installed in a fresh
virtual environment, runs the demo on the fake cluster from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    (path,) = out.glob("slurm_fsm-*.whl")
    return path


def test_wheel_ships_the_demo_example(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "slurm_fsm/_examples/pytest/job.slurm" in names
    assert "slurm_fsm/_examples/pytest/job_spec.json" in names
    assert "slurm_fsm/py.typed" in names


def test_demo_runs_from_an_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True,
                   timeout=300, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "PYTHONPATH")}
    proc = subprocess.run([str(venv / "bin" / "slurm-fsm"), "demo", "--fake", "--quiet"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "THE FAKE CLUSTER" in proc.stdout
    assert "the second reused allocation" in proc.stdout
    assert "site-packages/examples" not in proc.stdout + proc.stderr
