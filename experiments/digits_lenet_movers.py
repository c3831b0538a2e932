"""digits-lenet at 26,400 runs with the rare movers held: the Gaussian MI where the default
analysis has a shrinkage number.

    python experiments/digits_lenet_movers.py [--seed 0] [--cells fixed-augmentation-26400,fixed-nothing-26400]

In every 26,400-run cell of ``digits_lenet_paper.py`` a few weights of client 2 (one input
unit of the head, silent in all but the rarest augmented images) leave their value in one
run, which makes that client's covariance singular, so the Gaussian estimates of its pairs
are Ledoit-Wolf shrinkage numbers without a verdict. This analyses the same dumps (sampled
by ``digits_lenet_paper.py --only CELL --seed S``, under runs/digits_lenet_paper/) with the
Gaussian estimator alone, its 100-permutation null and the analysis' default intervals and
Holm verdicts, holding each client's parameters that move in fewer than ``--min-moving-runs``
runs (default 5: the blocks that make client 2's covariance singular move in 1-4 runs) at their
most common value (``analyze(..., min_moving_runs=m)``, :mod:`mianalysis.analysis.diagnostics.movers`); each row's note
bounds the MI they could add. Beside each row: the committed table's estimate and its kind
(figures/digits_lenet_paper/digits_lenet_paper.csv, or _seedS.csv).

Writes figures/digits_lenet_movers/digits_lenet_movers[_seedS].csv (per cell, pair and trained checkpoint), its
sidecar, and docs/results/tables/digits_lenet_movers[_seedS].md; the analysis tables stay
under runs/ (resumed when rerun).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from pathlib import Path

import numpy as np
from _digits_lenet_files import RUNS, dump_path, suffix
from _results import figures_of, WORK, portable_record, write_csv, write_page, write_sidecar

from mianalysis import analyze
from mianalysis.analysis import AnalysisTable
from mianalysis.report.experiment import overall_trend, step_verdicts
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/digits_lenet_movers/: where this script writes
PAPER_TABLES = figures_of("digits_lenet_paper")  # digits_lenet_paper.py's summary tables, read here

CELLS = ("fixed-augmentation-26400", "fixed-nothing-26400")
PERMUTATIONS = 100
MIN_MOVING_RUNS = 5


def committed(seed: int, folder: Path = PAPER_TABLES) -> dict[tuple[str, str, int], dict]:
    """(cell, pair, iteration) -> the committed summary row of the Gaussian MI for `seed`."""
    path = folder / f"digits_lenet_paper{suffix(seed)}.csv"
    with path.open(newline="") as fh:
        return {(r["cell"], r["pair"], int(r["iteration"])): r for r in csv.DictReader(fh)
                if r["quantity"] == "mi_gaussian" and r["iteration"] != ""}


def held_of(note: str) -> tuple[str, float]:
    """The held movers (in words) and the bound on what they can add (bits) from a row's note."""
    match = re.search(r"held parameters moving in fewer than \d+ runs at their most common value \((.*?)\): they can "
                      r"add at most ([0-9.e+-]+) bits", note)
    return (match.group(1), float(match.group(2))) if match else ("", 0.0)


def cell_rows(cell: str, table: AnalysisTable, before: dict) -> list[dict]:
    """Per pair and trained checkpoint: the held analysis's Gaussian row and its step, and
    the committed table's value and kind; one trend row per pair."""
    out = []
    pairs = sorted({(r["client_a"], r["client_b"]) for r in table.select("mi_gaussian")})
    for a, b in pairs:
        pair = f"{a}-{b}"
        steps = {r["iteration"]: r for r in table.select("delta_mi_gaussian", a, b)}
        for r in table.select("mi_gaussian", a, b):
            it = int(r["iteration"])
            if it == 0:
                continue  # the shared fixed start: MI 0 by rule
            d, old = steps.get(it, {}), before.get((cell, pair, it), {})
            held, bound = held_of(r["note"])
            out.append({"cell": cell, "pair": pair, "iteration": it, "value": r["value"], "ci_low": r["ci_low"],
                        "ci_high": r["ci_high"], "estimate_kind": r["estimate_kind"], "null_mean": r["null_mean"],
                        "p_value": r["p_value"], "p_adjusted": r["p_adjusted"], "family_verdict": r["family_verdict"],
                        "step_change": d.get("value", np.nan), "step_se": d.get("change_se", np.nan),
                        "step_p": d.get("change_p", np.nan), "step_p_adjusted": d.get("p_adjusted", np.nan),
                        "step_family_verdict": d.get("family_verdict", ""), "held": held, "held_bound_bits": bound,
                        "committed_value": float(old.get("value", np.nan)),
                        "committed_kind": ("shrinkage" if "shrinkage" in old.get("note", "").lower() else "plain")
                        if old else ""})
        verdicts = step_verdicts(table, "mi_gaussian", a, b)
        out.append({"cell": cell, "pair": pair, "iteration": "", "step_family_verdict": overall_trend(
            v for _, v in verdicts), "held": "trend row: " + "; ".join(f"{it}: {v}" for it, v in verdicts)})
    return out


def markdown(rows: list[dict], seed: int, m: int, seconds: dict) -> str:
    lines = [f"digits-lenet, 26,400 runs, seed {seed}: Gaussian MI with each client's parameters moving in fewer than "
             f"{m} runs held at their most common value (`python experiments/digits_lenet_movers.py --seed {seed}`); "
             "100 permutations, Holm over each pair's checkpoints (level) and steps (change). `committed`: the "
             f"estimate of figures/digits_lenet_paper/digits_lenet_paper{suffix(seed)}.csv (all parameters). Bits. Analysis seconds: "
             f"{seconds}.", "",
             "| cell | pair | iteration | held (bound) | MI (95 % interval) | null | p adj. | above null | step (se) "
             "| step p adj. | step verdict | committed |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["iteration"] == "":
            continue
        held = f"{r['held']} ({r['held_bound_bits']:.2g})" if r["held"] else "none"
        kind = "" if r["estimate_kind"] == "plain" else f" ({r['estimate_kind']})"
        step = "" if not np.isfinite(r["step_change"]) else f"{r['step_change']:+.3f} ({r['step_se']:.3f})"
        lines.append(f"| {r['cell']} | {r['pair']} | {r['iteration']} | {held} | {r['value']:.3f} ({r['ci_low']:.3f} "
                     f"to {r['ci_high']:.3f}){kind} | {r['null_mean']:.3f} | {r['p_adjusted']:.3g} | "
                     f"{r['family_verdict']} | {step} | {r['step_p_adjusted']:.3g} | {r['step_family_verdict']} "
                     f"| {r['committed_value']:.3f} ({r['committed_kind']}) |")
    lines += ["", "Trends (Holm over each pair's steps): " + "; ".join(
        f"{r['cell']} {r['pair']}: {r['step_family_verdict']}" for r in rows if r["iteration"] == "")]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cells", default=",".join(CELLS), help="comma-separated: " + ", ".join(CELLS))
    parser.add_argument("--min-moving-runs", type=int, default=MIN_MOVING_RUNS)
    parser.add_argument("--work", type=Path, default=WORK / "digits_lenet_paper")
    parser.add_argument("--out", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    cells = [c for c in args.cells.split(",") if c]
    unknown = set(cells) - set(CELLS)
    if unknown:
        parser.error(f"--cells: unknown {sorted(unknown)}; known: {list(CELLS)}")
    missing = [str(path) for path in (dump_path(args.work, c, args.seed) for c in cells) if not path.exists()]
    if missing:
        parser.error(f"no dump at {', '.join(missing)}: sample it with experiments/digits_lenet_paper.py --only CELL "
                     f"--seed {args.seed}")
    before = committed(args.seed)
    started = utc_now()
    rows, seconds = [], {}
    for cell in cells:
        table_path = args.work / f"full_{RUNS}{suffix(args.seed)}" / f"{cell}.movers{args.min_moving_runs}.csv"
        start = time.perf_counter()
        table = analyze(dump_path(args.work, cell, args.seed), estimators=["gaussian"], metrics=[],
                        n_permutations=PERMUTATIONS, random_state=args.seed, min_moving_runs=args.min_moving_runs,
                        out=table_path)
        seconds[cell] = round(time.perf_counter() - start, 1)
        print(f"{cell:25s} {seconds[cell]:7.1f} s", flush=True)
        rows += cell_rows(cell, table, before)
    name = f"digits_lenet_movers{suffix(args.seed)}"
    path = write_csv(rows, args.out / f"{name}.csv", fieldnames=list(rows[0]), float_format=".6g")
    write_sidecar(path, portable_record({"command": "python experiments/digits_lenet_movers.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "seed": args.seed, "cells": cells,
        "min_moving_runs": args.min_moving_runs, "permutations": PERMUTATIONS, "seconds": seconds,
        "provenance": collect(started, finished=True)}))
    write_page(args.out, name, markdown(rows, args.seed, args.min_moving_runs, seconds))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
