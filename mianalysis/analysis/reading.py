"""What the rows of an analysis table mean and which of them to read, in words.

The text a reader of a table needs next to its numbers, written once for every place that
prints it (:func:`mianalysis.report`'s ``report.md``, the ``mianalysis demo`` console):

- :func:`row_kinds`: one line per quantity the table holds, saying what its rows are;
- :func:`reading_guide`: the MI rows grouped by how far they can be trusted (inside the
  estimator's calibrated regime, outside it, lower bounds, shrinkage numbers, rows without
  an estimate) and the checkpoints where the MI is infinite or zero by construction;
- :func:`start_notes`: why the MI is infinite (or 0) at the start;
- :func:`p_value_floor`: the smallest p-value a number of permutations can give.

Every function reads the rows' typed columns (``estimate_kind``, ``outside_calibration``,
``null_method``) and notes, never the values alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..estimators.registry import estimator_names, get_estimator

__all__ = ["row_kinds", "reading_guide", "start_notes", "p_value_floor", "mi_rows_by_trust", "metric_names",
           "CLIENT_DIAGNOSTICS", "CONSTANT", "HELD", "NO_ESTIMATE", "held_note", "no_estimate_reason"]

_DISTANCES = {"euclidean": "L2", "manhattan": "L1", "chebyshev": "max-norm"}
_DIAGNOSTICS = {
    "nongaussian_share": "per client: the share of its parameters whose marginal is far from Gaussian "
                         "(analyze(gaussianity=True)): where it is large, read the copula or KSG rows",
    "copula_disagrees": "per client pair: whether the Gaussian-copula MI disagrees with the Gaussian one "
                        "beyond their intervals (analyze(gaussianity=True))",
}
# Per-client rows that the analysis computes itself (analyze(gaussianity=True)): not recorded metrics.
CLIENT_DIAGNOSTICS = ("nongaussian_share",)
CONSTANT = "constant across runs: MI is 0"
IDENTICAL = "identical samples"
# An MI row of a pair in which a client's varying parameters all move in fewer than
# `min_moving_runs` runs (mianalysis.analysis.diagnostics.movers): all are held at their most common
# value, so the MI of the held samples is 0 by the rule, not by design; no estimate (NaN),
# never an exact value (it is not CONSTANT).
HELD = "every varying parameter of"
# The start of the verdict of a step from or to an MI row without an estimate (value NaN).
NO_ESTIMATE = "not made: no estimate"


def held_note(who: str, min_runs: int) -> str:
    """The note of an MI row with no estimate because every varying parameter of `who`
    ("client_a", "client_b" or both) is held (:data:`HELD`).

    Examples
    --------
    >>> from mianalysis.analysis.reading import held_note
    >>> held_note("client_a", 5)
    'every varying parameter of client_a held, each moving in fewer than 5 runs: no estimate'
    """
    return f"{HELD} {who} held, each moving in fewer than {min_runs} runs: no estimate"


def no_estimate_reason(row: Mapping) -> str:
    """Why an MI row has no estimate (value NaN), from its note: the part naming the held
    parameters (:func:`held_note`) or another "no ..." part (e.g. "no bound: 5 runs < 8
    (two folds of 4 runs)"); "" where the note says nothing of it.

    Examples
    --------
    >>> from mianalysis.analysis.reading import no_estimate_reason
    >>> no_estimate_reason({"note": "auto: bound, a lower bound; no bound: 5 runs < 8 (two folds of 4 runs)"})
    'no bound: 5 runs < 8 (two folds of 4 runs)'
    >>> no_estimate_reason({"note": "every varying parameter of client_b held, each moving in fewer than 3 runs: "
    ...                             "no estimate"})
    'every varying parameter of client_b held, each moving in fewer than 3 runs'
    """
    parts = str(row.get("note", "")).split("; ")
    for part in parts:
        if part.startswith(HELD):
            return part.removesuffix(": no estimate")
    return next((part for part in parts if part.startswith("no ")), "")


def _is_nan(value: object) -> bool:
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _reasons(rows: Sequence[Mapping]) -> str:
    """The distinct reasons (:func:`no_estimate_reason`) of rows without an estimate, or a pointer to their notes."""
    return "; ".join(dict.fromkeys(why for r in rows if (why := no_estimate_reason(r)))) or "the note says why"


def _is_inf(value: object) -> bool:
    return isinstance(value, float) and math.isinf(value)


def _estimator_of(quantity: str) -> str | None:
    name = quantity[3:] if quantity.startswith("mi_") else ""
    return name if name in estimator_names() else None


def metric_names(rows: Sequence[Mapping]) -> list[str]:
    """The recorded training metrics of a table (its per-client quantities: rows without a
    ``client_b``, other than the analysis' own diagnostics such as ``nongaussian_share``),
    in the order of their first rows: what the figures draw as metrics
    (:func:`mianalysis.report.plots.metric_names`) and :func:`row_kinds` calls a recorded metric.

    Parameters
    ----------
    rows : list of dict
        An analysis table.

    Returns
    -------
    list of str

    Examples
    --------
    >>> from mianalysis.analysis.reading import metric_names
    >>> metric_names([{"quantity": "loss", "client_b": ""}, {"quantity": "nongaussian_share", "client_b": ""},
    ...               {"quantity": "euclidean", "client_b": "b"}])
    ['loss']
    """
    return list(dict.fromkeys(str(r["quantity"]) for r in rows
                              if r.get("client_b", "") == "" and r["quantity"] not in CLIENT_DIAGNOSTICS))


def _describe(quantity: str, rows: Sequence[Mapping], metrics: Sequence[str] = ()) -> str:
    """What the rows of `quantity` (all of them given in `rows`) are; `metrics`: the
    table's recorded metrics (:func:`metric_names`)."""
    estimator = _estimator_of(quantity)
    if estimator is not None:
        entry = get_estimator(estimator)
        nulls = sorted({str(r.get("null_method", "")) for r in rows} - {"", "none"})
        what = "a lower bound on the MI, not an estimate of it" if entry.kind == "bound" else "the MI estimate"
        empty = [r for r in rows if _is_nan(r.get("value"))]
        if empty and len(empty) == len(rows):
            what = f"empty (NaN) in every row: no estimate was made ({_reasons(empty)})"
        elif empty:
            what += f", or empty (NaN) in {len(empty)} rows where no estimate was made ({_reasons(empty)})"
        null = f"its {' or '.join(nulls)} null" if nulls else "its null (none was computed)"
        return (f"MI between the two clients' parameter vectors by {entry.display_name}, in bits: `value` is "
                f"{what}, `ci_low`-`ci_high` its {entry.interval} interval over runs, `null_mean`, `null_std` and "
                f"`p_value` {null} (shuffled pairings of the runs); `estimate_kind`, `outside_calibration` and "
                "`note` say how far it can be trusted")
    if quantity == "mi_exact":
        return "the exact MI of this task's design (known in closed form): the truth the estimates are checked against"
    if quantity in _DISTANCES:
        return ("mean over runs of the distance it names (" + ", ".join(f"{k}: {v}" for k, v in _DISTANCES.items())
                + ") between the two clients' parameter vectors (run i of one with run i of the other), with its "
                  "interval")
    if quantity.startswith("delta_"):
        return ("the change of the quantity after `delta_` since the previous checkpoint, with its paired interval, "
                "`change_p` (the p-value of no change) and, corrected over its family, `p_adjusted` and "
                "`family_verdict`: the trend verdicts")
    if quantity in _DIAGNOSTICS:
        return _DIAGNOSTICS[quantity]
    if quantity in metrics:
        return "a metric the dump recorded per client and checkpoint (`value`: its mean over runs)"
    return "a quantity per client pair and checkpoint (`value`, with `ci_low`-`ci_high` where it has an interval)"


def row_kinds(rows: Sequence[Mapping]) -> list[tuple[str, int, str]]:
    """(quantity, number of rows, what its rows are) for each quantity of `rows`, in the
    order of their first rows.

    Parameters
    ----------
    rows : list of dict
        An analysis table.

    Returns
    -------
    list of (str, int, str)

    Examples
    --------
    >>> from mianalysis.analysis.reading import row_kinds
    >>> rows = [{"quantity": "euclidean", "client_a": "a", "client_b": "b"},
    ...         {"quantity": "loss", "client_a": "a", "client_b": ""}]
    >>> [(q, n) for q, n, _ in row_kinds(rows)]
    [('euclidean', 1), ('loss', 1)]
    >>> row_kinds(rows)[1][2]
    'a metric the dump recorded per client and checkpoint (`value`: its mean over runs)'
    """
    by_quantity: dict[str, list[Mapping]] = {}
    for r in rows:
        by_quantity.setdefault(str(r["quantity"]), []).append(r)
    metrics = metric_names(rows)
    return [(q, len(rs), _describe(q, rs, metrics)) for q, rs in by_quantity.items()]


def mi_rows_by_trust(rows: Sequence[Mapping]) -> dict[str, list[Mapping]]:
    """The MI rows of registered estimators, by what they can be read as.

    Keys, in reading order: "calibrated" (a plain estimate inside its estimator's calibrated
    regime), "outside" (a plain estimate outside it), "bound" (a lower bound), "shrinkage"
    (a Ledoit-Wolf shrinkage number), "infinite" (identical samples: a shared start),
    "constant" (a client's parameters do not vary over runs: MI 0 by definition), "held"
    (every varying parameter of a client held by ``min_moving_runs``: no estimate, not 0 by
    design) and "none" (no estimate for another reason, e.g. too few runs for a bound: value
    NaN). Every MI row is in exactly one list.

    Parameters
    ----------
    rows : list of dict
        An analysis table.

    Returns
    -------
    dict of str -> list of dict
    """
    groups: dict[str, list[Mapping]] = {k: [] for k in ("calibrated", "outside", "bound", "shrinkage", "infinite",
                                                          "constant", "held", "none")}
    for r in rows:
        if _estimator_of(str(r["quantity"])) is None:
            continue
        note = str(r.get("note", ""))
        if _is_inf(r["value"]):
            groups["infinite"].append(r)
        elif CONSTANT in note:
            groups["constant"].append(r)
        elif HELD in note and _is_nan(r["value"]):
            groups["held"].append(r)
        elif _is_nan(r["value"]):
            groups["none"].append(r)
        elif r.get("estimate_kind") == "shrinkage":
            groups["shrinkage"].append(r)
        elif r.get("estimate_kind") == "bound":
            groups["bound"].append(r)
        elif r.get("outside_calibration"):
            groups["outside"].append(r)
        else:
            groups["calibrated"].append(r)
    return groups


def _where(rows: Sequence[Mapping], label: str) -> str:
    """"mi_ksg at iterations 2, 4" style text of some rows: their quantities and checkpoints."""
    parts = []
    for q in dict.fromkeys(str(r["quantity"]) for r in rows):
        its = sorted({int(r["iteration"]) for r in rows if r["quantity"] == q})
        parts.append(f"`{q}` at {label}{'s' if len(its) > 1 else ''} {', '.join(map(str, its))}")
    return "; ".join(parts)


def start_notes(rows: Sequence[Mapping], label: str = "iteration") -> list[str]:
    """Why some MI rows are infinite or 0 by construction: the checkpoints where the
    clients' samples are identical (a start shared by the clients of each run) or a
    client's parameters are constant over runs (a start fixed for every run). Only
    iteration 0 is called the start; identical or constant samples at a later checkpoint
    are named as such. Empty when there are none.

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    label : str, default="iteration"
        What a checkpoint counts ("round" for a federated dump).

    Returns
    -------
    list of str

    Examples
    --------
    >>> from mianalysis.analysis.reading import start_notes
    >>> rows = [{"quantity": "mi_ksg", "iteration": 0, "value": float("inf"), "note": "identical samples"}]
    >>> start_notes(rows)  # doctest: +NORMALIZE_WHITESPACE
    ['At iteration 0 (the start, shared by the clients of a run) their samples are identical: the MI is
      infinite (inf, no null or p-value) and the distances 0.']
    """
    groups = mi_rows_by_trust(rows)
    notes = []
    for key, at_start, elsewhere in (
            ("infinite", "(the start, shared by the clients of a run) their samples are identical",
             "the clients' samples are identical"),
            ("constant", "(the start, the same point for every run) a client's parameters do not vary over runs",
             "a client's parameters are constant across runs")):
        consequence = ("the MI is infinite (inf, no null or p-value) and the distances 0." if key == "infinite" else
                       "the MI is 0 by definition (no estimate).")
        its = sorted({int(r["iteration"]) for r in groups[key]})
        later = [i for i in its if i != 0]  # only iteration 0 is the start; elsewhere it is said as it is
        if 0 in its:
            notes.append(f"At {label} 0 {at_start}: {consequence}")
        if later:
            notes.append(f"At {label}{'s' if len(later) > 1 else ''} {', '.join(map(str, later))} {elsewhere}: "
                         f"{consequence}")
    return notes


def p_value_floor(n_permutations: int | Mapping[str, int]) -> str:
    """The smallest p-value `n_permutations` shuffles can give, 1/(shuffles + 1), in words.

    Parameters
    ----------
    n_permutations : int or dict of estimator -> int
        As given to :func:`mianalysis.analyze`.

    Returns
    -------
    str

    Examples
    --------
    >>> from mianalysis.analysis.reading import p_value_floor
    >>> p_value_floor(100)
    '1/101 = 0.010'
    >>> p_value_floor({"gaussian": 20, "ksg": 100})
    '1/21 = 0.048 for gaussian, 1/101 = 0.010 for ksg'
    """
    def floor(n: int) -> str:
        return f"1/{n + 1} = {1 / (n + 1):.3f}" if n > 0 else "no p-value (no permutations)"

    if isinstance(n_permutations, Mapping):
        return ", ".join(f"{floor(n)} for {e}" for e, n in n_permutations.items())
    return floor(n_permutations)


def reading_guide(rows: Sequence[Mapping], label: str = "iteration") -> list[str]:
    """Which MI rows to read, and how: one paragraph per group of
    :func:`mi_rows_by_trust` that the table holds, then :func:`start_notes`.

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    label : str, default="iteration"
        What a checkpoint counts ("round" for a federated dump).

    Returns
    -------
    list of str
    """
    groups = mi_rows_by_trust(rows)
    lines = []
    if groups["calibrated"]:
        lines.append(f"Read first: the {len(groups['calibrated'])} MI rows inside their estimator's calibrated regime "
                     f"({_where(groups['calibrated'], label)}; `estimate_kind` plain, `outside_calibration` false): "
                     "there the estimator was within 5 % of the known MI of correlated Gaussians "
                     "(mianalysis.analysis.inference.regime).")
    if groups["outside"]:
        lines.append(f"Outside calibration ({len(groups['outside'])} rows: {_where(groups['outside'], label)}): "
                     "the estimate may be far from the truth (the note says why, e.g. KSG in more than "
                     "4 joint dimensions is biased downwards); read its p-value against the null, and trends only "
                     "between rows of the same estimator and dimension, not its size.")
    if groups["bound"]:
        lines.append(f"Lower bounds ({len(groups['bound'])} rows: {_where(groups['bound'], label)}): the MI is at "
                     "least this much (up to the interval); a bound that rises is not an MI that rises.")
    if groups["shrinkage"]:
        lines.append(f"Shrinkage numbers ({len(groups['shrinkage'])} rows: {_where(groups['shrinkage'], label)}): "
                     "fewer runs than twice the joint dimension, so the Gaussian formula was applied to a Ledoit-Wolf "
                     "shrunk covariance; that number is neither an estimate nor a bound of the MI, and no above-null "
                     "or trend verdict is made from it (\"not made: shrinkage estimate\").")
    if groups["held"]:
        lines.append(f"No estimate, parameters held ({len(groups['held'])} rows: {_where(groups['held'], label)}): "
                     "every varying parameter of a client moves in fewer than `min_moving_runs` runs and was held at "
                     "its most common value, so nothing of the client is left to estimate from; the MI is not 0 by "
                     "design, only at most the bits the note gives, and no verdict is made from these rows.")
    if groups["none"]:
        lines.append(f"No estimate ({len(groups['none'])} rows: {_where(groups['none'], label)}): the value is empty "
                     f"(NaN), neither an estimate nor a bound ({_reasons(groups['none'])}); no verdict is made from "
                     "these rows.")
    if any(r["quantity"] == "mi_exact" for r in rows):
        lines.append("`mi_exact` is the truth of this design: compare each estimator's rows with it.")
    lines += start_notes(rows, label)
    if not lines:
        lines.append("The table has no MI rows.")
    return lines

