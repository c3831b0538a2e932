"""The toolkit's main job end to end: sample -> dump -> analyze -> table -> figures."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..analysis import AnalysisRow, AnalysisTable, analyze, sidecar_path
from ..analysis.inference.choice import AUTO_PREFIX
from ..analysis.inference.familywise import FROM_EXACT, describe, familywise_verdicts
from ..analysis.inference.intervals import SHRINKAGE
from ..estimators.registry import estimator_names
from .plots import save_figure

if TYPE_CHECKING:  # names used only in type hints
    from ..tasks.base import Task

__all__ = [
    "run_experiment", "summary_table", "TRENDS", "FAMILYWISE", "FAMILY", "step_verdicts", "trend_steps",
    "correction_text", "overall_trend", "trend_summary", "finding"
]


def run_experiment(task: Task, *, runs: int, out_dir: str | os.PathLike, name: str, seed: int = 0, every: int = 1,
                   init: str = "per-run", chunk_size: int = 64, n_permutations: int | Mapping[str, int] = 0, k: int = 3,
                   progress: bool = True, dump_dir: str | os.PathLike | None = None,
                   estimators: str | Sequence[str] = "auto") -> AnalysisTable:
    """Sample `runs` runs of `task`, analyse them and draw the MI and distance figures.

    Writes ``out_dir/NAME.csv`` (the analysis table), ``out_dir/NAME_mi.png`` (Figure 1/2
    analogue), ``out_dir/NAME_distances.png`` (Figure 3/4 analogue) and the table's sidecar
    ``out_dir/NAME.csv.json``: the experiment's record (task settings, timings, and the
    provenance of this session and of the dump: versions, machine, command line, times)
    with the table's own sidecar (analysis settings, format version) under ``"analysis"``. The dump goes to `dump_dir`
    (default ``out_dir/dumps/NAME``) and is resumed if it exists with the same settings.
    `estimators` are :func:`mianalysis.analyze`'s (default "auto": per pair and checkpoint an
    estimate inside its calibrated regime or a labelled lower bound).

    Returns
    -------
    table : AnalysisTable
        The analysis table.
    """
    from ..provenance import collect, utc_now
    from ..sampling import ParameterSampler

    started = utc_now()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_dir = Path(dump_dir) if dump_dir else out_dir / "dumps" / name
    sampler = ParameterSampler(task, seed=seed, init=init, every=every, chunk_size=chunk_size, progress=progress)
    start = time.perf_counter()
    dump = sampler.sample(runs, dump_dir)
    sampled = time.perf_counter()
    rows = analyze(dump, estimators=estimators, k=k, n_permutations=n_permutations, random_state=seed,
                   progress=progress)
    analysed = time.perf_counter()
    rows.write(out_dir / f"{name}.csv")
    record = {"task": task.name, "settings": task.settings, "runs": runs, "seed": seed, "every": every,
              "init": init, "shared": list(sampler.shared), "permutations": n_permutations, "k": k,
              "n_params": dump.n_params, "checkpoints": dump.checkpoints,
              "sampling_seconds": round(sampled - start, 1), "analysis_seconds": round(analysed - sampled, 1),
              "provenance": [collect(started, finished=True)], "dump_provenance": dump.provenance}
    title = f"{name}: {len(dump.checkpoints) - 1} checkpoints after init, {dump.n_params} parameters"
    save_figure(rows, "mi", out_dir / f"{name}_mi.png", title=title, record=record)
    save_figure(rows, "distances", out_dir / f"{name}_distances.png", title=title, record=record)
    # The record is the table's sidecar: the table's own (settings, format version, provenance)
    # goes in it under "analysis", where AnalysisTable.read finds it.
    table = out_dir / f"{name}.csv"
    record["analysis"] = {"format_version": rows.sidecar["format_version"], "table": table.name,
                          **{k: v for k, v in rows.sidecar.items() if k != "format_version"}}
    sidecar_path(table).write_text(json.dumps(record, indent=1) + "\n")
    return rows


def _fmt(v, width=7, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return " " * (width - 1) + "-"
    if isinstance(v, float) and math.isinf(v):
        return f"{'inf':>{width}}"
    return f"{v:>{width}.{digits}f}"


def summary_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Text table per checkpoint and client pair: MI by each estimator with its null mean
    and p-value, and the three mean distances.

    A table of ``analyze(estimators="auto")`` (its MI rows' notes start with "auto: ") has
    one line per MI row instead, naming its estimator and saying why it is that one (and
    why a value is infinite, or outside calibration); a p-value at its permutation floor
    1 / (n_permutations + 1) is marked "*" (the p-value is at most that), and a line under
    the table says so. A row of a pair without that estimator at a checkpoint shows "-".
    """
    table = AnalysisTable.of(rows)
    quantities = {r["quantity"] for r in rows}
    ests = [e for e in estimator_names() if f"mi_{e}" in quantities]
    metrics = [m for m in ("euclidean", "manhattan", "chebyshev") if m in quantities]
    if any(str(r.get("note", "")).startswith(AUTO_PREFIX) for e in ests for r in table.select(f"mi_{e}")):
        return _auto_summary(table, ests, metrics)
    head = f"{'iter':>5} {'pair':>6}"
    for e in ests:
        head += f" {'MI ' + e[:5]:>9} {'null':>7} {'p':>6}"
    for m in metrics:
        head += f" {m[:9]:>9}"
    lines = [head, "-" * len(head)]
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    checkpoints = sorted({(r["checkpoint"], r["iteration"]) for r in rows})
    for t, it in checkpoints:
        for a, b in pairs:
            line = f"{it:>5} {a + '-' + b:>6}"
            for e in ests:
                hit = [x for x in table.select(f"mi_{e}", a, b) if x["checkpoint"] == t]
                line += (f" {_fmt(hit[0]['value'], 9)} {_fmt(hit[0]['null_mean'])} {_fmt(hit[0]['p_value'], 6)}"
                         if hit else f" {_fmt(None, 9)} {_fmt(None)} {_fmt(None, 6)}")
            for m in metrics:
                hit = [x for x in table.select(m, a, b) if x["checkpoint"] == t]
                line += f" {_fmt(hit[0]['value'] if hit else None, 9, 4)}"
            lines.append(line)
    return "\n".join(lines)


def _auto_summary(table, ests, metrics):
    """summary_table's lines for a table of ``estimators="auto"``: one per MI row, with its
    estimator and the reason it is that one."""
    permutations = table.settings.get("permutations", {}) if isinstance(table.settings, Mapping) else {}
    head = f"{'iter':>5} {'pair':>6} {'estimator':>9} {'MI bits':>9} {'null':>7} {'p':>7}"
    for m in metrics:
        head += f" {m[:9]:>9}"
    head += "  which estimator, and why"
    lines, floored = [head, "-" * len(head)], False
    pairs = sorted({(r["client_a"], r["client_b"]) for r in table if r["client_b"] != ""})
    checkpoints = sorted({(r["checkpoint"], r["iteration"]) for r in table})
    for t, it in checkpoints:
        for a, b in pairs:
            mi = sorted((r for e in ests for r in table.select(f"mi_{e}", a, b, layer="") if r["checkpoint"] == t),
                        key=lambda r: r["quantity"] == "mi_ksg")  # the primary row first
            distances = ""
            for m in metrics:
                hit = [x for x in table.select(m, a, b, layer="") if x["checkpoint"] == t]
                distances += f" {_fmt(hit[0]['value'] if hit else None, 9, 4)}"
            for i, r in enumerate(mi):
                e = r["quantity"][3:]
                n = permutations.get(e, 0) if isinstance(permutations, Mapping) else 0
                p = _fmt(r["p_value"], 6)
                at_floor = bool(n) and r["null_method"] == "permutation" and np.isclose(r["p_value"], 1 / (n + 1))
                floored |= at_floor
                line = (f"{it:>5} {a + '-' + b:>6} {e:>9} {_fmt(r['value'], 9)} {_fmt(r['null_mean'])} "
                        f"{p + ('*' if at_floor else ' ')}")
                lines.append(line + (distances if i == 0 else " " * len(distances)) + "  " + _why(r))
    if floored:
        lines.append("* p at its permutation floor 1/(permutations + 1): the p-value is at most this")
    return "\n".join(lines)


def _why(row):
    """Which estimator an "auto" row is and why, from its note: the "auto: " parts, and
    what makes a value infinite or outside calibration."""
    parts = str(row.get("note", "")).split("; ")
    why = [p[len(AUTO_PREFIX):] for p in parts if p.startswith(AUTO_PREFIX)]
    if not np.isfinite(row["value"]):  # no "inf" or "-" without its reason
        why += [p for p in parts if "MI is" in p or p.startswith("no bound")]
    if row.get("outside_calibration"):
        why += [p for p in parts if p.startswith("outside calibration") or "tie" in p]
    return "; ".join(why)


TRENDS = ("p-values of the paired change between consecutive checkpoints (from its interval), corrected over "
          "a family of steps")
FAMILYWISE = "holm"  # the correction of the trend findings (mianalysis.analysis.inference.familywise)
FAMILY = "pair"


def _alpha(table):
    """1 - the table's interval level (0.05 when it records none): the per-step verdicts' error."""
    level = table.settings.get("ci_level")
    return round(1 - level, 12) if isinstance(level, float) and 0 < level < 1 else 0.05


def trend_steps(rows: Sequence[Mapping[str, Any]], quantity: str, client_a: str, client_b: str, *, familywise: str = FAMILYWISE,
                family: str = FAMILY, alpha: float | None = None) -> list[tuple[AnalysisRow, float, str]]:
    """[(delta row, adjusted p, verdict)] of one pair's steps of `quantity`, corrected by
    `familywise` over `family`: "pair", this pair's steps; "cell", every pair's steps of
    `quantity` in the table. The steps out of a value exact by rule (the shared start, where
    the clients are identical and the design fixes every MI and distance; a fixed start's
    constant parameters) are no test of training and are left out, here and in the table's
    own ``family_verdict``, by one rule
    (:func:`mianalysis.analysis.inference.familywise.familywise_verdicts`): for a sampled dump these
    are the steps after the first trained checkpoint. `alpha` defaults to 1 - the table's
    ``ci_level``."""
    table = AnalysisTable.of(rows)
    pairs = [(client_a, client_b)] if family == "pair" else \
        sorted({(r["client_a"], r["client_b"]) for r in table if r["quantity"] == f"delta_{quantity}"})
    members = [r for a, b in pairs for q in (quantity, f"delta_{quantity}") for r in table.select(q, a, b)]
    result = familywise_verdicts(members, method=familywise, family=family,
                                 alpha=_alpha(table) if alpha is None else alpha)
    return [(r, float(p), v) for r, p, v in zip(members, result.adjusted_p, result.verdicts)
            if r["quantity"] == f"delta_{quantity}" and (r["client_a"], r["client_b"]) == (client_a, client_b)
            and not v.startswith(FROM_EXACT)]


def step_verdicts(rows: Sequence[Mapping[str, Any]], quantity: str, client_a: str, client_b: str, *,
                  familywise: str = FAMILYWISE, family: str = FAMILY,
                  alpha: float | None = None) -> list[tuple[int, str]]:
    """[(iteration, verdict)] of one pair's steps (those out of an exact value left out: for a
    sampled dump, the steps after the first trained checkpoint), the verdicts corrected over a family (Holm over the pair's steps by default; see
    :func:`trend_steps`; ``familywise="none"`` gives the per-step interval verdicts)."""
    return [(r["iteration"], v) for r, _, v in trend_steps(rows, quantity, client_a, client_b,
                                                            familywise=familywise, family=family, alpha=alpha)]


def correction_text(rows: Sequence[Mapping[str, Any]] = (), *, familywise: str = FAMILYWISE, family: str = FAMILY) -> str:
    """How the trend verdicts of `rows` are corrected, in words (for a finding's text): e.g.
    "Holm over each client pair's steps of one quantity (family-wise error rate 0.05),
    steps out of an exact value (the shared start) left out"."""
    return describe(familywise, family, _alpha(AnalysisTable.of(rows))) + \
        ", steps out of an exact value (the shared start) left out"


def overall_trend(verdicts: Iterable[str]) -> str:
    """One verdict for a series of step verdicts: "rising" if some step rises and none
    falls, "falling" if the reverse, "mixed" if both, "no detectable change" if no step
    has one; a verdict not made at any step (shrinkage) or no steps at all make none.

    Examples
    --------
    >>> from mianalysis.report.experiment import overall_trend
    >>> overall_trend(["rising", "no detectable change"]), overall_trend(["rising", "falling"])
    ('rising', 'mixed')
    >>> overall_trend(["rising", "not made: shrinkage estimate"])
    'not made: shrinkage estimate'
    """
    verdicts = list(verdicts)
    if not verdicts:
        return "not made: no change rows with intervals in this table"
    for v in verdicts:
        if v.startswith("not made") or not v:
            return v or "not made: no interval"
    up, down = "rising" in verdicts, "falling" in verdicts
    return "mixed" if up and down else "rising" if up else "falling" if down else "no detectable change"


def trend_summary(rows: Sequence[Mapping[str, Any]], *, familywise: str = FAMILYWISE, family: str = FAMILY) -> str:
    """Text lines: per MI, distance and update-cosine quantity and client pair, the overall
    trend over its steps (those out of an exact value, the shared start, left out), and the verdict and adjusted
    p-value of every step, under a first line naming the correction (:func:`correction_text`)."""
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    quantities = [q for q in (*(f"mi_{e}" for e in estimator_names()), "euclidean", "manhattan", "chebyshev",
                              "cosine_update")
                  if any(r["quantity"] == q for r in rows)]
    lines = []
    for q in quantities:
        for a, b in pairs:
            steps = trend_steps(rows, q, a, b, familywise=familywise, family=family)
            verdicts = {v for _, _, v in steps}
            if len(steps) > 1 and len(verdicts) == 1 and next(iter(verdicts)).startswith("not made"):
                detail = "every step"  # one reason for every step: said once
            else:
                detail = ", ".join(f"{r['iteration']}: {v}" for r, _, v in steps)
            adjusted = ", ".join(f"{p:.2g}" for _, p, _ in steps if np.isfinite(p))
            lines.append(f"{q} {a}-{b}: {overall_trend(v for _, _, v in steps)}" + (f" ({detail})" if detail else "")
                         + (f" [adjusted p: {adjusted}]" if adjusted else ""))
    if not lines:
        return ""
    return "\n".join([f"verdicts: {correction_text(rows, familywise=familywise, family=family)}", *lines])


def finding(rows: Sequence[Mapping[str, Any]], n_permutations: int | Mapping[str, int] | None = None
            ) -> dict[str, bool | str]:
    """Does the core paper's finding hold in this table? MI above its null (p <= 0.05 at
    every checkpoint after the first), MI rising and every distance growing.

    "Above null" is read from each row's p-value alone (the permutation test's, or the
    analytic null's), never from comparing the estimate with the null's mean. Pass the
    analysis' `n_permutations` (as given to :func:`mianalysis.analyze`) to have no verdict
    made where so few permutations were run that no p-value can reach 0.05 (fewer than
    19; rows with an analytic null need none); without it such rows give False. No verdict
    is made from a Ledoit-Wolf shrinkage estimate, nor where a row has no null or no estimate.

    Rising and growing are read from the steps' p-values corrected over each pair's steps
    (:func:`step_verdicts`: Holm over the steps not out of an exact value, at 1 -
    the table's interval level), never from comparing point estimates: for every pair,
    some step's change is a rise after the correction and none a fall (:func:`overall_trend`
    is "rising"). "Every pair" needs no correction over pairs: each must pass on its own.
    "Above null" needs none either: every checkpoint's test must reject. Returns a dict: True
    or False per test, or a "not made: ..." string where no verdict can be made (a
    Ledoit-Wolf shrinkage estimate, a row without a null or estimate, too few
    permutations, or a table without intervals)."""
    table = AnalysisTable.of(rows)
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    out = {}
    for e in estimator_names():
        series = [[r for r in table.select(f"mi_{e}", a, b) if r["iteration"] > 0] for a, b in pairs]
        if not series or not series[0]:
            continue
        permutations = n_permutations.get(e, 0) if isinstance(n_permutations, Mapping) else n_permutations
        out[f"mi_{e}_above_null"] = _all_above_null([r for s in series for r in s], permutations)
        out[f"mi_{e}_rising"] = _all_rising([overall_trend(v for _, v in step_verdicts(table, f"mi_{e}", a, b))
                                             for a, b in pairs])
    out["distances_growing"] = _all_rising([overall_trend(v for _, v in step_verdicts(table, m, a, b))
                                            for m in ("euclidean", "manhattan", "chebyshev") for a, b in pairs
                                            if table.select(m, a, b)])
    return out


def _all_rising(trends):
    made = [t for t in trends if not t.startswith("not made")]
    if len(made) < len(trends):
        return next(t for t in trends if t.startswith("not made"))
    return bool(made) and all(t == "rising" for t in made)


def _all_above_null(rows, n_permutations=None, alpha=0.05):
    tested = [r for r in rows if not np.isinf(r["value"])]  # an infinite MI (identical samples) needs no test
    if any(np.isnan(r["value"]) for r in tested):
        return "not made: no estimate"
    if any(r["estimate_kind"] == "shrinkage" for r in tested):
        return SHRINKAGE
    if any(np.isnan(r["p_value"]) for r in tested):
        return "not made: no null"
    permuted = [r for r in tested if r["null_method"] == "permutation"]
    if permuted and n_permutations is not None and 1 / (n_permutations + 1) > alpha:
        return f"not made: {n_permutations} permutations cannot give p <= {alpha:g}"
    return all(r["p_value"] <= alpha for r in tested)
