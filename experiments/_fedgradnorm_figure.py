"""The figure of experiments/fedgradnorm.py, drawn from its table.

The script draws it after a run and experiments/replot.py from the committed table
(figures/fedgradnorm/fedgradnorm.csv and its sidecar): :func:`plot`; :func:`task_names` names the four
tasks in the figure and in the script's page.
"""

from __future__ import annotations

import numpy as np

from mianalysis.federated.multitask import DEFAULT_TASKS

__all__ = ["ALLOCATION_STYLES", "METHOD_COLOURS", "plot", "task_names"]


def task_names():
    """The tasks of mianalysis.federated.multitask's default federation, in client order."""
    return [f"regression x{s[1]:g}" if s[0] == "regression" else f"{s[1]}-class, noise {s[2]:g}"
            for s in DEFAULT_TASKS]


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
