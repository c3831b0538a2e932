"""The permutation-moment null (mianalysis.estimators.moment_null): its moments are those of
all n! pairings, its size holds where the analytic Wilks null's does not, and analyze uses it
where asked or where "auto" says."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import linalg, stats

from mianalysis import ParameterDump, analyze, gaussian_mi_null
from mianalysis.analysis import compute
from mianalysis.estimators.copula import normal_scores
from mianalysis.estimators.moment_null import permutation_moment_null


def test_mean_and_variance_are_those_of_every_pairing():
    rng = np.random.default_rng(3)
    x = rng.standard_t(3, size=(8, 2))
    y = rng.standard_t(3, size=(8, 3)) ** 3  # far from Gaussian: the leverages spread
    null = permutation_moment_null(x, y)
    # Pillai's trace of the pairing x[i] <-> y[order[i]] is tr(Wx Wy[order][:, order]), with W the
    # projections onto the centred columns: all 8! pairings at once, and the statistic the
    # function gives for some of them
    wx, wy = (linalg.orth(a - a.mean(0)) @ linalg.orth(a - a.mean(0)).T for a in (x, y))
    orders = np.array(list(itertools.permutations(range(8))))
    every = np.einsum("ij,kij->k", wx, wy[orders[:, :, None], orders[:, None, :]])
    for k in np.random.default_rng(0).choice(len(orders), 20, replace=False):
        assert every[k] == pytest.approx(permutation_moment_null(x, y[orders[k]]).statistic, rel=1e-10)
    assert every[0] == pytest.approx(null.statistic, rel=1e-10)  # the identity first
    assert null.mean == pytest.approx(every.mean(), rel=1e-12)
    assert null.variance == pytest.approx(every.var(), rel=1e-10)
    assert null.inflation != pytest.approx(1.0, abs=0.01)  # the leverage term matters here


def test_the_statistic_is_pillais_trace():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = rng.normal(size=(200, 2)) + 0.5 * x[:, :2]
    r = np.linalg.svd(linalg.orth(x - x.mean(0)).T @ linalg.orth(y - y.mean(0)), compute_uv=False)
    assert permutation_moment_null(x, y).statistic == pytest.approx(np.sum(r**2), rel=1e-10)


def test_gaussian_samples_have_no_inflation_and_the_chi_square_tail():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4000, 20)), rng.normal(size=(4000, 20))
    null = permutation_moment_null(x, y)
    assert null.inflation == pytest.approx(1.0, abs=0.02)
    # to first order V ~ chi2(pq) / (n - 1): the same tail at the 95th percentile
    v95 = stats.chi2.ppf(0.95, 400) / 3999
    assert null.tail(v95) == pytest.approx(0.05, abs=0.005)
    assert null.tail(null.statistic) == null.p_value


def test_size_holds_on_heavy_tailed_clients_where_the_analytic_null_does_not():
    # one independent pair whose runs share a t3 scale (a multivariate t), its normal scores
    # as the copula estimate sees them; the draws are shuffles, the permutation test's own law
    rng = np.random.default_rng(7)
    n, p = 400, 50
    scale = [np.sqrt(rng.chisquare(3, size=(n, 1)) / 3) for _ in range(2)]
    x, y = (normal_scores(rng.standard_normal((n, p)) / s) for s in scale)
    moments = permutation_moment_null(x, y)
    wilks = gaussian_mi_null(n, p, p, units="nats", bias_correction=False)
    shuffles = [y[rng.permutation(n)] for _ in range(400)]
    p_moments = np.array([permutation_moment_null(x, s).p_value for s in shuffles])
    margins = 0.5 * (np.linalg.slogdet(np.corrcoef(x, rowvar=False))[1] + np.linalg.slogdet(np.corrcoef(y, rowvar=False))[1])
    plugin = np.array([margins - 0.5 * np.linalg.slogdet(np.corrcoef(x, s, rowvar=False))[1] for s in shuffles])
    p_wilks = wilks.p_value(plugin)
    assert moments.inflation > 1.5
    assert 0.02 <= np.mean(p_moments <= 0.05) <= 0.09  # 5 % within 400 draws' Monte Carlo error
    assert np.mean(p_wilks <= 0.05) >= 0.10  # the Gaussian law's variance is too small here (13.8 %)


def test_dependence_is_found():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 5))
    assert permutation_moment_null(x, rng.normal(size=(300, 4)) + 0.4 * x[:, :4]).p_value < 1e-8


@pytest.mark.parametrize("x, y, match", [
    (np.zeros(10), np.zeros((10, 2)), "must be 2-D"),
    (np.ones((10, 2)), np.ones((9, 2)), "same number of runs"),
    (np.ones((5, 2)), np.ones((5, 2)), "more runs than features"),
    (np.c_[np.arange(20.0), np.ones(20)], np.arange(40.0).reshape(20, 2) ** 2, "singular"),
])
def test_bad_input_is_refused_by_name(x, y, match):
    with pytest.raises(ValueError, match=match):
        permutation_moment_null(x, y)


def _arrays():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 60, 3))
    return {"a": a, "b": 0.6 * a + rng.standard_normal((2, 60, 3))}


def _dump(folder):
    return ParameterDump.from_arrays(folder / "ab", _arrays())


def test_analyze_gives_the_moment_null_where_asked(tmp_path):
    dump = _dump(tmp_path)
    table = analyze(dump, estimators=["gaussian", "copula"], metrics=[], gaussian_null="moments")
    rows = [r for r in table if r["quantity"] in ("mi_gaussian", "mi_copula")]
    assert rows and all(r["null_method"] == "moments" and "permutation-moment null" in r["note"] for r in rows)
    samples = _arrays()
    expected = permutation_moment_null(samples["a"][1], samples["b"][1]).p_value
    assert next(r for r in rows if r["quantity"] == "mi_gaussian" and r["checkpoint"] == 1)["p_value"] == \
        pytest.approx(expected, rel=1e-6)
    assert table.settings["gaussian_null"] == "moments"


def test_auto_shuffles_small_analyses_and_uses_the_moments_where_shuffles_are_costly(tmp_path, monkeypatch):
    dump = _dump(tmp_path)
    common = {"estimators": ["copula"], "metrics": [], "n_permutations": 9}
    auto = analyze(dump, **common)
    assert auto == analyze(dump, **common, gaussian_null="permutation")
    assert {r["null_method"] for r in auto if r["quantity"] == "mi_copula"} == {"permutation"}
    monkeypatch.setattr(compute, "MOMENTS_MIN_PRODUCT", 1)
    costly = analyze(dump, **common)
    assert {r["null_method"] for r in costly if r["quantity"] == "mi_copula"} == {"moments"}
    assert {r["null_method"] for r in analyze(dump, estimators=["copula"], metrics=[]) if r["quantity"] == "mi_copula"
            } == {"none"}  # no permutations asked: no null
