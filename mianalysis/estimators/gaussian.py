"""Mutual information of jointly Gaussian vectors from log-determinants of covariances."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import LinAlgError, cholesky
from scipy.special import digamma

from .._scaling import SAFE_HIGH, SAFE_LOW, pow2_scale
from .._validation import ConstantFeatureWarning, check_choice, check_flag, check_paired, check_samples, check_units, drop_constant_features

__all__ = [
    "gaussian_mi", "gaussian_cmi", "SHRINKAGE", "check_gaussian_settings", "wishart_logdet_bias",
    "gram_matrix", "ledoit_wolf_covariance", "ledoit_wolf_intensity"
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
        the estimate stays >= 0); use it when ``n_samples <= n_features_x + n_features_y`` or the covariance is
        near-singular. Shrinkage pulls correlations towards zero, so it biases MI downwards.

    Returns
    -------
    mi : float
        The estimate in `units`. With `bias_correction` it may be slightly negative for
        independent data.

    Raises
    ------
    ValueError
        If a covariance block (x, y or joint) is not numerically positive definite, naming
        the block and the reason (too few samples, linearly dependent features).

    Warns
    -----
    ConstantFeatureWarning
        If a feature is constant; it is dropped (see Notes).

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

    corr = _joint_correlation(x, y, shrinkage)
    blocks = (("x", slice(0, dx)), ("y", slice(dx, d)), ("joint", slice(0, d)))
    logdet = {}
    for name, sl in blocks:
        logdet[name] = _logdet_pd(corr[sl, sl], name, n, shrinkage)

    mi = 0.5 * (logdet["x"] + logdet["y"] - logdet["joint"])
    if bias_correction and shrinkage is None:
        # Reached only when the joint covariance is positive definite, so n > d.
        mi -= 0.5 * (
            wishart_logdet_bias(dx, n) + wishart_logdet_bias(dy, n) - wishart_logdet_bias(d, n)
        )
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
        naming the block and the reason (too few samples, linearly dependent features).

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
    corr = _joint_correlation(x, np.hstack([y, z]), shrinkage)
    ix, iy, iz = np.arange(dx), np.arange(dx, dx + dy), np.arange(dx + dy, d)
    blocks = {"x,z": np.r_[ix, iz], "y,z": np.r_[iy, iz], "z": iz, "joint": np.arange(d)}
    logdet = {name: _logdet_pd(corr[np.ix_(idx, idx)], name, n, shrinkage) for name, idx in blocks.items()}
    cmi = 0.5 * (logdet["x,z"] + logdet["y,z"] - logdet["z"] - logdet["joint"])
    if bias_correction and shrinkage is None:
        # Reached only when the joint covariance is positive definite, so n > d.
        cmi -= 0.5 * (wishart_logdet_bias(dx + dz, n) + wishart_logdet_bias(dy + dz, n)
                      - wishart_logdet_bias(dz, n) - wishart_logdet_bias(d, n))
    return float(cmi * factor)


def _check_conditioning(z, n_samples) -> np.ndarray:
    """`z` as a 2-D float array with `n_samples` rows; ``(n_samples, 0)`` is allowed."""
    arr = np.asarray(z) if not isinstance(z, np.ndarray) else z
    if arr.ndim == 2 and arr.shape[1] == 0 and arr.shape[0] == n_samples and arr.dtype.kind in "biuf":
        return np.empty((n_samples, 0))
    z = check_samples(z, "z")
    if z.shape[0] != n_samples:
        raise ValueError(
            f"`z` must have as many samples (rows) as `x` and `y`; got {z.shape[0]} and {n_samples}")
    return z


def _drop_constant_conditioning(z) -> np.ndarray:
    """`z` without its constant columns (conditioning on a constant is conditioning on
    nothing), warning with `ConstantFeatureWarning` if any."""
    keep = z.max(axis=0) > z.min(axis=0)
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


def _joint_correlation(x, y, shrinkage):
    """Correlation matrix of the joint samples [x, y], shrunk if asked."""
    z = np.hstack([x, y])
    # Correlations do not depend on the scale of a column: bring columns whose values are
    # beyond ~1e135 or below ~1e-135 to [1, 2) by a power of two (exact), so that neither
    # the mean's sum nor the squares below overflow or underflow. Other columns are left
    # as they are (the same bits as without this step).
    top = np.abs(z).max(axis=0)
    extreme = (top > SAFE_HIGH) | (top < SAFE_LOW)
    if extreme.any():
        z[:, extreme] /= pow2_scale(top[extreme])
    z -= z.mean(axis=0)
    std = np.sqrt(np.einsum("ij,ij->j", z, z) / (z.shape[0] - 1))
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


GRAM_BLOCK = 256


_BLAS_CONTROLLER: list[Any] = []  # one threadpoolctl.ThreadpoolController (threadpoolctl has no type hints)


def _single_threaded_blas():
    """A context in which the BLAS libraries loaded in this process use one thread.

    threadpoolctl finds the loaded libraries by reading the process's memory map, which
    costs about 1.5 ms, more than a small estimate itself; the controller is made once
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

    def lower_block(s):  # rows s.. of the column block s..s+block: the lower triangle only
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


def _logdet_pd(corr, block, n_samples, shrinkage):
    """log det of a correlation matrix by Cholesky, or a ValueError naming the block."""
    p = corr.shape[0]
    hint = "" if shrinkage else "; use shrinkage='ledoit-wolf'"
    try:
        with _single_threaded_blas():  # the same bits for any thread count
            chol = cholesky(corr, lower=True, check_finite=False)
        diag = np.diag(chol)
        ok = np.all(diag > 0)
    except LinAlgError:
        ok = False
    # diag(chol)**2 is the variance of each standardised feature left unexplained by the
    # features before it: below this tolerance the matrix is singular to working precision.
    tol = max(p, n_samples) * np.finfo(np.float64).eps
    if not ok or np.min(diag**2) <= tol:
        if n_samples <= p:
            why = f"n_samples={n_samples} <= {p} features"
        else:
            why = "features are linearly dependent (or nearly so)"
        raise ValueError(
            f"the {block} covariance matrix ({p}x{p}) is not positive definite: {why}{hint}"
        )
    return 2.0 * float(np.log(diag).sum())
