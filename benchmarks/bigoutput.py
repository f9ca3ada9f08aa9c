"""A job that writes faster than its output can be read (issue 41 item 5): the CPU time
from the job's end to what the report needs, whatever the log's size.

``python -m benchmarks.bigoutput [--mib 2048] [--out benchmarks/bigoutput.json]``
writes a log of ``--mib`` MiB of short training-style lines (``step N: loss=...``) with
``Segmentation fault`` a quarter in, ``Traceback`` 256 MiB before the end and a pytest
summary at its end (three patterns counted), all at once (the worst
case: the monitor read nothing while the job ran), then times
:meth:`slurm_fsm.joboutput.JobOutput.finish` in a fresh process per workflow (CPU
seconds, peak RSS, bytes read and skipped, and whether the summary and the pattern were
found). No Slurm. Before issue 41 every byte was read line by line: about 16 s of CPU
per GiB here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LINE = "step {i}: loss=0.1234 lr=1.0e-04 grad_norm=0.98 elapsed 12.3s\n"
WORKFLOWS = ("custom", "pytest", "eval", "benchmark")


def write_log(path: Path, mib: int) -> None:
    size = mib << 20
    with open(path, "w") as f:
        f.write("collected 3 items\n")
        written = i = 0
        while written < size:
            text = "".join(LINE.format(i=j) for j in range(i, i + 20000))
            if written < size // 4 <= written + len(text):
                text += "Segmentation fault (core dumped)\n"
            if written < size - (256 << 20) <= written + len(text):
                text += "Traceback (most recent call last):\n"
            f.write(text)
            written += len(text)
            i += 20000
        f.write("FAILED tests/test_a.py::test_x - AssertionError\n1 failed, 2 passed in 9.50s\n")


def child(path: Path, kind: str) -> dict[str, Any]:
    from slurm_fsm.joboutput import JobOutput
    from slurm_fsm.spec import WorkflowType
    from slurm_fsm.workflows import workflow
    wf = workflow(WorkflowType(kind))
    out = JobOutput([path], relevant=wf.relevant, hint=wf.relevant_hint,
                    patterns={"Traceback": None, "Segmentation fault": None,
                              "1 failed": None})
    start = time.process_time()
    out.finish()
    metrics = wf.parse(out.parser_lines(), path.parent)
    cpu = time.process_time() - start
    return {"workflow": kind, "cpu_s": round(cpu, 3),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "bytes_read": out.bytes_read, "bytes_skipped": getattr(out, "bytes_skipped", 0),
            "pattern_hits": out.pattern_hits, "tail": out.tail()[-1],
            "pytest_failed": metrics.get("failed") if kind == "pytest" else None,
            "gaps": getattr(out, "gaps", [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=2, metavar=("LOG", "WORKFLOW"), help=argparse.SUPPRESS)
    ap.add_argument("--workflows", default=",".join(WORKFLOWS))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1])))
        return
    with tempfile.TemporaryDirectory(prefix="bigoutput-") as tmp:
        log = Path(tmp) / "job.log"
        write_log(log, args.mib)
        rows = []
        for kind in args.workflows.split(","):
            # a fresh process: its peak RSS is the read's; BIGOUTPUT_CWD: another tree
            # to measure (the code before a change, unpacked with git archive)
            argv = [sys.executable, "-m", "benchmarks.bigoutput", "--child", str(log), kind]
            done = subprocess.run(argv, cwd=os.environ.get("BIGOUTPUT_CWD", str(REPO)),  # noqa: S603
                                  capture_output=True, text=True, timeout=900, check=True)
            row = json.loads(done.stdout)
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {"mib": args.mib, "log_bytes": (args.mib << 20), "rows": rows,
              "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "cpus": os.cpu_count()}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
