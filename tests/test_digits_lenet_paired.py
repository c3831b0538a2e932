"""experiments/digits_lenet_paired.py: the two per-run cells' KSG steps compared paired by run,
on small dumps whose answer is known."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from scipy import stats

from mianalysis import ParameterDump
from mianalysis.analysis.inference.familywise import holm


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
    assert [(r["family"], r["from_iteration"], r["iteration"]) for r in rows] == [
        ("steps", 1, 2), ("steps", 2, 3), ("whole", 1, 3)]
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
    steps, (whole,) = rows[:2], rows[2:]
    low, high = sorted(r["p"] for r in steps)
    holm = {low: min(1.0, 2 * low), high: max(min(1.0, 2 * low), high)}  # Holm over the two steps
    assert whole["family"] == "whole" and whole["p_holm"] == whole["p"]  # a family of its own, of one
    # The whole change's difference is the steps' sum; its se comes from the halves' whole changes.
    assert whole["difference"] == pytest.approx(sum(r["difference"] for r in steps), rel=1e-12)
    diff = lambda e, i, j: (e[script.SHARED][j] - e[script.SHARED][i]) - (e[script.NOTHING][j] - e[script.NOTHING][i])
    assert whole["se_paired"] == pytest.approx(diff(est, 0, 2)[1:].std(ddof=1), rel=1e-12)
    for r in rows:
        assert r["difference"] > 0.3  # bits
        assert r["verdict"] == "smaller fall with the augmentation shared"
        assert r["p_holm"] == pytest.approx(holm[r["p"]] if r["family"] == "steps" else r["p"])
        if r["family"] == "steps":  # alpha / 2 asks for more than alpha; the whole family has one member
            assert r["detectable_in_family"] > r["detectable_alone"] > 0
        else:
            assert r["detectable_in_family"] == r["detectable_alone"] > 0
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
    _write_cells(script.cell_dump(0, script.SHARED, work).parent, arrays, arrays)
    dumps = {c: ParameterDump.open(script.cell_dump(0, c, work)) for c in script.CELLS}
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
    assert [(r["seed"], r["pair"], r["family"], r["from_iteration"], r["iteration"]) for r in rows] == [
        ("0", "0-1", "steps", "1", "2"), ("0", "0-1", "steps", "2", "3"), ("0", "0-1", "whole", "1", "3")]
    assert {r["verdict"] for r in rows} == {"no detectable difference"}
    sidecar = json.loads((figures / "digits_lenet_paired.csv.json").read_text())
    assert sidecar["checks"]["steps_compared"] == 4
    assert sidecar["checks"]["max_step_discrepancy"] == pytest.approx(0.001, abs=1e-9)
    page = (figures / "digits_lenet_paired.md").read_text()  # with --out, the page goes there too
    assert "differ by at most 1.0e-03 bits over the 4 steps both hold" in page
    # A second call reads each seed and pair back instead of recomputing it.
    cached = work / "digits_lenet_paired" / "seed0_0-1_4.json"
    assert cached.exists()
    record = json.loads(cached.read_text())
    assert record["iterations"] == [1, 2, 3] and record["runs"] == RUNS
    np.testing.assert_array_equal(record["estimates_bits"][script.SHARED], record["estimates_bits"][script.NOTHING])
    np.testing.assert_allclose(np.array(record["estimates_bits"][script.SHARED])[:, 0], full, rtol=1e-15)
    record["estimates_bits"][script.NOTHING][2][0] -= 0.5  # a changed cache is what a second call reads
    cached.write_text(json.dumps(record))
    again = script.run_pair(0, "0-1", 4, work, work / "digits_lenet_paired")
    assert again[1]["difference"] == pytest.approx(0.5) and again[2]["difference"] == pytest.approx(0.5)


def test_main_names_a_missing_dump_and_a_bad_pair(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--seeds", "5", "--work", str(tmp_path)])
    assert "no dump or summary table at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--pairs", "0-3", "--work", str(tmp_path)])
    assert "unknown pair(s) 0-3" in capsys.readouterr().err


def test_each_row_is_its_t_test_and_holm_pools_every_pair_and_seed(script, tmp_path):
    rng = np.random.default_rng(4)
    shared = _clients(rng, [0.0, 0.2, 0.4, 0.5])
    nothing = _clients(rng, [0.0, 0.2, 0.5, 0.8])
    _write_cells(tmp_path, shared, nothing)
    dumps = {c: ParameterDump.open(tmp_path / c) for c in script.CELLS}
    halves = np.array([np.random.default_rng(j).permutation(RUNS)[: RUNS // 2] for j in range(6)])
    rows = []
    for seed, pair in ((0, "0-1"), (1, "1-2")):
        est = {c: script.cell_estimates(dumps[c], pair, [1, 2, 3], halves, seed=seed) for c in script.CELLS}
        made = script.paired_steps(est[script.SHARED], est[script.NOTHING], [1, 2, 3])
        for r, (i, j) in zip(made, ((0, 1), (1, 2), (0, 2))):
            s, n = est[script.SHARED][j] - est[script.SHARED][i], est[script.NOTHING][j] - est[script.NOTHING][i]
            assert r["se_unpaired"] == pytest.approx(np.hypot(s[1:].std(ddof=1), n[1:].std(ddof=1)), rel=1e-12)
            assert r["correlation"] == pytest.approx(np.corrcoef(s[1:], n[1:])[0, 1], rel=1e-12)
            t = abs(r["difference"]) / r["se_paired"]
            assert r["df"] == 5 and r["p"] == pytest.approx(2 * stats.t.sf(t, 5), rel=1e-9)
        rows += [{"seed": seed, "pair": pair, **r} for r in made]
    rows = script.verdicts(rows)
    steps = [r for r in rows if r["family"] == "steps"]
    whole = [r for r in rows if r["family"] == "whole"]
    assert len(steps) == 4 and len(whole) == 2
    for family in (steps, whole):
        np.testing.assert_allclose([r["p_holm"] for r in family], holm([r["p"] for r in family]), rtol=1e-12)
    # One step only: no whole row.
    assert [r["family"] for r in script.paired_steps(est[script.SHARED][:2], est[script.NOTHING][:2], [1, 2])] == [
        "steps"]


def test_a_cache_of_another_format_is_made_again(script, tmp_path):
    arrays = _clients(np.random.default_rng(5), [0.0, 0.1, 0.3, 0.4])
    work = tmp_path / "runs"
    _write_cells(script.cell_dump(2, script.SHARED, work).parent, arrays, arrays)
    cache = work / "digits_lenet_paired"
    cache.mkdir(parents=True)
    (cache / "seed2_0-2_3.json").write_text(json.dumps([{"difference": 9.0}]))  # rows, as an earlier version kept
    rows = script.run_pair(2, "0-2", 3, work, cache)
    assert [r["iteration"] for r in rows] == [2, 3, 3] and all(r["difference"] == 0 for r in rows)
    assert json.loads((cache / "seed2_0-2_3.json").read_text())["k"] == script.K


def test_committed_table_holds_its_verdicts_and_the_page_quotes_it(script):
    """figures/digits_lenet_paired/digits_lenet_paired.csv: each family's Holm p and verdict follow from its p-values,
    and docs/results/digits-lenet.md quotes its numbers."""
    root = script.FIGURES.parents[1]
    with (script.FIGURES / "digits_lenet_paired.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    page = " ".join((root / "docs" / "results" / "digits-lenet.md").read_text().split())
    families = {f: [r for r in rows if r["family"] == f] for f in ("steps", "whole")}
    assert [len(v) for v in families.values()] == [9, 3] and {r["pair"] for r in rows} == {"0-1"}
    for family in families.values():
        np.testing.assert_allclose([float(r["p_holm"]) for r in family], holm([float(r["p"]) for r in family]),
                                   rtol=1e-5)
        for r in family:
            p, diff = float(r["p_holm"]), float(r["difference"])
            assert r["verdict"] == ("no detectable difference" if p > 0.05 else
                                    "smaller fall with the augmentation shared" if diff > 0 else
                                    "larger fall with the augmentation shared")
    whole = families["whole"]
    assert [r["seed"] for r in whole] == ["0", "1", "2"]
    d = [float(r["difference"]) for r in whole]
    assert min(d) > 0 and [r["verdict"] != "no detectable difference" for r in whole] == [True, False, False]
    se = [float(r["se_paired"]) for r in whole]
    assert (f"by {d[0]:+.4f}, {d[1]:+.4f} and {d[2]:+.4f} bits (seeds 0, 1, 2; se {min(se):.4f}-{max(se):.4f})"
            in page)
    assert f"(adjusted p {float(whole[0]['p_holm']):.2g})" in page
    assert (f"seed 1's (p {float(whole[1]['p']):.2g}) and seed 2's (p {float(whole[2]['p']):.2g} alone, "
            f"{float(whole[2]['p_holm']):.2g} after Holm) do not") in page
    det = [float(r["detectable_in_family"]) for r in whole]
    assert f"found a difference of {min(det):.4f}-{max(det):.4f} bits with probability 0.8" in page
    steps = families["steps"]
    assert all(r["verdict"] == "no detectable difference" for r in steps)
    sd, det = [float(r["difference"]) for r in steps], [float(r["detectable_in_family"]) for r in steps]
    assert f"(adjusted p at least {min(float(r['p_holm']) for r in steps):.2f})" in page
    assert (f"with the differences {min(sd):+.4f} to {max(sd):+.4f} bits and detectable ones of "
            f"{min(det):.4f}-{max(det):.4f} bits") in page
    corr = [float(r["correlation"]) for r in rows]
    ratio = [float(r["se_paired"]) / float(r["se_unpaired"]) for r in rows]
    assert f"correlate by {min(corr):.2f} to {max(corr):.2f}, so the paired se is {min(ratio):.2f}-{max(ratio):.2f}" \
        " times the unpaired one" in page
    sidecar = json.loads((script.FIGURES / "digits_lenet_paired.csv.json").read_text())
    checks = sidecar["checks"]
    assert f"equal the committed tables' to {checks['max_step_discrepancy']:.1e} bits ({checks['steps_compared']} " \
        "steps;" in page
    seconds = sorted(float(r["seconds_for_pair"]) for r in whole)
    assert f"(figures/digits_lenet_paired/digits_lenet_paired.csv; {seconds[0]:.0f}-{seconds[-1]:.0f} s per seed on the 2 cores" in page
