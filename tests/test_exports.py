"""The package namespace is the public API: ``from slurm_fsm import ...`` for everything."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import slurm_fsm


def _public_names(module: ModuleType) -> set[str]:
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, ModuleType)}


def test_exported_members() -> None:
    for name in slurm_fsm.__all__:  # load every lazy name
        getattr(slurm_fsm, name)
    assert _public_names(slurm_fsm) == set(slurm_fsm.__all__) - {"__version__"}
    assert sorted(slurm_fsm.__all__, key=str.casefold) == sorted(
        set(slurm_fsm.__all__), key=str.casefold)  # no duplicates


#: raised by transitions itself for an illegal trigger; re-exported so callers can catch it
FOREIGN = {"MachineError": "transitions"}


def test_exports_come_from_the_package() -> None:
    for name in slurm_fsm.__all__:
        value = getattr(slurm_fsm, name)
        module = getattr(value, "__module__", None)
        if module is not None and not isinstance(value, (str, tuple, list)):
            assert module.startswith(FOREIGN.get(name, "slurm_fsm")), (name, module)


def test_dir_lists_every_export() -> None:
    assert set(slurm_fsm.__all__) <= set(dir(slurm_fsm))


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        slurm_fsm.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    assert slurm_fsm.__version__ == version("slurm_fsm")


def test_import_is_lean() -> None:
    """``import slurm_fsm`` loads none of the heavy modules: they load on first use."""
    code = ("import sys, slurm_fsm; "
            "print(sorted(m for m in ('transitions', 'cattrs', 'slurm_fsm.machine', "
            "'slurm_fsm.executor', 'importlib.metadata') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"


def _modules() -> list[str]:
    import pkgutil

    return sorted(m.name for m in pkgutil.walk_packages(slurm_fsm.__path__, "slurm_fsm.")
                  if not m.name.endswith("__main__"))


def test_every_module_lists_what_it_defines() -> None:
    """Each module has ``__all__`` and it holds every public class and function the module
    defines (ruff's F822 checks the other direction: that listed names exist)."""
    import importlib
    import inspect

    missing = []
    for name in _modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            missing.append(f"{name}: no __all__")
            continue
        for attr, value in vars(module).items():
            if attr.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            if (getattr(value, "__module__", None) == name and value.__name__ == attr
                    and attr not in exported):  # aliases (S = State) are not definitions
                missing.append(f"{name}.{attr}")
    assert missing == []
