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

What the aggregation itself leaves: the server's global model is recorded too (client
"global" of each dump: at checkpoint t the model after round t, so round t started from
checkpoint t - 1). That MI is dominated by each replicate's shared global model, so per
rule, round and client pair `mianalysis.analysis.studies.global_dependence.dependence_given_global` gives,
on the output layer's bias, the Gaussian MI of the local models, their conditional MI
given the global model the round started from (`gaussian_cmi`) and the MI of the clients'
updates (local model minus that global model). The bias is used because the estimate then
needs no shrinkage: 150 replicates against 3 x 9 joint dimensions (the 330-parameter layer
would need 990 and shrinkage, which biases the estimate). Its 10 entries are centred (the
bias minus its mean over classes, first 9 entries kept): a softmax cross-entropy gradient
sums to zero over the classes, so the bias's sum over classes is the same in every client's
local model as in the global model the round started from (up to float32 rounding), a shared
exact function that makes the Gaussian MI of the raw bias infinite in truth and its
covariances singular. Centring removes exactly that direction; MI does not depend on which
basis of the remaining 9 is used.

    python experiments/aggregator_trends.py --quick   # 150 replicates, 6 rounds
    python experiments/aggregator_trends.py           # 500 replicates, 10 rounds

Writes figures/aggregator_trends/aggregator_trends{_quick}.png (one panel per quantity, a line per rule,
averaged over the three client pairs; MI panels show the permutation null as a dotted
line), the analysis table per rule (.csv; it also holds each client's rows with "global"),
the per-round accuracy, and figures/aggregator_trends/aggregator_trends{_quick}_global.{png,csv} (the three
output-bias quantities per rule, round and client pair, each with its Wishart standard error,
95 % normal interval and analytic Wilks' Lambda null: ``se``, ``ci_low``, ``ci_high``,
``null_mean``, ``null_std``, ``p_value``; the figure draws the mean over pairs, the range
of the pairs' intervals and the null band).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _aggregator_trends_figure import (CI_LEVEL, QUANTITIES, RULES, accuracy_from_table, global_pair_mean, pair_mean,
                                       plot, plot_global)
from _results import figures_of, WORK, portable_sidecar
from _runner import LEGACY_ESTIMATORS  # the estimators of the committed tables

from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import AnalysisTable, analyze
from mianalysis.report.experiment import TRENDS, overall_trend, step_verdicts
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates, write_rows
from mianalysis.analysis.studies.global_dependence import QUANTITIES as GLOBAL_QUANTITIES
from mianalysis.analysis.studies.global_dependence import dependence_given_global

FIGURES = figures_of(__file__)  # figures/aggregator_trends/: where this script writes


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", default=str(WORK))
    args = parser.parse_args()
    started = utc_now()
    replicates, rounds, perms = (150, 6, 10) if args.quick else (500, 10, 20)
    suffix = "_quick" if args.quick else ""
    data = FederatedData.digits(3, "dirichlet", seed=0, alpha=0.5)
    tables, accuracy, timing, dumps, given_global = {}, {}, {}, {}, {}
    for rule, params in RULES.items():
        start = time.perf_counter()
        cfg = FederatedConfig(rounds=rounds, client_fraction=1.0, local_epochs=1, batch_size=10, lr=0.05,
                              aggregator=rule, aggregator_params=params)
        sim = FederatedSimulation("mlp", data, cfg, replicates=replicates, seed=0, hidden=32)
        dump, history = record_replicates(sim, Path(args.work) / f"aggregator_trends{suffix}_{rule}",
                                          chunk_size=250, layer="5", progress=False, record_global=True)
        rows = analyze(dump, estimators=LEGACY_ESTIMATORS, n_permutations=perms, random_state=0)
        rows.write(FIGURES / f"aggregator_trends{suffix}_{rule}.csv")
        portable_sidecar(FIGURES / f"aggregator_trends{suffix}_{rule}.csv")  # the dump as runs/..., not absolute
        tables[rule] = rows
        given_global[rule] = [{"rule": rule, **r} for r in dependence_given_global(
            *_centred_bias(dump, data.n_clients), units="bits", ci_level=CI_LEVEL, null="analytic")]
        dumps[rule] = dump.provenance
        accuracy[rule] = [float(np.mean(dump.metric("0", "test_accuracy")[t])) for t in range(rounds + 1)]
        timing[rule] = round(time.perf_counter() - start, 1)
        print(f"{rule}: {timing[rule]} s, final test accuracy {accuracy[rule][-1]:.3f}", flush=True)
    plot(tables, {rule: accuracy_from_table(rows) for rule, rows in tables.items()},
         FIGURES / f"aggregator_trends{suffix}.png",
         f"{replicates} replicate runs, 3 clients, last layer (330 parameters)")
    global_rows = [r for rule in RULES for r in given_global[rule]]
    write_rows(global_rows, FIGURES / f"aggregator_trends{suffix}_global.csv")
    plot_global(given_global, FIGURES / f"aggregator_trends{suffix}_global.png",
                f"{replicates} replicate runs, 3 clients, output bias centred (9 dimensions), Gaussian estimator")
    summary = {"replicates": replicates, "rounds": rounds, "permutations": perms, "seconds": timing,
               "final_test_accuracy": {r: a[-1] for r, a in accuracy.items()},
               "partition_sizes": data.sizes().tolist(),
               "provenance": [collect(started, finished=True)], "dump_provenance": dumps}
    summary["trends_from"] = TRENDS + " (verdict per client pair over the rounds after the first)"
    for rule, rows in tables.items():
        for q in QUANTITIES:
            series = pair_mean(rows, q)
            summary.setdefault("first_last", {}).setdefault(rule, {})[q] = [series[1][1], series[-1][1]]
            summary.setdefault("trends", {}).setdefault(rule, {})[q] = {
                f"{a}-{b}": overall_trend(v for _, v in step_verdicts(rows, q, a, b))
                for a, b in sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})}
    for rule, rows in given_global.items():
        for q in GLOBAL_QUANTITIES:
            series = global_pair_mean(rows, q)
            summary.setdefault("output_bias_first_last", {}).setdefault(rule, {})[q] = [series[0][1], series[-1][1]]
    (FIGURES / f"aggregator_trends{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["first_last"], indent=1))
    print(json.dumps(summary["output_bias_first_last"], indent=1))
    print("trends,", summary["trends_from"] + ":", json.dumps(summary["trends"], indent=1))


def _centred_bias(dump, n_clients):
    """(local, global_model) for dependence_given_global: the output bias of every
    recorded checkpoint minus its mean over classes, first n_classes - 1 entries (see the
    module docstring), as (n_checkpoints, n_runs, n_classes - 1) arrays."""
    def centred(client):
        b = np.stack([dump.samples(client, iteration=t, layer="5.bias") for t in dump.checkpoints]).astype(np.float64)
        return (b - b.mean(axis=-1, keepdims=True))[..., :-1]

    return {str(c): centred(str(c)) for c in range(n_clients)}, centred("global")


if __name__ == "__main__":
    main()
