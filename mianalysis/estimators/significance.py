"""Permutation test of independence for the MI estimators."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from .._internal.validation import (
    check_choice,
    check_flag,
    check_int,
    check_k,
    check_nonnegative_float,
    check_paired,
    check_random_state,
    drop_constant_features,
)
from ._neighbours import (check_distance_cache, check_torch_device, list_bytes, list_workspace_bytes, tile_bytes,
                          use_distance_cache, use_lists)
from .gaussian import (CROSS_PRECISIONS, check_covariance_fits, check_gaussian_settings, gaussian_mi,
                       gaussian_permutation_estimates)
from .ksg import (BACKENDS, KSG_NOISE, MarginalDistances, add_tie_breaking_noise, check_ksg_settings,
                  ksg_estimates_from_marginals, ksg_permutation_estimates, standardize_columns)
from .registry import estimator_names, get_estimator
from .repeats import check_repeated_runs, runs_checked

__all__ = ["PermutationTestResult", "mi_permutation_test", "gaussian_permutation_test", "SINGLE_PRECISION_RUNS"]

# From this many runs on, the Gaussian and copula shuffles sum their cross products in
# float32 by default (cross_precision="auto"): the cross products are then most of a test's
# time, and single precision makes them about 3x faster.
SINGLE_PRECISION_RUNS = 2000


def _check_arguments(estimator: str, kwargs: Mapping[str, Any]) -> None:
    """TypeError unless `estimator` takes every keyword argument of `kwargs`; the message
    names the other estimators that take the unknown ones."""
    entry = get_estimator(estimator)
    unknown = set(kwargs) - entry.arguments
    if not unknown:
        return
    message = f"{entry.function.__name__}() got unexpected keyword arguments {sorted(unknown)}"
    owners: dict[tuple[str, ...], list[str]] = {}  # the other estimators that take them -> those arguments
    for argument in sorted(unknown):
        takers = tuple(n for n in estimator_names() if n != estimator and argument in get_estimator(n).arguments)
        if takers:
            owners.setdefault(takers, []).append(argument)
    for takers, theirs in owners.items():
        names = ", ".join(f"`{a}`" for a in theirs)
        message += (f": {names} {'is a setting' if len(theirs) == 1 else 'are settings'} of estimator="
                    + " or ".join(repr(t) for t in takers))
    raise TypeError(message + f"; estimator={estimator!r} takes {sorted(entry.arguments)}")


@dataclass(frozen=True)
class PermutationTestResult:
    """Outcome of :func:`mi_permutation_test`.

    Attributes
    ----------
    estimate : float
        MI of the data as paired.
    null_mean, null_std : float
        Mean and standard deviation (ddof=1) of the null distribution.
    p_value : float
        ``(1 + #{null >= statistic}) / (1 + n_permutations)``: `statistic` is the estimate,
        or the unshuffled data's value computed as the shuffles' were (single-precision
        cross products: :func:`mi_permutation_test`'s `cross_precision`).
    null_distribution : ndarray of shape (n_permutations,)
        MI after each shuffle of the pairing.
    estimator : str
    """

    estimate: float
    null_mean: float
    null_std: float
    p_value: float
    null_distribution: np.ndarray
    estimator: str

    @property
    def n_permutations(self) -> int:
        return int(self.null_distribution.shape[0])

    def __repr__(self) -> str:
        """A short summary (the null distribution by its size, not its values).

        Examples
        --------
        >>> import numpy as np
        >>> from mianalysis.estimators.significance import PermutationTestResult
        >>> PermutationTestResult.from_null(0.5, np.linspace(0.0, 0.2, 99), "gaussian")
        PermutationTestResult(estimator='gaussian', estimate=0.5, null_mean=0.1, null_std=0.0586, p_value=0.01, n_permutations=99)
        """
        return (f"PermutationTestResult(estimator={self.estimator!r}, estimate={self.estimate:.4g}, "
                f"null_mean={self.null_mean:.3g}, null_std={self.null_std:.3g}, p_value={self.p_value:.3g}, "
                f"n_permutations={self.n_permutations})")

    def __str__(self) -> str:
        """One line: the estimate, its null and p-value, and what kind of number it is."""
        from .registry import get_estimator

        try:
            kind = get_estimator(self.estimator).kind
        except ValueError:
            kind = "plain"
        what = {"bound": "a lower bound on the MI", "shrinkage": "the MI of a shrunk covariance: neither an "
                "estimate nor a bound"}.get(kind, "an estimate of the MI")
        return (f"{self.estimator}: {self.estimate:.4g} ({what}); null {self.null_mean:.3g} +- {self.null_std:.3g} "
                f"over {self.n_permutations} shuffles; p = {self.p_value:.3g}")

    @classmethod
    def from_null(cls, estimate: float, null: ArrayLike, estimator: str,
                  statistic: float | None = None) -> PermutationTestResult:
        """The result for an observed `estimate` and its null distribution; the p-value
        compares `statistic` (default: `estimate`) with the null."""
        null = np.asarray(null, dtype=float)
        statistic = estimate if statistic is None else statistic
        return cls(
            estimate=float(estimate),
            null_mean=float(null.mean()),
            null_std=float(null.std(ddof=1)) if null.size > 1 else 0.0,
            p_value=float((1.0 + np.count_nonzero(null >= statistic)) / (1.0 + null.size)),
            null_distribution=null,
            estimator=estimator,
        )


def mi_permutation_test(
    x: ArrayLike | MarginalDistances, y: ArrayLike | MarginalDistances, *, estimator: str = "ksg",
    n_permutations: int = 100,
    random_state: int | np.random.Generator | None = None, distance_cache: bool | str = "auto",
    cross_precision: str = "auto", **estimator_kwargs: Any,
) -> PermutationTestResult:
    """Test whether the MI of `x` and `y` exceeds that of independent data.

    Shuffling the pairing of rows (row ``i`` of `x` with row ``pi(i)`` of `y`) keeps both
    marginal distributions and destroys the dependence, so the estimates on shuffled data
    form the null distribution of the estimator at this sample size and dimension,
    including its bias. High-dimensional KSG and Gaussian estimates are biased; compare an
    estimate with the null, not with zero.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, n_features) or (n_samples,), or MarginalDistances
        Paired samples. With :class:`mianalysis.MarginalDistances` for both (KSG only;
        samples standardized and noised once by :meth:`MarginalDistances.of
        <mianalysis.MarginalDistances.of>`), the estimate and every shuffle come from those
        distances in O(n^2) each, and only ``k``, ``algorithm`` and ``units`` apply.
    estimator : str, default="ksg"
        A registered estimator (:func:`mianalysis.estimators.registry.estimator_names`):
        "ksg" (:func:`mianalysis.ksg_mi`), "gaussian" (:func:`mianalysis.gaussian_mi`) or
        "copula" (:func:`mianalysis.gaussian_copula_mi`; the normal scores are computed
        once, and every shuffle shuffles them, which gives the same values as ranking each
        shuffle again). For the Gaussian and copula estimates a shuffle changes only the
        cross-covariance: the marginal blocks are factored once and each shuffle costs one
        cross product and one factor of a matrix of one side's dimension
        (:func:`mianalysis.estimators.gaussian.gaussian_permutation_estimates`, with and
        without shrinkage), giving the values of :func:`mianalysis.gaussian_mi` recomputed
        on each shuffle, up to rounding.
    n_permutations : int, default=100
        Number of shuffles, >= 1.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the shuffles (and of KSG's tie-breaking noise).
    distance_cache : {"auto", True, False}, default="auto"
        KSG only. A shuffle changes which y-row meets which x-row, not the distances
        within x or within y: with the cache, both marginal distance matrices are computed
        once (O(n^2 d)) and every shuffle costs at most O(n^2), for the same values to the
        bit. From 1,000 samples and 7 shuffles on, each sample's nearest marginal
        neighbours are also sorted once (about 3 sqrt(k n) x 1.5 per sample and side), and a
        shuffle finds every sample's k-th joint neighbour from two such lists, in
        about O(n sqrt(k n)) (see Notes); then only the matrices' tiles on and above the
        diagonal are kept, about n^2 values of the estimator's dtype in all (3.9 GB at
        n = 22,000 in float64, half in float32), plus the lists; below, 2 n^2 values (both
        full matrices). "auto" uses it when that is at most half the memory
        the process can still allocate (physical memory, cgroup limits, ``ulimit -v``), False never (each shuffle then recomputes distances, in O(n d) memory;
        False is passed on to :func:`ksg_mi`). With ``backend="torch"`` each estimate is
        computed by :func:`ksg_mi` on the torch backend.
    cross_precision : {"auto", "float64", "float32"}, default="auto"
        Gaussian and copula only: the precision of each shuffle's cross product
        (:func:`mianalysis.estimators.gaussian.gaussian_permutation_estimates`). "float32"
        sums it in single precision, about 3x faster, and then computes the unshuffled
        data's statistic the same way and compares the shuffles with that, not with the
        float64 `estimate`: the test stays exact (a permutation test is exact for any
        statistic applied alike to the data and each shuffle), and the null values agree
        with float64 to about 1e-5 of the estimate. "auto": "float32" from
        ``SINGLE_PRECISION_RUNS`` (2,000) runs on, where the cross products are most of a
        test's time, "float64" below. The reported `estimate` is always float64.
    **estimator_kwargs
        Passed to the estimator (e.g. ``k``, ``units``, ``standardize``). For KSG the
        columns are standardized (if asked) and the tie-breaking noise is added once,
        before the observed estimate, and the same data are shuffled.

    Returns
    -------
    result : PermutationTestResult
        ``estimate``, ``null_mean``, ``null_std``, ``p_value`` and ``null_distribution``.

    Notes
    -----
    All arguments, the estimator's included (``k`` against the number of samples), are
    checked before any work, whichever path computes the estimates.

    Constant features are dropped once, with a :class:`mianalysis.ConstantFeatureWarning`
    (they carry no information; see :func:`ksg_mi`). If no feature of `x` or of `y` varies,
    the MI of the data and of every shuffle is exactly 0: the result has estimate 0, a null
    distribution of zeros and p-value 1.

    Runs stored twice are refused: the test rests on exchangeable runs, and copies of a run
    stay paired in the data while the shuffles separate them, so the data look dependent
    (a copula test of independent clients stored twice gave p <= 0.05 in 6 of 10 pairs).
    Before any estimate, runs that repeat an earlier run exactly (identical rows of x and y
    alike) raise a ValueError naming how many, or, where no feature tells the distinct runs
    apart (samples on a lattice, whose runs coincide by chance), a
    :class:`mianalysis.estimators.repeats.RepeatedRunsWarning`
    (:func:`mianalysis.estimators.repeats.check_repeated_runs`). Values repeated within a
    column are not repeated runs. :class:`mianalysis.MarginalDistances` hold no rows and are
    not checked.

    Which null to use: this permutation null assumes nothing about the distribution and
    serves every estimator and regime, shrinkage included. For plain (unshrunk) Gaussian
    estimates of Gaussian data :func:`mianalysis.gaussian_mi_null` gives the exact law
    without permutations; it does not apply with shrinkage (the shrunk estimate is not a
    function of Wilks' Lambda), nor exactly to non-Gaussian data.

    KSG shuffles from neighbour lists: the joint (max-norm) distance of samples i and j is
    the larger of their two marginal distances, so walking one of i's lists (its
    x-neighbours, or its partner's y-neighbours) in ascending order, with the other list
    in a table by sample, meets every j with both distances listed, at its joint
    distance; once the walk passes the k-th smallest joint distance met, that is the k-th
    joint neighbour distance, and positions in the sorted lists are the marginal counts.
    Each sample walks its sparser side's list. No distance is rounded or combined on the
    way (only compared), so the counts equal the brute-force ones exactly, ties and
    duplicates included, on any CPU and thread count. A sample whose k-th joint neighbour
    lies beyond a list (x and y on different scales, as ``y = 0.5 x + noise`` with little
    noise) walks the longer list with look-ups in its own distance row, which stays in
    cache for every shuffle, and a count beyond a list is counted over that row for all
    the shuffles at once. Timings (a 100-shuffle test against one estimate, at weak and
    strong dependence): ``benchmarks/bench_ksg_permutations.py``.

    The p-value counts the observed pairing as one of the permutations (Phipson and Smyth
    2010), so it is never 0 and is valid at any number of permutations: the smallest
    possible value is ``1 / (1 + n_permutations)``.

    References
    ----------
    B. Phipson and G. K. Smyth, "Permutation p-values should never be zero", Stat. Appl.
    Genet. Mol. Biol. 9 (2010) 39.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import mi_permutation_test
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((500, 2))
    >>> y = x + rng.standard_normal((500, 2))   # exact MI: 2 x 0.5 log2(2) = 1 bit
    >>> res = mi_permutation_test(x, y, n_permutations=99, random_state=0)
    >>> round(res.estimate, 2), round(res.null_mean, 2), res.p_value
    (0.98, -0.01, 0.01)

    No shuffle reaches the estimate: 0.01 = 1 / (1 + 99) is the smallest p-value. For
    independent data the estimate is within the null distribution:

    >>> z = rng.standard_normal((500, 2))
    >>> mi_permutation_test(x, z, n_permutations=99, random_state=0).p_value
    0.43
    """
    entry = get_estimator(estimator)
    n_permutations = check_int(n_permutations, "n_permutations", low=1)
    rng = check_random_state(random_state)
    check_distance_cache(distance_cache)
    _check_precision(cross_precision)
    if isinstance(x, MarginalDistances) or isinstance(y, MarginalDistances):
        # One of them is: ksg_estimates_from_marginals refuses the other unless it is too (TypeError).
        return _test_from_marginals(cast(MarginalDistances, x), cast(MarginalDistances, y), estimator, n_permutations,
                                    rng, estimator_kwargs)
    x, y = check_paired(x, y)
    kwargs = dict(estimator_kwargs)
    n = x.shape[0]
    precision = _precision(cross_precision, n)
    # Every argument of the estimator is checked here, before any work, whichever path runs below.
    _check_arguments(estimator, kwargs)
    if entry.distance_cache:
        factor, algorithm, dtype = check_ksg_settings(kwargs.get("units", "bits"), kwargs.get("algorithm", 1),
                                                      kwargs.get("dtype", "float64"))
        k = check_k(kwargs.get("k", 3), n)
        noise = check_nonnegative_float(kwargs.pop("noise", KSG_NOISE), "noise")
        standardize = check_flag(kwargs.pop("standardize", False), "standardize")
        backend = check_choice(kwargs.get("backend", "numba"), "backend", BACKENDS)
        if backend == "torch":
            check_torch_device(kwargs.get("device"))
    elif entry.check is not None:
        entry.check(**kwargs)
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:  # I(c; Y) = 0, for the data and every shuffle
        return PermutationTestResult.from_null(0.0, np.zeros(n_permutations), estimator)
    if entry.covariance:  # before any matrix is made (and before the transform ranks anything)
        check_covariance_fits(n, x.shape[1] + y.shape[1], f"the permutation test of estimator={estimator!r}")
    # Once, on the observed pairing: the estimates of it and of its shuffles skip their own check
    # (a shuffle may pair a row repeated within x with one repeated within y).
    check_repeated_runs(x, y, f"the permutation test of estimator={estimator!r}")
    with runs_checked():
        estimate_mi = entry.function
        if entry.transform is not None:  # once: a shuffle of the transformed rows is the transform of the shuffle
            x, y = entry.transform(x), entry.transform(y)
            estimate_mi = get_estimator("gaussian").function
        cached = False
        if entry.distance_cache:
            if standardize:  # once, like the noise: the shuffles keep each column's sd
                x, y = standardize_columns(x), standardize_columns(y)
            if noise > 0:
                # Noise once: the observed and the shuffled estimates see the same data.
                x = add_tie_breaking_noise(x, noise, rng)
                y = add_tie_breaking_noise(y, noise, rng)
            kwargs["noise"] = 0.0
            # The marginal distance matrices are Numba's; backend="torch" computes each estimate.
            cache_bytes = 2 * n * n * np.dtype(dtype).itemsize
            if use_lists(n, 1 + n_permutations):  # the matrices' tiles on and above the diagonal, and the lists
                cache_bytes = 2 * (tile_bytes(n, dtype) + list_bytes(n, k, dtype)) + list_workspace_bytes(n, dtype)
            cached = (backend == "numba" and distance_cache is not False
                      and use_distance_cache(distance_cache, cache_bytes))
            kwargs["distance_cache"] = distance_cache  # without the matrices, each estimate may keep its tiles
        if cached:
            perms = [rng.permutation(n) for _ in range(n_permutations)]
            values = ksg_permutation_estimates(x, y, perms, k, algorithm, dtype) * factor
            observed, null = float(values[0]), values[1:]
        elif estimate_mi is gaussian_mi:  # the shuffles from the marginal blocks' factors, computed once
            return _gaussian_shuffles(x, y, gaussian_mi(x, y, **kwargs), n_permutations, rng, precision, kwargs,
                                      estimator)
        else:
            observed = estimate_mi(x, y, **kwargs)
            null = np.empty(n_permutations)
            for b in range(n_permutations):
                null[b] = estimate_mi(x, y[rng.permutation(y.shape[0])], **kwargs)
        return PermutationTestResult.from_null(observed, null, estimator)


def gaussian_permutation_test(x: ArrayLike, y: ArrayLike, estimate: float, *, n_permutations: int = 100,
                              random_state: int | np.random.Generator | None = None, cross_precision: str = "auto",
                              estimator: str = "gaussian", **gaussian_kwargs: Any) -> PermutationTestResult:
    """:func:`mi_permutation_test` of the Gaussian estimate for a caller that has it already.

    ``gaussian_permutation_test(x, y, gaussian_mi(x, y, **kw), ...)`` is
    ``mi_permutation_test(x, y, estimator="gaussian", ..., **kw)`` (the same shuffles from
    `random_state`, the same values) without computing the estimate a second time: `estimate`
    is reported as given, so it must be ``gaussian_mi(x, y, **gaussian_kwargs)`` (of the
    transformed samples, for an estimator with a transform such as the copula's; `estimator`
    then names it in the result). The analysis, which estimates every pair before testing
    it, calls this.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, n_features) or (n_samples,)
    estimate : float
        ``gaussian_mi(x, y, **gaussian_kwargs)``.
    n_permutations, random_state, cross_precision
        As in :func:`mi_permutation_test`.
    estimator : str, default="gaussian"
        The name the result carries.
    **gaussian_kwargs
        Of :func:`mianalysis.gaussian_mi` (``units``, ``bias_correction``, ``shrinkage``).

    Returns
    -------
    PermutationTestResult

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import gaussian_mi, mi_permutation_test
    >>> from mianalysis.estimators.significance import gaussian_permutation_test
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((300, 2)); y = x + rng.standard_normal((300, 2))
    >>> a = gaussian_permutation_test(x, y, gaussian_mi(x, y), n_permutations=20, random_state=1)
    >>> b = mi_permutation_test(x, y, estimator="gaussian", n_permutations=20, random_state=1)
    >>> bool(np.array_equal(a.null_distribution, b.null_distribution)), a.p_value == b.p_value
    (True, True)
    """
    n_permutations = check_int(n_permutations, "n_permutations", low=1)
    rng = check_random_state(random_state)
    _check_precision(cross_precision)
    x, y = check_paired(x, y)
    _check_arguments("gaussian", gaussian_kwargs)
    check_gaussian_settings(**gaussian_kwargs)
    precision = _precision(cross_precision, x.shape[0])
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return PermutationTestResult.from_null(0.0, np.zeros(n_permutations), estimator)
    check_repeated_runs(x, y, f"the permutation test of estimator={estimator!r}")
    with runs_checked():
        return _gaussian_shuffles(x, y, float(estimate), n_permutations, rng, precision, gaussian_kwargs, estimator)


def _check_precision(cross_precision: str) -> None:
    """ValueError unless `cross_precision` is "auto" or one of CROSS_PRECISIONS."""
    check_choice(cross_precision, "cross_precision", ("auto", *CROSS_PRECISIONS))


def _precision(cross_precision: str, n: int) -> str:
    """The cross products' precision for `n` runs: "auto" is float32 from SINGLE_PRECISION_RUNS on."""
    if cross_precision != "auto":
        return cross_precision
    return "float32" if n >= SINGLE_PRECISION_RUNS else "float64"


def _gaussian_shuffles(x: np.ndarray, y: np.ndarray, observed: float, n_permutations: int, rng: np.random.Generator,
                       precision: str, kwargs: Mapping[str, Any], estimator: str) -> PermutationTestResult:
    """The Gaussian permutation test of checked, varying x and y whose estimate is `observed`."""
    n = x.shape[0]
    shuffles = (rng.permutation(n) for _ in range(n_permutations))  # drawn as they are used
    if precision == "float32":  # the unshuffled data's statistic as the shuffles' (a permutation of its own)
        values = gaussian_permutation_estimates(x, y, itertools.chain([np.arange(n)], shuffles),
                                                cross_precision="float32", **kwargs)
        return PermutationTestResult.from_null(observed, values[1:], estimator, statistic=float(values[0]))
    return PermutationTestResult.from_null(observed, gaussian_permutation_estimates(x, y, shuffles, **kwargs),
                                           estimator)


def _test_from_marginals(x: MarginalDistances, y: MarginalDistances, estimator: str, n_permutations: int,
                         rng: np.random.Generator, kwargs: Mapping[str, Any]) -> PermutationTestResult:
    """mi_permutation_test of two MarginalDistances: every shuffle from the distances."""
    if not get_estimator(estimator).distance_cache:
        raise ValueError(f"MarginalDistances serve estimator='ksg' only; got estimator={estimator!r} "
                         "(pass arrays for the Gaussian estimator)")
    _check_arguments(estimator, kwargs)
    settings = {name: kwargs[name] for name in ("k", "algorithm", "units") if name in kwargs}
    values = ksg_estimates_from_marginals(x, y, n_permutations=n_permutations, random_state=rng,
                                          extra=set(kwargs) - set(settings), **settings)
    return PermutationTestResult.from_null(values[0], values[1:], estimator)
