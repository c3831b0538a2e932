"""Exact rescaling by powers of two, for data of any finite magnitude.

Multiplying by a power of two is exact in binary floating point unless a result leaves the
normal range, and sums, differences, square roots and comparisons commute with it. The
estimators and distances use it where squares or sums could overflow (values beyond
~1e154) or underflow (below ~1e-154): on data inside the safe range nothing is rescaled, so
results there are unchanged to the bit.
"""

from __future__ import annotations

import numpy as np

# Squares of values in [2^-450, 2^450] and their sums over up to 2^100 terms stay normal.
SAFE_LOW = 2.0**-450
SAFE_HIGH = 2.0**450
# float32 keeps its relative precision (2^-24) for distances between values whose largest magnitude lies here.
FLOAT32_RANGE = (2.0**-60, 2.0**60)


def pow2_scale(m):
    """The power of two 2^e with m / 2^e in [1, 2) for m > 0 (elementwise), 1 where m == 0."""
    m = np.asarray(m, dtype=np.float64)
    _, exponent = np.frexp(m)
    return np.where(m > 0, np.ldexp(1.0, exponent - 1), 1.0)


def rescale_extreme_columns(a, *, copy=True):
    """`a` (2-D, finite) with each column whose largest magnitude is beyond SAFE_HIGH or below
    SAFE_LOW divided by a power of two near it (exact), so that sums and squares of the column
    neither overflow nor underflow; other columns keep their bits. `copy`: a copy where a
    column is rescaled (`a` itself where none is); else `a` is rescaled in place."""
    top = np.maximum(a.max(axis=0), -a.min(axis=0))  # max |a| without a full-size temporary
    extreme = (top > SAFE_HIGH) | (top < SAFE_LOW)
    if extreme.any():
        if copy:
            a = a.copy()
        a[:, extreme] /= pow2_scale(top[extreme])
    return a


def column_std(a, factor=1.0):
    """`factor` times the standard deviation (ddof=0) of each column of the finite 2-D array
    `a`, without overflow or underflow: columns whose plain standard deviation is not in
    [SAFE_LOW, SAFE_HIGH] are recomputed after dividing by a power of two near their largest
    absolute value (and `factor` is applied before scaling back). Elsewhere the result is
    ``factor * a.std(axis=0)`` to the bit."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        std = a.std(axis=0)
    redo = ~((std >= SAFE_LOW) & (std <= SAFE_HIGH))
    std = factor * std
    if redo.any():
        cols = a[:, redo]
        scale = pow2_scale(np.abs(cols).max(axis=0))
        with np.errstate(under="ignore"):
            std[redo] = (factor * (cols / scale).std(axis=0)) * scale
    return std


# Columns below which column_ranges reduces a transposed copy (NumPy reduces a narrow C-ordered array along
# axis 0 a few values per step: 53 us for 2,000 x 10 float64, against 13 us for a transposed copy and its rows).
NARROW_COLUMNS = 64
RANGE_ROWS = 8192  # rows transposed at a time


def column_ranges(a):
    """(minimum, maximum) of each column of the 2-D array `a`: ``a.min(axis=0)`` and
    ``a.max(axis=0)`` exactly (NaN propagates the same way), faster for arrays of few
    columns, whose rows are reduced in transposed blocks of RANGE_ROWS rows."""
    a = np.asarray(a)
    if a.shape[1] >= NARROW_COLUMNS or a.shape[0] == 0 or not a.flags.c_contiguous:
        return a.min(axis=0), a.max(axis=0)
    low = high = None
    for r0 in range(0, a.shape[0], RANGE_ROWS):
        block = np.ascontiguousarray(a[r0:r0 + RANGE_ROWS].T)
        b_low, b_high = block.min(axis=1), block.max(axis=1)
        low = b_low if low is None else np.minimum(low, b_low)
        high = b_high if high is None else np.maximum(high, b_high)
    return low, high

