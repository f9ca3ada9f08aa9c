"""The procedure's step codes (0A-0F, 1, 3-5) are defined once, in docs/states.md's
"Steps" (``slurm_fsm_dev.docgen.STEP_CODES``): every code an edge or the package's text
names is one of them."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_fsm.step0.table import EDGES
from slurm_fsm_dev.docgen import STEP_CODES

ROOT = Path(__file__).resolve().parents[1]


def test_every_edge_s_step_is_defined() -> None:
    used = {code for e in EDGES if e.step for code in e.step.split("/")}
    assert used and used <= set(STEP_CODES)


def test_every_step_code_the_package_and_the_docs_name_is_defined() -> None:
    code = re.compile(r"\b0[A-Z]\b")
    texts = [*(ROOT / "slurm_fsm").rglob("*.py"), *(ROOT / "docs").rglob("*.md")]
    named = {m for path in texts for m in code.findall(path.read_text(encoding="utf-8"))}
    assert "0C" in named  # really read
    assert named <= set(STEP_CODES), sorted(named - set(STEP_CODES))


def test_the_page_defines_them() -> None:
    page = (ROOT / "docs" / "states.md").read_text(encoding="utf-8")
    for code in STEP_CODES:
        assert f"\n| {code} | " in page
