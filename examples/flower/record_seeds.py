"""Run the digits Flower app once per seed, in this process, into one dump of as many runs.

    python examples/flower/record_seeds.py --out flower_dump --runs 20
    mianalysis analyze flower_dump --out flower_mi.csv

Each run is the same Flower app (digits_app: ServerApp with mianalysis.flower.FedRule,
ClientApp training the 2NN on its partition) on a mianalysis.flower.LocalGrid: no
SuperLink, no simulation engine, no network. Run r uses seed ``--first-seed + r``; every
client's model after every round is recorded (client = partition id, checkpoint = round).
Interrupted, the same command resumes after the last completed run.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # digits_app, from any working folder

from digits_app.client_app import app as client_app  # noqa: E402
from digits_app.server_app import app as server_app  # noqa: E402
from digits_app.task import DEFAULT_CONFIG  # noqa: E402

from mianalysis.flower import record_runs  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="dump folder (new, or this recording to resume)")
    parser.add_argument("--runs", type=int, default=20, help="number of seeds, one run each")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=3, help="number of partitions (nodes)")
    for key, value in DEFAULT_CONFIG.items():
        if key != "seed":
            parser.add_argument(f"--{key}", type=type(value), default=value, dest=key.replace("-", "_"))
    parser.add_argument("--verbose", action="store_true", help="show Flower's log")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = {key: getattr(args, key.replace("-", "_")) for key in DEFAULT_CONFIG if key != "seed"}
    if not args.verbose:
        logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)  # the same bytes for any machine load (one CPU code path)
    seeds = range(args.first_seed, args.first_seed + args.runs)
    dump = record_runs(server_app, client_app, args.out, num_partitions=args.clients,
                       rounds=config["num-server-rounds"], seeds=seeds, run_config=config,
                       meta={"example": "examples/flower (digits)"})
    print(dump)
    return dump


if __name__ == "__main__":
    main()
