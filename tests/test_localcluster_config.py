"""The local cluster's configurations (``SLURM_FSM_LOCAL_CONFIG``), as written: no
cluster is started here (the real ones: tests/integration/test_localcluster.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from slurm_fsm_dev import localcluster, localgpu
from slurm_fsm_dev.localcluster import ClusterInfo, LocalClusterError


@pytest.mark.parametrize(("raw", "features"), [
    ("", ()),
    (" ", ()),
    ("cgroup", ("cgroup",)),
    ("noenforce, cgroup", ("cgroup", "noenforce")),  # canonical order
    ("typed,cgroup,noenforce,cgroup", ("cgroup", "noenforce", "typed")),
    ("memkill,noenforce,cgroup", ("cgroup", "noenforce", "memkill")),
])
def test_the_configuration_is_a_comma_list_of_features(
        raw: str, features: tuple[str, ...]) -> None:
    assert localcluster.config_features(raw) == features


def test_an_unknown_feature_names_the_variable_and_the_known_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(localcluster.ENV_CONFIG, "cgroup,cgroups")
    with pytest.raises(LocalClusterError) as err:
        localcluster.config_features()
    assert "SLURM_FSM_LOCAL_CONFIG='cgroup,cgroups'" in str(err.value)
    assert "cgroups" in str(err.value)
    assert "known: cgroup, noenforce, typed, memkill" in str(err.value)


def _conf(config: tuple[str, ...]) -> dict[str, str]:
    text = localcluster._slurm_conf(localcluster._Layout(Path("/tmp/x")), port0=10000,
                                    nodes=["n1", "n2"], auth="munge", config=config)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    keys = [line.split("=", 1)[0] for line in lines if not line.startswith("NodeName")]
    assert len(keys) == len(set(keys)), keys  # each key once
    return dict(line.split("=", 1) for line in lines if not line.startswith("NodeName"))


def test_the_default_configuration_is_unconfined_and_enforcing() -> None:
    conf = _conf(())
    assert (conf["TaskPlugin"], conf["ProctrackType"]) == ("task/none", "proctrack/linuxproc")
    assert conf["AccountingStorageEnforce"] == "associations,limits,qos"
    assert "JobAcctGatherParams" not in conf and "JobAcctGatherFrequency" not in conf


def test_cgroup_noenforce_and_typed_change_what_they_name() -> None:
    conf = _conf(("cgroup", "noenforce"))
    assert conf["TaskPlugin"] == "task/cgroup,task/affinity"
    assert conf["ProctrackType"] == "proctrack/cgroup"
    assert "AccountingStorageEnforce" not in conf  # 22.05 refuses a literal `none`
    cgroup_conf = localcluster._cgroup_conf()
    for line in ("CgroupPlugin=cgroup/v1", "ConstrainCores=yes", "ConstrainDevices=yes"):
        assert line in cgroup_conf.splitlines()
    typed = localcluster._slurm_conf(localcluster._Layout(Path("/tmp/x")), port0=10000,
                                     nodes=["n1"], auth="none", config=("typed",))
    assert " Gres=gpu:h100:4 " in typed
    gres = localgpu.gres_conf(Path("/b"), ["n1"], 4, "h100")
    assert "NodeName=n1 Name=gpu Type=h100 File=/b/dev/n1/nvidia[0-3]" in gres


def test_memkill_kills_a_step_past_its_memory_and_keeps_memory_a_consumable() -> None:
    conf = _conf(("cgroup", "noenforce", "memkill"))
    # slurmstepd samples each step's RSS every second and kills it past its limit
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux"
    assert conf["JobAcctGatherParams"] == "OverMemoryKill"
    assert conf["JobAcctGatherFrequency"] == "task=1"
    # a step without --mem gets 512 MB per CPU: only a step past its limit is killed
    assert (conf["SelectTypeParameters"], conf["DefMemPerCPU"]) == ("CR_Core_Memory", "512")
    assert conf["TaskPlugin"] == "task/cgroup,task/affinity"  # the others unchanged
    assert "AccountingStorageEnforce" not in conf
    # no memory cgroup: the kill is slurmstepd's, not the kernel's
    assert not any(line.startswith("ConstrainRAMSpace")
                   for line in localcluster._cgroup_conf().splitlines())


def test_every_gpu_of_every_node_has_its_own_device_number() -> None:
    numbers = {localgpu.device_number(n, i) for n in range(3) for i in range(4)}
    assert len(numbers) == 12 and (1, 3) not in numbers


def test_the_cluster_info_says_its_configuration_and_an_old_one_is_the_default() -> None:
    info = ClusterInfo(
        slurm_conf=Path("/b/etc/slurm.conf"), base_dir=Path("/b"), cluster_name="c",
        partition="p", account="a", other_account="o", nodes=["n1"], user="root",
        auth="none", slurmctld_port=1, slurmdbd_port=2, log_dir=Path("/b/log"),
        config=("cgroup", "noenforce"))
    assert info.config_name == "cgroup,noenforce"
    assert info.has("cgroup") and not info.has("typed")
    with pytest.raises(ValueError, match="unknown configuration feature"):
        info.has("cgroups")
    data = info.to_json()
    assert ClusterInfo.from_json(data) == info
    del data["config"]  # a state file of an older `up`
    assert ClusterInfo.from_json(data).config_name == "default"


def _stand_in(tmp_path: Path, **env: str) -> list[str]:
    """The nvidia-smi stand-in run here, on device files every process may open."""
    for i in range(4):
        dev = tmp_path / "dev" / "n1" / f"nvidia{i}"
        dev.parent.mkdir(parents=True, exist_ok=True)
        dev.write_text("")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(localgpu._stand_in(tmp_path, 4))
    smi.chmod(0o755)
    done = subprocess.run([str(smi), "-L"], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.defpath, "SLURMD_NODENAME": "n1", **env},
                          check=False)
    return [line.split(":")[0] for line in done.stdout.splitlines()]


def test_unconfined_the_stand_in_lists_what_cuda_visible_devices_names(tmp_path: Path) -> None:
    assert _stand_in(tmp_path) == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert _stand_in(tmp_path, CUDA_VISIBLE_DEVICES="1,3") == ["GPU 1", "GPU 3"]


def _in_new_uts(seconds: int) -> tuple[subprocess.Popen[bytes], str]:
    """A ``sleep`` in a UTS namespace of its own, and that namespace."""
    proc = subprocess.Popen(["unshare", "--uts", "sleep", str(seconds)])
    for _ in range(200):
        try:
            ns = os.readlink(f"/proc/{proc.pid}/ns/uts")
        except OSError:
            ns = ""
        if ns and ns != os.readlink("/proc/self/ns/uts"):
            return proc, ns
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("unshare --uts did not make a namespace")


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --uts needs root (the suite runs as root)")
def test_a_held_node_namespace_keeps_its_number_so_a_new_one_is_never_taken_for_ours() -> None:
    """Found in make test: stopping a cluster recounted the processes in its nodes' old
    namespace numbers after killing them, and a namespace made meanwhile (another
    test's `unshare --uts`) had been given a freed number: its processes were called
    the old cluster's survivors. `_stop` holds the namespaces open while it works."""
    ours, ns = _in_new_uts(60)
    held = localcluster._hold_namespaces({ns})
    try:
        assert set(held) == {ns}
        ours.kill()
        ours.wait(timeout=10)
        stranger, other = _in_new_uts(60)
        try:
            assert other != ns  # the held number is not given out again
            assert stranger.pid not in localcluster._pids_in_uts(set(held))
        finally:
            stranger.kill()
            stranger.wait(timeout=10)
    finally:
        for fd in held.values():
            os.close(fd)
