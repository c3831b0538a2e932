"""The float64 Newton solver and the softmax-regression objective (mianalysis.tasks.convex).

Known answers: a quadratic's minimiser ``A^-1 b`` in one step; finite differences of the
objective for its gradient and Hessian; example weights equal to duplicated examples; the
gradient at theta* recomputed here from the formula (<= 1e-8); scikit-learn's
LogisticRegression (multinomial, every coefficient penalised) as an independent solver; and
the gate of issue 51: gaussian-sgd's theta* through the same solver equals its closed form
(``GaussianSGDTask.central_parameters``) to 1e-8.
"""

from __future__ import annotations

import numpy as np
import pytest

from mianalysis.tasks.convex import TOL, minimize_convex, softmax_objective, softmax_optimum


def _quadratic(a, b):
    return lambda x: (0.5 * x @ a @ x - b @ x, a @ x - b, a)


def _pooled_gradient(theta, x, y, l2, weights=None):
    """The pooled objective's gradient written out here, independently of the module:
    ``sum_i w_i (softmax(W x_i + b) - e_{y_i}) [x_i, 1]' + l2 theta`` in the dump's order."""
    n, d = x.shape
    k = theta.size // (d + 1)
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float) / np.sum(weights)
    weight, bias = theta[:k * d].reshape(k, d), theta[k * d:]
    z = x @ weight.T + bias
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(n), y] -= 1.0
    p *= w[:, None]
    return np.concatenate([(p.T @ x).ravel(), p.sum(0)]) + l2 * theta


@pytest.fixture(scope="module")
def digits():
    """600 of scikit-learn's digits, features in [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data[:600] / 16.0, data.target[:600]


# ---------------------------------------------------------------------------- the solver
def test_quadratic_minimiser_in_one_newton_step():
    a = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    b = np.array([1.0, -2.0, 0.5])
    found = minimize_convex(_quadratic(a, b), np.array([5.0, 5.0, 5.0]))
    np.testing.assert_allclose(found.theta, np.linalg.solve(a, b), rtol=0, atol=1e-12)
    assert found.iterations == 1 and found.grad_norm <= TOL == 1e-8
    assert found.value == pytest.approx(-0.5 * b @ np.linalg.solve(a, b), abs=1e-12)


def test_backtracking_reaches_the_minimiser_of_a_function_whose_full_newton_step_overshoots():
    # f(x) = sqrt(1 + x^2): Newton's full step from x goes to -x^3, diverging from |x| > 1;
    # the line search brings it to 0.
    def f(x):
        s = np.sqrt(1 + x @ x)
        return s, x / s, np.eye(1) / s**3

    found = minimize_convex(f, np.array([3.0]))
    assert abs(found.theta[0]) <= 1e-8 and found.grad_norm <= 1e-8


def test_start_at_the_minimiser_takes_no_step():
    a, b = np.eye(2), np.array([1.0, 2.0])
    found = minimize_convex(_quadratic(a, b), b)
    assert found.iterations == 0 and found.grad_norm == 0.0


def test_refusals_name_the_problem(digits):
    x, y = digits
    with pytest.raises(ValueError, match=r"did not reach a gradient norm <= 1e-08 in 1 Newton steps \(reached"):
        softmax_optimum(x, y, n_classes=10, l2=1e-3, max_iter=1)
    concave = lambda t: (-(t @ t), -2 * t, -2 * np.eye(t.size))  # noqa: E731
    with pytest.raises(ValueError, match="Hessian is not positive definite after 0 Newton steps"):
        minimize_convex(concave, np.ones(2))
    with pytest.raises(ValueError, match=r"gradient of shape \(2,\) and a Hessian of shape \(2, 2\)"):
        minimize_convex(lambda t: (0.0, np.zeros(3), np.eye(2)), np.ones(2))
    with pytest.raises(ValueError, match="non-finite value"):
        minimize_convex(lambda t: (np.nan, t, np.eye(2)), np.ones(2))
    with pytest.raises(ValueError, match="`tol` must be a finite number > 0"):
        minimize_convex(_quadratic(np.eye(1), np.ones(1)), np.zeros(1), tol=0)
    with pytest.raises(ValueError, match="`max_iter` must be an integer >= 0"):
        minimize_convex(_quadratic(np.eye(1), np.ones(1)), np.zeros(1), max_iter=-1)


# ---------------------------------------------------------------------------- the softmax objective
def test_gradient_and_hessian_match_finite_differences():
    rng = np.random.default_rng(0)
    x, y = rng.random((30, 4)), rng.integers(0, 3, 30)
    f = softmax_objective(x, y, n_classes=3, l2=0.1, weights=rng.random(30))
    theta = rng.standard_normal(15)
    _, grad, hess = f(theta)
    h, eye = 1e-6, np.eye(15)
    grad_fd = np.array([(f(theta + h * e)[0] - f(theta - h * e)[0]) / (2 * h) for e in eye])
    hess_fd = np.array([(f(theta + h * e)[1] - f(theta - h * e)[1]) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad, grad_fd, atol=1e-8)
    np.testing.assert_allclose(hess, hess_fd, atol=1e-8)
    np.testing.assert_array_equal(hess, hess.T)


def test_value_at_zero_is_log_n_classes():
    # every class equally likely: the cross-entropy is log K, the penalty 0
    x, y = np.random.default_rng(1).random((12, 5)), np.arange(12) % 4
    value, _, hess = softmax_objective(x, y, n_classes=4, l2=0.5)(np.zeros(24))
    assert value == pytest.approx(np.log(4), abs=1e-15)
    assert np.linalg.eigvalsh(hess)[0] >= 0.5 - 1e-12  # the L2 term, on every parameter


def test_parameter_order_is_torch_linear_weight_then_bias():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x, y = rng.random((9, 3)), rng.integers(0, 2, 9)
    layer = torch.nn.Linear(3, 2).double()
    theta = torch.cat([layer.weight.reshape(-1), layer.bias]).detach().numpy()
    loss = torch.nn.functional.cross_entropy(layer(torch.from_numpy(x)), torch.from_numpy(y))
    loss = loss + 0.05 * sum(p.pow(2).sum() for p in layer.parameters())
    loss.backward()
    grad = torch.cat([layer.weight.grad.reshape(-1), layer.bias.grad]).numpy()
    value, mine, _ = softmax_objective(x, y, n_classes=2, l2=0.1)(theta)
    assert value == pytest.approx(float(loss.detach()), abs=1e-14)
    np.testing.assert_allclose(mine, grad, atol=1e-14)


def test_example_weights_are_duplicated_examples():
    rng = np.random.default_rng(3)
    x, y = rng.random((10, 3)), rng.integers(0, 3, 10)
    counts = rng.integers(1, 4, 10)
    weighted = softmax_optimum(x, y, n_classes=3, l2=0.01, weights=counts)
    repeated = softmax_optimum(np.repeat(x, counts, 0), np.repeat(y, counts), n_classes=3, l2=0.01)
    np.testing.assert_allclose(weighted.theta, repeated.theta, atol=1e-9)


def test_optimum_gradient_recomputed_here_is_below_1e8(digits):
    x, y = digits
    for l2 in (1e-3, 1e-2):
        found = softmax_optimum(x, y, n_classes=10, l2=l2)
        assert found.theta.shape == (650,)
        assert np.linalg.norm(_pooled_gradient(found.theta, x, y, l2)) <= 1e-8
        assert found.grad_norm <= 1e-8


def test_optimum_agrees_with_scikit_learn(digits):
    # scikit-learn minimises 0.5 ||coef||^2 + C sum_i CE_i: with C = 1 / (n l2) and the bias
    # as a feature of value 1 (so that it is penalised too), the same minimiser.
    from sklearn.linear_model import LogisticRegression

    x, y = digits
    l2 = 1e-2
    found = softmax_optimum(x, y, n_classes=10, l2=l2)
    model = LogisticRegression(C=1 / (len(x) * l2), fit_intercept=False, solver="newton-cg", tol=1e-12,
                               max_iter=10_000).fit(np.hstack([x, np.ones((len(x), 1))]), y)
    theirs = np.concatenate([model.coef_[:, :64].ravel(), model.coef_[:, 64]])
    np.testing.assert_allclose(found.theta, theirs, rtol=0, atol=1e-5)


def test_refused_inputs():
    x, y = np.ones((3, 2)), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="`l2` must be a finite number > 0"):
        softmax_objective(x, y, n_classes=2, l2=0.0)
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, 1\]"):
        softmax_objective(x, np.array([0, 1, 2]), n_classes=2, l2=1.0)
    with pytest.raises(ValueError, match=r"`labels` must be integers of shape \(3,\)"):
        softmax_objective(x, np.array([0.0, 1.0, 1.0]), n_classes=2, l2=1.0)
    with pytest.raises(ValueError, match="`n_classes` must be an integer >= 2"):
        softmax_objective(x, y, n_classes=1, l2=1.0)
    with pytest.raises(ValueError, match="`weights` must be finite, >= 0"):
        softmax_objective(x, y, n_classes=2, l2=1.0, weights=[1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="`features` must be a finite 2-D array"):
        softmax_objective(np.ones(3), y, n_classes=2, l2=1.0)
    with pytest.raises(ValueError, match="`theta` must have 6 entries"):
        softmax_objective(x, y, n_classes=2, l2=1.0)(np.zeros(5))


# ---------------------------------------------------------------------------- the gate (issue 51)
@pytest.mark.parametrize("settings", [{}, {"heterogeneity": 0.3}, {"curvature": "diagonal", "d": 7, "n_clients": 4}])
def test_gaussian_sgd_optimum_through_the_solver_is_its_closed_form(settings):
    pytest.importorskip("torch")
    from mianalysis.sampling import ParameterSampler
    from mianalysis.tasks import GaussianSGDTask

    task = GaussianSGDTask(**settings)
    sampler = ParameterSampler(task, seed=4, progress=False)
    runs = range(10)
    theta, grad_norm = task.optimum([sampler.data_generators(runs, c) for c in range(task.n_clients)])
    closed = task.central_parameters([sampler.data_generators(runs, c) for c in range(task.n_clients)])
    assert theta.shape == closed.shape == (10, task.d)
    assert np.abs(theta - closed).max() <= 1e-8  # measured: ~2e-15
    assert (grad_norm <= 1e-8).all()
    # the gradient of the pooled objective at theta*, recomputed here from the clients' problems
    # and their targets mu_k = m_k + tau z (z drawn first from each run's data generator, float32)
    import torch

    targets = [np.stack([(torch.from_numpy(task.client_problem(c)[1].astype(np.float32))
                          + float(task.settings["tau"]) * torch.randn(task.d, generator=g)).numpy()
                         for g in sampler.data_generators(runs, c)]).astype(np.float64) for c in range(task.n_clients)]
    grads = sum(task.client_problem(c)[0] @ (theta - targets[c]).T for c in range(task.n_clients)) / task.n_clients
    assert np.linalg.norm(grads, axis=0).max() <= 1e-8
