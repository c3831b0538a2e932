"""benchmarks/bench_paper_scale.py: its quick mode runs end to end, its design's exact MI is
right, and its record holds what the benchmark promises (timings, memory, load, profile)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_paper_scale.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_paper_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_design_has_the_exact_mi_it_claims(tmp_path):
    # Each parameter of two clients has correlation rho_t (before the monotone maps): the
    # normal scores of the written dump give it back, and the exact MI is the closed form.
    from mianalysis import ParameterDump

    bench = _bench()
    bench.write_dump(tmp_path / "d", runs=4000, params=6, checkpoints=5, seed=1)
    dump = ParameterDump.open(tmp_path / "d")
    from scipy.special import ndtri
    from scipy.stats import rankdata

    for t in (0, 4):
        a, b = (ndtri(rankdata(dump.samples(c, index=t), axis=0) / 4001) for c in ("0", "2"))
        corr = [np.corrcoef(a[:, j], b[:, j])[0, 1] for j in range(6)]
        assert np.allclose(corr, bench.rho(t, 5), atol=0.05)
        # the monotone maps make the marginals non-Gaussian (sinh: heavy tails)
        raw = np.asarray(dump.samples("0", index=t), dtype=float)
        assert np.abs(raw[:, 0]).max() > 3 * np.abs(raw[:, 2]).max()
    assert bench.exact_mi_bits(4, 5, 850) == pytest.approx(-850 / 2 * np.log2(1 - 0.25))


def test_quick_mode_runs_and_records_what_it_promises(tmp_path):
    out = tmp_path / "quick.json"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, "MALLOC_ARENA_MAX": "4",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--tmp", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert [(r["size"], r["estimators"]) for r in record["results"]] == [("300x20", "auto"), ("300x20", "explicit")]
    assert list(tmp_path.iterdir()) == [out]  # the dumps are removed
    for r in record["results"]:
        assert r["wall_seconds"] > 0 and r["cpu_seconds"] > 0 and 0 < r["peak_rss_gib"] < 8
        assert len(r["load_average_before"]) == 3 and r["rows"] > 0
        # page faults (the cost of fresh memory on a virtual machine) and the allocator's settings
        assert r["minor_page_faults"] > 0 and r["malloc_environment"] == {"MALLOC_ARENA_MAX": "4"}
        stages = r["profile"]["cumulative_seconds"]
        assert stages["MI estimates and their permutation nulls"] > 0
        # 300 runs >= 4 x 40 joint dims: the covariance changes' se from influence values
        assert stages["influence values (se of changes, delta method)"] > 0
        assert r["profile"]["top_own_time"] and not any(str(ROOT) in f["function"]
                                                        for f in r["profile"]["top_own_time"])
    auto, explicit = record["results"]
    assert set(auto["mi"]) == {"mi_copula"}  # 300 runs >= 2.2 x 40 joint dims: the copula estimate
    assert set(explicit["mi"]) == {"mi_gaussian", "mi_ksg", "mi_copula"}
    # KSG's halves from the distances the estimate made; nothing else resamples at these sizes
    assert explicit["profile"]["cumulative_seconds"]["KSG half-subsampling replicates from kept distances"] > 0
    assert explicit["profile"]["cumulative_seconds"]["resampled MI (bootstrap / half-subsampling replicates)"] is None
    assert auto["profile"]["cumulative_seconds"]["resampled MI (bootstrap / half-subsampling replicates)"] is None
    copula = auto["mi"]["mi_copula"]
    assert [c["iteration"] for c in copula] == [0, 1, 2] and all(c["pairs"] == 3 for c in copula)
    assert all(c["null_methods"] == ["permutation"] for c in copula)
    # the design's dependence rises over the checkpoints, and the copula estimate follows the exact MI
    assert copula[0]["mean_bits"] < copula[1]["mean_bits"] < copula[2]["mean_bits"]
    assert all(abs(c["mean_bits"] - c["exact_bits"]) < 1.0 for c in copula)
    assert record["command"] == "python benchmarks/bench_paper_scale.py --quick"  # no machine path
    assert all(r["command"] == record["command"] and r["checkpoints"] == 3 for r in record["results"])
    # --merge adds a command's results to those in the file
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--estimators", "auto", "--gaussian-null",
                           "analytic", "--keep-freed-memory", "--merge", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads(out.read_text())
    assert merged["results"][:2] == record["results"] and len(merged["provenance"]) == 2
    last = merged["results"][2]
    assert last["estimators"] == "auto" and last["gaussian_null"] == "analytic"
    assert last["malloc_environment"] == {"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_MAX_": "0",
                                          "MALLOC_TRIM_THRESHOLD_": str(2**62)}
    assert all(c["null_methods"] == ["analytic"] for c in last["mi"]["mi_copula"])


def test_bad_sizes_are_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "300by20", "--out", str(tmp_path / "x.json")],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--sizes: '300by20' is not RUNSxPARAMS" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_sampled_dump_is_analysed_from_its_first_runs(tmp_path):
    """--dump: the first --runs runs of a real dump, copied with the public writer (the
    values of those runs, every checkpoint), analysed; no exact MI is claimed for it."""
    from mianalysis import ParameterDump

    rng = np.random.default_rng(0)
    arrays = {c: rng.standard_normal((2, 50, 4)).astype(np.float32) for c in ("a", "b", "c")}
    ParameterDump.from_arrays(tmp_path / "mine", arrays, checkpoints=[0, 3])
    copy = _bench().copy_first_runs(tmp_path / "mine", tmp_path / "copy", 30)
    assert copy == (30, 4, 2)
    copied = ParameterDump.open(tmp_path / "copy")
    assert copied.checkpoints == [0, 3] and np.array_equal(copied.samples("b", iteration=3), arrays["b"][1, :30])
    out = tmp_path / "real.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--dump", str(tmp_path / "mine"), "--runs", "40",
                           "--estimators", "legacy", "--permutations", "2", "--out", str(out), "--tmp", str(tmp_path)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (r,) = json.loads(out.read_text())["results"]
    assert (r["dump"], r["runs"], r["params"], r["checkpoints"], r["estimators"]) == ("mine", 40, 4, 2, "legacy")
    assert set(r["mi"]) == {"mi_gaussian", "mi_ksg"} and all(c["exact_bits"] is None for c in r["mi"]["mi_ksg"])
    with pytest.raises(SystemExit, match="give --runs, not --sizes"):  # its main, in this process
        _bench().main(["--dump", str(tmp_path / "mine"), "--sizes", "300x20", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
