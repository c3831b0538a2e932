"""Runs stored twice (mianalysis/estimators/repeats.py): identical paired rows (x_i, y_i) ==
(x_j, y_j) are counted by one shared check, which the copula, the bound, KSG and every
permutation test call before any estimate: copies of runs that some feature tells apart
are refused naming how many; runs that coincide on a lattice (no feature tells the distinct
runs apart) get a RepeatedRunsWarning (a UserWarning). Values repeated within a column
(atoms) are not repeated runs.

Issue 50: on independent clients stored twice (x = vstack([x0, x0]), y likewise) the copula
permutation test gave p <= 0.05 in 6 of 10 pairs and the bound 1.27 bits, with no warning."""

import warnings

import numpy as np
import pytest

from mianalysis import gaussian_copula_mi, gaussian_mi, ksg_mi, mi_permutation_test, projection_mi_bound
from mianalysis.cli import main
from mianalysis.estimators.bound import projection_bound
from mianalysis.estimators.significance import gaussian_permutation_test

N0 = 100


def stored_twice(seed=0, d=5):
    """Independent x0, y0 of N0 runs, every run stored twice: 2 N0 rows, N0 of them repeats."""
    rng = np.random.default_rng(seed)
    x0, y0 = rng.standard_normal((2, N0, d))
    return np.vstack([x0, x0]), np.vstack([y0, y0])


MESSAGE = (rf"^{N0} of the {2 * N0} runs repeat an earlier run \(identical rows of x and y alike\): {{}} assumes "
           r"independent runs, and a run stored twice makes its copies look dependent; drop the repeated runs "
           r"\(keep one row of each, in x and y alike\)")


# ------------------------------------------------------------------ the count
def test_repeated_runs_counts_whole_paired_rows_only():
    from mianalysis.estimators.repeats import repeated_runs

    rng = np.random.default_rng(1)
    x0, y0 = rng.standard_normal((2, 50, 3))
    assert repeated_runs(x0, y0) == 0
    assert repeated_runs(np.vstack([x0, x0]), np.vstack([y0, y0])) == 50
    assert repeated_runs(np.vstack([x0, x0, x0]), np.vstack([y0, y0, y0])) == 100  # each run 3 times: 2 copies
    assert repeated_runs(np.vstack([x0, x0[:7]]), np.vstack([y0, y0[:7]])) == 7
    # x repeated with other y rows, or y with other x rows: not a stored run
    assert repeated_runs(np.vstack([x0, x0]), np.vstack([y0, y0[::-1]])) == 0
    assert repeated_runs(np.vstack([x0, x0]), rng.standard_normal((100, 3))) == 0
    # -0.0 and 0.0 are one value; x alone
    z = np.zeros((3, 2))
    z[1, 0] = -0.0
    assert repeated_runs(z, np.array([[1.0], [1.0], [2.0]])) == 1
    assert repeated_runs(np.vstack([x0, x0])) == 50


def test_atoms_within_columns_are_not_repeated_runs():
    """Exact repeats within a column (a parameter exactly 0 in half the runs, integer and
    binary features) are data: no run repeats, and every estimator runs silently."""
    from mianalysis.estimators.repeats import repeated_runs

    rng = np.random.default_rng(2)
    n = 300
    x = np.column_stack([np.where(rng.random(n) < 0.5, 0.0, rng.standard_normal(n)), rng.integers(0, 3, n),
                         np.repeat([0.0, 1.0], [150, 150]), rng.standard_normal(n)])
    y = np.column_stack([0.5 * x[:, 3] + rng.standard_normal(n), rng.integers(0, 2, n)])
    assert repeated_runs(x, y) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gaussian_copula_mi(x, y)
        projection_mi_bound(x, y)
        mi_permutation_test(x, y, estimator="copula", n_permutations=5, random_state=0)
        mi_permutation_test(x, y, estimator="bound", n_permutations=3, random_state=0)


def test_a_brute_force_count_on_discrete_data_and_forced_hash_collisions(monkeypatch):
    from mianalysis.estimators import repeats

    rng = np.random.default_rng(3)

    def brute(x, y):
        return x.shape[0] - np.unique(np.hstack([x, y]) + 0.0, axis=0).shape[0]

    cases = []
    for _ in range(60):  # few distinct values: many repeated rows, and rows repeated within one side only
        n, dx, dy = int(rng.integers(2, 40)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        cases.append((rng.integers(0, 2, (n, dx)).astype(float), rng.integers(0, 3, (n, dy)).astype(float)))
    for x, y in cases:
        assert repeats.repeated_runs(x, y) == brute(x, y)
    monkeypatch.setattr(repeats, "_weights", lambda d: np.zeros(d, dtype=np.uint64))  # every key collides
    for x, y in cases:
        assert repeats.repeated_runs(x, y) == brute(x, y)


def test_continuous_data_read_only_the_sampled_columns(monkeypatch):
    """The check is cheap: distinct continuous runs differ in the 16 sampled columns of
    each side, so no full row is hashed (26,400 x 1,700 per side then costs ~0.03 s)."""
    from mianalysis.estimators import repeats

    calls = []
    original = repeats._row_keys

    def spy(a, rows=None, columns=None):
        calls.append(a.shape[1] if columns is None else columns.size)
        return original(a, rows, columns)

    monkeypatch.setattr(repeats, "_row_keys", spy)
    rng = np.random.default_rng(4)
    assert repeats.repeated_runs(rng.standard_normal((500, 300)), rng.standard_normal((500, 200))) == 0
    assert calls == [16, 16]


# ------------------------------------------------------------------ every estimator
@pytest.mark.parametrize("name, call", [
    ("the Gaussian copula estimate", lambda x, y: gaussian_copula_mi(x, y)),
    ("the projection bound", lambda x, y: projection_mi_bound(x, y)),
    ("the projection bound", lambda x, y: projection_bound(x, y, copula=True)),
    ("the permutation test of estimator='gaussian'",
     lambda x, y: mi_permutation_test(x, y, estimator="gaussian", n_permutations=9, random_state=0)),
    ("the permutation test of estimator='copula'",
     lambda x, y: mi_permutation_test(x, y, estimator="copula", n_permutations=9, random_state=0)),
    ("the permutation test of estimator='bound'",
     lambda x, y: mi_permutation_test(x, y, estimator="bound", n_permutations=9, random_state=0)),
    ("the permutation test of estimator='gaussian'",
     lambda x, y: gaussian_permutation_test(x, y, gaussian_mi(x, y), n_permutations=9, random_state=0)),
    ("the permutation test of estimator='copula'",
     lambda x, y: gaussian_permutation_test(x, y, 0.0, n_permutations=9, random_state=0, estimator="copula")),
    ("the KSG estimate", lambda x, y: ksg_mi(x, y, random_state=0)),
    ("the permutation test of estimator='ksg'",
     lambda x, y: mi_permutation_test(x, y, estimator="ksg", n_permutations=9, random_state=0)),
], ids=["copula", "bound", "bound-copula", "test-gaussian", "test-copula", "test-bound", "gaussian-test",
        "gaussian-test-copula", "ksg", "test-ksg"])
def test_repeated_runs_are_refused_naming_how_many(name, call):
    """Copies: every feature of x0 and y0 takes a different value in each of the 100 runs."""
    x, y = stored_twice()
    with pytest.raises(ValueError, match=MESSAGE.format(name)):
        call(x, y)


@pytest.mark.parametrize("estimator", ["gaussian", "copula", "bound", "ksg"])
@pytest.mark.parametrize("extra", [[], ["--permutations", "5", "--seed", "0"]], ids=["estimate", "permutations"])
def test_the_command_line_refuses_them_in_one_line(tmp_path, capsys, estimator, extra):
    x, y = stored_twice()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    argv = ["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", estimator] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mianalysis estimate: error: ")
    assert f"{N0} of the {2 * N0} runs repeat an earlier run" in err and "drop the repeated runs" in err


def quantised(seed=7, n=500):
    """1 + 1 correlated Gaussians rounded to a grid of 0.5 (as experiments/calibration.py's
    "quantised, coarse grid" regime): independent runs that coincide by chance."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = 0.9 * x + np.sqrt(1 - 0.81) * rng.standard_normal(n)
    return np.round(x / 0.5)[:, None] * 0.5, np.round(y / 0.5)[:, None] * 0.5


@pytest.mark.filterwarnings("ignore::mianalysis.TiedSamplesWarning")
@pytest.mark.parametrize("call", [
    lambda x, y: gaussian_copula_mi(x, y),
    lambda x, y: projection_mi_bound(x, y),
    lambda x, y: ksg_mi(x, y, random_state=0),
    lambda x, y: mi_permutation_test(x, y, estimator="copula", n_permutations=5, random_state=0).estimate,
    lambda x, y: mi_permutation_test(x, y, estimator="ksg", n_permutations=5, random_state=0).estimate,
], ids=["copula", "bound", "ksg", "test-copula", "test-ksg"])
def test_runs_that_coincide_on_a_lattice_are_estimated_with_a_user_warning(call):
    """No feature tells the distinct runs apart: discrete data, not copies. The estimate is
    made (the calibration table reports these regimes) and a UserWarning names the count."""
    from mianalysis.estimators.repeats import RepeatedRunsWarning, repeated_runs

    x, y = quantised()
    m = repeated_runs(x, y)
    assert m > 400
    with pytest.warns(RepeatedRunsWarning, match=rf"^{m} of the 500 runs repeat an earlier run \(identical rows of x "
                                                 rf"and y alike\), and no feature tells the {500 - m} distinct runs "
                                                 r"apart: the samples lie on a lattice") as caught:
        value = call(x, y)
    assert np.isfinite(value) and issubclass(RepeatedRunsWarning, UserWarning)
    assert sum(w.category is RepeatedRunsWarning for w in caught) == 1  # once, not once per shuffle


def test_shuffles_that_pair_rows_repeated_within_each_side_are_not_refused():
    """x repeats its rows, and so does y, but never together: no run repeats. A shuffle may
    pair two copies of x with two copies of y; the test checks the observed pairing only."""
    rng = np.random.default_rng(5)
    x0, y0 = rng.standard_normal((2, 40, 3))
    x, y = np.vstack([x0, x0]), np.vstack([y0, np.roll(y0, 1, axis=0)])
    for estimator in ("bound", "copula", "gaussian"):
        res = mi_permutation_test(x, y, estimator=estimator, n_permutations=20, random_state=0)
        assert res.n_permutations == 20 and np.isfinite(res.null_distribution).all()


def test_a_bootstrap_of_the_gaussian_estimate_still_runs():
    """gaussian_mi itself does not check: bootstrap resamples (mi_replicates, the additive
    test) repeat runs on purpose; its checked entry points (permutation tests, the command
    line) refuse them."""
    from mianalysis.analysis.inference.intervals import mi_interval

    rng = np.random.default_rng(6)
    x = rng.standard_normal((200, 2))
    y = 0.6 * x + 0.8 * rng.standard_normal((200, 2))
    rows = rng.integers(0, 200, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(gaussian_mi(x[rows], y[rows]))
        estimate, low, high = mi_interval(x, y, "copula", n_resamples=20, method="bootstrap")
    assert low < estimate < high
