"""Numba kernel of :class:`mianalysis.dumps.sketch.Sketch`'s sparse sign projection.

Input coordinate i of a tensor goes to one row in each of the `nnz` blocks of the `m`
output rows (block j holds rows ``j * m // nnz`` to ``(j + 1) * m // nnz - 1``) with a
random sign. Row and sign come from one 64-bit integer hash of (key, i, j): the SplitMix64
output at position ``i * nnz + j + 1`` of the sequence started at `key` (Steele, Lea and
Flood 2014, "Fast splittable pseudorandom number generators", OOPSLA), the row by the
multiply-shift of its high 32 bits onto the block, the sign by its lowest bit. Nothing but
wrapping 64-bit integer arithmetic decides a row or a sign, so the projection is the same
on every machine; the sums run in float64 in a fixed order (coordinate, then block), so a
replica's sketch is the same bits whatever the batch it is sketched in.

The hashes are computed once per chunk of `CHUNK` coordinates and applied to every row of
the batch: memory beyond the input and output is O(CHUNK * nnz).
"""

from __future__ import annotations

import numba
import numpy as np

CHUNK = 1 << 14  # coordinates hashed at a time

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True)
def sparse_sign(x: np.ndarray, m: int, nnz: int, key: np.uint64, out: np.ndarray) -> None:
    """``out[b] += S x[b]`` for each row b of the C-contiguous 2-D array `x` (B, n): S is the
    unscaled sparse sign matrix (m, n) of `key` with `nnz` entries +-1 per column; `out`
    (B, m) float64."""
    n_rows, n = x.shape
    rows = np.empty(CHUNK * nnz, np.int64)
    signs = np.empty(CHUNK * nnz, np.float64)
    s30, s27, s31, s32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
    one = np.uint64(1)
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        k = 0
        for i in range(start, stop):
            for j in range(nnz):
                lo = j * m // nnz
                width = np.uint64((j + 1) * m // nnz - lo)
                z = key + np.uint64(i * nnz + j + 1) * GOLDEN
                z = (z ^ (z >> s30)) * MIX1
                z = (z ^ (z >> s27)) * MIX2
                z = z ^ (z >> s31)
                rows[k] = lo + np.int64(((z >> s32) * width) >> s32)
                signs[k] = 1.0 if (z & one) == one else -1.0
                k += 1
        for b in range(n_rows):
            k = 0
            for i in range(start, stop):
                v = np.float64(x[b, i])
                for j in range(nnz):
                    out[b, rows[k]] += signs[k] * v
                    k += 1
