"""docs/architecture.md against the code: every module in one layer, the imports
against the layers listed on the page exactly, the drawing made from the imports."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_fsm_dev import archmap
from slurm_fsm_dev.docgen import architecture_svg

PAGE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_LISTED = re.compile(r"^- `([\w.]+)` -> `([\w.]+)`", re.M)


def test_every_module_sits_in_one_layer() -> None:
    graph = archmap.import_graph()
    assert "slurm_fsm.step0.table" in graph  # the package is really read
    assert [m for m in graph if archmap.layer_of(m) is None] == []
    named = [m for layer in archmap.LAYERS for m in layer.modules]
    assert len(named) == len(set(named))


def test_a_new_module_is_unplaced_until_it_is_given_a_layer() -> None:
    assert archmap.layer_of("slurm_fsm.nowhere") is None
    assert archmap.layer_of("slurm_fsm.step0.anything").name == "step0"  # type: ignore[union-attr]
    assert archmap.layer_of("slurm_fsm.cli").name == "faces"  # type: ignore[union-attr]


def test_the_imports_against_the_layers_are_the_page_s_list() -> None:
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("<!-- slurm_fsm:against-layers -->", 1)[1].split(
        "<!-- /slurm_fsm:against-layers -->", 1)[0]
    assert sorted(_LISTED.findall(block)) == archmap.against_layers(archmap.import_graph())


def test_an_import_upwards_is_found() -> None:
    graph = {"slurm_fsm.spec": {"slurm_fsm.cli"}, "slurm_fsm.cli": {"slurm_fsm.spec"}}
    assert archmap.against_layers(graph) == [("spec", "cli")]


def test_the_drawing_names_every_layer_and_every_step0_module() -> None:
    svg = architecture_svg()
    for layer in archmap.LAYERS:
        assert layer.title.replace("'", "&#39;") in svg or layer.title in svg, layer.name
    for name in archmap.import_graph():
        if name.startswith("slurm_fsm.step0."):
            assert name.removeprefix("slurm_fsm.") in svg, name
    assert "history &#45;&gt; report" in svg  # the import against the layers, named


def test_the_drawing_fits_the_page_s_width() -> None:
    found = re.search(r'<svg[^>]*\bwidth="([0-9.]+)pt"', architecture_svg())
    assert found is not None and float(found.group(1)) <= 700  # as the state diagrams
