"""Numba kernels for KSG permutation nulls from sorted marginal neighbour lists.

Under a shuffle of the pairing only which y-row meets which x-row changes; the marginal
distances do not. Each sample's nearest marginal neighbours, sorted by distance, are found
once per marginal (:func:`neighbour_lists`, from a full matrix or from its upper-triangle
tiles; a bucket sort, see :func:`_sort_near`); a pairing then finds every sample's k-th
joint neighbour from such lists (:func:`listed_neighbour_counts`) instead of scanning two
rows of n distances.

The probe: the joint (max-norm) distance of samples i and j is the larger of their two
marginal distances, so walking one of i's two lists (its x-list, or the y-list of its
partner row ``perm[i]``) in ascending distance and finding each walked sample's other
distance in a table of the other list (:func:`_build_members`: a bitset of the listed
samples with the rank of each) gives the joint distances of every sample listed on both
sides; the k smallest so far are kept. A list holds every neighbour strictly closer than
its row's `cover` distance, so once the walk reaches a distance at least the k-th kept
value, eps = that value is the k-th joint neighbour distance exactly, provided it lies
below both covers: every sample with a joint distance below eps is then listed on both
sides and was walked. Each sample walks the list of its sparser side (the one whose
DENSITY_RANK-th neighbour is farther): it reaches eps in fewer steps. The marginal counts
(distances strictly below eps for algorithm 1; at most the extents eps_x, eps_y of the
joint neighbours for algorithm 2) are then positions in the sorted lists (binary search).

When eps is not below both covers (a sample whose k-th joint neighbour lies beyond a list:
dependent data, very different scales of x and y), the sample walks the list that reaches
farther and looks the other distance up in its full matrix row, which stays in cache for
every pairing of its block of rows; a count beyond a list is then counted over that row,
for all the pairings at once (:func:`_row_counts_below`); beyond both lists, from its two
full rows by the brute-force code (:func:`mianalysis.estimators._kernels.row_counts`).
Every way the counts are the brute-force counts exactly: every step compares distance
values taken from the same matrices, and no distance is combined with another (the only
arithmetic, in :func:`_row_counts_below`, picks which values to compare), so the result
does not depend on the CPU, on fast-math flags or on the number of threads (each sample's
counts depend only on that sample).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ._kernels import BLOCK, INSERTION_MAX_K, REDUCTION_FLAGS, insert_k_best, row_counts, tile_index, tile_rows

if TYPE_CHECKING:  # names used only in type hints
    from numba.core.base import BaseContext
    from numba.core.typing.templates import Signature

# Rows per work item of neighbour_lists: a whole block, so that its distances in the tiles above the diagonal (its
# columns there) are read a full tile row at a time, not in strided parts of rows.
LIST_GROUP = BLOCK


def load_rows(d: np.ndarray, n: int, r0: int, count: int, out: np.ndarray) -> None:
    """out[q, :n] = row r0 + q of the distances `d` for q < count (rows of one BLOCK):
    a full matrix, or its tiles (:func:`mianalysis.estimators._kernels.tile_rows`)."""
    raise NotImplementedError("for Numba kernels only")


# Any in the typing functions of @overload and their implementations: Numba calls the one with Numba types and the
# other with values, and refuses a pair whose parameters differ, annotations included.
@overload(load_rows)
def _load_rows(d: Any, n: Any, r0: Any, count: Any, out: Any) -> Callable[[np.ndarray, int, int, int, np.ndarray], None]:
    if d.ndim == 3:
        def from_tiles(d: Any, n: Any, r0: Any, count: Any, out: Any) -> None:
            tile_rows(d, n, r0, count, out)
        return from_tiles

    def from_matrix(d: Any, n: Any, r0: Any, count: Any, out: Any) -> None:
        for q in range(count):
            out[q, :n] = d[r0 + q]
    return from_matrix


@intrinsic
def _prefetch(typingctx: object, array: types.Type, index: types.Type
              ) -> tuple[Signature, Callable[[BaseContext, Any, Signature, Sequence[Any]], Any]] | None:
    """Ask the CPU to bring the cache line of ``array[index]`` (a 1-D array) in ahead of
    use (LLVM's prefetch: a hint, never a fault, no effect on any value). A walk of a
    list starts at a random row, whose first lines would otherwise wait on memory."""
    if not isinstance(array, types.Array) or array.ndim != 1:
        return None

    # builder, args and the value returned are llvmlite's, which has no type hints
    def codegen(context: BaseContext, builder: Any, signature: Signature, args: Sequence[Any]) -> Any:
        array_type = signature.args[0]
        ary = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, ary, [args[1]], wraparound=False)
        byte_pointer, int32 = cgutils.voidptr_t, cgutils.int32_t
        function = cgutils.get_or_insert_function(
            builder.module, cgutils.ir.FunctionType(cgutils.ir.VoidType(), [byte_pointer, int32, int32, int32]),
            "llvm.prefetch.p0i8")
        # read, high locality, data cache
        builder.call(function, [builder.bitcast(pointer, byte_pointer), int32(0), int32(3), int32(1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


SAMPLE_RANK = 32  # the threshold of a list is the SAMPLE_RANK-th smallest of a strided sample of its row


BUCKET_WORK = 16  # bucket sort while the insertion sort's work bound, sum of squared bucket sizes, is <= this x m


@numba.njit(cache=True)
def _sort_near(near: np.ndarray, found: np.ndarray, m: int, key: np.ndarray, counts: np.ndarray, sv: np.ndarray,
               si: np.ndarray) -> None:
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
    scale = n_buckets / (hi - lo) if hi > lo else 0.0
    if not scale < np.inf:  # hi - lo too small for a finite scale: one bucket (then np.argsort)
        scale = 0.0
    for p in range(m):
        # (v - lo) * scale is in [0, n_buckets] up to rounding and non-decreasing in v; no overflow.
        key[p] = min(np.int64((near[p] - lo) * scale), n_buckets - 1)
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


@numba.njit(cache=True)
def _list_row(row: np.ndarray, i: int, length: int, work: tuple[np.ndarray, ...], values: np.ndarray,
              indices: np.ndarray, cover: np.ndarray) -> None:
    """Row i of :func:`neighbour_lists` from the distances `row` of sample i (its own 0
    among them). `work`: :func:`_list_work`."""
    sample, found, near, key, counts, sv, si = work
    n = row.shape[0]
    stride = max(1, length // SAMPLE_RANK)
    bound = np.inf
    if length < n - 1:
        # the (rank + 1)-th smallest of the strided sample: the smallest rank + 1 kept in
        # order in sample[:rank + 1], most of the sample rejected by one comparison
        rank = min(SAMPLE_RANK, (n + stride - 1) // stride - (i % stride == 0) - 1)  # sample size - 1 (i aside)
        sample[:rank + 1] = np.inf
        worst = np.inf
        for j in range(0, n, stride):
            v = row[j]
            if v < worst and j != i:
                worst = insert_k_best(sample, rank + 1, v)
        bound = worst
    m = 0
    for j in range(n):
        if row[j] < bound and j != i:
            found[m] = j
            near[m] = row[j]
            m += 1
    _finish_list(near, found, m, bound, i, key, counts, sv, si, values, indices, cover)


@numba.njit(cache=True)
def _finish_list(near: np.ndarray, found: np.ndarray, m: int, bound: float, i: int, key: np.ndarray, counts: np.ndarray,
                 sv: np.ndarray, si: np.ndarray, values: np.ndarray, indices: np.ndarray, cover: np.ndarray) -> None:
    """Row i of the lists from its m candidates (near[:m], found[:m]: every j != i with a
    distance below `bound`, in ascending j): sorted, cut to the capacity, the sentinel."""
    capacity = values.shape[1] - 1  # and the sentinel
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
def _list_work(n: int, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """Workspace of :func:`_list_row` for rows of n distances of the dtype of `values`."""
    return (np.empty(n, dtype=values.dtype), np.empty(n, dtype=np.int64), np.empty(n, dtype=values.dtype),
            np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64), np.empty(n, dtype=values.dtype),
            np.empty(n, dtype=np.int64))


@numba.njit(parallel=True, cache=True)
def neighbour_lists(d: np.ndarray, length: int, values: np.ndarray, indices: np.ndarray, cover: np.ndarray,
                    n_threads: int = 1) -> None:
    """The sorted near-neighbour list of every row of the distances `d`: a full (n, n)
    matrix, or its tiles (:func:`mianalysis.estimators._kernels.marginal_distance_tiles`).

    For row i the list holds every j != i with ``d[i, j] < cover[i]``, in ascending
    distance, at most `capacity` of them (the width of `values` less one), followed by
    +inf sentinels (and index 0) to the end of the row. The cover is a threshold expected
    to let about `length` neighbours in: the SAMPLE_RANK-th smallest distance of every
    s-th sample, s = length // SAMPLE_RANK; when more than `capacity` are below it, the
    cover becomes the (capacity + 1)-th smallest distance. With ``length >= n - 1``
    every j != i is listed and the cover is +inf. values (n, capacity + 1) of d's dtype,
    indices (n, capacity + 1) int32, cover (n,) of d's dtype. `n_threads`: the work items
    (give Numba's thread count), each with its own workspace (from tiles, a block's
    candidates: BLOCK n index and distance values).
    """
    n = values.shape[0]
    n_groups = (n + LIST_GROUP - 1) // LIST_GROUP
    n_items = max(1, min(n_threads, n_groups))
    for t in prange(n_items):  # one workspace per work item (`n_threads` of them), the groups dealt round
        work = _list_work(n, values)
        width = n if d.ndim == 3 else 1  # the candidates of a group's rows (from tiles only)
        found = np.empty((LIST_GROUP, width), dtype=np.int32)
        near = np.empty((LIST_GROUP, width), dtype=values.dtype)
        best = np.empty((LIST_GROUP, SAMPLE_RANK + 1), dtype=values.dtype)
        for g in range(t, n_groups, n_items):
            r0 = g * LIST_GROUP
            count = min(LIST_GROUP, n - r0)
            if d.ndim == 3:
                _tile_list_group(d, n, r0, count, length, work, best, found, near, values, indices, cover)
            else:
                for q in range(count):
                    _list_row(d[r0 + q], r0 + q, length, work, values, indices, cover)


@numba.njit(cache=True)
def _tile_list_group(tiles: np.ndarray, n: int, r0: int, count: int, length: int, work: tuple[np.ndarray, ...],
                     best: np.ndarray, found: np.ndarray, near: np.ndarray, values: np.ndarray, indices: np.ndarray,
                     cover: np.ndarray) -> None:
    """Rows r0 to r0 + count - 1 (of one block) of :func:`neighbour_lists`, straight from the
    tiles: the tiles above the diagonal hold these rows' distances to the earlier samples as
    columns, read a row of the tile (the group's values side by side) at a time, and those
    right of it as rows. The strided sample, the candidates below the bound (in ascending
    j, as :func:`_list_row` meets them) and so the lists are those of :func:`_list_row`."""
    _, _, _, key, counts, sv, si = work
    n_blocks = (n + BLOCK - 1) // BLOCK
    b = r0 // BLOCK
    o = r0 - b * BLOCK
    stride = max(1, length // SAMPLE_RANK)
    bounds = np.full(count, np.inf)
    if length < n - 1:  # the (rank + 1)-th smallest of each row's strided sample
        best[:] = np.inf
        keep = np.empty(count, dtype=np.int64)
        for q in range(count):
            keep[q] = min(SAMPLE_RANK, (n + stride - 1) // stride - ((r0 + q) % stride == 0) - 1) + 1
        for bi in range(b):
            tile = tiles[tile_index(bi, b, n_blocks)]
            for c in range((-bi * BLOCK) % stride, BLOCK, stride):
                for q in range(count):
                    v = tile[c, o + q]
                    if v < bounds[q]:
                        bounds[q] = insert_k_best(best[q], keep[q], v)
        for bj in range(b, n_blocks):
            tile = tiles[tile_index(b, bj, n_blocks)]
            j0 = bj * BLOCK
            width = min(BLOCK, n - j0)
            for q in range(count):
                for c in range((-j0) % stride, width, stride):
                    v = tile[o + q, c]
                    if v < bounds[q] and j0 + c != r0 + q:
                        bounds[q] = insert_k_best(best[q], keep[q], v)
    m = np.zeros(count, dtype=np.int64)
    for bi in range(b):  # the candidates: distances below the bound, j ascending
        tile = tiles[tile_index(bi, b, n_blocks)]
        for c in range(BLOCK):
            for q in range(count):
                v = tile[c, o + q]
                if v < bounds[q]:
                    found[q, m[q]] = bi * BLOCK + c
                    near[q, m[q]] = v
                    m[q] += 1
    for bj in range(b, n_blocks):
        tile = tiles[tile_index(b, bj, n_blocks)]
        j0 = bj * BLOCK
        width = min(BLOCK, n - j0)
        for q in range(count):
            i = r0 + q
            for c in range(width):
                v = tile[o + q, c]
                if v < bounds[q] and j0 + c != i:
                    found[q, m[q]] = j0 + c
                    near[q, m[q]] = v
                    m[q] += 1
    for q in range(count):
        _finish_list(near[q], found[q], m[q], bounds[q], r0 + q, key, counts, sv, si, values, indices, cover)


MEMBER_BLOCK = 32  # samples (or y-rows) whose list memberships a work item of the probe holds
PREFETCH_ENTRIES = 128  # list entries fetched ahead of a probe's walk
PREFETCH_AHEAD = 2  # walks ahead
HOT_PREFETCH = 16  # list entries fetched ahead in the hot-row passes (their walks are short)
HOT_BLOCK = 8  # matrix rows a work item of the hot-row passes holds (in L2 cache)
DENSITY_RANK = 64  # which side to walk: the one whose DENSITY_RANK-th listed neighbour is farther

_ONE = np.uint64(1)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@numba.njit(inline="always")
def _popcount(word: np.uint64) -> np.int64:
    """The number of set bits of the uint64 `word` (LLVM emits one popcnt for this)."""
    word = word - ((word >> _ONE) & _M1)
    word = (word & _M2) + ((word >> np.uint64(2)) & _M2)
    word = (word + (word >> np.uint64(4))) & _M4
    return np.int64((word * _H01) >> np.uint64(56))


@numba.njit(cache=True)
def _build_members(lv: np.ndarray, li: np.ndarray, bits: np.ndarray, pre: np.ndarray, vals: np.ndarray, b: int) -> None:
    """Slot b of a membership table: the list (lv, li) (values ending with +inf, indices)
    by index: bit j of ``bits[b]`` is set for every listed j, ``pre[b, w]`` counts the set
    bits of the words before w, and ``vals[b, rank]`` is the listed value of the j of that
    rank among the listed indices: the listed value of j is
    ``vals[b, pre[b, j >> 6] + popcount(bits[b, j >> 6] & ((1 << (j & 63)) - 1))]``."""
    bits[b, :] = 0
    t = 0
    while lv[t] < np.inf:
        j = np.int64(li[t])
        bits[b, j >> 6] |= _ONE << np.uint64(j & 63)
        t += 1
    c = 0
    for w in range(bits.shape[1]):
        pre[b, w] = c
        c += _popcount(bits[b, w])
    t = 0
    while lv[t] < np.inf:
        j = np.int64(li[t])
        w = j >> 6
        vals[b, pre[b, w] + _popcount(bits[b, w] & ((_ONE << np.uint64(j & 63)) - _ONE))] = lv[t]
        t += 1


def _other(source: tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] | tuple[np.ndarray, np.ndarray],
           index: int) -> tuple[bool, float]:
    """(listed, distance): the other marginal's distance of the walked sample `index`, from
    a slot of a membership table, ``(bits, pre, vals, slot, amap)``
    (:func:`_build_members`; listed is False for a sample the table's list does not hold),
    or from a full distance row, ``(row, amap)``; ``amap`` maps a walked index to the
    other side's."""
    raise NotImplementedError("for Numba kernels only")


@overload(_other)  # Any: as for load_rows
def _other_impl(source: Any, index: Any) -> Callable[..., tuple[bool, float]]:
    if len(source) == 5:
        def from_table(source: Any, index: Any) -> tuple[bool, float]:
            bits, pre, vals, b, amap = source
            j = np.int64(amap[index])
            word = bits[b, j >> 6]
            shift = np.uint64(j & 63)
            if (word >> shift) & _ONE:  # listed: its value by the rank of j among the listed (no array calls)
                return True, vals[b, pre[b, j >> 6] + _popcount(word & ((_ONE << shift) - _ONE))]
            return False, vals[b, 0]
        return from_table

    def from_row(source: Any, index: Any) -> tuple[bool, float]:
        row, amap = source
        return True, row[amap[index]]
    return from_row


@numba.njit(cache=True)
def _walk(av: np.ndarray, ai: np.ndarray, cover_a: float, cover_b: float,
          source: tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] | tuple[np.ndarray, np.ndarray], k: int,
          algorithm: int, best: np.ndarray) -> tuple[bool, int, float, float, float]:
    """(ok, end, eps, eps_a, eps_b) of one sample by walking one marginal's list (av, ai)
    in ascending order; the other marginal's distance of each walked sample comes from
    `source` (:func:`_other`: a membership table of the other side's list, whose cover is
    `cover_b`, or a full row, with ``cover_b`` +inf), and the k smallest joint distances
    of the samples it gives are kept in `best`.

    ok is False when the k-th joint distance may lie beyond a list (above the lower cover;
    for algorithm 2, at or above it): a sample closer than that in the joint max-norm is
    closer in both marginals, so listed on both sides, and walked. Otherwise eps is the
    k-th joint distance exactly; eps_a and eps_b are, for algorithm 2, the largest
    marginal distances of the joint neighbours within eps; and every walked distance at or
    beyond the one that counts (eps for algorithm 1, eps_a for algorithm 2) lies at or
    after `end`, so that the walked side's count is a search of av[:end].
    """
    bound = min(cover_a, cover_b)
    best[:] = np.inf
    worst = np.inf
    stop = bound  # min(worst, bound): every unwalked sample at or beyond it is at least as far as the k-th
    q = 0
    while av[q] < stop:
        a = av[q]
        listed, v = _other(source, np.uint32(ai[q]))
        if listed:
            z = max(a, v)
            if z < worst:
                worst = insert_k_best(best, k, z)
                stop = min(worst, bound)
        q += 1
    eps = worst
    if eps > bound or (algorithm == 2 and eps >= bound):  # at eps itself some neighbours may not be listed
        return False, q, eps, 0.0, 0.0
    if algorithm == 1:
        return True, q, eps, 0.0, 0.0
    eps_a = 0.0
    eps_b = 0.0
    s = 0
    while av[s] <= eps:
        listed, v = _other(source, ai[s])
        if listed and v <= eps:
            eps_a = max(eps_a, av[s])
            eps_b = max(eps_b, v)
        s += 1
    return True, s, eps, eps_a, eps_b


@numba.njit(cache=True)
def _listed_count(values: np.ndarray, cover: float, limit: float, inclusive: bool) -> int | np.intp:
    """#{j != self: d[j] < limit} (<= with `inclusive`) from the sorted list `values`, or
    -1 when the list cannot tell (the limit is not below its cover; for a strict count a
    limit equal to the cover is fine: every listed distance is below the cover, every
    other one at or above it)."""
    if inclusive:
        if limit < cover:
            return np.searchsorted(values, limit, side="right")
        return -1
    if limit <= cover:
        return np.searchsorted(values, limit, side="left")
    return -1


SMALL_BATCH = 24  # up to this many limits, one vectorised pass over the row each (faster than the cells)
CELLS_PER_LIMIT = 16  # cells of the value range per limit in _row_counts_below
COPIES = 4  # interleaved copies of its cell counters (a power of 2)


@numba.njit(fastmath=REDUCTION_FLAGS, cache=True)
def _count_below(row: np.ndarray, t: float, inclusive: bool) -> int:
    """#{j: row[j] < t} (<= with `inclusive`): one vectorised pass."""
    s = 0
    if inclusive:
        for j in range(row.shape[0]):
            s += row[j] <= t
    else:
        for j in range(row.shape[0]):
            s += row[j] < t
    return s


@numba.njit(cache=True)
def _row_counts_below(row: np.ndarray, limits: np.ndarray, m: int, inclusive: bool, order: np.ndarray, hist: np.ndarray,
                      out: np.ndarray, keys: np.ndarray, cells: np.ndarray, first: np.ndarray) -> None:
    """out[c] = #{j: row[j] < limits[c]} (<= with `inclusive`) for c < m, the row's own 0
    included, in one pass over `row` for all limits.

    The range of the limits is cut into G = CELLS_PER_LIMIT m cells and every value gets a
    cell by the same arithmetic, ``floor((v - lo) * scale) + 1`` clamped to [0, G + 1]
    (below and above the range: the two end cells), a non-decreasing function of v under
    rounding. So a limit in a lower cell than v is below v and one in a higher cell above
    it: a value in a cell without limits lies between the same limits as its cell, and only
    the values in a cell holding a limit are compared with its limits (those of the top
    cell, above every limit, are in no count and skipped). The counts are then running
    sums of the values' places among the sorted limits. No fast-math here: the cells of
    the values and of the limits must come from the same rounding. Exact.
    `keys` (n,), `cells` (>= COPIES (G + 2)) and `first` (>= G + 3) are workspace.
    """
    if m <= SMALL_BATCH:
        for c in range(m):
            out[c] = _count_below(row, limits[c], inclusive)
        return
    order[:m] = np.argsort(limits[:m])
    ts = limits[order[:m]]
    lo = ts[0]
    hi = ts[m - 1]
    if not hi > lo:  # a single value
        s = _count_below(row, lo, inclusive)
        for c in range(m):
            out[c] = s
        return
    n_cells = CELLS_PER_LIMIT * m
    top = np.float64(n_cells + 1)
    scale = (n_cells - 1) / (hi - lo)  # hi lands in cell n_cells at the most, never in the top cell
    for j in range(row.shape[0]):  # the cell of every value (vectorised)
        keys[j] = np.int32(min(max((row[j] - lo) * scale + 1.0, 0.0), top))
    # first[g]: the limits in cells below g; the cells from first[g] to first[g + 1] hold limits
    c = 0
    for g in range(n_cells + 3):
        while c < m and np.int64(min(max((ts[c] - lo) * scale + 1.0, 0.0), top)) < g:
            c += 1
        first[g] = c
    stride = n_cells + 2
    cells[:COPIES * stride] = 0
    hist[:m + 1] = 0
    for j in range(row.shape[0]):
        g = keys[j]
        if g > n_cells:  # the top cell, above every limit (hi lands in cell n_cells at the most)
            continue
        if first[g + 1] == first[g]:
            # COPIES interleaved counters: runs of values in one cell (the bottom cell) do not wait
            # on each other's increments
            cells[(j & (COPIES - 1)) * stride + g] += 1
        else:  # compare with the limits of this cell
            v = row[j]
            place = first[g]
            if inclusive:
                while place < first[g + 1] and ts[place] < v:
                    place += 1
            else:
                while place < first[g + 1] and ts[place] <= v:
                    place += 1
            hist[place] += 1
    for g in range(n_cells + 2):
        total = 0
        for copy in range(COPIES):
            total += cells[copy * stride + g]
        hist[first[g]] += total
    s = 0
    for c in range(m):
        s += hist[c]
        out[order[c]] = s


@numba.njit(cache=True)
def _flush(row: np.ndarray, limits: np.ndarray, pairing: np.ndarray, sample: np.ndarray, m: int, inclusive: bool,
           work: tuple[np.ndarray, ...], counts: np.ndarray) -> None:
    """counts[pairing[c], sample[c]] = #{j != self: row[j] < limits[c]} (<= with
    `inclusive`) for c < m: :func:`_row_counts_below` less the row's own distance, 0.
    `work`: (order, hist, found, keys, cells, first)."""
    order, hist, found, keys, cells, first = work
    _row_counts_below(row, limits, m, inclusive, order, hist, found, keys, cells, first)
    for c in range(m):
        counts[pairing[c], sample[c]] = found[c] - (1 if inclusive else limits[c] > 0)


@numba.njit(inline="always")
def _fetch_list(values: np.ndarray, indices: np.ndarray, row: int, entries: int) -> None:
    """Prefetch the first `entries` entries of one row of a list."""
    stop = min(entries, values.shape[1])
    # numba's stub gives an intrinsic's call the definition's signature: typingctx included, and the
    # arguments' Numba types where the call passes their values.
    for c in range(0, stop, 8):
        _prefetch(values[row], c)  # type: ignore[call-arg, arg-type]
    for c in range(0, stop, 16):
        _prefetch(indices[row], c)  # type: ignore[call-arg, arg-type]


@numba.njit(cache=True)
def _route(st: np.ndarray, p: int, i: int, r: int, cover_x: float, cover_y: float, need_x: np.ndarray,
           need_y: np.ndarray) -> None:
    """Leave sample i of pairing p (partner row r) to the hot-row pass whose walk can
    reach farther: the y-list's (x-rows) when it covers more than the x-list, else the
    x-list's (y-rows)."""
    if cover_y > cover_x:
        st[p, i] = 2
        need_x[i] = 1
    else:
        st[p, i] = 3
        need_y[r] = 1


@numba.njit(cache=True)
def _flush_work(n: int, n_perms: int) -> tuple[np.ndarray, ...]:
    """Workspace of :func:`_flush` for rows of n distances and up to n_perms limits."""
    return (np.empty(n_perms, dtype=np.int64), np.empty(n_perms + 1, dtype=np.int64),
            np.empty(n_perms, dtype=np.int64), np.empty(n, dtype=np.int32),
            np.empty(COPIES * (CELLS_PER_LIMIT * n_perms + 2), dtype=np.int32),
            np.empty(CELLS_PER_LIMIT * n_perms + 3, dtype=np.int64))


@numba.njit(cache=True)
def _probe_block(t0: int, t1: int, x_table: bool, xv: np.ndarray, xi: np.ndarray, xc: np.ndarray, yv: np.ndarray,
                 yi: np.ndarray, yc: np.ndarray, small: np.ndarray, inverses: np.ndarray, low_x: np.ndarray,
                 low_y: np.ndarray, dense_x: np.ndarray, dense_y: np.ndarray, need_probe_y: np.ndarray, k: int,
                 algorithm: int, st: np.ndarray, need_x: np.ndarray, need_y: np.ndarray, nx: np.ndarray,
                 ny: np.ndarray) -> None:
    """A probe pass (1 with `x_table`, else 2, of :func:`listed_neighbour_counts`) over the
    rows [t0, t1) of one side, the table side, for every pairing: their lists in a
    membership table (:func:`_build_members`: x-rows in pass 1, the y-rows of pass 2's
    samples in pass 2), each sample of a row walks the other side's list of its partner
    row (:func:`_walk`), walked lists fetched PREFETCH_AHEAD samples ahead.

    Pass 1 also routes every sample: to a hot-row pass when a lower bound of its k-th
    joint distance already lies beyond a list (:func:`_route`), to pass 2 when its x side
    is the sparser one (``st`` 1), else it walks its partner's y-list here. A walk the
    lists cannot settle leaves its sample to a hot-row pass; the others' counts go to nx,
    ny and their ``st`` to 0."""
    n = xv.shape[0]
    tv, ti, tc = (xv, xi, xc) if x_table else (yv, yi, yc)
    wv, wi, wc = (yv, yi, yc) if x_table else (xv, xi, xc)
    walked_counts = ny if x_table else nx
    table_counts = nx if x_table else ny
    inclusive = algorithm == 2
    bits = np.empty((MEMBER_BLOCK, (n + 63) // 64), dtype=np.uint64)
    pre = np.empty(bits.shape, dtype=np.int64)
    vals = np.empty((MEMBER_BLOCK, tv.shape[1]), dtype=tv.dtype)
    for t in range(t0, t1):
        if x_table or need_probe_y[t]:
            _build_members(tv[t], ti[t], bits, pre, vals, t - t0)
    best = np.empty(k, dtype=xv.dtype)
    todo = np.empty(MEMBER_BLOCK, dtype=np.int64)
    for p in range(small.shape[0]):
        to_walk = small[p] if x_table else inverses[p]  # a table row's partner on the walked side
        amap = inverses[p] if x_table else small[p]  # a walked index's row on the table side
        m = 0
        for t in range(t0, t1):
            if x_table:
                r = np.int64(small[p, t])
                cover_x = xc[t]
                cover_y = yc[r]
                low = max(low_x[t], low_y[r])
                if low > min(cover_x, cover_y) or (inclusive and low >= min(cover_x, cover_y)):
                    _route(st, p, t, r, cover_x, cover_y, need_x, need_y)  # eps >= low: beyond a list
                    continue
                if dense_x[t] > dense_y[r]:  # x is the sparser side: pass 2 walks the x-list
                    st[p, t] = 1
                    need_probe_y[r] = 1
                    continue
            elif not (need_probe_y[t] and st[p, inverses[p, t]] == 1):
                continue
            todo[m] = t
            m += 1
        for q in range(min(PREFETCH_AHEAD, m)):
            _fetch_list(wv, wi, np.int64(to_walk[todo[q]]), PREFETCH_ENTRIES)
        for q in range(m):
            if q + PREFETCH_AHEAD < m:
                _fetch_list(wv, wi, np.int64(to_walk[todo[q + PREFETCH_AHEAD]]), PREFETCH_ENTRIES)
            t = todo[q]
            w = np.int64(to_walk[t])
            i = t if x_table else w
            r = w if x_table else t
            ok, end, eps, eps_w, eps_t = _walk(wv[w], wi[w], wc[w], tc[t], (bits, pre, vals, t - t0, amap), k,
                                               algorithm, best)
            if not ok:
                _route(st, p, i, r, xc[i], yc[r], need_x, need_y)
                continue
            st[p, i] = 0
            if inclusive:
                walked_counts[p, i] = np.searchsorted(wv[w, :end], eps_w, side="right")
                table_counts[p, i] = np.searchsorted(tv[t], eps_t, side="right")
            else:
                walked_counts[p, i] = np.searchsorted(wv[w, :end], eps, side="left")
                table_counts[p, i] = np.searchsorted(tv[t], eps, side="left")


@numba.njit(cache=True)
def _hot_block(h0: int, h1: int, hv: np.ndarray, hc: np.ndarray, hd: np.ndarray, wv: np.ndarray, wi: np.ndarray,
               wc: np.ndarray, od: np.ndarray, perms: np.ndarray, small: np.ndarray, inverses: np.ndarray, x_hot: bool,
               need: np.ndarray, k: int, algorithm: int, st: np.ndarray, nx: np.ndarray, ny: np.ndarray) -> None:
    """A hot-row pass (3 or 4 of :func:`listed_neighbour_counts`) over the rows [h0, h1)
    of one side, held in cache for every pairing: x-rows (lists hv, hc, distances hd)
    with `x_hot`, else y-rows; (wv, wi, wc) the other side's lists, `od` its distances.

    Each sample left to this side (``st`` 2 for x-rows, 3 for y-rows) walks the other
    side's list of its partner row and looks its hot-side distances up in the row
    (:func:`_walk`); a hot-side count beyond the hot list is counted over the row for all
    the pairings at once (:func:`_flush`). A sample whose k-th joint neighbour lies beyond
    both lists is counted from its two full rows (``st`` 4)."""
    n = hv.shape[0]
    n_perms = perms.shape[0]
    inclusive = algorithm == 2
    code = 2 if x_hot else 3
    hot_counts = nx if x_hot else ny
    walked_counts = ny if x_hot else nx
    best = np.empty(k, dtype=hv.dtype)
    limits = np.empty((HOT_BLOCK, n_perms), dtype=np.float64)
    pairing = np.empty((HOT_BLOCK, n_perms), dtype=np.int64)
    samples = np.empty((HOT_BLOCK, n_perms), dtype=np.int64)
    pending = np.zeros(HOT_BLOCK, dtype=np.int64)
    work = _flush_work(n, n_perms)
    rows = np.empty((HOT_BLOCK, n), dtype=hv.dtype)
    load_rows(hd, n, h0, h1 - h0, rows)  # the block's rows, for every pairing
    other = np.empty((1, n), dtype=hv.dtype)
    gathered = np.empty(n, dtype=hv.dtype)
    scratch = np.empty(n if k > INSERTION_MAX_K else k, dtype=hv.dtype)
    todo = np.empty(HOT_BLOCK, dtype=np.int64)
    for p in range(n_perms):
        to_walk = small[p] if x_hot else inverses[p]  # a hot row's partner on the walked side
        amap = inverses[p] if x_hot else small[p]  # a walked index's column of the hot row
        m = 0
        for h in range(h0, h1):  # the block's samples of this pairing left to this side
            if need[h] and st[p, h if x_hot else np.int64(to_walk[h])] == code:
                todo[m] = h
                m += 1
        for q in range(m):  # their walks' first entries, fetched together
            _fetch_list(wv, wi, np.int64(to_walk[todo[q]]), HOT_PREFETCH)
        for q in range(m):
            h = todo[q]
            w = np.int64(to_walk[h])
            i = h if x_hot else w
            row = rows[h - h0]
            ok, end, eps, eps_w, eps_h = _walk(wv[w], wi[w], wc[w], np.inf, (row, amap), k, algorithm, best)
            if ok:
                limit = eps_h if inclusive else eps
                if inclusive:
                    walked_counts[p, i] = np.searchsorted(wv[w, :end], eps_w, side="right")
                else:
                    walked_counts[p, i] = np.searchsorted(wv[w, :end], eps, side="left")
                count = _listed_count(hv[h], hc[h], limit, inclusive)
                if count >= 0:
                    hot_counts[p, i] = count
                else:  # beyond the hot list: counted over the row with the other pairings' such samples
                    c = pending[h - h0]
                    limits[h - h0, c] = limit
                    pairing[h - h0, c] = p
                    samples[h - h0, c] = i
                    pending[h - h0] = c + 1
            else:  # beyond both lists: from the two full rows, x's in sample order and y's gathered by the pairing
                perm = perms[p]
                load_rows(od, n, w, 1, other)  # in order from memory, then gathered from cache
                if x_hot:
                    for j in range(n):
                        gathered[j] = other[0, perm[j]]
                    nx[p, i], ny[p, i] = row_counts(row, gathered, i, k, algorithm, scratch)
                else:
                    for j in range(n):
                        gathered[j] = row[perm[j]]
                    nx[p, i], ny[p, i] = row_counts(other[0], gathered, i, k, algorithm, scratch)
                st[p, i] = 4
    for h in range(h0, h1):
        m = pending[h - h0]
        if m > 0:
            _flush(rows[h - h0], limits[h - h0], pairing[h - h0], samples[h - h0], m, inclusive, work, hot_counts)


@numba.njit(parallel=True, cache=True)
def listed_neighbour_counts(xv: np.ndarray, xi: np.ndarray, xc: np.ndarray, yv: np.ndarray, yi: np.ndarray,
                            yc: np.ndarray, dx: np.ndarray, dy: np.ndarray, perms: np.ndarray, inverses: np.ndarray,
                            k: int, algorithm: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Neighbour counts of the pairings x[i] <-> y[perms[p, i]] from the neighbour lists
    of both marginals (:func:`neighbour_lists` of dx and dy) and the two matrices.

    Four passes, each over blocks of rows of one side with the pairings inside, so that
    what a block reuses stays in cache (a pairing's inverse, the block's tables or rows):

    1. probe, x side: each sample walks the list of its sparser side (the one whose
       DENSITY_RANK-th listed neighbour is farther: it reaches the k-th joint neighbour
       in fewer steps), here the y-list of its partner row, and finds each walked
       sample's x-distance in a membership table of its own x-list
       (:func:`_walk`); samples that walk their x-list are left to pass 2;
    2. probe, y side: the same for those, walking the x-list with a table of the partner
       row's y-list (passes 1 and 2: :func:`_probe_block`);
    3. x-rows: samples whose k-th joint neighbour lies beyond one of their lists (or is
       certain to: a lower bound of it already is) walk the y-list of the partner row
       and look dx up in their own row (:func:`_walk`), block rows held in cache; x
       counts beyond the x-list are counted over dx[i] for all pairings at once
       (:func:`_row_counts_below`);
    4. y-rows: the same from the y side, for the samples whose x-list reaches farther
       (passes 3 and 4: :func:`_hot_block`).

    A sample whose k-th joint neighbour lies beyond both lists is counted from its two
    full rows (:func:`mianalysis.estimators._kernels.row_counts`). ``inverses[p]`` is the
    inverse of ``perms[p]``; both may be uint16 (n <= 65,535, so that they take less
    cache) or wider integers. Counts equal those of
    :func:`mianalysis.estimators._kernels.permuted_neighbour_counts` exactly: only
    comparisons of distances read from the same matrices, nothing rounded, each sample's
    counts independent of the others (and of the number of threads).

    Returns nx, ny of shape (n_pairings, n_samples) and, per pairing, the numbers of
    samples counted in the hot-row passes and from full rows.
    """
    n = xv.shape[0]
    n_perms = perms.shape[0]
    small = perms.astype(inverses.dtype)
    nx = np.empty((n_perms, n), dtype=np.int64)
    ny = np.empty((n_perms, n), dtype=np.int64)
    # st[p, i]: 0 counted, 1 left to the y-side probe, 2 x-rows, 3 y-rows, 4 full rows
    st = np.zeros((n_perms, n), dtype=np.uint8)
    need_probe_y = np.zeros(n, dtype=np.uint8)  # y-rows with a sample for pass 2
    need_x = np.zeros(n, dtype=np.uint8)  # x-rows with a sample for pass 3
    need_y = np.zeros(n, dtype=np.uint8)  # y-rows with a sample for pass 4
    low_x = np.empty(n, dtype=np.float64)  # lower bounds of the k-th neighbour distances
    low_y = np.empty(n, dtype=np.float64)
    dense_x = np.empty(n, dtype=np.float64)
    dense_y = np.empty(n, dtype=np.float64)
    for i in range(n):
        low_x[i] = min(xv[i, min(k, xv.shape[1]) - 1], xc[i])
        low_y[i] = min(yv[i, min(k, yv.shape[1]) - 1], yc[i])
        dense_x[i] = xv[i, min(DENSITY_RANK, xv.shape[1] - 1)]
        dense_y[i] = yv[i, min(DENSITY_RANK, yv.shape[1] - 1)]
    n_member_blocks = (n + MEMBER_BLOCK - 1) // MEMBER_BLOCK
    for blk in prange(n_member_blocks):  # pass 1: probes walking y-lists, x-lists in tables
        i0 = blk * MEMBER_BLOCK
        _probe_block(i0, min(i0 + MEMBER_BLOCK, n), True, xv, xi, xc, yv, yi, yc, small, inverses, low_x, low_y,
                     dense_x, dense_y, need_probe_y, k, algorithm, st, need_x, need_y, nx, ny)
    for blk in prange(n_member_blocks):  # pass 2: probes walking x-lists, y-lists in tables
        r0 = blk * MEMBER_BLOCK
        r1 = min(r0 + MEMBER_BLOCK, n)
        if need_probe_y[r0:r1].any():
            _probe_block(r0, r1, False, xv, xi, xc, yv, yi, yc, small, inverses, low_x, low_y, dense_x, dense_y,
                         need_probe_y, k, algorithm, st, need_x, need_y, nx, ny)
    n_hot_blocks = (n + HOT_BLOCK - 1) // HOT_BLOCK
    # passes 3 and 4: blocks of x-rows and of y-rows in turn (each thread's share of the range holds both)
    for blk in prange(2 * n_hot_blocks):
        x_hot = blk % 2 == 0
        h0 = (blk // 2) * HOT_BLOCK
        h1 = min(h0 + HOT_BLOCK, n)
        if x_hot and need_x[h0:h1].any():
            _hot_block(h0, h1, xv, xc, dx, yv, yi, yc, dy, perms, small, inverses, True, need_x, k, algorithm, st, nx,
                       ny)
        elif not x_hot and need_y[h0:h1].any():
            _hot_block(h0, h1, yv, yc, dy, xv, xi, xc, dx, perms, small, inverses, False, need_y, k, algorithm, st, nx,
                       ny)
    looked = np.zeros(n_perms, dtype=np.int64)
    full = np.zeros(n_perms, dtype=np.int64)
    for p in range(n_perms):
        for i in range(n):
            looked[p] += st[p, i] == 2 or st[p, i] == 3
            full[p] += st[p, i] == 4
    return nx, ny, looked, full
