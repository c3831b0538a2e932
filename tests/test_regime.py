"""Estimates in the regime where they can be trusted: per-tensor analysis, standardized KSG,
notes for estimates outside the calibrated regime, and the calibration table behind them."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, ksg_mi, mi_permutation_test
from mianalysis.analysis import AnalysisTable
from mianalysis.analysis.inference.regime import (COPULA_MAX_BITS, COPULA_MIN_RUNS_PER_DIM, GAUSSIAN_MAX_BITS,
                                        GAUSSIAN_MIN_RUNS_PER_DIM, KSG_MAX_BITS, KSG_MAX_JOINT_DIMS, KSG_MIN_RUNS,
                                        estimate_regime_note, is_outside)

ROOT = Path(__file__).resolve().parents[1]


def _experiment(name):
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mixed_scale(n=1000, d=3, rho=0.9, seed=0, f=lambda z: z):
    """Correlated Gaussians, each coordinate mapped by f and scaled from 1e-3 to 1e3."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal((n, d))
    s = np.logspace(-3, 3, d)
    return f(x) * s, f(y) * s[::-1], -0.5 * d * np.log(1 - rho**2)


@pytest.fixture
def layered_dump(tmp_path):
    """3 clients, 2 checkpoints, 80 runs; tensors w (2 x 2) and bias (1,), the bias 100x wider."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal((2, 80, 5))
    samples = {}
    for c in "abc":
        s = 0.7 * base + 0.7 * rng.standard_normal((2, 80, 5))
        s[..., 4] *= 100
        samples[c] = s
    return ParameterDump.from_arrays(tmp_path / "dump", samples, layout=[("w", (2, 2)), ("bias", (1,))])


# ---------------------------------------------------------------------------- by="layer"

@pytest.mark.parametrize("distance_cache", [True, False])
def test_by_layer_rows_equal_each_tensor_alone(layered_dump, distance_cache):
    kw = dict(estimators=["gaussian", "ksg"], metrics=["euclidean", "chebyshev"], n_permutations=5,
              distance_cache=distance_cache, verify=False)
    rows = analyze(layered_dump, by="layer", **kw)
    for name in ("w", "bias"):
        mine = [r for r in rows if r["layer"] == name]
        alone = analyze(layered_dump, layer=name, **kw)
        assert len(mine) == len(alone) == 2 * 3 * 4 + 3 * 4  # checkpoints x pairs x (2 metrics + 2 MI), changes at 1
        for got, want in zip(mine, alone):
            assert want["layer"] == ""
            assert {k: v for k, v in got.items() if k != "layer"} == pytest.approx(
                {k: v for k, v in want.items() if k != "layer"}, nan_ok=True)
    assert {r["layer"] for r in rows} == {"w", "bias"}


def test_by_layer_respects_layer_selection_and_keeps_metrics_once(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 40, 3))
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": a + rng.standard_normal((1, 40, 3))},
                                     layout=[("x", (1,)), ("y", (2,))],
                                     metrics={c: {"loss": np.ones((1, 40))} for c in "ab"})
    rows = analyze(dump, by="layer", layer="y", estimators=["gaussian"], metrics=[], verify=False)
    assert [(r["quantity"], r["layer"]) for r in rows] == [("loss", ""), ("loss", ""), ("mi_gaussian", "y")]


def test_by_layer_table_round_trip_and_old_tables(tmp_path, layered_dump):
    rows = analyze(layered_dump, by="layer", estimators=["gaussian"], metrics=[], verify=False,
                   out=tmp_path / "t.csv")
    assert [r["layer"] for r in AnalysisTable.read(tmp_path / "t.csv")] == [r["layer"] for r in rows]
    import json
    settings = json.loads((tmp_path / "t.csv.json").read_text())["settings"]
    assert settings["by"] == "layer" and settings["ksg_standardize"] is True
    # A table written before the column existed reads back with it empty.
    import csv

    old = tmp_path / "old.csv"
    before = ["checkpoint", "iteration", "client_a", "client_b", "quantity", "value", "spread", "null_mean",
              "null_std", "p_value", "n_runs", "note"]  # the columns of a table from before `by`
    with open(old, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=before, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    assert "layer" not in old.read_text().splitlines()[0]
    assert {r["layer"] for r in AnalysisTable.read(old)} == {""}


def test_by_rejects_unknown(layered_dump):
    with pytest.raises(ValueError, match="`by`"):
        analyze(layered_dump, by="tensor", verify=False)
    with pytest.raises(ValueError, match="`standardize`"):
        analyze(layered_dump, standardize="yes", verify=False)


def test_cli_by_layer(tmp_path, layered_dump):
    from mianalysis.cli import main

    main(["analyze", str(layered_dump.path), "--out", str(tmp_path / "t.csv"), "--by", "layer",
          "--estimators", "gaussian", "--metrics", "euclidean", "--no-progress", "--no-standardize"])
    rows = AnalysisTable.read(tmp_path / "t.csv")
    assert {r["layer"] for r in rows} == {"w", "bias"}


# ---------------------------------------------------------------------------- standardize

def test_standardize_makes_ksg_invariant_to_rescaling():
    x, y, _ = _mixed_scale(n=500, d=2)
    scale_x, scale_y = np.array([1e3, 1e-3]), np.array([1e-3, 1e3])
    base = ksg_mi(x, y, random_state=0, standardize=True)
    assert ksg_mi(x * scale_x, y * scale_y, random_state=0, standardize=True) == pytest.approx(base, abs=1e-9)
    # Without it the max-norm follows the widest coordinates and the estimate moves.
    assert abs(ksg_mi(x * scale_x, y * scale_y, random_state=0) - ksg_mi(x, y, random_state=0)) > 0.1


@pytest.mark.parametrize("f", [lambda z: z, np.sinh, lambda z: z + z**3], ids=["identity", "sinh", "cubic"])
def test_standardize_is_closer_to_truth_on_mixed_scales(f):
    x, y, true = _mixed_scale(f=f)
    raw = ksg_mi(x, y, units="nats", random_state=0)
    std = ksg_mi(x, y, units="nats", random_state=0, standardize=True)
    assert abs(std - true) < 0.5 * abs(raw - true)


def test_standardize_in_permutation_test_and_analyze(tmp_path):
    x, y, _ = _mixed_scale(n=300, d=2)
    est = ksg_mi(x, y, random_state=0, standardize=True, noise=0)
    res = mi_permutation_test(x, y, n_permutations=3, random_state=0, standardize=True, noise=0)
    assert res.estimate == pytest.approx(est, abs=1e-12)
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": x[None], "b": y[None]})
    kw = dict(estimators=["ksg"], metrics=[], verify=False)
    std = [analyze(dump, distance_cache=c, **kw)[0]["value"] for c in (True, False)]
    raw = analyze(dump, standardize=False, **kw)[0]["value"]
    assert std[0] == pytest.approx(std[1], abs=1e-6) == pytest.approx(est, abs=1e-6)
    assert abs(raw - std[0]) > 0.5


def test_ksg_standardize_experiment_runs():
    module = _experiment("ksg_standardize")
    rows = module.run([(400, 2, 0.9)], seeds=(0,))
    summary = module.summary(rows)
    raw, std = summary[("1e-3..1e3", "none")]
    assert std < raw
    assert summary[("equal", "none")][1] == pytest.approx(summary[("1e-3..1e3", "none")][1], abs=1e-6)


# ---------------------------------------------------------------------------- notes

@pytest.mark.parametrize("args, note", [
    (("gaussian", 2000, 200, 150.0), ""),
    (("gaussian", 400, 200, 3.0), "outside calibration: shrinkage estimate (400 runs <= 2 x 200 joint dims)"),
    (("gaussian", 420, 200, 3.0), "outside calibration: < 2.2 runs per joint dim"),
    (("gaussian", 100000, 1000, 5000.0), "outside calibration: > 2241.6 bits"),
    (("ksg", 2000, 4, 5.0), ""),
    (("ksg", 2000, 6, 1.0), "outside calibration: > 4 joint dims"),
    (("ksg", 500, 2, 9.0), "outside calibration: < 2000 runs, > 5.65 bits"),
    (("ksg", 2000, 2, float("nan")), ""),
])
def test_estimate_regime_note(args, note):
    assert estimate_regime_note(*args) == note
    if args[0] == "gaussian" and args[1] > 2 * args[2]:  # shrunk although well-determined: outside too
        assert estimate_regime_note(*args, shrinkage=True).startswith(
            "outside calibration: shrinkage estimate (singular covariance)")
    assert is_outside(note) == bool(note)


def test_estimate_regime_note_bad_input():
    with pytest.raises(ValueError, match="`estimator`"):
        estimate_regime_note("kde", 100, 2, 1.0)
    with pytest.raises(ValueError, match="`n_features`"):
        estimate_regime_note("ksg", 100, 0, 1.0)
    with pytest.raises(TypeError, match="`value`"):
        estimate_regime_note("ksg", 100, 2, "1")


def test_analyze_flags_shrinkage_and_dimension(layered_dump, tmp_path):
    rows = analyze(layered_dump, estimators=["gaussian", "ksg"], metrics=[], verify=False)  # 80 runs of 5 + 5 parameters
    assert [r["note"] for r in rows if r["quantity"] == "mi_gaussian"] == [""] * 6  # 8 runs per dim: calibrated
    assert all(r["note"] == "outside calibration: > 4 joint dims, < 2000 runs"
               for r in rows if r["quantity"] == "mi_ksg")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 12, 6))
    a[..., 5] = 1.0  # a constant parameter: dropped, and not counted as a dimension
    dump = ParameterDump.from_arrays(tmp_path / "small", {"a": a, "b": a + rng.standard_normal((1, 12, 6))})
    row, = analyze(dump, estimators=["gaussian"], metrics=[], verify=False)
    assert row["note"] == ("dropped 1 constant parameters; ledoit-wolf shrinkage: 12 runs <= 2 x 11 joint dimensions; "
                           "outside calibration: shrinkage estimate (12 runs <= 2 x 11 joint dims)")


def test_analyze_flags_shrinkage_of_a_singular_covariance(tmp_path):
    # 200 runs of 3 + 3 parameters (33 runs per dim) but client b's third parameter is the
    # sum of its first two: the covariance is singular, analyze shrinks, and says so twice.
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 200, 3))
    b = a + rng.standard_normal((1, 200, 3))
    b[..., 2] = b[..., 0] + b[..., 1]
    dump = ParameterDump.from_arrays(tmp_path / "singular", {"a": a, "b": b})
    row, = analyze(dump, estimators=["gaussian"], metrics=[], verify=False)
    assert row["note"].startswith("ledoit-wolf shrinkage: ")
    assert row["note"].endswith("outside calibration: shrinkage estimate (singular covariance)")
    assert is_outside(row["note"])


def _regime_rows(family=("gaussian",)):
    with open(ROOT / "figures" / "calibration" / "calibration_regimes.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["family"] in family]


def test_thresholds_come_from_the_committed_table():
    rows = _regime_rows()  # the Gaussian and KSG regimes: correlated Gaussians, as before the other families
    ok = {e: [r for r in rows if r[f"{e}_within_5pct"] == "True"] for e in ("gaussian", "ksg")}
    assert not [r for r in ok["gaussian"] if r["gaussian_method"] != "bias-corr."]  # shrinkage never calibrated
    assert GAUSSIAN_MIN_RUNS_PER_DIM == min(int(r["n"]) / int(r["joint_dims"]) for r in ok["gaussian"])
    assert GAUSSIAN_MAX_BITS == np.floor(10 * max(float(r["true_bits"]) for r in ok["gaussian"])) / 10
    # KSG: the largest box (joint dims <= D, true MI <= the most bits KSG met within it)
    # in which every case was within 5 %.
    def box(d):
        bits = max(float(r["true_bits"]) for r in ok["ksg"] if int(r["joint_dims"]) <= d)
        inside = [r for r in rows if int(r["joint_dims"]) <= d and float(r["true_bits"]) <= bits]
        return bits, inside, all(r["ksg_within_5pct"] == "True" for r in inside)

    dims = max(d for d in {int(r["joint_dims"]) for r in ok["ksg"]} if box(d)[2])
    bits, inside, _ = box(dims)
    assert KSG_MAX_JOINT_DIMS == dims
    assert KSG_MIN_RUNS == min(int(r["n"]) for r in inside)
    assert KSG_MAX_BITS == np.floor(100 * bits) / 100


def test_copula_thresholds_come_from_the_gaussian_copula_rows():
    rows = _regime_rows(("gaussian", "sinh", "cubic"))  # Gaussian copulas: where the copula estimate is exact
    assert {r["family"] for r in rows} == {"gaussian", "sinh", "cubic"}
    ok = [r for r in rows if r["copula_within_5pct"] == "True"]
    assert not [r for r in ok if r["copula_method"] != "bias-corr."]  # shrinkage never calibrated
    assert COPULA_MIN_RUNS_PER_DIM == min(int(r["n"]) / int(r["joint_dims"]) for r in ok)
    assert COPULA_MAX_BITS == np.floor(10 * max(float(r["true_bits"]) for r in ok)) / 10
    # The regime is a clean box: every bias-corrected case inside it was within 5 %.
    inside = [r for r in rows if r["copula_method"] == "bias-corr." and float(r["true_bits"]) <= COPULA_MAX_BITS
              and int(r["n"]) >= COPULA_MIN_RUNS_PER_DIM * int(r["joint_dims"])]
    assert inside and all(r["copula_within_5pct"] == "True" for r in inside)
    # On the monotone maps the Gaussian estimate is off where the copula estimate is not.
    maps = [r for r in rows if r["family"] != "gaussian" and r["copula_within_5pct"] == "True"]
    assert sum(r["gaussian_within_5pct"] == "False" for r in maps) >= 7


FAMILIES = ("gaussian", "sinh", "cubic", "student-t", "discrete-latent", "mixture")
# The page's table: its family label, the CSV families it counts.
PAGE_FAMILIES = {"correlated Gaussians": ("gaussian",), "monotone maps (sinh, x + x^3)": ("sinh", "cubic"),
                 "Student t": ("student-t",), "discrete latent": ("discrete-latent",),
                 "sign mixture": ("mixture",), "all": FAMILIES}


def _page():
    return " ".join((ROOT / "docs" / "concepts" / "calibration.md").read_text().split())


def test_calibration_page_states_what_the_table_holds_for_the_copula_and_the_bound():
    page = _page()
    rows = _regime_rows(FAMILIES)
    assert {r["family"] for r in rows} == set(FAMILIES)
    t_rows = [r for r in rows if r["family"] == "student-t"]
    # The Student t: the copula estimate is below the truth on every row, and off by > 5 % on some.
    assert t_rows and all(float(r["copula_nats"]) < float(r["true_nats"]) for r in t_rows)
    assert any(r["copula_within_5pct"] == "False" for r in t_rows)
    covered = sum(r["bound_covers"] == "True" for r in rows)
    assert f"at or below the truth in {covered} of {len(rows)} rows" in page
    off = [r for r in rows if r["family"] not in ("gaussian", "sinh", "cubic")]
    assert all(r["bound_covers"] == "True" for r in off)
    assert "no Student t, discrete latent or sign mixture row exceeds it" in page
    excess = max((float(r["bound_nats"]) - float(r["true_nats"])) / max(float(r["true_nats"]), 1.0)
                 for r in rows if r["family"] in ("gaussian", "sinh", "cubic") and r["bound_covers"] == "False")
    assert f"by at most {100 * excess:.1f} % of max(true, 1 nat) on Gaussian copulas" in page
    assert f"{len(rows)} cases with known MI" in page
    counts = {f: sum(r["family"] == f for r in rows) for f in FAMILIES}
    assert (f"{counts['gaussian']} correlated Gaussians" in page and f"{counts['sinh'] + counts['cubic']} monotone"
            in page and f"{counts['student-t']} multivariate Student t" in page
            and f"{counts['discrete-latent']} discrete latents" in page and f"{counts['mixture']} sign mixtures" in page)


def test_calibration_page_table_counts_the_csv():
    page = (ROOT / "docs" / "concepts" / "calibration.md").read_text()
    rows = _regime_rows(FAMILIES)
    table = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in PAGE_FAMILIES:
            table[cells[0]] = [int(c) for c in cells[1:]]
    assert set(table) == set(PAGE_FAMILIES)
    for label, families in PAGE_FAMILIES.items():
        mine = [r for r in rows if r["family"] in families]
        assert table[label] == [len(mine), *[sum(r[f"{e}_within_5pct"] == "True" for r in mine)
                                              for e in ("gaussian", "ksg", "copula")],
                                sum(r["bound_covers"] == "True" for r in mine)], label


def test_calibration_page_numbers_off_the_gaussian_copula():
    page = _page()
    rows = _regime_rows(("discrete-latent", "mixture"))

    def row(family, n, d, rho=None):
        found, = [r for r in rows if r["family"] == family and int(r["n"]) == n and int(r["d_per_side"]) == d
                  and (rho is None or float(r["rho"]) == rho)]
        return found

    def of(r, e):
        return f"{float(r[f'{e}_nats']):.2f} of {float(r['true_nats']):.2f}"

    latent = {(n, d): row("discrete-latent", n, d) for n, d in ((2000, 1), (2000, 10), (400, 100))}
    true = float(latent[2000, 1]["true_nats"])
    assert abs(true - np.log(4)) < 1e-7 and float(latent[2000, 1]["true_mc_se_nats"]) < 1e-9
    assert all(r["true_nats"] == latent[2000, 1]["true_nats"] for r in rows if r["family"] == "discrete-latent")
    assert f"{true:.4f} nats, se {float(latent[2000, 1]['true_mc_se_nats']):.0e}" in page
    assert f"copula estimate gives {of(latent[2000, 1], 'copula')} nats at 1 + 1 dimensions" in page
    assert f"{of(latent[2000, 10], 'copula')} at 10 + 10" in page
    assert f"the Gaussian estimate {of(latent[2000, 1], 'gaussian')} at 1 + 1" in page
    assert f"the copula number is {of(latent[400, 100], 'copula')}" in page
    assert latent[400, 100]["copula_method"] == "ledoit-wolf"
    assert f"(0.00 on the sign mixture, {of(latent[2000, 10], 'copula')} nats on the discrete latent)" in page
    assert float(latent[2000, 10]["copula_nats"]) > 1.05 * true and latent[2000, 10]["copula_method"] == "bias-corr."
    assert all(r["ksg_within_5pct"] == "True" for r in rows if r["family"] == "discrete-latent")
    assert f"{of(latent[400, 100], 'ksg')} even at 400 runs of 100 + 100" in page
    assert f"{float(latent[2000, 10]['bound_nats']):.2f} of {true:.2f} nats at 10 + 10 and " \
           f"{float(latent[400, 100]['bound_nats']):.2f} at 400 runs of 100 + 100 on the latent" in page
    mixture = [r for r in rows if r["family"] == "mixture"]
    one = row("mixture", 2000, 1, 0.9)
    assert f"d times {float(one['true_nats']):.4f} nats (se {float(one['true_mc_se_nats']):.4f})" in page
    assert all(abs(float(r[e])) < 0.005 for r in mixture for e in ("gaussian_nats", "copula_nats"))
    big = row("mixture", 400, 100)
    assert f"are 0.00 on every row, of {float(one['true_nats']):.2f} nats at 1 + 1 up to " \
           f"{float(big['true_nats']):.2f} at 400 runs of 100 + 100" in page
    assert f"on the mixture at 1 + 1 only ({of(one, 'ksg')};" in page
    assert [r["ksg_within_5pct"] for r in mixture] == ["True" if int(r["d_per_side"]) == 1 else "False"
                                                       for r in mixture]
    assert f"{of(row('mixture', 2000, 3), 'ksg')} at 3 + 3" in page
    assert f"{of(one, 'bound')} on the mixture" in page


# ---------------------------------------------------------------------------- plot

def test_plot_draws_flagged_points_hollow():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mianalysis.report.plots import OUTSIDE_LABEL, plot_mi_panel

    def row(t, note):
        return {"checkpoint": t, "iteration": 10 * t, "client_a": "a", "client_b": "b", "quantity": "mi_ksg",
                "value": 1.0 + t, "null_mean": np.nan, "null_std": np.nan, "note": note}

    rows = [row(0, ""), row(1, "outside calibration: > 4 joint dims"), row(2, ""), row(3, "dropped 1 constant "
            "parameters; outside calibration: < 2000 runs")]
    fig, ax = plt.subplots()
    plot_mi_panel(ax, rows, "ksg")
    hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "white" and len(ln.get_xdata())]
    assert len(hollow) == 1
    assert list(hollow[0].get_xdata()) == [10, 30] and list(hollow[0].get_ydata()) == [2.0, 4.0]
    assert hollow[0].get_markeredgecolor() == ax.get_lines()[0].get_color()
    assert OUTSIDE_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    fig, ax = plt.subplots()  # nothing flagged: no hollow markers, no legend entry
    plot_mi_panel(ax, [row(0, ""), row(1, "")], "ksg")
    assert not [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "white"]
    assert OUTSIDE_LABEL not in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


# ---------------------------------------------------------------------------- calibration

def test_calibration_regimes_quick_writes_within_column(tmp_path, monkeypatch):
    module = _experiment("calibration")
    monkeypatch.setattr(module, "QUICK_REGIME_CASES", [("low dimension", 1000, 1, 0.9, 0.0),
                                                       ("n < joint dims (shrinkage, singular)", 30, 20, 0.5, 0.0),
                                                       ("quantised, coarse grid", 500, 1, 0.9, 0.5)])
    monkeypatch.setattr(module, "QUICK_FAMILY_CASES", [("cubic", "monotone map of Gaussians", 500, 2, 0.9, 0),
                                                       ("student-t", "Student t", 500, 1, 0.5, 3),
                                                       ("discrete-latent", "discrete latent", 500, 2, 0.0, 4),
                                                       ("mixture", "sign mixture", 500, 2, 0.9, 0)])
    out = module.main(["--regimes", "--quick", "--out", str(tmp_path / "c.csv")])
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["regime"] for r in rows] == ["low dimension", "n < joint dims (shrinkage, singular)",
                                           "quantised, coarse grid", "monotone map of Gaussians", "Student t",
                                           "discrete latent", "sign mixture"]
    assert [r["family"] for r in rows] == ["gaussian"] * 3 + ["cubic", "student-t", "discrete-latent", "mixture"]
    # Monte Carlo truths: log 4 for the latent, twice one pair's MI for the mixture, with their se.
    assert float(rows[5]["true_nats"]) == pytest.approx(np.log(4), abs=1e-7) and rows[5]["latent_levels"] == "4"
    assert float(rows[6]["true_nats"]) == pytest.approx(2 * module.sign_mixture_mi(0.9)[0])
    assert float(rows[6]["true_mc_se_nats"]) == pytest.approx(2 * module.sign_mixture_mi(0.9)[1])
    assert [float(r["true_mc_se_nats"]) for r in rows[:5]] == [0.0] * 5
    assert rows[6]["copula_within_5pct"] == rows[6]["gaussian_within_5pct"] == "False"  # no correlation to see
    # x + x^3 keeps the MI (exact: that of the Gaussians); the Student t adds its closed-form excess.
    assert float(rows[3]["true_nats"]) == pytest.approx(-np.log(1 - 0.81))
    assert float(rows[4]["true_nats"]) == pytest.approx(module.student_t_mi(0.5, 1, 3))
    assert module.student_t_mi(0.5, 1, 3) > -0.5 * np.log(1 - 0.25)  # the tails add dependence
    assert rows[3]["copula_within_5pct"] == "True" and rows[3]["gaussian_within_5pct"] == "False"
    for r in rows:
        for e in ("gaussian", "ksg", "copula"):
            error = abs(float(r[f"{e}_nats"]) - float(r["true_nats"]))
            assert r[f"{e}_within_5pct"] == str(error <= 0.05 * max(float(r["true_nats"]), 1.0))
        assert r["bound_covers"] == str(float(r["bound_nats"]) <= float(r["true_nats"]))
    assert [r["gaussian_within_5pct"] for r in rows[:2]] == ["True", "False"]
    assert rows[1]["gaussian_method"] == "ledoit-wolf"
    assert float(rows[2]["true_nats"]) == pytest.approx(module.rounded_gaussian_mi(0.9, 0.5))
    assert float(rows[0]["true_nats"]) == pytest.approx(-0.5 * np.log(1 - 0.81))
    assert (tmp_path / "c.csv.json").exists()


def test_rounded_gaussian_mi():
    module = _experiment("calibration")
    assert module.rounded_gaussian_mi(0.9, 0.0, d=2) == pytest.approx(-np.log(1 - 0.81))
    # A fine grid keeps almost all of it; a coarse one loses some; a grid step of 20 sd keeps nothing.
    assert module.rounded_gaussian_mi(0.9, 0.01) == pytest.approx(-0.5 * np.log(1 - 0.81), rel=1e-3)
    assert 0.7 < module.rounded_gaussian_mi(0.9, 0.5) < 0.8  # Monte Carlo with 2e6 samples: 0.7504
    assert module.rounded_gaussian_mi(0.9, 20.0) == pytest.approx(0.0, abs=1e-12)


def test_student_t_mi_of_the_calibration_matches_a_monte_carlo_of_the_densities():
    from scipy import stats

    module = _experiment("calibration")
    rho, d, nu = 0.6, 2, 5
    corr = np.eye(2 * d)
    for j in range(d):
        corr[j, d + j] = corr[d + j, j] = rho
    rng = np.random.default_rng(3)
    x, y, true = module.family_samples("student-t", 200_000, d, rho, nu, rng)
    assert true == module.student_t_mi(rho, d, nu)
    s = np.hstack([x, y])
    joint = stats.multivariate_t(shape=corr, df=nu)
    side = stats.multivariate_t(shape=np.eye(d), df=nu)
    log_ratio = joint.logpdf(s) - side.logpdf(x) - side.logpdf(y)
    assert abs(log_ratio.mean() - true) < 4 * log_ratio.std() / np.sqrt(len(log_ratio))


def test_sign_mixture_mi_matches_quadrature_and_has_no_correlation():
    module = _experiment("calibration")
    value, se = module.sign_mixture_mi(0.9)
    assert se < 0.002 * value  # far below 5 %
    grid = np.linspace(-10, 10, 2001)
    x, y = np.meshgrid(grid, grid)
    density = 0.5 * sum(np.exp(-(x**2 - 2 * r * x * y + y**2) / (2 * (1 - 0.81))) / (2 * np.pi * np.sqrt(1 - 0.81))
                        for r in (0.9, -0.9))
    marginal = np.exp(-(x**2 + y**2) / 2) / (2 * np.pi)
    quadrature = np.sum(density * np.log(density / marginal)) * (grid[1] - grid[0]) ** 2
    assert abs(value - quadrature) < 4 * se
    a, b, true = module.family_samples("mixture", 20000, 3, 0.9, 0, np.random.default_rng(1))
    assert true == pytest.approx(3 * value)
    assert np.abs(np.corrcoef(a.T, b.T)[:3, 3:]).max() < 0.03  # every correlation 0


def test_latent_mi_is_log_levels_when_the_clusters_are_far_apart():
    module = _experiment("calibration")
    value, se = module.latent_mi(4)
    assert abs(value - np.log(4)) < 1e-7 and se < 1e-9
    # Closer clusters overlap and lose MI; the dimension only adds independent noise.
    assert module.latent_mi(4, separation=4.0, draws=10**5)[0] < np.log(4) - 0.1
    x, y = module.latent_samples(3000, 10, 4, np.random.default_rng(0))
    level_x, level_y = (np.round(v @ np.full(10, 1 / np.sqrt(10)) / module.LATENT_SEPARATION) for v in (x, y))
    assert np.array_equal(level_x, level_y) and set(level_x) == {0, 1, 2, 3}  # each side recovers the latent
