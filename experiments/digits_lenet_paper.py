"""digits-lenet as the core paper ran it: the pretrained LeNet's last layer retrained.

The paper retrains the last layer (84 -> 10, 850 parameters) of a pretrained LeNet on 200
augmented digits per client, Adam lr 1e-5, batch 50: 4 iterations. Every cell here starts
from the pretrained head (preset `paper`, ``head_start="pretrained"``):

- fixed start, nothing shared: every run starts from the same point and a run's clients
  draw their augmentation and data order apart, so the clients are independent (MI = 0);
- fixed start, augmentation shared: the only dependence is what the shared augmentation
  of a run creates;
- per-run start: the pretrained head plus N(0, 0.01^2) per weight and bias, drawn per run
  (``head_noise``), the same for a run's clients; nothing else shared;
- per-run start and augmentation shared: both sources of dependence at once;
- fixed start, augmentation shared, at 10,000 runs and at the paper's 26,400 runs: the one
  cell where shared randomness can create dependence, with 2.5 and 6.6 times the runs;
- fixed start, nothing shared, at 10,000 and 26,400 runs: the independent control at the
  run counts where the shared-augmentation cell's KSG rise reaches every pair.

4,000 runs per cell otherwise (the paper sampled 26,400; benchmarks/results/digits_paper.json
and docs/results/digits-lenet.md give the measured times that decided it).

Each cell is analysed with `mianalysis.analyze`: Gaussian MI (bias-corrected above 2 runs
per joint dimension, with a null from 100 permutations: at 4,000 runs a cell has about 2.4
runs per joint dimension, where the analytic null rejects too often, docs/concepts/intervals.md),
KSG MI (k = 3, standardised, 100 permutations), the three distances, a confidence interval on every estimate and on every
change between consecutive checkpoints, a verdict per step (rising / falling / no
detectable change, from the intervals), and the clients' test accuracy. Estimates outside
the regime where the estimators were calibrated are flagged (`mianalysis.analysis.inference.regime`).

    python experiments/digits_lenet_paper.py [--quick] [--runs N] [--only fixed-nothing,...]
        [--carry-over figures/digits_lenet_paper/digits_lenet_paper.csv] [--seed S]

(--quick: the first three cells at 300 runs with 10 permutations; --runs N: every cell at N;
--carry-over CSV: the cells of an earlier summary table that this run does not make are
copied into the new one, named as carried over in the page and the sidecar, which keeps
that table's provenance, so that one cell can be added or remade without rerunning the
others; --seed S: the sampler's seed and the analysis' random_state, default 0, another
seed's tables in digits_lenet_paper_seedS.* beside the seed-0 ones.)

Resumable per cell: dumps and tables go to runs/digits_lenet_paper/ (a finished cell is
read back, an interrupted one resumed). Writes figures/digits_lenet_paper/digits_lenet_paper.{csv,png}
(`_quick` with --quick) with provenance in the .csv.json sidecar, and the page
docs/results/tables/digits_lenet_paper.md (with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _digits_lenet_paper_figure import SEED, summary_figure
from _results import (figures_of, WORK, carried_over_note, carried_over_record, portable_record, read_earlier,
                      read_summary_table, write_atomic, write_csv, write_page, write_sidecar)
from _runner import LEGACY_ESTIMATORS  # the estimators of the committed tables

from mianalysis import ParameterSampler, analyze
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import AnalysisTable, sidecar_path
from mianalysis.report.experiment import correction_text, overall_trend, step_verdicts
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/digits_lenet_paper/: where this script writes

# The paper sampled 26,400 runs; benchmarks/results/digits_paper.json says why 4,000 here.
RUNS = 4000
CELL_RUNS = {"fixed-nothing-10000": 10000, "fixed-augmentation-10000": 10000, "fixed-nothing-26400": 26400,
             "fixed-augmentation-26400": 26400, "per-run-nothing-26400": 26400, "per-run-augmentation-26400": 26400}
QUICK_RUNS = 300
PERMUTATIONS = {"gaussian": 100, "ksg": 100}
QUICK_PERMUTATIONS = {"gaussian": 10, "ksg": 10}
GAUSSIAN_NULL = "permutation"
# cell -> (init, streams a run's clients share, task settings over the paper preset)
CELLS = {
    "fixed-nothing": ("fixed", (), {}),
    "fixed-augmentation": ("fixed", ("augmentation",), {}),
    "per-run-nothing": ("per-run", (), {}),
    "per-run-augmentation": ("per-run", ("augmentation",), {}),
    "fixed-nothing-10000": ("fixed", (), {}),
    "fixed-augmentation-10000": ("fixed", ("augmentation",), {}),
    "fixed-nothing-26400": ("fixed", (), {}),
    "fixed-augmentation-26400": ("fixed", ("augmentation",), {}),
    "per-run-nothing-26400": ("per-run", (), {}),
    "per-run-augmentation-26400": ("per-run", ("augmentation",), {}),
}
QUICK_CELLS = ("fixed-nothing", "fixed-augmentation", "per-run-nothing")
QUANTITIES = ("mi_gaussian", "mi_ksg", "euclidean", "manhattan", "chebyshev")


def describe(cell, task):
    """The cell in words: start and shared streams."""
    init, shared, _ = CELLS[cell]
    start = ("fixed start (the pretrained head)" if init == "fixed"
             else f"per-run start (pretrained head + N(0, {task.settings['head_noise']:g}^2))")
    return f"{start}; shared: {', '.join(shared) or 'nothing'}"


def run_cell(cell, runs, permutations, work, progress, seed=SEED):
    """Sample and analyse one cell (resumed where it stopped): its task, table and timings."""
    init, shared, settings = CELLS[cell]
    task = get_task("digits-lenet", "paper", **settings)
    table = work / f"{cell}.csv"
    timings = work / f"{cell}.seconds.json"  # of the session that finished the cell
    if not (table.exists() and sidecar_path(table).exists()):
        seconds = {}
        start = time.perf_counter()
        dump = ParameterSampler(task, seed=seed, init=init, shared=shared, progress=progress).sample(
            runs, work / "dumps" / cell)
        seconds["sampling"] = round(time.perf_counter() - start, 1)
        start = time.perf_counter()
        analyze(dump, estimators=LEGACY_ESTIMATORS, n_permutations=permutations, gaussian_null=GAUSSIAN_NULL, random_state=seed, out=table,
                progress=progress)
        seconds["analysis"] = round(time.perf_counter() - start, 1)
        write_atomic(timings, json.dumps(seconds) + "\n")
    return task, AnalysisTable.read(table), json.loads(timings.read_text()) if timings.exists() else {}


def outside(row):
    """Whether an estimate is outside the calibrated regime: the table's `outside_calibration`,
    or a Ledoit-Wolf shrinkage estimate (`estimate_kind`; none was within 5 % in the
    calibration) made because the covariance was singular at more than 2 runs per joint
    dimension, which that flag does not cover."""
    return bool(row["outside_calibration"]) or row["estimate_kind"] == "shrinkage"


def cell_rows(cell, task, rows, runs):
    """The figure's data as a tidy table: every checkpoint of every MI and distance quantity
    and client pair (value, interval, null, the verdict of the step into it, whether it is
    outside calibration) and of the clients' test accuracy, plus one "trend" row per
    quantity and pair (the overall verdict over the steps after the first trained
    checkpoint, as experiments/sources_of_dependence.py reads them)."""
    init, shared, _ = CELLS[cell]
    base = {"cell": cell, "init": init, "shared": "+".join(shared) or "nothing",
            "head_noise": task.settings["head_noise"] if init == "per-run" else 0.0, "runs": runs}
    out = []
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != "" and not r.get("layer")})
    for q in QUANTITIES:
        for a, b in pairs:
            deltas = {r["iteration"]: r for r in rows.select(f"delta_{q}", a, b)}
            for r in rows.select(q, a, b):
                d = deltas.get(r["iteration"], {})
                out.append({**base, "quantity": q, "pair": f"{a}-{b}", "iteration": r["iteration"],
                            "value": r["value"], "ci_low": r.get("ci_low", np.nan), "ci_high": r.get("ci_high", np.nan),
                            "null_mean": r.get("null_mean", np.nan), "p_value": r.get("p_value", np.nan),
                            "p_adjusted": r.get("p_adjusted", np.nan), "family_verdict": r.get("family_verdict", ""),
                            "step_change": d.get("value", np.nan), "step_se": d.get("change_se", np.nan),
                            "step_p": d.get("change_p", np.nan), "step_verdict": d.get("verdict", ""),
                            "step_p_adjusted": d.get("p_adjusted", np.nan),
                            "step_family_verdict": d.get("family_verdict", ""),
                            "outside_calibration": outside(r), "trend": "",
                            "note": r.get("note", "")})
            steps = step_verdicts(rows, q, a, b)
            out.append({**base, "quantity": q, "pair": f"{a}-{b}", "iteration": "", "value": np.nan,
                        "ci_low": np.nan, "ci_high": np.nan, "null_mean": np.nan, "p_value": np.nan,
                        "p_adjusted": np.nan, "family_verdict": "",
                        "step_change": np.nan, "step_se": np.nan, "step_p": np.nan,
                        "step_verdict": "; ".join(f"{it}: {v}" for it, v in steps),
                        "step_p_adjusted": np.nan, "step_family_verdict": "",
                        "outside_calibration": "", "trend": overall_trend(v for _, v in steps), "note": "trend row"})
    for c in sorted({r["client_a"] for r in rows if r["quantity"] == "accuracy"}):
        for r in rows.select("accuracy", c):
            out.append({**base, "quantity": "test_accuracy", "pair": c, "iteration": r["iteration"],
                        "value": r["value"], "ci_low": np.nan, "ci_high": np.nan, "null_mean": np.nan,
                        "p_value": np.nan, "p_adjusted": np.nan, "family_verdict": "",
                        "step_change": np.nan, "step_se": np.nan, "step_p": np.nan,
                        "step_verdict": "", "step_p_adjusted": np.nan, "step_family_verdict": "", "outside_calibration": "",
                        "trend": "", "note": f"sd over runs {float(r['spread']):.3g}"})
    return out


def _trend(summary, cell, q):
    """The cell's trend of `q`: the pairs' trends if they agree, else each pair's."""
    trends = {r["pair"]: r["trend"] for r in summary if r["cell"] == cell and r["quantity"] == q and r["trend"]}
    if len(set(trends.values())) == 1:
        return next(iter(trends.values()))
    return ", ".join(f"{p}: {t}" for p, t in trends.items())


def _at(summary, cell, q, iteration):
    """Mean over pairs (or clients) of `q` at `iteration`, with the pairs' range and flags."""
    hits = [r for r in summary if r["cell"] == cell and r["quantity"] == q and r["iteration"] == iteration]
    values = np.array([float(r["value"]) for r in hits])
    if not len(values):
        return "-"
    if not np.isfinite(values).all():
        return ", ".join(sorted({f"{v:g}" for v in values}))
    fmt = (lambda v: f"{v:.4g}") if q != "test_accuracy" else (lambda v: f"{v:.4f}")
    text = fmt(values.mean()) if np.ptp(values) <= 1e-3 * max(abs(values.mean()), 1e-12) else \
        f"{fmt(values.mean())} ({fmt(values.min())} to {fmt(values.max())})"
    nulls = [float(r["null_mean"]) for r in hits if np.isfinite(float(r["null_mean"]))]
    if nulls and q.startswith("mi_"):
        text += f", null {np.mean(nulls):.3g}"
    if any(r["outside_calibration"] is True for r in hits):
        text += " †"
    if any("ledoit-wolf shrinkage" in str(r["note"]).lower() for r in hits):
        text += " (shrinkage)"
    return text


def _runs_text(cell_runs):
    counts = sorted(set(cell_runs.values()))
    if len(counts) == 1:
        return f"{counts[0]:,} runs per cell"
    main = max(counts, key=lambda n: sum(v == n for v in cell_runs.values()))
    return f"{main:,} runs per cell (" + ", ".join(f"`{c}`: {n:,}" for c, n in cell_runs.items() if n != main) + ")"


def made_by(argv):
    """The command that made a table, for its page: the script with the arguments that
    shape the table (`argv` without --no-progress)."""
    return " ".join(["python experiments/digits_lenet_paper.py", *(a for a in argv if a != "--no-progress")])


def markdown(summary, cells, cell_runs, permutations, seconds, seed=SEED, command=made_by([])):
    its = sorted({r["iteration"] for r in summary if r["iteration"] != ""})
    first, last = (its[1], its[-1]) if len(its) > 1 else (its[0], its[0])
    lines = [f"digits-lenet, preset `paper` (pretrained LeNet; the last layer, 850 parameters, retrained by Adam lr "
             f"1e-5 on 200 augmented digits per client, batch 50: {its[-1]} iterations), 3 clients, "
             f"{_runs_text(cell_runs)}, seed {seed}. Gaussian MI, {permutations['gaussian']} permutations; KSG k = 3, standardised, "
             f"{permutations['ksg']} permutations. Values in bits, mean over the 3 client pairs (range when they "
             f"differ); `null` = the null's mean; † = outside the calibrated regime (`mianalysis.analysis.inference.regime`, or a Ledoit-Wolf "
             f"shrinkage estimate). Trends: "
             f"over the steps after the first trained checkpoint (iteration {first}), from the p-values of the paired "
             f"changes (from their intervals), {correction_text()} (identical for the 3 pairs, else per pair; "
             f"a checkpoint row's `step_verdict` is its step's own 95 % interval verdict, `step_p` its p-value, "
             f"`step_p_adjusted` and `step_family_verdict` the same after the correction; `p_adjusted` and "
             f"`family_verdict` the MI null test's, Holm over the pair's checkpoints). "
             f"Made by `{command}`.", ""]
    lines += ["| cell | quantity | iteration 0 | iteration " + str(first) + " | iteration " + str(last) + " | trend |",
              "|---|---|---|---|---|---|"]
    for cell in cells:
        for q in (*QUANTITIES, "test_accuracy"):
            trend = _trend(summary, cell, q) if q != "test_accuracy" else ""
            lines.append(f"| {cell} | {q} | {_at(summary, cell, q, 0)} | {_at(summary, cell, q, first)} | "
                         f"{_at(summary, cell, q, last)} | {trend} |")
    lines += ["", "Cells: " + "; ".join(f"`{c}` = {CELLS[c][0]} start, shared {', '.join(CELLS[c][1]) or 'nothing'}"
                                         for c in cells) + ". Seconds of sampling and analysis per cell (2 cores): "
              + json.dumps(seconds)]
    return "\n".join(lines)


def read_summary(path):
    """The rows of a summary table of this script (strings, as written); ValueError, one
    line, where it cannot be read (:func:`_results.read_summary_table`)."""
    return read_summary_table(path)


# The summary's columns that hold numbers (the rest are text), and its flag column.
INT_COLUMNS = ("runs", "iteration")
FLOAT_COLUMNS = ("head_noise", "value", "ci_low", "ci_high", "null_mean", "p_value", "p_adjusted", "step_change",
                 "step_se", "step_p", "step_p_adjusted")
# What a summary table of this script holds at least (--carry-over and --replot check it).
SUMMARY_COLUMNS = ("cell", *INT_COLUMNS, *FLOAT_COLUMNS, "outside_calibration")


def typed_row(row):
    """A summary row read back (strings) as :func:`cell_rows` makes it: numbers as numbers
    (an empty iteration stays "": a trend row), the calibration flag as a bool ("" on trend
    and accuracy rows)."""
    out = dict(row)
    for k in INT_COLUMNS:
        out[k] = int(row[k]) if row[k] != "" else ""
    for k in FLOAT_COLUMNS:
        out[k] = float(row[k]) if row[k] != "" else np.nan
    flag = row["outside_calibration"]
    if flag not in ("True", "False", ""):
        raise ValueError(f"outside_calibration must be True, False or empty; got {flag!r} (cell {row['cell']})")
    out["outside_calibration"] = {"True": True, "False": False}.get(flag, "")
    return out


def carried_cells(carried, made, quick):
    """The cells of an earlier summary table (rows as read back) to copy into this run's
    table: every cell this script knows that this run does not make, in the script's cell
    order, with its rows typed (:func:`typed_row`). A cell whose runs are not the ones this
    script gives it (the --quick size in a full table, or the other way round) is refused,
    as is an unknown cell."""
    by_cell = {}
    missing = [k for k in (*INT_COLUMNS, *FLOAT_COLUMNS, "cell", "outside_calibration") if carried and k not in carried[0]]
    if missing:
        raise ValueError(f"missing columns {missing}: not a summary table of this script")
    for row in carried:
        by_cell.setdefault(row["cell"], []).append(typed_row(row))
    unknown = set(by_cell) - set(CELLS)
    if unknown:
        raise ValueError(f"cells {sorted(unknown)} are not cells of this script; known: {list(CELLS)}")
    out = {}
    for cell in CELLS:
        if cell in by_cell and cell not in made:
            runs = {r["runs"] for r in by_cell[cell]}
            expected = QUICK_RUNS if quick else CELL_RUNS.get(cell, RUNS)
            if runs != {expected}:
                raise ValueError(f"cell {cell} has {sorted(runs)} runs there; this run's {cell} has {expected} "
                                 f"(--quick and full tables do not mix)")
            out[cell] = by_cell[cell]
    return out


def assemble(made, carried):
    """The cells of one summary table and its rows, in the script's cell order: `made` and
    `carried` map a cell to its rows (:func:`cell_rows`, :func:`carried_cells`); a cell in
    both is refused."""
    both = set(made) & set(carried)
    if both:
        raise ValueError(f"cells {sorted(both)} are both made and carried over")
    cells = [c for c in CELLS if c in made or c in carried]
    return cells, [r for c in cells for r in (made[c] if c in made else carried[c])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs per cell and "
                                                             f"{QUICK_PERMUTATIONS['ksg']} permutations, into *_quick files")
    parser.add_argument("--runs", type=int, help=f"runs of every cell (default {RUNS}, "
                                                 f"{', '.join(f'{c} {n}' for c, n in CELL_RUNS.items())}; "
                                                 f"--quick {QUICK_RUNS})")
    parser.add_argument("--only", help="comma-separated cells: " + ", ".join(CELLS))
    parser.add_argument("--seed", type=int, default=SEED,
                        help=f"the sampler's seed and the analysis' random_state (default {SEED}); another seed's "
                             f"cells go to their own work folder and to digits_lenet_paper_seedS.* files")
    parser.add_argument("--work", default=str(WORK / "digits_lenet_paper"))
    parser.add_argument("--out", default=str(FIGURES))
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--carry-over", metavar="CSV",
                        help="an earlier summary table of this script (e.g. figures/digits_lenet_paper/digits_lenet_paper.csv): its cells "
                             "that this run does not make are copied into the new table; the page and the sidecar "
                             "name them and the sidecar keeps that table's provenance")
    parser.add_argument("--replot", metavar="CSV", help="only draw the figure of this summary table (e.g. "
                        "figures/digits_lenet_paper/digits_lenet_paper.csv) next to it; nothing is sampled or analysed")
    args = parser.parse_args()
    if args.replot:
        table = Path(args.replot)
        rows, meta = read_earlier(parser, "--replot", table, SUMMARY_COLUMNS)
        summary_figure(rows, table.with_suffix(".png"), meta.get("permutations"), meta.get("seed", SEED))
        print(f"wrote {table.with_suffix('.png')}")
        return
    started = utc_now()
    permutations = QUICK_PERMUTATIONS if args.quick else PERMUTATIONS
    cells = [c for c in (args.only.split(",") if args.only else QUICK_CELLS if args.quick else CELLS) if c]
    unknown = set(cells) - set(CELLS)
    if unknown:
        parser.error(f"--only: unknown cells {sorted(unknown)}; known: {list(CELLS)}")
    cell_runs = {c: args.runs or (QUICK_RUNS if args.quick else CELL_RUNS.get(c, RUNS)) for c in cells}
    carried, earlier = {}, {}
    if args.carry_over:  # read before anything is written: the earlier table may be the one this run replaces
        if args.runs:
            parser.error("--carry-over takes the cells' own runs; give no --runs with it")
        carried, earlier = read_earlier(parser, "--carry-over", args.carry_over, SUMMARY_COLUMNS,
                                        lambda rows: carried_cells(rows, cells, args.quick))
        made_with = {"permutations": permutations, "gaussian_null": GAUSSIAN_NULL, "seed": args.seed}
        differ = {k: earlier.get(k) for k, v in made_with.items() if carried and earlier.get(k) != v}
        if differ:
            parser.error(f"--carry-over {args.carry_over}: its cells were made with {differ} (sidecar), this run's "
                         f"with {({k: made_with[k] for k in differ})}; one table holds one setting")
    made, tables, seconds = {}, {}, {}
    for cell in cells:
        runs = cell_runs[cell]
        work = Path(args.work) / (f"{'quick' if args.quick else 'full'}_{runs}"  # a finished cell is read back
                                  + (f"_seed{args.seed}" if args.seed != SEED else ""))
        (work / "dumps").mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        task, rows, timing = run_cell(cell, runs, permutations, work, not args.no_progress, args.seed)
        seconds[cell] = timing or {"read back": round(time.perf_counter() - start, 1)}
        tables[cell] = (task, rows)
        made[cell] = cell_rows(cell, task, rows, runs)
        print(f"{cell:25s} {json.dumps(seconds[cell])}", flush=True)
    for cell in carried:
        print(f"{cell:25s} carried over from {args.carry_over}", flush=True)
    cells, summary = assemble(made, carried)
    cell_runs = {c: cell_runs[c] if c in made else carried[c][0]["runs"] for c in cells}
    seconds = {c: seconds[c] if c in made else earlier.get("seconds", {}).get(c) for c in cells}
    # a made cell's analysis may come from an earlier session (read back): its own provenance goes with it
    settings = {c: {"init": CELLS[c][0], "shared": list(CELLS[c][1]), "task_settings": tables[c][0].settings,
                    "analysis_provenance": portable_record(tables[c][1].sidecar.get("provenance"))}
                if c in made else earlier.get("cells", {}).get(c) for c in cells}
    suffix = ("_quick" if args.quick else "") + (f"_seed{args.seed}" if args.seed != SEED else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = write_csv(summary, out / f"digits_lenet_paper{suffix}.csv", float_format=".6g", atomic=True)
    md = markdown(summary, cells, cell_runs, permutations, seconds, args.seed, made_by(sys.argv[1:])) + \
        carried_over_note(list(carried))
    write_page(out, f"digits_lenet_paper{suffix}", md, atomic=True)
    summary_figure(summary, out / f"digits_lenet_paper{suffix}.png", permutations, args.seed)
    extra = carried_over_record(args.carry_over, list(carried), earlier)
    write_sidecar(table, {
        "table": table.name, "cells": settings, "runs": cell_runs, "seed": args.seed, "permutations": permutations,
        "gaussian_null": GAUSSIAN_NULL, "k": 3, "seconds": seconds, **extra,
        "provenance": collect(started, finished=True)}, atomic=True)
    print(md)


if __name__ == "__main__":
    main()
