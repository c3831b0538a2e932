"""Where the aggregation rule acts in a round: on what the clients send after local
training ("update"), or on the clients' gradients at every synchronised step ("step").

Each placement is a small object with one method, ``round(simulation, params, flat,
clients, replicate_ids, round_index, weights)``, returning the new flattened global model
(R, P), the clients' local models (a list of (R, P), or None where the clients never hold
a model of their own) and the EB criterion of the round's messages per replicate. The
simulation (:class:`mianalysis.federated.FederatedSimulation`) provides the per-client
computations through its public methods: :meth:`client_message` (:meth:`train_client`
with the side information of the curvature rules), :meth:`gradients`,
:meth:`data_order_generators`, :meth:`aggregate`, :meth:`flatten` and :meth:`unflatten`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .diagnostics import eb_criterion

if TYPE_CHECKING:  # names used only in type hints
    import torch

    from .simulation import FederatedSimulation

__all__ = ["UpdatePlacement", "StepPlacement", "PLACEMENT_RULES", "shuffled_orders"]


def shuffled_orders(n: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """A random order of n examples per generator: (len(generators), n)."""
    import torch

    return torch.stack([torch.randperm(n, generator=g) for g in generators])


class UpdatePlacement:
    """placement="update": every client trains locally from the global model; the rule
    combines what they send (model updates for FedAvg, full-batch gradients for FedSGD)."""

    name = "update"
    records_local_models = True

    def round(self, simulation: FederatedSimulation, params: Mapping[str, torch.Tensor], flat: torch.Tensor,
              clients: np.ndarray, replicate_ids: Sequence[int], round_index: int, weights: torch.Tensor | None
              ) -> tuple[torch.Tensor, list[torch.Tensor], list[float]]:
        import torch

        cfg = simulation.config
        key = simulation.side_information  # the keyword of the rule's per-client side information, or None
        sent, models, side = [], [], []
        for c in clients:
            message, model, info = simulation.train_client(params, flat, int(c), replicate_ids, round_index, side=key)
            sent.append(message)
            models.append(model)
            side.append(info)
        stacked = torch.stack(sent, dim=1).double()  # (R, K, P)
        if not torch.isfinite(stacked).all():
            what = "gradient" if cfg.algorithm == "fedsgd" else "model update"
            raise ValueError(f"training diverged in round {round_index}: a client's {what} is not finite; lower "
                             f"`lr` (now {cfg.lr})")
        eb = [eb_criterion(stacked[i].numpy()) if len(clients) > 1 else np.nan for i in range(stacked.shape[0])]
        if key is None:
            combined = simulation.aggregate(stacked, weights).float()
        else:
            side_info = torch.stack(side, dim=1)  # (R, K, P)
            if not torch.isfinite(side_info).all():
                raise ValueError(f"training diverged in round {round_index}: a client's {key} are not finite; "
                                 f"lower `lr` (now {cfg.lr})")
            combined = simulation.aggregate(stacked, weights, **{key: side_info}).float()
        flat = flat - cfg.lr * combined if cfg.algorithm == "fedsgd" else flat + combined
        return flat, models, eb


class StepPlacement:
    """placement="step": the clients take synchronised minibatch steps from one shared
    model; the rule combines their gradients at every step (FedSGD only)."""

    name = "step"
    records_local_models = False

    def round(self, simulation: FederatedSimulation, params: Mapping[str, torch.Tensor], flat: torch.Tensor,
              clients: np.ndarray, replicate_ids: Sequence[int], round_index: int, weights: torch.Tensor | None
              ) -> tuple[torch.Tensor, None, list[float]]:
        import torch

        cfg = simulation.config
        data = []
        for c in clients:
            idx = torch.from_numpy(simulation.data.clients[c])
            b = len(idx) if cfg.batch_size is None else min(cfg.batch_size, len(idx))
            gens = simulation.data_order_generators(int(c), replicate_ids, round_index)
            data.append({"x": simulation.x_train[idx], "y": simulation.y_train[idx], "b": b, "gens": gens,
                         "order": None, "pos": 0})
        longest = max(len(simulation.data.clients[c]) for c in clients)
        b_max = longest if cfg.batch_size is None else min(cfg.batch_size, longest)
        n_steps = cfg.local_epochs * math.ceil(longest / b_max)
        for step in range(n_steps):
            step_params = simulation.unflatten(flat)
            grads = []
            for d in data:
                n = d["x"].shape[0]
                if d["order"] is None or d["pos"] + d["b"] > n:  # a new pass over the client's data
                    d["order"] = shuffled_orders(n, d["gens"])
                    d["pos"] = 0
                sel = d["order"][:, d["pos"]:d["pos"] + d["b"]]
                d["pos"] += d["b"]
                grads.append(simulation.flatten(simulation.gradients(step_params, d["x"][sel], d["y"][sel])))
            stacked = torch.stack(grads, dim=1).double()
            if not torch.isfinite(stacked).all():
                raise ValueError(f"training diverged in round {round_index}, step {step + 1}: a client's gradient "
                                 f"is not finite; lower `lr` (now {cfg.lr})")
            flat = flat - cfg.lr * simulation.aggregate(stacked, weights).float()
        return flat, None, [np.nan] * len(replicate_ids)


PLACEMENT_RULES = {"update": UpdatePlacement(), "step": StepPlacement()}
