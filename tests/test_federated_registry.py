"""The rule, algorithm and placement registry (mianalysis/federated/registry.py): one entry makes
a rule known to the simulator, the command line and the Flower strategy; placements get what
they need of a run as a RoundContext, not the simulation."""

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mianalysis.federated.placement as placement_module  # noqa: E402
from mianalysis.cli import build_parser, main  # noqa: E402
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation  # noqa: E402
from mianalysis.federated.aggregation import fedavg  # noqa: E402
from mianalysis.federated.partition import partition  # noqa: E402
from mianalysis.federated.placement import RoundContext, step_round, update_round  # noqa: E402
from mianalysis.federated.registry import (  # noqa: E402
    SIDE_INFORMATION, Rule, algorithm_names, get_algorithm, get_placement, get_rule, placement_names, register_rule,
    rule_names, unregister_rule,
)


def scaled_mean(stacked, weights=None, factor=1.0):
    """The weighted mean of the clients' messages times `factor`."""
    return factor * fedavg(stacked, weights=weights)


@pytest.fixture
def toy():
    """A toy rule, registered for one test and removed after it (touching only the registry)."""
    entry = register_rule(name="scaled_mean", function=scaled_mean, display_name="Scaled mean",
                          parameters={"factor": float})
    yield entry
    unregister_rule("scaled_mean")


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    xt = rng.random((20, 8, 8)).astype(np.float32)
    yt = rng.integers(0, 10, 20)
    return FederatedData(x, y, xt, yt, partition(y, 3, "unequal", seed=0))


# ------------------------------------------------------------------ the entries

def test_builtin_rules_record_their_functions_settings():
    assert rule_names() == ("fedavg", "fedsgd", "median", "trimmed_mean", "and_mask", "geometric_mask", "fisher",
                            "inverse_variance", "fisher_full", "newton_merge")
    for name in rule_names():
        entry = get_rule(name)
        # The entry's settings are exactly the function's keywords with defaults (but `weights`).
        signature = inspect.signature(entry.function).parameters.values()
        assert entry.defaults == {p.name: p.default for p in signature
                                  if p.default is not inspect.Parameter.empty and p.name != "weights"}
    assert [(p.name, p.type) for p in get_rule("and_mask").parameters] == [("threshold", float), ("rescale", bool)]
    assert get_rule("trimmed_mean").defaults == {"beta": 0.1}
    assert get_rule("and_mask").display_name == "AND-mask" and get_rule("fedavg").display_name == "FedAvg"
    sides = {n: get_rule(n).side_information for n in rule_names() if get_rule(n).side_information}
    assert sides == {"fisher": "precisions", "inverse_variance": "variances", "fisher_full": "hessians",
                     "newton_merge": ("hessians", "gradients")}
    assert {k: v.record for k, v in SIDE_INFORMATION.items()} == {"precisions": "fisher", "variances": "variances",
                                                                   "hessians": "hessian", "gradients": "gradient"}


def test_algorithms_and_placements_are_entries():
    assert algorithm_names() == ("fedavg", "fedsgd") and placement_names() == ("update", "step")
    assert get_algorithm("fedavg").sends == "update" and get_algorithm("fedsgd").sends == "gradient"
    assert get_placement("update").function is update_round and get_placement("step").function is step_round
    assert get_placement("step").algorithms == ("fedsgd",) and not get_placement("step").records_local_models
    with pytest.raises(ValueError, match="`placement` must be one of 'update', 'step'; got 'server'"):
        get_placement("server")
    with pytest.raises(ValueError, match="`algorithm` must be one of 'fedavg', 'fedsgd'; got 'fedprox'"):
        get_algorithm("fedprox")


@pytest.mark.parametrize("fields, error, match", [
    ({"name": "a b"}, ValueError, "must be an identifier"),
    ({"function": lambda stacked: stacked}, ValueError, "must take `weights`"),
    ({"parameters": {"beta": float}}, ValueError, "parameter 'beta' must be a keyword of `function` with a default"),
    ({"parameters": {"factor": "float"}}, TypeError, "must map each setting's name to its type"),
    ({"side_information": "curvature"}, ValueError,
     "`side_information` must be one of 'gradients', 'hessians', 'precisions', 'variances'"),
    ({"side_information": ("precisions", "precisions")}, ValueError, "must name distinct keys"),
    ({"side_information": "precisions"}, ValueError, "must take its side information `precisions`"),
])
def test_entries_are_checked(fields, error, match):
    with pytest.raises(error, match=match):
        Rule(**{"name": "toy", "function": scaled_mean, "display_name": "Toy", **fields})


def test_registering_twice_and_binding_unknown_settings_are_named(toy):
    with pytest.raises(ValueError, match="rule 'scaled_mean' is registered already"):
        register_rule(toy)
    assert register_rule(toy, replace=True) is toy and rule_names()[-1] == "scaled_mean"
    with pytest.raises(TypeError, match=r"`aggregator_params` \{'beta': 1\} do not fit the aggregator 'scaled_mean': "
                                        r"it takes factor \(float, default 1.0\); got \['beta'\]"):
        toy.bind({"beta": 1})
    with pytest.raises(TypeError, match="it takes no settings"):
        get_rule("median").bind({"beta": 0.1})
    with pytest.raises(TypeError, match="`aggregator_params` must be a dict"):
        toy.bind([0.5])
    np.testing.assert_array_equal(toy.bind({"factor": 0.5})(np.array([[1.0, 2.0], [3.0, 6.0]])), [1.0, 2.0])


# ------------------------------------------------------------------ a toy rule reaches every reader

def test_toy_rule_runs_in_the_simulator(toy, small_data):
    def run(aggregator, **params):
        cfg = FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10, lr=0.1, aggregator=aggregator,
                              aggregator_params=params)
        return FederatedSimulation("mlp", small_data, cfg, replicates=2, seed=1, hidden=8).run(record=True)

    # factor 1 is FedAvg to the bit; factor 0.5 takes half of FedAvg's step from the same local models.
    plain, toy_one, half = run("fedavg"), run("scaled_mean"), run("scaled_mean", factor=0.5)
    assert toy_one.final_params.tobytes() == plain.final_params.tobytes()
    np.testing.assert_array_equal(half.local_models, plain.local_models)
    start, end = plain.global_models[0].astype(np.float64), plain.global_models[1].astype(np.float64)
    np.testing.assert_allclose(half.global_models[1], start + 0.5 * (end - start), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="do not fit the aggregator 'scaled_mean'"):
        FederatedConfig(aggregator="scaled_mean", aggregator_params={"beta": 0.1}).check()


def test_toy_rule_is_a_choice_of_the_command_line(toy, tmp_path, capsys):
    parser = build_parser()
    assert parser.parse_args(["federate", "--aggregator", "scaled_mean", "--out", "x"]).aggregator == "scaled_mean"
    with pytest.raises(SystemExit):
        parser.parse_args(["federate", "--help"])
    assert "newton_merge (eps=1e-08), scaled_mean (factor=1.0)" in " ".join(capsys.readouterr().out.split())
    args = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "1", "--aggregator", "scaled_mean",
            "--param", "factor=0.5", "--out", str(tmp_path / "fl"), "--no-progress"]
    assert main(args) == 0
    assert "round 1: test accuracy" in capsys.readouterr().out


def test_without_the_toy_rule_its_name_is_refused(tmp_path, capsys):
    assert "scaled_mean" not in rule_names()
    assert main(["federate", "--aggregator", "scaled_mean", "--out", str(tmp_path / "fl")]) == 2
    assert "argument --aggregator: invalid choice: 'scaled_mean'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="`aggregator` must be one of 'and_mask', .*; got 'scaled_mean'"):
        FederatedConfig(aggregator="scaled_mean").check()


def test_toy_rule_drives_the_flower_strategy(toy):
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from mianalysis.flower import FedRule, LocalGrid

    updates = {0: [1.0, 3.0, 5.0], 1: [3.0, -1.0, 1.0]}  # equal weights: mean [2, 1, 3]
    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy() + np.asarray(updates[p], np.float32)
        content = RecordDict({"arrays": ArrayRecord({"w": Array(w)}), "metrics": MetricRecord({"num-examples": 4})})
        return Message(content, reply_to=msg)

    strategy = FedRule("scaled_mean", rule_params={"factor": 0.5}, fraction_evaluate=0.0)
    with LocalGrid(app, 2) as grid:
        result = strategy.start(grid, ArrayRecord({"w": Array(np.zeros(3, np.float32))}), num_rounds=1)
    np.testing.assert_array_equal(result.arrays["w"].numpy(), [1.0, 0.5, 1.5])
    with pytest.raises(TypeError, match="do not fit the rule 'scaled_mean'"):
        FedRule("scaled_mean", rule_params={"beta": 0.1})


# ------------------------------------------------------------------ placements without the simulation

def test_placement_module_does_not_import_the_simulation():
    tree = ast.parse(Path(placement_module.__file__).read_text(encoding="utf-8"))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m and "simulation" in m]  # not even for type hints


def _context(**fields):
    """A RoundContext of hand-made parts: two clients whose messages are fixed vectors."""
    messages = {0: torch.tensor([[2.0, 4.0]]), 1: torch.tensor([[4.0, 0.0]])}  # one replicate, two parameters

    def train_client(params, flat, client, replicate_ids, round_index, side=None):
        return messages[client], flat + messages[client], None

    def gradients(flat, x, y):  # the mean of each replicate's minibatch, as a "gradient" of 2 parameters
        return x.mean(1)

    parts = {"lr": 0.5, "local_epochs": 1, "batch_size": 2, "sends": "update", "side_information": None,
             "train_client": train_client,
             "client_examples": lambda c: (torch.arange(4.0).reshape(2, 2) + 10 * c, torch.zeros(2)),
             "data_order_generators": lambda c, reps, t: [torch.Generator().manual_seed(c) for _ in reps],
             "gradients": gradients, "aggregate": get_rule("fedavg").bind()}
    return RoundContext(**{**parts, **fields})


def test_update_round_combines_what_the_context_trains():
    flat = torch.zeros(1, 2)
    new, models, eb = update_round(_context(), {}, flat, np.array([0, 1]), [0], 1, None)
    torch.testing.assert_close(new, torch.tensor([[3.0, 2.0]]))  # + mean update
    assert [m.tolist() for m in models] == [[[2.0, 4.0]], [[4.0, 0.0]]] and len(eb) == 1
    new, _, _ = update_round(_context(sends="gradient"), {}, flat, np.array([0, 1]), [0], 1,
                             torch.tensor([1.0, 3.0], dtype=torch.float64))
    torch.testing.assert_close(new, torch.tensor([[-1.75, -0.5]]))  # - lr * weighted mean [3.5, 1]


def test_step_round_steps_on_the_context_gradients():
    # Batch 2 of 2 examples: one step per epoch, each client's "gradient" the mean of its
    # two examples ([1, 2] and [11, 12]); the step is -lr times their mean [6, 7].
    new, models, eb = step_round(_context(), {}, torch.zeros(1, 2), np.array([0, 1]), [0], 1, None)
    torch.testing.assert_close(new, torch.tensor([[-3.0, -3.5]]))
    assert models is None and np.isnan(eb).all()
