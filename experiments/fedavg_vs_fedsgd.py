"""FedSGD vs FedAvg on digits: rounds of communication to reach a target test accuracy.

The shape of McMahan et al. 2017, Table 2: for a CNN and a 2-layer MLP (2NN), IID and
pathological non-IID partitions (sorted by label into 200 shards, each of 100 clients gets
two), C = 0.1, FedSGD (E = 1, B = infinity) and FedAvg over a grid of E and B. For every
configuration the learning rate is the best of a small grid (as McMahan et al. tuned it),
and the result is the mean over replicate runs; a run stops at the round it reaches
the target.

    python experiments/fedavg_vs_fedsgd.py --quick   # MLP, IID, a few configurations
    python experiments/fedavg_vs_fedsgd.py           # both models, both partitions

Writes figures/fedavg_vs_fedsgd{_quick}.md / .csv (the table), .csv.json (provenance:
versions, machine, command line, times) and _accuracy.png.
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from mianalysis._provenance import collect, utc_now
from mianalysis.analysis import sidecar_path
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, rounds_to_accuracy

ROOT = Path(__file__).resolve().parents[1]
TARGET = {"cnn": 0.95, "mlp": 0.93}  # test accuracies both models reach on 8x8 digits
FULL = {
    "models": ["mlp", "cnn"], "partitions": ["iid", "shards"], "rounds": {"fedsgd": 300, "fedavg": 100},
    "grid": [(1, None), (5, None), (1, 10), (5, 10), (20, 10)],
    "lrs": {"fedsgd": [0.5, 2.0], "fedavg": [0.1, 0.5]}, "replicates": 2,
}
QUICK = {
    "models": ["mlp"], "partitions": ["iid"], "rounds": {"fedsgd": 150, "fedavg": 40},
    "grid": [(1, 10), (5, 10)], "lrs": {"fedsgd": [1.0], "fedavg": [0.3]}, "replicates": 1,
}


def run_config(model, data, algorithm, epochs, batch, lr, rounds, replicates):
    cfg = FederatedConfig(rounds=rounds, client_fraction=0.1, local_epochs=epochs, batch_size=batch, lr=lr,
                          algorithm=algorithm, aggregator="fedavg")
    history = FederatedSimulation(model, data, cfg, replicates=replicates, seed=0).run(
        stop_at_accuracy=TARGET[model]).history
    last = max(h["round"] for h in history)
    curve = [float(np.mean([h["test_accuracy"] for h in history if h["round"] == t])) for t in range(last + 1)]
    return cfg, history, curve


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    started = utc_now()
    plan = QUICK if args.quick else FULL
    suffix = "_quick" if args.quick else ""
    rows, curves = [], {}
    start_all = time.perf_counter()
    for partition in plan["partitions"]:
        data = FederatedData.digits(100, partition, seed=0)
        n_mean = float(np.mean(data.sizes()))
        for model in plan["models"]:
            configs = [("fedsgd", 1, None)] + [("fedavg", e, b) for e, b in plan["grid"]]
            base = None
            for algorithm, epochs, batch in configs:
                best = None
                for lr in plan["lrs"][algorithm]:
                    start = time.perf_counter()
                    try:
                        cfg, history, curve = run_config(model, data, algorithm, epochs, batch, lr,
                                                         plan["rounds"][algorithm], plan["replicates"])
                    except ValueError as exc:  # diverged at this learning rate
                        print(f"{partition} {model} {algorithm} E={epochs} B={batch} lr={lr}: {exc}", flush=True)
                        continue
                    reached = rounds_to_accuracy(history, TARGET[model])
                    key = (reached if reached is not None else np.inf, -curve[-1])  # fewest rounds, then accuracy
                    if best is None or key < best[0]:
                        best = (key, lr, reached, curve, time.perf_counter() - start, cfg)
                if best is None:
                    rows.append({"partition": partition, "model": model, "algorithm": algorithm, "E": epochs,
                                 "B": "inf" if batch is None else batch, "u": "", "lr": "all diverged",
                                 "target": TARGET[model], "rounds": "", "max_rounds": plan["rounds"][algorithm],
                                 "final_accuracy": float("nan"), "speedup_vs_fedsgd": "", "seconds": ""})
                    continue
                _, lr, reached, curve, seconds, cfg = best
                if algorithm == "fedsgd":
                    base = reached
                label = f"{algorithm} E={epochs} B={'inf' if batch is None else batch}"
                curves[(partition, model, label)] = curve
                speedup = (base / reached) if (base and reached) else None
                row = {"partition": partition, "model": model, "algorithm": algorithm, "E": epochs,
                       "B": "inf" if batch is None else batch, "u": round(cfg.updates_per_round(n_mean), 1),
                       "lr": lr, "target": TARGET[model], "rounds": reached if reached is not None else "",
                       "max_rounds": cfg.rounds, "final_accuracy": round(curve[-1], 4),
                       "speedup_vs_fedsgd": round(speedup, 1) if speedup else "", "seconds": round(seconds, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            # partial results survive
            write_results(rows, curves, plan, suffix, time.perf_counter() - start_all, started)


def write_results(rows, curves, plan, suffix, seconds, started):
    out = ROOT / "figures"
    out.mkdir(exist_ok=True)
    with open(out / f"fedavg_vs_fedsgd{suffix}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    sidecar_path(out / f"fedavg_vs_fedsgd{suffix}.csv").write_text(json.dumps(
        {"table": f"fedavg_vs_fedsgd{suffix}.csv", "plan": plan,
         "provenance": [collect(started, finished=True)]}, indent=1) + "\n")
    lines = ["| partition | model | algorithm | E | B | u | lr | rounds to target | speedup vs FedSGD |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rounds = r["rounds"] if r["rounds"] != "" else f"> {r['max_rounds']} (final {r['final_accuracy']:.3f})"
        lines.append(f"| {r['partition']} | {r['model']} | {r['algorithm']} | {r['E']} | {r['B']} | {r['u']} | "
                     f"{r['lr']} | {rounds} | {r['speedup_vs_fedsgd'] or '-'} |")
    table = "\n".join(lines)
    (out / f"fedavg_vs_fedsgd{suffix}.md").write_text(
        f"Targets: CNN {TARGET['cnn']}, MLP {TARGET['mlp']} test accuracy; C = 0.1, 100 clients; "
        f"{plan['replicates']} replicate(s) per configuration; {seconds:.0f} s so far.\n\n"
        + table + "\n")
    print(table)
    # the curves, so that the figure can be redrawn without training (experiments/replot.py)
    (out / f"fedavg_vs_fedsgd{suffix}_curves.json").write_text(json.dumps(
        [{"partition": p, "model": m, "label": label, "accuracy": list(map(float, c))}
         for (p, m, label), c in curves.items()]) + "\n")
    plot(curves, out / f"fedavg_vs_fedsgd{suffix}_accuracy.png", plan)


def plot(curves, path, plan=None):
    """Test accuracy per communication round of every configuration, one panel per model and
    partition, the target accuracy as a dashed black line in the legend.

    Parameters
    ----------
    curves : dict of (partition, model, label) to list of float
    path : path-like
    plan : dict, optional
        The experiment's plan (replicates), for the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(p, m) for p, m, _ in curves})
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.2), squeeze=False)
    for ax, (partition, model) in zip(axes[0], panels):
        for (p, m, label), curve in curves.items():
            if (p, m) == (partition, model):
                ax.plot(range(len(curve)), curve, label=label, lw=1.5)
        ax.axhline(TARGET[model], color="k", ls="--", lw=1, label=f"target {TARGET[model]}")
        ax.set_title(f"{model.upper()}, {'IID' if partition == 'iid' else 'non-IID (2 shards per client)'}",
                     fontsize=13)
        ax.set_xlabel("communication round", fontsize=12)
        ax.set_ylabel("test accuracy", fontsize=12)
        ax.tick_params(labelsize=11)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=10, loc="lower right")
    reps = f"mean over {plan['replicates']} replicate runs" if plan and "replicates" in plan else "replicate mean"
    fig.suptitle(f"FedSGD vs FedAvg on digits: 100 clients, C = 0.1, best learning rate per configuration; {reps}",
                 fontsize=13)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
