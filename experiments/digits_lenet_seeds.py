"""digits-lenet's 26,400-run cells across seeds: each step's change, its test and its power.

    python experiments/digits_lenet_seeds.py

No new analysis: it reads the committed summary tables of ``digits_lenet_paper.py``, one per
seed (figures/digits_lenet_paper/digits_lenet_paper.csv for seed 0, figures/digits_lenet_paper/digits_lenet_paper_seedS.csv for
seed S), and puts each cell's made steps of every seed and client pair side by side:

- the step's change, its se and its p-value, and the table's own verdict (Holm over the
  pair's steps, as the analysis corrects);
- the same p-values corrected over the replication (Holm over every made step of one cell
  and quantity, all seeds and pairs together: one family per cell and quantity), so "the
  rise reproduces" is a verdict whose family-wise error is controlled over every seed and
  pair looked at;
- the power of each step's test: the smallest change it detects with probability 0.8 at
  the replication family's strictest level (Bonferroni's alpha / m, Holm's first step) and
  alone (alpha), from the step's se and its test's law (normal, or t with the resamples'
  degrees of freedom: noncentral t under a change). Where a control finds nothing, this
  says how large a step it would have found.

Writes figures/digits_lenet_seeds/digits_lenet_seeds.csv (one row per made step), its sidecar (the tables
read, the correction, the power), figures/digits_lenet_seeds/digits_lenet_seeds.png and
docs/results/tables/digits_lenet_seeds.md.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from pathlib import Path

from _digits_lenet_seeds_figure import ALPHA, CELLS, figure
from _results import figures_of, portable_record, write_csv, write_page, write_sidecar
from _stats import POWER, detectable, law_quantile

from mianalysis.analysis.inference.familywise import holm
from mianalysis.analysis.inference.intervals import change_method, change_test
from mianalysis.estimators.registry import get_estimator
from mianalysis.provenance import collect

FIGURES = figures_of(__file__)  # figures/digits_lenet_seeds/: where this script writes
PAPER_TABLES = figures_of("digits_lenet_paper")  # digits_lenet_paper.py's summary tables, read here

QUANTITIES = ("mi_ksg", "mi_gaussian")
NAME = "digits_lenet_seeds"
JOINT_DIMENSION = 2 * 850  # the two clients' head parameters: the most a pair keeps


def seed_tables(folder: Path = PAPER_TABLES) -> dict[int, Path]:
    """seed -> the summary table of digits_lenet_paper.py for that seed in `folder`."""
    tables = {0: folder / "digits_lenet_paper.csv"}
    for path in sorted(folder.glob("digits_lenet_paper_seed*.csv")):
        seed = re.fullmatch(r"digits_lenet_paper_seed(\d+)", path.stem)
        if seed:
            tables[int(seed.group(1))] = path
    return tables


def made_steps(tables: dict[int, Path], cells=CELLS, quantities=QUANTITIES) -> list[dict]:
    """The made steps (a finite step p-value) of `cells` and `quantities` in each seed's
    table: seed, cell, quantity, pair, the iteration stepped into, the change, its se and p,
    the table's Holm-over-the-pair p and verdict, and the MI minus its null's mean there."""
    out = []
    for seed, path in sorted(tables.items()):
        with Path(path).open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        missing = {"cell", "runs", "quantity", "pair", "iteration", "step_change", "step_se", "step_p",
                   "step_p_adjusted", "step_family_verdict", "value", "null_mean"} - set(rows[0] if rows else ())
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}: not a table of digits_lenet_paper.py")
        for r in rows:
            if r["cell"] not in cells or r["quantity"] not in quantities or r["iteration"] == "":
                continue
            p = float(r["step_p"])
            if not math.isfinite(p) or not math.isfinite(float(r["step_p_adjusted"])):
                continue  # not made: a step out of an exact value, or from a shrinkage estimate
            out.append({"seed": seed, "cell": r["cell"], "runs": int(r["runs"]), "quantity": r["quantity"],
                        "pair": r["pair"], "iteration": int(r["iteration"]), "change": float(r["step_change"]),
                        "se": float(r["step_se"]), "p": p, "p_pair": float(r["step_p_adjusted"]),
                        "verdict_pair": r["step_family_verdict"],
                        "mi_minus_null": float(r["value"]) - float(r["null_mean"])})
    return out


def expected_law(quantity: str, runs: int) -> int | None:
    """The law of a step's test in an analysis with the default intervals: normal (None)
    where the change's se comes from influence values (the Gaussian MI with n_runs >= 4 x
    the joint dimension, JOINT_DIMENSION the most a pair keeps), else Student's t with the
    estimator's resamples - 1 degrees of freedom (KSG's 10 halves: 9)."""
    estimator = quantity.removeprefix("mi_")
    if change_method(estimator, runs, JOINT_DIMENSION) == "influence":
        return None
    return get_estimator(estimator).ci_resamples - 1


def check_law(step: dict, df: int | None) -> None:
    """A ValueError unless the step's p is the two-sided test of its change and se under
    the law with `df` degrees of freedom (None: normal), to the tables' 6 digits."""
    again = change_test(step["change"], step["se"], df)
    if not math.isclose(again, step["p"], rel_tol=1e-2, abs_tol=1e-12):
        law = "normal" if df is None else f"t with {df} degrees of freedom"
        raise ValueError(f"seed {step['seed']}, {step['cell']}, {step['quantity']}, pair {step['pair']}, into "
                         f"iteration {step['iteration']}: p = {step['p']:.6g} is not the {law} test of its change and "
                         f"se (that gives {again:.6g}); the table was not made with the analysis' default intervals")


def replication(steps: list[dict], alpha: float = ALPHA) -> list[dict]:
    """`steps` with the replication family's Holm p (over every made step of the same cell
    and quantity, all seeds and pairs), its verdict, and the detectable changes alone and
    at Bonferroni's alpha / m."""
    out = [dict(s) for s in steps]
    for key in sorted({(s["cell"], s["quantity"]) for s in out}):
        family = [s for s in out if (s["cell"], s["quantity"]) == key]
        df = expected_law(key[1], max(s["runs"] for s in family))
        for s in family:
            check_law(s, df)
        adjusted = holm([s["p"] for s in family])
        for s, p in zip(family, adjusted):
            s["family_size"] = len(family)
            s["df"] = "normal" if df is None else df
            s["p_replication"] = float(p)
            s["verdict_replication"] = ("no detectable change" if p > alpha
                                        else "rising" if s["change"] > 0 else "falling")
            s["detectable_alone"] = detectable(s["se"], alpha, df)
            s["detectable_in_family"] = detectable(s["se"], alpha / len(family), df)
            s["interval_half_width_in_family"] = law_quantile(1 - alpha / len(family) / 2, df) * s["se"]
    return out


def _fmt(v: float) -> str:
    return f"{v:.2g}" if abs(v) < 1e-3 else f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}"


def markdown(rows: list[dict], tables: dict[int, Path], alpha: float = ALPHA) -> str:
    """The page: per cell and quantity, every made step of every seed and pair."""
    seeds = sorted(tables)
    lines = [f"Made steps of digits-lenet's 26,400-run cells, seeds {', '.join(map(str, seeds))} "
             f"(`python experiments/{NAME}.py`, from the committed tables "
             f"{', '.join(f'`figures/digits_lenet_paper/{Path(p).name}`' for _, p in sorted(tables.items()))}). "
             f"Each cell: change of the MI into the iteration (bits), its se, p, the table's verdict after Holm over "
             f"the pair's steps (p_pair), and after Holm over every made step of the cell and quantity, all seeds and "
             f"pairs (p_rep, family-wise error {alpha:g}). *Detectable*: the change found with probability {POWER:g} "
             f"at alpha / m (m the replication family's size), from the step's se and its test's law (normal for "
             f"the Gaussian MI's influence values, t with 9 degrees of freedom for KSG's 10 halves)."]
    for cell in CELLS:
        for quantity in QUANTITIES:
            family = [r for r in rows if r["cell"] == cell and r["quantity"] == quantity]
            if not family:
                continue
            held = sorted({r["seed"] for r in family})
            rising = sum(r["verdict_replication"] == "rising" for r in family)
            falling = sum(r["verdict_replication"] == "falling" for r in family)
            reach = [r["detectable_in_family"] for r in family]
            seeds_held = f"seed{'s' if len(held) > 1 else ''} {', '.join(map(str, held))}"
            lines += ["", f"**{cell}, {quantity}** ({seeds_held}: {len(family)} made steps; after Holm over all of "
                          f"them: {rising} rising, {falling} falling; detectable {_fmt(min(reach))}-"
                          f"{_fmt(max(reach))} bits)", "",
                      "| seed | pair | into | change (se) | p | p_pair | verdict (pair) | p_rep "
                      "| verdict (replication) | detectable |", "|---|---|---|---|---|---|---|---|---|---|"]
            for r in sorted(family, key=lambda r: (r["seed"], r["pair"], r["iteration"])):
                lines.append(f"| {r['seed']} | {r['pair']} | {r['iteration']} | {r['change']:+.3f} ({r['se']:.3f}) "
                             f"| {_fmt(r['p'])} | {_fmt(r['p_pair'])} | {r['verdict_pair']} "
                             f"| {_fmt(r['p_replication'])} | {r['verdict_replication']} "
                             f"| {_fmt(r['detectable_in_family'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=PAPER_TABLES, help="folder of the seeds' summary tables")
    parser.add_argument("--out", type=Path, default=FIGURES, help="where the table and figure go")
    args = parser.parse_args(argv)
    tables = seed_tables(args.tables)
    absent = [str(p) for p in tables.values() if not p.exists()]
    if absent:
        parser.error(f"no summary table at {', '.join(absent)}: run experiments/digits_lenet_paper.py first")
    rows = replication(made_steps(tables))
    if not rows:
        parser.error(f"no made step of {', '.join(CELLS)} in {', '.join(map(str, tables.values()))}")
    fields = ["seed", "cell", "runs", "quantity", "pair", "iteration", "change", "se", "p", "p_pair", "verdict_pair",
              "family_size", "df", "p_replication", "verdict_replication", "detectable_alone", "detectable_in_family",
              "interval_half_width_in_family", "mi_minus_null"]
    csv_path = write_csv(rows, args.out / f"{NAME}.csv", fieldnames=fields, float_format=".6g")
    write_sidecar(csv_path, portable_record({
        "command": f"python experiments/{NAME}.py", "tables": {str(s): str(p) for s, p in tables.items()},
        "cells": list(CELLS), "quantities": list(QUANTITIES), "alpha": ALPHA, "power": POWER,
        "replication_family": "Holm over every made step of one cell and quantity, all seeds and pairs",
        "provenance": collect(finished=True)}))
    write_page(args.out, NAME, markdown(rows, tables))
    figure(rows, args.out / f"{NAME}.png")
    print(f"wrote {csv_path} and its figure and page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
