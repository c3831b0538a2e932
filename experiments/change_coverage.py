"""Coverage of the intervals of an MI change between two checkpoints, where the change is exact.

The analysis tests each step's change of an MI estimate (``delta_mi_*`` rows: the trend
verdicts) with a standard error of the change, paired by run. Two ways to get it for the
Gaussian and Gaussian copula estimates are compared here, at 95 %:

- "bootstrap": the sd of the changes over 20 bootstrap resamples of the runs, the same
  resamples at both checkpoints, with Student's t quantile (19 degrees of freedom):
  :func:`mianalysis.analysis.inference.intervals.mi_replicates`, what analyze did for every change;
- "influence": the delta method on the runs' influence values,
  ``sd(h_after - h_before) / sqrt(n)`` with the normal quantile
  (:func:`mianalysis.estimators.gaussian_se.gaussian_mi_influence`; the copula's of the
  normal scores at each checkpoint), one pass over the runs instead of 20 estimates.

Design (the joint law of both checkpoints known, which gaussian-sgd's exact answers, one
checkpoint at a time, do not give): d coordinates per client; at checkpoint t,
``x_t = sqrt(r_t) S_t + sqrt(1 - r_t) E_t`` and ``y_t = sqrt(r_t) S_t + sqrt(1 - r_t) F_t``
with S, E, F standard normal (runs x d) and each carried from the first checkpoint to the
second with autocorrelation a (``S_1 = a S_0 + sqrt(1 - a^2) S'``, likewise E and F). Each
coordinate of x and y then has correlation r_t, the exact MI is ``-d/2 log2(1 - r_t^2)``
bits and its change is exact; a is how alike the two checkpoints' runs are (0.99: adjacent
checkpoints of slow training; the estimation errors at the two then nearly cancel). The
copula rows see every coordinate through sinh (the MI is unchanged, the samples are not
Gaussian). Designs: no dependence at either checkpoint (change exactly 0: how often a
change is declared where there is none), a small rise, a rise, a fall. Runs n from
2.2 x the joint dimension 2d (just above where analyze turns to shrinkage) to 10 x.

    python experiments/change_coverage.py [--reps 200] [--quick]

Writes figures/change_coverage/change_coverage.csv (one row per estimator, setting, design and method:
coverage of the exact change with its 95 % Clopper-Pearson interval, how often the interval
excludes 0, mean se and the estimate's sd over the replications), its sidecar and the page
docs/results/tables/change_coverage.md (--quick: 30 replications, a subset of settings,
into *_quick.*; --out DIR: into DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _results import figures_of, timed_rows, write_csv, write_page, write_sidecar
from _stats import clopper_pearson
from scipy.special import ndtri
from scipy.stats import t as student_t

from mianalysis import gaussian_copula_mi, gaussian_mi
from mianalysis.analysis.inference.intervals import mi_replicates, resample_indices
from mianalysis.estimators.copula import normal_scores
from mianalysis.estimators.gaussian_se import gaussian_mi_influence, influence_change_se
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/change_coverage/: where this script writes

LEVEL = 0.95
RESAMPLES = 20  # analyze's default bootstrap resamples for the Gaussian and copula estimators
# design -> (r before, r after): each coordinate's correlation between the clients
DESIGNS = {"no dependence": (0.0, 0.0), "small rise": (0.1, 0.15), "rise": (0.3, 0.4), "fall": (0.5, 0.45)}
# (d per client, n as a multiple of the joint dimension 2 d, autocorrelation a, designs)
SETTINGS = ([(20, m, a, tuple(DESIGNS)) for m in (2.2, 3.0, 4.0, 10.0) for a in (0.5, 0.99)]
            + [(50, m, 0.99, ("no dependence", "rise", "fall")) for m in (2.2, 4.0)])
QUICK_SETTINGS = [(20, 2.2, 0.99, ("no dependence", "rise")), (20, 4.0, 0.99, ("no dependence", "rise"))]
METHODS = ("bootstrap", "influence")
ESTIMATORS = {"gaussian": (gaussian_mi, None), "copula": (gaussian_copula_mi, np.sinh)}


def exact_change(d, design):
    """The exact change of the MI (bits) of `design` with d coordinates per client."""
    before, after = DESIGNS[design]
    return float(-d / 2 * (np.log2(1 - after**2) - np.log2(1 - before**2)))


def draw(rng, n, d, design, a):
    """(x0, y0, x1, y1): n runs of the two clients at both checkpoints (module docstring)."""
    r0, r1 = DESIGNS[design]
    s0, e0, f0 = rng.standard_normal((3, n, d))
    s1, e1, f1 = (a * u + np.sqrt(1 - a * a) * rng.standard_normal((n, d)) for u in (s0, e0, f0))

    def client(s, e, r):
        return np.sqrt(r) * s + np.sqrt(1 - r) * e

    return client(s0, e0, r0), client(s0, f0, r0), client(s1, e1, r1), client(s1, f1, r1)


def setting_rows(d, multiple, a, design, reps, seed=0):
    """Rows of one setting and design: every estimator x method."""
    n = int(round(multiple * 2 * d))
    exact = exact_change(d, design)
    z_normal = float(ndtri(0.5 + LEVEL / 2))
    z_t = float(student_t.ppf(0.5 + LEVEL / 2, RESAMPLES - 1))
    found = {(e, m): [] for e in ESTIMATORS for m in METHODS}
    for r in range(reps):
        rng = np.random.default_rng([seed, d, n, int(100 * a), list(DESIGNS).index(design), r])
        drawn = draw(rng, n, d, design, a)
        idx = resample_indices(n, RESAMPLES, "gaussian", np.random.default_rng([seed, r]))
        for estimator, (function, transform) in ESTIMATORS.items():
            x0, y0, x1, y1 = drawn if transform is None else (transform(v) for v in drawn)
            change = function(x1, y1) - function(x0, y0)
            boot = mi_replicates(x1, y1, estimator, idx) - mi_replicates(x0, y0, estimator, idx)
            found[estimator, "bootstrap"].append((change, boot.std(ddof=1), z_t))
            seen = (x0, y0, x1, y1) if transform is None else tuple(normal_scores(v) for v in (x0, y0, x1, y1))
            se = influence_change_se(gaussian_mi_influence(*seen[:2]), gaussian_mi_influence(*seen[2:]))
            found[estimator, "influence"].append((change, se, z_normal))
    rows = []
    for (estimator, method), got in found.items():
        est, se, z = np.array(got).T
        hits = int(np.sum(np.abs(est - exact) <= z * se))
        low, high = clopper_pearson(hits, reps)
        rows.append({"estimator": estimator, "d_client": d, "d_joint": 2 * d, "n": n, "n_over_d_joint": multiple,
                     "autocorrelation": a, "design": design, "exact_change": exact, "method": method, "reps": reps,
                     "coverage": hits / reps, "coverage_low": low, "coverage_high": high,
                     "excludes_zero": float(np.mean(np.abs(est) > z * se)), "mean_se": float(se.mean()),
                     "estimate_mean": float(est.mean()), "estimate_sd": float(est.std(ddof=1))})
    return rows


def page(rows, reps, quick):
    """The Markdown table: per setting, each method's coverage and how often it excludes 0."""
    names = {"gaussian": "Gaussian", "copula": "copula (sinh)"}
    md = ["| estimator | d per client | n (x d_joint) | a | design | exact change (bits) | sd of the estimate | "
          + " | ".join(f"{m}: coverage | {m}: excludes 0 | {m}: mean se" for m in METHODS) + " |",
          "|---|---|---|---|---|---|---|" + "---|---|---|" * len(METHODS)]
    keys = list(dict.fromkeys((r["estimator"], r["d_client"], r["n"], r["autocorrelation"], r["design"])
                              for r in rows))
    for key in keys:
        got = {r["method"]: r for r in rows
               if (r["estimator"], r["d_client"], r["n"], r["autocorrelation"], r["design"]) == key}
        first = got[METHODS[0]]
        cells = " | ".join(f"{got[m]['coverage']:.1%} [{got[m]['coverage_low']:.0%}, {got[m]['coverage_high']:.0%}] | "
                           f"{got[m]['excludes_zero']:.1%} | {got[m]['mean_se']:.3g}" for m in METHODS)
        md.append(f"| {names[key[0]]} | {key[1]} | {key[2]} ({first['n_over_d_joint']:g}) | {key[3]:g} | {key[4]} | "
                  f"{first['exact_change']:.3g} | {first['estimate_sd']:.3g} | {cells} |")
    head = (f"Coverage of the exact change of the MI between two checkpoints by 95 % intervals ({reps} independent "
            "draws of n runs per row; coverage with its 95 % Clopper-Pearson interval; se in bits; bootstrap: sd of "
            f"{RESAMPLES} paired resamples, t quantile; influence: delta method, normal quantile). "
            "'excludes 0' is how often the step would be called a change: where the exact change is 0, the false "
            f"verdict rate. Made by `python experiments/change_coverage.py{' --quick' if quick else ''}`.")
    return head + "\n\n" + "\n".join(md) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="30 replications of a subset, into figures/*_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    from threadpoolctl import threadpool_limits  # small products: one BLAS thread each

    threadpool_limits(1)
    reps = 30 if args.quick else args.reps
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    name = "change_coverage_quick" if args.quick else "change_coverage"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = timed_rows([(f"d={d} n={multiple:g} x d_joint a={a:g} / {design}",
                                 lambda d=d, m=multiple, a=a, design=design: setting_rows(d, m, a, design, reps))
                                for d, multiple, a, designs in settings for design in designs], width=50)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    text = page(rows, reps, args.quick)
    write_page(out, name, text)
    write_sidecar(table, {"table": table.name, "reps": reps, "level": LEVEL, "bootstrap_resamples": RESAMPLES,
                          "settings": [[d, m, a, list(ds)] for d, m, a, ds in settings],
                          "designs": {k: list(v) for k, v in DESIGNS.items()}, "methods": list(METHODS),
                          "sampling": "independent draws from the design's Gaussian law, two checkpoints per run",
                          "seconds": seconds, "provenance": collect(started, finished=True)})
    print(text)


if __name__ == "__main__":
    main()
