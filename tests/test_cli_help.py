"""Every argument of every `mianalysis` subcommand says what it does (issue 53 item 7): the
parser is walked, and an action without help text fails (-h and --version excepted)."""

from __future__ import annotations

import argparse

import pytest

from mianalysis.cli import build_parser

SELF_EXPLAINING = (argparse._HelpAction, argparse._VersionAction)


def _parsers(parser, prog="mianalysis"):
    """(name, parser) of `parser` and every subcommand's parser under it."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prog} {name}")


def _without_help(parser):
    return [action.option_strings[0] if action.option_strings else action.dest
            for action in parser._actions
            if not isinstance(action, SELF_EXPLAINING) and not isinstance(action, argparse._SubParsersAction)
            and not (action.help or "").strip()]


PARSERS = dict(_parsers(build_parser()))


def test_every_subcommand_is_walked():
    assert {"mianalysis estimate", "mianalysis analyze", "mianalysis sample", "mianalysis verify"} <= set(PARSERS)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_argument_has_help(prog):
    assert not _without_help(PARSERS[prog]), f"{prog}: arguments without help= text"


def test_the_check_finds_an_argument_without_help():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int)
    parser.add_argument("--quiet", action="store_true", help="fewer messages")
    assert _without_help(parser) == ["--seed"]
