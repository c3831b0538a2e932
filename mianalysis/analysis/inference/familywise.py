"""Verdicts that control the error over a family of tests: Holm and Benjamini-Hochberg.

A table holds many tests: every step's change of every quantity and client pair
(``delta_*`` rows, their ``change_p``), and every MI estimate's null test (``p_value``).
A per-step verdict at 95 % ("rising" when the step's interval excludes 0) errs in 5 % of
the null steps it looks at, so a finding read from the steps of a pair, or of a cell's
pairs, needs a correction over them. This module adjusts the p-values over a *family*
and makes each verdict from the adjusted p-value:

- families: ``"pair"`` (one client pair's steps of one quantity, and layer: the tests
  behind a statement about that pair, such as "MI of pair 0-1 rises") or ``"cell"`` (all
  pairs x steps of one quantity in the table: the tests behind a statement counting
  pairs, such as "MI rises for 2 of 3 pairs");
- methods: ``"holm"`` (Holm 1979, Scand. J. Statist. 6(2), 65-70: step-down Bonferroni,
  controls the family-wise error rate, the chance of any false verdict, under any
  dependence between the tests), ``"bh"`` (Benjamini and Hochberg 1995, J. R. Stat. Soc.
  B 57(1), 289-300: controls the false discovery rate, the expected share of false
  verdicts among those made, for independent or positively dependent tests) and
  ``"none"`` (each test at `alpha` alone: the per-step verdicts).

Holm is the default of :func:`mianalysis.analyze`: consecutive changes of one pair share a
checkpoint, so their estimates are negatively correlated, which BH's guarantee does not
cover, and a trend is a claim that *some* step moved, which is the family-wise error's
question. Pair is the default family: the findings are stated per pair, and a claim that
every pair rises needs no correction over pairs (each pair must pass on its own).

A change row without a p-value (no interval) or made from a Ledoit-Wolf shrinkage estimate
is not in any family and keeps the per-step verdict's "not made: ...", as does a step from
or to an MI row without an estimate ("not made: no estimate (...)": value NaN, e.g. every
varying parameter of a client held by ``min_moving_runs``, which is never an exact value:
the rule, not the design, holds them). Nor is a step out of
a value that is exact by rule (:func:`exact_by_rule`: the clients identical in every run,
as at a shared start, where the MI is infinite and every distance 0; or a client's
parameters constant over runs, as at a fixed start, where the MI is 0): the design, not
training, fixes where such a step starts, so it is no test of training, and its row's
verdict is "not made: a step out of an exact value (...)". An exact MI row is no test
either. These are the steps every finding leaves out (:mod:`mianalysis.report.experiment` reads
the same families), so a table's ``family_verdict`` and a finding agree. An MI row's null
test is adjusted over the same family of its checkpoints; with permutation p-values,
which are never below 1 / (n_permutations + 1), a family can be too large for any
corrected rejection, and the row's ``family_verdict`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..._internal.validation import check_choice, check_real
from ...estimators.distances import METRICS, UPDATE_METRICS
from .intervals import BOUND, NO_CHANGE, SHRINKAGE
from ..reading import CONSTANT, NO_ESTIMATE

__all__ = ["METHODS", "FAMILIES", "METHOD_NAMES", "holm", "benjamini_hochberg", "adjust", "describe",
           "FamilywiseVerdicts", "familywise_verdicts", "apply_familywise", "familywise_settings", "exact_by_rule",
           "FROM_EXACT"]

METHODS = ("holm", "bh", "none")
FAMILIES = ("pair", "cell")
METHOD_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}
ABOVE, NOT_ABOVE = "above null", "not above null"
FROM_EXACT = "not made: a step out of an exact value"  # the start of a family verdict; the reason follows


def _p_array(p: ArrayLike) -> np.ndarray:
    values = np.asarray(p, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"`p` must be one-dimensional; got shape {values.shape}")
    if np.any((values < 0) | (values > 1)):
        raise ValueError("`p` must hold p-values in [0, 1] (or NaN for none)")
    return values


def holm(p: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values: the i-th smallest of m times (m - i + 1),
    made non-decreasing in that order and capped at 1; a test is rejected at family-wise
    error `alpha` when its adjusted p is <= alpha. NaN entries are no test: they stay NaN
    and do not count in m.

    Examples
    --------
    >>> from mianalysis.analysis.inference.familywise import holm
    >>> holm([0.01, 0.04, 0.03, 0.005]).round(3).tolist()
    [0.03, 0.06, 0.06, 0.02]
    """
    values = _p_array(p)
    out = np.full(values.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(values))
    m = tested.size
    if m:
        order = tested[np.argsort(values[tested], kind="stable")]
        scaled = values[order] * (m - np.arange(m))
        out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out


def benjamini_hochberg(p: ArrayLike) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values): the i-th smallest of m times m / i,
    made non-increasing from the largest down and capped at 1; rejecting every test whose
    adjusted p is <= alpha controls the false discovery rate at alpha. NaN entries are no
    test: they stay NaN and do not count in m. Equals
    ``scipy.stats.false_discovery_control(p, method="bh")`` on the tested entries.

    Examples
    --------
    >>> from mianalysis.analysis.inference.familywise import benjamini_hochberg
    >>> benjamini_hochberg([0.01, 0.04, 0.03, 0.005]).round(3).tolist()
    [0.02, 0.04, 0.04, 0.02]
    """
    values = _p_array(p)
    out = np.full(values.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(values))
    m = tested.size
    if m:
        order = tested[np.argsort(values[tested], kind="stable")[::-1]]  # largest first
        scaled = values[order] * m / (m - np.arange(m))
        out[order] = np.minimum(np.minimum.accumulate(scaled), 1.0)
    return out


def adjust(p: ArrayLike, method: str = "holm") -> np.ndarray:
    """`p` adjusted over one family by `method` ("holm", "bh" or "none": `p` as given).

    Examples
    --------
    >>> from mianalysis.analysis.inference.familywise import adjust
    >>> adjust([0.02, 0.5], "holm").tolist(), adjust([0.02, 0.5], "none").tolist()
    ([0.04, 0.5], [0.02, 0.5])
    """
    check_choice(method, "method", METHODS)
    if method == "holm":
        return holm(p)
    if method == "bh":
        return benjamini_hochberg(p)
    return _p_array(p).copy()


def describe(method: str, family: str, alpha: float) -> str:
    """The words a finding gives for its correction, e.g. "Holm over each client pair's
    steps of one quantity (family-wise error rate 0.05)".

    Examples
    --------
    >>> from mianalysis.analysis.inference.familywise import describe
    >>> describe("bh", "cell", 0.05)
    "Benjamini-Hochberg over all client pairs' steps of one quantity (false discovery rate 0.05)"
    """
    check_choice(method, "familywise", METHODS)
    check_choice(family, "family", FAMILIES)
    if method == "none":
        return f"no correction: each step's test at {alpha:g} alone"
    over = "each client pair's steps of one quantity" if family == "pair" else \
        "all client pairs' steps of one quantity"
    rate = "family-wise error rate" if method == "holm" else "false discovery rate"
    return f"{METHOD_NAMES[method]} over {over} ({rate} {alpha:g})"


def familywise_settings(method: str, family: str, alpha: float) -> dict[str, Any]:
    """What a table's sidecar records of its family-wise columns (``settings["familywise"]``)."""
    return {"method": method, "family": family, "alpha": float(alpha)}


@dataclass(frozen=True)
class FamilywiseVerdicts:
    """Family-wise adjusted p-values and verdicts of a table's rows.

    Attributes
    ----------
    method : str
        "holm", "bh" or "none".
    family : str
        "pair" or "cell".
    alpha : float
        The error rate controlled (family-wise error for Holm, false discovery rate for BH).
    adjusted_p : ndarray of shape (n_rows,)
        Per row of the rows given: a change row's ``change_p``, or an MI row's null
        ``p_value``, adjusted over its family; NaN for rows in no family.
    verdicts : tuple of str
        Per row: a change row's "rising", "falling" or "no detectable change" from its
        adjusted p (or the per-step "not made: ..." where it is in no family); an MI row's
        "above null", "not above null", or "not made: ..." where the permutation p-value's
        floor makes a corrected rejection impossible; "" for other rows.
    family_size : ndarray of int, shape (n_rows,)
        The number of tests in the row's family (0 outside any).
    """

    method: str
    family: str
    alpha: float
    adjusted_p: np.ndarray
    verdicts: tuple[str, ...]
    family_size: np.ndarray

    @property
    def description(self) -> str:
        """:func:`describe` of this correction."""
        return describe(self.method, self.family, self.alpha)


def _is_change(row: Mapping[str, Any]) -> bool:
    return str(row["quantity"]).startswith("delta_")


def _is_level(row: Mapping[str, Any]) -> bool:
    q = str(row["quantity"])
    return q.startswith("mi_") and q != "mi_exact" and row.get("client_b", "") != ""


def exact_by_rule(row: Mapping[str, Any]) -> str:
    """Why a client pair's MI or distance row is exact by rule, or "" when it is an estimate.

    Exact: an infinite MI (the clients' samples identical: a shared start), an MI of 0 from
    constant parameters (a client's parameters do not vary over runs: a fixed start), a
    distance of 0 with spread 0 (the clients identical in every run), or an update cosine
    that is undefined (NaN: at the start every update is zero). Change rows, per-client rows
    and the ground truth ``mi_exact`` are never exact by rule.

    Examples
    --------
    >>> from mianalysis.analysis.inference.familywise import exact_by_rule
    >>> exact_by_rule({"quantity": "mi_ksg", "client_a": "0", "client_b": "1", "value": float("inf")})
    'identical clients: MI infinite'
    >>> exact_by_rule({"quantity": "euclidean", "client_a": "0", "client_b": "1", "value": 0.0, "spread": 0.0})
    'identical clients: distance 0 in every run'
    >>> exact_by_rule({"quantity": "euclidean", "client_a": "0", "client_b": "1", "value": 0.2, "spread": 0.1})
    ''
    """
    q = str(row["quantity"])
    if q.startswith("delta_") or q == "mi_exact" or row.get("client_b", "") == "":
        return ""
    value = _p(row, "value")
    if q in UPDATE_METRICS:
        return "zero updates: the cosine is undefined" if np.isnan(value) else ""
    if q.startswith("mi_"):
        if np.isinf(value):
            if "parameters identical in both clients" in str(row.get("note", "")):
                return "parameters identical in both clients: MI infinite"
            return "identical clients: MI infinite"
        return "constant parameters: MI 0" if CONSTANT in str(row.get("note", "")) else ""
    if q in METRICS and value == 0 and _p(row, "spread") == 0:
        return "identical clients: distance 0 in every run"
    return ""


def _checkpoint(row: Mapping[str, Any]) -> int | None:
    """A row's checkpoint index as int (from an int, an integral float or its text), or None
    where the row has none."""
    value = row.get("checkpoint")
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"a row's `checkpoint` must be an integer; got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"a row's `checkpoint` must be an integer; got {value!r}")
    return int(number)


def _level_key(row: Mapping[str, Any], quantity: str) -> tuple[Any, ...]:
    return (quantity, row.get("layer", ""), row["client_a"], row["client_b"], _checkpoint(row))


def _out_of_exact(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per row: for a change row whose previous checkpoint's row (among `rows`) is exact by
    rule, why; "" otherwise."""
    exact = {_level_key(r, str(r["quantity"])): why for r in rows if (why := exact_by_rule(r))}
    out = [""] * len(rows)
    if not exact:
        return out
    for i, row in enumerate(rows):
        checkpoint = _checkpoint(row)
        if _is_change(row) and checkpoint is not None:
            reason = exact.get((str(row["quantity"])[len("delta_"):], row.get("layer", ""), row["client_a"],
                                row["client_b"], checkpoint - 1))
            if reason:
                out[i] = f"{FROM_EXACT} ({reason} at checkpoint {checkpoint - 1})"
    return out


def _key(row: Mapping[str, Any], family: str, kind: str) -> tuple[Any, ...]:
    base = (kind, row["quantity"], row.get("layer", ""))
    return base + ((row["client_a"], row["client_b"]) if family == "pair" else ())


def _floor(row: Mapping[str, Any], n_permutations: int | Mapping[str, int] | None) -> float | None:
    """The smallest p-value the row's permutation test can give, or None (no permutations known)."""
    if row.get("null_method") != "permutation" or n_permutations is None:
        return None
    estimator = str(row["quantity"])[3:]
    n = n_permutations.get(estimator) if isinstance(n_permutations, Mapping) else n_permutations
    return 1.0 / (int(n) + 1) if isinstance(n, (int, np.integer)) and n > 0 else None


def familywise_verdicts(rows: Sequence[Mapping[str, Any]], *, method: str = "holm", family: str = "pair",
                        alpha: float = 0.05, n_permutations: int | Mapping[str, int] | None = None
                        ) -> FamilywiseVerdicts:
    """Family-wise verdicts of the change rows (and null tests of the MI rows) of `rows`.

    Parameters
    ----------
    rows : sequence of dict
        Rows of an analysis table (an :class:`~mianalysis.analysis.table.AnalysisTable`, or
        a selection of its rows: the families are made of the rows given, so pass only the
        steps a finding reads to correct over exactly those). Change rows need
        ``change_p`` (a table of any version has it: :func:`~mianalysis.analysis.table.complete_row`).
        A step is known to start from an exact value (and left out) when the rows hold its
        previous checkpoint's row (same quantity, layer and pair; ``checkpoint`` one less).
    method : {"holm", "bh", "none"}, default="holm"
    family : {"pair", "cell"}, default="pair"
        "pair": one client pair's rows of one quantity (and layer); "cell": every pair's
        rows of one quantity (and layer) among `rows`.
    alpha : float, default=0.05
        The error rate: 1 - the table's ``ci_level`` makes "none" the per-step verdicts.
    n_permutations : int or dict of estimator -> int, optional
        The analysis' permutations (a table's ``settings["permutations"]``), for the floor
        1 / (n + 1) of its permutation p-values; None: no floor is checked.

    Returns
    -------
    FamilywiseVerdicts

    Examples
    --------
    Three steps of one pair, p-values 0.01, 0.04 and 0.30: each below 0.05 alone, but with
    Holm over the three only the first (0.01 x 3 = 0.03) is a verdict:

    >>> from mianalysis.analysis.inference.familywise import familywise_verdicts
    >>> rows = [{"quantity": "delta_mi_ksg", "client_a": "0", "client_b": "1", "value": v, "change_p": p,
    ...          "estimate_kind": "plain"} for v, p in ((0.5, 0.01), (-0.4, 0.04), (0.1, 0.30))]
    >>> result = familywise_verdicts(rows, method="holm")
    >>> result.verdicts
    ('rising', 'no detectable change', 'no detectable change')
    >>> result.adjusted_p.round(2).tolist()
    [0.03, 0.08, 0.3]
    """
    check_choice(method, "familywise", METHODS)
    check_choice(family, "family", FAMILIES)
    alpha = check_real(alpha, "alpha", low=0, high=1, low_open=True, high_open=True)
    n = len(rows)
    adjusted = np.full(n, np.nan)
    size = np.zeros(n, dtype=np.int64)
    verdicts = [""] * n
    members: dict[tuple[Any, ...], list[int]] = {}
    from_exact = _out_of_exact(rows)
    for i, row in enumerate(rows):
        if from_exact[i]:
            verdicts[i] = from_exact[i]
        elif _is_change(row):
            if str(row.get("verdict", "")).startswith(NO_ESTIMATE):  # from or to an MI row without an estimate
                verdicts[i] = str(row["verdict"])
            elif row.get("estimate_kind") == "shrinkage":
                verdicts[i] = SHRINKAGE
            elif row.get("estimate_kind") == "bound":
                verdicts[i] = BOUND
            elif not np.isfinite(_p(row, "change_p")):
                verdicts[i] = "not made: no interval"
            else:
                members.setdefault(_key(row, family, "change"), []).append(i)
        elif _is_level(row) and (why := exact_by_rule(row)):
            verdicts[i] = f"not made: exact ({why}), no test"
        elif _is_level(row) and np.isfinite(_p(row, "p_value")):
            members.setdefault(_key(row, family, "level"), []).append(i)
    for key, idx in members.items():
        column = "change_p" if key[0] == "change" else "p_value"
        adjusted[idx] = adjust([_p(rows[i], column) for i in idx], method)
        size[idx] = len(idx)
        for i in idx:
            if key[0] == "change":
                value = float(rows[i]["value"])
                verdicts[i] = NO_CHANGE if not adjusted[i] <= alpha else "rising" if value > 0 else "falling"
            else:
                verdicts[i] = _level_verdict(rows[i], adjusted[i], len(idx), method, alpha, n_permutations)
    return FamilywiseVerdicts(method=method, family=family, alpha=float(alpha), adjusted_p=adjusted,
                              verdicts=tuple(verdicts), family_size=size)


def _p(row: Mapping[str, Any], column: str) -> float:
    try:
        return float(row.get(column, np.nan))
    except (TypeError, ValueError):
        return np.nan


def _level_verdict(row: Mapping[str, Any], adjusted: float, m: int, method: str, alpha: float,
                   n_permutations: int | Mapping[str, int] | None) -> str:
    """An MI row's null verdict over its family of m tests; "not made" when no permutation
    p-value of this size can be rejected after the correction."""
    if adjusted <= alpha:
        return ABOVE
    floor = _floor(row, n_permutations)
    if floor is not None:
        best = min(1.0, m * floor) if method == "holm" else floor  # every p at the floor
        if best > alpha:
            needs = alpha / m if method == "holm" else alpha
            return (f"not made: {round(1 / floor) - 1} permutations give p >= {floor:.2g}; "
                    f"{METHOD_NAMES[method]} over {m} tests needs p <= {needs:.2g}")
    return NOT_ABOVE


def apply_familywise(rows: Sequence[Mapping[str, Any]], *, method: str = "holm", family: str = "pair",
                     alpha: float | None = None, n_permutations: int | Mapping[str, int] | None = None) -> Any:
    """A copy of a table with its family-wise columns filled: ``p_adjusted`` and
    ``family_verdict`` of every row from :func:`familywise_verdicts`, and the correction
    recorded in its settings (``settings["familywise"]``, see :func:`familywise_settings`).
    How :func:`mianalysis.analyze` fills them, and how a table written without them (or with
    another correction) gets them.

    Parameters
    ----------
    rows : AnalysisTable or sequence of dict
    method, family : str
        As :func:`familywise_verdicts`.
    alpha : float, optional
        Default: 1 - the table's ``ci_level`` (0.05 when it records none), so that "none"
        gives the per-step verdicts.
    n_permutations : int or dict, optional
        Default: the table's ``settings["permutations"]``.

    Returns
    -------
    AnalysisTable
    """
    from ..table import AnalysisTable

    table = AnalysisTable.of(rows)
    settings = dict(table.settings)
    if alpha is None:
        level = settings.get("ci_level")
        alpha = round(1 - level, 12) if isinstance(level, float) and 0 < level < 1 else 0.05
    if n_permutations is None:
        n_permutations = settings.get("permutations")
    result = familywise_verdicts(table, method=method, family=family, alpha=alpha, n_permutations=n_permutations)
    out = []
    for row, p, verdict in zip(table, result.adjusted_p, result.verdicts):
        out.append({**row, "p_adjusted": np.nan if np.isnan(p) else float(p), "family_verdict": verdict})
    settings["familywise"] = familywise_settings(method, family, result.alpha)
    return AnalysisTable(out, settings=settings, provenance=table.provenance, record=table.record)
