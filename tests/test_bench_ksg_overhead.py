"""benchmarks/bench_ksg_overhead.py and bench_fresh_memory.py: they run, time what they name, and
refuse bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_ksg_overhead.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}


def test_it_times_the_call_the_kernel_and_each_step(tmp_path):
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "300x2,300x60", "--repeats", "2", "--out", str(out)],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["command"] == "python benchmarks/bench_ksg_overhead.py --sizes 300x2,300x60 --repeats 2"
    assert [(r["n"], r["d"]) for r in record["runs"]] == [(300, 2), (300, 60)]
    for r in record["runs"]:
        best = r["best_seconds"]
        assert set(best) == {"call", "kernel (ksg_counts)", "constant columns", "tie check", "tie-breaking noise",
                             "kernel input", "digamma formula"}
        assert all(v > 0 for v in best.values()) and all(r["median_seconds"][k] >= v for k, v in best.items())
        # the share of the unrounded times, rounded to 3 places
        assert abs(r["outside_kernel_share"] - (1 - best["kernel (ksg_counts)"] / best["call"])) < 0.003
        assert r["outside_kernel_share"] < 1


def test_bad_sizes_are_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "300by2", "--out", str(tmp_path / "x.json")],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "'300by2' is not NxD" in done.stderr
    assert not (tmp_path / "x.json").exists()


FRESH = ROOT / "benchmarks" / "bench_fresh_memory.py"


def test_fresh_memory_times_each_allocation_both_ways(tmp_path):
    out = tmp_path / "fresh.json"
    done = subprocess.run([sys.executable, str(FRESH), "--mib", "8", "--times", "2", "--pause", "0", "--out", str(out)],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["command"] == "python benchmarks/bench_fresh_memory.py --mib 8 --times 2 --pause 0"
    default, keep = record["runs"]
    assert default["malloc_environment"] == {} and keep["malloc_environment"]["MALLOC_MMAP_MAX_"] == "0"
    for r in (default, keep):
        assert len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"]) and r["minor_page_faults"] > 0
    bad = subprocess.run([sys.executable, str(FRESH), "--times", "1", "--out", str(tmp_path / "x.json")], env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--times >= 2" in bad.stderr and not (tmp_path / "x.json").exists()
