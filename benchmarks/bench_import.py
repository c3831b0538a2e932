"""Wall time and peak memory of `mianalysis import` against its chunk size.

    python benchmarks/bench_import.py [--runs 200] [--chunk-sizes 8 32 128 0]

Saves ROOT/CLIENT/CHECKPOINT/RUN.pt files of a 100,000-parameter model (3 clients x 5
checkpoints x R runs; 400 KB each) into a temporary folder, then imports them in a fresh
process per chunk size and records its wall time and peak resident memory (ru_maxrss).
The importer reads one chunk of runs at a time, so the peak should be a baseline (Python,
PyTorch, one file) plus about one chunk's samples (chunk x 3 x 5 x 100,000 x 4 bytes),
whatever the number of runs; chunk size 0 stands for ``chunk_size=None`` (every run in one
chunk, as `mianalysis.dumps.import_checkpoints` does by default), whose peak grows with the
dump. The issue's size, 2,000 runs (30,000 files, 12 GB), is scaled down to --runs (time is
proportional to the number of files; the peak of a chunk size does not depend on it).
Writes benchmarks/results/import.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "import.json"
CLIENTS, CHECKPOINTS = 3, 5
SHAPES = {"fc1.weight": (250, 320), "fc1.bias": (250,), "fc2.weight": (79, 250)}  # 100,000 parameters
N_PARAMS = sum(math.prod(shape) for shape in SHAPES.values())


def write_files(root, runs, seed=0):
    """The .pt files; returns their total size in bytes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    total = 0
    for c in range(CLIENTS):
        for t in range(CHECKPOINTS):
            folder = root / f"client{c}" / str(10 * t)
            folder.mkdir(parents=True)
            for r in range(runs):
                state = {name: torch.randn(shape, generator=g) for name, shape in SHAPES.items()}
                torch.save(state, folder / f"{r}.pt")
                total += (folder / f"{r}.pt").stat().st_size
    return total


def run_import(root, out, chunk_size):
    """(peak RSS in MiB, seconds) of importing `root` in a child process; chunk_size 0 is None."""
    code = ("import resource, sys, time\n"
            "from mianalysis.dumps.importers import import_checkpoints\n"
            "size = int(sys.argv[3]) or None\n"
            "t = time.perf_counter()\n"
            "dump = import_checkpoints(sys.argv[1], sys.argv[2], chunk_size=size, progress=False)\n"
            "seconds = time.perf_counter() - t\n"
            "assert dump.complete and dump.n_params == int(sys.argv[4])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, seconds)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    line = subprocess.run([sys.executable, "-c", code, str(root), str(out), str(chunk_size), str(N_PARAMS)],
                          capture_output=True, text=True, check=True, env=env).stdout.splitlines()[-1].split()
    return int(line[0]) / 1024, float(line[1])


def baseline(root):
    """Peak RSS (MiB) of a process that imports mianalysis and PyTorch and loads one file."""
    code = ("import resource, sys\n"
            "from mianalysis.dumps.importers import load_state_dict\n"
            "load_state_dict(sys.argv[1])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    file = root / "client0" / "0" / "0.pt"
    out = subprocess.run([sys.executable, "-c", code, str(file)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[8, 32, 128, 0])
    parser.add_argument("--tmp", help="folder for the files (default: the system's temporary folder)")
    args = parser.parse_args(argv)
    files = CLIENTS * CHECKPOINTS * args.runs
    need = files * N_PARAMS * 4 * 2.1  # the files and a dump of the same size
    tmp = Path(tempfile.mkdtemp(prefix="bench_import_", dir=args.tmp))
    free = shutil.disk_usage(tmp).free
    if need > free / 2:
        shutil.rmtree(tmp)
        raise SystemExit(f"{need / 2**30:.1f} GiB needed and {free / 2**30:.1f} GiB free in {tmp.parent}: "
                         "use fewer --runs")
    try:
        t = time.perf_counter()
        size = write_files(tmp / "root", args.runs)
        write_s = time.perf_counter() - t
        base = baseline(tmp / "root")
        rows = []
        for chunk in args.chunk_sizes:
            peak, seconds = run_import(tmp / "root", tmp / f"dump{chunk}", chunk)
            shutil.rmtree(tmp / f"dump{chunk}")
            one_chunk = (chunk or args.runs) * CLIENTS * CHECKPOINTS * N_PARAMS * 4 / 2**20
            rows.append({"chunk_size": chunk or None, "chunk_buffer_mib": round(one_chunk, 1),
                         "peak_rss_mib": round(peak, 1), "peak_above_baseline_mib": round(peak - base, 1),
                         "seconds": round(seconds, 2), "files_per_second": round(files / seconds, 1),
                         "mib_per_second": round(size / 2**20 / seconds, 1)})
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "runs": args.runs, "clients": CLIENTS, "checkpoints": CHECKPOINTS, "params": N_PARAMS, "files": files,
        "files_mib": round(size / 2**20, 1), "writing_files_seconds": round(write_s, 1),
        "baseline_peak_mib": round(base, 1), "imports": rows,
        "scaling": (f"the issue's 2,000 runs (30,000 files, {30000 * size / files / 2**30:.1f} GiB) scaled down to "
                    f"{args.runs} runs: import time is proportional to the number of files (about "
                    f"{2000 / args.runs:.0f}x these seconds at 2,000 runs); the peak of a chunk size does not "
                    "depend on the number of runs, except chunk_size None (one chunk of every run), whose buffer "
                    f"would be {2000 * CLIENTS * CHECKPOINTS * N_PARAMS * 4 / 2**30:.1f} GiB"),
        "machine": {"cpu_count": os.cpu_count(), "files_in_page_cache": True},
        "command": "python benchmarks/bench_import.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
