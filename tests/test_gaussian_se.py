"""Standard errors of the Gaussian MI estimate (mianalysis.estimators.gaussian_se) and the
level intervals built on them, against simulation and against the analytic null.

Known answers: x ~ N(0, I_p) and y = rho x + sqrt(1 - rho^2) e have p canonical
correlations equal to rho; the sd of :func:`mianalysis.gaussian_mi` over 300 seeded
replications (its own relative error about 4 %) is the reference for each se, and the
exact null sd (:func:`mianalysis.gaussian_mi_null`) that of independent data. The coverage
of gaussian-sgd's exact MI is measured by experiments/interval_coverage.py (too slow for a
test); these checks are its fast, seeded core.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, gaussian_mi, gaussian_mi_null
from mianalysis.analysis.inference.intervals import level_method, level_se, mi_interval, normal_interval
from mianalysis.estimators.copula import normal_scores
from mianalysis.estimators.gaussian_se import canonical_correlations, gaussian_mi_se
from mianalysis.estimators.registry import Estimator, get_estimator

REPS = 300


def _pair(rng, n, p, rho):
    x = rng.standard_normal((n, p))
    return x, rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, p))


def _simulate(rho, p, n, seed=11):
    """(sd of the estimates, mean Wishart se, mean asymptotic se) over REPS replications, bits."""
    est, wishart, asymptotic = [], [], []
    for s in range(REPS):
        x, y = _pair(np.random.default_rng([seed, s]), n, p, rho)
        est.append(gaussian_mi(x, y))
        wishart.append(gaussian_mi_se(x, y))
        asymptotic.append(gaussian_mi_se(x, y, method="asymptotic"))
    return float(np.std(est, ddof=1)), float(np.mean(wishart)), float(np.mean(asymptotic))


@pytest.mark.parametrize("rho, p, n", [(0.6, 5, 24), (0.9, 5, 24), (0.9, 5, 60), (0.5, 2, 400)])
def test_wishart_se_is_the_simulated_sd(rho, p, n):
    # n = 24 is 2.4 x the joint dimension 10: just above where analyze turns to shrinkage
    sd, wishart, _ = _simulate(rho, p, n)
    assert wishart == pytest.approx(sd, rel=0.12)


def test_asymptotic_se_is_too_small_near_twice_the_dimension():
    """The delta method ignores the finite-n spread of the log-determinants: 15 % short of
    the sd at n = 2.4 d (the reason it is not the default)."""
    sd, wishart, asymptotic = _simulate(0.9, 5, 24)
    assert asymptotic < 0.9 * sd < wishart


def test_wishart_se_of_independent_data_is_at_least_the_exact_null_sd():
    sd, wishart, _ = _simulate(0.0, 5, 24)
    null = gaussian_mi_null(24, 5, 5).std
    assert null == pytest.approx(sd, rel=0.12)
    assert null <= wishart <= 1.35 * sd  # conservative: sample canonical correlations exceed the population's 0
    for s in range(20):
        x, y = _pair(np.random.default_rng([12, s]), 24, 5, 0.0)
        assert gaussian_mi_se(x, y) >= null * (1 - 1e-12)


def test_canonical_correlations_known_answer():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 3))
    y = np.column_stack([0.8 * x[:, 0], 0.3 * x[:, 1]]) + rng.standard_normal((20_000, 2)) * [0.6, np.sqrt(0.91)]
    assert canonical_correlations(x, y) == pytest.approx([0.8, 0.3], abs=0.01)
    # invariant under invertible linear maps of either side
    a = rng.standard_normal((3, 3))
    assert canonical_correlations(x @ a, y) == pytest.approx(canonical_correlations(x, y), rel=1e-9)


def test_se_units_and_constant_columns():
    x, y = _pair(np.random.default_rng(1), 200, 2, 0.5)
    assert gaussian_mi_se(x, y, units="nats") == pytest.approx(gaussian_mi_se(x, y) * np.log(2))
    with pytest.warns(UserWarning, match="constant"):
        assert gaussian_mi_se(np.column_stack([x, np.ones(200)]), y) == pytest.approx(gaussian_mi_se(x, y))
    with pytest.warns(UserWarning, match="constant"):
        assert gaussian_mi_se(np.ones((200, 1)), y) == 0.0
    assert level_se(np.ones((200, 2)), y, "gaussian") == 0.0 == level_se(x, np.ones((200, 1)), "copula")


@pytest.mark.parametrize("kwargs, match", [({"method": "bootstrap"}, "`method`"), ({"units": "bytes"}, "`units`")])
def test_se_bad_settings_are_named(kwargs, match):
    x, y = _pair(np.random.default_rng(1), 50, 2, 0.5)
    with pytest.raises(ValueError, match=match):
        gaussian_mi_se(x, y, **kwargs)


def test_se_needs_more_samples_than_features():
    x, y = _pair(np.random.default_rng(1), 6, 3, 0.5)
    with pytest.raises(ValueError, match="more samples than features"):
        gaussian_mi_se(x, y)


def test_the_level_interval_and_the_analytic_null_agree_on_dependent_data_near_2d():
    """Strong dependence with n = 2.2 x the joint dimension (the signal-rnn case of issue
    30): the analytic null rejects at a tiny p, and the Wishart interval excludes 0; the
    bootstrap's sd of resamples holding ~63 % distinct runs is 1.6-3.9 times wider here."""
    for s in range(5):
        x, y = _pair(np.random.default_rng([13, s]), 44, 10, 0.7)
        estimate, low, high = mi_interval(x, y, "gaussian")
        assert gaussian_mi_null(44, 10, 10).p_value(estimate) < 1e-6
        assert low > 0
        b_estimate, b_low, b_high = mi_interval(x, y, "gaussian", method="bootstrap", n_resamples=20, random_state=s)
        assert b_estimate == estimate and b_high - b_low > 1.5 * (high - low)


def test_the_level_interval_and_the_analytic_null_agree_on_independent_data():
    """Independent data: the interval excludes 0 only where the null rejects (p <= 0.05), and
    both say "no dependence" in most replications."""
    excludes, rejects = [], []
    for s in range(200):
        x, y = _pair(np.random.default_rng([14, s]), 40, 4, 0.0)
        estimate, low, _ = mi_interval(x, y, "gaussian")
        excludes.append(low > 0)
        rejects.append(gaussian_mi_null(40, 4, 4).p_value(estimate) <= 0.05)
    excludes, rejects = np.array(excludes), np.array(rejects)
    assert not np.any(excludes & ~rejects)
    assert excludes.mean() <= 0.05 and 0.01 <= rejects.mean() <= 0.1


def test_copula_level_interval_is_the_wishart_se_of_the_normal_scores():
    x, y = _pair(np.random.default_rng(2), 300, 2, 0.6)
    x, y = np.sinh(x), y**3
    estimate, low, high = mi_interval(x, y, "copula")
    se = gaussian_mi_se(normal_scores(x), normal_scores(y))
    assert level_se(x, y, "copula") == se
    assert (low, high) == pytest.approx(normal_interval(estimate, se))


def test_mi_interval_methods(tmp_path):
    x, y = _pair(np.random.default_rng(3), 300, 2, 0.6)
    estimate, low, high = mi_interval(x, y, "gaussian", method="asymptotic")
    assert (low, high) == pytest.approx(normal_interval(estimate, gaussian_mi_se(x, y, method="asymptotic")))
    with pytest.raises(ValueError, match="`method`"):
        mi_interval(x, y, "gaussian", method="jackknife")
    with pytest.raises(ValueError, match="not a formula"):
        mi_interval(x, y, "ksg", method="wishart")


def test_analyze_uses_the_wishart_level_interval_and_records_it(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 100, 20)).astype(np.float32)  # n = 100 = 2.5 x 40 joint dimensions: plain
    y = (0.7 * x + np.sqrt(1 - 0.49) * rng.standard_normal(x.shape)).astype(np.float32)  # as a dump stores them
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": x, "b": y}, checkpoints=[1, 2])
    table = analyze(dump, estimators=["gaussian", "copula"], metrics=[], gaussian_null="analytic", verify=False)
    for e in ("gaussian", "copula"):
        row = table.select(f"mi_{e}")[0]
        se = level_se(x[0].astype(np.float64), y[0].astype(np.float64), e)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(normal_interval(row["value"], se, 0.95), rel=1e-12)
    row = table.select("mi_gaussian")[0]
    assert row["p_value"] < 1e-6 and row["ci_low"] > 0  # the null and the interval agree
    assert table.settings["ci_method"]["mi_copula"] == "wishart"
    assert table.settings["ci_method"]["delta_mi_copula"] == ("influence where n_runs >= 4 x the joint dimension, "
                                                              "else bootstrap")
    assert np.isfinite(table.select("delta_mi_gaussian")[0]["change_se"])  # 2.5 x: paired bootstrap resamples


def test_level_interval_in_the_registry():
    assert level_method("gaussian") == "wishart" and level_method("ksg") == "half-subsampling"
    entry = get_estimator("gaussian")
    assert replace(entry, level_interval=None).level_interval is None
    with pytest.raises(ValueError, match="`level_interval`"):
        replace(entry, level_interval="jackknife")
    with pytest.raises(ValueError, match="needs covariance=True"):
        Estimator(name="fake", function=gaussian_mi, arguments=set(), display_name="f", label="f",
                  level_interval="wishart")


def test_the_coverage_experiment_counts_coverage_against_the_exact_mi(monkeypatch):
    """experiments/interval_coverage.py on a small setting: its rows say how often each
    method's interval holds gaussian-sgd's exact MI, with the exact binomial interval."""
    import importlib.util
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "experiments"
    monkeypatch.syspath_prepend(str(folder))
    spec = importlib.util.spec_from_file_location("experiment_interval_coverage", folder / "interval_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.clopper_pearson(0, 10) == (0.0, pytest.approx(0.3085, abs=1e-4))
    assert module.clopper_pearson(10, 10)[1] == 1.0
    rows = module.setting_rows("paper", 3, 60, "fixed start, shared data", reps=30)
    assert [(r["estimator"], r["method"]) for r in rows] == [(e, m) for e in module.ESTIMATORS for m in module.METHODS]
    for r in rows:
        assert r["exact_mi"] > 1 and 0 <= r["coverage"] <= 1 and r["coverage_low"] <= r["coverage"] <= r["coverage_high"]
        assert r["estimator"] == "copula" or r["null_rejects"] == 1.0  # strong dependence: the null always rejects
    wishart = [r for r in rows if r["estimator"] == "gaussian" and r["method"] == "wishart"][0]
    assert wishart["coverage"] >= 0.8 and wishart["disagree"] == 0.0


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("p", [1, 7, 300])
def test_lower_solve_gives_solve_triangulars_bits_for_either_layout(order, p):
    # The whitening of the influence values and of the shuffles calls BLAS trsm itself, arranged
    # as solve_triangular arranges it for the factor's layout (np.linalg.cholesky's factor is
    # C-ordered, scipy's F-ordered): the same bits, on whatever BLAS this machine has.
    from scipy.linalg import solve_triangular

    from mianalysis.estimators.gaussian import lower_solve

    rng = np.random.default_rng(p)
    z = rng.standard_normal((2 * p + 40, p))
    lower = np.asarray(np.linalg.cholesky(z.T @ z / z.shape[0]), order=order)
    rhs = rng.standard_normal((z.shape[0], p)).T  # F-ordered, as the callers pass rows.T
    kept = rhs.copy()
    np.testing.assert_array_equal(lower_solve(lower, rhs), solve_triangular(lower, rhs, lower=True, check_finite=False))
    np.testing.assert_array_equal(rhs, kept)  # the right-hand side is not overwritten
