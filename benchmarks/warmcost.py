"""A warm run's own cost (issue 42 item 5) and ``slurm-fsm logs`` in each state (issue 39).

``python -m benchmarks.warmcost`` (needs the local cluster: brought up when it is not)
measures, in one warm allocation of one node, medians of ``--reps`` rounds, the kinds
interleaved round by round (the machine is shared: only figures of one measurement are
compared):

- **bare step**: ``srun --jobid=J -N1 -n1 true``;
- **script by hand**: the job's script (``srun -N1 -n1 true``) run with ``bash`` in the
  allocation (``SLURM_JOB_ID=J``), as a person would;
- **library**: ``Executor(spec, SubprocessBackend()).run()`` of that script, warm (a
  process of its own does ``--reps`` runs; the time to the report), and the time from
  the report until the run's lease step is gone (after the report since this change);
- **CLI**: ``python -m slurm_fsm run spec.json --json --quiet``, the whole process;
- **first Slurm command**: for the library's and the CLI's warm runs, the time from the
  call (the library) or the process's start (the CLI) to the run's first Slurm command,
  noted by stand-ins of the Slurm tools first on ``PATH`` (:func:`shims`; every run
  measured here goes through them alike);
- **CLI's start**: a process importing what the CLI's ``run`` imports before its first
  Slurm command (:data:`RUN_PATH`): wall and CPU seconds;
- **logs**: ``python -m slurm_fsm logs RUN_ID`` of a run not started yet, running and
  done: wall and CPU seconds of the process;
- **import**: ``python -X importtime`` of ``slurm_fsm.executor`` and of the ``logs``
  command's modules (the sum of their own times).

Each kind through the library, the CLI, ``logs`` and the import is measured for this
checkout (``after``) and, with ``--before DIR`` (a ``slurm_fsm`` package folder's parent,
e.g. ``git archive BASE slurm_fsm | tar -x -C DIR``), for that one too, in the same
rounds. Every process runs with its version's bytecode cached
(``PYTHONPYCACHEPREFIX`` in a temporary folder, compiled first), as an installed
package's is: this machine sets ``PYTHONDONTWRITEBYTECODE``, under which each start
compiles the package again. Results go to ``benchmarks/warmcost.json`` and the table
of ``docs/benchmarks.md`` ("A warm run's own cost"; ``--no-docs`` leaves it,
``--render-docs`` redraws it from the file); figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "warmcost.json"
DOC = REPO / "docs" / "benchmarks.md"
TABLE_BEGIN = "<!-- warmcost-table:begin -->"
TABLE_END = "<!-- warmcost-table:end -->"
SCRIPT = "#!/bin/bash\nsrun -N1 -n1 true\n"
GATED = "#!/bin/bash\nsrun -N1 -n1 true\nuntil [ -e {gate} ]; do sleep 0.05; done\n"

#: The library's side, run in a process of its own with the version under test first on
#: sys.path: ``reps`` warm runs of the spec, the time to each report and from the report
#: until the lease step is gone, as JSON.
LIBRARY = r"""
import json, sys, time
from pathlib import Path
from slurm_fsm import JobSpec, SubprocessBackend
from slurm_fsm.executor import Executor
try:
    from slurm_fsm import leasestop
except ImportError:  # before this change: the report waited for the lease
    leasestop = None
spec = JobSpec.from_file(Path(sys.argv[1]))
backend = SubprocessBackend()
shim_log = Path(sys.argv[3])
out = {"report_s": [], "lease_gone_s": [], "status": [], "first_slurm_s": []}
for _ in range(int(sys.argv[2])):
    shim_log.write_text("")
    t_wall = time.time()
    t0 = time.monotonic()
    report = Executor(spec, backend).run()
    t1 = time.monotonic()
    out["first_slurm_s"].append(float(shim_log.read_text().split()[0]) - t_wall)
    if leasestop is not None:
        leasestop.settle()
    out["report_s"].append(t1 - t0)
    out["lease_gone_s"].append(time.monotonic() - t1)
    out["status"].append(report.status.name)
print(json.dumps(out))
"""


#: The Slurm commands a run may issue; each is wrapped (:func:`shims`) to note when it
#: was first called.
SLURM_TOOLS = ("sacct", "sacctmgr", "salloc", "sbatch", "scancel", "scontrol", "sinfo",
               "squeue", "srun", "sstat")


def shims(folder: Path, path: str, log: Path) -> str:
    """A folder of stand-ins for :data:`SLURM_TOOLS` found on ``path``: each appends
    the moment it was called (bash's ``EPOCHREALTIME``: no process of its own) to
    ``log`` and ``exec`` s the real tool. Returns the PATH that puts them first. The
    time to a run's first Slurm command is the first line of ``log`` minus the run's
    start, the same stand-in cost for the library and the CLI."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in SLURM_TOOLS:
        real = shutil.which(tool, path=path)
        if real is None:
            continue
        stub = folder / tool
        stub.write_text(f'#!/bin/bash\necho "$EPOCHREALTIME" >> {log}\nexec {real} "$@"\n')
        stub.chmod(0o755)
    return f"{folder}:{path}"


def first_command_s(log: Path, start: float) -> float:
    """Seconds from ``start`` (``time.time()``) to the first Slurm command ``log`` noted."""
    return float(log.read_text().split()[0]) - start


#: What the CLI's ``run`` imports before its first Slurm command (the interpreter's start
#: and these modules: the process ``cli_imports`` measures).
RUN_PATH = ("import slurm_fsm.cli, slurm_fsm.preflight, slurm_fsm.progress, "
            "slurm_fsm.scriptcheck, slurm_fsm.spec, slurm_fsm.subprocess_backend, "
            "slurm_fsm.executor")


def say(text: str) -> None:
    print(f"[warmcost] {text}", file=sys.stderr, flush=True)


def timed(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
          ) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds (the child's user + system) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(list(argv), env=dict(env), cwd=cwd, capture_output=True,  # noqa: S603
                          text=True, timeout=300, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, cpu, proc


def version_env(base: Mapping[str, str], pythonpath: Path | None, pycache: Path
                ) -> dict[str, str]:
    """The environment of one version's processes: its package first on the path, and
    its bytecode cached (in ``pycache``, outside the checkout), as an installed
    package's is: a ``PYTHONDONTWRITEBYTECODE`` of the caller's would make each start
    compile the whole package again."""
    env = dict(base)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def compile_package(env: Mapping[str, str]) -> None:
    """Write the bytecode of the package the environment imports (once, before any
    figure)."""
    code = ("import compileall, os, slurm_fsm; "
            "compileall.compile_dir(os.path.dirname(slurm_fsm.__file__), quiet=1)")
    subprocess.run([sys.executable, "-c", code], env=dict(env), capture_output=True,  # noqa: S603
                   timeout=300, check=True)


def write_spec(folder: Path, cluster: Any, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.slurm").write_text(body)
    spec = folder / "spec.json"
    spec.write_text(json.dumps({
        "script_path": "job.slurm", "work_dir": "work", "model_name": "warmcost",
        "workflow_type": "custom", "repo_root": ".", "alloc_time_limit": "00:30:00",
        "alloc_job_name": f"{cluster.account}-bench-warmcost-{os.getpid()}.persistent",
        "monitor_timeout_seconds": 120,
        "slurm_params": {"partition": cluster.partition, "account": cluster.account,
                         "nodes": 1, "ntasks_per_node": 1}}))
    return spec


def import_ms(env: Mapping[str, str], argv: Sequence[str], cwd: Path) -> float:
    """The sum of the modules' own import times (``-X importtime``), in ms."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], env=dict(env),  # noqa: S603
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    total = 0
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            total += int(line.split("|")[0].split(":")[1])
    return total / 1000.0


def median_ms(values: Sequence[float]) -> float:
    return round(statistics.median(values) * 1000.0, 1)


def measure(cluster: Any, root: Path, reps: int, before: Path | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(cluster.env)
    shim_log = root / "slurm-calls.log"
    env["PATH"] = shims(root / "shims", env.get("PATH", os.defpath), shim_log)
    versions = {"after": version_env(env, None, root / "pycache-after")}
    if before is not None:
        versions["before"] = version_env(env, before, root / "pycache-before")
    for venv in versions.values():
        compile_package(venv)
    spec = write_spec(root / "warm", cluster, SCRIPT)
    cli = [sys.executable, "-m", "slurm_fsm"]
    say("warm-up run (step 0: the allocation)")
    _, _, first = timed([*cli, "run", str(spec), "--json", "--quiet"], versions["after"],
                        spec.parent)
    job = json.loads(first.stdout)["allocation_id"]
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    step_env = dict(env)
    hand_env = {**env, "SLURM_JOB_ID": job, "SLURM_JOBID": job}
    for i in range(reps):
        say(f"round {i + 1}/{reps}")
        add("bare_step", timed(["srun", f"--jobid={job}", "-N1", "-n1", "true"], step_env)[0])
        add("script_by_hand", timed(["bash", str(spec.parent / "job.slurm")], hand_env)[0])
        order = list(versions.items())
        for name, venv in order if i % 2 == 0 else order[::-1]:  # each first in turn
            wall, cpu, _ = timed([sys.executable, "-c", RUN_PATH], venv, spec.parent)
            add(f"cli_imports_{name}", wall)
            add(f"cli_imports_cpu_{name}", cpu)
            shim_log.write_text("")
            start = time.time()
            wall, cpu, proc = timed([*cli, "run", str(spec), "--json", "--quiet"], venv,
                                    spec.parent)
            assert json.loads(proc.stdout)["status"] == "PASSED", proc.stdout
            add(f"cli_{name}", wall)
            add(f"cli_cpu_{name}", cpu)
            add(f"cli_first_slurm_{name}", first_command_s(shim_log, start))
    for name, venv in versions.items():  # the library: one process, reps runs in it
        _, _, proc = timed([sys.executable, "-c", LIBRARY, str(spec), str(reps + 1),
                            str(shim_log)], venv, spec.parent)
        lib = json.loads(proc.stdout)
        assert set(lib["status"]) == {"PASSED"}, lib
        samples[f"library_{name}"] = lib["report_s"][1:]  # the first pays the imports
        samples[f"library_lease_gone_after_report_{name}"] = lib["lease_gone_s"][1:]
        samples[f"library_first_slurm_{name}"] = lib["first_slurm_s"][1:]
    res: dict[str, Any] = {k: median_ms(v) for k, v in samples.items()}
    res["logs"] = measure_logs(cluster, root, reps, versions, cli)
    res["import_ms"] = {name: {
        "slurm_fsm.executor": round(statistics.median(
            [import_ms(venv, ["-c", "import slurm_fsm.executor"], root)
             for _ in range(reps)]), 1)} for name, venv in versions.items()}
    res["samples_ms"] = {k: [round(x * 1000.0, 1) for x in v] for k, v in samples.items()}
    return res


def measure_logs(cluster: Any, root: Path, reps: int, versions: Mapping[str, Mapping[str, str]],
                 cli: Sequence[str]) -> dict[str, Any]:
    """``logs RUN_ID`` of a run not started (an owner record without a log), running (a
    detached run waiting for a gate file) and done: wall and CPU, medians in ms."""
    spec = write_spec(root / "logs", cluster, GATED.format(gate=root / "logs" / "gate"))
    from slurm_fsm.runowner import Owner, OwnerRecord, RunFiles

    files = RunFiles(spec.parent / "work_dirs" / ".slurm_alloc.json")
    pending = "r0123456789ab"
    files.write_owner(OwnerRecord.new(pending, Owner.SUPERVISOR, mode="persistent",
                                      spec_path=str(spec), spec={}))
    _, _, proc = timed([*cli, "run", str(spec), "--detach", "--json", "--quiet"],
                       versions["after"], spec.parent)
    running = json.loads(proc.stdout)["run_id"]
    states = {"not started": pending, "running": running}
    out: dict[str, Any] = {}
    for state, run_id in states.items():
        out[state] = logs_round(reps, versions, cli, run_id, spec.parent)
    (spec.parent / "gate").touch()
    timed([*cli, "wait", running, "--timeout", "120"], versions["after"], spec.parent)
    out["done"] = logs_round(reps, versions, cli, running, spec.parent)
    return out


def logs_round(reps: int, versions: Mapping[str, Mapping[str, str]], cli: Sequence[str],
               run_id: str, cwd: Path) -> dict[str, float]:
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for _ in range(reps):
        for name, venv in versions.items():
            wall, cpu, _ = timed([*cli, "logs", run_id], venv, cwd)
            walls.setdefault(name, []).append(wall)
            cpus.setdefault(name, []).append(cpu)
    return {**{f"wall_{k}": median_ms(v) for k, v in walls.items()},
            **{f"cpu_{k}": median_ms(v) for k, v in cpus.items()}}


def table(res: Mapping[str, Any]) -> str:
    """The docs' table: each figure before and after, medians in ms."""
    step = res["bare_step"]

    def pair(key: str) -> str:
        after, before = res.get(f"{key}_after"), res.get(f"{key}_before")
        return f"{before if before is not None else '-'} | {after}"

    rows = [
        "| what | before | after |", "|---|---:|---:|",
        f"| bare step `srun -N1 -n1 true` | {step} | {step} |",
        f"| the script by hand in the allocation | {res['script_by_hand']} | "
        f"{res['script_by_hand']} |",
        f"| warm run through the library, to its report | {pair('library')} |",
        f"| ... the lease step gone, after the report | "
        f"{pair('library_lease_gone_after_report')} |",
        f"| warm run through the CLI, the whole process | {pair('cli')} |",
        f"| ... its CPU seconds | {pair('cli_cpu')} |",
    ]
    if "cli_imports_after" in res:
        rows += [f"| the CLI's start: a process importing its run path: wall | "
                 f"{pair('cli_imports')} |",
                 f"| ... its CPU seconds | {pair('cli_imports_cpu')} |"]
    if "cli_first_slurm_after" in res:  # since the CLI's own start was measured
        rows[6:6] = [
            f"| warm run through the library: its first Slurm command, after the call | "
            f"{pair('library_first_slurm')} |",
            f"| warm run through the CLI: its first Slurm command, after the process's "
            f"start | {pair('cli_first_slurm')} |"]
    for state, fig in res["logs"].items():
        rows.append(f"| `logs RUN_ID`, run {state}: wall | {fig.get('wall_before', '-')} | "
                    f"{fig['wall_after']} |")
        rows.append(f"| `logs RUN_ID`, run {state}: CPU | {fig.get('cpu_before', '-')} | "
                    f"{fig['cpu_after']} |")
    load = res["load_1min"]
    return "\n".join([*rows, "", f"Medians of {res['reps']} in ms, load {load[0]}-{load[1]} "
                       "(1-minute load average at the start and the end; 2 shared CPUs), "
                       "before and after measured in the same rounds."])


def update_docs(res: Mapping[str, Any]) -> None:
    text = DOC.read_text()
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    DOC.write_text(f"{head}{TABLE_BEGIN}\n{table(res)}\n{TABLE_END}{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--before", type=Path, default=None,
                   help="a folder holding an earlier slurm_fsm package, measured too")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-docs", action="store_true")
    p.add_argument("--render-docs", action="store_true",
                   help="only redraw docs/benchmarks.md's table from --out")
    args = p.parse_args(argv)
    if args.render_docs:
        update_docs(json.loads(args.out.read_text()))
        return 0
    from slurm_fsm_dev import localcluster

    cluster = localcluster.up()
    os.environ.update(cluster.env)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-warmcost-") as tmp:
        res = measure(cluster, Path(tmp), args.reps, args.before)
        subprocess.run([sys.executable, "-m", "slurm_fsm", "release",  # noqa: S603
                        str(Path(tmp) / "warm" / "spec.json"), "--quiet"], env=os.environ,
                       cwd=Path(tmp) / "warm", capture_output=True, timeout=120, check=False)
    res["reps"] = args.reps
    res["config"] = cluster.config_name
    res["load_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]  # start, end
    args.out.write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "samples_ms"}, indent=1))
    if not args.no_docs:
        update_docs(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
