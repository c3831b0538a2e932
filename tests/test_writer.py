"""DumpWriter: a user's own loop records (run, client, checkpoint) in any order;
chunks are written once complete, the dump equals from_arrays of the same values, it
resumes, and every bad record is named without touching what is written."""

import json
import os
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from interrupt import kill_at_random_moments

from mianalysis import DumpWriter, ParameterDump
from mianalysis.dumps.writer import IncompleteChunkWarning, layout_difference, named_arrays
from mianalysis.dumps import DumpError

ROOT = Path(__file__).resolve().parents[1]
CLIENTS, CHECKPOINTS, RUNS = ["a", "b", "c"], [0, 5, 10], 10
LAYOUT = [("w", (2, 3)), ("b", (3,))]  # 9 parameters


def values(seed=0):
    """Samples {client: (checkpoints, runs, 9)} and losses {client: (checkpoints, runs)}."""
    rng = np.random.default_rng(seed)
    samples = {c: rng.standard_normal((3, RUNS, 9)).astype(np.float32) for c in CLIENTS}
    losses = {c: rng.random((3, RUNS)).astype(np.float32) for c in CLIENTS}
    return samples, losses


def state(samples, c, t, r):
    v = samples[c][t, r]
    return {"w": v[:6].reshape(2, 3), "b": v[6:], "steps": np.array(3)}  # an integer entry is skipped


def records(seed=0, order_seed=None):
    samples, losses = values(seed)
    keys = [(r, c, t) for r in range(RUNS) for c in CLIENTS for t in range(3)]
    if order_seed is not None:
        keys = [keys[i] for i in np.random.default_rng(order_seed).permutation(len(keys))]
    return [(r, c, CHECKPOINTS[t], state(samples, c, t, r), {"loss": losses[c][t, r]}) for r, c, t in keys]


def write(path, recs, **kwargs):
    settings = dict(clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS, chunk_size=4) | kwargs
    with DumpWriter(path, **settings) as w:
        for r, c, t, params, metrics in recs:
            w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
    return w


def reference(tmp_path, seed=0):
    samples, losses = values(seed)
    return ParameterDump.from_arrays(tmp_path / "ref", samples, checkpoints=CHECKPOINTS, layout=LAYOUT,
                                     metrics={c: {"loss": losses[c]} for c in CLIENTS})


def files(path):
    return {p.name: p.read_bytes() for p in sorted(Path(path).glob("*.f32"))}


# ------------------------------------------------------------------ what is written
@pytest.mark.parametrize("order_seed", [None, 0, 1])
def test_records_in_any_order_give_the_dump_of_from_arrays(tmp_path, order_seed):
    w = write(tmp_path / "d", records(order_seed=order_seed))
    ref = reference(tmp_path)
    assert files(tmp_path / "d") == files(tmp_path / "ref")
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.complete and dump.verify() == RUNS and w.dump.written_runs == RUNS
    assert [(e.name, e.shape) for e in dump.layout] == [(e.name, e.shape) for e in ref.layout]
    assert dump.metric_names == ["loss"] and dump.checkpoints == CHECKPOINTS
    assert dump.written_chunks() == [(0, 4), (4, 8), (8, 10)]


def test_a_chunk_is_written_as_soon_as_its_records_are_in(tmp_path):
    recs = records()
    with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS, chunk_size=4) as w:
        for i, (r, c, t, params, metrics) in enumerate(recs):
            w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
            if i == 4 * 9 - 2:  # one record of chunk 0-4 still missing: nothing written yet (the dump
                assert not (tmp_path / "d").exists() and not w.is_written(0)  # is made with its first chunk)
                assert w.pending() == [(3, "c", 10)]
            if i == 4 * 9 - 1:
                assert ParameterDump.open(tmp_path / "d").written_runs == 4 and w.is_written(3)
                assert not w.is_written(4) and w.missing_runs() == list(range(4, 10))


def test_a_module_gives_its_state_dict():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    named = named_arrays(net)
    assert [n for n, _ in named] == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var"]
    np.testing.assert_array_equal(named[0][1], net[0].weight.detach().numpy())
    assert named_arrays(np.zeros(4)) is None and named_arrays(torch.zeros(4)) is None


def test_modules_tensors_and_flat_vectors_are_recorded(tmp_path):
    torch = pytest.importorskip("torch")
    nets = [torch.nn.Linear(3, 2) for _ in range(4)]
    flat = [np.concatenate([n.weight.detach().numpy().ravel(), n.bias.detach().numpy()]) for n in nets]
    with DumpWriter(tmp_path / "m", clients=[0, 1], checkpoints=[0], runs=2) as w:
        for i, net in enumerate(nets):
            w.record(run=i // 2, client=i % 2, checkpoint=0, params=net)  # client 0 is stored as "0"
    with DumpWriter(tmp_path / "f", clients=["0", "1"], checkpoints=[0], runs=2,
                              layout=[("weight", (2, 3)), ("bias", (2,))]) as w:
        for i, vector in enumerate(flat):
            w.record(run=i // 2, client=str(i % 2), checkpoint=0, params=torch.from_numpy(vector) if i % 2 else vector)
    with DumpWriter(tmp_path / "s", clients=["0", "1"], checkpoints=[0], runs=2) as w:
        for i, net in enumerate(nets):  # a state_dict in another key order: the layout's order is kept
            sd = net.state_dict()
            w.record(run=i // 2, client=str(i % 2), checkpoint=0, params={"bias": sd["bias"], "weight": sd["weight"]}
                     if i else sd)
    assert files(tmp_path / "m") == files(tmp_path / "f") == files(tmp_path / "s")
    np.testing.assert_array_equal(ParameterDump.open(tmp_path / "m").samples("1", index=0)[1], flat[3])
    flat_default = tmp_path / "v"
    with DumpWriter(flat_default, clients=["0"], checkpoints=[0], runs=1) as w:
        w.record(run=0, client="0", checkpoint=0, params=[1.0, 2.0])
    assert [(e.name, e.shape) for e in w.dump.layout] == [("params", (2,))] and w.dump.metric_names == []


# ------------------------------------------------------------------ bad records
@pytest.fixture
def open_writer(tmp_path):
    with pytest.warns(IncompleteChunkWarning, match=r"runs \[4\] were not written: records missing: \(run 4, client "
                                                    r"'a', checkpoint 5\), .* and 3 more"):
        with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS,
                        chunk_size=4) as w:
            for r, c, t, params, metrics in records()[:9 * 4]:  # chunk 0-4 written
                w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
            w.record(run=4, client="a", checkpoint=0, params=state(values()[0], "a", 0, 4))
            yield w
            before = files(tmp_path / "d"), (tmp_path / "d" / "manifest.json").read_bytes()
            assert ParameterDump.open(tmp_path / "d").verify() == 4
    assert files(tmp_path / "d") == before[0]  # nothing more was written: written chunks intact


GOOD = state(values()[0], "a", 0, 5)
BAD = [
    (dict(run=4, client="a", checkpoint=0, params=GOOD), ValueError,
     r"the record of run 4, client 'a', checkpoint 0 was given twice"),
    (dict(run=1, client="a", checkpoint=0, params=GOOD), ValueError,
     r"run 1 is already written in .*; skip it \(`if w.is_written\(run\): continue`\)"),
    (dict(run=10, client="a", checkpoint=0, params=GOOD), ValueError, r"`run` must be in \[0, 9\]; got 10"),
    (dict(run=-1, client="a", checkpoint=0, params=GOOD), ValueError, r"`run` must be in \[0, 9\]; got -1"),
    (dict(run=5, client="z", checkpoint=0, params=GOOD), ValueError,
     r"run 5, client 'z', checkpoint 0: `client` must be one of \['a', 'b', 'c'\]; got 'z'"),
    (dict(run=5, client="a", checkpoint=1, params=GOOD), ValueError,
     r"`checkpoint` must be one of \[0, 5, 10\] \(the value, not its index\); got 1"),
    (dict(run=5, client="a", checkpoint=0, params={"w": np.zeros((3, 2)), "b": np.zeros(3)}), ValueError,
     r"run 5, client 'a', checkpoint 0: `params` tensor 'w' has shape \(3, 2\), not \(2, 3\)"),
    (dict(run=5, client="a", checkpoint=0, params={"w": np.zeros((2, 3))}), ValueError, r"`params` lacks \['b'\]"),
    (dict(run=5, client="a", checkpoint=0, params=np.zeros(8)), ValueError,
     r"`params` has 8 values; the layout has 9"),
    (dict(run=5, client="a", checkpoint=0, params=np.zeros((3, 3))), ValueError, r"a flat vector \(1-D numbers\)"),
    (dict(run=5, client="a", checkpoint=0, params={"steps": np.array(1)}), ValueError,
     r"`params` holds no floating-point tensors"),
    (dict(run=5, client="a", checkpoint=5, params=np.r_[np.zeros(7), np.nan, 1.0]), ValueError,
     r"run 5, client 'a', checkpoint 5: the parameters are not finite: 1 NaN and 0 inf \(the first in tensor 'b', "
     r"column 7\)"),
    (dict(run=5, client="a", checkpoint=0, params=GOOD, metrics={"acc": 1.0}), ValueError,
     r"metric 'acc' is not one of \['loss'\]"),
    (dict(run=5, client="a", checkpoint=0, params=GOOD, metrics={"loss": "low"}), TypeError,
     r"metric 'loss' must be a number; got 'low'"),
]


@pytest.mark.parametrize("kwargs, kind, pattern", BAD, ids=[p for _, _, p in BAD])
def test_a_bad_record_is_named_and_changes_nothing(open_writer, kwargs, kind, pattern):
    with pytest.raises(kind, match=pattern):
        open_writer.record(**kwargs)
    assert open_writer.pending()[0] == (4, "a", 5)  # the records of the open chunk are kept


def test_record_outside_the_with_block(tmp_path):
    w = DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=2)
    with pytest.raises(RuntimeError, match="record inside the `with` block"):
        w.record(run=0, client="a", checkpoint=0, params=np.zeros(2))
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(clients=[]), "`clients` must name at least one client"),
    (dict(clients=["a", "a"]), "`clients` must be unique"),
    (dict(checkpoints=[0, 0]), r"`checkpoints` must be unique; got \[0, 0\]"),
    (dict(runs=0), r"`runs` must be >= 1; got 0"),
    (dict(chunk_size=0), r"`chunk_size` must be >= 1; got 0"),
    (dict(meta={"f": object()}), "`meta` must be JSON-serialisable"),
    (dict(layout=[("w", 3)]), r"`layout` must be a sequence of \(name, shape\) pairs"),
])
def test_bad_settings_are_named(tmp_path, kwargs, pattern):
    settings = dict(clients=["a"], checkpoints=[0], runs=2) | kwargs
    with pytest.raises((TypeError, ValueError), match=pattern):
        DumpWriter(tmp_path / "d", **settings)


# ------------------------------------------------------------------ leaving, failing, resuming
def test_leaving_with_incomplete_chunks_writes_complete_runs_and_names_the_rest(tmp_path):
    recs = [rec for rec in records() if not (rec[0] == 6 and rec[1] == "b" and rec[2] == 10)]  # one record missing
    recs = [rec for rec in recs if rec[0] < 8]  # and runs 8-9 never recorded
    with pytest.warns(IncompleteChunkWarning, match=r"runs \[6\] were not written: records missing: \(run 6, client "
                                                    r"'b', checkpoint 10\); record them again"):
        write(tmp_path / "d", recs)
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.written_chunks() == [(0, 4), (4, 6), (7, 8)] and dump.missing_ranges() == [(6, 7), (8, 10)]
    assert dump.verify() == 7 and dump.completed_runs == 6
    samples, _ = values()
    np.testing.assert_array_equal(dump.samples("c", index=2), samples["c"][2, :6])
    # A rerun records what is missing and completes the dump: the same bytes as in one go.
    w = write(tmp_path / "d", [rec for rec in records() if rec[0] in (6, 8, 9)])
    assert w.dump.complete and files(tmp_path / "d") == files(reference(tmp_path).path)


def test_resuming_skips_written_runs(tmp_path):
    recs = records()
    write(tmp_path / "d", [rec for rec in recs if rec[0] < 4])
    with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS, chunk_size=4) as w:
        assert [w.is_written(r) for r in (0, 3, 4)] == [True, True, False] and w.missing_runs() == list(range(4, 10))
        for r, c, t, params, metrics in recs:
            if not w.is_written(r):
                w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
    assert files(tmp_path / "d") == files(reference(tmp_path).path)
    sessions = ParameterDump.open(tmp_path / "d").provenance
    assert [s["runs_written"] for s in sessions] == [[0, 4], [4, 10]]


@pytest.mark.parametrize("change, pattern", [
    (dict(runs=12), r"other settings \(existing, requested\): \{'runs': \(10, 12\)\}"),
    (dict(clients=["a", "b"]), r"\{'clients': \(\['a', 'b', 'c'\], \['a', 'b'\]\)\}"),
    (dict(layout=[("w", (9,))]), r"'layout': \("),
    (dict(metrics=["loss", "acc"]), r"'metrics': \(\['loss'\], \['loss', 'acc'\]\)"),
    (dict(meta={"lr": 0.1}), r"holds a dump with other settings .*'lr': \(None, 0.1\)"),
])
def test_resuming_with_other_settings_is_refused(tmp_path, change, pattern):
    write(tmp_path / "d", [rec for rec in records() if rec[0] < 4])
    before = files(tmp_path / "d"), (tmp_path / "d" / "manifest.json").read_bytes()
    settings = dict(clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS, chunk_size=4) | change
    with pytest.raises(DumpError, match=pattern):
        with DumpWriter(tmp_path / "d", **settings):
            pass
    assert (files(tmp_path / "d"), (tmp_path / "d" / "manifest.json").read_bytes()) == before


def test_a_failing_loop_before_any_chunk_leaves_no_dump(tmp_path):
    with pytest.raises(ZeroDivisionError), pytest.warns(IncompleteChunkWarning, match=r"runs \[0\] were not written"):
        with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS) as w:
            r, c, t, params, metrics = records()[0]
            w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
            1 / 0
    assert not (tmp_path / "d").exists() and not list(tmp_path.iterdir())
    with DumpWriter(tmp_path / "e", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS):
        pass  # nothing recorded: nothing left either
    assert not (tmp_path / "e").exists()


def test_a_failing_loop_keeps_the_written_chunks_and_writes_nothing_more(tmp_path):
    with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteChunkWarning)
        with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS,
                        chunk_size=4) as w:
            for r, c, t, params, metrics in records()[:9 * 5 + 2]:
                w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
            raise KeyboardInterrupt
    assert ParameterDump.open(tmp_path / "d").written_chunks() == [(0, 4)]  # run 4 was complete, yet not written


def test_records_from_several_threads(tmp_path):
    recs = records(order_seed=3)
    with DumpWriter(tmp_path / "d", clients=CLIENTS, checkpoints=CHECKPOINTS, runs=RUNS, chunk_size=3) as w:
        def work(part):
            for r, c, t, params, metrics in part:
                w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
        threads = [threading.Thread(target=work, args=(recs[i::3],)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert files(tmp_path / "d") == files(reference(tmp_path).path)


def test_layout_difference_in_words():
    assert layout_difference([("a", (2,)), ("b", (1,))], [("a", (2,)), ("b", (1,))]) == ""
    assert layout_difference([("b", (1,)), ("a", (2,))], [("a", (2,)), ("b", (1,))]).endswith("another order")
    assert layout_difference([("a", (2,)), ("c", (1,))], [("a", (2,)), ("b", (1,))]) == "lacks ['b']"


# ------------------------------------------------------------------ killed, then resumed
LOOP = """
import sys, time
sys.path.insert(0, {tests!r})
from test_writer import records
from mianalysis import DumpWriter, ParameterDump
with DumpWriter(sys.argv[1], clients=["a", "b", "c"], checkpoints=[0, 5, 10], runs=10, chunk_size=2) as w:
    for r, c, t, params, metrics in records(order_seed=None):
        if not w.is_written(r):
            time.sleep(0.004)  # training
            w.record(run=r, client=c, checkpoint=t, params=params, metrics=metrics)
"""


def _written(manifest):
    try:
        return len(json.loads(manifest.read_text())["chunks"])
    except (OSError, ValueError):
        return 0


def test_a_loop_killed_at_random_moments_resumes_to_the_same_bytes(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(tests=str(ROOT / "tests")))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "d"
    kills = kill_at_random_moments([sys.executable, str(script), str(out)], lambda: _written(out / "manifest.json"),
                                   env=env, seed=2, times=3, after_each=lambda: ParameterDump.open(out).verify())
    assert kills == 3 and 0 < ParameterDump.open(out).written_runs < 10
    import subprocess

    subprocess.run([sys.executable, str(script), str(out)], env=env, check=True, capture_output=True)
    assert files(out) == files(reference(tmp_path).path)
    assert ParameterDump.open(out).written_chunks() == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


# ------------------------------------------------------------------ metric names from the first records
def _flat_loop(w, runs, metrics_at):
    """Records runs `runs` of clients a, b at checkpoints 0, 1 (flat vectors); `metrics_at(run, t)` gives the metrics."""
    for run in runs:
        for c in ("a", "b"):
            for t in (0, 1):
                w.record(run=run, client=c, checkpoint=t, params=np.full(2, run + t, np.float32),
                         metrics=metrics_at(run, t))


def test_checkpoint_0_without_metrics_then_a_loss_gives_a_loss_metric(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no IncompleteChunkWarning, no other warning
        with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0, 1], runs=4, chunk_size=2) as w:
            _flat_loop(w, range(4), lambda run, t: None if t == 0 else {"loss": 0.5 * run})
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.complete and dump.metric_names == ["loss"]
    loss = dump.metric("b", "loss")  # (checkpoints, runs)
    assert np.isnan(loss[0]).all() and loss[1].tolist() == [0.0, 0.5, 1.0, 1.5]


def test_the_metric_names_are_the_sorted_union_of_the_first_chunks_records(tmp_path):
    with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0, 1], runs=2, chunk_size=2) as w:
        _flat_loop(w, range(2), lambda run, t: {"loss": 1.0} if run == 0 else {"accuracy": 0.25, "loss": 2.0})
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.metric_names == ["accuracy", "loss"]
    assert np.isnan(dump.metric("a", "accuracy")[:, 0]).all() and dump.metric("a", "accuracy")[:, 1].tolist() == [
        0.25, 0.25]
    assert dump.metric("a", "loss").tolist() == [[1.0, 2.0], [1.0, 2.0]]


def test_a_metric_first_seen_after_the_first_chunk_is_one_clear_error_without_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the misleading IncompleteChunkWarning would be an error here
        with pytest.raises(ValueError, match=r"run 2, client 'a', checkpoint 1: metric 'loss' is not one of \[\], "
                                             r"the metric names of the dump .*fixed when its first chunk was written.*"
                                             r"DumpWriter\(\.\.\., metrics=\['loss'\]\)"):
            with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0, 1], runs=4, chunk_size=2) as w:
                _flat_loop(w, range(4), lambda run, t: {"loss": 1.0} if run >= 2 and t == 1 else None)
    dump = ParameterDump.open(tmp_path / "d")  # the chunk written before the error stays
    assert dump.written_chunks() == [(0, 2)] and dump.metric_names == []
    # Declared up front, the same loop records the loss.
    with DumpWriter(tmp_path / "e", clients=["a", "b"], checkpoints=[0, 1], runs=4, chunk_size=2,
                    metrics=["loss"]) as w:
        _flat_loop(w, range(4), lambda run, t: {"loss": 1.0} if run >= 2 and t == 1 else None)
    loss = ParameterDump.open(tmp_path / "e").metric("a", "loss")
    assert np.isnan(loss[:, :2]).all() and np.isnan(loss[0]).all() and loss[1, 2:].tolist() == [1.0, 1.0]


def test_a_metric_not_declared_is_refused_with_the_declared_names(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"metric 'acc' is not one of \['loss'\] \(the writer's `metrics`\)"):
            with DumpWriter(tmp_path / "d", clients=["a", "b"], checkpoints=[0], runs=1, metrics=["loss"]) as w:
                w.record(run=0, client="a", checkpoint=0, params=[1.0], metrics={"loss": 1.0})
                w.record(run=0, client="b", checkpoint=0, params=[1.0], metrics={"acc": 1.0})
    assert not (tmp_path / "d").exists()


def test_a_folder_a_dump_cannot_be_made_in_is_refused_on_entry(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("mine")
    with pytest.raises(DumpError, match="already exists and is not an empty folder"):
        with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1):
            pytest.fail("entered")
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["mine.txt"]


def test_before_the_block_every_run_is_missing(tmp_path):
    w = DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=5, chunk_size=2)
    assert w.missing_runs() == [0, 1, 2, 3, 4] and not w.is_written(4)


def test_provenance_entries_go_with_the_session_that_writes(tmp_path):
    # Each session's own entries (e.g. the seed of the run a `flwr run` records) in its record only.
    for runs, entries in (([0], {"flower": {"run": 0, "seed": 3}}), ([1], None), ([2], {"note": "third"})):
        with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0, 1], runs=3, chunk_size=1,
                        provenance=entries) as w:
            for run in runs:
                for t in (0, 1):
                    w.record(run=run, client="a", checkpoint=t, params=[float(run), float(t)])
    sessions = ParameterDump.open(tmp_path / "d").provenance
    assert [s["runs_written"] for s in sessions] == [[0, 1], [1, 2], [2, 3]]
    assert sessions[0]["flower"] == {"run": 0, "seed": 3} and sessions[2]["note"] == "third"
    assert "flower" not in sessions[1] and "note" not in sessions[1] and "flower" not in sessions[2]


@pytest.mark.parametrize("provenance, error, pattern", [
    ({"runs_written": [0, 1]}, ValueError, r"`provenance` must not set \['runs_written'\]: the dump fills"),
    ({"started": "now", "argv": []}, ValueError, r"`provenance` must not set \['argv', 'started'\]"),
    ({"f": object()}, TypeError, "`provenance` must be JSON-serialisable"),
    ([("seed", 1)], TypeError, "`provenance` must be a dict or None; got list"),
])
def test_bad_provenance_entries_are_named(tmp_path, provenance, error, pattern):
    with pytest.raises(error, match=pattern):
        DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1, provenance=provenance)
    assert not (tmp_path / "d").exists()
