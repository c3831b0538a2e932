"""Bad input to every public function and CLI command: a clear error naming the parameter,
and nothing on disk changed by the rejected call.

Estimator and distance array checks (NaN, inf, complex, strings, objects, shapes, empty)
are in test_bad_input.py; this table covers everything else.
"""

import hashlib
import json
import re

import numpy as np
import pytest

from mianalysis import (ParameterDump, analyze, gaussian_mi, ksg_mi, mi_permutation_test, paired_distances)
from mianalysis.cli import main
from mianalysis.diagnostics import eb_criterion
from mianalysis.dumps import DumpError, layout_from_shapes

X = np.random.default_rng(0).standard_normal((30, 2))
Y = X + np.random.default_rng(1).standard_normal((30, 2))
G = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])


@pytest.fixture
def dump_dir(tmp_path):
    rng = np.random.default_rng(2)
    samples = {c: rng.standard_normal((2, 20, 3)).astype(np.float32) for c in ("a", "b")}
    ParameterDump.from_arrays(tmp_path / "dump", samples, layout=[("w", (2,)), ("b", (1,))])
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    np.savetxt(tmp_path / "y_short.csv", Y[:25], delimiter=",")
    (tmp_path / "plain").mkdir()
    return tmp_path


def snapshot(folder):
    """Every file under `folder` with the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _newer_version(folder):
    m = folder / "dump" / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["format_version"] = 99
    m.write_text(json.dumps(manifest))
    return folder / "dump"


def _torch(fn):
    def call(folder):
        pytest.importorskip("torch")
        return fn(folder)
    return call


def _agg(name, *args, **kwargs):
    def call(folder):
        pytest.importorskip("torch")
        from mianalysis import aggregation

        return getattr(aggregation, name)(*args, **kwargs)
    return call


# (id, call(folder), exception, message)
API_CASES = [
    ("ksg-algorithm", lambda f: ksg_mi(X, Y, algorithm=3), ValueError, "`algorithm` must be one of 1, 2; got 3"),
    ("ksg-noise", lambda f: ksg_mi(X, Y, noise=-1.0), ValueError, "`noise` must be"),
    ("ksg-dtype", lambda f: ksg_mi(X, Y, dtype="float16"), ValueError, "`dtype` must be one of 'float64', 'float32'"),
    ("ksg-k-float", lambda f: ksg_mi(X, Y, k=2.5), TypeError, "`k` must be an integer; got 2.5"),
    ("ksg-units", lambda f: ksg_mi(X, Y, units="bans"), ValueError, "`units` must be one of"),
    ("ksg-distance-cache", lambda f: ksg_mi(X, Y, distance_cache="yes"), ValueError,
     "`distance_cache` must be 'auto', True or False; got 'yes'"),
    ("gauss-shrinkage", lambda f: gaussian_mi(X, Y, shrinkage="oas"), ValueError, "`shrinkage` must be one of"),
    ("gauss-bias", lambda f: gaussian_mi(X, Y, bias_correction="yes"), TypeError, "`bias_correction` must be True"),
    ("perm-estimator", lambda f: mi_permutation_test(X, Y, estimator="kde"), ValueError,
     "`estimator` must be one of"),
    ("perm-count", lambda f: mi_permutation_test(X, Y, n_permutations=0), ValueError, "`n_permutations` must be >= 1"),
    ("distance-metric", lambda f: paired_distances(X, Y, metric="cosine"), ValueError, "`metric` must be one of"),
    ("distance-columns", lambda f: paired_distances(X, Y[:, :1]), ValueError, r"`x` and `y` must have the same shape"),
    ("eb-one-row", lambda f: eb_criterion(np.ones((1, 3))), ValueError, "`per_example_grads` needs at least 2"),
    ("eb-nan", lambda f: eb_criterion(np.full((3, 2), np.nan)), ValueError, "`per_example_grads` contains non-finite"),
    ("agg-strings", _agg("fedavg", np.array([["a", "b"]])), TypeError, "`stacked` must be numeric"),
    ("agg-empty", _agg("fedavg", np.zeros((3, 0))), ValueError, r"`stacked` must have shape \(n_clients, n_params\)"),
    ("agg-nan", _agg("median", np.array([[np.nan, 1.0]])), ValueError, "`stacked` contains 1 non-finite"),
    ("agg-threshold", _agg("and_mask", G, threshold=1.5), ValueError, r"`threshold` must be a number in \[0, 1\]"),
    ("agg-beta", _agg("trimmed_mean", G, beta=0.5), ValueError, r"`beta` must be a number in \[0, 0.5\)"),
    ("agg-negative-weight", _agg("fedavg", G, weights=[1, -1, 1]), ValueError, "`weights` must be finite, >= 0"),
    ("agg-weight-count", _agg("geometric_mask", G, weights=[1, 1]), ValueError, r"`weights` must have shape \(3,\)"),
    ("agg-unknown", _agg("get_aggregator", "krum"), ValueError, "unknown aggregator 'krum'; known:"),
    ("dump-missing", lambda f: ParameterDump.open(f / "nowhere"), DumpError, "dump .*nowhere does not exist"),
    ("dump-not-a-dump", lambda f: ParameterDump.open(f / "plain"), DumpError, "is not a dump: no manifest.json"),
    ("dump-newer", lambda f: ParameterDump.open(_newer_version(f)), DumpError, "format version 99"),
    ("dump-no-clients", lambda f: ParameterDump.from_arrays(f / "new", {}), ValueError,
     "`samples` must hold at least one client"),
    ("dump-exists", lambda f: ParameterDump.from_arrays(f / "dump", {"a": np.zeros((1, 2, 1))}), DumpError,
     "already exists and is not an empty folder"),
    ("dump-client", lambda f: ParameterDump.open(f / "dump").samples("zz", 0), ValueError,
     r"`client` must be one of \['a', 'b'\]"),
    ("dump-checkpoint", lambda f: ParameterDump.open(f / "dump").samples("a", 7), ValueError,
     r"`checkpoint` must be an index in \[0, 1\]"),
    ("dump-layer", lambda f: ParameterDump.open(f / "dump").samples("a", 0, layer="conv"), ValueError,
     "`layer` 'conv' is not in the layout"),
    ("analyze-estimator", lambda f: analyze(f / "dump", estimators=["kde"], out=f / "t.csv"), ValueError,
     "`estimators` must be one of"),
    ("analyze-metric", lambda f: analyze(f / "dump", metrics=["cosine"], out=f / "t.csv"), ValueError,
     "`metrics` must be one of"),
    ("analyze-k", lambda f: analyze(f / "dump", k=0, out=f / "t.csv"), ValueError, "`k` must be >= 1"),
    ("analyze-perms", lambda f: analyze(f / "dump", permutations=-1, out=f / "t.csv"), ValueError,
     "`permutations` must be >= 0"),
    ("analyze-perm-names", lambda f: analyze(f / "dump", permutations={"mine": 2}, out=f / "t.csv"), ValueError,
     "`permutations` names unknown estimators"),
    ("analyze-seed", lambda f: analyze(f / "dump", random_state=-1, out=f / "t.csv"), ValueError,
     "`random_state` must be >= 0"),
    ("analyze-layer", lambda f: analyze(f / "dump", layer="conv", out=f / "t.csv"), ValueError,
     "`layer` 'conv' is not in the layout"),
    ("analyze-no-dump", lambda f: analyze(f / "plain", out=f / "t.csv"), DumpError, "is not a dump"),
    ("task-name", _torch(lambda f: __import__("mianalysis.tasks", fromlist=["get_task"]).get_task("mnist")),
     ValueError, "`task` must be one of"),
    ("sampler-runs", _torch(lambda f: _sampler().sample(0, f / "s")), ValueError, "`runs` must be >= 1"),
    ("sampler-init", _torch(lambda f: _sampler(init="zero")), ValueError, "`init` must be one of"),
    ("partition-clients", lambda f: _partition([0, 1, 1], 0), ValueError, r"`n_clients` must be in \[1, 3\]"),
    ("partition-scheme", lambda f: _partition([0, 1, 1], 2, "sorted"), ValueError, "`scheme` must be one of"),
    ("fl-fraction", _torch(lambda f: _fl_config(client_fraction=2.0)), ValueError, r"`client_fraction` must be in"),
    ("fl-placement", _torch(lambda f: _fl_config(placement="server")), ValueError, "`placement` must be one of"),
    ("fl-step-needs-fedsgd", _torch(lambda f: _fl_config(placement="step")), ValueError,
     "set `algorithm`='fedsgd'"),
    ("environments", lambda f: _environments(n_test_clients=0), ValueError, "`n_test_clients` must be >= 1"),
    ("multitask-sizes", lambda f: _multitask("huge"), ValueError, "`sizes` must be one of"),
    ("personalized-method", lambda f: _personalized(method="fedprox"), ValueError, "`method` must be one of"),
]


def _sampler(**kwargs):
    from conftest import TINY_SIGNAL

    from mianalysis import ParameterSampler
    from mianalysis.tasks import SignalRNNTask

    return ParameterSampler(SignalRNNTask(**TINY_SIGNAL), **kwargs)


def _partition(labels, n, scheme="iid"):
    from mianalysis.tasks.partition import partition

    return partition(np.array(labels), n, scheme)


def _fl_config(**kwargs):
    from mianalysis.federated import FederatedConfig

    return FederatedConfig(**kwargs).check()


def _environments(**kwargs):
    from mianalysis.tasks.environments import make_environments

    return make_environments(**kwargs)


def _multitask(sizes):
    from mianalysis.tasks.multitask import make_multitask

    return make_multitask(sizes)


def _personalized(**kwargs):
    from mianalysis.personalized import PersonalizedConfig

    return PersonalizedConfig(**kwargs).check()


@pytest.mark.parametrize("call, error, match", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_rejects_bad_input_and_changes_nothing(dump_dir, call, error, match):
    before = snapshot(dump_dir)
    with pytest.raises(error, match=match):
        call(dump_dir)
    if "newer" not in match and "format version" not in match:
        assert snapshot(dump_dir) == before


# (id, argv with {d} for the folder, message)
CLI_CASES = [
    ("estimate-missing-file", ["estimate", "{d}/nope.csv", "{d}/x.csv"], r"nope.csv"),
    ("estimate-mismatch", ["estimate", "{d}/x.csv", "{d}/y_short.csv"], "same number of samples"),
    ("estimate-k", ["estimate", "{d}/x.csv", "{d}/x.csv", "-k", "0"], r"`k` must be in \[1, 29\]"),
    ("estimate-estimator", ["estimate", "{d}/x.csv", "{d}/x.csv", "--estimator", "kde"],
     "argument --estimator: invalid choice: 'kde'"),
    ("analyze-no-dump", ["analyze", "{d}/nowhere", "--out", "{d}/t.csv"], "does not exist"),
    ("analyze-not-a-dump", ["analyze", "{d}/plain", "--out", "{d}/t.csv"], "is not a dump"),
    ("analyze-metric", ["analyze", "{d}/dump", "--out", "{d}/t.csv", "--metrics", "cosine"],
     "`metrics` must be one of"),
    ("analyze-perms", ["analyze", "{d}/dump", "--out", "{d}/t.csv", "--permutations", "-2"],
     "`permutations` must be >= 0"),
    ("analyze-layer", ["analyze", "{d}/dump", "--out", "{d}/t.csv", "--layer", "conv"], "`layer` 'conv'"),
    ("sample-task", ["sample", "--task", "mnist", "--runs", "2", "--out", "{d}/s"], "invalid choice: 'mnist'"),
    ("sample-runs", ["sample", "--task", "signal-rnn", "--runs", "0", "--out", "{d}/s"], "`runs` must be >= 1"),
    ("sample-runs-text", ["sample", "--task", "signal-rnn", "--runs", "many", "--out", "{d}/s"],
     "argument --runs: invalid int value: 'many'"),
    ("sample-into-dump", ["sample", "--task", "signal-rnn", "--runs", "2", "--out", "{d}/dump"],
     "holds a dump with other settings"),
    ("plot-missing", ["plot", "{d}/none.csv", "--out", "{d}/p.png"], "none.csv does not exist"),
    ("plot-not-a-table", ["plot", "{d}/x.csv", "--out", "{d}/p.png"], "is not an analysis table"),
    ("verify-missing", ["verify", "{d}/nowhere"], "does not exist"),
    ("verify-not-a-dump", ["verify", "{d}/plain"], "is not a dump"),
    ("federate-fraction", ["federate", "--fraction", "2", "--out", "{d}/fl"], r"`client_fraction` must be in"),
    ("federate-aggregator", ["federate", "--aggregator", "krum", "--out", "{d}/fl"], "unknown aggregator 'krum'"),
    ("federate-step", ["federate", "--placement", "step", "--out", "{d}/fl"], "--placement step applies .*; use --algorithm fedsgd"),
    ("federate-task", ["federate", "--task", "cifar", "--out", "{d}/fl"], "`task` must be 'digits' or"),
    ("federate-into-dump", ["federate", "--out", "{d}/dump", "--rounds", "1"], "holds files other than"),
]


@pytest.mark.parametrize("argv, match", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_rejects_bad_input_in_one_line(dump_dir, capsys, argv, match):
    if argv[0] in ("sample", "federate"):
        pytest.importorskip("torch")
    before = snapshot(dump_dir)
    code = main([a.format(d=dump_dir) for a in argv] + (["--no-progress"] if argv[0] in ("sample", "analyze",
                                                                                            "federate") else []))
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"mianalysis {argv[0]}: error: ")
    assert re.search(match, err), err
    assert snapshot(dump_dir) == before
