"""Input checks shared by the public entry points.

Every public function calls these before computing, so kernels can trust their input
(contiguous, finite, floating point, two-dimensional). Messages name the parameter in
backticks, as scipy does, and say what was received.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings

import numpy as np

from .scaling import SAFE_LOW, column_ranges, column_std

UNITS = {"nats": 1.0, "bits": 1.0 / np.log(2.0)}


class InvalidParameterError(ValueError, TypeError):
    """A setting that is neither of the right type nor of the right value (a flag that is not
    True or False, say): callers may catch it as ValueError or as TypeError."""


def check_samples(a, name, *, dtype=np.float64) -> np.ndarray:
    """Return `a` as a C-contiguous 2-D floating array of shape (n_samples, n_features).

    A 1-D array is one feature. Raises `TypeError` for non-numeric or complex data and
    `ValueError` for empty, >2-D or non-finite data; messages name `name`.
    """
    try:
        arr = np.asarray(a)
    except Exception as exc:  # ragged nested lists and the like
        raise TypeError(f"`{name}` could not be converted to an array: {exc}") from exc
    if arr.dtype.kind == "c":
        raise TypeError(f"`{name}` must be real; got complex dtype {arr.dtype}")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"`{name}` must be a numeric array; got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must be a 1-D or 2-D array; got a scalar")
    if arr.ndim > 2:
        raise ValueError(
            f"`{name}` must be a 1-D or 2-D array of shape (n_samples, n_features); "
            f"got {arr.ndim}-D array of shape {arr.shape}"
        )
    if arr.size == 0:
        raise ValueError(f"`{name}` is empty (shape {arr.shape})")
    if arr.ndim == 1:
        arr = arr[:, None]
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if not np.isfinite(arr).all():
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(np.isinf(arr).sum())
        raise ValueError(
            f"`{name}` contains non-finite values: {n_nan} NaN and {n_inf} inf "
            f"of {arr.size} entries"
        )
    return arr


def check_paired(x, y, *, min_samples=2, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Check `x` and `y` as paired samples: same number of rows, at least `min_samples`."""
    x = check_samples(x, "x", dtype=dtype)
    y = check_samples(y, "y", dtype=dtype)
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            "`x` and `y` must have the same number of samples (rows); "
            f"got {x.shape[0]} and {y.shape[0]}"
        )
    if x.shape[0] < min_samples:
        raise ValueError(
            f"`x` and `y` need at least {min_samples} samples (rows); got {x.shape[0]}{TRANSPOSE_HINT}"
        )
    return x, y


# Said wherever too few samples may be arrays given the wrong way round.
TRANSPOSE_HINT = ("; each row is one sample (one run): arrays of shape (features, runs) need their transpose "
                  "(x.T, y.T)")


def check_k(k, n_samples, *, samples="n_samples") -> int:
    """Return the KSG neighbour count `k` as int, checked against the data: ``1 <= k < n_samples``.

    Every sample needs k nearest neighbours other than itself, and only ``n_samples - 1``
    other samples exist. Every path to a KSG kernel (any backend, with or without a
    distance cache, permutation tests, `analyze`) checks `k` here, before any work: a kernel
    asked for more neighbours than there are reads past its data. `samples` names the
    sample count in the message (e.g. "the number of runs").
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"`k` must be an integer; got {k!r}")
    k = int(k)
    if not 1 <= k < n_samples:
        raise ValueError(
            f"`k` must be in [1, {n_samples - 1}]; got {k}: KSG needs k neighbours of every sample other "
            f"than the sample itself, so 1 <= k < {samples} ({n_samples})"
            + (TRANSPOSE_HINT if samples == "n_samples" else "")
        )
    return k


class ConstantFeatureWarning(UserWarning):
    """A feature (column) of `x` or `y` is constant (or constant to float32 resolution, see
    :func:`varying_columns`) over the samples and was dropped."""


#: How many spacings of a feature's magnitude its standard deviation must exceed for the
#: feature to count as varying (:func:`varying_columns`).
CONSTANT_SPACINGS = 4.0
#: The rule of :func:`varying_columns`, as the analysis records it (a table sidecar's
#: ``settings["constant_rule"]``).
CONSTANT_RULE = {
    "rule": "a feature is constant when its maximum equals its minimum over the samples, or when its standard "
            "deviation (ddof=0) is at most c spacings of its precision at its largest magnitude: "
            "c * np.spacing(np.float32(max |x|)) where every value of the feature is a float32 number (parameters "
            "are stored in float32), c * np.spacing(max |x|) (float64) otherwise; the spacing is computed as "
            "2^(e - 24) or 2^(e - 53) for max |x| = f 2^e, f in [0.5, 1), so that magnitudes outside float32's "
            "normal range are judged alike",
    "c": CONSTANT_SPACINGS,
}


def varying_columns(a) -> np.ndarray:
    """Which columns of the 2-D array `a` vary over its rows (a boolean mask), by the one rule
    every estimator and the analysis apply (:data:`CONSTANT_RULE`).

    A column is constant when its maximum equals its minimum (exact), or when its standard
    deviation (ddof=0) is at most ``c`` (:data:`CONSTANT_SPACINGS`) spacings of its
    precision at its magnitude: ``c * np.spacing(np.float32(max |column|))`` when every value
    of the column is a float32 number, ``c * np.spacing(max |column|)`` otherwise. Its values
    then differ by no more than rounding at their magnitude. Parameters are trained and
    stored in float32, so such a spread is rounding noise, which an estimator that
    standardises its columns (KSG) or inverts a covariance (Gaussian) would otherwise treat
    as a full dimension. The rule is relative: a float32 parameter of magnitude 1e3 whose
    values differ only by float32 rounding (~6e-5) is constant, one of magnitude 1e-8 with
    an sd of 1e-12 varies (an absolute threshold such as 1e-6 would drop it); float64 data
    far from 0 (1e8 plus unit noise) keep their variation (MI does not change with a shift).
    The spacing is computed in float64 as ``2^(e - 24)`` (float32) or ``2^(e - 53)`` for a
    magnitude ``f 2^e``, ``f`` in [0.5, 1), which equals np.spacing in the normal range and
    extends it beyond.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.analysis import varying_columns
    >>> rng = np.random.default_rng(0)
    >>> rounding = np.float32(1e3) + np.spacing(np.float32(1e3)) * rng.integers(0, 2, 8).astype(np.float32)
    >>> a = np.column_stack([np.full(8, 2.0), rounding, 1e-8 + 1e-12 * rng.standard_normal(8)])
    >>> varying_columns(a)
    array([False, False,  True])
    """
    a = np.asarray(a)
    if a.dtype != np.float32:  # float32 values are float64 ones exactly: read them as they are
        a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"`a` must be a 2-D array of samples x features; got {a.ndim} dimensions")
    if a.shape[0] == 0:
        return np.zeros(a.shape[1], dtype=bool)
    lo, hi = (r.astype(np.float64) for r in column_ranges(a))
    varying = hi > lo
    _, exponent = np.frexp(np.maximum(np.abs(lo), np.abs(hi)))
    # A column whose values span R has sd >= R / sqrt(2 n) (two values at its ends, the rest
    # at their mean). Where that bound exceeds twice the threshold at float32's coarser
    # resolution, the rule's answer is "varies" whatever the computed sd's rounding, so only
    # the other columns need the full rule (sd, float32 check): one pass over the data instead
    # of several full-size copies, which matters at paper scale where every estimator asks.
    with np.errstate(over="ignore", under="ignore"):
        spread = hi - lo
        clear = varying & np.isfinite(spread) & (spread > SAFE_LOW) & (
            spread / np.sqrt(2.0 * a.shape[0]) > 2.0 * CONSTANT_SPACINGS * np.ldexp(1.0, exponent - 24))
    check = varying & ~clear
    if check.any():
        cols = np.asarray(a[:, check], dtype=np.float64)
        with np.errstate(over="ignore"):
            single = (cols.astype(np.float32).astype(np.float64) == cols).all(axis=0)
        resolution = np.ldexp(1.0, exponent[check] - np.where(single, 24, 53))
        varying[check] = column_std(cols) > CONSTANT_SPACINGS * resolution
    return varying


def drop_constant_features(x, y) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) without their constant columns, warning with `ConstantFeatureWarning` if any.

    A constant feature carries no information: ``I((X, c); Y) = I(X; Y)`` exactly, and
    ``I(c; Y) = 0``. Dropping it is therefore exact, whereas keeping it makes covariances
    singular and leaves KSG with no distances in that column. The estimators call this on
    checked 2-D input; a column is constant by the rule of :func:`varying_columns` (exactly
    constant, or varying by no more than rounding at its magnitude, float32's for float32
    data: such a column is dropped too, as rounding noise). Either result may have no columns left: the MI is then 0.
    """
    keep_x = varying_columns(x)
    keep_y = varying_columns(y)
    if keep_x.all() and keep_y.all():
        return x, y
    names = [f"x[:, {j}]" for j in np.flatnonzero(~keep_x)] + [f"y[:, {j}]" for j in np.flatnonzero(~keep_y)]
    shown = ", ".join(names[:5]) + ("" if len(names) <= 5 else f" and {len(names) - 5} more")
    left = "" if keep_x.any() and keep_y.any() else (
        f"; no feature of `{'x' if not keep_x.any() else 'y'}` varies, so the mutual information is 0")
    warnings.warn(
        f"dropped {len(names)} constant feature(s) ({shown}): a constant carries no information, so "
        f"dropping constants leaves the mutual information unchanged (a feature whose sd is at most "
        f"{CONSTANT_SPACINGS:g} float32 spacings of its magnitude, float64 ones for float64 data, counts as constant: "
        f"rounding noise){left}",
        ConstantFeatureWarning,
        stacklevel=3,
    )
    return np.ascontiguousarray(x[:, keep_x]), np.ascontiguousarray(y[:, keep_y])


def check_units(units) -> float:
    """Return the factor that converts nats to `units` ("bits" or "nats")."""
    if not isinstance(units, str) or units not in UNITS:
        raise ValueError(f"`units` must be one of {sorted(UNITS)}; got {units!r}")
    return UNITS[units]


def check_flag(value, name) -> bool:
    """`value` as a bool; ValueError naming `name` unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"`{name}` must be True or False; got {value!r}")
    return bool(value)


def check_choice(value, name, choices):
    """Raise a `ValueError` naming `name` unless `value` is one of `choices`."""
    if value not in choices:
        known = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {known}; got {value!r}")
    return value


def check_int(value, name, *, low, high=None) -> int:
    """Return `value` as int; `TypeError` if not an integer, `ValueError` outside [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an integer; got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"`{name}` must be {bound}; got {value}")
    return value


def check_real(value, name, *, low=None, high=None, low_open=False, high_open=False) -> float:
    """Return `value` as a finite float in the interval from `low` to `high` (either None: no
    bound; `low_open` / `high_open`: that end excluded). `TypeError` if not a real number,
    `ValueError` if not finite or outside the interval; both name `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be a real number; got {value!r}")
    value = float(value)
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if not np.isfinite(value) or below or above:
        if low is not None and high is not None:
            bound = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            bound = f"{'>' if low_open else '>='} {low}"
        elif high is not None:
            bound = f"{'<' if high_open else '<='} {high}"
        else:
            bound = "finite"
        raise ValueError(f"`{name}` must be {'a finite number ' if bound != 'finite' else ''}{bound}; got {value}")
    return value


def check_nonnegative_float(value, name) -> float:
    """Return `value` as a finite float >= 0."""
    return check_real(value, name, low=0)


def check_random_state(random_state) -> np.random.Generator:
    """Return a `numpy.random.Generator` from None, an int seed or a Generator."""
    if random_state is None or isinstance(random_state, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(random_state, bool):
            raise TypeError(f"`random_state` must be None, an int or a Generator; got {random_state!r}")
        if isinstance(random_state, numbers.Integral) and random_state < 0:
            raise ValueError(f"`random_state` must be >= 0; got {random_state}")
        if isinstance(random_state, numbers.Integral):
            return np.random.default_rng(int(random_state))
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    raise TypeError(
        f"`random_state` must be None, an int or a numpy Generator; got {type(random_state).__name__}"
    )


# ---------------------------------------------------------------------- task settings
# Each Task declares its settings once, as a table of these rules (Task.setting_rules); the
# task checks every setting against its rule when it is built, before anything is written.
# `label` names the setting and its task in messages: "`n_layers` (task signal-rnn)".


def _shown(value):
    return repr(value) if isinstance(value, str) else str(value)


class IntSetting:
    """An integer in [low, high] (high None: no upper bound), or None when `optional`.
    A float with an integral value (2.0, as JSON may spell 2) is accepted and stored as
    the int 2; a fractional one (2.7) is a TypeError, never truncated."""

    def __init__(self, low, high=None, *, optional=False):
        self.low, self.high, self.optional = low, high, optional

    def describe(self):
        kind = f"an integer >= {self.low}" if self.high is None else f"an integer in [{self.low}, {self.high}]"
        return f"None or {kind}" if self.optional else kind

    def check(self, value, label):
        if value is None and self.optional:
            return None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            number = int(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            number = int(math.trunc(value))  # integral already: trunc only spells int() for numbers.Real
        else:
            raise TypeError(f"{label} must be {self.describe()}; got {_shown(value)}")
        if number < self.low or (self.high is not None and number > self.high):
            raise ValueError(f"{label} must be {self.describe()}; got {number}")
        return number


class RealSetting:
    """A finite number in the interval from `low` to `high` (None: unbounded), each end
    closed unless `low_open` / `high_open`; stored as float. `why` explains the range in
    the message."""

    def __init__(self, low=None, high=None, *, low_open=False, high_open=False, why=""):
        self.low, self.high, self.low_open, self.high_open, self.why = low, high, low_open, high_open, why

    def describe(self):
        if self.high is None:
            if self.low is None:
                return "a finite number"
            return f"a finite number {'>' if self.low_open else '>='} {self.low}"
        return (f"a finite number in {'(' if self.low_open else '['}{self.low}, "
                f"{self.high}{')' if self.high_open else ']'}")

    def check(self, value, label):
        why = f" ({self.why})" if self.why else ""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{label} must be {self.describe()}{why}; got {_shown(value)}")
        number = float(value)
        below = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        above = self.high is not None and (number >= self.high if self.high_open else number > self.high)
        if not np.isfinite(number) or below or above:
            raise ValueError(f"{label} must be {self.describe()}{why}; got {_shown(value)}")
        return number


class RangeSetting:
    """A pair [low, high] of finite numbers with low <= high; stored as a list of floats."""

    def describe(self):
        return "a pair [low, high] of finite numbers with low <= high"

    def check(self, value, label):
        if (not isinstance(value, (list, tuple)) or len(value) != 2
                or any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in value)):
            raise TypeError(f"{label} must be {self.describe()}; got {_shown(value)}")
        low, high = float(value[0]), float(value[1])
        if not (np.isfinite(low) and np.isfinite(high) and low <= high):
            raise ValueError(f"{label} must be {self.describe()}; got {_shown(value)}")
        return [low, high]


class FolderSetting:
    """None, or the path of an existing folder; stored as a string."""

    def describe(self):
        return "None or the path of an existing folder"

    def check(self, value, label):
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{label} must be {self.describe()}; got {_shown(value)}")
        path = os.fspath(value)
        if not path or not os.path.isdir(path):
            what = "is not a folder" if os.path.exists(path) else "does not exist"
            raise ValueError(f"{label} must be {self.describe()}; {path!r} {what}")
        return path


class ChoiceSetting:
    """One of a fixed set of strings."""

    def __init__(self, *choices):
        self.choices = choices

    def describe(self):
        return f"one of {list(self.choices)}"

    def check(self, value, label):
        if value not in self.choices:
            raise ValueError(f"{label} must be {self.describe()}; got {_shown(value)}")
        return value
