"""mianalysis.flower: the FedRule strategy and the recorder, driven in this process.

Everything runs on a LocalGrid that calls the ClientApp's handlers directly: no SuperLink,
no simulation engine (no Ray), no network. Hand-made clients add fixed updates that can be
checked by eye; the digits example (examples/flower) is driven the same way.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from mianalysis import DumpWriter, ParameterDump, analyze  # noqa: E402
from mianalysis.federated.aggregation import and_mask, fedavg, geometric_mask, median, trimmed_mean  # noqa: E402
from mianalysis.dumps.writer import IncompleteChunkWarning  # noqa: E402
from mianalysis.flower import (DEPLOYMENT_CONFIG, FedRule, LocalGrid, RecordingGrid, RunRecorder,  # noqa: E402
                               record_deployment, record_runs, with_partition_id)
from mianalysis.flower.seeding import seeded_globals  # noqa: E402
from mianalysis.sampling import replica_seed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flower"

# Three hand-made clients: the update each adds to the model it receives (two arrays, 4
# values), and its number of examples. Small integers and halves: every sum below is exact.
UPDATES = {0: {"w": [1.0, 3.0, 5.0], "b": [0.5]},
           1: {"w": [0.0, 3.0, -5.0], "b": [-1.0]},
           2: {"w": [2.0, -1.0, 4.0], "b": [0.5]}}
EXAMPLES = {0: 1, 1: 2, 2: 3}
START = {"w": np.array([0.5, -1.0, 2.0], dtype=np.float32), "b": np.array([1.0], dtype=np.float32)}


def record_of(arrays):
    return ArrayRecord({name: Array(np.asarray(a)) for name, a in arrays.items()})


def hand_made_app(*, tag=True, num_examples=True, scale_by_seed=False):
    """Client p replies with the received arrays plus UPDATES[p] (times the run's seed + 1
    with `scale_by_seed`), and EXAMPLES[p] as its number of examples."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        p = int(context.node_config["partition-id"])
        factor = context.run_config.get("seed", 0) + 1 if scale_by_seed else 1
        received = msg.content["arrays"]
        arrays = {name: received[name].numpy() + np.float32(factor) * np.asarray(UPDATES[p][name], np.float32)
                  for name in received.keys()}
        metrics = MetricRecord({"num-examples": EXAMPLES[p], "loss": float(p)} if num_examples else {"loss": 1.0})
        content = RecordDict({"arrays": record_of(arrays), "metrics": metrics})
        return Message(with_partition_id(content, context) if tag else content, reply_to=msg)

    return app


def stacked_updates():
    """(3, 4) float64: the clients' updates flattened in the model's order (w, then b)."""
    return np.array([np.concatenate([UPDATES[p]["w"], UPDATES[p]["b"]]) for p in range(3)])


def one_round(strategy, app=None, start=START, num_partitions=3):
    """The global model after one round of `strategy` on the hand-made clients, flattened."""
    with LocalGrid(app or hand_made_app(), num_partitions) as grid:
        result = strategy.start(grid, record_of(start), num_rounds=1)
    return np.concatenate([result.arrays[name].numpy() for name in result.arrays.keys()])


def start_vector():
    return np.concatenate([START["w"], START["b"]]).astype(np.float64)


# ---------------------------------------------------------------------------- the strategy


def test_and_mask_by_eye():
    # Two equally weighted clients, the AND-mask's worked example (Parascandolo et al.):
    # signs agree on the first two coordinates only; the mean [0.5, 3, 0] is rescaled by
    # 1 / (2/3), the fraction kept: [0.75, 4.5, 0].
    updates = {0: [1.0, 3.0, 5.0], 1: [0.0, 3.0, -5.0]}
    app = ClientApp()

    @app.train()
    def train(msg, context):
        p = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy() + np.asarray(updates[p], np.float32)
        return Message(RecordDict({"arrays": record_of({"w": w}), "metrics": MetricRecord({"num-examples": 5})}),
                       reply_to=msg)

    got = one_round(FedRule("and_mask", rule_params={"threshold": 0.2}, fraction_evaluate=0.0), app,
                    {"w": np.zeros(3, np.float32)}, 2)
    np.testing.assert_allclose(got, [0.75, 4.5, 0.0])


@pytest.mark.parametrize("rule, params, reference", [
    ("and_mask", {"threshold": 0.5}, lambda x, w: and_mask(x, threshold=0.5, weights=w)),
    ("and_mask", {"threshold": 0.2, "rescale": False}, lambda x, w: and_mask(x, threshold=0.2, rescale=False, weights=w)),
    ("geometric_mask", {"threshold": 0.5}, lambda x, w: geometric_mask(x, threshold=0.5, weights=w)),
    ("median", {}, lambda x, w: median(x, weights=w)),
    ("trimmed_mean", {"beta": 0.2}, lambda x, w: trimmed_mean(x, beta=0.2, weights=w)),
    ("fedavg", {}, lambda x, w: fedavg(x, weights=w)),
])
def test_aggregate_is_the_rule_on_the_updates(rule, params, reference):
    got = one_round(FedRule(rule, rule_params=params, fraction_evaluate=0.0))
    weights = np.array([EXAMPLES[p] for p in range(3)], dtype=float)
    expected = (start_vector() + reference(stacked_updates(), weights)).astype(np.float32)
    np.testing.assert_array_equal(got, expected)


def test_weighted_median_by_eye():
    # Per coordinate, the clients' values with weights 1, 2, 3 (half the total weight is 3):
    # w0 [1, 0, 2]: sorted 0 (2), 1 (1), 2 (3); cumulative 2, 3, 6: half reached at 1, passed
    # at 2 -> 1.5. w1 [3, 3, -1]: -1 (3) reaches half, 3 passes it -> 1. w2 [5, -5, 4]:
    # -5 (2), 4 (3) reaches and passes half -> 4. b [.5, -1, .5]: -1 (2), .5 -> .5.
    got = one_round(FedRule("median", fraction_evaluate=0.0))
    np.testing.assert_array_equal(got - start_vector().astype(np.float32), [1.5, 1.0, 4.0, 0.5])


def test_unweighted_rule_ignores_example_counts():
    got = one_round(FedRule("median", weighted=False, fraction_evaluate=0.0))
    np.testing.assert_array_equal(got - start_vector().astype(np.float32), [1.0, 3.0, 4.0, 0.5])


def test_fedavg_rule_matches_flowers_fedavg_over_rounds():
    ours = FedRule("fedavg", fraction_evaluate=0.0)
    theirs = FedAvg(fraction_evaluate=0.0)
    results = []
    for strategy in (ours, theirs):
        with LocalGrid(hand_made_app(), 3) as grid:
            results.append(strategy.start(grid, record_of(START), num_rounds=3).arrays)
    for name in ("w", "b"):
        np.testing.assert_allclose(results[0][name].numpy(), results[1][name].numpy(), rtol=1e-6)
    # By eye: each round adds the example-weighted mean update (1*u0 + 2*u1 + 3*u2) / 6.
    step = (stacked_updates() * np.array([[1], [2], [3]])).sum(0) / 6
    np.testing.assert_allclose(np.concatenate([results[0]["w"].numpy(), results[0]["b"].numpy()]),
                               start_vector() + 3 * step, rtol=1e-6)


def test_reply_order_does_not_change_the_result():
    strategy = FedRule("and_mask", rule_params={"threshold": 0.5}, fraction_evaluate=0.0)
    with LocalGrid(hand_made_app(), 3) as grid:
        messages = list(strategy.configure_train(1, record_of(START), ConfigRecord(), grid))
        replies = list(grid.send_and_receive(messages))
        forward, _ = strategy.aggregate_train(1, replies)
        backward, _ = strategy.aggregate_train(1, replies[::-1])
    for name in ("w", "b"):
        assert forward[name].numpy().tobytes() == backward[name].numpy().tobytes()


def test_metrics_are_aggregated_as_fedavg_does():
    strategy = FedRule("median", fraction_evaluate=0.0)
    with LocalGrid(hand_made_app(), 3) as grid:
        result = strategy.start(grid, record_of(START), num_rounds=1)
    # loss p weighted by examples p + 1: (0*1 + 1*2 + 2*3) / 6.
    assert result.train_metrics_clientapp[1]["loss"] == pytest.approx(8 / 6)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"rule": "mean"}, ValueError, "`rule` must be one of 'and_mask', .*; got 'mean'"),
    ({"rule": "and_mask", "rule_params": {"threshold": 2}}, ValueError, "`threshold` must be a finite number in"),
    ({"rule": "median", "rule_params": {"beta": 0.1}}, TypeError, "do not fit the rule 'median'"),
    ({"rule": "median", "rule_params": [0.1]}, TypeError, "`rule_params` must be a dict"),
    ({"rule": "median", "weighted": "yes"}, TypeError, "`weighted` must be True or False"),
])
def test_bad_settings_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        FedRule(**kwargs)


def test_reply_without_example_count_is_named():
    with pytest.raises(ValueError, match="has no number 'num-examples' in its MetricRecord"):
        one_round(FedRule("median", fraction_evaluate=0.0), hand_made_app(num_examples=False))
    # Unweighted, the count is not needed.
    got = one_round(FedRule("median", weighted=False, fraction_evaluate=0.0), hand_made_app(num_examples=False))
    np.testing.assert_array_equal(got - start_vector().astype(np.float32), [1.0, 3.0, 4.0, 0.5])


def test_integer_arrays_are_refused_with_their_name():
    app = ClientApp()

    @app.train()
    def train(msg, context):  # sends back what it received
        return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    start = {"w": START["w"], "steps": np.array([3], dtype=np.int64)}
    with pytest.raises(TypeError, match="array 'steps' has dtype int64; only floating-point"):
        one_round(FedRule("median", fraction_evaluate=0.0), app, start=start)


def test_local_grid_gives_each_node_its_partition_and_a_copy():
    seen = []
    app = ClientApp()

    @app.train()
    def train(msg, context):
        seen.append((context.node_id, context.node_config["partition-id"], context.node_config["num-partitions"]))
        msg.content["arrays"]["w"] = Array(np.full(3, 99.0, np.float32))  # must not reach the next node
        return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    got = one_round(FedRule("fedavg", fraction_evaluate=0.0), app)
    assert sorted(seen) == [(1000, 0, 3), (1001, 1, 3), (1002, 2, 3)]
    np.testing.assert_array_equal(got[:3], [99.0, 99.0, 99.0])


def test_local_grid_rejects_unknown_nodes():
    grid = LocalGrid(hand_made_app(), 2)
    with grid, pytest.raises(ValueError, match="message to node 7, which is not in this grid"):
        grid.send_and_receive([Message(RecordDict(), 7, "train")])


# ---------------------------------------------------------------------------- the recorder


def hand_made_server(rule="median"):
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        start = {name: a + np.float32(context.run_config["seed"]) for name, a in START.items()}
        FedRule(rule, fraction_evaluate=0.0).start(grid, record_of(start), num_rounds=int(context.run_config["rounds"]))

    return app


def expected_models(seed, rounds):
    """Every client's model at rounds 0..rounds of the hand-made run with `seed`: (3, rounds + 1, 4)."""
    factor = seed + 1
    updates = factor * stacked_updates()
    global_model = start_vector() + seed
    out = np.empty((3, rounds + 1, 4))
    out[:, 0] = global_model
    for t in range(1, rounds + 1):
        local = global_model + updates  # (3, 4)
        out[:, t] = local
        global_model = (global_model + median(updates, weights=np.array([1.0, 2.0, 3.0]))).astype(np.float32)
    return out.astype(np.float32)


def test_record_runs_quiets_flowers_info_messages_unless_verbose(tmp_path, caplog):
    import logging

    log = logging.getLogger("flwr")
    before = log.level
    args = dict(num_partitions=2, rounds=1, seeds=[0], run_config={"rounds": 1})
    with caplog.at_level(logging.INFO, logger="flwr"):
        record_runs(hand_made_server(), hand_made_app(), tmp_path / "quiet", **args)
        quiet = [r for r in caplog.records if r.name.startswith("flwr") and r.levelno < logging.WARNING]
        caplog.clear()
        record_runs(hand_made_server(), hand_made_app(), tmp_path / "verbose", verbose=True, **args)
        verbose = [r for r in caplog.records if r.name.startswith("flwr") and r.levelno < logging.WARNING]
    assert not quiet and verbose  # the same recording, with and without Flower's INFO lines
    assert log.level == before


def test_record_runs_stores_every_clients_arrays(tmp_path):
    out = tmp_path / "dump"
    dump = record_runs(hand_made_server(), hand_made_app(scale_by_seed=True), out, num_partitions=3, rounds=2,
                       seeds=[0, 3], run_config={"rounds": 2})
    assert dump.clients == ["0", "1", "2"] and dump.checkpoints == [0, 1, 2] and dump.completed_runs == 2
    assert [(e.name, e.shape) for e in dump.layout] == [("w", (3,)), ("b", (1,))]
    assert dump.meta["flower"]["seeds"] == [0, 3]
    # The replies' metrics are the records' metrics (checkpoint 0, the model sent, has none).
    assert dump.metric_names == ["loss", "num-examples"]
    np.testing.assert_array_equal(dump.metric("2", "loss"), [[np.nan, np.nan], [2.0, 2.0], [2.0, 2.0]])
    np.testing.assert_array_equal(dump.metric("1", "num-examples")[1:], [[2.0, 2.0], [2.0, 2.0]])
    for run, seed in enumerate([0, 3]):
        models = expected_models(seed, 2)
        for c in range(3):
            for t in range(3):
                np.testing.assert_array_equal(dump.samples(str(c), index=t)[run], models[c, t])
    assert dump.verify() == 2


def test_record_runs_resumes_and_refuses_another_recording(tmp_path):
    out = tmp_path / "dump"
    args = dict(num_partitions=3, rounds=2, run_config={"rounds": 2})
    calls = []
    app = hand_made_app(scale_by_seed=True)
    counting = ClientApp()

    @counting.train()
    def train(msg, context):
        calls.append(context.run_config["seed"])
        return app(msg, context)

    first = record_runs(hand_made_server(), counting, out, seeds=[0, 3], **args)
    before = {c: first.samples(c, index=2).copy() for c in first.clients}
    calls.clear()
    again = record_runs(hand_made_server(), counting, out, seeds=[0, 3], **args)
    assert calls == [] and again.completed_runs == 2  # nothing rerun
    for c in again.clients:
        np.testing.assert_array_equal(again.samples(c, index=2), before[c])
    with pytest.raises(ValueError, match="holds a dump with other settings"):
        record_runs(hand_made_server(), counting, out, seeds=[0, 4], **args)


def test_record_runs_after_a_failure_keeps_the_written_runs_and_resumes(tmp_path):
    out, args = tmp_path / "dump", dict(num_partitions=3, rounds=2, seeds=[0, 3], run_config={"rounds": 2})
    app, calls = hand_made_app(scale_by_seed=True), []
    failing = ClientApp()

    @failing.train()
    def train(msg, context):
        calls.append(context.run_config["seed"])
        if context.run_config["seed"] == 3 and len(calls) == 11:  # run 1, round 2, second client
            raise RuntimeError("node lost")
        return app(msg, context)

    with pytest.raises(RuntimeError, match="node lost"), pytest.warns(IncompleteChunkWarning):
        record_runs(hand_made_server(), failing, out, **args)
    assert ParameterDump.open(out).completed_runs == 1  # run 0 stays
    calls.clear()
    dump = record_runs(hand_made_server(), failing, out, **args)
    assert calls == [3] * 6 and dump.completed_runs == 2  # only run 1 ran again
    for run, seed in enumerate([0, 3]):
        np.testing.assert_array_equal(dump.samples("1", index=2)[run], expected_models(seed, 2)[1, 2])


def test_incomplete_rounds_are_named_and_nothing_is_written(tmp_path):
    server = ServerApp()

    @server.main()
    def main(grid, context):
        # Two of three nodes per round: some client misses round 1 for certain.
        FedRule("median", fraction_train=0.5, fraction_evaluate=0.0).start(grid, record_of(START), num_rounds=2)

    with pytest.raises(ValueError, match=r"run 0 is incomplete: \d+ of 9 \(client, round\) records are missing"), \
            pytest.warns(IncompleteChunkWarning):
        record_runs(server, hand_made_app(), tmp_path / "dump", num_partitions=3, rounds=2, seeds=[0])
    assert not (tmp_path / "dump").exists()


def test_more_rounds_than_recorded_is_named(tmp_path):
    with pytest.raises(ValueError, match="more training rounds than the 1 being recorded"):
        record_runs(hand_made_server(), hand_made_app(), tmp_path / "dump", num_partitions=3, rounds=1, seeds=[0],
                    run_config={"rounds": 2})


def test_recording_grid_needs_to_know_the_client(tmp_path):
    class Other(Grid):  # a grid that is not a LocalGrid, e.g. Flower's own in a deployment
        def __init__(self, inner):
            self.inner = inner

        def set_run(self, run):
            self.inner.set_run(run)

        @property
        def run(self):
            return self.inner.run

        def create_message(self, *args, **kwargs):
            return self.inner.create_message(*args, **kwargs)

        def get_node_ids(self):
            return self.inner.get_node_ids()

        def push_messages(self, messages):
            return self.inner.push_messages(messages)

        def pull_messages(self, message_ids):
            return self.inner.pull_messages(message_ids)

        def send_and_receive(self, messages, *, timeout=None):
            return self.inner.send_and_receive(messages, timeout=timeout)

    untagged, tagged = hand_made_app(tag=False), hand_made_app(tag=True)
    settings = dict(clients=range(3), checkpoints=[0, 1], runs=1, chunk_size=1)
    with DumpWriter(tmp_path / "untagged", **settings) as writer, LocalGrid(untagged, 3) as local:
        grid = RecordingGrid(Other(local), RunRecorder(writer, 0))
        with pytest.raises(ValueError, match="does not say which partition it comes from"):
            FedRule("median", fraction_evaluate=0.0).start(grid, record_of(START), num_rounds=1)
    with DumpWriter(tmp_path / "tagged", **settings) as writer, LocalGrid(tagged, 3) as local:
        recorder = RunRecorder(writer, 0)
        FedRule("median", fraction_evaluate=0.0).start(RecordingGrid(Other(local), recorder), record_of(START),
                                                        num_rounds=1)
    assert recorder.missing() == []
    np.testing.assert_array_equal(writer.dump.samples("2", index=1)[0], start_vector() + stacked_updates()[2])


def test_recorder_checks_what_it_is_given(tmp_path):
    with pytest.warns(IncompleteChunkWarning), \
            DumpWriter(tmp_path / "d", clients=[0, 1], checkpoints=[0, 1, 2], runs=1) as writer:
        recorder = RunRecorder(writer, 0)
        recorder.record(0, 1, {"w": np.zeros(3, np.float32)})
        with pytest.raises(ValueError, match="client 0 at round 1 was already recorded"):
            recorder.record(0, 1, {"w": np.zeros(3, np.float32)})
        with pytest.raises(ValueError, match=r"tensor 'w' has shape \(4,\), not \(3,\)"):
            recorder.record(1, 1, {"w": np.zeros(4, np.float32)})
        with pytest.raises(ValueError, match="client '5' is not one of the recorded clients"):
            recorder.record(5, 1, {"w": np.zeros(3, np.float32)})
        with pytest.raises(ValueError, match="`checkpoint` must be a round in 0-2; got 3"):
            recorder.record(1, 3, {"w": np.zeros(3, np.float32)})
        assert recorder.missing() == [("0", 0), ("0", 2), ("1", 0), ("1", 1), ("1", 2)]
        with pytest.raises(ValueError, match=r"5 of 6 \(client, round\) records are missing \(client 0 round 0, "):
            recorder.check_complete()
    with pytest.raises(ValueError, match=r"checkpoints must be the rounds 0, 1, ..., R; got \[0, 10\]"), \
            DumpWriter(tmp_path / "e", clients=[0], checkpoints=[0, 10], runs=1) as writer:
        RunRecorder(writer, 0)


def test_a_recorded_flower_dump_can_be_analysed(tmp_path):
    dump = record_runs(hand_made_server(), hand_made_app(scale_by_seed=True), tmp_path / "dump", num_partitions=3,
                       rounds=1, seeds=range(6), run_config={"rounds": 1})
    rows = analyze(dump, estimators=[], metrics=["euclidean"])
    row = next(r for r in rows if r["checkpoint"] == 1 and (r["client_a"], r["client_b"]) == ("0", "1"))
    # Run s: the clients started from the same model and added (s + 1) times their updates,
    # so they are (s + 1) * |u0 - u1| = (s + 1) * |(1, 0, 10, 1.5)| apart; mean over s = 0..5.
    assert row["quantity"] == "euclidean" and row["n_runs"] == 6
    assert row["value"] == pytest.approx(3.5 * np.sqrt(103.25), rel=1e-6)


def unseeded_apps():
    """A ServerApp and a ClientApp that read no seed: the initial model is NumPy's global
    generator's, each client adds PyTorch's and Python's global random numbers."""
    import random

    import torch

    server, client = ServerApp(), ClientApp()

    @server.main()
    def main(grid, context):
        start = {"w": np.random.standard_normal(3).astype(np.float32)}
        FedRule("fedavg", fraction_evaluate=0.0).start(grid, record_of(start), num_rounds=2)

    @client.train()
    def train(msg, context):
        w = msg.content["arrays"]["w"].numpy() + torch.randn(3).numpy() + np.float32(random.random())
        return Message(with_partition_id(RecordDict({"arrays": record_of({"w": w}), "metrics": MetricRecord(
            {"num-examples": 1})}), context), reply_to=msg)

    return server, client


def global_states():
    import random

    import torch

    return random.getstate(), np.random.get_state()[1].tobytes(), torch.get_rng_state().numpy().tobytes()


def test_record_runs_seeds_an_app_that_reads_no_seed(tmp_path):
    args = dict(num_partitions=3, rounds=2, seeds=[0, 1])
    before = global_states()
    first = record_runs(*unseeded_apps(), tmp_path / "a", **args)
    again = record_runs(*unseeded_apps(), tmp_path / "b", **args)
    assert global_states() == before  # the caller's generators are as they were
    # The same seeds give the same bytes; the seeds' runs differ, and so do the clients.
    assert first.chunk_records() == again.chunk_records()
    run0, run1 = (chunk["sha256"] for chunk in first.chunk_records())
    assert run0["0"] != run1["0"] and len(set(run0.values())) == 3


def test_an_app_importing_torch_in_its_handler_is_seeded_from_its_first_call():
    """A fresh process where nothing imported torch yet: the first seeded call, which
    imports it itself, draws what a later call with the same seed draws."""
    code = ("import sys\nfrom mianalysis.flower.seeding import seeded_globals\n"
            "assert 'torch' not in sys.modules\n"
            "with seeded_globals(5, 1):\n    import torch\n    first = torch.rand(3).tolist()\n"
            "with seeded_globals(5, 1):\n    again = torch.rand(3).tolist()\n"
            "print(first == again)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


class _FakeCuda:
    """torch.cuda's generator functions, recorded (a CUDA that is initialised)."""

    def __init__(self, initialised):
        self.initialised, self.state, self.calls = initialised, ["caller's"], []

    def is_initialized(self):
        return self.initialised

    def get_rng_state_all(self):
        return list(self.state)

    def set_rng_state_all(self, states):
        self.calls.append("restore")
        self.state = list(states)

    def manual_seed_all(self, seed):
        self.calls.append("seed")
        self.state = [f"seeded {seed}"]


@pytest.mark.parametrize("initialised", [True, False])
def test_cuda_generators_are_seeded_and_restored_only_when_cuda_is_initialised(monkeypatch, initialised):
    import torch

    fake = _FakeCuda(initialised)
    monkeypatch.setattr(torch, "cuda", fake)
    monkeypatch.setattr(torch, "manual_seed", lambda seed: pytest.fail("torch.manual_seed queues a CUDA seed"))
    inside = []
    with seeded_globals(5, 1):
        inside.append(list(fake.state))
    if initialised:
        assert inside == [[f"seeded {replica_seed(5, 1)}"]] and fake.calls == ["seed", "restore"]
    else:
        assert fake.calls == []
    assert fake.state == ["caller's"]


def test_local_grid_seeds_each_message_of_each_node_apart():
    import torch

    draws = []
    app = ClientApp()

    @app.train()
    def train(msg, context):
        draws.append((context.node_config["partition-id"], float(torch.rand(1))))
        return Message(RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    def two_rounds(seed):
        draws.clear()
        with LocalGrid(app, 2, seed=seed) as grid:
            FedRule("fedavg", fraction_evaluate=0.0).start(grid, record_of(START), num_rounds=2)
        return list(draws)

    # Sorted: FedAvg samples the nodes with Python's `random`, which only record_runs seeds
    # on the server side, so the nodes may be called in another order.
    a, b, other = sorted(two_rounds(5)), sorted(two_rounds(5)), sorted(two_rounds(6))
    assert a == b and len({x for _, x in a}) == 4  # 2 nodes x 2 rounds, each its own stream
    assert [x for _, x in a] != [x for _, x in other]
    with pytest.raises(ValueError, match="`seed` must be"):
        LocalGrid(app, 2, seed=-1)


def deployed_style_server(meta=None, grids=None):
    """The hand-made ServerApp, recording itself with record_deployment (as in a deployment);
    `grids` (a list) gets (the grid given, the grid record_deployment yielded) of each run."""
    app = ServerApp()

    @app.main()
    def main(grid, context):
        start = {name: a + np.float32(context.run_config["seed"]) for name, a in START.items()}
        with record_deployment(grid, context, rounds=2, meta=meta) as recording:
            if grids is not None:
                grids.append((grid, recording))
            FedRule("median", fraction_evaluate=0.0).start(recording, record_of(start), num_rounds=2)

    return app


def run_as_deployed(server, client, config, run_id=1):
    with LocalGrid(client, 3, run_config=config, run_id=run_id) as grid:
        server(grid, Context(run_id=run_id, node_id=1, node_config={}, state=RecordDict(), run_config=dict(config)))


def test_record_deployment_writes_what_record_runs_writes(tmp_path):
    client = hand_made_app(scale_by_seed=True)
    local = record_runs(hand_made_server(), client, tmp_path / "local", num_partitions=3, rounds=2, seeds=[0, 3],
                        run_config={"rounds": 2})
    out = tmp_path / "deployed"
    for run, seed in enumerate([0, 3]):  # one `flwr run` each, with its seed and run index
        run_as_deployed(deployed_style_server(), client, {"rounds": 2, "seed": seed, "mianalysis.dump": str(out),
                                                          "mianalysis.run": run, "mianalysis.runs": 2}, run + 1)
    deployed = ParameterDump.open(out)
    assert deployed.chunk_records() == local.chunk_records() and deployed.completed_runs == 2
    assert deployed.meta["flower"] == {"num_partitions": 3, "rounds": 2, "seed_key": "seed",
                                       "run_config": {"rounds": 2}, "deployment": True}
    # Without "mianalysis.dump" the app runs unrecorded (record_runs records it then): the grid
    # yielded is the one given, and no dump is written anywhere.
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    grids: list = []
    run_as_deployed(deployed_style_server(grids=grids), client, {"rounds": 2, "seed": 0})
    assert len(grids) == 1 and grids[0][1] is grids[0][0] and isinstance(grids[0][0], LocalGrid)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("entries, error, match", [
    ({"mianalysis.dump": "relative/dump"}, ValueError, "'mianalysis.dump' must be an absolute path"),
    ({"mianalysis.dump": 3}, TypeError, "'mianalysis.dump' must be a folder path"),
    ({"mianalysis.run": 2, "mianalysis.runs": 2}, ValueError, "`mianalysis.run` must be"),
    ({"mianalysis.runs": 0}, ValueError, "`mianalysis.runs` must be"),
])
def test_record_deployment_names_bad_entries(tmp_path, entries, error, match):
    config = {"rounds": 2, "seed": 0, "mianalysis.dump": str(tmp_path / "d"), **entries}
    with pytest.raises(error, match=match):
        run_as_deployed(deployed_style_server(), hand_made_app(), config)
    assert not (tmp_path / "d").exists()


def test_record_deployment_refuses_a_written_run(tmp_path):
    config = {"rounds": 2, "seed": 0, "mianalysis.dump": str(tmp_path / "d"), "mianalysis.runs": 2}
    run_as_deployed(deployed_style_server(), hand_made_app(), config)
    with pytest.raises(ValueError, match="run 0 of the dump .* is already written: give this `flwr run` another "
                                         r"'mianalysis.run' \(runs not written yet: \[1\]\)"):
        run_as_deployed(deployed_style_server(), hand_made_app(), config)


def test_record_deployment_refuses_the_seed_of_a_written_run(tmp_path):
    # Issue 50: two `flwr run`s with one seed at different run indices wrote the same run twice;
    # record_runs refuses a repeated seed, and so does record_deployment, before the app trains.
    out = tmp_path / "d"
    config = {"rounds": 2, "seed": 3, "mianalysis.dump": str(out), "mianalysis.runs": 3}
    run_as_deployed(deployed_style_server(), hand_made_app(), {**config, "mianalysis.run": 0})
    manifest = (out / "manifest.json").read_bytes()
    grids: list = []
    with pytest.raises(ValueError, match=r"the run config's 'seed' 3 is the seed of run 0 of the dump .*d, already "
                                         r"written \(a repeated seed records the same run twice\): give this `flwr "
                                         r"run` another seed"):
        run_as_deployed(deployed_style_server(grids=grids), hand_made_app(), {**config, "mianalysis.run": 2}, 2)
    assert grids == [] and (out / "manifest.json").read_bytes() == manifest  # refused before training, unchanged
    # Another seed is recorded, and each run's seed is in its session's provenance record.
    run_as_deployed(deployed_style_server(), hand_made_app(), {**config, "seed": 5, "mianalysis.run": 2}, 3)
    dump = ParameterDump.open(out)
    assert dump.written_runs == 2
    assert [(s["flower"], s["runs_written"]) for s in dump.provenance] == [({"run": 0, "seed": 3}, [0, 1]),
                                                                           ({"run": 2, "seed": 5}, [2, 3])]
    with pytest.raises(ValueError, match=r"'seed' 5 is the seed of run 2 of the dump"):
        run_as_deployed(deployed_style_server(), hand_made_app(), {**config, "seed": 5, "mianalysis.run": 1}, 4)
    # Run 1 with a seed of its own completes the dump.
    run_as_deployed(deployed_style_server(), hand_made_app(), {**config, "seed": 7, "mianalysis.run": 1}, 5)
    assert ParameterDump.open(out).complete


def test_repeated_seeds_is_the_check_of_record_runs_and_record_deployment():
    from mianalysis.flower.recorder import repeated_seeds

    assert repeated_seeds({0: 0, 1: 1, 2: 2}) == {}
    assert repeated_seeds({4: 7, 0: 7, 1: None, 2: None}) == {7: [0, 4]}  # None: no seed known
    assert repeated_seeds({0: "a", 1: 2, 2: "a", 3: 2}) == {2: [1, 3], "a": [0, 2]}  # sorted by text when mixed
    with pytest.raises(ValueError, match=r"`seeds` must not repeat a seed .*1, 3 are repeated in \[3, 1, 3, 1\]"):
        record_runs(hand_made_server(), hand_made_app(), "/nonexistent/never-written", num_partitions=2, rounds=1,
                    seeds=[3, 1, 3, 1])


# ---------------------------------------------------------------------------- the example


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The digits example's apps and default config, imported from examples/flower."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        modules = {name: importlib.import_module(f"digits_app.{name}") for name in ("client_app", "server_app", "task")}
    finally:
        sys.path.remove(str(EXAMPLE))
    return modules


def test_example_config_matches_its_pyproject(example):
    with open(EXAMPLE / "pyproject.toml", "rb") as fh:
        config = tomllib.load(fh)["tool"]["flwr"]["app"]["config"]
    # The deployment's recording entries (record_deployment), off by default, and the app's own.
    assert {f"mianalysis.{k}": v for k, v in config.pop("mianalysis").items()} == DEPLOYMENT_CONFIG
    assert config == example["task"].DEFAULT_CONFIG


def test_example_dump_holds_what_the_clients_sent(example, tmp_path):
    import torch

    sent = {}  # (seed, partition, round) -> the flat arrays the client replied with
    spy = ClientApp()

    @spy.train()
    def train(msg, context):
        reply = example["client_app"].train_fn(msg, context)
        record = reply.content["arrays"]
        key = (context.run_config["seed"], context.node_config["partition-id"],
               int(msg.content["config"]["server-round"]))
        sent[key] = np.concatenate([record[name].numpy().ravel() for name in record.keys()])
        return reply

    @spy.evaluate()
    def evaluate(msg, context):
        return example["client_app"].evaluate_fn(msg, context)

    config = {**example["task"].DEFAULT_CONFIG, "num-server-rounds": 2, "hidden": 4, "batch-size": 50}
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dump = record_runs(example["server_app"].app, spy, tmp_path / "dump", num_partitions=3, rounds=2,
                           seeds=[0, 1], run_config=config)
    finally:
        torch.set_num_threads(before)
    assert dump.n_params == 64 * 4 + 4 + 4 * 4 + 4 + 4 * 10 + 10
    for run, seed in enumerate([0, 1]):
        initial = example["task"].initial_model(seed, 4).state_dict()
        flat0 = np.concatenate([t.numpy().ravel() for t in initial.values()])
        for c in range(3):
            np.testing.assert_array_equal(dump.samples(str(c), index=0)[run], flat0)
            for t in (1, 2):
                np.testing.assert_array_equal(dump.samples(str(c), index=t)[run], sent[(seed, c, t)])
    # Runs differ (their seeds), clients differ (their data), rounds differ (training).
    assert not np.array_equal(dump.samples("0", index=1)[0], dump.samples("0", index=1)[1])
    assert not np.array_equal(dump.samples("0", index=1)[0], dump.samples("1", index=1)[0])


# ---------------------------------------------------------------------------- docs/flower.md


def flower_page_blocks():
    """The python blocks of docs/flower.md, all marked to be skipped by tests/test_docs.py
    (they need the flower extra) and run here."""
    from test_examples import python_blocks

    blocks = python_blocks((ROOT / "docs" / "flower.md").read_text(), "docs/flower.md")
    assert blocks and all(b.directive is not None and "tests/test_flower.py runs this block" in b.directive
                          for b in blocks), [b.directive for b in blocks]
    return blocks


def test_flower_page_record_runs_example_runs_and_prints_what_the_page_shows(in_tmp_dir, single_threaded_torch):
    from test_examples import run_block

    block = next(b for b in flower_page_blocks() if "record_runs(" in b.text)
    assert block.output is not None  # the page shows what it prints
    before = global_states()
    report = run_block(block, "docs/flower.md")
    assert not report, f"\n{report}"
    assert global_states() == before
    dump = ParameterDump.open(in_tmp_dir / "flower_dump")
    # Forty different runs (the app reads no seed; record_runs seeds its generators).
    assert len({str(chunk["sha256"]) for chunk in dump.chunk_records()}) == 40
    assert dump.verify() == 40
    assert (in_tmp_dir / "flower_mi.png").stat().st_size > 0  # the journey ends at a figure


def test_flower_page_fedrule_example_runs_on_a_local_grid():
    block = next(b for b in flower_page_blocks() if "FedRule(" in b.text)
    namespace = {"__name__": "__docs__"}
    exec(compile(block.text, f"docs/flower.md:{block.line}", "exec"), namespace)
    calls = []
    echo = ClientApp()

    @echo.train()
    def train(msg, context):  # returns the model it received, each array plus one
        calls.append(context.node_config["partition-id"])
        arrays = {k: msg.content["arrays"][k].numpy() + np.float32(1) for k in msg.content["arrays"].keys()}
        return Message(RecordDict({"arrays": record_of(arrays), "metrics": MetricRecord({"num-examples": 1})}),
                       reply_to=msg)

    with LocalGrid(echo, 3) as grid:
        namespace["app"](grid, Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={}))
    assert sorted(calls) == sorted([0, 1, 2] * 10)  # every client in each of the 10 rounds


# ---------------------------------------------------------------------------- the optional import


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_import_mianalysis_does_not_import_flwr():
    result = run_python("import sys, mianalysis, mianalysis.federated.aggregation, mianalysis.federated\n"
                        "print('flwr' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_without_flwr_the_import_error_says_what_to_install():
    result = run_python("import sys\nsys.modules['flwr'] = None  # as if Flower were not installed\n"
                        "try:\n    import mianalysis.flower\nexcept ImportError as exc:\n    print(repr(str(exc)))\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr("mianalysis.flower needs Flower (Python >= 3.11): "
                                         "pip install 'mianalysis[flower]'")
