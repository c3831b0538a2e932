"""Public seams between the analysis and the estimators: ``analyze`` builds on
:class:`mianalysis.MarginalDistances` and :func:`mianalysis.mi_permutation_test`, and its
tables are the same as those written before the seam existed (``tests/data/seams_golden.csv``,
written by the analysis of commit 5ecd029): every text field equal, every number equal to
1e-12 relative (the last bits of a log-determinant or a distance depend on the CPU's
instruction set: the golden file was written on an AVX-512 machine)."""

import contextlib
import csv
import io
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import TYPED_COLUMNS
from mianalysis.analysis.table import INFERENCE_COLUMNS, columns_from_note, complete_row

GOLDEN = Path(__file__).parent / "data" / "seams_golden.csv"

# Each case: the analyze keywords; the cache cases take the path that analyze used to
# compute by itself (marginal distances, algorithm 1, the conversion to bits).
CASES = [
    {"estimators": ("gaussian", "ksg"), "n_permutations": 5, "distance_cache": True, "random_state": 1},
    {"estimators": ("ksg",), "metrics": (), "n_permutations": 0, "distance_cache": True, "random_state": 2},
    {"estimators": ("ksg",), "metrics": (), "n_permutations": {"ksg": 3}, "distance_cache": False, "standardize": False,
     "random_state": 3},
    {"estimators": ("ksg",), "metrics": (), "n_permutations": 2, "distance_cache": True, "standardize": False,
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


def golden_tables(path, settings=None):
    """The CSV text of every case, one after the other; `settings`, a list, gets each CSV
    line's table settings."""
    dump = golden_dump(path / "dump")
    text = ""
    for i, case in enumerate(CASES):
        table = analyze(dump, **case)
        table.write(path / f"{i}.csv")
        part = (path / f"{i}.csv").read_text()
        text += part
        if settings is not None:
            settings += [table.settings] * len(_fields(part))
    return text


def _fields(text):
    """The CSV fields of `text`, numbers as floats."""
    rows = []
    for line in csv.reader(io.StringIO(text)):
        row = []
        for field in line:
            try:
                row.append(float(field))
            except ValueError:
                row.append(field)
        rows.append(row)
    return rows


@contextlib.contextmanager
def bootstrap_level_intervals_set():
    """The Gaussian and copula estimates' level intervals from the sd of their bootstrap
    resamples, as when the golden tables were written (the registry's ``level_interval``
    None, which keeps the resamples for their changes too): the explicit setting that keeps
    the old method (tests/test_table.py uses it too)."""
    from dataclasses import replace

    from mianalysis.estimators.registry import get_estimator, register_estimator

    old = [get_estimator(e) for e in ("gaussian", "copula")]
    try:
        for entry in old:
            register_estimator(replace(entry, level_interval=None), replace=True)
        yield
    finally:
        for entry in old:
            register_estimator(entry, replace=True)


@pytest.fixture
def bootstrap_level_intervals():
    with bootstrap_level_intervals_set():
        yield


def test_only_the_gaussian_intervals_left_the_bootstrap(tmp_path):
    """With the default Wishart level interval and influence-value change interval (the
    golden dumps have at least 4 runs per joint dimension), the tables differ from the
    golden ones in the mi_gaussian and delta_mi_gaussian rows' ci_low and ci_high only:
    estimates, nulls, verdicts and every other row are the same."""
    got, want = _fields(golden_tables(tmp_path)), _fields(GOLDEN.read_text())
    header = want[0]
    changed = set()
    for row, golden in zip(got, want):
        for column, a, b in zip(header, row, golden):
            if a != b and not (isinstance(a, float) and isinstance(b, float)
                               and (np.isclose(a, b, rtol=1e-12, atol=0) or (np.isnan(a) and np.isnan(b)))):
                changed.add((golden[header.index("quantity")], column))
    assert changed == {(q, c) for q in ("mi_gaussian", "delta_mi_gaussian") for c in ("ci_low", "ci_high")}


def test_analysis_tables_are_unchanged(tmp_path, bootstrap_level_intervals):
    # The golden tables are of format version 1: the typed columns that follow its columns
    # are those its notes imply (mianalysis.analysis.table.columns_from_note).
    # The inference columns that follow are a change row's se and p-value, which a table of
    # format version 1 gets from its interval (complete_row), then the family-wise columns
    # (tests/test_familywise.py checks those).
    settings = []
    got, want = _fields(golden_tables(tmp_path, settings)), _fields(GOLDEN.read_text())
    added = list(TYPED_COLUMNS) + list(INFERENCE_COLUMNS)
    assert [len(r) for r in got] == [len(r) + len(added) for r in want]
    header = want[0]
    for i, (row, golden) in enumerate(zip(got, want)):
        if golden == header:
            assert row == golden + added
        else:
            p_value = golden[header.index("p_value")]
            typed = columns_from_note(golden[header.index("note")], p_value if isinstance(p_value, float) else np.nan)
            assert row[len(golden):len(golden) + len(TYPED_COLUMNS)] == [str(typed[c]) for c in TYPED_COLUMNS], \
                (i, row, golden)
            derived = complete_row({**dict(zip(header, golden)), **typed, "n_runs": int(golden[header.index("n_runs")])},
                                   level=settings[i]["ci_level"], ci_resamples=settings[i]["ci_resamples"])
            start = len(golden) + len(TYPED_COLUMNS)
            for column, value in zip(("change_se", "change_p"), row[start:start + 2]):
                want_value = derived[column]
                assert (value == "" and np.isnan(want_value)) or np.isclose(value, want_value, rtol=1e-9), \
                    (i, column, value, want_value)
        for a, b in zip(row, golden):
            if isinstance(b, float):
                assert isinstance(a, float) and (a == b or np.isclose(a, b, rtol=1e-12, atol=0)
                                                 or (np.isnan(a) and np.isnan(b))), (i, row, golden)
            else:
                assert a == b, (i, row, golden)


def samples_pair(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)) * [1e-3, 1.0, 50.0]
    return x, x[:, :2] + rng.standard_normal((n, 2))


def test_marginal_distances_are_ksg_mi_on_the_prepared_samples():
    from mianalysis import MarginalDistances, ksg_mi, mi_permutation_test
    from mianalysis.estimators import KSG_NOISE
    from mianalysis.estimators.ksg import add_tie_breaking_noise, standardize_columns

    x, y = samples_pair()
    dx = MarginalDistances.of(x, standardize=True, random_state=np.random.default_rng(1))
    dy = MarginalDistances.of(y, standardize=True, random_state=np.random.default_rng(2))
    # The same standardization and noise as ksg_mi (drawn from the given streams) ...
    nx = add_tie_breaking_noise(standardize_columns(x), KSG_NOISE, np.random.default_rng(1))
    ny = add_tie_breaking_noise(standardize_columns(y), KSG_NOISE, np.random.default_rng(2))
    for units in ("bits", "nats"):
        assert ksg_mi(dx, dy, k=4, units=units) == pytest.approx(ksg_mi(nx, ny, k=4, noise=0, units=units), abs=1e-13)
    # ... and the same shuffles as the permutation test of those samples with its own cache.
    got = mi_permutation_test(dx, dy, n_permutations=7, random_state=5, k=4, algorithm=2)
    want = mi_permutation_test(nx, ny, n_permutations=7, random_state=5, k=4, algorithm=2, noise=0,
                               distance_cache=True)
    np.testing.assert_allclose(got.null_distribution, want.null_distribution, rtol=0, atol=1e-13)
    assert (got.p_value, got.n_permutations) == (want.p_value, 7)
    assert dx.n_samples == 200 and dx.n_features == 3 and not dx.matrix.flags.writeable
    assert repr(dx) == "MarginalDistances(n_samples=200, n_features=3)"


def test_marginal_distances_of_a_constant_variable_give_zero():
    from mianalysis import MarginalDistances, ksg_mi, mi_permutation_test

    x, y = samples_pair()
    dc = MarginalDistances.of(np.full((200, 2), 4.0))
    dy = MarginalDistances.of(y)
    assert dc.n_features == 0 and not dc.matrix.any()
    assert ksg_mi(dc, dy) == 0.0
    res = mi_permutation_test(dy, dc, n_permutations=3, random_state=0)
    assert (res.estimate, res.p_value, list(res.null_distribution)) == (0.0, 1.0, [0.0, 0.0, 0.0])


def test_marginal_distances_bad_input():
    from mianalysis import MarginalDistances, ksg_mi, mi_permutation_test

    x, y = samples_pair()
    dx, dy = MarginalDistances.of(x), MarginalDistances.of(y)
    with pytest.raises(TypeError, match="`y` must be MarginalDistances like the other argument"):
        ksg_mi(dx, y)
    with pytest.raises(TypeError, match="`x` must be MarginalDistances like the other argument"):
        mi_permutation_test(x, dy, n_permutations=2)
    with pytest.raises(ValueError, match="`standardize` cannot be applied to MarginalDistances"):
        ksg_mi(dx, dy, standardize=True)
    with pytest.raises(ValueError, match="`backend`, `dtype` cannot be applied to MarginalDistances"):
        ksg_mi(dx, dy, dtype="float32", backend="torch")
    with pytest.raises(ValueError, match="`noise` cannot be applied to MarginalDistances"):
        mi_permutation_test(dx, dy, n_permutations=2, noise=0.0)
    with pytest.raises(ValueError, match="MarginalDistances serve estimator='ksg' only"):
        mi_permutation_test(dx, dy, estimator="gaussian", n_permutations=2)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['shrinkage'\\]"):
        mi_permutation_test(dx, dy, n_permutations=2, shrinkage="ledoit-wolf")
    with pytest.raises(ValueError, match="same number of samples; got 200 and 100"):
        ksg_mi(dx, MarginalDistances.of(y[:100]))
    with pytest.raises(ValueError, match="`k` must be"):
        ksg_mi(dx, dy, k=200)
    with pytest.raises(ValueError, match="`distance_cache` must be 'auto', True or False"):
        ksg_mi(dx, dy, distance_cache="yes")
    with pytest.raises(ValueError, match="`samples` reach beyond 2\\^1000"):
        MarginalDistances.of(x * 1e300)
    with pytest.raises(ValueError, match="`samples` contains non-finite values"):
        MarginalDistances.of([0.0, np.nan, 1.0])
    with pytest.raises(ValueError, match="`samples` need at least 2 samples"):
        MarginalDistances.of([[1.0, 2.0]])
    with pytest.raises(ValueError, match="`standardize` must be True or False"):
        MarginalDistances.of(x, standardize="yes")
    with pytest.raises(ValueError, match="`matrix` must be a square float64 array"):
        MarginalDistances(np.zeros((3, 2)), 1)
    with pytest.raises(ValueError, match="`n_features` must be >= 0; got -1"):
        MarginalDistances(np.zeros((3, 3)), -1)


def test_cache_fits_is_the_distance_cache_rule(monkeypatch):
    from mianalysis import MarginalDistances
    from mianalysis._internal import memory as _memory

    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 2 * 3 * 100 * 100 * 8)
    assert MarginalDistances.cache_fits(100, count=3)
    assert not MarginalDistances.cache_fits(101, count=3)
    assert MarginalDistances.cache_fits(10**6, distance_cache=True)
    assert not MarginalDistances.cache_fits(2, distance_cache=False)
    with pytest.raises(ValueError, match="`distance_cache` must be 'auto', True or False"):
        MarginalDistances.cache_fits(2, distance_cache="always")
    with pytest.raises(TypeError, match="`n_samples` must be an integer"):
        MarginalDistances.cache_fits(2.5)


def test_chunks_digest_fingerprints_the_completed_chunks(tmp_path):
    a = golden_dump(tmp_path / "a")
    b = golden_dump(tmp_path / "b")
    assert a.chunks_digest() == b.chunks_digest() == ParameterDump.open(tmp_path / "a").chunks_digest()
    other = ParameterDump.from_arrays(tmp_path / "c", {"0": np.zeros((2, 60, 5)), "1": np.ones((2, 60, 5))})
    assert len(other.chunks_digest()) == 16 and other.chunks_digest() != a.chunks_digest()


def test_one_ksg_noise_default():
    import inspect

    from mianalysis import MarginalDistances, ksg_mi
    from mianalysis.analysis import compute
    from mianalysis.estimators import KSG_NOISE
    from mianalysis.estimators import ksg, significance

    assert KSG_NOISE == 1e-10
    assert inspect.signature(ksg_mi).parameters["noise"].default is KSG_NOISE
    assert inspect.signature(MarginalDistances.of).parameters["noise"].default is KSG_NOISE
    assert compute.KSG_NOISE is significance.KSG_NOISE is ksg.KSG_NOISE
    for module in (compute, significance):
        assert "1e-10" not in inspect.getsource(module)
