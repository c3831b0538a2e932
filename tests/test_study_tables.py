"""The studies' typed tables (issue 54, item 5): one declared schema per study and one writer
(CSV + JSON sidecar with format, format version, settings and provenance); headroom, the
dependence given the global model, the additive check and a federated run's history each
written through it and read back; and one meaning per rule name between headroom and the
federated rule registry."""

from __future__ import annotations

import json
import math
import warnings
from typing import Annotated, TypedDict

import numpy as np
import pytest

from mianalysis import ParameterDump
from mianalysis.analysis.schema import Column
from mianalysis.analysis.study_table import StudySchema, StudyTable, sidecar_path
from mianalysis.dumps import OPTIMUM


def _same_rows(got, want):
    """Rows equal, NaN equal to NaN (a row read back has numpy.nan where the original had a NaN)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for key in w:
            a, b = g[key], w[key]
            if isinstance(b, float) and math.isnan(b):
                assert isinstance(a, float) and math.isnan(a), key
            else:
                plain = b.item() if isinstance(b, np.generic) else b
                # the column's type; a float column reads an int as its float (headroom's `interval_df`)
                assert a == b and (type(a) is type(plain) or isinstance(a, float)), (key, a, b)


class _Row(TypedDict):
    run: Annotated[int, Column(meaning="The run.")]
    kind: Annotated[str, Column(meaning="Its kind.", choices=("x", "y"))]
    speed: Annotated[float, Column(unit="m/s", meaning="How fast.")]
    extra: Annotated[float, Column(unit="s", meaning="Optional.", default=np.nan)]


SPEED = StudySchema("speed", _Row, 2, "A test table.")


# ---------------------------------------------------------------------- the writer
def test_a_study_table_writes_csv_and_sidecar_and_reads_them_back(tmp_path):
    rows = [{"run": 0, "kind": "x", "speed": 1.5}, {"run": 1, "kind": "y", "speed": math.nan}]
    StudyTable(SPEED, rows, settings={"runs": 2}, record={"verdicts": ["fast"]}).write(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines() == ["run,kind,speed", "0,x,1.5", "1,y,nan"]
    record = json.loads(sidecar_path(tmp_path / "t.csv").read_text())
    assert record["format"] == "mianalysis speed table" and record["format_version"] == 2
    assert record["table"] == "t.csv" and record["columns"] == ["run", "kind", "speed"]
    assert record["units"] == {"speed": "m/s"} and record["settings"] == {"runs": 2}
    assert record["verdicts"] == ["fast"] and record["provenance"]["ended"]
    back = StudyTable.read(tmp_path / "t.csv", SPEED)
    _same_rows(back.rows, rows)
    assert back.settings == {"runs": 2} and back.record == {"verdicts": ["fast"]} and back.provenance["ended"]
    assert not list(tmp_path.glob("*.tmp"))


def test_the_writer_refuses_rows_its_schema_does_not_declare(tmp_path):
    with pytest.raises(ValueError, match=r"the speed table has no columns \['colour'\]"):
        StudyTable(SPEED, [{"run": 0, "kind": "x", "speed": 1.0, "colour": "red"}]).write(tmp_path / "t.csv")
    with pytest.raises(ValueError, match=r"row 0 of the speed table lacks columns \['speed'\]"):
        StudyTable(SPEED, [{"run": 0, "kind": "x"}]).write(tmp_path / "t.csv")
    with pytest.raises(ValueError, match=r"`kind` cannot hold 'z'"):
        StudyTable(SPEED, [{"run": 0, "kind": "z", "speed": 1.0}]).write(tmp_path / "t.csv")
    with pytest.raises(ValueError, match="has no rows"):
        StudyTable(SPEED, []).write(tmp_path / "t.csv")
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_reader_refuses_another_table_a_newer_format_and_missing_columns(tmp_path):
    path = tmp_path / "t.csv"
    StudyTable(SPEED, [{"run": 0, "kind": "x", "speed": 1.0}]).write(path)
    other = StudySchema("other", _Row, 2, "")
    with pytest.raises(ValueError, match="is a 'mianalysis speed table'.*not a 'mianalysis other table'"):
        StudyTable.read(path, other)
    older = StudySchema("speed", _Row, 1, "")
    with pytest.raises(ValueError, match="format version 2 .* reads versions up to 1: upgrade mianalysis"):
        StudyTable.read(path, older)
    path.write_text("run,kind\n0,x\n")
    with pytest.raises(ValueError, match=r"not a speed table: missing columns \['speed'\]"):
        StudyTable.read(path, SPEED)
    sidecar_path(path).unlink()  # a table without a sidecar (written before it had one) still reads
    path.write_text("run,kind,speed\n0,x,\n")
    back = StudyTable.read(path, SPEED)
    assert back.settings == {} and back.provenance is None and math.isnan(back[0]["speed"])


# ---------------------------------------------------------------------- headroom
def _headroom_dump(path):
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((2, 200, 2))
    samples = {k: theta + s * rng.standard_normal(theta.shape) for k, s in zip("abc", (1.0, 1.0, 3.0))}
    return ParameterDump.from_arrays(path, {**samples, OPTIMUM: theta}, checkpoints=[1, 2])


def test_headroom_rows_round_trip_through_their_table(tmp_path):
    from mianalysis.analysis.studies.headroom import HEADROOM_TABLE, headroom

    rows = headroom(_headroom_dump(tmp_path / "d"), rules=["mean", "inverse_mse", "blue_coordinate"])
    StudyTable(HEADROOM_TABLE, rows, settings={"folds": 2}).write(tmp_path / "h.csv")
    back = StudyTable.read(tmp_path / "h.csv", HEADROOM_TABLE)
    _same_rows(back.rows, rows)
    assert json.loads((tmp_path / "h.csv.json").read_text())["units"]["mse"].startswith("squared parameter units")


def test_the_headroom_command_writes_its_table_through_the_study_writer(tmp_path, capsys):
    from mianalysis.analysis.studies.headroom import HEADROOM_TABLE
    from mianalysis.cli import HEADROOM_FORMAT_VERSION, main

    assert HEADROOM_FORMAT_VERSION == HEADROOM_TABLE.format_version
    _headroom_dump(tmp_path / "d")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), "--rules", "mean",
                 "blue_coordinate", "--no-progress"]) == 0
    back = StudyTable.read(tmp_path / "h.csv", HEADROOM_TABLE)
    assert [r["rule"] for r in back] == ["mean", "blue_coordinate"] * 2 and back[0]["iteration"] == 1
    assert back.settings["rules"] == ["blue_coordinate", "mean"] and len(back.record["verdicts"]) == 2
    assert back.record["dump_runs"] == 200 and back.provenance["ended"]


def test_committed_headroom_tables_read_through_the_schema():
    # An experiment's table (extra columns before the headroom ones, written before `interval_df`).
    from pathlib import Path

    from mianalysis.analysis.studies.headroom import HEADROOM_TABLE

    table = StudyTable.read(Path(__file__).parent.parent / "figures" / "headroom_tasks" / "headroom_tasks.csv", HEADROOM_TABLE)
    assert len(table) > 0 and all(isinstance(r["ratio"], float) and isinstance(r["n_runs"], int) for r in table)
    assert "interval_df" not in table[0] and isinstance(table[0]["design"], str)


# ---------------------------------------------------------------------- one meaning per rule name
def _known_case():
    """Three scalar clients whose errors have mean squares 1, 1 and 9: inverse-MSE weights
    9/19, 9/19, 1/19."""
    errors = np.array([[[1.0], [-1.0]], [[-1.0], [1.0]], [[3.0], [-3.0]]])  # (clients, runs, params)
    x = np.array([[0.0], [1.0], [19.0]])  # the clients' parameters to combine
    return errors, x


def test_headroom_and_the_federated_registry_share_no_rule_name():
    from mianalysis.analysis.studies.headroom import DEPRECATED_RULES, FITTED_RULES, RULES, TASK_RULES
    from mianalysis.federated.registry import rule_names

    assert not set(RULES + TASK_RULES) & set(rule_names())
    # The one old name that was the registry's too is deprecated, and names a rule of headroom's own now.
    assert set(DEPRECATED_RULES) <= set(rule_names()) and set(DEPRECATED_RULES.values()) <= set(FITTED_RULES)


def test_headroom_rules_are_the_registry_rules_they_say_they_are():
    from mianalysis.analysis.studies.headroom import rule_weights
    from mianalysis.federated.aggregation import fedavg, fisher_full, inverse_variance

    errors, x = _known_case()
    w = rule_weights("inverse_mse", errors)
    np.testing.assert_allclose(w[:, 0], [9 / 19, 9 / 19, 1 / 19])
    combined = np.sum(w * x, axis=0)
    np.testing.assert_allclose(combined, [28 / 19])
    # inverse_mse is the registry's inverse_variance fed each client's mean squared error to the reference
    np.testing.assert_allclose(inverse_variance(x, variances=np.mean(errors**2, axis=1), eps=0), combined)
    # mean and weighted_mean are fedavg without and with client sizes
    np.testing.assert_allclose(np.sum(rule_weights("mean", errors) * x, axis=0), fedavg(x))
    sizes = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(np.sum(rule_weights("weighted_mean", errors, client_sizes=sizes) * x, axis=0),
                               fedavg(x, weights=sizes))
    # curvature, (sum_j A_j)^-1 A_k, is fisher_full given each client's exact Hessian A_k
    a = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.0], [0.0, 3.0]], [[4.0, -1.0], [-1.0, 2.0]]])
    theta = np.array([[1.0, -1.0], [0.0, 2.0], [3.0, 1.0]])
    curvature = np.linalg.solve(a.sum(axis=0), np.einsum("kij,kj->i", a, theta))
    np.testing.assert_allclose(fisher_full(theta, hessians=a, eps=0), curvature)


def test_the_old_name_warns_names_the_new_one_and_labels_its_rows(tmp_path):
    from mianalysis.analysis.studies.headroom import fitting_inflation, headroom_rows, oracle_weights, rule_weights

    errors, _ = _known_case()
    with pytest.warns(DeprecationWarning, match="now called 'inverse_mse'"):
        old = rule_weights("inverse_variance", errors)
    np.testing.assert_array_equal(old, rule_weights("inverse_mse", errors))
    with pytest.warns(DeprecationWarning, match="'inverse_mse'"):
        assert math.isnan(fitting_inflation("inverse_variance", 3, 1, 10))
    mean, cov = np.zeros((3, 1)), np.diag([1.0, 1.0, 9.0])
    with pytest.warns(DeprecationWarning):
        np.testing.assert_allclose(oracle_weights("inverse_variance", mean, cov)[:, 0], [9 / 19, 9 / 19, 1 / 19])
    e = np.random.default_rng(0).standard_normal((3, 40, 2)) * np.array([1.0, 1.0, 3.0])[:, None, None]
    with pytest.warns(DeprecationWarning):
        rows = headroom_rows(e, rules=["mean", "inverse_variance"])
    new = headroom_rows(e, rules=["mean", "inverse_mse"])
    assert [r["rule"] for r in rows] == ["mean", "inverse_variance"]  # as asked: older scripts reproduce their tables
    assert {k: v for k, v in rows[1].items() if k != "rule"} == {k: v for k, v in new[1].items() if k != "rule"}


def test_headroom_warns_once_for_an_old_name(tmp_path):
    from mianalysis.analysis.studies.headroom import headroom

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = headroom(_headroom_dump(tmp_path / "d"), rules=["mean", "inverse_variance"])
    assert [str(w.message).count("now called 'inverse_mse'") for w in caught
            if issubclass(w.category, DeprecationWarning)] == [1]
    assert [r["rule"] for r in rows] == ["mean", "inverse_variance"] * 2


# ---------------------------------------------------------------------- the other studies
def test_dependence_given_global_writes_its_typed_table(tmp_path):
    from mianalysis.analysis.studies.global_dependence import DEPENDENCE_TABLE, dependence_given_global

    rng = np.random.default_rng(0)
    g = np.cumsum(rng.standard_normal((3, 300, 1)), axis=0)
    local = {c: np.concatenate([g[:1], g[:-1] + rng.standard_normal((2, 300, 1))]) for c in "ab"}
    rows = dependence_given_global(local, g, units="nats", out=tmp_path / "dep.csv")
    back = StudyTable.read(tmp_path / "dep.csv", DEPENDENCE_TABLE)
    _same_rows(back.rows, rows)
    assert back.settings == {"units": "nats", "bias_correction": True, "shrinkage": None, "ci_level": 0.95,
                             "null": "analytic", "estimator": "gaussian",
                             "familywise": {"method": "holm", "family": "table", "alpha": 0.05}}
    sidecar = json.loads((tmp_path / "dep.csv.json").read_text())
    assert sidecar["format"] == "mianalysis dependence_given_global table" and sidecar["format_version"] == 1
    assert sidecar["columns"][-2:] == ["p_value", "p_adjusted"]
    # 2 rounds x 1 pair x 3 quantities: six intervals, each at 0.95 alone, together at 1 - 6 x 0.05
    assert sidecar["intervals"] == {"level": 0.95, "holds": "per row", "intervals": 6, "simultaneous_level": 0.7,
                                    "family": DEPENDENCE_TABLE.intervals.family}
    assert "intervals" not in back.record


def test_the_additive_check_writes_its_typed_table(tmp_path):
    from mianalysis import analyze
    from mianalysis.analysis.studies.additive_table import ADDITIVE_TABLE, PREDICTION_COLUMNS, additive_prediction_rows

    rng = np.random.default_rng(0)
    theta0 = rng.standard_normal((300, 2))
    scale = np.array([0.5, 1.0])[:, None, None]
    dump = ParameterDump.from_arrays(tmp_path / "d", {c: theta0 + scale * rng.standard_normal((2, 300, 2))
                                                      for c in "ab"})
    rows = additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump, n_resamples=4,
                                    out=tmp_path / "add.csv")
    assert PREDICTION_COLUMNS == tuple(c.name for c in ADDITIVE_TABLE.columns) and tuple(rows[0]) == PREDICTION_COLUMNS
    back = StudyTable.read(tmp_path / "add.csv", ADDITIVE_TABLE)
    _same_rows(back.rows, rows)
    assert back.settings["n_resamples"] == 4 and back.settings["quantity"] == "mi_gaussian"


def test_a_federated_history_is_a_typed_table(tmp_path):
    from mianalysis.analysis.studies.history import HISTORY_TABLE, write_history_table
    from mianalysis.federated.recording import history_rows

    history = [{"round": t, "replicate": r, "train_loss": 1.0 / (t + 1) + r, "train_accuracy": 0.5,
                "test_loss": 2.0, "test_accuracy": 0.25 * t, **({"eb_clients": 1.0 + r} if t else {})}
               for t in range(2) for r in range(2)]
    rows = history_rows(history)
    write_history_table(rows, tmp_path / "history.csv", settings={"rounds": 1})
    assert rows[1]["train_loss"] == 1.0 and rows[1]["train_loss_sd"] == pytest.approx(math.sqrt(0.5))
    assert math.isnan(rows[0]["eb_clients"]) and "val_loss" not in rows[0]  # no validation split: no val_ columns
    back = StudyTable.read(tmp_path / "history.csv", HISTORY_TABLE)
    _same_rows(back.rows, rows)
    assert back.settings == {"rounds": 1} and back.provenance["ended"]
    assert json.loads((tmp_path / "history.csv.json").read_text())["format_version"] == 1
