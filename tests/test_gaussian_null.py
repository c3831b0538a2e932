"""gaussian_mi_null: exact null moments and p-values of the Gaussian MI estimate.

References: a batched NumPy Monte Carlo of the plug-in estimate on independent Gaussian
data (checked against gaussian_mi on its first draws), the closed form of the p = q = 1
case by numerical integration over the Beta law of r^2, and mi_permutation_test.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from mianalysis import gaussian_mi, gaussian_mi_null, mi_permutation_test
from mianalysis.estimators.gaussian import wishart_logdet_bias


def plugin_mi_draws(n, p, q, draws, rng):
    """Plug-in Gaussian MI (nats) of `draws` independent data sets of n independent
    Gaussian samples, and the data sets themselves (draws, n, p + q)."""
    z = rng.standard_normal((draws, n, p + q))
    zc = z - z.mean(axis=1, keepdims=True)
    cov = np.einsum("bni,bnj->bij", zc, zc)
    logdet = lambda c: np.linalg.slogdet(c)[1]  # noqa: E731
    mi = 0.5 * (logdet(cov[:, :p, :p]) + logdet(cov[:, p:, p:]) - logdet(cov))
    return mi, z


def correction(n, p, q):
    """What gaussian_mi's bias correction subtracts (nats)."""
    return 0.5 * (wishart_logdet_bias(p, n) + wishart_logdet_bias(q, n) - wishart_logdet_bias(p + q, n))


def test_reference_is_gaussian_mi():
    mi, z = plugin_mi_draws(25, 2, 3, 5, np.random.default_rng(1))
    for b in range(5):
        x, y = z[b, :, :2], z[b, :, 2:]
        assert gaussian_mi(x, y, units="nats", bias_correction=False) == pytest.approx(mi[b], abs=1e-12)
        assert gaussian_mi(x, y, units="nats") == pytest.approx(mi[b] - correction(25, 2, 3), abs=1e-12)


@pytest.mark.parametrize("n, p, q", [(30, 1, 1), (40, 2, 3), (60, 4, 3), (45, 5, 6)])
def test_moments_match_monte_carlo(n, p, q):
    draws = 20_000
    mi, _ = plugin_mi_draws(n, p, q, draws, np.random.default_rng([n, p, q]))
    null = gaussian_mi_null(n, p, q, units="nats", bias_correction=False)
    # 4 standard errors: a degree of freedom off (n instead of n - 1) moves the mean by ~1/n.
    assert abs(mi.mean() - null.mean) < 4 * null.std / np.sqrt(draws)
    assert mi.std(ddof=1) == pytest.approx(null.std, rel=0.03)
    corrected = gaussian_mi_null(n, p, q, units="nats")
    assert corrected.mean == pytest.approx(0.0, abs=1e-12)  # the correction removes exactly the null mean
    assert corrected.std == null.std
    assert corrected.shift == pytest.approx(correction(n, p, q), rel=1e-12)
    bits = gaussian_mi_null(n, p, q, units="bits", bias_correction=False)
    assert bits.mean == pytest.approx(null.mean / np.log(2), rel=1e-12)
    assert bits.std == pytest.approx(null.std / np.log(2), rel=1e-12)


@pytest.mark.parametrize("n", [5, 12, 100])
def test_p1_q1_against_closed_form(n):
    """I = -log(1 - r^2) / 2 with r^2 ~ Beta(1/2, (n - 2)/2) for independent pairs."""
    law = stats.beta(0.5, (n - 2) / 2)
    mean = integrate.quad(lambda u: -0.5 * np.log1p(-u) * law.pdf(u), 0, 1)[0]
    second = integrate.quad(lambda u: 0.25 * np.log1p(-u) ** 2 * law.pdf(u), 0, 1)[0]
    null = gaussian_mi_null(n, 1, 1, units="nats", bias_correction=False)
    assert null.mean == pytest.approx(mean, rel=1e-7)
    assert null.std == pytest.approx(np.sqrt(second - mean**2), rel=1e-6)
    # the p-value is the two-sided t-test of r = 0
    r = 0.3
    t = r * np.sqrt((n - 2) / (1 - r**2))
    assert null.p_value(-0.5 * np.log1p(-r**2)) == pytest.approx(2 * stats.t.sf(t, n - 2), rel=1e-9)


@pytest.mark.parametrize("n, p, q, method", [(12, 1, 1, "exact"), (15, 3, 1, "exact"), (20, 2, 4, "exact"),
                                             (14, 4, 2, "exact"), (40, 3, 4, "bartlett"), (30, 5, 6, "bartlett"),
                                             (20, 2, 4, "bartlett")])
def test_pvalues_uniform_under_independence(n, p, q, method):
    draws = 4000
    mi, _ = plugin_mi_draws(n, p, q, draws, np.random.default_rng([7, n, p, q]))
    null = gaussian_mi_null(n, p, q, units="bits")  # corrected estimates in bits
    pvalues = null.p_value((mi - correction(n, p, q)) / np.log(2), method=method)
    assert pvalues.shape == (draws,)
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3
    # the exact law also gets the tail right
    if method == "exact":
        assert np.mean(pvalues < 0.05) == pytest.approx(0.05, abs=0.012)


def test_bartlett_moments_at_the_papers_size():
    """n = 22,000 runs, p = q = 358: -k log Lambda has mean and variance of chi2(p q)."""
    n, p, q = 22_000, 358, 358
    null = gaussian_mi_null(n, p, q, units="nats", bias_correction=False)
    k = n - 1 - (p + q + 1) / 2
    assert 2 * k * null.mean == pytest.approx(p * q, rel=1e-4)
    assert (2 * k * null.std) ** 2 == pytest.approx(2 * p * q, rel=3e-4)


def test_exact_needs_a_small_dimension():
    null = gaussian_mi_null(50, 3, 3)
    assert not null.exact_available
    with pytest.raises(ValueError, match="`method`='exact' needs min"):
        null.p_value(0.1, method="exact")
    assert null.p_value(0.1) == null.p_value(0.1, method="bartlett")
    with pytest.raises(ValueError, match="`method` must be one of"):
        null.p_value(0.1, method="box")


def _weakly_dependent(n, p, q, strength, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, p))
    y = rng.standard_normal((n, q))
    y[:, 0] += strength * x[:, 0]
    return x, y


@pytest.mark.parametrize("n, p, q, strength, seed", [
    (200, 2, 3, 0.0, 1),  # independent
    (200, 1, 1, 0.15, 7),  # weakly dependent, exact p-value
    (150, 3, 4, 0.25, 3),  # weakly dependent, Bartlett's p-value
])
def test_agrees_with_permutation_test(n, p, q, strength, seed):
    x, y = _weakly_dependent(n, p, q, strength, seed)
    perms = 300  # 1000 in the gaussian-sgd case below; 300 keep these three to a couple of seconds each
    res = mi_permutation_test(x, y, estimator="gaussian", n_permutations=perms, random_state=seed)
    analytic = gaussian_mi_null(n, p, q).p_value(res.estimate)
    if strength:
        assert 0.01 <= res.p_value <= 0.2  # the cases are chosen to be weakly dependent
    se = np.sqrt(analytic * (1 - analytic) / perms)
    assert abs(res.p_value - analytic) < 3 * se + 0.005
    # the permutation null of the same data has the analytic null's spread
    assert res.null_std == pytest.approx(gaussian_mi_null(n, p, q).std, rel=0.1)


def test_errors():
    with pytest.raises(ValueError, match="no analytic null with `shrinkage`='ledoit-wolf'"):
        gaussian_mi_null(100, 2, 2, shrinkage="ledoit-wolf")
    with pytest.raises(ValueError, match="`n_samples` must exceed n_features_x \\+ n_features_y = 5; got 5"):
        gaussian_mi_null(5, 2, 3)
    gaussian_mi_null(6, 2, 3)  # n = p + q + 1: the joint covariance is positive definite
    with pytest.raises(ValueError, match="`n_features_x` must be >= 1; got 0"):
        gaussian_mi_null(100, 0, 3)
    with pytest.raises(TypeError, match="`n_samples` must be an integer"):
        gaussian_mi_null(100.0, 1, 3)
    with pytest.raises(ValueError, match="`units` must be one of"):
        gaussian_mi_null(100, 1, 3, units="bans")


def _two_client_dump(path, runs, params, seed=0):
    from mianalysis import ParameterDump

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, runs, params))
    b = 0.3 * a + rng.standard_normal((2, runs, params))
    return ParameterDump.from_arrays(path, {"a": a, "b": b})


@pytest.mark.parametrize("params, how", [(1, "exact"), (3, "Bartlett chi-square")])
def test_analyze_uses_the_analytic_null(tmp_path, params, how):
    from mianalysis import analyze

    dump = _two_client_dump(tmp_path / "d", 200, params)
    rows = [r for r in analyze(dump, estimators=["gaussian"], metrics=[], gaussian_null="analytic")
            if r["quantity"] == "mi_gaussian"]
    assert len(rows) == 2
    null = gaussian_mi_null(200, params, params)
    for t, row in enumerate(rows):
        x, y = dump.samples(0, index=t), dump.samples(1, index=t)
        assert row["value"] == pytest.approx(gaussian_mi(x, y), rel=1e-12)
        assert (row["null_mean"], row["null_std"]) == pytest.approx((null.mean, null.std), rel=1e-12)
        assert row["p_value"] == pytest.approx(null.p_value(row["value"]), rel=1e-12)
        assert row["note"] == f"analytic null ({how})"
    # the default keeps the permutation null, without a note
    default = [r for r in analyze(dump, estimators=["gaussian"], metrics=[], n_permutations=9)
               if r["quantity"] == "mi_gaussian"]
    assert default[0]["note"] == "" and default[0]["p_value"] == pytest.approx(0.1)


def test_analyze_falls_back_to_permutations_with_shrinkage(tmp_path):
    from mianalysis import analyze

    dump = _two_client_dump(tmp_path / "d", 20, 6)  # 20 runs <= 2 x 12 joint dimensions: Ledoit-Wolf
    rows = [r for r in analyze(dump, estimators=["gaussian"], metrics=[], gaussian_null="analytic",
                               n_permutations=19) if r["quantity"] == "mi_gaussian"]
    assert "no analytic null with shrinkage: 19 permutations" in rows[0]["note"]
    assert rows[0]["p_value"] >= 1 / 20
    rows = [r for r in analyze(dump, estimators=["gaussian"], metrics=[], gaussian_null="analytic")
            if r["quantity"] == "mi_gaussian"]
    assert "no analytic null with shrinkage" in rows[0]["note"] and np.isnan(rows[0]["p_value"])
    with pytest.raises(ValueError, match="`gaussian_null` must be one of 'auto', 'permutation', 'analytic', 'moments'; got 'exact'"):
        analyze(dump, gaussian_null="exact")


def test_cli_gaussian_null(tmp_path):
    import csv

    from mianalysis.cli import main

    from mianalysis import ParameterDump

    rng = np.random.default_rng(0)
    ParameterDump.from_arrays(tmp_path / "d", {c: rng.standard_normal((1, 50, 2)) for c in "ab"})
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress",
                 "--estimators", "gaussian", "--gaussian-null", "analytic"]) == 0
    with open(tmp_path / "t.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["quantity"] == "mi_gaussian")
    assert row["note"] == "analytic null (exact)"
    assert float(row["null_std"]) == pytest.approx(gaussian_mi_null(50, 2, 2).std, rel=1e-9)


def test_agrees_with_1000_permutations_on_gaussian_sgd_without_dependence(tmp_path):
    """The analytic null against 1000 permutations on parameters that training produced:
    gaussian-sgd with a fixed start and nothing shared (exact MI 0, Gaussian parameters)."""
    pytest.importorskip("torch")
    from mianalysis import ParameterSampler
    from mianalysis.tasks import get_task

    task = get_task("gaussian-sgd", d=3, n_iterations=10)
    dump = ParameterSampler(task, seed=5, init="fixed", every=10, progress=False).sample(200, tmp_path / "d")
    assert task.exact_mi(10, 0, 1, init="fixed") == 0
    x, y = (np.asarray(dump.samples(c, index=1), dtype=np.float64) for c in ("0", "1"))
    res = mi_permutation_test(x, y, estimator="gaussian", n_permutations=1000, random_state=0)
    analytic = gaussian_mi_null(200, 3, 3).p_value(res.estimate)
    se = np.sqrt(analytic * (1 - analytic) / 1000)
    assert abs(res.p_value - analytic) < 3 * se + 0.005
    assert res.null_std == pytest.approx(gaussian_mi_null(200, 3, 3).std, rel=0.1)
