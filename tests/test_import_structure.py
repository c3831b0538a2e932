"""The package's import structure: no import cycle, and no import that reaches a stage the
declaration does not allow.

Every module of ``mianalysis`` is parsed with :mod:`ast`. Its imports (at module level and
inside functions alike, since a deferred import is still an arrow) become arrows between
modules. ``from pkg import name`` is an arrow to the submodule that defines `name` when the
package only re-exports it, so a module importing a sibling's public name through its
folder's ``__init__`` is not a cycle, while a module importing something the ``__init__``
itself defines is an arrow to the package. Imports under ``if TYPE_CHECKING:`` are type
hints only: they make no cycle, but they count for the stages (a type from a higher stage
is still knowledge of it).

The stages and what each may import are declared once, in
:data:`mianalysis._internal.stages.STAGES` (data-flow order).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mianalysis

PACKAGE = Path(mianalysis.__file__).parent

from mianalysis._internal.stages import STAGES, stage_of

# The imports that still reach up, each with the reason and the way out; the test fails
# on any other, and on an entry here that no longer occurs (the list only shrinks). None
# remain: what analysis/ needs of a task it finds from the dump (mianalysis.dumps.knowledge).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


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


def imports_of(name, *, type_hints=False, tree=None):
    """(source module, imported name or None, line) for each mianalysis import of `name`
    (those under ``TYPE_CHECKING`` too where `type_hints`); `tree` parses another source as
    if it were module `name`'s."""
    tree = parse(name) if tree is None else tree
    skip = set() if type_hints else type_checking_nodes(tree)
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


def targets_of(name, *, type_hints=False, tree=None):
    """{imported module: first line} of module `name` (see :func:`imports_of`)."""
    targets = {}
    for source, imported, line in imports_of(name, type_hints=type_hints, tree=tree):
        if imported is not None and f"{source}.{imported}" in MODULES:
            target = f"{source}.{imported}"            # from pkg import submodule
        elif imported is not None and source in PACKAGES and imported in reexports(source) \
                and source != name:
            target = reexports(source)[imported]      # a name the package re-exports
        else:
            target = source
        if target in MODULES and target != name:
            targets.setdefault(target, line)
    return targets


def arrows(*, type_hints=False):
    """module -> {imported module: first line}."""
    return {name: targets_of(name, type_hints=type_hints) for name in MODULES}


def reaches_up(name, targets):
    """The (module, target, line) of `targets` (of module `name`) that lie in a stage that
    `name`'s stage may not import. A package's own ``__init__`` is no arrow up."""
    stage = stage_of(name)
    allowed = {stage, *STAGES[stage][1]} if stage in STAGES else set(STAGES)
    return [(name, target, line) for target, line in targets.items()
            if not (target in PACKAGES and name.startswith(target + "."))
            if stage_of(target) not in allowed]


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


def test_every_module_has_a_stage_of_its_own():
    # The entry stage is for the package's __init__, the command line and __main__: a new
    # module must be placed in STAGES, not fall into a stage by accident.
    assert [name for name in MODULES if stage_of(name) is None] == []
    assert {name for name in MODULES if stage_of(name) == "entry"} <= {"mianalysis", "mianalysis.cli",
                                                                       "mianalysis.__main__"}


def test_the_stages_are_declared_in_order():
    # Each stage imports only stages declared before it: the declaration itself has no cycle.
    names = list(STAGES)
    assert [(s, t) for s, (_, below) in STAGES.items() for t in below if names.index(t) >= names.index(s)] == []


def test_the_package_has_no_import_cycle():
    graph = arrows()
    found = cycles(graph)
    detail = ["  " + " <-> ".join(c) + ": " + "; ".join(f"{a} -> {b} (line {graph[a][b]})"
                                                      for a in c for b in graph[a] if b in c) for c in found]
    assert found == [], "import cycles:\n" + "\n".join(detail)


def test_no_import_reaches_a_stage_it_may_not():
    found = [hit for name, targets in arrows(type_hints=True).items() for hit in reaches_up(name, targets)]
    new = [f"{MODULES[a].relative_to(PACKAGE.parent)}:{line}: {a} ({stage_of(a)}) imports {b} ({stage_of(b)})"
           for a, b, line in found if (a, b) not in KNOWN_UPWARD]
    assert new == []
    assert sorted(set(KNOWN_UPWARD) - {(a, b) for a, b, _ in found}) == []  # fixed: remove it from the list


@pytest.mark.parametrize("source", [
    "from ...tasks import TASKS\n",                                          # at module level
    "def f():\n    from ...sampling import ParameterSampler\n",             # deferred
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ...report.plots import save_figure\n",
    "import mianalysis.flower\n",
])
def test_a_planted_upward_import_is_found(source):
    # The same reading on a planted source, as if it were analysis/inference/intervals.py.
    name = "mianalysis.analysis.inference.intervals"
    hits = reaches_up(name, targets_of(name, type_hints=True, tree=ast.parse(source)))
    assert len(hits) == 1 and hits[0][0] == name


def test_an_allowed_import_is_not_flagged():
    name = "mianalysis.analysis.inference.intervals"
    tree = ast.parse("from ...estimators import gaussian_mi\nfrom ..._internal.validation import check_int\n"
                     "from ...dumps import ParameterDump\n")
    assert reaches_up(name, targets_of(name, type_hints=True, tree=tree)) == []


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
