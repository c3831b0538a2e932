"""analyze(by="auto") and report's default: the whole vector where the runs cover a calibrated
estimate of it, else its tensors in blocks that they cover, and what the whole would need."""

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, report
from mianalysis.analysis.blocks import MIN_RUNS_FOR_BLOCKS, regime_blocks, runs_needed

FAST = {"metrics": [], "ci_resamples": 0}


def _tensors(*sizes):
    start, out = 0, []
    for i, size in enumerate(sizes):
        out.append((f"t{i}", np.arange(start, start + size)))
        start += size
    return out


@pytest.mark.parametrize("runs, sizes", [(200, (544, 8, 48, 10)), (60, (20,)), (100, (7, 30, 3)), (44, (3, 40))])
def test_blocks_cover_every_parameter_once_and_each_fits_the_runs(runs, sizes):
    choice = regime_blocks(_tensors(*sizes), runs, 2.2)
    columns = np.concatenate([c for _, c in choice.groups])
    np.testing.assert_array_equal(columns, np.arange(sum(sizes)))  # in order, each once
    assert choice.by == "layer"
    assert all(runs >= runs_needed(c.size, 2.2) for _, c in choice.groups)
    assert f"needs {runs_needed(sum(sizes), 2.2)} runs" in choice.note and f"the dump has {runs}" in choice.note


def test_a_covered_vector_stays_whole_and_too_few_runs_are_not_split():
    whole = regime_blocks(_tensors(5, 5), 44, 2.2)
    assert whole.by is None and [name for name, _ in whole.groups] == [""] and "44 runs >= 44" in whole.note
    few = regime_blocks(_tensors(5, 5), MIN_RUNS_FOR_BLOCKS - 1, 2.2)
    assert few.by is None and "too few to split" in few.note


def test_runs_needed_is_two_point_two_per_joint_dimension():
    assert runs_needed(610, 2.2) == 2684 and runs_needed(10, 2.2) == 44 and runs_needed(1, 2.2) == 5


def _dump(path, runs, params, rho=0.8, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, runs, params))
    b = rho * a + np.sqrt(1 - rho**2) * rng.standard_normal((2, runs, params))
    return ParameterDump.from_arrays(path, {"a": a, "b": b}, checkpoints=[1, 2])


def test_analyze_by_auto_gives_calibrated_block_rows_where_the_whole_vector_is_a_bound(tmp_path):
    dump = _dump(tmp_path / "d", 60, 20)  # the whole: 40 joint dims need 88 runs
    whole = analyze(dump, **FAST)
    assert {r["quantity"] for r in whole if r["quantity"].startswith("mi_")} == {"mi_bound"}
    blocks = analyze(dump, by="auto", **FAST)
    mi = [r for r in blocks if r["quantity"].startswith("mi_")]
    assert {r["quantity"] for r in mi} == {"mi_copula"} and not any(r["outside_calibration"] for r in mi)
    assert sorted({r["layer"] for r in mi}) == ["params[0:10]", "params[10:20]"]
    # each block: 10 coordinate pairs correlated 0.8, 10 x 0.737 = 7.37 bits
    assert all(abs(r["value"] - 10 * -0.5 * np.log2(1 - 0.64)) < 1.5 for r in mi)
    assert "needs 88 runs" in blocks.settings["by_choice"] and "lower bound on the whole" in blocks.settings["by_choice"]


def test_report_analyses_by_blocks_by_default_and_says_what_the_whole_vector_needs(tmp_path):
    done = report(_dump(tmp_path / "d", 60, 20), tmp_path / "r", n_permutations=19)
    assert {r["layer"] for r in done.table if r["quantity"] == "mi_copula"} == {"params[0:10]", "params[10:20]"}
    assert "88" in done.summary.split("## Dump and analysis")[0]  # the bottom line quotes what the whole needs
    vector = report(_dump(tmp_path / "e", 60, 20), tmp_path / "s", n_permutations=19, by=None)
    assert {r["layer"] for r in vector.table} == {""}
