"""KSG permutation nulls from the distance matrices' upper-triangle tiles and the four passes of
the neighbour-list kernel (issue 55): the same counts as the brute-force pass over full rows, to
the bit, whichever pass counts a sample (probes walking either list, rows held in cache on
either side, full rows), at weak and strong dependence and with x and y on different scales."""

import numba
import numpy as np
import pytest
from test_ksg_permutations import paired_samples

from mianalysis.estimators._kernels import tile_rows
from mianalysis.estimators._neighbour_lists import CELLS_PER_LIMIT, COPIES, _row_counts_below
from mianalysis.estimators._neighbours import (distance_tiles, listed_counts, marginal_distances, neighbour_lists,
                                               permuted_counts, tile_bytes)


@pytest.mark.parametrize("n", [5, 255, 256, 257, 700])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tiles_hold_every_distance_of_the_matrix(n, dtype, rng):
    x, y = rng.standard_normal((n, 4)), rng.standard_normal((n, 2))
    tiles_x, tiles_y = distance_tiles(x, y, dtype)
    assert tiles_x.dtype == np.dtype(dtype) and tiles_x.nbytes == tile_bytes(n, dtype)
    for tiles, full in ((tiles_x, marginal_distances(x, dtype)), (tiles_y, marginal_distances(y, dtype))):
        out = np.empty((8, n), dtype=dtype)
        for r0 in range(0, n, 8):
            count = min(8, n - r0, 256 - r0 % 256)
            tile_rows(tiles, n, r0, count, out)
            assert np.array_equal(out[:count], full[r0:r0 + count])  # ==, not approx


@pytest.mark.parametrize("kind", ["weak", "duplicates", "grid"])
def test_lists_from_tiles_are_the_lists_of_the_matrix(kind, rng):
    n = 600
    x, _ = paired_samples(kind, n, rng)
    tiles, _ = distance_tiles(x, x[:, :1])
    for a, b in zip(neighbour_lists(tiles, 3, n), neighbour_lists(marginal_distances(x), 3)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["weak", "strong", "scales", "y wide", "rounded", "duplicates", "grid"])
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("algorithm", [1, 2])
def test_counts_from_tiles_are_the_brute_force_counts(kind, k, algorithm, rng):
    n = 520
    x, y = paired_samples(kind, n, rng)
    perms = [np.arange(n)] + [rng.permutation(n) for _ in range(9)]
    tiles_x, tiles_y = distance_tiles(x, y)
    listed = list(listed_counts(tiles_x, tiles_y, n, perms, k, algorithm))
    brute = list(permuted_counts(marginal_distances(x), marginal_distances(y), perms, k, algorithm, method="brute"))
    for (nx, ny), (bx, by) in zip(listed, brute):
        assert np.array_equal(nx, bx) and np.array_equal(ny, by)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_every_pass_is_taken_and_exact(algorithm, rng):
    # Weak dependence: nearly every sample by a probe. Either side 1000 times wider: the joint
    # neighbours are the wide side's, and every count of the other side lies beyond its list (the
    # passes that hold that side's rows in cache). A coarse grid: full rows.
    n = 700
    perms = [np.arange(n)] + [rng.permutation(n) for _ in range(7)]
    seen = {}
    for kind in ("weak", "strong", "scales", "y wide", "grid"):
        x, y = paired_samples(kind, n, rng)
        stats = {}
        listed = list(permuted_counts(marginal_distances(x), marginal_distances(y), perms, 3, algorithm,
                                      method="lists", stats=stats))
        brute = list(permuted_counts(marginal_distances(x), marginal_distances(y), perms, 3, algorithm,
                                     method="brute"))
        assert all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(listed, brute))
        seen[kind] = stats["looked_up"].sum(), stats["full_rows"].sum()
    assert seen["weak"][0] + seen["weak"][1] < 0.2 * 8 * n
    for kind in ("scales", "y wide"):
        assert seen[kind][0] > 0.9 * 8 * n
    assert seen["grid"][1] > n


@pytest.mark.parametrize("inclusive", [False, True])
def test_row_counts_below_many_limits_are_the_numpy_counts(inclusive, rng):
    # One pass over a row for many limits: ties, limits equal to values and their neighbours, a
    # single repeated limit, and values of very different magnitudes.
    for trial in range(300):
        n, m = int(rng.integers(1, 400)), int(rng.integers(1, 60))
        row = np.round(rng.random(n) * 5, int(rng.integers(0, 4))) * 10.0 ** int(rng.integers(-200, 200))
        if trial % 3 == 0:
            limits = rng.choice(row, m)
        elif trial % 3 == 1:
            limits = np.nextafter(rng.choice(row, m), np.inf * rng.choice([-1, 1], m))
        else:
            limits = np.full(m, row[0])
        work = (np.empty(m, dtype=np.int64), np.empty(m + 1, dtype=np.int64), np.empty(m, dtype=np.int64),
                np.empty(n, dtype=np.int32), np.empty(COPIES * (CELLS_PER_LIMIT * m + 2), dtype=np.int32),
                np.empty(CELLS_PER_LIMIT * m + 3, dtype=np.int64))
        order, hist, out, keys, cells, first = work
        _row_counts_below(row, limits, m, inclusive, order, hist, out, keys, cells, first)
        want = [(row <= t).sum() if inclusive else (row < t).sum() for t in limits]
        assert out.tolist() == want


def test_tile_counts_do_not_depend_on_the_thread_count(rng):
    n = 900
    x, y = paired_samples("rounded", n, rng)
    perms = [np.arange(n)] + [rng.permutation(n) for _ in range(8)]
    tiles_x, tiles_y = distance_tiles(x, y)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            results.append([np.concatenate(c) for c in listed_counts(tiles_x, tiles_y, n, perms, 3, 2)])
    finally:
        numba.set_num_threads(before)
    assert all(np.array_equal(a, b) for a, b in zip(*results))
