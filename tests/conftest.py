from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slurm_fsm.spec import JobSpec

SpecFactory = Callable[..., JobSpec]


@pytest.fixture
def make_spec(tmp_path: Path) -> SpecFactory:
    """Build a valid persistent spec in tmp_path; keyword arguments override fields
    (``slurm_params`` entries merge)."""

    def make(**over: Any) -> JobSpec:
        script = tmp_path / "job.slurm"
        if not script.exists():
            script.write_text("#!/bin/bash\nsrun true\n")
        params = {"partition": "batch", "account": "acct", "nodes": 1}
        params.update(over.pop("slurm_params", {}))
        data: dict[str, Any] = {
            "script_path": str(script),
            "work_dir": str(tmp_path / "work"),
            "model_name": "llama",
            "workflow_type": "pytest",
            "repo_root": str(tmp_path / "repo"),
            "slurm_params": params,
        }
        data.update(over)
        return JobSpec.from_dict(data)

    return make
