"""Invariance across clients: FedAvg versus AND-mask and geometric-mean mask (seed 000).

The synthetic multi-environment task (mianalysis.federated.environments): 53 training clients
(environments), each with a two-armed-spiral label mechanism shared by all and a
client-specific signature that predicts the label perfectly inside the client; 10
held-out environments without a usable signature are the test set. Seed 000's setting:
15 clients per round, 10 rounds, 50 local epochs, batch 64, agreement threshold 0.2, a
three-layer MLP (two hidden layers of 256 units), equal and unequal (log-normal) client
sizes. Masks are applied in two places:

- "update": to the clients' model updates at the end of each FedAvg round;
- "step": to the clients' minibatch gradients at every step of a FedSGD-style round
  (E * ceil(n / B) synchronised steps per round).

FedAvg (update) and FedSGD with the mean at every step (step) are the baselines; two
centralised controls train the same MLP on the pooled training data, with all features and
with the spiral features only (is the invariance learnable at all?). Every
configuration is repeated over R replicate seeds (initial model and data order); the
table gives mean and standard deviation over them.

    python experiments/invariance.py --quick   # 5 rounds, 5 local epochs, 2 replicates
    python experiments/invariance.py           # 10 rounds, 50 local epochs, 5 replicates
    python experiments/invariance.py --rounds 400 --epochs 1 --lr 0.5 --replicates 3 --tag _fitted

The last is a budget at which FedAvg fits the training environments (train accuracy >= 0.95;
with 50 local epochs it stays near 0.72 at any number of rounds and learning rate tried).
Where a configuration's training diverges, it is rerun at half the learning rate (at most
four times) and its row says which rate it ran at.

Each configuration's result is saved under runs/invariance{_quick}/ as it finishes, so an
interrupted run resumes, and `--sizes equal` / `--sizes unequal` can run in two processes
at once; a final run with the default `--sizes both` writes the table and figure. Torch
runs on one thread per process (the per-step work is small).

Writes figures/invariance/invariance{_quick}.csv (per-round metrics of every configuration), .png
(held-out and validation accuracy per round, with the spread over replicates) and .csv.json
(settings, times), and the page docs/results/tables/invariance{_quick}.md (the table).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _invariance_figure import ALGORITHMS, plot
from _results import figures_of, WORK, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, build_model, write_rows

FIGURES = figures_of(__file__)  # figures/invariance/: where this script writes

METRICS = ["train_loss", "val_loss", "train_accuracy", "val_accuracy", "test_accuracy"]


def main():
    import torch

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, help="communication rounds (default 10; --quick 5)")
    parser.add_argument("--epochs", type=int, help="local epochs per round (default 50; --quick 5)")
    parser.add_argument("--replicates", type=int, help="replicate seeds per configuration (default 5; --quick 2)")
    parser.add_argument("--tag", default="", help="suffix of the output and work names, e.g. _fitted")
    parser.add_argument("--sizes", choices=["both", "equal", "unequal"], default="both")
    parser.add_argument("--work", default=str(WORK), help="per-configuration results (resumed)")
    parser.add_argument("--reverse", action="store_true",
                        help="run the configurations in reverse order (a second process on the same sizes)")
    args = parser.parse_args()
    started = utc_now()
    rounds, epochs, replicates = (5, 5, 2) if args.quick else (10, 50, 5)
    rounds, epochs, replicates = args.rounds or rounds, args.epochs or epochs, args.replicates or replicates
    suffix = ("_quick" if args.quick else "") + args.tag
    out = FIGURES
    work = Path(args.work) / f"invariance{suffix}"
    work.mkdir(parents=True, exist_ok=True)
    settings = {"rounds": rounds, "epochs": epochs, "replicates": replicates, "lr": args.lr}
    results, curves, timing = [], [], {}
    earlier = {}  # (start, command line) -> provenance of an earlier session whose configurations are reused
    for equal in {"both": (True, False), "equal": (True,), "unequal": (False,)}[args.sizes]:
        data = FederatedData.environments(n_clients=53, n_test_clients=10, examples_per_client=200,
                                          equal_size=equal, seed=0)
        for label, rule, placement in (ALGORITHMS[::-1] if args.reverse else ALGORITHMS):
            key = f"{'equal' if equal else 'unequal'}/{label}/{placement}"
            saved = work / (key.replace("/", "_").replace(" ", "-") + ".json")
            if saved.exists() and json.loads(saved.read_text())["settings"] == settings:
                done = json.loads(saved.read_text())
                results.append(done["row"])
                curves += done["curves"]
                timing[key] = done["seconds"]
                prov = done.get("provenance")
                if prov:  # one entry per session, with the end of its last configuration
                    ident = (prov.get("started"), tuple(prov.get("argv", ())))
                    earlier[ident] = max(earlier.get(ident, prov), prov, key=lambda p: p.get("ended") or "")
                continue
            start = time.perf_counter()
            lr = args.lr
            for attempt in range(5):  # halve the rate where training diverged
                cfg = FederatedConfig(rounds=rounds, client_fraction=15 / 53, local_epochs=epochs, batch_size=64,
                                      lr=lr, algorithm="fedavg" if placement == "update" else "fedsgd",
                                      aggregator=rule, placement=placement,
                                      aggregator_params={} if rule == "fedavg" else {"threshold": 0.2})
                sim = FederatedSimulation("mlp", data, cfg, replicates=replicates, seed=0, hidden=256)
                try:
                    history = sim.run().history
                    break
                except ValueError as exc:
                    if attempt == 4:
                        raise
                    print(f"{key}: {exc}; rerun at lr {lr / 2}", flush=True)
                    lr /= 2
            timing[key] = round(time.perf_counter() - start, 1)
            final = [h for h in history if h["round"] == rounds]
            row = {"equal_size": equal, "algorithm": label, "placement": placement, "lr": lr}
            for m in METRICS:
                vals = np.array([h[m] for h in final])
                row[m], row[f"{m}_sd"] = float(vals.mean()), float(vals.std(ddof=1))
            results.append(row)
            mine = []
            for t in range(rounds + 1):
                at = [h for h in history if h["round"] == t]
                mine.append({"equal_size": equal, "algorithm": label, "placement": placement, "round": t,
                             **{m: float(np.mean([h[m] for h in at])) for m in METRICS},
                             **{f"{m}_sd": float(np.std([h[m] for h in at], ddof=1)) if len(at) > 1 else float("nan")
                                for m in METRICS}})
            curves += mine
            tmp = saved.with_suffix(".tmp")
            tmp.write_text(json.dumps({"settings": settings, "row": row, "curves": mine, "seconds": timing[key],
                                       "provenance": collect(started, finished=True)}))
            tmp.replace(saved)
            print(f"{key}: {timing[key]} s, held-out accuracy {row['test_accuracy']:.3f}", flush=True)
    if args.sizes != "both":
        return
    controls = centralised_controls(epochs=30 if not args.quick else 5, lr=args.lr, seeds=3)
    write_rows(curves, out / f"invariance{suffix}.csv")
    table = markdown_table(results)
    write_page(
        out, f"invariance{suffix}",
        f"{replicates} replicates per row (mean ± sd), {rounds} rounds, {epochs} local epochs, 15 of 53 clients per "
        f"round, batch 64, lr {args.lr} (halved where training diverged: the row's LR), threshold 0.2; "
        f"test = 10 held-out environments.\n\n{table}\n\n"
        f"Controls: the same MLP trained centrally on the pooled training data of the equal-size clients "
        f"(SGD, batch 64, lr {args.lr}, {controls['epochs']} epochs, {controls['seeds']} seeds):\n\n"
        + "\n".join(f"- {name}: train accuracy {v['train_accuracy']:.3f}, held-out test accuracy "
                    f"{v['test_accuracy']:.3f} ± {v['test_accuracy_sd']:.3f}" for name, v in controls["rows"].items())
        + "\n")
    rerun = [f"{r['algorithm']} ({r['placement']}, {'equal' if r['equal_size'] else 'unequal'} sizes) at {r['lr']}"
             for r in results if r.get("lr", args.lr) != args.lr]
    lr_text = f"{args.lr}" + (f" ({', '.join(rerun)}: diverged at higher rates)" if rerun else "")
    plot(curves, out / f"invariance{suffix}.png", rounds, results=results,
         meta={"replicates": replicates, "local_epochs": epochs, "lr": lr_text})
    write_sidecar(out / f"invariance{suffix}.csv", {
        "rounds": rounds, "local_epochs": epochs, "replicates": replicates, "lr": args.lr, "seconds": timing,
        "results": results, "controls": controls,
        "provenance": list(earlier.values()) + [collect(started, finished=True)]})
    print(table)


def centralised_controls(epochs, lr, seeds):
    """The MLP trained on all training clients' data pooled (no federation), on all
    features and on the two spiral features only: is the invariant mechanism learnable
    with this model and optimiser, and does pooling alone avoid the shortcuts?"""
    import torch

    d = FederatedData.environments(n_clients=53, n_test_clients=10, examples_per_client=200, equal_size=True,
                                   seed=0)
    rows = {}
    for name, cols in (("pooled, all features", slice(None)), ("pooled, spiral features only", slice(0, 2))):
        x, y = torch.from_numpy(d.x_train[:, cols]), torch.from_numpy(d.y_train)
        xt, yt = torch.from_numpy(d.x_test[:, cols]), torch.from_numpy(d.y_test)
        train, test = [], []
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(seed)
            torch.manual_seed(seed)
            model = build_model("mlp", (x.shape[1],), n_classes=2, hidden=256)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            for _ in range(epochs):
                order = torch.randperm(len(y), generator=gen)
                for start in range(0, len(y), 64):
                    idx = order[start:start + 64]
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                    opt.step()
            with torch.no_grad():
                train.append(float((model(x).argmax(1) == y).float().mean()))
                test.append(float((model(xt).argmax(1) == yt).float().mean()))
        rows[name] = {"train_accuracy": float(np.mean(train)), "test_accuracy": float(np.mean(test)),
                      "test_accuracy_sd": float(np.std(test, ddof=1))}
    return {"epochs": epochs, "seeds": seeds, "rows": rows}


def markdown_table(results):
    head = ["Equal Size", "Algorithm", "Placement", "LR", "Train Loss", "Validation Loss", "Train Accuracy",
            "Validation Accuracy", "Held-out Test Accuracy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [str(r["equal_size"]), r["algorithm"], r["placement"], f"{r.get('lr', '')}"]
        cells += [f"{r[m]:.3f} ± {r[m + '_sd']:.3f}" for m in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
