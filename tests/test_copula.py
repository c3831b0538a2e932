"""The Gaussian copula MI estimator (Ince et al. 2017) and its place in analyses, tests, intervals,
regime notes, plots and the command line."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402
from scipy.special import digamma, gammaln, ndtri  # noqa: E402

import mianalysis  # noqa: E402
from mianalysis import (ConstantFeatureWarning, ParameterDump, analyze, gaussian_copula_mi, gaussian_mi,  # noqa: E402
                        gaussian_mi_null, mi_permutation_test)
from mianalysis.analysis import AnalysisTable  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.estimators.copula import normal_scores  # noqa: E402
from mianalysis.estimators.repeats import runs_checked  # noqa: E402
from mianalysis.analysis.inference.intervals import mi_interval, mi_replicates, resample_indices  # noqa: E402
from mianalysis.report.plots import figure_mi, figure_title  # noqa: E402
from mianalysis.analysis.inference.regime import estimate_regime_note  # noqa: E402

LN2 = np.log(2.0)


def gaussian_exact_mi(corr, p):
    """Exact MI (nats) of a Gaussian with correlation matrix `corr`, X its first `p` coordinates."""
    return 0.5 * (np.linalg.slogdet(corr[:p, :p])[1] + np.linalg.slogdet(corr[p:, p:])[1]
                  - np.linalg.slogdet(corr)[1])


def student_t_excess(nu, p, q):
    """What the MI (nats) of a (p + q)-dimensional Student t with nu degrees of freedom adds to
    the Gaussian MI of its correlation matrix: H_p + H_q - H_{p+q} of the t entropies
    H_d = log Gamma(nu/2) - log Gamma((nu+d)/2) + (d/2) log(nu pi) + 0.5 log det R
          + ((nu+d)/2) (psi((nu+d)/2) - psi(nu/2)),
    in which the log det and log(nu pi) terms leave the Gaussian part and 0."""
    a, b, c, d = nu / 2, (nu + p) / 2, (nu + q) / 2, (nu + p + q) / 2
    return (gammaln(a) + gammaln(d) - gammaln(b) - gammaln(c)
            + b * digamma(b) + c * digamma(c) - d * digamma(d) - a * digamma(a))


def student_t_mi(corr, p, nu):
    return gaussian_exact_mi(corr, p) + student_t_excess(nu, p, corr.shape[0] - p)


def correlated(n, corr, seed):
    return np.random.default_rng(seed).multivariate_normal(np.zeros(len(corr)), corr, size=n)


CORR4 = np.array([[1.0, 0.3, 0.6, 0.2],
                  [0.3, 1.0, 0.1, -0.5],
                  [0.6, 0.1, 1.0, 0.2],
                  [0.2, -0.5, 0.2, 1.0]])


# ------------------------------------------------------------------ the estimator itself
def test_normal_scores_rank_each_column_with_average_ranks_for_ties():
    x = np.array([[3.0, 0.0], [1.0, 5.0], [3.0, 1.0], [2.0, 2.0]])
    ranks = np.array([[3.5, 1.0], [1.0, 4.0], [3.5, 2.0], [2.0, 3.0]])
    np.testing.assert_allclose(normal_scores(x), stats.norm.ppf(ranks / 5), rtol=0, atol=1e-15)


def _scores_by_rankdata(samples):
    """The definition: ndtri of each column's average ranks over n + 1 (SciPy's rankdata)."""
    samples = np.asarray(samples, dtype=np.float64)
    return ndtri(stats.rankdata(samples, method="average", axis=0) / (samples.shape[0] + 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_normal_scores_equal_the_rankdata_definition_bit_for_bit_ties_and_shapes_included(dtype):
    # One sort per column and a table of ndtri at twice the average rank (_rank_kernels) give the
    # same bits as ranking with rankdata and calling ndtri: distinct values, tie groups of every
    # size (a column of 3 values among 301 runs; one of two values; -0.0 == 0.0), 1-D input,
    # a single run, and non-finite values (NaN propagates as rankdata makes it).
    rng = np.random.default_rng(5)
    n = 301
    a = np.column_stack([rng.standard_normal(n), rng.integers(0, 3, n), np.repeat([0.0, 1.0], [150, 151]),
                         rng.standard_normal(n).round(1), np.where(rng.random(n) < 0.5, -0.0, 0.0)])
    a = (10 * a if dtype is np.int64 else a).astype(dtype)
    for samples in (a, a[:, 1], a[:1], np.asfortranarray(a), a[:, ::2]):
        got = normal_scores(samples)
        assert got.shape == samples.shape and got.dtype == np.float64
        np.testing.assert_array_equal(got, _scores_by_rankdata(samples))
    nan = a.astype(np.float64)
    nan[3, 0] = np.nan
    np.testing.assert_array_equal(normal_scores(nan), _scores_by_rankdata(nan))


def test_normal_scores_do_not_depend_on_the_number_of_threads():
    import numba

    x = np.random.default_rng(6).standard_normal((500, 9)).round(1)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = normal_scores(x)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(normal_scores(x), one)


@pytest.mark.parametrize("maps", [(np.sinh, lambda v: v**3), (lambda v: v**3 + v, np.exp)])
def test_exact_for_monotone_maps_of_each_coordinate_of_a_gaussian(maps):
    z = correlated(20_000, CORR4, seed=1)
    fx, fy = maps
    x, y = fx(2 * z[:, :2]), fy(z[:, 2:])
    exact = gaussian_exact_mi(CORR4, 2)
    copula = gaussian_copula_mi(x, y, units="nats")
    assert copula == pytest.approx(exact, rel=0.03)
    assert abs(gaussian_mi(x, y, units="nats") - exact) > 0.1 * exact  # the raw Gaussian estimate is not


def test_invariant_under_monotone_maps_of_any_coordinate():
    z = correlated(500, CORR4, seed=2)
    x, y = z[:, :2], z[:, 2:]
    base = gaussian_copula_mi(x, y)
    mapped = gaussian_copula_mi(np.column_stack([np.exp(x[:, 0]), -x[:, 1] ** 3]), np.arctan(y))
    assert mapped == pytest.approx(base, abs=1e-12)  # only ranks count (a decreasing map flips one sign)
    assert gaussian_copula_mi(x**3, y) == base  # increasing maps leave the scores as they are, to the bit
    assert gaussian_copula_mi(np.round(x, 1), y) != base  # up to ties: a map that merges values changes them
    assert gaussian_copula_mi(x, y, units="nats") == pytest.approx(base * LN2, rel=1e-12)
    assert gaussian_copula_mi(x, y, bias_correction=False) > base


def test_student_t_closed_form_matches_a_monte_carlo_of_the_exact_densities():
    for nu, rho, p in [(4, 0.5, 1), (1, 0.0, 1), (3, 0.4, 2)]:
        d = 2 * p
        corr = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
        joint = stats.multivariate_t(shape=corr, df=nu)
        s = joint.rvs(100_000, random_state=np.random.default_rng(3))
        marg_x = stats.multivariate_t(shape=corr[:p, :p], df=nu)
        marg_y = stats.multivariate_t(shape=corr[p:, p:], df=nu)
        log_ratio = joint.logpdf(s) - marg_x.logpdf(s[:, :p]) - marg_y.logpdf(s[:, p:])
        se = log_ratio.std() / np.sqrt(len(log_ratio))
        assert abs(log_ratio.mean() - student_t_mi(corr, p, nu)) < 4 * se


def test_not_exact_for_a_student_t_where_it_is_a_lower_bound():
    # One coordinate per side: the copula estimate (a Gaussian copula's MI) is at most the MI,
    # and a Student t's tails carry dependence that no correlation shows.
    for nu, rho in [(3, 0.5), (1, 0.0)]:
        corr = np.array([[1.0, rho], [rho, 1.0]])
        s = stats.multivariate_t(shape=corr, df=nu).rvs(20_000, random_state=np.random.default_rng(4))
        exact = student_t_mi(corr, 1, nu)
        copula = gaussian_copula_mi(s[:, 0], s[:, 1], units="nats")
        assert copula < exact - 0.03
        assert copula == pytest.approx(gaussian_exact_mi(corr, 1), abs=0.02)


def test_settings_and_constant_features_are_checked_as_the_gaussian_estimators():
    x, y = correlated(50, CORR4, seed=5)[:, :2], correlated(50, CORR4, seed=6)[:, 2:]
    with pytest.raises(ValueError, match="`shrinkage` must be one of None, 'ledoit-wolf'; got 'oas'"):
        gaussian_copula_mi(x, y, shrinkage="oas")
    with pytest.raises(ValueError, match="`units` must be one of"):
        gaussian_copula_mi(x, y, units="bans")
    with pytest.warns(ConstantFeatureWarning, match=r"x\[:, 1\]"):
        value = gaussian_copula_mi(np.column_stack([x[:, 0], np.ones(50)]), y)
    assert value == gaussian_copula_mi(x[:, 0], y)
    assert gaussian_copula_mi(x, y, shrinkage="ledoit-wolf") >= 0
    assert "gaussian_copula_mi" in mianalysis.__all__ and mianalysis.gaussian_copula_mi is gaussian_copula_mi


# ------------------------------------------------------------------ permutation test and analytic null
def test_permutation_test_ranks_once_and_gives_what_ranking_each_shuffle_gives():
    z = correlated(80, CORR4, seed=7)
    x, y = np.exp(z[:, :2]), z[:, 2:] ** 3
    res = mi_permutation_test(x, y, estimator="copula", n_permutations=20, random_state=0)
    rng = np.random.default_rng(0)
    again = [gaussian_copula_mi(x, y[rng.permutation(80)]) for _ in range(20)]
    np.testing.assert_allclose(res.null_distribution, again, rtol=0, atol=1e-12)
    assert res.estimate == pytest.approx(gaussian_copula_mi(x, y), abs=1e-12) and res.estimator == "copula"
    with pytest.raises(TypeError, match=r"gaussian_copula_mi\(\) got unexpected keyword arguments \['k'\]: "
                                        r"`k` is a setting of estimator='ksg'; estimator='copula' takes "):
        mi_permutation_test(x, y, estimator="copula", k=3)


@pytest.mark.parametrize("dx, dy", [(1, 1), (2, 1)])
def test_gaussian_analytic_null_of_the_scores_agrees_with_1000_permutations(dx, dy):
    rng = np.random.default_rng(8)
    n = 100
    x, y = rng.exponential(size=(n, dx)), rng.uniform(size=(n, dy)) ** 4  # independent, far from Gaussian
    perm = mi_permutation_test(x, y, estimator="copula", n_permutations=1000, random_state=1)
    null = gaussian_mi_null(n, dx, dy)
    assert perm.null_mean == pytest.approx(null.mean, abs=4 * null.std / np.sqrt(1000))
    assert perm.null_std == pytest.approx(null.std, rel=0.1)
    for level in (0.5, 0.9, 0.95, 0.99):
        q = np.quantile(perm.null_distribution, level)
        assert null.p_value(q) == pytest.approx(1 - level, abs=0.03)


# ------------------------------------------------------------------ intervals
def test_bootstrap_ranks_each_resample_and_its_sd_matches_the_estimators_spread():
    nu, rho, n = 3, 0.5, 300
    t = stats.multivariate_t(shape=np.array([[1, rho], [rho, 1.0]]), df=nu)
    draws = [t.rvs(n, random_state=np.random.default_rng(100 + i)) for i in range(150)]
    spread = np.std([gaussian_copula_mi(s[:, 0], s[:, 1]) for s in draws], ddof=1)
    s = draws[0]
    x, y = s[:, :1], s[:, 1:]
    idx = resample_indices(n, 200, "copula", np.random.default_rng(9))
    reps = mi_replicates(x, y, "copula", idx)
    with runs_checked():  # a bootstrap resample repeats runs on purpose (the estimator refuses them otherwise)
        want = [gaussian_copula_mi(x[i], y[i]) for i in idx[:5]]  # the estimator on each resample
    np.testing.assert_allclose(reps[:5], want, rtol=1e-10)
    assert 0.7 < reps.std(ddof=1) / spread < 1.4
    estimate, low, high = mi_interval(x, y, "copula", n_resamples=50)
    assert estimate == pytest.approx(gaussian_copula_mi(x, y), abs=1e-12) and low < estimate < high


# ------------------------------------------------------------------ analyze, regime, plots, command line
def monotone_clients(n_runs=400, seed=10):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, n_runs, 2))
    b = 0.7 * a + np.sqrt(1 - 0.49) * rng.standard_normal((2, n_runs, 2))
    return {"a": np.sinh(2 * a), "b": b**3}


def test_analyze_gives_copula_rows_with_their_interval_analytic_null_and_regime(tmp_path):
    dump = ParameterDump.from_arrays(tmp_path / "d", monotone_clients(), checkpoints=[0, 1])
    rows = analyze(dump, estimators=["gaussian", "ksg", "copula"], metrics=[], gaussian_null="analytic")
    copula = rows.select("mi_copula", "a", "b")
    for t, row in enumerate(copula):
        x, y = (np.asarray(dump.samples(c, index=t), float) for c in ("a", "b"))
        assert row["value"] == pytest.approx(gaussian_copula_mi(x, y), abs=1e-12)
        assert row["value"] == pytest.approx(-np.log2(1 - 0.49), rel=0.1)  # 2 x 0.5 log2(1/(1 - 0.7^2))
        assert "analytic null (exact)" in row["note"] and 0 <= row["p_value"] <= 1e-3
        assert row["ci_low"] < row["value"] < row["ci_high"]
    assert len(rows.select("delta_mi_copula", "a", "b")) == 1
    # Adding the copula estimator leaves the other rows as they were, to the bit.
    assert [r for r in rows if "copula" not in r["quantity"]] == analyze(dump, estimators=["gaussian", "ksg"], metrics=[],
                                                                             gaussian_null="analytic")
    assert estimate_regime_note("copula", 400, 200, 3.4) == \
        "outside calibration: shrinkage estimate (400 runs <= 2 x 200 joint dims)"


def test_copula_rows_with_few_runs_are_shrunk_and_say_so(tmp_path):
    rng = np.random.default_rng(11)
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": rng.standard_normal((1, 30, 10)),
                                                       "b": rng.standard_normal((1, 30, 10))})
    row, = analyze(dump, estimators=["copula"], metrics=[], ci_resamples=0)
    assert "ledoit-wolf shrinkage: 30 runs <= 2 x 20 joint dimensions" in row["note"]
    assert "outside calibration: shrinkage estimate" in row["note"]


def test_plots_draw_a_copula_panel_named_by_the_registry(tmp_path):
    dump = ParameterDump.from_arrays(tmp_path / "d", monotone_clients(), checkpoints=[0, 1])
    rows = analyze(dump, estimators=["gaussian", "copula"], metrics=[], ci_resamples=0)
    fig = figure_mi(rows)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[2] == "MI, Gaussian copula: bias-corrected" and len(fig.axes) == 4
    plt.close(fig)
    assert figure_title(rows).endswith("Gaussian MI bias-corrected; Gaussian copula MI bias-corrected")


def test_command_line_analyzes_and_estimates_with_copula(tmp_path, capsys):
    dump = ParameterDump.from_arrays(tmp_path / "d", monotone_clients(), checkpoints=[0, 1])
    out = tmp_path / "t.csv"
    assert main(["-q", "analyze", str(dump.path), "--out", str(out), "--estimators", "copula", "--metrics",
                 "euclidean", "--no-progress"]) == 0
    assert {r["quantity"] for r in AnalysisTable.read(out)} >= {"mi_copula", "delta_mi_copula"}
    x, y = tmp_path / "x.csv", tmp_path / "y.csv"
    data = monotone_clients(200)
    np.savetxt(x, data["a"][0], delimiter=",")
    np.savetxt(y, data["b"][0], delimiter=",")
    capsys.readouterr()
    assert main(["estimate", str(x), str(y), "--estimator", "copula", "--units", "nats"]) == 0
    want = gaussian_copula_mi(np.loadtxt(x, delimiter=","), np.loadtxt(y, delimiter=","), units="nats")
    assert capsys.readouterr().out.startswith(f"copula MI = {want:.6g} nats (estimate): 200 runs x 4 joint dims: "
                                              "inside its calibrated regime")
    assert main(["estimate", str(x), str(y), "--estimator", "ksg", "--shrinkage", "ledoit-wolf"]) == 2
    assert "--shrinkage applies to --estimator gaussian or copula" in capsys.readouterr().err
