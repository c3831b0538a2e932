"""Error messages point to the real problem, in the words of the interface that was used.

- mi_permutation_test with backend="torch" works (the same null as the Numba path), and an
  argument of the other estimator, or a torch device this machine does not have, is named
  as such, before any work.
- The Gaussian estimator's "not positive definite" error suggests shrinkage; from the
  command line it names the CLI flag (``--shrinkage ledoit-wolf``), which exists.
"""

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


def test_python_error_suggests_the_python_keyword(wide):
    _, _, x, y = wide
    with pytest.raises(ValueError, match=r"n_samples=6 <= 8 features; use shrinkage='ledoit-wolf'"):
        gaussian_mi(x, y)


@pytest.mark.parametrize("extra", [[], ["--permutations", "5", "--seed", "0"]], ids=["estimate", "permutations"])
def test_cli_error_suggests_the_cli_flag(wide, capsys, extra):
    xp, yp, _, _ = wide
    assert main(["estimate", str(xp), str(yp), "--estimator", "gaussian"] + extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mianalysis estimate: error: ")
    assert "n_samples=6 <= 8 features; use --shrinkage ledoit-wolf" in err
    assert "shrinkage='ledoit-wolf'" not in err  # no Python-only option on the command line


@pytest.mark.parametrize("extra", [[], ["--permutations", "5", "--seed", "0"]], ids=["estimate", "permutations"])
def test_cli_shrinkage_flag_gives_the_python_estimate(wide, capsys, extra):
    xp, yp, x, y = wide
    assert main(["estimate", str(xp), str(yp), "--estimator", "gaussian", "--shrinkage", "ledoit-wolf",
                 "--units", "nats"] + extra) == 0
    value = float(capsys.readouterr().out.split("=")[1].split()[0])
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
