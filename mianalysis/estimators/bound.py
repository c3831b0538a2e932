"""A cross-fitted lower bound on mutual information for fewer runs than dimensions.

Canonical directions are fitted on some runs and the MI of the projected pair is estimated
on the others; for fixed projections the data-processing inequality gives
``I(A x; B y) <= I(x; y)``, so the held-out estimate is a lower bound (up to its own
estimation error) where no plain estimate of ``I(x; y)`` is possible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._internal.scaling import rescale_extreme_columns
from .._internal.validation import check_choice, check_flag, check_int, check_paired, check_random_state, check_units, drop_constant_features
from .copula import normal_scores
from .gaussian import SingularCovarianceError, bound_min_runs, gaussian_mi, ledoit_wolf_intensity
from .nwj import fit_critic, nwj_fold, score_map
from .repeats import check_repeated_runs

__all__ = ["ProjectionBound", "projection_bound", "projection_mi_bound", "canonical_directions", "default_components",
           "bound_regime", "bound_resample_settings", "bound_min_runs", "bound_ceiling", "RUNS_PER_DIMENSION",
           "METHODS"]

# The default number of canonical pairs keeps every held-out estimate at this many runs per
# projected dimension or more (the plain bias-corrected estimate is calibrated from 2.2:
# mianalysis.analysis.inference.regime.GAUSSIAN_MIN_RUNS_PER_DIM), so that it sits well inside its regime.
RUNS_PER_DIMENSION = 10
# "nwj": the held-out Nguyen-Wainwright-Jordan bound (any distribution); "gaussian": the
# held-out Gaussian MI of the projections (a bound only where the projections are Gaussian).
METHODS = ("nwj", "gaussian")


@dataclass(frozen=True)
class ProjectionBound:
    """A cross-fitted projection lower bound on MI (:func:`projection_bound`).

    Attributes
    ----------
    value : float
        The bound: the mean of `fold_values`, in `units`.
    fold_values : ndarray of shape (repeats * folds,)
        The held-out value of every evaluation fold (each fold's projections and critic were
        fitted on the other folds of its split).
    n_components : int
        Canonical pairs kept (the projected pair has ``2 n_components`` dimensions).
    n_eval : int
        Runs in the smallest evaluation fold.
    units : str
        "bits" or "nats".
    method : str
        "nwj" (a bound for any distribution) or "gaussian" (a bound for Gaussian
        projections only).
    se : float
        Standard error of `value` (method "nwj": from each evaluation run's influence on its
        fold's value, the folds of one split independent and the splits of `repeats` no
        less variable than one; method "gaussian": NaN).
    """

    value: float
    fold_values: np.ndarray
    n_components: int
    n_eval: int
    units: str
    method: str = "nwj"
    se: float = float("nan")

    def __str__(self) -> str:
        se = f" (se {self.se:.3g})" if np.isfinite(self.se) else ""
        kind = "for any distribution" if self.method == "nwj" else "for Gaussian projections only"
        return (f"MI >= {self.value:.4g} {self.units}{se}: held-out lower bound {kind}, "
                f"{self.n_components} canonical pair{'s' if self.n_components != 1 else ''}, "
                f"evaluation folds of {self.n_eval} runs")


def canonical_directions(x: np.ndarray, y: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The top `n_components` regularised canonical directions of samples `x` (n, p) and `y` (n, q).

    Each column is standardised; the within-side correlation matrices are Ledoit-Wolf
    shrunk (the estimator of :func:`mianalysis.estimators.gaussian.ledoit_wolf_covariance`,
    positive definite for any n), and the singular vectors of
    :math:`C_{xx}^{-1/2} C_{xy} C_{yy}^{-1/2}` give the directions. Returns ``(A, B)`` of
    shapes (p, r) and (q, r) such that ``x @ A`` and ``y @ B`` are the projections (up to
    a shift, which the Gaussian MI ignores). Needs at least 2 samples.

    Computed from the thin singular value decompositions of the standardised samples
    :math:`Z = U \Sigma V^\top`: with shrunk eigenvalues
    :math:`\lambda_i = (1 - s)\sigma_i^2 / n + s\mu`, :math:`C^{-1/2} Z^\top = V
    \Lambda^{-1/2} \Sigma U^\top` (the shrinkage target's part orthogonal to the samples
    drops out), so the whitened cross-covariance is that of an m x m matrix (m = min(n, p)):
    O(n^2 (p + q)) rather than O(p^3 + q^3).

    Examples
    --------
    Two coordinates of x drive y; the first direction finds them:

    >>> import numpy as np
    >>> from mianalysis.estimators.bound import canonical_directions
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((500, 5))
    >>> y = (x[:, 0] + x[:, 1])[:, None] + 0.1 * rng.standard_normal((500, 1))
    >>> a, b = canonical_directions(x, y, 1)
    >>> (np.abs(a[:, 0]) / np.abs(a[:, 0]).max() > 0.8).tolist()
    [True, True, False, False, False]
    """
    (ux, wx, vx, rx, sdx), (uy, wy, vy, ry, sdy) = _whitened_factors(x), _whitened_factors(y)
    p, _, qt = np.linalg.svd((wx[:, None] * (ux.T @ uy)) * wy[None, :] / x.shape[0])
    a = vx @ (rx[:, None] * p[:, :n_components])  # C_xx^(-1/2) V_x P: the whitened singular vectors mapped back
    b = vy @ (ry[:, None] * qt[:n_components].T)
    return a / sdx[:, None], b / sdy[:, None]


def _whitened_factors(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(U, sigma / sqrt(lambda), V, 1 / sqrt(lambda), sd) of the standardised samples of `a`
    (see canonical_directions)."""
    n = a.shape[0]
    sd = a.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)  # a column constant within this fold
    z = (a - a.mean(axis=0)) / sd
    u, sigma, vt = np.linalg.svd(z, full_matrices=False)
    eig = sigma**2 / n
    intensity, mu = ledoit_wolf_intensity(z, float(eig.sum()), float(np.sum(eig**2)))
    lam = (1.0 - intensity) * eig + intensity * mu
    lam = np.maximum(lam, 1e-12 * max(float(lam.max()), np.finfo(np.float64).tiny))
    return u, sigma / np.sqrt(lam), vt.T, 1.0 / np.sqrt(lam), sd


def _projection_bound_iv(x: ArrayLike, y: ArrayLike, n_components: int | None, folds: int, repeats: int, copula: bool,
                         method: str, units: str, random_state: int | np.random.Generator | None) -> tuple[
        np.ndarray, np.ndarray, int | None, int, int, bool, str, float, np.random.Generator]:
    """Checked arguments of :func:`projection_bound`: (x, y, n_components or None, folds,
    repeats, copula, method, units factor, generator), the constant features of x and y dropped."""
    factor = check_units(units)
    copula = check_flag(copula, "copula")
    method = check_choice(method, "method", METHODS)
    x, y = check_paired(x, y)
    folds = check_int(folds, "folds", low=2, high=max(2, x.shape[0] // 4))
    repeats = check_int(repeats, "repeats", low=1)
    if n_components is not None:
        n_components = check_int(n_components, "n_components", low=1)
    rng = check_random_state(random_state)
    n_eval = x.shape[0] // folds
    if x.shape[0] < bound_min_runs(folds):
        raise ValueError(f"`x` and `y` need at least {4 * folds} samples for {folds} folds (each evaluation fold "
                         f"needs 4 runs for one canonical pair); got {x.shape[0]}")
    if method == "gaussian" and n_components is not None and n_eval <= 2 * n_components + 1:
        raise ValueError(f"`n_components`={n_components} needs evaluation folds of more than {2 * n_components + 1} "
                         f"runs (the bias-corrected Gaussian estimate of {2 * n_components} dimensions); "
                         f"{x.shape[0]} runs in {folds} folds give {n_eval}")
    x, y = drop_constant_features(x, y)
    if n_components is not None and x.shape[1] and y.shape[1] and n_components > min(x.shape[1], y.shape[1]):
        raise ValueError(f"`n_components` must be at most the varying features of the smaller side, "
                         f"min({x.shape[1]}, {y.shape[1]}); got {n_components}")
    if x.shape[1] and y.shape[1]:
        check_repeated_runs(x, y, "the projection bound", stacklevel=4)  # copies would sit on both sides of a split
    # The bound does not change with a column's scale: extreme columns are brought into range
    # (exactly) so that the canonical fit's standard deviations and squares stay finite.
    return (rescale_extreme_columns(x), rescale_extreme_columns(y), n_components, folds, repeats, copula, method,
            factor, rng)


def projection_bound(x: ArrayLike, y: ArrayLike, *, n_components: int | None = None, folds: int = 2,
                     repeats: int = 1, copula: bool = True, method: str = "nwj", units: str = "bits",
                     random_state: int | np.random.Generator | None = 0) -> ProjectionBound:
    r"""A cross-fitted lower bound on the MI of `x` and `y` from canonical projections.

    The runs are split at random into `folds` folds. For each fold, everything is fitted on
    the other folds and evaluated on the fold itself; the bound is the mean over folds and
    over `repeats` random splits.

    With `method` "nwj" (the default) the fitting runs are halved: the top `n_components`
    regularised canonical directions ``A``, ``B`` (:func:`canonical_directions`) are fitted
    on one half, a critic (the Gaussian log density ratio of the canonical pairs, one
    correlation per pair, tempered; :mod:`mianalysis.estimators.nwj`) on the other, and the
    held-out fold gives the Nguyen-Wainwright-Jordan bound
    :math:`E_p[T] - E_{p_x p_y}[e^{T-1}]` of the projected pair ``(x A, y B)``: a lower
    bound on the MI for **any** distribution. With "gaussian" the held-out fold gives the
    bias-corrected Gaussian MI (:func:`mianalysis.gaussian_mi`) of the projections, fitted
    on all the other folds: tighter on Gaussian data, but a lower bound only where the
    projections are Gaussian (off-Gaussian it can exceed the MI).

    Parameters
    ----------
    x : array-like of shape (n_samples, n_features_x) or (n_samples,)
        Samples of X; row ``i`` is paired with row ``i`` of `y`. A 1-D array is one feature.
    y : array-like of shape (n_samples, n_features_y) or (n_samples,)
        Samples of Y.
    n_components : int, optional
        Canonical pairs kept. None: ``n_eval // (2 * RUNS_PER_DIMENSION)`` (at least 1, at
        most the smaller side's features), so that each held-out estimate has 10 runs or
        more per projected dimension, well inside the plain estimator's calibrated regime
        (2.2 runs per dimension; :mod:`mianalysis.analysis.inference.regime`). An explicit value needs
        evaluation folds of more than ``2 n_components + 1`` runs.
    folds : int, default=2
        Folds of each split (``2 <= folds <= n_samples // 4``). With 2 the halves swap
        roles: each fits the directions the other is evaluated on.
    repeats : int, default=1
        Random splits averaged (more reduce the variance that the split itself adds).
    copula : bool, default=True
        Replace every coordinate by its normal scores before fitting and evaluating: a
        bound that monotone maps of the coordinates leave unchanged, tight for Gaussian
        copulas. With "nwj" the scores are those of the fitting folds, applied to the
        held-out fold as a fixed monotone map (:func:`mianalysis.estimators.nwj.score_map`);
        with "gaussian" each fold's own (:func:`mianalysis.estimators.copula.normal_scores`).
    method : {"nwj", "gaussian"}, default="nwj"
        The held-out statistic (above): "nwj" bounds the MI for any distribution,
        "gaussian" only for Gaussian projections.
    units : {"bits", "nats"}, default="bits"
        Unit of the result.
    random_state : None, int or numpy.random.Generator, default=0
        Seed of the splits. The default makes the bound a fixed function of the data, so a
        permutation test compares it with the same function of shuffled data, and rows of
        :func:`mianalysis.analyze` at every checkpoint use the same splits.

    Returns
    -------
    ProjectionBound
        The bound (`value`), every fold's held-out estimate and the settings used.

    Raises
    ------
    ValueError
        If the folds are too small for the components (see `n_components`),
        `n_components` exceeds the smaller side's varying features, runs are stored twice
        (identical rows of x and y alike, :func:`mianalysis.estimators.repeats.check_repeated_runs`:
        copies of one run in the fitting and the evaluation folds make the bound exceed the
        MI), or
        the held-out projections are linearly dependent (y a linear function of x, such as
        a copy: the MI is infinite).

    Warns
    -----
    ConstantFeatureWarning
        If a feature is constant; it is dropped (it carries no information). If no feature
        of `x` or of `y` varies the bound is 0.0, the exact MI.
    RepeatedRunsWarning
        If runs coincide on a lattice (identical rows, and no feature tells the distinct
        runs apart: discrete or quantised samples).

    Notes
    -----
    *Why a lower bound.* Conditionally on the fitting folds, ``A`` and ``B`` are fixed
    matrices, and the evaluation fold's runs are independent of them. For fixed ``A, B``
    the data-processing inequality gives :math:`I(xA;\, yB) \le I(x;\, y)`, and for jointly
    Gaussian ``(x, y)`` the bias-corrected Gaussian estimate on the evaluation fold is
    unbiased for :math:`I(xA;\, yB)`: the mean of the held-out estimates is therefore at
    most the MI, whatever the quality of the fitted directions (poor directions only make
    the bound loose). More generally it holds whenever each projected side is Gaussian
    (then the Gaussian MI of the projected pair is at most its MI, since a Gaussian joint
    law has the largest entropy for its covariance); with `copula` that is approximately so
    for Gaussian copulas (monotone maps of each coordinate of a Gaussian vector). For other
    laws the value is the Gaussian MI of the projections, which need not be a bound.
    Fitting and evaluating on the same runs would not be a bound: canonical correlations of
    the fitting runs are biased upwards, to 1 when there are fewer runs than dimensions.

    *What it captures.* The top canonical pairs carry the most MI of any ``r`` pairs of
    projections for Gaussian data (``-0.5 sum log(1 - rho_i^2)`` over the ``r`` largest
    canonical correlations). When the dependence is spread evenly over many directions
    the bound captures about ``r / min(p, q)`` of the MI; it is meant for fewer runs than
    twice the joint dimension, where :func:`mianalysis.gaussian_mi` has no plain estimate
    (its Ledoit-Wolf shrinkage estimate is the MI of a shrunk covariance, neither an
    estimate nor a bound).

    *Its null.* For independent ``x`` and ``y``, ``xA`` and ``yB`` are independent for any
    fixed ``A, B``, so the held-out estimates have mean about 0: a permutation test of the
    bound (:func:`mianalysis.mi_permutation_test` with ``estimator="bound"``) is valid.
    Its intervals resample random halves of the runs (:mod:`mianalysis.analysis.inference.intervals`): a
    bootstrap resample would put copies of one run on both sides of a split.

    *Magnitudes.* The bound does not change with the scale of a column, and is computed so
    at any finite magnitude: columns beyond ~1e135 or below ~1e-135 are first divided by a
    power of two near their largest value (exact), so that no standard deviation or square
    overflows or underflows.

    The regularised canonical directions follow Vinod (1976) and the shrinkage intensity
    Ledoit and Wolf (2004); cross-fitting is the sample splitting of Chernozhukov et al.
    (2018).

    References
    ----------
    H. Hotelling, "Relations between two sets of variates", Biometrika 28 (1936) 321-377.

    H. D. Vinod, "Canonical ridge and econometrics of joint production", J. Econometrics 4
    (1976) 147-166.

    O. Ledoit and M. Wolf, "A well-conditioned estimator for large-dimensional covariance
    matrices", J. Multivariate Anal. 88 (2004) 365-411.

    V. Chernozhukov, D. Chetverikov, M. Demirer, E. Duflo, C. Hansen, W. Newey and
    J. Robins, "Double/debiased machine learning for treatment and structural parameters",
    Econom. J. 21 (2018) C1-C68.

    Examples
    --------
    100 runs of 80 + 80 dimensions, each coordinate pair correlated 0.9: the exact MI is
    80 x 1.198 = 95.8 bits, beyond any plain estimate from 100 runs; the bound keeps 2
    canonical pairs (50 runs per evaluation half) and finds part of it:

    >>> import numpy as np
    >>> from mianalysis.estimators.bound import projection_bound
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((100, 80))
    >>> y = 0.9 * x + np.sqrt(1 - 0.81) * rng.standard_normal((100, 80))
    >>> result = projection_bound(x, y)
    >>> result.n_components, result.n_eval, 0 < result.value < 95.8
    (2, 50, True)
    """
    x, y, n_components, folds, repeats, copula, method, factor, rng = _projection_bound_iv(
        x, y, n_components, folds, repeats, copula, method, units, random_state)
    n = x.shape[0]
    n_eval = n // folds
    if x.shape[1] == 0 or y.shape[1] == 0:  # I(c; Y) = 0
        return ProjectionBound(0.0, np.zeros(repeats * folds), 0, n_eval, units, method, 0.0)
    r = n_components if n_components is not None else default_components(n_eval, x.shape[1], y.shape[1])
    values, variances = [], []
    for _ in range(repeats):
        parts = np.array_split(rng.permutation(n), folds)
        for f, held_out in enumerate(parts):
            fit = np.concatenate([p for g, p in enumerate(parts) if g != f])
            if method == "nwj":
                value, se = _nwj_fold_value(x[fit], y[fit], x[held_out], y[held_out], r, copula, rng)
                values.append(value)
                variances.append(se**2)
            else:
                values.append(_gaussian_fold_value(x[fit], y[fit], x[held_out], y[held_out], r, copula))
    fold_values = np.asarray(values) * factor
    se = float("nan")
    if method == "nwj":  # the folds of a split are disjoint runs; a mean over splits varies no more than one
        se = float(np.sqrt(np.mean(np.reshape(variances, (repeats, folds)).sum(axis=1))) / folds * factor)
    return ProjectionBound(float(fold_values.mean()), fold_values, r, n_eval, units, method, se)


def _nwj_fold_value(xf: np.ndarray, yf: np.ndarray, xe: np.ndarray, ye: np.ndarray, r: int, copula: bool,
                    rng: np.random.Generator) -> tuple[float, float]:
    """The NWJ bound (nats) and its se on the held-out runs (xe, ye), everything fitted on
    (xf, yf): directions on one half of the fitting runs, the critic on the other."""
    if copula:
        to_x, to_y = score_map(xf), score_map(yf)
        xf, xe, yf, ye = to_x(xf), to_x(xe), to_y(yf), to_y(ye)
    order = rng.permutation(xf.shape[0])
    directions, critic_runs = order[: order.size // 2], order[order.size // 2:]
    a, b = canonical_directions(xf[directions], yf[directions], r)
    critic = fit_critic(xf[critic_runs] @ a, yf[critic_runs] @ b, random_state=rng,
                        max_cap=float(np.log(max(xe.shape[0], 2))))
    return nwj_fold(critic, xe @ a, ye @ b, random_state=rng)


def _gaussian_fold_value(xf: np.ndarray, yf: np.ndarray, xe: np.ndarray, ye: np.ndarray, r: int, copula: bool) -> float:
    """The bias-corrected Gaussian MI (nats) of the held-out projections, directions fitted
    on (xf, yf)."""
    if copula:
        xf, yf, xe, ye = normal_scores(xf), normal_scores(yf), normal_scores(xe), normal_scores(ye)
    a, b = canonical_directions(xf, yf, r)
    try:
        return gaussian_mi(xe @ a, ye @ b, units="nats")
    except SingularCovarianceError as exc:
        raise _singular_projections(exc, r, xe.shape[0]) from None


def _singular_projections(exc: SingularCovarianceError, n_components: int, n_eval: int) -> ValueError:
    """The bound's own error for a held-out fold whose projections have a singular covariance
    (the Gaussian estimate's error names the projections' blocks, not the user's data)."""
    pairs = f"{n_components} canonical pair{'s' if n_components > 1 else ''}"
    if exc.block == "joint":
        return ValueError(
            f"the projections of x and y ({pairs}) are linearly dependent (or nearly so) on {n_eval} held-out runs: "
            "y is a linear function of x (a copy of it, say) or nearly, so the MI is infinite or beyond what the "
            "runs resolve, and the bound has no finite value")
    return ValueError(
        f"the projections of {exc.block} ({pairs}) are linearly dependent (or nearly so) on {n_eval} held-out "
        f"runs: the held-out runs do not resolve {pairs}, and the bound has no value")


def projection_mi_bound(x: ArrayLike, y: ArrayLike, *, n_components: int | None = None, folds: int = 2,
                        repeats: int = 1, copula: bool = True, method: str = "nwj", units: str = "bits",
                        random_state: int | np.random.Generator | None = 0) -> float:
    """The cross-fitted projection lower bound on the MI of `x` and `y`: :func:`projection_bound`'s
    `value` (the same arguments; see there for the reasoning).

    This is the function of the registered estimator "bound" (``estimator="bound"`` in
    :func:`mianalysis.mi_permutation_test`, ``analyze --estimators bound``), whose rows are
    lower bounds (the registry entry's ``kind`` is "bound").

    Examples
    --------
    Independent samples: the bound is about 0.

    >>> import numpy as np
    >>> from mianalysis import projection_mi_bound
    >>> rng = np.random.default_rng(1)
    >>> abs(projection_mi_bound(rng.standard_normal((200, 150)), rng.standard_normal((200, 150)))) < 0.2
    True
    """
    return projection_bound(x, y, n_components=n_components, folds=folds, repeats=repeats, copula=copula,
                            method=method, units=units, random_state=random_state).value


def default_components(n_eval: int, n_features_x: int, n_features_y: int) -> int:
    """Canonical pairs :func:`projection_bound` keeps by default for evaluation folds of
    `n_eval` runs: ``n_eval // (2 RUNS_PER_DIMENSION)``, at least 1 and at most the smaller
    side's (varying) features.

    Examples
    --------
    >>> from mianalysis.estimators.bound import default_components
    >>> default_components(75, 200, 200), default_components(200, 200, 200), default_components(2000, 3, 5)
    (3, 10, 3)
    """
    return int(min(n_features_x, n_features_y, max(1, n_eval // (2 * RUNS_PER_DIMENSION))))


def bound_resample_settings(n_runs: int, n_features_x: int, n_features_y: int) -> dict[str, int]:
    """The settings every resample of an interval keeps (the registry's ``resample_settings``):
    the canonical pairs that the bound of all `n_runs` runs keeps (2 folds), so that the
    spread over random halves is that of the same statistic (a half would otherwise keep
    half as many pairs, and its spread would say little about the full bound's).

    Examples
    --------
    >>> from mianalysis.estimators.bound import bound_resample_settings
    >>> bound_resample_settings(400, 200, 200)
    {'n_components': 10}
    """
    return {"n_components": default_components(n_runs // 2, n_features_x, n_features_y)}


def bound_ceiling(n_runs: int, folds: int = 2, units: str = "bits") -> float:
    """The largest value :func:`projection_bound` (method "nwj") can give on `n_runs` runs,
    whatever the MI: its critic's log ratio is capped at the log of the runs in an evaluation
    fold, so the bound is at most ``1 + ln(runs per fold)`` nats (the largest of the `folds`
    folds). A bound at or near its ceiling says only "at least about this much": the MI may be
    far larger; more runs raise the ceiling, slowly.

    Examples
    --------
    >>> from mianalysis.estimators.bound import bound_ceiling
    >>> round(bound_ceiling(400), 2), round(bound_ceiling(400, units="nats"), 3)
    (9.09, 6.298)
    """
    check_units(units)
    n_eval = max(-(-int(n_runs) // int(folds)), 2)
    nats = 1.0 + float(np.log(n_eval))
    return float(nats / np.log(2)) if units == "bits" else nats


def bound_regime(n_runs: int, n_features: int, value: float, shrinkage: bool = False) -> list[str]:
    """Why a bound of :func:`projection_mi_bound` (default settings) lies outside its
    regime: evaluation halves of fewer than ``2 RUNS_PER_DIMENSION`` runs hold fewer than
    10 runs per dimension of even one canonical pair. `n_features`, `value` and
    `shrinkage` do not matter (the registry's regime signature).

    Examples
    --------
    >>> from mianalysis.estimators.bound import bound_regime
    >>> bound_regime(30, 400, 0.5), bound_regime(150, 400, 0.5)
    (['halves of 15 runs < 20 for one canonical pair'], [])
    """
    half = n_runs // 2
    if half < 2 * RUNS_PER_DIMENSION:
        return [f"halves of {half} runs < {2 * RUNS_PER_DIMENSION} for one canonical pair"]
    return []
