"""The sampler's central reference client (``ParameterSampler(reference="central")``).

Identities that must hold exactly: with one client the central client is that client, byte
for byte; the clients' samples are the same bytes with or without it; its own are the same
for any chunk and thread count. Known behaviour: one plain SGD step from the run's start on
the union of the clients' full batches is the clients' average step. Then the dump (client
"central", its setting recorded and checked on resume), analyze's pairs, headroom, the
command line and the errors.
"""

from __future__ import annotations

import csv
import pickle

import numpy as np
import pytest
from conftest import TINY_DIGITS, TINY_SIGNAL

torch = pytest.importorskip("torch")

import module_factories as mf  # noqa: E402

from mianalysis import ParameterDump, analyze, headroom  # noqa: E402
from mianalysis.dumps import DumpError  # noqa: E402
from mianalysis.sampling import CENTRAL, ChunkJob, ParameterSampler  # noqa: E402
from mianalysis.tasks import DigitsLeNetTask, ModuleTask, SignalRNNTask, get_task  # noqa: E402
from mianalysis.tasks.base import Task  # noqa: E402


TASKS = {
    "signal": lambda **kw: SignalRNNTask(**{**TINY_SIGNAL, **kw}),
    "digits": lambda **kw: DigitsLeNetTask(**{**TINY_DIGITS, **kw}),
    "module": lambda **kw: ModuleTask(mf.mlp, mf.regression_data(n_clients=kw.get("n_clients", 3)), mf.F.mse_loss,
                                      lr=0.05, batch_size=5),
}


@pytest.mark.parametrize("name, shared", [("signal", ()), ("signal", ("data", "order", "dropout")),
                                          ("digits", ()), ("module", ())])
def test_one_client_central_is_that_client_byte_for_byte(name, shared):
    task = TASKS[name](n_clients=1)
    result = ParameterSampler(task, seed=2, progress=False, shared=shared, reference="central").train_chunk(range(3))
    assert result.samples.shape[0] == 2  # client 0, central
    assert np.array_equal(result.samples[0], result.samples[1])
    assert np.array_equal(result.metrics[0], result.metrics[1])
    assert np.abs(result.samples[1, -1] - result.samples[1, 0]).max() > 0  # and it trained


@pytest.mark.parametrize("name, shared", [("signal", ("order", "dropout")), ("digits", ("augmentation",)),
                                          ("module", ())])
def test_clients_are_the_same_bytes_with_or_without_the_central_client(name, shared):
    task = TASKS[name]()
    without = ParameterSampler(task, seed=4, progress=False, shared=shared).train_chunk(range(3))
    with_central = ParameterSampler(task, seed=4, progress=False, shared=shared, reference="central").train_chunk(
        range(3))
    assert with_central.samples.shape[0] == task.n_clients + 1
    assert np.array_equal(without.samples, with_central.samples[:-1])
    assert np.array_equal(without.metrics, with_central.metrics[:-1])
    # the central client is none of the clients after the first step
    assert all(not np.allclose(with_central.samples[-1, -1], with_central.samples[c, -1])
               for c in range(task.n_clients))


@pytest.mark.parametrize("name", ["signal", "digits", "module"])
def test_central_client_same_bytes_in_any_chunk_and_thread_count(name):
    # The in-process counterpart of tests/test_reliability.py's subprocess matrix: a run's
    # central client (and its clients) alone, beside others, on 1 or 2 threads.
    sampler = ParameterSampler(TASKS[name](), seed=3, progress=False, shared=("order",), reference="central")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        together = sampler.train_chunk(range(6))
        torch.set_num_threads(2)
        for runs in ([4], [3, 4, 5], [0, 1, 2, 3, 4]):
            part = sampler.train_chunk(runs)
            for i, run in enumerate(runs):
                assert np.array_equal(part.samples[:, :, i], together.samples[:, :, run]), (runs, run)
                assert np.array_equal(part.metrics[..., i], together.metrics[..., run]), (runs, run)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", ["signal", "digits"])
def test_vectorised_central_equals_the_plain_loop(name):
    sampler = ParameterSampler(TASKS[name](), seed=1, progress=False, reference="central")
    batched, loop = sampler.train_chunk(range(3)), sampler.train_chunk(range(3), vectorised=False)
    assert batched.samples.shape == loop.samples.shape
    np.testing.assert_allclose(batched.samples, loop.samples, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batched.metrics, loop.metrics, rtol=1e-5, atol=1e-6)


def test_one_sgd_step_on_the_union_of_full_batches_is_the_clients_average_step():
    # Full batches (batch = the client's 12 examples), plain SGD: from the run's shared start
    # the central client's first step is the gradient of the mean loss over the union of the
    # clients' data, i.e. the average of the clients' steps; checked against autograd on the
    # concatenated data, and its later steps are not the clients' average any more.
    task = ModuleTask(mf.mlp, mf.regression_data(), mf.F.mse_loss, optimizer="sgd", lr=0.1, batch_size=12, epochs=3)
    sampler = ParameterSampler(task, seed=5, progress=False, reference="central")
    result = sampler.train_chunk(range(2))
    clients, central = result.samples[:-1], result.samples[-1]
    np.testing.assert_allclose(central[1], clients[:, 1].mean(0), rtol=1e-5, atol=1e-7)
    assert not np.allclose(central[3], clients[:, 3].mean(0), rtol=1e-4, atol=1e-6)
    x = torch.cat([x for x, _ in mf.regression_data()])
    y = torch.cat([y for _, y in mf.regression_data()])
    for run in range(2):
        model = mf.mlp()
        start = dict(zip([n for n, _ in task.parameter_shapes()], sampler.initial_params(run)))
        params = {n: p.clone().requires_grad_(True) for n, p in start.items()}
        loss = mf.F.mse_loss(torch.func.functional_call(model, params, (x,)), y)
        grads = torch.autograd.grad(loss, list(params.values()))
        stepped = torch.cat([(p - 0.1 * g).detach().reshape(-1) for p, g in zip(params.values(), grads)]).numpy()
        np.testing.assert_allclose(central[1, run], stepped, rtol=1e-5, atol=1e-7)
    # its loss metric is its mean loss over the clients' data (equal client sizes: the union's)
    np.testing.assert_allclose(result.metrics[-1, 0, 0], result.metrics[:-1, 0, 0].mean(0), rtol=1e-6)


def test_dump_records_the_central_client_and_resume_checks_the_setting(tmp_path):
    task = TASKS["signal"]()
    dump = ParameterSampler(task, seed=1, chunk_size=4, progress=False, reference="central").sample(6, tmp_path / "d")
    assert dump.clients == ["0", "1", "2", CENTRAL]
    assert dump.meta["reference"] == "central"
    again = ParameterSampler(task, seed=1, chunk_size=4, progress=False, reference="central").sample(6, tmp_path / "d")
    assert again.completed_runs == 6
    with pytest.raises(DumpError, match=r"other settings .*'reference': \('central', None\)"):
        ParameterSampler(task, seed=1, chunk_size=4, progress=False).sample(6, tmp_path / "d")
    plain = ParameterSampler(task, seed=1, chunk_size=4, progress=False).sample(6, tmp_path / "plain")
    assert "reference" not in plain.meta and plain.clients == ["0", "1", "2"]
    with pytest.raises(DumpError, match=r"other settings .*'reference': \(None, 'central'\)"):
        ParameterSampler(task, seed=1, chunk_size=4, progress=False, reference="central").sample(6, tmp_path / "plain")
    for c in ("0", "1", "2"):  # the clients are those of the dump without the reference
        assert np.array_equal(dump.samples(c, index=3), plain.samples(c, index=3))


def test_dask_chunk_job_trains_the_central_client_too():
    task = TASKS["signal"]()
    sampler = ParameterSampler(task, seed=2, progress=False, shared=("order",), reference="central")
    job = pickle.loads(pickle.dumps(ChunkJob(task, seed=2, init="per-run", every=1, chunk_size=3, shared=("order",),
                                             reference="central")))
    assert np.array_equal(job((0, 3)).samples, sampler.train_chunk(range(3)).samples)


def test_analyze_leaves_the_central_client_out_of_the_pairs(tmp_path):
    dump = ParameterSampler(TASKS["signal"](), seed=0, progress=False, every=2,
                            reference="central").sample(16, tmp_path / "d")
    rows = analyze(dump, estimators=["gaussian"], metrics=["euclidean"])
    pairs = {(r["client_a"], r["client_b"]) for r in rows if r["client_b"]}
    assert pairs == {("0", "1"), ("0", "2"), ("1", "2")}
    assert any(r["client_a"] == CENTRAL and r["quantity"] == "loss" for r in rows)  # its metrics are reported


@pytest.mark.parametrize("name", ["signal", "digits", "module"])
def test_headroom_of_a_dump_with_the_central_client(tmp_path, name):
    task = TASKS[name]()
    dump = ParameterSampler(task, seed=0, progress=False, reference="central").sample(12, tmp_path / "d")
    rows = headroom(dump, rules=["mean", "inverse_variance", "blue_coordinate"])
    assert {r["reference"] for r in rows} == {"central (FedSGD reference, not the optimum)"}
    assert {r["n_clients"] for r in rows} == {task.n_clients}
    assert [r["iteration"] for r in rows if r["rule"] == "mean"] == dump.checkpoints
    last = [r for r in rows if r["iteration"] == dump.checkpoints[-1]]
    assert [r["rule"] for r in last] == ["mean", "inverse_variance", "blue_coordinate"]
    assert all(r["mse"] > 0 and np.isfinite(r["ratio"]) for r in last)
    # the mean's MSE is the summed squared distance of the clients' average to the central client
    t = len(dump.checkpoints) - 1
    errors = (np.mean([np.asarray(dump.samples(c, index=t), np.float64) for c in dump.clients[:-1]], axis=0)
              - np.asarray(dump.samples(CENTRAL, index=t), np.float64))
    assert last[0]["mse"] == pytest.approx(np.mean(np.sum(errors ** 2, axis=1)), rel=1e-9)


def test_sample_command_reference_central_then_headroom(tmp_path, cli):
    out = tmp_path / "d"
    done = cli(["sample", "--task", "signal-rnn", "--runs", "8", "--out", out, "--no-progress", "--reference", "central",
                *(a for k, v in TINY_SIGNAL.items() for a in ("--set", f"{k}={v}"))])
    assert done.returncode == 0, done.stderr
    assert ParameterDump.open(out).clients == ["0", "1", "2", "central"]
    done = cli(["headroom", out, "--out", tmp_path / "h.csv", "--rules", "mean", "inverse_variance"])
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "h.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["reference"] for r in rows} == {"central (FedSGD reference, not the optimum)"}
    assert {r["n_clients"] for r in rows} == {"3"}


def test_reference_central_on_gaussian_sgd_is_a_clear_error(tmp_path, cli):
    # gaussian-sgd knows its exact reference (reference="task" in headroom): refused, not trained.
    with pytest.raises(ValueError, match=r"task 'gaussian-sgd' knows its exact reference"):
        ParameterSampler(get_task("gaussian-sgd", "small"), reference="central")
    done = cli(["sample", "--task", "gaussian-sgd", "--runs", "4", "--out", tmp_path / "g", "--reference", "central"])
    assert done.returncode == 2 and "\n" not in done.stderr.strip()
    assert "knows its exact reference" in done.stderr and not (tmp_path / "g").exists()
    done = cli(["sample", "--task", "signal-rnn", "--runs", "4", "--out", tmp_path / "s", "--reference", "mean"])
    assert done.returncode == 2 and "invalid choice: 'mean'" in done.stderr


def test_bad_reference_values_and_tasks_that_cannot_have_one():
    task = TASKS["signal"]()
    with pytest.raises(ValueError, match=r"`reference` must be one of 'central', 'optimum'; got 'centre'"):
        ParameterSampler(task, reference="centre")

    class MasksWithoutUnion(SignalRNNTask):
        central_masks = Task.central_masks

    with pytest.raises(ValueError, match=r"draws masks \(stream 'dropout'\) but does not say how the central client"):
        ParameterSampler(MasksWithoutUnion(**TINY_SIGNAL), reference="central")
