"""The additive-noise model's predictions for every client pair and step of an analysis table.

Glue between a dump, an analysis table (rows as :func:`mianalysis.analysis.analyze` returns
or :func:`mianalysis.analysis.read_table` reads) and :func:`mianalysis.additive_model_mi`:
for each pair and each step between consecutive checkpoints of the table, the estimated MI
change beside the change the additive model predicts. The numbers come from
:mod:`mianalysis.analysis.studies.additive`; this module only reads samples and arranges rows,
a typed table, :data:`ADDITIVE_TABLE` (written with its sidecar by `out`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import numpy as np

from ..schema import Column
from ..study_table import IntervalLevel, StudySchema, StudyTable
from .additive import additive_model_test

if TYPE_CHECKING:  # names used only in type hints
    from ...dumps import ParameterDump

__all__ = ["additive_prediction_rows", "PREDICTION_COLUMNS", "AdditivePredictionRow", "ADDITIVE_TABLE"]


class AdditivePredictionRow(TypedDict):
    """One row of :func:`additive_prediction_rows`: one client pair (and layer) over one step
    between consecutive checkpoints. The fields, in the CSV's order, are the columns of
    :data:`ADDITIVE_TABLE`."""

    checkpoint_from: Annotated[int, Column(meaning="The step's first checkpoint (index in the dump).")]
    checkpoint: Annotated[int, Column(meaning="The step's later checkpoint.")]
    iteration_from: Annotated[int, Column(unit="iterations", meaning="Training iteration of `checkpoint_from`.")]
    iteration: Annotated[int, Column(unit="iterations", meaning="Training iteration of `checkpoint`.")]
    client_a: Annotated[str, Column(meaning="The first client of the pair.")]
    client_b: Annotated[str, Column(meaning="The second client of the pair.")]
    layer: Annotated[str, Column(meaning="The tensor of the rows (empty: the whole parameter vector).")]
    estimated_change: Annotated[float, Column(unit="bits", meaning="The table's MI at `checkpoint` minus at "
                                              "`checkpoint_from`.")]
    estimated_ci_low: Annotated[float, Column(unit="bits", meaning="Lower end of the estimated change's interval "
                                              "(the table's `delta_` row); NaN without one.")]
    estimated_ci_high: Annotated[float, Column(unit="bits", meaning="Upper end of that interval.")]
    predicted_change: Annotated[float, Column(unit="bits", meaning="The change the additive-noise model predicts; "
                                              "NaN where the samples fit no additive model.")]
    mi_start: Annotated[float, Column(unit="bits", meaning="The model's MI at `checkpoint_from`.")]
    mi_predicted: Annotated[float, Column(unit="bits", meaning="The model's MI at `checkpoint`.")]
    distance_change: Annotated[float, Column(unit="as the samples", meaning="The change of the clients' distance the "
                                             "model implies.")]
    method: Annotated[str, Column(meaning="\"covariance\", \"isotropic\" (the fallback with too few runs), or "
                                  "empty without a prediction.", choices=("covariance", "isotropic", ""))]
    difference_ci_low: Annotated[float, Column(unit="bits", meaning="Lower end of the paired bootstrap interval of "
                                               "the estimated minus the predicted change.")]
    difference_ci_high: Annotated[float, Column(unit="bits", meaning="Upper end of that interval.")]
    verdict: Annotated[str, Column(meaning="\"contradicted\" (the interval excludes 0), \"not contradicted\", "
                                   "\"not decided\", or empty without a prediction.")]
    n_runs: Annotated[int, Column(unit="runs", meaning="The runs the step is computed from.")]
    note: Annotated[str, Column(meaning="Parameters left out, and why a prediction is missing or undecided.")]


#: The table of :func:`additive_prediction_rows`: :class:`AdditivePredictionRow`'s columns, format version 1.
#: Each row's difference interval, and the verdict read from it, holds at the table's
#: ``level`` for that step alone (the sidecar's ``intervals`` says so).
ADDITIVE_TABLE = StudySchema("additive_check", AdditivePredictionRow, 1,
                             "The estimated and the additive-noise model's predicted MI change of one client pair "
                             "over one step.",
                             intervals=IntervalLevel(
                                 "level", (("difference_ci_low", "difference_ci_high"),),
                                 "nothing: each step's `verdict` is read from its own difference interval, not "
                                 "corrected over the table's steps (`estimated_ci_low` and `estimated_ci_high` are "
                                 "the analysis table's, at its ci_level, also per step)"))
#: The columns of :data:`ADDITIVE_TABLE`, in order.
PREDICTION_COLUMNS = tuple(c.name for c in ADDITIVE_TABLE.columns)


def additive_prediction_rows(rows: Sequence[Mapping[str, Any]], dump: ParameterDump, *, quantity: str = "mi_gaussian",
                             fallback: str | None = "isotropic", n_resamples: int = 20, level: float = 0.95,
                             random_state: int | None = 0, out: str | os.PathLike | None = None) -> list[dict]:
    """Estimated and additive-model MI changes for every pair and step of a table.

    Parameters
    ----------
    rows : list of dict
        An analysis table; the rows of `quantity` give the estimated MI at each checkpoint
        of each client pair (and layer).
    dump : ParameterDump
        The dump the table was computed from; its samples give the predictions.
    quantity : str, default="mi_gaussian"
        The MI rows whose change is estimated. The prediction mirrors the Gaussian
        estimator, so "mi_gaussian" is the like-for-like comparison.
    fallback : {None, "isotropic"}, default="isotropic"
        Passed to :func:`mianalysis.additive_model_mi`: with too few runs for the full
        covariances (``runs <= 2 x parameters``) the isotropic version is used.
    n_resamples : int, default=20
        Bootstrap resamples of :func:`mianalysis.additive_model_test`, which gives the verdict.
    level : float, default=0.95
        Confidence level of the difference's interval, for each step alone: the verdicts
        are not corrected over the table's steps (the written table's sidecar, ``intervals``,
        gives the level at which all of them hold together by Bonferroni).
    random_state : None or int, default=0
        Seeds the resampling (the same seed for every step).
    out : str or path, optional
        Also write the rows as the typed table :data:`ADDITIVE_TABLE` to this CSV, with its
        sidecar ``OUT.json`` (these settings, format version, provenance, ``intervals``;
        :class:`~mianalysis.analysis.study_table.StudyTable`, which reads it back).

    Returns
    -------
    list of dict
        One row per pair, layer and step between consecutive checkpoints of the table,
        with the keys of `PREDICTION_COLUMNS`, in bits. `estimated_change` is the table's
        value at the later checkpoint minus the earlier one. Parameters constant over the
        runs at either checkpoint (for either client) are left out of the prediction, and
        `note` says how many. Where the samples fit no additive model (the shared start
        estimated first does not fit inside the later covariances) the prediction is NaN
        and `note` gives the reason: the data contradict the model outright.
        `estimated_ci_low` and `estimated_ci_high` are the confidence interval of the
        estimated change, from the table's paired ``delta_QUANTITY`` row (NaN for a table
        without intervals). `difference_ci_low` and `difference_ci_high` are the paired
        bootstrap interval of the estimated change minus the (bias-corrected) predicted
        change, and `verdict` is :func:`mianalysis.additive_model_test`'s ("contradicted"
        when that interval excludes 0, "not contradicted", or "not decided" when the
        prediction failed on more than half of the resamples, the reason in `note`; empty
        when the prediction is missing). The verdict is computed from the samples, so it
        is given for tables without intervals too.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump, analyze
    >>> from mianalysis.analysis.studies.additive_table import additive_prediction_rows
    >>> rng = np.random.default_rng(0)
    >>> theta0 = rng.standard_normal((2000, 3))
    >>> noise = lambda sd: sd * rng.standard_normal((2, 2000, 3))
    >>> scale = np.array([0.5, 1.0])[:, None, None]          # noise sd 0.5 then 1
    >>> dump = ParameterDump.from_arrays("d", {"a": theta0 + scale * noise(1.0), "b": theta0 + scale * noise(1.0)})
    >>> rows = analyze(dump, estimators=("gaussian",))
    >>> [row] = additive_prediction_rows(rows, dump)
    >>> row["client_a"], row["client_b"], row["method"]
    ('a', 'b', 'covariance')
    >>> round(row["estimated_change"], 2), round(row["predicted_change"], 2)   # exact: -1.59
    (-1.66, -1.6)
    """
    deltas = {(r["client_a"], r["client_b"], r.get("layer", ""), r["checkpoint"]): r for r in rows
              if r["quantity"] == f"delta_{quantity}"}
    by_key: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["quantity"] == quantity and row["client_b"] != "":
            key = (row["client_a"], row["client_b"], row.get("layer", ""))
            by_key.setdefault(key, []).append(row)
    if not by_key:
        raise ValueError(f"`rows` hold no pair rows of quantity {quantity!r}")
    found = []
    for (a, b, layer), series in by_key.items():
        series = sorted(series, key=lambda r: r["checkpoint"])
        for first, later in zip(series, series[1:]):
            row = _step(dump, a, b, layer, first, later, fallback, n_resamples, level, random_state)
            delta = deltas.get((a, b, layer, later["checkpoint"]), {})
            low, high = float(delta.get("ci_low", math.nan)), float(delta.get("ci_high", math.nan))
            row["estimated_ci_low"], row["estimated_ci_high"] = low, high
            found.append({column: row[column] for column in PREDICTION_COLUMNS})
    if out is not None:
        StudyTable(ADDITIVE_TABLE, found, settings={"quantity": quantity, "fallback": fallback,
                                                    "n_resamples": n_resamples, "level": level,
                                                    "random_state": random_state, "dump": str(dump.path)}).write(out)
    return found


def _step(dump: ParameterDump, a: str, b: str, layer: str, first: Mapping[str, Any], later: Mapping[str, Any],
          fallback: str | None, n_resamples: int, level: float, random_state: int | None) -> dict[str, Any]:
    group = layer or None
    t0, t1 = first["checkpoint"], later["checkpoint"]
    arrays = [np.asarray(dump.samples(c, index=t, layer=group), dtype=np.float64) for t in (t0, t1) for c in (a, b)]
    varies = np.logical_and.reduce([arr.max(axis=0) > arr.min(axis=0) for arr in arrays])
    notes = []
    if not varies.all():
        notes.append(f"{int((~varies).sum())} constant parameter(s) left out")
        arrays = [arr[:, varies] for arr in arrays]
    row = {"checkpoint_from": t0, "checkpoint": t1, "iteration_from": first["iteration"],
           "iteration": later["iteration"], "client_a": a, "client_b": b, "layer": layer,
           "estimated_change": float(later["value"] - first["value"]), "n_runs": arrays[0].shape[0]}
    nan = {"predicted_change": math.nan, "mi_start": math.nan, "mi_predicted": math.nan,
           "distance_change": math.nan, "method": "", "difference_ci_low": math.nan,
           "difference_ci_high": math.nan, "verdict": ""}
    if arrays[0].shape[1] == 0:
        notes.append("no parameter varies")
        return {**row, **nan, "note": "; ".join(notes)}
    x0, y0, x1, y1 = arrays
    try:
        test = additive_model_test(x0, y0, x1, y1, n_resamples=n_resamples, level=level,
                                   random_state=random_state, fallback=fallback)
    except ValueError as exc:
        if "fit inside" not in str(exc):
            raise
        notes.append(str(exc))
        return {**row, **nan, "note": "; ".join(notes)}
    pred = test.prediction
    if test.reason:
        notes.append(test.reason)
    return {**row, "predicted_change": pred.predicted_change, "mi_start": pred.mi_start,
            "mi_predicted": pred.mi_predicted, "distance_change": pred.distance_change,
            "method": pred.method, "difference_ci_low": test.ci_low, "difference_ci_high": test.ci_high,
            "verdict": test.verdict, "note": "; ".join(notes)}
