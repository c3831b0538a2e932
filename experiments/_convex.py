"""Shared code of the experiment scripts on convex softmax clients (headroom_rounds.py).

Softmax-regression clients (the linear softmax of softmax-regression, or digits-head's head
on its frozen body's features), vectorised over runs in float64 NumPy:

- the parameters of one model as the augmented matrix ``(n_classes, n_features + 1)`` (the
  bias as the last column, the feature of value 1) and in a dump's order (the weight row by
  row, then the bias: :func:`to_dump`);
- :func:`client_hvp`: the products ``H_k(theta_rk) v`` of each client's own Hessian (its
  examples' mean cross-entropy plus the L2 term) at a point per run and client, without
  forming a Hessian;
- :func:`combined_errors`: the error ``(sum_k H_k)^-1 sum_k H_k e_k`` of the curvature
  (Fisher-merging) combination of each run's clients, solved by preconditioned conjugate
  gradients run by run to a relative residual of 1e-10: what the 650 x 650 Hessians and
  Cholesky solves of one run at a time give, in a fraction of their time;
- the rows of rules whose weights change from run to run (:func:`per_run_row`, the keys of
  ``headroom_rows``' rows) and Bonferroni-widened intervals and verdicts over a table of cells
  (:func:`widened`, :func:`familywise_verdicts`).

experiments/headroom_convex.py has its own copies of the last three (`per_run_row`,
`_widened`, `familywise_verdicts`, written before this module); it could import them from here.
"""

from __future__ import annotations

import numpy as np

from mianalysis.analysis.inference.intervals import mean_interval, normal_interval, se_from_interval
from mianalysis.analysis.studies.headroom import headroom_verdicts, ratio_interval

__all__ = ["LEVEL", "CG_TOL", "to_dump", "from_dump", "probabilities", "client_hvp", "combined_errors", "per_run_row",
           "interval_df", "widened", "familywise_verdicts"]

LEVEL = 0.95
# Relative residual ||b - A z|| / ||b|| each run's conjugate-gradient solve is run to.
CG_TOL = 1e-10


def to_dump(theta):
    """Augmented parameters ``(..., n_classes, n_features + 1)`` in a dump's order
    ``(..., n_classes * (n_features + 1))``: the weight row by row, then the bias."""
    theta = np.asarray(theta)
    lead = theta.shape[:-2]
    return np.concatenate([theta[..., :-1].reshape(*lead, -1), theta[..., -1]], axis=-1)


def from_dump(theta, n_classes):
    """The inverse of :func:`to_dump`: ``(..., P)`` to ``(..., n_classes, P / n_classes)``."""
    theta = np.asarray(theta)
    lead, p = theta.shape[:-1], theta.shape[-1]
    d = p // n_classes - 1
    weight = theta[..., :n_classes * d].reshape(*lead, n_classes, d)
    return np.concatenate([weight, theta[..., n_classes * d:, None]], axis=-1)


def probabilities(x, theta):
    """Softmax probabilities ``(R, K, n, C)`` of augmented features `x` ``(Rx, K, n, D1)``
    (``Rx`` 1: the same examples in every run) under augmented parameters `theta`
    ``(R, K, C, D1)`` (one model per run and client)."""
    z = np.matmul(x, np.swapaxes(theta, -1, -2))
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def client_hvp(x, prob, v, l2):
    """``H_k v_k`` per run and client: the Hessian of client k's objective (the mean
    cross-entropy of its `x` ``(Rx, K, n, D1)`` plus ``(l2 / 2) ||theta||^2``) at the point
    whose probabilities are `prob` ``(R, K, n, C)``, times `v` ``(R, K, C, D1)``.

    For one example, the cross-entropy's Hessian is ``(diag(p) - p p') kron x x'``, so
    ``H v = mean_i s_i x_i' + l2 v`` with ``u_i = V x_i`` and ``s_i = p_i * u_i - p_i (p_i' u_i)``.
    """
    u = np.matmul(x, np.swapaxes(v, -1, -2))  # (R, K, n, C)
    s = prob * (u - np.sum(prob * u, axis=-1, keepdims=True))
    return np.matmul(np.swapaxes(s, -1, -2), x) / x.shape[-2] + l2 * v


def combined_errors(x, prob, errors, l2, precondition, *, tol=CG_TOL, max_iter=1000):
    """``z_r = (sum_k H_rk)^-1 sum_k H_rk e_rk`` per run, by preconditioned conjugate gradients.

    The error of combining run r's clients with the weights ``(sum_j H_j)^-1 H_k`` (Fisher
    merging with the full Hessians, or the curvature weights where the Hessians are taken
    at theta*): those weights sum to the identity, so the combination's error is the same
    combination of the clients' errors.

    Parameters
    ----------
    x : ndarray of shape (Rx, K, n, D1)
        Each client's augmented features (Rx = 1: the same in every run).
    prob : ndarray of shape (R, K, n, C)
        :func:`probabilities` at the points where the Hessians are taken.
    errors : ndarray of shape (R, K, C, D1)
        The clients' errors, augmented.
    l2 : float
        The L2 coefficient of every client's objective.
    precondition : callable
        ``(R, C * D1) -> (R, C * D1)``: an approximation of ``(sum_k H_k)^-1`` (each run's
        residual, flattened in the augmented order), e.g. a Cholesky solve with the sum of
        the Hessians at theta*.
    tol : float, default=1e-10
        The relative residual ``||b - A z|| / ||b||`` every run is solved to.
    max_iter : int, default=1000

    Returns
    -------
    (ndarray of shape (R, C, D1), float, int)
        The combined errors, the largest relative residual over runs and the iterations taken.

    Raises
    ------
    RuntimeError
        Where a run's relative residual is still above `tol` after `max_iter` iterations.
    """
    r, k, c, d1 = errors.shape

    def apply(v):
        return client_hvp(x, prob, np.broadcast_to(v.reshape(r, 1, c, d1), (r, k, c, d1)), l2).sum(axis=1)

    b = client_hvp(x, prob, errors, l2).sum(axis=1).reshape(r, -1)
    scale = np.linalg.norm(b, axis=1)
    scale[scale == 0] = 1.0
    z = precondition(b)
    res = b - apply(z.reshape(r, c, d1)).reshape(r, -1)
    y = precondition(res)
    p = y.copy()
    ry = np.einsum("ri,ri->r", res, y)
    for it in range(max_iter + 1):
        worst = float(np.max(np.linalg.norm(res, axis=1) / scale))
        if worst <= tol:
            return z.reshape(r, c, d1), worst, it
        if it == max_iter:
            break
        ap = apply(p.reshape(r, c, d1)).reshape(r, -1)
        pap = np.einsum("ri,ri->r", p, ap)
        alpha = np.divide(ry, pap, out=np.zeros(r), where=pap > 0)
        z += alpha[:, None] * p
        res -= alpha[:, None] * ap
        y = precondition(res)
        ry_new = np.einsum("ri,ri->r", res, y)
        beta = np.divide(ry_new, ry, out=np.zeros(r), where=ry > 0)
        p = y + beta[:, None] * p
        ry = ry_new
    raise RuntimeError(f"conjugate gradients: a run's relative residual is {worst:.3g} after {max_iter} iterations "
                       f"(asked for <= {tol:g})")


def per_run_row(rule, per_run, base, weights, n_runs, level=LEVEL):
    """A row with ``headroom_rows``' keys for a rule scored run by run: the MSE of its per-run
    squared errors `per_run` and their ratio to `base` (the mean's), paired by run, normal
    intervals; nothing is fitted, so the corrected ratio is the ratio."""
    mse, low, high = mean_interval(per_run, level)
    ratio, r_low, r_high = ratio_interval(per_run, base, level)
    return {"rule": rule, "weights": weights, "mse": mse, "mse_low": low, "mse_high": high, "ratio": ratio,
            "ratio_low": r_low, "ratio_high": r_high, "fit_inflation": 1.0, "mse_corrected": mse,
            "mse_corrected_low": low, "mse_corrected_high": high, "ratio_corrected": ratio,
            "ratio_corrected_low": r_low, "ratio_corrected_high": r_high, "mse_exact": np.nan, "ratio_exact": np.nan,
            "exact_note": "", "interval_df": np.nan, "n_runs": n_runs, "note": ""}


def interval_df(row):
    """The degrees of freedom of the t quantile behind `row`'s intervals (``headroom_rows``'
    ``interval_df``, for its jackknifed fitted rules), or None for a normal quantile."""
    value = row.get("interval_df", np.nan)
    value = np.nan if value in ("", None) else float(value)
    return int(value) if np.isfinite(value) and value >= 1 else None


def widened(estimate, low, high, level, to, df=None):
    """The interval ``(low, high)`` of `estimate` at `level`, as the interval at `to` (a
    Bonferroni level): the same standard error, a wider quantile (Student's t with `df`
    degrees of freedom for both, or the normal one)."""
    se = se_from_interval(low, high, level, df)
    return (float(low), float(high)) if not np.isfinite(se) else normal_interval(estimate, se, to, df)


def familywise_verdicts(rows, *, key="cell", level=LEVEL):
    """{cell: [verdict lines]} of `headroom_verdicts`, Bonferroni over the cells of `rows`
    (grouped by `key`): each row's ratio intervals (plain and fit-corrected) widened to
    ``1 - (1 - level) / m_cells`` first; the verdicts widen them again over each cell's
    checkpoints."""
    cells = list(dict.fromkeys(r[key] for r in rows))
    to = 1 - (1 - level) / len(cells)
    out = {}
    for cell in cells:
        mine = []
        for r in rows:
            if r[key] != cell:
                continue
            r = dict(r)
            for name in ("ratio", "ratio_corrected"):
                r[f"{name}_low"], r[f"{name}_high"] = widened(r[name], r[f"{name}_low"], r[f"{name}_high"], level, to,
                                                              interval_df(r))
            mine.append(r)
        out[cell] = headroom_verdicts(mine, level=to)
    return out
