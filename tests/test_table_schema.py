"""The analysis table's one declaration (mianalysis.analysis.schema): the CSV writer, the
reader, the analysis' rows and the docs' column table all read it, so a column added there
(here a toy one, monkeypatched) appears in each; the format of existing tables is unchanged."""

from __future__ import annotations

import csv
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import COLUMNS, OPTIONAL_COLUMNS, AnalysisTable, schema
from mianalysis.analysis.schema import Column, column, new_row, render_markdown

ROOT = Path(__file__).resolve().parents[1]
# The header of every table written since the family-wise columns (format 2): fixed, byte for byte.
HEADER = ("checkpoint,iteration,client_a,client_b,quantity,value,spread,null_mean,null_std,p_value,n_runs,note,layer,"
          "ci_low,ci_high,verdict,estimate_kind,outside_calibration,null_method,change_se,change_p,p_adjusted,"
          "family_verdict")


def _gen():
    spec = importlib.util.spec_from_file_location("gen_table_columns", ROOT / "docs" / "gen_table_columns.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def _dump(folder):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 60, 2))
    return ParameterDump.from_arrays(folder / "ab", {"a": a, "b": a + rng.standard_normal((2, 60, 2))})


def test_columns_are_the_declared_fields_in_the_csv_order():
    assert ",".join(COLUMNS) == HEADER
    assert [c.name for c in schema.SCHEMA] == list(schema.AnalysisRow.__annotations__)
    assert {c.name: c.dtype for c in schema.SCHEMA if c.dtype is not str} == {
        "checkpoint": int, "iteration": int, "value": float, "spread": float, "null_mean": float, "null_std": float,
        "p_value": float, "n_runs": int, "ci_low": float, "ci_high": float, "outside_calibration": bool,
        "change_se": float, "change_p": float, "p_adjusted": float}
    assert OPTIONAL_COLUMNS == ("layer", "ci_low", "ci_high", "verdict", "estimate_kind", "outside_calibration",
                                "null_method", "change_se", "change_p", "p_adjusted", "family_verdict")
    assert all(c.meaning for c in schema.SCHEMA)


@pytest.mark.parametrize("name", ["signal_rnn/signal_rnn_paper.csv", "digits_lenet/digits_lenet_random_head.csv"])
def test_a_committed_table_reads_and_writes_back_byte_for_byte(tmp_path, name):
    path = ROOT / "figures" / name
    name = path.name
    table = AnalysisTable.read(path)
    assert isinstance(table[0]["iteration"], int) and isinstance(table[0]["outside_calibration"], bool)
    table.write_rows(tmp_path / name)
    assert (tmp_path / name).read_bytes() == path.read_bytes()


def test_new_row_fills_defaults_and_refuses_what_the_schema_does_not_have():
    row = new_row(checkpoint=1, iteration=5, client_a="a", client_b="b", quantity="mi_gaussian", value=np.float64(2),
                  n_runs=10, outside_calibration=1)
    assert type(row["value"]) is float and row["outside_calibration"] is True
    assert row["estimate_kind"] == "plain" and row["null_method"] == "none" and row["verdict"] == ""
    assert row["ci_low"] is np.nan and list(row) == list(COLUMNS)
    with pytest.raises(ValueError, match=r"no columns \['toy'\]"):
        new_row(**row, toy=1.0)
    with pytest.raises(ValueError, match=r"a row needs \['value'\]"):
        new_row(checkpoint=1, iteration=5, client_a="a", client_b="b", quantity="q", n_runs=10)
    with pytest.raises(ValueError, match=r"`null_method` must be one of \['none', 'permutation', 'analytic', 'moments'\]"):
        new_row(**{**row, "null_method": "bootstrap"})
    with pytest.raises(KeyError, match="no column 'toy'"):
        column("toy")


def test_reader_names_the_file_line_and_column_of_a_bad_value(tmp_path):
    table = analyze(_dump(tmp_path), estimators=["gaussian"], metrics=[], gaussian_null="analytic")
    table.write_rows(tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    cells = lines[1].split(",")
    cells[COLUMNS.index("value")] = "lots"
    (tmp_path / "t.csv").write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"t\.csv, line 2: `value` must be a number or empty; got 'lots'"):
        AnalysisTable.read(tmp_path / "t.csv")


def test_a_toy_column_declared_once_is_written_read_and_documented(tmp_path, monkeypatch):
    toy = Column("toy", float, unit="bits", meaning="A toy column.", default=0.25, format=2, since="the toy")
    monkeypatch.setattr(schema, "SCHEMA", schema.SCHEMA + (toy,))
    # The analysis' rows have it, the CSV writes it, the reader reads it back as a float.
    table = analyze(_dump(tmp_path), estimators=["gaussian"], metrics=[], gaussian_null="analytic")
    assert [r["toy"] for r in table] == [0.25] * len(table)
    table.write(tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="") as fh:
        written = list(csv.DictReader(fh))
    assert list(written[0])[-1] == "toy" and {r["toy"] for r in written} == {"0.25"}
    back = AnalysisTable.read(tmp_path / "t.csv")
    assert back == table and back[0]["toy"] == 0.25
    # A table written before it (the header without it) reads its default; a bad value is refused.
    text = (tmp_path / "t.csv").read_text()
    (tmp_path / "old.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in text.splitlines()) + "\n")
    old = AnalysisTable.read(tmp_path / "old.csv")
    assert [r["toy"] for r in old] == [0.25] * len(table)
    assert [r["value"] for r in old] == [r["value"] for r in table]
    (tmp_path / "bad.csv").write_text(text.replace(",0.25\n", ",x\n", 1))
    with pytest.raises(ValueError, match="`toy` must be a number"):
        AnalysisTable.read(tmp_path / "bad.csv")
    # The docs' column table shows it, with what older tables read.
    assert ("| `toy` | float | bits | A toy column. | added with the toy in format 2; older tables: `0.25` |"
            in render_markdown().splitlines())
    assert "`toy`" in _gen().render((ROOT / "docs" / "guide" / "analysis.md").read_text())


def test_a_derived_column_says_how_older_tables_get_it():
    assert column("estimate_kind").derived and column("change_p").derived and not column("p_adjusted").derived
    assert replace(column("layer"), since="").optional is False


def test_docs_column_table_is_current():
    gen = _gen()
    page = (ROOT / "docs" / "guide" / "analysis.md").read_text()
    assert gen.render(page) == page, "docs/guide/analysis.md's column table is out of date: run " \
                                     "python docs/gen_table_columns.py"
    assert render_markdown() in page and render_markdown().count("\n") == len(COLUMNS) + 2
