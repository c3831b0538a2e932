"""The Gaussian (and copula) permutation null from the marginal blocks' factors against
recomputing :func:`gaussian_mi` on every shuffle (the reference: what each shuffle cost
before), in the plain and the Ledoit-Wolf regimes."""

import warnings

import numpy as np
import pytest

import mianalysis.estimators.gaussian as gaussian_module
from mianalysis import ConstantFeatureWarning, gaussian_copula_mi, gaussian_mi, mi_permutation_test
from mianalysis.estimators.copula import normal_scores
from mianalysis.estimators.gaussian import gaussian_permutation_estimates

RTOL = 1e-9


def recomputed(x, y, perms, **kwargs):
    """The reference: gaussian_mi of every shuffle, from scratch."""
    return np.array([gaussian_mi(x, y[p], **kwargs) for p in perms])


def dependent(n, dx, dy, seed, strength=0.5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx))
    y = rng.standard_normal((n, dy))
    m = min(dx, dy)
    y[:, :m] += strength * x[:, :m]
    return x, y, [rng.permutation(n) for _ in range(6)]


def assert_same_values(fast, slow):
    # relative to each value, and to 1e-13 bits absolute where a value is ~0 (an estimate
    # of exactly 0 where the shrinkage intensity is 1)
    np.testing.assert_allclose(fast, slow, rtol=RTOL, atol=1e-13)


@pytest.mark.parametrize("n, dx, dy", [(300, 3, 5), (300, 6, 2), (200, 1, 1), (120, 20, 25)])
@pytest.mark.parametrize("units", ["bits", "nats"])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_plain_regime_equals_recomputing_each_shuffle(n, dx, dy, units, bias_correction):
    x, y, perms = dependent(n, dx, dy, seed=dx + 10 * dy)
    kwargs = dict(units=units, bias_correction=bias_correction)
    assert_same_values(gaussian_permutation_estimates(x, y, perms, **kwargs), recomputed(x, y, perms, **kwargs))


# n > d, n between d/2 and d, and n below each side's dimension (ranks n - 1 < d_x, d_y)
@pytest.mark.parametrize("n, dx, dy", [(300, 5, 3), (300, 3, 5), (60, 30, 50), (50, 60, 20), (25, 40, 30)])
@pytest.mark.parametrize("units", ["bits", "nats"])
def test_shrinkage_regime_equals_recomputing_each_shuffle(n, dx, dy, units):
    x, y, perms = dependent(n, dx, dy, seed=n + dx)
    kwargs = dict(units=units, shrinkage="ledoit-wolf")
    assert_same_values(gaussian_permutation_estimates(x, y, perms, **kwargs), recomputed(x, y, perms, **kwargs))


def test_duplicated_features_and_runs_with_shrinkage():
    x, y, perms = dependent(40, 20, 25, seed=3)
    x[:, 5] = x[:, 4]  # a duplicated feature: the x block is singular, shrinkage is not
    y[:, 7] = 2.0 * y[:, 0] - y[:, 1]
    x[10], y[10] = x[3], y[3]  # a duplicated run
    kwargs = dict(shrinkage="ledoit-wolf")
    assert_same_values(gaussian_permutation_estimates(x, y, perms, **kwargs), recomputed(x, y, perms, **kwargs))


@pytest.mark.parametrize("shrinkage", [None, "ledoit-wolf"])
def test_constant_features_are_dropped_as_gaussian_mi_drops_them(shrinkage):
    x, y, perms = dependent(200, 4, 3, seed=4)
    x[:, 1] = 7.0
    with pytest.warns(ConstantFeatureWarning):
        fast = gaussian_permutation_estimates(x, y, perms, shrinkage=shrinkage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantFeatureWarning)
        assert_same_values(fast, recomputed(x, y, perms, shrinkage=shrinkage))
        y[:, :] = 1.0  # no feature of y varies: MI 0 for every shuffle
        assert np.array_equal(gaussian_permutation_estimates(x, y, perms), np.zeros(6))


def test_extreme_magnitudes_as_gaussian_mi():
    x, y, perms = dependent(200, 3, 4, seed=5)
    x, y = 1e200 * x, 1e-200 * y
    for shrinkage in (None, "ledoit-wolf"):
        fast = gaussian_permutation_estimates(x, y, perms, shrinkage=shrinkage)
        assert_same_values(fast, recomputed(x, y, perms, shrinkage=shrinkage))


@pytest.mark.parametrize("estimator", ["gaussian", "copula"])
@pytest.mark.parametrize("shrinkage", [None, "ledoit-wolf"])
def test_permutation_test_keeps_its_shuffles_and_p_values(estimator, shrinkage):
    """The same random stream as the loop of gaussian_mi it replaces: the same null to
    rounding, the same p-value and the estimate to the bit."""
    n, dx, dy, strength = (150, 4, 3, 0.15) if shrinkage is None else (40, 15, 13, 0.1)  # 40 <= 2 x 28
    x, y, _ = dependent(n, dx, dy, seed=6, strength=strength)
    kwargs = {} if shrinkage is None else {"shrinkage": shrinkage}
    res = mi_permutation_test(x, y, estimator=estimator, n_permutations=60, random_state=9, **kwargs)
    sx, sy = (normal_scores(x), normal_scores(y)) if estimator == "copula" else (x, y)
    rng = np.random.default_rng(9)
    null = np.array([gaussian_mi(sx, sy[rng.permutation(n)], **kwargs) for _ in range(60)])
    observed = (gaussian_copula_mi if estimator == "copula" else gaussian_mi)(x, y, **kwargs)
    assert res.estimate == observed
    assert_same_values(res.null_distribution, null)
    assert res.p_value == (1 + np.count_nonzero(null >= observed)) / 61
    assert 0.03 < res.p_value < 0.98  # shuffles on either side of the estimate: the p-value is tested


def test_permutation_test_computes_the_joint_matrix_once(monkeypatch):
    """Only the observed estimate recomputes the joint correlation matrix."""
    calls = []
    original = gaussian_module._joint_correlation
    monkeypatch.setattr(gaussian_module, "_joint_correlation", lambda *a: calls.append(1) or original(*a))
    x, y, _ = dependent(100, 30, 30, seed=7)  # shrinkage
    mi_permutation_test(x, y, estimator="gaussian", n_permutations=20, random_state=0, shrinkage="ledoit-wolf")
    x, y, _ = dependent(300, 4, 3, seed=7)
    mi_permutation_test(x, y, estimator="gaussian", n_permutations=20, random_state=0)
    assert len(calls) == 2


@pytest.mark.parametrize("shrinkage", [None, "ledoit-wolf"])
def test_recomputed_shuffles_are_gaussian_mi_to_the_bit(monkeypatch, shrinkage):
    """A shuffle outside the margins is recomputed by gaussian_mi itself."""
    monkeypatch.setattr(gaussian_module, "_PD_MARGIN", np.inf)
    monkeypatch.setattr(gaussian_module, "_MIN_INTENSITY", 2.0)
    x, y, perms = dependent(100, 3, 4, seed=8)
    fast = gaussian_permutation_estimates(x, y, perms, shrinkage=shrinkage)
    assert np.array_equal(fast, recomputed(x, y, perms, shrinkage=shrinkage))


def test_a_singular_shuffle_raises_gaussian_mis_error():
    x, _, _ = dependent(50, 3, 3, seed=9)
    y = x @ np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 0.0]])  # in the span of x: the joint is singular
    perms = [np.random.default_rng(0).permutation(50), np.arange(50)]
    with pytest.raises(ValueError, match=r"the joint covariance matrix \(5x5\) is not positive definite: features are "
                                         r"linearly dependent"):
        gaussian_permutation_estimates(x, y, perms)
    values = gaussian_permutation_estimates(x, y, perms, shrinkage="ledoit-wolf")  # shrinkage has no such edge
    assert_same_values(values, recomputed(x, y, perms, shrinkage="ledoit-wolf"))


@pytest.mark.parametrize("workers", [1, 3])
def test_values_do_not_depend_on_the_number_of_threads(monkeypatch, workers):
    x, y, perms = dependent(400, 40, 30, seed=10)
    kwargs = [{}, {"shrinkage": "ledoit-wolf"}]
    before = [gaussian_permutation_estimates(x, y, perms, **kw) for kw in kwargs]
    monkeypatch.setattr(gaussian_module.os, "cpu_count", lambda: workers)
    for kw, values in zip(kwargs, before):
        assert np.array_equal(gaussian_permutation_estimates(x, y, perms, **kw), values)


def test_permutations_are_checked():
    x, y, perms = dependent(20, 2, 2, seed=11)
    assert gaussian_permutation_estimates(x, y, []).shape == (0,)
    for bad, what in (([np.arange(19)], r"shape \(19,\)"), ([np.zeros(20, dtype=int)], "shape"),
                      ([perms[0], np.arange(20) + 1], r"permutations\[1\]"),
                      ([np.arange(20) - 1], "dtype int"), ([np.arange(20.0)], "dtype float64")):
        with pytest.raises(ValueError, match=r"each of `permutations` must be a permutation of range\(20\).*" + what):
            gaussian_permutation_estimates(x, y, bad)
    with pytest.raises(ValueError, match="`shrinkage` must be one of"):
        gaussian_permutation_estimates(x, y, perms, shrinkage="oas")


def test_copula_values_of_each_shuffle_are_those_of_ranking_it_again():
    rng = np.random.default_rng(12)
    z = rng.standard_normal((90, 5))
    x, y = np.exp(z[:, :2]), (z[:, 2:] + 0.4 * z[:, :3]) ** 3
    res = mi_permutation_test(x, y, estimator="copula", n_permutations=15, random_state=2, shrinkage="ledoit-wolf")
    rng = np.random.default_rng(2)
    again = [gaussian_copula_mi(x, y[rng.permutation(90)], shrinkage="ledoit-wolf") for _ in range(15)]
    assert_same_values(res.null_distribution, again)


def test_a_generator_of_permutations_gives_the_same_values():
    x, y, perms = dependent(100, 3, 4, seed=13)
    perms = perms * 5  # more than a chunk on any thread count used here
    drawn = []

    def lazily():
        for perm in perms:
            drawn.append(1)
            yield perm

    values = gaussian_permutation_estimates(x, y, lazily())
    assert np.array_equal(values, gaussian_permutation_estimates(x, y, perms)) and len(drawn) == 30
    with pytest.raises(ValueError, match=r"permutations\[30\] is not"):
        gaussian_permutation_estimates(x, y, perms + [np.arange(99)])


@pytest.mark.parametrize("kwargs", [{}, {"shrinkage": "ledoit-wolf"}, {"bias_correction": False, "units": "nats"}])
def test_single_precision_cross_products_agree_with_float64_and_with_threads(monkeypatch, kwargs):
    x, y, perms = dependent(2500, 30, 20, seed=14, strength=0.2)
    exact = gaussian_permutation_estimates(x, y, perms, **kwargs)
    single = gaussian_permutation_estimates(x, y, perms, cross_precision="float32", **kwargs)
    assert not np.array_equal(single, exact)  # summed in float32: not the float64 values to the bit
    # float32 sums of 2,500 unit-norm products: the values agree to ~1e-6 of the estimate
    np.testing.assert_allclose(single, exact, rtol=1e-4, atol=1e-6)
    monkeypatch.setattr(gaussian_module.os, "cpu_count", lambda: 3)
    assert np.array_equal(gaussian_permutation_estimates(x, y, perms, cross_precision="float32", **kwargs), single)
    with pytest.raises(ValueError, match="`cross_precision` must be one of 'float64', 'float32'; got 'half'"):
        gaussian_permutation_estimates(x, y, perms, cross_precision="half")


@pytest.mark.parametrize("estimator", ["gaussian", "copula"])
@pytest.mark.parametrize("strength", [0.0, 0.05])
def test_a_single_precision_test_compares_the_data_computed_as_its_shuffles(estimator, strength):
    """From 2,000 runs on the test sums its cross products in float32 ("auto"); the p-value
    then counts the shuffles at or above the unshuffled data's float32 statistic (an exact
    permutation test of that statistic), the estimate stays float64, and the p-value is the
    float64 test's wherever no shuffle lies within float32 rounding of the data."""
    from mianalysis.estimators.significance import SINGLE_PRECISION_RUNS

    n = SINGLE_PRECISION_RUNS
    x, y, _ = dependent(n, 12, 10, seed=15, strength=strength)
    auto = mi_permutation_test(x, y, estimator=estimator, n_permutations=40, random_state=3)
    exact = mi_permutation_test(x, y, estimator=estimator, n_permutations=40, random_state=3, cross_precision="float64")
    assert auto.estimate == exact.estimate
    np.testing.assert_allclose(auto.null_distribution, exact.null_distribution, rtol=1e-4, atol=1e-6)
    assert not np.array_equal(auto.null_distribution, exact.null_distribution)
    data = normal_scores(x) if estimator == "copula" else x, normal_scores(y) if estimator == "copula" else y
    statistic = gaussian_permutation_estimates(*data, [np.arange(n)], cross_precision="float32")[0]
    assert auto.p_value == (1 + np.count_nonzero(auto.null_distribution >= statistic)) / 41
    gap = np.min(np.abs(exact.null_distribution - exact.estimate))
    assert gap > 1e-6 and auto.p_value == exact.p_value  # float32 moves the values by ~1e-8 here
    if strength:
        assert auto.p_value == 1 / 41
    below = mi_permutation_test(x[:n - 1], y[:n - 1], estimator=estimator, n_permutations=5, random_state=3)
    assert np.array_equal(below.null_distribution, mi_permutation_test(
        x[:n - 1], y[:n - 1], estimator=estimator, n_permutations=5, random_state=3,
        cross_precision="float64").null_distribution)
    with pytest.raises(ValueError, match="`cross_precision` must be one of 'auto', 'float64', 'float32'"):
        mi_permutation_test(x, y, estimator=estimator, cross_precision="float16")


@pytest.mark.parametrize("n, dx, kwargs", [(2000, 12, {}), (300, 5, {"units": "nats"}),
                                           (60, 40, {"shrinkage": "ledoit-wolf"})])
def test_the_test_of_a_known_estimate_is_mi_permutation_test_without_the_estimate(n, dx, kwargs):
    from mianalysis.estimators.significance import gaussian_permutation_test

    x, y, _ = dependent(n, dx, 10, seed=16, strength=0.1)
    for estimator, (a, b) in (("gaussian", (x, y)), ("copula", (normal_scores(x), normal_scores(y)))):
        want = mi_permutation_test(x, y, estimator=estimator, n_permutations=12, random_state=4, **kwargs)
        got = gaussian_permutation_test(a, b, gaussian_mi(a, b, **kwargs), n_permutations=12, random_state=4,
                                        estimator=estimator, **kwargs)
        assert np.array_equal(got.null_distribution, want.null_distribution)
        assert (got.estimate, got.p_value, got.estimator) == (want.estimate, want.p_value, estimator)
    with pytest.raises(ValueError, match="`shrinkage` must be one of"):
        gaussian_permutation_test(x, y, 0.0, shrinkage="oas")
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['k'\\]"):
        gaussian_permutation_test(x, y, 0.0, k=3)


class _IdentityFirst(np.random.Generator):
    """A Generator whose first permutation is the identity: that shuffle is the data itself."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))
        self.first = True

    def permutation(self, x):
        if self.first and isinstance(x, (int, np.integer)):
            self.first = False
            return np.arange(x)
        return super().permutation(x)


def test_the_p_value_compares_the_shuffles_with_the_statistic_not_the_estimate():
    from mianalysis.estimators.significance import PermutationTestResult

    # a null value between the statistic and the estimate counts against the statistic only
    result = PermutationTestResult.from_null(1.0, [0.999999, 0.5], "gaussian", statistic=0.999998)
    assert result.p_value == 2 / 3 and result.estimate == 1.0
    assert PermutationTestResult.from_null(1.0, [0.999999, 0.5], "gaussian").p_value == 1 / 3
    # A shuffle that is the data has the data's float32 statistic exactly: it ties and counts
    # (p >= 2 / 13), which comparing with the float64 estimate need not give.
    # Data whose float32 statistic falls below the float64 estimate (the sign of the rounding
    # depends on the data and the CPU's kernels: the first such seed is taken), where
    # comparing with the estimate would not count the tie.
    for seed in range(17, 60):
        x, y, _ = dependent(2000, 12, 10, seed=seed, strength=0.3)
        statistic = gaussian_permutation_estimates(x, y, [np.arange(2000)], cross_precision="float32")[0]
        if statistic < gaussian_mi(x, y):
            break
    else:
        pytest.fail("no data with the float32 statistic below the estimate")
    res = mi_permutation_test(x, y, estimator="gaussian", n_permutations=12, random_state=_IdentityFirst(5))
    assert res.null_distribution[0] == statistic < res.estimate
    assert res.p_value == 2 / 13  # the identity ties; no real shuffle reaches dependent data
