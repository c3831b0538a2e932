"""Gradient-noise diagnostics."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._internal.validation import check_samples

__all__ = ["eb_criterion"]


def eb_criterion(per_example_grads: ArrayLike) -> float:
    r"""Evidence-based (EB) criterion of Mahsereci et al. (2017) for early stopping
    without a validation set.

    .. math::

        \mathrm{EB} = 1 - \frac{B}{D} \sum_{k=1}^{D} \frac{\bar g_k^2}{\hat\sigma_k^2}

    where :math:`\bar g_k` is the mean over the B samples of gradient component k and
    :math:`\hat\sigma_k^2` its sample variance (ddof=1). While the mean gradient stands out
    of its noise, EB is negative; when EB > 0 the gradient is no larger than its sampling
    noise (for zero-mean noise its expectation is about 0) and training can stop.

    Parameters
    ----------
    per_example_grads : array-like of shape (B, D)
        One gradient per example (or, across clients, one update per client), B >= 2.

    Returns
    -------
    eb : float
        Components whose B values are all equal carry no noise estimate: those equal to 0
        are skipped; any other makes the signal-to-noise ratio infinite and EB is -inf.

    References
    ----------
    M. Mahsereci, L. Balles, C. Lassner and P. Hennig, "Early stopping without a
    validation set", arXiv:1703.09580 (2017).
    """
    g = check_samples(per_example_grads, "per_example_grads")
    b, d = g.shape
    if b < 2:
        raise ValueError(f"`per_example_grads` needs at least 2 samples (rows) for a variance; got {b}")
    mean = g.mean(axis=0)
    var = g.var(axis=0, ddof=1)
    noiseless = var == 0
    if np.any(noiseless & (mean != 0)):
        return -np.inf
    keep = ~noiseless
    return float(1.0 - (b / d) * np.sum(mean[keep] ** 2 / var[keep]))
