"""signal-rnn: predict the shift and scale of a randomised 1-D signal with a deep RNN."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import IntSetting, RangeSetting, RealSetting
from .base import LEARNING_RATE, ClientBatchData, ReplicaGenerators, Task

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["SignalRNNTask", "elman_recurrence"]


class SignalRNNTask(Task):
    """Each example is a sequence ``scale * s + shift`` of length `seq_len`; the target is
    (shift, scale).

    Every client has its own random source: a mixture of `n_components` sinusoids whose
    frequencies (1 to 8 cycles per sequence) and amplitudes are drawn once per client from
    `data_seed`. An example draws fresh phases and a little white noise from that source,
    standardises the result to zero mean and unit variance (so that shift and scale are
    identifiable), then draws shift ~ U(shift_range) and scale ~ U(scale_range). A client's
    examples are fixed; what changes between runs is the initial point, the data order and
    the dropout masks. With the sampler's "data" stream shared (``shared=("data",)``) each
    run instead redraws every client's examples from the client's source, with one draw
    (phases, noise, shifts, scales) common to the run's clients.

    Model: `n_layers` stacked Elman recurrent layers of `hidden` tanh units, each with an
    input matrix, a recurrent matrix and one bias (the Keras SimpleRNN cell), inverted
    dropout on every layer's output sequence, and a linear head from the last hidden
    state to the 2 outputs. MSE loss, Adam. The "loss" metric at each checkpoint is the
    MSE on the client's first `eval_examples` examples (all when None), without dropout.

    Parameter count: with the defaults (10 layers of 4 units) the network has
    24 + 9 * 36 + 10 = 358 parameters. The core paper reports 394 = 24 + 10 * 36 + 10,
    which is what 11 such layers give (an input recurrent layer plus 10 stacked ones, as
    the paper's "10 layers" can be read); ``n_layers=11`` reproduces 394 exactly. PyTorch's
    own ``nn.RNN`` has two bias vectors per layer and would give 398 for 10 layers.
    """

    name = "signal-rnn"
    # "data": shared, each run redraws every client's examples from one draw common to the
    # run (see client_data); not shared, each client keeps its fixed training set.
    streams = ("data", "order", "dropout")
    data_stream = "data"
    mask_stream = "dropout"
    presets = {
        "paper": {},
        # The paper's 100 examples with batch 64 give 2 iterations per epoch; 1024 examples
        # give 16, enough training phases for MI and distance curves.
        # The loss at each checkpoint is measured on the first 128 local examples.
        "long": {"n_examples": 1024, "eval_examples": 128},
    }

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {
            "n_clients": 3,
            "n_examples": 100,
            "seq_len": 64,
            "n_layers": 10,
            "hidden": 4,
            "dropout": 0.1,
            "lr": 1e-3,
            "batch_size": 64,
            "n_components": 3,
            "noise": 0.1,
            "shift_range": [-1.0, 1.0],
            "scale_range": [0.5, 2.0],
            "data_seed": 0,
            "eval_examples": None,
        }

    setting_rules = {
        "n_clients": IntSetting(1),
        "n_examples": IntSetting(1),
        "seq_len": IntSetting(2),  # standardising a sequence of one value divides by a zero spread
        "n_layers": IntSetting(1),
        "hidden": IntSetting(1),
        "dropout": RealSetting(0, 1, high_open=True),
        "lr": LEARNING_RATE,
        "batch_size": IntSetting(1),
        "n_components": IntSetting(1),
        "noise": RealSetting(0),
        "shift_range": RangeSetting(),
        "scale_range": RangeSetting(),
        "data_seed": IntSetting(0, 2**32 - 1),
        "eval_examples": IntSetting(1, optional=True),
    }

    def check_settings_together(self) -> None:
        super().check_settings_together()
        m = self.settings["eval_examples"]
        if m is not None and m > self.n_examples:
            raise ValueError(f"`eval_examples` (task {self.name}) must be None (all examples) or <= `n_examples` "
                             f"({self.n_examples}); got {m}")

    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        h = int(self.settings["hidden"])
        shapes = []
        for layer in range(int(self.settings["n_layers"])):
            n_in = 1 if layer == 0 else h
            shapes += [(f"rnn.{layer}.weight_ih", (h, n_in)), (f"rnn.{layer}.weight_hh", (h, h)),
                       (f"rnn.{layer}.bias", (h,))]
        return shapes + [("head.weight", (2, h)), ("head.bias", (2,))]

    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """Normal initialisation: weights N(0, 1/fan_in), biases 0."""
        import torch

        params = []
        for name, shape in self.parameter_shapes():
            if name.endswith("bias"):
                params.append(torch.zeros(shape))
            else:
                params.append(torch.randn(shape, generator=generator) / math.sqrt(shape[1]))
        return params

    def client_examples(self, client: int, draw: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The client's training set: inputs (n_examples, seq_len), targets (n_examples, 2).

        The client's signal source (frequencies and amplitudes) comes from
        (`data_seed`, client). The examples' phases, noise, shifts and scales come from the
        same generator (the client's fixed training set), or from `draw`, a
        ``numpy.random.Generator`` (a run's fresh draw of the examples from that source)."""
        s = self.settings
        rng = np.random.default_rng([int(s["data_seed"]), int(client)])
        m, n, length = int(s["n_components"]), self.n_examples, int(s["seq_len"])
        freqs = rng.uniform(1.0, 8.0, size=m)
        amps = rng.uniform(0.5, 1.5, size=m)
        if draw is not None:
            rng = draw
        t = np.arange(length) / length
        phases = rng.uniform(0, 2 * np.pi, size=(n, m, 1))
        src = (amps[None, :, None] * np.sin(2 * np.pi * freqs[None, :, None] * t + phases)).sum(axis=1)
        src += s["noise"] * rng.standard_normal((n, length))
        src = (src - src.mean(axis=1, keepdims=True)) / src.std(axis=1, keepdims=True)
        (shift_low, shift_high), (scale_low, scale_high) = s["shift_range"], s["scale_range"]
        shift = rng.uniform(shift_low, shift_high, size=n)
        scale = rng.uniform(scale_low, scale_high, size=n)
        inputs = scale[:, None] * src + shift[:, None]
        return inputs.astype(np.float32), np.stack([shift, scale], axis=1).astype(np.float32)

    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        """The client's examples for every replica. With the "data" stream shared, each
        replica draws them afresh from the client's source with its run's generator, so the
        clients of a run see the same phases, noise, shifts and scales (on their own
        sources) and runs differ; otherwise every replica gets the client's fixed set."""
        import torch

        if generators.shared:
            seeds = [int(torch.randint(0, 2**62, (1,), generator=g)) for g in generators]
            drawn = [self.client_examples(client, np.random.default_rng(seed)) for seed in seeds]
            return ClientBatchData(torch.from_numpy(np.stack([x for x, _ in drawn])),
                                   torch.from_numpy(np.stack([y for _, y in drawn])), {})
        inputs, targets = (torch.from_numpy(a) for a in self.client_examples(client))
        r = len(generators)
        return ClientBatchData(inputs.expand(r, *inputs.shape), targets.expand(r, *targets.shape), {})

    def draw_masks(self, generators: ReplicaGenerators, batch_size: int) -> torch.Tensor | None:
        import torch

        p = float(self.settings["dropout"])
        if p == 0:
            return None
        shape = (int(self.settings["n_layers"]), int(self.settings["seq_len"]), batch_size, int(self.settings["hidden"]))
        # Boolean keep-masks (n_layers, seq_len, R, batch, hidden); scaled in forward.
        return torch.stack([torch.rand(shape, generator=g) >= p for g in generators], dim=2)

    def central_masks(self, masks: torch.Tensor | None, n_clients: int) -> torch.Tensor | None:
        """The clients' keep-masks (n_layers, seq_len, n_clients * R, batch, hidden) as the
        central replicas' (n_layers, seq_len, R, n_clients * batch, hidden): every example of
        the union batch keeps the dropout mask it had in its client's batch."""
        if masks is None:
            return None
        layers, length, replicas, batch, hidden = masks.shape
        runs = replicas // n_clients
        return (masks.reshape(layers, length, n_clients, runs, batch, hidden).transpose(2, 3)
                .reshape(layers, length, runs, n_clients * batch, hidden))

    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        import torch

        n_layers = int(self.settings["n_layers"])
        # Time-major (T, R, B, features): each step's slice is contiguous.
        seq = inputs.permute(2, 0, 1).unsqueeze(-1)
        length, r, b, _ = seq.shape
        for layer in range(n_layers):
            w_ih, w_hh, bias = params[3 * layer: 3 * layer + 3]
            drive = torch.einsum("trbi,rhi->trbh", seq, w_ih) + bias[None, :, None, :]
            seq = elman_recurrence(drive, w_hh)
            if masks is not None:
                seq = seq * masks[layer] / (1.0 - float(self.settings["dropout"]))
        w_out, b_out = params[-2:]
        return torch.einsum("rbh,roh->rbo", seq[-1], w_out) + b_out[:, None, :]

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((outputs - targets) ** 2).mean(dim=(1, 2))


def elman_recurrence(drive: torch.Tensor, w_hh: torch.Tensor) -> torch.Tensor:
    """h_t = tanh(drive_t + h_{t-1} w_hh^T) from h_{-1} = 0, batched over replicas.

    drive: (T, R, B, H), the input projection plus bias at every step; w_hh: (R, H, H).
    Returns every h_t, shape (T, R, B, H), differentiable in both arguments by autograd.
    Autograd through the time loop was measured faster than a written-out
    back-propagation through time, for one layer and for the whole sampler
    (``benchmarks/bench_sampler.py --recurrence``).
    """
    import torch

    w_hh_t = w_hh.transpose(1, 2).contiguous()
    h = torch.zeros_like(drive[0])
    outs = []
    for drive_t in drive.unbind(0):
        # bmm then add: for 4x4 matrices this is ~2x faster than baddbmm.
        h = torch.tanh(drive_t + torch.bmm(h, w_hh_t))
        outs.append(h)
    return torch.stack(outs)
