"""The MI estimators the package knows, one entry each: what analyses, tests, intervals and plots read.

Adding an estimator is one :func:`register_estimator` call (plus its tests): the entry
says which function computes it, which keyword arguments it takes, how its confidence
intervals resample the runs, which nulls apply, how a figure labels and colours it and
where its calibrated regime is described. :func:`mianalysis.analyze`,
:func:`mianalysis.mi_permutation_test`, :mod:`mianalysis.analysis.inference.intervals`,
:mod:`mianalysis.analysis.inference.regime`, :mod:`mianalysis.report.plots` and the command line (``--estimator``,
``--estimators``) read the entries and know no estimator by name otherwise.

Examples
--------
>>> from mianalysis.estimators.registry import estimator_names, get_estimator
>>> estimator_names()
('gaussian', 'ksg', 'copula', 'bound')
>>> get_estimator("copula").display_name, get_estimator("copula").interval
('Gaussian copula', 'bootstrap')
>>> get_estimator("bound").kind, get_estimator("gaussian").kind
('bound', 'plain')
"""

from __future__ import annotations

import dataclasses
import enum
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar, overload

import numpy as np

from .._internal.validation import check_choice, check_flag
from .bound import bound_regime, bound_resample_settings, projection_mi_bound
from .copula import gaussian_copula_mi, normal_scores
from .gaussian import check_gaussian_settings, gaussian_mi
from .ksg import ksg_mi

__all__ = ["Estimator", "Estimation", "EstimatorInference", "register_estimator", "unregister_estimator", "get_estimator", "estimator_names",
           "estimators_taking", "INTERVALS", "LEVEL_INTERVALS", "CHANGE_INTERVALS", "NULLS", "KINDS", "DISTANCE_STREAM"]

INTERVALS = ("bootstrap", "half-subsampling")
# Level intervals from a formula instead of the resamples' sd (mianalysis.estimators.gaussian_se).
LEVEL_INTERVALS = ("wishart", "asymptotic")
CHANGE_INTERVALS = ("influence",)
NULLS = ("permutation", "analytic")
# What an estimate is: an estimate of the MI ("plain"), a Ledoit-Wolf shrinkage number (the
# MI of a shrunk covariance: neither an estimate nor a bound), or a lower bound on the MI.
KINDS = ("plain", "shrinkage", "bound")
# Random streams: analyze seeds an estimator's permutations, noise and resamples with its
# `stream`; stream 2 seeds the noise of the shared marginal distance matrices (KSG), as
# tables written before the registry had it (their rows stay the same to the bit).
DISTANCE_STREAM = 2


@dataclass(frozen=True)
class Estimation:
    """How an estimator computes its estimates: the estimation part of an :class:`Estimator`.

    Attributes
    ----------
    function : callable
        ``function(x, y, **kwargs) -> float``: the estimate in bits (``units`` where it
        takes that argument) of paired samples of shape (n, d_x) and (n, d_y).
    arguments : frozenset of str, default=frozenset()
        The keyword arguments `function` takes (an argument outside them is a TypeError in
        :func:`mianalysis.mi_permutation_test`, naming the estimators it belongs to).
    covariance : bool, default=False
        A Gaussian log-determinant estimate (of `transform`-ed data, if given):
        :func:`mianalysis.analyze` then bias-corrects it while runs outnumber twice the
        joint dimension and uses Ledoit-Wolf shrinkage otherwise (noted), and its
        estimates are those of :func:`mianalysis.gaussian_mi` of the transformed data.
    transform : callable, optional
        A map of one variable's samples (n, d) -> (n, d) such that ``function(x, y)`` is
        the covariance estimate of ``transform(x)`` and ``transform(y)``, and that commutes
        with shuffling rows: it is applied once before a permutation test (every shuffle
        sees the same transformed data) and to each bootstrap resample;
        :func:`mianalysis.analyze` transforms each client's varying samples once per
        checkpoint, for every pair the client is in.
    distance_cache : bool, default=False
        Whether the estimate is a k-NN one that the marginal distance matrices
        (:class:`mianalysis.MarginalDistances`) serve; only KSG.
    random_state : bool, default=False
        Whether `function` takes ``random_state`` (analyses pass the stream's generator).
    check : callable, optional
        ``check(**kwargs)``: checks the estimator's settings before any work (raising the
        estimator's own errors).
    kind : {"plain", "shrinkage", "bound"}, default="plain"
        What its estimates are (:data:`KINDS`): "plain", an estimate of the MI (a
        covariance estimator's rows that :func:`mianalysis.analyze` shrinks are
        "shrinkage" rows all the same); "bound", a lower bound on the MI, which tables,
        plots and the command line label as such and never join with estimates of
        another kind.
    """

    function: Callable[..., float]
    arguments: frozenset[str] = frozenset()
    covariance: bool = False
    transform: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    distance_cache: bool = False
    random_state: bool = False
    check: Callable[..., object] | None = field(default=None, repr=False)
    kind: str = "plain"

    def __post_init__(self) -> None:
        if not callable(self.function):
            raise TypeError(f"`function` must be callable; got {self.function!r}")
        object.__setattr__(self, "arguments", frozenset(self.arguments))
        check_choice(self.kind, "kind", KINDS)
        if self.transform is not None and not self.covariance:
            raise ValueError("a `transform` serves Gaussian log-determinant estimates of the transformed data; it "
                             "needs covariance=True")


@dataclass(frozen=True)
class EstimatorInference:
    """How the analyses infer from an estimator's estimates: its intervals, nulls and
    calibrated regime; the inference part of an :class:`Estimator`.

    Attributes
    ----------
    interval : {"bootstrap", "half-subsampling"}, default="bootstrap"
        How :mod:`mianalysis.analysis.inference.intervals` resamples the runs for its confidence interval:
        bootstrap resamples (with replacement) or random halves (without: for estimators
        that duplicated runs bias, such as k-NN ones).
    ci_resamples : int, default=20
        Resamples per interval in :func:`mianalysis.analyze` by default.
    level_interval : {None, "wishart", "asymptotic"}, default=None
        How the interval of an estimate itself (not of a change) gets its standard error:
        None, the sd of the `interval` resamples; "wishart" or "asymptotic", the formula of
        :func:`mianalysis.estimators.gaussian_se.gaussian_mi_se` of the (transformed)
        samples, for `covariance` estimators only (a Ledoit-Wolf estimate keeps the
        resamples). The built-in Gaussian and copula estimators use "wishart", chosen by
        coverage (docs/concepts/intervals.md); ``dataclasses.replace(get_estimator(
        "gaussian"), level_interval=None)`` brings back the bootstrap level interval.
    change_interval : {None, "influence"}, default=None
        How the interval of a change between checkpoints gets its standard error: None,
        the sd of paired `interval` resamples; "influence", the delta method on the runs'
        influence values (:func:`mianalysis.estimators.gaussian_se.gaussian_mi_influence`
        of the transformed samples), for `covariance` estimators; used by
        :func:`mianalysis.analyze` together with a `level_interval` formula (without one the
        resamples serve both) where the runs are at least
        :data:`mianalysis.analysis.inference.intervals.INFLUENCE_MIN_RUNS_PER_DIMENSION` times the
        pair's joint dimension (the resamples below). The built-in Gaussian and copula
        estimators use "influence", chosen by coverage (docs/concepts/intervals.md).
    nulls : tuple of {"permutation", "analytic"}, default=("permutation",)
        The nulls that apply: "analytic" only for Gaussian log-determinant estimates
        (`covariance`), where :func:`mianalysis.gaussian_mi_null` gives the law.
    regime : str, callable or None, default=None
        Where the estimator was calibrated against known MI: a name of
        :data:`mianalysis.estimators.calibration.REGIMES` ("gaussian", "ksg", "copula") or a function
        ``(n_runs, n_features, value_bits, shrinkage) -> list of reasons`` (empty inside the
        regime). None: no calibration is recorded, and rows get no regime note.
    resample_settings : callable, optional
        ``resample_settings(n_runs, n_features_x, n_features_y) -> dict``: keyword
        arguments that the estimate of all `n_runs` runs fixes and that every resample of
        its interval keeps (:func:`mianalysis.analysis.inference.intervals.mi_replicates`; the resample's
        varying features are given), so that the resamples repeat the same statistic. The
        bound keeps the full sample's number of canonical pairs on every half.

    The formulas (`level_interval`, `change_interval`) and the analytic null need a
    covariance estimation; the :class:`Estimator` that joins the two parts checks that.
    """

    interval: str = "bootstrap"
    ci_resamples: int = 20
    level_interval: str | None = None
    change_interval: str | None = None
    nulls: tuple[str, ...] = ("permutation",)
    regime: str | Callable[[int, int, float, bool], list[str]] | None = None
    resample_settings: Callable[[int, int, int], dict[str, Any]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nulls", tuple(self.nulls))
        check_choice(self.interval, "interval", INTERVALS)
        if self.level_interval is not None:
            check_choice(self.level_interval, "level_interval", LEVEL_INTERVALS)
        if self.change_interval is not None:
            check_choice(self.change_interval, "change_interval", CHANGE_INTERVALS)
        for null in self.nulls:
            check_choice(null, "nulls", NULLS)


_T = TypeVar("_T")


class _InPart(Generic[_T]):
    """An attribute of :class:`Estimator` kept in one of its parts, read as before the split
    (``entry.interval`` is ``entry.inference.interval``); read-only, as the entry is."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, entry: None, owner: type | None = None) -> _InPart[_T]: ...

    @overload
    def __get__(self, entry: object, owner: type | None = None) -> _T: ...

    def __get__(self, entry: object, owner: type | None = None) -> Any:
        if entry is None:
            return self
        return getattr(getattr(entry, self.part), self.name)


class _Unset(enum.Enum):
    """A field not given flat (its part's value, or the part's default)."""

    UNSET = "unset"


_UNSET = _Unset.UNSET
_ESTIMATION = tuple(f.name for f in fields(Estimation))
_INFERENCE = tuple(f.name for f in fields(EstimatorInference))


@dataclass(frozen=True, init=False)
class Estimator:
    """One MI estimator, as the analyses, tests, intervals and plots use it: how it
    estimates (:class:`Estimation`), how the analyses infer from its estimates
    (:class:`EstimatorInference`), and how it is named and drawn.

    Every field of the two parts can also be given and read flat, as before they were split:
    ``Estimator(name="ksg", function=ksg_mi, arguments=..., interval="half-subsampling",
    display_name=..., label=...)`` builds the parts, ``entry.interval`` reads
    ``entry.inference.interval``, and ``dataclasses.replace(entry, level_interval=None)``
    replaces that field of its part. A part given whole (``estimation=``, ``inference=``)
    takes the flat fields given beside it as replacements of its own.

    Attributes
    ----------
    name : str
        The name users pass (``estimator="ksg"``, ``--estimators ksg``); table rows of it
        are ``mi_NAME``.
    estimation : Estimation
        How it computes its estimates (`function`, `arguments`, `covariance`, `transform`,
        `distance_cache`, `random_state`, `check`, `kind`).
    inference : EstimatorInference
        Its intervals, nulls and calibrated regime (`interval`, `ci_resamples`,
        `level_interval`, `change_interval`, `nulls`, `regime`, `resample_settings`).
    display_name : str
        How a figure names it ("KSG (k-NN)").
    label : str
        Short name for figure titles ("KSG").
    color : str, optional
        Matplotlib colour of its MI panel ("C0"); None picks one from the name.
    stream : int, optional
        The random stream of its rows (seeds of permutations, noise and resamples); None
        derives one from the name (CRC-32), so that a table does not depend on what else is
        registered.

    Examples
    --------
    >>> from mianalysis.estimators.registry import get_estimator
    >>> ksg = get_estimator("ksg")
    >>> ksg.inference.interval, ksg.interval, ksg.estimation.distance_cache
    ('half-subsampling', 'half-subsampling', True)
    """

    name: str
    estimation: Estimation
    inference: EstimatorInference
    display_name: str
    label: str
    color: str | None = None
    stream: int | None = None

    # The parts' fields, read flat.
    function = _InPart[Callable[..., float]]("estimation")
    arguments = _InPart[frozenset[str]]("estimation")
    covariance = _InPart[bool]("estimation")
    transform = _InPart[Callable[[np.ndarray], np.ndarray] | None]("estimation")
    distance_cache = _InPart[bool]("estimation")
    random_state = _InPart[bool]("estimation")
    check = _InPart[Callable[..., object] | None]("estimation")
    kind = _InPart[str]("estimation")
    interval = _InPart[str]("inference")
    ci_resamples = _InPart[int]("inference")
    level_interval = _InPart[str | None]("inference")
    change_interval = _InPart[str | None]("inference")
    nulls = _InPart[tuple[str, ...]]("inference")
    regime = _InPart[str | Callable[[int, int, float, bool], list[str]] | None]("inference")
    resample_settings = _InPart[Callable[[int, int, int], dict[str, Any]] | None]("inference")

    def __init__(self, name: str, function: Callable[..., float] | _Unset = _UNSET,
                 arguments: Iterable[str] | _Unset = _UNSET, display_name: str | _Unset = _UNSET,
                 label: str | _Unset = _UNSET, interval: str | _Unset = _UNSET, ci_resamples: int | _Unset = _UNSET,
                 level_interval: str | None | _Unset = _UNSET, change_interval: str | None | _Unset = _UNSET,
                 nulls: Iterable[str] | _Unset = _UNSET, covariance: bool | _Unset = _UNSET,
                 transform: Callable[[np.ndarray], np.ndarray] | None | _Unset = _UNSET,
                 distance_cache: bool | _Unset = _UNSET, random_state: bool | _Unset = _UNSET,
                 regime: str | Callable[[int, int, float, bool], list[str]] | None | _Unset = _UNSET,
                 color: str | None = None, check: Callable[..., object] | None | _Unset = _UNSET,
                 stream: int | None = None, kind: str | _Unset = _UNSET,
                 resample_settings: Callable[[int, int, int], dict[str, Any]] | None | _Unset = _UNSET, *,
                 estimation: Estimation | None = None, inference: EstimatorInference | None = None) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"an estimator's `name` must be an identifier (rows are mi_NAME); got {name!r}")
        flat = {k: v for k, v in locals().items() if k in _ESTIMATION + _INFERENCE and v is not _UNSET}
        for given, what in ((display_name, "`display_name`"), (label, "`label`"),
                            (function if estimation is None else None, "`function` (or `estimation`)")):
            if given is _UNSET:
                raise TypeError(f"estimator {name!r}: {what} is missing")
        try:
            estimation = _part(Estimation, estimation, {k: v for k, v in flat.items() if k in _ESTIMATION},
                               "estimation")
            inference = _part(EstimatorInference, inference, {k: v for k, v in flat.items() if k in _INFERENCE},
                              "inference")
        except (TypeError, ValueError) as exc:  # the parts' own checks, naming the estimator
            raise type(exc)(f"estimator {name!r}: {exc}") from None
        if not estimation.covariance:
            for needs, used in (("a `level_interval` formula is that of Gaussian log-determinant estimates",
                                 inference.level_interval is not None),
                                ("a `change_interval` formula is that of Gaussian log-determinant estimates",
                                 inference.change_interval is not None),
                                ("the analytic null is that of Gaussian log-determinant estimates",
                                 "analytic" in inference.nulls)):
                if used:
                    raise ValueError(f"estimator {name!r}: {needs}; it needs covariance=True")
        if stream is None:
            stream = zlib.crc32(name.encode()) + 16
        if color is None:
            color = f"C{4 + stream % 6}"
        for key, value in (("name", name), ("estimation", estimation), ("inference", inference),
                           ("display_name", display_name), ("label", label), ("color", color), ("stream", stream)):
            object.__setattr__(self, key, value)


_Part = TypeVar("_Part", Estimation, EstimatorInference)


def _part(cls: type[_Part], whole: _Part | None, flat: dict[str, Any], what: str) -> _Part:
    """The part of an Estimator: `whole` with the `flat` fields replaced, or made of them."""
    if whole is None:
        return cls(**flat)
    if not isinstance(whole, cls):
        raise TypeError(f"`{what}` must be {cls.__name__}; got {whole!r}")
    return dataclasses.replace(whole, **flat) if flat else whole


_REGISTRY: dict[str, Estimator] = {}


def register_estimator(entry: Estimator | None = None, /, *, replace: bool = False, **fields: Any) -> Estimator:
    """Add an estimator to the registry (an :class:`Estimator`, or its fields as keywords).

    With ``replace=True`` an entry of the same name is replaced where it stands (the order
    of :func:`estimator_names` is kept), e.g. to change a built-in estimator's default
    resamples: ``register_estimator(dataclasses.replace(get_estimator("ksg"), ci_resamples=20), replace=True)``.

    Returns
    -------
    Estimator
        The entry registered.

    Raises
    ------
    ValueError
        If the name is registered already (:func:`unregister_estimator` it first) or its
        random stream is another entry's.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.estimators.registry import register_estimator, unregister_estimator
    >>> def first_coordinates(x, y):  # MI of the first coordinates, by the correlation formula
    ...     r = np.corrcoef(x[:, 0], y[:, 0])[0, 1]
    ...     return -0.5 * np.log2(1 - r**2)
    >>> entry = register_estimator(name="first", function=first_coordinates, arguments=(),
    ...                            display_name="first coordinates", label="first")
    >>> unregister_estimator("first").name
    'first'
    """
    if entry is None:
        entry = Estimator(**fields)
    elif fields:
        raise TypeError("register_estimator takes an Estimator or its fields as keywords, not both")
    if not isinstance(entry, Estimator):
        raise TypeError(f"register_estimator expects an Estimator; got {entry!r}")
    check_flag(replace, "replace")
    if entry.name in _REGISTRY and not replace:
        raise ValueError(f"estimator {entry.name!r} is registered already; unregister_estimator({entry.name!r}) first")
    clash = [e.name for e in _REGISTRY.values() if e.stream == entry.stream and e.name != entry.name] + (
        ["the distance matrices"] if entry.stream == DISTANCE_STREAM else [])
    if clash:
        raise ValueError(f"estimator {entry.name!r}: random stream {entry.stream} is that of {clash[0]}; give another")
    _REGISTRY[entry.name] = entry
    return entry


def unregister_estimator(name: str) -> Estimator:
    """Remove estimator `name` from the registry and return its entry."""
    return _REGISTRY.pop(get_estimator(name).name)


def get_estimator(name: str, parameter: str = "estimator") -> Estimator:
    """The entry of estimator `name`; a ValueError naming `parameter` and the known
    estimators when there is none."""
    if not isinstance(name, str) or name not in _REGISTRY:
        check_choice(name, parameter, estimator_names())
    return _REGISTRY[name]


def estimator_names() -> tuple[str, ...]:
    """The registered estimators' names, in the order they were registered."""
    return tuple(_REGISTRY)


def estimators_taking(argument: str, among: Iterable[str] | None = None) -> list[str]:
    """The registered estimators (of `among`) whose functions take `argument`."""
    return [n for n in (estimator_names() if among is None else among) if argument in _REGISTRY[n].arguments]


# The built-in estimators. Their streams are those of the tables written before the registry.
register_estimator(
    name="gaussian", function=gaussian_mi, arguments={"units", "bias_correction", "shrinkage"},
    display_name="Gaussian (log-det)", label="Gaussian", interval="bootstrap", ci_resamples=20,
    level_interval="wishart", change_interval="influence", nulls=("permutation", "analytic"), covariance=True,
    regime="gaussian", color="C0", check=check_gaussian_settings, stream=0)
register_estimator(
    name="ksg", function=ksg_mi,
    arguments={"k", "algorithm", "units", "noise", "dtype", "backend", "device", "standardize"},
    display_name="KSG (k-NN)", label="KSG", interval="half-subsampling", ci_resamples=10,
    distance_cache=True, random_state=True, regime="ksg", color="C1", stream=1)
register_estimator(
    name="copula", function=gaussian_copula_mi, arguments={"units", "bias_correction", "shrinkage"},
    display_name="Gaussian copula", label="Gaussian copula", interval="bootstrap", ci_resamples=20,
    level_interval="wishart", change_interval="influence", nulls=("permutation", "analytic"), covariance=True,
    transform=normal_scores,
    regime="copula", color="C4", check=check_gaussian_settings, stream=3)
register_estimator(
    name="bound", function=projection_mi_bound,
    arguments={"units", "n_components", "folds", "repeats", "copula", "method", "random_state"},
    display_name="held-out NWJ lower bound (any distribution)", label="lower bound", interval="half-subsampling",
    ci_resamples=20, regime=bound_regime, color="C5", stream=4, kind="bound",
    resample_settings=bound_resample_settings)
