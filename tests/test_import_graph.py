"""The package's import graph has no circle.

Every import of one slurm_fsm module by another counts, at module level, inside a
function (a deferred import is still a dependency) or under ``if TYPE_CHECKING:`` (a
module that needs another's names to say its types depends on it too). The package's
``__init__`` is left out: it only maps public names to their modules, loading them on
first use.
"""

from __future__ import annotations

from slurm_fsm_dev.archmap import import_graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle() -> None:
    graph = import_graph()
    assert "slurm_fsm.step0.table" in graph["slurm_fsm.machine"]  # the graph is really read
    assert "slurm_fsm.backend" in graph["slurm_fsm.errors"]  # annotation-only imports too
    assert circles(graph) == []


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_layers_point_down() -> None:
    """design.md's direction of calls: the backend never imports the machine or the
    executor; the machine never imports the executor; nothing below imports the CLI."""
    graph = import_graph()
    for low, high in [("slurm_fsm.backend", "slurm_fsm.machine"),
                      ("slurm_fsm.subprocess_backend", "slurm_fsm.machine"),
                      ("slurm_fsm.slurmcli", "slurm_fsm.machine"),
                      ("slurm_fsm.machine", "slurm_fsm.executor"),
                      ("slurm_fsm.step0.table", "slurm_fsm.machine"),
                      ("slurm_fsm.spec", "slurm_fsm.machine")]:
        assert high not in graph[low], f"{low} imports {high}"
    assert not [m for m, deps in graph.items()
                if "slurm_fsm.cli" in deps and m != "slurm_fsm.__main__"]


def test_the_paths_only_observe_and_the_facts_stay_low() -> None:
    """The paths of a run neither judge nor build a report (they never import the judge,
    the report or the face); what a run saw is a low room (only the job states)."""
    graph = import_graph()
    for path in ("slurm_fsm.persistent", "slurm_fsm.oneshot"):
        assert graph[path] & {"slurm_fsm.results", "slurm_fsm.report",
                              "slurm_fsm.executor"} == set(), path
    assert graph["slurm_fsm.runfacts"] == {"slurm_fsm.jobstate"}
    assert "slurm_fsm.runfacts" in graph["slurm_fsm.results"]
