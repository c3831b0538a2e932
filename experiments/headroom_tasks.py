"""Is averaging the right way to combine the clients? Headroom on signal-rnn and digits-lenet.

Neither task knows where the federation should be, so every run also trains the central
reference client (``ParameterSampler(reference="central")``, ``--reference central``): from
the run's start, the same number of Adam steps as each client, each step on the union of
the three clients' batches of that step (see docs/concepts/headroom.md). `mianalysis.headroom`
then measures, per checkpoint, the mean squared error (summed over the parameters) of each
combination rule of the three clients to the central client, with its ratio to the plain
average's, paired by run. The fitted rules (inverse_variance, blue_coordinate) are
cross-fitted over 2 folds of runs; "blue" (the full best linear combination) is left out: its
(3 d) x (3 d) second moment (d = 358 and 850) is shrunk at these run counts and takes
minutes per checkpoint. Designs:

- signal-rnn, paper settings (100 examples, batch 64: 2 Adam steps of lr 1e-3), per-run start,
  nothing shared; and the same with the minibatch order and dropout shared by a run's clients;
- digits-lenet, paper settings (the pretrained head plus noise, 4 steps of lr 1e-5);
- digits-lenet "long" (a fresh head, 1000 examples per client, 20 steps of lr 1e-2), checkpoints
  every 5 steps.

    python experiments/headroom_tasks.py [--runs 500] [--quick]

Writes figures/headroom_tasks.csv (one row per design, iteration and rule; iteration 0, where
every error is 0, is left out), figures/headroom_tasks.png (the ratios with their intervals),
the sidecar figures/headroom_tasks.csv.json and the page docs/results/tables/headroom_tasks.md
(with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _results import FIGURES, rows_by_design, write_csv, write_page, write_sidecar

from mianalysis import ParameterSampler, headroom
from mianalysis.plots import figure_headroom
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

# design -> (task, preset, shared streams, checkpoint every)
DESIGNS = {
    "signal-rnn paper, nothing shared": ("signal-rnn", "paper", (), 1),
    "signal-rnn paper, order and dropout shared": ("signal-rnn", "paper", ("order", "dropout"), 1),
    "digits-lenet paper (pretrained head)": ("digits-lenet", "paper", (), 1),
    "digits-lenet long (fresh head, 20 steps)": ("digits-lenet", "long", (), 5),
}
RULE_LIST = ("mean", "weighted_mean", "inverse_variance", "blue_coordinate")


def design_rows(design, runs, work, seed=0):
    name, preset, shared, every = DESIGNS[design]
    sampler = ParameterSampler(get_task(name, preset), seed=seed, shared=shared, every=every, chunk_size=50,
                               progress=False, reference="central")
    dump = sampler.sample(runs, Path(work) / f"design-{list(DESIGNS).index(design)}")
    rows = headroom(dump, rules=RULE_LIST, iterations=dump.checkpoints[1:])  # the client "central" is the reference
    return [{"design": design, "task": name, "preset": preset, "shared": " ".join(shared), **r} for r in rows]


def markdown(rows, runs, command):
    lines = [f"Headroom over the plain average on signal-rnn and digits-lenet (3 clients; {runs} runs per design, "
             "seed 0, per-run start). The reference of each run is its **central client**: the run's start "
             "trained with the same number of steps as each client, every step on the union of the clients' "
             "batches of that step. MSE = E||sum_k W_k theta_k - theta_central||^2, summed over the parameters "
             "(358 for signal-rnn, 850 for digits-lenet's last layer); means over runs with 95 % normal "
             "intervals, ratios to the mean's MSE paired by run (delta method). inverse_variance and "
             "blue_coordinate are **cross-fitted** (weights fitted on one half of the runs, scored on the other, "
             "halves swapped); the corrected ratio divides blue_coordinate's by what fitting costs on jointly "
             "Gaussian errors (`mianalysis.headroom.fitting_inflation`); weighted_mean is the mean here (equal "
             f"client sizes). Made by `{command}`.", "",
             "| design | iteration | rule | weights | MSE [95 %] | ratio to mean [95 %] | corrected ratio [95 %] |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        fitted = r["fit_inflation"] == r["fit_inflation"] and r["fit_inflation"] != 1.0  # not NaN, not 1
        corrected = (f"{r['ratio_corrected']:.3f} [{r['ratio_corrected_low']:.3f}, {r['ratio_corrected_high']:.3f}]"
                     if fitted else "-")
        lines.append(f"| {r['design']} | {r['iteration']} | {r['rule']} | {r['weights']} | {r['mse']:.4g} "
                     f"[{r['mse_low']:.4g}, {r['mse_high']:.4g}] | {r['ratio']:.3f} [{r['ratio_low']:.3f}, "
                     f"{r['ratio_high']:.3f}] | {corrected} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="40 runs, into figures/headroom_tasks_quick.*")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    started = utc_now()
    runs = 40 if args.quick else args.runs
    name = "headroom_tasks_quick" if args.quick else "headroom_tasks"
    command = "python experiments/headroom_tasks.py" + (" --quick" if args.quick else
                                                         "" if runs == 500 else f" --runs {runs}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, seconds = rows_by_design(DESIGNS, design_rows, runs, prefix="headroom-tasks-", width=45)
    table = write_csv(rows, out / f"{name}.csv", float_format=".6g")
    write_page(out, name, markdown(rows, runs, command))
    fig = figure_headroom(rows, f"MSE of each rule / MSE of the average, reference: the central client ({runs} runs)")
    fig.savefig(out / f"{name}.png", dpi=120)
    write_sidecar(table, {"table": table.name, "runs": runs, "rules": list(RULE_LIST), "seconds": seconds,
                          "designs": {d: {"task": t, "preset": p, "shared": list(s), "every": e}
                                      for d, (t, p, s, e) in DESIGNS.items()},
                          "reference": "central", "command": command, "provenance": collect(started, finished=True)})
    print(markdown(rows, runs, command))


if __name__ == "__main__":
    main()
