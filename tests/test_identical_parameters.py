"""A parameter that both clients hold at the same value in every run (a shared start it never
left, e.g. a weight fed by an input that is always 0) makes the MI infinite: the row says so,
exactly, instead of falling back from a singular covariance to a bound."""

import numpy as np

from mianalysis import ParameterDump, analyze
from mianalysis.analysis.inference.familywise import exact_by_rule


def test_a_shared_unmoved_parameter_makes_the_row_infinite_and_exact(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 100, 4))
    b = rng.standard_normal((2, 100, 4))
    b[1, :, 2] = a[1, :, 2]  # checkpoint 1: parameter 2 identical in both clients, varying over runs
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": a, "b": b}, checkpoints=[0, 1])
    rows = [r for r in analyze(dump, metrics=[], ci_resamples=0, n_permutations=9) if r["quantity"] == "mi_copula"]
    independent, shared = rows
    assert np.isfinite(independent["value"]) and "identical" not in independent["note"]
    assert shared["value"] == np.inf and "; 1 parameters identical in both clients in every run" in shared["note"]
    assert exact_by_rule(shared) == "parameters identical in both clients: MI infinite"
    assert not shared["outside_calibration"]
