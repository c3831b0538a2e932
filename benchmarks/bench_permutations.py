"""Permutation nulls of KSG: cached marginal distances versus recomputing every shuffle.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3. For each size, times
`mi_permutation_test(..., estimator="ksg", n_permutations=P)` with the distance cache
(both marginal distance matrices once, O(n^2) per shuffle) and, where it is affordable,
without it (O(n^2 d) per shuffle, timed on a few shuffles and scaled). Writes
benchmarks/results/permutations.json.

    python benchmarks/bench_permutations.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numba
import numpy as np

from bench_estimators import data  # the same correlated Gaussians

from mianalysis import mi_permutation_test

OUT = Path(__file__).parent / "results" / "permutations.json"
SIZES = [(2000, 10, "float64"), (10000, 100, "float64"), (22000, 394, "float64"), (22000, 394, "float32")]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the two smallest sizes")
    parser.add_argument("--permutations", type=int, default=100)
    args = parser.parse_args()
    mi_permutation_test(*data(64, 2), n_permutations=2, distance_cache=True)  # compile or load
    results = {"machine": {"cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads()},
               "permutations": args.permutations, "runs": []}
    for n, d, dtype in SIZES[:2] if args.quick else SIZES:
        x, y = data(n, d)
        start = time.perf_counter()
        res = mi_permutation_test(x, y, n_permutations=args.permutations, random_state=0, distance_cache=True,
                                  dtype=dtype)
        cached = time.perf_counter() - start
        row = {"n": n, "d": d, "dtype": dtype, "cached_seconds": round(cached, 2), "estimate_bits": res.estimate,
               "null_mean_bits": res.null_mean, "p_value": res.p_value}
        if n <= 10000:  # the uncached path: 3 shuffles, scaled to the full count
            start = time.perf_counter()
            mi_permutation_test(x, y, n_permutations=3, random_state=0, distance_cache=False, dtype=dtype)
            per = (time.perf_counter() - start) / 4  # the estimate and 3 shuffles
            row["uncached_seconds_estimated"] = round(per * (args.permutations + 1), 1)
            row["speedup"] = round(row["uncached_seconds_estimated"] / cached, 1)
        results["runs"].append(row)
        print(row, flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
