"""Numba kernels for KSG permutation nulls from sorted marginal neighbour lists.

Under a shuffle of the pairing only which y-row meets which x-row changes; the marginal
distances do not. Each sample's nearest marginal neighbours, sorted by distance, are found
once per marginal (:func:`neighbour_lists`; a bucket sort, see :func:`_sort_near`); a
pairing then finds every sample's k-th joint neighbour from two such lists
(:func:`listed_neighbour_counts`) instead of scanning two rows of n distances.

The probe: the samples of sample i's x-list are marked with their places in it (once for
every pairing of a batch: x-row i is sample i's in each); then the y-list of its partner
row ``perm[i]`` is walked in ascending distance. Each marked sample j met there, at
``dy[perm[i], perm[j]]``, has joint (max-norm) distance ``max(dx[i, j], dy[...])``, and
the k smallest so far are kept. A list holds every neighbour strictly closer than its
row's `cover` distance, so once the walk reaches a y-distance at least the k-th kept
value (or beyond it, for algorithm 2's ties), eps = that k-th value is the k-th joint
neighbour distance exactly, provided it lies below both covers: every sample with a joint
distance below eps has both marginal distances below both covers, so it is marked and it
was walked. The marginal counts (distances strictly below eps for algorithm 1; at most
the extents eps_x, eps_y of the joint neighbours for algorithm 2) are then positions in
the sorted lists (binary search).

When eps is not below both covers (a sample whose k-th joint neighbour lies beyond its
listed marginal neighbours: dependent data, very different scales of x and y), that
sample is counted by walking its deeper list with look-ups in the other matrix, or from
its two full distance rows by the brute-force code of
:func:`mianalysis.estimators._kernels.permuted_neighbour_counts`. Either way the counts
are the brute-force counts exactly: every step compares distance values taken from the
same matrices, and nothing is rounded (no arithmetic on distances at all), so the result
does not depend on the CPU, on fast-math flags or on the number of threads (each sample's
counts depend only on that sample).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._kernels import INSERTION_MAX_K, insert_k_best, row_counts

LISTED_BLOCK = 256  # samples per work item of listed_neighbour_counts


SAMPLE_RANK = 32  # the threshold of a list is the SAMPLE_RANK-th smallest of a strided sample of its row


BUCKET_WORK = 16  # bucket sort while the insertion sort's work bound, sum of squared bucket sizes, is <= this x m


@numba.njit(cache=True)
def _sort_near(near, found, m, key, counts, sv, si):
    """sv[:m], si[:m]: near[:m] in ascending order and found[:m] with them.

    A bucket sort: each value's bucket is a monotone function of it (so buckets come in
    order), and one insertion sort over the concatenated buckets finishes the order
    within each bucket. Which bucket a value lands in changes only the time, never the
    result (the insertion sort alone would sort any input). When the buckets are too
    uneven (tied or clustered distances), np.argsort instead.
    """
    if m == 0:
        return
    lo = near[0]
    hi = near[0]
    for p in range(1, m):
        lo = min(lo, near[p])
        hi = max(hi, near[p])
    n_buckets = max(1, m // 2)
    counts[:n_buckets + 1] = 0
    for p in range(m):
        # (v - lo) / (hi - lo) is in [0, 1] and non-decreasing in v under rounding; no overflow.
        key[p] = min(np.int64((near[p] - lo) / (hi - lo) * n_buckets), n_buckets - 1) if hi > lo else 0
        counts[key[p] + 1] += 1
    work = 0
    for c in range(1, n_buckets + 1):
        work += counts[c] * counts[c]
        counts[c] += counts[c - 1]
    if work > BUCKET_WORK * m:
        order = np.argsort(near[:m])
        for p in range(m):
            sv[p] = near[order[p]]
            si[p] = found[order[p]]
        return
    for p in range(m):  # scatter, in order of p within each bucket
        c = counts[key[p]]
        counts[key[p]] = c + 1
        sv[c] = near[p]
        si[c] = found[p]
    for p in range(1, m):
        v = sv[p]
        j = si[p]
        q = p
        while q > 0 and sv[q - 1] > v:
            sv[q] = sv[q - 1]
            si[q] = si[q - 1]
            q -= 1
        sv[q] = v
        si[q] = j


@numba.njit(parallel=True, cache=True)
def neighbour_lists(d, length, values, indices, cover):
    """The sorted near-neighbour list of every row of the distance matrix `d` (n, n).

    For row i the list holds every j != i with ``d[i, j] < cover[i]``, in ascending
    distance, at most `capacity` of them (the width of `values` less one), followed by
    +inf sentinels (and index 0) to the end of the row. The cover is a threshold expected
    to let about `length` neighbours in: the SAMPLE_RANK-th smallest distance of every
    s-th sample, s = length // SAMPLE_RANK; when more than `capacity` are below it, the
    cover becomes the (capacity + 1)-th smallest distance. With ``length >= n - 1``
    every j != i is listed and the cover is +inf. values (n, capacity + 1) of d's dtype,
    indices (n, capacity + 1) int32, cover (n,) of d's dtype.
    """
    n = d.shape[0]
    capacity = values.shape[1] - 1  # and the sentinel
    stride = max(1, length // SAMPLE_RANK)
    n_blocks = (n + LISTED_BLOCK - 1) // LISTED_BLOCK
    for b in prange(n_blocks):
        sample = np.empty((n + stride - 1) // stride, dtype=d.dtype)
        found = np.empty(n, dtype=np.int64)
        near = np.empty(n, dtype=d.dtype)
        key = np.empty(n, dtype=np.int64)
        counts = np.empty(n + 1, dtype=np.int64)
        sv = np.empty(n, dtype=d.dtype)
        si = np.empty(n, dtype=np.int64)
        for i in range(b * LISTED_BLOCK, min((b + 1) * LISTED_BLOCK, n)):
            row = d[i]
            bound = np.inf
            if length < n - 1:
                s = 0
                for j in range(0, n, stride):
                    if j != i:
                        sample[s] = row[j]
                        s += 1
                rank = min(SAMPLE_RANK, s - 1)
                bound = np.partition(sample[:s], rank)[rank]
            m = 0
            for j in range(n):
                if row[j] < bound and j != i:
                    found[m] = j
                    near[m] = row[j]
                    m += 1
            _sort_near(near, found, m, key, counts, sv, si)
            if m > capacity:  # keep the capacity nearest; the cover is the next distance
                bound = sv[capacity]
                m = capacity
                while m > 0 and sv[m - 1] >= bound:
                    m -= 1
            for p in range(m):
                values[i, p] = sv[p]
                indices[i, p] = si[p]
            values[i, m:] = np.inf  # the sentinel that ends a walk (and fills the rest)
            indices[i, m:] = 0
            cover[i] = bound


@numba.njit(cache=True)
def _mark_list(xv, xi, mark, on):
    """mark[xi[p]] = p + 1 (`on`), or 0, for every entry p of the list (xv ends with +inf)."""
    p = 0
    while xv[p] < np.inf:
        mark[xi[p]] = p + 1 if on else 0
        p += 1


@numba.njit(cache=True)
def _probed_row_counts(xv, cover_x, yv, yi, cover_y, inverse, k, algorithm, mark, best):
    """(ok, nx, ny) of one sample from its x-list, marked in `mark` by :func:`_mark_list`
    (every other entry 0), and its partner's y-list (see the module
    docstring): the y-list is walked in ascending order, and each marked sample met gives
    its joint distance. ok False when the k-th joint distance is not below both covers.
    `inverse` maps a y-row to the sample paired with it; `best` holds k values."""
    bound = min(cover_x, cover_y)
    best[:] = np.inf
    worst = np.inf
    q = 0
    while True:
        b = yv[q]
        if b >= bound or (b > worst if algorithm == 2 else b >= worst):
            break
        t = np.int64(mark[inverse[yi[q]]]) - 1
        if t >= 0:
            z = max(xv[t], b)
            if z < worst:
                worst = insert_k_best(best, k, z)
        q += 1
    eps = worst
    if eps >= bound:
        return False, 0, 0
    if algorithm == 1:  # every distance below eps < both covers is listed
        return True, np.searchsorted(xv, eps, side="left"), np.searchsorted(yv, eps, side="left")
    eps_x = 0.0  # the extents of the joint neighbours (all within eps: all marked, all walked)
    eps_y = 0.0
    for r in range(q):
        t = np.int64(mark[inverse[yi[r]]]) - 1
        if t >= 0 and max(xv[t], yv[r]) <= eps:
            eps_x = max(eps_x, xv[t])
            eps_y = max(eps_y, yv[r])
    return True, np.searchsorted(xv, eps_x, side="right"), np.searchsorted(yv, eps_y, side="right")


@numba.njit(cache=True)
def _count_below(values, cover, row, limit, inclusive):
    """#{j != self: row[j] < limit} (or <= with `inclusive`) from the sorted list `values`
    when it holds them all (limit below the cover), else by a pass over the full `row`
    (which holds the sample's own 0)."""
    if limit < cover:
        if inclusive:
            return np.searchsorted(values, limit, side="right")
        return np.searchsorted(values, limit, side="left")
    c = 0
    if inclusive:
        for j in range(row.shape[0]):
            c += row[j] <= limit
        return c - 1
    for j in range(row.shape[0]):
        c += row[j] < limit
    return c - (limit > 0)


@numba.njit(cache=True)
def _lookup_row_counts(av, ai, cover_a, arow, bv, cover_b, brow, bmap, k, algorithm, best):
    """(ok, n_a, n_b) of one sample by walking one marginal's list (av, ai) and looking the
    other distance up in its full row: ``brow[bmap[ai[p]]]``; ok False when the walk would
    pass the list's cover. The counts of the other marginal come from its list (bv) when
    it reaches far enough, else from a pass over `brow`; `arow` is the walked marginal's
    full row. `best` holds k values."""
    best[:] = np.inf
    worst = np.inf
    p = 0
    while True:
        a = av[p]
        if a >= min(worst, cover_a):  # every unwalked neighbour is at least as far as the k-th
            if worst > cover_a:
                return False, 0, 0
            break
        b = brow[bmap[ai[p]]]
        z = max(a, b)
        if z < worst:
            worst = insert_k_best(best, k, z)
        p += 1
    eps = worst
    if algorithm == 1:
        return True, _count_below(av, cover_a, arow, eps, False), _count_below(bv, cover_b, brow, eps, False)
    if eps >= cover_a:  # the neighbours at exactly eps might not all be listed
        return False, 0, 0
    eps_a = 0.0
    eps_b = 0.0
    p = 0
    while av[p] <= eps:
        a = av[p]
        b = brow[bmap[ai[p]]]
        if max(a, b) <= eps:
            eps_a = max(eps_a, a)
            eps_b = max(eps_b, b)
        p += 1
    return True, _count_below(av, cover_a, arow, eps_a, True), _count_below(bv, cover_b, brow, eps_b, True)


@numba.njit(parallel=True, cache=True)
def listed_neighbour_counts(xv, xi, xc, yv, yi, yc, dx, dy, perms, inverses, k, algorithm):
    """Neighbour counts of the pairings x[i] <-> y[perms[p, i]] from the neighbour lists
    of both marginals (:func:`neighbour_lists` of dx and dy); a sample whose probe passes
    a cover is counted by a walk of one list with look-ups in the other matrix or, when
    that fails too, from the full rows of dx and dy. ``inverses[p]`` is the inverse of
    ``perms[p]`` (uint16 where n <= 65,535, so that it fits in less cache; int32 else). Counts equal those of
    :func:`mianalysis.estimators._kernels.permuted_neighbour_counts` exactly.

    Returns nx, ny of shape (n_pairings, n_samples) and, per pairing, the numbers of
    samples counted by a one-list walk with look-ups and from full rows.
    """
    n = dx.shape[0]
    n_perms = perms.shape[0]
    nx = np.empty((n_perms, n), dtype=np.int64)
    ny = np.empty((n_perms, n), dtype=np.int64)
    n_blocks = (n + LISTED_BLOCK - 1) // LISTED_BLOCK
    full = np.zeros((n_blocks, n_perms), dtype=np.int64)
    looked = np.zeros((n_blocks, n_perms), dtype=np.int64)
    for b in prange(n_blocks):
        mark = np.zeros(n, dtype=inverses.dtype)  # uint16 where n fits: these and the inverse stay in cache
        gathered = np.empty(n, dtype=dy.dtype)
        scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=dx.dtype)
        best = np.empty(k, dtype=dx.dtype)
        for i in range(b * LISTED_BLOCK, min((b + 1) * LISTED_BLOCK, n)):
            _mark_list(xv[i], xi[i], mark, True)  # once for every pairing: x-row i is sample i's in each
            for p in range(n_perms):
                perm = perms[p]
                inverse = inverses[p]
                r = perm[i]
                ok, cx, cy = _probed_row_counts(xv[i], xc[i], yv[r], yi[r], yc[r], inverse, k, algorithm, mark, best)
                if not ok and k <= INSERTION_MAX_K:  # walk the deeper list, looking the other distance up
                    for side in range(2):
                        if (side == 0) == (xc[i] >= yc[r]):
                            ok, cx, cy = _lookup_row_counts(xv[i], xi[i], xc[i], dx[i], yv[r], yc[r], dy[r], perm, k,
                                                            algorithm, best)
                        else:
                            ok, cy, cx = _lookup_row_counts(yv[r], yi[r], yc[r], dy[r], xv[i], xc[i], dx[i], inverse,
                                                            k, algorithm, best)
                        if ok:
                            break
                    if ok:
                        looked[b, p] += 1
                if not ok:
                    row = dy[r]
                    for j in range(n):
                        gathered[j] = row[perm[j]]
                    cx, cy = row_counts(dx[i], gathered, i, k, algorithm, scratch)
                    full[b, p] += 1
                nx[p, i] = cx
                ny[p, i] = cy
            _mark_list(xv[i], xi[i], mark, False)
    return nx, ny, looked.sum(axis=0), full.sum(axis=0)
