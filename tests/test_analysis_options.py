"""Option objects of analyze (mianalysis.analysis.options): each gives the table its keywords
give, the keywords keep working, and an option given with a keyword that says otherwise is
refused."""

from __future__ import annotations

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import AnalyticNull, BenjaminiHochberg, Holm, Intervals, MomentNull, NoCorrection, Permutations
from mianalysis.analysis.options import option_keywords


def _dump(folder):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 40, 2))
    return ParameterDump.from_arrays(folder / "ab", {"a": a, "b": 0.6 * a + rng.standard_normal((3, 40, 2))})


@pytest.mark.parametrize("options, keywords", [
    ({"null": Permutations(7)}, {"n_permutations": 7}),
    ({"null": AnalyticNull()}, {"gaussian_null": "analytic"}),
    ({"null": MomentNull(otherwise=Permutations(5))}, {"gaussian_null": "moments", "n_permutations": 5}),
    ({"null": Permutations(7, moments="never")}, {"n_permutations": 7, "gaussian_null": "permutation"}),
    ({"null": AnalyticNull(otherwise=Permutations(5)), "interval": Intervals(0.9, 4), "correction": Holm("cell")},
     {"gaussian_null": "analytic", "n_permutations": 5, "ci_level": 0.9, "ci_resamples": 4, "family": "cell"}),
    ({"correction": BenjaminiHochberg()}, {"familywise": "bh"}),
    ({"correction": NoCorrection()}, {"familywise": "none"}),
])
def test_options_give_the_table_of_their_keywords(tmp_path, options, keywords):
    dump = _dump(tmp_path)
    common = {"estimators": ["gaussian"], "metrics": ["euclidean"]}
    by_options = analyze(dump, **common, **options)
    by_keywords = analyze(dump, **common, **keywords)
    assert by_options == by_keywords and by_options.settings == by_keywords.settings
    assert len(by_options) == 10  # 3 checkpoints x (mi, distance) + 2 steps x 2 changes


def test_option_keywords_are_analyze_defaults_without_options():
    assert option_keywords() == {"n_permutations": 0, "gaussian_null": "auto", "ci_resamples": None,
                                 "ci_level": 0.95, "familywise": "holm", "family": "pair"}
    assert option_keywords(null=Permutations(), ci_level=0.9)["n_permutations"] == 100


def test_an_option_with_a_keyword_that_says_otherwise_or_of_the_wrong_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`null` and `n_permutations` both say how; give one of them"):
        option_keywords(null=Permutations(10), n_permutations=20)
    dump = _dump(tmp_path)
    with pytest.raises(ValueError, match=r"`correction` and `family` both say how"):
        analyze(dump, estimators=["gaussian"], correction=Holm(), family="cell")
    with pytest.raises(TypeError, match=r"`null` must be Permutations, MomentNull or AnalyticNull; got 100"):
        option_keywords(null=100)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`interval` must be Intervals"):
        option_keywords(interval=0.9)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`correction` must be Holm, BenjaminiHochberg or NoCorrection"):
        option_keywords(correction="holm")  # type: ignore[arg-type]
    # The values are checked once, where the keywords' are: the same message.
    with pytest.raises(ValueError, match="`family` must be one of"):
        analyze(dump, estimators=["gaussian"], correction=Holm("everything"))
