"""softmax-regression: its federations (IID and label skew, one per data seed), that the clients
train on the per-client part of the objective whose minimiser is theta*, and theta* itself.

Known answers: the objective's value and gradient (mianalysis.tasks.convex) at the clients'
parameters against the task's own loss and gradients; the exact class shares of a label-skew
split; theta* against scikit-learn's LogisticRegression.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis.sampling import ParameterSampler  # noqa: E402
from mianalysis.tasks import TASKS, SoftmaxRegressionTask, get_task  # noqa: E402
from mianalysis.tasks.convex import softmax_objective, softmax_optimum  # noqa: E402

SMALL = {"n_examples": 40, "batch_size": 20, "epochs": 2}


def _runs_optimum(task, runs=2):
    sampler = ParameterSampler(task, progress=False)
    return task.optimum([sampler.data_generators(range(runs), c) for c in range(task.n_clients)])


def test_registered_with_650_parameters_and_presets():
    assert TASKS["softmax-regression"] is SoftmaxRegressionTask
    task = get_task("softmax-regression")
    assert task.parameter_shapes() == [("weight", (10, 64)), ("bias", (10,))]
    assert sum(int(np.prod(s)) for _, s in task.parameter_shapes()) == 650
    assert task.settings["split"] == "iid" and get_task("softmax-regression", "label-skew").settings["split"] == \
        "label-skew"
    assert task.n_iterations == 10 * 200 // 20  # 10 epochs of 10 steps
    x, y = task.client_examples(0)
    assert x.shape == (200, 64) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert y.dtype == np.int64


@pytest.mark.parametrize("split", ["iid", "label-skew"])
def test_clients_hold_disjoint_examples_and_seeds_make_other_federations(split):
    def held(task):
        return [set(map(bytes, task.client_examples(c)[0])) for c in range(task.n_clients)]

    first = held(SoftmaxRegressionTask(split=split, data_seed=0))
    # 200 examples each, none shared (the 8x8 digits hold a few duplicated images: compare sizes)
    assert all(len(a & b) <= 2 for i, a in enumerate(first) for b in first[i + 1:])
    other = held(SoftmaxRegressionTask(split=split, data_seed=1))
    assert all(len(a & b) < 150 for a, b in zip(first, other))


def test_label_skew_deals_the_stated_share_of_own_classes():
    task = SoftmaxRegressionTask(split="label-skew", majority=0.8)
    own_classes = [{0, 3, 6, 9}, {1, 4, 7}, {2, 5, 8}]
    for c, own in enumerate(own_classes):
        labels = task.client_examples(c)[1]
        assert np.isin(labels, list(own)).sum() == 160  # round(0.8 * 200) exactly
    iid = SoftmaxRegressionTask(split="iid")
    shares = [np.isin(iid.client_examples(c)[1], list(own)).mean() for c, own in enumerate(own_classes)]
    assert max(shares) < 0.55  # an IID client has about 30-40 % of its examples there


def test_refuses_federations_the_pool_cannot_hold():
    with pytest.raises(ValueError, match=r"`n_clients` \* `n_examples` \(task softmax-regression\) must be <= the "
                                         r"1257 examples"):
        SoftmaxRegressionTask(n_examples=500)
    with pytest.raises(ValueError, match="split 'label-skew' .* client 2 needs 320 examples of its own classes but the "
                                         "pool has"):
        SoftmaxRegressionTask(split="label-skew", n_examples=400, majority=0.8)
    with pytest.raises(ValueError, match=r"`split` \(task softmax-regression\) must be one of \['iid', 'label-skew'\]"):
        SoftmaxRegressionTask(split="dirichlet")
    with pytest.raises(ValueError, match=r"`l2` \(task softmax-regression\) must be a finite number in \(0, 10\]"):
        SoftmaxRegressionTask(l2=0)


def test_clients_train_on_the_per_client_part_of_the_pooled_objective():
    # The task's loss metric and its gradient on a client's whole data are the convex
    # objective's (cross-entropy mean plus (l2 / 2) ||theta||^2, every parameter penalised).
    task = SoftmaxRegressionTask(**SMALL, l2=0.05)
    sampler = ParameterSampler(task, progress=False)
    params = [torch.stack([p, 2 * p]) for p in sampler.initial_params(3)]  # two replicas
    params[1] = params[1] + 0.3  # a non-zero bias
    data = task.client_data(1, sampler.data_generators([3, 3], 1))
    x, y = task.client_examples(1)
    objective = softmax_objective(x, y, n_classes=10, l2=0.05)
    loss = task.evaluate(params, data)["loss"]
    grads = task.gradients([p.clone().requires_grad_(True) for p in params], data.inputs, data.targets)
    for r in range(2):
        theta = torch.cat([params[0][r].reshape(-1), params[1][r]]).double().numpy()
        value, grad, _ = objective(theta)
        assert float(loss[r]) == pytest.approx(value, rel=1e-5)
        np.testing.assert_allclose(torch.cat([grads[0][r].reshape(-1), grads[1][r]]).numpy(), grad, atol=2e-6)


def test_optimum_is_the_pooled_minimiser_the_same_in_every_run():
    from sklearn.linear_model import LogisticRegression

    task = SoftmaxRegressionTask(split="label-skew", **SMALL)
    theta, grad_norm = _runs_optimum(task, runs=3)
    assert theta.shape == (3, 650) and theta.dtype == np.float64 and (grad_norm <= 1e-8).all()
    assert (theta == theta[0]).all()
    x = np.concatenate([task.client_examples(c)[0] for c in range(3)]).astype(np.float64)
    y = np.concatenate([task.client_examples(c)[1] for c in range(3)])
    l2 = task.settings["l2"]
    model = LogisticRegression(C=1 / (len(x) * l2), fit_intercept=False, solver="newton-cg", tol=1e-12,
                               max_iter=10_000).fit(np.hstack([x, np.ones((len(x), 1))]), y)
    theirs = np.concatenate([model.coef_[:, :64].ravel(), model.coef_[:, 64]])
    np.testing.assert_allclose(theta[0], theirs, atol=1e-5)
    # another federation, another optimum
    other, _ = _runs_optimum(SoftmaxRegressionTask(split="label-skew", data_seed=7, **SMALL))
    assert np.abs(other[0] - theta[0]).max() > 0.1


def test_default_training_goes_most_of_the_way_to_each_clients_own_optimum():
    task = SoftmaxRegressionTask()
    result = ParameterSampler(task, seed=1, every=50, progress=False).train_chunk(range(2))
    samples = result.samples.astype(np.float64)  # (clients, checkpoints, runs, params)
    for c in range(task.n_clients):
        own = softmax_optimum(*task.client_examples(c), n_classes=10, l2=task.settings["l2"]).theta
        start, end = (np.linalg.norm(samples[c, t] - own, axis=1) for t in (0, -1))
        assert (end < 0.5 * start).all(), (c, start, end)  # measured: 8.6 -> 2.2
