"""Exact minimisers of smooth strictly convex objectives: each run's theta* for the tasks that
know it.

:func:`minimize_convex` is Newton's method with a backtracking (Armijo) line search, in
float64, run until the gradient norm is at most `tol` (1e-8 by default) and refused with a
ValueError where it does not get there. :func:`softmax_objective` is the pooled objective of
a softmax (multinomial logistic) regression with its exact gradient and Hessian, and
:func:`softmax_optimum` its minimiser, in the order a dump stores the parameters of a
``torch.nn.Linear`` (the weight row by row, then the bias).

Pure NumPy (and SciPy's Cholesky solver); nothing here knows of PyTorch, dumps or files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ConvexMinimum", "minimize_convex", "softmax_objective", "softmax_optimum", "TOL"]

# The gradient norm a run's theta* is computed to (issue 51): far below what float32 can record.
TOL = 1e-8

# Value, gradient (n,) and Hessian (n, n) of an objective at a point (n,), all float64.
ValueGradHess = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]


class ConvexMinimum(NamedTuple):
    """The minimiser of a convex objective and how well it was found.

    Attributes
    ----------
    theta : ndarray of shape (n_parameters,)
        The minimiser, float64.
    grad_norm : float
        The Euclidean norm of the objective's gradient at `theta` (<= the `tol` asked for).
    iterations : int
        Newton steps taken.
    value : float
        The objective at `theta`.
    """

    theta: np.ndarray
    grad_norm: float
    iterations: int
    value: float


def minimize_convex(value_grad_hess: ValueGradHess, theta0: ArrayLike, *, tol: float = TOL,
                    max_iter: int = 100) -> ConvexMinimum:
    """Minimise a smooth strictly convex function by Newton's method, to a gradient norm <= `tol`.

    Each step solves ``H p = -g`` by Cholesky (a Hessian that is not positive definite is a
    ValueError: the objective is not strictly convex there) and backtracks, halving the step
    from 1, until the Armijo condition ``f(theta + t p) <= f(theta) + 1e-4 t g'p`` holds. Near
    the minimiser the decrease a step promises (the Newton decrement ``-g'p``) falls below
    what float64 resolves in `f`; there a full step is taken when it lowers the gradient norm
    (the region where Newton's method converges quadratically). BLAS runs on one thread
    throughout: the result is the same bits whatever the thread count (and, for the sizes
    of the tasks here, a second thread on a busy machine only slows it).

    Parameters
    ----------
    value_grad_hess : callable
        ``theta -> (value, gradient, hessian)``: a float, an array of shape (n,) and an array
        of shape (n, n), float64.
    theta0 : array-like of shape (n,)
        The starting point.
    tol : float, default=1e-8
        The gradient norm (Euclidean) to reach.
    max_iter : int, default=100
        Newton steps allowed.

    Returns
    -------
    ConvexMinimum
        ``(theta, grad_norm, iterations, value)``.

    Raises
    ------
    ValueError
        Where the gradient norm does not reach `tol` in `max_iter` steps, the line search
        finds no decrease, or the Hessian is not positive definite; the message gives the
        gradient norm reached.

    Examples
    --------
    ``f(x) = 0.5 x'Ax - b'x`` has its minimiser at ``A^-1 b``, found in one step:

    >>> import numpy as np
    >>> from mianalysis.tasks.convex import minimize_convex
    >>> a, b = np.array([[2.0, 0.5], [0.5, 1.0]]), np.array([1.0, -1.0])
    >>> found = minimize_convex(lambda x: (0.5 * x @ a @ x - b @ x, a @ x - b, a), np.zeros(2))
    >>> np.allclose(found.theta, np.linalg.solve(a, b)), found.iterations, found.grad_norm <= 1e-8
    (True, 1, True)
    """
    if not (isinstance(tol, (int, float)) and np.isfinite(tol) and tol > 0):
        raise ValueError(f"`tol` must be a finite number > 0; got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise ValueError(f"`max_iter` must be an integer >= 0; got {max_iter!r}")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _newton(value_grad_hess, np.array(theta0, dtype=np.float64).reshape(-1), float(tol), int(max_iter))


def _newton(value_grad_hess, theta, tol, max_iter):
    """:func:`minimize_convex` on checked arguments."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    value, grad, hess = _evaluated(value_grad_hess, theta)
    norm = float(np.linalg.norm(grad))
    for it in range(max_iter + 1):
        if norm <= tol:
            return ConvexMinimum(theta, norm, it, value)
        if it == max_iter:
            break
        try:
            step = -cho_solve(cho_factor(hess), grad)
        except LinAlgError:
            raise ValueError(f"minimize_convex: the Hessian is not positive definite after {it} Newton steps "
                             f"(gradient norm {norm:.3g}): the objective is not strictly convex there") from None
        slope = float(grad @ step)  # -(Newton decrement), < 0 for a positive definite Hessian
        # below this decrease, f's rounding (a sum of many terms) hides the Armijo condition
        unresolved = -slope <= 1e-10 * max(1.0, abs(value))
        t = 1.0
        while True:
            trial = theta + t * step
            t_value, t_grad, t_hess = _evaluated(value_grad_hess, trial)
            t_norm = float(np.linalg.norm(t_grad))
            if t_value <= value + 1e-4 * t * slope or (unresolved and t == 1.0 and t_norm < norm):
                break
            t *= 0.5
            if t < 1e-12:
                raise ValueError(f"minimize_convex: the line search found no decrease after {it} Newton steps "
                                 f"(gradient norm {norm:.3g}, asked for <= {tol:g}): the objective is not convex "
                                 "or not smooth, or float64 cannot resolve it")
        theta, value, grad, hess, norm = trial, t_value, t_grad, t_hess, t_norm
    raise ValueError(f"minimize_convex did not reach a gradient norm <= {tol:g} in {max_iter} Newton steps "
                     f"(reached {norm:.3g}): raise `max_iter` or `tol`")


def _evaluated(value_grad_hess, theta):
    value, grad, hess = value_grad_hess(theta)
    n = theta.size
    grad = np.asarray(grad, dtype=np.float64).reshape(-1)
    hess = np.asarray(hess, dtype=np.float64)
    if grad.shape != (n,) or hess.shape != (n, n):
        raise ValueError(f"`value_grad_hess` must return a gradient of shape ({n},) and a Hessian of shape ({n}, {n}); "
                         f"got {grad.shape} and {hess.shape}")
    value = float(value)
    if not (np.isfinite(value) and np.isfinite(grad).all() and np.isfinite(hess).all()):
        raise ValueError("`value_grad_hess` returned a non-finite value, gradient or Hessian")
    return value, grad, hess


# ---------------------------------------------------------------------------- softmax regression
def _softmax_iv(features, labels, n_classes, l2, weights):
    """Checked float64 features (n, d), integer labels (n,), n_classes, l2 and the
    normalised example weights (n,)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or not np.isfinite(x).all():
        raise ValueError(f"`features` must be a finite 2-D array (n_samples, n_features) with a row; got shape "
                         f"{x.shape}")
    y = np.asarray(labels)
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"`labels` must be integers of shape ({x.shape[0]},), one per row of `features`; got "
                         f"{y.dtype} of shape {y.shape}")
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
        raise ValueError(f"`n_classes` must be an integer >= 2; got {n_classes!r}")
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(f"`labels` must be in [0, {n_classes - 1}] (`n_classes` {n_classes}); got labels in "
                         f"[{y.min()}, {y.max()}]")
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not np.isfinite(l2) or l2 <= 0:
        raise ValueError(f"`l2` must be a finite number > 0 (it makes the objective strictly convex, with one "
                         f"minimiser); got {l2!r}")
    if weights is None:
        w = np.full(x.shape[0], 1.0 / x.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (x.shape[0],) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"`weights` must be finite, >= 0, not all 0, of shape ({x.shape[0]},); got shape "
                             f"{w.shape}")
        w = w / w.sum()
    return x, y.astype(np.int64), int(n_classes), float(l2), w


def softmax_objective(features: ArrayLike, labels: ArrayLike, *, n_classes: int, l2: float,
                      weights: ArrayLike | None = None) -> ValueGradHess:
    """The pooled objective of a softmax regression, as ``theta -> (value, gradient, Hessian)``.

    ``f(theta) = sum_i w_i CE(W x_i + b, y_i) + (l2 / 2) (||W||^2 + ||b||^2)``, with CE the
    cross-entropy of the softmax of the logits and ``w_i`` the example weights (summing to
    1). The L2 term penalises every parameter, the bias included: the objective is then
    strictly convex (its Hessian is at least ``l2 I``) and has one minimiser; without a
    penalty on the bias, adding one constant to every class's bias would change nothing.
    Pooled over clients with every example weighted ``1 / n`` (the default), f is the
    clients' objectives (each a mean over its own examples plus the same L2 term) averaged
    with weights proportional to their sizes.

    ``theta`` is ``W`` (n_classes, n_features) row by row, then ``b`` (n_classes,): the order
    a dump stores a ``torch.nn.Linear(n_features, n_classes)`` in. Everything is float64.

    Parameters
    ----------
    features : array-like of shape (n_samples, n_features)
    labels : array-like of int of shape (n_samples,)
        Classes in [0, n_classes).
    n_classes : int
    l2 : float
        The L2 coefficient, > 0.
    weights : array-like of shape (n_samples,), optional
        Each example's weight in the data term, normalised to sum to 1; None: ``1 / n`` each.

    Returns
    -------
    callable
        ``theta -> (value, gradient (P,), Hessian (P, P))`` with ``P = n_classes (n_features + 1)``.
    """
    x, y, k, l2, w = _softmax_iv(features, labels, n_classes, l2, weights)
    n, d = x.shape
    xt = np.hstack([x, np.ones((n, 1))])  # the bias as a feature of value 1: parameters (k, d + 1)
    onehot = np.zeros((n, k))
    onehot[np.arange(n), y] = 1.0
    size = k * (d + 1)
    # the dump's order (W row by row, then b) from the augmented matrix's (row by row, bias last)
    order = np.concatenate([(np.arange(k)[:, None] * (d + 1) + np.arange(d)[None, :]).reshape(-1),
                            np.arange(k) * (d + 1) + d])

    def value_grad_hess(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        theta = np.asarray(theta, dtype=np.float64).reshape(-1)
        if theta.shape != (size,):
            raise ValueError(f"`theta` must have {size} entries (n_classes * (n_features + 1)); got {theta.shape}")
        augmented = np.empty(size)
        augmented[order] = theta
        wt = augmented.reshape(k, d + 1)
        logits = xt @ wt.T  # (n, k)
        top = logits.max(axis=1, keepdims=True)
        shifted = logits - top
        lse = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        prob = np.exp(shifted - lse)
        value = float(w @ (lse[:, 0] - shifted[np.arange(n), y])) + 0.5 * l2 * float(theta @ theta)
        resid = (prob - onehot) * w[:, None]  # (n, k)
        grad_aug = resid.T @ xt  # (k, d + 1)
        # H = sum_i w_i (diag(p_i) - p_i p_i') kron x_i x_i' + l2 I, from the rows p_i kron x_i
        outer = (prob[:, :, None] * xt[:, None, :]).reshape(n, size)
        weighted = outer * w[:, None]
        hess = -(weighted.T @ outer)
        blocks = (weighted.T @ xt).reshape(k, d + 1, d + 1)  # sum_i w_i p_ic x_i x_i' for every class c
        for c in range(k):
            hess[c * (d + 1):(c + 1) * (d + 1), c * (d + 1):(c + 1) * (d + 1)] += blocks[c]
        hess = hess[np.ix_(order, order)] + l2 * np.eye(size)
        return value, grad_aug.reshape(-1)[order] + l2 * theta, 0.5 * (hess + hess.T)

    return value_grad_hess


def softmax_optimum(features: ArrayLike, labels: ArrayLike, *, n_classes: int, l2: float,
                    weights: ArrayLike | None = None, tol: float = TOL, max_iter: int = 100) -> ConvexMinimum:
    """The minimiser theta* of :func:`softmax_objective`, by :func:`minimize_convex` from zero.

    Parameters
    ----------
    features, labels, n_classes, l2, weights
        As for :func:`softmax_objective`.
    tol : float, default=1e-8
        The gradient norm to reach.
    max_iter : int, default=100
        Newton steps allowed.

    Returns
    -------
    ConvexMinimum
        theta* (W row by row, then b; float64), the gradient norm there (<= `tol`), the
        Newton steps and the objective's value.

    Examples
    --------
    Two separable points in one dimension: the L2 term keeps the weights finite, and the
    gradient at the minimiser is zero to 1e-8.

    >>> from mianalysis.tasks.convex import softmax_optimum
    >>> found = softmax_optimum([[-1.0], [1.0]], [0, 1], n_classes=2, l2=0.1)
    >>> found.theta.shape, found.grad_norm <= 1e-8
    ((4,), True)
    >>> bool(found.theta[1] > 0 > found.theta[0])  # class 1's weight is the larger
    True
    """
    objective = softmax_objective(features, labels, n_classes=n_classes, l2=l2, weights=weights)
    d = np.asarray(features).shape[1]
    return minimize_convex(objective, np.zeros(int(n_classes) * (d + 1)), tol=tol, max_iter=max_iter)
