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

import ast
import copy
import hashlib
import importlib
import inspect
import math
import numbers
import textwrap
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from .._internal.validation import ChoiceSetting, IntSetting
from .base import LEARNING_RATE, ClientBatchData, ReplicaGenerators, Task

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["ModuleSpec", "ModuleTask", "load_factory"]

# Modules whose training draws random numbers, by the attribute that switches it on.
_RANDOM_ATTRIBUTES = ("p", "dropout")

# The settings that fingerprint what decides the samples beyond the other settings (see
# ModuleTask.resume_settings): the initial point, one forward and loss, the source text.
_FINGERPRINTS = ("init_fingerprint", "forward_fingerprint", "source_sha256")
# Relative tolerance of the float fingerprints. Their last bits may differ between CPUs
# (instruction sets, thread counts: sums in another order), by a few float32 ulps (~1e-7);
# what they are there to catch (another activation, a scaled loss, another initialisation)
# moves them by far more than 1e-4.
_FINGERPRINT_RTOL = 1e-4
# Examples of client 0 in the fingerprint's forward and loss.
_FINGERPRINT_EXAMPLES = 8
# How the replicas' gradients are computed (ModuleTask's `gradients`).
GRADIENT_MODES = ("vmap", "summed")


@dataclass
class ModuleSpec:
    """A model, per-client data and a loss: what a factory named by an import path returns.

    Parameters
    ----------
    model : callable or torch.nn.Module
        Called with no arguments, returns a ``torch.nn.Module`` (an ``nn.Module`` class
        with no required arguments will do). Its forward takes one batch of inputs. A
        module instance is accepted too: each run trains a deep copy of it, re-initialised
        by `init` or, without `init`, by the ``reset_parameters()`` of every submodule in
        module order under the run's seed -- the initial point a factory building the same
        layers in that order gives (e.g. an ``nn.Sequential`` of PyTorch layers). Its
        frozen parameters and buffers are kept as they are. An instance with a trainable
        parameter that no ``reset_parameters()`` covers (a custom layer initialised in its
        constructor) and no `init` is refused: give a callable that builds the model.
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

    model: Any
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
    model : callable or torch.nn.Module
        Called with no arguments, returns a ``torch.nn.Module`` (on the CPU, float32 or
        float64 parameters: convert a bfloat16 or float16 model with ``.float()``, which
        is exact). It is called once when the task is built, under PyTorch's CPU random
        generator seeded with 0 (and restored after), for the architecture: the names and
        shapes of the trainable parameters (those with ``requires_grad``) and the
        constants (frozen parameters and buffers), which every run shares. A module
        instance stands for a factory of deep copies of it, see :class:`ModuleSpec`.
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
    gradients : {"vmap", "summed"}, default="vmap"
        How each replica's gradient is computed: "vmap", ``vmap(grad(loss))``, every
        replica's backward pass apart; "summed", one backward pass (``torch.autograd``)
        over the sum of the replicas' losses through the batched forward. Replica r's
        parameters enter only replica r's loss, so both give each replica its own
        gradient; where their bytes agree, and where not, see Notes.
    sketch : mianalysis.dumps.Sketch, optional
        Record each checkpoint's sketch of the recorded tensors instead of the tensors
        (models of millions of parameters): the sampler's dump then holds the sketch, its
        layout the sketch's and its manifest the sketch (see :mod:`mianalysis.dumps.sketch`).
        The task's settings record it, so a dump is resumed only with the same sketch.
        :meth:`parameter_shapes` stays the tensors' shapes.

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

    **Gradients.** ``gradients="summed"`` gives the same bytes as "vmap" on the models of
    ``tests/test_module_task_gradients.py`` (linear and tanh layers, signal-rnn's Elman
    network, a small convolutional network at batch 4); elsewhere it may differ in the last
    bits: on ``examples/digits_cnn.py`` (batch 50) the head's weight gradient differs by
    one float32 rounding in some entries (the two paths compute the batched linear layer's
    backward by different products), and on a network with BatchNorm the gradient of the
    bias before the normalisation, zero but for rounding, differs in its rounding, which
    Adam's step g / (|g| + eps) turns into visible differences. It is deterministic as
    "vmap" is (the same bytes for any chunk size and thread count), and the dump records
    the setting, so a dump never mixes the two. "summed" does not import
    ``torch._dynamo``; ``torch.func.grad`` imports it on its first call.

    **Class labels.** Integer targets with outputs laid out as ``cross_entropy`` expects
    them (classes along dimension 1, the targets' shape otherwise) are class labels: a
    label outside ``0 .. n_outputs - 1`` on which the loss fails (``-100``, the default
    ``ignore_index``, does not) is a ValueError naming the client and the label, found
    before anything trains.

    The dump records ``factory`` (the import path, when built by :meth:`from_factory`),
    the qualified names of the model factory, loss and init, the number of clients and
    examples, the training settings and SHA-256 digests of the data and of the
    architecture and constants: a dump is resumed only by the same task. It also
    records what decides the samples where names cannot tell: a fingerprint of the
    initial parameters a generator seeded with 0 gives, of one forward and loss on client
    0's first examples, and SHA-256 digests of the source of the model, loss, init and the
    model's own module classes (where :func:`inspect.getsource` can read them; comments
    and layout do not count). A resume whose model, forward, loss or initialisation
    changed is refused, naming what changed (see :meth:`resume_settings`).

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
        "gradients": ChoiceSetting(*GRADIENT_MODES),
    }

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {"optimizer": "adam", "lr": 1e-3, "batch_size": 32, "epochs": 1, "record": None,
                "eval_examples": None, "gradients": "vmap"}

    def __init__(self, model: Callable[[], torch.nn.Module], data: Sequence[Any],
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 init: Callable[[torch.nn.Module, torch.Generator], None] | None = None, optimizer: str = "adam",
                 lr: float = 1e-3, batch_size: int = 32, epochs: int = 1, record: str | Sequence[str] | None = None,
                 eval_examples: int | None = None, gradients: str = "vmap", sketch: Any = None,
                 **unknown: Any) -> None:
        import torch

        # A mianalysis.dumps.Sketch (the dumps stage is above this one: known by what it does).
        if sketch is not None and not (callable(getattr(sketch, "apply", None))
                                       and callable(getattr(sketch, "to_json", None))):
            raise TypeError(f"`sketch` (task module) must be a mianalysis.dumps.Sketch or None; got {sketch!r}")
        self.sketch = sketch

        for what, fn in (("model", model), ("loss", loss)):
            if not callable(fn):
                raise TypeError(f"`{what}` (task module) must be callable; got {fn!r}")
        if init is not None and not callable(init):
            raise TypeError(f"`init` (task module) must be None or callable (model, generator); got {init!r}")
        self._factory, self._loss_fn, self._init_fn = model, loss, init
        self._instance = model if isinstance(model, torch.nn.Module) else None
        self._reference = self._build(0, reset=False)
        named = list(self._reference.named_parameters())
        self._names = [n for n, p in named if p.requires_grad]
        if not self._names:
            raise ValueError("the model (task module) has no trainable parameters (requires_grad)")
        if self._instance is not None and init is None:
            _check_resettable(self._reference, self._names)
        self._shapes = {n: tuple(p.shape) for n, p in named}
        dtype = named[0][1].dtype
        self._inputs, self._targets = _client_tensors(data, dtype)
        super().__init__(optimizer=optimizer, lr=lr, batch_size=batch_size, epochs=epochs, record=record,
                         eval_examples=eval_examples, gradients=gradients,
                         **unknown)  # an unknown setting is refused there
        self.optimizer = self.settings["optimizer"]
        self._kept = _select(self._names, self.settings["record"])
        self._refuse_randomness_and_running_stats()
        self.settings.update({
            "factory": None,
            "model": _qualified(model), "loss": _qualified(loss), "init": None if init is None else _qualified(init),
            "n_clients": len(self._inputs), "n_examples": int(self._inputs[0].shape[0]),
            "data_sha256": _data_digest(self._inputs, self._targets), "model_sha256": self._model_digest(),
        })
        if sketch is not None:  # absent without one: dumps made before sketches existed resume
            self.settings["sketch"] = sketch.to_json()
        # (gradient, forward, loss), batched over the replicas: made on first use (_functions)
        self._batched: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None = None
        outputs = self._probe()
        self._check_labels(outputs)
        self.settings.update(self._fingerprints())

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
    def _build(self, seed, reset=True):
        """A fresh model from the factory, called under PyTorch's CPU generator seeded with
        `seed` (its state restored after). For a module instance: a deep copy of it, its
        layers' ``reset_parameters()`` called in module order under that seed when `reset`."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(int(seed))
            try:
                if self._instance is None:
                    model = self._factory()
                else:
                    model = copy.deepcopy(self._instance)
                    if reset:
                        with torch.no_grad():
                            for module in model.modules():
                                reset_parameters = getattr(module, "reset_parameters", None)
                                if callable(reset_parameters):
                                    reset_parameters()
            except Exception as exc:
                what = "reset_parameters() of" if self._instance is not None else "the factory"
                raise ValueError(f"`model` (task module): {what} {_qualified(self._factory)} raised "
                                 f"{_one_line(exc)}") from exc
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"`model` (task module) must return a torch.nn.Module; got {type(model).__name__}")
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if p.device.type != "cpu":
                raise ValueError(f"the model's tensor {name!r} is on {p.device}; the sampler trains on the CPU")
        for name, p in model.named_parameters():
            if not p.dtype.is_floating_point:
                raise ValueError(f"the model's parameter {name!r} has dtype {p.dtype}; parameters must be floating point")
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if p.dtype.is_floating_point and p.dtype not in (torch.float32, torch.float64):
                raise ValueError(f"the model's tensor {name!r} has dtype {p.dtype}; the sampler trains float32 or "
                                 "float64 models (dumps hold float32): convert the model with .float() (exact "
                                 f"for {p.dtype})")
        return model

    def _refuse_randomness_and_running_stats(self):
        """ValueError naming a submodule that draws random numbers or updates buffers in
        training (see the class Notes)."""
        for name, module in self._reference.named_modules():
            label = f"{name or 'the model'} ({type(module).__name__})"
            for attr in _RANDOM_ATTRIBUTES:
                rate = getattr(module, attr, None)
                if ("Dropout" in type(module).__name__ or attr == "dropout") and isinstance(rate, numbers.Real) \
                        and not isinstance(rate, bool) and float(rate) > 0:
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
        """(gradient, forward, loss), each batched over the replica dimension: the gradient
        ``vmap(grad(...))`` or, with ``gradients="summed"``, one backward over the sum of
        the replicas' losses (see the class Notes)."""
        if self._batched is None:
            from torch.func import functional_call, vmap

            module, loss = self._reference, self._loss_fn

            def one_loss(params, x, y):
                return loss(functional_call(module, params, (x,)), y)

            def one_forward(params, x):
                return functional_call(module, params, (x,))

            if self.settings["gradients"] == "summed":
                gradient = _summed_gradient(vmap(one_loss))
            else:
                from torch.func import grad  # imports torch._dynamo on its first call

                gradient = vmap(grad(one_loss))
            self._batched = (gradient, vmap(one_forward), vmap(loss))
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
                outputs = self.forward(params, xs)
                losses = self.loss(outputs, ys)
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
        return outputs[0]

    def _check_labels(self, outputs):
        """ValueError naming the client and label of a class label the loss cannot take.

        `outputs` is one replica's outputs on two examples. Integer targets are class
        labels when the outputs are laid out as ``cross_entropy`` expects (classes along
        dimension 1, the targets' shape otherwise): then a label outside ``0 .. C - 1`` is
        tried alone with the loss, and refused if the loss fails on it (a loss that ignores
        it, as ``cross_entropy`` ignores its ``ignore_index`` -100, trains fine).
        """
        import torch

        targets = self._targets[0]
        if targets.dtype.is_floating_point or targets.dtype == torch.bool or outputs.ndim < 2 \
                or tuple(outputs.shape[:1]) + tuple(outputs.shape[2:]) != tuple(targets[:2].shape):
            return
        n_classes = int(outputs.shape[1])
        for c, y in enumerate(self._targets):
            bad = (y < 0) | (y >= n_classes)
            if not bool(bad.any()):
                continue
            for label in torch.unique(y[bad]).tolist():
                i = int((y == label).nonzero()[0, 0])  # its first example
                x, yi = self._inputs[c][i:i + 1], y[i:i + 1]
                params = [torch.stack([p, p]) for p in self.init_params(torch.Generator().manual_seed(0))]
                try:
                    with torch.no_grad():
                        self.loss(self.forward(params, torch.stack([x, x])), torch.stack([yi, yi]))
                except Exception as exc:
                    raise ValueError(
                        f"`data` (task module): client {c} has class label {label} (first at example {i}), outside "
                        f"0-{n_classes - 1} for the model's {n_classes} outputs; the loss fails on it: "
                        f"{_one_line(exc)}") from None

    def _fingerprints(self):
        """What decides the samples besides the settings (see :meth:`resume_settings`):
        per trainable tensor, the norm and two signed sums of the initial point a generator
        seeded with 0 gives; the loss and the same three numbers of the outputs of one
        forward of that point on client 0's first examples; digests of the source."""
        import torch

        params = self.init_params(torch.Generator().manual_seed(0))
        n = min(_FINGERPRINT_EXAMPLES, self.n_examples)
        x, y = self._inputs[0][:n], self._targets[0][:n]
        stacked = [torch.stack([p, p]) for p in params]  # two replicas, as the sampler trains them
        with torch.no_grad(), self._mode(True):
            outputs = self.forward(stacked, torch.stack([x, x]))
            loss = self.loss(outputs, torch.stack([y, y]))
        return {
            "init_fingerprint": {name: _summary(p) for name, p in zip(self._names, params)},
            "forward_fingerprint": {"loss": float(loss[0]), "outputs": _summary(outputs[0])},
            "source_sha256": self._source_digests(),
        }

    def _source_digests(self):
        """{role: SHA-256 (16 hex digits)} of the source of the model factory, loss, init and
        the model's module classes that are not PyTorch's, where inspect can read them."""
        objects = {"model": self._factory if self._instance is None else None, "loss": self._loss_fn,
                   "init": self._init_fn}
        for module in self._reference.modules():
            cls = type(module)
            if cls is not self._factory:
                objects.setdefault(f"module {_qualified(cls)}", cls)
        digests = {}
        for role, obj in objects.items():
            text = _source_text(obj)
            if text is not None:
                digests[role] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return digests

    def resume_settings(self, recorded: dict) -> dict:
        """The task settings to resume a dump whose manifest records task settings `recorded`.

        When `recorded` differs from this task's settings in other settings too, these
        settings (the dump then names every difference). Otherwise the fingerprints are
        compared: the source digests exactly, the float fingerprints to a relative
        tolerance of 1e-4 (their last bits may differ between CPUs and thread counts);
        when they agree, these settings with the recorded fingerprints, so that the dump's
        manifest stays as it is. A dump recorded before the `gradients` setting existed was
        sampled by ``vmap(grad)``: it is resumed with ``gradients="vmap"``.

        Raises
        ------
        ValueError
            If the model's initial parameters, its forward and loss, or the source of the
            model, loss or init changed since the dump was written: one line naming what.
        """
        ours = self.settings
        if isinstance(recorded, dict) and "gradients" not in recorded and ours["gradients"] == "vmap":
            ours = {k: v for k, v in ours.items() if k != "gradients"}  # a dump from before the setting: vmap's
        if not isinstance(recorded, dict) or \
                {k: v for k, v in recorded.items() if k not in _FINGERPRINTS} != \
                {k: v for k, v in ours.items() if k not in _FINGERPRINTS} or \
                any(k not in recorded for k in _FINGERPRINTS):
            return ours
        changed = []
        old_init, new_init = recorded["init_fingerprint"], ours["init_fingerprint"]
        names = [n for n in new_init if not _close(old_init.get(n), new_init[n])]
        if names or set(old_init) != set(new_init):
            changed.append(f"the initial parameters ({', '.join(repr(n) for n in names) or 'their names'})")
        old_fw, new_fw = recorded["forward_fingerprint"], ours["forward_fingerprint"]
        if not (_close([old_fw.get("loss")], [new_fw["loss"]]) and _close(old_fw.get("outputs"), new_fw["outputs"])):
            changed.append(f"the forward-loss output on client 0's first examples (loss {old_fw.get('loss'):.6g} "
                           f"recorded, {new_fw['loss']:.6g} now)")
        old_src, new_src = recorded["source_sha256"], ours["source_sha256"]
        roles = [r for r in sorted(set(old_src) | set(new_src)) if old_src.get(r) != new_src.get(r)]
        if roles:
            changed.append(f"the source of {', '.join(roles)}")
        if changed:
            raise ValueError(f"the model changed since the dump was written: {'; '.join(changed)}; its samples would "
                             "mix two models")
        return {**ours, **{k: recorded[k] for k in _FINGERPRINTS}}

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
            try:
                with torch.no_grad():
                    self._init_fn(model, generator)
            except Exception as exc:
                raise ValueError(f"`init` (task module) {_qualified(self._init_fn)} raised {_one_line(exc)}") from exc
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
        """The `record` tensors of `params` (replicas first), or with a `sketch` each one's
        sketch (replicas, rows), in the sketch's layout."""
        kept = [params[i] for i in self._kept]
        if self.sketch is None:
            return kept
        import torch

        named = [(self._names[i], p.detach().cpu().numpy()) for i, p in zip(self._kept, kept)]
        return [torch.from_numpy(a.reshape(a.shape[0], -1)) for _, a in self.sketch.apply(named, batch_dims=1)]

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


def _summed_gradient(batched_loss):
    """The gradients {name: (R, ...)} of every replica's loss by one backward pass over the
    sum of `batched_loss`'s (R,) losses: replica r's parameters enter only its own loss, so
    the sum's gradient with respect to them is that loss's gradient (its weight in the sum
    is exactly 1)."""

    def gradient(params, inputs, targets):
        import torch

        leaves = {n: p.detach().requires_grad_(True) for n, p in params.items()}
        with torch.enable_grad():
            losses = batched_loss(leaves, inputs, targets)
            found = torch.autograd.grad(losses.sum(), list(leaves.values()), allow_unused=True)
        return {n: torch.zeros_like(p) if g is None else g for (n, p), g in zip(leaves.items(), found)}

    return gradient


def _check_resettable(model, trainable):
    """TypeError for a module instance with a trainable parameter that no
    ``reset_parameters()`` re-initialises (see ModuleSpec)."""
    for prefix, module in model.named_modules():
        if callable(getattr(module, "reset_parameters", None)):
            continue
        for name, p in module.named_parameters(recurse=False):
            full = f"{prefix}.{name}" if prefix else name
            if full in trainable:
                raise TypeError(
                    f"`model` (task module) is a module instance whose trainable parameter {full!r} (in "
                    f"{type(module).__name__}, which has no reset_parameters()) cannot be re-initialised for each "
                    "run: give a callable that builds the model, or an `init`")


def _source_text(obj):
    """The source of `obj` (a function or class outside PyTorch), its comments and layout
    left out where it parses; None where inspect cannot read it."""
    if obj is None or (getattr(obj, "__module__", None) or "").split(".")[0] == "torch":
        return None
    try:
        text = textwrap.dedent(inspect.getsource(obj))
    except Exception:  # builtins, the REPL, callables without source: nothing to record
        return None
    try:
        return ast.dump(ast.parse(text))
    except SyntaxError:  # a lambda inside a larger expression: its lines as they are
        return text


def _summary(t):
    """[norm, two signed sums] of a tensor, in float64: the fingerprint of its values."""
    import numpy as np

    a = t.detach().double().reshape(-1).numpy()
    signs = np.random.default_rng(0).integers(0, 2, size=(2, a.size)) * 2 - 1  # the same signs on any machine
    return [float(np.sqrt(a @ a)), float(signs[0] @ a), float(signs[1] @ a)]


def _close(old, new):
    """Whether fingerprint lists `old` and `new` agree to _FINGERPRINT_RTOL of their largest
    magnitude (a signed sum can cancel to 0; the norm sets its scale)."""
    if not isinstance(old, list) or len(old) != len(new):
        return False
    if not all(isinstance(v, numbers.Real) and math.isfinite(v) for v in old + new):
        return [repr(v) for v in old] == [repr(v) for v in new]  # a NaN loss is recorded as it is
    scale = max(abs(v) for v in old + new)
    return all(abs(a - b) <= _FINGERPRINT_RTOL * scale for a, b in zip(old, new))


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
