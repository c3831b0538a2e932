"""A dump holds finite parameters only. Training that produces a NaN or an infinity is an
error at the chunk where it happens, naming the client, the checkpoint (iteration) and the
runs, and nothing of that chunk is committed; from_arrays and write_chunk refuse them;
verify flags them in dumps written by other means, and analyze names where it meets one.
A non-finite loss at finite parameters is recorded, and analyze says so in the row."""

import json
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.cli import main
from mianalysis.dumps import MANIFEST, DumpError, layout_from_shapes

TINY = ["--task", "signal-rnn", "--runs", "8", "--chunk-size", "4", "--set", "n_layers=2", "--set", "seq_len=16",
        "--set", "n_examples=32", "--set", "batch_size=8", "--no-progress"]
SHAPES = [("w", (2, 2)), ("b", (2,))]


def _arrays(seed=0, n_ckpt=3, runs=20):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, 6))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, 6))).astype(np.float32) for c in "abc"}


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(Path(path).iterdir()) if p.suffix == ".f32"}


# ------------------------------------------------------------------ the sampler
# A CLI run whose training diverges at its first step: every parameter of the first tensor
# becomes NaN after each optimiser step (a divergence no valid task setting produces in a
# few steps). The command runs in this process (the `cli` fixture): nothing here needs a
# process of its own.
def test_cli_sample_that_diverges_fails_at_its_first_chunk_and_commits_nothing(tmp_path, monkeypatch, cli):
    from mianalysis.tasks.optimizers import Adam  # the sampler's own Adam (torch.optim's arithmetic)

    out = tmp_path / "d"
    step = Adam.step

    def diverging(self, *args, **kwargs):
        step(self, *args, **kwargs)
        self.param_groups[0]["params"][0].data.fill_(float("nan"))

    monkeypatch.setattr(Adam, "step", diverging)
    first = cli(["sample", *TINY, "--out", out])
    assert first.returncode == 2, first.stderr
    err = first.stderr
    assert err.count("\n") == 1 and "non-finite parameters" in err
    assert "client '0'" in err and "iteration 1" in err and "runs 0, 1, 2, 3" in err and "NaN" in err
    assert "nothing of runs 0-4 was written" in err
    assert not out.exists()  # stopped before its first chunk: the dump it created is removed again
    again = cli(["sample", *TINY, "--out", out])
    assert again.returncode == 2 and again.stderr == err  # the same run fails at the same place
    monkeypatch.setattr(Adam, "step", step)
    fine = cli(["sample", *TINY, "--out", out])
    assert fine.returncode == 0, fine.stderr
    dump = ParameterDump.open(out)
    assert dump.verify() == 8 and all(np.isfinite(dump.samples(c, index=4)).all() for c in dump.clients)


def _poisoned_sampler(monkeypatch, value, client, checkpoint, run):
    """A tiny sampler whose training output gets `value` at (client, checkpoint, run) after training."""
    from mianalysis import ParameterSampler
    from mianalysis.tasks import get_task

    sampler = ParameterSampler(get_task("signal-rnn", n_layers=2, seq_len=16, n_examples=32, batch_size=8),
                               seed=0, chunk_size=4, progress=False)
    train = sampler.train_chunk

    def poisoned(runs, **kwargs):
        runs = list(runs)
        result = train(runs, **kwargs)
        if run in runs:
            result.samples[client, checkpoint, runs.index(run), 5] = value
        return result

    monkeypatch.setattr(sampler, "train_chunk", poisoned)
    return sampler


@pytest.mark.parametrize("value, client, checkpoint, run, kind", [
    (np.nan, 1, 2, 6, "1 NaN and 0 inf"),
    (np.inf, 2, 4, 4, "0 NaN and 1 inf"),   # only at the last checkpoint
    (-np.inf, 0, 0, 7, "0 NaN and 1 inf"),  # even the initial state
])
def test_sampler_stops_at_the_chunk_with_a_nonfinite_parameter(tmp_path, monkeypatch, value, client, checkpoint, run,
                                                               kind):
    from mianalysis import ParameterSampler
    from mianalysis.tasks import get_task

    sampler = _poisoned_sampler(monkeypatch, value, client, checkpoint, run)
    with pytest.raises(ValueError) as info:
        sampler.sample(12, tmp_path / "d")
    message = str(info.value)
    assert f"client '{client}'" in message and f"checkpoint {checkpoint} (iteration {checkpoint})" in message
    assert f"run {run}:" in message and kind in message and "tensor 'rnn.0.weight_hh', column 5" in message
    assert "nothing of runs 4-8 was written" in message and "keeps its 4 completed runs" in message
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.completed_runs == 4 and dump.verify() == 4  # valid up to the chunk before
    clean = ParameterSampler(sampler.task, seed=0, chunk_size=4, progress=False).sample(4, tmp_path / "clean")
    for c in dump.clients:
        for t in range(len(dump.checkpoints)):
            np.testing.assert_array_equal(dump.samples(c, index=t), clean.samples(c, index=t))
    with pytest.raises(ValueError) as again:  # a rerun with the same settings fails at the same place
        sampler.sample(12, tmp_path / "d")
    assert str(again.value) == message and ParameterDump.open(tmp_path / "d").completed_runs == 4


def test_sampler_records_a_nonfinite_loss_at_finite_parameters_and_analyze_says_so(tmp_path, monkeypatch):
    from mianalysis import ParameterSampler
    from mianalysis.tasks import get_task

    sampler = ParameterSampler(get_task("signal-rnn", n_layers=2, seq_len=16, n_examples=32, batch_size=8),
                               seed=0, chunk_size=4, progress=False)
    train = sampler.train_chunk

    def overflowing_loss(runs, **kwargs):
        result = train(runs, **kwargs)
        result.metrics[1, 0, -1, 0] = np.inf  # client 1's loss at the last checkpoint, first run of the chunk
        return result

    monkeypatch.setattr(sampler, "train_chunk", overflowing_loss)
    dump = sampler.sample(8, tmp_path / "d")
    assert dump.completed_runs == 8 and dump.verify() == 8
    rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"])
    loss = [r for r in rows if r["quantity"] == "loss" and r["client_a"] == "1" and r["checkpoint"] == 4]
    assert loss[0]["value"] == np.inf and loss[0]["note"] == "loss is not finite in 2 of 8 runs (0 NaN, 2 inf)"
    assert all(r["note"] == "" for r in rows if r["quantity"] == "loss" and r is not loss[0])


# ------------------------------------------------------------------ dumps
@pytest.mark.parametrize("value, kind", [(np.nan, "1 NaN and 0 inf"), (np.inf, "0 NaN and 1 inf"),
                                         (-np.inf, "0 NaN and 1 inf"), (1e39, "0 NaN and 1 inf")])
def test_from_arrays_refuses_nonfinite_samples_naming_where(tmp_path, value, kind):
    arrays = {c: a.astype(np.float64) for c, a in _arrays().items()}
    arrays["b"][1, 13, 4] = value  # 1e39 overflows float32
    with pytest.raises(ValueError) as info:
        ParameterDump.from_arrays(tmp_path / "d", arrays, checkpoints=[0, 10, 20], layout=SHAPES)
    message = str(info.value)
    assert f"`samples['b']` contains non-finite values: {kind}" in message
    assert "at checkpoint 1 (iteration 10), run 13 (the first in tensor 'b', column 4)" in message
    assert not (tmp_path / "d").exists()


def test_write_chunk_refuses_nonfinite_samples_and_writes_nothing(tmp_path):
    dump = ParameterDump.from_arrays(tmp_path / "d", _arrays(runs=20), layout=SHAPES)
    grown = ParameterDump.create(tmp_path / "e", clients=dump.clients, checkpoints=dump.checkpoints, n_runs=20,
                                 layout=dump.layout)
    chunk = {c: np.stack([dump.samples(c, index=t)[:10] for t in range(3)]) for c in dump.clients}
    grown.write_chunk(0, 10, chunk)
    before = _files(tmp_path / "e")
    second = {c: np.stack([dump.samples(c, index=t)[10:] for t in range(3)]) for c in dump.clients}
    second["c"][2, 3:6, 0] = np.nan
    with pytest.raises(DumpError) as info:
        grown.write_chunk(10, 20, second)
    message = str(info.value)
    assert "client 'c'" in message and "checkpoint 2 (iteration 2), runs 13, 14, 15:" in message
    assert "3 NaN and 0 inf (the first in tensor 'w', column 0)" in message and "nothing of runs 10-20" in message
    assert _files(tmp_path / "e") == before
    again = ParameterDump.open(tmp_path / "e")
    assert again.completed_runs == 10 and again.verify() == 10


def _old_dump_with(tmp_path, client, checkpoint, runs, column, value):
    """A dump as software that did not check finiteness would write it: valid checksums, a NaN inside."""
    dump = ParameterDump.from_arrays(tmp_path / "d", _arrays(), checkpoints=[0, 5, 9], layout=SHAPES)
    i = dump.clients.index(client)
    data = np.memmap(tmp_path / "d" / f"client_{i}.f32", dtype="<f4", mode="r+", shape=(3, 20, 6))
    data[checkpoint, runs, column] = value
    data.flush()
    del data
    manifest = json.loads((tmp_path / "d" / MANIFEST).read_text())
    manifest["chunks"][0]["sha256"][client] = dump._chunk_checksum(i, 0, 20)
    (tmp_path / "d" / MANIFEST).write_text(json.dumps(manifest))
    return tmp_path / "d"


def test_verify_flags_nonfinite_samples_in_an_old_dump(tmp_path, capsys):
    path = _old_dump_with(tmp_path, "b", 1, [2, 7], 5, np.nan)
    with pytest.raises(DumpError) as info:
        ParameterDump.open(path).verify()
    message = str(info.value)
    assert "client_1.f32: client 'b' has non-finite parameters" in message
    assert "checkpoint 1 (iteration 5), runs 2, 7: 2 NaN and 0 inf (the first in tensor 'b', column 5)" in message
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "client 'b' has non-finite parameters" in err and "OK" not in err


def test_verify_names_damage_before_nonfinite_values(tmp_path):
    path = _old_dump_with(tmp_path, "a", 2, [0], 0, np.inf)
    with open(path / "client_2.f32", "r+b") as fh:  # and a flipped byte elsewhere
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    with pytest.raises(DumpError, match="client 'c' do not match their checksum"):
        ParameterDump.open(path).verify()


def test_analyze_names_client_and_checkpoint_of_a_nonfinite_sample(tmp_path, capsys):
    path = _old_dump_with(tmp_path, "c", 2, [11], 1, -np.inf)
    with pytest.raises(DumpError) as info:
        analyze(path, estimators=["gaussian"])
    message = str(info.value)
    assert "client 'c' has non-finite parameters at checkpoint 2 (iteration 9), run 11:" in message
    assert "0 NaN and 1 inf (the first in tensor 'w', column 1)" in message and "mianalysis verify" in message
    # A selection without the tensor holding it is finite and can be analysed.
    assert analyze(path, estimators=["gaussian"], layer="b")
    assert main(["analyze", str(path), "--out", str(tmp_path / "t.csv"), "--no-progress", "--layer", "w"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "client 'c'" in err and "checkpoint 2 (iteration 9)" in err
    assert "`x` contains non-finite values" not in err


def test_find_nonfinite_maps_selected_columns_to_tensors():
    from mianalysis.dumps import find_nonfinite

    layout = layout_from_shapes(SHAPES)
    block = np.zeros((3, 4, 2), dtype=np.float32)
    block[2, 1, 1] = np.nan
    block[2, 3, 0] = np.inf
    where = find_nonfinite(block, [0, 5, 9], first_run=100, layout=layout, columns=np.array([3, 5]))
    assert (where.checkpoint, where.iteration, where.runs, where.n_nan, where.n_inf) == (2, 9, (101, 103), 1, 1)
    assert (where.tensor, where.column, where.later) == ("b", 5, 0)
    assert find_nonfinite(np.ones((2, 3, 4)), [0, 1]) is None


# ------------------------------------------------------------------ federate --record
@pytest.fixture(scope="module")
def small_fl():
    pytest.importorskip("torch")
    from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation
    from mianalysis.federated.partition import partition

    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    data = FederatedData(x, y, x[:20], y[:20], partition(y, 3, "unequal", seed=0))
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=10, lr=0.1)
    return FederatedSimulation("mlp", data, cfg, replicates=4, seed=3)


def test_record_replicates_stops_at_a_nonfinite_local_model(small_fl, tmp_path, monkeypatch):
    from mianalysis.federated import record_replicates

    run = small_fl.run

    def poisoned(*, replicate_ids, **kwargs):
        result = run(replicate_ids=replicate_ids, **kwargs)
        if 3 in replicate_ids:  # client 2, round 2, replicate 3, last column
            result.local_models[2, 2, list(replicate_ids).index(3), -1] = np.nan
        return result

    monkeypatch.setattr(small_fl, "run", poisoned)
    with pytest.raises(ValueError) as info:
        record_replicates(small_fl, tmp_path / "d", chunk_size=2, layer=["5"], progress=False)
    message = str(info.value)
    assert "client 2's local model is not finite in round 2, replicate 3: 1 NaN and 0 inf" in message
    assert "tensor '5.bias'" in message and "nothing of replicates 2-4 was written" in message
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.completed_runs == 2 and dump.verify() == 2
