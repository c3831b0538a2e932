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

Writes figures/projection_bound/projection_bound.csv (one row per design, runs, iteration and client pair)
with provenance in figures/projection_bound/projection_bound.csv.json, and the page
docs/results/tables/projection_bound.md (with --out DIR: all of them into DIR).

    python experiments/projection_bound.py --transforms

The same check on non-Gaussian parameters: gaussian-sgd `transform=sinh` and `cubic`
(x + x^3, each coordinate mapped monotonically: the exact MI is unchanged), the fixed-start
design at 200 and 400 runs, with the bound as registered (canonical directions of the raw
parameters) beside its copula variant (``projection_mi_bound(..., copula=True)``: each
coordinate replaced by its normal scores within each fold, registered here for the run as
the estimator "bound_copula"), each with its 20-halves interval. Writes
figures/projection_bound/projection_bound_transforms.csv (.csv.json) and
docs/results/tables/projection_bound_transforms.md.

    python experiments/projection_bound.py --quick [--transforms] [--out DIR]

Either check in seconds (what tests/test_bound.py runs): the `paper` preset (20 parameters per
client), 60 and 80 runs (80 with --transforms), 19 permutations, into a new temporary
folder (named at the end) unless --out is given; the same tables, pages and sidecars.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tempfile
from pathlib import Path

import numpy as np
from _results import figures_of, rows_by_design, write_csv, write_page, write_sidecar

from mianalysis import ParameterSampler, analyze, projection_mi_bound
from mianalysis.estimators.bound import RUNS_PER_DIMENSION
from mianalysis.estimators.registry import estimator_names, get_estimator, register_estimator
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/projection_bound/: where this script writes

PRESET = "high"
RUNS = (150, 200, 300, 400)
DESIGNS = {"fixed start, shared data": ("fixed", ("data",)), "per-run start, nothing shared": ("per-run", ())}
EVERY = 10
CAPTURE_MIN_BITS = 1.0  # fractions of the exact MI are reported where it exceeds this
TRANSFORMS = ("sinh", "cubic")
TRANSFORM_RUNS = (200, 400)
TRANSFORM_DESIGN = "fixed start, shared data"
COPULA_BOUND = "bound_copula"
# --quick: a check in seconds (20 parameters per client)
QUICK = {"preset": "paper", "runs": (60, 80), "transform_runs": (80,), "permutations": 19}


def register_copula_bound():
    """The copula variant of the bound as an estimator of this run ("bound_copula"): the
    registered bound's entry with ``copula=True`` (its own random stream and colour)."""
    if COPULA_BOUND not in estimator_names():
        bound = get_estimator("bound")
        register_estimator(dataclasses.replace(
            bound, name=COPULA_BOUND, function=functools.partial(projection_mi_bound, copula=True),
            arguments=bound.arguments - {"copula"}, display_name="projection lower bound, copula variant",
            label="copula bound", stream=None, color=None))
    return COPULA_BOUND


def exact_rows(table):
    """(mi_exact row, {quantity: row} of its checkpoint and pair) for each exact-MI row of the
    analysis `table` after iteration 0 (a per-run start gives identical clients there)."""
    by_key = {}
    for r in table:
        by_key.setdefault((r["checkpoint"], r["client_a"], r["client_b"]), {})[r["quantity"]] = r
    for r in table:
        if r["quantity"] == "mi_exact" and r["iteration"] != 0:
            yield r, by_key[(r["checkpoint"], r["client_a"], r["client_b"])]


def transform_rows(transform, runs, work, preset=PRESET):
    """Rows of exact MI and both bounds (with intervals) on gaussian-sgd `preset` with `transform`."""
    init, shared = DESIGNS[TRANSFORM_DESIGN]
    task = get_task("gaussian-sgd", preset, transform=transform)
    sampler = ParameterSampler(task, seed=runs, init=init, shared=shared, every=EVERY, progress=False)
    dump = sampler.sample(runs, Path(work) / f"{transform}-{runs}")
    table = analyze(dump, estimators=("bound", register_copula_bound()), metrics=(), random_state=0)
    rows = []
    for r, same in exact_rows(table):
        plain, copula = same["mi_bound"], same[f"mi_{COPULA_BOUND}"]
        exact = r["value"]
        rows.append({"transform": transform, "design": TRANSFORM_DESIGN, "d": task.settings["d"], "runs": runs,
                     "iteration": r["iteration"], "pair": f"{r['client_a']}-{r['client_b']}", "mi_exact": exact,
                     **{f"{name}{part}": row[col] for name, row in (("bound", plain), ("copula_bound", copula))
                        for part, col in (("", "value"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"))},
                     "bound_captured": plain["value"] / exact, "copula_bound_captured": copula["value"] / exact})
    return rows


def summarise_transforms(rows, run_counts=TRANSFORM_RUNS):
    """One line per transform and run count (of `run_counts`): coverage and capture of both bounds."""
    out = []
    for transform in TRANSFORMS:
        for runs in run_counts:
            hits = [r for r in rows if r["transform"] == transform and r["runs"] == runs]
            if not hits:
                continue
            exact = np.array([r["mi_exact"] for r in hits])
            line = {"transform": transform, "runs": runs, "rows": len(hits), "exact_min": float(exact.min()),
                    "exact_max": float(exact.max())}
            for name in ("bound", "copula_bound"):
                value = np.array([r[name] for r in hits])
                line[f"{name}_interval_at_or_below"] = float(np.mean(np.array([r[f"{name}_ci_low"] for r in hits])
                                                                     <= exact))
                line[f"{name}_at_or_below"] = float(np.mean(value <= exact))
                line[f"{name}_captured_mean"] = float(np.mean(value / exact))
            out.append(line)
    return out


def transforms_markdown(lines):
    md = ["| transform | runs | rows | exact MI (bits) | bound: ci_low <= exact | bound <= exact | bound captured | "
          "copula bound: ci_low <= exact | copula bound <= exact | copula bound captured |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for s in lines:
        md.append(f"| {s['transform']} | {s['runs']} | {s['rows']} | {s['exact_min']:.4g} - {s['exact_max']:.4g} | "
                  + " | ".join(f"{s[f'{n}_interval_at_or_below']:.1%} | {s[f'{n}_at_or_below']:.1%} | "
                               f"{s[f'{n}_captured_mean']:.2%}" for n in ("bound", "copula_bound")) + " |")
    return md


def main_transforms(out, started, plan, quick):
    rows, seconds = rows_by_design(TRANSFORMS, functools.partial(transform_rows, preset=plan["preset"]),
                                   plan["transform_runs"], prefix="projection-bound-transforms-", width=12)
    name = "projection_bound_transforms"
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    lines = summarise_transforms(rows, plan["transform_runs"])
    md = transforms_markdown(lines)
    write_page(
        out, name,
        f"The projection lower bound on non-Gaussian parameters: gaussian-sgd `{plan['preset']}` with each coordinate "
        f"mapped by sinh or x + x^3 (the exact MI unchanged), design \"{TRANSFORM_DESIGN}\", iterations "
        f"{EVERY}-40, three client pairs, one dump per transform and run count. \"bound\" is the registered bound "
        "(canonical directions of the parameters), \"copula bound\" its copula variant (`copula=True`: normal "
        "scores within each fold); \"captured\" is the mean of bound / exact. Intervals: 20 random halves. "
        f"Made by `python experiments/projection_bound.py{' --quick' if quick else ''} --transforms`.\n\n"
        + "\n".join(md) + "\n")
    write_sidecar(table, {"table": table.name, "preset": plan["preset"], "design": TRANSFORM_DESIGN,
                          "transforms": list(TRANSFORMS), "runs": list(plan["transform_runs"]), "seconds": seconds,
                          "summary": lines, "provenance": collect(started, finished=True)})
    print("\n".join(md))


def bound_rows(design, runs, work, permutations, preset=PRESET):
    """Rows of exact MI, bound (with interval and null) and shrinkage number for one dump."""
    init, shared = DESIGNS[design]
    task = get_task("gaussian-sgd", preset)
    sampler = ParameterSampler(task, seed=runs, init=init, shared=shared, every=EVERY, progress=False)
    dump = sampler.sample(runs, Path(work) / f"{init}-{'+'.join(shared) or 'none'}-{runs}")
    table = analyze(dump, estimators=("bound", "gaussian"), metrics=(), n_permutations={"bound": permutations},
                    random_state=0)
    rows = []
    for r, same in exact_rows(table):
        bound, shrunk = same["mi_bound"], same["mi_gaussian"]
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


def summarise(rows, run_counts=RUNS):
    """One line per design and run count (of `run_counts`), and one over all rows."""
    groups = [(d, n) for d in DESIGNS for n in run_counts] + [("all", "all")]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--permutations", type=int, default=None, help="permutations of the bound's null per row "
                        f"(default 99; {QUICK['permutations']} with --quick)")
    parser.add_argument("--out", default=None, help="folder of the tables (default figures/; with --quick a new "
                                                    "temporary folder)")
    parser.add_argument("--transforms", action="store_true",
                        help="instead: both bounds on gaussian-sgd transform=sinh and cubic (see above)")
    parser.add_argument("--quick", action="store_true",
                        help="the check in seconds: 20 parameters per client (see above)")
    args = parser.parse_args(argv)
    started = utc_now()
    plan = dict(QUICK) if args.quick else {"preset": PRESET, "runs": RUNS, "transform_runs": TRANSFORM_RUNS,
                                             "permutations": 99}
    if args.permutations is not None:
        plan["permutations"] = args.permutations
    out = Path(args.out if args.out is not None else
               tempfile.mkdtemp(prefix="projection-bound-quick-") if args.quick else FIGURES)
    out.mkdir(parents=True, exist_ok=True)
    if args.transforms:
        main_transforms(out, started, plan, args.quick)
    else:
        main_bound(out, started, plan, args.quick)
    print(f"wrote {out}")
    return out


def main_bound(out, started, plan, quick):
    permutations, d = plan["permutations"], get_task("gaussian-sgd", plan["preset"]).settings["d"]
    rows, seconds = rows_by_design(DESIGNS, functools.partial(bound_rows, permutations=permutations,
                                                              preset=plan["preset"]),
                                   plan["runs"], prefix="projection-bound-", width=37)
    name = "projection_bound"
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    lines = summarise(rows, plan["runs"])
    md = markdown(lines, permutations)
    default = QUICK["permutations"] if quick else 99
    command = "python experiments/projection_bound.py" + (" --quick" if quick else "") + (
        f" --permutations {permutations}" if permutations != default else "")
    write_page(
        out, name,
        f"The cross-fitted projection lower bound (`estimator=\"bound\"`, default settings) against gaussian-sgd's "
        f"exact MI at the `{plan['preset']}` preset ({d} parameters per client, {2 * d} joint dimensions; iterations "
        f"{EVERY}-40, "
        f"three client pairs; one dump per design and run count). \"Captured\" is bound / exact over rows with exact "
        f"MI > {CAPTURE_MIN_BITS:g} bit, as is the Ledoit-Wolf shrinkage number over exact. Made by `{command}`.\n\n"
        + "\n".join(md) + "\n")
    write_sidecar(table, {"table": table.name, "preset": plan["preset"], "runs": list(plan["runs"]),
                          "permutations": permutations,
                          "seconds": seconds, "summary": lines, "provenance": collect(started, finished=True)})
    print("\n".join(md))


if __name__ == "__main__":
    main()
