"""The docs notebook runs top to bottom without an error, on public API only, and is
stored with its outputs."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parent.parent / "docs" / "notebooks" / "stepping.ipynb"


def test_notebook_executes(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "stateDiagram-v2" in text
    assert "Unable to contact slurm controller" in text


def test_notebook_uses_public_api_and_is_stored_with_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    private = [m.group(0) for c in code for m in re.finditer(r"\.\_\w+", c.source)]
    assert private == []
    assert all(c.get("outputs") for c in code), "execute the notebook and save it"
    text = "".join(o.get("text", "") for c in code for o in c["outputs"])
    assert "class Allocating current" in text  # the diagram with the current state
