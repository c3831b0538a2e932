"""FedRule's full-curvature rules ("fisher_full", "newton_merge") on the in-process grid:
clients with quadratic losses (least squares) whose pooled optimum is known, hand-made
clients checkable by eye, and the records' errors."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from mianalysis.federated.aggregation import fedavg, fisher_weighted  # noqa: E402
from mianalysis.flower import FedRule, LocalGrid, curvature_records  # noqa: E402

SIZES = (5, 8, 11)


def client_data(p):
    """Client p's least-squares data: 3 features, its own true weights (heterogeneous clients)."""
    rng = np.random.default_rng(100 + p)
    x = rng.normal(size=(SIZES[p], 3)) + p
    y = x @ np.array([1.0, -2.0, 0.5]) * (1 + p) + p + 0.1 * rng.normal(size=SIZES[p])
    return torch.from_numpy(x), torch.from_numpy(y)


def half_squared_error(out, target):
    return 0.5 * ((out[:, 0] - target) ** 2).mean()


def least_squares_app(*, steps=True, gradient=True):
    """Client p: its model (nn.Linear(3, 1), float64) from the global arrays, p + 1 plain
    gradient steps of lr 0.05 on its own data (any local iterate will do), then its model,
    its number of examples and curvature_records on its own data."""
    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        x, y = client_data(p)
        model = torch.nn.Linear(3, 1).double()
        model.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in msg.content["arrays"].items()})
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(p + 1 if steps else 0):
            optimizer.zero_grad()
            half_squared_error(model(x), y).backward()
            optimizer.step()
        content = {"arrays": ArrayRecord({k: Array(v.detach().numpy().copy()) for k, v in model.state_dict().items()}),
                   "metrics": MetricRecord({"num-examples": SIZES[p]})}
        content |= curvature_records(model, x, y, loss_fn=half_squared_error, gradient=gradient)
        return Message(RecordDict(content), reply_to=msg)

    return app


START = {"weight": np.array([[0.3, -0.7, 2.0]]), "bias": np.array([-1.5])}


def run(strategy, app, start=START, partitions=3, rounds=1):
    with LocalGrid(app, partitions) as grid:
        result = strategy.start(grid, ArrayRecord({k: Array(v) for k, v in start.items()}), num_rounds=rounds)
    return np.concatenate([result.arrays[k].numpy().ravel() for k in result.arrays.keys()])


def pooled_least_squares():
    data = [client_data(p) for p in range(3)]
    x = np.vstack([np.hstack([d[0].numpy(), np.ones((len(d[1]), 1))]) for d in data])
    y = np.concatenate([d[1].numpy() for d in data])
    return np.linalg.lstsq(x, y, rcond=None)[0]


def test_newton_merge_reaches_the_pooled_optimum_in_one_round():
    """Quadratic clients: the Newton merge of any local iterates is the minimiser of the
    pooled objective (the clients' mean losses weighted by their sizes) exactly."""
    star = pooled_least_squares()
    got = run(FedRule("newton_merge", rule_params={"eps": 0.0}, fraction_evaluate=0.0), least_squares_app())
    np.testing.assert_allclose(got, star, atol=1e-8)
    far = {"weight": np.array([[40.0, -90.0, 3.0]]), "bias": np.array([25.0])}
    got = run(FedRule("newton_merge", rule_params={"eps": 0.0}, fraction_evaluate=0.0), least_squares_app(), far)
    np.testing.assert_allclose(got, star, atol=1e-8)
    # the default damping (eps = 1e-8) moves it by little; the start was far from it
    got = run(FedRule("newton_merge", fraction_evaluate=0.0), least_squares_app())
    np.testing.assert_allclose(got, star, atol=1e-6)
    assert np.abs(np.concatenate([START["weight"].ravel(), START["bias"]]) - star).max() > 1


def test_fisher_full_is_the_curvature_weighted_mean_of_the_models():
    """(sum_k n_k H_k)^-1 sum_k n_k H_k x_k, from the clients' models (no steps: x_k = start,
    then the rule returns the start) and from trained ones (checked against numpy); the
    gradient record is not needed."""
    start = np.concatenate([START["weight"].ravel(), START["bias"]])
    got = run(FedRule("fisher_full", rule_params={"eps": 0.0}, fraction_evaluate=0.0),
              least_squares_app(steps=False, gradient=False))
    np.testing.assert_allclose(got, start, atol=1e-12)
    designs = [np.hstack([client_data(p)[0].numpy(), np.ones((SIZES[p], 1))]) for p in range(3)]
    hessians = [d.T @ d / len(d) for d in designs]
    models = []
    for p in range(3):  # each client's p + 1 gradient steps, by hand
        theta = start.copy()
        y = client_data(p)[1].numpy()
        for _ in range(p + 1):
            theta = theta - 0.05 * designs[p].T @ (designs[p] @ theta - y) / SIZES[p]
        models.append(theta)
    total = sum(n * h for n, h in zip(SIZES, hessians))
    expected = np.linalg.solve(total, sum(n * h @ m for n, h, m in zip(SIZES, hessians, models)))
    got = run(FedRule("fisher_full", rule_params={"eps": 0.0}, fraction_evaluate=0.0),
              least_squares_app(gradient=False))
    np.testing.assert_allclose(got, expected, atol=1e-10)


# Hand-made clients: fixed updates, diagonal or equal Hessians, zero gradients.
UPDATES = {0: [1.0, 3.0, 5.0], 1: [0.0, 3.0, -5.0], 2: [2.0, -1.0, 4.0]}
DIAGONAL = {0: [1.0, 0.5, 2.0], 1: [3.0, 0.5, 0.5], 2: [1.0, 4.0, 1.0]}
EQUAL = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 3.0]])


def hand_made_app(hessian_of, *, hessian_shape=None, records=("hessian", "gradient")):
    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy() + np.asarray(UPDATES[p])
        h = hessian_of(p) if hessian_shape is None else np.ones(hessian_shape)
        content = {"arrays": ArrayRecord({"w": Array(w)}), "metrics": MetricRecord({"num-examples": p + 1})}
        if "hessian" in records:
            content["hessian"] = ArrayRecord({"hessian": Array(np.asarray(h, dtype=np.float64))})
        if "gradient" in records:
            content["gradient"] = ArrayRecord({"w": Array(np.zeros(3))})
        return Message(RecordDict(content), reply_to=msg)

    return app


def hand_round(strategy, app):
    return run(strategy, app, {"w": np.zeros(3)})


def test_fisher_full_with_diagonal_hessians_is_the_precision_weighted_mean():
    got = hand_round(FedRule("fisher_full", rule_params={"eps": 0.0}, fraction_evaluate=0.0),
                     hand_made_app(lambda p: np.diag(DIAGONAL[p])))
    x = np.array([UPDATES[p] for p in range(3)])
    expected = fisher_weighted(x, np.array([DIAGONAL[p] for p in range(3)]), weights=[1.0, 2.0, 3.0], eps=0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # coordinate 0 by hand: (1*1*1 + 2*3*0 + 3*1*2) / (1 + 6 + 3) = 0.7
    assert got[0] == pytest.approx(0.7, rel=1e-12)


@pytest.mark.parametrize("rule", ["fisher_full", "newton_merge"])
def test_equal_hessians_give_fedavgs_model(rule):
    """Identical curvature (and, for newton_merge, clients at their own optima: zero
    gradients): the same model as FedRule("fedavg")."""
    got = hand_round(FedRule(rule, fraction_evaluate=0.0), hand_made_app(lambda p: EQUAL))
    reference = hand_round(FedRule("fedavg", fraction_evaluate=0.0), hand_made_app(lambda p: EQUAL, records=()))
    np.testing.assert_allclose(got, reference, atol=1e-12)
    np.testing.assert_allclose(got, fedavg(np.array([UPDATES[p] for p in range(3)]), weights=[1.0, 2.0, 3.0]),
                               atol=1e-12)


def test_side_records_can_be_renamed():
    app = ClientApp()
    inner = hand_made_app(lambda p: EQUAL)

    @app.train()
    def train(msg, context):
        reply = inner(msg, context)
        content = reply.content
        content["H"], content["g"] = content.array_records["hessian"], content.array_records["gradient"]
        del content["hessian"], content["gradient"]
        return Message(content, reply_to=msg)

    got = hand_round(FedRule("newton_merge", side_key={"hessians": "H", "gradients": "g"}, fraction_evaluate=0.0),
                     app)
    np.testing.assert_allclose(got, fedavg(np.array([UPDATES[p] for p in range(3)]), weights=[1.0, 2.0, 3.0]),
                               atol=1e-12)


@pytest.mark.parametrize("strategy, app, error, match", [
    (lambda: FedRule("newton_merge", fraction_evaluate=0.0), lambda: hand_made_app(lambda p: EQUAL, records=("hessian",)),
     ValueError, r"the reply of node \d+ has no ArrayRecord 'gradient' .*needs each client's gradients there, with "
                 "the model's array names and shapes"),
    (lambda: FedRule("fisher_full", fraction_evaluate=0.0), lambda: hand_made_app(lambda p: EQUAL, records=()),
     ValueError, r"has no ArrayRecord 'hessian' .*needs each client's hessians there, as one \(P, P\) array"),
    (lambda: FedRule("fisher_full", fraction_evaluate=0.0), lambda: hand_made_app(None, hessian_shape=(3,)),
     ValueError, r"the 'hessian' record of node \d+ holds an array of shape \(3,\) .*expected a floating-point "
                 r"\(3, 3\) matrix"),
])
def test_records_are_checked(strategy, app, error, match):
    with pytest.raises(error, match=match):
        hand_round(strategy(), app())


def test_construction_errors_and_the_size_limit():
    with pytest.raises(TypeError, match="`side_key` for the rule 'newton_merge' must be a dict"):
        FedRule("newton_merge", side_key="H")
    with pytest.raises(ValueError, match=r"`side_key` names \['precisions'\]; the rule 'fisher_full' takes "
                                         r"\['hessians'\]"):
        FedRule("fisher_full", side_key={"precisions": "p"})
    with pytest.raises(ValueError, match="the same ArrayRecord"):
        FedRule("newton_merge", side_key={"gradients": "hessian"})
    with pytest.raises(ValueError, match="the global model has 2,049 parameters, more than the limit of 2,048"):
        run(FedRule("fisher_full", fraction_evaluate=0.0), hand_made_app(lambda p: EQUAL), {"w": np.zeros(2049)})
