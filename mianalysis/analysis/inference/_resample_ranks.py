"""Numba kernel of :meth:`mianalysis.analysis.inference.intervals.ResampleScores.scores`: the normal
scores of a bootstrap resample from one sort of each column, one pass per column.

A resample is given by each run's count of copies. Walking a column in its sorted order
and summing the counts gives every run's rank in the resample; twice that rank is an
integer in [1, 2 m + 1] (m the resample's size: average ranks of ties are integers or
halves), so its normal score is read from a table of ``ndtri(k / 2 / (m + 1))`` computed
once per resample with SciPy: the same function at the same argument as the NumPy
expression it replaces, so the same bits. Columns are independent (one thread each), so
the result does not depend on the number of threads.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


@numba.njit(parallel=True, cache=True)
def resample_scores_t(order_t: np.ndarray, counts: np.ndarray, position: np.ndarray, table: np.ndarray,
                      start_t: np.ndarray, stop_t: np.ndarray, ties: bool, columns: np.ndarray,
                      n_distinct: int) -> np.ndarray:
    """The normal scores, transposed (len(columns), n_distinct), of the resample with
    `counts[i]` copies of run i, at the runs asked for (run i in column ``position[i]``
    where that is >= 0).

    order_t (d, n): each column's runs in increasing order (stable); start_t / stop_t
    (d, n), used when `ties`: the first and one-past-the-last sorted position of the group
    of values equal to the one at each sorted position; table (2 m + 2,): the normal score
    of twice each rank; columns: the columns to compute.
    """
    n = order_t.shape[1]
    out = np.empty((columns.shape[0], n_distinct))
    for jj in prange(columns.shape[0]):
        j = columns[jj]
        if ties:  # a group's ranks need its summed count: the cumulative counts first
            cum0 = np.empty(n + 1, dtype=np.int64)
            cum0[0] = 0
            for p in range(n):
                cum0[p + 1] = cum0[p] + counts[order_t[j, p]]
            for p in range(n):
                i = order_t[j, p]
                if position[i] >= 0:  # twice the average rank: 2 B + T + 1, B before the group, T in it
                    out[jj, position[i]] = table[cum0[start_t[j, p]] + cum0[stop_t[j, p]] + 1]
        else:
            cum = 0
            for p in range(n):
                i = order_t[j, p]
                c = counts[i]
                if position[i] >= 0:  # its copies take ranks cum + 1 .. cum + c: twice the average 2 cum + c + 1
                    out[jj, position[i]] = table[2 * cum + c + 1]
                cum += c
    return out
