"""KSG's half-subsampling replicates (its interval in `analyze`): from the distances the
estimate made, against a brute-force estimate on each half's samples.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3, algorithm 1, standardized as ``analyze``
does. For each size n x d (d per side):

* ``matrices``: both clients' marginal distance matrices (``MarginalDistances.of``, the
  tie-breaking noise included), which the estimate and its permutation null make anyway;
* ``subsets``: `--halves` half-samples' estimates read from them
  (``ksg_estimates_of_subsets``, the path of ``analyze`` since it);
* ``brute``: the same halves as ``analyze`` made them before, ``ksg_mi`` on each half's
  samples with its own noise (O(m^2 d) each); `--brute-halves` of them timed, scaled to all.

On these continuous samples the two give the same estimates (noise cannot move their
counts); the record says whether they did, to 1e-12 bits. Each time is wall seconds and
process CPU seconds (all threads: the machine may be shared, so the CPU seconds are the
steadier measure). Writes (or updates, by size) benchmarks/results/ksg_replicates.json.

    python benchmarks/bench_ksg_replicates.py --sizes 10000x590 [--halves 10] [--brute-halves 2]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numba
import numpy as np

from bench_estimators import data  # the same correlated Gaussians
from bench_ksg_permutations import timed

from mianalysis import MarginalDistances, ksg_mi
from mianalysis.analysis.inference.intervals import resample_indices
from mianalysis.estimators.ksg import ksg_estimates_of_subsets, standardize_columns
from mianalysis.provenance import collect, utc_now

OUT = Path(__file__).parent / "results" / "ksg_replicates.json"


def run(n, d, halves, brute_halves):
    x, y = (standardize_columns(v) for v in data(n, d))
    indices = resample_indices(n, halves, "ksg", 0)
    row = {"n": n, "d": d, "k": 3, "halves": halves, "brute_halves_timed": brute_halves}
    (mx, my), row["matrices_seconds"], row["matrices_cpu_seconds"] = timed(
        lambda: (MarginalDistances.of(x, random_state=1), MarginalDistances.of(y, random_state=2)))
    subsets, row["subsets_seconds"], row["subsets_cpu_seconds"] = timed(
        lambda: ksg_estimates_of_subsets(mx, my, indices))
    del mx, my
    brute, wall, cpu = timed(lambda: [ksg_mi(x[h], y[h], random_state=j) for j, h in enumerate(indices[:brute_halves])])
    row["brute_seconds_scaled"] = round(wall * halves / brute_halves, 1)
    row["brute_cpu_seconds_scaled"] = round(cpu * halves / brute_halves, 1)
    row["speedup_cpu"] = round(row["brute_cpu_seconds_scaled"] / max(row["subsets_cpu_seconds"], 1e-9), 1)
    row["equal_estimates"] = bool(np.allclose(subsets[:brute_halves], brute, rtol=0, atol=1e-12))
    row["mean_half_estimate_bits"] = round(float(np.mean(subsets)), 4)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000x590", help="comma-separated NxD (D per side)")
    parser.add_argument("--halves", type=int, default=10, help="half-samples (analyze's KSG default: 10)")
    parser.add_argument("--brute-halves", type=int, default=2, help="brute-force halves timed (scaled to all)")
    args = parser.parse_args()
    started = utc_now()
    x, y = data(600, 2)
    ksg_estimates_of_subsets(MarginalDistances.of(x), MarginalDistances.of(y), [np.arange(300)])  # compile or load
    results = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    results["machine"] = {"cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
                          "load_average_at_start": [round(v, 1) for v in os.getloadavg()]}
    for size in args.sizes.split(","):
        n, d = (int(v) for v in size.split("x"))
        row = run(n, d, args.halves, args.brute_halves)
        row["load_average_after"] = [round(v, 1) for v in os.getloadavg()]
        print(row, flush=True)
        results["runs"] = [r for r in results["runs"] if (r["n"], r["d"]) != (n, d)] + [row]
    results["provenance"] = collect(started, finished=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
