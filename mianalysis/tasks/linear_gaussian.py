"""Exact covariances and MI of two linear Gaussian recursions (gaussian-sgd's closed form).

Pure NumPy in float64; nothing here knows of PyTorch, dumps or files.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["cross_covariances", "gaussian_mi_from_blocks"]


def cross_covariances(prop_a: ArrayLike, prop_b: ArrayLike, n_iterations: int, *, start: float = 0.0,
                      target: float = 0.0, noise: float = 0.0) -> np.ndarray:
    """Covariances Cov(theta_a(t), theta_b(t)) of two linear recursions, t = 0..n_iterations.

    Each client follows ``theta(t+1) = P theta(t) + (I - P) mu - e(t)`` from ``theta(0)``
    (plain gradient descent on ``0.5 (theta - mu)^T A (theta - mu)`` with ``P = I - eta A``
    and gradient noise ``e``). With ``Cov(theta_a(0), theta_b(0)) = start I``,
    ``Cov(mu_a, mu_b) = target I``, ``Cov(e_a(s), e_b(s)) = noise I`` at every step, and
    nothing else correlated,

    ``C(t) = start Pa^t Pb^t' + target (I - Pa^t)(I - Pb^t)' + noise sum_{j<t} Pa^j Pb^j'``,

    computed by the recursion ``N(t+1) = I + Pa N(t) Pb'`` for the sum. With ``prop_a`` equal
    to ``prop_b`` and the variances as coefficients this is one client's covariance.

    Parameters
    ----------
    prop_a, prop_b : array-like of shape (d, d)
        Propagators ``I - eta A`` of the two clients.
    n_iterations : int
    start, target, noise : float, default=0.0
        Covariance coefficients of the initial points, the targets and the gradient noise.

    Returns
    -------
    ndarray of shape (n_iterations + 1, d, d)

    Examples
    --------
    A scalar client with P = 0.5 and unit noise: variance 0, 1, 1 + 0.25, 1 + 0.25 + 0.0625.

    >>> from mianalysis.tasks.linear_gaussian import cross_covariances
    >>> cross_covariances([[0.5]], [[0.5]], 3, noise=1.0).ravel().tolist()
    [0.0, 1.0, 1.25, 1.3125]
    """
    pa = np.asarray(prop_a, dtype=np.float64)
    pb = np.asarray(prop_b, dtype=np.float64)
    if pa.ndim != 2 or pa.shape[0] != pa.shape[1] or pa.shape != pb.shape:
        raise ValueError(f"`prop_a` and `prop_b` must be square matrices of one shape; got {pa.shape} and {pb.shape}")
    eye = np.eye(pa.shape[0])
    pow_a, pow_b, total = eye.copy(), eye.copy(), np.zeros_like(eye)
    out = []
    for _ in range(int(n_iterations) + 1):
        out.append(start * pow_a @ pow_b.T + target * (eye - pow_a) @ (eye - pow_b).T + noise * total)
        total = eye + pa @ total @ pb.T
        pow_a, pow_b = pa @ pow_a, pb @ pow_b
    return np.stack(out)


def gaussian_mi_from_blocks(cov_aa: ArrayLike, cov_bb: ArrayLike, cov_ab: ArrayLike, *, rcond: float = 1e-12) -> float:
    """MI in bits between jointly Gaussian vectors with the given covariance blocks.

    ``I = 0.5 (logdet C_aa + logdet C_bb - logdet C) / ln 2`` with C the joint covariance.
    Exactly 0 when the cross-covariance is zero; infinite when the joint covariance is
    singular (an eigenvalue below `rcond` times the largest) while the cross-covariance is
    not zero, e.g. two clients with one random start before any step.

    Examples
    --------
    Unit variances and correlation 0.6 in one dimension: -0.5 log2(1 - 0.36) = 0.3219 bits.

    >>> from mianalysis.tasks.linear_gaussian import gaussian_mi_from_blocks
    >>> round(gaussian_mi_from_blocks([[1.0]], [[1.0]], [[0.6]]), 4)
    0.3219
    """
    caa, cbb, cab = (np.atleast_2d(np.asarray(c, dtype=np.float64)) for c in (cov_aa, cov_bb, cov_ab))
    if not cab.any():
        return 0.0
    joint = np.block([[caa, cab], [cab.T, cbb]])
    eig = np.linalg.eigvalsh(joint)
    if eig[0] <= rcond * eig[-1]:
        return float("inf")
    logdet = lambda c: np.linalg.slogdet(c)[1]  # noqa: E731
    return float(max(0.0, 0.5 * (logdet(caa) + logdet(cbb) - np.sum(np.log(eig))) / np.log(2)))
