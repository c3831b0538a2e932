"""Is averaging the right way to combine the clients? FedAvg against rules a federation can run.

On the 8x8 digits federations of the simulator (10 clients, all of them every round; an
IID split and McMahan et al.'s pathological non-IID split, two label-sorted shards per
client), FedAvg's plain weighted mean of the client models is compared with

- the AND-mask on the model updates (threshold 0.2), with and without its rescaling;
- "fisher": diagonal Fisher merging (Matena & Raffel 2022): every client also sends its
  diagonal empirical Fisher at its final local model, the server weights each coordinate
  by it;
- "inverse_variance": the diagonal form of FedPA (Al-Shedivat et al. 2021): every client
  also sends the variance of its local iterates over its last local epoch.

Nothing uses a reference model or an oracle: each rule uses only what the clients compute
on their own data. 20 % of the training examples are held out as a validation split
(stratified, before the split between clients; `FederatedData.digits(validation=0.2)`).
Every rule's learning rate is tuned on one log-spaced ladder by the validation split only
(the best final mean validation accuracy over the tuning seeds, the simulator's seed 1;
ties: lower validation loss); the chosen rate is then rerun on the evaluation seeds, seed 0,
and the table's numbers are of the test split, which no choice looked at), starting from two
neighbouring rungs and stepping outwards while the best rate is at the edge of the rates
tried, so that the chosen rate has a worse (or failed) neighbour on both sides; a rate
at the end of the ladder is flagged in the table. A rate fails where training diverged
or did not train (final mean validation loss not below 0.9 times the initial model's; 0.99
in the 3 rounds of --quick); where every rate
tried failed, the search steps up the ladder from a highest rate too small (a validation
loss that fell too little), else down (from a rate too large: diverged, or a validation loss
that rose), until one trains. (The search of
experiments/fedavg_vs_fedsgd.py cuts runs at the round the best so far reached its target,
which would not give every rule the same number of rounds, hence this one; it is
experiments/_ladder.py's, shared with experiments/aggregation_headroom_quadratic.py.)

Seeds are the simulator's replicates: replicate r has the same initial model and the same
per-client data order generators under every rule, so differences to FedAvg are paired by
seed; the table gives each rule's mean over seeds and the paired t interval (95 %, over
seeds) of its difference to FedAvg in final test loss, final test accuracy and rounds to
the target accuracy (over the seeds where both reached it; blank where fewer than half
the seeds give such a pair).

    python experiments/aggregation_headroom.py --quick    # IID only, tiny, under a minute
    python experiments/aggregation_headroom.py            # both partitions, 3 seeds

Writes figures/aggregation_headroom/aggregation_headroom{_quick}.csv (the table), .png (test accuracy per
round at each rule's chosen rate; the paired differences with their intervals) and
.csv.json (the plan, every rate tried, per-seed results, provenance), and the page
docs/results/tables/aggregation_headroom{_quick}.md (with --out DIR: all of them into DIR).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from _ladder import (DidNotTrain, Diverged, command_line, first_round, interval, paired_columns, read_results,
                     tune_rule)
from _results import figures_of, write_csv, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation

FIGURES = figures_of(__file__)  # figures/aggregation_headroom/: where this script writes

RULES = [  # (label, aggregator, parameters)
    ("FedAvg", "fedavg", {}),
    ("AND-mask (rescale)", "and_mask", {"threshold": 0.2, "rescale": True}),
    ("AND-mask (no rescale)", "and_mask", {"threshold": 0.2, "rescale": False}),
    ("Fisher", "fisher", {}),
    ("Inverse variance", "inverse_variance", {}),
]
FULL = {"partitions": ["iid", "shards"], "n_clients": 10, "rounds": 20, "local_epochs": 1, "batch_size": 20,
        "hidden": 32, "seeds": 3, "target": {"iid": 0.85, "shards": 0.7}, "trained_below": 0.9,
        "ladder": [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0], "start": [0.5, 1.0], "validation": 0.2}
QUICK = {"partitions": ["iid"], "n_clients": 5, "rounds": 3, "local_epochs": 1, "batch_size": 50, "hidden": 8,
         "seeds": 3, "target": {"iid": 0.3}, "trained_below": 0.99, "ladder": [0.1, 0.2, 0.5, 1.0, 2.0, 5.0], "start": [1.0, 2.0],
         "validation": 0.2}
COLUMNS = ["partition", "rule", "aggregator", "params", "lr", "lr_choice", "lrs_tried", "seeds", "rounds",
           "final_test_loss", "final_test_accuracy", "target", "rounds_to_target", "seeds_reached",
           "d_loss", "d_loss_low", "d_loss_high", "d_accuracy", "d_accuracy_low", "d_accuracy_high",
           "d_rounds", "d_rounds_low", "d_rounds_high", "pairs_rounds", "seconds"]


def run_rule(data, aggregator, params, lr, seed, plan):
    """Per-seed test and validation loss and accuracy per round: {"loss", "acc", "val_loss",
    "val_acc"}, arrays (seeds, rounds + 1), the simulator's replicates of `seed` (1: the
    search's, 0: the table's); Diverged or DidNotTrain where the rate fails (judged on the
    validation split)."""
    cfg = FederatedConfig(rounds=plan["rounds"], client_fraction=1.0, local_epochs=plan["local_epochs"],
                          batch_size=plan["batch_size"], lr=lr, aggregator=aggregator, aggregator_params=params)
    sim = FederatedSimulation("mlp", data, cfg, replicates=plan["seeds"], seed=seed, hidden=plan["hidden"])
    history = sim.run().history
    out = {key: np.full((plan["seeds"], plan["rounds"] + 1), np.nan) for key in ("loss", "acc", "val_loss", "val_acc")}
    for h in history:
        for key, column in (("loss", "test_loss"), ("acc", "test_accuracy"), ("val_loss", "val_loss"),
                            ("val_acc", "val_accuracy")):
            out[key][h["replicate"], h["round"]] = h[column]
    if not all(np.isfinite(v).all() for v in out.values()):
        raise Diverged(f"training diverged at lr {lr}: a loss is not finite")
    val = out["val_loss"]
    if val[:, -1].mean() >= plan["trained_below"] * val[:, 0].mean():
        # a loss that rose is a rate too large (the search steps down), one that fell too little too small (up)
        kind = DidNotTrain if val[:, -1].mean() < val[:, 0].mean() else Diverged
        raise kind(f"did not train at lr {lr}: the final mean validation loss {val[:, -1].mean():.3f} is not below "
                   f"{plan['trained_below']} times the initial model's {val[:, 0].mean():.3f}")
    return out


def score(result):
    """The search's ranking of a rate: the final mean validation accuracy over seeds, then the
    lower validation loss (never the test split)."""
    return result["val_acc"][:, -1].mean(), -result["val_loss"][:, -1].mean()


def summary(result):
    """What the sidecar records of every rate tried on the search's seeds (NaN for a rate that
    failed): the validation split's numbers the choice was made from."""
    if result is None:
        return {"final_val_accuracy": float("nan"), "final_val_loss": float("nan")}
    return {"final_val_accuracy": float(result["val_acc"][:, -1].mean()),
            "final_val_loss": float(result["val_loss"][:, -1].mean())}


def rounds_to(acc, target):
    """Per seed: the first round whose test accuracy reaches `target` (nan if none)."""
    return first_round(acc >= target)


def main(argv=None):
    args, name, out = command_line(argv, __doc__, "aggregation_headroom", figures=FIGURES,
                                   quick_help="IID only, a tiny model and 3 rounds (under a minute)")
    started = utc_now()
    plan = QUICK if args.quick else FULL
    if args.replot:
        return replot(out, name)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves, searches, per_seed = [], {}, [], []
    start_all = time.perf_counter()
    for partition in plan["partitions"]:
        data = FederatedData.digits(plan["n_clients"], partition, seed=0, validation=plan["validation"])
        base = None
        for label, aggregator, params in RULES:
            best, row = tune_rule(
                lambda lr, seed: run_rule(data, aggregator, params, lr, seed, plan), plan, score=score,
                summary=summary, columns=COLUMNS, fields={"partition": partition, "rule": label}, searches=searches,
                describe=lambda t: (f"{partition} {label} lr={t['lr']}: validation accuracy "
                                    f"{t['final_val_accuracy']:.3f} loss {t['final_val_loss']:.3f} {t['diverged']}"))
            row.update({"aggregator": aggregator, "params": json.dumps(params), "seeds": plan["seeds"],
                        "rounds": plan["rounds"], "target": plan["target"][partition]})
            if best is None:
                rows.append(row)
                continue
            loss, acc = best["loss"], best["acc"]
            target = plan["target"][partition]
            reach = rounds_to(acc, target)
            if aggregator == "fedavg" and base is None:
                base = (loss, acc, reach)
            curves[(partition, label)] = acc.tolist()  # per seed
            row.update({"lr": best["lr"], "final_test_loss": round(float(loss[:, -1].mean()), 4),
                        "final_test_accuracy": round(float(acc[:, -1].mean()), 4),
                        "rounds_to_target": round(float(np.nanmean(reach)), 1) if np.isfinite(reach).any() else "",
                        "seeds_reached": int(np.isfinite(reach).sum())})
            if base is not None:
                paired_columns(row, "d_loss", loss[:, -1] - base[0][:, -1], 4)
                paired_columns(row, "d_accuracy", acc[:, -1] - base[1][:, -1], 4)
                paired_columns(row, "d_rounds", reach - base[2], 4, min_pairs=plan["seeds"] / 2,
                               pairs_key="pairs_rounds")
            for s in range(plan["seeds"]):
                per_seed.append({"partition": partition, "rule": label, "lr": best["lr"], "seed": s,
                                 "final_test_loss": float(loss[s, -1]), "final_test_accuracy": float(acc[s, -1]),
                                 "rounds_to_target": None if np.isnan(reach[s]) else int(reach[s])})
            rows.append(row)
            print(json.dumps(row), flush=True)
        write_results(out, name, rows, curves, searches, per_seed, plan, time.perf_counter() - start_all, started)


def write_results(out, name, rows, curves, searches, per_seed, plan, seconds, started):
    table = write_csv(rows, out / f"{name}.csv", fieldnames=COLUMNS)
    write_sidecar(table, {
        "table": table.name, "plan": plan, "rules": [{"rule": r[0], "aggregator": r[1], "params": r[2]} for r in RULES],
        "lr_search": searches, "per_seed": per_seed,
        "curves": [{"partition": p, "rule": r, "test_accuracy_per_seed": c} for (p, r), c in curves.items()],
        "seconds": round(seconds, 1), "provenance": [collect(started, finished=True)]})

    lines = ["| partition | rule | lr (tried) | final test loss | Δ loss vs FedAvg | final test accuracy | "
             "Δ accuracy vs FedAvg | rounds to target (seeds reached) | Δ rounds (pairs) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if r["lr_choice"] == "interior" else f" **{r['lr_choice']}**"
        rounds = (f"{r['rounds_to_target'] if r['rounds_to_target'] != '' else '-'} "
                  f"({r['seeds_reached']}/{r['seeds']})" if r["lr"] != "" else "-")
        lines.append(f"| {r['partition']} | {r['rule']} | {r['lr']}{flag} ({r['lrs_tried']}) | "
                     f"{r['final_test_loss'] if r['lr'] != '' else '-'} | {interval(r, 'd_loss', 3)} | "
                     f"{r['final_test_accuracy'] if r['lr'] != '' else '-'} | {interval(r, 'd_accuracy', 3)} | "
                     f"{rounds} | {interval(r, 'd_rounds', 3)} ({r['pairs_rounds'] or 0}) |")
    write_page(
        out, name,
        f"8x8 digits, {plan['n_clients']} clients (all every round), MLP with {plan['hidden']} hidden units, "
        f"{plan['rounds']} rounds of E = {plan['local_epochs']} local epoch(s), B = {plan['batch_size']}; "
        f"{plan['seeds']} seeds (the simulator's replicates: the same initial model and data order under every "
        f"rule). {100 * plan.get('validation', 0):.0f} % of the training examples are a validation split, held "
        f"out before the split between clients. Each rule's learning rate is the best final mean validation "
        f"accuracy on the ladder {plan['ladder']}, "
        f"searched until it is interior (flagged where it is at an end) on {plan['seeds']} separate tuning seeds "
        f"(the simulator's seed 1); every number below is of the chosen rate rerun on the evaluation seeds "
        f"(seed 0), on the test split, which no choice looked at. Δ: the rule minus FedAvg, paired by seed, "
        f"mean and 95 % t interval over seeds; rounds to the target test accuracy (IID "
        f"{plan['target'].get('iid', '-')}, non-IID {plan['target'].get('shards', '-')}) over the seeds where both "
        f"reached it (Δ rounds '-' where fewer than half the seeds give such a pair). {seconds:.0f} s so far.\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, curves, out / f"{name}.png", plan)


def replot(out, name):
    """The figure again from the written table and sidecar (no training)."""
    rows, curves, plan = read_results(out, name, floats="d_accuracy", curve_keys=("partition", "rule"),
                                      curve_values="test_accuracy_per_seed")
    plot(rows, curves, out / f"{name}.png", plan)


def plot(rows, curves, path, plan):
    """Top: mean test accuracy per round of every rule at its chosen rate, one panel per
    partition. Bottom: the paired difference to FedAvg in final test accuracy, with its
    t interval over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = list(dict.fromkeys(p for p, _ in curves))
    labels = [r[0] for r in RULES]
    colours = {label: ("k" if i == 0 else plt.cm.tab10(i)) for i, label in enumerate(labels)}
    fig, axes = plt.subplots(2, len(partitions), figsize=(6.5 * len(partitions), 8.5), squeeze=False)
    for col, partition in enumerate(partitions):
        ax = axes[0, col]
        for label in labels:
            if (partition, label) in curves:
                lr = next(r["lr"] for r in rows if r["partition"] == partition and r["rule"] == label)
                ax.plot(np.mean(curves[(partition, label)], axis=0), color=colours[label], lw=2.2 if label == "FedAvg" else 1.6,
                        ls="--" if label == "FedAvg" else "-", label=f"{label} (lr {lr})")
        target = plan["target"][partition]
        ax.axhline(target, color="tab:red", ls=":", lw=1.2, label=f"target {target}")
        ax.set_title("IID" if partition == "iid" else "non-IID (2 label shards per client)", fontsize=13)
        ax.set_xlabel("communication round", fontsize=12)
        ax.set_ylabel(f"test accuracy (mean of {plan['seeds']} seeds)", fontsize=12)
        ax.set_ylim(0, 1)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=9, loc="best")
        ax = axes[1, col]
        mine = [r for r in rows if r["partition"] == partition and r["rule"] != "FedAvg" and r["d_accuracy"] != ""]
        for i, r in enumerate(mine):
            low, high = r["d_accuracy_low"], r["d_accuracy_high"]
            err = None if low == "" or not np.isfinite(low) else [[r["d_accuracy"] - low], [high - r["d_accuracy"]]]
            ax.errorbar([i], [r["d_accuracy"]], yerr=err, fmt="o", color=colours[r["rule"]], capsize=5, ms=7)
        ax.axhline(0, color="k", lw=1)
        failed = [r["rule"] for r in rows if r["partition"] == partition and r["lr"] == ""]
        if failed:
            ax.text(0.02, 0.03, "no rate trained (not shown): " + ", ".join(failed), transform=ax.transAxes,
                    fontsize=10, color="0.3")
        ax.set_xticks(range(len(mine)))
        ax.set_xticklabels([r["rule"].replace(" (", "\n(") for r in mine], fontsize=10)
        ax.set_ylabel("final test accuracy minus FedAvg's\n(paired by seed, 95 % t interval)", fontsize=11)
    fig.suptitle(f"Combining {plan['n_clients']} digits clients: FedAvg vs AND-mask,\nFisher and inverse-variance "
                 f"weighting (MLP {plan['hidden']} hidden, {plan['rounds']} rounds,\nE = {plan['local_epochs']}, "
                 f"B = {plan['batch_size']}, each rule's learning rate chosen on a validation split)", fontsize=13 if len(partitions) > 1
                 else 11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
