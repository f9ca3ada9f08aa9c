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
    # side by side; each run's lease step (issue 28) is one command, its closing check one more
    # only what stands for a Slurm command (not start_script: the job's bash), as the
    # real backend counts them (issue 41 item 8: index.md says 4 for the second run)
    assert "run 1 (9 commands)" in out and "run 2 (4 commands)" in out
    table = out[out.index("run 2 (4 commands)"):out.index("[demo] the second")]
    assert [line.split()[-1] for line in table.splitlines()[1:5]] == [
        "query_job", "start_lease", "list_steps", "query_job"], table
    skipped = out[out.index("it did not run: "):].splitlines()[0]
    assert "allocate" in skipped and "find_jobs" in skipped
    assert "released." in out
    assert "nothing is left running" in out
    assert "--backend fake" in out  # how to go on
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


def test_make_demo_does_not_build_containers_its_job_does_not_need(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make demo`` starts the cluster with SLURM_FSM_LOCAL_CONTAINERS=if-built: with no
    cached build nothing is built (no 80 s for a job without a container), and the
    reason carries an estimate made from this machine's CPUs. (The decision needs
    sources and root, not a build: stand-in sources and a euid of 0 here, so a clone
    without ``../shared`` checks it too; it failed there, issue 41 item 7.)"""
    import os

    from slurm_fsm_dev import localpyxis

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    demo_rule = makefile[makefile.index("\ndemo:"):].split("\n\n")[0]
    assert "SLURM_FSM_LOCAL_CONTAINERS=if-built scripts/local-slurm up" in demo_rule
    src = tmp_path / "sources"
    src.mkdir()
    for name in localpyxis.SOURCE_FILES:
        (src / name).write_text("stand-in\n")
    monkeypatch.setenv(localpyxis.ENV_SOURCES, str(src))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv(localpyxis.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv(localpyxis.ENV_CONTAINERS, "if-built")
    said: list[str] = []
    info, problem = localpyxis.prepare(tmp_path / "base", tmp_path / "plugstack.conf",
                                       say=said.append)
    assert info is None and problem.startswith(localpyxis.NOT_BUILT)
    assert f"about {localpyxis.build_estimate_s():.0f} s" in problem
    assert said == []  # nothing was built
    assert (tmp_path / "plugstack.conf").read_text() == ""


def test_the_go_on_line_puts_the_nvidia_smi_stand_in_on_path(tmp_path: Path) -> None:
    """The demo's "to go on" line is what ``scripts/local-slurm env`` prints: SLURM_CONF
    and the local cluster's nvidia-smi stand-in first on PATH (it left it off, so a GPU
    job run from that shell found no nvidia-smi on the nodes)."""
    from slurm_fsm_dev import localcluster, localgpu

    base = tmp_path / "sfsm"
    (base / "etc").mkdir(parents=True)
    localgpu.bin_dir(base).mkdir()
    conf = str(base / "etc" / "slurm.conf")
    assert demo.export_line(conf) == localcluster._export_line(base)
    assert localgpu.bin_dir(base).name == demo.STAND_IN_DIR
    assert demo.export_line("/etc/slurm/slurm.conf") == "export SLURM_CONF=/etc/slurm/slurm.conf"


def test_the_real_demos_ending_uses_the_export_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "sfsm"
    (base / "etc").mkdir(parents=True)
    (base / demo.STAND_IN_DIR).mkdir()
    monkeypatch.setenv("SLURM_CONF", str(base / "etc" / "slurm.conf"))
    demo._ending(fake=False, kept=False, spec_path=tmp_path / "job_spec.json")
    out = capsys.readouterr().out
    go_on = next(line for line in out.splitlines() if "use the CLI" in line)
    assert f'PATH={base / demo.STAND_IN_DIR}:"$PATH"' in go_on


def test_the_home_page_says_what_the_demo_shows_of_the_second_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/index.md said one squeue for the second run; the demo shows two (before and
    after the job). The page's count is the count of the demo's second column."""
    import re

    monkeypatch.chdir(tmp_path)
    assert demo.run_demo(fake=True, quiet=True) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if "run 2 (" in line)
    column = lines[head].index("run 2 (")
    second = []
    for line in lines[head + 1:]:
        if not line.startswith("  "):
            break
        second.append(line[column:].strip())
    queries = second.count("query_job")  # the fake's name for `squeue -j`
    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "index.md")
                    .read_text().split())
    said = re.search(r"Running -> Ready`: (\d+) Slurm commands besides the job itself: "
                     r"(\w+) `squeue` quer", page)
    assert said is not None
    assert {"one": 1, "two": 2, "three": 3}[said.group(2)] == queries == 2
    assert int(said.group(1)) == len([c for c in second if c]) == 4, second
