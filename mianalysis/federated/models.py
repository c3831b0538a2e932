"""The models of McMahan et al. 2017 that the simulator trains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._internal.validation import check_choice

if TYPE_CHECKING:  # names used only in type hints
    import torch

MODELS = ("mlp", "cnn")


def build_model(name: str, input_shape: Sequence[int], n_classes: int = 10, hidden: int = 200) -> torch.nn.Sequential:
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


__all__ = ["MODELS", "build_model"]
