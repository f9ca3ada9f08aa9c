"""The package's layers, read from its code: which module sits where, and which imports
go against the layering (docs/architecture.md, issue 40 item 7).

:data:`LAYERS` places every module of ``slurm_fsm`` in one layer, from the faces people
use down to the records everything shares. :func:`import_graph` reads each module's
imports from its source (module level, inside functions and under ``TYPE_CHECKING``:
each is a dependency). :func:`against_layers` lists the imports of a layer by one above
it; the page lists them too and a test keeps the two equal, so the drawing and the
words cannot drift from the code. :func:`architecture_dot` draws it for the site.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

__all__ = ["LAYERS", "Layer", "against_layers", "architecture_dot", "import_graph",
           "layer_of", "modules"]

PACKAGE = Path(__file__).resolve().parents[1] / "slurm_fsm"


class Layer(NamedTuple):
    name: str
    title: str
    modules: tuple[str, ...]  # names under slurm_fsm; "step0.*": a whole package


#: Top to bottom: a module may import from its own layer and those below it.
LAYERS: tuple[Layer, ...] = (
    Layer("faces", "Faces: what people and programs call", (
        "__main__", "cli", "cli_runs", "fakecli", "demo", "allocation", "plan", "detach",
        "supervise", "progress")),
    Layer("run", "A run: start, watch, judge, own", (
        "executor", "persistent", "oneshot", "build", "monitor", "runsteps", "placement",
        "joboutput", "logs", "runlog", "runfacts", "results", "workflows", "report",
        "runowner", "runstates", "agent", "warmer")),
    Layer("step0", "Step 0, the wing: the allocation's states and their work", (
        "machine", "edges", "step0.*", "handoff", "successor", "imagecache", "setupkey")),
    Layer("shared", "Shared by step 0 and the run: leases, run records, history", (
        "lease", "leasestop", "runrecord", "history", "sharedview")),
    Layer("slurm", "Slurm and the host: command lines, processes, site facts", (
        "subprocess_backend", "slurmcli", "scriptguard", "scancelshim", "nvsmi",
        "ownership", "preflight", "pyxissite", "capacity", "scriptcheck", "testing.*")),
    Layer("base", "Base: the spec, the backend's protocol, records, errors", (
        "backend", "spec", "state", "jobstate", "errors", "convert", "clock", "duration",
        "files", "paths", "events", "project")),
)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """``slurm_fsm.x.y`` -> its file, for every module of the package."""
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m not in (name, "slurm_fsm")}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module (the package's ``__init__`` left out: it only maps public names to
    their modules) -> the package's modules it imports, anywhere in its source."""
    known = modules(package)
    return {name: _imports(name, path, known) for name, path in known.items()
            if name != "slurm_fsm"}


def layer_of(module: str) -> Layer | None:
    """The layer that places ``module`` (``slurm_fsm.x`` or ``x``); None: unplaced."""
    short = module.removeprefix("slurm_fsm.")
    for layer in LAYERS:
        for placed in layer.modules:
            if short == placed or (placed.endswith(".*") and (
                    short == placed[:-2] or short.startswith(placed[:-1]))):
                return layer
    return None


def against_layers(graph: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` pairs, short names, where the imported module sits in a
    layer above its importer's."""
    rank = {layer.name: i for i, layer in enumerate(LAYERS)}
    out = []
    for src, deps in graph.items():
        here = layer_of(src)
        for dest in deps:
            there = layer_of(dest)
            if here and there and rank[there.name] < rank[here.name]:
                out.append((src.removeprefix("slurm_fsm."), dest.removeprefix("slurm_fsm.")))
    return sorted(out)


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _label(layer: Layer, names: list[str], per_line: int = 6) -> str:
    rows = [" · ".join(names[i:i + per_line]) for i in range(0, len(names), per_line)]
    body = "<BR/>".join(_html(r) for r in rows)
    return f"<<B>{_html(layer.title)}</B><BR/><FONT POINT-SIZE=\"10\">{body}</FONT>>"


def _arrows_down(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """One arrow per pair of layers an import goes down, labelled with how many."""
    down: Counter[tuple[str, str]] = Counter()
    for src, deps in graph.items():
        for dest in deps:
            a, b = layer_of(src), layer_of(dest)
            if a and b and a != b:
                down[(a.name, b.name)] += 1
    rank = {layer.name: i for i, layer in enumerate(LAYERS)}
    out = []
    for (top, low), n in sorted(down.items(), key=lambda kv: (rank[kv[0][0]],
                                                              rank[kv[0][1]])):
        if rank[top] < rank[low]:
            weight = 10 if rank[low] == rank[top] + 1 else 1
            out.append(f"  {top} -> {low} [label={_q(str(n))}, weight={weight}];")
    return out


def architecture_dot(graph: Mapping[str, Iterable[str]] | None = None) -> str:
    """Graphviz source: one box per layer naming its modules, top to bottom; one arrow
    per pair of layers (how many imports go down it); the imports against the layers
    in red, dashed, named."""
    graph = import_graph() if graph is None else graph
    # size: at most the page's width (700 pt, as the state diagrams), scaled to fit
    lines = ["digraph architecture {", '  rankdir=TB; nodesep=0.3; ranksep=0.45; size="9.7,40";',
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", '
             'fontsize=12, margin="0.2,0.1"];',
             '  edge [color="#607d8b", fontname="Helvetica", fontsize=10];']
    placed: dict[str, list[str]] = {layer.name: [] for layer in LAYERS}
    for name in sorted(graph):
        layer = layer_of(name)
        if layer is not None:
            placed[layer.name].append(name.removeprefix("slurm_fsm."))
    for layer in LAYERS:
        fill = "#ffe0b2" if layer.name == "step0" else "#eceff1"
        lines.append(f"  {layer.name} [label={_label(layer, placed[layer.name])}, "
                     f'fillcolor="{fill}"];')
    lines += _arrows_down(graph)
    for src, dest in against_layers(graph):
        a, b = layer_of(src), layer_of(dest)
        assert a is not None and b is not None
        lines.append(f"  {a.name} -> {b.name} [color=\"#c62828\", fontcolor=\"#c62828\", "
                     f"style=dashed, constraint=false, label={_q(f'{src} -> {dest}')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
