#!/usr/bin/env python3
"""Regenerate the generated pages of docs/ (the state diagram and edge table)."""

from pathlib import Path

from slurm_fsm.docgen import states_markdown

if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "docs" / "states.md"
    out.write_text(states_markdown(), encoding="utf-8")
    print(f"wrote {out}")
