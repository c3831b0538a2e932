import numpy as np
import pytest

from mianalysis import gaussian_mi, mean_paired_distance
from mianalysis.analysis import AnalysisTable, analyze
from mianalysis.dumps import ParameterDump


def correlated_clients(rng, n_runs=3000, d=3, rhos=(0.0, 0.5, 0.8)):
    """Three clients; at checkpoint t, clients 1 and 2 are rho_t-correlated copies of client 0."""
    ckpts = []
    for rho in rhos:
        base = rng.standard_normal((n_runs, d))
        other = [rho * base + np.sqrt(1 - rho**2) * rng.standard_normal((n_runs, d)) for _ in range(2)]
        ckpts.append([base, *other])
    return {str(c): np.stack([ck[c] for ck in ckpts]) for c in range(3)}


def test_values_match_estimators_and_trend(tmp_path, rng):
    samples = correlated_clients(rng)
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, checkpoints=[0, 5, 10],
                                     metrics={c: {"loss": np.ones((3, 3000))} for c in samples})
    rows = analyze(dump, estimators=("gaussian",), out=tmp_path / "r.csv")
    mi = rows.select("mi_gaussian", "0", "1")
    assert [r["iteration"] for r in mi] == [0, 5, 10]
    x, y = dump.samples("0", index=2).astype(float), dump.samples("1", index=2).astype(float)
    assert mi[2]["value"] == pytest.approx(gaussian_mi(x, y))
    exact = [-1.5 * np.log2(1 - rho**2) for rho in (0.0, 0.5, 0.8)]
    np.testing.assert_allclose([r["value"] for r in mi], exact, atol=0.05)
    euc = rows.select("euclidean", "0", "2")[1]
    assert euc["value"] == pytest.approx(mean_paired_distance(dump.samples("0", index=1), dump.samples("2", index=1)), rel=1e-6)
    loss = rows.select("loss", "1")
    assert len(loss) == 3 and loss[0]["client_b"] == "" and loss[0]["value"] == 1.0
    assert AnalysisTable.read(tmp_path / "r.csv")[5]["quantity"] == rows[5]["quantity"]


def test_permutations_give_null_and_pvalue(tmp_path, rng):
    dump = ParameterDump.from_arrays(tmp_path / "d", correlated_clients(rng, n_runs=300, rhos=(0.0, 0.9)))
    rows = analyze(dump, estimators=["gaussian", "ksg"], n_permutations=9, random_state=1)
    strong = rows.select("mi_ksg", "0", "1")[1]
    assert strong["p_value"] == pytest.approx(0.1) and strong["value"] > strong["null_mean"] + 3 * strong["null_std"]
    assert np.isfinite(rows.select("mi_gaussian", "0", "2")[0]["null_mean"])


def test_identical_clients_and_shrinkage_are_noted(tmp_path, rng):
    same = rng.standard_normal((2, 40, 30))
    other = same.copy()
    other[1] += 0.1 * rng.standard_normal((40, 30))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": same, "b": other})
    rows = analyze(dump, estimators=["gaussian", "ksg"], metrics=("chebyshev",))
    first = rows.select("mi_gaussian", "a", "b")[0]
    assert first["value"] == np.inf and "identical samples" in first["note"]
    second = rows.select("mi_gaussian", "a", "b")[1]
    assert np.isfinite(second["value"]) and "ledoit-wolf shrinkage: 40 runs <= 2 x 60" in second["note"]
    assert rows.select("chebyshev", "a", "b")[0]["value"] == 0.0


def test_constant_parameters_are_dropped_and_noted(tmp_path, rng):
    x = rng.standard_normal((500, 4))
    x[:, 1] = 2.0
    y = x + rng.standard_normal((500, 4))
    rows = analyze(ParameterDump.from_arrays(tmp_path / "d", [x, y]), estimators=("gaussian",))
    row = rows.select("mi_gaussian")[0]
    assert "dropped 1 constant parameters" in row["note"] and np.isfinite(row["value"])


def test_layer_selection(tmp_path, rng):
    samples = correlated_clients(rng, n_runs=500, d=4, rhos=(0.9,))
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, layout=[("w", (3,)), ("b", (1,))])
    rows = analyze(dump, estimators=("gaussian",), metrics=("manhattan",), layer="b")
    x, y = dump.samples("0", index=0, layer="b"), dump.samples("1", index=0, layer="b")
    assert rows.select("manhattan", "0", "1")[0]["value"] == pytest.approx(mean_paired_distance(x, y, "manhattan"), rel=1e-6)


def test_bad_arguments(tmp_path, rng):
    dump = ParameterDump.from_arrays(tmp_path / "d", correlated_clients(rng, n_runs=50))
    with pytest.raises(ValueError, match="`estimators` must be one of 'gaussian', 'ksg', 'copula', 'bound'; got 'kde'"):
        analyze(dump, estimators=("kde",))
    with pytest.raises(ValueError, match="`metrics` must be one of"):
        analyze(dump, metrics=("cosine",))
    with pytest.raises(ValueError, match="`n_permutations` must be >= 0"):
        analyze(dump, n_permutations=-1)
    with pytest.raises(ValueError, match="does not exist"):
        analyze(tmp_path / "nope")
    with pytest.raises(ValueError, match="is not an analysis table"):
        (tmp_path / "x.csv").write_text("a,b\n1,2\n")
        AnalysisTable.read(tmp_path / "x.csv")


def test_plots_from_table(tmp_path, rng):
    from mianalysis.report.plots import save_figure

    samples = correlated_clients(rng, n_runs=300)
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, metrics={c: {"accuracy": np.full((3, 300), 0.5)} for c in samples})
    rows = analyze(dump, n_permutations=3)
    rows.write(tmp_path / "r.csv")
    for kind in ("mi", "distances"):
        path = save_figure(AnalysisTable.read(tmp_path / "r.csv"), kind, tmp_path / f"{kind}.png", title="t")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="`kind` must be one of"):
        save_figure(rows, "bars", tmp_path / "x.png")


def test_ksg_from_each_clients_cached_distances(tmp_path, rng):
    from mianalysis import ksg_mi
    from mianalysis.estimators import KSG_NOISE
    from mianalysis.estimators.ksg import add_tie_breaking_noise, standardize_columns

    samples = correlated_clients(rng, n_runs=400)
    dump = ParameterDump.from_arrays(tmp_path / "d", samples)
    cached = analyze(dump, estimators=("ksg",), metrics=(), n_permutations=4, random_state=3, distance_cache=True)
    direct = analyze(dump, estimators=("ksg",), metrics=(), n_permutations=4, random_state=3, distance_cache=False)
    # The cache standardizes each client's parameters (analyze's default) and draws the
    # tie-breaking noise per (checkpoint, client): the same estimates as ksg_mi on those
    # samples, and the permutations of the pair's own stream.
    t, a, b = 2, 0, 2
    noised = [add_tie_breaking_noise(standardize_columns(dump.samples(str(c), index=t).astype(float)), KSG_NOISE,
                                     np.random.default_rng([3, t, c, 2])) for c in range(3)]
    row = cached.select("mi_ksg", "0", "2")[t]
    assert row["value"] == pytest.approx(ksg_mi(noised[a], noised[b], noise=0), abs=1e-12)
    perm_rng = np.random.default_rng([3, t, a, b, 1])
    null = [ksg_mi(noised[a], noised[b][perm_rng.permutation(400)], noise=0) for _ in range(4)]
    assert row["null_mean"] == pytest.approx(np.mean(null), abs=1e-12)
    # Without the cache the noise differs, which cannot move counts of continuous data.
    for r_cached, r_direct in zip(cached, direct):
        assert r_cached["value"] == pytest.approx(r_direct["value"], abs=1e-9)
    with pytest.raises(ValueError, match="`distance_cache` must be 'auto', True or False"):
        analyze(dump, distance_cache="always")


def test_without_distance_cache_no_ksg_call_keeps_distances(tmp_path, rng, monkeypatch):
    import dataclasses

    import mianalysis.analysis.compute as compute
    from mianalysis.estimators.registry import get_estimator, register_estimator

    seen = []
    entry = get_estimator("ksg")
    real_test, real_ksg = compute.mi_permutation_test, entry.function

    def spy_test(*args, **kwargs):
        seen.append(kwargs.get("distance_cache", "missing"))
        return real_test(*args, **kwargs)

    def spy_ksg(*args, **kwargs):
        seen.append(kwargs.get("distance_cache", "missing"))
        return real_ksg(*args, **kwargs)

    monkeypatch.setattr(compute, "mi_permutation_test", spy_test)
    register_estimator(dataclasses.replace(entry, function=spy_ksg), replace=True)  # analyze's KSG estimates
    try:
        dump = ParameterDump.from_arrays(tmp_path / "d", correlated_clients(rng, n_runs=200))
        for permutations in (0, 2):
            # (the intervals' half-sample estimates are left out: they take no distance_cache)
            analyze(dump, estimators=("ksg",), metrics=(), n_permutations=permutations, distance_cache=False,
                    ci_resamples=0)
    finally:
        register_estimator(entry, replace=True)
    assert seen and set(seen) == {False}
