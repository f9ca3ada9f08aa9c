"""What the docs say, checked against the code (issue 25, item 8: nine statements of
states.md, spec.md, report.md, cli.md, allocation.md and backends.md disagreed with
it). Each test reads the claim from the page and runs what it describes."""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.allocation import AllocationStatus
from slurm_fsm.backend import JobInfo
from slurm_fsm.capacity import allocation_request_size
from slurm_fsm.duration import Duration
from slurm_fsm.executor import Executor
from slurm_fsm.jobstate import JobState
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.placement import script_env
from slurm_fsm.report import Report
from slurm_fsm.results import Status, diagnose
from slurm_fsm.runrecord import RunBook
from slurm_fsm.slurmcli import salloc_argv, sbatch_argv
from slurm_fsm.spec import JobSpec
from slurm_fsm.step0.table import EDGES, Effect, State
from slurm_fsm.testing import FakeCluster, FakeScript, make_spec

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)


def _run(tmp_path: Path, script: FakeScript, *, first_job_id: int = 77,
         **over: Any) -> tuple[Report, JobSpec]:
    fake = FakeCluster(first_job_id=first_job_id)
    spec = make_spec(tmp_path, **over)
    if not spec.persistent_mode:
        spec.script_path.write_text("#!/bin/bash\n#SBATCH --output=llama_%j.out\n"
                                    "#SBATCH --error=llama_%j.err\nsrun x\n")
    fake.script(spec.script_path, script)
    return Executor(spec, fake, clock=fake.clock).run(), spec


ONE_SHOT: dict[str, Any] = {"persistent_mode": False, "log_file_pattern": "llama_%j.out",
                            "first_job_id": 1234}

# ------------------------------------------------------------------ report.md


def test_report_md_text_form_is_what_render_text_prints(tmp_path: Path) -> None:
    report, spec = _run(tmp_path, FakeScript(lines=(
        "collected 4 items", "tests/test_a.py ...F",
        "FAILED tests/test_a.py::test_x - AssertionError",
        "===== 1 failed, 3 passed in 12.50s ====="), exit_code=1, line_interval_s=310.75),
        workflow_type="pytest", **ONE_SHOT)
    block = _code_blocks(_section(_page("report.md"), "## Text form"))[0]
    assert report.render_text().replace(str(spec.work_dir), "/w") + "\n" == block


SUMMARY_CASES: list[tuple[FakeScript, dict[str, Any]]] = [
    (FakeScript(lines=("Traceback (most recent call last):", "===== 3 passed in 12.50s =====")),
     {"workflow_type": "pytest", "failure_patterns": "Traceback", **ONE_SHOT}),
    (FakeScript(lines=(), exit_code=3), {"workflow_type": "custom"}),
    (FakeScript(lines=("step 1", "NCCL watchdog: hang detected"), hang=True),
     {"workflow_type": "custom"}),
    (FakeScript(lines=("x",), hang=True),
     {"workflow_type": "custom", "monitor_timeout_seconds": 600, **ONE_SHOT}),
    (FakeScript(lines=("x",), final_state="TIMEOUT"), {"workflow_type": "custom", **ONE_SHOT}),
    (FakeScript(lines=("===== 3 passed, 1 skipped in 2.50s =====",)),
     {"workflow_type": "pytest"}),
]


def test_report_md_summary_examples_are_what_runs_say(tmp_path: Path) -> None:
    lines = _code_blocks(_section(_page("report.md"), "## The summary"))[0].splitlines()
    assert len(lines) == len(SUMMARY_CASES)
    for i, (line, (script, over)) in enumerate(zip(lines, SUMMARY_CASES, strict=True)):
        report, _ = _run(tmp_path / str(i), script, **over)
        if line.endswith("; ..."):
            assert report.summary.startswith(line.removesuffix("..."))
        else:
            assert report.summary == line


def _diagnosis_cases() -> list[list[dict[str, str]]]:
    def d(status: Status, **kw: Any) -> list[dict[str, str]]:
        return diagnose(status, **{"exit_code": None, "slurm_state": None,
                                   "log_empty": False, "log_lines": [], **kw})
    return [
        d(Status.TIMEOUT, slurm_state="TIMEOUT"), d(Status.TIMEOUT),
        d(Status.OUT_OF_MEMORY), d(Status.FAILED, exit_code=1), d(Status.CANCELLED),
        d(Status.FAILED, slurm_state="NODE_FAIL"), d(Status.FAILED, log_empty=True),
        d(Status.HANG_DETECTED), d(Status.BUILD_FAILED),
        d(Status.FAILED, log_lines=["srun: error: Unable to create step for job 7: "
                                    "Job/step already completing or completed"]),
        d(Status.FAILED, log_lines=["srun: error: Unable to create step for job 7: "
                                    "More processors requested than permitted"]),
        d(Status.FAILED, allocation_id="6",
          log_lines=["srun: error: Unable to create step for job 7: "
                     "More processors requested than permitted"]),
        d(Status.ERROR, log_lines=[
            "pyxis: failed to create container filesystem for image",
            "failed to import docker image", "--container-mounts: source path does not exist",
            '"create" flag was passed to --container-name but the container already exists',
            "pip install -e . failed with exit code 1", "Read-only file system"]),
        d(Status.FAILED, log_lines=['pyxis: a container with name "x" does not exist']),
        d(Status.FAILED, log_lines=["torch.OutOfMemoryError: CUDA out of memory."]),
        d(Status.FAILED, log_lines=["slurmstepd: error: Detected 1 oom_kill event"]),
        d(Status.FAILED, log_lines=["NCCL error in: x"]),
        d(Status.ERROR, log_lines=["slurmstepd: error: pyxis: failed to import docker image",
                                   "slurmstepd: error: pyxis:     mkdir: cannot create "
                                   "directory '/run/enroot': Permission denied"]),
        d(Status.ERROR, log_lines=["pyxis:     [INFO] Authentication succeeded",
                                   "pyxis:     Write failed because No space left on device"]),
        d(Status.ERROR, log_lines=["pyxis:     enroot-switchroot: failed to execute: /bin/bash: "
                                   "No such file or directory"]),
        d(Status.ERROR, log_lines=["slurmstepd: error: pyxis: couldn't start container"]),
        d(Status.FAILED, log_lines=["NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
                                    "NVRM: Xid (PCI:0000:02:00): 48, An uncorrectable error"]),
        d(Status.FAILED, log_lines=["E0325 20:57:27.620000 2606 x/api.py:869] failed "
                                    "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: py"]),
        d(Status.FAILED, failure_hits={"Traceback": 1}),
        d(Status.FAILED, exit_code=0, success_missing=True),
        d(Status.FAILED, metrics={"threshold_not_met": True, "failed": 1, "errors": 0}),
        d(Status.ERROR),
    ]


def test_report_md_diagnosis_table_has_every_row_as_diagnose_writes_it() -> None:
    """Cause and advice as written (ERROR's advice used to differ from the code's)."""
    table = _section(_page("report.md"), "## Failure diagnosis")
    rows = {tuple(c.strip().replace("`", "") for c in line.split(" | ")[1:3])
            for line in table.splitlines() if line.startswith("| ") and " | " in line}
    for case in _diagnosis_cases():
        assert case, "each case gives a row"
        for row in case:
            advice = row["advice"].replace("`", "")
            if row["symptom"].startswith("CANCELLED"):  # the page says where the id goes
                advice += " (with the job's id)"
            assert (row["cause"], advice) in rows, row


# ------------------------------------------------------------------ states.md


def test_states_md_job_pending_names_every_waiting_state() -> None:
    line = next(ln for ln in _page("states.md").splitlines() if ln.startswith("| `job_pending`"))
    for state in JobState:
        assert (state.value in re.findall(r"[A-Z_]+", line)) == state.is_pending, state


def test_states_md_the_work_of_allocating_cancels_orphans_without_a_cancel_effect(
        tmp_path: Path) -> None:
    """states.md: the work of a state may cancel (0D orphans), not only an effect."""
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    orphan = fake.make_job(spec.job_name, fake.current_user())
    m = AllocationMachine(spec, fake, clock=fake.clock)
    assert m.prepare().state is State.Ready
    assert fake.jobs[orphan.job_id].state == "CANCELLED"
    taken = [e for e in EDGES if e.source in (State.NoState, State.Allocating)]
    assert Effect.CANCEL not in {x for e in taken for x in e.effects}
    assert "Allocating cancels the" in _page("states.md")


# ------------------------------------------------------------------ spec.md


def _spec_row(field: str) -> str:
    return next(ln for ln in _page("spec.md").splitlines()
                if ln.startswith(f"| `slurm_params.{field}` |"))


def test_spec_md_ntasks_is_exported_and_sizes_tasks_per_node_never_ntasks(
        tmp_path: Path) -> None:
    row = _spec_row("ntasks")
    assert "SLURM_NTASKS" in row and "never `--ntasks`" in row and "not passed to `sbatch`" in row
    spec = make_spec(tmp_path, slurm_params={"nodes": 2, "ntasks": 3})
    size = allocation_request_size(spec)
    argv = salloc_argv(_allocation_request(spec))
    assert "--ntasks-per-node=2" in argv and size.ntasks_per_node == 2
    assert not any(a.startswith("--ntasks=") for a in argv)
    env = script_env(JobInfo(job_id="5", state="RUNNING", nodelist="n[1-2]"),
                     spec.slurm_params)
    assert env["SLURM_NTASKS"] == "3"
    from slurm_fsm.backend import BatchRequest
    batch = sbatch_argv(BatchRequest(script_path=spec.script_path, work_dir=spec.work_dir,
                                     partition="p", account="a"))
    assert not any(a.startswith(("--ntasks", "-n")) for a in batch)


def _allocation_request(spec: JobSpec) -> Any:
    from slurm_fsm.backend import AllocationRequest

    size = allocation_request_size(spec)
    return AllocationRequest(
        partition=spec.slurm_params.partition, account=spec.slurm_params.account,
        nodes=size.nodes, time_limit=spec.alloc_time_limit, job_name=spec.job_name,
        log_path=spec.repo_root / "x.log", gpus_per_node=size.gpus_per_node, user="u",
        ntasks_per_node=size.ntasks_per_node)


def test_spec_md_raising_ntasks_per_node_replaces_the_allocation(tmp_path: Path) -> None:
    row = _spec_row("ntasks_per_node")
    assert "Raising it is safe" in row and "replaces it" in row
    fake = FakeCluster()
    first = make_spec(tmp_path, slurm_params={"ntasks_per_node": 1})
    fake.script(first.script_path, FakeScript(lines=("ok",)))
    one = Executor(first, fake, clock=fake.clock).run()
    assert one.status is Status.PASSED, one.summary
    more = make_spec(tmp_path, slurm_params={"ntasks_per_node": 2})
    two = Executor(more, fake, clock=fake.clock).run()
    assert two.status is Status.PASSED, two.summary
    assert "Incompatible" in two.path and two.allocation_id != one.allocation_id


# ------------------------------------------------------------------ cli.md


def test_cli_md_names_the_fake_run_record_as_it_is(tmp_path: Path) -> None:
    text = _page("cli.md")
    assert "`.slurm_run.fake.<run id>.json`" in text
    book = RunBook(tmp_path / "work_dirs" / ".slurm_alloc.fake.json")
    assert book.path("r0123456789ab").name == ".slurm_run.fake.r0123456789ab.json"


# ------------------------------------------------------------------ allocation.md


def test_allocation_md_status_example_is_what_render_text_prints() -> None:
    block = next(b for b in _code_blocks(_page("allocation.md")) if "job(s) running" in b)
    jobs = tuple({"pid": pid, "host": "vm", "model": "itmodel", "spec": "/repo/job.slurm",
                  "since": "2026-12-03T13:40:02+00:00",
                  "steps": [{"id": step, "nodes": "n1"}]}
                 for pid, step in ((4711, "12.0"), (4712, "12.1")))
    status = AllocationStatus(state_file=Path("/repo/work_dirs/.slurm_alloc.json"),
                              job_id="12", nodelist="n1", partition="debug", nodes=1,
                              slurm_state="RUNNING", time_left=Duration.parse("00:27:41"),
                              jobs=jobs)
    assert status.render_text() + "\n" == block


# ------------------------------------------------------------------ backends.md


def _backend_row(method: str) -> str:
    return next(ln for ln in _page("backends.md").splitlines()
                if ln.startswith(f"| `{method}"))


def test_backends_md_list_steps_and_step_details_say_who_uses_them() -> None:
    """list_steps is the lease gate's one question (issue 28: the other runs' lease
    steps, from any host); each run's own steps come from step_details (scontrol show
    step), passed as ``stop``."""
    import inspect

    from slurm_fsm import backend, lease, monitor, persistent, runsteps
    from slurm_fsm.subprocess_backend import SubprocessBackend

    row = _backend_row("list_steps")
    assert "lease gate" in row and "squeue -s -j ID" in row
    assert hasattr(backend.SlurmBackend, "list_steps")
    assert "backend.list_steps(job_id)" in inspect.getsource(lease)
    assert hasattr(SubprocessBackend, "list_steps")
    assert "--overlap --gres=none" in _backend_row("start_lease")
    assert not hasattr(monitor, "stop_steps")
    assert "list_steps" not in inspect.getsource(runsteps)
    assert "stop=steps.stop" in inspect.getsource(persistent)
    details = _backend_row("step_details")
    assert "scontrol -o show step ID" in details


def test_backends_md_stale_script_is_stopped_only_on_the_token() -> None:
    from slurm_fsm.subprocess_backend import stop_stale_group

    row = _backend_row("stop_stale_script")
    assert "token" in row and "start time is never enough" in row
    # a record that matches on host, boot, pid and start time but has no token: nothing
    import os
    import socket

    from slurm_fsm import scriptguard
    identity = {"host": socket.gethostname(), "boot_id": scriptguard.boot_id(),
                "pid": os.getpid(), "pgid": os.getpgrp() + 100000,
                "start_ticks": scriptguard.start_ticks(os.getpid()) or 0}
    assert stop_stale_group(identity) is None



def test_one_shot_chdir_is_documented_and_passed(tmp_path: Path) -> None:
    """The one-shot job runs in work_dir (``--chdir``), as spec.md and backends.md say."""
    from slurm_fsm.backend import BatchRequest

    spec = make_spec(tmp_path)
    argv = sbatch_argv(BatchRequest(script_path=spec.script_path, work_dir=spec.work_dir,
                                    partition="p", account="a"))
    assert f"--chdir={spec.work_dir}" in argv
    assert "`sbatch --chdir=<work_dir>`" in _page("spec.md")
    assert "--chdir=<work_dir> SCRIPT" in _backend_row("submit")


# ------------------------------------------- issue 41, item 8: what a first hour read

def test_cli_md_every_help_ends_with_the_exit_codes() -> None:
    import argparse

    from slurm_fsm import cli

    assert "every `--help` ends with the exit codes" in _page("cli.md")
    parser = cli._parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {"slurm-fsm": parser.format_help(),
             **{name: p.format_help() for name, p in sub.choices.items()}}
    assert {"diagram", "demo", "run", "runs"} <= set(helps)
    late = [name for name, text in helps.items()
            if not text.rstrip().endswith(cli.EXIT_CODES_HELP.rstrip())]
    assert not late, late


def test_cli_md_the_fake_refuses_an_unknown_partition_as_it_says(
        tmp_path: Path, capsys: Any) -> None:
    import json

    from slurm_fsm.cli import main

    bullet = _section(_page("cli.md"), "### `--backend fake`").split(
        "- it knows only the partitions", 1)[1].split("\n- ", 1)[0]
    said = re.search(r"\(`([^`]+)`, exit (\d)\)", bullet.replace("\n  ", " "))
    assert said is not None, bullet
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\n")
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".",
        "slurm_params": {"partition": "gpu", "account": "acct"}}))
    assert main(["run", str(spec), "--backend", "fake"]) == int(said.group(2))
    out = capsys.readouterr().out
    assert said.group(1) in " ".join(out.split()), (said.group(1), out)


def test_cli_md_head_of_the_merged_output_keeps_the_jobs_exit_code(tmp_path: Path) -> None:
    """``slurm-fsm run SPEC 2>&1 | head -1``: stdout and stderr both go to a pipe that
    closes after one line; the run goes on and the exit code is still the job's."""
    import json
    import subprocess
    import sys

    text = " ".join(_page("cli.md").split())
    assert ("`slurm-fsm run SPEC 2>&1 | head -1`, a closed terminal, a full disk) progress "
            "goes silent for the rest of the run, the job runs and is watched to its end "
            "as usual") in text
    assert "the exit code is the job's" in text
    (tmp_path / "job.slurm").write_text("#!/bin/bash\nsrun true\necho all done\n")
    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "m",
        "workflow_type": "custom", "repo_root": ".", "success_patterns": "all done",
        "slurm_params": {"partition": "debug", "account": "acct"}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_fsm", "run", str(spec), "--backend", "fake"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # head -1 exits
    assert proc.wait(timeout=120) == 0, first
    saved = list((tmp_path / "work_dirs").glob(".slurm_run.fake.*.report.json"))
    assert [json.loads(p.read_text())["report"]["status"] for p in saved] == ["PASSED"]


def test_report_md_a_long_line_is_cut_as_it_says(tmp_path: Path) -> None:
    said = re.search(r"Log lines longer than (\d+) characters are cut \(`([^`]+)`",
                     " ".join(_page("report.md").split()))
    assert said is not None
    limit, form = int(said.group(1)), said.group(2)
    long = "x" * (limit + 1808)
    report, _ = _run(tmp_path, FakeScript(lines=("start", long, "===== 1 failed in 1s ====="),
                                          exit_code=1))
    cut = [line for line in report.log_tail if line.startswith("x")]
    expected = form.replace("N", "1808").replace("...", "x" * limit, 1) \
        if form.startswith("...") else "x" * limit + " " + form.replace("N", "1808")
    assert cut == [expected], (cut[0][limit - 5:] if cut else report.log_tail, form)


def _claimed_kill_codes() -> str:
    return " ".join(_section(_page("report.md"), "### A killed process's exit code").split())


@pytest.mark.parametrize("mode", [{}, ONE_SHOT])
@pytest.mark.parametrize("how", ["hang", "monitor timeout"])
def test_report_md_a_step_stopped_by_sigterm_is_143_in_both_modes(
        tmp_path: Path, mode: dict[str, Any], how: str) -> None:
    assert ("A step stopped by SIGTERM (a hang, the monitor timeout) is `143`"
            in _claimed_kill_codes())
    if how == "hang":
        script = FakeScript(lines=("step 1", "NCCL watchdog: hang detected"), hang=True)
        report, _ = _run(tmp_path, script, **mode)
        assert report.status is Status.HANG_DETECTED
    else:
        report, _ = _run(tmp_path, FakeScript(lines=("x",), hang=True),
                         monitor_timeout_seconds=60, **mode)
        assert report.status is Status.TIMEOUT
    assert report.exit_code == 143, (report.exit_code, report.summary)


def test_a_batch_job_killed_at_its_limit_exits_143_as_its_batch_step_says() -> None:
    """Slurm 22.05, measured (local-slurm.md): over ``--time`` the job row is
    ``TIMEOUT|0:0`` and its batch step ``CANCELLED|0:15``: the script was SIGTERMed."""
    from slurm_fsm.oneshot import outcome_exit_code
    from slurm_fsm.slurmcli import parse_sacct

    text = "11|TIMEOUT|0:0|00:01:28|\n11.batch|CANCELLED|0:15|00:01:29|4808K\n"
    assert outcome_exit_code(parse_sacct(text, "11")) == 143
    done = "12|COMPLETED|0:0|00:00:02|\n12.batch|COMPLETED|0:0|00:00:02|4808K\n"
    assert outcome_exit_code(parse_sacct(done, "12")) == 0
    failed = "13|FAILED|3:0|00:00:02|\n13.batch|FAILED|3:0|00:00:02|4808K\n"
    assert outcome_exit_code(parse_sacct(failed, "13")) == 3


def _warm_run_commands(gpus: int) -> Any:
    import tempfile

    from slurm_fsm import Allocation
    from slurm_fsm.testing.fake import SLURM_COMMAND_OPS

    with tempfile.TemporaryDirectory() as tmp:
        fake = FakeCluster(preflight=True, gpus_per_node=8)
        spec = make_spec(tmp, slurm_params={"gpus_per_node": gpus})
        alloc = Allocation(spec.repo_root, fake)
        assert alloc.run(spec).status is Status.PASSED  # the first run allocates
        fake.reset_calls()
        assert alloc.run(spec).status is Status.PASSED
        ops = fake.ops()
        alloc.release()
        return Counter(op for op in ops if op in SLURM_COMMAND_OPS)


#: what each fake call stands for, as the README names it
_AS_NAMED = {"query_job": "a `squeue` of the allocation before and after the job",
             "start_lease": "the run's lease step (an `srun`",
             "list_steps": "a `squeue -s` of the allocation's steps",
             "gpu_processes": "the GPU pre-flight `srun`"}


def test_readme_and_index_count_the_commands_of_a_warm_run() -> None:
    readme = " ".join((DOCS.parent / "README.md").read_text().split())
    index = " ".join(_page("index.md").split())
    with_gpus, without = _warm_run_commands(1), _warm_run_commands(0)
    assert sum(with_gpus.values()) == 5 and sum(without.values()) == 4, (with_gpus, without)
    assert "A repeated run issues 5 Slurm commands besides the job's own" in readme
    assert "(a job that asks no GPU skips it: 4)" in readme
    assert set(with_gpus) == set(_AS_NAMED) and with_gpus["query_job"] == 2
    for named in _AS_NAMED.values():
        assert named in readme, named
    assert without == with_gpus - Counter({"gpu_processes": 1})
    # the demo's job asks no GPU: index.md counts its second run
    assert "4 Slurm commands besides the job itself: two `squeue` queries" in index
    assert "the run's lease step (an `srun`) and a `squeue -s`" in index


def test_the_benchmark_table_counts_the_commands_of_a_warm_run() -> None:
    """Issue 41 item 8's leftover: docs/benchmarks.md's figure 3 said a warm run issues
    2 Slurm commands (measured before the second `squeue`, the lease step and the
    `squeue -s`). Its figure is recorded from a real warm run (benchmarks/results.json,
    a spec that asks no GPU): it must be the count the fake gives such a run, by
    program, and the page's words must say it."""
    import json

    load = json.loads((DOCS.parent / "benchmarks" / "results.json").read_text())
    rows = {r["key"]: r for r in load["figures"]["load"]["rows"]}
    without = _warm_run_commands(0)
    by_program = {"squeue": without["query_job"] + without["list_steps"],
                  "srun": without["start_lease"], "scontrol": 0, "other": 0}
    assert rows["warm_run_commands"]["median"] == sum(without.values()) == 4
    for program, n in by_program.items():
        assert rows[f"warm_run_{program}"]["median"] == n, (program, rows)
    page = " ".join(_page("benchmarks.md").split())
    assert "| persistent warm run, no GPU asked: Slurm commands | 4 | 4 | 4 | cmd/run |" in page
    assert "(a warm run issues 4 Slurm commands, 5 when its job asks GPUs: figure 3)" in page


# ---------------------------------------------------------------- troubleshooting.md

def _row_messages(start: str) -> list[str]:
    """The backticked messages of the first cell of the troubleshooting row that
    starts with ``start``."""
    row = next(line for line in _page("troubleshooting.md").splitlines()
               if line.startswith(f"| `{start}"))
    return re.findall(r"`([^`]+)`", row.split(" | ")[0])


def _matches(template: str, text: str) -> bool:
    """A row's message as a pattern: ``...`` and ``<rule>`` stand for any text, a lone
    capital (N, A, X) for one word; the rest is literal."""
    parts = re.split(r"(\.\.\.|<rule>|\b[NAMXYR]\b)", template)
    rx = "".join(".*?" if p in ("...", "<rule>") else r"\S+?" if re.fullmatch("[NAMXYR]", p)
                 else re.escape(p) for p in parts)
    return re.search(rx, text) is not None


def test_troubleshooting_md_waiting_for_the_lock_is_said_as_the_row_says(
        tmp_path: Path) -> None:
    import threading

    from slurm_fsm.state import StateStore

    (template,) = [m for m in _row_messages("waiting for .../") if "lock" in m]
    path = tmp_path / "work_dirs" / ".slurm_alloc.json"
    said: list[str] = []
    asked, held = threading.Event(), threading.Event()

    def holder() -> None:
        with StateStore(path).locked():
            held.set()
            asked.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(30)
    with StateStore(path, lock_timeout_s=60).locked(
            on_wait=lambda text: (said.append(text), asked.set())):
        pass
    thread.join(30)
    assert len(said) == 1 and _matches(template, said[0]), (template, said)


def test_troubleshooting_md_waiting_for_gpus_is_said_as_the_row_says() -> None:
    from slurm_fsm.placement import WAITING_MARKER, QueueWatch

    templates = _row_messages("waiting for GPUs")
    said: list[str] = []
    QueueWatch(lambda _t: None, said.append, 1, allocation_gpus_per_node=1,
               allocation_id="5")(f"srun: {WAITING_MARKER}\n")
    QueueWatch(lambda _t: None, said.append, 0, allocation_id="5")(
        f"srun: {WAITING_MARKER}\n")
    assert _matches(templates[0], said[0]), (templates[0], said[0])
    assert said[1].startswith(templates[-1]), (templates[-1], said[1])


def test_troubleshooting_md_incompatible_and_too_short_are_said_as_the_rows_say(
        tmp_path: Path) -> None:
    from slurm_fsm import Allocation

    fake = FakeCluster()
    first = make_spec(tmp_path, slurm_params={"gpus_per_node": 0})
    said: list[str] = []
    machine = AllocationMachine(first, fake, clock=fake.clock, log=said.append)
    assert machine.prepare().state is State.Ready
    alloc = Allocation(first.repo_root, fake)
    report = alloc.run(make_spec(tmp_path, slurm_params={"gpus_per_node": 1}))
    progress, note = _row_messages("[Validating -> Incompatible]")[:2]
    m = AllocationMachine(make_spec(tmp_path, slurm_params={"gpus_per_node": 2}), fake,
                          clock=fake.clock, log=said.append)
    assert m.prepare().state is State.Ready
    assert any(_matches(progress, line) for line in said), (progress, said)
    assert any(_matches(note, n) for n in report.notes), (note, report.notes)
    too_short, warning = _row_messages("[Validating -> TooShort]")[:2]
    fake.clock.advance(4 * 3600 - 19 * 60)
    said.clear()
    m = AllocationMachine(make_spec(tmp_path, slurm_params={"gpus_per_node": 2},
                                    expected_duration_seconds=1200), fake,
                          clock=fake.clock, log=said.append)
    m.prepare()
    assert any(_matches(too_short, line) for line in said), (too_short, said)
    assert any(_matches(warning, w) for w in m.warnings), (warning, m.warnings)


def test_testing_md_what_a_warm_run_asks_the_controller(tmp_path: Path) -> None:
    from slurm_fsm import Allocation
    from slurm_fsm.testing.fake import CONTROLLER_OPS

    text = " ".join(_page("testing.md").split())
    assert ("before its job starts, one job query (`query_job`, the `squeue` that validates "
            "the allocation), its lease step (`start_lease`) and one `list_steps` (`squeue "
            "-s`); after the job ends, one job query more") in text
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED
    fake.reset_calls()
    assert alloc.run(spec).status is Status.PASSED
    ops = fake.ops()
    start = ops.index("start_script")
    assert [op for op in ops[:start] if op in CONTROLLER_OPS] == [
        "query_job", "start_lease", "list_steps"]
    assert [op for op in ops[start:] if op in CONTROLLER_OPS] == ["query_job"]


# ------------------------------------------------- public names with their own docstring

@functools.cache
def _griffe_package() -> Any:
    import griffe

    return griffe.load("slurm_fsm", search_paths=[str(DOCS.parent)])


@pytest.mark.parametrize("path", [
    "spec.PartitionInfo", "spec.SlurmEnv", "spec.SlurmParams", "backend.StepResult",
    "clock.SystemClock", "clock.Clock", "spec.WorkflowType", "edges.EDGES",
    "allocation.SHARING_RULES",
])
def test_public_names_have_a_docstring_of_their_own_on_the_api_pages(path: str) -> None:
    """As the API pages read them (griffe, mkdocstrings' loader): a class's own
    docstring, a constant's string after its assignment (``#:`` comments are not read)."""
    doc = _griffe_package()[path].docstring
    assert doc is not None and len(doc.value.split()) >= 5, (path, doc and doc.value)


# ------------------------------------------------- python.md and from-procedure.md

def test_python_md_examples_run_as_written(tmp_path: Path, monkeypatch: Any) -> None:
    """Every block of the page, in order, in one namespace (as a reader pastes them)."""
    import logging

    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"^```python\n(.*?)^```", _page("python.md"), re.M | re.S)
    assert len(blocks) == 6
    namespace: dict[str, Any] = {}
    root_logger = logging.getLogger()
    saved = list(root_logger.handlers), root_logger.level
    try:
        for block in blocks:
            exec(compile(block, "python.md", "exec"), namespace)
    finally:
        root_logger.handlers[:] = saved[0]
        root_logger.setLevel(saved[1])
    assert namespace["report"].status is Status.PASSED and namespace["m"].state is State.Ready


def test_python_md_a_sink_that_raises_never_reaches_the_run(tmp_path: Path) -> None:
    from slurm_fsm import Allocation, Events

    assert "an exception your sink raises never reaches the run" in " ".join(
        _page("python.md").split())

    class Broken(Events):
        def message(self, text: str) -> None:
            raise RuntimeError("the GUI is gone")

    fake = FakeCluster()
    spec = make_spec(tmp_path)
    report = Allocation(spec.repo_root, fake, events=Broken()).run(spec)
    assert report.status is Status.PASSED
    assert any("progress output stopped" in w and "the GUI is gone" in w
               for w in report.warnings), report.warnings


def test_from_procedure_md_a_gpu_less_procedure_allocation_is_replaced(
        tmp_path: Path) -> None:
    import json

    from slurm_fsm import Allocation

    page = _page("from-procedure.md")
    (said,) = [b for b in _code_blocks(page) if "Incompatible" in b]
    rule = said.split("; ")[-1].strip()
    fake = FakeCluster()
    made = make_spec(tmp_path, slurm_params={"gpus_per_node": 0})
    first = Allocation(made.repo_root, fake).run(made)
    # as the procedure writes it: exactly its keys, the GPUs the spec asked
    state = json.loads(made.state_path.read_text())
    keys = ("job_id", "container_name", "nodelist", "partition", "account", "nodes",
            "gpus_per_node", "docker_image", "container_mounts", "allocated_at",
            "time_limit", "installed")
    made.state_path.write_text(json.dumps({**{k: state[k] for k in keys},
                                           "gpus_per_node": 1}))
    lines: list[str] = []
    spec = make_spec(tmp_path, slurm_params={"gpus_per_node": 1})
    m = AllocationMachine(spec, fake, clock=fake.clock, log=lines.append)
    assert m.prepare().state is State.Ready
    assert m.alloc is not None and m.alloc.job_id != first.allocation_id
    assert any("[Validating -> Incompatible]" in line and line.endswith(rule)
               for line in lines), (rule, lines)


def test_from_procedure_md_names_every_file_a_run_leaves(tmp_path: Path) -> None:
    from slurm_fsm import Allocation
    from slurm_fsm.successor import parity_names

    page = _page("from-procedure.md")
    table = _section(page, "## The extra files in `work_dirs`")
    named = [*re.findall(r"`(\.[^`]+)`", table), ".slurm_alloc.json", ".salloc.log"]
    patterns = [re.escape(n).replace(re.escape("<run id>"), r"r[0-9a-f]+")
                .replace(re.escape("*"), ".*") for n in named]
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    alloc = Allocation(spec.repo_root, fake)
    assert alloc.run(spec).status is Status.PASSED
    left = sorted(p.name for p in spec.state_path.parent.iterdir())
    assert all(any(re.fullmatch(rx, name) for rx in patterns) for name in left), left
    assert "`<job name>-b`" in page and parity_names("x")[1] == "x-b"
