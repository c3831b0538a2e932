"""ModuleTask(gradients="summed"): one backward pass over the sum of the replicas' losses
(mianalysis/tasks/module.py).

Known answers: each replica's gradient is its own loss's (a float64 loop over replicas);
the same bytes as gradients="vmap" on the models the docstring names; the same bytes for
any chunk size and thread count; the dump records the setting; no torch._dynamo import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import module_factories as mf  # noqa: E402
from mianalysis.dumps import DumpError  # noqa: E402
from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import ModuleTask, SignalRNNTask  # noqa: E402

TESTS = Path(__file__).resolve().parent
SIGNAL = {"n_layers": 2, "seq_len": 12, "n_examples": 24, "batch_size": 8, "hidden": 3, "dropout": 0.0}


def _signal(unbind):
    reference = SignalRNNTask(**SIGNAL)
    data = [tuple(torch.from_numpy(a) for a in reference.client_examples(c)) for c in range(reference.n_clients)]
    return (lambda: mf.SignalRNN(SIGNAL["n_layers"], SIGNAL["hidden"], unbind=unbind)), data, F.mse_loss, \
        {"init": mf.signal_init, "batch_size": SIGNAL["batch_size"]}


# The models whose "summed" gradients the ModuleTask docstring says are vmap's bytes.
MODELS = {
    "mlp": lambda: (mf.mlp, mf.regression_data(), F.mse_loss, {"batch_size": 4, "epochs": 2}),
    "cnn batch 4": lambda: (mf.TinyCNN, mf.images_data(), F.cross_entropy, {"batch_size": 4, "epochs": 2}),
    "signal-rnn indexed": lambda: _signal(False),
    "signal-rnn unbind": lambda: _signal(True),
}


def _task(name, gradients, **settings):
    model, data, loss, defaults = MODELS[name]()
    return ModuleTask(model, data, loss, gradients=gradients, **{**defaults, **settings})


@pytest.mark.parametrize("name", sorted(MODELS))
def test_summed_gradients_are_vmaps_bytes_on_these_models(name):
    vmap = ParameterSampler(_task(name, "vmap"), seed=3, progress=False).train_chunk(range(4))
    summed = ParameterSampler(_task(name, "summed"), seed=3, progress=False).train_chunk(range(4))
    np.testing.assert_array_equal(summed.samples, vmap.samples)
    np.testing.assert_array_equal(summed.metrics, vmap.metrics)
    # the comparison can fail: training moved every client's parameters
    assert np.abs(vmap.samples[:, -1] - vmap.samples[:, 0]).min(axis=-1).max() > 0
    assert np.abs(vmap.samples[:, -1] - vmap.samples[:, 0]).max() > 1e-4


@pytest.mark.parametrize("name", ["mlp", "cnn batch 4", "signal-rnn indexed"])
def test_each_replicas_summed_gradient_is_its_own_losss(name):
    """Three replicas at different points, each on its own batch: replica r's gradient is
    the float64 gradient of its loss alone (to float32 rounding), and the same bytes
    whatever replicas it is stacked with."""
    task = _task(name, "summed")
    model, data, loss, _ = MODELS[name]()
    generators = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    points = [task.init_params(g) for g in generators]
    xs = [data[c][0][:4] for c in range(3)]
    ys = [data[c][1][:4] for c in range(3)]

    def stacked(replicas):
        params = [torch.stack([points[r][j] for r in replicas]) for j in range(len(points[0]))]
        return task.gradients(params, torch.stack([xs[r] for r in replicas]), torch.stack([ys[r] for r in replicas]))

    together = stacked([0, 1, 2])
    others = stacked([2, 1])
    for j in range(len(together)):
        assert torch.equal(together[j][2], others[j][0]) and torch.equal(together[j][1], others[j][1])
    names = [n for n, _ in task.parameter_shapes()]
    for r in range(3):  # one replica alone, in float64, through plain autograd
        alone = model().double()
        with torch.no_grad():
            for n, p in alone.named_parameters():
                p.copy_(points[r][names.index(n)].double())
        x = xs[r].double() if xs[r].dtype.is_floating_point else xs[r]
        y = ys[r].double() if ys[r].dtype.is_floating_point else ys[r]
        expected = torch.autograd.grad(loss(alone(x), y), [dict(alone.named_parameters())[n] for n in names])
        for j, n in enumerate(names):
            scale = float(expected[j].abs().max())
            assert scale > 0, n
            np.testing.assert_allclose(together[j][r].double().numpy(), expected[j].numpy(), rtol=0,
                                       atol=1e-5 * max(scale, 1.0), err_msg=f"{name} {n} replica {r}")


@pytest.mark.parametrize("spec", ["tiny_spec", "cnn_spec"])
def test_summed_samples_do_not_depend_on_the_chunk_size(spec, tmp_path):
    """Chunk sizes 1, 2 and 5 (with 1, 2 and 2 PyTorch threads): the same bytes."""
    task = ModuleTask.from_factory(f"module_factories:{spec}", lr=0.05, batch_size=4, epochs=2, gradients="summed")
    before, dumps = torch.get_num_threads(), []
    try:
        for cs, threads in ((1, 1), (2, 2), (5, 2)):
            torch.set_num_threads(threads)
            dumps.append(ParameterSampler(task, seed=2, chunk_size=cs, progress=False).sample(5, tmp_path / str(cs)))
    finally:
        torch.set_num_threads(before)
    for dump in dumps[1:]:
        for client in dumps[0].clients:
            for k in range(len(dump.checkpoints)):
                assert np.array_equal(dump.samples(client, index=k), dumps[0].samples(client, index=k))
            assert np.array_equal(dump.metric(client, "loss"), dumps[0].metric(client, "loss"))


def test_the_digits_cnn_example_agrees_to_rounding():
    """Where the bytes may differ (examples/digits_cnn.py, batch 50): the same training to
    float32 rounding."""
    pytest.importorskip("sklearn")
    sys.path.insert(0, str(TESTS.parent / "examples"))
    try:
        import digits_cnn
    finally:
        sys.path.remove(str(TESTS.parent / "examples"))
    tasks = [ModuleTask(digits_cnn.small_cnn, digits_cnn.client_data(), F.cross_entropy, lr=0.01, batch_size=50,
                        gradients=g) for g in ("vmap", "summed")]
    a, b = (ParameterSampler(t, seed=1, progress=False).train_chunk(range(2)).samples for t in tasks)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
    assert np.abs(a[:, -1] - a[:, 0]).max() > 1e-3


def test_the_dump_records_the_setting_and_refuses_the_other(tmp_path):
    summed = ModuleTask.from_factory("module_factories:tiny_spec", batch_size=4, gradients="summed")
    vmap = ModuleTask.from_factory("module_factories:tiny_spec", batch_size=4)
    assert vmap.settings["gradients"] == "vmap"
    dump = ParameterSampler(summed, chunk_size=2, progress=False).sample(2, tmp_path / "d")
    assert dump.meta["task_settings"]["gradients"] == "summed"
    with pytest.raises(DumpError, match="gradients"):
        ParameterSampler(vmap, chunk_size=2, progress=False).sample(4, tmp_path / "d")
    # a dump recorded before the setting existed was sampled by vmap(grad): vmap resumes it
    before = {k: v for k, v in vmap.settings.items() if k != "gradients"}
    assert vmap.resume_settings(before) == before
    assert summed.resume_settings(before)["gradients"] == "summed"  # and summed is refused (a difference)
    with pytest.raises(ValueError, match="`gradients` .*'vmap', 'summed'"):
        ModuleTask.from_factory("module_factories:tiny_spec", batch_size=4, gradients="per-replica")


def test_summed_sampling_does_not_import_torch_dynamo(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from mianalysis import ParameterSampler
        from mianalysis.tasks import ModuleTask
        task = ModuleTask.from_factory("module_factories:cnn_spec", batch_size=5, gradients="summed")
        ParameterSampler(task, progress=False).sample(3, r"{tmp_path}/summed")
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
        task = ModuleTask.from_factory("module_factories:cnn_spec", batch_size=5)  # the check can fail: vmap(grad)
        ParameterSampler(task, progress=False).sample(3, r"{tmp_path}/vmap")
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["no", "dynamo", "dynamo"]
