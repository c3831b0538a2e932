"""The command line's null, interval and correction flags come from the option objects of
analyze (mianalysis.analysis.options: each class's FLAGS, one declaration of flag, help,
choices and default), and analyze's execution keywords are one option object too
(Execution), giving the same table (issue 54 item 4)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis import (AnalyticNull, BenjaminiHochberg, Execution, Holm, Intervals, MomentNull,
                                 NoCorrection, Permutations)
from mianalysis.analysis.inference.familywise import FAMILIES, METHODS
from mianalysis.analysis.options import CORRECTIONS, Flag, execution_keywords, options_from_flags
from mianalysis.analysis.validate import GAUSSIAN_NULLS
from mianalysis.cli import build_parser, main

OPTIONS = (Permutations, MomentNull, AnalyticNull, Intervals, Holm, BenjaminiHochberg, NoCorrection)


def _help(capsys, monkeypatch, command):
    """`mianalysis COMMAND --help`, one line per argument (no wrapping)."""
    monkeypatch.setenv("COLUMNS", "2000")
    assert main([command, "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.__name__)
def test_every_flag_of_an_option_is_in_analyze_help_with_its_help_text(option, capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "analyze")
    assert option.FLAGS
    for flag in option.FLAGS:
        assert flag.argparse_keywords()["help"].replace("%%", "%") in text, flag.flag
        if flag.choices:
            assert f"{flag.flag} {{{','.join(flag.choices)}}}" in text


def test_a_changed_help_text_reaches_analyze_and_report_help(capsys, monkeypatch):
    changed = tuple(dataclasses.replace(f, help=f"changed help of {f.flag} (95 % sure)") for f in Permutations.FLAGS)
    monkeypatch.setattr(Permutations, "FLAGS", changed)
    monkeypatch.setattr(Intervals, "FLAGS", (dataclasses.replace(Intervals.FLAGS[1], help="the level, changed"),
                                             Intervals.FLAGS[0]))
    analyze_help = _help(capsys, monkeypatch, "analyze")
    assert "changed help of --permutations (95 % sure); 0: none" in analyze_help
    assert "changed help of --gaussian-null (95 % sure)" in analyze_help
    assert "the level, changed" in analyze_help and "level of every confidence interval" not in analyze_help
    report_help = _help(capsys, monkeypatch, "report")
    assert "changed help of --permutations (95 % sure); default 100: p-values down to 1/101" in report_help
    assert "shuffles of each MI row" not in report_help


def test_flag_defaults_and_choices_are_analyzes():
    parser = build_parser()
    args = parser.parse_args(["analyze", "d", "--out", "t.csv"])
    assert options_from_flags(vars(args)) == {"null": Permutations(0), "interval": Intervals(0.95, None),
                                              "correction": Holm("pair")}
    assert set(CORRECTIONS) == set(METHODS) and Holm.FLAGS[1].choices == FAMILIES
    assert Permutations.FLAGS[1].choices == GAUSSIAN_NULLS
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "d", "--out", "t.csv", "--familywise", "bonferroni"])


@pytest.mark.parametrize("flags, options", [
    (["--permutations", "9", "--gaussian-null", "moments"], {"null": MomentNull(otherwise=Permutations(9))}),
    (["--permutations", "9", "--gaussian-null", "analytic"], {"null": AnalyticNull(otherwise=Permutations(9))}),
    (["--permutations", "9", "--gaussian-null", "permutation"], {"null": Permutations(9, moments="never")}),
    (["--ci-level", "0.9", "--ci-resamples", "4"], {"interval": Intervals(0.9, 4)}),
    (["--familywise", "bh", "--family", "cell"], {"correction": BenjaminiHochberg("cell")}),
    (["--familywise", "none"], {"correction": NoCorrection("pair")}),
])
def test_flags_give_their_option_objects(flags, options):
    args = build_parser().parse_args(["analyze", "d", "--out", "t.csv", *flags])
    got = options_from_flags(vars(args))
    for name, want in options.items():
        assert got[name] == want


def test_flag_keywords_escape_percent_and_take_a_commands_default():
    flag = Flag("--x", help="95 % level", type=float, default=0.95, note="default 0.95")
    assert flag.dest == "x"
    assert flag.argparse_keywords() == {"help": "95 %% level; default 0.95", "default": 0.95, "type": float}
    assert flag.argparse_keywords(default=0.9, note="default 0.9")["help"] == "95 %% level; default 0.9"


def _dump(folder):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 40, 2))
    return ParameterDump.from_arrays(folder / "ab", {"a": a, "b": 0.6 * a + rng.standard_normal((2, 40, 2))})


def test_execution_gives_the_table_of_its_keywords(tmp_path):
    dump = _dump(tmp_path)
    common = {"estimators": ["gaussian", "ksg"], "metrics": ["euclidean"], "n_permutations": 5}
    by_option = analyze(dump, **common, execution=Execution(progress=True, distance_cache=False))
    by_keywords = analyze(dump, **common, progress=True, distance_cache=False)
    assert by_option == by_keywords and by_option.settings == by_keywords.settings
    assert by_option.settings["distance_cache"] is False  # the option reached the analysis
    assert analyze(dump, **common, execution=Execution()).settings["distance_cache"] is True  # "auto": it fits
    assert len(by_option) == 9  # 2 checkpoints x (2 MI + 1 distance) + 1 step x 3 changes


def test_execution_keywords_and_their_refusals(tmp_path):
    assert execution_keywords() == {"progress": False, "distance_cache": "auto", "scheduler": None, "client": None,
                                    "timeout": None}
    assert execution_keywords(Execution(timeout=3.0))["timeout"] == 3.0
    assert execution_keywords(progress=True)["progress"] is True
    with pytest.raises(ValueError, match=r"`execution` and `progress` both say how; give one of them"):
        execution_keywords(Execution(), progress=True)
    with pytest.raises(TypeError, match=r"`execution` must be Execution; got 'local:2'"):
        execution_keywords("local:2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"unexpected keywords \['workers'\]"):
        execution_keywords(workers=2)
    dump = _dump(tmp_path)
    with pytest.raises(ValueError, match=r"`execution` and `distance_cache` both say how"):
        analyze(dump, estimators=["gaussian"], execution=Execution(), distance_cache=False)
    # The values are checked where the keywords' are: the same message.
    with pytest.raises(ValueError, match="`distance_cache` must be"):
        analyze(dump, estimators=["gaussian"], execution=Execution(distance_cache="sometimes"))
