"""The README's layout names every module of the package (issue 40, item 7: 28 were
missing)."""

from __future__ import annotations

from pathlib import Path

import slurm_fsm


def test_the_readme_layout_names_every_module() -> None:
    root = Path(slurm_fsm.__file__).resolve().parent
    readme = (root.parent / "README.md").read_text()
    layout = readme[readme.index("## Layout"):readme.index("## Development")]
    files = [p.name for p in root.glob("*.py") if p.name != "__init__.py"]
    files += [p.name for p in root.glob("*.sh")]
    # a subpackage's modules (step 0's wing) by their path under slurm_fsm/
    files += [str(p.relative_to(root)) for p in root.glob("*/*.py")
              if p.parent.name not in ("testing",) and p.name != "__init__.py"]
    missing = sorted(f for f in files
                     if f"`{f}`" not in layout and f"`slurm_fsm/{f}`" not in layout)
    assert missing == []
