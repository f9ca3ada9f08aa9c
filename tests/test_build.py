"""The pre-step (slurm_fsm.build) on the fake cluster: every branch."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from slurm_fsm.backend import SlurmBackend
from slurm_fsm.build import (
    BUILD_LOG_PATTERN,
    BUILD_SCRIPT_NAME,
    EXIT_MARKER,
    BuildError,
    BuildOutcome,
    BuildRequest,
    SlurmBuilder,
    _ProgressLines,
    build_arch,
    build_job_name,
    default_build_command,
    default_pre_step,
    enroot_image,
    gpu_tokens,
    image_key,
    make_pre_step,
    parse_properties,
    partition_arch,
    read_properties,
    resolve_gpu,
    resolve_image,
)
from slurm_fsm.errors import CommandFailed, JobNotFound
from slurm_fsm.executor import Events, Executor, PreStep
from slurm_fsm.report import Report
from slurm_fsm.results import Status
from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import FakeCluster, FakeScript

from conftest import SpecFactory

pytestmark = pytest.mark.usefixtures("golden_reports")

X86_IMAGE = "urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:pytorch-x86_64-1"
ARM_IMAGE = "urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:pytorch-aarch64-1"
#: The shape of TensorRT-LLM's jenkins/current_image_tags.properties.
TAGS = f"""\
# NOTE: Although the Java Properties file format is more flexible, cf.
#   keep the format compatible with env files.
IMAGE_NAME=urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm

LLM_DOCKER_IMAGE_12_9=urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:old-x86_64
LLM_SBSA_DOCKER_IMAGE_12_9=urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:old-aarch64
LLM_DOCKER_IMAGE={X86_IMAGE}
LLM_SBSA_DOCKER_IMAGE={ARM_IMAGE}
LLM_ROCKYLINUX8_PY310_DOCKER_IMAGE=urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:x86_64-rocky8
"""
PROGRESS = ("-- Configuring done", "[  5%] Building CXX object cpp/a.o",
            "[ 50%] Building CUDA object cpp/b.o", "[100%] Built target th_common",
            "wheel written")


class Recorder(Events):
    def __init__(self) -> None:
        self.messages: list[str] = []
        self.states: list[str] = []

    def state(self, machine_state: str, detail: str = "") -> None:
        self.states.append(machine_state)

    def message(self, text: str) -> None:
        self.messages.append(text)


@pytest.fixture
def fake() -> FakeCluster:
    return FakeCluster()


def write_tags(spec: JobSpec, text: str = TAGS) -> Path:
    path = spec.repo_root / "jenkins" / "current_image_tags.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def build_spec(make_spec: SpecFactory, **over: object) -> JobSpec:
    """A persistent spec with build_project on, a repo root with the tags file."""
    over.setdefault("container_name", "llama")
    spec = make_spec(build_project=True, **over)
    spec.repo_root.mkdir(parents=True, exist_ok=True)
    write_tags(spec)
    return spec


def run(spec: JobSpec, fake: FakeCluster, events: Events | None = None,
        pre_step: PreStep = default_pre_step) -> tuple[Report, Executor]:
    ex = Executor(spec, fake, clock=fake.clock, events=events, pre_step=pre_step)
    return ex.run(), ex


# ------------------------------------------------------------------------- arch table
@pytest.mark.parametrize(("name", "arch"), [
    ("NVIDIA H100 80GB HBM3", "90-real"),
    ("NVIDIA H100 PCIe", "90-real"),
    ("NVIDIA H100 NVL", "90-real"),
    ("NVIDIA H200", "90-real"),
    ("NVIDIA H200 NVL", "90-real"),
    # every Hopper part is sm_90, the export parts and variants too (issue 23, fix 6)
    ("NVIDIA H800", "90-real"),
    ("NVIDIA H800 PCIe", "90-real"),
    ("NVIDIA H20", "90-real"),
    ("NVIDIA H20-3e", "90-real"),
    ("NVIDIA GH200 144G HBM3e", "90-real"),
    ("H800", "90-real"),
    ("h20", "90-real"),
    # Thor: compute capability 11.0 (CUDA 13.0 renamed sm_101 to sm_110)
    ("NVIDIA Thor", "110-real"),
    ("NVIDIA Jetson AGX Thor", "110-real"),
    ("NVIDIA GB200", "100-real"),
    ("NVIDIA B200", "100-real"),
    ("NVIDIA B300 SXM6 AC", "100-real"),
    ("NVIDIA GB300", "100-real"),
    ("NVIDIA A100-SXM4-80GB", "80-real"),
    ("NVIDIA A100 80GB PCIe", "80-real"),
    ("NVIDIA L40S", "89-real"),
    ("H100", "90-real"),
    ("h200", "90-real"),
    ("GB200", "100-real"),
    ("A100", "80-real"),
    ("L40S", "89-real"),
    # not in the table: the default
    ("Tesla V100-SXM2-32GB", "100-real"),
    ("NVIDIA L40", "100-real"),
    ("NVIDIA XH100", "100-real"),  # H100 inside another word is no H100
    ("H1000", "100-real"),
    ("NVIDIA H2000", "100-real"),  # H20 inside another word is no H20
    ("NVIDIA THORN", "100-real"),
    ("", "100-real"),
])
def test_build_arch(name: str, arch: str) -> None:
    assert build_arch(name) == arch


def test_gpu_tokens_are_whole_words() -> None:
    assert gpu_tokens("NVIDIA A100-SXM4-80GB") == ["NVIDIA", "A100", "SXM4", "80GB"]
    assert "B200" not in gpu_tokens("NVIDIA GB200")


# ---------------------------------------------------------------------- partition arch
def test_partition_arch_from_slurm_env(make_spec: SpecFactory) -> None:
    spec = make_spec(slurm_env={"partitions": [{"name": "other", "arch": "x86_64"},
                                               {"name": "batch", "arch": "aarch64"}]})
    assert partition_arch(spec, "NVIDIA H100 80GB HBM3") == "aarch64"  # the entry wins
    spec2 = make_spec(slurm_env={"partitions": [{"name": "batch", "arch": "x86_64"}]})
    assert partition_arch(spec2, "NVIDIA GB200") == "x86_64"


@pytest.mark.parametrize(("gpu", "arch"), [
    ("NVIDIA GB200", "aarch64"), ("GB300", "aarch64"), ("NVIDIA GH200 480GB", "aarch64"),
    ("NVIDIA H100 80GB HBM3", "x86_64"), ("NVIDIA B200", "x86_64"),
    ("NVIDIA A100-SXM4-80GB", "x86_64"), ("NVIDIA H200", "x86_64"),
    # Thor is an Arm SoC (issue 23, fix 6); Hopper export parts are x86_64 cards
    ("NVIDIA Thor", "aarch64"), ("NVIDIA Jetson AGX Thor", "aarch64"),
    ("NVIDIA H800", "x86_64"), ("NVIDIA H20", "x86_64"), ("NVIDIA H100 NVL", "x86_64"),
])
def test_partition_arch_inferred(make_spec: SpecFactory, gpu: str, arch: str) -> None:
    # no entry for this partition, or an entry without arch: inferred from the GPU
    no_env = make_spec()
    null_arch = make_spec(slurm_env={"partitions": [{"name": "batch", "arch": None},
                                                    {"name": "x", "arch": "aarch64"}]})
    assert partition_arch(no_env, gpu) == arch
    assert partition_arch(null_arch, gpu) == arch


# ------------------------------------------------------------------------- properties
def test_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "   ! another comment = not a key\n"
        "\n"
        "plain=value\n"
        "colon: with colon  \n"
        "spaced   value by blank\n"
        "  indented = x = y\n"
        "multi = first, \\\n"
        "        second, \\\n"
        "        # not a comment inside a continuation\n"
        "after=1\n"
        "esc\\=key\\:x = a\\tb\\u0041\\\\\n"
        "empty=\n"
        "dup=1\n"
        "dup=2\n"
        "tail=ends here \\\n"
    )
    assert parse_properties(text) == {
        "plain": "value",
        "colon": "with colon",
        "spaced": "value by blank",
        "indented": "x = y",
        "multi": "first, second, # not a comment inside a continuation",
        "after": "1",
        "esc=key:x": "a\tbA\\",
        "empty": "",
        "dup": "2",
        "tail": "ends here",
    }


def test_properties_crlf_and_even_backslashes() -> None:
    # an even number of trailing backslashes is an escaped backslash, not a continuation
    assert parse_properties("a=b\\\\\r\nc=d\r\n") == {"a": "b\\", "c": "d"}


def test_read_properties_errors(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"nope\.properties: no such file"):
        read_properties(tmp_path / "nope.properties")
    bad = tmp_path / "bad.properties"
    bad.write_text("k=\\u00zz\n")
    with pytest.raises(BuildError, match=r"bad\.properties: Invalid \\u escape sequence: \\u00zz"):
        read_properties(bad)


# ------------------------------------------------------------------------------ image
def test_image_from_spec_needs_no_file(make_spec: SpecFactory) -> None:
    spec = make_spec(docker_image="nvcr.io/nvidia/pytorch:24.05-py3", container_name="c")
    assert not spec.repo_root.exists()
    assert resolve_image(spec, "aarch64") == "nvcr.io/nvidia/pytorch:24.05-py3"


def test_image_from_the_tags_file_per_arch(make_spec: SpecFactory) -> None:
    spec = make_spec()
    write_tags(spec)
    assert resolve_image(spec, "x86_64") == X86_IMAGE
    assert resolve_image(spec, "aarch64") == ARM_IMAGE


def test_image_key_suffix_fallback_and_ambiguity() -> None:
    props = {"IMAGE_x86_64": "a", "image_aarch64": "b", "OTHER": "c"}
    assert image_key(props, "x86_64") == "IMAGE_x86_64"
    assert image_key(props, "aarch64") == "image_aarch64"
    with pytest.raises(BuildError, match=r"several keys end in _X86_64 \(A_X86_64, B_X86_64\)"):
        image_key({"A_X86_64": "a", "B_X86_64": "b"}, "x86_64")
    with pytest.raises(BuildError, match="unknown CPU arch 'ppc64le'"):
        image_key(props, "ppc64le")


def test_image_missing_file_names_it(make_spec: SpecFactory) -> None:
    spec = make_spec()
    with pytest.raises(BuildError) as exc:
        resolve_image(spec, "x86_64")
    assert str(spec.repo_root / "jenkins" / "current_image_tags.properties") in str(exc.value)
    assert "no such file" in str(exc.value)


def test_image_missing_key_lists_the_keys(make_spec: SpecFactory) -> None:
    spec = make_spec()
    path = write_tags(spec, "# only x86\nLLM_DOCKER_IMAGE=a/b:c\nIMAGE_NAME=a/b\n")
    with pytest.raises(BuildError) as exc:
        resolve_image(spec, "aarch64")
    text = str(exc.value)
    assert str(path) in text
    assert "LLM_SBSA_DOCKER_IMAGE" in text
    assert "the file has IMAGE_NAME, LLM_DOCKER_IMAGE" in text
    write_tags(spec, "# nothing\n")
    with pytest.raises(BuildError, match="the file has no keys at all"):
        resolve_image(spec, "x86_64")


def test_image_empty_or_interpolated_value(make_spec: SpecFactory) -> None:
    spec = make_spec()
    write_tags(spec, "LLM_DOCKER_IMAGE=\n")
    with pytest.raises(BuildError, match="LLM_DOCKER_IMAGE is empty"):
        resolve_image(spec, "x86_64")
    write_tags(spec, "LLM_DOCKER_IMAGE=${IMAGE_NAME}:tag\n")
    with pytest.raises(BuildError, match="does not expand"):
        resolve_image(spec, "x86_64")


@pytest.mark.parametrize(("image", "pyxis"), [
    ("urm.nvidia.com/sw-tensorrt-docker/tensorrt-llm:tag",
     "urm.nvidia.com#sw-tensorrt-docker/tensorrt-llm:tag"),
    ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io#nvidia/pytorch:24.05-py3"),
    ("localhost:5000/img:1", "localhost:5000#img:1"),
    ("localhost/img", "localhost#img"),
    ("user@registry.io/a/b:1", "user@registry.io#a/b:1"),
    ("nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io#nvidia/pytorch:24.05-py3"),
    ("ubuntu:22.04", "ubuntu:22.04"),
    ("nvidia/cuda:12.4.0-devel", "nvidia/cuda:12.4.0-devel"),
    ("/images/trtllm.sqsh", "/images/trtllm.sqsh"),
])
def test_enroot_image(image: str, pyxis: str) -> None:
    assert enroot_image(image) == pyxis


# -------------------------------------------------------------------------------- GPU
def test_gpu_from_device_type_probes_nothing(make_spec: SpecFactory, fake: FakeCluster) -> None:
    assert resolve_gpu(make_spec(device_type=" GB200 "), fake) == "GB200"
    assert "probe_gpu_name" not in fake.ops()


def test_gpu_probed_when_device_type_absent(make_spec: SpecFactory, fake: FakeCluster) -> None:
    fake.nodes["node01"].gpu_name = "NVIDIA B200"
    assert resolve_gpu(make_spec(), fake) == "NVIDIA B200"
    probes = [c.args for c in fake.calls if c.op == "probe_gpu_name"]
    assert probes == [{"partition": "batch", "account": "acct"}]


def test_gpu_probe_without_answer_is_a_clear_error(make_spec: SpecFactory,
                                                    fake: FakeCluster) -> None:
    fake.nodes["node01"].gpu_name = ""
    with pytest.raises(BuildError, match=r"found no GPU name.*Set device_type"):
        resolve_gpu(make_spec(), fake)
    with pytest.raises(BuildError, match="cannot probe the GPU type on partition nope"):
        resolve_gpu(make_spec(slurm_params={"partition": "nope"}), fake)


# -------------------------------------------------------------------- the batch script
def request(tmp_path: Path, **over: object) -> BuildRequest:
    data: dict[str, object] = dict(
        repo_root=tmp_path / "repo", partition="batch", account="acct", image=X86_IMAGE,
        user_root_dir="/home/u", arch="90-real", work_dir=tmp_path / "work")
    data.update(over)
    return BuildRequest(**data)  # type: ignore[arg-type]


def test_the_build_job_asks_for_the_cpus_it_compiles_with(tmp_path: Path) -> None:
    """One task without a CPU count gets one CPU: a compile then runs on one core.
    Default: the whole node (--exclusive); ``cpus_per_task``: that many. The srun step
    takes every CPU of the job on the node (22.05's srun does not inherit them)."""
    text = SlurmBuilder().script_text(request(tmp_path), tmp_path / "b_%j.log")
    lines = text.splitlines()
    assert "#SBATCH --ntasks=1" in lines and "#SBATCH --exclusive" in lines
    assert not any(line.startswith("#SBATCH --cpus-per-task") for line in lines)
    srun = next(line for line in lines if line.startswith("srun "))
    assert srun.startswith('srun --nodes=1 --ntasks=1 --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" ')
    sized = SlurmBuilder(cpus_per_task=16).script_text(request(tmp_path), tmp_path / "b.log")
    assert "#SBATCH --cpus-per-task=16" in sized.splitlines()
    assert "#SBATCH --exclusive" not in sized.splitlines()
    host = SlurmBuilder(container=False).script_text(request(tmp_path), tmp_path / "b.log")
    assert "#SBATCH --exclusive" in host.splitlines()  # the batch step has the node's CPUs
    # what bash makes of the srun line: the variable expanded, one word
    out = subprocess.run(["bash", "-c", "SLURM_CPUS_ON_NODE=56; srun() { printf '%s\\n' "
                          "\"$@\"; }; " + srun], capture_output=True, text=True, timeout=30,
                         check=True).stdout.splitlines()
    assert out[:3] == ["--nodes=1", "--ntasks=1", "--cpus-per-task=56"]
    with pytest.raises(ValueError):
        SlurmBuilder(cpus_per_task=0)


def test_script_in_a_container(tmp_path: Path) -> None:
    text = SlurmBuilder(sbatch_args=("--time=02:00:00",)).script_text(
        request(tmp_path), tmp_path / "b_%j.log")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --partition=batch" in lines
    assert "#SBATCH --account=acct" in lines
    assert f"#SBATCH --output={tmp_path}/b_%j.log" in lines
    assert "#SBATCH --time=02:00:00" in lines
    repo = tmp_path / "repo"
    srun = next(line for line in lines if line.startswith("srun "))
    assert ("--container-image=urm.nvidia.com#sw-tensorrt-docker/tensorrt-llm:"
            "pytorch-x86_64-1") in srun
    assert f"--container-mounts={repo}:{repo},/home/u:/home/u" in srun
    assert srun.endswith(f"bash -c 'cd {repo} && python3 scripts/build_wheel.py -a 90-real'")
    assert "export SLURM_FSM_USER_ROOT_DIR=/home/u" in lines
    assert lines[-2:] == [f'echo "{EXIT_MARKER} $status"', 'exit "$status"']


def test_user_root_containing_the_repo_is_mounted_once(tmp_path: Path) -> None:
    text = SlurmBuilder().script_text(request(tmp_path, user_root_dir=str(tmp_path)),
                                      tmp_path / "b.log")
    repo = tmp_path / "repo"
    assert f" --container-mounts={repo}:{repo} bash -c " in text


def test_script_rejects_what_sbatch_lines_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"log path .* whitespace"):
        SlurmBuilder().script_text(request(tmp_path), tmp_path / "my logs" / "b.log")
    with pytest.raises(BuildError, match=r"image .* control characters"):
        SlurmBuilder().script_text(request(tmp_path, image="a\nb"), tmp_path / "b.log")
    with pytest.raises(BuildError, match="command is empty"):
        SlurmBuilder(command=lambda r: []).script_text(request(tmp_path), tmp_path / "b.log")


def test_build_command_rule(tmp_path: Path) -> None:
    req = request(tmp_path)
    req.repo_root.mkdir()
    assert default_build_command(req) == ["python3", "scripts/build_wheel.py", "-a", "90-real"]
    script = req.repo_root / "build.sh"
    script.write_text("#!/bin/bash\n")
    assert default_build_command(req)[0] == "python3"  # not executable: not used
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert default_build_command(req) == ["./build.sh", "-a", "90-real"]


def test_script_without_container_runs_and_quotes(tmp_path: Path) -> None:
    """The generated script, run by bash: quoting survives a repo path with blanks and quotes."""
    repo = tmp_path / "it's a repo"
    repo.mkdir()
    build = repo / "build.sh"
    build.write_text('#!/bin/bash\necho "pwd=$PWD"\necho "args=$*"\n'
                     'echo "arch=$SLURM_FSM_BUILD_ARCH cpu=$SLURM_FSM_CPU_ARCH"\nexit 7\n')
    build.chmod(0o755)
    text = SlurmBuilder(container=False).script_text(
        request(tmp_path, repo_root=repo, cpu_arch="aarch64"), tmp_path / "b.log")
    assert "srun" not in text and "--container" not in text
    script = tmp_path / "b.sbatch"
    script.write_text(text)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 7
    assert proc.stdout.splitlines() == [f"pwd={repo}", "args=-a 90-real",
                                        "arch=90-real cpu=aarch64", f"{EXIT_MARKER} 7"]


def test_progress_lines_across_chunks() -> None:
    seen: list[str] = []
    p = _ProgressLines(seen.append)
    for chunk in ("[  1%] Build", "ing a.o\nnoise\n[ 2", "%] Building b.o\r\n[3/10] Linking",
                  " x\n[100%] Built target t"):
        p.feed(chunk)
    assert seen == ["[  1%] Building a.o", "[ 2%] Building b.o", "[3/10] Linking x"]
    p.flush()
    assert seen[-1] == "[100%] Built target t"


# ------------------------------------------------------------ the pre-step, end to end
def test_build_success_then_the_run_goes_on(make_spec: SpecFactory, fake: FakeCluster) -> None:
    spec = build_spec(make_spec, success_patterns="passed")
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=PROGRESS))
    fake.script(spec.script_path, FakeScript(lines=("=== 2 passed in 1.00s ===",)))
    events = Recorder()
    report, ex = run(spec, fake, events)
    assert report.status is Status.PASSED, report.summary
    assert report.exit_code_for_cli == 0
    # the build ran first, as a batch job on the partition; then step 0 allocated
    ops = fake.ops()
    assert "probe_gpu_name" in ops  # no device_type: probed
    assert ops.index("submit") < ops.index("job_outcome") < ops.index("allocate")
    sub = next(c.args["request"] for c in fake.calls if c.op == "submit")
    assert sub.partition == "batch" and sub.account == "acct"
    assert sub.job_name == "acct-trtllm.build"
    assert sub.script_path == spec.work_dir / "build" / BUILD_SCRIPT_NAME
    assert f"--container-image={enroot_image(X86_IMAGE)}" in sub.script_path.read_text()
    # the image got into the spec and into the allocation's container
    assert ex.spec.docker_image == X86_IMAGE
    assert fake.nodes["node01"].containers["llama"].image == X86_IMAGE
    state = json.loads(spec.state_path.read_text())
    assert state["docker_image"] == X86_IMAGE
    # progress lines were shown as they came, the rest of the log was not
    progress = [m for m in events.messages if "%]" in m]
    assert progress == ["[  5%] Building CXX object cpp/a.o",
                        "[ 50%] Building CUDA object cpp/b.o", "[100%] Built target th_common"]
    done = next(i for i, m in enumerate(events.messages) if m.startswith("Build done"))
    assert events.messages.index(progress[-1]) < done
    assert not any("Configuring done" in m or "wheel written" in m for m in events.messages)
    assert any("build arch 90-real" in m and "x86_64" in m for m in events.messages)
    assert events.states[0] == "PreStep"
    build_log = spec.work_dir / "build" / BUILD_LOG_PATTERN.replace("%j", "100")
    assert build_log.read_text().splitlines() == list(PROGRESS)


def test_build_failure_is_build_failed_and_allocates_nothing(make_spec: SpecFactory,
                                                              fake: FakeCluster) -> None:
    spec = build_spec(make_spec, device_type="GB200",
                      slurm_env={"partitions": [{"name": "batch", "arch": None}]})
    lines = (
        *(f"[{i:3d}%] Building CXX object o{i}.o" for i in range(120)),
        "/repo/cpp/a.cu(12): error: identifier \"x\" is undefined",
        "ninja: build stopped: subcommand failed.",
        "subprocess.CalledProcessError: Command 'cmake --build .' returned non-zero exit "
        "status 1.")
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=lines, exit_code=1, line_interval_s=0.5))
    report, ex = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert report.exit_code_for_cli == 3
    assert "allocate" not in fake.ops()
    assert "start_script" not in fake.ops()
    assert "probe_gpu_name" not in fake.ops()  # device_type given
    assert not spec.state_path.exists()
    assert report.job_id == "100"
    assert report.log_files["stdout"] == str(spec.work_dir / "build" / "build_100.log")
    assert len(report.log_tail) == 100
    assert '/repo/cpp/a.cu(12): error: identifier "x" is undefined' in report.errors
    assert [d["symptom"] for d in report.diagnosis][:1] == ["BUILD_FAILED"]
    assert report.log_tail[-1] == lines[-1]
    assert report.log_tail[0] == lines[-100]
    assert "FAILED, exit code 1" in report.summary
    assert any("CalledProcessError" in e for e in report.errors)
    assert report.notes == ["nothing allocated, nothing run"]
    # GB200 on a partition without arch: aarch64 image, 100-real
    script = (spec.work_dir / "build" / BUILD_SCRIPT_NAME).read_text()
    assert enroot_image(ARM_IMAGE) in script and "-a 100-real" in script
    assert ex.spec.docker_image is None  # the spec was not changed


@pytest.mark.parametrize("final_state", ["OUT_OF_MEMORY", "CANCELLED"])
def test_build_killed_is_a_failure_even_with_exit_0(make_spec: SpecFactory, fake: FakeCluster,
                                                    final_state: str) -> None:
    spec = build_spec(make_spec, device_type="H100")
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=("[ 1%] x",), final_state=final_state))
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert final_state in report.summary
    assert "allocate" not in fake.ops()


def test_missing_tags_file_fails_before_any_build(make_spec: SpecFactory,
                                                  fake: FakeCluster) -> None:
    spec = make_spec(build_project=True, device_type="H100", container_name="llama")
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert "current_image_tags.properties: no such file" in report.summary
    assert report.job_id is None and report.log_tail == []
    assert fake.ops() == []  # not even a probe: device_type is set


def test_missing_container_name_fails_before_building(make_spec: SpecFactory,
                                                      fake: FakeCluster) -> None:
    spec = build_spec(make_spec, device_type="H100", container_name=None)
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert report.summary.startswith("container_name: required")
    assert X86_IMAGE in report.summary
    assert "submit" not in fake.ops()


def test_sbatch_refusing_the_build_is_build_failed(make_spec: SpecFactory,
                                                   fake: FakeCluster) -> None:
    spec = build_spec(make_spec, device_type="H100")
    fake.fail_next("submit", CommandFailed(["sbatch"], 1, "sbatch: error: Batch job "
                                           "submission failed: Invalid qos specification"))
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert "the build could not run" in report.summary
    assert "Invalid qos specification" in report.summary
    assert "allocate" not in fake.ops()


def test_build_hang_and_timeout_cancel_the_build(make_spec: SpecFactory,
                                                 fake: FakeCluster) -> None:
    # the build's own limit (issue 17 item 13), not the test's monitor_timeout_seconds
    spec = build_spec(make_spec, device_type="H100", build_timeout_seconds=120,
                      monitor_timeout_seconds=60)
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=("[ 1%] a", "NCCL: hang detected"),
                                              hang=True))
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert "hang detected" in report.summary
    assert fake.jobs["100"].state == "CANCELLED"
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=("[ 1%] slow",), hang=True))
    report2, _ = run(spec, fake)
    assert report2.status is Status.BUILD_FAILED
    assert "not done after 120 s (build_timeout_seconds)" in report2.summary
    assert fake.jobs[report2.job_id or ""].state == "CANCELLED"
    assert "allocate" not in fake.ops()


def test_without_accounting_the_exit_line_decides(make_spec: SpecFactory,
                                                  fake: FakeCluster) -> None:
    spec = build_spec(make_spec, device_type="H100")
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=("[100%] done", f"{EXIT_MARKER} 0")))
    fake.fail_next("job_outcome", JobNotFound("100", "gone"), times=6)
    ok = default_pre_step(spec, fake, Events())
    assert ok.ok, ok.summary
    assert "exit code 0 (from the log" in ok.summary
    fake.script(BUILD_SCRIPT_NAME, FakeScript(lines=("[100%] done",)))
    fake.fail_next("job_outcome", JobNotFound("101", "gone"), times=6)
    unknown = default_pre_step(spec, fake, Events())
    assert not unknown.ok
    assert "unknown" in unknown.summary and "no exit line" in unknown.summary


def test_builder_without_container_keeps_the_run_without_image(make_spec: SpecFactory,
                                                                fake: FakeCluster) -> None:
    spec = build_spec(make_spec, device_type="H100", container_name=None)
    report, ex = run(spec, fake, pre_step=make_pre_step(SlurmBuilder(container=False)))
    assert report.status is Status.PASSED, report.summary
    assert ex.spec.docker_image is None
    assert not any(c.args["request"].container for c in fake.calls if c.op == "run_step")
    script = (spec.work_dir / "build" / BUILD_SCRIPT_NAME).read_text()
    assert "--container-image" not in script


def test_a_plugged_builder(make_spec: SpecFactory, fake: FakeCluster) -> None:
    seen: list[BuildRequest] = []

    class Local:
        uses_container = True

        def build(self, request: BuildRequest, backend: SlurmBackend,
                  events: Events) -> BuildOutcome:
            seen.append(request)
            return BuildOutcome(ok=False, job_id=None, log_path=None,
                                log_tail=("make: *** [all] Error 2",), summary="make failed")

    spec = build_spec(make_spec, device_type="NVIDIA L40S", user_root_dir="/home/u",
                      build_timeout_seconds=900, monitor_timeout_seconds=60)
    report, _ = run(spec, fake, pre_step=make_pre_step(Local()))
    assert report.status is Status.BUILD_FAILED
    assert report.summary == "make failed"
    assert report.log_tail == ["make: *** [all] Error 2"]
    assert seen == [BuildRequest(
        repo_root=spec.repo_root, partition="batch", account="acct", image=X86_IMAGE,
        user_root_dir="/home/u", arch="89-real", work_dir=spec.work_dir, cpu_arch="x86_64",
        gpu_name="NVIDIA L40S", job_name="acct-trtllm.build", timeout_s=900.0)]
    assert fake.ops() == []


def test_build_job_name(make_spec: SpecFactory) -> None:
    assert build_job_name(make_spec()) == "acct-trtllm.build"
    assert build_job_name(make_spec(alloc_job_name="x-1.persistent")) == "x-1.build"
    assert build_job_name(make_spec(alloc_job_name="mine")) == "mine.build"


def test_no_pyxis_fails_before_submitting(make_spec: SpecFactory) -> None:
    fake = FakeCluster(pyxis=False)
    spec = build_spec(make_spec, device_type="H100")
    report, _ = run(spec, fake)
    assert report.status is Status.BUILD_FAILED
    assert "no pyxis" in report.summary and "container=False" in report.summary
    assert "submit" not in fake.ops() and "allocate" not in fake.ops()


def test_no_pre_step_when_build_project_is_false(make_spec: SpecFactory,
                                                 fake: FakeCluster) -> None:
    spec = make_spec()
    report, _ = run(spec, fake)
    assert report.status is Status.PASSED
    assert "submit" not in fake.ops()
    assert not (spec.work_dir / "build").exists()


def test_build_env_reaches_the_command(tmp_path: Path) -> None:
    """SLURM_FSM_USER_ROOT_DIR is only exported when set."""
    text = SlurmBuilder().script_text(request(tmp_path, user_root_dir=None), tmp_path / "b.log")
    assert "SLURM_FSM_USER_ROOT_DIR" not in text
    assert f"--container-mounts={tmp_path}/repo:{tmp_path}/repo bash -c " in text
