"""Builders (exact argv), parsers (on literal Slurm output) and the classifier.

The literal outputs are in tests/data: ``*.stdout``/``*.stderr``/``*.log``
recorded from the real Slurm 22.05 cluster (MANIFEST.tsv has each command and
exit code), ``*_from_docs*`` written from docs/local-slurm.md where this
cluster cannot produce them.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from slurm_fsm import slurmcli
from slurm_fsm.backend import (
    AllocationRequest,
    BatchRequest,
    ContainerOptions,
    GpuProcess,
    StepRequest,
)
from slurm_fsm.duration import Duration
from slurm_fsm.errors import (
    CommandFailed,
    CommandTimedOut,
    ControllerUnreachable,
    JobNotFound,
)

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


def test_all_names_exist() -> None:
    for name in slurmcli.__all__:
        assert hasattr(slurmcli, name), name


# ------------------------------------------------------------------ builders


def test_squeue_builders() -> None:
    fmt = "%i|%T|%u|%P|%D|%N|%L|%M|%r|%S|%j"
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
        "--container-image=nvcr.io/nvidia/pytorch:24.05-py3",
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


def test_gpu_processes_argv_and_its_script_runs_without_nvidia_smi(tmp_path: Path) -> None:
    argv = slurmcli.gpu_processes_argv("7", 2)
    assert argv[:8] == [
        "srun",
        "--jobid=7",
        "-N",
        "2",
        "--ntasks-per-node=1",
        "--overlap",
        "-l",
        "bash",
    ]
    assert argv[8] == "-c"
    script = argv[9]
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
    assert done.stdout == "@@slurm_fsm-node n1\n4242, /usr/bin/python3, 1024 MiB\n"
    assert done.stderr.strip() == (
        "--query-compute-apps=pid,name,used_memory --format=csv,noheader"
    )


def test_probe_gpu_argv() -> None:
    argv = slurmcli.probe_gpu_argv("gpu", "acct")
    assert argv[:7] == [
        "srun",
        "--partition=gpu",
        "--account=acct",
        "-N",
        "1",
        "--ntasks-per-node=1",
        "--job-name=slurm_fsm-gpu-probe",
    ]
    assert argv[7:9] == ["bash", "-c"]
    assert "nvidia-smi --query-gpu=name --format=csv,noheader" in argv[9]
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
        "SLURM_TIME_FORMAT": "standard",
        "SBATCH_PARTITION": "p",
    }
    env = slurmcli.clean_env(environ, {"SLURM_JOB_ID": "9", "PATH": "/x"})
    assert env["SLURM_JOB_ID"] == "9"
    assert env["PATH"] == "/x"
    assert "SLURM_NTASKS" not in env


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
    assert argv[:4] == ["squeue", "-j", argv[2], "-h"] and argv[5] == slurmcli.JOB_FORMAT
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
    row = "7|RUNNING|bob|batch|1|n1|1:00:00|5:00|None|2026-01-01T00:00:00|odd|name|x\n"
    (job,) = slurmcli.parse_jobs(row)
    assert job.name == "odd|name|x"
    assert job.time_left.seconds == 3600
    assert job.elapsed.seconds == 300


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
    row = "7|RUNNING|bob|batch|1|n1|garbage|??|None|N/A|j"
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
        ("sacct_accounting_disabled_from_docs", "Slurm accounting storage is disabled"),
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
    assert slurmcli.accounting_disabled(data("sacct_accounting_disabled_from_docs.stderr"))
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
