"""Distances between paired samples of two clients' parameter vectors, and the cosine
similarity of their updates (parameters minus each run's start)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._internal.scaling import SAFE_HIGH, SAFE_LOW, pow2_scale
from .._internal.validation import check_choice, check_samples

__all__ = ["METRICS", "UPDATE_METRICS", "paired_distances", "mean_paired_distance", "update_cosines",
           "mean_update_cosine"]

METRICS = ("euclidean", "manhattan", "chebyshev")
# Pair quantities of the clients' updates since the run's start (mianalysis.analyze(metrics=...)).
UPDATE_METRICS = ("cosine_update",)


def _check_pair(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
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


def _reduce(diff: np.ndarray, metric: str) -> np.ndarray:
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


def _update(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """`x` - `start` row by row; a row whose difference overflows is formed in units of a
    power of two near its largest absolute value (exact scaling: the cosine does not
    depend on a row's unit). Zero exactly where the row equals its start."""
    with np.errstate(over="ignore", invalid="ignore"):
        u = x - start
    over = ~np.isfinite(u).all(axis=1)
    if over.any():
        scale = pow2_scale(np.maximum(np.abs(x[over]).max(axis=1), np.abs(start[over]).max(axis=1)))[:, None]
        with np.errstate(under="ignore"):
            u[over] = x[over] / scale - start[over] / scale
    return u


def update_cosines(x: ArrayLike, y: ArrayLike, x_start: ArrayLike, y_start: ArrayLike) -> np.ndarray:
    """Cosine similarity of the paired updates ``x_i - x_start_i`` and ``y_i - y_start_i``,
    for every ``i``.

    The measure of how aligned two clients' updates are that federated-learning work uses
    for client similarity and clustering (e.g. Sattler, Mueller and Samek 2021, Clustered
    Federated Learning, IEEE TNNLS 32(8), 3710-3722, doi:10.1109/TNNLS.2020.3015958):
    ``cos(u, v) = <u, v> / (|u| |v|)``, 1 for updates in the same direction, -1 for
    opposite ones, about 0 for unrelated ones in many dimensions.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, n_features) or (n_samples,)
        Paired samples of two clients' parameters, e.g. run ``i`` of client a and run ``i``
        of client b at one checkpoint. A 1-D array is one feature.
    x_start, y_start : array-like of the same shape
        Where each sample started: row ``i`` is run ``i``'s start of that client (the
        checkpoint at iteration 0; with a fixed start every row is the same point).

    Returns
    -------
    cosines : ndarray of shape (n_samples,)
        In [-1, 1]; NaN where either update is zero (the cosine of a zero vector is
        undefined), e.g. at the start itself. No NumPy warning is issued for those rows.

    Raises
    ------
    ValueError
        If the four arrays do not have one shape, or hold non-finite values.

    See Also
    --------
    mean_update_cosine : their mean over the samples where both updates are non-zero.

    Notes
    -----
    An update is zero exactly where a sample equals its start. Each update is normalised
    in units of a power of two near its largest entry (and formed in such units where the
    plain difference would overflow), so parameters and updates of any finite magnitude
    (1e300 or 1e-300) neither overflow nor underflow, and the cosine does not change when
    an update is scaled by a positive number.

    Examples
    --------
    >>> from mianalysis import update_cosines
    >>> start = [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    >>> update_cosines([[1, 0], [1, 0], [1, 1]], [[2, 0], [0, 3], [2, 2]], start, start)
    array([ 1.,  0., nan])
    """
    x, y = _check_pair(x, y)
    x0, y0 = check_samples(x_start, "x_start"), check_samples(y_start, "y_start")
    for name, start in (("x_start", x0), ("y_start", y0)):
        if start.shape != x.shape:
            raise ValueError(f"`{name}` must have the shape of `x` and `y` (n_samples, n_features), one start per "
                             f"sample; got {start.shape} for {x.shape}")
    u, v = _update(x, x0), _update(y, y0)
    top_u, top_v = np.abs(u).max(axis=1), np.abs(v).max(axis=1)
    defined = (top_u > 0) & (top_v > 0)
    out = np.full(x.shape[0], np.nan)
    if defined.any():
        with np.errstate(under="ignore"):  # each row's largest entry in [1, 2): sums of squares stay normal
            u = u[defined] / pow2_scale(top_u[defined])[:, None]
            v = v[defined] / pow2_scale(top_v[defined])[:, None]
        dot = np.einsum("ij,ij->i", u, v)
        norms = np.sqrt(np.einsum("ij,ij->i", u, u) * np.einsum("ij,ij->i", v, v))
        out[defined] = np.clip(dot / norms, -1.0, 1.0)  # rounding may leave |cos| a few ulps above 1
    return out


def mean_update_cosine(x: ArrayLike, y: ArrayLike, x_start: ArrayLike, y_start: ArrayLike) -> float:
    """Mean over samples of :func:`update_cosines`, over the samples where both updates are
    non-zero: the mean cosine similarity of two clients' updates.

    Parameters
    ----------
    x, y, x_start, y_start : array-like of shape (n_samples, n_features) or (n_samples,)
        As :func:`update_cosines`.

    Returns
    -------
    cosine : float
        In [-1, 1]; NaN (without a NumPy warning) when every sample has a zero update.

    Examples
    --------
    >>> from mianalysis import mean_update_cosine
    >>> start = [[0.0, 0.0], [0.0, 0.0]]
    >>> mean_update_cosine([[1, 0], [1, 1]], [[1, 0], [-1, -1]], start, start)  # (1 + -1) / 2
    0.0
    """
    c = update_cosines(x, y, x_start, y_start)
    c = c[np.isfinite(c)]
    return float(c.mean()) if c.size else float("nan")
