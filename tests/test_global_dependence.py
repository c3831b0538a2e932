"""The global model in the federated recording, and the per-round dependence rows
(MI of local models, MI given the broadcast global model, MI of updates)."""

import numpy as np
import pytest
from scipy import stats

from mianalysis import gaussian_cmi, gaussian_mi, gaussian_mi_null
from mianalysis.estimators.gaussian_se import gaussian_mi_se, wishart_mi_se
from mianalysis.analysis.studies.global_dependence import (QUANTITIES, UNCERTAINTY_COLUMNS, conditional_mi_uncertainty,
                                                    dependence_given_global)


def _synthetic(rng, n=4000, d=2, rounds=2, shared_update=0.0):
    """Global models g[t] (a random walk over rounds) and two clients that start round t
    from g[t-1] and add independent updates (plus `shared_update` times a common one)."""
    g = np.cumsum(rng.standard_normal((rounds + 1, n, d)), axis=0)
    local = {}
    common = rng.standard_normal((rounds + 1, n, d))
    for c in "ab":
        m = np.empty_like(g)
        m[0] = g[0]
        m[1:] = g[:-1] + rng.standard_normal((rounds, n, d)) + shared_update * common[1:]
        local[c] = m
    return local, g


def test_rows_layout_and_known_answers():
    rng = np.random.default_rng(0)
    local, g = _synthetic(rng, n=20_000, d=1, rounds=2, shared_update=1.0)
    rows = dependence_given_global(local, g, units="nats")
    assert [(r["iteration"], r["global_checkpoint"], r["quantity"]) for r in rows] == [
        (t, t - 1, q) for t in (1, 2) for q in QUANTITIES]
    assert all(r["client_a"] == "a" and r["client_b"] == "b" and r["n_runs"] == 20_000 and r["n_features"] == 1
               for r in rows)
    value = {(r["iteration"], r["quantity"]): r["value"] for r in rows}
    # Updates: correlation 1/2, independent of g; local models: var(g[t-1]) = t, so the
    # correlation of the local models is (t + 1) / (t + 2).
    for t in (1, 2):
        assert value[t, "mi_update"] == pytest.approx(-0.5 * np.log(0.75), abs=0.02)
        assert value[t, "cmi_given_global"] == pytest.approx(-0.5 * np.log(0.75), abs=0.02)
        rho = (t + 1) / (t + 2)
        assert value[t, "mi_local"] == pytest.approx(-0.5 * np.log(1 - rho**2), abs=0.02)


def test_independent_updates_leave_no_dependence_given_the_global_model():
    rng = np.random.default_rng(1)
    local, g = _synthetic(rng, n=20_000, d=3, rounds=1)
    value = {r["quantity"]: r["value"] for r in dependence_given_global(local, g, units="nats")}
    assert value["mi_local"] > 0.3
    assert value["cmi_given_global"] == pytest.approx(0.0, abs=0.005)
    assert value["mi_update"] == pytest.approx(0.0, abs=0.005)


def test_updates_are_relative_to_the_model_the_round_started_from():
    # The global model after the round is (nearly) the clients' mean, as with FedAvg:
    # updates relative to it would be strongly anti-correlated; relative to the model
    # the round started from they are independent.
    rng = np.random.default_rng(2)
    local, g = _synthetic(rng, n=20_000, d=1, rounds=1)
    g[1] = (local["a"][1] + local["b"][1]) / 2 + 0.1 * rng.standard_normal(g[1].shape)
    value = {r["quantity"]: r["value"] for r in dependence_given_global(local, g, units="nats")}
    assert value["mi_update"] == pytest.approx(0.0, abs=0.005)
    assert value["cmi_given_global"] == pytest.approx(0.0, abs=0.005)


@pytest.mark.parametrize("local, g, match", [
    ({"a": np.zeros((2, 5, 1))}, np.zeros((2, 5, 1)), "`local` must hold at least two clients"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 5, 1))}, np.zeros((2, 5)), "`global_model` must be a 3-D array"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 5, 1))}, np.zeros((1, 5, 1)), "at least two checkpoints"),
    ({"a": np.zeros((2, 5, 1)), "b": np.zeros((2, 6, 1))}, np.zeros((2, 5, 1)), r"`local\['b'\]` must have the shape"),
])
def test_errors(local, g, match):
    with pytest.raises(ValueError, match=match):
        dependence_given_global(local, g)


def _exact_nats(d, shared_update):
    """Exact MI of `_synthetic`'s round 1 in nats: d independent coordinates, local models
    with correlation (1 + s^2) / (2 + s^2) (g[0] has variance 1), updates (and local models
    given g[0]) with correlation s^2 / (1 + s^2)."""
    s2 = shared_update**2
    local, update = (1 + s2) / (2 + s2), s2 / (1 + s2)
    mi = lambda rho: -0.5 * d * np.log(1 - rho**2)  # noqa: E731
    return {"mi_local": mi(local), "cmi_given_global": mi(update), "mi_update": mi(update)}


def test_intervals_cover_the_exact_mi_and_cmi():
    # 300 replicate experiments of 300 runs, 2 dimensions (joint dimension 6 given g):
    # the 95 % interval should cover the exact value in 95 % of them (binomial sd 1.3 %).
    rng = np.random.default_rng(11)
    exact = _exact_nats(2, 1.0)
    covered = {q: 0 for q in QUANTITIES}
    for _ in range(300):
        local, g = _synthetic(rng, n=300, d=2, rounds=1, shared_update=1.0)
        for r in dependence_given_global(local, g, units="nats"):
            covered[r["quantity"]] += r["ci_low"] <= exact[r["quantity"]] <= r["ci_high"]
            assert r["ci_low"] < r["value"] < r["ci_high"]
    assert all(0.90 <= c / 300 <= 0.99 for c in covered.values()), covered


def test_intervals_follow_ci_level_and_units():
    rng = np.random.default_rng(3)
    local, g = _synthetic(rng, n=400, d=2, rounds=1, shared_update=1.0)
    nats = dependence_given_global(local, g, units="nats")
    bits = dependence_given_global(local, g, units="bits", ci_level=0.5)
    for rn, rb in zip(nats, bits):
        for key in ("value", "se", "null_mean", "null_std"):
            assert rb[key] == pytest.approx(rn[key] / np.log(2), rel=1e-12, abs=1e-15)
        assert rb["p_value"] == pytest.approx(rn["p_value"], rel=1e-9, abs=1e-300)
        # at 50 % the interval is value +- 0.674 se
        assert rb["ci_high"] - rb["value"] == pytest.approx(stats.norm.ppf(0.75) * rb["se"], rel=1e-12)
        assert rn["ci_high"] - rn["value"] == pytest.approx(stats.norm.ppf(0.975) * rn["se"], rel=1e-12)


@pytest.mark.parametrize("d, n", [(1, 30), (3, 60)])  # exact Beta law, and Bartlett's approximation
def test_p_values_are_uniform_under_conditional_independence(d, n):
    # Clients that share only the global model the round started from: their updates are
    # independent and so are the local models given it. 400 draws.
    rng = np.random.default_rng(d)
    p = {q: [] for q in ("cmi_given_global", "mi_update")}
    estimates = []
    for _ in range(400):
        local, g = _synthetic(rng, n=n, d=d, rounds=1)
        rows = {r["quantity"]: r for r in dependence_given_global(local, g, units="nats")}
        for q in p:
            p[q].append(rows[q]["p_value"])
        estimates.append(rows["cmi_given_global"]["value"])
    for q, values in p.items():
        assert 0.02 <= np.mean(np.array(values) < 0.05) <= 0.09, q
        assert stats.kstest(values, "uniform").pvalue > 0.001, q
    # The CMI's null is that of n - k runs (k = d conditioning features): its mean and sd
    # are those of the estimates, and differ from the null of n runs.
    cmi = rows["cmi_given_global"]
    assert cmi["null_mean"] == pytest.approx(0.0, abs=1e-12)
    assert cmi["null_std"] == pytest.approx(gaussian_mi_null(n - d, d, d, units="nats").std, rel=1e-12)
    assert cmi["null_std"] > 1.03 * gaussian_mi_null(n, d, d, units="nats").std
    assert np.std(estimates) == pytest.approx(cmi["null_std"], rel=0.1)
    assert abs(np.mean(estimates)) < 3 * cmi["null_std"] / np.sqrt(400)


def test_p_values_are_uniform_under_independence():
    # Local models independent of each other and of the global model: all three
    # quantities but the updates (which share -g) are null.
    rng = np.random.default_rng(7)
    p = {q: [] for q in ("mi_local", "cmi_given_global")}
    for _ in range(400):
        g = rng.standard_normal((2, 50, 2))
        local = {c: rng.standard_normal((2, 50, 2)) for c in "ab"}
        for r in dependence_given_global(local, g, units="bits"):
            if r["quantity"] in p:
                p[r["quantity"]].append(r["p_value"])
    for q, values in p.items():
        assert 0.02 <= np.mean(np.array(values) < 0.05) <= 0.09, q
        assert stats.kstest(values, "uniform").pvalue > 0.001, q


def test_estimates_are_unchanged_and_the_uncertainty_is_the_estimators():
    rng = np.random.default_rng(4)
    local, g = _synthetic(rng, n=200, d=3, rounds=2, shared_update=0.5)
    rows = dependence_given_global(local, g)
    assert list(rows[0]) == ["iteration", "global_checkpoint", "client_a", "client_b", "quantity", "value",
                             "n_runs", "n_features", *UNCERTAINTY_COLUMNS, "p_adjusted"]
    for r in rows:
        t = r["iteration"]
        xa, xb, start = local["a"][t], local["b"][t], g[t - 1]
        if r["quantity"] == "cmi_given_global":
            assert r["value"] == gaussian_cmi(xa, xb, start)  # the estimate as before: bit for bit
            # The CMI is the MI of the residuals given g[t-1] (plug-in), and its se and null
            # those of n - 3 runs.
            design = np.hstack([np.ones((200, 1)), start])
            ra, rb = (v - design @ np.linalg.lstsq(design, v, rcond=None)[0] for v in (xa, xb))
            assert gaussian_mi(ra, rb, bias_correction=False) == pytest.approx(
                gaussian_cmi(xa, xb, start, bias_correction=False), rel=1e-9)
            null = gaussian_mi_null(197, 3, 3)
            assert r["p_value"] == pytest.approx(null.p_value(r["value"]), rel=1e-12)
            assert r["se"] > 0
        else:
            pair = (xa, xb) if r["quantity"] == "mi_local" else (xa - start, xb - start)
            assert r["value"] == gaussian_mi(*pair)
            assert r["se"] == gaussian_mi_se(*pair)  # the level interval's se of mianalysis.analyze
            null = gaussian_mi_null(200, 3, 3)
            assert (r["null_mean"], r["null_std"]) == (null.mean, null.std)
            assert r["p_value"] == null.p_value(r["value"])


def test_options_null_none_shrinkage_and_bad_level():
    rng = np.random.default_rng(5)
    local, g = _synthetic(rng, n=100, d=2, rounds=1)
    with_null = dependence_given_global(local, g)
    without = dependence_given_global(local, g, null=None)
    for r, s in zip(with_null, without):
        assert list(r) == list(s)  # the same columns
        assert all(np.isnan(s[k]) for k in ("null_mean", "null_std", "p_value"))
        assert all(r[k] == s[k] for k in ("value", "se", "ci_low", "ci_high"))
    shrunk = dependence_given_global(local, g, shrinkage="ledoit-wolf")
    assert all(np.isnan(r[k]) for r in shrunk for k in UNCERTAINTY_COLUMNS)
    for level in (0.0, 1.0, 95, "0.95"):
        with pytest.raises(ValueError, match="`ci_level`"):
            dependence_given_global(local, g, ci_level=level)
    with pytest.raises(ValueError, match="`null` must be one of 'analytic', None"):
        dependence_given_global(local, g, null="permutation")


def test_wishart_mi_se_is_gaussian_mi_se_and_a_constant_block_has_none():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((80, 3))
    y = x[:, :2] + rng.standard_normal((80, 2))
    from mianalysis.estimators.gaussian_se import canonical_correlations

    assert wishart_mi_se(canonical_correlations(x, y), 80, 3, 2, units="nats") == gaussian_mi_se(x, y, units="nats")
    with pytest.raises(ValueError, match="more samples than features"):
        wishart_mi_se([0.1], 3, 1, 2)
    out = conditional_mi_uncertainty(np.ones((80, 2)), y, x, 0.0)
    assert out == {"se": 0.0, "ci_low": 0.0, "ci_high": 0.0, "null_mean": 0.0, "null_std": 0.0, "p_value": 1.0}


# ---------------------------------------------------------------- the simulator's recording
torch = pytest.importorskip("torch")

from mianalysis.dumps import ParameterDump  # noqa: E402
from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates  # noqa: E402
from mianalysis.federated.partition import partition  # noqa: E402


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(0)
    x = rng.random((60, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    return FederatedData(x, y, rng.random((20, 8, 8)).astype(np.float32), rng.integers(0, 10, 20),
                         partition(y, 3, "unequal", seed=0))


@pytest.mark.parametrize("aggregator", ["fedavg", "median"])
def test_recorded_global_model_is_the_simulators(small_data, tmp_path, aggregator):
    cfg = FederatedConfig(rounds=2, client_fraction=1.0, batch_size=10, lr=0.1, aggregator=aggregator)
    sim = FederatedSimulation("mlp", small_data, cfg, replicates=4, seed=3, hidden=16)
    dump, _ = record_replicates(sim, tmp_path / "d", chunk_size=3, layer="5", progress=False, record_global=True)
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.clients == ["0", "1", "2", "global"] and dump.verify() == 4
    n_layer = dump.n_params
    # The final global model of every replicate, run in one piece.
    result = sim.run(record=True)
    np.testing.assert_array_equal(dump.samples("global", index=2), result.final_params[:, -n_layer:])
    np.testing.assert_array_equal(dump.samples("global", index=1), result.global_models[1][:, -n_layer:])
    # Checkpoint 0 is the initial model, which every client holds.
    np.testing.assert_array_equal(dump.samples("global", index=0), dump.samples("0", index=0))
    # Each round's local models started from the global model of the round before: the
    # output bias's sum over classes is unchanged by softmax cross-entropy SGD steps.
    bias = dump.layer_columns("5.bias")
    for t in (1, 2):
        start = dump.samples("global", index=t - 1)[:, bias].sum(1)
        for c in "012":
            np.testing.assert_allclose(dump.samples(c, index=t)[:, bias].sum(1), start, atol=1e-5)
    if aggregator == "fedavg":
        # FedAvg: the new global model is the size-weighted mean of the local models.
        w = small_data.sizes() / small_data.sizes().sum()
        mean = sum(wk * dump.samples(str(c), index=2) for c, wk in enumerate(w))
        np.testing.assert_allclose(dump.samples("global", index=2), mean, atol=1e-5)


def test_without_record_global_the_dump_has_only_clients(small_data, tmp_path):
    cfg = FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10, lr=0.1)
    sim = FederatedSimulation("mlp", small_data, cfg, replicates=2, seed=3, hidden=8)
    dump, _ = record_replicates(sim, tmp_path / "d", layer="5", progress=False)
    assert dump.clients == ["0", "1", "2"]
