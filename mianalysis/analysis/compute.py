"""One checkpoint of an analysis, computed alone: every client pair's distances and MI
estimates (with their nulls and intervals), the recorded metrics, and the paired changes
since the checkpoint before. It runs in the analysing process or on a Dask worker."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._internal.validation import varying_columns
from ..estimators.distances import UPDATE_METRICS, paired_distances, update_cosines
from ..dumps import REFERENCE_CLIENTS, SKETCH_SUFFIX, exact_mi_of
from ..estimators import KSG_NOISE, MarginalDistances, gaussian_mi, gaussian_mi_null, mi_permutation_test
from ..estimators.moment_null import permutation_moment_null
from ..estimators.significance import gaussian_permutation_test
from ..estimators.bound import bound_ceiling, bound_min_runs
from ..estimators.ksg import ksg_estimates_of_subsets, ksg_ties, standardize_columns
from ..estimators.registry import DISTANCE_STREAM, LEVEL_INTERVALS, get_estimator
from .inference.choice import EXTRA, FALLBACK, PRIMARY, Choice, choose, fallback_note, omitted_note
from .diagnostics.design import design_note
from .diagnostics.gaussianity import copula_disagreement, nongaussian_share
from .inference.intervals import (InfluenceValues, change_method, change_test, level_method, level_se, mean_interval,
                        mi_influence, mi_replicates, normal_interval, resample_indices, trend_verdict)
from .diagnostics.movers import RareMovers, hold_rare_movers
from .reading import NO_ESTIMATE, held_note, no_estimate_reason
from .inference.regime import estimate_regime_note
from .schema import AnalysisRow, new_row
from .validate import AnalysisRequest, start_checkpoint

if TYPE_CHECKING:  # names used only in type hints
    from ..dumps import ParameterDump

__all__ = ["gaussian_settings", "CheckpointAnalysis", "Part", "moments_apply", "MOMENT_NULL_NOTE"]

def gaussian_settings(n_runs: int, n_features: int) -> tuple[dict[str, Any], str]:
    """How the Gaussian estimator is run for `n_runs` samples of `n_features` joint
    dimensions: the plain bias-corrected estimate while the sample covariance is
    well-determined (n_runs > 2 * n_features), Ledoit-Wolf shrinkage otherwise."""
    if n_runs > 2 * n_features:
        return {}, ""
    return ({"shrinkage": "ledoit-wolf"},
            f"ledoit-wolf shrinkage: {n_runs} runs <= 2 x {n_features} joint dimensions")


class TransformedSamples:
    """Each client's varying samples after an estimator's ``transform`` (the copula's normal
    scores), made once per checkpoint and tensor group and shared by every pair the client
    is in, by the estimate, its null and its intervals.

    Parameters
    ----------
    samples : sequence of ndarray
        Each client's samples (runs x parameters) of one checkpoint and group.
    varying : sequence of ndarray
        Each client's varying columns (:func:`varying_columns` of its samples): a client
        keeps the same ones in every pair, so ``of(e, c)`` is
        ``transform(samples[c][:, varying[c]])``.
    """

    def __init__(self, samples: Sequence[np.ndarray], varying: Sequence[np.ndarray]) -> None:
        self.samples, self.varying = samples, varying
        self._made: dict[tuple[Callable[[np.ndarray], np.ndarray], int], np.ndarray] = {}

    def of(self, estimator: str, client: int) -> np.ndarray | None:
        """Client `client`'s varying columns after `estimator`'s transform (None: it has none)."""
        transform = get_estimator(estimator).transform
        if transform is None:
            return None
        if (transform, client) not in self._made:
            self._made[transform, client] = transform(self.samples[client][:, self.varying[client]])
        return self._made[transform, client]

    def pair(self, estimator: str, a: int, b: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Clients `a` and `b`'s varying columns after `estimator`'s transform (None: it has none)."""
        x = self.of(estimator, a)
        return None if x is None else (x, cast(np.ndarray, self.of(estimator, b)))


def _drop_constant(x: np.ndarray, y: np.ndarray,
                   keep: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """x and y without their constant parameters (the estimators' rule, :func:`varying_columns`)
    and how many were dropped; `keep`, where given, is (varying_columns(x), varying_columns(y))
    already computed."""
    keep_x, keep_y = (varying_columns(x), varying_columns(y)) if keep is None else keep
    dropped = int((~keep_x).sum() + (~keep_y).sum())
    return x[:, keep_x], y[:, keep_y], dropped


# Runs whose k-th and (k+1)-th neighbour distances the analysis compares (ksg_ties' max_rows):
# a few, so the check costs a small part of a KSG estimate at paper scale (O(rows x runs x dims)).
TIE_NEIGHBOUR_ROWS = 16


@dataclass(frozen=True)
class _Estimate:
    """One estimator's answer on one client pair: the estimate and its null, and how both were made."""

    value: float
    null_mean: float = np.nan
    null_std: float = np.nan
    p_value: float = np.nan
    shrinkage: bool = False  # a Gaussian log-determinant estimate of a Ledoit-Wolf shrunk covariance
    null_method: str = "none"


def _mi_row(x: np.ndarray, y: np.ndarray, estimator: str, k: int, permutations: int, rng: np.random.Generator,
            distances: tuple[MarginalDistances, MarginalDistances] | None = None, distance_cache: bool | str = "auto",
            standardize: bool = True, gaussian_null: str = "permutation",
            keep: tuple[np.ndarray, np.ndarray] | None = None,
            transformed: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """The fields of one estimator's row on one client pair: value, null_mean, null_std,
    p_value, note and the typed columns (estimate_kind, outside_calibration, null_method);
    an estimate outside the calibrated regime says so (mianalysis.analysis.inference.regime), and
    ``regime`` holds that note alone (not a column: the caller removes it).

    `distances`: the two clients' marginal distance matrices of their noised samples (KSG
    only); the estimate and its permutation null then cost O(n^2) each. Otherwise
    `distance_cache` is passed on to the KSG estimator and its permutation test. With
    `gaussian_null` "analytic", a plain (unshrunk) Gaussian estimate gets the null of
    :func:`gaussian_mi_null` and no permutations. `keep`: the varying columns of x and y where
    the caller has them (:func:`_drop_constant`). `transformed`: x and y's varying columns
    after the estimator's ``transform``, where the caller has them (:class:`TransformedSamples`;
    then `keep` is required)."""
    x, y, dropped = _drop_constant(x, y, keep)
    notes = [f"dropped {dropped} constant parameters"] if dropped else []
    if x.shape[1] == 0 or y.shape[1] == 0:  # I(c; Y) = 0, as the estimators return (with null 0, p = 1)
        side = "client_a's" if x.shape[1] == 0 else "client_b's"
        notes.append(f"{side} parameters are constant across runs: MI is 0")
        est = _Estimate(0.0, 0.0, 0.0, 1.0, null_method="permutation") if permutations else _Estimate(0.0)
        regime = ""
    elif np.array_equal(x, y):
        notes.append("identical samples (same initial point): MI is infinite")
        est, regime = _Estimate(np.inf), ""
    elif shared := _identical_parameters(x, y):
        # a varying parameter equal in both clients in every run (a shared start it never left):
        # y determines it, so the MI is infinite whatever the other parameters do
        notes.append(f"{shared} {IDENTICAL_PARAMETERS}: MI is infinite")
        est, regime = _Estimate(np.inf), ""
    else:
        est = _estimate(x, y, estimator, k, permutations, rng, distances, distance_cache, standardize, gaussian_null,
                        notes, transformed)
        regime = estimate_regime_note(estimator, x.shape[0], x.shape[1] + y.shape[1], float(est.value),
                                      shrinkage=est.shrinkage)
        # KSG assumes no ties: tied or lattice samples break it (the check compares the k-th and
        # (k+1)-th neighbour distances, so it needs k + 2 runs).
        if get_estimator(estimator).distance_cache and x.shape[0] >= k + 2:
            ties = ksg_ties(x, y, k, max_rows=TIE_NEIGHBOUR_ROWS)
            if ties.flagged:
                regime = "; ".join(n for n in (regime, ties.note) if n)
        notes.append(regime)
        if estimator == "bound" and np.isfinite(est.value) and est.value >= NEAR_CEILING * bound_ceiling(x.shape[0]):
            notes.append(f"near its ceiling of {bound_ceiling(x.shape[0]):.3g} bits (1 + ln of the runs per "
                         "evaluation fold, whatever the MI): says only that the MI is at least this; it may be far larger")
    kind = "shrinkage" if est.shrinkage else get_estimator(estimator).kind
    return {"value": est.value, "null_mean": est.null_mean, "null_std": est.null_std, "p_value": est.p_value,
            "note": "; ".join(n for n in notes if n), "estimate_kind": kind,
            "outside_calibration": bool(regime), "null_method": est.null_method, "regime": regime}


# The note of a row whose null is the permutation-moment null (reading.columns_from_note reads it).
MOMENT_NULL_NOTE = "permutation-moment null (Pillai's trace: exact permutation mean and variance, gamma tail)"

# gaussian_null="auto" uses the permutation-moment null where a shuffle of n runs of p + q
# parameters costs at least this many multiply-adds (n p q) and the runs are at least
# MOMENTS_MIN_RUNS_PER_DIMENSION times the joint dimension: its size there is measured by
# experiments/moment_null_size.py (docs/results/tables/moment_null_size.md); elsewhere the shuffles.
MOMENTS_MIN_PRODUCT = 10**9
MOMENTS_MIN_RUNS_PER_DIMENSION = 4


def moments_apply(n_runs: int, n_features_x: int, n_features_y: int) -> bool:
    """Whether ``gaussian_null="auto"`` gives a Gaussian or copula row of this shape the
    permutation-moment null instead of its shuffles (:data:`MOMENTS_MIN_PRODUCT`,
    :data:`MOMENTS_MIN_RUNS_PER_DIMENSION`).

    >>> from mianalysis.analysis.compute import moments_apply
    >>> moments_apply(26_400, 850, 850), moments_apply(400, 10, 10), moments_apply(19_000, 2_500, 2_500)
    (True, False, False)
    """
    return (n_runs * n_features_x * n_features_y >= MOMENTS_MIN_PRODUCT
            and n_runs >= MOMENTS_MIN_RUNS_PER_DIMENSION * (n_features_x + n_features_y))


# A bound at or above this share of its ceiling (:func:`bound_ceiling`) is noted as near it.
NEAR_CEILING = 0.9

# The note of a row whose clients share some varying parameters exactly (familywise reads it).
IDENTICAL_PARAMETERS = "parameters identical in both clients in every run (a shared value never changed)"


def _identical_parameters(x: np.ndarray, y: np.ndarray) -> int:
    """How many varying parameters of `x` equal the same parameter of `y` in every run (0 when
    the clients' vectors differ in length)."""
    if x.shape != y.shape:
        return 0
    return int(np.count_nonzero(np.all(x == y, axis=0)))


def _estimate(x: np.ndarray, y: np.ndarray, estimator: str, k: int, permutations: int, rng: np.random.Generator,
              distances: tuple[MarginalDistances, MarginalDistances] | None, distance_cache: bool | str,
              standardize: bool, gaussian_null: str, notes: list[str],
              transformed: tuple[np.ndarray, np.ndarray] | None = None) -> _Estimate:
    """One estimator's :class:`_Estimate` on varying, distinct samples; appends the
    estimator's choices to `notes`. `transformed`: x and y after the estimator's
    ``transform``, where made already."""
    if distances is not None:  # constant parameters add 0 to every max-norm distance
        if not permutations:
            return _Estimate(get_estimator(estimator).function(*distances, k=k))
        res = mi_permutation_test(*distances, estimator=estimator, n_permutations=permutations, random_state=rng, k=k)
        return _Estimate(res.estimate, res.null_mean, res.null_std, res.p_value, null_method="permutation")
    entry = get_estimator(estimator)
    if entry.transform is not None:  # once: the estimate and every shuffle see the same transformed samples
        x, y = (entry.transform(x), entry.transform(y)) if transformed is None else transformed
    value = None
    if entry.covariance:  # a Gaussian log-determinant estimate (of the transformed samples)
        kwargs, note = gaussian_settings(x.shape[0], x.shape[1] + y.shape[1])
        if note:
            notes.append(note)
        try:
            value = gaussian_mi(x, y, **kwargs)
        except ValueError as exc:  # singular covariance: shrink, and say why
            kwargs = {"shrinkage": "ledoit-wolf"}
            notes.append(f"ledoit-wolf shrinkage: {exc}")
        if gaussian_null == "auto":  # the moments where they stand in for costly shuffles (moments_apply)
            gaussian_null = "moments" if permutations and moments_apply(x.shape[0], x.shape[1], y.shape[1]) else "permutation"
        if gaussian_null == "moments" and "analytic" in entry.nulls:
            if value is not None and not kwargs:
                null = gaussian_mi_null(x.shape[0], x.shape[1], y.shape[1])
                moments = permutation_moment_null(x, y)
                notes.append(f"{MOMENT_NULL_NOTE} (variance x {moments.inflation:.3g} the Gaussian's)")
                return _Estimate(value, null.mean, null.std * float(np.sqrt(moments.inflation)), moments.p_value,
                                 null_method="moments")
            notes.append("no moment null with shrinkage" + (f": {permutations} permutations" if permutations else ""))
        if gaussian_null == "analytic" and "analytic" in entry.nulls:
            if value is not None and not kwargs:
                null = gaussian_mi_null(x.shape[0], x.shape[1], y.shape[1])
                notes.append(f"analytic null ({'exact' if null.exact_available else 'Bartlett chi-square'})")
                return _Estimate(value, null.mean, null.std, null.p_value(value), null_method="analytic")
            notes.append("no analytic null with shrinkage" + (f": {permutations} permutations" if permutations else ""))
        test_as = "gaussian"  # the transformed samples' test is the Gaussian estimate's
        function: Callable[..., float] = gaussian_mi
    else:
        kwargs = {name: v for name, v in (("k", k), ("standardize", standardize)) if name in entry.arguments}
        if entry.distance_cache:
            kwargs = {"k": k, "distance_cache": distance_cache, "standardize": standardize}
        test_as, function = estimator, entry.function
    shrinkage = bool(kwargs.get("shrinkage"))
    if permutations and value is not None:  # the estimate made above: the shuffles alone
        res = gaussian_permutation_test(x, y, value, n_permutations=permutations, random_state=rng, estimator=test_as,
                                        **kwargs)
        return _Estimate(res.estimate, res.null_mean, res.null_std, res.p_value, shrinkage, "permutation")
    if permutations:
        res = mi_permutation_test(x, y, estimator=test_as, n_permutations=permutations, random_state=rng, **kwargs)
        return _Estimate(res.estimate, res.null_mean, res.null_std, res.p_value, shrinkage, "permutation")
    if value is None:
        value = function(x, y, **kwargs, **({"random_state": rng} if entry.random_state else {}))
    return _Estimate(value, shrinkage=shrinkage)


# What a change's interval needs of each checkpoint: per-run values or resampled estimates, or influence values.
ChangeInputs = np.ndarray | InfluenceValues
Part = tuple[list[AnalysisRow], list[tuple[str, list[AnalysisRow], dict[tuple[int, int, str], ChangeInputs]]]]


class CheckpointAnalysis:
    """The rows of one checkpoint, computed alone: what :func:`mianalysis.analyze` does per
    checkpoint, in this process or on a Dask worker (it holds the dump and the checked
    arguments, never samples; the resample indices are drawn again where it runs, from
    ``random_state``).

    Calling it with a checkpoint index gives a part, ``(metric_rows, [(layer, rows,
    resampled)])``: the recorded metrics' rows, then per tensor group the rows of every pair
    (distances, MI, exact MI) with their intervals, and what the changes' intervals need
    (``resampled``: (a, b, quantity) -> per-run distances or MI replicates). The rows
    ``delta_*`` of checkpoint t are made from the parts of t - 1 and t by :meth:`changes`.

    Parameters
    ----------
    dump : ParameterDump
    request : AnalysisRequest
        The checked arguments (:func:`mianalysis.analysis.validate.check_request`).
    """

    def __init__(self, dump: ParameterDump, request: AnalysisRequest) -> None:
        self.dump, self.request = dump, request
        self.n_runs, self.estimators, self.metrics, self.k = request.n_runs, request.estimators, request.metrics, \
            request.k
        self.groups, self.random_state, self.ci_level = request.groups, request.random_state, request.ci_level
        # A dump's client "central" (ParameterSampler(reference="central")) is where the federation
        # should be, not a client: it is in no pair (its metric rows stay).
        self.pairs = list(itertools.combinations([c for c, name in enumerate(dump.clients) if name not in REFERENCE_CLIENTS],
                                                 2))
        # A dump still being sampled (or stopped) is analysed as far as it goes; every row says so.
        self.incomplete = "" if dump.complete else f"dump incomplete: {self.n_runs} of {dump.n_runs} runs"
        self.design = design_note(dump.meta)  # what the sampling design forces on the MI rows
        # A sketched dump's notes per group and quantity ("mi" for the MI rows); {} for a group of parameters.
        self.sketched = {group: _sketch_notes(dump, cols) for group, cols in self.groups}
        self.with_interval = set(self.metrics) | {f"mi_{e}" for e in self.estimators}
        # The updates of cosine_update are measured from each run's start, the checkpoint at iteration 0
        # (check_request refuses a dump without one).
        self.start = start_checkpoint(dump) if any(m in UPDATE_METRICS for m in self.metrics) else None
        self._indices: dict[str, np.ndarray] | None = None
        self._starts: dict[str, list[np.ndarray]] = {}
        # KSG replicates made from a pair's own distances while they existed (pair_distances),
        # (t, a, b, estimator) -> replicates, until with_intervals takes them
        self._pair_replicates: dict[tuple[int, int, int, str], np.ndarray] = {}
        # Clients' distances that pair_distances made and may serve the next pair with them,
        # (t, client) -> distances; at most a pair's, within one group's pairs
        self._held: dict[tuple[int, int], MarginalDistances] = {}

    def __getstate__(self) -> dict[str, Any]:  # drawn or read again where it runs: settings travel, not arrays
        return {**self.__dict__, "_indices": None, "_starts": {}, "_pair_replicates": {}, "_held": {}}

    @property
    def indices(self) -> dict[str, np.ndarray]:
        """Resample indices shared by every checkpoint and pair: changes are paired."""
        if self._indices is None:
            self._indices = {e: resample_indices(self.n_runs, self.request.ci_resamples[e], e,
                                                 np.random.default_rng([self.random_state, 1, _stream(e)]))
                             for e in self.estimators}
        return self._indices

    def row(self, t: int, a: int, b: int | None, quantity: str, value: float, spread: float = np.nan, *,
            note: str = "", group: str = "", ci: Sequence[float] = (np.nan, np.nan), **columns: Any) -> AnalysisRow:
        """A table row of checkpoint t and clients a, b (b None: client a's recorded metric):
        `value` and `spread`, the `note` (with the dump's incompleteness), the tensor `group`
        (column ``layer``), the interval `ci` (``ci_low``, ``ci_high``) and any other
        `columns` by name; the rest are their columns' defaults
        (:func:`mianalysis.analysis.schema.new_row`). Its family-wise columns are filled once
        the whole table is assembled (:func:`mianalysis.analysis.inference.familywise.apply_familywise`)."""
        dump = self.dump
        return new_row(checkpoint=t, iteration=dump.checkpoints[t], client_a=dump.clients[a],
                       client_b="" if b is None else dump.clients[b], quantity=quantity, value=value, spread=spread,
                       n_runs=self.n_runs, note="; ".join(n for n in (note, self.incomplete) if n), layer=group,
                       ci_low=ci[0], ci_high=ci[1], **columns)

    def __call__(self, t: int, progress: Callable[[int], object] | None = None) -> Part:
        """Checkpoint t's part (see the class); `progress` is called with 1 per client pair."""
        dump, n_clients = self.dump, len(self.dump.clients)
        metric_rows = []
        for c in range(n_clients):
            for name in dump.metric_names:
                values = dump.metric(c, name)[t]
                with np.errstate(invalid="ignore"):  # a metric with an infinity has no sd; the note says why
                    metric_rows.append(self.row(t, c, None, name, np.mean(values), np.std(values, ddof=1),
                                                note=_metric_note(name, values)))
        exact = _exact_mi(dump, self.groups[0][1]) if self.groups[0][0] == "" else None
        per_group = []
        for group, cols in self.groups:
            samples = [np.asarray(dump.samples(c, index=t)[:, cols], dtype=np.float64) for c in range(n_clients)]
            _check_finite(dump, t, samples, cols)
            # The samples the MI estimates see (rare movers held, where asked), and each
            # client's varying parameters, once: the auto choice counts them, and every
            # estimate and interval drops the others (the constant rule is per column).
            mi_samples, movers = self.mi_samples(samples)
            varying = [varying_columns(s) for s in mi_samples]
            held_out = _held_out(movers, varying)
            transformed = TransformedSamples(mi_samples, varying)  # the copula's normal scores: once per client
            distances = self.marginal_distances(t, mi_samples, varying)
            rows = []
            for a, b in self.pairs:
                x, y = samples[a], samples[b]
                for metric in self.metrics:
                    if metric in UPDATE_METRICS:
                        rows.append(self.update_row(t, a, b, metric, group, samples))
                        continue
                    d = paired_distances(x, y, metric)
                    rows.append(self.row(t, a, b, metric, d.mean(), d.std(ddof=1), group=group,
                                         note=self.sketched[group].get(metric, "")))
                keep = (varying[a], varying[b])
                x, y = mi_samples[a], mi_samples[b]
                no_estimate = _held_pair(held_out, varying, a, b, self.request.min_moving_runs)
                if no_estimate:  # every varying parameter of a client held: nothing of it to estimate from
                    estimators = [_choose(self.n_runs, *keep)[0].estimator] if self.request.auto else self.estimators
                    chosen = [(e, {**_no_estimate(e), "note": no_estimate}) for e in estimators]
                elif self.request.auto:
                    chosen = self._auto_fields(t, a, b, x, y, distances, keep, transformed)
                else:
                    chosen = [(e, self._fields(t, a, b, x, y, e, distances, keep, transformed)) for e in self.estimators]
                held = _movers_note(movers, a, b, self.request.min_moving_runs)
                for estimator, fields in chosen:
                    fields.pop("regime")
                    fields["note"] = "; ".join(n for n in (fields["note"], held, self.design,
                                                           self.sketched[group].get("mi")) if n)
                    rows.append(self.row(t, a, b, f"mi_{estimator}", group=group, **fields))
                if exact is not None and group == "":  # the exact MI is that of the whole vector
                    rows.append(self.row(t, a, b, "mi_exact", exact(dump.checkpoints[t], a, b)))
                if progress is not None:
                    progress(1)
            self._held.clear()  # the next group's samples are other columns
            resampled = self.with_intervals(t, samples, self.of_checkpoint(rows, t, group), varying, transformed,
                                            distances, mi_samples)
            if self.request.gaussianity:
                rows += self.gaussianity_rows(t, group, mi_samples, rows)
            per_group.append((group, rows, resampled))
        return metric_rows, per_group

    def mi_samples(self, samples: Sequence[np.ndarray]) -> tuple[Sequence[np.ndarray], list[RareMovers] | None]:
        """The clients' samples as the MI estimates see them: each client's parameters moving
        in fewer than ``min_moving_runs`` runs held at their most common value
        (:mod:`mianalysis.analysis.diagnostics.movers`), and those movers; `samples` and None where the
        request holds none (the default)."""
        if self.request.min_moving_runs <= 1:
            return samples, None
        made = [hold_rare_movers(s, self.request.min_moving_runs) for s in samples]
        return [held for held, _ in made], [movers for _, movers in made]

    def marginal_distances(self, t: int, samples: Sequence[np.ndarray],
                           varying: Sequence[np.ndarray]) -> list[MarginalDistances] | None:
        """Each client's KSG marginal distances at checkpoint t, where the analysis keeps them
        (``reuse_distances``, and a distance-cache estimator runs on some pair): they serve
        every pair the client is in, the estimate, all its permutations and its
        half-subsampling replicates; the tie-breaking noise is drawn per (checkpoint,
        client), so the same matrices are made again wherever they are needed. None otherwise."""
        cache_users = [e for e in self.estimators if get_estimator(e).distance_cache]
        if self.request.auto:  # KSG only where the rule runs it on some pair
            cache_users = [e for e in cache_users if any(
                e in [c.estimator for c in _choose(self.n_runs, varying[a], varying[b])] for a, b in self.pairs)]
        if not (cache_users and self.request.reuse_distances):
            return None
        return [self._client_distances(t, c, s) for c, s in enumerate(samples)]

    def _client_distances(self, t: int, c: int, samples: np.ndarray) -> MarginalDistances:
        """Client c's KSG marginal distances at checkpoint t, its noise drawn per (checkpoint, client)."""
        return MarginalDistances.of(samples, noise=KSG_NOISE, standardize=self.request.standardize,
                                    random_state=np.random.default_rng([self.random_state, t, c, DISTANCE_STREAM]))

    def pair_distances(self, t: int, a: int, b: int, x: np.ndarray,
                       y: np.ndarray) -> tuple[MarginalDistances, MarginalDistances] | None:
        """Clients a and b's distances at checkpoint t (samples x, y) where the analysis keeps
        no client's but two fit in memory (``distance_cache`` "auto" or True): the matrices
        :meth:`marginal_distances` would hold, made for this pair alone, so that the estimate,
        its permutations and replicates are the same whichever way (and whatever the memory).
        None where not.

        A client's matrix is kept for the next pair while it is in that pair too (pairs in
        order: (0, 1), (0, 2), (1, 2) make 4 matrices, not 6), never more than the two that
        were found to fit: the one outside the next pair is let go before a new one is made."""
        request = self.request
        if request.reuse_distances or request.distance_cache is False:
            return None
        for key in [key for key in self._held if key[0] != t or key[1] not in (a, b)]:
            del self._held[key]
        # Held matrices were made where two fitted (the rule is asked before any is held).
        if not self._held and not MarginalDistances.cache_fits(self.n_runs, count=2,
                                                              distance_cache=request.distance_cache):
            return None
        for c, samples in ((a, x), (b, y)):
            if (t, c) not in self._held:
                self._held[t, c] = self._client_distances(t, c, samples)
        return self._held[t, a], self._held[t, b]

    def _subset_replicates(self, estimator: str, distances: Sequence[MarginalDistances]) -> np.ndarray | None:
        """KSG's half-subsampling replicates from two clients' distances (the halves of the
        samples the estimate saw, noise included; nothing recomputed), or None where the
        estimator's interval is not made that way or there is no interval to make."""
        entry = get_estimator(estimator)
        if not (entry.distance_cache and entry.interval == "half-subsampling" and len(self.indices[estimator]) >= 2
                and self.n_runs // 2 > self.k):
            return None
        return ksg_estimates_of_subsets(distances[0], distances[1], self.indices[estimator], k=self.k)

    def start_samples(self, group: str) -> list[np.ndarray]:
        """Every client's samples of tensor `group` at each run's start (the checkpoint at
        iteration 0), read once per group in the process that uses them."""
        if self.start is None:
            raise ValueError("no update metric was asked for: the analysis reads no start checkpoint")
        if group not in self._starts:
            cols = dict(self.groups)[group]
            self._starts[group] = [np.asarray(self.dump.samples(c, index=self.start)[:, cols], dtype=np.float64)
                                   for c in range(len(self.dump.clients))]
        return self._starts[group]

    def per_run(self, a: int, b: int, quantity: str, group: str, samples: Sequence[np.ndarray]) -> np.ndarray:
        """The per-run values whose mean is the row of a distance or update metric: the paired
        distance, or the cosine of the updates (NaN where an update is zero)."""
        if quantity in UPDATE_METRICS:
            start = self.start_samples(group)
            return update_cosines(samples[a], samples[b], start[a], start[b])
        return paired_distances(samples[a], samples[b], quantity)

    def update_row(self, t: int, a: int, b: int, quantity: str, group: str,
                   samples: Sequence[np.ndarray]) -> AnalysisRow:
        """The row of an update metric (``cosine_update``) of checkpoint t and clients a, b:
        the mean over the runs where both clients' updates are non-zero, its sd over them,
        and a note naming the runs left out (all of them at the start itself: NaN)."""
        values = self.per_run(a, b, quantity, group, samples)
        defined = np.isfinite(values)
        n = int(defined.sum())
        value = float(values[defined].mean()) if n else np.nan
        spread = float(values[defined].std(ddof=1)) if n >= 2 else np.nan
        note = ""
        if t == self.start:
            note = ("the run's start (iteration 0): every update is zero there, so their cosine is undefined (NaN); "
                    "updates are measured from this checkpoint")
        elif n < values.size:
            start, clients = self.start_samples(group), self.dump.clients
            zero = ", ".join(f"client {clients[c]!r} in {k} run{'s' if k > 1 else ''}" for c in (a, b)
                             if (k := int((samples[c] == start[c]).all(axis=1).sum())))
            note = (f"undefined (NaN): an update is zero in every run ({zero}); a zero update has no direction"
                    if not n else f"mean over {n} of {values.size} runs: {values.size - n} left out, where an update "
                    f"is zero ({zero}); a zero update has no direction")
        note = "; ".join(n for n in (note, self.sketched[group].get(quantity)) if n)
        return self.row(t, a, b, quantity, value, spread, note=note, group=group)

    def _fields(self, t: int, a: int, b: int, x: np.ndarray, y: np.ndarray, estimator: str,
                distances: Sequence[MarginalDistances] | None,
                keep: tuple[np.ndarray, np.ndarray] | None = None,
                transformed: TransformedSamples | None = None) -> dict[str, Any]:
        """One estimator's row fields on pair (a, b) at checkpoint t (see :func:`_mi_row`;
        `keep`: the varying columns of x and y; `transformed`: the clients' transformed
        varying samples, the same columns as `keep`), from its own random stream."""
        entry, request = get_estimator(estimator), self.request
        rng = np.random.default_rng([self.random_state, t, a, b, _stream(estimator)])
        cached = (distances[a], distances[b]) if entry.distance_cache and distances is not None else None
        if cached is None and entry.distance_cache and (keep is None or (keep[0].any() and keep[1].any())):
            cached = self.pair_distances(t, a, b, x, y)
            replicates = None if cached is None else self._subset_replicates(estimator, cached)
            if replicates is not None:  # the interval's, made while the pair's distances exist
                self._pair_replicates[t, a, b, estimator] = replicates
        pair = transformed.pair(estimator, a, b) if transformed is not None else None
        return _mi_row(x, y, estimator, self.k, request.permutations[estimator], rng, cached,
                       request.distance_cache, request.standardize, request.gaussian_null, keep, pair)

    def _auto_fields(self, t: int, a: int, b: int, x: np.ndarray, y: np.ndarray,
                     distances: Sequence[MarginalDistances] | None,
                     keep: tuple[np.ndarray, np.ndarray],
                     transformed: TransformedSamples | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The rows ``estimators="auto"`` gives pair (a, b) at checkpoint t
        (:mod:`mianalysis.analysis.inference.choice`; `keep`: the varying columns of x and y, which the
        rule counts and each estimate keeps): [(estimator, fields)], each note saying which
        estimator it is and why."""
        out = []
        for choice in _choose(self.n_runs, *keep):
            if choice.estimator == FALLBACK and self.n_runs < bound_min_runs():  # no bound at all: said so
                out.append((FALLBACK, {**_no_estimate(FALLBACK), "note": f"{choice.note}; no bound: {self.n_runs} "
                                       f"runs < {bound_min_runs()} (two folds of 4 runs)"}))
                continue
            fields = self._fields(t, a, b, x, y, choice.estimator, distances, keep, transformed)
            note = choice.note
            if choice.estimator == PRIMARY and fields["outside_calibration"]:  # after all: the bound instead
                note = fallback_note(fields["regime"])
                fields = self._fields(t, a, b, x, y, FALLBACK, distances, keep, transformed)
                choice = Choice(FALLBACK, note)
            if choice.estimator == EXTRA and fields["outside_calibration"]:  # left out, and said so
                first = out[0][1]
                first["note"] = "; ".join(n for n in (first["note"], omitted_note(fields["regime"])) if n)
                continue
            fields["note"] = "; ".join(n for n in (note, fields["note"]) if n)
            out.append((choice.estimator, fields))
        return out

    def gaussianity_rows(self, t: int, group: str, samples: Sequence[np.ndarray],
                         rows: Sequence[AnalysisRow]) -> list[AnalysisRow]:
        """The Gaussianity diagnostic of checkpoint t and tensor `group`
        (:mod:`mianalysis.analysis.diagnostics.gaussianity`): per client in a pair, ``nongaussian_share``
        (the share of its varying parameters whose marginal rejects normality, Holm at 1 -
        ``ci_level``); per pair whose ``mi_gaussian`` and ``mi_copula`` rows (among `rows`,
        intervals filled) both have an interval, ``copula_disagrees`` (1 when the intervals
        do not overlap, else 0). Each note says which MI row to read."""
        alpha = round(1 - self.ci_level, 12)
        out = []
        for c in sorted({c for pair in self.pairs for c in pair}):
            test = nongaussian_share(samples[c], alpha=alpha, method="holm")
            out.append(self.row(t, c, None, "nongaussian_share", test.share, note=test.note, group=group))
        of_t = self.of_checkpoint(rows, t, group)
        for a, b in self.pairs:
            gaussian, copula = of_t.get((a, b, "mi_gaussian")), of_t.get((a, b, "mi_copula"))
            if gaussian is None or copula is None:
                continue
            disagree = copula_disagreement((gaussian["ci_low"], gaussian["ci_high"]),
                                           (copula["ci_low"], copula["ci_high"]))
            if disagree is None:
                continue
            intervals = (f"mi_gaussian [{gaussian['ci_low']:.4g}, {gaussian['ci_high']:.4g}], "
                         f"mi_copula [{copula['ci_low']:.4g}, {copula['ci_high']:.4g}] bits")
            if disagree:
                note = (f"{intervals}: the intervals do not overlap; the parameters' marginals move the Gaussian "
                        "estimate: read mi_copula")
            else:
                note = f"{intervals}: the intervals overlap; no sign that the marginals bias mi_gaussian: either applies"
            out.append(self.row(t, a, b, "copula_disagrees", float(disagree), note=note, group=group))
        return out

    def of_checkpoint(self, rows: Sequence[AnalysisRow], t: int,
                      group: str = "") -> dict[tuple[int, int, str], AnalysisRow]:
        """(a, b, quantity) -> the row of `rows` of checkpoint t (and tensor `group`) that has an interval."""
        clients = self.dump.clients
        return {(clients.index(r["client_a"]), clients.index(r["client_b"]), r["quantity"]): r
                for r in rows if r["checkpoint"] == t and r["client_b"] != "" and r["quantity"] in self.with_interval
                and r.get("layer", "") == group}

    def with_intervals(self, t: int, samples: Sequence[np.ndarray],
                       of_t: Mapping[tuple[int, int, str], AnalysisRow],
                       varying: Sequence[np.ndarray] | None = None,
                       transformed: TransformedSamples | None = None,
                       distances: Sequence[MarginalDistances] | None | bool = False,
                       mi_samples: Sequence[np.ndarray] | None = None,
                       ) -> dict[tuple[int, int, str], ChangeInputs]:
        """Fill the interval of every MI and distance row of checkpoint t (`of_t`: (a, b,
        quantity) -> row); return what their changes' intervals need. `varying`: each
        client's varying columns (:func:`varying_columns` of its samples) where known;
        `transformed`: the clients' transformed samples where made already; `distances`:
        the clients' :meth:`marginal_distances` where made already (None: not kept; False,
        the default: made here where the analysis keeps them, as for a resumed checkpoint).
        KSG's half-subsampling replicates come from those distances where they are kept
        (each half of the samples the estimate saw, noise included), else from the halves'
        samples, each with its own tie-breaking noise. `mi_samples`: the samples the MI
        estimates saw (:meth:`mi_samples`) where made already; `varying`, `transformed`
        and `distances` are theirs."""
        out: dict[tuple[int, int, str], ChangeInputs] = {}
        n_runs, k, incomplete, ci_level = self.n_runs, self.k, self.incomplete, self.ci_level
        if mi_samples is None:
            mi_samples = self.mi_samples(samples)[0]
        if varying is None:
            varying = [varying_columns(s) for s in mi_samples]
        if distances is False and any(get_estimator(q[3:]).distance_cache for _, _, q in of_t if q.startswith("mi_")):
            distances = self.marginal_distances(t, mi_samples, varying)
        for (a, b, q), row in of_t.items():
            if q in self.metrics:  # a distance or update metric: per-run values, normal interval of their mean
                values = out[a, b, q] = self.per_run(a, b, q, row.get("layer", ""), samples)
                defined = values[np.isfinite(values)]  # cosine_update: runs with non-zero updates
                if defined.size:
                    row["ci_low"], row["ci_high"] = mean_interval(defined, ci_level, **_mean_options(q, 1))[1:]
            elif np.isfinite(row["value"]) and len(self.indices[q[3:]]) >= 2:  # an MI estimate
                e = q[3:]
                entry = get_estimator(e)
                too_few = ""
                if entry.interval == "half-subsampling" and "k" in entry.arguments and n_runs // 2 <= k:
                    too_few = f"for k={k}"
                elif entry.kind == "bound" and n_runs // 2 < bound_min_runs():
                    too_few = f"for the bound ({bound_min_runs()} runs)"
                if too_few:
                    base = row["note"][:len(row["note"]) - len(incomplete)].rstrip("; ")  # incomplete: last
                    row["note"] = "; ".join(filter(None, [base, f"no interval: halves of {n_runs} runs are too "
                                                                f"few {too_few}", incomplete]))
                    continue
                shrunk = {"shrinkage": "ledoit-wolf"} if row["estimate_kind"] == "shrinkage" else None
                kept = self._kept_replicates(t, a, b, e, mi_samples, varying, distances)
                if kept is not None:  # KSG's halves from the distances the estimate used
                    out[a, b, q] = kept
                    row["ci_low"], row["ci_high"] = normal_interval(row["value"], kept.std(ddof=1), ci_level,
                                                                    df=len(kept) - 1)
                    continue
                x, y = mi_samples[a], mi_samples[b]
                # As the estimate: the rule on the unscaled parameters.
                x, y = _drop_constant(x, y, (varying[a], varying[b]))[:2]
                if entry.distance_cache and self.request.standardize:  # as the estimate itself (MI does not change with scale)
                    x, y = standardize_columns(x), standardize_columns(y)
                if (shrunk is None and level_method(e) in LEVEL_INTERVALS and entry.change_interval is not None
                        and change_method(e, n_runs, samples[a].shape[1] + samples[b].shape[1]) == entry.change_interval):
                    if transformed is None:
                        transformed = TransformedSamples(mi_samples, varying)
                    scores = transformed.pair(e, a, b)
                    # the change's se by the delta method: no resamples
                    out[a, b, q] = mi_influence(x, y, e, transformed=scores)
                    row["ci_low"], row["ci_high"] = normal_interval(row["value"], level_se(x, y, e, transformed=scores),
                                                                    ci_level)
                    continue
                replicates = out[a, b, q] = mi_replicates(x, y, e, self.indices[e], k=k, gaussian_kwargs=shrunk,
                                                          seed=(self.random_state, t, a, b, _stream(e), 1))
                if shrunk is None and level_method(e) in LEVEL_INTERVALS:  # a formula's se (intervals module)
                    row["ci_low"], row["ci_high"] = normal_interval(row["value"], level_se(x, y, e), ci_level)
                    continue
                row["ci_low"], row["ci_high"] = normal_interval(row["value"], replicates.std(ddof=1), ci_level,
                                                                df=len(replicates) - 1)
        self._pair_replicates.clear()  # any not taken (a row without an interval) is of no later use
        self._held.clear()
        return out

    def _kept_replicates(self, t: int, a: int, b: int, estimator: str, samples: Sequence[np.ndarray],
                         varying: Sequence[np.ndarray],
                         distances: Sequence[MarginalDistances] | None | bool) -> np.ndarray | None:
        """Pair (a, b)'s replicates of `estimator` from kept distances: the clients'
        (`distances`), those made with the pair's estimate, or the pair's made again (a
        checkpoint resumed from the journal); None where distances are not kept (the
        replicates are then estimated on each half's samples)."""
        if not get_estimator(estimator).distance_cache:
            return None
        if isinstance(distances, Sequence) and distances:
            return self._subset_replicates(estimator, (distances[a], distances[b]))
        made = self._pair_replicates.pop((t, a, b, estimator), None)
        if made is not None:
            return made
        if not (varying[a].any() and varying[b].any()):
            return None
        pair = self.pair_distances(t, a, b, samples[a], samples[b])
        return None if pair is None else self._subset_replicates(estimator, pair)

    def changes(self, t: int, group: str, of_t: Mapping[tuple[int, int, str], AnalysisRow],
                of_prev: Mapping[tuple[int, int, str], AnalysisRow], prev: Mapping[tuple[int, int, str], ChangeInputs],
                now: Mapping[tuple[int, int, str], ChangeInputs]) -> list[AnalysisRow]:
        """The rows delta_QUANTITY of checkpoint t: the paired change since t - 1 of every row
        of `of_t` (rows of t - 1: `of_prev`; what their intervals need: `prev` and `now`)."""
        added = []
        for (a, b, q), row in of_t.items():
            old = of_prev.get((a, b, q))
            if old is None:
                continue
            delta = row["value"] - old["value"]
            ci: Sequence[float] = (np.nan, np.nan)
            se, p = np.nan, np.nan
            notes: list[str] = []
            if (a, b, q) in now and (a, b, q) in prev:
                after, before = now[a, b, q], prev[a, b, q]
                if isinstance(after, InfluenceValues) and isinstance(before, InfluenceValues):
                    se = after.change_se(before)  # the delta method's se (the intervals module), normal quantile
                    ci = normal_interval(delta, se, self.ci_level)
                    p = change_test(delta, se)
                elif isinstance(after, InfluenceValues) or isinstance(before, InfluenceValues):
                    # cannot happen with one n and pair dimension (change_method); no se
                    notes.append("no se of the change: influence values at one checkpoint, resamples at the other")
                elif q in self.metrics:  # the mean of per-run differences: se = sd / sqrt(n), normal
                    change = after - before
                    if q in UPDATE_METRICS:  # runs whose cosine is defined at both checkpoints
                        change, notes = self._defined_change(t, change)
                    options = _mean_options(q, 2)
                    delta, *ci = mean_interval(change, self.ci_level, **options) if change.size else (np.nan,) * 3
                    if np.isfinite(ci[0]):
                        se = float(change.std(ddof=1) / np.sqrt(change.size))
                        p = change_test(delta, se, df=change.size - 1 if options else None)
                else:  # the sd of paired resampled changes, t with resamples - 1 degrees of freedom
                    change = after - before
                    se = float(change.std(ddof=1))
                    ci = normal_interval(delta, se, self.ci_level, df=len(change) - 1)
                    p = change_test(delta, se, df=len(change) - 1)
            shrinkage = [f"ledoit-wolf shrinkage at checkpoint {c}" for c, r in ((t - 1, old), (t, row))
                         if r["estimate_kind"] == "shrinkage"]
            bound = any(r["estimate_kind"] == "bound" for r in (old, row))
            kind = "shrinkage" if shrinkage else "bound" if bound else "plain"
            verdict = trend_verdict(*ci, shrinkage=bool(shrinkage), bound=bound)
            # An MI row without an estimate (NaN: parameters held, too few runs for a bound) has no change:
            # its verdict says so, not what the estimator's rows would be (a bound's, a shrinkage number's).
            empty = [(c, r) for c, r in ((t - 1, old), (t, row)) if q.startswith("mi_") and np.isnan(r["value"])]
            if empty:
                c, r = empty[0]
                why = no_estimate_reason(r)
                verdict = f"{NO_ESTIMATE} ({why})" if why else NO_ESTIMATE
                notes.append(f"no estimate at checkpoint {c}" + (f": {why}" if why else ""))
            note = "; ".join(shrinkage + notes)  # the change is always since checkpoint t - 1
            added.append(self.row(t, a, b, f"delta_{q}", delta, note=note, group=group, ci=ci, verdict=verdict,
                                  estimate_kind=kind, change_se=se, change_p=p))
        return added


    def _defined_change(self, t: int, change: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The per-run changes of an update metric where it is defined at t - 1 and t, and
        the note saying which runs are left out."""
        defined = change[np.isfinite(change)]
        if t - 1 == self.start:
            return defined, ["no change from the run's start: the cosine of its zero updates is undefined"]
        if defined.size < change.size:
            return defined, [f"paired over the {defined.size} of {change.size} runs whose updates are non-zero at both "
                             "checkpoints"]
        return defined, []


def _sketch_notes(dump: ParameterDump, cols: slice | np.ndarray) -> dict[str, str]:
    """What the rows of a tensor group (columns `cols`) of a sketched dump measure, by quantity
    ("mi" for every MI row); {} where the group holds no sketched tensor (a dump of the
    parameters, or tensors the sketch kept whole)."""
    sketch = dump.sketch
    if sketch is None:
        return {}
    columns = np.zeros(dump.n_params, dtype=bool)
    columns[cols] = True
    rows = [e.size for e in dump.layout
            if e.name.endswith(SKETCH_SUFFIX) and columns[e.offset:e.offset + e.size].any()]
    if not rows:
        return {}
    eps = 100 * sketch.error(min(rows), delta=0.05)
    what = f"sketch of the parameters ({sketch.describe()})"
    notes = {"mi": f"{what}: MI of projections, at most the parameters' (data processing)",
             "euclidean": f"from a {what}: within the JL error of the parameters' distances (each sketched tensor's "
                          f"within +-{eps:.2g} % per run with probability 95 %)",
             "cosine_update": f"from a {what}: the cosine of projected updates, within about +-{eps / 100:.2g} of "
                              "the parameters'"}
    for metric in ("manhattan", "chebyshev"):
        notes[metric] = (f"from a {what}: not the parameters' {metric} distance (a sketch keeps Euclidean "
                         "distances only)")
    return notes


def _movers_note(movers: list[RareMovers] | None, a: int, b: int, min_runs: int) -> str:
    """What a pair's MI rows say of the rare movers held (:meth:`CheckpointAnalysis.mi_samples`):
    how many per client, in how many runs they move, and the bound on the MI they can add."""
    if movers is None or not (movers[a].count or movers[b].count):
        return ""
    parts = [f"{side} {m.count} moving in {m.moving_runs} of {m.n_runs} runs"
             for side, m in (("client_a", movers[a]), ("client_b", movers[b])) if m.count]
    return (f"held parameters moving in fewer than {min_runs} runs at their most common value ({'; '.join(parts)}): "
            f"they can add at most {movers[a].bound_bits + movers[b].bound_bits:.2g} bits")


def _held_out(movers: list[RareMovers] | None, varying: Sequence[np.ndarray]) -> list[bool]:
    """Per client: whether every parameter of it that varies was held as a rare mover
    (:meth:`CheckpointAnalysis.mi_samples`), so that none is left varying; False for a client
    whose parameters do not vary at all (constant: exact) or where nothing is held."""
    if movers is None:
        return [False] * len(varying)
    return [bool(m.count) and not v.any() for m, v in zip(movers, varying)]


def _held_pair(held_out: Sequence[bool], varying: Sequence[np.ndarray], a: int, b: int, min_runs: int) -> str:
    """The note of pair (a, b)'s MI rows where they have no estimate because every varying
    parameter of a client is held (:func:`mianalysis.analysis.reading.held_note`), else "".
    A client whose parameters are constant makes the MI 0 exactly, held parameters or not:
    "" then (the constant rule's row)."""
    constant = [not varying[c].any() and not held_out[c] for c in (a, b)]
    if any(constant) or not (held_out[a] or held_out[b]):
        return ""
    who = " and ".join(side for side, c in (("client_a", a), ("client_b", b)) if held_out[c])
    return held_note(who, min_runs)


def _no_estimate(estimator: str) -> dict[str, Any]:
    """The row fields of an estimate that could not be made (value NaN)."""
    return {"value": np.nan, "null_mean": np.nan, "null_std": np.nan, "p_value": np.nan, "note": "",
            "estimate_kind": get_estimator(estimator).kind, "outside_calibration": False, "null_method": "none",
            "regime": ""}


def _choose(n_runs: int, keep_x: np.ndarray, keep_y: np.ndarray) -> list[Choice]:
    """The auto rule's choices (:func:`choose`) for a pair whose varying columns (by the constant
    rule every estimator applies, :func:`mianalysis._internal.validation.varying_columns`) are `keep_x`
    and `keep_y`: the joint dimension counts these."""
    return choose(n_runs, int(keep_x.sum() + keep_y.sum()))


def _stream(estimator: str) -> int:
    """The random stream of `estimator`'s rows: its registry entry's (set for every entry)."""
    return cast(int, get_estimator(estimator).stream)


def _exact_mi(dump: ParameterDump, cols: np.ndarray | slice) -> Callable[[int, int, int], float] | None:
    """A function (iteration, a, b) -> the exact MI in bits of clients a and b, when the dump
    was sampled from a task that knows it (registered with
    :func:`mianalysis.dumps.knowledge.register_task_knowledge`) and every parameter of an
    unsketched dump is analysed; else None."""
    meta = dump.meta
    if not isinstance(meta, dict) or dump.sketch is not None:  # a sketch's MI is not the parameters'
        return None
    if not np.array_equal(np.arange(dump.n_params)[cols], np.arange(dump.n_params)):
        return None
    return exact_mi_of(meta)


def _metric_note(name: str, values: np.ndarray) -> str:
    """The note of a recorded metric's row: how many runs hold NaN (not recorded, or a
    failed evaluation) or an infinity (e.g. an overflowing loss at finite parameters)."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return ""
    return (f"{name} is not finite in {int(bad.sum())} of {values.size} runs ({int(np.isnan(values).sum())} NaN, "
            f"{int(np.isinf(values).sum())} inf)")


def _check_finite(dump: ParameterDump, t: int, samples: Sequence[np.ndarray], cols: np.ndarray | slice) -> None:
    """DumpError naming the client, checkpoint, runs and tensor of a non-finite sample (a
    dump written by software that did not check them; see ParameterDump.verify)."""
    from ..dumps import DumpError, find_nonfinite

    for c, s in enumerate(samples):
        where = find_nonfinite(s[None], [dump.checkpoints[t]], checkpoints=[t], layout=dump.layout, columns=cols)
        if where is not None:
            raise DumpError(f"dump {dump.path}: client {dump.clients[c]!r} has non-finite parameters at "
                            f"{where.describe()}; the estimators and distances need finite samples (`mianalysis "
                            "verify` checks a whole dump)")


def _mean_options(quantity: str, width: float) -> dict[str, Any]:
    """How :func:`mean_interval` treats a metric's mean (`width` 1) or its change (2): an
    update metric (a mean cosine, in [-1, 1]) gets Student's t with runs - 1 degrees of
    freedom, clipped to [-width, width]; a distance the normal interval, unclipped."""
    return {"t": True, "bounds": (-width, width)} if quantity in UPDATE_METRICS else {}
