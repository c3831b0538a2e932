"""Aggregation rules: pure functions over stacked client vectors.

Every rule takes ``stacked`` of shape (n_clients, n_params) -- client parameters, updates
or gradients, one row per client -- and optional ``weights`` of shape (n_clients,)
(usually each client's number of examples), and returns one vector (n_params,). Leading
batch dimensions are allowed, (..., n_clients, n_params) -> (..., n_params): the rule is
applied to each batch entry on its own (the simulator uses this for replicate runs).
NumPy arrays in give NumPy arrays out; torch tensors give tensors.

Weights generalise every rule so that an integer weight w is the same as repeating that
client w times; equal weights are the unweighted rule.

References
----------
H. B. McMahan et al., "Communication-efficient learning of deep networks from
decentralized data", AISTATS 2017 (FedSGD, FedAvg).
D. Yin et al., "Byzantine-robust distributed learning: towards optimal statistical
rates", ICML 2018 (coordinate-wise median and trimmed mean).
G. Parascandolo et al., "Learning explanations that are hard to vary", ICLR 2021
(AND-mask, geometric-mean mask).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._validation import check_choice, check_flag, check_real

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = [
    "EPS", "fedavg", "fedsgd", "median", "trimmed_mean", "and_mask", "geometric_mask", "AGGREGATORS",
    "get_aggregator"
]

EPS = 1e-10


def _prepare(stacked, weights):
    """(tensor (n, p) float64, weights tensor (n,) or None, to_output) with checks."""
    import torch

    is_numpy = not torch.is_tensor(stacked)
    if is_numpy:
        arr = np.asarray(stacked)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"`stacked` must be numeric; got dtype {arr.dtype}")
        x = torch.as_tensor(arr, dtype=torch.float64)
    else:
        x = stacked if stacked.is_floating_point() else stacked.double()
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim < 2 or x.shape[-2] == 0 or x.shape[-1] == 0:
        raise ValueError(f"`stacked` must have shape (n_clients, n_params) with both > 0; got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"`stacked` contains {int((~torch.isfinite(x)).sum())} non-finite values")
    w = None
    if weights is not None:
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64) if not torch.is_tensor(weights) else weights,
                            dtype=x.dtype)
        if w.shape != (x.shape[-2],):
            raise ValueError(f"`weights` must have shape ({x.shape[-2]},), one per client; got {tuple(w.shape)}")
        if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError("`weights` must be finite, >= 0 and not all 0")

    def out(result):
        return result.numpy() if is_numpy else result.to(stacked.dtype if stacked.is_floating_point() else result.dtype)

    return x, w, out


def _mean(x, w):
    if w is None:
        return x.mean(-2)
    return (w[:, None] * x).sum(-2) / w.sum()


def fedavg(stacked: ArrayLike | torch.Tensor, weights: ArrayLike | torch.Tensor | None = None
           ) -> np.ndarray | torch.Tensor:
    """Weighted mean of the clients' parameters (or updates): sum_k w_k x_k / sum_k w_k.

    FedAvg (McMahan et al. 2017) weights each client by its number of examples.
    """
    x, w, out = _prepare(stacked, weights)
    return out(_mean(x, w))


def fedsgd(stacked: ArrayLike | torch.Tensor, weights: ArrayLike | torch.Tensor | None = None
           ) -> np.ndarray | torch.Tensor:
    """Weighted mean of the clients' gradients, which the server applies as one step.

    The same arithmetic as :func:`fedavg`, applied to gradients (FedSGD, McMahan et al.).
    """
    x, w, out = _prepare(stacked, weights)
    return out(_mean(x, w))


def median(stacked: ArrayLike | torch.Tensor, weights: ArrayLike | torch.Tensor | None = None
           ) -> np.ndarray | torch.Tensor:
    """Coordinate-wise (weighted) median.

    With weights, the median of the multiset in which client k appears with weight w_k:
    the mean of the lower weighted median (smallest value whose cumulative weight reaches
    half the total) and the upper one (smallest value whose cumulative weight exceeds
    half). For an even number of equally weighted clients this is NumPy's median (the mean
    of the two middle values).
    """
    import torch

    x, w, out = _prepare(stacked, weights)
    if w is None:
        w = torch.ones(x.shape[-2], dtype=x.dtype)
    values, order = torch.sort(x.movedim(-2, -1).contiguous(), dim=-1)  # (..., P, K)
    cum = torch.cumsum(w[order], dim=-1)
    half = torch.full(cum.shape[:-1] + (1,), float(w.sum() / 2), dtype=x.dtype)
    last = x.shape[-2] - 1
    lo = values.gather(-1, torch.searchsorted(cum, half).clamp(max=last))
    hi = values.gather(-1, torch.searchsorted(cum, half, right=True).clamp(max=last))
    return out(((lo + hi) / 2).squeeze(-1))


def trimmed_mean(stacked: ArrayLike | torch.Tensor, beta: float = 0.1,
                 weights: ArrayLike | torch.Tensor | None = None) -> np.ndarray | torch.Tensor:
    """Coordinate-wise trimmed mean: drop a fraction `beta` of the total weight from each
    end of every coordinate's sorted values, average the rest (weighted).

    Trimming is exact in weight (a client on the boundary keeps the part of its weight
    that is not trimmed), so integer weights equal repeated clients. When
    ``beta * n_clients`` is an integer and clients are unweighted this is
    ``scipy.stats.trim_mean(stacked, beta)``.

    Parameters
    ----------
    beta : float in [0, 0.5)
    """
    import torch

    beta = check_real(beta, "beta", low=0, high=0.5, high_open=True)
    x, w, out = _prepare(stacked, weights)
    if w is None:
        w = torch.ones(x.shape[-2], dtype=x.dtype)
    values, order = torch.sort(x, dim=-2)
    ws = w[order]  # weights in sorted order
    total = w.sum()
    cut = beta * total
    upper_edge = torch.cumsum(ws, dim=-2)
    lower_edge = upper_edge - ws
    # Weight of each sorted entry that lies inside [cut, total - cut].
    kept = (torch.minimum(upper_edge, total - cut) - torch.maximum(lower_edge, cut)).clamp(min=0)
    return out((kept * values).sum(-2) / kept.sum(-2))


def _agreement_mask(x, w, threshold):
    import torch

    threshold = check_real(threshold, "threshold", low=0, high=1)
    agreement = _mean(torch.sign(x), w).abs()
    return (agreement >= threshold).to(x.dtype)


def _rescale(masked, mask, rescale):
    return masked / (mask.mean(-1, keepdim=True) + EPS) if rescale else masked


def and_mask(grads: ArrayLike | torch.Tensor, threshold: float = 0.2, rescale: bool = True,
             weights: ArrayLike | torch.Tensor | None = None) -> np.ndarray | torch.Tensor:
    """AND-mask: the (weighted) mean gradient where the clients' signs agree.

    ``mask = |mean_k sign(g_k)| >= threshold`` per coordinate (weighted mean of the signs
    with weights), ``result = mask * mean_k g_k``, divided by ``mean(mask) + 1e-10`` when
    `rescale` (so that masking does not shrink the step). Parascandolo et al. 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import and_mask
    >>> and_mask(np.array([[1.0, 3, 5], [0, 3, -5]]), threshold=0.2)
    array([0.75, 4.5 , 0.  ])
    """
    rescale = check_flag(rescale, "rescale")
    x, w, out = _prepare(grads, weights)
    mask = _agreement_mask(x, w, threshold)
    return out(_rescale(mask * _mean(x, w), mask, rescale))


def geometric_mask(grads: ArrayLike | torch.Tensor, threshold: float = 0.2, rescale: bool = True,
                   weights: ArrayLike | torch.Tensor | None = None) -> np.ndarray | torch.Tensor:
    """Geometric-mean mask: a signed geometric mean of the gradients where signs agree.

    ``geo = sign(mean_k g_k) * exp(mean_k log|g_k + 1e-10|)`` (weighted means with
    weights), masked and rescaled as in :func:`and_mask`.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import geometric_mask
    >>> geometric_mask(np.array([[1.0, 3, 5], [0, 3, -5]]), threshold=0.2)
    array([1.5e-05, 4.5e+00, 0.0e+00])
    """
    import torch

    rescale = check_flag(rescale, "rescale")
    x, w, out = _prepare(grads, weights)
    mask = _agreement_mask(x, w, threshold)
    geo = torch.sign(_mean(x, w)) * torch.exp(_mean(torch.log(torch.abs(x + EPS)), w))
    return out(_rescale(mask * geo, mask, rescale))


AGGREGATORS = {
    "fedavg": fedavg,
    "fedsgd": fedsgd,
    "median": median,
    "trimmed_mean": trimmed_mean,
    "and_mask": and_mask,
    "geometric_mask": geometric_mask,
}


def get_aggregator(name: str, **params: float | bool) -> Callable[..., np.ndarray | torch.Tensor]:
    """The rule called `name`, with `params` (e.g. ``threshold``, ``beta``) bound.

    Returns a function ``(stacked, weights=None) -> vector``.
    """
    check_choice(name, "aggregator", sorted(AGGREGATORS))
    rule = AGGREGATORS[name]

    def aggregate(stacked, weights=None):
        return rule(stacked, weights=weights, **params)

    aggregate.__name__ = name
    return aggregate
