import numpy as np
import pytest
from scipy.spatial import distance

from mianalysis import mean_paired_distance, paired_distances

SCIPY = {"euclidean": distance.euclidean, "manhattan": distance.cityblock, "chebyshev": distance.chebyshev}


@pytest.mark.parametrize("metric", sorted(SCIPY))
def test_agrees_with_scipy(metric, rng):
    x = rng.standard_normal((50, 13))
    y = rng.standard_normal((50, 13))
    want = np.array([SCIPY[metric](a, b) for a, b in zip(x, y)])
    np.testing.assert_allclose(paired_distances(x, y, metric), want, rtol=1e-12)
    assert mean_paired_distance(x, y, metric) == pytest.approx(want.mean(), rel=1e-12)


def test_hand_computed_example():
    x = [[0.0, 0.0], [1.0, 1.0]]
    y = [[3.0, -4.0], [1.0, 2.0]]
    np.testing.assert_array_equal(paired_distances(x, y, "euclidean"), [5.0, 1.0])
    np.testing.assert_array_equal(paired_distances(x, y, "manhattan"), [7.0, 1.0])
    np.testing.assert_array_equal(paired_distances(x, y, "chebyshev"), [4.0, 1.0])


def test_one_dimensional_input_is_one_feature():
    np.testing.assert_array_equal(paired_distances([1.0, 2.0, 5.0], [0.0, 4.0, 5.0], "manhattan"), [1, 2, 0])


def test_ordering_of_metrics(rng):
    x = rng.standard_normal((100, 7))
    y = rng.standard_normal((100, 7))
    che = paired_distances(x, y, "chebyshev")
    euc = paired_distances(x, y, "euclidean")
    man = paired_distances(x, y, "manhattan")
    assert np.all(che <= euc + 1e-12) and np.all(euc <= man + 1e-12)


def test_shape_mismatch_is_an_error(rng):
    with pytest.raises(ValueError, match=r"`x` and `y` must have the same shape .* \(5, 3\) and \(5, 2\)"):
        paired_distances(np.zeros((5, 3)), np.zeros((5, 2)))
