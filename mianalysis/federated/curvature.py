"""Exact Hessians and gradients of a client's objective, for the full-curvature rules.

The rules "fisher_full" and "newton_merge" (:func:`~mianalysis.federated.aggregation.fisher_full`,
:func:`~mianalysis.federated.aggregation.newton_merge`) take each client's Hessian of its own
objective, the mean loss over its examples, at its own final model, and "newton_merge" also
the gradient there. They are computed here with ``torch.func`` (``jacfwd`` of ``grad``) over
the model's parameters flattened into one vector (its parameters in order, each raveled), in
float64. A Hessian is n_params x n_params: models above
:data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS` parameters are refused.

:class:`~mianalysis.federated.FederatedSimulation` uses :func:`mean_loss_curvature` for its
replicates; :func:`hessian_and_gradient` is the same for one ``torch.nn.Module`` (what a
Flower client computes, :func:`mianalysis.flower.curvature_records`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .aggregation import check_hessian_size

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["flat_loss", "mean_loss_curvature", "hessian_and_gradient"]

#: Elements of (replicates x parameters x examples) per chunk of examples: bounds the memory of
#: ``jacfwd``'s batched tangents.
_CHUNK_ELEMENTS = 2**20


def flat_loss(module: torch.nn.Module, names: Sequence[str], shapes: Sequence[tuple[int, ...] | torch.Size],
              loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
              ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """``loss(vector, x, y)``: `loss_fn` (default cross-entropy, a mean over the examples) of
    `module` with its parameters `names` (of `shapes`) taken from the flat `vector` in order."""
    import torch
    from torch.func import functional_call

    names, shapes = list(names), [tuple(s) for s in shapes]
    sizes = [int(np.prod(s)) for s in shapes]
    criterion = torch.nn.functional.cross_entropy if loss_fn is None else loss_fn

    def loss(vector: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        parts = {name: part.reshape(shape) for name, part, shape in zip(names, torch.split(vector, sizes), shapes)}
        return criterion(functional_call(module, parts, (x,)), y)

    return loss


def mean_loss_curvature(loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                        flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, hessian: bool = True,
                        what: str = "the model") -> tuple[torch.Tensor | None, torch.Tensor]:
    """The exact Hessian and gradient of ``loss(vector, x, y)`` (a mean over the examples) at
    every row of `flat` (R, P), over all of x (n, ...), y (n,): (R, P, P) and (R, P) float64.

    Computed in float64 (`flat` and `x` cast), vmapped over the rows, the examples in chunks
    whose means are weighted by their share of the n. With ``hessian=False`` only the gradient
    (the Hessian is None). A ValueError naming `what` and its parameter count when P is above
    :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS` and the Hessian is asked for.
    """
    from torch.func import grad, jacfwd, vmap

    flat = flat.double()
    r, p = flat.shape
    if hessian:
        check_hessian_size(p, what)
    xd = x.double() if x.is_floating_point() else x
    gradient = grad(loss)

    def gradient_twice(vector, xb, yb):  # jacfwd's aux: the gradient itself
        g = gradient(vector, xb, yb)
        return g, g

    both = vmap(jacfwd(gradient_twice, has_aux=True), in_dims=(0, None, None))
    only = vmap(gradient, in_dims=(0, None, None))
    n = x.shape[0]
    chunk = max(1, min(n, _CHUNK_ELEMENTS // (r * p)))
    total_h = flat.new_zeros((r, p, p)) if hessian else None
    total_g = flat.new_zeros((r, p))
    for start in range(0, n, chunk):
        xb, yb = xd[start:start + chunk], y[start:start + chunk]
        share = xb.shape[0] / n
        if total_h is not None:
            h, g = both(flat, xb, yb)
            total_h += share * h
        else:
            g = only(flat, xb, yb)
        total_g += share * g
    return total_h, total_g


def hessian_and_gradient(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                         loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                         ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The exact Hessian and gradient of `module`'s mean loss on (x, y) at its current parameters.

    Parameters
    ----------
    module : torch.nn.Module
        The model; its parameters (``named_parameters()``, in that order) are the variables,
        its buffers stay as they are.
    x, y : torch.Tensor
        The examples (n, ...) and targets (n, ...).
    loss_fn : callable, optional
        ``loss_fn(outputs, y) -> scalar``, a mean over the examples; default cross-entropy.

    Returns
    -------
    hessian : ndarray of shape (n_params, n_params)
        Over the parameters flattened in order (each raveled), float64.
    gradient : dict of ndarray
        By parameter name, of the parameter's shape, float64.

    Raises
    ------
    ValueError
        When the model has more than :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS`
        parameters (the message names the count).
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module; got {type(module).__name__}")
    named = [(name, p.detach()) for name, p in module.named_parameters()]
    if not named:
        raise ValueError("`module` has no parameters")
    names, shapes = [n for n, _ in named], [tuple(p.shape) for _, p in named]
    flat = torch.cat([p.reshape(-1).double() for _, p in named])[None]
    size = flat.shape[1]
    loss = flat_loss(module, names, shapes, loss_fn)
    h, g = mean_loss_curvature(loss, flat, torch.as_tensor(x), torch.as_tensor(y),
                               what=f"the {type(module).__name__} model")
    assert h is not None
    gradient, offset = {}, 0
    for name, shape in zip(names, shapes):
        count = int(np.prod(shape))
        gradient[name] = g[0, offset:offset + count].reshape(shape).numpy()
        offset += count
    assert offset == size
    return h[0].numpy(), gradient
