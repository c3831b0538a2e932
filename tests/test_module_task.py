"""ModuleTask: any torch.nn.Module as a sampling task (mianalysis/tasks/module.py).

Known answers: signal-rnn written as a plain nn.Module reproduces the built-in task; a
linear loss whose epoch sum does not depend on the order gives the exact parameters after
every epoch. Guarantees: the same bytes for any chunk size; bad input is a clear error.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import module_factories as mf  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.dumps import DumpError, ParameterDump  # noqa: E402
from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import ModuleSpec, ModuleTask, SignalRNNTask, get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIGNAL = {"n_layers": 2, "seq_len": 12, "n_examples": 24, "batch_size": 8, "hidden": 3, "dropout": 0.0}


def _signal_as_module():
    reference = SignalRNNTask(**SIGNAL)
    data = [tuple(torch.from_numpy(a) for a in reference.client_examples(c)) for c in range(reference.n_clients)]
    task = ModuleTask(lambda: mf.SignalRNN(SIGNAL["n_layers"], SIGNAL["hidden"]), data, F.mse_loss,
                      init=mf.signal_init, lr=1e-3, batch_size=SIGNAL["batch_size"])
    return reference, task


# ---------------------------------------------------------------------------- known answers


def test_signal_rnn_as_module_gives_the_builtin_samples():
    """signal-rnn without dropout (ModuleTask refuses in-model randomness, so dropout cannot
    be matched): the same parameter layout, initial point, minibatch order and Adam steps.
    The built-in task back-propagates through time by hand and the module through autograd,
    so the float32 sums differ in order: equal to 1e-6 (measured: 3e-8)."""
    reference, task = _signal_as_module()
    assert task.parameter_shapes() == reference.parameter_shapes()
    assert task.n_iterations == reference.n_iterations == 3
    built_in = ParameterSampler(reference, seed=4, progress=False).train_chunk(range(3))
    ours = ParameterSampler(task, seed=4, progress=False).train_chunk(range(3))
    assert ours.samples.shape == built_in.samples.shape == (3, 4, 3, 44)
    np.testing.assert_array_equal(ours.samples[:, 0], built_in.samples[:, 0])  # the same initial point
    np.testing.assert_allclose(ours.samples, built_in.samples, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours.metrics, built_in.metrics, rtol=1e-5, atol=0)
    # the comparison can fail: training moved the parameters by far more than the tolerance
    assert np.abs(ours.samples[:, -1] - ours.samples[:, 0]).max() > 1e-3


def test_each_epoch_visits_every_example_once():
    """Loss -mean(w x) has gradient -mean(x over the batch): with SGD at lr 1 and n = 2 b,
    an epoch adds sum(x) / b to w whatever the order, so w = 9 * epoch for x = 1..8, b = 4."""
    x = torch.arange(1.0, 9.0)[:, None]
    data = [(x, torch.zeros(8, 1)), (x, torch.zeros(8, 1))]

    def zero(model, generator):
        model.weight.zero_()

    task = ModuleTask(lambda: nn.Linear(1, 1, bias=False), data, lambda out, y: -out.mean(), init=zero,
                      optimizer="sgd", lr=1.0, batch_size=4, epochs=3)
    sampler = ParameterSampler(task, every=2, progress=False)
    assert sampler.checkpoints == [0, 2, 4, 6] and task.n_iterations == 6
    samples = sampler.train_chunk(range(2)).samples
    np.testing.assert_array_equal(samples[..., 0], np.broadcast_to([0.0, 9.0, 18.0, 27.0], (2, 2, 4)).transpose(0, 2, 1))
    # the order inside an epoch still differs between runs (the middle of an epoch shows it)
    middle = ParameterSampler(task, every=1, progress=False).train_chunk(range(3)).samples[0, 1, :, 0]
    assert len(set(middle.tolist())) > 1


def test_default_init_is_the_factorys_own_under_the_runs_seed():
    task = ModuleTask(mf.mlp, mf.regression_data(), F.mse_loss, batch_size=4)
    before = torch.get_rng_state()
    first = task.init_params(torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is left as it was
    again = task.init_params(torch.Generator().manual_seed(7))
    other = task.init_params(torch.Generator().manual_seed(8))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])
    seed = int(torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(7)))
    torch.manual_seed(seed)
    expected = [p.detach() for p in mf.mlp().parameters()]
    assert all(torch.equal(a, b) for a, b in zip(first, expected))


def test_record_a_subset_and_frozen_parameters():
    def partly_frozen():
        model = mf.mlp()
        model[0].weight.requires_grad_(False)
        return model

    full = ModuleTask(partly_frozen, mf.regression_data(), F.mse_loss, batch_size=4)
    head = ModuleTask(partly_frozen, mf.regression_data(), F.mse_loss, batch_size=4, record=["2", "0.bias"])
    assert [n for n, _ in full.parameter_shapes()] == ["0.bias", "2.weight", "2.bias"]  # the frozen weight is a constant
    assert head.parameter_shapes() == full.parameter_shapes()
    only = ModuleTask(partly_frozen, mf.regression_data(), F.mse_loss, batch_size=4, record="2")
    assert only.parameter_shapes() == [("2.weight", (1, 4)), ("2.bias", (1,))]
    a = ParameterSampler(full, progress=False).train_chunk(range(2)).samples
    b = ParameterSampler(only, progress=False).train_chunk(range(2)).samples
    np.testing.assert_array_equal(b, a[..., 4:])


def test_datasets_give_the_same_samples_as_tensors():
    data = mf.regression_data()
    sets = [torch.utils.data.TensorDataset(x, y) for x, y in data]
    a = ParameterSampler(ModuleTask(mf.mlp, data, F.mse_loss, batch_size=5), progress=False).train_chunk(range(2))
    b = ParameterSampler(ModuleTask(mf.mlp, sets, F.mse_loss, batch_size=5), progress=False).train_chunk(range(2))
    np.testing.assert_array_equal(a.samples, b.samples)
    digest = [ModuleTask(mf.mlp, d, F.mse_loss, batch_size=5).settings["data_sha256"] for d in (data, sets)]
    assert digest[0] == digest[1]


def test_batchnorm_without_running_statistics_trains():
    model = lambda: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, track_running_stats=False), nn.Linear(4, 1))  # noqa: E731
    task = ModuleTask(model, mf.regression_data(), F.mse_loss, batch_size=4)
    samples = ParameterSampler(task, progress=False).train_chunk(range(2)).samples
    assert np.isfinite(samples).all() and np.abs(samples[:, -1] - samples[:, 0]).max() > 0


# ---------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("spec", ["tiny_spec", "cnn_spec"])
def test_samples_do_not_depend_on_the_chunk_size(spec, tmp_path):
    """Chunk sizes 1, 2 and 5 (with 1, 2 and 2 PyTorch threads): the same bytes."""
    task = ModuleTask.from_factory(f"module_factories:{spec}", lr=0.05, batch_size=4, epochs=2)
    before, dumps = torch.get_num_threads(), []
    try:
        for cs, threads in ((1, 1), (2, 2), (5, 2)):
            torch.set_num_threads(threads)
            dumps.append(ParameterSampler(task, seed=2, chunk_size=cs, progress=False).sample(5, tmp_path / str(cs)))
    finally:
        torch.set_num_threads(before)
    first = dumps[0]
    for dump in dumps[1:]:
        for client in first.clients:
            for k in range(len(first.checkpoints)):
                assert np.array_equal(dump.samples(client, index=k), first.samples(client, index=k))
        assert dump.meta["task_settings"] == first.meta["task_settings"]
        for client in first.clients:
            assert np.array_equal(dump.metric(client, "loss"), first.metric(client, "loss"))
    # and the batched computation equals one replica at a time with torch.optim.Adam
    sampler = ParameterSampler(task, seed=2, progress=False)
    np.testing.assert_allclose(sampler.train_chunk(range(2)).samples, sampler.train_chunk(range(2), vectorised=False).samples,
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- bad input


class WithDropout(nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.drop = nn.Dropout(p)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.drop(self.body(x)))


class FunctionalDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 1)

    def forward(self, x):
        return F.dropout(self.body(x), 0.5, self.training)


def _task(model=mf.mlp, data=None, loss=F.mse_loss, **settings):
    return ModuleTask(model, mf.regression_data() if data is None else data, loss, **{"batch_size": 4, **settings})


BAD = [
    ("dropout module", lambda: _task(WithDropout), ValueError,
     r"module drop \(Dropout\) has dropout p=0.1: randomness inside the model is not supported"),
    ("functional dropout", lambda: _task(FunctionalDropout), ValueError,
     r"the model calls a random operation in training, which is not supported"),
    ("rnn dropout", lambda: _task(lambda: nn.GRU(3, 2, num_layers=2, dropout=0.2)), ValueError,
     r"module the model \(GRU\) has dropout dropout=0.2"),
    ("batchnorm", lambda: _task(lambda: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))), ValueError,
     r"module 1 \(BatchNorm1d\) updates running statistics"),
    ("inputs vs targets", lambda: _task(data=[(torch.zeros(12, 3), torch.zeros(10, 1))] * 2), ValueError,
     r"client 0 has inputs of shape \(12, 3\) and targets of shape \(10, 1\)"),
    ("clients differ", lambda: _task(data=[(torch.zeros(12, 3), torch.zeros(12, 1)), (torch.zeros(11, 3), torch.zeros(11, 1))]),
     ValueError, r"client 1's inputs have shape \(11, 3\) .* but client 0's \(12, 3\)"),
    ("model vs data", lambda: _task(data=[(torch.zeros(12, 5), torch.zeros(12, 1))] * 2), ValueError,
     r"the model and loss cannot train on client 0's examples \(inputs \(5,\) torch.float32"),
    ("loss per example", lambda: _task(loss=lambda out, y: ((out - y) ** 2).sum(-1)), ValueError,
     r"the loss must return one number, the mean over the batch; got a tensor of shape \(2,\)"),
    ("not a module", lambda: _task(model=lambda: "net"), TypeError, r"`model` \(task module\) must return a torch.nn.Module"),
    ("no data", lambda: _task(data=[]), ValueError, r"`data` \(task module\) must be a non-empty sequence"),
    ("client entry", lambda: _task(data=[torch.zeros(3)]), TypeError, r"client 0 must be a pair \(inputs, targets\)"),
    ("record", lambda: _task(record=["3"]), ValueError,
     r"`record` \(task module\) names '3', which is neither a trainable parameter .* \['0.weight', '0.bias', '2.weight', "),
    ("optimizer", lambda: _task(optimizer="rmsprop"), ValueError, r"`optimizer` \(task module\) must be one of \['adam', 'sgd'\]"),
    ("batch size", lambda: _task(batch_size=13), ValueError, r"`batch_size` \(task module\) must be <= the number"),
    ("unknown setting", lambda: _task(momentum=0.9), ValueError, r"unknown setting\(s\) \['momentum'\] for task 'module'"),
    ("eval examples", lambda: _task(eval_examples=13), ValueError, r"`eval_examples` \(task module\) must be None"),
    ("no import", lambda: ModuleTask.from_factory("no_such_module_here:spec"), ValueError,
     r"^`factory` 'no_such_module_here:spec' cannot be imported: ModuleNotFoundError: No module named 'no_such_module_here'$"),
    ("no colon", lambda: ModuleTask.from_factory("module_factories.tiny_spec"), ValueError,
     r"`factory` must be an import path 'package.module:function'; got 'module_factories.tiny_spec'"),
    ("no attribute", lambda: ModuleTask.from_factory("module_factories:nothing"), ValueError,
     r"`factory` 'module_factories:nothing': module 'module_factories' has no attribute 'nothing'"),
    ("not callable", lambda: ModuleTask.from_factory("module_factories:NOT_CALLABLE"), ValueError,
     r"`factory` 'module_factories:NOT_CALLABLE' is not callable"),
    ("not a spec", lambda: ModuleTask.from_factory("module_factories:not_a_spec"), TypeError,
     r"`factory` 'module_factories:not_a_spec' must return a mianalysis.tasks.ModuleSpec; got int"),
    ("factory raises", lambda: ModuleTask.from_factory("module_factories:failing_spec"), ValueError,
     r"`factory` 'module_factories:failing_spec' failed: RuntimeError: no data here"),
    ("no factory", lambda: get_task("module"), ValueError, r"task 'module' needs `factory`"),
]


@pytest.mark.parametrize("make, error, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_a_clear_error(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_dropout_zero_is_accepted():
    assert _task(lambda: WithDropout(0.0)).parameter_shapes()[0] == ("body.weight", (4, 3))


# ---------------------------------------------------------------------------- command line


def _sample_cli(out, factory="module_factories:tiny_spec", runs=4, *extra):
    return main(["sample", "--task", "module", "--set", f"factory={factory}", "--set", "lr=0.05", "--set",
                 "batch_size=4", "--runs", str(runs), "--chunk-size", "3", "--out", str(out), "--no-progress", *extra])


def test_cli_round_trip(tmp_path, capsys):
    assert _sample_cli(tmp_path / "d") == 0, capsys.readouterr().err
    dump = ParameterDump.open(tmp_path / "d")
    settings = dump.meta["task_settings"]
    assert dump.meta["task"] == "module" and settings["factory"] == "module_factories:tiny_spec"
    assert settings["lr"] == 0.05 and settings["batch_size"] == 4 and settings["model"] == "module_factories:mlp"
    assert [e.name for e in dump.layout] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    # the same samples as the Python API, from what the manifest records
    task = ModuleTask.from_factory(settings["factory"], lr=settings["lr"], batch_size=settings["batch_size"])
    again = ParameterSampler(task, chunk_size=2, progress=False).sample(4, tmp_path / "py")
    for c in dump.clients:
        for k in range(len(dump.checkpoints)):
            assert np.array_equal(dump.samples(c, index=k), again.samples(c, index=k))
    # the same command again resumes the dump (here: finds it complete)
    manifest = (tmp_path / "d" / "manifest.json").read_bytes()
    assert _sample_cli(tmp_path / "d") == 0
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest
    capsys.readouterr()
    # another factory is refused, and nothing is changed
    assert _sample_cli(tmp_path / "d", "module_factories:other_spec") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a dump with other settings" in err and "other_spec" in err
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest


def test_cli_bad_factory_is_one_line(tmp_path, capsys):
    assert _sample_cli(tmp_path / "d", "no_such_module_here:spec") == 2
    err = capsys.readouterr().err
    assert err == ("mianalysis sample: error: `factory` 'no_such_module_here:spec' cannot be imported: "
                   "ModuleNotFoundError: No module named 'no_such_module_here'\n")
    assert not (tmp_path / "d").exists()
    assert main(["sample", "--task", "module", "--runs", "2", "--out", str(tmp_path / "e"), "--no-progress"]) == 2
    assert "task 'module' needs `factory`" in capsys.readouterr().err


def test_factory_from_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "my_factories_here.py").write_text(
        "import torch.nn.functional as F\nfrom module_factories import mlp, regression_data\n"
        "from mianalysis.tasks import ModuleSpec\n\ndef spec():\n"
        "    return ModuleSpec(mlp, regression_data(), F.mse_loss)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    task = ModuleTask.from_factory("my_factories_here:spec", batch_size=4)
    assert task.settings["factory"] == "my_factories_here:spec" and str(tmp_path) not in sys.path
    sys.modules.pop("my_factories_here", None)


# ---------------------------------------------------------------------------- the example


def test_digits_cnn_example_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    example = importlib.import_module("digits_cnn")
    rows = example.main(tmp_path, runs=20)
    out = capsys.readouterr().out
    assert "3 clients x 150 digits, 690 parameters, 20 runs" in out
    assert (tmp_path / "table.csv").exists() and ParameterDump.open(tmp_path / "dump").completed_runs == 20
    mi = [r["value"] for r in rows if r["quantity"] == "mi_ksg" and r["client_a"] == "0" and r["client_b"] == "1"]
    assert mi[0] == np.inf and all(np.isfinite(mi[1:]))  # one initial point per run; then the clients differ
    loss = [r["value"] for r in rows if r["quantity"] == "loss" and r["client_a"] == "0"]
    assert loss[-1] < loss[0]


def test_defaults_are_the_declared_settings():
    task = ModuleTask(mf.mlp, [(torch.zeros(40, 3), torch.zeros(40, 1))], F.mse_loss)
    assert {k: task.settings[k] for k in ModuleTask.default_settings()} == ModuleTask.default_settings()
    assert task.settings["factory"] is None and task.settings["n_clients"] == 1 and task.settings["n_examples"] == 40
