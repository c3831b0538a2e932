"""Curvature-weighted aggregation: Fisher merging and inverse-variance (FedPA-style) rules,
the clients' side information in the simulator, FedRule, and the headroom experiment."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.federated.aggregation import (  # noqa: E402
    SIDE_INFORMATION, fedavg, fisher_weighted, get_aggregator, inverse_variance,
)

X = np.array([[0.0, 2.0, 1.0], [4.0, 6.0, -3.0]])


# ------------------------------------------------------------------ the rules
def test_fisher_weighted_hand_computed():
    f = np.array([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    # coordinate 0: (0*1 + 4*3) / 4 = 3; coordinate 1: no information anywhere -> mean 4;
    # coordinate 2: equal precisions -> mean -1.
    np.testing.assert_allclose(fisher_weighted(X, f, eps=0), [3.0, 4.0, -1.0], rtol=1e-15)
    # weights multiply the precisions: (0*1*1 + 4*3*2) / (1 + 6) = 24 / 7.
    np.testing.assert_allclose(fisher_weighted(X, f, weights=[1, 2], eps=0), [24 / 7, 14 / 3, -5 / 3], rtol=1e-15)
    # damping: F + eps; with eps = 1 coordinate 0 is (0*2 + 4*4) / 6.
    np.testing.assert_allclose(fisher_weighted(X, f, eps=1.0), [16 / 6, 4.0, -1.0], rtol=1e-15)


def test_inverse_variance_hand_computed():
    v = np.array([[3.0, 1.0, 0.5], [1.0, 1.0, 0.5]])
    # coordinate 0: precisions 1/3 and 1: (0/3 + 4) / (4/3) = 3.
    np.testing.assert_allclose(inverse_variance(X, v, eps=0), [3.0, 4.0, -1.0], rtol=1e-15)
    # the same as fisher_weighted with precisions 1 / (var + eps)
    np.testing.assert_allclose(inverse_variance(X, v, eps=0.5), fisher_weighted(X, 1 / (v + 0.5), eps=0), rtol=1e-15)


@pytest.mark.parametrize("weighted", [False, True])
def test_equal_precisions_give_fedavg_exactly(weighted, rng):
    x = rng.standard_normal((3, 6, 11))  # 3 replicates of 6 clients
    w = rng.integers(1, 9, 6).astype(float) if weighted else None
    for value in (1e-3, 0.37, 5.0):
        np.testing.assert_array_equal(fisher_weighted(x, np.full_like(x, value), weights=w), fedavg(x, weights=w))
        np.testing.assert_array_equal(inverse_variance(x, np.full_like(x, value), weights=w), fedavg(x, weights=w))
    # no information anywhere (all F = 0): the plain weighted mean, with or without damping
    for eps in (0.0, 1e-8):
        np.testing.assert_array_equal(fisher_weighted(x, np.zeros_like(x), weights=w, eps=eps), fedavg(x, weights=w))


def test_infinite_precision_dominates():
    f = np.array([[np.inf, 1.0, np.inf], [1e6, 1.0, np.inf]])
    np.testing.assert_array_equal(fisher_weighted(X, f), [0.0, 4.0, -1.0])
    np.testing.assert_array_equal(fisher_weighted(X, f, weights=[1, 3]), [0.0, 5.0, -2.0])
    # zero variance without a floor is infinite precision
    v = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 2.0]])
    np.testing.assert_array_equal(inverse_variance(X, v, eps=0), [0.0, 4.0, -1.0])


def test_batch_dimensions_apply_per_entry(rng):
    x = rng.standard_normal((2, 3, 4, 5))
    f = rng.exponential(size=x.shape)
    w = np.array([1.0, 2.0, 3.0, 1.0])
    batched = fisher_weighted(x, f, weights=w)
    assert batched.shape == (2, 3, 5)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(batched[i, j], fisher_weighted(x[i, j], f[i, j], weights=w), rtol=1e-14)
    expected = (w[:, None] * f[1, 2] * x[1, 2]).sum(0) / (w[:, None] * f[1, 2]).sum(0)
    np.testing.assert_allclose(batched[1, 2], expected, rtol=1e-6)  # up to eps = 1e-8


def test_properties_of_a_rule(rng):
    """The generic properties tests/test_aggregation.py checks for every other rule."""
    x = rng.standard_normal((4, 9))
    f = rng.exponential(size=(4, 9))
    w = np.array([1, 3, 2, 1])
    for name in SIDE_INFORMATION:
        rule = get_aggregator(name)
        side = {SIDE_INFORMATION[name]: f}
        np.testing.assert_allclose(rule(np.tile(x[0], (4, 1)), **side), x[0], rtol=1e-12)
        perm = rng.permutation(4)
        np.testing.assert_allclose(rule(x[perm], weights=w[perm], **{SIDE_INFORMATION[name]: f[perm]}),
                                   rule(x, weights=w, **side), rtol=1e-12)
        np.testing.assert_allclose(rule(x, weights=np.full(4, 3.0), **side), rule(x, **side), rtol=1e-12)
        np.testing.assert_allclose(rule(x, weights=w, **side),
                                   rule(np.repeat(x, w, axis=0), **{SIDE_INFORMATION[name]: np.repeat(f, w, axis=0)}),
                                   rtol=1e-12)


def test_torch_in_torch_out():
    x = torch.tensor(X, dtype=torch.float32)
    f = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    out = fisher_weighted(x, f, eps=0)
    assert torch.is_tensor(out) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([3.0, 4.0, -1.0]))
    out = get_aggregator("inverse_variance", eps=0)(x.double(), variances=f.double() + 1)
    assert out.dtype == torch.float64


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: fisher_weighted(X, np.ones((2, 2))), ValueError,
         r"`precisions` must have the shape of `stacked`, \(2, 3\) .*; got \(2, 2\)"),
        (lambda: fisher_weighted(X, np.ones((3,))), ValueError, r"`precisions` must have the shape of `stacked`"),
        (lambda: fisher_weighted(X, -np.ones((2, 3))), ValueError, "`precisions` must be >= 0 .* got 6 values"),
        (lambda: fisher_weighted(X, np.full((2, 3), np.nan)), ValueError, "`precisions` must be >= 0 .*not NaN"),
        (lambda: fisher_weighted(X, np.array([["a"] * 3] * 2)), TypeError, "`precisions` must be numeric"),
        (lambda: inverse_variance(X, np.ones((1, 3))), ValueError, r"`variances` must have the shape of `stacked`"),
        (lambda: inverse_variance(X, -np.ones((2, 3))), ValueError, "`variances` must be >= 0"),
        (lambda: fisher_weighted(X, np.ones((2, 3)), eps=-1.0), ValueError, "`eps` must be a finite number >= 0"),
        (lambda: fisher_weighted(X, np.ones((2, 3)), weights=[1.0]), ValueError, r"`weights` must have shape \(2,\)"),
        (lambda: fisher_weighted(np.ones((2, 0)), np.ones((2, 0))), ValueError, "`stacked` must have shape"),
        (lambda: get_aggregator("fisher")(X), TypeError, "precisions"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
