"""Permutation tests keep their size on independent data with atoms (issue 52, item 4): a
shuffle of the pairing is exchangeable with the observed pairing under independence whatever
the marginal laws, so parameters that sit at one value in most runs (Adam's sign steps of
+-lr, a rare mover, a fixed start) do not inflate the rejection rate. Runs stored twice break
that exchangeability and are refused (tests/test_repeated_runs.py)."""

import warnings

import numpy as np
import pytest

from mianalysis import mi_permutation_test


def atoms(rng, n, d):
    """Each coordinate: 0 in 65 % of runs, +-1e-3 otherwise (sign steps), plus a continuous
    coordinate so that the runs are distinct."""
    steps = np.where(rng.random((n, d)) < 0.65, 0.0, 1e-3 * rng.choice([-1.0, 1.0], size=(n, d)))
    return np.hstack([steps, rng.standard_normal((n, 1))])


@pytest.mark.parametrize("estimator, datasets", [("copula", 300), ("ksg", 150), ("bound", 100)])
def test_the_rejection_rate_on_independent_data_with_atoms_is_at_most_its_level(estimator, datasets):
    rng = np.random.default_rng(11)
    level, permutations = 0.1, 9  # p-values 0.1, 0.2, ...: p <= 0.1 has probability at most 0.1
    rejected = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lattice and tie warnings are the point here
        for _ in range(datasets):
            x, y = atoms(rng, 80, 3), atoms(rng, 80, 3)
            res = mi_permutation_test(x, y, estimator=estimator, n_permutations=permutations, random_state=rng)
            rejected += res.p_value <= level
    rate = rejected / datasets
    assert rate <= level + 3 * np.sqrt(level * (1 - level) / datasets), (estimator, rate)
