"""Cost of running a Flower app through mianalysis.flower, in this process.

    python benchmarks/bench_flower.py [--runs 5]

Two measurements, on one PyTorch thread:

1. The overhead of one round of FedRule on a LocalGrid (message copies, Flower's array
   serialisation, flattening, the rule) with 3 clients that train nothing (each adds a
   fixed update), for models of 3,466 (the digits example), 100,000 and 1,000,000 float32
   parameters; with and without a RecordingGrid around the grid (recorded: the run's 3 x 6
   records go through ParameterDump.writer into a dump in a temporary folder, written
   when the last one comes). Best of 3 runs of 5 rounds.
2. The digits example (examples/flower, default settings: 3 clients, 5 rounds) recorded
   for `--runs` seeds with record_runs: seconds per run, and the share of it spent in the
   clients' training (the ClientApp calls).

Writes benchmarks/results/flower.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from mianalysis import DumpWriter, ParameterDump
from mianalysis.flower import FedRule, LocalGrid, RecordingGrid, RunRecorder, record_runs

OUT = Path(__file__).parent / "results" / "flower.json"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flower"
ROUNDS = 5


def fixed_update_app(n_params):
    updates = np.random.default_rng(0).standard_normal((3, n_params)).astype(np.float32)
    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy() + updates[p]
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                                   "metrics": MetricRecord({"num-examples": p + 1})}), reply_to=msg)

    return app


def round_seconds(n_params, rule, record):
    app, start = fixed_update_app(n_params), ArrayRecord({"w": Array(np.zeros(n_params, np.float32))})
    times = []
    for _ in range(3):
        with tempfile.TemporaryDirectory(prefix="mianalysis-flower-") as tmp, ExitStack() as stack:
            local = stack.enter_context(LocalGrid(app, 3))
            t = time.perf_counter()
            if record:  # the run is written when its last record comes: inside the timing
                writer = stack.enter_context(DumpWriter(
                    Path(tmp) / "dump", clients=range(3), checkpoints=range(ROUNDS + 1), runs=1, chunk_size=1))
                grid = RecordingGrid(local, RunRecorder(writer, 0))
            else:
                grid = local
            FedRule(rule, fraction_evaluate=0.0).start(grid, start, num_rounds=ROUNDS)
            times.append((time.perf_counter() - t) / ROUNDS)
    return min(times)


def example_runs(runs):
    sys.path.insert(0, str(EXAMPLE))
    from digits_app.client_app import app as client_app
    from digits_app.server_app import app as server_app
    from digits_app.task import DEFAULT_CONFIG

    in_clients = [0.0]
    timed = ClientApp()

    @timed.train()
    def train(msg, context):
        t = time.perf_counter()
        reply = client_app(msg, context)
        in_clients[0] += time.perf_counter() - t
        return reply

    @timed.evaluate()
    def evaluate(msg, context):
        t = time.perf_counter()
        reply = client_app(msg, context)
        in_clients[0] += time.perf_counter() - t
        return reply

    with tempfile.TemporaryDirectory(prefix="mianalysis-flower-") as tmp:
        t = time.perf_counter()
        record_runs(server_app, timed, Path(tmp) / "dump", num_partitions=3, rounds=DEFAULT_CONFIG["num-server-rounds"],
                    seeds=range(runs), run_config=dict(DEFAULT_CONFIG))
        total = time.perf_counter() - t
    return {"runs": runs, "seconds_per_run": total / runs, "client_share": in_clients[0] / total}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    results = {"rounds": ROUNDS, "clients": 3, "round_overhead": []}
    for n_params in (3466, 100_000, 1_000_000):
        for rule in ("fedavg", "and_mask", "median"):
            row = {"params": n_params, "rule": rule,
                   "seconds_per_round": round_seconds(n_params, rule, record=False),
                   "seconds_per_round_recorded": round_seconds(n_params, rule, record=True)}
            results["round_overhead"].append(row)
            print(row, flush=True)
    results["example"] = example_runs(args.runs)
    print(results["example"])
    results["machine"] = {"cpu_count": os.cpu_count(), "torch_threads": 1}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
