"""KSG permutation nulls from sorted neighbour lists: the same neighbour counts, and so the
same estimates to the bit, as the brute-force pass over full distance rows (and as the
plain NumPy reference), ties and duplicates included, for every path of the walk."""

import numba
import numpy as np
import pytest
from reference import ksg_reference

from mianalysis import MarginalDistances, mi_permutation_test
from mianalysis.estimators._neighbours import (distance_tiles, listed_counts, marginal_distances, neighbour_list_length,
                                               neighbour_lists, permuted_counts)
from mianalysis.estimators.ksg import ksg_estimates_from_distances


def paired_samples(kind, n, rng):
    """Paired samples of several kinds: continuous (y on 2 of x's 3 features), tied
    (rounded), duplicated rows, x 1000 times wider than y ("scales"), a coarse grid (most
    distances 0), and y on all 3 of x's features at weak and strong dependence (y on half
    x's scale) and 1000 times wider than x ("y wide"). Shared with
    tests/test_ksg_permutation_tiles.py."""
    x = rng.standard_normal((n, 3))
    if kind in ("weak", "strong", "y wide"):
        y = 0.5 * x + {"weak": 0.87, "strong": 0.1, "y wide": 1.0}[kind] * rng.standard_normal((n, 3))
        return x, 1000.0 * y if kind == "y wide" else y
    y = 0.6 * x[:, :2] + rng.standard_normal((n, 2))
    if kind == "rounded":
        x, y = np.round(x, 1), np.round(y, 1)
    elif kind == "duplicates":
        rows = rng.integers(0, n // 3, size=n)  # every sample repeated about 3 times
        x, y = x[rows], y[rows]
    elif kind == "scales":
        x = 1000.0 * x
    elif kind == "grid":  # 0 or 1, mostly 0: more neighbours at distance 0 than a list holds
        x, y = (rng.random((n, 1)) < 0.1).astype(float), (rng.random((n, 2)) < 0.05).astype(float)
    return x, y


def _both_ways(x, y, perms, k, algorithm, dtype="float64"):
    dx, dy = marginal_distances(x, dtype), marginal_distances(y, dtype)
    stats = {}
    listed = ksg_estimates_from_distances(dx, dy, perms, k, algorithm, method="lists", stats=stats)
    brute = ksg_estimates_from_distances(dx, dy, perms, k, algorithm, method="brute")
    return listed, brute, stats


@pytest.mark.parametrize("kind", ["continuous", "rounded", "duplicates", "scales", "grid"])
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("algorithm", [1, 2])
def test_lists_give_the_brute_force_estimates_to_the_bit(kind, k, algorithm, rng):
    n = 400
    x, y = paired_samples(kind, n, rng)
    perms = [rng.permutation(n) for _ in range(6)]
    listed, brute, _ = _both_ways(x, y, perms, k, algorithm)
    assert listed.shape == (7,)
    assert np.array_equal(listed, brute)  # ==, not approx


@pytest.mark.parametrize("algorithm", [1, 2])
def test_every_path_of_the_walk_is_taken_and_exact(algorithm, rng):
    # Continuous data: nearly every sample by the merged walk. x 1000 times wider than y: the
    # y-lists end long before the k-th joint neighbour (one-list walks with look-ups). A coarse
    # grid: more tied neighbours at distance 0 than a list holds (full rows).
    n = 400
    perms = [rng.permutation(n) for _ in range(4)]
    seen = {}
    for kind in ("continuous", "scales", "grid"):
        listed, brute, stats = _both_ways(*paired_samples(kind, n, rng), perms, 3, algorithm)
        assert np.array_equal(listed, brute)
        seen[kind] = stats
    assert seen["continuous"]["looked_up"].sum() + seen["continuous"]["full_rows"].sum() < 0.2 * 5 * n
    assert seen["scales"]["looked_up"].sum() > n
    assert seen["grid"]["full_rows"].sum() > n


def test_k_above_the_insertion_limit_is_exact(rng):
    # k > INSERTION_MAX_K (32): the samples a merged walk cannot finish are counted from full rows.
    n = 300
    x, y = paired_samples("continuous", n, rng)
    perms = [rng.permutation(n) for _ in range(3)]
    for algorithm in (1, 2):
        listed, brute, _ = _both_ways(x, y, perms, 40, algorithm)
        assert np.array_equal(listed, brute)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_float32_distances_are_exact_too(algorithm, rng):
    # float32 lists from the distance tiles, as mi_permutation_test(dtype="float32") walks them (its
    # compiled kernel; the float32 matrices' own, MarginalDistances(compact=True), is tested below)
    n = 400
    x, y = paired_samples("rounded", n, rng)
    perms = [np.arange(n)] + [rng.permutation(n) for _ in range(4)]
    listed = listed_counts(*distance_tiles(x, y, "float32"), n, perms, 3, algorithm)
    brute = permuted_counts(marginal_distances(x, "float32"), marginal_distances(y, "float32"), perms, 3, algorithm,
                            method="brute")
    assert all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(listed, brute, strict=True))


@pytest.mark.parametrize("kind", ["continuous", "rounded", "duplicates"])
def test_lists_equal_the_numpy_reference(kind, rng):
    # ksg_reference counts exactly k joint neighbours for algorithm 2, which differs from the
    # estimator's rule (all those at the k-th distance) only under ties: algorithm 1 throughout,
    # algorithm 2 on continuous data.
    n = 300
    x, y = paired_samples(kind, n, rng)
    perms = [rng.permutation(n) for _ in range(3)]
    dx, dy = marginal_distances(x), marginal_distances(y)
    for algorithm in (1, 2) if kind == "continuous" else (1,):
        for k in (1, 4):
            got = ksg_estimates_from_distances(dx, dy, perms, k, algorithm, method="lists")
            want = [ksg_reference(x, y[perm], k, algorithm) for perm in [np.arange(n)] + perms]
            assert np.array_equal(got, want)


def test_independent_of_thread_count(rng):
    n = 700
    x, y = paired_samples("rounded", n, rng)
    perms = [rng.permutation(n) for _ in range(5)]
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            results.append(_both_ways(x, y, perms, 3, 2)[0])
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize("kind", ["continuous", "duplicates"])
def test_lists_hold_every_neighbour_inside_the_cover_in_order(kind, rng):
    n = 300
    x, _ = paired_samples(kind, n, rng)
    d = marginal_distances(x)
    values, indices, cover = neighbour_lists(d, 3)
    _, capacity = neighbour_list_length(n, 3)
    assert values.shape == (n, capacity + 1)
    for i in range(n):
        m = int(np.argmax(np.isinf(values[i])))  # the sentinel
        assert np.all(np.isinf(values[i, m:]))
        assert np.all(np.diff(values[i, :m]) >= 0)
        inside = np.flatnonzero((d[i] < cover[i]) & (np.arange(n) != i))
        assert sorted(indices[i, :m].tolist()) == inside.tolist()
        assert np.array_equal(values[i, :m], d[i, indices[i, :m]])
        # The cover is a distance of the row, and at most capacity neighbours are below it.
        assert cover[i] in d[i] and m <= capacity


@pytest.mark.parametrize("dependence", ["weak", "strong"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("algorithm", [1, 2])
def test_permutation_test_uses_the_lists_for_the_values_of_every_estimate(dependence, dtype, algorithm, rng):
    # From 1,000 samples and 7 shuffles on, the cached test keeps the distance tiles and walks
    # neighbour lists; the values are those of ksg_mi on every shuffle (the uncached path), to the bit.
    n = 1100
    x, y = paired_samples(dependence, n, rng)
    kwargs = dict(n_permutations=8, random_state=5, dtype=dtype, algorithm=algorithm)
    cached = mi_permutation_test(x, y, distance_cache=True, **kwargs)
    direct = mi_permutation_test(x, y, distance_cache=False, **kwargs)
    assert cached.estimate == direct.estimate
    assert np.array_equal(cached.null_distribution, direct.null_distribution)


def test_marginal_distances_keep_their_lists_and_give_the_brute_force_values(rng):
    n = 1000
    x = rng.standard_normal((n, 2))
    y = x + rng.standard_normal((n, 2))
    dx, dy = MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)
    res = mi_permutation_test(dx, dy, n_permutations=9, random_state=0, units="nats")
    assert dx.neighbour_lists(3) is dx.neighbour_lists(3)  # made once
    perms = [np.random.default_rng(0).permutation(n) for _ in range(1)]
    rng0 = np.random.default_rng(0)
    perms = [rng0.permutation(n) for _ in range(9)]
    brute = ksg_estimates_from_distances(dx.matrix, dy.matrix, perms, 3, 1, method="brute")
    assert res.estimate == brute[0]
    assert np.array_equal(res.null_distribution, brute[1:])


def test_bad_permutations_and_method_are_named(rng):
    d = marginal_distances(rng.standard_normal((50, 2)))
    with pytest.raises(ValueError, match="`permutations` must be permutations of range"):
        ksg_estimates_from_distances(d, d, [np.zeros(50, dtype=int)], 3, 1, method="lists")
    with pytest.raises(ValueError, match="`method` must be 'auto', 'lists' or 'brute'"):
        ksg_estimates_from_distances(d, d, [], 3, 1, method="fast")


@pytest.mark.parametrize("algorithm", [1, 2])
def test_compact_float32_distances_where_exact_give_the_float64_values(algorithm, rng):
    # Integers and multiples of 1/8 (a binary grid, noise 0): every distance is a float32 number, so
    # the float32 matrix holds the float64 distances exactly and every estimate is the same.
    n = 1000
    x = rng.integers(-50, 50, size=(n, 2)).astype(float)
    y = x[:, :1] + rng.integers(-400, 400, size=(n, 1)) / 8.0
    wide = [MarginalDistances.of(a, noise=0) for a in (x, y)]
    compact = [MarginalDistances.of(a, noise=0, compact=True) for a in (x, y)]
    assert [c.matrix.dtype for c in compact] == [np.float32, np.float32]
    assert all(np.array_equal(c.matrix, w.matrix) for c, w in zip(compact, wide))
    kwargs = dict(n_permutations=8, random_state=0, algorithm=algorithm)
    a = mi_permutation_test(*wide, **kwargs)
    b = mi_permutation_test(*compact, **kwargs)
    c = mi_permutation_test(compact[0], wide[1], **kwargs)  # one of each
    assert a.estimate == b.estimate == c.estimate
    assert np.array_equal(a.null_distribution, b.null_distribution)
    assert np.array_equal(a.null_distribution, c.null_distribution)


def test_compact_keeps_float64_where_float32_is_not_exact(rng):
    x = rng.standard_normal((200, 2))
    assert MarginalDistances.of(x, noise=0, compact=True).matrix.dtype == np.float64
    grid = rng.integers(0, 9, size=(200, 2)).astype(float)
    assert MarginalDistances.of(grid, compact=True).matrix.dtype == np.float64  # the noise needs float64
    assert MarginalDistances.of(grid, noise=0, compact=True).matrix.dtype == np.float32
    with pytest.raises(ValueError, match="`matrix` must be a square float64"):
        MarginalDistances(np.zeros((3, 3), dtype=np.float16), 1)


@pytest.mark.parametrize("kind", ["continuous", "rounded", "duplicates"])
@pytest.mark.parametrize("k", [1, 2, 5, 16, 32, 33, 40])
def test_probe_is_exact_for_every_k(kind, k, rng):
    # The probe (marked x-list, walked y-list) for k from 1 to 40, both algorithms, ties and
    # duplicated rows included; k = 33 and 40 are above the insertion limit of the fallbacks.
    n = 300
    x, y = paired_samples(kind, n, rng)
    perms = [rng.permutation(n) for _ in range(3)]
    for algorithm in (1, 2):
        listed, brute, _ = _both_ways(x, y, perms, k, algorithm)
        assert np.array_equal(listed, brute)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_uint16_and_int32_inverses_give_the_same_counts(algorithm, rng):
    # Below 65,536 samples the marks and inverses are uint16 (they stay in cache); beyond, int32.
    from mianalysis.estimators._neighbour_lists import listed_neighbour_counts

    n = 500
    x, y = paired_samples("rounded", n, rng)
    dx, dy = marginal_distances(x), marginal_distances(y)
    lists = [neighbour_lists(d, 3) for d in (dx, dy)]
    perms = np.array([rng.permutation(n) for _ in range(4)])
    results = []
    for dtype in (np.uint16, np.int32):
        inverses = np.argsort(perms, axis=1).astype(dtype)
        results.append(listed_neighbour_counts(*lists[0], *lists[1], dx, dy, perms, inverses, 3, algorithm))
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    brute = ksg_estimates_from_distances(dx, dy, list(perms), 3, algorithm, method="brute")
    listed = ksg_estimates_from_distances(dx, dy, list(perms), 3, algorithm, method="lists")
    assert np.array_equal(listed, brute)


@pytest.mark.parametrize("algorithm", [1, 2])
def test_continuous_lists_independent_of_thread_count(algorithm, rng):
    n = 1200
    x, y = paired_samples("continuous", n, rng)
    perms = [rng.permutation(n) for _ in range(9)]
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            listed, brute, _ = _both_ways(x, y, perms, 3, algorithm)
            assert np.array_equal(listed, brute)
            results.append(listed)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize("case", ["spread", "clustered", "tied", "two values", "one value"])
def test_bucket_sort_sorts_values_with_their_indices(case, rng):
    # The list sort: buckets in order of value, then an insertion sort within them; np.argsort when the
    # buckets are too uneven (clustered or tied values). Every case gives the sorted values, each with its
    # own index.
    from mianalysis.estimators._neighbour_lists import _sort_near

    m = 700
    near = {"spread": rng.random(m),
            "clustered": np.concatenate([[0.0], 1.0 + 1e-9 * rng.random(m - 1)]),  # one bucket holds all but one
            "tied": rng.integers(0, 5, size=m) / 4.0,
            "two values": np.where(rng.random(m) < 0.5, 0.0, 2.0),
            "one value": np.full(m, 3.0)}[case]
    found = rng.permutation(10 * m)[:m].astype(np.int64)
    key, counts = np.empty(m, dtype=np.int64), np.empty(m + 1, dtype=np.int64)
    sv, si = np.empty(m), np.empty(m, dtype=np.int64)
    _sort_near(near, found, m, key, counts, sv, si)
    assert np.array_equal(sv, np.sort(near))
    assert sorted(si.tolist()) == sorted(found.tolist())
    value_of = dict(zip(found.tolist(), near.tolist()))
    assert [value_of[j] for j in si.tolist()] == sv.tolist()  # each index with its own value
