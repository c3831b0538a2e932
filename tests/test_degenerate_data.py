"""Inputs where an estimator could return a confident wrong number: constant features,
extreme magnitudes, and float32 on data far from 0 compared with its spread.

Rules tested here (documented in the docstrings' Notes):
- a constant feature is dropped with a ConstantFeatureWarning naming it (it carries no
  information, so the MI is unchanged); when no feature of x or of y varies the MI is 0,
  from gaussian_mi, ksg_mi, mi_permutation_test (null 0, p = 1) and analyze alike;
- MI is scale invariant: estimates on data scaled by 1e-300 ... 1e300 equal the unscaled ones;
- float32 KSG stays within 1e-3 nats of float64 whatever the data's location;
- paired distances never overflow to inf on finite input (or say why they cannot be stored).
"""

import contextlib
import warnings

import numpy as np
import pytest

from mianalysis import (ConstantFeatureWarning, OutsideCalibrationWarning, ParameterDump, analyze, gaussian_mi, ksg_mi,
                        mean_paired_distance, mi_permutation_test, paired_distances)

RNG = np.random.default_rng(11)
X = RNG.standard_normal((300, 2))
Y = 0.6 * X + 0.8 * RNG.standard_normal((300, 2))
SCALES = [1e-300, 1e-200, 1e-30, 1e30, 1e200, 1e300]


@contextlib.contextmanager
def no_warnings():
    """No warning at all, numpy's overflow and underflow warnings included (but the
    calibration warning: 300 runs are fewer than KSG was calibrated for, and shrinkage is
    never calibrated; tests/test_mi_judgement.py checks that warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", OutsideCalibrationWarning)
        yield


# ---------------------------------------------------------------------- constant features
ESTIMATES = {
    "gaussian": lambda x, y: gaussian_mi(x, y),
    "gaussian-lw": lambda x, y: gaussian_mi(x, y, shrinkage="ledoit-wolf"),
    "ksg1": lambda x, y: ksg_mi(x, y, noise=0),
    "ksg2": lambda x, y: ksg_mi(x, y, noise=0, algorithm=2),
    "ksg-noise": lambda x, y: ksg_mi(x, y, random_state=0),
    "ksg-f32": lambda x, y: ksg_mi(x, y, noise=0, dtype="float32"),
    "ksg-cache": lambda x, y: ksg_mi(x, y, noise=0, distance_cache=True),
    "perm-ksg": lambda x, y: mi_permutation_test(x, y, n_permutations=3, random_state=0, noise=0).estimate,
    "perm-ksg-direct": lambda x, y: mi_permutation_test(x, y, n_permutations=3, random_state=0, noise=0,
                                                        distance_cache=False).estimate,
    "perm-gaussian": lambda x, y: mi_permutation_test(x, y, estimator="gaussian", n_permutations=3,
                                                      random_state=0).estimate,
}


@pytest.mark.parametrize("name", sorted(ESTIMATES))
@pytest.mark.parametrize("value", [0.1, 3.0, -7.25e300, 1e-300])
def test_constant_feature_is_dropped_with_a_warning_naming_it(name, value):
    estimate = ESTIMATES[name]
    x = np.column_stack([X[:, 0], np.full(len(X), value), X[:, 1]])
    with pytest.warns(ConstantFeatureWarning, match=r"dropped 1 constant feature\(s\) \(x\[:, 1\]\)"):
        got = estimate(x, Y)
    with no_warnings():
        want = estimate(X, Y)
    assert got == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("name", sorted(ESTIMATES))
@pytest.mark.parametrize("side", ["x", "y", "both"])
def test_no_varying_feature_gives_exactly_zero(name, side):
    x = np.full((300, 2), 4.0) if side in ("x", "both") else X
    y = np.full((300, 3), -1.0) if side in ("y", "both") else Y
    with pytest.warns(ConstantFeatureWarning, match="so the mutual information is 0"):
        assert ESTIMATES[name](x, y) == 0.0


@pytest.mark.parametrize("estimator", ["ksg", "gaussian"])
@pytest.mark.parametrize("distance_cache", [True, False])
def test_permutation_test_of_a_constant_is_null_zero_pvalue_one(estimator, distance_cache):
    with pytest.warns(ConstantFeatureWarning):
        res = mi_permutation_test(X, np.ones(300), estimator=estimator, n_permutations=7, random_state=0,
                                  distance_cache=distance_cache)
    assert res.estimate == 0.0 and res.p_value == 1.0 and res.null_mean == 0.0 and res.null_std == 0.0
    np.testing.assert_array_equal(res.null_distribution, np.zeros(7))


def test_constant_input_still_checks_every_argument():
    with pytest.raises(ValueError, match=r"`k` must be in \[1, 299\]"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mi_permutation_test(X, np.ones(300), k=300)
    with pytest.raises(ValueError, match="`shrinkage` must be one of"):
        mi_permutation_test(X, np.ones(300), estimator="gaussian", shrinkage="oas")
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['k'\]"):
        mi_permutation_test(X, np.ones(300), estimator="gaussian", k=3)


@pytest.mark.parametrize("permutations", [0, 4])
@pytest.mark.parametrize("distance_cache", [True, False])
def test_analyze_constant_client_is_zero_like_the_estimators(tmp_path, permutations, distance_cache):
    rng = np.random.default_rng(5)
    moving = rng.standard_normal((2, 40, 3)).astype(np.float32)
    fixed = np.full((2, 40, 3), 0.25, dtype=np.float32)  # e.g. every run from one fixed point
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": moving, "b": fixed, "c": fixed.copy()})
    rows = analyze(dump, metrics=(), n_permutations=permutations, distance_cache=distance_cache)
    for quantity in ("mi_gaussian", "mi_ksg"):
        for a, b in (("a", "b"), ("b", "c")):  # a constant with a moving client, and with an identical constant
            for row in rows.select(quantity, a, b):
                assert row["value"] == 0.0, row
                assert "constant across runs: MI is 0" in row["note"]
                if permutations:
                    assert row["p_value"] == 1.0 and row["null_mean"] == 0.0 and row["null_std"] == 0.0
                else:
                    assert np.isnan(row["p_value"])


def test_analyze_identical_varying_parameters_are_still_infinite(tmp_path):
    rng = np.random.default_rng(6)
    same = rng.standard_normal((1, 30, 3)).astype(np.float32)
    other = same.copy()
    other[..., 1] = 2.0  # differs only in a constant parameter
    same[..., 1] = 1.0
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": same, "b": other})
    row = analyze(dump, estimators=["gaussian", "ksg"], metrics=()).select("mi_gaussian")[0]
    assert row["value"] == np.inf and "identical samples" in row["note"] and "dropped 2 constant" in row["note"]


# ---------------------------------------------------------------------- magnitudes
KSG_SETTINGS = {
    "float64": {},
    "float64-alg2": {"algorithm": 2},
    "float64-cache": {"distance_cache": True},
    "float32": {"dtype": "float32"},
    "float32-alg2-cache": {"dtype": "float32", "algorithm": 2, "distance_cache": True},
}


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("setting", sorted(KSG_SETTINGS))
def test_ksg_is_scale_invariant_at_any_magnitude(scale, setting):
    kwargs = KSG_SETTINGS[setting]
    want = ksg_mi(X, Y, random_state=3, **kwargs)
    with no_warnings():
        got = ksg_mi(scale * X, scale * Y, random_state=3, **kwargs)
    assert got == pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("scale", [1e-300, 1e300])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_backend_is_scale_invariant(scale, dtype):
    pytest.importorskip("torch")
    want = ksg_mi(X, Y, random_state=3, dtype=dtype)
    assert ksg_mi(scale * X, scale * Y, random_state=3, dtype=dtype, backend="torch", device="cpu") == \
        pytest.approx(want, abs=1e-9)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("estimator, kwargs", [("ksg", {}), ("ksg", {"dtype": "float32"}),
                                               ("ksg", {"distance_cache": False}), ("gaussian", {})])
def test_permutation_test_is_scale_invariant(scale, estimator, kwargs):
    want = mi_permutation_test(X, Y, estimator=estimator, n_permutations=5, random_state=2, **kwargs)
    with no_warnings():
        got = mi_permutation_test(scale * X, scale * Y, estimator=estimator, n_permutations=5, random_state=2,
                                  **kwargs)
    assert got.estimate == pytest.approx(want.estimate, abs=1e-9)
    np.testing.assert_allclose(got.null_distribution, want.null_distribution, atol=1e-9)


@pytest.mark.parametrize("scale", SCALES + [1e-307, 1.5e307])
@pytest.mark.parametrize("shrinkage", [None, "ledoit-wolf"])
def test_gaussian_is_scale_invariant_at_any_magnitude(scale, shrinkage):
    want = gaussian_mi(X, Y, shrinkage=shrinkage)
    with no_warnings():
        got = gaussian_mi(scale * X, scale * Y, shrinkage=shrinkage)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_gaussian_columns_of_very_different_magnitudes():
    want = gaussian_mi(X, Y)
    scales_x, scales_y = np.array([1e-250, 1e250]), np.array([1e300, 1e-30])
    assert gaussian_mi(X * scales_x, Y * scales_y) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("offset", [1e2, 1e4, 1e6, -1e8, 3e10])
@pytest.mark.parametrize("algorithm", [1, 2])
def test_float32_within_1e3_nats_of_float64_far_from_zero(offset, algorithm):
    kwargs = dict(units="nats", random_state=0, algorithm=algorithm)
    f64 = ksg_mi(X + offset, Y, **kwargs)
    f32 = ksg_mi(X + offset, Y, dtype="float32", **kwargs)
    assert abs(f32 - f64) < 1e-3
    assert f64 == pytest.approx(ksg_mi(X, Y, **kwargs), abs=1e-9)  # a translation


@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_float32_permutation_test_far_from_zero(offset):
    kwargs = dict(n_permutations=6, random_state=1, dtype="float32", units="nats")
    cached = mi_permutation_test(X + offset, Y - offset, distance_cache=True, **kwargs)
    direct = mi_permutation_test(X + offset, Y - offset, distance_cache=False, **kwargs)
    assert cached.estimate == direct.estimate  # the preparation commutes with shuffles: same bits
    np.testing.assert_array_equal(cached.null_distribution, direct.null_distribution)
    f64 = mi_permutation_test(X + offset, Y - offset, n_permutations=6, random_state=1, units="nats")
    assert abs(cached.estimate - f64.estimate) < 1e-3


@pytest.mark.parametrize("scale", [1e-35, 1e35])
def test_analyze_is_scale_invariant_within_float32(tmp_path, scale):
    rng = np.random.default_rng(8)
    base = rng.standard_normal((1, 200, 3))
    samples = {"a": base, "b": 0.7 * base + 0.7 * rng.standard_normal((1, 200, 3))}
    plain = analyze(ParameterDump.from_arrays(tmp_path / "p", samples), metrics=())
    scaled = analyze(ParameterDump.from_arrays(tmp_path / "s", {c: s * scale for c, s in samples.items()}),
                     metrics=())
    for a, b in zip(plain, scaled):
        assert b["value"] == pytest.approx(a["value"], abs=1e-6), (a, b)


# ---------------------------------------------------------------------- distances
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev"])
def test_paired_distances_scale_with_the_data(scale, metric):
    want = paired_distances(X, Y, metric)
    with no_warnings():
        got = paired_distances(scale * X, scale * Y, metric)
    np.testing.assert_allclose(got / scale, want, rtol=1e-13)
    assert mean_paired_distance(scale * X, scale * Y, metric) / scale == pytest.approx(want.mean(), rel=1e-13)


@pytest.mark.parametrize("metric, want", [("euclidean", 2e200 * np.sqrt(3)), ("manhattan", 6e200),
                                          ("chebyshev", 2e200)])
def test_paired_distances_of_huge_and_tiny_vectors(metric, want):
    big = np.full((2, 3), 1e200)
    assert paired_distances(big, -big, metric) == pytest.approx([want, want], rel=1e-14)
    assert paired_distances(big * 1e-400, -big * 1e-400, metric) == pytest.approx([want * 1e-400] * 2, rel=1e-14)
    # Differences far below the vectors' size.
    assert paired_distances([[1.0, 1e-300]], [[1.0, 0.0]], metric) == pytest.approx([1e-300], rel=1e-14)
    # x - y itself beyond float64, its distance not.
    assert paired_distances([[1.2e308]], [[-0.5e308]], metric) == pytest.approx([1.7e308], rel=1e-14)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev"])
def test_unrepresentable_distance_is_an_error_not_inf(metric):
    with pytest.raises(ValueError, match=rf"the {metric} distance between row 1 of `x` and of `y` exceeds the "
                                         r"largest float64"):
        paired_distances([[0.0, 0.0], [1e308, 1e308]], [[1.0, 1.0], [-1e308, -1e308]], metric)


def test_mean_of_huge_distances_is_finite():
    d = mean_paired_distance(np.full((4, 1), 1.5e308), np.zeros((4, 1)))
    assert d == pytest.approx(1.5e308, rel=1e-14)
