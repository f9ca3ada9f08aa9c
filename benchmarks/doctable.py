"""A benchmark's table written into its docs page, between two marker comments."""

from __future__ import annotations

from pathlib import Path


def splice_table(doc: Path, begin: str, end: str, table: str) -> bool:
    """Replace what stands between ``begin`` and ``end`` in ``doc`` with ``table``;
    False (``doc`` untouched) when the page has no ``begin`` marker."""
    text = doc.read_text(encoding="utf-8")
    if begin not in text:
        return False
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + begin + "\n" + table + end + tail, encoding="utf-8")
    return True
