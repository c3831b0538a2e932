"""module: any ``torch.nn.Module`` as a sampling task, its replicas batched with ``torch.func``.

A :class:`ModuleTask` turns a model factory, per-client data and a loss into a
:class:`~mianalysis.tasks.base.Task` that :class:`mianalysis.ParameterSampler` trains like
the built-in tasks: every trainable parameter gets a leading replica dimension (runs x
clients, as ``torch.func.stack_module_state`` would build it) and one step of all replicas
is ``torch.func.vmap(torch.func.grad(loss of torch.func.functional_call(model, ...)))``.

From the command line the task is named by an import path to a function that takes no
arguments and returns a :class:`ModuleSpec`::

    mianalysis sample --task module --set factory=mypackage.models:spec --set lr=0.01 \\
        --runs 200 --out runs/mine

The dump's manifest records the import path, the training settings and digests of the
data and of the model, so that a dump is resumed only by the same task.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import numbers
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from .._validation import ChoiceSetting, IntSetting
from .base import LEARNING_RATE, ClientBatchData, ReplicaGenerators, Task

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["ModuleSpec", "ModuleTask", "load_factory"]

# Modules whose training draws random numbers, by the attribute that switches it on.
_RANDOM_ATTRIBUTES = ("p", "dropout")


@dataclass
class ModuleSpec:
    """A model, per-client data and a loss: what a factory named by an import path returns.

    Parameters
    ----------
    model : callable
        Called with no arguments, returns a ``torch.nn.Module`` (an ``nn.Module`` class
        with no required arguments will do). Its forward takes one batch of inputs.
    data : sequence
        One entry per client: a pair ``(inputs, targets)`` of tensors or arrays with the
        examples along the first dimension, or a ``torch.utils.data.Dataset`` whose items
        are ``(input, target)`` pairs.
    loss : callable
        ``loss(outputs, targets)`` -> the mean loss over the batch, a scalar tensor (e.g.
        ``torch.nn.functional.cross_entropy``).
    init : callable, optional
        ``init(model, generator)`` sets the model's trainable parameters in place, drawing
        every random number from the ``torch.Generator`` it is given (one per run). None:
        the factory's own initialisation (see :class:`ModuleTask`).
    """

    model: Callable[[], Any]
    data: Sequence[Any]
    loss: Callable[[Any, Any], Any]
    init: Optional[Callable[[Any, Any], None]] = None


class _NamesSetting:
    """None (every trainable parameter), or a non-empty list of names (strings)."""

    def describe(self):
        return "None or a non-empty list of parameter names"

    def check(self, value, label):
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{label} must be {self.describe()}; got {value!r}")
        return list(value)


class ModuleTask(Task):
    """Any ``torch.nn.Module`` trained on each client's data, as a sampling task.

    Parameters
    ----------
    model : callable
        Called with no arguments, returns a ``torch.nn.Module`` (on the CPU, floating-point
        parameters). It is called once when the task is built, under PyTorch's CPU random
        generator seeded with 0 (and restored after), for the architecture: the names and
        shapes of the trainable parameters (those with ``requires_grad``) and the
        constants (frozen parameters and buffers), which every run shares.
    data : sequence of (inputs, targets) or of torch.utils.data.Dataset
        One entry per client. Every client must hold the same number of examples (the
        replicas train as one batch) with inputs and targets of the same shapes and dtypes.
        Floating-point inputs and targets are converted to the model's parameter dtype
        (float32 for a default model); integer targets (class labels) are kept.
    loss : callable
        ``loss(outputs, targets)`` -> the mean loss over the batch, one number.
    init : callable, optional
        ``init(model, generator)``: draw a run's initial trainable parameters in place from
        `generator` (see Notes). None: the factory's own initialisation.
    optimizer : {"adam", "sgd"}, default="adam"
        ``torch.optim.Adam`` with its defaults, or plain gradient steps of size `lr`
        (``torch.optim.SGD``). No momentum, weight decay or schedules.
    lr : float, default=1e-3
    batch_size : int, default=32
        At most the number of examples per client.
    epochs : int, default=1
        Each epoch visits every example once in a fresh order; the last batch of an epoch
        may be smaller.
    record : str or list of str, optional
        The tensors written to the dump: trainable parameter names, or prefixes of names
        ("head" selects "head.weight" and "head.bias"), kept in the model's order. Default
        every trainable parameter. All trainable parameters are trained either way.
    eval_examples : int, optional
        The "loss" metric at each checkpoint is the loss on the client's first
        `eval_examples` examples (all when None), with the model in eval mode.

    Notes
    -----
    **Initial parameters.** A run's initial point comes from the sampler's generator of
    that run (seed, run), so it does not depend on the chunk the run trains in. With
    ``init=None`` one number drawn from that generator seeds PyTorch's CPU random
    generator while the factory is called again (the generator's state is restored
    after): the run starts from the model's own initialisation (``reset_parameters`` of
    every layer) under that seed. With `init`, a copy of the architecture is given to
    ``init(model, generator)``, which must draw from `generator` only. The sampler's
    ``init="fixed"`` is the point a generator seeded with 0 gives.

    **Randomness.** Minibatch order is the sampler's "order" stream, per (seed, run,
    client) or shared by a run's clients (``shared=("order",)``). Randomness inside the
    model is refused: ``torch.func.vmap`` cannot draw one seeded stream per replica, so a
    model with dropout (an ``nn.Dropout`` or a module with a ``dropout`` rate above 0) or
    any random operation in training is a ValueError naming it; set its rate to 0.

    **Buffers.** Buffers are constants shared by every replica. A layer that updates
    buffers in training (BatchNorm with running statistics) is a ValueError naming it:
    use ``track_running_stats=False`` (batch statistics, per replica) or a GroupNorm or
    LayerNorm.

    **Determinism.** Every step is one ``vmap`` over the replicas, whose kernels compute
    each replica apart (batched matrix products and grouped convolutions), so a run's
    samples are the same bytes for any chunk size on one CPU code path (the sampler never
    trains a batch of one replica); ``tests/test_module_task.py`` checks chunk sizes 1, 2
    and 5.

    The dump records ``factory`` (the import path, when built by :meth:`from_factory`),
    the qualified names of the model factory, loss and init, the number of clients and
    examples, the training settings and SHA-256 digests of the data and of the
    architecture and constants: a dump is resumed only by the same task.

    Examples
    --------
    >>> import torch
    >>> from mianalysis.tasks import ModuleTask
    >>> x = torch.linspace(-1, 1, 16)[:, None]
    >>> data = [(x, 2 * x), (x, -x)]  # two clients, 16 examples each
    >>> task = ModuleTask(lambda: torch.nn.Linear(1, 1), data, torch.nn.functional.mse_loss,
    ...                   lr=0.1, batch_size=8)
    >>> task.parameter_shapes(), task.n_iterations
    ([('weight', (1, 1)), ('bias', (1,))], 2)
    """

    name = "module"
    streams = ("order",)
    presets = {"paper": {}}
    setting_rules = {
        "optimizer": ChoiceSetting("adam", "sgd"),
        "lr": LEARNING_RATE,
        "batch_size": IntSetting(1),
        "epochs": IntSetting(1),
        "record": _NamesSetting(),
        "eval_examples": IntSetting(1, optional=True),
    }

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {"optimizer": "adam", "lr": 1e-3, "batch_size": 32, "epochs": 1, "record": None,
                "eval_examples": None}

    def __init__(self, model: Callable[[], torch.nn.Module], data: Sequence[Any],
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 init: Callable[[torch.nn.Module, torch.Generator], None] | None = None, optimizer: str = "adam",
                 lr: float = 1e-3, batch_size: int = 32, epochs: int = 1, record: str | Sequence[str] | None = None,
                 eval_examples: int | None = None, **unknown: Any) -> None:
        for what, fn in (("model", model), ("loss", loss)):
            if not callable(fn):
                raise TypeError(f"`{what}` (task module) must be callable; got {fn!r}")
        if init is not None and not callable(init):
            raise TypeError(f"`init` (task module) must be None or callable (model, generator); got {init!r}")
        self._factory, self._loss_fn, self._init_fn = model, loss, init
        self._reference = self._build(0)
        named = list(self._reference.named_parameters())
        self._names = [n for n, p in named if p.requires_grad]
        if not self._names:
            raise ValueError("the model (task module) has no trainable parameters (requires_grad)")
        self._shapes = {n: tuple(p.shape) for n, p in named}
        dtype = named[0][1].dtype
        self._inputs, self._targets = _client_tensors(data, dtype)
        super().__init__(optimizer=optimizer, lr=lr, batch_size=batch_size, epochs=epochs, record=record,
                         eval_examples=eval_examples, **unknown)  # an unknown setting is refused there
        self.optimizer = self.settings["optimizer"]
        self._kept = _select(self._names, self.settings["record"])
        self._refuse_randomness_and_running_stats()
        self.settings.update({
            "factory": None,
            "model": _qualified(model), "loss": _qualified(loss), "init": None if init is None else _qualified(init),
            "n_clients": len(self._inputs), "n_examples": int(self._inputs[0].shape[0]),
            "data_sha256": _data_digest(self._inputs, self._targets), "model_sha256": self._model_digest(),
        })
        self._batched = None
        self._probe()

    @classmethod
    def from_factory(cls, factory: str, **settings: Any) -> ModuleTask:
        """The task of the :class:`ModuleSpec` that the function at import path `factory`
        returns, with training `settings`; the dump records `factory`.

        Parameters
        ----------
        factory : str
            ``"package.module:function"``: a function of no arguments returning a
            :class:`ModuleSpec`. The module is imported from ``sys.path`` or, failing
            that, from the current folder.
        **settings
            optimizer, lr, batch_size, epochs, record, eval_examples (see the class).

        Raises
        ------
        ValueError
            If the path is malformed, does not import, names nothing callable, or the
            function raises; the message names the path.
        TypeError
            If the function does not return a :class:`ModuleSpec`.
        """
        function = load_factory(factory)
        try:
            with _current_folder_importable():
                spec = function()
        except Exception as exc:
            raise ValueError(f"`factory` {factory!r} failed: {_one_line(exc)}") from exc
        if not isinstance(spec, ModuleSpec):
            raise TypeError(f"`factory` {factory!r} must return a mianalysis.tasks.ModuleSpec; got "
                            f"{type(spec).__name__}")
        task = cls(spec.model, spec.data, spec.loss, init=spec.init, **settings)
        task.settings["factory"] = factory
        return task

    @classmethod
    def from_preset(cls, preset: str = "paper", **overrides: Any) -> ModuleTask:
        """The task of ``overrides["factory"]`` (an import path, see :meth:`from_factory`)
        with the other `overrides` as settings; the command line builds it so."""
        if preset not in cls.presets:
            raise ValueError(f"`preset` must be one of {sorted(cls.presets)} for task {cls.name!r}; got {preset!r}")
        factory = overrides.pop("factory", None)
        if factory is None:
            raise ValueError("task 'module' needs `factory`: an import path 'package.module:function' to a "
                             "function returning a mianalysis.tasks.ModuleSpec (--set factory=package.module:function)")
        return cls.from_factory(factory, **overrides)

    # ---------------------------------------------------------------- the model
    def _build(self, seed):
        """A fresh model from the factory, called under PyTorch's CPU generator seeded with
        `seed` (its state restored after)."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(int(seed))
            model = self._factory()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"`model` (task module) must return a torch.nn.Module; got {type(model).__name__}")
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if p.device.type != "cpu":
                raise ValueError(f"the model's tensor {name!r} is on {p.device}; the sampler trains on the CPU")
        for name, p in model.named_parameters():
            if not p.dtype.is_floating_point:
                raise ValueError(f"the model's parameter {name!r} has dtype {p.dtype}; parameters must be floating point")
        return model

    def _refuse_randomness_and_running_stats(self):
        """ValueError naming a submodule that draws random numbers or updates buffers in
        training (see the class Notes)."""
        for name, module in self._reference.named_modules():
            label = f"{name or 'the model'} ({type(module).__name__})"
            for attr in _RANDOM_ATTRIBUTES:
                rate = getattr(module, attr, None)
                if ("Dropout" in type(module).__name__ or attr == "dropout") and isinstance(rate, numbers.Real) \
                        and not isinstance(rate, bool) and rate > 0:
                    raise ValueError(
                        f"the model's module {label} has dropout {attr}={rate}: randomness inside the model is not "
                        "supported (torch.func.vmap cannot give each replica its own seeded stream); set it to 0")
            if getattr(module, "track_running_stats", False) and getattr(module, "running_mean", None) is not None:
                raise ValueError(
                    f"the model's module {label} updates running statistics (buffers) in training, which the "
                    "replicas cannot share; use track_running_stats=False, or GroupNorm / LayerNorm")

    def _model_digest(self):
        h = hashlib.sha256(str(self._reference).encode())
        for name, t in list(self._reference.named_parameters()) + list(self._reference.named_buffers()):
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}:{t.requires_grad}".encode())
            if not t.requires_grad:  # constants every run shares
                h.update(t.detach().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def _functions(self):
        """(gradient, forward, loss), each vmapped over the replica dimension."""
        if self._batched is None:
            from torch.func import functional_call, grad, vmap

            module, loss = self._reference, self._loss_fn

            def one_loss(params, x, y):
                return loss(functional_call(module, params, (x,)), y)

            def one_forward(params, x):
                return functional_call(module, params, (x,))

            self._batched = (vmap(grad(one_loss)), vmap(one_forward), vmap(loss))
        return self._batched

    def _as_dict(self, params):
        return {n: p.detach() for n, p in zip(self._names, params)}

    @contextmanager
    def _mode(self, training):
        before = self._reference.training
        self._reference.train(training)
        try:
            yield
        finally:
            self._reference.train(before)

    def _probe(self):
        """Train two replicas one step on two examples of client 0: a model that does not
        fit the data, draws random numbers or writes its buffers fails here, by name."""
        import torch

        x, y = self._inputs[0][:2], self._targets[0][:2]
        params = [torch.stack([p, p]) for p in self.init_params(torch.Generator().manual_seed(0))]
        before = [b.clone() for b in self._reference.buffers()]
        xs, ys = torch.stack([x, x]), torch.stack([y, y])
        what = (f"client 0's examples (inputs {tuple(x.shape[1:])} {x.dtype}, targets {tuple(y.shape[1:])} "
                f"{y.dtype})")
        try:
            with torch.no_grad():
                losses = self.loss(self.forward(params, xs), ys)
            if tuple(losses.shape) != (2,):
                raise ValueError(f"the loss must return one number, the mean over the batch; got a tensor of shape "
                                 f"{tuple(losses.shape[1:])}")
            self.gradients(params, xs, ys)
        except ValueError:
            raise
        except RuntimeError as exc:
            if "random" in str(exc).lower():
                raise ValueError(f"the model calls a random operation in training, which is not supported (each "
                                 f"replica would need its own seeded stream): {_one_line(exc)}") from exc
            raise ValueError(f"the model and loss cannot train on {what}: {_one_line(exc)}") from exc
        except Exception as exc:
            raise ValueError(f"the model and loss cannot train on {what}: {_one_line(exc)}") from exc
        for (name, b), old in zip(self._reference.named_buffers(), before):
            if not torch.equal(b, old):
                raise ValueError(f"the model changes its buffer {name!r} in training, which the replicas cannot share")

    # ---------------------------------------------------------------- Task interface
    @property
    def n_clients(self) -> int:
        return len(self._inputs)

    @property
    def n_examples(self) -> int:
        return int(self._inputs[0].shape[0])

    def check_settings_together(self) -> None:
        super().check_settings_together()
        m = self.settings["eval_examples"]
        if m is not None and m > self.n_examples:
            raise ValueError(f"`eval_examples` (task {self.name}) must be None (all examples) or <= the number of "
                             f"examples per client ({self.n_examples}); got {m}")

    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """[(name, shape)] of the recorded parameters (`record`), in the model's order."""
        return [(self._names[i], self._shapes[self._names[i]]) for i in self._kept]

    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """A run's initial trainable parameters, drawn from `generator` (see the Notes)."""
        import torch

        if self._init_fn is None:
            model = self._build(int(torch.randint(0, 2**62, (1,), generator=generator)))
            shapes = {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}
            if shapes != {n: self._shapes[n] for n in self._names}:
                raise ValueError("`model` (task module) returned another architecture on a second call: every call "
                                 "must build the same trainable parameters")
        else:
            model = copy.deepcopy(self._reference)
            with torch.no_grad():
                self._init_fn(model, generator)
        found = dict(model.named_parameters())
        params = [found[n].detach().clone() for n in self._names]
        for n, p in zip(self._names, params):
            if tuple(p.shape) != self._shapes[n]:
                raise ValueError(f"`init` (task module) changed the shape of {n!r} to {tuple(p.shape)}")
        return params

    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        """Client `client`'s examples for every replica (the data stream is not used)."""
        r = len(generators)
        x, y = self._inputs[int(client)], self._targets[int(client)]
        return ClientBatchData(x.expand(r, *x.shape), y.expand(r, *y.shape), {})

    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        """The model's outputs (R, batch, ...) for every replica."""
        return self._functions()[1](self._as_dict(params), inputs)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss of every replica, shape (R,)."""
        return self._functions()[2](outputs, targets)

    def gradients(self, params: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                  masks: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Gradients of every replica's loss (``vmap(grad(...))``), the model in training mode."""
        with self._mode(True):
            grads = self._functions()[0](self._as_dict(params), inputs, targets)
        return [grads[n] for n in self._names]

    def recorded(self, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [params[i] for i in self._kept]

    def evaluate(self, params: Sequence[torch.Tensor], data: ClientBatchData) -> dict[str, torch.Tensor]:
        """The "loss" on the first `eval_examples` examples, the model in eval mode."""
        with self._mode(False):
            return super().evaluate(params, data)


# -------------------------------------------------------------------- helpers


def load_factory(path: str) -> Callable[..., Any]:
    """The callable at import path ``"package.module:function"``.

    The module is imported from ``sys.path`` or, failing that, from the current folder.
    Raises ValueError naming `path` if it is malformed, does not import, or names nothing
    callable.
    """
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ValueError(f"`factory` must be an import path 'package.module:function'; got {path!r}")
    module_name, attribute = path.split(":")
    try:
        with _current_folder_importable():
            obj = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"`factory` {path!r} cannot be imported: {_one_line(exc)}") from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"`factory` {path!r}: module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"`factory` {path!r} is not callable (a {type(obj).__name__})")
    return obj


@contextmanager
def _current_folder_importable():
    """The current folder on ``sys.path`` (last, shadowing nothing) for the block."""
    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.append(here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def _one_line(exc):
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _qualified(fn):
    """"module:qualname" of a callable, for the record."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{name}"


def _client_tensors(data, dtype):
    """Per-client lists of inputs and targets as tensors, checked (see ModuleTask)."""
    import torch

    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError(f"`data` (task module) must be a non-empty sequence with one entry per client; got {data!r}")
    inputs, targets = [], []
    for c, entry in enumerate(data):
        if isinstance(entry, torch.utils.data.Dataset) and not isinstance(entry, (tuple, list)):
            x, y = _from_dataset(entry, c)
        elif isinstance(entry, (tuple, list)) and len(entry) == 2:
            x, y = (_tensor(a, c, what) for a, what in zip(entry, ("inputs", "targets")))
        else:
            raise TypeError(f"`data` (task module): client {c} must be a pair (inputs, targets) or a "
                            f"torch.utils.data.Dataset; got {type(entry).__name__}")
        if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
            raise ValueError(f"`data` (task module): client {c} has inputs of shape {tuple(x.shape)} and targets of "
                             f"shape {tuple(y.shape)}; both need the examples along the first dimension, as many "
                             "of each")
        if x.shape[0] == 0:
            raise ValueError(f"`data` (task module): client {c} has no examples")
        x, y = (t.to(dtype) if t.dtype.is_floating_point else t for t in (x, y))
        for t, what in ((x, "inputs"), (y, "targets")):
            if t.dtype.is_floating_point and not torch.isfinite(t).all():
                raise ValueError(f"`data` (task module): client {c}'s {what} contain non-finite values")
        inputs.append(x.contiguous())
        targets.append(y.contiguous())
    for c in range(1, len(inputs)):
        for t, first, what in ((inputs[c], inputs[0], "inputs"), (targets[c], targets[0], "targets")):
            if t.shape != first.shape or t.dtype != first.dtype:
                raise ValueError(
                    f"`data` (task module): client {c}'s {what} have shape {tuple(t.shape)} ({t.dtype}) but client "
                    f"0's {tuple(first.shape)} ({first.dtype}); every client needs the same number of examples of "
                    "the same shape (the replicas train as one batch)")
    return inputs, targets


def _tensor(a, client, what):
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        return a.detach().cpu()
    try:
        arr = np.asarray(a)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"dtype {arr.dtype}")
        return torch.from_numpy(np.ascontiguousarray(arr))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`data` (task module): client {client}'s {what} must be a numeric tensor or array; "
                        f"{_one_line(exc)}") from None


def _from_dataset(dataset, client):
    import torch

    try:
        n = len(dataset)
    except TypeError:
        raise TypeError(f"`data` (task module): client {client}'s Dataset has no length (an IterableDataset?); "
                        "give a map-style Dataset or (inputs, targets)") from None
    xs, ys = [], []
    for i in range(n):
        item = dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"`data` (task module): client {client}'s Dataset item {i} must be a pair "
                            f"(input, target); got {type(item).__name__}")
        xs.append(_tensor(item[0], client, "inputs"))
        ys.append(_tensor(item[1], client, "targets"))
    try:
        return torch.stack(xs), torch.stack(ys)
    except RuntimeError as exc:
        raise ValueError(f"`data` (task module): client {client}'s Dataset items differ in shape: "
                         f"{_one_line(exc)}") from None


def _data_digest(inputs, targets):
    h = hashlib.sha256()
    for x, y in zip(inputs, targets):
        for t in (x, y):
            h.update(f"{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def _select(names, record):
    """Indices into `names` of the names or prefixes in `record` (None: all), in order."""
    if record is None:
        return list(range(len(names)))
    kept = set()
    for wanted in record:
        hits = [i for i, n in enumerate(names) if n == wanted or n.startswith(wanted + ".")]
        if not hits:
            raise ValueError(f"`record` (task module) names {wanted!r}, which is neither a trainable parameter of "
                             f"the model nor a prefix of one; trainable parameters: {names}")
        kept.update(hits)
    return sorted(kept)
