"""Where the aggregation rule acts in a round: on what the clients send after local
training ("update"), or on the clients' gradients at every synchronised step ("step").

A placement is a function ``round(context, params, flat, clients, replicate_ids,
round_index, weights)`` returning the new flattened global model (R, P), the clients'
local models (a list of (R, P), or None where the clients never hold a model of their own)
and the EB criterion of the round's messages per replicate. `context` is a
:class:`RoundContext`: the settings and per-client computations a placement uses, handed
over by whoever runs the rounds (:class:`mianalysis.federated.FederatedSimulation` builds
one per run), so a placement knows nothing else of the run. The placements by name, with
what they need of the algorithm, are entries of :mod:`mianalysis.federated.registry`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .diagnostics import eb_criterion

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["RoundContext", "update_round", "step_round", "shuffled_orders"]


def shuffled_orders(n: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """A random order of n examples per generator: (len(generators), n)."""
    import torch

    return torch.stack([torch.randperm(n, generator=g) for g in generators])


@dataclass(frozen=True)
class RoundContext:
    """What a placement receives from the run it serves: settings and per-client computations.

    Tensors carry a leading replicate dimension R; ``(R, P)`` is every replicate's
    flattened model (or message), ``(R, K, P)`` K clients' messages stacked.

    Attributes
    ----------
    lr : float
        The clients' learning rate; with ``sends="gradient"`` also the server's step size.
    local_epochs : int
        E: passes over a client's data per round.
    batch_size : int or None
        B: minibatch size; None is the client's whole data.
    sends : {"update", "gradient"}
        What a client's message is (the algorithm's entry says): a model update, which the
        server adds to the global model after combining, or a gradient, of which the server
        takes one step of `lr`.
    side_information : str, tuple of str or None
        The keyword under which the rule takes each client's side information
        ("precisions", "variances", "hessians"), a tuple of keywords for a rule that takes
        several (("hessians", "gradients")), or None.
    train_client : callable
        ``train_client(params, flat, client, replicate_ids, round_index, side=None) ->
        (message, model, side_array)``: one client's message and local model (R, P) after
        its local training from the global model (`params`: dict of (R, ...) tensors, `flat`
        the same flattened), and with `side` its side information ((R, P), or (R, P, P) for
        "hessians"; a tuple of them, in order, for a tuple of keys; else None).
    client_examples : callable
        ``client_examples(client) -> (x, y)``: the client's training examples, (n, ...) and (n,).
    data_order_generators : callable
        ``data_order_generators(client, replicate_ids, round_index) -> list of
        torch.Generator``: one generator per replicate for the client's data order.
    gradients : callable
        ``gradients(flat, x, y) -> (R, P)``: every replicate's mean-loss gradient at the
        flattened model `flat` (R, P) on its own minibatch x (R, b, ...), y (R, b), flattened.
    aggregate : callable
        ``aggregate(stacked, weights, **side) -> (R, P)``: the rule, with its parameters,
        applied to the clients' messages (R, K, P) (`side`: their side information, stacked
        over the clients in the same way, under the keywords of `side_information`).
    """

    lr: float
    local_epochs: int
    batch_size: int | None
    sends: str
    side_information: str | tuple[str, ...] | None
    train_client: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor | tuple[torch.Tensor, ...] | None]]
    client_examples: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    data_order_generators: Callable[[int, Sequence[int], int], list[torch.Generator]]
    gradients: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    aggregate: Callable[..., torch.Tensor]


def update_round(context: RoundContext, params: Mapping[str, torch.Tensor], flat: torch.Tensor, clients: np.ndarray,
                 replicate_ids: Sequence[int], round_index: int, weights: torch.Tensor | None
                 ) -> tuple[torch.Tensor, list[torch.Tensor], list[float]]:
    """placement="update": every client trains locally from the global model; the rule
    combines what they send (model updates for FedAvg, full-batch gradients for FedSGD)."""
    import torch

    key = context.side_information  # the keyword of the rule's per-client side information, or None
    sent, models, side = [], [], []
    for c in clients:
        message, model, info = context.train_client(params, flat, int(c), replicate_ids, round_index, side=key)
        sent.append(message)
        models.append(model)
        side.append(info)
    stacked = torch.stack(sent, dim=1).double()  # (R, K, P)
    if not torch.isfinite(stacked).all():
        what = "gradient" if context.sends == "gradient" else "model update"
        raise ValueError(f"training diverged in round {round_index}: a client's {what} is not finite; lower "
                         f"`lr` (now {context.lr})")
    eb = [eb_criterion(stacked[i].numpy()) if len(clients) > 1 else np.nan for i in range(stacked.shape[0])]
    if key is None:
        combined = context.aggregate(stacked, weights).float()
    else:
        keys = (key,) if isinstance(key, str) else tuple(key)
        per_client = [(info,) if isinstance(info, torch.Tensor) else tuple(info or ()) for info in side]
        side_info = {k: torch.stack([info[i] for info in per_client], dim=1)  # (R, K, P) or (R, K, P, P)
                     for i, k in enumerate(keys)}
        for k, values in side_info.items():
            if not torch.isfinite(values).all():
                raise ValueError(f"training diverged in round {round_index}: a client's {k} are not finite; "
                                 f"lower `lr` (now {context.lr})")
        combined = context.aggregate(stacked, weights, **side_info).float()
    flat = flat - context.lr * combined if context.sends == "gradient" else flat + combined
    return flat, models, eb


def step_round(context: RoundContext, params: Mapping[str, torch.Tensor], flat: torch.Tensor, clients: np.ndarray,
               replicate_ids: Sequence[int], round_index: int, weights: torch.Tensor | None
               ) -> tuple[torch.Tensor, None, list[float]]:
    """placement="step": the clients take synchronised minibatch steps from one shared
    model; the rule combines their gradients at every step (FedSGD only)."""
    import torch

    data: list[dict[str, Any]] = []  # per client: examples, batch size, generators, current order and position
    for c in clients:
        x, y = context.client_examples(int(c))
        n = x.shape[0]
        b = n if context.batch_size is None else min(context.batch_size, n)
        gens = context.data_order_generators(int(c), replicate_ids, round_index)
        data.append({"x": x, "y": y, "b": b, "gens": gens, "order": None, "pos": 0})
    longest = max(d["x"].shape[0] for d in data)
    b_max = longest if context.batch_size is None else min(context.batch_size, longest)
    n_steps = context.local_epochs * math.ceil(longest / b_max)
    for step in range(n_steps):
        grads = []
        for d in data:
            n = d["x"].shape[0]
            if d["order"] is None or d["pos"] + d["b"] > n:  # a new pass over the client's data
                d["order"] = shuffled_orders(n, d["gens"])
                d["pos"] = 0
            sel = d["order"][:, d["pos"]:d["pos"] + d["b"]]
            d["pos"] += d["b"]
            grads.append(context.gradients(flat, d["x"][sel], d["y"][sel]))
        stacked = torch.stack(grads, dim=1).double()
        if not torch.isfinite(stacked).all():
            raise ValueError(f"training diverged in round {round_index}, step {step + 1}: a client's gradient "
                             f"is not finite; lower `lr` (now {context.lr})")
        flat = flat - context.lr * context.aggregate(stacked, weights).float()
    return flat, None, [np.nan] * len(replicate_ids)
