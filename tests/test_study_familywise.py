"""The study tables' family-wise statements (issue 54, item 5): the dependence given the
global model adjusts its p-values over a family (``p_adjusted``, Holm over the table by
default, from the analysis' family-wise code and correction objects) and records the
correction in its sidecar; every study table with intervals says at what level they hold
(per row, and together by Bonferroni); and the two nulls with a permutation fallback share
one declaration of `otherwise`."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, TypedDict

import numpy as np
import pytest

from mianalysis import ParameterDump
from mianalysis.analysis import AnalyticNull, BenjaminiHochberg, Holm, MomentNull, NoCorrection, Permutations
from mianalysis.analysis.options import option_keywords
from mianalysis.analysis.schema import Column
from mianalysis.analysis.studies import global_dependence as gd
from mianalysis.analysis.study_table import IntervalLevel, StudySchema, StudyTable
from test_study_tables import _headroom_dump  # two checkpoints, three clients and theta*

NAN = math.nan


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (math.isnan(g) and math.isnan(w)) if math.isnan(w) else g == pytest.approx(w, abs=1e-12), (got, want)


def _with_p_values(monkeypatch, p_values):
    """dependence_given_global with each row's p-value taken from `p_values`, in row order."""
    given = iter(p_values)

    def fake(*args, **kwargs):
        return {"se": 0.1, "ci_low": 0.0, "ci_high": 0.2, "null_mean": 0.0, "null_std": 0.05, "p_value": next(given)}

    monkeypatch.setattr(gd, "conditional_mi_uncertainty", fake)


def _data(clients="ab", rounds=2):
    rng = np.random.default_rng(0)
    g = np.cumsum(rng.standard_normal((rounds + 1, 60, 1)), axis=0)
    local = {c: np.concatenate([g[:1], g[:-1] + rng.standard_normal((rounds, 60, 1))]) for c in clients}
    return local, g


# ---------------------------------------------------------------------- p_adjusted
def test_holm_over_the_whole_table_by_hand_and_nan_is_no_test(monkeypatch):
    # 2 rounds x 1 pair x 3 quantities; rows in order (1, mi_local), (1, cmi), (1, mi_update), (2, ...).
    # Holm over the four p-values (the NaNs are no tests): sorted 0.01 x 4 = 0.04, 0.03 x 3 = 0.09,
    # 0.04 x 2 = 0.08 -> 0.09 (monotone), 0.5 x 1 = 0.5.
    _with_p_values(monkeypatch, [0.01, NAN, 0.04, 0.03, NAN, 0.5])
    rows = gd.dependence_given_global(*_data())
    _same([r["p_adjusted"] for r in rows], [0.04, NAN, 0.09, 0.09, NAN, 0.5])
    assert [r["quantity"] for r in rows[:3]] == list(gd.QUANTITIES)


def test_other_methods_and_families_by_hand(monkeypatch):
    p = [0.01, NAN, 0.04, 0.03, NAN, 0.5]
    # Benjamini-Hochberg over the table: sorted 0.5 x 4/4, 0.04 x 4/3, 0.03 x 4/2, 0.01 x 4/1, made
    # non-increasing from the largest: 0.5, 0.0533, 0.0533, 0.04.
    _with_p_values(monkeypatch, p)
    rows = gd.dependence_given_global(*_data(), correction=BenjaminiHochberg("table"))
    _same([r["p_adjusted"] for r in rows], [0.04, NAN, 0.16 / 3, 0.16 / 3, NAN, 0.5])
    # Holm over each quantity ("cell"): mi_local's 0.01 and 0.03 -> 0.02, 0.03; mi_update's 0.04 and 0.5 -> 0.08, 0.5.
    _with_p_values(monkeypatch, p)
    rows = gd.dependence_given_global(*_data(), correction=Holm("cell"))
    _same([r["p_adjusted"] for r in rows], [0.02, NAN, 0.08, 0.03, NAN, 0.5])
    # No correction: the p-values.
    _with_p_values(monkeypatch, p)
    rows = gd.dependence_given_global(*_data(), correction=NoCorrection("table"))
    _same([r["p_adjusted"] for r in rows], p)
    # "pair": one client pair's rounds of one quantity; one round, so each family is one test.
    _with_p_values(monkeypatch, [0.01, 0.02, 0.03, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    rows = gd.dependence_given_global(*_data("abc", rounds=1), correction=Holm("pair"))
    _same([r["p_adjusted"] for r in rows], [0.01, 0.02, 0.03, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert len({(r["client_a"], r["client_b"]) for r in rows}) == 3


def test_the_sidecar_records_the_correction_and_rows_without_a_null_have_none(tmp_path):
    local, g = _data()
    rows = gd.dependence_given_global(local, g, ci_level=0.9, correction=BenjaminiHochberg("cell"),
                                      out=tmp_path / "dep.csv")
    back = StudyTable.read(tmp_path / "dep.csv", gd.DEPENDENCE_TABLE)
    assert back.settings["familywise"] == {"method": "bh", "family": "cell", "alpha": 0.1}
    assert [r["p_adjusted"] for r in back] == [r["p_adjusted"] for r in rows]
    assert all(r["p_adjusted"] >= r["p_value"] for r in rows)
    assert all(math.isnan(r["p_adjusted"]) for r in gd.dependence_given_global(local, g, null=None))


def test_a_table_written_before_p_adjusted_still_reads(tmp_path):
    local, g = _data()
    gd.dependence_given_global(local, g, out=tmp_path / "dep.csv")
    lines = (tmp_path / "dep.csv").read_text().splitlines()
    (tmp_path / "dep.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    back = StudyTable.read(tmp_path / "dep.csv", gd.DEPENDENCE_TABLE)
    assert "p_adjusted" not in back[0] and isinstance(back[0]["p_value"], float)


def test_the_correction_is_checked_before_anything_is_computed(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("computed before the correction was checked")

    monkeypatch.setattr(gd, "gaussian_mi", fail)
    with pytest.raises(TypeError, match="`correction` must be Holm, BenjaminiHochberg or NoCorrection; got 'holm'"):
        gd.dependence_given_global(*_data(), correction="holm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`family` must be one of 'table', 'pair', 'cell'; got 'everything'"):
        gd.dependence_given_global(*_data(), correction=Holm("everything"))


# ---------------------------------------------------------------------- the intervals' level
class _Row(TypedDict):
    run: Annotated[int, Column(meaning="The run.")]
    low: Annotated[float, Column(meaning="Lower end.")]
    high: Annotated[float, Column(meaning="Upper end.")]


_SCHEMA = StudySchema("ranges", _Row, 1, "A test table.", intervals=IntervalLevel("level", (("low", "high"),),
                                                                                  "nothing"))


def test_the_sidecar_says_the_intervals_hold_per_row_and_together_by_bonferroni(tmp_path):
    rows = [{"run": 0, "low": 0.1, "high": 0.2}, {"run": 1, "low": NAN, "high": NAN}, {"run": 2, "low": 0.0,
                                                                                      "high": 1.0}]
    StudyTable(_SCHEMA, rows, settings={"level": 0.9}).write(tmp_path / "t.csv")
    record = json.loads((tmp_path / "t.csv.json").read_text())
    # two intervals (the NaN one is none), each at 0.9: together at least 1 - 2 x 0.1
    assert record["intervals"] == {"level": 0.9, "holds": "per row", "intervals": 2, "simultaneous_level": 0.8,
                                   "family": "nothing"}
    back = StudyTable.read(tmp_path / "t.csv", _SCHEMA)
    assert back.record == {} and back.settings == {"level": 0.9}
    # many intervals: no simultaneous guarantee left; no level recorded: none stated
    assert _SCHEMA.intervals.describe(rows * 10, {"level": 0.95})["simultaneous_level"] == 0.0
    assert _SCHEMA.intervals.describe(rows, {})["level"] is None


def test_the_headroom_table_says_its_intervals_are_per_row_and_its_verdicts_bonferroni(tmp_path):
    from mianalysis.cli import main

    _headroom_dump(tmp_path / "d")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), "--rules", "mean",
                 "--ci-level", "0.9", "--no-progress"]) == 0
    intervals = json.loads((tmp_path / "h.csv.json").read_text())["intervals"]
    # "mean" at two checkpoints: an MSE and a ratio interval each (its fit-corrected ones, fixed weights
    # costing nothing to fit, are the same intervals and count once)
    assert intervals["level"] == 0.9 and intervals["holds"] == "per row" and intervals["intervals"] == 4
    assert intervals["simultaneous_level"] == pytest.approx(0.6) and "Bonferroni" in intervals["family"]


def test_the_additive_table_says_its_verdicts_are_per_step(tmp_path):
    from mianalysis import analyze
    from mianalysis.analysis.studies.additive_table import additive_prediction_rows

    rng = np.random.default_rng(0)
    theta0 = rng.standard_normal((300, 2))
    scale = np.array([0.5, 1.0, 1.5])[:, None, None]
    dump = ParameterDump.from_arrays(tmp_path / "d", {c: theta0 + scale * rng.standard_normal((3, 300, 2))
                                                      for c in "ab"})
    rows = additive_prediction_rows(analyze(dump, estimators=("gaussian",)), dump, n_resamples=4, level=0.9,
                                    out=tmp_path / "add.csv")
    intervals = json.loads((tmp_path / "add.csv.json").read_text())["intervals"]
    assert len(rows) == 2 and all(np.isfinite(r["difference_ci_low"]) for r in rows)
    assert intervals["level"] == 0.9 and intervals["intervals"] == 2
    assert intervals["simultaneous_level"] == pytest.approx(0.8) and "not corrected" in intervals["family"]


# ---------------------------------------------------------------------- the nulls with a fallback
def test_moment_and_analytic_nulls_share_otherwise_its_check_and_flags():
    assert [f.name for f in dataclasses.fields(MomentNull)] == [f.name for f in dataclasses.fields(AnalyticNull)] \
        == ["otherwise"]
    assert MomentNull.FLAGS is AnalyticNull.FLAGS is Permutations.FLAGS
    assert MomentNull() != AnalyticNull() and MomentNull(Permutations(3)) == MomentNull(otherwise=Permutations(3))
    assert repr(AnalyticNull()) == "AnalyticNull(otherwise=None)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        MomentNull().otherwise = Permutations(3)  # type: ignore[misc]
    for null, name in ((MomentNull(otherwise=7), "MomentNull"), (AnalyticNull(otherwise=7), "AnalyticNull")):
        with pytest.raises(TypeError, match=f"`{name}.otherwise` must be Permutations or None; got 7"):
            option_keywords(null=null)  # type: ignore[arg-type]
    assert option_keywords(null=MomentNull())["gaussian_null"] == "moments"
    assert option_keywords(null=AnalyticNull(Permutations(4)))["n_permutations"] == 4
