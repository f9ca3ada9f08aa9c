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
import json
import math
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


def _cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def _slurm(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True,  # noqa: S603
                          timeout=60, check=False).stdout


def _runs(repo: Path) -> list[dict[str, Any]]:
    out = _cli("runs", "--all", "--json", cwd=repo).stdout
    return json.loads(out) if out.strip() else []


def _view(repo: Path, run_id: str) -> dict[str, Any]:
    return next((r for r in _runs(repo) if r["run_id"] == run_id), {})


def _steps(alloc: str) -> list[str]:
    """Every step of the allocation (leases and agents included), as ``id name``."""
    out = _slurm("squeue", "-h", "-s", "-j", alloc, "-o", "%i %j")
    return [ln.strip() for ln in out.splitlines()
            if ln.strip() and ln.split()[0].split(".")[-1].isdigit()]


def _host_leases(host: str) -> list[str]:
    """The step ids of every lease whose ``srun`` runs on ``host`` (``scontrol``)."""
    out = _slurm("scontrol", "-o", "show", "step")
    found = []
    for line in out.splitlines():
        step = re.search(r"StepId=(\S+)", line)
        name = re.search(r"\bName=(\S+)", line)
        srun = re.search(r"SrunHost:Pid=([^:\s]+):", line)
        if step and name and srun and name.group(1).startswith("fsm-lease.") and \
                srun.group(1) == host:
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


def _spec(cluster: ClusterInfo, root: Path, name: str, job: str) -> Path:
    (root / f"{name}.slurm").write_text(job)
    (root / "repo").mkdir(exist_ok=True)
    spec = root / f"{name}.json"
    spec.write_text(json.dumps({
        "script_path": str(root / f"{name}.slurm"), "work_dir": str(root / "work"),
        "model_name": "kp", "workflow_type": "custom", "success_patterns": ["end"],
        "repo_root": str(root / "repo"), "alloc_time_limit": "02:00:00",
        "alloc_job_name": f"{cluster.account}-bench-killpoints-{os.getpid()}.persistent",
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1}}))
    return spec


def _new_run(repo: Path, before: set[str], timeout: float) -> str | None:
    """The run started since ``before`` (the CLI died before it printed its id)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [r["run_id"] for r in _runs(repo) if r["run_id"] not in before]
        if new:
            return str(new[0])
        time.sleep(0.2)
    return None


def _new_run_after(repo: Path, before: set[str],
                   facts: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    return _new_run(repo, before, 10), facts


def _kill_node(node: subprocess.Popen[str]) -> str:
    """kill -9 of the emulated node's init (its namespace's pid 1): the node, whole;
    what its ``run --detach`` had printed."""
    deadline = time.monotonic() + 10
    while not (inits := children().get(node.pid, [])) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(inits[0], signal.SIGKILL)
    out, err = node.communicate(timeout=60)
    return (out + err)[-1000:]


def _hit_node(spec: Path, delay: float, agent: bool) -> dict[str, Any]:
    """Start the run on login-a (without an agent: ``SLURM_FSM_AGENT=off``), kill the
    node after ``delay`` s; the lease figure."""
    env = {**os.environ, **({} if agent else {"SLURM_FSM_AGENT": "off"})}
    node = on_node(LOGIN_NODES[0], ["run", str(spec), "--detach", "--json", "--quiet"],
                   env=env, linger_s=600)
    time.sleep(delay)
    leases = _host_leases(LOGIN_NODES[0])  # the dead node's, as it dies
    printed = _kill_node(node)
    gone = None
    if leases:
        gone = _until(lambda: not set(leases) & {s.split()[0] for s in _all_steps()}, 60)
    return {"agent": agent, "node_leases": leases, "lease_gone_s": gone,
            "node_printed": printed}


def _all_steps() -> list[str]:
    out = _slurm("squeue", "-h", "-s", "-o", "%i %j")
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def _start(spec: Path, repo: Path, kind: str, delay: float,
           agent: bool = True) -> tuple[str | None, dict[str, Any]]:
    """Start the run and hit it (every kind but ``owner`` and ``cancel``, which need the
    run id first); its run id (None: it never started) and what the hit measured."""
    before = {r["run_id"] for r in _runs(repo)}
    if kind == "node":
        return _new_run_after(repo, before, _hit_node(spec, delay, agent))
    facts: dict[str, Any] = {}
    restart: threading.Thread | None = None
    if kind == "ctld":
        def later() -> None:
            time.sleep(delay)
            facts["ctld_pid"] = localcluster.restart_ctld()
        restart = threading.Thread(target=later)
        restart.start()
    proc = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec),  # noqa: S603
                             "--detach", "--json", "--quiet"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kind == "cli":
        time.sleep(delay)
        proc.kill()
    out, err = proc.communicate(timeout=300)
    if restart is not None:
        restart.join(timeout=120)
    facts["cli_rc"] = proc.returncode
    if proc.returncode not in (0, -9):
        facts["cli_stderr"] = err[-2000:]
    with contextlib.suppress(ValueError):
        return str(json.loads(out)["run_id"]), facts
    return _new_run(repo, before, 10), facts


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
        with contextlib.suppress(ProcessLookupError, TypeError, ValueError):
            os.kill(int(rec["pid"]), signal.SIGKILL)  # it ended first: nothing to hit
        return {"hit_owner": rec.get("owner"), "hit_phase": rec.get("phase")}
    phase = _owner_record(repo, run_id).get("phase")
    _cli("cancel", run_id, cwd=repo)
    return {"hit_phase": phase}


def _right(kind: str, status: str | None, source: str | None, ended: bool,
           owner: str | None) -> bool:
    if kind in ("none", "cli", "ctld"):
        return status == "PASSED"
    if kind == "node":
        if owner == "agent":  # the agent held it when the node died: it goes on
            return (status, source) == ("PASSED", "live") and ended
        return (status == "CANCELLED" and not ended) or (status == "PASSED" and ended)
    if source == "live" and kind == "cancel":
        # a cancel that races the script's last line: the script may not have exited
        # yet when the stop came (CANCELLED), or had (PASSED); never PASSED unfinished
        return status == "CANCELLED" or (status == "PASSED" and ended)
    # rebuilt (or live, when the job ended before the hit)
    return (status == "PASSED") == ended and status in ("PASSED", "CANCELLED")


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
            "summary": report.get("summary"), "errors": report.get("errors", [])[:3],
            "log_ended": ended, "owner_at_end": view.get("owner"),
            "state_at_end": view.get("state"), "allocation_id": alloc,
            "steps_gone_s": gone, "steps_left": _steps(alloc) if gone is None else [],
            "allocation_alive": bool(alloc) and _slurm(
                "squeue", "-h", "-j", alloc, "-o", "%T").strip() == "RUNNING"}


def one_point(spec: Path, repo: Path, kind: str, delay: float,
              agent: bool = True) -> dict[str, Any]:
    """One detached run hit by ``kind`` after ``delay`` seconds; what came of it."""
    point: dict[str, Any] = {"kind": kind, "delay_s": round(delay, 2)}
    run_id, facts = _start(spec, repo, kind, delay, agent)
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
                            point["owner_at_end"])
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


def _point(specs: dict[str, Path], repo: Path, kind: str, delay: float,
           agent: bool) -> dict[str, Any]:
    if kind != "none":
        return one_point(specs["job"], repo, kind, delay, agent)
    run_id, facts = _attach_start(specs["attach"], repo, specs["attach"].with_suffix(".gate"))
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
        "wrong": sum(not r["right"] for r in settled),
        "unsettled_step0": sum(bool(r.get("unsettled_step0")) for r in results),
        "steps_left": sum(bool(r.get("steps_left")) for r in results),
        "allocation_dead_after": sum(not r.get("allocation_alive", True) for r in results
                                     if not r["never_started"]),
        "rebuilt": sum(r.get("source") == "rebuilt" for r in results),
        "never_started": sum(r["never_started"] for r in results),
        "by_kind": by_kind,
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


def _stop_at(text: str | None) -> float:
    if not text:
        return float("inf")
    now = datetime.now(UTC)
    hh, mm = (int(x) for x in text.split(":"))
    at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return time.monotonic() + (at - now).total_seconds()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--points", type=int, default=60)
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--until", help="stop starting points at HH:MM UTC")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    rng, stop = random.Random(args.seed), _stop_at(args.until)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    results: list[dict[str, Any]] = []
    floor = [_import_floor()]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-killpoints-") as tmp:
        root = Path(tmp)
        specs = {"job": _spec(cluster, root, "job", JOB),
                 "attach": _spec(cluster, root, "attach", ATTACH_JOB.format(
                     gate=root / "attach.gate"))}
        repo = root / "repo"
        extra: dict[str, Any] = {}
        try:
            warm = _cli("run", str(specs["job"]), "--json", "--quiet", cwd=repo)
            extra["warm_up"] = json.loads(warm.stdout).get("status") if warm.stdout else None
            for i in range(args.points):
                if time.monotonic() > stop:
                    break
                kind = KINDS[i % len(KINDS)]
                # every other node kill: a run with no agent (its supervisor runs the
                # job on the node, and its lease must end with it)
                agent = (i // len(KINDS)) % 2 == 0
                results.append(_point(specs, repo, kind, rng.uniform(0.0, DELAYS[kind]),
                                      agent))
                print(json.dumps(results[-1]), flush=True)
                if i % 12 == 11:
                    floor.append(_import_floor())
                _write(args.out, results, extra, floor, args.seed, t0)
        finally:
            _cli("release", str(specs["job"]), "--quiet", cwd=repo)
            left = _slurm("squeue", "-h", "-o", "%i %j").split("\n")
            extra["allocations_left_after_release"] = [
                ln for ln in left if "bench-killpoints" in ln]
            _write(args.out, results, extra, floor, args.seed, t0)
    print(json.dumps(json.loads(args.out.read_text())["summary"], indent=1))
    return 0


def _write(out: Path, results: list[dict[str, Any]], extra: dict[str, Any],
           floor: list[float], seed: int, t0: float) -> None:
    summary = summarize(results, {
        **extra, "cli_import_floor_s": _figures(floor),
        "slurm": _slurm("scontrol", "--version").strip(),
        "load_1min": round(os.getloadavg()[0], 2), "seed": seed,
        "minutes": round((time.monotonic() - t0) / 60, 1)})
    out.write_text(json.dumps({"summary": summary, "points": results}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
