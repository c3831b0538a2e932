"""KSG estimates of subsets of the samples from their marginal distances
(`ksg_estimates_of_subsets`), and analyze's half-subsampling replicates made that way."""

import warnings
import weakref

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, ksg_mi
from mianalysis.analysis.inference.intervals import normal_interval, resample_indices
from mianalysis.estimators import KSG_NOISE
from mianalysis.estimators.ksg import (MarginalDistances, add_tie_breaking_noise, ksg_estimates_of_subsets,
                                       standardize_columns)


def _halves(rng, n, count=4):
    return [rng.permutation(n)[: n // 2] for _ in range(count)]


@pytest.mark.parametrize("algorithm", [1, 2])
@pytest.mark.parametrize("k", [1, 3, 40])
def test_subsets_are_ksg_of_the_prepared_samples_restricted(rng, algorithm, k):
    """Continuous samples noised once: each subset's estimate is ksg_mi (no further noise) on
    the same noised samples restricted to it, to the bit in nats."""
    x = rng.standard_normal((300, 3))
    y = x[:, :2] + rng.standard_normal((300, 2))
    dx, dy = MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)
    xn = add_tie_breaking_noise(x, KSG_NOISE, np.random.default_rng(1))
    yn = add_tie_breaking_noise(y, KSG_NOISE, np.random.default_rng(2))
    halves = _halves(rng, 300) + [np.arange(300)[::-1]]  # any order, and every sample
    got = ksg_estimates_of_subsets(dx, dy, halves, k=k, algorithm=algorithm, units="nats")
    want = [ksg_mi(xn[h], yn[h], k=k, algorithm=algorithm, noise=0, units="nats") for h in halves]
    assert got.tolist() == want


@pytest.mark.parametrize("algorithm", [1, 2])
def test_subsets_of_tied_lattice_samples_count_ties_as_brute_force(rng, algorithm):
    """Integer samples without noise (every distance tied many times; their float32 matrices
    are exact), and one of them paired with a float64 matrix: the counts of brute force,
    ties included."""
    x = rng.integers(0, 4, (240, 3)).astype(float)
    y = rng.integers(0, 3, (240, 2)).astype(float) + x[:, :2]
    z = x[:, :1] + 0.5 * rng.standard_normal((240, 1))
    dx, dy = MarginalDistances.of(x, noise=0, compact=True), MarginalDistances.of(y, noise=0, compact=True)
    dz = MarginalDistances.of(z, noise=0)
    assert (dx.matrix.dtype, dy.matrix.dtype, dz.matrix.dtype) == (np.float32, np.float32, np.float64)
    halves = _halves(rng, 240)
    for other, samples in ((dy, y), (dz, z)):
        for k in (1, 3):
            got = ksg_estimates_of_subsets(dx, other, halves, k=k, algorithm=algorithm, units="nats")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tie warning: the ties are the point here
                want = [ksg_mi(x[h], samples[h], k=k, algorithm=algorithm, noise=0, units="nats") for h in halves]
            assert got.tolist() == want


def test_subsets_in_bits_and_of_a_constant_variable(rng):
    x = rng.standard_normal((100, 2))
    dx, dy = MarginalDistances.of(x, random_state=0), MarginalDistances.of(x ** 3, random_state=1)
    halves = _halves(rng, 100, 2)
    np.testing.assert_allclose(ksg_estimates_of_subsets(dx, dy, halves),
                               ksg_estimates_of_subsets(dx, dy, halves, units="nats") / np.log(2), rtol=1e-15)
    constant = MarginalDistances.of(np.ones((100, 2)), random_state=0)
    assert constant.n_features == 0
    assert ksg_estimates_of_subsets(dx, constant, halves).tolist() == [0.0, 0.0]


def test_subsets_refuse_what_is_not_a_set_of_samples(rng):
    x = rng.standard_normal((50, 2))
    dx = MarginalDistances.of(x, random_state=0)
    with pytest.raises(ValueError, match="must not repeat a sample"):
        ksg_estimates_of_subsets(dx, dx, [np.array([0, 1, 2, 3, 3])])
    with pytest.raises(ValueError, match=r"must lie in \[0, 50\)"):
        ksg_estimates_of_subsets(dx, dx, [np.array([0, 1, 2, 50])])
    with pytest.raises(ValueError, match="1-D array of sample indices"):
        ksg_estimates_of_subsets(dx, dx, [np.array([0.0, 1.0, 2.0, 3.0])])
    with pytest.raises(ValueError, match="k"):
        ksg_estimates_of_subsets(dx, dx, [np.array([0, 1, 2])], k=3)
    with pytest.raises(TypeError, match="MarginalDistances"):
        ksg_estimates_of_subsets(x, dx, [np.arange(10)])
    with pytest.raises(ValueError, match="same number of samples"):
        ksg_estimates_of_subsets(dx, MarginalDistances.of(x[:40], random_state=0), [np.arange(10)])


@pytest.mark.parametrize("lattice", [False, True])
def test_analyze_half_subsampling_interval_from_the_kept_distances(tmp_path, rng, lattice):
    """With the distances kept, each KSG replicate is the half of the samples the estimate
    saw (standardized, noised per checkpoint and client), and the level interval is the
    t interval of those replicates' spread. Continuous data give the same intervals as the
    path that noises each half anew (noise cannot move their counts), up to rounding;
    samples on a lattice do not (the noise decides their neighbours), which tells the
    two paths apart."""
    n = 240
    base = rng.standard_normal((2, n, 3))
    other = 0.8 * base + 0.6 * rng.standard_normal((2, n, 3))
    if lattice:
        base, other = np.round(2 * base), np.round(2 * other)
    dump = ParameterDump.from_arrays(tmp_path / "d", {"0": base, "1": other}, checkpoints=[0, 1])
    kw = dict(estimators=("ksg",), metrics=(), n_permutations=0, random_state=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ties, on the lattice
        cached = analyze(dump, distance_cache=True, **kw)
        direct = analyze(dump, distance_cache=False, **kw)
    halves = resample_indices(n, 10, "ksg", np.random.default_rng([5, 1, 1]))
    for t in (0, 1):
        noised = [add_tie_breaking_noise(standardize_columns(dump.samples(c, index=t).astype(float)), KSG_NOISE,
                                         np.random.default_rng([5, t, c, 2])) for c in range(2)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            replicates = np.array([ksg_mi(noised[0][h], noised[1][h], noise=0) for h in halves])
        row = cached.select("mi_ksg", "0", "1")[t]
        low, high = normal_interval(row["value"], replicates.std(ddof=1), 0.95, df=len(replicates) - 1)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-12)
        fresh = direct.select("mi_ksg", "0", "1")[t]
        if lattice:
            assert (fresh["ci_low"], fresh["ci_high"]) != pytest.approx((low, high), abs=1e-6)
        else:
            assert (fresh["ci_low"], fresh["ci_high"]) == pytest.approx((low, high), abs=1e-9)
    if not lattice:
        change, fresh = cached.select("delta_mi_ksg", "0", "1")[0], direct.select("delta_mi_ksg", "0", "1")[0]
        assert change["change_se"] == pytest.approx(fresh["change_se"], abs=1e-9)


def test_a_resumed_analysis_makes_the_same_replicates_again(tmp_path, rng, monkeypatch):
    """A checkpoint resumed from the journal gets its KSG replicates (for the next change's
    interval) from its distances made again with the same noise: the table is the one an
    uninterrupted analysis writes, on lattice samples whose neighbours the noise decides."""
    from mianalysis.analysis.compute import CheckpointAnalysis

    n = 200
    base = np.round(2 * rng.standard_normal((3, n, 3)))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"0": base, "1": np.round(base + rng.standard_normal((3, n, 3)))})
    kw = dict(estimators=("ksg",), metrics=(), n_permutations=2, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(dump, out=tmp_path / "clean.csv", **kw)
        calls = []
        original = CheckpointAnalysis.__call__

        def stop_at_checkpoint_2(self, t, progress=None):
            calls.append(t)
            if t == 2 and calls.count(2) == 1:
                raise KeyboardInterrupt
            return original(self, t, progress)

        monkeypatch.setattr(CheckpointAnalysis, "__call__", stop_at_checkpoint_2)
        with pytest.raises(KeyboardInterrupt):
            analyze(dump, out=tmp_path / "t.csv", **kw)
        assert (tmp_path / "t.csv.partial").exists()
        analyze(dump, out=tmp_path / "t.csv", **kw)
    assert calls == [0, 1, 2, 2]  # the resumed run computed checkpoint 2 only
    clean, resumed = (tmp_path / "clean.csv").read_text(), (tmp_path / "t.csv").read_text()
    assert resumed == clean


def test_without_room_for_every_client_the_pair_distances_give_the_same_table(tmp_path, rng, monkeypatch):
    """Where the clients' distances do not all fit but a pair's do, each pair makes its own
    with the clients' noise: the same table as with every client's kept (estimates,
    permutations and KSG replicates), on lattice samples whose neighbours the noise decides;
    with no room at all the replicates come from each half's samples (another table there)."""
    n = 200
    base = np.round(2 * rng.standard_normal((2, n, 3)))
    dump = ParameterDump.from_arrays(tmp_path / "d", {str(c): np.round(base + rng.standard_normal((2, n, 3)))
                                                      for c in range(3)})
    kw = dict(estimators=("ksg",), metrics=(), n_permutations=3, random_state=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        every = analyze(dump, distance_cache=True, **kw)
        monkeypatch.setattr(MarginalDistances, "cache_fits", staticmethod(
            lambda n_samples, *, count=1, distance_cache="auto": count <= 2))
        pairs = analyze(dump, **kw)
        monkeypatch.setattr(MarginalDistances, "cache_fits", staticmethod(
            lambda n_samples, *, count=1, distance_cache="auto": False))
        none = analyze(dump, **kw)
    for name, table in (("every", every), ("pairs", pairs), ("none", none)):
        table.write_rows(tmp_path / f"{name}.csv")
    assert (tmp_path / "pairs.csv").read_bytes() == (tmp_path / "every.csv").read_bytes()
    assert [r["ci_low"] for r in none.select("mi_ksg", "0", "1")] != [r["ci_low"] for r in every.select("mi_ksg", "0", "1")]


def test_pair_distances_keep_a_client_for_the_next_pair(tmp_path, rng, monkeypatch):
    """Where only a pair's distances fit, a client's matrix serves the next pair it is in:
    3 clients make 4 matrices per checkpoint (not 6), never more than 2 at once, and per
    tensor (by="layer") each group makes its own; the tables equal those with every
    client's distances kept."""
    n = 120
    base = rng.standard_normal((2, n, 5))
    dump = ParameterDump.from_arrays(tmp_path / "d", {c: 0.7 * base + 0.7 * rng.standard_normal((2, n, 5))
                                                      for c in "abc"}, layout=[("w", (2, 2)), ("bias", (1,))])
    kw = dict(estimators=("ksg",), metrics=(), n_permutations=2, random_state=3)
    every = {by: analyze(dump, distance_cache=True, by=by, **kw) for by in (None, "layer")}
    made, alive, most = [], set(), [0]
    original = MarginalDistances.of.__func__

    def counted(cls, samples, **options):
        distances = original(cls, samples, **options)
        made.append(distances.matrix.shape)
        alive.add(id(distances.matrix))
        weakref.finalize(distances.matrix, alive.discard, id(distances.matrix))
        most[0] = max(most[0], len(alive))
        return distances

    monkeypatch.setattr(MarginalDistances, "cache_fits", staticmethod(
        lambda n_samples, *, count=1, distance_cache="auto": count <= 2))
    monkeypatch.setattr(MarginalDistances, "of", classmethod(counted))
    for by, groups in ((None, 1), ("layer", 2)):
        made.clear()
        most[0] = 0
        pairs = analyze(dump, by=by, **kw)
        assert len(made) == 2 * groups * 4  # checkpoints x groups x 4
        assert most[0] <= 2
        every[by].write_rows(tmp_path / "every.csv")
        pairs.write_rows(tmp_path / "pairs.csv")
        assert (tmp_path / "pairs.csv").read_bytes() == (tmp_path / "every.csv").read_bytes()
