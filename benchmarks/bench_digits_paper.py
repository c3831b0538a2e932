"""Throughput of one cell of experiments/digits_lenet_paper.py: sampling and analysis.

    python benchmarks/bench_digits_paper.py [--runs 1000 2000] [--sampling-only] [--threads N]
        [--scheduler local:N] [--out FILE]

Samples the digits-lenet paper preset (pretrained start perturbed per run, augmentation
shared by a run's clients; 3 clients, 850 parameters, 5 checkpoints) at each run count and
times (1) sampling in chunks of 64 runs (runs per second), (2) the cell's analysis (`mianalysis.analyze` as the experiment runs it: Gaussian MI with
its analytic null, KSG k = 3 standardised with 100 permutations, the default intervals,
three distances) at each run count, per checkpoint. A warm-up analysis first compiles the
kernels. With --sampling-only the analysis is skipped (sampling throughput alone). The
sampling's CPU seconds (this process's, all its threads) are recorded beside its wall time:
on a busy machine they tell what the sampling costs where the wall time tells how long it
waited for a core. --threads sets PyTorch's thread count (default: PyTorch's; the sampler
trains digits-lenet on one thread whatever it is, see DigitsLeNetTask.sampling_threads).
--scheduler samples on Dask workers (``ParameterSampler.sample(scheduler=...)``, e.g.
local:2: two single-threaded worker processes); one cluster serves the warm-up and every cell,
its start and the warm-up (the workers' imports and first chunk) timed apart, so a cell
times the throughput of warm workers; the CPU seconds are then this process's plus those of
its worker processes.
Writes benchmarks/results/digits_paper.json (or --out) with the machine's load average,
since the machine is shared and a busy one stretches every time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from mianalysis import ParameterSampler, analyze
from mianalysis.provenance import collect, utc_now
from mianalysis.scaleout import connect
from mianalysis.tasks import get_task

LEGACY = ("gaussian", "ksg")  # the estimators of the committed results (analyze's default before "auto")

OUT = Path(__file__).parent / "results" / "digits_paper.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 2000], help="run counts of the analysis")
    parser.add_argument("--sampling-only", action="store_true", help="time the sampling alone, no analysis")
    parser.add_argument("--threads", type=int, default=None, help="PyTorch threads (default: PyTorch's)")
    parser.add_argument("--scheduler", default=None,
                        help="sample on Dask workers, e.g. local:2 (default: in this process)")
    parser.add_argument("--out", type=Path, default=OUT, help="the result file")
    args = parser.parse_args()
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    started = utc_now()
    task = get_task("digits-lenet", "paper")
    task.pretrained()  # pretrain (or load) outside the timings
    tmp = Path(tempfile.mkdtemp())
    record = {"task": task.name, "settings": task.settings, "scheduler": args.scheduler,
              "sampling_threads": task.sampling_threads, "load_average_before": os.getloadavg()}
    try:
        with ExitStack() as stack:
            where = {}
            if args.scheduler is not None:  # one cluster for the warm-up and every cell
                start = time.perf_counter()
                where["client"] = stack.enter_context(connect(args.scheduler))
                record["cluster_start_seconds"] = round(time.perf_counter() - start, 1)
            start = time.perf_counter()
            warm = ParameterSampler(task, seed=1, shared=("augmentation",), progress=False).sample(
                64, tmp / "warm", **where)
            record["warm_up_seconds"] = round(time.perf_counter() - start, 1)  # a worker's imports and first chunk
            if not args.sampling_only:
                analyze(warm, estimators=LEGACY, n_permutations={"ksg": 2}, gaussian_null="analytic",
                        ci_resamples={"gaussian": 2, "ksg": 2})  # warm-up: compile and import
            record["cells"] = [_cell(task, n, tmp, where, args.sampling_only) for n in sorted(args.runs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record["load_average_after"] = os.getloadavg()
    record["provenance"] = collect(started, finished=True)
    record["sampling_only"] = args.sampling_only
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


def _cell(task, n, tmp, where, sampling_only):
    """Sample `n` runs (and analyse them unless `sampling_only`); the cell's record."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    dump = ParameterSampler(task, seed=0, shared=("augmentation",), progress=False).sample(n, tmp / f"d{n}", **where)
    sampled, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    cell = {"runs": n, "sampling_seconds": round(sampled, 1), "runs_per_second": round(n / sampled, 1),
            "sampling_cpu_seconds": round(cpu, 1), "runs_per_cpu_second": round(n / cpu, 1),
            "checkpoints": len(dump.checkpoints), "load_average": os.getloadavg()}
    print(f"{n} runs: sampling {sampled:.1f} s ({n / sampled:.1f} runs/s; {cpu:.1f} CPU s, "
          f"{n / cpu:.1f} runs per CPU second)", flush=True)
    if sampling_only:
        return cell
    start = time.perf_counter()
    analyze(dump, estimators=LEGACY, n_permutations={"ksg": 100}, gaussian_null="analytic", random_state=0)
    seconds = time.perf_counter() - start
    per = seconds / len(dump.checkpoints)
    cell.update({"analysis_seconds": round(seconds, 1), "analysis_seconds_per_checkpoint": round(per, 1)})
    print(f"{n} runs: analysis {seconds:.1f} s ({per:.1f} s per checkpoint)", flush=True)
    return cell


def _cpu_seconds():
    """CPU seconds of this process (all its threads) and of its live child processes (Dask's
    local workers and their nannies, and the scheduler when it runs in this process)."""
    import psutil

    processes = [psutil.Process()]
    processes += processes[0].children(recursive=True)
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


if __name__ == "__main__":
    main()
