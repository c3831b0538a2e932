"""Federated learning simulator: rounds, client fraction, local epochs, aggregation rules.

Replicate runs (the same federated run with different seeds) train as one batched
computation: every parameter carries a leading replicate dimension and per-example
gradients come from ``torch.func.vmap(torch.func.grad(...))``. Replicates share the data
partition and the schedule of clients per round (drawn from (seed, round)); they differ in
their initial model (seed, replicate) and each client's data order (seed, replicate,
round, client).

Determinism: the simulator computes on one PyTorch thread (whatever the process's
setting), because a batched matrix product of one replicate split over several threads
sums in another order than the same product inside a batch of replicates. With one thread
a replicate's recorded parameters and metrics are the same bytes for every chunk size and
every thread setting of the process, on a given CPU code path (tested under PyTorch's
``default``, ``avx2`` and native code paths and MKL's compatible and native ones). Runs on
different code paths (another instruction set) agree only to rounding, which training
amplifies.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.seeding import replica_seed
from .._internal.threads import torch_threads
from .._internal.io import progress_bar
from .._internal.validation import check_choice, check_flag, check_int
from .aggregation import check_hessian_size
from .curvature import flat_loss, mean_loss_curvature
from .diagnostics import eb_criterion
from .models import MODELS, build_model
from .data import FederatedData
from .placement import RoundContext, shuffled_orders
from .registry import SIDE_INFORMATION, algorithm_names, get_algorithm, get_placement, get_rule, placement_names

if TYPE_CHECKING:  # names used only in type hints
    import torch

logger = logging.getLogger(__name__)


@dataclass
class SimulationResult:
    """What :meth:`FederatedSimulation.run` returns.

    Attributes
    ----------
    history : list of dict
        Per round (0 = before training) and replicate: round, replicate, train_loss,
        train_accuracy, test_loss, test_accuracy (val_loss and val_accuracy with a
        validation set), and eb_clients -- the EB criterion of the round's client messages
        treated as samples (:mod:`mianalysis.federated.diagnostics`; > 0 when the clients'
        mean update is within their spread).
    final_params : ndarray of shape (R, P)
        The global model after the last round, flattened, one row per replicate run.
    local_models : ndarray of shape (n_clients, rounds + 1, R, P) or None
        With ``record=True``: client ``c``'s model at the end of its local training in round
        ``t`` (``t = 0``: the initial model).
    global_models : ndarray of shape (rounds + 1, R, P) or None
        With ``record=True``: entry ``t`` is the server's model after round ``t``'s
        aggregation, the model broadcast at the start of round ``t + 1`` (entry 0 is the
        initial model). Round ``t``'s local models started from entry ``t - 1``, so client
        ``c``'s update in round ``t`` is ``local_models[c, t] - global_models[t - 1]``.
    client_eb : list of dict
        With ``log_client_eb=True``: rows (round, replicate, client, eb).
    """

    history: list
    final_params: np.ndarray
    local_models: np.ndarray | None = None
    global_models: np.ndarray | None = None
    client_eb: list = field(default_factory=list)


@dataclass
class FederatedConfig:
    """Settings of a federated run.

    Attributes
    ----------
    rounds : int
    client_fraction : float
        C: the fraction of clients that take part in a round (at least one).
    local_epochs : int
        E: passes over the local data per round (FedAvg).
    batch_size : int or None
        B: local minibatch size; None means the full local data set (B = infinity).
    lr : float
        Client learning rate (plain SGD); for FedSGD also the server's step size.
    algorithm : {"fedavg", "fedsgd"}
        FedAvg: clients train E epochs and send their model update; FedSGD: clients send
        one full-batch gradient at the global model and the server takes one step
        (:func:`mianalysis.federated.registry.get_algorithm`).
    aggregator : str
        Rule combining what clients send, a name of
        :func:`mianalysis.federated.registry.rule_names`, e.g. "fedavg", "median",
        "and_mask"; with ``aggregator_params`` (threshold, beta, eps, ...). The
        curvature rules "fisher" and "inverse_variance" (``algorithm="fedavg"``,
        ``placement="update"``) also use what every client computes on its own data at the
        end of its local training in the round: "fisher" its diagonal empirical Fisher (the
        mean over its examples of the squared per-example gradients of the loss at its
        final local model), "inverse_variance" the per-coordinate variance of its local
        iterates over its last local epoch (the model at the start of that epoch and after
        each of its steps, divided by their number). The rule combines the client models
        coordinate by coordinate with those precisions (applied to the updates, the same
        since its weights sum to one per coordinate). The full-curvature rules
        "fisher_full" and "newton_merge" (models of at most
        :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS` parameters) use every
        client's exact Hessian of its own objective (the mean loss over its examples) at its
        final local model, and "newton_merge" also its gradient there
        (:meth:`FederatedSimulation.exact_curvature`); applied to the updates they give the
        same model as applied to the models (their matrix weights sum to the identity).
    weighted : bool
        Weight clients by their numbers of examples.
    placement : {"update", "step"}
        Where the rule is applied. "update": to what clients send at the end of a round
        (model updates for FedAvg, one full-batch gradient each for FedSGD). "step" (needs
        ``algorithm="fedsgd"``): a round is E epochs of synchronised minibatch steps; at
        every step each participating client computes the gradient of one minibatch (B
        examples of its own data, reshuffled every pass) at the shared model, the rule
        combines them and the model takes one step of `lr`. A round has
        E * ceil(max participating client size / B) steps; smaller clients cycle through
        their data more often.
    """

    rounds: int = 50
    client_fraction: float = 0.1
    local_epochs: int = 1
    batch_size: int | None = 10
    lr: float = 0.05
    algorithm: str = "fedavg"
    aggregator: str = "fedavg"
    aggregator_params: dict = field(default_factory=dict)
    weighted: bool = True
    placement: str = "update"

    def check(self) -> FederatedConfig:
        """Raise a ValueError or TypeError naming the setting that is wrong; return the config."""
        self.bound_rule()
        return self

    def bound_rule(self) -> Callable[..., np.ndarray | torch.Tensor]:
        """Check every setting (as :meth:`check`) and return the aggregation rule with
        ``aggregator_params`` bound (:meth:`mianalysis.federated.registry.Rule.bind`)."""
        check_int(self.rounds, "rounds", low=1)
        check_int(self.local_epochs, "local_epochs", low=1)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", low=1)
        if not 0 < self.client_fraction <= 1:
            raise ValueError(f"`client_fraction` must be in (0, 1]; got {self.client_fraction}")
        if not self.lr > 0:
            raise ValueError(f"`lr` must be > 0; got {self.lr}")
        algorithm, placement = get_algorithm(self.algorithm), get_placement(self.placement)
        if placement.algorithms is not None and algorithm.name not in placement.algorithms:
            raise ValueError(f"`placement`={placement.name!r} {placement.description}; set `algorithm`="
                             + " or ".join(repr(a) for a in placement.algorithms))
        check_flag(self.weighted, "weighted")
        rule = get_rule(self.aggregator)
        if rule.side_information is not None and not (algorithm.sends == "update" and placement.side_information):
            local = " or ".join(repr(a) for a in algorithm_names() if get_algorithm(a).sends == "update")
            where = " or ".join(repr(p) for p in placement_names() if get_placement(p).side_information)
            raise ValueError(f"`aggregator`={self.aggregator!r} combines the client models with what each client "
                             f"computes at the end of its local training; it needs `algorithm`={local} and "
                             f"`placement`={where} (got {self.algorithm!r}, {self.placement!r})")
        return rule.bind(self.aggregator_params)

    def updates_per_round(self, n_examples: int) -> float:
        """u = E n / B: local updates per round of a client with `n_examples` (McMahan et al.)."""
        if get_algorithm(self.algorithm).sends == "gradient" and self.placement == "update":
            return 1.0
        steps = 1 if self.batch_size is None else math.ceil(n_examples / self.batch_size)
        return self.local_epochs * steps


class FederatedSimulation:
    """A federated run of `config` on `data` with `model` ("mlp" or "cnn"), repeated over
    `replicates` seeds as one batched computation. `hidden` is the MLP's width (200 is
    McMahan et al.'s 2NN).

    Use :meth:`run` to train; it returns the per-round history and, with ``record=True``,
    every client's local model at every round (checkpoint 0 is the initial model).
    """

    def __init__(self, model: str, data: FederatedData, config: FederatedConfig, *, replicates: int = 1, seed: int = 0,
                 hidden: int = 200) -> None:
        self.model_name = check_choice(model, "model", MODELS)
        self.hidden = check_int(hidden, "hidden", low=1)
        self.data = data
        self.rule = config.bound_rule()  # every setting of the config checked
        self.config = config
        self.replicates = check_int(replicates, "replicates", low=1)
        self.seed = check_int(seed, "seed", low=0)
        #: The entries of the config's algorithm and placement (mianalysis.federated.registry).
        self.algorithm, self.placement = get_algorithm(config.algorithm), get_placement(config.placement)
        #: The keyword of the per-client side information the rule needs ("precisions",
        #: "variances", "hessians"), a tuple of keywords (("hessians", "gradients") for
        #: "newton_merge"), or None.
        self.side_information = get_rule(config.aggregator).side_information
        if "hessians" in get_rule(config.aggregator).side_arguments:  # refused now, not in round 1
            check_hessian_size(sum(int(np.prod(shape)) for _, shape in self.layout()), f"the {model} model")

    # ------------------------------------------------------------------ setup
    def _setup(self, replicate_ids):
        import torch
        from torch.func import functional_call, grad, vmap

        self.module = self._build()
        self.names = [n for n, _ in self.module.named_parameters()]
        self.shapes = [p.shape for _, p in self.module.named_parameters()]
        module = self.module

        def loss_fn(params, x, y):
            logits = functional_call(module, params, (x,))
            return torch.nn.functional.cross_entropy(logits, y)

        def predict(params, x):
            return functional_call(module, params, (x,))

        def example_loss(params, x, y):
            return loss_fn(params, x[None], y[None])

        self._grad = vmap(grad(loss_fn))
        # Per-example gradients of every replicate: params (R, ...), x (n, ...) -> (R, n, ...).
        self._example_grads = vmap(vmap(grad(example_loss), in_dims=(None, 0, 0)), in_dims=(0, None, None))
        self._predict = vmap(predict, in_dims=(0, None))

        def tensor(x):  # images get a channel dimension
            t = torch.from_numpy(np.asarray(x)).float()
            return t.unsqueeze(1) if t.ndim == 3 else t

        self.x_train, self.y_train = tensor(self.data.x_train), torch.from_numpy(self.data.y_train).long()
        self.x_test, self.y_test = tensor(self.data.x_test), torch.from_numpy(self.data.y_test).long()
        self.splits = [("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)]
        if self.data.x_val is not None:
            self.splits.append(("val", tensor(self.data.x_val), torch.from_numpy(self.data.y_val).long()))
        inits = [self._init(r) for r in replicate_ids]
        return {name: torch.stack([init[name] for init in inits]) for name in self.names}

    def _build(self):
        return build_model(self.model_name, self.data.x_train.shape[1:], n_classes=self.data.n_classes,
                           hidden=self.hidden)

    def _init(self, replicate):
        """Initial parameters of one replicate: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) per layer."""
        import torch

        gen = torch.Generator().manual_seed(replica_seed(self.seed, replicate, 0))
        params = {}
        for mod_name, mod in self.module.named_modules():
            if getattr(mod, "weight", None) is None:
                continue
            bound = 1.0 / math.sqrt(mod.weight[0].numel())
            prefix = f"{mod_name}." if mod_name else ""
            for pname in ("weight", "bias"):
                t = getattr(mod, pname)
                params[prefix + pname] = (torch.rand(t.shape, generator=gen) * 2 - 1) * bound
        return params

    def flatten(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Every replicate's parameter tensors (dict of (R, ...)) as one (R, P) tensor."""
        import torch

        return torch.cat([params[n].reshape(params[n].shape[0], -1) for n in self.names], dim=1)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The inverse of :meth:`flatten`: (R, P) -> dict of (R, ...) tensors."""
        out, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            out[name] = flat[:, offset:offset + size].reshape(flat.shape[0], *shape)
            offset += size
        return out

    def layout(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every parameter tensor, in the flattened order."""
        module = self._build()
        return [(n, tuple(p.shape)) for n, p in module.named_parameters()]

    def schedule(self, round_index: int) -> np.ndarray:
        """Indices of the clients taking part in round `round_index` (1-based)."""
        k = max(1, int(round(self.config.client_fraction * self.data.n_clients)))
        rng = np.random.default_rng(replica_seed(self.seed, round_index, 1))
        return np.sort(rng.choice(self.data.n_clients, size=k, replace=False))

    # ------------------------------------------------------------------ training
    def data_order_generators(self, client: int, replicate_ids: Iterable[int], round_index: int
                              ) -> list[torch.Generator]:
        """One generator per replicate for `client`'s data order in a round."""
        import torch

        return [torch.Generator().manual_seed(replica_seed(self.seed, rep, round_index, client + 2))
                for rep in replicate_ids]

    def client_message(self, params: Mapping[str, torch.Tensor], flat_params: torch.Tensor, client: int,
                       replicate_ids: Sequence[int], round_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What one client sends for every replicate: a model update (FedAvg) or a
        full-batch gradient (FedSGD), flattened (R, P); and its local model (R, P)."""
        message, model, _ = self.train_client(params, flat_params, client, replicate_ids, round_index)
        return message, model

    def train_client(self, params: Mapping[str, torch.Tensor], flat_params: torch.Tensor, client: int,
                     replicate_ids: Sequence[int], round_index: int, side: str | tuple[str, ...] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | tuple[torch.Tensor, ...] | None]:
        """:meth:`client_message` and, with `side`, the client's side information, float64,
        computed on its own data at the end of its local training: "precisions" its diagonal
        empirical Fisher at its final local model (:meth:`diagonal_fisher`), "variances" the
        variance of its iterates over its last local epoch (the model at the start of that
        epoch and after each of its steps), both (R, P); "hessians" (R, P, P) and "gradients"
        (R, P) the exact Hessian and gradient of its objective at its final local model
        (:meth:`exact_curvature`). A tuple of keys gives a tuple of arrays in that order;
        None without `side`."""
        import torch

        cfg = self.config
        keys: tuple[str, ...] = () if side is None else (side,) if isinstance(side, str) else tuple(side)
        for key in keys:
            check_choice(key, "side", sorted(SIDE_INFORMATION))
        if keys and self.algorithm.sends != "update":
            raise ValueError("side information is computed from local training; it needs `algorithm`='fedavg'")
        x, y = self.client_examples(client)
        r = len(replicate_ids)
        if self.algorithm.sends == "gradient":
            grads = self._grad(params, x.expand(r, *x.shape), y.expand(r, *y.shape))
            flat_g = self.flatten(grads)
            return flat_g, flat_params - cfg.lr * flat_g, None
        local = {n: t.clone() for n, t in params.items()}
        n = x.shape[0]
        b = n if cfg.batch_size is None else min(cfg.batch_size, n)
        gens = self.data_order_generators(client, replicate_ids, round_index)
        iterates = _RunningVariance() if "variances" in keys else None
        for epoch in range(cfg.local_epochs):
            order = shuffled_orders(n, gens)
            last = iterates if epoch == cfg.local_epochs - 1 else None  # the last epoch's iterates
            if last is not None:
                last.add(self.flatten(local))
            for start in range(0, n, b):
                sel = order[:, start:start + b]
                grads = self._grad(local, x[sel], y[sel])
                with torch.no_grad():
                    for name in self.names:
                        local[name] -= cfg.lr * grads[name]
                if last is not None:
                    last.add(self.flatten(local))
        flat_local = self.flatten(local)
        computed = {}
        if "precisions" in keys:
            computed["precisions"] = self.diagonal_fisher(local, x, y)
        if iterates is not None:  # "variances"
            computed["variances"] = iterates.variance()
        if "hessians" in keys or "gradients" in keys:
            computed["hessians"], computed["gradients"] = self.exact_curvature(local, x, y,
                                                                               hessian="hessians" in keys)
        info = None if side is None else computed[side] if isinstance(side, str) else tuple(computed[k] for k in keys)
        return flat_local - flat_params, flat_local, info

    def exact_curvature(self, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, *,
                        hessian: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The exact Hessian and gradient of every replicate's mean loss over the examples
        x (n, ...), y (n,) at `params` (dict of (R, ...)), in float64 (the parameters and the
        examples cast to float64): (R, P, P) and (R, P) over the flattened model
        (:meth:`flatten`'s order); the Hessian is None with ``hessian=False``.

        ``torch.func.jacfwd`` of ``torch.func.grad``, vmapped over the replicates, the
        examples in chunks (:func:`mianalysis.federated.curvature.mean_loss_curvature`).
        Refuses models above :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS`
        parameters (the Hessian is P x P) with a one-line ValueError."""
        loss = flat_loss(self.module, self.names, self.shapes)
        return mean_loss_curvature(loss, self.flatten(params), x, y, hessian=hessian,
                                   what=f"the {self.model_name} model")

    def diagonal_fisher(self, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                        chunk: int = 256) -> torch.Tensor:
        """The diagonal empirical Fisher of every replicate at `params` (dict of (R, ...)):
        the mean over the examples x (n, ...), y (n,) of the squared per-example gradients
        of the loss, flattened (R, P) float64 (accumulated in float64, `chunk` examples at a
        time)."""
        import torch

        total = None
        for start in range(0, x.shape[0], chunk):
            grads = self._example_grads(params, x[start:start + chunk], y[start:start + chunk])
            part = torch.cat([grads[n].double().square().sum(1).reshape(grads[n].shape[0], -1) for n in self.names],
                             dim=1)
            total = part if total is None else total + part
        return total / x.shape[0]

    def gradients(self, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
                  ) -> dict[str, torch.Tensor]:
        """Mean-loss gradients of every replicate: params (R, ...), x (R, n, ...), y (R, n)."""
        return self._grad(params, x, y)

    def client_examples(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`client`'s training examples: x (n, ...) and y (n,)."""
        import torch

        idx = torch.from_numpy(self.data.clients[client])
        return self.x_train[idx], self.y_train[idx]

    def round_context(self) -> RoundContext:
        """What a placement receives for a round of this run: its settings and the bound
        per-client computations (:class:`~mianalysis.federated.placement.RoundContext`);
        after the run's setup (:meth:`run` makes it)."""
        cfg = self.config
        return RoundContext(
            lr=cfg.lr, local_epochs=cfg.local_epochs, batch_size=cfg.batch_size, sends=self.algorithm.sends,
            side_information=self.side_information, train_client=self.train_client,
            client_examples=self.client_examples, data_order_generators=self.data_order_generators,
            gradients=lambda flat, x, y: self.flatten(self.gradients(self.unflatten(flat), x, y)),
            aggregate=self.aggregate)

    def aggregate(self, stacked: torch.Tensor, weights: torch.Tensor | None = None, **side: torch.Tensor
                  ) -> torch.Tensor:
        """The aggregation rule applied to every replicate's client messages (R, K, P);
        `side`: the clients' side information (R, K, P) for the rules that need it
        (:attr:`side_information` names the keyword)."""
        return self.rule(stacked, weights=weights, **side)

    def per_client_eb(self, params: Mapping[str, torch.Tensor], client: int, max_examples: int = 256) -> np.ndarray:
        """EB criterion of each replicate's per-example gradients of `client` at `params`
        (its first `max_examples` examples): array (R,)."""
        import torch

        idx = torch.from_numpy(np.asarray(self.data.clients[client][:max_examples]))
        if len(idx) < 2:
            return np.full(next(iter(params.values())).shape[0], np.nan)
        grads = self._example_grads(params, self.x_train[idx], self.y_train[idx])
        flat = np.concatenate([grads[n].reshape(*grads[n].shape[:2], -1).numpy() for n in self.names], axis=2)
        return np.array([eb_criterion(f.astype(np.float64)) for f in flat])

    def evaluate(self, params: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """Per-replicate train/test(/val) loss and accuracy of the global model: dict of (R,) arrays."""
        import torch

        out = {}
        with torch.no_grad():
            for split, x, y in self.splits:
                logits = self._predict(params, x)
                r = logits.shape[0]
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.repeat(r), reduction="none").reshape(r, -1).mean(1)
                out[f"{split}_loss"] = loss.numpy()
                out[f"{split}_accuracy"] = (logits.argmax(-1) == y).float().mean(1).numpy()
        return out

    def run(self, *, replicate_ids: Iterable[int] | None = None, record: bool = False, progress: bool = False,
            stop_at_accuracy: float | None = None, log_client_eb: bool = False) -> SimulationResult:
        """Train all rounds, on one PyTorch thread (see the module docstring).

        Parameters
        ----------
        replicate_ids : sequence of int, optional
            Which replicates to run (default ``range(replicates)``).
        record : bool
            Also return every client's local model per round; needs ``client_fraction=1``.
        progress : bool
            A tqdm progress bar over rounds.
        stop_at_accuracy : float, optional
            Stop after the first round whose replicate-mean test accuracy reaches this.
        log_client_eb : bool
            Also compute, at the start of every round, the EB criterion of each
            participating client's per-example gradients at the global model (up to 256
            examples per client); returned as ``client_eb`` rows (round, replicate, client,
            eb).

        Returns
        -------
        SimulationResult
            ``history`` (per round and replicate), ``local_models`` and ``global_models``
            (with ``record=True``), ``final_params`` (the global model after the last
            round) and ``client_eb`` (with ``log_client_eb=True``).
        """
        record, log_client_eb = check_flag(record, "record"), check_flag(log_client_eb, "log_client_eb")
        with torch_threads(1):
            return self._run(replicate_ids, record, progress, stop_at_accuracy, log_client_eb)

    def check_recordable(self) -> FederatedSimulation:
        """Raise a ValueError unless every client's local model can be recorded per round
        (``run(record=True)``, :func:`record_replicates`): all clients every round and
        ``placement="update"``. Recorders call this before they create anything."""
        if self.config.client_fraction < 1:
            raise ValueError("recording every client's model needs `client_fraction` = 1 (all clients every round)")
        if not self.placement.records_local_models:
            raise ValueError("recording local models needs `placement`='update': with 'step' the clients share one "
                             "model throughout the round")
        return self

    def _run(self, replicate_ids, record, progress, stop_at_accuracy, log_client_eb):
        import torch

        cfg = self.config
        replicate_ids = list(range(self.replicates)) if replicate_ids is None else list(replicate_ids)
        if record:
            self.check_recordable()
        params = self._setup(replicate_ids)
        context = self.round_context()
        weights = torch.from_numpy(self.data.sizes().astype(np.float64)) if cfg.weighted else None
        history = []
        client_eb = []
        local_models: np.ndarray | None = None
        global_models: np.ndarray | None = None
        if record:
            flat0 = self.flatten(params).numpy()
            local_models = np.empty((self.data.n_clients, cfg.rounds + 1, len(replicate_ids), flat0.shape[1]),
                                    dtype=np.float32)
            local_models[:, 0] = flat0
            global_models = np.empty((cfg.rounds + 1, len(replicate_ids), flat0.shape[1]), dtype=np.float32)
            global_models[0] = flat0

        def log(round_index):
            metrics = self.evaluate(params)
            for i, rep in enumerate(replicate_ids):
                history.append({"round": round_index, "replicate": rep, **{k: float(v[i]) for k, v in metrics.items()}})

        log(0)
        bar = progress_bar(cfg.rounds, unit="round", desc=f"{cfg.algorithm}/{cfg.aggregator}", enabled=progress)
        for t in range(1, cfg.rounds + 1):
            clients = self.schedule(t)
            flat = self.flatten(params)  # the global model, flattened once per round
            w = None if weights is None else weights[torch.from_numpy(clients)]
            if log_client_eb:
                for c in clients:
                    for rep, value in zip(replicate_ids, self.per_client_eb(params, int(c))):
                        client_eb.append({"round": t, "replicate": rep, "client": int(c), "eb": float(value)})
            flat, models, eb = self.placement.function(context, params, flat, clients, replicate_ids, t, w)
            params = self.unflatten(flat)
            if local_models is not None and global_models is not None:  # made when `record`
                for c, model in zip(clients, models):
                    local_models[c, t] = model.numpy()
                global_models[t] = flat.numpy()
            log(t)
            logger.debug("round %d of %d: clients %s", t, cfg.rounds, clients.tolist())
            for row, value in zip(history[-len(replicate_ids):], eb):
                row["eb_clients"] = float(value)
            bar.update(1)
            if stop_at_accuracy is not None and np.mean([h["test_accuracy"] for h in history[-len(replicate_ids):]]) >= stop_at_accuracy:
                break
        bar.close()
        return SimulationResult(history=history, local_models=local_models, global_models=global_models,
                                final_params=self.flatten(params).numpy(), client_eb=client_eb)

    def describe(self) -> dict[str, Any]:
        """The run's settings; with a curvature rule also what its clients compute and the
        rule's parameters with their defaults filled in."""
        out = {"model": self.model_name, "hidden": self.hidden, "config": asdict(self.config), "seed": self.seed,
               "n_clients": self.data.n_clients, "client_sizes": self.data.sizes().tolist()}
        if self.side_information is not None:
            keys = get_rule(self.config.aggregator).side_arguments
            out["side_information"] = {
                "argument": self.side_information if isinstance(self.side_information, str) else list(keys),
                "computed": "; ".join(SIDE_INFORMATION[key].computed for key in keys),
                "aggregator_params": {**get_rule(self.config.aggregator).defaults, **self.config.aggregator_params}}
        return out


class _RunningVariance:
    """Per-coordinate mean and variance (divided by the count) of (R, P) tensors added one
    at a time, in float64 (Welford's update)."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, None, None

    def add(self, value: torch.Tensor) -> None:
        value = value.double()
        self.count += 1
        if self.mean is None:
            self.mean, self.m2 = value.clone(), value.new_zeros(value.shape)
            return
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    def variance(self) -> torch.Tensor:
        return self.m2 / self.count


def rounds_to_accuracy(history: Iterable[Mapping[str, Any]], target: float, split: str = "test") -> int | None:
    """First round at which the replicate-mean accuracy reaches `target`, or None."""
    by_round: dict[int, list[float]] = {}
    for row in history:
        by_round.setdefault(row["round"], []).append(row[f"{split}_accuracy"])
    for t in sorted(by_round):
        if np.mean(by_round[t]) >= target:
            return t
    return None


__all__ = ["FederatedConfig", "FederatedSimulation", "SimulationResult", "rounds_to_accuracy"]
