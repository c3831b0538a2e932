"""Arrays given as (features, runs) are named as such: the error suggests the transpose."""

import numpy as np
import pytest

from mianalysis import gaussian_mi, ksg_mi


def test_ksg_on_features_by_runs_suggests_the_transpose():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 1000)), rng.standard_normal((3, 1000))
    with pytest.raises(ValueError, match=r"`k` must be in \[1, 2\]; got 3.*\(features, runs\) need their "
                                         r"transpose \(x\.T, y\.T\)"):
        ksg_mi(x, y)
    assert np.isfinite(ksg_mi(x.T, y.T))


def test_one_sample_suggests_the_transpose():
    with pytest.raises(ValueError, match=r"need at least 2 samples \(rows\); got 1; each row is one sample"):
        gaussian_mi(np.ones((1, 50)), np.ones((1, 50)))
