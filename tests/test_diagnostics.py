import numpy as np
import pytest

from mianalysis.federated.diagnostics import eb_criterion


def test_two_samples_known_answer():
    # Rows a + s and a - s: mean a, variance 2 s^2, so EB = 1 - (2/D) sum a^2 / (2 s^2).
    a = np.array([1.0, 0.0, 2.0])
    s = np.array([1.0, 3.0, 4.0])
    eb = eb_criterion(np.stack([a + s, a - s]))
    assert eb == pytest.approx(1 - (1.0 + 0.0 + 0.25) / 3)


def test_pure_noise_is_near_zero_and_signal_is_negative():
    rng = np.random.default_rng(0)
    b, d = 64, 20000
    noise = rng.standard_normal((b, d))
    assert abs(eb_criterion(noise)) < 0.05
    # mean 1, sd 1 per component: EB ~ -B mu^2 / sigma^2 = -64
    assert eb_criterion(1.0 + noise) == pytest.approx(-b, rel=0.1)


def test_noiseless_components():
    g = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 2.0]])
    assert eb_criterion(g) == -np.inf
    g[:, 2] = 0.0  # constant zero components are skipped
    assert eb_criterion(g) == pytest.approx(1 - (2 / 3) * 4 / 2)


def test_bad_input():
    with pytest.raises(ValueError, match="needs at least 2 samples"):
        eb_criterion(np.ones((1, 4)))
    with pytest.raises(ValueError, match="`per_example_grads` contains non-finite values"):
        eb_criterion(np.array([[np.nan, 1.0], [1.0, 2.0]]))
