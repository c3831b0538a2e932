"""The experiment scripts share code only through internal modules (issue 54, item 8).

Every ``experiments/NAME.py`` whose name does not start with ``_`` is an entry point; code
that two of them need lives in a helper (``experiments/_*.py``: ``_results.py``,
``_stats.py``, a script's ``_NAME_figure.py`` ...). No file of the folder, script or
helper, may import a script: the check parses each file (ast, so an import inside a
function counts too) and lists every ``import NAME``, ``from NAME import ...``
(``NAME.sub`` included) and ``importlib.import_module("NAME")`` /
``__import__("NAME")`` of a script of the same folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
DYNAMIC = ("import_module", "__import__")  # calls that import the module their first argument names


def scripts_in(folder: Path) -> set[str]:
    """The module names of the entry-point scripts of `folder` (no leading ``_``)."""
    return {p.stem for p in folder.glob("*.py") if not p.name.startswith("_")}


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module name) of every import in `tree`, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # `from . import NAME` names the modules in its aliases
            found += [(node.lineno, node.module)] if node.module else [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called in DYNAMIC:
                found.append((node.lineno, node.args[0].value))
    return found


def script_imports(folder: Path) -> list[str]:
    """``FILE:LINE: imports NAME`` for every import of a script of `folder` by a file of `folder`."""
    scripts = scripts_in(folder)
    found = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, module in imported_modules(tree):
            if module.split(".")[0] in scripts:
                found.append(f"{path.name}:{line}: imports {module.split('.')[0]}")
    return found


def test_no_experiment_file_imports_a_script():
    assert {"replot", "digits_lenet_paired", "aggregator_trends"} <= scripts_in(EXPERIMENTS)  # the folder is read
    assert script_imports(EXPERIMENTS) == []


@pytest.mark.parametrize("source", [
    "import target\n",
    "import target as t\n",
    "from target import plot\n",
    "from target.part import plot\n",
    "import numpy, target\n",
    "def main():\n    import target\n",
    "from . import target\n",
    "import importlib\nmodule = importlib.import_module('target')\n",
    "module = __import__('target')\n",
])
@pytest.mark.parametrize("importer", ["script.py", "_helper.py"])
def test_a_planted_import_of_a_script_is_found(tmp_path, source, importer):
    (tmp_path / "target.py").write_text("def plot():\n    pass\n")
    (tmp_path / "_shared.py").write_text("def plot():\n    pass\n")
    (tmp_path / importer).write_text("import json\nimport _shared\nfrom _shared import plot\n" + source)
    assert script_imports(tmp_path) == [f"{importer}:{4 + source.count(chr(10)) - 1}: imports target"]


def test_imports_of_helpers_and_other_modules_pass(tmp_path):
    (tmp_path / "target.py").write_text("import _shared\nfrom _shared.deep import x\nimport numpy as np\n"
                                        "from pathlib import Path\nimport importlib\nimportlib.import_module('json')\n")
    (tmp_path / "_shared.py").write_text("import json\n")
    assert script_imports(tmp_path) == []
