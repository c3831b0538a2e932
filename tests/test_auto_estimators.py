"""analyze's default estimators, "auto": per pair and checkpoint an estimate inside its
calibrated regime (the copula estimate, KSG as well where it is calibrated) or a labelled
lower bound (the projection bound), each row saying which and why."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.estimators import calibration  # where the thresholds live (the regimes read them when called)
from mianalysis.analysis.inference.choice import AUTO_ESTIMATORS, choose
from mianalysis.report.experiment import summary_table

FAST = {"metrics": [], "ci_resamples": 4, "verify": False}


def _dump(path, n_runs, d, checkpoints=1, rho=0.6, seed=0, varying=None):
    """Clients a, b with d parameters each, coordinate j of b correlated rho with that of a;
    `varying` (per checkpoint) keeps only the first so many parameters varying."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((checkpoints, n_runs, d))
    b = rho * a + np.sqrt(1 - rho**2) * rng.standard_normal((checkpoints, n_runs, d))
    for t, keep in enumerate(varying or []):
        a[t, :, keep:] = 1.0
        b[t, :, keep:] = 2.0
    return ParameterDump.from_arrays(path, {"a": np.sinh(a), "b": np.sinh(b)})


def _mi_rows(rows):
    return [r for r in rows if r["quantity"].startswith("mi_")]


@pytest.mark.parametrize("n_runs, n_features, chosen", [
    (400, 716, ["bound"]),
    (1574, 716, ["bound"]),  # 2.198 runs per dim: just below the copula's calibrated 2.2
    (1576, 716, ["copula"]),
    (2000, 4, ["copula", "ksg"]),
    (1999, 4, ["copula"]),  # KSG needs 2000 runs
    (2000, 6, ["copula"]),  # and at most 4 joint dims
    (10, 0, ["copula"]),  # nothing varies: the copula estimate is the exact 0
])
def test_choice_follows_the_calibrated_regimes(n_runs, n_features, chosen):
    assert [c.estimator for c in choose(n_runs, n_features)] == chosen
    for c in choose(n_runs, n_features):
        assert c.note.startswith(f"auto: {c.estimator}")
    if chosen[0] == "bound":
        assert choose(n_runs, n_features)[0].note == (
            f"auto: bound, a lower bound ({n_runs} runs < 2.2 x {n_features} joint dims: no calibrated estimate)")


def test_auto_is_the_default_and_gives_the_copula_estimate_where_it_is_calibrated(tmp_path):
    dump = _dump(tmp_path / "d", 600, 3)  # 600 runs of 3 + 3: 100 runs per dim
    rows = analyze(dump, n_permutations=5, **FAST)
    row, = _mi_rows(rows)
    assert row["quantity"] == "mi_copula" and row["estimate_kind"] == "plain" and not row["outside_calibration"]
    assert row["note"] == "auto: copula, an estimate (600 runs >= 2.2 x 6 joint dims: its calibrated regime, for a Gaussian copula)"
    explicit, = _mi_rows(analyze(dump, estimators=["copula"], n_permutations=5, **FAST))
    assert {**row, "note": ""} == {**explicit, "note": ""}  # the same estimate, null and interval, to the bit
    # 3 x 0.5 log2(1 / (1 - 0.36)) bits: sinh is monotone, so the copula estimate keeps it (sd about 6 %)
    assert row["value"] == pytest.approx(-1.5 * np.log2(1 - 0.36), rel=0.2)
    assert rows.settings["estimators"] == list(AUTO_ESTIMATORS)
    assert rows.settings["estimator_choice"]["rule"] == "auto"
    assert rows.settings["estimator_choice"]["copula_min_runs_per_dim"] == calibration.COPULA_MIN_RUNS_PER_DIM
    assert analyze(dump, estimators="auto", **FAST) == analyze(dump, estimators=["auto"], **FAST)


def test_fewer_runs_than_calibrated_give_the_labelled_bound(tmp_path):
    dump = _dump(tmp_path / "d", 60, 30)  # 60 runs of 30 + 30 parameters
    rows = analyze(dump, n_permutations=3, out=tmp_path / "t.csv", **FAST)
    row, = _mi_rows(rows)
    assert row["quantity"] == "mi_bound" and row["estimate_kind"] == "bound" and not row["outside_calibration"]
    assert row["note"].startswith("auto: bound, a lower bound (60 runs < 2.2 x 60 joint dims")
    explicit, = _mi_rows(analyze(dump, estimators=["bound"], n_permutations=3, **FAST))
    assert row["value"] == explicit["value"] and row["p_value"] == explicit["p_value"]
    assert row["value"] <= -30 * 0.5 * np.log2(1 - 0.36)  # a lower bound on the exact MI
    sidecar = json.loads((tmp_path / "t.csv.json").read_text())
    assert "copula" in sidecar["settings"]["estimator_choice"]["description"]
    # No gaussian or KSG row: neither would be calibrated here (shrinkage, > 4 dims).
    assert not [r for r in rows if r["quantity"] in ("mi_gaussian", "mi_ksg")]


def test_explicit_lists_are_unchanged_and_record_no_choice(tmp_path):
    dump = _dump(tmp_path / "d", 60, 3)
    rows = analyze(dump, estimators=["gaussian", "ksg"], **FAST)
    assert [r["quantity"] for r in _mi_rows(rows)] == ["mi_gaussian", "mi_ksg"]
    assert "estimator_choice" not in rows.settings
    assert not [r for r in rows if r["note"].startswith("auto")]


def test_ksg_as_well_where_it_is_calibrated_and_left_out_where_its_estimate_is_not(tmp_path, monkeypatch):
    dump = _dump(tmp_path / "d", 2000, 1)  # 2000 runs of 1 + 1: KSG's calibrated regime
    rows = analyze(dump, **FAST)
    assert [r["quantity"] for r in _mi_rows(rows)] == ["mi_copula", "mi_ksg"]
    assert _mi_rows(rows)[1]["note"] == "auto: ksg as well (2 joint dims, 2000 runs: its calibrated regime)"
    assert not any(r["outside_calibration"] for r in _mi_rows(rows))
    # An estimate above the calibrated bits is left out, and the primary row says so.
    monkeypatch.setattr(calibration, "KSG_MAX_BITS", 0.01)
    row, = _mi_rows(analyze(dump, **FAST))
    assert row["quantity"] == "mi_copula"
    assert row["note"].endswith("auto: no ksg row (its estimate is outside calibration: > 0.01 bits)")


def test_a_copula_estimate_outside_its_regime_after_all_gives_way_to_the_bound(tmp_path, monkeypatch):
    dump = _dump(tmp_path / "d", 200, 3)
    monkeypatch.setattr(calibration, "COPULA_MAX_BITS", 0.1)  # the estimate (about 1.9 bits) now lies above it
    row, = _mi_rows(analyze(dump, **FAST))
    assert row["quantity"] == "mi_bound" and not row["outside_calibration"]
    assert row["note"] == "auto: bound, a lower bound (the copula estimate is outside calibration: > 0.1 bits)"


def test_a_switch_of_estimator_between_checkpoints_has_no_change_row(tmp_path):
    # Checkpoint 0: 2 + 2 varying parameters (30 runs: copula); checkpoint 1: 10 + 10 (bound).
    dump = _dump(tmp_path / "d", 30, 10, checkpoints=2, varying=[2, 10])
    rows = analyze(dump, **FAST)
    assert [(r["checkpoint"], r["quantity"]) for r in _mi_rows(rows)] == [(0, "mi_copula"), (1, "mi_bound")]
    assert not [r for r in rows if r["quantity"].startswith("delta_mi")]
    lines = summary_table(rows).splitlines()
    assert "which estimator, and why" in lines[0]
    assert "copula, an estimate (30 runs >= 2.2 x 4 joint dims" in lines[2]
    assert "bound, a lower bound (30 runs < 2.2 x 20 joint dims" in lines[3]


def test_too_few_runs_for_a_bound_say_so(tmp_path):
    dump = _dump(tmp_path / "d", 6, 5)
    row, = _mi_rows(analyze(dump, n_permutations=2, **FAST))
    assert row["quantity"] == "mi_bound" and np.isnan(row["value"])
    assert row["note"].endswith("no bound: 6 runs < 8 (two folds of 4 runs)")
    assert "no bound: 6 runs < 8" in summary_table(analyze(dump, **FAST))


def test_bad_estimators_are_named(tmp_path):
    dump = _dump(tmp_path / "d", 20, 2)
    with pytest.raises(ValueError, match="`estimators`: 'auto' chooses the estimators itself and goes alone"):
        analyze(dump, estimators=["auto", "ksg"], **FAST)
    with pytest.raises(ValueError, match=r"got the string 'gaussian' \(a list: \['gaussian'\]\)"):
        analyze(dump, estimators="gaussian", **FAST)
    with pytest.raises(ValueError, match="`estimators`"):
        analyze(dump, estimators=["kde"], **FAST)


def test_cli_default_and_help_say_auto(tmp_path, capsys):
    from mianalysis.cli import main

    dump = _dump(tmp_path / "d", 200, 3)
    assert main(["analyze", str(dump.path), "--out", str(tmp_path / "t.csv"), "--metrics", "euclidean",
                 "--no-progress"]) == 0
    from mianalysis.analysis import AnalysisTable

    assert [r["quantity"] for r in _mi_rows(AnalysisTable.read(tmp_path / "t.csv"))] == ["mi_copula"]
    capsys.readouterr()
    try:
        main(["analyze", "--help"])
    except SystemExit:
        pass
    help_text = " ".join(capsys.readouterr().out.split())
    assert "'auto' (the default)" in help_text and "held-out lower bound (NWJ, valid for any distribution)" in help_text


def test_demo_shaped_dump_default_rows_are_calibrated_or_bounds_and_draw_no_hollow_point(tmp_path):
    # The demo's shape (3 clients of 358 parameters, identical at iteration 0, dependent
    # after), at 40 runs instead of 400 (the demo itself samples for minutes): with analyze's
    # default and the demo's permutations every MI row is a labelled bound inside its regime.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mianalysis.report.demo import DEMO_PERMUTATIONS
    from mianalysis.report.plots import OUTSIDE_LABEL, figure_mi

    rng = np.random.default_rng(0)
    start = rng.standard_normal((40, 358))
    shared = rng.standard_normal((2, 40, 358))
    samples = {c: np.stack([start, *(0.8 * shared + 0.6 * rng.standard_normal((2, 40, 358)))]) for c in "abc"}
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, checkpoints=[0, 2, 4],
                                     metrics={c: {"loss": np.ones((3, 40))} for c in "abc"})
    rows = analyze(dump, n_permutations=DEMO_PERMUTATIONS, ci_resamples=5, verify=False)
    mi = _mi_rows(rows)
    assert len(mi) == 9 and {r["quantity"] for r in mi} == {"mi_bound"}
    assert not [r for r in mi if r["outside_calibration"]]
    assert all(r["estimate_kind"] == "bound" and r["note"].startswith("auto: bound, a lower bound (40 runs < 2.2 x 716")
               for r in mi)
    assert all(np.isfinite(r["value"]) and 0 < r["p_value"] <= 1 for r in mi if r["iteration"] > 0)  # with a null
    fig = figure_mi(rows)
    hollow = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_markerfacecolor() == "white"
              and len(ln.get_xdata())]
    assert not hollow
    legends = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert OUTSIDE_LABEL not in legends and any("lower bound" in t for t in legends)
    plt.close(fig)


def test_an_auto_table_is_replaced_by_the_same_analysis_and_kept_from_another(tmp_path):
    dump = _dump(tmp_path / "d", 60, 3)
    first = analyze(dump, out=tmp_path / "t.csv", **FAST)
    assert analyze(dump, out=tmp_path / "t.csv", **FAST) == first  # the same settings: replaced
    with pytest.raises(ValueError, match="holds an analysis with other settings"):
        analyze(dump, estimators=["gaussian", "ksg"], out=tmp_path / "t.csv", **FAST)
    from mianalysis.analysis import AnalysisTable

    again = AnalysisTable.read(tmp_path / "t.csv")
    assert again == first and again.settings["estimator_choice"]["rule"] == "auto"


def test_a_bounds_change_gives_no_trend_verdict(tmp_path):
    """A lower bound may rise while the MI it bounds falls: its change rows carry the kind
    "bound" and no rising/falling verdict, per step and family-wise."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 60, 30))
    b = np.stack([0.2 * a[0], 0.9 * a[1]]) + rng.standard_normal((2, 60, 30)) * 0.4  # the bound rises clearly
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": b})
    rows = analyze(dump, n_permutations=3, **FAST)
    change, = [r for r in rows if r["quantity"] == "delta_mi_bound"]
    assert change["estimate_kind"] == "bound"
    assert change["verdict"] == change["family_verdict"] == "not made: lower bound (its change is not the MI's)"
    assert change["value"] > 0  # the change itself is still reported


def test_each_clients_varying_columns_are_found_once_per_checkpoint_and_serve_every_pair(tmp_path, monkeypatch):
    """The auto choice counts a pair's varying parameters and each estimate (and its
    interval) drops the others: one mask per client and checkpoint serves all of them."""
    from mianalysis._internal.validation import varying_columns
    from mianalysis.analysis import compute

    rng = np.random.default_rng(4)
    samples = {c: rng.standard_normal((2, 300, 5)) for c in "abc"}
    samples["a"][0, :, 3:] = 1.0  # a: 3 of 5 parameters vary at checkpoint 0, all 5 at checkpoint 1
    samples["c"][:, :, 4] = 2.0  # c: 4 of 5 at both
    dump = ParameterDump.from_arrays(tmp_path / "d", samples)
    calls = []

    def counted(a):
        calls.append(np.shape(a))
        return varying_columns(a)

    monkeypatch.setattr(compute, "varying_columns", counted)
    rows = analyze(dump, n_permutations=3, **FAST)
    assert calls == [(300, 5)] * 6  # 3 clients x 2 checkpoints (every pair and estimate reads these)
    mi = {(r["checkpoint"], r["client_a"], r["client_b"]): r for r in _mi_rows(rows)}
    assert len(mi) == 6 and {r["quantity"] for r in mi.values()} == {"mi_copula"}
    joint = {(0, "a", "b"): 8, (0, "a", "c"): 7, (0, "b", "c"): 9, (1, "a", "b"): 10, (1, "a", "c"): 9,
             (1, "b", "c"): 9}
    for key, d in joint.items():
        note = mi[key]["note"]
        assert note.startswith(f"auto: copula, an estimate (300 runs >= 2.2 x {d} joint dims"), note
        dropped = 10 - d
        assert (f"dropped {dropped} constant parameters" in note) == (dropped > 0), note
        assert np.isfinite(mi[key]["ci_low"]) and mi[key]["ci_low"] <= mi[key]["value"] <= mi[key]["ci_high"]
