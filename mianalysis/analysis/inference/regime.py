"""A note for MI estimates outside the regime where their estimator was calibrated against known MI.

The thresholds and the regimes themselves live with the estimators
(:mod:`mianalysis.estimators.calibration`, read off ``figures/calibration/calibration_regimes.csv`` and
re-exported here); ``tests/test_regime.py`` derives them from that file again and fails if
they disagree. The projection bound's regime is its own
(:func:`mianalysis.estimators.bound.bound_regime`); the table records its coverage (bound <=
truth) instead of a 5 % band.
"""

from __future__ import annotations

import numbers

from ..._internal.validation import check_int
from ...estimators.calibration import (COPULA_MAX_BITS, COPULA_MIN_RUNS_PER_DIM, GAUSSIAN_MAX_BITS,
                                       GAUSSIAN_MIN_RUNS_PER_DIM, KSG_MAX_BITS, KSG_MAX_JOINT_DIMS, KSG_MIN_RUNS,
                                       REGIMES)
from ...estimators.registry import get_estimator

__all__ = [
    "GAUSSIAN_MIN_RUNS_PER_DIM", "GAUSSIAN_MAX_BITS", "COPULA_MIN_RUNS_PER_DIM", "COPULA_MAX_BITS",
    "KSG_MAX_JOINT_DIMS", "KSG_MIN_RUNS", "KSG_MAX_BITS", "PREFIX", "REGIMES", "estimate_regime_note", "is_outside"
]

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


def is_outside(note: object) -> bool:
    """Whether a table row's `note` flags its estimate as outside the calibrated regime.

    Examples
    --------
    >>> from mianalysis.analysis.inference.regime import is_outside
    >>> is_outside("dropped 2 constant parameters; outside calibration: > 4 joint dims")
    True
    """
    return PREFIX in str(note)
