"""experiments/copula_null_size.py: the false-positive rate of the analytic null on
independent clients, checked where the answer is known."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

FOLDER = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture
def module(monkeypatch):
    monkeypatch.syspath_prepend(str(FOLDER))
    spec = importlib.util.spec_from_file_location("experiment_copula_null_size", FOLDER / "copula_null_size.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def test_gaussian_clients_well_above_the_joint_dimension_reject_at_the_nominal_rate(module):
    # Exact Gaussian law, n = 16 x the joint dimension: Wilks' law holds, so about 5 % of 300
    # independent pairs are rejected (binomial 99.9 % range 1.4-10 %).
    rows = module.setting_rows(5, 16.0, "gaussian", 300, seed=1)
    assert [r["estimator"] for r in rows] == list(module.ESTIMATORS)
    for r in rows:
        assert r["n"] == 160 and r["reps"] == 300
        assert 0.014 <= r["rejected_0.05"] <= 0.10
        assert r["rejected_0.05_low"] <= r["rejected_0.05"] <= r["rejected_0.05_high"]
        assert r["ks_uniform_p"] > 1e-3


def test_a_shared_per_run_scale_makes_the_gaussian_null_reject_too_often(module):
    # Multivariate t (one chi-square scale per run): the Gaussian estimate's analytic null is
    # not valid and rejects well above 5 % on independent clients.
    rng = np.random.default_rng(0)
    pv = module.null_p_values(rng, 400, 20, "student-t3", 200)
    assert (pv["gaussian"] <= 0.05).mean() > 0.12
    with pytest.raises(ValueError, match="`law` must be one of"):
        module.client(rng, 10, 2, "cauchy", np.eye(2))
