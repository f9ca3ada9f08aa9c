"""The demo on the fake cluster: both runs pass, the second reuses, all is released."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_fsm import demo


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


def test_demo_falls_back_to_the_fake_cluster_when_no_slurm_can_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(demo, "_slurm_configured", lambda: False)

    def cannot(*_a: object, **_k: object) -> object:
        raise demo.localcluster.LocalClusterError(
            "the local Slurm cluster must be started as root")

    monkeypatch.setattr(demo.localcluster, "up", cannot)
    assert demo.run_demo(quiet=True) == 0
    out = capsys.readouterr().out
    assert "cannot run here: the local Slurm cluster must be started as root" in out
    assert "THE FAKE CLUSTER" in out
