"""The held-out NWJ lower bound (mianalysis.estimators.nwj through projection_bound) is a
bound for any distribution: on every known-answer family it stays at or below the MI
within three standard errors, where the Gaussian MI of the same projections (the previous
"bound", method="gaussian") exceeds it."""

import numpy as np
import pytest
from scipy.special import digamma, gammaln

from mianalysis.estimators.bound import projection_bound
from mianalysis.estimators.nwj import fit_critic, nwj_fold, score_map


def student_t_mi_bits(nu, p, rho):
    """The exact MI (bits) of the two p-dimensional halves of a multivariate Student-t with
    `nu` degrees of freedom whose pairs (x_i, y_i) have correlation `rho` (Arellano-Valle,
    Contreras-Reyes and Genton 2013): the Gaussian MI plus a term of nu and p alone."""
    def h(a):
        return gammaln(a)
    extra = (h(nu / 2) + h((nu + 2 * p) / 2) - 2 * h((nu + p) / 2) + (nu + p) * digamma((nu + p) / 2)
             - (nu + 2 * p) / 2 * digamma((nu + 2 * p) / 2) - nu / 2 * digamma(nu / 2))
    return (-0.5 * p * np.log(1 - rho**2) + extra) / np.log(2)


def test_the_student_t_formula_gives_the_known_values():
    assert student_t_mi_bits(3, 5, 0.5) == pytest.approx(1.4683, abs=1e-4)
    assert student_t_mi_bits(3, 5, 0.0) == pytest.approx(0.4307, abs=1e-4)


def shared_bit(n, d, rng):
    bit = rng.choice([-1.0, 1.0], size=(n, 1))
    return bit + 0.3 * rng.standard_normal((n, d)), bit + 0.3 * rng.standard_normal((n, d))


def student_t(n, p, rho, rng):
    z = rng.standard_normal((n, 2 * p))
    x, y = z[:, :p], rho * z[:, :p] + np.sqrt(1 - rho**2) * z[:, p:]
    scale = np.sqrt(rng.chisquare(3, size=(n, 1)) / 3)
    return x / scale, y / scale


def discrete_latent(n, d, rng):
    """Four well-separated clusters chosen by one uniform latent: MI = 2 bits up to 1e-9."""
    latent = rng.integers(0, 4, size=n)
    centres_x, centres_y = 12.0 * rng.standard_normal((2, 4, d))
    return (centres_x[latent] + rng.standard_normal((n, d)), centres_y[latent] + rng.standard_normal((n, d)))


def sign_mixture(n, d, rng):
    """y = c x 0.9 + noise with a fair sign c independent of x: I(x; y) <= I(x; y | c) =
    d x 1.198 bits (x is independent of c), while every correlation is 0."""
    x = rng.standard_normal((n, d))
    sign = rng.choice([-1.0, 1.0], size=(n, 1))
    return x, sign * 0.9 * x + np.sqrt(1 - 0.81) * rng.standard_normal((n, d))


CASES = {
    # name: (sample, MI in bits or an upper bound on it)
    "shared bit 20+20": (lambda rng: shared_bit(1000, 20, rng), 1.0),
    "shared bit 1+1": (lambda rng: shared_bit(1000, 1, rng), 1.0),
    "Student-t nu=3, rho 0.5, 5+5": (lambda rng: student_t(1000, 5, 0.5, rng), student_t_mi_bits(3, 5, 0.5)),
    "Student-t nu=3, rho 0, 5+5": (lambda rng: student_t(1000, 5, 0.0, rng), student_t_mi_bits(3, 5, 0.0)),
    "four-level discrete latent, 3+3": (lambda rng: discrete_latent(1000, 3, rng), 2.0),
    "sign mixture 2+2": (lambda rng: sign_mixture(1000, 2, rng), 2 * -0.5 * np.log2(1 - 0.81)),
    "independent 150+150, 200 runs": (lambda rng: (rng.standard_normal((200, 150)),
                                                   rng.standard_normal((200, 150))), 0.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_bound_stays_below_the_mi_on_every_known_answer_family(name):
    sample, truth = CASES[name]
    x, y = sample(np.random.default_rng(7))
    bound = projection_bound(x, y)
    assert bound.method == "nwj" and np.isfinite(bound.se) and bound.se > 0
    assert bound.value <= truth + 3 * bound.se, (name, bound.value, bound.se, truth)


def test_the_gaussian_projection_value_is_no_bound_off_gaussian_and_the_nwj_bound_is():
    """The case that showed it: 20+20 coordinates that share one fair bit hold at most 1 bit;
    the Gaussian MI of held-out projections reports over 2."""
    x, y = shared_bit(1000, 20, np.random.default_rng(0))
    assert projection_bound(x, y, method="gaussian", copula=False).value > 2.0
    nwj = projection_bound(x, y)
    assert 0.5 < nwj.value <= 1.0 + 3 * nwj.se


def test_on_gaussian_data_with_many_runs_per_dimension_the_bound_is_nearly_the_mi():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4000, 3))
    y = 0.6 * x + 0.8 * rng.standard_normal((4000, 3))
    truth = 3 * -0.5 * np.log2(1 - 0.36)
    bound = projection_bound(x, y)
    assert truth - 4 * bound.se - 0.05 < bound.value <= truth + 3 * bound.se


def test_the_bound_does_not_change_under_monotone_maps_of_the_coordinates():
    x, y = student_t(600, 4, 0.5, np.random.default_rng(2))
    value = projection_bound(x, y).value
    assert projection_bound(np.sinh(x), y**3 + y).value == value  # only the fitting folds' ranks enter


def test_runs_stored_twice_are_refused_not_bounded():
    x, y = shared_bit(200, 5, np.random.default_rng(1))
    with pytest.raises(ValueError, match="stored"):
        projection_bound(np.vstack([x, x]), np.vstack([y, y]))


def test_the_critic_is_the_true_log_ratio_on_gaussian_pairs_so_the_fold_value_is_their_mi():
    """A critic fitted on many runs of one Gaussian pair (rho 0.8) evaluated on fresh runs
    gives the pair's MI, -0.5 log(1 - rho^2) nats, within its se."""
    rng = np.random.default_rng(5)

    def pairs(n):
        z = rng.standard_normal((n, 2))
        return z[:, :1], 0.8 * z[:, :1] + 0.6 * z[:, 1:]

    critic = fit_critic(*pairs(20000), random_state=rng)
    assert critic.tau == 1.0 and critic.rho[0] == pytest.approx(0.8, abs=0.01)
    value, se = nwj_fold(critic, *pairs(2000), random_state=rng)
    assert abs(value - -0.5 * np.log(1 - 0.64)) < 3 * se + 0.01


def test_the_score_map_reproduces_normal_scores_on_its_own_values_and_is_monotone():
    from mianalysis.estimators.copula import normal_scores
    fit = np.random.default_rng(4).standard_normal((50, 2))
    to_scores = score_map(fit)
    np.testing.assert_allclose(to_scores(fit), normal_scores(fit), rtol=1e-12)
    grid = np.linspace(-5, 5, 101)[:, None].repeat(2, axis=1)
    assert np.all(np.diff(to_scores(grid), axis=0) >= 0)


def test_the_score_map_takes_mid_ranks_among_tied_fitting_values_and_beyond_their_range():
    # (#below + #below-or-equal) / 2 of each new value among its column's fitting values, counted
    # one by one: ties in the fit and between fit and new values, values outside the fit's range
    from scipy.special import ndtri
    rng = np.random.default_rng(5)
    fit = rng.integers(-3, 4, size=(30, 4)).astype(float)
    new = np.vstack([rng.integers(-5, 6, size=(25, 4)).astype(float), fit[:5] + 0.5])
    twice = np.array([[(fit[:, j] < v).sum() + (fit[:, j] <= v).sum() for j, v in enumerate(row)] for row in new])
    assert np.array_equal(score_map(fit)(new), ndtri((twice / 2 + 0.5) / 31))
    assert np.array_equal(score_map(fit)(new.astype(np.float32)), ndtri((twice / 2 + 0.5) / 31))


def test_folds_larger_than_all_pairs_average_over_shifts_and_stay_unbiased(monkeypatch):
    """Above MAX_ALL_PAIRS runs the unpaired mean uses cyclic shifts; forcing shifts on a
    small fold gives about the same value as all pairs."""
    import mianalysis.estimators.nwj as nwj
    x, y = shared_bit(600, 3, np.random.default_rng(6))
    every_pair = projection_bound(x, y)
    monkeypatch.setattr(nwj, "MAX_ALL_PAIRS", 10)
    shifted = projection_bound(x, y)
    assert abs(shifted.value - every_pair.value) < 3 * every_pair.se


def test_a_permutation_result_prints_a_short_summary_with_its_kind_not_its_null_array():
    from mianalysis.estimators.significance import PermutationTestResult
    result = PermutationTestResult.from_null(0.5, np.linspace(0.0, 0.2, 999), "bound")
    assert len(repr(result)) < 200 and "n_permutations=999" in repr(result)
    assert str(result) == "bound: 0.5 (a lower bound on the MI); null 0.1 +- 0.0578 over 999 shuffles; p = 0.001"
