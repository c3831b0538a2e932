"""Legends that cover no data and stay in their panel and in the figure (issue 30).

`legend_problems` renders a figure with Agg and compares every legend's window extent with
the figure's bbox, with the other panels and legends, and with the display coordinates of
every drawn line, band and marker. The synthetic tables have the shape of the two figures
where legends went wrong: signal_rnn_fixed_init_mi (a Gaussian panel of shrinkage numbers
only, whose long legend ran past the panel's left edge) and digits_lenet_long_mi (KSG
estimates highest at the first iterations, where the legend covered them).
"""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.path import Path as MplPath  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from mianalysis.report.plots import figure_distances, figure_mi, legend_below, plot_mi_panel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("0", "1"), ("0", "2"), ("1", "2")]
TOLERANCE = 1.0  # display pixels


def _artist_paths(ax):
    """(what, display path, filled) of every visible line, band, bar and marker of `ax`."""
    out = []
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) == 0:
            continue
        if line.get_linestyle() not in ("None", "none", "", " ") and len(xy) > 1:
            out.append((f"line {line.get_label()!r}", MplPath(xy), False))
        if line.get_marker() not in (None, "None", "none", "", " "):
            out.extend((f"marker of {line.get_label()!r}", MplPath(np.array([p, p])), False) for p in xy)
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        transform = coll.get_transform()
        filled = len(np.atleast_1d(coll.get_facecolor())) > 0 and np.asarray(coll.get_facecolor()).size > 0
        for path in coll.get_paths():
            out.append((f"collection {coll.get_label()!r}", transform.transform_path(path), filled))
        offsets = np.asarray(coll.get_offsets(), dtype=float)
        if offsets.size and len(coll.get_paths()) == 1 and not filled:
            out.extend((f"point of {coll.get_label()!r}", MplPath(np.array([p, p])), False)
                       for p in coll.get_offset_transform().transform(offsets))
    return out


def legend_problems(fig: Figure) -> list[str]:
    """Every way a legend of `fig` is misplaced, in words (empty: none).

    A legend is misplaced when its window extent leaves the figure; when an axes legend
    reaches beyond its axes' left or right edge (it has left its panel); when it overlaps
    another visible axes or another legend; or when a line, band, bar or marker drawn in
    any axes passes through it (within that axes' clip box).
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    figure_box = fig.bbox
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    legends += [(None, legend) for legend in fig.legends]
    problems = []
    for i, (owner, legend) in enumerate(legends):
        box = legend.get_window_extent(renderer)
        name = f"legend of {owner.get_title()!r}" if owner is not None else "figure legend"
        if (box.x0 < figure_box.x0 - TOLERANCE or box.y0 < figure_box.y0 - TOLERANCE
                or box.x1 > figure_box.x1 + TOLERANCE or box.y1 > figure_box.y1 + TOLERANCE):
            problems.append(f"{name} {box.bounds} leaves the figure {figure_box.bounds}")
        if owner is not None:
            if box.x0 < owner.bbox.x0 - TOLERANCE or box.x1 > owner.bbox.x1 + TOLERANCE:
                problems.append(f"{name} x {box.x0:.0f}-{box.x1:.0f} leaves its panel "
                                f"x {owner.bbox.x0:.0f}-{owner.bbox.x1:.0f}")
        for j, (_, other) in enumerate(legends):
            if j != i and Bbox.intersection(box, other.get_window_extent(renderer)) is not None:
                overlap = Bbox.intersection(box, other.get_window_extent(renderer))
                if overlap.width > TOLERANCE and overlap.height > TOLERANCE:
                    problems.append(f"{name} overlaps another legend")
        for ax in fig.axes:
            if not ax.get_visible() or not ax.axison:
                continue
            inside = Bbox.intersection(box, ax.bbox)
            if inside is None or inside.width <= TOLERANCE or inside.height <= TOLERANCE:
                continue
            if ax is not owner:
                problems.append(f"{name} overlaps the panel {ax.get_title()!r}")
            for what, path, filled in _artist_paths(ax):
                if path.intersects_bbox(inside, filled=filled):
                    problems.append(f"{name} covers {what} of the panel {ax.get_title()!r}")
    return problems


def row(it, pair, quantity, value, **extra):
    out = {"checkpoint": it // 2, "iteration": it, "client_a": pair[0], "client_b": pair[1], "quantity": quantity,
           "value": value, "spread": np.nan, "null_mean": np.nan, "null_std": np.nan, "ci_low": np.nan,
           "ci_high": np.nan, "n_runs": 2000, "note": "", "estimate_kind": "plain"}
    out.update(extra)
    return out


def loss_rows(iterations):
    return [row(it, (c, ""), "loss", 4.4 / (1 + it / 3) + 0.1 * int(c), spread=0.3) for it in iterations
            for c in "012"]


def lenet_long_rows():
    """digits_lenet_long's shape: 10 checkpoints; Gaussian shrinkage numbers at every one
    (infinite at iteration 0); KSG highest at the first iterations (8.35 -> 7.23 bits),
    hollow (outside calibration), with intervals and a 10-permutation null."""
    iterations = list(range(0, 21, 2))
    rows = loss_rows(iterations)
    for it in iterations:
        for p, pair in enumerate(PAIRS):
            if it == 0:
                rows += [row(0, pair, "mi_gaussian", np.inf), row(0, pair, "mi_ksg", np.inf)]
                continue
            rows.append(row(it, pair, "mi_gaussian", 400.0 + it, estimate_kind="shrinkage", null_mean=1.0,
                            null_std=0.1, null_method="permutation"))
            v = 7.2 + 1.15 * np.exp(-(it - 2) / 4) + 0.02 * p
            rows.append(row(it, pair, "mi_ksg", v, ci_low=v - 0.08, ci_high=v + 0.08, null_mean=0.0, null_std=0.01,
                            null_method="permutation", outside_calibration=True))
    return rows


def rnn_fixed_init_rows():
    """signal_rnn_fixed_init's shape: 4 checkpoints; Gaussian shrinkage only; KSG near its
    null (a 20-permutation band), no intervals."""
    iterations = [0, 2, 4, 6, 8]
    rows = loss_rows(iterations)
    for it in iterations:
        for p, pair in enumerate(PAIRS):
            if it == 0:
                rows += [row(0, pair, "mi_gaussian", np.inf), row(0, pair, "mi_ksg", np.inf)]
                continue
            rows.append(row(it, pair, "mi_gaussian", 300.0, estimate_kind="shrinkage", null_mean=1.0, null_std=0.1,
                            null_method="permutation"))
            rows.append(row(it, pair, "mi_ksg", 0.1 + 0.03 * p - 0.002 * it, null_mean=0.08, null_std=0.05,
                            null_method="permutation"))
    return rows


TABLES = {"digits_lenet_long": (lenet_long_rows, {"permutations": {"gaussian": 20, "ksg": 10}}),
          "signal_rnn_fixed_init": (rnn_fixed_init_rows, {"permutations": {"gaussian": 20, "ksg": 20}})}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_mi_and_distance_figures_have_legends_that_cover_no_data(name):
    make, record = TABLES[name]
    rows = make()
    fig = figure_mi(rows, title=name, record=record)
    assert sum(ax.get_legend() is not None for ax in fig.axes) == 3  # every panel keeps its legend
    assert legend_problems(fig) == []
    plt.close(fig)
    distances = [row(r["iteration"], (r["client_a"], r["client_b"]), metric, 0.1 * r["iteration"], spread=0.05)
                 for r in rows if r["quantity"] == "mi_ksg" for metric in ("euclidean", "manhattan", "chebyshev")]
    fig = figure_distances(distances, title=name)
    assert legend_problems(fig) == []
    plt.close(fig)


def test_the_check_catches_a_legend_over_the_first_points_and_one_past_the_panel():
    """Legends inside the axes, as before issue 30 (`ax.legend(fontsize=7)`), on
    digits_lenet_long's shape: the Gaussian one runs past its panel's edge, and a KSG one in
    the upper left corner covers the first (highest) points. The check must say so, or it
    could not catch a regression."""
    fig = figure_mi(lenet_long_rows(), title="digits_lenet_long", record=TABLES["digits_lenet_long"][1])
    for ax in fig.axes:
        if ax.get_legend() is not None:
            ax.legend(fontsize=7, loc="upper left" if "KSG" in ax.get_title() else "best")
    problems = legend_problems(fig)
    plt.close(fig)
    assert any("covers" in p and "KSG" in p for p in problems), problems
    assert any("leaves its panel" in p and "Gaussian" in p for p in problems), problems


def test_the_check_catches_a_legend_outside_the_figure():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    problems = legend_problems(fig)
    plt.close(fig)
    assert any("leaves the figure" in p for p in problems), problems


def test_legend_below_wraps_a_label_wider_than_its_axes_and_keeps_short_ones():
    fig, ax = plt.subplots(figsize=(3, 3), layout="constrained")
    long = "iteration 2, 4, 6, 8, 10, 12, 14, 16, 18, 20: Ledoit-Wolf shrinkage number, not an MI estimate"
    ax.plot([0, 1], [1, 0], label=long)
    ax.plot([0, 1], [0, 1], label="short")
    legend = legend_below(ax)
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[1] == "short" and "\n" in texts[0] and texts[0].replace("\n", " ") == long
    assert legend_problems(fig) == []
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])  # nothing labelled: no legend
    assert legend_below(ax) is None and ax.get_legend() is None
    plt.close(fig)


def test_a_single_mi_panel_in_a_plain_figure_saved_tight_keeps_its_legend(tmp_path):
    """plot_mi_panel on a user's axes: the legend lies below them; saving with
    bbox_inches='tight' (as save_figure does) keeps all of it in the image."""
    fig, ax = plt.subplots()
    plot_mi_panel(ax, lenet_long_rows(), "ksg", permutations=10)
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    assert box.y1 < ax.bbox.y0  # below the axes
    fig.savefig(tmp_path / "panel.png", bbox_inches="tight")
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    assert tight.y0 * fig.dpi <= box.y0 + TOLERANCE
    plt.close(fig)


def _experiment(name):
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    return module


def test_fedavg_vs_fedsgd_draws_the_replicates_range_with_a_legend_off_the_curves(tmp_path, monkeypatch):
    fvf = _experiment("fedavg_vs_fedsgd")
    rounds = np.arange(40)
    replicates, curves = {}, {}
    for partition in ("iid", "shards"):
        for model in ("mlp", "cnn"):
            for i, label in enumerate(("fedsgd E=1 B=inf", "fedavg E=5 B=10")):
                reps = {r: list(0.95 * (1 - np.exp(-(rounds + 1) / (5 + 5 * i + 3 * r)))) for r in (0, 1)}
                replicates[(partition, model, label)] = reps
                curves[(partition, model, label)] = list(np.mean(list(reps.values()), axis=0))
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    fvf.plot(curves, tmp_path / "a.png", {"replicates": 2}, replicates=replicates)
    (fig,) = figures
    assert legend_problems(fig) == []
    (legend,) = fig.legends
    assert "2 replicates: range (band); line: mean" in [t.get_text() for t in legend.get_texts()]
    ax = fig.axes[0]
    band = next(c for c in ax.collections if len(c.get_paths()))
    ys = band.get_paths()[0].vertices[:, 1]
    key = ("iid", "cnn", "fedsgd E=1 B=inf")  # the first line of the first panel (CNN, IID)
    lo = np.minimum(*replicates[key].values())
    hi = np.maximum(*replicates[key].values())
    assert np.isclose(ys.min(), lo.min()) and np.isclose(ys.max(), hi.max())
    with pytest.raises(ValueError, match="is not the mean of its replicate curves"):
        fvf.plot({key: [0.0] * 40}, tmp_path / "b.png", replicates={key: replicates[key]})
    with pytest.raises(ValueError, match="have \\[40\\] rounds, the mean 39"):
        fvf.plot({key: curves[key][:39]}, tmp_path / "b.png", replicates={key: replicates[key]})


def test_replicate_curves_splits_a_history_by_replicate():
    fvf = _experiment("fedavg_vs_fedsgd")
    history = [{"round": t, "replicate": r, "test_accuracy": 0.1 * t + r} for t in range(3) for r in (0, 1)]
    assert fvf.replicate_curves(history) == {0: [0.0, 0.1, 0.2], 1: [1.0, 1.1, 1.2]}
    with pytest.raises(ValueError, match=r"replicates \[1\] lack rounds"):
        fvf.replicate_curves(history[:-1])


def test_every_figure_replot_draws_from_the_committed_tables_has_its_legends_placed(tmp_path, monkeypatch):
    """experiments/replot.py on a copy of the committed tables: no legend of any figure it
    draws covers data, leaves its panel or leaves the figure (each figure checked as it is saved)."""
    figures = tmp_path / "figures"
    figures.mkdir()
    for path in (ROOT / "figures").glob("*/*"):
        if path.suffix in (".csv", ".json"):
            (figures / path.parent.name).mkdir(exist_ok=True)
            shutil.copy(path, figures / path.parent.name / path.name)
    replot = _experiment("replot")
    problems = {}

    def checked_savefig(self, fname, *args, **kwargs):
        """The check in place of the save: the legends are placed once the figure is drawn
        (legend_problems draws it), and writing every png would only add time."""
        problems[Path(fname).name] = legend_problems(self)

    monkeypatch.setattr(Figure, "savefig", checked_savefig)
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    done = replot.main(figures)
    assert done and set(problems) >= {Path(p).name for p in done}
    assert {name: found for name, found in problems.items() if found} == {}
    assert json.loads((figures / "fedavg_vs_fedsgd" / "fedavg_vs_fedsgd_curves.json").read_text())  # the table it read was copied


def test_rerun_at_table_rates_keeps_each_replicates_curve_and_compares_with_the_table(tmp_path):
    """A one-row table (MLP, IID, 2 rounds): the rerun writes per-replicate curves whose mean
    is the mean curve, and a check row that says whether the table's numbers came back."""
    import csv

    fvf = _experiment("fedavg_vs_fedsgd")
    row = {"partition": "iid", "model": "mlp", "algorithm": "fedavg", "E": 1, "B": 10, "u": 2, "lr": 0.5,
           "lrs_tried": "0.5", "target": 0.93, "rounds": "", "max_rounds": 2, "final_accuracy": 0.0,
           "speedup_vs_fedsgd": "", "seconds": 0.0}

    def write_table(r):
        with open(tmp_path / "t.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(r))
            writer.writeheader()
            writer.writerow(r)
        (tmp_path / "t.csv.json").write_text(json.dumps({"plan": {"replicates": 2, "rounds": 2}}))

    write_table(row)
    (check,) = fvf.rerun_at_table_rates(tmp_path / "t.csv", tmp_path)
    assert check["same"] is False and check["final_accuracy_difference"] == check["final_accuracy_rerun"]
    (entry,) = json.loads((tmp_path / "fedavg_vs_fedsgd_curves.json").read_text())
    reps = [r["accuracy"] for r in entry["replicates"]]
    assert [r["replicate"] for r in entry["replicates"]] == [0, 1] and all(len(r) == 3 for r in reps)
    np.testing.assert_allclose(np.mean(reps, axis=0), entry["accuracy"], rtol=0, atol=1e-12)
    assert reps[0] != reps[1]  # two replicates, two trainings
    assert (tmp_path / "fedavg_vs_fedsgd_accuracy.png").stat().st_size > 0
    write_table({**row, "final_accuracy": check["final_accuracy_rerun"]})
    (again,) = fvf.rerun_at_table_rates(tmp_path / "t.csv", tmp_path)
    assert again["same"] is True and again["final_accuracy_difference"] == 0.0
    with pytest.raises(FileNotFoundError, match="needs the table"):
        fvf.rerun_at_table_rates(tmp_path / "missing.csv", tmp_path)


def _global_rows(with_uncertainty):
    """aggregator_trends_global's shape: 4 rules x 3 rounds x 3 pairs x 3 quantities, as
    dependence_given_global writes them (or, without `with_uncertainty`, as tables before
    the intervals and nulls, read back from CSV: strings, no such columns)."""
    from mianalysis.analysis.studies.global_dependence import QUANTITIES

    given = {}
    for k, rule in enumerate(("fedavg", "median", "and_mask", "geometric_mask")):
        rows = []
        for t in (1, 2, 3):
            for i, pair in enumerate(PAIRS):
                for q, level in zip(QUANTITIES, (20.0, 3.0, 7.0)):
                    value = level / t + 0.3 * k + 0.1 * i
                    r = {"rule": rule, "iteration": t, "global_checkpoint": t - 1, "client_a": pair[0],
                         "client_b": pair[1], "quantity": q, "value": value, "n_runs": 150, "n_features": 9}
                    if with_uncertainty:
                        r.update(se=0.2, ci_low=value - 0.4, ci_high=value + 0.4, null_mean=0.0, null_std=0.05,
                                 p_value=0.0)
                    else:
                        r = {key: str(v) for key, v in r.items()}
                    rows.append(r)
        given[rule] = rows
    return given


@pytest.mark.parametrize("with_uncertainty", [True, False])
def test_aggregator_trends_global_draws_intervals_and_nulls_with_legends_below(tmp_path, monkeypatch,
                                                                              with_uncertainty):
    at = _experiment("aggregator_trends")
    figures = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figures.append(self))
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    given = _global_rows(with_uncertainty)
    at.plot_global(given, tmp_path / "g.png", "test")
    (fig,) = figures
    assert legend_problems(fig) == []
    assert not fig.legends and all(ax.get_legend() is not None for ax in fig.axes)
    for ax in fig.axes:
        fig.canvas.draw()
        assert ax.get_legend().get_window_extent().y1 < ax.bbox.y0  # below the axes
    cmi = fig.axes[1]
    assert "| global(t-1)" in cmi.get_title() and "output bias" in cmi.get_title()
    labels = [t.get_text().replace("\n", " ") for t in cmi.get_legend().get_texts()]
    bands = [c for c in cmi.collections if len(c.get_paths()) and len(c.get_paths()[0].vertices)]
    if with_uncertainty:
        # each rule's band spans its pairs' lowest ci_low to highest ci_high; one null band
        assert len(bands) == 4 + 1
        ys = bands[0].get_paths()[0].vertices[:, 1]
        fedavg = [r for r in given["fedavg"] if r["quantity"] == "cmi_given_global"]
        assert np.isclose(ys.min(), min(r["ci_low"] for r in fedavg))
        assert np.isclose(ys.max(), max(r["ci_high"] for r in fedavg))
        null = bands[-1].get_paths()[0].vertices[:, 1]
        assert np.isclose(null.min(), -0.1) and np.isclose(null.max(), 0.1)
        assert any("150 - 9 runs" in label for label in labels)
        assert any("95 % interval of the 3 client pairs" in label for label in labels)
    else:
        assert bands == []
        assert any("without intervals or nulls" in label for label in labels)
        assert "no intervals or nulls" in fig.get_suptitle()
