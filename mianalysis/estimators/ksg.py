"""Kraskov-Stoegbauer-Grassberger k-nearest-neighbour mutual information estimator."""

from __future__ import annotations

import numpy as np
from scipy.special import digamma

from .._validation import (
    check_choice,
    check_k,
    check_nonnegative_float,
    check_paired,
    check_random_state,
    check_units,
    drop_constant_features,
)
from ._neighbours import ksg_counts, ksg_counts_torch, marginal_distances, permuted_counts, use_distance_cache

BACKENDS = ("numba", "torch")
DTYPES = ("float64", "float32")


def ksg_mi(
    x,
    y,
    *,
    k=3,
    algorithm=1,
    units="bits",
    noise=1e-10,
    random_state=None,
    dtype="float64",
    backend="numba",
    device=None,
    distance_cache="auto",
):
    r"""Mutual information of `x` and `y` by the KSG k-nearest-neighbour estimator.

    Distances are max-norms in the joint space and in each marginal space. For every
    sample i, :math:`\epsilon_i` is the distance to its k-th nearest neighbour in the joint
    space. Algorithm 1 (Kraskov et al. 2004, eq. 8) counts the samples strictly closer than
    :math:`\epsilon_i` in each marginal space,

    .. math::

        I^{(1)} = \psi(k) + \psi(N) - \langle \psi(n_x + 1) + \psi(n_y + 1) \rangle;

    algorithm 2 (eq. 9) uses the marginal extents :math:`\epsilon_{x,i}, \epsilon_{y,i}` of
    the k nearest joint neighbours and counts samples within them (inclusive),

    .. math::

        I^{(2)} = \psi(k) - 1/k + \psi(N) - \langle \psi(n_x) + \psi(n_y) \rangle.

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X; row ``i`` is paired with row ``i`` of `y`. A 1-D array is one feature.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    k : int, default=3
        Number of nearest neighbours, ``1 <= k < n_samples``: every sample needs k
        neighbours other than itself. Checked before any work, whatever the backend or
        distance cache.
    algorithm : {1, 2}, default=1
        Which of the two KSG estimators.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    noise : float, default=1e-10
        Before estimating, add Gaussian noise with standard deviation ``noise`` times each
        feature's standard deviation, to break ties between equal coordinates (as Kraskov
        et al. recommend). 0 adds none: the result is then exactly the textbook estimator
        on the given data.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the noise.
    dtype : {"float64", "float32"}, default="float64"
        Precision of the distance computation. "float32" is about twice as fast; its
        distances carry relative rounding errors of ~6e-8, so neighbour counts can change
        where two distances are that close and estimates typically differ from float64 by
        well under 1e-3 nats.
    backend : {"numba", "torch"}, default="numba"
        "torch" computes the same statistics with PyTorch on `device`, in blocks of rows
        (memory O(block x n)); on CPU it gives the same neighbour counts as the Numba
        kernel (distances are exact max-abs differences either way), and on a GPU it is the
        way to use one.
    device : str, optional
        Torch device for ``backend="torch"``; default "cuda" when available, else "cpu".
    distance_cache : {"auto", True, False}, default="auto"
        Numba backend only. Distances are symmetric: with the cache, each is computed once
        (rows in blocks of 256; a block's tiles right of the diagonal are kept, transposed,
        until the later blocks need them), about 2x faster at the paper's sizes. It holds
        about n^2 / 2 values of `dtype` (1.9 GB at n = 22,000 in float64, half in
        float32). "auto" uses it when x and y have 100 features or more together (below,
        the extra memory traffic costs more than it saves) and it takes at most half the
        physical memory; False computes every distance twice in O(n) memory. The result
        is the same to the bit.

    Returns
    -------
    mi : float
        The estimate in `units`. It is returned as computed, negative values included: KSG
        is biased in high dimensions (often downwards, so that dependent high-dimensional
        data can give estimates below zero). Use :func:`mianalysis.mi_permutation_test` to
        tell whether an estimate differs from independence.

    Notes
    -----
    The computation is an exact brute-force pass over all pairs, O(n^2 (d_x + d_y)) time;
    memory is O(n^2) with the distance cache and O(n) beyond a per-thread buffer of
    16 x n distances per side without it. It is parallel (Numba) and its result does not
    depend on the number of threads.
    Among neighbours at exactly the same joint distance, algorithm 2 takes all of those at
    the k-th distance as neighbours; with `noise` > 0 such ties have probability zero.

    Constant features are dropped with a :class:`mianalysis.ConstantFeatureWarning` naming
    them: a constant carries no information, ``I((X, c); Y) = I(X; Y)`` exactly (it adds 0
    to every max-norm distance, so the estimate is the same as without it). If no feature
    of `x` or of `y` varies, the result is 0.0, the exact ``I(c; Y)``; the formulas would
    otherwise return an artefact of the zero distances (algorithm 2 gives
    ``1/(n-1) - 1/k``; a constant `x` and `y` gave about 12 bits), and raising would refuse
    a question that has an exact answer. :func:`gaussian_mi`, :func:`mi_permutation_test`
    and :func:`mianalysis.analyze` follow the same rule.

    References
    ----------
    A. Kraskov, H. Stoegbauer and P. Grassberger, "Estimating mutual information",
    Phys. Rev. E 69, 066138 (2004). doi:10.1103/PhysRevE.69.066138

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ksg_mi
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal(5000)
    >>> y = 0.6 * x + 0.8 * rng.standard_normal(5000)
    >>> round(ksg_mi(x, y, units="nats", random_state=0), 1)  # exact: 0.223
    0.2
    """
    factor, algorithm, dtype = check_ksg_settings(units, algorithm, dtype)
    noise = check_nonnegative_float(noise, "noise")
    x, y = check_paired(x, y)
    k = check_k(k, x.shape[0])
    rng = check_random_state(random_state)
    check_choice(backend, "backend", BACKENDS)
    use_distance_cache(distance_cache, 0)  # only checks the argument
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return 0.0  # I(c; Y) = 0 (see Notes)
    if noise > 0:
        x = add_tie_breaking_noise(x, noise, rng)
        y = add_tie_breaking_noise(y, noise, rng)
    if backend == "torch":
        nx, ny = ksg_counts_torch(x, y, k, algorithm, dtype, device)
    else:
        nx, ny = ksg_counts(x, y, k, algorithm, dtype, distance_cache)
    return float(ksg_from_counts(nx, ny, k, algorithm) * factor)


def check_ksg_settings(units, algorithm, dtype):
    """(nats-to-units factor, algorithm, dtype name) after checking each."""
    factor = check_units(units)
    check_choice(algorithm, "algorithm", (1, 2))
    if not isinstance(dtype, str):  # np.float32, np.dtype("float32"), ...
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            pass
    check_choice(dtype, "dtype", DTYPES)
    return factor, algorithm, dtype


def ksg_estimates_from_distances(dx, dy, permutations, k, algorithm):
    """KSG estimates (nats) of the pairing x[i] <-> y[perm[i]] for the identity and then
    each permutation, from the marginal distance matrices: O(n^2) each."""
    k = check_k(k, dx.shape[0])
    perms = [np.arange(dx.shape[0])] + list(permutations)
    return np.array([ksg_from_counts(nx, ny, k, algorithm)
                     for nx, ny in permuted_counts(dx, dy, perms, int(k), int(algorithm))])


def ksg_permutation_estimates(x, y, permutations, k, algorithm, dtype="float64"):
    """KSG estimates (nats) of the identity pairing and each permutation, from the two
    marginal distance matrices computed once (O(n^2 d)); each pairing then costs O(n^2).
    Needs 2 n^2 values of `dtype` in memory. Equal, to the bit, to
    ``ksg_mi(x, y[perm], noise=0)`` for each perm (`x` and `y` without constant columns)."""
    k = check_k(k, x.shape[0])
    return ksg_estimates_from_distances(marginal_distances(x, dtype), marginal_distances(y, dtype), permutations, k,
                                        algorithm)


def add_tie_breaking_noise(a, noise, rng):
    """Return `a` plus Gaussian noise of `noise` times each column's standard deviation."""
    scale = noise * a.std(axis=0)
    return a + rng.standard_normal(a.shape) * scale


def ksg_from_counts(nx, ny, k, algorithm):
    """The KSG estimate in nats from the marginal neighbour counts."""
    n = nx.shape[0]
    if algorithm == 1:
        return digamma(k) + digamma(n) - np.mean(digamma(nx + 1.0) + digamma(ny + 1.0))
    return digamma(k) - 1.0 / k + digamma(n) - np.mean(digamma(nx) + digamma(ny))
