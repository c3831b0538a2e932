"""The `slow` marker (tests/conftest.py, tests/slow_tests.txt): every listed test function
exists, so a renamed slow test cannot silently fall into the quick subset."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SLOW_TESTS

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_slow_test_exists():
    missing = []
    for node in sorted(SLOW_TESTS):
        file, _, function = node.partition("::")
        path = ROOT / file
        names = {n.name for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} if path.is_file() else set()
        if function not in names:
            missing.append(node)
    assert missing == []


def test_the_slow_list_is_not_empty_and_names_test_functions():
    assert len(SLOW_TESTS) > 50
    assert all(n.startswith("tests/test_") and "::test_" in n for n in SLOW_TESTS)
