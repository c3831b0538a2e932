"""The ClientApp: train the received model on the node's partition, reply with it."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from mianalysis.flower import with_partition_id

from .task import evaluate, load_partition, new_model, train

app = ClientApp()


def _settings(context: Context):
    cfg, node = context.run_config, context.node_config
    return cfg, int(node["partition-id"]), int(node["num-partitions"])


def _received_model(msg: Message, hidden: int):
    model = new_model(hidden)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    return model


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    """One round of local training; the reply says which partition it comes from."""
    cfg, pid, n = _settings(context)
    model = _received_model(msg, int(cfg["hidden"]))
    x, y = load_partition(pid, n, scheme=str(cfg["partition"]), data_seed=int(cfg["data-seed"]))
    loss = train(model, x, y, epochs=int(cfg["local-epochs"]), batch_size=int(cfg["batch-size"]),
                 lr=float(cfg["lr"]), seed=int(cfg["seed"]), server_round=int(msg.content["config"]["server-round"]),
                 partition_id=pid)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"train_loss": loss, "num-examples": len(x)})})
    return Message(with_partition_id(content, context), reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    """The received model's loss and accuracy on the node's own training data."""
    cfg, pid, n = _settings(context)
    model = _received_model(msg, int(cfg["hidden"]))
    x, y = load_partition(pid, n, scheme=str(cfg["partition"]), data_seed=int(cfg["data-seed"]))
    loss, accuracy = evaluate(model, x, y)
    content = RecordDict({"metrics": MetricRecord({"eval_loss": loss, "eval_accuracy": accuracy,
                                                   "num-examples": len(x)})})
    return Message(with_partition_id(content, context), reply_to=msg)
