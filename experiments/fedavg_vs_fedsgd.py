"""FedSGD vs FedAvg on digits: rounds of communication to reach a target test accuracy.

The shape of McMahan et al. 2017, Table 2: for a CNN and a 2-layer MLP (2NN), IID and
pathological non-IID partitions (sorted by label into 200 shards, each of 100 clients gets
two), C = 0.1, FedSGD (E = 1, B = infinity) and FedAvg over a grid of E and B. For every
configuration the learning rate is the best of a small grid (as McMahan et al. tuned it),
and the result is the mean over replicate runs; a run stops at the round it reaches
the target.

    python experiments/fedavg_vs_fedsgd.py --quick   # MLP, IID, a few configurations
    python experiments/fedavg_vs_fedsgd.py           # both models, both partitions
    python experiments/fedavg_vs_fedsgd.py --at-table-rates  # the table's rates only: curves per replicate

Writes figures/fedavg_vs_fedsgd/fedavg_vs_fedsgd{_quick}.csv (the table), .csv.json (provenance:
versions, machine, command line, times), _lr_search.csv, _curves.json and _accuracy.png,
and the page docs/results/tables/fedavg_vs_fedsgd{_quick}.md.
"""

import argparse
import json
import time

import numpy as np
from _fedavg_vs_fedsgd_figure import TARGET, plot
from _results import figures_of, write_csv, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, rounds_to_accuracy

FIGURES = figures_of(__file__)  # figures/fedavg_vs_fedsgd/: where this script writes

# Learning rates are searched on one log-spaced ladder: each configuration starts from two
# neighbouring rungs and steps outwards while the best rate sits at the edge of the rates tried,
# so the chosen rate has a tried (or diverged) neighbour on both sides unless the ladder ends.
LADDER = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]
FULL = {
    "models": ["mlp", "cnn"], "partitions": ["iid", "shards"], "rounds": 300,
    "grid": [(1, None), (5, None), (1, 10), (5, 10), (20, 10)],
    "start_lrs": {"fedsgd": [0.5, 1.0], "fedavg": [0.2, 0.5]}, "replicates": 2,
}
QUICK = {
    "models": ["mlp"], "partitions": ["iid"], "rounds": 150,
    "grid": [(1, 10), (5, 10)], "start_lrs": {"fedsgd": [0.5, 1.0], "fedavg": [0.2, 0.5]}, "replicates": 1,
}


def run_config(model, data, algorithm, epochs, batch, lr, rounds, replicates):
    cfg = FederatedConfig(rounds=rounds, client_fraction=0.1, local_epochs=epochs, batch_size=batch, lr=lr,
                          algorithm=algorithm, aggregator="fedavg")
    history = FederatedSimulation(model, data, cfg, replicates=replicates, seed=0).run(
        stop_at_accuracy=TARGET[model]).history
    per_replicate = replicate_curves(history)
    curve = [float(np.mean(values)) for values in zip(*per_replicate.values())]
    return cfg, history, curve, per_replicate


def replicate_curves(history):
    """Each replicate's test accuracy per round, from a simulation's history.

    Parameters
    ----------
    history : list of dict
        Rows with ``round``, ``replicate`` and ``test_accuracy`` (FederatedSimulation's history).

    Returns
    -------
    dict of int to list of float
        Replicate id to its accuracy at rounds 0, 1, ..., the last round logged.

    Raises
    ------
    ValueError
        If a replicate lacks a round the others logged.
    """
    last = max(h["round"] for h in history)
    curves = {}
    for h in history:
        curves.setdefault(int(h["replicate"]), {})[int(h["round"])] = float(h["test_accuracy"])
    missing = [rep for rep, by_round in curves.items() if len(by_round) != last + 1]
    if missing:
        raise ValueError(f"replicates {missing} lack rounds of the history (every replicate needs rounds 0..{last})")
    return {rep: [by_round[t] for t in range(last + 1)] for rep, by_round in sorted(curves.items())}


def search_learning_rate(run, start_lrs, max_rounds, ladder=LADDER):
    """The learning rate of `ladder` that reaches the target in the fewest rounds (then: the
    highest final accuracy), searched outwards from `start_lrs` until the best is interior.

    Parameters
    ----------
    run : callable
        ``run(lr, rounds) -> (reached, curve, extra)``: `reached` the round the target was
        reached (None if not within `rounds`), `curve` the accuracy per round; raises
        ValueError where training diverged.
    start_lrs : list of float
        Neighbouring rungs of `ladder` to try first.
    max_rounds : int
        The round cap, the same for every rate.

    Returns
    -------
    best : dict or None
        ``{"lr", "reached", "curve", "extra"}`` of the best rate; None if every rate diverged.
    tried : list of dict
        One entry per rate tried: lr, reached, final accuracy, rounds run, diverged.

    Notes
    -----
    A rate is run for at most as many rounds as the best so far needed (it cannot win with
    more), so a slow rate costs no more than the winner. A diverged rate closes that side of
    the search.
    """
    results = {}  # index on the ladder -> result, or None where it diverged
    tried = []
    best = None

    def key(res):
        return (res["reached"] if res["reached"] is not None else np.inf, -res["curve"][-1])

    def attempt(i):
        nonlocal best
        lr = ladder[i]
        limit = max_rounds if best is None or best["reached"] is None else best["reached"]
        try:
            reached, curve, extra = run(lr, limit)
        except ValueError as exc:
            results[i] = None
            tried.append({"lr": lr, "reached": "", "final_accuracy": float("nan"), "rounds_run": "",
                          "diverged": str(exc)})
            return
        res = {"lr": lr, "reached": reached, "curve": curve, "extra": extra}
        results[i] = res
        tried.append({"lr": lr, "reached": reached if reached is not None else "",
                      "final_accuracy": round(curve[-1], 4), "rounds_run": len(curve) - 1, "diverged": ""})
        if best is None or key(res) < key(best):
            best = res

    for lr in start_lrs:
        attempt(ladder.index(lr))
    while best is not None:
        i = ladder.index(best["lr"])
        step = [j for j in (i - 1, i + 1) if 0 <= j < len(ladder) and j not in results]
        if not step:
            break
        attempt(step[0])
    if best is None:  # every start diverged: step down the ladder until one trains
        i = min(ladder.index(lr) for lr in start_lrs) - 1
        while best is None and i >= 0:
            attempt(i)
            i -= 1
        if best is not None:
            while True:
                j = ladder.index(best["lr"]) - 1
                if j < 0 or j in results:
                    break
                attempt(j)
    return best, tried


def rerun_at_table_rates(table=None, out=None):
    """Rerun every configuration of the committed table at the learning rate it chose (no
    search), keeping each replicate's accuracy curve; the table itself is left as it is.

    Writes ``fedavg_vs_fedsgd_curves.json`` (mean and per-replicate curves), the figure,
    and ``fedavg_vs_fedsgd_rerun_check.csv`` (+ sidecar): per configuration the table's
    rounds to target and final accuracy beside the rerun's, so that a difference between
    the committed numbers and the code at hand is on record.

    Parameters
    ----------
    table : path-like, optional
        The table; default ``figures/fedavg_vs_fedsgd/fedavg_vs_fedsgd.csv``.
    out : path-like, optional
        Where to write; default the table's folder.

    Raises
    ------
    FileNotFoundError
        If the table or its sidecar (which holds the plan) is missing.
    """
    import csv
    from pathlib import Path

    from _results import sidecar_path

    table = Path(table) if table is not None else FIGURES / "fedavg_vs_fedsgd.csv"
    out = Path(out) if out is not None else table.parent
    if not table.exists() or not sidecar_path(table).exists():
        raise FileNotFoundError(f"--at-table-rates needs the table {table} and its sidecar {sidecar_path(table)}")
    plan = json.loads(sidecar_path(table).read_text())["plan"]
    with open(table, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["lr"] not in ("", "all diverged")]
    rows.sort(key=lambda r: r["model"] == "cnn")  # the cheap MLP configurations first (partial results survive)
    started = utc_now()
    checks, curves, replicates, data = [], {}, {}, {}
    # The curves already stored (the mean of the run that made the table) stand where this
    # rerun has not (yet) replaced them with its own mean and per-replicate curves.
    stored = out / "fedavg_vs_fedsgd_curves.json"
    if stored.exists():
        for c in json.loads(stored.read_text()):
            key = (c["partition"], c["model"], c["label"])
            curves[key] = c["accuracy"]
            if c.get("replicates"):
                replicates[key] = {int(r["replicate"]): r["accuracy"] for r in c["replicates"]}
    for r in rows:
        start = time.perf_counter()
        partition, model, algorithm = r["partition"], r["model"], r["algorithm"]
        epochs, batch, lr = int(r["E"]), None if r["B"] == "inf" else int(r["B"]), float(r["lr"])
        if partition not in data:
            data[partition] = FederatedData.digits(100, partition, seed=0)
        _, history, curve, per_replicate = run_config(model, data[partition], algorithm, epochs, batch, lr,
                                                      int(r["max_rounds"]), plan["replicates"])
        reached = rounds_to_accuracy(history, TARGET[model])
        label = f"{algorithm} E={epochs} B={r['B']}"
        curves[(partition, model, label)] = curve
        replicates[(partition, model, label)] = per_replicate
        final_table = float(r["final_accuracy"])
        checks.append({"partition": partition, "model": model, "configuration": label, "lr": lr,
                       "rounds_table": r["rounds"], "rounds_rerun": reached if reached is not None else "",
                       "final_accuracy_table": final_table, "final_accuracy_rerun": round(curve[-1], 4),
                       "final_accuracy_difference": round(round(curve[-1], 4) - final_table, 4),
                       "same": str(r["rounds"]) == str(reached if reached is not None else "")
                       and round(curve[-1], 4) == final_table,
                       "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(checks[-1]), flush=True)
        check = write_csv(checks, out / "fedavg_vs_fedsgd_rerun_check.csv")  # partial results survive
        write_sidecar(check, {"table": check.name, "of": table.name, "plan": plan,
                              "what": "each configuration of the table rerun at its chosen learning rate "
                                      "(no search), with the plan's replicates and round cap",
                              "provenance": [collect(started, finished=len(checks) == len(rows))]})
        write_curves(curves, replicates, out / "fedavg_vs_fedsgd_curves.json")
    plot(curves, out / "fedavg_vs_fedsgd_accuracy.png", plan, replicates=replicates)
    return checks


def write_curves(curves, replicates, path):
    """The accuracy curves as JSON, so that the figure can be redrawn without training
    (experiments/replot.py): per configuration the replicate mean and each replicate's own
    curve (by replicate id; the simulation's seed is 0)."""
    path.write_text(json.dumps(
        [{"partition": p, "model": m, "label": label, "accuracy": list(map(float, c)), "seed": 0,
          "replicates": [{"replicate": rep, "accuracy": list(map(float, rc))}
                         for rep, rc in replicates.get((p, m, label), {}).items()]}
         for (p, m, label), c in curves.items()]) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--at-table-rates", action="store_true",
                        help="rerun each configuration of figures/fedavg_vs_fedsgd/fedavg_vs_fedsgd.csv at its chosen learning rate "
                             "only (no search): per-replicate curves, the figure and fedavg_vs_fedsgd_rerun_check.csv "
                             "(the table's rounds and final accuracy beside the rerun's); the table is not rewritten")
    args = parser.parse_args()
    if args.at_table_rates:
        if args.quick:
            parser.error("--at-table-rates reruns the full table's configurations; it takes no --quick")
        rerun_at_table_rates()
        return
    started = utc_now()
    plan = QUICK if args.quick else FULL
    suffix = "_quick" if args.quick else ""
    rows, curves, replicates, searches = [], {}, {}, []
    start_all = time.perf_counter()
    for partition in plan["partitions"]:
        data = FederatedData.digits(100, partition, seed=0)
        n_mean = float(np.mean(data.sizes()))
        for model in plan["models"]:
            configs = [("fedsgd", 1, None)] + [("fedavg", e, b) for e, b in plan["grid"]]
            base = None
            for algorithm, epochs, batch in configs:
                start = time.perf_counter()

                def run(lr, rounds):
                    cfg, history, curve, per_replicate = run_config(model, data, algorithm, epochs, batch, lr,
                                                                    rounds, plan["replicates"])
                    return rounds_to_accuracy(history, TARGET[model]), curve, (cfg, per_replicate)

                best, tried = search_learning_rate(run, plan["start_lrs"][algorithm], plan["rounds"])
                seconds = time.perf_counter() - start
                label = f"{algorithm} E={epochs} B={'inf' if batch is None else batch}"
                for t in tried:
                    searches.append({"partition": partition, "model": model, "configuration": label, **t})
                for t in tried:
                    print(f"{partition} {model} {label} lr={t['lr']}: reached {t['reached'] or '-'} "
                          f"final {t['final_accuracy']} {t['diverged']}", flush=True)
                if best is None:
                    rows.append({"partition": partition, "model": model, "algorithm": algorithm, "E": epochs,
                                 "B": "inf" if batch is None else batch, "u": "", "lr": "all diverged",
                                 "lrs_tried": " ".join(str(t["lr"]) for t in tried), "target": TARGET[model],
                                 "rounds": "", "max_rounds": plan["rounds"], "final_accuracy": float("nan"),
                                 "speedup_vs_fedsgd": "", "seconds": round(seconds, 1)})
                    continue
                lr, reached, curve, (cfg, per_replicate) = best["lr"], best["reached"], best["curve"], best["extra"]
                if algorithm == "fedsgd":
                    base = reached
                curves[(partition, model, label)] = curve
                replicates[(partition, model, label)] = per_replicate
                speedup = (base / reached) if (base and reached) else None
                row = {"partition": partition, "model": model, "algorithm": algorithm, "E": epochs,
                       "B": "inf" if batch is None else batch, "u": round(cfg.updates_per_round(n_mean), 1),
                       "lr": lr, "lrs_tried": " ".join(str(t["lr"]) for t in sorted(tried, key=lambda t: t["lr"])),
                       "target": TARGET[model], "rounds": reached if reached is not None else "",
                       "max_rounds": plan["rounds"], "final_accuracy": round(curve[-1], 4),
                       "speedup_vs_fedsgd": round(speedup, 1) if speedup else "", "seconds": round(seconds, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            # partial results survive
            write_results(rows, curves, replicates, searches, plan, suffix, time.perf_counter() - start_all,
                          started)


def write_results(rows, curves, replicates, searches, plan, suffix, seconds, started):
    out = FIGURES
    write_csv(searches, out / f"fedavg_vs_fedsgd{suffix}_lr_search.csv")
    table = write_csv(rows, out / f"fedavg_vs_fedsgd{suffix}.csv")
    write_sidecar(table, {"table": table.name, "plan": plan, "provenance": [collect(started, finished=True)]})
    lines = ["| partition | model | algorithm | E | B | u | lr (rates tried) | rounds to target | speedup vs FedSGD |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rounds = r["rounds"] if r["rounds"] != "" else f"> {r['max_rounds']} (final {r['final_accuracy']:.3f})"
        lines.append(f"| {r['partition']} | {r['model']} | {r['algorithm']} | {r['E']} | {r['B']} | {r['u']} | "
                     f"{r['lr']} ({r['lrs_tried']}) | {rounds} | {r['speedup_vs_fedsgd'] or '-'} |")
    table = "\n".join(lines)
    write_page(
        out, f"fedavg_vs_fedsgd{suffix}",
        f"Targets: CNN {TARGET['cnn']}, MLP {TARGET['mlp']} test accuracy; C = 0.1, 100 clients; "
        f"{plan['replicates']} replicate(s) per configuration; at most {plan['rounds']} rounds for every "
        f"algorithm; the learning rate searched per configuration on the ladder {LADDER} until the "
        f"best is interior (every rate tried: fedavg_vs_fedsgd{suffix}_lr_search.csv); {seconds:.0f} s so far.\n\n"
        + table + "\n")
    print(table)
    write_curves(curves, replicates, out / f"fedavg_vs_fedsgd{suffix}_curves.json")
    plot(curves, out / f"fedavg_vs_fedsgd{suffix}_accuracy.png", plan, replicates=replicates)


if __name__ == "__main__":
    main()
