"""ModuleTask speed: a model written as a plain nn.Module (vmap over functional_call) against
the built-in task written by hand over the replica dimension.

    python benchmarks/bench_module_task.py [--threads N] [--chunk-size RUNS]

signal-rnn at the paper's sizes (10 Elman layers of 4 units, sequences of 64, 100 examples
per client, batch 64, 3 clients) without dropout (ModuleTask refuses in-model randomness):
the built-in task (written over the replica dimension by hand) and the same network as an
nn.Module trained through ModuleTask (autograd through the time loop, under vmap); and the
CNN of examples/digits_cnn.py. The nn.Module rows come with both ways of computing the
replicas' gradients (ModuleTask's `gradients`: "vmap", vmap(grad), and "summed", one
backward over the summed losses) and, for signal-rnn, with the model taking its time steps
by indexing (``drive[:, t]``) or by ``drive.unbind(1)`` (the same numbers; see
tests/module_factories.py). Runs per second of `train_chunk` on one chunk of 64 runs (or
--chunk-size),
best of two after a warm-up, on `--threads` PyTorch threads (default 1: on a shared
machine more threads than free cores make every timing noise), both per wall second and
per CPU second of this process (on a busy machine the CPU figure is the steadier one). The
load average at the start and the end is recorded with the results. Writes
benchmarks/results/module_task.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mianalysis.sampling import ParameterSampler
from mianalysis.tasks import ModuleTask, SignalRNNTask

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from module_factories import SignalRNN, signal_init  # noqa: E402

OUT = Path(__file__).parent / "results" / "module_task.json"
CHUNK = 64


def paper_signal_rnn(unbind=False):
    """signal-rnn's paper sizes as a plain nn.Module (the model tests/test_module_task.py
    checks against the built-in task)."""
    return SignalRNN(n_layers=10, hidden=4, unbind=unbind)


def runs_per_second(task, chunk):
    sampler = ParameterSampler(task, chunk_size=chunk, progress=False)
    sampler.train_chunk(range(2))  # warm-up
    best, best_cpu = 0.0, 0.0
    for _ in range(2):
        start, cpu = time.perf_counter(), time.process_time()
        sampler.train_chunk(range(chunk))
        best = max(best, chunk / (time.perf_counter() - start))
        best_cpu = max(best_cpu, chunk / (time.process_time() - cpu))
    return round(best, 2), round(best_cpu, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunk-size", type=int, default=CHUNK, help="runs per timed chunk")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "torch": torch.__version__, "load_average_1min": round(os.getloadavg()[0], 2)},
               "chunk_size": args.chunk_size, "tasks": []}
    built_in = SignalRNNTask(dropout=0.0)
    data = [tuple(torch.from_numpy(a) for a in built_in.client_examples(c)) for c in range(built_in.n_clients)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    tasks = [("signal-rnn built-in (dropout 0)", built_in)]
    for gradients in ("vmap", "summed"):
        for unbind in (False, True):
            steps = "drive.unbind(1)" if unbind else "drive[:, t]"
            tasks.append((f"signal-rnn as nn.Module, steps by {steps}, gradients={gradients}",
                          ModuleTask(lambda unbind=unbind: paper_signal_rnn(unbind), data, F.mse_loss,
                                     init=signal_init, lr=1e-3, batch_size=64, gradients=gradients)))
    for gradients in ("vmap", "summed"):
        tasks.append((f"digits_cnn example, gradients={gradients}",
                      ModuleTask.from_factory("digits_cnn:spec", lr=0.01, batch_size=50, epochs=2,
                                              gradients=gradients)))
    for name, task in tasks:
        wall, cpu = runs_per_second(task, args.chunk_size)
        row = {"task": name, "clients": task.n_clients, "iterations": task.n_iterations,
               "runs_per_s": wall, "runs_per_cpu_s": cpu}
        results["tasks"].append(row)
        print(row, flush=True)
    results["machine"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
