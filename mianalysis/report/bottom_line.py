"""The bottom line of an analysis table: what a reader may conclude, in plain sentences.

:func:`bottom_line` reads an analysis table and says, quoting the table's own values:

- **dependence**: per MI estimator, whether its rows lie above their null after the
  family-wise correction (columns ``p_value``, ``p_adjusted`` and ``family_verdict`` of the
  ``mi_*`` rows), or why no such verdict is made and what would make one (a null, more
  permutations);
- **MI trends**: per MI estimator, the verdicts of its steps (``family_verdict`` of the
  ``delta_mi_*`` rows), or why none is made (lower bounds, shrinkage numbers, no estimate,
  no step) and what would make one (how many runs a calibrated estimate needs, from the
  rows' notes, :mod:`mianalysis.analysis.inference.choice` and, for a table of tensors or
  blocks, the sidecar's ``settings["by_choice"]``);
- **distances**: whether they grow or shrink over the checkpoints (``family_verdict`` of
  the ``delta_*`` rows of the distances);
- **headroom**, where the caller passes the rows of :func:`mianalysis.headroom` (a dump
  with a reference client: :data:`mianalysis.dumps.REFERENCE_CLIENTS`).

A table with rows per tensor or block (``analyze(by="layer")`` or ``by="auto"``) gets one
paragraph per estimator all the same, counting its tensors: a tensor's MI is at most the
whole vector's (data processing), so dependence in one is dependence of the whole vectors,
but a tensor's trend is not the whole vector's.

Every sentence says what its numbers are (an estimate or a lower bound, which estimator,
which p-value, which correction) and ends with what may be concluded. The module reads no
file and computes no estimate: :func:`mianalysis.report.report` writes its lines at the top
of ``report.md``, and ``mianalysis analyze`` and ``mianalysis demo`` print them last.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis import AnalysisRow, AnalysisTable
from ..analysis.blocks import runs_needed
from ..analysis.inference.choice import PRIMARY, choose
from ..analysis.inference.familywise import FROM_EXACT, METHOD_NAMES, apply_familywise, describe
from ..analysis.inference.intervals import BOUND, SHRINKAGE
from ..analysis.inference.regime import COPULA_MIN_RUNS_PER_DIM
from ..analysis.reading import NO_ESTIMATE, no_estimate_reason
from ..analysis.studies.headroom import headroom_verdicts
from ..estimators.registry import estimator_names, get_estimator
from .experiment import overall_trend

__all__ = ["bottom_line", "format_bottom_line", "BOTTOM_LINE", "DISTANCE_NAMES", "runs_for_calibrated_estimate"]

BOTTOM_LINE = "Bottom line"  # the heading the report and the commands give these lines
DISTANCE_NAMES = {"euclidean": "L2", "manhattan": "L1", "chebyshev": "max-norm"}
ABOVE, NOT_ABOVE = "above null", "not above null"
_MAX_NAMED = 6  # more pairs (or tensors) than this are counted, not named
_TREND_WORDS = {"rising": "rising", "falling": "falling", "mixed": "rising at some steps and falling at others",
                "no detectable change": "with no detectable change"}
_DISTANCE_WORDS = {"rising": "grows", "falling": "shrinks", "mixed": "grows at some steps and shrinks at others",
                   "no detectable change": "shows no detectable change"}


class _Scope:
    """How a table's rows cover the parameter vector: whole, or per tensor or block."""

    def __init__(self, table: AnalysisTable, label: str) -> None:
        self.label = label
        self.layers = list(dict.fromkeys(str(r.get("layer", "")) for r in table
                                         if r.get("client_b", "") != "" and str(r["quantity"]).startswith("mi_")))
        self.split = any(self.layers)
        self.unit = "block" if table.settings.get("by") == "auto" else "tensor"
        by_choice = table.settings.get("by_choice")
        self.by_choice = str(by_choice) if by_choice and self.split else ""


def bottom_line(table: AnalysisTable | Sequence[Mapping[str, Any]], *, label: str = "iteration",
                headroom: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """What a reader may conclude from an analysis table: one paragraph per finding.

    Parameters
    ----------
    table : AnalysisTable or sequence of dict
        An analysis table (:func:`mianalysis.analyze`), or its rows. A table without the
        family-wise columns (``p_adjusted``, ``family_verdict``: written before they existed)
        gets them by :func:`~mianalysis.analysis.inference.familywise.apply_familywise`.
    label : str, default="iteration"
        What a checkpoint counts ("round" for a federated dump).
    headroom : sequence of dict, optional
        Rows of :func:`mianalysis.headroom` for the same dump; the verdict of its last
        checkpoint (:func:`~mianalysis.analysis.studies.headroom.headroom_verdicts`) is the
        last paragraph. None: nothing is said of headroom.

    Returns
    -------
    list of str
        Paragraphs in this order: dependence per MI estimator, the MI trend per estimator,
        the distances, and headroom where given.

    Examples
    --------
    Two clients, one pair, an estimate above its null at two iterations that falls between them:

    >>> from mianalysis.report.bottom_line import bottom_line
    >>> def mi(it, value, p, p_adj):
    ...     return {"checkpoint": it, "iteration": it, "client_a": "a", "client_b": "b", "quantity": "mi_copula",
    ...             "value": value, "p_value": p, "p_adjusted": p_adj, "family_verdict": "above null",
    ...             "null_method": "permutation", "n_runs": 500, "estimate_kind": "plain"}
    >>> step = {"checkpoint": 2, "iteration": 2, "client_a": "a", "client_b": "b", "quantity": "delta_mi_copula",
    ...         "value": -0.5, "change_p": 0.001, "p_adjusted": 0.001, "family_verdict": "falling"}
    >>> lines = bottom_line([mi(1, 1.5, 0.001, 0.002), mi(2, 1.0, 0.001, 0.002), step])
    >>> print(lines[0])  # doctest: +NORMALIZE_WHITESPACE
    Dependence by Gaussian copula (`mi_copula`: an estimate of the MI, in bits): 2 of the 2 rows tested lie
    above their permutation null (pair a-b at iterations 1, 2; MI 1 to 1.5 bits; p-value 0.001, adjusted by Holm
    over each client pair's checkpoints: 0.002, family-wise error rate 0.05). Conclusion: the clients'
    parameters are dependent across runs beyond chance at every tested iteration.
    >>> print(lines[1])  # doctest: +NORMALIZE_WHITESPACE
    MI trend by Gaussian copula (`mi_copula`): falling for pair a-b, from the `family_verdict` of the
    `delta_mi_copula` rows (Holm over each client pair's steps of one quantity (family-wise error rate 0.05);
    adjusted p 0.001). Conclusion: the clients became less dependent over iterations 1-2.
    """
    table = _with_familywise(AnalysisTable.of(table))
    correction = _correction(table)
    scope = _Scope(table, label)
    iterations = {int(r["checkpoint"]): int(r["iteration"]) for r in table}
    quantities = _mi_quantities(table)
    lines = [_dependence(table, q, scope, correction) for q in quantities]
    lines += [_mi_trend(table, q, scope, correction, iterations) for q in quantities]
    if not quantities:
        lines.append("The table has no MI rows between clients: it says nothing of their dependence.")
    lines.append(_distances(table, scope, correction, iterations))
    if headroom:
        lines.append(_headroom(headroom))
    return lines


def runs_for_calibrated_estimate(n_features: int) -> int:
    """The fewest runs for which ``analyze``'s "auto" rule makes the calibrated estimate
    (the Gaussian copula MI) of `n_features` varying joint dimensions
    (:func:`mianalysis.analysis.inference.choice.choose`).

    Examples
    --------
    >>> from mianalysis.report.bottom_line import runs_for_calibrated_estimate
    >>> runs_for_calibrated_estimate(716)
    1576
    """
    n = runs_needed(n_features, COPULA_MIN_RUNS_PER_DIM, n_clients_per_pair=1)
    while choose(n, n_features)[0].estimator != PRIMARY:  # the rule, not the arithmetic, decides
        n += 1
    return n


def format_bottom_line(paragraphs: Sequence[str], *, width: int = 100) -> str:
    """The bottom line as console text: a "bottom line:" line, then each paragraph as a
    "- " item wrapped to `width` columns (its later lines indented by two spaces), as
    ``mianalysis analyze`` and ``mianalysis demo`` print it last.

    Examples
    --------
    >>> from mianalysis.report.bottom_line import format_bottom_line
    >>> print(format_bottom_line(["Distances grow. Conclusion: the clients drift apart."], width=40))
    bottom line:
    - Distances grow. Conclusion: the
      clients drift apart.
    """
    lines = [f"{BOTTOM_LINE.lower()}:"]
    for paragraph in paragraphs:
        lines += textwrap.wrap(paragraph, width, initial_indent="- ", subsequent_indent="  ",
                               break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines)


# ------------------------------------------------------------------------ reading the table
def _with_familywise(table: AnalysisTable) -> AnalysisTable:
    """`table`, with its family-wise columns filled where none of its rows has a verdict."""
    tested = [r for r in table if str(r["quantity"]).startswith(("mi_", "delta_"))]
    if tested and not any(r.get("family_verdict") for r in table):
        return apply_familywise(table)
    return table


def _correction(table: AnalysisTable) -> tuple[str, str, float]:
    """(method, family, alpha) of the table's family-wise columns."""
    recorded = table.settings.get("familywise")
    recorded = recorded if isinstance(recorded, Mapping) else {}
    return (str(recorded.get("method", "holm")), str(recorded.get("family", "pair")),
            float(recorded.get("alpha", 0.05)))


def _mi_quantities(table: AnalysisTable) -> list[str]:
    """Every MI estimator's quantity with rows between clients, in the registry's order."""
    held = {str(r["quantity"]) for r in table if r.get("client_b", "") != ""}
    return [f"mi_{e}" for e in estimator_names() if f"mi_{e}" in held]


def _pair_rows(table: AnalysisTable, quantity: str) -> list[AnalysisRow]:
    """The rows of `quantity` between clients, every tensor, by checkpoint."""
    return [r for r in table.select(quantity) if r.get("client_b", "") != ""]


def _number(row: Mapping[str, Any], key: str) -> float:
    try:
        return float(row.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan


def _span(values: Sequence[float], digits: int = 3) -> str:
    """"0.01" or "0.01 to 0.05" (the smallest and largest of `values`)."""
    low, high = f"{min(values):.{digits}g}", f"{max(values):.{digits}g}"
    return low if low == high else f"{low} to {high}"


def _pair(row: Mapping[str, Any]) -> str:
    return f"{row['client_a']}-{row['client_b']}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _at(label: str, its: Sequence[int]) -> str:
    return f"{label}{'s' if len(its) > 1 else ''} {', '.join(map(str, sorted(its)))}"


def _where(rows: Sequence[Mapping[str, Any]], scope: _Scope, split: bool | None = None) -> str:
    """"pair a-b at iterations 1, 2; pair a-c at iteration 2" (and, where `split`, default
    the table's, in how many tensors), or a count of pairs where many."""
    by_pair: dict[str, tuple[set[int], set[str]]] = {}
    for r in rows:
        its, layers = by_pair.setdefault(_pair(r), (set(), set()))
        its.add(int(r["iteration"]))
        layers.add(str(r.get("layer", "")))

    def tensors(layers):
        return f" in {_plural(len(layers), scope.unit)}" if (scope.split if split is None else split) else ""

    if len(by_pair) > _MAX_NAMED:
        its = set().union(*(v[0] for v in by_pair.values()))
        layers = set().union(*(v[1] for v in by_pair.values()))
        return f"{len(by_pair)} pairs at {_at(scope.label, sorted(its))}{tensors(layers)}"
    shapes = {(tuple(sorted(v[0])), len(v[1])) for v in by_pair.values()}
    if len(shapes) == 1 and len(by_pair) > 1:  # every pair alike: said once
        its, layers = next(iter(by_pair.values()))
        return f"pairs {', '.join(by_pair)} at {_at(scope.label, sorted(its))}{tensors(layers)}"
    return "; ".join(f"pair {p} at {_at(scope.label, sorted(its))}{tensors(layers)}"
                     for p, (its, layers) in by_pair.items())


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= _MAX_NAMED else f"{', '.join(names[:2])}, ..., {names[-1]}"


def _scope_words(scope: _Scope, rows: Sequence[Mapping[str, Any]]) -> str:
    """", per block (4 blocks: `w[0:10]`, ...)" or ", tensor `w`" for the rows of a table of
    tensors or blocks; "" for the whole vector."""
    layers = list(dict.fromkeys(str(r.get("layer", "")) for r in rows))
    if not scope.split:
        return ""
    if len(layers) == 1:
        return f", {scope.unit} `{layers[0]}`"
    return f", per {scope.unit} ({_plural(len(layers), scope.unit)}: {_names([f'`{x}`' for x in layers])})"


def _what(quantity: str) -> tuple[str, str, bool]:
    """(display name, what its value is, whether it is a bound) of an MI quantity."""
    entry = get_estimator(quantity[3:])
    bound = entry.kind == "bound"
    return entry.display_name, ("a lower bound on the MI, not an estimate of it" if bound else
                                "an estimate of the MI") + ", in bits", bound


# ------------------------------------------------------------------------ (a) dependence
def _kind(row: Mapping[str, Any]) -> str:
    """What an MI row can say of dependence: "exact", "none", "shrinkage", "above", "below",
    "floor" (too few permutations for any corrected verdict) or "untested" (no null)."""
    verdict = str(row.get("family_verdict", ""))
    if verdict.startswith("not made: exact"):
        return "exact"
    if math.isnan(_number(row, "value")):
        return "none"
    if row.get("estimate_kind") == "shrinkage":
        return "shrinkage"
    if verdict == ABOVE:
        return "above"
    if verdict == NOT_ABOVE:
        return "below"
    if verdict.startswith("not made") and "permutations give p" in verdict:
        return "floor"
    return "untested"


def _permutations_needed(rows: Sequence[Mapping[str, Any]], correction: tuple[str, str, float]) -> int:
    """The fewest permutations whose p-value floor 1/(n + 1) can pass the correction over
    the largest family of `rows` (the rows that would be tested)."""
    method, family, alpha = correction
    sizes: dict[Any, int] = {}
    for r in rows:
        key = (str(r.get("layer", "")),) + ((_pair(r),) if family == "pair" else ())
        sizes[key] = sizes.get(key, 0) + 1
    m = max(sizes.values()) if method == "holm" else 1
    return max(1, math.ceil(round(m / alpha, 9)) - 1)


def _dependence(table: AnalysisTable, quantity: str, scope: _Scope, correction: tuple[str, str, float]) -> str:
    name, what, bound = _what(quantity)
    rows = _pair_rows(table, quantity)
    split = len({str(r.get("layer", "")) for r in rows}) > 1  # several tensors: say in how many

    def where(some):
        return _where(some, scope, split)

    kinds: dict[str, list[AnalysisRow]] = {}
    for r in rows:
        kinds.setdefault(_kind(r), []).append(r)
    above, below = kinds.get("above", []), kinds.get("below", [])
    tested = above + below
    method, family, alpha = correction
    over = "each client pair's checkpoints" if family == "pair" else "all client pairs' checkpoints"
    over += f" of one {scope.unit}" if scope.split else ""
    rate = "family-wise error rate" if method == "holm" else "false discovery rate"
    text = [f"Dependence by {name} (`{quantity}`{_scope_words(scope, rows)}: {what}):"]
    if tested:
        nulls = " or ".join(sorted({str(r.get("null_method", "")) for r in tested} - {"", "none"})) or "their"
        values = [_number(r, "value") for r in (above or tested)]
        details = [where(above)] if above else []
        per = f" per {scope.unit}" if scope.split else ""
        details.append(f"MI at least {_span(values)} bits{per}" if bound and above else
                       f"{'bound' if bound else 'MI'} {_span(values)} bits{per}")
        p_values = _span([_number(r, "p_value") for r in tested], 2)
        if method == "none":
            details.append(f"p-value {p_values}, not adjusted: each test at {alpha:g} alone")
        else:
            details.append(f"p-value {p_values}, adjusted by {METHOD_NAMES[method]} over {over}: "
                           f"{_span([_number(r, 'p_adjusted') for r in tested], 2)}, {rate} {alpha:g}")
        text.append(f"{len(above)} of the {len(tested)} rows tested {'lies' if len(above) == 1 else 'lie'} above "
                    f"their {nulls} null ({'; '.join(details)}).")
    capped = [r for r in rows if "near its ceiling" in str(r.get("note", ""))]
    if capped:
        text.append(f"{_plural(len(capped), 'row')} ({where(capped)}) {'sits' if len(capped) == 1 else 'sit'} near "
                    "the bound's ceiling (1 + ln of the runs per evaluation fold, whatever the MI): there it says "
                    "only that the MI is at least that much, and more runs raise the ceiling only slowly.")
    floor = kinds.get("floor", [])
    if floor:
        n = _permutations_needed(floor + tested, correction)
        text.append(f"No verdict in {_plural(len(floor), 'row')} ({where(floor)}): its `family_verdict` says "
                    f"\"{floor[0]['family_verdict']}\"; what would make one: at least {n} permutations "
                    f"(`n_permutations={n}`, `--permutations {n}`).")
    untested = kinds.get("untested", [])
    if untested:
        n = _permutations_needed(untested + floor + tested, correction)
        text.append(f"No null in {_plural(len(untested), 'row')} ({where(untested)}: `p_value` empty): "
                    f"what would make a verdict: a permutation null of at least {n} shuffles "
                    f"(`n_permutations={n}`, `--permutations {n}`).")
    shrinkage = kinds.get("shrinkage", [])
    if shrinkage:
        text.append(f"{_plural(len(shrinkage), 'row')} ({where(shrinkage)}) are Ledoit-Wolf shrinkage numbers, "
                    "neither estimates nor bounds: no verdict is made from them. "
                    + _calibrated_remedy(shrinkage, scope))
    none = kinds.get("none", [])
    if none:
        reasons = "; ".join(dict.fromkeys(why for r in none if (why := no_estimate_reason(r)))) or "see the note"
        text.append(f"No estimate in {_plural(len(none), 'row')} ({where(none)}: {reasons}).")
    exact = kinds.get("exact", [])
    if exact:
        design = re.search(r"\((.*)\)", str(exact[0]["family_verdict"]))
        text.append(f"Not tested, exact by design: {where(exact)}"
                    + (f" ({design.group(1)})." if design else "."))
    text.append(_dependence_conclusion(above, below, scope, bound, alpha))
    first = text[1]
    text[1] = first[0].lower() + first[1:] if first[1:2].islower() else first  # "No verdict" -> "no verdict"
    return " ".join(text)


def _dependence_conclusion(above, below, scope, bound, alpha):
    if above and not scope.split:
        if not below:
            return (f"Conclusion: the clients' parameters are dependent across runs beyond chance at every tested "
                    f"{scope.label}.")
        return (f"Conclusion: the clients' parameters are dependent across runs beyond chance for "
                f"{_where(above, scope)}; elsewhere ({_where(below, scope)}) no dependence is detected.")
    if above:  # per tensor: corrected over each tensor's checkpoints, not over the tensors
        units = {str(r.get("layer", "")) for r in above}
        m = len({str(r.get("layer", "")) for r in above + below})
        strongest = min(_number(r, "p_adjusted") for r in above) * m
        over = (f"it holds after Bonferroni over the {m} {scope.unit}s tested too (smallest adjusted p x {m} = "
                f"{strongest:.2g})" if strongest <= alpha else
                f"but not after Bonferroni over the {m} {scope.unit}s tested (smallest adjusted p x {m} = "
                f"{strongest:.2g} > {alpha:g}): read it as suggestive")
        return (f"Conclusion: the clients' parameters are dependent across runs beyond chance in "
                f"{len(units)} of {m} {scope.unit}s, and so are the whole vectors (a {scope.unit}'s MI is at most "
                f"the whole vector's); {over}.")
    if below:
        return ("Conclusion: no dependence between the clients is detected beyond the null; that does not show them "
                "independent" + (" (a lower bound at its null may still bound a large MI)" if bound else
                                 " (a weaker dependence needs more runs to be seen)") + ".")
    return "Conclusion: this table does not say whether the clients are dependent."


# ------------------------------------------------------------------------ (b) MI trends
def _steps(table: AnalysisTable, quantity: str) -> tuple[list[AnalysisRow], list[AnalysisRow]]:
    """(every change row of `quantity` between clients, those not out of an exact value)."""
    rows = _pair_rows(table, f"delta_{quantity}")
    return rows, [r for r in rows if not str(r.get("family_verdict", "")).startswith(FROM_EXACT)]


def _by_series(steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(pair, layer) -> the overall verdict of its steps."""
    series: dict[tuple[str, str], list[str]] = {}
    for r in steps:
        series.setdefault((_pair(r), str(r.get("layer", ""))), []).append(str(r.get("family_verdict", "")))
    return {key: overall_trend(v) for key, v in series.items()}


def _span_of_steps(steps, iterations, label):
    first = min(int(r["checkpoint"]) for r in steps) - 1
    last = max(int(r["checkpoint"]) for r in steps)
    return f"{label}s {iterations.get(first, first)}-{iterations.get(last, last)}"


def _counted(trends: Mapping[tuple[str, str], str], words: Mapping[str, str], scope: _Scope) -> str:
    """"falling for 2 of 3 pairs (a-b, a-c); with no detectable change for 1 of 3 pairs (b-c)", "rising for
    all 3 pairs", "rising for pair a-b" or, per tensor, "rising for 2 of 4 tensors of pair a-b"."""
    pairs = list(dict.fromkeys(p for p, _ in trends))
    out = []
    for verdict in dict.fromkeys(trends.values()):
        members = [key for key, v in trends.items() if v == verdict]
        n, total = len(members), len(trends)
        every = "both" if total == 2 else f"all {total}"
        if scope.split and total == 1:
            which = f"pair {members[0][0]}"
        elif scope.split and len(pairs) == 1:
            which = (f"{every} {scope.unit}s" if n == total and total > 1 else
                     f"{n} of {_plural(total, scope.unit)}") + f" of pair {pairs[0]}"
        elif scope.split:
            which = f"{n} of {total} (pair, {scope.unit}) series"
        elif total == 1:
            which = f"pair {members[0][0]}"
        elif n == total:
            which = f"{every} pairs"
        else:
            which = f"{n} of {total} pairs ({_names([p for p, _ in members])})"
        out.append(f"{words.get(verdict, verdict)} for {which}")
    return "; ".join(out)


def _mi_trend(table: AnalysisTable, quantity: str, scope: _Scope, correction: tuple[str, str, float],
              iterations: Mapping[int, int]) -> str:
    name, _, _ = _what(quantity)
    levels = _pair_rows(table, quantity)
    head = f"MI trend by {name} (`{quantity}`{_scope_words(scope, levels)}):"
    whole = (f" No trend of the whole vector is measured (`settings[\"by_choice\"]`: \"{scope.by_choice}\")."
             if scope.by_choice else
             f" A {scope.unit}'s trend is not the whole vector's." if scope.split else "")
    every, steps = _steps(table, quantity)
    if not every:
        return (f"{head} no trend verdict: the table has no step between two {scope.label}s (`delta_{quantity}` "
                "rows). What would make one: a dump of at least two checkpoints, analysed with intervals." + whole)
    if not steps:
        why = str(every[0]["family_verdict"])[len(FROM_EXACT):].strip(" ()")
        return (f"{head} no trend verdict: its only {scope.label} step starts from a value exact by design ({why}), "
                f"which is no test of training. What would make one: a further checkpoint, so that two estimated "
                f"{scope.label}s follow it." + whole)
    trends = _by_series(steps)
    not_made = next((v for v in trends.values() if v.startswith("not made")), "")
    if not_made:
        return f"{head} no trend verdict: " + _why_no_trend(not_made, levels, scope) + whole
    adjusted = [p for r in steps if not math.isnan(p := _number(r, "p_adjusted"))]
    method, family, alpha = correction
    text = (f"{head} {_counted(trends, _TREND_WORDS, scope)}, from the `family_verdict` of the `delta_{quantity}` "
            f"rows ({describe(method, family, alpha)}" + (f"; adjusted p {_span(adjusted, 2)})." if adjusted else ")."))
    outside = [r for r in levels if r.get("outside_calibration") and r.get("estimate_kind") == "plain"]
    if outside:
        reasons = "; ".join(dict.fromkeys(m.group(0) for r in outside
                                          if (m := re.search(r"outside calibration: [^;)]*", str(r.get("note", ""))))))
        text += (f" Its estimates lie outside the calibrated regime ({reasons or 'see the notes'}): read the direction "
                 "of a change, not its size.")
    verdicts = set(trends.values())
    span = _span_of_steps(steps, iterations, scope.label)
    within = f"within the {scope.unit}s, " if scope.split else ""
    conclusion = {"rising": f"{within}the clients became more dependent over {span}",
                  "falling": f"{within}the clients became less dependent over {span}",
                  "no detectable change": f"{within}no change in the clients' dependence is detected over {span}",
                  "mixed": f"{within}the clients' dependence rose at some steps and fell at others over {span}"}
    if len(verdicts) == 1:
        return f"{text} Conclusion: {conclusion[verdicts.pop()]}.{whole}"
    return f"{text} Conclusion: the series differ over {span}; read each in the trends.{whole}"


def _why_no_trend(verdict: str, levels: Sequence[Mapping[str, Any]], scope: _Scope) -> str:
    if verdict == BOUND:
        return (f"its rows are lower bounds on the MI, and a bound that rises or falls is not an MI that does "
                f"(`family_verdict` \"{verdict}\"). " + _calibrated_remedy(levels, scope))
    if verdict == SHRINKAGE:
        return (f"its rows are Ledoit-Wolf shrinkage numbers, neither estimates nor bounds (`family_verdict` "
                f"\"{verdict}\"). " + _calibrated_remedy(levels, scope))
    if verdict.startswith(NO_ESTIMATE):
        return (f"a step from or to a row without an estimate (`family_verdict` \"{verdict}\"). What would make one: "
                "an estimate at every checkpoint (the rows' notes say why there is none).")
    if verdict == "not made: no interval":
        return ("its steps have no interval (`family_verdict` \"not made: no interval\"). What would make one: "
                "intervals (`analyze` with `ci_resamples` above 0, the default).")
    return f"`family_verdict` \"{verdict}\"."


def _calibrated_remedy(levels: Sequence[Mapping[str, Any]], scope: _Scope) -> str:
    """What would give a calibrated estimate in place of `levels` (bounds or shrinkage
    numbers), from their notes: the runs the joint dimension needs, or why the copula
    estimate was outside its regime."""
    dims = [int(m.group(1)) for r in levels if (m := re.search(r"(\d+) joint dims", str(r.get("note", ""))))]
    runs = [int(_number(r, "n_runs")) for r in levels if not math.isnan(_number(r, "n_runs"))]
    fallback = next((m.group(1) for r in levels
                     if (m := re.search(r"the copula estimate is (outside calibration: [^)]*)", str(r.get("note", ""))))),
                    "")
    if dims:
        d = max(dims)
        has = f" (this table has {max(runs)})" if runs else ""
        which = f"the largest {scope.unit}'s" if scope.split else "the whole parameter vector's"
        return (f"What would make one: a calibrated estimate, the Gaussian copula MI (`mi_{PRIMARY}`), which "
                f"`analyze`'s \"auto\" rule makes with at least {COPULA_MIN_RUNS_PER_DIM} runs per varying joint "
                f"dimension: {which} {d} joint dims need at least {runs_for_calibrated_estimate(d)} runs{has}"
                + ("." if scope.split else "; or fewer dimensions at once, in blocks (`by=\"auto\"`) or one tensor "
                                           "at a time (`by=\"layer\"`, `--by layer`)."))
    if fallback:
        return (f"What would make one: a copula estimate inside its calibrated regime; this table's was {fallback} "
                "(the note of each row says so).")
    return (f"What would make one: a calibrated estimate (the Gaussian copula MI needs at least "
            f"{COPULA_MIN_RUNS_PER_DIM} runs per varying joint dimension: mianalysis.analysis.inference.regime).")


# ------------------------------------------------------------------------ (c) distances
def _distances(table: AnalysisTable, scope: _Scope, correction: tuple[str, str, float],
               iterations: Mapping[int, int]) -> str:
    metrics = [m for m in DISTANCE_NAMES if _pair_rows(table, m)]
    if not metrics:
        return "The table has no distance rows: nothing is said of how far apart the clients are."
    parts, verdicts, spans = [], set(), []
    for metric in metrics:
        every, steps = _steps(table, metric)
        title = f"{metric} ({DISTANCE_NAMES[metric]})"
        if not steps:
            parts.append(f"{title}: no verdict (" + ("no step between two checkpoints" if not every else
                                                     "its only step starts from a value exact by design") + ")")
            verdicts.add("none")
            continue
        trends = _by_series(steps)
        not_made = next((v for v in trends.values() if v.startswith("not made")), "")
        if not_made:
            parts.append(f"{title}: no verdict (`family_verdict` \"{not_made}\")")
            verdicts.add("none")
            continue
        first = min(int(r["checkpoint"]) for r in steps) - 1
        last = max(int(r["checkpoint"]) for r in steps)
        levels = _pair_rows(table, metric)
        start = [_number(r, "value") for r in levels if int(r["checkpoint"]) == first]
        end = [_number(r, "value") for r in levels if int(r["checkpoint"]) == last]
        adjusted = [p for r in steps if not math.isnan(p := _number(r, "p_adjusted"))]
        details = [f"{scope.label} {iterations.get(first, first)}: {_span(start)}",
                   f"{scope.label} {iterations.get(last, last)}: {_span(end)}"] if start and end else []
        details += [f"adjusted p {_span(adjusted, 2)}"] if adjusted else []
        parts.append(f"{title} {_counted(trends, _DISTANCE_WORDS, scope)}"
                     + (f" ({'; '.join(details)})" if details else ""))
        verdicts |= set(trends.values())
        spans.append(_span_of_steps(steps, iterations, scope.label))
    method, family, alpha = correction
    text = (f"Distances between the clients (mean over runs of each run's pair of parameter vectors"
            + (f", per {scope.unit}" if scope.split else "")
            + f"; verdicts from the `family_verdict` of the `delta_*` rows, {describe(method, family, alpha)}, steps "
              "out of a value exact by design left out): " + "; ".join(parts) + ".")
    span = spans[0] if len(set(spans)) == 1 else f"the {scope.label}s"
    conclusion = {"rising": f"the clients' parameters drift apart over {span}",
                  "falling": f"the clients' parameters come closer together over {span}",
                  "no detectable change": f"no change in how far apart the clients are is detected over {span}"}
    if len(verdicts) == 1 and (only := next(iter(verdicts))) in conclusion:
        return f"{text} Conclusion: {conclusion[only]}."
    if verdicts == {"none"}:
        return f"{text} Conclusion: this table says nothing of whether the clients drift apart."
    return f"{text} Conclusion: the distances do not all move the same way; read each in the trends."


# ------------------------------------------------------------------------ (d) headroom
def _headroom(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = headroom_verdicts(rows)
    if not lines:
        return "Headroom: the headroom table has no rows."
    rules = sorted({str(r["rule"]) for r in rows})
    line = lines[-1]
    body = line.split(": ", 1)[1] if ": " in line else line  # after "iteration N, against ...:"
    if body.startswith("no verdict"):
        conclusion = "this table does not say whether the clients could be combined better than by averaging"
    elif line.endswith("near-optimal here"):
        conclusion = "averaging is near-optimal against this reference: little is to be gained by other weights"
    else:
        conclusion = ("there is headroom: a combination better than the plain average exists against this reference "
                      "(how much of it a federation can run: the best runnable rule above)")
    return (f"Headroom over averaging (the error of the best combination of the clients' parameters as a share of "
            f"the plain average's, by `mianalysis headroom` with rules {', '.join(rules)}, at the last checkpoint): "
            f"{line}. Conclusion: {conclusion}.")
