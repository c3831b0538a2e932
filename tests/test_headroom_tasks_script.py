"""experiments/headroom_tasks.py's seeds: the summary across seeds, and the reuse of a table
it wrote (rows read back as the table holds them; another table's settings refused).
The sampling itself is mianalysis.analysis.studies.headroom's and the sampler's, tested beside them."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("headroom_tasks_script", ROOT / "experiments" / "headroom_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(script, design, seed, iteration, rule, ratio, low, high):
    name, preset, shared, _ = script.DESIGNS[design]
    return {"design": design, "task": name, "preset": preset, "shared": " ".join(shared), "seed": seed,
            "iteration": iteration, "checkpoint": iteration, "reference": "client central", "n_clients": 3,
            "n_params": 850, "rule": rule, "weights": "cross-fitted, 2 folds", "mse": 1.23456789e-8,
            "mse_low": 1.2e-8, "mse_high": 1.3e-8, "ratio": ratio, "ratio_low": low, "ratio_high": high,
            "fit_inflation": float("nan"), "mse_exact": float("nan"), "exact_note": "", "n_runs": 500, "note": ""}


def test_seed_summary_is_the_t_interval_over_seeds(script):
    design = list(script.DESIGNS)[2]
    ratios, highs = [0.93, 0.95, 0.94], [0.94, 0.96, 1.01]
    rows = [_row(script, design, s, 4, "inverse_variance", r, r - 0.01, h) for s, (r, h) in enumerate(zip(ratios, highs))]
    rows += [_row(script, design, s, 4, "blue_coordinate", 0.9, 0.89, 0.91) for s in (0, 1)]
    (first, second) = script.seed_summary(rows)
    half = stats.t.ppf(0.975, 2) * np.std(ratios, ddof=1) / math.sqrt(3)  # 4.303 * 0.01 / 1.732
    assert first["rule"] == "inverse_variance" and first["n_seeds"] == 3 and first["seeds"] == "0 1 2"
    assert first["ratio_mean"] == pytest.approx(0.94)
    assert (first["ratio_mean_low"], first["ratio_mean_high"]) == pytest.approx((0.94 - half, 0.94 + half))
    assert half == pytest.approx(0.02484, abs=1e-5)
    assert (first["ratio_min"], first["ratio_max"], first["seed_high_max"]) == (0.93, 0.95, 1.01)
    assert first["every_seed_below_1"] is False  # seed 2's interval reaches 1.01
    assert second["every_seed_below_1"] is True and second["ratio_mean_low"] == pytest.approx(0.9)
    one = script.seed_summary(rows[:1])[0]
    assert one["n_seeds"] == 1 and math.isnan(one["ratio_mean_low"])


def _write(script, tmp_path, rows, runs=500, rules=None, designs=None):
    table = script.write_csv(rows, tmp_path / "t.csv", float_format=".6g")
    script.write_sidecar(table, {"runs": runs, "rules": list(rules or script.RULE_LIST),
                                 "designs": designs or script._designs_record(), "command": "x"})
    return table


def test_a_reused_table_reads_back_as_it_was_written(script, tmp_path):
    design = list(script.DESIGNS)[2]
    rows = [_row(script, design, s, it, "inverse_variance", 0.935229 + 1e-9 * s, 0.926665, 0.943794)
            for s in (0, 1) for it in (1, 4)]
    parts, record = script.reused_rows(_write(script, tmp_path, rows), 500)
    assert sorted(parts) == [(design, 0), (design, 1)] and record["command"] == "x"
    assert script.formatted(parts[(design, 0)]) == script.formatted(rows[:2])
    assert parts[(design, 1)][0]["iteration"] == 1 and isinstance(parts[(design, 1)][0]["mse"], float)


def test_a_table_without_a_seed_column_is_seed_0(script, tmp_path):
    design = list(script.DESIGNS)[3]
    rows = [{k: v for k, v in _row(script, design, 0, 5, "mean", 1.0, 1.0, 1.0).items() if k != "seed"}]
    parts, _ = script.reused_rows(_write(script, tmp_path, rows), 500)
    assert list(parts) == [(design, 0)]
    assert list(parts[(design, 0)][0])[:5] == ["design", "task", "preset", "shared", "seed"]


def test_reuse_refuses_another_tables_settings(script, tmp_path):
    design = list(script.DESIGNS)[2]
    table = _write(script, tmp_path, [_row(script, design, 0, 1, "mean", 1.0, 1.0, 1.0)])
    with pytest.raises(ValueError, match=r"`--reuse`: .* has runs=500 .* this run has runs=40"):
        script.reused_rows(table, 40)
    other = script._designs_record() | {design: {"task": "digits-lenet", "preset": "long", "shared": [], "every": 1}}
    table = _write(script, tmp_path, [_row(script, design, 0, 1, "mean", 1.0, 1.0, 1.0)], designs=other)
    with pytest.raises(ValueError, match=r"`--reuse`: design 'digits-lenet paper"):
        script.reused_rows(table, 500)
    (tmp_path / "t.csv.json").unlink()
    with pytest.raises(ValueError, match="must both exist"):
        script.reused_rows(table, 500)


def test_the_committed_table_holds_every_seed_of_its_sidecar():
    """figures/headroom_tasks/headroom_tasks.csv: the pairs its sidecar says were computed or reused are
    the ones it holds, and the summary table's seeds are theirs."""
    import csv

    table = ROOT / "figures" / "headroom_tasks" / "headroom_tasks.csv"
    record = json.loads((ROOT / "figures" / "headroom_tasks" / "headroom_tasks.csv.json").read_text())
    with table.open(newline="") as f:
        held = {(r["design"], int(r["seed"])) for r in csv.DictReader(f)}
    said = {(d, s) for pairs in record["pairs"].values() for d, s in pairs}
    assert held == said
    with (ROOT / "figures" / "headroom_tasks" / "headroom_tasks_seeds.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            assert {(r["design"], int(s)) for s in r["seeds"].split()} <= held


def test_compare_says_whether_two_seeds_rows_are_the_same_to_six_digits(script):
    design = list(script.DESIGNS)[2]
    rows = [_row(script, design, 0, 4, "inverse_variance", 0.935229, 0.926665, 0.943794)]
    assert script.compare(rows, [dict(rows[0], ratio=0.9352291)]) == {"identical": True, "max_ratio_difference": 1e-7}
    other = script.compare(rows, [dict(rows[0], ratio=0.938254)])
    assert other["identical"] is False and other["max_ratio_difference"] == pytest.approx(0.003025)


def test_cached_only_writes_the_kept_pairs_and_names_the_missing(script, tmp_path):
    """main(--cached-only) over a hand-made cache: the per-seed table, the summary, the page
    (which names the seed not computed), the figure and the sidecar's record of the pairs."""
    import csv

    design = list(script.DESIGNS)[2]
    cache = tmp_path / "cache"
    cache.mkdir()
    for seed, ratio in ((0, 0.93), (1, 0.95)):
        rows = [_row(script, design, seed, it, rule, r, r - 0.01, r + 0.01) for it in (1, 4)
                for rule, r in (("mean", 1.0), ("inverse_variance", ratio))]
        (cache / f"design-2-seed-{seed}-runs-500.json").write_text(json.dumps({"seconds": 1.5, "rows": rows}))
    out = tmp_path / "out"
    script.main(["--cached-only", "--cache", str(cache), "--out", str(out), "--designs", "2", "--seeds", "0", "1", "2"])
    with (out / "headroom_tasks.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and {r["seed"] for r in table} == {"0", "1"} and list(table[0])[4] == "seed"
    with (out / "headroom_tasks_seeds.csv").open(newline="") as f:
        summary = {(r["iteration"], r["rule"]): r for r in csv.DictReader(f)}
    assert float(summary[("4", "inverse_variance")]["ratio_mean"]) == pytest.approx(0.94)
    assert summary[("4", "inverse_variance")]["every_seed_below_1"] == "True"
    assert summary[("4", "mean")]["every_seed_below_1"] == "False"
    record = json.loads((out / "headroom_tasks.csv.json").read_text())
    assert record["pairs"] == {"computed": [[design, 0], [design, 1]]} and record["missing"] == {design: [2]}
    assert record["command"] == "python experiments/headroom_tasks.py --designs 2 --cached-only"
    page = (out / "headroom_tasks.md").read_text()
    assert f"**Not computed** (design: seeds): {design}: 2." in page and "| 0.940 [" in page
    assert (out / "headroom_tasks.png").stat().st_size > 0
