"""experiments/digits_lenet_movers.py on a small dump laid out as digits_lenet_paper.py lays
out its 26,400-run cells: the Gaussian MI with the rare movers held, their bound read back
from the notes, and a clear refusal where the dump is missing."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    """The script, imported from experiments/ (on the path: tests/conftest.py)."""
    import digits_lenet_movers

    return digits_lenet_movers


def _cell(work, n_runs=240, seed=0):
    """Clients 0-2 over checkpoints 0-2 (iterations 0, 1, 2): 3 parameters each, correlated
    0.6 across clients from checkpoint 1 on, constant at checkpoint 0; client 2 also has 3
    parameters that move together in run 5 only (its covariance singular)."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((3, n_runs, 3))
    arrays = {}
    for c in range(3):
        own = 0.6 * shared + 0.8 * rng.standard_normal((3, n_runs, 3))
        extra = np.full((3, n_runs, 3), 0.25)
        if c == 2:
            extra[1:, 5] = [[0.5, 0.75, 1.0]] * 2
        arrays[str(c)] = np.concatenate([own, extra], axis=2)
        arrays[str(c)][0] = 0.0
    path = work / "full_26400" / "dumps" / "fixed-augmentation-26400"
    path.parent.mkdir(parents=True)
    return ParameterDump.from_arrays(path, arrays)


def test_movers_script_holds_them_and_reads_the_bound_back(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "PERMUTATIONS", 5)
    _cell(tmp_path / "work")
    assert script.main(["--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--cells",
                        "fixed-augmentation-26400"]) == 0
    with (tmp_path / "out" / "digits_lenet_movers.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    made = [r for r in rows if r["iteration"] != ""]
    assert sorted({r["pair"] for r in made}) == ["0-1", "0-2", "1-2"]
    assert {r["iteration"] for r in made} == {"1", "2"}
    assert all(r["estimate_kind"] == "plain" for r in made)
    with_2 = [r for r in made if "2" in r["pair"]]
    assert all(r["held"] == "client_b 3 moving in 1 of 240 runs" for r in with_2)
    assert {r["held_bound_bits"] for r in with_2} == {"0.039"}  # h(1/240) to 2 digits, as the note writes it
    assert all(r["held"] == "" for r in made if r["pair"] == "0-1")
    trend = [r for r in rows if r["iteration"] == ""]
    assert len(trend) == 3 and all(r["held"].startswith("trend row: 2: ") for r in trend)
    page = (tmp_path / "out" / "digits_lenet_movers.md").read_text()
    assert "held at their most common value" in page and "client_b 3 moving in 1 of 240 runs (0.039)" in page


def test_movers_script_refuses_a_missing_dump(script, tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--work", str(tmp_path), "--seed", "1", "--cells", "fixed-nothing-26400"])
    err = capsys.readouterr().err
    assert "no dump at" in err and "digits_lenet_paper.py --only CELL --seed 1" in err
