"""Step 0 is one package, ``slurm_fsm/step0/`` (issue 40 item 1).

The table lives in :mod:`slurm_fsm.step0.table`; ``slurm_fsm.edges`` is its public
name kept as a re-export that defines nothing, and the machine no longer re-exports
the table's names.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import attrs
import pytest

import slurm_fsm.edges as public_edges
import slurm_fsm.machine as machine
import slurm_fsm.step0.table as table
from slurm_fsm.machine import AllocationMachine
from slurm_fsm.step0.context import POLICY_FIELDS, MachinePolicy
from slurm_fsm.step0.outcome import Step0Outcome
from slurm_fsm.step0.table import State
from slurm_fsm.testing import FakeCluster, make_spec


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


# ---------------------------------------------------------------- the outcome
#: what a caller may use of the machine it steps: the driver's triggers and its
#: outcome, the configuration it was given; never what step 0 found (its fields)
DRIVER_API = frozenset({
    "prepare", "outcome", "note", "run", "finish", "start_gpu_check", "locked",
    "info_now", "estimate", "spec", "pending_wait_s",
})
#: the modules that step a machine of their own
STEPPERS = ("persistent.py", "warmer.py", "plan.py", "allocation.py")


def _machine_reads(source: str) -> list[str]:
    """``x.attr`` where ``x`` is a machine: ``m``, ``self.machine`` (``_step0(m)``,
    ``admission_text(m)``...), or a name bound by ``AllocationMachine(...)``."""
    tree = ast.parse(source)
    names = {"m"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", "") == "AllocationMachine":
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        target = node.value
        is_machine = (isinstance(target, ast.Name) and target.id in names) or (
            isinstance(target, ast.Attribute) and target.attr == "machine")
        if is_machine and node.attr not in DRIVER_API:
            out.append(f"{node.lineno}: .{node.attr}")
    return out


def test_the_steppers_read_the_outcome_not_the_machines_fields() -> None:
    """Issue 40 item 1: the persistent path read or wrote the machine's attributes 39
    times; it, the warmer and the plan now read :class:`Step0Outcome`."""
    root = Path(machine.__file__).parent
    found = {name: _machine_reads((root / name).read_text()) for name in STEPPERS}
    assert found == {name: [] for name in STEPPERS}


def test_the_guard_sees_a_field_read() -> None:
    assert _machine_reads("m.alloc.job_id\nself.machine.notes.append(x)\n") == [
        "1: .alloc", "2: .notes"]
    assert _machine_reads("w = AllocationMachine(s, b)\nw.failure\nw.prepare()\n") == [
        "2: .failure"]


def test_prepare_returns_a_frozen_outcome_a_snapshot(tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    m = AllocationMachine(spec, fake, clock=fake.clock)
    done = m.prepare()
    assert isinstance(done, Step0Outcome)
    assert done.state is State.Ready and done.ready and done.alloc == m.alloc
    assert done.path == tuple(m.path) and done.path[-1] == "Ready"
    assert done.notes == tuple(m.notes) and done.warnings == tuple(m.warnings)
    assert done.failure is None and done.salloc_requested
    assert done.summary == m.history[-1].reason
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        done.state = State.Failed  # type: ignore[misc]
    m.note("after step 0")
    assert m.run()
    assert done.state is State.Ready and "after step 0" not in done.notes
    now = m.outcome()
    assert now.state is State.Running and now.notes[-1] == "after step 0"


def test_prepare_until_stops_early_and_within_limits_the_states(tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    seen: list[str] = []

    def stop(o: Step0Outcome) -> bool:
        seen.append(o.state.value)
        return o.state is State.Allocating

    done = AllocationMachine(spec, fake, clock=fake.clock).prepare(until=stop)
    assert done.state is State.Allocating and seen == ["Allocating"]
    assert fake.ops().count("allocate") == 0
    only = AllocationMachine(spec, fake, clock=fake.clock).prepare(
        within=frozenset({State.Validating}))
    assert only.state is State.Allocating  # not an in-progress state of ``within``


# ---------------------------------------------------------------- the context
def test_the_tuning_options_are_one_policy_record(tmp_path: Path) -> None:
    """The machine's six tuning keywords are :class:`MachinePolicy`'s fields, with the
    same defaults; the machine reads them from its context's policy."""
    params = inspect.signature(AllocationMachine).parameters
    for name in POLICY_FIELDS:
        default = attrs.fields_dict(MachinePolicy)[name].default
        assert params[name].default == default, name
    fake = FakeCluster()
    m = AllocationMachine(make_spec(tmp_path), fake, clock=fake.clock, pending_wait_s=5.0,
                          orphan_grace_s=1.0)
    assert m.ctx.policy == MachinePolicy(pending_wait_s=5.0, orphan_grace_s=1.0)
    assert m.pending_wait_s == 5.0
    m.orphan_grace_s = 0.0  # a notebook's (and the parity test's) tuning: a new policy
    assert m.ctx.policy.orphan_grace_s == 0.0 and m.ctx.policy.pending_wait_s == 5.0


def test_the_machine_reads_its_configuration_from_its_context(tmp_path: Path) -> None:
    fake = FakeCluster()
    spec = make_spec(tmp_path)
    m = AllocationMachine(spec, fake, clock=fake.clock)
    ctx = m.ctx
    assert (m.spec, m.backend, m.clock, m.store, m.salloc_log) == (
        ctx.spec, ctx.backend, ctx.clock, ctx.store, ctx.salloc_log)
    assert ctx.store.path == spec.state_path and ctx.leases is None and ctx.warmer is None
    source = inspect.getsource(AllocationMachine)
    for name in ("spec", "backend", "clock", "store", "leases", "run_history", "warmer",
                 "salloc_log", *POLICY_FIELDS):
        assert f"self.{name} = " not in source, name
    gate = object()
    m.leases = gate  # type: ignore[assignment]  # the parity test hands its world's gate
    assert ctx.leases is gate


# ---------------------------------------------------------------- the worker rooms
def test_the_release_room_works_on_a_context_not_a_machine(tmp_path: Path) -> None:
    """0A as a function of the context (issue 40: each state's work testable as
    ``work(ctx_on_fake)``): the state file's allocation cancelled, its files dropped."""
    from slurm_fsm.step0 import release

    fake = FakeCluster()
    spec = make_spec(tmp_path)
    first = AllocationMachine(spec, fake, clock=fake.clock)
    assert first.prepare().state is State.Ready and first.alloc is not None
    ctx = AllocationMachine(spec, fake, clock=fake.clock).ctx
    warned: list[str] = []
    done = release.release(ctx, first.alloc, user=fake.current_user, warn=warned.append)
    assert done == release.Released(summary=f"Allocation {first.alloc.job_id} released.",
                                    job_id=first.alloc.job_id, from_state_file=True)
    assert not fake.jobs[first.alloc.job_id].active and not spec.state_path.exists()
    again = release.release(ctx, None, user=fake.current_user, warn=warned.append)
    assert again.job_id is None and again.summary == "no allocation to release"
    assert warned == []
    assert "machine" not in inspect.signature(release.release).parameters


def test_the_setup_room_is_the_one_place_a_container_is_imported() -> None:
    """``fresh=True`` (pyxis: import anew, never reuse a container of that name) is
    asked in one function, :func:`slurm_fsm.step0.setup.import_fresh`, the place to
    extend the import (an image cache)."""
    root = Path(machine.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.keyword) and node.arg == "fresh" and isinstance(
                        node.value, ast.Constant) and node.value.value is True:
                    found.append(f"{path.relative_to(root)}:{fn.name}")
    assert found == ["step0/setup.py:import_fresh"]


# ---------------------------------------------------------------- the effects
#: what cancels an allocation or deletes a state file (or salloc's log, the successor
#: record): step 0 does them only in slurm_fsm/step0/effects.py
DESTRUCTIVE = frozenset({"cancel", "cancel_allocation", "delete", "delete_if_names",
                         "unlink", "clear_successor"})
#: step 0's modules: the driver, the hand-off work and every room of the wing
STEP0_MODULES = ("machine.py", "handoff.py", "step0/*.py")


def _destructive_calls(source: str) -> list[str]:
    """``f(...)`` or ``x.f(...)`` for ``f`` in :data:`DESTRUCTIVE`, by function."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            name = (node.func.attr if isinstance(node.func, ast.Attribute)
                    else getattr(node.func, "id", ""))
            if name in DESTRUCTIVE:
                out.append(f"{fn.name}: {name}")
    return out


def test_step0_cancels_and_deletes_only_in_its_effects_room() -> None:
    """Issue 40 item 1: ``effects.py``, the only place step 0 cancels an allocation or
    deletes a state file; the driver and every other room ask it."""
    root = Path(machine.__file__).parent
    found = {}
    for pattern in STEP0_MODULES:
        for path in sorted(root.glob(pattern)):
            if path.name != "effects.py" and (calls := _destructive_calls(path.read_text())):
                found[str(path.relative_to(root))] = calls
    assert found == {}
    assert _destructive_calls((root / "step0" / "effects.py").read_text())


def test_the_effects_guard_sees_a_cancel_and_a_delete() -> None:
    assert _destructive_calls("def f(m):\n    m.backend.cancel(j)\n    m.store.delete()\n"
                              "    cancel_allocation(g, b, j, 'x')\n") == [
        "f: cancel", "f: delete", "f: cancel_allocation"]


# ---------------------------------------------------------------- the hand-off rooms
def _machine_shaped(source: str) -> list[str]:
    """A ``Machine`` protocol, a parameter annotated with it, or a reach for the
    machine's privates (``._log``, ``._warn``, ``._setup_key``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Machine":
            out.append(f"{node.lineno}: class Machine")
        elif isinstance(node, ast.arg) and "Machine" in ast.unparse(node.annotation or
                                                                     ast.Constant("")):
            out.append(f"{node.lineno}: {node.arg}: Machine")
        elif isinstance(node, ast.Attribute) and node.attr in ("_log", "_warn",
                                                               "_setup_key"):
            out.append(f"{node.lineno}: .{node.attr}")
    return out


@pytest.mark.parametrize("name", ["handoff.py", "imagecache.py"])
def test_the_hand_off_and_cache_work_take_the_context_not_the_machine(name: str) -> None:
    """Issue 40 item 1: handoff.py and imagecache.py each described the machine by a
    protocol of their own (with its private ``_log``/``_warn``); they take the
    :class:`Step0Context` and the driver's :class:`Step0Memory` instead."""
    root = Path(machine.__file__).parent
    assert _machine_shaped((root / name).read_text()) == []


def test_the_machine_shape_guard_sees_a_protocol_and_a_private() -> None:
    assert _machine_shaped("class Machine(Protocol): ...\ndef f(m: Machine) -> None:\n"
                           "    m._warn('x')\n") == [
        "1: class Machine", "2: m: Machine", "3: ._warn"]


# ---------------------------------------------------------------- the thin driver
#: what the driver (machine.py) may import outside ``TYPE_CHECKING``: the standard
#: library's plain tools, ``attrs`` and ``transitions``, the wing's own modules, and the
#: error, state and spec types; never a Slurm tool (``slurmcli``, ``nvsmi``,
#: ``preflight``, ``capacity``, ``subprocess``...) nor the hand-off or the run history
DRIVER_IMPORTS = frozenset({
    "__future__", "contextlib", "logging", "collections.abc", "datetime", "functools",
    "typing", "attrs", "transitions", "slurm_fsm.errors", "slurm_fsm.state",
    "slurm_fsm.spec",
})
#: the driver's size (issue 40, done when)
DRIVER_MAX_LINES = 500


def _driver_imports(source: str) -> list[str]:
    """Every module ``source`` imports, at any depth, but under ``if TYPE_CHECKING``."""
    tree = ast.parse(source)
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.extend(f"{node.module}.{a.name}" if node.module in ("slurm_fsm",
                       "slurm_fsm.step0") else node.module for a in node.names)
    return out


def test_the_driver_is_thin_and_imports_no_slurm_tool() -> None:
    """Issue 40, done when: the driver is at most 500 lines and imports no Slurm tool;
    the work of each state is in a room of ``slurm_fsm/step0/``."""
    source = Path(machine.__file__).read_text()
    assert len(source.splitlines()) <= DRIVER_MAX_LINES
    stray = [m for m in _driver_imports(source)
             if m not in DRIVER_IMPORTS and not m.startswith("slurm_fsm.step0.")]
    assert stray == []


def test_the_driver_guard_sees_a_tool_and_not_a_type() -> None:
    assert _driver_imports("from slurm_fsm import handoff\nimport subprocess\n"
                           "def f():\n    from slurm_fsm.nvsmi import x\n"
                           "if TYPE_CHECKING:\n    from slurm_fsm.history import E\n") == [
        "slurm_fsm.handoff", "subprocess", "slurm_fsm.nvsmi"]


def test_importing_the_driver_loads_no_hand_off_nor_history() -> None:
    """Issue 42: ``slurm_fsm.handoff`` is the warm successor's; a run without one never
    loads it (the driver and the rooms import it where a successor is worked on). The
    run history is loaded by the code that reads or records it, not by the import."""
    import subprocess
    import sys

    code = ("import sys, slurm_fsm.machine\n"
            "print(sorted({'slurm_fsm.handoff', 'slurm_fsm.history'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == "[]"


def test_what_was_a_plain_attribute_of_the_machine_stays_settable(tmp_path: Path) -> None:
    """Review of the thin driver: ``released_job_id``, ``container_setup`` and
    ``cache_write_s`` were plain attributes of the machine (a notebook or a test could
    set them); as views of the memory they raised AttributeError. What was read-only
    (``notes``, ``spec``) stays so."""
    fake = FakeCluster()
    m = AllocationMachine(make_spec(tmp_path), fake, clock=fake.clock)
    m.released_job_id, m.container_setup, m.cache_write_s = "7", machine.SETUP_COLD, 1.5
    assert (m.mem.released_job_id, m.mem.container_setup, m.mem.cache_write_s) == (
        "7", machine.SETUP_COLD, 1.5)
    with pytest.raises(AttributeError):
        m.notes = []  # type: ignore[misc]
