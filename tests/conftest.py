import os
import sys
from pathlib import Path

# OpenMP threads that wait by sleeping, not spinning: PyTorch's and Numba's pools (both
# libgomp) otherwise spin after every parallel region and, when the cores are busy (two of
# them here, shared with Numba's pool, subprocesses or other jobs), each tiny region
# waits for a descheduled spinner -- 2-20x slower training, same numbers. Read when
# libgomp loads, so set before anything imports torch or numba; subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.linalg  # noqa: E402,F401  (loads scipy's BLAS, so that the limit below holds for it too)
from threadpoolctl import threadpool_limits  # noqa: E402

# BLAS (numpy's and scipy's OpenBLAS) on one thread in the test processes. `make test` runs a
# worker on each core, so a second BLAS thread has no core of its own, and OpenBLAS's threads
# wait by spinning: every small product waits for a descheduled spinner (tests/test_bound.py:
# 165 s on two BLAS threads beside other work, 65 s on one). The package's results do not
# depend on BLAS threads (gaussian.gram_matrix; tests/test_reliability.py); the tests of
# thread counts start processes of their own, which this limit does not reach.
threadpool_limits(limits=1, user_api="blas")

sys.path.insert(0, str(Path(__file__).parent))
# The experiment scripts import their helpers (experiments/_results.py, _runner.py) by name,
# as Python lets a script do from its own folder; tests that load a script by its path need
# that folder importable too.
sys.path.append(str(Path(__file__).resolve().parents[1] / "experiments"))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True, scope="session")
def _pretrained_cache(tmp_path_factory):
    """Keep pretrained networks of the tests out of the user's cache."""
    old = os.environ.get("MIANALYSIS_CACHE")
    os.environ["MIANALYSIS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("MIANALYSIS_CACHE", None)
    else:
        os.environ["MIANALYSIS_CACHE"] = old


from tiny_settings import TINY_DIGITS, TINY_SIGNAL  # noqa: E402,F401  (tests import them from here too)


@pytest.fixture
def cli(capfd):
    """Run ``mianalysis ARGS...`` in this process, as a subprocess would: its exit status and
    what it printed (a CompletedProcess with text output).

    For CLI tests that need no process of their own (no kill, lock holder, rlimit or
    environment of their own): the command line, its parsing, its exit status and its
    output are the same, without the 1-3 s of starting Python and importing PyTorch."""
    import subprocess

    from mianalysis.cli import main

    def run(args):
        args = [str(a) for a in args]
        capfd.readouterr()  # only this command's output
        code = main(args)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["mianalysis", *args], code, out, err)

    return run


@pytest.fixture
def in_tmp_dir(tmp_path, monkeypatch):
    """Run the test in an empty temporary folder (an example may write files)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def single_threaded_torch():
    """PyTorch on one thread: the examples' tiny training runs 2.5x faster that way when the
    2 cores are shared (measured); no example shows a value that depends on it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The `slow` marker: the test functions tests/slow_tests.txt lists (0.4 s or more on 2 cores).
# `pytest -m "not slow"` (make test-quick) is the quick subset; tests/test_slow_marker.py
# checks that every listed function exists.
SLOW_TESTS = frozenset(line.strip() for line in (Path(__file__).parent / "slow_tests.txt").read_text().splitlines()
                       if line.strip() and not line.startswith("#"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.partition("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
