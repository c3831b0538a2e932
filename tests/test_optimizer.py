"""The sampler's optimisers (`task_optimizer`: Adam / SGD as torch.optim's, over the stacked replica
tensors) against their updates written out one operation at a time, byte for byte over 32
steps: on the parameter shapes of signal-rnn, digits-lenet, gaussian-sgd and a ModuleTask,
in the layouts the sampler uses (a lone replica beside its copy, a chunk of runs x
clients); then whole sampler chunks, real gradients included, trained by the written-out
updates."""

import numpy as np
import pytest
from conftest import TINY_DIGITS

torch = pytest.importorskip("torch")

import mianalysis.sampling as sampling  # noqa: E402
from mianalysis.sampling import ParameterSampler, task_optimizer  # noqa: E402
from mianalysis.tasks import ModuleTask, get_task  # noqa: E402

STEPS = 32


class WrittenOutAdam:
    """Adam (Kingma and Ba 2015, Algorithm 1) in float32, one tensor operation at a time, with
    bias corrections computed in double as Python numbers: m <- b1 m + (1 - b1) g (a lerp),
    v <- b2 v + (1 - b2) g^2, p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def step(self):
        self.t += 1
        b1, b2 = self.betas
        with torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v):
                g = p.grad
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / (1 - b2**self.t) ** 0.5).add_(self.eps)
                p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))


class WrittenOutSGD:
    """p <- p - lr g."""

    def __init__(self, params, lr):
        self.params, self.lr = params, lr

    def step(self):
        with torch.no_grad():
            for p in self.params:
                p.add_(p.grad, alpha=-self.lr)


def written_out(task, params, foreach=True):
    return WrittenOutSGD(params, task.lr) if task.optimizer == "sgd" else WrittenOutAdam(params, task.lr)


def _module_task(factory, **settings):
    return ModuleTask.from_factory(f"module_factories:{factory}", **settings)


TASKS = {
    "signal-rnn": lambda: get_task("signal-rnn", "paper"),
    "digits-lenet": lambda: get_task("digits-lenet", "paper"),
    "gaussian-sgd": lambda: get_task("gaussian-sgd"),
    "module-cnn": lambda: _module_task("cnn_spec", batch_size=5),
    "module-mlp-sgd": lambda: _module_task("tiny_spec", batch_size=4, optimizer="sgd", lr=1e-2),
}
# Replicas stacked by the sampler: a lone replica beside its copy, one run of 3 clients,
# 5 runs of 3 clients, the default chunk of 64 runs of 3 clients.
LAYOUTS = (2, 3, 15, 192)


def _stacked(task, replicas, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((replicas, *shape), generator=g) for _, shape in task.parameter_shapes()]


def _gradients(params, step):
    """Gradients of every order of magnitude from 1e-9 to 10, some exactly zero."""
    g = torch.Generator().manual_seed(1000 + step)
    out = []
    for p in params:
        scale = 10.0 ** (torch.rand(p.shape, generator=g) * 10 - 9)
        grad = torch.randn(p.shape, generator=g) * scale
        out.append(torch.where(torch.rand(p.shape, generator=g) < 0.05, 0.0, grad))
    return out


def _train(make, task, params):
    params = [p.clone().requires_grad_(True) for p in params]
    opt = make(task, params)
    for step in range(STEPS):
        for p, g in zip(params, _gradients(params, step)):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in params]


def _assert_same_bytes(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype == torch.float32
        assert x.numpy().tobytes() == y.numpy().tobytes()


@pytest.mark.parametrize("replicas", LAYOUTS)
@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_optimizer_same_bytes_as_written_out_update(name, replicas):
    task = TASKS[name]()
    start = _stacked(task, replicas, seed=replicas)
    ours = _train(task_optimizer, task, start)
    _assert_same_bytes(ours, _train(written_out, task, start))
    # and torch.optim's per-tensor implementation (tests/test_own_optimizers.py: both of them)
    torch_optim = torch.optim.SGD if task.optimizer == "sgd" else torch.optim.Adam
    _assert_same_bytes(ours, _train(lambda t, p: torch_optim(p, lr=t.lr, foreach=False), task, start))
    assert all(not torch.equal(a, b) for a, b in zip(ours, start))  # the steps moved every tensor


def test_task_optimizer_replica_does_not_depend_on_its_neighbours():
    task = TASKS["signal-rnn"]()
    chunk = _stacked(task, 192, seed=0)
    alone = [torch.cat([p[7:8], p[7:8]]) for p in chunk]  # a lone replica beside its copy
    # Each replica gets its own gradients: those of the chunk for replica 7.
    together = _train(task_optimizer, task, chunk)
    paired = _train(lambda t, p: _Replica7Gradients(task_optimizer(t, p)), task, alone)
    _assert_same_bytes([p[7:8] for p in together], [p[:1] for p in paired])
    _assert_same_bytes([p[7:8] for p in together], [p[1:] for p in paired])


class _Replica7Gradients:
    """Replaces the gradients of a stack of 2 by replica 7's gradients in a stack of 192,
    as `_gradients` draws them (the same generator sequence)."""

    def __init__(self, opt):
        self.opt, self.step_number = opt, 0

    def step(self):
        params = self.opt.param_groups[0]["params"]
        full = _gradients([torch.empty((192, *p.shape[1:])) for p in params], self.step_number)
        for p, g in zip(params, full):
            p.grad = torch.cat([g[7:8], g[7:8]])
        self.step_number += 1
        self.opt.step()


def test_adam_first_step_moves_each_parameter_by_lr():
    # After one step m / sqrt(v) = g / |g| (bias corrections exact): each parameter moves by
    # lr * |g| / (|g| + eps) against its gradient's sign.
    task = get_task("signal-rnn", "paper", lr=1e-2)
    p = torch.zeros(4, 6, requires_grad=True)
    g = torch.tensor([1e-3, -2.0, 1e-7, -1e-8, 5.0, 0.0]).repeat(4, 1)
    p.grad = g.clone()
    task_optimizer(task, [p]).step()
    expected = -1e-2 * np.sign(g.numpy()) * np.abs(g.numpy()) / (np.abs(g.numpy()) + 1e-8)
    np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-5, atol=0)


def test_task_with_unknown_optimizer_is_refused():
    task = get_task("gaussian-sgd")
    task.optimizer = "rmsprop"
    with pytest.raises(ValueError, match="`optimizer` of task 'gaussian-sgd' must be 'adam' or 'sgd'; got 'rmsprop'"):
        task_optimizer(task, [torch.zeros(2, requires_grad=True)])


# Whole chunks: 32 iterations of real gradients (dropout, augmentation, gradient noise
# included), trained once by the sampler and once with its optimiser replaced by the
# written-out update; in a chunk of 4 runs and alone (one run; one client where it applies).
SAMPLED = {
    "signal-rnn": lambda: get_task("signal-rnn", "paper", n_layers=3, seq_len=16, n_examples=64, batch_size=2),
    "signal-rnn-lone": lambda: get_task("signal-rnn", "paper", n_clients=1, n_layers=3, seq_len=16, n_examples=64,
                                        batch_size=2, lr=1e-2),
    "digits-lenet": lambda: get_task("digits-lenet", **{**TINY_DIGITS, "per_digit": 16, "batch_size": 5}),
    "gaussian-sgd": lambda: get_task("gaussian-sgd", n_iterations=32, rho=0.5),
    "module-cnn": lambda: _module_task("cnn_spec", batch_size=5, epochs=16),
    "module-mlp-sgd": lambda: _module_task("tiny_spec", batch_size=4, epochs=11, optimizer="sgd", lr=1e-2),
}


@pytest.mark.parametrize("name", sorted(SAMPLED))
def test_sampler_chunks_same_bytes_as_written_out_update(name, monkeypatch):
    task = SAMPLED[name]()
    assert task.n_iterations >= STEPS
    sampler = ParameterSampler(task, seed=3, progress=False)
    ours = [sampler.train_chunk(runs) for runs in (range(4), [2])]
    monkeypatch.setattr(sampling, "task_optimizer", written_out)
    for runs, result in zip((range(4), [2]), ours):
        reference = sampler.train_chunk(runs)
        assert result.samples.tobytes() == reference.samples.tobytes()
        assert result.metrics.tobytes() == reference.metrics.tobytes()
    assert np.abs(ours[0].samples[:, -1] - ours[0].samples[:, 0]).max() > 0
