"""Option objects of :func:`mianalysis.analyze`, in the manner of scipy.stats'
``PermutationMethod`` and ``BootstrapMethod``: how the nulls, the intervals and the
family-wise correction are made, each one object instead of a pair of keywords.

- `null`: :class:`Permutations` (every MI row's null from shuffled pairings of the runs) or
  :class:`AnalyticNull` (the Gaussian and copula rows' analytic null; the others'
  permutations, where given);
- `interval`: :class:`Intervals` (level and resamples of every interval);
- `correction`: :class:`Holm`, :class:`BenjaminiHochberg` or :class:`NoCorrection`, each
  over a `family`.

Each stands for keywords :func:`mianalysis.analyze` also takes (``null=Permutations(100)``
is ``n_permutations=100``), which keep working; :func:`option_keywords` turns the objects
into those keywords, and :func:`mianalysis.analysis.validate.check_request` checks their
values once, whichever way they were given. The defaults are unchanged: no null, level
0.95 with each estimator's resamples, Holm over each pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["Permutations", "AnalyticNull", "Intervals", "Holm", "BenjaminiHochberg", "NoCorrection", "Null",
           "Correction", "option_keywords"]


@dataclass(frozen=True)
class Permutations:
    """The null of every MI row: its estimator on `n` shuffled pairings of the runs.

    Parameters
    ----------
    n : int or dict of estimator -> int, default=100
        Shuffles per MI estimate (``analyze(n_permutations=n)``); 0: no null.

    Examples
    --------
    >>> from mianalysis.analysis.options import Permutations, option_keywords
    >>> option_keywords(null=Permutations(200))["n_permutations"]
    200
    """

    n: int | Mapping[str, int] = 100


@dataclass(frozen=True)
class AnalyticNull:
    """The analytic null of the Gaussian MI (:func:`mianalysis.gaussian_mi_null`, Wilks'
    Lambda) for the Gaussian and copula rows, at no cost (``analyze(gaussian_null=
    "analytic")``); the other rows, and shrinkage estimates, get `otherwise`'s permutations.

    Parameters
    ----------
    otherwise : Permutations, optional
        The null of the rows without an analytic one; None: none.
    """

    otherwise: Permutations | None = None


@dataclass(frozen=True)
class Intervals:
    """How every confidence interval is made.

    Parameters
    ----------
    level : float, default=0.95
        Level of every interval (``analyze(ci_level=)``).
    resamples : int or dict of estimator -> int, optional
        Resamples of the runs behind each MI estimate's interval (``analyze(ci_resamples=)``);
        None: each estimator's own (its registry entry's).
    """

    level: float = 0.95
    resamples: int | Mapping[str, int] | None = None


@dataclass(frozen=True)
class Holm:
    """Holm's correction of the trend verdicts (family-wise error rate) over each `family`:
    "pair" (one client pair's steps of a quantity) or "cell" (every pair's)."""

    family: str = "pair"
    method = "holm"


@dataclass(frozen=True)
class BenjaminiHochberg:
    """Benjamini-Hochberg's correction (false discovery rate) over each `family`."""

    family: str = "pair"
    method = "bh"


@dataclass(frozen=True)
class NoCorrection:
    """No correction: each test alone."""

    family: str = "pair"
    method = "none"


Null = Union[Permutations, AnalyticNull]
Correction = Union[Holm, BenjaminiHochberg, NoCorrection]

# The keywords each option stands for, at analyze's defaults.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "null": {"n_permutations": 0, "gaussian_null": "permutation"},
    "interval": {"ci_resamples": None, "ci_level": 0.95},
    "correction": {"familywise": "holm", "family": "pair"},
}


def option_keywords(*, null: Null | None = None, interval: Intervals | None = None,
                    correction: Correction | None = None, **keywords: Any) -> dict[str, Any]:
    """The keywords of :func:`mianalysis.analyze` that the option objects stand for, merged
    with `keywords` (those keywords as given; missing ones take analyze's defaults).

    Parameters
    ----------
    null : Permutations or AnalyticNull, optional
    interval : Intervals, optional
    correction : Holm, BenjaminiHochberg or NoCorrection, optional
    **keywords
        ``n_permutations``, ``gaussian_null``, ``ci_resamples``, ``ci_level``,
        ``familywise``, ``family`` as given.

    Returns
    -------
    dict
        The six keywords.

    Raises
    ------
    TypeError
        If an option is not one of its classes.
    ValueError
        If an option is given together with one of its keywords set to another value than
        its default (say one or the other).

    Examples
    --------
    >>> from mianalysis.analysis.options import AnalyticNull, Holm, Permutations, option_keywords
    >>> kw = option_keywords(null=AnalyticNull(otherwise=Permutations(50)), correction=Holm("cell"))
    >>> kw["n_permutations"], kw["gaussian_null"], kw["familywise"], kw["family"]
    (50, 'analytic', 'holm', 'cell')
    """
    out = {k: v for defaults in _DEFAULTS.values() for k, v in defaults.items()}
    unknown = set(keywords) - set(out)
    if unknown:
        raise TypeError(f"option_keywords() got unexpected keywords {sorted(unknown)}")
    out.update(keywords)
    given: dict[str, dict[str, Any]] = {}
    if null is not None:
        if isinstance(null, Permutations):
            given["null"] = {"n_permutations": null.n, "gaussian_null": "permutation"}
        elif isinstance(null, AnalyticNull):
            if null.otherwise is not None and not isinstance(null.otherwise, Permutations):
                raise TypeError(f"`AnalyticNull.otherwise` must be Permutations or None; got {null.otherwise!r}")
            given["null"] = {"n_permutations": 0 if null.otherwise is None else null.otherwise.n,
                             "gaussian_null": "analytic"}
        else:
            raise TypeError(f"`null` must be Permutations or AnalyticNull; got {null!r}")
    if interval is not None:
        if not isinstance(interval, Intervals):
            raise TypeError(f"`interval` must be Intervals; got {interval!r}")
        given["interval"] = {"ci_resamples": interval.resamples, "ci_level": interval.level}
    if correction is not None:
        if not isinstance(correction, (Holm, BenjaminiHochberg, NoCorrection)):
            raise TypeError(f"`correction` must be Holm, BenjaminiHochberg or NoCorrection; got {correction!r}")
        given["correction"] = {"familywise": correction.method, "family": correction.family}
    for option, values in given.items():
        clash = [k for k, default in _DEFAULTS[option].items() if keywords.get(k, default) != default]
        if clash:
            raise ValueError(f"`{option}` and {', '.join(f'`{k}`' for k in clash)} both say how; give one of them")
        out.update(values)
    return out
