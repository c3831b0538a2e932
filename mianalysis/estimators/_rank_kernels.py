"""Numba kernel of :func:`mianalysis.estimators.copula.normal_scores`: each column's normal
scores from one sort of that column.

Twice a run's average rank is an integer: the runs at sorted positions ``start`` to
``stop - 1`` (0-based) of a group of equal values share the ranks ``start + 1`` to ``stop``,
whose average is ``(start + stop + 1) / 2``. So every score is read from a table of
``ndtri(t / 2 / (n + 1))``, t in [0, 2 n], computed once with SciPy: the same function at
the same argument as ``ndtri(rankdata(column, "average") / (n + 1))``, hence the same bits,
without an n x d array of ranks or n x d calls of ``ndtri``. Columns are independent (one
thread each), so the result does not depend on the number of threads.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


@numba.njit(parallel=True, cache=True)
def scores_from_table(samples: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``out[i, j]``: the `table` entry at twice the average rank of ``samples[i, j]`` in
    its column, for the finite 2-D array `samples` (n, d); `table` has
    at least 2 n + 1 entries."""
    n, d = samples.shape
    out = np.empty((n, d))
    for j in prange(d):
        column = np.empty(n)
        for i in range(n):
            column[i] = samples[i, j]
        order = np.argsort(column)
        scores = np.empty(n)
        start = 0
        while start < n:
            value = column[order[start]]
            stop = start + 1
            while stop < n and column[order[stop]] == value:
                stop += 1
            score = table[start + stop + 1]  # twice the group's average rank
            for p in range(start, stop):
                scores[order[p]] = score
            start = stop
        for i in range(n):
            out[i, j] = scores[i]
    return out
