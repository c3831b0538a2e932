"""mianalysis.federated.quadratic: the gaussian-sgd clients as a federation, against known answers."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from mianalysis.federated.quadratic import QuadraticConfig, QuadraticFederation, fixed_point, server_step
from mianalysis.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]


def task(**settings):
    return get_task("gaussian-sgd", **{"d": 6, "n_clients": 3, **settings})


def run(t, replicates=3, **config):
    return QuadraticFederation(t, QuadraticConfig(**config), replicates=replicates).run()


# ------------------------------------------------------------------ the reference
def test_theta_star_is_the_minimiser_of_the_summed_losses():
    t = task(curvature="rotated")
    result = run(t, rounds=1)
    for r in range(3):  # the summed gradient vanishes at theta*
        grad = sum(t.client_problem(c)[0] @ (result.theta_star[r] - result.targets[r, c]) for c in range(3))
        np.testing.assert_allclose(grad, 0, atol=1e-12)
    np.testing.assert_allclose(result.error[:, 0], ((result.global_models[0] - result.theta_star) ** 2).sum(-1))


def test_excess_loss_is_the_mean_loss_minus_its_minimum():
    t = task(curvature="rotated")
    result = run(t, rounds=2)
    k = t.n_clients
    at_star = np.stack([0.5 * sum((result.theta_star[r] - result.targets[r, c])
                                  @ t.client_problem(c)[0] @ (result.theta_star[r] - result.targets[r, c])
                                  for c in range(k)) / k for r in range(3)])
    np.testing.assert_allclose(result.loss - at_star[:, None], result.excess_loss, atol=1e-12)


# ------------------------------------------------------------------ FedAvg's fixed point (client drift)
@pytest.mark.parametrize("curvature", ["diagonal", "rotated"])
def test_one_local_step_of_exact_gradients_converges_to_theta_star(curvature):
    result = run(task(sigma=0.0, curvature=curvature), rounds=400, local_steps=1, lr=0.4)
    np.testing.assert_allclose(result.global_models[-1], result.theta_star, atol=1e-10)


@pytest.mark.parametrize("curvature", ["diagonal", "rotated"])
def test_fedavg_with_local_steps_converges_to_its_drifted_fixed_point(curvature):
    t = task(sigma=0.0, curvature=curvature)
    result = run(t, rounds=400, local_steps=8, lr=0.2)
    point = fixed_point(t, result.targets, lr=0.2, local_steps=8)
    np.testing.assert_allclose(result.global_models[-1], point, atol=1e-10)
    drift = ((point - result.theta_star) ** 2).sum(-1)
    assert (drift > 1e-3).all()  # heterogeneous clients: not theta*
    # With E -> infinity the fixed point is the plain mean of the clients' optima.
    far = fixed_point(t, result.targets, lr=0.2, local_steps=10_000)
    np.testing.assert_allclose(far, result.targets.mean(1), atol=1e-10)


def test_fixed_point_of_one_local_step_is_theta_star():
    t = task(curvature="rotated")
    result = run(t, rounds=1)
    np.testing.assert_allclose(fixed_point(t, result.targets, lr=0.3, local_steps=1), result.theta_star, atol=1e-10)


# ------------------------------------------------------------------ Fisher weighting
def test_exact_curvature_fisher_after_local_convergence_is_theta_star():
    """Diagonal curvatures, exact gradients, clients that converge locally (E = 400): one
    round of Fisher merging with the exact diag(A_k) lands on theta*, FedAvg on the plain
    mean of the optima."""
    t = task(sigma=0.0, curvature="diagonal")
    fisher = run(t, rounds=1, local_steps=400, lr=0.4, aggregator="fisher", precision="exact",
                 aggregator_params={"eps": 0.0})
    np.testing.assert_allclose(fisher.global_models[1], fisher.theta_star, atol=1e-10)
    fedavg = run(t, rounds=1, local_steps=400, lr=0.4)
    np.testing.assert_allclose(fedavg.global_models[1], fedavg.targets.mean(1), atol=1e-10)
    assert (fedavg.error[:, 1] > 1e-2).all()


def test_hutchinson_is_exact_only_without_noise_for_diagonal_curvature_and_unbiased_otherwise():
    fed = QuadraticFederation(task(curvature="diagonal", sigma=0.0),
                              QuadraticConfig(aggregator="fisher", precision="hutchinson"), replicates=2)
    theta, targets = np.zeros((2, 6)), fed.targets([0, 1])[:, 0]
    np.testing.assert_allclose(fed.precisions(0, theta, targets, [0, 1], 1), np.tile(np.diag(fed.curvatures[0]), (2, 1)),
                               atol=1e-12)
    # With gradient noise the probe's two gradients have independent draws: the noise does not
    # cancel, so even a diagonal A_k is estimated with an error of variance sigma^2 / 2 per probe.
    n, sigma = 4000, 0.8
    fed = QuadraticFederation(task(curvature="diagonal", sigma=sigma),
                              QuadraticConfig(aggregator="fisher", precision="hutchinson", n_probes=n), replicates=1)
    one = QuadraticFederation(task(curvature="diagonal", sigma=sigma),
                              QuadraticConfig(aggregator="fisher", precision="hutchinson"), replicates=300)
    truth = np.diag(fed.curvatures[1])
    estimate = fed.precisions(1, np.zeros((1, 6)), fed.targets([0])[:, 1], [0], 1)[0]
    assert np.all(np.abs(estimate - truth) < 5 * sigma / np.sqrt(2 * n))
    ids = list(range(300))  # one probe per replicate (clipped at 0 only far below: truth >= 0.5 ~ 0.9 sd)
    single = one.precisions(1, np.zeros((300, 6)), one.targets(ids)[:, 1], ids, 1)
    assert not np.allclose(single, truth, atol=1e-3)
    raw_sd = sigma / np.sqrt(2)
    assert 0.7 * raw_sd < np.std(single - truth, axis=0).mean() < 1.1 * raw_sd
    t = task(curvature="rotated", sigma=0.0)
    fed = QuadraticFederation(t, QuadraticConfig(aggregator="fisher", precision="hutchinson", n_probes=n),
                              replicates=1)
    estimate = fed.precisions(1, np.zeros((1, 6)), fed.targets([0])[:, 1], [0], 1)[0]
    truth = np.diag(fed.curvatures[1])
    off = np.sqrt((fed.curvatures[1] ** 2).sum(1) - truth ** 2)  # per-probe spread
    assert np.all(np.abs(estimate - truth) < 5 * off / np.sqrt(n))
    assert not np.allclose(estimate, truth, atol=1e-6)  # an estimate, not the diagonal itself


def test_empirical_fisher_is_the_mean_square_of_noisy_gradients():
    t = task(curvature="diagonal", sigma=0.5)
    fed = QuadraticFederation(t, QuadraticConfig(aggregator="fisher", precision="empirical", n_probes=20000))
    mu = fed.targets([0])[:, 2]
    theta = mu + 1.0
    expected = (fed.curvatures[2] @ (theta - mu)[0]) ** 2 + 0.25
    np.testing.assert_allclose(fed.precisions(2, theta, mu, [0], 1)[0], expected, rtol=0.05)


def test_fisher_fixed_point_with_fixed_precisions():
    t = task(sigma=0.0, curvature="diagonal")
    result = run(t, rounds=400, local_steps=5, lr=0.2, aggregator="fisher", precision="exact",
                 aggregator_params={"eps": 0.0})
    diag = np.stack([np.diag(t.client_problem(c)[0]) for c in range(3)])
    np.testing.assert_allclose(result.global_models[-1],
                               fixed_point(t, result.targets, lr=0.2, local_steps=5, precisions=diag), atol=1e-10)


@pytest.mark.parametrize("burn_in", [0, 2, 3])
def test_inverse_variance_uses_the_variance_of_the_rounds_iterates(burn_in):
    t = task(curvature="diagonal")
    fed = QuadraticFederation(t, QuadraticConfig(aggregator="inverse_variance", local_steps=4, lr=0.1,
                                                 burn_in=burn_in), replicates=2)
    theta, targets = fed.start([0, 1]), fed.targets([0, 1])[:, 1]
    update, variance = fed.train_client(1, theta, targets, [0, 1], 1)
    noise = fed.noise([0, 1], 1, 1)
    iterates, local = [theta], theta
    for step in range(4):
        local = local - 0.1 * (targets * 0 + (local - targets) * np.diag(fed.curvatures[1]) + noise[step])
        iterates.append(local)
    np.testing.assert_allclose(update, local - theta, atol=1e-12)
    np.testing.assert_allclose(variance, np.var(np.stack(iterates[burn_in:]), axis=0), atol=1e-12)


# ------------------------------------------------------------------ heterogeneity 0: the control
def test_identical_clients_make_the_curvature_rules_fedavg():
    t = task(heterogeneity=0.0, curvature="rotated")
    fedavg = run(t, rounds=4, local_steps=5, lr=0.1)
    fisher = run(t, rounds=4, local_steps=5, lr=0.1, aggregator="fisher", precision="exact")
    np.testing.assert_allclose(fisher.global_models, fedavg.global_models, atol=1e-12)
    # and FedAvg's fixed point is theta* (the mean of the optima) whatever E
    np.testing.assert_allclose(fixed_point(t, fedavg.targets, lr=0.1, local_steps=50), fedavg.theta_star, atol=1e-10)
    np.testing.assert_allclose(fedavg.theta_star, fedavg.targets.mean(1), atol=1e-10)


# ------------------------------------------------------------------ streams and determinism
def test_replicates_are_deterministic_and_independent_of_their_company():
    t = task(curvature="rotated")
    cfg = QuadraticConfig(rounds=3, local_steps=4, aggregator="inverse_variance")
    a = QuadraticFederation(t, cfg, replicates=4).run()
    b = QuadraticFederation(t, cfg, replicates=4).run()
    np.testing.assert_array_equal(a.global_models, b.global_models)
    alone = QuadraticFederation(t, cfg, replicates=4).run(replicate_ids=[2])
    np.testing.assert_array_equal(alone.global_models[:, 0], a.global_models[:, 2])
    assert not np.array_equal(a.global_models[:, 0], a.global_models[:, 1])
    other_seed = QuadraticFederation(t, cfg, replicates=4, seed=1).run()
    assert not np.array_equal(other_seed.global_models, a.global_models)


def test_rules_share_start_targets_and_noise():
    t = task()
    a = run(t, rounds=2, aggregator="fedavg")
    b = run(t, rounds=2, aggregator="median")
    np.testing.assert_array_equal(a.global_models[0], b.global_models[0])
    np.testing.assert_array_equal(a.targets, b.targets)
    fed = QuadraticFederation(t, QuadraticConfig(aggregator="fisher"), replicates=3)
    np.testing.assert_array_equal(fed.noise([0, 1, 2], 1, 0), QuadraticFederation(t, QuadraticConfig()).noise(
        [0, 1, 2], 1, 0))


def test_start_and_shared_streams():
    t = task()
    fixed = run(t, rounds=1, init="fixed")
    np.testing.assert_array_equal(fixed.global_models[0], 0.0)
    data = run(t, rounds=1, shared=["data"])
    offsets = data.targets - np.stack([t.client_problem(c)[1] for c in range(3)])
    np.testing.assert_allclose(offsets[:, 0], offsets[:, 1], atol=1e-12)
    fed = QuadraticFederation(t, QuadraticConfig(shared=["noise"]), replicates=2)
    np.testing.assert_array_equal(fed.noise([0, 1], 1, 0), fed.noise([0, 1], 1, 2))
    own = QuadraticFederation(t, QuadraticConfig(), replicates=2)
    assert not np.array_equal(own.noise([0, 1], 1, 0), own.noise([0, 1], 1, 2))


def test_noise_correlation_rho():
    t = task(rho=0.5, d=4)
    fed = QuadraticFederation(t, QuadraticConfig(local_steps=1), replicates=1)
    a = np.concatenate([fed.noise([r], 1, 0)[0, 0] for r in range(3000)])
    b = np.concatenate([fed.noise([r], 1, 1)[0, 0] for r in range(3000)])
    assert abs(np.corrcoef(a, b)[0, 1] - 0.5) < 0.05


# ------------------------------------------------------------------ FedProx and the server optimizers
def test_fedprox_clients_reach_their_proximal_point():
    """Exact gradients, many local steps: a FedProx client lands on the minimiser of
    L_k + mu/2 |theta - theta_0|^2, (A_k + mu I)^-1 (A_k mu_k + mu theta_0); FedAvg's round
    is their mean; with rounds, FedProx converges to fixed_point(..., proximal_mu=mu)."""
    t, mu = task(sigma=0.0, curvature="rotated"), 3.0
    one = run(t, rounds=1, local_steps=500, lr=0.1, proximal_mu=mu)
    theta0 = one.global_models[0]
    prox = [np.linalg.solve(t.client_problem(c)[0] + mu * np.eye(6),
                            (one.targets[:, c] @ t.client_problem(c)[0].T + mu * theta0).T).T for c in range(3)]
    np.testing.assert_allclose(one.global_models[1], np.mean(prox, axis=0), atol=1e-10)
    many = run(t, rounds=400, local_steps=5, lr=0.1, proximal_mu=mu)
    point = fixed_point(t, many.targets, lr=0.1, local_steps=5, proximal_mu=mu)
    np.testing.assert_allclose(many.global_models[-1], point, atol=1e-10)
    fedavg = fixed_point(t, many.targets, lr=0.1, local_steps=5)
    assert ((point - many.theta_star) ** 2).sum() < ((fedavg - many.theta_star) ** 2).sum()  # less drift


def test_fedprox_with_a_huge_mu_keeps_the_client_at_the_global_model():
    t = task(sigma=1.0)
    theta = QuadraticFederation(t, QuadraticConfig(), replicates=2).start([0, 1])
    targets = QuadraticFederation(t, QuadraticConfig(), replicates=2).targets([0, 1])[:, 0]
    free = QuadraticFederation(t, QuadraticConfig(lr=0.1, local_steps=20), replicates=2)
    assert np.abs(free.train_client(0, theta, targets, [0, 1], 1)[0]).max() > 0.1
    held = QuadraticFederation(t, QuadraticConfig(lr=1e-8, local_steps=20, proximal_mu=1e8), replicates=2)
    assert np.abs(held.train_client(0, theta, targets, [0, 1], 1)[0]).max() < 1e-6
    # mu = 0 is FedAvg's client, bit for bit
    zero = QuadraticFederation(t, QuadraticConfig(lr=0.1, local_steps=20, proximal_mu=0.0), replicates=2)
    np.testing.assert_array_equal(zero.train_client(0, theta, targets, [0, 1], 1)[0],
                                  free.train_client(0, theta, targets, [0, 1], 1)[0])


def test_fedavgm_without_momentum_and_server_lr_one_is_fedavg():
    t = task(curvature="rotated")
    fedavg = run(t, rounds=4, local_steps=5, lr=0.1)
    for optimizer, params in [("momentum", {"momentum": 0.0, "eta": 1.0}), ("sgd", {"eta": 1.0})]:
        same = run(t, rounds=4, local_steps=5, lr=0.1, server_optimizer=optimizer, server_params=params)
        np.testing.assert_array_equal(same.global_models, fedavg.global_models)
    half = run(t, rounds=1, local_steps=5, lr=0.1, server_params={"eta": 0.5})
    np.testing.assert_allclose(half.global_models[1] - half.global_models[0],
                               0.5 * (fedavg.global_models[1] - fedavg.global_models[0]), atol=1e-12)


def test_fedadam_first_step_by_hand():
    """Round 1 starts where FedAvg's does, so Delta_1 is FedAvg's first update, and FedAdam
    steps eta sqrt(1 - beta_2^2) / (1 - beta_1^2) m_1 / (sqrt(v_1) + tau) with
    m_1 = (1 - beta_1) Delta_1, v_1 = (1 - beta_2) Delta_1^2 (Flower's FedAdam)."""
    t = task(curvature="diagonal")
    delta = np.diff(run(t, rounds=1, local_steps=5, lr=0.1).global_models, axis=0)[0]
    adam = run(t, rounds=1, local_steps=5, lr=0.1, server_optimizer="adam", server_params={"eta": 0.3})
    eta = 0.3 * np.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
    expected = eta * (0.1 * delta) / (np.sqrt(0.01 * delta ** 2) + 1e-3)
    np.testing.assert_allclose(adam.global_models[1] - adam.global_models[0], expected, rtol=1e-12)


def test_fedyogi_and_fedadam_second_moments_by_hand():
    d1, d2 = np.array([1.0, 2.0, 0.0]), np.array([0.05, 3.0, 0.5])
    _, yogi = server_step("yogi", {}, d1, {}, 1)
    np.testing.assert_allclose(yogi["v"], [0.01, 0.04, 0.0], rtol=1e-12)  # v_1 = (1 - beta_2) Delta_1^2
    np.testing.assert_allclose(yogi["m"], [0.1, 0.2, 0.0], rtol=1e-12)
    step, yogi2 = server_step("yogi", {}, d2, yogi, 2)
    # v_2 = v_1 - 0.01 Delta_2^2 sign(v_1 - Delta_2^2): down where v_1 > Delta_2^2, up elsewhere
    np.testing.assert_allclose(yogi2["v"], [0.01 - 0.01 * 0.0025, 0.04 + 0.09, 0.0025], rtol=1e-12)
    m2 = 0.9 * np.array([0.1, 0.2, 0.0]) + 0.1 * d2
    np.testing.assert_allclose(step, 0.01 * m2 / (np.sqrt(yogi2["v"]) + 1e-3), rtol=1e-12)
    _, adam = server_step("adam", {}, d1, {}, 1)
    _, adam2 = server_step("adam", {}, d2, adam, 2)
    np.testing.assert_allclose(adam2["v"], 0.99 * 0.01 * d1 ** 2 + 0.01 * d2 ** 2, rtol=1e-12)
    step, momentum = server_step("momentum", {"momentum": 0.9, "eta": 0.5}, d2, {"m": d1}, 2)
    np.testing.assert_allclose(step, 0.5 * (0.9 * d1 + d2), rtol=1e-12)


@pytest.mark.parametrize("optimizer, params", [("momentum", {"momentum": 0.9, "eta": 0.7}),
                                               ("adam", {"eta": 0.2}), ("yogi", {"eta": 0.1})])
def test_server_optimizer_runs_its_recursion_on_the_rounds_combined_updates(optimizer, params):
    """The global models follow theta_t = theta_{t-1} + step_t, the step written out here
    from Flower's formulas applied to each round's combined update Delta_t."""
    t = task(curvature="rotated")
    fed = QuadraticFederation(t, QuadraticConfig(rounds=4, local_steps=5, lr=0.1, server_optimizer=optimizer,
                                                 server_params=params), replicates=2)
    result = fed.run()
    theta, m, v = result.global_models[0], 0.0, 0.0
    for r in range(1, 5):
        delta = fed._round(theta, result.targets, [0, 1], r)
        if optimizer == "momentum":
            m = 0.9 * m + delta
            step = 0.7 * m
        else:
            m = 0.9 * m + 0.1 * delta
            if optimizer == "adam":
                v = 0.99 * v + 0.01 * delta ** 2
                step = params["eta"] * np.sqrt(1 - 0.99 ** (r + 1)) / (1 - 0.9 ** (r + 1)) * m / (np.sqrt(v) + 1e-3)
            else:
                v = v - 0.01 * delta ** 2 * np.sign(v - delta ** 2)
                step = params["eta"] * m / (np.sqrt(v) + 1e-3)
        theta = theta + step
        np.testing.assert_allclose(result.global_models[r], theta, rtol=1e-12, atol=1e-14)


def test_gradients_per_round_counts_local_steps_and_side_information():
    def cost(**config):
        return QuadraticFederation(task(), QuadraticConfig(local_steps=7, **config)).gradients_per_round

    assert cost() == cost(proximal_mu=1.0) == cost(server_optimizer="adam") == 7
    assert cost(aggregator="fisher", n_probes=10) == 7 + 2 * 10  # a Hutchinson probe: two gradients
    assert cost(aggregator="fisher", precision="empirical", n_probes=3) == 7 + 3
    assert cost(aggregator="fisher", precision="exact", n_probes=3) == 7  # the oracle
    assert cost(aggregator="inverse_variance") == 7
    described = QuadraticFederation(task(), QuadraticConfig(server_optimizer="yogi", proximal_mu=0.5)).describe()
    assert described["server_params"] == {"eta": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3}
    assert described["proximal_mu"] == 0.5 and described["gradients_per_round"] == 10


def test_default_config_reproduces_the_committed_fedavg_number():
    """figures/aggregation_headroom_quadratic/aggregation_headroom_quadratic.csv: FedAvg in the diagonal design (seed 0, 50
    replicates, at its chosen rate) gives the committed final error to the digit."""
    with open(ROOT / "figures" / "aggregation_headroom_quadratic" / "aggregation_headroom_quadratic.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["design"] == "diagonal" and r["rule"] == "FedAvg")
    t = get_task("gaussian-sgd", n_clients=4, d=20, sigma=1.0, tau=1.0, s0=1.0, eigenvalues=[0.5, 2.0],
                 curvature="diagonal")
    config = QuadraticConfig(rounds=int(row["rounds"]), local_steps=int(row["local_steps"]), lr=float(row["lr"]))
    result = QuadraticFederation(t, config, replicates=int(row["seeds"]), seed=0).run()
    assert round(float(result.error[:, -1].mean()), 5) == float(row["final_error"])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("config, error, match", [
    ({"rounds": 0}, ValueError, "`rounds`"),
    ({"local_steps": 1.5}, TypeError, "`local_steps` must be an integer"),
    ({"lr": 0.0}, ValueError, "`lr`"),
    ({"aggregator": "nope"}, ValueError, "`aggregator`"),
    ({"aggregator": "trimmed_mean", "aggregator_params": {"alpha": 1}}, TypeError, "do not fit the aggregator"),
    ({"precision": "guess"}, ValueError, "`precision`"),
    ({"n_probes": 0}, ValueError, "`n_probes`"),
    ({"local_steps": 4, "burn_in": 4}, ValueError, "`burn_in`"),
    ({"init": "random"}, ValueError, "`init`"),
    ({"shared": ["batches"]}, ValueError, "streams \\['batches'\\] that task 'gaussian-sgd' does not have"),
    ({"proximal_mu": -1.0}, ValueError, "`proximal_mu`"),
    ({"server_optimizer": "nesterov"}, ValueError, "`server_optimizer`"),
    ({"server_optimizer": "momentum", "server_params": {"beta_1": 0.9}}, ValueError,
     "`server_params` of server_optimizer 'momentum' takes eta, momentum; got \\['beta_1'\\]"),
    ({"server_params": [("eta", 1.0)]}, TypeError, "`server_params` must be a mapping"),
    ({"server_params": {"eta": 0.0}}, ValueError, "`server_params\\['eta'\\]`"),
    ({"server_optimizer": "adam", "server_params": {"beta_2": 1.0}}, ValueError, "`server_params\\['beta_2'\\]`"),
    ({"server_optimizer": "yogi", "server_params": {"tau": 0.0}}, ValueError, "`server_params\\['tau'\\]`"),
])
def test_bad_config(config, error, match):
    with pytest.raises(error, match=match):
        QuadraticFederation(task(), QuadraticConfig(**config))


def test_bad_task_replicates_and_targets():
    with pytest.raises(TypeError, match="`task` must be a GaussianSGDTask"):
        QuadraticFederation(get_task("signal-rnn"), QuadraticConfig())
    with pytest.raises(ValueError, match="`replicates`"):
        QuadraticFederation(task(), QuadraticConfig(), replicates=0)
    with pytest.raises(ValueError, match=r"`targets` must have shape \(\.\.\., 3, 6\)"):
        fixed_point(task(), np.zeros((2, 6)), lr=0.1, local_steps=2)
    with pytest.raises(ValueError, match="`precisions` must be finite"):
        fixed_point(task(), np.zeros((3, 6)), lr=0.1, local_steps=2, precisions=-np.ones((3, 6)))


def test_bad_config_type_and_empty_replicate_ids():
    with pytest.raises(TypeError, match=r"`config` must be a QuadraticConfig \(pass QuadraticConfig\(\*\*settings\)\); "
                                        r"got dict"):
        QuadraticFederation(task(), {"rounds": 2})
    with pytest.raises(TypeError, match="`config` must be a QuadraticConfig; got NoneType"):
        QuadraticFederation(task(), None)
    with pytest.raises(ValueError, match="`replicate_ids` must name at least one replicate"):
        QuadraticFederation(task(), QuadraticConfig()).run(replicate_ids=[])


def test_stream_words_are_distinct_and_non_zero():
    from mianalysis.federated import quadratic
    words = [quadratic._START, quadratic._DATA, quadratic._NOISE, quadratic._SHARED_NOISE, quadratic._PROBES,
             quadratic._PROBE_NOISE]
    assert len(set(words)) == 6 and all(w > 100 for w in words)
    from mianalysis._internal.seeding import replica_seed
    assert replica_seed(3) == replica_seed(3, 0)  # why a stream word must not be 0
    fed = QuadraticFederation(task(), QuadraticConfig(), replicates=1)
    draws = [fed._normal(3, w, 0, 0, (6,)) for w in words]  # every stream draws its own numbers
    assert all(not np.array_equal(draws[i], draws[j]) for i in range(6) for j in range(i))


def test_divergence_is_an_error_naming_the_rate():
    with pytest.raises(ValueError, match=r"training diverged in round \d+.*lower `lr` \(now 50.0\)"):
        run(task(), rounds=30, local_steps=30, lr=50.0)
    with pytest.raises(ValueError, match=r"training diverged in round 2: a client's .*lower `lr` \(now 0.1\) or "
                                         r"the server's `eta` \(now 1e\+308, server_optimizer 'sgd'\)"):
        run(task(), rounds=2, server_params={"eta": 1e308})
    with pytest.raises(ValueError, match=r"training diverged in round 1: the global model is not finite; lower "
                                         r"`lr` \(now 0.1\) or the server's `eta` \(now 1e\+308"):
        run(task(m0=100.0), rounds=2, server_params={"eta": 1e308})
    with pytest.raises(ValueError, match=r"`proximal_mu` must be"):
        fixed_point(task(), np.zeros((3, 6)), lr=0.1, local_steps=2, proximal_mu=-1.0)


@pytest.mark.parametrize("optimizer, ours, theirs", [
    ("adam", {"eta": 0.3}, ("FedAdam", {"eta": 0.3})),
    ("yogi", {"eta": 0.3}, ("FedYogi", {"eta": 0.3})),
    ("momentum", {"eta": 0.7, "momentum": 0.9}, ("FedAvgM", {"server_learning_rate": 0.7, "server_momentum": 0.9})),
])
def test_server_step_is_flowers_strategy(optimizer, ours, theirs):
    """An independent reference: Flower's own FedAdam, FedYogi and FedAvgM, fed the same
    aggregated models over four rounds (their FedAvg aggregation patched to return them)."""
    pytest.importorskip("flwr")
    from unittest import mock

    from flwr.app import Array, ArrayRecord
    from flwr.serverapp import strategy
    from flwr.serverapp.strategy.fedavg import FedAvg

    name, settings = theirs
    flower = getattr(strategy, name)(**settings)
    rng = np.random.default_rng(0)
    theirs_theta = ours_theta = rng.normal(size=5)
    state: dict = {}
    for t, scale in enumerate([1.0, 0.3, 0.05, 2.0], start=1):
        delta = scale * rng.normal(size=5)
        flower.current_arrays = (ArrayRecord({"w": Array(theirs_theta)}) if optimizer == "momentum"
                                 else {"w": theirs_theta})
        aggregated = ArrayRecord({"w": Array(theirs_theta + delta)})
        with mock.patch.object(FedAvg, "aggregate_train", return_value=(aggregated, None)):
            theirs_theta = flower.aggregate_train(t, [])[0]["w"].numpy()
        step, state = server_step(optimizer, ours, delta, state, t)
        ours_theta = ours_theta + step
        np.testing.assert_allclose(ours_theta, theirs_theta, rtol=0, atol=1e-13)
