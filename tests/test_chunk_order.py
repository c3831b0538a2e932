"""Chunks written out of order: the same dump as in order, resumed exactly after a kill,
and overlapping chunks refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interrupt import kill_at_random_moments

from mianalysis.dumps import DumpError, ParameterDump, layout_from_shapes

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
CHUNKS = [(0, 3), (3, 6), (6, 9), (9, 10)]


def _blocks(start, stop, seed=0):
    rng = np.random.default_rng(seed)
    samples = {c: rng.standard_normal((2, 10, 4)).astype(np.float32) for c in "ab"}
    metrics = {c: rng.random((1, 2, 10)).astype(np.float32) for c in "ab"}
    return ({c: s[:, start:stop] for c, s in samples.items()}, {c: m[..., start:stop] for c, m in metrics.items()})


def _write(path, order):
    dump = ParameterDump.create(path, clients=["a", "b"], checkpoints=[0, 5], n_runs=10,
                                layout=layout_from_shapes([("w", (2, 2))]), metric_names=["loss"])
    for start, stop in order:
        dump.write_chunk(start, stop, *_blocks(start, stop))
    return dump


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.f32"))}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffled_chunks_give_the_bytes_and_chunk_list_of_in_order_ones(tmp_path, seed):
    order = [CHUNKS[i] for i in np.random.default_rng(seed).permutation(len(CHUNKS))]
    in_order, shuffled = _write(tmp_path / "in", CHUNKS), _write(tmp_path / "shuffled", order)
    assert _files(tmp_path / "in") == _files(tmp_path / "shuffled")
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("in", "shuffled")]
    assert manifests[0]["chunks"] == manifests[1]["chunks"]
    assert [(c["start"], c["stop"]) for c in manifests[1]["chunks"]] == CHUNKS  # kept sorted by start
    reopened = ParameterDump.open(tmp_path / "shuffled")
    assert reopened.chunks_digest() == in_order.chunks_digest() and reopened.verify() == 10 and reopened.complete
    assert shuffled.written_runs == 10 and shuffled.missing_ranges() == []


def test_completed_runs_is_the_written_prefix(tmp_path):
    dump = _write(tmp_path / "d", [(6, 9), (0, 3)])
    assert (dump.completed_runs, dump.written_runs, dump.complete) == (3, 6, False)
    assert dump.missing_ranges() == [(3, 6), (9, 10)]
    assert dump.missing_chunks(3) == [(3, 6), (9, 10)] and dump.missing_chunks(2) == [(3, 4), (4, 6), (9, 10)]
    assert dump.samples("a", index=1).shape == (3, 4) and dump.metric("b", "loss").shape == (2, 3)
    assert dump.verify() == 6  # every written chunk is checked, also those after the gap
    raw = np.fromfile(tmp_path / "d" / "client_0.f32", dtype="<f4").reshape(2, 10, 4)
    raw[1, 7, 0] += 1  # damage a run after the gap
    raw.tofile(tmp_path / "d" / "client_0.f32")
    with pytest.raises(DumpError, match=r"runs 6-9 of client 'a' do not match their checksum"):
        ParameterDump.open(tmp_path / "d").verify()


def test_the_digest_covers_chunks_after_a_gap(tmp_path):
    one = _write(tmp_path / "one", [(0, 3)])
    two = _write(tmp_path / "two", [(0, 3), (6, 9)])
    assert one.completed_runs == two.completed_runs == 3 and one.chunks_digest() != two.chunks_digest()


@pytest.mark.parametrize("start, stop, other", [(2, 4, "3-6"), (3, 6, "3-6"), (0, 10, "3-6"), (5, 7, "3-6")])
def test_an_overlapping_chunk_is_refused_naming_both(tmp_path, start, stop, other):
    dump = _write(tmp_path / "d", [(3, 6)])
    before = _files(tmp_path / "d"), (tmp_path / "d" / "manifest.json").read_bytes()
    with pytest.raises(DumpError, match=rf"chunk {start}-{stop} overlaps the written chunk {other} .*nothing was "
                                        r"written .*\[\(0, 3\), \(6, 10\)\]"):
        dump.write_chunk(start, stop, *_blocks(start, stop))
    assert (_files(tmp_path / "d"), (tmp_path / "d" / "manifest.json").read_bytes()) == before


@pytest.mark.parametrize("start, stop", [(-1, 2), (8, 11), (4, 4), (5, 3)])
def test_a_chunk_outside_the_runs_is_refused(tmp_path, start, stop):
    dump = _write(tmp_path / "d", [])
    with pytest.raises(DumpError, match=rf"chunk {start}-{stop} is not a range of runs within 0-10"):
        dump.write_chunk(start, stop, {c: np.zeros((2, max(stop - start, 0), 4)) for c in "ab"})


def test_a_float_start_is_refused(tmp_path):
    dump = _write(tmp_path / "d", [])
    with pytest.raises(TypeError, match="`start` must be an integer run; got 0.0"):
        dump.write_chunk(0.0, 3, _blocks(0, 3)[0])


def test_a_dump_written_in_order_before_reads_and_resumes_as_before(tmp_path):
    """The manifest of an in-order dump is unchanged by this feature: same digest, same resume."""
    dump = _write(tmp_path / "d", CHUNKS[:2])
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert [(c["start"], c["stop"]) for c in manifest["chunks"]] == CHUNKS[:2]
    again = ParameterDump.open(tmp_path / "d")
    assert again.completed_runs == again.written_runs == 6 and again.missing_chunks(3) == [(6, 9), (9, 10)]
    assert again.chunks_digest() == dump.chunks_digest()


# --------------------------------------------------------------------------- the sampler
SAMPLE = ["sample", "--task", "signal-rnn", "--runs", "12", "--chunk-size", "2", "--seed", "5", "--no-progress",
          "--set", "n_layers=2", "--set", "seq_len=8", "--set", "n_examples=20", "--set", "batch_size=8",
          "--set", "hidden=3"]
# A sampler that writes its chunks in a random order (as several workers would), then is killed.
SHUFFLED = ("import random, sys, time; from mianalysis.cli import main; import mianalysis.dumps as d\n"
            "missing = d.ParameterDump.missing_chunks\n"
            "def shuffled(self, size):\n"
            "    chunks = missing(self, size)\n"
            "    random.Random().shuffle(chunks)\n"
            "    return chunks\n"
            "d.ParameterDump.missing_chunks = shuffled\n"
            "write = d.ParameterDump.write_chunk\n"
            "def slow(self, *args):\n"  # training a chunk takes time: the kill lands in or between chunks
            "    time.sleep(0.05)\n"
            "    write(self, *args)\n"
            "    time.sleep(0.05)\n"
            "d.ParameterDump.write_chunk = slow\n"
            "sys.exit(main(sys.argv[1:]))\n")


def _written(manifest):
    try:
        return len(json.loads(manifest.read_text())["chunks"])
    except (OSError, ValueError):
        return 0


def test_a_sampler_killed_between_out_of_order_chunks_resumes_exactly(tmp_path, single_threaded_torch):
    # in this process on one thread, as the killed samplers (ENV): the dumps are compared byte for byte
    from mianalysis.cli import main

    main(SAMPLE + ["--out", str(tmp_path / "clean")])
    killed = tmp_path / "killed"
    kills = kill_at_random_moments([sys.executable, "-c", SHUFFLED, *SAMPLE, "--out", str(killed)],
                                   lambda: _written(killed / "manifest.json"), env=ENV, seed=1, times=2,
                                   after_each=lambda: ParameterDump.open(killed).verify())
    partial = ParameterDump.open(killed)
    assert kills >= 1 and 0 < partial.written_runs < 12
    main(SAMPLE + ["--out", str(killed)])  # resumes: the missing chunks on the grid of 2 runs
    assert _files(tmp_path / "clean") == _files(killed)
    clean = json.loads((tmp_path / "clean" / "manifest.json").read_text())
    resumed = json.loads((killed / "manifest.json").read_text())
    assert clean["chunks"] == resumed["chunks"] and [c["stop"] - c["start"] for c in clean["chunks"]] == [2] * 6
