"""Numba kernels for the KSG estimator: brute-force max-norm neighbour statistics.

The estimator needs, for every sample i, the distance to its k-th nearest neighbour in the
joint space (max-norm, so the joint distance is the larger of the two marginal distances)
and how many samples fall inside that distance in each marginal space. In the
parameter-vector case (hundreds to thousands of dimensions per side) space-partitioning
trees do not prune, so every pair is visited:

* the distance tile loops over dimensions on the outside and over samples on the inside,
  with the data transposed to (n_features, n_samples) so that the inner loop is a
  contiguous vector loop; four query rows share each loaded sample value (register
  blocking) and tiles of ``TILE`` samples keep the accumulators in L1 cache;
* :func:`ksg_neighbour_counts` (O(n) memory) processes rows in groups of ``GROUP_ROWS``:
  a group computes its full rows of both marginal distance matrices, then selects the
  k-th joint distance and counts, row by row. Every distance is computed twice;
* :func:`symmetric_block_rows` + :func:`block_row_counts` (the distance cache) compute
  each distance once: rows in blocks of ``BLOCK``, each block's tiles on and right of the
  diagonal computed in a compact buffer, the tiles right of it kept transposed until the
  later blocks' rows need them (about n^2 / 4 values per side at the peak);
* :func:`marginal_distance_matrix` writes the full matrix from the upper-triangle tiles,
  and :func:`permuted_neighbour_counts` evaluates many pairings of x and y rows from two
  such matrices in O(n^2) each (permutation nulls).

Every distance is ``abs(a - b)`` rounded once and reduced with ``max``, which is exact and
symmetric, so all kernels give the same distances as any NumPy reference, in any order,
with any number of threads. Each row's counts depend only on that row, so results do not
depend on the number of threads either. Rates: benchmarks/bench_estimators.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

if TYPE_CHECKING:  # names used only in type hints
    from numba.core.base import BaseContext
    from numba.core.typing.templates import Signature

GROUP_ROWS = 16  # query rows per group; a multiple of 4 (the register block)
TILE = 256  # samples per tile of the distance loop
INSERTION_MAX_K = 32  # above this, select the k-th distance with np.partition
BLOCK = 256  # samples per block of the symmetric kernels; a multiple of GROUP_ROWS; ksg.DISTANCE_CACHE_BLOCK
# Extra columns of a BLOCK x BLOCK tile buffer: its rows then lie BLOCK + TILE_PAD values apart, not 2 KiB (float64),
# so that the accumulator rows of a 4-row block are not 4 KiB apart (loads and stores 4 KiB apart collide in the
# CPU's memory-order checks).
TILE_PAD = 8


@intrinsic
def max_distance(typingctx: object, a: types.Type, b: types.Type
                 ) -> tuple[Signature, Callable[[BaseContext, Any, Signature, Sequence[Any]], Any]] | None:
    """The larger of the floats `a` and `b` (one type; neither NaN): LLVM's ``maxnum``, a
    vector ``max`` instruction in a vectorised loop.

    ``out[j] = max(out[j], z)`` written with Python's ``max`` is a select that LLVM may turn
    into "store z where z > out[j]", vectorised as a masked store, which AMD's Zen cores
    execute several times slower than a max and a plain store (docs/results/benchmarks.md).
    The value is the same either way: the larger of two non-NaN numbers (the distances here
    are never -0.0)."""
    if not isinstance(a, types.Float) or a != b:
        return None

    # builder, args and the value returned are llvmlite's, which has no type hints
    def codegen(context: BaseContext, builder: Any, signature: Signature, args: Sequence[Any]) -> Any:
        float_type = args[0].type
        bits = 64 if a == types.float64 else 32
        function = cgutils.get_or_insert_function(
            builder.module, cgutils.ir.FunctionType(float_type, [float_type, float_type]), f"llvm.maxnum.f{bits}")
        return builder.call(function, args, fastmath=("nnan", "nsz"))

    return a(a, b), codegen


@numba.njit(fastmath=True, cache=True)
def maxabs_tile(data_t: np.ndarray, c0: int, c1: int, query: np.ndarray, out: np.ndarray, oc: int) -> None:
    """out[q, oc + j - c0] = max_f |data_t[f, j] - query[q, f]| for every query row q and
    sample j in [c0, c1).

    data_t has shape (n_features, n_samples); query (n_query, n_features) with n_query a
    multiple of 4; out (n_query, >= oc + c1 - c0), C-contiguous.
    """
    n_features = data_t.shape[0]
    n_query = query.shape[0]
    for j0 in range(c0, c1, TILE):
        j1 = min(j0 + TILE, c1)
        width = j1 - j0
        o = oc + j0 - c0
        for q in range(n_query):
            out[q, o:o + width] = 0.0
        # Dimensions outside, the 4-row blocks inside: the tile's accumulators
        # (GROUP_ROWS x TILE) and the current data row stay in L1 for every dimension.
        for f in range(n_features):
            row = data_t[f, j0:j1]
            for q0 in range(0, n_query, 4):
                o0 = out[q0, o:o + width]
                o1 = out[q0 + 1, o:o + width]
                o2 = out[q0 + 2, o:o + width]
                o3 = out[q0 + 3, o:o + width]
                v0 = query[q0, f]
                v1 = query[q0 + 1, f]
                v2 = query[q0 + 2, f]
                v3 = query[q0 + 3, f]
                # numba's stub gives an intrinsic's call the definition's signature (typingctx included)
                for j in range(width):
                    a = row[j]
                    o0[j] = max_distance(o0[j], abs(a - v0))  # type: ignore[call-arg]
                    o1[j] = max_distance(o1[j], abs(a - v1))
                    o2[j] = max_distance(o2[j], abs(a - v2))
                    o3[j] = max_distance(o3[j], abs(a - v3))


@numba.njit(cache=True)
def _block_tile(data: np.ndarray, data_t: np.ndarray, i0: int, i1: int, j0: int, j1: int, out: np.ndarray,
                oc: int) -> None:
    """out[r - i0, oc + c - j0] = distance(r, c) for rows r in [i0, i1) and samples c in
    [j0, j1), in groups of GROUP_ROWS rows (the last group padded by repeating row i1 - 1,
    so `out` needs round_up(i1 - i0, GROUP_ROWS) rows)."""
    query = np.empty((GROUP_ROWS, data.shape[1]), dtype=data.dtype)
    for g0 in range(i0, i1, GROUP_ROWS):
        for r in range(GROUP_ROWS):
            query[r] = data[min(g0 + r, i1 - 1)]
        maxabs_tile(data_t, j0, j1, query, out[g0 - i0:g0 - i0 + GROUP_ROWS], oc)


@numba.njit(cache=True)
def _copy_transposed(src: np.ndarray, r_count: int, c0: int, c_count: int, dst: np.ndarray, dr: int, dc: int) -> None:
    """dst[dr + c, dc + r] = src[r, c0 + c] for r < r_count, c < c_count, in 8 x 8 blocks."""
    for cb in range(0, c_count, 8):
        for rb in range(0, r_count, 8):
            for c in range(cb, min(cb + 8, c_count)):
                for r in range(rb, min(rb + 8, r_count)):
                    dst[dr + c, dc + r] = src[r, c0 + c]


@numba.njit(cache=True)
def _copy_rows(src: np.ndarray, r_count: int, c_count: int, dst: np.ndarray, dr: int, dc: int) -> None:
    """dst[dr + r, dc + c] = src[r, c] for r < r_count, c < c_count."""
    for r in range(r_count):
        dst[dr + r, dc:dc + c_count] = src[r, :c_count]


# No-NaN flags (the data are checked finite) help LLVM vectorise the scans below; "ninf"
# is left out because the k-th distance starts at +inf.
REDUCTION_FLAGS = {"nnan", "nsz", "contract", "arcp", "reassoc"}
SELECT_CHUNK = 64  # samples per chunk of the k-th-distance scan


@numba.njit(inline="always")
def insert_k_best(best: np.ndarray, k: int, z: float) -> float:
    """Insert z into the ascending list best[:k] of the k smallest values so far (z below
    best[k - 1]), dropping the largest; returns the new k-th smallest, best[k - 1]. Inlined
    into each caller's loop (numba IR inlining), so a hot loop keeps its own code."""
    pos = k - 1
    while pos > 0 and best[pos - 1] > z:
        best[pos] = best[pos - 1]
        pos -= 1
    best[pos] = z
    return best[k - 1]


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def kth_smallest_joint(dx: np.ndarray, dy: np.ndarray, self_index: int, k: int, scratch: np.ndarray) -> float:
    """k-th smallest max(dx[j], dy[j]) over j != self_index.

    For k <= INSERTION_MAX_K, a sorted list of the k smallest so far; a chunk of
    SELECT_CHUNK samples is only looked at one by one when one of its joint distances (a
    vectorised count) beats the current k-th, which after the first few chunks is rare.
    """
    n = dx.shape[0]
    if k <= INSERTION_MAX_K:
        best = scratch[:k]
        best[:] = np.inf
        worst = np.inf
        for c0 in range(0, n, SELECT_CHUNK):
            width = min(SELECT_CHUNK, n - c0)
            a = dx[c0:c0 + width]
            b = dy[c0:c0 + width]
            if width == SELECT_CHUNK:  # a fixed trip count over slices: vectorised
                hits = 0
                for j in range(SELECT_CHUNK):
                    hits += (a[j] < worst) & (b[j] < worst)  # max(a, b) < worst
                if hits == 0:
                    continue
            for j in range(width):
                if c0 + j == self_index:
                    continue
                z = max(a[j], b[j])
                if z < worst:
                    worst = insert_k_best(best, k, z)
        return worst
    m = 0
    for j in range(n):
        if j != self_index:
            scratch[m] = max(dx[j], dy[j])
            m += 1
    return np.partition(scratch[:m], k - 1)[k - 1]


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def row_counts(dx: np.ndarray, dy: np.ndarray, i: int, k: int, algorithm: int, scratch: np.ndarray) -> tuple[int, int]:
    """Marginal neighbour counts of sample i from its rows of the distance matrices.

    Algorithm 1: eps = k-th joint distance; counts of dx < eps and dy < eps (strictly).
    Algorithm 2: eps_x, eps_y = largest marginal distances among the joint neighbours
    within eps (the k nearest when there are no ties); counts of dx <= eps_x, dy <= eps_y.
    Sample i itself is never counted. The rows hold i's distance to itself, dx[i] =
    dy[i] = 0: the loops run over every j (so they vectorise) and then take i's own
    contribution back out.
    """
    n = dx.shape[0]
    eps = kth_smallest_joint(dx, dy, i, k, scratch)
    nx = 0
    ny = 0
    if algorithm == 1:
        for j in range(n):
            nx += dx[j] < eps
            ny += dy[j] < eps
        return nx - (dx[i] < eps), ny - (dy[i] < eps)
    eps_x = 0.0  # i itself (distance 0) changes neither maximum
    eps_y = 0.0
    for j in range(n):
        if max(dx[j], dy[j]) <= eps:
            eps_x = max(eps_x, dx[j])
            eps_y = max(eps_y, dy[j])
    for j in range(n):
        nx += dx[j] <= eps_x
        ny += dy[j] <= eps_y
    return nx - (dx[i] <= eps_x), ny - (dy[i] <= eps_y)


@numba.njit(cache=True)
def group_rows(x: np.ndarray, y: np.ndarray, x_t: np.ndarray, y_t: np.ndarray,
               r0: int) -> tuple[np.ndarray, np.ndarray]:
    """dx, dy of shape (GROUP_ROWS, n_samples): the full marginal distance rows of samples
    r0, ..., r0 + GROUP_ROWS - 1. The last group is padded by repeating the last sample, so
    that the tile always has full blocks."""
    n = x.shape[0]
    qx = np.empty((GROUP_ROWS, x.shape[1]), dtype=x.dtype)
    qy = np.empty((GROUP_ROWS, y.shape[1]), dtype=y.dtype)
    for q in range(GROUP_ROWS):
        src = min(r0 + q, n - 1)
        qx[q] = x[src]
        qy[q] = y[src]
    dx = np.empty((GROUP_ROWS, n), dtype=x.dtype)
    dy = np.empty((GROUP_ROWS, n), dtype=y.dtype)
    maxabs_tile(x_t, 0, n, qx, dx, 0)
    maxabs_tile(y_t, 0, n, qy, dy, 0)
    return dx, dy


@numba.njit(parallel=True, cache=True)
def ksg_neighbour_counts(x: np.ndarray, y: np.ndarray, x_t: np.ndarray, y_t: np.ndarray, k: int,
                         algorithm: int) -> tuple[np.ndarray, np.ndarray]:
    """Marginal neighbour counts (n_x, n_y) of every sample for KSG algorithm 1 or 2.

    Parameters
    ----------
    x, y : float arrays of shape (n_samples, d_x), (n_samples, d_y), C-contiguous.
    x_t, y_t : the same data transposed, C-contiguous (d_x, n_samples), (d_y, n_samples).
    k : int, 1 <= k < n_samples.
    algorithm : 1 or 2.

    Returns
    -------
    nx, ny : int64 arrays of shape (n_samples,).
    """
    n = x.shape[0]
    nx = np.empty(n, dtype=np.int64)
    ny = np.empty(n, dtype=np.int64)
    n_groups = (n + GROUP_ROWS - 1) // GROUP_ROWS
    for g in prange(n_groups):
        r0 = g * GROUP_ROWS
        r1 = min(r0 + GROUP_ROWS, n)
        dx, dy = group_rows(x, y, x_t, y_t, r0)
        scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=x.dtype)
        for i in range(r0, r1):
            cx, cy = row_counts(dx[i - r0], dy[i - r0], i, k, algorithm, scratch)
            nx[i] = cx
            ny[i] = cy
    return nx, ny


# ------------------------------------------------------- each distance once (symmetric)
@numba.njit(cache=True)
def _tile_into_rows(data: np.ndarray, data_t: np.ndarray, i0: int, i1: int, block: int, rows: np.ndarray,
                    pool: np.ndarray, slot: int) -> None:
    """Tile (rows [i0, i1), column block `block`) into its columns of `rows`, and
    transposed into pool[slot] unless slot < 0.

    The tile is accumulated in a compact BLOCK x BLOCK buffer rather than in place in
    `rows`, whose rows lie n values apart and compete for the same cache sets.
    """
    n = data.shape[0]
    j0 = block * BLOCK
    j1 = min(j0 + BLOCK, n)
    buf = np.empty((BLOCK, BLOCK + TILE_PAD), dtype=data.dtype)
    _block_tile(data, data_t, i0, i1, j0, j1, buf, 0)
    _copy_rows(buf, i1 - i0, j1 - j0, rows, 0, j0)
    if slot >= 0:
        _copy_transposed(buf, i1 - i0, 0, j1 - j0, pool[slot], 0, 0)


@numba.njit(parallel=True, cache=True)
def symmetric_block_rows(x: np.ndarray, x_t: np.ndarray, y: np.ndarray, y_t: np.ndarray, m: int, rows_x: np.ndarray,
                         rows_y: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray, old_slots: np.ndarray,
                         new_slots: np.ndarray) -> None:
    """Fill rows_x, rows_y (BLOCK, n) with the full distance rows of block m, computing
    only the tiles on and right of the diagonal.

    The tiles left of the diagonal, (m, I) for I < m, were computed as tiles (I, m) in
    earlier steps and kept transposed in the pools (pool[old_slots[I]][r, c] = distance
    of rows i0 + r and I * BLOCK + c); they are copied first, so that their slots can be
    reused. Each new tile (m, J), J > m, is then stored transposed in pool[new_slots[J]]
    for step J. Distances are exactly symmetric, so the rows are bit-identical to a direct
    computation.
    """
    n = x.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    i0 = m * BLOCK
    i1 = min(i0 + BLOCK, n)
    for t in prange(2 * m):
        block = t // 2
        if t % 2 == 0:
            _copy_rows(pool_x[old_slots[block]], i1 - i0, BLOCK, rows_x, 0, block * BLOCK)
        else:
            _copy_rows(pool_y[old_slots[block]], i1 - i0, BLOCK, rows_y, 0, block * BLOCK)
    for t in prange(2 * (n_blocks - m)):
        block = m + t // 2
        slot = new_slots[block] if block > m else -1  # the diagonal tile is not kept
        if t % 2 == 0:
            _tile_into_rows(x, x_t, i0, i1, block, rows_x, pool_x, slot)
        else:
            _tile_into_rows(y, y_t, i0, i1, block, rows_y, pool_y, slot)


@numba.njit(parallel=True, cache=True)
def block_row_counts(rows_x: np.ndarray, rows_y: np.ndarray, i0: int, i1: int, k: int, algorithm: int, nx: np.ndarray,
                     ny: np.ndarray) -> None:
    """nx[i], ny[i] for the samples i in [i0, i1) from their full distance rows."""
    n = rows_x.shape[1]
    n_groups = (i1 - i0 + GROUP_ROWS - 1) // GROUP_ROWS
    for g in prange(n_groups):
        scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=rows_x.dtype)
        for i in range(i0 + g * GROUP_ROWS, min(i0 + (g + 1) * GROUP_ROWS, i1)):
            cx, cy = row_counts(rows_x[i - i0], rows_y[i - i0], i, k, algorithm, scratch)
            nx[i] = cx
            ny[i] = cy


# ------------------------------------------------------------------- repeated values (ties)
@numba.njit(cache=True)
def _column_repeats(values: np.ndarray, log_size: int, table: np.ndarray, used: np.ndarray, counts: np.ndarray) -> int:
    """How many of `values` (float64, -0.0 already read as 0.0) another entry equals: each
    value's bits go into an open-addressing hash table (linear probing; `table` and `used`
    of size 2^log_size, above twice the entries), counted, and the counts of 2 or more
    summed. NaN equals nothing and is never counted."""
    size = table.shape[0]
    shift = np.uint64(64 - log_size)
    used[:] = False
    bits = values.view(np.uint64)
    for i in range(values.shape[0]):
        if values[i] != values[i]:
            continue
        slot = np.int64((bits[i] * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        while used[slot] and table[slot] != bits[i]:
            slot = (slot + 1) & (size - 1)
        if used[slot]:
            counts[slot] += 1
        else:
            used[slot] = True
            table[slot] = bits[i]
            counts[slot] = 1
    repeated = 0
    for slot in range(size):
        if used[slot] and counts[slot] > 1:
            repeated += counts[slot]
    return repeated


@numba.njit(parallel=True, cache=True)
def repeated_value_counts(x: np.ndarray, y: np.ndarray, differences: bool) -> np.ndarray:
    """Per column, how many entries another row repeats in the same column (exactly, by value):
    the columns of `x` (n, d_x), then of `y` (n, d_y), then, with `differences` (d_x = d_y),
    of ``y - x``. Sorting each column and comparing neighbours counts the same."""
    n, d_x, d_y = x.shape[0], x.shape[1], y.shape[1]
    n_columns = d_x + d_y + (d_x if differences else 0)
    out = np.zeros(n_columns, dtype=np.int64)
    log_size = 4
    while (1 << log_size) < 2 * n:
        log_size += 1
    size = 1 << log_size
    for c in prange(n_columns):
        values = np.empty(n, dtype=np.float64)
        for i in range(n):
            if c < d_x:
                v = x[i, c]
            elif c < d_x + d_y:
                v = y[i, c - d_x]
            else:
                v = y[i, c - d_x - d_y] - x[i, c - d_x - d_y]
            values[i] = v + 0.0  # -0.0 becomes 0.0, so that equal values have equal bits
        out[c] = _column_repeats(values, log_size, np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.bool_),
                                 np.empty(size, dtype=np.int64))
    return out


# ---------------------------------------------------------------------- permutation nulls
PERMUTED_BLOCK = 64  # rows per work item of the permuted-count kernel


@numba.njit(cache=True)
def _upper_tile(t: int, n_blocks: int) -> tuple[int, int]:
    """(row block, column block) of tile t of the upper triangle, counted row by row:
    (0, 0), (0, 1), ..., (0, n_blocks - 1), (1, 1), ..."""
    bi = 0
    while t >= n_blocks - bi:
        t -= n_blocks - bi
        bi += 1
    return bi, bi + t


@numba.njit(parallel=True, cache=True)
def marginal_distance_matrix(data: np.ndarray, data_t: np.ndarray, out: np.ndarray) -> None:
    """out[i, j] = max_f |data[i, f] - data[j, f]|: the full max-norm distance matrix of
    one marginal space.

    Each BLOCK x BLOCK tile above the diagonal is computed once and written to both of its
    places (distances are symmetric, exactly: |a - b| = |b - a|). The values are
    bit-identical to the ones :func:`ksg_neighbour_counts` uses.
    """
    n = data.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    n_tiles = n_blocks * (n_blocks + 1) // 2
    for t in prange(n_tiles):
        bi, bj = _upper_tile(np.int64(t), np.int64(n_blocks))
        i0 = bi * BLOCK
        i1 = min(i0 + BLOCK, n)
        j0 = bj * BLOCK
        j1 = min(j0 + BLOCK, n)
        buf = np.empty((BLOCK, BLOCK + TILE_PAD), dtype=data.dtype)
        _block_tile(data, data_t, i0, i1, j0, j1, buf, 0)
        _copy_rows(buf, i1 - i0, j1 - j0, out, i0, j0)
        if bj != bi:
            _copy_transposed(buf, i1 - i0, 0, j1 - j0, out, j0, i0)


@numba.njit(cache=True)
def tile_index(bi: int, bj: int, n_blocks: int) -> int:
    """The place of tile (bi, bj), bj >= bi, among the upper-triangle tiles counted row by
    row (the inverse of :func:`_upper_tile`)."""
    return bi * n_blocks - bi * (bi - 1) // 2 + (bj - bi)


@numba.njit(parallel=True, cache=True)
def marginal_distance_tiles(x: np.ndarray, x_t: np.ndarray, y: np.ndarray, y_t: np.ndarray, tiles_x: np.ndarray,
                            tiles_y: np.ndarray) -> None:
    """The two marginal distance matrices of `x` and `y` as their tiles on and above the
    diagonal only: ``tiles[tile_index(bi, bj)][r, c]`` is the distance of samples
    bi * BLOCK + r and bj * BLOCK + c (bj >= bi; the padding of the last block is left
    unset). Each distance is computed once and stored once, straight into its tile: half
    the memory of the full matrices, and no copies. The values are bit-identical to those
    of :func:`marginal_distance_matrix`; :func:`tile_rows` reads full rows back.
    """
    n = x.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    n_tiles = n_blocks * (n_blocks + 1) // 2
    for t in prange(2 * n_tiles):
        # tiles from both ends of the list in turn: each thread's contiguous share of the range
        # holds as many of the narrow tiles of the last column as the others
        u = t // 2
        tile = u // 2 if u % 2 == 0 else n_tiles - 1 - u // 2
        bi, bj = _upper_tile(np.int64(tile), np.int64(n_blocks))
        i0 = bi * BLOCK
        i1 = min(i0 + BLOCK, n)
        j0 = bj * BLOCK
        j1 = min(j0 + BLOCK, n)
        if t % 2 == 0:
            _block_tile(x, x_t, i0, i1, j0, j1, tiles_x[tile], 0)
        else:
            _block_tile(y, y_t, i0, i1, j0, j1, tiles_y[tile], 0)


@numba.njit(cache=True)
def tile_rows(tiles: np.ndarray, n: int, r0: int, count: int, out: np.ndarray) -> None:
    """out[q, :n] = row r0 + q of the matrix held as :func:`marginal_distance_tiles`, for
    q < count (rows of one block): the tiles right of the diagonal give row segments, those
    above it columns, read a cache line (8 rows) at a time."""
    n_blocks = (n + BLOCK - 1) // BLOCK
    b = r0 // BLOCK
    o = r0 - b * BLOCK
    for bj in range(b, n_blocks):
        tile = tiles[tile_index(b, bj, n_blocks)]
        j0 = bj * BLOCK
        width = min(BLOCK, n - j0)
        for q in range(count):
            out[q, j0:j0 + width] = tile[o + q, :width]
    for bi in range(b):
        tile = tiles[tile_index(bi, b, n_blocks)]
        j0 = bi * BLOCK
        for c in range(BLOCK):
            src = tile[c]
            for q in range(count):
                out[q, j0 + c] = src[o + q]


@numba.njit(parallel=True, cache=True)
def permuted_neighbour_counts(dx: np.ndarray, dy: np.ndarray, perms: np.ndarray, k: int,
                              algorithm: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour counts of the pairings x[i] <-> y[perms[p, i]] from cached marginal
    distance matrices: O(n^2) per pairing instead of O(n^2 d).

    The joint distance of samples i and j is max(dx[i, j], dy[perm[i], perm[j]]); row
    perm[i] of dy, gathered through perm, is the y-row of sample i. Row i of dx is read
    once for all pairings (it stays in cache while they run), so each pairing costs about
    one n x n read instead of two. Counts equal those of :func:`ksg_neighbour_counts` on
    (x, y[perm]) exactly.

    Returns nx, ny of shape (n_pairings, n_samples).
    """
    n = dx.shape[0]
    n_perms = perms.shape[0]
    nx = np.empty((n_perms, n), dtype=np.int64)
    ny = np.empty((n_perms, n), dtype=np.int64)
    n_blocks = (n + PERMUTED_BLOCK - 1) // PERMUTED_BLOCK
    for b in prange(n_blocks):
        gathered = np.empty(n, dtype=dy.dtype)
        row = np.empty(n, dtype=dy.dtype)
        scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=dx.dtype)
        for i in range(b * PERMUTED_BLOCK, min((b + 1) * PERMUTED_BLOCK, n)):
            for p in range(n_perms):
                perm = perms[p]
                # A sequential copy streams the row in from memory; gathering straight
                # from the matrix would fetch its cache lines in random order.
                row[:] = dy[perm[i]]
                for j in range(n):
                    gathered[j] = row[perm[j]]
                cx, cy = row_counts(dx[i], gathered, i, k, algorithm, scratch)
                nx[p, i] = cx
                ny[p, i] = cy
    return nx, ny


@numba.njit(parallel=True, cache=True)
def subset_neighbour_counts(dx: np.ndarray, dy: np.ndarray, rows: np.ndarray, k: int,
                            algorithm: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour counts of the samples `rows` among themselves (distinct indices), from the
    marginal distance matrices of all samples: O(m^2) for m rows, no distance recomputed.

    Row position a of the subset reads ``dx[rows[a], rows[b]]`` for every b (gathered into
    float64, which holds a float32 distance exactly) and counts as :func:`row_counts` does,
    so the counts equal those of :func:`ksg_neighbour_counts` on the subset's samples exactly.

    Returns nx, ny of shape (m,).
    """
    m = rows.shape[0]
    nx = np.empty(m, dtype=np.int64)
    ny = np.empty(m, dtype=np.int64)
    n_blocks = (m + PERMUTED_BLOCK - 1) // PERMUTED_BLOCK
    for blk in prange(n_blocks):
        gx = np.empty(m, dtype=np.float64)
        gy = np.empty(m, dtype=np.float64)
        scratch = np.empty(m if k > INSERTION_MAX_K else k, dtype=np.float64)
        for a in range(blk * PERMUTED_BLOCK, min((blk + 1) * PERMUTED_BLOCK, m)):
            row_x = dx[rows[a]]
            row_y = dy[rows[a]]
            for b in range(m):
                gx[b] = row_x[rows[b]]
                gy[b] = row_y[rows[b]]
            cx, cy = row_counts(gx, gy, a, k, algorithm, scratch)
            nx[a] = cx
            ny[a] = cy
    return nx, ny
