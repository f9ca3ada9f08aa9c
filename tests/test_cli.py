"""The slurm-fsm command on the fake backend: exit codes and --json purity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_fsm import cli
from slurm_fsm.cli import main
from slurm_fsm.machine import EDGES, mermaid_diagram
from slurm_fsm.testing import FakeCluster


def write_spec(tmp_path: Path, **over: object) -> Path:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\n")
    data: dict[str, object] = {
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".",
        "slurm_params": {"partition": "batch", "account": "acct"},
    }
    data.update(over)
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps(data))
    return spec


def test_run_json_prints_only_the_report(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    code = main(["run", str(spec), "--json", "--backend", "fake"])
    out, err = capsys.readouterr()
    report = json.loads(out)  # stdout is exactly one JSON document
    assert code == 0
    assert report["status"] == "PASSED" and report["mode"] == "persistent"
    assert report["path"] == ["NoState", "Allocating", "Ready", "Running", "Ready"]
    assert "[slurm-fsm]" in err  # progress went to stderr


def test_quiet_prints_no_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["run", str(spec), "--json", "--quiet", "--backend", "fake"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("over", "needle"), [
    ({"slurm_params": {"partition": "batch", "account": "acct", "nodes": 0}},
     "slurm_params.nodes: must be >= 1"),
    ({"script_path": "missing.slurm"}, "script_path: no such file"),
])
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           over: dict[str, object], needle: str) -> None:
    spec = write_spec(tmp_path, **over)
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert needle in err


def test_missing_spec_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_error_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec(tmp_path, docker_image="img", container_name="c")
    monkeypatch.setattr(cli, "_fake_for", lambda _spec: FakeCluster(pyxis=False))
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ERROR"
    assert "no pyxis" in report["summary"]


def test_release_and_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["status", str(spec), "--json", "--backend", "fake"]) == 0
    assert json.loads(capsys.readouterr().out)["allocation"] is None
    assert main(["release", str(spec), "--json", "--backend", "fake"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "RELEASED"


def test_plan_changes_nothing_and_lists_commands(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["plan", str(spec), "--json", "--backend", "fake"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["path"] == ["NoState", "Allocating", "Ready"]
    assert any(c.startswith("salloc --no-shell") for c in plan["would_change"])
    assert not (tmp_path / "work_dirs").exists()


def test_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram"]) == 0
    assert capsys.readouterr().out == mermaid_diagram(EDGES)
    assert main(["diagram", "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph slurm_fsm {")


def test_unwritable_work_dir_is_bad_input(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "work").write_text("a file where the folder should be")
    spec = write_spec(tmp_path)
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    assert "work_dir: cannot create" in capsys.readouterr().err


def test_unexpected_error_still_prints_a_json_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec(tmp_path)

    def broken(*_a: object, **_k: object) -> object:
        raise PermissionError(13, "Permission denied", "/repo/work_dirs")

    monkeypatch.setattr("slurm_fsm.executor.Executor.run", broken)
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ERROR" and "Permission denied" in out["summary"]


def test_version_bare_help_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_fsm import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"slurm-fsm {__version__}"
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: slurm-fsm") and "exit codes:" in out
    for line in ("0  PASSED", "1  FAILED", "2  bad input", "3  ERROR", "128+N"):
        assert line in out


def test_every_option_has_help_text() -> None:
    import argparse

    from slurm_fsm.cli import _parser

    parsers = [_parser()]
    missing = []
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.help in (None, "") and action.dest != "help":
                missing.append(f"{p.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
