"""What the sampling design forces on the MI between clients, written into the analysis
table's MI rows (mianalysis.analysis.diagnostics.design)."""

import numpy as np
import pytest

from mianalysis import ParameterDump, ParameterSampler, analyze
from mianalysis.analysis.diagnostics.design import design_note
from mianalysis.analysis.inference.regime import is_outside
from mianalysis.tasks import GaussianSGDTask


@pytest.mark.parametrize("meta, streams, expected", [
    ({"init": "fixed"}, ("data", "noise"),
     "design: fixed start, no stream shared: the clients are independent (MI 0 in truth)"),
    ({"init": "fixed", "shared": ["noise"]}, ("data", "noise"),
     "design: fixed start, shared noise (not data): only the shared streams make clients dependent"),
    ({"init": "fixed", "shared": ["data", "noise"]}, ("data", "noise"),
     "design: fixed start, shared data+noise: only the shared streams make clients dependent"),
    ({"init": "per-run"}, ("data", "noise"),
     "design: per-run start, no stream shared: dependence comes from the start only and can only be lost"),
    ({"init": "per-run", "shared": ["order"]}, ("data", "order", "dropout"),
     "design: per-run start, shared order (not data+dropout): start and shared streams make clients dependent"),
    ({"init": "per-run", "shared": []}, None,
     "design: per-run start, no stream shared: dependence comes from the start only and can only be lost"),
    ({"init": "per-run", "shared": ["augmentation"], "task": "digits-lenet"}, None,
     "design: per-run start, shared augmentation (not order): start and shared streams make clients dependent"),
    ({"init": "fixed", "shared": ["x"], "task": "not-a-task"}, None,
     "design: fixed start, shared x: only the shared streams make clients dependent"),
    ({"init": "per-run", "reference": "central"}, ("data",),
     "design: per-run start, no stream shared: dependence comes from the start only and can only be lost; "
     "client central (the FedSGD reference) is not paired"),
    ({"init": "fixed", "shared": ["order"], "reference": "central"}, ("order", "dropout"),
     "design: fixed start, shared order (not dropout): only the shared streams make clients dependent; "
     "client central (the FedSGD reference) is not paired"),
    ({"init": "fixed", "reference": None}, None,
     "design: fixed start, no stream shared: the clients are independent (MI 0 in truth)"),
    ({}, None, ""),
    ({"init": None, "task": "imported", "reference": "central"}, None, ""),
])
def test_design_note_known_answers(meta, streams, expected):
    assert design_note(meta, streams) == expected


def test_design_note_never_reads_as_a_regime_or_shrinkage_note():
    for init in ("fixed", "per-run"):
        for shared in ([], ["noise"]):
            note = design_note({"init": init, "shared": shared}, ("data", "noise"))
            assert not is_outside(note) and "shrinkage" not in note and "ledoit-wolf" not in note


def test_analysis_rows_say_the_design(tmp_path):
    """A sampler dump's MI rows carry the design; distance rows and dumps the sampler did
    not write do not."""
    task = GaussianSGDTask(d=2, n_iterations=4)
    dump = ParameterSampler(task, seed=0, progress=False, init="fixed", every=2).sample(40, tmp_path / "fixed")
    rows = analyze(dump, estimators=("gaussian",), n_permutations=0, random_state=0)
    mi = [r for r in rows if r["quantity"] == "mi_gaussian"]
    assert mi and all(r["note"].endswith("design: fixed start, no stream shared: the clients are independent "
                                         "(MI 0 in truth)") for r in mi)
    assert all("design:" not in r["note"] for r in rows if not r["quantity"].startswith("mi_"))

    shared = ParameterSampler(task, seed=0, progress=False, shared=("noise",), every=2).sample(40, tmp_path / "shared")
    notes = {r["note"] for r in analyze(shared, estimators=("gaussian",), n_permutations=0, random_state=0)
             if r["quantity"] == "mi_gaussian"}
    assert all("design: per-run start, shared noise (not data): start and shared streams make clients dependent"
               in n for n in notes)

    rng = np.random.default_rng(0)
    plain = ParameterDump.from_arrays(tmp_path / "plain", {c: rng.standard_normal((2, 40, 3)) for c in "ab"})
    assert all("design:" not in r["note"] for r in analyze(plain, estimators=("gaussian",), n_permutations=0))


def test_analysis_rows_of_a_dump_with_the_central_client_say_it_is_not_paired(tmp_path):
    """The sampler records ``"reference": "central"`` in the dump's meta; the MI rows' note
    then says the reference client is in no pair, and no row pairs it."""
    pytest.importorskip("torch")
    from conftest import TINY_SIGNAL

    from mianalysis.tasks import SignalRNNTask

    dump = ParameterSampler(SignalRNNTask(**TINY_SIGNAL), seed=1, progress=False, reference="central").sample(
        30, tmp_path / "central")
    assert dump.meta["reference"] == "central" and "central" in dump.clients
    rows = analyze(dump, estimators=("gaussian",), n_permutations=0, random_state=0)
    mi = [r for r in rows if r["quantity"] == "mi_gaussian"]
    assert mi and all(r["note"].endswith("design: per-run start, no stream shared: dependence comes from the start "
                                         "only and can only be lost; client central (the FedSGD reference) is not paired")
                      for r in mi)
    assert all("central" not in (str(r.get("client_a")), str(r.get("client_b"))) for r in mi)


def test_a_federation_s_rounds_get_their_own_design_note():
    """The Flower recorders write init "global model of round 0, ...": neither a per-run nor a
    fixed start, so the note says what rounds force (dependence through the global model)."""
    pytest.importorskip("flwr")
    from mianalysis.flower.recorder import RECORDED_INIT

    note = design_note({"init": RECORDED_INIT, "shared": ["the global model of every round"]})
    assert note.startswith("design: federated rounds: ") and "same global model" in note
    assert design_note({"init": RECORDED_INIT, "reference": "optimum"}).endswith("is not paired")
