"""Coverage of the Gaussian and copula MI level intervals on gaussian-sgd's exact MI.

gaussian-sgd (mianalysis.tasks.GaussianSGDTask) knows the exact joint law of two clients'
parameters at every checkpoint: Gaussian, with the covariance `exact_covariance` gives.
Every replication here draws n runs directly from that law (the sampler's dumps hold
draws of the same law, rounded to float32, at far more cost: equivalent for this
purpose), estimates the MI with `mianalysis.analysis.inference.intervals.mi_interval` by each
level-interval method at 95 % and records whether the interval covers the exact MI
(`exact_mi`). The copula estimator sees the samples through sinh, coordinate by
coordinate (the task's `transform="sinh"`: the MI is unchanged, the samples are not
Gaussian; the copula estimate sees only ranks, so it is the same as on the Gaussian draws).

Settings: the paper preset (d = 20 per client, 40 joint dimensions) and, as the
higher-dimensional one, d = 50 per client (the `high` preset's d = 200 costs too much on a
shared machine, and it is run at n = 2.2 x its joint dimension only, where the methods
differ); n from 2.2 x the joint dimension (just above the 2 x at which analyze turns to
Ledoit-Wolf shrinkage, where the bootstrap's trouble is) to 10 x; three designs
of the sampler (a fixed start with nothing shared: MI exactly 0; a per-run start with
nothing shared at iteration 10: about 0.7 bits at d = 20; a fixed start with the targets
shared at iteration 40: about 33 bits at d = 20). Methods: "bootstrap" (the sd of 20
bootstrap resamples with Student's t quantile, analyze's interval before this
experiment), "asymptotic" (the delta method, sum r_i^2 / n nats^2) and "wishart" (exact
Wishart moments plus a canonical-correlation term; mianalysis.estimators.gaussian_se).
Half-subsampling is left out: halves of n = 2.2 d_joint runs have fewer runs than
dimensions, so no plain estimate. For the Gaussian estimator the analytic null
(gaussian_mi_null) is evaluated on every replication: how often it rejects at 0.05, how
often the interval excludes 0, and how often the two disagree.

    python experiments/interval_coverage.py [--reps 200] [--quick]

Writes figures/interval_coverage/interval_coverage.csv (one row per estimator, setting, design and method:
coverage with its 95 % Clopper-Pearson interval, mean width, the estimate's sd over the
replications and the mean se of the interval), its sidecar figures/interval_coverage/interval_coverage.csv.json
and the page docs/results/tables/interval_coverage.md (--quick: 40 replications, into
*_quick.*; --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _results import figures_of, write_csv, write_page, write_sidecar
from _stats import clopper_pearson
from scipy.special import ndtri

from mianalysis import gaussian_mi_null
from mianalysis.analysis.inference.intervals import mi_interval
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/interval_coverage/: where this script writes

LEVEL = 0.95
RESAMPLES = 20  # analyze's default bootstrap resamples for the Gaussian and copula estimators
# (label, d per client, n runs): n as multiples of the joint dimension 2 d
SETTINGS = [("paper", 20, 88), ("paper", 20, 200), ("paper", 20, 400), ("d=50", 50, 220)]
# design -> (iteration, init, shared)
DESIGNS = {"fixed start, nothing shared": (40, "fixed", ()), "per-run start, nothing shared": (10, "per-run", ()),
           "fixed start, shared data": (40, "fixed", ("data",))}
METHODS = ("bootstrap", "asymptotic", "wishart")
ESTIMATORS = {"gaussian": None, "copula": np.sinh}


def setting_rows(label, d, n, design, reps, seed=0):
    """Rows of one setting and design: every estimator x method."""
    iteration, init, shared = DESIGNS[design]
    task = get_task("gaussian-sgd", d=d)
    cov = task.exact_covariance(iteration, 0, 1, init=init, shared=shared)
    exact = task.exact_mi(iteration, 0, 1, init=init, shared=shared)
    root = np.linalg.cholesky(cov)
    null = gaussian_mi_null(n, d, d)
    z_level = float(ndtri(0.5 + LEVEL / 2))
    found = {(e, m): [] for e in ESTIMATORS for m in METHODS}
    null_p = []
    for r in range(reps):
        rng = np.random.default_rng([seed, d, n, list(DESIGNS).index(design), r])
        z = rng.standard_normal((n, 2 * d)) @ root.T
        for estimator, transform in ESTIMATORS.items():
            x, y = (z[:, :d], z[:, d:]) if transform is None else (transform(z[:, :d]), transform(z[:, d:]))
            for method in METHODS:
                found[estimator, method].append(mi_interval(x, y, estimator, method=method, n_resamples=RESAMPLES,
                                                            level=LEVEL, random_state=r))
        null_p.append(null.p_value(found["gaussian", METHODS[-1]][-1][0]))
    null_p = np.array(null_p)
    rows = []
    for (estimator, method), got in found.items():
        est, low, high = np.array(got).T
        hits = int(np.sum((low <= exact) & (exact <= high)))
        cov_low, cov_high = clopper_pearson(hits, reps)
        excludes = low > 0
        row = {"estimator": estimator, "setting": label, "d_client": d, "d_joint": 2 * d, "n": n,
               "n_over_d_joint": n / (2 * d), "design": design, "iteration": iteration, "exact_mi": float(exact),
               "method": method, "reps": reps, "coverage": hits / reps, "coverage_low": cov_low,
               "coverage_high": cov_high, "mean_width": float(np.mean(high - low)),
               "estimate_mean": float(est.mean()), "estimate_sd": float(est.std(ddof=1)),
               "mean_se": float(np.mean(high - low) / (2 * z_level)) if method != "bootstrap" else np.nan,
               "excludes_zero": float(excludes.mean()), "null_rejects": np.nan, "disagree": np.nan}
        if estimator == "gaussian":  # the analytic null is that of the Gaussian estimate
            rejects = null_p <= 1 - LEVEL
            row["null_rejects"] = float(rejects.mean())
            row["disagree"] = float(np.mean(rejects != excludes))
        rows.append(row)
    return rows


def page(rows, reps, quick):
    """The Markdown table: coverage (Clopper-Pearson interval) and mean width per method."""
    names = {"gaussian": "Gaussian", "copula": "copula (sinh)"}
    md = ["| estimator | d per client | n (x d_joint) | design | exact MI (bits) | "
          + " | ".join(f"{m}: coverage | {m}: width" for m in METHODS)
          + " | null rejects / interval excludes 0 / disagree (wishart) |",
          "|---|---|---|---|---|" + "---|---|" * len(METHODS) + "---|"]
    keys = list(dict.fromkeys((r["estimator"], r["d_client"], r["n"], r["design"]) for r in rows))
    for key in keys:
        got = {r["method"]: r for r in rows if (r["estimator"], r["d_client"], r["n"], r["design"]) == key}
        first = got[METHODS[0]]
        cells = " | ".join(f"{got[m]['coverage']:.1%} [{got[m]['coverage_low']:.0%}, {got[m]['coverage_high']:.0%}] | "
                           f"{got[m]['mean_width']:.3g}" for m in METHODS)
        w = got["wishart"]
        agree = ("-" if np.isnan(w["null_rejects"]) else
                 f"{w['null_rejects']:.1%} / {w['excludes_zero']:.1%} / {w['disagree']:.1%}")
        md.append(f"| {names[key[0]]} | {key[1]} | {key[2]} ({first['n_over_d_joint']:.1f}) | {key[3]} | "
                  f"{first['exact_mi']:.3g} | {cells} | {agree} |")
    head = (f"Coverage of the exact MI by 95 % level intervals on gaussian-sgd ({reps} independent draws of n runs "
            "from the exact Gaussian law per row; coverage with its 95 % Clopper-Pearson interval; width in bits; "
            f"bootstrap: sd of {RESAMPLES} resamples, t quantile). Made by "
            f"`python experiments/interval_coverage.py{' --quick' if quick else ''}`.")
    return head + "\n\n" + "\n".join(md) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="40 replications, into figures/*_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    # One BLAS thread: the products are small, and on a shared machine more threads only contend.
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    reps = 40 if args.quick else args.reps
    name = "interval_coverage_quick" if args.quick else "interval_coverage"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = [], {}
    for label, d, n in SETTINGS:
        for design in DESIGNS:
            start = time.perf_counter()
            rows += setting_rows(label, d, n, design, reps)
            key = f"d={d} n={n} / {design}"
            seconds[key] = round(time.perf_counter() - start, 1)
            print(f"{key:45s} {seconds[key]:7.1f} s", flush=True)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    text = page(rows, reps, args.quick)
    write_page(out, name, text)
    write_sidecar(table, {"table": table.name, "reps": reps, "level": LEVEL, "bootstrap_resamples": RESAMPLES,
                          "settings": [list(s) for s in SETTINGS], "designs": {k: list(v[:2]) + [list(v[2])]
                                                                               for k, v in DESIGNS.items()},
                          "methods": list(METHODS), "sampling": "independent draws from the task's exact Gaussian law "
                          "(exact_covariance), not dumps", "seconds": seconds,
                          "provenance": collect(started, finished=True)})
    print(text)


if __name__ == "__main__":
    main()
