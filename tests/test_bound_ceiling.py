import numpy as np
from mianalysis.estimators.bound import bound_ceiling, projection_bound
from mianalysis.analysis.compute import _mi_row

def test_the_bound_never_exceeds_its_ceiling_and_a_row_near_it_says_so():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 30))
    y = x + 1e-6 * rng.standard_normal((200, 30))  # MI far above what 200 runs can show
    result = projection_bound(x, y)
    assert result.value <= bound_ceiling(200)
    assert result.value >= 0.9 * bound_ceiling(200)
    row = _mi_row(x, y, "bound", 3, 0, np.random.default_rng(1))
    assert "near its ceiling" in row["note"]
    far = _mi_row(x, 0.3 * x + rng.standard_normal((200, 30)), "bound", 3, 0, np.random.default_rng(1))
    assert "ceiling" not in far["note"]


def test_the_bottom_line_says_when_bound_rows_sit_at_the_ceiling():
    from mianalysis.report.bottom_line import bottom_line
    base = {"quantity": "mi_bound", "client_a": "a", "client_b": "b", "layer": "", "checkpoint": 1,
            "iteration": 1, "value": 8.9, "spread": 0.1, "null_mean": 0.0, "null_std": 0.1, "p_value": 0.001,
            "p_adjusted": 0.002, "family_verdict": "above null", "null_method": "permutation", "n_runs": 400,
            "estimate_kind": "bound", "outside_calibration": False}
    near = dict(base, note="near its ceiling of 9.09 bits (1 + ln of the runs per evaluation fold)")
    text = " ".join(bottom_line([near, dict(base, iteration=2, checkpoint=2, note="")]))
    assert "1 row (" in text and "near the bound's ceiling" in text
    assert "ceiling" not in " ".join(bottom_line([dict(base, note="")]))
