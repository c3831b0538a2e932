"""Reliability of the module task (mianalysis/tasks/module.py) and of the sampler around it:
a resume after the factory's model, loss or initialisation changed is refused by name; a
model or init that raises, a class label out of range, a module instance, a bfloat16 model
and a chunk that does not fit in memory are each one clear error (or, for the instance,
accepted and initialised as a factory would be)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import module_factories as mf  # noqa: E402
from mianalysis import sampling  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.dumps import DumpError, ParameterDump  # noqa: E402
from mianalysis._internal import memory as _memory  # noqa: E402
from mianalysis.sampling import ChunkMemoryError, ParameterSampler  # noqa: E402
from mianalysis.tasks import ModuleSpec, ModuleTask  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

FACTORY = '''
import torch
import torch.nn.functional as F
from torch import nn
from mianalysis.tasks import ModuleSpec


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 1)
{init}
    def forward(self, x):
        return self.head(torch.{activation}(self.body(x)))


def loss(out, y):
    return {scale}F.mse_loss(out, y)


def spec():
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g)) for _ in range(2)]
    return ModuleSpec(model=Net, data=data, loss=loss)
'''
ORIGINAL = {"init": "", "activation": "tanh", "scale": ""}


@pytest.fixture
def factory_module(tmp_path, monkeypatch, request):
    """write(**changes) writes the factory module (ORIGINAL with `changes`) into tmp_path
    and returns its import path; each write is imported afresh."""
    name = f"relmod_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no stale .pyc for a same-size edit

    def write(text=None, **changes):
        (tmp_path / f"{name}.py").write_text(text if text is not None else FACTORY.format(**{**ORIGINAL, **changes}))
        sys.modules.pop(name, None)
        return f"{name}:spec"

    yield write
    sys.modules.pop(name, None)


def _sample(out, factory, runs=4, *extra):
    return main(["sample", "--task", "module", "--set", f"factory={factory}", "--set", "lr=0.05", "--set",
                 "batch_size=4", "--runs", str(runs), "--chunk-size", "2", "--out", str(out), "--no-progress", *extra])


# ---------------------------------------------------------------------------- 1. resume after a change

CHANGES = [
    ("tanh to relu", {"activation": "relu"}, "the forward-loss output"),
    ("loss x10", {"scale": "10 * "}, "the forward-loss output"),
    ("zeros_ init", {"init": "        nn.init.zeros_(self.head.weight)\n"}, "the initial parameters ('head.weight')"),
]


@pytest.mark.parametrize("changes, named", [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_resume_after_the_factory_changed_is_refused(factory_module, tmp_path, capsys, changes, named):
    factory = factory_module()
    assert _sample(tmp_path / "d", factory) == 0, capsys.readouterr().err
    manifest = (tmp_path / "d" / "manifest.json").read_bytes()
    assert _sample(tmp_path / "d", factory) == 0  # unchanged: resumes (finds it complete)
    capsys.readouterr()
    factory_module(**changes)
    assert _sample(tmp_path / "d", factory) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be resumed: the model changed since the dump was written" in err
    assert named in err and "the source of" in err
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest


def test_a_partial_dump_is_refused_after_a_change_and_resumes_unchanged(factory_module, tmp_path):
    """The Python API on a dump that holds 2 of 4 runs: resuming with the changed factory
    fails before any run is added; the unchanged factory completes it, the same bytes as
    an uninterrupted sampling."""
    factory = factory_module()
    task = ModuleTask.from_factory(factory, lr=0.05, batch_size=4)
    whole = ParameterSampler(task, chunk_size=2, progress=False).sample(4, tmp_path / "whole")
    sampler = ParameterSampler(task, chunk_size=2, progress=False)
    chunks = sampler._chunks_here
    sampler._chunks_here = lambda dump: (c for i, c in enumerate(chunks(dump)) if i == 0)  # stop after a chunk
    assert sampler.sample(4, tmp_path / "part").completed_runs == 2
    factory_module(activation="relu")
    changed = ModuleTask.from_factory(factory, lr=0.05, batch_size=4)
    with pytest.raises(DumpError, match=r"the forward-loss output on client 0's first examples \(loss [0-9.]+ recorded"):
        ParameterSampler(changed, chunk_size=2, progress=False).sample(4, tmp_path / "part")
    assert ParameterDump.open(tmp_path / "part").completed_runs == 2
    factory_module()
    again = ModuleTask.from_factory(factory, lr=0.05, batch_size=4)
    done = ParameterSampler(again, chunk_size=2, progress=False).sample(4, tmp_path / "part")
    for c in whole.clients:
        for k in range(len(whole.checkpoints)):
            assert np.array_equal(done.samples(c, index=k), whole.samples(c, index=k))


def test_comments_do_not_count_but_a_source_change_does(factory_module, tmp_path, capsys):
    factory = factory_module()
    assert _sample(tmp_path / "d", factory) == 0
    commented = FACTORY.format(**ORIGINAL).replace("def loss(out, y):", "def loss(out, y):  # the mean squared error")
    factory_module(commented)
    assert _sample(tmp_path / "d", factory) == 0, capsys.readouterr().err
    # a branch the fixed batch never takes: only the source shows the change
    hidden = FACTORY.format(**ORIGINAL).replace("        return self.head(",
                                                "        if x.shape[0] > 1000:\n            x = 2 * x\n"
                                                "        return self.head(")
    factory_module(hidden)
    capsys.readouterr()
    assert _sample(tmp_path / "d", factory) == 2
    err = capsys.readouterr().err
    assert "the model changed since the dump was written: the source of model" in err
    assert "initial parameters" not in err and "forward-loss" not in err


def test_fingerprints_agree_across_thread_counts_and_processes(tmp_path):
    """The float fingerprints may differ in their last bits between thread counts and CPUs:
    they are compared to 1e-4 relative, and a resume whose fingerprints differ by rounding
    is accepted with the manifest unchanged."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ModuleTask.from_factory("module_factories:cnn_spec", batch_size=4)
        torch.set_num_threads(2)
        two = ModuleTask.from_factory("module_factories:cnn_spec", batch_size=4)
    finally:
        torch.set_num_threads(before)
    assert one.resume_settings(json.loads(json.dumps(two.settings))) == one.settings
    code = ("import json, torch; torch.set_num_threads(1); from mianalysis.tasks import ModuleTask; "
            "print(json.dumps(ModuleTask.from_factory('module_factories:cnn_spec', batch_size=4).settings))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         cwd=ROOT / "tests", env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": ""}).stdout
    recorded = json.loads(out)
    assert recorded["source_sha256"] == one.settings["source_sha256"] and recorded["source_sha256"]
    assert one.resume_settings(recorded) == recorded
    # rounding-level differences resume, and the manifest keeps what it recorded
    dump = ParameterSampler(one, progress=False).sample(2, tmp_path / "d")
    nudged = ModuleTask.from_factory("module_factories:cnn_spec", batch_size=4)
    nudged.settings["forward_fingerprint"]["loss"] *= 1 + 1e-7
    nudged.settings["init_fingerprint"]["conv.weight"][1] += 1e-7
    manifest = (tmp_path / "d" / "manifest.json").read_bytes()
    assert ParameterSampler(nudged, progress=False).sample(2, tmp_path / "d").meta == dump.meta
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest


# ---------------------------------------------------------------------------- 2. a model or init that raises


def test_a_model_that_raises_is_one_line(factory_module, tmp_path, capsys):
    text = FACTORY.format(**ORIGINAL).replace("        self.head = nn.Linear(4, 1)\n",
                                              "        self.head = nn.Linear(4, 1)\n        1 / 0\n")
    assert _sample(tmp_path / "d", factory_module(text)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`model` (task module): the factory relmod_" in err
    assert err.rstrip().endswith("raised ZeroDivisionError: division by zero")
    assert not (tmp_path / "d").exists()


def test_an_init_that_raises_is_one_line(factory_module, tmp_path, capsys):
    text = FACTORY.format(**ORIGINAL) + (
        "\n\ndef bad_init(model, generator):\n    raise KeyError('no such layer')\n\n\n"
        "def spec_with_init():\n    s = spec()\n    s.init = bad_init\n    return s\n")
    factory = factory_module(text).replace(":spec", ":spec_with_init")
    assert _sample(tmp_path / "d", factory) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`init` (task module) relmod_" in err
    assert err.rstrip().endswith(":bad_init raised KeyError: 'no such layer'")


# ---------------------------------------------------------------------------- 3. class labels out of range


def _labelled(bad_client=None, label=None, n_classes=10):
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(20, 4, generator=g), torch.randint(0, n_classes, (20,), generator=g)) for _ in range(3)]
    if bad_client is not None:
        data[bad_client][1][13] = label
    return data


@pytest.mark.parametrize("label", [10, -1, 57])
def test_a_label_out_of_range_names_the_client_and_label(label):
    with pytest.raises(ValueError, match=rf"^`data` \(task module\): client 2 has class label {label} \(first at "
                                         rf"example 13\), outside 0-9 for the model's 10 outputs; the loss fails"):
        ModuleTask(lambda: nn.Linear(4, 10), _labelled(2, label), F.cross_entropy, batch_size=5)


def test_labels_in_range_and_the_ignore_index_train():
    task = ModuleTask(lambda: nn.Linear(4, 10), _labelled(1, -100), F.cross_entropy, batch_size=5)
    assert np.isfinite(ParameterSampler(task, progress=False).train_chunk(range(2)).samples).all()


def test_a_label_out_of_range_is_one_line_on_the_command_line(factory_module, tmp_path, capsys):
    text = ("import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
            "from mianalysis.tasks import ModuleSpec\n\n\ndef spec():\n"
            "    x = torch.zeros(8, 2)\n    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])\n"
            "    return ModuleSpec(lambda: nn.Linear(2, 3), [(x, y), (x, torch.where(y == 2, 3, y))], F.cross_entropy)\n")
    assert _sample(tmp_path / "d", factory_module(text)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "client 1 has class label 3 (first at example 2), outside 0-2" in err


# ---------------------------------------------------------------------------- 4. a module instance


def test_a_module_instance_trains_as_its_factory_would():
    instance = mf.mlp()
    kept = [p.detach().clone() for p in instance.parameters()]
    ours = ModuleTask(instance, mf.regression_data(), F.mse_loss, batch_size=4)
    factory = ModuleTask(mf.mlp, mf.regression_data(), F.mse_loss, batch_size=4)
    for seed in (0, 7):
        a = ours.init_params(torch.Generator().manual_seed(seed))
        b = factory.init_params(torch.Generator().manual_seed(seed))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    np.testing.assert_array_equal(ParameterSampler(ours, progress=False).train_chunk(range(2)).samples,
                                  ParameterSampler(factory, progress=False).train_chunk(range(2)).samples)
    assert all(torch.equal(p, q) for p, q in zip(instance.parameters(), kept))  # the instance is left as it was


def test_a_module_instance_keeps_its_frozen_parameters():
    """A frozen body of 0.25 (e.g. pretrained) stays 0.25: the same samples as a factory
    that builds it so."""
    def frozen():
        model = mf.mlp()
        model[0].weight.requires_grad_(False)
        with torch.no_grad():
            model[0].weight.fill_(0.25)
        return model

    task = ModuleTask(frozen(), mf.regression_data(), F.mse_loss, batch_size=4)
    factory = ModuleTask(frozen, mf.regression_data(), F.mse_loss, batch_size=4)
    assert [n for n, _ in task.parameter_shapes()] == ["0.bias", "2.weight", "2.bias"]
    np.testing.assert_array_equal(ParameterSampler(task, progress=False).train_chunk(range(2)).samples,
                                  ParameterSampler(factory, progress=False).train_chunk(range(2)).samples)


def test_a_module_instance_without_reset_parameters_needs_init():
    with pytest.raises(TypeError, match=r"module instance whose trainable parameter 'rnn.0.weight_ih' \(in ElmanLayer, "
                                        r"which has no reset_parameters\(\)\) .*give a callable that builds the model"):
        ModuleTask(mf.SignalRNN(), [(torch.zeros(8, 5), torch.zeros(8, 2))] * 2, F.mse_loss, batch_size=4)
    task = ModuleTask(mf.SignalRNN(), [(torch.zeros(8, 5), torch.zeros(8, 2))] * 2, F.mse_loss, batch_size=4,
                      init=mf.signal_init)
    factory = ModuleTask(mf.SignalRNN, [(torch.zeros(8, 5), torch.zeros(8, 2))] * 2, F.mse_loss, batch_size=4,
                         init=mf.signal_init)
    g = torch.Generator
    assert all(torch.equal(a, b) for a, b in zip(task.init_params(g().manual_seed(1)), factory.init_params(g().manual_seed(1))))


def test_a_module_instance_from_the_command_line(factory_module, tmp_path, capsys):
    text = FACTORY.format(**ORIGINAL).replace("ModuleSpec(model=Net,", "ModuleSpec(model=nn.Sequential(Net()),")
    assert _sample(tmp_path / "d", factory_module(text)) == 0, capsys.readouterr().err
    assert ParameterDump.open(tmp_path / "d").completed_runs == 4


# ---------------------------------------------------------------------------- 5. bfloat16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_model_is_refused_by_tensor(dtype):
    with pytest.raises(ValueError, match=rf"the model's tensor '0.weight' has dtype {dtype}; the sampler trains float32 "
                                         r"or float64 models .*convert the model with .float\(\)"):
        ModuleTask(lambda: mf.mlp().to(dtype), mf.regression_data(), F.mse_loss, batch_size=4)


def test_float64_models_still_train():
    task = ModuleTask(lambda: mf.mlp().double(), mf.regression_data(), F.mse_loss, batch_size=4)
    assert np.isfinite(ParameterSampler(task, progress=False).train_chunk(range(2)).samples).all()


# ---------------------------------------------------------------------------- 6. a chunk too large


def test_a_chunk_larger_than_memory_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda *a, **k: 2**26)  # 64 MiB
    task = ModuleTask(lambda: nn.Linear(200, 50), [(torch.zeros(8, 200), torch.zeros(8, 50))] * 3, F.mse_loss,
                      batch_size=4)
    sampler = ParameterSampler(task, chunk_size=64, progress=False)
    assert sampler.chunk_bytes(64) == 64 * 3 * 10050 * 4 * (4 + 2 * 3)
    with pytest.raises(ChunkMemoryError, match=r"a chunk of 64 runs \(3 clients, 3 checkpoints\) needs at least "
                                               r"0.0719 GiB, more than the 0.0625 GiB .*lower `chunk_size` "
                                               r"\(--chunk-size\), e.g. to 27\b"):
        sampler.sample(100, tmp_path / "d")
    assert not (tmp_path / "d").exists()
    # fewer runs than chunk_size: the one chunk holds them all, and 20 runs fit
    assert sampler.sample(20, tmp_path / "d").completed_runs == 20


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried "
                                                                "to allocate 4000000000 bytes")])
def test_running_out_of_memory_in_a_chunk_is_one_line(tmp_path, monkeypatch, capsys, error):
    def no_memory(self, runs, **kw):
        raise error

    monkeypatch.setattr(sampling.ParameterSampler, "train_chunk", no_memory)
    assert _sample(tmp_path / "d", "module_factories:tiny_spec") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"training runs 0-2 ran out of memory ({type(error).__name__}); lower " \
        "`chunk_size` (--chunk-size, now 2)" in err


def test_other_runtime_errors_in_a_chunk_are_not_taken_for_memory(tmp_path, monkeypatch):
    def broken(self, runs, **kw):
        raise RuntimeError("something else")

    monkeypatch.setattr(sampling.ParameterSampler, "train_chunk", broken)
    with pytest.raises(RuntimeError, match="something else"):
        ParameterSampler(ModuleTask.from_factory("module_factories:tiny_spec", batch_size=4),
                         progress=False).sample(2, tmp_path / "d")

