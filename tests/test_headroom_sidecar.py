"""`mianalysis headroom --out T.csv` writes T.csv.json beside its table, as analyze does
(issue 51, item 5): what was measured (the dump, its runs and chunk digest, the reference,
the settings), the verdicts it printed, a format version and the session's provenance."""

from __future__ import annotations

import json

import numpy as np

from mianalysis import ParameterDump
from mianalysis.cli import HEADROOM_FORMAT_VERSION, main
from mianalysis.dumps import OPTIMUM


def _dump(path):
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((2, 200, 2))
    samples = {k: theta + s * rng.standard_normal(theta.shape) for k, s in zip("abc", (1.0, 1.0, 3.0))}
    return ParameterDump.from_arrays(path, {**samples, OPTIMUM: theta}, checkpoints=[1, 2])


def test_the_headroom_table_has_a_sidecar_with_its_settings_verdicts_and_provenance(tmp_path, capsys):
    dump = _dump(tmp_path / "d")
    out = tmp_path / "h.csv"
    assert main(["headroom", str(tmp_path / "d"), "--out", str(out), "--rules", "mean", "blue_coordinate",
                 "--folds", "3", "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    record = json.loads((tmp_path / "h.csv.json").read_text())
    assert record["format_version"] == HEADROOM_FORMAT_VERSION
    assert record["dump_runs"] == 200 and record["dump_chunks"] == dump.chunks_digest()
    assert record["settings"]["reference"] == "auto" and record["settings"]["reference_used"].startswith(OPTIMUM)
    assert record["settings"]["rules"] == ["blue_coordinate", "mean"]
    assert record["settings"]["iterations"] == [1, 2] and record["settings"]["folds"] == 3
    assert record["verdicts"] == printed[-2:]  # the verdict sentences it printed last
    assert record["provenance"]["ended"]
    assert record["columns"][:2] == out.read_text().splitlines()[0].split(",")[:2]


def test_a_refused_headroom_out_writes_no_sidecar(tmp_path):
    _dump(tmp_path / "d")
    (tmp_path / "h.csv").write_text("kept\n")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), "--no-progress"]) != 0
    assert (tmp_path / "h.csv").read_text() == "kept\n" and not (tmp_path / "h.csv.json").exists()
