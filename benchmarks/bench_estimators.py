"""Time ksg_mi and gaussian_mi on correlated Gaussians at the sizes of the paper.

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3. KSG is timed with its default distance
cache (each distance computed once) and, at two sizes, without it (every distance twice,
O(n) memory). Also measures the peak of a plain vectorised max-abs-difference loop in L1
(the limit of the KSG kernel) and times the torch backend on CPU. Writes
benchmarks/results/estimators.json.

Rows say which loop computed the distances (`distance_loop`): float64 data run float32 loops, checked
in float64, from 512 samples and 16 features (mianalysis/estimators/_checked_kernels.py), and their
fraction of peak is of float32's peak.

Before timing, the script touches WARM_GIB of memory once: on a freshly booted virtual
machine the first touch of each page can cost ~3 ms per MB (the host backs the page), which
would otherwise be charged to whichever estimator first uses that memory. The time it took
is recorded as ``memory_warmup_seconds``.

    python benchmarks/bench_estimators.py [--quick] [--sizes 22000x394 --out PATH]

`--sizes` (n x d per side, comma-separated) times only ksg_mi at those sizes, with the
distance cache "auto", and the loop peak, and writes to `--out` (default
benchmarks/results/estimators_sizes.json), leaving estimators.json as it is.
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
from numba.core import cgutils
from numba.extending import intrinsic

from mianalysis import gaussian_mi, ksg_mi
from mianalysis.estimators.ksg import DISTANCE_CACHE_BLOCK, DISTANCE_CACHE_MIN_FEATURES, checks_float32_distances

KSG_SIZES = [(2000, 1), (5000, 50), (10000, 100), (22000, 394), (22000, 850)]
GAUSSIAN_SIZES = KSG_SIZES[:-1] + [(26400, 850)]
TORCH_SIZES = [(5000, 50), (10000, 100)]
WITHOUT_CACHE_SIZES = [(10000, 100), (22000, 394)]
WARM_GIB = 4
OUT = Path(__file__).parent / "results" / "estimators.json"


def data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    y = 0.5 * x + np.sqrt(0.75) * rng.standard_normal((n, d))
    return x, y


@intrinsic
def _maxnum(typingctx, a, b):
    """max(a, b) as LLVM's maxnum (no NaN here), as the KSG kernel computes it: a vector max
    (Python's ``max`` may become a masked store, about 5x slower on AMD Zen cores)."""
    def codegen(context, builder, signature, args):
        kind = cgutils.ir.FunctionType(args[0].type, [args[0].type] * 2)
        name = "llvm.maxnum.f64" if a == numba.types.float64 else "llvm.maxnum.f32"
        return builder.call(cgutils.get_or_insert_function(builder.module, kind, name), args, fastmath=("nnan", "nsz"))
    return a(a, b), codegen


@numba.njit(parallel=True, fastmath=True, cache=True)
def _maxabs_peak(data, values, out):
    """The KSG kernel's inner loop with everything in L1: for each thread's own block,
    acc[j] = max(acc[j], |data[j] - v|) for four values at a time, with the kernel's max."""
    for t in numba.prange(out.shape[0]):
        o0, o1, o2, o3 = out[t, 0], out[t, 1], out[t, 2], out[t, 3]
        for q in range(0, values.shape[0], 4):
            v0, v1, v2, v3 = values[q], values[q + 1], values[q + 2], values[q + 3]
            for j in range(data.shape[0]):
                a = data[j]
                o0[j] = _maxnum(o0[j], abs(a - v0))
                o1[j] = _maxnum(o1[j], abs(a - v1))
                o2[j] = _maxnum(o2[j], abs(a - v2))
                o3[j] = _maxnum(o3[j], abs(a - v3))


def peak_gops(dtype, width=256, n_values=400_000):
    """Pair-dimension operations per second of a plain vectorised max-abs-difference loop
    on data that stays in L1 cache, on every thread: the limit the KSG kernel runs against."""
    threads = numba.get_num_threads()
    data = np.random.default_rng(0).standard_normal(width).astype(dtype)
    values = np.random.default_rng(1).standard_normal(n_values).astype(dtype)
    out = np.zeros((threads, 4, width), dtype=dtype)
    _maxabs_peak(data, values[:8], out)
    seconds, _ = best_time(lambda: _maxabs_peak(data, values, out), 7)
    return threads * width * n_values / seconds / 1e9


def warm_memory():
    """Touch WARM_GIB of memory (see the module docstring); returns the seconds it took."""
    start = time.perf_counter()
    np.ones(WARM_GIB * 2**30 // 8)
    return round(time.perf_counter() - start, 2)


def computed_pairs(n, d, cache):
    """Pairs whose distance the kernel computes: all n^2 without the cache; with it, the
    tiles on and above the diagonal, (n^2 + sum of squared block sizes) / 2."""
    if cache is False or 2 * d < DISTANCE_CACHE_MIN_FEATURES:
        return n * n
    sizes = [min(DISTANCE_CACHE_BLOCK, n - start) for start in range(0, n, DISTANCE_CACHE_BLOCK)]
    return (n * n + sum(s * s for s in sizes)) // 2


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
    parser.add_argument("--sizes", help="only ksg_mi at these sizes, e.g. 22000x394 (see the module docstring)")
    parser.add_argument("--out", type=Path, help="where --sizes writes (default results/estimators_sizes.json)")
    args = parser.parse_args()
    out = args.out or (OUT.with_name("estimators_sizes.json") if args.sizes else OUT)
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
        "ksg_torch_cpu": [],
        "gaussian": [],
    }
    results["peak_gops_per_s"] = {dtype: round(peak_gops(dtype), 2) for dtype in ("float64", "float32")}
    print("peak", results["peak_gops_per_s"], flush=True)
    results["memory_warmup_seconds"] = warm_memory()
    ksg_sizes = KSG_SIZES[:-2] if args.quick else KSG_SIZES
    if args.sizes:
        ksg_sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    runs = [(n, d, "auto") for n, d in ksg_sizes]
    runs += [(n, d, False) for n, d in WITHOUT_CACHE_SIZES if (n, d) in ksg_sizes and not args.sizes]
    for n, d, cache in runs:
        x, y = data(n, d)
        for dtype in ("float64", "float32"):
            repeats = 3 if n * n * d < 5e10 else 1
            warm_memory()
            seconds, value = best_time(
                lambda: ksg_mi(x, y, dtype=dtype, random_state=0, distance_cache=cache), repeats)
            ops = n * n * 2 * d  # pair x dimension operations of the whole matrix, both sides
            done = computed_pairs(n, d, cache) * 2 * d  # the operations the kernel actually ran
            # float64 data's distances run in float32, checked in float64, where that pays: the loop is float32's
            loop = "float32" if checks_float32_distances(n, 2 * d, dtype) else dtype
            row = {"n": n, "d_per_side": d, "dtype": dtype, "distance_loop": loop, "distance_cache": cache,
                   "seconds": round(seconds, 4), "mi_bits": value, "gops_per_s": round(ops / seconds / 1e9, 2),
                   "computed_gops_per_s": round(done / seconds / 1e9, 2),
                   "fraction_of_peak": round(done / seconds / 1e9 / results["peak_gops_per_s"][loop], 2)}
            results["ksg"].append(row)
            print("ksg", row, flush=True)
    if args.sizes:
        write(results, out)
        return
    try:
        import torch

        ksg_mi(*data(64, 2), backend="torch", device="cpu")
        for n, d in TORCH_SIZES:
            x, y = data(n, d)
            seconds, value = best_time(lambda: ksg_mi(x, y, random_state=0, backend="torch", device="cpu"), 1)
            row = {"n": n, "d_per_side": d, "dtype": "float64", "seconds": round(seconds, 4), "mi_bits": value,
                   "torch_threads": torch.get_num_threads()}
            results["ksg_torch_cpu"].append(row)
            print("ksg torch cpu", row, flush=True)
    except ImportError:
        pass
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
    write(results, out)


def write(results, out):
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
