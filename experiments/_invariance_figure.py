"""The figure of experiments/invariance.py, drawn from its table.

The script draws it after a run and experiments/replot.py from the committed table
(figures/invariance/invariance.csv and its sidecar): :func:`plot`. The configurations are defined
here because the figure draws a line for each, in this order.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALGORITHMS", "plot"]


ALGORITHMS = [  # (label, aggregator, placement)
    ("FedAvg", "fedavg", "update"),
    ("Geometric mask", "geometric_mask", "update"),
    ("AND-mask", "and_mask", "update"),
    ("FedSGD", "fedavg", "step"),
    ("Geometric mask", "geometric_mask", "step"),
    ("AND-mask", "and_mask", "step"),
]


def plot(curves, path, rounds, *, results=None, meta=None):
    """Held-out test accuracy (top) and validation accuracy (bottom) per round, equal and
    unequal client sizes (columns), mean over replicates.

    The spread over replicates is drawn as a +-1 sd band where the curves record it
    (``test_accuracy_sd``, ``val_accuracy_sd``; tables written before they did lack it), and
    as an error bar at the last round from `results` (the final-round mean and sd of every
    configuration) otherwise; the title says which.

    Parameters
    ----------
    curves : list of dict
        Per configuration and round, the replicate means (and sds) of METRICS.
    path : path-like
    rounds : int
    results : list of dict, optional
        The final-round rows (``test_accuracy_sd`` ...), for the error bars.
    meta : dict, optional
        The experiment's record (replicates, local_epochs, lr), for the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 2, figsize=(13, 9.0), sharex=True, layout="constrained")
    colours = {"FedAvg": "C0", "FedSGD": "C0", "Geometric mask": "C1", "AND-mask": "C2"}
    per_round_sd = bool(curves) and all(f"{m}_sd" in c and c[f"{m}_sd"] not in ("", None) for c in curves
                                        for m in ("test_accuracy", "val_accuracy"))
    for row, metric, what in ((0, "test_accuracy", "held-out test accuracy (10 environments)"),
                              (1, "val_accuracy", "validation accuracy (training environments)")):
        for col, equal in enumerate((True, False)):
            ax = axes[row, col]
            for label, _, placement in ALGORITHMS:
                sel = [c for c in curves if str(c["equal_size"]) == str(equal) and c["algorithm"] == label
                       and c["placement"] == placement]
                t = np.array([int(c["round"]) for c in sel])
                v = np.array([float(c[metric]) for c in sel])
                style = "-" if placement == "update" else "--"
                ax.plot(t, v, style, color=colours[label], label=f"{label} ({placement})")
                if per_round_sd:
                    sd = np.array([float(c[f"{metric}_sd"]) for c in sel])
                    ax.fill_between(t, v - sd, v + sd, color=colours[label], alpha=0.12, lw=0)
                elif results:
                    final = [r for r in results if r["equal_size"] == equal and r["algorithm"] == label
                             and r["placement"] == placement]
                    if final:
                        offset = 0.08 * (ALGORITHMS.index((label, _, placement)) - 2.5)
                        ax.errorbar(rounds + offset, final[0][metric], yerr=final[0][f"{metric}_sd"], fmt="none",
                                    ecolor=colours[label], capsize=2, lw=1)
            ax.axhline(0.5, color="grey", lw=0.8, ls=":", label="chance (0.5, two classes)")
            ax.set_title(f"{'equal' if equal else 'unequal'} client sizes: {what}", fontsize=10)
            ax.set_ylabel(f"{metric.replace('_', ' ').replace('val ', 'validation ')} (mean over replicates)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if row == 1:
                ax.set_xlabel("round")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    # below the panels, in rows that fit the figure's width
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=9, frameon=False)
    spread = ("band: +-1 sd over replicates" if per_round_sd else
              "bars at the last round: +-1 sd over replicates (per-round spread not recorded in this table)"
              if results else "spread over replicates not recorded")
    head = "Invariance across clients: FedAvg/FedSGD vs AND-mask and geometric mask"
    if meta:
        head += (f"; {meta.get('replicates', '?')} replicates, {rounds} rounds, {meta.get('local_epochs', '?')} "
                 f"local epochs,\nlr {meta.get('lr', '?')}")
    fig.suptitle(f"{head}\n{spread}", fontsize=11)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
