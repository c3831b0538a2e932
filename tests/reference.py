"""Plain NumPy/SciPy reference implementations, written for clarity, not speed."""

import numpy as np
from scipy.spatial.distance import cdist
from scipy.special import digamma


def ksg_reference(x, y, k, algorithm):
    """Kraskov et al. 2004, eqs. 8 and 9, in nats, by full distance matrices."""
    x = np.asarray(x, float).reshape(len(x), -1)
    y = np.asarray(y, float).reshape(len(y), -1)
    n = len(x)
    dx = cdist(x, x, "chebyshev")
    dy = cdist(y, y, "chebyshev")
    dz = np.maximum(dx, dy)
    np.fill_diagonal(dz, np.inf)
    order = np.argsort(dz, axis=1, kind="stable")[:, :k]
    rows = np.arange(n)[:, None]
    off_diagonal = ~np.eye(n, dtype=bool)
    if algorithm == 1:
        eps = dz[rows, order][:, -1:]
        nx = ((dx < eps) & off_diagonal).sum(axis=1)
        ny = ((dy < eps) & off_diagonal).sum(axis=1)
        return digamma(k) + digamma(n) - np.mean(digamma(nx + 1) + digamma(ny + 1))
    eps_x = dx[rows, order].max(axis=1, keepdims=True)
    eps_y = dy[rows, order].max(axis=1, keepdims=True)
    nx = ((dx <= eps_x) & off_diagonal).sum(axis=1)
    ny = ((dy <= eps_y) & off_diagonal).sum(axis=1)
    return digamma(k) - 1 / k + digamma(n) - np.mean(digamma(nx) + digamma(ny))


def gaussian_mi_exact(cov, dx):
    """Exact MI in nats of a zero-mean Gaussian with covariance `cov`, X = first dx dims."""
    logdet = lambda m: np.linalg.slogdet(m)[1]  # noqa: E731
    return 0.5 * (logdet(cov[:dx, :dx]) + logdet(cov[dx:, dx:]) - logdet(cov))


def correlated_gaussians(n, dx, dy, rho, rng):
    """x ~ N(0, I_dx); y_j = rho x_j + sqrt(1 - rho^2) e_j for j < min(dx, dy), else noise.

    Returns x, y and the exact MI in nats: -0.5 min(dx, dy) log(1 - rho^2).
    """
    x = rng.standard_normal((n, dx))
    y = rng.standard_normal((n, dy))
    m = min(dx, dy)
    y[:, :m] = rho * x[:, :m] + np.sqrt(1 - rho**2) * y[:, :m]
    return x, y, -0.5 * m * np.log(1 - rho**2)
