"""Mutual information of jointly Gaussian vectors from log-determinants of covariances."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from itertools import islice
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import LinAlgError, cholesky, eigh, get_blas_funcs
from scipy.special import digamma

from .._internal.scaling import rescale_extreme_columns
from .._internal.validation import (ConstantFeatureWarning, check_choice, check_flag, check_paired, check_samples, check_units,
                           drop_constant_features, varying_columns)
from .calibration import warn_outside_calibration

__all__ = [
    "gaussian_mi", "gaussian_cmi", "SHRINKAGE", "check_gaussian_settings", "wishart_logdet_bias",
    "ledoit_wolf_covariance", "ledoit_wolf_intensity", "gaussian_permutation_estimates",
    "CROSS_PRECISIONS", "SingularCovarianceError", "CovarianceMemoryError", "covariance_bytes",
    "check_covariance_fits", "COVARIANCE_MATRICES"
]

SHRINKAGE = (None, "ledoit-wolf")


def gaussian_mi(x: ArrayLike, y: ArrayLike, *, units: str = "bits", bias_correction: bool = True,
                shrinkage: str | None = None) -> float:
    r"""Mutual information of `x` and `y` under a joint Gaussian model.

    .. math::

        I(X;Y) = \tfrac12 \left(\log\det\Sigma_X + \log\det\Sigma_Y
                 - \log\det\Sigma_{XY}\right)

    with the covariances estimated from the paired samples (``ddof=1``) and the
    log-determinants computed by Cholesky factorisation (Cover and Thomas 2006, eq. 8.5;
    the estimator of Section 3.1 of the core paper).

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X; row ``i`` is paired with row ``i`` of `y`. A 1-D array is one feature.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    bias_correction : bool, default=True
        If True, subtract from each log-determinant the exact bias of the log-determinant
        of a sample covariance of Gaussian data. With ``(n - 1) S ~ Wishart_p(Sigma, n - 1)``,

        .. math::

            \mathbb{E}[\log\det S] - \log\det\Sigma
            = p \log\frac{2}{n-1} + \sum_{i=0}^{p-1} \psi\!\left(\frac{n-1-i}{2}\right),

        so the corrected estimate is unbiased for Gaussian data. Plug-in estimates are biased
        upwards and the bias grows like ``p_x p_y / (2 n)`` nats; with ``n`` a few times the
        dimension it dominates the estimate. False gives the plain plug-in formula used in the
        core paper. The correction is not applied with `shrinkage` (the Wishart law
        describes only the plain sample covariance).
    shrinkage : {None, "ledoit-wolf"}, default=None
        None uses the sample covariance, which must be positive definite. "ledoit-wolf"
        applies the Ledoit-Wolf estimator (as scikit-learn's
        :class:`~sklearn.covariance.LedoitWolf`, computed from one Gram matrix) to the
        standardised joint samples and takes the X and Y blocks from that one matrix (so
        the estimate stays >= 0), defined for any ``n_samples``. Shrinkage pulls
        correlations towards zero, so it biases MI downwards: the result is the Gaussian
        MI of a shrunk covariance: neither an estimate nor a bound (for fewer runs than
        dimensions :func:`mianalysis.projection_mi_bound` gives a lower bound, and
        :func:`mianalysis.mi` chooses one), and it always gets an
        :class:`~mianalysis.estimators.calibration.OutsideCalibrationWarning`.

    Returns
    -------
    mi : float
        The estimate in `units`. With `bias_correction` it may be slightly negative for
        independent data.

    Raises
    ------
    SingularCovarianceError
        (a ValueError) If a covariance block (x, y or joint) is not numerically positive
        definite, naming the block and the reason: fewer runs than dimensions (the message
        names what works: ``estimator='bound'``, fewer features), linearly dependent
        features within x or y, or x and y linearly dependent on each other (y a copy of x,
        say: the Gaussian MI is infinite).
    CovarianceMemoryError
        (a MemoryError and a ValueError) Before any allocation, if the joint correlation
        matrices (:func:`covariance_bytes`) need more memory than this process can allocate.

    Warns
    -----
    ConstantFeatureWarning
        If a feature is constant; it is dropped (see Notes).
    OutsideCalibrationWarning
        When called from outside the package on data outside the calibrated regime
        (:func:`mianalysis.estimators.calibration.gaussian_regime`: bias-corrected, at least
        2.2 runs per varying joint dimension, at most 2241.6 bits) or with `shrinkage`.
        :func:`mianalysis.mi` judges an estimate instead of warning.

    Notes
    -----
    The estimate is computed from correlation matrices: MI is unchanged by rescaling any
    feature, and this avoids overflow in the determinants of parameter vectors. It is
    invariant under any invertible linear map of `x` or of `y`. Columns with values beyond
    ~1e135 or below ~1e-135 are first divided by a power of two near their largest value,
    so the means and variances neither overflow nor underflow: the estimate is the same at
    any finite magnitude (1e-300 to 1e300), and per column.

    Constant features are dropped with a :class:`mianalysis.ConstantFeatureWarning` naming
    them: a constant carries no information, ``I((X, c); Y) = I(X; Y)`` exactly, while
    keeping it would make every covariance singular. The bias correction then counts only
    the varying features (a constant has no sampling error). If no feature of `x` or of `y`
    varies, the result is 0.0, the exact ``I(c; Y)``, which is also what the formula gives
    for an empty block. :func:`ksg_mi`, :func:`mi_permutation_test` and
    :func:`mianalysis.analyze` follow the same rule.

    The rows are taken as independent runs, but this function does not check for runs
    stored twice (:func:`mianalysis.estimators.repeats.repeated_runs`): a bootstrap resample
    repeats runs on purpose and is estimated by this function. The plug-in part of the
    estimate is that of the distinct runs weighted by their copies; the bias correction
    counts every row as a run. :func:`mi_permutation_test` and the command line's
    ``estimate`` refuse repeated runs for this estimator.

    References
    ----------
    T. M. Cover and J. A. Thomas, *Elements of Information Theory*, 2nd ed., Wiley, 2006.

    N. R. Goodman, "Statistical analysis based on a certain multivariate complex Gaussian
    distribution", Ann. Math. Statist. 34 (1963) 152-177 (expected log-determinant of a
    Wishart matrix).

    O. Ledoit and M. Wolf, "A well-conditioned estimator for large-dimensional covariance
    matrices", J. Multivariate Anal. 88 (2004) 365-411.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import gaussian_mi
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal(100_000)
    >>> y = 0.6 * x + 0.8 * rng.standard_normal(100_000)
    >>> round(gaussian_mi(x, y, units="nats"), 3)   # exact: -0.5 log(1 - 0.6**2) = 0.223
    0.223
    """
    factor = check_gaussian_settings(units, bias_correction, shrinkage)
    x, y = check_paired(x, y)
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return 0.0  # I(c; Y) = 0 (see Notes)
    n, dx = x.shape
    dy = y.shape[1]
    d = dx + dy
    check_covariance_fits(n, d)

    corr = _joint_correlation(x, y, shrinkage)
    blocks = (("x", slice(0, dx)), ("y", slice(dx, d)), ("joint", slice(0, d)))
    logdet = {}
    for name, sl in blocks:
        logdet[name] = _logdet_pd(corr[sl, sl], name, n, shrinkage,
                                  joint_why=_JOINT_DEPENDENT if name == "joint" else "")

    mi = 0.5 * (logdet["x"] + logdet["y"] - logdet["joint"])
    if bias_correction and shrinkage is None:
        # Reached only when the joint covariance is positive definite, so n > d.
        mi -= 0.5 * (
            wishart_logdet_bias(dx, n) + wishart_logdet_bias(dy, n) - wishart_logdet_bias(d, n)
        )
    warn_outside_calibration("gaussian_mi", "gaussian", n, d, float(mi) / np.log(2), shrinkage=shrinkage is not None)
    return float(mi * factor)


def gaussian_cmi(x: ArrayLike, y: ArrayLike, z: ArrayLike, *, units: str = "bits", bias_correction: bool = True,
                 shrinkage: str | None = None) -> float:
    r"""Conditional mutual information of `x` and `y` given `z` under a joint Gaussian model.

    .. math::

        I(X;Y \mid Z) = \tfrac12 \left(\log\det\Sigma_{XZ} + \log\det\Sigma_{YZ}
                        - \log\det\Sigma_{Z} - \log\det\Sigma_{XYZ}\right)

    with the covariances estimated from the paired samples (``ddof=1``) and the
    log-determinants computed as in :func:`gaussian_mi` (Cover and Thomas 2006, eq. 8.5
    and the chain rule ``I(X;Y|Z) = I(X;(Y,Z)) - I(X;Z)``).

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X; row ``i`` is paired with row ``i`` of `y` and of `z`.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    z : array-like of shape (n_samples, n_features_z) or (n_samples,)
        Samples of the conditioning variable Z. An array of shape ``(n_samples, 0)``
        conditions on nothing: the result is :func:`gaussian_mi` of `x` and `y`.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    bias_correction : bool, default=True
        If True, subtract the exact bias of each of the four log-determinants (the
        Wishart bias of :func:`gaussian_mi`, for ``d_x + d_z``, ``d_y + d_z``, ``d_z`` and
        ``d_x + d_y + d_z`` dimensions; every block of a Wishart matrix is Wishart with the
        same degrees of freedom), so the estimate is unbiased for Gaussian data. False
        gives the plain plug-in formula. Not applied with `shrinkage`.
    shrinkage : {None, "ledoit-wolf"}, default=None
        None uses the sample covariance, which must be positive definite: it needs
        ``n_samples > n_features_x + n_features_y + n_features_z``, and in practice a few
        times that. "ledoit-wolf" shrinks the standardised joint covariance of (x, y, z)
        and takes all four blocks from that one matrix (so the estimate stays >= 0);
        shrinkage pulls correlations towards zero, so the estimate is biased (usually
        downwards).

    Returns
    -------
    cmi : float
        The estimate in `units`. With `bias_correction` it may be slightly negative for
        conditionally independent data.

    Raises
    ------
    ValueError
        If `z` does not have as many rows as `x` and `y`, if any input is not finite, or if
        a covariance block (x,z; y,z; z or joint) is not numerically positive definite,
        naming the block and the reason (too few samples, linearly dependent features):
        a :class:`SingularCovarianceError`.
    CovarianceMemoryError
        (a MemoryError and a ValueError) Before any allocation, if the joint correlation
        matrices need more memory than this process can allocate (as :func:`gaussian_mi`).

    Warns
    -----
    ConstantFeatureWarning
        If a feature of `x`, `y` or `z` is constant; it is dropped, which leaves the
        conditional MI unchanged (a constant in `z` conditions on nothing).

    See Also
    --------
    gaussian_mi : the unconditional estimate, which this equals for a `z` of no columns.

    Notes
    -----
    Computed from one correlation matrix of the joint samples (x, y, z): every variable's
    log-variance enters the formula as often with a plus as with a minus sign, so the
    result is that of the covariances. It is invariant under invertible linear maps of
    `x`, of `y` and of `z` separately. For jointly Gaussian variables it is the MI between
    the residuals of `x` and `y` after their linear regression on `z`.

    References
    ----------
    T. M. Cover and J. A. Thomas, *Elements of Information Theory*, 2nd ed., Wiley, 2006.

    N. R. Goodman, "Statistical analysis based on a certain multivariate complex Gaussian
    distribution", Ann. Math. Statist. 34 (1963) 152-177 (expected log-determinant of a
    Wishart matrix).

    Examples
    --------
    X and Y share Z and W; given Z only W is shared. With unit-variance independent Z, W
    and noises, corr(X, Y) = 2/3 and the correlation given Z is 1/2:

    >>> import numpy as np
    >>> from mianalysis import gaussian_cmi, gaussian_mi
    >>> rng = np.random.default_rng(0)
    >>> z, w, e1, e2 = rng.standard_normal((4, 100_000))
    >>> x, y = z + w + e1, z + w + e2
    >>> round(gaussian_mi(x, y, units="nats"), 2)         # exact: -0.5 log(1 - 4/9) = 0.29
    0.29
    >>> round(gaussian_cmi(x, y, z, units="nats"), 2)     # exact: -0.5 log(1 - 1/4) = 0.14
    0.14
    """
    factor = check_gaussian_settings(units, bias_correction, shrinkage)
    x, y = check_paired(x, y)
    z = _check_conditioning(z, x.shape[0])
    if z.shape[1] == 0:
        return gaussian_mi(x, y, units=units, bias_correction=bias_correction, shrinkage=shrinkage)
    x, y = drop_constant_features(x, y)
    z = _drop_constant_conditioning(z)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return 0.0  # I(c; Y | Z) = 0
    if z.shape[1] == 0:
        return gaussian_mi(x, y, units=units, bias_correction=bias_correction, shrinkage=shrinkage)
    n, dx = x.shape
    dy, dz = y.shape[1], z.shape[1]
    d = dx + dy + dz
    check_covariance_fits(n, d, "the Gaussian conditional estimate")
    corr = _joint_correlation(x, np.hstack([y, z]), shrinkage)
    ix, iy, iz = np.arange(dx), np.arange(dx, dx + dy), np.arange(dx + dy, d)
    blocks = {"x,z": np.r_[ix, iz], "y,z": np.r_[iy, iz], "z": iz, "joint": np.arange(d)}
    logdet = {name: _logdet_pd(corr[np.ix_(idx, idx)], name, n, shrinkage, conditional=True,
                               joint_why=_JOINT_DEPENDENT_GIVEN_Z if name == "joint" else "")
              for name, idx in blocks.items()}
    cmi = 0.5 * (logdet["x,z"] + logdet["y,z"] - logdet["z"] - logdet["joint"])
    if bias_correction and shrinkage is None:
        # Reached only when the joint covariance is positive definite, so n > d.
        cmi -= 0.5 * (wishart_logdet_bias(dx + dz, n) + wishart_logdet_bias(dy + dz, n)
                      - wishart_logdet_bias(dz, n) - wishart_logdet_bias(d, n))
    return float(cmi * factor)


def _check_conditioning(z: ArrayLike, n_samples: int) -> np.ndarray:
    """`z` as a 2-D float array with `n_samples` rows; ``(n_samples, 0)`` is allowed."""
    arr = np.asarray(z) if not isinstance(z, np.ndarray) else z
    if arr.ndim == 2 and arr.shape[1] == 0 and arr.shape[0] == n_samples and arr.dtype.kind in "biuf":
        return np.empty((n_samples, 0))
    z = check_samples(z, "z")
    if z.shape[0] != n_samples:
        raise ValueError(
            f"`z` must have as many samples (rows) as `x` and `y`; got {z.shape[0]} and {n_samples}")
    return z


def _drop_constant_conditioning(z: np.ndarray) -> np.ndarray:
    """`z` without its constant columns (conditioning on a constant is conditioning on
    nothing; the rule of :func:`mianalysis._internal.validation.varying_columns`), warning with
    `ConstantFeatureWarning` if any."""
    keep = varying_columns(z)
    if keep.all():
        return z
    names = [f"z[:, {j}]" for j in np.flatnonzero(~keep)]
    shown = ", ".join(names[:5]) + ("" if len(names) <= 5 else f" and {len(names) - 5} more")
    warnings.warn(
        f"dropped {len(names)} constant feature(s) ({shown}): conditioning on a constant is conditioning "
        "on nothing, so dropping it leaves the conditional mutual information unchanged",
        ConstantFeatureWarning, stacklevel=3)
    return np.ascontiguousarray(z[:, keep])


def check_gaussian_settings(units: str = "bits", bias_correction: bool = True, shrinkage: str | None = None) -> float:
    """Check :func:`gaussian_mi`'s settings (same defaults); return the nats-to-units factor."""
    factor = check_units(units)
    check_choice(shrinkage, "shrinkage", SHRINKAGE)
    check_flag(bias_correction, "bias_correction")
    return factor


def wishart_logdet_bias(p: int, n_samples: int) -> float:
    r"""Bias of ``log det S`` for the ``ddof=1`` sample covariance of `n_samples` p-variate
    Gaussian samples: :math:`p\log(2/(n-1)) + \sum_{i=0}^{p-1}\psi((n-1-i)/2)` nats.
    """
    dof = n_samples - 1
    return p * np.log(2.0 / dof) + float(digamma((dof - np.arange(p)) / 2.0).sum())


def _joint_correlation(x: np.ndarray, y: np.ndarray, shrinkage: str | None) -> np.ndarray:
    """Correlation matrix of the joint samples [x, y], shrunk if asked."""
    z = np.hstack([x, y])
    std = _centre_columns(z)
    constant = np.flatnonzero(std == 0)
    if constant.size:
        dx = x.shape[1]
        where = [f"x[:, {j}]" if j < dx else f"y[:, {j - dx}]" for j in constant[:5]]
        more = "" if constant.size <= 5 else f" and {constant.size - 5} more"
        raise ValueError(
            f"{constant.size} constant feature(s) ({', '.join(where)}{more}): a constant "
            "feature carries no information and makes the covariance singular; drop it"
        )
    z /= std
    gram = gram_matrix(z)
    if shrinkage == "ledoit-wolf":
        cov = ledoit_wolf_covariance(z, gram)
        # Ledoit-Wolf normalises by n; rescale so the diagonal is exactly 1.
        scale = np.sqrt(np.diag(cov))
        return cov / scale[:, None] / scale[None, :]
    return gram / (z.shape[0] - 1)


def _centre_columns(z: np.ndarray) -> np.ndarray:
    """Centre the columns of `z` in place and return their ``ddof=1`` standard deviations.

    Correlations do not depend on the scale of a column: columns whose values are beyond
    ~1e135 or below ~1e-135 are first brought to [1, 2) by a power of two (exact), so that
    neither the mean's sum nor the squares overflow or underflow. Other columns are left as
    they are (the same bits as without this step)."""
    rescale_extreme_columns(z, copy=False)
    z -= z.mean(axis=0)
    return np.sqrt(np.einsum("ij,ij->j", z, z) / (z.shape[0] - 1))


GRAM_BLOCK = 256


_BLAS_CONTROLLER: list[Any] = []  # one threadpoolctl.ThreadpoolController (threadpoolctl has no type hints)


def _single_threaded_blas() -> AbstractContextManager[object]:
    """A context in which the BLAS libraries loaded in this process use one thread.

    threadpoolctl finds the loaded libraries by reading the process's memory map, which
    costs more than a small estimate itself; the controller is made once
    (numpy's and scipy's BLAS are loaded by the time an estimate runs) and reused."""
    if not _BLAS_CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _BLAS_CONTROLLER.append(ThreadpoolController())
    return _BLAS_CONTROLLER[0].limit(limits=1, user_api="blas")


def gram_matrix(z: np.ndarray, block: int = GRAM_BLOCK) -> np.ndarray:
    """``z.T @ z``, the same to the last bit whatever the number of BLAS threads.

    Multithreaded BLAS may split a product's sums differently for different thread
    counts. Here every block of ``block`` columns is one single-threaded BLAS call; the
    blocks run in parallel on a thread pool, so the result depends only on `z`. The
    lower triangle is mirrored so that the matrix is exactly symmetric.
    """
    from concurrent.futures import ThreadPoolExecutor

    p = z.shape[1]
    gram = np.empty((p, p))
    starts = list(range(0, p, block))

    def lower_block(s: int) -> None:  # rows s.. of the column block s..s+block: the lower triangle only
        gram[s:, s:s + block] = z[:, s:].T @ z[:, s:s + block]

    with _single_threaded_blas():
        if len(starts) == 1:
            lower_block(0)
        else:
            with ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1)) as pool:
                list(pool.map(lower_block, starts))
    lower = np.tril(gram)
    return lower + np.tril(lower, -1).T


def ledoit_wolf_covariance(z: np.ndarray, gram: np.ndarray | None = None) -> np.ndarray:
    """Ledoit-Wolf shrunk covariance of centred samples `z` (n, p).

    The same estimator as scikit-learn's ``LedoitWolf(assume_centered=True)``: the
    ``1/n`` sample covariance S shrunk towards ``mu I`` (``mu = trace(S) / p``) with the
    Ledoit-Wolf (2004) intensity. The intensity's fourth-moment term
    ``sum_k ||z_k||^4`` is computed in O(n p) rather than through ``(z**2).T @ z**2``, so
    the cost is one Gram matrix.
    """
    p = z.shape[1]
    gram = gram_matrix(z) if gram is None else gram
    cov = gram / z.shape[0]
    trace = np.trace(cov)
    intensity, mu = ledoit_wolf_intensity(z, trace, float(np.einsum("ij,ij->", cov, cov)))
    shrunk = (1.0 - intensity) * cov
    shrunk.flat[:: p + 1] += intensity * mu
    return shrunk


def ledoit_wolf_intensity(z: np.ndarray, trace: float, frob2: float) -> tuple[float, float]:
    """(intensity, mu) of the Ledoit-Wolf estimate of centred samples `z` (n, p), given the
    trace and the squared Frobenius norm of their ``1/n`` sample covariance S: the shrunk
    covariance is ``(1 - intensity) S + intensity mu I`` (:func:`ledoit_wolf_covariance`).
    Both norms are sums over S's eigenvalues, so a caller holding the singular values of `z`
    needs no p x p matrix."""
    n, p = z.shape
    mu = trace / p
    fourth = float(np.sum(np.einsum("ij,ij->i", z, z) ** 2))
    beta = (fourth / n - frob2) / (p * n)
    delta = (frob2 - 2.0 * mu * trace + p * mu**2) / p
    beta = min(beta, delta)
    intensity = 0.0 if beta == 0 else beta / delta
    return intensity, mu


class SingularCovarianceError(ValueError):
    """A covariance block of a Gaussian estimate is not numerically positive definite
    (:func:`gaussian_mi`, :func:`gaussian_cmi`): fewer runs than the block's dimensions, or
    linearly dependent features. A ValueError; `block` names the block ("x", "y", "joint",
    "x,z", ...) and `few_runs` says whether the runs were too few (``n_samples <= p``)."""

    def __init__(self, message: str, block: str = "", few_runs: bool = False) -> None:
        super().__init__(message)
        self.block = block
        self.few_runs = few_runs


def bound_min_runs(folds: int = 2) -> int:
    """The fewest samples :func:`mianalysis.estimators.bound.projection_bound` takes with `folds` folds: 4 per
    evaluation fold (one canonical pair's bias-corrected estimate needs more than 3).

    Examples
    --------
    >>> from mianalysis.estimators.bound import bound_min_runs
    >>> bound_min_runs(), bound_min_runs(4)
    (8, 16)
    """
    return 4 * folds


def _fewer_runs_hint(n_samples: int, conditional: bool = False) -> str:
    """What works when there are fewer runs than dimensions (no recommendation of shrinkage:
    a shrunk estimate is the MI of another covariance, neither an estimate nor a bound)."""
    if conditional:
        return "; condition on or estimate fewer features, or sample more runs"
    if n_samples >= bound_min_runs():
        return ("; estimator='bound' gives a lower bound on the MI from these runs, or estimate fewer features "
                "(e.g. one layer at a time)")
    return "; estimate fewer features (e.g. one layer at a time) or sample more runs"


def _logdet_pd(corr: np.ndarray, block: str, n_samples: int, shrinkage: str | None, joint_why: str = "",
               conditional: bool = False) -> float:
    """log det of a correlation matrix by Cholesky, or a SingularCovarianceError naming the
    block. `joint_why`: the reason given when this is the joint block, whose parts are
    positive definite (x and y themselves linearly dependent)."""
    p = corr.shape[0]
    try:
        with _single_threaded_blas():  # the same bits for any thread count
            chol = cholesky(corr, lower=True, check_finite=False)
        diag = np.diag(chol)
        ok = bool(np.all(diag > 0))
    except LinAlgError:
        ok = False
    # diag(chol)**2 is the variance of each standardised feature left unexplained by the
    # features before it: below this tolerance the matrix is singular to working precision.
    tol = max(p, n_samples) * np.finfo(np.float64).eps
    if not ok or np.min(diag**2) <= tol:
        few = n_samples <= p
        if few:
            why = f"n_samples={n_samples} <= {p} features"
            if not shrinkage:
                why += (" (fewer runs than dimensions: the sample covariance is singular, so there is no plain "
                        "Gaussian estimate)" + _fewer_runs_hint(n_samples, conditional))
        elif joint_why:
            why = joint_why
        else:
            why = "features are linearly dependent (or nearly so)"
            if not shrinkage:  # what works; never shrinkage (the MI of another covariance, neither estimate nor bound)
                why += ("; drop the dependent features" if conditional else
                        "; estimator='bound' gives a lower bound (mianalysis.mi chooses an estimate or a bound), or "
                        "drop the dependent features, or estimate one layer at a time")
        raise SingularCovarianceError(
            f"the {block} covariance matrix ({p}x{p}) is not positive definite: {why}", block=block, few_runs=few)
    return 2.0 * float(np.log(diag).sum())


# The reason of a singular joint block whose x and y blocks are positive definite.
_JOINT_DEPENDENT = ("features are linearly dependent (or nearly so) across x and y: y is a linear function of x "
                    "(a copy of it, say) or nearly, so the Gaussian MI is infinite or beyond what the runs resolve")
_JOINT_DEPENDENT_GIVEN_Z = ("features are linearly dependent (or nearly so) across x and y given z: the Gaussian "
                            "conditional MI is infinite or beyond what the runs resolve")


#: Bytes of float64 p x p matrices that a Gaussian estimate of p joint dimensions holds at
#: once at most (the Gram matrix, its mirrored copies, the correlation matrix and a block's
#: Cholesky factor): checked against the memory the process can allocate before any of them
#: is made (:func:`check_covariance_fits`).
COVARIANCE_MATRICES = 4
# Below this many bytes the check is skipped (reading the cgroup limits costs more than the estimate).
_MEMORY_CHECK_BYTES = 2**30


class CovarianceMemoryError(MemoryError, ValueError):
    """The covariance matrices of a Gaussian estimate do not fit in memory (:func:`check_covariance_fits`).

    A MemoryError, and a ValueError (a setting to change) that the command line prints as one line."""


def covariance_bytes(n_samples: int, n_features: int) -> int:
    """The memory (bytes) a Gaussian estimate of `n_features` joint dimensions from
    `n_samples` runs needs at most: :data:`COVARIANCE_MATRICES` float64 matrices of
    ``n_features x n_features`` and the standardised samples (``n_samples x n_features``).

    Examples
    --------
    >>> from mianalysis.estimators.gaussian import covariance_bytes
    >>> round(covariance_bytes(20, 120_000) / 2**30)   # 20 runs of 60,000 + 60,000 parameters
    429
    """
    return 8 * (COVARIANCE_MATRICES * n_features * n_features + n_samples * n_features)


def check_covariance_fits(n_samples: int, n_features: int, what: str = "the Gaussian estimate") -> None:
    """A :class:`CovarianceMemoryError` naming the memory needed and what fits, before any
    allocation, when :func:`covariance_bytes` exceeds the memory this process can allocate
    (:func:`mianalysis._internal.memory.available_memory_bytes`: physical memory, cgroup limits,
    ``ulimit -v``); nothing when that is unknown or the need is below 1 GiB."""
    need = covariance_bytes(n_samples, n_features)
    if need <= _MEMORY_CHECK_BYTES:
        return
    from .._internal import memory as _memory

    room = _memory.available_memory_bytes()
    if not room or need <= room:
        return
    fits = int(np.sqrt(room / 8 / COVARIANCE_MATRICES))
    few = n_samples <= n_features
    hint = _fewer_runs_hint(n_samples) if few else "; estimate fewer features (e.g. one layer at a time)"
    raise CovarianceMemoryError(
        f"{what} on {n_features:,} joint dimensions needs about {need / 2**30:.3g} GiB ({COVARIANCE_MATRICES} "
        f"float64 matrices of {n_features:,} x {n_features:,}), more than the {room / 2**30:.3g} GiB this process "
        f"can allocate (about {fits:,} joint dimensions fit)"
        + (f"; with {n_samples} runs <= {n_features:,} dimensions there is no plain estimate anyway" if few else "")
        + hint)


# ---------------------------------------------------------------- permutation nulls
# A shuffled pairing's value comes from the marginal factors only while it is far from the
# recomputation's positive-definiteness tolerance (more than _PD_MARGIN times it) and, with
# shrinkage, while the Ledoit-Wolf intensity is at least _MIN_INTENSITY (then every block
# of the shrunk matrix has eigenvalues of at least that intensity, far above the tolerance).
# Otherwise that shuffle is recomputed by gaussian_mi, which computes it or raises its error.
_PD_MARGIN = 1e3
_MIN_INTENSITY = 1e-6
_ROW_BLOCK = 512
_EPS = float(np.finfo(np.float64).eps)


CROSS_PRECISIONS = ("float64", "float32")


def gaussian_permutation_estimates(x: ArrayLike, y: ArrayLike, permutations: Iterable[ArrayLike], *,
                                   units: str = "bits", bias_correction: bool = True,
                                   shrinkage: str | None = None, cross_precision: str = "float64") -> np.ndarray:
    r"""``gaussian_mi(x, y[perm])`` for each `perm` of `permutations`, from factors of the
    marginal blocks computed once.

    Shuffling the rows of `y` leaves the covariance blocks of x and of y as they are and
    changes only the cross block, so each shuffle needs neither the joint covariance nor
    its Cholesky factor (Schur complement; Anderson 2003, Section 8.4). The values are
    those of :func:`gaussian_mi` recomputed on each shuffle, up to rounding (the tests ask
    for 1e-9 relative; typically 1e-13).

    Without shrinkage the correlation blocks are factored once, ``R_xx = L_x L_x^T`` and
    ``R_yy = L_y L_y^T``, and the samples whitened once, :math:`W = Z L^{-T} / \sqrt{n-1}`.
    A shuffle ``pi`` then costs one cross product and one Cholesky factor of a
    ``d_y x d_y`` matrix:

    .. math::

        C = W_x^T W_{y,\pi},\qquad \hat I = -\tfrac12 \log\det(I - C^T C)

    minus the same Wishart bias correction as :func:`gaussian_mi`. The factor of
    ``I - C^T C`` also gives the joint factor's diagonal (``diag(L_y) diag(chol(I - C^T C))``),
    which :func:`gaussian_mi` checks against its tolerance.

    With ``shrinkage="ledoit-wolf"`` the intensity ``s`` depends on the whole joint matrix,
    but only through quantities that are cheap to update: of the ``1/n`` covariance ``S`` of
    the standardised samples, ``trace(S)`` does not change, ``||S||_F^2 = ||S_xx||^2 +
    ||S_yy||^2 + 2 ||S_xy||^2`` changes only in its cross term, and the fourth-moment term
    sums ``(||z_{x,k}||^2 + ||z_{y,pi(k)}||^2)^2`` over the rows, in O(n). With
    ``S_xx = U diag(l_x) U^T`` and ``S_yy = V diag(l_y) V^T`` (computed once) the shrunk
    blocks are diagonal in the rotated coordinates, ``h = (1 - s) l + s mu``, and

    .. math::

        K = \operatorname{diag}(h_x)^{-1/2}\,\frac{(1-s)}{n} (Z_x U)^T (Z_y V)_\pi\,
            \operatorname{diag}(h_y)^{-1/2},\qquad \hat I = -\tfrac12 \log\det(I - K^T K)

    (``K K^T`` when x has fewer dimensions), which is the shrunk estimate: the
    rescaling of the shrunk covariance to a correlation matrix cancels in the formula.
    Directions of ``S_xx`` beyond rank ``n - 1`` (centred data have no more) carry no
    variance and are left out.

    A shuffle near the edge of positive definiteness (or with a Ledoit-Wolf intensity
    below 1e-6, where the shrunk blocks may be singular) is recomputed by
    :func:`gaussian_mi` itself, which then gives its value or raises its error.

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y, whose rows are shuffled.
    permutations : iterable of array-like of shape (n_samples,)
        Permutations of ``range(n_samples)``: each gives the estimate of ``x`` paired with
        ``y[perm]``. Read a few per thread at a time, so a generator of them needs no
        memory for all at once.
    units, bias_correction, shrinkage
        As in :func:`gaussian_mi`.
    cross_precision : {"float64", "float32"}, default="float64"
        The precision of each shuffle's cross product, the one step that costs
        ``n d_x d_y``. "float32": the whitened (or rotated) samples are rounded to single
        precision once and each cross product is summed by single-precision BLAS (about 3x
        faster on x86-64 at 22,000 runs); everything after it stays float64. The values
        then agree with float64 to about 1e-5 of the estimate (not to the bit), so compare
        them only with the unshuffled data's value computed the same way (the identity
        permutation among `permutations`), as :func:`mianalysis.mi_permutation_test` does:
        a permutation test is exact for any statistic applied alike to the data and every
        shuffle.

    Returns
    -------
    values : ndarray of shape (n_permutations,)
        The estimates in `units`.

    Raises
    ------
    ValueError
        If a permutation is not one of ``range(n_samples)``, or as :func:`gaussian_mi` for
        a covariance that is not positive definite.

    Notes
    -----
    Each shuffle is computed on one thread with single-threaded BLAS, and the shuffles run
    side by side on a thread pool, so the values do not depend on the number of threads.
    Per shuffle the cost is ``n d_x d_y + d_x d_y^2 / 2 + d^3 / 3`` multiply-adds
    (``d = min(d_x, d_y)`` with shrinkage, ``d_y`` without), against
    ``n (d_x + d_y)^2 / 2 + (d_x + d_y)^3 / 3`` and more for a recomputation.

    References
    ----------
    T. W. Anderson, *An Introduction to Multivariate Statistical Analysis*, 3rd ed., Wiley,
    2003.

    O. Ledoit and M. Wolf, "A well-conditioned estimator for large-dimensional covariance
    matrices", J. Multivariate Anal. 88 (2004) 365-411.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import gaussian_mi
    >>> from mianalysis.estimators.gaussian import gaussian_permutation_estimates
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.standard_normal((200, 3)), rng.standard_normal((200, 4))
    >>> perms = [rng.permutation(200) for _ in range(3)]
    >>> fast = gaussian_permutation_estimates(x, y, perms)
    >>> bool(np.allclose(fast, [gaussian_mi(x, y[p]) for p in perms], rtol=1e-12, atol=0))
    True
    """
    factor = check_gaussian_settings(units, bias_correction, shrinkage)
    single = check_choice(cross_precision, "cross_precision", CROSS_PRECISIONS) == "float32"
    x, y = check_paired(x, y)
    n = x.shape[0]
    perms = (_check_permutation(perm, n, b) for b, perm in enumerate(permutations))
    x, y = drop_constant_features(x, y)
    if x.shape[1] == 0 or y.shape[1] == 0:
        return np.zeros(sum(1 for _ in perms))  # I(c; Y) = 0 for every shuffle
    dx, dy = x.shape[1], y.shape[1]
    shift = 0.0
    if bias_correction and shrinkage is None:
        shift = 0.5 * (wishart_logdet_bias(dx, n) + wishart_logdet_bias(dy, n) - wishart_logdet_bias(dx + dy, n))
    from concurrent.futures import ThreadPoolExecutor

    workers = os.cpu_count() or 1
    values: list[float] = []
    with _single_threaded_blas(), ThreadPoolExecutor(max_workers=workers) as pool:
        planned, plan = False, None
        # A few shuffles per thread at a time: an iterable is read as it is used.
        while chunk := list(islice(perms, 4 * workers)):
            if not planned:  # once, when there is a shuffle to compute
                planned = True
                plan = _plain_plan(x, y, pool, single) if shrinkage is None else _shrunk_plan(x, y, pool, single)
            nats = list(pool.map(plan, chunk)) if plan is not None else [None] * len(chunk)
            for perm, value in zip(chunk, nats):
                if value is None:  # near the edge: as gaussian_mi computes it, or its error
                    values.append(gaussian_mi(x, y[perm], units=units, bias_correction=bias_correction,
                                              shrinkage=shrinkage))
                else:
                    values.append((value - shift) * factor)
    return np.array(values, dtype=np.float64)


def _check_permutation(perm: ArrayLike, n: int, index: int) -> np.ndarray:
    """`perm` as an int array, or a ValueError unless it is a permutation of range(n)."""
    arr = np.asarray(perm)
    if arr.shape != (n,) or arr.dtype.kind not in "iu" or arr.min() < 0 or not np.array_equal(
            np.bincount(arr, minlength=n), np.ones(n)):
        raise ValueError(f"each of `permutations` must be a permutation of range({n}) (n_samples); "
                         f"permutations[{index}] is not (shape {arr.shape}, dtype {arr.dtype})")
    return arr


def _standardized(a: ArrayLike) -> np.ndarray | None:
    """The columns of `a` centred and divided by their ``ddof=1`` sd as in gaussian_mi (a
    copy), or None if one of them has no spread (gaussian_mi then raises its error)."""
    z = np.array(a, dtype=np.float64)
    std = _centre_columns(z)
    if not np.all(std > 0):
        return None
    z /= std
    return z


def _by_row_blocks(function: Callable[[np.ndarray], np.ndarray], z: np.ndarray, pool: Executor,
                   width: int) -> np.ndarray:
    """``function(z[rows])`` (`width` columns) for blocks of rows of `z`, stacked: each block
    one single-threaded call, the blocks side by side on `pool`, each written into its rows
    of the result (no list of blocks to stack)."""
    out = np.empty((z.shape[0], width))

    def block(start: int) -> None:
        out[start:start + _ROW_BLOCK] = function(z[start:start + _ROW_BLOCK])

    list(pool.map(block, range(0, z.shape[0], _ROW_BLOCK)))
    return out


def lower_solve(lower: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``solve_triangular(lower, b, lower=True, check_finite=False)`` for a lower triangular
    `lower` with a positive diagonal (a Cholesky factor), with BLAS trsm itself.

    LAPACK's trtrs, behind solve_triangular, checks the diagonal for zeros and then makes
    one trsm call; solve_triangular copies `b` for it (and a C-ordered `lower` is passed as
    its transpose, upper triangular, solved transposed). The same trsm call here, arranged
    the same way for either layout of `lower`, gives the same bits without trtrs's copies."""
    trsm = get_blas_funcs("trsm", (lower, b))
    if lower.flags.f_contiguous:
        return trsm(1.0, lower, b, lower=1)
    return trsm(1.0, lower.T, b, lower=0, trans_a=1)


def _whitened(lower: np.ndarray, z: np.ndarray, scale: float, pool: Executor) -> np.ndarray:
    """``solve_triangular(lower, z.T, lower=True).T / scale`` by blocks of rows (:func:`lower_solve`)."""
    return _by_row_blocks(lambda rows: lower_solve(lower, rows.T).T / scale, z, pool, z.shape[1])


def _cholesky_diagonal(m: np.ndarray) -> np.ndarray | None:
    """The diagonal of the lower Cholesky factor of `m` (overwritten), or None if `m` is
    not numerically positive definite."""
    try:
        diag = np.diag(cholesky(m, lower=True, overwrite_a=True, check_finite=False)).copy()
    except LinAlgError:
        return None
    return diag if np.all(diag > 0) else None


def _cross_product(a: np.ndarray, b: np.ndarray, single: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``perm -> a^T b[perm]`` as float64, summed in single precision when `single` (a and
    b rounded to float32 once, here). Each thread gathers ``b[perm]`` and writes the product
    into buffers of its own, made once: at paper scale a fresh n x d array per shuffle costs
    its first touch of every page (more than the copy itself on a machine that returns freed
    memory at once)."""
    if single:
        a, b = a.astype(np.float32), b.astype(np.float32)
    held = threading.local()

    def cross(perm: np.ndarray) -> np.ndarray:
        """The product in this thread's buffer, valid until the thread's next call."""
        if not hasattr(held, "rows"):
            held.rows = np.empty_like(b)
            held.product = np.empty((a.shape[1], b.shape[1]), dtype=b.dtype)
            held.wide = np.empty(held.product.shape) if single else held.product
        np.take(b, perm, axis=0, out=held.rows, mode="clip")  # "raise" would gather into a temporary first
        np.matmul(a.T, held.rows, out=held.product)
        if single:
            held.wide[...] = held.product
        return held.wide

    return cross


def _plain_plan(x: np.ndarray, y: np.ndarray, pool: Executor,
                single: bool = False) -> Callable[[np.ndarray], float | None] | None:
    """For the sample covariance: the function ``perm -> plug-in MI in nats`` of x and
    y[perm], or None when each shuffle must be recomputed; `single`: the cross products
    in float32 (:func:`_cross_product`)."""
    zx, zy = _standardized(x), _standardized(y)
    if zx is None or zy is None:
        return None
    n, dx = zx.shape
    dy = zy.shape[1]
    factors = []
    for z in (zx, zy):
        try:
            chol = cholesky(gram_matrix(z) / (n - 1), lower=True, check_finite=False)
        except LinAlgError:
            return None
        diag = np.diag(chol)
        # gaussian_mi's tolerance (that of the joint block is the larger), with a margin
        if not np.all(diag > 0) or np.min(diag**2) <= _PD_MARGIN * max(dx + dy, n) * _EPS:
            return None
        factors.append(chol)
    lx, ly = factors
    scale = np.sqrt(n - 1.0)
    wx, wy = _whitened(lx, zx, scale, pool), _whitened(ly, zy, scale, pool)
    # gaussian_mi factors the joint matrix with x first: the last d_y entries of its
    # factor's diagonal are diag(L_y) * diag(chol(I - C^T C)).
    ly2 = np.diag(ly) ** 2
    limit = _PD_MARGIN * max(dx + dy, n) * _EPS
    cross = _cross_product(wx, wy, single)
    held = threading.local()

    def plugin(perm: np.ndarray) -> float | None:
        c = cross(perm)
        if not hasattr(held, "square"):  # one d_y x d_y buffer per thread (Cholesky overwrites it)
            held.square = np.empty((dy, dy))
        m = np.matmul(c.T, c, out=held.square)
        np.negative(m, out=m)
        m.flat[:: dy + 1] += 1.0
        diag = _cholesky_diagonal(m)
        if diag is None or np.min(ly2 * diag**2) <= limit:
            return None
        return 0.0 - float(np.log(diag).sum())

    return plugin


def _shrunk_plan(x: np.ndarray, y: np.ndarray, pool: Executor,
                 single: bool = False) -> Callable[[np.ndarray], float | None] | None:
    """For Ledoit-Wolf shrinkage: the function ``perm -> MI in nats`` of x and y[perm], or
    None when each shuffle must be recomputed; `single`: the cross products in float32."""
    zx, zy = _standardized(x), _standardized(y)
    if zx is None or zy is None:
        return None
    n, dx = zx.shape
    dy = zy.shape[1]
    p = dx + dy
    grams = [gram_matrix(zx), gram_matrix(zy)]
    # Centred samples have rank <= n - 1: keep that many leading eigen-directions.
    eig = list(pool.map(lambda g: eigh(g, driver="evd", check_finite=False), grams))
    (lx, ux), (ly, uy) = [(w[-min(g.shape[0], n - 1):], u[:, -min(g.shape[0], n - 1):])
                          for (w, u), g in zip(eig, grams)]
    rx = _by_row_blocks(lambda rows: rows @ ux, zx, pool, ux.shape[1])
    ry = _by_row_blocks(lambda rows: rows @ uy, zy, pool, uy.shape[1])
    trace = (np.trace(grams[0]) + np.trace(grams[1])) / n
    mu = trace / p
    frob2_marginal = float(np.einsum("ij,ij->", grams[0], grams[0]) + np.einsum("ij,ij->", grams[1], grams[1]))
    norms_x, norms_y = np.einsum("ij,ij->i", zx, zx), np.einsum("ij,ij->i", zy, zy)
    small_x = rx.shape[1] <= ry.shape[1]
    cross = _cross_product(rx, ry, single)

    def mi(perm: np.ndarray) -> float | None:
        c = cross(perm)
        # Ledoit-Wolf intensity, the terms of ledoit_wolf_covariance for the joint samples [zx, zy[perm]]
        frob2 = (frob2_marginal + 2.0 * float(np.einsum("ij,ij->", c, c))) / n**2
        fourth = float(np.sum((norms_x + norms_y[perm]) ** 2))
        beta = (fourth / n - frob2) / (p * n)
        delta = (frob2 - 2.0 * mu * trace + p * mu**2) / p
        if not delta > 0:
            return None
        intensity = min(beta, delta) / delta
        if not intensity >= _MIN_INTENSITY:
            return None
        hx = (1.0 - intensity) * lx / n + intensity * mu
        hy = (1.0 - intensity) * ly / n + intensity * mu
        if not (np.min(hx) > 0 and np.min(hy) > 0):
            return None
        k = c * ((1.0 - intensity) / n)
        k /= np.sqrt(hx)[:, None]
        k /= np.sqrt(hy)[None, :]
        m = -(k @ k.T) if small_x else -(k.T @ k)
        m.flat[:: m.shape[0] + 1] += 1.0
        diag = _cholesky_diagonal(m)
        return None if diag is None else 0.0 - float(np.log(diag).sum())  # +0.0, not -0.0, for MI 0

    return mi
