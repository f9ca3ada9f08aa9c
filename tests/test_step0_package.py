"""Step 0 is one package, ``slurm_fsm/step0/`` (issue 40 item 1).

The table lives in :mod:`slurm_fsm.step0.table`; ``slurm_fsm.edges`` is its public
name kept as a re-export that defines nothing, and the machine no longer re-exports
the table's names.
"""

from __future__ import annotations

import ast
import inspect

import slurm_fsm.edges as public_edges
import slurm_fsm.machine as machine
import slurm_fsm.step0.table as table


def test_the_table_lives_in_the_step0_package() -> None:
    assert table.EDGES[0].__class__.__module__ == "slurm_fsm.step0.table"
    assert table.State.__module__ == "slurm_fsm.step0.table"


def test_slurm_fsm_edges_is_only_a_re_export_of_the_table() -> None:
    assert public_edges.__all__ == table.__all__
    for name in table.__all__:
        assert getattr(public_edges, name) is getattr(table, name), name
    tree = ast.parse(inspect.getsource(public_edges))
    defined = [node for node in tree.body
               if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AnnAssign)
               or (isinstance(node, ast.Assign)
                   and [getattr(t, "id", "") for t in node.targets] != ["__all__"])]
    assert defined == []


def test_the_machine_does_not_re_export_the_table() -> None:
    assert set(machine.__all__) & set(table.__all__) == set()
