"""The figure of experiments/fedavg_vs_fedsgd.py, drawn from its accuracy curves.

The script draws it after a run (and after ``--at-table-rates``) and experiments/replot.py
from the committed curves (figures/fedavg_vs_fedsgd/fedavg_vs_fedsgd_curves.json): :func:`plot`. The target
accuracies are defined here because the figure draws them (a dotted line per model).
"""

from __future__ import annotations

import numpy as np

__all__ = ["TARGET", "plot"]


TARGET = {"cnn": 0.95, "mlp": 0.93}  # test accuracies both models reach on 8x8 digits


def plot(curves, path, plan=None, replicates=None):
    """Test accuracy per communication round of every configuration, one panel per model and
    partition: the replicate mean as a line and, where `replicates` holds each replicate's
    curve, the range over replicates as a band of the line's colour; the target accuracy as
    a dotted red line. The legend sits below the panels.

    Parameters
    ----------
    curves : dict of (partition, model, label) to list of float
        The replicate mean per round.
    path : path-like
    plan : dict, optional
        The experiment's plan (replicates), for the title.
    replicates : dict of (partition, model, label) to dict of int to list of float, optional
        Each replicate's curve (replicate id to accuracy per round), as fedavg_vs_fedsgd.py's
        ``replicate_curves`` returns; every replicate must have as many rounds as the mean.

    Raises
    ------
    ValueError
        If a replicate curve's length differs from its mean's, or the mean is not the
        replicates' mean.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    replicates = replicates or {}
    for key, reps in replicates.items():
        if key not in curves:
            raise ValueError(f"replicate curves for {key} have no mean curve")
        lengths = {len(c) for c in reps.values()}
        if lengths != {len(curves[key])}:
            raise ValueError(f"replicate curves for {key} have {sorted(lengths)} rounds, the mean {len(curves[key])}")
        if not np.allclose(np.mean(list(reps.values()), axis=0), curves[key], rtol=0, atol=1e-9):
            raise ValueError(f"the mean curve for {key} is not the mean of its replicate curves")
    panels = sorted({(p, m) for p, m, _ in curves})
    labels = list(dict.fromkeys(label for _, _, label in curves))
    styles = {label: {"color": "k", "ls": "--", "lw": 2.0} if label.startswith("fedsgd") else
              {"color": plt.cm.viridis(i / max(1, len(labels) - 1)), "ls": "-", "lw": 1.6}
              for i, label in enumerate(labels)}  # one colour per configuration in every panel
    counts = sorted({len(reps) for reps in replicates.values()})
    cols = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows + 1.6), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    handles = {}
    for ax, (partition, model) in zip(axes.flat, panels):
        for key, curve in curves.items():
            p, m, label = key
            if (p, m) != (partition, model):
                continue
            (line,) = ax.plot(range(len(curve)), curve, label=label, **styles[label])
            handles.setdefault(label, line)
            if len(replicates.get(key, {})) > 1:
                values = np.asarray(list(replicates[key].values()))
                # the range as a band with a thin edge, so that a pale colour's band still shows
                ax.fill_between(range(len(curve)), values.min(axis=0), values.max(axis=0),
                                facecolor=styles[label]["color"], alpha=0.3, edgecolor=styles[label]["color"],
                                lw=0.6)
        target = ax.axhline(TARGET[model], color="tab:red", ls=":", lw=1.5)
        handles.setdefault(f"target accuracy {TARGET[model]}", target)
        ax.set_title(f"{model.upper()}, {'IID' if partition == 'iid' else 'non-IID (2 shards per client)'}",
                     fontsize=13)
        ax.set_xlabel("communication round", fontsize=12)
        ax.set_ylabel("test accuracy", fontsize=12)
        ax.tick_params(labelsize=11)
        ax.set_ylim(0, 1)
    if counts and counts[-1] > 1:
        n = "-".join(map(str, counts)) if len(counts) > 1 else str(counts[0])
        handles[f"{n} replicates: range (band); line: mean"] = Patch(color="0.5", alpha=0.35, lw=0)
    fig.legend(list(handles.values()), list(handles.keys()), loc="outside lower center",
               ncol=min(4, len(handles)), fontsize=10, frameon=False)
    banded = sum(len(replicates.get(key, {})) > 1 for key in curves)
    if plan and "replicates" in plan:
        reps = (f"line: mean of {plan['replicates']} replicate runs, band: their range" if banded
                else f"mean over {plan['replicates']} replicate run(s)")
    else:
        reps = "replicate mean"
    if banded and banded < len(curves):
        reps += f"\n(band on {banded} of {len(curves)} curves: the others' replicate curves are not stored)"
    fig.suptitle(f"FedSGD vs FedAvg on 8x8 digits: 100 clients, C = 0.1, best learning rate per configuration;\n"
                 f"a run stops at the round its mean reaches the target; {reps}", fontsize=13)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")
