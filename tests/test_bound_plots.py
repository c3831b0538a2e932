"""Lower bounds in the MI figures (issue 52, item 5): a shaded region from the bound up, never a
line with points; the panel says the bound's trend is not the MI's; the legend names a lower bound."""

import importlib.util
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402

from mianalysis.report.plots import BOUND_NOTE, estimate_kinds, figure_mi, plot_mi_panel  # noqa: E402

from test_plots import PAIRS, pair_row  # noqa: E402  (the rows of the plot tests)


def bound_rows(iterations=(2, 4, 6), quantity="mi_bound", **extra):
    """Three pairs' bounds 0.1 it + 0.01 p (pair mean 0.1 it + 0.01), rising, with intervals."""
    return [pair_row(it, pair, quantity, 0.1 * it + 0.01 * p, ci_low=0.1 * it - 0.05, ci_high=0.1 * it + 0.05,
                     estimate_kind="bound", **extra)
            for it in iterations for p, pair in enumerate(PAIRS)]


def panel_text(ax):
    return "\n".join([ax.get_title(), *(t.get_text() for t in ax.texts)])


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def bound_regions(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection) and "lower bound" in str(c.get_label())]


def marker_lines(ax):
    """(x, y) of every drawn Line2D with point markers."""
    return [(np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)) for ln in ax.get_lines()
            if len(ln.get_xdata()) and ln.get_marker() not in (None, "None", "none", "", " ")]


def block_floors(region):
    """The lowest y of each polygon of a bound's region, by the polygon's middle x."""
    return {round(float(p.vertices[:, 0].min() + p.vertices[:, 0].max()) / 2, 6): float(p.vertices[:, 1].min())
            for p in region.get_paths()}


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def test_a_bound_is_a_shaded_region_from_the_bound_to_the_top_of_the_axes(ax):
    plot_mi_panel(ax, bound_rows(), "bound")
    regions = bound_regions(ax)
    assert len(regions) == 1
    floors = block_floors(regions[0])  # one block per iteration, from the pairs' mean bound
    assert sorted(floors) == [2, 4, 6]
    np.testing.assert_allclose([floors[it] for it in (2, 4, 6)], [0.21, 0.41, 0.61])
    top = max(float(p.vertices[:, 1].max()) for p in regions[0].get_paths())
    assert top == pytest.approx(ax.get_ylim()[1]) and top > 0.61
    assert 0 < regions[0].get_alpha() <= 0.3


def test_no_line_with_points_and_no_interval_bars_carry_a_bound(ax):
    rows = bound_rows(note="outside calibration: halves of 15 runs < 20 for one canonical pair",
                      outside_calibration=True)
    plot_mi_panel(ax, rows, "bound")
    values = {round(0.1 * it + 0.01 * p, 6) for it in (2, 4, 6) for p in range(3)} | {0.21, 0.41, 0.61}
    for x, y in marker_lines(ax):
        assert not {round(float(v), 6) for v in y} & values, (x, y)
    assert not [c for c in ax.collections if isinstance(c, LineCollection)]  # no vlines of the intervals
    assert not [ln for ln in ax.get_lines() if len(ln.get_xdata())]  # not even a thin line
    assert "lower bound outside calibration at iteration 2, 4, 6" in legend_texts(ax)


def test_the_panel_says_the_bounds_trend_is_not_the_mis_and_the_legend_names_a_lower_bound(ax):
    plot_mi_panel(ax, bound_rows(), "bound")
    assert "lower bound: its trend is not the MI's" in panel_text(ax)
    assert BOUND_NOTE == "lower bound: its trend is not the MI's"
    texts = legend_texts(ax)
    assert any(t.startswith("lower bound (mean over 3 client pairs)") for t in texts)
    assert not any("dashed" in t for t in texts)


def test_estimates_keep_their_line_with_points_and_no_bound_note(ax):
    rows = [pair_row(it, pair, "mi_ksg", 1.0 + 0.1 * it + 0.01 * p, estimate_kind="plain")
            for it in (2, 4, 6) for p, pair in enumerate(PAIRS)]
    plot_mi_panel(ax, rows, "ksg")
    (x, y), = marker_lines(ax)
    assert list(x) == [2, 4, 6]
    np.testing.assert_allclose(y, [1.21, 1.41, 1.61])
    assert not bound_regions(ax)
    assert BOUND_NOTE not in panel_text(ax)


def test_a_panel_of_estimates_then_bounds_draws_the_estimates_as_a_line_and_the_bounds_as_a_region(ax):
    rows = [pair_row(it, pair, "mi_gaussian", 1.0 + it, estimate_kind="plain") for it in (1, 2) for pair in PAIRS]
    rows += bound_rows((3, 4), quantity="mi_gaussian")
    plot_mi_panel(ax, rows, "gaussian")
    (x, y), = marker_lines(ax)
    assert list(x) == [1, 2] and list(y) == [2.0, 3.0]
    region, = bound_regions(ax)
    assert sorted(block_floors(region)) == [3, 4]
    assert BOUND_NOTE in panel_text(ax)
    assert legend_texts(ax)[0] == "mean over 3 client pairs"


def test_relative_to_the_null_the_region_starts_at_the_bound_minus_its_null_mean(ax):
    plot_mi_panel(ax, bound_rows(null_mean=0.05, null_std=0.01, null_method="permutation"), "bound",
                  permutations=50)
    floors = block_floors(bound_regions(ax)[0])
    np.testing.assert_allclose([floors[it] for it in (2, 4, 6)], [0.16, 0.36, 0.56])
    assert not marker_lines(ax)


def test_a_bound_estimators_rows_without_the_kind_column_are_bounds():
    # A table read from notes only (no estimate_kind column) calls every row "plain"; the
    # registry knows that "bound" gives bounds.
    rows = [{k: v for k, v in r.items() if k != "estimate_kind"} for r in bound_rows()]
    assert estimate_kinds(rows, "mi_bound") == {2: "bound", 4: "bound", 6: "bound"}
    fig, ax = plt.subplots()
    try:
        plot_mi_panel(ax, rows, "bound")
        assert len(bound_regions(ax)) == 1 and not marker_lines(ax)
    finally:
        plt.close(fig)


def _legend_problems():
    path = Path(__file__).resolve().parent / "test_plots_legends.py"
    spec = importlib.util.spec_from_file_location("plots_legends_checks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.legend_problems


def test_the_mi_figure_draws_the_bound_panel_as_a_region_with_its_legend_placed():
    rows = [pair_row(it, pair, "mi_ksg", 1.0 + 0.1 * it, estimate_kind="plain") for it in (2, 4, 6) for pair in PAIRS]
    rows += bound_rows()
    rows += [pair_row(it, (c, ""), "loss", 1.0 / it) for it in (2, 4, 6) for c in "012"]
    fig = figure_mi(rows)
    try:
        bound_ax = next(a for a in fig.axes if BOUND_NOTE in a.get_title())
        assert len(bound_regions(bound_ax)) == 1 and not marker_lines(bound_ax)
        assert [a for a in fig.axes if BOUND_NOTE in a.get_title()] == [bound_ax]  # the KSG panel has no note
        assert _legend_problems()(fig) == []
    finally:
        plt.close(fig)
