"""The package's import structure: no import cycle, and no import from a lower layer up.

Every module of ``mianalysis`` is parsed with :mod:`ast`. Its imports (at module level and
inside functions alike, since a deferred import is still an arrow; imports under
``if TYPE_CHECKING:`` are type hints only and do not count) become arrows between modules.
``from pkg import name`` is an arrow to the submodule that defines `name` when the package
only re-exports it, so a module importing a sibling's public name through its folder's
``__init__`` is not a cycle, while a module importing something the ``__init__`` itself
defines is an arrow to the package.

Layers follow the data flow of docs (tasks -> sampler -> dump -> analysis -> plots), lowest
first; a module may import its own layer (without a cycle) and the layers below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mianalysis

PACKAGE = Path(mianalysis.__file__).parent

# Lowest first. A module's layer is that of the longest prefix listed here.
LAYERS = (
    # shared internals and provenance records: argument checks, seeding, locks, threads
    ("mianalysis._validation", "mianalysis._seeding", "mianalysis._io", "mianalysis._threads",
     "mianalysis._scaling", "mianalysis._locking", "mianalysis.provenance", "mianalysis._version",
     "mianalysis._memory", "mianalysis._normal_interval"),
    # numerical cores and storage: estimators, distances, embedded data, the dump format
    ("mianalysis.estimators", "mianalysis.distances", "mianalysis.datasets", "mianalysis.dumps"),
    # what produces parameters: the sampler's tasks, the FL simulator, the Dask seam
    ("mianalysis.tasks", "mianalysis.federated", "mianalysis.scaleout", "mianalysis._dask_worker"),
    # the sampler, which runs tasks into dumps
    ("mianalysis.sampling",),
    # dump -> tables
    ("mianalysis.analysis", "mianalysis.headroom"),
    # tables -> figures and findings; integrations
    ("mianalysis.plots", "mianalysis.experiment", "mianalysis.demo", "mianalysis.report", "mianalysis.flower"),
    # entry points
    ("mianalysis.cli", "mianalysis.__main__", "mianalysis"),
)


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, p in MODULES.items() if p.name == "__init__.py"}


def parse(name):
    return ast.parse(MODULES[name].read_text(encoding="utf-8"), filename=str(MODULES[name]))


def type_checking_nodes(tree):
    """Ids of every node under ``if TYPE_CHECKING:``."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
                    (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                for child in node.body:
                    ids.update(id(n) for n in ast.walk(child))
    return ids


def imports_of(name):
    """(source module, imported name or None, line) for each mianalysis import of `name`."""
    tree = parse(name)
    skip = type_checking_nodes(tree)
    package = name if name in PACKAGES else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "mianalysis"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] == "mianalysis":
                found += [(source, a.name, node.lineno) for a in node.names]
    return found


def reexports(package):
    """name -> submodule for each name that `package`'s ``__init__`` imports from a submodule."""
    out = {}
    for source, imported, _ in imports_of(package):
        if imported is not None and source.startswith(package + "."):
            out[imported] = source
    return out


def arrows():
    """module -> {imported module: first line}."""
    found = {}
    for name in MODULES:
        targets = {}
        for source, imported, line in imports_of(name):
            if imported is not None and f"{source}.{imported}" in MODULES:
                target = f"{source}.{imported}"            # from pkg import submodule
            elif imported is not None and source in PACKAGES and imported in reexports(source) \
                    and source != name:
                target = reexports(source)[imported]      # a name the package re-exports
            else:
                target = source
            if target in MODULES and target != name:
                targets.setdefault(target, line)
        found[name] = targets
    return found


def layer(name):
    best = None
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (level, prefix)
    return None if best is None else best[0]


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer_of_its_own():
    # The package's own layer (the last) is for its __init__, the command line and __main__:
    # a new module must be placed in LAYERS, not fall into it by the "mianalysis" prefix.
    top = {"mianalysis", "mianalysis.cli", "mianalysis.__main__"}
    assert [name for name in MODULES if layer(name) is None or (layer(name) == len(LAYERS) - 1 and name not in top)] == []


def test_the_package_has_no_import_cycle():
    graph = arrows()
    found = cycles(graph)
    detail = ["  " + " <-> ".join(c) + ": " + "; ".join(f"{a} -> {b} (line {graph[a][b]})"
                                                      for a in c for b in graph[a] if b in c) for c in found]
    assert found == [], "import cycles:\n" + "\n".join(detail)


def test_no_import_points_up_the_layers():
    up = [f"{MODULES[a].relative_to(PACKAGE.parent)}:{line}: {a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
          for a, targets in arrows().items() for b, line in targets.items()
          if b not in PACKAGES or not a.startswith(b + ".")
          if layer(b) > layer(a)]
    assert up == []


@pytest.mark.parametrize("source, expect_cycle", [
    ("from .b import f\n", True),
    ("def g():\n    from .b import f\n", True),           # a deferred import is still an arrow
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import f\n", False),
])
def test_the_cycle_finder_sees_deferred_imports_and_ignores_type_hints(source, expect_cycle):
    # The same parsing, on a hand-made two-module graph: b imports a; a imports b as `source` says.
    tree = ast.parse(source)
    skip = type_checking_nodes(tree)
    a_imports_b = any(isinstance(n, ast.ImportFrom) and n.module == "b" for n in ast.walk(tree) if id(n) not in skip)
    graph = {"a": {"b"} if a_imports_b else set(), "b": {"a"}}
    assert bool(cycles(graph)) is expect_cycle


def test_layers_catch_an_arrow_up():
    # The sampler (layer 3) imported by a task (layer 2) is an arrow up; the reverse is not.
    assert layer("mianalysis.sampling") > layer("mianalysis.tasks.gaussian_sgd")
    assert layer("mianalysis.cli") == len(LAYERS) - 1
