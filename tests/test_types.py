"""The type check is wired into `make test` and its tool is in the dev extra (cheap text
checks; mypy itself runs in `make test`, before pytest, not inside the tests)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_dev_extra_lists_mypy():
    dev = pyproject()["project"]["optional-dependencies"]["dev"]
    assert any(re.match(r"mypy\b", req) for req in dev), dev


def test_mypy_config_checks_the_package():
    mypy = pyproject()["tool"]["mypy"]
    assert mypy["packages"] == ["mianalysis"]
    assert mypy["warn_unused_ignores"] is True


def test_make_test_runs_mypy_then_pytest():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None, "the Makefile has no `test` target"
    lines = [line.strip() for line in recipe.group(1).splitlines()]
    assert lines == ["$(PY) -m mypy", "$(PY) -m pytest -q -n 2 --dist loadfile --durations=25"], lines


def test_the_test_workers_come_with_the_dev_extra():
    # `pytest -n 2` needs pytest-xdist, which `make setup` installs through the dev extra.
    dev = pyproject()["project"]["optional-dependencies"]["dev"]
    assert any(req.replace(" ", "").startswith("pytest-xdist") for req in dev), dev


def test_mypy_cache_is_ignored():
    assert ".mypy_cache/" in (ROOT / ".gitignore").read_text().splitlines()
