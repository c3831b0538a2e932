"""The sampler's optimum client (``ParameterSampler(reference="optimum")``): each run's exact
theta* recorded beside the clients at every checkpoint, with its gradient norm as a metric.

Known answers: theta* recomputed here from the task's client data by scikit-learn's
LogisticRegression (softmax-regression) and by gaussian-sgd's closed form
(``central_parameters``); the dump must hold them to float32 precision. Then the identities
the central client has too: the clients are the same bytes with or without it, and a run's
optimum is the same bytes in any chunk; then the dump's settings and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mianalysis import ParameterDump  # noqa: E402
from mianalysis.dumps import DumpError  # noqa: E402
from mianalysis.sampling import GRAD_NORM, OPTIMUM, REFERENCES, ParameterSampler  # noqa: E402
from mianalysis.tasks import GaussianSGDTask, SignalRNNTask, SoftmaxRegressionTask  # noqa: E402
from mianalysis.tasks.convex import softmax_objective  # noqa: E402

SMALL = {"n_examples": 40, "batch_size": 20, "epochs": 2}


def _float32_close(recorded, exact):
    """`recorded` (float32) is `exact` (float64) rounded to float32, to within a few ulps."""
    exact = np.asarray(exact, dtype=np.float64)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(recorded.astype(np.float64) - exact) <= 2 * ulp + 1e-9).all()


def test_softmax_dump_records_the_optimum_with_its_gradient_norm(tmp_path):
    from sklearn.linear_model import LogisticRegression

    task = SoftmaxRegressionTask(split="label-skew", **SMALL)
    sampler = ParameterSampler(task, seed=2, chunk_size=4, progress=False, reference="optimum")
    dump = sampler.sample(6, tmp_path / "d")
    assert REFERENCES == ("central", "optimum") and OPTIMUM == "optimum"
    assert dump.clients == ["0", "1", "2", "optimum"]
    assert dump.metric_names == ["loss", "accuracy", GRAD_NORM]
    assert dump.meta["reference"] == "optimum"
    assert (dump.metric(OPTIMUM, GRAD_NORM) <= 1e-8).all()
    assert np.isnan(dump.metric("0", GRAD_NORM)).all()  # not recorded for the clients
    # theta* recomputed here, from the client data the task trains on, by another solver
    data = [task.client_data(c, sampler.data_generators([0], c)) for c in range(task.n_clients)]
    x = torch.cat([d.inputs[0] for d in data]).double().numpy()
    y = torch.cat([d.targets[0] for d in data]).numpy()
    l2 = task.settings["l2"]
    model = LogisticRegression(C=1 / (len(x) * l2), fit_intercept=False, solver="newton-cg", tol=1e-12,
                               max_iter=10_000).fit(np.hstack([x, np.ones((len(x), 1))]), y)
    theirs = np.concatenate([model.coef_[:, :64].ravel(), model.coef_[:, 64]])
    for t in range(len(dump.checkpoints)):
        recorded = dump.samples(OPTIMUM, index=t)
        assert recorded.shape == (6, 650)
        np.testing.assert_allclose(recorded, np.broadcast_to(theirs, recorded.shape), rtol=0, atol=1e-5)
    # ... and to float32 rounding of the task's own float64 theta*
    theta, _ = task.optimum([sampler.data_generators(range(6), c) for c in range(task.n_clients)])
    _float32_close(dump.samples(OPTIMUM, index=len(dump.checkpoints) - 1), theta)
    # its loss metric is the pooled objective (the clients' equal-size average) at theta*
    value, _, _ = softmax_objective(x, y, n_classes=10, l2=l2)(theta[0])
    np.testing.assert_allclose(dump.metric(OPTIMUM, "loss"), value, rtol=1e-5)


def test_gaussian_sgd_dump_records_the_closed_form(tmp_path):
    task = GaussianSGDTask(n_iterations=5, d=6, rho=0.3)
    sampler = ParameterSampler(task, seed=3, chunk_size=4, progress=False, reference="optimum", shared=("data",))
    dump = sampler.sample(6, tmp_path / "g")
    closed = task.central_parameters([sampler.data_generators(range(6), c) for c in range(task.n_clients)])
    for t in range(len(dump.checkpoints)):
        _float32_close(dump.samples(OPTIMUM, index=t), closed)
    assert (dump.metric(OPTIMUM, GRAD_NORM) <= 1e-8).all()
    assert len({dump.samples(OPTIMUM, index=0)[r].tobytes() for r in range(6)}) == 6  # a theta* per run


def test_gaussian_sgd_optimum_is_recorded_through_the_transform():
    task = GaussianSGDTask(n_iterations=3, d=4, transform="cubic")
    sampler = ParameterSampler(task, seed=1, progress=False, reference="optimum")
    result = sampler.train_chunk(range(3))
    closed = task.central_parameters([sampler.data_generators(range(3), c) for c in range(task.n_clients)])
    _float32_close(result.samples[-1, -1], closed + closed**3)


@pytest.mark.parametrize("make", [lambda: SoftmaxRegressionTask(**SMALL), lambda: GaussianSGDTask(n_iterations=4)])
def test_clients_are_the_same_bytes_with_or_without_the_optimum(make):
    task = make()
    without = ParameterSampler(task, seed=4, progress=False).train_chunk(range(3))
    with_optimum = ParameterSampler(task, seed=4, progress=False, reference="optimum").train_chunk(range(3))
    assert with_optimum.samples.shape[0] == task.n_clients + 1
    assert np.array_equal(without.samples, with_optimum.samples[:-1])
    assert np.array_equal(without.metrics, with_optimum.metrics[:-1, :-1])


@pytest.mark.parametrize("make", [lambda: SoftmaxRegressionTask(**SMALL), lambda: GaussianSGDTask(n_iterations=4)])
def test_a_runs_optimum_is_the_same_bytes_in_any_chunk_and_in_the_plain_loop(make):
    sampler = ParameterSampler(make(), seed=5, progress=False, reference="optimum")
    together = sampler.train_chunk(range(4))
    loop = sampler.train_chunk(range(4), vectorised=False)
    assert np.array_equal(together.samples[-1], loop.samples[-1])
    for runs in ([2], [1, 3]):
        part = sampler.train_chunk(runs)
        for i, run in enumerate(runs):
            assert np.array_equal(part.samples[-1, :, i], together.samples[-1, :, run])
            assert np.array_equal(part.metrics[-1, ..., i], together.metrics[-1, ..., run])


def test_resume_checks_the_reference(tmp_path):
    task = GaussianSGDTask(n_iterations=3, d=3)
    first = ParameterSampler(task, chunk_size=2, progress=False, reference="optimum").sample(4, tmp_path / "r")
    with pytest.raises(DumpError, match="'reference': \\('optimum', None\\)"):
        ParameterSampler(task, chunk_size=2, progress=False).sample(4, tmp_path / "r")
    again = ParameterSampler(task, chunk_size=2, progress=False, reference="optimum").sample(4, tmp_path / "r")
    assert again.clients[-1] == OPTIMUM
    assert np.array_equal(again.samples(OPTIMUM, index=0), first.samples(OPTIMUM, index=0))
    assert ParameterDump.open(tmp_path / "r").completed_runs == 4


def test_refused_for_a_task_without_an_optimum():
    with pytest.raises(ValueError, match="task 'signal-rnn' does not compute each run's exact optimum theta\\* "
                                         r"\(Task.optimum: .*it cannot have `reference`='optimum'"):
        ParameterSampler(SignalRNNTask(), reference="optimum")
    with pytest.raises(ValueError, match="reference"):
        ParameterSampler(SoftmaxRegressionTask(**SMALL), reference="theta")
    with pytest.raises(ValueError, match="knows its exact reference"):  # unchanged: gaussian-sgd has no central
        ParameterSampler(GaussianSGDTask(), reference="central")


@pytest.mark.parametrize("reference", ["optimum", "central"])
def test_analyze_leaves_a_reference_client_out_of_the_pairs(tmp_path, reference):
    # A reference client (the run's optimum, or the FedSGD reference) is recorded beside the
    # clients but is no client: no MI or distance row pairs it, and alone with one client
    # it leaves nothing to pair.
    from mianalysis import analyze

    rng = np.random.default_rng(0)
    samples = {c: rng.standard_normal((2, 40, 3)) for c in ("0", "1", reference)}
    dump = ParameterDump.from_arrays(tmp_path / "d", samples, checkpoints=[0, 1])
    table = analyze(dump, estimators=["gaussian"], n_permutations=0, progress=False)
    pairs = {(r["client_a"], r["client_b"]) for r in table.rows}
    assert pairs == {("0", "1")}
    lone = ParameterDump.from_arrays(tmp_path / "e", {"0": samples["0"], reference: samples[reference]},
                                     checkpoints=[0, 1])
    with pytest.raises(ValueError, match=f"has one: 0 \\(besides the reference '{reference}'"):
        analyze(lone, estimators=["gaussian"], n_permutations=0, progress=False)
