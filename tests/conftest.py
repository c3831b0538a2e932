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

sys.path.insert(0, str(Path(__file__).parent))


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


TINY_SIGNAL = {"n_layers": 2, "seq_len": 8, "n_examples": 20, "batch_size": 8, "hidden": 3}
TINY_DIGITS = {"per_digit": 2, "batch_size": 8, "pretrain_epochs": 2, "lr": 1e-3}
