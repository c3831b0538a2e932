"""Parameters that move in very few runs, held at their most common value for the MI.

A parameter that keeps one value in every run but a few (a unit of the network that
fires for the rarest inputs only) varies by the constant rule (:func:`varying_columns`)
once a rare run is sampled. Several such parameters that move in the same runs span fewer
dimensions than their number, so the client's covariance is singular and its Gaussian
estimates become Ledoit-Wolf shrinkage numbers without a verdict. The MI such a block of
parameters can carry is bounded by its entropy, which is small: outside the R runs in which
one of them moves, the block takes its modal value, so its entropy is at most
``h(R / n) + (R / n) log2 R`` bits (h the binary entropy: which runs move, then which of at
most R values). Since ``I(X, X'; Y, Y') <= I(X; Y) + H(X') + H(Y')``, holding those
columns at their modal value changes the MI of a client pair by at most the sum of the two
clients' bounds, which the analysis reports in each MI row's note.

``analyze(..., min_moving_runs=m)`` applies the rule to the samples its MI estimators see
(distances between clients use every parameter); the default ``m = 1`` holds nothing.
Held parameters are not constant by design: where every varying parameter of a client is
held, nothing of it is left to estimate from, and its pairs' MI rows have no estimate (NaN,
:func:`mianalysis.analysis.reading.held_note`), never the exact 0 of a client whose
parameters are constant across runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from ..._internal.validation import check_int, varying_columns

__all__ = ["RareMovers", "rare_movers", "hold_rare_movers", "movers_entropy_bound", "check_min_moving_runs"]


@dataclass(frozen=True)
class RareMovers:
    """The parameters of one client's samples that move in fewer than `min_runs` runs.

    Attributes
    ----------
    columns : ndarray of bool
        Per column: it varies (:func:`varying_columns`) but differs from its most common
        value in fewer than `min_runs` runs.
    moving_runs : int
        In how many runs at least one of those columns differs from its most common value.
    n_runs : int
    bound_bits : float
        The bound on their joint entropy, hence on the MI they can add to any pair the
        client is in (module docstring); 0 where no column is held.
    values : ndarray
        The most common value of each held column, in column order.
    """

    columns: np.ndarray
    moving_runs: int
    n_runs: int
    bound_bits: float
    values: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def count(self) -> int:
        """How many columns are held."""
        return int(self.columns.sum())


def check_min_moving_runs(value: int, n_runs: int, name: str = "min_runs", runs: str = "") -> int:
    """`value` as an int, or an error naming `name` unless it is at least 1 and at most half
    of `n_runs` (or 1): a parameter moving in at least half the runs has no most common
    value to hold it at. `runs`: how the message names the runs (default "the N runs")."""
    value = check_int(value, name, low=1)
    if n_runs and value > max(n_runs // 2, 1):
        raise ValueError(f"{name}={value} is more than half of {runs or f'the {n_runs} runs'}: a parameter that "
                         "moves in at least half the runs has no most common value to hold it at")
    return value


def movers_entropy_bound(moving_runs: int, n_runs: int) -> float:
    """``h(R / n) + (R / n) log2 R`` bits: the most entropy a block of parameters can have
    that takes one value in all of `n_runs` runs but `moving_runs` (R).

    Examples
    --------
    >>> from mianalysis.analysis.diagnostics.movers import movers_entropy_bound
    >>> round(movers_entropy_bound(1, 26400), 6), movers_entropy_bound(0, 26400)
    (0.000611, 0.0)
    """
    r, n = int(moving_runs), int(n_runs)
    if not 0 <= r <= n or n < 1:
        raise ValueError(f"moving_runs must be in [0, n_runs]; got {r} of {n}")
    if r == 0:
        return 0.0
    share = r / n
    binary = -share * np.log2(share) - (0.0 if r == n else (1 - share) * np.log2(1 - share))
    return float(binary + share * np.log2(r))


def rare_movers(samples: ArrayLike, min_runs: int) -> RareMovers:
    """The columns of `samples` (runs x parameters) that vary but leave their most common
    value in fewer than `min_runs` runs (:class:`RareMovers`).

    A column that leaves its most common value in fewer than half the runs has that value
    as its middle order statistic (the ``n // 2``-th smallest), so the count is that of the
    runs that differ from it: one partial sort per column. `min_runs` must be at most half
    the runs (beyond, "most common" no longer fixes the middle value).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.diagnostics.movers import rare_movers
    >>> rng = np.random.default_rng(0)
    >>> samples = np.column_stack([rng.standard_normal(100), np.zeros(100), np.zeros(100), np.zeros(100)])
    >>> samples[7, 1] = samples[7, 2] = 0.5  # two columns that move in run 7 alone
    >>> samples[[3, 9], 3] = 1.0  # one that moves in two runs
    >>> movers = rare_movers(samples, 2)
    >>> movers.columns.tolist(), movers.moving_runs, round(movers.bound_bits, 4)
    ([False, True, True, False], 1, 0.0808)
    >>> rare_movers(samples, 3).columns.tolist()
    [False, True, True, True]
    """
    a = np.asarray(samples)
    if a.ndim != 2:
        raise ValueError(f"`samples` must be a 2-D array of runs x parameters; got {a.ndim} dimensions")
    n = a.shape[0]
    min_runs = check_min_moving_runs(min_runs, n)
    varying = varying_columns(a)
    held = np.zeros(a.shape[1], dtype=bool)
    if min_runs == 1 or not varying.any():
        return RareMovers(held, 0, n, 0.0)
    cols = np.flatnonzero(varying)
    columns = a[:, cols]
    middle = np.partition(columns, n // 2, axis=0)[n // 2]
    moved = columns != middle
    rare = moved.sum(axis=0) < min_runs
    held[cols[rare]] = True
    runs = int(moved[:, rare].any(axis=1).sum())
    return RareMovers(held, runs, n, movers_entropy_bound(runs, n), middle[rare])


def hold_rare_movers(samples: np.ndarray, min_runs: int) -> tuple[np.ndarray, RareMovers]:
    """`samples` with their rare movers (:func:`rare_movers`) set to their most common value
    in every run (a copy where any is held, else `samples` itself), and the movers."""
    movers = rare_movers(samples, min_runs)
    if not movers.count:
        return samples, movers
    held = np.array(samples, copy=True)
    held[:, movers.columns] = movers.values  # each column's most common value, found by rare_movers
    return held, movers
