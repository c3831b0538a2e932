"""softmax-regression: a federated softmax regression on scikit-learn's digits, with its exact theta*."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import ChoiceSetting, IntSetting, RealSetting
from .base import ClientBatchData, ReplicaGenerators, Task, replica_cross_entropy, replica_logits
from .convex import ConvexMinimum, softmax_optimum
from .datasets import load_digit_images

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["SPLITS", "SoftmaxRegressionTask", "l2_penalty"]

# How the training examples are dealt to the clients (see SoftmaxRegressionTask).
SPLITS = ("iid", "label-skew")
N_CLASSES = 10
N_FEATURES = 64


class SoftmaxRegressionTask(Task):
    """A linear softmax classifier (64 -> 10, 650 parameters) trained by plain SGD: a task whose
    loss is convex in the sampled parameters, so each run's theta* is known exactly.

    Data: scikit-learn's 8x8 digits (embedded, nothing downloaded), pixels scaled to [0, 1]
    and flattened to 64 features; 70 % of the 1797 images are the training pool, 30 % a
    held-out test set (stratified, shuffled by `data_seed`). Each client holds `n_examples`
    examples of the pool, no example held by two clients, dealt once from `data_seed`: the
    federation is fixed by `data_seed` (different seeds, different federations), the same in
    every run. What varies between runs is the start and the data order.

    `split`:

    - "iid": the pool is shuffled (from `data_seed`) and client k takes the k-th block of
      `n_examples`.
    - "label-skew": client k's *own* classes are the digits c with ``c % n_clients == k``
      (with 3 clients: {0, 3, 6, 9}, {1, 4, 7}, {2, 5, 8}). Client by client (0 first), it
      draws ``round(majority * n_examples)`` examples uniformly without replacement from the
      pool's examples of its own classes that no earlier client took, and the rest from
      those of the other classes. With the default `majority` 0.8, 80 % of a client's
      examples are of its 3 or 4 own classes (an IID client has 30-40 % there).

    Objective: every client minimises its own mean cross-entropy plus
    ``(l2 / 2) (||W||^2 + ||b||^2)`` (the bias penalised too, which makes the objective
    strictly convex: :func:`mianalysis.tasks.convex.softmax_objective`); SGD steps of `lr`
    on minibatches of `batch_size`, `epochs` passes each in a fresh order. The federation's
    theta* (:meth:`optimum`) minimises the pooled objective: the mean cross-entropy over
    every client's examples (each client weighted by its size) plus the same L2 term,
    computed in float64 by Newton's method to a gradient norm <= 1e-8.

    Start: weights N(0, 1/64), biases 0 (drawn per run with ``init="per-run"``, one drawn
    from `data_seed` for all runs with ``init="fixed"``). Metrics: "loss", the client's
    objective on its own examples (cross-entropy plus the L2 term), and "accuracy" on the
    held-out test set.

    Defaults: 3 clients of 200 examples, `l2` 0.01, SGD with `lr` 0.5 (the pooled Hessian's
    largest eigenvalue is about 1.1 at the start, so a step is stable), batches of 20 and 10
    epochs (100 steps). Measured on `data_seed` 0: theta* lies about 8.5 from the start, and
    the clients end about three quarters of the way from the start to their own optima
    (distance 8.6 down to 2.2, IID); with ``l2=1e-3`` theta* lies about 16 away and the same
    training covers about a third of the way.
    """

    name = "softmax-regression"
    streams = ("order",)
    optimizer = "sgd"
    metric_names = ("loss", "accuracy")
    # A replica's step is a few small products: a second thread only waits on the first.
    sampling_threads = 1
    presets = {
        "paper": {},  # the defaults (an IID federation)
        "label-skew": {"split": "label-skew"},
    }

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {
            "n_clients": 3,
            "n_examples": 200,
            "split": "iid",
            "majority": 0.8,
            "data_seed": 0,
            "l2": 1e-2,
            "lr": 0.5,
            "batch_size": 20,
            "epochs": 10,
        }

    setting_rules = {
        "n_clients": IntSetting(1),
        "n_examples": IntSetting(1),
        "split": ChoiceSetting(*SPLITS),
        "majority": RealSetting(0, 1),
        "data_seed": IntSetting(0, 2**32 - 1),  # scikit-learn's train/test split takes seeds below 2**32
        "l2": RealSetting(0, 10, low_open=True, why="the L2 term makes the objective strictly convex"),
        "lr": RealSetting(0, 10, low_open=True, why="plain SGD steps of lr times the gradient"),
        "batch_size": IntSetting(1),
        "epochs": IntSetting(1),
    }

    _data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    _indices: list[np.ndarray]
    _optimum: ConvexMinimum | None
    _test: tuple[torch.Tensor, torch.Tensor] | None

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._optimum = None  # theta* of the federation, once computed
        self._test = None

    def check_settings_together(self) -> None:
        """Deals the clients' examples, refusing a federation the pool cannot hold."""
        super().check_settings_together()
        self._data = self._load()
        self._indices = self._deal()

    # ---------------------------------------------------------------- data
    def _load(self):
        xtr, ytr, xte, yte = load_digit_images(None, int(self.settings["data_seed"]))
        return xtr.reshape(len(xtr), -1), ytr, xte.reshape(len(xte), -1), yte

    def _deal(self):
        """Indices into the training pool of every client's examples (see the class docstring)."""
        _, labels, _, _ = self._data
        k, n, seed = self.n_clients, self.n_examples, int(self.settings["data_seed"])
        rng = np.random.default_rng([seed, 51])
        if k * n > len(labels):
            raise ValueError(f"`n_clients` * `n_examples` (task {self.name}) must be <= the {len(labels)} examples of "
                             f"the training pool; got {k} * {n} = {k * n}")
        if self.settings["split"] == "iid":
            order = rng.permutation(len(labels))
            return [np.sort(order[c * n:(c + 1) * n]) for c in range(k)]
        n_own = int(round(float(self.settings["majority"]) * n))
        free = np.ones(len(labels), dtype=bool)
        dealt = []
        for c in range(k):
            own = np.isin(labels, [d for d in range(N_CLASSES) if d % k == c])
            picks = []
            for where, count, what in ((own, n_own, "its own classes"), (~own, n - n_own, "the other classes")):
                pool = np.flatnonzero(where & free)
                if len(pool) < count:
                    raise ValueError(f"split 'label-skew' (task {self.name}): client {c} needs {count} examples of "
                                     f"{what} but the pool has {len(pool)} left: lower `n_examples` or `majority`")
                chosen = rng.choice(pool, size=count, replace=False)
                free[chosen] = False
                picks.append(chosen)
            dealt.append(np.sort(np.concatenate(picks)))
        return dealt

    def client_examples(self, client: int) -> tuple[np.ndarray, np.ndarray]:
        """The client's training examples: features (n_examples, 64) float32 in [0, 1] and
        labels (n_examples,) int64, in the order the client holds them."""
        xtr, ytr, _, _ = self._data
        idx = self._indices[int(client)]
        return xtr[idx], ytr[idx]

    def test_examples(self) -> tuple[np.ndarray, np.ndarray]:
        """The held-out test set: features (n_test, 64) float32 and labels (n_test,) int64."""
        _, _, xte, yte = self._data
        return xte, yte

    # ---------------------------------------------------------------- Task interface
    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("weight", (N_CLASSES, N_FEATURES)), ("bias", (N_CLASSES,))]

    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """Weights N(0, 1/64), biases 0."""
        import torch

        return [torch.randn(N_CLASSES, N_FEATURES, generator=generator) / math.sqrt(N_FEATURES),
                torch.zeros(N_CLASSES)]

    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        """The client's fixed examples for every replica (no random draw), with the test set."""
        import torch

        x, y = (torch.from_numpy(a) for a in self.client_examples(client))
        r = len(generators)
        if self._test is None:
            self._test = tuple(torch.from_numpy(a) for a in self.test_examples())  # type: ignore[assignment]
        return ClientBatchData(x.expand(r, *x.shape), y.expand(r, *y.shape), {"test": self._test})

    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (R, batch, 10): ``x W' + b`` per replica."""
        return replica_logits(params, inputs)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy per replica (the L2 term is added by :meth:`gradients` and :meth:`evaluate`)."""
        return replica_cross_entropy(outputs, targets)

    def gradients(self, params: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                  masks: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The gradient of the batch's mean cross-entropy plus ``(l2 / 2) ||theta||^2``."""
        l2 = float(self.settings["l2"])
        return [g + l2 * p.detach() for g, p in zip(super().gradients(params, inputs, targets, masks), params)]

    def evaluate(self, params: Sequence[torch.Tensor], data: ClientBatchData) -> dict[str, torch.Tensor]:
        """"loss": the objective on the replica's examples; "accuracy": on the test set."""
        test_x, test_y = data.extra["test"]
        logits = self.forward(params, test_x.expand(params[0].shape[0], *test_x.shape))
        accuracy = (logits.argmax(-1) == test_y).float().mean(1)
        loss = self.loss(self.forward(params, data.inputs), data.targets) + l2_penalty(params, self.settings["l2"])
        return {"loss": loss, "accuracy": accuracy}

    # ---------------------------------------------------------------- the federation's optimum
    def pooled_examples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's examples, client by client: features (n_clients * n_examples, 64)
        float32 and labels int64; with equal client sizes their mean objective is the pooled one."""
        parts = [self.client_examples(c) for c in range(self.n_clients)]
        return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])

    def optimum(self, data_generators: Sequence[ReplicaGenerators]) -> tuple[np.ndarray, np.ndarray]:
        """Each run's theta*: the minimiser of the pooled objective (see the class docstring),
        shape (n_runs, 650) (the weight row by row, then the bias), float64, and the gradient
        norm there (n_runs,), <= 1e-8.

        The federation is fixed by `data_seed`, so theta* is the same in every run: it is
        computed once (:func:`mianalysis.tasks.convex.softmax_optimum`) and kept.
        `data_generators` (one list per client, as
        :meth:`mianalysis.ParameterSampler.data_generators` gives them) only say how many runs.
        """
        if len(data_generators) != self.n_clients:
            raise ValueError(f"`data_generators` must hold one list per client ({self.n_clients}); "
                             f"got {len(data_generators)}")
        if self._optimum is None:
            x, y = self.pooled_examples()
            self._optimum = softmax_optimum(x, y, n_classes=N_CLASSES, l2=float(self.settings["l2"]))
        runs = len(data_generators[0])
        found = self._optimum
        return np.tile(found.theta, (runs, 1)), np.full(runs, found.grad_norm)


def l2_penalty(params: Sequence[torch.Tensor], l2: float) -> torch.Tensor:
    """``(l2 / 2) ||theta||^2`` of every replica of batched `params` (each (R, ...)), shape (R,)."""
    import torch

    return 0.5 * float(l2) * torch.cat([p.reshape(p.shape[0], -1) for p in params], 1).pow(2).sum(1)
