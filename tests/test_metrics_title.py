"""The title over a figure's panels fits the figure: metrics.png, one panel of 5 inches, has a
title longer than its width (task, init, streams, runs, estimators, permutations), which was cut
at both edges; it is wrapped to the figure's width instead."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from mianalysis.report.plots import figure_metrics, figure_title  # noqa: E402


def metric_rows():
    rows = [{"checkpoint": it, "iteration": it, "client_a": c, "client_b": "", "quantity": "loss", "value": 1.0 + it,
             "spread": 0.1, "n_runs": 120, "note": ""} for it in (0, 1, 2) for c in "abc"]
    rows += [{"checkpoint": it, "iteration": it, "client_a": "a", "client_b": "b", "quantity": "mi_copula",
              "value": 1.0, "n_runs": 120, "note": ""} for it in (1, 2)]
    return rows


def test_a_one_panel_figures_long_title_is_wrapped_inside_the_figure():
    rows = metric_rows()
    record = {"task": "signal-rnn", "init": "per-run", "shared": [],
              "settings": {"permutations": {"copula": 100, "bound": 20, "ksg": 100}}}
    fig = figure_metrics(rows, "a run of its own", record=record)
    text = fig.get_suptitle()
    assert " ".join(text.split()) == " ".join(f"a run of its own\n{figure_title(rows, record)}".split())
    assert len(text.splitlines()) >= 3  # the long line wrapped
    fig.canvas.draw()
    box = fig._suptitle.get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox)
    plt.close(fig)
