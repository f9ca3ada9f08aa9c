"""The slurm-fsm command on the fake backend: exit codes and --json purity."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from slurm_fsm import cli
from slurm_fsm.cli import main
from slurm_fsm.step0.table import EDGES, mermaid_diagram
from slurm_fsm.testing import FakeCluster

pytestmark = pytest.mark.usefixtures("golden_reports")


def write_spec(tmp_path: Path, **over: object) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\n")
    data: dict[str, object] = {
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".",
        "slurm_params": {"partition": "debug", "account": "acct"},
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
    ({"slurm_params": {"partition": "debug", "account": "acct", "nodes": 0}},
     "slurm_params.nodes: must be >= 1"),
    ({"script_path": "missing.slurm"}, "script_path: no such file"),
])
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           over: dict[str, object], needle: str) -> None:
    spec = write_spec(tmp_path, **over)
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)  # one document, also on bad input
    assert doc["status"] == "BAD_INPUT" and doc["cli_exit_code"] == 2
    assert doc["file"] == str(spec) and any(needle in p for p in doc["problems"])
    assert needle in err


def test_missing_spec_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_error_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec(tmp_path, docker_image="img", container_name="c")
    monkeypatch.setattr(cli, "_fake_for", lambda _args: FakeCluster(pyxis=False))
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


def test_release_says_released_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "released" three times: two progress lines on stderr, then the report."""
    spec = write_spec(tmp_path)
    cluster = cli._fake_for(cli._parser().parse_args(["run", str(spec), "--backend", "fake"]))
    monkeypatch.setattr(cli, "_fake_for", lambda _args: cluster)  # one cluster for both
    assert main(["run", str(spec), "--backend", "fake"]) == 0
    capsys.readouterr()
    assert main(["release", str(spec), "--backend", "fake"]) == 0
    out, err = capsys.readouterr()
    assert len(re.findall(r"\breleased\b", out + err)) == 1, (out, err)
    assert "summary:     Allocation" in out and "released." in out
    assert main(["release", str(spec), "--json", "--backend", "fake"]) == 0
    out, err = capsys.readouterr()
    assert len(re.findall(r"\breleased\b", out + err)) <= 1, (out, err)


def test_exit_codes_bad_input_is_2_a_spec_the_cluster_cannot_run_is_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README and docs/cli.md say which is which: 2 for a spec wrong in itself (nothing
    asked of Slurm), 3 for a valid spec this cluster cannot run (the cluster was asked)."""
    bad = write_spec(tmp_path / "bad", slurm_params={"partition": "debug", "nodes": 0,
                                                      "account": "acct"})
    assert main(["run", str(bad), "--json", "--backend", "fake"]) == 2
    assert json.loads(capsys.readouterr().out)["status"] == "BAD_INPUT"
    elsewhere = write_spec(tmp_path / "gpu", slurm_params={"partition": "gpu",
                                                            "account": "acct"})
    assert main(["run", str(elsewhere), "--json", "--backend", "fake"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ERROR" and "no partition 'gpu'" in report["summary"]
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    cli_md = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for text in (readme, cli_md):
        flat = " ".join(text.split())
        assert "2 bad input: the spec, a file it names or the command line is wrong in " \
               "itself" in flat.replace("| 2 | ", "2 ")
        assert "cluster cannot run" in flat


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


# ------------------------------------------------------------------ the fake backend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["pytest", "benchmark", "eval", "custom"])
def test_shipped_examples_pass_on_the_fake_backend_which_runs_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """The script runs for real here (its srun lines too, through the fake's srun); the
    allocation lives in a state file of its own that no real command reads."""
    import shutil

    shutil.copytree(EXAMPLES / name, tmp_path / "examples" / name)
    spec = tmp_path / "examples" / name / "job_spec.json"
    assert main(["run", str(spec), "--json", "--backend", "fake"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "PASSED", report["summary"]
    log = Path(report["log_files"]["stdout"]).read_text()
    marker = {"pytest": "test_forward[", "benchmark": "benchmarking on ",
              "eval": "evaluating on ", "custom": "custom job done"}[name]
    assert marker in log  # printed by the script itself (pytest, benchmark, eval: by srun)
    if name == "custom":  # srun -N 2 --ntasks-per-node=1 hostname: one line per task
        assert len(log.splitlines()) == 3
    assert "the script runs on this machine" in err
    work_dirs = tmp_path / "work_dirs"
    assert (work_dirs / ".slurm_alloc.fake.json").is_file()
    assert not (work_dirs / ".slurm_alloc.json").exists()
    assert not (work_dirs / ".slurm_run.json").exists()
    # the real backend's status sees no allocation (and asks Slurm nothing)
    assert main(["status", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["allocation"] is None


def test_fake_backend_script_failure_is_the_scripts(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, workflow_type="custom", success_patterns="done")
    (tmp_path / "job.slurm").write_text("#!/bin/bash\necho started\nsrun -N 9 true\n")
    assert main(["run", str(spec), "--json", "--quiet", "--backend", "fake"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "FAILED" and report["exit_code"] == 1
    log = Path(report["log_files"]["stdout"]).read_text()
    assert "srun: error: Only allocated 1 nodes asked for 9" in log


@pytest.mark.parametrize(("params", "extra", "needle"), [
    ({"partition": "batch", "account": "acct"}, [],
     "slurm_params.partition: no partition 'batch' on this cluster; it has: debug (up, 4 "
     "nodes, 8 GPUs per node)"),
    ({"partition": "debug", "account": "someone-elses"}, [],
     "slurm_params.account: 'someone-elses' is not an account of user"),
    ({"partition": "gpu", "account": "acct"}, ["--fake-partition", "gpu", "--fake-account",
                                               "other"],
     "slurm_params.account: 'acct' is not an account of user"),
    ({"partition": "debug", "account": "acct", "nodes": 9}, [],
     "slurm_params.nodes: 9 nodes asked; partition 'debug' has 4 such nodes"),
])
def test_fake_backend_rejects_partitions_and_accounts_it_was_not_told_about(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], params: dict[str, str],
        extra: list[str], needle: str) -> None:
    """Caught before salloc (the fake answers the pre-flight questions), named once,
    with what the cluster has."""
    spec = write_spec(tmp_path, slurm_params=params)
    assert main(["run", str(spec), "--json", "--backend", "fake", *extra]) == 3
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["status"] == "ERROR"
    assert needle in report["summary"]
    assert report["errors"] == [report["summary"]]
    assert needle not in captured.err  # the progress does not repeat it
    assert not (tmp_path / "work_dirs" / ".salloc.log").exists()  # no salloc was tried


def test_plan_names_a_partition_the_cluster_lacks_and_exits_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, slurm_params={"partition": "gpu", "account": "acct"})
    assert main(["plan", str(spec), "--backend", "fake"]) == 3
    out = capsys.readouterr().out
    assert ("no partition 'gpu' on this cluster; it has: debug (up, 4 nodes, 8 GPUs per node)"
            in out)
    assert "salloc" not in out  # the plan stops at the failed check


def test_run_text_report_says_the_reason_once(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, slurm_params={"partition": "gpu", "account": "acct"})
    assert main(["run", str(spec), "--backend", "fake"]) == 3
    captured = capsys.readouterr()
    terminal = captured.out + captured.err
    assert terminal.count("no partition 'gpu'") == 1


@pytest.mark.parametrize("command", ["run", "plan", "status", "release"])
def test_no_slurm_configuration_stops_before_any_slurm_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: str) -> None:
    """One message saying how to point the shell at a cluster; no Slurm tool runs."""
    from slurm_fsm import preflight

    spec = write_spec(tmp_path)
    (tmp_path / "work_dirs").mkdir(exist_ok=True)  # status with a state file asks Slurm
    (tmp_path / "work_dirs" / ".slurm_alloc.json").write_text("{}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(preflight, "CONFIG_PLACES", (str(tmp_path / "nowhere.conf"),))
    bin_dir = tmp_path / "bin"  # every Slurm tool, leaving a trace when run
    bin_dir.mkdir()
    for tool in ("squeue", "salloc", "srun", "sinfo", "sacctmgr", "scancel", "sacct",
                 "scontrol", "sbatch"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ntouch {tmp_path}/ran-{tool}\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert main([command, str(spec)]) == 3
    captured = capsys.readouterr()
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "SLURM_CONF" in lines[0] and "scripts/local-slurm env" in lines[0]


def test_slurm_conf_naming_a_missing_file_is_named(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    assert main(["run", str(spec), "--json"]) == 3
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["status"] == "ERROR"
    assert f"SLURM_CONF={tmp_path / 'gone.conf'}: no such file" in report["summary"]


def test_fake_backend_takes_declared_partitions(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, slurm_params={"partition": "gpu", "account": "team"})
    assert main(["run", str(spec), "--json", "--quiet", "--backend", "fake",
                 "--fake-partition", "gpu", "--fake-account", "team"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "PASSED"
    assert main(["run", str(spec), "--json", "--fake-partition", "gpu"]) == 2
    assert "only with --backend fake" in json.loads(capsys.readouterr().out)["problems"][0]


# ------------------------------------------------------------------- --json: always one


def _bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    bad_spec = write_spec(tmp_path, slurm_params={"partition": "debug", "nodes": 0})
    return {"missing file": [str(tmp_path / "nope.json")], "not JSON": [str(bad_json)],
            "bad spec": [str(bad_spec)], "unknown option": [str(bad_spec), "--frobnicate"]}


@pytest.mark.parametrize("command", ["run", "release", "status", "plan"])
def test_json_is_one_document_on_any_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    for what, rest in _bad_inputs(tmp_path).items():
        code = main([command, *rest, "--json", "--backend", "fake"])
        out = capsys.readouterr().out
        doc = json.loads(out)  # never crashes an orchestrator
        assert code == 2, what
        assert doc["status"] == "BAD_INPUT" and doc["cli_exit_code"] == 2, what
        assert doc["command"] == command and doc["problems"], what
        if what != "unknown option":
            assert doc["file"] == rest[0], what


def test_json_usage_error_without_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "BAD_INPUT" and "invalid choice" in doc["summary"]


@pytest.mark.parametrize("command", ["run", "release", "status", "plan"])
def test_json_is_one_document_on_an_unexpected_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    spec = write_spec(tmp_path)

    def bug(_args: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_fake_for", bug)
    assert main([command, str(spec), "--json", "--backend", "fake"]) == 3
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["status"] == "ERROR" and doc["cli_exit_code"] == 3
    assert "RuntimeError: a bug" in doc["summary"] and "Traceback" in err


@pytest.mark.parametrize("command", ["status", "plan"])
def test_json_is_one_document_on_ctrl_c(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    spec = write_spec(tmp_path)

    def interrupted(_args: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_fake_for", interrupted)
    assert main([command, str(spec), "--json", "--backend", "fake"]) == 130
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "CANCELLED" and doc["cli_exit_code"] == 130


# ------------------------------------------------------------------------ lean start

#: Modules a command must not load: what it does not use costs every start.
HEAVY = ("slurm_fsm.executor", "slurm_fsm.monitor", "slurm_fsm.build", "slurm_fsm.results",
         "slurm_fsm.report", "slurm_fsm.progress", "slurm_fsm.plan", "slurm_fsm.demo",
         "slurm_fsm.testing", "slurm_fsm.subprocess_backend", "slurm_fsm.machine",
         "slurm_fsm.spec", "transitions", "cattrs", "attrs", "filelock",
         "importlib.metadata", "slurm_fsm.oneshot", "slurm_fsm.detach",
         "slurm_fsm.supervise", "slurm_fsm.agent")


def _imported(tmp_path: Path, *argv: str) -> set[str]:
    """The modules ``slurm-fsm ARGV`` imports, from ``python -X importtime`` (a process
    of its own: nothing is cached from the test's imports)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["SLURM_CONF"] = str(tmp_path / "no-cluster.conf")  # no Slurm call succeeds
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "slurm_fsm", *argv],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    return {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize(("argv", "allowed"), [
    (["--version"], {"importlib.metadata"}),
    (["diagram"], {"slurm_fsm.machine", "slurm_fsm.spec", "transitions", "cattrs", "attrs",
                   "filelock"}),
    # status: no machine, no transitions (the expiry margin lives in the spec)
    (["status", "{spec}", "--json"], {"slurm_fsm.spec", "slurm_fsm.subprocess_backend",
                                      "cattrs", "attrs", "filelock"}),
    (["run", "{spec}", "--json", "--backend", "fake"],
     {"slurm_fsm.executor", "slurm_fsm.monitor", "slurm_fsm.results", "slurm_fsm.report",
      "slurm_fsm.progress", "slurm_fsm.testing", "slurm_fsm.subprocess_backend",
      "slurm_fsm.machine", "slurm_fsm.spec", "transitions", "cattrs", "attrs", "filelock"}),
    # a warm run of the persistent path: not the one-shot path (issue 42 item 5)
    # runs: the run files and reports, no spec, no machine, no backend
    (["runs"], {"slurm_fsm.detach", "slurm_fsm.report", "cattrs", "attrs"}),
])
def test_each_command_imports_only_what_it_needs(tmp_path: Path, argv: list[str],
                                                 allowed: set[str]) -> None:
    spec = write_spec(tmp_path)
    loaded = _imported(tmp_path, *[a.replace("{spec}", str(spec)) for a in argv])
    assert "slurm_fsm.cli" in loaded  # the measurement works
    assert sorted(set(HEAVY) & loaded - allowed) == []


#: Modules a warm run (no container, no successor) never uses: loading them cost the
#: CLI's first Slurm command its start (issue 42 item 5: the CLI within 50 ms of the
#: library). ``slurm_fsm.handoff``: the warm successor's, loaded by the rooms that
#: work on one (issue 40).
WARM_UNUSED = ("slurm_fsm.imagecache", "slurm_fsm.setupkey", "slurm_fsm.step0.setup",
               "slurm_fsm.step0.container", "slurm_fsm.handoff", "slurm_fsm.warmer",
               "slurm_fsm.pyxissite", "slurm_fsm.oneshot", "slurm_fsm.detach",
               "slurm_fsm.supervise", "slurm_fsm.agent", "slurm_fsm.plan", "slurm_fsm.build",
               "slurm_fsm.demo")
#: Loaded by a warm run, after its first Slurm command only (the judge: the run's end).
WARM_LATER = ("slurm_fsm.results", "ctypes")

#: In a process of its own: the modules the CLI's ``run`` loads before its first Slurm
#: command (what ``slurm_fsm.cli`` and its run path import), then a warm run (a cold one
#: first, on a fake cluster) with the modules of ``WARM_UNUSED`` gone and unimportable:
#: whatever the warm run imports of them fails it.
WARM_RUN = r"""
import json, sys
from pathlib import Path
import slurm_fsm.cli, slurm_fsm.preflight, slurm_fsm.progress, slurm_fsm.scriptcheck
import slurm_fsm.spec, slurm_fsm.subprocess_backend
from slurm_fsm.executor import Executor
unused = json.loads(sys.argv[2])
static = sorted(m for m in [*unused, *json.loads(sys.argv[3])] if m in sys.modules)
from slurm_fsm.testing import FakeCluster, FakeScript
from slurm_fsm.spec import JobSpec
spec = JobSpec.from_file(Path(sys.argv[1]))
fake = FakeCluster(partitions={"debug": ["node01"]}, accounts=["acct"])
fake.script(spec.script_path, FakeScript(lines=("ok",)))
cold = Executor(spec, fake, clock=fake.clock).run()

class Unimportable:
    def find_spec(self, name, path=None, target=None):
        if name in unused:
            raise ImportError(f"the warm run imported {name}")
        return None

for name in unused:
    sys.modules.pop(name, None)
    parent, _, leaf = name.rpartition(".")
    if hasattr(sys.modules.get(parent), leaf):
        delattr(sys.modules[parent], leaf)
sys.meta_path.insert(0, Unimportable())
warm = Executor(spec, fake, clock=fake.clock).run()
print(json.dumps({"static": static, "cold": cold.status.name, "why": cold.summary,
                  "path": warm.path,
                  "warm": warm.status.name, "summary": warm.summary}))
"""


def test_a_warm_run_through_the_cli_loads_none_of_what_it_does_not_use(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    spec = write_spec(tmp_path)
    proc = subprocess.run([sys.executable, "-c", WARM_RUN, str(spec), json.dumps(WARM_UNUSED),
                           json.dumps(WARM_LATER)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["static"] == []  # the CLI's run path imports none of them (nor the judge)
    assert doc["cold"] == "PASSED", doc["why"]
    assert "Allocating" not in doc["path"], doc["path"]  # warm: the allocation kept
    assert doc["warm"] == "PASSED", doc["summary"]  # nor does the warm run itself


def test_the_fake_backend_never_touches_the_real_salloc_log(tmp_path: Path) -> None:
    """The fake keeps its own state file and its own salloc log: a real allocation's
    failure message in ``.salloc.log`` survives a fake run."""
    spec = write_spec(tmp_path)
    data = json.loads(spec.read_text())
    work_dirs = tmp_path / data["repo_root"] / "work_dirs"
    work_dirs.mkdir(parents=True, exist_ok=True)
    (work_dirs / ".salloc.log").write_text("salloc: error: the real one\n")
    assert main(["run", str(spec), "--json", "--quiet", "--backend", "fake"]) == 0
    assert (work_dirs / ".salloc.log").read_text() == "salloc: error: the real one\n"
    assert (work_dirs / ".salloc.fake.log").exists()
    assert not (work_dirs / ".slurm_alloc.json").exists()


def test_run_reports_a_missing_script_with_the_other_problems_in_one_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, script_path="nope.slurm", model_name="a/b")
    assert main(["run", str(spec), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    problems = "\n".join(doc["problems"])
    assert "model_name:" in problems
    assert f"script_path: no such file: {tmp_path / 'nope.slurm'}" in problems
    # release and status do not need the script
    assert main(["status", str(write_spec(tmp_path, script_path="nope.slurm")), "--json",
                 "--backend", "fake"]) == 0


def test_fake_backend_results_say_they_are_fake_and_status_names_no_container(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    assert main(["run", str(spec), "--backend", "fake", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASSED  (") and out.splitlines()[0].endswith(cli.FAKE_LABEL)
    assert main(["run", str(spec), "--backend", "fake", "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "fake"
    assert main(["status", str(spec), "--backend", "fake"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(cli.FAKE_LABEL)


def test_status_of_an_allocation_without_container_says_no_container(tmp_path: Path) -> None:
    from slurm_fsm.allocation import AllocationStatus
    from slurm_fsm.duration import Duration

    common = {"state_file": tmp_path / "s.json", "job_id": "7", "nodelist": "n1",
              "partition": "debug", "nodes": 1, "slurm_state": "RUNNING",
              "time_left": Duration.parse("10:00")}
    bare = AllocationStatus(**common, installed=True).render_text()
    assert "no container (nothing to import or install)" in bare
    assert "installed" not in bare.replace("nothing to import or install", "")
    boxed = AllocationStatus(**common, container_name="c1", docker_image="img",
                             installed=False).render_text()
    assert "container c1, not installed yet" in boxed


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_a_command_line_builds_its_commands_parser_alone_and_the_same() -> None:
    """Each parser built costs every start (issue 39: ``logs`` within 0.5 s): a command
    line naming its command builds that one alone, the same as in the whole parser; a
    name that is no command gets the whole parser (its error lists them all)."""
    from slurm_fsm.cli import _parser

    whole = _subparsers(_parser())
    assert {"run", "logs", "runs", "report", "diagram", "demo"} <= set(whole)
    for name, sub in whole.items():
        alone = _subparsers(_parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == sub.format_help()
    assert set(_subparsers(_parser("logz"))) == set(whole)
