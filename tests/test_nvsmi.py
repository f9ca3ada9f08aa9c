"""slurm_fsm.nvsmi: nvidia-smi's rows, its failures (issue 17 item 10) and the compute
capability of a GPU not in the arch table (item 11). The failure sentences and names are
the real ones of tests/data/real/nvidia_smi_fixtures.txt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_fsm.build import build_arch
from slurm_fsm.nvsmi import (
    NvidiaSmiFailed,
    gpu_processes_script,
    parse_gpu_probe,
    parse_gpu_processes,
    probe_script,
)

DRIVER_FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                 "driver. Make sure that the latest NVIDIA driver is installed and running.")


def _stand_in(tmp_path: Path, body: str) -> dict[str, str]:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURMD_NODENAME": "n1"}


def _run(script: str, env: dict[str, str]) -> str:
    return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True,
                          env=env, check=True, timeout=30).stdout


@pytest.mark.parametrize(("text", "code"), [(DRIVER_FAILED, 9), ("No devices were found", 6)])
def test_a_failing_probe_is_an_error_naming_node_and_text(
        tmp_path: Path, text: str, code: int) -> None:
    out = _run(probe_script(), _stand_in(tmp_path, f'echo "{text}"\nexit {code}\n'))
    with pytest.raises(NvidiaSmiFailed) as info:
        parse_gpu_probe(out)
    assert str(info.value) == f"nvidia-smi failed on n1 (exit {code}): {text}"


def test_the_probe_reads_the_compute_capability(tmp_path: Path) -> None:
    out = _run(probe_script(), _stand_in(tmp_path, 'echo "NVIDIA GH200 480GB, 9.0"\n'))
    name = parse_gpu_probe(out)
    assert name == "NVIDIA GH200 480GB (sm_90)"
    assert build_arch(name) == "90-real"


def test_an_old_driver_without_compute_cap_still_gives_the_name(tmp_path: Path) -> None:
    body = ('case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field '
            'to query.\'; exit 2;; esac\necho "NVIDIA H100 80GB HBM3"\n')
    assert parse_gpu_probe(_run(probe_script(), _stand_in(tmp_path, body))) == \
        "NVIDIA H100 80GB HBM3"


def test_no_nvidia_smi_is_no_name(tmp_path: Path) -> None:
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURMD_NODENAME": "n1"}
    assert parse_gpu_probe(_run(probe_script(), env)) is None


@pytest.mark.parametrize(("name", "arch"), [
    ("NVIDIA L40 (sm_89)", "89-real"),  # not in the table: its capability
    ("NVIDIA L40", "100-real"),  # no capability known: the default
    ("NVIDIA H800 PCIe", "90-real"),  # Hopper is in the table now (issue 23, fix 6)
    ("NVIDIA GH200 480GB", "90-real"),  # in the table now
    ("NVIDIA H100 80GB HBM3 (sm_90)", "90-real"), ("NVIDIA B200 (sm_100)", "100-real"),
    ("NVIDIA GeForce RTX 3050 (sm_86)", "86-real"),
])
def test_build_arch_by_compute_capability(name: str, arch: str) -> None:
    assert build_arch(name) == arch


def test_preflight_listing_reports_failing_nodes(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "good").mkdir()
    failing = _run(gpu_processes_script(),
                   _stand_in(tmp_path / "bad", f'echo "{DRIVER_FAILED}"\nexit 9\n'))
    rows = ('echo "4242, /usr/bin/ollama, 5012 MiB"\n'
            'echo "2028, [Insufficient Permissions], [N/A]"\n')
    good = _run(gpu_processes_script(),
                {**_stand_in(tmp_path / "good", rows), "SLURMD_NODENAME": "n2"})
    text = "".join(f"0: {line}\n" for line in failing.splitlines()) + \
        "".join(f"1: {line}\n" for line in good.splitlines())
    procs, failures = parse_gpu_processes(text)
    # another user's process (name hidden) still holds the GPU: it is listed
    assert [(p.node, p.pid, p.name) for p in procs] == [
        ("n2", 4242, "/usr/bin/ollama"), ("n2", 2028, "[Insufficient Permissions]")]
    assert [f.describe() for f in failures] == [
        f"nvidia-smi failed on n1 (exit 9): {DRIVER_FAILED}"]
