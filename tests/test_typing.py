"""The public API carries type hints (PEP 484) that resolve, and the package says so (PEP 561)."""

import inspect
import types
import typing
from pathlib import Path

import pytest

import mianalysis


def public_callables():
    """Every function exported by ``mianalysis`` and every public method of its exported
    classes (dataclass-generated ``__init__`` included)."""
    found = []
    for name in mianalysis.__all__:
        obj = getattr(mianalysis, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj) and not issubclass(obj, (Exception, Warning)):
            for attr, member in vars(obj).items():
                func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if inspect.isfunction(func) and (not attr.startswith("_") or attr == "__init__"):
                    found.append((f"{name}.{attr}", func))
    return found


def optional_names():
    """Names the modules import only for type checking (optional extras): the modules
    where installed, stand-ins with the same attributes elsewhere."""
    from mianalysis import ParameterDump
    from mianalysis.dumps.writer import DumpWriter
    from mianalysis.tasks.base import Task

    names = {"DumpWriter": DumpWriter, "ParameterDump": ParameterDump, "Task": Task}
    try:
        import distributed

        names["distributed"] = distributed
    except ImportError:
        names["distributed"] = types.SimpleNamespace(Client=object)
    try:
        import dask.array

        names["dask"] = dask
    except ImportError:
        names["dask"] = types.SimpleNamespace(array=types.SimpleNamespace(Array=object))
    try:
        import xarray

        names["xarray"] = xarray
    except ImportError:
        names["xarray"] = types.SimpleNamespace(Dataset=object)
    return names


@pytest.mark.parametrize("name, func", public_callables(), ids=[n for n, _ in public_callables()])
def test_public_api_is_annotated(name, func):
    hints = typing.get_type_hints(func, {**vars(inspect.getmodule(func)), **optional_names()})  # every hint resolves
    params = [p for p in inspect.signature(func).parameters.values()
              if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert [p.name for p in params if p.name not in hints] == []
    assert "return" in hints


def test_package_ships_py_typed():
    assert (Path(mianalysis.__file__).parent / "py.typed").is_file()
    assert 'mianalysis = ["py.typed"]' in (Path(mianalysis.__file__).parents[1] / "pyproject.toml").read_text()
