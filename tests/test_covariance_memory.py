"""Gaussian and copula estimates refuse, before allocating, covariance matrices that do not
fit in memory (mianalysis.estimators.gaussian.check_covariance_fits).

Issue 50: ``mianalysis estimate --estimator copula`` on 20 runs x 60,000 parameters ended in
a MemoryError traceback from a 107 GiB allocation (one 120,000 x 120,000 float64 matrix)."""

import tracemalloc

import numpy as np
import pytest

from mianalysis import gaussian_cmi, gaussian_copula_mi, gaussian_mi
from mianalysis.cli import main

GIB = 2**30


@pytest.fixture
def one_gib(monkeypatch):
    """This process may allocate 1 GiB (whatever the machine has)."""
    import mianalysis._internal.memory

    monkeypatch.setattr(mianalysis._internal.memory, "available_memory_bytes", lambda *args, **kwargs: GIB)


def test_the_memory_a_gaussian_estimate_needs():
    from mianalysis.estimators.gaussian import COVARIANCE_MATRICES, covariance_bytes

    # 4 matrices of 120,000^2 float64 (107 GiB each) and the standardised samples
    assert covariance_bytes(20, 120_000) == 8 * (COVARIANCE_MATRICES * 120_000**2 + 20 * 120_000)
    assert round(120_000**2 * 8 / GIB) == 107


@pytest.mark.parametrize("estimate", [gaussian_mi, gaussian_copula_mi], ids=["gaussian", "copula"])
def test_too_many_dimensions_are_refused_before_any_allocation(one_gib, estimate):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 20, 4_000))  # 8,000 joint dimensions: 4 x 0.48 GiB > 1 GiB
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError) as caught:
            estimate(x, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20  # not a single 8,000 x 8,000 matrix (0.48 GiB) was made
    error = caught.value
    assert isinstance(error, ValueError)  # a setting to change: the command line prints one line
    assert str(error).startswith(f"the {'Gaussian copula' if estimate is gaussian_copula_mi else 'Gaussian'} "
                                 "estimate on 8,000 joint dimensions needs about 1.91 GiB (4 float64 matrices of "
                                 "8,000 x 8,000), more than the 1 GiB this process can allocate (about 5,792 joint "
                                 "dimensions fit); with 20 runs <= 8,000 dimensions there is no plain estimate anyway; "
                                 "estimator='bound' gives a lower bound")
    assert "shrinkage" not in str(error)


def test_the_conditional_estimate_is_refused_too(one_gib):
    rng = np.random.default_rng(1)
    x, y, z = rng.standard_normal((3, 20, 3_000))
    with pytest.raises(MemoryError, match=r"^the Gaussian conditional estimate on 9,000 joint dimensions needs about"):
        gaussian_cmi(x, y, z)


def test_the_paper_scale_fits_and_small_estimates_skip_the_check(one_gib):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 3))
    assert np.isfinite(gaussian_mi(x, x + rng.standard_normal((300, 3))))  # well under 1 GiB: not checked


def test_a_shape_no_machine_holds_is_refused_without_patching():
    """3 runs x 200,000 + 200,000 parameters: 4.7 TB of matrices, refused at once (the
    samples themselves are 10 MB)."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 3, 200_000))
    with pytest.raises(MemoryError, match=r"^the Gaussian copula estimate on 400,000 joint dimensions needs about "):
        gaussian_copula_mi(x, y)


def test_the_command_line_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    """The issue's case: 20 runs x 60,000 parameters per client, estimate --estimator copula."""
    import mianalysis._internal.memory

    monkeypatch.setattr(mianalysis._internal.memory, "available_memory_bytes", lambda *args, **kwargs: 16 * GIB)
    rng = np.random.default_rng(4)
    for name in ("x", "y"):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((20, 60_000)).astype(np.float32))
    for extra, what in (([], "the Gaussian copula estimate"),
                        (["--permutations", "5"], "the permutation test of estimator='copula'")):
        assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", "copula"]
                    + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith(f"mianalysis estimate: error: {what} on 120,000 joint dimensions needs about 429 GiB "
                              "(4 float64 matrices of 120,000 x 120,000), more than the 16 GiB this process can "
                              "allocate")
        assert "--estimator bound gives a lower bound" in err and "estimator='bound'" not in err
