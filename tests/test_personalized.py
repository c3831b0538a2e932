"""FedRep / FedGradNorm and the multi-task data."""

import numpy as np
import pytest

from mianalysis.federated.personalized import PersonalizedConfig, PersonalizedSimulation, WeightOptimizer
from mianalysis.federated.multitask import make_multitask


def test_weights_stay_put_when_tasks_train_alike():
    opt = WeightOptimizer(3, alpha=0.1)
    for _ in range(5):
        p = opt.step([2.0, 2.0, 2.0], [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(p, [1.0, 1.0, 1.0])


def test_first_step_known_answer():
    # G = [1, 1]; loss ratios [2, 1] give r = [4/3, 2/3], targets mean(G) r^gamma = [1.30, 0.69]:
    # G_0 < target_0 and G_1 > target_1, so d F_grad / d p = [-1, +1]; Adam's first step moves
    # each weight by alpha against the sign; the sum stays N = 2.
    opt = WeightOptimizer(2, alpha=0.01, gamma=0.9)
    np.testing.assert_allclose(opt.targets([1.0, 1.0], [2.0, 1.0]), [(4 / 3) ** 0.9, (2 / 3) ** 0.9])
    np.testing.assert_allclose(opt.step([1.0, 1.0], [2.0, 1.0]), [1.01, 0.99], rtol=1e-6)


def test_large_gradients_lose_weight_and_slow_tasks_gain():
    opt = WeightOptimizer(4, alpha=0.01)
    for _ in range(50):
        p = opt.step([10.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert p[0] < 1 < p[1] and p.sum() == pytest.approx(4)
    opt = WeightOptimizer(3, alpha=0.01)
    for _ in range(50):
        p = opt.step([1.0, 1.0, 1.0], [0.9, 0.5, 0.5])
    assert p[0] > 1 > p[1] and p.sum() == pytest.approx(3)


def test_weight_optimizer_rejects_bad_input():
    opt = WeightOptimizer(2)
    with pytest.raises(ValueError, match="need one value per client"):
        opt.step([1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="`loss_ratios` finite and > 0"):
        opt.step([1.0, 1.0], [0.0, 1.0])


def test_multitask_data():
    clients = make_multitask("imbalanced", seed=0, n_test=50)
    assert [len(c["y_train"]) for c in clients] == [3000, 500, 500, 3000]
    assert [c["kind"] for c in clients] == ["regression"] + ["classification"] * 3
    assert clients[0]["y_train"].shape == (3000, 1) and clients[0]["y_train"].dtype == np.float32
    assert [c["n_outputs"] for c in clients] == [1, 5, 3, 2]
    assert clients[0]["y_train"].std() > 3  # the regression's large scale
    # The tasks do not depend on the allocation: the same inputs get the same labels.
    balanced = make_multitask("balanced", seed=0, n_test=50)
    from sklearn.linear_model import LogisticRegression

    easy = LogisticRegression(max_iter=500).fit(np.tanh(balanced[3]["x_train"]), balanced[3]["y_train"])
    assert easy.score(np.tanh(clients[3]["x_test"]), clients[3]["y_test"]) > 0.8
    with pytest.raises(ValueError, match="`sizes` has 2 entries but there are 4 tasks"):
        make_multitask([10, 10])
    with pytest.raises(ValueError, match="a task must be"):
        make_multitask([10], tasks=[("ranking", 3)])


@pytest.fixture(scope="module")
def small_clients():
    return make_multitask([200, 100, 100, 150], seed=1, n_test=100)


def test_fedrep_trains_every_task(small_clients):
    cfg = PersonalizedConfig(rounds=40, method="fedrep", beta=5e-3, batch_size=32)
    rows = PersonalizedSimulation(small_clients, cfg, seed=0).run()
    for client in range(4):
        first = next(r for r in rows if r["round"] == 0 and r["client"] == client)
        last = next(r for r in rows if r["round"] == 40 and r["client"] == client)
        assert last["train_loss"] < 0.8 * first["train_loss"]
        assert last["weight"] == 1.0
    easy = [r["test_metric"] for r in rows if r["client"] == 3]
    assert easy[-1] > 0.8 and easy[-1] > easy[0] + 0.2


def test_fedgradnorm_with_frozen_weights_is_fedrep(small_clients):
    # alpha -> 0 keeps every p_i at 1 up to rounding: the runs must then coincide.
    rep = PersonalizedSimulation(small_clients, PersonalizedConfig(rounds=5, method="fedrep", beta=5e-3), seed=2).run()
    gn = PersonalizedSimulation(small_clients, PersonalizedConfig(rounds=5, method="fedgradnorm", beta=5e-3,
                                                                  alpha=1e-12), seed=2).run()
    np.testing.assert_allclose([r["test_loss"] for r in gn], [r["test_loss"] for r in rep], rtol=1e-5)


def test_fedgradnorm_weights_sum_to_n_and_move(small_clients):
    rows = PersonalizedSimulation(small_clients, PersonalizedConfig(rounds=20, beta=5e-3, alpha=0.02), seed=0).run()
    for t in range(21):
        assert sum(r["weight"] for r in rows if r["round"] == t) == pytest.approx(4)
    final = [r["weight"] for r in rows if r["round"] == 20]
    assert final[0] < 1  # the regression's large gradients are damped
    assert max(abs(w - 1) for w in final) > 0.1


def test_same_seed_same_run(small_clients):
    cfg = PersonalizedConfig(rounds=3, beta=5e-3)
    a = PersonalizedSimulation(small_clients, cfg, seed=4).run()
    b = PersonalizedSimulation(small_clients, cfg, seed=4).run()
    assert a == b


@pytest.mark.parametrize("kwargs, match", [
    ({"method": "fedprox"}, "`method` must be one of 'fedrep', 'fedgradnorm'"),
    ({"tau_h": 0}, "`tau_h` must be >= 1"),
    ({"beta": 0.0}, "`beta` must be > 0"),
    ({"gamma": -1.0}, "`gamma` must be >= 0"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PersonalizedConfig(**kwargs).check()


def test_divergence_is_a_clear_error(small_clients):
    clients = [dict(c) for c in small_clients]
    clients[0]["y_train"] = np.full_like(clients[0]["y_train"], np.inf)
    with pytest.raises(ValueError, match=r"training diverged in round 1: a client's loss is not finite; lower `beta`"):
        PersonalizedSimulation(clients, PersonalizedConfig(rounds=2)).run()
