"""Confidence intervals of MI and distance estimates, paired changes and their verdicts.

Known answers: for x ~ N(0, I_d) and y = rho x + sqrt(1 - rho^2) e, I(x; y) = -d/2 log2(1 - rho^2)
bits, and x - y ~ N(0, 2 (1 - rho) I_d), so the mean Euclidean distance in d = 2 is the Rayleigh
mean sqrt(2 (1 - rho)) sqrt(pi / 2). Coverage tests accept 88-99 % for a nominal 95 %
(binomial sd 1.5-2 points at these repetitions; fixed seeds)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, paired_distances
from mianalysis.analysis import COLUMNS, OPTIONAL_COLUMNS, AnalysisTable
from mianalysis.report.experiment import finding, overall_trend, trend_summary
from mianalysis.analysis.inference.intervals import mean_interval, mi_interval, trend_verdict

RHO = 0.5


def _pair(rng, n, d, rho=RHO):
    x = rng.standard_normal((n, d))
    return x, rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))


def _exact_mi(d, rho=RHO):
    return -0.5 * d * np.log2(1 - rho**2)


@pytest.mark.parametrize("method", ["bootstrap", "wishart"])
def test_gaussian_interval_covers_the_exact_mi(method):
    hits = 0
    for s in range(150):
        x, y = _pair(np.random.default_rng([1, s]), 100, 2)
        _, low, high = mi_interval(x, y, "gaussian", n_resamples=50, random_state=s, method=method)
        hits += low <= _exact_mi(2) <= high
    assert 0.88 <= hits / 150 <= 0.99


def test_distance_interval_covers_the_exact_mean_distance():
    exact = np.sqrt(2 * (1 - RHO)) * np.sqrt(np.pi / 2)
    hits = 0
    for s in range(200):
        x, y = _pair(np.random.default_rng([2, s]), 100, 2)
        _, low, high = mean_interval(paired_distances(x, y, "euclidean"))
        hits += low <= exact <= high
    assert 0.88 <= hits / 200 <= 0.99


def test_ksg_half_subsampling_interval_covers_the_exact_mi():
    hits = 0
    for s in range(40):
        x, y = _pair(np.random.default_rng([3, s]), 200, 1)
        _, low, high = mi_interval(x, y, "ksg", n_resamples=10, random_state=s)
        hits += low <= _exact_mi(1) <= high
    assert hits >= 34  # 85 %


def _two_checkpoints(path, rho0, rho1, n, d=2, seed=0, carry=0.0):
    """A dump of clients a, b at two checkpoints (iterations 1 and 2, after training began);
    the second checkpoint's runs keep a share `carry` of the first's (the same runs, as in training)."""
    rng = np.random.default_rng(seed)
    x0, y0 = _pair(rng, n, d, rho0)
    x1, y1 = _pair(rng, n, d, rho1)
    if carry:
        x1, y1 = carry * x0 + np.sqrt(1 - carry**2) * x1, carry * y0 + np.sqrt(1 - carry**2) * y1
    return ParameterDump.from_arrays(path, {"a": np.stack([x0, x1]), "b": np.stack([y0, y1])}, checkpoints=[1, 2])


def _delta(rows, quantity):
    (row,) = rows.select(f"delta_{quantity}")
    return row


def test_a_real_rise_in_mi_is_detected(tmp_path):
    for s in range(3):
        dump = _two_checkpoints(tmp_path / str(s), 0.2, 0.7, 400, seed=s)
        rows = analyze(dump, estimators=["gaussian", "ksg"], metrics=["euclidean"], ci_resamples={"gaussian": 50, "ksg": 10},
                       random_state=s,
                       verify=False)
        assert _delta(rows, "mi_gaussian")["verdict"] == "rising"
        assert _delta(rows, "mi_ksg")["verdict"] == "rising"
        assert _delta(rows, "euclidean")["verdict"] == "falling"  # more correlated: closer
        row = _delta(rows, "mi_gaussian")
        later, earlier = rows.select("mi_gaussian")[1]["value"], rows.select("mi_gaussian")[0]["value"]
        assert row["value"] == pytest.approx(later - earlier) and row["ci_low"] < row["value"] < row["ci_high"]


def test_identical_distributions_give_no_detectable_change(tmp_path):
    same = 0
    for s in range(40):
        dump = _two_checkpoints(tmp_path / str(s), RHO, RHO, 100, seed=100 + s)
        rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=40, random_state=s,
                       verify=False)
        same += _delta(rows, "mi_gaussian")["verdict"] == "no detectable change"
        same += _delta(rows, "euclidean")["verdict"] == "no detectable change"
    assert same >= 0.85 * 80


def test_changes_are_paired(tmp_path):
    """Checkpoints that share most of their runs' variation: the change's interval is far
    narrower than either estimate's (it would be wider if the resamples were not the same runs)."""
    dump = _two_checkpoints(tmp_path / "d", RHO, RHO, 300, seed=5, carry=0.99)
    rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=50, verify=False)
    for q in ("mi_gaussian", "euclidean"):
        est = rows.select(q)[1]
        assert np.isfinite(est["ci_low"])
        width = _delta(rows, q)["ci_high"] - _delta(rows, q)["ci_low"]
        assert width < 0.5 * (est["ci_high"] - est["ci_low"])


def test_no_verdict_from_a_shrinkage_estimate(tmp_path):
    # 40 runs <= 2 x 40 joint dimensions: Ledoit-Wolf shrinkage, even with a large rise.
    dump = _two_checkpoints(tmp_path / "d", 0.1, 0.9, 40, d=20)
    rows = analyze(dump, estimators=["gaussian"], metrics=[], ci_resamples=20, verify=False)
    row = _delta(rows, "mi_gaussian")
    assert row["verdict"] == "not made: shrinkage estimate" and "ledoit-wolf" in row["note"]
    assert finding(rows)["mi_gaussian_rising"] == "not made: shrinkage estimate"
    assert row["estimate_kind"] == "shrinkage"
    assert trend_verdict(0.1, 0.2, shrinkage=row["estimate_kind"] == "shrinkage") == "not made: shrinkage estimate"


def test_same_random_state_same_intervals(tmp_path):
    dump = _two_checkpoints(tmp_path / "d", 0.3, 0.5, 200)
    kwargs = {"estimators": ["gaussian", "ksg"], "metrics": ["euclidean"], "ci_resamples": {"gaussian": 30, "ksg": 5},
              "verify": False}
    first, again, other = (analyze(dump, random_state=r, **kwargs) for r in (0, 0, 1))
    ci = [(r["quantity"], r["ci_low"], r["ci_high"]) for r in first]
    assert ci == [(r["quantity"], r["ci_low"], r["ci_high"]) for r in again]
    for q in ("delta_mi_ksg", "mi_ksg"):  # resampled: another random state, other resamples
        assert first.select(q)[0]["ci_low"] != other.select(q)[0]["ci_low"]
    # the Gaussian estimate's own interval comes from a formula (level_method), and so does its
    # change's at 200 runs >= 4 x the joint dimension (change_method: influence values)
    for q in ("mi_gaussian", "delta_mi_gaussian"):
        assert first.select(q)[0]["ci_low"] == other.select(q)[0]["ci_low"]


def test_level_and_method_are_recorded(tmp_path):
    dump = _two_checkpoints(tmp_path / "d", 0.3, 0.5, 100)
    narrow = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=20, ci_level=0.5,
                     out=tmp_path / "t.csv")
    wide = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=20, ci_level=0.99)
    for q in ("mi_gaussian", "euclidean"):
        n, w = narrow.select(q)[0], wide.select(q)[0]
        assert w["ci_low"] < n["ci_low"] < n["value"] < n["ci_high"] < w["ci_high"]
    import json

    settings = json.loads((tmp_path / "t.csv.json").read_text())["settings"]
    assert settings["ci_level"] == 0.5 and settings["ci_resamples"] == {"gaussian": 20}
    assert settings["ci_method"]["mi_gaussian"] == "wishart" and settings["ci_method"]["distances"] == "normal"
    assert settings["ci_method"]["delta_mi_gaussian"] == "influence where n_runs >= 4 x the joint dimension, else " \
        "bootstrap" and "delta_mi_ksg" not in settings["ci_method"]
    assert [r["ci_low"] for r in AnalysisTable.read(tmp_path / "t.csv")] == pytest.approx(
        [r["ci_low"] for r in narrow], nan_ok=True)


def test_zero_resamples_give_no_mi_interval(tmp_path):
    dump = _two_checkpoints(tmp_path / "d", 0.3, 0.5, 100)
    rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=0)
    assert np.isnan(rows.select("mi_gaussian")[0]["ci_low"])
    assert _delta(rows, "mi_gaussian")["verdict"] == "not made: no interval"
    assert np.isfinite(rows.select("euclidean")[0]["ci_low"])  # distances need no resamples


@pytest.mark.parametrize("kwargs, match", [({"ci_level": 1.5}, "`ci_level`"), ({"ci_level": 0}, "`ci_level`"),
                                           ({"ci_resamples": -1}, "`ci_resamples`"),
                                           ({"ci_resamples": {"knn": 3}}, "`ci_resamples` names unknown")])
def test_bad_interval_settings_are_named(tmp_path, kwargs, match):
    dump = _two_checkpoints(tmp_path / "d", 0.3, 0.5, 20)
    with pytest.raises(ValueError, match=match):
        analyze(dump, **kwargs)


def test_old_tables_without_intervals_still_load_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from mianalysis.report.plots import save_figure

    dump = _two_checkpoints(tmp_path / "d", 0.3, 0.5, 100)
    rows = analyze(dump, estimators=["gaussian", "ksg"], metrics=["euclidean"], ci_resamples={"gaussian": 10, "ksg": 2})
    old = [{k: v for k, v in r.items() if k not in OPTIONAL_COLUMNS} for r in rows if "delta" not in r["quantity"]]
    with open(tmp_path / "old.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[c for c in COLUMNS if c not in OPTIONAL_COLUMNS])
        writer.writeheader()
        writer.writerows(old)
    table = AnalysisTable.read(tmp_path / "old.csv")
    assert all(np.isnan(r["ci_low"]) and r["verdict"] == "" for r in table)
    assert save_figure(table, "mi", tmp_path / "mi.png").exists()
    assert save_figure(table, "distances", tmp_path / "d.png").exists()
    assert finding(table)["distances_growing"].startswith("not made")
    rows.write(tmp_path / "new.csv")
    assert save_figure(AnalysisTable.read(tmp_path / "new.csv"), "mi", tmp_path / "mi_new.png").exists()


def test_trend_summary_reads_the_step_verdicts(tmp_path):
    rng = np.random.default_rng(0)
    # checkpoint 0 is estimated like the others (not a shared start): its step is a test too
    steps = [_pair(rng, 300, 2, rho) for rho in (0.0, 0.2, 0.5, 0.8)]
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.stack([s[0] for s in steps]),
                                                      "b": np.stack([s[1] for s in steps])},
                                     checkpoints=[0, 1, 2, 3])
    rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=40, verify=False)
    text = trend_summary(rows)
    assert "mi_gaussian a-b: rising (1: rising, 2: rising, 3: rising)" in text
    assert "euclidean a-b: falling" in text
    result = finding(rows)
    assert result["mi_gaussian_rising"] is True and result["distances_growing"] is False
    assert overall_trend([]).startswith("not made")


def test_trend_summary_says_a_reason_shared_by_every_step_once(tmp_path):
    # 60 runs of 40 + 40 parameters: every Gaussian estimate a shrinkage number, no verdict made.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 60, 40))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": a + rng.standard_normal(a.shape)},
                                     checkpoints=[0, 1, 2, 3])
    line = [ln for ln in trend_summary(analyze(dump, estimators=["gaussian"], metrics=[], verify=False)).splitlines()
            if ln.startswith("mi_gaussian a-b")][0]
    assert line == "mi_gaussian a-b: not made: shrinkage estimate (every step)"


def test_cli_prints_the_interval_verdicts(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from mianalysis.cli import main

    _two_checkpoints(tmp_path / "d", 0.2, 0.7, 300)
    table = str(tmp_path / "t.csv")
    assert main(["analyze", str(tmp_path / "d"), "--out", table, "--no-progress", "--estimators", "gaussian",
                 "--ci-resamples", "30", "--ci-level", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "paired change between consecutive checkpoints (from its interval), corrected over a family of steps " \
           "(the 90% intervals' error rate" in out
    assert "verdicts: Holm over each client pair's steps of one quantity (family-wise error rate 0.1)" in out
    assert "mi_gaussian a-b: rising (2: rising)" in out and "euclidean a-b: falling (2: falling)" in out
    assert main(["plot", table, "--out", str(tmp_path / "mi.png"), "--kind", "mi"]) == 0
    assert "mi_gaussian a-b: rising (2: rising)" in capsys.readouterr().out


def test_finding_does_not_read_a_rise_from_point_estimates(tmp_path):
    """Same distribution at both checkpoints, one whose point estimates rise by chance: the
    old comparison of point estimates said "rising"; the interval verdict does not."""
    for s in range(20):
        dump = _two_checkpoints(tmp_path / str(s), RHO, RHO, 200, seed=200 + s)
        rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], ci_resamples=30, verify=False)
        first, last = (r["value"] for r in rows.select("mi_gaussian"))
        if last > first and _delta(rows, "mi_gaussian")["verdict"] == "no detectable change":
            break
    else:
        pytest.fail("no repetition with a chance rise")
    assert finding(rows)["mi_gaussian_rising"] is False


def test_above_null_comes_from_the_p_value_never_from_a_shrinkage_estimate(tmp_path):
    """MI far above its null: "above null" needs p <= 0.05, which 4 permutations cannot give
    (p >= 1/5) however far the estimate sits from the null's mean; 19 can; and no verdict
    from a Ledoit-Wolf estimate, whose permutations' p-value reaches 0.05 all the same."""
    dump = _two_checkpoints(tmp_path / "d", 0.8, 0.8, 200)
    kwargs = {"estimators": ["gaussian", "ksg"], "metrics": [], "ci_resamples": 0, "verify": False}
    few = analyze(dump, n_permutations={"ksg": 4}, gaussian_null="analytic", **kwargs)
    row = few.select("mi_ksg")[1]
    assert row["value"] > row["null_mean"] + 3 * row["null_std"] and row["p_value"] == pytest.approx(0.2)
    assert finding(few)["mi_ksg_above_null"] is False
    assert finding(few, {"ksg": 4})["mi_ksg_above_null"] == "not made: 4 permutations cannot give p <= 0.05"
    assert finding(few, {"ksg": 4})["mi_gaussian_above_null"] is True  # an analytic null needs no permutations
    assert finding(few)["mi_gaussian_above_null"] is True  # the analytic null's p-value, no permutations
    assert finding(analyze(dump, n_permutations={"ksg": 19}, **kwargs))["mi_ksg_above_null"] is True
    assert finding(analyze(dump, **kwargs))["mi_ksg_above_null"] == "not made: no null"
    nan = [{**r, "value": np.nan} if r["quantity"] == "mi_ksg" and r["iteration"] == 1 else r for r in few]
    assert finding(nan)["mi_ksg_above_null"] == "not made: no estimate"
    shrunk = analyze(_two_checkpoints(tmp_path / "s", 0.9, 0.9, 40, d=20), estimators=["gaussian"], metrics=[],
                     n_permutations=19, ci_resamples=0, verify=False)
    assert "ledoit-wolf" in shrunk.select("mi_gaussian")[1]["note"] and shrunk.select("mi_gaussian")[1]["p_value"] <= 0.05
    assert finding(shrunk)["mi_gaussian_above_null"] == "not made: shrinkage estimate"


def _wide_samples(seed, n=240, d=40):
    """Paired samples of 2 x `d` dimensions (more than the weighted path's 64) with tied values
    (a rounded column, a float32 lattice) and a column that only one run moves off 0, so that
    some bootstrap resamples hold it constant."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = 0.6 * x + 0.8 * rng.standard_normal((n, d))
    x[:, 0] = np.round(x[:, 0])  # five or so values, many ties
    y[:, 1] = np.round(4 * y[:, 1]) / 4
    x[:, 2] = 0.0
    x[7, 2] = 1.0  # constant in the resamples that miss run 7
    y[:, 3] = np.sinh(3 * y[:, 3])
    return x, y


def test_resample_scores_are_the_normal_scores_of_the_resample_bit_for_bit():
    from mianalysis.analysis.inference.intervals import ResampleScores, resample_indices
    from mianalysis.estimators.copula import normal_scores

    x, _ = _wide_samples(0)
    scores = ResampleScores(x)
    assert scores.ties
    idx = list(resample_indices(len(x), 6, "copula", 1)) + list(resample_indices(len(x), 3, "ksg", 2))
    for rows in idx:
        counts = np.bincount(rows, minlength=len(x))
        distinct = np.flatnonzero(counts)
        first = np.array([np.flatnonzero(rows == i)[0] for i in distinct])  # a copy of each distinct run
        keep = np.ones(x.shape[1], dtype=bool)
        keep[[2, 5]] = False
        want = normal_scores(x[rows])[first]
        assert np.array_equal(scores.scores(counts, distinct), want)
        assert np.array_equal(scores.scores(counts, distinct, keep), want[:, keep])
    no_ties = ResampleScores(x[:, 5:])
    assert not no_ties.ties
    rows = idx[0]
    counts = np.bincount(rows, minlength=len(x))
    assert np.array_equal(no_ties.scores(counts, np.flatnonzero(counts)),
                          normal_scores(x[rows][:, 5:])[[np.flatnonzero(rows == i)[0] for i in np.flatnonzero(counts)]])


@pytest.mark.filterwarnings("ignore:dropped 1 constant feature")
@pytest.mark.parametrize("estimator", ["gaussian", "copula"])
def test_wide_resamples_give_the_estimate_of_each_resample(estimator):
    # Above 64 joint dimensions the replicates come from the distinct runs of each resample,
    # weighted by their copies: the estimator on the resample itself, to rounding.
    from mianalysis import gaussian_copula_mi, gaussian_mi
    from mianalysis.analysis.inference.intervals import WEIGHTED_MIN_DIMS, mi_replicates, resample_indices
    from mianalysis.estimators.repeats import runs_checked

    x, y = _wide_samples(1)
    assert x.shape[1] + y.shape[1] > WEIGHTED_MIN_DIMS
    function = gaussian_mi if estimator == "gaussian" else gaussian_copula_mi
    idx = resample_indices(len(x), 12, estimator, 3)
    got = mi_replicates(x, y, estimator, idx)
    with runs_checked():  # bootstrap resamples repeat runs on purpose (the copula refuses copies otherwise)
        want = np.array([function(x[r], y[r]) for r in idx])  # each drops the columns constant in its resample
    assert any(np.ptp(x[r][:, 2]) == 0 for r in idx) and any(np.ptp(x[r][:, 2]) > 0 for r in idx)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    halves = resample_indices(len(x), 4, "ksg", 4)  # rows without copies: the same
    np.testing.assert_allclose(mi_replicates(x, y, estimator, halves),
                               [function(x[r], y[r]) for r in halves], rtol=1e-10, atol=1e-12)


def test_wide_resamples_too_few_for_the_plain_estimate_fall_back_to_shrinkage():
    # Resamples of 100 runs of 2 x 40 dimensions hold ~63 distinct runs, fewer than the 80
    # dimensions: the Gram matrix of the distinct runs is singular, and the replicate is the
    # shrinkage estimate of the resample, as on the resample itself.
    from mianalysis import gaussian_mi
    from mianalysis.analysis.inference.intervals import mi_replicates, resample_indices

    x, y = _wide_samples(2, n=100)
    idx = resample_indices(len(x), 3, "gaussian", 5)
    got = mi_replicates(x, y, "gaussian", idx)
    want = [gaussian_mi(x[r][:, np.ptp(x[r], axis=0) > 0], y[r], shrinkage="ledoit-wolf") for r in idx]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_resample_scores_do_not_depend_on_the_number_of_threads():
    # The kernel gives each column to one thread: one thread or all, the same bits.
    import numba

    from mianalysis.analysis.inference.intervals import ResampleScores, resample_indices

    x, _ = _wide_samples(2)
    rows = resample_indices(len(x), 1, "copula", 5)[0]
    counts = np.bincount(rows, minlength=len(x))
    distinct = np.flatnonzero(counts)
    scores = ResampleScores(x)
    threads = numba.get_num_threads()
    want = scores.scores(counts, distinct)
    try:
        numba.set_num_threads(1)
        got = scores.scores(counts, distinct)
    finally:
        numba.set_num_threads(threads)
    assert np.array_equal(got, want)
