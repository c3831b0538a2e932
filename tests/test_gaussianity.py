"""The Gaussianity diagnostic (mianalysis.analysis.diagnostics.gaussianity): the share of parameters whose
marginal rejects normality, against samples whose answer is known, and its rows in the
analysis table (``nongaussian_share``, ``copula_disagrees``)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mianalysis import ParameterDump, analyze  # noqa: E402
from mianalysis.analysis import COLUMNS, AnalysisTable  # noqa: E402
from mianalysis.analysis.diagnostics.gaussianity import MIN_RUNS, copula_disagreement, nongaussian_share  # noqa: E402
from mianalysis.report.plots import figure_mi  # noqa: E402


@pytest.mark.parametrize("seed", range(5))
def test_gaussian_samples_reject_no_parameter_under_holm(seed):
    # Under joint normality Holm rejects anything with probability <= alpha = 0.001, for any
    # dependence between the parameters: correlated columns as well as independent ones.
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1000, 200))
    x[:, 100:] = 0.8 * x[:, :100] + 0.6 * x[:, 100:]
    result = nongaussian_share(3.0 * x + 1.0, alpha=0.001)
    assert result.share == 0.0 and result.n_rejected == 0 and result.n_tested == 200
    assert result.min_p > 0.001
    assert "normality not rejected" in result.note and "necessary, not sufficient" in result.note


def test_gaussian_samples_without_correction_reject_about_alpha():
    # Each of 4000 independent columns rejects with probability alpha = 0.05: the share is
    # binomial, sd sqrt(0.05 x 0.95 / 4000) = 0.0034; 0.03 to 0.07 is about 6 sd either side.
    x = np.random.default_rng(1).standard_normal((500, 4000))
    result = nongaussian_share(x, alpha=0.05, method="none")
    assert 0.03 < result.share < 0.07


@pytest.mark.parametrize("n_runs", [200, 2000])
@pytest.mark.parametrize("family", ["exponential", "sinh", "uniform"])
@pytest.mark.parametrize("method", ["holm", "bh"])
def test_clearly_non_gaussian_samples_reject_every_parameter(family, n_runs, method):
    rng = np.random.default_rng(2)
    z = rng.standard_normal((n_runs, 60))
    x = {"exponential": rng.exponential(size=z.shape), "sinh": np.sinh(2.0 * z),
         "uniform": rng.uniform(size=z.shape)}[family]
    result = nongaussian_share(x, method=method)
    assert result.share == 1.0 and result.n_rejected == 60
    assert "read mi_copula rather than mi_gaussian" in result.note


def test_the_share_counts_the_non_gaussian_parameters_and_ignores_constant_ones():
    rng = np.random.default_rng(3)
    x = np.column_stack([rng.standard_normal((2000, 30)), rng.exponential(size=(2000, 10)), np.full((2000, 5), 2.0)])
    result = nongaussian_share(x, alpha=0.001)
    assert (result.n_rejected, result.n_tested) == (10, 40)
    assert result.share == 0.25


def test_too_few_runs_or_no_varying_parameter_give_no_share():
    rng = np.random.default_rng(4)
    few = nongaussian_share(rng.exponential(size=(MIN_RUNS - 1, 4)))
    assert np.isnan(few.share) and f"{MIN_RUNS - 1} runs < {MIN_RUNS}" in few.note
    flat = nongaussian_share(np.ones((100, 3)))
    assert np.isnan(flat.share) and flat.n_tested == 0 and "no varying parameter" in flat.note


@pytest.mark.parametrize("kwargs, match", [
    ({"samples": np.zeros(10)}, "`samples` must be 2-d"),
    ({"alpha": 1.5}, r"`alpha` must be in \(0, 1\)"),
    ({"method": "bonferroni"}, "`method` must be one of"),
])
def test_bad_arguments_name_the_parameter(kwargs, match):
    args = {"samples": np.zeros((50, 2)), **kwargs}
    with pytest.raises(ValueError, match=match):
        nongaussian_share(**args)


def test_copula_disagreement_is_whether_the_intervals_are_disjoint():
    assert copula_disagreement((1.0, 1.2), (1.3, 1.5)) is True
    assert copula_disagreement((1.3, 1.5), (1.0, 1.2)) is True
    assert copula_disagreement((1.0, 1.3), (1.3, 1.5)) is False
    assert copula_disagreement((1.0, np.nan), (1.3, 1.5)) is None


def _dump(tmp_path, transform, n_runs=2000, seed=5):
    """Two clients of 3 parameters each, correlated 0.7 parameter by parameter, two checkpoints."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, n_runs, 3))
    b = 0.7 * a + np.sqrt(1 - 0.7 ** 2) * rng.standard_normal((2, n_runs, 3))
    return ParameterDump.from_arrays(tmp_path / "d", {"a": transform(a), "b": transform(b)})


@pytest.fixture(scope="module")
def sinh_table(tmp_path_factory):
    dump = _dump(tmp_path_factory.mktemp("sinh"), lambda v: np.sinh(2.0 * v))
    return analyze(dump, estimators=["gaussian", "copula"], metrics=[], gaussianity=True)


def test_analyze_gives_the_rows_per_checkpoint_and_client(sinh_table):
    shares = [r for r in sinh_table if r["quantity"] == "nongaussian_share"]
    assert [(r["checkpoint"], r["client_a"], r["client_b"]) for r in shares] == [
        (0, "a", ""), (0, "b", ""), (1, "a", ""), (1, "b", "")]
    for r in shares:
        assert set(r) == set(COLUMNS)
        assert r["value"] == 1.0 and r["layer"] == "" and r["estimate_kind"] == "plain"
        assert "D'Agostino-Pearson" in r["note"] and "Holm at 0.05" in r["note"] and "read mi_copula" in r["note"]
    assert sinh_table.settings["gaussianity"] is True
    # No change rows for the diagnostic, and the family-wise columns leave it alone.
    assert not any(r["quantity"].startswith("delta_") and "gaussian_share" in r["quantity"] for r in sinh_table)
    assert all(np.isnan(r["p_adjusted"]) for r in shares)


def test_sinh_parameters_make_the_gaussian_and_copula_estimates_disagree(sinh_table):
    # sinh(2 z) costs the Gaussian estimate a large part of the MI; the copula estimate is
    # exact for a monotone map of each coordinate: the intervals are far apart.
    flags = sinh_table.select("copula_disagrees", "a", "b")
    assert [r["value"] for r in flags] == [1.0, 1.0]
    assert all("do not overlap" in r["note"] and "read mi_copula" in r["note"] for r in flags)
    gaussian, copula = sinh_table.select("mi_gaussian", "a", "b"), sinh_table.select("mi_copula", "a", "b")
    assert all(g["ci_high"] < c["ci_low"] for g, c in zip(gaussian, copula))


def test_gaussian_parameters_give_a_share_of_0_and_agreeing_estimates(tmp_path):
    table = analyze(_dump(tmp_path, lambda v: v), estimators=["gaussian", "copula"], metrics=[], gaussianity=True)
    assert [r["value"] for r in table.select("nongaussian_share")] == [0.0] * 4
    flags = table.select("copula_disagrees", "a", "b")
    assert [r["value"] for r in flags] == [0.0, 0.0]
    assert all("intervals overlap" in r["note"] for r in flags)


def test_no_pair_row_without_both_estimates_or_their_intervals(tmp_path):
    dump = _dump(tmp_path, np.exp, n_runs=300)
    table = analyze(dump, estimators=["gaussian"], metrics=[], gaussianity=True)
    assert len(table.select("nongaussian_share")) == 4 and not table.select("copula_disagrees")
    no_ci = analyze(dump, estimators=["gaussian", "copula"], metrics=[], gaussianity=True, ci_resamples=0)
    assert not no_ci.select("copula_disagrees")


def test_by_layer_gives_the_diagnostic_per_tensor(tmp_path):
    rng = np.random.default_rng(6)
    a = np.concatenate([rng.standard_normal((1, 400, 2)), rng.exponential(size=(1, 400, 2))], axis=2)
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": a + rng.standard_normal(a.shape)},
                                     layout=[("normal", (2,)), ("skewed", (2,))])
    table = analyze(dump, estimators=["gaussian"], metrics=[], by="layer", gaussianity=True)
    share = {(r["client_a"], r["layer"]): r["value"] for r in table.select("nongaussian_share")}
    assert share[("a", "normal")] == 0.0 and share[("a", "skewed")] == 1.0


def test_the_default_table_has_no_diagnostic_and_records_no_setting(tmp_path):
    table = analyze(_dump(tmp_path, np.exp, n_runs=300), estimators=["gaussian", "copula"], metrics=[])
    assert not {"nongaussian_share", "copula_disagrees"} & {r["quantity"] for r in table}
    assert "gaussianity" not in table.settings


def test_gaussianity_must_be_a_flag(tmp_path):
    with pytest.raises(ValueError, match="`gaussianity` must be True or False"):
        analyze(_dump(tmp_path, np.exp, n_runs=300), estimators=["gaussian"], metrics=[], gaussianity="yes")


def test_the_rows_survive_a_write_and_read(sinh_table, tmp_path):
    sinh_table.write(tmp_path / "t.csv")
    back = AnalysisTable.read(tmp_path / "t.csv")
    assert back.select("nongaussian_share") == sinh_table.select("nongaussian_share")
    assert back.select("copula_disagrees") == sinh_table.select("copula_disagrees")


def test_the_mi_figure_is_the_same_with_the_diagnostic(sinh_table):
    plain = AnalysisTable([r for r in sinh_table if r["quantity"] not in ("nongaussian_share", "copula_disagrees")])
    drawn = []
    for rows in (sinh_table, plain):
        fig = figure_mi(rows)
        drawn.append([[(line.get_xdata().tolist(), line.get_ydata().tolist()) for line in ax.get_lines()]
                      for ax in fig.axes])
        plt.close(fig)
    assert drawn[0] == drawn[1]
