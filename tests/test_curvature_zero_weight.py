"""The curvature rules with clients of weight 0 (issue 50, item 7): a client of weight 0 is
left out whatever its precision, so a coordinate whose only certain (infinite precision,
or variance 0 with eps=0) or only informed client has weight 0 is the rule over the
others, not 0 / 0 = NaN; on NumPy and torch inputs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.federated.aggregation import fedavg, fisher_weighted, inverse_variance  # noqa: E402

INF = np.inf
X = np.array([[0.0, 2.0, 1.0], [4.0, 6.0, -3.0], [8.0, 10.0, 5.0]])
W = np.array([0.0, 1.0, 3.0])
# Client 0 (weight 0) is certain at coordinates 0 and 2, and the only informed one at 1.
F = np.array([[INF, 1.0, INF], [1.0, 0.0, 2.0], [3.0, 0.0, INF]])
# The same precisions as variances (eps=0): 0 is infinite precision, inf is precision 0.
V = np.array([[0.0, 1.0, 0.0], [1.0, INF, 0.5], [1 / 3, INF, 0.0]])
# coordinate 0: clients 1 and 2 by w * F: (1*1*4 + 3*3*8) / (1 + 9) = 7.6
# coordinate 1: no information among clients 1 and 2: their weighted mean (6 + 3*10) / 4 = 9
# coordinate 2: client 2 is the only certain client of weight > 0: 5
EXPECTED = [7.6, 9.0, 5.0]


def test_fisher_weighted_leaves_out_a_certain_client_of_weight_zero():
    got = fisher_weighted(X, F, weights=W, eps=0)
    np.testing.assert_allclose(got, EXPECTED, rtol=1e-15)
    # the same as the rule without client 0
    np.testing.assert_allclose(got, fisher_weighted(X[1:], F[1:], weights=W[1:], eps=0), rtol=1e-15)


def test_inverse_variance_leaves_out_a_zero_variance_client_of_weight_zero():
    got = inverse_variance(X, V, weights=W, eps=0)
    np.testing.assert_allclose(got, EXPECTED, rtol=1e-15)
    np.testing.assert_allclose(got, inverse_variance(X[1:], V[1:], weights=W[1:], eps=0), rtol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_inputs_give_the_same_finite_answer(dtype):
    x = torch.tensor(X, dtype=dtype)
    w = torch.tensor(W, dtype=dtype)
    fisher = fisher_weighted(x, torch.tensor(F, dtype=dtype), weights=w, eps=0)
    variance = inverse_variance(x, torch.tensor(V, dtype=dtype), weights=w, eps=0)
    for got in (fisher, variance):
        assert torch.is_tensor(got) and got.dtype == dtype
        torch.testing.assert_close(got, torch.tensor(EXPECTED, dtype=dtype))


def test_only_the_zero_weight_client_is_certain_in_every_coordinate():
    # the case: the only certain client has weight 0; the others have no information
    f = np.array([[INF, INF], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(fisher_weighted(X[:, :2], f, weights=W, eps=0), fedavg(X[1:, :2], weights=W[1:]))
    v = np.array([[0.0, 0.0], [INF, INF], [INF, INF]])
    np.testing.assert_array_equal(inverse_variance(X[:, :2], v, weights=W, eps=0), [7.0, 9.0])
    got = inverse_variance(torch.tensor(X[:, :2]), torch.tensor(v), weights=torch.tensor(W), eps=0)
    torch.testing.assert_close(got, torch.tensor([7.0, 9.0], dtype=torch.float64))


def test_default_eps_and_batches(rng):
    # default eps: a certain client of weight 0 is left out in every batch entry
    x = rng.standard_normal((2, 4, 6))
    f = rng.exponential(size=x.shape)
    f[:, 0, ::2] = INF
    w = np.array([0.0, 2.0, 1.0, 3.0])
    got = fisher_weighted(x, f, weights=w)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, fisher_weighted(x[:, 1:], f[:, 1:], weights=w[1:]), rtol=1e-13)
    v = 1 / f
    got = inverse_variance(x, v, weights=w, eps=0)
    np.testing.assert_allclose(got, inverse_variance(x[:, 1:], v[:, 1:], weights=w[1:], eps=0), rtol=1e-13)


def test_weight_zero_is_leaving_the_client_out(rng):
    """An integer weight is that many copies of the client; weight 0, none."""
    x = rng.standard_normal((5, 7))
    f = rng.exponential(size=(5, 7))
    f[rng.random((5, 7)) < 0.3] = INF
    f[rng.random((5, 7)) < 0.3] = 0.0
    w = np.array([0, 2, 0, 1, 3])
    kept = w > 0
    np.testing.assert_allclose(fisher_weighted(x, f, weights=w, eps=0),
                               fisher_weighted(np.repeat(x, w, axis=0), np.repeat(f, w, axis=0), eps=0), rtol=1e-12)
    np.testing.assert_allclose(fisher_weighted(x, f, weights=w, eps=0),
                               fisher_weighted(x[kept], f[kept], weights=w[kept], eps=0), rtol=1e-12)


def test_all_weights_zero_is_still_refused():
    with pytest.raises(ValueError, match="`weights` must be finite, >= 0 and not all 0"):
        fisher_weighted(X, F, weights=[0, 0, 0], eps=0)
