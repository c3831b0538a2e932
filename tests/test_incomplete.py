"""An incomplete dump (still being sampled, or stopped) is analysed as far as it goes, and
says so: on the terminal, in every row's note and in the sidecar."""

import csv
import json

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import sidecar_path
from mianalysis.dumps import layout_from_shapes


def _partial(path, done=40, total=200, params=3, seed=0):
    """A dump of 3 clients with `done` of `total` runs written, a loss recorded."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((2, done, params))
    dump = ParameterDump.create(path, clients=["a", "b", "c"], checkpoints=[0, 7], n_runs=total,
                                layout=layout_from_shapes([("params", (params,))]),
                                metric_names=["loss"])
    samples = {c: (shared + rng.standard_normal(shared.shape)).astype(np.float32) for c in dump.clients}
    metrics = {c: rng.random((1, 2, done)).astype(np.float32) for c in dump.clients}
    dump.write_chunk(0, done, samples, metrics)
    return dump, samples, metrics


@pytest.mark.parametrize("done, total", [(40, 200), (5, 6), (199, 200)])
def test_every_row_of_an_incomplete_dump_says_so(tmp_path, done, total):
    dump, _, _ = _partial(tmp_path / "d", done, total)
    rows = analyze(dump, n_permutations=2, out=tmp_path / "t.csv")
    assert rows and all(r["n_runs"] == done for r in rows)
    assert all(r["note"].endswith(f"dump incomplete: {done} of {total} runs") for r in rows)
    with open(tmp_path / "t.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["note"] for r in table] == [r["note"] for r in rows]
    sidecar = json.loads(sidecar_path(tmp_path / "t.csv").read_text())
    assert sidecar["dump_runs"] == {"analysed": done, "total": total, "complete": False}


def test_the_incomplete_note_follows_the_estimators_notes(tmp_path):
    dump, _, _ = _partial(tmp_path / "d", done=8, total=20, params=3)  # 8 runs <= 2 x 6 dims: shrinkage
    rows = analyze(dump, estimators=["gaussian"], metrics=[])
    notes = [r["note"] for r in rows if r["quantity"] == "mi_gaussian"]
    assert notes and all(n.startswith("ledoit-wolf shrinkage: 8 runs <= 2 x 6") for n in notes)
    assert all(n.endswith("; dump incomplete: 8 of 20 runs") for n in notes)


def test_the_rows_of_an_incomplete_dump_are_those_of_its_completed_runs(tmp_path):
    dump, samples, metrics = _partial(tmp_path / "d", 40, 200)
    whole = ParameterDump.from_arrays(tmp_path / "w", samples, checkpoints=[0, 7],
                                      metrics={c: {"loss": metrics[c][0]} for c in samples})
    old_default = {"estimators": ["gaussian", "ksg"], "n_permutations": 3}
    partial_rows, whole_rows = analyze(dump, **old_default), analyze(whole, **old_default)
    assert [{**r, "note": ""} for r in partial_rows] == [{**r, "note": ""} for r in whole_rows]
    # Only the regime notes (KSG at 40 runs is outside its calibration), no incomplete note.
    assert not [r["note"] for r in whole_rows if r["note"] and not r["note"].startswith("outside calibration")]


def test_a_complete_dump_has_no_incomplete_note(tmp_path):
    rng = np.random.default_rng(1)
    ParameterDump.from_arrays(tmp_path / "d", {c: rng.standard_normal((2, 50, 2)) for c in "ab"})
    rows = analyze(tmp_path / "d", out=tmp_path / "t.csv")
    assert all("incomplete" not in r["note"] for r in rows)
    assert json.loads(sidecar_path(tmp_path / "t.csv").read_text())["dump_runs"] == {
        "analysed": 50, "total": 50, "complete": True}


def test_cli_analyze_of_an_incomplete_dump_says_so_on_the_terminal(tmp_path, cli):
    _partial(tmp_path / "d", 40, 200)
    out = cli(["analyze", tmp_path / "d", "--out", tmp_path / "t.csv", "--no-progress"])
    assert out.returncode == 0, out.stderr
    assert "dump incomplete: analysed 40 of 200 runs" in out.stderr
    assert out.stdout.startswith("wrote ")
    with open(tmp_path / "t.csv", newline="") as fh:
        assert all(r["note"].endswith("dump incomplete: 40 of 200 runs") for r in csv.DictReader(fh))


def test_cli_analyze_of_a_complete_dump_says_nothing_more(tmp_path, cli):
    rng = np.random.default_rng(1)
    ParameterDump.from_arrays(tmp_path / "d", {c: rng.standard_normal((2, 50, 2)) for c in "ab"})
    out = cli(["analyze", tmp_path / "d", "--out", tmp_path / "t.csv", "--no-progress"])
    assert out.returncode == 0 and "incomplete" not in out.stdout + out.stderr


def test_cli_analyze_while_the_sampler_writes(tmp_path, monkeypatch, cli):
    """A sampler stopped after its first chunk (as one still running would be): analyse, then finish."""
    sample = ["sample", "--task", "signal-rnn", "--runs", "8", "--chunk-size", "4", "--set", "n_layers=2",
              "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8", "--no-progress",
              "--out", tmp_path / "d"]
    write = ParameterDump.write_chunk

    def once(self, start, stop, *args, **kwargs):
        write(self, start, stop, *args, **kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(ParameterDump, "write_chunk", once)
    with pytest.raises(SystemExit):
        cli(sample)
    monkeypatch.setattr(ParameterDump, "write_chunk", write)
    assert ParameterDump.open(tmp_path / "d").completed_runs == 4
    args = ["analyze", tmp_path / "d", "--out", tmp_path / "t.csv", "--no-progress", "--estimators", "gaussian"]
    out = cli(args)
    assert out.returncode == 0 and "dump incomplete: analysed 4 of 8 runs" in out.stderr
    assert cli(sample).returncode == 0
    out = cli(args)
    assert out.returncode == 0 and "incomplete" not in out.stderr
    assert "incomplete" not in (tmp_path / "t.csv").read_text()
