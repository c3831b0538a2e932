"""Cost of verifying a dump (sizes and SHA-256 of every completed chunk), which resuming a
dump and `analyze` do before they build on it, against the analysis itself.

    python benchmarks/bench_verify.py [--runs 2000] [--params 400]

Writes dumps of 3 clients x R runs x P parameters with 6 checkpoints (1x) and 24
checkpoints (4x) into a temporary folder (as benchmarks/bench_memory.py does), then times
in this process: `ParameterDump.verify()` (best of 3; the files were just written, so
they are in the page cache: a cold read adds the disk's read time), the resume check of
`ParameterDump.open_or_create` (open + verify), and `analyze` with its defaults (Gaussian
and KSG, three distances) with and without verification. Writes
benchmarks/results/verify.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_memory import write_dump

from mianalysis import ParameterDump, analyze

LEGACY = ("gaussian", "ksg")  # the estimators of the committed results (analyze's default before "auto")

OUT = Path(__file__).parent / "results" / "verify.json"


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--params", type=int, default=400)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mianalysis-verify-"))
    results = {"runs": args.runs, "params": args.params, "clients": 3, "dumps": []}
    try:
        warm = ParameterDump.from_arrays(tmp / "warm", np.random.default_rng(0).standard_normal((2, 1, 50, 3)))
        analyze(warm, estimators=LEGACY, verify=False)  # compile and import what the analysis needs before timing it
        for factor, checkpoints in (("1x", 6), ("4x", 24)):
            path = tmp / factor
            write_dump(path, checkpoints, args.runs, args.params)
            size = sum(f.stat().st_size for f in path.iterdir())
            dump = ParameterDump.open(path)
            verify_s = best_of(dump.verify)
            resume_s = best_of(lambda: ParameterDump.open_or_create(path, meta=dump.meta))
            t = time.perf_counter()
            analyze(path, estimators=LEGACY, verify=False)
            analyze_s = time.perf_counter() - t
            t = time.perf_counter()
            analyze(path, estimators=LEGACY)
            analyze_verified_s = time.perf_counter() - t
            entry = {"size": factor, "checkpoints": checkpoints, "dump_mib": size / 2**20,
                     "verify_s": verify_s, "verify_mib_per_s": size / 2**20 / verify_s, "resume_check_s": resume_s,
                     "analyze_s": analyze_s, "analyze_verified_s": analyze_verified_s,
                     "verify_share_of_analysis": verify_s / analyze_s}
            results["dumps"].append(entry)
            print(f"{factor}: dump {size / 2**20:.0f} MiB, verify {verify_s:.3f} s ({entry['verify_mib_per_s']:.0f} "
                  f"MiB/s), resume check {resume_s:.3f} s, analyze {analyze_s:.2f} s without / "
                  f"{analyze_verified_s:.2f} s with verification", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["machine"] = {"cpu_count": os.cpu_count()}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
