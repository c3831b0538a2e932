"""Is averaging the right way to combine the clients? Headroom on gaussian-sgd, estimated vs exact.

Samples gaussian-sgd (default settings: 3 clients, d = 20, 40 iterations, checkpoints every
10) in three designs and a negative control, and measures with `mianalysis.analysis.studies.headroom` the
mean squared error (summed over the 20 parameters) of each combination rule to the run's
reference theta* = (sum A_k)^-1 sum A_k mu_k, with its ratio to the plain average's. The
fitted rules (inverse_variance, blue_coordinate, blue) are cross-fitted over 2 folds of runs;
`mse_exact` is the exact MSE of the rule's weights, or, for a fitted rule, of its oracle
weights (from the exact error moments). Designs:

- per-run start, nothing shared;
- fixed start, shared data (every client of a run has the same z);
- per-run start, data and noise shared;
- control: identical clients (heterogeneity 0), per-run start, noise correlation rho = 0.5:
  no rule can beat the average, though the clients are dependent.

    python experiments/headroom_gaussian_sgd.py [--runs 4000] [--quick]

Writes figures/headroom_gaussian_sgd/headroom_gaussian_sgd.csv (one row per design, iteration and rule) and
figures/headroom_gaussian_sgd/headroom_gaussian_sgd.png (the ratios with their intervals), with provenance in
figures/headroom_gaussian_sgd/headroom_gaussian_sgd.csv.json, and the page docs/results/tables/headroom_gaussian_sgd.md
(estimated vs exact at iterations 10 and 40; with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _results import figures_of, rows_by_design, write_csv, write_page, write_sidecar

from mianalysis import ParameterSampler, headroom
from mianalysis.provenance import collect, utc_now
from mianalysis.analysis.studies.headroom import RULES
from mianalysis.report.plots import figure_headroom
from mianalysis.tasks import get_task

FIGURES = figures_of(__file__)  # figures/headroom_gaussian_sgd/: where this script writes

# design -> (init, shared streams, task settings)
DESIGNS = {
    "per-run start, nothing shared": ("per-run", (), {}),
    "fixed start, shared data": ("fixed", ("data",), {}),
    "per-run start, data and noise shared": ("per-run", ("data", "noise"), {}),
    "control: identical clients, rho 0.5": ("per-run", (), {"heterogeneity": 0.0, "rho": 0.5}),
}
RULE_LIST = (*RULES, "curvature")
SHOWN = (10, 40)


def design_rows(design, runs, work, seed=0):
    init, shared, settings = DESIGNS[design]
    task = get_task("gaussian-sgd", **settings)
    sampler = ParameterSampler(task, seed=seed, init=init, shared=shared, every=10, chunk_size=500, progress=False)
    dump = sampler.sample(runs, Path(work) / design.split(":")[0].replace(" ", "-").replace(",", ""))
    return [{"design": design, **r} for r in headroom(dump, rules=RULE_LIST)]


def markdown(rows, runs, command):
    lines = [f"Headroom over the plain average on gaussian-sgd (default settings, d = 20, 3 clients; {runs} runs "
             "per design, seed 0). MSE = E||sum_k W_k theta_k - theta*||^2, summed over the 20 parameters; "
             "estimates are means over runs with 95 % normal intervals, ratios paired by run (delta method). "
             "Fitted rules (inverse_variance, blue_coordinate, blue) are **cross-fitted** (weights fitted on one "
             "half of the runs, scored on the other, halves swapped); their exact column is the exact MSE of the "
             "rule's *oracle* weights; mean, weighted_mean (equal client sizes) and curvature ((sum A)^-1 A_k) have "
             "fixed weights. The **corrected** MSE divides a fitted rule's cross-fitted MSE by what fitting "
             "costs on jointly Gaussian errors (`mianalysis.analysis.studies.headroom.fitting_inflation`: 1 + q / (n_fit - q - 1), "
             "q = 40 regressors for blue, 2 for blue_coordinate, n_fit = half the runs); it estimates the MSE of "
             f"the oracle weights (none for inverse_variance). Made by `{command}`.", "",
             "| design | iteration | rule | weights | MSE [95 %] | corrected MSE [95 %] | exact MSE "
             "| ratio to mean [95 %] | corrected ratio [95 %] | exact ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def corrected(r, key):
        if r["fit_inflation"] != r["fit_inflation"] or r["fit_inflation"] == 1.0:  # NaN, or nothing fitted
            return "-"
        digits = ".4g" if key == "mse" else ".3f"
        return (f"{r[key + '_corrected']:{digits}} [{r[key + '_corrected_low']:{digits}}, "
                f"{r[key + '_corrected_high']:{digits}}]")

    for r in rows:
        if r["iteration"] not in SHOWN:
            continue
        lines.append(f"| {r['design']} | {r['iteration']} | {r['rule']} | {r['weights']} | {r['mse']:.4g} "
                     f"[{r['mse_low']:.4g}, {r['mse_high']:.4g}] | {corrected(r, 'mse')} | {r['mse_exact']:.4g} "
                     f"| {r['ratio']:.3f} [{r['ratio_low']:.3f}, {r['ratio_high']:.3f}] | {corrected(r, 'ratio')} "
                     f"| {r['ratio_exact']:.3f} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="400 runs, into figures/headroom_gaussian_sgd/headroom_gaussian_sgd_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    runs = 400 if args.quick else args.runs
    name = "headroom_gaussian_sgd_quick" if args.quick else "headroom_gaussian_sgd"
    command = "python experiments/headroom_gaussian_sgd.py" + (" --quick" if args.quick else
                                                                "" if runs == 4000 else f" --runs {runs}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = rows_by_design(DESIGNS, design_rows, runs, prefix="headroom-gaussian-sgd-", width=40)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    write_page(out, name, markdown(rows, runs, command))
    fig = figure_headroom(rows, f"gaussian-sgd: MSE of each rule / MSE of the average ({runs} runs; open circles: "
                                "exact, oracle weights for fitted rules)")
    fig.savefig(out / f"{name}.png", dpi=120)
    write_sidecar(table, {"table": table.name, "runs": runs, "seconds": seconds, "command": command,
                          "provenance": collect(started, finished=True)})
    print(markdown(rows, runs, command))


if __name__ == "__main__":
    main()
