"""Time ksg_mi and gaussian_mi on correlated Gaussians at the sizes of the paper.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3. Writes benchmarks/results/estimators.json.

    python benchmarks/bench_estimators.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np

from mianalysis import gaussian_mi, ksg_mi

KSG_SIZES = [(2000, 1), (5000, 50), (10000, 100), (22000, 394)]
GAUSSIAN_SIZES = KSG_SIZES + [(26400, 850)]
OUT = Path(__file__).parent / "results" / "estimators.json"


def data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = 0.5 * x + np.sqrt(0.75) * rng.standard_normal((n, d))
    return x, y


def best_time(func, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = func()
        times.append(time.perf_counter() - start)
    return min(times), value


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip the two largest sizes")
    args = parser.parse_args()
    # Compile (or load from cache) before timing.
    ksg_mi(*data(64, 2), dtype="float64")
    ksg_mi(*data(64, 2), dtype="float32")

    results = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "numba_threads": numba.get_num_threads(),
            "processor": platform.processor() or platform.machine(),
            "numpy": np.__version__,
            "numba": numba.__version__,
        },
        "ksg": [],
        "gaussian": [],
    }
    ksg_sizes = KSG_SIZES[:-1] if args.quick else KSG_SIZES
    for n, d in ksg_sizes:
        x, y = data(n, d)
        for dtype in ("float64", "float32"):
            repeats = 3 if n * n * d < 5e9 else 1
            seconds, value = best_time(lambda: ksg_mi(x, y, dtype=dtype, random_state=0), repeats)
            ops = n * n * 2 * d  # pair x dimension operations, both marginal spaces
            row = {"n": n, "d_per_side": d, "dtype": dtype, "seconds": round(seconds, 4),
                   "mi_bits": value, "gops_per_s": round(ops / seconds / 1e9, 2)}
            results["ksg"].append(row)
            print("ksg", row, flush=True)
    gaussian_sizes = GAUSSIAN_SIZES[:-2] if args.quick else GAUSSIAN_SIZES
    for n, d in gaussian_sizes:
        x, y = data(n, d)
        for shrinkage in (None, "ledoit-wolf"):
            seconds, value = best_time(lambda: gaussian_mi(x, y, shrinkage=shrinkage), 3 if n * d < 5e6 else 1)
            exact = -0.5 * d * np.log2(0.75)
            row = {"n": n, "d_per_side": d, "shrinkage": shrinkage, "seconds": round(seconds, 4),
                   "mi_bits": value, "exact_bits": exact}
            results["gaussian"].append(row)
            print("gaussian", row, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
