"""Record the literal outputs in this folder from the real local Slurm cluster.

    eval "$(.venv/bin/python -m slurm_fsm_dev.localcluster up)"
    .venv/bin/python tests/data/record_slurm_outputs.py [--slow]

Each recording is ``<name>.stdout`` / ``<name>.stderr`` (only the non-empty
ones) plus a line ``name<TAB>exit code<TAB>argv`` in ``MANIFEST.tsv``; job ids
are whatever the cluster gave. Files named ``*_from_docs*`` are not made here:
they are written from the exact strings in docs/local-slurm.md for what this
cluster cannot produce (an out-of-memory kill needs cgroups).
Delete a recording and run this again to regenerate it. The script cancels
every job it creates (about 20 s). ``--slow`` adds a job that runs into its
one-minute limit and a client without a config file, which retries for 60 s.
``--files`` records only where batch jobs write (:func:`record_output_files`).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTITION = "debug"
ACCOUNT = "acct"
BAD_ACCOUNT = "nope"
USER = "root" if os.geteuid() == 0 else os.environ.get("USER", "")
JOB_FORMAT = "%i|%T|%u|%P|%D|%N|%L|%M|%r|%S|%k|%j"
STEP_FORMAT = "StepId:64|,StepState:24|,StepName:0"
SACCT = ["--format=JobID,State,ExitCode,Elapsed,MaxRSS", "-n", "-P"]

manifest: dict[str, str] = {}
created: list[str] = []


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run without recording."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def rec(name: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run and record stdout, stderr and the exit code under ``name``."""
    proc = run(argv, timeout)
    for suffix, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        path = HERE / f"{name}.{suffix}"
        if text:
            path.write_text(text)
        elif path.exists():
            path.unlink()
    manifest[name] = f"{name}\t{proc.returncode}\t{shlex.join(argv)}"
    print(f"{time.monotonic():.1f} {name}: rc={proc.returncode}", file=sys.stderr)
    return proc


def wait_gone(job: str, limit: float = 120) -> None:
    """Until squeue (without -t all) no longer lists the job."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if not run(["squeue", "-j", job, "-h", "-o", "%i"]).stdout.strip():
            return
        time.sleep(0.2)
    raise SystemExit(f"job {job} did not finish")


def wait_sacct(job: str, state: str | None = None, limit: float = 10) -> None:
    """Until sacct has a final row for the job (it lags a little behind squeue)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        out = run(["sacct", "-j", job, *SACCT]).stdout
        first = out.splitlines()[0] if out.strip() else ""
        done = first and "RUNNING" not in first and "PENDING" not in first
        if done and (state is None or state in first):
            return
        time.sleep(0.1)


def sbatch(name: str, body: str, *extra: str, record: str | None = None) -> str:
    """Submit a batch script; returns the id."""
    script = Path(tempfile.mkdtemp()) / f"{name}.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--partition={PARTITION}",
        f"--account={ACCOUNT}",
        f"--chdir={script.parent}",
        *extra,
        str(script),
    ]
    proc = rec(record, argv) if record else run(argv)
    if proc.returncode != 0:
        raise SystemExit(f"sbatch failed: {proc.stderr}")
    job = proc.stdout.strip().split(";")[0]
    created.append(job)
    return job


def finished_job(name: str, body: str, *extra: str) -> None:
    """A batch job run to its end, then its sacct and scontrol records."""
    job = sbatch(f"rec-{name}", body, *extra)
    wait_gone(job)
    wait_sacct(job)
    rec(f"sacct_{name}", ["sacct", "-j", job, *SACCT])
    rec(f"scontrol_show_job_{name}", ["scontrol", "show", "job", job])


def record_output_files() -> None:
    """Where a batch job writes (issue 25 item 6): ``scontrol show job`` of a job whose
    script names its own ``--output=%x-%j.out`` and ``-e %x-%j-%u-%N.err`` while it is
    held (PENDING, no BatchHost yet) and after its end, the files it wrote, and 22.05's
    sacct asked for ``StdOut`` (it has no such field)."""
    script = Path(tempfile.mkdtemp()) / "own-output.sh"
    script.write_text("#!/bin/bash\n#SBATCH --output=%x-%j.out\n#SBATCH -e %x-%j-%u-%N.err\n"
                      "echo to-stdout\necho to-stderr >&2\n")
    argv = ["sbatch", "--parsable", "--hold", f"--partition={PARTITION}",
            f"--account={ACCOUNT}", f"--chdir={script.parent}", str(script)]
    job = run(argv).stdout.strip().split(";")[0]
    created.append(job)
    rec("scontrol_show_job_own_output_held", ["scontrol", "show", "job", job])
    run(["scontrol", "release", job])
    wait_gone(job)
    rec("scontrol_show_job_own_output", ["scontrol", "show", "job", job])
    rec("own_output_files", ["ls", "-1", str(script.parent)])
    rec("sacct_files_no_field", ["sacct", "-j", job, "-X",
                                 "--format=JobID,JobName,User,NodeList,WorkDir,StdOut,StdErr",
                                 "-n", "-P"])


def record_unreachable() -> None:
    """Clients of a controller that is down, or stalled, recorded for real.

    No daemon is touched: a copy of slurm.conf points the clients at a port
    where nothing listens ("down"), or where a socket accepts and never
    answers ("stalled"); slurmdbd's port is moved the same way for sacct.
    """
    folder = Path(tempfile.mkdtemp())
    text = Path(os.environ["SLURM_CONF"]).read_text()
    down, stalled, dbd = free_port(), free_port(), free_port()
    lines = []
    for line in text.splitlines():
        if line.startswith("SlurmctldPort="):
            line = f"SlurmctldPort={down}"
        elif line.startswith("AccountingStoragePort="):
            line = f"AccountingStoragePort={dbd}"
        elif line.startswith("MessageTimeout="):
            line = "MessageTimeout=2"
        lines.append(line)
    conf_down = folder / "down.conf"
    conf_down.write_text("\n".join(lines) + "\n")
    conf_stalled = folder / "stalled.conf"
    conf_stalled.write_text(conf_down.read_text().replace(f"={down}\n", f"={stalled}\n"))
    commands = {
        "squeue": ["squeue", "-j", "5", "-h", "-o", JOB_FORMAT],
        "scancel": ["scancel", "5"],
        "scontrol": ["scontrol", "show", "job", "5"],
        "sacct": ["sacct", "-j", "5", *SACCT],
        "srun": ["srun", "--jobid=5", "-N", "1", "--ntasks-per-node=1", "true"],
        "sbatch": ["sbatch", "--parsable", "--wrap=true"],
    }
    saved = os.environ["SLURM_CONF"]
    listener = socket.socket()
    listener.bind(("127.0.0.1", stalled))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        os.environ["SLURM_CONF"] = str(conf_down)
        for tool, argv in commands.items():
            rec(f"{tool}_controller_down", argv)
        os.environ["SLURM_CONF"] = str(conf_stalled)
        for tool in ("squeue", "scancel", "sbatch"):
            rec(f"{tool}_controller_stalled", commands[tool])
    finally:
        os.environ["SLURM_CONF"] = saved
        listener.close()
        for conn in accepted:
            conn.close()


def record_accounting_off() -> None:
    """sacct with a copy of slurm.conf that says ``accounting_storage/none``."""
    conf = Path(tempfile.mkdtemp()) / "noacct.conf"
    lines = [
        "AccountingStorageType=accounting_storage/none"
        if line.startswith("AccountingStorageType=")
        else line
        for line in Path(os.environ["SLURM_CONF"]).read_text().splitlines()
    ]
    conf.write_text("\n".join(lines) + "\n")
    saved = os.environ["SLURM_CONF"]
    os.environ["SLURM_CONF"] = str(conf)
    try:
        rec("sacct_accounting_disabled", ["sacct", "-j", "5", *SACCT])
    finally:
        os.environ["SLURM_CONF"] = saved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def controller_started() -> str:
    """When the answering slurmctld booted (a restart mid-recording spoils it)."""
    config = run(["scontrol", "show", "config"]).stdout
    return next((ln for ln in config.splitlines() if ln.startswith("BOOT_TIME")), "")


def main() -> None:
    slow = "--slow" in sys.argv
    if "SLURM_CONF" not in os.environ:
        raise SystemExit("SLURM_CONF is not set: start the local cluster first")
    started = controller_started()
    if "--files" in sys.argv:
        try:
            record_output_files()
        finally:
            finish()
        return
    try:
        timeout_job = None
        if slow:
            timeout_job = sbatch("rec-timeout", "sleep 300", "--time=1")

        # the persistent allocation, its steps, and what squeue shows of them
        log = Path(tempfile.mkdtemp()) / ".salloc.log"
        argv = [
            "salloc",
            "--no-shell",
            f"--partition={PARTITION}",
            f"--account={ACCOUNT}",
            "--nodes=2",
            "--time=10",
            "--job-name=rec-persistent",
        ]
        with open(log, "w") as fh:
            proc = subprocess.run(
                argv, stdout=fh, stderr=subprocess.STDOUT, timeout=60, check=False
            )
        (HERE / "salloc_granted.log").write_text(log.read_text())
        manifest["salloc_granted"] = f"salloc_granted\t{proc.returncode}\t{shlex.join(argv)}"
        alloc = run(["squeue", "-u", USER, "--name=rec-persistent", "-h", "-o", "%i"]).stdout
        alloc = alloc.strip()
        created.append(alloc)
        rec("squeue_job_running", ["squeue", "-j", alloc, "-h", "-o", JOB_FORMAT])
        rec("squeue_job_default", ["squeue", "-j", alloc])

        # a pending batch job wanting all three nodes, two of which the allocation holds
        pending = sbatch("rec-persistent", "sleep 5", "--nodes=3", "--exclusive")
        time.sleep(0.5)
        rec(
            "squeue_find_two",
            ["squeue", "-u", USER, "--name=rec-persistent", "-h", "-o", JOB_FORMAT],
        )
        rec("squeue_job_pending", ["squeue", "-j", pending, "-h", "-o", JOB_FORMAT])
        rec("scancel_pending", ["scancel", pending])
        wait_gone(pending)
        wait_sacct(pending)
        rec("sacct_cancelled_pending", ["sacct", "-j", pending, *SACCT])
        rec("squeue_find_none", ["squeue", "-u", USER, "--name=rec-nothing", "-h", "-o", "%i"])

        rec(
            "srun_hostnames",
            ["srun", f"--jobid={alloc}", "-N", "2", "--ntasks-per-node=1", "hostname"],
        )
        step = subprocess.Popen(
            ["srun", f"--jobid={alloc}", "-N", "2", "--ntasks-per-node=1", "sleep", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)
        rec("squeue_steps_running", ["squeue", "-s", "-j", alloc, "-h", "-O", STEP_FORMAT])
        rec("squeue_steps_default", ["squeue", "-s", "-j", alloc])
        gpu = (
            'echo "@@slurm_fsm-node ${SLURMD_NODENAME:-$(hostname)}"; '
            "if command -v nvidia-smi >/dev/null 2>&1; then "
            "nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader || true; fi"
        )
        rec(
            "srun_gpu_no_nvidia_smi",
            [
                "srun",
                f"--jobid={alloc}",
                "-N",
                "2",
                "--ntasks-per-node=1",
                "--overlap",
                "-l",
                "bash",
                "-c",
                gpu,
            ],
        )
        rec(
            "srun_too_many_nodes",
            ["srun", f"--jobid={alloc}", "-N", "3", "--ntasks-per-node=1", "true"],
        )
        steps = run(["squeue", "-s", "-j", alloc, "-h", "-o", "%i"]).stdout.split()
        running = next(s for s in steps if s.split(".")[1].isdigit())
        rec("scancel_step", ["scancel", running])
        _out, err = step.communicate(timeout=30)
        (HERE / "srun_step_cancelled.stderr").write_text(err)
        manifest["srun_step_cancelled"] = (
            f"srun_step_cancelled\t{step.returncode}\t{shlex.join(step.args)}"  # type: ignore[arg-type]
        )
        rec("scancel_unknown_step", ["scancel", f"{alloc}.99"])
        rec("scancel_job", ["scancel", alloc])
        time.sleep(0.5)
        rec("squeue_job_just_cancelled", ["squeue", "-j", alloc, "-h", "-o", JOB_FORMAT])
        rec(
            "squeue_job_just_cancelled_all",
            ["squeue", "-j", alloc, "-t", "all", "-h", "-o", JOB_FORMAT],
        )
        rec(
            "srun_cancelled_allocation",
            ["srun", f"--jobid={alloc}", "-N", "1", "--ntasks-per-node=1", "true"],
        )
        wait_sacct(alloc)
        rec("sacct_persistent_cancelled", ["sacct", "-j", alloc, *SACCT])

        # unknown jobs
        rec("squeue_invalid_job", ["squeue", "-j", "999999", "-h", "-o", JOB_FORMAT])
        rec("scontrol_invalid_job", ["scontrol", "show", "job", "999999"])
        rec("scancel_invalid_job", ["scancel", "999999"])
        rec("sacct_unknown_job", ["sacct", "-j", "999999", *SACCT])
        rec(
            "srun_invalid_job",
            ["srun", "--jobid=999999", "-N", "1", "--ntasks-per-node=1", "true"],
        )

        # salloc and sbatch refused
        for name, args in (
            ("salloc_bad_partition", ["--partition=nope", f"--account={ACCOUNT}"]),
            ("salloc_bad_account", [f"--partition={PARTITION}", f"--account={BAD_ACCOUNT}"]),
        ):
            argv = [
                "salloc",
                "--no-shell",
                *args,
                "--nodes=1",
                "--time=5",
                f"--job-name=rec-{name}",
            ]
            with open(log, "w") as fh:
                proc = subprocess.run(
                    argv, stdout=fh, stderr=subprocess.STDOUT, timeout=60, check=False
                )
            (HERE / f"{name}.log").write_text(log.read_text())
            manifest[name] = f"{name}\t{proc.returncode}\t{shlex.join(argv)}"
        script = Path(tempfile.mkdtemp()) / "x.sh"
        script.write_text("#!/bin/bash\ntrue\n")
        rec("sbatch_bad_partition", ["sbatch", "--parsable", "--partition=nope", str(script)])

        # batch jobs to their end
        sbatch("rec-parsable", "true", record="sbatch_parsable")
        sbatch(
            "rec-parsable-cluster", "true", "--clusters=slurmfsm", record="sbatch_parsable_cluster"
        )
        plain = rec(
            "sbatch_plain",
            ["sbatch", f"--partition={PARTITION}", f"--account={ACCOUNT}", str(script)],
        )
        created.append(plain.stdout.split()[-1] if plain.stdout.strip() else "")
        finished_job("completed", "echo hi")
        finished_job("failed_exit3", "exit 3")
        finished_job("killed9", "kill -9 $$")
        finished_job("steps_srun_fails", "srun true\nsrun false\nexit 0")

        rec("srun_help", ["srun", "--help"])
        if slow:  # "retrying in 1sec up to 60sec"
            env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
            env["SLURM_CONF"] = "/nonexistent/slurm.conf"
            no_conf = subprocess.run(
                ["squeue", "-h"], capture_output=True, text=True, env=env, timeout=90, check=False
            )
            (HERE / "squeue_no_config.stderr").write_text(no_conf.stderr)
            manifest["squeue_no_config"] = f"squeue_no_config\t{no_conf.returncode}\tsqueue -h"

        if timeout_job is not None:
            wait_gone(timeout_job, limit=180)
            wait_sacct(timeout_job, "TIMEOUT")
            rec("sacct_timeout", ["sacct", "-j", timeout_job, *SACCT])
            rec("scontrol_show_job_timeout", ["scontrol", "show", "job", timeout_job])
        record_unreachable()
        record_accounting_off()
        if controller_started() != started:
            raise SystemExit("slurmctld restarted during the recording: run it again")
    finally:
        finish()


def finish() -> None:
    """Cancel what was made, write MANIFEST.tsv (the recordings of this run replace
    their lines, the others stay)."""
    for job in created:
        if job:
            run(["scancel", job])
    old = {}
    path = HERE / "MANIFEST.tsv"
    if path.exists():
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                old[line.split("\t", 1)[0]] = line
    old.update(manifest)
    header = "# name\texit code\targv (recorded by record_slurm_outputs.py)\n"
    path.write_text(header + "".join(f"{old[k]}\n" for k in sorted(old)))


if __name__ == "__main__":
    main()
