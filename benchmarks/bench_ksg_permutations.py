"""KSG permutation nulls from sorted neighbour lists against brute force, and against one estimate.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3, algorithm 1. For each size n x d:

* ``single``: one ``ksg_mi(x, y)`` with the defaults (the distance cache where it fits);
  skipped with ``--no-single`` (paper scale: several minutes);
* ``test``: ``mi_permutation_test(x, y, n_permutations=P)`` as a user calls it (noise, both
  marginal distance matrices, the neighbour lists, the observed pairing and P shuffles);
  skipped with ``--no-test``;
* with the distance matrices precomputed (``matrices``): ``lists`` (sorting each row's
  nearest neighbours, both sides), ``listed`` (the observed pairing and P shuffles from the
  lists), and ``brute`` (a few pairings by the brute-force pass over full rows, scaled to
  P + 1); the values of both are checked equal (to the bit) on the pairings both ran.

Each time is wall seconds and process CPU seconds (all threads: the machine may be shared,
so the CPU seconds are the steadier measure). Writes (or updates, by size)
benchmarks/results/ksg_permutations.json.

    python benchmarks/bench_ksg_permutations.py --sizes 10000x200 [--permutations 100]
    python benchmarks/bench_ksg_permutations.py --sizes 26400x850 --no-single --no-test
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

from mianalysis import MarginalDistances, ksg_mi, mi_permutation_test
from mianalysis.estimators import ksg as ksg_module
from mianalysis.estimators.ksg import ksg_estimates_from_distances

OUT = Path(__file__).parent / "results" / "ksg_permutations.json"
BRUTE_PAIRINGS = 3  # brute-force pairings timed (scaled to all)


def timed(function):
    """(result, wall seconds, CPU seconds of the process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, round(time.perf_counter() - wall, 2), round(time.process_time() - cpu, 2)


def run(n, d, permutations, single, test):
    x, y = data(n, d)
    row = {"n": n, "d": d, "k": 3, "permutations": permutations, "list_length": ksg_module.neighbour_list_length(n, 3)}
    if single:
        _, row["single_seconds"], row["single_cpu_seconds"] = timed(lambda: ksg_mi(x, y, random_state=0))
    if test:
        res, row["test_seconds"], row["test_cpu_seconds"] = timed(
            lambda: mi_permutation_test(x, y, n_permutations=permutations, random_state=0))
        row["estimate_bits"], row["null_mean_bits"], row["p_value"] = res.estimate, res.null_mean, res.p_value
        if single:
            row["test_over_single_cpu"] = round(row["test_cpu_seconds"] / row["single_cpu_seconds"], 2)
            row["test_over_single_wall"] = round(row["test_seconds"] / row["single_seconds"], 2)
    (mx, my), row["matrices_seconds"], row["matrices_cpu_seconds"] = timed(
        lambda: (MarginalDistances.of(x, noise=0), MarginalDistances.of(y, noise=0)))
    del x, y
    _, row["lists_seconds"], row["lists_cpu_seconds"] = timed(lambda: (mx.neighbour_lists(3), my.neighbour_lists(3)))
    rng = np.random.default_rng(0)
    perms = [rng.permutation(n) for _ in range(permutations)]
    stats = {}
    listed, row["listed_seconds"], row["listed_cpu_seconds"] = timed(lambda: ksg_estimates_from_distances(
        mx.matrix, my.matrix, perms, 3, 1, method="lists", lists=(mx.neighbour_lists(3), my.neighbour_lists(3)),
        stats=stats))
    row["per_pairing_listed_cpu_ms"] = round(1000 * row["listed_cpu_seconds"] / (permutations + 1), 1)
    row["looked_up_per_pairing"] = float(stats["looked_up"][1:].mean())
    row["full_rows_per_pairing"] = float(stats["full_rows"][1:].mean())
    row["observed_looked_up"], row["observed_full_rows"] = int(stats["looked_up"][0]), int(stats["full_rows"][0])
    brute, wall, cpu = timed(lambda: ksg_estimates_from_distances(mx.matrix, my.matrix, perms[:BRUTE_PAIRINGS - 1],
                                                                  3, 1, method="brute"))
    row["brute_seconds_scaled"] = round(wall * (permutations + 1) / BRUTE_PAIRINGS, 1)
    row["brute_cpu_seconds_scaled"] = round(cpu * (permutations + 1) / BRUTE_PAIRINGS, 1)
    row["per_pairing_brute_cpu_ms"] = round(1000 * cpu / BRUTE_PAIRINGS, 1)
    row["bit_identical"] = bool(np.array_equal(listed[:BRUTE_PAIRINGS], brute))
    row["precomputed_seconds"] = round(row["lists_seconds"] + row["listed_seconds"], 2)
    row["precomputed_cpu_seconds"] = round(row["lists_cpu_seconds"] + row["listed_cpu_seconds"], 2)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000x200", help="comma-separated NxD")
    parser.add_argument("--permutations", type=int, default=100)
    parser.add_argument("--no-single", action="store_true", help="skip the single estimate")
    parser.add_argument("--no-test", action="store_true", help="skip the end-to-end permutation test")
    args = parser.parse_args()
    x, y = data(1200, 2)
    mi_permutation_test(x, y, n_permutations=8, distance_cache=True)  # compile or load the kernels
    results = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    results["machine"] = {"cpu_count": os.cpu_count(), "numba_threads": numba.get_num_threads(),
                          "load_average_at_start": [round(v, 1) for v in os.getloadavg()]}
    for size in args.sizes.split(","):
        n, d = (int(v) for v in size.split("x"))
        row = run(n, d, args.permutations, not args.no_single, not args.no_test)
        row["load_average_after"] = [round(v, 1) for v in os.getloadavg()]
        print(row, flush=True)
        results["runs"] = [r for r in results["runs"] if (r["n"], r["d"]) != (n, d)] + [row]
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
