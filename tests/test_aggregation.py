import numpy as np
import pytest
from scipy.stats import trim_mean

torch = pytest.importorskip("torch")

from mianalysis.federated.aggregation import (  # noqa: E402
    and_mask, fedavg, fedsgd, geometric_mask, median, trimmed_mean,
)
from mianalysis.federated.registry import get_rule, rule_names  # noqa: E402

SEED_GRADS = np.array([[1.0, 3.0, 5.0], [0.0, 3.0, -5.0]])
# The curvature rules need each client's precisions too: tests/test_curvature_rules.py.
RULES = {name: get_rule(name).bind() for name in rule_names() if get_rule(name).side_information is None}
RULES["trimmed_mean"] = get_rule("trimmed_mean").bind({"beta": 0.2})


def test_seed_worked_examples():
    # The AND-mask and geometric-mask examples worked by hand in seed 000.
    np.testing.assert_allclose(and_mask(SEED_GRADS, threshold=0.2), [0.75, 4.5, 0.0], rtol=1e-9)
    np.testing.assert_allclose(geometric_mask(SEED_GRADS, threshold=0.2), [1.5e-05, 4.5, 0.0], rtol=1e-6)


def test_masks_without_rescaling():
    np.testing.assert_allclose(and_mask(SEED_GRADS, 0.2, rescale=False), [0.5, 3.0, 0.0])
    np.testing.assert_allclose(geometric_mask(SEED_GRADS, 0.2, rescale=False), [1e-5, 3.0, 0.0], rtol=1e-6)
    # A threshold above the agreement masks everything.
    np.testing.assert_array_equal(and_mask(SEED_GRADS, 1.0, rescale=False), [0.0, 3.0, 0.0])


def test_three_hand_made_clients():
    x = np.array([[1.0, -2.0], [2.0, -4.0], [6.0, 3.0]])
    np.testing.assert_allclose(fedavg(x), [3.0, -1.0])
    np.testing.assert_allclose(fedavg(x, weights=[1, 1, 2]), [3.75, -0.0])
    np.testing.assert_allclose(fedsgd(x, weights=[2, 0, 0]), [1.0, -2.0])
    np.testing.assert_allclose(median(x), [2.0, -2.0])
    np.testing.assert_allclose(median(x, weights=[1, 1, 3]), [6.0, 3.0])


@pytest.mark.parametrize("n", [4, 5, 10])
@pytest.mark.parametrize("beta", [0.0, 0.2])
def test_trimmed_mean_equals_scipy_when_cut_is_whole(n, beta, rng):
    x = rng.standard_normal((n, 6))
    if (beta * n) % 1 == 0:
        np.testing.assert_allclose(trimmed_mean(x, beta), trim_mean(x, beta), rtol=1e-12)


def test_median_equals_numpy(rng):
    for n in (1, 2, 5, 6):
        x = rng.standard_normal((n, 7))
        np.testing.assert_allclose(median(x), np.median(x, axis=0), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(RULES))
def test_identical_clients_give_that_client(name, rng):
    v = rng.uniform(0.5, 2.0, size=8) * rng.choice([-1, 1], size=8)  # no zeros
    np.testing.assert_allclose(RULES[name](np.tile(v, (4, 1))), v, rtol=1e-8)


@pytest.mark.parametrize("name", sorted(RULES))
def test_client_order_does_not_matter(name, rng):
    x = rng.standard_normal((6, 9))
    w = rng.integers(1, 5, size=6).astype(float)
    perm = rng.permutation(6)
    np.testing.assert_allclose(RULES[name](x[perm], weights=w[perm]), RULES[name](x, weights=w), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(RULES))
def test_equal_weights_equal_unweighted(name, rng):
    x = rng.standard_normal((5, 9))
    np.testing.assert_allclose(RULES[name](x, weights=np.full(5, 3.0)), RULES[name](x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(RULES))
def test_integer_weights_equal_repeated_clients(name, rng):
    x = rng.standard_normal((4, 9))
    w = np.array([1, 3, 2, 1])
    np.testing.assert_allclose(RULES[name](x, weights=w), RULES[name](np.repeat(x, w, axis=0)), rtol=1e-10, atol=1e-12)


def test_torch_in_torch_out():
    g = torch.tensor(SEED_GRADS, dtype=torch.float32)
    out = and_mask(g)
    assert torch.is_tensor(out) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([0.75, 4.5, 0.0]))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: get_rule("krum"), ValueError, "`aggregator` must be one of 'and_mask', 'fedavg', 'fedsgd'"),
        (lambda: fedavg(np.zeros((0, 3))), ValueError, r"`stacked` must have shape \(n_clients, n_params\)"),
        (lambda: fedavg(np.array([[np.nan, 1.0]])), ValueError, "`stacked` contains 1 non-finite values"),
        (lambda: fedavg(np.array([["a"]])), TypeError, "`stacked` must be numeric"),
        (lambda: fedavg(np.ones((3, 2)), weights=[1, 2]), ValueError, r"`weights` must have shape \(3,\)"),
        (lambda: fedavg(np.ones((2, 2)), weights=[-1, 2]), ValueError, "`weights` must be finite, >= 0"),
        (lambda: trimmed_mean(np.ones((3, 2)), beta=0.5), ValueError, r"`beta` must be a finite number in \[0, 0.5\)"),
        (lambda: and_mask(np.ones((3, 2)), threshold=1.5), ValueError, r"`threshold` must be a finite number in \[0, 1\]"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name", sorted(RULES))
def test_leading_batch_dimensions_apply_per_entry(name, rng):
    x = rng.standard_normal((3, 5, 7))  # 3 replicates of 5 clients
    x[1, :, :2] = np.abs(x[1, :, :2])  # a replicate whose masks differ from the others
    w = np.array([1.0, 2.0, 1.0, 3.0, 1.0])
    batched = RULES[name](x, weights=w)
    assert batched.shape == (3, 7)
    for i in range(3):
        np.testing.assert_allclose(batched[i], RULES[name](x[i], weights=w), rtol=1e-12, atol=1e-14)
