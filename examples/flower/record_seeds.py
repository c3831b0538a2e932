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
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # digits_app, from any working folder

from digits_app.task import DEFAULT_CONFIG  # noqa: E402

from mianalysis.federated import rule_names  # noqa: E402
from mianalysis.federated.partition import PARTITIONS  # noqa: E402


def _number(kind, *, low, high=None, low_open=False, high_open=False):
    """An argparse type: a finite `kind` (int or float) in the interval, else argparse's error."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value) or value < low or (low_open and value == low) or (
                high is not None and (value > high or (high_open and value == high))):
            lo, hi = "(" if low_open else "[", ")" if high_open else "]"
            where = f"in {lo}{low}, {high}{hi}" if high is not None else f"{'>' if low_open else '>='} {low}"
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a finite number'} {where}; "
                                             f"got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


# How each run-config entry is read from the command line (the defaults are DEFAULT_CONFIG's).
CONFIG_ARGUMENTS = {
    "num-server-rounds": {"type": _number(int, low=1)},
    "rule": {"choices": sorted(rule_names())},
    "threshold": {"type": _number(float, low=0, high=1)},
    "beta": {"type": _number(float, low=0, high=0.5, high_open=True)},
    "local-epochs": {"type": _number(int, low=1)},
    "batch-size": {"type": _number(int, low=1)},
    "lr": {"type": _number(float, low=0, low_open=True)},
    "hidden": {"type": _number(int, low=1)},
    "partition": {"choices": PARTITIONS},
    "data-seed": {"type": _number(int, low=0)},
    "fraction-evaluate": {"type": _number(float, low=0, high=1)},
}


def parse_args(argv=None):
    """The command line, checked before Flower is imported: a bad value is argparse's one-line error."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="dump folder (new, or this recording to resume)")
    parser.add_argument("--runs", type=_number(int, low=1), default=20, help="number of seeds, one run each")
    parser.add_argument("--first-seed", type=_number(int, low=0), default=0)
    parser.add_argument("--clients", type=_number(int, low=1), default=3, help="number of partitions (nodes)")
    for key, value in DEFAULT_CONFIG.items():
        if key != "seed":
            parser.add_argument(f"--{key}", default=value, dest=key.replace("-", "_"), **CONFIG_ARGUMENTS[key])
    parser.add_argument("--verbose", action="store_true", help="show Flower's log")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import torch
    from digits_app.client_app import app as client_app
    from digits_app.server_app import app as server_app

    from mianalysis.flower import record_runs

    config = {key: getattr(args, key.replace("-", "_")) for key in DEFAULT_CONFIG if key != "seed"}
    torch.set_num_threads(1)  # the same bytes for any machine load (one CPU code path)
    seeds = range(args.first_seed, args.first_seed + args.runs)
    dump = record_runs(server_app, client_app, args.out, num_partitions=args.clients,
                       rounds=config["num-server-rounds"], seeds=seeds, run_config=config,
                       meta={"example": "examples/flower (digits)"}, verbose=args.verbose)
    print(dump)
    return dump


if __name__ == "__main__":
    main()
