"""The estimator registry: one entry makes an estimator known to analyze, the permutation test,
the intervals, the regime notes, the plots and the command line (mianalysis/estimators/registry.py)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mianalysis import ParameterDump, analyze, mi_permutation_test  # noqa: E402
from mianalysis.analysis import AnalysisTable  # noqa: E402
from mianalysis.cli import build_parser, main  # noqa: E402
from mianalysis.estimators.registry import (Estimator, estimator_names, get_estimator,  # noqa: E402
                                            register_estimator, unregister_estimator)
from mianalysis.analysis.inference.intervals import mi_interval, resample_indices  # noqa: E402
from mianalysis.report.plots import estimator_variant, figure_mi, figure_title  # noqa: E402
from mianalysis.analysis.inference.regime import estimate_regime_note  # noqa: E402


def first_coordinates_mi(x, y):
    """MI (bits) of the first coordinates of x and y if they were jointly Gaussian: -0.5 log2(1 - r^2)."""
    r = np.corrcoef(x[:, 0], y[:, 0])[0, 1]
    return float(-0.5 * np.log2(1.0 - r**2))


@pytest.fixture
def toy():
    """A toy estimator, registered for one test and removed after it (touching only the registry)."""
    entry = register_estimator(name="first", function=first_coordinates_mi, arguments=(),
                               display_name="first coordinates (correlation)", label="first", ci_resamples=8)
    yield entry
    unregister_estimator("first")


def two_clients(n_runs=300, rho=0.6, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, n_runs, 2))
    b = rho * a + np.sqrt(1 - rho**2) * rng.standard_normal((2, n_runs, 2))
    return {"a": a, "b": b}


def test_builtin_entries_hold_what_the_analyses_used_to_switch_on():
    assert estimator_names()[:2] == ("gaussian", "ksg") and "copula" in estimator_names()
    gauss, ksg = get_estimator("gaussian"), get_estimator("ksg")
    assert (gauss.interval, gauss.ci_resamples, gauss.nulls, gauss.stream) == (
        "bootstrap", 20, ("permutation", "analytic"), 0)
    assert (ksg.interval, ksg.ci_resamples, ksg.nulls, ksg.stream, ksg.distance_cache) == (
        "half-subsampling", 10, ("permutation",), 1, True)
    assert gauss.display_name == "Gaussian (log-det)" and ksg.display_name == "KSG (k-NN)"
    with pytest.raises(ValueError, match="`estimator` must be one of 'gaussian', 'ksg', 'copula', 'bound'"):
        get_estimator("kde")


def test_registering_checks_the_entry(toy):
    with pytest.raises(ValueError, match="'first' is registered already"):
        register_estimator(toy)
    with pytest.raises(ValueError, match="random stream 0 is that of gaussian"):
        register_estimator(name="other", function=first_coordinates_mi, arguments=(), display_name="o",
                           label="o", stream=0)
    with pytest.raises(ValueError, match="needs covariance=True"):
        Estimator(name="bad", function=first_coordinates_mi, arguments=(), display_name="b", label="b",
                  nulls=("permutation", "analytic"))
    with pytest.raises(ValueError, match="must be an identifier"):
        Estimator(name="a b", function=first_coordinates_mi, arguments=(), display_name="b", label="b")
    assert "first" not in estimator_names() or get_estimator("first") is toy


def test_toy_estimator_reaches_analyze_tests_intervals_and_regime(toy, tmp_path):
    samples = two_clients()
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, checkpoints=[0, 1])
    rows = analyze(dump, estimators=["gaussian", "first"], metrics=[], n_permutations={"first": 19})
    first = rows.select("mi_first", "a", "b")
    assert [r["checkpoint"] for r in first] == [0, 1]
    stored = [(np.asarray(dump.samples("a", index=t), float), np.asarray(dump.samples("b", index=t), float)) for t in (0, 1)]
    for t, row in enumerate(first):
        assert row["value"] == pytest.approx(first_coordinates_mi(*stored[t]), rel=1e-12)
        assert row["p_value"] == pytest.approx(0.05) and np.isfinite(row["null_mean"])
        assert row["ci_low"] < row["value"] < row["ci_high"]  # 8 bootstrap resamples (the entry's default)
        assert "outside calibration" not in row["note"]  # no regime recorded: no note
    assert len(rows.select("delta_mi_first", "a", "b")) == 1
    # Another registered estimator leaves the Gaussian rows as they were, to the bit.
    alone = analyze(dump, estimators=["gaussian"], metrics=[])
    assert [r for r in rows if "gaussian" in r["quantity"]] == alone
    # The permutation test and the intervals read the same entry.
    x, y = stored[0]
    res = mi_permutation_test(x, y, estimator="first", n_permutations=9, random_state=0)
    assert res.estimate == first[0]["value"] and res.estimator == "first"
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['k'\]: `k` is a setting of estimator='ksg'"):
        mi_permutation_test(x, y, estimator="first", k=3)
    assert resample_indices(10, 3, "first").shape == (3, 10)
    estimate, low, high = mi_interval(x, y, "first", n_resamples=20)
    assert low < estimate < high
    assert estimate_regime_note("first", 300, 4, 0.3) == ""


def test_toy_estimator_gets_a_panel_named_and_coloured_by_its_entry(toy, tmp_path):
    dump = ParameterDump.from_arrays(tmp_path / "d", two_clients(), checkpoints=[0, 1])
    rows = analyze(dump, estimators=["gaussian", "first"], metrics=[], ci_resamples=0)
    fig = figure_mi(rows)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["MI, Gaussian (log-det): bias-corrected", ""]  # the KSG panel is blank
    assert titles[2] == "MI, first coordinates (correlation)" and len(fig.axes) == 4
    assert fig.axes[2].get_lines()[0].get_color() == toy.color
    plt.close(fig)
    assert estimator_variant(rows, "first") == "first"
    assert figure_title(rows).endswith("Gaussian MI bias-corrected; first")


def test_toy_estimator_is_a_choice_of_the_command_line(toy, tmp_path, capsys):
    dump = ParameterDump.from_arrays(tmp_path / "d", two_clients(), checkpoints=[0, 1])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["analyze", "--help"])
    assert "MI estimators: gaussian, ksg, copula, bound, first" in " ".join(capsys.readouterr().out.split())
    out = tmp_path / "t.csv"
    assert main(["-q", "analyze", str(dump.path), "--out", str(out), "--estimators", "first", "--metrics",
                 "euclidean", "--no-progress"]) == 0
    assert {r["quantity"] for r in AnalysisTable.read(out)} == {"euclidean", "mi_first", "delta_euclidean", "delta_mi_first"}
    capsys.readouterr()


def test_without_the_toy_the_command_line_refuses_it(tmp_path, capsys):
    assert "first" not in estimator_names()
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--estimators", "first"]) == 2
    assert "argument --estimators: invalid choice: 'first'" in capsys.readouterr().err
