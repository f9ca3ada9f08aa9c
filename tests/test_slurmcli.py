"""Builders (exact argv), parsers (on literal Slurm output) and the classifier.

The literal outputs are in tests/data: ``*.stdout``/``*.stderr``/``*.log``
recorded from the real Slurm 22.05 cluster (MANIFEST.tsv has each command and
exit code), ``*_from_docs*`` written from docs/local-slurm.md where this
cluster cannot produce them.
"""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    GpuProcess,
    ScriptRequest,
    StepRequest,
    StepResult,
)
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    AllocationFailed,
    BackendError,
    CommandFailed,
    CommandTimedOut,
    ControllerUnreachable,
    JobNotFound,
)
from slurm_fsm.ownership import request_of, split_comment
from slurm_fsm.subprocess_backend import CommandResult, SubprocessBackend, run_command
from slurm_fsm.testing import FakeClock

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_text()


def manifest() -> dict[str, tuple[int, list[str]]]:
    out = {}
    for line in data("MANIFEST.tsv").splitlines():
        if line and not line.startswith("#"):
            name, rc, argv = line.split("\t")
            out[name] = (int(rc), shlex.split(argv))
    return out


def recorded(name: str) -> tuple[list[str], int, str, str]:
    """argv, exit code, stdout, stderr of one recording."""
    rc, argv = manifest()[name]
    out = DATA / f"{name}.stdout"
    err = DATA / f"{name}.stderr"
    return (
        argv,
        rc,
        out.read_text() if out.exists() else "",
        err.read_text() if err.exists() else "",
    )


# ------------------------------------------------------------------ builders


def test_squeue_builders() -> None:
    fmt = "%i|%T|%u|%P|%D|%N|%L|%M|%r|%S|%k|%V|%j"
    assert fmt == slurmcli.JOB_FORMAT
    assert slurmcli.squeue_job_argv("12") == ["squeue", "-j", "12", "-h", "-o", fmt]
    assert slurmcli.squeue_find_argv("acct-trtllm.persistent", "alice") == [
        "squeue",
        "-u",
        "alice",
        "--name=acct-trtllm.persistent",
        "-h",
        "-o",
        fmt,
    ]
    assert slurmcli.squeue_steps_argv("12") == [
        "squeue",
        "-s",
        "-j",
        "12",
        "-h",
        "-O",
        "StepId:64|,StepState:24|,StepName:0",
    ]


def test_find_never_lists_all_users() -> None:
    with pytest.raises(ValueError, match="user"):
        slurmcli.squeue_find_argv("x", "")


def req(**over: object) -> AllocationRequest:
    fields: dict[str, object] = {
        "partition": "batch",
        "account": "acct",
        "nodes": 2,
        "time_limit": Duration.parse("04:00:00"),
        "job_name": "acct-trtllm.persistent",
        "log_path": Path("/r/work_dirs/.salloc.log"),
    }
    fields.update(over)
    return AllocationRequest(**fields)  # type: ignore[arg-type]


def test_salloc_argv() -> None:
    assert slurmcli.salloc_argv(req()) == [
        "salloc",
        "--no-shell",
        "--partition=batch",
        "--account=acct",
        "--nodes=2",
        "--time=04:00:00",
        "--job-name=acct-trtllm.persistent",
    ]
    with_gpus = slurmcli.salloc_argv(req(gpus_per_node=8, time_limit=Duration.parse("1-00:00")))
    assert with_gpus[5] == "--time=1-00:00:00"
    assert with_gpus[-1] == "--gpus-per-node=8"
    assert slurmcli.salloc_argv(req(time_limit=Duration.parse("UNLIMITED")))[5] == (
        "--time=UNLIMITED"
    )


def test_salloc_carries_the_checkout_tag() -> None:
    assert "--comment=slurm_fsm:repo=ab12" in slurmcli.salloc_argv(
        req(comment="slurm_fsm:repo=ab12"))
    assert "--comment=slurm_fsm:repo=ab12;req=0123abcd" in slurmcli.salloc_argv(
        req(comment="slurm_fsm:repo=ab12", nonce="0123abcd"))
    assert not any(a.startswith("--comment") for a in slurmcli.salloc_argv(req()))


def test_salloc_carries_the_task_layout() -> None:
    argv = slurmcli.salloc_argv(req(ntasks_per_node=4, ntasks=8))
    assert argv[-2:] == ["--ntasks-per-node=4", "--ntasks=8"]


def test_salloc_refuses_unset_time() -> None:
    with pytest.raises(ValueError, match="time limit"):
        slurmcli.salloc_argv(req(time_limit=Duration.parse("NOT_SET")))


def test_srun_step_plain() -> None:
    step = StepRequest(job_id="7", argv=("hostname",), nodes=2)
    assert slurmcli.srun_step_argv(step) == [
        "srun",
        "--jobid=7",
        "-N",
        "2",
        "--ntasks-per-node=1",
        "hostname",
    ]


def test_srun_step_with_container_and_options() -> None:
    step = StepRequest(
        job_id="7",
        argv=("pip", "install", "-e", "."),
        nodes=3,
        ntasks_per_node=4,
        overlap=True,
        chdir="/repo",
        container=ContainerOptions(
            name="llama_auto_test",
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            mounts="/a:/a,/b:/b:ro",
            writable=True,
            workdir="/repo",
        ),
    )
    assert slurmcli.srun_step_argv(step) == [
        "srun",
        "--jobid=7",
        "-N",
        "3",
        "--ntasks-per-node=4",
        "--overlap",
        "--chdir=/repo",
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        "--container-name=llama_auto_test",
        "--container-mounts=/a:/a,/b:/b:ro",
        "--container-writable",
        "--container-workdir=/repo",
        "pip",
        "install",
        "-e",
        ".",
    ]


def test_srun_step_named_container_only() -> None:
    step = StepRequest(job_id="7", argv=("ls", "/a"), nodes=1, container=ContainerOptions(name="c"))
    assert slurmcli.srun_step_argv(step) == [
        "srun",
        "--jobid=7",
        "-N",
        "1",
        "--ntasks-per-node=1",
        "--container-name=c",
        "ls",
        "/a",
    ]


def test_srun_step_needs_a_command() -> None:
    with pytest.raises(ValueError):
        slurmcli.srun_step_argv(StepRequest(job_id="7", argv=(), nodes=1))


def test_gpu_processes_argv_asks_the_allocations_gpus_with_overlap() -> None:
    """Issue 23 fix 3: under ConstrainDevices a step sees only the GPUs it holds; with
    --overlap it starts at once even while other steps hold them all."""
    argv = slurmcli.gpu_processes_argv("7", 2, 4)
    assert argv[:9] == ["srun", "--jobid=7", "-N", "2", "--ntasks-per-node=1", "--overlap",
                        "--gpus-per-node=4", "-l", "bash"]
    assert "--gres=none" not in argv


def test_gpu_processes_argv_and_its_script_runs_without_nvidia_smi(tmp_path: Path) -> None:
    argv = slurmcli.gpu_processes_argv("7", 2)
    assert argv[:9] == [
        "srun",
        "--jobid=7",
        "-N",
        "2",
        "--ntasks-per-node=1",
        "--overlap",
        "--gres=none",  # the allocation's GPUs not known: none asked
        "-l",
        "bash",
    ]
    assert argv[9] == "-c"
    script = argv[10]
    assert "nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader" in script
    # the script itself, on a host with no nvidia-smi: only the marker line
    env = {"PATH": str(tmp_path), "SLURMD_NODENAME": "n7"}
    done = subprocess.run(
        ["/bin/bash", "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout == "@@slurm_fsm-node n7\n"


def test_gpu_processes_script_with_a_fake_nvidia_smi(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "$@" >&2\necho "4242, /usr/bin/python3, 1024 MiB"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURMD_NODENAME": "n1"}
    done = subprocess.run(
        ["/bin/bash", "-c", slurmcli.gpu_processes_script()],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    # nvidia-smi's stderr is kept (a failure's words), then its exit status; no
    # scontrol on this PATH: no pid of the allocation's own is known
    assert done.stdout == ("@@slurm_fsm-node n1\n"
                           "--query-compute-apps=pid,name,used_memory --format=csv,noheader\n"
                           "4242, /usr/bin/python3, 1024 MiB\n@@slurm_fsm-nvidia-smi-exit 0\n"
                           "@@slurm_fsm-ours \n")
    labelled = "".join(f"0: {line}\n" for line in done.stdout.splitlines())
    assert [p.pid for p in slurmcli.parse_gpu_processes(labelled)] == [4242]
    ours = labelled.replace("@@slurm_fsm-ours ", "@@slurm_fsm-ours 17 4242 ")
    assert slurmcli.parse_gpu_processes(ours) == []  # a sibling job's process: ours


def test_probe_gpu_argv() -> None:
    argv = slurmcli.probe_gpu_argv("gpu", "acct")
    assert argv[:8] == [
        "srun",
        "--partition=gpu",
        "--account=acct",
        "-N",
        "1",
        "--ntasks-per-node=1",
        "--gpus-per-node=1",  # under ConstrainDevices a job without a GPU sees none
        "--job-name=slurm_fsm-gpu-probe",
    ]
    assert argv[8:10] == ["bash", "-c"]
    assert "nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader" in argv[10]
    assert "nvidia-smi --query-gpu=name --format=csv,noheader" in argv[10]  # older drivers
    assert "--account=acct" not in slurmcli.probe_gpu_argv("gpu")


def test_sbatch_argv() -> None:
    request = BatchRequest(
        script_path=Path("/w/job.slurm"),
        work_dir=Path("/w"),
        job_name="llama",
        partition="batch",
        account="acct",
        extra_args=("--time=10",),
    )
    assert slurmcli.sbatch_argv(request) == [
        "sbatch",
        "--parsable",
        "--job-name=llama",
        "--partition=batch",
        "--account=acct",
        "--chdir=/w",
        "--time=10",
        "/w/job.slurm",
    ]
    bare = BatchRequest(script_path=Path("/w/job.slurm"), work_dir=Path("/w"))
    assert slurmcli.sbatch_argv(bare) == ["sbatch", "--parsable", "--chdir=/w", "/w/job.slurm"]


def test_scancel_sacct_scontrol_srun_help() -> None:
    assert slurmcli.scancel_argv("12") == ["scancel", "12"]
    assert slurmcli.scancel_argv("12", "0") == ["scancel", "12.0"]
    assert slurmcli.sacct_argv("12") == [
        "sacct",
        "-j",
        "12",
        "--format=JobID,State,ExitCode,Elapsed,MaxRSS",
        "-n",
        "-P",
    ]
    assert slurmcli.scontrol_show_job_argv("12") == ["scontrol", "show", "job", "12"]
    assert slurmcli.srun_help_argv() == ["srun", "--help"]


def test_clean_env_drops_job_context_keeps_config() -> None:
    environ = {
        "PATH": "/bin",
        "SLURM_CONF": "/etc/x.conf",
        "SLURM_JOB_ID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_TIME_FORMAT": "standard",
        "SBATCH_PARTITION": "p",
    }
    assert slurmcli.clean_env(environ) == {
        "PATH": "/bin",
        "SLURM_CONF": "/etc/x.conf",
    }
    env = slurmcli.clean_env(environ, {"SLURM_JOB_ID": "9", "PATH": "/x"})
    assert env["SLURM_JOB_ID"] == "9"
    assert env["PATH"] == "/x"
    assert "SLURM_NTASKS" not in env


@pytest.mark.parametrize("key", ["SQUEUE_NAMES", "SQUEUE_ACCOUNT", "SQUEUE_FORMAT",
                                 "SLURM_TIME_FORMAT", "SLURM_BITSTR_LEN", "SACCT_FORMAT",
                                 "SINFO_FORMAT", "SCONTROL_ALL", "SALLOC_PARTITION",
                                 "SBATCH_ACCOUNT", "SRUN_CPUS_PER_TASK"])
def test_clean_env_drops_what_changes_the_tools_output_or_request(key: str) -> None:
    """Issue 20 item 14: these made a run lose its own allocation."""
    assert key not in slurmcli.clean_env({key: "x|y", "HOME": "/h"})
    assert slurmcli.clean_env({key: "x"}, {key: "ours"})[key] == "ours"  # overrides win


def test_nodelists() -> None:
    assert slurmcli.expand_nodelist("n[1-3],gpu07") == ["n1", "n2", "n3", "gpu07"]
    assert slurmcli.expand_nodelist("node[01-02]") == ["node01", "node02"]
    assert slurmcli.expand_nodelist("") == []
    assert slurmcli.compress_nodelist(["n1", "n2", "n3"]) == "n[1-3]"
    assert slurmcli.compress_nodelist(["node01", "node02"]) == "node[01-02]"
    with pytest.raises(ValueError, match="node list"):
        slurmcli.expand_nodelist("n[1-")


# ------------------------------------------------------------------- parsers


def test_parse_running_allocation_row() -> None:
    argv, rc, out, _ = recorded("squeue_job_running")
    # recorded before the submit time (%V) was read: rows of that format still parse
    assert argv[:4] == ["squeue", "-j", argv[2], "-h"] and argv[5] == slurmcli.JOB_FORMAT_V1
    assert rc == 0
    job = slurmcli.parse_job(out, argv[2])
    assert job.state == "RUNNING"
    assert job.is_active
    assert job.name == "rec-persistent"
    assert job.user == "root"
    assert job.partition == "debug"
    assert job.num_nodes == 2
    assert job.nodelist == "n[1-2]"
    assert slurmcli.expand_nodelist(job.nodelist) == ["n1", "n2"]
    assert job.time_left.is_finite and 0 < (job.time_left.seconds or 0) <= 600
    assert job.elapsed.is_finite
    assert job.reason == "None"
    assert job.start_time.startswith("20")


def test_parse_pending_row() -> None:
    argv, _, out, _ = recorded("squeue_job_pending")
    job = slurmcli.parse_job(out, argv[2])
    assert job.state == "PENDING"
    assert job.nodelist == ""
    assert job.num_nodes == 3
    assert job.reason == "Resources"
    assert job.start_time == "N/A"
    assert job.time_left.kind.value == "UNLIMITED"


def test_parse_find_two_jobs_same_name() -> None:
    _, _, out, _ = recorded("squeue_find_two")
    jobs = slurmcli.parse_jobs(out)
    assert sorted(j.state for j in jobs) == ["PENDING", "RUNNING"]
    assert {j.name for j in jobs} == {"rec-persistent"}


def test_name_is_last_so_a_bar_in_it_is_kept() -> None:
    row = ("7|RUNNING|bob|batch|1|n1|1:00:00|5:00|None|2026-01-01T00:00:00|"
           "slurm_fsm:repo=ab12|odd|name|x\n")
    (job,) = slurmcli.parse_jobs(row)
    assert job.name == "odd|name|x"
    assert job.comment == "slurm_fsm:repo=ab12"
    assert job.time_left.seconds == 3600
    assert job.elapsed.seconds == 300


def test_the_submit_time_is_read_and_a_bar_in_the_name_still_kept() -> None:
    """Issue 28: (job id, submit time, tag) name an allocation; squeue's %V sits before
    the name, which stays last."""
    row = ("7|RUNNING|bob|batch|1|n1|1:00:00|5:00|None|2026-01-01T00:00:00|"
           "slurm_fsm:repo=ab12|2025-12-31T23:59:58|odd|name|x\n")
    (job,) = slurmcli.parse_jobs(row)
    assert job.submit_time == "2025-12-31T23:59:58"
    assert job.name == "odd|name|x" and job.comment == "slurm_fsm:repo=ab12"
    (old,) = slurmcli.parse_jobs(row.replace("2025-12-31T23:59:58|", ""))
    assert old.submit_time == "" and old.name == "odd|name|x"
    (unknown,) = slurmcli.parse_jobs(row.replace("2025-12-31T23:59:58", "N/A"))
    assert unknown.submit_time == "" and unknown.name == "odd|name|x"


def test_parse_job_absent_is_job_not_found() -> None:
    with pytest.raises(JobNotFound):
        slurmcli.parse_job("", "12")
    _, _, out, _ = recorded("squeue_job_running")
    with pytest.raises(JobNotFound):
        slurmcli.parse_job(out, "999999")


def test_parse_jobs_refuses_foreign_rows() -> None:
    _, _, out, _ = recorded("squeue_job_default")  # squeue's own default layout
    with pytest.raises(ValueError, match="not a squeue row"):
        slurmcli.parse_jobs(out)


def test_unparsable_durations_become_invalid() -> None:
    row = "7|RUNNING|bob|batch|1|n1|garbage|??|None|N/A|(null)|j"
    (job,) = slurmcli.parse_jobs(row)
    assert job.time_left.kind.value == "INVALID"
    assert job.elapsed.kind.value == "INVALID"


def test_parse_steps() -> None:
    argv, _, out, _ = recorded("squeue_steps_running")
    job = argv[3]
    (step,) = slurmcli.parse_steps(out, job)
    assert step.job_id == job
    assert step.step_id.isdigit()
    assert step.full_id == f"{job}.{step.step_id}"
    assert step.state == "RUNNING"
    assert step.name == "sleep"
    assert slurmcli.parse_steps("", job) == []
    text = f"{job}.extern |RUNNING |extern\n{job}.0 |RUNNING |bash\n99.0 |RUNNING |x\n"
    assert [s.step_id for s in slurmcli.parse_steps(text, job)] == ["extern", "0"]
    with pytest.raises(ValueError):
        slurmcli.parse_steps(recorded("squeue_steps_default")[2], job)


def sacct(name: str) -> tuple[str, str]:
    argv, rc, out, _ = recorded(name)
    assert rc == 0
    return argv[2], out


def test_sacct_completed() -> None:
    job, out = sacct("sacct_completed")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code, outcome.signal) == ("COMPLETED", 0, 0)
    assert outcome.source == "sacct"
    assert [s.job_id for s in outcome.steps] == [f"{job}.batch"]
    assert outcome.elapsed.seconds == 0


def test_sacct_failed_exit3() -> None:
    job, out = sacct("sacct_failed_exit3")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code, outcome.signal) == ("FAILED", 3, 0)


def test_sacct_killed9() -> None:
    job, out = sacct("sacct_killed9")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code, outcome.signal) == ("FAILED", 0, 9)
    assert outcome.steps[0].state == "CANCELLED"


def test_sacct_timeout() -> None:
    job, out = sacct("sacct_timeout")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code) == ("TIMEOUT", 0)
    assert outcome.elapsed.seconds is not None and outcome.elapsed.seconds >= 60
    (batch,) = outcome.steps
    assert (batch.state, batch.signal) == ("CANCELLED", 15)
    assert outcome.max_rss == batch.max_rss != ""


def test_sacct_cancelled_by_uid() -> None:
    job, out = sacct("sacct_cancelled_pending")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert outcome.state == "CANCELLED"
    assert outcome.cancelled_by == "0"
    assert outcome.steps == ()


def test_sacct_persistent_allocation_with_steps() -> None:
    job, out = sacct("sacct_persistent_cancelled")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.cancelled_by) == ("CANCELLED", "0")
    cancelled = [s for s in outcome.steps if s.state == "CANCELLED"]
    assert len(cancelled) == 1 and cancelled[0].cancelled_by == "0"
    assert cancelled[0].signal == 9


def test_sacct_failing_step_inside_a_completed_job() -> None:
    job, out = sacct("sacct_steps_srun_fails")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code) == ("COMPLETED", 0)
    by_id = {s.job_id: s for s in outcome.steps}
    assert by_id[f"{job}.1"].state == "FAILED"
    assert by_id[f"{job}.1"].exit_code == 1


def test_sacct_oom_from_docs() -> None:
    job, out = sacct("sacct_oom_from_docs")
    outcome = slurmcli.parse_sacct(out, job)
    assert outcome is not None
    assert (outcome.state, outcome.exit_code, outcome.signal) == ("OUT_OF_MEMORY", 0, 125)
    assert outcome.max_rss == "1049600K"


def test_sacct_truncated_state_and_batch_exit_code() -> None:
    text = (
        "44|CANCELLED+||00:10:00|\n"
        "44.batch|CANCELLED|0:15|00:10:00|2048K\n"
        "44.0|FAILED|2:0|00:09:00|9G\n"
    )
    outcome = slurmcli.parse_sacct(text, "44")
    assert outcome is not None
    assert outcome.state == "CANCELLED"
    # the job row has no exit code: the batch step's is used
    assert (outcome.exit_code, outcome.signal) == (0, 15)
    assert outcome.max_rss == "9G"
    assert outcome.elapsed.seconds == 600


def test_sacct_no_row() -> None:
    _, rc, out, _ = recorded("sacct_unknown_job")
    assert rc == 0 and out == ""
    assert slurmcli.parse_sacct(out, "999999") is None
    assert slurmcli.parse_sacct("5.batch|COMPLETED|0:0|00:00:01|\n", "5") is None
    with pytest.raises(ValueError):
        slurmcli.parse_sacct("garbage\n", "5")


@pytest.mark.parametrize(
    ("name", "state", "code", "signal"),
    [
        ("completed", "COMPLETED", 0, 0),
        ("failed_exit3", "FAILED", 3, 0),
        ("killed9", "FAILED", 0, 9),
        ("timeout", "TIMEOUT", 0, 15),
        ("oom_from_docs", "OUT_OF_MEMORY", 0, 125),
    ],
)
def test_scontrol_show_job(name: str, state: str, code: int, signal: int) -> None:
    argv, rc, out, _ = recorded(f"scontrol_show_job_{name}")
    assert rc == 0
    outcome = slurmcli.parse_scontrol_job(out, argv[3])
    assert (outcome.state, outcome.exit_code, outcome.signal) == (state, code, signal)
    assert outcome.source == "scontrol"
    assert outcome.job_id == argv[3]


def test_scontrol_runtime_and_derived_exit_code() -> None:
    text = (
        "JobId=3 JobName=x\n   JobState=RUNNING Reason=None Dependency=(null)\n"
        "   DerivedExitCode=9:0 ExitCode=0:0\n   RunTime=01:02:03 TimeLimit=04:00:00\n"
    )
    outcome = slurmcli.parse_scontrol_job(text, "3")
    assert (outcome.state, outcome.exit_code) == ("RUNNING", 0)
    assert outcome.elapsed.seconds == 3723
    with pytest.raises(JobNotFound):
        slurmcli.parse_scontrol_job(text, "4")
    with pytest.raises(ValueError, match="JobState"):
        slurmcli.parse_scontrol_job("JobId=3 JobName=x\n", "3")


def test_parse_sbatch() -> None:
    assert slurmcli.parse_sbatch(recorded("sbatch_parsable")[2]).isdigit()
    with_cluster = recorded("sbatch_parsable_cluster")[2]
    assert ";slurmfsm" in with_cluster
    assert slurmcli.parse_sbatch(with_cluster) == with_cluster.split(";")[0]
    assert slurmcli.parse_sbatch("sbatch: warning: x\n123\n") == "123"
    with pytest.raises(ValueError, match="no job id"):
        slurmcli.parse_sbatch(recorded("sbatch_plain")[2])


def test_container_support_from_srun_help() -> None:
    text = recorded("srun_help")[2]
    assert "--container " in text  # Slurm's own OCI option: not pyxis
    assert not slurmcli.has_container_option(text)
    assert slurmcli.has_container_option(
        text + "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n"
    )


def test_parse_gpu_processes_none_recorded() -> None:
    _, rc, out, _ = recorded("srun_gpu_no_nvidia_smi")
    assert rc == 0
    assert sorted(out.split()) == sorted(["0:", "1:", *2 * [slurmcli.GPU_NODE_MARKER], "n1", "n2"])
    assert slurmcli.parse_gpu_processes(out) == []


def test_parse_gpu_processes_interleaved() -> None:
    text = (
        "1: @@slurm_fsm-node n2\n"
        "0: @@slurm_fsm-node n1\n"
        "1: 4242, /usr/bin/python3, 1024 MiB\n"
        "0: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        "1: 77, python, my, weird, name, 10 MiB\n"
    )
    assert slurmcli.parse_gpu_processes(text) == [
        GpuProcess(node="n2", pid=4242, name="/usr/bin/python3", used_memory="1024 MiB"),
        GpuProcess(node="n2", pid=77, name="python, my, weird, name", used_memory="10 MiB"),
    ]


def test_parse_gpu_name() -> None:
    assert slurmcli.parse_gpu_name("NVIDIA H100 80GB HBM3\nNVIDIA H100 80GB HBM3\n") == (
        "NVIDIA H100 80GB HBM3"
    )
    assert slurmcli.parse_gpu_name("\n") is None


def test_salloc_error_lines() -> None:
    bad_partition = data("salloc_bad_partition.log")
    assert slurmcli.salloc_error(bad_partition) == bad_partition.strip()
    assert "Invalid partition name specified" in slurmcli.salloc_error(bad_partition)
    assert "Invalid account or account/partition combination specified" in (
        slurmcli.salloc_error(data("salloc_bad_account.log"))
    )
    noisy = "salloc: Pending job allocation 5\nsalloc: job 5 queued\nsalloc: error: boom\n"
    assert slurmcli.salloc_error(noisy) == "salloc: error: boom"
    assert slurmcli.salloc_error("a\nb\n") == "a\nb"


# ---------------------------------------------------------------- classifier


def classify_recorded(name: str) -> object:
    argv, rc, out, err = recorded(name)
    return slurmcli.classify(argv, rc, out, err)


@pytest.mark.parametrize(
    "name",
    [
        "squeue_controller_down",
        "scancel_controller_down",
        "scontrol_controller_down",
        "sacct_controller_down",
        "srun_controller_down",
        "sbatch_controller_down",
        "squeue_controller_stalled",
        "scancel_controller_stalled",
        "sbatch_controller_stalled",
    ],
)
def test_unreachable_controller_is_never_job_gone(name: str) -> None:
    err = classify_recorded(name)
    assert isinstance(err, ControllerUnreachable), err
    assert not isinstance(err, JobNotFound)
    assert err.argv == manifest()[name][1]
    assert err.detail in recorded(name)[3]


@pytest.mark.parametrize(
    "name",
    [
        "squeue_invalid_job",
        "scontrol_invalid_job",
        "srun_invalid_job",
        "srun_cancelled_allocation",
        "scancel_unknown_step",
        "squeue_job_just_cancelled",
        "sacct_unknown_job",
    ],
)
def test_job_gone(name: str) -> None:
    err = classify_recorded(name)
    assert isinstance(err, JobNotFound), err
    assert err.job_id == next(
        a.split("=")[-1].split(".")[0]
        for a in manifest()[name][1]
        if a[:1].isdigit() or a.startswith("--jobid=")
    )


@pytest.mark.parametrize(
    "name",
    [
        "squeue_job_running",
        "squeue_find_two",
        "squeue_find_none",
        "squeue_steps_running",
        "scancel_step",
        "scancel_job",
        "scancel_invalid_job",
        "sacct_completed",
        "sbatch_parsable",
        "srun_hostnames",
        "scontrol_show_job_completed",
    ],
)
def test_success(name: str) -> None:
    assert classify_recorded(name) is None


def test_steps_of_unknown_job_is_no_steps_not_gone() -> None:
    assert slurmcli.classify(slurmcli.squeue_steps_argv("5"), 0, "", "") is None


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("sbatch_bad_partition", "Invalid partition name specified"),
        ("srun_too_many_nodes", "Only allocated 2 nodes asked for 3"),
        ("squeue_no_config", "Unable to process configuration file"),
        ("sacct_accounting_disabled", "Slurm accounting storage is disabled"),
    ],
)
def test_other_failures(name: str, needle: str) -> None:
    argv, rc, _, _ = recorded(name)
    err = classify_recorded(name)
    assert type(err) is CommandFailed
    assert err.returncode == rc != 0
    assert err.argv == argv
    assert needle in err.stderr_tail
    assert needle in str(err)


def test_accounting_disabled() -> None:
    assert slurmcli.accounting_disabled(data("sacct_accounting_disabled.stderr"))
    assert not slurmcli.accounting_disabled(data("sacct_controller_down.stderr"))


def test_stderr_tail_is_bounded() -> None:
    stderr = "\n".join(f"line {i}" for i in range(100))
    err = slurmcli.classify(["sinfo"], 2, "", stderr)
    assert isinstance(err, CommandFailed)
    assert err.stderr_tail.splitlines() == [f"line {i}" for i in range(80, 100)]


def test_timeout() -> None:
    err = slurmcli.classify(["squeue", "-j", "5"], None, "", "", timeout_s=30)
    assert isinstance(err, CommandTimedOut)
    assert err.timeout_s == 30 and err.argv == ["squeue", "-j", "5"]
    stalled = data("squeue_controller_stalled.stderr")
    assert isinstance(
        slurmcli.classify(["squeue", "-j", "5"], None, "", stalled, timeout_s=30),
        ControllerUnreachable,
    )


def test_step_output_cannot_fake_a_slurm_error() -> None:
    # the user's program prints what Slurm would: only srun's own lines count
    stderr = "curl: (7) Connection refused\nInvalid job id specified\n"
    argv = ["srun", "--jobid=5", "-N", "1", "--ntasks-per-node=1", "curl", "x"]
    err = slurmcli.classify(argv, 7, "", stderr)
    assert type(err) is CommandFailed
    argv, rc, _, stderr = recorded("srun_step_cancelled")
    assert type(slurmcli.classify(argv, rc, "", stderr)) is CommandFailed


# ------------------------------------- SubprocessBackend over recorded outputs
#
# The backend's own logic (fallbacks, look-ups after a lost answer, the
# runner) replayed on the recordings above, with an injected runner.

Answer = tuple[int | None, str, str]


class Replay:
    """A runner answering by tool (and sub-command); records every call."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []

    def __call__(
        self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str]
    ) -> CommandResult:
        argv = list(argv)
        self.calls.append(argv)
        self.envs.append(dict(env))
        key = argv[0]
        queue = self.answers.get(key)
        assert queue, f"unexpected call {argv}"
        rc, out, err = queue.pop(0) if len(queue) > 1 else queue[0]
        return CommandResult(argv=tuple(argv), returncode=rc, stdout=out, stderr=err,
                             seconds=0.001, timeout_s=timeout_s)


def answer(name: str) -> Answer:
    _, rc, out, err = recorded(name)
    return rc, out, err


def replay_backend(answers: dict[str, list[Answer]]) -> tuple[SubprocessBackend, Replay]:
    runner = Replay(answers)
    return SubprocessBackend(runner=runner, clock=FakeClock()), runner


def test_outcome_falls_back_to_scontrol_when_accounting_is_off() -> None:
    backend, runner = replay_backend(
        {
            "sacct": [answer("sacct_accounting_disabled")],
            "scontrol": [answer("scontrol_show_job_failed_exit3")],
        }
    )
    job = manifest()["scontrol_show_job_failed_exit3"][1][3]
    outcome = backend.job_outcome(job)
    assert (outcome.state, outcome.exit_code, outcome.source) == ("FAILED", 3, "scontrol")
    assert [c[0] for c in runner.calls] == ["sacct", "scontrol"]


def test_outcome_from_sacct_needs_no_scontrol() -> None:
    backend, runner = replay_backend({"sacct": [answer("sacct_timeout")]})
    job = manifest()["sacct_timeout"][1][2]
    assert backend.job_outcome(job).state == "TIMEOUT"
    assert [c[0] for c in runner.calls] == ["sacct"]


def test_outcome_unknown_everywhere_is_job_not_found() -> None:
    backend, _ = replay_backend(
        {"sacct": [answer("sacct_unknown_job")], "scontrol": [answer("scontrol_invalid_job")]}
    )
    with pytest.raises(JobNotFound):
        backend.job_outcome("999999")


def test_outcome_with_slurmdbd_down_is_not_job_gone() -> None:
    backend, _ = replay_backend(
        {"sacct": [answer("sacct_controller_down")], "scontrol": [answer("scontrol_invalid_job")]}
    )
    with pytest.raises(ControllerUnreachable):
        backend.job_outcome("5")


def test_submit_stalled_controller_still_created_the_job() -> None:
    row = "77|PENDING|root|debug|1||UNLIMITED|0:00|Priority|N/A|(null)|llama\n"
    backend, runner = replay_backend(
        {
            # before sbatch: no such job; after the lost answer: job 77
            "squeue": [(0, "", ""), (0, row, "")],
            "sbatch": [answer("sbatch_controller_stalled")],
        }
    )
    request = BatchRequest(
        script_path=Path("/w/job.slurm"), work_dir=Path("/w"), job_name="llama", user="root"
    )
    assert backend.submit(request) == "77"
    assert [c[0] for c in runner.calls] == ["squeue", "sbatch", "squeue"]
    assert runner.calls[0] == slurmcli.squeue_find_argv("llama", "root")


def test_submit_lookup_uses_the_scripts_own_job_name(tmp_path: Path) -> None:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=llama_auto_test\n#SBATCH -N 1\nsrun x\n")
    row = "78|PENDING|root|debug|1||UNLIMITED|0:00|Priority|N/A|(null)|llama_auto_test\n"
    backend, runner = replay_backend(
        {"squeue": [(0, "", ""), (0, row, "")], "sbatch": [answer("sbatch_controller_stalled")]}
    )
    request = BatchRequest(script_path=script, work_dir=tmp_path, user="root")
    assert backend.submit(request) == "78"
    assert runner.calls[0] == slurmcli.squeue_find_argv("llama_auto_test", "root")


def test_submit_stalled_and_no_job_reports_the_error() -> None:
    old = "70|RUNNING|root|debug|1|n1|UNLIMITED|0:00|None|N/A|(null)|llama\n"
    backend, _ = replay_backend(
        {"squeue": [(0, old, "")], "sbatch": [answer("sbatch_controller_stalled")]}
    )
    request = BatchRequest(script_path=Path("/w/llama"), work_dir=Path("/w"), user="root")
    with pytest.raises(ControllerUnreachable, match="Socket timed out"):
        backend.submit(request)  # job 70 was there before: never adopted


def test_submit_refused() -> None:
    backend, _ = replay_backend(
        {"squeue": [(0, "", "")], "sbatch": [answer("sbatch_bad_partition")]}
    )
    request = BatchRequest(script_path=Path("/w/x.sh"), work_dir=Path("/w"), user="root")
    with pytest.raises(CommandFailed, match="Invalid partition name specified"):
        backend.submit(request)


def test_submit_parses_parsable_and_passes_env() -> None:
    backend, runner = replay_backend(
        {"squeue": [(0, "", "")], "sbatch": [answer("sbatch_parsable_cluster")]}
    )
    request = BatchRequest(
        script_path=Path("/w/x.sh"), work_dir=Path("/w"), user="root", env={"A": "1"}
    )
    assert backend.submit(request) == recorded("sbatch_parsable_cluster")[2].split(";")[0]
    assert runner.envs[1]["A"] == "1"


def test_query_errors() -> None:
    backend, _ = replay_backend({"squeue": [answer("squeue_controller_down")]})
    with pytest.raises(ControllerUnreachable):
        backend.query_job("5")
    backend, _ = replay_backend({"squeue": [(None, "", "")]})
    with pytest.raises(CommandTimedOut):
        backend.query_job("5")
    backend, _ = replay_backend({"squeue": [answer("squeue_job_default")]})
    with pytest.raises(CommandFailed, match="unexpected output"):
        backend.query_job(manifest()["squeue_job_default"][1][2])


def test_find_jobs_filters_exact_name_and_user() -> None:
    rows = (
        "1|RUNNING|root|debug|1|n1|9:00|1:00|None|N/A|(null)|a\n"
        "2|RUNNING|bob|debug|1|n1|9:00|1:00|None|N/A|(null)|a\n"
        "3|RUNNING|root|debug|1|n1|9:00|1:00|None|N/A|(null)|ab\n"
    )
    backend, _ = replay_backend({"squeue": [(0, rows, "")]})
    assert [j.job_id for j in backend.find_jobs("a", "root")] == ["1"]


def test_cancel_gone_is_fine_unreachable_is_not() -> None:
    backend, runner = replay_backend({"scancel": [answer("scancel_unknown_step")]})
    backend.cancel("1", "99")
    assert runner.calls == [["scancel", "1.99"]]
    backend, _ = replay_backend({"scancel": [answer("scancel_controller_down")]})
    with pytest.raises(ControllerUnreachable):
        backend.cancel("5")


def test_run_step_results_and_errors() -> None:
    backend, _ = replay_backend({"srun": [(3, "out\n", "oops\n")]})
    step = StepRequest(job_id="5", argv=("x",), nodes=1, timeout_s=7)
    assert backend.run_step(step) == StepResult(3, "out\n", "oops\n")
    backend, _ = replay_backend({"srun": [answer("srun_cancelled_allocation")]})
    with pytest.raises(JobNotFound):
        backend.run_step(step)
    backend, _ = replay_backend({"srun": [answer("srun_controller_down")]})
    with pytest.raises(ControllerUnreachable):
        backend.run_step(step)
    backend, _ = replay_backend({"srun": [(None, "", "")]})
    with pytest.raises(CommandTimedOut) as caught:
        backend.run_step(step)
    assert caught.value.timeout_s == 7


def test_gpu_and_container_support_replayed() -> None:
    backend, runner = replay_backend({"srun": [answer("srun_gpu_no_nvidia_smi")]})
    assert backend.gpu_processes("5", 2) == []
    backend, runner = replay_backend({"srun": [answer("srun_help")]})
    assert backend.has_container_support() is False
    assert backend.has_container_support() is False
    assert runner.calls == [["srun", "--help"]]  # asked once


def test_environment_of_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/mine.conf")
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    monkeypatch.setenv("SLURM_NTASKS", "64")
    runner = Replay({"squeue": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, env={"EXTRA": "1"})
    backend.find_jobs("x", "root")
    (env,) = runner.envs
    assert env["SLURM_CONF"] == "/etc/slurm/mine.conf"
    assert env["EXTRA"] == "1"
    assert "SLURM_JOB_ID" not in env and "SLURM_NTASKS" not in env
    assert env["PATH"] == os.environ["PATH"]


def test_allocate_returns_the_existing_job(tmp_path: Path) -> None:
    row = "41|RUNNING|root|debug|2|n[1-2]|3:59:00|1:00|None|N/A|(null)|acct-trtllm.persistent\n"
    backend, runner = replay_backend({"squeue": [(0, row, "")]})
    request = req(log_path=tmp_path / ".salloc.log", user="root")
    assert backend.allocate(request) == "41"
    assert not request.log_path.exists()  # no salloc started
    assert runner.calls == [slurmcli.squeue_find_argv("acct-trtllm.persistent", "root")]


def test_squeue_row_with_a_request_nonce_parses() -> None:
    row = ("41|RUNNING|root|debug|2|n[1-2]|3:59:00|1:00|None|N/A|"
           "slurm_fsm:repo=ab12;req=0123abcd|acct-trtllm.persistent\n")
    (job,) = slurmcli.parse_jobs(row)
    assert job.comment == "slurm_fsm:repo=ab12;req=0123abcd"
    assert job.name == "acct-trtllm.persistent"
    assert request_of(job) == "0123abcd"


TAG = "slurm_fsm:repo=ab12"


def row(job_id: str, comment: str, state: str = "RUNNING") -> str:
    return (f"{job_id}|{state}|root|debug|2|n[1-2]|3:59:00|1:00|None|N/A|{comment}|"
            "acct-trtllm.persistent\n")


def test_allocate_prefers_its_own_earlier_job(tmp_path: Path) -> None:
    """A retry of a request whose answer was lost adopts exactly its own job."""
    rows = row("40", f"{TAG};req=ffffffff") + row("41", f"{TAG};req=0123abcd")
    backend, _ = replay_backend({"squeue": [(0, rows, "")]})
    request = req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG,
                  nonce="0123abcd")
    assert backend.allocate(request) == "41"
    assert not request.log_path.exists()  # no salloc started
    # another request (another nonce) adopts the oldest of the checkout's jobs
    assert backend.allocate(attrs.evolve(request, nonce="99999999")) == "40"


def salloc_that_waits(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "salloc", "exec sleep 60")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_allocate_never_takes_a_concurrent_requests_job(tmp_path: Path) -> None:
    """Another run's job of the same checkout and name appears while our salloc waits:
    it is not ours; ours (the nonce of the request) is returned once it appears."""
    env = salloc_that_waits(tmp_path)
    theirs = row("51", f"{TAG};req=ffffffff", "PENDING")
    runner = Replay({"squeue": [(0, "", ""), (0, theirs, ""), (0, theirs, ""),
                                (0, row("50", f"{TAG};req=0123abcd") + theirs, "")]})
    backend = SubprocessBackend(runner=runner, clock=FakeClock(), env=env)
    request = req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG,
                  nonce="0123abcd")
    assert backend.allocate(request, wait_s=60) == "50"
    assert not [c for c in runner.calls if c[0] == "scancel"]
    assert f"--comment={TAG};req=0123abcd" in slurmcli.salloc_argv(request)


def test_allocate_adopts_its_job_after_salloc_lost_the_answer(tmp_path: Path) -> None:
    """salloc exits 1 with "Socket timed out" although its job was made: the job of
    the request's nonce, seen a moment later, is adopted (it used to be a failure, and
    the job was left for the next run's orphan search)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gone = tmp_path / "salloc-exited"
    fake_tool(bin_dir, "salloc",
              'echo "salloc: error: Socket timed out on send/recv operation"; '
              f'touch "{gone}"; exit 1')
    mine = row("60", f"{TAG};req=0123abcd", "PENDING")
    calls: list[list[str]] = []

    def squeue(argv: Sequence[str], timeout_s: float, env: Mapping[str, str]) -> CommandResult:
        calls.append(list(argv))
        out = ""
        if len(calls) == 2:  # the first poll: answered once salloc has exited
            until = time.monotonic() + 30
            while not gone.exists() and time.monotonic() < until:
                time.sleep(0.01)
            time.sleep(1.0)  # its exit code reaped by then
        elif len(calls) > 3:  # the poll after the one that saw salloc's exit code
            out = mine  # the job shows up after salloc reported its failure
        return CommandResult(argv=tuple(argv), returncode=0, stdout=out, stderr="",
                             seconds=0.001, timeout_s=timeout_s)

    backend = SubprocessBackend(runner=squeue, clock=FakeClock(),
                                env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    request = req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG,
                  nonce="0123abcd")
    assert backend.allocate(request, wait_s=60) == "60"


def test_allocate_racing_an_older_request_cancels_only_its_own(tmp_path: Path) -> None:
    """Two requests raced past the existence check: the older job wins, ours is cancelled."""
    env = salloc_that_waits(tmp_path)
    both = row("50", f"{TAG};req=ffffffff") + row("51", f"{TAG};req=0123abcd", "PENDING")
    runner = Replay({"squeue": [(0, "", ""), (0, both, "")], "scancel": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, clock=FakeClock(), env=env)
    request = req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG,
                  nonce="0123abcd")
    assert backend.allocate(request, wait_s=60) == "50"
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "51"]]


def test_allocate_picks_a_nonce_when_the_request_has_none(tmp_path: Path) -> None:
    env = salloc_that_waits(tmp_path)
    runner = Replay({"squeue": [(0, "", "")], "scancel": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, clock=FakeClock(), env=env)
    with pytest.raises(AllocationFailed) as caught:
        backend.allocate(req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG),
                         wait_s=1)
    comment = next(a for a in caught.value.argv if a.startswith("--comment="))
    tag, nonce = split_comment(comment.removeprefix("--comment="))
    assert tag == TAG and nonce is not None


def test_a_failed_allocate_cancels_only_its_own_late_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Giving up: another run's job of the checkout and name is left alone."""
    env = salloc_that_waits(tmp_path)
    theirs = row("51", f"{TAG};req=ffffffff", "PENDING")
    mine = row("52", f"{TAG};req=0123abcd", "PENDING")
    clock = FakeClock()
    runner = Replay({"scancel": [(0, "", "")]})
    down = (1, "", "slurm_load_jobs error: Socket timed out on send/recv operation")

    def squeue(argv: Sequence[str], timeout_s: float, env: Mapping[str, str]) -> CommandResult:
        if argv[0] != "squeue":
            return runner(argv, timeout_s, env)
        runner.calls.append(list(argv))
        # nothing at first; then the controller answers no poll within the window;
        # after it the clean-up's squeue sees both requests' jobs
        rc, out, err = ((0, "", "") if len(runner.calls) == 1
                        else down if not stopped else (0, theirs + mine, ""))
        return CommandResult(argv=tuple(argv), returncode=rc, stdout=out, stderr=err,
                             seconds=0.001, timeout_s=timeout_s)

    backend = SubprocessBackend(runner=squeue, clock=clock, env=env)
    stopped: list[bool] = []
    stop = backend._stop
    monkeypatch.setattr(backend, "_stop", lambda proc: (stopped.append(True), stop(proc)))
    request = req(log_path=tmp_path / ".salloc.log", user="root", comment=TAG,
                  nonce="0123abcd")
    with pytest.raises(AllocationFailed):
        backend.allocate(request, wait_s=5)
    assert [c for c in runner.calls if c[0] == "scancel"] == [["scancel", "52"]]


def fake_tool(folder: Path, name: str, body: str) -> None:
    tool = folder / name
    tool.write_text(f"#!/bin/bash\n{body}\n")
    tool.chmod(0o755)


def test_allocate_reports_salloc_error_from_its_log(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "salloc", f"cat {DATA / 'salloc_bad_partition.log'} >&2; exit 1")
    runner = Replay({"squeue": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    request = req(log_path=tmp_path / "work_dirs" / ".salloc.log", user="root")
    with pytest.raises(AllocationFailed) as caught:
        backend.allocate(request, wait_s=10)
    assert "Invalid partition name specified" in str(caught.value)
    assert caught.value.stderr_tail == data("salloc_bad_partition.log").strip()
    assert caught.value.returncode == 1
    assert caught.value.argv == slurmcli.salloc_argv(request)


def test_allocate_gives_up_and_stops_salloc(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "salloc.pid"
    fake_tool(
        bin_dir,
        "salloc",
        f'echo $$ > {pid_file}; echo "salloc: Pending job allocation 9"; exec sleep 60',
    )
    runner = Replay({"squeue": [(0, "", "")], "scancel": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    request = req(log_path=tmp_path / ".salloc.log", user="root")
    with pytest.raises(AllocationFailed, match=r"appeared within 0\.3 s"):
        backend.allocate(request, wait_s=0.3)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped
    assert "Pending job allocation 9" in request.log_path.read_text()


def test_allocate_waits_on_the_backend_clock(tmp_path: Path) -> None:
    """The allocate deadline reads the injected clock, not time.monotonic: an hour of
    fake waiting passes at once (it used to take ``sleep=`` but read the real clock)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "salloc", "exec sleep 60")
    runner = Replay({"squeue": [(0, "", "")], "scancel": [(0, "", "")]})
    clock = FakeClock()
    backend = SubprocessBackend(runner=runner, clock=clock,
                                env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert backend.clock is clock
    request = req(log_path=tmp_path / ".salloc.log", user="root")
    t0 = time.monotonic()
    with pytest.raises(AllocationFailed, match=r"appeared within 3600 s"):
        backend.allocate(request, wait_s=3600)
    assert clock.now() >= 3600
    assert time.monotonic() - t0 < 10


def test_backend_clock_is_part_of_the_protocol() -> None:
    from slurm_fsm.backend import SlurmBackend
    from slurm_fsm.clock import SystemClock

    assert isinstance(SlurmBackend.__dict__["clock"], property)
    assert isinstance(SubprocessBackend().clock, SystemClock)


# ------------------------------------------------------- runner and scripts


def test_run_command_basics(tmp_path: Path) -> None:
    ok = run_command(["bash", "-c", "echo out; echo err >&2; exit 5"], 10, dict(os.environ))
    assert (ok.returncode, ok.stdout, ok.stderr) == (5, "out\n", "err\n")
    missing = run_command([str(tmp_path / "no-such-tool")], 10, dict(os.environ))
    assert missing.returncode == 127 and "No such file" in missing.stderr


def test_run_command_timeout_terms_then_kills() -> None:
    t0 = time.monotonic()
    polite = run_command(["sleep", "30"], 0.2, dict(os.environ))
    assert polite.returncode is None and time.monotonic() - t0 < 5
    t0 = time.monotonic()
    stubborn = run_command(
        ["bash", "-c", "trap '' TERM; echo started; sleep 30 & wait"],
        0.5,
        dict(os.environ),
        grace_s=0.3,
    )
    assert stubborn.returncode is None
    assert stubborn.stdout == "started\n"
    assert time.monotonic() - t0 < 10


def test_local_script(tmp_path: Path) -> None:
    backend = SubprocessBackend()
    script = tmp_path / "s.sh"
    script.write_text('echo "x=$X cwd=$(pwd) job=${SLURM_JOB_ID-unset}"; echo e >&2; exit 7\n')
    log_path = tmp_path / "out" / "s.log"
    started = backend.start_script(
        ScriptRequest(script_path=script, log_path=log_path,
                      env={"X": "1", "SLURM_JOB_ID": "9"}, cwd=tmp_path)
    )
    assert started.wait(timeout_s=10) == 7
    assert started.poll() == 7
    assert log_path.read_text() == f"x=1 cwd={tmp_path} job=9\ne\n"


def test_local_script_terminate_ends_the_group(tmp_path: Path) -> None:
    backend = SubprocessBackend()
    script = tmp_path / "s.sh"
    child_pid = tmp_path / "child.pid"
    script.write_text(f"sleep 60 & echo $! > {child_pid}; wait\n")
    started = backend.start_script(ScriptRequest(
        script_path=script, log_path=tmp_path / "s.log", env={}, cwd=tmp_path))
    deadline = time.monotonic() + 10
    while not child_pid.exists() or not child_pid.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert started.poll() is None
    started.terminate(grace_s=5)
    assert started.poll() == 128 + signal.SIGTERM
    assert dead(int(child_pid.read_text()))


def dead(pid: int) -> bool:
    """Gone, or a zombie that init has not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_current_user_and_nodelists() -> None:
    backend = SubprocessBackend()
    assert backend.current_user() == pwd.getpwuid(os.geteuid()).pw_name
    assert backend.expand_nodelist("n[1-2]") == ["n1", "n2"]
    assert backend.compress_nodelist(["n1", "n2"]) == "n[1-2]"


def test_salloc_job_id_from_its_log() -> None:
    granted = (DATA / "salloc_granted.log").read_text()
    assert granted.startswith("salloc: Granted job allocation ")
    assert slurmcli.salloc_job_id(granted) == granted.split()[-1]
    assert slurmcli.salloc_job_id("salloc: Pending job allocation 77\n") == "77"
    assert slurmcli.salloc_job_id((DATA / "salloc_bad_partition.log").read_text()) is None


def test_gpu_processes_ignore_the_allocations_own_processes() -> None:
    """A sibling job's process (its pid listed by ``scontrol listpids``) is no intruder."""
    text = "\n".join([
        "0: @@slurm_fsm-node n1",
        "1: @@slurm_fsm-node n2",
        "0: 4242, /usr/bin/ollama, 5012 MiB",
        "0: 777, python, 100 MiB",
        "1: 777, python, 100 MiB",
        "0: @@slurm_fsm-ours 777 778 ",
        "1: @@slurm_fsm-ours ",
    ])
    found = [(p.node, p.pid) for p in slurmcli.parse_gpu_processes(text)]
    assert found == [("n1", 4242), ("n2", 777)]


def test_helper_steps_take_no_gpu() -> None:
    step = StepRequest(job_id="7", argv=("ls",), nodes=1, overlap=True, no_gpus=True)
    assert slurmcli.srun_step_argv(step)[4:7] == ["--ntasks-per-node=1", "--overlap", "--gres=none"]


# ---------------------------------------- a persistent run's own steps (issue 25, item 2)
def test_step_outcomes_asks_sacct_for_those_steps_only() -> None:
    backend, runner = replay_backend({"sacct": [
        (0, "2.0|CANCELLED by 0|0:9|00:00:03|\n2.1|COMPLETED|0:0|00:00:00|\n", "")]})
    got = backend.step_outcomes("2", ["0", "1"])
    assert runner.calls == [["sacct", "-j", "2.0,2.1",
                             "--format=JobID,State,ExitCode,Elapsed,MaxRSS,AllocTRES", "-n",
                             "-P"]]
    assert [(o.job_id, o.state, o.cancelled_by) for o in got] == [
        ("2.0", "CANCELLED", "0"), ("2.1", "COMPLETED", "")]
    assert backend.step_outcomes("2", []) == [] and len(runner.calls) == 1


def test_step_outcomes_without_a_row_yet_is_empty() -> None:
    backend, _ = replay_backend({"sacct": [(0, "", "")]})
    assert backend.step_outcomes("2", ["0"]) == []
    assert backend.step_outcomes("2", ["0", "1"]) == []


def test_step_outcomes_when_accounting_is_off_or_down() -> None:
    backend, _ = replay_backend({"sacct": [answer("sacct_accounting_disabled")]})
    with pytest.raises(JobNotFound, match="accounting is disabled"):
        backend.step_outcomes("2", ["0"])
    backend, _ = replay_backend({"sacct": [answer("sacct_controller_down")]})
    with pytest.raises(BackendError) as err:
        backend.step_outcomes("2", ["0"])
    assert not isinstance(err.value, JobNotFound)


# ------------------------------------------------ once steps: the node-local lock


def _once_tools(tmp_path: Path, *, flock: bool) -> dict[str, str]:
    """A PATH with the tools a container may have: with or without flock(1)."""
    import shutil

    bin_dir = tmp_path / ("bin-flock" if flock else "bin-noflock")
    bin_dir.mkdir()
    for tool in ("sh", "mkdir", "sleep", "cat", "hostname", *(("flock",) if flock else ())):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    return {"PATH": str(bin_dir)}


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "python-fcntl"])
def test_once_runs_the_command_once_under_the_lock(tmp_path: Path, flock: bool) -> None:
    """Three racers on one node: one runs the command (it takes a second), the two
    others wait for the lock, re-check the marker and skip; exit 0 for all."""
    env = _once_tools(tmp_path, flock=flock)
    counter = tmp_path / "counter"
    argv = slurmcli.once_argv(["sh", "-c", f'echo x >> "{counter}"; sleep 1'], "k",
                              str(tmp_path / "once"))
    procs = [subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = []
    for p in procs:
        _, err = p.communicate(timeout=60)
        results.append((p.returncode, err))
    assert [rc for rc, _ in results] == [0, 0, 0]
    assert counter.read_text() == "x\n"
    skipped = [err for _, err in results if slurmcli.ONCE_SKIPPED in err]
    assert len(skipped) == 2
    assert not any("not node-locked" in err for _, err in results)


def test_once_keeps_a_failure_and_tries_again(tmp_path: Path) -> None:
    """A failed command leaves no marker and keeps its exit status: the next try runs."""
    env = _once_tools(tmp_path, flock=True)
    flag = tmp_path / "ok"
    argv = slurmcli.once_argv(["sh", "-c", f'[ -e "{flag}" ] || exit 7'], "k",
                              str(tmp_path / "once"))
    assert subprocess.run(argv, env=env, check=False, timeout=60).returncode == 7
    flag.touch()
    assert subprocess.run(argv, env=env, check=False, timeout=60).returncode == 0
    flag.unlink()  # done now: not run again, so its failure cannot show
    done = subprocess.run(argv, env=env, check=False, timeout=60, capture_output=True,
                          text=True)
    assert done.returncode == 0 and slurmcli.ONCE_SKIPPED in done.stderr
    other = slurmcli.once_argv(["sh", "-c", f'[ -e "{flag}" ] || exit 7'], "other key",
                               str(tmp_path / "once"))
    assert subprocess.run(other, env=env, check=False, timeout=60).returncode == 7


def test_once_step_argv_quotes_nothing_from_the_request_into_the_script() -> None:
    """The command, the lock and the marker are positional arguments of ``sh -c``."""
    request = StepRequest(job_id="5", argv=("echo", "$(id)", "a'b"), nodes=2,
                          chdir="/r", once="install x; rm -rf /")
    argv = slurmcli.srun_step_argv(request)
    assert argv[-3:] == ["echo", "$(id)", "a'b"]
    script = argv[argv.index("-c") + 1]
    assert "$(id)" not in script and "rm -rf" not in script
    assert argv[argv.index("-c") + 3] == slurmcli.ONCE_DIR_HOST  # no container: the host
    plain = slurmcli.srun_step_argv(attrs.evolve(request, once=None))
    assert plain[-3:] == ["echo", "$(id)", "a'b"] and "flock" not in " ".join(plain)


def test_allocate_whose_granted_job_is_gone_says_it_vanished(tmp_path: Path) -> None:
    """salloc --no-shell was granted job 9 and exited 0, and squeue never lists it:
    the job was cancelled from outside (issue 28, race 133) - AllocationVanished. A
    salloc still pending when the wait ends (above) is a plain AllocationFailed."""
    from slurm_fsm.errors import AllocationVanished

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "salloc", 'echo "salloc: Granted job allocation 9"; exit 0')
    runner = Replay({"squeue": [(0, "", "")], "scancel": [(0, "", "")]})
    backend = SubprocessBackend(runner=runner, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    request = req(log_path=tmp_path / ".salloc.log", user="root")
    with pytest.raises(AllocationVanished, match=r"its job 9 was made and is gone"):
        backend.allocate(request, wait_s=0.3)
    fake_tool(bin_dir, "salloc", 'echo "salloc: Pending job allocation 9"; exec sleep 60')
    with pytest.raises(AllocationFailed) as caught:
        backend.allocate(request, wait_s=0.3)
    assert not isinstance(caught.value, AllocationVanished)
