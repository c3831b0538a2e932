"""The client side of the full-curvature rules: a PyTorch model's Hessian and gradient as records."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Array, ArrayRecord

from ..federated.curvature import hessian_and_gradient
from ..federated.registry import SIDE_INFORMATION

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["curvature_records"]


def curvature_records(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                      loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                      gradient: bool = True) -> dict[str, ArrayRecord]:
    """The ArrayRecords a ClientApp adds to its reply for ``FedRule("fisher_full")`` or
    ``FedRule("newton_merge")``: its model's exact Hessian and gradient on its own data.

    Both are of the mean loss over the client's examples (x, y) at the model's current
    parameters (call it after local training), computed in float64 with ``torch.func``
    (:func:`mianalysis.federated.curvature.hessian_and_gradient`). The variables are the
    model's parameters (``named_parameters()``, in that order): the global model the server
    sends must hold exactly these arrays, in this order (``ArrayRecord(model.state_dict())``
    of a model without buffers).

    Parameters
    ----------
    model : torch.nn.Module
        The client's trained model.
    x, y : torch.Tensor
        The client's examples and targets.
    loss_fn : callable, optional
        ``loss_fn(outputs, y) -> scalar``, a mean over the examples (the objective the client
        trains); default cross-entropy.
    gradient : bool, default=True
        Also return the gradient record ("newton_merge" needs it; "fisher_full" does not).

    Returns
    -------
    dict of ArrayRecord
        ``{"hessian": ArrayRecord({"hessian": (P, P)}), "gradient": ArrayRecord(by parameter
        name, of its shape)}`` (the names :class:`~mianalysis.flower.FedRule` reads by
        default), float64: ``content.update(curvature_records(model, x, y))``.

    Raises
    ------
    ValueError
        For a model above :data:`~mianalysis.federated.aggregation.MAX_HESSIAN_PARAMS`
        parameters (a full Hessian is P x P), naming its parameter count.
    """
    hessian, grads = hessian_and_gradient(model, x, y, loss_fn=loss_fn)
    name = SIDE_INFORMATION["hessians"].record
    out = {name: ArrayRecord({name: Array(np.ascontiguousarray(hessian))})}
    if gradient:
        out[SIDE_INFORMATION["gradients"].record] = ArrayRecord(
            {key: Array(np.ascontiguousarray(value)) for key, value in grads.items()})
    return out
