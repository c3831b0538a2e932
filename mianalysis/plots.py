"""Figures from analysis tables only (never from dumps)."""

from __future__ import annotations

import numpy as np

from .analysis import select
from .regime import is_outside


def _pairs(rows):
    return sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})


def _clients(rows):
    return sorted({r["client_a"] for r in rows if r["client_b"] == ""})


def _finite(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = np.isfinite(ys)
    return xs[ok], ys[ok]


OUTSIDE_LABEL = "outside calibration (hollow)"


def _interval(hits):
    """(iterations, low, high) of the rows that have a confidence interval (tables written
    before intervals have none: nothing is drawn)."""
    it = np.array([r["iteration"] for r in hits], float)
    low = np.array([r.get("ci_low", np.nan) for r in hits], float)
    high = np.array([r.get("ci_high", np.nan) for r in hits], float)
    ok = np.isfinite(low) & np.isfinite(high)
    return it[ok], low[ok], high[ok]


def plot_mi_panel(ax, rows, estimator):
    """MI of every client pair vs iteration with its confidence interval (error bars), the
    permutation null (mean +- 2 sd) as a band, and the exact MI (rows "mi_exact", where the
    task knows it) as black lines.

    Estimates whose note flags them as outside the calibrated regime
    (:func:`mianalysis.regime.estimate_regime_note`) are drawn as hollow markers, with one
    legend entry for them all."""
    exact_label = "exact"
    flagged_any = False
    for a, b in _pairs(rows):
        exact = select(rows, "mi_exact", a, b)
        if exact:
            it, val = _finite([r["iteration"] for r in exact], [r["value"] for r in exact])
            ax.plot(it, val, color="black", lw=1, label=exact_label)
            exact_label = None
        hits = select(rows, f"mi_{estimator}", a, b)
        if not hits:
            continue
        it, val = _finite([r["iteration"] for r in hits], [r["value"] for r in hits])
        line, = ax.plot(it, val, marker="o", ms=3, label=f"Client({a}, {b})")
        flags = np.array([is_outside(r["note"]) for r in hits if np.isfinite(r["value"])], dtype=bool)
        if flags.any():
            flagged_any = True
            ax.plot(it[flags], val[flags], ls="none", marker="o", ms=6, mfc="white", mec=line.get_color(), zorder=3)
        it_c, low, high = _interval(hits)
        if len(it_c):
            ax.vlines(it_c, low, high, color=line.get_color(), lw=1.5)
        it_n, mean = _finite([r["iteration"] for r in hits], [r["null_mean"] for r in hits])
        if len(mean):
            _, sd = _finite([r["iteration"] for r in hits], [r["null_std"] for r in hits])
            ax.fill_between(it_n, mean - 2 * sd, mean + 2 * sd, color=line.get_color(), alpha=0.15, lw=0)
    if flagged_any:  # a legend entry only
        ax.plot([], [], ls="none", marker="o", ms=6, mfc="white", mec="0.3", label=OUTSIDE_LABEL)
    name = {"gaussian": "Gaussian (log-det)", "ksg": "KSG (k-NN)"}[estimator]
    ax.set_title(f"MI, {name}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("MI (bits)")
    ax.legend(fontsize=7)


def plot_metric_panel(ax, rows, metric):
    """A recorded training metric (loss, accuracy) per client vs iteration, mean +- sd over runs."""
    for c in _clients(rows):
        hits = select(rows, metric, c)
        if not hits:
            continue
        it = np.array([r["iteration"] for r in hits])
        val = np.array([r["value"] for r in hits])
        sd = np.array([r["spread"] for r in hits])
        line, = ax.plot(it, val, marker="o", ms=3, label=f"Client {c}")
        ax.fill_between(it, val - sd, val + sd, color=line.get_color(), alpha=0.15, lw=0)
    ax.set_title(metric)
    ax.set_xlabel("iteration")
    ax.set_ylabel(metric)
    ax.legend(fontsize=7)


def plot_distance_panel(ax, rows, metric):
    """Mean paired distance of every client pair vs iteration, its confidence interval as a band."""
    for a, b in _pairs(rows):
        hits = select(rows, metric, a, b)
        line, = ax.plot([r["iteration"] for r in hits], [r["value"] for r in hits], marker="o", ms=3,
                        label=f"Client({a}, {b})")
        it_c, low, high = _interval(hits)
        if len(it_c):
            ax.fill_between(it_c, low, high, color=line.get_color(), alpha=0.25, lw=0)
    ax.set_title(f"{metric.capitalize()} distance")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean distance")
    ax.legend(fontsize=7)


def figure_mi(rows, title=None):
    """Figure 1/2 analogue: (a) Gaussian MI, (b) KSG MI, (c) loss or accuracy."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    quantities = {r["quantity"] for r in rows}
    metric = "accuracy" if "accuracy" in quantities else "loss"
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, est in zip(axes[:2], ("gaussian", "ksg")):
        if f"mi_{est}" in quantities:
            plot_mi_panel(ax, rows, est)
        else:
            ax.set_axis_off()
    if metric in quantities:
        plot_metric_panel(axes[2], rows, metric)
    else:
        axes[2].set_axis_off()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def figure_distances(rows, title=None):
    """Figure 3/4 analogue: Euclidean, Manhattan and Chebyshev distances vs iteration."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, metric in zip(axes, ("euclidean", "manhattan", "chebyshev")):
        plot_distance_panel(ax, rows, metric)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


FIGURES = {"mi": figure_mi, "distances": figure_distances}


def save_figure(rows, kind, path, title=None):
    """Draw figure `kind` ("mi" or "distances") from `rows` and save it to `path`."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    if kind not in FIGURES:
        raise ValueError(f"`kind` must be one of {sorted(FIGURES)}; got {kind!r}")
    fig = FIGURES[kind](rows, title)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
