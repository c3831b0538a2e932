"""Layer selections are sets of tensors: duplicates, a prefix together with one of its
members, and any order select each tensor once, in layout order -- in select_layout, in
dump.samples, in analyze (Python and CLI) and in federate --record."""

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.dumps import layout_columns, layout_from_shapes, select_layout

SHAPES = [("rnn.0.weight_ih", (4, 1)), ("rnn.0.weight_hh", (4, 4)), ("rnn.0.bias", (4,)),
          ("rnn.1.weight_ih", (4, 4)), ("rnn.1.weight_hh", (4, 4)), ("rnn.1.bias", (4,)),
          ("head.weight", (2, 4)), ("head.bias", (2,))]
LAYOUT = layout_from_shapes(SHAPES)

# (plain selection, equivalent selections that repeat or overlap it or change its order)
EQUIVALENT = [
    ("rnn.1", [["rnn.1", "rnn.1.weight_hh"], ["rnn.1.weight_hh", "rnn.1"], ["rnn.1", "rnn.1"],
               ["rnn.1.bias", "rnn.1.weight_ih", "rnn.1.weight_hh"], ["rnn.1", "rnn.1.bias", "rnn.1"]]),
    (["rnn.0", "head"], [["head", "rnn.0"], ["head.bias", "rnn.0", "head", "rnn.0.bias"],
                         ["rnn.0", "head", "rnn.0", "head"]]),
    ("rnn", [["rnn.1", "rnn", "rnn.0.bias"], ["rnn.1", "rnn.0"]]),
]
CASES = [(plain, other) for plain, others in EQUIVALENT for other in others]


@pytest.mark.parametrize("plain, other", CASES)
def test_select_layout_is_a_set_in_layout_order(plain, other):
    want = select_layout(LAYOUT, plain)
    got = select_layout(LAYOUT, other)
    assert [e.name for e in got] == [e.name for e in want]
    names = [e.name for e in got]
    assert len(set(names)) == len(names)
    assert [e.offset for e in got] == sorted(e.offset for e in got)
    np.testing.assert_array_equal(layout_columns(got), layout_columns(want))


def test_select_layout_still_rejects_an_unknown_name_among_known_ones():
    with pytest.raises(ValueError, match="`layer` 'rnn.2' is not in the layout"):
        select_layout(LAYOUT, ["rnn.1", "rnn.2"])


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    rng = np.random.default_rng(0)
    n_params = LAYOUT[-1].offset + LAYOUT[-1].size
    shared = rng.standard_normal((2, 300, n_params))
    samples = {c: shared + rng.standard_normal((2, 300, n_params)) for c in "abc"}
    return ParameterDump.from_arrays(tmp_path_factory.mktemp("layers") / "d", samples, layout=SHAPES)


@pytest.mark.parametrize("plain, other", CASES)
def test_dump_samples_of_an_overlapping_selection(dump, plain, other):
    for client in dump.clients:
        np.testing.assert_array_equal(dump.samples(client, index=1, layer=other), dump.samples(client, index=1, layer=plain))
    np.testing.assert_array_equal(dump.layer_columns(other), dump.layer_columns(plain))


@pytest.mark.parametrize("plain, other", [CASES[0], CASES[5], CASES[-2]])
def test_analyze_rows_of_an_overlapping_selection(dump, plain, other):
    kwargs = {"n_permutations": 3, "random_state": 1}
    assert analyze(dump, layer=other, **kwargs) == analyze(dump, layer=plain, **kwargs)


def _sample(cli, out):
    result = cli(["sample", "--task", "signal-rnn", "--runs", "8", "--chunk-size", "4", "--set", "n_layers=2",
                  "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8", "--out", out,
                  "--no-progress"])
    assert result.returncode == 0, result.stderr


def test_cli_analyze_prefix_and_member_gives_the_plain_table(tmp_path, cli):
    _sample(cli, tmp_path / "d")
    tables = {}
    for name, layers in {"plain": ["rnn.1"], "overlap": ["rnn.1", "rnn.1.weight_hh"],
                         "reversed": ["rnn.1.weight_hh", "rnn.1", "rnn.1"]}.items():
        args = sum((["--layer", layer] for layer in layers), [])
        result = cli(["analyze", tmp_path / "d", "--out", tmp_path / f"{name}.csv", "--no-progress",
                      "--estimators", "gaussian", "ksg", *args])
        assert result.returncode == 0, result.stderr
        tables[name] = (tmp_path / f"{name}.csv").read_bytes()
    assert tables["overlap"] == tables["plain"] and tables["reversed"] == tables["plain"]


@pytest.fixture(scope="module")
def small_fl():
    pytest.importorskip("torch")
    from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation
    from mianalysis.federated.partition import partition

    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    data = FederatedData(x, y, x[:20], y[:20], partition(y, 3, "unequal", seed=0))
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10, lr=0.1)
    return FederatedSimulation("mlp", data, cfg, replicates=2, seed=3)


@pytest.mark.parametrize("layer", [["5", "5"], ["5.bias", "5"], ["5", "5.weight", "5.bias"]])
def test_record_replicates_stores_each_tensor_once(small_fl, tmp_path, layer):
    from mianalysis.federated import record_replicates

    plain, _ = record_replicates(small_fl, tmp_path / "plain", chunk_size=2, layer="5", progress=False)
    dump, _ = record_replicates(small_fl, tmp_path / "other", chunk_size=2, layer=layer, progress=False)
    assert [e.to_json() for e in dump.layout] == [e.to_json() for e in plain.layout]
    assert [e.name for e in dump.layout] == ["5.weight", "5.bias"] and dump.n_params == 2010
    for c in dump.clients:
        for t in range(len(dump.checkpoints)):
            np.testing.assert_array_equal(dump.samples(c, index=t), plain.samples(c, index=t))


def test_cli_federate_record_repeated_layer(tmp_path, cli):
    base = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "1", "--replicates", "2", "--record",
            "--no-progress"]
    for name, layers in {"plain": ["5"], "twice": ["5", "5"]}.items():
        args = sum((["--layer", layer] for layer in layers), [])
        result = cli(base + args + ["--out", tmp_path / name])
        assert result.returncode == 0, result.stderr
    plain, twice = ParameterDump.open(tmp_path / "plain" / "dump"), ParameterDump.open(tmp_path / "twice" / "dump")
    assert twice.n_params == plain.n_params == 2010
    for i in range(len(plain.clients)):
        name = f"client_{i}.f32"
        assert (tmp_path / "twice" / "dump" / name).read_bytes() == (tmp_path / "plain" / "dump" / name).read_bytes()
