"""Analytic null of the Gaussian MI estimate versus its permutation null, at the paper's size.

X and Y independent N(0, I_358), n = 22,000 (the core paper's runs and its LeNet-sized
client vectors). Times `gaussian_mi_null(n, p, q).p_value(estimate)` and
`mi_permutation_test(..., estimator="gaussian", n_permutations=P)` on the same data, and
records both nulls' mean, sd and p-value. Writes benchmarks/results/gaussian_null.json.

    python benchmarks/bench_gaussian_null.py [--n 22000] [--p 358] [--permutations 100]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from mianalysis import gaussian_mi_null, mi_permutation_test

OUT = Path(__file__).parent / "results" / "gaussian_null.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=22_000)
    parser.add_argument("--p", type=int, default=358, help="features of x and of y")
    parser.add_argument("--permutations", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, args.p))
    y = rng.standard_normal((args.n, args.p))

    start = time.perf_counter()
    perm = mi_permutation_test(x, y, estimator="gaussian", n_permutations=args.permutations, random_state=0)
    perm_seconds = time.perf_counter() - start

    start = time.perf_counter()
    null = gaussian_mi_null(args.n, args.p, args.p)
    p_value = null.p_value(perm.estimate)
    analytic_seconds = time.perf_counter() - start

    result = {
        "machine": {"cpu_count": os.cpu_count()},
        "command": "python benchmarks/bench_gaussian_null.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
        "n": args.n, "p": args.p, "q": args.p, "data": "independent N(0, I) x and y, seed 0",
        "estimate_bits": perm.estimate,
        "analytic": {"seconds": analytic_seconds, "null_mean_bits": null.mean, "null_std_bits": null.std,
                     "p_value": p_value, "method": "exact" if null.exact_available else "bartlett"},
        "permutation": {"seconds": perm_seconds, "permutations": args.permutations,
                        "null_mean_bits": perm.null_mean, "null_std_bits": perm.null_std, "p_value": perm.p_value},
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
