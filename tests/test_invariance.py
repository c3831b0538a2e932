"""The multi-environment task and the two mask placements in the simulator."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.federated.diagnostics import eb_criterion  # noqa: E402
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation  # noqa: E402
from mianalysis.federated.environments import make_environments  # noqa: E402


def test_environment_sizes_and_splits():
    d = make_environments(n_clients=6, n_test_clients=3, examples_per_client=50, signature_dims=4,
                          validation_fraction=0.2, seed=1)
    assert d["x_train"].shape == (6 * 40, 6) and d["x_val"].shape == (6 * 10, 6) and d["x_test"].shape == (150, 6)
    assert d["x_train"].dtype == np.float32 and set(np.unique(d["y_train"])) == {0, 1}
    np.testing.assert_array_equal(np.concatenate(d["clients"]), np.arange(240))
    unequal = make_environments(n_clients=8, examples_per_client=100, equal_size=False, size_sigma=1.0, seed=0)
    sizes = [len(c) for c in unequal["clients"]]
    assert max(sizes) > 2 * min(sizes) and min(sizes) >= 1
    again = make_environments(n_clients=6, n_test_clients=3, examples_per_client=50, signature_dims=4, seed=1)
    np.testing.assert_array_equal(again["x_train"], d["x_train"])


def test_signature_predicts_inside_a_client_and_is_noise_on_held_out_clients():
    d = make_environments(n_clients=10, n_test_clients=4, examples_per_client=200, signature_dims=8, seed=0)
    sig, y = d["x_train"][:, 2:], d["y_train"]
    directions = []
    for idx in d["clients"]:
        # The class-mean difference recovers the client's direction; its sign rule is perfect.
        v = sig[idx][y[idx] == 1].mean(0) - sig[idx][y[idx] == 0].mean(0)
        assert np.all((sig[idx] @ v > 0) == (y[idx] == 1))
        directions.append(v / np.linalg.norm(v))
    cosines = np.array(directions) @ np.array(directions).T
    assert np.abs(cosines[np.triu_indices(10, 1)]).mean() < 0.6  # clients' shortcuts disagree
    test_sig, test_y = d["x_test"][:, 2:], d["y_test"]
    for v in directions:  # no client's shortcut carries over
        assert abs(np.mean((test_sig @ v > 0) == (test_y == 1)) - 0.5) < 0.1


def test_spiral_is_not_linearly_separable_but_learnable():
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier

    d = make_environments(n_clients=4, examples_per_client=500, spiral_noise=0.02, seed=0)
    xy, y, xt, yt = d["x_train"][:, :2], d["y_train"], d["x_test"][:, :2], d["y_test"]
    assert LogisticRegression().fit(xy, y).score(xt, yt) < 0.75
    assert KNeighborsClassifier(5).fit(xy, y).score(xt, yt) > 0.9


@pytest.mark.parametrize("kwargs, match", [
    ({"n_clients": 0}, "`n_clients` must be >= 1"),
    ({"validation_fraction": 1.0}, r"`validation_fraction` must be in \[0, 1\)"),
    ({"signature_noise": -1.0}, "`signature_noise` must be a finite number >= 0"),
    ({"examples_per_client": 1}, "`examples_per_client` must be >= 2"),
])
def test_environment_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_environments(**kwargs)


@pytest.fixture(scope="module")
def env_data():
    return FederatedData.environments(n_clients=4, n_test_clients=2, examples_per_client=30, signature_dims=3,
                                      seed=0)


def test_vector_data_and_validation_metrics(env_data):
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=8, lr=0.1)
    history = FederatedSimulation("mlp", env_data, cfg, hidden=16, seed=0).run().history
    assert {"val_loss", "val_accuracy", "test_accuracy"} <= set(history[-1])
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    with pytest.raises(ValueError, match="the cnn model needs square images"):
        FederatedSimulation("cnn", env_data, cfg).run()


@pytest.mark.parametrize("rule, params", [("fedavg", {}), ("and_mask", {"threshold": 0.5}), ("median", {})])
def test_step_placement_with_full_batches_is_fedsgd(env_data, rule, params):
    # With B = full local data, each step of a step-placement round is one FedSGD round:
    # E = 2 epochs in one round equal two FedSGD rounds.
    step = FederatedConfig(rounds=1, client_fraction=1.0, local_epochs=2, batch_size=None, lr=0.2,
                           algorithm="fedsgd", placement="step", aggregator=rule, aggregator_params=params)
    update = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=None, lr=0.2, algorithm="fedsgd",
                             aggregator=rule, aggregator_params=params)
    a = FederatedSimulation("mlp", env_data, step, hidden=16, replicates=2, seed=3)
    b = FederatedSimulation("mlp", env_data, update, hidden=16, replicates=2, seed=3)
    ra, rb = a.run(), b.run()
    np.testing.assert_allclose(ra.final_params, rb.final_params, rtol=1e-5, atol=1e-6)


def test_step_placement_masks_every_step(env_data):
    # A threshold of 1 keeps only coordinates on which every client agrees: with minibatches
    # the masked run moves less than the plain mean of the same gradients.
    base = dict(rounds=1, client_fraction=1.0, local_epochs=1, batch_size=5, lr=0.1, algorithm="fedsgd",
                placement="step")
    plain = FederatedSimulation("mlp", env_data, FederatedConfig(**base), hidden=16, seed=0)
    masked = FederatedSimulation("mlp", env_data, FederatedConfig(**base, aggregator="and_mask",
                                                                  aggregator_params={"threshold": 1.0,
                                                                                     "rescale": False}),
                                 hidden=16, seed=0)
    init = plain.flatten(plain._setup([0])).numpy()
    moved_plain = np.abs(plain.run().final_params - init) > 0
    moved_masked = np.abs(masked.run().final_params - init) > 0
    assert moved_masked.sum() < moved_plain.sum()


def test_placement_errors(env_data):
    with pytest.raises(ValueError, match="`placement`='step' applies the rule .* set `algorithm`='fedsgd'"):
        FederatedConfig(placement="step").check()
    with pytest.raises(ValueError, match="`placement` must be one of 'update', 'step'"):
        FederatedConfig(placement="server").check()
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, algorithm="fedsgd", placement="step")
    with pytest.raises(ValueError, match="recording local models needs `placement`='update'"):
        FederatedSimulation("mlp", env_data, cfg, hidden=8).run(record=True)


def test_per_client_eb_matches_per_example_gradients(env_data):
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10, lr=0.1)
    sim = FederatedSimulation("mlp", env_data, cfg, hidden=8, replicates=2, seed=5)
    client_eb = sim.run(log_client_eb=True).client_eb
    assert len(client_eb) == 4 * 2 and {r["client"] for r in client_eb} == {0, 1, 2, 3}
    # Reference: one backward pass per example of client 2, replicate 1, at the initial model.
    module = sim.module
    init = sim._init(1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(init[name])
    idx = env_data.clients[2]
    grads = []
    for i in idx:
        module.zero_grad()
        x = torch.from_numpy(env_data.x_train[i:i + 1])
        torch.nn.functional.cross_entropy(module(x), torch.from_numpy(env_data.y_train[i:i + 1])).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in module.parameters()]).numpy().astype(np.float64))
    row = next(r for r in client_eb if r["client"] == 2 and r["replicate"] == 1)
    assert row["eb"] == pytest.approx(eb_criterion(np.array(grads)), rel=1e-4)
