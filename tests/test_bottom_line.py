"""The bottom line (mianalysis.report.bottom_line): what a reader may conclude from a table, in
sentences quoting it; report.md opens with it, and ``mianalysis analyze`` and the demo print it last.

Known answers: tiny dumps whose clients are clearly dependent or clearly independent, one whose
runs are too few for a calibrated estimate (lower bounds), and hand-made rows whose verdicts are
set by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mianalysis import AnalysisTable, ParameterDump, analyze, report
from mianalysis.analysis.inference.choice import choose
from mianalysis.report import HEADING, reference_headroom
from mianalysis.report.bottom_line import (BOTTOM_LINE, bottom_line, format_bottom_line,
                                           runs_for_calibrated_estimate)


def pair_dump(path, *, coupling, n_runs=300, n_params=2, seed=0, extra=None):
    """Clients a and b over three checkpoints: b = coupling x a + independent noise, so that
    coupling 0 makes them independent and coupling 1 clearly dependent."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((3, n_runs, n_params))
    b = coupling * a + rng.standard_normal((3, n_runs, n_params))
    clients = {"a": a, "b": b, **(extra(rng, a.shape) if extra else {})}
    return ParameterDump.from_arrays(path, clients, checkpoints=[0, 1, 2])


def span(values, digits):
    low, high = f"{min(values):.{digits}g}", f"{max(values):.{digits}g}"
    return low if low == high else f"{low} to {high}"


def row(quantity, it, value, **columns):
    return {"checkpoint": it, "iteration": it, "client_a": "a", "client_b": "b", "quantity": quantity,
            "value": value, "n_runs": 500, "estimate_kind": "plain", **columns}


# ---------------------------------------------------------------------------- dependence
def test_clearly_dependent_clients_are_said_dependent_with_the_tables_p_values(tmp_path):
    table = analyze(pair_dump(tmp_path / "d", coupling=1.0), n_permutations=59, metrics=[])
    mi = table.select("mi_copula")
    assert [r["family_verdict"] for r in mi] == ["above null"] * 3  # the known answer, as the table holds it
    line = bottom_line(table)[0]
    assert line.startswith("Dependence by Gaussian copula (`mi_copula`: an estimate of the MI, in bits): "
                           "3 of the 3 rows tested lie above their permutation null (pair a-b at iterations 0, 1, 2;")
    assert f"MI {span([r['value'] for r in mi], 3)} bits" in line
    assert f"p-value {span([r['p_value'] for r in mi], 2)}, adjusted by Holm over each client pair's checkpoints: " \
           f"{span([r['p_adjusted'] for r in mi], 2)}, family-wise error rate 0.05" in line
    assert line.endswith("Conclusion: the clients' parameters are dependent across runs beyond chance at every "
                         "tested iteration.")


def test_clearly_independent_clients_are_not_said_dependent_nor_independent(tmp_path):
    table = analyze(pair_dump(tmp_path / "d", coupling=0.0), n_permutations=59, metrics=[])
    assert [r["family_verdict"] for r in table.select("mi_copula")] == ["not above null"] * 3
    line = bottom_line(table)[0]
    assert "0 of the 3 rows tested lie above their permutation null" in line
    assert line.endswith("Conclusion: no dependence between the clients is detected beyond the null; that does not "
                         "show them independent (a weaker dependence needs more runs to be seen).")


def test_too_few_permutations_give_no_verdict_and_say_how_many_would():
    # Holm over a pair's 2 checkpoints needs p <= 0.025: 19 permutations (p >= 0.05) cannot, 39 can.
    verdict = "not made: 19 permutations give p >= 0.05; Holm over 2 tests needs p <= 0.025"
    rows = [row("mi_copula", it, 1.0, p_value=0.05, p_adjusted=0.1, family_verdict=verdict,
                null_method="permutation") for it in (1, 2)]
    line = bottom_line(rows)[0]
    assert f"no verdict in 2 rows (pair a-b at iterations 1, 2): its `family_verdict` says \"{verdict}\"" in line
    assert "at least 39 permutations (`n_permutations=39`, `--permutations 39`)" in line
    assert line.endswith("Conclusion: this table does not say whether the clients are dependent.")
    assert 1 / (39 + 1) * 2 <= 0.05 < 1 / (38 + 1) * 2  # 39 is the fewest that pass Holm over 2


def test_rows_without_a_null_say_what_would_make_a_verdict(tmp_path):
    table = analyze(pair_dump(tmp_path / "d", coupling=1.0, n_runs=60), n_permutations=0, metrics=[])
    line = bottom_line(table)[0]
    assert "no null in 3 rows (pair a-b at iterations 0, 1, 2: `p_value` empty)" in line
    assert "a permutation null of at least 59 shuffles" in line  # Holm over 3 checkpoints: p <= 0.05 / 3


def test_a_lower_bound_above_its_null_says_at_least():
    rows = [row("mi_bound", it, v, p_value=0.001, p_adjusted=0.002, family_verdict="above null",
                estimate_kind="bound", null_method="permutation") for it, v in ((1, 0.2), (2, 0.5))]
    line = bottom_line(rows)[0]
    assert "a lower bound on the MI, not an estimate of it, in bits" in line
    assert "MI at least 0.2 to 0.5 bits" in line


# ---------------------------------------------------------------------------- MI trends
def test_bound_rows_get_no_trend_verdict_and_the_runs_a_calibrated_estimate_needs(tmp_path):
    # 60 runs of 40 + 40 parameters: "auto" gives the bound (60 < 2.2 x 80), whose changes are no MI's.
    table = analyze(pair_dump(tmp_path / "d", coupling=1.0, n_runs=60, n_params=40), n_permutations=0, metrics=[])
    assert {r["estimate_kind"] for r in table.select("mi_bound")} == {"bound"} and not table.select("mi_copula")
    trend = next(line for line in bottom_line(table) if line.startswith("MI trend"))
    assert "(`mi_bound`): no trend verdict: its rows are lower bounds on the MI, and a bound that rises or falls " \
           "is not an MI that does" in trend
    assert "the whole parameter vector's 80 joint dims need at least 176 runs (this table has 60)" in trend
    assert runs_for_calibrated_estimate(80) == 176
    assert choose(176, 80)[0].estimator == "copula" and choose(175, 80)[0].estimator == "bound"


def test_a_made_mi_trend_is_quoted_with_its_correction_and_conclusion():
    rows = [row("mi_copula", it, v, p_value=0.001, p_adjusted=0.003, family_verdict="above null",
                null_method="permutation") for it, v in ((0, 1.0), (1, 2.0), (2, 3.0))]
    rows += [row("delta_mi_copula", it, 1.0, change_p=p, p_adjusted=2 * p, family_verdict="rising")
             for it, p in ((1, 0.001), (2, 0.004))]
    trend = bottom_line(rows)[1]
    assert trend == ("MI trend by Gaussian copula (`mi_copula`): rising for pair a-b, from the `family_verdict` of "
                     "the `delta_mi_copula` rows (Holm over each client pair's steps of one quantity (family-wise "
                     "error rate 0.05); adjusted p 0.002 to 0.008). Conclusion: the clients became more dependent "
                     "over iterations 0-2.")


def test_a_step_out_of_the_shared_start_only_is_no_trend():
    rows = [row("mi_copula", 0, math.inf, family_verdict="not made: exact (identical clients: MI infinite), no test"),
            row("mi_copula", 1, 1.0, p_value=0.001, p_adjusted=0.001, family_verdict="above null"),
            row("delta_mi_copula", 1, -math.inf, family_verdict="not made: a step out of an exact value (identical "
                                                                "clients: MI infinite at checkpoint 0)")]
    lines = bottom_line(rows)
    assert "Not tested, exact by design: pair a-b at iteration 0 (identical clients: MI infinite)." in lines[0]
    assert "no trend verdict: its only iteration step starts from a value exact by design" in lines[1]
    assert "What would make one: a further checkpoint" in lines[1]


def test_a_table_of_blocks_gets_one_paragraph_per_estimator_and_quotes_what_the_whole_vector_needs():
    # Two blocks of one pair: one above its null, one not; each block's MI is at most the whole vector's.
    def block(layer, it, p_adj, verdict):
        return row("mi_copula", it, 1.0, layer=layer, p_value=p_adj / 2, p_adjusted=p_adj, family_verdict=verdict,
                   null_method="permutation")

    rows = [block("w[0:10]", it, 0.004, "above null") for it in (1, 2)]
    rows += [block("w[10:20]", it, 0.6, "not above null") for it in (1, 2)]
    rows += [row("delta_mi_copula", 2, 0.1, layer=layer, change_p=0.5, p_adjusted=0.5,
                 family_verdict="no detectable change") for layer in ("w[0:10]", "w[10:20]")]
    note = "by auto: the whole vector (20 parameters per client) needs 88 runs for a calibrated estimate, the dump has 30"
    table = AnalysisTable(rows, settings={"by": "auto", "by_choice": note})
    dependence, trend, _ = bottom_line(table)
    assert dependence.startswith("Dependence by Gaussian copula (`mi_copula`, per block (2 blocks: `w[0:10]`, "
                                 "`w[10:20]`): an estimate of the MI, in bits): 2 of the 4 rows tested lie above")
    assert ("in 1 of 2 blocks, and so are the whole vectors (a block's MI is at most the whole vector's); it holds "
            "after Bonferroni over the 2 blocks tested too (smallest adjusted p x 2 = 0.008)") in dependence
    assert "with no detectable change for both blocks of pair a-b" in trend
    assert trend.endswith(f"No trend of the whole vector is measured (`settings[\"by_choice\"]`: \"{note}\").")


# ---------------------------------------------------------------------------- distances
@pytest.mark.parametrize("values, verdict, words, conclusion", [
    ((1.0, 2.0, 3.0), "rising", "grows", "the clients' parameters drift apart over iterations 0-2"),
    ((3.0, 2.0, 1.0), "falling", "shrinks", "the clients' parameters come closer together over iterations 0-2"),
    ((2.0, 2.0, 2.0), "no detectable change", "shows no detectable change",
     "no change in how far apart the clients are is detected over iterations 0-2"),
])
def test_distances_growing_or_shrinking(values, verdict, words, conclusion):
    rows = [row("euclidean", it, v, spread=0.1) for it, v in enumerate(values)]
    rows += [row("delta_euclidean", it, values[it] - values[it - 1], change_p=0.001, p_adjusted=0.002,
                 family_verdict=verdict) for it in (1, 2)]
    line = bottom_line(rows)[-1]
    assert f"euclidean (L2) {words} for pair a-b (iteration 0: {values[0]:g}; iteration 2: {values[2]:g}; " \
           "adjusted p 0.002)" in line
    assert line.endswith(f"Conclusion: {conclusion}.")


def test_a_table_without_distances_or_mi_says_so():
    lines = bottom_line([{"checkpoint": 0, "iteration": 0, "client_a": "a", "client_b": "", "quantity": "loss",
                          "value": 1.0}])
    assert lines == ["The table has no MI rows between clients: it says nothing of their dependence.",
                     "The table has no distance rows: nothing is said of how far apart the clients are."]


# ---------------------------------------------------------------------------- tables on disk, older tables
def test_a_table_read_back_and_one_without_family_columns_give_the_same_bottom_line(tmp_path):
    table = analyze(pair_dump(tmp_path / "d", coupling=1.0, n_runs=100), n_permutations=39)
    table.write(tmp_path / "t.csv")
    expected = bottom_line(table)
    assert bottom_line(AnalysisTable.read(tmp_path / "t.csv")) == expected
    older = [{k: v for k, v in r.items() if k not in ("p_adjusted", "family_verdict")} for r in table]
    assert bottom_line(AnalysisTable(older, settings=table.settings)) == expected


def test_headroom_is_said_where_the_dump_has_a_reference_client(tmp_path):
    def central(rng, shape):
        return {"central": rng.standard_normal(shape)}

    dump = pair_dump(tmp_path / "d", coupling=1.0, n_runs=100, extra=central)
    rows = reference_headroom(dump)
    assert rows and {r["iteration"] for r in rows} == {2} and "blue" not in {r["rule"] for r in rows}
    last = bottom_line(analyze(dump, n_permutations=0), headroom=rows)[-1]
    assert last.startswith("Headroom over averaging") and "against the FedSGD reference (central client)" in last
    assert reference_headroom(pair_dump(tmp_path / "e", coupling=1.0, n_runs=100)) is None


def headroom_row(rule, ratio, low, high):
    return {"iteration": 5, "reference": "optimum (exact theta*)", "rule": rule, "mse": 1.0, "ratio": ratio,
            "ratio_low": low, "ratio_high": high, "ratio_corrected": ratio, "ratio_corrected_low": low,
            "ratio_corrected_high": high}


@pytest.mark.parametrize("best, said, conclusion", [
    ((0.5, 0.45, 0.55), "the best linear combination (blue) has 0.500 [0.450, 0.550] of averaging's error",
     "there is headroom"),
    ((0.99, 0.97, 1.0), "averaging is within 1.0 % [-0.5, 2.6] of the best linear combination (blue): near-optimal",
     "averaging is near-optimal against this reference"),
    ((0.9, 0.7, 1.1), "no verdict: the best linear combination (blue) has 0.900 [0.700, 1.100]",
     "this table does not say whether the clients could be combined better than by averaging"),
])
def test_headroom_verdicts_known_answers(best, said, conclusion):
    rows = [headroom_row("mean", 1.0, 1.0, 1.0), headroom_row("blue", *best)]
    last = bottom_line([], headroom=rows)[-1]
    assert "iteration 5, against the optimum theta*: " + said in last
    assert f"Conclusion: {conclusion}" in last


# ---------------------------------------------------------------------------- where it is printed
def test_report_md_opens_with_the_bottom_line_and_names_only_the_estimators_it_holds(tmp_path):
    # "auto" may run copula, bound and ksg (the sidecar lists all three); this table holds one of them
    done = report(pair_dump(tmp_path / "d", coupling=1.0, n_runs=60, n_params=40), tmp_path / "r", n_permutations=19)
    held = sorted(r["quantity"][3:] for r in done.table if r["quantity"].startswith("mi_"))
    held = list(dict.fromkeys(held))
    assert len(held) == 1 and set(done.table.settings["estimators"]) == {"copula", "bound", "ksg"}
    lines = done.summary.splitlines()
    paragraphs = bottom_line(done.table)
    assert lines[:4] == [HEADING, "", f"## {BOTTOM_LINE}", ""]
    assert lines[4:4 + len(paragraphs)] == [f"- {p}" for p in paragraphs]
    analysed = next(line for line in lines if line.startswith("Analysed by"))
    assert f"MI estimator {held[0]};" in analysed
    assert not [e for e in ("copula", "bound", "ksg") if e not in held and e in analysed]


def test_analyze_prints_the_bottom_line_last(tmp_path, cli):
    pair_dump(tmp_path / "d", coupling=1.0, n_runs=100)
    done = cli(["analyze", tmp_path / "d", "--out", tmp_path / "t.csv", "--no-progress", "--permutations", "39"])
    assert done.returncode == 0, done.stderr
    expected = format_bottom_line(bottom_line(AnalysisTable.read(tmp_path / "t.csv")))
    assert done.stdout.rstrip("\n").endswith("\n" + expected)
    assert expected.startswith("bottom line:\n- Dependence by Gaussian copula")


def test_the_demo_prints_the_bottom_line_last(tmp_path):
    from mianalysis.report.demo import demo_report

    table = analyze(pair_dump(tmp_path / "d", coupling=1.0, n_runs=100), n_permutations=39)
    assert demo_report(table, tmp_path).endswith("\n\n" + format_bottom_line(bottom_line(table)))


def test_format_bottom_line_keeps_every_word():
    paragraphs = ["word " * 50 + "end.", "Short."]
    text = format_bottom_line(paragraphs, width=30)
    items = text.split("\n- ")
    assert items[0] == "bottom line:" and all(len(line) <= 30 for line in text.splitlines())
    assert [" ".join(item.split()) for item in items[1:]] == [" ".join(p.split()) for p in paragraphs]
