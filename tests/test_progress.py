"""Progress bars of the long calls (issue 53, item 3): on stderr when asked, nothing when not.

Bars go to stderr, never stdout (what a command prints there is parsed); the Python calls
draw none by default, as ``analyze`` does, and the commands draw them unless --no-progress.
"""

from __future__ import annotations

import numpy as np
import pytest

from mianalysis import ParameterDump, headroom
from mianalysis.cli import main
from mianalysis.dumps import OPTIMUM


def _headroom_dump(path):
    """Three clients and their optimum: 2 checkpoints x 8 runs x 2 parameters."""
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((2, 8, 2))
    samples = {k: theta + rng.standard_normal(theta.shape) for k in "abc"}
    return ParameterDump.from_arrays(path, {**samples, OPTIMUM: theta}, checkpoints=[1, 2])


@pytest.mark.parametrize("progress", [True, False])
def test_headroom_progress_goes_to_stderr_only_when_asked(tmp_path, capsys, progress):
    rows = headroom(_headroom_dump(tmp_path / "d"), rules=["mean", "inverse_mse"], progress=progress)
    captured = capsys.readouterr()
    assert len(rows) == 4 and captured.out == ""
    if progress:
        assert "headroom" in captured.err and "4/4" in captured.err  # 2 checkpoints x 2 rules
    else:
        assert captured.err == ""


def test_headroom_draws_no_bar_by_default(tmp_path, capsys):
    headroom(_headroom_dump(tmp_path / "d"), rules=["mean"])
    assert capsys.readouterr().err == ""


def test_headroom_refuses_before_drawing_its_bar(tmp_path, capsys):
    dump = _headroom_dump(tmp_path / "d")
    with pytest.raises(ValueError, match="at least 10 runs for 5 folds"):
        headroom(dump, rules=["mean"], folds=5, progress=True)  # 8 runs
    with pytest.raises(ValueError, match="`rule` must be"):
        headroom(dump, rules=["mean", "nonsense"], progress=True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("flags, drawn", [((), True), (("--no-progress",), False), (("-q",), False)])
def test_headroom_command_bar_and_no_progress(tmp_path, capsys, flags, drawn):
    _headroom_dump(tmp_path / "d")
    args = ["headroom", str(tmp_path / "d"), "--out", str(tmp_path / "h.csv"), "--rules", "mean"]
    if flags == ("-q",):
        args = ["-q", *args]
    else:
        args += list(flags)
    assert main(args) == 0
    captured = capsys.readouterr()
    assert ("headroom:" in captured.err and "rule" in captured.err) == drawn
    assert "%|" not in captured.out  # the bar never reaches stdout


@pytest.mark.parametrize("progress", [True, False])
def test_record_runs_progress_goes_to_stderr_only_when_asked(tmp_path, capsys, progress):
    pytest.importorskip("flwr")
    with capsys.disabled():  # Flower's log handler keeps the stderr of its import: the real one, not capsys's
        from test_flower import hand_made_app, hand_made_server  # the three hand-made clients

        from mianalysis.flower import record_runs

    args = dict(num_partitions=2, rounds=1, seeds=[0, 1], run_config={"rounds": 1}, progress=progress)
    dump = record_runs(hand_made_server(), hand_made_app(), tmp_path / "d", **args)
    captured = capsys.readouterr()
    assert dump.completed_runs == 2 and captured.out == ""
    if progress:
        assert "recording" in captured.err and "2/2" in captured.err
    else:
        assert "recording" not in captured.err and "%|" not in captured.err  # (Flower's own warnings may be there)


@pytest.mark.parametrize("progress", [True, False])
def test_quadratic_federation_progress_goes_to_stderr_only_when_asked(capsys, progress):
    from mianalysis.federated.quadratic import QuadraticConfig, QuadraticFederation
    from mianalysis.tasks import get_task

    task = get_task("gaussian-sgd", d=2, sigma=0.0, curvature="diagonal")
    result = QuadraticFederation(task, QuadraticConfig(rounds=5, local_steps=1, lr=0.4)).run(progress=progress)
    captured = capsys.readouterr()
    assert result.error.shape == (1, 6) and captured.out == ""
    if progress:
        assert "quadratic/" in captured.err and "5/5" in captured.err
    else:
        assert captured.err == ""
