"""Many tiny jobs through ``run_many`` against the same steps started raw (issue 28).

``python -m benchmarks.steprate`` (needs the local cluster: it is brought up when it is
not) measures, in one warm allocation of 2 nodes x 4 GPUs:

- **raw**: ``--jobs`` (24) steps ``srun --jobid=J --exact -N1 -n1 --gpus-per-node=1
  true``, ``--parallel`` (8) at once, started from a thread pool with no lock and no
  question to Slurm in between: Slurm's step-creation rate is the floor;
- **run_many**: the same ``--jobs`` 1-GPU jobs (each a script ``srun true``) through
  ``Allocation.run_many(specs, max_parallel=--parallel)``: whole runs (step 0, the
  pre-flight, the script, the monitor, the allocation-end check).

The ratio run_many / raw is the figure (target: at most 1.5x). The Slurm commands
``run_many`` issued are counted (the backend's runner records them, as the demo does:
the script's own ``srun`` and the detached ``salloc`` are not the backend's, so not
counted) and given per run, with the wall time each kind took: a profile of the work
per run that is not the job's own step. Results go to ``benchmarks/steprate.json``;
``docs/steprate.md`` gets the table (``--no-docs`` leaves it). Figures, not pass/fail.

``--split-cpus`` measures the same on a machine split in two, as a cluster is: the local
cluster's daemons (slurmctld, slurmdbd, MariaDB, munged, every slurmd, and so every
step's slurmstepd they start from then on) on the first CPU, this process and all it
starts (the orchestrator, the guards and scripts, the ``srun`` and ``squeue`` clients:
the login node) on the second; the affinities are given back at the end. Results go to
``benchmarks/steprate-split.json`` and the second table of ``docs/steprate.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slurm_fsm import Allocation, JobSpec, Status, SubprocessBackend, scriptguard, slurmcli
from slurm_fsm.subprocess_backend import CommandResult, LocalLease, run_command
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "steprate.json"
SPLIT_RESULTS = REPO / "benchmarks" / "steprate-split.json"
DOC = REPO / "docs" / "steprate.md"
TABLE_BEGIN = "<!-- steprate-table:begin -->"
TABLE_END = "<!-- steprate-table:end -->"
SPLIT_BEGIN = "<!-- steprate-split:begin -->"
SPLIT_END = "<!-- steprate-split:end -->"
NODES = 2


def say(text: str) -> None:
    print(f"steprate: {text}", file=sys.stderr, flush=True)


class Recorder:
    """The backend's Slurm commands: how many of each kind and the seconds they took."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.examples: dict[str, str] = {}

    @staticmethod
    def kind(argv: Sequence[str]) -> str:
        name = os.path.basename(argv[0]) if argv else "?"
        if name == "scontrol" and len(argv) > 2:
            return f"scontrol {argv[1]} {argv[2]}"
        if name == "squeue" and ("-s" in argv or "--steps" in argv):
            return "squeue -s"
        return name

    def runner(self, argv: Sequence[str], timeout_s: float,
               env: Mapping[str, str]) -> CommandResult:
        result = run_command(argv, timeout_s, env)
        k = self.kind(argv)
        with self.lock:
            self.count[k] += 1
            self.seconds[k] += result.seconds
            self.examples.setdefault(k, shlex.join(argv))
        return result

    def reset(self) -> None:
        with self.lock:
            self.count.clear()
            self.seconds.clear()


class CountingBackend(SubprocessBackend):
    """The backend whose lease steps are counted too (their ``srun`` is a ``Popen`` of
    its own, not the runner's): ``srun (lease)`` in the counts."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(runner=recorder.runner)
        self.recorder = recorder

    def start_lease(self, job_id: str, name: str, timeout_s: float = 60.0) -> LocalLease:
        t0 = time.monotonic()
        lease = super().start_lease(job_id, name, timeout_s)
        with self.recorder.lock:
            self.recorder.count["srun (lease)"] += 1
            self.recorder.seconds["srun (lease)"] += time.monotonic() - t0
            self.recorder.examples.setdefault(
                "srun (lease)", shlex.join(slurmcli.srun_lease_argv(job_id, name)))
        return lease


class Bench:
    def __init__(self, cluster: ClusterInfo, root: Path) -> None:
        self.cluster = cluster
        self.root = root
        self.recorder = Recorder()
        self.backend = CountingBackend(self.recorder)
        self.name = f"{cluster.account}-bench-steprate-{os.getpid()}.persistent"

    def spec(self, tag: str, gpus: int, *, nodes: int = 1, tasks: int = 1,
             body: str = "srun true") -> JobSpec:
        folder = self.root / "steprate" / tag
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "job.slurm"
        script.write_text(f"#!/bin/bash\n{body}\n")
        return JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(folder / "work"),
            "model_name": tag, "workflow_type": "custom",
            "repo_root": str(self.root / "steprate"), "alloc_job_name": self.name,
            "alloc_time_limit": "00:30:00",
            "slurm_params": {"partition": self.cluster.partition,
                             "account": self.cluster.account, "nodes": nodes,
                             "gpus_per_node": gpus, "ntasks_per_node": tasks},
        })

    def warm(self) -> Allocation:
        alloc = Allocation(self.root / "steprate", self.backend)
        r = alloc.run(self.spec("warm", GPUS_PER_NODE, nodes=NODES, tasks=GPUS_PER_NODE,
                                body="srun true"))
        if r.status is not Status.PASSED:
            raise RuntimeError(f"warm-up run: {r.render_text()}")
        return alloc

    def raw(self, job_id: str, jobs: int, parallel: int, how: str = "raw") -> float:
        """``jobs`` 1-GPU steps, ``parallel`` at once, no lock, no question between.
        ``how``: ``raw`` (the ``srun`` itself), ``script`` (the bare script: ``bash -c
        'srun ...'``), ``guarded`` (the bare script under its guard, the lean one, as a
        run starts it here) or ``guarded_python`` (under the Python guard, as on a host
        without ``setpriv --pdeathsig``): the floor of a run's script without the
        orchestrator."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.cluster.env)
        argv = ["srun", f"--jobid={job_id}", "--exact", "-N1", "-n1", "--gpus-per-node=1",
                "true"]
        if how != "raw":
            argv = ["bash", "-c", shlex.join(argv)]
        if how in ("guarded", "guarded_python"):  # the guard a run's script gets
            argv = scriptguard.command(os.getpid(), argv, python=sys.executable,
                                       lean=how == "guarded")

        def one(_i: int) -> None:
            p = subprocess.run(argv, env=env, capture_output=True, text=True,  # noqa: S603
                               timeout=300, check=False)
            if p.returncode != 0:
                raise RuntimeError(f"{how} step exited {p.returncode}: {p.stderr.strip()}")

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(one, range(jobs)))
        return time.monotonic() - t0

    def bare(self, job_id: str) -> float:
        """The bare script of one job: ``bash -c 'srun ... true'`` in the allocation, its
        one 1-GPU step and nothing else."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.cluster.env)
        step = shlex.join(["srun", f"--jobid={job_id}", "--exact", "-N1", "-n1",
                           "--gpus-per-node=1", "true"])
        t0 = time.monotonic()
        p = subprocess.run(["bash", "-c", step], env=env, capture_output=True,  # noqa: S603
                           text=True, timeout=300, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"bare script exited {p.returncode}: {p.stderr.strip()}")
        return time.monotonic() - t0


def machine_cpu_s() -> float:
    """The CPU seconds every process of this machine has used since boot (``/proc/stat``:
    user, nice, system, irq, softirq): slurmctld, slurmd, the steps and the runs alike."""
    with open("/proc/stat", encoding="ascii") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # gone
        return []


def _pin(pids: Sequence[int], cpu: int) -> dict[int, set[int]]:
    """Every thread of ``pids`` on ``cpu``; the affinity each had, by thread id. Listed
    again until a pass finds no thread left to pin (a thread started by one not yet
    pinned would keep its CPUs; one started by a pinned thread inherits ``cpu``)."""
    before: dict[int, set[int]] = {}
    for _ in range(10):
        new = [t for pid in pids for t in _threads(pid) if t not in before]
        if not new:
            break
        for tid in new:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                mask = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, {cpu})
                before[tid] = mask
    return before


@contextlib.contextmanager
def split_cpus() -> Iterator[dict[str, Any]]:
    """The local cluster's daemons (every thread) on this process's first CPU, this
    process on its second: what runs where, for the results. At the end every daemon
    thread gets its CPUs back (one started meanwhile: its daemon's)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"steprate: --split-cpus needs 2 CPUs, this process may use {cpus}")
    cluster_cpu, login_cpu = cpus[0], cpus[1]
    daemons = localcluster.daemon_pids()
    if not any(name.startswith("slurmd") for name in daemons) or "slurmctld" not in daemons:
        raise SystemExit(f"steprate: --split-cpus: no slurmctld or slurmd found ({daemons})")
    before: dict[int, set[int]] = {}
    try:
        before = _pin(list(daemons.values()), cluster_cpu)
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {login_cpu})  # threads and children made from now on
        try:
            yield {"cluster_cpu": cluster_cpu, "login_cpu": login_cpu,
                   "daemons": sorted(daemons)}
        finally:
            os.sched_setaffinity(0, mine)
    finally:
        for pid in daemons.values():
            for tid in _threads(pid):
                with contextlib.suppress(OSError, KeyError):  # gone; a daemon never pinned
                    os.sched_setaffinity(tid, before.get(tid) or before[pid])


def measure_single(b: Bench, alloc: Allocation, job_id: str, reps: int) -> dict[str, Any]:
    """One warm run alone (``Allocation.run``) against its bare script, ``reps`` times
    each, back to back; the commands of one run counted."""
    spec = b.spec("single", 1)
    bare: list[float] = []
    run: list[float] = []
    counts: dict[str, int] = {}
    for _ in range(reps):
        bare.append(b.bare(job_id))
        b.recorder.reset()
        t0 = time.monotonic()
        r = alloc.run(spec)
        run.append(time.monotonic() - t0)
        if r.status is not Status.PASSED:
            raise RuntimeError(f"a single run did not pass: {r.render_text()}")
        counts = dict(b.recorder.count)
    mb, mr = statistics.median(bare), statistics.median(run)
    return {"bare_s": bare, "run_s": run, "median_bare_s": mb, "median_run_s": mr,
            "extra_s": mr - mb, "extra_in_bare_scripts": (mr - mb) / mb,
            "commands": dict(sorted(counts.items()))}


def measure(b: Bench, reps: int, jobs: int, parallel: int) -> dict[str, Any]:
    rows: dict[str, list[float]] = {"raw_s": [], "script_s": [], "guarded_s": [],
                                    "guarded_python_s": [], "run_many_s": []}
    cpu: dict[str, list[float]] = {k: [] for k in rows}  # the machine's CPU seconds
    alloc = b.warm()
    state = alloc.state()
    assert state is not None
    specs = [b.spec(f"job{i}", 1) for i in range(jobs)]
    counts: list[dict[str, int]] = []
    seconds: list[dict[str, float]] = []
    timings: defaultdict[str, list[float]] = defaultdict(list)
    try:
        for rep in range(reps):
            say(f"rep {rep + 1}/{reps}: raw")
            for how in ("raw", "script", "guarded", "guarded_python"):  # the floor
                c0 = machine_cpu_s()
                rows[f"{how}_s"].append(b.raw(state.job_id, jobs, parallel, how))
                cpu[f"{how}_s"].append(machine_cpu_s() - c0)
            say(f"rep {rep + 1}/{reps}: run_many")
            b.recorder.reset()
            c0 = machine_cpu_s()
            t0 = time.monotonic()
            reports = alloc.run_many(specs, max_parallel=parallel)
            rows["run_many_s"].append(time.monotonic() - t0)
            cpu["run_many_s"].append(machine_cpu_s() - c0)
            bad = [r for r in reports if r.status is not Status.PASSED]
            if bad:
                raise RuntimeError(f"a run did not pass: {bad[0].render_text()}")
            counts.append(dict(b.recorder.count))
            seconds.append(dict(b.recorder.seconds))
            for r in reports:
                for k, v in r.timings.items():
                    timings[k].append(v)
        say("single warm runs against the bare script")
        single = measure_single(b, alloc, state.job_id, max(reps, 5))
    finally:
        alloc.release()
    med = {k: statistics.median(v) for k, v in rows.items()}
    last = counts[-1]
    return {
        "jobs": jobs, "parallel": parallel, "reps": reps, "nodes": NODES,
        "gpus_per_node": GPUS_PER_NODE, "samples": rows, "median": med,
        "cpu_samples": cpu, "cpu_median": {k: statistics.median(v) for k, v in cpu.items()},
        "ratio": med["run_many_s"] / med["raw_s"],
        "commands_per_run": {k: v / jobs for k, v in sorted(last.items())},
        "command_total_per_run": sum(last.values()) / jobs,
        "command_seconds_per_run": {k: round(v / jobs, 4)
                                    for k, v in sorted(seconds[-1].items())},
        "command_examples": dict(sorted(b.recorder.examples.items())),
        "run_timings_median_s": {k: round(statistics.median(v), 4)
                                 for k, v in sorted(timings.items())},
        "ratios": [m / r for m, r in zip(rows["run_many_s"], rows["raw_s"], strict=True)],
        "single": single,
    }


NO_ROW = "\0"


def table(res: dict[str, Any]) -> str:
    m = res["median"]
    c = res.get("cpu_median", {})

    def row(what: str, key: str, note: str = "") -> str:
        if key not in m:  # a row older results do not have
            return NO_ROW
        used = f"{c[key]:.2f}" if key in c else "-"
        return f"| {what} | {m[key]:.2f} | {m[key] / m['raw_s']:.2f}x{note} | {used} |"

    split = res.get("split")
    where = "" if not split else (
        f"; split: Slurm's daemons and every step on CPU {split['cluster_cpu']}, this "
        f"process and all it starts (the orchestrator, guards, scripts, `srun` and "
        f"`squeue` clients) on CPU {split['login_cpu']}")
    lines = [
        f"Median of {res['reps']} on the local cluster ({res['jobs']} jobs `srun true`, "
        f"1 GPU each, {res['parallel']} at once, a warm allocation of {res['nodes']} nodes "
        f"x {res['gpus_per_node']} GPUs; load average at the end "
        f"{res.get('load_1min', 'not recorded')} on {os.cpu_count()} CPUs{where}):",
        "",
        "| what | seconds | vs raw | CPU seconds (the machine's) |",
        "|---|---:|---:|---:|",
        row("raw steps (`srun --jobid --exact --gpus-per-node=1 true`)", "raw_s"),
        row("the bare scripts (`bash -c 'srun ...'`), no orchestrator", "script_s"),
        row("the bare scripts under the lean guard (`setpriv --pdeathsig TERM -- /bin/sh "
            "scriptguard.sh ...`), no orchestrator", "guarded_s"),
        row("the bare scripts under the Python guard (`python -I -S scriptguard.py`), no "
            "orchestrator", "guarded_python_s"),
        row(f"`Allocation.run_many(max_parallel={res['parallel']})`", "run_many_s",
            " (target <= 1.5x)"),
        "",
        f"Slurm commands per run in `run_many` ({res['command_total_per_run']:.2f} in all; "
        "the script's own `srun` not counted), and the seconds each kind took per run "
        "(summed over the runs, which overlap):",
        "",
        "| command | per run | seconds per run |",
        "|---|---:|---:|",
    ]
    lines = [line for line in lines if line != NO_ROW]
    for k, v in res["commands_per_run"].items():
        lines.append(f"| `{k}` | {v:.2f} | {res['command_seconds_per_run'].get(k, 0):.3f} |")
    lines += ["", "Each run's own timings (median seconds): " + ", ".join(
        f"{k} {v:.3f}" for k, v in res["run_timings_median_s"].items()) + "."]
    ratios = res.get("ratios")
    if ratios:
        lines += ["", "Each repetition's ratio (raw and `run_many` back to back): "
                  + ", ".join(f"{r:.2f}x" for r in ratios) + "."]
    one = res.get("single")
    if one:
        lines += [
            "", f"One warm run alone (`Allocation.run`, median of {len(one['run_s'])}): "
            f"{one['median_run_s']:.2f} s against {one['median_bare_s']:.2f} s for its "
            "bare script (`bash -c 'srun --exact --gpus-per-node=1 true'`): "
            f"{one['extra_s']:.2f} s more, {one['extra_in_bare_scripts']:.1f} times the "
            "bare script. Its Slurm commands: " + ", ".join(
                f"{v} `{k}`" for k, v in one["commands"].items()) + "."]
    return "\n".join(lines)


def update_docs(res: dict[str, Any]) -> None:
    """The results' table into docs/steprate.md: the first one, or the second (split)."""
    first, last = (SPLIT_BEGIN, SPLIT_END) if res.get("split") else (TABLE_BEGIN, TABLE_END)
    text = DOC.read_text()
    begin, end = text.index(first), text.index(last)
    DOC.write_text(text[: begin + len(first)] + "\n" + table(res) + "\n" + text[end:])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--jobs", type=int, default=24)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--out", type=Path, default=None,
                   help=f"default {RESULTS.name}, or {SPLIT_RESULTS.name} with --split-cpus")
    p.add_argument("--split-cpus", action="store_true",
                   help="the cluster's daemons on one CPU, this process on another")
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--render-docs", action="store_true",
                   help="only redraw docs/steprate.md's table from --out")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = SPLIT_RESULTS if args.split_cpus else RESULTS
    if args.render_docs:
        update_docs(json.loads(args.out.read_text()))
        return 0
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    with contextlib.ExitStack() as stack:
        split = stack.enter_context(split_cpus()) if args.split_cpus else None
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="slurm_fsm-steprate-"))
        res = measure(Bench(cluster, Path(tmp)), args.reps, args.jobs, args.parallel)
    if split is not None:
        res["split"] = split
    res["config"] = cluster.config_name
    res["load_1min"] = round(os.getloadavg()[0], 2)  # the machine may be shared
    args.out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(table(res))
    print(json.dumps({k: res[k] for k in ("command_examples", "command_seconds_per_run")},
                     indent=1))
    if not args.no_docs:
        update_docs(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
