"""The package's modules use one another through public names only (see the note on
shared internals in ``mianalysis/__init__.py``): every module of ``mianalysis`` is parsed
with :mod:`ast`, and an import of a private name (``_something``) from another module, an
import from a private module of another folder, or a private attribute (``obj._x``) that
the module itself never defines fails the test, naming the file and line. No dump is
committed, and doctests run from the checkout write none into it (the root conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mianalysis

PACKAGE = Path(mianalysis.__file__).parent
# The package's shared internals: private modules that exist to be imported by every part.
SHARED_INTERNALS = set(mianalysis.SHARED_INTERNALS)


def is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder_of(path):
    """The package (folder) a module belongs to, e.g. mianalysis.estimators."""
    return module_name(path.parent / "__init__.py")


def imported(node, path):
    """(source module, imported name or None) of each mianalysis import in `node`."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "mianalysis"]
    if node.level:
        base = folder_of(path).split(".")
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "mianalysis":
        return []
    return [(source, alias.name) for alias in node.names]


def private_imports(path, tree):
    """Imports in `tree` (the module at `path`) that reach into another module's privates."""
    folder, own = folder_of(path), module_name(path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for source, name in imported(node, path):
            full = source if name is None else f"{source}.{name}"
            parts = full.split(".")
            for i, part in enumerate(parts):
                if not is_private(part):
                    continue
                prefix, parent = ".".join(parts[:i + 1]), ".".join(parts[:i])
                if prefix in SHARED_INTERNALS or prefix == own:
                    continue
                # A folder's own private modules (estimators/_kernels.py for estimators/ksg.py)
                # are its business; a private name inside another module is not.
                if parent == folder and (i < len(parts) - 1 or name is None or source == folder):
                    continue
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: imports {full}")
                break
    return found


def foreign_private_attributes(path, tree):
    """``obj._x`` in `tree` where the module never defines ``_x`` itself (as an attribute it
    assigns, a function, a class or a name): another module's internals."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # __slots__ entries
            own.add(node.value)
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: uses {ast.unparse(node)}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in own
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]


MODULES = sorted(PACKAGE.rglob("*.py"))


# Private names of another package that a module relies on, because that package has no
# public way to do it; each with the test that fails if the package changes them.
# - distributed's registry of clusters, which its exit hook closes: a LocalCluster whose start
#   was interrupted must leave it, or the hook prints the half-started workers' tracebacks
#   (tests/test_reliability_scaleout.py::test_ctrl_c_while_local_workers_start_is_one_line).
THIRD_PARTY_PRIVATES = {"mianalysis/scaleout/__init__.py": {"SpecCluster._instances"}}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_module_uses_another_modules_private_names(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    allowed = THIRD_PARTY_PRIVATES.get(str(path.relative_to(PACKAGE.parent)), set())
    found = [f for f in foreign_private_attributes(path, tree) if f.rpartition(" uses ")[2] not in allowed]
    assert private_imports(path, tree) + found == []


def test_the_check_finds_what_it_forbids(tmp_path):
    # The three smells this test exists for, as they were in analysis.py (now analysis/compute.py).
    path = PACKAGE / "analysis" / "compute.py"
    tree = ast.parse("from ..estimators._neighbours import marginal_distances\n"
                     "from ..dumps import _dump_around\n"
                     "from ..estimators.ksg import _centre_far_columns\n"
                     "digest = dump._manifest\n")
    assert private_imports(path, tree) == [
        "mianalysis/analysis/compute.py:1: imports mianalysis.estimators._neighbours.marginal_distances",
        "mianalysis/analysis/compute.py:2: imports mianalysis.dumps._dump_around",
        "mianalysis/analysis/compute.py:3: imports mianalysis.estimators.ksg._centre_far_columns"]
    assert foreign_private_attributes(path, tree) == ["mianalysis/analysis/compute.py:4: uses dump._manifest"]
    # Allowed: shared internals, a folder's own private modules, a module's own privates.
    ksg = PACKAGE / "estimators" / "ksg.py"
    tree = ast.parse("from .._internal.validation import check_k\nfrom ._neighbours import ksg_counts\n"
                     "from . import _kernels\nfrom ..estimators._kernels import BLOCK\n"
                     "class A:\n    def f(self, other):\n        self._x = 1\n        return other._x\n")
    assert private_imports(ksg, tree) == [] and foreign_private_attributes(ksg, tree) == []
    assert SHARED_INTERNALS <= {module_name(p) for p in MODULES}


PUBLIC_MODULES = [p for p in MODULES if not any(is_private(part) for part in p.relative_to(PACKAGE).with_suffix("").parts)
                  and p.name != "__main__.py"]


@pytest.mark.parametrize("path", PUBLIC_MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_every_public_module_declares_its_public_names(path):
    """`__all__` in every public module, naming only what the module defines or imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    declared = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in node.targets)]
    assert len(declared) == 1, f"{path.relative_to(PACKAGE.parent)} has no __all__"
    names = ast.literal_eval(declared[0].value)
    bound = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):  # NAME: type = value
            bound.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    assert sorted(set(names) - bound) == []
    assert len(names) == len(set(names))


# ---------------------------------------------------------------------------- scripts

# Scripts outside the package use it as a user would: through public names only.
ROOT = Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("experiments", "benchmarks", "examples")
# (not inside hidden folders: benchmarks/.peers-venv, compare_peers.py's environment of other packages)
SCRIPTS = sorted(p for folder in SCRIPT_FOLDERS for p in (ROOT / folder).rglob("*.py")
                 if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))


def script_private_names(path, tree):
    """Private mianalysis modules and names (a part ``_x`` of the dotted name) that the
    script at `path` imports, or reaches as an attribute of a name it imported from
    mianalysis (``mianalysis.estimators._kernels``, ``format._write_json_atomically``)."""
    where = path.relative_to(ROOT)
    found, bound = [], {}  # bound: local name -> the mianalysis name it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mianalysis":
                    bound[alias.asname or "mianalysis"] = alias.name if alias.asname else "mianalysis"
                    if any(is_private(part) for part in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "mianalysis":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = full
                if any(is_private(part) for part in full.split(".")):
                    found.append(f"{where}:{node.lineno}: imports {full}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{where}:{node.lineno}: uses {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_scripts_use_public_names_only(path):
    assert script_private_names(path, ast.parse(path.read_text(), filename=str(path))) == []


def test_the_script_check_finds_what_it_forbids():
    assert all(any(p.parent.relative_to(ROOT).parts[0] == folder for p in SCRIPTS) for folder in SCRIPT_FOLDERS)
    path = ROOT / "benchmarks" / "bench_x.py"
    tree = ast.parse("import mianalysis\nimport mianalysis._internal.io\nfrom mianalysis._provenance import collect\n"
                     "from mianalysis.estimators._kernels import BLOCK\nfrom mianalysis.dumps import _dump_around\n"
                     "from mianalysis.dumps import format as f\nf._write_json_atomically(p, {})\n"
                     "n = mianalysis.estimators._neighbours.SYMMETRIC_MIN_FEATURES\n")
    assert script_private_names(path, tree) == [
        "benchmarks/bench_x.py:2: imports mianalysis._internal.io",
        "benchmarks/bench_x.py:3: imports mianalysis._provenance.collect",
        "benchmarks/bench_x.py:4: imports mianalysis.estimators._kernels.BLOCK",
        "benchmarks/bench_x.py:5: imports mianalysis.dumps._dump_around",
        "benchmarks/bench_x.py:7: uses f._write_json_atomically",
        "benchmarks/bench_x.py:8: uses mianalysis.estimators._neighbours"]
    # Allowed: public names, dunders, a script's own helpers and private attributes of other objects.
    tree = ast.parse("from mianalysis import __version__, ParameterDump\nfrom _runner import run\n"
                     "from mianalysis.estimators.ksg import DISTANCE_CACHE_BLOCK\nx = obj._cache\n")
    assert script_private_names(path, tree) == []


# ------------------------------------------------------------- no dumps committed
# Folders whose dumps are test fixtures, kept on purpose (none today: tests make theirs).
FIXTURE_FOLDERS = ("tests/data/",)


def committed_dumps(paths):
    """The dump manifests among tracked `paths` outside FIXTURE_FOLDERS."""
    return [p for p in paths if p.rsplit("/", 1)[-1] == "manifest.json" and not p.startswith(FIXTURE_FOLDERS)]


def test_no_dump_is_committed():
    """A doctest run from the checkout once left its dumps (a/, lazy/, my_dump/, ...) to be
    committed: no tracked manifest.json outside the fixture folders."""
    import shutil
    import subprocess

    root = PACKAGE.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    paths = [p for p in listed.decode().split("\0") if p]
    assert paths, "git ls-files listed nothing"
    assert committed_dumps(paths) == []


def test_the_committed_dump_check_finds_what_it_forbids():
    assert committed_dumps(["my_dump/manifest.json", "a/manifest.json", "tests/data/d/manifest.json",
                            "docs/manifest.json.md", "mianalysis/dumps/manifest.py"]) == [
        "my_dump/manifest.json", "a/manifest.json"]


def test_doctests_run_from_the_checkout_write_nothing_into_it(tmp_path):
    """pytest --doctest-modules on the package, from the checkout (the root conftest.py
    moves each doctest into a temporary folder): no dump appears beside the code."""
    import subprocess
    import sys

    root = PACKAGE.parent
    modules = ["mianalysis/dumps/format.py", "mianalysis/dumps/writer.py"]  # examples writing my_dump, gaps, a, b, c
    before = set(p.name for p in root.iterdir())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--doctest-modules", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "base"), *modules], cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "passed" in done.stdout
    assert set(p.name for p in root.iterdir()) - before == set()
