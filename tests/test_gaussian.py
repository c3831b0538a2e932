import numpy as np
import pytest
from reference import correlated_gaussians, gaussian_mi_exact

from mianalysis import gaussian_mi
from mianalysis.estimators.gaussian import wishart_logdet_bias


@pytest.mark.parametrize(
    "rho, n, d, tol",
    [(0.0, 20000, 1, 0.005), (0.5, 20000, 1, 0.01), (0.9, 20000, 1, 0.02), (0.6, 20000, 5, 0.03)],
)
@pytest.mark.parametrize("bias_correction", [True, False])
def test_correlated_gaussians(rho, n, d, tol, bias_correction, rng):
    x, y, exact = correlated_gaussians(n, d, d, rho, rng)
    got = gaussian_mi(x, y, units="nats", bias_correction=bias_correction)
    assert got == pytest.approx(exact, abs=tol)


def test_block_covariance(rng):
    # A random positive definite covariance over 3 + 4 dimensions.
    a = rng.standard_normal((7, 7))
    cov = a @ a.T + 0.5 * np.eye(7)
    z = rng.multivariate_normal(np.zeros(7), cov, size=40000)
    exact = gaussian_mi_exact(cov, 3)
    got = gaussian_mi(z[:, :3], z[:, 3:], units="nats")
    assert got == pytest.approx(exact, abs=0.03)


def test_bits_and_nats(rng):
    x, y, _ = correlated_gaussians(1000, 2, 2, 0.5, rng)
    assert gaussian_mi(x, y, units="bits") == pytest.approx(gaussian_mi(x, y, units="nats") / np.log(2))


def test_invariant_under_invertible_linear_maps(rng):
    x, y, _ = correlated_gaussians(2000, 4, 3, 0.5, rng)
    a = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((3, 3)) + 4 * np.eye(3)
    base = gaussian_mi(x, y)
    assert gaussian_mi(x @ a, y) == pytest.approx(base, abs=1e-9)
    assert gaussian_mi(x, y @ b + 7.0) == pytest.approx(base, abs=1e-9)


def test_wishart_bias_formula_matches_simulation():
    # Mean of log det of the ddof=1 sample covariance of N(0, I_p) over many draws.
    rng = np.random.default_rng(0)
    p, n, reps = 4, 12, 40000
    z = rng.standard_normal((reps, n, p))
    z -= z.mean(axis=1, keepdims=True)
    s = np.einsum("rni,rnj->rij", z, z) / (n - 1)
    simulated = np.linalg.slogdet(s)[1].mean()
    assert simulated == pytest.approx(wishart_logdet_bias(p, n), abs=0.01)


def test_bias_correction_removes_small_sample_bias():
    # Independent 8 + 8 dimensions from 60 samples: the plug-in estimate is biased upwards
    # by about p_x p_y / (2n) ~ 0.5 nats; the corrected estimate averages to zero.
    rng = np.random.default_rng(1)
    plug_in, corrected = [], []
    for _ in range(300):
        x, y, _ = correlated_gaussians(60, 8, 8, 0.0, rng)
        plug_in.append(gaussian_mi(x, y, units="nats", bias_correction=False))
        corrected.append(gaussian_mi(x, y, units="nats"))
    corrected = np.array(corrected)
    assert np.mean(plug_in) > 0.5
    assert abs(corrected.mean()) < 4 * corrected.std() / np.sqrt(len(corrected))


def test_shrinkage_handles_more_dimensions_than_samples(rng):
    x, y, _ = correlated_gaussians(30, 25, 25, 0.9, rng)
    with pytest.raises(ValueError, match="joint covariance matrix"):
        gaussian_mi(x, y, bias_correction=False)
    got = gaussian_mi(x, y, shrinkage="ledoit-wolf")
    assert np.isfinite(got) and got > 0


def test_shrinkage_close_to_plain_estimate_with_many_samples(rng):
    x, y, _ = correlated_gaussians(20000, 3, 3, 0.6, rng)
    plain = gaussian_mi(x, y, bias_correction=False)
    shrunk = gaussian_mi(x, y, shrinkage="ledoit-wolf")
    assert shrunk == pytest.approx(plain, abs=0.02)
    assert shrunk <= plain


@pytest.mark.parametrize(
    "which, make, match",
    [
        # what works, never shrinkage (issue 52): the bound, mianalysis.mi, fewer features
        ("x", lambda x, y: (np.hstack([x, x[:, :1] * 2]), y),
         r"the x covariance matrix .* linearly dependent \(or nearly so\); estimator='bound' gives a lower bound "
         r"\(mianalysis.mi chooses an estimate or a bound\), or drop the dependent features, or estimate one layer "
         r"at a time$"),
        ("y", lambda x, y: (x, np.hstack([y, y[:, :1] + y[:, 1:2]])),
         r"the y covariance matrix .* linearly dependent.*estimator='bound' gives a lower bound"),
        # x and y dependent on each other (a copy): the MI is infinite, and no shrunk number is offered as a fix
        ("joint", lambda x, y: (x, x.copy()),
         r"the joint covariance matrix \(6x6\) .* linearly dependent \(or nearly so\) across x and y: y is a linear "
         r"function of x \(a copy of it, say\) or nearly, so the Gaussian MI is infinite or beyond what the runs "
         r"resolve$"),
    ],
)
def test_singular_block_is_named(which, make, match, rng):
    x, y, _ = correlated_gaussians(500, 3, 3, 0.5, rng)
    x, y = make(x, y)
    with pytest.raises(ValueError, match=match) as caught:
        gaussian_mi(x, y)
    assert caught.value.block == which  # a SingularCovarianceError naming its block


def test_fewer_runs_than_dimensions_names_what_works_not_shrinkage(rng):
    """n <= d: the message says why there is no plain estimate and names the bound (and
    fewer features), never shrinkage (a shrunk number is neither an estimate nor a bound)."""
    x, y, _ = correlated_gaussians(10, 6, 6, 0.5, rng)
    with pytest.raises(ValueError) as caught:
        gaussian_mi(x, y)
    message = str(caught.value)
    assert "n_samples=10 <= 12 features (fewer runs than dimensions" in message
    assert "estimator='bound' gives a lower bound" in message and "one layer at a time" in message
    assert "shrinkage" not in message
    # Too few runs even for the bound (it needs 8): the bound is not offered.
    with pytest.raises(ValueError) as caught:
        gaussian_mi(x[:6], y[:6])
    assert "bound" not in str(caught.value) and "shrinkage" not in str(caught.value)
    assert "sample more runs" in str(caught.value)


def test_too_few_samples_for_joint_block(rng):
    x, y, _ = correlated_gaussians(10, 6, 6, 0.5, rng)
    with pytest.raises(ValueError, match=r"joint covariance matrix \(12x12\) .* n_samples=10 <= 12"):
        gaussian_mi(x, y, bias_correction=False)


def test_constant_feature_is_named_and_dropped(rng):
    # A constant carries no information: dropped with a warning naming it (it used to be
    # an error; the estimators now share one rule, see test_degenerate_data.py).
    from mianalysis import ConstantFeatureWarning

    x, y, _ = correlated_gaussians(100, 2, 2, 0.5, rng)
    want = gaussian_mi(x, y[:, :1])
    y[:, 1] = 3.0
    with pytest.warns(ConstantFeatureWarning, match=r"constant feature.*y\[:, 1\]"):
        assert gaussian_mi(x, y) == want


@pytest.mark.parametrize("n, p", [(30, 50), (200, 20), (50, 50)])
def test_ledoit_wolf_equals_scikit_learn(n, p, rng):
    from sklearn.covariance import LedoitWolf

    from mianalysis.estimators.gaussian import ledoit_wolf_covariance

    z = rng.standard_normal((n, p)) @ rng.standard_normal((p, p))
    np.testing.assert_allclose(ledoit_wolf_covariance(z), LedoitWolf(assume_centered=True).fit(z).covariance_,
                               rtol=1e-10, atol=1e-12)
