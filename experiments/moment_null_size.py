"""Size of the permutation-moment null (Pillai's trace, its exact permutation mean and
variance, a gamma tail) beside the analytic Wilks' Lambda null, on independent clients whose
parameters are not jointly Gaussian, up to the paper's shape.

``analyze(..., gaussian_null="moments")`` gives each plain Gaussian or copula MI row the
p-value of :func:`mianalysis.estimators.moment_null.permutation_moment_null` instead of
shuffles. Its moments are exact for any samples; its gamma tail is an approximation. This
measures how often each null rejects independence at 5 % and 1 % where the clients are
independent by construction, with 95 % Clopper-Pearson intervals and a Kolmogorov-Smirnov
test that the p-values are uniform. Two designs:

- "fresh pairs": p = q parameters per client, n a multiple of the joint dimension (2.5, 4,
  16), each draw a new pair of independent clients under one of the laws of
  ``experiments/copula_null_size.py`` (``_laws.py``);
- "permutations of one pair" at the paper's shape (26,400 runs, 850 + 850 parameters): one
  pair of independent clients per law, each draw a uniform shuffle of one client's runs,
  which is the distribution the permutation test would sample (the moments are those of
  this distribution, so its size here is the approximation's error at this shape).

The samples are given to the nulls as the estimators see them: the parameters ("gaussian")
or their normal scores ("copula"); at the paper's shape only the copula estimate, which
``analyze`` chooses there by default.

    python experiments/moment_null_size.py [--draws 2000] [--paper-draws 2000] [--quick]

Writes figures/moment_null_size/moment_null_size.csv, its sidecar and docs/results/tables/moment_null_size.md
(--quick: 200 draws of two small settings and 40 at a small paper-like shape, into
*_quick.*; --out DIR: into DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _laws import client
from _results import figures_of, timed_rows, write_csv, write_page, write_sidecar
from _stats import rejection_cells, rejection_columns
from scipy import linalg

from mianalysis import gaussian_mi_null
from mianalysis.estimators.copula import normal_scores
from mianalysis.estimators.moment_null import permutation_moment_null
from mianalysis.provenance import collect, utc_now

FIGURES = figures_of(__file__)  # figures/moment_null_size/: where this script writes

ALPHAS = (0.05, 0.01)
FRESH_LAWS = ("gaussian", "student-t3", "scale-mixture", "ties")
PAPER_LAWS = ("gaussian", "student-t3")
ESTIMATORS = ("gaussian", "copula")
PAPER_ESTIMATORS = ("copula",)  # what analyze's default estimates at the paper's shape
# (p = q per client, n as a multiple of the joint dimension p + q)
SETTINGS = [(p, m) for p in (10, 50) for m in (2.5, 4.0, 16.0)]
QUICK_SETTINGS = [(10, 4.0), (50, 16.0)]
PAPER = (26_400, 850)
QUICK_PAPER = (2_000, 100)


def as_seen(samples, estimator):
    """The samples the estimator's null is given: the parameters or their normal scores."""
    return normal_scores(samples) if estimator == "copula" else samples


def plugin_nats(c):
    """The plug-in Gaussian MI in nats from the cross-correlation matrix `c` of whitened
    samples (their canonical correlations are its singular values): -1/2 log det(I - c c^T)."""
    c = np.asarray(c, dtype=np.float64)
    return -float(np.sum(np.log(np.diag(linalg.cholesky(np.eye(c.shape[0]) - c @ c.T, lower=True)))))


def whitened(samples):
    centred = samples - samples.mean(axis=0)
    return linalg.solve_triangular(linalg.cholesky(centred.T @ centred, lower=True), centred.T, lower=True)


def fresh_p_values(rng, n, p, law, draws):
    """{(estimator, null): p-values of `draws` fresh independent pairs}."""
    out = {(e, null): np.empty(draws) for e in ESTIMATORS for null in ("moments", "Wilks (Bartlett)")}
    wilks = gaussian_mi_null(n, p, p, units="nats", bias_correction=False)
    for r in range(draws):
        pair = [client(rng, n, p, law, rng.standard_normal((p, p)) / np.sqrt(p)) for _ in range(2)]
        for e in ESTIMATORS:
            x, y = (as_seen(s, e) for s in pair)
            out[e, "moments"][r] = permutation_moment_null(x, y).p_value
            out[e, "Wilks (Bartlett)"][r] = wilks.p_value(plugin_nats(whitened(x) @ whitened(y).T))
    return out


def permuted_p_values(rng, n, p, law, draws):
    """{(estimator, null): p-values of `draws` shuffles of one independent pair} for the
    estimators of :data:`PAPER_ESTIMATORS`; each shuffle's cross product made once (float32)."""
    pair = [client(rng, n, p, law, rng.standard_normal((p, p)) / np.sqrt(p)) for _ in range(2)]
    wilks = gaussian_mi_null(n, p, p, units="nats", bias_correction=False)
    out = {}
    for e in PAPER_ESTIMATORS:
        x, y = (as_seen(s, e) for s in pair)
        moments = permutation_moment_null(x, y)
        zx, zy = (whitened(s).astype(np.float32) for s in (x, y))
        pm, pw = np.empty(draws), np.empty(draws)
        for r in range(draws):
            c = zx @ zy[:, rng.permutation(n)].T
            pm[r] = moments.tail(np.sum(c.astype(np.float64) ** 2))
            pw[r] = wilks.p_value(plugin_nats(c))
        out[e, "moments"], out[e, "Wilks (Bartlett)"] = pm, pw
    return out


def rows_of(p_values, design, law, n, p, draws):
    rows = []
    for (e, null), pv in p_values.items():
        row = {"design": design, "estimator": e, "null": null, "law": law, "p_client": p, "n": n,
               "n_over_d_joint": n / (2 * p), "draws": draws}
        row.update(rejection_columns(pv, ALPHAS))
        rows.append(row)
    return rows


def page(rows, command):
    md = ["| design | estimator | null | law | p = q | n (x d_joint) | draws | rejected at 5 % [95 % CI] | "
          "rejected at 1 % [95 % CI] | KS p (uniform p-values) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['design']} | {r['estimator']} | {r['null']} | {r['law']} | {r['p_client']} | "
                  f"{r['n']} ({r['n_over_d_joint']:g}) | {r['draws']} | {rejection_cells(r)} |")
    head = ("False-positive rate of the permutation-moment null (Pillai's trace, exact permutation mean and "
            "variance, gamma tail) and of the analytic Wilks' Lambda null (Bartlett's chi-square) on independent "
            "clients: the rate with its 95 % Clopper-Pearson interval; KS: the p-value of a Kolmogorov-Smirnov "
            "test that the null's p-values are uniform. A valid null rejects 5 % and 1 % of the time. 'fresh "
            "pairs': each draw a new independent pair; 'permutations of one pair': each draw a shuffle of one "
            f"independent pair's runs, the permutation test's own distribution. Made by `{command}`.")
    return head + "\n\n" + "\n".join(md) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000, help="fresh pairs per small setting")
    parser.add_argument("--paper-draws", type=int, default=2000, help="shuffles per law at the paper's shape")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="200 draws of two small settings and 40 shuffles at 2,000 x (100 + 100), into *_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    draws, paper_draws = (200, 40) if args.quick else (args.draws, args.paper_draws)
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    n_paper, p_paper = QUICK_PAPER if args.quick else PAPER
    name = "moment_null_size_quick" if args.quick else "moment_null_size"
    command = "python experiments/moment_null_size.py" + (" --quick" if args.quick else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def fresh(p, multiple, law):
        n = int(round(multiple * 2 * p))
        rng = np.random.default_rng([args.seed, p, int(multiple * 10), FRESH_LAWS.index(law)])
        return rows_of(fresh_p_values(rng, n, p, law, draws), "fresh pairs", law, n, p, draws)

    def permuted(law):
        rng = np.random.default_rng([args.seed, n_paper, p_paper, PAPER_LAWS.index(law)])
        return rows_of(permuted_p_values(rng, n_paper, p_paper, law, paper_draws), "permutations of one pair",
                       law, n_paper, p_paper, paper_draws)

    cells = [(f"p={p} n={m:g} x d_joint / {law}", lambda p=p, m=m, law=law: fresh(p, m, law))
             for p, m in settings for law in FRESH_LAWS]
    cells += [(f"{n_paper} x ({p_paper} + {p_paper}) / {law}", lambda law=law: permuted(law)) for law in PAPER_LAWS]
    rows, seconds = timed_rows(cells, width=40)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    text = page(rows, command)
    write_page(out, name, text)
    write_sidecar(table, {"table": table.name, "command": command, "draws": draws, "paper_draws": paper_draws,
                          "seed": args.seed, "alphas": list(ALPHAS), "settings": [[p, m] for p, m in settings],
                          "paper_shape": [n_paper, p_paper], "laws": list(FRESH_LAWS), "paper_laws": list(PAPER_LAWS),
                          "sampling": "independent clients; within a client a random mixing of p standard normals "
                                      "under each law", "seconds": seconds,
                          "provenance": collect(started, finished=True)})
    print(text)


if __name__ == "__main__":
    main()
