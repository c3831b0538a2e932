"""The cross-fitted projection lower bound against the exact MI, for fewer runs than dimensions.

gaussian-sgd at the `high` preset has 200 parameters per client (400 joint dimensions) and
knows the exact MI of any two clients. This script samples it at 150, 200, 300 and 400
runs (fewer than twice the joint dimension: no plain Gaussian estimate exists, and
`mianalysis.analyze` gives a Ledoit-Wolf shrinkage number), in the two designs of
experiments/gaussian_sgd_truth.py (a fixed start with the clients' targets shared within a
run; a per-run start with nothing shared), a fresh dump per run count (seed = runs), and
analyses each with `mianalysis.analyze(estimators=["bound", "gaussian"])`: the bound
(`mianalysis.projection_mi_bound`, default settings: 2 folds, n_runs // 40 canonical pairs)
with its half-subsampling interval (20 halves) and a 99-permutation null, beside the
shrinkage number and the exact MI. Checkpoints every 10 iterations of 40; iteration 0 is
left out (a per-run start gives identical clients there: infinite MI).

    python experiments/projection_bound.py [--permutations 99]

The check (issue 28, section 2): the bound's interval lies at or below the exact MI
(its lower end ``ci_low <= exact``) in at least 95 % of the rows. Also reported: the share
of rows whose bound itself and whose whole interval (``ci_high``) are at or below the
exact MI, the fraction of the exact MI the bound captures (rows with exact MI > 1 bit),
and how often its permutation test rejects independence (p <= 0.05).

Writes figures/projection_bound.csv (one row per design, runs, iteration and client pair)
with provenance in figures/projection_bound.csv.json, and the page
docs/results/tables/projection_bound.md (with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _results import FIGURES, write_csv, write_page, write_sidecar

from mianalysis import ParameterSampler, analyze
from mianalysis.estimators.bound import RUNS_PER_DIMENSION
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

PRESET = "high"
RUNS = (150, 200, 300, 400)
DESIGNS = {"fixed start, shared data": ("fixed", ("data",)), "per-run start, nothing shared": ("per-run", ())}
EVERY = 10
CAPTURE_MIN_BITS = 1.0  # fractions of the exact MI are reported where it exceeds this


def bound_rows(design, runs, work, permutations):
    """Rows of exact MI, bound (with interval and null) and shrinkage number for one dump."""
    init, shared = DESIGNS[design]
    task = get_task("gaussian-sgd", PRESET)
    sampler = ParameterSampler(task, seed=runs, init=init, shared=shared, every=EVERY, progress=False)
    dump = sampler.sample(runs, Path(work) / f"{init}-{'+'.join(shared) or 'none'}-{runs}")
    table = analyze(dump, estimators=("bound", "gaussian"), metrics=(), n_permutations={"bound": permutations},
                    random_state=0)
    by_key = {(r["checkpoint"], r["client_a"], r["client_b"], r["quantity"]): r for r in table}
    rows = []
    for r in table:
        if r["quantity"] != "mi_exact" or r["iteration"] == 0:
            continue
        key = (r["checkpoint"], r["client_a"], r["client_b"])
        bound, shrunk = by_key[(*key, "mi_bound")], by_key[(*key, "mi_gaussian")]
        exact = r["value"]
        rows.append({
            "design": design, "d": task.settings["d"], "runs": runs, "iteration": r["iteration"],
            "pair": f"{r['client_a']}-{r['client_b']}", "n_components": max(1, runs // 2 // (2 * RUNS_PER_DIMENSION)),
            "mi_exact": exact, "mi_bound": bound["value"], "bound_ci_low": bound["ci_low"],
            "bound_ci_high": bound["ci_high"], "bound_null_mean": bound["null_mean"],
            "bound_null_std": bound["null_std"], "bound_p_value": bound["p_value"],
            "captured": bound["value"] / exact if exact > CAPTURE_MIN_BITS else np.nan,
            "mi_gaussian_shrinkage": shrunk["value"], "bound_note": bound["note"], "gaussian_note": shrunk["note"]})
    return rows


def summarise(rows):
    """One line per design and run count, and one over all rows."""
    groups = [(d, n) for d in DESIGNS for n in RUNS] + [("all", "all")]
    out = []
    for design, runs in groups:
        hits = [r for r in rows if design == "all" or (r["design"] == design and r["runs"] == runs)]
        if not hits:
            continue
        exact = np.array([r["mi_exact"] for r in hits])
        low, high = np.array([r["bound_ci_low"] for r in hits]), np.array([r["bound_ci_high"] for r in hits])
        value = np.array([r["mi_bound"] for r in hits])
        captured = np.array([r["captured"] for r in hits])
        shrunk = np.array([r["mi_gaussian_shrinkage"] for r in hits])
        big = exact > CAPTURE_MIN_BITS
        out.append({
            "design": design, "runs": runs, "rows": len(hits),
            "n_components": hits[0]["n_components"] if runs != "all" else "",
            "exact_min": float(exact.min()), "exact_max": float(exact.max()),
            "interval_at_or_below": float(np.mean(low <= exact)), "bound_at_or_below": float(np.mean(value <= exact)),
            "whole_interval_at_or_below": float(np.mean(high <= exact)),
            "captured_mean": float(np.nanmean(captured)) if big.any() else np.nan,
            "captured_min": float(np.nanmin(captured)) if big.any() else np.nan,
            "captured_max": float(np.nanmax(captured)) if big.any() else np.nan,
            "shrinkage_over_exact_mean": float(np.mean(shrunk[big] / exact[big])) if big.any() else np.nan,
            "rejects_independence": float(np.mean(np.array([r["bound_p_value"] for r in hits]) <= 0.05))})
    return out


def markdown(lines, permutations):
    def pct(v):
        return "-" if isinstance(v, float) and np.isnan(v) else f"{v:.1%}"

    md = ["| design | runs | pairs kept | rows | exact MI (bits) | interval at or below exact (ci_low <= exact) | "
          "bound <= exact | whole interval <= exact | captured: mean (min - max) | shrinkage / exact | "
          f"p <= 0.05 ({permutations} permutations) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in lines:
        md.append(f"| {s['design']} | {s['runs']} | {s['n_components']} | {s['rows']} | "
                  f"{s['exact_min']:.3g} - {s['exact_max']:.4g} | {pct(s['interval_at_or_below'])} | "
                  f"{pct(s['bound_at_or_below'])} | {pct(s['whole_interval_at_or_below'])} | "
                  f"{pct(s['captured_mean'])} ({pct(s['captured_min'])} - {pct(s['captured_max'])}) | "
                  f"{pct(s['shrinkage_over_exact_mean'])} | {pct(s['rejects_independence'])} |")
    return md


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--permutations", type=int, default=99, help="permutations of the bound's null per row")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="projection-bound-")
    rows, seconds = [], {}
    try:
        for design in DESIGNS:
            for runs in RUNS:
                start = time.perf_counter()
                rows += bound_rows(design, runs, work, args.permutations)
                seconds[f"{design} / {runs}"] = round(time.perf_counter() - start, 1)
                print(f"{design:30s} {runs:4d} runs {seconds[f'{design} / {runs}']:7.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    name = "projection_bound"
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    lines = summarise(rows)
    md = markdown(lines, args.permutations)
    command = "python experiments/projection_bound.py" + (
        f" --permutations {args.permutations}" if args.permutations != 99 else "")
    write_page(
        out, name,
        f"The cross-fitted projection lower bound (`estimator=\"bound\"`, default settings) against gaussian-sgd's "
        f"exact MI at the `{PRESET}` preset (200 parameters per client, 400 joint dimensions; iterations {EVERY}-40, "
        f"three client pairs; one dump per design and run count). \"Captured\" is bound / exact over rows with exact "
        f"MI > {CAPTURE_MIN_BITS:g} bit, as is the Ledoit-Wolf shrinkage number over exact. Made by `{command}`.\n\n"
        + "\n".join(md) + "\n")
    write_sidecar(table, {"table": table.name, "preset": PRESET, "runs": list(RUNS), "permutations": args.permutations,
                          "seconds": seconds, "summary": lines, "provenance": collect(started, finished=True)})
    print("\n".join(md))


if __name__ == "__main__":
    main()
