"""The learning-rate search and the paired comparisons of the aggregation experiments.

One search for every rule of experiments/aggregation_headroom.py and
experiments/aggregation_headroom_quadratic.py: each rule's rate is chosen on one ladder,
stepping outwards from two starting rungs until the best rate tried has a tried (or failed)
neighbour on both sides, so that the choice is interior unless it sits at an end of the
ladder (which the tables flag). Seeds are paired across rules, so a rule is compared with
FedAvg through the per-seed differences.
"""

from __future__ import annotations

import numpy as np

from mianalysis.analysis.intervals import normal_interval

__all__ = ["search", "first_round", "paired"]


def search(run, ladder, start, *, score, summary):
    """The rate of `ladder` whose result scores best, tried outwards from `start` until the
    best has a tried or failed neighbour on both sides.

    Parameters
    ----------
    run : callable
        ``run(lr) -> dict`` of per-seed arrays; raises ValueError where the rate fails
        (diverged, or did not train).
    ladder : list of float
        The rates, increasing.
    start : list of float
        Rungs of `ladder` tried first.
    score : callable
        ``score(result) -> tuple``, higher is better (ties compare the next entries).
    summary : callable
        ``summary(result) -> dict`` of the numbers every tried rate records (`result` None
        for a failed rate: the same keys, NaN values).

    Returns
    -------
    best : dict or None
        ``{"lr": rate, **run(rate)}`` of the best rate; None where every rate failed.
    tried : list of dict
        One entry per rate tried, in the order tried: ``{"lr", **summary, "diverged"}``
        ("diverged": the failure's message, "" where it trained).
    choice : str
        "interior", "lowest rung of the ladder", "highest rung of the ladder" or "all failed".
    """
    results, tried = {}, []

    def ranked(i):
        return (-np.inf,) if results[i] is None else tuple(score(results[i]))

    def attempt(i):
        try:
            results[i] = {"lr": ladder[i], **run(ladder[i])}
            tried.append({"lr": ladder[i], **summary(results[i]), "diverged": ""})
        except ValueError as exc:
            results[i] = None
            tried.append({"lr": ladder[i], **summary(None), "diverged": str(exc)})

    for lr in start:
        attempt(ladder.index(lr))
    while True:
        fine = [i for i in results if results[i] is not None]
        if not fine:  # everything tried failed: step down
            lower = min(results) - 1
            if lower < 0:
                return None, tried, "all failed"
            attempt(lower)
            continue
        best = max(fine, key=ranked)
        missing = [j for j in (best - 1, best + 1) if 0 <= j < len(ladder) and j not in results]
        if not missing:
            break
        attempt(missing[0])
    choice = ("lowest rung of the ladder" if best == 0 else
              "highest rung of the ladder" if best == len(ladder) - 1 else "interior")
    return results[best], tried, choice


def first_round(hit):
    """Per seed (rows of the boolean array `hit`, seeds x rounds): the first round where it
    holds, NaN where it never does."""
    hit = np.asarray(hit, dtype=bool)
    return np.where(hit.any(1), hit.argmax(1), np.nan).astype(float)


def paired(diff, level=0.95):
    """Mean of paired differences (NaN entries dropped) and its t interval over seeds at
    `level`: (mean, low, high, n)."""
    diff = np.asarray(diff, dtype=float)
    diff = diff[np.isfinite(diff)]
    if diff.size < 2:
        return (float(diff.mean()) if diff.size else float("nan")), float("nan"), float("nan"), int(diff.size)
    low, high = normal_interval(diff.mean(), diff.std(ddof=1) / np.sqrt(diff.size), level, df=diff.size - 1)
    return float(diff.mean()), low, high, int(diff.size)
