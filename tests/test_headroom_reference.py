"""The reference of the headroom and its one-line verdicts (mianalysis.analysis.studies.headroom).

References (issue 51): "optimum" (the dump's client holding theta*), "central" (the FedSGD
reference, never called the optimum), any client (the user's own), "task", arrays; "auto"
prefers them in that order; reference clients are never combined. Each is checked on small
dumps whose MSE is known. The verdicts are checked on hand-made rows with known intervals
(near-optimal, headroom, no verdict), and the command prints one per checkpoint. The page
docs/guide/own-reference.md computes theta* in at most ten lines.
"""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import numpy as np
import pytest

from mianalysis import ParameterDump, headroom
from mianalysis.analysis.studies.headroom import (NEAR_OPTIMAL, RUNNABLE_RULES, headroom_verdicts,
                                                  reference_phrase)
from mianalysis.dumps import CENTRAL, OPTIMUM

ROOT = Path(__file__).resolve().parents[1]
OPTIMUM_IS = "optimum (exact theta*)"
CENTRAL_IS = "central (FedSGD reference, not the optimum)"


def _dump(path, n_runs=64, with_optimum=True, with_central=True):
    """Three clients around a per-run optimum, a central client off it by a constant."""
    rng = np.random.default_rng(1)
    optimum = rng.standard_normal((2, n_runs, 2))
    errors = rng.standard_normal((3, 2, n_runs, 2)) * np.array([1.0, 2.0, 3.0])[:, None, None, None]
    samples = {name: optimum + e for name, e in zip("abc", errors)}
    if with_central:
        samples[CENTRAL] = optimum + 0.5
    if with_optimum:
        samples[OPTIMUM] = optimum
    dump = ParameterDump.from_arrays(path, samples, checkpoints=[0, 5])
    return dump, {name: np.asarray(dump.samples(name, index=1), np.float64) for name in dump.clients}


def _mse(estimate, reference):
    return float(np.mean(np.sum((estimate - reference) ** 2, axis=1)))


def test_auto_is_the_optimum_client_and_reference_clients_are_never_combined(tmp_path):
    dump, s = _dump(tmp_path / "d")
    mean = (s["a"] + s["b"] + s["c"]) / 3
    rows = headroom(dump, rules=["mean"], iterations=[5])
    assert [(r["reference"], r["n_clients"]) for r in rows] == [(OPTIMUM_IS, 3)]
    assert rows[0]["mse"] == pytest.approx(_mse(mean, s[OPTIMUM]), rel=1e-12)
    central = headroom(dump, reference="central", rules=["mean"], iterations=[5])
    assert [(r["reference"], r["n_clients"]) for r in central] == [(CENTRAL_IS, 3)]
    assert central[0]["mse"] == pytest.approx(_mse(mean, s[CENTRAL]), rel=1e-12)
    # A client of the user's own: itself, "optimum" and "central" are left out of the combination.
    own = headroom(dump, reference="a", rules=["mean"], iterations=[5])
    assert [(r["reference"], r["n_clients"]) for r in own] == [("a (user's reference)", 2)]
    assert own[0]["mse"] == pytest.approx(_mse((s["b"] + s["c"]) / 2, s["a"]), rel=1e-12)
    # An array: the same numbers as the client that holds it.
    array = headroom(dump, reference=s[OPTIMUM], rules=["mean"], iterations=[5])
    assert array[0]["reference"] == "array (user's reference)" and array[0]["n_clients"] == 3
    assert array[0]["mse"] == pytest.approx(rows[0]["mse"], rel=1e-12)


def test_auto_falls_back_to_the_central_client_then_the_task(tmp_path):
    dump, s = _dump(tmp_path / "d", with_optimum=False)
    rows = headroom(dump, rules=["mean"], iterations=[5])
    assert [(r["reference"], r["n_clients"]) for r in rows] == [(CENTRAL_IS, 3)]
    assert rows[0]["mse"] == pytest.approx(_mse((s["a"] + s["b"] + s["c"]) / 3, s[CENTRAL]), rel=1e-12)
    bare, _ = _dump(tmp_path / "e", with_optimum=False, with_central=False)
    with pytest.raises(ValueError, match=r"`reference`='task' needs a dump of a task that knows the federation's "
                                         r"optimum"):
        headroom(bare)


def test_a_missing_reference_client_is_named_in_one_line(tmp_path):
    bare, _ = _dump(tmp_path / "d", with_optimum=False, with_central=False)
    for name, hint in ((OPTIMUM, "record each run's theta\\* as a client 'optimum'"),
                       (CENTRAL, "sample with --reference central")):
        with pytest.raises(ValueError, match=rf"`reference`='{name}' needs a client '{name}' in .*: {hint}") as info:
            headroom(bare, reference=name)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"`reference` must be 'auto', 'optimum', 'central', 'task', a client"):
        headroom(bare, reference="nobody")
    only, _ = _dump(tmp_path / "e", n_runs=8)
    refs = ParameterDump.from_arrays(tmp_path / "f", {OPTIMUM: np.zeros((8, 2)), CENTRAL: np.ones((8, 2))})
    with pytest.raises(ValueError, match=r"has no clients to combine besides its references"):
        headroom(refs, reference="optimum")
    assert headroom(only, reference="optimum", rules=["mean"])[0]["n_clients"] == 3


def test_the_samplers_optimum_client_on_gaussian_sgd_has_the_exact_answer(tmp_path):
    # A gaussian-sgd dump with its exact theta* recorded as the client "optimum" (as float32):
    # "auto" takes it, and the rows are those against the recomputed "task" reference.
    pytest.importorskip("torch")
    from mianalysis import ParameterSampler
    from mianalysis.tasks import get_task

    task = get_task("gaussian-sgd", d=3, n_iterations=10)
    dump = ParameterSampler(task, seed=0, every=5, progress=False).sample(40, tmp_path / "g")
    theta = task.central_parameters([ParameterSampler(task, seed=0, progress=False).data_generators(range(40), k)
                                     for k in range(task.n_clients)])
    samples = {c: np.stack([dump.samples(c, index=t) for t in range(len(dump.checkpoints))]) for c in dump.clients}
    with_optimum = ParameterDump.from_arrays(tmp_path / "o", {**samples, OPTIMUM: np.stack([theta] * 3)},
                                             checkpoints=dump.checkpoints, meta=dump.meta)
    rows = headroom(with_optimum, rules=["mean", "curvature"], iterations=[10])
    task_rows = headroom(dump, reference="task", rules=["mean", "curvature"], iterations=[10])
    assert [r["reference"] for r in rows] == [OPTIMUM_IS] * 2
    assert [r["reference"] for r in task_rows] == ["task (exact theta* = (sum A_k)^-1 sum A_k mu_k)"] * 2
    for r, t in zip(rows, task_rows):
        assert r["mse_exact"] == t["mse_exact"] and np.isfinite(r["mse_exact"])
        assert r["mse"] == pytest.approx(t["mse"], rel=1e-5)  # theta* stored as float32


# ---------------------------------------------------------------------- verdicts
def _row(iteration, rule, ratio, low, high, reference=OPTIMUM_IS, **more):
    return {"iteration": iteration, "reference": reference, "rule": rule, "mse": 1.0, "ratio": ratio,
            "ratio_low": low, "ratio_high": high, "ratio_corrected": ratio, "ratio_corrected_low": low,
            "ratio_corrected_high": high, "note": "", **more}


def _table(blue_1, blue_2, weighted=(1.0, 1.0, 1.0), reference=OPTIMUM_IS):
    return [row for it, blue in ((1, blue_1), (2, blue_2))
            for row in (_row(it, "mean", 1.0, 1.0, 1.0, reference), _row(it, "weighted_mean", *weighted, reference),
                        _row(it, "blue", *blue, reference))]


def test_verdicts_near_optimal_headroom_and_no_verdict_with_bonferroni_over_checkpoints():
    # Two checkpoints with intervals: each 95 % interval is widened to 97.5 % (z 2.241 for 1.960).
    lines = headroom_verdicts(_table((1.0, 0.99, 1.01), (0.5, 0.45, 0.55), weighted=(0.9, 0.85, 0.95)))
    assert lines == [
        # 0.99-1.01 becomes [0.9886, 1.0114]: averaging's error is -1.1 % to +1.2 % above the best's
        "iteration 1, against the optimum theta*: averaging is within 0.0 % [-1.1, 1.2] of the best linear "
        "combination (blue): near-optimal here",
        # blue [0.443, 0.557]; weighted_mean, the best of two runnable rules, at 1 - 0.05 / (2 x 2): [0.836, 0.964]
        "iteration 2, against the optimum theta*: the best linear combination (blue) has 0.500 [0.443, 0.557] of "
        "averaging's error; the best runnable rule tried, weighted_mean, reaches 0.900 [0.836, 0.964]"]
    straddle = headroom_verdicts(_table((0.95, 0.90, 1.00), (1.0, 0.99, 1.01)))
    assert straddle[0] == ("iteration 1, against the optimum theta*: no verdict: the best linear combination (blue) "
                           "has 0.950 [0.893, 1.007] of averaging's error, an interval that straddles the "
                           "near-optimal threshold 0.95 (too wide to say; more runs narrow it)")
    assert straddle[1].endswith("near-optimal here")
    # The threshold is the caller's: at 0.8, [0.893, 1.007] is near-optimal.
    assert headroom_verdicts(_table((0.95, 0.90, 1.00), (1.0, 0.99, 1.01)), near_optimal=0.8)[0].endswith(
        "near-optimal here")


def test_a_checkpoint_without_an_interval_is_no_verdict_and_not_in_the_family():
    # Checkpoint 0: every client at the reference (averaging's error 0, ratios NaN). The family
    # is the one checkpoint with an interval: its 95 % interval is kept as it is.
    zero = [{**_row(0, rule, np.nan, np.nan, np.nan), "mse": 0.0} for rule in ("mean", "blue")]
    lines = headroom_verdicts([*zero, *(r for r in _table((1, 1, 1), (0.5, 0.45, 0.55)) if r["iteration"] == 2)])
    assert lines[0] == ("iteration 0, against the optimum theta*: no verdict: averaging's error is 0 in every run "
                        "(every client at the reference): the ratios are undefined")
    assert "has 0.500 [0.450, 0.550] of averaging's error" in lines[1]


def test_blue_without_a_correction_gives_way_to_blue_coordinate():
    shrunk = _row(3, "blue", 0.4, 0.35, 0.45, ratio_corrected=np.nan, ratio_corrected_low=np.nan,
                  ratio_corrected_high=np.nan)
    rows = [_row(3, "mean", 1.0, 1.0, 1.0), shrunk, _row(3, "blue_coordinate", 0.998, 0.99, 1.006)]
    assert headroom_verdicts(rows) == ["iteration 3, against the optimum theta*: averaging is within 0.2 % "
                                       "[-0.6, 1.0] of the best per-coordinate combination (blue_coordinate): "
                                       "near-optimal here"]
    assert headroom_verdicts(rows[:2]) == [
        "iteration 3, against the optimum theta*: no verdict: blue has no fit-corrected ratio here (blue's second "
        "moment is shrunk, fewer than 2 K d fitting runs: measure blue_coordinate, or more runs)"]
    assert headroom_verdicts(rows[:1])[0].endswith("no verdict: none of the best-combination rules "
                                                   "['blue', 'blue_coordinate'] was measured (name one among the rules)")
    one = [_row(3, r, 1.0, 1.0, 1.0, note="one client: nothing to combine (every rule's weight is 1)")
           for r in ("mean", "blue")]
    assert headroom_verdicts(one) == ["iteration 3, against the optimum theta*: no verdict: one client: nothing to "
                                      "combine"]


def test_every_verdict_names_its_reference():
    phrases = {OPTIMUM_IS: "the optimum theta*", CENTRAL_IS: "the FedSGD reference (central client), not the optimum",
               "mine (user's reference)": "the user's reference mine",
               "array (user's reference)": "the user's reference array",
               "task (exact theta* = (sum A_k)^-1 sum A_k mu_k)": "the optimum theta*",
               # the names of tables written before
               "client central": "the FedSGD reference (central client), not the optimum",
               "client mine": "the user's reference mine", "task: (sum A_k)^-1 sum A_k mu_k": "the optimum theta*"}
    for reference, phrase in phrases.items():
        assert reference_phrase(reference) == phrase
        lines = headroom_verdicts(_table((1.0, 0.99, 1.01), (0.5, 0.45, 0.55), reference=reference))
        assert all(line.startswith(f"iteration {i}, against {phrase}: ") for i, line in zip((1, 2), lines)), lines
    assert "optimum" not in reference_phrase(CENTRAL_IS).replace("not the optimum", "")


def test_verdicts_refuse_rows_of_several_tables_and_read_a_csv(tmp_path):
    with pytest.raises(ValueError, match=r"`rows` hold rule 'mean' twice at iteration 1"):
        headroom_verdicts(_table((1, 0.99, 1.01), (1, 0.99, 1.01)) * 2)
    with pytest.raises(ValueError, match=r"`rows` mix the references"):
        headroom_verdicts([*_table((1, 0.99, 1.01), (1, 0.99, 1.01)), _row(3, "mean", 1, 1, 1, CENTRAL_IS)])
    with pytest.raises(ValueError, match=r"`rows` is empty"):
        headroom_verdicts([])
    with pytest.raises(ValueError, match=r"`near_optimal` must be"):
        headroom_verdicts(_table((1, 0.99, 1.01), (1, 0.99, 1.01)), near_optimal=1.5)
    table = _table((1.0, 0.99, 1.01), (0.5, 0.45, 0.55), weighted=(0.9, 0.85, 0.95))
    with open(tmp_path / "t.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    with open(tmp_path / "t.csv") as fh:
        assert headroom_verdicts(list(csv.DictReader(fh))) == headroom_verdicts(table)


def test_runnable_rules_are_those_without_the_reference():
    assert RUNNABLE_RULES == ("mean", "weighted_mean", "curvature") and NEAR_OPTIMAL == 0.95


def test_verdicts_of_a_dump_with_known_headroom_and_none(tmp_path):
    # Independent clients of standard deviations 1, 1 and 3: the best combination has exactly
    # (1 / (1 + 1 + 1/9)) / (11 / 9) = 0.388 of averaging's error. Identical clients: none.
    rng = np.random.default_rng(0)
    optimum = rng.standard_normal((1, 600, 2))
    e = rng.standard_normal((3, 1, 600, 2)) * np.array([1.0, 1.0, 3.0])[:, None, None, None]
    dump = ParameterDump.from_arrays(tmp_path / "h", {"a": optimum + e[0], "b": optimum + e[1], "c": optimum + e[2],
                                                      OPTIMUM: optimum}, checkpoints=[5])
    [line] = headroom_verdicts(headroom(dump))
    found = re.match(r"iteration 5, against the optimum theta\*: the best linear combination \(blue\) has "
                     r"([\d.]+) \[([\d.]+), ([\d.]+)\] of averaging's error; the best runnable rule tried, mean, "
                     r"reaches 1\.000 \[1\.000, 1\.000\]$", line)
    assert found, line
    assert float(found[2]) < 0.388 < float(found[3])
    same = ParameterDump.from_arrays(tmp_path / "s", {"a": optimum + e[0], "b": optimum + e[0], OPTIMUM: optimum},
                                     checkpoints=[5])
    [line] = headroom_verdicts(headroom(same))
    assert line.startswith("iteration 5, against the optimum theta*: averaging is within 0.0 % [0.0, 0.0] of the "
                           "best linear combination (blue): near-optimal here"), line


def test_headroom_command_prints_one_verdict_per_checkpoint(tmp_path, capsys):
    from mianalysis.cli import main

    dump, _ = _dump(tmp_path / "d")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), "--reference", "central",
                 "--rules", "mean", "blue_coordinate"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = out.index("verdicts (intervals Bonferroni over the checkpoints, family-wise 0.95; near-optimal: the "
                       "best combination's fit-corrected ratio interval >= 0.95):")
    verdicts = out[header + 1:]
    against = "against the FedSGD reference (central client), not the optimum: "
    assert [v.split(against)[0] for v in verdicts] == ["iteration 0, ", "iteration 5, "], verdicts
    with open(tmp_path / "h.csv") as fh:
        assert verdicts == headroom_verdicts(list(csv.DictReader(fh)))
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "x.csv"), "--near-optimal", "2"]) == 2
    assert "`--near-optimal` must be" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


def test_the_own_reference_page_computes_theta_star_in_at_most_ten_lines():
    page = (ROOT / "docs" / "guide" / "own-reference.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", page, flags=re.S))
    [optimum] = [node for node in ast.walk(ast.parse(code))
                 if isinstance(node, ast.FunctionDef) and node.name == "optimum"]
    assert optimum.end_lineno - optimum.lineno + 1 <= 10
    assert 'reference="optimum"' in code and "--reference optimum" in page
