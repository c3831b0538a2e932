"""Gaussian copula mutual information: the Gaussian estimate of each coordinate's normal scores."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri
from scipy.stats import rankdata

from .._internal.validation import check_paired, drop_constant_features
from .calibration import warn_outside_calibration
from .gaussian import check_covariance_fits, check_gaussian_settings, gaussian_mi
from .repeats import check_repeated_runs

__all__ = ["gaussian_copula_mi", "normal_scores"]


def twice_rank_scores(n: int) -> np.ndarray:
    """The normal score of each twice-rank among `n` samples: entry t is
    ``ndtri(t / 2 / (n + 1))`` for t in [0, 2 n + 1] (twice an average rank is an integer),
    so that a score read from it has the bits of ``ndtri(rank / (n + 1))``."""
    return ndtri((np.arange(2 * n + 2) / 2.0) / (n + 1))


def normal_scores(samples: np.ndarray) -> np.ndarray:
    r"""Each column of `samples` (n, d) replaced by its normal scores
    :math:`\Phi^{-1}(r_i / (n + 1))`, with :math:`r_i` the rank of row ``i`` in that column
    (1 to n; tied values get the average of their ranks, so they keep one score).

    The scores depend on the data only through the ranks, so they are unchanged by any
    strictly increasing map of a column, and shuffling the rows shuffles the scores.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.copula import normal_scores
    >>> normal_scores(np.array([[10.0], [-3.0], [10.0]])).round(3).ravel().tolist()
    [0.319, -0.674, 0.319]
    """
    samples = np.asarray(samples)
    if samples.dtype != np.float32:  # float32 values rank as their float64 values do
        samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[0] if samples.ndim else 0
    if samples.ndim not in (1, 2) or n == 0 or not np.isfinite(samples).all():
        ranks = rankdata(np.asarray(samples, dtype=np.float64), method="average", axis=0)
        return ndtri(ranks / (n + 1))
    # One sort per column; each score read from the table of ndtri at twice the average rank
    # over 2 (n + 1): the same bits as ndtri(rankdata(...) / (n + 1)) (_rank_kernels; imported
    # here, so that importing the package does not load numba).
    from ._rank_kernels import scores_from_table

    scores = scores_from_table(samples.reshape(n, -1), twice_rank_scores(n))
    return scores.reshape(samples.shape)


def gaussian_copula_mi(x: ArrayLike, y: ArrayLike, *, units: str = "bits", bias_correction: bool = True,
                       shrinkage: str | None = None) -> float:
    r"""Gaussian copula mutual information of `x` and `y` (Ince et al. 2017).

    Every coordinate of `x` and of `y` is replaced by its normal scores (its ranks ``r``
    among the samples, tied values sharing their average rank, mapped to
    :math:`\Phi^{-1}(r / (n + 1))`), and :func:`mianalysis.gaussian_mi` of the scores is
    the estimate:

    .. math::

        \hat I(X;Y) = \hat I_{\mathrm{Gauss}}\big(\Phi^{-1}(\hat F_X(X)),\ \Phi^{-1}(\hat F_Y(Y))\big)

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X; row ``i`` is paired with row ``i`` of `y`. A 1-D array is one feature.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    bias_correction : bool, default=True
        Subtract the Wishart bias of the log-determinants of the scores' covariances, as
        :func:`mianalysis.gaussian_mi` does (Ince et al. 2017 apply the same correction).
    shrinkage : {None, "ledoit-wolf"}, default=None
        Covariance estimator of the scores, as in :func:`mianalysis.gaussian_mi`;
        "ledoit-wolf" gives the Gaussian MI of a shrunk covariance: neither an estimate nor
        a bound.

    Returns
    -------
    mi : float
        The estimate in `units`; with `bias_correction` it may be slightly negative for
        independent data.

    Raises
    ------
    ValueError
        If a covariance block of the scores is not numerically positive definite (as
        :func:`mianalysis.gaussian_mi`), or if runs are stored twice: identical rows of x
        and y alike, of runs that some feature tells apart
        (:func:`mianalysis.estimators.repeats.check_repeated_runs`; a copy is not an
        independent run, and a permutation test of copies finds dependence where there is
        none). Values repeated within a column (ties) are allowed.
    CovarianceMemoryError
        (a MemoryError and a ValueError) Before ranking anything, if the correlation
        matrices of the scores need more memory than this process can allocate
        (:func:`mianalysis.estimators.gaussian.covariance_bytes`).

    Warns
    -----
    ConstantFeatureWarning
        If a feature is constant; it is dropped (it carries no information).
    RepeatedRunsWarning
        If runs coincide on a lattice (identical rows, and no feature tells the distinct
        runs apart: discrete or quantised samples).
    OutsideCalibrationWarning
        When called from outside the package on data outside the calibrated regime
        (:func:`mianalysis.estimators.calibration.copula_regime`: bias-corrected, at least
        2.2 runs per varying joint dimension, at most 2241.6 bits) or with `shrinkage`.

    Notes
    -----
    MI is unchanged by a strictly monotone map of any one coordinate, and so is this
    estimate, exactly, since it sees only ranks (up to ties: a map that merges values
    creates ties). When the dependence is a Gaussian copula (each coordinate of a jointly
    Gaussian vector mapped by its own increasing function, such as ``sinh`` or a cube) the
    estimate is consistent for the exact MI, whatever the marginals, where
    :func:`mianalysis.gaussian_mi` of the raw data is not. For other dependence structures
    it estimates the MI of the Gaussian copula with the same normal-score correlations:
    for one coordinate on each side it is then a lower bound on the MI (the normal scores
    are Gaussian marginally and a Gaussian joint law has the largest entropy for its
    covariance); a multivariate Student t is an example where the difference is large.
    For several coordinates per side it is neither a lower nor an upper bound in general.

    Under independence the scores of `x` and of `y` are independent, so the null of
    :func:`mianalysis.gaussian_mi_null` for the scores' dimensions applies approximately
    (the scores are a fixed set of normal quantiles rather than Gaussian samples; the
    tests check the law against permutations).

    References
    ----------
    R. A. A. Ince, B. L. Giordano, C. Kayser, G. A. Rousselet, J. Gross and P. G. Schyns,
    "A statistical framework for neuroimaging data analysis based on mutual information
    estimated via a Gaussian copula", Hum. Brain Mapp. 38 (2017) 1541-1573,
    doi:10.1002/hbm.23471.

    Examples
    --------
    A correlation of 0.6 seen through two different increasing maps: the exact MI is
    -0.5 log(1 - 0.36) = 0.223 nats, which the copula estimate recovers and the Gaussian
    estimate of the raw data does not.

    >>> import numpy as np
    >>> from mianalysis import gaussian_copula_mi, gaussian_mi
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal(100_000)
    >>> y = 0.6 * x + 0.8 * rng.standard_normal(100_000)
    >>> round(gaussian_copula_mi(np.exp(x), y**3, units="nats"), 3)
    0.223
    >>> round(gaussian_mi(np.exp(x), y**3, units="nats"), 3)
    0.086
    """
    check_gaussian_settings(units, bias_correction, shrinkage)
    x, y = check_paired(x, y)
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return 0.0  # I(c; Y) = 0
    check_covariance_fits(x.shape[0], x.shape[1] + y.shape[1], "the Gaussian copula estimate")  # before ranking
    check_repeated_runs(x, y, "the Gaussian copula estimate")
    value = gaussian_mi(normal_scores(x), normal_scores(y), units=units, bias_correction=bias_correction,
                        shrinkage=shrinkage)
    warn_outside_calibration("gaussian_copula_mi", "copula", x.shape[0], x.shape[1] + y.shape[1],
                             value if units == "bits" else value / np.log(2), shrinkage=shrinkage is not None)
    return value
