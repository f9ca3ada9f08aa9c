"""Many jobs at once in one warm allocation, on the local cluster's emulated GPUs.

``python -m benchmarks.packing`` (needs the local cluster: it is brought up when it
is not) measures, each in a warm allocation:

- **N at once** (N = 4): four 1-GPU jobs (``srun sleep T``) on a 4-GPU allocation,
  ``Allocation.run_many(specs, max_parallel=4)``, against one such job alone
  (target: at most 1.3x one job);
- **mixed queue**: 1-, 2- and 4-GPU jobs on an allocation of 2 nodes of 4 GPUs,
  ``run_many`` against taking turns (one ``Allocation.run`` after the other);
- **placement floor**: the same jobs' scripts started together with ``bash`` and the
  environment the persistent path exports (:func:`slurm_fsm.placement.script_env`),
  with no lock between them: what Slurm's step scheduler gives once runs overlap.

Runs are whole ``Executor`` runs; the state file's lock covers step 0 only (each
running job holds a lease), so ``run_many``'s runs overlap and the figure measures it.

Each allocation has 2 CPUs per GPU (the warm-up job asks ``cpus_per_task: 2``), and
each job's step prints its ``nproc``: the **CPUs each job got** (Slurm's count of the
step's CPUs, ``sacct`` AllocCPUS, and ``nproc``) are recorded from the last
``run_many`` of each part, as :func:`slurm_fsm.placement.cpu_share` gives them (in
proportion to the job's GPUs). ``nproc`` shows the confinement only on the
``cgroup`` configuration (``SLURM_FSM_LOCAL_CONFIG``; under ``task/none`` every step
sees the host's CPUs), and the host's CPUs cap it. The configuration is recorded. Results go to
``benchmarks/packing.json``; ``docs/packing.md`` gets the table and
``docs/img/packing.svg`` the chart (``--no-docs`` leaves them).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from slurm_fsm import Allocation, JobSpec, Status, SubprocessBackend
from slurm_fsm.placement import script_env
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "packing.json"
DOC = REPO / "docs" / "packing.md"
SVG = REPO / "docs" / "img" / "packing.svg"
TABLE_BEGIN = "<!-- packing-table:begin -->"
TABLE_END = "<!-- packing-table:end -->"
#: GPUs of the mixed queue's jobs (2 nodes x 4 GPUs = 8 GPUs; 16 GPU-jobs of work)
MIXED = (4, 2, 1, 1, 2, 4, 1, 1)
#: CPUs per GPU of the allocations (of a local node's 8 CPUs and 4 GPUs)
CPUS_PER_GPU = 2


def say(text: str) -> None:
    print(f"packing: {text}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, cluster: ClusterInfo, root: Path, job_s: float) -> None:
        self.cluster = cluster
        self.root = root
        self.job_s = job_s
        self.backend = SubprocessBackend()
        self.name = f"{cluster.account}-bench-packing-{os.getpid()}.persistent"

    def spec(self, repo: str, tag: str, gpus: int, *, nodes: int = 1, tasks: int = 1,
             seconds: float | None = None, cpus_per_task: int | None = None) -> JobSpec:
        folder = self.root / repo / tag
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "job.slurm"
        sleep = self.job_s if seconds is None else seconds
        script.write_text("#!/bin/bash\nsrun bash -c 'echo \"share "
                          "step=$SLURM_JOB_ID.$SLURM_STEP_ID nproc=$(nproc)\"; "
                          f"sleep {sleep:g}'\n")
        return JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(folder / "work"),
            "model_name": tag, "workflow_type": "custom",
            "repo_root": str(self.root / repo), "alloc_job_name": self.name,
            "alloc_time_limit": "00:30:00",
            "slurm_params": {"partition": self.cluster.partition,
                             "account": self.cluster.account, "nodes": nodes,
                             "gpus_per_node": gpus, "ntasks_per_node": tasks,
                             **({"cpus_per_task": cpus_per_task} if cpus_per_task else {})},
        })

    def warm(self, repo: str, nodes: int) -> Allocation:
        """An allocation of ``nodes`` x 4 GPUs and 2 CPUs per GPU, made by a job that
        asks them all."""
        alloc = Allocation(self.root / repo, self.backend)
        r = alloc.run(self.spec(repo, "warm", GPUS_PER_NODE, nodes=nodes,
                                tasks=GPUS_PER_NODE, seconds=0, cpus_per_task=CPUS_PER_GPU))
        if r.status is not Status.PASSED:
            raise RuntimeError(f"warm-up run: {r.render_text()}")
        return alloc

    def floor(self, alloc: Allocation, specs: Sequence[JobSpec]) -> float:
        """The specs' scripts started together with their placement env: no lock."""
        state = alloc.state()
        assert state is not None
        info = self.backend.query_job(state.job_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.cluster.env)
        t0 = time.monotonic()
        procs = [subprocess.Popen(["bash", str(s.script_path)], env={  # noqa: S603
            **env, **script_env(info, s.slurm_params, s.script_path,
                                alloc_cpus_per_node=state.cpus_per_node,
                                alloc_gpus_per_node=state.gpus_per_node)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for s in specs]
        for p in procs:
            if p.wait(timeout=600) != 0:
                raise RuntimeError(f"a script exited {p.returncode}")
        return time.monotonic() - t0


def timed(fn: Callable[[], object]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def _all_passed(reports: Sequence[Any]) -> None:
    bad = [r for r in reports if r.status is not Status.PASSED]
    if bad:
        raise RuntimeError(f"a run did not pass: {bad[0].render_text()}")


def shares(specs: Sequence[JobSpec], reports: Sequence[Any]) -> list[dict[str, Any]]:
    """The CPUs each job's step got: Slurm's count (``sacct`` AllocCPUS of the step)
    and what its tasks saw (``nproc``), with the GPUs it asked."""
    steps: list[tuple[JobSpec, str, list[int]]] = []
    for s, r in zip(specs, reports, strict=True):
        seen = [dict(w.split("=", 1) for w in line.split()[1:])
                for line in r.log_tail if line.startswith("share ")]
        if not seen:
            raise RuntimeError(f"no share line in the log of {s.model_name}")
        steps.append((s, seen[0]["step"], [int(x["nproc"]) for x in seen]))
    job_ids = sorted({step.split(".")[0] for _, step, _ in steps})
    cpus: dict[str, str] = {}
    for _ in range(50):  # accounting records a step once it ended: give it a moment
        out = subprocess.run(["sacct", "-n", "-P", "-j", ",".join(job_ids),  # noqa: S603
                              "--format=JobID,AllocCPUS"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
        cpus = dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
        if all(step in cpus for _, step, _ in steps):
            break
        time.sleep(0.2)
    return [{"job": s.model_name, "gpus": s.slurm_params.gpus_per_node or 0,
             "tasks": s.slurm_params.ntasks_per_node or 1,
             "cpus": int(cpus[step]) if cpus.get(step, "").isdigit() else None,
             "nproc": nproc} for s, step, nproc in steps]


def measure(b: Bench, reps: int, n: int) -> dict[str, Any]:
    rows: dict[str, list[float]] = {}
    got: dict[str, list[dict[str, Any]]] = {}

    def run_many(alloc: Allocation, specs: Sequence[JobSpec], part: str) -> None:
        reports = alloc.run_many(specs, max_parallel=len(specs))
        _all_passed(reports)
        got[part] = shares(specs, reports)

    alloc = b.warm("n-at-once", 1)
    one = b.spec("n-at-once", "one", 1)
    many = [b.spec("n-at-once", f"job{i}", 1) for i in range(n)]
    for rep in range(reps):
        say(f"N at once, rep {rep + 1}/{reps}")
        rows.setdefault("one_job_s", []).append(timed(lambda: _all_passed([alloc.run(one)])))
        rows.setdefault("n_run_many_s", []).append(
            timed(lambda: run_many(alloc, many, "n_at_once")))
        rows.setdefault("n_floor_s", []).append(b.floor(alloc, many))
    alloc.release()
    mixed_alloc = b.warm("mixed", 2)
    mixed = [b.spec("mixed", f"m{i}-{g}gpu", g, tasks=g) for i, g in enumerate(MIXED)]
    for rep in range(reps):
        say(f"mixed queue, rep {rep + 1}/{reps}")
        rows.setdefault("mixed_turns_s", []).append(
            timed(lambda: _all_passed([mixed_alloc.run(s) for s in mixed])))
        rows.setdefault("mixed_run_many_s", []).append(
            timed(lambda: run_many(mixed_alloc, mixed, "mixed")))
        rows.setdefault("mixed_floor_s", []).append(b.floor(mixed_alloc, mixed))
    mixed_alloc.release()
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "n": n, "job_s": b.job_s, "reps": reps, "mixed_gpus": list(MIXED),
        "samples": rows, "median": med, "cpus_per_gpu": CPUS_PER_GPU, "shares": got,
        "ratio_run_many": med["n_run_many_s"] / med["one_job_s"],
        "ratio_floor": med["n_floor_s"] / med["one_job_s"],
        "mixed_speedup_run_many": med["mixed_turns_s"] / med["mixed_run_many_s"],
        "mixed_speedup_floor": med["mixed_turns_s"] / med["mixed_floor_s"],
    }


def table(res: dict[str, Any]) -> str:
    m = res["median"]
    n = res["n"]
    one = m["one_job_s"]
    lines = [
        f"Median of {res['reps']} on the local cluster (jobs `srun sleep {res['job_s']:g}`, "
        f"warm allocation; {res.get('locking', 'lock: not recorded')}; configuration "
        f"`{res.get('config', 'default')}`; load average at the end "
        f"{res.get('load_1min', 'not recorded')} on {os.cpu_count()} CPUs). "
        "The floor is the scripts alone (no step 0, pre-flight or monitor), so it can "
        "beat one whole run.",
        "",
        "| what | seconds | vs one job / vs taking turns |",
        "|---|---:|---:|",
        f"| one 1-GPU job (`Allocation.run`) | {one:.2f} | 1.00x |",
        f"| {n} 1-GPU jobs, `run_many(max_parallel={n})` | {m['n_run_many_s']:.2f} | "
        f"{res['ratio_run_many']:.2f}x (target <= 1.3x) |",
        f"| {n} 1-GPU jobs, scripts at once (placement floor, no lock) | "
        f"{m['n_floor_s']:.2f} | {res['ratio_floor']:.2f}x |",
        f"| mixed queue {list(res['mixed_gpus'])} GPUs on 2 nodes of 4, taking turns | "
        f"{m['mixed_turns_s']:.2f} | 1.00x |",
        f"| mixed queue, `run_many` | {m['mixed_run_many_s']:.2f} | "
        f"{res['mixed_speedup_run_many']:.2f}x faster |",
        f"| mixed queue, scripts at once (placement floor, no lock) | "
        f"{m['mixed_floor_s']:.2f} | {res['mixed_speedup_floor']:.2f}x faster |",
    ]
    if res.get("shares"):
        lines += [
            "",
            f"The CPUs each job got in the last `run_many` (configuration "
            f"`{res.get('config', 'default')}`; allocations of {res['cpus_per_gpu']} CPUs "
            "per GPU; CPUs: Slurm's count of the job's step, `sacct` AllocCPUS; `nproc`: "
            "what each task saw, at most the host's CPUs):",
            "",
            "| part | job | GPUs | tasks | CPUs | nproc |",
            "|---|---|---:|---:|---:|---|",
        ]
        for part, rows in res["shares"].items():
            for row in rows:
                lines.append(f"| {part.replace('_', ' ')} | {row['job']} | {row['gpus']} | "
                             f"{row['tasks']} | {row['cpus']} | "
                             f"{', '.join(str(x) for x in row['nproc'])} |")
    return "\n".join(lines)


def chart(res: dict[str, Any]) -> str:
    from matplotlib.figure import Figure

    m = res["median"]
    labels = ["one job", f"{res['n']} jobs\nrun_many", f"{res['n']} jobs\nfloor",
              "mixed\nturns", "mixed\nrun_many", "mixed\nfloor"]
    keys = ["one_job_s", "n_run_many_s", "n_floor_s", "mixed_turns_s", "mixed_run_many_s",
            "mixed_floor_s"]
    colours = ["#8c8c8c", "#1f77b4", "#2ca02c", "#8c8c8c", "#1f77b4", "#2ca02c"]
    fig = Figure(figsize=(7.2, 3.0), layout="constrained")
    ax = fig.add_subplot()
    bars = ax.bar(labels, [m[k] for k in keys], color=colours)
    ax.bar_label(bars, fmt="%.1f s", fontsize=8)
    ax.set_ylabel("seconds (median)")
    ax.set_title("Many jobs at once: wall time, whole runs (run_many) and placement "
                 "alone (floor)", loc="left", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "slurm_fsm",
                                "font.family": ["DejaVu Sans", "sans-serif"]}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def update_docs(res: dict[str, Any]) -> None:
    text = DOC.read_text()
    begin, end = text.index(TABLE_BEGIN), text.index(TABLE_END)
    DOC.write_text(text[: begin + len(TABLE_BEGIN)] + "\n" + table(res) + "\n" + text[end:])
    SVG.parent.mkdir(parents=True, exist_ok=True)
    SVG.write_text(chart(res))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n", type=int, default=GPUS_PER_NODE)
    p.add_argument("--job-s", type=float, default=4.0, help="seconds each job's step sleeps")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--render-docs", action="store_true",
                   help="only redraw docs/packing.md and the chart from --out")
    args = p.parse_args(argv)
    if args.render_docs:
        update_docs(json.loads(args.out.read_text()))
        return 0
    if not 1 <= args.n <= GPUS_PER_NODE:
        p.error(f"--n: 1..{GPUS_PER_NODE}")
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-packing-") as tmp:
        res = measure(Bench(cluster, Path(tmp), args.job_s), args.reps, args.n)
    res["locking"] = ("runs overlap: the state file's lock covers step 0 only, each "
                      "running job holds a lease")
    res["config"] = cluster.config_name
    res["load_1min"] = round(os.getloadavg()[0], 2)  # the machine may be shared
    args.out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(table(res))
    if not args.no_docs:
        update_docs(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
