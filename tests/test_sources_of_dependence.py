"""experiments/sources_of_dependence.py: cells carried over from an earlier summary table
give the same table as the run that made them, and are named as carried over."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "sources_of_dependence.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "gaussian", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=300)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """(work, out) of one quick run of the gaussian part, which the tests below start from:
    read it, or copy the work folder before changing it."""
    root = tmp_path_factory.mktemp("quick_run")
    _run("--work", root / "work", "--out", root / "first")
    return root / "work", root / "first"


@pytest.mark.filterwarnings("ignore")
def test_carried_over_cells_give_the_same_table(tmp_path, request):
    pytest.importorskip("matplotlib")
    _, first = request.getfixturevalue("quick_run")
    again = tmp_path / "again"
    out = _run("--work", tmp_path / "empty", "--out", again, "--carry-over", first / "sources_of_dependence_quick.csv")
    assert "carried over" in out.stdout and "Where the truth is known" in out.stdout
    assert not list((tmp_path / "empty").rglob("*.csv"))  # nothing was sampled or analysed again
    assert (again / "sources_of_dependence_quick.csv").read_text() == (first / "sources_of_dependence_quick.csv").read_text()
    md_first, md_again = ((d / "sources_of_dependence_quick.md").read_text() for d in (first, again))
    assert md_again.startswith(md_first.rstrip("\n")) and "not rerun: gaussian_per-run_nothing_seed0" in md_again
    sidecar = json.loads((again / "sources_of_dependence_quick.csv.json").read_text())
    assert len(sidecar["carried_over"]["cells"]) == 6 and sidecar["carried_over"]["provenance"]["started"]
    made = json.loads((first / "sources_of_dependence_quick.csv.json").read_text())
    assert sidecar["seconds"] == made["seconds"] and None not in made["seconds"].values()  # the cells' own times


@pytest.mark.filterwarnings("ignore")
def test_skip_missing_leaves_out_unfinished_cells_and_names_them(tmp_path, request):
    pytest.importorskip("matplotlib")
    quick_work, first_out = request.getfixturevalue("quick_run")
    work = tmp_path / "work"
    shutil.copytree(quick_work, work)
    gone = ["gaussian_fixed_noise_seed0", "gaussian_per-run_data+noise_seed0"]
    for name in gone:
        (work / "quick" / f"{name}.csv").unlink()
    out = _run("--work", work, "--out", tmp_path / "second", "--skip-missing")
    assert all(f"{name}" in out.stdout and "not run (--skip-missing)" in out.stdout for name in gone)
    assert not any((work / "quick" / f"{name}.csv").exists() for name in gone)  # nothing sampled or analysed
    rows = (tmp_path / "second" / "sources_of_dependence_quick.csv").read_text().splitlines()
    first = (first_out / "sources_of_dependence_quick.csv").read_text().splitlines()
    kept = [r for r in first[1:] if not any(f"gaussian-sgd,paper,{i},{sh},0," in r
                                             for i, sh in (("fixed", "noise"), ("per-run", "data+noise")))]
    assert rows[1:] == kept and len(kept) < len(first) - 1
    page = (tmp_path / "second" / "sources_of_dependence_quick.md").read_text()
    assert page.rstrip().endswith("Cells not run yet (left out with `--skip-missing`; no row in the table): "
                                  "gaussian_per-run_data+noise_seed0, gaussian_fixed_noise_seed0.")
    sidecar = json.loads((tmp_path / "second" / "sources_of_dependence_quick.csv.json").read_text())
    assert sorted(sidecar["not_run"]) == sorted(gone)


def _row(quantity, steps, init="fixed", shared="nothing", part="gaussian"):
    return {"part": part, "init": init, "shared": shared, "seed": 0, "pair": "0-1", "quantity": quantity,
            "steps": "; ".join(f"{it}: {v}" for it, v in steps.items())}


def test_verdict_errors_count_false_steps_against_the_truth():
    import importlib.util

    spec = importlib.util.spec_from_file_location("experiment_sources", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exact = {20: "no detectable change", 30: "no detectable change"}
    summary = [_row("mi_exact", exact), _row("mi_gaussian", {20: "rising", 30: "no detectable change"}),
               _row("mi_ksg", {20: "no detectable change", 30: "not made: no interval"}),
               _row("mi_exact", {20: "falling", 30: "rising"}, shared="data"),
               _row("mi_ksg", {20: "rising", 30: "no detectable change"}, shared="data")]
    text = "\n".join(module.verdict_errors(summary))
    assert "1 of 3 step verdicts of the MI estimates say rising or falling" in text
    assert "not compared with the exact MI" not in text
    assert "Gaussian against the exact MI: 2 step verdicts; a change of the wrong sign or where there is none: 1;" in text
    assert "KSG against the exact MI: 3 step verdicts; a change of the wrong sign or where there is none: 1; a real " \
           "change called no detectable change (however small the exact change): 1 of 2." in text
    assert module.verdict_errors([_row("euclidean", {20: "rising"})]) == []
    older = [_row("mi_exact", {}), _row("mi_ksg", {20: "", 30: "no detectable change"})]  # made before these columns
    text = "\n".join(module.verdict_errors(older))
    assert "0 of 1 step verdicts" in text and "1 cells (carried over from a table made before" in text


def test_headings_and_titles_name_the_seeds_the_table_holds():
    """A part assembled with --skip-missing before all its seeds ran: its heading and panel
    title name the seeds it has rows of, not every seed it lists."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("experiment_sources", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [{**_row("mi_ksg", {2: "rising"}, part="signal-paper-22000"), "seed": seed} for seed in (0, 2)]
    assert module.seeds_in(rows, "signal-paper-22000", module.PARTS) == [0, 2]
    assert module.seeds_in(rows, "gaussian", module.PARTS) == [0, 1, 2]  # none yet: the part's own
    page = module.markdown([{**r, "task": "signal-rnn", "preset": "paper", "runs": 22000, "first_iteration": 1,
                             "last_iteration": 2, "first_value": 0.1, "last_value": 0.2, "last_ci_low": 0.1,
                             "last_ci_high": 0.3, "trend": "rising"} for r in rows],
                           ["signal-paper-22000"], module.PARTS)
    assert "22000 runs per cell, checkpoints every 1, seeds 0, 2" in page


def test_a_quick_table_is_not_carried_into_the_full_run(tmp_path, quick_run):
    _, first = quick_run
    out = subprocess.run([sys.executable, str(SCRIPT), "--only", "gaussian", "--work", str(tmp_path / "empty"),
                          "--out", str(tmp_path / "full"), "--carry-over", str(first / "sources_of_dependence_quick.csv")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "with 300 runs per cell" in out.stderr and "2000 runs" in out.stderr
    assert not (tmp_path / "full").exists() and not list((tmp_path / "empty").rglob("*.csv"))


def test_familywise_errors_counts_each_procedure_from_the_cell_tables(tmp_path):
    """experiments/familywise_errors.py on one hand-made gaussian-sgd cell: steps 20, 30 of
    one pair with p 0.03 and 0.2 where the exact MI does not change: one false verdict
    uncorrected, none after Holm (2 x 0.03 = 0.06); the summary's signal cell of one
    step per pair gives exact counts for every procedure."""
    import csv
    import importlib.util

    import numpy as np

    from mianalysis.analysis import AnalysisTable

    sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("experiment_familywise", ROOT / "experiments" / "familywise_errors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # a fixed start: at checkpoint 0 the parameters are constant, the MI 0 by rule (no test)
    level = [{"quantity": q, "client_a": "0", "client_b": "1", "iteration": it, "checkpoint": c, "value": 0.0, "n_runs": 9,
              "note": "client_a's parameters are constant across runs: MI is 0" if c == 0 else ""}
             for q in ("mi_exact", "mi_ksg") for c, it in enumerate((0, 10, 20, 30))]
    steps = [{"quantity": "delta_mi_ksg", "client_a": "0", "client_b": "1", "iteration": it, "checkpoint": c,
              "value": 0.3, "ci_low": np.nan, "ci_high": np.nan, "change_p": p, "change_se": 0.1, "n_runs": 9}
             for c, it, p in ((1, 10, 0.001), (2, 20, 0.03), (3, 30, 0.2))]
    AnalysisTable(level + steps, settings={"ci_level": 0.95}).write(tmp_path / "gaussian_fixed_nothing_seed0.csv")
    cells = module.table_cells(tmp_path)
    rows = module.from_tables(cells, lambda k: True, lambda k, t, a, b: module.exact_steps(t, a, b), "test")
    ksg = {(r["method"], r["family"]): r for r in rows if r["estimator"] == "KSG"}
    assert (ksg["none", "pair"]["verdicts"], ksg["none", "pair"]["false"]) == (2, 1)  # iteration 10 is not read
    assert ksg["holm", "pair"]["false"] == 0 and ksg["bh", "pair"]["false"] == 0
    with open(tmp_path / "summary.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["part", "task", "preset", "init", "shared", "seed", "quantity", "steps"])
        writer.writeheader()
        writer.writerows([{"part": "signal-paper", "task": "signal-rnn", "preset": "paper", "init": "fixed",
                           "shared": "nothing", "seed": 0, "quantity": "mi_ksg", "steps": f"2: {v}"}
                          for v in ("rising", "no detectable change")])
    summary = {(r["method"], r["family"]): r for r in module.from_summary(tmp_path / "summary.csv", set())
               if r["estimator"] == "KSG"}
    assert summary["none", "pair"]["false"] == 1 and summary["holm", "pair"]["bound"] is False
    assert summary["holm", "cell"]["bound"] is True
    assert "≤ 1 false" in module.markdown(list(summary.values()), "test tables")
    # A summary whose rows hold step p-values: exact counts for every procedure. Two pairs of
    # one cell, p (0.02, 0.3) and (0.04, 0.6): two rejections uncorrected; Holm per pair
    # 0.04 <= 0.05 and 0.08; Holm over the cell's four steps 0.08 and 0.12; BH per pair
    # 0.04 and 0.08; BH over the cell 0.08 for both.
    with open(tmp_path / "summary_p.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["part", "task", "preset", "init", "shared", "seed", "quantity",
                                                "steps", "step_p"])
        writer.writeheader()
        writer.writerows([{"part": "signal-long", "task": "signal-rnn", "preset": "long", "init": "fixed",
                           "shared": "nothing", "seed": 0, "quantity": "mi_ksg", "steps": "8: x; 12: y",
                           "step_p": f"8: {a}; 12: {b}"} for a, b in ((0.02, 0.3), (0.04, 0.6))]
                         + [{"part": "signal-long", "task": "signal-rnn", "preset": "long", "init": "fixed",
                             "shared": "nothing", "seed": 0, "quantity": "mi_gaussian",
                             "steps": "8: not made: shrinkage estimate; 12: not made: shrinkage estimate",
                             "step_p": "8: 1e-9; 12: 1e-9"}])
    exact = {(r["method"], r["family"]): r for r in module.from_summary(tmp_path / "summary_p.csv", set())
             if r["estimator"] == "KSG"}
    assert {k: (r["false"], r["pairs_with_false"], r["bound"]) for k, r in exact.items()} == {
        ("none", "pair"): (2, 2, False), ("holm", "pair"): (1, 1, False), ("bh", "pair"): (1, 1, False),
        ("holm", "cell"): (0, 0, False), ("bh", "cell"): (0, 0, False)}
    assert exact["none", "pair"]["verdicts"] == 4
    # Steps whose verdict was not made (shrinkage) are in no family, whatever their p.
    gauss = [r for r in module.from_summary(tmp_path / "summary_p.csv", set()) if r["estimator"] == "Gaussian"]
    assert {(r["verdicts"], r["false"]) for r in gauss} == {(0, 0)}
