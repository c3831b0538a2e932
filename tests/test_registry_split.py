"""An estimator entry is its estimation part and its inference part (issue 54 item 4):
Estimator(name, estimation=Estimation(...), inference=EstimatorInference(...)), while the
flat construction, the flat attributes and dataclasses.replace of a flat field keep working
(mianalysis/estimators/registry.py)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from mianalysis.estimators.gaussian import gaussian_mi
from mianalysis.estimators.registry import (Estimation, Estimator, EstimatorInference, get_estimator,
                                            register_estimator, unregister_estimator)


def first_coordinates(x, y):
    r = np.corrcoef(x[:, 0], y[:, 0])[0, 1]
    return float(-0.5 * np.log2(1.0 - r**2))


FLAT = {"function": first_coordinates, "arguments": ("units",), "display_name": "first", "label": "first",
        "interval": "half-subsampling", "ci_resamples": 8, "random_state": False, "kind": "plain"}


def test_flat_and_composed_constructions_are_one_entry():
    flat = Estimator(name="first", **FLAT)
    composed = Estimator(name="first", display_name="first", label="first",
                         estimation=Estimation(first_coordinates, arguments=frozenset({"units"})),
                         inference=EstimatorInference(interval="half-subsampling", ci_resamples=8))
    assert flat == composed and hash(flat) == hash(composed)
    assert flat.estimation == Estimation(function=first_coordinates, arguments=frozenset({"units"}))
    assert flat.inference == EstimatorInference(interval="half-subsampling", ci_resamples=8)
    # The old access path reads the parts.
    assert (flat.function, flat.arguments, flat.interval, flat.ci_resamples, flat.nulls, flat.kind) == (
        first_coordinates, frozenset({"units"}), "half-subsampling", 8, ("permutation",), "plain")
    assert flat.stream == composed.stream and flat.color == f"C{4 + flat.stream % 6}"


def test_builtin_entries_are_split_by_what_they_hold():
    gauss = get_estimator("gaussian")
    assert gauss.estimation.function is gaussian_mi and gauss.estimation.covariance
    assert gauss.estimation.arguments == frozenset({"units", "bias_correction", "shrinkage"})
    assert (gauss.inference.interval, gauss.inference.level_interval, gauss.inference.change_interval,
            gauss.inference.nulls, gauss.inference.regime) == (
        "bootstrap", "wishart", "influence", ("permutation", "analytic"), "gaussian")
    assert (gauss.display_name, gauss.label, gauss.color, gauss.stream) == ("Gaussian (log-det)", "Gaussian", "C0", 0)
    ksg = get_estimator("ksg")
    assert ksg.estimation.distance_cache and ksg.estimation.random_state and ksg.inference.ci_resamples == 10
    assert pickle.loads(pickle.dumps(ksg)) == ksg  # entries travel to Dask workers


def test_replace_of_a_flat_field_replaces_it_in_its_part():
    gauss = get_estimator("gaussian")
    bootstrap = dataclasses.replace(gauss, level_interval=None)
    assert bootstrap.level_interval is None and bootstrap.inference.level_interval is None
    assert bootstrap.estimation is gauss.estimation and bootstrap.inference.change_interval == "influence"
    renamed = dataclasses.replace(get_estimator("copula"), name="copula_b", stream=None)
    assert renamed.transform is get_estimator("copula").transform and renamed.stream != 3
    parts = dataclasses.replace(gauss, inference=EstimatorInference(ci_resamples=5), level_interval="asymptotic")
    assert (parts.ci_resamples, parts.level_interval, parts.nulls) == (5, "asymptotic", ("permutation",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        gauss.interval = "half-subsampling"  # type: ignore[misc]


def test_registering_a_composed_entry(tmp_path):
    entry = register_estimator(name="first_split", display_name="first", label="first",
                               estimation=Estimation(first_coordinates), inference=EstimatorInference(ci_resamples=4))
    try:
        assert get_estimator("first_split").ci_resamples == 4 and get_estimator("first_split") is entry
    finally:
        unregister_estimator("first_split")


@pytest.mark.parametrize("fields, error, message", [
    ({"function": 3}, TypeError, r"estimator 'bad': `function` must be callable; got 3"),
    ({"nulls": ("permutation", "analytic")}, ValueError,
     r"estimator 'bad': the analytic null is that of Gaussian log-determinant estimates; it needs covariance=True"),
    ({"interval": "jackknife"}, ValueError, r"estimator 'bad': `interval` must be one of 'bootstrap', "),
    ({"kind": "lower"}, ValueError, r"`kind` must be one of 'plain', 'shrinkage', 'bound'"),
    ({"transform": np.sort}, ValueError, r"a `transform` serves Gaussian log-determinant estimates .* covariance=True"),
    ({"estimation": "gaussian"}, TypeError, r"`estimation` must be Estimation; got 'gaussian'"),
])
def test_checks_name_the_estimator_whichever_way_it_is_built(fields, error, message):
    with pytest.raises(error, match=message):
        Estimator(name="bad", **{**FLAT, **fields})


def test_a_missing_function_or_name_is_said():
    with pytest.raises(TypeError, match=r"estimator 'bad': `function` \(or `estimation`\) is missing"):
        Estimator(name="bad", display_name="b", label="b")
    with pytest.raises(TypeError, match=r"estimator 'bad': `label` is missing"):
        Estimator(name="bad", function=first_coordinates, display_name="b")
    with pytest.raises(ValueError, match="must be an identifier"):
        Estimator(name="a b", **FLAT)
    with pytest.raises(ValueError, match=r"`nulls` must be one of"):
        EstimatorInference(nulls=("bayes",))  # a part checks itself alone
