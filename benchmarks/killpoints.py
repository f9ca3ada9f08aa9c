"""Kill points over a detached run's life (issue 39, item 6): is a verdict ever lost?

``python -m benchmarks.killpoints [--points N] [--seed S]`` (needs the local cluster:
it is brought up when it is not) detaches ``N`` runs of one persistent spec, one after
the other through one warm allocation. The job prints a line, runs a step of the
allocation for about 2 s (``srun --overlap``) and ends with ``end``. Each run is hit at
a random moment by one of:

- ``cli``: kill -9 of the ``run --detach`` command itself, before or after it returned;
- ``supervisor``: kill -9 of the run's supervisor (its owner);
- ``cancel``: ``slurm-fsm cancel``;
- ``none``: nothing (the live verdict, for comparison).

Then ``slurm-fsm wait`` must give a verdict, and it must be the right one:

- PASSED when the job's log ends with ``end`` and its owner lived to judge it, or its
  script had ended when its owner died (the rebuilt verdict must equal the live one);
- CANCELLED when the owner died or was told to stop while the script ran (a cancel
  that races the script's last line may find it still running: CANCELLED, or ended:
  PASSED; never PASSED for a script that did not finish);
- no step of the run left on the allocation once the verdict is given (only leases of
  live runs may remain), and the allocation alive.

The figures (verdicts lost, wrong, steps left, per kind) go to
``benchmarks/killpoints.json``. Figures, not pass/fail; docs/reliability.md cites them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localcluster import ClusterInfo

RESULTS = Path(__file__).with_name("killpoints.json")
KINDS = ("cli", "supervisor", "cancel", "none")
JOB = "#!/bin/bash\necho start\nsrun --overlap -n1 sleep 2\necho end\n"


def _cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def _steps(alloc: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-s", "-j", alloc, "-o", "%i %j"],  # noqa: S603
                         capture_output=True, text=True, timeout=60, check=False).stdout
    return [ln.split()[0] for ln in out.splitlines()
            if ln.strip() and not ln.split()[-1].startswith("fsm-lease.")
            and ln.split()[0].split(".")[-1].isdigit()]


def _spec(cluster: ClusterInfo, root: Path) -> Path:
    (root / "job.slurm").write_text(JOB)
    (root / "repo").mkdir()
    spec = root / "spec.json"
    spec.write_text(json.dumps({
        "script_path": str(root / "job.slurm"), "work_dir": str(root / "work"),
        "model_name": "kp", "workflow_type": "custom", "success_patterns": ["end"],
        "repo_root": str(root / "repo"), "alloc_time_limit": "01:00:00",
        "alloc_job_name": f"{cluster.account}-bench-killpoints-{os.getpid()}.persistent",
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1}}))
    return spec


def one_point(spec: Path, repo: Path, kind: str, delay: float) -> dict[str, Any]:
    """One detached run hit by ``kind`` after ``delay`` seconds; what came of it."""
    before = {r["run_id"] for r in json.loads(_cli("runs", "--all", "--json",
                                                   cwd=repo).stdout)}
    proc = subprocess.Popen([sys.executable, "-m", "slurm_fsm", "run", str(spec),  # noqa: S603
                             "--detach", "--json", "--quiet"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    doc: dict[str, Any] = {}
    if kind == "cli":
        time.sleep(delay)
        proc.kill()
    out, _ = proc.communicate(timeout=300)
    if out.strip():
        doc = json.loads(out)
    run_id = doc.get("run_id")
    if run_id is None:  # the CLI died before it printed: a new run, if it started one
        deadline = time.monotonic() + 10
        while run_id is None and time.monotonic() < deadline:
            new = [r["run_id"] for r in json.loads(_cli("runs", "--all", "--json",
                                                        cwd=repo).stdout)
                   if r["run_id"] not in before]
            run_id = new[0] if new else None
            time.sleep(0.2)
        if run_id is None:  # killed before it started a supervisor: nothing ran
            return {"kind": kind, "delay_s": round(delay, 2), "run_id": None,
                    "status": None, "source": None, "log_ended": False, "right": True,
                    "lost": False, "steps_left": [], "never_started": True}
    if kind == "supervisor":
        time.sleep(delay)
        pid = json.loads(_cli("runs", "--json", cwd=repo).stdout)[0]["pid"]
        with contextlib.suppress(ProcessLookupError):  # it ended first: nothing to hit
            os.kill(int(pid), signal.SIGKILL)
    elif kind == "cancel":
        time.sleep(delay)
        _cli("cancel", str(run_id), cwd=repo)
    waited = _cli("wait", str(run_id), "--json", "--timeout", "240", cwd=repo)
    reports = json.loads(waited.stdout) if waited.stdout.strip() else []
    report = reports[0] if isinstance(reports, list) and reports else {}
    log = Path(report.get("log_files", {}).get("stdout") or "/nonexistent")
    ended = log.exists() and log.read_text().rstrip().endswith("end")
    status = report.get("status")
    alloc = str(report.get("allocation_id") or "")
    left = _steps(alloc) if alloc else []
    source = report.get("report_source")
    if kind == "none" or kind == "cli":
        right = status == "PASSED"
    elif source == "live" and kind == "cancel":
        # a cancel that races the script's last line: the script may not have exited
        # yet when the stop came (CANCELLED), or had (PASSED); never PASSED unfinished
        right = status == "CANCELLED" or (status == "PASSED" and ended)
    else:  # rebuilt (or live, when the job ended before the hit)
        right = (status == "PASSED") == ended and status in ("PASSED", "CANCELLED")
    return {"kind": kind, "delay_s": round(delay, 2), "run_id": run_id, "status": status,
            "source": source, "log_ended": ended, "right": bool(right),
            "lost": "status" not in report, "steps_left": left,
            "never_started": False}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--points", type=int, default=40)
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-killpoints-") as tmp:
        root = Path(tmp)
        spec = _spec(cluster, root)
        repo = root / "repo"
        try:
            for i in range(args.points):
                kind = KINDS[i % len(KINDS)]
                delay = rng.uniform(0.0, 3.0) if kind == "cli" else rng.uniform(0.0, 4.0)
                results.append(one_point(spec, repo, kind, delay))
                print(json.dumps(results[-1]), flush=True)
        finally:
            _cli("release", str(spec), "--quiet", cwd=repo)
    by_kind = {k: Counter(("right" if r["right"] else "WRONG") + ("" if not r["lost"]
                          else "+LOST") for r in results if r["kind"] == k) for k in KINDS}
    summary = {"points": len(results), "lost": sum(r["lost"] for r in results),
               "wrong": sum(not r["right"] for r in results),
               "steps_left": sum(bool(r["steps_left"]) for r in results),
               "rebuilt": sum(r["source"] == "rebuilt" for r in results),
               "never_started": sum(r["never_started"] for r in results),
               "by_kind": {k: dict(v) for k, v in by_kind.items()},
               "cancel_raced_the_end": sum(r["kind"] == "cancel" and r["log_ended"]
                                           and r["status"] == "CANCELLED" for r in results),
               "slurm": subprocess.run(["scontrol", "--version"], capture_output=True,
                                       text=True, timeout=60, check=False).stdout.strip(),
               "load_1min": round(os.getloadavg()[0], 2), "seed": args.seed}
    args.out.write_text(json.dumps({"summary": summary, "points": results}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
