"""Cost of the confidence intervals of `analyze`: the same analysis with no MI intervals
(``ci_resamples=0``; distance intervals are free) and with the defaults (20 bootstrap
resamples for the Gaussian estimate, 10 halves for KSG).

    python benchmarks/bench_intervals.py [--runs 2000] [--params 400] [--checkpoints 6]

Writes a dump of 3 clients x R runs x P parameters (clients share a component, as in
benchmarks/bench_memory.py) into a temporary folder, times each analysis (Gaussian and
KSG, three distances; one warm-up analysis first compiles the kernels) and writes
benchmarks/results/intervals.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench_memory import write_dump

from mianalysis import analyze
from mianalysis.provenance import collect, utc_now

LEGACY = ("gaussian", "ksg")  # the estimators of the committed results (analyze's default before "auto")

OUT = Path(__file__).parent / "results" / "intervals.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--params", type=int, default=400)
    parser.add_argument("--checkpoints", type=int, default=6)
    args = parser.parse_args()
    started = utc_now()
    tmp = Path(tempfile.mkdtemp())
    try:
        write_dump(tmp / "d", args.checkpoints, args.runs, args.params)
        analyze(tmp / "d", estimators=LEGACY, ci_resamples={"gaussian": 2, "ksg": 2})  # warm-up: compile and import
        seconds = {}
        for label, resamples in (("no_mi_intervals", 0), ("default_intervals", None)):
            start = time.perf_counter()
            rows = analyze(tmp / "d", estimators=LEGACY, ci_resamples=resamples)
            seconds[label] = round(time.perf_counter() - start, 2)
            print(f"{label}: {seconds[label]} s, {len(rows)} rows", flush=True)
    finally:
        shutil.rmtree(tmp)
    record = {"clients": 3, "runs": args.runs, "params": args.params, "checkpoints": args.checkpoints,
              "seconds": seconds, "ratio": round(seconds["default_intervals"] / seconds["no_mi_intervals"], 2),
              "provenance": [collect(started, finished=True)]}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
