"""Reliability of the Flower strategy and recorder, boolean parameters, `mianalysis plot` of a
table with nothing to draw, and the Flower example's arguments.

The Flower tests skip when flwr is not installed (as tests/test_flower.py does) and run on
LocalGrid, in this process: no Ray, no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mianalysis.estimators.registry import estimator_names

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- Flower
def _flower():
    """The Flower names these tests use; skips the test without flwr."""
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

    import mianalysis.flower as flower

    return dict(Array=Array, ArrayRecord=ArrayRecord, Context=Context, Message=Message, MetricRecord=MetricRecord,
                RecordDict=RecordDict, ClientApp=ClientApp, Grid=Grid, ServerApp=ServerApp, flower=flower)


START = {"w": np.array([0.5, -1.0, 2.0, 1.0], dtype=np.float32), "b": np.array([1.0, 2.0], dtype=np.float32)}


def _client_app(f, reshape_for=None):
    """Each client sends back the arrays it received plus one; the client with partition
    id `reshape_for` sends them in other shapes (the same names, the same numbers)."""
    app = f["ClientApp"]()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        received = msg.content["arrays"]
        arrays = {name: received[name].numpy() + np.float32(1) for name in received.keys()}
        if p == reshape_for:
            arrays = {"w": arrays["w"].reshape(2, 2), "b": arrays["b"].reshape(2, 1)}
        content = f["RecordDict"]({"arrays": f["ArrayRecord"]({n: f["Array"](a) for n, a in arrays.items()}),
                                   "metrics": f["MetricRecord"]({"num-examples": 1})})
        return f["Message"](f["flower"].with_partition_id(content, context), reply_to=msg)

    return app


def _one_round(f, app):
    record = f["ArrayRecord"]({n: f["Array"](a) for n, a in START.items()})
    with f["flower"].LocalGrid(app, 3) as grid:
        return f["flower"].FedRule("fedavg", fraction_evaluate=0.0).start(grid, record, num_rounds=1)


def test_fedrule_reply_with_other_shapes_names_the_node_and_array():
    f = _flower()
    result = _one_round(f, _client_app(f))  # the same shapes: the model plus one
    np.testing.assert_array_equal(result.arrays["w"].numpy(), START["w"] + 1)
    with pytest.raises(ValueError, match=r"the reply of node 1001 \(client 1\): array 'w' has shape \(2, 2\); "
                                         r"the global model's 'w' has shape \(4,\)"):
        _one_round(f, _client_app(f, reshape_for=1))


def _server_app(f):
    app = f["ServerApp"]()

    @app.main()
    def main(grid, context):
        record = f["ArrayRecord"]({n: f["Array"](a) for n, a in START.items()})
        f["flower"].FedRule("fedavg", fraction_evaluate=0.0).start(grid, record, num_rounds=1)

    return app


@pytest.mark.parametrize("seeds, repeated", [([0, 0, 1], "0 is repeated in [0, 0, 1]"),
                                             ([3, 1, 3, 1], "1, 3 are repeated in [3, 1, 3, 1]")])
def test_record_runs_refuses_repeated_seeds(tmp_path, seeds, repeated):
    f = _flower()
    with pytest.raises(ValueError, match=r"`seeds` must not repeat a seed .*" + repeated.replace("[", r"\[")
                       .replace("]", r"\]")):
        f["flower"].record_runs(_server_app(f), _client_app(f), tmp_path / "d", num_partitions=3, rounds=1,
                                seeds=seeds)
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------------------- boolean parameters
@pytest.mark.parametrize("rule", ["and_mask", "geometric_mask"])
@pytest.mark.parametrize("bad", ["no", "False", 0, 1, None])
def test_rescale_must_be_true_or_false(rule, bad):
    pytest.importorskip("torch")
    from mianalysis._internal.validation import InvalidParameterError
    from mianalysis.federated import aggregation

    grads = np.array([[1.0, 3, 5], [0, 3, -5]])
    with pytest.raises(InvalidParameterError, match=r"`rescale` must be True or False; got " + repr(bad)):
        getattr(aggregation, rule)(grads, rescale=bad)
    plain = getattr(aggregation, rule)(grads, rescale=False)
    np.testing.assert_array_equal(getattr(aggregation, rule)(grads, rescale=np.bool_(False)), plain)


@pytest.mark.parametrize("make, message", [
    (lambda F: F.FederatedConfig(aggregator="and_mask", aggregator_params={"rescale": "False"}).check(),
     r"`aggregator_params` \{'rescale': 'False'\} do not fit the aggregator 'and_mask': `rescale` must be True "
     r"or False; got 'False'"),
    (lambda F: F.FederatedConfig(weighted="no").check(), r"`weighted` must be True or False; got 'no'"),
    (lambda F: F.FederatedData.environments(n_clients=4, equal_size="no"), r"`equal_size` must be True or False; "
     r"got .no."),
])
def test_federated_flags_are_checked_as_booleans(make, message):
    pytest.importorskip("torch")
    import mianalysis.federated as F
    from mianalysis._internal.validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=message):
        make(F)


def test_cli_flag_values_are_booleans_or_refused(tmp_path, capsys):
    pytest.importorskip("torch")
    from mianalysis.cli import _parse_settings, main

    assert _parse_settings(["rescale=False", "a=True", "b=false", "c=true", "d=0", "e=no"]) == {
        "rescale": False, "a": True, "b": False, "c": True, "d": 0, "e": "no"}
    for value in ("0", "no"):
        out = tmp_path / value
        assert main(["federate", "--clients", "3", "--fraction", "1", "--rounds", "1", "--aggregator", "and_mask",
                     "--param", f"rescale={value}", "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("mianalysis federate: error: ") and err.count("\n") == 1, err
        assert f"`rescale` must be True or False; got {_parse_settings([f'x={value}'])['x']!r}" in err
        assert not out.exists()


# ---------------------------------------------------------------------------- plot with nothing to draw
HEADER = "checkpoint,iteration,client_a,client_b,quantity,value,spread,null_mean,null_std,p_value,n_runs,note\n"
# The MI figure draws every registered estimator's rows (analyze's default gives mi_copula or mi_bound).
MI_ROWS = " / ".join(f"mi_{e}" for e in estimator_names())


@pytest.mark.parametrize("kind, body, missing, has", [
    ("mi", "0,0,a,b,euclidean,1.0,,,,,10,\n0,0,a,b,loss,2.0,,,,,10,\n", MI_ROWS,
     "it has only euclidean, loss"),
    ("distances", "0,0,a,b,mi_gaussian,1.0,,,,,10,\n", "euclidean / manhattan / chebyshev / cosine_update",
     "it has only mi_gaussian"),
    ("mi", "", MI_ROWS, "it has no rows"),
])
def test_plot_with_nothing_to_draw_is_a_one_line_error(tmp_path, capsys, kind, body, missing, has):
    pytest.importorskip("matplotlib")
    from mianalysis.cli import main

    table = tmp_path / "t.csv"
    table.write_text(HEADER + body)
    assert main(["plot", str(table), "--kind", kind, "--out", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"mianalysis plot: error: {table}: nothing to draw for --kind {kind}: the table has no "
                          f"{missing} rows ({has}); no figure was written"), err
    assert not (tmp_path / "f.png").exists()


# ---------------------------------------------------------------------------- the Flower example's arguments
# Runs the example with each of the bad command lines in turn, in one process, and says how
# each ended and whether Flower had been imported by then.
_RECORD_SEEDS = """
import runpy, sys
script, bad = sys.argv[1], sys.argv[2:]
for args in bad:
    sys.argv = ["record_seeds.py", "--out", "never-written", *args.split()]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        print("exit", exc.code, "flwr imported" if "flwr" in sys.modules else "flwr not imported")
"""


def test_record_seeds_bad_arguments_are_named_before_flower_starts(tmp_path):
    pytest.importorskip("torch")
    script = ROOT / "examples" / "flower" / "record_seeds.py"
    bad = ["--rule nope", "--runs 0", "--lr nan", "--threshold 2", "--clients x"]
    done = subprocess.run([sys.executable, "-c", _RECORD_SEEDS, str(script), *bad], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.splitlines() == ["exit 2 flwr not imported"] * len(bad), done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    expected = ["argument --rule: invalid choice: 'nope' (choose from 'and_mask', ",
                "argument --runs: must be an integer >= 1; got 0",
                "argument --lr: must be a finite number > 0; got nan",
                "argument --threshold: must be a finite number in [0, 1]; got 2",
                "argument --clients: 'x' is not an integer"]
    assert len(errors) == len(expected), done.stderr
    for line, message in zip(errors, expected):
        assert line.startswith("record_seeds.py: error: " + message), line
    assert not (tmp_path / "never-written").exists()
