"""The ServerApp: FedRule with the run config's aggregation rule, the test set evaluated centrally."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from mianalysis.flower import FedRule, record_deployment

from .task import evaluate, initial_model, load_test, new_model

app = ServerApp()

# The rule's settings a run config may hold (Flower config keys use dashes).
RULE_SETTINGS = {"and_mask": ("threshold",), "geometric_mask": ("threshold",), "trimmed_mean": ("beta",)}


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train for ``num-server-rounds`` rounds with every node in every round."""
    cfg = context.run_config
    rule = str(cfg["rule"])
    params = {name: float(cfg[name]) for name in RULE_SETTINGS.get(rule, ()) if name in cfg}
    n_nodes = len(list(grid.get_node_ids()))
    fraction_evaluate = float(cfg["fraction-evaluate"])
    strategy = FedRule(rule, rule_params=params, fraction_train=1.0, fraction_evaluate=fraction_evaluate,
                       min_train_nodes=n_nodes, min_evaluate_nodes=1 if fraction_evaluate > 0 else 0,
                       min_available_nodes=n_nodes)
    hidden = int(cfg["hidden"])
    x_test, y_test = load_test(data_seed=int(cfg["data-seed"]))

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model = new_model(hidden)
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = evaluate(model, x_test, y_test)
        return MetricRecord({"test_loss": loss, "test_accuracy": accuracy})

    rounds = int(cfg["num-server-rounds"])
    # In a deployment, `flwr run --run-config 'mianalysis.dump="/abs/dump" mianalysis.run=r ...'`
    # records this run as run r of that dump; otherwise (and under record_runs) this is `grid`.
    with record_deployment(grid, context, rounds=rounds, meta={"example": "examples/flower (digits)"}) as grid:
        strategy.start(grid, ArrayRecord(initial_model(int(cfg["seed"]), hidden).state_dict()),
                       num_rounds=rounds, train_config=ConfigRecord(), evaluate_fn=central_evaluate)
