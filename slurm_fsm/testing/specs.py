"""``make_spec``: a valid job spec in a temporary folder, for tests against the fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_fsm.spec import JobSpec

__all__ = ["make_spec"]

#: The partition and account a default :class:`~slurm_fsm.testing.FakeCluster` knows.
DEFAULT_PARTITION = "batch"
DEFAULT_ACCOUNT = "acct"


def make_spec(tmp_path: str | Path, **overrides: Any) -> JobSpec:
    """A valid persistent pytest spec rooted in ``tmp_path``, fit for a default
    ``FakeCluster`` (partition ``batch``, account ``acct``, 1 node).

    Keyword arguments override job_spec.json fields by their JSON names and go through
    the same loader as a file (so a bad value raises the same ``SpecError``);
    ``slurm_params`` entries are merged into the defaults. The script
    ``<tmp_path>/job.slurm`` is created (``srun true``) unless it exists or
    ``script_path`` is given::

        spec = make_spec(tmp_path, model_name="llama", slurm_params={"nodes": 2})
    """
    root = Path(tmp_path)
    params: dict[str, Any] = {"partition": DEFAULT_PARTITION, "account": DEFAULT_ACCOUNT,
                              "nodes": 1}
    params.update(overrides.pop("slurm_params", {}))
    if "script_path" not in overrides:
        script = root / "job.slurm"
        if not script.exists():
            root.mkdir(parents=True, exist_ok=True)
            script.write_text("#!/bin/bash\nsrun true\n", encoding="utf-8")
        overrides["script_path"] = str(script)
    data: dict[str, Any] = {
        "work_dir": str(root / "work"),
        "model_name": "llama",
        "workflow_type": "pytest",
        "repo_root": str(root / "repo"),
        "slurm_params": params,
        **overrides,
    }
    return JobSpec.from_dict(data, base_dir=root, source="make_spec")
