"""The numbers the docs quote about the permutation-moment null, recomputed from the committed
files that made them: figures/moment_null_size/moment_null_size.csv (experiments/moment_null_size.py) and
benchmarks/results/paper_scale.json (benchmarks/bench_paper_scale.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pct(v):
    return f"{100 * float(v):.2f} %"


def test_size_numbers_of_the_intervals_page_are_the_tables():
    rows = list(csv.DictReader(open(ROOT / "figures" / "moment_null_size" / "moment_null_size.csv")))
    page = " ".join((ROOT / "docs" / "concepts" / "intervals.md").read_text().split())
    moments = [r for r in rows if r["null"] == "moments"]
    rates = [float(r["rejected_0.05"]) for r in moments]
    holding = [r for r in moments if float(r["rejected_0.05_low"]) <= 0.05 <= float(r["rejected_0.05_high"])]
    assert (len(moments), len(holding)) == (50, 49)
    assert f"between {pct(min(rates))} and {pct(max(rates))}" in page
    outlier = next(r for r in moments if r not in holding)
    assert (f"{pct(outlier['rejected_0.05'])} [{pct(outlier['rejected_0.05_low'])}, "
            f"{pct(outlier['rejected_0.05_high'])}]") in page
    paper = {(r["null"], r["law"]): r for r in rows if r["p_client"] == "850"}
    assert set(paper) == {(n, law) for n in ("moments", "Wilks (Bartlett)") for law in ("gaussian", "student-t3")}
    assert all(int(r["draws"]) >= 2000 and int(r["n"]) == 26400 for r in paper.values())
    for law in ("gaussian", "student-t3"):
        r = paper["moments", law]
        assert f"{pct(r['rejected_0.05'])} [{pct(r['rejected_0.05_low'])}, {pct(r['rejected_0.05_high'])}]" in page
    assert f"the analytic null {pct(paper['Wilks (Bartlett)', 'gaussian']['rejected_0.05'])}" in page
    t3 = paper["Wilks (Bartlett)", "student-t3"]
    assert (f"{100 * float(t3['rejected_0.05']):.1f} % [{100 * float(t3['rejected_0.05_low']):.1f} %, "
            f"{100 * float(t3['rejected_0.05_high']):.1f} %]") in page


def test_the_paper_scale_record_the_benchmarks_page_quotes():
    record = [r for r in json.loads((ROOT / "benchmarks" / "results" / "paper_scale.json").read_text())["results"]
              if r["size"] == "26400x850" and r.get("gaussian_null") == "auto"][-1]
    page = " ".join((ROOT / "docs" / "results" / "benchmarks.md").read_text().split())
    assert record["wall_seconds"] <= 300 and record["permutations"] == 100 and record["estimators"] == "auto"
    assert f"{record['wall_seconds']} s wall, {record['cpu_seconds']} s CPU, {record['peak_rss_gib']:.2f} GiB" in page
    assert all(m["null_methods"] == ["moments"] and m["pairs"] == 3 for m in record["mi"]["mi_copula"])
    assert max(abs(m["mean_bits"] - m["exact_bits"]) for m in record["mi"]["mi_copula"]) < 0.2
