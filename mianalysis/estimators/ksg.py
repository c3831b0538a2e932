"""Kraskov-Stoegbauer-Grassberger k-nearest-neighbour mutual information estimator."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from scipy.special import digamma

from .._internal.scaling import FLOAT32_RANGE, column_std, pow2_scale
from .._internal.validation import (
    check_choice,
    check_flag,
    check_int,
    check_k,
    check_nonnegative_float,
    check_paired,
    check_random_state,
    check_real,
    check_samples,
    check_units,
    drop_constant_features,
    varying_columns,
)
from ._neighbours import SYMMETRIC_MIN_FEATURES as DISTANCE_CACHE_MIN_FEATURES
from ._neighbours import checks_float32_distances  # noqa: F401  (public here: benchmarks/bench_estimators.py)
from ._neighbours import (NeighbourLists, check_distance_cache, check_torch_device, distance_tiles, ksg_counts,
                          ksg_counts_torch, listed_counts, marginal_distances, neighbour_list_length, neighbour_lists,
                          permuted_counts, use_distance_cache, use_lists)
from .calibration import warn_outside_calibration
from .repeats import check_repeated_runs

__all__ = [
    "ksg_mi", "MarginalDistances", "KSG_NOISE", "standardize_columns", "add_tie_breaking_noise",
    "ksg_estimates_from_distances", "ksg_estimates_of_subsets", "ksg_permutation_estimates", "BACKENDS",
    "DISTANCE_CACHE_BLOCK", "DISTANCE_CACHE_MIN_FEATURES", "KSGTies", "TiedSamplesWarning", "ksg_ties",
    "duplicate_share", "value_tie_shares", "TIE_THRESHOLD", "TIE_CHECK_ROWS", "exact_float32", "neighbour_list_length"
]

# Tie-breaking noise, in units of each feature's standard deviation: the default of every
# KSG computation (ksg_mi, mi_permutation_test, MarginalDistances.of, analyze).
KSG_NOISE = 1e-10
BACKENDS = ("numba", "torch")
# The distance cache (`distance_cache` of ksg_mi): rows in blocks of DISTANCE_CACHE_BLOCK samples, and "auto" uses
# it from DISTANCE_CACHE_MIN_FEATURES features of x and y together. The block is the kernels' compile-time BLOCK
# (defined in _kernels.py, so that numba's cache sees a change; tests/test_ksg.py checks the two agree).
DISTANCE_CACHE_BLOCK = 256
DTYPES = ("float64", "float32")
# Ties and lattices (ksg_ties): samples are flagged when more than this share of their values
# (or of the neighbour distances checked) is tied; continuous data have none.
TIE_THRESHOLD = 0.1
# ksg_ties finds the k-th and (k+1)-th joint neighbour distances of this many runs (evenly spaced).
TIE_CHECK_ROWS = 100
# The shares of repeated values and differences (ksg_ties, and ksg_mi's TiedSamplesWarning) are
# counted among at most this many evenly spaced runs: a lattice repeats its values in any
# subset, and the count stays a small part of an estimate's cost at any run count.
TIE_VALUE_ROWS = 2000


def ksg_mi(
    x: ArrayLike,
    y: ArrayLike,
    *,
    k: int = 3,
    algorithm: int = 1,
    units: str = "bits",
    noise: float = KSG_NOISE,
    random_state: int | np.random.Generator | None = None,
    dtype: str = "float64",
    backend: str = "numba",
    device: str | None = None,
    distance_cache: bool | str = "auto",
    standardize: bool = False,
) -> float:
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
    x : array-like of shape (n_samples, n_features_x) or (n_samples,), or MarginalDistances
        Samples of X; row ``i`` is paired with row ``i`` of `y`. A 1-D array is one feature.
        With :class:`MarginalDistances` for both `x` and `y` (samples made ready once, see
        there), the estimate costs O(n^2) and only `k`, `algorithm` and `units` apply.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,), or MarginalDistances
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
        well under 1e-3 nats. Columns far from 0 compared with their spread are centred, and
        values outside float32's comfortable range rescaled, in float64 before the cast
        (see Notes), so this holds whatever the location and magnitude of the data.
        "float64" itself computes the distances in float32 where that pays (from 512 samples
        and 16 features of x and y together) and decides in float64 every comparison the
        float32 values leave in doubt, so its counts and estimate are float64's exactly.
    backend : {"numba", "torch"}, default="numba"
        "torch" computes the same statistics with PyTorch on `device`, in blocks of rows
        (memory O(block x n)); on CPU it gives the same neighbour counts as the Numba
        kernel (distances are exact max-abs differences either way), and on a GPU it is the
        way to use one.
    device : str, optional
        Torch device for ``backend="torch"``; default "cuda" when available, else "cpu".
    distance_cache : {"auto", True, False}, default="auto"
        Numba backend only. Distances are symmetric: with the cache, each is computed once
        (rows in blocks of 256, ``DISTANCE_CACHE_BLOCK``; a block's tiles right of the
        diagonal are kept, transposed, until the later blocks need them), about 2x faster
        at the paper's sizes. It holds about n^2 / 2 values of `dtype` (1.9 GB at
        n = 22,000 in float64, half in float32). "auto" uses it when x and y have 100
        features or more together (``DISTANCE_CACHE_MIN_FEATURES``; below, the extra
        memory traffic costs more than it saves) and it takes at most half the
        memory the process can still allocate (the least of physical memory, the room
        under its cgroup's memory limit and under ``ulimit -v``); False computes every distance twice in O(n) memory. The result
        is the same to the bit.
    standardize : bool, default=False
        Divide each coordinate by its sample standard deviation before the neighbour
        search (see :func:`standardize_columns`). The max-norm is otherwise dominated by
        the widest coordinates (a bias next to a weight 1000 times smaller), while the MI
        itself does not change under per-coordinate scaling; with it the estimate is
        invariant to that scaling (up to the tie-breaking noise). On known-MI data with
        coordinates on scales from 1e-3 to 1e3 it moves the estimate toward the truth
        (``python experiments/ksg_standardize.py``, ``figures/ksg_standardize/ksg_standardize.csv``);
        :func:`mianalysis.analyze` uses it by default. False keeps the textbook estimator.

    Returns
    -------
    mi : float
        The estimate in `units`. It is returned as computed, negative values included: KSG
        is biased in high dimensions (often downwards, so that dependent high-dimensional
        data can give estimates below zero). Use :func:`mianalysis.mi_permutation_test` to
        tell whether an estimate differs from independence.

    Warns
    -----
    OutsideCalibrationWarning
        When called from outside the package on data outside the calibrated regime
        (:func:`mianalysis.estimators.calibration.ksg_regime`: at most 4 varying joint
        dimensions, at least 2000 runs, at most 5.65 bits; calibrated with k = 3 on
        standardized coordinates). :func:`mianalysis.mi` judges an estimate instead.

    Notes
    -----
    The computation is an exact brute-force pass over all pairs, O(n^2 (d_x + d_y)) time;
    memory is O(n^2) with the distance cache and O(n) beyond a per-thread buffer of
    16 x n distances per side without it. It is parallel (Numba) and its result does not
    depend on the number of threads.
    Among neighbours at exactly the same joint distance, algorithm 2 takes all of those at
    the k-th distance as neighbours; with `noise` > 0 such ties have probability zero.

    The estimator assumes continuous samples. Samples of which more than ``TIE_THRESHOLD``
    (10 %) of the values repeat within their coordinate (values on a grid, such as the
    early checkpoints of Adam with a small learning rate from a fixed start), or, for x and
    y of equal size, of the paired differences ``y - x`` (a lattice of one relative to the
    other), get a :class:`TiedSamplesWarning`: the tie-breaking noise then decides the
    neighbours, and the estimate says little about the MI. :func:`ksg_ties` measures this
    and the ties of the neighbour distances themselves. Runs that repeat an earlier run
    exactly (identical rows of x and y alike) are refused with a ValueError naming how many
    when they are copies of continuous runs (each copy would be its twin's neighbour at the
    noise's scale, which inflates the estimate), and get a
    :class:`mianalysis.estimators.repeats.RepeatedRunsWarning` when the samples lie on a
    lattice where runs coincide (:func:`mianalysis.estimators.repeats.check_repeated_runs`).

    Constant features are dropped with a :class:`mianalysis.ConstantFeatureWarning` naming
    them: a constant carries no information, ``I((X, c); Y) = I(X; Y)`` exactly (it adds 0
    to every max-norm distance, so the estimate is the same as without it). If no feature
    of `x` or of `y` varies, the result is 0.0, the exact ``I(c; Y)``; the formulas would
    otherwise return an artefact of the zero distances (algorithm 2 gives
    ``1/(n-1) - 1/k``; a constant `x` and `y` gave about 12 bits), and raising would refuse
    a question that has an exact answer. :func:`gaussian_mi`, :func:`mi_permutation_test`
    and :func:`mianalysis.analyze` follow the same rule.

    Magnitudes: any finite data are handled. The estimate is invariant under scaling `x`
    and `y` by one common factor, and is computed so at every magnitude from ~1e-300 to
    ~1e300: the noise scale is computed without overflow or underflow in its squares,
    float64 data beyond 2^1000 (where a difference of two samples could overflow) are
    multiplied by a power of two, which changes no distance comparison, and float32
    inputs are centred and rescaled in float64 before the cast (see `dtype`).

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
    >>> round(ksg_mi(x, y, units="nats", random_state=0), 3)  # exact: 0.223
    0.226
    """
    factor, algorithm, dtype = check_ksg_settings(units, algorithm, dtype)
    if isinstance(x, MarginalDistances) or isinstance(y, MarginalDistances):
        extra = {name for name, value, default in (("dtype", dtype, "float64"), ("backend", backend, "numba"),
                                                   ("standardize", standardize, False)) if value != default}
        check_distance_cache(distance_cache)
        value = float(ksg_estimates_from_marginals(x, y, k=k, algorithm=algorithm, units=units, extra=extra)[0])
        if x.n_features and y.n_features:  # (both are MarginalDistances: checked above)
            warn_outside_calibration("ksg_mi", "ksg", x.n_samples, x.n_features + y.n_features,
                                     value / factor / np.log(2))
        return value
    noise = check_nonnegative_float(noise, "noise")
    x, y = check_paired(x, y)
    k = check_k(k, x.shape[0])
    rng = check_random_state(random_state)
    check_choice(backend, "backend", BACKENDS)
    if backend == "torch":
        check_torch_device(device)
    check_distance_cache(distance_cache)
    standardize = check_flag(standardize, "standardize")
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return 0.0  # I(c; Y) = 0 (see Notes)
    n_runs, n_features = x.shape[0], x.shape[1] + y.shape[1]
    check_repeated_runs(x, y, "the KSG estimate")
    _warn_if_tied(x, y)
    if standardize:
        x, y = standardize_columns(x), standardize_columns(y)
    if noise > 0:
        x = add_tie_breaking_noise(x, noise, rng)
        y = add_tie_breaking_noise(y, noise, rng)
    x, y = kernel_input(x, y, dtype)
    if backend == "torch":
        nx, ny = ksg_counts_torch(x, y, k, algorithm, dtype, device)
    else:
        nx, ny = ksg_counts(x, y, k, algorithm, dtype, distance_cache)
    nats = float(ksg_from_counts(nx, ny, k, algorithm))
    warn_outside_calibration("ksg_mi", "ksg", n_runs, n_features, nats / np.log(2))
    return float(nats * factor)


def check_ksg_settings(units: str, algorithm: int, dtype: DTypeLike) -> tuple[float, int, str]:
    """(nats-to-units factor, algorithm, dtype name) after checking each."""
    factor = check_units(units)
    check_choice(algorithm, "algorithm", (1, 2))
    if not isinstance(dtype, str):  # np.float32, np.dtype("float32"), ...
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            pass
    check_choice(dtype, "dtype", DTYPES)
    return factor, algorithm, cast(str, dtype)  # a name of DTYPES: checked just above


def ksg_estimates_from_distances(dx: np.ndarray, dy: np.ndarray, permutations: Iterable[np.ndarray], k: int,
                                 algorithm: int, *, method: str = "auto",
                                 lists: tuple[NeighbourLists, NeighbourLists] | None = None,
                                 stats: dict[str, Any] | None = None) -> np.ndarray:
    """KSG estimates (nats) of the pairing x[i] <-> y[perm[i]] for the identity and then
    each permutation, from the marginal distance matrices.

    Each pairing costs O(n^2) by brute force, or about O(n sqrt(k n)) from sorted
    neighbour lists made once per matrix (``method="auto"`` uses them from
    ``LIST_MIN_SAMPLES`` = 1,000 samples and 8 pairings on; "lists", "brute" force one way).
    The neighbour counts, and so the estimates, are the same to the bit either way. `lists`
    and `stats`: see :func:`mianalysis.estimators._neighbours.permuted_counts`.
    """
    k = check_k(k, dx.shape[0])
    perms = [np.arange(dx.shape[0])] + list(permutations)
    return np.array([ksg_from_counts(nx, ny, k, algorithm)
                     for nx, ny in permuted_counts(dx, dy, perms, int(k), int(algorithm), method=method,
                                                   lists=lists, stats=stats)])


def ksg_estimates_from_marginals(x: MarginalDistances, y: MarginalDistances, *, n_permutations: int = 0,
                                 random_state: int | np.random.Generator | None = None, k: int = 3, algorithm: int = 1,
                                 units: str = "bits", extra: Iterable[str] = ()) -> np.ndarray:
    """KSG estimates in `units` from two :class:`MarginalDistances`: of the pairing as
    given, then of ``x[i] <-> y[perm[i]]`` for each of `n_permutations` permutations drawn
    one after the other from `random_state`; O(n^2) each. The path of :func:`ksg_mi` and
    :func:`mianalysis.mi_permutation_test` when they are given such distances.

    `extra` names settings the caller was given that do not apply to precomputed
    distances (a ValueError names them). Everything is checked before any work. A variable
    without varying features has MI 0 with anything: every estimate is then 0 (and no
    permutation is drawn).

    Examples
    --------
    Four evenly spaced samples paired with themselves: every sample's nearest neighbour is
    at distance 1 and none is closer in either margin, so with k = 1 the estimate is
    psi(1) + psi(4) - 2 psi(1) = 1 + 1/2 + 1/3 nats:

    >>> from mianalysis.estimators.ksg import MarginalDistances, ksg_estimates_from_marginals
    >>> dx = MarginalDistances.of([0.0, 1.0, 2.0, 3.0], noise=0)
    >>> ksg_estimates_from_marginals(dx, dx, k=1, units="nats")
    array([1.83333333])
    """
    n_permutations = check_int(n_permutations, "n_permutations", low=0)
    rng = check_random_state(random_state)
    factor, algorithm, _ = check_ksg_settings(units, algorithm, "float64")
    _check_distance_pair(x, y)
    if extra:
        raise ValueError(f"{', '.join(f'`{e}`' for e in sorted(extra))} cannot be applied to MarginalDistances: "
                         "the samples were made ready by MarginalDistances.of (standardize, noise) in float64 "
                         "for the Numba kernels; give the settings there, or pass arrays")
    k = check_k(k, x.n_samples)
    if x.n_features == 0 or y.n_features == 0:  # I(c; Y) = 0 (see ksg_mi's Notes)
        return np.zeros(1 + n_permutations)
    permutations = [rng.permutation(x.n_samples) for _ in range(n_permutations)]
    lists: tuple[NeighbourLists, NeighbourLists] | None = None
    if use_lists(x.n_samples, 1 + n_permutations):  # made once per variable and k, for every pair it is in
        lists = (x.neighbour_lists(k), y.neighbour_lists(k))
    dx, dy = x._kernel_matrix, y._kernel_matrix
    if dx.dtype != dy.dtype:  # one exact float32 matrix, one float64: compare in float64 (exactly the same)
        dx, dy = dx.astype(np.float64), dy.astype(np.float64)
        lists = None if lists is None else (_float64_lists(lists[0]), _float64_lists(lists[1]))
    nats = ksg_estimates_from_distances(dx, dy, permutations, k, algorithm, lists=lists)
    # Bits by division by log(2): the conversion analyze's tables have always been made with
    # on this path (the array path multiplies by 1 / log(2); the two may differ in the last bit).
    return nats if factor == 1.0 else nats / np.log(2)


def _float64_lists(lists: NeighbourLists) -> NeighbourLists:
    """Neighbour lists with their distances (values, cover) in float64; the indices as they are."""
    values, indices, cover = lists
    return values.astype(np.float64), indices, cover.astype(np.float64)


def _check_distance_pair(x: MarginalDistances, y: MarginalDistances) -> None:
    """Refuse `x`, `y` unless both are :class:`MarginalDistances` of the same samples' count."""
    for name, value in (("x", x), ("y", y)):
        if not isinstance(value, MarginalDistances):
            raise TypeError(f"`{name}` must be MarginalDistances like the other argument (precomputed distances "
                            f"pair only with precomputed distances); got {type(value).__name__}")
    if x.n_samples != y.n_samples:
        raise ValueError(f"`x` and `y` must have the same number of samples; got {x.n_samples} and {y.n_samples}")


def ksg_estimates_of_subsets(x: MarginalDistances, y: MarginalDistances, subsets: Iterable[ArrayLike], *, k: int = 3,
                             algorithm: int = 1, units: str = "bits") -> np.ndarray:
    """KSG estimates in `units` of subsets of the samples, from two :class:`MarginalDistances`:
    for each array of distinct sample indices in `subsets`, the estimate of those samples
    alone, read from the distances already made (O(m^2) for m samples; nothing recomputed).

    Each equals :func:`ksg_mi` with ``noise=0`` on the samples as :meth:`MarginalDistances.of`
    prepared them (standardized, noised once), restricted to the subset: the counts are the
    same to the bit, the estimate to the last bit of the conversion to bits (as
    :func:`ksg_estimates_from_marginals`). This is how :func:`mianalysis.analyze` makes KSG's
    half-subsampling replicates where it keeps the distances: each half is the
    prepared samples' half, with the tie-breaking noise of the full estimate.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import MarginalDistances, ksg_estimates_of_subsets

    Three halves of 400 samples whose exact MI is 1 bit:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((400, 2))
    >>> y = x + rng.standard_normal((400, 2))
    >>> dx, dy = MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)
    >>> halves = [rng.permutation(400)[:200] for _ in range(3)]
    >>> ksg_estimates_of_subsets(dx, dy, halves).round(2)
    array([0.98, 1.08, 1.21])
    """
    from ._kernels import subset_neighbour_counts

    factor, algorithm, _ = check_ksg_settings(units, algorithm, "float64")
    _check_distance_pair(x, y)
    rows = []
    for subset in subsets:
        subset = np.asarray(subset)
        if subset.ndim != 1 or subset.dtype.kind not in "iu":
            raise ValueError(f"each subset must be a 1-D array of sample indices; got {subset.dtype} array of shape "
                             f"{subset.shape}")
        if subset.size and (subset.min() < 0 or subset.max() >= x.n_samples):
            raise ValueError(f"subset indices must lie in [0, {x.n_samples}); got {subset.min()} to {subset.max()}")
        if np.unique(subset).size != subset.size:
            raise ValueError("a subset must not repeat a sample (a repeated sample is at distance 0 from its copy, "
                             "which breaks the estimator's counts)")
        rows.append(np.ascontiguousarray(subset, dtype=np.int64))
    out = np.empty(len(rows))
    for j, subset in enumerate(rows):
        neighbours = int(check_k(k, subset.size))
        if x.n_features == 0 or y.n_features == 0:  # I(c; Y) = 0 (see ksg_mi's Notes)
            out[j] = 0.0
            continue
        nx, ny = subset_neighbour_counts(x._kernel_matrix, y._kernel_matrix, subset, neighbours, int(algorithm))
        out[j] = ksg_from_counts(nx, ny, neighbours, algorithm)
    return out if factor == 1.0 else out / np.log(2)


class MarginalDistances:
    """The max-norm distances between every two samples of one variable, made once and
    used by many KSG estimates.

    Given the marginal neighbour structure, a KSG estimate needs no coordinates: pairing
    `x` with `y`, or with any shuffle of `y`, changes which rows meet, not the distances
    within `x` or within `y`. Make one per variable with :meth:`of` and pass two to
    :func:`ksg_mi` or :func:`mianalysis.mi_permutation_test` in place of `x` and `y`: each
    estimate then costs O(n^2) instead of O(n^2 d), and one variable's distances serve
    every pair and every permutation it is in. :func:`mianalysis.analyze` keeps one per
    client and checkpoint this way (its `distance_cache`).

    Parameters
    ----------
    matrix : ndarray of shape (n_samples, n_samples)
        Max-norm distances (float64, symmetric, zero diagonal), as
        :meth:`of` computes them; kept read-only. float32 only where it holds the float64
        distances exactly (``MarginalDistances.of(..., compact=True)``).
    n_features : int
        How many features of the samples vary; 0 makes every MI with this variable 0.

    Attributes
    ----------
    matrix : ndarray of shape (n_samples, n_samples)
    n_features : int
    n_samples : int

    Notes
    -----
    The matrix holds n^2 float64 values (3.9 GB at n = 22,000; half in float32 with
    ``of(..., compact=True)`` where that is exact): see :meth:`cache_fits`.
    The tie-breaking noise is drawn once per variable, so estimates from these distances
    equal :func:`ksg_mi` with ``noise=0`` on the samples as :meth:`of` prepared them (up
    to the last bit of the conversion to bits).

    Examples
    --------
    Three samples of two features; the distance of two samples is their largest
    coordinate difference:

    >>> from mianalysis import MarginalDistances
    >>> d = MarginalDistances.of([[0.0, 1.0], [2.0, 5.0], [1.0, 1.0]], noise=0)
    >>> d.matrix
    array([[0., 4., 1.],
           [4., 0., 4.],
           [1., 4., 0.]])

    The KSG estimate and permutation test of two variables from their distances:

    >>> import numpy as np
    >>> from mianalysis import ksg_mi, mi_permutation_test
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((500, 2))
    >>> y = x + rng.standard_normal((500, 2))   # exact MI: 1 bit
    >>> dx, dy = MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)
    >>> round(ksg_mi(dx, dy), 2)
    0.98
    >>> mi_permutation_test(dx, dy, n_permutations=99, random_state=0).p_value
    0.01
    """

    __slots__ = ("matrix", "n_features", "_lists", "_kernel_matrix")

    def __init__(self, matrix: np.ndarray, n_features: int) -> None:
        matrix = np.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.dtype not in (np.float64, np.float32):
            raise ValueError(f"`matrix` must be a square float64 array of distances (or float32 where exact); got "
                             f"{matrix.dtype} array of shape {matrix.shape} (MarginalDistances.of makes one from "
                             "samples)")
        n_features = check_int(n_features, "n_features", low=0)
        # The kernels get the array as given where it is writable: Numba types a read-only array apart and
        # would compile every kernel again for it (about a minute on a cold cache). They never write to it.
        self._kernel_matrix = matrix
        matrix = matrix.view()
        matrix.flags.writeable = False
        self.matrix = matrix
        self.n_features = int(n_features)
        self._lists: dict = {}  # k -> sorted neighbour lists (neighbour_lists)

    def neighbour_lists(self, k: int) -> NeighbourLists:
        """Each sample's nearest neighbours sorted by distance, made on first use for `k`
        and kept: what permutation nulls from these distances walk (see
        :func:`ksg_estimates_from_distances`). About 3 sqrt(k n) x 1.5 entries per sample
        (0.4 GB at n = 26,400 and k = 3)."""
        k = check_k(k, self.n_samples)
        if k not in self._lists:
            self._lists[k] = neighbour_lists(self._kernel_matrix, k)
        return self._lists[k]

    @property
    def n_samples(self) -> int:
        return self.matrix.shape[0]

    def __repr__(self) -> str:
        return f"MarginalDistances(n_samples={self.n_samples}, n_features={self.n_features})"

    @classmethod
    def of(cls, samples: ArrayLike, *, noise: float = KSG_NOISE, random_state: int | np.random.Generator | None = None,
           standardize: bool = False, compact: bool = False) -> MarginalDistances:
        """The distances of `samples`, made ready as :func:`ksg_mi` makes its input ready.

        Parameters
        ----------
        samples : array-like of shape (n_samples, n_features) or (n_samples,)
            Finite samples of one variable; a 1-D array is one feature.
        noise : float, default=KSG_NOISE (1e-10)
            Tie-breaking noise, times each feature's standard deviation (see :func:`ksg_mi`).
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the noise.
        standardize : bool, default=False
            First divide each feature by its standard deviation (see :func:`ksg_mi`).
        compact : bool, default=False
            Keep the distances in float32 (half the memory: 2.8 GB instead of 5.6 GB at
            n = 26,400) when that is exact, i.e. when every float64 distance is a float32
            number, and in float64 otherwise (see Notes). Every estimate is then the same
            to the bit as from the float64 distances.

        Returns
        -------
        MarginalDistances

        Notes
        -----
        Constant features are dropped, by the rule of :func:`ksg_mi` (exactly constant, or
        varying by no more than float32 rounding at their magnitude): an exact constant adds 0
        to every max-norm distance, and rounding noise, once standardised, would otherwise
        weigh as much as any feature (with no feature varying, every distance is 0). Samples whose
        magnitude exceeds 2^1000 are refused (a difference of two could overflow; scale
        them, or pass arrays to :func:`ksg_mi`, which rescales x and y together).

        When float32 is exact (`compact`): KSG only compares distances (the joint one is the
        larger of two marginal ones), so distances that are float32 numbers give the same
        counts in float32 as in float64. They are when the samples lie on a binary grid of
        at most 24 significant bits: integers below 2^24 in magnitude, or multiples of
        2^-m below 2^(24 - m) (counts, quantised values, data stored as such fixed-point
        numbers), with ``noise=0``. Tie-breaking noise or standardization makes the samples
        general float64 numbers whose differences need up to 53 bits: then the float64
        matrix is kept (rounding to float32 could merge two distances and change a count).
        Whether it was exact is checked on every distance; :attr:`matrix` tells which
        (its dtype).

        Examples
        --------
        >>> from mianalysis import MarginalDistances
        >>> MarginalDistances.of([1.0, 4.0, 2.0], noise=0).matrix[0]
        array([0., 3., 1.])
        >>> MarginalDistances.of([1.0, 4.0, 2.0], noise=0, compact=True).matrix.dtype
        dtype('float32')
        >>> MarginalDistances.of([1.0, 4.0, 2.0], compact=True).matrix.dtype  # with noise
        dtype('float64')
        """
        a = check_samples(samples, "samples")
        noise = check_nonnegative_float(noise, "noise")
        rng = check_random_state(random_state)
        standardize = check_flag(standardize, "standardize")
        if a.shape[0] < 2:
            raise ValueError(f"`samples` need at least 2 samples (rows); got {a.shape[0]}")
        keep = varying_columns(a)
        n_features = int(np.count_nonzero(keep))
        a = a[:, keep] if n_features else np.zeros((a.shape[0], 1))
        if standardize:
            a = standardize_columns(a)
        if noise > 0:
            a = add_tie_breaking_noise(a, noise, rng)
        if np.abs(a).max() > FLOAT64_MAX_ABS:
            raise ValueError("`samples` reach beyond 2^1000 in magnitude, where a difference of two samples could "
                             "overflow; scale them (MI does not change), or pass arrays to ksg_mi")
        compact = check_flag(compact, "compact")
        matrix = marginal_distances(a, "float64")
        if compact:
            matrix = exact_float32(matrix)
        return cls(matrix, n_features)

    @staticmethod
    def cache_fits(n_samples: int, *, count: int = 1, distance_cache: bool | str = "auto") -> bool:
        """Whether to keep `count` distance matrices of `n_samples` samples in memory.

        Parameters
        ----------
        n_samples : int
        count : int, default=1
            How many matrices (e.g. one per client).
        distance_cache : {"auto", True, False}, default="auto"
            True: always; False: never; "auto": when their ``count x n_samples^2`` float64
            values take at most half the memory this process can still allocate (the
            least of physical memory, the room under its cgroup's memory limit and under
            ``ulimit -v``). The rule of every `distance_cache` argument of the package.

        Returns
        -------
        bool

        Examples
        --------
        >>> from mianalysis import MarginalDistances
        >>> MarginalDistances.cache_fits(1000, count=3)   # 24 MB
        True
        >>> MarginalDistances.cache_fits(1000, distance_cache=False)
        False
        """
        n_samples = check_int(n_samples, "n_samples", low=0)
        count = check_int(count, "count", low=0)
        return use_distance_cache(distance_cache, count * n_samples * n_samples * 8)


def exact_float32(matrix: np.ndarray, block: int = 1024) -> np.ndarray:
    """`matrix` as float32 if every value is a float32 number (checked block by block, so
    that the check needs no second full-size array), else `matrix` itself.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import exact_float32
    >>> exact_float32(np.array([[0.0, 0.5], [0.5, 0.0]])).dtype
    dtype('float32')
    >>> exact_float32(np.array([[0.0, 0.1], [0.1, 0.0]])).dtype   # 0.1 needs 53 bits
    dtype('float64')
    """
    for start in range(0, matrix.shape[0], block):
        part = matrix[start:start + block]
        if not np.array_equal(part.astype(np.float32), part):
            return matrix
    return matrix.astype(np.float32)


def ksg_permutation_estimates(x: np.ndarray, y: np.ndarray, permutations: Iterable[np.ndarray], k: int, algorithm: int,
                              dtype: str = "float64") -> np.ndarray:
    """KSG estimates (nats) of the identity pairing and each permutation, from the two
    marginal distance matrices computed once (O(n^2 d)); each pairing then costs O(n^2),
    or about O(n sqrt(k n)) from neighbour lists (:func:`ksg_estimates_from_distances`).
    Needs 2 n^2 values of `dtype` in memory; with the lists (``use_lists``), only the tiles
    on and above the diagonal are kept (about n^2, see
    :func:`mianalysis.estimators._neighbours.distance_tiles`). Equal, to the bit, to
    ``ksg_mi(x, y[perm], noise=0)`` for each perm (`x` and `y` without constant columns)."""
    k = check_k(k, x.shape[0])
    x, y = kernel_input(x, y, dtype)
    permutations = list(permutations)
    n = x.shape[0]
    if use_lists(n, 1 + len(permutations)):
        tiles_x, tiles_y = distance_tiles(x, y, dtype)
        counts = listed_counts(tiles_x, tiles_y, n, [np.arange(n)] + permutations, int(k), int(algorithm))
        return np.array([ksg_from_counts(nx, ny, k, algorithm) for nx, ny in counts])
    return ksg_estimates_from_distances(marginal_distances(x, dtype), marginal_distances(y, dtype), permutations, k,
                                        algorithm)


def standardize_columns(a: ArrayLike) -> np.ndarray:
    """`a` (float64, 2-D) with each column divided by its standard deviation (ddof=0);
    constant columns are left as they are.

    KSG's max-norm then weighs every coordinate alike. The MI of `a` with anything is
    unchanged by this (an invertible map of each coordinate), and so is the estimate after
    any per-column rescaling of `a` (up to floating-point rounding).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import standardize_columns
    >>> standardize_columns(np.array([[0.0, 10.0, 5.0], [2.0, 30.0, 5.0]]))
    array([[0., 1., 5.],
           [2., 3., 5.]])
    """
    a = np.asarray(a, dtype=np.float64)
    sd = column_std(a)
    return a / np.where(sd > 0, sd, 1.0)


def add_tie_breaking_noise(a: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Return `a` plus Gaussian noise of `noise` times each column's standard deviation
    (computed without overflow or underflow at any finite magnitude)."""
    return a + rng.standard_normal(a.shape) * column_std(a, noise)


# float64 distances are exact max-abs differences at any magnitude below this; beyond it a
# difference of two samples could overflow.
FLOAT64_MAX_ABS = 2.0**1000


def kernel_input(x: np.ndarray, y: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """`x` and `y` (float64) prepared to be cast to `dtype` for the neighbour-count kernels,
    as far as possible without changing any neighbour count.

    float64: if any value exceeds 2^1000, both are multiplied by one power of two (exact; a
    common factor keeps every comparison of x- and y-distances), so that no difference of two
    samples overflows. float32: each column whose midrange is farther from 0 than its range
    is wide is first centred on its midrange, in float64 (a translation: distances change
    only by float64 rounding; e.g. 1e4 + N(0, 1) would otherwise carry absolute rounding
    errors of ~1e-3 into its float32 distances), and then both are scaled by one power of two when
    their largest value lies outside [2^-60, 2^60] (1e-200 would underflow float32 and 1e300
    overflow it). The midrange and the maximum do not depend on the order of the rows, so a
    permutation of the rows of `y` commutes with this preparation.
    """
    if dtype == "float64":
        top = max(np.abs(x).max(), np.abs(y).max())
        if top <= FLOAT64_MAX_ABS:
            return x, y
        scale = pow2_scale(top)
        return x / scale, y / scale
    x, y = _centre_far_columns(x), _centre_far_columns(y)
    top = max(np.abs(x).max(), np.abs(y).max())
    if top == 0 or FLOAT32_RANGE[0] <= top <= FLOAT32_RANGE[1]:
        return x, y
    scale = pow2_scale(top)
    with np.errstate(under="ignore"):
        return x / scale, y / scale


def _centre_far_columns(a: np.ndarray) -> np.ndarray:
    """`a` with each column whose midrange is farther from 0 than its range is wide
    translated to midrange 0 (float64; halves first, so that nothing overflows)."""
    low, high = a.min(axis=0), a.max(axis=0)
    mid = low / 2 + high / 2
    far = np.abs(mid) > high / 2 - low / 2
    if not far.any():
        return a
    return a - np.where(far, mid, 0.0)


def ksg_from_counts(nx: np.ndarray, ny: np.ndarray, k: int, algorithm: int) -> float:
    """The KSG estimate in nats from the marginal neighbour counts."""
    n = nx.shape[0]
    if algorithm == 1:
        return digamma(k) + digamma(n) - np.mean(digamma(nx + 1.0) + digamma(ny + 1.0))
    return digamma(k) - 1.0 / k + digamma(n) - np.mean(digamma(nx) + digamma(ny))


class TiedSamplesWarning(UserWarning):
    """Samples given to the KSG estimator are tied or lie on a lattice (see :func:`ksg_ties`).

    KSG (Kraskov et al. 2004) assumes continuous densities: no two samples at the same
    distance. Tied values make the k-th neighbour distance ambiguous and the marginal
    counts (samples strictly closer than it) jump; the tie-breaking noise then decides
    them, so the estimate reflects the noise's scale rather than the MI.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> from mianalysis import ksg_mi
    >>> from mianalysis.estimators.ksg import TiedSamplesWarning
    >>> grid = 1e-5 * np.random.default_rng(0).integers(-1, 2, size=(300, 2))  # start +- lr
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = ksg_mi(grid[:, :1], grid[:, 1:])
    >>> any(issubclass(w.category, TiedSamplesWarning) for w in caught)
    True
    """


@dataclass(frozen=True)
class KSGTies:
    """How far paired samples are from KSG's continuity assumption (:func:`ksg_ties`).

    Attributes
    ----------
    duplicate_share : float
        Share of the values of the varying coordinates of x and y that another sample
        repeats in the same coordinate (0 for continuous data, near 1 on a grid).
    difference_share : float
        The same for the paired differences ``y - x`` (x and y of equal size; NaN
        otherwise): near 1 when y sits on a lattice around x, such as a client one
        optimiser step of fixed size away from another (Chebyshev distance exactly 2 lr).
    tied_share : float
        Share of the `n_checked` samples whose k-th and (k + 1)-th nearest neighbours in
        the joint max-norm are at exactly the same distance.
    n_checked : int
        Samples whose neighbour distances were found (evenly spaced rows).
    threshold : float
        The share above which the samples are flagged.
    """

    duplicate_share: float
    difference_share: float
    tied_share: float
    n_checked: int
    threshold: float

    @property
    def flagged(self) -> bool:
        """Whether any share exceeds `threshold` (KSG should not be reported on these samples)."""
        return any(v > self.threshold for v in (self.duplicate_share, self.difference_share, self.tied_share)
                   if not np.isnan(v))

    @property
    def note(self) -> str:
        """"" when not flagged; otherwise a table note naming the shares above the threshold."""
        if not self.flagged:
            return ""
        parts = [f"{name} {value:.0%}" for name, value in (("repeated values", self.duplicate_share),
                                                           ("repeated differences y - x", self.difference_share),
                                                           ("tied k-th neighbour distances", self.tied_share))
                 if not np.isnan(value) and value > self.threshold]
        return "ties/lattice (KSG assumes continuous samples): " + ", ".join(parts)


def duplicate_share(a: np.ndarray) -> float:
    """Share of the entries of `a` (n, d) whose value another row repeats in the same
    column, over the columns that vary (0.0 when none does).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import duplicate_share
    >>> duplicate_share(np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [2.0, 4.0]]))
    0.25
    """
    a = np.asarray(a, dtype=np.float64)
    if a.size == 0:
        return 0.0
    keep = varying_columns(a)
    if not keep.any():
        return 0.0
    from ._kernels import repeated_value_counts  # numba: loaded on first use

    a = np.ascontiguousarray(a[:, keep])
    return _repeated_share(repeated_value_counts(a, a[:, :0], False), a.shape[0])


def _repeated_share(counts: np.ndarray, n: int) -> float:
    """The share of repeated entries among n rows of the columns whose `counts` are given
    (exact: integer counts over an integer size)."""
    return int(counts.sum()) / (n * counts.size)


def _value_rows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x and y at most TIE_VALUE_ROWS evenly spaced runs (all runs when there are fewer)."""
    n = x.shape[0]
    if n <= TIE_VALUE_ROWS:
        return x, y
    rows = np.unique(np.linspace(0, n - 1, TIE_VALUE_ROWS).round().astype(np.int64))
    return x[rows], y[rows]


def value_tie_shares(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The two value shares of KSG's tie check (:func:`ksg_mi`'s warning, :func:`ksg_ties`):
    the :func:`duplicate_share` of x's and y's values together, and that of the paired
    differences ``y - x`` (NaN unless x and y have as many columns), both among at most
    :data:`TIE_VALUE_ROWS` evenly spaced runs of the 2-D arrays `x` and `y`.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import value_tie_shares
    >>> x = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> value_tie_shares(x, x + np.array([[0.5], [0.5], [0.7], [0.9]]))
    (0.0, 0.5)
    """
    return _tie_shares(x, y, varying=False)


def _tie_shares(x: np.ndarray, y: np.ndarray, *, varying: bool) -> tuple[float, float]:
    """:func:`value_tie_shares`; `varying`: every column of `x` and `y` varies (over all their
    rows, as after :func:`mianalysis.analysis.varying_columns`), so that with at most
    TIE_VALUE_ROWS rows nothing is dropped before counting. One pass of exact counts
    (:func:`repeated_value_counts`) over the values and the differences."""
    from ._kernels import repeated_value_counts  # numba: loaded on first use

    full = x.shape[0] <= TIE_VALUE_ROWS
    x, y = _value_rows(x, y)
    x, y = np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64)
    paired = x.shape[1] == y.shape[1]
    counts = repeated_value_counts(x, y, paired)
    sides = counts[:x.shape[1] + y.shape[1]]
    keep = np.ones(sides.size, dtype=bool) if varying and full else np.concatenate(
        [varying_columns(x), varying_columns(y)])
    values = _repeated_share(sides[keep], x.shape[0]) if keep.any() else 0.0
    if not paired:
        return values, np.nan
    keep = varying_columns(y - x)
    differences = counts[sides.size:]
    return values, _repeated_share(differences[keep], x.shape[0]) if keep.any() else 0.0


def _warn_if_tied(x: np.ndarray, y: np.ndarray, threshold: float = TIE_THRESHOLD) -> None:
    """A TiedSamplesWarning when the values (or the paired differences) of `x` and `y` are tied;
    every column of `x` and `y` varies (constant columns were dropped)."""
    shares = _tie_shares(x, y, varying=True)
    if any(v > threshold for v in shares if not np.isnan(v)):
        differences = "" if np.isnan(shares[1]) else f" and {shares[1]:.0%} of their paired differences y - x"
        warnings.warn(f"{shares[0]:.0%} of the samples' values{differences} repeat within their coordinate: the "
                      "samples are tied or lie on a lattice, which breaks the KSG estimator's continuity assumption "
                      "(see mianalysis.ksg_ties)", TiedSamplesWarning, stacklevel=3)


def ksg_ties(x: ArrayLike, y: ArrayLike, k: int = 3, *, threshold: float = TIE_THRESHOLD,
             max_rows: int = TIE_CHECK_ROWS) -> KSGTies:
    """Whether paired samples are tied or on a lattice, which breaks KSG's continuity assumption.

    Three shares: of the values of x's and y's varying coordinates that repeat within their
    coordinate, of the paired differences ``y - x`` that do (x and y of equal size; both
    counted among at most :data:`TIE_VALUE_ROWS` evenly spaced samples), and
    of checked samples whose k-th and (k + 1)-th nearest neighbours in the joint max-norm
    are equally far (so that the k-th neighbour distance of KSG is ambiguous). Continuous
    data give 0 for all three. A share above `threshold` flags the samples
    (:attr:`KSGTies.flagged`, :attr:`KSGTies.note`): a table should mark the KSG row of such
    a pair rather than report it as an estimate of the MI.

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X (as given to :func:`ksg_mi`, before any tie-breaking noise).
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    k : int, default=3
        KSG's neighbours, ``1 <= k < n_samples - 1``.
    threshold : float, default=TIE_THRESHOLD (0.1)
        The share in [0, 1) above which the samples are flagged.
    max_rows : int, default=TIE_CHECK_ROWS (100)
        Samples (evenly spaced rows) whose neighbour distances are found; each costs
        O(n_samples (d_x + d_y)).

    Returns
    -------
    KSGTies

    Notes
    -----
    Kraskov et al. (2004) assume continuous densities and break the ties of real data by
    tiny noise. That is harmless for values tied by rounding, but not for samples that lie
    on a grid: with Adam at a learning rate of 1e-5 the first checkpoints of a head trained
    from a fixed start take values start +- lr in every coordinate (and from a per-run
    start two clients are exactly 2 lr apart in Chebyshev distance), so every distance is
    a multiple of lr, and the noise, not the data, decides every neighbour.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.ksg import ksg_ties
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((500, 4))
    >>> ksg_ties(x, x + rng.standard_normal((500, 4))).flagged
    False
    >>> grid = 1e-5 * rng.integers(-1, 2, size=(500, 4))   # values start +- lr, start = 0
    >>> ties = ksg_ties(grid, grid + 1e-5 * rng.integers(-1, 2, size=(500, 4)))
    >>> ties.flagged, ties.duplicate_share
    (True, 1.0)
    """
    x, y = check_paired(x, y)
    n = x.shape[0]
    k = check_int(k, "k", low=1, high=max(1, n - 2))
    threshold = check_real(threshold, "threshold", low=0, high=1, high_open=True)
    max_rows = check_int(max_rows, "max_rows", low=1)
    if n < k + 2:
        raise ValueError(f"`x` and `y` need at least k + 2 = {k + 2} samples to compare the k-th and (k + 1)-th "
                         f"neighbour distances; got {n}")
    values, differences = value_tie_shares(x, y)
    rows = np.unique(np.linspace(0, n - 1, min(n, max_rows)).round().astype(np.int64))
    joint = np.hstack([x, y])
    dist = np.zeros((rows.size, n))
    for j in range(joint.shape[1]):  # max-norm, one coordinate at a time: O(rows x n) memory
        np.maximum(dist, np.abs(joint[rows, j, None] - joint[None, :, j]), out=dist)
    dist[np.arange(rows.size), rows] = np.inf  # a sample is not its own neighbour
    nearest = np.partition(dist, (k - 1, k), axis=1)
    tied = float(np.mean(nearest[:, k - 1] == nearest[:, k]))
    return KSGTies(values, differences, tied, int(rows.size), threshold)
