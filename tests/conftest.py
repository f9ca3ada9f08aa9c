from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.spec import JobSpec
from slurm_fsm.testing import make_spec as _make_spec

SpecFactory = Callable[..., JobSpec]


@pytest.fixture
def make_spec(tmp_path: Path) -> SpecFactory:
    """Build a valid persistent spec in tmp_path (``slurm_fsm.testing.make_spec``);
    keyword arguments override fields (``slurm_params`` entries merge)."""

    def make(**over: Any) -> JobSpec:
        return _make_spec(tmp_path, **over)

    return make


@pytest.fixture(autouse=True)
def _library_logger() -> Any:
    """The CLI configures the ``slurm_fsm`` logger (a stderr handler, its level, no
    propagation) when ``main`` runs in the test's process: put it back after each test,
    so that another test's ``caplog`` sees the records."""
    logger = logging.getLogger("slurm_fsm")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])  # clears the loggers' level cache too
    logger.propagate = saved[2]


from golden import golden_reports  # noqa: E402,F401  (the fixture, for tests that opt in)
