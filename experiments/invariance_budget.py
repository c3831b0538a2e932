"""What budget lets FedAvg fit seed 000's training environments? (the probe behind
``invariance.py --tag _fitted``)

The invariance experiment at seed 000's setting (10 rounds, 50 local epochs, lr 0.05)
underfits: train accuracy 0.64-0.75 where the centralised control reaches 0.999. This
probe runs the equal-size configuration, one replicate each, at longer budgets and
records the global model's train, validation and held-out accuracy every round:

- 50 local epochs, 40 rounds, lr 0.05 and 0.2 (FedAvg on updates);
- 1 local epoch, 800 rounds, lr 0.5 and 1.0 (FedAvg on updates);
- 1 local epoch, 300 rounds, lr 1.0: FedSGD on steps and the AND-mask on steps and updates.

A configuration whose training diverges is recorded with the round it diverged in.

    python experiments/invariance_budget.py

Writes figures/invariance_budget/invariance_budget.csv (one row per configuration and round) with
provenance in figures/invariance_budget/invariance_budget.csv.json, and the page
docs/results/tables/invariance_budget.md (train accuracy at selected rounds). About 15
minutes on one thread.
"""

import json
import re
import time

from _results import figures_of, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, write_rows

FIGURES = figures_of(__file__)  # figures/invariance_budget/: where this script writes

PROBES = [  # (label, rule, placement, local epochs, rounds, lr)
    ("FedAvg", "fedavg", "update", 50, 40, 0.05),
    ("FedAvg", "fedavg", "update", 50, 40, 0.2),
    ("FedAvg", "fedavg", "update", 1, 800, 0.5),
    ("FedAvg", "fedavg", "update", 1, 800, 1.0),
    ("FedSGD", "fedavg", "step", 1, 300, 1.0),
    ("AND-mask", "and_mask", "step", 1, 300, 1.0),
    ("AND-mask", "and_mask", "update", 1, 300, 1.0),
]
SHOWN = [10, 20, 40, 100, 200, 300, 400, 800]


def main():
    import torch

    torch.set_num_threads(1)
    started = utc_now()
    data = FederatedData.environments(n_clients=53, n_test_clients=10, examples_per_client=200, equal_size=True,
                                      seed=0)
    rows, summary = [], []
    for label, rule, placement, epochs, rounds, lr in PROBES:
        cfg = FederatedConfig(rounds=rounds, client_fraction=15 / 53, local_epochs=epochs, batch_size=64, lr=lr,
                              algorithm="fedavg" if placement == "update" else "fedsgd", aggregator=rule,
                              placement=placement, aggregator_params={} if rule == "fedavg" else {"threshold": 0.2})
        start = time.perf_counter()
        probe = {"algorithm": label, "placement": placement, "local_epochs": epochs, "rounds": rounds, "lr": lr}
        try:
            history = FederatedSimulation("mlp", data, cfg, replicates=1, seed=0, hidden=256).run().history
            diverged = ""
        except ValueError as exc:
            history, diverged = [], str(exc)
        seconds = round(time.perf_counter() - start, 1)
        for h in history:
            rows.append({**probe, "round": h["round"], "train_accuracy": h["train_accuracy"],
                         "val_accuracy": h["val_accuracy"], "test_accuracy": h["test_accuracy"]})
        by_round = {h["round"]: h["train_accuracy"] for h in history}
        summary.append({**probe, "seconds": seconds, "diverged": diverged,
                        "train_accuracy_at": {t: by_round[t] for t in SHOWN if t in by_round}})
        print(json.dumps(summary[-1]), flush=True)
    out = FIGURES
    write_rows(rows, out / "invariance_budget.csv")
    lines = ["| Algorithm | Placement | Local epochs | Rounds | LR | " + " | ".join(f"train acc. r{t}" for t in SHOWN)
             + " | Diverged |", "|" + "---|" * (len(SHOWN) + 6)]
    for s in summary:
        cells = [f"{s['train_accuracy_at'][t]:.3f}" if t in s["train_accuracy_at"] else "" for t in SHOWN]
        where = re.search(r"round \d+", s["diverged"])
        lines.append(f"| {s['algorithm']} | {s['placement']} | {s['local_epochs']} | {s['rounds']} | {s['lr']} | "
                     + " | ".join(cells) + f" | {where.group(0) if where else ''} |")
    write_page(
        out, "invariance_budget",
        "Equal client sizes, 15 of 53 clients per round, batch 64, one replicate (seed 0); train accuracy of the "
        "global model on the training environments.\n\n" + "\n".join(lines) + "\n")
    write_sidecar(out / "invariance_budget.csv", {"probes": summary, "provenance": [collect(started, finished=True)]})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
