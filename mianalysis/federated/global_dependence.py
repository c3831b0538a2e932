"""Dependence between FL clients that the global model does not explain.

Replicate runs of a federated simulation share nothing but their settings, yet within a
replicate every client starts each round from the same broadcast global model, so the
clients' local models are dependent across replicates mostly through it. Given the
recorded local models and global models (:func:`mianalysis.federated.record_replicates`
with ``record_global=True``), this module measures, per round and pair of clients, the
unconditional MI of the local models, their MI given the global model the round started
from, and the MI of the clients' updates relative to that model.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

import numpy as np
from numpy.typing import ArrayLike

from ..estimators import gaussian_cmi, gaussian_mi

QUANTITIES = ("mi_local", "cmi_given_global", "mi_update")

__all__ = ["dependence_given_global", "QUANTITIES"]


def dependence_given_global(local: Mapping[str, ArrayLike], global_model: ArrayLike, *, units: str = "bits",
                            bias_correction: bool = True, shrinkage: str | None = None) -> list[dict]:
    r"""Per round and pair of clients: MI of the local models, MI given the broadcast
    global model, and MI of the model updates (all with the Gaussian estimator).

    Round ``t`` (``t >= 1``) starts from the global model at checkpoint ``t - 1`` (the
    server's model after round ``t - 1``; checkpoint 0 is the initial model), which the
    clients train to their local models at checkpoint ``t``. With
    :math:`\theta_k^t` client k's local model and :math:`g^{t-1}` that global model:

    - ``mi_local``: :math:`I(\theta_a^t; \theta_b^t)`, what
      :func:`mianalysis.analyze` reports (:func:`mianalysis.gaussian_mi`);
    - ``cmi_given_global``: :math:`I(\theta_a^t; \theta_b^t \mid g^{t-1})`
      (:func:`mianalysis.gaussian_cmi`);
    - ``mi_update``: :math:`I(\theta_a^t - g^{t-1}; \theta_b^t - g^{t-1})`.

    If the recorded vectors hold the whole model, the local trainings of one round are
    independent given the model they start from (each client has its own data and data
    order), so ``cmi_given_global`` is 0 in truth; for part of a model (one layer), the
    rest of the global model is not conditioned on and may leave dependence.

    Parameters
    ----------
    local : mapping of str to array-like of shape (n_checkpoints, n_runs, n_features)
        Each client's local model per checkpoint (round) and run (replicate).
    global_model : array-like of shape (n_checkpoints, n_runs, n_features)
        The global model per checkpoint: at ``t`` the model after round ``t``.
    units : {"bits", "nats"}, default="bits"
    bias_correction : bool, default=True
        As in :func:`mianalysis.gaussian_cmi`.
    shrinkage : {None, "ledoit-wolf"}, default=None
        As in :func:`mianalysis.gaussian_cmi`; without it ``cmi_given_global`` needs
        ``n_runs > 3 n_features`` (the joint dimension). Estimates with shrinkage are
        biased.

    Returns
    -------
    rows : list of dict
        One per round ``t >= 1``, pair (in the order of `local`) and quantity, with keys
        ``iteration`` (t), ``global_checkpoint`` (t - 1), ``client_a``, ``client_b``,
        ``quantity`` (one of :data:`QUANTITIES`), ``value`` (in `units`), ``n_runs``,
        ``n_features``.

    Raises
    ------
    ValueError
        If the arrays are not 3-D or their shapes differ (naming the argument), if there
        are fewer than two checkpoints or two clients, or from the estimators (too few
        runs for the dimension, non-finite values).

    Examples
    --------
    Two clients move from the global model by updates that share one component and are
    independent of the global model: the updates have correlation 1/2, so
    ``mi_update = cmi_given_global = -0.5 log(1 - 1/4) = 0.14`` nats, while the local
    models also share the global model (correlation 2/3, ``mi_local = -0.5 log(1 - 4/9) =
    0.29`` nats):

    >>> import numpy as np
    >>> from mianalysis.federated.global_dependence import dependence_given_global
    >>> rng = np.random.default_rng(0)
    >>> g = rng.standard_normal((2, 50_000, 1))          # checkpoints 0 and 1
    >>> shared, e1, e2 = rng.standard_normal((3, 50_000, 1))
    >>> local = {"a": np.stack([g[0], g[0] + shared + e1]), "b": np.stack([g[0], g[0] + shared + e2])}
    >>> rows = dependence_given_global(local, g, units="nats")
    >>> {r["quantity"]: round(r["value"], 2) for r in rows}   # exact: 0.29, 0.14, 0.14
    {'mi_local': 0.29, 'cmi_given_global': 0.14, 'mi_update': 0.14}
    """
    if len(local) < 2:
        raise ValueError(f"`local` must hold at least two clients; got {len(local)}")
    g = _check_stack(global_model, "global_model")
    if g.shape[0] < 2:
        raise ValueError(f"`global_model` needs at least two checkpoints (rounds 0 and 1); got {g.shape[0]}")
    models = {str(c): _check_stack(v, f"local[{c!r}]", g.shape) for c, v in local.items()}
    rows = []
    for t in range(1, g.shape[0]):
        start = g[t - 1]
        for a, b in combinations(models, 2):
            xa, xb = models[a][t], models[b][t]
            values = {
                "mi_local": gaussian_mi(xa, xb, units=units, bias_correction=bias_correction, shrinkage=shrinkage),
                "cmi_given_global": gaussian_cmi(xa, xb, start, units=units, bias_correction=bias_correction,
                                                 shrinkage=shrinkage),
                "mi_update": gaussian_mi(xa - start, xb - start, units=units, bias_correction=bias_correction,
                                         shrinkage=shrinkage),
            }
            for q in QUANTITIES:
                rows.append({"iteration": t, "global_checkpoint": t - 1, "client_a": a, "client_b": b,
                             "quantity": q, "value": values[q], "n_runs": g.shape[1], "n_features": g.shape[2]})
    return rows


def _check_stack(a, name, shape=None):
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 3:
        raise ValueError(f"`{name}` must be a 3-D array (n_checkpoints, n_runs, n_features); got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"`{name}` must have the shape of `global_model` {shape}; got {arr.shape}")
    return arr
