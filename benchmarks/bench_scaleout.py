"""Scale-out on Dask: sampling and analysis of signal-rnn (paper preset) in one local process
versus 1 and 2 Dask workers on this machine, and a projection to 100 workers.

    python benchmarks/bench_scaleout.py [--runs 512] [--chunk-size 64]
        [--network-mb-per-s 125] [--disk-mb-per-s 500] [--model-b-seconds-per-run 0.05]

Measured (one run of each, on whatever else the machine is doing: the machine's load is
recorded):

- sampling `--runs` runs into a dump: here (one process, PyTorch's default threads), on
  `local:1` and on `local:2` (one thread per worker); the dumps are checked to be the same
  bytes. Per chunk: the compute time on the worker (Dask's task stream), the wall time per
  chunk and the overhead (worker time not spent computing, per chunk), and the bytes moved
  (the pickled job once per worker, each chunk's run range out, the pickled ChunkResult
  back);
- analysing that dump (gaussian + ksg, default intervals) here and on 1 and 2 workers, one
  task per checkpoint; the tables are checked to be equal;
- the single writer: seconds per chunk for `ParameterDump.write_chunk` (write, fsync,
  SHA-256, manifest rewrite) at the start and after 300 chunks, and SHA-256 throughput.

Projection (computed here from the measured numbers and the stated bandwidths) to 100
workers for (a) signal-rnn, 3 clients x 22,000 runs, and (b) a 100,000-parameter model,
3 clients x 100,000 runs, 3 checkpoints: compute wall time, the writer's time, the
network's time into the one writer, which of them bounds the wall time, and the analysis
(one task per checkpoint: at most n_checkpoints workers busy).

Writes benchmarks/results/scaleout.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

LEGACY = ("gaussian", "ksg")  # the estimators of the committed results (analyze's default before "auto")

OUT = Path(__file__).parent / "results" / "scaleout.json"


def _files(path):
    return {p.name: p.read_bytes() for p in sorted(Path(path).glob("*.f32"))}


def _same_rows(a, b):
    def key(rows):
        return [{k: v for k, v in r.items() if v == v} for r in rows]

    return len(a) == len(b) and key(a) == key(b)


def _compute_seconds(stream, prefix):
    """Seconds each task named `prefix`-* computed on its worker, from a Dask task stream
    (not the task that ships the job itself, `prefix`-*-function)."""
    out = []
    for record in stream.data:
        key = str(record.get("key", ""))
        if not key.startswith(prefix) or key.endswith("-function"):
            continue
        out.append(sum(s["stop"] - s["start"] for s in record["startstops"] if s["action"] == "compute"))
    return out


def sample_here(task, runs, chunk, folder):
    from mianalysis.sampling import ParameterSampler

    start = time.perf_counter()
    ParameterSampler(task, chunk_size=chunk, progress=False).sample(runs, folder)
    return time.perf_counter() - start


def sample_on(workers, task, runs, chunk, folder):
    from distributed import get_task_stream

    from mianalysis.sampling import ChunkJob, ParameterSampler
    from mianalysis.scaleout import connect

    started = time.perf_counter()
    with connect(f"local:{workers}") as client:
        connected = time.perf_counter() - started
        sampler = ParameterSampler(task, chunk_size=chunk, progress=False)
        client.run(lambda: __import__("torch") and None)  # PyTorch imported on every worker before the clock
        with get_task_stream(client) as stream:
            start = time.perf_counter()
            sampler.sample(runs, folder, client=client)
            wall = time.perf_counter() - start
    compute = _compute_seconds(stream, "sample-chunk")
    job = ChunkJob(task, seed=0, init="per-run", every=1, chunk_size=chunk, shared=())
    return {"workers": workers, "cluster_start_s": round(connected, 2), "wall_s": round(wall, 2),
            "chunks": len(compute), "compute_s_per_chunk": round(float(np.mean(compute)), 4),
            "wall_s_per_chunk": round(wall / len(compute), 4),
            # worker time not spent computing, per chunk: scheduling, (de)serialising, waiting on the writer
            "overhead_s_per_chunk": round((wall * workers - sum(compute)) / len(compute), 4),
            # the job (task + settings) reaches each worker once; each chunk's task carries its run range
            "job_bytes_once_per_worker": len(pickle.dumps(job)), "task_bytes_out": len(pickle.dumps((0, chunk)))}


def analyze_here(dump):
    from mianalysis import analyze

    start = time.perf_counter()
    rows = analyze(dump, estimators=LEGACY)
    return time.perf_counter() - start, rows


def analyze_on(workers, dump):
    from distributed import get_task_stream

    from mianalysis import analyze
    from mianalysis.scaleout import connect

    with connect(f"local:{workers}") as client:
        with get_task_stream(client) as stream:
            start = time.perf_counter()
            rows = analyze(dump, estimators=LEGACY, client=client)
            wall = time.perf_counter() - start
    compute = _compute_seconds(stream, "analyze-checkpoint")
    return {"workers": workers, "wall_s": round(wall, 2), "tasks": len(compute),
            "compute_s_per_checkpoint": round(float(np.mean(compute)), 3)}, rows


def writer_costs(n_params, n_checkpoints, chunk, folder, n_chunks=300):
    """Seconds per write_chunk of a chunk of `chunk` runs (3 clients), for the first chunks
    and after `n_chunks` (the manifest lists every chunk and is rewritten each time)."""
    from mianalysis.dumps import ParameterDump, layout_from_shapes

    clients = ["0", "1", "2"]
    dump = ParameterDump.create(folder, clients=clients, checkpoints=list(range(n_checkpoints)),
                                n_runs=chunk * n_chunks, layout=layout_from_shapes([("w", (n_params,))]),
                                metric_names=["loss"])
    block = {c: np.zeros((n_checkpoints, chunk, n_params), np.float32) for c in clients}
    metrics = {c: np.zeros((1, n_checkpoints, chunk), np.float32) for c in clients}
    times = []
    for i in range(n_chunks):
        start = time.perf_counter()
        dump.write_chunk(i * chunk, (i + 1) * chunk, block, metrics)
        times.append(time.perf_counter() - start)
    manifest_bytes = (Path(folder) / "manifest.json").stat().st_size
    return {"chunk_bytes": 3 * n_checkpoints * chunk * (n_params + 1) * 4,
            "first_10_s_per_chunk": round(float(np.mean(times[:10])), 5),
            "last_10_s_per_chunk": round(float(np.mean(times[-10:])), 5),
            "manifest_bytes_after": manifest_bytes, "manifest_bytes_per_chunk": round(manifest_bytes / n_chunks, 1)}


def sha256_mb_per_s():
    data = np.random.default_rng(0).bytes(64 * 2**20)
    start = time.perf_counter()
    hashlib.sha256(data).hexdigest()
    return 64 / (time.perf_counter() - start)


def project(name, *, clients, runs, n_params, n_checkpoints, chunk, seconds_per_chunk, workers, network, disk,
            sha_mb_s, writer_fixed_s, manifest_bytes_per_chunk, analysis_s_per_checkpoint, task_bytes):
    """Wall time of sampling at `workers` workers: the largest of compute (in waves of
    `workers` chunks), the network into the one writer and the writer itself (disk write,
    SHA-256 of the chunk read back, fsync and manifest rewrite, the manifest growing by
    `manifest_bytes_per_chunk` per chunk)."""
    n_chunks = math.ceil(runs / chunk)
    chunk_mb = clients * n_checkpoints * chunk * (n_params + 1) * 4 / 1e6
    data_gb = n_chunks * chunk_mb / 1e3
    compute = math.ceil(n_chunks / workers) * seconds_per_chunk
    network_s = n_chunks * (chunk_mb + task_bytes / 1e6) / network
    manifest_mb_total = manifest_bytes_per_chunk * n_chunks * (n_chunks + 1) / 2 / 1e6  # rewritten every chunk
    writer = n_chunks * (chunk_mb / disk + chunk_mb / sha_mb_s + writer_fixed_s) + manifest_mb_total / disk
    bounds = {"compute": compute, "network": network_s, "writer": writer}
    bound = max(bounds, key=bounds.get)
    return {"case": name, "clients": clients, "runs": runs, "parameters": n_params, "checkpoints": n_checkpoints,
            "chunk_size": chunk, "chunks": n_chunks, "data_gb": round(data_gb, 2), "workers": workers,
            "seconds_per_chunk_assumed": round(seconds_per_chunk, 3),
            "sampling_compute_s": round(compute, 1), "network_s": round(network_s, 1),
            "writer_s": round(writer, 1), "manifest_mb_rewritten": round(manifest_mb_total, 1),
            "sampling_wall_s": round(max(bounds.values()), 1), "bound": bound,
            "single_worker_compute_s": round(n_chunks * seconds_per_chunk, 1),
            "analysis_s_per_checkpoint": round(analysis_s_per_checkpoint, 1),
            "analysis_wall_s": round(analysis_s_per_checkpoint * math.ceil(n_checkpoints / workers), 1),
            "analysis_workers_busy": min(workers, n_checkpoints)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=512)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--network-mb-per-s", type=float, default=125.0, help="into the writer (1 Gbit/s)")
    parser.add_argument("--disk-mb-per-s", type=float, default=500.0, help="the writer's disk")
    parser.add_argument("--model-b-seconds-per-run", type=float, default=0.05,
                        help="compute per run (3 clients, one epoch) of the 100,000-parameter model, one thread")
    args = parser.parse_args()

    import torch

    from mianalysis.dumps import ParameterDump
    from mianalysis.sampling import ChunkResult
    from mianalysis.tasks import get_task

    task = get_task("signal-rnn", "paper")
    record = {"machine": {"cpu_count": os.cpu_count(), "load_average_1_5_15_at_start": os.getloadavg(),
                          "torch_threads_here": torch.get_num_threads(), "torch": torch.__version__},
              "task": "signal-rnn", "preset": "paper", "runs": args.runs, "chunk_size": args.chunk_size,
              "parameters": sum(math.prod(s) for _, s in task.parameter_shapes()), "clients": task.n_clients}
    tmp = Path(tempfile.mkdtemp())
    try:
        here = sample_here(task, args.runs, args.chunk_size, tmp / "here")
        sampling = [{"workers": 0, "where": "one local process", "wall_s": round(here, 2)}]
        for workers in (1, 2):
            row = sample_on(workers, task, args.runs, args.chunk_size, tmp / f"dask{workers}")
            row["same_bytes_as_local"] = _files(tmp / f"dask{workers}") == _files(tmp / "here")
            row["speedup_vs_local"] = round(here / row["wall_s"], 2)
            sampling.append(row)
            print(row, flush=True)
        dump = ParameterDump.open(tmp / "here")
        shape = (task.n_clients, len(dump.checkpoints), args.chunk_size)
        result = ChunkResult(np.zeros(shape + (dump.n_params,), np.float32),
                             np.zeros((task.n_clients, len(dump.metric_names)) + shape[1:], np.float32))
        for row in sampling[1:]:
            row["result_bytes_back_per_chunk"] = len(pickle.dumps(result))  # what a worker sends the writer
        record["sampling"] = sampling
        record["checkpoints"] = len(dump.checkpoints)

        seconds, rows = analyze_here(dump)
        analysis = [{"workers": 0, "where": "one local process", "wall_s": round(seconds, 2)}]
        for workers in (1, 2):
            row, dask_rows = analyze_on(workers, dump)
            row["same_table_as_local"] = _same_rows(rows, dask_rows)
            row["speedup_vs_local"] = round(seconds / row["wall_s"], 2)
            analysis.append(row)
            print(row, flush=True)
        record["analysis"] = analysis

        writer = writer_costs(dump.n_params, len(dump.checkpoints), args.chunk_size, tmp / "writer")
        writer["sha256_mb_per_s"] = round(sha256_mb_per_s(), 1)
        record["writer"] = writer
        print(writer, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    one = record["sampling"][1]
    fixed = max(0.0, writer["first_10_s_per_chunk"] - writer["chunk_bytes"] / 1e6 * (
        1 / args.disk_mb_per_s + 1 / writer["sha256_mb_per_s"]))
    per_run = one["compute_s_per_chunk"] / args.chunk_size
    analysis_1 = record["analysis"][1]["compute_s_per_checkpoint"]
    assumptions = {"network_mb_per_s": args.network_mb_per_s, "disk_mb_per_s": args.disk_mb_per_s,
                   "sha256_mb_per_s": writer["sha256_mb_per_s"], "writer_fixed_s_per_chunk": round(fixed, 5),
                   "manifest_bytes_per_chunk": writer["manifest_bytes_per_chunk"],
                   "signal_rnn_seconds_per_run": round(per_run, 5),
                   "model_b_seconds_per_run": args.model_b_seconds_per_run,
                   "analysis_scaling": "KSG and the distance matrices grow as runs^2: the measured seconds per "
                                       "checkpoint times (runs / measured runs)^2",
                   "workers_per_node": 1}
    common = {"workers": 100, "network": args.network_mb_per_s, "disk": args.disk_mb_per_s,
              "sha_mb_s": writer["sha256_mb_per_s"], "writer_fixed_s": fixed,
              "manifest_bytes_per_chunk": writer["manifest_bytes_per_chunk"], "task_bytes": one["task_bytes_out"]}
    scale = lambda runs: analysis_1 * (runs / args.runs) ** 2  # noqa: E731
    record["projection_100_workers"] = {
        "assumptions": assumptions,
        "cases": [
            project("signal-rnn 3 x 22,000 runs", clients=3, runs=22000, n_params=record["parameters"],
                    n_checkpoints=record["checkpoints"], chunk=args.chunk_size,
                    seconds_per_chunk=per_run * args.chunk_size, analysis_s_per_checkpoint=scale(22000), **common),
            project("100,000-parameter model, 3 x 100,000 runs", clients=3, runs=100000, n_params=100000,
                    n_checkpoints=3, chunk=args.chunk_size,
                    seconds_per_chunk=args.model_b_seconds_per_run * args.chunk_size,
                    analysis_s_per_checkpoint=scale(100000), **common),
        ]}
    record["projection_100_workers"]["cases"][1]["analysis_note"] = (
        "a lower bound from signal-rnn's cost per checkpoint scaled by runs^2 only: KSG's distance pass also "
        "grows with the dimension (n^2 d), the Gaussian estimate's joint covariance is (2 x 100,000)^2 float64 "
        "= 320 GB, and each client's KSG distance matrix 100,000^2 float64 = 80 GB (no distance cache)")
    for case in record["projection_100_workers"]["cases"]:
        print(case, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = OUT.with_name(OUT.name + ".tmp")
    tmp_out.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp_out, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
