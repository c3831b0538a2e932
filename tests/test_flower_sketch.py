"""mianalysis.flower records sketches: record_runs and record_deployment with ``sketch=``
write the sketch of what the same federation writes without one, the manifest holds the
sketch, and a sketch that does not fit the model is named before any client trains.

Everything runs on a LocalGrid in this process (no SuperLink, no Ray, no network), as in
tests/test_flower.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from mianalysis import ParameterDump, Sketch  # noqa: E402
from mianalysis.dumps import DumpError  # noqa: E402
from mianalysis.flower import FedRule, LocalGrid, record_deployment, record_runs, with_partition_id  # noqa: E402

# A model of two tensors: "w" (60 values, sketched onto 8 rows) and "b" (4 values, kept whole).
SHAPES = [("w", (6, 10)), ("b", (4,))]
SKETCH = Sketch(size=8, seed=3)
ARGS = dict(num_partitions=3, rounds=2, seeds=[0, 1, 2])
# Client p's update: (seed + 1) times its own fixed random direction, so clients and runs differ.
UPDATES = {p: {n: np.random.default_rng(p).standard_normal(s).astype(np.float32) for n, s in SHAPES}
           for p in range(3)}


def client_app(calls=None):
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        if calls is not None:
            calls.append(context.run_config["seed"])
        p, factor = int(context.node_config["partition-id"]), context.run_config["seed"] + 1
        received = msg.content["arrays"]
        arrays = {n: Array(received[n].numpy() + np.float32(factor) * UPDATES[p][n]) for n in received.keys()}
        content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": p + 1})})
        return Message(with_partition_id(content, context), reply_to=msg)

    return app


def start_model(seed, shapes=SHAPES):
    rng = np.random.default_rng(100 + seed)
    return ArrayRecord({n: Array(rng.standard_normal(s).astype(np.float32)) for n, s in shapes})


def server_app(shapes_of=lambda seed: SHAPES, sketch=None, deployed=False):
    """FedAvg (FedRule's: replies combined in a fixed order, so both routes give the same
    bytes) from a model drawn from the seed (tensors `shapes_of(seed)`); with `deployed`,
    recording itself with record_deployment (and `sketch`)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        seed = context.run_config["seed"]
        strategy = FedRule("fedavg", fraction_evaluate=0.0)
        if not deployed:
            strategy.start(grid, start_model(seed, shapes_of(seed)), num_rounds=2)
            return
        with record_deployment(grid, context, rounds=2, sketch=sketch) as recording:
            strategy.start(recording, start_model(seed), num_rounds=2)

    return app


def test_a_sketched_recording_holds_the_sketch_of_the_full_recording(tmp_path):
    full = record_runs(server_app(), client_app(), tmp_path / "full", **ARGS)
    sketched = record_runs(server_app(), client_app(), tmp_path / "sketched", sketch=SKETCH, **ARGS)
    assert [(e.name, e.shape) for e in full.layout] == SHAPES
    assert [(e.name, e.shape) for e in sketched.layout] == [("w[sketch]", (8,)), ("b", (4,))]
    assert sketched.sketch == SKETCH and sketched.sketch_source == SHAPES and sketched.completed_runs == 3
    assert sketched.metric_names == full.metric_names == ["num-examples"]
    for c in full.clients:
        for t in range(3):
            values = full.samples(c, index=t)  # (runs, 64)
            assert len(np.unique(values[:, 0])) == 3  # the runs differ
            np.testing.assert_allclose(sketched.samples(c, index=t), SKETCH.apply_vector(values, SHAPES),
                                       rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(sketched.samples(c, index=t)[:, 8:], values[:, 60:])  # "b", kept whole
    # The clients' distances are the parameters' within the sketch's error (here, 8 rows, a loose one).
    d_full = np.linalg.norm(full.samples("0", index=2) - full.samples("1", index=2), axis=1)
    d_sketch = np.linalg.norm(sketched.samples("0", index=2) - sketched.samples("1", index=2), axis=1)
    assert np.all(np.abs(d_sketch / d_full - 1) < SKETCH.error())


def test_the_manifest_records_the_sketch_and_a_deployment_writes_the_same_dump(tmp_path):
    local = record_runs(server_app(), client_app(), tmp_path / "local", sketch=SKETCH, **ARGS)
    manifest = json.loads((tmp_path / "local" / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert manifest["sketch"] == {"kind": "sparse-sign", "size": 8, "seed": 3, "nnz": 4, "split": "tensor",
                                  "tensors": [{"name": "w", "shape": [6, 10], "size": 8},
                                              {"name": "b", "shape": [4], "size": 4}]}
    out = tmp_path / "deployed"
    for run, seed in enumerate(ARGS["seeds"]):  # one `flwr run` each
        config = {"seed": seed, "mianalysis.dump": str(out), "mianalysis.run": run, "mianalysis.runs": 3}
        with LocalGrid(client_app(), 3, run_config=config, run_id=run + 1) as grid:
            server_app(sketch=SKETCH, deployed=True)(
                grid, Context(run_id=run + 1, node_id=1, node_config={}, state=RecordDict(), run_config=config))
    deployed = ParameterDump.open(out)
    assert deployed.sketch == SKETCH and deployed.chunk_records() == local.chunk_records()


def test_a_sketch_that_does_not_fit_is_named_before_anything_is_written(tmp_path):
    calls: list = []
    with pytest.raises(TypeError, match="`sketch` must be a mianalysis.dumps.Sketch or None; got int"):
        record_runs(server_app(), client_app(calls), tmp_path / "d", sketch=8, **ARGS)
    # A sketch of at least as many rows as the largest tensor would record the parameters themselves.
    with pytest.raises(ValueError, match=r"`sketch` \(sparse-sign, 60 rows per tensor, nnz 4, seed 0\) keeps every "
                                         r"tensor of the model sent in round 1 whole \(its largest tensor has 60 "
                                         r"values, the sketch 60 rows per tensor\)"):
        record_runs(server_app(), client_app(calls), tmp_path / "d", sketch=Sketch(size=60), **ARGS)
    with pytest.raises(ValueError, match=r"keeps every tensor .* whole \(its 64 values, the sketch 64 rows in all\)"):
        record_runs(server_app(), client_app(calls), tmp_path / "d", sketch=Sketch(size=64, split="total"), **ARGS)
    assert calls == [] and not (tmp_path / "d").exists()
    # A model whose tensors are not those the dump's sketch was taken of: run 2's "w" is named "v".
    renamed = server_app(lambda seed: [("v" if n == "w" and seed == 2 else n, s) for n, s in SHAPES])
    with pytest.raises(ValueError, match=r"the model sent in round 1 lacks \['w'\], compared with the tensors the "
                                         r"sketch of .*d was taken of, \[\('w', \(6, 10\)\), \('b', \(4,\)\)\]"):
        record_runs(renamed, client_app(calls), tmp_path / "d", sketch=SKETCH, **ARGS)
    assert calls == [0] * 6 + [1] * 6  # run 2 trained nowhere
    written = (tmp_path / "d" / "manifest.json").read_bytes()
    assert ParameterDump.open(tmp_path / "d").completed_runs == 2
    # Resuming with another sketch (or none) is refused before the app runs.
    for other in (Sketch(size=8, seed=4), None):
        with pytest.raises(DumpError, match="other settings .*'sketch'"):
            record_runs(server_app(), client_app(calls), tmp_path / "d", sketch=other, **ARGS)
    assert calls == [0] * 6 + [1] * 6 and (tmp_path / "d" / "manifest.json").read_bytes() == written
