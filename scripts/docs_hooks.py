"""MkDocs hooks (``hooks:`` in mkdocs.yml): the pictures of the site, drawn at build time.

- ``states.md``: its mermaid block (which a code host draws) becomes the Graphviz
  drawing of the same edges, inlined as SVG (``slurm_fsm_dev.docgen.states_svg``).
- ``benchmarks.md``: each ``<!-- bench-chart:NAME -->`` marker under a figure's table
  becomes chart NAME, drawn with matplotlib from ``benchmarks/results.json``
  (``benchmarks/charts.py``) into ``charts/NAME.svg`` of the site.
- every page: no script, style sheet, image or font from another host (the site is
  read offline); a page that would load one fails the build.
- every page: a ``\\|`` in code in a table row (what a code host needs there) shows as
  ``|`` (Python-Markdown's tables would print the backslash).

A missing tool (Graphviz, matplotlib) fails the build with the package to install.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # benchmarks/ is a folder of the repository, not installed
    sys.path.insert(0, str(REPO))

from mkdocs.exceptions import PluginError  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

from benchmarks import charts  # noqa: E402
from slurm_fsm.step0.table import DiagramPart  # noqa: E402
from slurm_fsm_dev.docgen import (  # noqa: E402
    ARCH_DIAGRAM_MARKER,
    RUN_DIAGRAM_MARKER,
    DiagramError,
    architecture_svg,
    diagram_marker,
    run_svg,
    states_svg,
)

RESULTS = REPO / "benchmarks" / "results.json"
_MERMAID = re.compile(r"^```mermaid\n.*?^```\n", re.S | re.M)
_CHART_MARKER = re.compile(r"<!-- bench-chart:([\w-]+) -->")
_TABLE_ROW = re.compile(r"^ {0,3}\|.*$", re.M)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
#: Attributes that make the browser fetch something; any absolute http(s) URL in
#: them is a request to another host.
_EXTERNAL = re.compile(
    r"""<(script|link|img|iframe|source)\b[^>]*?\b(src|href)=["']?(https?:)?//""", re.I)

_state: dict[str, Any] = {}


def _figures() -> dict[str, Any]:
    try:
        figs: dict[str, Any] = json.loads(RESULTS.read_text())["figures"]
    except (OSError, ValueError, KeyError) as exc:
        raise PluginError(f"{RESULTS}: cannot read the benchmark figures: {exc}") from exc
    return figs


def on_files(files: Files, config: Any) -> Files:
    figs = _figures()
    names = charts.available(figs)
    try:
        for name in names:
            files.append(File.generated(config, f"charts/{name}.svg",
                                        content=charts.render(name, figs)))
    except ImportError as exc:
        raise PluginError(f"matplotlib is needed to draw the benchmark charts: {exc} "
                          "(pip install -e '.[docs]')") from exc
    _state["charts"] = set(names)
    return files


def unescape_table_code(markdown: str) -> str:
    """``\\|`` inside code spans of table rows -> ``|``: GitHub needs the escape there,
    Python-Markdown keeps code spans whole and would show the backslash."""

    def row(m: re.Match[str]) -> str:
        return _CODE_SPAN.sub(lambda c: c.group(1) + c.group(2).replace("\\|", "|")
                              + c.group(1), m.group(0))

    return _TABLE_ROW.sub(row, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src = page.file.src_uri
    markdown = unescape_table_code(markdown)
    if src == "states.md":
        markdown, n = _MERMAID.subn(_part_marker, markdown)
        if n != len(DiagramPart):
            raise PluginError(f"states.md has {n} mermaid blocks, not one per drawing "
                              f"({', '.join(p.value for p in DiagramPart)})")
        # the diagram and the edge table are wide: give them the table of contents' column
        page.meta.setdefault("hide", []).append("toc")
    if src == "detach.md":
        markdown, n = _MERMAID.subn(RUN_DIAGRAM_MARKER + "\n", markdown)
        if n != 1:
            raise PluginError(f"detach.md has {n} mermaid blocks, not one (a run's states)")
    if src == "benchmarks.md":
        def chart(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in _state.get("charts", ()):
                raise PluginError(f"benchmarks.md: chart {name!r} cannot be drawn from {RESULTS}"
                                  f" (known and available: {sorted(_state.get('charts', ()))})")
            return f"![{charts.CHARTS[name][1]}](charts/{name}.svg){{ .bench-chart }}"

        markdown = _CHART_MARKER.sub(chart, markdown)
        # a target the run printed as not met points at the paragraph that says why
        markdown = re.sub(r"^(- Target .*\*\*not met\*\*\.?)$",
                          r"\1 Why: [What the figures say](#what-the-figures-say).",
                          markdown, flags=re.M)
    return markdown


def _inline(html: str, marker: str, draw: Callable[[], str], css: str,
            caption: str) -> str:
    """``marker`` in ``html`` -> the drawing ``draw()`` makes, in a figure with
    ``caption``; a drawing that cannot be made fails the build."""
    if marker not in html:
        return html
    try:
        svg = draw()
    except DiagramError as exc:
        raise PluginError(str(exc)) from exc
    return html.replace(marker, f'<figure class="fsm-diagram {css}">{svg}'
                        f"<figcaption>{caption}</figcaption></figure>", 1)


def _part_marker(block: re.Match[str]) -> str:
    """A mermaid block of states.md -> the marker of the drawing it names."""
    named = re.search(r"%% slurm_fsm part: (\w+)", block.group(0))
    if named is None:
        raise PluginError("a mermaid block of states.md names no drawing (%% slurm_fsm part:)")
    return diagram_marker(DiagramPart(named.group(1))) + "\n"


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    for part in DiagramPart:
        marker = diagram_marker(part)
        if marker not in html:
            continue
        try:
            svg = states_svg(part=part)
        except DiagramError as exc:
            raise PluginError(str(exc)) from exc
        html = html.replace(marker, f'<figure class="fsm-diagram fsm-{part.value}">{svg}'
                            "<figcaption>Drawn by Graphviz from "
                            "<code>slurm_fsm.machine.EDGES</code> when the site is built; "
                            "hover an arrow for its steps.</figcaption></figure>", 1)
    html = _inline(html, ARCH_DIAGRAM_MARKER, architecture_svg, "fsm-layers",
                   "Drawn by Graphviz from the package's imports "
                   "(<code>slurm_fsm_dev.archmap</code>) when the site is built; each arrow "
                   "counts the imports from one layer to another; red, dashed: an import "
                   "against the layers.")
    html = _inline(html, RUN_DIAGRAM_MARKER, run_svg, "fsm-run",
                   "Drawn by Graphviz from <code>slurm_fsm.runstates.RUN_EDGES</code> when "
                   "the site is built; dashed: what a reader does.")
    return html


#: What nbconvert's template puts on a notebook page to load MathJax and mermaid from
#: a CDN when a notebook has math or a mermaid output; ours have neither.
_NOTEBOOK_LOADERS = (
    re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S),
    re.compile(r"<script type=\"module\">(?:(?!</script>).)*?mermaid\.esm\.min\.mjs.*?</script>",
               re.S),
)
_INLINE_SCRIPT = re.compile(r"<script\b[^>]*>(.*?)</script>", re.S | re.I)
_URL = re.compile(r"\bhttps?://[^\s\"'<>]+")


def offline(html: str, where: str) -> str:
    """``html`` without the CDN loaders of notebook pages; raises if it would still load
    anything from another host (a script, style sheet, image, frame, or a URL in a script)."""
    for loader in _NOTEBOOK_LOADERS:
        html = loader.sub("", html)
    m = _EXTERNAL.search(html)
    if m:
        raise PluginError(f"{where}: the page would load from another host: "
                          f"...{html[max(0, m.start() - 40):m.end() + 80]}...")
    for script in _INLINE_SCRIPT.finditer(html):
        url = _URL.search(script.group(1))
        if url:
            raise PluginError(f"{where}: a script of the page names another host: {url.group()}")
    return html


def on_post_page(output: str, page: Any, config: Any) -> str:
    return offline(output, page.file.src_uri)
