"""False and missed trend verdicts where the truth is known: uncorrected, Holm and BH.

No experiment is rerun: this script reads what the sources-of-dependence experiment wrote.

- Its per-cell analysis tables (``--tables``, default runs/sources_of_dependence/full, made
  by ``python experiments/sources_of_dependence.py --only gaussian``: 18 cells of about
  half a minute each): every step's change with its p-value (``change_p``; tables made
  before that column get it from their intervals). For these cells each procedure's
  verdicts are computed from the p-values, over the steps after the first trained
  checkpoint, as the findings read them (:func:`mianalysis.report.experiment.trend_steps`).
- Its committed summary (``--summary``, figures/sources_of_dependence/sources_of_dependence.csv) for the cells
  that have no table here (the signal-rnn cells, minutes each): their step p-values
  (``step_p``) where every row of the quantity holds them, from which each procedure's
  verdicts are exact; otherwise their step verdicts only, uncorrected where the summary
  predates the correction. A corrected procedure rejects a
  subset of what the uncorrected one rejects (Holm and BH reject only p <= alpha), so its
  false verdicts there are at most the uncorrected ones: exact when those are 0, or when
  every family holds one test (then Holm and BH are the uncorrected test), a bound
  otherwise (column ``bound``).

Truth: in a cell with a fixed start and nothing shared the clients are independent at every
checkpoint (MI 0), so every "rising" or "falling" is false; on gaussian-sgd every step is
compared with the exact MI's step (wrong: a verdict of the other sign, or one where the
exact MI does not change; missed: "no detectable change" where it does).

    python experiments/familywise_errors.py [--tables DIR] [--summary CSV] [--out DIR]

Writes figures/familywise_errors/familywise_errors.csv (+ .csv.json sidecar with the inputs and provenance)
and the page docs/results/tables/familywise_errors.md (with --out DIR: into DIR).
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import numpy as np
from _results import figures_of, WORK, write_csv, write_page, write_sidecar

from mianalysis.analysis import AnalysisTable
from mianalysis.analysis.inference.familywise import adjust
from mianalysis.report.experiment import trend_steps
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/familywise_errors/: where this script writes

ESTIMATORS = (("mi_gaussian", "Gaussian"), ("mi_ksg", "KSG"))
PROCEDURES = (("none", "pair"), ("holm", "pair"), ("bh", "pair"), ("holm", "cell"), ("bh", "cell"))
CELL = re.compile(r"^(?P<part>[a-z-]+)_(?P<init>per-run|fixed)_(?P<shared>[a-z+]+)_seed(?P<seed>\d+)\.csv$")
NO_CHANGE = "no detectable change"


def _direction(old, new):
    if abs(new - old) <= 1e-9 * (1 + abs(old)):
        return NO_CHANGE
    return "rising" if new > old else "falling"


def exact_steps(table, a, b):
    """{iteration: direction of the exact MI's step into it}, empty without exact MI rows."""
    series = table.select("mi_exact", a, b)
    return {now["iteration"]: _direction(old["value"], now["value"]) for old, now in zip(series, series[1:])}


def table_cells(folder):
    """[(cell key, table)] of the per-cell analysis tables in `folder`."""
    out = []
    for path in sorted(Path(folder).glob("*.csv")):
        match = CELL.match(path.name)
        if match:
            key = (match["part"], match["init"], match["shared"], int(match["seed"]))
            out.append((key, AnalysisTable.read(path)))
    return out


def _count(steps):
    """Counts of [(verdict, truth)] steps whose verdict was made."""
    made = [(v, t) for v, t in steps if not v.startswith("not made")]
    return {"verdicts": len(made),
            "false": sum(v != NO_CHANGE and v != t for v, t in made),
            "real_changes": sum(t != NO_CHANGE for _, t in made),
            "missed": sum(v == NO_CHANGE and t != NO_CHANGE for v, t in made)}


def from_tables(cells, select, truth_of, source):
    """Rows of counts per estimator and procedure over the cells `select` keeps, the truth of
    each step from `truth_of(key, table, a, b)` ({iteration: direction})."""
    rows = []
    chosen = [(key, t) for key, t in cells if select(key)]
    for q, name in ESTIMATORS:
        for method, family in PROCEDURES:
            steps, pairs, wrong_pairs = [], 0, 0
            for key, table in chosen:
                for a, b in sorted({(r["client_a"], r["client_b"]) for r in table.select(f"delta_{q}")}):
                    truth = truth_of(key, table, a, b)
                    mine = [(v, truth.get(r["iteration"], NO_CHANGE))
                            for r, _, v in trend_steps(table, q, a, b, familywise=method, family=family)]
                    steps += mine
                    pairs += 1
                    wrong_pairs += _count(mine)["false"] > 0
            rows.append({"source": source, "cells": len(chosen), "estimator": name, "method": method,
                         "family": family, "basis": "p-values of the cell tables", **_count(steps),
                         "pairs": pairs, "pairs_with_false": wrong_pairs, "bound": False})
    return rows


def _entries(text):
    """[(step, value)] of a summary column such as ``steps`` or ``step_p``
    ("8: rising; 12: no detectable change")."""
    return [tuple(s.split(": ", 1)) for s in text.split("; ") if s]


def _verdicts(row):
    """[(step, verdict)] of a summary row: its uncorrected verdicts where it has them."""
    return _entries(row.get("steps_uncorrected") or row["steps"])


def _step_p(row):
    """[p-value per step] of a summary row's ``step_p`` column (NaN for a step whose verdict
    was not made, e.g. a shrinkage estimate's: it is tested in no family), or None where the
    row has none."""
    text = row.get("step_p") or ""
    if not text:
        return None
    verdicts = dict(_verdicts(row))
    values = [np.nan if verdicts.get(step, "").strip().startswith("not made") else float(v)
              for step, v in _entries(text)]
    return values or None


def _counts_from_p(mine, q, method, family, alpha=0.05):
    """Counts of `method`'s verdicts over `family` from the rows' step p-values, where the
    truth is no change at every step (each rejection is false)."""
    series = [(r["seed"], np.asarray(_step_p(r), dtype=float)) for r in mine if r["quantity"] == q]
    groups: dict[object, list[int]] = {}
    for i, (seed, _) in enumerate(series):
        groups.setdefault(i if family == "pair" else seed, []).append(i)
    rejected = {}
    for members in groups.values():
        adjusted = adjust(np.concatenate([series[i][1] for i in members]), method)
        parts = np.split(adjusted, np.cumsum([series[i][1].size for i in members])[:-1])
        rejected.update({i: part <= alpha for i, part in zip(members, parts)})
    made = sum(int(np.isfinite(p).sum()) for _, p in series)
    return {"verdicts": made, "false": int(sum(r.sum() for r in rejected.values())), "real_changes": 0,
            "missed": 0, "pairs": len(series), "pairs_with_false": int(sum(r.any() for r in rejected.values()))}


def from_summary(path, exclude):
    """Rows of counts for the fixed-start, nothing-shared cells of the summary at `path` that
    are not in `exclude` (cell keys with a table): from the step p-values where every row
    holds them (exact for every procedure), else from the step verdicts, uncorrected, with
    the corrected procedures' false verdicts exact or a bound (module docstring)."""
    with open(path, newline="") as fh:
        summary = [r for r in csv.DictReader(fh) if r["init"] == "fixed" and r["shared"] == "nothing"
                   and (r["part"], r["init"], r["shared"], int(r["seed"])) not in exclude]
    rows = []
    for part in sorted({r["part"] for r in summary}):
        mine = [r for r in summary if r["part"] == part]
        cells = {(r["seed"]) for r in mine}
        for q, name in ESTIMATORS:
            source = {"source": f"{mine[0]['task']} ({mine[0]['preset']}), fixed start, nothing shared",
                      "cells": len(cells), "estimator": name}
            if all(_step_p(r) is not None for r in mine if r["quantity"] == q):
                for method, family in PROCEDURES:
                    rows.append({**source, "method": method, "family": family,
                                 "basis": "step p-values of the committed summary",
                                 **_counts_from_p(mine, q, method, family), "bound": False})
                continue
            series = [[v for _, v in _verdicts(r)] for r in mine if r["quantity"] == q]
            steps = [(v, NO_CHANGE) for s in series for v in s]
            base = _count(steps)
            wrong_pairs = sum(_count([(v, NO_CHANGE) for v in s])["false"] > 0 for s in series)
            for method, family in PROCEDURES:
                per_family = 1 if family == "pair" else len(series) // max(len(cells), 1)
                exact = method == "none" or base["false"] == 0 or (all(len(s) <= 1 for s in series)
                                                                    and per_family <= 1)
                rows.append({**source, "method": method, "family": family,
                             "basis": "step verdicts of the committed summary", **base,
                             "pairs": len(series), "pairs_with_false": wrong_pairs, "bound": not exact})
    return rows


def markdown(rows, tables_used):
    """The page: one line per truth and estimator, one column per procedure."""
    heads = ["none" if m == "none" else f"{'Holm' if m == 'holm' else 'BH'}, {f}" for m, f in PROCEDURES]
    lines = ["False and missed trend verdicts where the truth is known, uncorrected (`none`: each step's 95 % "
             "interval alone) and corrected at 0.05 by Holm (family-wise error rate) or Benjamini-Hochberg (BH, "
             "false discovery rate) over each client pair's steps of one quantity (`pair`) or all pairs' steps of "
             "one quantity in a cell (`cell`); the steps after the first trained checkpoint, as the findings read "
             "them. Each entry: false verdicts (rising or falling where the MI does not change, or a change of the "
             "wrong sign), the client pairs whose trend they make wrong, and real changes (exact MI, however "
             "small) called no detectable change. ≤: a bound (a corrected procedure rejects a subset of what the "
             "uncorrected one rejects, and the summary holds no p-values for these cells). Made by "
             "`python experiments/familywise_errors.py` from " + tables_used + ".", ""]
    lines += ["| truth known in | estimator | step verdicts | real changes | " + " | ".join(heads) + " |",
              "|---|---|---|---|" + "---|" * len(heads)]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["verdicts"]:
            groups.setdefault((f"{r['source']} ({r['cells']} cells)", r["estimator"]), []).append(r)
    for (source, estimator), mine in groups.items():
        cells = []
        for r in mine:
            le = "≤ " if r["bound"] else ""
            text = f"{le}{r['false']} false ({le}{r['pairs_with_false']} of {r['pairs']} pairs)"
            if r["real_changes"]:
                text += f", {r['missed']} missed"
            cells.append(text)
        real = mine[0]["real_changes"] or "-"
        lines.append(f"| {source} | {estimator} | {mine[0]['verdicts']} | {real} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=str(WORK / "sources_of_dependence" / "full"))
    parser.add_argument("--summary", default=str(figures_of("sources_of_dependence") / "sources_of_dependence.csv"))
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    cells = table_cells(args.tables)
    gaussian = [(k, t) for k, t in cells if k[0] == "gaussian"]
    if not gaussian:
        parser.error(f"--tables: no gaussian-sgd cell tables in {args.tables}; make them with "
                     "`python experiments/sources_of_dependence.py --only gaussian`")
    cells = gaussian  # the other parts' tables (a rerun of some signal-rnn cells) are counted from the summary
    rows = from_tables(cells, lambda k: k[0] == "gaussian", lambda k, t, a, b: exact_steps(t, a, b),
                       "gaussian-sgd (paper), every design, against the exact MI")
    rows += from_tables(cells, lambda k: k[1:3] == ("fixed", "nothing"), lambda k, t, a, b: {},
                        "gaussian-sgd (paper), fixed start, nothing shared")
    rows += from_summary(args.summary, {k for k, _ in cells})
    out = Path(args.out)
    table = write_csv(rows, out / "familywise_errors.csv")
    used = (f"{len(cells)} cell tables of `experiments/sources_of_dependence.py` ({', '.join(sorted({k[0] for k, _ in cells}))}"
            f" parts, rerun at this version) and the committed `{Path(args.summary).name}` for the other cells")
    write_page(out, "familywise_errors", markdown(rows, used))
    write_sidecar(table, {"table": table.name, "cell_tables": [f"{'_'.join(map(str, k))}" for k, _ in cells],
                          "summary": Path(args.summary).name, "procedures": [list(p) for p in PROCEDURES],
                          "alpha": 0.05, "provenance": collect(started, finished=True)})
    print(markdown(rows, used))


if __name__ == "__main__":
    main()
