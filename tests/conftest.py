import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True, scope="session")
def _pretrained_cache(tmp_path_factory):
    """Keep pretrained networks of the tests out of the user's cache."""
    import os

    old = os.environ.get("MIANALYSIS_CACHE")
    os.environ["MIANALYSIS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("MIANALYSIS_CACHE", None)
    else:
        os.environ["MIANALYSIS_CACHE"] = old


TINY_SIGNAL = {"n_layers": 2, "seq_len": 8, "n_examples": 20, "batch_size": 8, "hidden": 3}
# a fresh head per run, as every digits-lenet run was before `head_start` existed
TINY_DIGITS = {"per_digit": 2, "batch_size": 8, "pretrain_epochs": 2, "lr": 1e-3, "head_start": "random"}
