"""One converter configuration (issue 40 item 5): every cattrs hook is registered by
``slurm_fsm.convert.configure_converter``, nowhere else (before: 17 registrations in 3
modules, as import-time side effects), and a converter it configures reads and writes
the documents as the module's one converter does."""

from __future__ import annotations

import ast
from pathlib import Path

from test_spec import MINIMAL

import slurm_fsm
from slurm_fsm.convert import configure_converter, converter, make_converter
from slurm_fsm.report import Report, Status
from slurm_fsm.spec import JobSpec, WorkflowType

PACKAGE = Path(slurm_fsm.__file__).parent


def _registrations() -> list[str]:
    """``file:line function`` of every call of a converter's ``register_*hook*`` method
    (``<module>``: at import time)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where: dict[int, str] = {}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                for node in ast.walk(fn):
                    where.setdefault(id(node), fn.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("register_") and "hook" in node.func.attr):
                name = where.get(id(node), "<module>")
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {name}")
    return found


def test_every_hook_is_registered_by_configure_converter() -> None:
    regs = _registrations()
    assert regs, "the scan finds the registrations"
    outside = sorted({r for r in regs if not r.startswith("convert.py:")
                      or not r.endswith(" configure_converter")})
    assert outside == []


def test_a_new_converter_reads_and_writes_as_the_one_converter() -> None:
    fresh = make_converter()
    report = Report(status=Status.TIMEOUT, task_type="pytest", mode="one-shot",
                    job_id="12", timings={"run_s": 1.25})
    assert fresh.unstructure(report) == converter.unstructure(report)
    assert fresh.structure(converter.unstructure(report), Report) == report
    spec = JobSpec.from_dict({**MINIMAL, "workflow_type": "eval",
                              "container_mounts": "/a:/b:ro"})
    assert spec.workflow_type is WorkflowType.EVAL
    assert fresh.unstructure(spec) == spec.to_dict()
    assert "load_warnings" not in spec.to_dict()
    assert spec.to_dict()["container_mounts"] == "/a:/b:ro"


def test_an_enum_reads_its_value_and_a_status_its_name_in_any_case() -> None:
    import cattrs
    conv = cattrs.Converter(detailed_validation=False)
    configure_converter(conv)
    assert conv.structure(" passed", Status) is Status.PASSED
    assert conv.structure("pytest", WorkflowType) is WorkflowType.PYTEST
    for bad, kind in (("PYTEST", WorkflowType), ("GREAT", Status)):
        try:
            conv.structure(bad, kind)
        except ValueError as exc:
            assert str(exc).startswith("must be one of ")
        else:
            raise AssertionError(f"{bad!r} read as a {kind.__name__}")
