"""The additive-noise model's prediction (mianalysis.analysis.studies.additive) against closed forms.

Data drawn exactly from X_t = theta0 + e_X(t), Y_t = theta0 + e_Y(t) (Gaussian, shared start,
independent noises that grow from one checkpoint to the next) have a known MI at every
checkpoint; the prediction must match it within a few bootstrap standard deviations. Data
where the clients share a growing component (MI rises while the clients move apart) must be
judged to contradict the model.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mianalysis import (
    AdditivePrediction,
    AdditiveTest,
    additive_model_mi,
    additive_model_test,
    additive_model_verdict,
    gaussian_mi,
    isotropic_additive_mi,
)

LOG2 = math.log(2.0)


def exact_mi_bits(s0, sx, sy):
    """Closed-form MI (bits) of X = theta0 + e_X, Y = theta0 + e_Y with Gaussian parts."""
    joint = np.block([[s0 + sx, s0], [s0, s0 + sy]])
    logdet = lambda m: np.linalg.slogdet(m)[1]
    return 0.5 * (logdet(s0 + sx) + logdet(s0 + sy) - logdet(joint)) / LOG2


def additive_case(d, n, seed, *, growth=(3.0, 2.0)):
    """Samples at two checkpoints and the covariances of the parts (noises diagonal)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((d, d)) / math.sqrt(d)
    s0 = a @ a.T + 0.5 * np.eye(d)
    vx0, vy0 = np.linspace(0.2, 1.0, d), np.linspace(1.0, 0.3, d)
    vx1, vy1 = growth[0] * vx0, growth[1] * vy0
    theta0 = rng.standard_normal((n, d)) @ np.linalg.cholesky(s0).T
    ex0 = rng.standard_normal((n, d)) * np.sqrt(vx0)
    ey0 = rng.standard_normal((n, d)) * np.sqrt(vy0)
    ex1 = ex0 + rng.standard_normal((n, d)) * np.sqrt(vx1 - vx0)   # the noise grows
    ey1 = ey0 + rng.standard_normal((n, d)) * np.sqrt(vy1 - vy0)
    samples = (theta0 + ex0, theta0 + ey0, theta0 + ex1, theta0 + ey1)
    truth = (exact_mi_bits(s0, np.diag(vx0), np.diag(vy0)), exact_mi_bits(s0, np.diag(vx1), np.diag(vy1)))
    return samples, truth


def bootstrap(samples, statistic, n_boot, seed):
    """Statistic on `n_boot` resamples of the runs (rows resampled jointly in all arrays)."""
    rng = np.random.default_rng(seed)
    n = samples[0].shape[0]
    out = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        out.append(statistic(*(a[idx] for a in samples)))
    return np.array(out)


def estimated_change(x0, y0, x1, y1):
    return gaussian_mi(x1, y1) - gaussian_mi(x0, y0)


def change_interval(samples, seed=1):
    """Estimate of the MI change and a +-3 bootstrap sd interval around it."""
    estimate = estimated_change(*samples)
    sd = bootstrap(samples, estimated_change, 40, seed).std(ddof=1)
    return estimate, (estimate - 3 * sd, estimate + 3 * sd)


# ---------------------------------------------------------------------- additive data


@pytest.mark.parametrize("d, n, seed", [(3, 3000, 0), (10, 4000, 1)])
def test_prediction_matches_exact_mi_on_additive_data(d, n, seed):
    samples, (mi0, mi1) = additive_case(d, n, seed)
    pred = additive_model_mi(*samples)
    assert isinstance(pred, AdditivePrediction) and pred.method == "covariance"
    assert (pred.n_samples, pred.n_features, pred.units) == (n, d, "bits")
    spread = bootstrap(samples, lambda *s: np.array(
        [(p := additive_model_mi(*s)).mi_start, p.mi_predicted, p.predicted_change]), 30, seed).std(axis=0, ddof=1)
    assert abs(pred.mi_start - mi0) < 4 * spread[0]
    assert abs(pred.mi_predicted - mi1) < 4 * spread[1]
    assert abs(pred.predicted_change - (mi1 - mi0)) < 4 * spread[2]
    assert mi1 < mi0 and pred.predicted_change < 0          # growing noise: the MI falls

    estimate, ci = change_interval(samples)
    assert additive_model_verdict(ci, pred.predicted_change) == "not contradicted"


def test_no_noise_growth_predicts_no_change():
    (x0, y0, _, _), _ = additive_case(4, 500, 2)
    pred = additive_model_mi(x0, y0, x0, y0)
    assert pred.predicted_change == 0.0 and pred.mi_start == pred.mi_predicted
    assert pred.distance_change == 0.0


def test_bias_correction_lowers_both_ends_equally():
    samples, _ = additive_case(5, 400, 3)
    plain = additive_model_mi(*samples, bias_correction=False)
    corrected = additive_model_mi(*samples)
    assert corrected.mi_start < plain.mi_start
    assert corrected.mi_start - plain.mi_start == pytest.approx(corrected.mi_predicted - plain.mi_predicted)
    assert corrected.predicted_change == pytest.approx(plain.predicted_change)


def test_units():
    samples, _ = additive_case(3, 300, 4)
    bits = additive_model_mi(*samples)
    nats = additive_model_mi(*samples, units="nats")
    assert nats.units == "nats"
    assert nats.predicted_change == pytest.approx(bits.predicted_change * LOG2)
    assert nats.distance_change == pytest.approx(bits.distance_change * LOG2)
    iso = isotropic_additive_mi(*samples, units="nats")
    assert iso.mi_start == pytest.approx(isotropic_additive_mi(*samples).mi_start * LOG2)


# ---------------------------------------------------------------------- shared growing component


def shared_component_case(d=4, n=4000, seed=5):
    """X_t = theta0 + c_t Z + e_X(t), Y_t = theta0 + c_t Z + e_Y(t): Z shared, c_t rising."""
    rng = np.random.default_rng(seed)
    theta0, z = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    ex0, ey0 = 0.5 * rng.standard_normal((n, d)), 0.5 * rng.standard_normal((n, d))
    ex1 = ex0 + 0.5 * rng.standard_normal((n, d))   # the clients' own noise grows too
    ey1 = ey0 + 0.5 * rng.standard_normal((n, d))
    c0, c1 = 0.3, 2.0
    return (theta0 + c0 * z + ex0, theta0 + c0 * z + ey0, theta0 + c1 * z + ex1, theta0 + c1 * z + ey1)


def test_shared_growing_component_contradicts_the_model():
    samples = shared_component_case()
    x0, y0, x1, y1 = samples
    assert np.mean(np.sum((x1 - y1) ** 2, axis=1)) > 1.5 * np.mean(np.sum((x0 - y0) ** 2, axis=1))
    estimate, ci = change_interval(samples)
    assert ci[0] > 0                                       # the MI rises although the clients move apart
    for pred in (additive_model_mi(*samples), isotropic_additive_mi(*samples)):
        assert pred.predicted_change < 0
        assert additive_model_verdict(ci, pred.predicted_change) == "contradicted"


# ---------------------------------------------------------------------- isotropic version


def test_isotropic_distance_change_is_the_log_ratio_of_mean_squared_distances():
    samples, _ = additive_case(6, 500, 6)
    x0, y0, x1, y1 = samples
    msd = lambda x, y: np.mean(np.sum((x - y - (x - y).mean(axis=0)) ** 2, axis=1))
    expected = -6 / 2 * math.log2(msd(x1, y1) / msd(x0, y0))
    assert isotropic_additive_mi(*samples).distance_change == pytest.approx(expected, rel=1e-12)
    assert additive_model_mi(*samples).distance_change == pytest.approx(expected, rel=1e-12)


def isotropic_case(d, n, seed, noise_sd):
    rng = np.random.default_rng(seed)
    theta0 = rng.standard_normal((n, d))
    (a, b) = noise_sd
    x0, y0 = theta0 + a * rng.standard_normal((n, d)), theta0 + a * rng.standard_normal((n, d))
    extra = math.sqrt(b**2 - a**2)
    return x0, y0, x0 + extra * rng.standard_normal((n, d)), y0 + extra * rng.standard_normal((n, d))


def test_isotropic_small_noise_reproduces_the_scalar_rule():
    # Noise sd 0.03 -> 0.06 against a start of sd 1: the mean squared distance grows 4-fold,
    # and the prediction tends to -(d/2) log2(4) = -d bits.
    d = 6
    pred = isotropic_additive_mi(*isotropic_case(d, 20_000, 7, (0.03, 0.06)))
    assert pred.method == "isotropic"
    assert pred.distance_change == pytest.approx(-d, abs=0.1)
    assert pred.predicted_change == pytest.approx(-d, abs=0.15)


def test_isotropic_matches_the_exact_mi_and_the_full_version_on_isotropic_data():
    d = 5
    samples = isotropic_case(d, 20_000, 8, (0.7, 1.2))
    exact = lambda v: -d / 2 * math.log2(1 - 1 / (1 + v) ** 2)
    iso, full = isotropic_additive_mi(*samples), additive_model_mi(*samples)
    assert iso.mi_start == pytest.approx(exact(0.49), abs=0.05)
    assert iso.mi_predicted == pytest.approx(exact(1.44), abs=0.05)
    assert iso.predicted_change == pytest.approx(full.predicted_change, abs=0.05)


# ---------------------------------------------------------------------- verdict


@pytest.mark.parametrize("ci, predicted, verdict", [
    ((0.1, 0.3), -0.05, "contradicted"),
    ((-0.5, -0.2), -0.05, "contradicted"),       # fell more than the model allows
    ((-0.12, 0.01), -0.05, "not contradicted"),
    ((-0.05, 0.0), -0.05, "not contradicted"),   # the end points belong to the interval
])
def test_verdict(ci, predicted, verdict):
    assert additive_model_verdict(ci, predicted) == verdict


@pytest.mark.parametrize("ci, predicted, error, match", [
    ((0.3, 0.1), 0.0, ValueError, "lo <= hi"),
    ((0.0, float("nan")), 0.0, ValueError, "`estimated_change_ci` must be finite"),
    ((0.0, 1.0), float("inf"), ValueError, "`predicted_change` must be finite"),
    (0.5, 0.0, TypeError, "`estimated_change_ci` must be a pair"),
    ((0.0, 1.0, 2.0), 0.0, TypeError, "`estimated_change_ci` must be a pair"),
    (("a", 1.0), 0.0, TypeError, "`estimated_change_ci` must be a real number"),
])
def test_verdict_bad_input(ci, predicted, error, match):
    with pytest.raises(error, match=match):
        additive_model_verdict(ci, predicted)


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("function", [additive_model_mi, isotropic_additive_mi])
def test_different_numbers_of_runs(function):
    (x0, y0, x1, y1), _ = additive_case(3, 100, 9)
    with pytest.raises(ValueError, match=r"`y_next` must hold the same runs as `x_start`: got 99 runs"):
        function(x0, y0, x1, y1[:99])


@pytest.mark.parametrize("function", [additive_model_mi, isotropic_additive_mi])
def test_mismatched_dimensions(function):
    (x0, y0, x1, y1), _ = additive_case(3, 100, 9)
    with pytest.raises(ValueError, match=r"`y_start` must have the same parameters as `x_start`.*got 2 features"):
        function(x0, y0[:, :2], x1, y1)


def test_too_few_runs_for_the_full_version():
    (x0, y0, x1, y1), _ = additive_case(5, 10, 10)
    with pytest.raises(ValueError, match=r"more than 2 \* n_features = 10 runs.*n_samples=10.*isotropic"):
        additive_model_mi(x0, y0, x1, y1)
    pred = additive_model_mi(x0, y0, x1, y1, fallback="isotropic")
    assert pred.method == "isotropic"
    assert pred == isotropic_additive_mi(x0, y0, x1, y1)


def test_bad_settings_and_arrays():
    (x0, y0, x1, y1), _ = additive_case(3, 100, 11)
    with pytest.raises(ValueError, match="`fallback` must be None or 'isotropic'"):
        additive_model_mi(x0, y0, x1, y1, fallback="shrink")
    with pytest.raises(ValueError, match="`units` must be one of"):
        isotropic_additive_mi(x0, y0, x1, y1, units="dits")
    with pytest.raises(TypeError, match="`bias_correction` must be True or False"):
        additive_model_mi(x0, y0, x1, y1, bias_correction=1)
    bad = x1.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="`x_next` contains non-finite values: 1 NaN"):
        additive_model_mi(x0, y0, bad, y1)
    with pytest.raises(ValueError, match="need at least 2 runs"):
        isotropic_additive_mi(x0[:1], y0[:1], x1[:1], y1[:1])
    const = x1.copy()
    const[:, 2] = 1.0
    with pytest.raises(ValueError, match="feature 2 of client x is constant at the later checkpoint"):
        additive_model_mi(x0, y0, const, y1)


def test_shrinking_clients_do_not_fit_the_model():
    # The later checkpoint is the first one shrunk 10-fold: the start estimated first cannot
    # fit inside the later covariances, which no additive model allows.
    (x0, y0, _, _), _ = additive_case(3, 400, 12)
    with pytest.raises(ValueError, match="does not fit inside the clients' covariances at the later checkpoint"):
        additive_model_mi(x0, y0, 0.1 * x0, 0.1 * y0)
    with pytest.raises(ValueError, match="does not fit inside the clients' variances at the later checkpoint"):
        isotropic_additive_mi(x0, y0, 0.1 * x0, 0.1 * y0)


def test_isotropic_negative_cross_covariance_means_no_shared_start():
    # Anti-correlated clients: the cross-covariance is negative, which no shared start gives;
    # the isotropic version takes the start's variance as 0, so the model's MI is 0 at both ends.
    rng = np.random.default_rng(13)
    x0 = rng.standard_normal((300, 4))
    y0 = -0.5 * x0 + rng.standard_normal((300, 4))
    pred = isotropic_additive_mi(x0, y0, 2 * x0, 2 * y0)
    assert (pred.mi_start, pred.mi_predicted, pred.predicted_change) == (0.0, 0.0, 0.0)


# ---------------------------------------------------------------------- table helper


def dump_of(tmp_path, clients):
    from mianalysis import ParameterDump

    return ParameterDump.from_arrays(tmp_path / "d", clients, checkpoints=list(range(0, 10 * len(clients["a"]), 10)))


def test_prediction_rows_for_every_pair_and_step(tmp_path):
    from mianalysis import analyze
    from mianalysis.analysis.studies.additive_table import PREDICTION_COLUMNS, additive_prediction_rows

    rng = np.random.default_rng(14)
    theta0 = rng.standard_normal((400, 3))
    scale = np.array([0.3, 0.6, 1.0])[:, None, None]
    clients = {c: theta0 + scale * rng.standard_normal((3, 400, 3)) for c in "abc"}
    dump = dump_of(tmp_path, clients)
    rows = analyze(dump, estimators=("gaussian",))
    out = additive_prediction_rows(rows, dump)
    assert len(out) == 3 * 2 and all(tuple(r) == PREDICTION_COLUMNS for r in out)
    row = next(r for r in out if (r["client_a"], r["client_b"], r["checkpoint"]) == ("a", "c", 2))
    assert (row["checkpoint_from"], row["iteration_from"], row["iteration"], row["n_runs"]) == (1, 10, 20, 400)
    samples = [dump.samples(c, index=t).astype(np.float64) for t in (1, 2) for c in ("a", "c")]
    direct = additive_model_mi(*samples)
    assert row["predicted_change"] == direct.predicted_change and row["method"] == "covariance"
    assert row["mi_predicted"] == direct.mi_predicted and row["note"] == ""
    mi = {r["checkpoint"]: r["value"] for r in rows if r["quantity"] == "mi_gaussian"
          and (r["client_a"], r["client_b"]) == ("a", "c")}
    assert row["estimated_change"] == pytest.approx(mi[2] - mi[1], abs=1e-12)


def test_prediction_rows_fallback_constants_and_misfits(tmp_path):
    from mianalysis import analyze
    from mianalysis.analysis.studies.additive_table import additive_prediction_rows

    rng = np.random.default_rng(15)
    theta0 = rng.standard_normal((8, 5))            # 8 runs <= 2 x 5 parameters: isotropic
    a = theta0 + 0.5 * rng.standard_normal((2, 8, 5))
    b = theta0 + 0.5 * rng.standard_normal((2, 8, 5))
    a[:, :, 4] = b[:, :, 4] = 1.0                    # one constant parameter
    dump = dump_of(tmp_path / "few", {"a": a, "b": b})
    [row] = additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump)
    assert row["method"] == "isotropic" and row["note"].startswith("1 constant parameter(s) left out; ")
    assert row["verdict"] == "not decided" and "without shrinkage" in row["note"]   # 8 runs: no Gaussian MI
    with pytest.raises(ValueError, match="more than 2 \\* n_features"):
        additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump, fallback=None)

    x0 = rng.standard_normal((300, 3))
    y0 = x0 + 0.3 * rng.standard_normal((300, 3))
    shrunk = {"a": np.stack([x0, 0.1 * x0]), "b": np.stack([y0, 0.1 * y0])}
    dump = dump_of(tmp_path / "shrunk", shrunk)
    [row] = additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump)
    assert math.isnan(row["predicted_change"]) and "does not fit inside" in row["note"]
    with pytest.raises(ValueError, match="`rows` hold no pair rows of quantity 'mi_ksg'"):
        additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump, quantity="mi_ksg")


def test_table_rows_carry_the_interval_of_the_estimated_change_and_the_verdict(tmp_path):
    """With an analysis table that has intervals, each step's row holds the paired interval
    of the estimated change (the table's delta row) and the additive model's verdict."""
    from mianalysis import ParameterDump, analyze
    from mianalysis.analysis.studies.additive_table import additive_prediction_rows

    rng = np.random.default_rng(3)
    n, d = 3000, 3
    theta0, z = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    own = lambda sd: sd * rng.standard_normal((n, d))  # noqa: E731
    additive = {c: np.stack([theta0 + own(0.5), theta0 + own(1.0)]) for c in "ab"}
    shared = {c: np.stack([theta0 + 0.3 * z + own(0.5), theta0 + 2.0 * z + own(0.7)]) for c in "ab"}
    for name, arrays, want in (("additive", additive, "not contradicted"), ("shared", shared, "contradicted")):
        dump = ParameterDump.from_arrays(tmp_path / name, arrays)
        rows = analyze(dump, estimators=("gaussian",), metrics=(), ci_resamples=40)
        [row] = additive_prediction_rows(rows, dump)
        [delta] = [r for r in rows if r["quantity"] == "delta_mi_gaussian"]
        assert (row["estimated_ci_low"], row["estimated_ci_high"]) == (delta["ci_low"], delta["ci_high"])
        assert row["verdict"] == want
        samples = [dump.samples(c, index=t).astype(np.float64) for t in (0, 1) for c in "ab"]
        test = additive_model_test(*samples)
        assert (row["difference_ci_low"], row["difference_ci_high"]) == (test.ci_low, test.ci_high)
        assert (row["difference_ci_low"] > 0) == (want == "contradicted")


# ---------------------------------------------------------------------- calibrated test


def fixed_start_case(d, n, seed):
    """theta0 constant: X and Y independent, true MI 0 at both checkpoints, noise doubles."""
    rng = np.random.default_rng(seed)
    x0, y0 = rng.standard_normal((2, n, d))
    return x0, y0, x0 + rng.standard_normal((n, d)), y0 + rng.standard_normal((n, d))


@pytest.mark.parametrize("case", ["fixed start", "shared start"])
def test_calibrated_verdict_on_additive_data(case):
    verdicts, raw, bias = [], [], []
    for seed in range(20):
        if case == "fixed start":
            samples = fixed_start_case(10, 2000, seed)
        else:
            samples, _ = additive_case(3, 600, 100 + seed)
        test = additive_model_test(*samples, random_state=seed)
        assert isinstance(test, AdditiveTest) and test.n_failed == 0 and test.reason == ""
        assert test.ci_low <= test.difference <= test.ci_high
        verdicts.append(test.verdict)
        raw.append(test.prediction.predicted_change)
        bias.append(test.prediction_bias)
    assert verdicts.count("not contradicted") >= 18, verdicts
    if case == "fixed start":
        # The raw prediction is biased below the true change 0 (about -d(d+1)/(4n) (1 - 1/4) nats,
        # -0.015 bits), and the bootstrap finds that bias; uncorrected, it would be contradicted often.
        assert np.mean(raw) < -0.008 and np.mean(bias) < -0.008


def test_calibrated_verdict_on_a_shared_growing_component():
    samples = shared_component_case(d=4, n=2000)
    test = additive_model_test(*samples)
    assert test.verdict == "contradicted" and test.ci_low > 0
    assert test.estimated_change > 0 > test.prediction.predicted_change


def test_calibrated_test_parts():
    samples = fixed_start_case(5, 500, 1)
    test = additive_model_test(*samples, n_resamples=10, random_state=3)
    assert test.prediction == additive_model_mi(*samples)
    assert test.estimated_change == pytest.approx(estimated_change(*samples), abs=1e-12)
    assert test.difference == pytest.approx(
        test.estimated_change - (test.prediction.predicted_change - test.prediction_bias), abs=1e-12)
    assert test == additive_model_test(*samples, n_resamples=10, random_state=3)      # seeded
    nats = additive_model_test(*samples, n_resamples=10, random_state=3, units="nats")
    assert nats.difference == pytest.approx(test.difference * LOG2)
    wider = additive_model_test(*samples, n_resamples=10, random_state=3, level=0.99)
    assert wider.ci_low < test.ci_low and wider.ci_high > test.ci_high
    with pytest.raises(ValueError, match="n_resamples"):
        additive_model_test(*samples, n_resamples=1)
    with pytest.raises(ValueError, match="`level` must be"):
        additive_model_test(*samples, level=1.5)


def test_calibrated_test_not_decided_when_most_resamples_fail(monkeypatch):
    import mianalysis.analysis.studies.additive as additive

    samples = fixed_start_case(3, 300, 2)
    real, calls = additive.additive_model_mi, []

    def failing(*args, **kwargs):  # all runs fit; then every `every`-th resample does
        calls.append(1)
        if len(calls) > 1 and (len(calls) - 2) % every:
            raise ValueError("the shared start ... does not fit inside the clients' covariances")
        return real(*args, **kwargs)

    for every, failed, verdict in ((1, 0, "not contradicted"), (2, 5, "not contradicted"), (3, 6, "not decided")):
        calls.clear()
        monkeypatch.setattr(additive, "additive_model_mi", failing)
        test = additive_model_test(*samples, n_resamples=10)
        assert (test.n_failed, test.verdict) == (failed, verdict)
        if verdict == "not decided":
            assert "failed on 6 of 10 resamples" in test.reason and math.isnan(test.ci_low)
