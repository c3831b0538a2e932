"""Where the MI estimators were calibrated against known MI, and a note for estimates outside it.

Every threshold below is read off ``figures/calibration_regimes.csv``, written by
``python experiments/calibration.py --regimes`` (correlated Gaussians with known MI for the
Gaussian and KSG regimes; those and monotone maps of their coordinates, Gaussian copulas,
for the copula regime; every estimator run as :func:`mianalysis.analyze` runs it;
"within 5 %" means ``|estimate - true| <= 0.05 max(true, 1 nat)``).
``tests/test_regime.py`` derives them from that file again and fails if they disagree.
The projection bound's regime is its own (:func:`mianalysis.estimators.bound.bound_regime`);
the table records its coverage (bound <= truth) instead of a 5 % band.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..._internal.validation import check_int
from ...estimators.registry import get_estimator

__all__ = [
    "GAUSSIAN_MIN_RUNS_PER_DIM", "GAUSSIAN_MAX_BITS", "COPULA_MIN_RUNS_PER_DIM", "COPULA_MAX_BITS",
    "KSG_MAX_JOINT_DIMS", "KSG_MIN_RUNS", "KSG_MAX_BITS", "PREFIX", "REGIMES", "estimate_regime_note", "is_outside"
]

# --- from figures/calibration_regimes.csv ---------------------------------------------
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

PREFIX = "outside calibration"


def estimate_regime_note(estimator: str, n_runs: int, n_features: int, value: float, *, shrinkage: bool = False) -> str:
    """A note saying why an MI estimate lies outside the calibrated regime, or "".

    Parameters
    ----------
    estimator : str
        A registered estimator ("gaussian", "ksg", "copula", ...), as
        :func:`mianalysis.analyze` runs it (Gaussian and copula: bias-corrected when
        ``n_runs > 2 n_features``, Ledoit-Wolf shrinkage otherwise; KSG: standardized
        coordinates). Its registry entry names its regime (:data:`REGIMES`); an
        estimator without one gets no note.
    n_runs : int
        Samples (runs), >= 2.
    n_features : int
        Joint dimension: varying parameters of both clients together, >= 1.
    value : float
        The estimate in bits.
    shrinkage : bool, default=False
        Whether a Gaussian estimate was made with Ledoit-Wolf shrinkage although there are
        more than twice as many runs as joint dimensions (``analyze`` shrinks when the
        sample covariance is singular, e.g. a parameter that barely varies): no such case
        was calibrated either.

    Returns
    -------
    note : str
        "" inside the calibrated regime; otherwise "outside calibration: " and every
        reason, joined by ", ".

    Examples
    --------
    >>> from mianalysis.analysis.inference.regime import estimate_regime_note
    >>> estimate_regime_note("gaussian", 2000, 200, 150.0)
    ''
    >>> estimate_regime_note("gaussian", 400, 200, 3.4)
    'outside calibration: shrinkage estimate (400 runs <= 2 x 200 joint dims)'
    >>> estimate_regime_note("gaussian", 10000, 1700, 16.7, shrinkage=True)
    'outside calibration: shrinkage estimate (singular covariance)'
    >>> estimate_regime_note("ksg", 2000, 716, 0.6)
    'outside calibration: > 4 joint dims'
    >>> estimate_regime_note("gaussian", 20000, 1000, 3000.0)
    'outside calibration: > 2241.6 bits'
    """
    regime = get_estimator(estimator).regime
    n_runs = check_int(n_runs, "n_runs", low=2)
    n_features = check_int(n_features, "n_features", low=1)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`value` must be a real number (bits); got {value!r}")
    if regime is None:  # no calibration recorded for this estimator
        return ""
    reasons = (REGIMES[regime] if isinstance(regime, str) else regime)(n_runs, n_features, float(value), shrinkage)
    return f"{PREFIX}: {', '.join(reasons)}" if reasons else ""


def _gaussian_regime(n_runs, n_features, value, shrinkage):
    """Why a Gaussian log-determinant estimate lies outside its calibrated regime (reasons)."""
    reasons = []
    if n_runs <= 2 * n_features:
        reasons.append(f"shrinkage estimate ({n_runs} runs <= 2 x {n_features} joint dims)")
    elif shrinkage:
        reasons.append("shrinkage estimate (singular covariance)")
    elif n_runs < GAUSSIAN_MIN_RUNS_PER_DIM * n_features:
        reasons.append(f"< {GAUSSIAN_MIN_RUNS_PER_DIM} runs per joint dim")
    return reasons + _too_many_bits(value, GAUSSIAN_MAX_BITS)


def _copula_regime(n_runs, n_features, value, shrinkage):
    """Why a Gaussian copula estimate lies outside its calibrated regime (reasons)."""
    reasons = []
    if n_runs <= 2 * n_features:
        reasons.append(f"shrinkage estimate ({n_runs} runs <= 2 x {n_features} joint dims)")
    elif shrinkage:
        reasons.append("shrinkage estimate (singular covariance)")
    elif n_runs < COPULA_MIN_RUNS_PER_DIM * n_features:
        reasons.append(f"< {COPULA_MIN_RUNS_PER_DIM} runs per joint dim")
    return reasons + _too_many_bits(value, COPULA_MAX_BITS)


def _ksg_regime(n_runs, n_features, value, shrinkage):
    """Why a KSG estimate (k = 3, standardized) lies outside its calibrated regime (reasons)."""
    reasons = []
    if n_features > KSG_MAX_JOINT_DIMS:
        reasons.append(f"> {KSG_MAX_JOINT_DIMS} joint dims")
    if n_runs < KSG_MIN_RUNS:
        reasons.append(f"< {KSG_MIN_RUNS} runs")
    return reasons + _too_many_bits(value, KSG_MAX_BITS)


def _too_many_bits(value, max_bits):
    return [f"> {max_bits} bits"] if not np.isnan(value) and value > max_bits else []


# The calibrated regimes an estimator's registry entry names (Estimator.regime). The
# Gaussian copula estimate has its own rows in the calibration table (Gaussian copulas, and
# the Student t where it is not exact).
REGIMES = {"gaussian": _gaussian_regime, "ksg": _ksg_regime, "copula": _copula_regime}


def is_outside(note: object) -> bool:
    """Whether a table row's `note` flags its estimate as outside the calibrated regime.

    Examples
    --------
    >>> from mianalysis.analysis.inference.regime import is_outside
    >>> is_outside("dropped 2 constant parameters; outside calibration: > 4 joint dims")
    True
    """
    return PREFIX in str(note)
