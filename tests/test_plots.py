"""The figures drawn from analysis tables: what a reader sees (artists, labels, legends)."""

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mianalysis.report.plots import (CI_LABEL, NULL_LABEL, OUTSIDE_LABEL, PAIR_BAND, RUN_SD_LABEL,  # noqa: E402
                              estimator_variant, figure_distances, figure_mi, figure_title, pair_summary,
                              plot_distance_panel, plot_metric_panel, plot_mi_panel)

PAIRS = [("0", "1"), ("0", "2"), ("1", "2")]


def pair_row(it, pair, quantity, value, **extra):
    row = {"checkpoint": it, "iteration": it, "client_a": pair[0], "client_b": pair[1], "quantity": quantity,
           "value": value, "spread": np.nan, "null_mean": np.nan, "null_std": np.nan, "ci_low": np.nan,
           "ci_high": np.nan, "n_runs": 400, "note": ""}
    row.update(extra)
    return row


def mi_rows(note=""):
    """Three pairs at iterations 0 (infinite), 1, 2, 3: value 100 + 10 p + it, null mean 50, null sd 0.5 + p."""
    rows = [pair_row(0, pair, "mi_ksg", np.inf) for pair in PAIRS]
    for it in (1, 2, 3):
        for p, pair in enumerate(PAIRS):
            v = 100.0 + 10 * p + it
            rows.append(pair_row(it, pair, "mi_ksg", v, null_mean=50.0, null_std=0.5 + p, ci_low=v - 1,
                                 ci_high=v + 1, note=note if (it, p) == (2, 1) else ""))
    return rows


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def test_mi_panel_shows_pair_mean_minus_null_with_range_band_and_null_band(ax):
    plot_mi_panel(ax, mi_rows(), "ksg")
    mean_line = ax.get_lines()[0]
    assert list(mean_line.get_xdata()) == [1, 2, 3]
    np.testing.assert_allclose(mean_line.get_ydata(), [100 + 10 + it - 50 for it in (1, 2, 3)])
    texts = legend_texts(ax)
    assert texts[0] == "mean over 3 client pairs"
    assert {PAIR_BAND, NULL_LABEL, CI_LABEL} <= set(texts)
    assert "infinite at iteration 0 (not drawn)" in texts
    assert ax.get_ylabel() == "MI - null mean (bits)"
    bands = {c.get_label(): c.get_paths()[0].vertices[:, 1] for c in ax.collections if c.get_label() in
             (PAIR_BAND, NULL_LABEL)}
    assert bands[PAIR_BAND].min() == pytest.approx(101 - 50) and bands[PAIR_BAND].max() == pytest.approx(123 - 50)
    assert bands[NULL_LABEL].min() == pytest.approx(-5.0) and bands[NULL_LABEL].max() == pytest.approx(5.0)
    ci = next(c for c in ax.collections if c.get_label() == CI_LABEL)  # union of the pairs' intervals
    lows = sorted(seg[:, 1].min() for seg in ci.get_segments())
    highs = sorted(seg[:, 1].max() for seg in ci.get_segments())
    np.testing.assert_allclose(lows, [100 + it - 1 - 50 for it in (1, 2, 3)])
    np.testing.assert_allclose(highs, [120 + it + 1 - 50 for it in (1, 2, 3)])


def test_mi_panel_ticks_are_integers(ax):
    plot_mi_panel(ax, mi_rows(), "ksg")
    ax.figure.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_mi_panel_hollow_where_some_pair_is_outside_calibration(ax):
    plot_mi_panel(ax, mi_rows(note="outside calibration: > 4 joint dims"), "ksg")
    hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "white" and len(ln.get_xdata())]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [2]
    assert hollow[0].get_ydata()[0] == pytest.approx(112 - 50)
    assert OUTSIDE_LABEL in legend_texts(ax)


def test_mi_panel_without_null_shows_the_estimate(ax):
    rows = [{**r, "null_mean": np.nan, "null_std": np.nan} for r in mi_rows()]
    plot_mi_panel(ax, rows, "ksg")
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [111, 112, 113])
    assert ax.get_ylabel() == "MI (bits)" and NULL_LABEL not in legend_texts(ax)


def test_gaussian_panel_title_names_the_variant(ax):
    rows = [{**r, "quantity": "mi_gaussian", "note": "ledoit-wolf shrinkage: 400 runs <= 2 x 716 joint dimensions"}
            for r in mi_rows()]
    plot_mi_panel(ax, rows, "gaussian")
    assert ax.get_title() == "MI, Gaussian (log-det): Ledoit-Wolf shrinkage"
    rows = [{**r, "note": ""} if r["iteration"] == 3 else r for r in rows]
    assert estimator_variant(rows, "gaussian") == "bias-corrected; Ledoit-Wolf shrinkage at iterations 1, 2"
    assert estimator_variant([{**r, "note": ""} for r in rows], "gaussian") == "bias-corrected"


def test_mi_panel_breaks_the_line_between_kinds_and_leaves_shrinkage_out(ax):
    # Iteration 1 a shrinkage number, 2-3 plain estimates, 4-5 lower bounds: three kinds, never one line.
    kinds = {1: "shrinkage", 2: "plain", 3: "plain", 4: "bound", 5: "bound"}
    rows = [pair_row(it, pair, "mi_gaussian", 10.0 * it + p, estimate_kind=kind)
            for it, kind in kinds.items() for p, pair in enumerate(PAIRS)]
    plot_mi_panel(ax, rows, "gaussian")
    drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    assert [list(ln.get_xdata()) for ln in drawn] == [[2, 3]]  # the bounds are a shaded region, no line
    assert [ln.get_linestyle() for ln in drawn] == ["-"]
    texts = legend_texts(ax)
    assert any("lower bound" in t for t in texts)
    assert any(t.startswith("iteration 1: Ledoit-Wolf shrinkage") and "not drawn" in t for t in texts)
    assert texts.count(PAIR_BAND) == 1


def test_mi_panel_of_shrinkage_numbers_only_says_why_it_is_empty(ax):
    rows = [pair_row(it, pair, "mi_gaussian", 5.0, estimate_kind="shrinkage") for it in (2, 4) for pair in PAIRS]
    plot_mi_panel(ax, rows, "gaussian")
    assert not [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    assert any("Ledoit-Wolf shrinkage number" in t.get_text() for t in ax.texts)
    assert ax.get_xlim() == (1.5, 4.5)  # the iterations of the rows


def test_mi_panel_with_one_drawn_point_keeps_the_tables_iterations_on_the_axis(ax):
    # signal_rnn_fixed_init's Gaussian panel: the start (MI 0, constant parameters) drawn,
    # every trained checkpoint a shrinkage number: the axis spans iterations 0-8, not one point.
    rows = [pair_row(it, pair, "mi_gaussian", 0.0 if it == 0 else 70.0, estimate_kind="plain" if it == 0 else "shrinkage")
            for it in (0, 2, 4, 6, 8) for pair in PAIRS]
    plot_mi_panel(ax, rows, "gaussian")
    assert [list(ln.get_xdata()) for ln in ax.get_lines() if len(ln.get_xdata())][0] == [0]
    assert ax.get_xlim() == (-0.5, 8.5)


def test_mi_panel_breaks_the_line_where_a_shrinkage_iteration_is_left_out(ax):
    kinds = {1: "plain", 2: "shrinkage", 3: "plain"}
    rows = [pair_row(it, pair, "mi_gaussian", float(it), estimate_kind=kind)
            for it, kind in kinds.items() for pair in PAIRS]
    plot_mi_panel(ax, rows, "gaussian")
    assert [list(ln.get_xdata()) for ln in ax.get_lines() if len(ln.get_xdata())] == [[1], [3]]


def test_distance_panel_shows_run_sd_and_pair_range(ax):
    rows = [pair_row(it, pair, "euclidean", 1.0 + it + p, spread=0.1 * (p + 1), ci_low=0.9 + it + p,
                     ci_high=1.1 + it + p) for it in (0, 1, 2) for p, pair in enumerate(PAIRS)]
    plot_distance_panel(ax, rows, "euclidean")
    texts = legend_texts(ax)
    assert {RUN_SD_LABEL, PAIR_BAND, CI_LABEL, "mean over 3 client pairs"} <= set(texts)
    sd_band = next(c for c in ax.collections if c.get_label() == RUN_SD_LABEL).get_paths()[0].vertices[:, 1]
    assert sd_band.min() == pytest.approx(2.0 - 0.2) and sd_band.max() == pytest.approx(4.0 + 0.2)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [2.0, 3.0, 4.0])


def test_metric_panel_labels_the_sd_band(ax):
    rows = [pair_row(it, (c, ""), "loss", 2.0 - 0.1 * it + 0.01 * int(c), spread=0.3) for it in (0, 1, 2)
            for c in "012"]
    plot_metric_panel(ax, rows, "loss")
    assert "+-1 sd over runs (mean over clients)" in legend_texts(ax)
    assert "range over clients (min-max)" in legend_texts(ax)
    assert ax.get_ylabel() == "loss (mean over runs)"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [2.01, 1.91, 1.81])


def test_figure_title_from_rows_and_record():
    rows = mi_rows() + [{**r, "quantity": "mi_gaussian"} for r in mi_rows()]
    text = figure_title(rows, {"task": "gaussian-sgd", "init": "fixed", "shared": ["data"], "k": 3,
                               "permutations": 20})
    assert text == ("gaussian-sgd; init fixed; shared streams: data; 400 runs; Gaussian MI bias-corrected; "
                    "KSG k=3; 20 permutations")
    assert figure_title(rows) == ("init not recorded; shared streams not recorded; 400 runs; "
                                  "Gaussian MI bias-corrected; KSG")
    # a table's sidecar: k and permutations in settings, the dump's meta (without `shared`: none)
    sidecar = {"settings": {"k": 3, "permutations": 0}, "dump_meta": {"task": "signal-rnn", "init": "per-run"}}
    assert figure_title(rows, sidecar).startswith("signal-rnn; init per-run; shared streams: none; 400 runs")


def test_figures_carry_the_title_and_every_panel():
    rows = mi_rows() + [pair_row(it, pair, m, 1.0 + it, spread=0.1) for it in (0, 1, 2, 3) for pair in PAIRS
                        for m in ("euclidean", "manhattan", "chebyshev")]
    rows += [pair_row(it, (c, ""), "loss", 1.0, spread=0.1) for it in (0, 1, 2, 3) for c in "012"]
    record = {"task": "signal-rnn", "init": "per-run"}
    fig = figure_mi(rows, "my run", record=record)
    assert fig._suptitle.get_text().startswith("my run\nsignal-rnn; init per-run; shared streams: none")
    assert not fig.axes[0].axison and fig.axes[1].axison and fig.axes[2].get_title() == "client loss"
    plt.close(fig)
    fig = figure_distances(rows, record=record)
    assert [ax.get_title() for ax in fig.axes] == ["Euclidean distance", "Manhattan distance", "Chebyshev distance"]
    plt.close(fig)


def test_pair_summary_counts_only_finite_pairs():
    rows = mi_rows()
    rows[3]["value"] = np.nan
    s = pair_summary(rows, "mi_ksg")
    assert list(s["n"]) == [2, 3, 3] and list(s["infinite"]) == [0]


# ------------------------------------------------------------------ recorded metrics and rounds
def metric_rows(name, its=(0, 1, 2), clients="01", missing=()):
    """Per-client rows of metric `name`: value 2 - 0.5 it + 0.1 client, NaN at (it, client) in `missing`."""
    return [pair_row(it, (c, ""), name, np.nan if (it, c) in missing else 2.0 - 0.5 * it + 0.1 * int(c), spread=0.2)
            for it in its for c in clients]


@pytest.mark.parametrize("names, expected", [
    (["accuracy", "loss", "train_loss"], "loss"),
    (["accuracy", "train_loss", "val_loss"], "train_loss"),
    (["accuracy", "val"], "accuracy"),
    ([], None),
])
def test_the_default_metric_is_the_loss_like_one(names, expected):
    from mianalysis.report.plots import default_metric, metric_names

    rows = mi_rows() + metric_rows("nongaussian_share") + [r for n in names for r in metric_rows(n)]
    assert metric_names(rows) == names and default_metric(rows) == expected  # a diagnostic is not a metric


def test_a_flower_dumps_train_loss_gets_a_loss_panel_with_rounds():
    rows = mi_rows() + metric_rows("accuracy") + metric_rows("train_loss")
    flower = {"dump_meta": {"flower": {"rounds": 2}}}
    fig = figure_mi(rows, record=flower)
    try:
        assert fig.axes[-1].get_title() == "client train_loss"
        assert [ax.get_xlabel() for ax in fig.axes if ax.axison] == ["round", "round"]  # KSG and the metric panel
    finally:
        plt.close(fig)
    fig = figure_mi(rows, metric="accuracy", record={"dump_meta": {"federated": {}}})
    try:
        assert fig.axes[-1].get_title() == "client accuracy" and fig.axes[-1].get_xlabel() == "round"
    finally:
        plt.close(fig)
    fig = figure_mi(rows, record={"task": "signal-rnn"})
    try:
        assert {ax.get_xlabel() for ax in fig.axes if ax.axison} == {"iteration"}
    finally:
        plt.close(fig)
    fig = figure_distances([pair_row(it, p, "euclidean", 1.0 + it) for it in (0, 1) for p in PAIRS], record=flower)
    try:
        assert fig.axes[0].get_xlabel() == "round"
    finally:
        plt.close(fig)


def test_an_unknown_metric_is_refused_naming_the_recorded_ones(tmp_path):
    from mianalysis.report.plots import save_figure

    rows = mi_rows() + metric_rows("train_loss")
    with pytest.raises(ValueError, match=r"`metric` must be one of the table's recorded metrics \['train_loss'\]; "
                                         r"got 'loss'"):
        figure_mi(rows, metric="loss")
    with pytest.raises(ValueError, match=r"`metric` is drawn by the 'mi' figure only"):
        save_figure([pair_row(0, PAIRS[0], "euclidean", 1.0)], "distances", tmp_path / "d.png", metric="loss")
    assert save_figure(rows, "mi", tmp_path / "m.png", metric="train_loss").exists()


def test_a_metric_missing_at_some_checkpoints_draws_the_others_without_warnings(ax):
    # Not recorded at checkpoint 0 (no client) nor for client 1 at checkpoint 1.
    rows = metric_rows("loss", clients="012", missing={(0, "0"), (0, "1"), (0, "2"), (1, "1")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's "Mean of empty slice" / "All-NaN slice" would fail here
        plot_metric_panel(ax, rows)
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [1.0, 2.0]
    np.testing.assert_allclose(line.get_ydata(), [1.5 + 0.1, 1.0 + 0.1])  # clients 0, 2 at 1; all three at 2
    band = next(c for c in ax.collections if c.get_label() == "range over clients (min-max)").get_paths()[0]
    assert band.vertices[:, 1].min() == pytest.approx(1.0) and band.vertices[:, 1].max() == pytest.approx(1.7)


def test_a_writer_loop_without_a_loss_at_checkpoint_0_gives_a_figure_without_warnings(tmp_path):
    from mianalysis import DumpWriter, analyze

    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0, 1, 2], runs=30, chunk_size=30,
                        meta={"flower": {"rounds": 2}}) as w:
            for run in w.missing_runs():
                for c in "ab":
                    for t in (0, 1, 2):
                        w.record(run=run, client=c, checkpoint=t, params=rng.standard_normal(2),
                                 metrics=None if t == 0 else {"train_loss": 1.0 / t})
        table = analyze(w.dump, out=tmp_path / "t.csv")
        fig = figure_mi(table, record={"dump_meta": w.dump.meta})
    try:
        panel = fig.axes[-1]
        assert panel.get_title() == "client train_loss" and panel.get_xlabel() == "round"
        assert list(panel.get_lines()[0].get_xdata()) == [1.0, 2.0]
        np.testing.assert_allclose(panel.get_lines()[0].get_ydata(), [1.0, 0.5])
    finally:
        plt.close(fig)


def test_save_figure_labels_rounds_from_the_dump_a_table_read_from_disk_names(tmp_path, monkeypatch):
    import shutil

    from mianalysis import DumpWriter, analyze
    from mianalysis.analysis import AnalysisTable
    from mianalysis.report.plots import save_figure

    rng = np.random.default_rng(1)
    with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0, 1, 2], runs=30, chunk_size=30,
                    meta={"flower": {"rounds": 2}}) as w:
        for run in w.missing_runs():
            for c in "ab":
                for t in (0, 1, 2):
                    w.record(run=run, client=c, checkpoint=t, params=rng.standard_normal(2))
    analyze(w.dump, estimators=["gaussian"], n_permutations=0, out=tmp_path / "t.csv")
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)  # save_figure closes what it drew: keep it to look at
    try:
        for kind in ("mi", "distances"):  # no record=: the table's sidecar names the dump, whose meta has rounds
            save_figure(AnalysisTable.read(tmp_path / "t.csv"), kind, tmp_path / f"{kind}.png")
        assert [{ax.get_xlabel() for ax in fig.axes if ax.axison} for fig in drawn] == [{"round"}] * 2
        save_figure([dict(r) for r in AnalysisTable.read(tmp_path / "t.csv")], "mi", tmp_path / "rows.png")
        shutil.rmtree(tmp_path / "d")  # rows without their table, or a table whose dump is gone: iterations
        save_figure(AnalysisTable.read(tmp_path / "t.csv"), "mi", tmp_path / "gone.png")
        assert [{ax.get_xlabel() for ax in fig.axes if ax.axison} for fig in drawn[2:]] == [{"iteration"}] * 2
    finally:
        monkeypatch.undo()
        for fig in drawn:
            plt.close(fig)


def test_a_null_of_too_few_permutations_draws_no_band_and_says_so(ax):
    from mianalysis.report.plots import MIN_BAND_PERMUTATIONS, permutations_of

    rows = [{**r, "null_method": "permutation"} for r in mi_rows()]
    plot_mi_panel(ax, rows, "ksg", permutations=2)
    texts = legend_texts(ax)
    assert NULL_LABEL not in texts and f"null of 2 permutations: too few for a band (< {MIN_BAND_PERMUTATIONS}), " \
                                      "not drawn" in texts
    assert ax.get_ylabel() == "MI (bits)"  # not relative to a null that rough
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [110 + it for it in (1, 2, 3)])
    fig, other = plt.subplots()
    plot_mi_panel(other, rows, "ksg", permutations=MIN_BAND_PERMUTATIONS)  # enough: the band is back
    assert NULL_LABEL in legend_texts(other) and other.get_ylabel() == "MI - null mean (bits)"
    plt.close(fig)
    assert permutations_of(rows, "ksg", {"permutations": {"gaussian": 50, "ksg": 2}}) == 2
    assert permutations_of(rows, "ksg", {"settings": {"permutations": 7}}) == 7
    assert permutations_of(rows, "ksg") is None


def test_figure_mi_reads_the_permutations_from_the_record():
    rows = [{**r, "null_method": "permutation"} for r in mi_rows()]
    fig = figure_mi(rows, record={"permutations": {"ksg": 2}})
    assert any("too few for a band" in t for ax in fig.axes if ax.get_legend() for t in legend_texts(ax))
    plt.close(fig)


def test_estimates_far_above_their_null_get_an_axis_that_shows_their_change(ax):
    from mianalysis.report.plots import CUT_LABEL

    far = [{**r, **{k: r[k] + 1000 for k in ("value", "ci_low", "ci_high")}} for r in mi_rows()]
    plot_mi_panel(ax, far, "ksg")  # 1050 to 1074 bits above a null of sd <= 2.5: the axis is cut to them
    low, high = ax.get_ylim()
    assert 1045 < low < 1050 and 1074 < high < 1079 and CUT_LABEL in legend_texts(ax)
    fig, near = plt.subplots()
    rows = mi_rows()  # 50 to 74 bits above the null: within 3 times their range of it, not cut
    plot_mi_panel(near, rows, "ksg")
    assert near.get_ylim()[0] < 0 and CUT_LABEL not in legend_texts(near)
    plt.close(fig)


def test_a_table_without_intervals_says_so(ax):
    from mianalysis.report.plots import NO_CI_LABEL

    plot_mi_panel(ax, [{**r, "ci_low": np.nan, "ci_high": np.nan} for r in mi_rows()], "ksg")
    assert NO_CI_LABEL in legend_texts(ax) and CI_LABEL not in legend_texts(ax)
