"""``release`` as slurmctld restarts (issue 39's campaign: one allocation was left after
``release`` on 24.11 after a ``ctld`` point): ``python -m benchmarks.releaserace
[--rounds N] [--seed S] [--out F]``.

Each round on the local cluster (brought up when it is not): a persistent allocation
made warm by one foreground run of a job that prints ``end``, then ``slurm-fsm release``
started at a random moment around a controller restart
(:func:`slurm_fsm_dev.localcluster.restart_ctld`): the restart ``lag`` s after the
release started (``lag`` uniform in [-4, 6]: negative, the release starts after it).
What ``release`` said (exit code, its last lines) and the allocation's state right after
and 15 s after it returned; an allocation still PENDING or RUNNING then is a leak (it is
then cancelled with ``scancel``, so the next round starts clean). A figure, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from slurm_fsm_dev import localcluster

JOB = "#!/bin/bash\necho end\n"


def _cli(*args: str, cwd: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurm_fsm", *args], cwd=cwd,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def _state(alloc: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", alloc, "-o", "%T"],  # noqa: S603
                          capture_output=True, text=True, timeout=60,
                          check=False).stdout.strip()


def _nodes_answer(timeout: float = 90) -> None:
    """Until no node is ``unknown`` or not responding (after a restart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
        if out.strip() and not any(s.startswith("unk") or s.endswith("*")
                                   for s in out.split()):
            return
        time.sleep(1)


def one_round(spec: Path, repo: Path, lag: float) -> dict[str, Any]:
    warm = _cli("run", str(spec), "--json", "--quiet", cwd=repo)
    report = json.loads(warm.stdout) if warm.stdout.strip() else {}
    alloc = str(report.get("allocation_id") or "")
    point: dict[str, Any] = {"lag_s": round(lag, 2), "warm": report.get("status"),
                             "allocation_id": alloc}
    if not alloc:
        return {**point, "warm_stderr": warm.stderr[-1000:]}
    facts: dict[str, Any] = {}

    def restart() -> None:
        time.sleep(max(0.0, lag))
        facts["ctld_pid"] = localcluster.restart_ctld()

    thread = threading.Thread(target=restart)
    thread.start()
    time.sleep(max(0.0, -lag))
    t0 = time.monotonic()
    done = _cli("release", str(spec), cwd=repo)
    point.update(release_rc=done.returncode, release_s=round(time.monotonic() - t0, 2),
                 release_said=(done.stdout + done.stderr)[-1500:],
                 state_after=_state(alloc))
    thread.join(timeout=180)
    time.sleep(15)
    point["state_15s_after"] = _state(alloc)
    point["leaked"] = point["state_15s_after"] in ("RUNNING", "PENDING")
    if point["leaked"]:
        subprocess.run(["scancel", alloc], timeout=60, check=False)  # noqa: S603
    _nodes_answer()
    return {**point, **facts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seed", type=int, default=39)
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("releaserace.json"))
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-releaserace-") as tmp:
        root = Path(tmp)
        (root / "job.slurm").write_text(JOB)
        (root / "repo").mkdir()
        spec = root / "job.json"
        spec.write_text(json.dumps({
            "script_path": str(root / "job.slurm"), "work_dir": str(root / "work"),
            "model_name": "rr", "workflow_type": "custom", "success_patterns": ["end"],
            "repo_root": str(root / "repo"), "alloc_time_limit": "00:30:00",
            "alloc_job_name": f"{cluster.account}-bench-releaserace-{os.getpid()}.persistent",
            "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                             "nodes": 1}}))
        for _ in range(args.rounds):
            points.append(one_round(spec, root / "repo", rng.uniform(-4.0, 6.0)))
            print(json.dumps(points[-1]), flush=True)
            summary = {"rounds": len(points), "leaked": sum(bool(x.get("leaked"))
                                                            for x in points),
                       "release_failed": sum(x.get("release_rc", 0) != 0 for x in points),
                       "slurm": subprocess.run(["scontrol", "--version"],
                                               capture_output=True, text=True, timeout=60,
                                               check=False).stdout.strip()}
            args.out.write_text(json.dumps({"summary": summary, "points": points},
                                           indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
