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

Writes figures/fedgradnorm{_quick}.png (per-task test loss per round for both methods
and the weights p_i per round, balanced and imbalanced), .csv (every 10th round,
client, method, allocation and seed) and .csv.json (settings, times), and the page
docs/results/tables/fedgradnorm{_quick}.md (final per-task test metric: accuracy, or MSE
for the regression; mean ± sd over seeds). Torch runs on one
thread: the models are tiny and a second thread only adds overhead.
"""

import argparse
import time

import numpy as np
from _results import FIGURES, write_page, write_sidecar

from mianalysis.provenance import collect, utc_now
from mianalysis.federated import write_rows
from mianalysis.federated.personalized import PersonalizedConfig, PersonalizedSimulation
from mianalysis.federated.multitask import DEFAULT_TASKS, make_multitask

METHODS = ("fedrep", "fedgradnorm")
ALLOCATIONS = ("balanced", "imbalanced")


def task_names():
    return [f"regression x{s[1]:g}" if s[0] == "regression" else f"{s[1]}-class, noise {s[2]:g}"
            for s in DEFAULT_TASKS]


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


METHOD_COLOURS = {"fedrep": "C0", "fedgradnorm": "C3"}
ALLOCATION_STYLES = {"balanced": "-", "imbalanced": "--"}


def _series_sd(rows, alloc, method, client, key):
    """(rounds, mean, sd over seeds) of `key`."""
    sel = [r for r in rows if r["allocation"] == alloc and r["method"] == method and int(r["client"]) == client]
    rounds = sorted({int(r["round"]) for r in sel})
    by_round = {t: [] for t in rounds}
    for r in sel:
        by_round[int(r["round"])].append(float(r[key]))
    sd = [np.std(by_round[t], ddof=1) if len(by_round[t]) > 1 else np.nan for t in rounds]
    return np.array(rounds), np.array([np.mean(by_round[t]) for t in rounds]), np.array(sd)


def plot(rows, path, meta=None):
    """Per task (columns): the test loss (top: MSE for the regression, cross-entropy for the
    classifiers) and the loss weight p_i (bottom), mean over seeds with +-1 sd bands. Colour
    is the method and line style the allocation, the same in every panel.

    Parameters
    ----------
    rows : list of dict
        Per-round rows (the experiment's CSV).
    path : path-like
    meta : dict, optional
        The experiment's record (rounds, seeds), for the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    names = task_names()
    kinds = {int(r["client"]): r["kind"] for r in rows}
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 7.5), sharex=True)
    for client, name in enumerate(names):
        top, bottom = axes[0, client], axes[1, client]
        for method, colour in METHOD_COLOURS.items():
            for alloc, style in ALLOCATION_STYLES.items():
                for ax, key in ((top, "test_loss"), (bottom, "weight")):
                    t, v, sd = _series_sd(rows, alloc, method, client, key)
                    ax.plot(t, v, style, color=colour, lw=1.2)
                    if np.isfinite(sd).any():
                        ax.fill_between(t, v - sd, v + sd, color=colour, alpha=0.15, lw=0)
        loss = "test MSE" if kinds.get(client) == "regression" else "test cross-entropy"
        top.set_title(f"task {client}: {name}", fontsize=10)
        top.set_yscale("log")
        # plain numbers at the log axis' ticks (not 1.6 x 10^0): "%g" of the major and minor ticks
        for which in (top.yaxis.set_major_formatter, top.yaxis.set_minor_formatter):
            which(FuncFormatter(lambda v, _: f"{v:g}"))
        top.tick_params(axis="y", which="minor", labelsize=7)
        top.set_ylabel(f"{loss} (mean over seeds)")
        bottom.set_ylabel("loss weight p_i")
        bottom.set_xlabel("round")
    handles = [Line2D([], [], color=c, label=m) for m, c in METHOD_COLOURS.items()]
    handles += [Line2D([], [], color="0.3", ls=s, label=f"{a} allocation") for a, s in ALLOCATION_STYLES.items()]
    handles.append(Patch(color="0.5", alpha=0.3, label="+-1 sd over seeds"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    what = ""
    if meta:
        what = f": {meta.get('seeds', '?')} seeds, {meta.get('rounds', '?')} rounds"
    fig.suptitle(f"FedGradNorm vs FedRep (p_i = 1), personalised multi-task FL{what}", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
