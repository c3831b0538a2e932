"""Option objects of :func:`mianalysis.analyze`, in the manner of scipy.stats'
``PermutationMethod`` and ``BootstrapMethod``: how the nulls, the intervals and the
family-wise correction are made, each one object instead of a pair of keywords.

- `null`: :class:`Permutations` (every MI row's null from shuffled pairings of the runs, or
  where shuffles are costly their exact moments), :class:`MomentNull` (the Gaussian and
  copula rows' permutation-moment null) or :class:`AnalyticNull` (their analytic null; the
  others' permutations, where given);
- `interval`: :class:`Intervals` (level and resamples of every interval);
- `correction`: :class:`Holm`, :class:`BenjaminiHochberg` or :class:`NoCorrection`, each
  over a `family`;
- `execution`: :class:`Execution` (progress, distance cache, Dask scheduler or client,
  timeout: where and how the table is computed), resolved by :func:`execution_keywords`.

Each class's ``FLAGS`` (:class:`Flag`) are its command-line flags, help text, choices and
default included: ``mianalysis analyze`` and ``report`` add them as declared here, and
:func:`options_from_flags` turns the parsed flags into the objects.

Each stands for keywords :func:`mianalysis.analyze` also takes (``null=Permutations(100)``
is ``n_permutations=100``), which keep working; :func:`option_keywords` turns the objects
into those keywords, and :func:`mianalysis.analysis.validate.check_request` checks their
values once, whichever way they were given. The defaults are unchanged: no null, level
0.95 with each estimator's resamples, Holm over each pair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Union

from .._internal.validation import check_choice
from .inference.familywise import FAMILIES, METHODS
from .validate import GAUSSIAN_NULLS

if TYPE_CHECKING:  # names used only in type hints
    import distributed

__all__ = ["Permutations", "AnalyticNull", "MomentNull", "Intervals", "Holm", "BenjaminiHochberg", "NoCorrection", "Null",
           "Correction", "option_keywords", "check_correction", "Execution", "execution_keywords", "Flag",
           "options_from_flags"]


@dataclass(frozen=True)
class Flag:
    """A command-line flag of an option object, as ``mianalysis analyze`` and ``mianalysis
    report`` offer it: the parser (:func:`mianalysis.cli.build_parser`) adds each option's
    :attr:`FLAGS` as written here, so that the help text, the choices and the default are
    declared once, beside the object the flag builds (:func:`options_from_flags`).

    Attributes
    ----------
    flag : str
        The flag ("--permutations"); its value is read back under :attr:`dest`.
    help : str
        The help text of ``--help``.
    type : callable, optional
        Converts the flag's text (int, float); None: kept as text.
    choices : tuple of str, optional
        The values allowed; None: any.
    default : optional
        The value without the flag (analyze's default).
    metavar : str, optional
        The value's name in the usage line.
    note : str, optional
        What the default or a special value means, after the help ("0: none"); a command
        with another default gives its own.
    """

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None
    metavar: str | None = None
    note: str | None = None

    @property
    def dest(self) -> str:
        """The name the parsed value is read under ("--ci-level" -> "ci_level")."""
        return self.flag.lstrip("-").replace("-", "_")

    def argparse_keywords(self, **changes: Any) -> dict[str, Any]:
        """The keyword arguments of :meth:`argparse.ArgumentParser.add_argument` for this
        flag, with `changes` (another `default`, `help` or `note`) applied.

        Examples
        --------
        >>> from mianalysis.analysis.options import PERMUTATIONS_FLAG
        >>> PERMUTATIONS_FLAG.argparse_keywords(default=20, note="default 20")["help"]
        "shuffles of each MI row's permutation null (columns null_mean, null_std, p_value); default 20"
        """
        note = changes.pop("note", self.note)
        keywords: dict[str, Any] = {"help": self.help, "default": self.default}
        keywords.update({k: v for k, v in (("type", self.type), ("choices", self.choices), ("metavar", self.metavar))
                         if v is not None})
        keywords.update(changes)
        if note:
            keywords["help"] += f"; {note}"
        keywords["help"] = keywords["help"].replace("%", "%%")  # argparse formats help with %
        return keywords


# The flags of the options, in the order `mianalysis analyze --help` lists them.
PERMUTATIONS_FLAG = Flag("--permutations", type=int, default=0, note="0: none",
                         help="shuffles of each MI row's permutation null (columns null_mean, null_std, p_value)")
GAUSSIAN_NULL_FLAG = Flag("--gaussian-null", choices=GAUSSIAN_NULLS, default="auto",
                          help="null of the Gaussian and copula MI rows: auto (the exact permutation moments of "
                               "Pillai's trace where shuffles are costly, as at the paper's size; else the shuffles), "
                               "permutation (always shuffles), moments, or analytic (Wilks' Lambda, for Gaussian "
                               "parameters)")
NULL_FLAGS = (PERMUTATIONS_FLAG, GAUSSIAN_NULL_FLAG)
INTERVAL_FLAGS = (
    Flag("--ci-resamples", type=int, metavar="N",
         help="resamples per MI confidence interval (bootstrap for gaussian, halves for ksg; default 20 gaussian, "
              "10 ksg; 0: none)"),
    Flag("--ci-level", type=float, default=0.95, help="level of every confidence interval"))
CORRECTION_FLAGS = (
    Flag("--familywise", choices=METHODS, default="holm",
         help="correction of the trend verdicts over each family (columns p_adjusted, family_verdict): Holm "
              "(family-wise error), Benjamini-Hochberg (false discovery rate) or none"),
    Flag("--family", choices=FAMILIES, default="pair",
         help="family corrected over: one client pair's steps, or every pair's steps of a quantity"))


@dataclass(frozen=True)
class Permutations:
    """The null of every MI row: its estimator on `n` shuffled pairings of the runs.

    Parameters
    ----------
    n : int or dict of estimator -> int, default=100
        Shuffles per MI estimate (``analyze(n_permutations=n)``); 0: no null.
    moments : {"auto", "never"}, default="auto"
        "auto": a Gaussian or copula row whose shuffles would be costly (the paper's size;
        :func:`mianalysis.analysis.compute.moments_apply`) gets the permutation-moment null
        instead, whose size is measured there (``analyze(gaussian_null="auto")``, the
        default); "never": shuffles everywhere (``gaussian_null="permutation"``).

    Examples
    --------
    >>> from mianalysis.analysis.options import Permutations, option_keywords
    >>> kw = option_keywords(null=Permutations(200, moments="never"))
    >>> kw["n_permutations"], kw["gaussian_null"]
    (200, 'permutation')
    """

    n: int | Mapping[str, int] = 100
    moments: str = "auto"
    FLAGS: ClassVar[tuple[Flag, ...]] = NULL_FLAGS  # the command line's --permutations and --gaussian-null


@dataclass(frozen=True)
class _FallbackNull:
    """A null of the Gaussian and copula rows that falls back on shuffles for the others:
    what :class:`MomentNull` and :class:`AnalyticNull` share.

    Parameters
    ----------
    otherwise : Permutations, optional
        The null of the rows without this one (the other estimators' rows, and the
        Ledoit-Wolf shrinkage estimates): their shuffles; None: none.
    """

    otherwise: Permutations | None = None
    FLAGS: ClassVar[tuple[Flag, ...]] = NULL_FLAGS  # the command line's --permutations and --gaussian-null
    GAUSSIAN_NULL: ClassVar[str]  # the ``gaussian_null`` of analyze it stands for

    def _keywords(self) -> dict[str, Any]:
        """``n_permutations`` and ``gaussian_null`` of :func:`mianalysis.analyze`; TypeError
        for an `otherwise` that is neither Permutations nor None."""
        if self.otherwise is not None and not isinstance(self.otherwise, Permutations):
            raise TypeError(f"`{type(self).__name__}.otherwise` must be Permutations or None; got {self.otherwise!r}")
        return {"n_permutations": 0 if self.otherwise is None else self.otherwise.n,
                "gaussian_null": self.GAUSSIAN_NULL}


@dataclass(frozen=True)
class MomentNull(_FallbackNull):
    """The permutation-moment null (:func:`mianalysis.estimators.moment_null.permutation_moment_null`:
    Pillai's trace, its exact mean and variance over all permutations, a gamma tail) for the
    Gaussian and copula rows, at about three shuffles' cost (``analyze(gaussian_null=
    "moments")``); the other rows, and shrinkage estimates, get `otherwise`'s permutations
    (a :class:`Permutations`; None: no null for them).
    """

    GAUSSIAN_NULL: ClassVar[str] = "moments"


@dataclass(frozen=True)
class AnalyticNull(_FallbackNull):
    """The analytic null of the Gaussian MI (:func:`mianalysis.gaussian_mi_null`, Wilks'
    Lambda) for the Gaussian and copula rows, at no cost (``analyze(gaussian_null=
    "analytic")``); the other rows, and shrinkage estimates, get `otherwise`'s permutations
    (a :class:`Permutations`; None: no null for them).
    """

    GAUSSIAN_NULL: ClassVar[str] = "analytic"


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
    FLAGS: ClassVar[tuple[Flag, ...]] = INTERVAL_FLAGS  # the command line's --ci-resamples and --ci-level


@dataclass(frozen=True)
class Holm:
    """Holm's correction of the trend verdicts (family-wise error rate) over each `family`:
    "pair" (one client pair's steps of a quantity) or "cell" (every pair's); a study table
    may have families of its own (the dependence given the global model's "table": all of
    its rows, :func:`mianalysis.analysis.studies.global_dependence.dependence_given_global`)."""

    family: str = "pair"
    method = "holm"
    FLAGS: ClassVar[tuple[Flag, ...]] = CORRECTION_FLAGS  # the command line's --familywise and --family


@dataclass(frozen=True)
class BenjaminiHochberg:
    """Benjamini-Hochberg's correction (false discovery rate) over each `family`."""

    family: str = "pair"
    method = "bh"
    FLAGS: ClassVar[tuple[Flag, ...]] = CORRECTION_FLAGS  # the command line's --familywise and --family


@dataclass(frozen=True)
class NoCorrection:
    """No correction: each test alone."""

    family: str = "pair"
    method = "none"
    FLAGS: ClassVar[tuple[Flag, ...]] = CORRECTION_FLAGS  # the command line's --familywise and --family


Null = Union[Permutations, AnalyticNull, MomentNull]
Correction = Union[Holm, BenjaminiHochberg, NoCorrection]

# The keywords each option stands for, at analyze's defaults.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "null": {"n_permutations": 0, "gaussian_null": "auto"},
    "interval": {"ci_resamples": None, "ci_level": 0.95},
    "correction": {"familywise": "holm", "family": "pair"},
}


def option_keywords(*, null: Null | None = None, interval: Intervals | None = None,
                    correction: Correction | None = None, **keywords: Any) -> dict[str, Any]:
    """The keywords of :func:`mianalysis.analyze` that the option objects stand for, merged
    with `keywords` (those keywords as given; missing ones take analyze's defaults).

    Parameters
    ----------
    null : Permutations, MomentNull or AnalyticNull, optional
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
            if null.moments not in ("auto", "never"):
                raise ValueError(f"`Permutations.moments` must be 'auto' or 'never'; got {null.moments!r}")
            given["null"] = {"n_permutations": null.n,
                             "gaussian_null": "auto" if null.moments == "auto" else "permutation"}
        elif isinstance(null, _FallbackNull):
            given["null"] = null._keywords()
        else:
            raise TypeError(f"`null` must be Permutations, MomentNull or AnalyticNull; got {null!r}")
    if interval is not None:
        if not isinstance(interval, Intervals):
            raise TypeError(f"`interval` must be Intervals; got {interval!r}")
        given["interval"] = {"ci_resamples": interval.resamples, "ci_level": interval.level}
    if correction is not None:
        correction = check_correction(correction)
        given["correction"] = {"familywise": correction.method, "family": correction.family}
    for option, values in given.items():
        _refuse_both(option, _DEFAULTS[option], keywords)
        out.update(values)
    return out


def check_correction(correction: object, families: Sequence[str] | None = None) -> Correction:
    """`correction` checked: a :class:`Holm`, :class:`BenjaminiHochberg` or
    :class:`NoCorrection`, whose `family` is one of `families` where they are given.

    Parameters
    ----------
    correction : object
    families : sequence of str, optional
        The families of the table corrected over (a study table's, such as
        :data:`mianalysis.analysis.studies.global_dependence.FAMILIES`). None: the family is
        not checked here (:func:`option_keywords`: :func:`mianalysis.analyze` checks it
        with its keywords, :func:`mianalysis.analysis.validate.check_request`).

    Returns
    -------
    Holm, BenjaminiHochberg or NoCorrection
        `correction` itself.

    Raises
    ------
    TypeError
        If `correction` is none of the three classes.
    ValueError
        If its family is not one of `families`.

    Examples
    --------
    >>> from mianalysis.analysis.options import Holm, check_correction
    >>> check_correction(Holm("table"), families=("table", "pair", "cell"))
    Holm(family='table')
    """
    if not isinstance(correction, (Holm, BenjaminiHochberg, NoCorrection)):
        raise TypeError(f"`correction` must be Holm, BenjaminiHochberg or NoCorrection; got {correction!r}")
    if families is not None:
        check_choice(correction.family, "family", tuple(families))
    return correction


def _refuse_both(option: str, defaults: Mapping[str, Any], keywords: Mapping[str, Any]) -> None:
    """A ValueError if `option` was given and any of its `keywords` at another value than its default."""
    clash = [k for k, default in defaults.items() if keywords.get(k, default) is not default
             and keywords.get(k, default) != default]
    if clash:
        raise ValueError(f"`{option}` and {', '.join(f'`{k}`' for k in clash)} both say how; give one of them")


@dataclass(frozen=True)
class Execution:
    """Where and how :func:`mianalysis.analyze` computes its table: here or on Dask
    workers, with or without progress bars and KSG's distance cache. It says nothing of
    which analysis is made: the table is the same whichever way, but for the distance
    cache, which draws KSG's tie-breaking noise per client rather than per pair.

    Parameters
    ----------
    progress : bool, default=False
        Draw a progress bar (``analyze(progress=)``).
    distance_cache : {"auto", True, False}, default="auto"
        Keep each client's runs x runs KSG distance matrix in memory
        (``analyze(distance_cache=)``, which says when "auto" does).
    scheduler : str, optional
        Compute the checkpoints on Dask workers (``analyze(scheduler=)``): "local:N",
        "tcp://HOST:PORT" or a scheduler file.
    client : distributed.Client, optional
        An open Dask client instead of `scheduler` (``analyze(client=)``).
    timeout : float, optional
        Seconds to reach the scheduler and to wait for a worker (``analyze(timeout=)``).

    Examples
    --------
    >>> from mianalysis.analysis.options import Execution, execution_keywords
    >>> execution_keywords(Execution(scheduler="local:2", distance_cache=False))
    {'progress': False, 'distance_cache': False, 'scheduler': 'local:2', 'client': None, 'timeout': None}
    """

    progress: bool = False
    distance_cache: bool | str = "auto"
    scheduler: str | None = None
    client: distributed.Client | None = None
    timeout: float | None = None


_EXECUTION_DEFAULTS: dict[str, Any] = {"progress": False, "distance_cache": "auto", "scheduler": None,
                                       "client": None, "timeout": None}


def execution_keywords(execution: Execution | None = None, **keywords: Any) -> dict[str, Any]:
    """The keywords of :func:`mianalysis.analyze` that an :class:`Execution` stands for
    (``progress``, ``distance_cache``, ``scheduler``, ``client``, ``timeout``), merged with
    `keywords` (those keywords as given; missing ones take analyze's defaults).

    Raises
    ------
    TypeError
        If `execution` is not an Execution, or a keyword is not one of those five.
    ValueError
        If `execution` is given together with one of the five keywords set to another
        value than its default (say one or the other).
    """
    unknown = set(keywords) - set(_EXECUTION_DEFAULTS)
    if unknown:
        raise TypeError(f"execution_keywords() got unexpected keywords {sorted(unknown)}")
    out = {**_EXECUTION_DEFAULTS, **keywords}
    if execution is None:
        return out
    if not isinstance(execution, Execution):
        raise TypeError(f"`execution` must be Execution; got {execution!r}")
    _refuse_both("execution", _EXECUTION_DEFAULTS, keywords)
    return {k: getattr(execution, k) for k in _EXECUTION_DEFAULTS}


CORRECTIONS: dict[str, Callable[[str], Correction]] = {"holm": Holm, "bh": BenjaminiHochberg, "none": NoCorrection}


def options_from_flags(values: Mapping[str, Any]) -> dict[str, Any]:
    """The option objects that the command line's flags (:class:`Flag`, the options'
    ``FLAGS``) give: ``null``, ``interval`` and ``correction`` for :func:`mianalysis.analyze`.

    Parameters
    ----------
    values : mapping
        The parsed flags under their :attr:`Flag.dest` (``vars(args)``); a flag missing
        from it takes its default.

    Returns
    -------
    dict
        ``{"null": ..., "interval": ..., "correction": ...}``.

    Examples
    --------
    >>> from mianalysis.analysis.options import options_from_flags
    >>> options = options_from_flags({"permutations": 50, "gaussian_null": "analytic", "family": "cell"})
    >>> options["null"], options["correction"]
    (AnalyticNull(otherwise=Permutations(n=50, moments='auto')), Holm(family='cell'))
    """
    def value(flag: Flag) -> Any:
        return values.get(flag.dest, flag.default)

    n = value(PERMUTATIONS_FLAG)
    nulls: dict[str, Null] = {"analytic": AnalyticNull(otherwise=Permutations(n)),
                              "moments": MomentNull(otherwise=Permutations(n)),
                              "permutation": Permutations(n, moments="never"), "auto": Permutations(n)}
    resamples, level = (value(flag) for flag in INTERVAL_FLAGS)
    method, family = (value(flag) for flag in CORRECTION_FLAGS)
    null = check_choice(value(GAUSSIAN_NULL_FLAG), GAUSSIAN_NULL_FLAG.flag, tuple(nulls))
    return {"null": nulls[null], "interval": Intervals(level, resamples),
            "correction": CORRECTIONS[method](family)}
