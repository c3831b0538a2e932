"""experiments/headroom_coverage.py on a tiny run (its cases, the exactness of its controls, its
counts, the files main writes) and the committed page against the committed table: every
coverage the page and docs/concepts/headroom.md quote is recomputed from
figures/headroom_coverage/headroom_coverage.csv. The intervals themselves are headroom_rows', whose coverage
tests/test_headroom_intervals.py checks."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "figures" / "headroom_coverage" / "headroom_coverage.csv"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("headroom_coverage_script",
                                                  ROOT / "experiments" / "headroom_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its helpers (_results, _stats) are on the path (tests/conftest.py)
    return module


@pytest.fixture(scope="module")
def tiny(script):
    cases, redrawn = script.draw_cases(2, 1, max_runs=200)
    rows = [r for case in cases for r in script.case_rows(case, 4)]
    return cases, script.add_holm(rows), redrawn


def test_cases_and_their_exact_ratios(script, tiny):
    from mianalysis.analysis.studies.headroom import fitting_inflation

    cases, rows, _ = tiny
    assert [c["kind"] for c in cases] == ["fresh", "fresh", "identical clients"]
    assert len({(c["d"], c["n_clients"], c["iteration"], c["data_seed"]) for c in cases}) == 3
    for case in cases:
        k, d, n = case["n_clients"], case["d"], case["n_runs"]
        has_blue = bool(np.isfinite(fitting_inflation("blue", k, d, n // 2)))
        assert case["rules"] == [r for r in script.RULES if r != "blue" or has_blue]
        assert n <= 200 and 0 < min(case["exact"].values())
    assert cases[-1]["heterogeneity"] == 0 and set(cases[-1]["exact"].values()) == {1.0}
    assert [(r["case"], r["rule"]) for r in rows] == [(c["case"], rule) for c in cases for rule in c["rules"]]


def test_identical_clients_are_exchangeable_so_every_exact_ratio_is_one(script, tiny):
    """The control's exact error law is unchanged when the clients are relabelled: every
    rule's oracle weights are then equal, the plain mean."""
    control = tiny[0][-1]
    mean, cov = control["moments"]
    k, d = mean.shape
    for order in ([1, 0, *range(2, k)], [*range(1, k), 0]):
        index = (np.asarray(order)[:, None] * d + np.arange(d)).ravel()
        np.testing.assert_allclose(mean[order], mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(cov[np.ix_(index, index)], cov, rtol=0, atol=1e-12 * np.abs(cov).max())


def test_counts_add_up_and_curvature_has_one_interval(tiny):
    _, rows, _ = tiny
    for r in rows:
        for method in ("jackknife", "delta"):
            assert r[f"{method}_hits"] + r[f"{method}_above"] + r[f"{method}_below"] == r["reps"] == 4
            assert r[f"{method}_coverage_low"] <= r[f"{method}_coverage"] <= r[f"{method}_coverage_high"]
            assert isinstance(r[f"{method}_under_holm"], bool)
        if r["rule"] == "curvature":  # fixed weights: the delta method in both
            assert r["jackknife_hits"] == r["delta_hits"] and r["fit_inflation_mean"] == 1.0


def test_the_page_is_the_summary_of_the_rows(script, tiny):
    _, rows, redrawn = tiny
    text = script.page(rows, 4, "python experiments/headroom_coverage.py --reps 4", redrawn)
    table = script.summary(rows)
    assert table["fresh", "all"]["jackknife"][1] == sum(r["reps"] for r in rows if r["kind"] == "fresh")
    for (kind, rule), cell in table.items():
        assert f"| {kind} | {rule} | {script._coverage(cell['jackknife'])} |" in text
        assert f"| {script._coverage(cell['delta'])} |" in text


def test_main_quick_writes_the_table_its_sidecar_and_the_page(script, tmp_path):
    script.main(["--quick", "--out", str(tmp_path)])
    with open(tmp_path / "headroom_coverage_quick.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["kind"] for r in rows} == {"fresh", "identical clients"} and {r["reps"] for r in rows} == {"5"}
    record = json.loads((tmp_path / "headroom_coverage_quick.csv.json").read_text())
    assert record["command"] == "python experiments/headroom_coverage.py --quick"
    assert (record["fresh_cases"], record["control_cases"], record["reps"]) == (4, 2, 5)
    page = (tmp_path / "headroom_coverage_quick.md").read_text()
    assert "Made by `python experiments/headroom_coverage.py --quick`" in page


def _committed(script):
    with open(TABLE, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows, json.loads((ROOT / "figures" / "headroom_coverage" / "headroom_coverage.csv.json").read_text())


def test_committed_page_quotes_the_committed_table(script):
    rows, record = _committed(script)
    text = (ROOT / "docs" / "results" / "tables" / "headroom_coverage.md").read_text()
    assert f"Made by `{record['command']}`" in text
    table = script.summary(rows)
    for (kind, rule), cell in table.items():
        jk, dl = cell["jackknife"], cell["delta"]
        assert (f"| {kind} | {rule} | {script._coverage(jk)} | {jk[5]} / {jk[6]} | {jk[8]} of {jk[7]} | "
                f"{script._coverage(dl)} | {dl[5]} / {dl[6]} | {dl[8]} of {dl[7]} | "
                f"{script._ratio(cell['width_ratio'])} |") in text, (kind, rule)
    for r in rows:  # each case's line holds its coverages
        assert f"{100 * float(r['jackknife_coverage']):.0f} / {100 * float(r['delta_coverage']):.0f}" in text


def test_committed_coverage_meets_the_issues_target(script):
    """Issue 51: at least 93 % over at least 40 fresh gaussian-sgd cases; identical clients cover 1."""
    rows, record = _committed(script)
    table = script.summary(rows)
    fresh, control = table["fresh", "all"]["jackknife"], table["identical clients", "all"]["jackknife"]
    assert record["fresh_cases"] >= 40 and record["control_cases"] >= 12 and record["reps"] >= 200
    assert fresh[2] >= 0.93 and fresh[8] == 0  # no (case, rule) pair under 95 % after Holm
    assert control[3] >= 0.95 and control[8] == 0  # excluding 1 at no more than the nominal rate


def test_concepts_page_quotes_the_committed_coverage(script):
    rows, _ = _committed(script)
    table = script.summary(rows)
    page = " ".join((ROOT / "docs" / "concepts" / "headroom.md").read_text().split())
    for kind in ("fresh", "identical clients"):
        for method in ("jackknife", "delta"):
            assert script._coverage(table[kind, "all"][method]) in page, (kind, method)
    widths = [f"{table[kind, 'all']['width_ratio']:.1f} times" for kind in ("identical clients", "fresh")]
    assert f"(the intervals are {widths[0]} as wide as before there, {widths[1]} over the fresh designs)" in page
    assert table["fresh", "all"]["jackknife"][8] == 0  # "no design-rule pair falls below 95 % (Holm)"
