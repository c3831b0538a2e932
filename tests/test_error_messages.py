"""Error messages point to the real problem, in the words of the interface that was used.

- mi_permutation_test with backend="torch" works (the same null as the Numba path), and an
  argument of the other estimator, or a torch device this machine does not have, is named
  as such, before any work.
- The Gaussian estimator's "not positive definite" error names what works in the words of
  the interface: with fewer runs than dimensions the bound (``estimator='bound'``, on the
  command line ``--estimator bound``), never shrinkage (a shrunk number is neither an
  estimate nor a bound); for features of one side linearly dependent, the bound too, or
  dropping them (issue 52: no message recommends shrinkage). No message of ``estimate``
  recommends an option that the same command refuses.
"""

import re

import numpy as np
import pytest

from mianalysis import gaussian_mi, ksg_mi, mi_permutation_test
from mianalysis.cli import main

RNG = np.random.default_rng(7)
X = RNG.standard_normal((60, 2))
Y = X + RNG.standard_normal((60, 2))


# ------------------------------------------------------------------ mi_permutation_test
def test_permutation_test_on_the_torch_backend_gives_the_numba_null():
    pytest.importorskip("torch")
    numba = mi_permutation_test(X, Y, n_permutations=7, random_state=0)
    for cache in ("auto", True, False):  # the cache is Numba's; torch computes each estimate
        torch = mi_permutation_test(X, Y, n_permutations=7, random_state=0, backend="torch", device="cpu",
                                    distance_cache=cache)
        assert torch.estimate == numba.estimate
        np.testing.assert_array_equal(torch.null_distribution, numba.null_distribution)


@pytest.mark.parametrize("estimator, kwargs, message", [
    ("gaussian", {"backend": "torch"},
     r"unexpected keyword arguments \['backend'\]: `backend` is a setting of estimator='ksg'; "
     r"estimator='gaussian' takes \['bias_correction', 'shrinkage', 'units'\]"),
    ("gaussian", {"k": 3, "device": "cpu"}, r"\['device', 'k'\]: `device`, `k` are settings of estimator='ksg'"),
    ("ksg", {"shrinkage": "ledoit-wolf"},
     r"unexpected keyword arguments \['shrinkage'\]: `shrinkage` is a setting of estimator='gaussian' or 'copula'; "
     r"estimator='ksg' takes \["),
    ("ksg", {"kk": 3}, r"unexpected keyword arguments \['kk'\]; estimator='ksg' takes \['algorithm', "),
])
def test_permutation_test_names_the_estimator_an_argument_belongs_to(estimator, kwargs, message):
    with pytest.raises(TypeError, match=message):
        mi_permutation_test(X, Y, estimator=estimator, n_permutations=3, **kwargs)


def _no_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")


@pytest.mark.parametrize("call", [
    lambda: ksg_mi(X, Y, backend="torch", device="cuda"),
    lambda: ksg_mi(X, Y, backend="torch", device="cuda:0"),
    lambda: mi_permutation_test(X, Y, n_permutations=3, backend="torch", device="cuda"),
], ids=["ksg_mi", "ksg_mi-index", "permutation-test"])
def test_a_missing_gpu_is_named(call):
    _no_cuda()
    with pytest.raises(ValueError, match=r"`device` 'cuda(:0)?' is not available: PyTorch .* sees no CUDA GPU; "
                                         r"use device='cpu' or leave `device` unset"):
        call()


@pytest.mark.parametrize("call", [
    lambda: ksg_mi(X, Y, backend="torch", device="gpu"),
    lambda: mi_permutation_test(X, Y, n_permutations=3, backend="torch", device="gpu"),
], ids=["ksg_mi", "permutation-test"])
def test_a_device_torch_does_not_know_is_named(call):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"`device` 'gpu' is not a torch device \(e\.g\. 'cpu', 'cuda', 'cuda:1'\)"):
        call()


def test_the_permutation_test_checks_the_device_before_any_work(monkeypatch):
    _no_cuda()
    import mianalysis.estimators.significance as significance

    def no_work(*args, **kwargs):
        raise AssertionError("estimated before checking the device")

    import dataclasses

    from mianalysis.estimators.registry import get_estimator, register_estimator

    monkeypatch.setattr(significance, "add_tie_breaking_noise", no_work)
    entry = get_estimator("ksg")
    register_estimator(dataclasses.replace(entry, function=no_work), replace=True)  # the test's KSG estimates
    try:
        with pytest.raises(ValueError, match="`device` 'cuda' is not available"):
            mi_permutation_test(X, Y, n_permutations=3, backend="torch", device="cuda")
    finally:
        register_estimator(entry, replace=True)


# ------------------------------------------------------------------ Gaussian hints on the command line
@pytest.fixture
def wide(tmp_path):
    """6 samples of 4 + 4 features: the joint covariance (8x8) cannot be positive definite."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4))
    y = x + rng.standard_normal((6, 4))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return tmp_path / "x.npy", tmp_path / "y.npy", x, y


@pytest.fixture
def few_runs(tmp_path):
    """12 samples of 8 + 8 features: fewer runs than the joint dimension (16), enough for the bound (8)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((12, 8))
    y = x + rng.standard_normal((12, 8))
    np.save(tmp_path / "fx.npy", x)
    np.save(tmp_path / "fy.npy", y)
    return tmp_path / "fx.npy", tmp_path / "fy.npy", x, y


def test_python_error_names_the_bound_not_shrinkage(few_runs):
    _, _, x, y = few_runs
    with pytest.raises(ValueError, match=r"n_samples=12 <= 16 features \(fewer runs than dimensions: the sample "
                                         r"covariance is singular, so there is no plain Gaussian estimate\); "
                                         r"estimator='bound' gives a lower bound on the MI from these runs, or "
                                         r"estimate fewer features \(e\.g\. one layer at a time\)$"):
        gaussian_mi(x, y)


def test_python_error_with_too_few_runs_for_the_bound_names_neither(wide):
    _, _, x, y = wide  # 6 runs: the bound needs 8
    with pytest.raises(ValueError, match=r"n_samples=6 <= 8 features .*; estimate fewer features \(e\.g\. one layer "
                                         r"at a time\) or sample more runs$"):
        gaussian_mi(x, y)


@pytest.mark.parametrize("extra", [[], ["--permutations", "5", "--seed", "0"]], ids=["estimate", "permutations"])
def test_cli_error_suggests_the_cli_flag(few_runs, capsys, extra):
    xp, yp, _, _ = few_runs
    assert main(["estimate", str(xp), str(yp), "--estimator", "gaussian"] + extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mianalysis estimate: error: ")
    assert "n_samples=12 <= 16 features" in err and "; --estimator bound gives a lower bound" in err
    assert "estimator='bound'" not in err and "shrinkage" not in err  # no Python-only option, no shrinkage
    # ... and the command takes what it recommends
    assert main(["estimate", str(xp), str(yp), "--estimator", "bound"] + extra) == 0
    assert capsys.readouterr().out.startswith("bound MI >= ")


@pytest.mark.parametrize("estimator", ["gaussian", "copula"])
def test_cli_error_of_dependent_features_suggests_the_bound_not_shrinkage(tmp_path, capsys, estimator):
    """A feature of x that is a multiple of another: the x block is singular whatever the
    runs; the hint is the bound in the command line's words (and the auto choice), never
    shrinkage, and the command takes what it recommends."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((60, 2))
    x = np.column_stack([x, 2 * x[:, 0]])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x[:, :2] + rng.standard_normal((60, 2)))
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", estimator]) == 2
    err = capsys.readouterr().err
    assert "the x covariance matrix (3x3) is not positive definite: features are linearly dependent" in err
    assert "; --estimator bound gives a lower bound (--estimator auto chooses an estimate or a bound)" in err
    assert "shrinkage" not in err and "='" not in err
    for recommended in ("bound", "auto"):
        assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", recommended]) == 0
        assert capsys.readouterr().out.startswith("bound MI >= ")  # auto: the copula estimate is singular


@pytest.mark.parametrize("extra", [[], ["--permutations", "5", "--seed", "0"]], ids=["estimate", "permutations"])
def test_cli_shrinkage_flag_gives_the_python_estimate(wide, capsys, extra):
    xp, yp, x, y = wide
    assert main(["estimate", str(xp), str(yp), "--estimator", "gaussian", "--shrinkage", "ledoit-wolf",
                 "--units", "nats"] + extra) == 0
    out = capsys.readouterr().out  # the number, never printed as MI (issue 52)
    assert out.startswith("gaussian gives ") and "MI" not in out.split("(")[0]
    assert "(outside calibration): 6 runs x 8 joint dims: the Gaussian MI of a shrunk covariance: neither an " \
           "estimate nor a bound" in out
    value = float(out.split()[2])
    with pytest.warns(UserWarning, match="neither an estimate nor a bound"):
        assert value == pytest.approx(gaussian_mi(x, y, shrinkage="ledoit-wolf", units="nats"), rel=1e-5)


def test_cli_shrinkage_is_a_gaussian_flag(wide, capsys):
    xp, yp, _, _ = wide
    assert main(["estimate", str(xp), str(yp), "--shrinkage", "ledoit-wolf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shrinkage applies to --estimator gaussian" in err


def test_cli_federate_placement_error_names_the_flags(tmp_path, capsys):
    args = ["federate", "--task", "environments", "--clients", "4", "--rounds", "1", "--placement", "step",
            "--out", str(tmp_path / "x"), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--placement step applies the rule" in err and "use --algorithm fedsgd" in err
    assert "`algorithm`=" not in err and "`placement`=" not in err


# ------------------------------------------------------------------ what `estimate` recommends, it takes
RECOMMENDED = re.compile(r"(--[a-z][a-z-]*)(?: ([a-z0-9][a-z0-9-]*))?")


def _with(argv, flag, value):
    """`argv` with `flag` set to `value` (replaced where present, appended otherwise)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag] + ([value] if value is not None else [])


@pytest.fixture
def refusals(tmp_path):
    """Samples that some estimators refuse: y identical to x (100 runs of 3), and fewer runs
    than dimensions (30 runs of 40 + 40)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((100, 3))
    np.save(tmp_path / "x.npy", x)
    wide = rng.standard_normal((2, 30, 40))
    np.save(tmp_path / "a.npy", wide[0])
    np.save(tmp_path / "b.npy", wide[1])
    return {"identical": (tmp_path / "x.npy", tmp_path / "x.npy"),
            "fewer-runs": (tmp_path / "a.npy", tmp_path / "b.npy")}


@pytest.mark.parametrize("data", ["identical", "fewer-runs"])
@pytest.mark.parametrize("estimator", ["gaussian", "copula", "bound", "ksg"])
@pytest.mark.parametrize("extra", [[], ["--permutations", "3", "--seed", "0"]], ids=["estimate", "permutations"])
def test_estimate_never_recommends_what_it_refuses(refusals, capsys, data, estimator, extra):
    """Issue 50: `estimate --estimator bound` on identical x and y recommended `--shrinkage
    ledoit-wolf`, which `--estimator bound` refuses. For every estimator, a refusal names
    only options that the same command then takes (and never shrinkage for fewer runs than
    dimensions, nor a Python spelling)."""
    xp, yp = refusals[data]
    argv = ["estimate", str(xp), str(yp), "--estimator", estimator] + extra
    if main(argv) == 0:
        return  # nothing refused (KSG on both, the bound on fewer runs than dimensions)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mianalysis estimate: error: ")
    message = err.split(": error: ", 1)[1]
    assert "='" not in message  # no Python keyword on the command line
    if data == "fewer-runs":
        assert "shrinkage" not in message and "--estimator bound gives a lower bound" in message
    if data == "identical":  # the MI is infinite: nothing to recommend, and the bound speaks of its projections
        assert not RECOMMENDED.findall(message)
        assert "infinite" in message
    for flag, value in RECOMMENDED.findall(message):
        again = _with(argv, flag, value or None)
        assert main(again) == 0, (message, again, capsys.readouterr().err)
        capsys.readouterr()
