from __future__ import annotations

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


from golden import golden_reports  # noqa: E402,F401  (the fixture, for tests that opt in)
