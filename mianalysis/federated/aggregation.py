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
M. Matena and C. Raffel, "Merging models with Fisher-weighted averaging", NeurIPS 2022
(diagonal Fisher merging: :func:`fisher_weighted`).
M. Al-Shedivat et al., "Federated learning via posterior averaging: a new perspective and
practical algorithms", ICLR 2021 (FedPA: :func:`inverse_variance` is its diagonal form).
X. Jin et al., "Dataless knowledge fusion by merging weights of language models", ICLR 2023
(RegMean, the per-layer Gram-matrix generalisation; not implemented here).

Curvature rules (:func:`fisher_weighted`, :func:`inverse_variance`) take one more array
from every client, of the shape of `stacked`: its per-coordinate precision (or variance).
The full-curvature rules (:func:`fisher_full`, :func:`newton_merge`) take each client's full
Hessian, (n_params, n_params) per client, and :func:`newton_merge` also its gradient; they
are for small models (:data:`MAX_HESSIAN_PARAMS`).

The rules by name, with their parameters, display names and side information, are the
entries of :mod:`mianalysis.federated.registry` (``get_rule(name).bind(params)`` gives a rule
with its settings bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .._internal.validation import check_flag, check_real

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["EPS", "MAX_HESSIAN_PARAMS", "fedavg", "fedsgd", "median", "trimmed_mean", "and_mask", "geometric_mask",
           "fisher_weighted", "inverse_variance", "fisher_full", "newton_merge", "check_hessian_size"]

EPS = 1e-10

#: The most parameters a model may have for the full-curvature rules (:func:`fisher_full`,
#: :func:`newton_merge`): each client's Hessian is n_params x n_params (2,048 parameters: 32 MiB
#: in float64 per client and replicate).
MAX_HESSIAN_PARAMS = 2048


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


def _as_side_tensor(values, x, name):
    """A client-side array (precisions, Hessians, ...) as a tensor of x's dtype; TypeError if
    it is not numeric."""
    import torch

    if torch.is_tensor(values):
        return values.to(x.dtype)
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"`{name}` must be numeric; got dtype {arr.dtype}")
    return torch.as_tensor(arr if arr.flags.writeable else arr.copy(), dtype=x.dtype)


def _side_array(values, x, name):
    """A client-side array (precisions, variances) of the shape of `x`, as x's dtype."""
    import torch

    v = _as_side_tensor(values, x, name)
    if v.ndim == 1 and x.shape[-1] == 1:  # one parameter per client, as `stacked` allows
        v = v[:, None]
    if v.shape != x.shape:
        raise ValueError(f"`{name}` must have the shape of `stacked`, {tuple(x.shape)} (one value per client and "
                         f"coordinate); got {tuple(v.shape)}")
    if torch.isnan(v).any() or (v < 0).any():
        raise ValueError(f"`{name}` must be >= 0 (and not NaN) for every client and coordinate; got "
                         f"{int((torch.isnan(v) | (v < 0)).sum())} values that are not")
    return v


def _precision_weighted(x, precision, w):
    """sum_k w_k p_k x_k / sum_k w_k p_k per coordinate, with p scaled by its largest value
    over the clients (equal precisions are weight 1 exactly, so the rule is the weighted
    mean); where some precision is infinite, the weighted mean of those clients; where all
    are 0, the weighted mean of all.

    A client of weight 0 is absent (as an integer weight is that many copies of the client),
    whatever its precision: the largest precision and the clients of infinite precision are
    those of the clients of weight > 0. So a coordinate whose only certain (or only informed)
    client has weight 0 is the rule over the others, never 0 / 0 (NaN)."""
    import torch

    if w is not None:  # precision of an absent client: 0 (0 * inf would be NaN)
        precision = torch.where(w[:, None] > 0, precision, torch.zeros_like(precision))
    top = precision.amax(-2, keepdim=True)
    infinite = torch.isinf(top)
    scaled = torch.where(top > 0, precision / torch.where(top > 0, top, torch.ones_like(top)),
                         torch.ones_like(precision))
    scaled = torch.where(infinite, torch.isinf(precision).to(x.dtype), scaled)
    # Every coordinate has a client of weight > 0 and scaled precision 1 (the largest, one of
    # the infinite ones, or all where all are 0): the denominator is > 0.
    q = scaled if w is None else w[:, None] * scaled
    return (q * x).sum(-2) / q.sum(-2)


def fisher_weighted(stacked: ArrayLike | torch.Tensor, precisions: ArrayLike | torch.Tensor,
                    weights: ArrayLike | torch.Tensor | None = None, eps: float = 1e-8
                    ) -> np.ndarray | torch.Tensor:
    """Diagonal Fisher merging: per coordinate ``sum_k w_k F_k x_k / sum_k w_k F_k``.

    Each client's coordinate counts in proportion to its precision there (its diagonal
    Fisher information, per example; with `weights` = numbers of examples, ``w_k F_k`` is
    the client's total Fisher). This is the mode of the product of the clients' diagonal
    Gaussian (Laplace) posteriors, the model that repairs clients whose optima differ along
    directions of different curvature (Matena & Raffel 2022). Averaging is the special case
    of equal precisions.

    Parameters
    ----------
    stacked : array (..., n_clients, n_params)
        The clients' models (or model updates: the weights sum to one per coordinate, so
        combining updates gives the same step).
    precisions : array of the shape of `stacked`
        F_k >= 0 per client and coordinate; ``inf`` means certain (the clients with infinite
        precision at a coordinate share it, weighted by `weights`).
    weights : array (n_clients,), optional
        w_k >= 0, not all 0. A client of weight 0 is left out, whatever its precision (an
        integer weight is that many copies of the client, 0 none): where the only clients
        with infinite (or any nonzero) precision at a coordinate have weight 0, that
        coordinate is the rule over the other clients (their precision-weighted mean, or
        their weighted mean where all their precisions there are 0), not NaN.
    eps : float >= 0, default 1e-8
        Damping added to every precision, ``F_k + eps``: where all clients' F_k are much
        below `eps` the rule is the plain weighted mean (where they are all exactly 0 it is
        so for any `eps`).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import fisher_weighted
    >>> fisher_weighted(np.array([[0.0, 2.0], [4.0, 6.0]]), np.array([[1.0, 0.0], [3.0, 0.0]]), eps=0)
    array([3., 4.])
    """
    eps = check_real(eps, "eps", low=0)
    x, w, out = _prepare(stacked, weights)
    precision = _side_array(precisions, x, "precisions") + eps
    return out(_precision_weighted(x, precision, w))


def inverse_variance(stacked: ArrayLike | torch.Tensor, variances: ArrayLike | torch.Tensor,
                     weights: ArrayLike | torch.Tensor | None = None, eps: float = 1e-12
                     ) -> np.ndarray | torch.Tensor:
    """Inverse-variance weighting: :func:`fisher_weighted` with precisions ``1 / (var_k + eps)``.

    The diagonal form of FedPA's posterior averaging (Al-Shedivat et al. 2021): each client
    estimates its local posterior's variance per coordinate from its own SGD iterates, and
    the server takes the mode of the product of the diagonal Gaussians.

    Parameters
    ----------
    stacked : array (..., n_clients, n_params)
    variances : array of the shape of `stacked`
        var_k >= 0 per client and coordinate.
    weights : array (n_clients,), optional
        w_k >= 0, not all 0; a client of weight 0 is left out, as in
        :func:`fisher_weighted` (a coordinate where only clients of weight 0 have variance
        0 with ``eps=0`` is the inverse-variance mean of the others, not NaN).
    eps : float >= 0, default 1e-12
        A floor added to every variance. With ``eps=0`` a client with variance 0 at a
        coordinate has infinite precision there and takes it alone (shared with the
        others of variance 0); a coordinate that did not move on a client (no gradient
        there, e.g. an input pixel that is always 0 in its data) counts as certain, so
        keep `eps` on the scale of the variances where that matters.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import inverse_variance
    >>> inverse_variance(np.array([[0.0, 2.0], [4.0, 6.0]]), np.array([[3.0, 1.0], [1.0, 1.0]]), eps=0)
    array([3., 4.])
    """
    import torch

    eps = check_real(eps, "eps", low=0)
    x, w, out = _prepare(stacked, weights)
    variance = _side_array(variances, x, "variances") + eps
    precision = torch.where(variance > 0, 1 / variance, torch.full_like(variance, float("inf")))
    return out(_precision_weighted(x, precision, w))


def check_hessian_size(n_params: int, what: str = "the model", limit: int = MAX_HESSIAN_PARAMS) -> int:
    """Return `n_params`, or raise a one-line ValueError when a full Hessian of that many
    parameters (an n_params x n_params matrix per client) is above `limit`.

    `what` names the model in the message ("the mlp model", "the global model").
    """
    if n_params > limit:
        raise ValueError(f"a full Hessian of {what} is {n_params:,} x {n_params:,}: {what} has {n_params:,} "
                         f"parameters, more than the limit of {limit:,} for the full-curvature rules ('fisher_full', "
                         "'newton_merge'); use 'fisher' (the diagonal) or a smaller model")
    return n_params


def _side_matrices(values, x, name):
    """Each client's (P, P) matrix (the Hessians) for `x` (..., K, P), as float64, finite."""
    import torch

    h = _as_side_tensor(values, x, name)
    expected = tuple(x.shape) + (x.shape[-1],)
    if tuple(h.shape) != expected:
        raise ValueError(f"`{name}` must have shape {expected}, one (n_params, n_params) matrix per client of "
                         f"`stacked` {tuple(x.shape)}; got {tuple(h.shape)}")
    if not torch.isfinite(h).all():
        raise ValueError(f"`{name}` contains {int((~torch.isfinite(h)).sum())} non-finite values")
    return h


def _side_vectors(values, x, name):
    """Each client's vector (the gradients) of the shape of `x`, as float64, finite."""
    import torch

    v = _as_side_tensor(values, x, name)
    if v.ndim == 1 and x.shape[-1] == 1:
        v = v[:, None]
    if v.shape != x.shape:
        raise ValueError(f"`{name}` must have the shape of `stacked`, {tuple(x.shape)} (one vector per client); got "
                         f"{tuple(v.shape)}")
    if not torch.isfinite(v).all():
        raise ValueError(f"`{name}` contains {int((~torch.isfinite(v)).sum())} non-finite values")
    return v


def _curvature_solve(x, hessians, w, eps, gradients=None):
    """``(sum_k w_k (H_k + eps I))^-1 sum_k w_k ((H_k + eps I) x_k - g_k)`` in float64 (g = 0
    without `gradients`); x (..., K, P), hessians (..., K, P, P)."""
    import torch

    p = x.shape[-1]
    damped = hessians + eps * torch.eye(p, dtype=x.dtype)
    q = torch.ones(x.shape[-2], dtype=x.dtype) if w is None else w
    total = (q[:, None, None] * damped).sum(-3)  # (..., P, P)
    moved = (damped @ x[..., None])[..., 0]  # (..., K, P): (H_k + eps I) x_k
    if gradients is not None:
        moved = moved - gradients
    rhs = (q[:, None] * moved).sum(-2)
    solution, info = torch.linalg.solve_ex(total, rhs)
    if (info != 0).any():
        raise ValueError("the clients' summed Hessian sum_k w_k (H_k + eps I) is singular; give `eps` > 0")
    if not torch.isfinite(solution).all():
        raise ValueError("the clients' summed Hessian sum_k w_k (H_k + eps I) is too close to singular (the "
                         "solution is not finite); give a larger `eps`")
    return solution


def _full_curvature_iv(stacked, weights, eps):
    """(x float64, w, out, eps) for the full-curvature rules."""
    eps = check_real(eps, "eps", low=0)
    x, w, out = _prepare(stacked, weights)
    return x.double(), None if w is None else w.double(), out, eps


def fisher_full(stacked: ArrayLike | torch.Tensor, hessians: ArrayLike | torch.Tensor,
                weights: ArrayLike | torch.Tensor | None = None, eps: float = 1e-8) -> np.ndarray | torch.Tensor:
    """Fisher merging with full curvature: ``(sum_k w_k H_k)^-1 sum_k w_k H_k x_k``.

    Each client's model counts with the matrix weight ``(sum_j w_j H_j)^-1 w_k H_k``, H_k the
    Hessian (or Fisher) of the client's own objective: the mode of the product of the
    clients' Gaussian (Laplace) posteriors with full covariances, the model that minimises
    ``sum_k w_k (x - x_k)^T H_k (x - x_k) / 2`` (Matena & Raffel 2022 use its diagonal,
    :func:`fisher_weighted`; this is its full form). With diagonal H_k it is
    :func:`fisher_weighted` with precisions diag(H_k); with equal H_k (any x_k) it is the
    weighted mean, :func:`fedavg`. The matrix weights sum to the identity, so combining model
    updates ``x_k - x`` instead of models gives the same model ``x + result``.

    Parameters
    ----------
    stacked : array (..., n_clients, n_params)
        The clients' models (or their updates from a common model).
    hessians : array (..., n_clients, n_params, n_params)
        H_k per client, computed by the client at its own model (symmetric; positive
        semi-definite for a convex objective).
    weights : array (n_clients,), optional
        w_k >= 0, not all 0 (numbers of examples); None: equal. A client of weight 0 is left out.
    eps : float >= 0, default 1e-8
        Damping, ``H_k + eps I``: along directions where every H_k is ~0 the rule is the
        weighted mean. With ``eps=0`` the summed Hessian must be invertible.

    Returns
    -------
    array (..., n_params)
        NumPy in, NumPy out; torch in, torch out (of `stacked`'s dtype; computed in float64).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import fisher_full
    >>> fisher_full(np.array([[0.0, 2.0], [4.0, 6.0]]), np.array([np.diag([1.0, 1.0]), np.diag([3.0, 1.0])]), eps=0)
    array([3., 4.])
    """
    x, w, out, eps = _full_curvature_iv(stacked, weights, eps)
    h = _side_matrices(hessians, x, "hessians")
    return out(_curvature_solve(x, h, w, eps))


def newton_merge(stacked: ArrayLike | torch.Tensor, hessians: ArrayLike | torch.Tensor,
                 gradients: ArrayLike | torch.Tensor, weights: ArrayLike | torch.Tensor | None = None,
                 eps: float = 1e-8) -> np.ndarray | torch.Tensor:
    """Newton-corrected merge: ``(sum_k w_k H_k)^-1 sum_k w_k (H_k x_k - g_k)``.

    The minimiser of the sum of the clients' local quadratic models
    ``sum_k w_k [g_k^T (x - x_k) + (x - x_k)^T H_k (x - x_k) / 2]``, with g_k and H_k the
    gradient and Hessian of client k's own objective at its own model x_k: one Newton step
    on the federation's objective built from what each client knows about its own. For
    quadratic client objectives it is the pooled optimum exactly, from any client models;
    with every g_k = 0 (clients at their own optima) it is :func:`fisher_full`. It is not a
    linear combination of the clients' models: identical clients (same x_k, g_k, H_k) give
    ``x_k - H_k^-1 g_k``, the client's Newton step, which is the mean only where g_k = 0.

    The rule is translation-equivariant (``rule(x_k + t) = rule(x_k) + t``: the matrix
    weights sum to the identity and g_k does not move), so applied to model updates
    ``d_k = x_k - x`` (with g_k still each client's gradient at its own model x_k) it gives
    the step that takes x to the same model: ``x + rule(d) = rule(x_k)``.

    Parameters
    ----------
    stacked : array (..., n_clients, n_params)
        The clients' models x_k (or their updates from a common model).
    hessians : array (..., n_clients, n_params, n_params)
        H_k: the Hessian of client k's objective (the mean loss over its examples) at x_k.
    gradients : array (..., n_clients, n_params)
        g_k: the gradient of client k's objective at x_k.
    weights : array (n_clients,), optional
        w_k >= 0, not all 0, the weights of the clients' objectives in the federation's
        (numbers of examples); None: equal. A client of weight 0 is left out.
    eps : float >= 0, default 1e-8
        Damping, ``H_k + eps I`` in both places: the minimiser of the quadratic models plus
        ``eps |x - x_k|^2 / 2`` for each client. With ``eps=0`` the summed Hessian must be
        invertible. Where the summed Hessian is indefinite (a non-convex loss) the result
        is the quadratic models' stationary point, not a minimiser: damp it.

    Returns
    -------
    array (..., n_params)

    Examples
    --------
    Two clients with losses ``(x - 1)^2 / 2`` and ``3 (x - 5)^2 / 2``, each anywhere: their
    pooled optimum is (1 + 15) / 4 = 4.

    >>> import numpy as np
    >>> from mianalysis.federated.aggregation import newton_merge
    >>> x = np.array([[0.0], [7.0]])
    >>> newton_merge(x, np.array([[[1.0]], [[3.0]]]), np.array([[0.0 - 1], [3 * (7.0 - 5)]]), eps=0)
    array([4.])
    """
    x, w, out, eps = _full_curvature_iv(stacked, weights, eps)
    h = _side_matrices(hessians, x, "hessians")
    g = _side_vectors(gradients, x, "gradients")
    return out(_curvature_solve(x, h, w, eps, g))
