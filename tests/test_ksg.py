from pathlib import Path

import numba
import numpy as np
import pytest
from reference import correlated_gaussians, ksg_reference

from mianalysis import ksg_mi

MILCA_DATA = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "jidt-milca"


@pytest.mark.parametrize(
    "n, dx, dy, k",
    [
        (50, 1, 1, 1),
        (37, 2, 3, 3),  # n not a multiple of the 16-row group
        (120, 5, 1, 7),
        (200, 20, 20, 3),
        (100, 3, 2, 40),  # k above the insertion-selection limit
        (16, 1, 1, 15),  # k = n - 1
    ],
)
@pytest.mark.parametrize("algorithm", [1, 2])
def test_equals_reference_without_noise(n, dx, dy, k, algorithm, rng):
    x = rng.standard_normal((n, dx))
    y = 0.5 * x[:, :1] + rng.standard_normal((n, dy))
    got = ksg_mi(x, y, k=k, algorithm=algorithm, noise=0, units="nats")
    want = ksg_reference(x, y, k, algorithm)
    assert abs(got - want) < 1e-10


@pytest.mark.parametrize(
    "rho, n, d, k",
    [(0.0, 4000, 1, 3), (0.6, 4000, 1, 3), (0.9, 4000, 1, 3), (0.6, 4000, 2, 3), (0.6, 4000, 1, 10)],
)
@pytest.mark.parametrize("algorithm", [1, 2])
def test_close_to_analytic_gaussian_mi(rho, n, d, k, algorithm, rng):
    # In one or two dimensions per side KSG is nearly unbiased (Kraskov et al. 2004,
    # Fig. 4); at n = 4000 its standard deviation is ~0.01 nats, so 0.04 nats is ~4 sigma.
    x, y, exact = correlated_gaussians(n, d, d, rho, rng)
    got = ksg_mi(x, y, k=k, algorithm=algorithm, units="nats", random_state=0)
    assert abs(got - exact) < 0.04


def test_bits_are_nats_over_log2(rng):
    x, y, _ = correlated_gaussians(300, 2, 2, 0.7, rng)
    nats = ksg_mi(x, y, units="nats", noise=0)
    bits = ksg_mi(x, y, units="bits", noise=0)
    assert bits == pytest.approx(nats / np.log(2), rel=1e-12)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_symmetric_in_x_and_y_without_noise(algorithm, rng):
    x, y, _ = correlated_gaussians(500, 3, 5, 0.7, rng)
    assert ksg_mi(x, y, algorithm=algorithm, noise=0) == ksg_mi(y, x, algorithm=algorithm, noise=0)


def test_noise_is_seeded_and_breaks_ties(rng):
    # Values on a coarse grid have many exact ties; the noise separates them.
    x = rng.integers(0, 5, size=(400, 2)).astype(float)
    y = x + rng.integers(0, 2, size=(400, 2))
    a = ksg_mi(x, y, random_state=1)
    assert a == ksg_mi(x, y, random_state=1)
    assert a != ksg_mi(x, y, random_state=2)
    assert np.isfinite(a)


def test_noise_amplitude_scales_with_feature_std(rng):
    # Rescaling a feature rescales its noise: the max-norm result then changes only through
    # the rescaling itself, so a common rescaling of everything leaves MI unchanged.
    x, y, _ = correlated_gaussians(300, 2, 2, 0.8, rng)
    a = ksg_mi(x, y, random_state=3, noise=1e-3)
    b = ksg_mi(1000 * x, 1000 * y, random_state=3, noise=1e-3)
    assert a == pytest.approx(b, abs=1e-12)


def test_independent_of_thread_count(rng):
    x, y, _ = correlated_gaussians(700, 30, 30, 0.3, rng)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = ksg_mi(x, y, noise=0)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = ksg_mi(x, y, noise=0)
    finally:
        numba.set_num_threads(before)
    assert one == many


def test_float32_agrees_with_float64(rng):
    x, y, _ = correlated_gaussians(2000, 10, 10, 0.5, rng)
    f64 = ksg_mi(x, y, units="nats", random_state=0)
    f32 = ksg_mi(x, y, units="nats", random_state=0, dtype="float32")
    assert abs(f64 - f32) < 1e-3


def test_high_dimensional_estimate_returned_as_is(rng):
    # KSG is biased in high dimensions: whatever the sign, the estimate is the reference's.
    x, y, _ = correlated_gaussians(150, 40, 40, 0.0, rng)
    assert ksg_mi(x, y, noise=0, units="nats") == pytest.approx(ksg_reference(x, y, 3, 1), abs=1e-10)


# Values computed by Kraskov's own MILCA program (algorithm 2, nats, on standardised
# columns), as recorded in JIDT's unit tests for these data files.
MILCA_CASES = [
    ("4ColsPairedDirectDependence-1.txt", [0, 1], [2, 3], [1, 2, 3, 4, 5, 6, 10, 15],
     [5.00322122, 4.29011291, 3.91312749, 3.69192886, 3.52807488, 3.39865354, 3.05327646, 2.79951639]),
    ("4ColsPairedNoisyDependence-1.txt", [0, 1], [2, 3], [1, 2, 3, 4, 5, 6, 10, 15],
     [0.33738970, 0.36251531, 0.34708687, 0.36200563, 0.35766125, 0.35007623, 0.35023664, 0.33728287]),
    ("4randomCols-1.txt", [0], [1, 2, 3], [1, 2, 3, 4, 5, 6, 10, 15],
     [0.02473475, 0.00404451, -0.00454679, -0.00737512, -0.00464896, -0.00610772, -0.00881741, -0.01306668]),
    ("2randomCols-1.txt", [0], [1], [1, 2, 3, 4, 5, 6, 10, 15],
     [-0.05294175, -0.03944338, -0.02190217, 0.00120807, -0.00924771, -0.00316402, -0.00778205, -0.00565778]),
]


@pytest.mark.parametrize("name, xcols, ycols, ks, expected", MILCA_CASES, ids=[c[0] for c in MILCA_CASES])
def test_matches_kraskov_milca_program(name, xcols, ycols, ks, expected):
    path = MILCA_DATA / name
    if not path.exists():
        pytest.skip(f"reference data not found at {path}")
    data = np.loadtxt(path, comments="%")
    data = (data - data.mean(axis=0)) / data.std(axis=0, ddof=1)
    for k, want in zip(ks, expected):
        got = ksg_mi(data[:, xcols], data[:, ycols], k=k, algorithm=2, noise=0, units="nats")
        assert got == pytest.approx(want, abs=1e-7), f"k={k}"


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_backend_gives_the_numba_counts(algorithm, dtype):
    torch = pytest.importorskip("torch")  # noqa: F841
    from mianalysis.estimators._neighbours import ksg_counts, ksg_counts_torch

    rng = np.random.default_rng(3)
    x = rng.standard_normal((700, 5))
    y = np.round(x[:, :2] + rng.standard_normal((700, 2)), 1)  # many ties
    for k in (1, 3, 40):
        expected = ksg_counts(x, y, k, algorithm, dtype)
        got = ksg_counts_torch(x, y, k, algorithm, dtype, device="cpu", block=128)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    assert ksg_mi(x, y, backend="torch", device="cpu", random_state=1) == ksg_mi(x, y, random_state=1)
    with pytest.raises(ValueError, match="`backend` must be one of 'numba', 'torch'"):
        ksg_mi(x, y, backend="jax")


@pytest.mark.parametrize("n", [255, 256, 257, 600, 1100])  # 1 to 5 blocks of 256, partial last block
@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_each_distance_once_gives_the_counts_of_every_distance_twice(n, algorithm, dtype):
    # The distance cache computes each tile above the diagonal once and reuses it,
    # transposed, for the later rows; the O(n)-memory kernel computes every distance twice.
    from mianalysis.estimators._neighbours import ksg_counts

    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 6))
    y = np.round(x[:, :2] + rng.standard_normal((n, 2)), 1)  # many ties
    for k in (1, 3, 40):
        cached = ksg_counts(x, y, k, algorithm, dtype, distance_cache=True)
        direct = ksg_counts(x, y, k, algorithm, dtype, distance_cache=False)
        np.testing.assert_array_equal(cached[0], direct[0])
        np.testing.assert_array_equal(cached[1], direct[1])


@pytest.mark.parametrize("algorithm", [1, 2])
def test_distance_cache_equals_reference_over_several_blocks(algorithm, rng):
    x = rng.standard_normal((700, 4))
    y = 0.5 * x[:, :2] + rng.standard_normal((700, 2))
    want = ksg_reference(x, y, 5, algorithm)
    for cache in (True, False):
        got = ksg_mi(x, y, k=5, algorithm=algorithm, noise=0, units="nats", distance_cache=cache)
        assert abs(got - want) < 1e-10


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_marginal_distances_are_the_max_norm_matrix(dtype, rng):
    from mianalysis.estimators._neighbours import marginal_distances

    a = rng.standard_normal((600, 7)).astype(dtype)
    want = np.abs(a[:, None, :] - a[None, :, :]).max(axis=-1)
    got = marginal_distances(a, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 256, 1000, 22000])
def test_pool_size_is_the_most_tiles_held_at_once(n):
    from mianalysis.estimators._kernels import BLOCK
    from mianalysis.estimators._neighbours import symmetric_pool_tiles

    n_blocks = -(-n // BLOCK)
    held, most = set(), 0
    for m in range(n_blocks):
        held -= {(m, i) for i in range(m)}  # copied into block m's rows, then freed
        held |= {(j, m) for j in range(m + 1, n_blocks)}
        most = max(most, len(held))
    assert symmetric_pool_tiles(n) == max(1, most)


def test_public_distance_cache_constants_are_the_kernels():
    # ksg.DISTANCE_CACHE_BLOCK restates the kernels' compile-time BLOCK (it stays in _kernels.py, whose
    # edit invalidates numba's cache); benchmarks read the public names.
    from mianalysis.estimators import ksg
    from mianalysis.estimators._kernels import BLOCK
    from mianalysis.estimators._neighbours import SYMMETRIC_MIN_FEATURES

    assert ksg.DISTANCE_CACHE_BLOCK == BLOCK
    assert ksg.DISTANCE_CACHE_MIN_FEATURES == SYMMETRIC_MIN_FEATURES


def test_auto_distance_cache_needs_enough_features_and_memory(monkeypatch, rng):
    from mianalysis._internal import memory as _memory
    from mianalysis.estimators import _neighbours

    def refuse(*args):
        raise AssertionError("the distance cache was used")

    monkeypatch.setattr(_neighbours, "ksg_counts_symmetric", refuse)
    narrow = rng.standard_normal((300, 49)), rng.standard_normal((300, 50))
    wide = rng.standard_normal((300, 50)), rng.standard_normal((300, 50))
    ksg_mi(*narrow)  # 99 features: every distance twice
    with pytest.raises(AssertionError, match="the distance cache was used"):
        ksg_mi(*wide)
    with pytest.raises(AssertionError, match="the distance cache was used"):
        ksg_mi(*narrow, distance_cache=True)
    monkeypatch.setattr(_memory, "physical_memory_bytes", lambda: 1000)  # the cache does not fit
    ksg_mi(*wide)
