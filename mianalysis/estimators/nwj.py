r"""The held-out Nguyen-Wainwright-Jordan lower bound on MI, valid for any distribution.

For any function :math:`T(x, y)` (a *critic*),

.. math::

    I(X; Y) \ge E_{p(x, y)}[T] - E_{p(x) p(y)}\left[e^{T - 1}\right]

(Nguyen, Wainwright and Jordan 2010), with equality at :math:`T = 1 + \log p(x, y) / (p(x)
p(y))`. With a critic fixed before the evaluation runs are seen (fitted on other runs),
the mean of :math:`T` over the paired evaluation runs and the mean of :math:`e^{T - 1}` over
their unpaired combinations ``(i, j)``, ``i != j``, are unbiased for the two expectations,
so the held-out value is unbiased for a number at most the MI, whatever the law of the
data and however poor the critic (a poor critic only loosens it, down to below zero).

The critic here is ``1 + min(tau * g, cap)`` with ``g`` the log density ratio of independent bivariate
Gaussian canonical pairs (``-0.5 log(1 - rho^2) - (rho^2 (u^2 + v^2) - 2 rho u v) / (2 (1 -
rho^2))`` summed over the pairs of standardised projections ``u, v``), ``g`` kept between
:data:`CRITIC_FLOOR` and :data:`CRITIC_CAP` nats. On Gaussian data with the true correlations and ``tau = 1`` it is
the true log density ratio of the projections, so the bound equals their MI. This module
knows only the critic on projections; :func:`mianalysis.estimators.bound.projection_bound`
fits the projections and the critic on the fitting folds and calls :func:`nwj_fold`.

References
----------
X. Nguyen, M. J. Wainwright and M. I. Jordan, "Estimating divergence functionals and the
likelihood ratio by convex risk minimization", IEEE Trans. Inf. Theory 56 (2010) 5847-5861.

B. Poole, S. Ozair, A. van den Oord, A. Alemi and G. Tucker, "On variational bounds of mutual
information", ICML 2019.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

__all__ = ["NWJCritic", "fit_critic", "nwj_fold", "score_map", "CRITIC_CAP", "CRITIC_FLOOR", "TEMPERATURES", "CAPS", "MAX_ALL_PAIRS",
           "SHIFTS"]

# The critic's log ratio is kept between these (nats): any critic gives a bound; the cap keeps
# e^T finite where a fitted correlation is close to 1, and the floor keeps one paired run far
# in the tails (heavy-tailed or mixed laws) from dragging the mean down, at a cost of at most
# e^-10 (4.5e-5 nats) in the unpaired term.
CRITIC_CAP = 30.0
CRITIC_FLOOR = -10.0
# The critic is tempered (tau * g) by the value of this grid that gives the largest bound on
# the critic's own fitting runs; tau = 0 is the zero critic (a bound of exactly 0 there).
TEMPERATURES = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)
# ... and by the cap of this grid (nats) on its log ratio: a low cap gives up little where the
# projections are near Gaussian and keeps a few unpaired combinations far in heavy tails from
# dominating the unpaired mean.
CAPS = (CRITIC_CAP, 8.0, 4.0, 2.0, 1.0)
# Evaluation folds of at most this many runs average e^T over all n (n - 1) unpaired
# combinations; larger ones over SHIFTS cyclic shifts (i, i + s) of the runs (each shift's
# pairs are unpaired draws as well, so the mean stays unbiased).
MAX_ALL_PAIRS = 2048
SHIFTS = 256
_MAX_ABS_CORRELATION = 0.999


@dataclass(frozen=True)
class NWJCritic:
    """A fitted critic: standardising shifts and scales of the projections, one correlation
    per canonical pair (``rho``), a temperature `tau` and a `cap` (nats) on the log ratio."""

    mean_u: np.ndarray
    scale_u: np.ndarray
    mean_v: np.ndarray
    scale_v: np.ndarray
    rho: np.ndarray
    tau: float
    cap: float = CRITIC_CAP

    def _standardise(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (u - self.mean_u) / self.scale_u, (v - self.mean_v) / self.scale_v


def _standardised(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = a.mean(axis=0)
    scale = a.std(axis=0)
    return mean, np.where(scale > 0, scale, 1.0)


def _log_ratios(zu: np.ndarray, zv: np.ndarray, rho: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The untempered log ratio ``g`` at the paired runs (n,) and at unpaired combinations
    ``(values, shifts)``: `values` (n, m) holds g(u_i, v_j) for m partners j of run i, every
    j != i (shifts None, the diagonal NaN) or j = i + s mod n for each of SHIFTS shifts s."""
    n = zu.shape[0]
    k = 1.0 - rho**2
    row_u = -0.5 * np.log(k).sum() - (zu**2 @ (rho**2 / (2.0 * k)))
    row_v = -(zv**2 @ (rho**2 / (2.0 * k)))
    weighted = zu * (rho / k)
    paired = row_u + row_v + np.einsum("ij,ij->i", weighted, zv)
    if n <= MAX_ALL_PAIRS:
        unpaired = row_u[:, None] + row_v[None, :] + weighted @ zv.T
        np.fill_diagonal(unpaired, np.nan)
        return paired, unpaired, None
    shifts = np.sort(rng.choice(np.arange(1, n), size=min(SHIFTS, n - 1), replace=False))
    unpaired = np.empty((n, shifts.size))
    for column, s in enumerate(shifts):
        partner = np.roll(np.arange(n), -s)
        unpaired[:, column] = row_u + row_v[partner] + np.einsum("ij,ij->i", weighted, zv[partner])
    return paired, unpaired, shifts


def _nwj_value_and_se(paired: np.ndarray, unpaired: np.ndarray, shifts: np.ndarray | None, tau: float,
                      cap: float) -> tuple[float, float]:
    """The NWJ estimate (nats) ``mean(T_ii) - mean_{i != j} e^(T_ij - 1)`` with ``T - 1 =
    clip(tau g)``, and its standard error from the first-order (Hoeffding) influence of each
    run: its paired value, and its share of the unpaired mean as the first and as the second
    member of a combination."""
    n = paired.size
    t_paired = np.clip(tau * paired, CRITIC_FLOOR, cap)
    e_unpaired = np.exp(np.clip(tau * unpaired, CRITIC_FLOOR, cap))  # NaN stays NaN
    if shifts is None:
        off = float(np.nansum(e_unpaired) / (n * (n - 1)))
        as_first = np.nansum(e_unpaired, axis=1) / (n - 1)
        as_second = np.nansum(e_unpaired, axis=0) / (n - 1)
    else:
        off = float(e_unpaired.mean())
        as_first = e_unpaired.mean(axis=1)
        # run j is the second member of (j - s, j) for every shift s
        as_second = np.mean([np.roll(e_unpaired[:, c], s) for c, s in enumerate(shifts)], axis=0)
    value = float(t_paired.mean() + 1.0 - off)  # E_p[1 + g] - E_q[e^g]
    influence = (t_paired - t_paired.mean()) - (as_first + as_second - 2.0 * off)
    se = float(influence.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    return value, se


def fit_critic(u: np.ndarray, v: np.ndarray, *, random_state: np.random.Generator,
               max_cap: float = CRITIC_CAP) -> NWJCritic:
    """A critic for projections `u` and `v` (n, r) fitted on their paired rows: each column
    standardised, one correlation per pair (at most 0.999 in magnitude), and the temperature
    of :data:`TEMPERATURES` and cap of :data:`CAPS` (each at most `max_cap`) whose NWJ value
    on these rows is largest (the zero critic, a value of 0, when none is positive).

    :func:`mianalysis.estimators.bound.projection_bound` sets `max_cap` to the log of the
    evaluation fold's runs: with ``e^(T - 1)`` at most n, the unpaired mean over about n^2
    combinations has a standard deviation of about n^-1/2 whatever the law, so the fold's
    value and its standard error are trustworthy; the price is that no fold's bound exceeds
    ``1 + log n`` nats (the limit every bound from n samples of this kind shares)."""
    mean_u, scale_u = _standardised(u)
    mean_v, scale_v = _standardised(v)
    zu, zv = (u - mean_u) / scale_u, (v - mean_v) / scale_v
    rho = np.clip(np.mean(zu * zv, axis=0), -_MAX_ABS_CORRELATION, _MAX_ABS_CORRELATION)
    best, best_tau, best_cap = 0.0, 0.0, min(CRITIC_CAP, max_cap)
    if u.shape[0] > 2:
        ratios = _log_ratios(zu, zv, rho, random_state)
        for tau in TEMPERATURES[:-1]:
            for cap in sorted({min(c, max_cap) for c in CAPS}, reverse=True):
                value, _ = _nwj_value_and_se(*ratios, tau, cap)
                if value > best:
                    best, best_tau, best_cap = value, tau, cap
    return NWJCritic(mean_u, scale_u, mean_v, scale_v, rho, best_tau, best_cap)


def nwj_fold(critic: NWJCritic, u: np.ndarray, v: np.ndarray, *,
             random_state: np.random.Generator) -> tuple[float, float]:
    """The held-out NWJ bound (nats) and its standard error on evaluation projections `u`,
    `v` (n, r) with a critic fitted on other runs.

    Examples
    --------
    Independent evaluation runs: the bound is at most about 0 whatever the critic.

    >>> import numpy as np
    >>> from mianalysis.estimators.nwj import fit_critic, nwj_fold
    >>> rng = np.random.default_rng(0)
    >>> z = rng.standard_normal((400, 2))
    >>> critic = fit_critic(z[:, :1], 0.8 * z[:, :1] + 0.6 * z[:, 1:], random_state=rng)
    >>> value, se = nwj_fold(critic, rng.standard_normal((400, 1)), rng.standard_normal((400, 1)),
    ...                      random_state=rng)
    >>> value < 2 * se
    True
    """
    zu, zv = critic._standardise(u, v)
    return _nwj_value_and_se(*_log_ratios(zu, zv, critic.rho, random_state), critic.tau, critic.cap)


def score_map(fit: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The normal-score transform of each column of `fit` (n, d) as a fixed function: a new
    value ``a`` of column j goes to ``ndtri((m + 0.5) / (n + 1))``, with ``m`` its mid-rank
    among the fitting values (``(#below + #below-or-equal) / 2``). On the fitting values
    without ties it is :func:`mianalysis.estimators.copula.normal_scores`; a value outside
    their range maps just beyond the extreme scores. Monotone in each column, so the MI of
    the transformed pair is the MI of the pair."""
    ordered = np.ascontiguousarray(np.sort(fit, axis=0).T)  # row j: column j sorted
    n = ordered.shape[1]

    def apply(a: np.ndarray) -> np.ndarray:
        twice_mid_ranks = np.empty(a.shape, dtype=np.intp)  # #below + #below-or-equal
        for j, (sorted_fit, values) in enumerate(zip(ordered, np.ascontiguousarray(a.T))):
            twice_mid_ranks[:, j] = (sorted_fit.searchsorted(values, side="left")
                                     + sorted_fit.searchsorted(values, side="right"))
        return ndtri((twice_mid_ranks / 2.0 + 0.5) / (n + 1))

    return apply
