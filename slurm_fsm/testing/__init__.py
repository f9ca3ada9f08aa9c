"""Test helpers for orchestrator authors: the in-memory Slurm, its pytest fixture and
``make_spec``."""

from slurm_fsm.testing.fake import (
    Call,
    FakeClock,
    FakeCluster,
    FakeContainer,
    FakeJob,
    FakeNode,
    FakeScript,
    StepRule,
)
from slurm_fsm.testing.specs import make_spec

__all__ = [
    "Call",
    "FakeClock",
    "FakeCluster",
    "FakeContainer",
    "FakeJob",
    "FakeNode",
    "FakeScript",
    "StepRule",
    "make_spec",
]
