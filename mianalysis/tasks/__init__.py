"""Sampling tasks: per-client data and a model written over a replica dimension.

Tasks load PyTorch when used; importing this package does not.
"""

from __future__ import annotations

from typing import Any

from .._internal.validation import check_choice
from .base import ClientBatchData, Task
from .digits import DigitsLeNetTask
from .digits_head import DigitsHeadTask
from .gaussian_sgd import GaussianSGDTask
from .module import ModuleSpec, ModuleTask
from .signal import SignalRNNTask
from .softmax import SoftmaxRegressionTask

# "module" is built from an import path: ``get_task("module", factory="package.module:function")``.
TASKS = {task.name: task for task in (SignalRNNTask, DigitsLeNetTask, DigitsHeadTask, GaussianSGDTask,
                                      SoftmaxRegressionTask, ModuleTask)}


def get_task(name: str, preset: str = "paper", **settings: Any) -> Task:
    """The task called `name` with a preset's settings and `settings` on top."""
    check_choice(name, "task", sorted(TASKS))
    return TASKS[name].from_preset(preset, **settings)


__all__ = [
    "Task", "ClientBatchData", "SignalRNNTask", "DigitsLeNetTask", "DigitsHeadTask", "GaussianSGDTask",
    "SoftmaxRegressionTask", "ModuleTask",
    "ModuleSpec", "TASKS", "get_task"
]
