#!/usr/bin/env python3
"""slurm_fsm benchmarks on the project's local Slurm cluster (``make bench``).

Five figures, each the median (min, max) of ``--reps`` repetitions (default 15):

1. ``warm``    warm-run overhead of a trivial ``srun true`` script: ``Executor.run()``,
               the CLI, the bare ``bash script`` and a bare ``srun --jobid``;
2. ``series``  20 small jobs: the persistent path, the one-shot path, submitit;
3. ``load``    Slurm commands issued per warm run and per minute of monitoring;
4. ``monitor`` the monitor's CPU time and bytes read on a growing 1 GiB log (no Slurm);
5. ``fake``    step-0 runs per second on the FakeCluster (no Slurm);
6. ``containers`` real pyxis, 2 nodes, the python image: a first run (allocate, import,
               install), a repeated run on it, and a one-shot sbatch that imports every time.

Benchmarks, not tests: they print figures and targets (met / not met) and never
fail because a machine is slow. Results go to ``benchmarks/results.json``; a full
run (all figures, at least 15 repetitions) also rewrites the table in
``docs/benchmarks.md``. Every allocation the benchmark makes is released and every
job it submits is cancelled at the end, also on an error or Ctrl-C; jobs of other
people on the shared local cluster are never touched (all names carry this run's
tag).

    .venv/bin/python benchmarks/run.py                 # everything (about 25 min)
    .venv/bin/python benchmarks/run.py --only warm --reps 3 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import attrs

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script: the repository's tooling is importable
    sys.path.insert(0, str(_REPO))

from benchmarks import charts
from slurm_fsm import slurmcli
from slurm_fsm.backend import ScriptRequest, SlurmBackend
from slurm_fsm.clock import SystemClock
from slurm_fsm.errors import BackendError, JobNotFound
from slurm_fsm.executor import Events, Executor
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.monitor import watch_script
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import StateStore
from slurm_fsm.step0.table import State
from slurm_fsm.subprocess_backend import (
    CommandResult,
    LocalScript,
    SubprocessBackend,
    run_command,
)
from slurm_fsm.testing import FakeCluster, FakeScript

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results.json"
DOCS = REPO / "docs" / "benchmarks.md"
TABLE_START = "<!-- bench-table:start -->"
TABLE_END = "<!-- bench-table:end -->"
MIN_REPS = 15
FIGURES = ("warm", "series", "load", "monitor", "fake", "containers")
SERIES_JOBS = 20
LONG_JOB_S = 75
MIB = 1 << 20
GIB = 1 << 30
LINE_BYTES = 64 * 1024
MONITOR_SIZES = (256 * MIB, 512 * MIB, GIB)
FAKE_RUNS = 200
#: Figure 4 writes 3.5 GiB per repetition and mode: fewer repetitions by default.
MONITOR_REPS = 5
SUBMITIT_REQUIREMENT = "submitit>=1.5"
#: What the original (hand-run) procedure issues, from its description.
ORIGINAL_PER_RUN = {"squeue": 2, "srun": 1}
ORIGINAL_POLL_S = 30.0


class BenchError(RuntimeError):
    """A measurement could not be taken (a run did not do what it should)."""


def say(text: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ results


@attrs.frozen
class Stat:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        if not values:
            raise BenchError("no samples")
        return cls(float(statistics.median(values)), float(min(values)), float(max(values)),
                   len(values))

    @classmethod
    def single(cls, value: float) -> Stat:
        return cls(float(value), float(value), float(value), 1)


@attrs.frozen
class Row:
    key: str
    label: str
    unit: str
    stat: Stat
    note: str = ""


@attrs.frozen
class Target:
    text: str
    value: float
    limit: float
    unit: str
    met: bool

    def line(self) -> str:
        verdict = "met" if self.met else "NOT met"
        return (f"{self.text}: {fmt(self.value, self.unit)} vs {fmt(self.limit, self.unit)} "
                f"{self.unit} -> {verdict}")


@attrs.define
class Figure:
    name: str
    title: str
    reps: int
    rows: list[Row] = attrs.field(factory=list)
    targets: list[Target] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    samples: dict[str, list[float]] = attrs.field(factory=dict)
    date: str = ""
    seconds: float = 0.0
    error: str | None = None

    def add(self, key: str, label: str, unit: str, values: Sequence[float] | Stat,
            note: str = "") -> Stat:
        stat = values if isinstance(values, Stat) else Stat.of(values)
        if not isinstance(values, Stat):
            self.samples[key] = [round(v, 6) for v in values]
        self.rows.append(Row(key, label, unit, stat, note))
        return stat

    def target(self, text: str, value: float, limit: float, unit: str, *,
               at_least: bool = False) -> None:
        met = value >= limit if at_least else value <= limit
        self.targets.append(Target(text, value, limit, unit, met))

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title, "reps": self.reps, "date": self.date,
            "seconds": round(self.seconds, 1), "error": self.error,
            "rows": [{"key": r.key, "label": r.label, "unit": r.unit,
                      "median": _round(r.stat.median), "min": _round(r.stat.min),
                      "max": _round(r.stat.max), "n": r.stat.n, "note": r.note}
                     for r in self.rows],
            "targets": [{"text": t.text, "value": _round(t.value), "limit": _round(t.limit),
                         "unit": t.unit, "met": t.met} for t in self.targets],
            "notes": self.notes,
            "samples": self.samples,
        }


def _round(v: float) -> float:
    return float(f"{v:.6g}")


def fmt(v: float, unit: str) -> str:
    """A figure as the table shows it."""
    if unit in ("ms",):
        return f"{v:.1f}"
    if unit in ("s", "s/GiB", "CPU s"):
        return f"{v:.3f}"
    if unit in ("x",):
        return f"{v:.2f}"
    if unit in ("runs/s", "MiB"):
        return f"{v:.0f}"
    if unit in ("%",):
        return f"{v:.4f}"
    if unit.startswith("cmd") or unit == "polls":
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"
    return f"{v:.4g}"


# ------------------------------------------------------------------------- helpers


class CountingRunner:
    """The real runner (:func:`run_command`), recording each command's argv and start time."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, tuple[str, ...]]] = []
        self._lock = threading.Lock()

    def __call__(self, argv: Sequence[str], timeout_s: float,
                 env: Mapping[str, str]) -> CommandResult:
        started = time.monotonic()
        result = run_command(argv, timeout_s, env)
        with self._lock:
            self.calls.append((started, tuple(result.argv)))
        return result

    def spawned(self, argv: Sequence[str]) -> None:
        """A command the backend starts itself (a run's lease ``srun``), counted too."""
        program = "srun" if "srun" in argv else argv[0]  # under the script guard's wrapper
        with self._lock:
            self.calls.append((time.monotonic(), (program, *argv)))

    def mark(self) -> int:
        return len(self.calls)

    def counts(self, since: int = 0, *, start: float | None = None,
               end: float | None = None) -> Counter[str]:
        """Commands by program name (argv[0]), from call ``since`` or in [start, end)."""
        with self._lock:
            calls = self.calls[since:]
        return Counter(
            argv[0] for t, argv in calls
            if (start is None or t >= start) and (end is None or t < end)
        )

    def first(self, program: str, after: float) -> float | None:
        with self._lock:
            return next((t for t, argv in self.calls if argv[0] == program and t >= after),
                        None)


class CountingBackend(SubprocessBackend):
    """The real backend with a :class:`CountingRunner`, whose count also has the lease
    ``srun`` s it spawns (not through the runner; ``salloc`` is counted from the path)."""

    def __init__(self, counter: CountingRunner) -> None:
        super().__init__(runner=counter)
        self.counter = counter

    def _spawn_lease(self, argv: Sequence[str], name: str) -> Any:
        self.counter.spawned(argv)
        return super()._spawn_lease(argv, name)


class WindowEvents(Events):
    """Records when the job started being watched and when the run ended."""

    def __init__(self) -> None:
        self.watch_started: float | None = None
        self.done: float | None = None

    def state(self, machine_state: str, detail: str = "") -> None:
        if machine_state in ("Running", "Monitoring"):
            self.watch_started = time.monotonic()
        elif machine_state == "Done":
            self.done = time.monotonic()


class Bench:
    """What all figures share: the cluster, a temporary folder, and the cleanup lists."""

    def __init__(self, *, reps: int, tmp: Path, tag: str, partition: str, account: str,
                 long_s: int) -> None:
        self.reps = reps
        self.tmp = tmp
        self.tag = tag
        self.partition = partition
        self.account = account
        self.long_s = long_s
        self.backend = SubprocessBackend()
        self.specs: list[JobSpec] = []
        self.job_ids: set[str] = set()
        self.job_names: set[str] = set()

    @staticmethod
    def env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment less any job-context SLURM_*, plus ``extra``."""
        return slurmcli.clean_env(os.environ, extra)

    def _root(self, name: str) -> Path:
        root = self.tmp / name
        (root / "work").mkdir(parents=True, exist_ok=True)
        return root

    def persistent_spec(self, name: str, body: str) -> JobSpec:
        """A persistent-mode spec with its own repo root (state file) and job name."""
        root = self._root(name)
        script = root / "job.slurm"
        script.write_text(f"#!/bin/bash\n{body}\n")
        job_name = f"{self.account}-{self.tag}-{name}.persistent"
        spec = JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(root / "work"), "model_name": name,
            "repo_root": str(root), "alloc_job_name": job_name, "alloc_time_limit": "01:00:00",
            "monitor_timeout_seconds": 900,
            "slurm_params": {"partition": self.partition, "account": self.account, "nodes": 1,
                             "ntasks_per_node": 1},
        })
        self.specs.append(spec)
        self.job_names.add(job_name)
        return spec

    def one_shot_spec(self, name: str, body: str) -> JobSpec:
        """A one-shot (sbatch) spec; the job's name is the script's file name."""
        root = self._root(name)
        script = root / f"{self.tag}-{name}.slurm"
        script.write_text("#!/bin/bash\n#SBATCH --output=oneshot_%j.out\n"
                          f"#SBATCH --time=00:05:00\n{body}\n")
        self.job_names.add(script.name)
        return JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(root / "work"), "model_name": name,
            "repo_root": str(root), "persistent_mode": False,
            "log_file_pattern": "oneshot_%j.out", "monitor_timeout_seconds": 900,
            "slurm_params": {"partition": self.partition, "account": self.account, "nodes": 1,
                             "ntasks_per_node": 1},
        })

    def release(self, spec: JobSpec) -> None:
        report = Executor(attrs.evolve(spec, release_allocation=True), self.backend).run()
        if report.status is not Status.RELEASED:
            raise BenchError(f"release of {spec.job_name} failed: {report.summary}")

    def other_jobs(self) -> int:
        """Jobs on the cluster that are not this run's (someone else's tests)."""
        try:
            out = subprocess.run(
                ["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=30,
                env=self.env(), check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return -1
        return sum(1 for name in out.split() if self.tag not in name)

    def cleanup(self) -> None:
        """Release every allocation and cancel every job of this run (only this run's)."""
        for spec in self.specs:
            try:
                self.release(spec)
            except Exception as exc:
                say(f"cleanup: {exc}")
        user = self.backend.current_user()
        left: list[str] = []
        for name in sorted(self.job_names):
            try:
                left += [j.job_id for j in self.backend.find_jobs(name, user) if j.is_active]
            except BackendError as exc:
                say(f"cleanup: squeue for {name}: {exc}")
        for job_id in sorted(self.job_ids):
            try:
                info = self.backend.query_job(job_id)
            except JobNotFound:
                continue
            except BackendError as exc:
                say(f"cleanup: squeue -j {job_id}: {exc}")
                continue
            if info.is_active and info.name in self.job_names:
                left.append(job_id)
        for job_id in sorted(set(left)):
            say(f"cleanup: cancelling job {job_id} of this run")
            with contextlib.suppress(BackendError):
                self.backend.cancel(job_id)


def run_ok(spec: JobSpec, backend: SlurmBackend, *, allocating: bool | None = None,
           events: Events | None = None) -> tuple[float, Report]:
    """``Executor.run()`` timed; raises unless PASSED (and allocating or not, when given)."""
    t = time.perf_counter()
    report = Executor(spec, backend, events=events).run()
    took = time.perf_counter() - t
    if report.status is not Status.PASSED:
        raise BenchError(f"{spec.script_path.name}: {report.status.value}: {report.summary}; "
                         f"errors {report.errors[:3]}")
    if allocating is not None and ("Allocating" in report.path) != allocating:
        raise BenchError(f"{spec.script_path.name}: expected "
                         f"{'an allocating' if allocating else 'a warm'} run, path "
                         f"{' -> '.join(report.path)}")
    return took, report


def timed(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None,
          stdout: Any = subprocess.DEVNULL) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run and time ``argv``. No timeout on purpose: with no pipe to read, Popen.wait with a
    timeout polls with growing sleeps and adds up to tens of milliseconds to the figure."""
    t = time.perf_counter()
    proc = subprocess.run(  # noqa: S603 - an argument list
        list(argv), stdout=stdout, stderr=subprocess.PIPE if stdout is subprocess.DEVNULL
        else subprocess.STDOUT, env=dict(env), cwd=cwd, text=True, check=False,
    )
    took = time.perf_counter() - t
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}")
    return took, proc


def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


# ------------------------------------------------------------- 1. warm-run overhead


def fig_warm(b: Bench) -> Figure:
    fig = Figure("warm", "1. Warm-run overhead (trivial script: srun true)", b.reps)
    spec = b.persistent_spec("warm", "srun true")
    spec_file = spec.repo_root / "job_spec.json"
    spec_file.write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    backend = SubprocessBackend()
    first_s, _ = run_ok(spec, backend, allocating=True)
    alloc = StateStore(spec.state_path).read()
    if alloc is None:
        raise BenchError("no state file after the allocating run")
    job_id, nodelist = alloc.job_id, alloc.nodelist
    fig.notes.append(f"allocation {job_id} on {nodelist}; the first run (allocating) took "
                     f"{first_s:.3f} s and is not counted")
    bare_env = b.env({
        "SLURM_JOB_ID": job_id, "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NODELIST": nodelist,
    })
    cli = [sys.executable, "-m", "slurm_fsm", "run", str(spec_file), "--json", "--quiet"]
    srun = ["srun", f"--jobid={job_id}", "-N1", "--ntasks-per-node=1", "true"]
    bare_log = spec.work_dir / "bare.log"

    def run_a() -> tuple[float, Report]:
        return run_ok(spec, backend, allocating=False)

    # a warm CLI: its bytecode cached, as after pip install (PYTHONDONTWRITEBYTECODE in
    # the caller's environment would make every start compile every module again)
    cli_env = {k: v for k, v in b.env().items() if k != "PYTHONDONTWRITEBYTECODE"}

    def run_b() -> float:
        took, proc = timed(cli, env=cli_env, stdout=subprocess.PIPE)
        data = json.loads(proc.stdout)
        if data.get("status") != "PASSED" or "Allocating" in data.get("path", []):
            raise BenchError(f"CLI run: {data.get('status')} {data.get('summary')}")
        return took

    def run_c() -> float:
        t = time.perf_counter()  # the log is opened inside the timing, as start_script does
        with open(bare_log, "wb") as fh:
            timed(["bash", str(spec.script_path)], env=bare_env, cwd=spec.work_dir, stdout=fh)
        return time.perf_counter() - t

    def run_d() -> float:
        return timed(srun, env=b.env())[0]

    def run_e() -> float:  # the interpreter's own start, no slurm_fsm
        return timed([sys.executable, "-c", "pass"], env=cli_env)[0]

    run_a(), run_b(), run_c(), run_d(), run_e()  # warm-up, not counted
    a: list[float] = []
    cli_s: list[float] = []
    c: list[float] = []
    d: list[float] = []
    e: list[float] = []
    parts: dict[str, list[float]] = {"step0_s": [], "start_s": [], "run_s": []}
    for i in range(b.reps):
        took, report = run_a()
        a.append(took)
        for k, v in parts.items():
            v.append(float(report.timings.get(k, 0.0)))
        cli_s.append(run_b())
        c.append(run_c())
        d.append(run_d())
        e.append(run_e())
        say(f"warm {i + 1}/{b.reps}: a {a[-1] * 1e3:.0f} ms, b {cli_s[-1] * 1e3:.0f} ms, "
            f"c {c[-1] * 1e3:.0f} ms, d {d[-1] * 1e3:.0f} ms, e {e[-1] * 1e3:.0f} ms")
    ms = 1e3
    fig.add("a_executor_ms", "(a) Executor.run() on a Ready allocation", "ms",
            [v * ms for v in a])
    fig.add("b_cli_ms", "(b) python -m slurm_fsm run SPEC --json --quiet", "ms",
            [v * ms for v in cli_s])
    fig.add("c_bare_bash_ms", "(c) bash script, SLURM_* exported by hand", "ms",
            [v * ms for v in c])
    sd = fig.add("d_bare_srun_ms", "(d) srun --jobid=J -N1 --ntasks-per-node=1 true", "ms",
                 [v * ms for v in d])
    fig.add("e_python_ms", "(e) python -c pass: the interpreter's own start", "ms",
            [v * ms for v in e])
    ac = fig.add("a_minus_c_ms", "(a)-(c): slurm_fsm in-process overhead", "ms",
                 [v * ms for v in paired(a, c)], note="paired per repetition")
    bc = fig.add("b_minus_c_ms", "(b)-(c): CLI overhead (interpreter start included)", "ms",
                 [v * ms for v in paired(cli_s, c)], note="paired per repetition")
    fig.add("b_minus_a_minus_e_ms", "(b)-(a)-(e): the CLI's imports and parsing", "ms",
            [(x - y - z) * ms for x, y, z in zip(cli_s, a, e, strict=True)],
            note="paired per repetition")
    fig.add("a_minus_c_over_d", "(a)-(c) in srun step latencies (d)", "x",
            [(x - y) / z for x, y, z in zip(a, c, d, strict=True)])
    fig.add("b_minus_c_over_d", "(b)-(c) in srun step latencies (d)", "x",
            [(x - y) / z for x, y, z in zip(cli_s, c, d, strict=True)])
    fig.add("a_step0_ms", "(a) of which step 0 (squeue: validate the allocation)", "ms",
            [v * ms for v in parts["step0_s"]])
    fig.add("a_start_ms", "(a) of which pre-flight (GPU srun) and script start", "ms",
            [v * ms for v in parts["start_s"]])
    fig.add("a_run_ms", "(a) of which script run and its monitor", "ms",
            [v * ms for v in parts["run_s"]])
    fig.add("a_run_minus_c_ms", "(a) script run and monitor minus (c): the monitor's lag", "ms",
            [v * ms for v in paired(parts["run_s"], c)], note="paired per repetition")
    fig.target("(a)-(c) <= 2 x (d)", ac.median, 2 * sd.median, "ms")
    # issue 13: a warm CLI run at most 0.1 s above the bare script plus its 2 srun steps
    fig.target("(b)-(c) <= 2 x (d) + 100 ms", bc.median, 2 * sd.median + 100, "ms")
    fig.notes.append("(a)-(e) run round-robin in each repetition, so drift hits all alike; "
                     "targets compare medians")
    fig.notes.append("(b) runs with its bytecode cached (the warm-up run writes it), as an "
                     "installed package does")
    b.release(spec)
    return fig


# ------------------------------------------------------------- 6. containers


def fig_containers(b: Bench) -> Figure:
    """First run (allocate + import + install) versus a repeated run versus one-shot,
    on real pyxis, 2 nodes, the local cluster's python image."""
    from slurm_fsm_dev import localcluster
    from slurm_fsm_dev.localpyxis import make_install_repo

    fig = Figure("containers", "6. Containers on real pyxis: first run, repeated run, one-shot "
                 "(2 nodes, python image)", b.reps)
    info = localcluster.current()
    if info is None or info.containers is None:
        raise BenchError("the local cluster has no containers: "
                         f"{info.containers_problem if info else 'cluster down'}")
    image = str(info.containers.images["python"])
    size_mb = Path(image).stat().st_size / 1e6
    check = "python3 -c 'import it_demo, it_devtool'"
    first: list[float] = []
    step0: list[float] = []
    again: list[float] = []
    oneshot: list[float] = []
    names: list[str] = []
    try:
        for i in range(b.reps):
            name = f"{b.tag}-c{i}"
            names.append(name)
            root = b._root(f"containers{i}")
            repo = make_install_repo(root / "repo")
            base = b.persistent_spec(
                f"containers{i}",
                f"srun -N 2 --ntasks-per-node=1 --container-name={name} "
                f"--container-mounts={repo}:{repo} {check}")
            data = base.to_dict()
            data.update(repo_root=str(repo), docker_image=image, container_name=name,
                        container_mounts=f"{repo}:{repo}")
            data["slurm_params"] = {**data["slurm_params"], "nodes": 2}
            spec = JobSpec.from_dict(data)
            b.specs.append(spec)
            took, report = run_ok(spec, b.backend, allocating=True)
            if "Installing" not in report.path:
                raise BenchError(f"first run did not install: {report.path}")
            first.append(took)
            step0.append(float(report.timings.get("step0_s", 0.0)))
            took, report = run_ok(spec, b.backend, allocating=False)
            if "Importing" in report.path or "Installing" in report.path:
                raise BenchError(f"repeated run imported or installed: {report.path}")
            again.append(took)
            shot = b.one_shot_spec(
                f"containers-oneshot{i}",
                "#SBATCH -N 2\n#SBATCH --ntasks-per-node=1\n"
                f"srun --container-image={image} python3 -c 'print(1)'")
            oneshot.append(run_ok(shot, b.backend)[0])
            b.release(spec)
            say(f"containers {i + 1}/{b.reps}: first {first[-1]:.2f} s, again "
                f"{again[-1]:.2f} s, one-shot {oneshot[-1]:.2f} s")
    finally:
        for name in names:  # containers outlive their jobs: remove this run's
            for d in info.containers.state_dir.glob(f"*/*/data/pyxis_{name}"):
                shutil.rmtree(d, ignore_errors=True)
    fig.add("first_s", "first run: allocate, import, 2 installs, job", "s", first)
    fig.add("first_step0_s", "first run, of which step 0 (allocate, import, install)", "s",
            step0)
    fig.add("again_s", "repeated run on that allocation (no import, no install)", "s", again)
    fig.add("oneshot_s", "one-shot sbatch, unnamed --container-image (imports every time)",
            "s", oneshot)
    fig.notes.append(f"image {Path(image).name}: {size_mb:.1f} MB squashfs (host python3.11 + "
                     "pip); the installs are an editable in-tree package and one from a path, "
                     "offline")
    fig.notes.append("each repetition: a new allocation (first run), the repeated run, a "
                     "one-shot job, then the allocation is released")
    return fig


# ------------------------------------------------- 2. persistent versus one-shot


def submitit_version(install: bool) -> str | None:
    """submitit's version, installing it into this interpreter when missing."""
    try:
        return importlib.metadata.version("submitit")
    except importlib.metadata.PackageNotFoundError:
        pass
    if not install:
        return None
    say(f"installing {SUBMITIT_REQUIREMENT} (benchmark-only dependency, extra 'bench')")
    proc = subprocess.run(  # noqa: S603 - an argument list
        [sys.executable, "-m", "pip", "install", "-q", SUBMITIT_REQUIREMENT],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        say(f"pip install {SUBMITIT_REQUIREMENT} failed: {proc.stderr.strip()[-500:]}")
        return None
    importlib.invalidate_caches()
    try:
        return importlib.metadata.version("submitit")
    except importlib.metadata.PackageNotFoundError:
        return None


def fig_series(b: Bench, *, install: bool, n_jobs: int = SERIES_JOBS) -> Figure:
    fig = Figure("series", f"2. Persistent versus one-shot: {n_jobs} small jobs (srun true)",
                 b.reps)
    p_spec = b.persistent_spec("series-p", "srun true")
    o_spec = b.one_shot_spec("series-o", "srun true")
    backend = SubprocessBackend()
    version = submitit_version(install)
    executor: Any = None
    command: Any = None
    if version is None:
        fig.notes.append("submitit is not installed (pip install -e '.[bench]'): its rows are "
                         "missing")
    else:
        submitit = importlib.import_module("submitit")
        executor = submitit.SlurmExecutor(folder=str(b.tmp / "submitit"))
        sub_name = f"{b.tag}-submitit"
        b.job_names.add(sub_name)
        executor.update_parameters(partition=b.partition, account=b.account, time=5,
                                   job_name=sub_name)
        # submitit runs the function in an srun step of its own: `true` there is the same
        # work as the scripts' `srun true` (a nested srun would wait for the busy node)
        command = submitit.helpers.CommandFunction(["true"])
        fig.notes.append(f"submitit {version}: SlurmExecutor, CommandFunction(['true']) in "
                         "its own srun step; job.result() polls every second")

    def one_shot() -> float:
        took, report = run_ok(o_spec, backend)
        if report.job_id:
            b.job_ids.add(report.job_id)
        return took

    def via_submitit() -> float:
        t = time.perf_counter()
        job = executor.submit(command)
        b.job_ids.add(str(job.job_id))
        job.result()
        return time.perf_counter() - t

    one_shot()  # warm-up of the one-shot path (not counted)
    if executor is not None:
        via_submitit()
    p_total: list[float] = []
    p_first: list[float] = []
    p_warm: list[float] = []
    o_total: list[float] = []
    s_total: list[float] = []
    for i in range(b.reps):
        b.release(p_spec)  # the series starts with no allocation: its first job allocates
        t0 = time.perf_counter()
        times = [run_ok(p_spec, backend, allocating=(j == 0))[0] for j in range(n_jobs)]
        p_total.append(time.perf_counter() - t0)
        p_first.append(times[0])
        p_warm.append(statistics.median(times[1:]))
        b.release(p_spec)
        t0 = time.perf_counter()
        for _ in range(n_jobs):
            one_shot()
        o_total.append(time.perf_counter() - t0)
        if executor is not None:
            t0 = time.perf_counter()
            for _ in range(n_jobs):
                via_submitit()
            s_total.append(time.perf_counter() - t0)
        say(f"series {i + 1}/{b.reps}: persistent {p_total[-1]:.2f} s, one-shot "
            f"{o_total[-1]:.2f} s" + (f", submitit {s_total[-1]:.2f} s" if s_total else ""))
    per = float(n_jobs)
    fig.add("persistent_total_s", f"persistent: {n_jobs} jobs, total (first allocates)", "s",
            p_total)
    p_per = fig.add("persistent_per_job_s", "persistent: per job", "s",
                    [v / per for v in p_total])
    fig.add("persistent_first_s", "persistent: first job (salloc + run)", "s", p_first)
    fig.add("persistent_warm_s", "persistent: warm job (median within the series)", "s",
            p_warm)
    fig.add("one_shot_total_s", f"one-shot (sbatch): {n_jobs} jobs, total", "s", o_total)
    o_per = fig.add("one_shot_per_job_s", "one-shot: per job", "s", [v / per for v in o_total])
    if s_total:
        fig.add("submitit_total_s", f"submitit: {n_jobs} jobs, total", "s", s_total)
        fig.add("submitit_per_job_s", "submitit: per job", "s", [v / per for v in s_total])
    ratio = fig.add("one_shot_over_persistent", "one-shot per job / persistent per job", "x",
                    [o / p for o, p in zip(o_total, p_total, strict=True)])
    if s_total:
        fig.add("submitit_over_persistent", "submitit per job / persistent per job", "x",
                [s / p for s, p in zip(s_total, p_total, strict=True)])
    fig.target("persistent >= 10x faster per job than one-shot", ratio.median, 10.0, "x",
               at_least=True)
    fig.notes.append(f"per job = series total / {n_jobs}; persistent per job "
                     f"{p_per.median:.3f} s vs one-shot {o_per.median:.3f} s; jobs run one "
                     "after another; each repetition runs the three series in turn")
    return fig


# ------------------------------------------------------------ 3. controller load


def fig_load(b: Bench) -> Figure:
    fig = Figure("load", "3. Controller load: Slurm commands issued", b.reps)
    counter = CountingRunner()
    backend = CountingBackend(counter)
    spec = b.persistent_spec("load", "srun true")
    mark = counter.mark()
    run_ok(spec, backend, allocating=True)
    first_counts = counter.counts(mark)
    first_counts["salloc"] += 1  # started by allocate() with Popen, not through the runner
    fig.notes.append("allocating run: " + _counts_text(first_counts)
                     + " (salloc is not seen by the runner; counted from the report's path)")
    run_ok(spec, backend, allocating=False)  # warm-up
    totals: list[float] = []
    named = ("squeue", "srun", "scontrol")
    by_cmd: dict[str, list[float]] = {k: [] for k in (*named, "other")}
    for _ in range(b.reps):
        mark = counter.mark()
        run_ok(spec, backend, allocating=False)
        got = counter.counts(mark)
        totals.append(float(sum(got.values())))
        for k in named:
            by_cmd[k].append(float(got[k]))
        by_cmd["other"].append(float(sum(n for k, n in got.items() if k not in named)))
    fig.add("warm_run_commands", "persistent warm run, no GPU asked: Slurm commands",
            "cmd/run", totals)
    fig.add("warm_run_squeue", "  of which squeue (the allocation before and after the "
            "job; its steps, -s)", "cmd/run", by_cmd["squeue"])
    fig.add("warm_run_srun", "  of which srun (the run's lease step; a job that asks GPUs "
            "adds the GPU pre-flight)", "cmd/run", by_cmd["srun"])
    fig.add("warm_run_scontrol", "  of which scontrol (show step: a step of the job "
            "waiting for GPUs?)", "cmd/run", by_cmd["scontrol"])
    fig.add("warm_run_other", "  of which other", "cmd/run", by_cmd["other"])
    fig.add("original_per_run", "original procedure per run (2 squeue + 1 GPU srun)",
            "cmd/run", Stat.single(float(sum(ORIGINAL_PER_RUN.values()))))

    # One-shot short jobs: everything issued per job (sbatch, squeue, sacct).
    o_spec = b.one_shot_spec("load-o", "srun true")
    o_totals: list[float] = []
    for _ in range(b.reps):
        mark = counter.mark()
        _, report = run_ok(o_spec, backend)
        if report.job_id:
            b.job_ids.add(report.job_id)
        o_totals.append(float(sum(counter.counts(mark).values())))
    fig.add("one_shot_run_commands", "one-shot short job: Slurm commands (sbatch, squeue, "
            "sacct)", "cmd/run", o_totals)

    # A long job watched on each path (one repetition: it takes minutes), in parallel.
    long_s = b.long_s
    say(f"load: watching a {long_s} s job on each path (one repetition, both at once)")
    p_long = attrs.evolve(spec, script_path=_script(spec.repo_root / "long.slurm",
                                                     f"srun sleep {long_s}"))
    o_long = b.one_shot_spec("load-long", f"srun sleep {long_s}")
    results: dict[str, tuple[float, float, Counter[str]]] = {}
    errors: list[BaseException] = []

    def watch(kind: str, s: JobSpec) -> None:
        runner = CountingRunner()
        events = WindowEvents()
        try:
            _, report = run_ok(s, CountingBackend(runner), events=events)
        except BaseException as exc:
            errors.append(exc)
            return
        if report.job_id and kind == "one-shot":
            b.job_ids.add(report.job_id)
        start = events.watch_started
        end = runner.first("sacct", start or 0.0) if kind == "one-shot" else events.done
        if start is None or end is None:
            errors.append(BenchError(f"{kind}: no monitoring window seen"))
            return
        results[kind] = (end - start, float(report.elapsed_s or 0.0),
                         runner.counts(start=start, end=end))

    threads = [threading.Thread(target=watch, args=("persistent", p_long)),
               threading.Thread(target=watch, args=("one-shot", o_long))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError(f"long-job runs: {errors}")
    for kind in ("persistent", "one-shot"):
        window, _elapsed, got = results[kind]
        n = float(sum(got.values()))
        fig.add(f"{kind}_monitor_per_min", f"{kind}: commands per minute watching a "
                f"{long_s} s job", "cmd/min", Stat.single(n / (window / 60.0)),
                note=f"{n:.0f} command(s) ({_counts_text(got) or 'none'}) in {window:.1f} s, "
                     "one repetition")
    fig.add("one_shot_end_latency_s", f"one-shot: watch time for the {long_s} s job", "s",
            Stat.single(results["one-shot"][0]),
            note="the job's end is seen at the next squeue poll (back-off to 30 s)")

    # The same monitor over an hour, on the FakeCluster's clock (no real time passes).
    fake = _fake()
    hour = b.tmp / "fake-hour"
    h_script = _script(hour / "hour.slurm", "#SBATCH --output=hour_%j.out\ntrue")
    fake.script(h_script, FakeScript(lines=tuple(f"step {i}" for i in range(60)),
                                     line_interval_s=60.0))
    h_spec = JobSpec.from_dict({
        "script_path": str(h_script), "work_dir": str(hour / "work"), "model_name": "hour",
        "repo_root": str(hour), "persistent_mode": False, "log_file_pattern": "hour_%j.out",
        "monitor_timeout_seconds": 7200,
        "slurm_params": {"partition": "debug", "account": "acct", "nodes": 1},
    })
    Executor(h_spec, fake, clock=fake.clock).run()
    q = fake.count("query_job")
    fig.add("one_shot_1h_per_min", "one-shot: squeue per minute over a 1 h job (fake clock)",
            "cmd/min", Stat.single(q / 60.0),
            note=f"{q} squeue in 3600 s: fast at first (0.5, 1, 2 ... s), then every 30 s")
    fig.add("original_monitor_per_min", "original procedure while monitoring (poll every 30 s)",
            "cmd/min", Stat.single(60.0 / ORIGINAL_POLL_S),
            note="one squeue per poll, either mode")
    fig.notes.append("counted with a recording runner around the real SubprocessBackend "
                     "(argv[0]), and the lease srun it spawns; the job script's own srun "
                     "is not slurm_fsm's and is not counted, as in the original procedure's "
                     "figures")
    b.release(spec)
    return fig


def _counts_text(c: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(c.items()) if n)


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/bash\n{body}\n")
    return path


def _fake() -> FakeCluster:
    return FakeCluster(partitions={"debug": ["n1", "n2", "n3"]}, accounts=["acct"])


# ----------------------------------------------------------------- 4. monitor cost

#: Writes argv[1] lines of 64 KiB to stdout, at argv[2] bytes per second (0: no limit).
WRITER = (
    "import sys, time\n"
    "n, rate = int(sys.argv[1]), float(sys.argv[2]); w = sys.stdout.buffer\n"
    "t0 = time.monotonic()\n"
    "for i in range(n):\n"
    "    w.write((b'step %08d loss 0.1234 ' % i).ljust(65535, b'.') + b'\\n')\n"
    "    if rate and i % 16 == 15:\n"
    "        w.flush(); time.sleep(max(0.0, t0 + (i + 1) * 65536 / rate - time.monotonic()))\n"
    "w.flush()\n"
)
#: The writer's pace per mode of figure 4 (bytes per second; 0: as fast as it can).
MONITOR_MODES = {"fast": 0, "paced": 64 * MIB}


class CountingScript:
    """A LocalScript whose poll() calls are counted: one per pass of the monitor's loop."""

    def __init__(self, inner: LocalScript) -> None:
        self.inner = inner
        self.polls = 0

    @property
    def log_path(self) -> Path:
        return self.inner.log_path

    def poll(self) -> int | None:
        self.polls += 1
        return self.inner.poll()

    def wait_up_to(self, timeout_s: float) -> int | None:
        try:
            return self.inner.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def terminate(self) -> None:
        self.inner.terminate()

    @property
    def identity(self) -> dict[str, str | int]:
        return self.inner.identity


def monitor_child(size: int, folder: Path, rate: int) -> dict[str, float]:
    """In a process of its own: the monitor (watch_script) over a writer of ``size`` bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = folder / "writer.py"
    writer.write_text(WRITER)
    script = _script(folder / "writer.sh",
                     f'exec "{sys.executable}" "{writer}" {size // LINE_BYTES} {rate}')
    log = folder / "big.log"

    backend = SubprocessBackend()
    try:
        cpu0, wall0, sys0 = time.process_time(), time.perf_counter(), os.times().system
        running = CountingScript(backend.start_script(ScriptRequest(
            script_path=script, log_path=log, env={}, cwd=folder)))
        watch = watch_script(running, timeout_s=3600.0,
                             clock=SystemClock(), stop=lambda _w: None)  # no steps
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        system = os.times().system - sys0
        written = log.stat().st_size
    finally:
        log.unlink(missing_ok=True)
    if watch.exit_code != 0:
        raise BenchError(f"writer exited {watch.exit_code}")
    return {
        "cpu_s": cpu, "system_s": system, "wall_s": wall, "bytes_read": float(watch.bytes_read),
        "bytes_written": float(written), "polls": float(running.polls),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def fig_monitor(b: Bench, reps: int) -> Figure:
    fig = Figure("monitor", "4. Monitor cost: a writer fills a log in 64 KiB lines", reps)
    folder = Path(tempfile.mkdtemp(prefix=f"{b.tag}-monitor-", dir="/tmp"))
    runs: dict[tuple[str, int], list[dict[str, float]]] = {
        (m, s): [] for m in MONITOR_MODES for s in MONITOR_SIZES}
    try:
        for i in range(reps):
            for (mode, size), got in runs.items():
                proc = subprocess.run(  # noqa: S603 - an argument list
                    [sys.executable, str(Path(__file__).resolve()), "--monitor-child",
                     str(size), str(folder), str(MONITOR_MODES[mode])],
                    capture_output=True, text=True, timeout=1800, check=False,
                )
                if proc.returncode != 0:
                    raise BenchError(f"monitor child ({mode}, {size} bytes): "
                                     f"{proc.stderr[-2000:]}")
                got.append(json.loads(proc.stdout))
            say(f"monitor {i + 1}/{reps}: " + ", ".join(
                f"{m} {s // MIB} MiB {r[-1]['cpu_s']:.2f} CPU s"
                for (m, s), r in runs.items()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    worst = 0.0
    for mode, rate in MONITOR_MODES.items():
        per_gib: list[float] = []
        for size in MONITOR_SIZES:
            got = runs[(mode, size)]
            label = f"{mode}, {size // MIB} MiB" if size < GIB else f"{mode}, {size // GIB} GiB"
            key = f"{mode}_{size // MIB}mib"
            per_gib.append(fig.add(
                f"cpu_s_per_gib_{key}", f"{label}: monitor CPU seconds per GiB", "s/GiB",
                [r["cpu_s"] / (r["bytes_written"] / GIB) for r in got],
                note=f"CPU s median {statistics.median(r['cpu_s'] for r in got):.3f}, of "
                     f"which system {statistics.median(r.get('system_s', 0.0) for r in got):.3f}",
            ).median)
            diffs = [100.0 * (r["bytes_read"] - r["bytes_written"]) / r["bytes_written"]
                     for r in got]
            worst = max([worst, *(abs(x) for x in diffs)])
            fig.add(f"read_minus_written_pct_{key}",
                    f"{label}: (bytes read - bytes written) / written", "%", diffs)
            fig.add(f"polls_{key}", f"{label}: polls", "polls", [r["polls"] for r in got])
            fig.add(f"max_rss_mib_{key}", f"{label}: monitor process peak RSS", "MiB",
                    [r["max_rss_mib"] for r in got])
        spread = max(per_gib) / min(per_gib)
        fig.target(f"{mode}: CPU linear in size (max/min CPU s per GiB over 256 MiB, "
                   "512 MiB, 1 GiB <= 1.25)", spread, 1.25, "x")
        fig.notes.append(f"{mode}: the writer writes " + (
            f"{rate // MIB} MiB/s" if rate else "as fast as it can (about 1 GiB/s here)"))
    fig.target("bytes read within 1% of bytes written (worst repetition, both modes)", worst,
               1.0, "%")
    fig.notes.append(
        f"{reps} repetition(s) per size and mode (fewer than the other figures: a repetition "
        "writes 3.5 GiB twice); the monitor is watch_script over "
        "SubprocessBackend.start_script (its own poll schedule: 10 ms backing off to 1 s), "
        "each measurement in a fresh process (CPU = time.process_time of that process, peak "
        "RSS = its ru_maxrss, a few tens of MiB of it the interpreter); the log is in /tmp and "
        "deleted after each run")
    return fig


# ------------------------------------------------------------- 5. fake cluster


def fig_fake(b: Bench, runs: int = FAKE_RUNS) -> Figure:
    fig = Figure("fake", f"5. FakeCluster speed ({runs} runs per repetition)", b.reps)
    base = b.tmp / "fake"
    variants = {
        "no image": {},
        "image (import + install)": {"docker_image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                     "container_name": "bench"},
    }
    for label, extra in variants.items():
        key = "image" if extra else "noimage"
        root = base / key
        script = _script(root / "job.slurm", "srun true")
        spec = JobSpec.from_dict({
            "script_path": str(script), "work_dir": str(root / "work"), "model_name": "fake",
            "repo_root": str(root), "workflow_type": "custom",
            "slurm_params": {"partition": "debug", "account": "acct", "nodes": 1}, **extra,
        })
        alloc_rate: list[float] = []
        warm_rate: list[float] = []
        for _ in range(b.reps):
            spent = 0.0
            for _ in range(runs):
                fake = _fake()
                spec.state_path.unlink(missing_ok=True)
                t = time.perf_counter()
                m = AllocationMachine(spec, fake, clock=fake.clock)
                state = m.prepare().state
                spent += time.perf_counter() - t
                if state is not State.Ready or "Allocating" not in m.path:
                    raise BenchError(f"fake allocating run ended {state}: {m.path}")
            alloc_rate.append(runs / spent)
            spent = 0.0
            for _ in range(runs):
                t = time.perf_counter()
                m = AllocationMachine(spec, fake, clock=fake.clock)
                state = m.prepare().state
                spent += time.perf_counter() - t
                if state is not State.Ready or "Allocating" in m.path:
                    raise BenchError(f"fake warm run ended {state}: {m.path}")
            warm_rate.append(runs / spent)
        fig.add(f"alloc_runs_per_s_{key}", f"step 0, first run allocating, {label}", "runs/s",
                alloc_rate)
        fig.add(f"warm_runs_per_s_{key}", f"step 0, warm reuse, {label}", "runs/s", warm_rate)
    # A whole job (steps 0-5) on the fake cluster, warm: what a user's test runs.
    root = base / "executor"
    script = _script(root / "job.slurm", "srun true")
    spec = JobSpec.from_dict({
        "script_path": str(script), "work_dir": str(root / "work"), "model_name": "fake",
        "repo_root": str(root), "success_patterns": "passed",
        "slurm_params": {"partition": "debug", "account": "acct", "nodes": 1},
    })
    fake = _fake()
    fake.script(script, FakeScript(lines=("3 passed in 0.1s",), line_interval_s=0.0))
    Executor(spec, fake, clock=fake.clock).run()
    rates: list[float] = []
    for _ in range(b.reps):
        t = time.perf_counter()
        for _ in range(runs):
            r = Executor(spec, fake, clock=fake.clock).run()
            if r.status is not Status.PASSED:
                raise BenchError(f"fake Executor run: {r.status.value}: {r.summary}")
        rates.append(runs / (time.perf_counter() - t))
    fig.add("executor_runs_per_s", "Executor.run(), warm, whole job (steps 0-5)", "runs/s",
            rates)
    fig.notes.append("a run = AllocationMachine(spec, fake).prepare() (machine construction "
                     "included; FakeCluster construction and the state file's deletion are "
                     "not), in a temporary folder, on the fake clock")
    return fig


# --------------------------------------------------------------------- reporting


def machine_info() -> dict[str, Any]:
    def text(argv: Sequence[str]) -> str:
        try:
            return subprocess.run(  # noqa: S603 - an argument list
                list(argv), capture_output=True, text=True, timeout=30, check=False,
            ).stdout.strip()
        except OSError:
            return ""

    mem_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    try:
        sub = importlib.metadata.version("submitit")
    except importlib.metadata.PackageNotFoundError:
        sub = None
    return {
        "machine": platform.machine(),
        "uname": " ".join(os.uname()),
        "cpu_count": os.cpu_count(),
        "nproc": len(os.sched_getaffinity(0)),
        "memory_mib": mem_kib // 1024,
        "slurm_version": text(["sinfo", "--version"]),
        "python": platform.python_version(),
        "slurm_fsm": importlib.metadata.version("slurm_fsm"),
        "submitit": sub,
        "git_commit": text(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def render_text(figs: Sequence[Figure]) -> str:
    lines: list[str] = []
    width = 74
    for f in figs:
        lines.append("")
        lines.append(f"{f.title}  [{f.reps} rep(s), {f.seconds:.0f} s]")
        if f.error:
            lines.append(f"  ERROR: {f.error}")
            continue
        lines.append(f"  {'measurement':<{width}} {'median':>10} {'min':>10} {'max':>10}  unit")
        for r in f.rows:
            s, u = r.stat, r.unit
            lines.append(f"  {r.label:<{width}} {fmt(s.median, u):>10} {fmt(s.min, u):>10} "
                         f"{fmt(s.max, u):>10}  {u}" + (f"  ({r.note})" if r.note else ""))
        for t in f.targets:
            lines.append(f"  target: {t.line()}")
        for n in f.notes:
            lines.append(f"  note: {n}")
    return "\n".join(lines) + "\n"


def render_markdown(machine: Mapping[str, Any], figs: Mapping[str, Mapping[str, Any]]) -> str:
    out = [
        f"Written {machine['date']} (commit {machine.get('git_commit') or '?'}; each figure "
        f"below carries the date it was measured) on "
        f"`{machine['uname']}`: {machine['nproc']} CPUs, {machine['memory_mib']} MiB memory, "
        f"{machine['slurm_version']}, Python {machine['python']}"
        + (f", submitit {machine['submitit']}" if machine.get("submitit") else "") + ".",
        "",
    ]
    for name in FIGURES:
        f = figs.get(name)
        if f is None:
            continue
        out.append(f"### {f['title']}")
        out.append("")
        out.append(f"{f['reps']} repetition(s), {f['date']}, {f['seconds']:.0f} s.")
        out.append("")
        if f.get("error"):
            out += [f"Error: {f['error']}", ""]
            continue
        out.append("| measurement | median | min | max | unit |")
        out.append("|---|---:|---:|---:|---|")
        for r in f["rows"]:
            u = r["unit"]
            label = r["label"].strip().replace("|", "\\|")
            if r.get("note"):
                label += f" ({r['note']})"
            out.append(f"| {label} | {fmt(r['median'], u)} | {fmt(r['min'], u)} | "
                       f"{fmt(r['max'], u)} | {u} |")
        out.append("")
        # the docs build draws each chart from the results file (benchmarks/charts.py)
        out += [charts.marker(c) for c in charts.charts_of(name, figs)]
        if charts.charts_of(name, figs):
            out.append("")
        for t in f["targets"]:
            verdict = "**met**" if t["met"] else "**not met**"
            out.append(f"- Target {t['text']}: {fmt(t['value'], t['unit'])} against "
                       f"{fmt(t['limit'], t['unit'])} {t['unit']}: {verdict}.")
        for n in f["notes"]:
            out.append(f"- {n}")
        out.append("")
    return "\n".join(out)


def update_docs(machine: Mapping[str, Any], figs: Mapping[str, Mapping[str, Any]]) -> bool:
    try:
        text = DOCS.read_text()
    except OSError:
        return False
    if TABLE_START not in text or TABLE_END not in text:
        return False
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    DOCS.write_text(f"{head}{TABLE_START}\n{render_markdown(machine, figs)}\n{TABLE_END}{tail}")
    return True


# -------------------------------------------------------------------------- main


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM runs the cleanup too (as Ctrl-C does)."""

    def handler(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=MIN_REPS,
                   help=f"repetitions per figure (default {MIN_REPS}; fewer for development)")
    p.add_argument("--monitor-reps", type=int, default=None,
                   help=f"repetitions of figure 4 (default: --reps, at most {MONITOR_REPS})")
    p.add_argument("--only", action="append", default=[],
                   help=f"run only these figures (comma-separated, repeatable): "
                        f"{', '.join(FIGURES)}")
    p.add_argument("--long-job-s", type=int, default=LONG_JOB_S,
                   help=f"length of the long job of figure 3 (default {LONG_JOB_S} s)")
    p.add_argument("--out", type=Path, default=RESULTS, help="results file (JSON)")
    p.add_argument("--no-docs", action="store_true",
                   help="do not rewrite the table in docs/benchmarks.md")
    p.add_argument("--no-install", action="store_true",
                   help="do not pip install submitit when it is missing")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary folder")
    p.add_argument("--render-docs", action="store_true",
                   help="only rewrite the table in docs/benchmarks.md from the results file")
    p.add_argument("--monitor-child", nargs=3, metavar=("BYTES", "DIR", "RATE"),
                   help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.monitor_child:
        size, folder, rate = args.monitor_child
        print(json.dumps(monitor_child(int(size), Path(folder), int(rate))))
        return 0
    if args.render_docs:
        saved = json.loads(args.out.read_text())
        if not update_docs(saved["machine"], saved["figures"]):
            print(f"no table markers in {DOCS}", file=sys.stderr)
            return 1
        say(f"table in {DOCS} rewritten from {args.out}")
        return 0
    only = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = sorted(set(only) - set(FIGURES))
    if unknown:
        print(f"unknown figure(s) {unknown}; choose from {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    if args.reps < 1:
        print("--reps must be >= 1", file=sys.stderr)
        return 2
    selected = [n for n in FIGURES if not only or n in only]
    needs_slurm = any(n in ("warm", "series", "load", "containers") for n in selected)
    partition, account = "debug", "acct"
    if needs_slurm:
        from slurm_fsm_dev import localcluster

        say("bringing the local Slurm cluster up (reused when it is up)")
        info = localcluster.up()
        os.environ["SLURM_CONF"] = str(info.slurm_conf)
        partition, account = info.partition, info.account
    tag = f"bench{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix=f"slurm_fsm-{tag}-", dir="/tmp"))
    bench = Bench(reps=args.reps, tmp=tmp, tag=tag, partition=partition, account=account,
                  long_s=args.long_job_s)
    runners: dict[str, Callable[[], Figure]] = {
        "warm": lambda: fig_warm(bench),
        "series": lambda: fig_series(bench, install=not args.no_install),
        "load": lambda: fig_load(bench),
        "monitor": lambda: fig_monitor(bench, args.monitor_reps or min(args.reps, MONITOR_REPS)),
        "fake": lambda: fig_fake(bench),
        "containers": lambda: fig_containers(bench),
    }
    figs: list[Figure] = []
    interrupted = False
    try:
        with sigterm_as_interrupt():
            for name in selected:
                say(f"figure {name}")
                busy = (bench.other_jobs() if name in ("warm", "series", "load", "containers")
                        else 0)
                t0 = time.perf_counter()
                try:
                    fig = runners[name]()
                except Exception as exc:  # any failure: record it, go on with the next
                    traceback.print_exc()
                    fig = Figure(name, name, args.reps, error=f"{type(exc).__name__}: {exc}")
                fig.seconds = time.perf_counter() - t0
                fig.date = datetime.now(UTC).isoformat(timespec="seconds")
                if busy > 0:
                    fig.notes.append(f"{busy} job(s) of others were on the shared cluster "
                                     "when this figure started")
                figs.append(fig)
                sys.stdout.write(render_text([fig]))
                sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: cleaning up")
    finally:
        if needs_slurm:
            say("cleanup: releasing allocations and cancelling this run's jobs")
            bench.cleanup()
        if args.keep_tmp:
            say(f"temporary folder kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if not figs:
        return 130 if interrupted else 1
    machine = machine_info()
    data: dict[str, Any] = {"machine": machine, "figures": {}}
    if only and args.out.exists():  # a partial run updates its figures only
        with contextlib.suppress(ValueError, OSError):
            old = json.loads(args.out.read_text())
            if isinstance(old.get("figures"), dict):
                data["figures"].update(old["figures"])
    data["figures"].update({f.name: f.to_json() for f in figs})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    say(f"results written to {args.out}")
    full = not only and args.reps >= MIN_REPS and not interrupted
    docs = full and not args.no_docs and args.out.resolve() == RESULTS.resolve()
    if docs and update_docs(machine, data["figures"]):
        say(f"table updated in {DOCS}")
    print("\nSummary (targets never fail the run):")
    for f in figs:
        for t in f.targets:
            print(f"  [{f.name}] {t.line()}")
    if any(f.error for f in figs) or interrupted:
        return 130 if interrupted else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
