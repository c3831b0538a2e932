"""Why the signal-rnn long preset's KSG levels moved: the analysis now standardises.

The long table made before per-coordinate standardisation was the analysis' KSG default
gave 9.09 -> 8.96 bits (iterations 2 -> 16); the rerun gives 8.94 -> 8.66. This script
estimates the KSG MI of each client pair at both iterations on the rerun's dump, with and
without standardisation (seed 0 for the tie-breaking noise, as the analysis):

    python experiments/signal_rnn.py --only long     # the dump, runs/signal_rnn_long
    python experiments/ksg_standardize_long.py       # about a minute

Writes figures/ksg_standardize_long/ksg_standardize_long.csv (pair, iteration, standardize, mi_bits).
"""

from __future__ import annotations

import argparse
from itertools import combinations
from pathlib import Path

import numpy as np
from _results import figures_of, WORK, write_csv

from mianalysis import ParameterDump, ksg_mi

FIGURES = figures_of(__file__)  # figures/ksg_standardize_long/: where this script writes


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump", default=str(WORK / "signal_rnn_long"))
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    dump = ParameterDump.open(args.dump)
    rows = []
    for a, b in combinations(("0", "1", "2"), 2):
        for it in (2, 16):
            x = np.asarray(dump.samples(a, iteration=it), dtype=np.float64)
            y = np.asarray(dump.samples(b, iteration=it), dtype=np.float64)
            for standardize in (False, True):
                mi = ksg_mi(x, y, standardize=standardize, random_state=0, units="bits")
                rows.append({"pair": f"{a}-{b}", "iteration": it, "standardize": standardize, "mi_bits": f"{mi:.4f}"})
                print(rows[-1], flush=True)
    write_csv(rows, Path(args.out) / "ksg_standardize_long.csv")


if __name__ == "__main__":
    main()
