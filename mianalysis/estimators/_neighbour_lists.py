"""Numba kernels for KSG permutation nulls from sorted marginal neighbour lists.

Under a shuffle of the pairing only which y-row meets which x-row changes; the marginal
distances do not. Each sample's nearest marginal neighbours, sorted by distance, are found
once per marginal (:func:`neighbour_lists`); a pairing then finds every sample's k-th joint
neighbour by merging two such lists (:func:`listed_neighbour_counts`) instead of scanning
two rows of n distances.

The merge: walk the x-list of sample i and the y-list of its partner row ``perm[i]`` in
one ascending sequence of distances. A sample j is met once in each list, at ``dx[i, j]``
and at ``dy[perm[i], perm[j]]``; the second meeting happens at the larger of the two, its
joint (max-norm) distance. So the values at which samples are met for the second time are
their joint distances in ascending order, and the k-th such value is eps, the k-th joint
neighbour distance, exactly (ties included: the k-th second meeting has at most k - 1
joint distances below it and at least k at or below it). The marginal counts (distances
strictly below eps for algorithm 1; at most the extents eps_x, eps_y of the joint
neighbours for algorithm 2) are the walked prefixes of the lists, less their entries at
the boundary.

A list holds every neighbour strictly closer than its row's `cover` distance; the merge is
valid while every value it takes is below both lists' covers (every distance below that
has then been met). When a walk would pass a cover (a sample whose k-th joint neighbour
lies beyond its listed marginal neighbours: dependent data, very different scales of x
and y), that sample is counted from its two full distance rows by the brute-force code of
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

from ._kernels import INSERTION_MAX_K, row_counts

LISTED_BLOCK = 256  # samples per work item of listed_neighbour_counts


SAMPLE_RANK = 32  # the threshold of a list is the SAMPLE_RANK-th smallest of a strided sample of its row


@numba.njit(parallel=True, cache=True)
def neighbour_lists(d, length, values, indices, cover):
    """The sorted near-neighbour list of every row of the distance matrix `d` (n, n).

    For row i the list holds every j != i with ``d[i, j] < cover[i]``, in ascending
    distance: ``values[i, :counts[i]]``, ``indices[i, :counts[i]]``, at most `capacity`
    (the width of `values`) of them. The cover is a threshold expected to let about
    `length` neighbours in: the SAMPLE_RANK-th smallest distance of every s-th sample,
    s = length // SAMPLE_RANK; when more than `capacity` are below it, the cover becomes
    the (capacity + 1)-th smallest distance. With ``length >= n - 1`` every j != i is
    listed and the cover is +inf. values (n, capacity) of d's dtype, indices
    (n, capacity) int32, counts (n,) int64, cover (n,) of d's dtype.
    """
    n = d.shape[0]
    capacity = values.shape[1] - 1  # and the sentinel
    stride = max(1, length // SAMPLE_RANK)
    n_blocks = (n + LISTED_BLOCK - 1) // LISTED_BLOCK
    for b in prange(n_blocks):
        sample = np.empty((n + stride - 1) // stride, dtype=d.dtype)
        found = np.empty(n, dtype=np.int64)
        near = np.empty(n, dtype=d.dtype)
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
            order = np.argsort(near[:m])
            if m > capacity:  # keep the capacity nearest; the cover is the next distance
                bound = near[order[capacity]]
                m = capacity
                while m > 0 and near[order[m - 1]] >= bound:
                    m -= 1
            for p in range(m):
                values[i, p] = near[order[p]]
                indices[i, p] = found[order[p]]
            values[i, m:] = np.inf  # the sentinel that ends a walk (and fills the rest)
            indices[i, m:] = 0
            cover[i] = bound


@numba.njit(cache=True)
def _merged_row_counts(xv, xi, cover_x, yv, yi, cover_y, inverse, k, algorithm, mark, met, token):
    """(ok, nx, ny) of one sample from its x-list and its partner's y-list (see the module
    docstring); ok False when the walk would pass a list's cover. Each list ends with a
    +inf sentinel. `inverse` maps a y-row to the sample paired with it; `mark` (n) holds
    `token` for the samples met once so far, `met` (algorithm 2) the distance they were
    met at."""
    bound = min(cover_x, cover_y)
    p = 0
    q = 0
    done = 0
    eps = bound  # set at the k-th second meeting
    eps_x = 0.0
    eps_y = 0.0
    while True:
        a = xv[p]
        b = yv[q]
        take_x = a <= b
        v = a if take_x else b
        if done >= k and v > eps:  # algorithm 2: every joint distance <= eps has been met
            break
        if v >= bound:  # past a cover (or both sentinels)
            return False, 0, 0
        jx = xi[p]
        jy = inverse[yi[q]]
        j = jx if take_x else jy
        step = np.int64(take_x)
        p += step
        q += 1 - step
        seen = mark[j] == token
        mark[j] = token
        if algorithm == 2:
            first = met[j]
            met[j] = v
            if seen:  # the second meeting: j's joint distance is v
                if take_x:
                    eps_y = max(eps_y, first)
                    eps_x = max(eps_x, v)
                else:
                    eps_x = max(eps_x, first)
                    eps_y = max(eps_y, v)
        if seen:
            done += 1
            if done == k:
                eps = v
                if algorithm == 1:
                    break
    # Every distance <= eps of both lists has been walked (eps < bound <= both covers).
    nx = p
    ny = q
    if algorithm == 1:  # strictly below eps
        while nx > 0 and xv[nx - 1] >= eps:
            nx -= 1
        while ny > 0 and yv[ny - 1] >= eps:
            ny -= 1
    else:  # at most eps_x, eps_y (<= eps)
        while nx > 0 and xv[nx - 1] > eps_x:
            nx -= 1
        while ny > 0 and yv[ny - 1] > eps_y:
            ny -= 1
    return True, nx, ny


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
            pos = k - 1
            while pos > 0 and best[pos - 1] > z:
                best[pos] = best[pos - 1]
                pos -= 1
            best[pos] = z
            worst = best[k - 1]
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
    of both marginals (:func:`neighbour_lists` of dx and dy); a sample whose walk passes a
    cover is counted from the full rows of dx and dy. ``inverses[p]`` is the inverse of
    ``perms[p]``. Counts equal those of
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
        mark = np.zeros(n, dtype=np.int32)
        met = np.empty(n, dtype=dx.dtype)
        gathered = np.empty(n, dtype=dy.dtype)
        scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=dx.dtype)
        best = np.empty(k, dtype=dx.dtype)
        token = np.int32(0)
        for p in range(n_perms):
            perm = perms[p]
            inverse = inverses[p]
            for i in range(b * LISTED_BLOCK, min((b + 1) * LISTED_BLOCK, n)):
                token += np.int32(1)
                r = perm[i]
                ok, cx, cy = _merged_row_counts(xv[i], xi[i], xc[i], yv[r], yi[r], yc[r], inverse, k, algorithm,
                                                mark, met, token)
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
    return nx, ny, looked.sum(axis=0), full.sum(axis=0)
