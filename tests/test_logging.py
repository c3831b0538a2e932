"""Library code reports through `logging`; the command line shows it, with -v and -q."""

import ast
from pathlib import Path

import mianalysis
from mianalysis.cli import main

PACKAGE = Path(mianalysis.__file__).parent
FEDERATE = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "2", "--replicates", "1"]


def test_no_bare_print_outside_the_command_line():
    printing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                printing.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert printing == []


def test_default_shows_results_and_what_was_written(tmp_path, capsys):
    assert main(FEDERATE + ["--out", str(tmp_path / "fl"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "round 2: test accuracy" in captured.out
    assert "round 1 of 2" not in captured.err  # per-round notes are -v only


def test_verbose_shows_every_round_on_stderr(tmp_path, capsys):
    assert main(["-v"] + FEDERATE + ["--out", str(tmp_path / "fl"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "mianalysis.federated.simulation: round 1 of 2: clients [0, 1, 2]" in err
    assert "round 2 of 2" in err


def test_quiet_prints_no_wrote_lines_and_no_bars(tmp_path, capsys):
    dump = tmp_path / "dump"
    sample = ["sample", "--task", "gaussian-sgd", "--runs", "4", "--out", str(dump)]
    assert main(["-q"] + sample) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # no "wrote", no progress bar
    assert main(sample[:-2] + ["--out", str(tmp_path / "dump2"), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("wrote ")


def test_resumed_analysis_is_reported(tmp_path, capsys, monkeypatch):
    from mianalysis.analysis import journal

    dump = tmp_path / "dump"
    assert main(["-q", "sample", "--task", "gaussian-sgd", "--runs", "40", "--out", str(dump)]) == 0
    table = tmp_path / "r.csv"
    analyze = ["analyze", str(dump), "--out", str(table), "--permutations", "2", "--ci-resamples", "5",
               "--no-progress", "--estimators", "gaussian"]  # few permutations and resamples: the log is the point
    append = journal.Journal.append

    def append_then_stop(self, t, rows):  # Ctrl-C once the second checkpoint is saved
        append(self, t, rows)
        if t == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(journal.Journal, "append", append_then_stop)
    assert main(analyze) == 130
    monkeypatch.setattr(journal.Journal, "append", append)
    capsys.readouterr()
    assert main(analyze) == 0
    err = capsys.readouterr().err
    assert f"mianalysis: resuming the analysis journal {table}.partial: 2 of " in err
    assert main(["-q"] + analyze + ["--force"]) == 0
    assert capsys.readouterr().err == ""


def test_logger_restored_after_a_command(tmp_path):
    import logging

    logger = logging.getLogger("mianalysis")
    before = (list(logger.handlers), logger.level)
    assert main(["-v"] + FEDERATE + ["--out", str(tmp_path / "fl"), "--no-progress"]) == 0
    assert (list(logger.handlers), logger.level) == before


def test_quiet_import_prints_nothing(tmp_path, capsys):
    import torch

    root = tmp_path / "root"
    for client in ("a", "b"):
        for checkpoint in (0, 1):
            folder = root / client / str(checkpoint)
            folder.mkdir(parents=True)
            for run in range(3):
                torch.save({"w": torch.full((2,), float(run + checkpoint))}, folder / f"{run}.pt")
    assert main(["-q", "import", str(root), "--out", str(tmp_path / "dump")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert main(["import", str(root), "--out", str(tmp_path / "dump2"), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("wrote ")
