"""Test helpers for orchestrator authors: the in-memory Slurm and its pytest fixture."""

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

__all__ = [
    "Call",
    "FakeClock",
    "FakeCluster",
    "FakeContainer",
    "FakeJob",
    "FakeNode",
    "FakeScript",
    "StepRule",
]
