"""The global model in the federated recording, and the per-round dependence rows
(MI of local models, MI given the broadcast global model, MI of updates)."""

import numpy as np
import pytest

from mianalysis.federated.global_dependence import QUANTITIES, dependence_given_global


def _synthetic(rng, n=4000, d=2, rounds=2, shared_update=0.0):
    """Global models g[t] (a random walk over rounds) and two clients that start round t
    from g[t-1] and add independent updates (plus `shared_update` times a common one)."""
    g = np.cumsum(rng.standard_normal((rounds + 1, n, d)), axis=0)
    local = {}
    common = rng.standard_normal((rounds + 1, n, d))
    for c in "ab":
        m = np.empty_like(g)
        m[0] = g[0]
        m[1:] = g[:-1] + rng.standard_normal((rounds, n, d)) + shared_update * common[1:]
        local[c] = m
    return local, g


def test_rows_layout_and_known_answers():
    rng = np.random.default_rng(0)
    local, g = _synthetic(rng, n=20_000, d=1, rounds=2, shared_update=1.0)
    rows = dependence_given_global(local, g, units="nats")
    assert [(r["iteration"], r["global_checkpoint"], r["quantity"]) for r in rows] == [
        (t, t - 1, q) for t in (1, 2) for q in QUANTITIES]
    assert all(r["client_a"] == "a" and r["client_b"] == "b" and r["n_runs"] == 20_000 and r["n_features"] == 1
               for r in rows)
    value = {(r["iteration"], r["quantity"]): r["value"] for r in rows}
    # Updates: correlation 1/2, independent of g; local models: var(g[t-1]) = t, so the
    # correlation of the local models is (t + 1) / (t + 2).
    for t in (1, 2):
        assert value[t, "mi_update"] == pytest.approx(-0.5 * np.log(0.75), abs=0.02)
        assert value[t, "cmi_given_global"] == pytest.approx(-0.5 * np.log(0.75), abs=0.02)
        rho = (t + 1) / (t + 2)
        assert value[t, "mi_local"] == pytest.approx(-0.5 * np.log(1 - rho**2), abs=0.02)


def test_independent_updates_leave_no_dependence_given_the_global_model():
    rng = np.random.default_rng(1)
    local, g = _synthetic(rng, n=20_000, d=3, rounds=1)
    value = {r["quantity"]: r["value"] for r in dependence_given_global(local, g, units="nats")}
    assert value["mi_local"] > 0.3
    assert value["cmi_given_global"] == pytest.approx(0.0, abs=0.005)
    assert value["mi_update"] == pytest.approx(0.0, abs=0.005)


def test_updates_are_relative_to_the_model_the_round_started_from():
    # The global model after the round is (nearly) the clients' mean, as with FedAvg:
    # updates relative to it would be strongly anti-correlated; relative to the model
    # the round started from they are independent.
    rng = np.random.default_rng(2)
    local, g = _synthetic(rng, n=20_000, d=1, rounds=1)
    g[1] = (local["a"][1] + local["b"][1]) / 2 + 0.1 * rng.standard_normal(g[1].shape)
    value = {r["quantity"]: r["value"] for r in dependence_given_global(local, g, units="nats")}
    assert value["mi_update"] == pytest.approx(0.0, abs=0.005)
    assert value["cmi_given_global"] == pytest.approx(0.0, abs=0.005)


@pytest.mark.parametrize("local, g, match", [
    ({"a": np.zeros((2, 5, 1))}, np.zeros((2, 5, 1)), "`local` must hold at least two clients"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 5, 1))}, np.zeros((2, 5)), "`global_model` must be a 3-D array"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 5, 1))}, np.zeros((1, 5, 1)), "at least two checkpoints"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 6, 1))}, np.zeros((2, 5, 1)), r"`local\['b'\]` must have the shape"),
])
def test_errors(local, g, match):
    with pytest.raises(ValueError, match=match):
        dependence_given_global(local, g)


# ---------------------------------------------------------------- the simulator's recording
torch = pytest.importorskip("torch")

from mianalysis.dumps import ParameterDump  # noqa: E402
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates  # noqa: E402
from mianalysis.federated.partition import partition  # noqa: E402


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    return FederatedData(x, y, rng.random((20, 8, 8)).astype(np.float32), rng.integers(0, 10, 20),
                         partition(y, 3, "unequal", seed=0))


@pytest.mark.parametrize("aggregator", ["fedavg", "median"])
def test_recorded_global_model_is_the_simulators(small_data, tmp_path, aggregator):
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=10, lr=0.1, aggregator=aggregator)
    sim = FederatedSimulation("mlp", small_data, cfg, replicates=4, seed=3, hidden=16)
    dump, _ = record_replicates(sim, tmp_path / "d", chunk_size=3, layer="5", progress=False, record_global=True)
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.clients == ["0", "1", "2", "global"] and dump.verify() == 4
    n_layer = dump.n_params
    # The final global model of every replicate, run in one piece.
    result = sim.run(record=True)
    np.testing.assert_array_equal(dump.samples("global", index=2), result.final_params[:, -n_layer:])
    np.testing.assert_array_equal(dump.samples("global", index=1), result.global_models[1][:, -n_layer:])
    # Checkpoint 0 is the initial model, which every client holds.
    np.testing.assert_array_equal(dump.samples("global", index=0), dump.samples("0", index=0))
    # Each round's local models started from the global model of the round before: the
    # output bias's sum over classes is unchanged by softmax cross-entropy SGD steps.
    bias = dump.layer_columns("5.bias")
    for t in (1, 2):
        start = dump.samples("global", index=t - 1)[:, bias].sum(1)
        for c in "012":
            np.testing.assert_allclose(dump.samples(c, index=t)[:, bias].sum(1), start, atol=1e-5)
    if aggregator == "fedavg":
        # FedAvg: the new global model is the size-weighted mean of the local models.
        w = small_data.sizes() / small_data.sizes().sum()
        mean = sum(wk * dump.samples(str(c), index=2) for c, wk in enumerate(w))
        np.testing.assert_allclose(dump.samples("global", index=2), mean, atol=1e-5)


def test_without_record_global_the_dump_has_only_clients(small_data, tmp_path):
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10, lr=0.1)
    sim = FederatedSimulation("mlp", small_data, cfg, replicates=2, seed=3, hidden=8)
    dump, _ = record_replicates(sim, tmp_path / "d", layer="5", progress=False)
    assert dump.clients == ["0", "1", "2"]
