"""Steps 1-5 over SubprocessBackend on the real local Slurm cluster: Executor and CLI.

Persistent scripts are run with ``bash`` and the allocation's SLURM_* exported, so
their own ``srun`` lands in the allocation. One-shot scripts are named after their
(unique) job name. The ``names`` fixture cancels every job of ours at the end of
each test, so squeue is left without any of them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.backend import StepInfo
from slurm_fsm.executor import Events, Executor
from slurm_fsm.monitor import PollPolicy
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import SubprocessBackend
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    RecordingBackend,
    job_state,
    jobs_named,
    slurm,
    spec_dict,
    step_ids,
    steps,
    until,
)

pytestmark = pytest.mark.slurm

PYTEST_LINE = "=== 3 passed, 1 skipped in 0.10s ==="


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip("\n"))
    return path


def persistent(cluster: ClusterInfo, root: Path, name: str, body: str,
               **over: Any) -> JobSpec:
    """A persistent spec whose script (``<root>/<file>``) has ``body``."""
    file = over.pop("file", "job.slurm")
    path = script(root / file, body)
    data = spec_dict(cluster, root, name, script_path=str(path), **over)
    return JobSpec.from_dict(data)


def one_shot(cluster: ClusterInfo, root: Path, job_name: str, body: str, *,
             sbatch: tuple[str, ...] = (), **over: Any) -> JobSpec:
    """A one-shot spec: the script file is named ``job_name`` (sbatch's default job name),
    its ``#SBATCH --output/--error`` match ``log_file_pattern``."""
    work = root / "work"
    header = "".join(f"#SBATCH {line}\n" for line in (
        f"--output={work}/oneshot_%j.out", f"--error={work}/oneshot_%j.err", *sbatch))
    path = script(root / job_name, header + textwrap.dedent(body).lstrip("\n"))
    data = spec_dict(cluster, root, "unused-by-one-shot", script_path=str(path),
                     persistent_mode=False, log_file_pattern="oneshot_%j.out", **over)
    return JobSpec.from_dict(data)


def run(spec: JobSpec, backend: SubprocessBackend | None = None,
        events: Events | None = None, policy: PollPolicy | None = None) -> Report:
    return Executor(spec, backend or SubprocessBackend(), events=events, policy=policy).run()


# ------------------------------------------------------------------- persistent path


def test_pytest_script_passes_and_the_warm_run_asks_slurm_once_per_question(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    body = f"""
        set -e
        srun hostname
        echo "{PYTEST_LINE}"
    """
    spec = persistent(local_cluster, tmp_path, names.new("pytest"), body,
                      workflow_type="pytest")
    cold = run(spec)
    assert cold.status is Status.PASSED, cold.render_text()
    assert cold.path == ["NoState", "Allocating", "Ready", "Running", "Ready"]
    job_id = cold.allocation_id
    assert job_id is not None and job_state(job_id) == "RUNNING"
    node = slurm("squeue", "-j", job_id, "-h", "-o", "%N").stdout.strip()
    assert cold.log_tail[0] == node  # the script's srun ran in the allocation

    backend = RecordingBackend()
    warm = run(spec, backend)
    assert warm.status is Status.PASSED, warm.render_text()
    assert warm.exit_code == 0 and warm.allocation_id == job_id
    assert warm.path == ["NoState", "Validating", "Ready", "Running", "Ready"]
    assert (warm.metrics["passed"], warm.metrics["skipped"]) == (3, 1)
    assert warm.metrics.get("failed", 0) == 0
    own = Path(warm.log_files["stdout"] or "")
    assert own != Path(cold.log_files["stdout"] or "")  # each run has its own log
    assert spec.persistent_log.resolve() == own.resolve()  # the latest, under the old name
    before = backend.before_script()
    queries = backend.job_queries()
    # one query of the allocation before the script (validation), one after it (is the
    # allocation still whole? srun exits 0 on a node failure: issue 20 item 5); and one
    # listing of its steps before the script (is another run closing it? issue 28's
    # closing marker), nothing else
    steps = [a for a in before if Path(a[0]).name == "squeue" and "-s" in a]
    assert len(steps) == 1 and job_id in steps[0]
    assert [a for a in before if Path(a[0]).name == "squeue" and "-s" not in a] == queries[:1]
    assert len(queries) == 2 and all(job_id in q for q in queries)
    assert job_state(job_id) == "RUNNING"  # never released after a job


class _StepAsks(RecordingBackend):
    """The real backend, keeping what each ``scontrol show step`` of the run said: for
    each ask, whether the step of the script's ``srun sleep`` was listed."""

    def __init__(self) -> None:
        super().__init__()
        self.asks: list[bool] = []

    def step_details(self, job_id: str) -> list[StepInfo]:
        steps = super().step_details(job_id)
        self.asks.append(any(s.name == "sleep" for s in steps))
        return steps


def test_a_running_srun_is_asked_about_until_its_step_is_seen_then_never_again(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """``srun`` forks a helper of its own (a second process named ``srun``, its child,
    whose pid is no step's ``SrunPid``): it was never marked, so Slurm was asked about the
    allocation's steps every 2 s for as long as the job ran (68 ``scontrol show step`` in
    76 s watching a 75 s ``srun sleep``, docs/benchmarks.md's figure 3; the docs said
    one). Now the asks end once the step is listed: the run's step record and the
    GPU-wait watch each ask until they have seen it (at most one more after the first
    that lists it, whatever the timing)."""
    spec = persistent(local_cluster, tmp_path, names.new("asks"), "srun sleep 12\necho done",
                      success_patterns="done")
    assert run(spec).status is Status.PASSED  # allocates
    backend = _StepAsks()
    warm = run(spec, backend)
    assert warm.status is Status.PASSED, warm.render_text()
    assert True in backend.asks, backend.asks  # the step was seen (its id is the run's)
    assert len(backend.asks[backend.asks.index(True) + 1:]) <= 1, backend.asks


def test_failing_script_is_failed_with_its_exit_code_and_errors(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    body = """
        srun true
        echo "Traceback (most recent call last):"
        echo '  File "test_model.py", line 7, in <module>'
        echo "ValueError: weights do not match"
        exit 3
    """
    spec = persistent(local_cluster, tmp_path, names.new("fail"), body)
    report = run(spec)
    assert report.status is Status.FAILED, report.render_text()
    assert report.exit_code == 3
    assert "ValueError: weights do not match" in report.errors
    assert report.log_head[0] == "Traceback (most recent call last):"
    assert report.allocation_id is not None and job_state(report.allocation_id) == "RUNNING"


HANG_BODIES = {
    # the brief's script: the marker, then a step that never ends
    "marker then srun": """
        echo "Hang detected"
        srun sleep 300
    """,
    # the step is certainly running when the marker appears
    "marker while the step runs": """
        srun sleep 300 &
        for _ in $(seq 200); do
          squeue -s -j "$SLURM_JOB_ID" -h -o %i | grep -q "^$SLURM_JOB_ID\\.[0-9]" && break
          sleep 0.05
        done
        echo "NCCL watchdog: Hang detected on rank 0"
        wait
    """,
}


@pytest.mark.parametrize("variant", sorted(HANG_BODIES))
def test_hang_cancels_only_the_step_and_the_allocation_is_reused(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, variant: str) -> None:
    name = names.new("hang")
    spec = persistent(local_cluster, tmp_path, name, HANG_BODIES[variant],
                      monitor_timeout_seconds=60)
    report = run(spec)
    assert report.status is Status.HANG_DETECTED, report.render_text()
    job_id = report.allocation_id
    assert job_id is not None
    assert report.elapsed_s is not None and report.elapsed_s < 30
    if variant == "marker while the step runs":
        # no GPUs asked, no GPU pre-flight step: the script's step is the first
        assert report.metrics["cancelled_steps"] == [f"{job_id}.1"]  # 0: the run's lease
    assert until("no step left", lambda: True if not step_ids(job_id) else None, 10)
    assert job_state(job_id) == "RUNNING"

    again = persistent(local_cluster, tmp_path, name, f'srun true\necho "{PYTEST_LINE}"\n',
                       file="again.slurm", workflow_type="pytest")
    report = run(again)
    assert report.status is Status.PASSED, report.render_text()
    assert report.allocation_id == job_id
    assert report.path[:3] == ["NoState", "Validating", "Ready"]


def test_monitor_timeout_cancels_the_step_and_keeps_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = persistent(local_cluster, tmp_path, names.new("timeout"), "srun sleep 60\n",
                      monitor_timeout_seconds=3)
    report = run(spec)
    assert report.status is Status.TIMEOUT, report.render_text()
    assert report.elapsed_s is not None and 3 <= report.elapsed_s < 20
    assert "monitor timeout" in report.summary
    job_id = report.allocation_id
    assert job_id is not None
    # no GPU pre-flight step; step 0 is the run's lease (issue 28)
    assert report.metrics["cancelled_steps"] == [f"{job_id}.1"]
    assert until("no step left", lambda: True if not step_ids(job_id) else None, 10)
    assert job_state(job_id) == "RUNNING"


def test_a_one_node_job_on_a_two_node_allocation_runs_on_one_node(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("sizes")
    two = persistent(local_cluster, tmp_path, name, "srun hostname\n",
                     slurm_params={"nodes": 2})
    report = run(two)
    assert report.status is Status.PASSED, report.render_text()
    assert len(set(report.log_tail)) == 2

    one = persistent(local_cluster, tmp_path, name, "srun hostname\n", file="one.slurm")
    report = run(one)
    assert report.status is Status.PASSED, report.render_text()
    assert report.path[:3] == ["NoState", "Validating", "Ready"]  # reused, not shrunk
    assert len(report.log_tail) == 1 and report.log_tail[0] in local_cluster.nodes


# ---------------------------------------------------------------------- one-shot path


@pytest.mark.parametrize(("exit_code", "status", "slurm_state"), [
    (0, Status.PASSED, "COMPLETED"),
    (3, Status.FAILED, "FAILED"),
])
def test_one_shot_outcome_from_sacct(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path,
        exit_code: int, status: Status, slurm_state: str) -> None:
    body = f"""
        echo "{PYTEST_LINE}"
        echo "something went wrong" >&2
        exit {exit_code}
    """
    spec = one_shot(local_cluster, tmp_path, names.new("oneshot", ".slurm"), body,
                    workflow_type="pytest")
    report = run(spec)
    assert report.status is status, report.render_text()
    assert report.mode == "one-shot"
    assert report.slurm_state == slurm_state
    assert report.exit_code == exit_code
    assert report.metrics["accounting_source"] == "sacct"
    assert report.metrics["passed"] == 3
    job_id = report.job_id
    assert job_id is not None
    out = tmp_path / "work" / f"oneshot_{job_id}.out"
    assert report.log_files == {"stdout": str(out), "stderr": str(out.with_suffix(".err"))}
    assert PYTEST_LINE in report.log_tail
    if status is Status.FAILED:
        assert report.err_tail == ["something went wrong"]
    assert report.path == ["Submitting", "Monitoring", "Collected"]


def test_one_shot_over_the_slurm_time_limit_is_timeout(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """Slurm's smallest limit is one minute; it fires after 64-84 s. squeue is asked at
    least every 5 s (by default the polls back off to 30 s: the end would be seen up to
    30 s late, here at about 91 s)."""
    spec = one_shot(local_cluster, tmp_path, names.new("limit", ".slurm"),
                    "echo started\nsleep 200\n", sbatch=("--time=1",),
                    monitor_timeout_seconds=150)
    report = run(spec, policy=PollPolicy(slurm_max_s=5.0))
    assert report.status is Status.TIMEOUT, report.render_text()
    assert report.slurm_state == "TIMEOUT"
    assert "monitor timeout" not in report.summary  # Slurm's limit, not ours
    assert report.metrics["accounting_source"] == "sacct"
    assert report.elapsed_s is not None and 55 <= report.elapsed_s < 140
    # the job row says TIMEOUT|0:0, its batch step CANCELLED|0:15: the script was
    # SIGTERMed, 143 as persistent mode says it (issue 41 item 8; 0 before)
    assert report.exit_code == 143, report.render_text()


class CancelWhenRunning(Events):
    """scancel the one-shot job as soon as the monitor reports it RUNNING."""

    def __init__(self) -> None:
        self.cancelled: str | None = None

    def message(self, text: str) -> None:
        m = re.match(r"job (\d+): .*RUNNING$", text)
        if m and self.cancelled is None:
            self.cancelled = m.group(1)
            assert slurm("scancel", self.cancelled).returncode == 0


def test_one_shot_cancelled_while_running_is_cancelled(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    spec = one_shot(local_cluster, tmp_path, names.new("cancel", ".slurm"),
                    "echo started\nsleep 60\n")
    events = CancelWhenRunning()
    report = run(spec, events=events)
    assert events.cancelled is not None and events.cancelled == report.job_id
    assert report.status is Status.CANCELLED, report.render_text()
    assert report.slurm_state == "CANCELLED"
    assert report.elapsed_s is not None and report.elapsed_s < 30


def test_one_shot_hang_cancels_the_job(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    job_name = names.new("hang", ".slurm")
    spec = one_shot(local_cluster, tmp_path, job_name, "echo 'Hang detected'\nsleep 60\n",
                    monitor_timeout_seconds=60)
    report = run(spec)
    assert report.status is Status.HANG_DETECTED, report.render_text()
    assert report.slurm_state == "CANCELLED"
    assert report.elapsed_s is not None and report.elapsed_s < 30
    assert jobs_named(job_name, local_cluster.user) == []


# ---------------------------------------------------------------------------- the CLI


def cli(*args: str, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_fsm", *args],
        capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ),
        check=False,
    )


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


def test_cli_run_status_plan_release(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    name = names.new("cli")
    ok_script = script(tmp_path / "ok.slurm", f'srun true\necho "{PYTEST_LINE}"\n')
    bad_script = script(tmp_path / "bad.slurm", "srun true\necho 'ValueError: no'\nexit 3\n")
    ok = write_spec(tmp_path / "ok.json", spec_dict(
        local_cluster, tmp_path, name, script_path=str(ok_script), workflow_type="pytest"))
    bad = write_spec(tmp_path / "bad.json", spec_dict(
        local_cluster, tmp_path, name, script_path=str(bad_script)))

    proc = cli("run", str(ok), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # exactly one JSON document, nothing else
    assert report["status"] == "PASSED"
    job_id = report["allocation_id"]
    assert job_id and jobs_named(name, local_cluster.user) == [(job_id, "RUNNING")]
    state_path = tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json"
    before = state_path.read_bytes()

    proc = cli("status", str(ok), "--json")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["allocation"] == job_id and status["slurm_state"] == "RUNNING"
    assert status["job_name"] == name

    proc = cli("plan", str(ok), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["path"] == ["NoState", "Validating", "Ready"]
    assert plan["final_state"] == "Ready" and plan["would_change"] == []
    assert state_path.read_bytes() == before
    assert jobs_named(name, local_cluster.user) == [(job_id, "RUNNING")]

    proc = cli("run", str(bad), "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "FAILED" and report["exit_code"] == 3
    assert report["allocation_id"] == job_id

    proc = cli("release", str(ok), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "RELEASED"
    assert not state_path.exists()
    until("the allocation gone", lambda: True if job_state(job_id) is None else None, 5)
    assert jobs_named(name, local_cluster.user) == []


SLURM_TOOLS = ("salloc", "sbatch", "srun", "squeue", "scancel", "sacct", "scontrol", "sinfo")


def test_cli_bad_spec_exits_2_without_any_slurm_command(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    # every Slurm tool is shadowed by a shim that records its call
    shims = tmp_path / "shims"
    shims.mkdir()
    calls = tmp_path / "slurm-calls.log"
    for tool in SLURM_TOOLS:
        shim = shims / tool
        shim.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    name = names.new("badspec")
    good = spec_dict(local_cluster, tmp_path, name)
    bad = {**good, "slurm_params": {**good["slurm_params"], "nodes": 0}}

    proc = cli("run", str(write_spec(tmp_path / "bad.json", bad)), "--json", env=env)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)  # --json: one document, also on bad input
    assert doc["status"] == "BAD_INPUT" and doc["cli_exit_code"] == 2
    assert any("slurm_params.nodes" in p for p in doc["problems"])
    assert "slurm_params.nodes" in proc.stderr
    assert not calls.exists(), calls.read_text()

    # the shims do catch Slurm commands: a good spec reaches them
    proc = cli("run", str(write_spec(tmp_path / "good.json", good)), "--json", env=env)
    assert calls.exists() and "squeue" in calls.read_text()
    assert proc.returncode == 3
    assert jobs_named(name, local_cluster.user) == []


#: The signals a user or a CI system stops ``slurm-fsm run`` with.
STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM]  # SIGTERM fails: see below


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_cli_stopped_mid_job_cancels_the_step_and_keeps_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path, sig: int) -> None:
    name = names.new("stop")
    long = script(tmp_path / "long.slurm", "srun sleep 300\n")
    spec = write_spec(tmp_path / "long.json", spec_dict(
        local_cluster, tmp_path, name, script_path=str(long)))
    proc = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ((job_id, _),) = until("our allocation",
                               lambda: jobs_named(name, local_cluster.user) or None, 30)
        # the script's own step (step 0 is the GPU pre-flight's nvidia-smi check)
        until("the script's step", lambda: "sleep" in steps(job_id).values() or None, 30)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # the job's step must not run on unwatched (it would block the next run's srun)
    assert until("no step left", lambda: True if not step_ids(job_id) else None, 15)
    assert proc.returncode in (130, 128 + sig), err
    assert job_state(job_id) == "RUNNING"
    assert (tmp_path / "repo" / "work_dirs" / ".slurm_alloc.json").exists()


# ------------------------------------------------ regressions found by the integration suite


def test_ntasks_per_node_is_part_of_the_allocation(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """slurm_params.ntasks_per_node reaches the script (SLURM_NTASKS=4) but not salloc, so
    the script's plain srun asks for 4 CPUs of an allocation that holds 2."""
    spec = persistent(local_cluster, tmp_path, names.new("tasks"), "srun hostname\n",
                      slurm_params={"nodes": 2, "ntasks_per_node": 2})
    report = run(spec)
    assert report.status is Status.PASSED, report.render_text()
    assert len(report.log_tail) == 4 and len(set(report.log_tail)) == 2


def test_persistent_report_has_no_one_shot_job_id(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """docs/report.md: job_id is "null for a step in a persistent allocation"."""
    report = run(persistent(local_cluster, tmp_path, names.new("jobid"), "srun true\n"))
    assert report.status is Status.PASSED, report.render_text()
    assert report.allocation_id is not None
    assert report.job_id is None


def test_hang_before_any_step_does_not_claim_the_job_was_cancelled(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """No step was running when the hang was seen: only the local script was stopped, the
    allocation (the job) was not cancelled, yet the summary says "cancelled job"."""
    spec = persistent(local_cluster, tmp_path, names.new("nostep"),
                      'echo "Hang detected"\nsleep 5\nsrun sleep 300\n')
    report = run(spec)
    assert report.status is Status.HANG_DETECTED, report.render_text()
    assert "cancelled_steps" not in report.metrics
    assert report.allocation_id is not None and job_state(report.allocation_id) == "RUNNING"
    assert "cancelled job" not in report.summary, report.summary


def test_cancelled_one_shot_says_who_cancelled_it(
        local_cluster: ClusterInfo, names: JobNames, tmp_path: Path) -> None:
    """docs/report.md: slurm_state is Slurm's final state as printed (``CANCELLED by 0``);
    the report has ``CANCELLED`` and sacct's canceller is lost."""
    spec = one_shot(local_cluster, tmp_path, names.new("who", ".slurm"),
                    "echo started\nsleep 60\n")
    report = run(spec, events=CancelWhenRunning())
    assert report.status is Status.CANCELLED, report.render_text()
    uid = str(os.getuid())
    assert (report.slurm_state == f"CANCELLED by {uid}"
            or report.metrics.get("cancelled_by") == uid), (report.slurm_state, report.metrics)
