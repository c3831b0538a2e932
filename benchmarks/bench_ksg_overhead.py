"""What `ksg_mi` spends around its neighbour-count kernel, at the peer comparison's sizes.

`ksg_mi` checks its input, drops constant columns, checks for ties and lattices (and
warns), adds the tie-breaking noise and prepares the kernel's input before the neighbour
counts; at small sizes these steps are a visible share of a call. For each size (X ~ N(0,
I_d), Y = 0.5 X + sqrt(0.75) E, k = 3, float64, the data of compare_peers.py) this times,
best and median of `--repeats` calls each: the whole call, the kernel alone on the prepared
input (``ksg_counts``, the same path the call takes), and each step before it, and records
their share of the call.

    python benchmarks/bench_ksg_overhead.py [--sizes 2000x1,2000x10,5000x50,10000x100] [--repeats 7]
        [--out benchmarks/results/ksg_overhead.json]

Writes benchmarks/results/ksg_overhead.json (load average before and after, and provenance).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from bench_estimators import data  # the same correlated Gaussians

from mianalysis import OutsideCalibrationWarning, ksg_mi
from mianalysis.analysis import varying_columns
from mianalysis.estimators import KSG_NOISE
from mianalysis.estimators.ksg import (add_tie_breaking_noise, kernel_input, ksg_counts, ksg_from_counts,
                                       value_tie_shares)
from mianalysis.provenance import collect, utc_now

SIZES = "2000x1,2000x10,5000x50,10000x100"
OUT = Path(__file__).parent / "results" / "ksg_overhead.json"


def timed(func, repeats):
    """(best, median) seconds of `repeats` calls of `func`, after one call to warm it."""
    func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def measure(n, d, repeats):
    """The record of one size (see the module docstring)."""
    x, y = data(n, d)
    rng = np.random.default_rng(0)
    xs, ys = x, y  # continuous data: no constant column to drop
    xn, yn = add_tie_breaking_noise(xs, KSG_NOISE, rng), add_tie_breaking_noise(ys, KSG_NOISE, rng)
    xk, yk = kernel_input(xn, yn, "float64")
    nx, ny = ksg_counts(xk, yk, 3, 1, "float64", "auto")
    steps = {
        "call": lambda: ksg_mi(x, y, random_state=0),
        "kernel (ksg_counts)": lambda: ksg_counts(xk, yk, 3, 1, "float64", "auto"),
        "constant columns": lambda: (varying_columns(x), varying_columns(y)),
        "tie check": lambda: value_tie_shares(xs, ys),
        "tie-breaking noise": lambda: (add_tie_breaking_noise(xs, KSG_NOISE, rng),
                                       add_tie_breaking_noise(ys, KSG_NOISE, rng)),
        "kernel input": lambda: kernel_input(xn, yn, "float64"),
        "digamma formula": lambda: ksg_from_counts(nx, ny, 3, 1),
    }
    seconds = {name: timed(func, repeats) for name, func in steps.items()}
    call = seconds["call"][0]
    return {"n": n, "d": d, "repeats": repeats,
            "best_seconds": {name: round(best, 6) for name, (best, _) in seconds.items()},
            "median_seconds": {name: round(median, 6) for name, (_, median) in seconds.items()},
            "outside_kernel_share": round(1 - seconds["kernel (ksg_counts)"][0] / call, 3)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=SIZES, help=f"comma-separated NxD (default {SIZES})")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sizes = []
    for size in args.sizes.split(","):
        try:
            n, d = (int(v) for v in size.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--sizes: {size!r} is not NxD (e.g. 2000x10)") from None
        sizes.append((n, d))
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    started, load_before = utc_now(), os.getloadavg()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # continuous data: no tie or constant warning may fire
        warnings.simplefilter("ignore", OutsideCalibrationWarning)  # timed outside KSG's regime on purpose
        runs = [measure(n, d, args.repeats) for n, d in sizes]
    given = [f"--{k} {getattr(args, k)}" for k, v in {"sizes": SIZES, "repeats": 7}.items() if getattr(args, k) != v]
    record = {"command": " ".join(["python benchmarks/bench_ksg_overhead.py", *given]),
              "load_average_before": [round(v, 2) for v in load_before],
              "load_average_after": [round(v, 2) for v in os.getloadavg()],
              "runs": runs, "provenance": collect(started, finished=True)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for r in runs:
        best = r["best_seconds"]
        print(f"{r['n']}x{r['d']}: call {best['call'] * 1e3:.2f} ms, "
              f"kernel {best['kernel (ksg_counts)'] * 1e3:.2f} ms, outside the kernel {r['outside_kernel_share']:.0%}",
              flush=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
