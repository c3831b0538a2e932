"""Standard errors of the Gaussian log-determinant MI estimate, without resampling.

Two formulas for the sd of :func:`mianalysis.gaussian_mi` (bias-corrected) of Gaussian
data, in terms of n, the dimensions p and q and the canonical correlations:

- ``"wishart"`` (the default of the level intervals of :mod:`mianalysis.analysis.inference.intervals`):
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

The change of the estimate between two checkpoints of the same runs has a standard error
from the runs' influence values (:func:`gaussian_mi_influence`): the estimate is a smooth
function of the sample covariance, whose influence at a centred run z is ``z z^T - Sigma``,
and ``d log det Sigma = tr(Sigma^{-1} d Sigma)``, so the influence of run i on the MI (nats) is

.. math::

    h_i = \\tfrac12\\left(x_i^T \\Sigma_{xx}^{-1} x_i + y_i^T \\Sigma_{yy}^{-1} y_i
          - z_i^T \\Sigma^{-1} z_i\\right)

(the constants p + q - (p + q) cancel). Runs are iid and paired across checkpoints, so
the change of the estimate has the delta method's variance ``Var(h^{(1)} - h^{(0)}) / n``
(van der Vaart 1998, ch. 20), with the sample covariances in Sigma. Unlike the
``"asymptotic"`` level se it does not vanish for independent variables: the sample
influence values then carry the sample canonical correlations, so it errs on the wide side
there. Its coverage, against the bootstrap's, is measured by
``python experiments/change_coverage.py`` (figures/change_coverage/change_coverage.csv; docs/concepts/intervals.md):
from n = 4 (p + q) runs on, 91-99.5 % of exact changes covered by 95 % intervals and 0.5-3.5 %
false verdicts where the change is exactly 0 (the bootstrap: 94.5-100 % and 0-1 %, with
intervals 1.06-1.62 times wider); at n = 2.2 (p + q), 88-97 % and up to 6.5 % false verdicts,
so there :func:`mianalysis.analyze` keeps the bootstrap.

References
----------
T. W. Anderson, *An Introduction to Multivariate Statistical Analysis*, 3rd ed., Wiley, 2003.

N. R. Goodman, "Statistical analysis based on a certain multivariate complex Gaussian
distribution", Ann. Math. Statist. 34 (1963) 152-177.

P. L. Hsu, "On the limiting distribution of the canonical correlations", Biometrika 32
(1941) 38-45.

A. W. van der Vaart, *Asymptotic Statistics*, Cambridge University Press, 1998.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import polygamma

from .._internal.validation import check_choice, check_paired, check_units, drop_constant_features
from .gaussian import lower_solve, wishart_logdet_bias

__all__ = ["SE_METHODS", "gaussian_mi_se", "wishart_mi_se", "canonical_correlations", "gaussian_mi_influence",
           "influence_change_se"]

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
    z = np.hstack([x, y])  # a copy: centred and scaled in place (no more n x (p + q) arrays)
    z -= z.mean(axis=0)
    sd = np.sqrt(np.einsum("ij,ij->j", z, z))
    if np.any(sd == 0):
        raise ValueError("canonical correlations need non-constant columns; drop the constant ones")
    z /= sd
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


def gaussian_mi_influence(x: ArrayLike, y: ArrayLike, *, units: str = "bits") -> np.ndarray:
    """The influence of each run on :func:`mianalysis.gaussian_mi` of `x` and `y`: ``h_i``
    of the module docstring, with the sample covariances (divisor n), so that the values
    sum to 0 and ``h.std() / sqrt(n)`` is the delta method's se of the estimate.

    Parameters
    ----------
    x, y : array-like of shape (n_samples, p) and (n_samples, q)
        Paired samples; constant columns are dropped (with a warning), as the estimate does.
    units : {"bits", "nats"}, default="bits"

    Returns
    -------
    h : ndarray of shape (n_samples,)
        In `units`; all 0 if no column of `x` or of `y` varies.

    Raises
    ------
    ValueError
        If ``n_samples <= p + q`` or a covariance block is singular.

    Examples
    --------
    One coordinate each with correlation r = 0.6: the sd of h is r (nats), so the se of the
    estimate is ``r / sqrt(n)``, the delta method's for ``-1/2 log(1 - r^2)`` (the sample
    correlation's variance is ``(1 - r^2)^2 / n``).

    >>> import numpy as np
    >>> from mianalysis.estimators.gaussian_se import gaussian_mi_influence
    >>> rng = np.random.default_rng(0)
    >>> u, e = rng.standard_normal((2, 100_000, 1))
    >>> h = gaussian_mi_influence(u, 0.6 * u + 0.8 * e, units="nats")
    >>> round(float(h.std()), 2), abs(float(h.mean())) < 1e-12
    (0.6, True)
    """
    factor = check_units(units)
    x, y = check_paired(x, y)
    x, y = drop_constant_features(x, y)
    n, p = x.shape
    q = y.shape[1]
    if p == 0 or q == 0:
        return np.zeros(n)
    if n <= p + q:
        raise ValueError(f"influence values need more samples than features: n_samples={n} <= {p} + {q}")
    z = np.hstack([x, y])
    z -= z.mean(axis=0)
    z /= np.sqrt(np.einsum("ij,ij->j", z, z) / n)  # unit variances: the same h, a better conditioned factor

    # z_i^T S^-1 z_i, S = block^T block / n, through the Cholesky factor
    def quadratic_forms(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        try:
            lower = np.linalg.cholesky(block.T @ block / n)
        except np.linalg.LinAlgError:
            raise ValueError("influence values need positive definite covariance blocks (no linearly dependent "
                             "columns)") from None
        w = lower_solve(lower, block.T)  # solve_triangular's bits, without its copies
        return np.einsum("ji,ji->i", w, w), w

    joint, w = quadratic_forms(z)
    qx = np.einsum("ji,ji->i", w[:p], w[:p])  # the joint factor's first p rows whiten x alone
    qy = quadratic_forms(z[:, p:])[0]
    return 0.5 * (qx + qy - joint) * factor


def influence_change_se(before: ArrayLike, after: ArrayLike) -> float:
    """The delta method's se of the change of an estimate between two checkpoints of the
    same runs, from the runs' influence values at each (:func:`gaussian_mi_influence`,
    row i the same run in both): ``sd(after - before) / sqrt(n)``, in their units.

    Examples
    --------
    >>> from mianalysis.estimators.gaussian_se import influence_change_se
    >>> influence_change_se([0.0, 1.0, -1.0, 0.0], [0.0, 2.0, -2.0, 0.0])
    0.3535533905932738
    """
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if before.shape != after.shape or before.ndim != 1 or before.size < 2:
        raise ValueError(f"influence values of the same >= 2 runs at both checkpoints are needed; got shapes "
                         f"{before.shape} and {after.shape}")
    return float(np.std(after - before) / np.sqrt(before.size))
