"""Size of the analytic (Wilks' Lambda) null of the Gaussian and Gaussian copula MI estimates
on independent clients whose parameters are not jointly Gaussian.

``analyze(..., gaussian_null="analytic")`` gives each plain Gaussian or copula MI row the
p-value of :func:`mianalysis.gaussian_mi_null` instead of 100 permutations: exact for the
Gaussian estimate when the parameters are Gaussian, an approximation for the copula estimate
(the normal scores are Gaussian one coordinate at a time, not jointly) and for the Gaussian
estimate of non-Gaussian parameters. This measures how often each rejects independence at
5 % and 1 % where the two clients are independent by construction (the false-positive rate,
with its 95 % Clopper-Pearson interval), and a Kolmogorov-Smirnov test that the p-values are
uniform.

Design: p = q parameters per client, n runs a multiple of the joint dimension p + q (from
2.5, just above where analyze turns to shrinkage and no analytic null applies). Within a
client the parameters are dependent through a random mixing matrix (each coordinate a
mixture of p standard normals), under four laws of the client's vector (its copula; a
monotone map of each coordinate would change nothing for the copula estimate):

- "gaussian": the mixed normals (the Gaussian estimate's null is exact here);
- "student-t3": the same divided by one sqrt(chi2_3 / 3) per run (a multivariate t, heavy
  tails shared by all coordinates of a run: a non-Gaussian copula);
- "scale-mixture": the same times 1 or 4, one draw per run (two regimes of training noise);
- "ties": the Gaussian vector rounded to a grid of 0.25 sd (values repeat, as float32
  parameters near a shared start do).

Clients are drawn independently (no stream shared), so every rejection is a false one.

    python experiments/copula_null_size.py [--reps 400] [--quick]

Writes figures/copula_null_size/copula_null_size.csv, its sidecar and docs/results/tables/copula_null_size.md
(--quick: 60 replications of two settings, into *_quick.*; --out DIR: into DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _laws import LAWS, client
from _results import figures_of, timed_rows, write_csv, write_page, write_sidecar
from _stats import rejection_cells, rejection_columns

from mianalysis import gaussian_copula_mi, gaussian_mi, gaussian_mi_null
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/copula_null_size/: where this script writes

ESTIMATORS = {"gaussian": gaussian_mi, "copula": gaussian_copula_mi}
ALPHAS = (0.05, 0.01)
# (p = q per client, n as a multiple of the joint dimension p + q)
SETTINGS = [(p, m) for p in (10, 50) for m in (2.5, 4.0, 16.0)]
QUICK_SETTINGS = [(10, 2.5), (10, 16.0)]


def null_p_values(rng, n, p, law, reps):
    """{estimator: analytic-null p-values of `reps` independent pairs of clients}."""
    out = {e: np.empty(reps) for e in ESTIMATORS}
    null = gaussian_mi_null(n, p, p)
    for r in range(reps):
        mixing = rng.standard_normal((p, p)) / np.sqrt(p)
        x, y = client(rng, n, p, law, mixing), client(rng, n, p, law, rng.standard_normal((p, p)) / np.sqrt(p))
        for e, function in ESTIMATORS.items():
            out[e][r] = null.p_value(function(x, y))
    return out


def setting_rows(p, multiple, law, reps, seed):
    """The rows of one setting: per estimator, the rejection rate at each alpha with its interval."""
    n = int(round(multiple * 2 * p))
    rng = np.random.default_rng([seed, p, int(multiple * 10), LAWS.index(law)])
    rows = []
    for e, pv in null_p_values(rng, n, p, law, reps).items():
        row = {"estimator": e, "law": law, "p_client": p, "n": n, "n_over_d_joint": n / (2 * p), "reps": reps}
        row.update(rejection_columns(pv, ALPHAS))
        rows.append(row)
    return rows


def page(rows, reps, quick):
    """The Markdown page of the table."""
    md = ["| estimator | law | p = q | n (x d_joint) | rejected at 5 % [95 % CI] | rejected at 1 % [95 % CI] | "
          "KS p (uniform p-values) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['estimator']} | {r['law']} | {r['p_client']} | {r['n']} ({r['n_over_d_joint']:g}) | "
                  f"{rejection_cells(r)} |")
    head = (f"False-positive rate of the analytic (Wilks' Lambda) null on independent clients ({reps} independent "
            "pairs of clients per row; the rate with its 95 % Clopper-Pearson interval; KS: the p-value of a "
            "Kolmogorov-Smirnov test that the null's p-values are uniform). A valid null rejects 5 % and 1 % of the "
            f"time. Made by `python experiments/copula_null_size.py{' --quick' if quick else ''}`.")
    return head + "\n\n" + "\n".join(md) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="60 replications of two settings, into figures/*_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    from threadpoolctl import threadpool_limits  # small products: one BLAS thread each

    threadpool_limits(1)
    reps = 60 if args.quick else args.reps
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    name = "copula_null_size_quick" if args.quick else "copula_null_size"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = timed_rows([(f"p={p} n={multiple:g} x d_joint / {law}",
                                 lambda p=p, m=multiple, law=law: setting_rows(p, m, law, reps, args.seed))
                                for p, multiple in settings for law in LAWS], width=40)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    text = page(rows, reps, args.quick)
    write_page(out, name, text)
    write_sidecar(table, {"table": table.name, "reps": reps, "seed": args.seed, "alphas": list(ALPHAS),
                          "settings": [[p, m] for p, m in settings], "laws": list(LAWS),
                          "sampling": "independent clients; within a client a random mixing of p standard normals "
                                      "under each law", "seconds": seconds,
                          "provenance": collect(started, finished=True)})
    print(text)


if __name__ == "__main__":
    main()
