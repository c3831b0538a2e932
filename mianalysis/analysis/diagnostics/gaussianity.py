"""How far one client's samples are from Gaussian, and whether the Gaussian and copula MI
estimates of a pair disagree: the diagnostic that tells a reader of the table which MI row
to read (rows ``nongaussian_share`` and ``copula_disagrees``; :func:`mianalysis.analyze`'s
`gaussianity`).

:func:`nongaussian_share` tests each varying parameter's marginal for normality
(D'Agostino-Pearson) with a correction over parameters; :func:`copula_disagreement` compares
the two estimates' intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from ..._internal.validation import check_choice, varying_columns
from ..inference.familywise import adjust

__all__ = ["MIN_RUNS", "NORMALITY_METHODS", "Gaussianity", "nongaussian_share", "copula_disagreement"]

# Fewest runs the test is run on: scipy's kurtosis test needs 20 for its normal approximation.
MIN_RUNS = 20
NORMALITY_METHODS = ("holm", "bh", "none")
_METHOD_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}


@dataclass(frozen=True)
class Gaussianity:
    """The normality test of one client's parameters (:func:`nongaussian_share`).

    Attributes
    ----------
    share : float
        ``n_rejected / n_tested``: the share of varying parameters whose marginal rejects
        normality; NaN when nothing was tested (fewer than :data:`MIN_RUNS` runs, or no
        varying parameter).
    n_rejected, n_tested : int
        Parameters rejected, and varying parameters tested (constant ones are left out).
    alpha : float
        The level: the family-wise error rate ("holm"), the false discovery rate ("bh") or
        each test's level ("none").
    method : str
        "holm", "bh" or "none".
    min_p : float
        The smallest adjusted p-value (NaN when nothing was tested): with "holm", the
        p-value of "every marginal is normal".
    note : str
        The test, its level and outcome in words (the table row's note).
    """

    share: float
    n_rejected: int
    n_tested: int
    alpha: float
    method: str
    min_p: float
    note: str


def nongaussian_share(samples: ArrayLike, *, alpha: float = 0.05, method: str = "holm") -> Gaussianity:
    """The share of varying parameters whose marginal rejects normality.

    Each column (parameter) of `samples` that varies over runs is tested by the
    D'Agostino-Pearson omnibus test of skewness and kurtosis (:func:`scipy.stats.normaltest`,
    vectorised over columns), and the p-values are adjusted over the tested columns
    (:func:`mianalysis.analysis.inference.familywise.adjust`).

    Parameters
    ----------
    samples : array-like of shape (n_runs, n_parameters)
        One client's samples at one checkpoint: one row per run.
    alpha : float, default=0.05
        Level of the corrected tests, in (0, 1).
    method : {"holm", "bh", "none"}, default="holm"
        "holm": Holm's step-down correction; under joint normality the share is then 0 with
        probability at least 1 - `alpha`, whatever the dependence between parameters.
        "bh": Benjamini-Hochberg (at most a share `alpha` of the rejections is false, in
        expectation, for independent or positively dependent tests; more rejections than
        Holm). "none": each parameter at level `alpha`; a share near `alpha` is then what
        Gaussian samples give, and only a share well above it says anything.

    Returns
    -------
    Gaussianity
        The share, the counts, the level and a note.

    Raises
    ------
    ValueError
        If `samples` is not 2-d, `alpha` is not in (0, 1) or `method` is unknown.

    Notes
    -----
    What it can tell: a share well above 0 (above `alpha` with "none") says that that many
    parameters are not normal one by one, so the samples are not jointly Gaussian, and a
    Gaussian MI estimate of them is biased by their marginals (a monotone map of a
    coordinate changes it, while the MI and the Gaussian-copula estimate
    :func:`mianalysis.gaussian_copula_mi` do not change). What it cannot tell: normal
    marginals are necessary, not sufficient, for joint Gaussianity (a share of 0 does not
    rule out non-Gaussian dependence between parameters, where the copula estimate errs as
    well); a share below 1 is also a matter of power (few runs detect only strong skewness
    or kurtosis, and a correction over many parameters needs small p-values), and with tens
    of thousands of runs slight departures that hardly bias the estimate are rejected too.

    The test costs a few passes over the samples.

    References
    ----------
    D'Agostino, R. B. and Pearson, E. S. (1973), "Tests for departure from normality",
    Biometrika 60, 613-622.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis.diagnostics.gaussianity import nongaussian_share
    >>> rng = np.random.default_rng(0)
    >>> nongaussian_share(rng.standard_normal((2000, 50))).share
    0.0
    >>> nongaussian_share(rng.exponential(size=(2000, 50))).share
    1.0
    """
    x, alpha, method = _nongaussian_share_iv(samples, alpha, method)
    n_runs = x.shape[0]
    varying = varying_columns(x)
    n_tested = int(varying.sum())
    test = f"D'Agostino-Pearson normality test per parameter, {_METHOD_NAMES[method]} at {alpha:g}"
    if n_runs < MIN_RUNS or n_tested == 0:
        why = f"{n_runs} runs < {MIN_RUNS}" if n_runs < MIN_RUNS else "no varying parameter"
        return Gaussianity(np.nan, 0, n_tested, alpha, method, np.nan, f"{test}: not made ({why})")
    _, p = stats.normaltest(x[:, varying], axis=0)
    p = np.nan_to_num(np.asarray(p, dtype=np.float64), nan=1.0)  # a column of two values only: no evidence
    adjusted = adjust(p, method)
    rejected = int((adjusted <= alpha).sum())
    share = rejected / n_tested
    note = f"{test}: {rejected} of {n_tested} varying parameters reject normality"
    gaussian_share = alpha if method == "none" else 0.0  # what Gaussian samples give, about
    if share > gaussian_share:
        note += "; the samples are not Gaussian: read mi_copula rather than mi_gaussian"
    else:
        note += ("; normality not rejected (normal marginals are necessary, not sufficient, for Gaussian samples): "
                 "mi_gaussian and mi_copula both apply")
    return Gaussianity(share, rejected, n_tested, alpha, method, float(adjusted.min()), note)


def _nongaussian_share_iv(samples: ArrayLike, alpha: float, method: str) -> tuple[np.ndarray, float, str]:
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"`samples` must be 2-d (runs x parameters); got shape {x.shape}")
    alpha = float(alpha)
    if not 0 < alpha < 1:
        raise ValueError(f"`alpha` must be in (0, 1); got {alpha}")
    check_choice(method, "method", NORMALITY_METHODS)
    return x, alpha, method


def copula_disagreement(gaussian: tuple[float, float], copula: tuple[float, float]) -> bool | None:
    """Whether the Gaussian and copula MI estimates of a pair disagree beyond their intervals.

    Parameters
    ----------
    gaussian, copula : (float, float)
        Each estimate's interval ``(ci_low, ci_high)``.

    Returns
    -------
    bool or None
        True when the intervals do not overlap, False when they do, None when either is
        missing (not finite).

    Examples
    --------
    >>> from mianalysis.analysis.diagnostics.gaussianity import copula_disagreement
    >>> copula_disagreement((1.0, 1.2), (1.5, 1.7)), copula_disagreement((1.0, 1.6), (1.5, 1.7))
    (True, False)
    """
    bounds = np.array([*gaussian, *copula], dtype=np.float64)
    if not np.isfinite(bounds).all():
        return None
    g_low, g_high, c_low, c_high = bounds
    return bool(g_high < c_low or c_high < g_low)
