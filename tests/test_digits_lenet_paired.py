"""experiments/digits_lenet_paired.py: the two per-run cells' KSG steps compared paired by run,
on small dumps whose answer is known."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from mianalysis import ParameterDump


@pytest.fixture(scope="module")
def script():
    """The script, imported from experiments/ (on the path: tests/conftest.py)."""
    import digits_lenet_paired

    return digits_lenet_paired


RUNS, PARAMS, CHECKPOINTS = 240, 2, [0, 1, 2, 3]


def _clients(rng, noise_by_checkpoint):
    """Three clients whose parameters are one per-run start plus noise of the given sd per checkpoint."""
    start = rng.standard_normal((RUNS, PARAMS))
    return {str(c): np.stack([start + s * rng.standard_normal((RUNS, PARAMS)) for s in noise_by_checkpoint])
            for c in range(3)}


def _write_cells(folder, shared, nothing):
    for cell, arrays in ((folder / "per-run-augmentation-26400", shared), (folder / "per-run-nothing-26400", nothing)):
        ParameterDump.from_arrays(cell, arrays, checkpoints=CHECKPOINTS)


def test_identical_cells_differ_by_nothing_and_the_pairing_sees_it(script, tmp_path):
    arrays = _clients(np.random.default_rng(0), [0.0, 0.1, 0.3, 0.6])
    _write_cells(tmp_path, arrays, arrays)
    dumps = {c: ParameterDump.open(tmp_path / c) for c in script.CELLS}
    halves = np.array([np.random.default_rng(j).permutation(RUNS)[: RUNS // 2] for j in range(8)])
    iterations = [1, 2, 3]
    est = {c: script.cell_estimates(dumps[c], "0-1", iterations, halves, seed=0) for c in script.CELLS}
    np.testing.assert_array_equal(est[script.SHARED], est[script.NOTHING])
    rows = script.paired_steps(est[script.SHARED], est[script.NOTHING], iterations)
    assert [r["iteration"] for r in rows] == [2, 3]
    for r in rows:
        assert r["difference"] == 0.0 and r["se_paired"] == 0.0 and r["p"] == 1.0
        assert r["se_unpaired"] > 0  # the unpaired se would call independent what is the same
        assert r["correlation"] == pytest.approx(1.0)
        assert r["step_shared"] < 0  # the noise grows: dependence on the shared start is lost
        assert r["df"] == 7


def test_a_cell_that_keeps_its_dependence_is_found_to_fall_less(script, tmp_path):
    rng = np.random.default_rng(1)
    shared = _clients(rng, [0.0, 0.2, 0.2, 0.2])  # the fall stops after iteration 1
    nothing = {c: a.copy() for c, a in shared.items()}
    for c, a in nothing.items():  # the same runs, but the dependence keeps falling
        a[2] = a[1] + 0.5 * rng.standard_normal((RUNS, PARAMS))
        a[3] = a[2] + 1.0 * rng.standard_normal((RUNS, PARAMS))
    _write_cells(tmp_path, shared, nothing)
    dumps = {c: ParameterDump.open(tmp_path / c) for c in script.CELLS}
    halves = np.array([np.random.default_rng(j).permutation(RUNS)[: RUNS // 2] for j in range(10)])
    est = {c: script.cell_estimates(dumps[c], "0-2", [1, 2, 3], halves, seed=3) for c in script.CELLS}
    np.testing.assert_array_equal(est[script.SHARED][0], est[script.NOTHING][0])  # the same data at iteration 1
    rows = script.verdicts(script.paired_steps(est[script.SHARED], est[script.NOTHING], [1, 2, 3]))
    low, high = sorted(r["p"] for r in rows)
    holm = {low: min(1.0, 2 * low), high: max(min(1.0, 2 * low), high)}  # Holm over the two steps
    for r in rows:
        assert r["difference"] > 0.3  # bits
        assert r["verdict"] == "smaller fall with the augmentation shared"
        assert r["p_holm"] == pytest.approx(holm[r["p"]])
        assert r["detectable_in_family"] > r["detectable_alone"] > 0
    # Swapping the cells turns the verdict around.
    swapped = script.verdicts(script.paired_steps(est[script.NOTHING], est[script.SHARED], [1, 2, 3]))
    assert {r["verdict"] for r in swapped} == {"larger fall with the augmentation shared"}


def _summary_table(path, seed_rows):
    fields = ["cell", "quantity", "pair", "iteration", "step_change"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(seed_rows)


def test_main_writes_the_table_and_compares_with_the_committed_steps(script, tmp_path):
    arrays = _clients(np.random.default_rng(2), [0.0, 0.1, 0.3, 0.6])
    work, figures = tmp_path / "runs", tmp_path / "figures"
    _write_cells(script.dump_folder(0, work), arrays, arrays)
    dumps = {c: ParameterDump.open(script.dump_folder(0, work) / c) for c in script.CELLS}
    halves = np.empty((0, RUNS // 2), dtype=np.int64)
    full = script.cell_estimates(dumps[script.SHARED], "0-1", [1, 2, 3], halves, seed=0)[:, 0]
    figures.mkdir()
    _summary_table(figures / "digits_lenet_paper.csv", [
        {"cell": c, "quantity": "mi_ksg", "pair": "0-1", "iteration": it, "step_change": full[i] - full[i - 1] + 0.001}
        for c in script.CELLS for i, it in ((1, 2), (2, 3))])
    assert script.main(["--seeds", "0", "--pairs", "0-1", "--halves", "4", "--work", str(work),
                        "--tables", str(figures), "--out", str(figures)]) == 0
    with (figures / "digits_lenet_paired.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["seed"], r["pair"], r["iteration"]) for r in rows] == [("0", "0-1", "2"), ("0", "0-1", "3")]
    assert {r["verdict"] for r in rows} == {"no detectable difference"}
    sidecar = json.loads((figures / "digits_lenet_paired.csv.json").read_text())
    assert sidecar["checks"]["steps_compared"] == 4
    assert sidecar["checks"]["max_step_discrepancy"] == pytest.approx(0.001, abs=1e-9)
    page = (figures / "digits_lenet_paired.md").read_text()  # with --out, the page goes there too
    assert "differ by at most 1.0e-03 bits over the 4 steps both hold" in page
    # A second call reads each seed and pair back instead of recomputing it.
    cached = work / "digits_lenet_paired" / "seed0_0-1_4.json"
    assert cached.exists()
    assert json.loads(cached.read_text())[0]["difference"] == 0.0


def test_main_names_a_missing_dump_and_a_bad_pair(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--seeds", "5", "--work", str(tmp_path)])
    assert "no dump at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--pairs", "0-3", "--work", str(tmp_path)])
    assert "unknown pair(s) 0-3" in capsys.readouterr().err
