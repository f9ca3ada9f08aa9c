"""The hand-off at expiry: today's cold replacement against the warm successor.

``python -m benchmarks.handoff`` (needs the local cluster with pyxis: it is brought up
when it is not) runs, for each mode, a stream of short jobs (``srun true``) in a
container whose set-up is real (a pyxis import and two ``pip install`` s of a local
repo), across ``--expiries`` hand-offs:

- **today** (``warm_successor: false``): the allocation is replaced when 5 minutes or
  less are left; the next job pays the set-up (salloc, import, installs);
- **handoff** (``warm_successor: true``): the successor is queued when the time left
  nears the job + lead time + margin, set up by the detached warmer while the old
  allocation serves, and switched to.

Expiry is emulated, not waited for: before each hand-off the allocation's limit is
lowered with ``scontrol update TimeLimit`` (root on the local cluster) so that 333 to
393 s are left (a successor is due; the job fits; today nothing happens), a job runs,
the stream pauses ``--gap`` seconds (the warmer works meanwhile), then the limit is
lowered to 240 to 300 s left (today: Expiring, a cold replacement). Recorded per job:
its status, its step 0 seconds (``timings.step0_s``), its path; per mode: jobs not
PASSED, the longest step 0 at a hand-off, the most allocations of the checkout alive at
once (``squeue`` after every job), and the allocations made. Results go to
``benchmarks/handoff.json`` and the table into ``docs/benchmarks.md`` (``--no-docs``
leaves it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.doctable import splice_table
from slurm_fsm import JobSpec, Status, SubprocessBackend
from slurm_fsm.executor import Executor
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localpyxis import make_install_repo

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "handoff.json"
DOC = REPO / "docs" / "benchmarks.md"
TABLE_BEGIN = "<!-- handoff-table:begin -->"
TABLE_END = "<!-- handoff-table:end -->"
#: 333-393 s left: a successor is due (job 30 s + lead >= 61 s + margin 300 s >= 391 s),
#: the job still fits (>= 330 s), today's path reuses (> 300 s)
DUE_S = 333
#: 240-300 s left: expiring (<= 300 s): today's path replaces the allocation
EXPIRING_S = 240


def say(text: str) -> None:
    print(f"handoff: {text}", file=sys.stderr, flush=True)


def slurm(*argv: str) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,  # noqa: S603
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def elapsed_s(job_id: str) -> int:
    out = slurm("squeue", "-j", job_id, "-h", "-o", "%M").strip()
    days, _, rest = out.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def left_to(job_id: str, at_least_s: int) -> None:
    """Lower the allocation's limit (whole minutes, as Slurm keeps it) so that between
    ``at_least_s`` and ``at_least_s + 60`` seconds are left."""
    minutes = -(-(elapsed_s(job_id) + at_least_s) // 60)
    # TimeMin first: a successor asked with --time-min refuses a lower limit
    slurm("scontrol", "update", f"JobId={job_id}", "TimeMin=1", f"TimeLimit={minutes}")


def alive(names: tuple[str, ...], user: str) -> list[str]:
    out = slurm("squeue", "-u", user, "-h", "-o", "%i %j %T")
    return [line.split()[0] for line in out.splitlines()
            if line.split()[1] in names and line.split()[2] in ("RUNNING", "PENDING")]


def run_mode(mode: str, cluster: localcluster.ClusterInfo, image: Path, root: Path,
             expiries: int, gap_s: float) -> dict[str, Any]:
    name = f"{cluster.account}-bench-handoff-{mode}-{os.getpid()}.persistent"
    folder = root / mode
    repo = make_install_repo(folder / "repo")
    script = folder / "job.slurm"
    script.write_text("#!/bin/bash\nsrun true\necho done\n")
    data = {
        "script_path": str(script), "work_dir": str(folder / "work"),
        "model_name": "bench", "workflow_type": "pytest", "repo_root": str(repo),
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1},
        "alloc_job_name": name, "alloc_time_limit": "00:30:00",
        "docker_image": str(image), "container_name": f"bench-handoff-{mode}-{os.getpid()}",
        "container_mounts": [f"{repo}:{repo}"], "success_patterns": ["done"],
        "expected_duration_seconds": 30, "warm_successor": mode == "handoff",
    }
    spec = JobSpec.from_dict(data)
    jobs: list[dict[str, Any]] = []
    most_alive = 0
    made: set[str] = set()

    def job(label: str) -> dict[str, Any]:
        nonlocal most_alive
        t = time.monotonic()
        report = Executor(spec, SubprocessBackend()).run()
        row = {"label": label, "status": report.status.name,
               "step0_s": round(report.timings.get("step0_s", 0.0), 2),
               "wall_s": round(time.monotonic() - t, 2), "path": report.path,
               "allocation": report.allocation_id}
        ids = alive((name, name + "-b"), cluster.user)
        most_alive = max(most_alive, len(ids))
        made.update(ids)
        if report.allocation_id:
            made.add(report.allocation_id)
        jobs.append(row)
        say(f"{mode} {label}: {row['status']} step0 {row['step0_s']} s {row['path']}")
        return row

    first = job("cold start")
    current = first["allocation"]
    for k in range(expiries):
        left_to(current, DUE_S)
        job(f"hand-off {k + 1}: {DUE_S // 60}-{DUE_S // 60 + 1} min left")
        time.sleep(gap_s)
        current = jobs[-1]["allocation"]
        left_to(current, EXPIRING_S)
        row = job(f"hand-off {k + 1}: 4-5 min left")
        current = row["allocation"]
        job(f"hand-off {k + 1}: after")
        current = jobs[-1]["allocation"]
    release = dict(data, release_allocation=True)
    Executor(JobSpec.from_dict(release), SubprocessBackend()).run()
    for job_id in alive((name, name + "-b"), cluster.user):
        slurm("scancel", job_id)
    at_handoff = [j["step0_s"] for j in jobs[1:]]
    return {
        "mode": mode, "jobs": jobs,
        "not_passed": sum(1 for j in jobs if j["status"] != Status.PASSED.name),
        "longest_step0_at_handoff_s": max(at_handoff) if at_handoff else None,
        "cold_start_step0_s": first["step0_s"],
        "most_allocations_alive": most_alive,
        "allocations_made": len(made),
    }


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| mode | jobs | not PASSED | cold start step 0 (s) | longest step 0 at a "
            "hand-off (s) | most allocations alive | allocations made |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r['mode']} | {len(r['jobs'])} | {r['not_passed']} | "
                    f"{r['cold_start_step0_s']} | {r['longest_step0_at_handoff_s']} | "
                    f"{r['most_allocations_alive']} | {r['allocations_made']} |")
    return "\n".join(rows) + "\n"


def write_doc(results: list[dict[str, Any]]) -> None:
    if not splice_table(DOC, TABLE_BEGIN, TABLE_END, table(results)):
        say(f"{DOC} has no {TABLE_BEGIN}: table not written")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handoff")
    parser.add_argument("--expiries", type=int, default=2)
    parser.add_argument("--gap", type=float, default=20.0,
                        help="seconds between the job at 6 and the job at 5 minutes left")
    parser.add_argument("--modes", default="today,handoff")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    if cluster.containers is None:
        say(f"the local cluster has no containers: {cluster.containers_problem}")
        return 1
    image = cluster.containers.images["python"]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-handoff-") as tmp:
        for mode in args.modes.split(","):
            results.append(run_mode(mode, cluster, Path(image), Path(tmp), args.expiries,
                                    args.gap))
    RESULTS.write_text(json.dumps({"results": results}, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    if not args.no_docs:
        write_doc(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
