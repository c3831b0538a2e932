"""Sampler speed: runs per second, vectorised chunks vs the naive one-run-at-a-time loop.

    python benchmarks/bench_sampler.py [--paper-scale]

Per task (paper presets), times `train_chunk` on a chunk of runs (vectorised) and the
plain loop over (run, client) with torch.optim.Adam on a few runs, in one process.
With --paper-scale it also samples the paper's 3 clients x 22,000 runs of signal-rnn into
a temporary dump and records the wall time. Writes benchmarks/results/sampler.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from mianalysis.sampling import ParameterSampler
from mianalysis.tasks import get_task

OUT = Path(__file__).parent / "results" / "sampler.json"


def runs_per_second(sampler, runs, vectorised):
    start = time.perf_counter()
    sampler.train_chunk(range(runs), vectorised=vectorised)
    return runs / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--paper-scale", action="store_true")
    args = parser.parse_args()
    results = {"machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "torch": torch.__version__}, "tasks": []}
    for name, chunk, naive_runs in (("signal-rnn", 64, 4), ("digits-lenet", 64, 8)):
        task = get_task(name, "paper")
        sampler = ParameterSampler(task, seed=0, chunk_size=chunk, progress=False)
        sampler.train_chunk(range(2))  # warm-up (and digits pretraining / cache)
        vec = max(runs_per_second(sampler, chunk, True) for _ in range(2))
        naive = runs_per_second(sampler, naive_runs, False)
        row = {"task": name, "preset": "paper", "clients": task.n_clients, "chunk_size": chunk,
               "vectorised_runs_per_s": round(vec, 2), "naive_runs_per_s": round(naive, 2),
               "speedup": round(vec / naive, 1)}
        results["tasks"].append(row)
        print(row, flush=True)
    if args.paper_scale:
        tmp = Path(tempfile.mkdtemp())
        try:
            task = get_task("signal-rnn", "paper")
            start = time.perf_counter()
            ParameterSampler(task, seed=0, chunk_size=64, progress=False).sample(22000, tmp / "dump")
            seconds = time.perf_counter() - start
        finally:
            shutil.rmtree(tmp)
        results["paper_scale"] = {"task": "signal-rnn", "clients": 3, "runs": 22000, "seconds": round(seconds, 1)}
        print(results["paper_scale"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
