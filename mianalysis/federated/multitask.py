"""Synthetic multi-task data for personalised federated learning: one task per client.

All clients see inputs x ~ N(0, I_d) and share one hidden representation
z = tanh(A x) (A: latent_dims x d, fixed by the seed); each client's label is a different
function of z, so a shared body can serve every task and a small head per client reads its
task off the body's output. Tasks differ in difficulty and gradient scale:

- ``("regression", scale)``: y = scale * (u . z) + 0.1 * scale * noise, mean squared error;
  with a large scale its gradients dwarf the classifiers'.
- ``("classification", n_classes, noise)``: y = argmax(W z + noise * eps), cross entropy;
  more classes and more label noise make a task harder; ``("classification", 2, 0.0)`` is
  an easy, noiseless, linearly readable task.

This mirrors the setting of FedGradNorm (Mortaheb et al. 2022): a regression task with
large gradients next to classification tasks of varying difficulty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._internal.validation import check_int

__all__ = ["DEFAULT_TASKS", "ALLOCATIONS", "make_multitask"]

DEFAULT_TASKS = (("regression", 10.0), ("classification", 5, 1.0), ("classification", 3, 0.5),
                 ("classification", 2, 0.0))
ALLOCATIONS = {"balanced": (1000, 1000, 1000, 1000), "imbalanced": (3000, 500, 500, 3000)}


def _check_task(spec):
    kind = spec[0] if isinstance(spec, (tuple, list)) and spec else None
    if kind == "regression" and len(spec) == 2 and spec[1] > 0:
        return
    if kind == "classification" and len(spec) == 3 and int(spec[1]) >= 2 and spec[2] >= 0:
        return
    raise ValueError(f"a task must be ('regression', scale > 0) or ('classification', n_classes >= 2, noise >= 0); "
                     f"got {spec!r}")


def make_multitask(sizes: str | Sequence[int] = "balanced",
                   tasks: Sequence[tuple[str, float] | tuple[str, int, float]] = DEFAULT_TASKS, *,
                   input_dims: int = 20, latent_dims: int = 8, n_test: int = 1000,
                   seed: int = 0) -> list[dict[str, Any]]:
    """One data set per client.

    Parameters
    ----------
    sizes : "balanced", "imbalanced" or sequence of int
        Training examples per client ("balanced": 1000 each; "imbalanced": 3000, 500, 500,
        3000 -- the regression and the easy task large, the two harder classifiers small).
    tasks : sequence of task specifications, one per client (see the module docstring)
    input_dims, latent_dims : int
    n_test : int
        Test examples per client.
    seed : int

    Returns
    -------
    list of dict, one per client: kind ("regression" or "classification"), n_outputs,
    x_train (n, input_dims) float32, y_train, x_test, y_test (float32 targets of shape
    (n, 1) for regression, int64 labels for classification).
    """
    if isinstance(sizes, str):
        if sizes not in ALLOCATIONS:
            raise ValueError(f"`sizes` must be one of {sorted(ALLOCATIONS)} or a list of ints; got {sizes!r}")
        sizes = ALLOCATIONS[sizes]
    sizes = [check_int(s, "sizes", low=2) for s in sizes]
    if len(sizes) != len(tasks):
        raise ValueError(f"`sizes` has {len(sizes)} entries but there are {len(tasks)} tasks; give one per client")
    for spec in tasks:
        _check_task(spec)
    input_dims = check_int(input_dims, "input_dims", low=1)
    latent_dims = check_int(latent_dims, "latent_dims", low=1)
    n_test = check_int(n_test, "n_test", low=1)
    # The tasks (A and each client's read-out) come from one stream and the examples from
    # another, so that changing the sizes changes the data but not the tasks.
    task_rng, rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    a = task_rng.standard_normal((latent_dims, input_dims)) / np.sqrt(input_dims) * 2.0
    readouts = [task_rng.standard_normal(latent_dims) / np.sqrt(latent_dims) if spec[0] == "regression"
                else task_rng.standard_normal((int(spec[1]), latent_dims)) for spec in tasks]

    clients = []
    for spec, n, readout in zip(tasks, sizes, readouts):
        x = rng.standard_normal((n + n_test, input_dims))
        z = np.tanh(x @ a.T)
        if spec[0] == "regression":
            scale = float(spec[1])
            y = (scale * (z @ readout) + 0.1 * scale * rng.standard_normal(n + n_test))[:, None].astype(np.float32)
            n_outputs = 1
        else:
            n_classes, noise = int(spec[1]), float(spec[-1])  # ('classification', n_classes, noise)
            y = np.argmax(z @ readout.T + noise * rng.standard_normal((n + n_test, n_classes)), axis=1).astype(np.int64)
            n_outputs = n_classes
        x = x.astype(np.float32)
        clients.append({"kind": spec[0], "n_outputs": n_outputs, "x_train": x[:n], "y_train": y[:n],
                        "x_test": x[n:], "y_test": y[n:]})
    return clients
