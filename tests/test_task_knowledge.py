"""What a task knows beyond its samples (mianalysis.dumps.knowledge): registered under the
task's name (the built-in tasks' by the sampler), found by the analysis from a dump's meta, so that analysis/ never imports
tasks/ (tests/test_import_structure.py). A toy task registered in one place reaches the
design note and the ``mi_exact`` rows of analyze."""

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze
from mianalysis.analysis.diagnostics.design import design_note
from mianalysis.dumps import knowledge
from mianalysis.dumps.knowledge import exact_mi_of, register_task_knowledge, task_streams
from mianalysis.tasks import TASKS, GaussianSGDTask


@pytest.fixture
def toy(monkeypatch):
    """A task "toy-known" with streams data, order and an exact MI of 0.25 bits per
    iteration times (a + b + 1), registered for this test only."""
    monkeypatch.setattr(knowledge, "_KNOWN", dict(knowledge._KNOWN))
    seen = []

    def exact(meta):
        seen.append(meta)
        return None if meta.get("task_settings", {}).get("unknown") else (lambda it, a, b: 0.25 * it * (a + b + 1))

    register_task_knowledge("toy-known", streams=("data", "order"), exact_mi=exact)
    return seen


def _dump(folder, meta, layout=None):
    rng = np.random.default_rng(0)
    shared = rng.standard_normal((3, 80, 2))
    arrays = {c: shared + rng.standard_normal((3, 80, 2)) for c in ("0", "1", "2")}
    return ParameterDump.from_arrays(folder / "toy", arrays, checkpoints=[0, 2, 4], meta=meta, layout=layout)


def test_every_built_in_task_registers_its_streams_and_only_gaussian_sgd_an_exact_mi():
    for name, kind in TASKS.items():
        assert task_streams({"task": name}) == tuple(kind.streams), name
    task = GaussianSGDTask.from_preset("paper")
    meta = {"task": "gaussian-sgd", "task_settings": task.settings, "init": "fixed", "shared": ["data"]}
    exact = exact_mi_of(meta)
    assert exact(5, 0, 1) == pytest.approx(task.exact_mi(5, 0, 1, init="fixed", shared=["data"]))
    assert exact_mi_of({**meta, "task": "signal-rnn"}) is None  # no closed form
    assert exact_mi_of({**meta, "task_settings": {"no such setting": 1}}) is None  # settings it does not know
    assert exact_mi_of({"task": "a task nobody registered"}) is None and task_streams({}) is None


def test_a_registered_toy_task_reaches_the_design_note(toy):
    note = design_note({"task": "toy-known", "init": "fixed", "shared": ["order"]})
    assert note == "design: fixed start, shared order (not data): only the shared streams make clients dependent"
    # unregistered, the note cannot say which streams are not shared
    assert design_note({"task": "other", "init": "fixed", "shared": ["order"]}).startswith(
        "design: fixed start, shared order: ")


def test_a_registered_toy_task_gives_the_exact_rows_of_analyze(toy, tmp_path):
    dump = _dump(tmp_path, {"task": "toy-known", "task_settings": {}, "init": "per-run"})
    exact = {(r["iteration"], r["client_a"], r["client_b"]): r["value"]
             for r in analyze(dump, estimators=["gaussian"], metrics=[], progress=False) if r["quantity"] == "mi_exact"}
    assert exact == {(it, str(a), str(b)): 0.25 * it * (a + b + 1) for it in (0, 2, 4) for a, b in ((0, 1), (0, 2), (1, 2))}
    assert toy and toy[-1]["task"] == "toy-known"  # asked with the dump's meta


def test_no_exact_rows_where_the_task_has_no_answer_or_not_every_parameter_is_analysed(toy, tmp_path):
    dump = _dump(tmp_path, {"task": "toy-known", "task_settings": {"unknown": True}})
    assert not [r for r in analyze(dump, estimators=["gaussian"], metrics=[], progress=False)
                if r["quantity"] == "mi_exact"]
    dump = _dump(tmp_path / "part", {"task": "toy-known", "task_settings": {}}, layout=[("w", (1,)), ("b", (1,))])
    assert [r for r in analyze(dump, estimators=["gaussian"], metrics=[], progress=False)
            if r["quantity"] == "mi_exact"]  # the whole vector: exact
    part = analyze(dump, layer="w", estimators=["gaussian"], metrics=[], progress=False)
    assert part and not [r for r in part if r["quantity"] == "mi_exact"]  # one tensor's MI is not the task's


@pytest.mark.parametrize("kwargs, message", [
    ({"task": ""}, "`task` must be a non-empty string"),
    ({"task": "t", "streams": "data"}, "`streams` of task 't' must be a sequence of stream names"),
    ({"task": "t", "exact_mi": 0.5}, "`exact_mi` of task 't' must be callable"),
])
def test_bad_registrations_are_refused_in_one_line(monkeypatch, kwargs, message):
    monkeypatch.setattr(knowledge, "_KNOWN", dict(knowledge._KNOWN))
    with pytest.raises(ValueError, match=message):
        register_task_knowledge(**kwargs)


def test_a_registered_toy_reference_is_headrooms_task_reference(monkeypatch, tmp_path):
    """headroom(reference="task") asks the registry for the rebuilt task and each run's
    theta*: a toy task's reference of the runs' own shared component gives the mean's MSE
    as the squared norm of the clients' averaged noise."""
    from types import SimpleNamespace

    from mianalysis import headroom

    monkeypatch.setattr(knowledge, "_KNOWN", dict(knowledge._KNOWN))
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((60, 2))  # each run's optimum
    noise = {c: rng.standard_normal((3, 60, 2)) for c in ("0", "1", "2")}
    asked = []

    def reference(meta, n_runs):
        asked.append(n_runs)
        return theta[:n_runs]

    register_task_knowledge("toy-optimum", rebuild=lambda meta: SimpleNamespace(
        central_parameters=None, settings={"transform": "none"}, n_clients=3), reference=reference)
    dump = ParameterDump.from_arrays(tmp_path / "t", {c: theta + n for c, n in noise.items()}, checkpoints=[0, 2, 4],
                                     meta={"task": "toy-optimum", "task_settings": {}})
    (row,) = headroom(dump, reference="task", rules=["mean"], iterations=[4], progress=False)
    mean_noise = np.mean([n[2] for n in noise.values()], axis=0)
    assert asked == [60]
    assert row["mse"] == pytest.approx(np.mean(np.sum(mean_noise ** 2, axis=1)), rel=1e-5)  # float32 samples
    # a task that registered no optimum is refused in one line naming the way to register one
    register_task_knowledge("toy-optimum", rebuild=lambda meta: SimpleNamespace(
        central_parameters=None, settings={"transform": "none"}, n_clients=3))
    with pytest.raises(ValueError, match="registered no exact optimum"):
        headroom(dump, reference="task", rules=["mean"], iterations=[4], progress=False)
