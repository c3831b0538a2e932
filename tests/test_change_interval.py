"""The delta method's se of an MI change (influence values) and where analyze uses it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, gaussian_mi
from mianalysis.analysis.inference.intervals import (INFLUENCE_MIN_RUNS_PER_DIMENSION, change_method, level_se, mi_influence,
                                           mi_replicates, normal_interval, resample_indices)
from mianalysis.estimators.gaussian_se import gaussian_mi_influence, influence_change_se
from mianalysis.estimators.registry import get_estimator


def _two_checkpoints(rng, n, d, r0, r1, a):
    """x and y at two checkpoints: each coordinate correlated r_t between x and y, a between checkpoints."""
    s0, e0, f0 = rng.standard_normal((3, n, d))
    s1, e1, f1 = (a * u + np.sqrt(1 - a * a) * rng.standard_normal((n, d)) for u in (s0, e0, f0))
    return [np.sqrt(r) * s + np.sqrt(1 - r) * e for s, e, r in ((s0, e0, r0), (s0, f0, r0), (s1, e1, r1), (s1, f1, r1))]


def test_influence_values_are_the_derivative_of_the_estimate():
    # Giving run i the weight 1 + eps changes the (weighted, uncorrected) log-det MI by eps h_i / n to first order.
    rng = np.random.default_rng(0)
    x, y, _, _ = _two_checkpoints(rng, 60, 2, 0.5, 0.5, 0.0)
    h = gaussian_mi_influence(x, y, units="nats")
    assert abs(h.sum()) < 1e-9

    def mi(weights):
        z = np.hstack([x, y])
        m = weights @ z / weights.sum()
        c = (z - m).T @ ((z - m) * weights[:, None]) / weights.sum()
        return 0.5 * (np.linalg.slogdet(c[:2, :2])[1] + np.linalg.slogdet(c[2:, 2:])[1] - np.linalg.slogdet(c)[1])

    eps = 1e-6
    for i in (0, 7, 33):
        w = np.ones(60)
        w[i] += eps
        assert (mi(w) - mi(np.ones(60))) / eps * 60 == pytest.approx(h[i], rel=1e-4)


def test_the_change_se_matches_the_spread_of_the_change_over_draws():
    got, ses = [], []
    for r in range(300):
        x0, y0, x1, y1 = _two_checkpoints(np.random.default_rng([1, r]), 400, 3, 0.3, 0.4, 0.9)
        got.append(gaussian_mi(x1, y1) - gaussian_mi(x0, y0))
        ses.append(influence_change_se(gaussian_mi_influence(x0, y0), gaussian_mi_influence(x1, y1)))
    assert np.mean(ses) / np.std(got, ddof=1) == pytest.approx(1.0, abs=0.12)


def test_influence_change_se_checks_its_input():
    with pytest.raises(ValueError, match="same >= 2 runs"):
        influence_change_se([0.0, 1.0], [0.0, 1.0, 2.0])


def test_change_method_rule():
    n = 100
    assert change_method("gaussian", n, int(n / INFLUENCE_MIN_RUNS_PER_DIMENSION)) == "influence"
    assert change_method("gaussian", n, int(n / INFLUENCE_MIN_RUNS_PER_DIMENSION) + 1) == "bootstrap"
    assert change_method("ksg", 10_000, 2) == "half-subsampling"
    entry = get_estimator("gaussian")
    with pytest.raises(ValueError, match="`change_interval`"):
        replace(entry, change_interval="jackknife")
    with pytest.raises(ValueError, match="needs covariance=True"):
        replace(get_estimator("ksg"), change_interval="influence")
    from mianalysis.estimators.registry import register_estimator, unregister_estimator

    register_estimator(replace(entry, name="gaussian_boot", level_interval=None, stream=None))
    try:  # the level's resamples serve the changes too
        assert change_method("gaussian_boot", 10_000, 2) == "bootstrap"
    finally:
        unregister_estimator("gaussian_boot")
    with pytest.raises(ValueError, match="not one"):
        mi_influence(np.zeros((5, 1)), np.zeros((5, 1)), "ksg")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("n, influence", [(160, True), (100, False)])  # 4 x and 2.5 x the 40 joint dimensions
def test_analyze_takes_the_change_se_from_influence_values_from_4_runs_per_dimension(tmp_path, n, influence):
    x0, y0, x1, y1 = (v.astype(np.float32) for v in _two_checkpoints(np.random.default_rng(2), n, 20, 0.3, 0.4, 0.9))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.stack([x0, x1]), "b": np.stack([y0, y1])},
                                     checkpoints=[1, 2])
    table = analyze(dump, estimators=["gaussian", "copula"], metrics=[], gaussian_null="analytic", verify=False)
    for e in ("gaussian", "copula"):
        row = table.select(f"delta_mi_{e}")[0]
        samples = [v.astype(np.float64) for v in (x0, y0, x1, y1)]
        want = mi_influence(*samples[2:], e).change_se(mi_influence(*samples[:2], e))
        if influence:
            assert row["change_se"] == pytest.approx(want, rel=1e-9)
            assert (row["ci_low"], row["ci_high"]) == pytest.approx(normal_interval(row["value"], want, 0.95))
        else:  # the paired bootstrap, as before
            idx = resample_indices(n, 20, e, np.random.default_rng(0))
            assert row["change_se"] != pytest.approx(want, rel=1e-3)
            assert np.isfinite(row["change_se"]) and row["change_se"] > 0
            del idx  # the analysis draws its own resamples; only the method is checked here
        assert table.settings["ci_method"][f"delta_mi_{e}"] == change_method(e)


def test_mi_influence_of_a_side_without_variation_is_zero():
    x = np.ones((10, 2))
    y = np.random.default_rng(0).standard_normal((10, 2))
    assert np.array_equal(mi_influence(x, y, "gaussian").values, np.zeros(10))
    assert mi_replicates(x, y, "gaussian", resample_indices(10, 2, "gaussian", 0)).tolist() == [0.0, 0.0]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_analyze_ranks_each_client_once_per_checkpoint_and_matches_ranking_each_pair(tmp_path):
    # Three clients (each in two pairs), two checkpoints: the copula's transform runs once per
    # client and checkpoint, and the estimate, level interval and change se are those of the
    # transform of each pair's varying columns (a near-constant column is dropped before ranking).
    from mianalysis.estimators.copula import gaussian_copula_mi, normal_scores
    from mianalysis.estimators.registry import register_estimator, unregister_estimator

    rng = np.random.default_rng(5)
    n, d = 200, 6
    shared = rng.standard_normal((2, n, d))
    clients = {}
    for c in "abc":
        v = np.exp(0.5 * shared + rng.standard_normal((2, n, d)))  # non-Gaussian marginals
        v[:, :, 0] = 1.0 + 1e-12 * rng.standard_normal((2, n))  # below float resolution: dropped, not ranked
        clients[c] = v
    dump = ParameterDump.from_arrays(tmp_path / "d", clients, checkpoints=[1, 2])
    calls = []

    def counted(samples):
        calls.append(samples.shape)
        return normal_scores(samples)

    register_estimator(replace(get_estimator("copula"), name="copula_counted", transform=counted, stream=None))
    try:
        table = analyze(dump, estimators=["copula_counted"], metrics=[], gaussian_null="analytic", verify=False)
    finally:
        unregister_estimator("copula_counted")
    assert len(calls) == 3 * 2
    samples = {c: [dump.samples(i, index=t).astype(np.float64)[:, 1:] for t in (0, 1)]
               for i, c in enumerate(dump.clients)}
    rows = {(r["checkpoint"], r["client_a"], r["client_b"]): r for r in table.select("mi_copula_counted")}
    for (t, a, b), row in rows.items():
        x, y = samples[a][t], samples[b][t]
        assert row["value"] == gaussian_copula_mi(x, y)
        assert (row["ci_low"], row["ci_high"]) == normal_interval(row["value"], level_se(x, y, "copula"), 0.95)
    for row in table.select("delta_mi_copula_counted"):
        a, b = row["client_a"], row["client_b"]
        want = mi_influence(samples[a][1], samples[b][1], "copula").change_se(
            mi_influence(samples[a][0], samples[b][0], "copula"))
        assert row["change_se"] == want


def test_a_transform_made_elsewhere_must_match_the_varying_columns():
    x = np.random.default_rng(0).standard_normal((50, 3))
    with pytest.raises(ValueError, match="pass the transform of the varying columns"):
        level_se(x, x[:, :2], "copula", transformed=(x, x))
