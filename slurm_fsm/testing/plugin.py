"""pytest plugin (entry point ``pytest11``): the ``fake_cluster`` fixture."""

from __future__ import annotations

import pytest

from slurm_fsm.testing.fake import FakeCluster

__all__ = ["fake_cluster"]


@pytest.fixture
def fake_cluster() -> FakeCluster:
    """A fresh in-memory Slurm: partition ``batch`` (node01-node04), account ``acct``,
    user ``tester``, a fake clock; every call recorded in ``fake_cluster.calls``."""
    return FakeCluster()
