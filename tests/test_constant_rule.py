"""The one rule by which a parameter counts as constant (mianalysis._internal.validation.varying_columns):
exactly constant, or an sd of at most c float32 spacings of its magnitude. It is relative,
every estimator and the analysis apply it alike, and an analysis table's sidecar records it.

Known answers: a column of magnitude 1e3 whose values differ by one float32 spacing
(~6e-5) is rounding noise and is dropped, so every estimate equals the one without it; a
column of magnitude 1e-8 with an sd of 1e-12 (1e-4 relative: far above float32's 6e-8) is
real variation and is kept, so the estimate equals the one with that column rescaled to unit
scale (MI is scale invariant).
"""

import json
import warnings

import numpy as np
import pytest

from mianalysis import ConstantFeatureWarning, MarginalDistances, ParameterDump, analyze, gaussian_mi, ksg_mi
from mianalysis._internal.validation import CONSTANT_RULE, CONSTANT_SPACINGS, varying_columns
from mianalysis.analysis import sidecar_path
from mianalysis.analysis.diagnostics.gaussianity import nongaussian_share
from mianalysis.analysis.inference.intervals import mi_replicates
from mianalysis import gaussian_copula_mi as copula_mi

RNG = np.random.default_rng(30)
N = 400
X = RNG.standard_normal((N, 2))
Z = RNG.standard_normal(N)
Y = np.column_stack([0.6 * X[:, 0] + 0.8 * RNG.standard_normal(N), 0.7 * Z + 0.7 * RNG.standard_normal(N)])
SPACING_1E3 = float(np.spacing(np.float32(1e3)))
ROUNDING = (np.float32(1e3) + np.float32(SPACING_1E3) * RNG.integers(-1, 2, N).astype(np.float32)).astype(np.float64)
SMALL = 1e-8 + 1e-12 * Z  # real variation at a small magnitude, carrying Z's information about Y


def test_rounding_noise_at_1e3_is_constant_and_small_real_variation_is_not():
    assert np.std(ROUNDING) > 1e-5  # an absolute threshold of 1e-6 would keep it
    assert 0 < np.std(SMALL) < 1e-6  # ... and drop this one
    a = np.column_stack([ROUNDING, SMALL, np.full(N, 0.1), np.zeros(N), np.full(N, -7.25e300), X[:, 0]])
    assert varying_columns(a).tolist() == [False, True, False, False, False, True]


def test_the_threshold_is_c_spacings_of_the_magnitude_float32_for_float32_data():
    half = np.zeros(N)
    half[: N // 2] = 1.0  # two values: sd = half their difference
    for magnitude in (1.5 * 2.0**-100, 1.5e-8, 1.5, 1.5e3, 1.5e30):
        m = np.float32(magnitude)
        spacing = float(np.spacing(m))
        below = float(m) + half * 7 * spacing  # float32 numbers, sd 3.5 spacings <= 4
        above = float(m) + half * 9 * spacing  # sd 4.5 spacings
        assert (below.astype(np.float32) == below).all() and (above.astype(np.float32) == above).all()
        assert varying_columns(np.column_stack([below, above])).tolist() == [False, True], magnitude
        f64 = float(m) + half * 7 * spacing * (1 + 2.0**-30)  # not float32 numbers: float64's spacing applies
        assert varying_columns(f64[:, None]).tolist() == [True], magnitude
    rounding64 = 0.3 + half * 4 * np.spacing(0.3)  # float64 rounding of 0.3 only
    assert varying_columns(rounding64[:, None]).tolist() == [False]


def test_float64_data_far_from_zero_keep_their_variation():
    for offset in (1e8, -1e8, 3e10):
        assert varying_columns(X + offset).all()
        assert gaussian_mi(X + offset, Y) == pytest.approx(gaussian_mi(X, Y), rel=1e-6)


def test_a_huge_magnitude_beyond_float32_is_judged_without_overflow():
    a = 1e300 * (1 + 1e-3 * np.column_stack([Z, np.zeros(N)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert varying_columns(a).tolist() == [True, False]


def _full_rule(a):
    """The rule as CONSTANT_RULE states it, every column through the sd and the float32 check."""
    a = np.asarray(a, dtype=np.float64)
    lo, hi = a.min(axis=0), a.max(axis=0)
    single = (a.astype(np.float32).astype(np.float64) == a).all(axis=0)
    _, exponent = np.frexp(np.maximum(np.abs(lo), np.abs(hi)))
    return (hi > lo) & (a.std(axis=0) > CONSTANT_SPACINGS * np.ldexp(1.0, exponent - np.where(single, 24, 53)))


@pytest.mark.parametrize("n", [2, 3, 50, 2001])
def test_the_range_shortcut_gives_the_full_rules_answer_at_the_threshold(n):
    # varying_columns decides a column from its range alone where the range forces an sd far above
    # the threshold; the least sd a range R allows is R / sqrt(2 n) (its two ends, the rest at
    # their mean). Columns of that least-sd shape and of a single outlier, with sds from 1/4 to 4
    # times the threshold, float32 and float64, at several magnitudes, get the full rule's answer.
    rng = np.random.default_rng(n)
    columns = []
    for magnitude in (1.5 * 2.0**-100, 0.75, 1.5e3, 1.5e30):
        spacing = float(np.spacing(np.float32(magnitude)))
        for factor in np.geomspace(0.25, 4.0, 23) * (1 + 0.01 * rng.standard_normal(23)):
            least = np.full(n, float(magnitude))
            half_range = factor * CONSTANT_SPACINGS * spacing * np.sqrt(2.0 * n) / 2
            least[0], least[-1] = magnitude - half_range, magnitude + half_range
            outlier = np.full(n, float(magnitude))
            outlier[n // 2] += factor * CONSTANT_SPACINGS * spacing * np.sqrt(n)
            columns += [least, outlier, least.astype(np.float32).astype(np.float64)]
    a = np.column_stack(columns)
    decided = _full_rule(a)
    assert decided.any() and not decided.all()  # both answers occur
    np.testing.assert_array_equal(varying_columns(a), decided)
    single = a.astype(np.float32)
    np.testing.assert_array_equal(varying_columns(single), _full_rule(single))
    integers = rng.integers(-2, 3, (n, 4))
    np.testing.assert_array_equal(varying_columns(integers), _full_rule(integers))


def test_the_range_shortcut_leaves_infinite_and_overflowing_ranges_to_the_full_rule():
    # An infinite value gives an sd of NaN, so the rule calls the column constant, as it always
    # did; a finite column whose range overflows float64 (-1e308 to 1e308) varies.
    a = np.array([[0.0, -np.inf, 1.0, -1e308], [np.inf, np.inf, 1.0, 1e308], [0.0, 0.0, 1.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert varying_columns(a).tolist() == [False, False, False, True]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="`a` must be a 2-D array"):
        varying_columns(np.zeros(3))


ESTIMATES = {
    "gaussian": lambda x, y: gaussian_mi(x, y),
    "ksg": lambda x, y: ksg_mi(x, y, random_state=0),
    "copula": lambda x, y: copula_mi(x, y),
}


@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_every_estimator_drops_rounding_noise_as_a_constant(name):
    with pytest.warns(ConstantFeatureWarning, match=r"dropped 1 constant feature\(s\) \(x\[:, 1\]\).*float32"):
        got = ESTIMATES[name](np.column_stack([X[:, 0], ROUNDING, X[:, 1]]), Y)
    assert got == pytest.approx(ESTIMATES[name](X, Y), abs=1e-12)


@pytest.mark.parametrize("name", ["gaussian", "copula"])
def test_every_estimator_keeps_small_real_variation(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantFeatureWarning)
        got = ESTIMATES[name](np.column_stack([X[:, 0], SMALL]), Y)
    assert got == pytest.approx(ESTIMATES[name](np.column_stack([X[:, 0], Z]), Y), rel=1e-9)
    assert got > ESTIMATES[name](X[:, :1], Y) + 0.1  # Z's information is there


def test_ksg_keeps_small_real_variation():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantFeatureWarning)
        got = ksg_mi(np.column_stack([X[:, 0], SMALL]), Y, random_state=0, standardize=True)
    assert got > ksg_mi(X[:, :1], Y, random_state=0, standardize=True) + 0.1


def test_marginal_distances_drop_rounding_noise_before_standardising():
    with_noise = MarginalDistances.of(np.column_stack([X, ROUNDING]), noise=0, standardize=True)
    without = MarginalDistances.of(X, noise=0, standardize=True)
    assert with_noise.n_features == 2
    np.testing.assert_array_equal(with_noise.matrix, without.matrix)
    only_noise = MarginalDistances.of(ROUNDING[:, None], noise=0, standardize=True)
    assert only_noise.n_features == 0 and not only_noise.matrix.any()


def test_resamples_and_the_gaussianity_diagnostic_apply_the_same_rule():
    idx = RNG.integers(0, N, size=(5, N))
    got = mi_replicates(np.column_stack([X, ROUNDING]), Y, "gaussian", idx)
    np.testing.assert_allclose(got, mi_replicates(X, Y, "gaussian", idx), rtol=1e-12)
    share = nongaussian_share(np.column_stack([X, ROUNDING]))
    assert share.n_tested == 2


def test_analyze_drops_float32_rounding_noise_and_the_sidecar_records_the_rule(tmp_path):
    x = np.column_stack([X, ROUNDING]).astype(np.float32)[None]
    y = np.column_stack([Y, SMALL]).astype(np.float32)[None]
    table = tmp_path / "t.csv"
    rows = analyze(ParameterDump.from_arrays(tmp_path / "d", [x, y]), estimators=("gaussian",), out=table)
    exact = x.copy()
    exact[..., 2] = 1e3  # the rounding noise made an exact constant: the same rows
    clean = analyze(ParameterDump.from_arrays(tmp_path / "e", [exact, y]), estimators=("gaussian",))
    row, want = rows.select("mi_gaussian")[0], clean.select("mi_gaussian")[0]
    assert "dropped 1 constant parameters" in row["note"] and "dropped 1 constant parameters" in want["note"]
    assert row["value"] == pytest.approx(gaussian_mi(x[0, :, :2], y[0]), rel=1e-9)  # SMALL is kept
    assert (row["value"], row["ci_low"], row["ci_high"]) == pytest.approx((want["value"], want["ci_low"],
                                                                            want["ci_high"]), rel=1e-9)
    recorded = json.loads(sidecar_path(table).read_text())["settings"]["constant_rule"]
    assert recorded == CONSTANT_RULE and recorded["c"] == CONSTANT_SPACINGS
    assert "np.spacing(np.float32(max |x|))" in recorded["rule"]
