"""FedGradNorm versus FedRep on a synthetic multi-task federation (seed 003).

Four clients, one task each (mianalysis.federated.multitask): a regression with large
gradients (targets scaled by 10), a 5-class and a 3-class classifier with label noise,
and an easy noiseless binary classifier. A shared body (20 -> 64 -> 32, ReLU) is
aggregated at the server; each client keeps a linear head. Each round: 5 head steps,
5 body steps, batch 64, Adam with beta = 2e-4; FedGradNorm updates the loss weights with
gamma = 0.9 and Adam alpha = 4e-3, FedRep keeps them at 1. Balanced allocation: 1000
examples per client; imbalanced: 3000 / 500 / 500 / 3000.

    python experiments/fedgradnorm.py --quick   # 60 rounds, 2 seeds
    python experiments/fedgradnorm.py           # 1000 rounds, 3 seeds

Writes figures/fedgradnorm/fedgradnorm{_quick}.png (per-task test loss per round for both methods
and the weights p_i per round, balanced and imbalanced), .csv (every 10th round,
client, method, allocation and seed) and .csv.json (settings, times), and the page
docs/results/tables/fedgradnorm{_quick}.md (final per-task test metric: accuracy, or MSE
for the regression; mean ± sd over seeds). Torch runs on one
thread: the models are tiny and a second thread only adds overhead.
"""

import argparse
import time

import numpy as np
from _fedgradnorm_figure import plot, task_names
from _results import figures_of, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import write_rows
from mianalysis.federated.personalized import PersonalizedConfig, PersonalizedSimulation
from mianalysis.federated.multitask import make_multitask

FIGURES = figures_of(__file__)  # figures/fedgradnorm/: where this script writes

METHODS = ("fedrep", "fedgradnorm")
ALLOCATIONS = ("balanced", "imbalanced")


def main():
    import torch

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    started = utc_now()
    rounds, seeds = (60, 2) if args.quick else (1000, 3)
    suffix = "_quick" if args.quick else ""
    out = FIGURES
    rows, timing = [], {}
    for alloc in ALLOCATIONS:
        clients = make_multitask(alloc, seed=0)
        for method in METHODS:
            start = time.perf_counter()
            for seed in range(seeds):
                sim = PersonalizedSimulation(clients, PersonalizedConfig(rounds=rounds, method=method), seed=seed)
                rows += [{"allocation": alloc, "method": method, "seed": seed, **r} for r in sim.run()]
            timing[f"{alloc}/{method}"] = round(time.perf_counter() - start, 1)
            print(f"{alloc}/{method}: {timing[f'{alloc}/{method}']} s", flush=True)
    # every 10th round, to keep the file small
    write_rows([r for r in rows if r["round"] % 10 == 0 or r["round"] == rounds], out / f"fedgradnorm{suffix}.csv")
    table, final = markdown_table(rows, rounds)
    write_page(
        out, f"fedgradnorm{suffix}",
        f"{seeds} seeds per cell (mean ± sd) after {rounds} rounds; accuracy for the classifiers, test MSE for the "
        f"regression (lower is better); p = final loss weight.\n\n{table}\n")
    plot(rows, out / f"fedgradnorm{suffix}.png", {"rounds": rounds, "seeds": seeds})
    write_sidecar(out / f"fedgradnorm{suffix}.csv", {
        "rounds": rounds, "seeds": seeds, "tasks": task_names(), "seconds": timing, "final": final,
        "config": PersonalizedConfig().__dict__ | {"rounds": rounds}, "provenance": [collect(started, finished=True)]})
    print(table)


def _series(rows, alloc, method, client, key):
    """(rounds, mean over seeds) of `key`."""
    sel = [r for r in rows if r["allocation"] == alloc and r["method"] == method and r["client"] == client]
    rounds = sorted({r["round"] for r in sel})
    by_round = {t: [] for t in rounds}
    for r in sel:
        by_round[r["round"]].append(r[key])
    return np.array(rounds), np.array([np.mean(by_round[t]) for t in rounds])


def markdown_table(rows, rounds):
    names = task_names()
    head = ["Allocation", "Method"] + names
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    final = {}
    for alloc in ALLOCATIONS:
        for method in METHODS:
            cells = [alloc, method]
            for client, name in enumerate(names):
                sel = [r for r in rows if r["allocation"] == alloc and r["method"] == method
                       and r["client"] == client and r["round"] == rounds]
                metric = np.array([r["test_metric"] for r in sel])
                weight = np.mean([r["weight"] for r in sel])
                final.setdefault(f"{alloc}/{method}", {})[name] = {"test_metric": float(metric.mean()),
                                                                  "sd": float(metric.std(ddof=1)),
                                                                  "weight": float(weight)}
                cells.append(f"{metric.mean():.3f} ± {metric.std(ddof=1):.3f} (p {weight:.2f})")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), final


if __name__ == "__main__":
    main()
