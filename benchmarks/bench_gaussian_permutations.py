"""Gaussian permutation nulls: 100 shuffles from the marginal blocks' factors, in single estimates.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E (benchmarks/bench_estimators.py's data), with the
settings `analyze` uses (`mianalysis.analysis.gaussian_settings`: the plain bias-corrected
estimate while runs outnumber twice the joint dimension, Ledoit-Wolf shrinkage otherwise).
For each size it times

- one estimate, `gaussian_mi(x, y, **settings)` (the best of `--repeats`);
- `mi_permutation_test(x, y, estimator="gaussian", n_permutations=P, **settings)`: the
  estimate and P shuffles, each from the factors of the marginal blocks computed once
  (the best of `--repeats`), with the cross products in float64 and in float32
  (`cross_precision`; "auto" takes float32 from 2,000 runs on), their largest difference
  and whether the p-values agree;
- `--reference` shuffles recomputed by `gaussian_mi` (what every shuffle cost before),
  checked against the same shuffles of the permutation test (largest relative difference);

and records the permutation test's cost in single estimates (target: <= 30 for 100
shuffles at 2,000 x (850 + 850), where recomputing costs about 101). Writes
benchmarks/results/gaussian_permutations.json (or `--out`).

    python benchmarks/bench_gaussian_permutations.py [--sizes 2000x850,26400x850] [--permutations 100]
    python benchmarks/bench_gaussian_permutations.py --sizes 500x200 --repeats 1 --out check.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from bench_estimators import data  # the same correlated Gaussians

from mianalysis import gaussian_mi, mi_permutation_test
from mianalysis.analysis import gaussian_settings

OUT = Path(__file__).parent / "results" / "gaussian_permutations.json"
SIZES = "2000x850,26400x850"  # runs x features of each client (the LeNet head: 850)


def best_of(repeats, function):
    """(fastest wall time of `repeats` calls, the last call's result)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def measure(n, d, permutations, repeats, reference):
    x, y = data(n, d)
    settings, _ = gaussian_settings(n, 2 * d)
    single, estimate = best_of(repeats, lambda: gaussian_mi(x, y, **settings))
    test_seconds, res = best_of(repeats, lambda: mi_permutation_test(
        x, y, estimator="gaussian", n_permutations=permutations, random_state=0, cross_precision="float64",
        **settings))
    single_seconds, single_res = best_of(repeats, lambda: mi_permutation_test(
        x, y, estimator="gaussian", n_permutations=permutations, random_state=0, cross_precision="float32",
        **settings))
    rng = np.random.default_rng(0)  # the test's shuffles, in its order
    perms = [rng.permutation(n) for _ in range(min(reference, permutations))]
    start = time.perf_counter()
    again = np.array([gaussian_mi(x, y[p], **settings) for p in perms])
    per_shuffle = (time.perf_counter() - start) / max(len(perms), 1)
    # relative to each value (a value of exactly 0, where the shrinkage intensity is 1, counts as equal)
    diff = np.abs(res.null_distribution[:len(perms)] - again) / np.maximum(np.abs(again), np.finfo(float).tiny)
    worst = float(diff.max()) if perms else None
    return {
        "n": n, "d_x": d, "d_y": d, "regime": "ledoit-wolf shrinkage" if settings else "plain, bias-corrected",
        "single_estimate_seconds": round(single, 4), "permutation_test_seconds": round(test_seconds, 3),
        "permutations": permutations,
        "cost_in_single_estimates": round(test_seconds / single, 1),
        "float32_cross_products": {
            "permutation_test_seconds": round(single_seconds, 3),
            "cost_in_single_estimates": round(single_seconds / single, 1),
            "speedup_over_float64": round(test_seconds / single_seconds, 2),
            "max_abs_difference_of_null_values_bits": float(np.abs(single_res.null_distribution
                                                                   - res.null_distribution).max()),
            "p_value": single_res.p_value, "same_p_value": single_res.p_value == res.p_value},
        "recomputed_shuffle_seconds": round(per_shuffle, 4) if perms else None,
        "recomputed_shuffles": len(perms),
        "recomputing_cost_in_single_estimates_estimated": round(1 + permutations * per_shuffle / single, 1)
        if perms else None,
        "max_relative_difference_to_recomputed": worst,
        "estimate_bits": estimate, "null_mean_bits": res.null_mean, "null_std_bits": res.null_std,
        "p_value": res.p_value,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=SIZES, help="comma-separated RUNSxFEATURES (features of each client)")
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="timings are the best of this many")
    parser.add_argument("--reference", type=int, default=3, help="shuffles recomputed by gaussian_mi")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    results = {
        "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "command": "python benchmarks/bench_gaussian_permutations.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
        "data": "x ~ N(0, I_d), y = 0.5 x + sqrt(0.75) e, seed 0; settings of analysis.gaussian_settings",
        "target": "100 permutations <= 30 single estimates at 2000 x (850 + 850)",
        "runs": [],
    }
    for n, d in sizes:
        row = measure(n, d, args.permutations, args.repeats, args.reference)
        results["runs"].append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
