"""Headroom: how much better than the plain average can clients' parameters be combined?

Mutual information between clients across runs is neither necessary nor sufficient for
averaging to be a poor way to combine them. What decides it is the clients' *errors*
``e_k = theta_k - theta*``, their parameters minus a reference ``theta*``: how they differ
in size and how they are correlated. The reference decides what the answer is about: the
federation's optimum (the exact minimiser of the pooled objective, where the task or the
user can compute it), the FedSGD reference (the central client, trained on the union of the
clients' batches: not the optimum), or a reference of the user's own (see :func:`headroom`).
A combination
``sum_k W_k theta_k`` whose weights sum to the identity has error ``sum_k W_k e_k``, so its
mean squared error (MSE) is ``E||sum_k W_k e_k||^2 = trace(W M W')`` with ``M = E[e e']``
the second moment of the stacked errors (bias included), and the best linear combination
with weights summing to the identity has MSE ``trace((J' M^-1 J)^-1)``, ``J`` the stacked
identities. This module measures, per checkpoint and combination rule, the MSE over runs and
its ratio to the plain average's; weights that are estimated are fitted on some runs and
scored on the others (cross-fitting), so the ratio is not optimistic; their intervals are
the delete-a-group jackknife's over runs, weights refitted, so that they hold the noise of
the fitted weights too (:func:`headroom_rows`).

The MSE is the total squared error summed over the parameters (not the mean per
coordinate).

**Rule names.** A name means one rule in the whole package. The rules here are not
aggregation rules of :mod:`mianalysis.federated.registry` (``federate --aggregator``), and
none shares a name with one: "mean" and "weighted_mean" are the registry's "fedavg" without
and with client sizes as weights, "curvature" its "fisher_full" given each client's exact
Hessian ``A_k`` (``eps=0``), and "inverse_mse" weighs each coordinate by each client's inverse
mean squared error *to the reference*, fitted on other runs: the registry's
"inverse_variance" formula, but fed an oracle's moments where the registry's rule is fed
each client's own local-iterate variances (a rule a federation can run). Headroom called
"inverse_mse" "inverse_variance" before; that name is still accepted, with a
DeprecationWarning, and labels its rows as asked (so older scripts reproduce their tables),
but it is the registry's rule's name (``tests/test_study_tables.py`` checks these equivalences
on small known cases). The typed table of :func:`headroom`'s rows is :data:`HEADROOM_TABLE`
(:class:`~mianalysis.analysis.study_table.StudyTable`; ``mianalysis headroom --out`` writes it). Everything here is NumPy on arrays, except :func:`headroom`, a thin entry that
reads a :class:`~mianalysis.dumps.ParameterDump` (and, for gaussian-sgd, asks the task for
the reference and the exact answer); :func:`headroom_verdicts` says per checkpoint, in one
line, whether averaging is near-optimal against that reference.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..._internal.io import progress_bar
from ..._internal.validation import check_choice, check_int, check_real
from ...dumps.knowledge import rebuild_task, task_reference
from ...dumps.manifest import CENTRAL, OPTIMUM, REFERENCE_CLIENTS
from ..inference.intervals import check_level, mean_interval, normal_interval, se_from_interval
from ..schema import Column
from ..study_table import IntervalLevel, StudySchema

if TYPE_CHECKING:  # names used only in type hints
    from ...dumps import ParameterDump

__all__ = ["RULES", "FITTED_RULES", "RUNNABLE_RULES", "BEST_RULES", "DEPRECATED_RULES", "NEAR_OPTIMAL",
           "REFERENCE_CLIENTS", "HeadroomRow", "HEADROOM_TABLE", "MAX_BLUE_DIMENSION", "default_rules", "fitting_inflation", "rule_weights", "oracle_weights",
           "best_linear_weights", "combine_errors", "combination_mse", "ratio_interval", "headroom_rows", "headroom",
           "reference_phrase", "headroom_verdicts", "headroom_rule_lines"]

log = logging.getLogger(__name__)

# Combination rules: fixed weights ("mean": 1/K; "weighted_mean": client sizes) and weights
# fitted from the errors of the fitting runs (per coordinate: "inverse_mse", each
# client's inverse mean squared error; "blue_coordinate", the best linear unbiased combination from
# the K x K second moment; "blue": the full best linear combination, (K d) x (K d)).
# "curvature" (gaussian-sgd only) is (sum_j A_j)^-1 A_k: the weights of the reference itself.
RULES = ("mean", "weighted_mean", "inverse_mse", "blue_coordinate", "blue")
FITTED_RULES = ("inverse_mse", "blue_coordinate", "blue")
# Old names of rules -> their names now. "inverse_variance" is the federated registry's rule
# (each client's own local-iterate variances, runnable); headroom's oracle-fitted rule of that
# name is "inverse_mse". An old name is accepted with a DeprecationWarning and labels its rows.
DEPRECATED_RULES = {"inverse_variance": "inverse_mse"}
TASK_RULES = ("curvature",)
# The rules a federation can run without the reference: fixed weights ("mean", "weighted_mean":
# client sizes) and "curvature" (each client's exact loss curvature A_k, which the client knows).
# "inverse_mse", "blue_coordinate" and "blue" are fitted on the errors theta_k - theta*, so
# they need the reference itself: oracle-type rules, not runnable.
RUNNABLE_RULES = ("mean", "weighted_mean", "curvature")
# The "best combination" of the verdicts, in order of preference: "blue" (the best linear
# combination) where its fit-corrected ratio is defined, else "blue_coordinate" (the best
# per-coordinate one).
BEST_RULES = ("blue", "blue_coordinate")
# Averaging is "near-optimal" where the best combination's fit-corrected MSE ratio to averaging's
# is, with the verdicts' family-wise confidence, at least this (averaging within 1/0.95 - 1 = 5.3 %).
NEAR_OPTIMAL = 0.95
# "blue" solves a system of size K d: beyond this, use "blue_coordinate" or fewer parameters.
MAX_BLUE_DIMENSION = 4096
# "blue_coordinate" solves (R + RIDGE I) x = D^-1/2 1 per coordinate, R the clients' correlation
# matrix (unit diagonal): a relative ridge, so that a singular R (clients whose errors are the
# same, or cancel) still gets weights; it moves the weights of a well-conditioned R by ~1e-12.
RIDGE = 1e-12
# "blue" solves its system by a Cholesky factor where the second moment's condition number is
# at most this (estimated), else by least squares (which also gives a singular one weights).
CHOLESKY_MAX_CONDITION = 1e8
# The fitted rules' intervals are delete-a-group jackknife intervals over about this many groups
# of runs (a multiple of the folds; fewer where there are fewer runs), with Student's t quantile.
JACKKNIFE_GROUPS = 20


_MSE = "squared parameter units (summed over the parameters)"
_RATIO = "ratio (to averaging's MSE)"


class HeadroomRow(TypedDict):
    """One row of a headroom table (:func:`headroom`): one combination rule at one checkpoint.
    The fields, in the CSV's order, are the columns of :data:`HEADROOM_TABLE`."""

    iteration: Annotated[int, Column(unit="iterations (rounds)", meaning="Training iteration of the checkpoint.")]
    checkpoint: Annotated[int, Column(meaning="Index of the checkpoint in the dump (0, 1, ...).")]
    reference: Annotated[str, Column(meaning="What the errors are measured from: \"optimum (exact theta*)\", "
                                     "\"central (FedSGD reference, not the optimum)\", \"NAME (user's reference)\", "
                                     "\"array (user's reference)\" or the task's exact theta*.")]
    n_clients: Annotated[int, Column(unit="clients", meaning="The clients combined (references left out).")]
    n_params: Annotated[int, Column(unit="parameters", meaning="The parameters of each client's vector.")]
    rule: Annotated[str, Column(meaning="The combination rule (:data:`RULES`, \"curvature\", a name of "
                                "`fixed_weights`; an old name of :data:`DEPRECATED_RULES` as it was asked).")]
    weights: Annotated[str, Column(meaning="\"fixed\", or \"cross-fitted, F folds\" for a rule fitted on other "
                                   "runs.")]
    mse: Annotated[float, Column(unit=_MSE, meaning="Mean over runs of the combination's squared error to the "
                                 "reference.")]
    mse_low: Annotated[float, Column(unit=_MSE, meaning="Lower end of the MSE's interval (the table's level).")]
    mse_high: Annotated[float, Column(unit=_MSE, meaning="Upper end of the MSE's interval.")]
    ratio: Annotated[float, Column(unit=_RATIO, meaning="The MSE over averaging's (below 1: the rule beats "
                                   "averaging); NaN where averaging's MSE is 0.")]
    ratio_low: Annotated[float, Column(unit=_RATIO, meaning="Lower end of the ratio's interval.")]
    ratio_high: Annotated[float, Column(unit=_RATIO, meaning="Upper end of the ratio's interval.")]
    fit_inflation: Annotated[float, Column(unit="factor", meaning="What fitting the weights costs, in expectation "
                                           "(:func:`fitting_inflation`; the jackknife's estimate for \"inverse_mse\"; "
                                           "1 for fixed weights).", default=np.nan)]
    mse_corrected: Annotated[float, Column(unit=_MSE, meaning="`mse` / `fit_inflation`: the MSE of the rule's oracle "
                                           "weights, estimated.", default=np.nan)]
    mse_corrected_low: Annotated[float, Column(unit=_MSE, meaning="`mse_low` / `fit_inflation`.", default=np.nan)]
    mse_corrected_high: Annotated[float, Column(unit=_MSE, meaning="`mse_high` / `fit_inflation`.", default=np.nan)]
    ratio_corrected: Annotated[float, Column(unit=_RATIO, meaning="`ratio` / `fit_inflation`: the fit-corrected "
                                             "ratio the verdicts judge by.", default=np.nan)]
    ratio_corrected_low: Annotated[float, Column(unit=_RATIO, meaning="`ratio_low` / `fit_inflation`.",
                                                 default=np.nan)]
    ratio_corrected_high: Annotated[float, Column(unit=_RATIO, meaning="`ratio_high` / `fit_inflation`.",
                                                  default=np.nan)]
    mse_exact: Annotated[float, Column(unit=_MSE, meaning="The exact MSE of the rule's weights (of its oracle weights "
                                       "for a fitted rule) where the task knows it; NaN otherwise.", default=np.nan)]
    ratio_exact: Annotated[float, Column(unit=_RATIO, meaning="`mse_exact` over averaging's exact MSE.",
                                         default=np.nan)]
    exact_note: Annotated[str, Column(meaning="Which weights `mse_exact` is of; empty without it.", default="")]
    interval_df: Annotated[float, Column(unit="degrees of freedom", meaning="Of the Student's t quantile of a "
                                         "jackknifed fitted rule's intervals (G - 1); NaN for a normal quantile.",
                                         default=np.nan)]
    n_runs: Annotated[int, Column(unit="runs", meaning="The runs measured.")]
    note: Annotated[str, Column(meaning="What the row rests on: one client, blue's second moment (shrunk or not).")]


#: The headroom table: :class:`HeadroomRow`'s columns, format version 1 (the version of the
#: sidecar ``mianalysis headroom --out`` has written since it wrote one). Its intervals hold
#: at the table's ``ci_level`` for their row alone (the sidecar's ``intervals`` says so);
#: the verdicts (:func:`headroom_verdicts`) widen theirs over the checkpoints.
HEADROOM_TABLE = StudySchema("headroom", HeadroomRow, 1, "One combination rule at one checkpoint: its MSE to the "
                             "reference over runs and its ratio to averaging's, with intervals.",
                             intervals=IntervalLevel(
                                 "ci_level", (("mse_low", "mse_high"), ("ratio_low", "ratio_high"),
                                              ("mse_corrected_low", "mse_corrected_high"),
                                              ("ratio_corrected_low", "ratio_corrected_high")),
                                 "the verdicts (`verdicts`, headroom_verdicts) widen the best combination's "
                                 "fit-corrected ratio interval over the checkpoints by Bonferroni, and the best "
                                 "runnable rule's over the checkpoints and runnable rules, so that each holds "
                                 "together with the others at `level`"))


def default_rules(n_clients: int, n_params: int, *, curvature: bool = False) -> list[str]:
    """The rules measured when none are named: :data:`RULES`, less "blue" where its
    (n_clients n_params) x (n_clients n_params) system exceeds :data:`MAX_BLUE_DIMENSION`,
    and "curvature" last where it can be measured.

    Parameters
    ----------
    n_clients, n_params : int
        The clients combined and their parameters.
    curvature : bool, default=False
        Whether the clients' curvature weights are known (:func:`headroom` on a gaussian-sgd
        dump against its exact theta*, the only place the rule "curvature" runs): then
        "curvature", a rule a federation can run, is measured too.

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import default_rules
    >>> default_rules(3, 2000)
    ['mean', 'weighted_mean', 'inverse_mse', 'blue_coordinate']
    >>> default_rules(3, 20, curvature=True)
    ['mean', 'weighted_mean', 'inverse_mse', 'blue_coordinate', 'blue', 'curvature']
    """
    fits = check_int(n_clients, "n_clients", low=1) * check_int(n_params, "n_params", low=1) <= MAX_BLUE_DIMENSION
    return [r for r in RULES if r != "blue" or fits] + (["curvature"] if curvature else [])


def _rule_name(rule: str, stacklevel: int = 3) -> str:
    """`rule`'s name now: an old name of :data:`DEPRECATED_RULES` gives its new one, with a
    DeprecationWarning naming it; any other name is returned as it is."""
    new = DEPRECATED_RULES.get(rule) if isinstance(rule, str) else None
    if new is None:
        return rule
    warnings.warn(f"headroom's rule {rule!r} is now called {new!r} (weights 1 / each client's mean squared error "
                  f"to the reference, fitted on other runs); {rule!r} names the federated aggregation rule "
                  f"(mianalysis.federated.registry), which weighs by each client's own local-iterate variances: "
                  f"name {new!r}", DeprecationWarning, stacklevel=stacklevel)
    return new


def _resolve_rules(rules: Sequence[str] | None, n_clients: int, n_params: int, *,
                   curvature: bool = False) -> list[str]:
    """`rules` as a list; None: :func:`default_rules`, saying (logger ``mianalysis.analysis.studies.headroom``,
    level INFO) when "blue" is left out."""
    if rules is not None:
        return list(rules)
    chosen = default_rules(n_clients, n_params, curvature=curvature)
    if "blue" not in chosen:
        size = n_clients * n_params
        log.info(f"rule 'blue' left out of the default rules: it needs a ({size} x {size}) error second moment "
                 f"(n_clients x n_params = {n_clients} x {n_params} > {MAX_BLUE_DIMENSION}); 'blue_coordinate' is "
                 "measured (name 'blue' among the rules to be refused instead, or measure a layer)")
    return chosen


# ---------------------------------------------------------------------- weights
def _as_errors(errors: ArrayLike) -> np.ndarray:
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 3 or e.shape[0] < 1 or e.shape[1] < 1 or e.shape[2] < 1:
        raise ValueError(f"`errors` must have shape (n_clients, n_runs, n_params) with every size >= 1; got {e.shape}")
    if not np.all(np.isfinite(e)):
        raise ValueError("`errors` must be finite (a client's parameters or the reference hold NaN or infinity)")
    return e


def _unit_scale(e: np.ndarray) -> np.ndarray:
    """`e` divided by its largest absolute value (unchanged if all 0): every rule's weights
    are the same for errors in any units, and their second moments neither overflow nor
    underflow."""
    scale = float(np.max(np.abs(e)))
    return e / scale if scale > 0 else e


def _sizes_weights(sizes: ArrayLike | None, n_clients: int) -> np.ndarray:
    if sizes is None:
        return np.full(n_clients, 1.0 / n_clients)
    s = np.asarray(sizes, dtype=np.float64)
    if s.shape != (n_clients,) or not np.all(np.isfinite(s)) or np.any(s < 0) or s.sum() <= 0:
        raise ValueError(f"`client_sizes` must be {n_clients} finite numbers >= 0 with a positive sum; got {sizes!r}")
    return s / s.sum()


def _inverse_variance(diag: np.ndarray) -> np.ndarray:
    """Per-coordinate weights (K, d) proportional to 1 / diag (K, d); clients with 0 share the weight."""
    zero = diag <= 0
    anyzero = zero.any(axis=0)
    inv = np.where(anyzero, zero.astype(float), 1.0 / np.where(zero, 1.0, diag))
    return inv / inv.sum(axis=0)


def _blue_coordinate(blocks: ArrayLike) -> np.ndarray:
    """Per-coordinate weights (K, d) ``C^-1 1 / (1' C^-1 1)`` from second moments (d, K, K).

    Solved in the clients' own units: ``C^-1 1 = D^-1/2 R^-1 D^-1/2 1`` with ``D`` the
    diagonal of ``C`` and ``R`` the correlation matrix, ridged by :data:`RIDGE` (so clients
    whose errors differ by many orders of magnitude keep their weights, and a singular ``R``
    still gets weights: identical clients share the weight equally). Clients without error
    in a coordinate (a zero diagonal) share all of its weight, as in "inverse_mse"."""
    c = np.asarray(blocks, dtype=np.float64)
    d, k, _ = c.shape
    diag = np.einsum("ikk->ik", c)  # (d, K)
    zero = diag <= 0
    root = np.sqrt(np.where(zero, 1.0, diag))
    corr = c / (root[:, :, None] * root[:, None, :]) + RIDGE * np.eye(k)
    x = np.linalg.solve(corr, (1.0 / root)[:, :, None])[:, :, 0] / root  # C^-1 1, (d, K)
    w = np.where(zero.any(axis=1, keepdims=True), zero.astype(float), x)
    return (w / w.sum(axis=1, keepdims=True)).T


def best_linear_weights(second_moment: ArrayLike, n_clients: int) -> np.ndarray:
    """The weights ``W_k`` (n_clients, d, d) summing to I that minimise ``trace(W M W')``.

    ``W = (J' M^-1 J)^-1 J' M^-1`` for ``M`` the (K d) x (K d) second moment of the stacked
    errors and ``J`` the K stacked identities; solved from the Lagrange system by least
    squares, so a singular ``M`` (e.g. every client holding the same start before any step)
    still gets weights. ``M`` is first divided by the mean of its diagonal, so the weights
    are the same in any units (the least-squares cutoff is relative to that system).

    Parameters
    ----------
    second_moment : array-like of shape (n_clients * d, n_clients * d)
    n_clients : int

    Returns
    -------
    ndarray of shape (n_clients, d, d)

    Examples
    --------
    Two scalar clients with independent errors of variance 1 and 3: weights 3/4 and 1/4.

    >>> import numpy as np
    >>> from mianalysis.analysis.studies.headroom import best_linear_weights
    >>> best_linear_weights(np.diag([1.0, 3.0]), 2).ravel().round(3).tolist()
    [0.75, 0.25]
    """
    m = np.asarray(second_moment, dtype=np.float64)
    n_clients = check_int(n_clients, "n_clients", low=1)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] % n_clients:
        raise ValueError(f"`second_moment` must be square of a size divisible by `n_clients` ({n_clients}); "
                         f"got shape {m.shape}")
    d = m.shape[0] // n_clients
    if not np.all(np.isfinite(m)):
        raise ValueError("`second_moment` must be finite")
    scale = float(np.mean(np.abs(np.diag(m))))
    m = m / scale if scale > 0 else m  # the constraint's identities and M alike of order 1: no unit sets the cutoff
    fast = _cholesky_weights(m, n_clients, d)
    if fast is not None:
        return fast
    j = np.tile(np.eye(d), (n_clients, 1))
    kkt = np.block([[m, j], [j.T, np.zeros((d, d))]])
    rhs = np.vstack([np.zeros((n_clients * d, d)), np.eye(d)])
    sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0][: n_clients * d]  # column i: row i of every W_k, stacked
    return sol.T.reshape(d, n_clients, d).transpose(1, 0, 2)


def _cholesky_weights(m: np.ndarray, n_clients: int, d: int) -> np.ndarray | None:
    """:func:`best_linear_weights` of a well-conditioned `m` (scaled to a unit mean diagonal)
    as ``W = (J' M^-1 J)^-1 J' M^-1`` by a Cholesky factor, or None where `m` is not
    positive definite or its condition number may exceed about :data:`CHOLESKY_MAX_CONDITION`
    (then the least-squares route, which gives a singular `m` weights). The same weights to
    rounding, some 100 times faster at K d = 3000: what makes the jackknife's refits affordable."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve
    from scipy.linalg.lapack import dtrcon

    try:
        factor = cho_factor(m, lower=True, check_finite=False)
    except LinAlgError:
        return None
    rcond = float(dtrcon(factor[0], norm="1", uplo="L")[0])  # of the factor: cond(M) ~ cond(L)^2
    if not rcond**2 * CHOLESKY_MAX_CONDITION >= 1:
        return None
    inv_j = cho_solve(factor, np.tile(np.eye(d), (n_clients, 1)), check_finite=False)  # M^-1 J, (K d, d)
    outer = inv_j.reshape(n_clients, d, d).sum(axis=0)  # J' M^-1 J
    flat = np.linalg.solve(0.5 * (outer + outer.T), inv_j.T)  # (d, K d): W_k side by side
    return flat.reshape(d, n_clients, d).transpose(1, 0, 2)


def _check_blue_size(n_clients: int, d: int) -> None:
    if n_clients * d > MAX_BLUE_DIMENSION:
        raise ValueError(f"rule 'blue' needs a ({n_clients * d} x {n_clients * d}) error second moment "
                         f"(n_clients x n_params = {n_clients} x {d} > {MAX_BLUE_DIMENSION}): use 'blue_coordinate' "
                         "or fewer parameters (a layer)")


def _ledoit_wolf(z: np.ndarray) -> np.ndarray:
    from ...estimators.gaussian import ledoit_wolf_covariance

    return ledoit_wolf_covariance(z)


def rule_weights(rule: str, errors: ArrayLike, *, client_sizes: ArrayLike | None = None) -> np.ndarray:
    """The weights of combination rule `rule`, fitted on `errors` where the rule fits any.

    Parameters
    ----------
    rule : {"mean", "weighted_mean", "inverse_mse", "blue_coordinate", "blue"}
        See :data:`RULES` (an old name of :data:`DEPRECATED_RULES` warns and means its new
        one). "inverse_mse" weighs each coordinate by each client's
        inverse mean squared error; "blue_coordinate" uses, per coordinate, the K x K
        second moment ``C`` of the errors: ``w = C^-1 1 / (1' C^-1 1)``; "blue" the
        (K d) x (K d) second moment (:func:`best_linear_weights`), Ledoit-Wolf shrunk
        when there are no more runs than twice K d (shrinkage towards a multiple of I
        would hide the near-singular directions that make "blue" good when there are).
        Second moments are about zero, so a client's bias counts as error.
    errors : array-like of shape (n_clients, n_runs, n_params)
        The clients' errors ``theta_k - theta*`` of the fitting runs.
    client_sizes : array-like of shape (n_clients,), optional
        Examples per client, for "weighted_mean" (equal when not given).

    Returns
    -------
    ndarray
        (n_clients, n_params) per-coordinate weights, or (n_clients, n_params, n_params)
        for "blue"; the weights sum to 1 (to I) over clients. They are the same for the
        errors in any units, and a client without error in a coordinate takes all of its
        weight ("blue_coordinate", "inverse_mse"; "blue" in the directions it has none).
    """
    rule = check_choice(_rule_name(rule), "rule", RULES)
    e = _unit_scale(_as_errors(errors))
    k, n, d = e.shape
    if rule == "mean":
        return np.full((k, d), 1.0 / k)
    if rule == "weighted_mean":
        return np.repeat(_sizes_weights(client_sizes, k)[:, None], d, axis=1)
    if k == 1:  # nothing to combine: nothing to fit
        return np.eye(d)[None] if rule == "blue" else np.ones((1, d))
    if rule == "inverse_mse":
        return _inverse_variance(np.mean(e**2, axis=1))
    if rule == "blue_coordinate":
        return _blue_coordinate(np.einsum("kri,lri->ikl", e, e) / n)
    _check_blue_size(k, d)
    stacked = e.transpose(1, 0, 2).reshape(n, k * d)
    moment = stacked.T @ stacked / n if not _shrunk(n, k * d) else _ledoit_wolf(stacked)
    return best_linear_weights(moment, k)


def _shrunk(n_runs: int, dimension: int) -> bool:
    """Whether "blue" shrinks its second moment: where the Gaussian MI estimator would
    (:func:`mianalysis.analysis.gaussian_settings`: no more runs than twice the dimension)."""
    from .. import gaussian_settings

    return bool(gaussian_settings(n_runs, dimension)[0])


def oracle_weights(rule: str, mean: ArrayLike, cov: ArrayLike, *, client_sizes: ArrayLike | None = None
                   ) -> np.ndarray:
    """The weights of `rule` computed from the exact error moments (the rule's oracle).

    Parameters
    ----------
    rule : str
        One of :data:`RULES`.
    mean : array-like of shape (n_clients, d)
        Mean of each client's error.
    cov : array-like of shape (n_clients * d, n_clients * d)
        Covariance of the stacked errors (client-major).
    client_sizes : array-like, optional
        For "weighted_mean".

    Returns
    -------
    ndarray
        As :func:`rule_weights`.
    """
    rule = check_choice(_rule_name(rule), "rule", RULES)
    mu = np.asarray(mean, dtype=np.float64)
    k, d = mu.shape
    m = np.asarray(cov, dtype=np.float64) + np.outer(mu.ravel(), mu.ravel())
    if rule == "mean":
        return np.full((k, d), 1.0 / k)
    if rule == "weighted_mean":
        return np.repeat(_sizes_weights(client_sizes, k)[:, None], d, axis=1)
    blocks = m.reshape(k, d, k, d)
    idx = np.arange(d)
    per_coordinate = blocks[:, idx, :, idx]  # (d, K, K)
    if rule == "inverse_mse":
        return _inverse_variance(np.einsum("ikk->ki", per_coordinate))
    if rule == "blue_coordinate":
        return _blue_coordinate(per_coordinate)
    return best_linear_weights(m, k)


def _full(weights: ArrayLike) -> np.ndarray:
    """Weights as (n_clients, d, d) matrices (per-coordinate weights on the diagonal)."""
    w = np.asarray(weights, dtype=np.float64)
    return w if w.ndim == 3 else np.stack([np.diag(row) for row in w])


def combine_errors(weights: ArrayLike, errors: ArrayLike) -> np.ndarray:
    """Per-run squared error ``||sum_k W_k e_k||^2`` (n_runs,) of a combination.

    Parameters
    ----------
    weights : array-like of shape (n_clients, d) or (n_clients, d, d)
        Per-coordinate or full weights summing to 1 (to I) over clients.
    errors : array-like of shape (n_clients, n_runs, d)

    Returns
    -------
    ndarray of shape (n_runs,)
    """
    w = np.asarray(weights, dtype=np.float64)
    e = _as_errors(errors)
    if w.ndim == 2:
        combined = np.einsum("kri,ki->ri", e, w)
    else:  # sum_k e_k W_k' as matrix products (an einsum over three indices is slow at large d)
        combined = sum(e[k] @ w[k].T for k in range(e.shape[0]))
    return np.sum(combined**2, axis=1)


def combination_mse(weights: ArrayLike, mean: ArrayLike, cov: ArrayLike) -> float:
    """Exact ``E||sum_k W_k e_k||^2 = trace(W (C + b b') W')`` of weights summing to I.

    Parameters
    ----------
    weights : array-like of shape (n_clients, d) or (n_clients, d, d)
    mean : array-like of shape (n_clients, d)
        The errors' mean b.
    cov : array-like of shape (n_clients * d, n_clients * d)
        The errors' covariance C.

    Returns
    -------
    float
        The total squared error, summed over the d coordinates.
    """
    mu = np.asarray(mean, dtype=np.float64)
    w = _full(weights)
    flat = np.concatenate(list(w), axis=1)  # (d, K d)
    m = np.asarray(cov, dtype=np.float64) + np.outer(mu.ravel(), mu.ravel())
    return float(np.trace(flat @ m @ flat.T))


# ---------------------------------------------------------------------- intervals
def ratio_interval(x: ArrayLike, y: ArrayLike, level: float = 0.95) -> tuple[float, float, float]:
    """``mean(x) / mean(y)`` of paired per-run values and its delta-method normal interval.

    The standard error is ``sd(x - R y) / (sqrt(n) mean(y))`` (Fieller's ratio to first
    order). A ratio whose per-run differences are all 0 (identical combinations) has the
    interval [R, R].

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import ratio_interval
    >>> [round(v, 3) for v in ratio_interval([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])]
    [0.5, 0.5, 0.5]
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    level = check_level(level, "level")
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"`x` and `y` must be paired 1-D arrays; got shapes {x.shape} and {y.shape}")
    ybar = float(y.mean())
    if x.size < 2 or ybar <= 0:
        return (float(x.mean()) / ybar if ybar > 0 else np.nan), np.nan, np.nan
    ratio = float(x.mean()) / ybar
    se = float(np.std(x - ratio * y, ddof=1)) / (np.sqrt(x.size) * ybar)
    low, high = normal_interval(ratio, se, level)
    return ratio, low, high


def fitting_inflation(rule: str, n_clients: int, n_params: int, n_fit: int, *,
                      regressors: float | None = None) -> float:
    """How much a rule's cross-fitted MSE exceeds the MSE of its oracle weights, in expectation.

    With weights summing to the identity, the combination error is
    ``e_1 - sum_{k>1} W_k (e_1 - e_k)``: fitting the best weights on `n_fit` runs is a
    least-squares regression of ``e_1`` on ``q`` differences, and for jointly Gaussian errors
    about zero its error on new runs is ``1 + q / (n_fit - q - 1)`` times the oracle's
    (random-design regression; Stein 1960, Breiman and Freedman 1983). ``q = (K - 1) d`` for
    "blue" (every coordinate on every coordinate), ``K - 1`` for "blue_coordinate" (one
    coordinate at a time). Other rules: NaN (inverse variance fits no regression; no simple
    formula here: :func:`headroom_rows` estimates its cost by the jackknife), and NaN for
    "blue" where its second moment is shrunk or ``n_fit <= q + 1``.
    `regressors` replaces ``q`` by the rank of the differences where they are degenerate
    (clients that start from one point have identical errors there: nothing is fitted, and
    the inflation is 1); :func:`headroom_rows` passes it.

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import fitting_inflation
    >>> round(fitting_inflation("blue", 3, 20, 2000), 4)   # q = 40 regressors
    1.0204
    >>> round(fitting_inflation("blue_coordinate", 3, 20, 2000), 4)
    1.001
    """
    rule = check_choice(_rule_name(rule), "rule", RULES)
    if rule == "blue":
        if _shrunk(n_fit, n_clients * n_params):
            return float("nan")
        q = (n_clients - 1) * n_params
    elif rule == "blue_coordinate":
        q = n_clients - 1
    elif rule in FITTED_RULES:
        return float("nan")
    else:
        return 1.0
    used = float(q if regressors is None else regressors)
    return 1.0 + used / (n_fit - used - 1) if n_fit > used + 1 else float("nan")


def _difference_rank(rule: str, e: np.ndarray) -> float:
    """The number of regressors a fit of `rule` really has: the rank of the clients' error
    differences ``e_1 - e_k`` (all coordinates together for "blue", the mean over coordinates
    of the per-coordinate rank for "blue_coordinate"); 0 for one client."""
    if e.shape[0] < 2:
        return 0.0
    diff = e[:1] - e[1:]  # (K - 1, n, d)
    if rule == "blue":
        flat = diff.transpose(1, 0, 2).reshape(diff.shape[1], -1)
        gram = (flat.T @ flat)[None]
    else:
        gram = np.einsum("kri,jri->ikj", diff, diff)  # (d, K - 1, K - 1)
    ev = np.linalg.eigvalsh(gram)
    top = ev.max(axis=1, keepdims=True)
    ranks = np.where(top > 0, (ev > 1e-10 * top).sum(axis=1, keepdims=True), 0)
    return float(ranks.mean())


# ---------------------------------------------------------------------- one checkpoint
def _headroom_rows_iv(shape: tuple[int, ...], rules: Sequence[str] | None, folds: int, level: float,
                      fixed_weights: Mapping[str, object]) -> tuple[list[str], int, float]:
    """:func:`headroom_rows`' checks of all but the errors' values, for errors of `shape`
    (n_clients, n_runs, n_params): (rules, folds, level), the rules resolved."""
    k, n, d = shape
    folds = check_int(folds, "folds", low=2)
    level = check_level(level, "level")
    rules = _resolve_rules(rules, k, d)
    for rule in rules:
        if rule not in fixed_weights:
            check_choice(_rule_name(rule, stacklevel=4), "rule", [*RULES, *fixed_weights])
    if "blue" in rules and "blue" not in fixed_weights and k > 1:
        _check_blue_size(k, d)
    if n < 2 * folds:
        raise ValueError(f"headroom needs at least {2 * folds} runs for {folds} folds; got {n}")
    return rules, folds, level


def _jackknife_groups(n: int, folds: int) -> tuple[np.ndarray, int]:
    """The jackknife's group of each run (n,) and the number of groups G: run r is in group
    ``r % G``, G a multiple of `folds` (so a group lies within one fold, ``r % folds``), about
    :data:`JACKKNIFE_GROUPS` and at most `n` (a group of one run each: the delete-1 jackknife)."""
    per_fold = max(1, min(int(round(JACKKNIFE_GROUPS / folds)), n // folds))
    n_groups = folds * per_fold
    return np.arange(n) % n_groups, n_groups


def _moment_sum(rule: str, e: np.ndarray) -> np.ndarray:
    """The sum over the runs of `e` of what `rule` fits its weights from: each client's squared
    errors (K, d) ("inverse_mse"), the per-coordinate K x K products (d, K, K)
    ("blue_coordinate"), the (K d) x (K d) products of the stacked errors ("blue")."""
    if rule == "inverse_mse":
        return np.einsum("kri,kri->ki", e, e)
    if rule == "blue_coordinate":
        return np.einsum("kri,lri->ikl", e, e)
    stacked = e.transpose(1, 0, 2).reshape(e.shape[1], -1)
    return stacked.T @ stacked


def _weights_from_moment(rule: str, moment: np.ndarray, n_clients: int) -> np.ndarray:
    """`rule`'s weights from the mean of :func:`_moment_sum` (as :func:`rule_weights` fits them)."""
    if rule == "inverse_mse":
        return _inverse_variance(moment)
    if rule == "blue_coordinate":
        return _blue_coordinate(moment)
    return best_linear_weights(moment, n_clients)


def _cross_fitted(rule: str, e: np.ndarray, folds: int, client_sizes: ArrayLike | None,
                  groups: tuple[np.ndarray, int] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-run squared errors (n,) with the weights fitted on the other folds (run r in fold
    r % folds), and, given `groups` (:func:`_jackknife_groups`), the jackknife's (G, n): row g
    scored the same way with every fold's weights fitted without the runs of group g (its
    entries of group g itself are not used); None without `groups`.

    The rows refit from moment sums less the group's (a group's own sum costs 1/G of a fold's),
    "blue" with a shrunk second moment from the runs themselves (Ledoit-Wolf needs them),
    shrunk where the fold's own fit is."""
    n = e.shape[1]
    out = np.empty(n)
    fold = np.arange(n) % folds
    for f in range(folds):
        weights = rule_weights(rule, e[:, fold != f], client_sizes=client_sizes)
        out[fold == f] = combine_errors(weights, e[:, fold == f])
    if groups is None:
        return out, None
    group, n_groups = groups
    k, _, d = e.shape
    unit = _unit_scale(e)
    replicates = np.tile(out, (n_groups, 1))
    shrunk = [rule == "blue" and _shrunk(int(np.sum(fold != f)), k * d) for f in range(folds)]  # as each fold's fit
    sums = None if all(shrunk) else [_moment_sum(rule, unit[:, fold == f]) for f in range(folds)]
    total = None if sums is None else sum(sums)
    for g in range(n_groups):
        left_out = group == g
        group_sum = None if sums is None else _moment_sum(rule, unit[:, left_out])
        for f in range(folds):
            if f == g % folds:  # the group's own fold: weights fitted without it already
                continue
            fit = (fold != f) & ~left_out
            if shrunk[f]:
                stacked = unit[:, fit].transpose(1, 0, 2).reshape(int(fit.sum()), k * d)
                weights = best_linear_weights(_ledoit_wolf(stacked), k)
            else:
                assert sums is not None and group_sum is not None  # sums are made where a fold is not shrunk
                weights = _weights_from_moment(rule, (total - sums[f] - group_sum) / fit.sum(), k)
            replicates[g, fold == f] = combine_errors(weights, e[:, fold == f])
    return out, replicates


def _jackknife_se(replicates: np.ndarray) -> float:
    """The delete-a-group jackknife's standard error from the G leave-one-group-out values."""
    g = replicates.size
    return float(np.sqrt((g - 1) / g * np.sum((replicates - replicates.mean()) ** 2)))


def _fit_bias_shares(n: int, folds: int, groups: tuple[np.ndarray, int]) -> tuple[float, np.ndarray]:
    """How the cost of fitting shows in the full cross-fit and in each replicate, under the
    model that a run's expected excess over the oracle is beta / n_fit (n_fit: the runs its
    weights were fitted on): the mean of 1 / n_fit over the scored runs, (full, (G,) replicates)."""
    group, n_groups = groups
    fold = np.arange(n) % folds
    size = np.bincount(fold, minlength=folds).astype(float)
    n_fit = n - size  # fold f's weights are fitted on the other folds
    full = float(np.sum(size / n_fit) / n)
    left = np.bincount(group, minlength=n_groups).astype(float)  # runs per group; group g in fold g % folds
    shares = np.empty(n_groups)
    for g in range(n_groups):
        own = np.arange(folds) == g % folds
        scored = size - np.where(own, left[g], 0.0)
        fitted_on = n_fit - np.where(own, 0.0, left[g])
        shares[g] = np.sum(scored / fitted_on) / (n - left[g])
    return full, shares


def _jackknifed(per_run: np.ndarray, base: np.ndarray, replicates: np.ndarray, groups: tuple[np.ndarray, int],
                folds: int, level: float
                ) -> tuple[tuple[float, float, float], tuple[float, float, float], float, int]:
    """The jackknife's intervals of a fitted rule: (mse, low, high), (ratio, low, high), the
    ratio less the jackknife's estimate of what fitting adds to it (NaN without a ratio), and
    the degrees of freedom G - 1 of the t quantile.

    The bias estimate: the replicates' mean ratio exceeds the full ratio by beta times the
    difference of :func:`_fit_bias_shares` (each replicate fits some folds' weights on fewer
    runs), which gives beta, and the full ratio's bias is beta times its own share (the
    standard jackknife's factor G - 1 assumes a bias in 1 / n, which fitting on other folds
    does not have: with 2 folds and 20 groups it would take off 11 % too much)."""
    group, n_groups = groups
    keep = group[None, :] != np.arange(n_groups)[:, None]  # (G, n): the runs of each replicate
    kept = np.where(keep, replicates, 0.0).sum(axis=1)
    df = n_groups - 1
    mse = float(per_run.mean())
    mse_interval = (mse, *normal_interval(mse, _jackknife_se(kept / keep.sum(axis=1)), level, df))
    base_kept = np.where(keep, base[None, :], 0.0).sum(axis=1)
    if not (base.mean() > 0 and np.all(base_kept > 0)):
        return mse_interval, (mse / base.mean() if base.mean() > 0 else np.nan, np.nan, np.nan), np.nan, df
    ratio = mse / float(base.mean())
    ratios = kept / base_kept
    full, shares = _fit_bias_shares(per_run.size, folds, groups)
    beta = (float(ratios.mean()) - ratio) / (float(shares.mean()) - full)
    return mse_interval, (ratio, *normal_interval(ratio, _jackknife_se(ratios), level, df)), ratio - beta * full, df


def headroom_rows(errors: ArrayLike, *, rules: Sequence[str] | None = None, folds: int = 2, level: float = 0.95,
                  client_sizes: ArrayLike | None = None, exact: tuple[ArrayLike, ArrayLike] | None = None,
                  fixed_weights: Mapping[str, ArrayLike] | None = None,
                  on_rule: Callable[[int], object] | None = None) -> list[dict[str, Any]]:
    """MSE of each combination rule at one checkpoint, its interval and its ratio to the mean's.

    Parameters
    ----------
    errors : array-like of shape (n_clients, n_runs, n_params)
        ``theta_k - theta*`` per client and run.
    rules : sequence of str, optional
        Rules of :data:`RULES`, and names of `fixed_weights`. By default
        :func:`default_rules`: every rule of :data:`RULES`, less "blue" (with a note on the
        logger ``mianalysis.analysis.studies.headroom``) where its system would exceed
        :data:`MAX_BLUE_DIMENSION`; "blue" named here is refused there instead.
    folds : int, default=2
        Cross-fitting folds for the fitted rules: run r is scored with weights fitted on the
        runs of the other folds (run r in fold ``r % folds``); every run is scored once.
    level : float, default=0.95
        Level of the intervals. Rules with fixed weights: the normal interval of the MSE over
        runs, and the delta-method interval of the ratio, paired by run (:func:`ratio_interval`).
        Fitted rules: the delete-a-group jackknife of the whole cross-fit (Notes), with
        Student's t quantile. Each interval holds at `level` for its row alone, not over
        the table's rows (:func:`headroom_verdicts` widens the ones it judges by).
    client_sizes : array-like, optional
        For "weighted_mean".
    exact : (mean, cov), optional
        Exact moments of the errors (see :func:`combination_mse`): each row gets
        ``mse_exact``, the exact MSE of the rule's weights, or, for a fitted rule, of its
        oracle weights (:func:`oracle_weights`).
    fixed_weights : dict, optional
        Further rules with known weights: name -> (n_clients, d) or (n_clients, d, d).
    on_rule : callable, optional
        Called with 1 after each rule's row (e.g. a progress bar's ``update``).

    Returns
    -------
    list of dict
        One row per rule: ``rule``, ``weights`` ("fixed", or "cross-fitted, F folds" for
        the rules that fit them), ``mse``, ``mse_low``, ``mse_high``, ``ratio`` (to the
        mean's MSE), ``ratio_low``, ``ratio_high``, ``fit_inflation`` (what fitting the
        weights costs, in expectation: :func:`fitting_inflation` for "blue" and
        "blue_coordinate", the jackknife's estimate ``R / R_jk`` for "inverse_mse", 1
        for fixed weights), ``mse_corrected``, ``mse_corrected_low``, ``mse_corrected_high``,
        ``ratio_corrected``, ``ratio_corrected_low``, ``ratio_corrected_high`` (the estimates
        and their intervals divided by it: estimates of the MSE of the rule's oracle
        weights), ``mse_exact``, ``ratio_exact``, ``exact_note``, ``interval_df`` (the
        degrees of freedom of the t quantile of a fitted rule's intervals, G - 1; NaN where
        the quantile is normal), ``n_runs``, ``note``. With one client there is nothing to
        combine: every rule's weight is 1, its ratio 1, and its note says so.

    Notes
    -----
    A fitted rule's MSE over the scored runs varies with the runs it is scored on *and* with
    the runs its weights were fitted on; with weights fitted on the other fold, the second
    is invisible to an interval over the scored runs alone (which treats the weights as
    fixed), and it is not small: where the clients are alike, the ratio's paired per-run
    noise and the noise of the fit are of one order (``sqrt(q) / n``). The intervals are
    therefore the delete-a-group jackknife's (Quenouille 1956; Efron and Stein 1981): the
    runs fall into G groups (run r in group ``r % G``, G = :data:`JACKKNIFE_GROUPS` rounded
    to a multiple of `folds`, so each group lies in one fold), the whole cross-fit is
    repeated G times without one group (its fold scored without it, the other folds' weights
    refitted without it), and the se is ``sqrt((G - 1) / G sum_g (R_(g) - mean R_(.))^2)``,
    with Student's t quantile on G - 1 degrees of freedom. Where the clients are alike
    (the fit's noise quadratic, not linear, in the fitting runs) it errs on the wide side.
    The corrected intervals are the intervals divided by ``fit_inflation``; for
    "inverse_mse", whose cost of fitting has no formula, the inflation is ``R / R_jk``,
    ``R_jk`` the ratio less the jackknife's estimate of its bias: a bias ``beta / n_fit`` per
    scored run (the order of the cost of fitting), beta from how far the replicates' mean
    ratio (fitted on fewer runs) lies above the full one.
    ``experiments/headroom_coverage.py`` measures these intervals' coverage of the exact
    (oracle) ratios on gaussian-sgd.
    """
    e = _as_errors(errors)
    fixed_weights = dict(fixed_weights or {})
    rules, folds, level = _headroom_rows_iv(e.shape, rules, folds, level, fixed_weights)
    k, n, d = e.shape
    base = combine_errors(rule_weights("mean", e), e)
    moments = None if exact is None else (np.asarray(exact[0], float), np.asarray(exact[1], float))
    base_exact = None if moments is None else combination_mse(np.full((k, d), 1.0 / k), *moments)
    groups = _jackknife_groups(n, folds)
    rows = []
    for label in rules:
        rule = label if label in fixed_weights else DEPRECATED_RULES.get(label, label)  # an old name: its rule now
        fitted = rule in FITTED_RULES
        jackknifed = fitted and rule not in fixed_weights and k > 1
        replicates = None
        if rule in fixed_weights:
            per_run = combine_errors(fixed_weights[rule], e)
        elif fitted:
            per_run, replicates = _cross_fitted(rule, e, folds, client_sizes, groups if jackknifed else None)
        else:
            per_run = combine_errors(rule_weights(rule, e, client_sizes=client_sizes), e)
        df = np.nan
        if replicates is None:  # runs independent given the weights: normal and delta-method intervals
            mse, low, high = mean_interval(per_run, level)
            ratio, r_low, r_high = ratio_interval(per_run, base, level)
        else:  # the weights' own noise too: the delete-a-group jackknife of the whole cross-fit
            (mse, low, high), (ratio, r_low, r_high), bias_corrected, df = _jackknifed(per_run, base, replicates,
                                                                                     groups, folds, level)
        n_fit = n - -(-n // folds)  # the fewest runs any fold's weights are fitted on
        note = ""
        if k == 1:
            note = "one client: nothing to combine (every rule's weight is 1)"
        elif rule == "blue":
            note = (f"ledoit-wolf shrinkage: {n_fit} fitting runs <= 2 x {k * d}" if _shrunk(n_fit, k * d)
                    else f"sample second moment ({k * d} x {k * d}) of >= {n_fit} fitting runs")
        if not jackknifed:
            inflation = 1.0
        elif rule == "inverse_mse":  # no formula: the jackknife's estimate of the ratio's bias
            inflation = ratio / bias_corrected if bias_corrected > 0 else np.nan
        else:
            inflation = fitting_inflation(rule, k, d, n_fit, regressors=_difference_rank(rule, e))
        row = {"rule": label, "weights": f"cross-fitted, {folds} folds" if fitted else "fixed",
               "mse": mse, "mse_low": low, "mse_high": high, "ratio": ratio, "ratio_low": r_low,
               "ratio_high": r_high, "fit_inflation": inflation, "mse_corrected": mse / inflation,
               "mse_corrected_low": low / inflation, "mse_corrected_high": high / inflation,
               "ratio_corrected": ratio / inflation, "ratio_corrected_low": r_low / inflation,
               "ratio_corrected_high": r_high / inflation, "mse_exact": np.nan, "ratio_exact": np.nan,
               "exact_note": "", "interval_df": df, "n_runs": n, "note": note}
        if moments is not None:
            assert base_exact is not None  # made with the moments
            weights = (fixed_weights[rule] if rule in fixed_weights
                       else oracle_weights(rule, *moments, client_sizes=client_sizes))
            row["mse_exact"] = combination_mse(weights, *moments)
            row["ratio_exact"] = row["mse_exact"] / base_exact if base_exact > 0 else np.nan
            row["exact_note"] = ("oracle weights of the rule (from the exact moments)" if fitted
                                 else "the rule's weights")
        rows.append(row)
        if on_rule is not None:
            on_rule(1)
    return rows


# ---------------------------------------------------------------------- from a dump
def _task_of(dump: ParameterDump) -> Any:
    """The task a dump was sampled from, rebuilt from its settings where its task registered
    how (:func:`mianalysis.dumps.knowledge.rebuild_task`; analysis/ does not import
    tasks/), or None."""
    return rebuild_task(dump.meta) if isinstance(dump.meta, dict) else None


def _sampling_of(dump: ParameterDump) -> tuple[int, str, tuple[str, ...]]:
    meta = dump.meta
    return int(meta.get("seed", 0)), str(meta.get("init", "per-run")), tuple(meta.get("shared", ()))


def _own_weights(fixed_weights: Mapping[str, ArrayLike] | None, n_clients: int, n_params: int) -> dict[str, np.ndarray]:
    """:func:`headroom`'s `fixed_weights` as float arrays, each checked against the clients and parameters."""
    own = {}
    for name, weights in dict(fixed_weights or {}).items():
        if name in RULES or name in DEPRECATED_RULES:
            raise ValueError(f"`fixed_weights` names rule {name!r}, a built-in rule of headroom ({', '.join(RULES)}): "
                             "give your weights another name")
        w = np.asarray(weights, dtype=np.float64)
        if w.shape not in ((n_clients, n_params), (n_clients, n_params, n_params)) or not np.all(np.isfinite(w)):
            raise ValueError(f"`fixed_weights`[{name!r}] must be finite, of shape ({n_clients}, {n_params}) or "
                             f"({n_clients}, {n_params}, {n_params}) (the clients combined, the parameters); got shape "
                             f"{w.shape}")
        own[str(name)] = w
    return own


# What each reference is, as the rows' "reference" column says it.
TASK_REFERENCE = "task (exact theta* = (sum A_k)^-1 sum A_k mu_k)"
_DESCRIBED = {OPTIMUM: f"{OPTIMUM} (exact theta*)", CENTRAL: f"{CENTRAL} (FedSGD reference, not the optimum)"}
_USERS = " (user's reference)"
_MISSING = {
    OPTIMUM: "record each run's theta* as a client 'optimum' (a DumpWriter client recorded at every checkpoint, or "
             "ParameterSampler(reference='optimum') where the task computes it), or give 'central', 'task' or an array",
    CENTRAL: "sample with --reference central (ParameterSampler(reference='central')), or give 'optimum', 'task' or "
             "an array",
}


def _describe(client: str) -> str:
    """The rows' ``reference`` for a reference held by the dump's client `client`."""
    return _DESCRIBED.get(client, f"{client}{_USERS}")


def headroom(dump: ParameterDump | str | os.PathLike, *, reference: str | ArrayLike = "auto",
             rules: Sequence[str] | None = None, iterations: Sequence[int] | None = None, folds: int = 2,
             level: float = 0.95, client_sizes: ArrayLike | None = None,
             fixed_weights: Mapping[str, ArrayLike] | None = None,
             progress: bool = False) -> list[dict[str, Any]]:
    """Per checkpoint and combination rule: MSE to the reference over runs, and its ratio to the average's.

    Parameters
    ----------
    dump : ParameterDump or path
    reference : str or array-like, default="auto"
        What the clients' errors are measured from, in each run:

        - "optimum": the dump's client ``"optimum"`` (:data:`mianalysis.dumps.OPTIMUM`),
          each run's exact minimiser theta* of the pooled objective, recorded beside the
          clients (by the sampler where the task computes it, or by your own loop with
          :class:`~mianalysis.DumpWriter`);
        - "central": the dump's client ``"central"`` (:data:`mianalysis.dumps.CENTRAL`), the
          run's start trained with the clients' steps on the union of their batches: the
          **FedSGD reference**, not the optimum (its error to theta* is second order in the
          learning rate, and it shares the clients' noise);
        - the name of any other client of the dump: a reference of your own;
        - "task": the task's ``central_parameters``, recomputed from the dump's seed
          (gaussian-sgd: its exact theta*);
        - an array (n_runs, n_params) for every checkpoint, or (n_checkpoints, n_runs,
          n_params);
        - "auto": "optimum" if the dump has that client, else "central" if it has that one,
          else "task".

        The clients "optimum" and "central" hold references, so they are never combined,
        whichever reference is chosen; nor is a client named as the reference.
    rules : sequence of str, optional
        Combination rules (:data:`RULES`), and "curvature" for gaussian-sgd (the weights
        ``(sum_j A_j)^-1 A_k`` of the reference). By default :func:`default_rules`: every
        rule of :data:`RULES`, less "blue" where n_clients x n_params exceeds
        :data:`MAX_BLUE_DIMENSION` (a note on the logger ``mianalysis.analysis.studies.headroom`` says so);
        "blue" named explicitly is refused there instead. "curvature" is among them where it
        can run: a gaussian-sgd dump measured against its exact theta* ("task", or the
        sampler's client "optimum").
    iterations : sequence of int, optional
        Iterations (checkpoints) to measure; all by default.
    folds, level, client_sizes
        See :func:`headroom_rows`. Client sizes default to equal (the built-in tasks give
        every client the same number of examples).
    fixed_weights : dict, optional
        Rules of your own with known weights, the same at every checkpoint: name ->
        (n_clients, n_params) per-coordinate or (n_clients, n_params, n_params) weights of the
        dump's clients in their order (less the references), summing to 1 (to I). Measured
        like "curvature" (fixed weights, nothing cross-fitted), each after `rules` unless
        named there. "curvature" given here replaces the task's; the names of :data:`RULES`
        are refused.
    progress : bool, default=False
        A progress bar on stderr over (checkpoint, rule) pairs: the fitted rules ("blue"
        above all) take long on large dumps.

    Returns
    -------
    list of dict
        The rows of :func:`headroom_rows` with ``iteration``, ``checkpoint`` (its index),
        ``reference``, ``n_clients`` and ``n_params`` first. ``reference`` says what the
        reference is: "optimum (exact theta*)", "central (FedSGD reference, not the
        optimum)", "NAME (user's reference)", "array (user's reference)" or "task (exact
        theta* = (sum A_k)^-1 sum A_k mu_k)". Where the task knows the exact answer
        (gaussian-sgd with ``transform="none"``, against its exact theta*: "task" or the
        sampler's client "optimum") ``mse_exact`` is filled. :func:`headroom_verdicts` reads
        them into one line per checkpoint.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump, headroom
    >>> rng = np.random.default_rng(0)
    >>> errors = rng.standard_normal((3, 1, 400, 2)) * np.array([1.0, 1.0, 3.0])[:, None, None, None]
    >>> dump = ParameterDump.from_arrays("headroom_dump", {"a": errors[0], "b": errors[1], "c": errors[2],
    ...                                  "optimum": np.zeros((1, 400, 2))}, checkpoints=[5])
    >>> rows = headroom(dump)                        # the client "optimum" is the reference
    >>> rows[0]["reference"]
    'optimum (exact theta*)'
    >>> [(r["rule"], round(r["ratio"], 1)) for r in rows if r["rule"] in ("mean", "inverse_mse")]
    [('mean', 1.0), ('inverse_mse', 0.4)]

    (Exactly ``(1 / (1 + 1 + 1/9)) / ((1 + 1 + 9) / 9) = 0.39``.)
    """
    from ...dumps import ParameterDump

    dump = dump if isinstance(dump, ParameterDump) else ParameterDump.open(dump)
    n = dump.completed_runs
    if n == 0:
        raise ValueError(f"{dump.path} has no completed runs (0 of {dump.n_runs}): nothing to measure; run the "
                         f"sampler on until at least {2 * check_int(folds, 'folds', low=2)} runs are in")
    task: Any = _task_of(dump)  # duck-typed below: hasattr picks the tasks with exact moments (gaussian-sgd)
    seed, init, shared = _sampling_of(dump)
    clients = list(dump.clients)
    client_reference = None  # the client that holds the reference, if one does
    if isinstance(reference, str):
        if reference == "auto":
            reference = next((c for c in REFERENCE_CLIENTS if c in clients), "task")
        if reference == "task":
            if task is None or not hasattr(task, "central_parameters"):
                raise ValueError(f"`reference`='task' needs a dump of a task that knows the federation's optimum "
                                 f"(gaussian-sgd); {dump.path} is of task {dump.meta.get('task')!r}: give the name "
                                 "of a client that holds a reference ('optimum', 'central', your own) or an array")
            if task.settings["transform"] != "none":
                raise ValueError(f"`reference`='task' needs parameters recorded as they are (transform 'none'); "
                                 f"{dump.path} records them through {task.settings['transform']!r}")
            ref = task_reference(dump.meta, n)  # each run's theta*, its data drawn again as the sampler drew it
            if ref is None:
                raise ValueError(f"`reference`='task': task {dump.meta.get('task')!r} registered no exact optimum "
                                 "(mianalysis.dumps.knowledge.register_task_knowledge(reference=...))")
            ref_name = TASK_REFERENCE
        elif reference in clients:
            client_reference = reference
            ref, ref_name = None, _describe(reference)
        elif reference in _MISSING:
            raise ValueError(f"`reference`={reference!r} needs a client {reference!r} in {dump.path} (its clients: "
                             f"{clients}): {_MISSING[reference]}")
        else:
            raise ValueError(f"`reference` must be 'auto', 'optimum', 'central', 'task', a client of the dump "
                             f"{clients} or an array; got {reference!r}")
    else:
        ref = np.asarray(reference, dtype=np.float64)
        if ref.shape not in ((n, dump.n_params), (len(dump.checkpoints), n, dump.n_params)):
            raise ValueError(f"`reference` must have shape ({n}, {dump.n_params}) or ({len(dump.checkpoints)}, {n}, "
                             f"{dump.n_params}) (runs, params); got {ref.shape}")
        ref_name = f"array{_USERS}"
    clients = [c for c in clients if c not in REFERENCE_CLIENTS and c != client_reference]
    if not clients:
        raise ValueError(f"{dump.path} has no clients to combine besides its references {dump.clients}")
    wanted = list(dump.checkpoints) if iterations is None else [int(i) for i in iterations]
    missing = [i for i in wanted if i not in dump.checkpoints]
    if missing:
        raise ValueError(f"`iterations` {missing} are not checkpoints of {dump.path}: {dump.checkpoints}")
    # The task's exact moments are of the errors to its exact theta*: "task", or the sampler's "optimum" client.
    exact_ok = ((ref_name == TASK_REFERENCE or client_reference == OPTIMUM) and task is not None
                and hasattr(task, "exact_error_moments") and task.settings.get("transform", "none") == "none"
                and len(clients) == task.n_clients)
    # "curvature" is among the default rules wherever it can run: on the task's exact theta*.
    own = _own_weights(fixed_weights, len(clients), dump.n_params)
    rules = list(_resolve_rules(rules, len(clients), dump.n_params,
                                curvature=exact_ok and hasattr(task, "curvature_weights") and "curvature" not in own))
    rules += [name for name in own if name not in rules]
    fixed = dict(own)
    if "curvature" in rules and "curvature" not in own:
        if not exact_ok:
            raise ValueError("rule 'curvature' needs a gaussian-sgd dump and its exact theta* as the reference "
                             "('task', or the sampler's client 'optimum')")
        fixed["curvature"] = task.curvature_weights()
    # headroom_rows' checks, before the progress bar is drawn: an error is then the only line.
    _headroom_rows_iv((len(clients), n, dump.n_params), rules, folds, level, fixed)
    rows = []
    bar = progress_bar(len(wanted) * len(rules), unit="rule", desc="headroom", enabled=progress)
    for it in wanted:
        t = dump.checkpoints.index(it)
        here = None if ref is None else (ref if ref.ndim == 2 else ref[t])
        if here is None:
            assert client_reference is not None  # no reference array: the reference is a client of the dump
            here = np.asarray(dump.samples(client_reference, iteration=it), dtype=np.float64)
        errors = np.stack([np.asarray(dump.samples(c, iteration=it), dtype=np.float64) - here for c in clients])
        exact = task.exact_error_moments(it, init=init, shared=shared) if exact_ok else None
        with warnings.catch_warnings():  # an old rule name warned once, above
            warnings.simplefilter("ignore", DeprecationWarning)
            here_rows = headroom_rows(errors, rules=rules, folds=folds, level=level, client_sizes=client_sizes,
                                      exact=exact, fixed_weights=fixed, on_rule=bar.update)
        for row in here_rows:
            rows.append({"iteration": it, "checkpoint": t, "reference": ref_name, "n_clients": len(clients),
                         "n_params": dump.n_params, **row})
    bar.close()
    return rows


# ---------------------------------------------------------------------- the verdicts
def reference_phrase(reference: str) -> str:
    """What a verdict is against, from the ``reference`` of :func:`headroom`'s rows.

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import reference_phrase
    >>> reference_phrase("optimum (exact theta*)")
    'the optimum theta*'
    >>> reference_phrase("central (FedSGD reference, not the optimum)")
    'the FedSGD reference (central client), not the optimum'
    >>> reference_phrase("mine (user's reference)")
    "the user's reference mine"
    """
    ref = str(reference)
    if ref == _DESCRIBED[OPTIMUM] or ref.startswith(("task (", "task:")):  # "task: ...": tables before the names
        return "the optimum theta*"
    if ref in (_DESCRIBED[CENTRAL], f"client {CENTRAL}"):
        return "the FedSGD reference (central client), not the optimum"
    if ref.endswith(_USERS):
        return f"the user's reference {ref[:-len(_USERS)]}"
    if ref.startswith("client "):  # tables written before the references were described
        return f"the user's reference {ref[len('client '):]}"
    return f"the reference {ref}"


def _number(row: Mapping[str, Any], key: str) -> float:
    """`row`'s `key` as a float (a CSV's text too); NaN if absent or empty."""
    value = row.get(key, np.nan)
    try:
        return float(value) if value != "" else np.nan
    except (TypeError, ValueError):
        return np.nan


def _corrected(row: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The fit-corrected ratio and its interval of `row`, or None where one of them is not finite."""
    values = tuple(_number(row, k) for k in ("ratio_corrected", "ratio_corrected_low", "ratio_corrected_high"))
    return values if all(np.isfinite(values)) else None


def _one_client(by_rule: Mapping[str, Mapping[str, Any]]) -> bool:
    return any(str(r.get("note", "")).startswith("one client") for r in by_rule.values())


def _no_best(by_rule: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a checkpoint's rows have no best combination to judge by."""
    if _one_client(by_rule):
        return "one client: nothing to combine"
    mean = by_rule.get("mean")
    if mean is not None and _number(mean, "mse") == 0:
        return "averaging's error is 0 in every run (every client at the reference): the ratios are undefined"
    present = [r for r in BEST_RULES if r in by_rule]
    if not present:
        return f"none of the best-combination rules {list(BEST_RULES)} was measured (name one among the rules)"
    if all(not np.isfinite(_number(by_rule[r], "ratio")) for r in present):
        return "the ratios to averaging are undefined here (averaging's error is 0)"
    return (f"{' and '.join(present)} {'has' if len(present) == 1 else 'have'} no fit-corrected ratio here "
            "(blue's second moment is shrunk, fewer than 2 K d fitting runs: measure blue_coordinate, or more runs)")


def _df(row: Mapping[str, Any]) -> int | None:
    """The degrees of freedom of the t quantile behind `row`'s intervals (its ``interval_df``:
    a jackknifed fitted rule's), or None for a normal quantile (and tables without the column)."""
    value = _number(row, "interval_df")
    return int(value) if np.isfinite(value) and value >= 1 else None


def _widened(values: Sequence[float], level: float, family_level: float,
             df: int | None = None) -> tuple[float, float, float]:
    """`values` (estimate, low, high) at `level`, as the interval of the same estimate at
    `family_level` (Student's t quantile with `df` degrees of freedom for both, or the normal one)."""
    estimate, low, high = values
    return (estimate, *normal_interval(estimate, se_from_interval(low, high, level, df), family_level, df))


def _share(value: float) -> str:
    return format(round(value, 3) + 0.0, ".3f")  # + 0.0: no "-0.000"


def _percent(value: float) -> str:
    return format(round(value, 1) + 0.0, ".1f")


def headroom_verdicts(rows: Sequence[Mapping[str, Any]], *, level: float = 0.95,
                      near_optimal: float = NEAR_OPTIMAL) -> list[str]:
    """One line per checkpoint: is averaging near-optimal against the reference, or is there headroom?

    The **best combination** is the best linear combination, "blue" (its cross-fitted MSE
    ratio to averaging's, divided by :func:`fitting_inflation`: an estimate of the ratio of
    its oracle weights), or, where that correction is undefined or "blue" was not measured,
    the best per-coordinate combination, "blue_coordinate" (the same correction). Its
    interval is widened to the family-wise `level` over the table's checkpoints
    (Bonferroni: each checkpoint's interval at ``1 - (1 - level) / m``, ``m`` the
    checkpoints that have one, with the row's Student's t quantile where its
    ``interval_df`` gives one: a jackknifed fitted rule's), so that all of a table's
    verdicts hold together with probability `level` (given the correction, which is exact
    for jointly Gaussian errors). At each checkpoint:

    - **near-optimal**: the interval lies at or above `near_optimal` (the best combination
      cannot take off more than ``1 - near_optimal`` of averaging's error); the line gives
      by how much averaging's error exceeds the best combination's, ``100 (1/R - 1)`` %
      with its interval (negative: the best combination, as fitted, did not beat it);
    - **headroom**: the interval lies below `near_optimal`; the line gives the best
      combination's ratio R and the best **runnable** rule tried: the rule of
      :data:`RUNNABLE_RULES` (those a federation can run without the reference: "mean",
      "weighted_mean", "curvature"; "inverse_mse", "blue_coordinate" and "blue" fit
      their weights on the errors to the reference) with the lowest ratio, with its
      interval widened over the checkpoints and the runnable rules measured (Bonferroni:
      ``1 - (1 - level) / (m r)``);
    - **no verdict**: the interval straddles `near_optimal` (too wide to say), or there is
      nothing to judge by (one client, every error 0, no best-combination rule, or no
      correction); the line says which.

    Every line names its reference: "against the optimum theta*", "against the FedSGD
    reference (central client), not the optimum", "against the user's reference NAME"
    (:func:`reference_phrase`).

    Parameters
    ----------
    rows : sequence of dict
        The rows of one :func:`headroom` table (one dump and reference), as returned or as
        read back from its CSV (numbers as text).
    level : float, default=0.95
        The level the rows' intervals were computed at (:func:`headroom`'s `level`), and the
        family-wise level of the verdicts.
    near_optimal : float, default=0.95
        The ratio threshold (:data:`NEAR_OPTIMAL`), in (0, 1].

    Returns
    -------
    list of str
        One line per checkpoint, in the rows' order, each starting "iteration N, against ...:".

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import headroom_verdicts
    >>> def row(rule, r, low, high):
    ...     return {"iteration": 5, "reference": "optimum (exact theta*)", "rule": rule, "mse": 1.0,
    ...             "ratio": r, "ratio_low": low, "ratio_high": high, "ratio_corrected": r,
    ...             "ratio_corrected_low": low, "ratio_corrected_high": high}
    >>> rows = [row("mean", 1.0, 1.0, 1.0), row("blue", 0.5, 0.45, 0.55)]   # one checkpoint: no widening
    >>> print(*headroom_verdicts(rows))  # doctest: +NORMALIZE_WHITESPACE
    iteration 5, against the optimum theta*: the best linear combination (blue) has 0.500 [0.450, 0.550]
    of averaging's error; the best runnable rule tried, mean, reaches 1.000 [1.000, 1.000]
    """
    level = check_level(level, "level")
    near_optimal = check_real(near_optimal, "near_optimal", low=0, high=1, low_open=True)
    groups: dict[int, dict[str, Mapping[str, Any]]] = {}
    references = set()
    for row in rows:
        missing = [k for k in ("iteration", "rule", "reference") if k not in row]
        if missing:
            raise ValueError(f"`rows` must be rows of headroom (with 'iteration', 'rule' and 'reference'); a row "
                             f"lacks {missing}")
        it, rule = int(float(row["iteration"])), str(row["rule"])
        here = groups.setdefault(it, {})
        if rule in here:
            raise ValueError(f"`rows` hold rule {rule!r} twice at iteration {it}: give the rows of one headroom "
                             "table (one dump, one reference)")
        here[rule] = row
        references.add(str(row["reference"]))
    if not groups:
        raise ValueError("`rows` is empty: no checkpoint to give a verdict on")
    if len(references) > 1:
        raise ValueError(f"`rows` mix the references {sorted(references)}: give the rows of one headroom table")
    against = reference_phrase(references.pop())
    best = {}  # iteration -> (the best-combination rule, its corrected ratio and interval)
    for it, by_rule in groups.items():
        if _one_client(by_rule):
            continue
        for rule in BEST_RULES:
            values = _corrected(by_rule[rule]) if rule in by_rule else None
            if values is not None:
                best[it] = (rule, values, _df(by_rule[rule]))
                break
    m = len(best)  # the family: the checkpoints with an interval
    lines = []
    for it, by_rule in groups.items():
        start = f"iteration {it}, against {against}: "
        if it not in best:
            lines.append(f"{start}no verdict: {_no_best(by_rule)}")
            continue
        rule, values, df = best[it]
        r, low, high = _widened(values, level, 1 - (1 - level) / m, df)
        name = f"best {'linear' if rule == 'blue' else 'per-coordinate'} combination ({rule})"
        share = f"{_share(r)} [{_share(low)}, {_share(high)}] of averaging's error"
        if low >= near_optimal:
            excess = [_percent(100 * (1 / v - 1)) for v in (r, high, low)]  # averaging's error over the best's
            lines.append(f"{start}averaging is within {excess[0]} % [{excess[1]}, {excess[2]}] of the {name}: "
                         "near-optimal here")
        elif high < near_optimal:
            runnable = [(_number(row, "ratio"), _number(row, "ratio_low"), _number(row, "ratio_high"), name_, _df(row))
                        for name_, row in by_rule.items() if name_ in RUNNABLE_RULES]
            runnable = [v for v in runnable if all(np.isfinite(v[:3]))]
            if runnable:
                y, y_low, y_high, which, y_df = min(runnable, key=lambda v: v[0])  # the first of equal ratios
                y, y_low, y_high = _widened((y, y_low, y_high), level, 1 - (1 - level) / (m * len(runnable)), y_df)
                tried = (f"the best runnable rule tried, {which}, reaches {_share(y)} [{_share(y_low)}, "
                         f"{_share(y_high)}]")
            else:
                tried = f"no runnable rule was tried ({', '.join(RUNNABLE_RULES)})"
            lines.append(f"{start}the {name} has {share}; {tried}")
        else:
            lines.append(f"{start}no verdict: the {name} has {share}, an interval that straddles the near-optimal "
                         f"threshold {near_optimal:g} (too wide to say; more runs narrow it)")
    return lines


def _interval(values: Sequence[float]) -> str:
    return f"{_share(values[0])} [{_share(values[1])}, {_share(values[2])}]"


def _rule_ratio(row: Mapping[str, Any]) -> str:
    """The ratio part of a rule's line in :func:`headroom_rule_lines`."""
    raw = tuple(_number(row, k) for k in ("ratio", "ratio_low", "ratio_high"))
    if not np.isfinite(raw[0]):
        return "ratio to averaging undefined (averaging's MSE is 0: every client at the reference)"
    if str(row.get("note", "")).startswith("one client"):
        return f"ratio to averaging {_interval(raw)} (one client: nothing to combine)"
    if not str(row.get("weights", "")).startswith("cross-fitted"):
        return f"ratio to averaging {_interval(raw)} (fixed weights)"
    corrected = _corrected(row)
    if corrected is not None:
        return f"fit-corrected ratio to averaging {_interval(corrected)} (as cross-fitted: {_interval(raw)})"
    why = "its second moment is shrunk" if str(row.get("note", "")).startswith("ledoit-wolf") else "not defined here"
    return f"ratio to averaging {_interval(raw)} (cross-fitted; fit correction: {why})"


def headroom_rule_lines(rows: Sequence[Mapping[str, Any]], *, iteration: int | None = None,
                        level: float = 0.95) -> list[str]:
    """The rows of one checkpoint in words: what the numbers are, then one line per rule.

    Each rule's line gives its MSE to the reference with its interval (and the exact MSE
    where the task knows it: of the rule's oracle weights for a fitted rule), then its MSE
    as a **ratio to averaging's** (below 1: the rule beats averaging):

    - a rule with fixed weights ("mean", "weighted_mean", "curvature"): its ratio;
    - a fitted rule with a correction for the cost of fitting ("blue", "blue_coordinate":
      :func:`fitting_inflation`; "inverse_mse": the jackknife's estimate, see
      :func:`headroom_rows`): the **fit-corrected** ratio (``ratio_corrected``: the
      cross-fitted ratio divided by that cost, an estimate of the ratio of the rule's oracle
      weights; the one :func:`headroom_verdicts` judges by and the docs' tables quote),
      labelled so, then the cross-fitted ratio it comes from;
    - a fitted rule without one ("blue" with a shrunk second moment, or too few fitting
      runs): the cross-fitted ratio, saying that it is not corrected.

    The intervals are the table's, at `level` (not widened over checkpoints as the
    verdicts' are).

    Parameters
    ----------
    rows : sequence of dict
        The rows of one :func:`headroom` table, as returned or as read back from its CSV.
    iteration : int, optional
        The checkpoint to describe; by default the table's last.
    level : float, default=0.95
        The level the rows' intervals were computed at.

    Returns
    -------
    list of str
        The line saying what the numbers are, then one line per rule of that checkpoint,
        each starting "iteration N RULE:".

    Examples
    --------
    >>> from mianalysis.analysis.studies.headroom import headroom_rule_lines
    >>> row = {"iteration": 5, "reference": "optimum (exact theta*)", "rule": "blue", "n_runs": 400, "n_params": 2,
    ...        "weights": "cross-fitted, 2 folds", "mse": 1.02, "mse_low": 0.9, "mse_high": 1.14, "ratio": 0.51,
    ...        "ratio_low": 0.46, "ratio_high": 0.56, "ratio_corrected": 0.5, "ratio_corrected_low": 0.45,
    ...        "ratio_corrected_high": 0.55}
    >>> print(*headroom_rule_lines([row]), sep="\\n")  # doctest: +NORMALIZE_WHITESPACE
    iteration 5, against the optimum theta*: each rule's MSE (the squared error summed over the 2 parameters,
    mean over 400 runs, with its 95 % interval) and that MSE as a ratio to averaging's (below 1: the rule beats
    averaging; fit-corrected: a fitted rule's ratio divided by what fitting its weights costs, the ratio the
    verdicts judge by)
    iteration 5 blue: MSE 1.02 [0.9, 1.14]; fit-corrected ratio to averaging 0.500 [0.450, 0.550]
    (as cross-fitted: 0.510 [0.460, 0.560])
    """
    level = check_level(level, "level")
    if not rows:
        raise ValueError("`rows` is empty: no checkpoint to describe")
    at = {int(float(r["iteration"])) for r in rows}
    it = max(at) if iteration is None else int(iteration)
    if it not in at:
        raise ValueError(f"`iteration` {it} is not a checkpoint of the rows: {sorted(at)}")
    here = [r for r in rows if int(float(r["iteration"])) == it]
    first = here[0]
    params, runs = _number(first, "n_params"), _number(first, "n_runs")
    summed = f"summed over the {int(params)} parameters" if np.isfinite(params) else "summed over the parameters"
    over = f", mean over {int(runs)} runs" if np.isfinite(runs) else ", mean over runs"
    against = f", against {reference_phrase(first['reference'])}" if "reference" in first else ""
    lines = [f"iteration {it}{against}: each rule's MSE (the squared error {summed}{over}, with its "
             f"{100 * level:g} % interval) and that MSE as a ratio to averaging's (below 1: the rule beats averaging; "
             "fit-corrected: a fitted rule's ratio divided by what fitting its weights costs, the ratio the verdicts "
             "judge by)"]
    for r in here:
        exact = _number(r, "mse_exact")
        oracle = str(r.get("weights", "")).startswith("cross-fitted")  # the exact MSE of the rule's oracle weights
        exact_text = (f", exact {'(oracle weights) ' if oracle else ''}{exact:.4g}" if np.isfinite(exact) else "")
        lines.append(f"iteration {it} {r['rule']}: MSE {_number(r, 'mse'):.4g} [{_number(r, 'mse_low'):.4g}, "
                     f"{_number(r, 'mse_high'):.4g}]{exact_text}; {_rule_ratio(r)}")
    return lines
