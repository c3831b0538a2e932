"""The cross-fitted projection lower bound (mianalysis/estimators/bound.py): known answers,
invariances, its registry entry, interval and permutation null, and its input errors."""

import warnings

import numpy as np
import pytest

from mianalysis import ConstantFeatureWarning, ParameterDump, analyze, mi_permutation_test, projection_mi_bound
from mianalysis.estimators.bound import RUNS_PER_DIMENSION, bound_regime, canonical_directions, projection_bound
from mianalysis.estimators.gaussian import ledoit_wolf_covariance
from mianalysis.estimators.registry import Estimator, get_estimator
from mianalysis.analysis.inference.intervals import mi_interval


def correlated(n, d, rho, seed=0):
    """x, y of shape (n, d) with corr(x_j, y_j) = rho: exact MI -d/2 log2(1 - rho^2) bits."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    return x, rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))


def exact_bits(d, rho):
    return -0.5 * d * np.log2(1 - rho**2)


def reference_directions(x, y, r):
    """The same directions from the p x p shrunk correlation matrices (eigh inverse roots)."""
    def inverse_sqrt(c):
        w, v = np.linalg.eigh(c)
        return (v / np.sqrt(w)) @ v.T

    sx, sy = x.std(axis=0), y.std(axis=0)
    zx, zy = (x - x.mean(axis=0)) / sx, (y - y.mean(axis=0)) / sy
    wx, wy = inverse_sqrt(ledoit_wolf_covariance(zx)), inverse_sqrt(ledoit_wolf_covariance(zy))
    u, _, vt = np.linalg.svd(wx @ (zx.T @ zy / x.shape[0]) @ wy)
    return (wx @ u[:, :r]) / sx[:, None], (wy @ vt[:r].T) / sy[:, None]


@pytest.mark.parametrize("n, p, q", [(40, 60, 50), (300, 8, 12), (30, 5, 90)])
def test_directions_match_the_dense_reference(n, p, q):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, p))
    y = 0.7 * x[:, :1] @ np.ones((1, q)) + rng.standard_normal((n, q))
    a, b = canonical_directions(x, y, 3)
    a0, b0 = reference_directions(x, y, 3)
    sign = np.sign(np.sum(a * a0, axis=0))  # singular vectors are defined up to sign
    np.testing.assert_allclose(a * sign, a0, atol=1e-10 * np.abs(a0).max())
    np.testing.assert_allclose(b * sign, b0, atol=1e-10 * np.abs(b0).max())


@pytest.mark.parametrize("n, d, rho", [(4000, 2, 0.6), (4000, 3, 0.9), (3000, 1, 0.3)])
def test_many_runs_few_dimensions_captures_the_whole_mi_and_not_more(n, d, rho):
    truth = exact_bits(d, rho)
    x, y = correlated(n, d, rho)
    result = projection_bound(x, y)
    assert result.n_components == d  # n_eval // 20 is far above d: every canonical pair is kept
    estimate, low, _ = mi_interval(x, y, "bound", n_resamples=20)
    assert estimate == result.value
    assert low <= truth  # a lower bound, up to its interval
    assert result.value == pytest.approx(truth, rel=0.05)


def test_fewer_runs_than_dimensions_gives_a_positive_value_below_the_truth():
    truth = exact_bits(80, 0.9)  # 95.8 bits over 80 + 80 dimensions, from 100 runs
    values = [projection_mi_bound(*correlated(100, 80, 0.9, seed=s)) for s in range(5)]
    assert all(0 < v < truth for v in values)
    # Two pairs (50-run halves): about 2 of the 80 equal canonical correlations' MI
    assert np.mean(values) < 3 * exact_bits(1, 0.9)


@pytest.mark.parametrize("seed", range(3))
def test_independent_samples_give_about_zero_within_interval_and_null(seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((200, 150)), rng.standard_normal((200, 150))
    estimate, low, high = mi_interval(x, y, "bound", n_resamples=20)
    assert low <= 0 <= high
    res = mi_permutation_test(x, y, estimator="bound", n_permutations=99, random_state=seed)
    # the NWJ bound of independent samples has mean at most 0 (below it where the critic is noisy)
    assert res.p_value > 0.01 and -0.25 < res.null_mean < 0.02
    assert res.estimate == estimate


def test_the_permutation_test_detects_dependence_in_fewer_runs_than_dimensions():
    x, y = correlated(120, 100, 0.8)
    res = mi_permutation_test(x, y, estimator="bound", n_permutations=49, random_state=0)
    assert res.p_value == pytest.approx(1 / 50)
    assert res.estimate > res.null_mean + 5 * res.null_std


def test_invariances_scaling_shift_swap_and_units():
    x, y = correlated(120, 30, 0.7)
    value = projection_mi_bound(x, y)
    scales = np.random.default_rng(1).uniform(0.01, 100, size=30)
    assert projection_mi_bound(x * scales - 3.0, y * scales[::-1] + 1e3) == pytest.approx(value, rel=1e-8)
    assert projection_mi_bound(y, x) == pytest.approx(value, rel=1e-10)  # CCA is symmetric; the same splits
    assert projection_mi_bound(x, y, units="nats") == pytest.approx(value * np.log(2), rel=1e-12)


@pytest.mark.parametrize("scale", [1e155, 1e200, 1e300, 1e-150, 1e-300])
def test_the_bound_is_the_same_at_any_magnitude(scale):
    """Data scaled by 1e155 or more used to give 0.0 (squares overflowed in the fit, and the
    projections came out constant: "no feature varies"); Gaussian and copula estimates did
    not change. The bound is scale invariant and now computed so at any finite magnitude."""
    x, y = correlated(200, 3, 0.7)
    value = projection_mi_bound(x, y)
    assert value > 1.0  # exact 3 x 0.485 = 1.46 bits
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow, no constant-feature warning
        assert projection_mi_bound(x * scale, y * scale) == pytest.approx(value, rel=1e-9)
        assert projection_mi_bound(x * scale, y) == pytest.approx(value, rel=1e-9)  # one side extreme
        assert projection_bound(x * scale, y * scale, repeats=2).value == pytest.approx(
            projection_bound(x, y, repeats=2).value, rel=1e-9)
        assert projection_mi_bound(x * scale, y * scale, copula=True) == pytest.approx(
            projection_mi_bound(x, y, copula=True), rel=1e-12)


def test_identical_x_and_y_are_refused_in_the_bounds_own_words():
    """y a copy of x: the held-out projections are exactly dependent (the MI is infinite).
    The error names the projections and the data, not a covariance block of an internal
    estimate, and recommends nothing (shrinkage used to be offered, which the bound refuses)."""
    x, _ = correlated(100, 3, 0.7)
    with pytest.raises(ValueError, match=r"^the projections of x and y \(2 canonical pairs\) are linearly "
                                         r"dependent \(or nearly so\) on 50 held-out runs: y is a linear function "
                                         r"of x") as caught:
        projection_mi_bound(x, x.copy(), method="gaussian")
    assert "shrinkage" not in str(caught.value) and "covariance matrix" not in str(caught.value)
    # the NWJ bound of a copy is finite (any critic gives one) and large: the MI is infinite
    assert 3.0 < projection_mi_bound(x, x.copy()) < np.inf


def test_copula_bound_is_unchanged_by_monotone_maps_and_recovers_a_gaussian_copula():
    x, y = correlated(120, 30, 0.7)
    value = projection_mi_bound(x, y, copula=True)
    assert projection_mi_bound(np.exp(x), y**3 + y, copula=True) == value  # only ranks enter
    big_x, big_y = correlated(4000, 2, 0.6)
    truth = exact_bits(2, 0.6)
    assert projection_mi_bound(np.sinh(3 * big_x), big_y**3, copula=True) == pytest.approx(truth, rel=0.05)
    # raw data: the map costs the bound
    assert projection_mi_bound(np.sinh(3 * big_x), big_y**3, copula=False) < 0.8 * truth


def test_splits_folds_and_repeats():
    x, y = correlated(160, 40, 0.8)
    first = projection_bound(x, y)
    assert first.fold_values.shape == (2,) and first.value == pytest.approx(first.fold_values.mean())
    assert projection_bound(x, y).value == first.value  # random_state=0 by default: a fixed function of the data
    assert projection_bound(x, y, random_state=1).value != first.value
    more = projection_bound(x, y, folds=4, repeats=3)
    assert more.fold_values.shape == (12,) and more.n_eval == 40
    assert more.n_components == 40 // (2 * RUNS_PER_DIMENSION)
    assert projection_bound(x, y, n_components=5).n_components == 5


def test_constant_features_are_dropped_and_a_constant_side_gives_zero():
    x, y = correlated(120, 10, 0.8)
    with pytest.warns(ConstantFeatureWarning):
        with_constant = projection_mi_bound(np.hstack([x, np.ones((120, 1))]), y)
    assert with_constant == pytest.approx(projection_mi_bound(x, y), rel=1e-10)
    with pytest.warns(ConstantFeatureWarning):
        assert projection_mi_bound(np.ones((120, 3)), y) == 0.0


@pytest.mark.parametrize("kwargs, error, match", [
    ({"folds": 1}, ValueError, "`folds` must be"),
    ({"folds": 40}, ValueError, "`folds` must be"),
    ({"folds": 2.0}, TypeError, "`folds` must be an integer"),
    ({"repeats": 0}, ValueError, "`repeats` must be"),
    ({"n_components": 0}, ValueError, "`n_components` must be"),
    ({"n_components": 30, "method": "gaussian"}, ValueError,
     r"`n_components`=30 needs evaluation folds of more than 61 runs"),
    ({"method": "dv"}, ValueError, "`method` must be one of 'nwj', 'gaussian'"),
    ({"n_components": 11}, ValueError, r"at most the varying features of the smaller side, min\(10, 10\)"),
    ({"copula": "yes"}, ValueError, "`copula` must be True or False"),
    ({"units": "dits"}, ValueError, "`units` must be one of"),
])
def test_bad_settings_are_refused_naming_the_parameter(kwargs, error, match):
    x, y = correlated(60, 10, 0.5)
    with pytest.raises(error, match=match):
        projection_mi_bound(x, y, **kwargs)


def test_too_few_or_unpaired_samples_are_refused():
    x, y = correlated(7, 3, 0.5)
    with pytest.raises(ValueError, match="need at least 8 samples for 2 folds"):
        projection_mi_bound(x, y)
    with pytest.raises(ValueError, match="same number of samples"):
        projection_mi_bound(np.zeros((20, 2)), np.zeros((21, 2)))
    with pytest.raises(ValueError, match="finite"):
        projection_mi_bound(np.full((20, 2), np.nan), np.zeros((20, 2)))


def test_registry_entry_is_a_bound_with_halves_and_a_permutation_null():
    entry = get_estimator("bound")
    assert (entry.kind, entry.interval, entry.nulls, entry.covariance) == (
        "bound", "half-subsampling", ("permutation",), False)
    assert entry.function is projection_mi_bound and entry.regime is bound_regime
    assert get_estimator("gaussian").kind == get_estimator("ksg").kind == get_estimator("copula").kind == "plain"
    with pytest.raises(ValueError, match="`kind` must be one of 'plain', 'shrinkage', 'bound'"):
        Estimator(name="bad", function=projection_mi_bound, arguments=(), display_name="b", label="b", kind="lower")
    assert bound_regime(38, 10, 1.0) == ["halves of 19 runs < 20 for one canonical pair"]
    assert bound_regime(40, 10, 1.0) == []


def test_analyze_gives_bound_rows_with_interval_and_null(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 200, 60))
    b = np.stack([0.8 * a[0] + 0.6 * rng.standard_normal((200, 60)),
                  np.random.default_rng(1).standard_normal((200, 60))])  # checkpoint 1: independent
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": b}, checkpoints=[0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = analyze(dump, estimators=["bound"], metrics=[], n_permutations={"bound": 19}).select("mi_bound",
                                                                                                     "a", "b")
    dependent, independent = rows
    stored = [np.asarray(dump.samples(c, index=0), dtype=np.float64) for c in ("a", "b")]  # float32 in the dump
    assert dependent["value"] == pytest.approx(projection_mi_bound(*stored), rel=1e-12)
    assert dependent["ci_low"] < dependent["value"] < dependent["ci_high"] and dependent["ci_low"] > 0
    assert dependent["p_value"] == pytest.approx(0.05)
    assert dependent["estimate_kind"] == independent["estimate_kind"] == "bound"
    assert independent["ci_low"] <= 0 <= independent["ci_high"] and independent["p_value"] > 0.05
    assert "outside calibration" not in dependent["note"]


def test_the_command_line_labels_the_bound_as_a_lower_bound(tmp_path, capsys):
    from mianalysis.cli import main

    x, y = correlated(100, 20, 0.8)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", "bound"]) == 0
    assert capsys.readouterr().out.startswith(f"bound MI >= {projection_mi_bound(x, y):.6g} bits")
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", "bound",
                 "--permutations", "9"]) == 0
    assert capsys.readouterr().out.startswith("bound MI >= ")


def _projection_bound_script(monkeypatch):
    """experiments/projection_bound.py as a module (its sibling _results importable)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "experiments"))
    spec = importlib.util.spec_from_file_location("experiment_projection_bound", root / "experiments" /
                                                  "projection_bound.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _csv(path):
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


BOUND_COLUMNS = ["design", "d", "runs", "iteration", "pair", "n_components", "mi_exact", "mi_bound", "bound_ci_low",
                 "bound_ci_high", "bound_null_mean", "bound_null_std", "bound_p_value", "captured",
                 "mi_gaussian_shrinkage", "bound_note", "gaussian_note"]
TRANSFORM_COLUMNS = ["transform", "design", "d", "runs", "iteration", "pair", "mi_exact", "bound", "bound_ci_low",
                     "bound_ci_high", "copula_bound", "copula_bound_ci_low", "copula_bound_ci_high", "bound_captured",
                     "copula_bound_captured"]


def test_projection_bound_quick_mode_writes_a_table_whose_bound_lies_below_the_exact_mi(tmp_path, monkeypatch):
    import json

    module = _projection_bound_script(monkeypatch)
    assert module.main(["--quick", "--out", str(tmp_path)]) == tmp_path
    rows = _csv(tmp_path / "projection_bound.csv")
    assert list(rows[0]) == BOUND_COLUMNS
    cells = [(d, n) for d in module.DESIGNS for n in module.QUICK["runs"]]
    assert list(dict.fromkeys((r["design"], int(r["runs"])) for r in rows)) == cells
    assert len(rows) == len(cells) * 4 * 3  # iterations 10-40, three pairs
    assert {r["d"] for r in rows} == {"20"}
    exact, bound, low = (np.array([float(r[c]) for r in rows]) for c in ("mi_exact", "mi_bound", "bound_ci_low"))
    assert (low <= exact).all()  # the check of the script: the interval at or below the exact MI
    big = exact > module.CAPTURE_MIN_BITS
    assert big.sum() == len(rows) / 2  # the fixed-start design's rows
    assert (bound[big] <= exact[big]).all() and (bound[big] > 0).all()
    np.testing.assert_allclose([float(r["captured"]) for r, b in zip(rows, big) if b], bound[big] / exact[big],
                               rtol=1e-5)
    assert all(r["captured"] == "nan" for r, b in zip(rows, big) if not b)
    sidecar = json.loads((tmp_path / "projection_bound.csv.json").read_text())
    assert (sidecar["preset"], sidecar["runs"], sidecar["permutations"]) == ("paper", [60, 80], 19)
    assert list(sidecar["seconds"]) == [f"{d} / {n}" for d, n in cells]  # rows_by_design's cells
    assert [(s["design"], s["runs"]) for s in sidecar["summary"]] == cells + [("all", "all")]
    assert all(s["interval_at_or_below"] == 1.0 for s in sidecar["summary"])
    page = (tmp_path / "projection_bound.md").read_text()  # beside the table, not in docs/
    assert "`paper` preset (20 parameters per client, 40 joint dimensions" in page
    assert "Made by `python experiments/projection_bound.py --quick`" in page


def test_projection_bound_transforms_experiment_compares_both_bounds_on_monotone_outputs(tmp_path, monkeypatch):
    import json

    from mianalysis.estimators.registry import estimator_names, unregister_estimator

    module = _projection_bound_script(monkeypatch)
    try:
        module.main(["--quick", "--transforms", "--out", str(tmp_path)])  # 20 parameters per client, 80 runs
    finally:
        if module.COPULA_BOUND in estimator_names():
            unregister_estimator(module.COPULA_BOUND)
    assert module.COPULA_BOUND not in estimator_names()
    table = _csv(tmp_path / "projection_bound_transforms.csv")
    assert list(table[0]) == TRANSFORM_COLUMNS
    rows = {t: [{k: (v if k in ("transform", "design", "pair") else float(v)) for k, v in r.items()}
                for r in table if r["transform"] == t] for t in module.TRANSFORMS}
    for t, hits in rows.items():
        assert len(hits) == 4 * 3 and {r["runs"] for r in hits} == {80}
        assert all(r["bound"] <= r["mi_exact"] and r["copula_bound"] <= r["mi_exact"] for r in hits)
        assert all(r["bound_ci_low"] <= r["mi_exact"] and r["copula_bound_ci_low"] <= r["mi_exact"] for r in hits)
    # Normal scores do not change under a monotone map: the copula variant is the same under both.
    assert [r["copula_bound"] for r in rows["sinh"]] == pytest.approx([r["copula_bound"] for r in rows["cubic"]],
                                                                      rel=2e-5)
    assert [r["mi_exact"] for r in rows["sinh"]] == [r["mi_exact"] for r in rows["cubic"]]
    sidecar = json.loads((tmp_path / "projection_bound_transforms.csv.json").read_text())
    assert list(sidecar["seconds"]) == ["sinh / 80", "cubic / 80"]
    lines = sidecar["summary"]
    assert [(s["transform"], s["runs"], s["rows"]) for s in lines] == [("sinh", 80, 12), ("cubic", 80, 12)]
    assert all(s["copula_bound_at_or_below"] == 1.0 for s in lines)
    assert module.transforms_markdown(lines)[2].startswith("| sinh | 80 | 12 |")
    assert module.summarise_transforms(rows["sinh"] + rows["cubic"], (200, 400)) == []  # counts it does not hold
    assert "Made by `python experiments/projection_bound.py --quick --transforms`" in (
        tmp_path / "projection_bound_transforms.md").read_text()
