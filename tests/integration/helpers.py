"""Shared pieces of the real-Slurm integration tests (step 0, steps 1-5, parity).

Every job these tests make carries a name of its own (:meth:`JobNames.new`:
``acct-it-<pid>-<tag>-<uuid>.persistent``); :meth:`JobNames.cleanup` cancels
the jobs of those names, of our user only, and waits until squeue has none
of them. Nothing here ever cancels a job by id that it did not make.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from slurm_fsm.backend import ScriptRequest
from slurm_fsm.spec import JobSpec
from slurm_fsm.subprocess_backend import CommandResult, LocalScript, SubprocessBackend, run_command
from slurm_fsm_dev.localcluster import ClusterInfo

T = TypeVar("T")

PREFIX = f"acct-it-{os.getpid()}"


def slurm(
    *argv: str, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client tool against the cluster of ``SLURM_CONF`` (or ``env``'s)."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


#: Whether srun says "step creation temporarily disabled" while its step waits, by
#: Slurm version as measured here (issue 23, K1): 22.05 does; 24.11 and 26.05 (issue 44)
#: wait silently at their default verbosity. (All list the pending step in ``scontrol
#: show step``.) All print "Step created for ..." once a step that waited starts. A
#: version not measured is a KeyError in the tests that read it: measure, do not guess.
SRUN_SAYS_WAITING = {(22, 5): True, (24, 11): False, (26, 5): False}
#: Whether srun relays slurmstepd's error lines with the time they were logged
#: (``[2026-12-06T18:00:24.403] error: ``) rather than ``slurmstepd-<node>: error: ``, by
#: Slurm version as measured here (issue 44): 26.05 does. The fake of the parity tests
#: relays as the real cluster beside it does (``FakeCluster.relay_timestamps``).
RELAYS_WITH_TIMESTAMPS = {(22, 5): False, (24, 11): False, (26, 5): True}


def slurm_version(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(major, minor) of the Slurm the cluster runs, from ``scontrol version``."""
    proc = slurm("scontrol", "version", env=env)
    assert proc.returncode == 0, proc.stderr
    # "slurm 22.05.8" upstream, "slurm-wlm 24.11.5" from Debian 13
    m = re.fullmatch(r"slurm(?:-wlm)? (\d+)\.(\d+)\.\S+", proc.stdout.strip())
    assert m, proc.stdout
    return int(m.group(1)), int(m.group(2))


def until(what: str, probe: Callable[[], T | None], timeout: float = 20.0) -> T:
    """Poll ``probe`` (fast, then every 0.5 s) until it returns something not None."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def job_state(job_id: str, env: Mapping[str, str] | None = None) -> str | None:
    """squeue's ``%T`` of one job; None when squeue has no row for it."""
    proc = slurm("squeue", "-j", job_id, "-h", "-o", "%T", env=env)
    if proc.returncode != 0:
        assert "Invalid job id" in proc.stderr, proc.stderr
        return None
    return proc.stdout.strip() or None


def wait_gone(job_id: str, timeout: float = 15.0, env: Mapping[str, str] | None = None) -> None:
    """Wait until squeue no longer lists ``job_id`` (a cancelled job is COMPLETING briefly)."""
    until(f"job {job_id} gone from squeue", lambda: True if job_state(job_id, env) is None
          else None, timeout)


def jobs_named(name: str, user: str, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(job id, state)`` of ``user``'s jobs named ``name``, as squeue lists them."""
    proc = slurm("squeue", "-u", user, f"--name={name}", "-h", "-o", "%i %T", env=env)
    assert proc.returncode == 0, proc.stderr
    return [(line.split()[0], line.split()[1]) for line in proc.stdout.splitlines()
            if line.strip()]


def steps(job_id: str) -> dict[str, str]:
    """``{step id: step name}`` of a job's numeric steps (``squeue -s``; ``extern`` and
    ``batch`` left out)."""
    proc = slurm("squeue", "-s", "-j", job_id, "-h", "-o", "%i %j")
    if proc.returncode != 0:
        return {}
    rows = (line.split(maxsplit=1) for line in proc.stdout.splitlines() if line.strip())
    return {row[0]: row[-1] for row in rows if row[0].split(".", 1)[-1].isdigit()}


def step_ids(job_id: str) -> list[str]:
    """The numeric steps of a job (``squeue -s``)."""
    return sorted(steps(job_id))


class JobNames:
    """Unique job names for one test; :meth:`cleanup` cancels their jobs (ours only)."""

    def __init__(self, user: str, env: Mapping[str, str] | None = None) -> None:
        self.user = user
        self.env = dict(env or {})
        self.names: list[str] = []

    def new(self, tag: str, suffix: str = ".persistent") -> str:
        name = f"{PREFIX}-{tag}-{uuid.uuid4().hex[:8]}{suffix}"
        self.names.append(name)
        return name

    def jobs(self) -> list[tuple[str, str]]:
        return [job for name in self.names for job in jobs_named(name, self.user, self.env)]

    def cleanup(self) -> None:
        for name in self.names:
            slurm("scancel", "-u", self.user, f"--name={name}", env=self.env)
        # generous: a job cancelled after its controller was stopped (SIGSTOP) can stay
        # COMPLETING for 40 s and more, until slurmctld resends TERMINATE_JOB (seen in CI
        # runs); Slurm promises no bound, this only keeps a stuck one from passing
        until("our jobs gone from squeue", lambda: True if not self.jobs() else None, 180.0)


def local_pids(tag: str, *, skip: tuple[str, ...] = ("pytest",)) -> dict[int, str]:
    """Local processes whose command line holds ``tag`` (and none of ``skip``): pid ->
    command line."""
    found = {}
    for pid in Path("/proc").iterdir():
        try:
            cmd = (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if tag in cmd and not any(s in cmd for s in skip):
            found[int(pid.name)] = cmd
    return found


def local_processes(tag: str, *, skip: tuple[str, ...] = ("pytest",)) -> list[str]:
    """:func:`local_pids`, each with its state, parent, group and session (what a
    failure needs to be understood)."""
    found = []
    for pid, cmd in local_pids(tag, skip=skip).items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[:4]
        except OSError:
            state = []
        found.append(f"{cmd}[pid {pid} state/ppid/pgrp/sid {' '.join(state)}]")
    return found


def assert_processes_end(tag: str, why: str, within: float = 30, *,
                         skip: tuple[str, ...] = ("pytest",)) -> None:
    """No local process holds ``tag`` within ``within`` seconds. Slurm lists a cancelled
    step no more before its srun and task have ended (seen on 24.11 and 26.05 under
    load: both still there as the report came); they end on Slurm's own time, never
    forever. The one way the real tests look for a step's leftover processes, so none
    asserts "gone" at the instant Slurm stops listing the step."""
    try:
        until(f"{why}: no process with {tag!r}",
              lambda: True if not local_processes(tag, skip=skip) else None, within)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {local_processes(tag, skip=skip)}") from None


def spec_dict(cluster: ClusterInfo, root: Path, name: str, **over: Any) -> dict[str, Any]:
    """A persistent job spec on ``cluster`` with everything under ``root``; ``over``
    replaces fields (``slurm_params`` entries merge)."""
    script = root / "job.slurm"
    if not script.exists():
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("#!/bin/bash\nsrun true\n")
    params: dict[str, Any] = {"partition": cluster.partition, "account": cluster.account,
                              "nodes": 1}
    params.update(over.pop("slurm_params", {}))
    data: dict[str, Any] = {
        "script_path": str(script),
        "work_dir": str(root / "work"),
        "model_name": "itmodel",
        "workflow_type": "custom",
        "repo_root": str(root / "repo"),
        "slurm_params": params,
        "alloc_job_name": name,
        "alloc_time_limit": "00:30:00",
    }
    data.update(over)
    return data


def make_spec(cluster: ClusterInfo, root: Path, name: str, **over: Any) -> JobSpec:
    return JobSpec.from_dict(spec_dict(cluster, root, name, **over))


def cli_report(proc: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
    """The JSON report a ``slurm-fsm ... --json`` process printed, with its exit code
    under ``_rc``."""
    out, err = proc.communicate(timeout=timeout)
    assert out, err
    report: dict[str, Any] = json.loads(out)
    report["_rc"] = proc.returncode
    return report


def is_job_query(argv: Sequence[str]) -> bool:
    """``squeue -j ID`` (one job's row), not a lookup by name nor a step listing."""
    return bool(argv) and Path(argv[0]).name == "squeue" and "-j" in argv and "-s" not in argv


class RecordingBackend(SubprocessBackend):
    """The real backend, recording every command it runs through its runner, and a
    ``<start_script>`` marker where the job's script is started."""

    def __init__(self, **kw: Any) -> None:
        self.argvs: list[tuple[str, ...]] = []
        super().__init__(runner=self._record, **kw)

    def _record(self, argv: Sequence[str], timeout_s: float,
                env: Mapping[str, str]) -> CommandResult:
        self.argvs.append(tuple(argv))
        return run_command(argv, timeout_s, env)

    def start_script(self, request: ScriptRequest) -> LocalScript:
        self.argvs.append(("<start_script>",))
        return super().start_script(request)

    def tools(self) -> list[str]:
        return [Path(a[0]).name for a in self.argvs]

    def job_queries(self) -> list[tuple[str, ...]]:
        return [a for a in self.argvs if is_job_query(a)]

    def before_script(self) -> list[tuple[str, ...]]:
        marker = ("<start_script>",)
        assert marker in self.argvs, "the script was never started"
        return self.argvs[: self.argvs.index(marker)]


def without_pyxis(cluster: ClusterInfo, root: Path) -> dict[str, str]:
    """``SLURM_CONF`` of a copy of the cluster's config whose plugstack is empty: its
    clients (srun, salloc...) reach the same cluster but know no ``--container-*``,
    like a site without pyxis."""
    root.mkdir(parents=True, exist_ok=True)
    plugstack = root / "plugstack-empty.conf"
    plugstack.write_text("")
    lines = [f"PlugStackConfig={plugstack}" if line.startswith("PlugStackConfig=") else line
             for line in cluster.slurm_conf.read_text().splitlines()]
    conf = root / "slurm-without-pyxis.conf"
    conf.write_text("\n".join(lines) + "\n")
    return {"SLURM_CONF": str(conf)}
