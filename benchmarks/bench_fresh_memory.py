"""What a fresh large array costs on this machine, with and without the allocator keeping freed memory.

An analysis allocates and frees large numpy temporaries all the time. Where the host of a
virtual machine takes freed memory back within seconds, each new array is fresh pages, and
their first touch can cost more than the work done on them. This allocates an array of
`--mib` MiB `--times` times, `--pause` seconds apart (each freed before the pause), in a fresh
process with glibc's default settings and in one with the allocator keeping what it frees
(``MALLOC_MMAP_MAX_=0``, ``MALLOC_TRIM_THRESHOLD_`` 2^62, as ``bench_paper_scale.py
--keep-freed-memory``), and records each allocation's seconds and the process's minor page
faults.

    python benchmarks/bench_fresh_memory.py [--mib 200] [--times 6] [--pause 3]
        [--out benchmarks/results/fresh_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_paper_scale import KEEP_FREED_MEMORY

from mianalysis.provenance import collect, utc_now

OUT = Path(__file__).parent / "results" / "fresh_memory.json"

CHILD = r"""
import json, resource, sys, time
import numpy as np
mib, times, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
seconds = []
for i in range(times):
    start = time.perf_counter()
    a = np.ones(mib * 2**20 // 8)
    seconds.append(time.perf_counter() - start)
    del a
    if i < times - 1:
        time.sleep(pause)
print(json.dumps({"seconds": seconds, "minor_page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}))
"""


def allocations(mib, times, pause, keep):
    """One fresh process's record: each allocation's seconds and its minor page faults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(KEEP_FREED_MEMORY if keep else {})
    done = subprocess.run([sys.executable, "-c", CHILD, str(mib), str(times), str(pause)], env=env,
                          capture_output=True, text=True, check=True)
    record = json.loads(done.stdout.splitlines()[-1])
    record["seconds"] = [round(s, 4) for s in record["seconds"]]
    return {"allocator": "keeps freed memory" if keep else "default", "malloc_environment":
            KEEP_FREED_MEMORY if keep else {}, **record}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--times", type=int, default=6)
    parser.add_argument("--pause", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.mib < 1 or args.times < 2 or args.pause < 0:
        raise SystemExit("--mib must be >= 1, --times >= 2 and --pause >= 0")
    started, load = utc_now(), os.getloadavg()
    runs = [allocations(args.mib, args.times, args.pause, keep) for keep in (False, True)]
    defaults = {"mib": 200, "times": 6, "pause": 3.0}
    given = [f"--{k} {getattr(args, k):g}" for k, v in defaults.items() if getattr(args, k) != v]
    record = {"command": " ".join(["python benchmarks/bench_fresh_memory.py", *given]), "mib": args.mib,
              "times": args.times, "pause_seconds": args.pause, "load_average_before": [round(v, 2) for v in load],
              "runs": runs, "provenance": collect(started, finished=True)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for r in runs:
        print(f"{r['allocator']}: {', '.join(f'{s:.3f}' for s in r['seconds'])} s; "
              f"{r['minor_page_faults']} minor page faults", flush=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
