import numpy as np
import pytest
from reference import correlated_gaussians

from mianalysis import ksg_mi, mi_permutation_test


@pytest.mark.parametrize("estimator", ["ksg", "gaussian"])
def test_strong_dependence_gives_smallest_pvalue(estimator, rng):
    x, y, _ = correlated_gaussians(300, 3, 3, 0.8, rng)
    res = mi_permutation_test(x, y, estimator=estimator, n_permutations=49, random_state=0)
    assert res.p_value == pytest.approx(1 / 50)
    assert res.estimate > res.null_mean + 5 * res.null_std
    assert res.n_permutations == 49 and res.null_distribution.shape == (49,)


def test_pvalues_of_independent_data_are_roughly_uniform():
    rng = np.random.default_rng(7)
    pvalues = []
    for seed in range(60):
        x, y, _ = correlated_gaussians(80, 2, 2, 0.0, rng)
        pvalues.append(mi_permutation_test(x, y, estimator="gaussian", n_permutations=39, random_state=seed).p_value)
    pvalues = np.array(pvalues)
    # Uniform on {1/40, ..., 1}: mean ~0.51 (sd of the mean of 60 ~0.04), ~10% below 0.1.
    assert 0.38 < pvalues.mean() < 0.64
    assert np.mean(pvalues <= 0.1) < 0.25


def test_reproducible_by_seed(rng):
    x, y, _ = correlated_gaussians(100, 2, 2, 0.3, rng)
    a = mi_permutation_test(x, y, n_permutations=10, random_state=5)
    b = mi_permutation_test(x, y, n_permutations=10, random_state=5)
    np.testing.assert_array_equal(a.null_distribution, b.null_distribution)
    assert a.estimate == b.estimate


def test_ksg_estimate_without_noise_equals_ksg_mi(rng):
    x, y, _ = correlated_gaussians(100, 2, 2, 0.3, rng)
    res = mi_permutation_test(x, y, n_permutations=5, random_state=1, noise=0, k=4, units="nats")
    assert res.estimate == ksg_mi(x, y, noise=0, k=4, units="nats")


def test_estimator_arguments_are_passed_on(rng):
    x, y, _ = correlated_gaussians(100, 2, 2, 0.3, rng)
    bits = mi_permutation_test(x, y, estimator="gaussian", n_permutations=3, random_state=1)
    nats = mi_permutation_test(x, y, estimator="gaussian", n_permutations=3, random_state=1, units="nats")
    assert nats.estimate == pytest.approx(bits.estimate * np.log(2))


@pytest.mark.parametrize("algorithm, k", [(1, 3), (2, 3), (1, 40), (2, 1)])
def test_cached_marginal_distances_give_the_same_null_to_the_bit(algorithm, k):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 4))
    y = np.round(0.5 * x[:, :2] + rng.standard_normal((300, 2)), 1)  # ties: the noise must match too
    kwargs = dict(n_permutations=12, random_state=5, algorithm=algorithm, k=k)
    cached = mi_permutation_test(x, y, distance_cache=True, **kwargs)
    direct = mi_permutation_test(x, y, distance_cache=False, **kwargs)
    assert cached.estimate == direct.estimate and cached.p_value == direct.p_value
    np.testing.assert_array_equal(cached.null_distribution, direct.null_distribution)


def test_distance_cache_argument():
    x = np.random.default_rng(0).standard_normal((30, 2))
    with pytest.raises(ValueError, match="`distance_cache` must be 'auto', True or False; got 'yes'"):
        mi_permutation_test(x, x[::-1], distance_cache="yes")
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['kk'\]"):
        mi_permutation_test(x, x[::-1], kk=3)
    with pytest.raises(ValueError, match=r"`k` must be in \[1, 29\]"):
        mi_permutation_test(x, x[::-1], k=30)


def test_without_distance_cache_every_estimate_is_in_linear_memory(monkeypatch, rng):
    from mianalysis.estimators import _neighbours

    def refuse(*args):
        raise AssertionError("a distance cache was used")

    monkeypatch.setattr(_neighbours, "ksg_counts_symmetric", refuse)
    x = rng.standard_normal((200, 60))
    y = x + rng.standard_normal((200, 60))
    res = mi_permutation_test(x, y, n_permutations=3, random_state=0, distance_cache=False)
    assert res.n_permutations == 3
