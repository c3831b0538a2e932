"""Dependence between FL clients that the global model does not explain.

Replicate runs of a federated simulation share nothing but their settings, yet within a
replicate every client starts each round from the same broadcast global model, so the
clients' local models are dependent across replicates mostly through it. Given the
recorded local models and global models (:func:`mianalysis.federated.record_replicates`
with ``record_global=True``), this module measures, per round and pair of clients, the
unconditional MI of the local models, their MI given the global model the round started
from, and the MI of the clients' updates relative to that model. Its rows are a typed
table, :data:`DEPENDENCE_TABLE` (written with its sidecar by `out`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from itertools import combinations
from typing import Annotated, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..._internal.validation import check_choice, varying_columns
from ..._internal.normal_interval import check_level, normal_interval
from ...estimators import gaussian_cmi, gaussian_mi, gaussian_mi_null
from ...estimators.gaussian_se import canonical_correlations, wishart_mi_se
from ..inference.familywise import adjust, familywise_settings
from ..options import Correction, Holm, check_correction
from ..schema import Column
from ..study_table import IntervalLevel, StudySchema, StudyTable

QUANTITIES = ("mi_local", "cmi_given_global", "mi_update")
NULLS = ("analytic", None)
#: The columns of uncertainty every row has besides the estimate ``value``.
UNCERTAINTY_COLUMNS = ("se", "ci_low", "ci_high", "null_mean", "null_std", "p_value")
#: The families ``p_adjusted`` may be corrected over (the `family` of the `correction`):
#: "table" (every row of the table with a p-value), "pair" (one client pair's rounds of
#: one quantity) or "cell" (every pair's rounds of one quantity).
FAMILIES = ("table", "pair", "cell")

__all__ = ["dependence_given_global", "QUANTITIES", "UNCERTAINTY_COLUMNS", "FAMILIES", "conditional_mi_uncertainty",
           "DependenceRow", "DEPENDENCE_TABLE"]

_MI = "bits or nats (the sidecar's settings[\"units\"])"


class DependenceRow(TypedDict):
    """One row of :func:`dependence_given_global`: one quantity of one client pair in one round.
    The fields, in the CSV's order, are the columns of :data:`DEPENDENCE_TABLE`."""

    iteration: Annotated[int, Column(unit="rounds", meaning="The round t (>= 1): the local models at checkpoint t.")]
    global_checkpoint: Annotated[int, Column(meaning="The checkpoint of the global model the round started from "
                                             "(t - 1).")]
    client_a: Annotated[str, Column(meaning="The first client of the pair.")]
    client_b: Annotated[str, Column(meaning="The second client of the pair.")]
    quantity: Annotated[str, Column(meaning="\"mi_local\" (the local models' MI), \"cmi_given_global\" (their MI "
                                    "given the global model) or \"mi_update\" (the MI of their updates).",
                                    choices=QUANTITIES)]
    value: Annotated[float, Column(unit=_MI, meaning="The Gaussian estimate.")]
    n_runs: Annotated[int, Column(unit="replicates", meaning="The replicate runs it is estimated from.")]
    n_features: Annotated[int, Column(unit="parameters", meaning="The recorded parameters of each model.")]
    se: Annotated[float, Column(unit=_MI, meaning="Standard error (Wishart, Gaussian data); NaN with shrinkage.")]
    ci_low: Annotated[float, Column(unit=_MI, meaning="Lower end of the normal interval (settings[\"ci_level\"]).")]
    ci_high: Annotated[float, Column(unit=_MI, meaning="Upper end of the normal interval.")]
    null_mean: Annotated[float, Column(unit=_MI, meaning="Mean of the analytic (Wilks' Lambda) null; NaN without "
                                       "one.")]
    null_std: Annotated[float, Column(unit=_MI, meaning="Sd of the analytic null; NaN without one.")]
    p_value: Annotated[float, Column(meaning="One-sided p-value of the estimate under the null; NaN without one.")]
    p_adjusted: Annotated[float, Column(meaning="`p_value` adjusted over its family (settings[\"familywise\"]: Holm "
                                        "over every row of the table by default); NaN where `p_value` is. Absent "
                                        "from tables written before it.", default=np.nan)]


#: The table of :func:`dependence_given_global`: :class:`DependenceRow`'s columns, format version 1
#: (`p_adjusted`, which came later, may be absent). Each row's interval holds at the table's
#: ``ci_level`` alone; the family-wise statement is `p_adjusted`'s.
DEPENDENCE_TABLE = StudySchema("dependence_given_global", DependenceRow, 1,
                               "One quantity (MI, MI given the global model, MI of the updates) of one client pair in "
                               "one round, with its uncertainty.",
                               intervals=IntervalLevel("ci_level", (("ci_low", "ci_high"),),
                                                       "the null tests are corrected over their family in "
                                                       "`p_adjusted` (settings[\"familywise\"]); the intervals are "
                                                       "not"))


def dependence_given_global(local: Mapping[str, ArrayLike], global_model: ArrayLike, *, units: str = "bits",
                            bias_correction: bool = True, shrinkage: str | None = None, ci_level: float = 0.95,
                            null: str | None = "analytic", correction: Correction = Holm("table"),
                            out: str | os.PathLike | None = None) -> list[dict]:
    r"""Per round and pair of clients: MI of the local models, MI given the broadcast
    global model, and MI of the model updates (all with the Gaussian estimator).

    Round ``t`` (``t >= 1``) starts from the global model at checkpoint ``t - 1`` (the
    server's model after round ``t - 1``; checkpoint 0 is the initial model), which the
    clients train to their local models at checkpoint ``t``. With
    :math:`\theta_k^t` client k's local model and :math:`g^{t-1}` that global model:

    - ``mi_local``: :math:`I(\theta_a^t; \theta_b^t)`, what
      :func:`mianalysis.analyze` reports (:func:`mianalysis.gaussian_mi`);
    - ``cmi_given_global``: :math:`I(\theta_a^t; \theta_b^t \mid g^{t-1})`
      (:func:`mianalysis.gaussian_cmi`);
    - ``mi_update``: :math:`I(\theta_a^t - g^{t-1}; \theta_b^t - g^{t-1})`.

    If the recorded vectors hold the whole model, the local trainings of one round are
    independent given the model they start from (each client has its own data and data
    order), so ``cmi_given_global`` is 0 in truth; for part of a model (one layer), the
    rest of the global model is not conditioned on and may leave dependence.

    Every row also has the estimate's uncertainty, from formulas for Gaussian data
    (:func:`conditional_mi_uncertainty`): a standard error ``se`` (the Wishart one of
    :func:`mianalysis.estimators.gaussian_se.wishart_mi_se`) and the normal interval
    ``value +- z se`` at `ci_level`; and the analytic null of the estimate under
    independence (``mi_local``, ``mi_update``) or conditional independence given
    :math:`g^{t-1}` (``cmi_given_global``), Wilks' Lambda
    (:func:`mianalysis.gaussian_mi_null`: exact for ``n_features <= 2``, Bartlett's
    chi-square approximation :math:`-(n - 1 - (p + q + 1)/2)\log\Lambda \sim \chi^2_{pq}`
    otherwise, with MI :math:`= -\tfrac12\log\Lambda` nats before the bias correction).
    For ``cmi_given_global`` both use the MI of the residuals of the two local models
    after their least-squares regression on :math:`g^{t-1}`, with ``n_runs - k`` runs (k
    the non-constant features of :math:`g^{t-1}`): the partial Wilks' Lambda.

    Parameters
    ----------
    local : mapping of str to array-like of shape (n_checkpoints, n_runs, n_features)
        Each client's local model per checkpoint (round) and run (replicate).
    global_model : array-like of shape (n_checkpoints, n_runs, n_features)
        The global model per checkpoint: at ``t`` the model after round ``t``.
    units : {"bits", "nats"}, default="bits"
    bias_correction : bool, default=True
        As in :func:`mianalysis.gaussian_cmi`.
    shrinkage : {None, "ledoit-wolf"}, default=None
        As in :func:`mianalysis.gaussian_cmi`; without it ``cmi_given_global`` needs
        ``n_runs > 3 n_features`` (the joint dimension). Estimates with shrinkage are
        biased, and have no standard error or analytic null: those columns are NaN.
    ci_level : float, default=0.95
        Level of the interval ``ci_low`` to ``ci_high``, in (0, 1).
    null : {"analytic", None}, default="analytic"
        "analytic": the Wilks' Lambda null above. None: no null; the rows keep the columns
        ``null_mean``, ``null_std``, ``p_value`` and ``p_adjusted`` (so that every table
        has the same columns), as NaN.
    correction : Holm, BenjaminiHochberg or NoCorrection, default=Holm("table")
        How ``p_adjusted`` is made from the rows' ``p_value``
        (:func:`mianalysis.analysis.inference.familywise.adjust`): Holm's step-down
        adjustment (family-wise error rate), Benjamini-Hochberg's (false discovery rate) or
        none (``p_adjusted`` is ``p_value``), over each `family` of :data:`FAMILIES`:
        "table" (every row with a p-value: one family), "pair" (one client pair's rounds
        of one quantity) or "cell" (every pair's rounds of one quantity). A row without a
        p-value (NaN) is in no family and keeps NaN. Rejecting the rows whose
        ``p_adjusted`` is at most alpha keeps the chance of any false rejection (Holm) or
        the expected share of false ones (Benjamini-Hochberg) among the family's rows at
        most alpha.
    out : str or path, optional
        Also write the rows as the typed table :data:`DEPENDENCE_TABLE` to this CSV, with
        its sidecar ``OUT.json`` (these settings, the correction as ``settings["familywise"]``:
        ``method``, ``family`` and ``alpha`` = 1 - `ci_level`; format version, provenance,
        and ``intervals``: the intervals' level, per row;
        :class:`~mianalysis.analysis.study_table.StudyTable`, which reads it back).

    Returns
    -------
    rows : list of dict
        One per round ``t >= 1``, pair (in the order of `local`) and quantity, with keys
        ``iteration`` (t), ``global_checkpoint`` (t - 1), ``client_a``, ``client_b``,
        ``quantity`` (one of :data:`QUANTITIES`), ``value`` (in `units`), ``n_runs``,
        ``n_features``, then :data:`UNCERTAINTY_COLUMNS`: ``se``, ``ci_low``, ``ci_high``
        (in `units`), ``null_mean``, ``null_std`` (in `units`; the mean is 0 with
        `bias_correction`), ``p_value`` (one-sided: an estimate at least this large
        under the null) and ``p_adjusted`` (`correction`'s over its family). The interval
        ``ci_low`` to ``ci_high`` holds at `ci_level` for its row alone; what holds
        family-wise is ``p_adjusted``.

    Raises
    ------
    ValueError
        If the arrays are not 3-D or their shapes differ (naming the argument), if there
        are fewer than two checkpoints or two clients, for a `ci_level` outside (0, 1),
        an unknown `null` or a `correction` family not in :data:`FAMILIES`, or from the
        estimators (too few runs for the dimension, non-finite values).
    TypeError
        If `correction` is not Holm, BenjaminiHochberg or NoCorrection.

    Examples
    --------
    Two clients move from the global model by updates that share one component and are
    independent of the global model: the updates have correlation 1/2, so
    ``mi_update = cmi_given_global = -0.5 log(1 - 1/4) = 0.14`` nats, while the local
    models also share the global model (correlation 2/3, ``mi_local = -0.5 log(1 - 4/9) =
    0.29`` nats):

    >>> import numpy as np
    >>> from mianalysis.analysis.studies.global_dependence import dependence_given_global
    >>> rng = np.random.default_rng(0)
    >>> g = rng.standard_normal((2, 50_000, 1))          # checkpoints 0 and 1
    >>> shared, e1, e2 = rng.standard_normal((3, 50_000, 1))
    >>> local = {"a": np.stack([g[0], g[0] + shared + e1]), "b": np.stack([g[0], g[0] + shared + e2])}
    >>> rows = dependence_given_global(local, g, units="nats")
    >>> {r["quantity"]: round(r["value"], 2) for r in rows}   # exact: 0.29, 0.14, 0.14
    {'mi_local': 0.29, 'cmi_given_global': 0.14, 'mi_update': 0.14}
    >>> {r["quantity"]: (round(r["ci_low"], 3), round(r["ci_high"], 3)) for r in rows}   # 95 % intervals
    {'mi_local': (0.288, 0.3), 'cmi_given_global': (0.14, 0.149), 'mi_update': (0.14, 0.149)}
    >>> [r["p_value"] for r in rows]    # Wilks' Lambda null: independence rejected
    [0.0, 0.0, 0.0]
    >>> [r["p_adjusted"] for r in rows]  # Holm over the table's three tests: rejected still
    [0.0, 0.0, 0.0]
    """
    ci_level = check_level(ci_level)
    check_choice(null, "null", NULLS)
    correction = check_correction(correction, FAMILIES)
    if len(local) < 2:
        raise ValueError(f"`local` must hold at least two clients; got {len(local)}")
    g = _check_stack(global_model, "global_model")
    if g.shape[0] < 2:
        raise ValueError(f"`global_model` needs at least two checkpoints (rounds 0 and 1); got {g.shape[0]}")
    models = {str(c): _check_stack(v, f"local[{c!r}]", g.shape) for c, v in local.items()}
    rows = []
    for t in range(1, g.shape[0]):
        start = g[t - 1]
        for a, b in combinations(models, 2):
            xa, xb = models[a][t], models[b][t]
            values = {
                "mi_local": gaussian_mi(xa, xb, units=units, bias_correction=bias_correction, shrinkage=shrinkage),
                "cmi_given_global": gaussian_cmi(xa, xb, start, units=units, bias_correction=bias_correction,
                                                 shrinkage=shrinkage),
                "mi_update": gaussian_mi(xa - start, xb - start, units=units, bias_correction=bias_correction,
                                         shrinkage=shrinkage),
            }
            conditioning = {"mi_local": None, "cmi_given_global": start, "mi_update": None}
            pairs = {"mi_local": (xa, xb), "cmi_given_global": (xa, xb), "mi_update": (xa - start, xb - start)}
            for q in QUANTITIES:
                row = {"iteration": t, "global_checkpoint": t - 1, "client_a": a, "client_b": b,
                       "quantity": q, "value": values[q], "n_runs": g.shape[1], "n_features": g.shape[2]}
                if shrinkage is None:
                    row.update(conditional_mi_uncertainty(*pairs[q], conditioning[q], values[q], units=units,
                                                          bias_correction=bias_correction, ci_level=ci_level,
                                                          null=null))
                else:
                    row.update(dict.fromkeys(UNCERTAINTY_COLUMNS, np.nan))
                rows.append(row)
    _adjust_rows(rows, correction)
    if out is not None:
        familywise = familywise_settings(correction.method, correction.family, round(1 - ci_level, 12))
        StudyTable(DEPENDENCE_TABLE, rows, settings={"units": units, "bias_correction": bias_correction,
                                                     "shrinkage": shrinkage, "ci_level": ci_level, "null": null,
                                                     "estimator": "gaussian", "familywise": familywise}).write(out)
    return rows


def _adjust_rows(rows: list[dict], correction: Correction) -> None:
    """Set each row's ``p_adjusted``: its ``p_value`` adjusted by `correction` over its
    family (:data:`FAMILIES`); NaN p-values stay NaN and count in no family."""
    keys = {"table": (), "cell": ("quantity",), "pair": ("quantity", "client_a", "client_b")}[correction.family]
    families: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        families.setdefault(tuple(row[k] for k in keys), []).append(i)
    for members in families.values():
        adjusted = adjust([rows[i]["p_value"] for i in members], correction.method)
        for i, p in zip(members, adjusted):
            rows[i]["p_adjusted"] = float(p)


def conditional_mi_uncertainty(x: ArrayLike, y: ArrayLike, z: ArrayLike | None, estimate: float, *,
                               units: str = "bits", bias_correction: bool = True, ci_level: float = 0.95,
                               null: str | None = "analytic") -> dict:
    r"""Standard error, normal interval and analytic null of a Gaussian (conditional) MI
    estimate of `x` and `y` given `z` (None or no columns: the MI).

    The MI of x and y given k Gaussian conditioning variables z is the MI of their residuals
    after the least-squares regression on z (with an intercept), whose scatter matrix is
    Wishart with ``n - 1 - k`` degrees of freedom; the plug-in and the bias-corrected
    :func:`mianalysis.gaussian_cmi` are those of the residuals' MI from ``n - k`` runs. So
    the standard error is :func:`mianalysis.estimators.gaussian_se.wishart_mi_se` of the
    residuals' canonical correlations with ``n - k`` runs, and the null, conditional
    independence, is :func:`mianalysis.gaussian_mi_null` of ``(n - k, p, q)`` (the partial
    Wilks' Lambda), k = 0 for the MI.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, p) and (n_samples, q)
    z : array-like of shape (n_samples, k), or None
    estimate : float
        :func:`mianalysis.gaussian_cmi` (or :func:`mianalysis.gaussian_mi`) of the same
        samples, `units` and `bias_correction`, without shrinkage.
    units : {"bits", "nats"}, default="bits"
    bias_correction : bool, default=True
    ci_level : float, default=0.95
    null : {"analytic", None}, default="analytic"
        None: ``null_mean``, ``null_std`` and ``p_value`` are NaN.

    Returns
    -------
    columns : dict
        ``se``, ``ci_low``, ``ci_high``, ``null_mean``, ``null_std`` (in `units`) and
        ``p_value``. Constant columns are dropped as the estimators do; if none of `x` or of
        `y` varies, the estimate is exactly 0: se 0, null mean and sd 0, p-value 1.

    Examples
    --------
    x and y share only z: given z they are independent, and the estimate is within the null.

    >>> import numpy as np
    >>> from mianalysis import gaussian_cmi
    >>> from mianalysis.analysis.studies.global_dependence import conditional_mi_uncertainty
    >>> rng = np.random.default_rng(0)
    >>> z, e1, e2 = rng.standard_normal((3, 200, 1))
    >>> x, y = z + e1, z + e2
    >>> out = conditional_mi_uncertainty(x, y, z, gaussian_cmi(x, y, z, units="nats"), units="nats")
    >>> round(out["null_mean"], 6), round(out["null_std"], 4), out["p_value"] > 0.05
    (0.0, 0.0036, True)
    """
    ci_level = check_level(ci_level)
    check_choice(null, "null", NULLS)
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x[:, varying_columns(x)], y[:, varying_columns(y)]
    n, p = x.shape
    q = y.shape[1]
    out = dict.fromkeys(UNCERTAINTY_COLUMNS, np.nan)
    if p == 0 or q == 0:  # the estimate is exactly 0
        out.update(se=0.0, ci_low=float(estimate), ci_high=float(estimate))
        if null is not None:
            out.update(null_mean=0.0, null_std=0.0, p_value=1.0)
        return out
    k = 0
    if z is not None:
        z = np.asarray(z, dtype=np.float64).reshape(n, -1)
        z = z[:, varying_columns(z)]
        k = z.shape[1]
        if k:
            x, y = _residuals(x, z), _residuals(y, z)
    se = wishart_mi_se(canonical_correlations(x, y), n - k, p, q, units=units)
    out["se"] = se
    out["ci_low"], out["ci_high"] = normal_interval(estimate, se, ci_level)
    if null == "analytic":
        law = gaussian_mi_null(n - k, p, q, units=units, bias_correction=bias_correction)
        out.update(null_mean=law.mean, null_std=law.std, p_value=float(law.p_value(estimate)))
    return out


def _residuals(a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Residuals of the columns of `a` after their least-squares regression on `z` and an
    intercept."""
    design = np.hstack([np.ones((len(z), 1)), z - z.mean(axis=0)])
    coef, *_ = np.linalg.lstsq(design, a, rcond=None)
    return a - design @ coef


def _check_stack(a: ArrayLike, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 3:
        raise ValueError(f"`{name}` must be a 3-D array (n_checkpoints, n_runs, n_features); got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"`{name}` must have the shape of `global_model` {shape}; got {arr.shape}")
    return arr
