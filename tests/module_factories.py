"""Models and factories for tests/test_module_task.py, importable as ``module_factories:NAME``
(the tests folder is on ``sys.path``, see conftest.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mianalysis.tasks import ModuleSpec


class ElmanLayer(nn.Module):
    """One Elman layer as signal-rnn writes it: h_t = tanh(x_t W_ih^T + bias + h_{t-1} W_hh^T).

    With `unbind` the steps' drives are taken by ``drive.unbind(1)`` instead of
    ``drive[:, t]``: the same numbers, but the backward of one index per step writes a zero
    tensor of the whole sequence per step (O(T^2)), where unbind's backward stacks the
    steps' gradients once."""

    def __init__(self, n_in, hidden, unbind=False):
        super().__init__()
        self.weight_ih = nn.Parameter(torch.empty(hidden, n_in))
        self.weight_hh = nn.Parameter(torch.empty(hidden, hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        nn.init.normal_(self.weight_ih)
        nn.init.normal_(self.weight_hh)
        self.unbind = unbind

    def forward(self, seq):  # (batch, T, n_in) -> (batch, T, hidden)
        drive = seq @ self.weight_ih.T + self.bias
        h = drive.new_zeros(drive.shape[0], drive.shape[2])
        steps = drive.unbind(1) if self.unbind else [drive[:, t] for t in range(drive.shape[1])]
        states = []
        for step in steps:
            h = torch.tanh(step + h @ self.weight_hh.T)
            states.append(h)
        return torch.stack(states, 1)


class SignalRNN(nn.Module):
    """signal-rnn's model as a plain nn.Module: stacked Elman layers and a linear head on the
    last hidden state; the parameters are named as the task names them (see ElmanLayer for
    `unbind`)."""

    def __init__(self, n_layers=2, hidden=3, unbind=False):
        super().__init__()
        self.rnn = nn.ModuleList([ElmanLayer(1 if i == 0 else hidden, hidden, unbind) for i in range(n_layers)])
        self.head = nn.Linear(hidden, 2)

    def forward(self, x):  # (batch, T) -> (batch, 2)
        seq = x.unsqueeze(-1)
        for layer in self.rnn:
            seq = layer(seq)
        return self.head(seq[:, -1])


def signal_init(model, generator):
    """signal-rnn's initialisation: weights N(0, 1/fan_in), biases 0, in parameter order."""
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        else:
            p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))


def regression_data(n_clients=3, n=12, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n_clients, d, generator=g)
    xs = [torch.randn(n, d, generator=g) for _ in range(n_clients)]
    return [(x, x @ w[c][:, None]) for c, x in enumerate(xs)]


def mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def tiny_spec():
    """A two-layer regression network on three clients of 12 examples."""
    return ModuleSpec(model=mlp, data=regression_data(), loss=F.mse_loss)


def other_spec():
    """tiny_spec with a wider hidden layer: another task."""
    return ModuleSpec(model=lambda: nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)),
                      data=regression_data(), loss=F.mse_loss)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.head = nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):  # (batch, 6, 6) -> (batch, 3) logits
        h = F.max_pool2d(torch.relu(self.conv(x.unsqueeze(1))), 2)
        return self.head(h.flatten(1))


def images_data(n_clients=3, n=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(n, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g)) for _ in range(n_clients)]


def cnn_spec():
    return ModuleSpec(model=TinyCNN, data=images_data(), loss=F.cross_entropy)


def not_a_spec():
    return 42


def failing_spec():
    raise RuntimeError("no data here")


NOT_CALLABLE = 3
