"""Checks made before the first Slurm command that changes anything.

Two kinds, both read-only:

* :func:`slurm_config_problem`: is a Slurm configuration reachable at all
  (``SLURM_CONF``, or one of the usual places)? Checked on disk, before any Slurm
  tool runs, so that a shell not pointed at a cluster gets one message that says
  how to point it at one, not Slurm's own error repeated by every layer.
* :func:`check_request`: does the cluster have what the spec asks for? The
  partition exists and is up, the nodes (and GPUs per node) fit it, and the account
  is one of the user's associations where accounting lists any. It asks a backend
  that can answer (:class:`ClusterQueries`: ``sinfo`` and ``sacctmgr`` on the real
  one); a backend that cannot is not checked. The account check follows what the
  cluster enforces (:class:`EnforcementQuery`: ``scontrol show config``,
  ``AccountingStorageEnforce``): where it names ``associations`` Slurm refuses a job
  under an account without one, so the check does; elsewhere Slurm runs the job under
  the user's default account, so the check only warns (:func:`request_warnings`).
  Never refuse a job Slurm would run.

``slurm-fsm plan`` shows the failed checks and exits non-zero; ``slurm-fsm run``
makes the same checks before ``salloc`` and stops with one error naming what the
cluster has.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

from slurm_fsm.capacity import NodeCpus, allocation_request_size
from slurm_fsm.errors import CommandFailed, NoSlurmConfig, PreflightFailed
from slurm_fsm.spec import JobSpec

__all__ = [
    "CONFIG_PLACES",
    "ClusterPartition",
    "ClusterQueries",
    "CpuDefaultsQuery",
    "EnforcementQuery",
    "NoSlurmConfig",
    "PreflightFailed",
    "check_request",
    "enforces_associations",
    "node_cpus",
    "parse_accounting_enforce",
    "parse_associations",
    "parse_def_cpu_per_gpu",
    "parse_sinfo_partitions",
    "request_warnings",
    "require",
    "sacctmgr_assoc_argv",
    "scontrol_config_argv",
    "scontrol_partition_argv",
    "sinfo_partitions_argv",
    "slurm_config_problem",
]

#: Where Slurm's tools look for slurm.conf when ``SLURM_CONF`` is unset: Debian's
#: and the common source builds' compiled-in paths, and the cache of a configless
#: setup (slurmd's ``conf-cache``, ``/run/slurm/conf``).
CONFIG_PLACES = (
    "/etc/slurm/slurm.conf",
    "/etc/slurm-llnl/slurm.conf",
    "/usr/local/etc/slurm.conf",
    "/opt/slurm/etc/slurm.conf",
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
)

#: How to point a shell at the project's own local cluster (docs/local-cluster.md).
LOCAL_CLUSTER_LINE = 'eval "$(scripts/local-slurm env)"'


def slurm_config_problem(environ: Mapping[str, str] | None = None,
                         places: Iterable[str] | None = None) -> str | None:
    """None when a Slurm configuration is there to read; else one message saying what
    is missing and how to point this shell at a cluster. Reads the disk only
    (``places``: :data:`CONFIG_PLACES` when not given)."""
    env = os.environ if environ is None else environ
    places = CONFIG_PLACES if places is None else places
    conf = env.get("SLURM_CONF", "")
    how = ("point this shell at a cluster: export SLURM_CONF=/path/to/slurm.conf "
           f"(the project's local cluster, after `make cluster` or `make demo`: "
           f"{LOCAL_CLUSTER_LINE})")
    if conf:
        if Path(conf).is_file():
            return None
        return f"SLURM_CONF={conf}: no such file; {how}"
    where = list(places)
    if any(Path(p).is_file() for p in where):
        return None
    return (f"no Slurm configuration: SLURM_CONF is not set and there is no "
            f"{where[0] if where else 'slurm.conf'}; {how}")


@attrs.frozen(kw_only=True)
class ClusterPartition:
    """A partition as ``sinfo`` reports it."""

    name: str
    #: up, down, drain, inact (sinfo's %a)
    state: str
    #: nodes of the partition
    nodes: int
    #: GPUs per node, one entry per node (0 for a node without a gpu GRES; empty when
    #: not known, read as no GPUs)
    gpus_per_node: tuple[int, ...] = ()
    #: CPUs per node, one entry per node in the order of ``gpus_per_node``; empty when
    #: not known
    cpus_per_node: tuple[int, ...] = ()

    @property
    def is_up(self) -> bool:
        return self.state == "up"

    def describe(self) -> str:
        gpus = sorted(set(self.gpus_per_node))
        gpu_text = "" if gpus in ([], [0]) else \
            f", {'/'.join(str(g) for g in gpus)} GPUs per node"
        return f"{self.name} ({self.state}, {self.nodes} node{'s' * (self.nodes != 1)}" \
               f"{gpu_text})"


@runtime_checkable
class ClusterQueries(Protocol):
    """What a backend answers for the pre-flight checks (read-only)."""

    def cluster_partitions(self) -> list[ClusterPartition]:
        """Every partition of the cluster (``sinfo``)."""
        ...

    def user_associations(self, user: str) -> list[tuple[str, str]] | None:
        """``(account, partition)`` of each association of ``user`` (partition empty:
        any); None when accounting cannot say (no slurmdbd, no associations)."""
        ...


@runtime_checkable
class EnforcementQuery(Protocol):
    """What a backend answers about the cluster's policy (read-only)."""

    def accounting_enforce(self) -> str | None:
        """``AccountingStorageEnforce`` of ``scontrol show config`` (``none``,
        ``associations,limits,qos``...); None when the controller cannot say."""
        ...


@runtime_checkable
class CpuDefaultsQuery(Protocol):
    """What a backend answers about the CPUs Slurm gives per GPU (read-only)."""

    def def_cpu_per_gpu(self, partition: str) -> int | None:
        """``DefCpuPerGPU`` of the partition's ``JobDefaults``, else of the cluster's;
        None when neither sets it or scontrol cannot say."""
        ...


def node_cpus(spec: JobSpec, backend: object) -> NodeCpus | None:
    """What the cluster says about the CPUs of an allocation made for ``spec``
    (:func:`slurm_fsm.capacity.allocation_request_size`): its ``DefCpuPerGPU``, else
    the CPUs and GPUs of each node of the partition (``sinfo``). Asked only for an
    allocation with GPUs whose spec gives no ``alloc_cpus_per_node``; None when there
    is nothing to ask or the backend cannot answer."""
    partition = spec.slurm_params.partition
    gpus = (spec.alloc_gpus_per_node if spec.alloc_gpus_per_node is not None
            else spec.slurm_params.gpus_per_node)
    if not gpus or spec.alloc_cpus_per_node is not None:
        return None
    if isinstance(backend, CpuDefaultsQuery):
        per_gpu = backend.def_cpu_per_gpu(partition)
        if per_gpu:
            return NodeCpus(def_cpu_per_gpu=per_gpu)
    if not isinstance(backend, ClusterQueries):
        return None
    try:
        found = [p for p in backend.cluster_partitions() if p.name == partition]
    except CommandFailed:  # sinfo failed or printed what we cannot read: one CPU per task
        return None
    if not found or len(found[0].cpus_per_node) != len(found[0].gpus_per_node):
        return None
    return NodeCpus(nodes=tuple(zip(found[0].cpus_per_node, found[0].gpus_per_node,
                                    strict=True)))


def scontrol_config_argv() -> list[str]:
    """``scontrol show config``: the running controller's configuration."""
    return ["scontrol", "show", "config"]


def parse_accounting_enforce(text: str) -> str | None:
    """``AccountingStorageEnforce`` from ``scontrol show config``'s ``Key = value``
    lines; None when the key is not there."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "AccountingStorageEnforce":
            return value.strip()
    return None


def enforces_associations(enforce: str | None) -> bool:
    """Whether Slurm refuses a job under an account the user has no association of:
    ``AccountingStorageEnforce`` names ``associations`` (``limits``, ``qos``, ``safe``
    and ``wckeys`` imply it). None (unknown) counts as enforced: the old, strict
    behaviour, which a cluster that says nothing cannot disprove."""
    if enforce is None:
        return True
    words = {w.strip().lower() for w in enforce.split(",")}
    return bool(words & {"associations", "limits", "qos", "safe", "wckeys"})


def sinfo_partitions_argv() -> list[str]:
    """``sinfo``: partition, availability, node count, GRES and CPUs per node, one row
    per group."""
    return ["sinfo", "--noheader", "--all", "--format=%R|%a|%D|%G|%c"]


def scontrol_partition_argv(partition: str) -> list[str]:
    """``scontrol show partition``: one partition's settings (its ``JobDefaults``)."""
    return ["scontrol", "show", "partition", partition]


_JOB_DEFAULTS = re.compile(r"(?:^|\s)JobDefaults\s*=\s*(\S+)")


def parse_def_cpu_per_gpu(text: str) -> int | None:
    """``DefCpuPerGPU`` of the ``JobDefaults`` that ``scontrol show partition``
    (``JobDefaults=DefMemPerGPU=4096,DefCpuPerGPU=14``) or ``scontrol show config``
    (``JobDefaults = DefCpuPerGPU=3``) prints; None when it is not set (``(null)``)."""
    for m in _JOB_DEFAULTS.finditer(text):
        for item in m.group(1).split(","):
            key, _, value = item.partition("=")
            if key == "DefCpuPerGPU" and value.isdigit() and int(value) > 0:
                return int(value)
    return None


def sacctmgr_assoc_argv(user: str) -> list[str]:
    """``sacctmgr show assoc``: the user's accounts (and partitions), parsable."""
    return ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", f"user={user}",
            "format=account,partition"]


_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")


def _gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in _GPU_GRES.finditer(gres))


def parse_sinfo_partitions(text: str) -> list[ClusterPartition]:
    """Rows of :func:`sinfo_partitions_argv`, merged by partition (sinfo splits one
    partition into rows of differing GRES or state)."""
    merged: dict[str, ClusterPartition] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) not in (4, 5):
            raise ValueError(f"sinfo row with {len(fields)} fields, not 5: {line!r}")
        name, state, count, gres = fields[:4]
        n = int(count)
        cpus = (int(fields[4]),) * n if len(fields) == 5 and fields[4].isdigit() else ()
        row = ClusterPartition(name=name, state=state.rstrip("*"), nodes=n,
                               gpus_per_node=(_gpus(gres),) * n, cpus_per_node=cpus)
        old = merged.get(name)
        if old is not None:
            both = bool(old.cpus_per_node) and bool(cpus)  # else not known for every node
            row = ClusterPartition(name=name, state=old.state if old.is_up else row.state,
                                   nodes=old.nodes + n,
                                   gpus_per_node=old.gpus_per_node + row.gpus_per_node,
                                   cpus_per_node=old.cpus_per_node + cpus if both else ())
        merged[name] = row
    return list(merged.values())


def parse_associations(text: str) -> list[tuple[str, str]]:
    """Rows of :func:`sacctmgr_assoc_argv`: ``(account, partition)``."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        account, _, partition = line.partition("|")
        rows.append((account.strip(), partition.strip().rstrip("|")))
    return rows


def check_request(spec: JobSpec, cluster: ClusterQueries, user: str) -> list[str]:
    """What the cluster lacks for ``spec``: one line per failed check, naming what the
    cluster has; empty when every check passes. (What Slurm would let pass with a
    change, such as an account without association where associations are not
    enforced, is in :func:`request_warnings`.)"""
    return _checks(spec, cluster, user)[0]


def request_warnings(spec: JobSpec, cluster: ClusterQueries, user: str) -> list[str]:
    """What Slurm will run otherwise than the spec says, without refusing it."""
    return _checks(spec, cluster, user)[1]


def _account_enforced(cluster: object) -> tuple[bool, str | None]:
    if not isinstance(cluster, EnforcementQuery):
        return True, None
    enforce = cluster.accounting_enforce()
    return enforces_associations(enforce), enforce


def _checks(spec: JobSpec, cluster: ClusterQueries, user: str
            ) -> tuple[list[str], list[str]]:
    """(problems, warnings) of :func:`check_request` / :func:`request_warnings`."""
    params = spec.slurm_params
    try:
        parts = {p.name: p for p in cluster.cluster_partitions()}
    except CommandFailed:  # sinfo failed or printed what we cannot read: no verdict
        return [], []  # (an unreachable controller or a timeout is raised: salloc would fail)
    if not parts:
        return [], []
    part = parts.get(params.partition)
    have = ", ".join(p.describe() for p in parts.values())
    problems: list[str] = []
    warnings: list[str] = []
    if part is None:
        problems.append(f"slurm_params.partition: no partition {params.partition!r} on "
                        f"this cluster; it has: {have}")
    else:
        if not part.is_up:
            problems.append(f"slurm_params.partition: partition {part.name!r} is "
                            f"{part.state}, not up; the cluster has: {have}")
        # what salloc will ask: the allocation's size (alloc_nodes, alloc_gpus_per_node)
        if spec.persistent_mode:
            size = allocation_request_size(spec)
            nodes, gpus = size.nodes, size.gpus_per_node or 0
        else:
            nodes, gpus = params.nodes, params.gpus_per_node or 0
        field = ("alloc_nodes" if spec.alloc_nodes is not None and spec.persistent_mode
                 else "slurm_params.nodes")
        per_node = part.gpus_per_node or (0,) * part.nodes  # GPUs unknown: none
        fitting = sum(1 for g in per_node if g >= gpus)
        if nodes > fitting:
            what = (f"{nodes} node{'s' * (nodes != 1)}" if not gpus else
                    f"{nodes} node{'s' * (nodes != 1)} with {gpus} GPUs each")
            problems.append(f"{field}: {what} asked; partition {part.name!r} has "
                            f"{fitting} such node{'s' * (fitting != 1)}: {part.describe()}")
        elif spec.persistent_mode and spec.alloc_cpus_per_node is not None:
            problems += _cpus_problems(part, spec.alloc_cpus_per_node, nodes, gpus)
    assoc = cluster.user_associations(user)
    if assoc:
        usable = {a for a, p in assoc if not p or p == params.partition}
        if params.account not in usable:
            accounts = ", ".join(sorted({a for a, _ in assoc}))
            text = (f"slurm_params.account: {params.account!r} is not an account of "
                    f"user {user} in accounting; theirs: {accounts}")
            enforced, enforce = _account_enforced(cluster)
            if enforced:
                problems.append(text)
            else:
                warnings.append(f"{text}. This cluster does not enforce associations "
                                f"(AccountingStorageEnforce = {enforce}): Slurm runs the "
                                "job under the user's default account")
    return problems, warnings


def _cpus_problems(part: ClusterPartition, cpus: int, nodes: int, gpus: int) -> list[str]:
    """``alloc_cpus_per_node`` more than the partition's nodes (with the GPUs) have."""
    if len(part.cpus_per_node) != len(part.gpus_per_node):
        return []  # CPUs not known: Slurm decides
    fitting = sum(1 for c, g in zip(part.cpus_per_node, part.gpus_per_node, strict=True)
                  if g >= gpus and c >= cpus)
    if nodes <= fitting:
        return []
    have = "/".join(str(c) for c in sorted(set(part.cpus_per_node)))
    return [f"alloc_cpus_per_node: {cpus} CPUs per node asked on {nodes} node(s); partition "
            f"{part.name!r} has {fitting} such node(s) (nodes of {have} CPUs)"]


def require(spec: JobSpec, backend: object, user: str) -> list[str]:
    """Raise :class:`PreflightFailed` when :func:`check_request` finds a problem; else
    return :func:`request_warnings` (for the caller to say). A backend that cannot
    answer (not a :class:`ClusterQueries`) is not checked. The machine calls it before
    ``salloc``, so ``run`` and ``plan`` check alike."""
    if not isinstance(backend, ClusterQueries):
        return []
    problems, warnings = _checks(spec, backend, user)
    if problems:
        raise PreflightFailed(problems)
    return warnings
