"""Throughput of one cell of experiments/digits_lenet_paper.py: sampling and analysis.

    python benchmarks/bench_digits_paper.py [--runs 1000 2000]

Samples the digits-lenet paper preset (pretrained start perturbed per run, augmentation
shared by a run's clients; 3 clients, 850 parameters, 5 checkpoints) at each run count and
times (1) sampling in chunks of 64 runs (runs per second), (2) the cell's analysis (`mianalysis.analyze` as the experiment runs it: Gaussian MI with
its analytic null, KSG k = 3 standardised with 100 permutations, the default intervals,
three distances) at each run count, per checkpoint. A warm-up analysis first compiles the
kernels. Writes benchmarks/results/digits_paper.json with the machine's load average, since
the machine is shared and a busy one stretches every time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from mianalysis import ParameterSampler, analyze
from mianalysis.provenance import collect, utc_now
from mianalysis.tasks import get_task

LEGACY = ("gaussian", "ksg")  # the estimators of the committed results (analyze's default before "auto")

OUT = Path(__file__).parent / "results" / "digits_paper.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 2000], help="run counts of the analysis")
    args = parser.parse_args()
    started = utc_now()
    task = get_task("digits-lenet", "paper")
    task.pretrained()  # pretrain (or load) outside the timings
    tmp = Path(tempfile.mkdtemp())
    record = {"task": task.name, "settings": task.settings, "load_average_before": os.getloadavg()}
    try:
        warm = ParameterSampler(task, seed=1, shared=("augmentation",), progress=False).sample(64, tmp / "warm")
        analyze(warm, estimators=LEGACY, n_permutations={"ksg": 2}, gaussian_null="analytic",
                ci_resamples={"gaussian": 2, "ksg": 2})  # warm-up: compile and import
        record["cells"] = []
        for n in sorted(args.runs):
            start = time.perf_counter()
            dump = ParameterSampler(task, seed=0, shared=("augmentation",), progress=False).sample(n, tmp / f"d{n}")
            sampled = time.perf_counter() - start
            start = time.perf_counter()
            analyze(dump, estimators=LEGACY, n_permutations={"ksg": 100}, gaussian_null="analytic", random_state=0)
            seconds = time.perf_counter() - start
            per = seconds / len(dump.checkpoints)
            record["cells"].append({"runs": n, "sampling_seconds": round(sampled, 1),
                                    "runs_per_second": round(n / sampled, 1), "checkpoints": len(dump.checkpoints),
                                    "analysis_seconds": round(seconds, 1), "analysis_seconds_per_checkpoint": round(per, 1)})
            print(f"{n} runs: sampling {sampled:.1f} s ({n / sampled:.1f} runs/s), analysis {seconds:.1f} s "
                  f"({per:.1f} s per checkpoint)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record["load_average_after"] = os.getloadavg()
    record["provenance"] = collect(started, finished=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
