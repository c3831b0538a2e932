"""Peak memory of `analyze` on dumps of 1x and 4x the size.

    python benchmarks/bench_memory.py [--runs 2000] [--params 400]

Writes dumps of 3 clients x R runs x P parameters with 6 checkpoints (1x) and 24
checkpoints (4x) into a temporary folder, then runs `mianalysis analyze` (Gaussian and
KSG, three distances) on each in a fresh process and records its peak resident memory
(ru_maxrss) and wall time. `analyze` reads one checkpoint at a time from the
memory-mapped files, so the peak should depend on the size of one checkpoint (3 x R x P
float64 values), not on the size of the dump. Writes benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mianalysis import ParameterDump

OUT = Path(__file__).parent / "results" / "memory.json"


def write_dump(path, checkpoints, runs, params, seed=0):
    """A dump written chunk by chunk, so that this process never holds all of it."""
    from mianalysis.dumps import layout_from_shapes

    dump = ParameterDump.create(path, clients=["0", "1", "2"], checkpoints=range(checkpoints), n_runs=runs,
                                layout=layout_from_shapes([("w", (params,))]))
    rng = np.random.default_rng(seed)
    chunk = 250
    for start in range(0, runs, chunk):
        stop = min(start + chunk, runs)
        shared = rng.standard_normal((checkpoints, stop - start, params)).astype(np.float32)
        dump.write_chunk(start, stop, {c: shared + rng.standard_normal(shared.shape).astype(np.float32)
                                       for c in dump.clients})
    return sum(f.stat().st_size for f in Path(path).iterdir())


def peak_of_analyze(dump, table):
    """(peak RSS in MiB, seconds) of `mianalysis analyze` in a child process."""
    code = ("import resource, sys, time\n"
            "from mianalysis.cli import main\n"
            "t = time.perf_counter()\n"
            "code = main(['analyze', sys.argv[1], '--out', sys.argv[2], '--no-progress', '--estimators', 'gaussian', 'ksg'])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t)\n"
            "sys.exit(code)\n")
    out = subprocess.run([sys.executable, "-c", code, str(dump), str(table)], capture_output=True, text=True,
                         check=True).stdout.splitlines()[-1].split()
    return int(out[0]) / 1024, float(out[1])


def baseline_peak():
    """Peak RSS of a process that imports everything analyze uses and computes one tiny estimate."""
    code = ("import resource, numpy as np\n"
            "from mianalysis import ksg_mi, gaussian_mi\n"
            "x = np.random.default_rng(0).standard_normal((50, 2)); ksg_mi(x, x + 1e-3 * x[::-1]); gaussian_mi(x, x[::-1])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--params", type=int, default=400)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mianalysis-mem-"))
    results = {"runs": args.runs, "params": args.params, "clients": 3,
               "one_checkpoint_float64_mib": 3 * args.runs * args.params * 8 / 2**20,
               "baseline_peak_mib": baseline_peak(), "dumps": []}
    try:
        for factor, checkpoints in (("1x", 6), ("4x", 24)):
            size = write_dump(tmp / factor, checkpoints, args.runs, args.params)
            peak, seconds = peak_of_analyze(tmp / factor, tmp / f"{factor}.csv")
            results["dumps"].append({"size": factor, "checkpoints": checkpoints, "dump_mib": size / 2**20,
                                     "peak_rss_mib": peak, "seconds": seconds})
            print(f"{factor}: dump {size / 2**20:.0f} MiB, analyze peak RSS {peak:.0f} MiB, {seconds:.1f} s",
                  flush=True)
            shutil.rmtree(tmp / factor)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["machine"] = {"cpu_count": os.cpu_count()}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
