"""Figures from analysis tables only (never from dumps)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import check_choice, check_int
from ..analysis import AnalysisTable
from ..analysis.reading import CLIENT_DIAGNOSTICS, metric_names  # the table's recorded metrics: one definition
from ..analysis.table import is_bound_quantity
from ..estimators.registry import estimator_names, get_estimator

if TYPE_CHECKING:  # names used only in type hints (Matplotlib is loaded where a figure is drawn)
    import matplotlib.axes
    import matplotlib.figure
    import matplotlib.legend

    from ..analysis.schema import AnalysisRow

__all__ = [
    "save_figure", "check_drawable", "figure_mi", "figure_distances", "figure_title", "FIGURES", "plot_mi_panel",
    "plot_metric_panel", "plot_distance_panel", "plot_update_panel", "pair_summary", "estimator_variant",
    "estimate_kinds", "figure_headroom", "metric_names", "default_metric", "checkpoint_label", "figure_metrics",
    "legend_below"
]


def _pairs(rows):
    return sorted({(r["client_a"], r["client_b"]) for r in rows if r["client_b"] != ""})


def _clients(rows):
    return sorted({r["client_a"] for r in rows if r["client_b"] == ""})


def _finite(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = np.isfinite(ys)
    return xs[ok], ys[ok]


OUTSIDE_LABEL = "outside calibration (hollow)"
# How each kind of estimate (the table's ``estimate_kind``) is drawn and named. A lower bound
# has no line: it is a shaded region from the bound up (:func:`plot_mi_panel`).
KIND_STYLES = {"plain": "-", "shrinkage": ":"}
KIND_LABELS = {"plain": "estimate", "bound": "lower bound",
               "shrinkage": "Ledoit-Wolf shrinkage number, not an MI estimate"}
# What a panel with lower bounds says of them, and the legend entry of their shaded region.
BOUND_NOTE = "lower bound: its trend is not the MI's"
BOUND_LABEL = "lower bound ({pairs}): the MI lies in the shaded region above it"
BOUND_ALPHA = 0.25


PAIR_LINE = "mean over {n} client pairs"
PAIR_BAND = "range over pairs (min-max)"
CI_LABEL = "confidence intervals (union over pairs)"
NULL_LABEL = "null: 0 +- 2 sd (largest sd over pairs)"
NO_CI_LABEL = "no confidence intervals in this table"
CUT_LABEL = "y axis cut to the estimates: the null (0 +- 2 sd) lies below"
RUN_SD_LABEL = "+-1 sd over runs (mean over pairs)"
PANEL_ESTIMATORS = ("gaussian", "ksg")  # figure_mi's first panels, drawn or left blank; other estimators follow
# A permutation null of fewer permutations draws no band: its mean and sd are too rough to
# say where "above the null" starts (2 permutations give one sd from 2 values).
MIN_BAND_PERMUTATIONS = 20


def default_metric(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The metric a figure draws by default: "loss" if the table has it, else the first metric
    whose name contains "loss" (``train_loss``), else the first metric; None without metrics.

    Parameters
    ----------
    rows : list of dict
        An analysis table.

    Returns
    -------
    str or None

    Examples
    --------
    >>> from mianalysis.report.plots import default_metric
    >>> rows = [{"quantity": q, "client_a": "0", "client_b": ""} for q in ("accuracy", "train_loss")]
    >>> default_metric(rows)
    'train_loss'
    """
    names = metric_names(rows)
    if "loss" in names:
        return "loss"
    return next((n for n in names if "loss" in n), names[0] if names else None)


def checkpoint_label(record: Mapping[str, Any] | None = None) -> str:
    """What a table's checkpoints count: "round" for a federated dump, else "iteration".

    A dump recorded by :func:`mianalysis.flower.record_runs` (its meta has ``flower``) or by
    the federated simulator (``federated``) has one checkpoint per round.

    Parameters
    ----------
    record : dict, optional
        How the table was made, as for :func:`figure_title`: the keys are looked up in it and
        in its ``dump_meta`` and ``settings``.

    Returns
    -------
    str
    """
    rec = dict(record or {})
    sources = [rec, rec.get("dump_meta") or {}, rec.get("settings") or {}]
    federated = any(isinstance(src, Mapping) and ("flower" in src or "federated" in src) for src in sources)
    return "round" if federated else "iteration"


def _integer_ticks(ax):
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


LEGEND_FONTSIZE = 7


def legend_below(ax: matplotlib.axes.Axes, *, fontsize: float = LEGEND_FONTSIZE) -> matplotlib.legend.Legend | None:
    """Place `ax`'s legend below the axes, under its tick labels and x label, so that it
    covers no data; a label wider than the axes is wrapped onto more lines (at spaces) so
    that the legend stays within its panel's width.

    The legend lies outside the axes: draw into a figure with constrained layout (as
    :func:`figure_mi` does) or save with ``bbox_inches="tight"``, or it may be cut off.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    fontsize : float, default=7

    Returns
    -------
    matplotlib.legend.Legend or None
        The legend; None (and no legend) when the axes have no labelled artist.
    """
    import textwrap

    import matplotlib
    import matplotlib.figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import offset_copy

    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    fig = ax.get_figure(root=True)
    assert isinstance(fig, matplotlib.figure.Figure)  # an axes is always drawn in a figure
    # Characters of `fontsize` that fit the axes' width (the width before any layout, which
    # constrained layout only widens); about 0.55 em per character of the default sans font.
    width_pt = ax.get_position().width * fig.get_figwidth() * 72
    chars = max(24, int(width_pt / (0.55 * fontsize)))
    labels = [textwrap.fill(label, chars) if len(label) > chars else label for label in labels]
    # Below the x tick labels and the x label: their heights, pads and a small gap, in points.
    rc = matplotlib.rcParams
    tick = FontProperties(size=rc["xtick.labelsize"]).get_size_in_points()
    below = (rc["xtick.major.size"] + rc["xtick.major.pad"] + tick + rc["axes.labelpad"]
             + ax.xaxis.label.get_fontsize() + 6)
    anchor = offset_copy(ax.transAxes, fig=fig, y=-below, units="points")
    return ax.legend(handles, labels, fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                     bbox_transform=anchor, borderaxespad=0.0, frameon=False)


def _pair_rows(rows, quantity):
    """{iteration: [row of each client pair]} of one quantity, pairs in a fixed order."""
    by_it: dict[int, list[AnalysisRow]] = {}
    table = AnalysisTable.of(rows)
    for a, b in _pairs(table):
        for r in table.select(quantity, a, b):
            by_it.setdefault(r["iteration"], []).append(r)
    return dict(sorted(by_it.items()))


def _num(row, key):
    v = row.get(key, np.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def pair_summary(rows: Sequence[Mapping[str, Any]], quantity: str, *, relative_to_null: bool = False) -> dict[str, np.ndarray]:
    """Per iteration, the pairs' values of `quantity` summarised for a figure.

    Parameters
    ----------
    rows : list of dict
        An analysis table (:func:`mianalysis.analyze`).
    quantity : str
        A pair quantity ("mi_ksg", "euclidean", ...).
    relative_to_null : bool, default=False
        Subtract each row's ``null_mean`` from its value and interval.

    Returns
    -------
    dict of ndarray
        ``iteration``, ``mean``, ``low``, ``high`` (mean, min and max over the pairs with a
        finite value), ``ci_low``, ``ci_high`` (lowest and highest interval end over the
        pairs; NaN without intervals), ``null_sd`` (largest ``null_std``), ``spread`` (mean
        ``spread``), ``outside`` (some pair's ``outside_calibration`` is True), ``n``
        (pairs with a finite value) and ``infinite`` (iterations where some pair's value is
        infinite, not summarised).
    """
    out: dict[str, list] = {k: [] for k in ("iteration", "mean", "low", "high", "ci_low", "ci_high", "null_sd", "spread",
                           "outside", "n")}
    infinite = []
    for it, hits in _pair_rows(rows, quantity).items():
        vals = np.array([_num(r, "value") for r in hits])
        if np.isinf(vals).any():
            infinite.append(it)
        ok = np.isfinite(vals)
        if not ok.any():
            continue
        shift = np.array([_num(r, "null_mean") for r in hits]) if relative_to_null else np.zeros(len(hits))
        v = (vals - shift)[ok]
        lo = (np.array([_num(r, "ci_low") for r in hits]) - shift)[ok]
        hi = (np.array([_num(r, "ci_high") for r in hits]) - shift)[ok]
        has_ci = np.isfinite(lo) & np.isfinite(hi)
        sd = np.array([_num(r, "null_std") for r in hits])[ok]
        spread = np.array([_num(r, "spread") for r in hits])[ok]
        out["iteration"].append(it)
        out["mean"].append(v.mean())
        out["low"].append(v.min())
        out["high"].append(v.max())
        out["ci_low"].append(lo[has_ci].min() if has_ci.any() else np.nan)
        out["ci_high"].append(hi[has_ci].max() if has_ci.any() else np.nan)
        out["null_sd"].append(np.nanmax(sd) if np.isfinite(sd).any() else np.nan)
        out["spread"].append(np.nanmean(spread) if np.isfinite(spread).any() else np.nan)
        out["outside"].append(any(bool(r["outside_calibration"]) for r, good in zip(hits, ok) if good))
        out["n"].append(int(ok.sum()))
    res = {k: np.asarray(v, dtype=bool if k == "outside" else float) for k, v in out.items()}
    res["infinite"] = np.asarray(infinite, float)
    return res


def _has_null(rows, quantity):
    """True when every finite estimate of `quantity` has a finite null mean."""
    finite = [r for r in rows if r["quantity"] == quantity and r["client_b"] != "" and np.isfinite(_num(r, "value"))]
    return bool(finite) and all(np.isfinite(_num(r, "null_mean")) for r in finite)


def _pair_count_label(s):
    n = int(s["n"].max()) if len(s["n"]) else 0
    return PAIR_LINE.format(n=n) if n != 1 else "one client pair"


def _draw_pair_summary(ax, s, color, label, *, linestyle="-", band=True, bars=True):
    """The pairs' mean as a line, their min-max as a band, their intervals as bars (`band`,
    `bars`: whether those have a legend entry)."""
    line, = ax.plot(s["iteration"], s["mean"], marker="o", ms=4, color=color, label=label, zorder=3, ls=linestyle)
    if (s["n"] > 1).any():
        ax.fill_between(s["iteration"], s["low"], s["high"], color=color, alpha=0.3, lw=0,
                        label=PAIR_BAND if band else None)
    ci = np.isfinite(s["ci_low"]) & np.isfinite(s["ci_high"])
    if ci.any():
        ax.vlines(s["iteration"][ci], s["ci_low"][ci], s["ci_high"][ci], color=color, lw=1.5,
                  label=CI_LABEL if bars else None)
    return line


def estimate_kinds(rows: Sequence[Mapping[str, Any]], quantity: str) -> dict[int, str]:
    """The kind of estimate (``estimate_kind``: "plain", "shrinkage", "bound") of `quantity`
    at each iteration of a table: the kind of its client pairs' rows, or the least readable
    one where pairs differ ("shrinkage" before "bound" before "plain"). The rows of an
    estimator whose registry ``kind`` is "bound" are bounds, whatever their column says (a
    table read without the column calls them "plain").

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    quantity : str
        An MI quantity, such as "mi_gaussian".

    Returns
    -------
    dict of int -> str
        Iteration -> kind, for the iterations with a row of `quantity` between two clients.
    """
    order = ("shrinkage", "bound", "plain")
    # A bound estimator's rows are bounds even where a row's column says "plain".
    bound = is_bound_quantity(quantity)
    kinds: dict[int, str] = {}
    for r in AnalysisTable.of(rows):
        if r["quantity"] == quantity and r["client_b"] != "":
            kind = str(r.get("estimate_kind") or "plain")
            kind = "bound" if bound and kind == "plain" else kind
            it = int(r["iteration"])
            kinds[it] = min(kinds.get(it, kind), kind, key=lambda k: order.index(k) if k in order else 0)
    return kinds


def _kind_segments(iterations, kinds):
    """(kind, boolean mask over `iterations`) for each maximal run of consecutive drawn
    iterations of one kind, where a run also ends at an iteration that is not drawn."""
    every = sorted(kinds)
    segments: list[tuple[str, np.ndarray]] = []
    last_kind, last_pos = None, None
    for i, it in enumerate(iterations):
        kind = kinds.get(int(it), "plain")
        pos = every.index(int(it)) if int(it) in every else None
        if segments and kind == last_kind and pos is not None and last_pos is not None and pos == last_pos + 1:
            segments[-1][1][i] = True
        else:
            mask = np.zeros(len(iterations), bool)
            mask[i] = True
            segments.append((kind, mask))
        last_kind, last_pos = kind, pos
    return segments


def estimator_variant(rows: Sequence[Mapping[str, Any]], estimator: str, *, checkpoint: str = "iteration") -> str:
    """How `estimator`'s MI of this table was computed, in words, from its rows' ``estimate_kind``.

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    estimator : str
        A registered estimator.
    checkpoint : str, default="iteration"
        What the table's checkpoints count ("round" for a federated dump, see
        :func:`checkpoint_label`): the word that names them.

    Returns
    -------
    str
        For a Gaussian log-determinant estimator ("gaussian", "copula"): "bias-corrected",
        "Ledoit-Wolf shrinkage", or both with the iterations (rounds) where shrinkage was
        used; for another its registry label ("KSG"); "" when the table has no finite
        estimate of `estimator`.
    """
    hits = [r for r in AnalysisTable.of(rows) if r["quantity"] == f"mi_{estimator}" and np.isfinite(_num(r, "value"))]
    if not hits:
        return ""
    if not get_estimator(estimator).covariance:
        return get_estimator(estimator).label
    shrunk = sorted({r["iteration"] for r in hits if r["estimate_kind"] == "shrinkage"})
    if not shrunk:
        return "bias-corrected"
    if len(shrunk) == len({r["iteration"] for r in hits}):
        return "Ledoit-Wolf shrinkage"
    return f"bias-corrected; Ledoit-Wolf shrinkage at {checkpoint}s {', '.join(str(i) for i in shrunk)}"


def permutations_of(rows: Sequence[Mapping[str, Any]], estimator: str, record: Mapping[str, Any] | None = None) -> int | None:
    """How many permutations `estimator`'s permutation nulls in `rows` had: from `record`
    (an experiment's record or sidecar: ``permutations``, also under ``settings``), else the
    table's own ``settings["permutations"]``; a dict gives the estimator's entry. None when
    not recorded.

    Examples
    --------
    >>> from mianalysis.report.plots import permutations_of
    >>> permutations_of([], "ksg", {"permutations": {"gaussian": 50, "ksg": 2}})
    2
    """
    sources = [dict(record or {}), dict(record or {}).get("settings") or {}, getattr(rows, "settings", None) or {}]
    for src in sources:
        perms = src.get("permutations") if isinstance(src, Mapping) else None
        if isinstance(perms, Mapping):
            perms = perms.get(estimator)
        if isinstance(perms, (int, float)) and not isinstance(perms, bool):
            return int(perms)
    return None


def plot_mi_panel(ax: matplotlib.axes.Axes, rows: Sequence[Mapping[str, Any]], estimator: str, *,
                  permutations: int | None = None, xlabel: str = "iteration") -> None:
    """MI between clients vs iteration, summarised over the client pairs.

    When every estimate has a null (permutation or analytic), the panel shows the estimate
    minus its null mean, so that "above the null" reads as "above the grey band around 0"
    (the null's +-2 sd, the largest sd over pairs) at any scale; otherwise the estimate
    itself. The line is the mean over the client pairs, the shaded band their range (min to
    max), the vertical bars the union of the pairs' confidence intervals. The exact MI (rows
    "mi_exact", where the task knows it) is drawn as black lines, one per pair. Iterations
    where an estimate is outside the calibrated regime (``outside_calibration``
    of some pair) are drawn hollow, with one legend entry for them all; infinite
    estimates (identical samples) are not drawn and the legend says where they are.
    Points are joined only within one kind of estimate (``estimate_kind``, see
    :func:`estimate_kinds`), so a change of kind is a break in the line. A lower bound is no
    line and no point: at each of its iterations a lightly shaded block reaches from the
    bound (the pairs' mean; no range band, no interval bars, no hollow marker) to the top of
    the axes, where the MI lies; the panel's title says "lower bound: its trend is not the
    MI's" and the legend names the region a lower bound (and any of its iterations outside
    calibration). Ledoit-Wolf shrinkage numbers, which estimate no
    MI, are not drawn, and the legend names their iterations. A permutation null of fewer
    than :data:`MIN_BAND_PERMUTATIONS` permutations is not drawn (no band, and the estimate
    is not shown relative to it); the legend says so, as it says when the table holds no
    confidence intervals. When every estimate lies far above its null band (farther than
    three times the estimates' own range), the y axis is cut to the estimates so that
    their change is visible, and the legend says the null lies below.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    rows : list of dict
        An analysis table.
    estimator : str
        A registered estimator; the registry gives the panel's name and colour.
    permutations : int, optional
        How many permutations the estimator's permutation nulls had (see
        :func:`permutations_of`); default: the table's ``settings``, else not known (the
        null is drawn).
    xlabel : str, default="iteration"
        What the checkpoints count ("round" for a federated dump, see :func:`checkpoint_label`):
        the x label, and the word the legend and the title name checkpoints by.
    """
    quantity = f"mi_{estimator}"
    if permutations is None:
        permutations = permutations_of(rows, estimator)
    every_row = list(AnalysisTable.of(rows))  # typed columns (estimate_kind) even for rows read from old notes
    if permutations is not None and permutations < MIN_BAND_PERMUTATIONS and any(
            r["quantity"] == quantity and r.get("null_method") == "permutation" for r in every_row):
        few = permutations  # too rough a null: left out, as if the table had none
        every_row = [{**r, "null_mean": np.nan, "null_std": np.nan} if r["quantity"] == quantity else r
                     for r in every_row]
    else:
        few = None
    kinds = estimate_kinds(every_row, quantity)
    shrunk = [it for it, kind in kinds.items() if kind == "shrinkage"]
    # A shrinkage number estimates no MI: it is left out (the legend says where), and the
    # line is broken wherever the kind of estimate changes (plain, bound).
    rows = [r for r in every_row if not (r["quantity"] == quantity and r["iteration"] in shrunk)]
    relative = _has_null(rows, quantity)
    s = pair_summary(rows, quantity, relative_to_null=relative)
    color = get_estimator(estimator).color
    line = None
    labelled: set[str] = set()
    # A lower bound is drawn last, as a region up to the top of the axes: never a line with points.
    bound = np.array([kinds.get(int(it)) == "bound" for it in s["iteration"]], dtype=bool)
    for kind, keep in _kind_segments(s["iteration"], kinds):
        if kind == "bound":
            continue
        part = {k: (v[keep] if k != "infinite" else v) for k, v in s.items()}
        label = _pair_count_label(s) if not labelled else None
        drawn = _draw_pair_summary(ax, part, color, label, linestyle=KIND_STYLES[kind], band=not labelled,
                                   bars=not labelled)
        labelled.add(kind)
        line = line or drawn
    if line is None:  # nothing finite to draw as a line
        line, = ax.plot([], [], color=color)
        if shrunk and not bound.any():  # say why on the panel itself, over the table's iterations
            ax.text(0.5, 0.5, "no MI estimate to draw:\nevery finite value is a\nLedoit-Wolf shrinkage number\n"
                    "(runs <= 2 x the joint dimension,\nor a singular covariance)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9, color="0.3")
            ax.set_yticks([])
    if shrunk:  # the table's iterations on the axis, drawn or not (one drawn point alone would set it)
        ax.set_xlim(min(kinds) - 0.5, max(kinds) + 0.5)
        its = ", ".join(str(int(i)) for i in sorted(shrunk))
        ax.plot([], [], ls="none", marker="x", color="0.3",
                label=f"{xlabel} {its}: {KIND_LABELS['shrinkage']} (not drawn)")
    if relative:
        sd = s["null_sd"]
        ok = np.isfinite(sd)
        ax.fill_between(s["iteration"][ok], -2 * sd[ok], 2 * sd[ok], color="0.5", alpha=0.35, lw=0, label=NULL_LABEL)
        ax.axhline(0.0, color="0.4", lw=0.8)
        parts = [s[k][np.isfinite(s[k])] for k in ("low", "high", "ci_low", "ci_high")]
        values = np.concatenate(parts) if parts else np.array([])
        top = float(np.nanmax(2 * sd)) if ok.any() else 0.0
        if values.size and values.min() > top:
            lo, hi = float(values.min()), float(values.max())
            pad = max(hi - lo, 1e-9 * max(abs(hi), 1.0)) * 0.15
            if lo - top > 3 * (hi - lo + 2 * pad):
                ax.set_ylim(lo - pad, hi + pad)
                ax.plot([], [], ls="none", marker="v", color="0.4", label=CUT_LABEL)
    elif any(np.isfinite(_num(r, "null_mean")) for r in rows if r["quantity"] == quantity):
        null = pair_summary([{**r, "value": _num(r, "null_mean")} for r in rows if r["quantity"] == quantity],
                            quantity)
        null_sd = pair_summary([{**r, "value": _num(r, "null_std")} for r in rows if r["quantity"] == quantity],
                               quantity)
        if len(null["iteration"]) == len(null_sd["iteration"]):
            ax.fill_between(null["iteration"], null["mean"] - 2 * null_sd["high"], null["mean"] + 2 * null_sd["high"],
                            color="0.5", alpha=0.35, lw=0, label="null mean +- 2 sd (where estimated)")
    exact_label: str | None = "exact"
    table = AnalysisTable.of(rows)
    for a, b in _pairs(table):
        exact = table.select("mi_exact", a, b)
        if exact:
            it, val = _finite([r["iteration"] for r in exact], [r["value"] for r in exact])
            ax.plot(it, val, color="black", lw=1, label=exact_label)
            exact_label = None
    outside = s["outside"] & ~bound  # a bound gets no point, hollow or not; the legend names its iterations
    if outside.any():
        ax.plot(s["iteration"][outside], s["mean"][outside], ls="none", marker="o", ms=7, mfc="white",
                mec=line.get_color(), zorder=4)
        ax.plot([], [], ls="none", marker="o", ms=7, mfc="white", mec="0.3", label=OUTSIDE_LABEL)
    if len(s["infinite"]):
        its = ", ".join(str(int(i)) for i in s["infinite"])
        ax.plot([], [], ls="none", marker="$\\infty$", color="0.2", label=f"infinite at {xlabel} {its} (not drawn)")
    if len(s["iteration"]) and not (np.isfinite(s["ci_low"]) & np.isfinite(s["ci_high"])).any():
        ax.plot([], [], ls="none", label=NO_CI_LABEL)
    if few is not None:
        ax.plot([], [], ls="none", label=f"null of {few} permutations: too few for a band "
                                         f"(< {MIN_BAND_PERMUTATIONS}), not drawn")
    if bound.any():
        _draw_bounds(ax, s["iteration"][bound], s["mean"][bound], sorted(kinds), color,
                     BOUND_LABEL.format(pairs=_pair_count_label(s)))
        if (s["outside"] & bound).any():
            its = ", ".join(str(int(i)) for i in s["iteration"][s["outside"] & bound])
            ax.plot([], [], ls="none", label=f"lower bound outside calibration at {xlabel} {its}")
    variant = estimator_variant(every_row, estimator, checkpoint=xlabel)
    entry = get_estimator(estimator)
    ax.set_title(f"MI, {entry.display_name}" + (f": {variant}" if variant and variant != entry.label else "")
                 + (f"\n{BOUND_NOTE}" if bound.any() else ""), fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MI - null mean (bits)" if relative else "MI (bits)")
    ax.ticklabel_format(axis="y", useOffset=False)  # tick labels that read as bits, not as an offset
    _integer_ticks(ax)
    legend_below(ax)


def _draw_bounds(ax, iterations, values, every, color, label):
    """Lower bounds `values` at `iterations` as one shaded region: at each iteration a block
    from the bound to the top of the axes (raised when needed, so that the region above the
    highest bound shows), about 0.7 of the closest spacing of the table's iterations `every`
    wide. Separate blocks join no bound to the next: no edge that reads as a trend."""
    spacing = np.diff(np.asarray(every, float))
    half = 0.35 * (float(spacing[spacing > 0].min()) if (spacing > 0).any() else 1.0)
    # Every other artist is drawn: the y range that they and the bounds need decides the top.
    ax.update_datalim(np.column_stack([iterations, values]))
    ax.autoscale_view()
    low, high = ax.get_ylim()
    span = high - low if high > low else max(abs(high), 1.0)
    top = max(high, float(np.max(values)) + 0.3 * span)
    ax.set_ylim(low, top)
    x = np.ravel([(it - half, it + half, it + half) for it in iterations])[:-1]
    y = np.ravel([(v, v, np.nan) for v in values])[:-1]  # NaN: a gap between blocks
    ax.fill_between(x, y, top, color=color, alpha=BOUND_ALPHA, lw=0, label=label, zorder=2)


def plot_metric_panel(ax: matplotlib.axes.Axes, rows: Sequence[Mapping[str, Any]], metric: str | None = None, *,
                      xlabel: str = "iteration") -> None:
    """A recorded training metric (loss, accuracy) vs iteration, summarised over the clients.

    The line is the mean over the clients of each client's mean over runs, the dark band
    the clients' range (min to max), the light band +-1 sd over runs (the rows' ``spread``,
    averaged over the clients); the legend and the axis label say so. A checkpoint where no
    client has a value of the metric (it was not recorded there: NaN) is not drawn.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    rows : list of dict
        An analysis table.
    metric : str, optional
        A recorded metric (a per-client quantity), such as "loss" or "accuracy". Default:
        :func:`default_metric`.
    xlabel : str, default="iteration"
        What the checkpoints count ("round" for a federated dump, see :func:`checkpoint_label`).

    Raises
    ------
    ValueError
        If the table has no rows of `metric`, naming the metrics it has.
    """
    names = metric_names(rows)
    metric = default_metric(rows) if metric is None else metric
    if metric is None or metric not in names:
        raise ValueError(f"`metric` must be one of the table's recorded metrics {names}; got {metric!r}")
    by_it: dict[float, list[tuple[float, float]]] = {}
    table = AnalysisTable.of(rows)
    for c in _clients(table):
        for r in table.select(metric, c):
            by_it.setdefault(r["iteration"], []).append((_num(r, "value"), _num(r, "spread")))
    # Checkpoints without any finite value are not drawn (nan-statistics of them would warn).
    kept = [i for i in sorted(by_it) if np.isfinite([v for v, _ in by_it[i]]).any()]
    it = np.array(kept, dtype=np.float64)
    vals = [np.array([v for v, _ in by_it[i] if np.isfinite(v)]) for i in kept]
    sds = [np.array([s for _, s in by_it[i]]) for i in kept]
    mean = np.array([v.mean() for v in vals])
    n = max((len(v) for v in vals), default=0)
    color = "C3"
    sd = np.array([s[np.isfinite(s)].mean() if np.isfinite(s).any() else np.nan for s in sds])
    if np.isfinite(sd).any():
        ok = np.isfinite(sd)
        ax.fill_between(it[ok], (mean - sd)[ok], (mean + sd)[ok], color=color, alpha=0.12, lw=0,
                        label="+-1 sd over runs (mean over clients)")
    ax.plot(it, mean, marker="o", ms=4, color=color, label=f"mean over {n} clients" if n != 1 else "one client")
    if n > 1:
        ax.fill_between(it, [v.min() for v in vals], [v.max() for v in vals], color=color, alpha=0.3,
                        lw=0, label="range over clients (min-max)")
    ax.set_title(f"client {metric}", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{metric} (mean over runs)")
    _integer_ticks(ax)
    legend_below(ax)


def plot_distance_panel(ax: matplotlib.axes.Axes, rows: Sequence[Mapping[str, Any]], metric: str) -> None:
    """Mean paired distance between clients vs iteration, summarised over the client pairs.

    The line is the mean over the pairs, the dark band their range (min to max), the light
    band +-1 sd over runs (the rows' ``spread``, averaged over the pairs) and the vertical
    bars the union of the pairs' confidence intervals of the mean distance.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    rows : list of dict
        An analysis table.
    metric : {"euclidean", "manhattan", "chebyshev"}
    """
    s = pair_summary(rows, metric)
    color = "C2"
    if np.isfinite(s["spread"]).any():
        ok = np.isfinite(s["spread"])
        ax.fill_between(s["iteration"][ok], (s["mean"] - s["spread"])[ok], (s["mean"] + s["spread"])[ok],
                        color=color, alpha=0.12, lw=0, label=RUN_SD_LABEL)
    _draw_pair_summary(ax, s, color, _pair_count_label(s))
    ax.set_title(f"{metric.capitalize()} distance", fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylabel("distance between clients (mean over runs)")
    _integer_ticks(ax)
    legend_below(ax)


UPDATE_TITLES = {"cosine_update": "Cosine similarity of updates"}
UNDEFINED_LABEL = "no cosine: zero updates (the start)"


def plot_update_panel(ax: matplotlib.axes.Axes, rows: Sequence[Mapping[str, Any]], quantity: str = "cosine_update") -> None:
    """Mean cosine similarity of the clients' updates (parameters minus each run's start)
    vs iteration, summarised over the client pairs, on a fixed y axis from -1 to 1.

    Drawn as :func:`plot_distance_panel` draws a distance (the pairs' mean, their range,
    +-1 sd over runs clipped to [-1, 1], the union of the pairs' intervals), with a line at
    0, the cosine of unrelated updates. The start itself, where every update is zero and
    the cosine undefined (NaN), has no point: a dotted vertical line keeps its place on
    the x axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    rows : list of dict
        An analysis table with ``cosine_update`` rows (``analyze(metrics=[..., "cosine_update"])``).
    quantity : {"cosine_update"}, default="cosine_update"
    """
    check_choice(quantity, "quantity", sorted(UPDATE_TITLES))
    s = pair_summary(rows, quantity)
    color = "C4"
    ax.axhline(0.0, color="0.6", lw=0.8, zorder=1)
    if np.isfinite(s["spread"]).any():
        ok = np.isfinite(s["spread"])
        ax.fill_between(s["iteration"][ok], np.clip((s["mean"] - s["spread"])[ok], -1, 1),
                        np.clip((s["mean"] + s["spread"])[ok], -1, 1), color=color, alpha=0.12, lw=0,
                        label=RUN_SD_LABEL)
    if len(s["iteration"]):
        _draw_pair_summary(ax, s, color, _pair_count_label(s))
    # Checkpoints where no pair has a cosine (the start: zero updates) keep their place on the x axis.
    every = np.asarray(sorted(_pair_rows(rows, quantity)), dtype=float)
    undefined = np.setdiff1d(every, s["iteration"])
    if undefined.size:
        ax.vlines(undefined, -1, 1, colors="0.6", linestyles=":", lw=1, label=UNDEFINED_LABEL)
    if every.size:
        pad = 0.05 * (every.max() - every.min()) or 0.5
        ax.set_xlim(every.min() - pad, every.max() + pad)
    ax.set_ylim(-1.05, 1.05)  # the whole range of a cosine, with room for points at -1 and 1
    ax.set_yticks([-1.0, -0.5, 0.0, 0.5, 1.0])
    ax.set_title(UPDATE_TITLES[quantity], fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylabel("cos(update a, update b) (mean over runs)")
    _integer_ticks(ax)
    legend_below(ax)


def figure_title(rows: Sequence[Mapping[str, Any]], record: Mapping[str, Any] | None = None) -> str:
    """One line describing what a figure of `rows` shows: task, initial point, shared random
    streams, estimator variants and number of runs.

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    record : dict, optional
        What is known about how the table was made: an experiment's record (its table's
        sidecar ``NAME.csv.json``: ``task``, ``init``, ``shared``, ``permutations``, ``k``) or
        an analysis sidecar with the dump's ``meta`` added under ``dump_meta``. Keys looked up: ``task``,
        ``init``, ``shared``, ``k``, ``permutations``, then the same under ``dump_meta`` and
        ``settings``. Without it, the init and shared streams are "not recorded". For a dump
        whose checkpoints are rounds (:func:`checkpoint_label`: one recorded by
        :func:`mianalysis.flower.record_runs`, whose ``init`` and ``shared`` say what every
        client of a run starts from and shares), they are named "start" and "shared", and
        checkpoints are named rounds.

    Returns
    -------
    str

    Examples
    --------
    >>> from mianalysis.report.plots import figure_title
    >>> rows = [{"quantity": "mi_gaussian", "value": 1.0, "n_runs": 400, "note": "", "iteration": 1}]
    >>> figure_title(rows, {"task": "signal-rnn", "init": "per-run"})
    'signal-rnn; init per-run; shared streams: none; 400 runs; Gaussian MI bias-corrected'
    >>> figure_title(rows, {"dump_meta": {"flower": {}, "init": "global model of round 0",
    ...                                   "shared": ["the global model of every round"]}})
    'start: global model of round 0; shared: the global model of every round; 400 runs; Gaussian MI bias-corrected'
    """
    rec = dict(record or {})
    rounds = checkpoint_label(rec) == "round"
    sources = [rec, rec.get("dump_meta") or {}, rec.get("settings") or {}]

    def find(key):
        for src in sources:
            if isinstance(src, dict) and src.get(key) is not None:
                return src[key]
        return None

    parts = []
    task = find("task")
    if task:
        parts.append(str(task))
    init = find("init")
    start, streams = ("start", "shared") if rounds else ("init", "shared streams")  # rounds: what the recorder says
    parts.append((f"{start}: {init}" if rounds else f"init {init}") if init else f"{start} not recorded")
    shared = find("shared")
    if shared:
        parts.append(f"{streams}: " + ", ".join(shared if not isinstance(shared, str) else [shared]))
    elif record is not None and (init or task):  # recorded runs without `shared` shared nothing
        parts.append(f"{streams}: none")
    else:
        parts.append(f"{streams} not recorded")
    runs = sorted({int(r["n_runs"]) for r in rows if str(r.get("n_runs", "")) not in ("", "nan")})
    if runs:
        parts.append(f"{runs[0]} runs" if len(runs) == 1 else f"{runs[0]}-{runs[-1]} runs")
    for name in estimator_names():
        variant, entry = estimator_variant(rows, name, checkpoint=checkpoint_label(rec)), get_estimator(name)
        if not variant:
            continue
        if entry.covariance:
            parts.append(f"{entry.label} MI {variant}")
        else:
            k = find("k") if "k" in entry.arguments else None
            parts.append(f"{entry.label} k={k}" if k else entry.label)
    perms = find("permutations")
    if isinstance(perms, dict):  # of the estimators with rows ("auto" may run only some of those it may run)
        held = {str(r["quantity"]) for r in rows}
        perms = {e: n for e, n in perms.items() if f"mi_{e}" in held}
    if isinstance(perms, dict) and perms:
        parts.append("permutations " + ", ".join(f"{e} {n}" for e, n in perms.items()))
    elif perms:
        parts.append(f"{perms} permutations")
    return "; ".join(parts)


def _suptitle(fig, rows, title, record, fontsize=10):
    """The figure's title over its panels, each line wrapped (at "; " and spaces) to the
    figure's width, so that a one-panel figure's long title is not cut at both edges."""
    import textwrap

    text = figure_title(rows, record)
    # about 0.55 em per character of the default sans font (as legend_below), a margin each side
    chars = max(30, int(0.95 * fig.get_figwidth() * 72 / (0.55 * fontsize)))
    lines = [part for line in ([title, text] if title else [text])
             for part in (textwrap.wrap(line, chars, break_on_hyphens=False) or [""])]
    fig.suptitle("\n".join(lines), fontsize=fontsize)


def _figure(n_panels):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    # constrained layout leaves room for the legends below the panels (legend_below)
    return plt.subplots(1, n_panels, figsize=(5 * n_panels, 5.8), layout="constrained")


def figure_mi(rows: Sequence[Mapping[str, Any]], title: str | None = None, *, record: Mapping[str, Any] | None = None,
              metric: str | None = None) -> matplotlib.figure.Figure:
    """Figure 1/2 analogue: (a) Gaussian MI, (b) KSG MI, (c) a recorded metric (the loss).

    A table with MI rows of other registered estimators (such as "copula") gets one more
    panel for each, after the KSG panel. The x axes say "round" for a federated dump and
    "iteration" otherwise (:func:`checkpoint_label` of `record`).

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    title : str, optional
        First title line; the second, always drawn, is :func:`figure_title` of `rows` and
        `record`.
    record : dict, optional
        See :func:`figure_title`.
    metric : str, optional
        The recorded metric of the last panel. Default: :func:`default_metric` ("loss", else
        the first metric whose name contains "loss", such as Flower's ``train_loss``, else
        the first); the panel is left blank when the table has no metric.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If `metric` is not one of the table's metrics (naming them).
    """
    quantities = {r["quantity"] for r in rows}
    if metric is not None and metric not in metric_names(rows):
        raise ValueError(f"`metric` must be one of the table's recorded metrics {metric_names(rows)}; got {metric!r}")
    metric = default_metric(rows) if metric is None else metric
    xlabel = checkpoint_label(record)
    others = tuple(e for e in estimator_names() if e not in PANEL_ESTIMATORS and f"mi_{e}" in quantities)
    # The Gaussian and KSG panels stand first, drawn or blank, where the table has either;
    # a table of neither (analyze's default, "auto") has only its own estimators' panels.
    firsts = PANEL_ESTIMATORS if any(f"mi_{e}" in quantities for e in PANEL_ESTIMATORS) or not others else ()
    ests = firsts + others
    fig, axes = _figure(len(ests) + 1)
    for ax, est in zip(axes[:len(ests)], ests):
        if f"mi_{est}" in quantities:
            plot_mi_panel(ax, rows, est, permutations=permutations_of(rows, est, record), xlabel=xlabel)
        else:
            ax.set_axis_off()
    if metric is not None:
        plot_metric_panel(axes[-1], rows, metric, xlabel=xlabel)
    else:
        axes[-1].set_axis_off()
    _label_checkpoints(axes, xlabel)
    _suptitle(fig, rows, title, record)
    return fig


def figure_distances(rows: Sequence[Mapping[str, Any]], title: str | None = None, *, record: Mapping[str, Any] | None = None
                     ) -> matplotlib.figure.Figure:
    """Figure 3/4 analogue: Euclidean, Manhattan and Chebyshev distances vs iteration.

    A table with ``cosine_update`` rows gets a fourth panel beside them: the mean cosine
    similarity of the clients' updates (:func:`plot_update_panel`, y axis from -1 to 1).
    Parameters are those of :func:`figure_mi` (without `metric`).
    """
    quantities = {r["quantity"] for r in rows}
    updates = [q for q in UPDATE_TITLES if q in quantities]
    fig, axes = _figure(3 + len(updates))
    for ax, metric in zip(axes, ("euclidean", "manhattan", "chebyshev")):
        if metric in quantities:
            plot_distance_panel(ax, rows, metric)
        else:
            ax.set_axis_off()
    for ax, quantity in zip(axes[3:], updates):
        plot_update_panel(ax, rows, quantity)
    _label_checkpoints(axes, checkpoint_label(record))
    _suptitle(fig, rows, title, record)
    return fig


def figure_metrics(rows: Sequence[Mapping[str, Any]], title: str | None = None, *, record: Mapping[str, Any] | None = None
                   ) -> matplotlib.figure.Figure:
    """Every recorded metric of a table (loss, accuracy, ...), one panel each
    (:func:`plot_metric_panel`), in the order of :func:`metric_names`.

    Parameters are those of :func:`figure_distances`.

    Raises
    ------
    ValueError
        If the table has no recorded metric.
    """
    names = metric_names(rows)
    if not names:
        raise ValueError("the table has no recorded metric (per-client rows such as loss) to draw")
    fig, axes = _figure(len(names))
    xlabel = checkpoint_label(record)
    for ax, name in zip(np.atleast_1d(axes), names):
        plot_metric_panel(ax, rows, name, xlabel=xlabel)
    _suptitle(fig, rows, title, record)
    return fig


def _label_checkpoints(axes, xlabel):
    """The x label of every drawn panel: what the checkpoints count."""
    for ax in axes:
        if ax.axison:
            ax.set_xlabel(xlabel)


FIGURES = {"mi": figure_mi, "distances": figure_distances}
# The quantities each figure draws its main panels from: a table with none of them has nothing to draw.
FIGURE_QUANTITIES = {"mi": ("mi_gaussian", "mi_ksg"),
                     "distances": ("euclidean", "manhattan", "chebyshev", *UPDATE_TITLES)}


def check_drawable(rows: Sequence[Mapping[str, Any]], kind: str) -> None:
    """ValueError unless `rows` hold a quantity that figure `kind` draws, naming what is missing.

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    kind : {"mi", "distances"}
    """
    check_choice(kind, "kind", sorted(FIGURES))
    wanted = FIGURE_QUANTITIES[kind]
    if kind == "mi":  # every registered estimator has its panel (mi_copula, mi_bound: analyze's default)
        wanted = (*wanted, *(f"mi_{e}" for e in estimator_names() if f"mi_{e}" not in wanted))
    if not any(r["quantity"] in wanted for r in rows):
        held = sorted({str(r["quantity"]) for r in rows})
        has = f"it has only {', '.join(held)}" if held else "it has no rows"
        raise ValueError(f"nothing to draw for --kind {kind}: the table has no {' / '.join(wanted)} rows ({has}); "
                         "no figure was written")


def save_figure(rows: Sequence[Mapping[str, Any]], kind: str, path: str | os.PathLike, title: str | None = None, *,
                record: Mapping[str, Any] | None = None, metric: str | None = None) -> Path:
    """Draw figure `kind` ("mi" or "distances") from `rows` and save it to `path`.

    ValueError, and no file, when `rows` hold none of the quantities the figure draws
    (:func:`check_drawable`).

    Parameters
    ----------
    rows : list of dict
        An analysis table.
    kind : {"mi", "distances"}
    path : str or path-like
        The image file (its folder is created).
    title : str, optional
        First title line.
    record : dict, optional
        How the table was made, for the second title line (:func:`figure_title`) and the x
        axes ("round" for a federated dump, :func:`checkpoint_label`). Default: what a table
        `rows` read with its sidecar says, with its dump's meta while the dump is there
        (:meth:`AnalysisTable.record_with_dump`).
    metric : str, optional
        The recorded metric the "mi" figure draws (see :func:`figure_mi`); not for "distances".

    Returns
    -------
    pathlib.Path
    """
    from pathlib import Path

    import matplotlib.pyplot as plt

    check_drawable(rows, kind)
    if record is None and isinstance(rows, AnalysisTable):
        record = rows.record_with_dump()
    if kind == "mi":
        fig = figure_mi(rows, title, record=record, metric=metric)
    elif metric is not None:
        raise ValueError(f"`metric` is drawn by the 'mi' figure only; got kind={kind!r} and metric={metric!r}")
    else:
        fig = FIGURES[kind](rows, title, record=record)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")  # nothing cut off, the legends below the panels included
    plt.close(fig)
    return Path(path)


def figure_headroom(rows: Sequence[Mapping[str, Any]], title: str | None = None, *, panel: str = "design",
                    columns: int | None = None) -> matplotlib.figure.Figure:
    """Ratio of each combination rule's MSE to the plain average's, per checkpoint, with intervals.

    Parameters
    ----------
    rows : list of dict
        A headroom table (:func:`mianalysis.analysis.studies.headroom.headroom`), optionally with a column
        `panel` naming the design of each row: one panel per design, in order of appearance.
    title : str, optional
        The figure's title.
    panel : str, default="design"
        The column that splits the rows into panels (one panel when absent).
    columns : int, optional
        Panels per row of the figure (all in one row by default); the panels fill the rows
        in order, and the empty places of the last row are left out.

    Returns
    -------
    matplotlib.figure.Figure
        Points are the cross-fitted estimates with their intervals; open circles, where the
        table has them, the exact ratio (for fitted rules: of the rule's oracle weights).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    designs = list(dict.fromkeys(str(r.get(panel, "")) for r in rows))
    ncols = len(designs) if columns is None else min(check_int(columns, "columns", low=1), len(designs))
    nrows = -(-len(designs) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 4.2 * nrows), squeeze=False, sharey=True)
    for ax in axes.ravel()[len(designs):]:
        ax.remove()
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    colors = {rule: f"C{i}" for i, rule in enumerate(rules)}
    for ax, design in zip(axes.ravel(), designs):
        here = [r for r in rows if str(r.get(panel, "")) == design]
        for i, rule in enumerate(rules):
            sel = [r for r in here if r["rule"] == rule]
            if not sel:
                continue
            x = np.array([float(r["iteration"]) for r in sel]) + 0.25 * (i - (len(rules) - 1) / 2)
            y = np.array([_num(r, "ratio") for r in sel])
            low = np.array([_num(r, "ratio_low") for r in sel])
            high = np.array([_num(r, "ratio_high") for r in sel])
            ax.errorbar(x, y, yerr=[y - low, high - y], fmt="o-", ms=3, lw=1, capsize=2, color=colors[rule],
                        label=rule)
            exact = np.array([_num(r, "ratio_exact") for r in sel])
            if np.isfinite(exact).any():
                ax.plot(x, exact, "o", mfc="none", ms=7, color=colors[rule])
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_title(design, fontsize=9)
        ax.set_xlabel("iteration")
        _integer_ticks(ax)
    for row in axes:
        row[0].set_ylabel("MSE / MSE of the average")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
