"""The analysis table as an object (mianalysis.analysis.table): typed columns computed by
the analysis, derived from the notes of old tables, written and read back; the table as a
sequence of rows; plots and findings that read the columns, not the notes.

``tests/data/old_table_v1.csv`` is a table of format version 1 (no typed columns), written
by the analysis of commit 7a9d3ff (before the table was an object) for :data:`CASES` on
:func:`old_table_dumps`, one case after another under one header."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import (BASE_COLUMNS, COLUMNS, FORMAT_VERSION, TYPED_COLUMNS, AnalysisTable,
                                 sidecar_path)
from mianalysis.analysis.table import columns_from_note

OLD_TABLE = Path(__file__).parent / "data" / "old_table_v1.csv"


def old_table_dumps(path):
    """Two dumps (60 and 18 runs, two checkpoints, clients a, b, c, d of 5 parameters in
    tensors w (3) and b (2)): b and c depend on a; c has a constant parameter; d is a's copy
    (identical samples); at checkpoint 1 b's last parameter repeats its first (a singular
    covariance)."""
    dumps = []
    for runs in (60, 18):
        rng = np.random.default_rng(runs)
        a = rng.standard_normal((2, runs, 5))
        b = 0.6 * a + 0.8 * rng.standard_normal((2, runs, 5))
        b[1, :, 4] = b[1, :, 0]
        c = 0.3 * a + rng.standard_normal((2, runs, 5))
        c[:, :, 2] = 1.5
        samples = {name: x.astype(np.float32) for name, x in (("a", a), ("b", b), ("c", c), ("d", a))}
        dumps.append(ParameterDump.from_arrays(path / f"d{runs}", samples, layout=[("w", (3,)), ("b", (2,))]))
    return dumps


# (dump index, analyze keywords): analytic nulls, permutations and none; plain, shrunk (few
# runs) and singular-covariance estimates; estimates inside and outside calibration.
CASES = [
    (0, {"estimators": ("gaussian", "ksg", "copula"), "metrics": ("euclidean",), "gaussian_null": "analytic",
         "n_permutations": {"gaussian": 3, "ksg": 2, "copula": 2}, "ci_resamples": {"gaussian": 4, "ksg": 2, "copula": 4},
         "random_state": 1}),
    (1, {"estimators": ("gaussian", "ksg"), "metrics": (), "ci_resamples": 4, "random_state": 2}),
    (0, {"estimators": ("gaussian",), "metrics": (), "by": "layer", "n_permutations": 2, "ci_resamples": 3,
         "random_state": 3}),
]


@pytest.fixture(scope="module")
def new_rows(tmp_path_factory):
    from test_seams import bootstrap_level_intervals_set

    dumps = old_table_dumps(tmp_path_factory.mktemp("dumps"))
    rows = []
    with bootstrap_level_intervals_set():  # the level intervals of the old table's analysis (bootstrap)
        for which, case in CASES:
            rows += analyze(dumps[which], verify=False, **case)
    return rows


SINGULAR_ADVICE = ("estimator='bound' gives a lower bound (mianalysis.mi chooses an estimate or a bound), or drop "
                   "the dependent features, or estimate one layer at a time")


def _same(a, b):
    if isinstance(b, float):
        return a == b or (np.isnan(a) and np.isnan(b)) or np.isclose(a, b, rtol=1e-9, atol=0)
    return a == b


def test_an_old_table_reads_with_the_typed_columns_the_analysis_computes(new_rows):
    old = AnalysisTable.read(OLD_TABLE)
    with open(OLD_TABLE, newline="") as fh:
        assert not set(TYPED_COLUMNS) & set(next(csv.reader(fh)))  # the fixture is of format 1
    assert len(old) == len(new_rows)
    for got, want in zip(old, new_rows):
        # The numbers and notes of the analysis are those of the table written before it was an
        # object; the columns derived from the old notes are those it now computes.
        # The old notes advised shrinkage for a singular covariance; the advice is now the bound.
        got = {**got, "note": got["note"].replace("use shrinkage='ledoit-wolf'", SINGULAR_ADVICE)}
        assert all(_same(got[c], want[c]) for c in BASE_COLUMNS), (got, want)
        assert {c: got[c] for c in TYPED_COLUMNS} == {c: want[c] for c in TYPED_COLUMNS}, want
        assert isinstance(got["outside_calibration"], bool) and isinstance(want["outside_calibration"], bool)
    # The fixture holds every kind the analysis makes today.
    assert {r["estimate_kind"] for r in old} == {"plain", "shrinkage"}
    assert {r["null_method"] for r in old} == {"none", "permutation", "analytic"}
    assert {r["outside_calibration"] for r in old} == {True, False}
    singular = [r for r in new_rows if "not positive definite" in r["note"]]
    assert singular and all(r["estimate_kind"] == "shrinkage" and r["null_method"] == "permutation" for r in singular)
    assert all(r["verdict"] == "not made: shrinkage estimate" and r["estimate_kind"] == "shrinkage"
               for r in new_rows if r["quantity"] == "delta_mi_gaussian" and "ledoit-wolf" in r["note"])


def test_write_and_read_keep_columns_types_settings_and_provenance(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 40, 30))  # 40 runs <= 2 x 60 joint dims: shrinkage
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": a + rng.standard_normal((2, 40, 30))})
    table = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], n_permutations=2)
    assert isinstance(table, AnalysisTable) and table.settings["estimators"] == ["gaussian"]
    assert len(table.provenance) == 1 and table.provenance[0]["ended"] is not None
    assert table.record["dump_runs"] == {"analysed": 40, "total": 40, "complete": True}
    table.write(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="") as fh:
        assert next(csv.reader(fh)) == list(COLUMNS)
    sidecar = json.loads(sidecar_path(tmp_path / "t.csv").read_text())
    assert sidecar["format_version"] == FORMAT_VERSION == 2 and sidecar["table"] == "t.csv"
    back = AnalysisTable.read(tmp_path / "t.csv")
    assert back == table and back.settings == table.settings and back.provenance == table.provenance
    assert back.record == table.record
    mi = back.select("mi_gaussian", "a", "b")
    assert [r["estimate_kind"] for r in mi] == ["shrinkage", "shrinkage"]
    assert all(r["outside_calibration"] is True and r["null_method"] == "permutation" for r in mi)
    assert [r["null_method"] for r in back.select("euclidean")] == ["none", "none"]
    # analyze(out=...) writes the same table and sidecar format.
    analyze(dump, estimators=["gaussian"], metrics=["euclidean"], n_permutations=2, out=tmp_path / "u.csv")
    assert AnalysisTable.read(tmp_path / "u.csv") == table
    assert json.loads(sidecar_path(tmp_path / "u.csv").read_text())["format_version"] == FORMAT_VERSION


def test_a_table_is_a_sequence_of_rows(new_rows):
    table = AnalysisTable(new_rows, settings={"k": 3})
    assert len(table) == len(new_rows) and table[0] is new_rows[0] and table[-1] == new_rows[-1]
    assert list(table) == new_rows and table == new_rows and table[1:3] == new_rows[1:3]
    assert table == AnalysisTable(new_rows) and AnalysisTable.of(table) is table
    layer_w = table.select("mi_gaussian", "a", "b", layer="w")
    assert layer_w and all(r["layer"] == "w" for r in layer_w)
    assert [r["checkpoint"] for r in layer_w] == sorted(r["checkpoint"] for r in layer_w)
    assert len(table.select("mi_gaussian", "a", "b")) > len(layer_w)
    assert "rows" in repr(table)


def test_hand_made_rows_get_the_optional_columns():
    row = {"checkpoint": 0, "iteration": 0, "client_a": "a", "client_b": "b", "quantity": "mi_gaussian",
           "value": 1.0, "p_value": 0.5, "note": "analytic null (exact); outside calibration: > 4 joint dims"}
    (got,) = AnalysisTable([row])
    assert got["layer"] == "" and got["verdict"] == "" and np.isnan(got["ci_low"])
    assert (got["estimate_kind"], got["outside_calibration"], got["null_method"]) == ("plain", True, "analytic")
    assert "layer" not in row  # the caller's dict is left as it is
    assert columns_from_note("no analytic null with shrinkage", np.nan)["null_method"] == "none"
    assert columns_from_note("ledoit-wolf shrinkage at checkpoint 1")["estimate_kind"] == "shrinkage"


def test_reading_refuses_bad_typed_values_and_newer_formats(tmp_path, new_rows):
    AnalysisTable(new_rows[:3]).write(tmp_path / "t.csv")
    text = (tmp_path / "t.csv").read_text()
    (tmp_path / "bad.csv").write_text(text.replace(",plain,", ",guess,", 1))
    with pytest.raises(ValueError, match=r"bad.csv, line 2: `estimate_kind` must be one of \['plain'"):
        AnalysisTable.read(tmp_path / "bad.csv")
    (tmp_path / "flag.csv").write_text(text.replace(",False,", ",maybe,", 1))
    with pytest.raises(ValueError, match="`outside_calibration` must be True or False; got 'maybe'"):
        AnalysisTable.read(tmp_path / "flag.csv")
    sidecar_path(tmp_path / "t.csv").write_text(json.dumps({"format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ValueError, match="format version 3 .* reads versions up to 2"):
        AnalysisTable.read(tmp_path / "t.csv")
    sidecar_path(tmp_path / "t.csv").write_text("not json")  # a sidecar another tool broke: ignored
    assert AnalysisTable.read(tmp_path / "t.csv").settings == {}


def test_plots_and_findings_read_the_columns_not_the_notes(new_rows):
    from mianalysis.report.experiment import finding
    from mianalysis.report.plots import estimator_variant, pair_summary

    mi = [r for r in new_rows if r["quantity"] == "mi_ksg" and r["layer"] == ""][:2]
    assert all(r["outside_calibration"] for r in mi)
    silent = [{**r, "note": ""} for r in mi]  # the columns without the words
    assert pair_summary(silent, "mi_ksg")["outside"].all()
    words = [{**r, "outside_calibration": False} for r in mi]  # the words without the column
    assert not pair_summary(words, "mi_ksg")["outside"].any()
    gauss = [{**r, "note": ""} for r in new_rows if r["quantity"] == "mi_gaussian"]
    assert "Ledoit-Wolf shrinkage" in estimator_variant(gauss, "gaussian")
    plain = [{**r, "estimate_kind": "plain", "null_method": "analytic", "p_value": 0.01} for r in gauss]
    assert estimator_variant(plain, "gaussian") == "bias-corrected"
    assert finding(gauss)["mi_gaussian_above_null"] == "not made: shrinkage estimate"
    assert finding(plain, n_permutations=2)["mi_gaussian_above_null"] is True  # analytic: no permutations needed


def test_an_experiment_record_around_the_table_sidecar_is_read(tmp_path):
    # run_experiment's record is the table's sidecar, with the table's own under "analysis".
    import json

    from mianalysis.analysis import AnalysisTable, sidecar_path

    table = AnalysisTable([], settings={"k": 3}, provenance=[{"session": 1}])
    table.write(tmp_path / "t.csv")
    own = json.loads(sidecar_path(tmp_path / "t.csv").read_text())
    sidecar_path(tmp_path / "t.csv").write_text(json.dumps({"task": "x", "settings": {"lr": 0.1}, "analysis": own}))
    read = AnalysisTable.read(tmp_path / "t.csv")
    assert read.settings == {"k": 3} and read.provenance == [{"session": 1}]
