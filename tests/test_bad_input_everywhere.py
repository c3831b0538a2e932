"""Bad input to every public function and CLI command: a clear error naming the parameter,
and nothing on disk changed by the rejected call.

Estimator and distance array checks (NaN, inf, complex, strings, objects, shapes, empty)
are in test_bad_input.py; this table covers everything else.
"""

import hashlib
import json
import os
import re
import sys
import time

import numpy as np
import pytest

from mianalysis import (ParameterDump, analyze, gaussian_mi, ksg_mi, mi_permutation_test, paired_distances)
from mianalysis.cli import main
from mianalysis.federated.diagnostics import eb_criterion
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
    """Every file under `folder` with the SHA-256 of its bytes, and every folder (an empty
    one too: a rejected call must not leave an empty output folder behind). Hidden files
    (staging folders, lock files) count like any other."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(folder.rglob("*"))}


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
        from mianalysis.federated import aggregation

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
    ("agg-threshold", _agg("and_mask", G, threshold=1.5), ValueError, r"`threshold` must be a finite number in \[0, 1\]"),
    ("agg-beta", _agg("trimmed_mean", G, beta=0.5), ValueError, r"`beta` must be a finite number in \[0, 0.5\)"),
    ("agg-negative-weight", _agg("fedavg", G, weights=[1, -1, 1]), ValueError, "`weights` must be finite, >= 0"),
    ("agg-weight-count", _agg("geometric_mask", G, weights=[1, 1]), ValueError, r"`weights` must have shape \(3,\)"),
    ("agg-unknown", lambda f: __import__("mianalysis.federated.registry", fromlist=["get_rule"]).get_rule("krum"),
     ValueError, "`aggregator` must be one of 'and_mask', .*; got 'krum'"),
    ("dump-missing", lambda f: ParameterDump.open(f / "nowhere"), DumpError, "dump .*nowhere does not exist"),
    ("dump-not-a-dump", lambda f: ParameterDump.open(f / "plain"), DumpError, "is not a dump: no manifest.json"),
    ("dump-newer", lambda f: ParameterDump.open(_newer_version(f)), DumpError, "format version 99"),
    ("dump-no-clients", lambda f: ParameterDump.from_arrays(f / "new", {}), ValueError,
     "`samples` must hold at least one client"),
    ("dump-exists", lambda f: ParameterDump.from_arrays(f / "dump", {"a": np.zeros((1, 2, 1))}), DumpError,
     "already exists and is not an empty folder"),
    ("dump-client", lambda f: ParameterDump.open(f / "dump").samples("zz", index=0), ValueError,
     r"`client` must be one of \['a', 'b'\]"),
    ("dump-checkpoint", lambda f: ParameterDump.open(f / "dump").samples("a", index=7), ValueError,
     r"`index` must be in \[0, 1\]"),
    ("dump-iteration", lambda f: ParameterDump.open(f / "dump").samples("a", iteration=7), ValueError,
     r"`iteration` 7 is not a checkpoint of .*: its iterations are \[0, 1\]"),
    ("dump-positional-checkpoint", lambda f: ParameterDump.open(f / "dump").samples("a", 1), TypeError,
     r"pass iteration=\.\.\. .* or index=\.\.\."),
    ("dump-layer", lambda f: ParameterDump.open(f / "dump").samples("a", index=0, layer="conv"), ValueError,
     "`layer` 'conv' is not in the layout"),
    ("analyze-estimator", lambda f: analyze(f / "dump", estimators=["kde"], out=f / "t.csv"), ValueError,
     "`estimators` must be one of"),
    ("analyze-metric", lambda f: analyze(f / "dump", metrics=["cosine"], out=f / "t.csv"), ValueError,
     "`metrics` must be one of"),
    ("analyze-k", lambda f: analyze(f / "dump", k=0, out=f / "t.csv"), ValueError, r"`k` must be in \[1, "),
    ("analyze-perms", lambda f: analyze(f / "dump", n_permutations=-1, out=f / "t.csv"), ValueError,
     "`n_permutations` must be >= 0"),
    ("analyze-perm-names", lambda f: analyze(f / "dump", n_permutations={"mine": 2}, out=f / "t.csv"), ValueError,
     "`n_permutations` names unknown estimators"),
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

Z = np.zeros((2, 3, 1))  # a client's samples: 2 checkpoints, 3 runs, 1 parameter

# Rejected writers leave nothing behind: every check runs before the dump (or its staging
# folder) is created.
API_CASES += [
    ("dump-metrics-shape", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, metrics={"a": {"loss": np.zeros(5)}}),
     ValueError, r"`metrics\['a'\]\['loss'\]` must have shape \(2, 3\) \(checkpoints, runs\); got \(5,\)"),
    ("dump-metrics-client", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, metrics={"b": {"loss": Z[..., 0]}}),
     ValueError, r"`metrics` names clients that have no samples: \['b'\]"),
    ("dump-metrics-type", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, metrics={"a": [1.0]}),
     TypeError, r"`metrics\['a'\]` must be a dict of metric name -> array"),
    ("dump-metrics-values", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, metrics={"a": {"loss": "low"}}),
     TypeError, r"`metrics\['a'\]\['loss'\]` must be numeric"),
    ("dump-meta-json", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, meta={"x": object()}),
     TypeError, "`meta` must be JSON-serialisable"),
    ("dump-meta-type", lambda f: ParameterDump.from_arrays(f / "new", {"a": Z}, meta=["x"]),
     TypeError, "`meta` must be a dict or None; got list"),
    ("dump-create-meta-json", lambda f: ParameterDump.create(f / "new", clients=["a"], checkpoints=[0], n_runs=2,
                                                              layout=layout_from_shapes([("w", (1,))]), meta={"s": {1}}),
     TypeError, "`meta` must be JSON-serialisable"),
    ("record-fraction", _torch(lambda f: _record(f, client_fraction=0.5)), ValueError,
     "recording every client's model needs `client_fraction` = 1"),
    ("record-step", _torch(lambda f: _record(f, algorithm="fedsgd", placement="step")), ValueError,
     "recording local models needs `placement`='update'"),
    ("record-chunk-size", _torch(lambda f: _record(f, chunk_size=0)), ValueError, "`chunk_size` must be >= 1; got 0"),
    ("record-layer", _torch(lambda f: _record(f, layer="conv")), ValueError, "`layer` 'conv' is not in the layout"),
    ("record-other-dump", _torch(lambda f: _record(f, out="dump")), DumpError, "holds a dump with other settings"),
]


def _record(folder, *, out="rec", layer=None, chunk_size=16, **config):
    from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates

    config = {"rounds": 1, "client_fraction": 1.0, "batch_size": 20, **config}
    sim = FederatedSimulation("mlp", FederatedData.digits(3, seed=0), FederatedConfig(**config))
    return record_replicates(sim, folder / out, layer=layer, chunk_size=chunk_size, progress=False)

# Task settings, each checked by type and range when the task is built, before anything is
# written: setting -> (a value of the wrong type, out-of-range values, a fractional value for
# an integer setting or None, what the message says the setting must be).
INT1 = r"an integer >= 1"
NO_TYPE_CASE = object()  # a choice of strings: any other value is a ValueError, there is no wrong type
SETTINGS = {
    "signal-rnn": {
        "n_clients": ("three", [0, -2], 2.5, INT1),
        "n_examples": ([100], [0], 31.5, INT1),
        "seq_len": ("long", [0, 1], 16.5, r"an integer >= 2"),
        "n_layers": ("abc", [-1, 0], 2.7, INT1),
        "hidden": (True, [0], 3.5, INT1),
        "dropout": ("0.1", [-0.1, 1.0, float("nan")], None, r"a finite number in \[0, 1\)"),
        "lr": ("fast", [0, -1e-3, 1e38, 11.0, float("inf"), float("nan")], None,
               r"a finite number in \(0, 10\] \(Adam moves each parameter by about lr per step\)"),
        "batch_size": ("all", [0, -8], 8.5, INT1),
        "n_components": (None, [0], 1.5, INT1),
        "noise": ("none", [-0.1, float("inf")], None, r"a finite number >= 0"),
        "shift_range": ("wide", [[1.0, -1.0], [0.0, float("nan")]], None,
                        r"a pair \[low, high\] of finite numbers with low <= high"),
        "scale_range": ([0.5, 1.0, 2.0], [[2.0, 0.5]], None, r"a pair \[low, high\] of finite numbers with low <= high"),
        "data_seed": ("zero", [-1, 2**32], 0.5, r"an integer in \[0, 4294967295\]"),
        "eval_examples": ("all", [0], 2.5, r"None or an integer >= 1"),
    },
    "digits-lenet": {
        "n_clients": ("three", [0], 1.5, INT1),
        "per_digit": ("few", [0, -1], 2.5, INT1),
        "lr": ([1e-3], [0, 1e38, float("nan")], None, r"a finite number in \(0, 10\]"),
        "batch_size": ("all", [0], 5.5, INT1),
        "max_rotation": ("15", [-1.0, 181.0], None, r"a finite number in \[0, 180\]"),
        "max_zoom": (False, [-0.1, 1.0], None, r"a finite number in \[0, 1\)"),
        "max_shift": ("0.1", [-0.5, 1.5], None, r"a finite number in \[0, 1\]"),
        "mnist_path": (3, ["/nonexistent/mnist", ""], None, r"None or the path of an existing folder"),
        "pretrain_epochs": ("30", [-1], 1.5, r"an integer >= 0"),
        "pretrain_lr": ("fast", [0, 100.0], None, r"a finite number in \(0, 10\]"),
        "data_seed": ("zero", [-1, 2**32], 0.5, r"an integer in \[0, 4294967295\]"),
        "head_start": (NO_TYPE_CASE, ["fixed", "", 3, None], None, r"one of \['pretrained', 'random'\]"),
        "head_noise": ("0.01", [-0.01, 10.5, float("inf")], None, r"a finite number in \[0, 10\]"),
    },
}
# Settings that are fine alone but not together.
COMBINATIONS = [
    ("signal-rnn", {"n_examples": 32}, r"`batch_size` \(task signal-rnn\) must be <= the number of training "
                                       r"examples per client \(32\); got 64"),
    ("signal-rnn", {"n_examples": 16, "batch_size": 8, "eval_examples": 17},
     r"`eval_examples` \(task signal-rnn\) must be None \(all examples\) or <= `n_examples` \(16\); got 17"),
    ("digits-lenet", {"per_digit": 2}, r"`batch_size` \(task digits-lenet\) must be <= the number of training "
                                       r"examples per client \(20\); got 50"),
]


def _setting_cases():
    """(id, task, setting, value, error, message) for every bad value in SETTINGS."""
    cases = []
    for task, table in SETTINGS.items():
        for key, (wrong_type, out_of_range, fractional, must) in table.items():
            message = rf"^`{key}` \(task {task}\) must be {must}"
            if wrong_type is not NO_TYPE_CASE:
                cases.append((f"{task}-{key}-type", task, key, wrong_type, TypeError, message))
            cases += [(f"{task}-{key}-range{i}", task, key, v, ValueError, message) for i, v in enumerate(out_of_range)]
            if fractional is not None:
                cases.append((f"{task}-{key}-fraction", task, key, fractional, TypeError,
                              rf"{message}; got {re.escape(str(fractional))}$"))
    return cases


SETTING_CASES = _setting_cases()
for _id, _task, _key, _value, _error, _message in SETTING_CASES:
    API_CASES.append((f"setting-{_id}", (lambda t, k, v: lambda f: _get_task(t, **{k: v}))(_task, _key, _value),
                      _error, _message))
for _i, (_task, _settings, _message) in enumerate(COMBINATIONS):
    API_CASES.append((f"settings-{_task}-together{_i}", (lambda t, s: lambda f: _get_task(t, **s))(_task, _settings),
                      ValueError, _message))
# The sampler: the task is checked before the dump exists (the 0-run dumps of the issue).
API_CASES += [
    ("sampler-seq-len", lambda f: _sample(f, seq_len=0), ValueError, r"`seq_len` \(task signal-rnn\) must be an "
                                                                      r"integer >= 2; got 0"),
    ("sampler-n-layers", lambda f: _sample(f, n_layers=-1), ValueError, r"`n_layers` \(task signal-rnn\) must be"),
    ("task-class-n-layers", lambda f: __import__("mianalysis.tasks", fromlist=["x"]).SignalRNNTask(n_layers=2.7),
     TypeError, r"^`n_layers` \(task signal-rnn\) must be an integer >= 1; got 2.7$"),
    ("task-class-preset", lambda f: _get_task("signal-rnn", preset="long", n_examples=100, batch_size=50), ValueError,
     r"`eval_examples` \(task signal-rnn\) must be None \(all examples\) or <= `n_examples` \(100\); got 128"),
]


def _get_task(name, preset="paper", **settings):
    from mianalysis.tasks import get_task

    return get_task(name, preset, **settings)


def _sample(folder, **settings):
    from mianalysis import ParameterSampler

    from conftest import TINY_SIGNAL

    return ParameterSampler(_get_task("signal-rnn", **{**TINY_SIGNAL, **settings}), progress=False).sample(2, folder / "s")


def _sampler(**kwargs):
    from conftest import TINY_SIGNAL

    from mianalysis import ParameterSampler
    from mianalysis.tasks import SignalRNNTask

    return ParameterSampler(SignalRNNTask(**TINY_SIGNAL), **kwargs)


def _partition(labels, n, scheme="iid"):
    from mianalysis.federated.partition import partition

    return partition(np.array(labels), n, scheme)


def _fl_config(**kwargs):
    from mianalysis.federated import FederatedConfig

    return FederatedConfig(**kwargs).check()


def _environments(**kwargs):
    from mianalysis.federated.environments import make_environments

    return make_environments(**kwargs)


def _multitask(sizes):
    from mianalysis.federated.multitask import make_multitask

    return make_multitask(sizes)


def _personalized(**kwargs):
    from mianalysis.federated.personalized import PersonalizedConfig

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
    ("estimate-k", ["estimate", "{d}/x.csv", "{d}/x.csv", "--estimator", "ksg", "-k", "0"],
     r"`k` must be in \[1, 29\]"),
    ("estimate-k-auto", ["estimate", "{d}/x.csv", "{d}/x.csv", "-k", "3"], "-k applies to --estimator ksg"),
    ("estimate-estimator", ["estimate", "{d}/x.csv", "{d}/x.csv", "--estimator", "kde"],
     "argument --estimator: invalid choice: 'kde'"),
    ("analyze-no-dump", ["analyze", "{d}/nowhere", "--out", "{d}/t.csv"], "does not exist"),
    ("analyze-not-a-dump", ["analyze", "{d}/plain", "--out", "{d}/t.csv"], "is not a dump"),
    ("analyze-metric", ["analyze", "{d}/dump", "--out", "{d}/t.csv", "--metrics", "cosine"],
     "`metrics` must be one of"),
    ("analyze-perms", ["analyze", "{d}/dump", "--out", "{d}/t.csv", "--permutations", "-2"],
     "`n_permutations` must be >= 0"),
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
    ("federate-aggregator", ["federate", "--aggregator", "krum", "--out", "{d}/fl"],
     "argument --aggregator: invalid choice: 'krum' \\(choose from 'fedavg', 'fedsgd', 'median'"),
    ("federate-step", ["federate", "--placement", "step", "--out", "{d}/fl"], "--placement step applies .*; use --algorithm fedsgd"),
    ("federate-task", ["federate", "--task", "cifar", "--out", "{d}/fl"], "`task` must be 'digits' or"),
    ("federate-into-dump", ["federate", "--out", "{d}/dump", "--rounds", "1"], "holds files other than"),
]

FL = ["federate", "--clients", "3", "--rounds", "1", "--batch", "20", "--out", "{d}/fl"]
# Rejected federate runs leave no OUT (not even an empty one) and no dump in it.
CLI_CASES += [
    ("federate-record-fraction", FL + ["--record", "--fraction", "0.5"], "needs `client_fraction` = 1"),
    ("federate-record-step", FL + ["--record", "--fraction", "1", "--algorithm", "fedsgd", "--placement", "step"],
     "needs `placement`='update'"),
    ("federate-record-layer", FL + ["--record", "--fraction", "1", "--layer", "conv"], "`layer` 'conv'"),
    ("federate-record-chunk", FL + ["--record", "--fraction", "1", "--chunk-size", "0"], "`chunk_size` must be >= 1"),
    ("federate-mnist-path", FL + ["--mnist-path", "{d}/nowhere"], "nowhere"),
    ("federate-diverges", FL + ["--fraction", "1", "--lr", "1e30"], "training diverged in round 1"),
    ("federate-record-diverges", FL + ["--record", "--fraction", "1", "--lr", "1e30"], "training diverged in round 1"),
]

# Every bad task setting through `sample --set` (JSON values): one line, nothing written.
for _id, _task, _key, _value, _error, _message in SETTING_CASES:
    CLI_CASES.append((f"sample-set-{_id}", ["sample", "--task", _task, "--runs", "2", "--out", "{d}/s", "--set",
                                            f"{_key}={json.dumps(_value)}"], _message.replace("^", ": error: ")))
for _i, (_task, _settings, _message) in enumerate(COMBINATIONS):
    CLI_CASES.append((f"sample-set-{_task}-together{_i}", ["sample", "--task", _task, "--runs", "2", "--out", "{d}/s"]
                      + [a for k, v in _settings.items() for a in ("--set", f"{k}={json.dumps(v)}")], _message))
CLI_CASES += [
    ("sample-set-text", ["sample", "--task", "signal-rnn", "--runs", "2", "--out", "{d}/s", "--set", "n_layers=abc"],
     r"error: `n_layers` \(task signal-rnn\) must be an integer >= 1; got 'abc'$"),
    ("sample-set-seq-len", ["sample", "--task", "signal-rnn", "--runs", "2", "--out", "{d}/s", "--set", "seq_len=0"],
     r"`seq_len` \(task signal-rnn\) must be an integer >= 2; got 0$"),
    ("sample-set-lr", ["sample", "--task", "signal-rnn", "--runs", "2", "--out", "{d}/s", "--set", "lr=1e38"],
     r"`lr` \(task signal-rnn\) must be a finite number in \(0, 10\]"),
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


def _fail(*args, **kwargs):
    raise OSError(28, "No space left on device")


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("writer", ["from_arrays", "sample", "record"])
@pytest.mark.parametrize("failure", [_fail, _interrupt], ids=["disk-full", "interrupted"])
def test_writer_stopped_before_its_first_chunk_leaves_nothing(dump_dir, monkeypatch, writer, failure):
    """A dump created by a call that then fails or is interrupted before its first chunk is
    removed again (from an empty folder given as the target only the dump's files are removed): the rerun starts afresh
    instead of being refused for an empty dump with other settings."""
    (dump_dir / "empty").mkdir()
    before = snapshot(dump_dir)
    if writer == "from_arrays":
        monkeypatch.setattr(ParameterDump, "_write_chunk_locked", failure)
        call = lambda out: ParameterDump.from_arrays(out, {"a": Z})  # noqa: E731
    elif writer == "sample":
        pytest.importorskip("torch")
        from mianalysis import ParameterSampler

        monkeypatch.setattr(ParameterSampler, "train_chunk", failure)
        call = lambda out: _sampler(progress=False).sample(4, out)  # noqa: E731
    else:
        pytest.importorskip("torch")
        from mianalysis.federated import FederatedSimulation

        monkeypatch.setattr(FederatedSimulation, "run", failure)
        call = lambda out: _record(dump_dir, out=out)  # noqa: E731
    held = os.open(dump_dir / "empty", os.O_RDONLY)  # the user's folder itself must survive, not be made again
    try:
        for out in (dump_dir / "new", dump_dir / "empty"):
            with pytest.raises((OSError, KeyboardInterrupt)):
                call(out)
            assert snapshot(dump_dir) == before
        assert os.fstat(held).st_nlink > 0  # a folder that was removed has no links left
    finally:
        os.close(held)


def test_sampler_failing_after_a_chunk_keeps_the_dump_to_resume(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from mianalysis import ParameterSampler

    original, calls = ParameterSampler.train_chunk, []

    def second_fails(self, runs, **kwargs):
        calls.append(runs)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, runs, **kwargs)

    monkeypatch.setattr(ParameterSampler, "train_chunk", second_fails)
    with pytest.raises(KeyboardInterrupt):
        _sampler(chunk_size=2, progress=False).sample(4, tmp_path / "s")
    assert ParameterDump.open(tmp_path / "s").completed_runs == 2


@pytest.mark.parametrize("task", sorted(SETTINGS))
def test_every_task_setting_has_one_rule_and_every_rule_is_tested(task):
    from mianalysis.tasks import TASKS

    cls = TASKS[task]
    assert set(cls.setting_rules) == set(cls.default_settings()) == set(SETTINGS[task])
    for preset in cls.presets:  # the defaults and presets pass their own rules, unchanged
        assert cls.from_preset(preset).settings == {**cls.default_settings(), **cls.presets[preset]}


def test_integral_float_is_stored_as_an_integer(tmp_path, capsys):
    """`--set n_layers=2.0` (JSON may spell an integer so) trains 2 layers and records 2, not 2.0."""
    pytest.importorskip("torch")
    task = _get_task("signal-rnn", n_layers=2.0, n_examples=16.0, batch_size=8, seq_len=8, lr=1)
    assert task.settings["n_layers"] == 2 and type(task.settings["n_layers"]) is int
    assert type(task.settings["n_examples"]) is int and type(task.settings["lr"]) is float
    argv = ["sample", "--task", "signal-rnn", "--runs", "2", "--out", str(tmp_path / "s"), "--no-progress",
            "--set", "n_layers=2.0", "--set", "seq_len=8", "--set", "n_examples=16", "--set", "batch_size=8.0"]
    assert main(argv) == 0, capsys.readouterr().err
    manifest = (tmp_path / "s" / "manifest.json").read_text()
    assert '"n_layers": 2,' in manifest and '"batch_size": 8,' in manifest
    assert ParameterDump.open(tmp_path / "s").meta["task_settings"]["n_layers"] == 2
    assert [e.name for e in ParameterDump.open(tmp_path / "s").layout][:6] == [
        "rnn.0.weight_ih", "rnn.0.weight_hh", "rnn.0.bias", "rnn.1.weight_ih", "rnn.1.weight_hh", "rnn.1.bias"]
    # The same settings spelled as integers are the same sampling (not "a dump with other settings").
    assert main(argv[:8] + ["--set", "n_layers=2", "--set", "seq_len=8", "--set", "n_examples=16",
                            "--set", "batch_size=8"]) == 0, capsys.readouterr().err


# ---------------------------------------------------------------------- Ctrl-C
CLI = [sys.executable, "-m", "mianalysis.cli"]
TINY_SAMPLE = ["--set", "n_layers=2", "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8"]


def _chunks(manifest):
    def count():
        try:
            return len(json.loads(manifest.read_text())["chunks"])
        except (OSError, ValueError, KeyError):
            return 0
    return count


def _journal_lines(journal):
    def count():
        try:
            return journal.read_text().count("\n")
        except OSError:
            return 0
    return count


def _held_for(lock, seconds):
    """Whether `lock` has existed for `seconds`: its holder is past taking it and at work."""
    seen = []

    def ready():
        if lock.exists() and not seen:
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > seconds
    return ready


def _interrupt_cases(d):
    """(argv, ready(), expected line, outputs that must be absent afterwards) per long command."""
    resume, nothing = "interrupted; rerun the same command to resume", "interrupted; nothing was written"
    sample = ["sample", "--task", "signal-rnn", "--seed", "1", "--no-progress"]
    federate = ["federate", "--clients", "3", "--fraction", "1", "--batch", "20", "--no-progress"]
    return {
        # after its first chunk: the dump is kept and a rerun resumes it
        "sample": (sample + ["--runs", "40", "--chunk-size", "2", *TINY_SAMPLE, "--out", f"{d}/s"],
                   lambda: _chunks(d / "s" / "manifest.json")() >= 1, resume, []),
        # during its first chunk (the writer lock is taken): the new dump is removed again
        "sample-first-chunk": (sample + ["--runs", "64", "--chunk-size", "64", "--set", "n_layers=2", "--set",
                                         "n_examples=512", "--set", "batch_size=8", "--out", f"{d}/s"],
                               lambda: (d / "s" / "manifest.json").exists(), nothing, ["s", ".s.creating", ".s.lock"]),
        "analyze": (["analyze", f"{d}/dump", "--permutations", "30", "--no-progress", "--out", f"{d}/t.csv"],
                    lambda: _journal_lines(d / "t.csv.partial")() >= 2, resume, ["t.csv", ".t.csv.lock"]),
        "federate-record": (federate + ["--rounds", "3", "--replicates", "14", "--record", "--chunk-size", "1",
                                        "--layer", "5", "--out", f"{d}/fl"],
                            lambda: _chunks(d / "fl" / "dump" / "manifest.json")() >= 1, resume, ["fl/history.csv"]),
        # nothing is written before the end of a run that is not recorded
        "federate": (federate + ["--rounds", "500", "--out", f"{d}/fl"], _held_for(d / ".fl.lock", 0.5), nothing,
                     ["fl", ".fl.lock"]),
    }


@pytest.mark.parametrize("command", ["sample", "sample-first-chunk", "analyze", "federate-record", "federate"])
def test_ctrl_c_prints_one_line_and_exits_130(tmp_path, command, cli):
    """SIGINT to a long command: exit status 130 and one line on stderr, no traceback;
    what it leaves is resumable (or nothing at all), and the rerun finishes."""
    pytest.importorskip("torch")
    from interrupt import interrupt_when

    rng = np.random.default_rng(0)
    shared = rng.standard_normal((12, 150, 4))
    ParameterDump.from_arrays(tmp_path / "dump", {c: shared + rng.standard_normal(shared.shape) for c in "abc"})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    argv, ready, line, absent = _interrupt_cases(tmp_path)[command]
    code, err = interrupt_when(CLI + argv, ready, env=env)
    assert code == 130, err
    assert err == f"mianalysis {argv[0]}: {line}\n", err
    for name in absent:
        assert not (tmp_path / name).exists(), name
    assert not [p.name for p in tmp_path.glob(".*.lock")]  # every writer lock given back
    if command == "sample":
        assert 2 <= ParameterDump.open(tmp_path / "s").verify() < 40
        assert cli(argv).returncode == 0  # the rerun (in this process) resumes it
        assert ParameterDump.open(tmp_path / "s").verify() == 40
    elif command == "federate-record":
        assert ParameterDump.open(tmp_path / "fl" / "dump").verify() >= 1
    elif command == "analyze":
        assert (tmp_path / "t.csv.partial").exists()


def _raises(exc):
    def command(args):
        raise exc
    return command


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("Error calling __set_name__"),
                                 OSError("interrupted while writing")], ids=["plain", "wrapped", "during-cleanup"])
def test_ctrl_c_in_process_is_one_line_whatever_wraps_it(tmp_path, capsys, monkeypatch, exc):
    """In-process (as a console script runs it): 130 and the line, also when Python wraps the
    KeyboardInterrupt (3.11 does inside ``__set_name__``) or another error follows it."""
    if not isinstance(exc, KeyboardInterrupt):
        exc.__cause__ = KeyboardInterrupt()
    from mianalysis import cli

    monkeypatch.setattr(cli, "_cmd_verify", _raises(exc))
    assert _main_interrupted(["verify", str(tmp_path / "d")]) == 130
    assert capsys.readouterr().err == "mianalysis verify: interrupted; nothing was written\n"
    # Whether anything was written is read from the command's outputs.
    monkeypatch.setattr(cli, "_cmd_plot", _raises(exc))
    (tmp_path / "t.csv").write_text("x\n")
    assert _main_interrupted(["plot", str(tmp_path / "t.csv"), "--out", str(tmp_path / "p.png")]) == 130
    assert capsys.readouterr().err == "mianalysis plot: interrupted; nothing was written\n"
    (tmp_path / "p.png").write_text("")
    assert _main_interrupted(["plot", str(tmp_path / "t.csv"), "--out", str(tmp_path / "p.png")]) == 130
    assert capsys.readouterr().err == "mianalysis plot: interrupted; rerun the same command to resume\n"


def _main_interrupted(argv):
    try:
        return main(argv)
    except KeyboardInterrupt:  # not out of the test: it would stop the whole test session
        pytest.fail("KeyboardInterrupt escaped main()")


def test_other_errors_are_not_taken_for_interrupts(tmp_path, capsys, monkeypatch):
    from mianalysis import cli

    monkeypatch.setattr(cli, "_cmd_verify", _raises(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        main(["verify", str(tmp_path / "d")])
