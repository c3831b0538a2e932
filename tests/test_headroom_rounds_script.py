"""experiments/headroom_rounds.py on tiny federations: FedAvg's vectorised loop against the
package's softmax gradient, the curvature combinations against direct solves, identical
clients (every rule's ratio 1), the files main writes, and the committed page against the
committed tables."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("headroom_rounds_script", ROOT / "experiments" / "headroom_rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through the module
    spec.loader.exec_module(module)  # its helpers (_convex, _results) are on the path (tests/conftest.py)
    return module


@pytest.fixture(scope="module")
def small(script):
    """A label-skew federation of 3 clients of 30 examples."""
    return script.softmax_federation("label-skew", 0, n_examples=30)


def test_one_full_batch_round_is_a_gradient_step_and_fedavg_the_pooled_step(script, small):
    """One round of one epoch with the whole client as the batch: client k's model is
    theta_0 - lr grad f_k(theta_0) and their mean theta_0 - lr grad f(theta_0), f the pooled
    objective (equal sizes), gradients from mianalysis.tasks.convex.softmax_objective."""
    from mianalysis.tasks.convex import softmax_objective

    start = script.draw_starts(small, "per-run", 2)
    rounds = list(script.fedavg_rounds(small.x, small.y, start, rounds=1, epochs=1, lr=0.5, batch_size=30,
                                       l2=small.l2, shared_order=False, rng=np.random.default_rng(0)))
    [(t, before, models)] = rounds
    assert t == 1 and np.array_equal(before, start)
    pooled_x = small.x[0, :, :, :-1].reshape(-1, 64)
    for r in range(2):
        theta0 = script.to_dump(start[r])
        for k in range(3):
            grad = softmax_objective(small.x[0, k, :, :-1], small.y[k], n_classes=10, l2=small.l2)(theta0)[1]
            np.testing.assert_allclose(script.to_dump(models[r, k]), theta0 - 0.5 * grad, atol=1e-12)
        pooled = softmax_objective(pooled_x, small.y.reshape(-1), n_classes=10, l2=small.l2)(theta0)[1]
        np.testing.assert_allclose(script.to_dump(models[r].mean(0)), theta0 - 0.5 * pooled, atol=1e-12)


def test_the_next_round_starts_from_the_average_and_shared_orders_are_the_same(script, small):
    start = script.draw_starts(small, "fixed", 3)
    assert np.all(start == start[0])
    # identical clients (client 0's examples for all) with a shared order stay identical
    x = np.repeat(small.x[:, :1], 3, axis=1)
    y = np.repeat(small.y[:1], 3, axis=0)
    out = [(t, before.copy(), models.copy()) for t, before, models in script.fedavg_rounds(
        x, y, start, rounds=2, epochs=2, lr=0.5, batch_size=7, l2=small.l2, shared_order=True,
        rng=np.random.default_rng(1))]
    np.testing.assert_array_equal(out[1][1], out[0][2].mean(axis=1))
    for _, _, models in out:
        assert np.array_equal(models[:, 0], models[:, 1]) and np.array_equal(models[:, 0], models[:, 2])
        assert not np.array_equal(models[0, 0], models[1, 0])  # runs take their own orders


def test_the_curvature_combinations_equal_direct_solves(script, small):
    """(sum_k H_k)^-1 sum_k H_k e_k by conjugate gradients against the Hessians of
    softmax_objective and a dense solve, at theta* and at points of each run and client."""
    from mianalysis.tasks.convex import softmax_objective

    rng = np.random.default_rng(2)
    points = small.star + rng.normal(scale=0.5, size=(2, 3, *small.star.shape[1:]))
    errors = rng.normal(size=points.shape)
    precondition = script._preconditioner(small, 2)
    for where in (np.broadcast_to(small.star[:, None], points.shape), points):
        got, residual, _ = script.combined_errors(small.x, script.probabilities(small.x, where), errors, small.l2,
                                                  precondition)
        assert residual <= 1e-10
        for r in range(2):
            hessians = [softmax_objective(small.x[0, k, :, :-1], small.y[k], n_classes=10, l2=small.l2)(
                script.to_dump(where[r, k]))[2] for k in range(3)]
            rhs = sum(h @ script.to_dump(errors[r, k]) for k, h in enumerate(hessians))
            np.testing.assert_allclose(script.to_dump(got[r]), np.linalg.solve(sum(hessians), rhs), atol=1e-8)


def test_identical_clients_give_every_rule_the_ratio_one(script, small):
    ident = script.Federation(**{**small.__dict__, "x": np.repeat(small.x[:, :1], 3, axis=1),
                                 "y": np.repeat(small.y[:1], 3, axis=0)})
    ident.precondition_hessian = script.summed_hessian(ident.x[0], ident.y, ident.star[0], ident.l2)
    rows, moves, info = script.cell_result(ident, "per-run start, order shared", 8, rounds=2, epochs=1)
    assert [(r["round"], r["rule"]) for r in rows] == [(t, rule) for t in (1, 2) for rule in script.RULE_LIST]
    for r in rows:
        assert r["ratio"] == pytest.approx(1.0, abs=1e-9), r["rule"]
    assert info["cg_residual_max"] <= 1e-10 and len(moves) == 2
    m = moves[0]
    assert m["moved_0"] == pytest.approx(m["moved_1"]) and m["global_before"] == pytest.approx(m["start_distance"])
    assert m["client_correlation"] == pytest.approx(1.0) and m["client_correlation_low"] == pytest.approx(1.0)


def test_the_client_correlation_of_independent_and_of_mirrored_clients(script):
    """Independent draws: a mean correlation near 0 (within a few times 1/sqrt(runs)); a
    client that is another's negative: -1 for that pair, so (1 - 1 - 1) / 3 with the third
    a copy of the first; coordinates that do not move are left out."""
    rng = np.random.default_rng(3)
    independent = rng.normal(size=(400, 3, 2, 5))
    independent[:, :, 0, 0] = 7.0  # a coordinate that does not move
    assert abs(script.mean_correlation(independent)) < 4 / np.sqrt(400) / np.sqrt(27)
    a = rng.normal(size=(50, 1, 4))
    mirrored = np.concatenate([a, -a, a], axis=1)
    assert script.mean_correlation(mirrored) == pytest.approx(-1 / 3)
    columns = script.correlation_columns(mirrored)
    assert columns["client_correlation_low"] <= -1 / 3 + 1e-12 <= columns["client_correlation_high"] + 2e-12


def test_a_cell_moves_towards_theta_star_and_names_its_design(script, small):
    rows, moves, info = script.cell_result(small, "fixed start, nothing shared", 8, rounds=3, epochs=1)
    assert {r["cell"] for r in rows} == {"softmax-regression, label-skew, data seed 0, fixed start, nothing shared"}
    assert {r["reference"] for r in rows} == {"optimum (exact theta*)"} and info["star_grad_norm"] <= 1e-8
    assert moves[-1]["global_after"] < moves[0]["global_before"] == pytest.approx(moves[0]["start_distance"])
    assert all(m["global_before"] == pytest.approx(p["global_after"]) for p, m in zip(moves, moves[1:]))
    first = {r["rule"]: r for r in rows if r["round"] == 1}
    assert first["mean"]["mse"] >= moves[0]["global_after"] ** 2  # E|g - theta*|^2 >= (E|g - theta*|)^2
    assert first["blue_coordinate"]["ratio_low"] <= first["blue_coordinate"]["ratio"]


def test_digits_head_has_a_theta_star_per_run(script):
    from mianalysis.tasks.convex import softmax_objective

    fed = script.head_federation(0, 3, False, per_digit=2, pretrain_epochs=1)
    assert fed.x.shape == (3, 3, 20, 85) and fed.star.shape == (3, 10, 85) and fed.star_grad_norm <= 1e-8
    assert not np.allclose(fed.star[0], fed.star[1])  # the run's augmentation enters its objective
    for r in range(3):
        grad = softmax_objective(fed.x[r, :, :, :-1].reshape(-1, 84), fed.y.reshape(-1), n_classes=10,
                                 l2=fed.l2)(script.to_dump(fed.star[r]))[1]
        assert np.linalg.norm(grad) <= 1e-8


def test_main_writes_the_tables_page_and_sidecars(script, tmp_path):
    out = tmp_path / "out"
    argv = ["--runs", "8", "--rounds", "2", "--epochs", "1", "--splits", "iid", "--data-seeds", "1", "--no-head",
            "--out", str(out)]
    assert script.main(argv) == 0
    rows = script.read_rows(out / "headroom_rounds.csv")
    assert len(rows) == 4 * 2 * len(script.RULE_LIST) and {r["data_seed"] for r in rows} == {1}
    record = json.loads((out / "headroom_rounds.csv.json").read_text())
    assert record["command"] == ("python experiments/headroom_rounds.py --runs 8 --rounds 2 --epochs 1 --splits iid "
                                 "--data-seeds 1 --no-head")
    assert record["fisher_rounds"] == [1, 2] and "provenance" in record and record["reference"] == "optimum"
    page = (out / "headroom_rounds.md").read_text()
    assert "| softmax-regression | iid | 1 | per-run start, order shared | 2 |" in page
    assert page.count(", against the optimum theta*: ") == 2 * 4
    assert (out / "headroom_rounds.png").stat().st_size > 0 and (out / "headroom_rounds_movement.csv").exists()


@pytest.mark.parametrize("argv, message", [
    (["--runs", "3"], "--runs must be >= 4"),
    (["--head-runs", "2"], "--head-runs must be >= 4"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--data-seeds", "0", "0"], "--data-seeds must be distinct integers >= 0"),
    (["--splits", "iid", "iid"], "--splits must be distinct"),
    (["--quick", "--runs", "5"], "--quick sets the runs and rounds itself"),
])
def test_bad_input_is_refused_in_one_line(script, capsys, argv, message, tmp_path):
    with pytest.raises(SystemExit, match="^2$"):
        script.main([*argv, "--out", str(tmp_path)])
    stderr = capsys.readouterr().err
    assert stderr.count("error:") == 1 and message in stderr.splitlines()[-1]
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_the_committed_page_is_made_from_the_committed_tables(script):
    """docs/results/tables/headroom_rounds.md is what `markdown` makes of figures/headroom_rounds/headroom_rounds.csv
    and its movement table (numbers as written, verdicts recomputed), with the settings and the
    command of the sidecar."""
    table = ROOT / "figures" / "headroom_rounds" / "headroom_rounds.csv"
    if not table.exists():
        pytest.skip("figures/headroom_rounds/headroom_rounds.csv is not committed yet")
    record = json.loads(table.with_name(table.name + ".json").read_text())
    rows = script.read_rows(table)
    moves = script.read_rows(ROOT / "figures" / "headroom_rounds" / "headroom_rounds_movement.csv")
    settings = {k: record[k] for k in ("runs", "head_runs", "rounds", "epochs")}
    page = script.markdown(rows, moves, script.verdicts(rows), settings, record["command"])
    assert (ROOT / "docs" / "results" / "tables" / "headroom_rounds.md").read_text() == page
    assert record["verdicts"] == script.verdicts(rows)
