"""Parts of the KSG kernels that change no value but how it is computed: the vector max of the
distance loop (mianalysis.estimators._kernels.max_distance) and the hash counts of repeated
values behind the tie check (repeated_value_counts, duplicate_share, value_tie_shares)."""

import platform

import numba
import numpy as np
import pytest

from mianalysis.estimators._kernels import TILE_PAD, _block_tile, max_distance, repeated_value_counts
from mianalysis.estimators.ksg import duplicate_share, value_tie_shares


@numba.njit
def _max_into(out, values):
    for j in range(out.shape[0]):
        out[j] = max_distance(out[j], values[j])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_distance_is_the_larger_value(dtype):
    rng = np.random.default_rng(0)
    out = np.abs(rng.standard_normal(301)).astype(dtype)
    values = np.abs(rng.standard_normal(301)).astype(dtype)
    out[:5] = 0.0
    values[:3] = 0.0
    expected = np.maximum(out, values)
    _max_into(out, values)
    assert out.dtype == dtype and np.array_equal(out, expected)
    assert not np.signbit(out).any()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 vector instructions")
def test_max_distance_compiles_to_a_vector_max_without_masked_stores():
    """The loop shape of the distance tiles: with Python's max LLVM may store through a mask
    (vmaskmovpd), several times slower on AMD Zen; max_distance keeps a max and a plain store."""
    @numba.njit(fastmath=True)
    def accumulate(out, row, v):
        for j in range(out.shape[0]):
            out[j] = max_distance(out[j], abs(row[j] - v))

    out, row = np.zeros(256), np.arange(256.0)
    accumulate(out, row, 3.0)
    assert np.array_equal(out, np.abs(row - 3.0))
    asm = accumulate.inspect_asm(accumulate.signatures[0])
    assert "maskmov" not in asm and ("maxpd" in asm or "maxsd" in asm)  # vector or scalar, by the CPU's width


def test_padded_tile_buffer_holds_the_max_norm_distances():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((300, 7))
    out = np.full((48, 64 + TILE_PAD), -1.0)
    _block_tile(data, np.ascontiguousarray(data.T), 10, 50, 200, 264, out, 0)  # 40 rows: the last group padded
    expected = np.abs(data[10:50, None, :] - data[None, 200:264, :]).max(axis=2)
    assert np.array_equal(out[:40, :64], expected)
    assert (out[:, 64:] == -1.0).all()  # the padding columns are never written


def sorted_repeats(a):
    """The reference: per column, entries equal to a neighbour after sorting."""
    s = np.sort(a, axis=0)
    same = s[1:] == s[:-1]
    repeated = np.zeros(s.shape, dtype=bool)
    repeated[1:] |= same
    repeated[:-1] |= same
    return repeated.sum(axis=0)


@pytest.mark.parametrize("kind", ["continuous", "lattice", "zeros", "mixed"])
def test_repeated_value_counts_equal_the_sorted_count(kind):
    rng = np.random.default_rng(2)
    for n in (1, 2, 17, 300):
        if kind == "continuous":
            x, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
        elif kind == "lattice":
            x, y = 1e-5 * rng.integers(-1, 2, (n, 3)), 0.5 * rng.integers(-2, 2, (n, 3))
        elif kind == "zeros":  # -0.0 equals 0.0; the extremes of float64 are values like any other
            x = rng.choice([0.0, -0.0, 5e-324, -5e-324, 1e308, -1e308], (n, 3))
            y = rng.choice([0.0, -0.0, 1.0], (n, 3))
        else:
            x, y = rng.standard_normal((n, 3)), np.round(rng.standard_normal((n, 3)), 1)
        got = repeated_value_counts(x, y, True)
        assert np.array_equal(got, np.concatenate([sorted_repeats(x), sorted_repeats(y), sorted_repeats(y - x)]))
        assert np.array_equal(repeated_value_counts(x, y[:, :2], False), np.concatenate(
            [sorted_repeats(x), sorted_repeats(y[:, :2])]))


def test_nan_repeats_nothing():
    a = np.array([[np.nan], [np.nan], [1.0], [1.0], [2.0]])
    assert repeated_value_counts(a, a, False).tolist() == [2, 2]


def test_tie_shares_known_answers():
    x = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 3.0], [2.0, 4.0]])
    assert duplicate_share(x) == 0.25
    assert duplicate_share(np.array([[-0.0, 5.0, 1.0], [0.0, 5.0, 2.0], [3.0, 5.0, 3.0]])) == pytest.approx(1 / 3)
    # y - x: 0.5, 0.5, 0.7, 0.9 -> half the differences repeat; no value of x or y does
    assert value_tie_shares(x[:, :1] + np.arange(4.0)[:, None], x[:, :1] + np.array([[0.5], [1.5], [2.7], [3.9]])) \
        == (0.0, 0.5)
    # a constant difference column (y = x + 1) is left out of the differences' share
    values, differences = value_tie_shares(x, x + np.array([1.0, 0.0]) + np.array([[0, 0], [0, 1], [0, 3], [0, 7]]))
    assert differences == 0.0 and values == pytest.approx(4 / 16)
