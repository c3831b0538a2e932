"""The experiments' figures drawn from their committed summary tables (issue 30, item 4):
what sources_of_dependence, digits_lenet_paper and aggregator_trends draw, and what they
leave out (shrinkage estimates, intervals a table does not hold)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


def _load(name):
    sys.path.insert(0, str(EXPERIMENTS))
    spec = importlib.util.spec_from_file_location(f"summary_fig_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sod_row(quantity, **extra):
    row = {"part": "gaussian", "init": "fixed", "shared": "data+noise", "seed": 0, "pair": "0-1",
           "quantity": quantity, "first_iteration": 10, "last_iteration": 40, "first_value": 1.0, "last_value": 4.0,
           "trend": "rising", "steps": "20: rising; 30: rising; 40: rising", "step_change": "", "step_ci_low": "",
           "step_ci_high": ""}
    row.update(extra)
    return row


def test_sources_figure_draws_the_last_step_with_its_interval_and_no_shrinkage():
    sod = _load("_sources_of_dependence_summary")  # the figure's module, shared with replot.py
    summary = [
        _sod_row("mi_gaussian", step_change="20: 1; 30: 0.5; 40: 1.5", step_ci_low="20: 0.5; 30: 0; 40: 1.2",
                 step_ci_high="20: 1.5; 30: 1; 40: 1.8"),
        _sod_row("mi_exact", step_change="20: 1; 30: 0.6; 40: 1.4"),
        _sod_row("mi_ksg", trend="not made: shrinkage estimate"),
        _sod_row("mi_ksg", pair="0-2"),  # an older summary's row: first to last, no interval
    ]
    points = {(p["quantity"], p["pair"]): p for p in sod.change_points(summary, "gaussian")}
    assert set(points) == {("mi_gaussian", "0-1"), ("mi_exact", "0-1"), ("mi_ksg", "0-2")}
    g = points["mi_gaussian", "0-1"]
    assert (g["step"], g["change"], g["low"], g["high"]) == ((30, 40), 1.5, 1.2, 1.8)
    e = points["mi_exact", "0-1"]
    assert e["step"] == (30, 40) and e["change"] == e["low"] == e["high"] == 1.4
    old = points["mi_ksg", "0-2"]
    assert old["step"] == (10, 40) and old["change"] == 3.0 and np.isnan(old["low"])


def test_sources_figure_takes_an_old_single_step_gaussian_interval_from_the_additive_row():
    sod = _load("_sources_of_dependence_summary")  # the figure's module, shared with replot.py
    base = {"part": "signal-paper", "init": "fixed", "shared": "nothing", "seed": 1, "pair": "1-2",
            "first_iteration": 1, "last_iteration": 2, "first_value": 0.5, "last_value": 0.75}
    summary = [{**base, "quantity": "mi_gaussian", "trend": "no detectable change", "steps": "2: no detectable change"},
               {**base, "quantity": "additive_model", "trend": "not contradicted",
                "steps": "2: predicted 0.1, estimated 0.25 [-0.5, 1] not contradicted"}]
    (point,) = sod.change_points(summary, "signal-paper")
    assert (point["step"], point["change"], point["low"], point["high"]) == ((1, 2), 0.25, -0.5, 1.0)


def test_replot_draws_both_summary_figures_from_the_committed_tables(tmp_path):
    import shutil

    replot = _load("replot")
    for name in ("sources_of_dependence/sources_of_dependence.csv", "digits_lenet_paper/digits_lenet_paper.csv",
                 "digits_lenet_paper/digits_lenet_paper.csv.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "figures" / name, tmp_path / name)
    done = replot.replot_summaries(tmp_path)
    assert [p.name for p in done] == ["sources_of_dependence.png", "digits_lenet_paper.png"]
    assert all(p.stat().st_size > 10_000 for p in done)


def test_digits_paper_figure_keeps_a_wide_accuracy_axis_and_no_shrinkage_gaussian():
    import matplotlib.pyplot as plt

    dlp = _load("_digits_lenet_paper_figure")  # the figure's module, shared with replot.py
    summary = []
    for cell, init in (("fixed-nothing", "fixed"), ("per-run-nothing", "per-run")):  # a row's start: its `init`
        for it in range(3):
            for pair in ("0-1", "0-2", "1-2"):
                # the Gaussian MI: plain from the fixed start (0.7, 1.7 above a null of 0.2), a
                # shrinkage number (50) from the per-run start
                gaussian = (0.9 + it, "") if cell.startswith("fixed") else (50.0, "ledoit-wolf shrinkage: 100 runs")
                for q, (v, note) in (("mi_ksg", (0.1 * it, "")), ("mi_gaussian", gaussian),
                                     ("euclidean", (it * 1e-4, ""))):
                    summary.append({"cell": cell, "init": init, "runs": 100, "quantity": q, "pair": pair,
                                    "iteration": it, "value": v, "ci_low": v - 0.01, "ci_high": v + 0.01,
                                    "null_mean": 0.2 if q == "mi_gaussian" else 0.0, "note": note})
            for c in "012":
                summary.append({"cell": cell, "init": init, "runs": 100, "quantity": "test_accuracy", "pair": c,
                                "iteration": it, "value": 0.9444 - 1e-4 * it, "ci_low": np.nan, "ci_high": np.nan,
                                "null_mean": np.nan, "note": "sd over runs 0.0003"})
    captured = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        captured["fig"] = fig
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        dlp.summary_figure(summary, "/dev/null" if sys.platform != "win32" else "nul", {"ksg": 100})
    finally:
        plt.Figure.savefig = original
    fig = captured["fig"]
    (accuracy,) = [ax for ax in fig.axes if ax.get_title().startswith("client test accuracy")]
    low, high = accuracy.get_ylim()
    assert high - low >= dlp.ACCURACY_SPAN_PP  # a 0.02 pp change is not drawn as a decline
    lines = [ln for ax in fig.axes for ln in ax.get_lines()]
    assert not any(np.allclose(ln.get_ydata(), 50.0) for ln in lines if len(ln.get_ydata()))  # no shrinkage curve
    (gaussian,) = [ax for ax in fig.axes if ax.get_title().startswith("Gaussian MI")]
    drawn = [ln.get_ydata() for ln in gaussian.get_lines() if len(ln.get_ydata()) > 2 or ln.get_marker() == "o"]
    assert any(np.allclose(y, [0.7 + 1, 0.7 + 2]) for y in drawn)  # the plain estimates, minus their null, from 1
    plt.Figure.savefig = keep
    try:  # a table of fixed-start cells only (another seed's): the per-run panel says why it is empty
        dlp.summary_figure([r for r in summary if r["cell"] == "fixed-nothing"], "/dev/null"
                           if sys.platform != "win32" else "nul", {"ksg": 100})
    finally:
        plt.Figure.savefig = original
    (per_run,) = [ax for ax in captured["fig"].axes if "mean, per-run start" in ax.get_title()]
    assert [t.get_text() for t in per_run.texts] == ["no per-run-start cell in this table"]
    assert not [t.get_text() for t in gaussian.texts]


def test_aggregator_trends_draws_no_shrinkage_curve_and_one_legend_off_the_panels(tmp_path):
    import matplotlib.pyplot as plt

    from mianalysis.analysis import AnalysisTable

    at = _load("aggregator_trends")
    rows = []
    for it in range(3):
        for a, b in (("0", "1"), ("0", "2"), ("1", "2")):
            for q in at.QUANTITIES:
                rows.append({"checkpoint": it, "iteration": it, "client_a": a, "client_b": b, "quantity": q,
                             "value": 1.0 + it, "spread": np.nan, "null_mean": 0.0 if q.startswith("mi") else np.nan,
                             "null_std": 0.1 if q.startswith("mi") else np.nan, "p_value": np.nan, "n_runs": 50,
                             "note": "ledoit-wolf shrinkage: 50 runs <= 2 x 60" if q == "mi_gaussian" else "",
                             "ci_low": 0.5 + it, "ci_high": 1.5 + it,
                             "null_method": "permutation" if q.startswith("mi") else "none"})
    tables = {rule: AnalysisTable(rows) for rule in at.RULES}
    seen = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        seen["fig"] = fig
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        at.plot(tables, {rule: [(t, 0.5, 0.1) for t in range(3)] for rule in at.RULES}, tmp_path / "a.png", "test")
    finally:
        plt.Figure.savefig = original
    fig = seen["fig"]
    gaussian = fig.axes[0]
    assert not gaussian.get_lines() and "shrinkage" in " ".join(t.get_text() for t in gaussian.texts)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    assert len(fig.axes[1].collections) >= 2 * len(at.RULES)  # each rule: its interval band and its null band
