"""The fake cluster of the command line's ``--backend fake`` (and of a detached fake
run's supervisor): what it knows when not told, and how it is made. Below the CLI, so
that :mod:`slurm_fsm.supervise` makes the same cluster without importing the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_fsm.backend import SlurmBackend

__all__ = ["FAKE_ACCOUNTS", "FAKE_NODES", "FAKE_PARTITIONS", "fake_backend"]

#: What ``--backend fake`` knows when not told (``--fake-partition``/``--fake-account``):
#: the partition and account of the shipped examples and of the local cluster.
FAKE_PARTITIONS = ("debug",)
FAKE_ACCOUNTS = ("acct",)
#: Nodes of each fake partition.
FAKE_NODES = 4


def fake_backend(partitions: Sequence[str], accounts: Sequence[str]) -> SlurmBackend:
    """The fake cluster of ``--backend fake``: it runs the script for real on this machine
    (``run_scripts=True``) and knows only the declared partitions and accounts (the
    defaults when none are given)."""
    from slurm_fsm.testing import FakeCluster

    parts = list(partitions) or list(FAKE_PARTITIONS)
    nodes = [f"node{i:02d}" for i in range(1, FAKE_NODES + 1)]
    return FakeCluster(partitions={p: nodes for p in parts},
                       accounts=list(accounts) or list(FAKE_ACCOUNTS), run_scripts=True,
                       preflight=True)
