"""Kraskov-Stoegbauer-Grassberger k-nearest-neighbour mutual information estimator."""

from __future__ import annotations

import numpy as np
from scipy.special import digamma

from .._validation import (
    check_choice,
    check_int,
    check_nonnegative_float,
    check_paired,
    check_random_state,
    check_units,
)

BACKENDS = ("numba", "torch")
PERMUTATION_BATCH = 32  # pairings per pass over the distance matrices
SYMMETRIC_MIN_FEATURES = 100  # below, computing each distance twice in O(n) memory is faster
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
        Number of nearest neighbours, ``1 <= k < n_samples``.
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
        until the later blocks need them), 1.7-1.9x faster at the paper's sizes. It holds
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
    n = x.shape[0]
    k = check_int(k, "k", low=1, high=n - 1)
    rng = check_random_state(random_state)
    if noise > 0:
        x = add_tie_breaking_noise(x, noise, rng)
        y = add_tie_breaking_noise(y, noise, rng)
    check_choice(backend, "backend", BACKENDS)
    use_distance_cache(distance_cache, 0)  # only checks the argument
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


def marginal_distances(a, dtype="float64"):
    """The (n, n) max-norm distance matrix of the samples `a` (n, d), as the KSG kernel
    computes its distances (bit for bit)."""
    from ._kernels import marginal_distance_matrix

    a = np.ascontiguousarray(a, dtype=dtype)
    out = np.empty((a.shape[0], a.shape[0]), dtype=dtype)
    marginal_distance_matrix(a, np.ascontiguousarray(a.T), out)
    return out


def ksg_estimates_from_distances(dx, dy, permutations, k, algorithm):
    """KSG estimates (nats) of the pairing x[i] <-> y[perm[i]] for the identity and then
    each permutation, from the marginal distance matrices: O(n^2) each."""
    from ._kernels import permuted_neighbour_counts

    perms = np.array([np.arange(dx.shape[0])] + list(permutations), dtype=np.int64)
    out = []
    for start in range(0, perms.shape[0], PERMUTATION_BATCH):
        nx, ny = permuted_neighbour_counts(dx, dy, perms[start:start + PERMUTATION_BATCH], int(k), int(algorithm))
        out.extend(ksg_from_counts(nx[p], ny[p], k, algorithm) for p in range(nx.shape[0]))
    return np.array(out)


def ksg_permutation_estimates(x, y, permutations, k, algorithm, dtype="float64"):
    """KSG estimates (nats) of the identity pairing and each permutation, from the two
    marginal distance matrices computed once (O(n^2 d)); each pairing then costs O(n^2).
    Needs 2 n^2 values of `dtype` in memory. Equal, to the bit, to
    ``ksg_mi(x, y[perm], noise=0)`` for each perm."""
    return ksg_estimates_from_distances(marginal_distances(x, dtype), marginal_distances(y, dtype), permutations, k,
                                        algorithm)


def ksg_counts_torch(x, y, k, algorithm, dtype="float64", device=None, block=1024):
    """:func:`ksg_counts` with PyTorch: rows in blocks of `block`, full marginal rows by
    ``torch.cdist(p=inf)``, the k-th joint distance by ``topk``, counts by comparisons."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=tdtype, device=device)
    yt = torch.as_tensor(np.ascontiguousarray(y), dtype=tdtype, device=device)
    n = xt.shape[0]
    nx = torch.empty(n, dtype=torch.int64, device=device)
    ny = torch.empty(n, dtype=torch.int64, device=device)
    for r0 in range(0, n, block):
        r1 = min(r0 + block, n)
        rows = torch.arange(r1 - r0, device=device)
        dx = torch.cdist(xt[r0:r1], xt, p=float("inf"))
        dy = torch.cdist(yt[r0:r1], yt, p=float("inf"))
        joint = torch.maximum(dx, dy)
        joint[rows, rows + r0] = float("inf")  # a sample is not its own neighbour
        eps = torch.topk(joint, k, dim=1, largest=False).values[:, -1:]
        if algorithm == 1:
            cx = (dx < eps).sum(1) - 1  # the sample itself is at distance 0 < eps
            cy = (dy < eps).sum(1) - 1
            if bool((eps <= 0).any()):  # eps = 0: the self pair was not counted
                cx = cx + (eps[:, 0] <= 0)
                cy = cy + (eps[:, 0] <= 0)
        else:
            within = joint <= eps
            zero = torch.zeros((), dtype=tdtype, device=device)
            eps_x = torch.where(within, dx, zero).amax(1, keepdim=True)
            eps_y = torch.where(within, dy, zero).amax(1, keepdim=True)
            cx = (dx <= eps_x).sum(1) - 1
            cy = (dy <= eps_y).sum(1) - 1
        nx[r0:r1] = cx
        ny[r0:r1] = cy
    return nx.cpu().numpy(), ny.cpu().numpy()


def physical_memory_bytes():
    """Total physical memory of this machine (0 where unknown)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def use_distance_cache(distance_cache, n_bytes):
    """Whether to keep `n_bytes` of distances in memory: always for True, never for False,
    for "auto" when they take at most half the physical memory."""
    if distance_cache not in ("auto", True, False):
        raise ValueError(f"`distance_cache` must be 'auto', True or False; got {distance_cache!r}")
    return distance_cache is True or (distance_cache == "auto" and n_bytes <= physical_memory_bytes() / 2)


def add_tie_breaking_noise(a, noise, rng):
    """Return `a` plus Gaussian noise of `noise` times each column's standard deviation."""
    scale = noise * a.std(axis=0)
    return a + rng.standard_normal(a.shape) * scale


def ksg_counts(x, y, k, algorithm, dtype="float64", distance_cache="auto"):
    """Neighbour counts of every sample: validated 2-D `x`, `y` in, int64 arrays out.

    With the distance cache (see :func:`symmetric_cache_bytes`) every distance is computed
    once; without it, twice, in O(n) memory. The counts are the same either way.
    """
    from ._kernels import ksg_neighbour_counts

    x = np.ascontiguousarray(x, dtype=dtype)
    y = np.ascontiguousarray(y, dtype=dtype)
    # The cache saves half of the O(n^2 d) distance work and adds O(n^2) memory traffic:
    # with "auto" it is used from SYMMETRIC_MIN_FEATURES features (x and y together) on.
    wide = x.shape[1] + y.shape[1] >= SYMMETRIC_MIN_FEATURES
    if (distance_cache is True or wide) and use_distance_cache(
            distance_cache, symmetric_cache_bytes(x.shape[0], dtype)):
        return ksg_counts_symmetric(x, y, int(k), int(algorithm))
    return ksg_neighbour_counts(
        x, y, np.ascontiguousarray(x.T), np.ascontiguousarray(y.T), int(k), int(algorithm)
    )


def symmetric_pool_tiles(n_samples):
    """Most transposed tiles :func:`ksg_counts_symmetric` holds at once per side: after
    row block m, the tiles (J, I) with I <= m < J."""
    from ._kernels import BLOCK

    n_blocks = -(-n_samples // BLOCK)
    return max(1, max((m + 1) * (n_blocks - 1 - m) for m in range(n_blocks)))


def symmetric_cache_bytes(n_samples, dtype):
    """Memory of :func:`ksg_counts_symmetric`: about n^2 / 4 distances per side."""
    from ._kernels import BLOCK

    per_side = symmetric_pool_tiles(n_samples) * BLOCK * BLOCK + BLOCK * n_samples
    return 2 * per_side * np.dtype(dtype).itemsize


def ksg_counts_symmetric(x, y, k, algorithm):
    """Neighbour counts computing each distance once: row blocks in order, each block's
    tiles right of the diagonal computed and kept transposed for the later blocks' rows.
    `x`, `y` C-contiguous of one float dtype."""
    from ._kernels import BLOCK, block_row_counts, symmetric_block_rows

    n = x.shape[0]
    n_blocks = -(-n // BLOCK)
    tiles = symmetric_pool_tiles(n)
    pool_x = np.empty((tiles, BLOCK, BLOCK), dtype=x.dtype)
    pool_y = np.empty_like(pool_x)
    rows_x = np.empty((BLOCK, n), dtype=x.dtype)
    rows_y = np.empty_like(rows_x)
    x_t = np.ascontiguousarray(x.T)
    y_t = np.ascontiguousarray(y.T)
    nx = np.empty(n, dtype=np.int64)
    ny = np.empty(n, dtype=np.int64)
    free = list(range(tiles))
    held = {}  # (row block, column block) -> pool slot of that tile, stored transposed
    for m in range(n_blocks):
        old_slots = np.array([held.pop((m, block)) for block in range(m)], dtype=np.int64)
        free.extend(old_slots.tolist())  # copied out before the new tiles are written
        new_slots = np.full(n_blocks, -1, dtype=np.int64)
        for block in range(m + 1, n_blocks):
            new_slots[block] = held[(block, m)] = free.pop()
        symmetric_block_rows(x, x_t, y, y_t, m, rows_x, rows_y, pool_x, pool_y, old_slots, new_slots)
        block_row_counts(rows_x, rows_y, m * BLOCK, min((m + 1) * BLOCK, n), k, algorithm, nx, ny)
    return nx, ny


def ksg_from_counts(nx, ny, k, algorithm):
    """The KSG estimate in nats from the marginal neighbour counts."""
    n = nx.shape[0]
    if algorithm == 1:
        return digamma(k) + digamma(n) - np.mean(digamma(nx + 1.0) + digamma(ny + 1.0))
    return digamma(k) - 1.0 / k + digamma(n) - np.mean(digamma(nx) + digamma(ny))
