"""Interrupted work loses nothing, failed writes leave valid dumps, damage is caught,
and the same seed gives the same bytes whatever the threads and chunk sizes."""

import errno
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interrupt import kill_at_random_moments

from mianalysis.cli import main
from mianalysis.dumps import DumpError, ParameterDump

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
CLI = [sys.executable, "-m", "mianalysis.cli"]


def _arrays(n_ckpt=12, runs=150, params=4, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, params))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, params))).astype(np.float32) for c in "abc"}


# The kill loops: three kills, each once 1-2 more checkpoints (chunks) are done, at a random
# moment in or between them; so a fresh command and resumed ones are killed with their
# output part written, and the last leaves its lock behind. The clean run and the final
# rerun need no process of their own and run in this process (the cli fixture).
def test_analyze_killed_at_random_moments_resumes_to_identical_table(tmp_path, cli):
    ParameterDump.from_arrays(tmp_path / "d", _arrays())
    args = ["analyze", str(tmp_path / "d"), "--permutations", "30", "--seed", "3", "--no-progress"]
    assert cli(args + ["--out", tmp_path / "clean.csv"]).returncode == 0
    journal = tmp_path / "killed.csv.partial"

    def finished_checkpoints():
        try:
            return max(0, journal.read_text().count("\n") - 1)
        except OSError:
            return 0

    kills = kill_at_random_moments(CLI + args + ["--out", str(tmp_path / "killed.csv")], finished_checkpoints,
                                   env=ENV, seed=1, times=3)
    assert kills == 3 and journal.exists() and not (tmp_path / "killed.csv").exists()
    lock = tmp_path / ".killed.csv.lock"
    assert lock.exists()  # left by the last killed analysis; it must not block the rerun
    assert cli(args + ["--out", tmp_path / "killed.csv"]).returncode == 0
    assert (tmp_path / "killed.csv").read_bytes() == (tmp_path / "clean.csv").read_bytes()
    assert not journal.exists() and not lock.exists()


def test_analyze_journal_with_other_settings_is_refused(tmp_path):
    from mianalysis.analysis import analyze

    ParameterDump.from_arrays(tmp_path / "d", _arrays(n_ckpt=2, runs=30))
    out = tmp_path / "t.csv"
    journal = tmp_path / "t.csv.partial"
    journal.write_text(json.dumps({"settings": {"k": 5}}) + "\n")
    before = journal.read_bytes()
    with pytest.raises(ValueError, match=r"t.csv.partial holds a partial analysis with other settings .*'k': \(5, 3\)"):
        analyze(tmp_path / "d", out=out)
    assert journal.read_bytes() == before and not out.exists()
    journal.write_text("not json\n")
    with pytest.raises(ValueError, match="is not an analysis journal"):
        analyze(tmp_path / "d", out=out)


def test_analyze_torn_journal_line_is_recomputed(tmp_path):
    from mianalysis.analysis import analyze

    ParameterDump.from_arrays(tmp_path / "d", _arrays(n_ckpt=3, runs=40))
    clean = analyze(tmp_path / "d", out=tmp_path / "clean.csv")
    # A journal with checkpoint 0 finished and checkpoint 1 cut off mid-line.
    analyze(tmp_path / "d", out=tmp_path / "t.csv")
    (tmp_path / "t.csv").unlink()
    first = json.dumps({"settings": _settings_of(tmp_path)})
    rows0 = [r for r in clean if r["checkpoint"] == 0]
    (tmp_path / "t.csv.partial").write_text(first + "\n" + json.dumps({"checkpoint": 0, "rows": rows0}) + "\n"
                                            + '{"checkpoint": 1, "ro')
    again = analyze(tmp_path / "d", out=tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "clean.csv").read_bytes()
    assert len(again) == len(clean)


def _settings_of(tmp_path):
    """The settings line analyze writes for the default arguments on tmp_path/d."""
    from mianalysis.analysis import analyze

    from mianalysis.analysis.journal import Journal

    captured = {}
    original = Journal.__init__

    def spy(self, path, settings):
        captured.update(settings)
        original(self, path, settings)

    Journal.__init__ = spy
    try:
        analyze(tmp_path / "d", out=tmp_path / "spy.csv")
    finally:
        Journal.__init__ = original
    return json.loads(json.dumps(captured))


def test_federate_killed_at_random_moments_resumes_to_identical_outputs(tmp_path, cli):
    pytest.importorskip("torch")
    args = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "3", "--replicates", "14", "--record",
            "--chunk-size", "1", "--batch", "20", "--layer", "5", "--seed", "2", "--no-progress"]
    assert cli(args + ["--out", tmp_path / "clean"]).returncode == 0
    manifest = tmp_path / "killed" / "dump" / "manifest.json"

    def chunks():
        try:
            return len(json.loads(manifest.read_text())["chunks"])
        except (OSError, ValueError):
            return 0

    kills = kill_at_random_moments(CLI + args + ["--out", str(tmp_path / "killed")], chunks, env=ENV, seed=2,
                                   times=3)
    assert kills == 3
    ParameterDump.open(tmp_path / "killed" / "dump").verify()
    lock = tmp_path / "killed" / ".dump.lock"
    assert lock.exists()  # left by the last killed recorder; it must not block the rerun
    assert cli(args + ["--out", tmp_path / "killed"]).returncode == 0
    assert not lock.exists()
    for name in ("dump/client_0.f32", "dump/client_2.f32", "dump/metrics_1.f32", "history.csv"):
        assert (tmp_path / "killed" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


# ---------------------------------------------------------------------- failing writes
def _chunked_dump(path):
    from mianalysis.dumps import layout_from_shapes

    dump = ParameterDump.create(path, clients=["a", "b"], checkpoints=[0, 1], n_runs=6,
                                layout=layout_from_shapes([("w", (3,))]), metric_names=["loss"])
    block = {c: np.full((2, 2, 3), i + 1.0, dtype=np.float32) for i, c in enumerate("ab")}
    dump.write_chunk(0, 2, block)
    return dump, block


def test_failing_array_write_leaves_the_dump_valid(tmp_path, monkeypatch):
    dump, block = _chunked_dump(tmp_path / "d")
    manifest = (tmp_path / "d" / "manifest.json").read_bytes()
    calls = {"n": 0}
    original = ParameterDump._write_runs

    def disk_full(self, *args):
        calls["n"] += 1
        if calls["n"] == 3:  # client b's samples: a's are already written
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, *args)

    monkeypatch.setattr(ParameterDump, "_write_runs", disk_full)
    with pytest.raises(DumpError, match=r"writing runs 2-4 to .* failed \(\[Errno 28\] No space left on device\); "
                                        r"the dump is intact up to run 2"):
        dump.write_chunk(2, 4, block)
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest
    assert dump.completed_runs == 2
    again = ParameterDump.open(tmp_path / "d")
    assert again.verify() == 2
    monkeypatch.setattr(ParameterDump, "_write_runs", original)
    again.write_chunk(2, 4, block)  # the rerun resumes
    assert again.verify() == 4 and ParameterDump.open(tmp_path / "d").completed_runs == 4


def test_failing_manifest_write_keeps_the_old_manifest(tmp_path, monkeypatch):
    dump, block = _chunked_dump(tmp_path / "d")
    manifest = (tmp_path / "d" / "manifest.json").read_bytes()
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith("manifest.json"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(DumpError, match="writing runs 2-4 .* failed .*Input/output error"):
        dump.write_chunk(2, 4, block)
    monkeypatch.setattr(os, "replace", real_replace)
    assert (tmp_path / "d" / "manifest.json").read_bytes() == manifest
    assert not (tmp_path / "d" / "manifest.json.tmp").exists()
    assert ParameterDump.open(tmp_path / "d").verify() == 2 and dump.completed_runs == 2


def test_file_size_limit_while_creating_is_a_clear_error(tmp_path):
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
        "from mianalysis.dumps import ParameterDump, DumpError, layout_from_shapes\n"
        "try:\n"
        "    ParameterDump.create(sys.argv[1], clients=['a'], checkpoints=[0, 1], n_runs=1000,\n"
        "                         layout=layout_from_shapes([('w', (100,))]))\n"
        "except DumpError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "big")], env=ENV, capture_output=True,
                         text=True, check=True).stdout
    assert "could not create the dump" in out and "File too large" in out and "nothing was written" in out
    assert not (tmp_path / "big").exists() and not any(tmp_path.iterdir())


# ---------------------------------------------------------------------- damage via the CLI
def _damage_truncate(d):
    f = d / "client_1.f32"
    f.write_bytes(f.read_bytes()[:-4])


def _damage_flip(d):
    f = d / "client_0.f32"
    raw = bytearray(f.read_bytes())
    raw[100] ^= 0x01
    f.write_bytes(bytes(raw))


def _damage_manifest_edit(d):
    m = d / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["n_params"] = 5
    m.write_text(json.dumps(manifest))


def _damage_manifest_truncate(d):
    m = d / "manifest.json"
    m.write_text(m.read_text()[:-30])


def _damage_missing(d):
    (d / "client_2.f32").unlink()


def _damage_shape(d):
    m = d / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["checkpoints"] = manifest["checkpoints"] + [99]
    m.write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, message", [
    (_damage_truncate, r"client_1.f32 has \d+ bytes; the manifest's shape .* \(truncated\)"),
    (_damage_flip, r"client_0.f32 or metrics_0.f32: runs 0-150 of client 'a' do not match their checksum"),
    (_damage_manifest_edit, r"manifest.json: layout describes 4 parameters, n_params is 5"),
    (_damage_manifest_truncate, r"manifest.json is damaged \(not valid JSON"),
    (_damage_missing, r"client_2.f32 is missing \(client 'c'\)"),
    (_damage_shape, r"client_0.f32 has \d+ bytes; the manifest's shape \(13, 150, 4\)"),
])
def test_verify_detects_damage(tmp_path, capsys, damage, message):
    import re

    ParameterDump.from_arrays(tmp_path / "d", _arrays())
    assert main(["verify", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    damage(tmp_path / "d")
    assert main(["verify", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err
    with pytest.raises(DumpError, match=message):
        ParameterDump.open(tmp_path / "d").verify()


# ---------------------------------------------------------------------- determinism
# Chunk-size and thread-count comparisons run under several CPU code paths, so that a
# dependence that would show only on another instruction set (e.g. an AVX2-only machine)
# fails here too: PyTorch's ATen kernels (ATEN_CPU_CAPABILITY), MKL's (MKL_CBWR), NumPy's
# OpenBLAS (OPENBLAS_CORETYPE) and Numba's compiled kernels (NUMBA_CPU_NAME). Runs on
# different code paths are compared only with runs on the same path.
CODE_PATHS = {
    "native": {},
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Prescott",
                 "NUMBA_CPU_NAME": "generic"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
}
x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                              reason="x86-64 code path settings")
code_paths = pytest.mark.parametrize("code_path", [
    "native", pytest.param("baseline", marks=x86_only), pytest.param("avx2", marks=x86_only)])


def _env(code_path, threads):
    return {**os.environ, **CODE_PATHS[code_path], "OMP_NUM_THREADS": str(threads),
            "NUMBA_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _run_side_by_side(*commands):
    """Run the (argv, env) `commands` as processes at the same time (each its own thread
    settings; they share nothing), and wait for all; each must succeed."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for argv, env in commands]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    for (argv, _), proc, err in zip(commands, procs, errors):
        assert proc.returncode == 0, f"{argv}: {err}"


# Tasks sampled through the CLI on 1 and 2 threads in chunks of 8 and 5 runs: for 21 runs the
# last chunk of 5 is a single run (for gaussian-sgd a batch of one client's target, which a
# BLAS product would compute as a matrix-vector product).
CLI_TASKS = {
    "signal-rnn": (24, ["--task", "signal-rnn", "--set", "n_layers=2", "--set", "seq_len=16", "--set",
                        "n_examples=32", "--set", "batch_size=8"]),
    "gaussian-sgd": (21, ["--task", "gaussian-sgd", "--preset", "small", "--every", "10"]),
    "module": (21, ["--task", "module", "--set", "factory=module_factories:cnn_spec", "--set", "batch_size=5"]),
}
# A federated recording on 1 and 2 threads in chunks of 2 and 5 replicates: chunks of 5 leave a
# last chunk of one replicate, a batch of one on 2 threads.
FEDERATE = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "2", "--replicates", "6", "--record",
            "--batch", "10", "--layer", "5", "--seed", "1", "--no-progress"]
# Commands run one after the other in one process by mianalysis.cli.main (what `python -m
# mianalysis.cli` runs), each to exit status 0: one start of Python and PyTorch for them all.
CLI_COMMANDS = """
import json, sys
from mianalysis.cli import main
for args in json.loads(sys.argv[1]):
    if main(args) != 0:
        sys.exit(f"mianalysis {' '.join(args)}: exit status not 0")
"""


@code_paths
def test_same_seed_same_bytes_across_threads_and_chunk_sizes(tmp_path, code_path):
    # The commands of both thread counts in one process each (the code path is set where a
    # process starts): every task sampled and its dump analysed, and the federated recording.
    pytest.importorskip("torch")
    tests = Path(__file__).resolve().parent
    path = {"PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}  # module_factories
    runs = [("t1", 1, 8, 2), ("t2", 2, 5, 5)]  # (out, threads, chunk size of sample, of federate)

    def commands(name, chunk, federate_chunk):
        dumps = {task: tmp_path / task / name for task in sorted(CLI_TASKS)}
        return ([["sample", "--runs", str(n_runs), "--chunk-size", str(chunk), "--seed", "7", "--out", str(dumps[task]),
                  "--no-progress", *settings] for task, (n_runs, settings) in sorted(CLI_TASKS.items())]
                + [FEDERATE + ["--chunk-size", str(federate_chunk), "--out", str(tmp_path / "federate" / name)]]
                + [["analyze", str(dump), "--out", f"{dump}.csv", "--permutations", "3", "--no-progress"]
                   for dump in dumps.values()])

    _run_side_by_side(*[([sys.executable, "-c", CLI_COMMANDS, json.dumps(commands(name, chunk, federate_chunk))],
                         {**_env(code_path, threads), **path}) for name, threads, chunk, federate_chunk in runs])
    for task in sorted(CLI_TASKS):
        a, b = tmp_path / task / "t1", tmp_path / task / "t2"
        names = sorted(p.name for p in a.glob("*.f32"))
        assert "client_2.f32" in names and "metrics_0.f32" in names, task
        for name in names:
            assert (a / name).read_bytes() == (b / name).read_bytes(), f"{task}: {name}"
        assert (tmp_path / task / "t1.csv").read_bytes() == (tmp_path / task / "t2.csv").read_bytes(), task
    a, b = tmp_path / "federate" / "t1", tmp_path / "federate" / "t2"
    for name in ("client_0.f32", "client_2.f32", "metrics_0.f32"):
        assert (a / "dump" / name).read_bytes() == (b / "dump" / name).read_bytes(), f"federate: {name}"
    assert (a / "history.csv").read_bytes() == (b / "history.csv").read_bytes()


# Runs alone or beside others, on 1 or 2 threads: a lone replica (one client, a chunk of
# one run), digits-lenet, whose frozen body sees a chunk's worth of images, a small CNN
# of the user's own (--task module: replicas through vmap, convolutions batched over them),
# and gaussian-sgd, whose curvature products are batched over replicas (one client alone:
# a batch of one replica).
_SAMPLER_CHUNKS = """
import sys, numpy as np, torch
from mianalysis.sampling import ParameterSampler
from mianalysis.tasks import ModuleTask, get_task
tasks = [get_task("signal-rnn", "paper", n_clients=1, n_layers=2, seq_len=16, n_examples=32, batch_size=8),
         get_task("digits-lenet", "paper", pretrain_epochs=1, per_digit=3, batch_size=10),
         ModuleTask.from_factory("module_factories:cnn_spec", batch_size=5),
         get_task("gaussian-sgd", "small", n_iterations=12),
         get_task("gaussian-sgd", "small", n_clients=1, n_iterations=12)]
for task in tasks:
    sampler = ParameterSampler(task, seed=3, progress=False)
    torch.set_num_threads(1)
    together = sampler.train_chunk(range(6))
    torch.set_num_threads(2)
    for runs in ([4], [3, 4, 5], [0, 1, 2, 3, 4]):
        part = sampler.train_chunk(runs)
        for i, run in enumerate(runs):
            same = np.array_equal(part.samples[:, :, i], together.samples[:, :, run]) and np.array_equal(
                part.metrics[..., i], together.metrics[..., run])
            print(task.name, runs, run, "same" if same else "DIFFERENT")
"""


@code_paths
def test_sampled_run_same_bytes_alone_or_in_any_chunk(tmp_path, code_path):
    pytest.importorskip("torch")
    tests = Path(__file__).resolve().parent
    env = {**_env(code_path, 2), "XDG_CACHE_HOME": str(tmp_path), "MIANALYSIS_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    out = subprocess.run([sys.executable, "-c", _SAMPLER_CHUNKS], env=env, capture_output=True, text=True,
                         check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 5 * 9 and all(line.endswith(" same") for line in lines), out


def test_estimates_do_not_depend_on_threads():
    code = ("import numpy as np, numba\n"
            "from mianalysis import ksg_mi, gaussian_mi, mi_permutation_test\n"
            "rng = np.random.default_rng(0)\n"
            # 8 + 8 features from 512 runs: ksg_mi's float64 counts come from checked float32 distances
            "x = rng.standard_normal((700, 8)); y = x + rng.standard_normal((700, 8))\n"
            "r = mi_permutation_test(x, y, n_permutations=5, random_state=1)\n"
            "print(repr(ksg_mi(x, y, random_state=2)), repr(ksg_mi(x, y, algorithm=2, dtype=np.float32)),"
            " repr(gaussian_mi(x, y)), repr(r.p_value), repr(r.null_mean))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "NUMBA_NUM_THREADS": threads,
                                                                  "OMP_NUM_THREADS": threads},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for threads in ("1", "2")]  # side by side
    outs = [proc.communicate(timeout=600) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outs]
    outs = [out for out, _ in outs]
    assert outs[0] == outs[1] and outs[0].count(" ") == 4
