"""Headroom's red-team findings (issue 50): rules that depend on the units, clients with no
error or far larger errors than the others, the table written into a dump, over a file or
through a link, dumps with one client or no completed run, and default rules that stop on a
large network.

The known answers come from hand-made clients whose errors are orthogonal sign patterns in
each cross-fitting fold: every fold's second moment is then exactly diagonal, every fitted
rule's weights are exactly inverse-variance, and the ratio of the combination's MSE to the
mean's is ``(1 / sum_k 1/s_k^2) / (sum_k s_k^2 / K^2)``.
"""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np
import pytest

from mianalysis import ParameterDump, headroom
from mianalysis.cli import main
from mianalysis.dumps import layout_from_shapes
from mianalysis.analysis.studies.headroom import MAX_BLUE_DIMENSION, best_linear_weights, headroom_rows, rule_weights

# Orthogonal sign patterns (rows of an 8 x 8 Hadamard matrix), the same in both folds of
# 2-fold cross-fitting (fold = run % 2): run 2 j + f holds pattern entry j. Eight fitting
# runs: more than twice K d = 3, so "blue" uses the sample second moment, unshrunk.
HADAMARD = np.kron(np.kron([[1, 1], [1, -1]], [[1, 1], [1, -1]]), [[1, 1], [1, -1]]).astype(float)


def orthogonal_errors(scales):
    """(K, 16, 1) errors of K <= 7 uncorrelated clients, client k with second moment scales[k]^2
    in each fold of 2 (pattern 0, all ones, is left out: no common direction)."""
    signs = np.repeat(HADAMARD[1:1 + len(scales)], 2, axis=1)  # run r holds entry r // 2
    return (np.asarray(scales, dtype=float)[:, None] * signs)[:, :, None]


def known_ratio(scales):
    s2 = np.asarray(scales, dtype=float) ** 2
    best = 0.0 if np.any(s2 == 0) else 1.0 / np.sum(1.0 / s2)
    return best / (s2.sum() / len(s2) ** 2)


def ratios(errors, rules):
    return {r["rule"]: r["ratio"] for r in headroom_rows(errors, rules=["mean", *rules])}


# ---------------------------------------------------------------------- 1. blue does not depend on the units
def test_blue_ratio_and_weights_do_not_depend_on_the_units():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((3, 400, 2)) * np.array([1.0, 1.0, 3.0])[:, None, None]
    got = {scale: ratios(e * scale, ["blue"])["blue"] for scale in (1e4, 1.0, 1e-8)}
    assert got[1.0] == pytest.approx(0.385, abs=0.005)  # the ratio at scale 1 (issue 50)
    for scale in (1e4, 1e-8):
        assert got[scale] == pytest.approx(got[1.0], rel=1e-9, abs=0), got
        weights = rule_weights("blue", e * scale)
        np.testing.assert_allclose(weights.sum(axis=0), np.eye(2), atol=1e-9)
        np.testing.assert_allclose(weights, rule_weights("blue", e), atol=1e-9)


@pytest.mark.parametrize("scale", [1e-8, 1.0, 1e4, 1e10])
def test_blue_gives_the_known_answer_at_any_scale(scale):
    scales = np.array([1.0, 2.0, 3.0]) * scale
    assert ratios(orthogonal_errors(scales), ["blue"])["blue"] == pytest.approx(known_ratio(scales), rel=1e-9)
    assert best_linear_weights(np.diag([1.0, 3.0]) * scale ** 2, 2).ravel() == pytest.approx([0.75, 0.25], rel=1e-9)


# ---------------------------------------------------------------------- 2. blue_coordinate at the extremes
@pytest.mark.parametrize("rule", ["inverse_mse", "blue_coordinate", "blue"])
def test_a_client_without_error_takes_all_the_weight(rule):
    e = orthogonal_errors([0.0, 1.0, 2.0])
    np.testing.assert_allclose(rule_weights(rule, e).reshape(3), [1.0, 0.0, 0.0], atol=1e-9)
    assert ratios(e, [rule])[rule] == pytest.approx(0.0, abs=1e-18)


@pytest.mark.parametrize("rule", ["inverse_mse", "blue_coordinate", "blue"])
def test_a_client_with_a_million_times_the_error_gets_almost_no_weight(rule):
    scales = [1.0, 1.0, 1e6]
    e = orthogonal_errors(scales)
    assert ratios(e, [rule])[rule] == pytest.approx(known_ratio(scales), rel=1e-6)  # 4.5e-12
    # "blue" solves the Lagrange system, as ill-conditioned as the variances are far apart (1e12).
    inv = 1.0 / np.square(scales)
    rtol = 1e-3 if rule == "blue" else 1e-9
    np.testing.assert_allclose(rule_weights(rule, e).reshape(3), inv / inv.sum(), rtol=rtol, atol=1e-18)


def test_blue_coordinate_on_random_errors_of_very_different_sizes():
    rng = np.random.default_rng(1)
    e = rng.standard_normal((3, 400, 2)) * np.array([1.0, 1.0, 1e6])[:, None, None]
    got = ratios(e, ["inverse_mse", "blue_coordinate"])
    assert got["blue_coordinate"] == pytest.approx(got["inverse_mse"], rel=0.05)
    assert 1e-12 < got["blue_coordinate"] < 1e-11


# ---------------------------------------------------------------------- dumps
def _dump(path, runs=40, params=2, clients=("a", "b"), seed=0):
    rng = np.random.default_rng(seed)
    arrays = {c: rng.standard_normal((1, runs, params)) * (1 + i) for i, c in enumerate(clients)}
    return ParameterDump.from_arrays(path, {**arrays, "central": np.zeros((1, runs, params))}, checkpoints=[5])


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err
    assert err.startswith("mianalysis headroom: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err
    return err


# ---------------------------------------------------------------------- 9, 10, 11. where the table goes
@pytest.mark.parametrize("target", ["manifest.json", "client_0.f32", "", "new.csv"])
@pytest.mark.parametrize("force", [[], ["--force"]])
def test_headroom_never_writes_into_a_dump(tmp_path, capsys, target, force):
    _dump(tmp_path / "d")
    out = tmp_path / "d" / target if target else tmp_path / "d"
    before = {p.name: _digest(p) for p in (tmp_path / "d").iterdir() if p.is_file()}
    assert main(["headroom", str(tmp_path / "d"), "--out", str(out), *force]) == 2
    _one_line_error(capsys, "is the dump" if not target else "is inside the dump", "never writes into a dump")
    assert {p.name: _digest(p) for p in (tmp_path / "d").iterdir() if p.is_file()} == before
    assert ParameterDump.open(tmp_path / "d").verify() == 40


def test_headroom_replaces_an_existing_file_only_with_force(tmp_path, capsys):
    _dump(tmp_path / "d")
    out = tmp_path / "h.csv"
    out.write_text("keep me\n")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(out), "--rules", "mean"]) == 2
    _one_line_error(capsys, f"{out} exists", "--force")
    assert out.read_text() == "keep me\n"
    assert main(["headroom", str(tmp_path / "d"), "--out", str(out), "--rules", "mean", "--force"]) == 0
    assert out.read_text().startswith("iteration,checkpoint,reference")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "h.csv", "h.csv.json"]  # the sidecar; no temporary file


def test_headroom_refuses_a_folder_as_out(tmp_path, capsys):
    _dump(tmp_path / "d")
    (tmp_path / "t").mkdir()
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "t"), "--force"]) == 2
    _one_line_error(capsys, "is a folder")
    assert not any((tmp_path / "t").iterdir())


def test_headroom_never_writes_through_a_link(tmp_path, capsys):
    _dump(tmp_path / "d")
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    link = tmp_path / "h.csv"
    os.symlink(victim, link)
    assert main(["headroom", str(tmp_path / "d"), "--out", str(link), "--rules", "mean"]) == 2
    _one_line_error(capsys, f"{link} exists", "--force")
    assert victim.read_text() == "someone else's file\n" and os.path.islink(link)
    # With --force the link itself is replaced by the table; its target is untouched.
    assert main(["headroom", str(tmp_path / "d"), "--out", str(link), "--rules", "mean", "--force"]) == 0
    assert victim.read_text() == "someone else's file\n"
    assert not os.path.islink(link) and link.read_text().startswith("iteration,")


def test_headroom_never_writes_through_a_link_into_a_dump(tmp_path, capsys):
    _dump(tmp_path / "d")
    link = tmp_path / "h.csv"
    os.symlink(tmp_path / "d" / "manifest.json", link)
    before = _digest(tmp_path / "d" / "manifest.json")
    assert main(["headroom", str(tmp_path / "d"), "--out", str(link), "--force"]) == 2
    _one_line_error(capsys, "is inside the dump")
    assert _digest(tmp_path / "d" / "manifest.json") == before and os.path.islink(link)


# ---------------------------------------------------------------------- 12. one client, no completed run
def test_a_single_client_has_nothing_to_combine(tmp_path, capsys):
    dump = _dump(tmp_path / "d", clients=("a",))
    rows = headroom(dump)  # every default rule; the reference is the client "central"
    assert [r["rule"] for r in rows] == ["mean", "weighted_mean", "inverse_mse", "blue_coordinate", "blue"]
    for r in rows:
        assert r["n_clients"] == 1 and r["ratio"] == 1.0 and r["fit_inflation"] == 1.0, r
        assert r["note"].startswith("one client: nothing to combine"), r
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv")]) == 0


def test_a_dump_without_a_completed_run_is_one_clear_line(tmp_path, capsys):
    dump = ParameterDump.create(tmp_path / "d", clients=["a", "b", "central"], checkpoints=[0], n_runs=8,
                                layout=layout_from_shapes([("w", (2,))]))
    with pytest.raises(ValueError, match=r"has no completed runs \(0 of 8\)"):
        headroom(dump)
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv")]) == 2
    _one_line_error(capsys, "has no completed runs (0 of 8)")
    assert not (tmp_path / "h.csv").exists()


# ---------------------------------------------------------------------- 16. default rules on a large network
def test_the_default_rules_leave_blue_out_of_a_large_network(tmp_path, capsys, caplog):
    d = MAX_BLUE_DIMENSION // 3 + 1  # 3 clients x 1366 parameters > 4096
    dump = _dump(tmp_path / "d", runs=8, params=d, clients=("a", "b", "c"))
    with caplog.at_level(logging.INFO, logger="mianalysis"):
        rows = headroom(dump)
    assert [r["rule"] for r in rows] == ["mean", "weighted_mean", "inverse_mse", "blue_coordinate"]
    assert any("rule 'blue' left out" in m and f"3 x {d} > {MAX_BLUE_DIMENSION}" in m for m in caplog.messages)
    with pytest.raises(ValueError, match=rf"rule 'blue' needs a \({3 * d} x {3 * d}\) error second moment"):
        headroom(dump, rules=["mean", "blue"])
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv")]) == 0
    assert "rule 'blue' left out" in capsys.readouterr().err
    assert main(["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "x.csv"), "--rules", "blue"]) == 2
    _one_line_error(capsys, "rule 'blue' needs a")
