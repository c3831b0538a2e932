r"""The additive-noise model's prediction of how mutual information between clients changes.

Under the additive model each client's parameter vector is a shared start plus its own
noise, ``X_t = theta0 + e_X(t)`` and ``Y_t = theta0 + e_Y(t)``, the noises independent of
each other and of ``theta0``. Training only changes the noises, so the MI between clients
can only fall or stay, and by an amount the samples determine. The core paper argues that
MI rising while the clients move apart cannot come from this model; the functions here
compute what the model predicts from samples at two checkpoints, so that an experiment can
set the prediction beside the estimated change and say whether the data contradict it.

Numerical only: arrays in, numbers out; no files, no plots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import LinAlgError, cholesky

from ..._internal.validation import check_flag, check_real, check_samples, check_units
from ...estimators.gaussian import wishart_logdet_bias

__all__ = [
    "AdditivePrediction",
    "additive_model_mi",
    "isotropic_additive_mi",
    "additive_model_verdict",
    "AdditiveTest",
    "additive_model_test",
]

FALLBACKS = (None, "isotropic")
VERDICTS = ("contradicted", "not contradicted")
NOT_DECIDED = "not decided"


@dataclass(frozen=True)
class AdditivePrediction:
    """What the additive-noise model predicts between two checkpoints.

    Attributes
    ----------
    mi_start : float
        MI between the clients at the first checkpoint, from the model fitted there.
    mi_predicted : float
        MI the model predicts at the later checkpoint: the shared start estimated at the
        first checkpoint, the noises grown to the later checkpoint's covariances.
    predicted_change : float
        ``mi_predicted - mi_start``; never positive when the model fits (noise only grows).
    distance_change : float
        The coarse small-noise limit of the prediction, ``-(d/2) log`` of the ratio of the
        (centred) mean squared distances between the clients, later over first.
    method : {"covariance", "isotropic"}
        Which version computed `mi_start` and `mi_predicted`.
    units : {"bits", "nats"}
        Unit of the four numbers above.
    n_samples : int
        Number of runs.
    n_features : int
        Number of parameters per client, ``d``.
    """

    mi_start: float
    mi_predicted: float
    predicted_change: float
    distance_change: float
    method: str
    units: str
    n_samples: int
    n_features: int


def additive_model_mi(x_start: ArrayLike, y_start: ArrayLike, x_next: ArrayLike, y_next: ArrayLike, *, units: str = "bits",
                      bias_correction: bool = True, fallback: str | None = None) -> AdditivePrediction:
    r"""MI change the additive-noise model predicts between two checkpoints (full covariances).

    Model: ``X_t = theta0 + e_X(t)`` and ``Y_t = theta0 + e_Y(t)`` with a shared start
    :math:`\theta_0 \sim N(m, S_0)` and independent noises
    :math:`e_X(t) \sim N(0, S_X(t))`, :math:`e_Y(t) \sim N(0, S_Y(t))`. Then

    .. math::

        \operatorname{Cov}(X_t) = S_0 + S_X(t), \quad
        \operatorname{Cov}(Y_t) = S_0 + S_Y(t), \quad
        \operatorname{Cov}(X_t, Y_t) = S_0,

        I(X_t; Y_t) = \tfrac12 \left[\log\det(S_0 + S_X) + \log\det(S_0 + S_Y)
                      - \log\det \begin{pmatrix} S_0 + S_X & S_0 \\ S_0 & S_0 + S_Y
                      \end{pmatrix}\right].

    The cross-covariance is :math:`S_0` at every checkpoint: training changes only the
    noises. So :math:`S_0` is estimated from the cross-covariance at the first checkpoint
    (symmetrised, :math:`(C_{XY} + C_{XY}^\top)/2`), and the model's MI at either
    checkpoint follows from that :math:`S_0` and the checkpoint's marginal covariances.
    `mi_predicted` uses the later marginals, `mi_start` the first ones; their difference
    is the predicted change (estimating both ends with the same :math:`S_0` cancels most
    of its sampling error). With the Schur complement the MI is
    :math:`-\tfrac12 \log\det(I - \Sigma_X^{-1} S_0 \Sigma_Y^{-1} S_0)`; as the noises
    grow the product shrinks, so the model's MI can only fall or stay (the
    data-processing inequality in matrix form). When the data follow the model, the
    prediction is the exact MI at the later checkpoint up to sampling error.

    Parameters
    ----------
    x_start, y_start : array-like of shape (n_samples, n_features)
        Client a's and client b's parameter vectors at the first checkpoint; row ``i`` of
        every array is run ``i``.
    x_next, y_next : array-like of shape (n_samples, n_features)
        The same runs at the later checkpoint.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    bias_correction : bool, default=True
        Subtract an estimate of the plug-in bias from both ends. The plug-in MI of a sample
        covariance is biased upwards by about ``d_x d_y / (2 n)`` nats, one ``1/(2n)`` per
        free cross-covariance parameter, and :func:`mianalysis.gaussian_mi` removes the
        exact Wishart bias. Here the cross block is symmetrised, leaving
        ``d (d + 1) / 2`` free parameters of ``d**2``, so the Wishart correction of
        :func:`mianalysis.gaussian_mi` is scaled by ``(d + 1) / (2 d)``. A Monte Carlo
        (d = 3 and 10, n = 300 to 2,000, 150 repetitions) left a bias within two standard
        errors when the MI is a few bits; when the noise is small against the start (MI
        of 7 to 12 bits in 10 dimensions) the later end stays biased upwards by about three
        times the correction (0.06 bits at n = 2,000). The predicted change does not depend
        on this setting: the same amount is subtracted from both ends.
    fallback : {None, "isotropic"}, default=None
        What to do when ``n_samples <= 2 * n_features`` (too few runs for a positive
        definite joint covariance): None raises a `ValueError`; "isotropic" returns
        :func:`isotropic_additive_mi` instead (its `method` says so).

    Returns
    -------
    AdditivePrediction
        With ``method="covariance"`` (or "isotropic" after a fallback).

    Raises
    ------
    ValueError
        If the arrays differ in runs or features, ``n_samples <= 2 * n_features`` without
        a fallback, a feature is constant, or the shared start estimated at the first
        checkpoint does not fit inside a checkpoint's covariances (the joint matrix is not
        positive definite: no additive model with these marginals has that cross-covariance).

    See Also
    --------
    isotropic_additive_mi : the coarse version from traces and mean squared distances.
    additive_model_verdict : compare the prediction with an estimated change.

    Examples
    --------
    Data drawn from the additive model, shared start N(0, I), client noise variance 0.5
    then 2 in each of d = 4 coordinates. The exact MI per coordinate is
    ``-0.5 log2(1 - 1 / (1 + v)**2)``:

    >>> import math
    >>> import numpy as np
    >>> from mianalysis import additive_model_mi
    >>> rng = np.random.default_rng(0)
    >>> n, d = 20_000, 4
    >>> theta0 = rng.standard_normal((n, d))
    >>> noise = lambda v: math.sqrt(v) * rng.standard_normal((n, d))
    >>> x0, y0 = theta0 + noise(0.5), theta0 + noise(0.5)
    >>> x1, y1 = x0 + noise(1.5), y0 + noise(1.5)        # noise grows to variance 2
    >>> exact = lambda v: -d / 2 * math.log2(1 - 1 / (1 + v) ** 2)
    >>> round(exact(0.5), 2), round(exact(2), 2), round(exact(2) - exact(0.5), 2)
    (1.7, 0.34, -1.36)
    >>> pred = additive_model_mi(x0, y0, x1, y1)
    >>> round(pred.mi_start, 2), round(pred.mi_predicted, 2), round(pred.predicted_change, 2)
    (1.7, 0.34, -1.36)
    >>> pred.method
    'covariance'
    """
    factor = check_units(units)
    check_flag(bias_correction, "bias_correction")
    if fallback not in FALLBACKS:
        raise ValueError(f"`fallback` must be None or 'isotropic'; got {fallback!r}")
    x0, y0, x1, y1 = _check_checkpoints(x_start, y_start, x_next, y_next)
    n, d = x0.shape
    if n <= 2 * d:
        if fallback == "isotropic":
            return isotropic_additive_mi(x0, y0, x1, y1, units=units)
        raise ValueError(
            f"`x_start` and the other arrays need more than 2 * n_features = {2 * d} runs for a positive "
            f"definite joint covariance; got n_samples={n}: use isotropic_additive_mi or fallback='isotropic'"
        )
    cross = _centred(x0).T @ _centred(y0) / (n - 1)
    s0 = 0.5 * (cross + cross.T)
    mi = []
    for name, x, y in (("first", x0, y0), ("later", x1, y1)):
        mi.append(_model_mi(np.cov(x, rowvar=False), np.cov(y, rowvar=False), s0, name))
    if bias_correction:
        # The Wishart bias of a sample MI, scaled by the share of free cross-covariance
        # parameters left after symmetrising: d (d + 1) / 2 of d**2 (see `bias_correction`).
        bias = 0.5 * (2 * wishart_logdet_bias(d, n) - wishart_logdet_bias(2 * d, n)) * (d + 1) / (2 * d)
        mi = [m - bias for m in mi]
    return _prediction(mi, x0, y0, x1, y1, method="covariance", units=units, factor=factor)


def isotropic_additive_mi(x_start: ArrayLike, y_start: ArrayLike, x_next: ArrayLike, y_next: ArrayLike, *,
                          units: str = "bits") -> AdditivePrediction:
    r"""MI change the additive-noise model predicts, isotropic version (traces and distances).

    The coarse version of :func:`additive_model_mi`: every covariance is taken as a
    multiple of the identity, :math:`S_0 = s_0^2 I`, :math:`S_X = a I`, :math:`S_Y = b I`,
    so each of the ``d`` coordinates is an independent bivariate Gaussian with
    correlation :math:`\rho^2 = s_0^4 / ((s_0^2 + a)(s_0^2 + b))` and

    .. math::

        I = -\tfrac{d}{2} \log(1 - \rho^2).

    The per-coordinate variances :math:`v_X = \operatorname{tr}\operatorname{Cov}(X)/d`
    and :math:`v_Y` are read at each checkpoint, and :math:`s_0^2` from the first one as
    :math:`\operatorname{tr}\operatorname{Cov}(X, Y)/d = (v_X + v_Y - D/d)/2`, where
    :math:`D = \operatorname{tr}\operatorname{Cov}(X - Y) = \operatorname{tr}(S_X + S_Y)`
    is the mean squared distance between the clients with the mean drift removed (a
    deterministic drift changes no MI). A negative :math:`s_0^2` (no shared start
    detectable) is taken as 0. The MI is computed as
    :math:`1 - \rho^2 = (s_0^2 D/d + (v_X - s_0^2)(v_Y - s_0^2)) / (v_X v_Y)` (at most 1), with
    :math:`a + b = D/d` read from the distances at each checkpoint: the distances are free
    of the start's sampling error, which would swamp a small noise in
    :math:`v_X v_Y - s_0^4`. When the noise is small against the start
    (:math:`1 - \rho^2 \approx D / (d s_0^2)`) the predicted change tends to
    ``distance_change`` :math:`= -\tfrac{d}{2}\log(D_{t+1}/D_t)`, the scalar rule that a
    doubling of the mean squared distance costs ``d/2`` bits.

    It needs only traces, so it works for any number of runs >= 2, but it is exact only
    for isotropic data; it carries no bias correction (traces average over coordinates).

    Parameters
    ----------
    x_start, y_start : array-like of shape (n_samples, n_features)
        Client a's and client b's parameter vectors at the first checkpoint, row ``i`` of
        every array being run ``i``.
    x_next, y_next : array-like of shape (n_samples, n_features)
        The same runs at the later checkpoint.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.

    Returns
    -------
    AdditivePrediction
        With ``method="isotropic"``.

    Raises
    ------
    ValueError
        If the arrays differ in runs or features, have fewer than 2 runs, a client does not
        vary at a checkpoint, or the shared start exceeds a client's variance at a
        checkpoint (:math:`\rho^2 \ge 1`: no additive model has those variances).

    Examples
    --------
    Shared start N(0, I) in d = 6 coordinates, noise sd 0.05 then 0.1 per client:
    the mean squared distance grows 4-fold, so the scalar rule predicts a drop of
    ``(6/2) log2(4) = 6`` bits, close to the exact isotropic prediction:

    >>> import numpy as np
    >>> from mianalysis import isotropic_additive_mi
    >>> rng = np.random.default_rng(1)
    >>> n, d = 20_000, 6
    >>> theta0 = rng.standard_normal((n, d))
    >>> noise = lambda sd: sd * rng.standard_normal((n, d))
    >>> x0, y0 = theta0 + noise(0.05), theta0 + noise(0.05)
    >>> x1, y1 = x0 + noise(0.0866), y0 + noise(0.0866)   # total sd 0.1
    >>> pred = isotropic_additive_mi(x0, y0, x1, y1)
    >>> round(pred.distance_change, 1), round(pred.predicted_change, 1)
    (-6.0, -5.9)
    """
    factor = check_units(units)
    x0, y0, x1, y1 = _check_checkpoints(x_start, y_start, x_next, y_next, min_samples=2)
    n, d = x0.shape
    s0 = max(float(np.einsum("ij,ij->", _centred(x0), _centred(y0))) / ((n - 1) * d), 0.0)
    mi = []
    for name, x, y in (("first", x0, y0), ("later", x1, y1)):
        vx, vy = _mean_variance(x), _mean_variance(y)
        if vx == 0 or vy == 0:
            raise ValueError(f"a client's parameters do not vary over the runs at the {name} checkpoint")
        if s0 > min(vx, vy):
            raise ValueError(
                f"the shared start estimated at the first checkpoint (variance {s0:.3g} per coordinate) does not "
                f"fit inside the clients' variances at the {name} checkpoint ({vx:.3g}, {vy:.3g}): "
                "no additive model has these variances"
            )
        # 1 - rho^2 = (s0 (a + b) + a b) / (vx vy), with a + b = D / d read from the distances:
        # free of the start's sampling error, which would swamp a small noise in vx vy - s0^2.
        one_minus_rho2 = (s0 * _mean_variance(x - y) + (vx - s0) * (vy - s0)) / (vx * vy)
        if one_minus_rho2 <= 0:
            raise ValueError(f"the clients coincide in every run at the {name} checkpoint: the MI is infinite")
        mi.append(-0.5 * d * math.log(min(one_minus_rho2, 1.0)))
    return _prediction(mi, x0, y0, x1, y1, method="isotropic", units=units, factor=factor)


def additive_model_verdict(estimated_change_ci: tuple[float, float], predicted_change: float) -> str:
    """Whether an estimated MI change contradicts the additive model's prediction.

    The additive model predicts the change exactly (up to the prediction's own, usually
    much smaller, sampling error), so the data contradict it when the confidence interval
    of the estimated change excludes the prediction. The interval should come from the
    same estimator the prediction mirrors (the bias-corrected Gaussian estimate for
    :func:`additive_model_mi`).

    Parameters
    ----------
    estimated_change_ci : tuple of float (lo, hi)
        Confidence interval of the estimated MI change between the checkpoints.
    predicted_change : float
        ``AdditivePrediction.predicted_change``, in the same units.

    Returns
    -------
    str
        "contradicted" if the interval excludes the prediction, else "not contradicted".

    Examples
    --------
    >>> from mianalysis import additive_model_verdict
    >>> additive_model_verdict((0.10, 0.30), -0.05)   # MI rose; the model says it falls
    'contradicted'
    >>> additive_model_verdict((-0.12, 0.01), -0.05)
    'not contradicted'
    """
    try:
        lo, hi = estimated_change_ci
    except (TypeError, ValueError):
        raise TypeError(
            f"`estimated_change_ci` must be a pair (lo, hi) of numbers; got {estimated_change_ci!r}"
        ) from None
    lo = _finite(lo, "estimated_change_ci")
    hi = _finite(hi, "estimated_change_ci")
    if lo > hi:
        raise ValueError(f"`estimated_change_ci` must have lo <= hi; got ({lo}, {hi})")
    predicted = _finite(predicted_change, "predicted_change")
    return VERDICTS[1] if lo <= predicted <= hi else VERDICTS[0]


@dataclass(frozen=True)
class AdditiveTest:
    """Paired bootstrap test of the additive-noise model between two checkpoints.

    Attributes
    ----------
    prediction : AdditivePrediction
        :func:`additive_model_mi` on all runs (its `predicted_change` is not bias-corrected).
    estimated_change : float
        Bias-corrected Gaussian MI (:func:`mianalysis.gaussian_mi`) at the later checkpoint
        minus that at the first one.
    prediction_bias : float
        Bootstrap estimate of the bias of ``prediction.predicted_change``: the mean of the
        predicted change over the resamples minus its value on all runs (NaN when no
        resample gave a prediction).
    difference : float
        ``estimated_change - (prediction.predicted_change - prediction_bias)``: the
        estimated change minus the bias-corrected predicted change; 0 under the model.
    ci_low, ci_high : float
        Normal interval of `difference` from the bootstrap sd (NaN when not decided).
    verdict : {"contradicted", "not contradicted", "not decided"}
        "contradicted" when the interval excludes 0.
    n_resamples : int
        Resamples drawn.
    n_failed : int
        Resamples on which the prediction failed (the start did not fit) or a covariance
        was singular; they are left out.
    reason : str
        Why the verdict is "not decided"; empty otherwise.
    units : {"bits", "nats"}
        Unit of the numbers above.
    """

    prediction: AdditivePrediction
    estimated_change: float
    prediction_bias: float
    difference: float
    ci_low: float
    ci_high: float
    verdict: str
    n_resamples: int
    n_failed: int
    reason: str
    units: str


def additive_model_test(x_start: ArrayLike, y_start: ArrayLike, x_next: ArrayLike, y_next: ArrayLike, *,
                        n_resamples: int = 20, level: float = 0.95, random_state: int | np.random.Generator | None = 0,
                        units: str = "bits", fallback: str | None = None) -> AdditiveTest:
    r"""Whether the estimated MI change contradicts the additive model, with the prediction's own error.

    :func:`additive_model_verdict` compares the estimated change's interval with the
    prediction as if the prediction were exact. It is not: the shared start :math:`S_0` is
    estimated from a sample cross-covariance, and the model's MI is about quadratic in its
    sampling noise, so the predicted change is biased downwards, by about
    :math:`-\tfrac{d(d+1)}{4n}(1 - r)` nats when the true start is small (``r`` the
    factor by which the model's MI shrinks); with a fixed start (nothing shared, true
    change 0) that is -0.07 bits at d = 20 and about -26 bits at d = 358 (n = 2,000),
    while the estimated change is about 0 with a narrow interval.

    This test bootstraps the runs (the same run indices for all four arrays), recomputes on
    each resample both the estimated change (bias-corrected :func:`mianalysis.gaussian_mi`
    at each end, as :func:`mianalysis.analyze` does) and the predicted change, and forms
    the normal interval of their difference from the bootstrap sd, with Student's t
    quantile on ``B - 1`` degrees of freedom (:func:`mianalysis.analysis.inference.intervals.normal_interval`),
    B the resamples that gave a prediction. The sd is widened by :math:`\sqrt{1 + 1/B}`
    for the noise of the bias estimate. The predicted change is bias-corrected with the
    bootstrap (``2 * full - mean(resamples)``, Efron and Tibshirani 1993, ch. 10); the
    estimated change is already bias-corrected and is used as it is. The verdict is
    "contradicted" when the interval of the difference excludes 0.

    Parameters
    ----------
    x_start, y_start, x_next, y_next : array-like of shape (n_samples, n_features)
        As for :func:`additive_model_mi`; row ``i`` of every array is run ``i``.
    n_resamples : int, default=20
        Bootstrap resamples (at least 2).
    level : float, default=0.95
        Confidence level of the interval.
    random_state : None, int or numpy.random.Generator, default=0
        Seeds the resampling.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    fallback : {None, "isotropic"}, default=None
        Passed to :func:`additive_model_mi`.

    Returns
    -------
    AdditiveTest
        The verdict is "not decided" (with `reason`, NaN interval) when the prediction
        failed on more than half of the resamples, fewer than two resamples gave one, or
        the Gaussian MI cannot be estimated without shrinkage (``n_samples <= 2 *
        n_features``, where only the isotropic fallback predicts).

    Raises
    ------
    ValueError
        As :func:`additive_model_mi` on all runs (for instance when the start estimated at
        the first checkpoint does not fit inside the later covariances), or for bad
        settings.

    See Also
    --------
    additive_model_mi : the prediction.
    mianalysis.analysis.inference.intervals.normal_interval : the interval.

    Examples
    --------
    Nothing shared (a fixed start): the raw prediction is biased below the true change 0,
    but the test does not call that a contradiction:

    >>> import numpy as np
    >>> from mianalysis import additive_model_test
    >>> rng = np.random.default_rng(0)
    >>> x0, y0 = rng.standard_normal((2, 2000, 10))
    >>> x1, y1 = x0 + rng.standard_normal((2000, 10)), y0 + rng.standard_normal((2000, 10))
    >>> test = additive_model_test(x0, y0, x1, y1)
    >>> bool(test.prediction.predicted_change < 0), test.verdict
    (True, 'not contradicted')
    """
    from ...estimators.gaussian import gaussian_mi
    from ..inference.intervals import check_level, normal_interval
    from ..._internal.validation import check_int, check_random_state

    factor = check_units(units)
    level = check_level(level, "level")
    n_resamples = check_int(n_resamples, "n_resamples", low=2)
    rng = check_random_state(random_state)
    x0, y0, x1, y1 = _check_checkpoints(x_start, y_start, x_next, y_next)
    pred = additive_model_mi(x0, y0, x1, y1, units=units, fallback=fallback)

    def change(a0: np.ndarray, b0: np.ndarray, a1: np.ndarray, b1: np.ndarray) -> float:
        return (gaussian_mi(a1, b1, units="nats") - gaussian_mi(a0, b0, units="nats")) * factor

    def not_decided(reason: str, **kw: Any) -> AdditiveTest:
        return AdditiveTest(prediction=pred, units=units, n_resamples=n_resamples, prediction_bias=math.nan,
                            difference=math.nan, ci_low=math.nan, ci_high=math.nan, verdict=NOT_DECIDED,
                            reason=reason, **kw)

    try:
        estimate = change(x0, y0, x1, y1)
    except ValueError as exc:  # singular covariance: a shrinkage estimate does not estimate the MI
        return not_decided(f"no Gaussian MI estimate of the change without shrinkage: {exc}",
                           estimated_change=math.nan, n_failed=0)
    n = x0.shape[0]
    predicted, estimated = [], []
    for _ in range(n_resamples):
        idx = rng.integers(0, n, n)
        arrays = [a[idx] for a in (x0, y0, x1, y1)]
        try:
            p = additive_model_mi(*arrays, units=units, fallback=fallback).predicted_change
            e = change(*arrays)
        except ValueError as exc:
            if not any(m in str(exc) for m in ("fit inside", "not positive definite", "singular")):
                raise
            continue  # a resample where a nearly constant parameter became constant counts as failed
        predicted.append(p)
        estimated.append(e)
    n_ok = len(predicted)
    n_failed = n_resamples - n_ok
    if n_ok < 2 or n_failed > n_resamples / 2:
        return not_decided(f"the prediction or the estimate failed on {n_failed} of {n_resamples} resamples "
                           "(the shared start estimated at the first checkpoint did not fit inside the "
                           "covariances, or a covariance was singular)",
                           estimated_change=float(estimate), n_failed=n_failed)
    predicted_a, estimated_a = np.array(predicted), np.array(estimated)
    bias = float(predicted_a.mean()) - pred.predicted_change
    difference = estimate - (pred.predicted_change - bias)
    se = float(np.std(estimated_a - predicted_a, ddof=1)) * math.sqrt(1.0 + 1.0 / n_ok)
    lo, hi = normal_interval(difference, se, level, df=n_ok - 1)
    verdict = VERDICTS[1] if lo <= 0.0 <= hi else VERDICTS[0]
    return AdditiveTest(prediction=pred, estimated_change=float(estimate), prediction_bias=bias,
                        difference=float(difference), ci_low=lo, ci_high=hi, verdict=verdict,
                        n_resamples=n_resamples, n_failed=n_failed, reason="", units=units)


# ---------------------------------------------------------------------------- helpers


def _finite(value: object, name: str) -> float:
    return check_real(value, name)


def _check_checkpoints(x_start: ArrayLike, y_start: ArrayLike, x_next: ArrayLike, y_next: ArrayLike, *,
                       min_samples: int = 3) -> list[np.ndarray]:
    """The four arrays as 2-D float arrays of one shape (n_samples, n_features)."""
    names = ("x_start", "y_start", "x_next", "y_next")
    arrays = [check_samples(a, name) for a, name in zip((x_start, y_start, x_next, y_next), names)]
    shape = arrays[0].shape
    for a, name in zip(arrays[1:], names[1:]):
        if a.shape[0] != shape[0]:
            raise ValueError(
                f"`{name}` must hold the same runs as `x_start`: got {a.shape[0]} runs (rows) and {shape[0]}"
            )
        if a.shape[1] != shape[1]:
            raise ValueError(
                f"`{name}` must have the same parameters as `x_start` (the additive model shares one start "
                f"between the clients): got {a.shape[1]} features (columns) and {shape[1]}"
            )
    if shape[0] < min_samples:
        raise ValueError(f"`x_start` and the other arrays need at least {min_samples} runs (rows); got {shape[0]}")
    return arrays


def _centred(a: np.ndarray) -> np.ndarray:
    return a - a.mean(axis=0)


def _mean_variance(a: np.ndarray) -> float:
    """Per-coordinate variance averaged over coordinates, tr Cov(a) / d."""
    return float(np.einsum("ij,ij->", _centred(a), _centred(a))) / ((a.shape[0] - 1) * a.shape[1])


def _prediction(mi: Sequence[float], x0: np.ndarray, y0: np.ndarray, x1: np.ndarray, y1: np.ndarray, *, method: str,
                units: str, factor: float) -> AdditivePrediction:
    """The AdditivePrediction of the model's MI (nats) at the first and the later checkpoint."""
    mi_start, mi_predicted = (m * factor for m in mi)
    return AdditivePrediction(
        mi_start=float(mi_start),
        mi_predicted=float(mi_predicted),
        predicted_change=float(mi_predicted - mi_start),
        distance_change=float(_distance_change(x0, y0, x1, y1) * factor),
        method=method,
        units=units,
        n_samples=x0.shape[0],
        n_features=x0.shape[1],
    )


def _distance_change(x0: np.ndarray, y0: np.ndarray, x1: np.ndarray, y1: np.ndarray) -> float:
    """-(d/2) log of the ratio of centred mean squared distances, later over first (nats)."""
    d0 = _mean_variance(x0 - y0)
    d1 = _mean_variance(x1 - y1)
    if d0 == 0 or d1 == 0:
        return math.nan if d0 == d1 else (math.inf if d1 == 0 else -math.inf)
    return -0.5 * x0.shape[1] * math.log(d1 / d0)


def _model_mi(cov_x: np.ndarray, cov_y: np.ndarray, s0: np.ndarray, name: str) -> float:
    """0.5 [log det cov_x + log det cov_y - log det [[cov_x, s0], [s0, cov_y]]] in nats."""
    sx, sy = np.sqrt(np.diag(cov_x)), np.sqrt(np.diag(cov_y))
    if not (sx > 0).all() or not (sy > 0).all():
        client = "x" if not (sx > 0).all() else "y"
        j = int(np.flatnonzero((sx if client == "x" else sy) == 0)[0])
        raise ValueError(
            f"feature {j} of client {client} is constant at the {name} checkpoint: the covariance is singular"
        )
    # MI is unchanged by rescaling coordinates: work with correlations.
    rx, ry = cov_x / np.outer(sx, sx), cov_y / np.outer(sy, sy)
    r0 = s0 / np.outer(sx, sy)
    joint = np.block([[rx, r0], [r0.T, ry]])
    logdet = {}
    for block, mat in (("x", rx), ("y", ry), ("joint", joint)):
        try:
            diag = np.diag(cholesky(mat, lower=True, check_finite=False))
            ok = bool(np.all(diag > 0))
        except LinAlgError:
            ok = False
        if not ok:
            if block == "joint":
                raise ValueError(
                    f"the shared start estimated at the first checkpoint (its cross-covariance) does not fit "
                    f"inside the clients' covariances at the {name} checkpoint: the joint covariance is not "
                    "positive definite, which no additive model allows"
                )
            raise ValueError(f"the covariance of client {block} at the {name} checkpoint is not positive definite")
        logdet[block] = 2.0 * float(np.log(diag).sum())
    return 0.5 * (logdet["x"] + logdet["y"] - logdet["joint"])
