"""Time `ksg_mi(backend="torch")` on one device and check it against the Numba kernel.

    python benchmarks/bench_torch_backend.py --device cuda   # on a machine with a GPU
    python benchmarks/bench_torch_backend.py --device cpu --quick

X ~ N(0, I_d), Y = 0.5 X + sqrt(0.75) E, k = 3, noise off, at (n, d per side) in
(5000, 50), (10000, 100), (22000, 394), (22000, 850) in float64 and float32 (--quick: the
first two). Each estimate is compared with the Numba kernel's value on the same data (same
neighbour counts, so the same value up to float rounding of the digamma sum); the Numba
value is computed once per size and dtype. Writes benchmarks/results/torch_<device>.json
(the device name, torch version, and per size the torch seconds, the Numba seconds and
whether the values agree).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench_estimators import data  # the same correlated Gaussians

from mianalysis import ksg_mi

SIZES = [(5000, 50), (10000, 100), (22000, 394), (22000, 850)]
OUT_DIR = Path(__file__).parent / "results"


def timed(func):
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="torch device, e.g. cuda, cuda:1, cpu")
    parser.add_argument("--quick", action="store_true", help="only the two smallest sizes")
    args = parser.parse_args()
    import torch

    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    ksg_mi(*data(64, 2), noise=0, backend="torch", device=args.device)  # initialise the device
    results = {"device": args.device, "device_name": name, "torch": torch.__version__, "k": 3, "runs": []}
    for n, d in SIZES[:2] if args.quick else SIZES:
        x, y = data(n, d)
        for dtype in ("float64", "float32"):
            torch_seconds, torch_value = timed(
                lambda: ksg_mi(x, y, noise=0, dtype=dtype, backend="torch", device=args.device))
            numba_seconds, numba_value = timed(lambda: ksg_mi(x, y, noise=0, dtype=dtype))
            row = {"n": n, "d_per_side": d, "dtype": dtype, "torch_seconds": round(torch_seconds, 4),
                   "numba_seconds": round(numba_seconds, 4), "torch_bits": torch_value, "numba_bits": numba_value,
                   "agrees": bool(abs(torch_value - numba_value) <= 1e-9 * max(1.0, abs(numba_value)))}
            results["runs"].append(row)
            print(row, flush=True)
    OUT_DIR.mkdir(exist_ok=True)
    out = OUT_DIR / f"torch_{device.type}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
