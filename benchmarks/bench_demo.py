"""How long ``mianalysis demo`` (what ``make demo`` runs) takes, what it prints and draws.

    python benchmarks/bench_demo.py

Runs ``python -m mianalysis.cli demo --no-progress`` in a temporary folder (its default
``--out runs/demo``), and writes

- benchmarks/results/demo.json: wall-clock seconds of the command, the processor's
  time (user + system, of the command and its children), the load average before and
  after (the machine may be shared: the time is then longer than on an idle machine),
  the CPU count and the provenance of this session;
- docs/assets/demo-output.txt: what the demo printed (docs/getting-started.md shows it);
- docs/assets/demo_mi.png and docs/assets/demo_distances.png: the figures it drew.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mianalysis.provenance import collect, utc_now

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "demo.json"
ASSETS = ROOT / "docs" / "assets"


def main() -> None:
    started = utc_now()
    tmp = Path(tempfile.mkdtemp())
    try:
        load_before = os.getloadavg()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "mianalysis.cli", "demo", "--no-progress"], cwd=tmp, env=env,
                                capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()
        ASSETS.mkdir(parents=True, exist_ok=True)
        (ASSETS / "demo-output.txt").write_text(result.stdout)
        for kind in ("mi", "distances"):
            shutil.copyfile(tmp / "runs" / "demo" / f"signal_rnn_demo_{kind}.png", ASSETS / f"demo_{kind}.png")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record = {"command": "mianalysis demo --no-progress", "wall_seconds": round(seconds, 1),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "cpu_count": os.cpu_count(),
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in load_after],
              "outputs": ["docs/assets/demo-output.txt", "docs/assets/demo_mi.png", "docs/assets/demo_distances.png"],
              "provenance": collect(started, finished=True)}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"mianalysis demo: {seconds:.0f} s wall, {record['cpu_seconds']:.0f} s CPU; wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
