"""Every experiment script that reads an earlier summary table (``--carry-over``,
``--replot``) does it through one reader (experiments/_results.read_earlier): a missing
file or another script's table ends it with exit status 2 and one error line naming the
option, the path and the problem, before anything is written; never a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
FIGURES = ROOT / "figures"
# script -> (arguments that keep a run small, another script's summary table)
SCRIPTS = {"sources_of_dependence.py": (["--quick", "--only", "gaussian"], FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv"),
           "digits_lenet_paper.py": (["--quick"], FIGURES / "sources_of_dependence" / "sources_of_dependence.csv")}


def _run(script, tmp_path, *args):
    extra, _ = SCRIPTS[script]
    return subprocess.run([sys.executable, str(EXPERIMENTS / script), *extra, "--work", str(tmp_path / "work"),
                           "--out", str(tmp_path / "out"), *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _error_line(done, script):
    """The one error line of a refused run (after argparse's usage lines), checked to be the only one."""
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0] == done.stderr.strip().splitlines()[-1], done.stderr
    assert errors[0].startswith(f"{script}: error: ")
    return errors[0]


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("option", ["--carry-over", "--replot"])
def test_a_missing_table_is_one_line(script, option, tmp_path):
    line = _error_line(_run(script, tmp_path, option, tmp_path / "MISSING.csv"), script)
    assert line.endswith(f"{option} {tmp_path / 'MISSING.csv'}: cannot read it (No such file or directory)")
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("option", ["--carry-over", "--replot"])
def test_another_script_s_table_is_one_line(script, option, tmp_path):
    other = SCRIPTS[script][1]
    line = _error_line(_run(script, tmp_path, option, other), script)
    assert f"{option} {other}: missing columns [" in line and line.endswith(": not a summary table of this script")
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def _results():
    spec = importlib.util.spec_from_file_location("experiment_results_reader", EXPERIMENTS / "_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shared_reader_names_each_problem(tmp_path):
    import argparse

    results = _results()
    parser = argparse.ArgumentParser(prog="x")
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    assert results.read_earlier(parser, "--carry-over", table, ("a",)) == ([{"a": "1", "b": "2"}], {})
    (tmp_path / "t.csv.json").write_text('{"seed": 0}')
    rows, sidecar = results.read_earlier(parser, "--carry-over", table, ("a", "b"), lambda rows: len(rows))
    assert (rows, sidecar) == (1, {"seed": 0})
    with pytest.raises(ValueError, match=r"^missing columns \['c'\]: not a summary table of this script$"):
        results.read_summary_table(table, ("a", "c"))
    with pytest.raises(ValueError, match=r"^cannot read it \(Is a directory\)$"):
        results.read_summary_table(tmp_path, ())
    (tmp_path / "t.csv.json").write_text("{not json")
    with pytest.raises(SystemExit):
        results.read_earlier(parser, "--carry-over", table, ("a",))
    with pytest.raises(SystemExit):
        results.read_earlier(parser, "--carry-over", table, ("a",), lambda rows: rows[0]["missing"])
