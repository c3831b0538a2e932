"""Doctests collected straight from the package (``pytest --doctest-modules mianalysis``)
run in a temporary folder, as tests/test_examples.py runs them: the examples that write a
dump ("my_dump", "lazy", "a", ...) never write into the checkout."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _doctests_in_a_temporary_folder(request):
    if isinstance(request.node, pytest.DoctestItem):  # other tests get no folder (none is made for them)
        request.getfixturevalue("monkeypatch").chdir(request.getfixturevalue("tmp_path"))
