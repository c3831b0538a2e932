"""Where the MI estimators were calibrated against known MI, and the warning of an estimate made outside it.

Every threshold below is read off ``figures/calibration/calibration_regimes.csv``, written by
``python experiments/calibration.py --regimes`` (correlated Gaussians with known MI for the
Gaussian and KSG regimes; those and monotone maps of their coordinates, Gaussian copulas,
for the copula regime; every estimator run as :func:`mianalysis.analyze` runs it;
"within 5 %" means ``|estimate - true| <= 0.05 max(true, 1 nat)``).
``tests/test_regime.py`` derives them from that file again and fails if they disagree.

The registry names these regimes (``Estimator.regime``: "gaussian", "ksg", "copula");
:mod:`mianalysis.analysis.inference.regime` turns them into the notes of
:func:`mianalysis.analyze`'s rows, :func:`mianalysis.mi` into its judgement, and
:func:`mianalysis.gaussian_mi`, :func:`mianalysis.gaussian_copula_mi` and
:func:`mianalysis.ksg_mi` into an :class:`OutsideCalibrationWarning` when they are called,
from outside the package, on data outside their regime. The projection bound's regime is
its own (:func:`mianalysis.estimators.bound.bound_regime`).
"""

from __future__ import annotations

import inspect
import math
import warnings

__all__ = [
    "GAUSSIAN_MIN_RUNS_PER_DIM", "GAUSSIAN_MAX_BITS", "COPULA_MIN_RUNS_PER_DIM", "COPULA_MAX_BITS",
    "KSG_MAX_JOINT_DIMS", "KSG_MIN_RUNS", "KSG_MAX_BITS", "REGIMES", "REGIME_SUMMARIES", "SHRUNK",
    "gaussian_regime", "copula_regime", "ksg_regime", "covariance_reasons", "called_reasons", "OutsideCalibrationWarning",
    "warn_outside_calibration"
]

# --- from figures/calibration/calibration_regimes.csv ---------------------------------------------
# Gaussian: every bias-corrected case (n_runs > 2 x joint dims) was within 5 %, from
# 2.2 runs per joint dimension (440 runs of 100 + 100) up to 2241.6 bits (4000 runs of
# 500 + 500, rho 0.999), rounded grids included; no Ledoit-Wolf shrinkage case was
# (2.38 nats of a true 14.38 at 400 runs of 100 + 100).
GAUSSIAN_MIN_RUNS_PER_DIM = 2.2
GAUSSIAN_MAX_BITS = 2241.6
# Gaussian copula (the Gaussian estimate of normal scores): on Gaussian copulas (monotone
# maps of each coordinate of correlated Gaussians) every bias-corrected case was within 5 %
# from 2.2 runs per joint dimension up to 2241.6 bits. Not for other dependence: the
# Student t rows are off by what its tails add (the page docs/concepts/calibration.md).
COPULA_MIN_RUNS_PER_DIM = 2.2
COPULA_MAX_BITS = 2241.6
# KSG (k = 3, standardized): every case with at most 4 joint dimensions and at most 5.65
# bits was within 5 % (2000 and 8000 runs); not 4 dims at 8.97 bits (7.59), nor 6 dims
# from 3.59 bits (3.29 at 2000 runs), nor any case with 10 or more dims.
KSG_MAX_JOINT_DIMS = 4
KSG_MIN_RUNS = 2000
KSG_MAX_BITS = 5.65

#: What a Ledoit-Wolf shrinkage number is, wherever one is shown.
SHRUNK = "the Gaussian MI of a shrunk covariance: neither an estimate nor a bound"


def covariance_reasons(n_runs: int, n_features: int, value: float, *, shrinkage: bool, min_runs_per_dim: float,
                       max_bits: float) -> list[str]:
    """Why a Gaussian log-determinant estimate, made with (`shrinkage`) or without
    Ledoit-Wolf shrinkage, lies outside the box of `min_runs_per_dim` runs per joint
    dimension and `max_bits` bits (value in bits); empty inside it.

    Examples
    --------
    >>> from mianalysis.estimators.calibration import covariance_reasons
    >>> covariance_reasons(300, 180, 2.0, shrinkage=False, min_runs_per_dim=2.2, max_bits=2241.6)
    ['< 2.2 runs per joint dim']
    """
    reasons = []
    if shrinkage:
        reasons.append(f"shrinkage estimate ({n_runs} runs <= 2 x {n_features} joint dims)"
                       if n_runs <= 2 * n_features else "shrinkage estimate (singular covariance)")
    elif n_runs < min_runs_per_dim * n_features:
        reasons.append(f"< {min_runs_per_dim} runs per joint dim")
    return reasons + _too_many_bits(value, max_bits)


def gaussian_regime(n_runs: int, n_features: int, value: float, shrinkage: bool = False) -> list[str]:
    """Why a Gaussian log-determinant estimate made as :func:`mianalysis.analyze` makes it
    (bias-corrected while ``n_runs > 2 n_features``, Ledoit-Wolf shrinkage otherwise, and
    wherever `shrinkage` says the covariance was singular) lies outside its calibrated
    regime: the reasons, empty inside it."""
    return covariance_reasons(n_runs, n_features, value, shrinkage=shrinkage or n_runs <= 2 * n_features,
                              min_runs_per_dim=GAUSSIAN_MIN_RUNS_PER_DIM, max_bits=GAUSSIAN_MAX_BITS)


def copula_regime(n_runs: int, n_features: int, value: float, shrinkage: bool = False) -> list[str]:
    """Why a Gaussian copula estimate made as :func:`mianalysis.analyze` makes it lies
    outside its calibrated regime (as :func:`gaussian_regime`, with the copula's thresholds)."""
    return covariance_reasons(n_runs, n_features, value, shrinkage=shrinkage or n_runs <= 2 * n_features,
                              min_runs_per_dim=COPULA_MIN_RUNS_PER_DIM, max_bits=COPULA_MAX_BITS)


def ksg_regime(n_runs: int, n_features: int, value: float, shrinkage: bool = False) -> list[str]:
    """Why a KSG estimate (k = 3, standardized) lies outside its calibrated regime (reasons)."""
    reasons = []
    if n_features > KSG_MAX_JOINT_DIMS:
        reasons.append(f"> {KSG_MAX_JOINT_DIMS} joint dims")
    if n_runs < KSG_MIN_RUNS:
        reasons.append(f"< {KSG_MIN_RUNS} runs")
    return reasons + _too_many_bits(value, KSG_MAX_BITS)


def _too_many_bits(value: float, max_bits: float) -> list[str]:
    return [f"> {max_bits} bits"] if not math.isnan(value) and value > max_bits else []


# The calibrated regimes an estimator's registry entry names (Estimator.regime). The
# Gaussian copula estimate has its own rows in the calibration table (Gaussian copulas, and
# the Student t where it is not exact).
REGIMES = {"gaussian": gaussian_regime, "ksg": ksg_regime, "copula": copula_regime}


def called_reasons(regime: str, n_runs: int, n_features: int, value_bits: float, *,
                   shrinkage: bool = False) -> list[str]:
    """Why an estimate made as called lies outside `regime` (a name of :data:`REGIMES`):
    the regime's own reasons, except that a Gaussian or copula estimate made without
    shrinkage is judged as the plain estimate it is (:data:`REGIMES` judges them as
    :func:`mianalysis.analyze` makes them, shrunk below 2 runs per joint dimension), and
    one made with `shrinkage` is :data:`SHRUNK` whatever the runs. Empty inside it.

    Examples
    --------
    >>> from mianalysis.estimators.calibration import called_reasons
    >>> called_reasons("gaussian", 300, 180, 2.0), called_reasons("gaussian", 300, 180, 2.0, shrinkage=True)
    (['< 2.2 runs per joint dim'], ['the Gaussian MI of a shrunk covariance: neither an estimate nor a bound'])
    >>> called_reasons("ksg", 200, 180, 0.1)
    ['> 4 joint dims', '< 2000 runs']
    """
    if regime in ("gaussian", "copula"):  # (the thresholds read when called, as the regimes read them)
        min_runs_per_dim, max_bits = ((GAUSSIAN_MIN_RUNS_PER_DIM, GAUSSIAN_MAX_BITS) if regime == "gaussian"
                                      else (COPULA_MIN_RUNS_PER_DIM, COPULA_MAX_BITS))
        if shrinkage:
            return [SHRUNK] + _too_many_bits(value_bits, max_bits)
        return covariance_reasons(n_runs, n_features, value_bits, shrinkage=False, min_runs_per_dim=min_runs_per_dim,
                                  max_bits=max_bits)
    return REGIMES[regime](n_runs, n_features, value_bits, shrinkage)


# Each regime in a few words, for the warning.
REGIME_SUMMARIES = {
    "gaussian": f"bias-corrected, >= {GAUSSIAN_MIN_RUNS_PER_DIM} runs per joint dim, <= {GAUSSIAN_MAX_BITS} bits",
    "copula": f"bias-corrected, >= {COPULA_MIN_RUNS_PER_DIM} runs per joint dim, <= {COPULA_MAX_BITS} bits, "
              "Gaussian copulas",
    "ksg": f"k = 3, standardized, <= {KSG_MAX_JOINT_DIMS} joint dims, >= {KSG_MIN_RUNS} runs, <= {KSG_MAX_BITS} bits",
}


class OutsideCalibrationWarning(UserWarning):
    """An MI estimate was made outside the regime where its estimator was calibrated
    against known MI (:mod:`mianalysis.estimators.calibration`): the number may be far from
    the MI, and says nothing of its size.

    Raised by :func:`mianalysis.gaussian_mi`, :func:`mianalysis.gaussian_copula_mi` and
    :func:`mianalysis.ksg_mi` when called from outside the package; the package's own
    callers (:func:`mianalysis.analyze`, :func:`mianalysis.mi`, the command line) label
    their numbers instead. :func:`mianalysis.mi` says what a number is (an estimate, a
    lower bound, or outside calibration) and why.

    Examples
    --------
    KSG on 200 runs of 90 + 90 dimensions (calibrated: at most 4 joint dimensions, at least
    2000 runs):

    >>> import warnings
    >>> import numpy as np
    >>> from mianalysis import OutsideCalibrationWarning, ksg_mi
    >>> x, y = np.random.default_rng(0).standard_normal((2, 200, 90))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = ksg_mi(x, y, random_state=0)
    >>> [str(w.message).split(":")[0] for w in caught if w.category is OutsideCalibrationWarning]
    ['ksg_mi on 200 runs x 180 joint dims is outside its calibrated regime (k = 3, standardized, <= 4 joint dims, >= 2000 runs, <= 5.65 bits)']
    """


def _called_from_package(up: int) -> bool:
    """Whether the frame `up` levels above the caller of this function runs code of the
    package itself (its callers judge what they compute)."""
    frame = inspect.currentframe()
    for _ in range(up + 1):
        frame = frame.f_back if frame is not None else None
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "mianalysis" or name.startswith("mianalysis.")


def warn_outside_calibration(function: str, regime: str, n_runs: int, n_features: int, value_bits: float, *,
                             shrinkage: bool = False, stacklevel: int = 3) -> None:
    """An :class:`OutsideCalibrationWarning` for an estimate of `function` (its name,
    e.g. "ksg_mi") made as called (`shrinkage`: with Ledoit-Wolf shrinkage) on `n_runs`
    runs of `n_features` varying joint dimensions, when it lies outside `regime` (a name of
    :data:`REGIMES`); nothing inside it, or when the caller of `function` (`stacklevel`
    frames up, as for :func:`warnings.warn`) is code of the package, which labels what it
    computes (:func:`mianalysis.analyze`, :func:`mianalysis.mi`, the projection bound's
    held-out estimates, permutation tests, intervals). Cheap: a few comparisons."""
    reasons = called_reasons(regime, n_runs, n_features, value_bits, shrinkage=shrinkage)
    if not reasons or _called_from_package(stacklevel - 1):
        return
    warnings.warn(f"{function} on {n_runs} runs x {n_features} joint dims is outside its calibrated regime "
                  f"({REGIME_SUMMARIES[regime]}): {', '.join(reasons)}; the value may be far from the MI. "
                  "mianalysis.mi says what a number is and why, and its estimator='bound' gives a lower bound "
                  "from few runs", OutsideCalibrationWarning, stacklevel=stacklevel)
