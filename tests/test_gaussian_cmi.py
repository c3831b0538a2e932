"""gaussian_cmi against closed forms for jointly Gaussian (X, Y, Z), an independent
implementation (numpy covariances and slogdet), its invariances, bias and errors."""

import warnings

import numpy as np
import pytest

from mianalysis import ConstantFeatureWarning, gaussian_cmi, gaussian_mi


def _reference_cmi(x, y, z):
    """Plug-in CMI in nats from np.cov and np.linalg.slogdet of the covariance blocks."""
    cov = np.cov(np.hstack([x, y, z]), rowvar=False)
    dx, dy = x.shape[1], y.shape[1]
    d = cov.shape[0]
    ix, iy, iz = np.arange(dx), np.arange(dx, dx + dy), np.arange(dx + dy, d)

    def ld(idx):
        return np.linalg.slogdet(cov[np.ix_(idx, idx)])[1]

    return 0.5 * (ld(np.r_[ix, iz]) + ld(np.r_[iy, iz]) - ld(iz) - ld(np.arange(d)))


def test_shared_cause_only_gives_zero_cmi_and_positive_mi(rng):
    # X = Z + e1, Y = Z + e2: dependent (corr 1/2), independent given Z.
    z, e1, e2 = rng.standard_normal((3, 50_000))
    x, y = z + e1, z + e2
    assert gaussian_mi(x, y, units="nats") == pytest.approx(-0.5 * np.log(1 - 0.25), abs=0.01)
    assert gaussian_cmi(x, y, z, units="nats") == pytest.approx(0.0, abs=0.003)


@pytest.mark.parametrize("a, b, c, d", [(1.0, 1.0, 1.0, 1.0), (2.0, 0.5, -1.0, 1.5), (0.3, 2.0, 3.0, -2.0)])
def test_closed_form_with_a_second_shared_cause(a, b, c, d, rng):
    # X = a Z + b W + e1, Y = c Z + d W + e2 with Z, W, e1, e2 independent N(0, 1): given Z,
    # X and Y share only W, with correlation b d / sqrt((b^2 + 1)(d^2 + 1)).
    z, w, e1, e2 = rng.standard_normal((4, 50_000))
    x, y = a * z + b * w + e1, c * z + d * w + e2
    rho = b * d / np.sqrt((b**2 + 1) * (d**2 + 1))
    exact = -0.5 * np.log(1 - rho**2)
    assert gaussian_cmi(x, y, z, units="nats") == pytest.approx(exact, abs=0.01)
    assert gaussian_cmi(x, y, z, units="bits") == pytest.approx(exact / np.log(2), abs=0.015)


def test_matches_an_independent_implementation(rng):
    a = rng.standard_normal((9, 9))
    joint = rng.multivariate_normal(np.zeros(9), a @ a.T + 0.3 * np.eye(9), size=500)
    x, y, z = joint[:, :2], joint[:, 2:5], joint[:, 5:]
    got = gaussian_cmi(x, y, z, units="nats", bias_correction=False)
    assert got == pytest.approx(_reference_cmi(x, y, z), abs=1e-9)


def test_z_without_columns_is_gaussian_mi(rng):
    x, y = rng.standard_normal((2, 300, 3))
    y = y + 0.5 * x
    for bias_correction in (True, False):
        assert gaussian_cmi(x, y, np.empty((300, 0)), bias_correction=bias_correction) == gaussian_mi(
            x, y, bias_correction=bias_correction)


def test_invariant_under_invertible_linear_maps(rng):
    z = rng.standard_normal((2000, 3))
    x = z @ rng.standard_normal((3, 2)) + rng.standard_normal((2000, 2))
    y = z @ rng.standard_normal((3, 2)) + 0.5 * x + rng.standard_normal((2000, 2))
    base = gaussian_cmi(x, y, z)
    m = rng.standard_normal((3, 3)) + 4 * np.eye(3)
    assert gaussian_cmi(x, y, z @ m - 3.0) == pytest.approx(base, abs=1e-9)
    assert gaussian_cmi(x @ (rng.standard_normal((2, 2)) + 3 * np.eye(2)), y, z) == pytest.approx(base, abs=1e-9)
    assert gaussian_cmi(y, x, z) == pytest.approx(base, abs=1e-9)


def test_bias_correction_is_unbiased_at_small_n():
    # 3 + 3 dimensions given 4, n = 25: the plug-in estimate is biased upwards by
    # 0.5 (b(7) + b(7) - b(4) - b(10)) = 0.274 nats (b: the Wishart log-det bias); the
    # corrected one averages to the truth, 0 (X and Y are independent given Z).
    rng = np.random.default_rng(3)
    plug_in, corrected = [], []
    for _ in range(400):
        z = rng.standard_normal((25, 4))
        x = z[:, :3] + rng.standard_normal((25, 3))
        y = z[:, 1:] + rng.standard_normal((25, 3))
        plug_in.append(gaussian_cmi(x, y, z, units="nats", bias_correction=False))
        corrected.append(gaussian_cmi(x, y, z, units="nats"))
    corrected, plug_in = np.array(corrected), np.array(plug_in)
    assert abs(plug_in.mean() - 0.274) < 4 * plug_in.std() / np.sqrt(len(plug_in))
    assert abs(corrected.mean()) < 4 * corrected.std() / np.sqrt(len(corrected))


def test_shrinkage_when_dimensions_exceed_samples(rng):
    z = rng.standard_normal((40, 15))
    x, y = z + rng.standard_normal((40, 15)), z + rng.standard_normal((40, 15))
    with pytest.raises(ValueError, match=r"joint covariance matrix \(45x45\) is not positive definite: "
                                         r"n_samples=40 <= 45 features \(fewer runs than dimensions: .*\); "
                                         r"condition on or estimate fewer features, or sample more runs$"):
        gaussian_cmi(x, y, z)  # no bound of a conditional MI exists to offer, and shrinkage is not a fix
    got = gaussian_cmi(x, y, z, shrinkage="ledoit-wolf")
    assert np.isfinite(got) and got >= 0


def test_constant_columns_are_dropped(rng):
    z, e1, e2 = rng.standard_normal((3, 500))
    x, y = np.c_[z + e1, np.ones(500)], z + e2
    base = gaussian_cmi(x[:, :1], y, z)
    with pytest.warns(ConstantFeatureWarning, match=r"z\[:, 1\]"):
        assert gaussian_cmi(x[:, :1], y, np.c_[z, np.full(500, 2.0)]) == base
    with pytest.warns(ConstantFeatureWarning, match=r"x\[:, 1\]"):
        assert gaussian_cmi(x, y, z) == base
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantFeatureWarning)
        assert gaussian_cmi(x[:, 1], y, z) == 0.0
        assert gaussian_cmi(x[:, :1], y, np.ones(500)) == gaussian_mi(x[:, :1], y)


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((np.ones((10, 2)), np.ones((10, 2)), np.ones((9, 2))), {}, ValueError, r"`z` must have as many samples \(rows\)"),
    ((np.zeros((10, 1)), np.zeros((10, 1)), np.r_[np.zeros(9), np.nan]), {}, ValueError, "`z` contains non-finite"),
    ((np.r_[np.zeros(9), np.inf], np.zeros(10), np.zeros(10)), {}, ValueError, "`x` contains non-finite"),
    ((np.zeros(10), np.zeros(10), "abc"), {}, TypeError, "`z` must be a numeric array"),
    ((np.zeros(10), np.zeros(10), np.zeros((10, 2, 2))), {}, ValueError, "`z` must be a 1-D or 2-D array"),
    ((np.zeros(10), np.zeros(10), np.zeros(10)), {"units": "dits"}, ValueError, "`units` must be one of"),
    ((np.zeros(10), np.zeros(10), np.zeros(10)), {"shrinkage": "oas"}, ValueError, "`shrinkage` must be one of"),
])
def test_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        gaussian_cmi(*args, **kwargs)


def test_too_few_samples_names_the_block(rng):
    x, y, z = rng.standard_normal((3, 6, 2))
    with pytest.raises(ValueError, match=r"the joint covariance matrix \(6x6\) is not positive definite: n_samples=6"):
        gaussian_cmi(x, y, z)


def test_linearly_dependent_z(rng):
    z = rng.standard_normal((200, 2))
    x, y = rng.standard_normal((2, 200))
    with pytest.raises(ValueError, match=r"the x,z covariance matrix \(4x4\) is not positive definite: features are "
                                         "linearly dependent"):
        gaussian_cmi(x, y, np.c_[z, z[:, 0] + z[:, 1]])
