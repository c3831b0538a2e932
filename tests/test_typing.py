"""The public API carries type hints (PEP 484) that resolve, and the package says so (PEP 561).

Public API: what ``mianalysis`` exports, and what every public module (no part of its name
starting with ``_``) exports in its ``__all__`` and defines itself: functions, and the public
methods of classes (``__init__``, class and static methods and property getters included).
"""

import importlib
import importlib.util
import inspect
import pkgutil
import types
import typing
from pathlib import Path

import pytest

import mianalysis

# The optional extras (pyproject.toml): a module that needs one is skipped where it is absent.
OPTIONAL_EXTRAS = ("flwr", "dask", "distributed", "xarray", "zarr", "safetensors")


def class_callables(name, cls):
    """(name.attr, function) of every public method of `cls` defined in its body, with
    ``__init__`` (dataclass-generated included), class and static methods and property getters."""
    found = []
    for attr, member in vars(cls).items():
        func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if isinstance(member, property):
            func = member.fget
        if inspect.isfunction(func) and (not attr.startswith("_") or attr == "__init__"):
            found.append((f"{name}.{attr}", func))
    return found


def exported_callables(module, own_only):
    """(name, function) of the functions `module` exports and the methods of the classes it
    exports (not exceptions or warnings); with `own_only`, only what the module defines."""
    found = []
    for name in module.__all__:
        obj = getattr(module, name)
        if own_only and getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj) and not issubclass(obj, (Exception, Warning)):
            found += class_callables(name, obj)
    return found


def public_callables():
    """Every function exported by ``mianalysis`` and every public method of its exported
    classes (dataclass-generated ``__init__`` included)."""
    return exported_callables(mianalysis, own_only=False)


def public_modules():
    """Names of the modules of the package with no private part (``_x``), the package's own
    ``__init__`` aside (see :func:`public_callables`)."""
    names = []
    for info in pkgutil.walk_packages(mianalysis.__path__, "mianalysis."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def missing_extra(name, exc):
    """Why module `name` cannot be imported when `exc`, raised by importing it, says that an
    optional extra is missing (a module of one, or a message such as "pip install
    'mianalysis[flower]'" where an extra is absent); None for any other import error."""
    root = (exc.name or "").split(".")[0]
    if root in OPTIONAL_EXTRAS:
        return f"{name} needs {root} (an optional extra)"
    absent = [e for e in OPTIONAL_EXTRAS if importlib.util.find_spec(e) is None]
    if exc.name is None and absent and "mianalysis[" in str(exc):
        return str(exc)
    return None


def module_params():
    """pytest params ("module:Class.method", function) over every public module; a module that
    cannot be imported for want of an optional extra gives one skipped param."""
    params = []
    for name in public_modules():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            why = missing_extra(name, exc)
            if why is None:
                raise
            params.append(pytest.param(None, id=name, marks=pytest.mark.skip(reason=why)))
            continue
        for qualname, func in exported_callables(module, own_only=True) if hasattr(module, "__all__") else []:
            params.append(pytest.param(func, id=f"{name}:{qualname}"))
    return params


def optional_names():
    """Names the modules import only for type checking (optional extras, and PyTorch and
    Matplotlib, which the package loads only where used): the modules where installed,
    stand-ins with the same attributes elsewhere."""
    from mianalysis import ParameterDump
    from mianalysis.dumps.writer import DumpWriter
    from mianalysis.federated.simulation import FederatedSimulation
    from mianalysis.tasks.base import Task

    names = {"DumpWriter": DumpWriter, "ParameterDump": ParameterDump, "Task": Task,
             "FederatedSimulation": FederatedSimulation}
    try:
        import distributed
        import distributed.security

        names["distributed"] = distributed
    except ImportError:
        names["distributed"] = types.SimpleNamespace(Client=object, security=types.SimpleNamespace(Security=object))
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
    try:
        import torch

        names["torch"] = torch
    except ImportError:
        names["torch"] = types.SimpleNamespace(
            Tensor=object, Generator=object, nn=types.SimpleNamespace(Module=object, Sequential=object, Linear=object),
            optim=types.SimpleNamespace(Optimizer=object))
    try:
        import matplotlib.axes
        import matplotlib.figure

        names["matplotlib"] = matplotlib
    except ImportError:
        names["matplotlib"] = types.SimpleNamespace(axes=types.SimpleNamespace(Axes=object),
                                                    figure=types.SimpleNamespace(Figure=object))
    return names


def assert_annotated(func):
    hints = typing.get_type_hints(func, {**vars(inspect.getmodule(func)), **optional_names()})  # every hint resolves
    params = [p for p in inspect.signature(func).parameters.values()
              if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert [p.name for p in params if p.name not in hints] == []
    assert "return" in hints


@pytest.mark.parametrize("name, func", public_callables(), ids=[n for n, _ in public_callables()])
def test_public_api_is_annotated(name, func):
    assert_annotated(func)


@pytest.mark.parametrize("func", module_params())
def test_public_modules_are_annotated(func):
    assert_annotated(func)


def test_every_public_module_is_checked():
    """The walk finds the package's folders and modules (a broken walk would check nothing)."""
    names = public_modules()
    assert {"mianalysis.analysis", "mianalysis.tasks", "mianalysis.tasks.base", "mianalysis.dumps.format",
            "mianalysis.federated.simulation", "mianalysis.estimators.ksg"} <= set(names)
    assert not [n for n in names if any(part.startswith("_") for part in n.split("."))]


def test_package_ships_py_typed():
    assert (Path(mianalysis.__file__).parent / "py.typed").is_file()
    assert 'mianalysis = ["py.typed"]' in (Path(mianalysis.__file__).parents[1] / "pyproject.toml").read_text()
