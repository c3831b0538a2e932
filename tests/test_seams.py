"""Public seams between the analysis and the estimators: ``analyze`` builds on
:class:`mianalysis.MarginalDistances` and :func:`mianalysis.mi_permutation_test`, and its
tables are the same, byte for byte, as those written before the seam existed
(``tests/data/seams_golden.csv``, written by the analysis of commit 5ecd029)."""

from pathlib import Path

import numpy as np

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import write_table

GOLDEN = Path(__file__).parent / "data" / "seams_golden.csv"

# Each case: the analyze keywords; the cache cases take the path that analyze used to
# compute by itself (marginal distances, algorithm 1, the conversion to bits).
CASES = [
    {"permutations": 5, "distance_cache": True, "random_state": 1},
    {"estimators": ("ksg",), "metrics": (), "permutations": 0, "distance_cache": True, "random_state": 2},
    {"estimators": ("ksg",), "metrics": (), "permutations": {"ksg": 3}, "distance_cache": False, "standardize": False,
     "random_state": 3},
    {"estimators": ("ksg",), "metrics": (), "permutations": 2, "distance_cache": True, "standardize": False,
     "by": "layer", "random_state": 4},
]


def golden_dump(path):
    """Three clients, two checkpoints, 60 runs of 5 parameters on scales from 1e-3 to 10
    (one constant); clients 1 and 2 depend on client 0."""
    rng = np.random.default_rng(7)
    scale = np.array([1e-3, 1.0, 10.0, 0.0, 0.5])
    base = rng.standard_normal((2, 60, 5))
    clients = {"0": base}
    for c, rho in (("1", 0.6), ("2", 0.2)):
        clients[c] = rho * base + np.sqrt(1 - rho**2) * rng.standard_normal((2, 60, 5))
    samples = {c: (a * scale + np.where(scale == 0, 3.0, 0.0)).astype(np.float32) for c, a in clients.items()}
    return ParameterDump.from_arrays(path, samples, layout=[("w", (3,)), ("b", (2,))])


def golden_tables(path):
    """The CSV text of every case, one after the other."""
    dump = golden_dump(path / "dump")
    text = ""
    for i, case in enumerate(CASES):
        write_table(analyze(dump, **case), path / f"{i}.csv")
        text += (path / f"{i}.csv").read_text()
    return text


def test_analysis_tables_are_unchanged(tmp_path):
    assert golden_tables(tmp_path) == GOLDEN.read_text()
