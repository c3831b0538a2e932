"""One judgement everywhere (issue 52 item 3): mianalysis.mi says what its number is (an
estimate, a lower bound, or outside calibration) and why; the low-level estimators warn
when called outside their calibrated regime, and not inside it nor from the package's own
callers; the command line prints the kind and never prints a shrinkage number as MI."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from mianalysis import JudgedMI, OutsideCalibrationWarning, gaussian_copula_mi, gaussian_mi, ksg_mi, mi
from mianalysis.analysis.inference.judged import KINDS, judge
from mianalysis.cli import main

RHO = 0.6
EXACT_BITS = 2 * -0.5 * np.log2(1 - RHO**2)  # two independent coordinate pairs: 0.644 bits


def correlated(n, d, seed=0):
    """n runs of d + d coordinates, coordinate i of y correlated RHO with coordinate i of x."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    return x, RHO * x + np.sqrt(1 - RHO**2) * rng.standard_normal((n, d))


@pytest.fixture(scope="module")
def wide():
    """200 runs of 90 + 90 dimensions: no calibrated estimate exists."""
    return tuple(np.random.default_rng(1).standard_normal((2, 200, 90)))


def calibration_warnings(function, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        function(*args, **kwargs)
    return [w for w in caught if issubclass(w.category, OutsideCalibrationWarning)]


# ------------------------------------------------------------------------------ mi


@pytest.mark.parametrize("units, factor", [("bits", 1.0), ("nats", np.log(2))])
def test_gaussian_data_in_the_regime_is_an_estimate_near_the_exact_mi(units, factor):
    x, y = correlated(2000, 2)
    result = mi(x, y, units=units)
    assert (result.kind, result.estimator, result.units) == ("estimate", "copula", units)
    assert result.value == pytest.approx(EXACT_BITS * factor, abs=0.05 * factor)
    assert result.reason == "2000 runs >= 2.2 x 4 joint dims: its calibrated regime, for a Gaussian copula"


def test_few_runs_for_the_dimension_give_no_estimate_and_say_why(wide):
    result = mi(*wide)
    assert result.kind != "estimate"
    assert (result.kind, result.estimator) == ("lower bound", "bound")
    assert "200 runs" in result.reason and "180 joint dims" in result.reason
    assert result.reason.startswith("200 runs < 2.2 x 180 joint dims: no calibrated estimate")


def test_an_explicit_estimator_outside_its_regime_is_judged_so(wide):
    result = mi(*wide, estimator="ksg", random_state=0)
    assert (result.kind, result.estimator) == ("outside calibration", "ksg")
    assert result.reason.startswith("200 runs x 180 joint dims: > 4 joint dims, < 2000 runs")
    with pytest.warns(OutsideCalibrationWarning):
        assert result.value == ksg_mi(*wide, random_state=0)  # computed as its function computes it


@pytest.mark.parametrize("estimator, kind", [("gaussian", "estimate"), ("copula", "estimate"),
                                             ("bound", "lower bound")])
def test_an_explicit_estimator_inside_its_regime(estimator, kind):
    x, y = correlated(2000, 2)
    result = mi(x, y, estimator=estimator)
    assert (result.kind, result.estimator) == (kind, estimator)
    assert "2000 runs x 4 joint dims" in result.reason


def test_a_shrinkage_number_is_neither_an_estimate_nor_a_bound(wide):
    result = mi(*wide, estimator="gaussian", shrinkage="ledoit-wolf")
    assert result.kind == "outside calibration"
    assert "the Gaussian MI of a shrunk covariance: neither an estimate nor a bound" in result.reason


def test_a_singular_copula_estimate_falls_back_to_the_bound_as_analyze_does():
    x, y = correlated(400, 3, seed=2)
    x = np.column_stack([x, 2 * x[:, 0]])  # linearly dependent features: the covariance is singular
    result = mi(x, y)
    assert (result.kind, result.estimator) == ("lower bound", "bound")
    assert result.reason.startswith("the copula estimate is outside calibration: shrinkage estimate (singular")


def test_a_constant_side_is_exactly_zero():
    x, _ = correlated(100, 2)
    with pytest.warns(UserWarning, match="no feature of `y` varies"):
        result = mi(x, np.ones((100, 3)))
    assert (result.value, result.kind) == (0.0, "estimate") and "exactly 0" in result.reason


def test_the_result_is_a_small_frozen_record_printed_on_one_line():
    result = JudgedMI(0.41, "lower bound", "bound", "200 runs < 2.2 x 180 joint dims: no calibrated estimate")
    assert str(result) == repr(result) == ("0.41 bits (lower bound, bound): 200 runs < 2.2 x 180 joint dims: no "
                                           "calibrated estimate")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.value = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="`kind` must be one of"):
        JudgedMI(0.41, "bound", "bound", "")
    assert KINDS == ("estimate", "lower bound", "outside calibration")


def test_bad_arguments():
    x, y = correlated(100, 2)
    with pytest.raises(ValueError, match=r"`estimator` must be one of .*'auto'"):
        mi(x, y, estimator="kde")
    with pytest.raises(TypeError, match=r"chooses its estimator's settings itself; got \['k'\]"):
        mi(x, y, k=5)
    with pytest.raises(TypeError, match=r"estimator 'gaussian' takes no option\(s\) \['k'\]"):
        mi(x, y, estimator="gaussian", k=5)
    with pytest.raises(ValueError, match="`units`"):
        mi(x, y, units="bans")


def test_judge_uses_the_registry_entry_regime():
    assert judge("ksg", 2000, 4, 1.0).kind == "estimate"
    assert judge("ksg", 2000, 4, 6.0).reason.startswith("2000 runs x 4 joint dims: > 5.65 bits")
    assert judge("bound", 30, 400, 0.5).reason == "30 runs x 400 joint dims: halves of 15 runs < 20 for one canonical pair"
    assert judge("gaussian", 300, 180, 1.0).reason.startswith("300 runs x 180 joint dims: < 2.2 runs per joint dim")


# -------------------------------------------------------------- the low-level warning


@pytest.mark.parametrize("function, name", [(gaussian_mi, "gaussian_mi"), (gaussian_copula_mi, "gaussian_copula_mi"),
                                            (ksg_mi, "ksg_mi")])
def test_the_estimators_warn_outside_their_regime_naming_it(wide, function, name):
    caught = calibration_warnings(function, *wide)
    assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    message = str(caught[0].message)
    assert message.startswith(f"{name} on 200 runs x 180 joint dims is outside its calibrated regime")
    assert caught[0].filename == __file__  # attributed to the caller's line


@pytest.mark.parametrize("function", [gaussian_mi, gaussian_copula_mi, ksg_mi])
def test_the_estimators_do_not_warn_inside_their_regime(function):
    x, y = correlated(2000, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        function(x, y)


def test_shrinkage_always_warns_what_it_is():
    x, y = correlated(2000, 2)
    (caught,) = calibration_warnings(gaussian_mi, x, y, shrinkage="ledoit-wolf")
    assert "the Gaussian MI of a shrunk covariance: neither an estimate nor a bound" in str(caught.message)


def test_precomputed_ksg_distances_warn_too(wide):
    from mianalysis import MarginalDistances

    dx, dy = MarginalDistances.of(wide[0], noise=0), MarginalDistances.of(wide[1], noise=0)
    (caught,) = calibration_warnings(ksg_mi, dx, dy)
    assert "200 runs x 180 joint dims" in str(caught.message)


def test_the_package_own_callers_do_not_warn(wide):
    from mianalysis import mi_permutation_test, projection_mi_bound

    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideCalibrationWarning)  # they label what they compute
        mi(*wide, estimator="ksg", random_state=0)
        mi(*wide, estimator="gaussian")
        projection_mi_bound(*wide, n_components=40)
        mi_permutation_test(*wide, estimator="ksg", n_permutations=2, random_state=0)


# ------------------------------------------------------------------- command line


def test_the_estimate_command_prints_the_kind_and_why(tmp_path, capsys, wide):
    x, y = correlated(2000, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "a.npy", wide[0])
    np.save(tmp_path / "b.npy", wide[1])
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]) == 0
    assert capsys.readouterr().out.startswith("copula MI = ")
    assert main(["estimate", str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bound MI >= ") and "(lower bound): 200 runs < 2.2 x 180 joint dims" in out
    assert main(["estimate", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--estimator", "ksg"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ksg gives ") and "(outside calibration): 200 runs x 180 joint dims" in out
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--estimator", "gaussian",
                 "--shrinkage", "ledoit-wolf"]) == 0
    out = capsys.readouterr().out
    assert "MI" not in out.split("(")[0] and "neither an estimate nor a bound" in out  # never printed as MI
    assert main(["estimate", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--permutations", "3",
                 "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bound MI >= ") and "(lower bound)" in out and out.rstrip().endswith("(3 permutations)")


def test_options_of_another_estimator_are_refused(tmp_path, capsys):
    x, y = correlated(100, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    assert main(["estimate", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "-k", "4"]) == 2
    assert "-k applies to --estimator ksg" in capsys.readouterr().err
