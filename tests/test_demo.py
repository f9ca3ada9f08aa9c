"""The demo on the fake cluster: both runs pass, the second reuses, all is released."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm import cli, demo


def test_fake_demo_reuses_and_releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo.run_demo(fake=True, quiet=True) == 0
    out = capsys.readouterr().out
    assert "THE FAKE CLUSTER" in out
    assert out.count("PASSED  (pytest, persistent)") == 2
    assert "NoState -> Allocating -> Ready -> Running -> Ready" in out
    assert "NoState -> Validating -> Ready -> Running -> Ready" in out
    assert "the second reused allocation" in out
    assert "released." in out
    root = tmp_path / "work_dirs" / "demo" / "fake"
    assert (root / "job_spec.json").exists()
    assert not (root / "work_dirs" / ".slurm_alloc.json").exists()


def test_demo_falls_back_to_the_fake_cluster_when_no_slurm_is_configured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(demo, "_slurm_configured", lambda: False)
    assert demo.run_demo(quiet=True) == 0
    out = capsys.readouterr().out
    assert "no Slurm configured here" in out
    assert "THE FAKE CLUSTER" in out


def test_the_demo_does_not_start_the_dev_cluster() -> None:
    """The product never reaches into the project's development cluster."""
    import ast

    for module in (demo, cli):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        names = {alias.name for node in ast.walk(tree)
                 if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}
        modules = {node.module for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.module}
        assert "localcluster" not in names and "slurm_fsm_dev.localcluster" not in modules
