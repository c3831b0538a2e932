"""A bound's rows read from a table without the `estimate_kind` column are still bounds: no
trend verdict is made from their changes."""

from mianalysis.analysis.table import complete_row


def test_a_bound_row_without_its_kind_column_is_completed_as_a_bound():
    row = {"quantity": "delta_mi_bound", "note": "", "value": 0.3, "ci_low": 0.1, "ci_high": 0.5}
    assert complete_row(row)["estimate_kind"] == "bound"
    assert complete_row({**row, "quantity": "mi_bound"})["estimate_kind"] == "bound"
    assert complete_row({**row, "quantity": "delta_mi_copula"})["estimate_kind"] == "plain"
    assert complete_row({**row, "quantity": "euclidean"})["estimate_kind"] == "plain"
