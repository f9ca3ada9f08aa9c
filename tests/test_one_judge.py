"""A status is chosen in one function and a report is built in one room: the package's
syntax tree has no ``Status.<MEMBER>`` and no ``Report(...)`` call outside
``slurm_fsm/results.py`` (the judge) and ``slurm_fsm/report.py`` (the record and its
vocabulary: ``Status`` and ``EXIT_CODES``). The face of a run stays a page, and no
function grows past a screen."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slurm_fsm"
JUDGE = {"results.py", "report.py"}

#: Functions over 60 lines, each with why it stays: tables in the edges' style (one row
#: per case, read top to bottom).
LONG_FUNCTIONS = {
    "results.py:diagnose": "a table: one row of the diagnosis per case (docs/report.md)",
}
MAX_LINES = 60


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _where(path: Path, node: ast.AST) -> str:
    name = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name
    return f"{name}:{getattr(node, 'lineno', 0)}"


def judged_outside(paths: list[Path]) -> list[str]:
    """``Status.X`` members and ``Report(...)`` calls outside the judge's rooms."""
    found: list[str] = []
    for path in paths:
        if path.name in JUDGE and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "Status" and node.attr.isupper()):
                found.append(f"{_where(path, node)} Status.{node.attr}")
            elif isinstance(node, ast.Call) and (
                    (isinstance(node.func, ast.Name) and node.func.id == "Report")
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "Report")):
                found.append(f"{_where(path, node)} Report(...)")
    return found


def long_functions(paths: list[Path]) -> dict[str, int]:
    out: dict[str, int] = {}

    def walk(node: ast.AST, path: Path, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > MAX_LINES:
                    out[f"{path.relative_to(PACKAGE)}:{prefix}{child.name}"] = length
                walk(child, path, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, f"{prefix}{child.name}.")
            else:
                walk(child, path, prefix)

    for path in paths:
        walk(ast.parse(path.read_text(encoding="utf-8")), path, "")
    return out


def test_a_status_is_chosen_and_a_report_built_only_by_the_judge() -> None:
    assert judged_outside(_sources()) == []


def test_the_guard_finds_a_status_picked_elsewhere(tmp_path: Path) -> None:
    bad = tmp_path / "elsewhere.py"
    bad.write_text("from slurm_fsm.report import Report, Status\n"
                   "def f():\n    return Report(status=Status.ERROR, task_type='x', mode='y')\n")
    assert [w.split(" ", 1)[1] for w in judged_outside([bad])] == ["Report(...)",
                                                                   "Status.ERROR"]


def test_the_executor_is_a_page() -> None:
    assert len((PACKAGE / "executor.py").read_text().splitlines()) < 250


def test_no_function_is_over_a_screen() -> None:
    long = long_functions(_sources())
    assert {name: n for name, n in long.items() if name not in LONG_FUNCTIONS} == {}
    assert set(LONG_FUNCTIONS) <= set(long), "a listed function got short: drop it here"
