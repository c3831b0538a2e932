"""Distances between paired samples of two clients' parameter vectors."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._scaling import SAFE_HIGH, SAFE_LOW, pow2_scale
from ._validation import check_choice, check_samples

__all__ = ["METRICS", "paired_distances", "mean_paired_distance"]

METRICS = ("euclidean", "manhattan", "chebyshev")


def _check_pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    x = check_samples(x, "x")
    y = check_samples(y, "y")
    if x.shape != y.shape:
        raise ValueError(
            f"`x` and `y` must have the same shape (n_samples, n_features); got {x.shape} and {y.shape}"
        )
    return x, y


def paired_distances(x: ArrayLike, y: ArrayLike, metric: str = "euclidean") -> np.ndarray:
    """Distance between row ``i`` of `x` and row ``i`` of `y`, for every ``i``.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, n_features) or (n_samples,)
        Paired samples, e.g. run ``i`` of client a and run ``i`` of client b. A 1-D array
        is one feature.
    metric : {"euclidean", "manhattan", "chebyshev"}, default="euclidean"
        Euclidean (L2), Manhattan (L1, city block) or Chebyshev (L-infinity, max-norm).

    Returns
    -------
    distances : ndarray of shape (n_samples,)

    Raises
    ------
    ValueError
        If a distance exceeds the largest float64 (~1.8e308), which finite input can
        produce (e.g. 1e308 and -1e308); it is not returned as inf.

    See Also
    --------
    mean_paired_distance : their mean, the quantity the core paper plots.

    Notes
    -----
    Accurate at any finite magnitude: rows whose differences are beyond ~1e135 or below
    ~1e-135 are computed in units of powers of two (as ``hypot`` does), so squares and sums
    neither overflow nor underflow; other rows are computed directly, as always.

    Examples
    --------
    >>> from mianalysis import paired_distances
    >>> paired_distances([[0, 0], [1, 1]], [[3, 4], [1, 2]], "euclidean")
    array([5., 1.])
    """
    check_choice(metric, "metric", METRICS)
    x, y = _check_pair(x, y)
    with np.errstate(over="ignore"):
        diff = np.abs(x - y)
    out = _reduce(diff, metric)
    # Rows whose differences are beyond ~1e135 (squares or sums could overflow, or x - y
    # did) or below ~1e-135 (squares underflow): again in units of a power of two (exact).
    top = diff.max(axis=1)
    redo = np.flatnonzero(~(top <= SAFE_HIGH) | ((top < SAFE_LOW) & (top > 0)))
    if redo.size:
        d = diff[redo]
        outer = np.ones(redo.size)
        overflowed = ~np.isfinite(top[redo])  # x - y itself: subtract in units of the rows' largest value
        if overflowed.any():
            xs, ys = x[redo[overflowed]], y[redo[overflowed]]
            outer[overflowed] = pow2_scale(np.maximum(np.abs(xs).max(axis=1), np.abs(ys).max(axis=1)))
            with np.errstate(under="ignore"):
                d[overflowed] = np.abs(xs / outer[overflowed, None] - ys / outer[overflowed, None])
        inner = pow2_scale(d.max(axis=1))
        with np.errstate(under="ignore"):
            scaled = _reduce(d / inner[:, None], metric)  # the largest difference is in [1, 2)
        with np.errstate(over="ignore", under="ignore"):
            out[redo] = scaled * inner * outer
        over = redo[~np.isfinite(out[redo])]
        if over.size:
            raise ValueError(
                f"the {metric} distance between row {over[0]} of `x` and of `y` exceeds the largest float64 "
                f"({np.finfo(np.float64).max:.3g}): {over.size} row(s) cannot be represented; rescale `x` and `y`"
            )
    return out


def _reduce(diff, metric):
    """Each row's norm of the absolute differences `diff`."""
    with np.errstate(over="ignore", under="ignore"):
        if metric == "euclidean":
            return np.sqrt(np.einsum("ij,ij->i", diff, diff))
        if metric == "manhattan":
            return diff.sum(axis=1)
        return diff.max(axis=1)


def mean_paired_distance(x: ArrayLike, y: ArrayLike, metric: str = "euclidean") -> float:
    """Mean over samples of :func:`paired_distances`: (1/N) sum_i dist(x_i, y_i).

    This is the distance between two clients' parameters as defined in Section 4.3 of the
    core paper: the distance between each pair of samples, averaged over all samples.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, n_features) or (n_samples,)
    metric : {"euclidean", "manhattan", "chebyshev"}, default="euclidean"

    Returns
    -------
    distance : float
        Finite whenever every distance is (the mean is taken in units of the largest if
        the plain sum overflows).

    Examples
    --------
    >>> from mianalysis import mean_paired_distance
    >>> mean_paired_distance([[0, 0], [1, 1]], [[3, 4], [1, 2]], "euclidean")  # (5 + 1) / 2
    3.0
    >>> mean_paired_distance([[0, 0], [1, 1]], [[3, 4], [1, 2]], "manhattan")  # (7 + 1) / 2
    4.0
    """
    d = paired_distances(x, y, metric)
    with np.errstate(over="ignore"):
        mean = float(np.mean(d))
    if not np.isfinite(mean):
        top = float(pow2_scale(d.max()))
        mean = float(np.mean(d / top)) * top
    return mean
