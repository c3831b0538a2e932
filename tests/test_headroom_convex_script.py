"""experiments/headroom_convex.py on a tiny configuration: its rows, cell summaries, family-wise
verdicts (against the optimum theta*), the gate's checks, the files main writes, and its
command line's refusals in one line. The sampling and headroom themselves are the sampler's
and mianalysis.analysis.studies.headroom's, tested beside them."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("headroom_convex_script", ROOT / "experiments" / "headroom_convex.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its helpers (_results) are on the path (tests/conftest.py)
    return module


@pytest.fixture(scope="module")
def cell(script, tmp_path_factory):
    return script.cell_result("label-skew", 0, 8, tmp_path_factory.mktemp("work"), every=50)


def test_a_cell_has_each_rule_at_the_first_and_last_checkpoint(script, cell):
    rows, summary = cell
    assert [(r["iteration"], r["rule"]) for r in rows] == [(it, rule) for it in (50, 100) for rule in script.RULE_LIST]
    for key in ("cell", "split", "data_seed", "iteration", "rule", "ratio", "ratio_low", "ratio_high",
                "ratio_corrected", "ratio_corrected_low", "ratio_corrected_high", "n_runs"):
        assert key in rows[0], key
    assert list(rows[0])[:3] == ["cell", "split", "data_seed"] and all(r["n_runs"] == 8 for r in rows)
    assert {r["reference"] for r in rows} == {"optimum (exact theta*)"}
    assert all(r["ratio"] == 1.0 for r in rows if r["rule"] == "mean")
    assert summary["cell"] == "label-skew, data seed 0" and summary["n_runs"] == 8 and summary["iteration"] == 100
    for k in range(3):
        fraction = summary[f"moved_{k}"] / summary["start_distance"]
        assert 0 < summary[f"fraction_{k}"] < 1 and summary[f"fraction_{k}"] == pytest.approx(fraction, rel=0.05)
        assert summary[f"fraction_{k}_low"] <= summary[f"fraction_{k}"] <= summary[f"fraction_{k}_high"]
    assert summary["optimum_grad_norm_max"] <= 1e-8 and summary["optimum_recorded_error"] < 1e-5
    curvature = next(r for r in rows if r["iteration"] == 100 and r["rule"] == "curvature")
    coordinate = next(r for r in rows if r["iteration"] == 100 and r["rule"] == "blue_coordinate")
    assert summary["curvature_share"] == pytest.approx(1 - curvature["ratio"])
    assert summary["beyond_curvature"] == pytest.approx(curvature["ratio"] - coordinate["ratio"])  # the same folds
    last = {r["rule"]: r for r in rows if r["iteration"] == 100}
    for rule in script.OWN_RULES:  # per-run weights, nothing fitted: a row like a fixed rule's
        assert list(last[rule]) == list(curvature) and last[rule]["fit_inflation"] == 1.0
        assert last[rule]["ratio_corrected"] == last[rule]["ratio"] and last[rule]["ratio_low"] < last[rule]["ratio"]
        assert last[rule]["weights"].startswith("per run") and 0 < last[rule]["mse"]
    assert "not a linear combination" in last["newton_merge_own"]["weights"]
    best = min(script.RUNNABLE, key=lambda rule: last[rule]["ratio"])
    [s] = script.add_best([dict(summary)], rows)
    assert s["best_runnable"] == best and s["best_runnable_ratio"] == pytest.approx(last[best]["ratio"])
    assert s["best_runnable_level"] == pytest.approx(1 - 0.05 / (2 * 3)) and s["familywise_level"] == 1 - 0.05 / 2
    assert s["best_runnable_ratio_fw_high"] > s[f"{best}_ratio_fw_high"] or best == "mean"  # widened over the rules
    assert s["target"] == pytest.approx((1 + s["blue_coordinate_ratio"]) / 2)
    assert s["below_target"] == (s["best_runnable_ratio_fw_high"] < s["target"])
    assert s["below_one"] == (s["best_runnable_ratio_fw_high"] < 1)


def test_fisher_weights_of_identical_clients_are_one_over_k(script):
    """Three clients with the same data at the same point: every Hessian is the same, each
    weight 1/3 (per coordinate and as a matrix), and both combinations are the plain mean."""
    task = script.get_task("softmax-regression", n_examples=30)
    x, y = task.client_examples(0)
    objective = script.softmax_objective(x, y, n_classes=10, l2=0.01)
    theta = np.random.default_rng(0).normal(scale=0.3, size=650)
    hessians = [objective(theta)[2]] * 3
    diag, full = script.fisher_weights(hessians)
    np.testing.assert_allclose(diag, np.full((3, 650), 1 / 3), rtol=1e-12)
    np.testing.assert_allclose(full, np.broadcast_to(np.eye(650) / 3, (3, 650, 650)), atol=1e-12)
    errors = np.random.default_rng(1).normal(size=(3, 650))
    for combined in script.own_combined(hessians, np.zeros((3, 650)), errors):  # at their own optima: g = 0
        np.testing.assert_allclose(combined, errors.mean(axis=0), atol=1e-10)
    # identical clients away from their optimum: the Newton merge is the client's Newton step
    _, g, h = objective(theta)
    newton = script.own_combined(hessians, [g] * 3, errors)[2]
    np.testing.assert_allclose(newton, errors.mean(axis=0) - np.linalg.solve(h, g), atol=1e-10)
    iterates = np.broadcast_to(theta, (3, 4, 650))
    per_run = script.own_curvature_errors([objective] * 3, iterates, np.stack([errors] * 4, axis=1))
    for rule in ("fisher_diag_own", "fisher_full_own"):
        np.testing.assert_allclose(per_run[rule], np.sum(errors.mean(axis=0) ** 2), rtol=1e-10)
    np.testing.assert_allclose(per_run["newton_merge_own"], np.sum(newton ** 2), rtol=1e-10)


def test_newton_merge_own_is_the_registry_rule_and_exact_on_a_quadratic(script):
    """newton_merge_own's error is mianalysis.federated's newton_merge of the iterates minus
    theta*; on quadratic clients (Hessians constant) it is 0 from any iterates."""
    from mianalysis.federated.aggregation import newton_merge

    task = script.get_task("softmax-regression", n_examples=30)
    objectives = [script.softmax_objective(*task.client_examples(k), n_classes=10, l2=0.01) for k in range(3)]
    rng = np.random.default_rng(3)
    iterates, star = rng.normal(scale=0.2, size=(3, 650)), rng.normal(scale=0.2, size=650)
    _, gradients, hessians = zip(*(f(theta) for f, theta in zip(objectives, iterates)))
    got = script.own_combined(hessians, gradients, iterates - star)[2]
    expected = newton_merge(iterates, np.array(hessians), np.array(gradients), eps=0) - star
    np.testing.assert_allclose(got, expected, atol=1e-9)
    a = rng.normal(size=(3, 6, 6))
    curvatures = a @ a.transpose(0, 2, 1) + np.eye(6)
    means, x = rng.normal(size=(2, 3, 6))
    optimum = np.linalg.solve(curvatures.sum(0), np.einsum("kij,kj->i", curvatures, means))
    g = np.einsum("kij,kj->ki", curvatures, x - means)
    np.testing.assert_allclose(script.own_combined(curvatures, g, x - optimum)[2], 0, atol=1e-12)


def test_a_client_with_a_zero_hessian_gets_weight_zero(script):
    """H_1 = 0: client 1 gets weight 0 in both rules, the others (H_0 + H_2)^-1 H_k (and the
    per-coordinate share of the diagonal); the combinations equal `combine_errors` of the weights."""
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 5, 5))
    h0, h2 = a @ a.T + np.eye(5), b @ b.T + 0.5 * np.eye(5)
    hessians = [h0, np.zeros((5, 5)), h2]
    diag, full = script.fisher_weights(hessians)
    assert np.all(diag[1] == 0) and np.all(full[1] == 0)
    np.testing.assert_allclose(diag[0], np.diag(h0) / (np.diag(h0) + np.diag(h2)))
    np.testing.assert_allclose(full[0], np.linalg.solve(h0 + h2, h0), atol=1e-12)
    np.testing.assert_allclose(diag.sum(0), 1)
    np.testing.assert_allclose(full.sum(0), np.eye(5), atol=1e-12)
    errors = rng.normal(size=(3, 5))
    combined_diag, combined_full, _ = script.own_combined(hessians, np.zeros((3, 5)), errors)
    assert float(combined_diag @ combined_diag) == pytest.approx(script.combine_errors(diag, errors[:, None])[0])
    assert float(combined_full @ combined_full) == pytest.approx(script.combine_errors(full, errors[:, None])[0])


def test_curvature_weights_sum_to_the_identity(script):
    task = script.get_task("softmax-regression", n_examples=30)
    weights = script.curvature_weights(task, np.zeros(650))
    assert weights.shape == (3, 650, 650)
    np.testing.assert_allclose(weights.sum(0), np.eye(650), atol=1e-10)


def test_verdicts_name_the_optimum_and_are_widened_over_the_cells(script, cell):
    rows, summary = cell
    other = [dict(r, cell="iid, data seed 9", split="iid", data_seed=9) for r in rows]
    verdicts = script.familywise_verdicts(rows + other)
    assert list(verdicts) == [summary["cell"], "iid, data seed 9"]
    for lines in verdicts.values():
        assert len(lines) == 2 and all(", against the optimum theta*: " in line for line in lines)
    assert script.familywise_verdicts(rows)[summary["cell"]] != verdicts[summary["cell"]]  # wider over two cells
    [with_best] = script.add_best([dict(summary)], rows + other)
    assert with_best["familywise_level"] == pytest.approx(1 - 0.05 / 4)
    assert with_best["blue_coordinate_ratio_fw_low"] <= with_best["blue_coordinate_ratio"]


def test_the_gate_checks_each_target_against_both_references(script, tmp_path):
    rows, checks = script.gate_result(8, tmp_path)
    assert [c["rule"] for c in checks] == list(script.GATE_TARGETS)
    assert {r["reference_asked"] for r in rows} == {"optimum", "task"} and {r["iteration"] for r in rows} == {40}
    for c in checks:
        assert c["n_runs"] == 8 and c["ratio_exact"] == pytest.approx(c["target"], abs=5e-4)
        assert abs(c["task_difference"]) < 1e-5 and c["within"] == (abs(c["ratio"] - c["target"]) <= 0.01)


def test_main_writes_the_tables_page_and_sidecars(script, tmp_path):
    out = tmp_path / "out"
    assert script.main(["--runs", "8", "--splits", "iid", "--data-seeds", "1", "--out", str(out)]) == 0
    with (out / "headroom_convex.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert {r["cell"] for r in table} == {"iid, data seed 1"} and len(table) == 2 * len(script.RULE_LIST)
    with (out / "headroom_convex_cells.csv").open(newline="") as f:
        [cells] = list(csv.DictReader(f))
    assert "against the optimum theta*" in cells["verdicts"] and float(cells["fraction_0"]) > 0
    record = json.loads((out / "headroom_convex.csv.json").read_text())
    assert record["command"] == "python experiments/headroom_convex.py --runs 8 --splits iid --data-seeds 1"
    assert record["reference"] == "optimum" and "provenance" in record
    assert (out / "headroom_convex_cells.csv.json").exists() and (out / "headroom_convex.png").stat().st_size > 0
    page = (out / "headroom_convex.md").read_text()
    assert "| iid, data seed 1 | 100 | blue_coordinate |" in page
    assert "| iid, data seed 1 | 100 | fisher_full_own |" in page
    assert "| iid, data seed 1 | 100 | newton_merge_own |" in page
    assert set(record["runnable_target"]["iid, data seed 1"]) >= {"best_runnable", "target", "below_target"}
    assert cells["best_runnable"] in script.RUNNABLE and float(cells["target"]) > 0


@pytest.mark.parametrize("argv, message", [
    (["--runs", "3"], "--runs must be >= 4"),
    (["--gate", "--gate-runs", "1"], "--gate-runs must be >= 4"),
    (["--data-seeds", "0", "0"], "--data-seeds must be distinct integers >= 0"),
    (["--data-seeds", "-1"], "--data-seeds must be distinct integers >= 0"),
    (["--splits", "iid", "iid"], "--splits must be distinct"),
    (["--splits", "pathological"], "invalid choice: 'pathological'"),
    (["--quick", "--runs", "5"], "--quick sets the runs itself"),
    (["--runs", "many"], "invalid int value: 'many'"),
])
def test_bad_input_is_refused_in_one_line(script, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        script.main(argv)
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and message in errors[0]


def test_an_out_that_is_a_file_is_refused(script, tmp_path, capsys):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit):
        script.main(["--out", str(tmp_path / "f")])
    [error] = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert error.endswith(f"--out {tmp_path / 'f'}: not a folder")


def test_replot_redraws_the_figure_from_the_committed_table(script, tmp_path):
    pytest.importorskip("matplotlib")
    import shutil

    with pytest.raises(SystemExit, match="--replot: .* does not exist"):
        script.main(["--replot", "--out", str(tmp_path)])
    shutil.copy(ROOT / "figures" / "headroom_convex" / "headroom_convex.csv", tmp_path)
    assert script.main(["--replot", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "headroom_convex.png").stat().st_size > 10_000
