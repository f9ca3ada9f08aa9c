"""The size of the persistent allocation: what to ask Slurm for, and whether what Slurm
granted can hold a job. No I/O.

* :func:`job_needs`: what one job takes of an allocation (nodes, tasks per node, CPUs
  per node, GPUs per node), from its ``slurm_params``: a task takes
  ``cpus_per_task`` CPUs (default one; the CPUs a job gets beyond that are its share
  of what the allocation has, :func:`slurm_fsm.placement.cpu_share`).
* :func:`allocation_request_size`: what ``salloc`` asks for (step 0E): ``alloc_nodes``
  nodes (default the job's ``nodes``), ``alloc_gpus_per_node`` GPUs per node (default
  the job's ``gpus_per_node``) and, per node, CPUs asked as that many one-CPU tasks
  (``--ntasks-per-node``, since the job's steps say their own task count):

  - at least the job's own: one task per GPU or its tasks per node, whichever is
    more (the next job of the same allocation is often one rank per GPU), each of
    ``cpus_per_task`` CPUs;
  - ``alloc_cpus_per_node`` when the spec gives it (as it is); else, for an allocation with GPUs,
    the cluster's ``DefCpuPerGPU`` per GPU when set (:class:`NodeCpus`: Slurm grants
    that itself to a request that names no CPUs per GPU), else the node's CPUs in
    proportion to the GPUs asked (``sinfo``; over nodes of several shapes, what every
    node with the GPUs can give). An allocation without GPUs asks its job's tasks
    only: it does not take the node. Without any of this (the cluster not asked, an
    old backend) one CPU per task, as Slurm's default.

  Before issue 44 it asked only the first figure: a 4-GPU allocation of an 8-CPU node
  held 4 CPUs, and a lone 1-GPU job in it one (``SLURM_CPUS_ON_NODE=1``). Never
  ``--ntasks`` alone: ``--nodes=2 --ntasks=1`` makes salloc shrink the allocation to
  one node (``can't run 1 processes on 2 nodes, setting nnodes to 1``).
* :func:`with_grant`: the state file's view of an allocation, set to what Slurm
  GRANTED (``scontrol show job``), never to what was asked.
* :func:`capacity_problems`: why a granted allocation cannot hold a job (the reuse
  rules of :func:`slurm_fsm.step0.table.incompatibilities` for the size).
"""

from __future__ import annotations

import attrs

from slurm_fsm.backend import Granted
from slurm_fsm.spec import JobSpec
from slurm_fsm.state import AllocState

__all__ = ["JobNeeds", "NodeCpus", "RequestSize", "allocation_request_size",
           "capacity_problems", "job_needs", "with_grant"]


@attrs.frozen(kw_only=True)
class JobNeeds:
    """What one job takes of an allocation at least: a task takes ``cpus_per_task``
    CPUs (``slurm_params.cpus_per_task``, default one)."""

    nodes: int
    tasks_per_node: int
    tasks: int
    gpus_per_node: int
    cpus_per_task: int = 1

    @property
    def cpus_per_node(self) -> int:
        return self.tasks_per_node * self.cpus_per_task


@attrs.frozen(kw_only=True)
class RequestSize:
    """What ``salloc`` asks for."""

    nodes: int
    #: one-CPU tasks per node: the allocation's CPUs per node
    ntasks_per_node: int
    gpus_per_node: int | None  # None: no ``--gpus-per-node``
    #: where the CPU figure comes from, for the run's message
    cpus_from: str = "one CPU per task"


@attrs.frozen(kw_only=True)
class NodeCpus:
    """What the cluster says about CPUs for GPUs, read before ``salloc``."""

    #: ``DefCpuPerGPU`` of the partition, else of the cluster; None: not set
    def_cpu_per_gpu: int | None = None
    #: ``(CPUs, GPUs)`` of each node of the partition (``sinfo``)
    nodes: tuple[tuple[int, int], ...] = ()

    def for_gpus(self, gpus: int) -> tuple[int, str] | None:
        """CPUs per node for ``gpus`` GPUs per node, and why; None when not known."""
        if self.def_cpu_per_gpu:
            return (gpus * self.def_cpu_per_gpu,
                    f"the cluster's DefCpuPerGPU={self.def_cpu_per_gpu} x {gpus} GPU(s)")
        fitting = [(cpus * gpus // have, cpus, have) for cpus, have in self.nodes
                   if have >= gpus and cpus > 0]
        if not fitting:
            return None
        want, cpus, have = min(fitting)
        return want, f"in proportion to a node's {cpus} CPUs for {have} GPUs"


def job_needs(spec: JobSpec) -> JobNeeds:
    """Nodes, tasks per node (``ntasks_per_node``, else ``ntasks`` spread over the nodes,
    else 1), total tasks and GPUs per node of ``spec``'s job."""
    p = spec.slurm_params
    tpn: int
    tasks: int
    if p.ntasks_per_node is not None:
        tpn = p.ntasks_per_node
        tasks = p.ntasks if p.ntasks is not None else p.nodes * tpn
    elif p.ntasks is not None:
        tpn = -(-p.ntasks // p.nodes)
        tasks = p.ntasks
    else:
        tpn, tasks = 1, p.nodes
    return JobNeeds(nodes=p.nodes, tasks_per_node=tpn, tasks=tasks,
                    gpus_per_node=p.gpus_per_node or 0, cpus_per_task=p.cpus_per_task or 1)


def allocation_request_size(spec: JobSpec, cpus: NodeCpus | None = None) -> RequestSize:
    """The allocation to make for ``spec`` on a cluster whose CPUs ``cpus`` says (None:
    not known); see the module docstring."""
    needs = job_needs(spec)
    nodes = spec.alloc_nodes if spec.alloc_nodes is not None else needs.nodes
    gpus = (spec.alloc_gpus_per_node if spec.alloc_gpus_per_node is not None
            else spec.slurm_params.gpus_per_node)
    tasks = max(needs.tasks_per_node, gpus or 0) * needs.cpus_per_task
    why = ("the job's tasks" if needs.cpus_per_task == 1 else
           f"the job's tasks x cpus_per_task {needs.cpus_per_task}")
    if spec.alloc_cpus_per_node is not None:  # the spec's figure, as it is (>= the job's)
        tasks, why = spec.alloc_cpus_per_node, "alloc_cpus_per_node"
    elif gpus and cpus is not None:
        figure = cpus.for_gpus(gpus)
        if figure is not None and figure[0] > tasks:
            tasks, why = figure
    return RequestSize(nodes=nodes, ntasks_per_node=tasks, gpus_per_node=gpus if gpus else None,
                       cpus_from=why)


def with_grant(alloc: AllocState, granted: Granted) -> AllocState:
    """``alloc`` with what Slurm granted: nodes, nodelist, CPUs and GPUs per node."""
    return attrs.evolve(alloc, nodes=granted.nodes,
                        nodelist=granted.nodelist or alloc.nodelist,
                        cpus_per_node=granted.cpus_per_node,
                        gpus_per_node=granted.gpus_per_node)


def capacity_problems(alloc: AllocState, spec: JobSpec) -> list[str]:
    """Why the allocation, as granted, cannot hold ``spec``'s job: too few nodes, too
    few CPUs per node for its tasks per node, too few GPUs per node. ``[]`` when it
    can. A state file written before CPUs were recorded (no ``cpus_per_node``) is not
    judged on CPUs."""
    needs = job_needs(spec)
    out = []
    if alloc.nodes < needs.nodes:
        out.append(f"nodes {needs.nodes} is more than the allocation's {alloc.nodes} "
                   "(as granted by Slurm)")
    if alloc.cpus_per_node is not None and alloc.cpus_per_node < needs.cpus_per_node:
        each = (f" of {needs.cpus_per_task} CPUs" if needs.cpus_per_task > 1 else "")
        out.append(f"{needs.tasks_per_node} task(s){each} per node need "
                   f"{needs.cpus_per_node} CPU(s) per node, the allocation has "
                   f"{alloc.cpus_per_node} (as granted by Slurm)")
    if needs.gpus_per_node and (alloc.gpus_per_node or 0) < needs.gpus_per_node:
        out.append(f"gpus_per_node {needs.gpus_per_node} is more than the allocation's "
                   f"{alloc.gpus_per_node or 0} (as granted by Slurm)")
    return out
