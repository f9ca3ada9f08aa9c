"""A stream of short jobs on real 7-minute allocations: the hand-off with no emulated expiry.

``python -m benchmarks.stream`` (needs the local cluster with pyxis: it is brought up
when it is not) runs, for each mode, short jobs (``srun true``) back to back for
``--seconds`` (270 s) in a container whose set-up is real (a pyxis import of the local
``python`` image and two ``pip install`` s of a local repo whose build backend sleeps,
so that the installs take about 20 s), on allocations asked with ``alloc_time_limit``
``--limit`` (7 minutes). Nothing is lowered or faked: the allocations expire on their
own clock.

- **today** (``warm_successor: false``): an allocation is replaced cold when 5 minutes
  or less are left, or when the job does not fit the time left;
- **handoff** (``warm_successor: true``): the successor is queued when the time left
  nears the job + lead time + 5 minutes, set up by the detached warmer while the old
  allocation serves, and switched to; the old one is released when its jobs end;
- **handoff-no-reuse**: the hand-off with issue 42's reuse of the nodes' containers and
  its image cache off (the spec's ``image_cache_max_gb: 0``; the check of the nodes'
  containers never made, in this process and in the warmer:
  :mod:`benchmarks.stream_warmer` ``--no-reuse``): each successor set up as before
  issue 42, the baseline of issue 42's "the successor's setup at most 25% of today's".

With the hand-off, each successor's set-up is recorded: the warmer is started as
:mod:`benchmarks.stream_warmer`, which prints the path its container took and each
part's seconds (the machine's ``setup_seconds``) to the warmer's log; ``successors``
(one row each) and ``successor_setup`` (the median, least and most of the parts' sum,
the queue wait not counted, and the paths) in the mode's results, the table between
``<!-- stream-setup-table -->`` markers of docs/benchmarks.md (``--setup-docs-only``).
Allocations that fit share a node, and a successor on its predecessor's node takes the
live allocation's container before issue 42's paths are tried; ``--whole-nodes`` gives
each allocation all the CPUs of its node (``alloc_cpus_per_node``), so that each
successor lands on another node.

One job of the stream expects ``--long`` seconds (``expected_duration_seconds``): it is
started when the allocation in use has less than that + 5 minutes left (with the
hand-off, once its successor is ready, or failing that when the old allocation is about
to stop taking short jobs), so it must not be started there.

Recorded, per job: its start (seconds into the stream), status, step 0 seconds, wall
seconds, allocation, path, and the time left of the allocation in use before it; per
mode: the allocations of the checkout alive at once (``squeue`` sampled every second
by a thread, the most is the figure), the load average, each allocation's start, end
and idle time at its end (from its last job's end to its end, ``sacct``), and the
Slurm commands: every Slurm tool is reached through a shim on ``PATH`` that logs its
caller, so the commands of the stream's process and of the warmer are counted; the
commands per hand-off are those over a steady job's, plus the warmer's, divided by the
hand-offs. Results go to ``benchmarks/stream.json`` (a mode run replaces that mode's
entry), the figure (:func:`benchmarks.charts.stream_svg`) to ``docs/img/stream.svg``
and the table into ``docs/benchmarks.md`` (``--no-docs`` leaves both; ``--docs-only``
redraws them from the JSON and runs nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.doctable import splice_table
from benchmarks.stream_warmer import MARK
from slurm_fsm import JobSpec, Status, SubprocessBackend, files, imagecache, warmer
from slurm_fsm.executor import Executor
from slurm_fsm.paths import StatePaths
from slurm_fsm.spec import EXPIRY_MARGIN_S
from slurm_fsm.successor import Phase, read_successor
from slurm_fsm_dev import localcluster
from slurm_fsm_dev.localpyxis import make_install_repo

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "stream.json"
FIGURE = REPO / "docs" / "img" / "stream.svg"
DOC = REPO / "docs" / "benchmarks.md"
TABLE_BEGIN = "<!-- stream-table:begin -->"
TABLE_END = "<!-- stream-table:end -->"
SETUP_BEGIN = "<!-- stream-setup-table:begin -->"
SETUP_END = "<!-- stream-setup-table:end -->"
#: the Slurm tools the shim logs
TOOLS = ("salloc", "sbatch", "srun", "squeue", "scancel", "scontrol", "sacct", "sinfo",
         "sstat")
SHORT_EXPECTED_S = 10


def say(text: str) -> None:
    print(f"stream: {text}", file=sys.stderr, flush=True)


def seconds_of(text: str) -> int | None:
    """``[D-]HH:MM:SS``, ``MM:SS`` or ``SS`` as seconds; None for anything else."""
    text = text.strip()
    days, _, rest = text.rpartition("-")
    try:
        parts = [int(p) for p in rest.split(":")]
        d = int(days) if days else 0
    except ValueError:
        return None
    while len(parts) < 3:
        parts.insert(0, 0)
    return (d * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def slow_install_repo(repo: Path, sleep_s: float) -> Path:
    """:func:`make_install_repo` whose two packages' builds each sleep ``sleep_s``: the
    two ``pip install`` s of the set-up then take about 2 x ``sleep_s`` + pip's own time."""
    make_install_repo(repo)
    for backend in (repo / "_backend" / "it_backend.py",
                    repo / "devtool" / "_backend" / "it_backend.py"):
        backend.write_text(backend.read_text() + (
            "\n\nimport time as _time\n_wheel_, _editable_ = build_wheel, build_editable\n\n\n"
            "def build_wheel(*args, **kwargs):\n"
            f"    _time.sleep({sleep_s!r})\n    return _wheel_(*args, **kwargs)\n\n\n"
            "def build_editable(*args, **kwargs):\n"
            f"    _time.sleep({sleep_s!r})\n    return _editable_(*args, **kwargs)\n"))
    return repo


def make_shims(folder: Path, log: Path, path: str) -> dict[str, str]:
    """A shim per Slurm tool that logs ``time|ppid|grandparent pid|tool|parent's argv|
    grandparent's argv`` to ``log`` (bash builtins only: no process more) and execs the
    real tool; returns the real tools' paths."""
    folder.mkdir(parents=True, exist_ok=True)
    real: dict[str, str] = {}
    for tool in TOOLS:
        found = shutil.which(tool, path=path)
        if found is None:
            continue
        real[tool] = found
        shim = folder / tool
        shim.write_text(
            "#!/bin/bash\n"
            "mapfile -d '' -n 4 p < /proc/$PPID/cmdline 2>/dev/null\n"
            "read -r -a st < /proc/$PPID/stat 2>/dev/null\n"
            "gp=${st[3]:-0}\n"
            "mapfile -d '' -n 4 g < /proc/$gp/cmdline 2>/dev/null\n"
            f"IFS=+; printf '%s|%s|%s|{tool}|%s|%s\\n' \"$EPOCHREALTIME\" \"$PPID\" "
            f"\"$gp\" \"${{p[*]//$'\\n'/ }}\" \"${{g[*]//$'\\n'/ }}\" >> {log}\n"
            f"exec {found} \"$@\"\n")
        shim.chmod(0o755)
    return real


class Sampler(threading.Thread):
    """``squeue`` every second: the checkout's allocations alive, their time left."""

    def __init__(self, squeue: str, names: tuple[str, ...], user: str, t0: float) -> None:
        super().__init__(daemon=True)
        self.squeue, self.names, self.user, self.t0 = squeue, names, user, t0
        self.samples: list[dict[str, Any]] = []
        self.left: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.time()
            proc = subprocess.run(  # noqa: S603
                [self.squeue, "-u", self.user, "-h", "-o", "%i %j %T %L"],
                capture_output=True, text=True, timeout=30, check=False)
            alive = []
            for line in proc.stdout.splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[1] in self.names and parts[2] in (
                        "RUNNING", "PENDING", "CONFIGURING"):
                    alive.append(parts[0])
                    left = seconds_of(parts[3])
                    if parts[2] == "RUNNING" and left is not None:
                        self.left[parts[0]] = left
            self.samples.append({"t": round(t - self.t0, 2), "alive": alive,
                                 "load1": os.getloadavg()[0]})
            self.stop.wait(1.0)


def sacct_times(sacct: str, ids: list[str]) -> dict[str, dict[str, float | None]]:
    """Start and end (epoch seconds) of each allocation, from accounting."""
    if not ids:
        return {}
    proc = subprocess.run(  # noqa: S603
        [sacct, "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,Start,End,State"],
        capture_output=True, text=True, timeout=30, check=False)
    out: dict[str, dict[str, float | None]] = {}
    for line in proc.stdout.splitlines():
        job, start, end, _state = [*line.split("|"), "", "", ""][:4]

        def epoch(text: str) -> float | None:
            try:
                return datetime.fromisoformat(text).timestamp()
            except ValueError:
                return None

        out[job] = {"start": epoch(start), "end": epoch(end)}
    return out


def run_mode(mode: str, cluster: localcluster.ClusterInfo, image: Path, root: Path,
             seconds: float, limit: str, long_s: int, install_sleep_s: float,
             whole_nodes: bool = False) -> dict[str, Any]:
    tag = f"{cluster.account}-bench-stream-{mode}-{os.getpid()}.persistent"
    names = (tag, tag + "-b")
    folder = root / mode
    repo = slow_install_repo(folder / "repo", install_sleep_s)
    script = folder / "job.slurm"
    container = f"bench-stream-{mode}-{os.getpid()}"
    # one node: the jobs start the container the successor's warmer would import there
    step = f"srun --container-name={container} true" if mode == ONE_NODE else "srun true"
    script.write_text(f"#!/bin/bash\n{step}\necho done\n")
    calls_log = folder / "slurm-calls.log"
    real = make_shims(folder / "shims", calls_log, os.environ["PATH"])
    saved_path = os.environ["PATH"]
    os.environ["PATH"] = f"{folder / 'shims'}:{saved_path}"
    data = {
        "script_path": str(script), "work_dir": str(folder / "work"),
        "model_name": "bench", "workflow_type": "pytest", "repo_root": str(repo),
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1},
        "alloc_job_name": tag, "alloc_time_limit": limit,
        "docker_image": str(image), "container_name": container,
        "container_mounts": [f"{repo}:{repo}"], "success_patterns": ["done"],
        "expected_duration_seconds": SHORT_EXPECTED_S, "warm_successor": mode != "today",
    }
    if mode == NO_REUSE:  # as before issue 42: the image cache off (the warmer too)
        data["image_cache_max_gb"] = 0
    if whole_nodes:  # every CPU of its node: a successor lands on another node
        data["alloc_cpus_per_node"] = cluster.cpus_per_node
    short = JobSpec.from_dict(data)
    long = JobSpec.from_dict(dict(data, expected_duration_seconds=long_s))
    record_path = StatePaths.for_state_file(short.state_path).successor_record
    jobs: list[dict[str, Any]] = []
    t0 = time.time()
    sampler = Sampler(real["squeue"], names, cluster.user, t0)
    sampler.start()
    long_done = False
    patches = contextlib.ExitStack()
    patches.enter_context(recorded_warmer(mode == NO_REUSE))
    try:
        while time.time() - t0 < seconds:
            current = jobs[-1]["allocation"] if jobs else None
            left = sampler.left.get(current) if current else None
            record = read_successor(record_path)
            phase = record.phase.value if record is not None else None
            need = long_s + EXPIRY_MARGIN_S
            is_long = False
            if not long_done and left is not None and len(jobs) >= 3:
                if mode == "today":
                    is_long = EXPIRY_MARGIN_S < left < need
                else:
                    ready = record is not None and record.phase is Phase.READY
                    # as soon as the successor is ready (the job then switches to it);
                    # failing that, at the last moment the old one still takes short
                    # jobs (the job then waits for the successor: admission by time left)
                    is_long = left < need and (
                        ready or left < EXPIRY_MARGIN_S + SHORT_EXPECTED_S + 10)
            spec = long if is_long else short
            start = time.time()
            report = Executor(spec, SubprocessBackend()).run()
            end = time.time()
            row = {"n": len(jobs), "long": is_long,
                   "expected_s": spec.expected_duration_seconds,
                   "t": round(start - t0, 2), "end": round(end - t0, 2),
                   "status": report.status.name,
                   "step0_s": round(report.timings.get("step0_s", 0.0), 2),
                   "wall_s": round(end - start, 2), "path": report.path,
                   "allocation": report.allocation_id, "before_allocation": current,
                   "before_left_s": left, "successor_phase_before": phase}
            if report.status is not Status.PASSED:
                row.update(summary=report.summary, errors=report.errors[:5],
                           notes=report.notes[:10])
            if not jobs or any(k in report.timings for k in SETUP_PARTS):
                # the first job's, and any job that set a container up itself
                row["timings"] = {k: round(v, 2) for k, v in report.timings.items()}
            jobs.append(row)
            long_done = long_done or is_long
            say(f"{mode} {row['t']:7.1f}s #{row['n']}{' LONG' if is_long else ''}: "
                f"{row['status']} step0 {row['step0_s']} s on {row['allocation']} "
                f"(before: {current}, {left} s left, successor {phase})")
    finally:
        release = dict(data, release_allocation=True)
        try:
            Executor(JobSpec.from_dict(release), SubprocessBackend()).run()
        finally:
            patches.close()
            time.sleep(2.0)
            sampler.stop.set()
            sampler.join(timeout=35)
            os.environ["PATH"] = saved_path
            for sample in sampler.samples[-3:]:
                for job_id in sample["alive"]:
                    subprocess.run([real["scancel"], job_id], timeout=30,  # noqa: S603
                                   check=False)
    result = summarize(mode, jobs, sampler.samples, calls_log, real, t0,
                       limit=limit, long_s=long_s)
    result["successors"] = successor_setups(
        StatePaths.for_state_file(short.state_path).warmer_log, t0)
    result["successor_setup"] = setup_summary(result["successors"])
    result["placement"] = WHOLE_NODES if whole_nodes else SHARED_NODE
    return result


#: ``placement`` of a mode run: ``--whole-nodes`` (each allocation all the CPUs of its
#: node, a successor on another node), else the allocations share a node when they fit.
WHOLE_NODES = "whole nodes"
SHARED_NODE = "may share a node"


def key_of(result: dict[str, Any]) -> str:
    """A mode run's entry in the results file: its mode, and its placement when whole
    nodes."""
    return result["mode"] + (" (whole nodes)" if result.get("placement") == WHOLE_NODES
                             else "")


#: The parts of step 0's set-up in a report's timings and the warmer's line
#: (:meth:`slurm_fsm.machine.AllocationMachine.setup_seconds`); the queue wait is not one.
SETUP_PARTS = ("import_s", "reuse_check_s", "cache_import_s", "share_check_s",
               "install_s", "cache_write_s")


@contextlib.contextmanager
def recorded_warmer(no_reuse: bool) -> Iterator[None]:
    """While in it, a warm successor's warmer is :mod:`benchmarks.stream_warmer` (its
    set-up's path and seconds in its log); with ``no_reuse``, issue 42's check of the
    nodes' containers is off in this process and in the warmer (the cache is off by
    the spec): the set-up as before issue 42."""
    saved_spawner, saved_keep = warmer.spawner, imagecache.nodes_may_keep
    warmer.spawner = bench_spawner(no_reuse)  # type: ignore[assignment]
    if no_reuse:
        from benchmarks.stream_warmer import no_reuse as turn_off
        turn_off()
    try:
        yield
    finally:
        warmer.spawner, imagecache.nodes_may_keep = saved_spawner, saved_keep


def bench_spawner(no_reuse: bool) -> Any:
    """:func:`slurm_fsm.warmer.spawner` starting ``python -m benchmarks.stream_warmer``
    (from this checkout) instead of ``python -m slurm_fsm.warmer``."""

    def spawner(state_path: Path) -> Any:
        def spawn(spec: JobSpec) -> int | None:
            log_path = StatePaths.for_state_file(state_path).warmer_log
            argv = [sys.executable, "-m", "benchmarks.stream_warmer",
                    *(["--no-reuse"] if no_reuse else []), str(state_path)]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
            with files.open_private(log_path, append=True, mode=0o600) as out:
                proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
                    argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True, env=env)
            assert proc.stdin is not None
            with proc.stdin:
                proc.stdin.write(json.dumps(spec.to_dict()).encode("utf-8"))
            threading.Thread(target=proc.wait, daemon=True).start()
            return proc.pid

        return spawn

    return spawner


def successor_setups(log: Path, t0: float) -> list[dict[str, Any]]:
    """Each warmer's set-up line (:data:`benchmarks.stream_warmer.MARK`) in ``log``:
    the successor, its path, each part's seconds and ``setup_s``, their sum."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        if not line.startswith(MARK):
            continue
        row = json.loads(line[len(MARK):])
        parts = row.pop("seconds")
        found.append({"t": round(row.pop("at") - t0, 1), **row, "seconds": parts,
                      "setup_s": round(sum(parts.get(k, 0.0) for k in SETUP_PARTS), 2)})
    return found


def setup_summary(successors: list[dict[str, Any]]) -> dict[str, Any]:
    """The successors set up by a warmer (Ready): how many, by path, and the median,
    least and most of their set-up seconds."""
    ready = [s for s in successors if s["state"] == "Ready" and s["path"]]
    values = [s["setup_s"] for s in ready]
    paths: dict[str, int] = {}
    for s in ready:
        paths[s["path"]] = paths.get(s["path"], 0) + 1
    return {"warmed": len(ready), "not_ready": len(successors) - len(ready),
            "by_path": paths,
            "median_s": round(statistics.median(values), 2) if values else None,
            "min_s": min(values, default=None), "max_s": max(values, default=None)}


def calls_by_caller(log: Path, me: int) -> list[tuple[float, str, str]]:
    """``(time, caller, tool)`` of each logged Slurm command; the caller is ``stream``
    (this process, or a guard it started), ``job`` (a job script's own ``srun``),
    ``warmer`` (the detached warmer, or a guard it started) or ``other``."""
    rows = []
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split("|", 4)
        if len(parts) != 5:
            continue
        t, ppid, gpid, tool, callers = parts
        parent, _, grand = callers.partition("|")
        if "job.slurm" in parent:
            caller = "job"
        elif any(w in parent or w in grand
                 for w in ("slurm_fsm.warmer", "benchmarks.stream_warmer")):
            caller = "warmer"
        elif str(me) in (ppid, gpid):
            caller = "stream"
        else:
            caller = "other"
        rows.append((float(t), caller, tool))
    return rows


def summarize(mode: str, jobs: list[dict[str, Any]], samples: list[dict[str, Any]],
              calls_log: Path, real: dict[str, str], t0: float,
              *, limit: str, long_s: int) -> dict[str, Any]:
    allocations: list[str] = []
    for j in jobs:
        if j["allocation"] and j["allocation"] not in allocations:
            allocations.append(j["allocation"])
    for s in samples:
        for job_id in s["alive"]:
            if job_id not in allocations:
                allocations.append(job_id)
    handoffs = [j["t"] for j, prev in zip(jobs[1:], jobs, strict=False)
                if j["allocation"] != prev["allocation"]]
    # Slurm commands: the stream's own process (per job window), the warmers, the jobs
    calls = calls_by_caller(calls_log, os.getpid())
    per_job = []
    for j in jobs:
        lo, hi = t0 + j["t"], t0 + j["end"]
        per_job.append(sum(1 for t, who, _ in calls if who == "stream" and lo <= t <= hi))
    for j, n in zip(jobs, per_job, strict=True):
        j["slurm_calls"] = n
    steady = statistics.median(per_job[1:]) if len(per_job) > 1 else 0
    by_caller: dict[str, dict[str, int]] = {}
    for _, who, tool in calls:
        by_caller.setdefault(who, {}).setdefault(tool, 0)
        by_caller[who][tool] += 1
    extra_stream = sum(n - steady for n in per_job[1:] if n > steady)
    warmer_calls = sum(by_caller.get("warmer", {}).values())
    per_handoff = (round((extra_stream + warmer_calls) / len(handoffs), 1)
                   if handoffs else None)
    ended = sacct_times(real["sacct"], allocations)
    stream_end = t0 + jobs[-1]["end"]
    limit_s = seconds_of(limit)
    per_alloc = []
    for job_id in allocations:
        on_it = [j for j in jobs if j["allocation"] == job_id]
        times = ended.get(job_id, {})
        start, end = times.get("start"), times.get("end")
        last_end = max((t0 + j["end"] for j in on_it), default=None)
        per_alloc.append({
            "id": job_id, "jobs": len(on_it),
            "start": round(start - t0, 1) if start else None,
            "end": round(end - t0, 1) if end else None,
            "last_job_end": round(last_end - t0, 1) if last_end else None,
            "idle_at_end_s": (round(end - last_end, 1) if end and last_end else None),
            "released_by_benchmark": bool(end and end >= stream_end - 1.5),
            "unused_s": (round(limit_s - (end - start), 1) if start and end and limit_s
                         else None),
        })
    rest = [j for j in jobs[1:] if not j["long"]]
    long_rows = [j for j in jobs if j["long"]]
    loads = [s["load1"] for s in samples]
    return {
        "mode": mode, "alloc_time_limit": limit, "stream_s": round(jobs[-1]["end"], 1),
        "jobs": jobs, "allocations": per_alloc, "handoffs_at": handoffs,
        "not_passed": sum(1 for j in jobs if j["status"] != Status.PASSED.name),
        "cold_start_step0_s": jobs[0]["step0_s"],
        "longest_step0_after_first_s": max((j["step0_s"] for j in jobs[1:]), default=None),
        "longest_step0_short_after_first_s": max((j["step0_s"] for j in rest),
                                                 default=None),
        "long_job": long_rows[0] if long_rows else None, "long_expected_s": long_s,
        "most_allocations_alive": max((len(s["alive"]) for s in samples), default=0),
        "samples": len(samples),
        "slurm_calls": {"stream_steady_job": steady, "stream_total": sum(per_job),
                        "stream_over_steady": extra_stream, "warmer": warmer_calls,
                        "by_caller": by_caller, "per_handoff": per_handoff},
        "load_average": {"min": min(loads, default=None), "max": max(loads, default=None),
                         "mean": round(statistics.fmean(loads), 2) if loads else None},
    }


def table(results: list[dict[str, Any]]) -> str:
    """The docs table of ``results`` (one row per mode)."""
    rows = ["| mode | jobs | not PASSED | hand-offs | cold start step 0 (s) | longest step 0 "
            "after the first (s) | long job: time left before / needed (s), step 0 (s) | "
            "most allocations alive | Slurm commands per hand-off | idle at the end of "
            "each replaced allocation (s) | load average (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        long = r.get("long_job")
        long_text = (f"{long['before_left_s']} / {long['expected_s'] + EXPIRY_MARGIN_S}, "
                     f"{long['step0_s']}" if long else "none")
        idle = [a["idle_at_end_s"] for a in r["allocations"]
                if not a["released_by_benchmark"] and a["idle_at_end_s"] is not None]
        idle_text = ", ".join(f"{max(v, 0.0):.0f}" for v in idle) or "none"
        load = r["load_average"]
        rows.append(
            f"| {r['mode']} | {len(r['jobs'])} | {r['not_passed']} | "
            f"{len(r['handoffs_at'])} | {r['cold_start_step0_s']} | "
            f"{r['longest_step0_after_first_s']} | {long_text} | "
            f"{r['most_allocations_alive']} | {r['slurm_calls']['per_handoff']} | "
            f"{idle_text} | {load['min']:.1f}-{load['max']:.1f} |")
    return "\n".join(rows) + "\n"


def setup_ordered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The order of the set-up table: whole nodes first, each without issue 42 first."""
    return sorted(results, key=lambda r: (r.get("placement") != WHOLE_NODES,
                                          r["mode"] != NO_REUSE))


def setup_table(results: list[dict[str, Any]]) -> str:
    """The docs table of the warm successors' set-up (one row per mode that has one)."""
    rows = ["| mode | allocations | hand-offs | successors set up by the warmer | their "
            "paths | set-up median (s) | least-most (s) | cold start step 0 (s) | not "
            "PASSED | load average (1 min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        setup = r.get("successor_setup")
        if not setup:
            continue
        paths = ", ".join(f"{k} {v}" for k, v in sorted(setup["by_path"].items()))
        load = r["load_average"]
        rows.append(
            f"| {r['mode']} | {r.get('placement', SHARED_NODE)} | {len(r['handoffs_at'])} | "
            f"{setup['warmed']} | {paths} | "
            f"{setup['median_s']} | {setup['min_s']}-{setup['max_s']} | "
            f"{r['cold_start_step0_s']} | {r['not_passed']} | "
            f"{load['min']:.1f}-{load['max']:.1f} (mean {load['mean']}) |")
    return "\n".join(rows) + "\n"


def write_docs(results: list[dict[str, Any]]) -> None:
    """The figure into docs/img/stream.svg, the table into docs/benchmarks.md."""
    from benchmarks import charts

    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    FIGURE.write_text(charts.stream_svg(results), encoding="utf-8")
    if not splice_table(DOC, TABLE_BEGIN, TABLE_END, table(results)):
        say(f"{DOC} has no {TABLE_BEGIN}: table not written")


def ordered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """today first, then the hand-off (the order of the figure and the table)."""
    rank = {"today": 0, "handoff": 1, ONE_NODE: 2, NO_REUSE: 3}
    return sorted(results, key=lambda r: rank.get(r["mode"], 2))


#: The hand-off with every allocation on one node (the partition's other nodes drained
#: for the run), the jobs starting the container: issue 44 item 3.
ONE_NODE = "handoff-one-node"
#: The hand-off with issue 42's reuse of the nodes' containers and the image cache off:
#: each successor set up as before issue 42 (:func:`recorded_warmer`).
NO_REUSE = "handoff-no-reuse"


@contextlib.contextmanager
def one_node(cluster: localcluster.ClusterInfo, on: bool) -> Iterator[None]:
    """With ``on``: the cluster's nodes but the first drained, resumed after."""
    others = ",".join(cluster.nodes[1:])
    if not on or not others:
        yield
        return
    def update(*state: str) -> None:
        subprocess.run(["scontrol", "update", f"NodeName={others}", *state],  # noqa: S603
                       timeout=30, check=True)
    update("State=DRAIN", "Reason=benchmarks.stream one node")
    try:
        yield
    finally:
        update("State=RESUME")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream")
    parser.add_argument("--seconds", type=float, default=270.0)
    parser.add_argument("--limit", default="00:07:00", help="alloc_time_limit")
    parser.add_argument("--long", type=int, default=75,
                        help="expected_duration_seconds of the one long job")
    parser.add_argument("--install-sleep", type=float, default=8.0,
                        help="seconds each of the two package builds sleeps")
    parser.add_argument("--modes", default="handoff,today",
                        help=f"today, handoff, {ONE_NODE}, {NO_REUSE} (comma-separated)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--whole-nodes", action="store_true",
                        help="each allocation takes every CPU of its node "
                             "(alloc_cpus_per_node): a successor lands on another node")
    parser.add_argument("--docs-only", action="store_true",
                        help="redraw the figure and the table from --out; run nothing")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--setup-docs-only", action="store_true",
                        help="write the successors' set-up table from --out; run nothing")
    args = parser.parse_args(argv)
    if args.setup_docs_only:
        found = setup_ordered(json.loads(args.out.read_text())["results"])
        if not splice_table(DOC, SETUP_BEGIN, SETUP_END, setup_table(found)):
            say(f"{DOC} has no {SETUP_BEGIN}: table not written")
        return 0
    if args.docs_only:
        write_docs(ordered(json.loads(args.out.read_text())["results"]))
        return 0
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    if cluster.containers is None:
        say(f"the local cluster has no containers: {cluster.containers_problem}")
        return 1
    image = cluster.containers.images["python"]
    results: list[dict[str, Any]] = []
    previous: dict[str, Any] = {}
    if args.out.exists():
        previous = {key_of(r): r for r in json.loads(args.out.read_text())["results"]}
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        for mode in args.modes.split(","):
            with one_node(cluster, mode == ONE_NODE):
                results.append(run_mode(mode, cluster, Path(image), Path(tmp),
                                        args.seconds, args.limit, args.long,
                                        args.install_sleep, args.whole_nodes))
            previous[key_of(results[-1])] = results[-1]
            args.out.write_text(json.dumps({"results": list(previous.values())}, indent=2)
                                + "\n", encoding="utf-8")
    for r in results:
        say(f"{r['mode']}: {len(r['jobs'])} jobs, not PASSED {r['not_passed']}, cold "
            f"{r['cold_start_step0_s']} s, longest step 0 after the first "
            f"{r['longest_step0_after_first_s']} s, most alive "
            f"{r['most_allocations_alive']}, hand-offs {len(r['handoffs_at'])}, calls per "
            f"hand-off {r['slurm_calls']['per_handoff']}, successors' set-up "
            f"{r['successor_setup']}")
    if not args.no_docs:
        write_docs(ordered(list(previous.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
