"""One error tree (issue 40, item 5): every exception class slurm_fsm defines for others
to catch lives in ``slurm_fsm.errors`` and is drawn in its docstring under its real
parent. Before, five lived elsewhere (``NvidiaSmiFailed``, ``ContainerShared``,
``NoSlurmConfig``, ``PreflightFailed``, ``AllocationInUse``) and ``AllocationVanished``
was not drawn."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import slurm_fsm
from slurm_fsm import errors

#: defined where they are for a reason the tree gives: the scancel shim runs as a file
#: of its own, importing nothing of slurm_fsm
ELSEWHERE = {"slurm_fsm.scancelshim.Refused"}


def _public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(slurm_fsm.__path__, "slurm_fsm."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__ == info.name and not name.startswith("_")):
                found[f"{info.name}.{name}"] = obj
    return found


def _drawn() -> dict[str, str | None]:
    """Each class the docstring draws, with the class drawn above it (None: a root)."""
    doc = errors.__doc__ or ""
    tree = doc[doc.index("::") + 2:]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        m = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Za-z_.]+)\b", line)
        if not m or not line.strip() or (m.group(2)[0].islower() and "." not in m.group(2)):
            continue
        name = m.group(2)
        depth = line.index(name)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((depth, name))
    return parents


def test_every_public_exception_lives_in_errors() -> None:
    outside = sorted(path for path, cls in _public_exceptions().items()
                     if cls.__module__ != "slurm_fsm.errors" and path not in ELSEWHERE)
    assert outside == []


def test_every_exception_of_errors_is_drawn_under_its_real_parent() -> None:
    drawn = _drawn()
    for path, cls in _public_exceptions().items():
        name = cls.__name__ if cls.__module__ == "slurm_fsm.errors" else \
            path.removeprefix("slurm_fsm.")
        assert name in drawn, f"{path} is not drawn in slurm_fsm.errors' tree"
        base = cls.__bases__[0]
        want = None if base.__module__ == "builtins" else base.__name__
        assert drawn[name] == want, f"{name} is drawn under {drawn[name]}, is a {want}"


def test_the_old_homes_still_give_the_moved_names() -> None:
    from slurm_fsm.handoff import ContainerShared
    from slurm_fsm.lease import AllocationInUse
    from slurm_fsm.nvsmi import NvidiaSmiFailed
    from slurm_fsm.preflight import NoSlurmConfig, PreflightFailed

    assert (ContainerShared, NvidiaSmiFailed, NoSlurmConfig, PreflightFailed,
            AllocationInUse) == (errors.ContainerShared, errors.NvidiaSmiFailed,
                                 errors.NoSlurmConfig, errors.PreflightFailed,
                                 errors.AllocationInUse)



DOCS_PAGE = Path(__file__).parent.parent / "docs" / "api" / "errors.md"


def _tree_block(text: str) -> str:
    """The drawn tree: the lines from ``SlurmFsmError`` to the last drawn class, each
    without its indent (the docstring indents it by 4, the page's fence by none)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "SlurmFsmError")
    indent = len(lines[start]) - len(lines[start].lstrip())
    out = []
    for line in lines[start:]:
        if line.strip() in ("```", '"""'):
            break
        out.append(line[indent:].rstrip())
    return "\n".join(out).strip()


def test_the_errors_page_draws_the_same_tree_and_documents_every_class() -> None:
    """The docs' errors page draws the tree of ``slurm_fsm.errors`` as it is, and has
    an entry for every exception class there (``UnknownRun`` had none)."""
    page = DOCS_PAGE.read_text()
    assert _tree_block(page) == _tree_block(errors.__doc__ or "")
    documented = set(re.findall(r"^::: slurm_fsm\.errors\.(\w+)$", page, re.M))
    classes = {name for name in errors.__all__
               if inspect.isclass(getattr(errors, name))
               and issubclass(getattr(errors, name), BaseException)}
    assert classes - documented == set()
