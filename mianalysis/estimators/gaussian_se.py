"""Standard errors of the Gaussian log-determinant MI estimate, without resampling.

Two formulas for the sd of :func:`mianalysis.gaussian_mi` (bias-corrected) of Gaussian
data, in terms of n, the dimensions p and q and the canonical correlations:

- ``"wishart"`` (the default of the level intervals of :mod:`mianalysis.analysis.intervals`):
  with ``m = n - 1`` and ``W`` the scatter matrix, ``2 I = log det W_xx + log det W_yy - log det W``.
  By the Schur complement ``log det W = log det W_xx + log det W_y|x`` with ``W_y|x``
  independent of ``W_xx`` (Anderson 2003, Theorem 7.3.6), so every variance and covariance
  of the three log-determinants is an exact Wishart moment,
  ``V_k(m) = sum_{i<k} psi'((m - i) / 2)`` (Goodman 1963), except the covariance ``C`` of
  ``log det W_xx`` and ``log det W_yy``:

  .. math::

      \\mathrm{Var}\\,\\hat I = \\tfrac14\\left(V_{p+q}(m) - V_p(m) - V_q(m)\\right) + \\tfrac12 C,
      \\qquad C \\approx \\sum_{i<s} \\rho_i^2\\,\\psi'\\!\\left(\\tfrac{m - i}{2}\\right)

  (nats^2, s = min(p, q)). The first term is the exact variance under independence (the
  spread of :func:`mianalysis.gaussian_mi_null`); the approximation of C is exact at
  rho = 0, at rho = 1 (where ``log det W_yy`` repeats ``log det W_xx``) and to first order
  in 1/n, where it is the delta method's ``2 sum rho_i^2 / m``. The squared canonical
  correlations rho_i^2 are the sample ones shrunk so that their MI equals the
  bias-corrected estimate: ``1 - rho_i^2 = (1 - r_i^2) exp(2 b / s)``, b the bias
  correction in nats, clipped to [0, 1] (sample canonical correlations of n ~ 2 (p + q)
  runs are far above the population's).
- ``"asymptotic"``: the delta method on the sample canonical correlations r_i: ``sqrt(n)
  (r_i - rho_i)`` is asymptotically N(0, (1 - rho_i^2)^2), independent over i (Hsu 1941;
  Anderson 2003, Section 12.4), and ``d/dr (-1/2 log(1 - r^2)) = r / (1 - r^2)``, so
  ``Var I = sum_i r_i^2 / n`` nats^2. It is 0 for independent variables (the estimate's
  spread is then of order 1/n, not 1/sqrt(n)) and ignores the finite-n spread of the
  log-determinants, which dominates near n ~ 2 (p + q).

docs/concepts/intervals.md has the coverage of both, and of the bootstrap, on
gaussian-sgd's exact MI (``python experiments/interval_coverage.py``).

References
----------
T. W. Anderson, *An Introduction to Multivariate Statistical Analysis*, 3rd ed., Wiley, 2003.

N. R. Goodman, "Statistical analysis based on a certain multivariate complex Gaussian
distribution", Ann. Math. Statist. 34 (1963) 152-177.

P. L. Hsu, "On the limiting distribution of the canonical correlations", Biometrika 32
(1941) 38-45.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import polygamma

from .._validation import check_choice, check_paired, check_units, drop_constant_features
from .gaussian import wishart_logdet_bias

__all__ = ["SE_METHODS", "gaussian_mi_se", "wishart_mi_se", "canonical_correlations"]

SE_METHODS = ("wishart", "asymptotic")


def canonical_correlations(x: ArrayLike, y: ArrayLike) -> np.ndarray:
    """The min(p, q) sample canonical correlations of `x` (n, p) and `y` (n, q), largest
    first: the singular values of ``R_xx^{-1/2} R_xy R_yy^{-1/2}`` (R the sample correlation
    matrix). A ValueError if a block is singular (constant or linearly dependent columns).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.gaussian_se import canonical_correlations
    >>> x = np.array([[0.0], [1.0], [2.0], [4.0]])
    >>> canonical_correlations(x, -2 * x).round(12).tolist()
    [1.0]
    """
    x, y = check_paired(x, y)
    p = x.shape[1]
    z = np.hstack([x, y])
    z = z - z.mean(axis=0)
    sd = np.sqrt(np.einsum("ij,ij->j", z, z))
    if np.any(sd == 0):
        raise ValueError("canonical correlations need non-constant columns; drop the constant ones")
    z = z / sd
    corr = z.T @ z
    try:
        lx = np.linalg.cholesky(corr[:p, :p])
        ly = np.linalg.cholesky(corr[p:, p:])
    except np.linalg.LinAlgError:
        raise ValueError("canonical correlations need positive definite x and y correlation blocks (more samples "
                         "than features, no linearly dependent columns)") from None
    cross = np.linalg.solve(lx, corr[:p, p:])
    cross = np.linalg.solve(ly, cross.T).T
    return np.clip(np.linalg.svd(cross, compute_uv=False), 0.0, 1.0)


def _wishart_variance(k: int, m: int) -> float:
    """``Var log det W`` nats^2 for W ~ Wishart_k(Sigma, m): ``sum_{i<k} psi'((m - i) / 2)``."""
    return float(polygamma(1, (m - np.arange(k)) / 2.0).sum()) if k else 0.0


def gaussian_mi_se(x: ArrayLike, y: ArrayLike, *, method: str = "wishart", units: str = "bits") -> float:
    """Standard error of :func:`mianalysis.gaussian_mi` (bias-corrected, no shrinkage) of
    Gaussian samples, from a formula rather than resamples (the module docstring has both).

    Parameters
    ----------
    x, y : array-like of shape (n_samples, p) and (n_samples, q)
        Paired samples; constant columns are dropped (with a warning), as the estimate does.
    method : {"wishart", "asymptotic"}, default="wishart"
    units : {"bits", "nats"}, default="bits"

    Returns
    -------
    se : float
        In `units`; 0.0 if no column of `x` or of `y` varies (the estimate is then exactly 0).

    Raises
    ------
    ValueError
        For an unknown `method`, or ``n_samples <= p + q`` (no plain estimate; the
        Ledoit-Wolf one has no such formula).

    Examples
    --------
    Independent x and y: the Wishart se is the exact sd of the estimate under independence,
    ``gaussian_mi_null(...).std``, when no sample canonical correlation exceeds what the
    bias correction accounts for.

    >>> import numpy as np
    >>> from mianalysis import gaussian_mi_null
    >>> from mianalysis.estimators.gaussian_se import gaussian_mi_se
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.standard_normal((2, 500, 1))
    >>> round(gaussian_mi_se(x, y), 5), round(gaussian_mi_null(500, 1, 1).std, 5)
    (0.00205, 0.00205)
    """
    check_choice(method, "method", SE_METHODS)
    factor = check_units(units)
    x, y = check_paired(x, y)
    x, y = drop_constant_features(x, y)
    n, p = x.shape
    q = y.shape[1]
    if p == 0 or q == 0:
        return 0.0
    if n <= p + q:
        raise ValueError(f"a standard error needs more samples than features: n_samples={n} <= {p} + {q}")
    r2 = canonical_correlations(x, y) ** 2
    if method == "asymptotic":
        return float(np.sqrt(r2.sum() / n) * factor)
    return wishart_mi_se(r2, n, p, q, units=units, squared=True)


def wishart_mi_se(canonical: ArrayLike, n_samples: int, n_features_x: int, n_features_y: int, *,
                  units: str = "bits", squared: bool = False) -> float:
    """The ``"wishart"`` standard error of the module docstring from the sample canonical
    correlations: the sd of the bias-corrected :func:`mianalysis.gaussian_mi` of
    `n_samples` Gaussian samples, or of a conditional MI with the sample size it stands for.

    For :func:`mianalysis.gaussian_cmi` of x and y given k conditioning variables, pass the
    canonical correlations of the residuals of x and y after their least-squares regression
    on the conditioning variables (with an intercept; the sample partial canonical
    correlations) and ``n_samples - k``: the residual scatter matrix is Wishart with
    ``n - 1 - k`` degrees of freedom (Anderson 2003, Section 8.2), and the conditional
    MI's bias correction is exactly that of the MI of ``n - k`` samples.

    Parameters
    ----------
    canonical : array-like of shape (min(p, q),)
        Sample canonical correlations r_i (:func:`canonical_correlations`), or their
        squares with `squared`.
    n_samples : int
        The (effective) sample size n; must exceed ``n_features_x + n_features_y``.
    n_features_x, n_features_y : int
        The dimensions p and q (non-constant features), >= 1.
    units : {"bits", "nats"}, default="bits"
    squared : bool, default=False
        Whether `canonical` holds the squares r_i^2.

    Returns
    -------
    se : float
        In `units`.

    Raises
    ------
    ValueError
        If ``n_samples <= n_features_x + n_features_y``.

    Examples
    --------
    No sample canonical correlation: the exact sd under independence,
    ``gaussian_mi_null(...).std``.

    >>> from mianalysis import gaussian_mi_null
    >>> from mianalysis.estimators.gaussian_se import wishart_mi_se
    >>> round(wishart_mi_se([0.0], 500, 1, 1), 5), round(gaussian_mi_null(500, 1, 1).std, 5)
    (0.00205, 0.00205)
    """
    factor = check_units(units)
    n, p, q = int(n_samples), int(n_features_x), int(n_features_y)
    if n <= p + q:
        raise ValueError(f"a standard error needs more samples than features: n_samples={n} <= {p} + {q}")
    r2 = np.asarray(canonical, dtype=float)
    if not squared:
        r2 = r2 ** 2
    m, s = n - 1, min(p, q)
    bias = 0.5 * (wishart_logdet_bias(p, n) + wishart_logdet_bias(q, n) - wishart_logdet_bias(p + q, n))
    with np.errstate(over="ignore"):
        rho2 = np.clip(1.0 - (1.0 - r2) * np.exp(2.0 * bias / s), 0.0, 1.0)
    null = 0.25 * (_wishart_variance(p + q, m) - _wishart_variance(p, m) - _wishart_variance(q, m))
    cross = float((rho2 * polygamma(1, (m - np.arange(s)) / 2.0)).sum())
    return float(np.sqrt(null + 0.5 * cross) * factor)
