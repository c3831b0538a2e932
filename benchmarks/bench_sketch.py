"""Sketches of an 11 M-parameter model: recording throughput, dump size, peak memory and the
analysis time of a sketched dump.

    python benchmarks/bench_sketch.py [--runs 50] [--size 2048] [--nnz 4] [--out PATH]

The model is ResNet-18's trainable parameters (He et al. 2016; torchvision's ``resnet18``
with a 10-class head: 62 tensors, 11,181,642 values), the (name, shape) list built here by
hand: nothing is imported from torchvision or downloaded. A run's parameters are a fixed
random start plus a perturbation shared by the run's clients and one of each client's own
(windows at random offsets of one long float32 normal sequence, so that making a vector
costs two additions, not 11 M normal draws), recorded as a state dict by
``DumpWriter(..., sketch=Sketch(size, nnz=nnz))`` for 3 clients at one checkpoint.

Recorded in benchmarks/results/sketch.json: seconds per record and per run (3 records; the
``record`` calls alone, what a training loop would pay), the dump's size on disk, this
process's peak resident memory (``resource.getrusage``) before recording (the start, the
noise, numba and the kernel loaded) and after, the
time of ``analyze`` on the sketched dump (verification, the Euclidean distance and KSG MI of
the whole sketched vector, 3 pairs), and how far each run's sketched distance is from the
parameters' (computed here from the full vectors) against the JL error the docstring
states. The 1,000-run figures are extrapolated from the measured runs (time per run x
1,000; bytes per run x 1,000), and labelled so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mianalysis import DumpWriter, ParameterDump, Sketch, analyze
from mianalysis.provenance import collect, utc_now

OUT = Path(__file__).parent / "results" / "sketch.json"
CLIENTS = ("0", "1", "2")
EXTRAPOLATED_RUNS = 1000


def resnet18_shapes(classes: int = 10) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of ResNet-18's trainable parameters, in torchvision's state_dict order."""
    shapes = [("conv1.weight", (64, 3, 7, 7)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    inplanes = 64
    for layer, planes in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride_down = block == 0 and planes != inplanes
            p = f"layer{layer}.{block}"
            shapes += [(f"{p}.conv1.weight", (planes, inplanes if block == 0 else planes, 3, 3)),
                       (f"{p}.bn1.weight", (planes,)), (f"{p}.bn1.bias", (planes,)),
                       (f"{p}.conv2.weight", (planes, planes, 3, 3)),
                       (f"{p}.bn2.weight", (planes,)), (f"{p}.bn2.bias", (planes,))]
            if stride_down:
                shapes += [(f"{p}.downsample.0.weight", (planes, inplanes, 1, 1)),
                           (f"{p}.downsample.1.weight", (planes,)), (f"{p}.downsample.1.bias", (planes,))]
        inplanes = planes
    return shapes + [("fc.weight", (classes, 512)), ("fc.bias", (classes,))]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def folder_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the files in `path`."""
    files = [p for p in path.iterdir() if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_blocks * 512 for p in files)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--size", type=int, default=2048, help="sketch rows per tensor")
    parser.add_argument("--nnz", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    started, load = utc_now(), os.getloadavg()

    shapes = resnet18_shapes()
    n = sum(math.prod(s) for _, s in shapes)
    sketch = Sketch(size=args.size, seed=0, nnz=args.nnz)
    rng = np.random.default_rng(0)
    start = rng.standard_normal(n, dtype=np.float32)
    start *= 0.05
    window = 1 << 20
    pool = rng.standard_normal(n + window, dtype=np.float32)  # perturbations: windows of it at random offsets
    sketch.project("warm-up", np.ones(64, dtype=np.float32), size=8)  # loads numba and the kernel: not counted
    peak_before = peak_mib()

    def params(shared, own):
        """A client's state dict: the start plus the run's and the client's perturbations."""
        flat = start + 0.02 * pool[shared:shared + n]
        flat += 0.02 * pool[own:own + n]
        out, at = {}, 0
        for name, shape in shapes:
            size = math.prod(shape)
            out[name] = flat[at:at + size].reshape(shape)
            at += size
        return out

    def distance(own_a, own_b, block=1 << 20):
        """The parameters' distance between two clients of a run, 0.02 |own_a - own_b|, in
        float64 blocks (no full vector held)."""
        total = 0.0
        for at in range(0, n, block):
            stop = min(n, at + block)
            d = pool[own_a + at:own_a + stop].astype(np.float64) - pool[own_b + at:own_b + stop]
            total += float(d @ d)
        return 0.02 * math.sqrt(total)

    folder = Path(tempfile.mkdtemp(prefix="bench_sketch_"))
    path = folder / "dump"
    record_seconds, true_distances = [], np.empty((args.runs, 3))
    wall = time.perf_counter()
    try:
        with DumpWriter(path, clients=CLIENTS, checkpoints=[0], runs=args.runs, chunk_size=25, sketch=sketch) as w:
            for run in range(args.runs):
                shared, own = int(rng.integers(window)), [int(o) for o in rng.integers(window, size=len(CLIENTS))]
                for client, offset in zip(CLIENTS, own):
                    state = params(shared, offset)
                    t0 = time.perf_counter()
                    w.record(run=run, client=client, checkpoint=0, params=state)
                    record_seconds.append(time.perf_counter() - t0)
                    del state
                true_distances[run] = [distance(own[a], own[b]) for a, b in ((0, 1), (0, 2), (1, 2))]
        wall = time.perf_counter() - wall
        peak_after = peak_mib()
        dump = ParameterDump.open(path)
        apparent, allocated = folder_bytes(path)
        t0 = time.perf_counter()
        table = analyze(dump, estimators=["ksg"], metrics=["euclidean"])
        analysis_seconds = time.perf_counter() - t0
        samples = [np.asarray(dump.samples(c, index=0), dtype=np.float64) for c in CLIENTS]
        sketched = np.stack([np.linalg.norm(samples[a] - samples[b], axis=1) for a, b in ((0, 1), (0, 2), (1, 2))], 1)
        errors = np.abs(sketched / true_distances - 1)
        n_sketch = dump.n_params
        rows = [{k: r[k] for k in ("client_a", "client_b", "quantity", "value", "note")} for r in table.rows]
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    per_record = float(np.mean(record_seconds))
    per_run = per_record * len(CLIENTS)
    sketch_bytes_per_run = len(CLIENTS) * n_sketch * 4
    sketched_tensors = sum(1 for (_, s), m in zip(shapes, sketch.sizes(shapes)) if m < math.prod(s))
    record = {
        "command": "python benchmarks/bench_sketch.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": {"name": "resnet18 (10 classes), trainable parameters, shapes built by hand", "tensors": len(shapes),
                  "parameters": n, "sketched_tensors": sketched_tensors},
        "sketch": {**sketch.to_json(), "values_per_vector": n_sketch, "reduction": round(n / n_sketch, 1),
                   "jl_error_per_tensor_95": round(sketch.error(), 4)},
        "measured": {
            "runs": args.runs, "clients": len(CLIENTS), "checkpoints": 1,
            "record_seconds_mean": round(per_record, 4), "record_seconds_max": round(max(record_seconds), 4),
            "record_seconds_per_run": round(per_run, 3), "runs_per_second": round(1 / per_run, 3),
            "parameters_per_second": round(n / per_record),
            "wall_seconds_with_data_generation": round(wall, 1),
            "dump_bytes_apparent": apparent, "dump_bytes_allocated": allocated,
            "peak_rss_mib_before_recording": round(peak_before, 1),
            "peak_rss_mib_after_recording": round(peak_after, 1),
            "peak_rss_mib_added_by_recording": round(peak_after - peak_before, 1),
            "full_vector_mib": round(n * 4 / 2**20, 1),
            "analysis_seconds": round(analysis_seconds, 2),
            "analysis": "analyze(dump, estimators=['ksg'], metrics=['euclidean']): verify, 3 pairs, the whole "
                        "sketched vector",
            "distance_relative_error_max": round(float(errors.max()), 5),
            "distance_relative_error_rms": round(float(np.sqrt(np.mean(errors ** 2))), 5),
            "pairs_outside_jl_error_95": int((errors > sketch.error()).sum()), "pairs": int(errors.size),
        },
        "extrapolated_to_1000_runs": {
            "note": f"EXTRAPOLATED from the {args.runs} measured runs (per-run time and bytes x {EXTRAPOLATED_RUNS}), "
                    "not measured",
            "recording_seconds": round(per_run * EXTRAPOLATED_RUNS, 1),
            "sketched_dump_gb": round(sketch_bytes_per_run * EXTRAPOLATED_RUNS / 1e9, 3),
            "full_dump_gb": round(len(CLIENTS) * n * 4 * EXTRAPOLATED_RUNS / 1e9, 1),
        },
        "analysis_rows": rows,
        "load_average_before": [round(v, 2) for v in load],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "provenance": collect(started, finished=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("model", "sketch", "measured", "extrapolated_to_1000_runs")}, indent=1))


if __name__ == "__main__":
    main()
