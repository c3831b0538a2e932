"""Sampler speed: runs per second, vectorised chunks vs the naive one-run-at-a-time loop.

    python benchmarks/bench_sampler.py [--paper-scale]
    python benchmarks/bench_sampler.py --recurrence [--repeats N]

Per task (paper presets), times `train_chunk` on a chunk of runs (vectorised) and the
plain loop over (run, client) with torch.optim.Adam on a few runs, in one process.
With --paper-scale it also samples the paper's 3 clients x 22,000 runs of signal-rnn into
a temporary dump and records the wall time. Writes benchmarks/results/sampler.json.

With --recurrence it compares, instead, two ways of differentiating signal-rnn's Elman
recurrence h_t = tanh(drive_t + h_{t-1} W^T): autograd through the time loop (the
library's `mianalysis.tasks.signal.elman_recurrence`) and the recurrence as one autograd
Function whose backward (back-propagation through time) is written out, defined here
around the same forward and put in the library's place in turn. It times the whole
sampler (`train_chunk` of 64 runs x 3 clients, paper preset, dropout included) and one
layer's forward and backward at the sampler's sizes (T=64, R=192, B=64, H=4), on one
PyTorch thread, the two alternating; median of `--repeats`, and the median of the
per-repeat time ratios. Writes benchmarks/results/sampler_recurrence.json, with the load
average at the start.
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
from mianalysis.tasks.signal import elman_recurrence

OUT = Path(__file__).parent / "results" / "sampler.json"
OUT_RECURRENCE = Path(__file__).parent / "results" / "sampler_recurrence.json"


def runs_per_second(sampler, runs, vectorised):
    start = time.perf_counter()
    sampler.train_chunk(range(runs), vectorised=vectorised)
    return runs / (time.perf_counter() - start)


class _WrittenOutBackward(torch.autograd.Function):
    """The library's forward; the backward through time written out by hand (the
    implementation the sampler used before autograd replaced it)."""

    @staticmethod
    def forward(ctx, drive, w_hh):
        hs = elman_recurrence(drive, w_hh)  # autograd records nothing inside forward
        ctx.save_for_backward(hs, w_hh)
        return hs

    @staticmethod
    def backward(ctx, grad_hs):
        hs, w_hh = ctx.saved_tensors
        slope = 1.0 - hs * hs  # tanh' at every step
        grad_drive = torch.empty_like(hs)
        g = torch.zeros_like(hs[0])
        for t in range(hs.shape[0] - 1, -1, -1):
            g = (g + grad_hs[t]) * slope[t]
            grad_drive[t] = g
            g = torch.bmm(g, w_hh)
        # dL/dW = sum_t grad_drive_t^T h_{t-1}, with h_{-1} = 0.
        return grad_drive, torch.einsum("trbh,trbk->rhk", grad_drive[1:], hs[:-1])


RECURRENCES = {"autograd": elman_recurrence, "written-out backward": _WrittenOutBackward.apply}


def compare_recurrences(repeats):
    import statistics

    import mianalysis.tasks.signal as signal

    torch.set_num_threads(1)
    task = get_task("signal-rnn", "paper")
    sampler = ParameterSampler(task, seed=0, chunk_size=64, progress=False)
    runs, r = 64, 64 * task.n_clients
    g = torch.Generator().manual_seed(0)
    drive = torch.randn(64, r, 64, 4, generator=g).requires_grad_(True)
    w_hh = (0.5 * torch.randn(r, 4, 4, generator=g)).requires_grad_(True)
    weights = torch.randn(64, r, 64, 4, generator=g)

    def one_layer(fn):
        start = time.perf_counter()
        torch.autograd.grad((fn(drive, w_hh) * weights).sum(), (drive, w_hh))
        return time.perf_counter() - start

    def whole_sampler(fn):
        signal.elman_recurrence = fn
        start = time.perf_counter()
        sampler.train_chunk(range(runs))
        return time.perf_counter() - start

    original = signal.elman_recurrence
    try:
        for fn in RECURRENCES.values():  # warm-up
            one_layer(fn), whole_sampler(fn)
        times = {name: {"layer": [], "sampler": []} for name in RECURRENCES}
        for _ in range(repeats):
            for name, fn in RECURRENCES.items():
                times[name]["layer"].append(one_layer(fn))
                times[name]["sampler"].append(whole_sampler(fn))
    finally:
        signal.elman_recurrence = original
    rows = []
    for name, t in times.items():
        sampler_s = statistics.median(t["sampler"])
        rows.append({"recurrence": name, "sampler_chunk_s": round(sampler_s, 3),
                     "sampler_runs_per_s": round(runs / sampler_s, 2),
                     "sampler_chunk_s_all": [round(x, 3) for x in t["sampler"]],
                     "layer_forward_backward_ms": round(1000 * statistics.median(t["layer"]), 2),
                     "layer_ms_all": [round(1000 * x, 2) for x in t["layer"]]})
        print(rows[-1], flush=True)
    # Each repeat times the two back to back: the median of the per-repeat ratios is less
    # sensitive to other load on a shared machine than the ratio of the medians.
    ratios = {what: round(statistics.median(w / a for w, a in zip(times["written-out backward"][what],
                                                                   times["autograd"][what])), 3)
              for what in ("sampler", "layer")}
    print("written-out / autograd time, median of paired repeats:", ratios)
    return {"task": "signal-rnn", "preset": "paper", "clients": task.n_clients, "chunk_runs": runs,
            "iterations": task.n_iterations, "repeats": repeats, "statistic": "median",
            "layer_sizes": {"T": 64, "R": r, "B": 64, "H": 4}, "results": rows,
            "written_out_over_autograd_time": ratios}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--paper-scale", action="store_true")
    parser.add_argument("--recurrence", action="store_true",
                        help="compare the Elman recurrence's autograd and written-out backward")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.recurrence:
        load = round(os.getloadavg()[0], 2)
        results = {"machine": {"cpu_count": os.cpu_count(), "torch_threads": 1, "torch": torch.__version__,
                               "load_average_1min": load}, **compare_recurrences(args.repeats)}
        _write(OUT_RECURRENCE, results)
        return
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
    _write(OUT, results)


def _write(path, results):
    """Write the results JSON atomically (a temporary file renamed over the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
