"""Kill points over a detached run's life (issue 39, item 6): is a verdict ever lost?

``python -m benchmarks.killpoints [--points N] [--seed S] [--until HH:MM] [--out F]``
(needs the local cluster: it is brought up when it is not; the emulated login nodes
need root and ``unshare``) detaches ``N`` runs of one persistent spec, one after the
other through one warm allocation. The job prints a line, runs a step of the allocation
for about 5 s (``srun --overlap``) and ends with ``end``. Each run is hit at a random
moment by one of:

- ``cli``: kill -9 of the ``run --detach`` command itself, before or after it returned;
- ``owner``: kill -9 of the run's owner at that moment (its supervisor on this host, or
  its agent in the allocation: the pid its owner record names, as ``runs --json``
  shows it; the agent is a process of this machine's slurmd);
- ``cancel``: ``slurm-fsm cancel``;
- ``node``: the run started from the emulated login node ``login-a``
  (:func:`slurm_fsm_dev.loginnodes.on_node`), which is killed whole (kill -9 of its pid
  namespace's init: every process of the node at once); every other such run has no
  agent (``SLURM_FSM_AGENT=off``: its supervisor on the node runs the job);
- ``ctld``: slurmctld restarted (:func:`slurm_fsm_dev.localcluster.restart_ctld`);
- ``none``: nothing (the live verdict, for comparison); these runs also measure
  ``attach`` from the other login node, ``login-b``: the job waits for a gate, then
  prints a line with its own clock; the time until ``attach`` shows that line.

Then ``slurm-fsm wait`` must give a verdict, and it must be the right one:

- PASSED when the job's log ends with ``end`` and its owner lived to judge it, or its
  script had ended when its owner died (the rebuilt verdict must equal the live one);
- CANCELLED when the owner died or was told to stop while the script ran (a cancel
  that races the script's last line may find it still running: CANCELLED, or ended:
  PASSED; never PASSED for a script that did not finish);
- ``node``: once the agent held the run (the run's record names the agent), PASSED and
  live; before (or with no agent), CANCELLED rebuilt (PASSED when the script had
  ended), or the run never started. A run whose supervisor
  died on the node before it got past step 0 (no allocation in its record, or no lease)
  may get no verdict at all: such points are ``unsettled_step0`` with the reason, a
  known gap, never counted right;
- ``ctld``: the run goes on across a controller restart: PASSED;
- no step left on the allocation once the verdict is given (every step of the run, its
  lease and its agent included, gone within 20 s), and the allocation alive;
- ``node``: the dead node's lease step (when the run had one on it at the kill) gone
  from ``squeue -s`` within 10 s of the kill.

Every point also times ``slurm-fsm logs RUN_ID`` (no ``-f``) in whatever state the run
is then, and once more after the verdict. The figures go to ``--out`` (default
``benchmarks/killpoints.json``). Figures, not pass/fail; docs/reliability.md cites them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_fsm_dev import localcluster
from slurm_fsm_dev.chroot import LOGIN_NODES
from slurm_fsm_dev.localcluster import ClusterInfo
from slurm_fsm_dev.loginnodes import children, on_node

RESULTS = Path(__file__).with_name("killpoints.json")
KINDS = ("cli", "owner", "cancel", "node", "ctld", "none")
JOB = "#!/bin/bash\necho start\nsrun --overlap -n1 sleep 5\necho end\n"
#: the ``none`` runs' job: ``attach`` on login-b is following it when the gate opens
ATTACH_JOB = ("#!/bin/bash\necho start\nuntil [ -e {gate} ]; do sleep 0.05; done\n"
              "echo \"mark $(date +%s.%N)\"\nsrun --overlap -n1 sleep 1\necho end\n")
LEASE_LIMIT_S = 10.0
MARK = re.compile(r"mark (\d+\.\d+)")
RUN_OWNER = re.compile(r"\.slurm_run\.(r[0-9a-f]{12})\.owner\.json")


#: how long a lane waits for the others at a controller restart (the slowest may be
#: waiting up to 240 s for a verdict)
BARRIER_S = 900.0


@dataclasses.dataclass(frozen=True)
class Lane:
    """One lane: a checkout and specs of its own, so a persistent allocation of its own
    (one CPU of one node: the local cluster's 3 nodes of 8 CPUs hold many)."""

    index: int
    root: Path
    specs: dict[str, Path]
    alloc: str = ""

    @property
    def repo(self) -> Path:
        return self.root / "repo"


@dataclasses.dataclass(frozen=True)
class Shared:
    """What the lanes share: where they meet before a controller restart, every lane's
    root (whose runs' phases are read as slurmctld goes down) and the folder of the
    restarts' records."""

    barrier: Any  # a multiprocessing Barrier
    roots: tuple[Path, ...]
    folder: Path


def _cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def _slurm(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True,  # noqa: S603
                          timeout=60, check=False).stdout


def _view(repo: Path, run_id: str) -> dict[str, Any]:
    """The run as ``runs --json`` shows it (the same view, read in this process: a
    command takes seconds on this loaded machine, and the lanes share its 2 cores)."""
    from slurm_fsm import detach
    from slurm_fsm.errors import SlurmFsmError

    try:
        return dict(detach.find(repo, run_id).to_dict())
    except (SlurmFsmError, OSError, ValueError):
        return {}


def _steps(alloc: str) -> list[str]:
    """Every step of the allocation (leases and agents included), as ``id name``."""
    out = _slurm("squeue", "-h", "-s", "-j", alloc, "-o", "%i %j")
    return [ln.strip() for ln in out.splitlines()
            if ln.strip() and ln.split()[0].split(".")[-1].isdigit()]


def _host_leases(host: str, alloc: str) -> list[str]:
    """The step ids of every lease of allocation ``alloc`` whose ``srun`` runs on
    ``host`` (``scontrol``): every lane's emulated node has the same name."""
    out = _slurm("scontrol", "-o", "show", "step")
    found = []
    for line in out.splitlines():
        step = re.search(r"StepId=(\S+)", line)
        name = re.search(r"\bName=(\S+)", line)
        srun = re.search(r"SrunHost:Pid=([^:\s]+):", line)
        if step and name and srun and name.group(1).startswith("fsm-lease.") and \
                srun.group(1) == host and step.group(1).split(".")[0] == alloc:
            found.append(step.group(1))
    return found


def _until(probe: Callable[[], bool], timeout: float, every: float = 0.2) -> float | None:
    """Seconds until ``probe()`` held, or None when it never did within ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if probe():
            return round(time.monotonic() - t0, 2)
        time.sleep(every)
    return None


def _timed_logs(repo: Path, run_id: str, state: str | None = None) -> dict[str, Any]:
    """``logs RUN_ID``: its wall time, and its CPU time (on a machine this loaded the
    wall time is mostly the wait for a core)."""
    state = state or _view(repo, run_id).get("state")
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = _cli("logs", run_id, cwd=repo, timeout=60)
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    return {"state": state, "s": round(wall, 3), "cpu_s": round(cpu, 3),
            "rc": done.returncode, "bytes": len(done.stdout)}


def _spec(cluster: ClusterInfo, root: Path, name: str, job: str, lane: int = 0) -> Path:
    (root / f"{name}.slurm").write_text(job)
    (root / "repo").mkdir(exist_ok=True)
    spec = root / f"{name}.json"
    spec.write_text(json.dumps({
        "script_path": str(root / f"{name}.slurm"), "work_dir": str(root / "work"),
        "model_name": "kp", "workflow_type": "custom", "success_patterns": ["end"],
        "repo_root": str(root / "repo"), "alloc_time_limit": "02:00:00",
        "alloc_job_name": f"{cluster.account}-bench-killpoints-{os.getpid()}-{lane}.persistent",
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1}}))
    return spec


def _run_ids(repo: Path) -> set[str]:
    """The run ids of the checkout's owner records: what ``runs`` lists, read from the
    folder (a ``runs`` command takes seconds on this loaded machine)."""
    return {m.group(1) for f in (repo / "work_dirs").glob(".slurm_run.r*.owner.json")
            if (m := RUN_OWNER.fullmatch(f.name))}


def _new_run(repo: Path, before: set[str], timeout: float) -> str | None:
    """The run started since ``before`` (the CLI died before it printed its id)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if new := sorted(_run_ids(repo) - before):
            return new[0]
        time.sleep(0.1)
    return None


def _kill_node(node: subprocess.Popen[str]) -> str:
    """kill -9 of the emulated node's init (its namespace's pid 1): the node, whole;
    what its ``run --detach`` had printed."""
    deadline = time.monotonic() + 10
    while not (inits := children().get(node.pid, [])) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(inits[0], signal.SIGKILL)
    out, err = node.communicate(timeout=60)
    return (out + err)[-1000:]


def _hit_node(lane: Lane, delay: float, agent: bool) -> dict[str, Any]:
    """Start the run on the lane's own login-a (without an agent:
    ``SLURM_FSM_AGENT=off``), kill that node after ``delay`` s; the lease figure."""
    env = {**os.environ, **({} if agent else {"SLURM_FSM_AGENT": "off"})}
    node = on_node(LOGIN_NODES[0], ["run", str(lane.specs["job"]), "--detach", "--json",
                                    "--quiet"], env=env, linger_s=600)
    time.sleep(delay)
    leases = _host_leases(LOGIN_NODES[0], lane.alloc)  # the dead node's, as it dies
    printed = _kill_node(node)
    gone = None
    if leases:
        gone = _until(lambda: not set(leases) & {s.split()[0] for s in _all_steps()}, 60)
    return {"agent": agent, "node_leases": leases, "lease_gone_s": gone,
            "node_printed": printed}


def _all_steps() -> list[str]:
    out = _slurm("squeue", "-h", "-s", "-o", "%i %j")
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def _detach(lane: Lane) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run",  # noqa: S603
                             str(lane.specs["job"]), "--detach", "--json", "--quiet"],
                            cwd=lane.repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _started(lane: Lane, proc: subprocess.Popen[str], before: set[str],
             facts: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The run id the command printed (or, killed before it printed it, the new owner
    record's); its exit code and stderr in ``facts``."""
    out, err = proc.communicate(timeout=300)
    facts["cli_rc"] = proc.returncode
    if proc.returncode not in (0, -9):
        facts["cli_stderr"] = err[-2000:]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return str(json.loads(out)["run_id"]), facts
    return _new_run(lane.repo, before, 10), facts


def _start(lane: Lane, kind: str, delay: float,
           agent: bool = True) -> tuple[str | None, dict[str, Any]]:
    """Start the run and hit it (``cli``, ``node``: ``owner`` and ``cancel`` need the
    run id first, ``ctld`` is :func:`_ctld_start`); its run id (None: it never
    started) and what the hit measured."""
    before = _run_ids(lane.repo)
    if kind == "node":
        facts = _hit_node(lane, delay, agent)
        return _new_run(lane.repo, before, 10), facts
    proc = _detach(lane)
    if kind == "cli":
        time.sleep(delay)
        proc.kill()
    return _started(lane, proc, before, {})


# ------------------------------------------------------------------ controller restarts
def _phases(roots: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Every lane's recent runs' phases (their owner records, touched in the last 120
    s), as the controller goes down."""
    now, out = time.time(), {}
    for k, root in enumerate(roots):
        lane: dict[str, Any] = {}
        for f in (root / "repo" / "work_dirs").glob(".slurm_run.r*.owner.json"):
            with contextlib.suppress(OSError, ValueError):
                if now - f.stat().st_mtime < 120 and (m := RUN_OWNER.fullmatch(f.name)):
                    lane[m.group(1)] = json.loads(f.read_text()).get("phase")
        out[str(k)] = lane
    return out


def _restart(shared: Shared, rnd: int) -> None:
    """``DELAYS["ctld"]`` s after the lanes met: slurmctld restarted once for all of
    them; the moment (epoch s) and each lane's runs' phases then, in the round's file."""
    time.sleep(DELAYS["ctld"])
    info: dict[str, Any] = {"phases": _phases(shared.roots), "t": time.time()}
    try:
        info["pid"] = localcluster.restart_ctld()
    except (localcluster.LocalClusterError, OSError) as exc:  # the figure says so
        info["error"] = repr(exc)
    tmp = shared.folder / f".ctld-{rnd}.json"
    tmp.write_text(json.dumps(info))
    tmp.replace(shared.folder / f"ctld-{rnd}.json")


def _ctld_start(lane: Lane, shared: Shared, rnd: int,
                rng: random.Random) -> tuple[str | None, dict[str, Any]]:
    """One controller restart hits every lane's run: the lanes meet, one of them
    restarts slurmctld ``DELAYS["ctld"]`` s later, and each starts its run at a random
    moment before that, so each run is hit at its own moment of its life (its
    ``delay_s``, uniform in [0, DELAYS["ctld"]] as with one lane)."""
    first = shared.barrier.wait(timeout=BARRIER_S) == 0
    restart = threading.Thread(target=_restart, args=(shared, rnd)) if first else None
    if restart is not None:
        restart.start()
    time.sleep(rng.uniform(0.0, DELAYS["ctld"]))
    t_start, before = time.time(), _run_ids(lane.repo)
    run_id, facts = _started(lane, _detach(lane), before, {"ctld_round": rnd})
    if restart is not None:
        restart.join(timeout=180)
    done = shared.folder / f"ctld-{rnd}.json"
    _until(done.exists, 180)
    info = json.loads(done.read_text()) if done.exists() else {}
    facts.update(delay_s=round(info["t"] - t_start, 2) if "t" in info else None,
                 ctld_pid=info.get("pid"), ctld_error=info.get("error"),
                 hit_phase=info.get("phases", {}).get(str(lane.index), {}).get(
                     run_id or "", "no record yet"))
    return run_id, facts


def _owner_record(repo: Path, run_id: str) -> dict[str, Any]:
    """The run's owner record as ``runs --json`` reads it (read here directly: a
    ``runs`` command takes seconds on this loaded machine, longer than the job)."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((repo / "work_dirs" / f".slurm_run.{run_id}.owner.json")
                          .read_text())
        return data if isinstance(data, dict) else {}
    return {}


def _hit_after(repo: Path, run_id: str, kind: str, delay: float) -> dict[str, Any]:
    time.sleep(delay)
    if kind == "owner":
        rec = _owner_record(repo, run_id)
        hit_at = time.time()
        with contextlib.suppress(ProcessLookupError, TypeError, ValueError):
            os.kill(int(rec["pid"]), signal.SIGKILL)  # it ended first: nothing to hit
        return {"hit_owner": rec.get("owner"), "hit_phase": rec.get("phase"),
                "hit_at": round(hit_at, 3)}
    phase = _owner_record(repo, run_id).get("phase")
    _cli("cancel", run_id, cwd=repo)
    return {"hit_phase": phase}


def _right(kind: str, status: str | None, source: str | None, ended: bool,
           owner: str | None, *, ended_after_hit: bool = False) -> bool:
    """Whether a point's verdict is the right one. ``ended_after_hit``: the job's log got
    its last line after the owner was killed (``log_written_at`` after ``hit_at``): the
    script still ran at the kill, and its guard may have stopped it after that line and
    before its exit (CANCELLED, the rule: "the owner died while the script ran"), or it
    exited by itself first (its status written: PASSED)."""
    if kind in ("none", "cli", "ctld"):
        return status == "PASSED"
    if kind == "node":
        if owner == "agent":  # the agent held it when the node died: it goes on
            return (status, source) == ("PASSED", "live") and ended
        return (status == "CANCELLED" and not ended) or (status == "PASSED" and ended)
    if kind == "owner" and ended_after_hit:
        return status == "CANCELLED" or (status == "PASSED" and ended)
    if source == "live" and kind == "cancel":
        # a cancel that races the script's last line: the script may not have exited
        # yet when the stop came (CANCELLED), or had (PASSED); never PASSED unfinished
        return status == "CANCELLED" or (status == "PASSED" and ended)
    # rebuilt (or live, when the job ended before the hit)
    return (status == "PASSED") == ended and status in ("PASSED", "CANCELLED")


def _ended_after_hit(point: dict[str, Any]) -> bool:
    """The job's log got its last line after the point's hit (``owner`` points)."""
    return bool(point.get("log_ended") and point.get("hit_at")
                and (point.get("log_written_at") or 0) > point["hit_at"])


def _settle(repo: Path, run_id: str, kind: str) -> dict[str, Any]:
    """``wait`` for the verdict; what it was, and what is left on the allocation."""
    waited = _cli("wait", run_id, "--json", "--timeout", "90" if kind == "node" else "240",
                  cwd=repo)
    reports = json.loads(waited.stdout) if waited.stdout.strip() else []
    report = reports[0] if isinstance(reports, list) and reports else {}
    view = _view(repo, run_id)
    log = Path(report.get("log_files", {}).get("stdout") or "/nonexistent")
    ended = log.exists() and log.read_text().rstrip().endswith("end")
    alloc = str(report.get("allocation_id") or view.get("allocation_id") or "")
    gone = _until(lambda: not _steps(alloc), 20) if alloc else 0.0
    return {"status": report.get("status"), "source": report.get("report_source"),
            # when the job's log was last written (its last line): against ``hit_at``,
            # whether the script printed it before or after its owner was killed
            "log_written_at": round(log.stat().st_mtime, 3) if log.exists() else None,
            "summary": report.get("summary"), "errors": report.get("errors", [])[:3],
            "log_ended": ended, "owner_at_end": view.get("owner"),
            "state_at_end": view.get("state"), "allocation_id": alloc,
            "steps_gone_s": gone, "steps_left": _steps(alloc) if gone is None else [],
            "allocation_alive": bool(alloc) and _slurm(
                "squeue", "-h", "-j", alloc, "-o", "%T").strip() == "RUNNING"}


def one_point(lane: Lane, kind: str, delay: float, agent: bool = True,
              ctld: tuple[Shared, int, random.Random] | None = None) -> dict[str, Any]:
    """One detached run hit by ``kind`` after ``delay`` seconds; what came of it."""
    point: dict[str, Any] = {"kind": kind, "delay_s": round(delay, 2)}
    repo = lane.repo
    run_id, facts = (_ctld_start(lane, *ctld) if ctld is not None
                     else _start(lane, kind, delay, agent))
    point.update(facts, run_id=run_id, never_started=run_id is None)
    if run_id is None:  # killed before it started a supervisor: nothing ran
        point.update(status=None, source=None, right=True, lost=False, steps_left=[])
        return point
    if kind in ("owner", "cancel"):
        point.update(_hit_after(repo, run_id, kind, delay))
    point["logs_running"] = _timed_logs(repo, run_id)
    point.update(_settle(repo, run_id, kind))
    point["logs_done"] = _timed_logs(repo, run_id, "done")
    point["lost"] = point["status"] is None
    point["right"] = _right(kind, point["status"], point["source"], point["log_ended"],
                            point["owner_at_end"], ended_after_hit=_ended_after_hit(point))
    if kind == "node" and point["lost"] and (
            point["state_at_end"] == "starting" or not point.get("node_leases")):
        point["right"] = False
        point["unsettled_step0"] = (
            f"no verdict after 90 s: the run is {point['state_at_end']!r}, owner "
            f"{point['owner_at_end']!r}, allocation {point['allocation_id'] or 'none'}, "
            f"lease on {LOGIN_NODES[0]} at the kill: {point.get('node_leases') or 'none'}")
    return point


def _lines(stream: Any, into: list[tuple[float, str]]) -> None:
    for line in stream:
        into.append((time.time(), line.rstrip("\n")))


def _attach_start(spec: Path, repo: Path, gate: Path) -> tuple[str | None, dict[str, Any]]:
    """A ``none`` run followed by ``attach`` on login-b: the time until the job's line
    written once the gate opens shows there (by the job's own clock)."""
    gate.unlink(missing_ok=True)
    done = _cli("run", str(spec), "--detach", "--json", "--quiet", cwd=repo)
    try:
        run_id = str(json.loads(done.stdout)["run_id"])
    except (ValueError, KeyError):
        gate.touch()
        return None, {"cli_rc": done.returncode, "cli_stderr": done.stderr[-2000:]}
    seen: list[tuple[float, str]] = []
    node = on_node(LOGIN_NODES[1], ["attach", run_id, "--repo", str(repo)], env=os.environ)
    reader = threading.Thread(target=_lines, args=(node.stderr, seen), daemon=True)
    reader.start()
    shown = _until(lambda: any(ln.rstrip().endswith("start") for _t, ln in seen), 60, 0.05)
    gate.touch()
    _until(lambda: any(MARK.search(ln) for _t, ln in seen), 60, 0.02)
    marks = [(t, float(m.group(1))) for t, ln in seen if (m := MARK.search(ln))]
    try:
        node.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        node.kill()
        node.communicate(timeout=60)
    return run_id, {"attach_start_shown_s": shown, "attach_rc": node.returncode,
                    "attach_line_s": round(marks[0][0] - marks[0][1], 3) if marks else None}


def _point(lane: Lane, kind: str, delay: float, agent: bool,
           ctld: tuple[Shared, int, random.Random] | None = None) -> dict[str, Any]:
    if kind != "none":
        return one_point(lane, kind, delay, agent, ctld)
    repo, spec = lane.repo, lane.specs["attach"]
    run_id, facts = _attach_start(spec, repo, spec.with_suffix(".gate"))
    point: dict[str, Any] = {"kind": kind, "delay_s": 0.0, **facts, "run_id": run_id,
                             "never_started": run_id is None}
    if run_id is None:
        return {**point, "status": None, "source": None, "right": False, "lost": True,
                "steps_left": []}
    point.update(_settle(repo, run_id, kind))
    point["logs_done"] = _timed_logs(repo, run_id, "done")
    point["lost"] = point["status"] is None
    point["right"] = _right(kind, point["status"], point["source"], point["log_ended"],
                            point["owner_at_end"])
    return point


#: the hits' moments are uniform in [0, DELAYS[kind]] s: from the command's start (cli,
#: node, ctld) or from its return (owner, cancel); the job runs about 5 s once started,
#: and on this loaded machine a command takes seconds to start
DELAYS = {"cli": 8.0, "owner": 7.0, "cancel": 7.0, "node": 25.0, "ctld": 10.0, "none": 0.0}


def _figures(values: Sequence[float]) -> dict[str, Any]:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "median": round(statistics.median(vals), 3),
            "p90": round(vals[math.ceil(0.9 * len(vals)) - 1], 3), "max": round(vals[-1], 3)}


def _import_floor() -> float:
    """Seconds for this Python to import slurm_fsm's CLI and exit: what any command
    costs before it does anything, on this machine now."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import slurm_fsm.cli"], timeout=60,
                   check=False)
    return round(time.monotonic() - t0, 3)


def summarize(results: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    settled = [r for r in results if not r.get("unsettled_step0")]
    by_kind = {k: dict(Counter(
        "unsettled_step0" if r.get("unsettled_step0") else
        ("right" if r["right"] else "WRONG") + ("+LOST" if r["lost"] else "")
        for r in results if r["kind"] == k)) for k in KINDS}
    for agent in (True, False):
        by_kind[f"node_{'agent' if agent else 'no_agent'}"] = dict(Counter(
            "unsettled_step0" if r.get("unsettled_step0") else
            ("right" if r["right"] else "WRONG") + ("+LOST" if r["lost"] else "")
            for r in results if r["kind"] == "node" and r.get("agent") is agent))
    logs = [r[k] for r in results for k in ("logs_running", "logs_done") if k in r]
    lease = [r["lease_gone_s"] for r in results if r.get("node_leases")]
    return {
        "points": len(results), "lost": sum(r["lost"] for r in settled),
        "points_per_lane": dict(sorted(Counter(str(r.get("lane", 0))
                                               for r in results).items())),
        "ctld_restarts": len({r.get("ctld_round") for r in results if r["kind"] == "ctld"}),
        "ctld_restart_errors": [r["ctld_error"] for r in results if r.get("ctld_error")],
        "wrong": sum(not r["right"] for r in settled),
        "unsettled_step0": sum(bool(r.get("unsettled_step0")) for r in results),
        "steps_left": sum(bool(r.get("steps_left")) for r in results),
        "allocation_dead_after": sum(not r.get("allocation_alive", True) for r in results
                                     if not r["never_started"]),
        "rebuilt": sum(r.get("source") == "rebuilt" for r in results),
        "never_started": sum(r["never_started"] for r in results),
        "by_kind": by_kind,
        # an owner killed as its script ended: the script's last line written after
        # the kill (the script outlived its owner while its guard stopped it; not
        # counted apart: the figure explains a wrong point, the rule stays)
        "owner_end_written_after_kill": sum(
            r["kind"] == "owner" and _ended_after_hit(r) for r in results),
        "cancel_raced_the_end": sum(r["kind"] == "cancel" and r.get("log_ended", False)
                                    and r["status"] == "CANCELLED" for r in results),
        "node_lease_gone_s": {**_figures([x for x in lease if x is not None]),
                              "leases": len(lease),
                              "over_10s_or_never": sum(x is None or x > LEASE_LIMIT_S
                                                       for x in lease)},
        "steps_gone_after_verdict_s": _figures([r["steps_gone_s"] for r in results
                                                if r.get("steps_gone_s") is not None]),
        "logs_s": {state: _figures([x["s"] for x in logs if x["state"] == state])
                   for state in sorted({str(x["state"]) for x in logs})},
        "logs_s_all": _figures([x["s"] for x in logs]),
        "logs_cpu_s_all": _figures([x["cpu_s"] for x in logs if "cpu_s" in x]),
        "attach_line_s": _figures([r["attach_line_s"] for r in results
                                   if r.get("attach_line_s") is not None]),
        **extra,
    }


def _triple(by: dict[str, int]) -> str:
    wrong = sum(n for k, n in by.items() if k.startswith("WRONG"))
    return f"{by.get('right', 0)} / {wrong} / {by.get('unsettled_step0', 0)}"


def _fig(f: dict[str, Any], keys: Sequence[str] = ("median", "p90", "max")) -> str:
    return " / ".join(str(f.get(k, "-")) for k in keys)


#: the docs' table: a row's title and how it is read from a summary
TABLE_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("points (kill moments); lanes", lambda s: f"{s['points']}; {s.get('lanes', 1)}"),
    *((f"`{k}`: right / wrong / unsettled", lambda s, k=k: _triple(s["by_kind"][k]))
      for k in KINDS),
    ("`node` with an agent / without: right / wrong / unsettled",
     lambda s: f"{_triple(s['by_kind']['node_agent'])}; "
               f"{_triple(s['by_kind']['node_no_agent'])}"),
    ("controller restarts (each hit every lane's run)", lambda s: str(s.get("ctld_restarts", "-"))),
    ("verdicts lost (no report from `wait`; unsettled apart)", lambda s: str(s["lost"])),
    ("rebuilt verdicts", lambda s: str(s["rebuilt"])),
    ("runs never started (killed before a supervisor began)",
     lambda s: str(s["never_started"])),
    ("runs with a step left 20 s after the verdict", lambda s: str(s["steps_left"])),
    ("allocation not RUNNING after a verdict; left 15 s after `release`",
     lambda s: f"{s['allocation_dead_after']}; "
               f"{len(s.get('allocations_left_15s_after_release', []))}"),
    ("dead node's lease gone from `squeue -s`: leases, median, max (s); over 10 s",
     lambda s: f"{s['node_lease_gone_s'].get('leases', 0)}, "
               f"{s['node_lease_gone_s'].get('median', '-')}, "
               f"{s['node_lease_gone_s'].get('max', '-')}; "
               f"{s['node_lease_gone_s'].get('over_10s_or_never', 0)}"),
    ("`logs RUN_ID` wall: median / p90 / max (s)", lambda s: _fig(s["logs_s_all"])),
    ("`logs RUN_ID` CPU (user+sys): median / p90 / max (s)",
     lambda s: _fig(s["logs_cpu_s_all"])),
    ("`python -c 'import slurm_fsm.cli'` wall: median (s)",
     lambda s: str(s["cli_import_floor_s"].get("median", "-"))),
    ("`attach` on login-b, a new log line shown after: median / p90 / max (s) (n)",
     lambda s: f"{_fig(s['attach_line_s'])} ({s['attach_line_s'].get('n', 0)})"),
    ("load (1 min) at the end; minutes", lambda s: f"{s['load_1min']}; {s['minutes']}"),
)


def table(paths: Sequence[Path]) -> str:
    """The docs' table of the campaign: one column per results file."""
    sums = [json.loads(p.read_text())["summary"] for p in paths]
    head = " | ".join(s["slurm"].replace("slurm-wlm ", "Slurm ") for s in sums)
    lines = [f"| figure | {head} |", "|---" * (len(sums) + 1) + "|"]
    lines += [f"| {title} | " + " | ".join(row(s) for s in sums) + " |"
              for title, row in TABLE_ROWS]
    return "\n".join(lines) + "\n"


def _stop_at(text: str | None) -> float:
    if not text:
        return float("inf")
    now = datetime.now(UTC)
    hh, mm = (int(x) for x in text.split(":"))
    at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return time.monotonic() + (at - now).total_seconds()


def _lane(lane: Lane, shared: Shared, points: int, seed: int, stop: float,
          out: Path, kinds: tuple[str, ...] = KINDS) -> None:
    """A lane's points, one after the other, each a JSON line of ``out``; its first
    line the warm-up's (which gives the lane its allocation)."""
    rng = random.Random(seed * 1000 + lane.index)
    try:
        warm = _cli("run", str(lane.specs["job"]), "--json", "--quiet", cwd=lane.repo)
        report = json.loads(warm.stdout) if warm.stdout.strip() else {}
        lane = dataclasses.replace(lane, alloc=str(report.get("allocation_id") or ""))
        _append(out, {"lane": lane.index, "warm_up": report.get("status"),
                      "allocation_id": lane.alloc, "warm_stderr": warm.stderr[-500:]})
        for i in range(points):
            if time.monotonic() > stop:
                break
            kind, cycle = kinds[i % len(kinds)], i // len(kinds)
            # every other node kill: a run with no agent (its supervisor runs the
            # job on the node, and its lease must end with it)
            ctld = (shared, cycle, rng) if kind == "ctld" else None
            point = _point(lane, kind, rng.uniform(0.0, DELAYS[kind]), cycle % 2 == 0,
                           ctld)
            _append(out, {"lane": lane.index, **point})
    except threading.BrokenBarrierError:
        pass  # another lane stopped (--until, --points) or failed: so does this one
    finally:
        shared.barrier.abort()


def _append(out: Path, line: dict[str, Any]) -> None:
    with out.open("a") as f:
        f.write(json.dumps(line) + "\n")


def _read_lanes(folder: Path, lanes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every lane's points, and its warm-up lines."""
    points: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for k in range(lanes):
        f = folder / f"lane{k}.jsonl"
        for line in f.read_text().splitlines() if f.exists() else []:
            (warm if "warm_up" in json.loads(line) else points).append(json.loads(line))
    return points, warm


def _release(lanes: Sequence[Lane]) -> dict[str, Any]:
    """``release`` of every lane's allocation; what each said, and what is left then and
    15 s later."""
    said = {}
    for lane in lanes:
        done = _cli("release", str(lane.specs["job"]), cwd=lane.repo)
        said[str(lane.index)] = {"rc": done.returncode, "said": (done.stdout + done.stderr)[-1500:]}

    def left() -> list[str]:
        return [ln for ln in _slurm("squeue", "-h", "-o", "%i %j %T").split("\n")
                if "bench-killpoints" in ln]

    now = left()
    time.sleep(15)
    return {"release": said, "allocations_left_after_release": now,
            "allocations_left_15s_after_release": left()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--points", type=int, default=60, help="points in all (over the lanes)")
    p.add_argument("--lanes", type=int, default=1, help="lanes at once (each its own "
                   "checkout and allocation)")
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--until", help="stop starting points at HH:MM UTC")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                   help="only these kinds of point, in turn (default: all)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--table", type=Path, nargs="+", metavar="RESULTS",
                   help="print the docs' table of these results files, run nothing")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table), end="")
        return 0
    if args.lanes < 1:
        p.error("--lanes: at least 1")
    stop = _stop_at(args.until)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    floor, t0, extra = [_import_floor()], time.monotonic(), {"lanes": args.lanes}
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-killpoints-") as tmp:
        folder = Path(tmp)
        lanes = [_new_lane(cluster, folder / f"lane{k}", k) for k in range(args.lanes)]
        shared = Shared(ctx.Barrier(args.lanes), tuple(ln.root for ln in lanes), folder)
        per_lane = math.ceil(args.points / args.lanes)
        procs = [ctx.Process(target=_lane, args=(ln, shared, per_lane, args.seed, stop,
                                                  folder / f"lane{ln.index}.jsonl",
                                                  tuple(args.kinds)))
                 for ln in lanes]
        try:
            for proc in procs:
                proc.start()
            while any(proc.is_alive() for proc in procs):
                for proc in procs:
                    proc.join(timeout=60 / len(procs))
                floor.append(_import_floor())
                _write(args.out, *_read_lanes(folder, args.lanes), extra, floor,
                       args.seed, t0)
        finally:
            for proc in procs:
                proc.join(timeout=600)
            extra.update(_release(lanes))
            _write(args.out, *_read_lanes(folder, args.lanes), extra, floor, args.seed, t0)
    print(json.dumps(json.loads(args.out.read_text())["summary"], indent=1))
    return 0


def _new_lane(cluster: ClusterInfo, root: Path, index: int) -> Lane:
    root.mkdir(parents=True)
    return Lane(index=index, root=root, specs={
        "job": _spec(cluster, root, "job", JOB, index),
        "attach": _spec(cluster, root, "attach", ATTACH_JOB.format(
            gate=root / "attach.gate"), index)})


def _write(out: Path, results: list[dict[str, Any]], warm: list[dict[str, Any]],
           extra: dict[str, Any], floor: list[float], seed: int, t0: float) -> None:
    summary = summarize(results, {
        **extra, "warm_up": [w.get("warm_up") for w in warm],
        "cli_import_floor_s": _figures(floor),
        "slurm": _slurm("scontrol", "--version").strip(),
        "load_1min": round(os.getloadavg()[0], 2), "seed": seed,
        "minutes": round((time.monotonic() - t0) / 60, 1)})
    out.write_text(json.dumps({"summary": summary, "warm_up": warm, "points": results},
                              indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
