"""Where a warm run's time goes: ``python -m benchmarks.warmtrace [--runs N]``.

On the local cluster (brought up when it is not), one allocation made warm by a first
run, then ``N`` warm runs of ``srun -N1 -n1 true`` through the library in one process
(:class:`~slurm_fsm.executor.Executor`, as ``benchmarks.warmcost`` runs them). Each
Slurm tool is wrapped by a stand-in first on ``PATH`` that notes, with bash's
``EPOCHREALTIME``, when it started and ended (a few ms of its own per command, alike
for each). Printed: the median over the runs of each Slurm command's start and end
after the run's call, in the order the run issues them, the gaps between them (the
library's own work: Python, the script guard's start, the judge) and the report's
time; and a bare step ``srun --jobid=ID -N1 -n1 true`` through the same stand-in.
Results: ``benchmarks/warmtrace.json``. A figure, not a test (issue 42 item 5: where a
warm run's overhead over its script is, command by command).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from benchmarks.warmcost import SCRIPT, SLURM_TOOLS, write_spec
from slurm_fsm_dev import localcluster

RESULTS = Path(__file__).with_name("warmtrace.json")


def stand_ins(folder: Path, path: str, log: Path) -> str:
    """Stand-ins for the Slurm tools on ``path`` that note their start and end in
    ``log`` (``+ TOOL ARG1`` and ``- TOOL``, each with the time); the new PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in SLURM_TOOLS:
        real = shutil.which(tool, path=path)
        if real is None:
            continue
        stub = folder / tool
        stub.write_text(f'#!/bin/bash\necho "$EPOCHREALTIME + $$ {tool} ${{1:0:24}}" >> {log}\n'
                        f'{real} "$@"\nrc=$?\necho "$EPOCHREALTIME - $$ {tool}" >> {log}\n'
                        'exit $rc\n')
        stub.chmod(0o755)
    return f"{folder}:{path}"


def commands(log: Path, t0: float) -> list[dict[str, Any]]:
    """The commands ``log`` noted, in order of start, each with its start and end in
    ms after ``t0`` (None: it ran on past the report, as the lease's ``srun``)."""
    out: dict[str, dict[str, Any]] = {}
    for line in log.read_text().splitlines():
        stamp, sign, pid, tool, *rest = line.split(" ", 4)
        at = round((float(stamp) - t0) * 1000.0, 2)
        if sign == "+":
            out[pid] = {"tool": tool, "arg": rest[0] if rest else "", "start": at,
                        "end": None}
        elif pid in out:
            out[pid]["end"] = at
    return sorted(out.values(), key=lambda c: c["start"])


def _slurm_version() -> str:
    return subprocess.run(["sinfo", "--version"], capture_output=True, text=True,
                          timeout=30, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    cluster = localcluster.up()
    os.environ.update(cluster.env)
    from slurm_fsm import JobSpec, SubprocessBackend, leasestop
    from slurm_fsm.executor import Executor

    runs: list[dict[str, Any]] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory(prefix="slurm_fsm-warmtrace-") as tmp:
        root = Path(tmp)
        log = root / "calls.log"
        os.environ["PATH"] = stand_ins(root / "bin", os.environ.get("PATH", ""), log)
        spec = JobSpec.from_file(write_spec(root / "job", cluster, SCRIPT))
        backend = SubprocessBackend()
        first = Executor(spec, backend).run()  # step 0: the allocation
        alloc = first.allocation_id or ""
        try:
            for _ in range(args.runs):
                log.write_text("")
                t0 = time.time()
                report = Executor(spec, backend).run()
                took = (time.time() - t0) * 1000.0
                leasestop.settle()
                runs.append({"status": report.status.name, "report_ms": round(took, 2),
                             "commands": commands(log, t0)})
                t1 = time.time()
                subprocess.run(["srun", f"--jobid={alloc}", "-N1", "-n1", "true"],  # noqa: S603
                               timeout=60, check=True)
                bare.append((time.time() - t1) * 1000.0)
        finally:
            Executor(attrs.evolve(spec, release_allocation=True), backend).run()
    shapes = {tuple(c["tool"] for c in r["commands"]) for r in runs}
    res: dict[str, Any] = {"runs": runs, "bare_step_ms": round(statistics.median(bare), 2),
                           "report_ms": round(statistics.median(r["report_ms"] for r in runs), 2),
                           "slurm": _slurm_version(), "load": os.getloadavg()[0]}
    if len(shapes) == 1:  # the same commands in each run: their medians line up
        res["median"] = [{
            "tool": c["tool"], "arg": c["arg"],
            "start": round(statistics.median(r["commands"][i]["start"] for r in runs), 1),
            "end": None if any(r["commands"][i]["end"] is None for r in runs)
            else round(statistics.median(r["commands"][i]["end"] for r in runs), 1)}
            for i, c in enumerate(runs[0]["commands"])]
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(table(res), end="")
    return 0


def table(res: dict[str, Any]) -> str:
    """The median timeline as the docs show it."""
    rows = ["| after the call (ms) | what | took (ms) |", "|---:|---|---:|"]
    at, what = 0.0, "the library's own work"
    for c in res.get("median", []):
        if c["start"] - at > 0.5:
            rows.append(f"| {at:.1f} | {what} | {c['start'] - at:.1f} |")
        what = "the library's own work"
        if c["end"] is None:  # the lease's srun: it holds the lease past the report
            rows.append(f"| {c['start']:.1f} | `{c['tool']} {c['arg']}` (the lease: its step "
                        "comes up, then runs on past the report) | |")
            at, what = c["start"], "the lease step coming up (its task's first line)"
            continue
        rows.append(f"| {c['start']:.1f} | `{c['tool']} {c['arg']}` | "
                    f"{c['end'] - c['start']:.1f} |")
        at = c["end"]
    rows.append(f"| {at:.1f} | the library's own work, to the report | "
                f"{res['report_ms'] - at:.1f} |")
    rows.append(f"| {res['report_ms']:.1f} | the report | |")
    return ("\n".join(rows) + f"\n\nMedians of {len(res['runs'])} warm runs; a bare step "
            f"through the same stand-in {res['bare_step_ms']:.1f} ms; "
            f"{res['slurm']}, load {res['load']:.2f}.\n")


if __name__ == "__main__":
    sys.exit(main())
