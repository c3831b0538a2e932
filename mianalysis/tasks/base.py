"""What a sampling task provides: data per client, a model as pure batched functions.

A task's model is written over a leading *replica* dimension: every parameter tensor has
shape (R, ...) and every input (R, batch, ...), so that R independent copies (runs x
clients) train as one batched computation. Randomness never happens inside the model:
data order, augmentation and dropout masks are drawn from one ``torch.Generator`` per
replica, seeded from (seed, run, client), so a run's result does not depend on which other
runs share its chunk.

A task names its random streams (:attr:`Task.streams`); the sampler may share any of them
between the clients of a run (``ParameterSampler(shared=...)``): a shared stream draws from
a generator seeded from (seed, run, stream), the same for every client of the run, instead
of the replica's own. The data stream reaches :meth:`Task.client_data` and the mask stream
:meth:`Task.draw_masks` as a :class:`ReplicaGenerators` list.

A task whose loss is convex in the sampled parameters may know each run's exact optimum
theta*, the minimiser of the pooled objective (:meth:`Task.optimum`); the sampler records it
beside the clients with ``ParameterSampler(reference="optimum")``.

The sampler may also train a *central* client per run (``ParameterSampler(reference="central")``):
one replica per run, from the run's start, whose every step is the union of the clients'
batches of that step. A task that draws masks says how the clients' masks make the central
replicas' (:meth:`Task.central_masks`); a task that cannot have one says why
(:meth:`Task.check_central`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import RealSetting

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["LEARNING_RATE", "INIT_MODES", "ReplicaGenerators", "ClientBatchData", "Task", "check_shared", "replica_logits",
           "replica_cross_entropy"]

# How a run's start is drawn: one start per run shared by its clients, or one start for all runs.
INIT_MODES = ("per-run", "fixed")

# The rule for Adam learning rates. Adam moves each parameter by about `lr` per step whatever
# the gradient's scale, so 10 is already far beyond any useful step for these networks (their
# weights are of order 1) while it keeps float32 training clear of overflow: a larger value
# (1e38) is a typo, not a learning rate.
LEARNING_RATE = RealSetting(0, 10, low_open=True, why="Adam moves each parameter by about lr per step")


class ReplicaGenerators(list):
    """One ``torch.Generator`` per replica for one random stream (the replica's own, or the
    run's when the stream is shared), with `run`: the run's generators of that stream, one
    per replica and seeded alike for every client of a run (the same objects as the list
    itself when the stream is shared). A task draws a component common to a run's clients
    from `run` (e.g. gaussian-sgd's correlated gradient noise)."""

    def __init__(self, generators: Iterable[torch.Generator], run: Sequence[torch.Generator]) -> None:
        super().__init__(generators)
        self.run = run

    @property
    def shared(self) -> bool:
        """Whether the stream is shared by the clients of a run (the list is `run` itself)."""
        return len(self) > 0 and all(g is r for g, r in zip(self, self.run))


@dataclass
class ClientBatchData:
    """Training data of R replicas: inputs (R, n_examples, ...), targets (R, n_examples, ...),
    and optional extra tensors used only for evaluation (e.g. a held-out test set)."""

    inputs: Any  # a tensor for the tasks here; a task may use any structure its forward takes
    targets: Any
    extra: dict[str, Any]


class Task(ABC):
    """A model and per-client data, as batched pure functions (see the module docstring)."""

    name = "task"
    presets: dict[str, dict[str, Any]] = {}
    # Every setting's type and allowed range, declared once per task: setting name -> a rule
    # from mianalysis._internal.validation (IntSetting, RealSetting, RangeSetting, FolderSetting).
    setting_rules: dict[str, Any] = {}
    # Random streams the sampler can share between the clients of a run; `data_stream` is
    # the one client_data draws from, `mask_stream` the one draw_masks draws from ("order",
    # the minibatch order, the sampler draws itself).
    streams: tuple[str, ...] = ()
    data_stream: str | None = None
    mask_stream: str | None = None
    # "adam" (Adam as torch.optim.Adam) or "sgd" (plain gradient steps of size lr); see sampling.task_optimizer.
    optimizer = "adam"
    # PyTorch threads the sampler trains a chunk of this task on (ParameterSampler.train_chunk
    # holds them for the chunk and restores the caller's count after); None: the caller's.
    # A task whose batched steps are too small to gain from a second thread sets 1: on a
    # second thread every small operation pays for waking it (and, on a busy machine, for
    # waiting on it), and switching the count costs the operations that follow.
    sampling_threads: int | None = None
    # A sketch (mianalysis.dumps.Sketch) that recorded() applies and the sampler's dump records
    # (ModuleTask's `sketch`); None: the parameters themselves are recorded.
    sketch: Any = None

    def __init__(self, **settings: Any) -> None:
        unknown = set(settings) - set(self.default_settings())
        if unknown:
            raise ValueError(f"unknown setting(s) {sorted(unknown)} for task {self.name!r}; "
                             f"known: {sorted(self.default_settings())}")
        # Every setting is checked against its rule now, before anything is trained or written,
        # and stored as checked (an integer given as 2.0 is stored, and recorded, as 2).
        self.settings = {key: self.setting_rules[key].check(value, f"`{key}` (task {self.name})")
                         for key, value in {**self.default_settings(), **settings}.items()}
        self.check_settings_together()

    def check_settings_together(self) -> None:
        """Checks that involve several settings (each one is already checked on its own).

        A batch larger than the training set is refused rather than clipped: its first batch
        would already be the last, smaller one, so two settings that train identically would
        be recorded differently in a dump's manifest.
        """
        if self.batch_size > self.n_examples:
            raise ValueError(f"`batch_size` (task {self.name}) must be <= the number of training examples per "
                             f"client ({self.n_examples}); got {self.batch_size}: lower `batch_size` or give each "
                             f"client more examples")

    def resume_settings(self, recorded: dict) -> dict:
        """The settings to compare with a dump's recorded task settings `recorded` when the
        sampler resumes it: :attr:`settings`. A task that records measured numbers (the
        module task's fingerprints) compares them itself, to a tolerance, and raises
        ValueError naming what changed."""
        return self.settings

    @classmethod
    def from_preset(cls, preset: str = "paper", **overrides: Any) -> Task:
        """The task with a named preset's settings, then `overrides`."""
        if preset not in cls.presets:
            raise ValueError(f"`preset` must be one of {sorted(cls.presets)} for task {cls.name!r}; got {preset!r}")
        return cls(**{**cls.presets[preset], **overrides})

    @staticmethod
    @abstractmethod
    def default_settings() -> dict[str, Any]:
        """Every setting with its default value (JSON-serialisable)."""

    @property
    def n_clients(self) -> int:
        return int(self.settings["n_clients"])

    @property
    def n_examples(self) -> int:
        """Training examples per client."""
        return int(self.settings["n_examples"])

    @property
    def batch_size(self) -> int:
        return int(self.settings["batch_size"])

    @property
    def lr(self) -> float:
        return float(self.settings["lr"])

    @property
    def epochs(self) -> int:
        """Passes over the data, each in a fresh order (one for the built-in tasks)."""
        return int(self.settings.get("epochs", 1))

    @property
    def n_iterations(self) -> int:
        """Iterations in all epochs (the last batch of an epoch may be smaller)."""
        return self.epochs * -(-self.n_examples // self.batch_size)

    @abstractmethod
    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """[(name, shape)] of the trained tensors, in the order they are flattened."""

    @abstractmethod
    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """A fresh initial point: list of tensors (unbatched), drawn from `generator`."""

    def fixed_params(self) -> list[torch.Tensor]:
        """The initial point used by ``init="fixed"``."""
        import torch

        return self.init_params(torch.Generator().manual_seed(int(self.settings.get("data_seed", 0))))

    @abstractmethod
    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        """ClientBatchData for one client and one generator per replica (drawn in order)."""

    def draw_masks(self, generators: ReplicaGenerators, batch_size: int) -> torch.Tensor | None:
        """Per-iteration random masks (e.g. dropout), or None."""
        return None

    @abstractmethod
    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        """Outputs (R, batch, ...) of batched `params` on `inputs` (R, batch, ...)."""

    @abstractmethod
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-replica mean loss, shape (R,)."""

    def gradients(self, params: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                  masks: torch.Tensor | None = None) -> Sequence[torch.Tensor]:
        """Gradients of the summed per-replica losses with respect to `params` (autograd)."""
        import torch

        return torch.autograd.grad(self.loss(self.forward(params, inputs, masks), targets).sum(), params)

    def check_central(self) -> None:
        """ValueError where the sampler cannot train a central reference client for this task
        (``ParameterSampler(reference="central")``); the built-in tasks other than
        gaussian-sgd can. The default refuses a task that draws masks (:attr:`mask_stream`)
        but does not say how the central client gets them (:meth:`central_masks`)."""
        if self.mask_stream is not None and type(self).central_masks is Task.central_masks:
            raise ValueError(f"task {self.name!r} draws masks (stream {self.mask_stream!r}) but does not say how the "
                             "central client gets them (Task.central_masks): it cannot have `reference`='central'")

    def check_optimum(self) -> None:
        """ValueError where the task cannot give each run's exact optimum theta*
        (``ParameterSampler(reference="optimum")``): a task that does not define :meth:`optimum`."""
        if type(self).optimum is Task.optimum:
            raise ValueError(f"task {self.name!r} does not compute each run's exact optimum theta* (Task.optimum: its "
                             "loss is not convex in the sampled parameters): it cannot have `reference`='optimum'; "
                             "'central' trains the FedSGD reference instead")

    def optimum(self, data_generators: Sequence[ReplicaGenerators]) -> tuple[np.ndarray, np.ndarray]:
        """Each run's theta*, the minimiser of the pooled objective (every client's data with
        the run's draws, the clients weighted by their sizes), and the gradient norm there.

        `data_generators` holds, for every client, fresh generators of its data stream in the
        runs wanted (:meth:`mianalysis.ParameterSampler.data_generators`). Returns theta* of
        shape (n_runs, n_parameters), float64, flattened in :meth:`parameter_shapes` order
        (before :meth:`recorded`), and the gradient norms (n_runs,). Only tasks that know
        theta* define it (see :meth:`check_optimum`).
        """
        raise NotImplementedError(f"task {self.name!r} does not compute each run's exact optimum theta*")

    def central_masks(self, masks: torch.Tensor | None, n_clients: int) -> torch.Tensor | None:
        """The masks of the central replicas at one step, from the clients' `masks` at that
        step (:meth:`draw_masks` for the replicas client-major: client 0's runs, then client
        1's, ...): for every run, the clients' masks of their examples, client by client, in
        the order the union batch holds the examples. None (a task without masks) stays None."""
        if masks is None:
            return None
        raise NotImplementedError(f"task {self.name!r} does not say how the central client gets its masks")

    def recorded(self, params: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """The tensors recorded at a checkpoint (the parameters themselves by default)."""
        return params

    def exact_mi(self, iteration: int, a: int, b: int, *, init: str = "per-run",
                 shared: str | Sequence[str] = ()) -> float | None:
        """The exact MI in bits between clients `a` and `b` after `iteration` iterations, or
        None where the task does not know it (the default)."""
        return None

    metric_names: tuple[str, ...] = ("loss",)

    def evaluate(self, params: Sequence[torch.Tensor], data: ClientBatchData) -> dict[str, torch.Tensor]:
        """Metrics at a checkpoint: dict name -> (R,) tensor; at least "loss", on the first
        `eval_examples` examples of the local data (all of them by default)."""
        m = int(self.settings.get("eval_examples") or self.n_examples)
        return {"loss": self.loss(self.forward(params, data.inputs[:, :m]), data.targets[:, :m])}


def check_shared(shared: str | Iterable[str], task: Task) -> tuple[str, ...]:
    """`shared` as a tuple of the task's stream names, in the task's order; ValueError
    naming the task's streams for an unknown one."""
    if isinstance(shared, str):
        shared = (shared,)
    try:
        shared = tuple(shared)
    except TypeError:
        raise TypeError(f"`shared` must be a sequence of stream names; got {shared!r}") from None
    unknown = [s for s in shared if s not in task.streams]
    if unknown:
        raise ValueError(f"`shared` names streams {unknown} that task {task.name!r} does not have; its streams: "
                         f"{list(task.streams)}")
    return tuple(s for s in task.streams if s in shared)


def replica_logits(params: Sequence[torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
    """A linear layer's logits per replica: ``x W' + b`` for inputs (R, batch, in), weight
    (R, out, in) and bias (R, out) -> (R, batch, out)."""
    import torch

    weight, bias = params
    return torch.einsum("rbi,roi->rbo", inputs, weight) + bias[:, None, :]


def replica_cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per replica of logits (R, batch, classes) and labels (R, batch) -> (R,)."""
    import torch.nn.functional as F

    r, b, c = outputs.shape
    return F.cross_entropy(outputs.reshape(r * b, c), targets.reshape(r * b), reduction="none").reshape(r, b).mean(1)
