"""Distances between paired samples of two clients' parameter vectors."""

from __future__ import annotations

import numpy as np

from ._validation import check_choice, check_samples

METRICS = ("euclidean", "manhattan", "chebyshev")


def _check_pair(x, y):
    x = check_samples(x, "x")
    y = check_samples(y, "y")
    if x.shape != y.shape:
        raise ValueError(
            f"`x` and `y` must have the same shape (n_samples, n_features); got {x.shape} and {y.shape}"
        )
    return x, y


def paired_distances(x, y, metric="euclidean"):
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

    See Also
    --------
    mean_paired_distance : their mean, the quantity the core paper plots.

    Examples
    --------
    >>> from mianalysis import paired_distances
    >>> paired_distances([[0, 0], [1, 1]], [[3, 4], [1, 2]], "euclidean")
    array([5., 1.])
    """
    check_choice(metric, "metric", METRICS)
    x, y = _check_pair(x, y)
    diff = np.abs(x - y)
    if metric == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if metric == "manhattan":
        return diff.sum(axis=1)
    return diff.max(axis=1)


def mean_paired_distance(x, y, metric="euclidean"):
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

    Examples
    --------
    >>> from mianalysis import mean_paired_distance
    >>> mean_paired_distance([[0, 0], [1, 1]], [[3, 4], [1, 2]], "euclidean")  # (5 + 1) / 2
    3.0
    >>> mean_paired_distance([[0, 0], [1, 1]], [[3, 4], [1, 2]], "manhattan")  # (7 + 1) / 2
    4.0
    """
    return float(np.mean(paired_distances(x, y, metric)))
