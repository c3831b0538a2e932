"""Parameters that move in a handful of runs only, and the singular covariances they make.

The relative rule for near-constant parameters (`mianalysis.analysis.varying_columns`)
drops a column whose spread is float32 rounding at its magnitude. A parameter that keeps
one value in every run but a few (a unit that fires in one run of thousands) has a spread
above that rounding once the rare run is sampled, so it is kept; several such parameters
that move in the same runs span fewer dimensions than their number, and the client's
covariance is singular, which turns a Gaussian estimate into a Ledoit-Wolf shrinkage number
without a verdict. This script lists them in a dump: per client and checkpoint, the kept
columns whose values differ from their most common value in at most `--max-runs` runs, the
runs they move in, and the number of near-zero eigenvalues (below 1e-10 of the largest) of
the correlation matrix of the kept columns.

    python experiments/rare_movers.py DUMP [--max-runs 5] [--runs N] [--out CSV]

(--runs N: the first N runs only, to compare run counts of one dump.) Prints one line per
client and checkpoint; with --out, writes the rows as CSV with a sidecar (settings and
provenance).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _results import portable_record, write_csv, write_sidecar

from mianalysis import ParameterDump
from mianalysis.analysis import varying_columns
from mianalysis.provenance import collect, utc_now

# An eigenvalue of the correlation matrix below this share of the largest counts as zero.
RELATIVE_EIGENVALUE_FLOOR = 1e-10


def rare_movers(samples, max_runs):
    """The kept columns of `samples` (runs x parameters) that leave their most common value
    in at most `max_runs` runs, and the rank deficit of the kept columns.

    Returns
    -------
    movers : dict
        column index -> sorted run indices where it differs from its most common value.
    kept : int
        How many columns the relative rule keeps.
    deficit : int
        Eigenvalues of the kept columns' correlation matrix below
        RELATIVE_EIGENVALUE_FLOOR times the largest (0: the covariance is regular).
    """
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[0] < 2:
        raise ValueError(f"samples must be a 2-D array of at least 2 runs; got shape {samples.shape}")
    if not (isinstance(max_runs, (int, np.integer)) and max_runs >= 1):
        raise ValueError(f"max_runs must be an integer >= 1; got {max_runs!r}")
    keep = np.flatnonzero(varying_columns(samples))
    movers = {}
    for j in keep:
        values, counts = np.unique(samples[:, j], return_counts=True)
        off = np.flatnonzero(samples[:, j] != values[np.argmax(counts)])
        if len(off) <= max_runs:
            movers[int(j)] = [int(r) for r in off]
    if len(keep) < 2:
        return movers, len(keep), 0
    kept = samples[:, keep]
    eigenvalues = np.linalg.eigvalsh(np.corrcoef(kept, rowvar=False))
    deficit = int((eigenvalues < RELATIVE_EIGENVALUE_FLOOR * eigenvalues[-1]).sum())
    return movers, len(keep), deficit


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump")
    parser.add_argument("--max-runs", type=int, default=5)
    parser.add_argument("--runs", type=int, help="the first N runs only (default: all)")
    parser.add_argument("--out", help="a CSV file for the rows (with a .csv.json sidecar)")
    args = parser.parse_args(argv)
    started = utc_now()
    dump = ParameterDump.open(args.dump)
    n = args.runs or dump.n_runs
    if not 2 <= n <= dump.n_runs:
        parser.error(f"--runs must be between 2 and the dump's {dump.n_runs} runs; got {n}")
    rows = []
    for client in dump.clients:
        for iteration in dump.checkpoints:
            samples = np.asarray(dump.samples(client, iteration=iteration))[:n]
            movers, kept, deficit = rare_movers(samples, args.max_runs)
            runs = sorted({r for off in movers.values() for r in off})
            rows.append({"client": client, "iteration": iteration, "runs": n, "kept": kept,
                         "rank_deficit": deficit, "rare_movers": len(movers),
                         "columns": " ".join(map(str, movers)), "moved_in_runs": " ".join(map(str, runs))})
            print(f"client {client} iteration {iteration}: {kept} kept, rank deficit {deficit}, "
                  f"{len(movers)} moving in <= {args.max_runs} runs: columns {list(movers)} runs {runs}", flush=True)
    if args.out:
        table = write_csv(rows, args.out)
        write_sidecar(table, portable_record({"table": table.name, "dump": str(Path(args.dump).resolve()),
                                              "runs": n, "max_runs": args.max_runs,
                                              "relative_eigenvalue_floor": RELATIVE_EIGENVALUE_FLOOR,
                                              "provenance": collect(started, finished=True)}))
    return rows


if __name__ == "__main__":
    main()
