"""The docs notebook runs top to bottom without an error, is stored with its outputs,
draws the diagram as a picture, explains its words, ends with what to read next, and
every count its prose claims is the count in the output below it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parent.parent / "docs" / "notebooks" / "stepping.ipynb"

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "once": 1, "twice": 2}
_NUM = r"(\d+|" + "|".join(_NUMBERS) + r")"
#: "one `query_job`": that name, quoted, that many times in the output below
_NAMED = re.compile(_NUM + r" `(\w+)`")
#: "five calls": the last list printed below has that many items
_CALLS = re.compile(_NUM + r" calls\b")
#: "Validating three times" / "Validating twice": that state that many times
_TIMES = re.compile(r"\b([A-Z]\w+) " + r"(?:(\w+) times|(once|twice))\b")


def _n(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word]


def _text(cell: Any) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "".join(out)


def _executed(tmp_path: Path) -> Any:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def claims(nb: Any) -> list[tuple[str, int, int]]:
    """``(claim, said, found)`` for each count a markdown cell names, checked against
    the output of the next code cell."""
    out: list[tuple[str, int, int]] = []
    cells = list(nb.cells)
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        below = next((c for c in cells[i + 1:] if c.cell_type == "code"), None)
        if below is None:
            continue
        text = _text(below)
        prose = " ".join(cell.source.split())
        for m in _NAMED.finditer(prose):
            out.append((m.group(0), _n(m.group(1)), text.count(f"'{m.group(2)}'")))
        for m in _CALLS.finditer(prose):
            lists = re.findall(r"\[('[^\]]*')\]", text)
            found = len(lists[-1].split(",")) if lists else 0
            out.append((m.group(0), _n(m.group(1)), found))
        for m in _TIMES.finditer(prose):
            word = m.group(2) or m.group(3)
            if word not in _NUMBERS and not word.isdigit():
                continue
            out.append((m.group(0), _n(word), text.count(f"'{m.group(1)}'")))
    return out


def test_notebook_executes_and_its_prose_matches_its_outputs(tmp_path: Path) -> None:
    nb = _executed(tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(_text(c) for c in nb.cells if c.cell_type == "code")
    assert "Unable to contact slurm controller" in text
    found = claims(nb)
    assert len(found) >= 4, found  # the checker reads the claims it is meant to
    wrong = [(claim, said, got) for claim, said, got in found if said != got]
    assert wrong == [], f"prose says (claim, count) but the output shows: {wrong}"


def test_the_claim_checker_catches_a_wrong_count() -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("It makes two calls: one `query_job` and one "
                                      "`current_user`; Validating twice."),
        nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text="['Validating']\n['query_job', 'current_user', "
                                          "'find_jobs']\n")]),
    ])
    assert claims(nb) == [("one `query_job`", 1, 1), ("one `current_user`", 1, 1),
                          ("two calls", 2, 3), ("Validating twice", 2, 1)]


def test_notebook_draws_a_picture_explains_its_words_and_ends_with_what_next() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    private = [m.group(0) for c in code for m in re.finditer(r"\.\_\w+", c.source)]
    assert private == []
    assert all(c.get("outputs") for c in code), "execute the notebook and save it"
    pictures = [o for c in code for o in c["outputs"] if "image/svg+xml" in o.get("data", {})]
    assert pictures, "the diagram is drawn as a picture"
    assert 'id="state-Allocating"' in pictures[0]["data"]["image/svg+xml"]
    raw = "".join(_text(c) for c in code)
    assert "stateDiagram-v2" not in raw  # no diagram as raw mermaid text
    intro = nb.cells[0].source
    for word in ("step 0", "state", "trigger", "observation", "edge", "Gone"):
        assert f"**{word}**" in intro, word
    assert "What the machine is for" in intro
    assert nb.cells[-1].cell_type == "markdown" and "What to read next" in nb.cells[-1].source


#: The markers of ``possible_edges()`` the prose explains.
MARKERS = ("=>", "=?", "=yes", "=no", "(needs no)", "(does not hold)")


def test_every_marker_the_prose_explains_is_in_an_output() -> None:
    """The notebook explained ``=>`` and ``x=no (needs no)`` while none of its outputs
    showed them (every value was ``?``): each marker it names is in a stored output."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    shown = "".join(_text(c) for c in nb.cells if c.cell_type == "code")
    explained = [m for m in MARKERS if f"`{m}`" in prose]
    assert len(explained) == len(MARKERS), explained  # the prose names each
    assert [m for m in explained if m not in shown] == []
