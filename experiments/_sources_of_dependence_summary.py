"""The summary table of experiments/sources_of_dependence.py: its parts, its columns, how
it is read back and the figure drawn from it.

The script writes the table and draws the figure after a run (and with ``--replot``), and
reads an earlier table back with ``--carry-over``; experiments/replot.py draws the figure
from the committed table. The parts (full and ``--quick``) are defined here because the
figure lays them out: a column per part, and on its x axis the starts (:data:`INITS`) and
each part's levels of sharing.
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
from _results import read_summary_table

__all__ = ["FLOAT_FIELDS", "INITS", "INT_FIELDS", "PARTS", "QUICK", "STEP_FIELDS", "SUMMARY_COLUMNS", "UNCORRECTED",
           "change_points", "figure", "read_summary", "row_steps", "seeds_in", "summary_cells"]


INITS = ("per-run", "fixed")
# part -> (task, preset, settings, every, runs, seeds, sharing levels)
PARTS = {
    "signal-paper": ("signal-rnn", "paper", {}, 1, 2000, (0, 1, 2),
                     ((), ("order", "dropout"), ("data", "order", "dropout"))),
    "signal-paper-22000": ("signal-rnn", "paper", {}, 1, 22000, (0, 1, 2),
                           ((), ("order", "dropout"), ("data", "order", "dropout"))),
    "gaussian": ("gaussian-sgd", "paper", {}, 10, 2000, (0, 1, 2), ((), ("noise",), ("data", "noise"))),
    "signal-long": ("signal-rnn", "long", {}, 4, 1000, (0, 1, 2),
                    ((), ("order", "dropout"), ("data", "order", "dropout"))),
}
QUICK = {  # --quick: tiny cells, the same layout
    "signal-paper": ("signal-rnn", "paper", {"n_layers": 2}, 1, 300, (0,),
                     ((), ("order", "dropout"), ("data", "order", "dropout"))),
    "gaussian": ("gaussian-sgd", "paper", {"d": 5}, 10, 300, (0,), ((), ("noise",), ("data", "noise"))),
}

INT_FIELDS = ("seed", "runs", "first_iteration", "last_iteration")
FLOAT_FIELDS = ("first_value", "last_value", "last_ci_low", "last_ci_high")
# Per-step detail of a summary row ("iteration: value; ..."), and the correction of its
# `trend` and `steps`; a summary written before them has none: its verdicts are per step.
STEP_FIELDS = ("correction", "steps_uncorrected", "step_change", "step_se", "step_p", "step_p_adjusted",
               "step_ci_low", "step_ci_high")
UNCORRECTED = "none"  # the correction of such a summary's rows

# What a summary table of sources_of_dependence.py holds at least, in every version (--carry-over
# and --replot check it).
SUMMARY_COLUMNS = ("part", "task", "preset", "init", "shared", "runs", "quantity", "pair", *INT_FIELDS,
                   *FLOAT_FIELDS, "trend", "steps")


def read_summary(path):
    """An earlier summary table of sources_of_dependence.py: (part, init, shared, seed) -> its
    rows, with numbers as numbers (6 significant digits, as written). Rows of a summary written
    before the per-step columns get them empty, and ``correction`` "none" (their verdicts
    are the per-step interval verdicts). ValueError, one line, for a file that cannot be
    read or is not such a table (:func:`_results.read_summary_table`)."""
    return summary_cells(read_summary_table(path, SUMMARY_COLUMNS))


def summary_cells(rows):
    """The rows of a summary table (strings, as read) by cell, typed: see :func:`read_summary`."""
    cells = {}
    for row in rows:
        if "correction" not in row:
            row.update({k: "" for k in STEP_FIELDS}, correction=UNCORRECTED, steps_uncorrected=row["steps"])
        row.update({k: int(row[k]) for k in INT_FIELDS}, **{k: float(row[k]) for k in FLOAT_FIELDS})
        cells.setdefault((row["part"], row["init"], row["shared"], row["seed"]), []).append(row)
    return cells


def row_steps(row):
    """{iteration: verdict} from a summary row's `steps` text."""
    return dict((int(it), v) for it, v in (step.split(": ", 1) for step in row["steps"].split("; ") if step))


def _per_step(text):
    """{iteration: float} from a summary row's per-step column ("iteration: value; ..."), {} if empty."""
    return {int(it): float(v) for it, v in (step.split(": ", 1) for step in str(text or "").split("; ") if step)}


_ESTIMATED = re.compile(r"(\d+): predicted \S+, estimated (\S+) \[(\S+), (\S+)\]")


def change_points(summary, part):
    """The MI changes one panel of the figure draws for `part`: one dict per cell, pair and
    estimator (or exact MI) with ``init``, ``shared``, ``quantity``, ``step`` (from, to
    iteration), ``change`` and its 95 % interval ``low``, ``high`` (NaN where the table
    holds none; equal to ``change`` for the exact MI). The step is the last one of each
    row where the row holds per-step changes (``step_change``); a row without them (carried
    over from a summary made before those columns) gives its first-trained-to-last change,
    which is a step only where the cell has one step after the first trained checkpoint;
    its Gaussian interval is then the pair's additive-model row's (the table's interval of
    the Gaussian change). Shrinkage estimates (trend "not made") give no point: their
    change is not an estimate of the MI's change."""
    points = []
    mine = [r for r in summary if r["part"] == part]
    additive = {(r["init"], r["shared"], r["seed"], r["pair"]): r for r in mine if r["quantity"] == "additive_model"}
    for r in mine:
        if r["quantity"] not in ("mi_gaussian", "mi_ksg", "mi_exact") or str(r["trend"]).startswith("not made"):
            continue
        changes = _per_step(r.get("step_change"))
        base = {"init": r["init"], "shared": r["shared"], "seed": r["seed"], "pair": r["pair"], "quantity": r["quantity"]}
        if changes:
            iterations = [r["first_iteration"], *changes]
            last = iterations[-1]
            change = changes[last]
            low, high = (change, change) if r["quantity"] == "mi_exact" else (
                _per_step(r.get("step_ci_low")).get(last, np.nan), _per_step(r.get("step_ci_high")).get(last, np.nan))
            points.append({**base, "step": (iterations[-2], last), "change": change, "low": low, "high": high})
            continue
        steps = row_steps(r)
        change = r["last_value"] - r["first_value"]
        low = high = change if r["quantity"] == "mi_exact" else np.nan
        if r["quantity"] == "mi_gaussian" and len(steps) == 1:
            match = dict((int(m[0]), m[1:]) for m in _ESTIMATED.findall(
                additive.get((r["init"], r["shared"], r["seed"], r["pair"]), {}).get("steps", "")))
            if r["last_iteration"] in match:
                low, high = (float(v) for v in match[r["last_iteration"]][1:])
        points.append({**base, "step": (r["first_iteration"], r["last_iteration"]), "change": change, "low": low,
                       "high": high})
    return points


def figure(summary, path, parts, specs):
    """Per part, two panels: the change of the Gaussian MI (and the exact MI) and of the KSG
    MI over one step (named in the panel's title), per cell, client pair and seed, each with
    its 95 % interval where the table holds one; colour by estimator. A panel draws the step
    most of its points share; points of another step (rows carried over from an older
    summary) are left out and counted in the title. Shrinkage estimates are not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(parts), figsize=(5.6 * len(parts), 8.6), squeeze=False)
    for col, part in enumerate(parts):
        task_name, preset, _, _, runs, _, levels = specs[part]
        seeds = seeds_in(summary, part, specs)
        points = change_points(summary, part)
        cells = [(i_, "+".join(s_) or "nothing") for i_ in INITS for s_ in levels]
        for row, (names, scale) in enumerate(((("mi_gaussian", "mi_exact"), "symlog"), (("mi_ksg",), "linear"))):
            ax = axes[row][col]
            mine = [p for p in points if p["quantity"] in names]
            counts: dict = {}
            for p in mine:
                counts[p["step"]] = counts.get(p["step"], 0) + 1
            step = max(counts, key=counts.get) if counts else None
            left_out = sum(n for s_, n in counts.items() if s_ != step)
            drawn_any = {}
            for j, q in enumerate(names):
                style = {"mi_gaussian": ("C0", "o", "Gaussian"), "mi_exact": ("k", "_", "exact MI"),
                         "mi_ksg": ("C1", "o", "KSG")}[q]
                for i, cell in enumerate(cells):
                    hits = [p for p in mine if p["quantity"] == q and (p["init"], p["shared"]) == cell
                            and p["step"] == step]
                    offsets = np.linspace(-0.25, 0.25, max(len(hits), 1)) if len(hits) > 1 else [0.0]
                    for off, p in zip(offsets, hits):
                        x = i + off + (0.04 if q == "mi_exact" else 0)
                        has = np.isfinite(p["low"]) and np.isfinite(p["high"])
                        if q == "mi_exact":
                            # under the estimates' intervals (zorder 2), which it would hide
                            ax.scatter([x], [p["change"]], color=style[0], marker="_", s=60, zorder=1.5,
                                       label=None if "exact" in drawn_any else "exact MI (no sampling error)")
                            drawn_any["exact"] = True
                        elif has:
                            ax.errorbar([x], [p["change"]], yerr=[[p["change"] - p["low"]], [p["high"] - p["change"]]],
                                        # caps wider than the marker: an interval narrower
                                        # than the marker still shows as a cross bar
                                        fmt=style[1], color=style[0], ms=3, lw=0.9, capsize=3.5,
                                        label=None if q in drawn_any else f"{style[2]}, 95 % interval")
                            drawn_any[q] = True
                        else:
                            ax.scatter([x], [p["change"]], color=style[0], marker="x", s=18,
                                       label=None if q + "x" in drawn_any else f"{style[2]}: no interval in the summary "
                                                                               "(made before its per-step columns)")
                            drawn_any[q + "x"] = True
            ax.axhline(0, color="0.4", lw=0.8, zorder=1)
            if scale == "symlog":
                ax.set_yscale("symlog", linthresh=1)
                ax.axhspan(-1, 1, color="0.93", zorder=0)
                axis = "bits; symmetric log axis:\nlinear in the shaded band ±1, logarithmic beyond"
            else:
                axis = "bits, linear axis"
            ax.set_xticks(range(len(cells)))
            ax.set_xticklabels([f"{i_}\n" + s_.replace("+", "\n") for i_, s_ in cells], fontsize=7)
            ax.set_ylabel(f"{'Gaussian' if row == 0 else 'KSG'} MI change ({axis})", fontsize=8)
            name = "Gaussian" if row == 0 else "KSG"
            title = f"{task_name} ({preset}), {runs} runs/cell, seeds {', '.join(map(str, seeds))}\n" + (
                f"{name} MI change over iteration {step[0]} -> {step[1]}" if step else
                f"{name} MI: shrinkage estimates only, no change drawn")
            if left_out:
                title += f"\n({left_out} rows of another step left out)"
            ax.set_title(title, fontsize=8.5)
            if drawn_any:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.2), ncol=1, frameon=False)
    fig.suptitle(textwrap.fill("Does MI between clients rise? The change of each MI estimate over one step, per cell "
                               "(x axis: the start, and the streams the clients of a run share; each mark: one client "
                               "pair and seed)", width=int(16 * 5.6 * len(parts))), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def seeds_in(summary, part, specs):
    """The seeds of `part` that `summary` holds rows of (the part's seeds where it holds none):
    what a heading or a panel title names, where --skip-missing left some seeds out."""
    return sorted({int(r["seed"]) for r in summary if r["part"] == part}) or list(specs[part][5])
