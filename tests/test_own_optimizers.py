"""The project's SGD and Adam (mianalysis.tasks.optimizers) against torch.optim, bit for bit
(torch.equal) over many steps and shapes, both of PyTorch's implementations (multi-tensor
and per-tensor); the sampler and the digits-lenet pretraining with them against the same
with torch.optim; and no torch._dynamo import in a sampling process."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import TINY_DIGITS, TINY_SIGNAL

torch = pytest.importorskip("torch")

import mianalysis.sampling as sampling  # noqa: E402
import mianalysis.tasks.digits as digits  # noqa: E402
from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import get_task  # noqa: E402
from mianalysis.tasks.optimizers import SGD, Adam  # noqa: E402

STEPS = 60
# Shapes of the sampler's stacked tensors and of single layers, odd sizes included (a
# vectorised kernel's remainder loop), and a scalar.
SHAPES = [[(2, 10, 84), (2, 10)], [(192, 10, 84), (192, 10)], [(15, 3, 3), (15, 3), (15, 1, 3)],
          [(7,), (1,), ()], [(33, 17), (1000,)]]
SHAPE_IDS = ["digits-pair", "digits-chunk", "small-stack", "vector-scalar", "odd-sizes"]


def _start(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for shape in shapes]


def _gradients(params, step):
    """Gradients from 1e-12 to 1e3 in magnitude, some exactly zero, some negative zero."""
    g = torch.Generator().manual_seed(5000 + step)
    out = []
    for p in params:
        grad = torch.randn(p.shape, generator=g) * 10.0 ** (torch.rand(p.shape, generator=g) * 15 - 12)
        grad = torch.where(torch.rand(p.shape, generator=g) < 0.05, 0.0, grad)
        out.append(torch.where(torch.rand(p.shape, generator=g) < 0.02, -0.0, grad))
    return out


def _train(make, start, steps=STEPS):
    params = [p.clone().requires_grad_(True) for p in start]
    opt = make(params)
    for step in range(steps):
        for p, g in zip(params, _gradients(params, step)):
            p.grad = g
        opt.step()
    return [p.detach() for p in params]


def _assert_equal(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape
        assert torch.equal(a, b)
        assert a.numpy().tobytes() == b.numpy().tobytes()  # the sign of zero too


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("lr", [1e-5, 1e-3, 0.3])
@pytest.mark.parametrize("shapes", SHAPES, ids=SHAPE_IDS)
def test_adam_equals_torch_optim_adam(shapes, lr, foreach):
    start = _start(shapes, seed=len(shapes))
    ours = _train(lambda p: Adam(p, lr=lr), start)
    _assert_equal(ours, _train(lambda p: torch.optim.Adam(p, lr=lr, foreach=foreach), start))
    assert all(not torch.equal(a, b) for a, b in zip(ours, start) if a.numel() > 4)  # the steps moved them


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("lr", [1e-5, 1e-2])
@pytest.mark.parametrize("shapes", SHAPES, ids=SHAPE_IDS)
def test_sgd_equals_torch_optim_sgd(shapes, lr, foreach):
    start = _start(shapes, seed=len(shapes))
    _assert_equal(_train(lambda p: SGD(p, lr=lr), start),
                  _train(lambda p: torch.optim.SGD(p, lr=lr, foreach=foreach), start))


def test_adam_other_betas_and_eps_equal_torch_optim():
    start = _start(SHAPES[2], seed=0)
    kw = {"lr": 1e-2, "betas": (0.5, 0.9), "eps": 1e-6}
    _assert_equal(_train(lambda p: Adam(p, **kw), start), _train(lambda p: torch.optim.Adam(p, **kw), start))


def test_zero_grad_forgets_the_gradients_and_a_missing_one_is_named():
    p = torch.zeros(3, requires_grad=True)
    q = torch.zeros(2, requires_grad=True)
    opt = Adam([p, q], lr=1e-3)
    p.grad, q.grad = torch.ones(3), torch.ones(2)
    opt.zero_grad()
    assert p.grad is None and q.grad is None
    p.grad = torch.ones(3)
    with pytest.raises(ValueError, match=r"tensors \[1\] have no gradient \(.grad is None\): set them before step"):
        opt.step()


@pytest.mark.parametrize("lr", [0.0, -1e-3, float("nan")])
def test_bad_learning_rate(lr):
    with pytest.raises(ValueError, match="`lr` must be a positive number"):
        SGD([torch.zeros(2, requires_grad=True)], lr=lr)


def test_no_tensor_is_refused():
    with pytest.raises(ValueError, match="an optimiser needs at least one tensor to update; got none"):
        Adam([], lr=1e-3)


def _torch_optimizer(task, params):
    if task.optimizer == "sgd":
        return torch.optim.SGD(params, lr=task.lr, foreach=True)
    return torch.optim.Adam(params, lr=task.lr, foreach=True)


SAMPLED = {
    "signal-rnn": lambda: get_task("signal-rnn", **TINY_SIGNAL),
    "digits-lenet": lambda: get_task("digits-lenet", **TINY_DIGITS),
    "gaussian-sgd": lambda: get_task("gaussian-sgd", n_iterations=20, rho=0.5),
}


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_sampler_chunks_same_bytes_as_with_torch_optim(name, monkeypatch):
    task = SAMPLED[name]()
    sampler = ParameterSampler(task, seed=2, progress=False)
    ours = sampler.train_chunk(range(3))
    monkeypatch.setattr(sampling, "task_optimizer", _torch_optimizer)
    theirs = sampler.train_chunk(range(3))
    assert ours.samples.tobytes() == theirs.samples.tobytes()
    assert ours.metrics.tobytes() == theirs.metrics.tobytes()
    assert np.abs(ours.samples[:, -1] - ours.samples[:, 0]).max() > 0


def test_pretraining_same_bytes_as_with_torch_optim_adam(monkeypatch, tmp_path):
    def pretrain():
        task = get_task("digits-lenet", **{**TINY_DIGITS, "pretrain_epochs": 3})
        body, head = task.pretrained()
        return [t.clone() for t in (*body.state_dict().values(), *head.state_dict().values())]

    monkeypatch.setenv("MIANALYSIS_CACHE", str(tmp_path / "ours"))
    ours = pretrain()
    monkeypatch.setenv("MIANALYSIS_CACHE", str(tmp_path / "torch"))
    monkeypatch.setattr(digits, "Adam", lambda params, lr: torch.optim.Adam(params, lr=lr))
    theirs = pretrain()
    _assert_equal(ours, theirs)
    start = digits.build_lenet(8)
    assert not torch.equal(ours[0], start[0][0].weight)  # pretraining moved the weights


def test_a_sampling_process_does_not_import_torch_dynamo(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from mianalysis import ParameterSampler
        from mianalysis.tasks import get_task
        for i, task in enumerate([get_task("signal-rnn", **{TINY_SIGNAL!r}), get_task("digits-lenet", **{TINY_DIGITS!r}),
                                  get_task("gaussian-sgd", n_iterations=4)]):
            ParameterSampler(task, progress=False).sample(3, r"{tmp_path}" + f"/d{{i}}")
        assert "torch" in sys.modules
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
        import torch  # the check can fail: building a torch.optim optimiser imports it
        torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "MIANALYSIS_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["no", "dynamo", "dynamo"]
