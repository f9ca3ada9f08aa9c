"""A step asked for as slurmctld restarts (found by the kill-point campaign's ``ctld``
kind): ``python -m benchmarks.ctldrace [LAG ...]``.

For each ``LAG`` (seconds, default ``0 0 0.1 0.3 0.6``) on a fresh 1-node allocation
of the local cluster: start ``srun --overlap ... sh -c 'echo up; exec sleep 300'``,
wait ``LAG`` s, restart slurmctld (:func:`slurm_fsm_dev.localcluster.restart_ctld`),
then print how long the task's first line took to reach ``srun`` (``None``: not
within 90 s), what ``squeue -s`` lists and what ``srun`` wrote on stderr. Measured on
22.05.8: with ``LAG`` 0, ``srun`` hangs silent with no step in ``squeue -s``; from 0.1
s on, its line arrives within half a second of the restart. A negative ``LAG``
starts ``srun`` that long after the restart began (slurmctld stopping or starting).
A figure, not a test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

from slurm_fsm_dev import localcluster


def _out(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True,  # noqa: S603
                          timeout=60, check=False).stdout


def one(job: str, lag: float) -> str:
    """One srun started ``lag`` s before the restart (negative: ``-lag`` s after the
    restart began, slurmctld going down or starting); what came of it."""
    restart = None
    if lag < 0:
        restart = threading.Thread(target=localcluster.restart_ctld, daemon=True)
        restart.start()
        time.sleep(-lag)
    srun = subprocess.Popen(["srun", f"--jobid={job}", "-N1", "-n1", "--overlap",  # noqa: S603
                             "--gres=none", "sh", "-c", "echo up; exec sleep 300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0, got = time.monotonic(), []

    def read() -> None:
        assert srun.stdout is not None
        got.append((srun.stdout.readline(), time.monotonic()))

    threading.Thread(target=read, daemon=True).start()
    if restart is None:
        time.sleep(lag)
        localcluster.restart_ctld()
    else:
        restart.join(timeout=120)
    while not got and time.monotonic() - t0 < 90:
        time.sleep(0.05)
    steps = _out("squeue", "-h", "-s", "-j", job, "-o", "%i %j").split("\n")
    tasks = _out("sstat", "-a", "-n", "-P", "-j", job, "--format=JobID").split()
    srun.kill()
    _o, err = srun.communicate(timeout=30)
    line = round(got[0][1] - t0, 2) if got else None
    return (f"lag {lag} s: first line after {line} s; steps: {[s for s in steps if s]}; "
            f"with tasks: {tasks}; "
            f"srun stderr: {err.strip()[-500:]!r}")


def main(argv: list[str]) -> int:
    info = localcluster.up()
    os.environ.update(info.env)
    granted = subprocess.run(["salloc", "--no-shell", "-N1", f"--partition={info.partition}",  # noqa: S603
                              f"--account={info.account}", "--time=10",
                              "--job-name=ctldrace"], capture_output=True, text=True,
                             timeout=120, check=False)
    match = re.search(r"Granted job allocation (\d+)", granted.stderr)
    if match is None:
        print(f"salloc failed: {granted.stderr}", file=sys.stderr)
        return 1
    try:
        for lag in [float(a) for a in argv] or [0.0, 0.0, 0.1, 0.3, 0.6]:
            print(one(match.group(1), lag), flush=True)
            time.sleep(8)  # the nodes register again
    finally:
        subprocess.run(["scancel", match.group(1)], timeout=60, check=False)  # noqa: S603
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
