"""digits-head: digits-lenet's head with an L2 term, whose theta* is known in every run.

Known answers: the task's gradient on a client's features is the convex objective's; theta*
of a run has a gradient norm <= 1e-8 recomputed here from the run's features, agrees with
scikit-learn's LogisticRegression, and is what a dump sampled with reference="optimum" holds.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY_DIGITS

torch = pytest.importorskip("torch")

from mianalysis.sampling import GRAD_NORM, OPTIMUM, ParameterSampler  # noqa: E402
from mianalysis.tasks import TASKS, DigitsHeadTask, DigitsLeNetTask  # noqa: E402
from mianalysis.tasks.convex import softmax_objective  # noqa: E402

L2 = 1e-2


def _run_features(task, sampler, run):
    """The pooled features (float64) and labels of run `run`, from the task's client data."""
    data = [task.client_data(c, sampler.data_generators([run, run], c)) for c in range(task.n_clients)]
    return (np.concatenate([d.inputs[0].numpy() for d in data]).astype(np.float64),
            np.concatenate([d.targets[0].numpy() for d in data]))


def test_registered_as_digits_lenet_with_an_l2_setting():
    assert TASKS["digits-head"] is DigitsHeadTask
    task = DigitsHeadTask(**TINY_DIGITS)
    assert task.settings == {**DigitsLeNetTask(**TINY_DIGITS).settings, "l2": 1e-3}
    assert task.parameter_shapes() == [("fc3.weight", (10, 84)), ("fc3.bias", (10,))]
    with pytest.raises(ValueError, match=r"`l2` \(task digits-head\) must be a finite number in \(0, 10\]"):
        DigitsHeadTask(l2=0)


def test_gradient_is_the_client_objectives():
    task = DigitsHeadTask(**TINY_DIGITS, l2=L2)
    sampler = ParameterSampler(task, progress=False)
    params = [torch.stack([p, p]) for p in sampler.initial_params(1)]
    data = task.client_data(0, sampler.data_generators([1, 1], 0))
    grads = task.gradients([p.clone().requires_grad_(True) for p in params], data.inputs, data.targets)
    theta = torch.cat([params[0][0].reshape(-1), params[1][0]]).double().numpy()
    value, grad, _ = softmax_objective(data.inputs[0].double().numpy(), data.targets[0].numpy(), n_classes=10, l2=L2)(
        theta)
    np.testing.assert_allclose(torch.cat([grads[0][0].reshape(-1), grads[1][0]]).numpy(), grad, atol=1e-6)
    assert float(task.evaluate(params, data)["loss"][0]) == pytest.approx(value, rel=1e-5)


def test_each_runs_optimum_from_its_own_augmentation():
    from sklearn.linear_model import LogisticRegression

    task = DigitsHeadTask(**TINY_DIGITS, l2=L2)
    sampler = ParameterSampler(task, seed=3, progress=False)
    theta, grad_norm = task.optimum([sampler.data_generators(range(2), c) for c in range(task.n_clients)])
    assert theta.shape == (2, 850) and (grad_norm <= 1e-8).all()
    assert np.abs(theta[0] - theta[1]).max() > 1e-3  # another augmentation, another optimum
    x, y = _run_features(task, sampler, 1)
    _, grad, _ = softmax_objective(x, y, n_classes=10, l2=L2)(theta[1])
    assert np.linalg.norm(grad) <= 1e-8
    model = LogisticRegression(C=1 / (len(x) * L2), fit_intercept=False, solver="newton-cg", tol=1e-12,
                               max_iter=10_000).fit(np.hstack([x, np.ones((len(x), 1))]), y)
    np.testing.assert_allclose(theta[1], np.concatenate([model.coef_[:, :84].ravel(), model.coef_[:, 84]]), atol=1e-5)


def test_dump_holds_each_runs_optimum(tmp_path):
    task = DigitsHeadTask(**TINY_DIGITS, l2=L2)
    sampler = ParameterSampler(task, seed=1, chunk_size=2, progress=False, reference="optimum")
    dump = sampler.sample(3, tmp_path / "h")
    assert dump.clients[-1] == OPTIMUM and (dump.metric(OPTIMUM, GRAD_NORM) <= 1e-8).all()
    theta, _ = task.optimum([sampler.data_generators(range(3), c) for c in range(task.n_clients)])
    recorded = dump.samples(OPTIMUM, index=len(dump.checkpoints) - 1).astype(np.float64)
    assert (np.abs(recorded - theta) <= 2 * np.spacing(np.abs(theta).astype(np.float32)) + 1e-9).all()
