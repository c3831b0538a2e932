"""Where computing each KSG distance once starts to pay: `ksg_mi` with and without the
distance cache over a grid of sizes and feature counts.

    python benchmarks/bench_distance_cache.py

The cache halves the O(n^2 d) distance work and adds O(n^2) memory traffic, so it wins
only from some number of features on; `ksg_mi(distance_cache="auto")` uses it from
DISTANCE_CACHE_MIN_FEATURES (x and y together). Each time is the best of three calls after
warming memory (see bench_estimators.py). Writes benchmarks/results/distance_cache.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_estimators import data, warm_memory

from mianalysis import ksg_mi
from mianalysis.estimators.ksg import DISTANCE_CACHE_MIN_FEATURES

SIZES = [(5000, 5), (5000, 25), (5000, 50), (10000, 25), (10000, 50), (10000, 100), (22000, 50)]
OUT = Path(__file__).parent / "results" / "distance_cache.json"


def best_of_three(func):
    times = []
    for _ in range(3):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    argparse.ArgumentParser(description=__doc__).parse_args()
    ksg_mi(*data(300, 60), distance_cache=True)  # compile or load both kernels
    ksg_mi(*data(300, 60), distance_cache=False)
    warm_memory()
    results = {"symmetric_min_features": DISTANCE_CACHE_MIN_FEATURES, "runs": []}
    for n, d in SIZES:
        x, y = data(n, d)
        for dtype in ("float64", "float32"):
            once, twice = (best_of_three(lambda: ksg_mi(x, y, dtype=dtype, random_state=0, distance_cache=cache))
                           for cache in (True, False))
            row = {"n": n, "features": 2 * d, "dtype": dtype, "each_once_seconds": round(once, 4),
                   "each_twice_seconds": round(twice, 4), "speedup_of_cache": round(twice / once, 2)}
            results["runs"].append(row)
            print(row, flush=True)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
