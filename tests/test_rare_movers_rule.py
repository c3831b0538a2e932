"""Parameters that move in very few runs (mianalysis.analysis.diagnostics.movers) and analyze's
`min_moving_runs`: which columns are held, the entropy bound on the MI they can carry, and
an analysis whose Gaussian estimate stays plain where the default one is a shrinkage number."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, gaussian_mi
from mianalysis.analysis.diagnostics.movers import hold_rare_movers, movers_entropy_bound, rare_movers

FAST = {"metrics": ["euclidean"], "ci_resamples": 4, "verify": False, "estimators": ["gaussian"]}


def test_entropy_bound_known_values():
    # h(R/n) + (R/n) log2 R: one run of four moves -> h(1/4); all runs moving, distinct -> log2 n.
    h = -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))
    assert movers_entropy_bound(1, 4) == pytest.approx(h, rel=1e-12)
    assert movers_entropy_bound(8, 8) == pytest.approx(3.0, rel=1e-12)
    assert movers_entropy_bound(2, 8) == pytest.approx(-(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75)) + 0.25)
    assert movers_entropy_bound(0, 10) == 0.0
    with pytest.raises(ValueError, match=r"moving_runs must be in \[0, n_runs\]; got 5 of 4"):
        movers_entropy_bound(5, 4)


def test_rare_movers_counts_runs_away_from_the_most_common_value():
    rng = np.random.default_rng(1)
    n = 60
    samples = np.column_stack([rng.standard_normal(n), np.full(n, 3.0), np.full(n, -1.0), np.full(n, 7.0),
                               np.full(n, 2.0)])
    samples[[5], 1] = 3.5            # moves in one run
    samples[[5, 11], 2] = [0.0, 4.0]  # in two, one shared with column 1
    samples[:29, 3] = 8.0            # in 29 of 60 runs (fewer than half): rare below 30
    movers = rare_movers(samples, 3)
    assert movers.columns.tolist() == [False, True, True, False, False]  # column 4 is constant: not a mover
    assert (movers.count, movers.moving_runs, movers.n_runs) == (2, 2, n)
    assert movers.bound_bits == pytest.approx(movers_entropy_bound(2, n))
    assert rare_movers(samples, 30).columns.tolist() == [False, True, True, True, False]
    assert rare_movers(samples, 1).count == 0  # the default: nothing held
    held, same = hold_rare_movers(samples, 3)
    assert held is not samples and same.count == 2
    np.testing.assert_array_equal(held[:, 1], 3.0)
    np.testing.assert_array_equal(held[:, 2], -1.0)
    np.testing.assert_array_equal(held[:, [0, 3, 4]], samples[:, [0, 3, 4]])
    assert samples[5, 1] == 3.5  # the caller's array is left as it was
    assert hold_rare_movers(samples, 1)[0] is samples


@pytest.mark.parametrize("min_runs, message", [
    (31, "min_runs=31 is more than half of the 60 runs"),
    (0, "min_runs"),
    (2.5, "min_runs"),
])
def test_rare_movers_refuses_what_it_cannot_hold(min_runs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        rare_movers(np.zeros((60, 2)), min_runs)


def _dump(path, n_runs=300, seed=0):
    """Clients a and b, 4 parameters correlated 0.6 each; client a also has 3 parameters that
    keep the value 0.1 except in run 17, where all three move together (a rank-1 block:
    a's covariance is singular), client b 3 constant ones."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, n_runs, 4))
    b = 0.6 * a + 0.8 * rng.standard_normal((1, n_runs, 4))
    movers = np.full((1, n_runs, 3), 0.1)
    movers[0, 17] = [0.7, 1.3, 1.9]
    return ParameterDump.from_arrays(path, {"a": np.concatenate([a, movers], axis=2),
                                            "b": np.concatenate([b, np.full((1, n_runs, 3), 0.5)], axis=2)})


def test_analyze_holds_rare_movers_and_bounds_what_they_can_add(tmp_path):
    dump = _dump(tmp_path / "d")
    default = analyze(dump, **FAST)
    held = analyze(dump, min_moving_runs=2, **FAST)
    mi = {t: next(r for r in table.rows if r["quantity"] == "mi_gaussian") for t, table in
          (("default", default), ("held", held))}
    assert mi["default"]["estimate_kind"] == "shrinkage"  # the rank-1 block makes a's covariance singular
    assert mi["held"]["estimate_kind"] == "plain"
    a, b = (dump.samples(c, index=0) for c in (0, 1))
    assert mi["held"]["value"] == pytest.approx(gaussian_mi(a[:, :4], b[:, :4]), rel=1e-12)  # the block held: dropped
    bound = movers_entropy_bound(1, 300)
    assert (f"held parameters moving in fewer than 2 runs at their most common value (client_a 3 moving in 1 of 300 "
            f"runs): they can add at most {bound:.2g} bits") in mi["held"]["note"]
    assert "held parameters" not in mi["default"]["note"]
    # Distances use every parameter, held or not.
    dist = [next(r for r in table.rows if r["quantity"] == "euclidean") for table in (default, held)]
    assert dist[0]["value"] == dist[1]["value"]
    assert held.settings["constant_rule"]["min_moving_runs"] == 2
    assert "min_moving_runs" not in default.settings["constant_rule"]  # default tables keep their settings


def test_analyze_writes_the_rule_in_the_sidecar_and_refuses_too_many_runs(tmp_path):
    dump = _dump(tmp_path / "d", n_runs=40)
    with pytest.raises(ValueError, match="min_moving_runs=21 is more than half of the dump's 40 completed runs"):
        analyze(dump, min_moving_runs=21, out=tmp_path / "t.csv", **FAST)
    assert not (tmp_path / "t.csv").exists()
    analyze(dump, min_moving_runs=3, out=tmp_path / "t.csv", **FAST)
    settings = json.loads((tmp_path / "t.csv.json").read_text())["settings"]
    assert settings["constant_rule"]["min_moving_runs"] == 3


def test_cli_min_moving_runs_is_analyze_s(tmp_path):
    from mianalysis.analysis import AnalysisTable
    from mianalysis.cli import main

    dump = _dump(tmp_path / "d", n_runs=200)
    assert main(["analyze", str(dump.path), "--out", str(tmp_path / "t.csv"), "--no-progress", "--estimators",
                 "gaussian", "--metrics", "euclidean", "--min-moving-runs", "2"]) == 0
    table = AnalysisTable.read(tmp_path / "t.csv")
    assert table.settings["constant_rule"]["min_moving_runs"] == 2
    direct = analyze(dump, estimators=["gaussian"], metrics=["euclidean"], min_moving_runs=2)
    assert [r["value"] for r in table] == pytest.approx([r["value"] for r in direct])
    assert next(r for r in table if r["quantity"] == "mi_gaussian")["estimate_kind"] == "plain"


def _held_dump(path, first):
    """Clients a and b, 60 runs of 2 parameters, 3 checkpoints, a close to b (MI about 4
    bits) from checkpoint 1 on; client a's parameters at checkpoint 0 are `first`."""
    rng = np.random.default_rng(0)
    b = rng.standard_normal((3, 60, 2))
    a = b + 0.3 * rng.standard_normal((3, 60, 2))
    a[0] = first
    return ParameterDump.from_arrays(path, {"a": a, "b": b})


def test_a_client_whose_every_parameter_is_held_has_no_estimate_never_an_exact_zero(tmp_path):
    # At checkpoint 0 client a's two parameters move in runs 3 and 9 only: with
    # min_moving_runs=5 both are held, so nothing of a is left to estimate from. Held
    # parameters are not constant by design: the row is no exact MI of 0, and the +4-bit
    # step out of it is "not made: no estimate", not "a step out of an exact value".
    from mianalysis.analysis.inference.familywise import FROM_EXACT, exact_by_rule
    from mianalysis.analysis.reading import CONSTANT, mi_rows_by_trust, reading_guide

    first = np.zeros((60, 2))
    first[[3, 9]] = [[1.0, 2.0], [0.5, -1.0]]
    table = analyze(_held_dump(tmp_path / "d", first), min_moving_runs=5, **FAST)
    mi = {r["checkpoint"]: r for r in table if r["quantity"] == "mi_gaussian"}
    step = {r["checkpoint"]: r for r in table if r["quantity"] == "delta_mi_gaussian"}
    held = "every varying parameter of client_a held, each moving in fewer than 5 runs"
    assert math.isnan(mi[0]["value"]) and math.isnan(mi[0]["ci_low"]) and math.isnan(mi[0]["p_value"])
    assert mi[0]["note"].startswith(held + ": no estimate") and CONSTANT not in mi[0]["note"]
    assert "they can add at most 0.24 bits" in mi[0]["note"]  # the movers' bound: the MI is at most that
    assert exact_by_rule(mi[0]) == ""
    assert mi[1]["value"] > 3.5 and mi[2]["value"] > 3.0  # the estimates once a moves in every run
    assert step[1]["verdict"] == step[1]["family_verdict"] == f"not made: no estimate ({held})"
    assert not step[1]["family_verdict"].startswith(FROM_EXACT)
    assert step[1]["note"] == f"no estimate at checkpoint 0: {held}"
    assert step[2]["family_verdict"] in ("rising", "falling", "no detectable change")
    groups = mi_rows_by_trust(table)
    assert groups["held"] == [mi[0]] and not groups["constant"] and not groups["none"]
    assert any(line.startswith("No estimate, parameters held (1 rows: `mi_gaussian` at iteration 0)")
               for line in reading_guide(table))


def test_a_client_whose_parameters_are_constant_is_still_exact_with_movers_held(tmp_path):
    # The other case: constant parameters (no run moves) make the MI 0 exactly, held movers or
    # not, and the step out of it is one out of an exact value.
    from mianalysis.analysis.inference.familywise import FROM_EXACT

    table = analyze(_held_dump(tmp_path / "d", np.zeros((60, 2))), min_moving_runs=5, **FAST)
    mi0 = next(r for r in table if r["quantity"] == "mi_gaussian" and r["checkpoint"] == 0)
    assert mi0["value"] == 0.0 and "client_a's parameters are constant across runs: MI is 0" in mi0["note"]
    step = next(r for r in table if r["quantity"] == "delta_mi_gaussian" and r["checkpoint"] == 1)
    assert step["family_verdict"].startswith(FROM_EXACT)


def test_a_held_client_under_auto_has_one_row_without_an_estimate(tmp_path):
    first = np.zeros((60, 2))
    first[[3, 9]] = [[1.0, 2.0], [0.5, -1.0]]
    table = analyze(_held_dump(tmp_path / "d", first), min_moving_runs=5, metrics=["euclidean"], ci_resamples=4,
                    verify=False)
    rows = [r for r in table if r["checkpoint"] == 0 and r["quantity"].startswith("mi_")]
    assert [r["quantity"] for r in rows] == ["mi_copula"] and math.isnan(rows[0]["value"])
    assert "every varying parameter of client_a held" in rows[0]["note"]
