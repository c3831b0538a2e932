r"""The permutation null of a Gaussian (or copula) MI estimate from its exact moments.

A permutation test of the Gaussian MI shuffles one client's runs and recomputes a cross
product of n x p by n x q samples per shuffle: at the paper's size (26,400 runs, 850 + 850
parameters) 38 GFLOP a shuffle, most of an analysis's time. The analytic null
(:func:`mianalysis.gaussian_mi_null`) costs nothing but holds only for jointly Gaussian
samples; normal scores are Gaussian one coordinate at a time, and where the clients' vectors
have a heavy-tailed copula it rejects far too often (``experiments/copula_null_size.py``).

This null takes the middle road. Its statistic is Pillai's trace
:math:`V = \sum_i r_i^2`, the sum of the squared sample canonical correlations between x and
y, which tests independence as the MI (:math:`-\tfrac12\sum_i \log(1 - r_i^2)`) does and
equals it to first order near independence. With :math:`W_x` and :math:`W_y` the
projections onto the centred columns of x and y, :math:`V = \operatorname{tr}(W_x W_y)`,
and the exact mean and variance of :math:`\operatorname{tr}(W_x P W_y P^\top)` over all
n! permutations P are known in closed form (Kazi-Aoual et al. 1995, the moments of the RV
coefficient):

.. math::

    \mathbb{E}[V] = \frac{pq}{n-1},\qquad
    \mathrm{Var}[V] = \frac{2pq\,(n-1-p)(n-1-q)}{(n+1)(n-1)^2(n-2)}
    \left(1 + \frac{n-3}{2n(n-1)}\,\tau_x\tau_y\right),

    \tau_x = \frac{n-1}{(n-3)(n-1-p)}
    \left(\frac{n(n+1)}{p}\sum_{i=1}^n h_i^2 - (n-1)(p+2)\right),

with :math:`h_i` the leverage of run i in x (the diagonal of :math:`W_x`). The data enter
only through the leverages: heavy tails shared by a run's coordinates spread them, and
:math:`\tau_x\tau_y` inflates the variance that the Gaussian null assumes. The p-value is
the upper tail of the gamma law with this mean and variance (a scaled chi-square: for
Gaussian samples it is :math:`\chi^2_{pq}/(n-1)` to first order). The moments are exact; the
gamma tail is the approximation, and ``experiments/moment_null_size.py`` measures its size.

Cost: two triangular solves and one n x p x q product, about three shuffles' worth.

References
----------
F. Kazi-Aoual, S. Hitier, R. Sabatier and J.-D. Lebreton, "Refined approximations to
permutation tests for multivariate inference", Computational Statistics & Data Analysis 20
(1995) 643-656.

J. Josse, J. Pagès and F. Husson, "Testing the significance of the RV coefficient",
Computational Statistics & Data Analysis 53 (2008) 82-91.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg, stats

__all__ = ["PermutationMomentNull", "permutation_moment_null"]


@dataclass(frozen=True)
class PermutationMomentNull:
    """Pillai's trace of a pairing and its exact permutation mean and variance.

    Made by :func:`permutation_moment_null`; see there for the law.

    Attributes
    ----------
    n_samples, n_features_x, n_features_y : int
        The sample size and the dimensions of x and y.
    statistic : float
        Pillai's trace V of the observed pairing: the sum of the squared sample canonical
        correlations, in [0, min(p, q)].
    mean, variance : float
        The exact mean and variance of V over all permutations of the runs of y.
    inflation : float
        ``1 + (n - 3) / (2 n (n - 1)) tau_x tau_y``: the factor by which the spread of the
        runs' leverages multiplies the variance (about 1 for Gaussian samples).
    p_value : float
        The upper tail at `statistic` of the gamma law with `mean` and `variance`.
    """

    n_samples: int
    n_features_x: int
    n_features_y: int
    statistic: float
    mean: float
    variance: float
    inflation: float
    p_value: float

    def tail(self, statistic: ArrayLike) -> float | np.ndarray:
        """The upper tail at `statistic` (a value of V for these samples' pairings, e.g. a
        shuffle's) of the gamma law with :attr:`mean` and :attr:`variance`: the p-value that
        :attr:`p_value` is at the observed V."""
        return _gamma_tail(statistic, self.mean, self.variance)


def _gamma_tail(statistic: ArrayLike, mean: float, variance: float) -> float | np.ndarray:
    """The upper tail at `statistic` of the gamma law with `mean` and `variance`."""
    p = stats.gamma.sf(statistic, mean**2 / variance, scale=variance / mean)
    return float(p) if np.ndim(p) == 0 else p


def _whitened(x: np.ndarray) -> np.ndarray:
    """The centred samples in an orthonormal basis of their column space (features x runs):
    ``Z Z^T = I``, and ``Z^T Z`` is the projection onto the centred columns."""
    centred = x - x.mean(axis=0)
    try:
        factor = linalg.cholesky(centred.T @ centred, lower=True)
    except linalg.LinAlgError as exc:
        raise ValueError("the samples' covariance is singular (a feature is constant or a linear combination "
                         "of others): drop those features first") from exc
    return linalg.solve_triangular(factor, centred.T, lower=True)


def _tau(leverages: np.ndarray, n: int, p: int) -> float:
    return (n - 1) / ((n - 3) * (n - 1 - p)) * (n * (n + 1) * float(np.sum(leverages**2)) / p - (n - 1) * (p + 2))


def permutation_moment_null(x: ArrayLike, y: ArrayLike) -> PermutationMomentNull:
    r"""Pillai's trace of (x, y) with its exact permutation mean and variance, and a p-value.

    A replacement for a permutation test of :func:`mianalysis.gaussian_mi` or
    :func:`mianalysis.gaussian_copula_mi` (give it the normal scores then) that draws no
    shuffle: see :mod:`mianalysis.estimators.moment_null` for the formulas. The mean and
    variance are those of the statistic over all n! pairings, whatever the distribution of
    the samples; the p-value fits a gamma law to them.

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x)
    y : array-like of shape (n_samples, n_features_y)
        Paired samples, rows are runs; each covariance must be positive definite (no
        constant feature), and ``n_samples > max(n_features_x, n_features_y) + 3``.

    Returns
    -------
    null : PermutationMomentNull

    Raises
    ------
    ValueError
        For arrays that are not 2-D, unequal numbers of rows, too few rows or a singular
        covariance.

    Examples
    --------
    Independent samples: the statistic is near its mean ``p q / (n - 1)``:

    >>> import numpy as np
    >>> from mianalysis.estimators.moment_null import permutation_moment_null
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(500, 3)), rng.normal(size=(500, 2))
    >>> null = permutation_moment_null(x, y)
    >>> round(null.mean, 5), bool(null.p_value > 0.05)
    (0.01202, True)

    A shared component makes the pairing unusual among its permutations:

    >>> bool(permutation_moment_null(x, y + 0.3 * x[:, :2]).p_value < 1e-6)
    True
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"x and y must be 2-D (runs x features); got {x.ndim}-D and {y.ndim}-D")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of runs (rows); got {x.shape[0]} and {y.shape[0]}")
    n, p = x.shape
    q = y.shape[1]
    if n <= max(p, q) + 3:
        raise ValueError(f"the moments need more runs than features + 3; got {n} runs for {p} and {q} features")
    zx, zy = _whitened(x), _whitened(y)
    statistic = float(np.sum((zx @ zy.T) ** 2))
    mean = p * q / (n - 1)
    inflation = 1.0 + (n - 3) / (2.0 * n * (n - 1)) * _tau(np.sum(zx**2, axis=0), n, p) * _tau(
        np.sum(zy**2, axis=0), n, q)
    variance = 2.0 * p * q * (n - 1 - p) * (n - 1 - q) / ((n + 1) * (n - 1) ** 2 * (n - 2)) * inflation
    return PermutationMomentNull(n, p, q, statistic, mean, variance, inflation,
                                 float(_gamma_tail(statistic, mean, variance)))
