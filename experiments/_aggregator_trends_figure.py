"""The figures of experiments/aggregator_trends.py, drawn from its tables.

The script draws them after a run and experiments/replot.py from the committed tables:
:func:`plot` (MI and distances per round, a line per rule, and the global model's test
accuracy, :func:`accuracy_from_table`) and :func:`plot_global` (the dependence given the
global model). The rules and the quantities are defined here because the figures draw
them (a colour per rule, a panel per quantity) and replot.py finds the tables by rule.
"""

from __future__ import annotations

import numpy as np

from mianalysis.analysis.studies.global_dependence import QUANTITIES as GLOBAL_QUANTITIES
from mianalysis.federated.registry import get_rule

__all__ = ["CI_LEVEL", "GLOBAL_TITLES", "QUANTITIES", "RULES", "accuracy_from_table", "global_pair_mean",
           "pair_mean", "plot", "plot_global"]

# The rules compared (with their settings), in the figures' colour order: a table each.
RULES = {"fedavg": {}, "median": {}, "and_mask": {"threshold": 0.2}, "geometric_mask": {"threshold": 0.2}}
CI_LEVEL = 0.95  # of the dependence_given_global intervals
QUANTITIES = ["mi_gaussian", "mi_ksg", "euclidean", "manhattan", "chebyshev"]


def pair_mean(rows, quantity, key="value", *, plain_only=False):
    """[(round, mean over client pairs)] for a quantity; with `plain_only`, the rounds where
    no pair's estimate is a shrinkage estimate (``estimate_kind``)."""
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] not in ("", "global")})
    series = [rows.select(quantity, a, b) for a, b in pairs]
    return [(s0["iteration"], float(np.mean([s[i][key] for s in series]))) for i, s0 in enumerate(series[0])
            if not plain_only or all(s[i].get("estimate_kind", "plain") != "shrinkage" for s in series)]


def global_pair_mean(rows, quantity, key="value"):
    """[(round, mean over client pairs)] of a dependence_given_global quantity (`key`: its column)."""
    rounds = sorted({int(r["iteration"]) for r in rows})
    return [(t, float(np.mean([_number(r, key) for r in rows if int(r["iteration"]) == t
                               and r["quantity"] == quantity]))) for t in rounds]


def _number(row, key):
    """`row[key]` as a float (a table read back from CSV holds strings); NaN if absent or empty."""
    try:
        return float(row.get(key, np.nan))
    except (TypeError, ValueError):
        return np.nan


def _global_series(rows, quantity):
    """Per round of one rule's dependence_given_global rows of `quantity`: (rounds, mean over
    client pairs of the estimate, min over pairs of ci_low, max over pairs of ci_high, min
    over pairs of null_mean - 2 null_std, max of null_mean + 2 null_std, mean of null_mean),
    as arrays; a column the table lacks gives NaN."""
    rounds = sorted({int(r["iteration"]) for r in rows if r["quantity"] == quantity})
    out = []
    for t in rounds:
        at = [r for r in rows if int(r["iteration"]) == t and r["quantity"] == quantity]
        col = {k: np.array([_number(r, k) for r in at]) for k in ("value", "ci_low", "ci_high", "null_mean",
                                                                   "null_std")}
        low, high = col["null_mean"] - 2 * col["null_std"], col["null_mean"] + 2 * col["null_std"]
        out.append((t, col["value"].mean(), col["ci_low"].min(), col["ci_high"].max(), low.min(), high.max(),
                    col["null_mean"].mean()))
    return tuple(np.array(c, dtype=float) for c in zip(*out)) if out else (np.array([]),) * 7


GLOBAL_TITLES = {
    "mi_local": "I(local_i(t); local_j(t))\nthe two clients' models after their local training in round t",
    "cmi_given_global": "I(local_i(t); local_j(t) | global(t-1))\ngiven the server's model after round t-1, the one "
                        "round t started from\n(round 1: the initial model); only its output bias is conditioned on",
    "mi_update": "I(local_i(t) - global(t-1); local_j(t) - global(t-1))\nthe clients' updates in round t,\nrelative "
                 "to the model the round started from",
}


def _null_label(quantity, given_global):
    """The legend entry of a panel's null band; the CMI's names its runs, n - k."""
    if quantity != "cmi_given_global":
        return "analytic null (Wilks' Lambda): mean +- 2 sd"
    k = {int(_number(r, "n_features")) for rows in given_global.values() for r in rows}
    runs = {int(_number(r, "n_runs")) for rows in given_global.values() for r in rows}
    which = f"{runs.pop()} - {k.pop()} runs" if len(k) == len(runs) == 1 else "n_runs - n_features runs"
    return f"analytic null (partial Wilks' Lambda of the residuals given global(t-1), {which}): mean +- 2 sd"


def plot_global(given_global, path, subtitle, ci_level=CI_LEVEL):
    """The dependence_given_global quantities per round, one panel each and a line per rule:
    the mean over client pairs of the estimate, a band from the lowest ``ci_low`` to the
    highest ``ci_high`` of the pairs, and the analytic null as a grey band ``null_mean +- 2
    null_std`` (dashed: its mean); each panel's legend lies below it. Rows of a table written
    before the intervals and nulls (no such columns, or NaN) draw the lines only, and the
    legends and title say so.

    Parameters
    ----------
    given_global : dict of str to list of dict
        Each rule's rows (:func:`mianalysis.analysis.studies.global_dependence.dependence_given_global`,
        or read back from the CSV table: strings are converted).
    path : path-like
    subtitle : str
    ci_level : float, default=CI_LEVEL
        The level the rows' intervals were computed at (for the legend).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from mianalysis.report.plots import legend_below

    fig, axes = plt.subplots(1, 3, figsize=(15, 6.6), layout="constrained")
    colours = {rule: f"C{i}" for i, rule in enumerate(given_global)}
    pairs = {(r["client_a"], r["client_b"]) for rows in given_global.values() for r in rows}
    any_interval = any_null = False
    for ax, q in zip(axes, GLOBAL_QUANTITIES):
        nulls = []
        intervals = False
        for rule, rows in given_global.items():
            t, mean, low, high, null_low, null_high, null_mean = _global_series(rows, q)
            if not len(t):
                continue
            ax.plot(t, mean, marker="o", ms=3, color=colours[rule], label=get_rule(rule).display_name, zorder=3)
            if np.isfinite(low).all() and np.isfinite(high).all():
                ax.fill_between(t, low, high, color=colours[rule], alpha=0.22, lw=0)
                intervals = True
            if np.isfinite(null_low).all() and np.isfinite(null_high).all():
                nulls.append((t, null_low, null_high, null_mean))
        if intervals:
            ax.fill_between([], [], [], color="0.55", alpha=0.3, lw=0,
                            label=f"band, in each rule's colour: lowest to highest {100 * ci_level:g} % "
                                  f"interval of the {len(pairs)} client pairs")
        if nulls:
            t = nulls[0][0]
            low = np.min([n[1] for n in nulls if np.array_equal(n[0], t)], axis=0)
            high = np.max([n[2] for n in nulls if np.array_equal(n[0], t)], axis=0)
            ax.fill_between(t, low, high, color="0.5", alpha=0.35, lw=0, hatch="//", edgecolor="0.35",
                            label=_null_label(q, given_global))
            ax.plot(t, nulls[0][3], ls="--", color="0.25", lw=1, label="null mean")
        else:
            ax.axhline(0.0, color="grey", lw=0.8)
        if not intervals and not nulls:
            ax.plot([], [], ls="none", label="table without intervals or nulls: point estimates only")
        any_interval |= intervals
        any_null |= bool(nulls)
        ax.set_title(GLOBAL_TITLES[q], fontsize=9.5)
        ax.set_xlabel("round t")
        ax.set_ylabel(f"Gaussian MI (bits), mean over the {len(pairs)} client pairs")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        legend_below(ax, fontsize=8)
    drawn = ("lines: mean over client pairs; bands: the pairs' intervals and the analytic null"
             if any_interval and any_null else
             "point estimates only: this table (written before them) holds no intervals or nulls" if not (any_interval or any_null) else
             "lines: mean over client pairs" + ("; bands: the pairs' intervals" if any_interval else
                                                "; band: the analytic null"))
    fig.suptitle(f"Dependence between clients beyond the global model ({subtitle})\nEach client's output-layer "
                 "bias minus its mean over classes (first 9 entries); global(t-1): the server's model after round "
                 f"t-1, that round t started from, bias centred alike.\n{drawn[0].upper() + drawn[1:]}.",
                 fontsize=9.5)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def accuracy_from_table(rows):
    """[(round, mean, sd over replicates)] of the global test accuracy a rule's table records
    (client "0"'s ``test_accuracy`` rows: the global model's accuracy, the same for every client)."""
    return [(r["iteration"], r["value"], r["spread"]) for r in rows.select("test_accuracy", "0")]


def plot(tables, accuracy, path, subtitle):
    """MI (with its null band) and distances per round, mean over client pairs, one colour per
    rule; the global test accuracy (mean +-1 sd over replicates) in the last panel.

    Parameters
    ----------
    tables : dict of str to list of dict
        Each rule's analysis table.
    accuracy : dict of str to list
        Per rule, the accuracy per round: floats, or (round, mean, sd) tuples
        (:func:`accuracy_from_table`).
    path : path-like
    subtitle : str
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from mianalysis.report.plots import estimator_variant

    fig, axes = plt.subplots(2, 3, figsize=(15, 9.2))
    some = next(iter(tables.values()))
    titles = {"mi_gaussian": f"MI, Gaussian ({estimator_variant(some, 'gaussian')})", "mi_ksg": "MI, KSG (k-NN)",
              "euclidean": "Euclidean distance", "manhattan": "Manhattan distance",
              "chebyshev": "Chebyshev distance"}
    ylabels = {"mi_gaussian": "MI (bits), mean over client pairs", "mi_ksg": "MI (bits), mean over client pairs",
               "euclidean": "distance, mean over client pairs", "manhattan": "distance, mean over client pairs",
               "chebyshev": "distance, mean over client pairs"}
    colours = {rule: f"C{i}" for i, rule in enumerate(tables)}
    nulls_drawn = set()
    for ax, q in zip(axes.flat, QUANTITIES):
        drawn = False
        for rule, rows in tables.items():
            colour = colours[rule]
            plain = q != "mi_gaussian"  # a shrinkage estimate is biased: not drawn as a curve
            pts = [(t, v) for t, v in pair_mean(rows, q, plain_only=not plain) if t > 0 and np.isfinite(v)]
            if not pts:
                continue
            drawn = True
            ax.plot(*zip(*pts), marker="o", ms=3, color=colour)
            low = dict(pair_mean(rows, q, "ci_low", plain_only=not plain))
            high = dict(pair_mean(rows, q, "ci_high", plain_only=not plain))
            its = [t for t, _ in pts if np.isfinite(low.get(t, np.nan)) and np.isfinite(high.get(t, np.nan))]
            if its:
                ax.fill_between(its, [low[t] for t in its], [high[t] for t in its], color=colour, alpha=0.25, lw=0)
            if q.startswith("mi_"):
                permutations = {r.get("null_method") for r in rows if r["quantity"] == q}
                null = dict((t, v) for t, v in pair_mean(rows, q, "null_mean") if t > 0 and np.isfinite(v))
                sd = dict((t, v) for t, v in pair_mean(rows, q, "null_std") if t > 0 and np.isfinite(v))
                its = [t for t in null if t in sd]
                if its and permutations:
                    mean, width = np.array([null[t] for t in its]), 2 * np.array([sd[t] for t in its])
                    ax.plot(its, mean, ls=":", color=colour, lw=1)
                    ax.fill_between(its, mean - width, mean + width, color=colour, alpha=0.12, lw=0, hatch="..")
                    nulls_drawn.add(q)
        if not drawn:
            ax.text(0.5, 0.5, "every estimate is a Ledoit-Wolf shrinkage estimate\n(runs <= 2 x joint dimensions): "
                    "biased,\nso no curve is drawn (the values are in the table)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            ax.set_xlabel("round")
            ax.set_ylabel(ylabels[q])
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(titles[q] + ("\nband: 95 % interval (mean over pairs of each pair's bounds)" if drawn else ""),
                     fontsize=9.5)
    ax = axes.flat[5]
    for rule, acc in accuracy.items():
        pts = [a if isinstance(a, tuple) else (i, a, np.nan) for i, a in enumerate(acc)]
        t, m, sd = (np.array(x, float) for x in zip(*pts))
        ax.plot(t, m, marker="o", ms=3, color=colours.get(rule))
        if np.isfinite(sd).all():
            ax.fill_between(t, m - sd, m + sd, color=colours.get(rule), alpha=0.15, lw=0)
    ax.set_title("global model, test accuracy\nband: +-1 sd over replicates", fontsize=9.5)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (mean over replicates)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [Line2D([], [], color=colours[rule], marker="o", ms=3, label=get_rule(rule).display_name)
               for rule in tables]
    if nulls_drawn:
        handles.append(Patch(facecolor="0.8", hatch="..", label="permutation null: mean (dotted) +- 2 sd"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.suptitle(f"Aggregation rules compared by dependence between clients ({subtitle})", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
