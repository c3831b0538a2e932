"""The full-curvature rules: Fisher merging with full Hessians ("fisher_full") and the
Newton-corrected merge ("newton_merge"), their registry entries, the exact Hessians and
gradients the simulator's clients compute, and the size limit."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation  # noqa: E402
from mianalysis.federated.aggregation import (MAX_HESSIAN_PARAMS, fedavg, fisher_full, fisher_weighted,  # noqa: E402
                                              newton_merge)
from mianalysis.federated.curvature import hessian_and_gradient  # noqa: E402
from mianalysis.federated.registry import SIDE_INFORMATION, get_rule  # noqa: E402


def quadratic_clients(rng, k=3, p=4):
    """k clients with losses (x - mu_k)^T A_k (x - mu_k) / 2 and weights w; their pooled optimum."""
    a = rng.normal(size=(k, p, p))
    curvatures = a @ a.transpose(0, 2, 1) + 0.3 * np.eye(p)
    means = rng.normal(size=(k, p))
    w = rng.integers(1, 9, k).astype(float)
    total = (w[:, None, None] * curvatures).sum(0)
    star = np.linalg.solve(total, (w[:, None] * np.einsum("kij,kj->ki", curvatures, means)).sum(0))
    return curvatures, means, w, star


def gradients_at(curvatures, means, x):
    return np.einsum("kij,kj->ki", curvatures, x - means)


# ------------------------------------------------------------------ the rules: known answers
def test_by_hand():
    # Two clients, one parameter: losses (x - 1)^2 / 2 and 3 (x - 5)^2 / 2, optimum (1 + 15) / 4 = 4.
    x = np.array([[0.0], [7.0]])
    h = np.array([[[1.0]], [[3.0]]])
    g = np.array([[0.0 - 1.0], [3 * (7.0 - 5.0)]])
    np.testing.assert_allclose(newton_merge(x, h, g, eps=0), [4.0], rtol=1e-15)
    np.testing.assert_allclose(fisher_full(x, h, eps=0), [21 / 4], rtol=1e-15)  # (0 * 1 + 7 * 3) / 4
    # weights multiply each client's curvature: (1 * 1 * 0 + 2 * 3 * 7) / (1 + 6) = 6
    np.testing.assert_allclose(fisher_full(x, h, weights=[1, 2], eps=0), [6.0], rtol=1e-15)


def test_newton_merge_is_the_pooled_optimum_of_quadratic_clients_from_anywhere(rng):
    curvatures, means, w, star = quadratic_clients(rng)
    for scale in (0.01, 1.0, 100.0):  # any local iterates
        x = scale * rng.normal(size=means.shape)
        got = newton_merge(x, curvatures, gradients_at(curvatures, means, x), weights=w, eps=0)
        np.testing.assert_allclose(got, star, atol=1e-8 * max(1.0, scale))
    # ... and from the updates of a common model: x + rule(updates) is the same model
    base = rng.normal(size=star.shape)
    x = rng.normal(size=means.shape)
    step = newton_merge(x - base, curvatures, gradients_at(curvatures, means, x), weights=w, eps=0)
    np.testing.assert_allclose(base + step, star, atol=1e-10)
    # with every client at its own optimum (g = 0) it is fisher_full, exact there too
    np.testing.assert_allclose(fisher_full(means, curvatures, weights=w, eps=0), star, atol=1e-10)


def test_fisher_full_with_diagonal_hessians_is_the_precision_weighted_mean(rng):
    x = rng.normal(size=(4, 5))
    precisions = rng.exponential(size=(4, 5))
    hessians = np.stack([np.diag(p) for p in precisions])
    w = np.array([1.0, 3.0, 2.0, 1.0])
    for eps in (0.0, 1e-8, 0.5):
        np.testing.assert_allclose(fisher_full(x, hessians, weights=w, eps=eps),
                                   fisher_weighted(x, precisions, weights=w, eps=eps), rtol=1e-12)


def test_equal_hessians_give_fedavg(rng):
    x = rng.normal(size=(3, 6))
    a = rng.normal(size=(6, 6))
    hessians = np.broadcast_to(a @ a.T + np.eye(6), (3, 6, 6))
    w = np.array([2.0, 1.0, 5.0])
    np.testing.assert_allclose(fisher_full(x, hessians, weights=w), fedavg(x, weights=w), atol=1e-12)
    # newton_merge too, where the clients are at their own optima (zero gradients) ...
    np.testing.assert_allclose(newton_merge(x, hessians, np.zeros_like(x), weights=w), fedavg(x, weights=w),
                               atol=1e-12)
    # ... but identical clients away from it get the client's Newton step, not the client's model
    g = rng.normal(size=6)
    same = newton_merge(np.tile(x[0], (3, 1)), hessians, np.tile(g, (3, 1)), eps=0)
    np.testing.assert_allclose(same, x[0] - np.linalg.solve(hessians[0], g), atol=1e-12)


def test_properties_of_both_rules(rng):
    """Client order, equal weights, integer weights as repeated clients, batch dimensions."""
    curvatures, means, _, _ = quadratic_clients(rng, k=4, p=3)
    x = rng.normal(size=(4, 3))
    g = gradients_at(curvatures, means, x)
    w = np.array([1, 3, 2, 1])
    perm = rng.permutation(4)
    for name in ("fisher_full", "newton_merge"):
        rule = get_rule(name).bind()

        def side(idx):
            return {"hessians": curvatures[idx], "gradients": g[idx]} if name == "newton_merge" \
                else {"hessians": curvatures[idx]}

        every = np.arange(4)
        np.testing.assert_allclose(rule(x[perm], weights=w[perm], **side(perm)), rule(x, weights=w, **side(every)),
                                   rtol=1e-12)
        np.testing.assert_allclose(rule(x, weights=np.full(4, 3.0), **side(every)), rule(x, **side(every)),
                                   rtol=1e-12)
        repeated = np.repeat(every, w)
        np.testing.assert_allclose(rule(x, weights=w, **side(every)), rule(x[repeated], **side(repeated)),
                                   rtol=1e-12)
    stacked = rng.normal(size=(2, 4, 3))  # two replicates
    h = np.stack([curvatures, curvatures[::-1]])
    gg = rng.normal(size=stacked.shape)
    batched = newton_merge(stacked, h, gg, weights=w)
    assert batched.shape == (2, 3)
    for i in range(2):
        np.testing.assert_allclose(batched[i], newton_merge(stacked[i], h[i], gg[i], weights=w), rtol=1e-12)


def test_a_client_of_weight_zero_is_left_out(rng):
    curvatures, means, _, _ = quadratic_clients(rng)
    x = rng.normal(size=means.shape)
    g = gradients_at(curvatures, means, x)
    got = newton_merge(x, curvatures, g, weights=[1.0, 0.0, 2.0])
    np.testing.assert_allclose(got, newton_merge(x[[0, 2]], curvatures[[0, 2]], g[[0, 2]], weights=[1.0, 2.0]),
                               rtol=1e-12)


def test_torch_in_torch_out():
    x = torch.tensor([[0.0], [7.0]], dtype=torch.float32)
    out = newton_merge(x, torch.tensor([[[1.0]], [[3.0]]]), torch.tensor([[-1.0], [6.0]]), eps=0)
    assert torch.is_tensor(out) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([4.0]))


X = np.array([[0.0, 2.0], [4.0, 6.0]])
H = np.stack([np.eye(2), 2 * np.eye(2)])


@pytest.mark.parametrize("call, error, match", [
    (lambda: fisher_full(X, np.ones((2, 2))), ValueError,
     r"`hessians` must have shape \(2, 2, 2\), one \(n_params, n_params\) matrix per client .*; got \(2, 2\)"),
    (lambda: fisher_full(X, np.full((2, 2, 2), np.inf)), ValueError, "`hessians` contains 8 non-finite values"),
    (lambda: fisher_full(X, np.array([[["a"] * 2] * 2] * 2)), TypeError, "`hessians` must be numeric"),
    (lambda: newton_merge(X, H, np.ones((2, 3))), ValueError, r"`gradients` must have the shape of `stacked`"),
    (lambda: newton_merge(X, H, np.full((2, 2), np.nan)), ValueError, "`gradients` contains 4 non-finite"),
    (lambda: newton_merge(X, np.zeros((2, 2, 2)), np.zeros((2, 2)), eps=0), ValueError,
     r"summed Hessian .* is singular; give `eps` > 0"),
    (lambda: fisher_full(X, H, eps=-1.0), ValueError, "`eps` must be a finite number >= 0"),
    (lambda: fisher_full(X, H, weights=[1.0]), ValueError, r"`weights` must have shape \(2,\)"),
    (lambda: get_rule("newton_merge").bind()(X, hessians=H), TypeError, "gradients"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_registry_entries():
    assert get_rule("fisher_full").side_information == "hessians"
    entry = get_rule("newton_merge")
    assert entry.side_information == ("hessians", "gradients") and entry.side_arguments == ("hessians", "gradients")
    assert entry.defaults == {"eps": 1e-8} and entry.display_name == "Newton merge"
    assert SIDE_INFORMATION["hessians"].square and not SIDE_INFORMATION["gradients"].square
    assert (SIDE_INFORMATION["hessians"].record, SIDE_INFORMATION["gradients"].record) == ("hessian", "gradient")
    with pytest.raises(ValueError, match="`eps` must be a finite number >= 0"):
        entry.bind({"eps": -1.0})


# ------------------------------------------------------------------ exact Hessians and gradients
def test_hessian_and_gradient_of_least_squares_in_closed_form(rng):
    x = torch.from_numpy(rng.normal(size=(7, 3)))
    y = torch.from_numpy(rng.normal(size=7))
    model = torch.nn.Linear(3, 1).double()
    h, g = hessian_and_gradient(model, x, y, loss_fn=lambda out, t: 0.5 * ((out[:, 0] - t) ** 2).mean())
    design = np.hstack([x.numpy(), np.ones((7, 1))])  # weight (1, 3), then bias (1,)
    np.testing.assert_allclose(h, design.T @ design / 7, rtol=1e-12)
    theta = np.concatenate([model.weight.detach().numpy().ravel(), model.bias.detach().numpy()])
    residual = design @ theta - y.numpy()
    np.testing.assert_allclose(np.concatenate([g["weight"].ravel(), g["bias"]]), design.T @ residual / 7, rtol=1e-12)
    assert g["weight"].shape == (1, 3)
    with pytest.raises(ValueError, match=f"the Linear model has 2,050 parameters, more than the limit of "
                                         f"{MAX_HESSIAN_PARAMS:,}"):
        hessian_and_gradient(torch.nn.Linear(2049, 1), x, y)


@pytest.fixture(scope="module")
def digits():
    return FederatedData.digits(3, "shards", seed=0)


def _sim(data, hidden=2, **settings):
    cfg = FederatedConfig(**{"rounds": 1, "client_fraction": 1.0, "local_epochs": 1, "batch_size": 50, "lr": 0.1,
                             **settings})
    return FederatedSimulation("mlp", data, cfg, replicates=2, seed=3, hidden=hidden)


def _manual(sim, flat_model, client):
    """The Hessian and gradient of the client's mean cross-entropy by torch.autograd.functional."""
    module = sim._build()
    names = [n for n, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    sizes = [int(np.prod(s)) for s in shapes]
    idx = sim.data.clients[client]
    x = torch.from_numpy(sim.data.x_train[idx]).double()
    y = torch.from_numpy(sim.data.y_train[idx]).long()

    def loss(vector):
        parts = {n: t.reshape(s) for n, t, s in zip(names, torch.split(vector, sizes), shapes)}
        return torch.nn.functional.cross_entropy(torch.func.functional_call(module, parts, (x,)), y)

    vector = torch.from_numpy(flat_model)
    return (torch.autograd.functional.hessian(loss, vector).numpy(),
            torch.autograd.functional.jacobian(loss, vector).numpy())


def test_exact_curvature_matches_autograd_in_chunks(digits, monkeypatch):
    import mianalysis.federated.curvature as curvature

    sim = _sim(digits)
    params = sim._setup([0, 1])
    x, y = sim.client_examples(1)
    monkeypatch.setattr(curvature, "_CHUNK_ELEMENTS", 2 * 166 * 100)  # chunks of 100 examples: several
    h, g = sim.exact_curvature(params, x, y)
    assert h.shape == (2, 166, 166) and g.shape == (2, 166) and h.dtype == torch.float64
    flat = sim.flatten(params).numpy().astype(np.float64)
    for rep in range(2):
        manual_h, manual_g = _manual(sim, flat[rep], 1)
        np.testing.assert_allclose(h[rep].numpy(), manual_h, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(g[rep].numpy(), manual_g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("aggregator", ["fisher_full", "newton_merge"])
def test_a_round_combines_local_models_with_their_exact_curvature(digits, aggregator):
    sim = _sim(digits, aggregator=aggregator, aggregator_params={"eps": 1e-3})
    res = sim.run(record=True)
    local = res.local_models[:, 1].astype(np.float64)  # (clients, R, P)
    rep = 1
    hessians, gradients = zip(*[_manual(sim, local[c, rep], c) for c in range(3)])
    side = {"hessians": np.array(hessians)} | ({"gradients": np.array(gradients)} if aggregator == "newton_merge"
                                               else {})
    expected = get_rule(aggregator).function(local[:, rep], weights=digits.sizes(), eps=1e-3, **side)
    np.testing.assert_allclose(res.global_models[1, rep], expected, rtol=1e-4, atol=1e-4)
    assert np.abs(expected - fedavg(local[:, rep], weights=digits.sizes())).max() > 1e-2  # not FedAvg's model
    described = sim.describe()["side_information"]
    assert described["argument"] == ("hessians" if aggregator == "fisher_full" else ["hessians", "gradients"])
    assert "exact Hessian" in described["computed"] and described["aggregator_params"] == {"eps": 1e-3}


def test_models_above_the_limit_are_refused_in_one_line(digits):
    with pytest.raises(ValueError, match=r"^a full Hessian of the mlp model is 55,210 x 55,210: the mlp model has "
                                         r"55,210 parameters, more than the limit of 2,048 [^\n]*'fisher'[^\n]*$"):
        _sim(digits, hidden=200, aggregator="newton_merge")
    with pytest.raises(ValueError, match="needs `algorithm`='fedavg' and `placement`='update'"):
        FederatedConfig(aggregator="fisher_full", algorithm="fedsgd").check()


def test_the_quadratic_federation_refuses_them():
    from mianalysis.federated.quadratic import QuadraticConfig, QuadraticFederation
    from mianalysis.tasks import get_task

    with pytest.raises(ValueError, match="`aggregator`='newton_merge' needs each client's hessians and gradients"):
        QuadraticFederation(get_task("gaussian-sgd"), QuadraticConfig(aggregator="newton_merge"))
