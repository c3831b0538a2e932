"""Personalised multi-task federated learning: FedRep and FedGradNorm.

Every client i has its own task, a private head h_i and a copy of a shared body omega
(Collins et al. 2021, FedRep). A round:

1. each client starts from the global body, takes ``tau_h`` minibatch steps on its head
   with the body frozen, then measures its loss F_i on its local data and the norm
   ||grad F_i|| with respect to the body's last layer, then takes ``tau_w`` minibatch
   steps on the body with the head frozen, giving a body update Delta_i;
2. the server updates the loss weights p_i (FedGradNorm, below; FedRep keeps p_i = 1) and
   moves the body by ``(1/N) sum_i p_i Delta_i`` -- for p_i = 1 the plain average of the
   clients' bodies, FedRep's aggregation. Heads are never sent.

FedGradNorm (Mortaheb et al. 2022), on the server, each round k: G_i = p_i ||grad F_i||;
the loss ratio F~_i = F_i(k) / F_i(0) and the relative inverse training rate
r_i = F~_i / mean_j F~_j; the target norm mean_j(G_j) * r_i ** gamma, held constant; the
auxiliary loss F_grad = sum_i |G_i - target_i|, whose gradient in p_i is
sign(G_i - target_i) ||grad F_i||; one Adam step (learning rate alpha) on p, then
renormalisation to sum_i p_i = N (weights are kept >= 1e-3 first). A task that trains
slower than the others (larger r_i) is pushed towards a larger gradient norm, i.e. weight.

Clients train with Adam (learning rate beta), as in the FedGradNorm paper; the heads'
optimiser state persists across rounds, the body's restarts each round from the
broadcast body.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._internal.io import progress_bar
from .._internal.validation import check_choice, check_int

METHODS = ("fedrep", "fedgradnorm")


@dataclass
class PersonalizedConfig:
    """Settings of a personalised run.

    Attributes
    ----------
    rounds : int
    method : {"fedgradnorm", "fedrep"}
    tau_h, tau_w : int
        Local head steps and body steps per round.
    batch_size : int
    beta : float
        Clients' Adam learning rate (2e-4 in the FedGradNorm paper).
    alpha : float
        Server's Adam learning rate for the loss weights (4e-3).
    gamma : float
        Strength of the pull towards a common training rate (0.9).
    hidden, representation : int
        Widths of the body: input -> hidden -> representation, ReLU after each.
    """

    rounds: int = 300
    method: str = "fedgradnorm"
    tau_h: int = 5
    tau_w: int = 5
    batch_size: int = 64
    beta: float = 2e-4
    alpha: float = 4e-3
    gamma: float = 0.9
    hidden: int = 64
    representation: int = 32

    def check(self) -> PersonalizedConfig:
        check_int(self.rounds, "rounds", low=1)
        check_choice(self.method, "method", METHODS)
        for name in ("tau_h", "tau_w", "batch_size", "hidden", "representation"):
            check_int(getattr(self, name), name, low=1)
        for name in ("beta", "alpha"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be > 0; got {getattr(self, name)}")
        if not self.gamma >= 0:
            raise ValueError(f"`gamma` must be >= 0; got {self.gamma}")
        return self


class WeightOptimizer:
    """FedGradNorm's server-side update of the loss weights p (sum p = N), with Adam."""

    def __init__(self, n_clients: int, alpha: float = 4e-3, gamma: float = 0.9,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.p = np.ones(check_int(n_clients, "n_clients", low=1))
        self.alpha, self.gamma, self.betas, self.eps = alpha, gamma, betas, eps
        self.m = np.zeros_like(self.p)
        self.v = np.zeros_like(self.p)
        self.t = 0

    def targets(self, grad_norms: ArrayLike, loss_ratios: ArrayLike) -> np.ndarray:
        """The target norms mean(G) * r_i ** gamma for the current weights."""
        grad_norms, loss_ratios = np.asarray(grad_norms, float), np.asarray(loss_ratios, float)
        r = loss_ratios / loss_ratios.mean()
        return np.mean(self.p * grad_norms) * r ** self.gamma

    def step(self, grad_norms: ArrayLike, loss_ratios: ArrayLike) -> np.ndarray:
        """One update from the clients' ||grad F_i|| (last shared layer) and F_i(k)/F_i(0).

        Returns the new weights (a copy)."""
        grad_norms, loss_ratios = np.asarray(grad_norms, float), np.asarray(loss_ratios, float)
        if grad_norms.shape != self.p.shape or loss_ratios.shape != self.p.shape:
            raise ValueError(f"`grad_norms` and `loss_ratios` need one value per client ({self.p.size}); got "
                             f"shapes {grad_norms.shape} and {loss_ratios.shape}")
        if not (np.all(np.isfinite(grad_norms)) and np.all(np.isfinite(loss_ratios)) and np.all(loss_ratios > 0)):
            raise ValueError("`grad_norms` must be finite and `loss_ratios` finite and > 0")
        target = self.targets(grad_norms, loss_ratios)
        grad = np.sign(self.p * grad_norms - target) * grad_norms  # d/dp_i sum_i |p_i n_i - target_i|
        self.t += 1
        b1, b2 = self.betas
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad ** 2
        m_hat, v_hat = self.m / (1 - b1 ** self.t), self.v / (1 - b2 ** self.t)
        p = np.maximum(self.p - self.alpha * m_hat / (np.sqrt(v_hat) + self.eps), 1e-3)
        self.p = p * p.size / p.sum()
        return self.p.copy()


def build_body(n_inputs, hidden, representation):
    from torch import nn

    return nn.Sequential(nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, representation), nn.ReLU())


class PersonalizedSimulation:
    """A FedRep / FedGradNorm run of `config` on `clients` (mianalysis.federated.multitask).

    Use :meth:`run`; it returns one row per round and client.
    """

    def __init__(self, clients: Sequence[dict[str, Any]], config: PersonalizedConfig, *, seed: int = 0) -> None:
        if not clients:
            raise ValueError("`clients` is empty; give one data set per client")
        self.clients = clients
        self.config = config.check()
        self.seed = check_int(seed, "seed", low=0)

    def _loss(self, client, out, y):
        import torch.nn.functional as F

        return F.mse_loss(out, y) if client["kind"] == "regression" else F.cross_entropy(out, y)

    def _test_metric(self, client, out, y):
        if client["kind"] == "regression":
            return float(((out - y) ** 2).mean())
        return float((out.argmax(1) == y).float().mean())

    def run(self, progress: bool = False) -> list[dict]:
        """Train all rounds.

        Returns
        -------
        list of dict
            Per round (0 = before training) and client: round, client, kind, weight (p_i
            used to aggregate that round), train_loss (F_i after the head steps, the value
            sent to the server), test_loss, test_metric (accuracy, or MSE for regression).
        """
        import torch
        from torch import nn

        cfg = self.config
        torch.manual_seed(self.seed)
        n_inputs = self.clients[0]["x_train"].shape[1]
        body = build_body(n_inputs, cfg.hidden, cfg.representation)
        heads = [nn.Linear(cfg.representation, c["n_outputs"]) for c in self.clients]
        head_opts = [torch.optim.Adam(h.parameters(), lr=cfg.beta) for h in heads]
        data = [{k: torch.from_numpy(c[k]) for k in ("x_train", "y_train", "x_test", "y_test")} for c in self.clients]
        gens = [torch.Generator().manual_seed(self.seed * 1000 + i) for i in range(len(self.clients))]
        last_shared = body[2].weight  # the body's last layer: FedGradNorm's omega-tilde
        weights = WeightOptimizer(len(self.clients), cfg.alpha, cfg.gamma)
        initial_loss = None
        rows = []

        def evaluate(round_index, train_losses):
            with torch.no_grad():
                for i, (c, d) in enumerate(zip(self.clients, data)):
                    out = heads[i](body(d["x_test"]))
                    rows.append({"round": round_index, "client": i, "kind": c["kind"], "weight": float(weights.p[i]),
                                 "train_loss": float(train_losses[i]),
                                 "test_loss": float(self._loss(c, out, d["y_test"])),
                                 "test_metric": self._test_metric(c, out, d["y_test"])})

        with torch.no_grad():
            evaluate(0, [self._loss(c, heads[i](body(d["x_train"])), d["y_train"]) for i, (c, d)
                         in enumerate(zip(self.clients, data))])
        bar = progress_bar(cfg.rounds, unit="round", desc=cfg.method, enabled=progress)
        global_state = {k: v.clone() for k, v in body.state_dict().items()}
        for k in range(1, cfg.rounds + 1):
            deltas, norms, losses = [], [], []
            for i, (c, d) in enumerate(zip(self.clients, data)):
                body.load_state_dict(global_state)
                sample = self._sampler(d["x_train"].shape[0], gens[i])

                def steps(optimizer, frozen, count):
                    """`count` minibatch steps of `optimizer` with the module `frozen` fixed."""
                    for p in frozen.parameters():
                        p.requires_grad_(False)
                    for _ in range(count):
                        idx = next(sample)
                        optimizer.zero_grad()
                        self._loss(c, heads[i](body(d["x_train"][idx])), d["y_train"][idx]).backward()
                        optimizer.step()
                    for p in frozen.parameters():
                        p.requires_grad_(True)

                steps(head_opts[i], body, cfg.tau_h)
                loss = self._loss(c, heads[i](body(d["x_train"])), d["y_train"])
                (g,) = torch.autograd.grad(loss, [last_shared])
                norms.append(float(g.norm()))
                losses.append(loss.item())
                steps(torch.optim.Adam(body.parameters(), lr=cfg.beta), heads[i], cfg.tau_w)
                deltas.append({n: v - global_state[n] for n, v in body.state_dict().items()})
            if not all(np.isfinite(losses)):
                raise ValueError(f"training diverged in round {k}: a client's loss is not finite; lower `beta` "
                                 f"(now {cfg.beta})")
            if initial_loss is None:
                initial_loss = np.array(losses)
            if cfg.method == "fedgradnorm":
                weights.step(norms, np.array(losses) / initial_loss)
            p = weights.p
            global_state = {n: global_state[n] + sum(p[i] * deltas[i][n] for i in range(len(deltas))) / len(deltas)
                            for n in global_state}
            body.load_state_dict(global_state)
            evaluate(k, losses)
            bar.update(1)
        bar.close()
        return rows

    def _sampler(self, n, gen):
        """Endless minibatch indices: reshuffled passes over n examples."""
        import torch

        b = min(self.config.batch_size, n)
        while True:
            order = torch.randperm(n, generator=gen)
            for start in range(0, n - b + 1, b):
                yield order[start:start + b]

    def describe(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "seed": self.seed,
                "clients": [{"kind": c["kind"], "n_outputs": c["n_outputs"], "n_train": len(c["y_train"])}
                            for c in self.clients]}


__all__ = ["PersonalizedConfig", "PersonalizedSimulation", "WeightOptimizer", "METHODS"]
