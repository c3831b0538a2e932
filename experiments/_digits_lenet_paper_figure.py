"""The figure of experiments/digits_lenet_paper.py, drawn from its summary table.

The script draws it after a run (and with ``--replot``) and experiments/replot.py from
the committed table (figures/digits_lenet_paper/digits_lenet_paper.csv and its sidecar): :func:`summary_figure`.
Everything it draws comes from the table's rows (a cell's start from its ``init`` column).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ACCURACY_SPAN_PP", "SEED", "summary_figure"]

SEED = 0  # the seed of figures/digits_lenet_paper/digits_lenet_paper.csv (another seed S: digits_lenet_paper_seedS.csv)


def _series(summary, cell, quantity, key="value"):
    """[(iteration, mean over pairs or clients of `key`)] of one cell's checkpoint rows."""
    its = sorted({int(r["iteration"]) for r in summary if r["cell"] == cell and r["quantity"] == quantity
                  and r["iteration"] != ""})
    return [(it, float(np.mean([float(r[key]) for r in summary if r["cell"] == cell and r["quantity"] == quantity
                                and r["iteration"] != "" and int(r["iteration"]) == it]))) for it in its]


# The accuracy panel spans at least this many percentage points, so that a change of 1e-4
# is drawn as the flat line it is (with the sd over runs for scale).
ACCURACY_SPAN_PP = 1.0


def _plain(row):
    """Whether a summary row's MI is a plain estimate (not a Ledoit-Wolf shrinkage number)."""
    return "ledoit-wolf shrinkage" not in str(row.get("note", "")).lower()


def _mi_panel(ax, summary, cells, colours, runs, quantity, title):
    """One MI panel: per cell, the MI minus its permutation null's mean with the 95 %
    interval (mean over the 3 client pairs of each pair's bounds, shifted by the same null
    mean), at the trained checkpoints where every pair's estimate is plain; True if any
    point was drawn."""
    drawn = False
    for cell in cells:
        plain = {int(r["iteration"]) for r in summary if r["cell"] == cell and r["quantity"] == quantity
                 and r["iteration"] != ""}
        plain -= {int(r["iteration"]) for r in summary if r["cell"] == cell and r["quantity"] == quantity
                  and r["iteration"] != "" and not _plain(r)}
        value, null = dict(_series(summary, cell, quantity)), dict(_series(summary, cell, quantity, "null_mean"))
        low, high = dict(_series(summary, cell, quantity, "ci_low")), dict(_series(summary, cell, quantity, "ci_high"))
        its = [t for t in value if t > 0 and t in plain and np.isfinite(null.get(t, np.nan))]
        if not its:
            continue
        drawn = True
        shift = np.array([null[t] for t in its])
        ax.plot(its, np.array([value[t] for t in its]) - shift, marker="o", ms=3.5, color=colours[cell],
                label=f"{cell} ({runs[cell]:,} runs)")
        ax.fill_between(its, np.array([low[t] for t in its]) - shift, np.array([high[t] for t in its]) - shift,
                        color=colours[cell], alpha=0.2, lw=0)
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_title(title + "\n(band: 95 % interval, its bounds averaged over pairs)", fontsize=9.5)
    ax.set_ylabel("bits, mean over the 3 client pairs")
    return drawn


def summary_figure(summary, path, permutations=None, seed=SEED):
    """The figure of the summary table, readable at page width: per cell (a line each), the
    MI minus its permutation null's mean with the 95 % interval (mean over the 3 client
    pairs of each pair's bounds, shifted by the same null mean): the Gaussian MI where it is
    a plain estimate (the fixed-start cells; from a per-run start it is a Ledoit-Wolf
    shrinkage number, biased, and stays in the table), the KSG MI for the fixed-start and
    the per-run-start cells apart (their scales differ 100-fold); the Euclidean distance
    with its interval; and the clients' test accuracy, in percentage points, with the sd
    over runs, on an axis at least ACCURACY_SPAN_PP wide. A cell's start is its rows' ``init``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cells = list(dict.fromkeys(r["cell"] for r in summary))
    colours = {c: f"C{i}" for i, c in enumerate(cells)}
    runs = {c: int(next(r["runs"] for r in summary if r["cell"] == c)) for c in cells}
    inits = {c: next(r["init"] for r in summary if r["cell"] == c) for c in cells}  # the cell's start
    fig, axes = plt.subplots(2, 3, figsize=(14, 8.2))
    fixed = [c for c in cells if inits[c] == "fixed"]
    def say_empty(ax, text):  # a panel with nothing to draw says why
        ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.3")

    if not _mi_panel(axes[0][0], summary, fixed, colours, runs, "mi_gaussian",
                     "Gaussian MI minus its permutation null's mean, fixed start"):
        say_empty(axes[0][0], "no plain Gaussian estimate\n(Ledoit-Wolf shrinkage numbers: in the table)")
    for init, ax in (("fixed", axes[0][1]), ("per-run", axes[0][2])):
        if not _mi_panel(ax, summary, [c for c in cells if inits[c] == init], colours, runs,
                         "mi_ksg", f"KSG MI minus its permutation null's mean, {init} start"):
            say_empty(ax, f"no {init}-start cell in this table")
    ax = axes[1][0]
    for cell in cells:
        value = dict(_series(summary, cell, "euclidean"))
        low, high = dict(_series(summary, cell, "euclidean", "ci_low")), dict(_series(summary, cell, "euclidean", "ci_high"))
        its = sorted(value)
        ax.plot(its, [value[t] for t in its], marker="o", ms=3.5, color=colours[cell], label=cell)
        ax.fill_between(its, [low[t] for t in its], [high[t] for t in its], color=colours[cell], alpha=0.2, lw=0)
    ax.set_title("Euclidean distance between clients\n(band: 95 % interval, mean over pairs of each pair's bounds)",
                 fontsize=9.5)
    ax.set_ylabel("distance, mean over the 3 client pairs")
    ax = axes[1][1]
    centre = []
    for cell in cells:
        acc = dict(_series(summary, cell, "test_accuracy"))
        sd = {t: float(np.mean([float(str(r["note"]).split()[-1]) for r in summary if r["cell"] == cell
                                and r["quantity"] == "test_accuracy" and r["iteration"] != ""
                                and int(r["iteration"]) == t])) for t in acc}
        its = sorted(acc)
        m, s = 100 * np.array([acc[t] for t in its]), 100 * np.array([sd[t] for t in its])
        ax.plot(its, m, marker="o", ms=3.5, color=colours[cell], label=cell)
        ax.fill_between(its, m - s, m + s, color=colours[cell], alpha=0.15, lw=0)
        centre += list(m)
    mid = (max(centre) + min(centre)) / 2
    half = max(ACCURACY_SPAN_PP / 2, (max(centre) - min(centre)) / 2 * 1.3)
    ax.set_ylim(mid - half, mid + half)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_title(f"client test accuracy (band: +-1 sd over runs)\naxis at least {ACCURACY_SPAN_PP:g} percentage "
                 "point wide", fontsize=9.5)
    ax.set_ylabel("accuracy (%), mean over the 3 clients")
    for ax in axes.flat[:5]:
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    from matplotlib.lines import Line2D

    legend = axes[1][2]
    legend.axis("off")
    legend.legend(handles=[Line2D([], [], color=colours[c], marker="o", ms=3.5, label=f"{c} ({runs[c]:,} runs)")
                           for c in cells], loc="center", fontsize=9, frameon=False,
                  title="cell (lines of cells that agree overlap)", title_fontsize=9)
    if isinstance(permutations, dict):
        perms = ", permutations " + ", ".join(f"{e} {n}" for e, n in sorted(permutations.items()))
    else:
        perms = ""
    fig.suptitle("digits-lenet, paper preset: the pretrained LeNet's last layer (850 parameters) retrained, 3 "
                 f"clients, seed {seed}; KSG k=3, standardised{perms}.\nThe Gaussian MI is drawn where it is a plain "
                 "estimate (fixed start); from a per-run start it is a Ledoit-Wolf shrinkage number (biased), in the "
                 "table only", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
