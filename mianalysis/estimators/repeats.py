"""Runs stored more than once: identical paired rows ``(x_i, y_i) == (x_j, y_j)``.

Every estimator of this package assumes independent runs of continuous parameters. A run
stored twice (the same rows of x and y repeated, as ``np.vstack([x0, x0])`` and
``np.vstack([y0, y0])`` make) is not a new run: a permutation test then compares the data,
whose copies stay paired, with shuffles that separate them, and its p-values are too small
(a copula test gave p <= 0.05 for 6 of 10 independent pairs); the projection bound fits its
directions and evaluates them on copies of the same runs (1.27 bits on independent
clients); KSG finds each copy at distance 0 of its twin. :func:`repeated_runs` counts such
rows in one hashing pass, and :func:`check_repeated_runs` is the one check that the
estimators (copula, bound, KSG) and the permutation tests call, before any estimate:

- copies (some feature takes a different value in every distinct run, so the repeats are
  whole runs stored again): a ValueError naming how many, which suggests dropping them;
- coincidences on a lattice (no feature tells the distinct runs apart: quantised or
  discrete samples, where independent runs coincide by chance): a
  :class:`RepeatedRunsWarning` (a UserWarning) naming how many; the estimate is made, and
  says little (KSG's ties warn too).

Only whole paired rows count: a value repeated within a column (an atom, such as a
parameter that is exactly 0 in many runs) or a row of x repeated with different rows of y
is data, not a stored copy. :func:`mianalysis.gaussian_mi` does not check (a bootstrap
resample repeats runs on purpose and is estimated by it); its permutation tests and the
command line's ``estimate`` do.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["repeated_runs", "check_repeated_runs", "runs_checked", "RepeatedRunsWarning"]

# Columns hashed first (evenly spaced over each side): rows that differ there differ, so for
# continuous data the full rows are never read; only rows whose sampled columns coincide are
# hashed in full, and only rows whose full keys coincide are compared value by value.
_SAMPLED_COLUMNS = 16
_ROW_BLOCK = 2048
_COLUMN_BLOCK = 64
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: combines the two sides' keys

# Set while a caller that checked the observed runs computes estimates of the same runs
# (shuffles of a permutation test): the estimators then skip their own check.
_CHECKED: ContextVar[bool] = ContextVar("mianalysis_repeated_runs_checked", default=False)


class RepeatedRunsWarning(UserWarning):
    """Some runs repeat an earlier run exactly (identical rows of x and y alike), and no
    feature tells the distinct runs apart: samples on a lattice, whose runs coincide by
    chance (:func:`check_repeated_runs`). Copies of continuous runs are refused instead."""


def _weights(d: int) -> np.ndarray:
    """Fixed odd 64-bit multipliers of a row's `d` values (the same for every call)."""
    return np.random.default_rng(0x5EED).integers(1, 2**63, size=d, dtype=np.uint64) | np.uint64(1)


def _row_keys(a: np.ndarray, rows: np.ndarray | None = None, columns: np.ndarray | None = None) -> np.ndarray:
    """A 64-bit key of each row of `a` (the rows `rows`, the columns `columns`): the values' bits
    times fixed multipliers, summed modulo 2^64. Equal rows (by value: -0.0 is read as 0.0)
    have equal keys whatever their position; unequal rows rarely do (they are compared after)."""
    n = a.shape[0] if rows is None else rows.size
    w = _weights(a.shape[1] if columns is None else columns.size)
    keys = np.empty(n, dtype=np.uint64)
    for start in range(0, n, _ROW_BLOCK):
        take = slice(start, start + _ROW_BLOCK) if rows is None else rows[start:start + _ROW_BLOCK]
        block = a[take] if columns is None else a[take][:, columns]
        # + 0.0: -0.0 becomes 0.0, so that equal values have equal bits (and a fresh float64 copy)
        bits = (np.asarray(block, dtype=np.float64) + 0.0).view(np.uint64)
        keys[start:start + bits.shape[0]] = bits @ w  # unsigned: wraps modulo 2^64, exact in any order
    return keys


def _shared_keys(keys: np.ndarray) -> np.ndarray:
    """Indices of the entries of `keys` whose value another entry has."""
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return np.flatnonzero(counts[inverse.ravel()] > 1)


def _sides(x: ArrayLike, y: ArrayLike | None) -> list[np.ndarray]:
    sides = [np.asarray(x)] if y is None else [np.asarray(x), np.asarray(y)]
    return [a.reshape(a.shape[0], -1) for a in sides]


def _repeats(sides: list[np.ndarray]) -> np.ndarray:
    """The rows (ascending) that repeat an earlier row of the paired `sides` exactly."""
    n = sides[0].shape[0]
    none = np.zeros(0, dtype=np.int64)
    if n < 2:
        return none
    keys = np.zeros(n, dtype=np.uint64)
    for a in sides:  # the sampled columns of each side
        columns = np.unique(np.linspace(0, a.shape[1] - 1, min(a.shape[1], _SAMPLED_COLUMNS)).round().astype(np.int64))
        keys = keys * _MIX + _row_keys(a, columns=columns)
    rows = _shared_keys(keys)
    if rows.size == 0:
        return none
    keys = np.zeros(rows.size, dtype=np.uint64)
    for a in sides:  # the candidates' full rows
        keys = keys * _MIX + _row_keys(a, rows=rows)
    shared = _shared_keys(keys)
    if shared.size == 0:
        return none
    # Rows with different keys differ. Group the rest by key (each group in row order) and
    # compare each row with its group's first, by value; a group whose rows are not all
    # equal (two rows of one key: about 2^-64 for a pair) is sorted out by value.
    rows, keys = rows[shared], keys[shared]
    order = np.argsort(keys, kind="stable")
    rows, keys = rows[order], keys[order]
    new = np.r_[True, keys[1:] != keys[:-1]]
    starts, group = np.flatnonzero(new), np.cumsum(new) - 1
    equal = np.ones(rows.size, dtype=bool)
    for start in range(0, rows.size, _ROW_BLOCK):
        these, firsts = rows[start:start + _ROW_BLOCK], rows[starts[group[start:start + _ROW_BLOCK]]]
        for a in sides:
            equal[start:start + these.size] &= (a[these] == a[firsts]).all(axis=1)
    repeats = [rows[~new & np.isin(group, group[~equal], invert=True)]]
    for g in np.unique(group[~equal]):  # a collision of keys: that group's distinct rows by value
        members = rows[group == g]
        joint = np.hstack([np.asarray(a[members], dtype=np.float64) + 0.0 for a in sides])
        _, first = np.unique(joint, axis=0, return_index=True)
        repeats.append(np.setdiff1d(members, members[first]))
    return np.sort(np.concatenate(repeats))


def repeated_runs(x: np.ndarray, y: np.ndarray | None = None) -> int:
    """How many rows repeat an earlier row exactly: the rows of the paired samples `x` (n, d_x)
    and `y` (n, d_y) (of `x` alone without `y`) minus the distinct rows among them.

    Two runs count as one repeated run when every value of x and of y is equal (-0.0 equals
    0.0). Values repeated within a column, or an x row paired with different y rows, do not
    count. One pass over 16 evenly spaced columns of each side; full rows are hashed only
    where those coincide, and compared value by value only where the hashes do.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.repeats import repeated_runs
    >>> rng = np.random.default_rng(0)
    >>> x0, y0 = rng.standard_normal((2, 50, 3))
    >>> repeated_runs(x0, y0), repeated_runs(np.vstack([x0, x0]), np.vstack([y0, y0]))
    (0, 50)
    >>> repeated_runs(np.vstack([x0, x0]), rng.standard_normal((100, 3)))  # x repeats, the pairs do not
    0
    """
    return int(_repeats(_sides(x, y)).size)


def _told_apart(sides: list[np.ndarray], distinct: np.ndarray) -> bool:
    """Whether some column of `sides` takes a different value in each of the rows `distinct`
    (continuous data: the repeats are copies), rather than none (a lattice). Stops at the
    first such column, which for continuous data is the first one."""
    for a in sides:
        for start in range(0, a.shape[1], _COLUMN_BLOCK):
            values = np.sort(np.asarray(a[distinct, start:start + _COLUMN_BLOCK], dtype=np.float64), axis=0)
            if (values[1:] != values[:-1]).all(axis=0).any():
                return True
    return False


@contextmanager
def runs_checked() -> Iterator[None]:
    """A context in which :func:`check_repeated_runs` does nothing: for a caller that has
    checked the observed runs and then estimates shuffles of them (a shuffle may pair a row
    of x repeated within x with a row of y repeated within y; the observed pairing is what
    the check is about), or that repeats runs on purpose (a bootstrap resample).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import gaussian_copula_mi
    >>> from mianalysis.estimators.repeats import runs_checked
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.standard_normal((2, 100, 2))
    >>> rows = rng.integers(0, 100, 100)   # a bootstrap resample: some runs twice or more
    >>> with runs_checked():
    ...     value = gaussian_copula_mi(x[rows], y[rows])
    """
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def check_repeated_runs(x: np.ndarray, y: np.ndarray, estimator: str, *, stacklevel: int = 3) -> None:
    """Refuse copies of runs, warn of runs that coincide on a lattice (module docstring).

    When rows of the paired samples `x` and `y` repeat an earlier row exactly
    (:func:`repeated_runs`): a ValueError naming how many and `estimator` (e.g. "the
    Gaussian copula estimate") if some feature takes a different value in every distinct
    run (the repeats are runs stored again), else a :class:`RepeatedRunsWarning` (its
    `stacklevel` that of :func:`warnings.warn`; 3: the caller of the caller). Nothing
    inside :func:`runs_checked`.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.repeats import check_repeated_runs
    >>> x = np.arange(6.0).reshape(3, 2)
    >>> check_repeated_runs(np.vstack([x, x]), np.vstack([x, x]), "the test")
    Traceback (most recent call last):
    ...
    ValueError: 3 of the 6 runs repeat an earlier run (identical rows of x and y alike): the test assumes independent runs, and a run stored twice makes its copies look dependent; drop the repeated runs (keep one row of each, in x and y alike)
    """
    if _CHECKED.get():
        return
    sides = _sides(x, y)
    repeats = _repeats(sides)
    if not repeats.size:
        return
    n = sides[0].shape[0]
    head = f"{repeats.size} of the {n} runs repeat an earlier run (identical rows of x and y alike)"
    distinct = np.setdiff1d(np.arange(n), repeats)
    if _told_apart(sides, distinct):
        raise ValueError(f"{head}: {estimator} assumes independent runs, and a run stored twice makes its copies look "
                         "dependent; drop the repeated runs (keep one row of each, in x and y alike)")
    warnings.warn(f"{head}, and no feature tells the {distinct.size} distinct runs apart: the samples lie on a "
                  f"lattice, where runs coincide; {estimator} assumes continuous samples and says little about such "
                  "data (drop the repeated runs if they are stored copies)", RepeatedRunsWarning, stacklevel=stacklevel)
