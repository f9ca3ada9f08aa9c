"""The local cluster's emulated GPUs: Slurm schedules them for real, nvidia-smi stands in."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator

import pytest

from slurm_fsm.placement import STARTED_MARKER, WAITING_MARKER
from slurm_fsm_dev import localcluster, localgpu
from slurm_fsm_dev.localcluster import GPUS_PER_NODE, ClusterInfo

from .helpers import SRUN_SAYS_WAITING, JobNames, slurm_version

pytestmark = pytest.mark.slurm


def _env(info: ClusterInfo, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, **info.env, **extra}


@pytest.fixture
def gpu_alloc(local_cluster: ClusterInfo, names: JobNames) -> Iterator[str]:
    """A 1-node allocation holding all 4 GPUs and 4 CPUs of its node."""
    name = names.new("gpu")
    subprocess.run(
        ["salloc", f"--account={local_cluster.account}", f"--partition={local_cluster.partition}",
         "-N", "1", "--ntasks-per-node=4", f"--gpus-per-node={GPUS_PER_NODE}", "--time=5",
         f"--job-name={name}", "--no-shell"],
        env=_env(local_cluster), capture_output=True, text=True, timeout=60, check=True)
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env=_env(local_cluster),
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert len(out) == 1, out
    try:
        yield out[0]
    finally:
        localgpu.reset(local_cluster.base_dir)


@pytest.mark.config()
def test_gres_is_configured(local_cluster: ClusterInfo) -> None:
    out = subprocess.run(["scontrol", "show", "node", local_cluster.nodes[0]],
                         env=_env(local_cluster), capture_output=True, text=True, timeout=30,
                         check=True).stdout
    typed = localcluster.GPU_TYPE if local_cluster.has("typed") else None
    assert localgpu.gres_node_field(GPUS_PER_NODE, typed) in out.split()


def test_every_gpu_has_a_device_number_of_its_own(local_cluster: ClusterInfo) -> None:
    """The devices cgroup works by major:minor: one number per GPU and node, and never
    /dev/null's (1:3)."""
    numbers = []
    for node in local_cluster.nodes:
        for i in range(GPUS_PER_NODE):
            st = os.stat(local_cluster.base_dir / "dev" / node / f"nvidia{i}")
            assert stat.S_ISCHR(st.st_mode)
            numbers.append((os.major(st.st_rdev), os.minor(st.st_rdev)))
    assert len(set(numbers)) == len(numbers) == GPUS_PER_NODE * len(local_cluster.nodes)
    assert (1, 3) not in numbers


@pytest.mark.config(cgroup=True)
def test_a_confined_step_opens_only_its_gpus_and_nvidia_smi_lists_only_them(
        local_cluster: ClusterInfo, gpu_alloc: str) -> None:
    def step(*gres: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["srun", f"--jobid={gpu_alloc}", "-N", "1", "-n", "1", "--overlap", *gres,
             "bash", "-c", 'n=$(hostname); for i in 0 1 2 3; do '
             f'(exec 3<"{local_cluster.base_dir}/dev/$n/nvidia$i") 2>&1 | '
             'grep -q "not permitted" || echo "open $i"; done; nvidia-smi -L'],
            env=_env(local_cluster), capture_output=True, text=True, timeout=60, check=False)

    two = step("--gpus-per-node=2")
    assert two.returncode == 0, two.stderr
    opened = [line for line in two.stdout.splitlines() if line.startswith("open ")]
    listed = [line.split(":")[0] for line in two.stdout.splitlines() if line.startswith("GPU ")]
    assert len(opened) == 2, two.stdout
    assert [f"GPU {o.split()[1]}" for o in opened] == listed  # exactly the openable ones
    none = step("--gres=none")
    assert none.returncode == 6, none.stdout
    assert "open" not in none.stdout and "No devices were found" in none.stdout


@pytest.mark.config(cgroup=False)  # CUDA_VISIBLE_DEVICES is the node's index (task/none)
def test_exact_steps_get_distinct_gpus_and_a_fifth_waits(
        local_cluster: ClusterInfo, gpu_alloc: str) -> None:
    """SLURM_EXACT=1 SLURM_GPUS_PER_NODE=1: 4 steps at once on GPUs 0-3, the 5th queued."""
    env = _env(local_cluster, SLURM_EXACT="1", SLURM_GPUS_PER_NODE="1")
    body = ('echo "cvd=$CUDA_VISIBLE_DEVICES"; '
            "nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader; sleep 3")
    procs = [subprocess.Popen(["srun", f"--jobid={gpu_alloc}", "-N", "1", "-n", "1",
                               "bash", "-c", body],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append((out, err))
    cvds = sorted(next(line for line in out.splitlines() if line.startswith("cvd="))
                  for out, _ in outs)
    # five steps, four GPUs: the one that waited reuses a freed GPU
    assert set(cvds) == {f"cvd={i}" for i in range(GPUS_PER_NODE)}
    # the step that waited: srun prints "Step created for" only after a wait (22.05 and
    # 24.11); 22.05 also said "temporarily disabled" while it waited, 24.11 does not
    waited = [err for _, err in outs if STARTED_MARKER in err]
    assert len(waited) == 1, [e for _, e in outs]
    says = SRUN_SAYS_WAITING[slurm_version()]
    assert (WAITING_MARKER in waited[0]) is says, (slurm_version(), waited[0])
    for out, _ in outs:
        cvd = next(line for line in out.splitlines() if line.startswith("cvd="))[4:]
        assert f"{cvd}, NVIDIA H100 80GB HBM3, 9.0" in out.splitlines()


def test_nvidia_smi_lists_the_processes_a_test_put_on_its_gpus(
        local_cluster: ClusterInfo, gpu_alloc: str) -> None:
    base, node = local_cluster.base_dir, local_cluster.nodes[0]
    alloc_node = subprocess.run(["squeue", "-h", "-j", gpu_alloc, "-o", "%N"],
                                env=_env(local_cluster), capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
    node = alloc_node or node
    localgpu.put_process(base, node, 2, 4242, "/usr/bin/ollama", "5012 MiB")
    query = "nvidia-smi --query-compute-apps=pid,name,used_memory --format=csv,noheader"

    def on(gpus: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["srun", f"--jobid={gpu_alloc}", "-N", "1", "-n", "1", "--overlap",
             f"--gpus-per-node={gpus}", "bash", "-c", f'echo "$CUDA_VISIBLE_DEVICES"; {query}'],
            env=_env(local_cluster), capture_output=True, text=True, timeout=60, check=False)

    everything = on(str(GPUS_PER_NODE))
    assert everything.returncode == 0, everything.stderr
    assert "4242, /usr/bin/ollama, 5012 MiB" in everything.stdout.splitlines()
    localgpu.set_failure(base, node, "No devices were found", 6)
    failed = on("1")
    assert failed.returncode == 6
    assert "No devices were found" in failed.stdout


def test_a_step_without_gres_sees_no_gpu(local_cluster: ClusterInfo, gpu_alloc: str) -> None:
    r = subprocess.run(
        ["srun", f"--jobid={gpu_alloc}", "-N", "1", "-n", "1", "--overlap", "--gres=none",
         "bash", "-c", 'echo "cvd=${CUDA_VISIBLE_DEVICES-unset}"'],
        env=_env(local_cluster), capture_output=True, text=True, timeout=60, check=True)
    assert "cvd=unset" in r.stdout
