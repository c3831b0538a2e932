"""Compare aggregation rules by how the correlation between clients evolves.

For FedAvg, coordinate-wise median, AND-mask and geometric mask (the last two applied to
the clients' model updates at the server, threshold 0.2): the same federated run on
digits (3 clients, Dirichlet(0.5) non-IID partition, every client every round, E = 1,
B = 10, an MLP with 32 hidden units), repeated R times with different seeds. Every
client's local model after each round is recorded (the last layer, 330 parameters), and
`mianalysis.analyze` gives the MI between clients (Gaussian and KSG, with permutation
nulls) and the three distances per round, each with its confidence interval; the summary's
``trends`` say per rule, quantity and client pair whether it rises or falls, from the paired
intervals of the change between rounds (never from comparing point estimates).

What the aggregation itself leaves: the server's global model is recorded too (client
"global" of each dump: at checkpoint t the model after round t, so round t started from
checkpoint t - 1). That MI is dominated by each replicate's shared global model, so per
rule, round and client pair `mianalysis.analysis.studies.global_dependence.dependence_given_global` gives,
on the output layer's bias, the Gaussian MI of the local models, their conditional MI
given the global model the round started from (`gaussian_cmi`) and the MI of the clients'
updates (local model minus that global model). The bias is used because the estimate then
needs no shrinkage: 150 replicates against 3 x 9 joint dimensions (the 330-parameter layer
would need 990 and shrinkage, which biases the estimate). Its 10 entries are centred (the
bias minus its mean over classes, first 9 entries kept): a softmax cross-entropy gradient
sums to zero over the classes, so the bias's sum over classes is the same in every client's
local model as in the global model the round started from (up to float32 rounding), a shared
exact function that makes the Gaussian MI of the raw bias infinite in truth and its
covariances singular. Centring removes exactly that direction; MI does not depend on which
basis of the remaining 9 is used.

    python experiments/aggregator_trends.py --quick   # 150 replicates, 6 rounds
    python experiments/aggregator_trends.py           # 500 replicates, 10 rounds

Writes figures/aggregator_trends{_quick}.png (one panel per quantity, a line per rule,
averaged over the three client pairs; MI panels show the permutation null as a dotted
line), the analysis table per rule (.csv; it also holds each client's rows with "global"),
the per-round accuracy, and figures/aggregator_trends{_quick}_global.{png,csv} (the three
output-bias quantities per rule, round and client pair, each with its Wishart standard error,
95 % normal interval and analytic Wilks' Lambda null: ``se``, ``ci_low``, ``ci_high``,
``null_mean``, ``null_std``, ``p_value``; the figure draws the mean over pairs, the range
of the pairs' intervals and the null band).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _results import FIGURES, WORK, portable_sidecar
from _runner import LEGACY_ESTIMATORS  # the estimators of the committed tables

from mianalysis.provenance import collect, utc_now
from mianalysis.analysis import AnalysisTable, analyze
from mianalysis.report.experiment import TRENDS, overall_trend, step_verdicts
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates, write_rows
from mianalysis.analysis.studies.global_dependence import QUANTITIES as GLOBAL_QUANTITIES
from mianalysis.analysis.studies.global_dependence import dependence_given_global
from mianalysis.federated.registry import get_rule

RULES = {"fedavg": {}, "median": {}, "and_mask": {"threshold": 0.2}, "geometric_mask": {"threshold": 0.2}}
CI_LEVEL = 0.95  # of the dependence_given_global intervals
QUANTITIES = ["mi_gaussian", "mi_ksg", "euclidean", "manhattan", "chebyshev"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", default=str(WORK))
    args = parser.parse_args()
    started = utc_now()
    replicates, rounds, perms = (150, 6, 10) if args.quick else (500, 10, 20)
    suffix = "_quick" if args.quick else ""
    data = FederatedData.digits(3, "dirichlet", seed=0, alpha=0.5)
    tables, accuracy, timing, dumps, given_global = {}, {}, {}, {}, {}
    for rule, params in RULES.items():
        start = time.perf_counter()
        cfg = FederatedConfig(rounds=rounds, client_fraction=1.0, local_epochs=1, batch_size=10, lr=0.05,
                              aggregator=rule, aggregator_params=params)
        sim = FederatedSimulation("mlp", data, cfg, replicates=replicates, seed=0, hidden=32)
        dump, history = record_replicates(sim, Path(args.work) / f"aggregator_trends{suffix}_{rule}",
                                          chunk_size=250, layer="5", progress=False, record_global=True)
        rows = analyze(dump, estimators=LEGACY_ESTIMATORS, n_permutations=perms, random_state=0)
        rows.write(FIGURES / f"aggregator_trends{suffix}_{rule}.csv")
        portable_sidecar(FIGURES / f"aggregator_trends{suffix}_{rule}.csv")  # the dump as runs/..., not absolute
        tables[rule] = rows
        given_global[rule] = [{"rule": rule, **r} for r in dependence_given_global(
            *_centred_bias(dump, data.n_clients), units="bits", ci_level=CI_LEVEL, null="analytic")]
        dumps[rule] = dump.provenance
        accuracy[rule] = [float(np.mean(dump.metric("0", "test_accuracy")[t])) for t in range(rounds + 1)]
        timing[rule] = round(time.perf_counter() - start, 1)
        print(f"{rule}: {timing[rule]} s, final test accuracy {accuracy[rule][-1]:.3f}", flush=True)
    plot(tables, {rule: accuracy_from_table(rows) for rule, rows in tables.items()},
         FIGURES / f"aggregator_trends{suffix}.png",
         f"{replicates} replicate runs, 3 clients, last layer (330 parameters)")
    global_rows = [r for rule in RULES for r in given_global[rule]]
    write_rows(global_rows, FIGURES / f"aggregator_trends{suffix}_global.csv")
    plot_global(given_global, FIGURES / f"aggregator_trends{suffix}_global.png",
                f"{replicates} replicate runs, 3 clients, output bias centred (9 dimensions), Gaussian estimator")
    summary = {"replicates": replicates, "rounds": rounds, "permutations": perms, "seconds": timing,
               "final_test_accuracy": {r: a[-1] for r, a in accuracy.items()},
               "partition_sizes": data.sizes().tolist(),
               "provenance": [collect(started, finished=True)], "dump_provenance": dumps}
    summary["trends_from"] = TRENDS + " (verdict per client pair over the rounds after the first)"
    for rule, rows in tables.items():
        for q in QUANTITIES:
            series = _pair_mean(rows, q)
            summary.setdefault("first_last", {}).setdefault(rule, {})[q] = [series[1][1], series[-1][1]]
            summary.setdefault("trends", {}).setdefault(rule, {})[q] = {
                f"{a}-{b}": overall_trend(v for _, v in step_verdicts(rows, q, a, b))
                for a, b in sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})}
    for rule, rows in given_global.items():
        for q in GLOBAL_QUANTITIES:
            series = _global_pair_mean(rows, q)
            summary.setdefault("output_bias_first_last", {}).setdefault(rule, {})[q] = [series[0][1], series[-1][1]]
    (FIGURES / f"aggregator_trends{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["first_last"], indent=1))
    print(json.dumps(summary["output_bias_first_last"], indent=1))
    print("trends,", summary["trends_from"] + ":", json.dumps(summary["trends"], indent=1))


def _centred_bias(dump, n_clients):
    """(local, global_model) for dependence_given_global: the output bias of every
    recorded checkpoint minus its mean over classes, first n_classes - 1 entries (see the
    module docstring), as (n_checkpoints, n_runs, n_classes - 1) arrays."""
    def centred(client):
        b = np.stack([dump.samples(client, iteration=t, layer="5.bias") for t in dump.checkpoints]).astype(np.float64)
        return (b - b.mean(axis=-1, keepdims=True))[..., :-1]

    return {str(c): centred(str(c)) for c in range(n_clients)}, centred("global")


def _pair_mean(rows, quantity, key="value", *, plain_only=False):
    """[(round, mean over client pairs)] for a quantity; with `plain_only`, the rounds where
    no pair's estimate is a shrinkage estimate (``estimate_kind``)."""
    pairs = sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] not in ("", "global")})
    series = [rows.select(quantity, a, b) for a, b in pairs]
    return [(s0["iteration"], float(np.mean([s[i][key] for s in series]))) for i, s0 in enumerate(series[0])
            if not plain_only or all(s[i].get("estimate_kind", "plain") != "shrinkage" for s in series)]


def _global_pair_mean(rows, quantity, key="value"):
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
            pts = [(t, v) for t, v in _pair_mean(rows, q, plain_only=not plain) if t > 0 and np.isfinite(v)]
            if not pts:
                continue
            drawn = True
            ax.plot(*zip(*pts), marker="o", ms=3, color=colour)
            low = dict(_pair_mean(rows, q, "ci_low", plain_only=not plain))
            high = dict(_pair_mean(rows, q, "ci_high", plain_only=not plain))
            its = [t for t, _ in pts if np.isfinite(low.get(t, np.nan)) and np.isfinite(high.get(t, np.nan))]
            if its:
                ax.fill_between(its, [low[t] for t in its], [high[t] for t in its], color=colour, alpha=0.25, lw=0)
            if q.startswith("mi_"):
                permutations = {r.get("null_method") for r in rows if r["quantity"] == q}
                null = dict((t, v) for t, v in _pair_mean(rows, q, "null_mean") if t > 0 and np.isfinite(v))
                sd = dict((t, v) for t, v in _pair_mean(rows, q, "null_std") if t > 0 and np.isfinite(v))
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


if __name__ == "__main__":
    main()
