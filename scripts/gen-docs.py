#!/usr/bin/env python3
"""Regenerate the generated pages of docs/ (the state diagram and edge table)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # slurm_fsm_dev: repo tooling

from slurm_fsm_dev.docgen import states_markdown

if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "docs" / "states.md"
    out.write_text(states_markdown(), encoding="utf-8")
    print(f"wrote {out}")
