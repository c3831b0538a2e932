"""The digits task of the Flower example: data partitions, model, local training, evaluation.

The data and model are mianalysis's own (``FederatedData.digits``, ``build_model``): the
8x8 scikit-learn digits split 70/30, the training part divided between clients as the
simulator divides it, and McMahan et al.'s 2NN (two hidden ReLU layers). Everything random
is drawn from the run's seed: the initial model from (seed, 0), a client's data order in a
round from (seed, round, partition id + 2).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from mianalysis.federated import FederatedData, build_model
from mianalysis.sampling import replica_seed

IMAGE_SHAPE = (8, 8)

# The run config (Flower's keys use dashes); pyproject.toml's [tool.flwr.app.config] holds the same.
DEFAULT_CONFIG = {
    "num-server-rounds": 5,  # training rounds
    "rule": "and_mask",  # a mianalysis.federated.aggregation rule
    "threshold": 0.5,  # the masks' sign-agreement threshold
    "beta": 0.1,  # trimmed_mean's trimmed fraction at each end
    "local-epochs": 1,
    "batch-size": 10,
    "lr": 0.05,
    "hidden": 32,  # width of the 2NN's two hidden layers
    "partition": "iid",  # how the training digits are split: iid, shards, dirichlet, unequal
    "data-seed": 0,  # the train/test split and the partition: the same in every run
    "fraction-evaluate": 1.0,  # clients evaluating the global model on their own data after each round (0: none)
    "seed": 0,  # the run's seed: initial model and data order
}


@lru_cache(maxsize=4)
def federated_digits(num_partitions: int, scheme: str, data_seed: int) -> FederatedData:
    """The digits train/test split and every client's indices (the same in every run)."""
    return FederatedData.digits(num_partitions, scheme, seed=data_seed)


def load_partition(partition_id: int, num_partitions: int, *, scheme: str = "iid", data_seed: int = 0):
    """(x, y) tensors of one client's training examples."""
    data = federated_digits(num_partitions, scheme, data_seed)
    idx = data.clients[partition_id]
    return torch.from_numpy(data.x_train[idx]), torch.from_numpy(data.y_train[idx]).long()


def load_test(*, data_seed: int = 0):
    """(x, y) tensors of the held-out test set (the same for any partition)."""
    data = federated_digits(1, "iid", data_seed)
    return torch.from_numpy(data.x_test), torch.from_numpy(data.y_test).long()


def new_model(hidden: int) -> torch.nn.Module:
    """The 2NN for 8x8 images (64 -> hidden -> hidden -> 10)."""
    return build_model("mlp", IMAGE_SHAPE, n_classes=10, hidden=hidden)


def initial_model(seed: int, hidden: int) -> torch.nn.Module:
    """The run's initial global model: PyTorch's default initialisation drawn from (seed, 0)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(replica_seed(seed, 0))
        return new_model(hidden)


def train(model: torch.nn.Module, x, y, *, epochs: int, batch_size: int, lr: float, seed: int,
          server_round: int, partition_id: int) -> float:
    """Plain minibatch SGD on the client's data; returns the mean training loss."""
    generator = torch.Generator().manual_seed(replica_seed(seed, server_round, partition_id + 2))
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            batch = order[start:start + batch_size]
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
    return float(np.mean(losses))


def evaluate(model: torch.nn.Module, x, y) -> tuple[float, float]:
    """(loss, accuracy) of `model` on (x, y)."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
        return (float(torch.nn.functional.cross_entropy(logits, y)),
                float((logits.argmax(1) == y).float().mean()))
