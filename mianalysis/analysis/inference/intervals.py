"""Confidence intervals for MI and distance estimates, and for their change between checkpoints.

Runs are iid samples of the clients' joint parameter vector, so every interval resamples
runs (rows of x and y together), never parameters. All intervals have the form
``estimate +- z * se`` with a standard error obtained as follows (z is Student's t
quantile with B - 1 degrees of freedom when the se comes from B resamples, the normal
quantile otherwise):

- ``"wishart"`` (the level interval of a Gaussian or Gaussian copula MI estimate, the
  default): the standard error of :func:`mianalysis.estimators.gaussian_se.gaussian_mi_se`,
  exact Wishart moments of the log-determinants plus a canonical-correlation term, of the
  samples (the copula's: of their normal scores), with the normal quantile. Chosen by its
  coverage of gaussian-sgd's exact MI (``experiments/interval_coverage.py``;
  docs/concepts/intervals.md): at n = 2.2 d the bootstrap sd below is 1.6-5.3 times the
  estimate's sd (its resamples hold about 63 % distinct runs, and a log-determinant of so
  few is far more variable), so its intervals cover always and include 0 where the
  analytic null rejects; the Wishart se is at least the exact null sd (equal for
  independent data once the bias correction leaves no canonical correlation), so an
  interval that excludes 0 comes with a small :func:`mianalysis.gaussian_mi_null` p-value. ``"asymptotic"``, the delta method on the
  canonical correlations (``sum r_i^2 / n`` nats^2), is the alternative the experiment
  measures. A Ledoit-Wolf shrinkage estimate has no such formula: its level interval stays
  the bootstrap's, and so do the changes between checkpoints (below), which need
  resamples paired across checkpoints. The registry entry's ``level_interval`` chooses
  (None: the resamples' sd, as tables written before it).
- ``"bootstrap"`` (changes of Gaussian and Gaussian copula MI; their level intervals with
  ``level_interval`` None or a shrinkage estimate): the sd of the estimator over `n_resamples` bootstrap
  resamples of the runs (Efron and Tibshirani 1993, *An Introduction to the Bootstrap*,
  ch. 6 and 13). The normal interval around the estimate is used rather than bootstrap
  percentiles because the bias-corrected log-det estimator, evaluated on resamples that
  hold about 63 % distinct runs, is shifted relative to the full-sample estimate; the sd is
  hardly affected by that shift. The Gaussian copula estimate ranks each resample again
  (:func:`mianalysis.gaussian_copula_mi` of the resample): the bootstrap must repeat the
  whole estimator, and the ranking is part of it (outside Gaussian copulas it adds to the
  estimator's variance). A resample's only ties are the copies of a duplicated run, which
  share one average rank, so one normal score, exactly as the estimator treats tied values.
  Above ``WEIGHTED_MIN_DIMS`` joint dimensions a resample's estimate is computed from its
  distinct runs, each weighted by its copies (the same Gram matrix, summed in another
  order: ~63 % of the rows), and the copula's ranks of the resample from one sort of each
  column (:class:`ResampleScores`: the same ranks and scores, bit for bit).
- ``"half-subsampling"`` (KSG MI, and any registered estimator that asks for it): the delete-d jackknife with d = n/2 (Shao and Wu 1989,
  Ann. Statist. 17(3), 1176-1197): the estimator on `n_resamples` random halves of the
  runs, drawn without replacement, whose variance *is* the variance estimate (the
  jackknife factor (n - d) / d is 1 for halves). Bootstrap resamples would hold duplicate
  runs, zero distances that the k-NN counts of KSG (Kraskov, Stoegbauer, Grassberger 2004,
  Phys. Rev. E 69, 066138) read as infinite density, biasing it upward; halves have none.
  A half costs about 1/4 of a full KSG estimate (its cost grows as n^2).
- ``"normal"`` (distances and their changes): a distance row is the mean over runs of the
  paired distance, so its se is the per-run sd / sqrt(n) (central limit theorem): exact
  enough at the hundreds of runs an analysis uses, and free. The mean cosine of updates
  (``cosine_update``) and its change use Student's t with runs - 1 degrees of freedom
  and are clipped to the range they can take, [-1, 1] and [-2, 2].

The change between two checkpoints is paired: the same runs at both (the same bootstrap
indices or halves, or the per-run difference of distances), so that what the runs share
cancels. Where an estimator's registry entry asks for it (``change_interval="influence"``:
the built-in Gaussian and copula estimators) and the runs number at least
:data:`INFLUENCE_MIN_RUNS_PER_DIMENSION` times the pair's joint dimension, the se of an MI
change is instead the delta method's, ``sd(h_t - h_{t-1}) / sqrt(n)`` over the runs'
influence values at the two checkpoints (:func:`mi_influence`;
:func:`mianalysis.estimators.gaussian_se.influence_change_se`), with the normal quantile:
one pass over the runs instead of 20 resampled estimates, and chosen by its coverage of
exact changes (``experiments/change_coverage.py``, docs/concepts/intervals.md): there it
covers 91-99.5 % of exact changes at 95 % with 0.5-3.5 % false verdicts where nothing
changes, and the bootstrap's intervals are 1.06-1.62 times wider (more power for the same
error); closer to n = 2 d it falls short (88 % coverage, 6.5 % false verdicts at 2.2 d) and
the bootstrap is kept (:func:`change_method`). :func:`trend_verdict` turns the change's interval into "rising", "falling" or
"no detectable change", and makes no verdict from a Ledoit-Wolf shrinkage estimate (it
estimates the MI of a shrunk covariance, not the MI).

Every change also has a standard error and a two-sided p-value for "no change"
(:func:`change_test`): the se behind its interval and ``2 P(T > |change| / se)`` with T
the same reference law as the interval's quantile (Student's t with B - 1 degrees of
freedom for MI, normal for distances), so that p <= 1 - level exactly when the interval
excludes 0 and the per-step verdict and the p-value never disagree. A table that stored
only the interval gives them back by the normal approximation ``se = (high - low) / (2
z)`` (:func:`se_from_interval`; t when the number of resamples is known). The interval is
a normal interval around the estimate, not a percentile interval, so this inverts it
exactly; the p-value is as approximate as the interval's normality (a bootstrap or
half-sample se of a log-determinant estimate near n ~ 2d is noisy, and the p-value then
is too). :mod:`mianalysis.analysis.inference.familywise` turns the p-values into verdicts that
control the error over a family of steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr, ndtri, stdtr, stdtrit

from ..._internal.normal_interval import check_level, normal_interval
from ..._internal.validation import check_choice, check_int, check_random_state, varying_columns
from ...estimators.copula import twice_rank_scores
from ...estimators.registry import INTERVALS, LEVEL_INTERVALS, Estimator, get_estimator

__all__ = ["DISTANCE_METHOD", "UPDATE_METHOD", "INFLUENCE_MIN_RUNS_PER_DIMENSION", "change_method", "mi_influence",
           "interval_method", "level_method", "level_se", "mean_interval",
           "mi_interval", "mi_replicates", "normal_interval", "resample_indices", "trend_verdict", "change_test",
           "se_from_interval", "change_df"]

DISTANCE_METHOD = "normal"
# A mean cosine of updates: Student's t with runs - 1 degrees of freedom, clipped to [-1, 1].
UPDATE_METHOD = "t, clipped"
METHODS = INTERVALS + LEVEL_INTERVALS  # every level-interval method of mi_interval
#: Runs per joint dimension from which the change of an estimate with
#: ``change_interval="influence"`` takes the delta method's se (:func:`change_method`).
INFLUENCE_MIN_RUNS_PER_DIMENSION = 4.0
NO_CHANGE = "no detectable change"
SHRINKAGE = "not made: shrinkage estimate"
# A lower bound may rise while the MI it bounds falls (it captures a varying share of it):
# its change is no verdict on the MI's.
BOUND = "not made: lower bound (its change is not the MI's)"


def interval_method(estimator: str) -> str:
    """How the runs are resampled for `estimator`'s interval: "bootstrap" or
    "half-subsampling" (its registry entry's ``interval``).

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import interval_method
    >>> interval_method("gaussian"), interval_method("ksg")
    ('bootstrap', 'half-subsampling')
    """
    return get_estimator(estimator).interval


def level_method(estimator: str) -> str:
    """How the level interval of a plain `estimator` estimate gets its se: the registry
    entry's ``level_interval`` ("wishart", "asymptotic") or, without one, its resampling
    :func:`interval_method`. A Ledoit-Wolf shrinkage estimate always uses the resamples.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import level_method
    >>> level_method("gaussian"), level_method("copula"), level_method("ksg")
    ('wishart', 'wishart', 'half-subsampling')
    """
    entry = get_estimator(estimator)
    return entry.level_interval or entry.interval


def change_method(estimator: str, n_runs: int | None = None, n_features: int | None = None) -> str:
    """How the interval of a change of a plain `estimator` estimate gets its se: "influence"
    where its registry entry's ``change_interval`` asks for it (with a ``level_interval``
    formula) and `n_runs` is at least
    :data:`INFLUENCE_MIN_RUNS_PER_DIMENSION` times the pair's joint dimension `n_features`
    (both None: the rule, as a table's sidecar records it), else its resampling
    :func:`interval_method`.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import change_method
    >>> change_method("gaussian", 400, 100), change_method("gaussian", 300, 100), change_method("ksg", 400, 100)
    ('influence', 'bootstrap', 'half-subsampling')
    >>> change_method("copula")
    'influence where n_runs >= 4 x the joint dimension, else bootstrap'
    """
    entry = get_estimator(estimator)
    if entry.change_interval is None or entry.level_interval is None:  # resamples made for the level serve too
        return entry.interval
    if n_runs is None or n_features is None:
        return f"{entry.change_interval} where n_runs >= {INFLUENCE_MIN_RUNS_PER_DIMENSION:g} x the joint dimension, " \
               f"else {entry.interval}"
    return entry.change_interval if n_runs >= INFLUENCE_MIN_RUNS_PER_DIMENSION * n_features else entry.interval


class InfluenceValues:
    """The runs' influence values (bits) on a plain estimate at one checkpoint
    (:func:`mi_influence`): what the delta method's se of its change needs."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.float64)

    def change_se(self, before: InfluenceValues) -> float:
        """The se of the change of the estimate since `before` (the same runs)."""
        from ...estimators.gaussian_se import influence_change_se

        return influence_change_se(before.values, self.values)


def mi_influence(x: np.ndarray, y: np.ndarray, estimator: str, *,
                 transformed: tuple[np.ndarray, np.ndarray] | None = None) -> InfluenceValues:
    """The runs' influence values (bits) on `estimator`'s plain estimate of `x`, `y`
    (:func:`mianalysis.estimators.gaussian_se.gaussian_mi_influence` of the samples after
    the estimator's ``transform``: the copula's normal scores), their constant columns
    dropped as by the estimate (all 0 when one side has none left). `transformed`: `x` and
    `y` after the transform, where the caller has made them already (then `x` and `y` must
    have no constant column: they only say which columns vary).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.inference.intervals import mi_influence
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((400, 1))
    >>> before = mi_influence(x, 0.6 * x + 0.8 * rng.standard_normal((400, 1)), "gaussian")
    >>> after = mi_influence(x, 0.8 * x + 0.6 * rng.standard_normal((400, 1)), "gaussian")
    >>> round(after.change_se(before), 3)
    0.072
    """
    from ...estimators.gaussian_se import gaussian_mi_influence

    entry = get_estimator(estimator)
    if not entry.covariance:
        raise ValueError(f"influence values are those of Gaussian log-determinant estimates; estimator {estimator!r} "
                         "is not one")
    keep_x, keep_y = varying_columns(x), varying_columns(y)
    if not keep_x.any() or not keep_y.any():  # the estimate is exactly 0, whatever the runs
        return InfluenceValues(np.zeros(x.shape[0]))
    x, y = x[:, keep_x], y[:, keep_y]
    if entry.transform is not None:
        x, y = _transformed(x, y, entry.transform, transformed)
    return InfluenceValues(gaussian_mi_influence(x, y))


def _transformed(x: np.ndarray, y: np.ndarray, transform: Callable[[np.ndarray], np.ndarray],
                 made: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """x and y after `transform`, or `made` (their transform made by the caller) checked to match their shapes."""
    if made is None:
        return transform(x), transform(y)
    if made[0].shape != x.shape or made[1].shape != y.shape:
        raise ValueError(f"`transformed` has shapes {made[0].shape} and {made[1].shape}; the samples without their "
                         f"constant columns have {x.shape} and {y.shape}: pass the transform of the varying columns")
    return made


def level_se(x: np.ndarray, y: np.ndarray, estimator: str, method: str | None = None, *,
             transformed: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """The se (bits) behind the level interval of `estimator`'s plain estimate of `x`, `y`
    by a formula `method` ("wishart" or "asymptotic"; None: :func:`level_method`), of the
    samples after the estimator's ``transform`` (the copula's normal scores) and without
    their constant columns (0.0 when one side has none left: the estimate is exactly 0). A
    ValueError for a method that is not a formula. `transformed`: as for :func:`mi_influence`.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.inference.intervals import level_se
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((400, 1))
    >>> y = 0.6 * x + 0.8 * rng.standard_normal((400, 1))
    >>> round(level_se(x, y, "gaussian"), 3), round(level_se(x, y, "gaussian", "asymptotic"), 3)
    (0.046, 0.046)
    """
    from ...estimators.gaussian_se import gaussian_mi_se
    from ...estimators.registry import LEVEL_INTERVALS

    entry = get_estimator(estimator)
    method = level_method(estimator) if method is None else method
    if method not in LEVEL_INTERVALS or not entry.covariance:
        raise ValueError(f"`method` {method!r} of estimator {estimator!r} is not a formula: one of "
                         f"{list(LEVEL_INTERVALS)} for a covariance estimator")
    x, y = x[:, np.ptp(x, axis=0) > 0], y[:, np.ptp(y, axis=0) > 0]
    if x.shape[1] == 0 or y.shape[1] == 0:  # the estimate is exactly 0 (I(c; Y) = 0)
        return 0.0
    if entry.transform is not None:
        x, y = _transformed(x, y, entry.transform, transformed)
    return gaussian_mi_se(x, y, method=method)


def change_test(change: float, se: float, df: int | None = None) -> float:
    """Two-sided p-value of "no change" for an estimated `change` with standard error `se`:
    ``2 P(T > |change| / se)``, T Student's t with `df` degrees of freedom (the se comes
    from `df` + 1 resamples) or normal (`df` None), the law of the interval's quantile
    (:func:`normal_interval`), so that ``p <= 1 - level`` exactly when the interval at
    `level` excludes 0. A zero se gives 0 for a non-zero change and 1 for none; a missing
    (NaN) change or se gives NaN.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import change_test
    >>> round(change_test(1.96, 1.0), 4), round(change_test(2.262, 1.0, df=9), 4)
    (0.05, 0.05)
    """
    change, se = float(change), float(se)
    if not (np.isfinite(change) and np.isfinite(se)):
        return np.nan
    if se == 0:
        return 0.0 if change != 0 else 1.0
    z = -abs(change) / se
    return float(2 * (ndtr(z) if df is None else stdtr(df, z)))


def se_from_interval(low: float, high: float, level: float = 0.95, df: int | None = None) -> float:
    """The standard error behind a normal interval ``(low, high)`` at `level`: ``(high -
    low) / (2 q)``, q the normal quantile, or Student's t with `df` degrees of freedom (see
    :func:`normal_interval`). How a table that stored only intervals gives back each
    change's se (:func:`mianalysis.analysis.table.complete_row`); NaN without an interval.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import normal_interval, se_from_interval
    >>> round(se_from_interval(*normal_interval(1.0, 0.5, 0.9), level=0.9), 12)
    0.5
    """
    low, high = float(low), float(high)
    if not (np.isfinite(low) and np.isfinite(high)):
        return np.nan
    q = 0.5 + check_level(level, "level") / 2
    return float((high - low) / (2 * (ndtri(q) if df is None else stdtrit(df, q))))


def change_df(quantity: str, ci_resamples: Mapping[str, Any] | None) -> int | None:
    """Degrees of freedom of the t quantile behind the interval of a row of `quantity`:
    resamples - 1 for an MI quantity ("mi_E" or "delta_mi_E") whose estimator's resamples
    `ci_resamples` records (a table's ``settings["ci_resamples"]``), None (normal) for
    distances and where the resamples are unknown.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import change_df
    >>> change_df("delta_mi_ksg", {"ksg": 10}), change_df("delta_euclidean", {"ksg": 10})
    (9, None)
    """
    name = quantity.removeprefix("delta_")
    if not name.startswith("mi_") or not isinstance(ci_resamples, Mapping):
        return None
    n = ci_resamples.get(name[3:])
    return int(n) - 1 if isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 2 else None


def mean_interval(values: ArrayLike, level: float = 0.95, *, t: bool = False,
                  bounds: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """Mean of per-run `values` and its interval (se = sd / sqrt(n)): the interval of a mean
    distance, or of its paired change (`values` = per-run differences).

    Parameters
    ----------
    values : array-like of shape (n,)
    level : float, default=0.95
    t : bool, default=False
        Student's t quantile with n - 1 degrees of freedom instead of the normal one (the
        normal quantile under-covers at a few runs).
    bounds : (float, float), optional
        The range the mean can take (``(-1, 1)`` for a mean cosine): the interval is
        clipped to it.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import mean_interval
    >>> [round(v, 3) for v in mean_interval([1.0, 2.0, 3.0, 4.0], 0.95)]
    [2.5, 1.235, 3.765]
    >>> [round(v, 3) for v in mean_interval([0.2, 0.9, 1.0, 1.0], 0.95, t=True, bounds=(-1, 1))]
    [0.775, 0.16, 1.0]
    """
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if not np.isfinite(mean) or values.size < 2:
        return mean, np.nan, np.nan
    low, high = normal_interval(mean, values.std(ddof=1) / np.sqrt(values.size), level,
                                df=values.size - 1 if t else None)
    if bounds is not None:
        low, high = float(np.clip(low, *bounds)), float(np.clip(high, *bounds))
    return mean, low, high


def resample_indices(n: int, n_resamples: int, estimator: str,
                     random_state: int | np.random.Generator | None = 0) -> np.ndarray:
    """Row indices of the resamples for `estimator`: (n_resamples, n) bootstrap draws with
    replacement ("gaussian", "copula"), or (n_resamples, n // 2) random halves without
    ("ksg"), as its :func:`interval_method`.
    The same indices serve every checkpoint, which makes changes paired.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import resample_indices
    >>> resample_indices(10, 3, "ksg").shape
    (3, 5)
    """
    return _resample_indices(n, n_resamples, interval_method(estimator), random_state)


def _resample_indices(n: int, n_resamples: int, method: str,
                      random_state: int | np.random.Generator | None) -> np.ndarray:
    """:func:`resample_indices` of a resampling `method` ("bootstrap" or "half-subsampling")."""
    n = check_int(n, "n", low=2)
    n_resamples = check_int(n_resamples, "n_resamples", low=0)
    rng = check_random_state(random_state)
    if method == "bootstrap":
        return rng.integers(0, n, size=(n_resamples, n))
    return np.array([rng.permutation(n)[: n // 2] for _ in range(n_resamples)], dtype=np.int64).reshape(
        n_resamples, n // 2)


def mi_replicates(x: np.ndarray, y: np.ndarray, estimator: str, indices: np.ndarray | Sequence[np.ndarray], *,
                  k: int = 3, gaussian_kwargs: Mapping[str, Any] | None = None,
                  seed: Sequence[int] = (0,)) -> np.ndarray:
    """The MI estimate (bits) on each resample ``x[i], y[i]`` for the rows `i` of `indices`.
    Parameters constant within a resample are dropped (the estimators' rule,
    :func:`mianalysis._internal.validation.varying_columns`; MI 0 if one side has none left); a
    resample whose covariance is singular even with shrinkage gives NaN.
    KSG's tie-breaking noise of resample j is seeded by ``[*seed, j]``.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.inference.intervals import mi_replicates
    >>> x = np.arange(8.0)[:, None]
    >>> mi_replicates(x, -x, "gaussian", np.array([[0, 0, 0, 0, 0, 0, 0, 0]]))
    array([0.])
    """
    from ...estimators import gaussian_mi

    entry = get_estimator(estimator)
    out = np.empty(len(indices))
    weighted = _weighted_resamples(entry, x.shape[1] + y.shape[1], gaussian_kwargs)
    scores = (ResampleScores(x), ResampleScores(y)) if weighted and entry.transform is not None else None
    for j, rows in enumerate(indices):
        xs, ys = x[rows], y[rows]
        keep_x, keep_y = varying_columns(xs), varying_columns(ys)
        if not keep_x.any() or not keep_y.any():
            out[j] = 0.0
            continue
        if weighted:  # the same estimate from the distinct runs of the resample, each weighted by its copies
            value = _weighted_bits(x, y, np.asarray(rows), keep_x, keep_y, scores)
            if value is not None:
                out[j] = value
                continue
        xs, ys = xs[:, keep_x], ys[:, keep_y]
        if entry.covariance:
            if entry.transform is not None:  # the estimator on the resample: ranked again (module docstring)
                xs, ys = entry.transform(xs), entry.transform(ys)
            kwargs = dict(gaussian_kwargs or {})
            value = None if kwargs else _gaussian_bits(xs, ys)
            if value is None:  # shrinkage asked, or a singular covariance within a resample: shrink
                try:
                    value = gaussian_mi(xs, ys, **(kwargs or {"shrinkage": "ledoit-wolf"}))
                except ValueError:  # a resample of a few runs with two distinct rows: no estimate, no interval
                    value = np.nan
            out[j] = value
        else:
            kwargs = {"k": k} if "k" in entry.arguments else {}
            if entry.resample_settings is not None:  # what the estimate of all runs fixed, kept on each resample
                kwargs.update(entry.resample_settings(x.shape[0], xs.shape[1], ys.shape[1]))
            if entry.random_state:
                kwargs["random_state"] = np.random.default_rng([*seed, j])
            out[j] = entry.function(xs, ys, **kwargs)
    return out


# Joint dimensions above which the bootstrap of a covariance estimator works on the distinct
# runs of each resample, weighted by their copies (:func:`_weighted_bits`): the same estimate
# with about 63 % of the rows, and the copula's ranks from one sort of each column. At fewer
# dimensions the resample itself is used, as before (the numbers of small tables are unchanged).
WEIGHTED_MIN_DIMS = 64


def _weighted_resamples(entry: Estimator, d: int, gaussian_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether :func:`mi_replicates` takes the weighted path (:func:`_weighted_bits`) for a
    registered estimator `entry` on `d` joint dimensions: a plain (unshrunk) Gaussian
    estimate, of the samples or of their normal scores, on more than WEIGHTED_MIN_DIMS."""
    from ...estimators.copula import normal_scores

    return (entry.covariance and not gaussian_kwargs and d > WEIGHTED_MIN_DIMS
            and entry.transform in (None, normal_scores))


class ResampleScores:
    """The normal scores (:func:`mianalysis.estimators.copula.normal_scores`) of resamples of
    the rows of `samples` (n, d), from one sort of each column.

    The rank of a value in a resample with repeated rows is the number of resampled values
    below it plus the average position among its ties (its copies, and other runs with the
    same value): with each run's count of copies ``c``, its rank is ``B + (T + 1) / 2``, with
    ``B`` the summed counts of the runs sorted before its group of equal values and ``T``
    that group's summed count. These are the ranks ``rankdata(samples[rows],
    method="average")`` gives, exactly (integers and halves), so :meth:`scores` equals
    ``normal_scores(samples[rows])`` at the distinct rows bit for bit, in O(n d) per resample
    instead of a sort.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.inference.intervals import ResampleScores
    >>> from mianalysis.estimators.copula import normal_scores
    >>> x = np.array([[3.0], [1.0], [2.0], [1.0]])
    >>> rows = np.array([0, 0, 1, 2])  # run 0 twice, runs 1 and 2 once, run 3 not
    >>> got = ResampleScores(x).scores(np.bincount(rows, minlength=4), np.array([0, 1, 2]))
    >>> bool(np.array_equal(got, normal_scores(x[rows])[[0, 2, 3]]))
    True
    """

    def __init__(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, dtype=np.float64)
        n = samples.shape[0]
        order = np.argsort(samples, axis=0, kind="stable")
        ordered = np.take_along_axis(samples, order, axis=0)
        first = np.ones(ordered.shape, dtype=bool)  # the first of a group of equal values
        first[1:] = ordered[1:] != ordered[:-1]
        self.ties = not first.all()
        self.order_t = np.ascontiguousarray(order.T)  # (d, n): each column's walk is contiguous
        self.start_t = self.stop_t = np.zeros((1, 1), dtype=np.int64)
        if self.ties:  # where each sorted value's group of equal values starts and ends
            pos = np.arange(n)[:, None]
            last = np.ones(ordered.shape, dtype=bool)
            last[:-1] = first[1:]
            start = np.maximum.accumulate(np.where(first, pos, 0), axis=0)
            stop = np.minimum.accumulate(np.where(last, pos, n - 1)[::-1], axis=0)[::-1] + 1
            self.start_t, self.stop_t = np.ascontiguousarray(start.T), np.ascontiguousarray(stop.T)

    def scores(self, counts: np.ndarray, distinct: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """The normal scores of the resample whose row i holds `counts[i]` copies of run i, at
        the rows `distinct` (those with a copy), in the columns `keep` (a mask; all by default).
        One pass over each column's sorted order (:mod:`._resample_ranks`)."""
        from ._resample_ranks import resample_scores_t

        n = self.order_t.shape[1]
        counts = np.ascontiguousarray(counts, dtype=np.int64)
        distinct = np.asarray(distinct, dtype=np.int64)
        columns = np.arange(self.order_t.shape[0]) if keep is None else np.flatnonzero(keep)
        position = np.full(n, -1, dtype=np.int64)
        position[distinct] = np.arange(distinct.size)
        m = int(counts.sum())
        out_t = resample_scores_t(self.order_t, counts, position, twice_rank_scores(m), self.start_t, self.stop_t,
                                  self.ties, columns, distinct.size)
        return np.ascontiguousarray(out_t.T)


def _weighted_bits(x: np.ndarray, y: np.ndarray, rows: np.ndarray, keep_x: np.ndarray, keep_y: np.ndarray,
                   scores: tuple[ResampleScores, ResampleScores] | None) -> float | None:
    """:func:`_gaussian_bits` of the resample ``x[rows][:, keep_x], y[rows][:, keep_y]``
    (of their normal scores when `scores` holds the two :class:`ResampleScores`) from its
    distinct runs: the centred Gram matrix ``sum_i c_i (z_i - m)(z_i - m)^T`` over the runs
    i with ``c_i`` copies (m the weighted mean) is the resample's, summed in another order;
    None where :func:`_gaussian_bits` would be (a block not positive definite)."""
    from ...estimators.gaussian import gram_matrix

    n = len(rows)
    dx = int(keep_x.sum())
    d = dx + int(keep_y.sum())
    if n <= d:
        return None
    counts = np.bincount(rows, minlength=x.shape[0])
    distinct = np.flatnonzero(counts)
    if scores is None:
        z = np.hstack([x[distinct][:, keep_x], y[distinct][:, keep_y]])
    else:
        z = np.hstack([scores[0].scores(counts, distinct, keep_x), scores[1].scores(counts, distinct, keep_y)])
    weights = counts[distinct].astype(np.float64)
    z -= (weights @ z) / n
    z *= np.sqrt(weights)[:, None]
    return _bits_from_gram(gram_matrix(z), dx, n)


def _gaussian_bits(x: np.ndarray, y: np.ndarray) -> float | None:
    """:func:`mianalysis.gaussian_mi` (bias-corrected, bits) without its input checks and
    thread-pool setup, which cost more than the estimate itself at the small sizes a
    resample loop meets; None when a covariance is not positive definite."""
    from ...estimators.gaussian import gram_matrix

    n, dx = x.shape
    d = dx + y.shape[1]
    if n <= d:
        return None
    z = np.hstack([x, y])
    z -= z.mean(axis=0)
    gram = gram_matrix(z) if d > 64 else z.T @ z  # small products are one BLAS call: the same bits
    return _bits_from_gram(gram, dx, n)


def _bits_from_gram(gram: np.ndarray, dx: int, n: int) -> float | None:
    """The bias-corrected Gaussian MI (bits) of the first `dx` and the other coordinates from
    the Gram matrix `gram` of `n` centred samples; None when a block is not positive definite."""
    from ...estimators.gaussian import wishart_logdet_bias

    d = gram.shape[0]
    sd = np.sqrt(np.diag(gram))
    corr = gram / sd[:, None] / sd[None, :]
    logdet = []
    for sl in (slice(0, dx), slice(dx, d), slice(0, d)):
        try:
            diag = np.diag(np.linalg.cholesky(corr[sl, sl]))
        except np.linalg.LinAlgError:
            return None
        if np.min(diag**2) <= max(d, n) * np.finfo(np.float64).eps:
            return None
        logdet.append(2.0 * np.log(diag).sum())
    bias = wishart_logdet_bias(dx, n) + wishart_logdet_bias(d - dx, n) - wishart_logdet_bias(d, n)
    return float(0.5 * (logdet[0] + logdet[1] - logdet[2] - bias) / np.log(2.0))


def mi_interval(x: ArrayLike, y: ArrayLike, estimator: str = "gaussian", *, n_resamples: int = 100, level: float = 0.95,
                k: int = 3, random_state: int = 0, method: str | None = None) -> tuple[float, float, float]:
    """The MI estimate (bits) of paired samples and its confidence interval.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, d_x) and (n_samples, d_y)
        Paired iid samples (runs).
    estimator : str, default="gaussian"
        A registered estimator: "gaussian" and "copula" get a Wishart-se interval, "ksg" a
        half-subsampling interval (module docstring; :func:`level_method`).
    n_resamples : int, default=100
        Resamples of a resampling method (unused by a formula).
    level : float, default=0.95
    k : int, default=3
        KSG neighbours (a half has n // 2 samples, so ``k < n // 2``).
    random_state : int, default=0
    method : {None, "wishart", "asymptotic", "bootstrap", "half-subsampling"}, default=None
        None: :func:`level_method`. A formula needs a covariance estimator and more runs
        than twice the joint dimension (a plain, unshrunk estimate); "bootstrap" and
        "half-subsampling" resample the runs (the estimator's own scheme is the default of
        its changes; another one is allowed, e.g. bootstrap for a coverage comparison).

    Returns
    -------
    estimate, low, high : float

    Examples
    --------
    Correlation 0.6 in each of 2 dimensions, exact MI -log2(1 - 0.36) = 0.644 bits:

    >>> import numpy as np
    >>> from mianalysis.analysis.inference.intervals import mi_interval
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((1000, 2))
    >>> y = 0.6 * x + 0.8 * rng.standard_normal((1000, 2))
    >>> [round(v, 3) for v in mi_interval(x, y)]
    [0.625, 0.55, 0.7]
    >>> [round(v, 3) for v in mi_interval(x, y, n_resamples=200, method="bootstrap")]
    [0.625, 0.557, 0.693]
    """
    from ..._internal.validation import check_paired
    entry = get_estimator(estimator)
    x, y = check_paired(x, y)
    level = check_level(level, "level")
    method = level_method(estimator) if method is None else check_choice(method, "method", METHODS)
    kwargs: dict[str, Any] = {}
    if "k" in entry.arguments:
        k = check_int(k, "k", low=1, high=x.shape[0] // 2 - 1)
        kwargs["k"] = k
    if entry.random_state:
        kwargs["random_state"] = random_state
    estimate = entry.function(x, y, **kwargs)
    if method not in INTERVALS:
        return (float(estimate), *normal_interval(estimate, level_se(x, y, estimator, method), level))
    idx = _resample_indices(x.shape[0], n_resamples, method, np.random.default_rng([random_state, 1]))
    reps = mi_replicates(x, y, estimator, idx, k=k, seed=(random_state, 2))
    if len(reps) < 2:
        return float(estimate), np.nan, np.nan
    low, high = normal_interval(estimate, reps.std(ddof=1), level, df=len(reps) - 1)
    return float(estimate), low, high


def trend_verdict(low: float, high: float, *, shrinkage: bool = False, bound: bool = False) -> str:
    """"rising" if the change's interval lies above 0, "falling" if below, else "no
    detectable change"; "not made: shrinkage estimate" when a Ledoit-Wolf shrinkage
    estimate was involved (`shrinkage`: a row's ``estimate_kind`` is "shrinkage"); "not
    made: lower bound (...)" when a lower bound was (`bound`: a row's ``estimate_kind`` is
    "bound"; a bound may rise while the MI it bounds falls); "not made: no interval" when
    there is none.

    Examples
    --------
    >>> from mianalysis.analysis.inference.intervals import trend_verdict
    >>> trend_verdict(0.1, 0.3), trend_verdict(-0.1, 0.3), trend_verdict(-0.3, -0.1)
    ('rising', 'no detectable change', 'falling')
    >>> trend_verdict(0.1, 0.3, shrinkage=True)
    'not made: shrinkage estimate'
    >>> trend_verdict(0.1, 0.3, bound=True)
    "not made: lower bound (its change is not the MI's)"
    """
    if shrinkage:
        return SHRINKAGE
    if bound:
        return BOUND
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not made: no interval"
    if low > 0:
        return "rising"
    if high < 0:
        return "falling"
    return NO_CHANGE
