"""Provenance in every output: dump manifests, analysis sidecars, federate's settings.json,
experiment records; never in the "same settings?" checks, never in the byte-compared files."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_SIGNAL
from mianalysis import DumpError, ParameterDump
from mianalysis import provenance
from mianalysis.analysis import analyze, sidecar_path
from mianalysis.cli import main
from mianalysis.dumps import layout_from_shapes

SESSION_KEYS = {"started", "ended", "argv", "mianalysis", "python", "packages", "platform", "cpu", "threads"}
ROOT = Path(__file__).resolve().parents[1]


def check_session(session, argv=None, ended=True):
    """`session` is a complete provenance record (of the command line `argv`, if given)."""
    assert SESSION_KEYS <= set(session)
    assert set(session["mianalysis"]) == {"version", "git_commit", "git_dirty"}
    assert set(session["packages"]) == {"numpy", "scipy", "torch", "numba"}
    assert session["packages"]["numpy"] == np.__version__
    assert session["python"] == ".".join(map(str, sys.version_info[:3]))
    assert session["threads"]["cpu_count"] >= 1 and session["cpu"]
    assert session["started"].endswith("+00:00")
    if ended:
        assert session["ended"] >= session["started"]
    if argv is not None:
        assert session["argv"] == argv


def test_collect_reads_versions_without_importing_torch():
    code = ("import json, sys; from mianalysis.provenance import collect; r = collect(); "
            "print(json.dumps([r, 'torch' in sys.modules]))")
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MKL_CBWR": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code, "x"], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    record, torch_loaded = json.loads(out)
    assert not torch_loaded
    check_session(record, argv=["-c", "x"], ended=False)
    assert record["ended"] is None
    threads = record["threads"]
    assert threads["OMP_NUM_THREADS"] == "1" and threads["MKL_CBWR"] == "AVX2"
    assert "NUMBA_NUM_THREADS" not in threads and "torch" not in threads  # unset; not imported


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_only_for_the_checkout_holding_the_package(tmp_path, monkeypatch):
    def state_for(package_dir):
        package_dir.mkdir(parents=True)
        monkeypatch.setattr(provenance, "__file__", str(package_dir / "provenance.py"))
        return provenance._git_state.__wrapped__()

    assert state_for(tmp_path / "plain" / "mianalysis") == (None, None)  # not a checkout
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    # An installed copy inside some other repository is not that repository's code.
    assert state_for(repo / "site-packages" / "mianalysis") == (None, None)
    files = repo / "mianalysis"
    run = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    files.mkdir()
    (files / "a.py").write_text("x = 1\n")
    subprocess.run(run + ["add", "."], check=True)
    subprocess.run(run + ["commit", "-qm", "c"], check=True)
    head = subprocess.run(run + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(provenance, "__file__", str(files / "provenance.py"))
    assert provenance._git_state.__wrapped__() == (head, False)
    (repo / "output.csv").write_text("untracked outside the package\n")
    assert provenance._git_state.__wrapped__() == (head, False)
    (files / "new.py").write_text("untracked code\n")
    assert provenance._git_state.__wrapped__() == (head, True)


def test_dump_resume_appends_a_session_and_refuses_other_settings(tmp_path, monkeypatch):
    args = {"clients": ["a", "b"], "checkpoints": [0, 1], "n_runs": 4, "layout": layout_from_shapes([("w", (3,))])}
    block = {c: np.full((2, 2, 3), i + 1.0, dtype=np.float32) for i, c in enumerate("ab")}
    monkeypatch.setattr(sys, "argv", ["first", "--run"])
    first = ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 1}, **args)
    first.write_chunk(0, 2, block)
    written = ParameterDump.open(tmp_path / "d").provenance
    assert len(written) == 1 and written[0]["runs_written"] == [0, 2]
    check_session(written[0], argv=["first", "--run"])
    assert "provenance" not in first.meta and "provenance" not in json.loads(
        (tmp_path / "d" / "manifest.json").read_text())["meta"]

    monkeypatch.setattr(sys, "argv", ["second", "--other-run"])  # another command line, another start time
    again = ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 1}, **args)
    again.write_chunk(2, 4, block)
    sessions = ParameterDump.open(tmp_path / "d").provenance
    assert sessions[0] == written[0]  # the original session is kept as it was
    assert len(sessions) == 2 and sessions[1]["runs_written"] == [2, 4]
    check_session(sessions[1], argv=["second", "--other-run"])
    assert sessions[1]["started"] >= sessions[0]["started"]

    before = {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}
    with pytest.raises(DumpError, match=r"holds a dump with other settings .*'seed': \(1, 2\)"):
        ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 2}, **args)
    ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 1}, **args)  # complete: nothing to write
    assert before == {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}


def test_importers_record_provenance(tmp_path):
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.zeros((3, 2)), "b": np.ones((3, 2))})
    [session] = dump.provenance
    check_session(session, argv=sys.argv)
    assert session["runs_written"] == [0, 3]


def test_sampled_dump_resumed_with_other_provenance(tmp_path, monkeypatch):
    from mianalysis.sampling import ParameterSampler
    from mianalysis.tasks import get_task

    settings = ["--set", "n_layers=2", "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8"]
    argv = ["mianalysis", "sample", "--task", "signal-rnn", "--runs", "8", "--chunk-size", "4", "--no-progress",
            *settings]
    monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "clean")])
    assert main(argv[1:] + ["--out", str(tmp_path / "clean")]) == 0
    [session] = ParameterDump.open(tmp_path / "clean").provenance
    check_session(session, argv=sys.argv)
    assert session["runs_written"] == [0, 8] and "torch" in session["threads"]

    # Interrupted after its first chunk, then resumed by another command line.
    original = ParameterSampler.train_chunk
    calls = []

    def interrupted(self, runs, **kwargs):
        calls.append(runs)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, runs, **kwargs)

    monkeypatch.setattr(ParameterSampler, "train_chunk", interrupted)
    assert main(argv[1:] + ["--out", str(tmp_path / "resumed")]) == 130  # Ctrl-C: one line, status 130
    monkeypatch.setattr(ParameterSampler, "train_chunk", original)
    monkeypatch.setattr(sys, "argv", ["resuming", "session"])
    assert main(argv[1:] + ["--out", str(tmp_path / "resumed")]) == 0
    first, second = ParameterDump.open(tmp_path / "resumed").provenance
    assert first["runs_written"] == [0, 4] and second["runs_written"] == [4, 8]
    check_session(second, argv=["resuming", "session"])
    for name in ("client_0.f32", "client_2.f32", "metrics_1.f32"):  # provenance stays out of the arrays
        assert (tmp_path / "clean" / name).read_bytes() == (tmp_path / "resumed" / name).read_bytes()

    task = get_task("signal-rnn", "paper", n_layers=2, seq_len=16, n_examples=32, batch_size=8)
    with pytest.raises(DumpError, match=r"other settings .*'seed': \(0, 1\)"):
        ParameterSampler(task, seed=1, chunk_size=4, progress=False).sample(8, tmp_path / "resumed")


def test_analysis_sidecar_and_resumed_analysis(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 40, 2))
    ParameterDump.from_arrays(tmp_path / "d", {c: base + rng.standard_normal(base.shape) for c in "ab"})
    monkeypatch.setattr(sys, "argv", ["mianalysis", "analyze", "first"])
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress"]) == 0
    sidecar = json.loads(sidecar_path(tmp_path / "t.csv").read_text())
    assert sidecar_path(tmp_path / "t.csv") == tmp_path / "t.csv.json"
    assert set(sidecar) == {"format_version", "table", "settings", "dump_verified", "dump_runs", "dump_provenance",
                            "provenance"}
    assert sidecar["table"] == "t.csv" and sidecar["settings"]["k"] == 3 and sidecar["dump_verified"] is True
    assert sidecar["dump_provenance"] == ParameterDump.open(tmp_path / "d").provenance
    [session] = sidecar["provenance"]
    check_session(session, argv=["mianalysis", "analyze", "first"])
    assert "argv" not in (tmp_path / "t.csv").read_text()

    # Interrupted after the first checkpoint, resumed by another session: both recorded,
    # the table the same bytes.
    from mianalysis.analysis.journal import Journal

    original = Journal.append

    def interrupted(self, checkpoint, rows):
        original(self, checkpoint, rows)
        if checkpoint == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(Journal, "append", interrupted)
    with pytest.raises(KeyboardInterrupt):
        analyze(tmp_path / "d", out=tmp_path / "r.csv")
    monkeypatch.setattr(Journal, "append", original)
    monkeypatch.setattr(sys, "argv", ["second"])
    analyze(tmp_path / "d", out=tmp_path / "r.csv")
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "t.csv").read_bytes()
    first, second = json.loads(sidecar_path(tmp_path / "r.csv").read_text())["provenance"]
    assert first["ended"] is None and first["argv"] == ["mianalysis", "analyze", "first"]
    check_session(second, argv=["second"])

    # A partial analysis with provenance still refuses a real change of settings.
    monkeypatch.setattr(Journal, "append", interrupted)
    with pytest.raises(KeyboardInterrupt):
        analyze(tmp_path / "d", out=tmp_path / "s.csv")
    monkeypatch.setattr(Journal, "append", original)
    journal = (tmp_path / "s.csv.partial").read_bytes()
    with pytest.raises(ValueError, match=r"s.csv.partial holds a partial analysis with other settings .*'k': \(3, 4\)"):
        analyze(tmp_path / "d", out=tmp_path / "s.csv", k=4)
    assert (tmp_path / "s.csv.partial").read_bytes() == journal and not (tmp_path / "s.csv").exists()


def test_federate_settings_and_dump_record_provenance(tmp_path, monkeypatch):
    out = tmp_path / "fl"
    args = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "2", "--replicates", "2", "--record",
            "--layer", "5", "--out", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", ["mianalysis", *args])
    assert main(args) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert {"model", "config", "seed", "n_clients"} <= set(settings)
    [session] = settings["provenance"]
    check_session(session, argv=["mianalysis", *args])
    [written] = ParameterDump.open(out / "dump").provenance
    check_session(written, argv=["mianalysis", *args])
    assert "provenance" not in ParameterDump.open(out / "dump").meta["federated"]
    history = (out / "history.csv").read_bytes()
    assert b"argv" not in history

    monkeypatch.setattr(sys, "argv", ["rerun"])  # the recording is complete: resumed, nothing to train
    assert main(args) == 0
    again = json.loads((out / "settings.json").read_text())
    assert again["provenance"][0] == session and again["provenance"][1]["argv"] == ["rerun"]
    assert {k: v for k, v in again.items() if k != "provenance"} == {k: v for k, v in settings.items()
                                                                      if k != "provenance"}
    assert ParameterDump.open(out / "dump").provenance == [written]
    assert (out / "history.csv").read_bytes() == history

    # The dump's settings check still refuses a real change (another seed), changing nothing.
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(args + ["--seed", "1"]) == 2
    assert before == {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_experiment_record_has_provenance(tmp_path):
    from mianalysis.report.experiment import run_experiment
    from mianalysis.tasks import SignalRNNTask

    run_experiment(SignalRNNTask(**TINY_SIGNAL), runs=6, out_dir=tmp_path, name="e", chunk_size=3, progress=False)
    assert not (tmp_path / "e.json").exists()  # the record is the table's sidecar
    record = json.loads((tmp_path / "e.csv.json").read_text())
    [session] = record["provenance"]
    check_session(session, argv=sys.argv)
    assert record["dump_provenance"] == ParameterDump.open(tmp_path / "dumps" / "e").provenance
    assert record["task"] == "signal-rnn"
