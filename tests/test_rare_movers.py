"""experiments/rare_movers.py: parameters that move in a handful of runs only are found,
with the rank deficit they give the kept columns' covariance."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "rare_movers.py"


def _script():
    spec = importlib.util.spec_from_file_location("rare_movers_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_columns_moving_in_one_run_are_found_and_their_rank_deficit_counted():
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.standard_normal((200, 3)), np.full((200, 3), 0.5)]).astype(np.float32)
    x[7, 3] += np.float32(1e-3)  # two parameters that move in run 7 only: one dimension between them
    x[7, 4] -= np.float32(2e-3)
    x[[3, 9], 5] = np.float32(0.5) + np.spacing(np.float32(0.5))  # rounding: dropped by the relative rule
    movers, kept, deficit = _script().rare_movers(x, max_runs=5)
    assert movers == {3: [7], 4: [7]} and kept == 5 and deficit == 1
    movers, kept, deficit = _script().rare_movers(x[:, :3], max_runs=5)
    assert movers == {} and kept == 3 and deficit == 0
    x[11, 4] += np.float32(1e-3)  # column 4 now moves in runs 7 and 11: independent of column 3
    movers, kept, deficit = _script().rare_movers(x, max_runs=1)
    assert movers == {3: [7]} and deficit == 0


def test_bad_input_is_named():
    script = _script()
    with pytest.raises(ValueError, match="at least 2 runs"):
        script.rare_movers(np.zeros((1, 3)), 5)
    with pytest.raises(ValueError, match="max_runs must be an integer >= 1; got 0"):
        script.rare_movers(np.zeros((4, 3)), 0)


def test_the_script_lists_them_per_client_and_checkpoint_and_writes_a_portable_table(tmp_path):
    import csv
    import json

    from mianalysis import ParameterDump

    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 60, 4)).astype(np.float32)
    b = a.copy()
    b[1, :, 3] = 0.25
    b[1, 40, 3] = 0.5  # client b's last parameter moves in run 40 only, at the second checkpoint
    ParameterDump.from_arrays(tmp_path / "dump", {"a": a, "b": b}, checkpoints=[0, 5])
    rows = _script().main([str(tmp_path / "dump"), "--out", str(tmp_path / "movers.csv")])
    assert [(r["client"], r["iteration"], r["kept"], r["rare_movers"], r["columns"], r["moved_in_runs"])
            for r in rows] == [("a", 0, 4, 0, "", ""), ("a", 5, 4, 0, "", ""), ("b", 0, 4, 0, "", ""),
                               ("b", 5, 4, 1, "3", "40")]
    with open(tmp_path / "movers.csv", newline="") as fh:
        assert [r["columns"] for r in csv.DictReader(fh)] == ["", "", "", "3"]
    sidecar = json.loads((tmp_path / "movers.csv.json").read_text())
    assert sidecar["runs"] == 60 and sidecar["dump"].startswith("<outside the repository>/")
    with pytest.raises(SystemExit):
        _script().main([str(tmp_path / "dump"), "--runs", "61"])
