"""Figures of a dump whose checkpoints are rounds say "round" everywhere (issue 53, item 5).

A Flower dump (its meta has ``flower``) is labelled by rounds: the x axes, the legends
("infinite at round 0", "round 1: Ledoit-Wolf shrinkage ...", "lower bound outside
calibration at round 2"), the panels' titles ("shrinkage at rounds 1") and the figure's
title, which says what the recorder wrote of the clients' start and what they share rather
than "not recorded". The same rows without the round meta say "iteration". The Flower
recorder's meta is checked where flwr is installed (skipped otherwise).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mianalysis.report.plots import estimator_variant, figure_mi, figure_title, plot_mi_panel  # noqa: E402

PAIRS = [("0", "1"), ("0", "2"), ("1", "2")]
START = "global model of round 0, sent to every client"
SHARED = ["the global model of every round (not the global random generators: seeded apart for each client call)"]
FLOWER = {"dump_meta": {"flower": {"rounds": 3}, "init": START, "shared": SHARED}}


def _row(it, pair, quantity, value, **extra):
    return {"checkpoint": it, "iteration": it, "client_a": pair[0], "client_b": pair[1], "quantity": quantity,
            "value": value, "spread": np.nan, "null_mean": np.nan, "null_std": np.nan, "ci_low": np.nan,
            "ci_high": np.nan, "n_runs": 40, "note": "", **extra}


def _rows():
    """Round 0 infinite (every client holds the global model), a Gaussian shrinkage number at
    round 1, lower bounds with one outside calibration at round 2, and a recorded loss."""
    rows = [_row(0, pair, q, np.inf) for pair in PAIRS for q in ("mi_ksg", "mi_gaussian")]
    for it in (1, 2, 3):
        for p, pair in enumerate(PAIRS):
            rows.append(_row(it, pair, "mi_ksg", 1.0 + it + p))
            rows.append(_row(it, pair, "mi_gaussian", 2.0 + it, estimate_kind="shrinkage" if it == 1 else "plain"))
            rows.append(_row(it, pair, "mi_bound", 0.5 * it, estimate_kind="bound",
                             note="outside calibration: a test" if (it, p) == (2, 0) else ""))
        rows += [_row(it, (c, ""), "train_loss", 1.0 / it) for c in "012"]
    return rows


def _texts(fig):
    """Every text a reader sees: the figure's title, each drawn panel's title, labels, legend and notes."""
    texts = [fig.get_suptitle()]
    for ax in fig.axes:
        if not ax.axison:
            continue
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.texts)]
        if ax.get_legend() is not None:
            texts += [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()]
    return texts


def test_a_flower_figure_says_round_in_every_text_and_never_iteration():
    fig = figure_mi(_rows(), "a Flower run", record=FLOWER)
    try:
        texts = _texts(fig)
        assert not [t for t in texts if "iteration" in t], texts
        assert {ax.get_xlabel() for ax in fig.axes if ax.axison} == {"round"}
        joined = "\n".join(texts)
        for said in ("infinite at round 0 (not drawn)",
                     "round 1: Ledoit-Wolf shrinkage number, not an MI estimate (not drawn)",
                     "Ledoit-Wolf shrinkage at rounds 1",
                     "lower bound outside calibration at round 2"):
            assert said in joined, (said, texts)
        title = " ".join(fig.get_suptitle().split())  # wrapped to the figure's width
        assert "not recorded" not in title
        assert f"start: {START}; shared: {SHARED[0]}; 40 runs" in title, title
    finally:
        plt.close(fig)


def test_the_same_rows_without_rounds_say_iteration():
    fig = figure_mi(_rows(), record={"task": "signal-rnn", "init": "per-run"})
    try:
        texts = "\n".join(_texts(fig))
        assert "round" not in texts
        assert "infinite at iteration 0 (not drawn)" in texts and "shrinkage at iterations 1" in texts
    finally:
        plt.close(fig)


def test_the_words_are_set_where_a_panel_or_a_title_is_made_alone():
    rows = _rows()
    fig, ax = plt.subplots()
    try:
        plot_mi_panel(ax, rows, "gaussian", xlabel="round")
        assert ax.get_xlabel() == "round" and ax.get_title().endswith("shrinkage at rounds 1")
    finally:
        plt.close(fig)
    assert estimator_variant(rows, "gaussian") == "bias-corrected; Ledoit-Wolf shrinkage at iterations 1"
    assert estimator_variant(rows, "gaussian", checkpoint="round") == "bias-corrected; Ledoit-Wolf shrinkage at rounds 1"
    # A round dump recorded before the recorder wrote its start: said to be not recorded, in its words.
    assert figure_title(rows, {"dump_meta": {"flower": {}}}).startswith("start not recorded; shared not recorded; ")
    assert "Ledoit-Wolf shrinkage at rounds 1" in figure_title(rows, FLOWER)


def test_a_flower_recording_says_what_its_clients_start_from_and_share(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    import sys

    from mianalysis.flower import seeding

    # The apps draw from NumPy only: PyTorch's generator is seeded only if it is already loaded
    # (importing it for this test alone would take most of its time).
    monkeypatch.setattr(seeding, "_torch", lambda: sys.modules.get("torch"))
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    from mianalysis import analyze
    from mianalysis.flower import record_runs, with_partition_id
    from mianalysis.flower.recorder import RECORDED_INIT

    client, server = ClientApp(), ServerApp()

    @client.train()
    def train(msg, context):
        w = msg.content["arrays"]["w"].numpy() + np.random.standard_normal(2).astype(np.float32)
        return Message(with_partition_id(RecordDict({"arrays": ArrayRecord({"w": Array(w)}), "metrics": MetricRecord(
            {"num-examples": 1, "train_loss": float(np.sum(w ** 2))})}), context), reply_to=msg)

    @server.main()
    def main(grid, context):
        start = ArrayRecord({"w": Array(np.random.standard_normal(2).astype(np.float32))})
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0).start(grid, start, num_rounds=2)

    dump = record_runs(server, client, tmp_path / "d", num_partitions=2, rounds=2, seeds=range(8))
    assert dump.meta["init"] == RECORDED_INIT == START and dump.meta["shared"] == SHARED
    table = analyze(dump, estimators=["gaussian"], n_permutations=0)
    fig = figure_mi(table, record={"dump_meta": dump.meta})
    try:
        texts = _texts(fig)
        assert not [t for t in texts if "iteration" in t], texts
        assert f"start: {START}; shared: {SHARED[0]}" in " ".join(fig.get_suptitle().split())
    finally:
        plt.close(fig)
    own = record_runs(server, client, tmp_path / "own", num_partitions=2, rounds=2, seeds=[0],
                      meta={"shared": ["one data split drawn from the run's seed"]})
    assert own.meta["shared"] == ["one data split drawn from the run's seed"] and own.meta["init"] == START
