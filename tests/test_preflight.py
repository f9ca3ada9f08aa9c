"""The pre-flight checks: sinfo/sacctmgr parsers, what the cluster lacks, the config."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from slurm_fsm.preflight import (
    ClusterPartition,
    PreflightFailed,
    check_request,
    enforces_associations,
    parse_accounting_enforce,
    parse_associations,
    parse_def_cpu_per_gpu,
    parse_sinfo_partitions,
    request_warnings,
    require,
    sinfo_partitions_argv,
    slurm_config_problem,
)
from slurm_fsm.spec import JobSpec


def test_sinfo_rows_merge_by_partition_with_gpus_per_node() -> None:
    text = ("gpu|up|2|gpu:h100:8(S:0-1)\n"
            "gpu|up|1|gpu:4\n"
            "debug|up|3|(null)\n"
            "old|down|1|(null)\n")
    parts = {p.name: p for p in parse_sinfo_partitions(text)}
    assert parts["gpu"] == ClusterPartition(name="gpu", state="up", nodes=3,
                                            gpus_per_node=(8, 8, 4))
    assert parts["debug"].gpus_per_node == (0, 0, 0)
    assert not parts["old"].is_up
    assert parts["gpu"].describe() == "gpu (up, 3 nodes, 4/8 GPUs per node)"


def test_sinfo_rows_carry_each_node_s_cpus() -> None:
    """Issue 44.4: ``%c`` (CPUs per node) as the fifth field; rows split by it too."""
    assert sinfo_partitions_argv()[-1] == "--format=%R|%a|%D|%G|%c"
    text = "gpu|up|2|gpu:h100:8(S:0-1)|112\ngpu|up|1|gpu:4|32\ndebug|up|3|(null)|8\n"
    parts = {p.name: p for p in parse_sinfo_partitions(text)}
    assert parts["gpu"].cpus_per_node == (112, 112, 32)
    assert parts["gpu"].gpus_per_node == (8, 8, 4)
    assert parts["debug"].cpus_per_node == (8, 8, 8)
    # a row without the field (an older recording): CPUs not known
    assert parse_sinfo_partitions("debug|up|3|(null)\n")[0].cpus_per_node == ()


def test_def_cpu_per_gpu_from_the_partition_or_the_cluster() -> None:
    """``JobDefaults`` as ``scontrol show partition`` and ``scontrol show config`` print
    it (22.05, measured on the local cluster)."""
    part = ("PartitionName=gpu\n   AllocNodes=ALL Default=YES QoS=N/A\n"
            "   JobDefaults=DefMemPerGPU=4096,DefCpuPerGPU=14\n   DefMemPerNode=UNLIMITED\n")
    assert parse_def_cpu_per_gpu(part) == 14
    assert parse_def_cpu_per_gpu("PartitionName=debug\n   JobDefaults=(null)\n") is None
    assert parse_def_cpu_per_gpu("DefMemPerCPU            = 512\n"
                                 "JobDefaults             = DefCpuPerGPU=3\n") == 3
    assert parse_def_cpu_per_gpu("JobDefaults             = (null)\n") is None


def test_sinfo_row_of_the_wrong_shape_is_an_error() -> None:
    with pytest.raises(ValueError, match="fields"):
        parse_sinfo_partitions("debug|up|3\n")


def test_associations() -> None:
    assert parse_associations("acct||\nother|gpu|\n\n") == [("acct", ""), ("other", "gpu")]


class Cluster:
    def __init__(self, parts: list[ClusterPartition],
                 assoc: list[tuple[str, str]] | None) -> None:
        self.parts, self.assoc = parts, assoc

    def cluster_partitions(self) -> list[ClusterPartition]:
        return self.parts

    def user_associations(self, user: str) -> list[tuple[str, str]] | None:
        return self.assoc


def _spec(tmp_path: Path, **params: object) -> JobSpec:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\necho hi\n")
    base = {"partition": "gpu", "account": "acct", "nodes": 1, **params}
    return JobSpec.from_dict({"script_path": "job.slurm", "work_dir": "w", "model_name": "m",
                              "repo_root": ".", "slurm_params": base}, base_dir=tmp_path)


GPU = ClusterPartition(name="gpu", state="up", nodes=2, gpus_per_node=(8, 4))
DEBUG = ClusterPartition(name="debug", state="up", nodes=3, gpus_per_node=(0, 0, 0))


@pytest.mark.parametrize(("params", "parts", "assoc", "needle"), [
    ({"partition": "nope"}, [GPU, DEBUG], None,
     "no partition 'nope' on this cluster; it has: gpu (up, 2 nodes, 4/8 GPUs per node), "
     "debug (up, 3 nodes)"),
    ({}, [ClusterPartition(name="gpu", state="drain", nodes=1)], None,
     "partition 'gpu' is drain, not up"),
    ({"nodes": 3}, [GPU], None, "3 nodes asked; partition 'gpu' has 2 such nodes"),
    ({"nodes": 2, "gpus_per_node": 8}, [GPU], None,
     "2 nodes with 8 GPUs each asked; partition 'gpu' has 1 such node"),
    ({"account": "bad"}, [GPU], [("acct", ""), ("other", "")],
     "'bad' is not an account of user u in accounting; theirs: acct, other"),
    ({}, [GPU], [("acct", "debug")], "'acct' is not an account of user u"),
])
def test_each_failed_check_names_what_the_cluster_has(
        tmp_path: Path, params: dict[str, object], parts: list[ClusterPartition],
        assoc: list[tuple[str, str]] | None, needle: str) -> None:
    problems = check_request(_spec(tmp_path, **params), Cluster(parts, assoc), "u")
    assert len(problems) == 1 and needle in problems[0], problems


def test_a_fitting_request_passes_and_unknowns_are_not_failures(tmp_path: Path) -> None:
    spec = _spec(tmp_path, nodes=2, gpus_per_node=4)
    assert check_request(spec, Cluster([GPU], [("acct", "gpu")]), "u") == []
    assert check_request(spec, Cluster([], None), "u") == []  # nothing known: no verdict


def test_config_problem(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    assert "no such file" in (slurm_config_problem({"SLURM_CONF": str(conf)}, ()) or "")
    conf.write_text("ClusterName=x\n")
    assert slurm_config_problem({"SLURM_CONF": str(conf)}, ()) is None
    assert slurm_config_problem({}, [str(conf)]) is None
    missing = slurm_config_problem({}, [str(tmp_path / "none")]) or ""
    assert "SLURM_CONF is not set" in missing and "scripts/local-slurm env" in missing


def test_a_sinfo_that_fails_gives_no_verdict(tmp_path: Path) -> None:
    from slurm_fsm.errors import CommandFailed

    class Broken(Cluster):
        def cluster_partitions(self) -> list[ClusterPartition]:
            raise CommandFailed(["sinfo"], 1, "sinfo: error: something odd")

    assert check_request(_spec(tmp_path), Broken([], None), "u") == []


def test_the_allocation_size_is_what_is_checked(tmp_path: Path) -> None:
    """salloc asks alloc_nodes / alloc_gpus_per_node (issue 18), so those must fit."""
    base = _spec(tmp_path, nodes=1, gpus_per_node=4)
    cluster = Cluster([GPU], None)
    assert check_request(base, cluster, "u") == []
    bigger = attrs.evolve(base, alloc_nodes=2, alloc_gpus_per_node=8)
    problems = check_request(bigger, cluster, "u")
    assert len(problems) == 1 and problems[0].startswith(
        "alloc_nodes: 2 nodes with 8 GPUs each asked; partition 'gpu' has 1 such node"), problems
    one_shot = attrs.evolve(bigger, persistent_mode=False, log_file_pattern="j_%j.out")
    assert check_request(one_shot, cluster, "u") == []  # sbatch asks the job's own size


# ------------------------------------------------------------- enforcement (issue 23 fix 1)


class EnforcingCluster(Cluster):
    def __init__(self, enforce: str | None, assoc: list[tuple[str, str]]) -> None:
        super().__init__([GPU], assoc)
        self.enforce = enforce

    def accounting_enforce(self) -> str | None:
        return self.enforce


@pytest.mark.parametrize(("enforce", "refused"), [
    ("associations,limits,qos", True),
    ("associations", True),
    ("limits", True),  # implies associations
    ("safe", True),
    ("none", False),  # Slurm's default: the job runs under the default account
    ("", False),
    (None, True),  # the controller did not say: the strict check
])
def test_the_account_check_refuses_only_where_slurm_enforces_associations(
        tmp_path: Path, enforce: str | None, refused: bool) -> None:
    spec = _spec(tmp_path, account="projx")
    cluster = EnforcingCluster(enforce, [("acct", ""), ("other", "")])
    problems = check_request(spec, cluster, "u")
    warnings = request_warnings(spec, cluster, "u")
    if refused:
        assert len(problems) == 1 and "'projx' is not an account of user u" in problems[0]
        assert warnings == []
        with pytest.raises(PreflightFailed):
            require(spec, cluster, "u")
    else:
        assert problems == []
        assert len(warnings) == 1 and "does not enforce associations" in warnings[0]
        assert "default account" in warnings[0]
        assert require(spec, cluster, "u") == warnings


def test_enforcement_is_read_from_scontrol_show_config() -> None:
    text = ("Configuration data as of 2026-12-03T18:00:00\nAccountingStorageBackupHost = "
            "(null)\nAccountingStorageEnforce = none\nAccountingStorageHost = localhost\n")
    assert parse_accounting_enforce(text) == "none"
    assert parse_accounting_enforce("ClusterName = x\n") is None
    assert not enforces_associations("none")
    assert enforces_associations("associations,limits,qos")
