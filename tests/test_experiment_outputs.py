"""Where the experiment scripts write, and in what form (experiments/_results.py).

The paths come from the helper's own file, so a script finds figures/, docs/results/tables/
and runs/ from whatever folder it is started in; tables, sidecars and pages are written by
one set of functions; and the committed outputs follow the layout figures/README.md
describes (one sidecar name, no result pages in figures/, nothing tracked that git ignores).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
FIGURES = ROOT / "figures"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def results(tmp_path, monkeypatch):
    """experiments/_results.py loaded by its path while the working directory is elsewhere."""
    monkeypatch.chdir(tmp_path)
    return _load("experiment_results", EXPERIMENTS / "_results.py")


# ------------------------------------------------------------------ paths
def test_paths_come_from_the_helpers_file_not_the_working_directory(results, tmp_path):
    assert Path.cwd() == tmp_path
    assert results.ROOT == ROOT
    assert results.FIGURES == ROOT / "figures"
    assert results.PAGES == ROOT / "docs" / "results" / "tables"
    assert results.WORK == ROOT / "runs"
    assert results.pages_for(results.FIGURES) == results.PAGES
    assert results.pages_for(str(ROOT / "experiments" / ".." / "figures")) == results.PAGES  # the same folder
    assert results.pages_for(tmp_path / "out") == tmp_path / "out"
    assert results.figures_of(EXPERIMENTS / "calibration.py") == ROOT / "figures" / "calibration"
    assert results.pages_for(results.figures_of("calibration")) == results.PAGES  # a script's folder of figures/
    assert results.pages_for(ROOT / "figures" / "calibration" / "trial") == ROOT / "figures" / "calibration" / "trial"


def test_runner_defaults_are_the_repository_folders_from_any_directory(tmp_path, monkeypatch):
    """_runner.main, run from another folder: figures and tables into figures/SCRIPT/, dumps into runs/."""
    import _runner

    monkeypatch.chdir(tmp_path)
    seen = {}

    class Stop(Exception):
        pass

    def fake_run_experiment(task, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(_runner, "get_task", lambda name, preset, **settings: (name, preset, settings))
    monkeypatch.setattr(_runner, "run_experiment", fake_run_experiment)
    with pytest.raises(Stop):
        _runner.main("signal-rnn", {"quick": {"runs": 4}}, "test", argv=["--quick"])
    assert seen["out_dir"] == str(ROOT / "figures" / "signal_rnn") and seen["name"] == "signal_rnn_quick"
    assert seen["dump_dir"] == ROOT / "runs" / "signal_rnn_quick"
    assert not list(tmp_path.iterdir())  # nothing written where it was started


@pytest.mark.parametrize("cwd, script", [(ROOT, "experiments/signal_rnn.py"), (EXPERIMENTS, "signal_rnn.py")])
def test_scripts_start_from_the_root_and_from_their_folder(cwd, script):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, script, "--help"], cwd=cwd, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_scripts_take_their_paths_from_the_helper():
    """No script computes the repository's folders itself, nor writes a page or a sidecar
    by hand: experiments/_results.py is the one place."""
    for path in sorted(EXPERIMENTS.glob("*.py")):
        if path.name == "_results.py":
            continue
        text = path.read_text()
        assert "parents[1]" not in text, f"{path.name}: use _results.ROOT / FIGURES / PAGES / WORK"
        assert '.md").write_text' not in text, f"{path.name}: write pages with _results.write_page"
        assert '.json").write_text' not in text or path.name in ("aggregator_trends.py", "fedavg_vs_fedsgd.py"), \
            f"{path.name}: write a table's record with _results.write_sidecar"


# ------------------------------------------------------------------ writers
def test_write_csv_is_the_csv_modules_dialect(results, tmp_path):
    rows = [{"a": 1, "b": 0.1 + 0.2, "c": "x"}, {"a": 2, "b": float("nan"), "c": ""}]
    expected = io.StringIO(newline="")
    writer = csv.DictWriter(expected, fieldnames=["a", "b", "c"])
    writer.writeheader()
    writer.writerows(rows)
    path = results.write_csv(rows, tmp_path / "sub" / "t.csv")
    assert path == tmp_path / "sub" / "t.csv"
    assert path.read_bytes() == expected.getvalue().encode()
    assert path.read_bytes().startswith(b"a,b,c\r\n1,0.30000000000000004,x\r\n")
    short = results.write_csv(rows, tmp_path / "g.csv", float_format=".6g", fieldnames=["c", "b", "a"], atomic=True)
    assert short.read_text().splitlines() == ["c,b,a", "x,0.3,1", ",nan,2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.csv", "sub"]  # no temporary file left
    with pytest.raises(ValueError, match="nothing to write"):
        results.write_csv([], tmp_path / "empty.csv")


def test_write_sidecar_names_it_after_the_table(results, tmp_path):
    import numpy as np

    path = results.write_sidecar(tmp_path / "t.csv", {"table": "t.csv", "n": np.float32(0.5), "k": 3})
    assert path == tmp_path / "t.csv.json"
    assert path.read_text() == '{\n "table": "t.csv",\n "n": 0.5,\n "k": 3\n}\n'
    assert results.write_sidecar(str(tmp_path / "u.csv"), {}, atomic=True) == tmp_path / "u.csv.json"


def test_write_page_goes_to_the_docs_for_figures_and_beside_another_out(results, tmp_path, monkeypatch):
    figures, pages, other = tmp_path / "figures", tmp_path / "pages", tmp_path / "trial"
    monkeypatch.setattr(results, "FIGURES", figures)
    monkeypatch.setattr(results, "PAGES", pages)
    assert results.write_page(figures, "t", "a table\n\n| x |\n") == pages / "t.md"
    assert (pages / "t.md").read_text() == "a table\n\n| x |\n"
    assert results.write_page(other, "t", "no newline", atomic=True) == other / "t.md"
    assert (other / "t.md").read_text() == "no newline\n"
    assert not figures.exists()


def test_a_script_writes_its_page_beside_its_out(tmp_path, monkeypatch):
    """A real script's writer with --out elsewhere: table, sidecar and page all there, and
    the committed page untouched (gaussian_sgd_truth's writing, on two made-up rows)."""
    truth = _load("experiment_gaussian_sgd_truth", EXPERIMENTS / "gaussian_sgd_truth.py")
    committed = (ROOT / "docs" / "results" / "tables" / "gaussian_sgd_truth.md").read_bytes()
    row = {"preset": "paper", "d": 20, "design": "d", "transform": "none", "runs": 5, "iteration": 10, "pair": "0-1",
           "mi_exact": 2.0, **{f"mi_{e}": 2.5 for e in truth.ESTIMATORS}}
    monkeypatch.setattr(truth, "PRESETS", ("paper",))
    monkeypatch.setattr(truth, "DESIGNS", ("d",))
    monkeypatch.setattr(truth, "TRANSFORMS", ("none",))
    monkeypatch.setattr(truth, "truth_rows", lambda *args: [row, {**row, "pair": "0-2"}])
    monkeypatch.setattr(sys, "argv", ["gaussian_sgd_truth.py", "--out", str(tmp_path)])
    truth.main()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gaussian_sgd_truth.csv", "gaussian_sgd_truth.csv.json",
                                                          "gaussian_sgd_truth.md"]
    assert json.loads((tmp_path / "gaussian_sgd_truth.csv.json").read_text())["table"] == "gaussian_sgd_truth.csv"
    assert (tmp_path / "gaussian_sgd_truth.csv").read_text().splitlines()[1].startswith("paper,20,d,none,5,10,0-1,2,2.5")
    assert "| paper | 20 | none | 2 | 2 - 2 | 0.5 | 25.0% |" in (tmp_path / "gaussian_sgd_truth.md").read_text()
    assert (ROOT / "docs" / "results" / "tables" / "gaussian_sgd_truth.md").read_bytes() == committed


# ------------------------------------------------------------------ the committed outputs
def test_every_sidecar_is_named_after_its_table():
    names = {p.name for p in FIGURES.glob("*/*")}
    for name in sorted(names):
        if name.endswith(".csv.json"):
            assert name[:-len(".json")] in names, f"figures/{name} has no table"
        elif name.endswith(".json"):  # a file of its own: no table may share its name
            assert name[:-len(".json")] + ".csv" not in names, \
                f"figures/{name}: a table's sidecar is named {name[:-len('.json')]}.csv.json"
    assert "signal_rnn_paper.csv.json" in names and "aggregator_trends.json" in names


def _absolute_paths(record, where=""):
    """[where] of every string in a JSON record that is an absolute path."""
    if isinstance(record, dict):
        return [hit for k, v in record.items() for hit in _absolute_paths(v, f"{where}/{k}")]
    if isinstance(record, list):
        return [hit for i, v in enumerate(record) for hit in _absolute_paths(v, f"{where}[{i}]")]
    if isinstance(record, str) and (record.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", record)):
        return [f"{where}: {record}"]
    return []


def test_no_committed_record_names_an_absolute_path():
    # A sidecar or benchmark result names the machine it was made on if it holds an absolute
    # path (the analysis settings record the dump's resolved path: _results.portable_sidecar).
    files = sorted([*FIGURES.rglob("*.json"), *(ROOT / "benchmarks" / "results").rglob("*.json")])
    assert files
    found = [f"{p.relative_to(ROOT)}{hit}" for p in files for hit in _absolute_paths(json.loads(p.read_text()))]
    assert found == []


def test_portable_sidecar_makes_paths_in_the_repository_relative(tmp_path):
    sys.path.insert(0, str(ROOT / "experiments"))
    import _results

    table = tmp_path / "t.csv"
    table.write_text("a\n1\n")
    record = {"settings": {"dump": str(tmp_path / "runs" / "x"), "k": 3},
              "list": [str(tmp_path / "a.csv"), "/elsewhere/b", str(tmp_path) + "other/c"]}
    (tmp_path / "t.csv.json").write_text(json.dumps(record))
    assert _results.portable_sidecar(table, root=tmp_path) == tmp_path / "t.csv.json"
    assert json.loads((tmp_path / "t.csv.json").read_text()) == {
        "settings": {"dump": "runs/x", "k": 3}, "list": ["a.csv", "/elsewhere/b", str(tmp_path) + "other/c"]}
    assert _results.portable_sidecar(tmp_path / "none.csv", root=tmp_path) is None
    assert _absolute_paths(record) and not _absolute_paths(_results.repository_relative(record, tmp_path)[
        "settings"])
    portable = _results.portable_record(record, root=tmp_path)
    assert portable == {"settings": {"dump": "runs/x", "k": 3},
                        "list": ["a.csv", "<outside the repository>/b", "<outside the repository>/c"]}
    assert not _absolute_paths(portable)


def test_no_tracked_file_is_ignored():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"git ls-files failed: {out.stderr.strip()}")
    assert out.stdout.split() == [], ".gitignore ignores tracked files"
    check = subprocess.run(["git", "check-ignore", "figures/x_quick.csv", "docs/results/tables/x_quick.md"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert check.stdout.split() == ["figures/x_quick.csv", "docs/results/tables/x_quick.md"]


def test_digits_lenet_paper_reads_outside_calibration_from_the_typed_columns():
    # The summary's flag comes from the table's columns (estimate_kind, outside_calibration), not
    # from note text: for a table read from its notes both give the same answer.
    from mianalysis.analysis import AnalysisTable

    script = _load("digits_lenet_paper_script", EXPERIMENTS / "digits_lenet_paper.py")
    row = {"checkpoint": 1, "iteration": 1, "client_a": "0", "client_b": "1", "quantity": "mi_gaussian",
           "value": 3.0, "spread": float("nan"), "null_mean": float("nan"), "null_std": float("nan"),
           "p_value": float("nan"), "n_runs": 8000}
    notes = {"": False, "ledoit-wolf shrinkage: singular covariance": True,
             "outside calibration: > 4 joint dims, < 2000 runs": True}
    for note, want in notes.items():
        assert script.outside(AnalysisTable([{**row, "note": note}])[0]) is want, note


def test_digits_lenet_paper_carries_over_cells_of_the_committed_table_byte_for_byte(tmp_path):
    # --carry-over reads an earlier summary back as cell_rows made it: the committed table,
    # every cell carried (or one "made" from its own rows and the rest carried), is written
    # again byte for byte, and its page's table is the committed page.
    script = _load("digits_lenet_paper_carry", EXPERIMENTS / "digits_lenet_paper.py")
    results = _load("experiment_results_carry", EXPERIMENTS / "_results.py")
    committed = FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv"
    sidecar = json.loads((FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv.json").read_text())
    rows = script.read_summary(committed)
    carried = script.carried_cells(rows, [], quick=False)
    assert list(carried) == list(sidecar["runs"])  # the script's cell order
    cells, summary = script.assemble({}, carried)
    written = results.write_csv(summary, tmp_path / "again.csv", float_format=".6g")
    assert written.read_bytes() == committed.read_bytes()
    page = (ROOT / "docs" / "results" / "tables" / "digits_lenet_paper.md").read_text()
    command = script.made_by(sidecar["provenance"]["argv"][1:])  # the command that wrote it, on its page
    md = script.markdown(summary, cells, sidecar["runs"], sidecar["permutations"], sidecar["seconds"], 0, command)
    assert f"Made by `{command}`." in md
    assert page.rstrip("\n").startswith(md)  # and then the cells carried into it, if any
    if sidecar.get("carried_over"):
        assert page.rstrip("\n").endswith(", ".join(sidecar["carried_over"]["cells"]) + ".")
    made = {"fixed-augmentation": carried.pop("fixed-augmentation")}
    assert "fixed-augmentation" not in script.carried_cells(rows, ["fixed-augmentation"], quick=False)
    cells_again, again = script.assemble(made, script.carried_cells(rows, ["fixed-augmentation"], quick=False))
    assert cells_again == cells
    assert results.write_csv(again, tmp_path / "made.csv", float_format=".6g").read_bytes() == committed.read_bytes()
    with pytest.raises(ValueError, match="both made and carried"):
        script.assemble(made, {**carried, **made})


@pytest.mark.filterwarnings("ignore")
def test_digits_lenet_paper_rows_read_back_as_cell_rows_made_them(tmp_path):
    # A cell made now and a cell carried over from a written table must be the same rows:
    # cell_rows of a real analysis table, written and read back through typed_row, have the
    # same types (int iterations, bool flags, "" on trend rows) and the same values to the 6
    # significant digits written, so a table of both is written byte for byte the same.
    from mianalysis import ParameterSampler, analyze
    from mianalysis.tasks import get_task

    script = _load("digits_lenet_paper_rows", EXPERIMENTS / "digits_lenet_paper.py")
    results = _load("experiment_results_rows", EXPERIMENTS / "_results.py")
    task = get_task("gaussian-sgd", d=2, n_iterations=4)
    dump = ParameterSampler(task, seed=0, init="fixed", shared=("data",), every=2, progress=False).sample(
        80, tmp_path / "dump")
    made = script.cell_rows("fixed-augmentation", task, analyze(dump, estimators=("gaussian", "ksg"),
                                                                n_permutations=5), 80)
    assert {r["quantity"] for r in made} >= {"mi_gaussian", "mi_ksg", "euclidean"}
    written = results.write_csv(made, tmp_path / "made.csv", float_format=".6g")
    back = [script.typed_row(r) for r in script.read_summary(written)]
    assert len(back) == len(made)
    for a, b in zip(made, back):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], float):
                assert isinstance(b[k], float) and (math.isclose(a[k], b[k], rel_tol=1e-5, abs_tol=1e-300)
                                                    or (math.isnan(a[k]) and math.isnan(b[k]))), (k, a[k], b[k])
            else:
                assert type(b[k]) is type(a[k]) and b[k] == a[k], (k, a[k], b[k])
    assert results.write_csv(back, tmp_path / "back.csv", float_format=".6g").read_bytes() == written.read_bytes()


def test_digits_lenet_paper_carry_over_refuses_what_does_not_fit():
    script = _load("digits_lenet_paper_refuse", EXPERIMENTS / "digits_lenet_paper.py")
    rows = script.read_summary(FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv")
    with pytest.raises(ValueError, match=r"cell fixed-nothing has \[4000\] runs there; this run's fixed-nothing has 300"):
        script.carried_cells(rows, [], quick=True)
    with pytest.raises(ValueError, match=r"missing columns \['step_p'\]: not a summary table of this script"):
        script.carried_cells([{k: v for k, v in rows[0].items() if k != "step_p"}], [], quick=False)
    with pytest.raises(ValueError, match="not cells of this script"):
        script.carried_cells([{**rows[0], "cell": "elsewhere"}], [], quick=False)
    with pytest.raises(ValueError, match="outside_calibration must be True, False or empty; got 'yes'"):
        script.carried_cells([{**rows[0], "outside_calibration": "yes"}], [], quick=False)
    typed = script.typed_row(next(r for r in rows if r["note"] == "trend row"))
    assert typed["iteration"] == "" and typed["outside_calibration"] == "" and math.isnan(typed["value"])


def test_digits_lenet_paper_refuses_to_carry_another_seed_into_a_table(tmp_path):
    # The committed table is seed 0's: a seed-1 run cannot carry its cells over, and says so
    # before sampling or writing anything.
    done = subprocess.run([sys.executable, str(EXPERIMENTS / "digits_lenet_paper.py"), "--seed", "1", "--only",
                           "fixed-augmentation-26400", "--carry-over", str(FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv"),
                           "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "{'seed': 0}" in done.stderr and "{'seed': 1}" in done.stderr, done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()
    script = _load("digits_lenet_paper_seed", EXPERIMENTS / "digits_lenet_paper.py")
    rows = script.read_summary(FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv")
    cells, summary = script.assemble({}, script.carried_cells(rows, [], quick=False))
    sidecar = json.loads((FIGURES / "digits_lenet_paper" / "digits_lenet_paper.csv.json").read_text())
    md = script.markdown(summary, cells, sidecar["runs"], sidecar["permutations"], sidecar["seconds"], seed=2)
    assert ", seed 2. Gaussian MI" in md and "seed 0" not in md


def test_rows_by_design_runs_each_design_in_a_scratch_folder_it_removes(results, capsys):
    seen = []

    def design_rows(design, runs, work):
        seen.append(Path(work))
        assert Path(work).is_dir()
        return [{"design": design, "runs": runs}]

    rows, seconds = results.rows_by_design(["a", "b"], design_rows, 7, prefix="test-designs-", width=3)
    assert rows == [{"design": "a", "runs": 7}, {"design": "b", "runs": 7}]
    assert list(seconds) == ["a", "b"] and all(s >= 0 for s in seconds.values())
    assert seen[0] == seen[1] and not seen[0].exists()  # one folder for all, removed after
    assert capsys.readouterr().out.splitlines()[0].startswith("a   ")


def test_committed_tables_family_columns_follow_their_stored_p_values(monkeypatch, tmp_path):
    """Every committed analysis table's p_adjusted and family_verdict are what
    apply_familywise gives from its own p-values (experiments/refamily_tables.py --check);
    and a stale column is found and rewritten, nothing else in the CSV changing."""
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    refamily = _load("refamily_tables", EXPERIMENTS / "refamily_tables.py")
    tables = refamily.analysis_tables(FIGURES)
    assert len(tables) >= 5
    assert refamily.main(["--check"]) == 0

    for name in ("signal_rnn_paper.csv", "signal_rnn_paper.csv.json"):
        shutil.copy(FIGURES / "signal_rnn" / name, tmp_path / name)
    data = (tmp_path / "signal_rnn_paper.csv").read_bytes()  # bytes: line endings included
    newline = b"\r\n" if b"\r\n" in data else b"\n"
    stale = data.replace(b",falling" + newline, b",no detectable change" + newline, 1)
    assert stale != data
    (tmp_path / "signal_rnn_paper.csv").write_bytes(stale)
    assert refamily.main(["--check", "--out", str(tmp_path)]) == 1
    assert refamily.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "signal_rnn_paper.csv").read_bytes() == data
