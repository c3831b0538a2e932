"""One MI number and what it is: :func:`mi` computes an estimate or a lower bound and says
which, and why, by the calibrated regimes (:mod:`mianalysis.estimators.calibration`) and
the rule of :func:`mianalysis.analyze`'s ``estimators="auto"``
(:mod:`mianalysis.analysis.inference.choice`).

Kinds (:data:`KINDS`): "estimate", an estimate inside its estimator's calibrated regime;
"lower bound", the held-out lower bound inside its own regime; "outside calibration", a
number its estimator was not calibrated for (a Ledoit-Wolf shrinkage number among them:
the Gaussian MI of a shrunk covariance, neither an estimate nor a bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..._internal.validation import check_choice, check_int, check_paired, check_units, varying_columns
from ...estimators.calibration import REGIME_SUMMARIES, called_reasons
from ...estimators.gaussian import SingularCovarianceError
from ...estimators.registry import Estimator, estimator_names, get_estimator
from ...estimators.repeats import check_repeated_runs, runs_checked
from .choice import AUTO, FALLBACK, PRIMARY, choose, fallback_reason
from .regime import estimate_regime_note

__all__ = ["KINDS", "JudgedMI", "mi", "judge"]

KINDS = ("estimate", "lower bound", "outside calibration")


@dataclass(frozen=True, repr=False)
class JudgedMI:
    """An MI number and what it is (:func:`mi`).

    Attributes
    ----------
    value : float
        The number, in `units`.
    kind : {"estimate", "lower bound", "outside calibration"}
        What it is (:data:`KINDS`).
    estimator : str
        The registered estimator that computed it ("copula", "bound", "ksg", ...).
    reason : str
        Why this estimator and this kind, in one sentence.
    units : {"bits", "nats"}
        Unit of `value`.

    Examples
    --------
    >>> from mianalysis.analysis.inference.judged import JudgedMI
    >>> JudgedMI(0.41, "lower bound", "bound", "200 runs < 2.2 x 180 joint dims: no calibrated estimate")
    0.41 bits (lower bound, bound): 200 runs < 2.2 x 180 joint dims: no calibrated estimate
    """

    value: float
    kind: str
    estimator: str
    reason: str
    units: str = "bits"

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", KINDS)

    def __str__(self) -> str:
        return f"{self.value:.4g} {self.units} ({self.kind}, {self.estimator}): {self.reason}"

    __repr__ = __str__


def _bits(value: float, units: str) -> float:
    return value if units == "bits" else value / math.log(2)


def judge(estimator: str, n_runs: int, n_features: int, value: float, *, units: str = "bits",
          shrinkage: bool = False) -> JudgedMI:
    """What `value`, computed by registered `estimator` as called (with Ledoit-Wolf
    `shrinkage` or without) from `n_runs` runs of `n_features` varying joint dimensions, is:
    its registry entry's regime decides (:mod:`mianalysis.estimators.calibration`).

    Examples
    --------
    >>> from mianalysis.analysis.inference.judged import judge
    >>> judge("ksg", 200, 180, 0.3)
    0.3 bits (outside calibration, ksg): 200 runs x 180 joint dims: > 4 joint dims, < 2000 runs (calibrated: k = 3, standardized, <= 4 joint dims, >= 2000 runs, <= 5.65 bits)
    >>> judge("gaussian", 4000, 20, 0.8).kind
    'estimate'
    """
    entry = get_estimator(estimator)
    n_runs = check_int(n_runs, "n_runs", low=2)
    n_features = check_int(n_features, "n_features", low=0)
    check_units(units)
    where = f"{n_runs} runs x {n_features} joint dims"
    bound = entry.kind == "bound"
    if n_features == 0:  # a side with no varying feature: I(c; Y) = 0 exactly
        return JudgedMI(float(value), "estimate", estimator, f"{where}: no varying feature on one side, so the MI "
                        "is exactly 0", units)
    if entry.regime is None:
        return JudgedMI(float(value), "lower bound" if bound else "estimate", estimator,
                        f"{where}: no calibrated regime is recorded for estimator {estimator!r}", units)
    bits = _bits(float(value), units)
    if isinstance(entry.regime, str):
        reasons = called_reasons(entry.regime, n_runs, n_features, bits, shrinkage=shrinkage)
        summary = REGIME_SUMMARIES[entry.regime]
    else:
        reasons, summary = entry.regime(n_runs, n_features, bits, shrinkage), ""
    if reasons:
        calibrated = f" (calibrated: {summary})" if summary else ""
        return JudgedMI(float(value), "outside calibration", estimator, f"{where}: {', '.join(reasons)}{calibrated}",
                        units)
    if bound:
        return JudgedMI(float(value), "lower bound", estimator, f"{where}: a held-out lower bound, inside its regime",
                        units)
    return JudgedMI(float(value), "estimate", estimator,
                    f"{where}: inside its calibrated regime" + (f" ({summary})" if summary else ""), units)


def _compute(entry: Estimator, x: np.ndarray, y: np.ndarray, units: str, random_state: Any,
             options: dict[str, Any]) -> float:
    """`entry`'s value of x and y in `units`, with `options` and `random_state` where it takes them."""
    kwargs = dict(options)
    if "units" in entry.arguments:
        kwargs["units"] = units
    if random_state is not None and (entry.random_state or "random_state" in entry.arguments):
        kwargs["random_state"] = random_state
    with runs_checked():  # checked once by mi, for every estimator alike
        value = float(entry.function(x, y, **kwargs))
    return value if "units" in entry.arguments or units == "bits" else value * math.log(2)


def mi(x: ArrayLike, y: ArrayLike, *, estimator: str = "auto", units: str = "bits", random_state: Any = None,
       **options: Any) -> JudgedMI:
    """Mutual information of `x` and `y`, and what the number is: an estimate, a lower
    bound, or a number outside its estimator's calibrated regime, and why.

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X (runs); row ``i`` is paired with row ``i`` of `y`.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    estimator : str, default="auto"
        "auto" follows the rule of :func:`mianalysis.analyze`'s ``estimators="auto"``
        (:func:`mianalysis.analysis.inference.choice.choose`): the Gaussian copula estimate
        where the runs are at least 2.2 times the varying joint dimension and the estimate
        lies inside its calibrated regime, else the cross-fitted lower bound ("bound").
        A registered estimator's name ("gaussian", "ksg", "copula", "bound", ...) computes
        that estimator as its function does with `options`, and judges the number by its
        registry entry's regime.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    random_state : None, int or numpy.random.Generator, default=None
        Passed to estimators that take one (KSG's noise, the bound's splits); None: each
        estimator's own default.
    **options
        Keyword arguments of an explicit `estimator`'s function (``k=5`` for KSG,
        ``shrinkage="ledoit-wolf"``, ...); "auto" takes none.

    Returns
    -------
    JudgedMI
        ``value``, ``kind`` ("estimate", "lower bound" or "outside calibration"),
        ``estimator``, ``reason`` and ``units``; printed as one line.

    Raises
    ------
    ValueError
        If `estimator` is unknown, runs are stored twice
        (:func:`mianalysis.estimators.repeats.check_repeated_runs`), or the estimator
        refuses the data (its own error: a singular covariance of an explicit Gaussian
        estimate, fewer than 8 runs for the bound).
    TypeError
        If `options` are given with "auto", or are not arguments of the estimator.

    Notes
    -----
    The calibrated regimes were measured against known MI (``figures/calibration/calibration_regimes.csv``;
    :mod:`mianalysis.estimators.calibration`). The joint dimension counted is that of the
    varying features (constant ones carry no information and are dropped). Called
    directly, :func:`mianalysis.gaussian_mi`, :func:`mianalysis.gaussian_copula_mi` and
    :func:`mianalysis.ksg_mi` warn instead
    (:class:`~mianalysis.estimators.calibration.OutsideCalibrationWarning`).

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import mi
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((2000, 2))
    >>> y = 0.6 * x + 0.8 * rng.standard_normal((2000, 2))   # exact: 2 x 0.322 = 0.644 bits
    >>> result = mi(x, y)
    >>> result.kind, result.estimator, round(result.value, 2)
    ('estimate', 'copula', 0.63)
    >>> print(result)
    0.6348 bits (estimate, copula): 2000 runs >= 2.2 x 4 joint dims: its calibrated regime, for a Gaussian copula
    >>> wide = rng.standard_normal((2, 200, 90))             # 200 runs of 90 + 90 parameters
    >>> mi(wide[0], wide[1]).kind
    'lower bound'
    >>> print(mi(wide[0], wide[1], estimator="ksg", random_state=0).reason)
    200 runs x 180 joint dims: > 4 joint dims, < 2000 runs (calibrated: k = 3, standardized, <= 4 joint dims, >= 2000 runs, <= 5.65 bits)
    """
    check_units(units)
    if not (isinstance(estimator, str) and (estimator == AUTO or estimator in estimator_names())):
        check_choice(estimator, "estimator", (AUTO, *estimator_names()))
    x, y = check_paired(x, y)
    keep_x, keep_y = varying_columns(x), varying_columns(y)
    n, d = x.shape[0], int(keep_x.sum() + keep_y.sum())
    if estimator == AUTO and options:
        raise TypeError(f"mi(estimator='auto') chooses its estimator's settings itself; got {sorted(options)} "
                        "(give them with an explicit `estimator`)")
    name = choose(n, d)[0].estimator if estimator == AUTO else estimator
    entry = get_estimator(name)
    wrong = sorted(set(options) - (entry.arguments - {"units", "random_state"}))
    if wrong:
        raise TypeError(f"estimator {name!r} takes no option(s) {wrong} here (its own: "
                        f"{sorted(entry.arguments - {'units', 'random_state'})}; `units` and `random_state` are mi's)")
    if keep_x.any() and keep_y.any():  # the observed runs, once (gaussian_mi leaves this to its callers)
        check_repeated_runs(x[:, keep_x], y[:, keep_y], "the lower bound" if entry.kind == "bound"
                            else f"the {entry.label} estimate", stacklevel=3)
    if estimator != AUTO or not (keep_x.any() and keep_y.any()):
        value = _compute(entry, x, y, units, random_state, options)
        return judge(name, n, d if keep_x.any() and keep_y.any() else 0, value, units=units,
                     shrinkage=bool(options.get("shrinkage")))
    return _auto(x, y, n, d, units, random_state)


def _auto(x: np.ndarray, y: np.ndarray, n: int, d: int, units: str, random_state: Any) -> JudgedMI:
    """The auto rule on varying data: the copula estimate where it is calibrated, else the bound."""
    choice = choose(n, d)[0]
    reason = choice.reason
    if choice.estimator == PRIMARY:  # n >= 2.2 d: the plain bias-corrected estimate, as analyze makes it
        try:
            value = _compute(get_estimator(PRIMARY), x, y, units, None, {})
        except SingularCovarianceError:  # analyze shrinks, notes it outside, and makes the bound instead
            note = estimate_regime_note(PRIMARY, n, d, 0.0, shrinkage=True)
        else:
            note = estimate_regime_note(PRIMARY, n, d, _bits(value, units))
            if not note:
                return JudgedMI(value, "estimate", PRIMARY, reason, units)
        reason = fallback_reason(note)
    value = _compute(get_estimator(FALLBACK), x, y, units, random_state, {})
    note = estimate_regime_note(FALLBACK, n, d, _bits(value, units))
    if note:
        return JudgedMI(value, "outside calibration", FALLBACK, f"{reason}; the lower bound is {note}", units)
    return JudgedMI(value, "lower bound", FALLBACK, f"{reason}; a held-out lower bound instead", units)
