"""float64 KSG counts from float32 distances checked in float64 (_checked_kernels.py): the
counts must equal the float64 kernels' exactly, on data that put samples at a threshold
(lattices, rounded values) as well as on continuous data."""

import numpy as np
import pytest

from mianalysis.estimators import _checked_kernels, _kernels
from mianalysis.estimators._checked_kernels import checked_neighbour_counts, float32_copy
from mianalysis.estimators._neighbours import (CHECKED_MIN_FEATURES, CHECKED_MIN_SAMPLES, ksg_counts,
                                               ksg_counts_symmetric)


def _float64_counts(x, y, k, algorithm):
    return _kernels.ksg_neighbour_counts(x, y, np.ascontiguousarray(x.T), np.ascontiguousarray(y.T), k, algorithm)


def _data(kind, rng):
    if kind == "gaussian":
        x = rng.standard_normal((600, 4))
        return x, 0.6 * x[:, :2] + rng.standard_normal((600, 2))
    if kind == "lattice":  # integer values: many samples exactly at the k-th distance
        x = rng.integers(0, 5, (600, 3)).astype(float)
        return x, x[:, :2] + rng.integers(0, 3, (600, 2))
    if kind == "rounded":  # a grid of 0.01: distances repeat, and float32 cannot tell 0.07 from 0.0700001
        x = np.round(rng.standard_normal((600, 5)), 2)
        return x, np.round(x + rng.standard_normal((600, 5)), 2)
    if kind == "offset-heavy-tailed":  # 1e4 + N(0, 1) (centred before the cast) beside Cauchy
        return 1e4 + rng.standard_normal((600, 3)), rng.standard_cauchy((600, 3))
    if kind == "scales-apart":  # y's distances far below x's tolerance: each side needs its own
        x = 1e6 * rng.standard_normal((600, 2))
        return x, 1e-6 * x + rng.standard_normal((600, 2))
    if kind == "noise-broken-ties":  # a lattice with tie-breaking noise far below the tolerance
        x = rng.integers(0, 4, (600, 2)) + 1e-10 * rng.standard_normal((600, 2))
        return x, x + rng.integers(0, 2, (600, 2)) + 1e-10 * rng.standard_normal((600, 2))
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["gaussian", "lattice", "rounded", "offset-heavy-tailed", "scales-apart",
                                  "noise-broken-ties"])
@pytest.mark.parametrize("k", [1, 3, 40])  # 40 > INSERTION_MAX_K: the partition route
@pytest.mark.parametrize("algorithm", [1, 2])
def test_checked_counts_equal_float64_counts(kind, k, algorithm):
    x, y = _data(kind, np.random.default_rng(5))
    (x32, tol_x), (y32, tol_y) = float32_copy(x), float32_copy(y)
    expected = _float64_counts(x, y, k, algorithm)
    direct = checked_neighbour_counts(x, y, x32, y32, np.ascontiguousarray(x32.T), np.ascontiguousarray(y32.T),
                                      tol_x, tol_y, k, algorithm)
    cached = ksg_counts_symmetric(x, y, k, algorithm, (x32, y32, tol_x, tol_y))
    for got in (direct, cached):
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_float32_distances_lie_within_the_tolerance():
    """The bound the checks rest on: |dx32 - dx64| < tol for every pair, on columns of
    mixed scales and offsets (the largest centred scale sets tol)."""
    rng = np.random.default_rng(2)
    scales = np.array([1e-3, 1.0, 7e2])
    x = rng.standard_normal((300, 3)) * scales + np.array([5e3, -2.0, 0.0])
    y = rng.standard_t(2, (300, 2))
    for a in (x, y):
        a32, tol = float32_copy(a)
        d64 = np.abs(a[:, None, :] - a[None, :, :]).max(axis=2)
        d32 = np.abs(a32[:, None, :] - a32[None, :, :]).max(axis=2).astype(np.float64)
        err = np.abs(d32 - d64).max()
        assert 0 < err < tol
        assert tol < 1e-3 * d64.max()  # not so loose that every comparison is rechecked


def test_float32_copy_refuses_scales_float32_cannot_hold():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 2))
    assert float32_copy(1e-30 * x) is None  # below 2^-60
    assert float32_copy(1e30 * x) is None  # above 2^60
    assert float32_copy(2.0**62 + 1e4 * x) is not None  # an offset beyond 2^60 is centred away


def test_float32_copy_centres_on_the_midrange_in_chunks(monkeypatch):
    monkeypatch.setattr(_checked_kernels, "CAST_ROWS", 7)  # several chunks and a short last one
    a = np.random.default_rng(3).standard_normal((30, 3)) * [1.0, 5.0, 0.1] + [10.0, -3.0, 0.0]
    copy, tol = float32_copy(a)
    centred = a - (a.min(axis=0) + a.max(axis=0)) / 2
    np.testing.assert_array_equal(copy, centred.astype(np.float32))
    assert tol == pytest.approx(5 * 2.0**-24 * np.abs(centred).max(), rel=1e-12)


def test_ksg_counts_takes_the_checked_route_for_float64_from_its_threshold(monkeypatch):
    calls = []
    real = _checked_kernels.checked_neighbour_counts

    def spy(*args):
        calls.append(args[0].shape[0])
        return real(*args)

    monkeypatch.setattr(_checked_kernels, "checked_neighbour_counts", spy)
    rng = np.random.default_rng(1)
    d_x = CHECKED_MIN_FEATURES // 2
    for n, d_y in ((CHECKED_MIN_SAMPLES - 1, d_x), (CHECKED_MIN_SAMPLES, d_x - 1), (CHECKED_MIN_SAMPLES, d_x)):
        x = rng.standard_normal((n, d_x))
        y = x[:, :1] + rng.standard_normal((n, d_y))
        got = ksg_counts(x, y, 3, 1, "float64", distance_cache=False)
        expected = _float64_counts(x, y, 3, 1)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
        ksg_counts(x.astype(np.float32), y.astype(np.float32), 3, 1, "float32", distance_cache=False)
    assert calls == [CHECKED_MIN_SAMPLES]  # float64 at both thresholds only; float32 data never


@pytest.mark.parametrize("kept_size", [1, 4, 128])  # 1 and 4: the scan keeps more than its work space holds
@pytest.mark.parametrize("algorithm", [1, 2])
def test_rows_whose_candidates_overflow_the_work_space_count_the_same(kept_size, algorithm):
    x, y = _data("lattice", np.random.default_rng(7))  # many samples tie at the k-th distance
    (x32, tol_x), (y32, tol_y) = float32_copy(x), float32_copy(y)
    expected = _float64_counts(x, y, 3, algorithm)
    kept = np.empty(kept_size, dtype=np.int64)
    kept_x, kept_y = np.empty(kept_size), np.empty(kept_size)
    for i in range(0, x.shape[0], 37):
        dx = np.abs(x32 - x32[i]).max(axis=1)
        dy = np.abs(y32 - y32[i]).max(axis=1)
        got = _checked_kernels.checked_row_counts(dx, dy, x, y, i, 3, algorithm, tol_x, tol_y,
                                                  np.empty(3, np.float32), np.empty(3), kept, kept_x, kept_y)
        assert got == (expected[0][i], expected[1][i])
