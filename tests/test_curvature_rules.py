"""Curvature-weighted aggregation: Fisher merging and inverse-variance (FedPA-style) rules,
the clients' side information in the simulator, FedRule, and the headroom experiment."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.federated.aggregation import fedavg, fisher_weighted, inverse_variance  # noqa: E402
from mianalysis.federated.registry import get_rule  # noqa: E402

X = np.array([[0.0, 2.0, 1.0], [4.0, 6.0, -3.0]])


# ------------------------------------------------------------------ the rules
def test_fisher_weighted_hand_computed():
    f = np.array([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    # coordinate 0: (0*1 + 4*3) / 4 = 3; coordinate 1: no information anywhere -> mean 4;
    # coordinate 2: equal precisions -> mean -1.
    np.testing.assert_allclose(fisher_weighted(X, f, eps=0), [3.0, 4.0, -1.0], rtol=1e-15)
    # weights multiply the precisions: (0*1*1 + 4*3*2) / (1 + 6) = 24 / 7.
    np.testing.assert_allclose(fisher_weighted(X, f, weights=[1, 2], eps=0), [24 / 7, 14 / 3, -5 / 3], rtol=1e-15)
    # damping: F + eps; with eps = 1 coordinate 0 is (0*2 + 4*4) / 6.
    np.testing.assert_allclose(fisher_weighted(X, f, eps=1.0), [16 / 6, 4.0, -1.0], rtol=1e-15)


def test_inverse_variance_hand_computed():
    v = np.array([[3.0, 1.0, 0.5], [1.0, 1.0, 0.5]])
    # coordinate 0: precisions 1/3 and 1: (0/3 + 4) / (4/3) = 3.
    np.testing.assert_allclose(inverse_variance(X, v, eps=0), [3.0, 4.0, -1.0], rtol=1e-15)
    # the same as fisher_weighted with precisions 1 / (var + eps)
    np.testing.assert_allclose(inverse_variance(X, v, eps=0.5), fisher_weighted(X, 1 / (v + 0.5), eps=0), rtol=1e-15)


@pytest.mark.parametrize("weighted", [False, True])
def test_equal_precisions_give_fedavg_exactly(weighted, rng):
    x = rng.standard_normal((3, 6, 11))  # 3 replicates of 6 clients
    w = rng.integers(1, 9, 6).astype(float) if weighted else None
    for value in (1e-3, 0.37, 5.0):
        np.testing.assert_array_equal(fisher_weighted(x, np.full_like(x, value), weights=w), fedavg(x, weights=w))
        np.testing.assert_array_equal(inverse_variance(x, np.full_like(x, value), weights=w), fedavg(x, weights=w))
    # no information anywhere (all F = 0): the plain weighted mean, with or without damping
    for eps in (0.0, 1e-8):
        np.testing.assert_array_equal(fisher_weighted(x, np.zeros_like(x), weights=w, eps=eps), fedavg(x, weights=w))


def test_infinite_precision_dominates():
    f = np.array([[np.inf, 1.0, np.inf], [1e6, 1.0, np.inf]])
    np.testing.assert_array_equal(fisher_weighted(X, f), [0.0, 4.0, -1.0])
    np.testing.assert_array_equal(fisher_weighted(X, f, weights=[1, 3]), [0.0, 5.0, -2.0])
    # zero variance without a floor is infinite precision
    v = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 2.0]])
    np.testing.assert_array_equal(inverse_variance(X, v, eps=0), [0.0, 4.0, -1.0])


def test_batch_dimensions_apply_per_entry(rng):
    x = rng.standard_normal((2, 3, 4, 5))
    f = rng.exponential(size=x.shape)
    w = np.array([1.0, 2.0, 3.0, 1.0])
    batched = fisher_weighted(x, f, weights=w)
    assert batched.shape == (2, 3, 5)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(batched[i, j], fisher_weighted(x[i, j], f[i, j], weights=w), rtol=1e-14)
    expected = (w[:, None] * f[1, 2] * x[1, 2]).sum(0) / (w[:, None] * f[1, 2]).sum(0)
    np.testing.assert_allclose(batched[1, 2], expected, rtol=1e-6)  # up to eps = 1e-8


def test_properties_of_a_rule(rng):
    """The generic properties tests/test_aggregation.py checks for every other rule."""
    x = rng.standard_normal((4, 9))
    f = rng.exponential(size=(4, 9))
    w = np.array([1, 3, 2, 1])
    for name in ("fisher", "inverse_variance"):
        key = get_rule(name).side_information
        rule = get_rule(name).bind()
        side = {key: f}
        np.testing.assert_allclose(rule(np.tile(x[0], (4, 1)), **side), x[0], rtol=1e-12)
        perm = rng.permutation(4)
        np.testing.assert_allclose(rule(x[perm], weights=w[perm], **{key: f[perm]}),
                                   rule(x, weights=w, **side), rtol=1e-12)
        np.testing.assert_allclose(rule(x, weights=np.full(4, 3.0), **side), rule(x, **side), rtol=1e-12)
        np.testing.assert_allclose(rule(x, weights=w, **side),
                                   rule(np.repeat(x, w, axis=0), **{key: np.repeat(f, w, axis=0)}),
                                   rtol=1e-12)


def test_torch_in_torch_out():
    x = torch.tensor(X, dtype=torch.float32)
    f = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    out = fisher_weighted(x, f, eps=0)
    assert torch.is_tensor(out) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([3.0, 4.0, -1.0]))
    out = get_rule("inverse_variance").bind({"eps": 0})(x.double(), variances=f.double() + 1)
    assert out.dtype == torch.float64


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: fisher_weighted(X, np.ones((2, 2))), ValueError,
         r"`precisions` must have the shape of `stacked`, \(2, 3\) .*; got \(2, 2\)"),
        (lambda: fisher_weighted(X, np.ones((3,))), ValueError, r"`precisions` must have the shape of `stacked`"),
        (lambda: fisher_weighted(X, -np.ones((2, 3))), ValueError, "`precisions` must be >= 0 .* got 6 values"),
        (lambda: fisher_weighted(X, np.full((2, 3), np.nan)), ValueError, "`precisions` must be >= 0 .*not NaN"),
        (lambda: fisher_weighted(X, np.array([["a"] * 3] * 2)), TypeError, "`precisions` must be numeric"),
        (lambda: inverse_variance(X, np.ones((1, 3))), ValueError, r"`variances` must have the shape of `stacked`"),
        (lambda: inverse_variance(X, -np.ones((2, 3))), ValueError, "`variances` must be >= 0"),
        (lambda: fisher_weighted(X, np.ones((2, 3)), eps=-1.0), ValueError, "`eps` must be a finite number >= 0"),
        (lambda: fisher_weighted(X, np.ones((2, 3)), weights=[1.0]), ValueError, r"`weights` must have shape \(2,\)"),
        (lambda: fisher_weighted(np.ones((2, 0)), np.ones((2, 0))), ValueError, "`stacked` must have shape"),
        (lambda: get_rule("fisher").bind()(X), TypeError, "precisions"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------------------ the simulator
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return FederatedData.digits(4, "shards", seed=0)


def _sim(data, **settings):
    cfg = FederatedConfig(**{"rounds": 1, "client_fraction": 1.0, "local_epochs": 1, "batch_size": 20, "lr": 0.1,
                             **settings})
    return FederatedSimulation("mlp", data, cfg, replicates=2, seed=3, hidden=8)


def _manual_fisher(sim, flat_model, client):
    """Per-example autograd on the module: the mean of squared gradients of client's examples."""
    module = sim._build()
    offset = 0
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(flat_model[offset:offset + p.numel()]).reshape(p.shape))
            offset += p.numel()
    idx = sim.data.clients[client]
    x = torch.from_numpy(sim.data.x_train[idx]).float()
    y = torch.from_numpy(sim.data.y_train[idx]).long()
    total = 0
    for i in range(len(idx)):
        module.zero_grad()
        torch.nn.functional.cross_entropy(module(x[i:i + 1]), y[i:i + 1]).backward()
        total = total + torch.cat([p.grad.reshape(-1) for p in module.parameters()]).double() ** 2
    return (total / len(idx)).numpy()


def test_fisher_rule_combines_local_models_with_their_empirical_fisher(digits):
    sim = _sim(digits, aggregator="fisher", aggregator_params={"eps": 1e-6})
    res = sim.run(record=True)
    local = res.local_models[:, 1].astype(np.float64)  # (clients, R, P)
    for rep in (1,):  # one replicate (the slow reference), not the first
        fisher = np.stack([_manual_fisher(sim, local[c, rep], c) for c in range(4)])
        assert (fisher > 0).any() and (fisher == 0).any()  # pixels that are 0 everywhere carry no information
        expected = fisher_weighted(local[:, rep], fisher, weights=digits.sizes(), eps=1e-6)
        np.testing.assert_allclose(res.global_models[1, rep], expected, rtol=1e-4, atol=1e-6)
        # ... which is not FedAvg's model
        assert np.abs(expected - fedavg(local[:, rep], weights=digits.sizes())).max() > 1e-3


def test_inverse_variance_uses_the_iterates_of_the_last_local_epoch(digits):
    # Full-batch local training, 2 epochs: the last epoch's iterates are the models after
    # epochs 1 and 2, whose variance is (half their difference) squared.
    after_one = _sim(digits, local_epochs=1, batch_size=None).run(record=True).local_models[:, 1].astype(np.float64)
    sim = _sim(digits, local_epochs=2, batch_size=None, aggregator="inverse_variance",
               aggregator_params={"eps": 1e-10})
    res = sim.run(record=True)
    after_two = res.local_models[:, 1].astype(np.float64)
    variances = ((after_two - after_one) / 2) ** 2
    for rep in range(2):
        expected = inverse_variance(after_two[:, rep], variances[:, rep], weights=digits.sizes(), eps=1e-10)
        np.testing.assert_allclose(res.global_models[1, rep], expected, rtol=1e-4, atol=1e-5)


def test_diagonal_fisher_matches_per_example_autograd(digits):
    sim = _sim(digits)
    params = sim._setup([0, 1])
    idx = torch.from_numpy(digits.clients[2])
    fisher = sim.diagonal_fisher(params, sim.x_train[idx], sim.y_train[idx], chunk=7)  # several chunks
    flat = sim.flatten(params).numpy().astype(np.float64)
    for rep in range(2):
        np.testing.assert_allclose(fisher[rep].numpy(), _manual_fisher(sim, flat[rep], 2), rtol=1e-4, atol=1e-10)


def test_describe_records_the_side_information_and_parameters(digits):
    d = _sim(digits, aggregator="fisher").describe()
    assert d["side_information"]["argument"] == "precisions"
    assert "squared per-example gradients" in d["side_information"]["computed"]
    assert d["side_information"]["aggregator_params"] == {"eps": 1e-8}
    d = _sim(digits, aggregator="inverse_variance", aggregator_params={"eps": 1e-6}).describe()
    assert d["side_information"]["aggregator_params"] == {"eps": 1e-6}
    assert "last local epoch" in d["side_information"]["computed"]
    assert "side_information" not in _sim(digits).describe()


@pytest.mark.parametrize("settings, match", [
    ({"aggregator": "fisher", "algorithm": "fedsgd"}, "needs `algorithm`='fedavg' and `placement`='update'"),
    ({"aggregator": "inverse_variance", "algorithm": "fedsgd", "placement": "step"}, "needs `algorithm`='fedavg'"),
    ({"aggregator": "fisher", "aggregator_params": {"eps": -1.0}}, "`eps` must be a finite number >= 0"),
])
def test_config_errors(settings, match):
    with pytest.raises(ValueError, match=match):
        FederatedConfig(**settings).check()


# ------------------------------------------------------------------ the experiment
def test_headroom_experiment_quick_mode(tmp_path):
    import csv
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "experiments" / "aggregation_headroom.py"
    # PyTorch on one thread (2-3x faster training when the suite's other worker shares the 2 cores)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path)], check=True, cwd=tmp_path,
                   capture_output=True, timeout=600, env=env)
    with open(tmp_path / "aggregation_headroom_quick.csv") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames[:6] == ["partition", "rule", "aggregator", "params", "lr", "lr_choice"]
    for column in ("final_test_loss", "final_test_accuracy", "rounds_to_target", "d_loss", "d_loss_low",
                   "d_loss_high", "d_accuracy", "d_accuracy_low", "d_accuracy_high", "d_rounds", "seeds"):
        assert column in reader.fieldnames
    assert [r["rule"] for r in rows] == ["FedAvg", "AND-mask (rescale)", "AND-mask (no rescale)", "Fisher",
                                         "Inverse variance"]
    for r in rows:  # every chosen rate is interior, or the table says it is not
        assert r["lr_choice"] in ("interior", "lowest rung of the ladder", "highest rung of the ladder", "all failed",
                                  "failed on the evaluation seeds")
        tried = sorted(float(v) for v in r["lrs_tried"].split())
        if r["lr_choice"] == "interior":
            assert tried[0] < float(r["lr"]) < tried[-1]
        if r["lr_choice"] not in ("all failed", "failed on the evaluation seeds"):  # a failed rule has no result
            assert r["final_test_accuracy"] != "" and r["d_accuracy"] != ""
    sidecar = json.loads((tmp_path / "aggregation_headroom_quick.csv.json").read_text())
    assert sidecar["plan"]["seeds"] >= 3 and "--quick" in sidecar["provenance"][0]["argv"]
    scored = sum(r["lr_choice"] not in ("all failed", "failed on the evaluation seeds") for r in rows)
    assert len(sidecar["per_seed"]) == scored * sidecar["plan"]["seeds"]  # every seed of every scored rule
    assert (tmp_path / "aggregation_headroom_quick.md").exists() and (tmp_path / "aggregation_headroom_quick.png").exists()
    # --replot draws the same figure from the table and sidecar alone (_ladder.read_results); its main,
    # in this process (no second start of Python, PyTorch and matplotlib)
    import importlib.util

    from matplotlib.image import imread

    drawn = imread(tmp_path / "aggregation_headroom_quick.png")
    (tmp_path / "aggregation_headroom_quick.png").unlink()
    spec = importlib.util.spec_from_file_location("experiment_aggregation_headroom", script)
    experiment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiment)
    experiment.main(["--quick", "--replot", "--out", str(tmp_path)])
    assert np.array_equal(imread(tmp_path / "aggregation_headroom_quick.png"), drawn)


# ------------------------------------------------------------------ Flower
def _flower_app(side_key="fisher", side=True):
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy() + np.asarray(FLOWER_UPDATES[p], np.float32)
        content = {"arrays": ArrayRecord({"w": Array(w)}), "metrics": MetricRecord({"num-examples": p + 1})}
        if side:
            content[side_key] = ArrayRecord({"w": Array(np.asarray(FLOWER_SIDE[p], np.float32))})
        return Message(RecordDict(content), reply_to=msg)

    return app


FLOWER_UPDATES = {0: [1.0, 3.0, 5.0], 1: [0.0, 3.0, -5.0]}
FLOWER_SIDE = {0: [1.0, 0.0, 2.0], 1: [3.0, 0.0, 0.5]}


def _flower_round(strategy, app):
    from flwr.app import Array, ArrayRecord

    from mianalysis.flower import LocalGrid

    with LocalGrid(app, 2) as grid:
        result = strategy.start(grid, ArrayRecord({"w": Array(np.zeros(3, np.float32))}), num_rounds=1)
    return result.arrays["w"].numpy()


@pytest.mark.parametrize("rule, key, reference", [
    ("fisher", None, lambda x, s, w: fisher_weighted(x, s, weights=w, eps=0)),
    ("inverse_variance", "var", lambda x, s, w: inverse_variance(x, s, weights=w, eps=0)),
])
def test_fedrule_takes_side_information_from_an_extra_array_record(rule, key, reference):
    pytest.importorskip("flwr")
    from mianalysis.flower import FedRule

    got = _flower_round(FedRule(rule, rule_params={"eps": 0.0}, side_key=key, fraction_evaluate=0.0),
                        _flower_app(key or "fisher"))
    x = np.array([FLOWER_UPDATES[0], FLOWER_UPDATES[1]])
    s = np.array([FLOWER_SIDE[0], FLOWER_SIDE[1]])
    np.testing.assert_allclose(got, reference(x, s, np.array([1.0, 2.0])).astype(np.float32), rtol=1e-6)
    if rule == "fisher":  # by hand: (1*1*1 + 2*3*0) / (1 + 6); mean (1*3 + 2*3) / 3; (1*2*5 - 2*0.5*5) / 3
        np.testing.assert_allclose(got, [1 / 7, 3.0, 5 / 3], rtol=1e-6)


def test_fedrule_side_information_errors():
    pytest.importorskip("flwr")
    from mianalysis.flower import FedRule

    with pytest.raises(ValueError, match="the reply of node .* has no ArrayRecord 'fisher'"):
        _flower_round(FedRule("fisher", fraction_evaluate=0.0), _flower_app(side=False))
    with pytest.raises(ValueError, match="`side_key` is only for the rules that need side information"):
        FedRule("fedavg", side_key="fisher")
    with pytest.raises(ValueError, match="`eps` must be a finite number >= 0"):
        FedRule("inverse_variance", rule_params={"eps": -1.0})
