"""The KSG permutation table of docs/results/benchmarks.md, rebuilt from the file it quotes,
benchmarks/results/ksg_permutations.json (``python benchmarks/bench_ksg_permutations.py``): a
rerun, or an edited row, that no longer agrees fails here."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "ksg_permutations.json").read_text())
PAGE = (ROOT / "docs" / "results" / "benchmarks.md").read_text()


def _row(run, before):
    """The page's row for one size and dependence: test over single estimate (wall, CPU),
    before (wall, CPU), the stages in single estimates (CPU), the single estimate's seconds."""
    bound = run["bound"]
    cells = [f"{run['n']:,} x {run['d_per_side']}", run["dependence"],
             f"{run['test_over_single']:.2f}", f"{run['test_over_single_cpu']:.2f}",
             f"{before['test_over_single']:.2f}", f"{before['test_over_single_cpu']:.2f}",
             f"{bound['distances_over_single_cpu']:.2f}", f"{bound['lists_over_single_cpu']:.2f}",
             f"{bound['pairings_over_single_cpu']:.2f}", f"{run['single_seconds']:.2f}"]
    return "| " + " | ".join(cells) + " |"


def test_the_page_quotes_every_run_of_the_results_file():
    before = {(r["n"], r["d_per_side"], r["dependence"]): r for r in RESULTS["before"]["runs"]}
    runs = RESULTS["current"]["runs"]
    assert {(r["n"], r["d_per_side"]) for r in runs} == {(10000, 200), (10000, 100)}
    assert {r["dependence"] for r in runs} == {"weak", "strong"}
    for run in runs:
        assert run["permutations"] == 100 and run["bit_identical"]
        row = _row(run, before[(run["n"], run["d_per_side"], run["dependence"])])
        assert row in PAGE, row


def test_the_summary_is_the_runs_against_the_target():
    for row, run in zip(RESULTS["summary"], RESULTS["current"]["runs"]):
        assert row["test_over_single"] == run["test_over_single"]
        assert row["target_met"] == (run["test_over_single"] <= row["target"] == 1.5)
        assert row["target_met_cpu"] == (run["test_over_single_cpu"] <= 1.5)


def test_the_benchmark_records_ratios_stages_and_a_summary(tmp_path):
    # The benchmark itself, tiny: both entries (the "before" one through the public API only),
    # the stages, the check against the brute-force pass, and the summary of both.
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_ksg_permutations",
                                                  ROOT / "benchmarks" / "bench_ksg_permutations.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "ksg.json"
    common = ["--sizes", "1100x3", "--permutations", "8", "--repeats", "2", "--out", str(out)]
    bench.main(common + ["--ratio-only", "--record-as", "before", "--dependence", "strong"])
    bench.main(common + ["--stage-repeats", "1"])
    record = json.loads(out.read_text())
    before, current = record["before"]["runs"], record["current"]["runs"]
    assert [r["dependence"] for r in before] == ["strong"] and "stages" not in before[0]
    assert [r["dependence"] for r in current] == ["weak", "strong"]
    for run in current:
        assert run["bit_identical"] and len(run["test_over_single_runs"]) == 2
        assert run["test_over_single_cpu"] > 0 and run["stages"]["hot_row_samples_per_pairing"] >= 0
        assert {"distances_over_single_cpu", "lists_over_single_cpu", "pairings_over_single_cpu"} <= set(run["bound"])
    assert [(r["dependence"], "before_test_over_single" in r) for r in record["summary"]] == [("weak", False),
                                                                                               ("strong", True)]
