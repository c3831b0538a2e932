"""What `mianalysis headroom` prints, read by a newcomer (issue 53, item 4).

Per rule of the last checkpoint: its MSE and its ratio to averaging's, the fit-corrected
ratio (the one the verdicts, the docs' tables and the README quote) labelled so for blue and
blue_coordinate; then one verdict sentence per checkpoint naming its reference (the optimum,
or the FedSGD reference "central", never called the optimum). On gaussian-sgd against its
exact theta* the default rules include "curvature", the runnable rule the verdicts name.
Small dumps of three clients with known error sizes; each test well under a second or two.
"""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from mianalysis import ParameterDump, headroom
from mianalysis.analysis.studies.headroom import default_rules, headroom_rule_lines, headroom_verdicts
from mianalysis.cli import main
from mianalysis.dumps import CENTRAL, OPTIMUM

INTERVAL = r"(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]"


def _dump(path, reference=OPTIMUM):
    """Three clients around a per-run theta*: error sizes 1, 1, 3 at iteration 1 (exact ratio of
    the best combination 0.388: headroom), 1, 1, 1 at iteration 2 (ratio 1: near-optimal)."""
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((2, 400, 2))
    sd = np.array([[1.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    samples = {k: theta + sd[:, i, None, None] * rng.standard_normal(theta.shape) for i, k in enumerate("abc")}
    return ParameterDump.from_arrays(path, {**samples, reference: theta}, checkpoints=[1, 2])


def _run(tmp_path, capsys, *args):
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), *args]) == 0
    with open(tmp_path / "h.csv") as fh:
        rows = list(csv.DictReader(fh))
    return capsys.readouterr().out.splitlines(), rows


def _three(row, prefix):
    return tuple(f"{float(row[f'{prefix}{end}']):.3f}" for end in ("", "_low", "_high"))


def test_the_command_prints_the_corrected_ratio_labelled_and_the_raw_one_beside_it(tmp_path, capsys):
    _dump(tmp_path / "d")
    out, rows = _run(tmp_path, capsys)
    last = {r["rule"]: r for r in rows if r["iteration"] == "2"}
    assert out[1] == ("iteration 2, against the optimum theta*: each rule's MSE (the squared error summed over the 2 "
                      "parameters, mean over 400 runs, with its 95 % interval) and that MSE as a ratio to averaging's "
                      "(below 1: the rule beats averaging; fit-corrected: a fitted rule's ratio divided by what "
                      "fitting its weights costs, the ratio the verdicts judge by)")
    lines = {line.split(":")[0].split()[-1]: line for line in out[2:7]}
    assert list(lines) == ["mean", "weighted_mean", "inverse_mse", "blue_coordinate", "blue"]
    for rule in ("blue", "blue_coordinate", "inverse_mse"):  # fitted: the corrected ratio first, labelled
        found = re.search(rf"; fit-corrected ratio to averaging {INTERVAL} \(as cross-fitted: {INTERVAL}\)$",
                          lines[rule])
        assert found, lines[rule]
        assert found.groups()[:3] == _three(last[rule], "ratio_corrected"), (lines[rule], last[rule])
        assert found.groups()[3:] == _three(last[rule], "ratio")
    assert lines["mean"].endswith("; ratio to averaging 1.000 [1.000, 1.000] (fixed weights)")
    assert not any("ratio to mean" in line for line in out)  # the old, unlabelled uncorrected ratio


def test_the_command_ends_with_a_verdict_sentence_per_checkpoint(tmp_path, capsys):
    _dump(tmp_path / "d")
    out, rows = _run(tmp_path, capsys)
    verdicts = out[out.index(next(line for line in out if line.startswith("verdicts (")))+ 1:]
    assert verdicts == headroom_verdicts(rows)
    headroom_line, near = verdicts
    found = re.fullmatch(rf"iteration 1, against the optimum theta\*: the best linear combination \(blue\) has "
                         rf"{INTERVAL} of averaging's error; the best runnable rule tried, mean, reaches "
                         r"1\.000 \[1\.000, 1\.000\]", headroom_line)
    assert found, headroom_line
    assert float(found[2]) < 0.388 < float(found[3])  # the exact ratio of three clients of sizes 1, 1, 3
    assert re.fullmatch(rf"iteration 2, against the optimum theta\*: averaging is within -?[\d.]+ % "
                        r"\[-?[\d.]+, -?[\d.]+\] of the best linear combination \(blue\): near-optimal here", near), near


def test_the_central_reference_is_never_called_the_optimum(tmp_path, capsys):
    _dump(tmp_path / "d", reference=CENTRAL)
    out, _ = _run(tmp_path, capsys, "--rules", "mean", "blue_coordinate")
    against = [line for line in out if ", against " in line]
    assert len(against) == 3 and all("against the FedSGD reference (central client), not the optimum: " in line
                                     for line in against), against
    assert not any("optimum theta*" in line for line in out)
    assert "the best per-coordinate combination (blue_coordinate) has" in out[-2]


def test_the_lines_read_the_same_from_the_csv_and_name_a_missing_checkpoint(tmp_path):
    rows = headroom(_dump(tmp_path / "d"))
    path = tmp_path / "h.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(path) as fh:
        text = list(csv.DictReader(fh))
    assert headroom_rule_lines(text, iteration=1) == headroom_rule_lines(rows, iteration=1)
    assert headroom_rule_lines(rows)[0].startswith("iteration 2, ")  # the last checkpoint by default
    assert headroom_rule_lines(rows, level=0.9)[0].count("with its 90 % interval") == 1
    with pytest.raises(ValueError, match=r"`iteration` 7 is not a checkpoint of the rows: \[1, 2\]"):
        headroom_rule_lines(rows, iteration=7)
    with pytest.raises(ValueError, match="`rows` is empty"):
        headroom_rule_lines([])


def test_an_undefined_ratio_and_a_shrunk_blue_say_why(tmp_path):
    zero = {"iteration": 0, "rule": "mean", "weights": "fixed", "mse": 0.0, "mse_low": 0.0, "mse_high": 0.0,
            "ratio": np.nan, "ratio_low": np.nan, "ratio_high": np.nan}
    shrunk = {"iteration": 0, "rule": "blue", "weights": "cross-fitted, 2 folds", "mse": 1.0, "mse_low": 0.9,
              "mse_high": 1.1, "ratio": 0.5, "ratio_low": 0.4, "ratio_high": 0.6, "ratio_corrected": np.nan,
              "ratio_corrected_low": np.nan, "ratio_corrected_high": np.nan,
              "note": "ledoit-wolf shrinkage: 4 fitting runs <= 2 x 6"}
    _, mean, blue = headroom_rule_lines([zero, shrunk])
    assert mean.endswith("; ratio to averaging undefined (averaging's MSE is 0: every client at the reference)")
    assert blue.endswith("; ratio to averaging 0.500 [0.400, 0.600] (cross-fitted; fit correction: its second "
                         "moment is shrunk)")


def test_curvature_is_a_default_rule_only_where_it_runs(tmp_path, capsys):
    from mianalysis.tasks import get_task

    assert "curvature" not in default_rules(3, 2)
    assert default_rules(3, 2, curvature=True)[-1] == "curvature"
    assert "curvature" not in {r["rule"] for r in headroom(_dump(tmp_path / "o"))}  # no task: not runnable
    # A gaussian-sgd dump (its meta names the task) with each run's exact theta* as the client
    # "optimum": the task knows the curvature weights and the exact moments. The samples are
    # stand-ins (the rules' lines, not their values, are checked), so no sampling is needed.
    task = get_task("gaussian-sgd", d=3, n_iterations=10)
    rng = np.random.default_rng(0)
    samples = {str(k): rng.standard_normal((1, 40, 3)) * (k + 1) for k in range(3)}
    ParameterDump.from_arrays(tmp_path / "d", {**samples, OPTIMUM: np.zeros((1, 40, 3))}, checkpoints=[10],
                              meta={"task": "gaussian-sgd", "task_settings": task.settings, "seed": 0,
                                    "init": "per-run"})
    out, rows = _run(tmp_path, capsys)  # reference "auto": the client "optimum"
    assert [r["rule"] for r in rows] == ["mean", "weighted_mean", "inverse_mse", "blue_coordinate", "blue",
                                         "curvature"]
    curvature = next(line for line in out if line.startswith("iteration 10 curvature: MSE "))
    assert re.search(r", exact [\d.]+; ratio to averaging [\d.]+ \[[\d.]+, [\d.]+\] \(fixed weights\)$", curvature)
    assert "exact (oracle weights) " in next(line for line in out if line.startswith("iteration 10 blue: "))
    assert headroom(tmp_path / "d", rules=["mean"])[0]["rule"] == "mean"  # rules named: only those
