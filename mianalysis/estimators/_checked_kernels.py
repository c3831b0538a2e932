"""KSG neighbour counts of float64 data from float32 distances, checked in float64.

The distance loops cost n^2 d max-abs operations, and a float32 vector instruction does
twice as many of them as a float64 one. These kernels compute the marginal distance rows in
float32 from a centred float32 copy of the data, and decide every comparison that the
float32 values leave in doubt from the float64 data: the counts are exactly those of the
float64 kernels (:func:`mianalysis.estimators._kernels.ksg_neighbour_counts`), not
approximations of them.

Why that holds. Let ``dx64[i, j] = max_f |x[j, f] - x[i, f]|`` in float64 (the distance the
float64 kernels compute) and ``dx32[i, j]`` the same from ``float32(x - c)`` in float32, with
``c`` the columns' midranges and ``M_x = max |x - c|``. Between the two lie two float64
centrings and one float64 subtraction (each moves a difference by at most ``2^-52 M_x``,
together ``4 * 2^-53 M_x``), two casts to float32 (``2 * 2^-24 M_x``) and one float32
subtraction (``2 * 2^-24 M_x (1 + 2^-23)``); ``abs`` and ``max`` do not enlarge a
difference. So ``|dx32 - dx64| < tol_x := TOLERANCE_FACTOR * 2^-24 * M_x`` (the sum is below
``4.01 * 2^-24 M_x``; the factor 5 also covers the float64 rounding of the thresholds below),
likewise tol_y for y, and the joint distances differ by less than ``tol = max(tol_x, tol_y)``.
Hence, for a threshold ``eps``:

* ``dx32 < eps - tol_x`` implies ``dx64 < eps``, and ``dx32 > eps + tol_x`` implies
  ``dx64 > eps``; only the samples between are decided in float64;
* with t the float32 k-th joint distance, the exact k-th is below ``U = t + tol`` (the k
  samples within t in float32 lie within U in float64), and every sample within U in float64
  has ``dx32 <= U + tol_x`` and ``dy32 <= U + tol_y``: recomputing exactly those gives the
  exact k-th distance, and those samples (kept for the counts) include every one within it.
  One float32 pass finds them: it keeps each sample within the running float32 k-th's
  limits when scanned, and those limits only fall.

float32 keeps ``2^-24`` relative precision only for values of normal size, so callers use
these kernels only when M lies in ``FLOAT32_RANGE`` (subnormal results are then far below
tol). The recomputation is rare for continuous data: besides the kept samples, only those
within tol of a threshold. Data whose distances repeat (a lattice, rounded values, ties
broken by noise far below tol) give the same counts, only more slowly.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .._internal.scaling import FLOAT32_RANGE, column_ranges
from ._kernels import (GROUP_ROWS, INSERTION_MAX_K, REDUCTION_FLAGS, SELECT_CHUNK, group_rows, insert_k_best,
                       kth_smallest_joint, max_distance)

# tol = TOLERANCE_FACTOR * 2^-24 * M: the roundings add up to 4 * 2^-24 * M (1 + 2^-20) + 4 * 2^-53 * M.
TOLERANCE_FACTOR = 5.0
CAST_ROWS = 4096  # rows centred and cast at a time (a float64 buffer of this many rows)


def float32_copy(a: np.ndarray) -> tuple[np.ndarray, float] | None:
    """A centred float32 copy of the float64 2-D array `a` and the tolerance ``tol`` of its
    max-norm distances (module notes), or None when its centred scale M is outside
    FLOAT32_RANGE.

    Each column is centred on its midrange (the centre that makes M smallest) in float64,
    CAST_ROWS rows at a time, then cast. M is the largest of ``high - c`` and ``c - low``
    per column: rounding is monotone, so no centred value exceeds them. The midranges and M
    do not depend on the order of the rows.
    """
    low, high = column_ranges(a)
    centre = low / 2 + high / 2  # halves first: no overflow
    top = float(max((high - centre).max(), (centre - low).max()))
    if not FLOAT32_RANGE[0] <= top <= FLOAT32_RANGE[1]:
        return None
    out = np.empty(a.shape, dtype=np.float32)
    buffer = np.empty((min(CAST_ROWS, a.shape[0]), a.shape[1]))
    for r0 in range(0, a.shape[0], CAST_ROWS):
        part = buffer[:min(CAST_ROWS, a.shape[0] - r0)]
        np.subtract(a[r0:r0 + CAST_ROWS], centre, out=part)
        out[r0:r0 + CAST_ROWS] = part
    return out, TOLERANCE_FACTOR * 2.0**-24 * top


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def exact_distance(a: np.ndarray, b: np.ndarray) -> float:
    """max_f |a[f] - b[f]| in float64: the value the float64 kernels compute (each
    difference rounded once, reduced with an exact max)."""
    out = 0.0
    for f in range(a.shape[0]):
        out = max_distance(out, abs(b[f] - a[f]))  # type: ignore[call-arg]
    return out


@numba.njit(cache=True)
def below(value: float) -> np.float32:
    """The largest float32 at most `value`."""
    v = np.float32(value)
    return np.nextafter(v, np.float32(-np.inf)) if v > value else v


@numba.njit(cache=True)
def above(value: float) -> np.float32:
    """The smallest float32 at least `value`."""
    v = np.float32(value)
    return np.nextafter(v, np.float32(np.inf)) if v < value else v


# Samples a row's k-th-distance scan keeps as candidates (with their exact distances, for the counts): KEPT +
# KEPT_PER_K * k (the scan keeps about k (1 + ln(n / k)): 164 for k = 32, n = 2,000); beyond, a second pass finds
# the candidates and the counts recompute what is in doubt.
KEPT = 128
KEPT_PER_K = 8


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def _exact_kth_joint(dx: np.ndarray, dy: np.ndarray, x: np.ndarray, y: np.ndarray, i: int, k: int, tol_x: float,
                     tol_y: float, scratch32: np.ndarray, scratch64: np.ndarray, kept: np.ndarray, kept_x: np.ndarray,
                     kept_y: np.ndarray) -> tuple[float, int]:
    """The k-th smallest float64 joint distance of sample i (j != i) from its float32 rows
    dx, dy, and how many samples' exact distances it kept (-1: none kept).

    One float32 pass finds the float32 k-th distance t and keeps the samples that may lie
    within the exact one (float32 distances within t + max(tol_x, tol_y) + tol_x, + tol_y);
    only those are recomputed in float64. They (indices in `kept`, their exact marginal
    distances in kept_x, kept_y) include every sample within the exact k-th distance, which
    is what the counts look up (:func:`_count_within`).
    """
    n = dx.shape[0]
    xi = x[i]
    yi = y[i]
    tol = max(tol_x, tol_y)  # |max(dx32, dy32) - max(dx64, dy64)| < tol
    if k > INSERTION_MAX_K:
        bound = float(kth_smallest_joint(dx, dy, i, k, scratch32)) + tol  # >= the exact k-th
        limit_x = above(bound + tol_x)
        limit_y = above(bound + tol_y)
        m = 0
        for j in range(n):
            if j != i and dx[j] <= limit_x and dy[j] <= limit_y:
                scratch64[m] = max(exact_distance(xi, x[j]), exact_distance(yi, y[j]))
                m += 1
        return np.partition(scratch64[:m], k - 1)[k - 1], -1
    # One float32 pass: the running float32 k-th t32 (final: t) and every sample that was within
    # t32 + tol + tol_x, t32 + tol + tol_y when it was scanned (in `kept`): t32 only falls, so these
    # include every sample within t + tol + tol_x, t + tol + tol_y, which holds every sample within
    # the exact k-th (at most t + tol) in float64.
    seed = scratch32[:k]
    seed[:] = np.inf
    t32 = np.float32(np.inf)
    limit_x = np.float32(np.inf)
    limit_y = np.float32(np.inf)
    m = 0
    for c0 in range(0, n, SELECT_CHUNK):
        width = min(SELECT_CHUNK, n - c0)
        a = dx[c0:c0 + width]
        b = dy[c0:c0 + width]
        if width == SELECT_CHUNK:  # a fixed trip count: vectorised
            hits = 0
            for j in range(SELECT_CHUNK):
                hits += (a[j] <= limit_x) & (b[j] <= limit_y)
            if hits == 0:
                continue
        for j in range(width):
            if c0 + j != i and a[j] <= limit_x and b[j] <= limit_y:
                if m < kept.shape[0]:
                    kept[m] = c0 + j
                m += 1
                z32 = max(a[j], b[j])
                if z32 < t32:
                    t32 = insert_k_best(seed, k, z32)
                    if t32 < np.inf:
                        limit_x = above(float(t32) + tol + tol_x)
                        limit_y = above(float(t32) + tol + tol_y)
    best = scratch64[:k]
    best[:] = np.inf
    worst = np.inf
    if m > kept.shape[0]:  # more than the work space holds: the final candidates from a second pass
        m = 0
        for j in range(n):
            if j != i and dx[j] <= limit_x and dy[j] <= limit_y:
                z = max(exact_distance(xi, x[j]), exact_distance(yi, y[j]))
                if z < worst:
                    worst = insert_k_best(best, k, z)
        return worst, -1
    # the exact distances of the final candidates, kept (compacted) for the counts
    n_kept = 0
    for c in range(m):
        j = kept[c]
        if dx[j] <= limit_x and dy[j] <= limit_y:
            zx = exact_distance(xi, x[j])
            zy = exact_distance(yi, y[j])
            kept[n_kept] = j
            kept_x[n_kept] = zx
            kept_y[n_kept] = zy
            n_kept += 1
            z = max(zx, zy)
            if z < worst:
                worst = insert_k_best(best, k, z)
    return worst, n_kept


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def _count_within(d: np.ndarray, data: np.ndarray, i: int, threshold: float, inclusive: bool, tol: float,
                  kept: np.ndarray, kept_d: np.ndarray, n_kept: int) -> int:
    """#{j: d64[j] < threshold} (or <= when `inclusive`), j = i included, from the float32
    row d: the values within tol of the threshold are decided in float64, from the kept
    exact distances where those hold all of them, else recomputed."""
    n = d.shape[0]
    sure_below = below(threshold - tol)  # d < sure_below: d64 < threshold
    maybe_below = above(threshold + tol)  # d > maybe_below: d64 > threshold
    sure = 0
    maybe = 0
    for j in range(n):
        sure += d[j] < sure_below
        maybe += d[j] <= maybe_below
    if maybe == sure:
        return sure
    in_doubt = 0
    inside = 0
    for c in range(max(n_kept, 0)):
        if sure_below <= d[kept[c]] <= maybe_below:
            in_doubt += 1
            inside += (kept_d[c] <= threshold) if inclusive else (kept_d[c] < threshold)
    if in_doubt == maybe - sure:  # every sample in doubt was kept (each is kept once)
        return sure + inside
    row = data[i]
    for j in range(n):
        if sure_below <= d[j] <= maybe_below:
            z = exact_distance(row, data[j])
            sure += (z <= threshold) if inclusive else (z < threshold)
    return sure


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def checked_row_counts(dx: np.ndarray, dy: np.ndarray, x: np.ndarray, y: np.ndarray, i: int, k: int, algorithm: int,
                       tol_x: float, tol_y: float, scratch32: np.ndarray, scratch64: np.ndarray, kept: np.ndarray,
                       kept_x: np.ndarray, kept_y: np.ndarray) -> tuple[int, int]:
    """Marginal neighbour counts of sample i, as :func:`mianalysis.estimators._kernels.row_counts`
    computes them from float64 rows, from its float32 rows dx, dy and the float64 data.
    The kernels take the work space (scratch32 to kept_y) from :func:`row_work`."""
    eps, n_kept = _exact_kth_joint(dx, dy, x, y, i, k, tol_x, tol_y, scratch32, scratch64, kept, kept_x, kept_y)
    if algorithm == 1:
        own = 1 if 0.0 < eps else 0  # sample i, at distance 0 from itself
        return (_count_within(dx, x, i, eps, False, tol_x, kept, kept_x, n_kept) - own,
                _count_within(dy, y, i, eps, False, tol_y, kept, kept_y, n_kept) - own)
    # the largest marginal distances among the joint neighbours within eps (i itself changes neither)
    eps_x = 0.0
    eps_y = 0.0
    if n_kept >= 0:  # the kept samples hold every one within eps
        for c in range(n_kept):
            if max(kept_x[c], kept_y[c]) <= eps:
                eps_x = max(eps_x, kept_x[c])
                eps_y = max(eps_y, kept_y[c])
    else:
        limit_x = above(eps + tol_x)
        limit_y = above(eps + tol_y)
        xi = x[i]
        yi = y[i]
        for j in range(dx.shape[0]):
            if dx[j] <= limit_x and dy[j] <= limit_y:
                zx = exact_distance(xi, x[j])
                zy = exact_distance(yi, y[j])
                if max(zx, zy) <= eps:
                    eps_x = max(eps_x, zx)
                    eps_y = max(eps_y, zy)
    return (_count_within(dx, x, i, eps_x, True, tol_x, kept, kept_x, n_kept) - 1,
            _count_within(dy, y, i, eps_y, True, tol_y, kept, kept_y, n_kept) - 1)


@numba.njit(cache=True)
def row_work(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One thread's work space for :func:`checked_row_counts` on rows of `n` samples: the
    float32 and float64 scratch of the k-th-distance selection and the kept candidates'
    indices and exact distances (KEPT + KEPT_PER_K * k entries)."""
    scratch = n if k > INSERTION_MAX_K else k
    kept = KEPT + KEPT_PER_K * k
    return (np.empty(scratch, dtype=np.float32), np.empty(scratch, dtype=np.float64), np.empty(kept, dtype=np.int64),
            np.empty(kept, dtype=np.float64), np.empty(kept, dtype=np.float64))


@numba.njit(parallel=True, cache=True)
def checked_neighbour_counts(x: np.ndarray, y: np.ndarray, x32: np.ndarray, y32: np.ndarray, x32_t: np.ndarray,
                             y32_t: np.ndarray, tol_x: float, tol_y: float, k: int,
                             algorithm: int) -> tuple[np.ndarray, np.ndarray]:
    """Marginal neighbour counts (n_x, n_y) of every sample, equal to
    :func:`mianalysis.estimators._kernels.ksg_neighbour_counts` on the float64 `x`, `y`.

    Parameters
    ----------
    x, y : float64 arrays (n_samples, d_x), (n_samples, d_y), C-contiguous.
    x32, y32 : their float32 copies from :func:`float32_copy`, C-contiguous, and x32_t,
        y32_t the same transposed, C-contiguous.
    tol_x, tol_y : float, the bounds on the float32 distances' errors (:func:`float32_copy`).
    k : int, 1 <= k < n_samples.
    algorithm : 1 or 2.
    """
    n = x.shape[0]
    nx = np.empty(n, dtype=np.int64)
    ny = np.empty(n, dtype=np.int64)
    n_groups = (n + GROUP_ROWS - 1) // GROUP_ROWS
    for g in prange(n_groups):
        r0 = g * GROUP_ROWS
        r1 = min(r0 + GROUP_ROWS, n)
        dx, dy = group_rows(x32, y32, x32_t, y32_t, r0)
        scratch32, scratch64, kept, kept_x, kept_y = row_work(n, k)
        for i in range(r0, r1):
            cx, cy = checked_row_counts(dx[i - r0], dy[i - r0], x, y, i, k, algorithm, tol_x, tol_y, scratch32,
                                        scratch64, kept, kept_x, kept_y)
            nx[i] = cx
            ny[i] = cy
    return nx, ny


@numba.njit(parallel=True, cache=True)
def checked_block_row_counts(rows_x: np.ndarray, rows_y: np.ndarray, x: np.ndarray, y: np.ndarray, tol_x: float,
                             tol_y: float, i0: int, i1: int, k: int, algorithm: int, nx: np.ndarray,
                             ny: np.ndarray) -> None:
    """nx[i], ny[i] for the samples i in [i0, i1) from their full float32 distance rows
    (the distance cache's block rows) and the float64 data."""
    n = rows_x.shape[1]
    n_groups = (i1 - i0 + GROUP_ROWS - 1) // GROUP_ROWS
    for g in prange(n_groups):
        scratch32, scratch64, kept, kept_x, kept_y = row_work(n, k)
        for i in range(i0 + g * GROUP_ROWS, min(i0 + (g + 1) * GROUP_ROWS, i1)):
            cx, cy = checked_row_counts(rows_x[i - i0], rows_y[i - i0], x, y, i, k, algorithm, tol_x, tol_y,
                                        scratch32, scratch64, kept, kept_x, kept_y)
            nx[i] = cx
            ny[i] = cy
