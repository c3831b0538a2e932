import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.dumps import ParameterDump  # noqa: E402
from mianalysis.federated import (  # noqa: E402
    FederatedConfig, FederatedData, FederatedSimulation, record_replicates, rounds_to_accuracy,
)
from mianalysis.federated.partition import partition  # noqa: E402

LABELS = np.repeat(np.arange(10), 30)


@pytest.mark.parametrize("scheme", ["iid", "shards", "dirichlet", "unequal"])
def test_partitions_cover_every_example_once(scheme):
    parts = partition(LABELS, 12, scheme, seed=1)
    assert len(parts) == 12 and all(len(p) > 0 for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(LABELS)))


def test_partition_shapes():
    iid = partition(LABELS, 12, "iid")
    assert max(map(len, iid)) - min(map(len, iid)) <= 1
    shards = partition(LABELS, 15, "shards", seed=0)  # 30 shards of 10 examples, one label each
    assert all(len(np.unique(LABELS[p])) <= 2 for p in shards)
    few = np.mean([len(np.unique(LABELS[p])) for p in partition(LABELS, 10, "dirichlet", alpha=0.05, seed=0)])
    many = np.mean([len(np.unique(LABELS[p])) for p in partition(LABELS, 10, "dirichlet", alpha=100.0, seed=0)])
    assert few < 4 < many
    sizes = list(map(len, partition(LABELS, 10, "unequal", seed=0, sigma=1.0)))
    assert max(sizes) > 3 * min(sizes)
    with pytest.raises(ValueError, match="`scheme` must be one of 'iid', 'shards', 'dirichlet', 'unequal'"):
        partition(LABELS, 3, "sorted")


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    xt = rng.random((20, 8, 8)).astype(np.float32)
    yt = rng.integers(0, 10, 20)
    return FederatedData(x, y, xt, yt, partition(y, 3, "unequal", seed=0))


def _reference_module(sim, replicate=0):
    """The simulation's model as an ordinary module holding replicate 0's initial parameters."""
    sim._setup([replicate])
    init = sim._init(replicate)
    with torch.no_grad():
        for name, p in sim.module.named_parameters():
            p.copy_(init[name])
    return sim.module


def test_fedsgd_round_with_all_clients_is_a_gradient_step_on_all_data(small_data):
    # The example-weighted mean of the clients' full-batch gradients is the gradient of the
    # loss on all their data together.
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, algorithm="fedsgd", lr=0.3)
    sim = FederatedSimulation("mlp", small_data, cfg, seed=2)
    result = sim.run()
    module = _reference_module(FederatedSimulation("mlp", small_data, cfg, seed=2))
    torch.nn.functional.cross_entropy(module(torch.from_numpy(small_data.x_train).unsqueeze(1)),
                                      torch.from_numpy(small_data.y_train)).backward()
    expected = torch.cat([(p - 0.3 * p.grad).detach().reshape(-1) for p in module.parameters()]).numpy()
    np.testing.assert_allclose(result.final_params[0], expected, rtol=1e-4, atol=1e-5)


def test_fedavg_full_batch_single_epoch_single_client_is_gradient_descent(small_data):
    one = FederatedData(small_data.x_train, small_data.y_train, small_data.x_test, small_data.y_test,
                        [np.arange(60)])
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, local_epochs=1, batch_size=None, lr=0.5)
    models = FederatedSimulation("mlp", one, cfg, seed=4).run(record=True).local_models
    module = _reference_module(FederatedSimulation("mlp", one, cfg, seed=4))
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    x, y = torch.from_numpy(one.x_train).unsqueeze(1), torch.from_numpy(one.y_train)
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(module(x), y).backward()
        opt.step()
    expected = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy()
    np.testing.assert_allclose(models[0, 2, 0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_batched_replicates_equal_separate_runs(small_data, model):
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, local_epochs=1, batch_size=7, lr=0.1, aggregator="median")
    sim = FederatedSimulation(model, small_data, cfg, replicates=3, seed=1)
    result = sim.run(record=True)
    hist, models = result.history, result.local_models
    alone = sim.run(replicate_ids=[2], record=True).local_models
    np.testing.assert_allclose(models[:, :, 2], alone[:, :, 0], rtol=1e-4, atol=1e-6)
    assert not np.allclose(models[:, -1, 0], models[:, -1, 1])
    assert {h["round"] for h in hist} == {0, 1, 2} and len(hist) == 9


def test_training_improves_accuracy_on_digits():
    data = FederatedData.digits(10, "iid", seed=0)
    cfg = FederatedConfig(rounds=5, client_fraction=0.5, local_epochs=2, batch_size=10, lr=0.1)
    history = FederatedSimulation("mlp", data, cfg, seed=0).run().history
    assert rounds_to_accuracy(history, 0.8) is not None
    assert history[-1]["test_accuracy"] > history[0]["test_accuracy"] + 0.5


def test_record_replicates_to_dump_and_resume(small_data, tmp_path):
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=10, lr=0.1, aggregator="and_mask")
    sim = FederatedSimulation("mlp", small_data, cfg, replicates=5, seed=3)
    dump, history = record_replicates(sim, tmp_path / "d", chunk_size=2, layer="5", progress=False)
    again = ParameterDump.open(tmp_path / "d")
    assert again.clients == ["0", "1", "2"] and again.checkpoints == [0, 1, 2] and again.n_runs == 5
    assert [e.name for e in again.layout] == ["5.weight", "5.bias"] and again.n_params == 2010
    assert again.verify() == 5
    direct = sim.run(replicate_ids=[4], record=True).local_models
    np.testing.assert_allclose(again.samples("1", index=2)[4], direct[1, 2, 0, -2010:], rtol=1e-5, atol=1e-6)
    before = (tmp_path / "d" / "client_0.f32").read_bytes()
    record_replicates(sim, tmp_path / "d", chunk_size=2, layer="5", progress=False)  # complete: nothing to do
    assert (tmp_path / "d" / "client_0.f32").read_bytes() == before


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"client_fraction": 0.0}, r"`client_fraction` must be in \(0, 1\]"),
        ({"rounds": 0}, "`rounds` must be >= 1"),
        ({"batch_size": 0}, "`batch_size` must be >= 1"),
        ({"lr": -1.0}, "`lr` must be > 0"),
        ({"algorithm": "fedprox"}, "`algorithm` must be one of 'fedavg', 'fedsgd'"),
        ({"aggregator": "krum"}, "`aggregator` must be one of 'and_mask'"),
    ],
)
def test_bad_config(small_data, kwargs, match):
    with pytest.raises(ValueError, match=match):
        FederatedSimulation("mlp", small_data, FederatedConfig(**kwargs))


def test_recording_needs_all_clients(small_data):
    sim = FederatedSimulation("mlp", small_data, FederatedConfig(rounds=1, client_fraction=0.5))
    with pytest.raises(ValueError, match="needs `client_fraction` = 1"):
        sim.run(record=True)
    with pytest.raises(ValueError, match="`model` must be one of 'mlp', 'cnn'"):
        FederatedSimulation("resnet", small_data, FederatedConfig())


def test_stop_at_accuracy(small_data):
    cfg = FederatedConfig(rounds=30, client_fraction=1.0, batch_size=10, lr=0.5)
    history = FederatedSimulation("mlp", small_data, cfg, seed=0).run(stop_at_accuracy=0.0).history
    assert max(h["round"] for h in history) == 1


def test_history_logs_eb_across_clients(small_data):
    from mianalysis.federated.diagnostics import eb_criterion

    cfg = FederatedConfig(rounds=1, client_fraction=1.0, algorithm="fedsgd", lr=0.1)
    sim = FederatedSimulation("mlp", small_data, cfg, seed=0)
    result = sim.run(record=True)
    history, models = result.history, result.local_models
    grads = (models[:, 0, 0] - models[:, 1, 0]) / 0.1  # each client's one-step model gives its gradient
    assert history[1]["eb_clients"] == pytest.approx(eb_criterion(grads), rel=1e-3)
    assert "eb_clients" not in history[0]


def test_divergence_is_a_clear_error(small_data):
    cfg = FederatedConfig(rounds=5, client_fraction=1.0, batch_size=5, lr=1e6)
    with pytest.raises(ValueError, match=r"training diverged in round \d: a client's model update is not finite; lower `lr`"):
        FederatedSimulation("mlp", small_data, cfg, seed=0).run()


def test_placements_are_registry_entries_named_by_the_settings(small_data):
    from mianalysis.federated.placement import step_round, update_round
    from mianalysis.federated.registry import get_placement

    sim = FederatedSimulation("mlp", small_data, FederatedConfig(rounds=1, algorithm="fedsgd", placement="step"))
    assert sim.placement is get_placement("step") and sim.placement.function is step_round
    assert get_placement("update").function is update_round
    # The step placement keeps no local models: a recording refuses it before anything runs.
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, algorithm="fedsgd", placement="step", lr=0.1)
    with pytest.raises(ValueError, match="needs `placement`='update'"):
        FederatedSimulation("mlp", small_data, cfg, seed=0).run(record=True)
