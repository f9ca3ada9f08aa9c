"""The pre-step over SubprocessBackend on the real local Slurm cluster.

The build runs with (on this cluster, which has pyxis, as on a GPU site without it)
``SlurmBuilder(container=False)``: the batch job runs the repo's ``build.sh``
on the node itself. Such a builder does not put the image into the spec the
run uses (docs/build.md), so the run itself needs no container either. Every
job has a name of its own (helpers.JobNames), cancelled at the end of each test.
"""

from __future__ import annotations

import stat
from pathlib import Path

import attrs
import pytest

from slurm_fsm.build import (
    BUILD_SCRIPT_NAME,
    EXIT_MARKER,
    SlurmBuilder,
    build_job_name,
    default_pre_step,
    make_pre_step,
)
from slurm_fsm.executor import Events, Executor
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm_dev.localcluster import ClusterInfo

from .helpers import (
    JobNames,
    RecordingBackend,
    jobs_named,
    make_spec,
    slurm,
    until,
    without_pyxis,
)

pytestmark = pytest.mark.slurm

PROGRESS = ("[ 10%] Building CXX object a.o", "[ 55%] Building CUDA object b.o",
            "[100%] Built target x")
IMAGE = "registry.example.com/team/trtllm:x86_64-test"


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def ever_named(name: str) -> list[tuple[str, str]]:
    """``(job id, state)`` of every job of this name accounting knows (running or done)."""
    proc = slurm("sacct", "-n", "-X", "-P", f"--name={name}", "-o", "JobID,State",
                 "-S", "now-1hours")
    assert proc.returncode == 0, proc.stderr
    return [(i, st) for i, st in (line.split("|") for line in proc.stdout.splitlines())]


def accounted(name: str, count: int = 1) -> list[tuple[str, str]]:
    """:func:`ever_named`, once accounting has ``count`` rows (slurmdbd lags slurmctld)."""
    return until(f"{count} job(s) named {name} in sacct",
                 lambda: rows if len(rows := ever_named(name)) >= count else None)


def make_repo(root: Path, exit_code: int, *, tags: bool = True) -> Path:
    """A repo root whose executable build.sh prints make-style progress, then exits."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    echo = "\n".join(f"echo '{line}'; sleep 0.3" for line in PROGRESS)
    build = repo / "build.sh"
    build.write_text(
        "#!/bin/bash\n"
        'echo "build.sh args: $* in $PWD on $(hostname) as $SLURM_JOB_ID"\n'
        f"{echo}\n"
        + ("echo 'a.cpp:1:1: error: boom' >&2\n" if exit_code else "")
        + f"exit {exit_code}\n"
    )
    build.chmod(build.stat().st_mode | stat.S_IXUSR)
    if tags:
        (repo / "jenkins").mkdir()
        (repo / "jenkins" / "current_image_tags.properties").write_text(
            f"# test tags\nLLM_DOCKER_IMAGE={IMAGE}\nLLM_SBSA_DOCKER_IMAGE=registry.example.com/"
            "team/trtllm:sbsa-test\n")
    return repo


def build_spec(cluster: ClusterInfo, root: Path, names: JobNames, **over: object) -> JobSpec:
    name = names.new("build")
    spec = make_spec(cluster, root, name, build_project=True, **over)
    names.names.append(build_job_name(spec))  # the build job is cancelled at the end too
    return spec


def test_build_passes_then_the_run_goes_on(local_cluster: ClusterInfo, names: JobNames,
                                           tmp_path: Path) -> None:
    make_repo(tmp_path, 0)
    spec = build_spec(local_cluster, tmp_path, names, device_type="NVIDIA H100 80GB HBM3",
                      success_patterns="RUN-OK")
    spec.script_path.write_text("#!/bin/bash\nsrun hostname\necho RUN-OK\n")
    backend = RecordingBackend()
    events = Recorder()
    executor = Executor(spec, backend, events=events,
                        pre_step=make_pre_step(SlurmBuilder(container=False)))
    try:
        report = executor.run()
        assert report.status is Status.PASSED, (report.summary, report.log_tail)
        assert report.exit_code_for_cli == 0
        # the build was a batch job that ended (sacct asked) before the allocation was made
        tools = backend.tools()
        assert tools.index("sbatch") < tools.index("sacct")
        assert not any("--container-image" in a for argv in backend.argvs for a in argv)
        ((build_id, build_state),) = accounted(build_job_name(spec))
        assert build_state == "COMPLETED"
        assert report.allocation_id is not None
        assert int(build_id) < int(report.allocation_id)
        # the build log: our build.sh with the arch, then the exit line
        logs = list((spec.work_dir / "build").glob("build_*.log"))
        assert len(logs) == 1
        lines = logs[0].read_text().splitlines()
        assert lines[0].startswith(f"build.sh args: -a 90-real in {spec.repo_root} on ")
        assert lines[1:4] == list(PROGRESS)
        assert lines[-1] == f"{EXIT_MARKER} 0"
        # progress came through events.message, each line once, in order
        assert [m for m in events.messages if "%]" in m] == list(PROGRESS)
        # the image was resolved from the tags file, but the host build does not put it
        # into the spec: the run has no container
        assert any(IMAGE in m for m in events.messages)
        assert executor.spec.docker_image is None
        assert jobs_named(spec.job_name, local_cluster.user) == [
            (report.allocation_id, "RUNNING")]
        # the build job finished on its own: squeue no longer lists it
        assert jobs_named(build_job_name(spec), local_cluster.user) == []
    finally:
        released = Executor(attrs.evolve(spec, release_allocation=True), backend).run()
    assert released.status is Status.RELEASED, released.summary
    assert not spec.state_path.exists()


def test_build_fails_and_nothing_is_allocated(local_cluster: ClusterInfo, names: JobNames,
                                              tmp_path: Path) -> None:
    # docker_image in the spec: no tags file needed (the run never happens)
    make_repo(tmp_path, 1, tags=False)
    spec = build_spec(local_cluster, tmp_path, names, device_type="GB200",
                      docker_image=IMAGE, container_name="c")
    backend = RecordingBackend()
    report = Executor(spec, backend,
                      pre_step=make_pre_step(SlurmBuilder(container=False))).run()
    assert report.status is Status.BUILD_FAILED, report.summary
    assert report.exit_code_for_cli == 3
    assert "FAILED, exit code 1" in report.summary
    assert report.job_id is not None
    assert report.log_files["stdout"] == str(spec.work_dir / "build" /
                                             f"build_{report.job_id}.log")
    assert report.log_tail[0].startswith("build.sh args: -a 100-real")  # GB200
    assert "a.cpp:1:1: error: boom" in report.log_tail
    assert report.log_tail[-1] == f"{EXIT_MARKER} 1"
    assert "srun" not in backend.tools()
    assert not spec.state_path.exists()
    assert not spec.salloc_log.exists()
    # no allocation: none running now, and none ever in accounting
    assert slurm("squeue", "-h", f"--name={spec.job_name}").stdout.strip() == ""
    assert accounted(build_job_name(spec)) == [(report.job_id, "FAILED")]
    assert ever_named(spec.job_name) == []  # asked after the build's row is in


def test_container_build_without_pyxis_submits_nothing(local_cluster: ClusterInfo,
                                                       names: JobNames, tmp_path: Path) -> None:
    make_repo(tmp_path, 0)
    spec = build_spec(local_cluster, tmp_path, names, device_type="H100", container_name="c")
    backend = RecordingBackend(env=without_pyxis(local_cluster, tmp_path / "conf"))
    report = Executor(spec, backend, pre_step=default_pre_step).run()
    assert report.status is Status.BUILD_FAILED, report.summary
    assert "no pyxis" in report.summary
    assert "sbatch" not in backend.tools()
    assert not (spec.work_dir / "build" / BUILD_SCRIPT_NAME).exists()
    assert ever_named(build_job_name(spec)) == [] and ever_named(spec.job_name) == []
