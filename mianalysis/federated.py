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
from dataclasses import asdict, dataclass, field

import numpy as np

from ._threads import torch_threads
from ._validation import check_choice, check_int
from .aggregation import AGGREGATORS, get_aggregator
from .diagnostics import eb_criterion
from .sampling import replica_seed

ALGORITHMS = ("fedavg", "fedsgd")
PLACEMENTS = ("update", "step")
MODELS = ("mlp", "cnn")

logger = logging.getLogger(__name__)


def build_model(name, input_shape, n_classes=10, hidden=200):
    """The models of McMahan et al. 2017 for one example of shape `input_shape`.

    "mlp": the 2NN, a three-layer network with two hidden layers of `hidden` ReLU units,
    for images (H, W) or feature vectors (d,). "cnn" (square grey images only): two
    convolutions (32 and 64 channels; 5x5 for 28x28 images, 3x3 for smaller ones) each
    followed by 2x2 max pooling, a fully connected ReLU layer (512 units for 28x28, 128
    otherwise) and a linear output.
    """
    from torch import nn

    check_choice(name, "model", MODELS)
    n_inputs = int(np.prod(input_shape))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(n_inputs, hidden), nn.ReLU(),
                             nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))
    if len(input_shape) != 2 or input_shape[0] != input_shape[1]:
        raise ValueError(f"the cnn model needs square images (H, W); got examples of shape {tuple(input_shape)}")
    image_size = input_shape[-1]
    big = image_size >= 28
    k, pad = (5, 2) if big else (3, 1)
    side = image_size // 4
    width = 512 if big else 128
    return nn.Sequential(nn.Conv2d(1, 32, k, padding=pad), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, k, padding=pad), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * side * side, width), nn.ReLU(), nn.Linear(width, n_classes))


@dataclass
class FederatedData:
    """Examples -- images (n, H, W) or feature vectors (n, d) -- and labels of a train and a
    test set, each client's indices into the train set, and optionally a validation set."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    clients: list
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None

    @classmethod
    def digits(cls, n_clients, scheme="iid", *, seed=0, mnist_path=None, **partition_args):
        """Digits (scikit-learn 8x8, or MNIST IDX files) split between `n_clients` clients."""
        from .tasks.digits import load_digit_images
        from .tasks.partition import partition

        xtr, ytr, xte, yte = load_digit_images(mnist_path, seed)
        return cls(xtr, ytr, xte, yte, partition(ytr, n_clients, scheme, seed=seed, **partition_args))

    @classmethod
    def environments(cls, **settings):
        """The synthetic multi-environment task (mianalysis.tasks.environments): training
        environments as clients, validation data from the same environments, test data from
        held-out environments. `settings` go to ``make_environments``."""
        from .tasks.environments import make_environments

        d = make_environments(**settings)
        return cls(d["x_train"], d["y_train"], d["x_test"], d["y_test"], d["clients"], d["x_val"], d["y_val"])

    @property
    def n_clients(self):
        return len(self.clients)

    @property
    def n_classes(self):
        return int(max(self.y_train.max(), self.y_test.max())) + 1

    def sizes(self):
        return np.array([len(c) for c in self.clients])


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
        one full-batch gradient at the global model and the server takes one step.
    aggregator : str
        Rule combining what clients send (see mianalysis.aggregation), e.g. "fedavg",
        "median", "and_mask"; with ``aggregator_params`` (threshold, beta, ...).
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

    def check(self):
        check_int(self.rounds, "rounds", low=1)
        check_int(self.local_epochs, "local_epochs", low=1)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", low=1)
        if not 0 < self.client_fraction <= 1:
            raise ValueError(f"`client_fraction` must be in (0, 1]; got {self.client_fraction}")
        if not self.lr > 0:
            raise ValueError(f"`lr` must be > 0; got {self.lr}")
        check_choice(self.algorithm, "algorithm", ALGORITHMS)
        check_choice(self.placement, "placement", PLACEMENTS)
        if self.placement == "step" and self.algorithm != "fedsgd":
            raise ValueError("`placement`='step' applies the rule to per-client gradients at every step of a "
                             "FedSGD-style round; set `algorithm`='fedsgd'")
        get_aggregator(self.aggregator, **self.aggregator_params)
        return self

    def updates_per_round(self, n_examples):
        """u = E n / B: local updates per round of a client with `n_examples` (McMahan et al.)."""
        if self.algorithm == "fedsgd" and self.placement == "update":
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

    def __init__(self, model, data, config, *, replicates=1, seed=0, hidden=200):
        self.model_name = check_choice(model, "model", MODELS)
        self.hidden = check_int(hidden, "hidden", low=1)
        self.data = data
        self.config = config.check()
        self.replicates = check_int(replicates, "replicates", low=1)
        self.seed = check_int(seed, "seed", low=0)
        self.rule = get_aggregator(config.aggregator, **config.aggregator_params)

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

    def _flat(self, params):
        import torch

        return torch.cat([params[n].reshape(params[n].shape[0], -1) for n in self.names], dim=1)

    def _unflat(self, flat):
        out, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            out[name] = flat[:, offset:offset + size].reshape(flat.shape[0], *shape)
            offset += size
        return out

    def layout(self):
        """(name, shape) of every parameter tensor, in the flattened order."""
        module = self._build()
        return [(n, tuple(p.shape)) for n, p in module.named_parameters()]

    def schedule(self, round_index):
        """Indices of the clients taking part in round `round_index` (1-based)."""
        k = max(1, int(round(self.config.client_fraction * self.data.n_clients)))
        rng = np.random.default_rng(replica_seed(self.seed, round_index, 1))
        return np.sort(rng.choice(self.data.n_clients, size=k, replace=False))

    # ------------------------------------------------------------------ training
    def _data_order_generators(self, client, replicate_ids, round_index):
        """One generator per replicate for `client`'s data order in a round."""
        import torch

        return [torch.Generator().manual_seed(replica_seed(self.seed, rep, round_index, client + 2))
                for rep in replicate_ids]

    def _local(self, params, flat_params, client, replicate_ids, round_index):
        """What one client sends for every replicate: a model update (FedAvg) or a
        full-batch gradient (FedSGD), flattened (R, P); and its local model (R, P)."""
        import torch

        cfg = self.config
        idx = torch.from_numpy(self.data.clients[client])
        x, y = self.x_train[idx], self.y_train[idx]
        r = len(replicate_ids)
        if cfg.algorithm == "fedsgd":
            grads = self._grad(params, x.expand(r, *x.shape), y.expand(r, *y.shape))
            flat_g = self._flat(grads)
            return flat_g, flat_params - cfg.lr * flat_g
        local = {n: t.clone() for n, t in params.items()}
        n = len(idx)
        b = n if cfg.batch_size is None else min(cfg.batch_size, n)
        gens = self._data_order_generators(client, replicate_ids, round_index)
        for _ in range(cfg.local_epochs):
            order = _shuffles(n, gens)
            for start in range(0, n, b):
                sel = order[:, start:start + b]
                grads = self._grad(local, x[sel], y[sel])
                with torch.no_grad():
                    for name in self.names:
                        local[name] -= cfg.lr * grads[name]
        flat_local = self._flat(local)
        return flat_local - flat_params, flat_local

    def _update_round(self, params, flat, clients, replicate_ids, round_index, weights):
        """placement="update": clients train locally, the rule combines what they send.
        Returns the new flattened global model, the clients' local models and the EB
        criterion of the messages per replicate."""
        import torch

        cfg = self.config
        sent, models = [], []
        for c in clients:
            message, model = self._local(params, flat, int(c), replicate_ids, round_index)
            sent.append(message)
            models.append(model)
        stacked = torch.stack(sent, dim=1).double()  # (R, K, P)
        if not torch.isfinite(stacked).all():
            what = "gradient" if cfg.algorithm == "fedsgd" else "model update"
            raise ValueError(f"training diverged in round {round_index}: a client's {what} is not finite; lower "
                             f"`lr` (now {cfg.lr})")
        eb = [eb_criterion(stacked[i].numpy()) if len(clients) > 1 else np.nan for i in range(stacked.shape[0])]
        combined = self.rule(stacked, weights=weights).float()
        flat = flat - cfg.lr * combined if cfg.algorithm == "fedsgd" else flat + combined
        return flat, models, eb

    def _stepwise_round(self, flat, clients, replicate_ids, round_index, weights):
        """placement="step": synchronised minibatch steps, the rule applied to the clients'
        gradients at every step. Returns the new flattened global model (R, P)."""
        import torch

        cfg = self.config
        data = []
        for c in clients:
            idx = torch.from_numpy(self.data.clients[c])
            b = len(idx) if cfg.batch_size is None else min(cfg.batch_size, len(idx))
            gens = self._data_order_generators(int(c), replicate_ids, round_index)
            data.append({"x": self.x_train[idx], "y": self.y_train[idx], "b": b, "gens": gens, "order": None, "pos": 0})
        longest = max(len(self.data.clients[c]) for c in clients)
        b_max = longest if cfg.batch_size is None else min(cfg.batch_size, longest)
        n_steps = cfg.local_epochs * math.ceil(longest / b_max)
        for step in range(n_steps):
            params = self._unflat(flat)
            grads = []
            for d in data:
                n = d["x"].shape[0]
                if d["order"] is None or d["pos"] + d["b"] > n:  # a new pass over the client's data
                    d["order"] = _shuffles(n, d["gens"])
                    d["pos"] = 0
                sel = d["order"][:, d["pos"]:d["pos"] + d["b"]]
                d["pos"] += d["b"]
                grads.append(self._flat(self._grad(params, d["x"][sel], d["y"][sel])))
            stacked = torch.stack(grads, dim=1).double()
            if not torch.isfinite(stacked).all():
                raise ValueError(f"training diverged in round {round_index}, step {step + 1}: a client's gradient "
                                 f"is not finite; lower `lr` (now {cfg.lr})")
            flat = flat - cfg.lr * self.rule(stacked, weights=weights).float()
        return flat

    def per_client_eb(self, params, client, max_examples=256):
        """EB criterion of each replicate's per-example gradients of `client` at `params`
        (its first `max_examples` examples): array (R,)."""
        import torch

        idx = torch.from_numpy(np.asarray(self.data.clients[client][:max_examples]))
        if len(idx) < 2:
            return np.full(next(iter(params.values())).shape[0], np.nan)
        grads = self._example_grads(params, self.x_train[idx], self.y_train[idx])
        flat = np.concatenate([grads[n].reshape(*grads[n].shape[:2], -1).numpy() for n in self.names], axis=2)
        return np.array([eb_criterion(f.astype(np.float64)) for f in flat])

    def evaluate(self, params):
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

    def run(self, *, replicate_ids=None, record=False, progress=False, stop_at_accuracy=None, log_client_eb=False):
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
            examples per client); stored in ``self.client_eb`` as rows (round, replicate,
            client, eb).

        Returns
        -------
        history : list of dict
            Per round (0 = before training) and replicate: round, replicate, train_loss,
            train_accuracy, test_loss, test_accuracy, and eb_clients -- the EB criterion of
            the round's client messages treated as samples (mianalysis.diagnostics; > 0
            when the clients' mean update is within their spread).
        local_models : ndarray (n_clients, rounds + 1, R, P) or None
            Client ``c``'s model at the end of its local training in round ``t`` (``t = 0``:
            the initial model). With ``record=True`` the global models are kept too, in
            ``self.global_models`` (rounds + 1, R, P): entry ``t`` is the server's model after
            round ``t``'s aggregation, the model broadcast at the start of round ``t + 1``
            (entry 0 is the initial model). So round ``t``'s local models started from entry
            ``t - 1``, and client ``c``'s update in round ``t`` is
            ``local_models[c, t] - self.global_models[t - 1]``.
        """
        with torch_threads(1):
            return self._run(replicate_ids, record, progress, stop_at_accuracy, log_client_eb)

    def check_recordable(self):
        """Raise a ValueError unless every client's local model can be recorded per round
        (``run(record=True)``, :func:`record_replicates`): all clients every round and
        ``placement="update"``. Recorders call this before they create anything."""
        if self.config.client_fraction < 1:
            raise ValueError("recording every client's model needs `client_fraction` = 1 (all clients every round)")
        if self.config.placement == "step":
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
        weights = torch.from_numpy(self.data.sizes().astype(np.float64)) if cfg.weighted else None
        history = []
        self.client_eb = []
        local_models = None
        self.global_models = None
        if record:
            flat0 = self._flat(params).numpy()
            local_models = np.empty((self.data.n_clients, cfg.rounds + 1, len(replicate_ids), flat0.shape[1]),
                                    dtype=np.float32)
            local_models[:, 0] = flat0
            global_models = np.empty((cfg.rounds + 1, len(replicate_ids), flat0.shape[1]), dtype=np.float32)
            global_models[0] = flat0
            self.global_models = global_models

        def log(round_index):
            metrics = self.evaluate(params)
            for i, rep in enumerate(replicate_ids):
                history.append({"round": round_index, "replicate": rep, **{k: float(v[i]) for k, v in metrics.items()}})

        log(0)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.rounds, unit="round", desc=f"{cfg.algorithm}/{cfg.aggregator}")
        for t in range(1, cfg.rounds + 1):
            clients = self.schedule(t)
            flat = self._flat(params)  # the global model, flattened once per round
            w = None if weights is None else weights[torch.from_numpy(clients)]
            if log_client_eb:
                for c in clients:
                    for rep, value in zip(replicate_ids, self.per_client_eb(params, int(c))):
                        self.client_eb.append({"round": t, "replicate": rep, "client": int(c), "eb": float(value)})
            if cfg.placement == "step":
                flat = self._stepwise_round(flat, clients, replicate_ids, t, w)
                models, eb = None, [np.nan] * len(replicate_ids)
            else:
                flat, models, eb = self._update_round(params, flat, clients, replicate_ids, t, w)
            params = self._unflat(flat)
            if record:
                for c, model in zip(clients, models):
                    local_models[c, t] = model.numpy()
                global_models[t] = flat.numpy()
            log(t)
            logger.debug("round %d of %d: clients %s", t, cfg.rounds, clients.tolist())
            for row, value in zip(history[-len(replicate_ids):], eb):
                row["eb_clients"] = float(value)
            if bar is not None:
                bar.update(1)
            if stop_at_accuracy is not None and np.mean([h["test_accuracy"] for h in history[-len(replicate_ids):]]) >= stop_at_accuracy:
                break
        if bar is not None:
            bar.close()
        self.final_params = self._flat(params).numpy()  # (R, P): the global model after the last round
        return history, local_models

    def describe(self):
        return {"model": self.model_name, "hidden": self.hidden, "config": asdict(self.config), "seed": self.seed,
                "n_clients": self.data.n_clients, "client_sizes": self.data.sizes().tolist()}


def _shuffles(n, generators):
    """A random order of n examples per generator: (len(generators), n)."""
    import torch

    return torch.stack([torch.randperm(n, generator=g) for g in generators])


def rounds_to_accuracy(history, target, split="test"):
    """First round at which the replicate-mean accuracy reaches `target`, or None."""
    by_round = {}
    for row in history:
        by_round.setdefault(row["round"], []).append(row[f"{split}_accuracy"])
    for t in sorted(by_round):
        if np.mean(by_round[t]) >= target:
            return t
    return None


def record_replicates(simulation, out, *, chunk_size=16, layer=None, progress=True, record_global=False):
    """Run `simulation.replicates` replicates with every client's local model recorded per
    round into a ParameterDump at `out` (checkpoint = round; client = FL client), written
    in chunks of replicates and resumed if `out` holds the same recording. The dump's
    writer lock is held throughout (LockedError if another process is writing `out`).

    Parameters
    ----------
    layer : str or list of str, optional
        Record only these tensors (names as in :meth:`FederatedSimulation.layout`).
    record_global : bool, default=False
        Also record the server's global model, as one more client named ``"global"``
        after the FL clients: at checkpoint ``t`` the model after round ``t``'s aggregation
        (the one broadcast at the start of round ``t + 1``; checkpoint 0 is the initial
        model, which every client holds too). Round ``t``'s local models started from the
        global model at checkpoint ``t - 1``, so a client's update in round ``t`` is its
        checkpoint ``t`` minus the global model's checkpoint ``t - 1``. The dump stays an
        ordinary dump: :func:`mianalysis.analyze` then also gives every client's MI and
        distances with ``"global"``. Its metrics are the global model's (as every client's).

    Returns
    -------
    dump : ParameterDump
    history : list of dict
        The global model's metrics per round and replicate.
    """
    from ._locking import WriterLock
    from .dumps import (ParameterDump, find_nonfinite, layout_columns, layout_from_shapes, select_layout,
                        unwritten_dump_discarded)

    # Everything is checked before the dump is opened or created: a rejected call leaves nothing.
    simulation.check_recordable()
    chunk_size = check_int(chunk_size, "chunk_size", low=1)
    layout = layout_from_shapes(simulation.layout())
    if layer is None:
        cols, rec_layout = slice(None), layout
    else:
        chosen = select_layout(layout, layer)
        cols = layout_columns(chosen)
        rec_layout = layout_from_shapes([(e.name, e.shape) for e in chosen])
    names = ["train_loss", "train_accuracy", "test_loss", "test_accuracy", "eb_clients"]
    if simulation.data.x_val is not None:
        names[2:2] = ["val_loss", "val_accuracy"]
    meta = {"federated": simulation.describe(), "layer": layer, "replicates": simulation.replicates,
            "chunk_size": chunk_size}
    names_out = [str(c) for c in range(simulation.data.n_clients)]
    if record_global:
        meta["global_client"] = "global: the server's model after each round (checkpoint 0: the initial model)"
        names_out.append("global")
    # One recorder per dump, from opening it to its last chunk; failed before its first chunk: no empty dump left.
    with WriterLock(out), unwritten_dump_discarded(out):
        dump = ParameterDump.open_or_create(
            out, meta=meta, clients=names_out,
            checkpoints=list(range(simulation.config.rounds + 1)), n_runs=simulation.replicates,
            layout=rec_layout, metric_names=names,
        )
        for start in range(dump.completed_runs, simulation.replicates, chunk_size):
            stop = min(start + chunk_size, simulation.replicates)
            hist, models = simulation.run(replicate_ids=range(start, stop), record=True, progress=progress)
            values = np.full((len(names), simulation.config.rounds + 1, stop - start), np.nan, dtype=np.float32)
            for row in hist:
                for m, name in enumerate(names):
                    values[m, row["round"], row["replicate"] - start] = row.get(name, np.nan)
            # The simulator checks the clients' updates; these local models are what is stored.
            found = [(where.checkpoint, c, where) for c in range(simulation.data.n_clients) if (where := find_nonfinite(
                models[c][:, :, cols], dump.checkpoints, first_run=start, layout=dump.layout)) is not None]
            if found:
                _, c, where = min(found, key=lambda f: f[:2])
                raise ValueError(
                    f"client {c}'s local model is not finite in round {where.iteration}, "
                    f"{where.runs_text('replicate')}: {where.values_text()}; nothing of "
                    f"replicates {start}-{stop} was written (the dump {out} keeps its {dump.completed_runs} "
                    f"completed replicates); lower `lr` (now {simulation.config.lr})")
            samples = {str(c): models[c][:, :, cols] for c in range(simulation.data.n_clients)}
            if record_global:
                samples["global"] = simulation.global_models[:, :, cols]
            dump.write_chunk(start, stop, samples, {name: values for name in names_out})
    # The history of every replicate, read back from the dump (float32), whether this call
    # ran all chunks or resumed after an interruption.
    recorded = {name: dump.metric("0", name) for name in names}
    history = []
    for rep in range(dump.completed_runs):
        for t in range(simulation.config.rounds + 1):
            row = {"round": t, "replicate": rep}
            row.update({name: float(recorded[name][t, rep]) for name in names
                        if not (name == "eb_clients" and t == 0)})
            history.append(row)
    return dump, history


def write_rows(rows, path):
    """Write a list of dicts with the same keys as CSV."""
    import csv

    if not rows:
        raise ValueError(f"nothing to write to {path}")
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def history_table(history, path):
    """Write per-round metrics, averaged over replicates (with sd), as CSV; returns the rows."""
    keys = [k for k in ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "test_loss", "test_accuracy",
                        "eb_clients") if k in history[0] or k == "eb_clients"]
    rows = []
    for t in sorted({h["round"] for h in history}):
        at = [h for h in history if h["round"] == t]
        row = {"round": t, "replicates": len(at)}
        for k in keys:
            vals = np.array([h.get(k, np.nan) for h in at])
            row[k] = float(vals.mean())
            row[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        rows.append(row)
    write_rows(rows, path)
    return rows


__all__ = ["FederatedConfig", "FederatedData", "FederatedSimulation", "build_model", "record_replicates",
           "rounds_to_accuracy", "history_table", "write_rows", "AGGREGATORS", "PLACEMENTS"]
