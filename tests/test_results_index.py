"""experiments/README.md, the index of committed results: every file tracked under figures/
and docs/results/tables/ has an entry, under the one script that writes it.

The index has a section per script (a heading ``## `experiments/NAME.py` ``) and lists the
files it writes as Markdown list items (``- `figures/NAME.csv`, ...``); an entry is a
backquoted path or fnmatch pattern starting with ``figures/`` or ``docs/results/tables/``
in a list item (prose mentions, e.g. of a script's inputs, are not entries). The tracked
files come from ``git ls-files``: without git or a checkout the file checks are skipped.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
INDEX = EXPERIMENTS / "README.md"
RESULT_FOLDERS = ("figures/", "docs/results/tables/")
HEADING = re.compile(r"^## (.+?)\s*$")
SCRIPT_HEADING = re.compile(r"^`experiments/([A-Za-z0-9_]+\.py)`$")
SCRIPT = re.compile(r"experiments/([A-Za-z0-9_]+\.py)")
BACKQUOTED = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```[ \t]*$", flags=re.M | re.S)


def sections(text):
    """{section heading: [entries]}: the backquoted result paths/patterns of each ``## ``
    section's list items (a ``- `` line and its indented continuation lines)."""
    out, current, in_item = {}, None, False
    for line in FENCE.sub("", text).splitlines():
        heading = HEADING.match(line)
        if heading:
            current, in_item = heading.group(1), False
            out.setdefault(current, [])
            continue
        if line.startswith("- "):
            in_item = True
        elif not (in_item and line.startswith("  ")):
            in_item = False
        if in_item and current is not None:
            out[current] += [t for t in BACKQUOTED.findall(line) if t.startswith(RESULT_FOLDERS)]
    return out


def tracked_results():
    """The files git tracks under figures/ and docs/results/tables/ (skips where it cannot tell)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"git failed: {error}")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        pytest.skip("the repository is not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--", *RESULT_FOLDERS], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"git ls-files failed: {out.stderr.strip()}")
    files = sorted(f for f in out.stdout.split("\0") if f)
    if not files:
        pytest.skip("git tracks no results here")
    return files


def claims(index_sections, files):
    """{file: [sections whose entries match it]}."""
    return {f: [name for name, entries in index_sections.items()
                if any(fnmatch.fnmatchcase(f, e) for e in entries)] for f in files}


def unindexed(text, files):
    """The files of `files` that no entry of the index `text` matches."""
    return [f for f, owners in claims(sections(text), files).items() if not owners]


def test_every_committed_result_has_one_entry_in_the_index():
    files = tracked_results()
    owners = claims(sections(INDEX.read_text()), files)
    missing = [f for f, o in owners.items() if not o]
    assert not missing, f"committed results without an entry in experiments/README.md: {missing}"
    twice = {f: o for f, o in owners.items() if len(o) > 1}
    assert not twice, f"results listed under more than one script: {twice}"


def test_every_entry_of_the_index_names_a_committed_result():
    files = tracked_results()
    stale = [(name, e) for name, entries in sections(INDEX.read_text()).items() for e in entries
             if not any(fnmatch.fnmatchcase(f, e) for f in files)]
    assert not stale, f"entries of experiments/README.md that match no tracked file: {stale}"


def test_index_and_scripts_agree():
    text = INDEX.read_text()
    named = set(SCRIPT.findall(text))
    assert named, "experiments/README.md names no script"
    missing = sorted(s for s in named if not (EXPERIMENTS / s).is_file())
    assert not missing, f"experiments/README.md names scripts that do not exist: {missing}"
    headed = {m.group(1) for name in sections(text) if (m := SCRIPT_HEADING.match(name))}
    scripts = {p.name for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("_")}
    assert scripts - headed == set(), f"scripts without a section in experiments/README.md: {sorted(scripts - headed)}"
    assert headed - scripts == set(), f"sections for no entry-point script: {sorted(headed - scripts)}"


def test_an_entry_removed_from_the_index_is_reported():
    # The check above must fail where a committed figure loses its entry: drop one list item
    # from a copy of the index and the files it covered come back as unindexed.
    files = tracked_results()
    text = INDEX.read_text()
    assert unindexed(text, files) == []
    item = "- `figures/signal_rnn/signal_rnn_paper_mi.png`, `figures/signal_rnn/signal_rnn_paper_distances.png`\n"
    assert item in text
    assert unindexed(text.replace(item, ""), files) == ["figures/signal_rnn/signal_rnn_paper_distances.png",
                                                        "figures/signal_rnn/signal_rnn_paper_mi.png"]
    # and a mention in prose or in a command is not an entry
    prose = text.replace(item, "These figures: `figures/signal_rnn/signal_rnn_paper_mi.png`.\n"
                               "```\npython x.py --out figures/signal_rnn/signal_rnn_paper_distances.png\n```\n")
    assert len(unindexed(prose, files)) == 2


def misplaced(index_sections, files):
    """The files of `files` under figures/ that are not in the folder of the script whose
    section lists them (figures/SCRIPT/NAME for experiments/SCRIPT.py); figures/README.md,
    written by hand, stays at the top."""
    out = []
    for f, owners in claims(index_sections, files).items():
        if not f.startswith("figures/") or f == "figures/README.md":
            continue
        scripts = [m.group(1)[:-len(".py")] for o in owners if (m := SCRIPT_HEADING.match(o))]
        if [f.split("/")[1] if f.count("/") == 2 else None] != scripts:
            out.append(f)
    return out


def test_every_figure_lies_in_the_folder_of_the_script_that_writes_it():
    files = tracked_results()
    index = sections(INDEX.read_text())
    assert misplaced(index, files) == []
    folders = {f.split("/")[1] for f in files if f.startswith("figures/") and f.count("/") == 2}
    assert folders <= {p.stem for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("_")}
    # a file left at the top of figures/, or put in another script's folder, is reported
    section = "`experiments/calibration.py`"
    for stray in ("figures/calibration.csv", "figures/invariance/calibration.csv"):
        assert misplaced({section: [stray]}, [stray]) == [stray]
    assert misplaced({section: ["figures/calibration/*.csv"]}, ["figures/calibration/calibration.csv"]) == []
