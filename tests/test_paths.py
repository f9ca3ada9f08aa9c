"""One record names every file beside the state file (:mod:`slurm_fsm.paths`).

The names are written here literally: they are what is on users' disks, so a change of
the record that renames a file fails here, not in a user's checkout (a file an older
version wrote must still be found). And no module but ``paths.py`` builds one of these
names: the package's syntax tree is searched for them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from slurm_fsm.paths import StatePaths

PACKAGE = Path(__file__).resolve().parents[1] / "slurm_fsm"
RID = "r0123456789ab"

#: state file -> (lock, salloc log, successor's salloc log, history, successor state,
#: successor record, drained state, run record, run report): today's names on disk.
NAMES = {
    ".slurm_alloc.json": (
        ".slurm_alloc.json.lock", ".salloc.log", ".salloc.log.successor",
        ".slurm_fsm_history.jsonl", ".slurm_alloc.successor.json",
        ".slurm_fsm_successor.json", ".slurm_alloc.drained.json",
        f".slurm_run.{RID}.json", f".slurm_run.{RID}.report.json"),
    ".slurm_alloc.fake.json": (
        ".slurm_alloc.fake.json.lock", ".salloc.fake.log", ".salloc.fake.log.successor",
        ".slurm_fsm_history.fake.jsonl", ".slurm_alloc.fake.successor.json",
        ".slurm_fsm_successor.fake.json", ".slurm_alloc.fake.drained.json",
        f".slurm_run.fake.{RID}.json", f".slurm_run.fake.{RID}.report.json"),
    "state.json": (
        "state.json.lock", "state.json.salloc.log", "state.json.salloc.log.successor",
        "state.json.history.jsonl", "state.successor.json", "state.json.successor.json",
        "state.drained.json", f"state.json.run.{RID}.json",
        f"state.json.run.{RID}.report.json"),
    # the salloc log and the run records match ".slurm_alloc" anywhere in the name;
    # the history and the successor record only as its prefix (both kept as they were)
    "my.slurm_alloc.json": (
        "my.slurm_alloc.json.lock", "my.salloc.log", "my.salloc.log.successor",
        "my.slurm_alloc.json.history.jsonl", "my.slurm_alloc.successor.json",
        "my.slurm_alloc.json.successor.json", "my.slurm_alloc.drained.json",
        f"my.slurm_run.{RID}.json", f"my.slurm_run.{RID}.report.json"),
}


@pytest.mark.parametrize("state", sorted(NAMES))
def test_every_file_keeps_its_name_on_disk(tmp_path: Path, state: str) -> None:
    p = StatePaths.for_state_file(tmp_path / state)
    got = (p.lock, p.salloc_log, p.successor_salloc_log, p.history, p.successor_state,
           p.successor_record, p.drained_state, p.run_record(RID), p.run_report(RID))
    assert tuple(x.name for x in got) == NAMES[state]
    assert all(x.parent == tmp_path for x in got) and p.folder == tmp_path
    assert p.state == tmp_path / state
    assert p.warmer_log == tmp_path / ".slurm_fsm_warmer.log"


def test_a_checkouts_state_file_and_the_fakes(tmp_path: Path) -> None:
    assert StatePaths.for_repo(tmp_path).state == tmp_path / "work_dirs" / ".slurm_alloc.json"
    assert StatePaths.for_repo(tmp_path, fake=True).state == \
        tmp_path / "work_dirs" / ".slurm_alloc.fake.json"
    assert StatePaths.for_repo(str(tmp_path)) == StatePaths.for_state_file(
        str(tmp_path / "work_dirs" / ".slurm_alloc.json"))


def test_the_record_is_frozen_and_moves_with_its_names(tmp_path: Path) -> None:
    p = StatePaths.for_repo(tmp_path)
    with pytest.raises(AttributeError, match="frozen"):  # attrs.FrozenInstanceError is one
        p.state = tmp_path  # type: ignore[misc]
    moved = p.moved_to(tmp_path / "scratch")
    assert moved.state == tmp_path / "scratch" / ".slurm_alloc.json"
    assert moved.history == tmp_path / "scratch" / ".slurm_fsm_history.jsonl"


def test_a_run_file_needs_a_run_id_not_a_path(tmp_path: Path) -> None:
    p = StatePaths.for_repo(tmp_path)
    for bad in ("../x", "r0123", "R0123456789AB", f"{RID}/x", ""):
        with pytest.raises(ValueError, match="run id"):
            p.run_record(bad)
        with pytest.raises(ValueError, match="run id"):
            p.run_report(bad)


def test_run_ids_are_read_back_from_record_names_only(tmp_path: Path) -> None:
    real, fake = StatePaths.for_repo(tmp_path), StatePaths.for_repo(tmp_path, fake=True)
    assert real.run_id_of(f".slurm_run.{RID}.json") == RID
    assert fake.run_id_of(f".slurm_run.fake.{RID}.json") == RID
    assert real.run_id_of(f".slurm_run.fake.{RID}.json") is None  # the fake's, not ours
    assert fake.run_id_of(f".slurm_run.{RID}.json") is None
    for name in (f".slurm_run.{RID}.report.json", ".slurm_run.r0123.json",
                 f".slurm_run.{RID}.json.tmp", f"x.slurm_run.{RID}.json", ".slurm_run.json"):
        assert real.run_id_of(name) is None, name
    assert real.run_id_of(real.run_record(RID).name) == RID


# ------------------------------------------------------------------ nobody else names them

#: What a sibling's name is made of; a string with a blank is a sentence for a person
#: (advice naming ``.salloc.log``), not a name being built.
SIBLING = re.compile(r"\.slurm_alloc|\.salloc|\.slurm_run|slurm_fsm_(history|successor|warmer)"
                     r"|\.successor|\.drained|\.history\b|history\.jsonl|\.report\.json"
                     r"|^\.lock$|\.json\.lock")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            out.add(id(node.body[0].value))
    return out


def names_built(path: Path) -> list[str]:
    """The string constants of ``path`` (not docstrings, not sentences) that hold part
    of a sibling's name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return sorted(f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docs and not re.search(r"\s", node.value)
                  and SIBLING.search(node.value))


def test_no_module_but_paths_names_a_file_beside_the_state_file() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "paths.py"
             for hit in names_built(path)]
    assert found == []
    assert names_built(PACKAGE / "paths.py")  # the search does see names


def test_the_search_finds_a_name_built_by_hand(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('"""Docs may say .slurm_alloc.json."""\n'
                   'def f(p, n):\n'
                   '    """So may .slurm_run.x.json here."""\n'
                   '    print("see .salloc.log for why")\n'
                   '    return p.with_name(f"{n}.history.jsonl"), p.name + ".lock"\n')
    assert names_built(src) == ["m.py:5: '.history.jsonl'", "m.py:5: '.lock'"]


def test_a_runs_owner_record_and_progress_file(tmp_path: Path) -> None:
    """The files of a run that outlives its client (issue 39), named literally."""
    real, fake = StatePaths.for_repo(tmp_path), StatePaths.for_repo(tmp_path, fake=True)
    assert real.run_owner(RID).name == f".slurm_run.{RID}.owner.json"
    assert real.run_progress(RID).name == f".slurm_run.{RID}.out"
    assert fake.run_owner(RID).name == f".slurm_run.fake.{RID}.owner.json"
    assert real.run_owner_id_of(f".slurm_run.{RID}.owner.json") == RID
    for other in (f".slurm_run.fake.{RID}.owner.json", f".slurm_run.{RID}.json",
                  f".slurm_run.{RID}.report.json", f"x.slurm_run.{RID}.owner.json",
                  ".slurm_run.r0123.owner.json"):
        assert real.run_owner_id_of(other) is None, other
    assert fake.run_owner_id_of(f".slurm_run.fake.{RID}.owner.json") == RID
    with pytest.raises(ValueError, match="run id"):
        real.run_owner("../x")
