"""experiments/sources_of_dependence.py: cells carried over from an earlier summary table
give the same table as the run that made them, and are named as carried over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "sources_of_dependence.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "gaussian", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=300)


@pytest.mark.filterwarnings("ignore")
def test_carried_over_cells_give_the_same_table(tmp_path):
    pytest.importorskip("matplotlib")
    first, again = tmp_path / "first", tmp_path / "again"
    _run("--work", tmp_path / "work", "--out", first)
    out = _run("--work", tmp_path / "empty", "--out", again, "--carry-over", first / "sources_of_dependence_quick.csv")
    assert "carried over" in out.stdout
    assert not list((tmp_path / "empty").rglob("*.csv"))  # nothing was sampled or analysed again
    assert (again / "sources_of_dependence_quick.csv").read_text() == (first / "sources_of_dependence_quick.csv").read_text()
    md_first, md_again = ((d / "sources_of_dependence_quick.md").read_text() for d in (first, again))
    assert md_again.startswith(md_first.rstrip("\n")) and "not rerun: gaussian_per-run_nothing_seed0" in md_again
    sidecar = json.loads((again / "sources_of_dependence_quick.csv.json").read_text())
    assert len(sidecar["carried_over"]["cells"]) == 6 and sidecar["carried_over"]["provenance"]["started"]
    assert set(sidecar["seconds"].values()) == {None}
