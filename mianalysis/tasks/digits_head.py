"""digits-head: digits-lenet's head as a softmax regression with an L2 term, with each run's exact theta*."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import RealSetting
from .base import ClientBatchData, ReplicaGenerators
from .convex import softmax_optimum
from .digits import DigitsLeNetTask
from .softmax import l2_penalty

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["DigitsHeadTask"]


class DigitsHeadTask(DigitsLeNetTask):
    """digits-lenet (:class:`mianalysis.tasks.DigitsLeNetTask`) whose clients minimise their
    mean cross-entropy plus ``(l2 / 2) (||W||^2 + ||b||^2)``: the pretrained body is frozen,
    so the trained head (84 -> 10, 850 parameters) is a softmax regression on the body's
    features, convex in the sampled parameters, and each run's theta* is known exactly.

    Everything else is digits-lenet's: data, augmentation drawn per run, starts, Adam, presets.
    Each run's clients see their own augmentation of their base images, so theta* differs
    between runs: :meth:`optimum` recomputes the run's features exactly as training drew
    them (float32, from the run's data generators) and minimises the pooled objective in
    float64 by Newton's method from zero to a gradient norm <= 1e-8
    (:func:`mianalysis.tasks.convex.softmax_optimum`), the clients weighted by their (equal)
    sizes. The "loss" metric includes the L2 term; "accuracy" is on the test set.
    """

    name = "digits-head"

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {**DigitsLeNetTask.default_settings(), "l2": 1e-3}

    setting_rules = {**DigitsLeNetTask.setting_rules,
                     "l2": RealSetting(0, 10, low_open=True, why="the L2 term makes the objective strictly convex")}

    def gradients(self, params: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                  masks: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The gradient of the batch's mean cross-entropy plus ``(l2 / 2) ||theta||^2``."""
        l2 = float(self.settings["l2"])
        return [g + l2 * p.detach() for g, p in zip(super().gradients(params, inputs, targets, masks), params)]

    def evaluate(self, params: Sequence[torch.Tensor], data: ClientBatchData) -> dict[str, torch.Tensor]:
        """digits-lenet's metrics, the "loss" with the L2 term (the client's objective)."""
        values = super().evaluate(params, data)
        return {**values, "loss": values["loss"] + l2_penalty(params, self.settings["l2"])}

    def optimum(self, data_generators: Sequence[ReplicaGenerators]) -> tuple[np.ndarray, np.ndarray]:
        """Each run's theta*, shape (n_runs, 850) (the weight row by row, then the bias),
        float64, and the gradient norm there (n_runs,), <= 1e-8: the minimiser of the mean
        objective over every client's features of the run (see the class docstring).
        `data_generators` holds one list per client, as
        :meth:`mianalysis.ParameterSampler.data_generators` gives them."""
        if len(data_generators) != self.n_clients:
            raise ValueError(f"`data_generators` must hold one list per client ({self.n_clients}); "
                             f"got {len(data_generators)}")
        data = [self.client_data(c, generators) for c, generators in enumerate(data_generators)]
        thetas, norms = [], []
        for run in range(len(data_generators[0])):
            x = np.concatenate([d.inputs[run].numpy() for d in data]).astype(np.float64)
            y = np.concatenate([d.targets[run].numpy() for d in data])
            found = softmax_optimum(x, y, n_classes=10, l2=float(self.settings["l2"]))
            thetas.append(found.theta)
            norms.append(found.grad_norm)
        return np.stack(thetas), np.asarray(norms)
