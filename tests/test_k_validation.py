"""`k` is checked against the number of samples on every path to a KSG kernel.

KSG needs k neighbours of every sample other than the sample itself, so 1 <= k < n_samples.
Each public entry point (ksg_mi with every backend and distance cache, mi_permutation_test,
analyze with and without its distance cache, the CLI) rejects a larger k with the same
message, before any work or file; the internal kernel entry points refuse it too, so no
kernel ever reads past its data (a 200-run dump with k=200 used to crash inside Numba, and
k=20 on 10 runs wrote a confident 1.04 bits).
"""

import hashlib
import re

import numpy as np
import pytest

from mianalysis import ParameterDump, analyze, ksg_mi, mi_permutation_test
from mianalysis.cli import main

N = 10
X = np.random.default_rng(0).standard_normal((N, 2))
Y = X + np.random.default_rng(1).standard_normal((N, 2))
TOO_LARGE = [N, N + 1, 2 * N, 32, 200]


def k_message(k, n, samples="n_samples"):
    return (rf"`k` must be in \[1, {n - 1}\]; got {k}: KSG needs k neighbours of every sample other than the "
            rf"sample itself, so 1 <= k < {samples} \({n}\)")


def _backend(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    return {"backend": backend, "device": "cpu"} if backend == "torch" else {}


@pytest.mark.parametrize("k", TOO_LARGE)
@pytest.mark.parametrize("distance_cache", [True, False, "auto"])
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_ksg_mi_rejects_k_of_n_or_more(k, distance_cache, backend):
    with pytest.raises(ValueError, match=k_message(k, N)):
        ksg_mi(X, Y, k=k, distance_cache=distance_cache, **_backend(backend))


@pytest.mark.parametrize("k", TOO_LARGE)
@pytest.mark.parametrize("distance_cache", [True, False, "auto"])
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_permutation_test_rejects_k_of_n_or_more(k, distance_cache, backend, monkeypatch):
    from mianalysis.estimators import ksg, significance

    def no_work(*args, **kwargs):
        raise AssertionError("work started before `k` was checked")

    monkeypatch.setattr(significance, "add_tie_breaking_noise", no_work)
    monkeypatch.setattr(significance, "ksg_permutation_estimates", no_work)
    monkeypatch.setattr(ksg, "ksg_counts", no_work)
    with pytest.raises(ValueError, match=k_message(k, N)):
        mi_permutation_test(X, Y, k=k, n_permutations=3, random_state=0, distance_cache=distance_cache,
                            **_backend(backend))


@pytest.mark.parametrize("k", [N, 2 * N])
def test_kernel_entry_points_refuse_k_of_n_or_more(k):
    from mianalysis.estimators._neighbours import ksg_counts, marginal_distances
    from mianalysis.estimators.ksg import ksg_estimates_from_distances, ksg_permutation_estimates

    perms = [np.arange(N)[::-1]]
    calls = [
        lambda: ksg_counts(X, Y, k, 1, "float64", distance_cache=True),
        lambda: ksg_counts(X, Y, k, 2, "float32", distance_cache=False),
        lambda: ksg_permutation_estimates(X, Y, perms, k, 1),
        lambda: ksg_estimates_from_distances(marginal_distances(X), marginal_distances(Y), perms, k, 1),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=k_message(k, N)):
            call()


def test_torch_counts_refuse_k_of_n_or_more():
    pytest.importorskip("torch")
    from mianalysis.estimators._neighbours import ksg_counts_torch

    with pytest.raises(ValueError, match=k_message(N, N)):
        ksg_counts_torch(X, Y, N, 1, device="cpu")


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_largest_valid_k_agrees_on_every_path(backend):
    kwargs = _backend(backend)
    values = {ksg_mi(X, Y, k=N - 1, noise=0, distance_cache=cache, **kwargs) for cache in (True, False, "auto")}
    tests = [mi_permutation_test(X, Y, k=N - 1, noise=0, n_permutations=3, random_state=0, distance_cache=cache,
                                 **kwargs) for cache in (True, False)]
    assert len(values) == 1 and tests[0].estimate == tests[1].estimate == values.pop()
    np.testing.assert_array_equal(tests[0].null_distribution, tests[1].null_distribution)


# ---------------------------------------------------------------------- analyze and the CLI
def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _dump(path, n_runs):
    rng = np.random.default_rng(n_runs)
    samples = {c: rng.standard_normal((2, n_runs, 3)).astype(np.float32) for c in "abc"}
    return ParameterDump.from_arrays(path, samples)


@pytest.mark.parametrize("k", TOO_LARGE)
@pytest.mark.parametrize("distance_cache", [True, False, "auto"])
@pytest.mark.parametrize("permutations", [0, 3])
def test_analyze_rejects_k_of_n_runs_or_more_before_any_file(tmp_path, k, distance_cache, permutations):
    dump = _dump(tmp_path / "dump", N)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=k_message(k, N, "the number of runs")):
        analyze(dump, k=k, n_permutations=permutations, distance_cache=distance_cache, out=tmp_path / "t.csv")
    assert snapshot(tmp_path) == before  # no OUT.partial, no table
    assert not (tmp_path / "t.csv.partial").exists()


def test_analyze_200_runs_k_200_is_an_error_not_a_crash(tmp_path):
    dump = _dump(tmp_path / "dump", 200)
    with pytest.raises(ValueError, match=k_message(200, 200, "the number of runs")):
        analyze(dump, estimators=("ksg",), metrics=(), k=200, out=tmp_path / "t.csv")
    assert not (tmp_path / "t.csv.partial").exists()


def test_analyze_checks_k_only_when_ksg_runs(tmp_path):
    dump = _dump(tmp_path / "dump", N)
    rows = analyze(dump, estimators=("gaussian",), metrics=(), k=2 * N)
    assert rows and all(r["quantity"] in ("mi_gaussian", "delta_mi_gaussian") for r in rows)


def test_analyze_largest_valid_k_same_with_and_without_cache(tmp_path):
    dump = _dump(tmp_path / "dump", N)
    kw = dict(estimators=("ksg",), metrics=(), k=N - 1, n_permutations=3, random_state=1)
    cached, direct = analyze(dump, distance_cache=True, **kw), analyze(dump, distance_cache=False, **kw)
    for a, b in zip(cached, direct):
        assert a["value"] == pytest.approx(b["value"], abs=1e-9)


@pytest.mark.parametrize("k", [N, 2 * N])
@pytest.mark.parametrize("extra", [[], ["--no-distance-cache"], ["--permutations", "2"]])
def test_cli_analyze_rejects_k_in_one_line_and_writes_nothing(tmp_path, capsys, k, extra):
    _dump(tmp_path / "dump", N)
    before = snapshot(tmp_path)
    code = main(["analyze", str(tmp_path / "dump"), "--out", str(tmp_path / "t.csv"), "-k", str(k),
                 "--no-progress", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(k_message(k, N, "the number of runs"), err), err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("k", [N, 2 * N])
@pytest.mark.parametrize("extra", [[], ["--permutations", "3"]])
def test_cli_estimate_rejects_k_in_one_line(tmp_path, capsys, k, extra):
    np.savetxt(tmp_path / "x.csv", X, delimiter=",")
    np.savetxt(tmp_path / "y.csv", Y, delimiter=",")
    code = main(["estimate", str(tmp_path / "x.csv"), str(tmp_path / "y.csv"), "--estimator", "ksg", "-k", str(k),
                 *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert re.search(k_message(k, N), err), err
