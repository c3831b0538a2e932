"""Compare aggregation rules by how the correlation between clients evolves.

For FedAvg, coordinate-wise median, AND-mask and geometric mask (the last two applied to
the clients' model updates at the server, threshold 0.2): the same federated run on
digits (3 clients, Dirichlet(0.5) non-IID partition, every client every round, E = 1,
B = 10, an MLP with 32 hidden units), repeated R times with different seeds. Every
client's local model after each round is recorded (the last layer, 330 parameters), and
`mianalysis.analyze` gives the MI between clients (Gaussian and KSG, with permutation
nulls) and the three distances per round, each with its confidence interval; the summary's
``trends`` say per rule, quantity and client pair whether it rises or falls, from the paired
intervals of the change between rounds (never from comparing point estimates).

    python experiments/aggregator_trends.py --quick   # 150 replicates, 6 rounds
    python experiments/aggregator_trends.py           # 500 replicates, 10 rounds

Writes figures/aggregator_trends{_quick}.png (one panel per quantity, a line per rule,
averaged over the three client pairs; MI panels show the permutation null as a dotted
line), the analysis table per rule (.csv) and the per-round accuracy.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from mianalysis._provenance import collect, utc_now
from mianalysis.analysis import analyze, select, write_table
from mianalysis.experiment import TRENDS, overall_trend, step_verdicts
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates

ROOT = Path(__file__).resolve().parents[1]
RULES = {"fedavg": {}, "median": {}, "and_mask": {"threshold": 0.2}, "geometric_mask": {"threshold": 0.2}}
QUANTITIES = ["mi_gaussian", "mi_ksg", "euclidean", "manhattan", "chebyshev"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", default=str(ROOT / "runs"))
    args = parser.parse_args()
    started = utc_now()
    replicates, rounds, perms = (150, 6, 10) if args.quick else (500, 10, 20)
    suffix = "_quick" if args.quick else ""
    data = FederatedData.digits(3, "dirichlet", seed=0, alpha=0.5)
    tables, accuracy, timing, dumps = {}, {}, {}, {}
    for rule, params in RULES.items():
        start = time.perf_counter()
        cfg = FederatedConfig(rounds=rounds, client_fraction=1.0, local_epochs=1, batch_size=10, lr=0.05,
                              aggregator=rule, aggregator_params=params)
        sim = FederatedSimulation("mlp", data, cfg, replicates=replicates, seed=0, hidden=32)
        dump, history = record_replicates(sim, Path(args.work) / f"aggregator_trends{suffix}_{rule}",
                                          chunk_size=250, layer="5", progress=False)
        rows = analyze(dump, permutations=perms, random_state=0)
        write_table(rows, ROOT / "figures" / f"aggregator_trends{suffix}_{rule}.csv")
        tables[rule] = rows
        dumps[rule] = dump.provenance
        accuracy[rule] = [float(np.mean(dump.metric("0", "test_accuracy")[t])) for t in range(rounds + 1)]
        timing[rule] = round(time.perf_counter() - start, 1)
        print(f"{rule}: {timing[rule]} s, final test accuracy {accuracy[rule][-1]:.3f}", flush=True)
    plot(tables, accuracy, ROOT / "figures" / f"aggregator_trends{suffix}.png",
         f"{replicates} replicate runs, 3 clients, last layer (330 parameters)")
    summary = {"replicates": replicates, "rounds": rounds, "permutations": perms, "seconds": timing,
               "final_test_accuracy": {r: a[-1] for r, a in accuracy.items()},
               "partition_sizes": data.sizes().tolist(),
               "provenance": [collect(started, finished=True)], "dump_provenance": dumps}
    summary["trends_from"] = TRENDS + " (verdict per client pair over the rounds after the first)"
    for rule, rows in tables.items():
        for q in QUANTITIES:
            series = _pair_mean(rows, q)
            summary.setdefault("first_last", {}).setdefault(rule, {})[q] = [series[1][1], series[-1][1]]
            summary.setdefault("trends", {}).setdefault(rule, {})[q] = {
                f"{a}-{b}": overall_trend(v for _, v in step_verdicts(rows, q, a, b))
                for a, b in sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})}
    (ROOT / "figures" / f"aggregator_trends{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["first_last"], indent=1))
    print("trends,", summary["trends_from"] + ":", json.dumps(summary["trends"], indent=1))


def _pair_mean(rows, quantity, key="value"):
    """[(round, mean over client pairs)] for a quantity."""
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})
    series = [select(rows, quantity, a, b) for a, b in pairs]
    return [(s0["iteration"], float(np.mean([s[i][key] for s in series]))) for i, s0 in enumerate(series[0])]


def plot(tables, accuracy, path, subtitle):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    titles = {"mi_gaussian": "MI, Gaussian (bits)", "mi_ksg": "MI, KSG (bits)", "euclidean": "Euclidean distance",
              "manhattan": "Manhattan distance", "chebyshev": "Chebyshev distance"}
    for ax, q in zip(axes.flat, QUANTITIES):
        for rule, rows in tables.items():
            pts = [(t, v) for t, v in _pair_mean(rows, q) if t > 0 and np.isfinite(v)]
            line, = ax.plot(*zip(*pts), marker="o", ms=3, label=rule)
            if q.startswith("mi_"):
                null = [(t, v) for t, v in _pair_mean(rows, q, "null_mean") if t > 0 and np.isfinite(v)]
                if null:
                    ax.plot(*zip(*null), ls=":", color=line.get_color(), lw=1)
        ax.set_title(titles[q])
        ax.set_xlabel("round")
        ax.legend(fontsize=7)
    ax = axes.flat[5]
    for rule, acc in accuracy.items():
        ax.plot(range(len(acc)), acc, marker="o", ms=3, label=rule)
    ax.set_title("global test accuracy")
    ax.set_xlabel("round")
    ax.legend(fontsize=7)
    fig.suptitle(f"Aggregation rules compared by correlation between clients ({subtitle})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
