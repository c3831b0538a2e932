"""experiments/_ladder.py (the learning-rate search of the aggregation experiments) and the
quick mode of experiments/aggregation_headroom_quadratic.py."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LADDER = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def ladder():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        spec = importlib.util.spec_from_file_location("experiment_ladder", ROOT / "experiments" / "_ladder.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    return module


def peaked(best_lr, fail_above=None, fail_below=None, ladder_module=None):
    """A run whose score peaks at `best_lr`; rates above `fail_above` diverge (a plain
    ValueError, or the ladder's Diverged), rates below `fail_below` do not train."""
    calls = []

    def run(lr):
        calls.append(lr)
        if fail_above is not None and lr > fail_above:
            raise (ValueError if ladder_module is None else ladder_module.Diverged)(f"diverged at {lr}")
        if fail_below is not None and lr < fail_below:
            raise ladder_module.DidNotTrain(f"did not train at {lr}")
        return {"value": np.array([[-abs(np.log(lr / best_lr))]])}

    return run, calls


def score(result):
    return (result["value"][:, -1].mean(),)


def summary(result):
    return {"value": float("nan") if result is None else float(result["value"][:, -1].mean())}


@pytest.mark.parametrize("best_lr, choice", [(0.1, "interior"), (0.01, "lowest rung of the ladder"),
                                             (1.0, "highest rung of the ladder")])
def test_search_steps_outwards_until_the_best_is_interior(ladder, best_lr, choice):
    run, calls = peaked(best_lr)
    best, tried, got = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best["lr"] == best_lr and got == choice
    assert [t["lr"] for t in tried] == calls and len(set(calls)) == len(calls)
    i = LADDER.index(best_lr)
    assert all(LADDER[j] in calls for j in (i - 1, i + 1) if 0 <= j < len(LADDER))
    if choice == "interior":  # nothing further out than the neighbours of the best
        assert set(calls) <= set(LADDER[i - 1:]) and max(calls) == 0.5


def test_failed_rates_close_a_side_and_all_failed_steps_down(ladder):
    run, calls = peaked(1.0, fail_above=0.1)
    best, tried, choice = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best["lr"] == 0.1 and choice == "interior"
    failed = [t for t in tried if t["diverged"]]
    assert {t["lr"] for t in failed} == {0.2, 0.5} and all(np.isnan(t["value"]) for t in failed)
    run, calls = peaked(1.0, fail_above=0.0)
    best, tried, choice = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best is None and choice == "all failed" and sorted(calls) == LADDER[:6]


def test_all_failed_steps_up_after_did_not_train_and_down_after_divergence(ladder):
    run, calls = peaked(1.0, fail_below=0.9, ladder_module=ladder)  # only 1.0 trains
    best, tried, choice = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best["lr"] == 1.0 and choice == "highest rung of the ladder" and calls == [0.2, 0.5, 1.0]
    assert [t["failure"] for t in tried] == ["did not train", "did not train", ""]
    run, calls = peaked(0.01, fail_above=0.015, ladder_module=ladder)  # Diverged: down
    best, tried, choice = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best["lr"] == 0.01 and calls == [0.2, 0.5, 0.1, 0.05, 0.02, 0.01]
    assert {t["failure"] for t in tried[:-1]} == {"diverged"}
    run, calls = peaked(1.0, fail_below=2.0, ladder_module=ladder)  # nothing trains: up to the top, then down
    best, tried, choice = ladder.search(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best is None and choice == "all failed" and calls == [0.2, 0.5, 1.0, 0.1, 0.05, 0.02, 0.01]

    def too_small_then_too_large(lr):  # 0.05 and 0.1 too small to train, 0.2 and up diverge; 0.02 trains
        if lr >= 0.2:
            raise ladder.Diverged("diverged")
        if lr >= 0.05:
            raise ladder.DidNotTrain("did not train")
        return {"value": np.array([[-abs(np.log(lr / 0.02))]])}

    best, tried, choice = ladder.search(too_small_then_too_large, LADDER, [0.05, 0.1], score=score, summary=summary)
    assert best["lr"] == 0.02 and [t["lr"] for t in tried] == [0.05, 0.1, 0.2, 0.02, 0.01]


def test_tune_searches_on_tuning_seeds_and_reports_the_evaluation_seeds(ladder):
    calls = []

    def run(lr, seed):
        calls.append((lr, seed))
        # the tuning seed prefers 0.1, the evaluation seed 0.5: the rerun must not re-choose
        best_lr = 0.1 if seed == 1 else 0.5
        return {"value": np.array([[-abs(np.log(lr / best_lr))]]), "seed": seed}

    best, tried, choice = ladder.tune(run, LADDER, [0.2, 0.5], score=score, summary=summary)
    assert best["lr"] == 0.1 and best["seed"] == 0 and choice == "interior"
    assert calls[-1] == (0.1, 0) and all(seed == 1 for _, seed in calls[:-1])
    assert best["value"][0, 0] == pytest.approx(-np.log(5))  # the evaluation seed's score at 0.1
    assert [t["lr"] for t in tried] == [lr for lr, _ in calls[:-1]]

    def fails_on_evaluation(lr, seed):
        if seed == 0:
            raise ladder.Diverged("diverged")
        return {"value": np.array([[-abs(np.log(lr / 0.1))]])}

    assert ladder.tune(fails_on_evaluation, LADDER, [0.2, 0.5], score=score, summary=summary)[::2] == (
        None, "failed on the evaluation seeds")
    with pytest.raises(ValueError, match="`tune_seed` and `eval_seed` must differ"):
        ladder.tune(run, LADDER, [0.2], score=score, summary=summary, tune_seed=0)


def test_paired_columns_blank_a_comparison_of_too_few_pairs(ladder):
    row = {}
    mine = np.array([1.0, np.nan, np.nan, np.nan])  # reached in 1 seed of 4
    assert ladder.paired_columns(row, "d_rounds", mine - 2.0, 4, min_pairs=2, pairs_key="pairs") == 1
    assert row == {"d_rounds": "", "d_rounds_low": "", "d_rounds_high": "", "pairs": 1}
    assert ladder.interval({**row, "aggregator": "fisher"}, "d_rounds", 4) == "-"
    mine = np.array([1.0, 2.0, np.nan, 4.0])
    ladder.paired_columns(row, "d_rounds", mine - 1.0, 4, min_pairs=2, pairs_key="pairs")
    assert row["pairs"] == 3 and row["d_rounds"] == pytest.approx(4 / 3, abs=1e-4) and row["d_rounds_low"] < 4 / 3
    assert ladder.interval({**row, "aggregator": "fisher"}, "d_rounds", 2) == (
        f"+1.33 [{row['d_rounds_low']:+.2f}, {row['d_rounds_high']:+.2f}]")
    assert ladder.interval({**row, "aggregator": "fedavg"}, "d_rounds", 2) == "-"


def test_bonferroni_widens_by_the_family_size(ladder):
    diffs = [[1.0, 2.0, 3.0], [0.5, 0.7, 0.9]]
    rows = [{"aggregator": "fedavg", "_d": [0.0, 0.0, 0.0]}] + [{"aggregator": "x", "_d": d} for d in diffs] + [
        {"aggregator": "y"}]
    assert ladder.bonferroni(rows, "_d", "d_error", 6, is_baseline=lambda r: r["aggregator"] == "fedavg") == 2
    assert all("_d" not in r for r in rows) and "d_error_bonf_low" not in rows[0]
    _, low, high, _ = ladder.paired(diffs[0], level=1 - 0.05 / 2)
    assert rows[1]["d_error_bonf_low"] == round(low, 6) and rows[1]["d_error_bonf_high"] == round(high, 6)
    assert low < ladder.paired(diffs[0])[1]


def test_paired_and_first_round(ladder):
    mean, low, high, n = ladder.paired([1.0, 2.0, 3.0, np.nan])
    assert (mean, n) == (2.0, 3)
    from scipy import stats
    half = stats.t.ppf(0.975, 2) * 1.0 / np.sqrt(3)
    assert low == pytest.approx(2 - half) and high == pytest.approx(2 + half)
    wider = ladder.paired([1.0, 2.0, 3.0], level=0.99)
    assert wider[1] < low and wider[2] > high
    assert np.isnan(ladder.paired([1.0])[1])
    hit = np.array([[False, True, True], [False, False, False], [True, False, True]])
    np.testing.assert_array_equal(ladder.first_round(hit), [1, np.nan, 0])


def test_quadratic_experiment_quick_mode(tmp_path):
    script = ROOT / "experiments" / "aggregation_headroom_quadratic.py"
    subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=600)
    with open(tmp_path / "aggregation_headroom_quadratic_quick.csv") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    for column in ("final_error", "d_error", "d_error_low", "d_error_high", "d_error_bonf_low", "d_error_bonf_high",
                   "d_error_mde", "drift_error", "rounds_to_target", "d_rounds", "lr_choice", "lrs_tried",
                   "gradients_per_round", "setting", "setting_choice", "settings_tried", "server"):
        assert column in reader.fieldnames
    assert [r["design"] for r in rows] == ["diagonal"] * 14 + ["diagonal-h0"] * 14
    assert [r["rule"] for r in rows[:14]] == [
        "FedAvg", "FedProx", "FedAvgM", "FedAdam", "FedYogi", "AND-mask (rescale)", "AND-mask (no rescale)",
        "Fisher (Hutchinson curvature)", "Fisher (Hutchinson, 10 probes)", "Fisher (Hutchinson, 100 probes)",
        "Fisher (empirical Fisher)", "Fisher (exact diagonal curvature)", "Inverse variance",
        "Inverse variance (after burn-in)"]
    # the cost column: E = 10 local steps, 2 gradients per Hutchinson probe, 1 per empirical-Fisher draw
    cost = {r["rule"]: int(r["gradients_per_round"]) for r in rows[:14]}
    assert cost["FedAvg"] == cost["FedProx"] == cost["FedAdam"] == cost["Fisher (exact diagonal curvature)"] == 10
    assert (cost["Fisher (Hutchinson curvature)"], cost["Fisher (Hutchinson, 10 probes)"],
            cost["Fisher (Hutchinson, 100 probes)"], cost["Fisher (empirical Fisher)"]) == (12, 30, 210, 11)
    for r in rows:
        tried = sorted(float(v) for v in r["lrs_tried"].split())
        if r["lr_choice"] == "interior":
            assert tried[0] < float(r["lr"]) < tried[-1]
        if r["rule"] != "FedAvg" and r["lr"] != "":
            assert float(r["d_error_bonf_low"]) <= float(r["d_error_low"]) <= float(r["d_error"])
            assert float(r["d_error_mde"]) >= 0
    # the baselines' settings were tuned on their grid, each recorded with the server it ran
    for rule, name, optimizer in [("FedProx", "mu", "sgd"), ("FedAvgM", "server eta", "momentum"),
                                  ("FedAdam", "server eta", "adam"), ("FedYogi", "server eta", "yogi")]:
        r = next(r for r in rows if r["rule"] == rule)
        value = float(r["setting"].split("=")[1])
        assert r["setting"].startswith(name + "=") and value in [float(v) for v in r["settings_tried"].split()]
        server = json.loads(r["server"])
        assert server["optimizer"] == optimizer
        assert (json.loads(r["client"])["proximal_mu"] if rule == "FedProx" else server["eta"]) == value
    assert json.loads(next(r for r in rows if r["rule"] == "FedAvgM")["server"])["momentum"] == 0.9
    # The control: identical clients with their exact curvature weight equally, so Fisher is FedAvg.
    control = {r["rule"]: r for r in rows if r["design"] == "diagonal-h0"}
    exact = control["Fisher (exact diagonal curvature)"]
    assert float(exact["d_error"]) == 0 and exact["final_error"] == control["FedAvg"]["final_error"]
    assert float(control["FedAvg"]["drift_error"]) == pytest.approx(0, abs=1e-12)
    assert float(rows[0]["drift_error"]) > 0  # heterogeneous clients: FedAvg drifts
    sidecar = json.loads((tmp_path / "aggregation_headroom_quadratic_quick.csv.json").read_text())
    assert sidecar["bonferroni_family"] == 26 and sidecar["provenance"][0]["argv"]
    assert len(sidecar["per_seed"]) == 28 * sidecar["plan"]["seeds"]
    assert (tmp_path / "aggregation_headroom_quadratic_quick.md").exists()
    assert (tmp_path / "aggregation_headroom_quadratic_quick.png").exists()
    # --replot draws the same figure from the table and sidecar alone (_ladder.read_results).
    from matplotlib.image import imread

    drawn = imread(tmp_path / "aggregation_headroom_quadratic_quick.png")
    (tmp_path / "aggregation_headroom_quadratic_quick.png").unlink()
    subprocess.run([sys.executable, str(script), "--quick", "--replot", "--out", str(tmp_path)], check=True,
                   cwd=tmp_path, capture_output=True, timeout=600)
    assert np.array_equal(imread(tmp_path / "aggregation_headroom_quadratic_quick.png"), drawn)


def test_read_results_gives_the_rows_curves_and_plan_a_replot_draws(ladder, tmp_path):
    (tmp_path / "t.csv").write_text("design,rule,d_error,d_error_low,lr\r\n"
                                    "a,FedAvg,,,0.1\r\na,Fisher,-0.5,-0.75,0.2\r\n")
    (tmp_path / "t.csv.json").write_text(json.dumps({
        "plan": {"seeds": 3}, "curves": [{"design": "a", "rule": "FedAvg", "mean_error_per_round": [2.0, 1.0]},
                                         {"design": "a", "rule": "Fisher", "mean_error_per_round": [2.0, 0.5]}]}))
    rows, curves, plan = ladder.read_results(tmp_path, "t", floats="d_error", curve_keys=("design", "rule"),
                                             curve_values="mean_error_per_round")
    assert rows == [{"design": "a", "rule": "FedAvg", "d_error": "", "d_error_low": "", "lr": "0.1"},
                    {"design": "a", "rule": "Fisher", "d_error": -0.5, "d_error_low": -0.75, "lr": "0.2"}]
    assert curves == {("a", "FedAvg"): [2.0, 1.0], ("a", "Fisher"): [2.0, 0.5]} and plan == {"seeds": 3}
