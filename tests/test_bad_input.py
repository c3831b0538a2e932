"""One test per error message of the public estimators and distances."""

import numpy as np
import pytest

from mianalysis import gaussian_mi, ksg_mi, mean_paired_distance, mi_permutation_test, paired_distances

X = np.random.default_rng(0).standard_normal((20, 2))
Y = np.random.default_rng(1).standard_normal((20, 2))
ESTIMATORS = [ksg_mi, gaussian_mi, mi_permutation_test]


def with_nan(a, count=1):
    a = a.copy()
    a.flat[:count] = np.nan
    return a


@pytest.mark.parametrize("func", ESTIMATORS + [paired_distances, mean_paired_distance])
@pytest.mark.parametrize(
    "x, y, error, match",
    [
        (with_nan(X, 3), Y, ValueError, r"`x` contains non-finite values: 3 NaN and 0 inf of 40"),
        (X, np.where(Y > 1, np.inf, Y), ValueError, r"`y` contains non-finite values: 0 NaN and \d+ inf"),
        (X.astype(complex), Y, TypeError, "`x` must be real; got complex"),
        (X.astype(str), Y, TypeError, "`x` must be a numeric array; got dtype <U"),
        (X, np.array([{"a": 1}] * 20), TypeError, "`y` must be a numeric array; got dtype object"),
        (np.zeros((20, 2, 2)), Y, ValueError, r"`x` must be a 1-D or 2-D array .* got 3-D"),
        (np.float64(3.0), Y, ValueError, "`x` must be a 1-D or 2-D array; got a scalar"),
        (np.zeros((0, 2)), Y, ValueError, r"`x` is empty \(shape \(0, 2\)\)"),
        (X, [[1.0, 2.0], [3.0]], TypeError, "`y` could not be converted to an array"),
    ],
)
def test_bad_arrays(func, x, y, error, match):
    with pytest.raises(error, match=match):
        func(x, y)


@pytest.mark.parametrize("func", ESTIMATORS)
def test_mismatched_rows(func):
    with pytest.raises(ValueError, match="same number of samples .* got 20 and 19"):
        func(X, Y[:19])


@pytest.mark.parametrize("func", ESTIMATORS)
def test_fewer_than_two_rows(func):
    with pytest.raises(ValueError, match="need at least 2 samples .* got 1"):
        func(X[:1], Y[:1])


@pytest.mark.parametrize("func", [ksg_mi, gaussian_mi])
def test_unknown_units(func):
    with pytest.raises(ValueError, match=r"`units` must be one of \['bits', 'nats'\]; got 'bit'"):
        func(X, Y, units="bit")


@pytest.mark.parametrize("k", [0, -1, 20, 25])
def test_k_out_of_range(k):
    with pytest.raises(ValueError, match=rf"`k` must be in \[1, 19\]; got {k}"):
        ksg_mi(X, Y, k=k)


@pytest.mark.parametrize("k", [2.5, "3", True, None])
def test_k_not_an_integer(k):
    with pytest.raises(TypeError, match="`k` must be an integer"):
        ksg_mi(X, Y, k=k)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="`algorithm` must be one of 1, 2; got 3"):
        ksg_mi(X, Y, algorithm=3)


def test_unknown_dtype():
    with pytest.raises(ValueError, match="`dtype` must be one of 'float64', 'float32'; got 'float16'"):
        ksg_mi(X, Y, dtype="float16")


@pytest.mark.parametrize("noise, error, match", [(-1.0, ValueError, ">= 0"), (np.nan, ValueError, "finite"), ("a", TypeError, "real number")])
def test_bad_noise(noise, error, match):
    with pytest.raises(error, match=f"`noise` must be .*{match}"):
        ksg_mi(X, Y, noise=noise)


@pytest.mark.parametrize("random_state, error, match", [(-3, ValueError, ">= 0"), ("seed", TypeError, "None, an int"), (1.5, TypeError, "None, an int")])
def test_bad_random_state(random_state, error, match):
    with pytest.raises(error, match=f"`random_state` must be {match}"):
        ksg_mi(X, Y, random_state=random_state)


def test_unknown_shrinkage():
    with pytest.raises(ValueError, match="`shrinkage` must be one of None, 'ledoit-wolf'; got 'oas'"):
        gaussian_mi(X, Y, shrinkage="oas")


def test_bias_correction_not_a_bool():
    with pytest.raises(TypeError, match="`bias_correction` must be True or False"):
        gaussian_mi(X, Y, bias_correction="yes")


def test_unknown_metric():
    with pytest.raises(ValueError, match="`metric` must be one of 'euclidean', 'manhattan', 'chebyshev'; got 'cosine'"):
        paired_distances(X, Y, "cosine")


def test_unknown_estimator():
    with pytest.raises(ValueError, match=r"`estimator` must be one of 'gaussian', 'ksg', 'copula', 'bound'; got 'kde'"):
        mi_permutation_test(X, Y, estimator="kde")


@pytest.mark.parametrize("n", [0, -5])
def test_bad_number_of_permutations(n):
    with pytest.raises(ValueError, match=f"`n_permutations` must be >= 1; got {n}"):
        mi_permutation_test(X, Y, n_permutations=n)


def test_unknown_estimator_argument():
    with pytest.raises(TypeError, match="unexpected keyword argument.*'kk'"):
        mi_permutation_test(X, Y, n_permutations=2, kk=3)


# ---------------------------------------------------------------- the shared checks themselves
from mianalysis._internal.validation import InvalidParameterError, check_flag, check_real  # noqa: E402


@pytest.mark.parametrize("value, bounds, expected", [
    (0.5, dict(low=0, high=1), 0.5),
    (0, dict(low=0, high=1), 0.0),
    (1, dict(low=0, high=1), 1.0),
    (np.float32(0.25), dict(low=0, high=0.5, high_open=True), 0.25),
    (-3.0, {}, -3.0),
])
def test_check_real_accepts(value, bounds, expected):
    got = check_real(value, "v", **bounds)
    assert got == expected and type(got) is float


@pytest.mark.parametrize("value, bounds, error, match", [
    (0.5, dict(low=0, high=0.5, high_open=True), ValueError, r"`v` must be a finite number in \[0, 0.5\); got 0.5"),
    (0.0, dict(low=0, low_open=True), ValueError, r"`v` must be a finite number > 0; got 0.0"),
    (-0.1, dict(low=0), ValueError, r"`v` must be a finite number >= 0; got -0.1"),
    (2.0, dict(high=1, high_open=True), ValueError, r"`v` must be a finite number < 1; got 2.0"),
    (np.nan, {}, ValueError, "`v` must be finite; got nan"),
    (np.inf, dict(low=0), ValueError, "`v` must be a finite number >= 0; got inf"),
    (True, {}, TypeError, "`v` must be a real number; got True"),
    ("0.5", {}, TypeError, "`v` must be a real number; got '0.5'"),
])
def test_check_real_refuses(value, bounds, error, match):
    with pytest.raises(error, match=match):
        check_real(value, "v", **bounds)


@pytest.mark.parametrize("value", ["yes", 1, None, np.array([True])])
def test_a_flag_error_is_both_value_and_type_error(value):
    for caught in (ValueError, TypeError, InvalidParameterError):
        with pytest.raises(caught, match="`f` must be True or False"):
            check_flag(value, "f")
    assert check_flag(np.bool_(True), "f") is True


def test_entry_points_use_the_shared_checks():
    from mianalysis import gaussian_mi
    from mianalysis.federated.registry import get_rule
    from mianalysis.analysis.inference.intervals import check_level
    from mianalysis.scaleout import connect

    with pytest.raises(ValueError, match="`bias_correction` must be True or False"):
        gaussian_mi(X, Y, bias_correction="yes")
    with pytest.raises(ValueError, match=r"`ci_level` must be a finite number in \(0, 1\); got 1.5"):
        check_level(1.5)
    with pytest.raises(ValueError, match="`ci_level` must be a real number"):
        check_level("0.9")
    with pytest.raises(ValueError, match="`aggregator` must be one of 'and_mask'"):
        get_rule("krum")
    with pytest.raises(ValueError, match="`timeout` must be a finite number > 0; got 0.0"):
        with connect("local:1", timeout=0):
            pass
    from mianalysis.estimators import MarginalDistances

    with pytest.raises(TypeError, match="`n_features` must be an integer; got 1.5"):
        MarginalDistances(np.zeros((3, 3)), 1.5)
    with pytest.raises(ValueError, match="`n_features` must be >= 0; got -1"):
        MarginalDistances(np.zeros((3, 3)), -1)
