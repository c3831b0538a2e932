"""Family-wise trend verdicts (mianalysis.analysis.inference.familywise): Holm and Benjamini-Hochberg
against hand-computed examples and scipy, verdicts of tables with known p-values, the
change's se and p-value of the analysis and of old tables, and the findings that read them."""

import csv
import json

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import AnalysisTable, sidecar_path
from mianalysis.analysis.inference.familywise import (adjust, apply_familywise, benjamini_hochberg, describe,
                                            familywise_verdicts, holm)
from mianalysis.analysis.inference.intervals import change_test, normal_interval, se_from_interval
from mianalysis.analysis.table import INFERENCE_COLUMNS
from mianalysis.report.experiment import correction_text, finding, step_verdicts, trend_steps, trend_summary

from test_table import OLD_TABLE


def _holm_by_steps(p, alpha):
    """Holm's procedure as written (reject the smallest while p_(i) <= alpha / (m - i + 1)):
    the rejected indices."""
    order = np.argsort(p, kind="stable")
    rejected = set()
    for i, j in enumerate(order):
        if p[j] > alpha / (len(p) - i):
            break
        rejected.add(int(j))
    return rejected


def _bh_by_steps(p, alpha):
    """BH as written: reject the k smallest for the largest k with p_(k) <= k alpha / m."""
    order = np.argsort(p, kind="stable")
    ks = [k for k in range(1, len(p) + 1) if p[order[k - 1]] <= k * alpha / len(p)]
    return {int(j) for j in order[:max(ks)]} if ks else set()


# Hand-computed: sorted 0.005, 0.01, 0.03, 0.04.
# Holm: 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, 1 x 0.04 -> max so far 0.06.
# BH: 0.005 x 4/1 = 0.02, 0.01 x 4/2 = 0.02, 0.03 x 4/3 = 0.04, 0.04 x 4/4 = 0.04.
HAND = [([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02], [0.02, 0.04, 0.04, 0.02]),
        ([0.5], [0.5], [0.5]),
        ([0.3, 0.6, 0.9], [0.9, 1.0, 1.0], [0.9, 0.9, 0.9])]


@pytest.mark.parametrize("p, want_holm, want_bh", HAND)
def test_holm_and_bh_give_the_hand_computed_adjusted_p(p, want_holm, want_bh):
    np.testing.assert_allclose(holm(p), want_holm, rtol=1e-12)
    np.testing.assert_allclose(benjamini_hochberg(p), want_bh, rtol=1e-12)
    np.testing.assert_array_equal(adjust(p, "none"), p)


@pytest.mark.parametrize("seed", range(5))
def test_bh_is_scipy_false_discovery_control_and_both_reject_as_the_procedures_say(seed):
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.uniform(size=15), rng.uniform(0, 0.01, size=5)])
    np.testing.assert_allclose(benjamini_hochberg(p), false_discovery_control(p, method="bh"), rtol=1e-12)
    for alpha in (0.01, 0.05, 0.2):
        assert set(np.flatnonzero(holm(p) <= alpha)) == _holm_by_steps(p, alpha)
        assert set(np.flatnonzero(benjamini_hochberg(p) <= alpha)) == _bh_by_steps(p, alpha)


def test_nan_is_no_test_and_bad_input_is_refused():
    np.testing.assert_allclose(holm([0.01, np.nan, 0.04]), [0.02, np.nan, 0.04])
    with pytest.raises(ValueError, match="p-values in"):
        holm([0.5, 1.5])
    with pytest.raises(ValueError, match="one-dimensional"):
        holm([[0.5]])
    with pytest.raises(ValueError, match="`familywise` must be one of"):
        familywise_verdicts([], method="bonferroni")
    with pytest.raises(ValueError, match="`family` must be one of"):
        familywise_verdicts([], family="table")


def _steps(pairs_p, quantity="delta_mi_ksg", kind="plain"):
    """Change rows of known p-values: {pair: [(value, p), ...]}, steps at iterations 1, 2, ..."""
    return [{"quantity": quantity, "client_a": a, "client_b": b, "iteration": it, "checkpoint": it, "layer": "",
             "value": v, "change_p": p, "estimate_kind": kind}
            for (a, b), steps in pairs_p.items() for it, (v, p) in enumerate(steps, start=1)]


def test_a_table_of_known_p_values_gets_the_holm_and_bh_verdicts():
    # The issue's digits-lenet cell: 3 pairs x 4 steps, the smallest p 0.0099 (100 permutations'
    # floor), the next 0.02 and 0.03; the rest 0.2 and above.
    rows = _steps({("0", "1"): [(0.4, 0.0099), (0.1, 0.2), (0.1, 0.5), (0.1, 0.7)],
                   ("0", "2"): [(0.3, 0.02), (-0.1, 0.4), (0.1, 0.8), (0.1, 0.9)],
                   ("1", "2"): [(-0.2, 0.03), (0.1, 0.3), (0.1, 0.6), (0.1, 0.95)]})
    plain = familywise_verdicts(rows, method="none")
    assert [v for v in plain.verdicts if v != "no detectable change"] == ["rising", "rising", "falling"]
    cell = familywise_verdicts(rows, method="holm", family="cell")
    assert cell.adjusted_p[0] == pytest.approx(12 * 0.0099) and set(cell.verdicts) == {"no detectable change"}
    assert set(familywise_verdicts(rows, method="bh", family="cell").verdicts) == {"no detectable change"}
    assert list(cell.family_size) == [12] * 12
    pair = familywise_verdicts(rows, method="holm", family="pair")  # 4 steps per pair: 4 x 0.0099 = 0.04
    assert pair.verdicts[0] == "rising" and pair.verdicts.count("rising") == 1
    assert pair.verdicts[4] == "no detectable change"  # 4 x 0.02 = 0.08
    assert list(pair.family_size) == [4] * 12
    assert pair.description == describe("holm", "pair", 0.05) == (
        "Holm over each client pair's steps of one quantity (family-wise error rate 0.05)")


def test_a_family_of_null_steps_rejects_none_at_alpha():
    # Each below 0.05 alone, none after the correction: Holm 5 x 0.02 = 0.1; BH 0.04 x 5/3 = 0.067.
    rows = _steps({("a", "b"): [(0.1, 0.02), (0.2, 0.03), (-0.1, 0.04), (0.1, 0.3), (0.1, 0.6)]})
    assert familywise_verdicts(rows, method="none").verdicts.count("no detectable change") == 2
    for method in ("holm", "bh"):
        assert set(familywise_verdicts(rows, method=method).verdicts) == {"no detectable change"}


def test_holm_keeps_the_family_wise_error_and_bh_the_false_discovery_rate_on_null_families():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(4000, 6))  # 4000 families of 6 null steps
    any_holm = np.mean([(holm(f) <= 0.05).any() for f in p])
    any_bh = np.mean([(benjamini_hochberg(f) <= 0.05).any() for f in p])  # all null: FDR = FWER
    any_none = np.mean((p <= 0.05).any(axis=1))
    assert any_holm <= 0.05 + 0.01 and any_bh <= 0.05 + 0.01 and any_none == pytest.approx(1 - 0.95**6, abs=0.02)


def test_shrinkage_and_missing_p_are_in_no_family():
    rows = _steps({("a", "b"): [(0.1, 0.01), (0.1, 0.01)]}) + _steps({("a", "b"): [(0.1, 0.001)]}, kind="shrinkage")
    rows.append({**rows[0], "change_p": np.nan, "iteration": 9})
    result = familywise_verdicts(rows)
    assert result.verdicts == ("rising", "rising", "not made: shrinkage estimate", "not made: no interval")
    assert list(result.family_size) == [2, 2, 0, 0] and np.isnan(result.adjusted_p[2:]).all()


def test_the_change_p_value_agrees_with_the_interval():
    for df in (None, 9, 19):
        for change in (0.5, 1.0, 3.0):
            low, high = normal_interval(change, 0.5, 0.95, df=df)
            assert se_from_interval(low, high, 0.95, df) == pytest.approx(0.5)
            assert (change_test(change, 0.5, df) <= 0.05) == (low > 0)
    assert change_test(0.0, 0.0) == 1.0 and change_test(0.1, 0.0) == 0.0 and np.isnan(change_test(np.nan, 1.0))


def _null_dump(path, checkpoints=4, runs=300, seed=0):
    rng = np.random.default_rng(seed)  # three independent clients: no change is real
    return ParameterDump.from_arrays(path, {c: rng.standard_normal((checkpoints, runs, 2)) for c in "abc"},
                                     checkpoints=list(range(checkpoints)))


@pytest.fixture(scope="module")
def null_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("fw")
    return analyze(_null_dump(path / "d"), estimators=["gaussian", "ksg"], metrics=["euclidean"],
                   n_permutations={"ksg": 19}, verify=False, out=path / "t.csv"), path


def test_analyze_fills_the_columns_and_records_the_correction(null_table):
    table, path = null_table
    assert table.settings["familywise"] == {"method": "holm", "family": "pair", "alpha": 0.05}
    assert json.loads(sidecar_path(path / "t.csv").read_text())["settings"]["familywise"]["method"] == "holm"
    deltas = [r for r in table if r["quantity"].startswith("delta_")]
    assert deltas and all(np.isfinite(r["change_se"]) and 0 <= r["change_p"] <= 1 for r in deltas)
    for r in deltas:  # the per-step verdict and the p-value never disagree
        assert (r["verdict"] != "no detectable change") == (r["change_p"] <= 0.05), r
        assert r["p_adjusted"] >= r["change_p"] and r["family_verdict"] in ("rising", "falling", "no detectable change")
    # KSG with 19 permutations: p >= 0.05, so Holm over 4 checkpoints cannot reject.
    ksg = [r for r in table if r["quantity"] == "mi_ksg"]
    assert all(r["family_verdict"].startswith("not made: 19 permutations give p >= 0.05; Holm over 4 tests") for r in ksg)
    analytic = [r for r in table if r["quantity"] == "mi_gaussian"]
    assert all(r["family_verdict"] in ("above null", "not above null") for r in analytic if np.isfinite(r["p_value"]))
    none = apply_familywise(table, method="none")
    assert [r["family_verdict"] for r in none if r in deltas or r["quantity"].startswith("delta_")] == \
        [r["verdict"] for r in deltas]


def test_a_table_read_back_without_the_new_columns_derives_se_and_p(tmp_path):
    # Tables without the columns predate the influence-value change intervals: their MI
    # changes are paired resamples (t quantile), as the registry's change_interval None makes them.
    from dataclasses import replace

    from mianalysis.estimators.registry import get_estimator, register_estimator

    entry = get_estimator("gaussian")
    register_estimator(replace(entry, change_interval=None), replace=True)
    try:
        path = tmp_path / "new"
        table = analyze(_null_dump(path / "d"), estimators=["gaussian", "ksg"], metrics=["euclidean"],
                        n_permutations={"ksg": 19}, verify=False, out=path / "t.csv")
    finally:
        register_estimator(entry, replace=True)
    with open(path / "t.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(tmp_path / "old.csv", "w", newline="") as fh:
        fields = [c for c in rows[0] if c not in INFERENCE_COLUMNS]
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    sidecar = json.loads(sidecar_path(path / "t.csv").read_text())
    sidecar["settings"].pop("familywise")
    sidecar_path(tmp_path / "old.csv").write_text(json.dumps(sidecar))
    old = AnalysisTable.read(tmp_path / "old.csv")
    for got, want in zip(old, table):
        for c in ("change_se", "change_p"):  # t with the recorded resamples for MI, normal for distances
            assert got[c] == pytest.approx(want[c], rel=1e-9, abs=1e-300, nan_ok=True), (c, want)
        assert got["family_verdict"] == "" and np.isnan(got["p_adjusted"])
    again = apply_familywise(old)
    assert [r["family_verdict"] for r in again] == [r["family_verdict"] for r in table]


def test_the_committed_old_table_reads_with_se_and_p_from_its_intervals():
    old = AnalysisTable.read(OLD_TABLE)  # no sidecar: level 0.95, normal quantile
    deltas = [r for r in old if r["quantity"].startswith("delta_") and np.isfinite(r["ci_low"])]
    assert deltas
    for r in deltas:
        assert r["change_se"] == pytest.approx((r["ci_high"] - r["ci_low"]) / (2 * 1.959963984540054))
        assert np.isfinite(r["change_p"])
    assert all(np.isnan(r["change_se"]) for r in old if not r["quantity"].startswith("delta_"))


def test_a_table_differing_only_in_the_correction_is_replaced(null_table):
    table, path = null_table
    bh = analyze(ParameterDump.open(path / "d"), estimators=["gaussian", "ksg"], metrics=["euclidean"],
                 n_permutations={"ksg": 19}, verify=False, out=path / "t.csv", familywise="bh", family="cell")
    assert bh.settings["familywise"] == {"method": "bh", "family": "cell", "alpha": 0.05}
    assert [r["value"] for r in bh] == [r["value"] for r in table]
    with pytest.raises(ValueError, match="`familywise` must be one of"):
        analyze(ParameterDump.open(path / "d"), familywise="bonferroni")


def test_findings_read_the_corrected_verdicts():
    # A shared start (MI infinite at checkpoint 0): the step out of it is no test; the steps
    # 2, 3, 4 have p 0.02, 0.3, 0.6: rising alone, not after Holm over the three.
    level = [{"quantity": "mi_ksg", "client_a": "a", "client_b": "b", "iteration": it, "checkpoint": it,
              "value": np.inf if it == 0 else 1.0, "p_value": np.nan if it == 0 else 0.001} for it in range(5)]
    steps = [{"quantity": "delta_mi_ksg", "client_a": "a", "client_b": "b", "iteration": it, "checkpoint": it,
              "value": 0.2, "ci_low": np.nan, "ci_high": np.nan, "change_p": p, "verdict": v}
             for it, p, v in ((1, 0.001, "rising"), (2, 0.02, "rising"), (3, 0.3, "no detectable change"),
                              (4, 0.6, "no detectable change"))]
    table = AnalysisTable(level + steps, settings={"ci_level": 0.95})
    assert step_verdicts(table, "mi_ksg", "a", "b", familywise="none") == [
        (2, "rising"), (3, "no detectable change"), (4, "no detectable change")]
    assert step_verdicts(table, "mi_ksg", "a", "b") == [
        (2, "no detectable change"), (3, "no detectable change"), (4, "no detectable change")]
    assert [round(p, 3) for _, p, _ in trend_steps(table, "mi_ksg", "a", "b")] == [0.06, 0.6, 0.6]
    assert finding(table)["mi_ksg_rising"] is False
    text = trend_summary(table)
    assert text.splitlines()[0] == f"verdicts: {correction_text(table)}"
    assert "Holm over each client pair's steps" in text and "mi_ksg a-b: no detectable change" in text
    # The table's own family verdicts agree: the step out of the start is not made, the others
    # are Holm over the same three.
    filled = apply_familywise(table)
    by_step = {r["iteration"]: (r["family_verdict"], r["p_adjusted"]) for r in filled if r["quantity"] == "delta_mi_ksg"}
    assert by_step[1][0] == ("not made: a step out of an exact value (identical clients: MI infinite at "
                             "checkpoint 0)") and np.isnan(by_step[1][1])
    assert [round(by_step[i][1], 3) for i in (2, 3, 4)] == [0.06, 0.6, 0.6]
    assert [r["family_verdict"] for r in filled if r["quantity"] == "mi_ksg"][0] == \
        "not made: exact (identical clients: MI infinite), no test"

    # A start that is an estimate (not exact by rule) is a step like any other: four tests.
    estimated = AnalysisTable([{**r, "value": 1.0, "p_value": 0.001} if r["quantity"] == "mi_ksg" else r
                               for r in table], settings={"ci_level": 0.95})
    assert [it for it, _ in step_verdicts(estimated, "mi_ksg", "a", "b")] == [1, 2, 3, 4]
    assert [round(p, 3) for _, p, _ in trend_steps(estimated, "mi_ksg", "a", "b")] == [0.004, 0.06, 0.6, 0.6]


@pytest.mark.parametrize("init", ["per-run", "fixed"])
def test_a_sampled_tables_family_verdicts_are_the_findings_and_leave_out_the_start(init, tmp_path):
    """On a sampled dump (a shared start, or a fixed one with constant parameters) the table's
    family_verdict of every step a finding reads is the finding's, and the step out of the
    start is in no family (it would count as a test and make the correction stricter)."""
    from mianalysis import ParameterSampler
    from mianalysis.tasks import GaussianSGDTask

    task = GaussianSGDTask(d=2, n_iterations=3)
    dump = ParameterSampler(task, seed=0, progress=False, init=init, shared=("noise",)).sample(200, tmp_path / "d")
    table = analyze(dump, estimators=("gaussian",), metrics=("euclidean",), n_permutations=0, random_state=0)
    start = min(r["checkpoint"] for r in table)
    for q in ("mi_gaussian", "euclidean"):
        for a, b in {(r["client_a"], r["client_b"]) for r in table if r["quantity"] == f"delta_{q}"}:
            steps = trend_steps(table, q, a, b)
            deltas = table.select(f"delta_{q}", a, b)
            assert [r["checkpoint"] for r, _, _ in steps] == [r["checkpoint"] for r in deltas if r["checkpoint"] > start + 1]
            for r, p, v in steps:
                assert (v, p) == (r["family_verdict"], r["p_adjusted"]) or (np.isnan(p) and np.isnan(r["p_adjusted"])
                                                                            and v == r["family_verdict"])
            first = next(r for r in deltas if r["checkpoint"] == start + 1)
            assert first["family_verdict"].startswith("not made: a step out of an exact value"), first
            assert np.isnan(first["p_adjusted"])



def test_the_exact_start_rule_reads_checkpoints_as_integers_and_only_distances_as_distances():
    def table(checkpoints, quantity="euclidean"):
        level = [{"quantity": quantity, "client_a": "a", "client_b": "b", "checkpoint": c, "iteration": i,
                  "value": 0.0 if i == 0 else 1.0, "spread": 0.0 if i == 0 else 0.1} for i, c in enumerate(checkpoints)]
        steps = [{"quantity": f"delta_{quantity}", "client_a": "a", "client_b": "b", "checkpoint": c, "iteration": i,
                  "value": 1.0, "change_p": 0.01, "estimate_kind": "plain"} for i, c in enumerate(checkpoints) if i]
        return level + steps

    for checkpoints in ([0, 1], [0.0, 1.0], ["0", "1"], [np.int64(0), np.int64(1)]):
        verdicts = familywise_verdicts(table(checkpoints)).verdicts
        assert verdicts[-1].startswith("not made: a step out of an exact value (identical clients: distance 0"), \
            checkpoints
    # a pair quantity that is not a distance (e.g. a diagnostic) at 0 with spread 0 is no exact start
    assert familywise_verdicts(table([0, 1], "copula_disagrees")).verdicts[-1] == "rising"
    with pytest.raises(ValueError, match="a row's `checkpoint` must be an integer; got 0.5"):
        familywise_verdicts(table([0.5, 1]))


def test_a_step_out_of_held_parameters_is_no_estimate_not_a_step_out_of_an_exact_value():
    # Issue 50: an MI row whose every varying parameter of a client was held (min_moving_runs)
    # is no exact value; the step out of it keeps its "not made: no estimate" verdict, while the
    # step out of constant parameters is still one out of an exact value.
    from mianalysis.analysis.inference.familywise import FROM_EXACT, exact_by_rule, familywise_verdicts
    from mianalysis.analysis.reading import held_note

    pair = {"client_a": "a", "client_b": "b", "layer": ""}
    held = {**pair, "quantity": "mi_gaussian", "checkpoint": 0, "value": float("nan"), "p_value": float("nan"),
            "note": held_note("client_a", 5)}
    constant = {**held, "value": 0.0, "note": "client_a's parameters are constant across runs: MI is 0"}
    step = {**pair, "quantity": "delta_mi_gaussian", "checkpoint": 1, "value": float("nan"),
            "change_p": float("nan"), "estimate_kind": "plain",
            "verdict": "not made: no estimate (every varying parameter of client_a held, each moving in fewer "
                       "than 5 runs)"}
    assert exact_by_rule(held) == "" and exact_by_rule(constant) == "constant parameters: MI 0"
    assert familywise_verdicts([held, step]).verdicts[1] == step["verdict"]
    assert familywise_verdicts([constant, {**step, "value": 2.0, "change_p": 0.001}]).verdicts[1].startswith(FROM_EXACT)
