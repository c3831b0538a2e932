"""No file is overwritten or written outside the dump, and damage is not carried forward.

A. Files overwritten or written outside the dump: `analyze --out` never replaces a dump's
   files or an unrelated file; a dump's files are regular files inside its folder (a
   symbolic link, a folder or a fifo in their place is damage, never read or written
   through); a folder the user named is never replaced (a dump is created inside it).
B. Damage carried forward: resuming a dump verifies the chunks it builds on; `analyze`
   verifies the checksums of the dump before it reads it (unless told not to, and then
   says so).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mianalysis.analysis import analyze, sidecar_path
from mianalysis.cli import main
from mianalysis.dumps import DumpError, ParameterDump, layout_from_shapes

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
SAMPLE = ["sample", "--task", "signal-rnn", "--runs", "12", "--chunk-size", "4", "--set", "n_layers=2",
          "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8", "--no-progress"]
FAST = {"estimators": ["gaussian"], "metrics": ["euclidean"]}  # a quick analysis


def _arrays(seed=0, n_ckpt=2, runs=20, params=3):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, params))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, params))).astype(np.float32) for c in "ab"}


def _dump(path, seed=0):
    arrays = _arrays(seed)
    metrics = {c: {"loss": np.arange(40.0).reshape(2, 20) + seed} for c in arrays}
    return ParameterDump.from_arrays(path, arrays, metrics=metrics)


def _incomplete(path, seed=0, chunks=((0, 4), (4, 8)), n_runs=12):
    """A dump of 2 clients, 2 checkpoints, `n_runs` runs of 3 parameters, with `chunks` written."""
    rng = np.random.default_rng(seed)
    dump = ParameterDump.create(path, clients=["a", "b"], checkpoints=[0, 1], n_runs=n_runs,
                                layout=layout_from_shapes([("w", (3,))]), metric_names=["loss"], meta={"seed": seed})
    for start, stop in chunks:
        dump.write_chunk(start, stop, {c: rng.standard_normal((2, stop - start, 3)) for c in dump.clients},
                         {c: rng.standard_normal((1, 2, stop - start)) for c in dump.clients})
    return dump


def _snapshot(folder):
    """Every entry of `folder` (recursively, links not followed) with its bytes or link target."""
    folder = os.fspath(folder)
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            if os.path.islink(p):
                state[rel] = ("link", os.readlink(p))
            elif os.path.isfile(p):
                state[rel] = hashlib.sha256(open(p, "rb").read()).hexdigest()
            else:
                state[rel] = "dir" if os.path.isdir(p) else "other"
    return state


def _flip(file, offset):
    raw = bytearray(file.read_bytes())
    raw[offset] ^= 0x01
    file.write_bytes(bytes(raw))


# ====================================================================== A. analyze --out
@pytest.fixture
def analysed(tmp_path):
    """A dump "d" and a folder "t" beside it."""
    _dump(tmp_path / "d")
    (tmp_path / "t").mkdir()
    return tmp_path


@pytest.mark.parametrize("target", ["manifest.json", "client_0.f32", "metrics_1.f32", "", "table.csv",
                                    "sub/table.csv"])
def test_analyze_never_writes_into_a_dump(analysed, target):
    """--out naming a file of the dump, the dump folder itself or a new file inside it."""
    out = analysed / "d" / target if target else analysed / "d"
    before = _snapshot(analysed)
    where = "is the dump" if not target else "is inside the dump"
    with pytest.raises(ValueError, match=rf"{re.escape(str(out))} {where} {re.escape(str(analysed / 'd'))}.*"
                                         r"choose an `out` outside it"):
        analyze(analysed / "d", out=out, **FAST)
    with pytest.raises(ValueError, match=where):
        analyze(analysed / "d", out=out, force=True, **FAST)  # force never overrides this
    assert _snapshot(analysed) == before  # nothing changed: no table, journal, sidecar or lock
    assert ParameterDump.open(analysed / "d").verify() == 20


def test_analyze_never_writes_into_a_dump_through_a_symlinked_path(analysed):
    os.symlink(analysed / "d" / "manifest.json", analysed / "t" / "m.csv")
    before = _snapshot(analysed)
    with pytest.raises(ValueError, match="is inside the dump"):
        analyze(analysed / "d", out=analysed / "t" / "m.csv", force=True, **FAST)
    assert _snapshot(analysed) == before


def _previous_analysis_with_other_settings(t):
    analyze(t.parent.parent / "d", out=t, k=5, **FAST)


def _unrelated_file(t):
    t.write_text("my own notes\n")


def _unrelated_file_with_a_json_beside(t):
    t.write_text("my own notes\n")
    sidecar_path(t).write_text(json.dumps({"something": "else"}))


def _table_of_a_previous_analysis_without_its_sidecar(t):
    _previous_analysis_with_other_settings(t)
    sidecar_path(t).unlink()


def _unrelated_sidecar_only(t):
    sidecar_path(t).write_text("my own json\n")


@pytest.mark.parametrize("make, reason", [
    (_previous_analysis_with_other_settings, r"t.csv exists and holds an analysis with other settings \(saved, requested\): "
                                             r"\{'k': \(5, 3\)\}"),
    (_unrelated_file, r"t.csv exists and is not a table of an earlier analysis \(no sidecar .*t.csv.json records its settings\)"),
    (_unrelated_file_with_a_json_beside, r"t.csv exists and its sidecar .*t.csv.json is not the record of an "
                                         r"analysis"),
    (_table_of_a_previous_analysis_without_its_sidecar, r"t.csv exists and is not a table .*no sidecar"),
    (_unrelated_sidecar_only, r"t.csv.json exists and is not the record of an analysis"),
])
def test_analyze_does_not_replace_an_unrelated_file_without_force(analysed, make, reason):
    out = analysed / "t" / "t.csv"
    make(out)
    before = _snapshot(analysed)
    with pytest.raises(ValueError, match=rf"{reason}.*left as it is.*force=True.*--force"):
        analyze(analysed / "d", out=out, k=3, **FAST)
    assert _snapshot(analysed) == before  # no table, journal or lock file
    rows = analyze(analysed / "d", out=out, k=3, force=True, **FAST)
    assert len(rows) > 0 and out.read_text().startswith("checkpoint,")
    assert json.loads(sidecar_path(out).read_text())["settings"]["k"] == 3
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.csv", "t.csv.json"]


def test_analyze_replaces_a_previous_analysis_with_the_same_settings(analysed):
    out = analysed / "t" / "t.csv"
    analyze(analysed / "d", out=out, **FAST)
    first = out.read_bytes()
    out.write_text("stale")  # e.g. an older version of the same table
    analyze(analysed / "d", out=out, **FAST)
    assert out.read_bytes() == first


def test_analyze_refuses_a_folder_as_out(analysed):
    before = _snapshot(analysed)
    with pytest.raises(ValueError, match=rf"{re.escape(str(analysed / 't'))} is a folder.*give a file name"):
        analyze(analysed / "d", out=analysed / "t", force=True, **FAST)
    assert _snapshot(analysed) == before


@pytest.mark.parametrize("planted", ["t.csv.tmp", "t.csv.json.tmp", "t.csv.partial"])
def test_analyze_never_writes_through_a_planted_symlink(analysed, planted):
    """Temporary files and the journal beside the table are written as new files, never
    through a symbolic link found there (here pointing at a file of another dump)."""
    _dump(analysed / "other", seed=1)
    os.symlink(analysed / "other" / "client_0.f32", analysed / "t" / planted)
    victim = _snapshot(analysed / "other")
    try:
        analyze(analysed / "d", out=analysed / "t" / "t.csv", **FAST)
    except ValueError as exc:  # a journal that is a link is refused, naming it
        assert planted == "t.csv.partial" and "t.csv.partial is a symbolic link" in str(exc)
    assert _snapshot(analysed / "other") == victim
    assert ParameterDump.open(analysed / "other").verify() == 20


def test_cli_analyze_out_refusals_are_one_line_and_force_replaces(analysed, capsys):
    d, t = str(analysed / "d"), analysed / "t" / "t.csv"
    assert main(["analyze", d, "--out", f"{d}/manifest.json", "--no-progress", "--estimators", "gaussian"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest.json is inside the dump" in err
    t.write_text("keep me\n")
    before = _snapshot(analysed)
    assert main(["analyze", d, "--out", str(t), "--no-progress", "--estimators", "gaussian"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{t} exists" in err and "--force" in err
    assert _snapshot(analysed) == before
    assert main(["analyze", d, "--out", str(t), "--no-progress", "--estimators", "gaussian", "--force"]) == 0
    assert t.read_text().startswith("checkpoint,")


# ====================================================================== A. links and non-regular files
def _make_symlink(file, victim):
    file.unlink()
    os.symlink(victim, file)


def _make_folder(file, victim):
    file.unlink()
    file.mkdir()


def _make_fifo(file, victim):
    file.unlink()
    os.mkfifo(file)


KINDS = {"symlink": (_make_symlink, "is a symbolic link"), "folder": (_make_folder, "is a folder"),
         "fifo": (_make_fifo, "is not a regular file")}
MEMBERS = ["client_0.f32", "metrics_1.f32", "manifest.json"]


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_open_and_verify_report_a_member_that_is_not_a_regular_file(tmp_path, capsys, member, kind):
    _dump(tmp_path / "d")
    _dump(tmp_path / "other", seed=1)  # the same shapes: a link to its file has the right size
    make, message = KINDS[kind]
    make(tmp_path / "d" / member, tmp_path / "other" / member)
    with pytest.raises(DumpError, match=rf"{re.escape(str(tmp_path / 'd' / member))} {message}.*"
                                        r"regular files inside"):
        ParameterDump.open(tmp_path / "d")
    assert main(["verify", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{member} {message}" in err
    before = _snapshot(tmp_path)
    with pytest.raises(DumpError, match=message):
        analyze(tmp_path / "d", out=tmp_path / "t.csv", **FAST)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("member", ["client_0.f32", "metrics_1.f32"])
def test_an_open_dump_does_not_read_through_a_link_placed_later(tmp_path, member):
    dump = _dump(tmp_path / "d")
    _dump(tmp_path / "other", seed=1)
    _make_symlink(tmp_path / "d" / member, tmp_path / "other" / member)
    with pytest.raises(DumpError, match=rf"{member} is a symbolic link"):
        dump.samples("a", index=0) if member.startswith("client") else dump.metric("b", "loss")
    with pytest.raises(DumpError, match=rf"{member} is a symbolic link"):
        analyze(dump, **FAST)
    with pytest.raises(DumpError, match=rf"{member} is a symbolic link"):
        dump.verify()


@pytest.mark.parametrize("member", ["client_0.f32", "metrics_1.f32", "manifest.json"])
def test_resume_never_writes_through_a_link_into_another_dump(tmp_path, member):
    _incomplete(tmp_path / "d")
    _incomplete(tmp_path / "other", seed=1, chunks=((0, 4), (4, 8), (8, 12)))
    _make_symlink(tmp_path / "d" / member, tmp_path / "other" / member)
    victim = _snapshot(tmp_path / "other")
    with pytest.raises(DumpError, match=rf"{member} is a symbolic link"):
        ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 0}, clients=["a", "b"], checkpoints=[0, 1],
                                     n_runs=12, layout=layout_from_shapes([("w", (3,))]), metric_names=["loss"])
    assert _snapshot(tmp_path / "other") == victim and ParameterDump.open(tmp_path / "other").verify() == 12


@pytest.mark.parametrize("member, refused", [
    ("client_0.f32", r"client_0.f32 is a symbolic link"),
    ("metrics_1.f32", r"metrics_1.f32 is a symbolic link"),
    ("manifest.json.tmp", None),  # a temporary file: replaced by a new one, the chunk is written
    ("../.d.lock", r"lock file .*\.d\.lock is a symbolic link"),
])
def test_writing_a_chunk_never_writes_through_a_link_placed_after_opening(tmp_path, member, refused):
    """Also the manifest's temporary file and the writer lock beside the dump."""
    dump = _incomplete(tmp_path / "d")
    _incomplete(tmp_path / "other", seed=1, chunks=((0, 4), (4, 8), (8, 12)))
    link = tmp_path / "d" / member
    if link.exists():
        link.unlink()
    os.symlink(tmp_path / "other" / "client_0.f32", link)
    victim = _snapshot(tmp_path / "other")
    rng = np.random.default_rng(5)

    def write():
        dump.write_chunk(8, 12, {c: rng.standard_normal((2, 4, 3)) for c in dump.clients},
                         {c: rng.standard_normal((1, 2, 4)) for c in dump.clients})

    if refused:
        with pytest.raises((DumpError, OSError), match=refused):
            write()
    else:
        write()
        assert not (tmp_path / "d" / "manifest.json").is_symlink()
        assert ParameterDump.open(tmp_path / "d").verify() == 12
    assert _snapshot(tmp_path / "other") == victim and ParameterDump.open(tmp_path / "other").verify() == 12


# ---------------------------------------------------------------------- the sampler, end to end
@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A dump sampled by the CLI: 3 clients, 12 runs in chunks of 4, 5 checkpoints, 70 parameters."""
    folder = tmp_path_factory.mktemp("sampled")
    assert main(SAMPLE + ["--out", str(folder / "d")]) == 0
    return folder / "d"


def _unfinished_copy(sampled, dest):
    """A copy of `sampled` as if killed before recording its last chunk (runs 0-8 completed)."""
    shutil.copytree(sampled, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["chunks"] = manifest["chunks"][:-1]
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_resumed_sample_does_not_write_through_a_link_into_another_dump(tmp_path, sampled, cli):
    victim = tmp_path / "other" / "client_1.f32"  # e.g. a file of another dump, of the same size
    victim.parent.mkdir()
    victim.write_bytes(np.random.default_rng(0).bytes((sampled / "client_1.f32").stat().st_size))
    d = _unfinished_copy(sampled, tmp_path / "d")
    _make_symlink(d / "client_1.f32", victim)
    before = victim.read_bytes()
    proc = cli(SAMPLE + ["--out", d])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{d / 'client_1.f32'} is a symbolic link" in proc.stderr
    assert victim.read_bytes() == before


FEDERATE = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "1", "--replicates", "2", "--record",
            "--chunk-size", "1", "--batch", "10", "--layer", "5", "--seed", "1", "--no-progress"]


@pytest.mark.parametrize("planted", ["history.csv", "settings.json", "dump"])
def test_federate_never_writes_through_a_link_in_its_folder(tmp_path, capsys, planted):
    """federate writes its own files in OUT (the dump, history.csv, settings.json): a link
    there (to a file or a dump of another run) is refused before anything is written."""
    _incomplete(tmp_path / "other", chunks=((0, 4),))
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "other" / ("" if planted == "dump" else "manifest.json"), tmp_path / "out" / planted)
    before = _snapshot(tmp_path)
    assert main(FEDERATE + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'out' / planted} is a symbolic link" in err
    assert _snapshot(tmp_path) == before and ParameterDump.open(tmp_path / "other").verify() == 4


# ---------------------------------------------------------------------- a folder the user named
@pytest.mark.parametrize("out", [".", "absolute"])
def test_sample_into_the_empty_working_directory_creates_the_dump_in_it(tmp_path, out, monkeypatch, cli):
    folder = tmp_path / "here"
    folder.mkdir()
    inode = folder.stat().st_ino
    monkeypatch.chdir(folder)  # this process works in the folder, as the user's shell would
    args = SAMPLE[:4] + ["4"] + SAMPLE[5:]  # 12 -> 4 runs
    proc = cli(args + ["--out", "." if out == "." else folder])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert folder.stat().st_ino == inode  # the same folder, not one renamed over it
    assert "manifest.json" in os.listdir(".")  # the process still sees its working directory and the dump
    assert ParameterDump.open(folder).verify() == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # no staging folder or lock left


def test_create_in_an_empty_folder_keeps_the_folder(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    inode = folder.stat().st_ino
    _incomplete(folder, chunks=((0, 4),))
    assert folder.stat().st_ino == inode and ParameterDump.open(folder).verify() == 4
    assert sorted(p.name for p in folder.iterdir()) == ["client_0.f32", "client_1.f32", "manifest.json",
                                                        "metrics_0.f32", "metrics_1.f32"]


KILL_WHILE_CREATING = (
    "import os, sys\n"
    "from mianalysis.dumps import format as dumps, layout_from_shapes\n"
    "def killed(*args, **kwargs):\n"
    "    os._exit(9)\n"
    "dumps.{name} = killed\n"
    "dumps.ParameterDump.create(sys.argv[1], clients=['a', 'b'], checkpoints=[0, 1], n_runs=12,\n"
    "                           layout=layout_from_shapes([('w', (3,))]), metric_names=['loss'])\n"
)


@pytest.mark.parametrize("where", ["_write_json_atomically", "_create_array_file"])
def test_creation_killed_in_an_empty_folder_leaves_no_dump_and_is_redone(tmp_path, where):
    folder = tmp_path / "empty"
    folder.mkdir()
    inode = folder.stat().st_ino
    proc = subprocess.run([sys.executable, "-c", KILL_WHILE_CREATING.format(name=where), str(folder)], env=ENV)
    assert proc.returncode == 9
    assert not (folder / "manifest.json").exists()  # nothing that looks like a dump
    with pytest.raises(DumpError, match="is not a dump"):
        ParameterDump.open(folder)
    _incomplete(folder, chunks=((0, 4),))  # the next creation clears what the killed one left
    assert folder.stat().st_ino == inode and ParameterDump.open(folder).verify() == 4
    assert sorted(p.name for p in folder.iterdir()) == ["client_0.f32", "client_1.f32", "manifest.json",
                                                        "metrics_0.f32", "metrics_1.f32"]


def test_a_folder_with_other_files_is_still_refused(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "client_0.f32").write_bytes(b"my own file")
    with pytest.raises(DumpError, match="already exists and is not an empty folder"):
        _incomplete(folder)
    assert (folder / "client_0.f32").read_bytes() == b"my own file"


# ====================================================================== B. resume verifies
# Byte offsets into the sampled dump's files: client files are (5 checkpoints, 12 runs, 70
# parameters) float32, metrics files (1 metric, 5 checkpoints, 12 runs).
FLIPS = {
    "chunk0": ("client_0.f32", 100, "runs 0-4 of client '0'"),
    "last chunk": ("client_2.f32", (12 * 70 * 3 + 7 * 70) * 4 + 9, "runs 4-8 of client '2'"),
    "metrics": ("metrics_1.f32", 4 * 5, "runs 4-8 of client '1'"),
}


@pytest.mark.parametrize("flip", list(FLIPS))
def test_resumed_sample_refuses_a_damaged_chunk(tmp_path, sampled, flip, cli):
    name, offset, runs = FLIPS[flip]
    d = _unfinished_copy(sampled, tmp_path / "d")
    _flip(d / name, offset)
    before = _snapshot(tmp_path)
    proc = cli(SAMPLE + ["--out", d])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{runs} do not match their checksum" in err and "cannot be resumed" in err, err
    assert _snapshot(tmp_path) == before  # nothing written: no chunk built on the damage


@pytest.mark.parametrize("flip", ["first", "last"])
def test_open_or_create_verifies_what_it_resumes(tmp_path, flip):
    """The resume path of the sampler and of federated.record_replicates."""
    _incomplete(tmp_path / "d")
    _flip(tmp_path / "d" / "client_1.f32", 4 if flip == "first" else (12 * 3 + 5 * 3) * 4)
    runs = "0-4" if flip == "first" else "4-8"
    with pytest.raises(DumpError, match=rf"runs {runs} of client 'b' do not match their checksum.*cannot be resumed"):
        ParameterDump.open_or_create(tmp_path / "d", meta={"seed": 0}, clients=["a", "b"], checkpoints=[0, 1],
                                     n_runs=12, layout=layout_from_shapes([("w", (3,))]), metric_names=["loss"])


# ====================================================================== B. analyze verifies
@pytest.mark.parametrize("flip", ["first", "last", "metrics"])
def test_analyze_refuses_a_damaged_dump(tmp_path, capsys, flip):
    _incomplete(tmp_path / "d")
    file, offset, runs = {"first": ("client_0.f32", 0, "0-4"), "last": ("client_1.f32", (12 * 3 + 7 * 3) * 4, "4-8"),
                          "metrics": ("metrics_0.f32", 4 * 5, "4-8")}[flip]
    _flip(tmp_path / "d" / file, offset)
    before = _snapshot(tmp_path)
    with pytest.raises(DumpError, match=rf"{file}.*runs {runs} .* do not match their checksum"):
        analyze(tmp_path / "d", out=tmp_path / "t.csv", **FAST)
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"runs {runs}" in err and "--no-verify" in err
    assert _snapshot(tmp_path) == before  # no table, journal or lock


def test_analyze_says_whether_it_verified(tmp_path, capsys):
    _incomplete(tmp_path / "d")
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "t.csv"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "checksums of 8 runs verified" in out
    assert json.loads(sidecar_path(tmp_path / "t.csv").read_text())["dump_verified"] is True
    _flip(tmp_path / "d" / "client_0.f32", 0)
    assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "u.csv"), "--no-progress",
                 "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "checksums NOT verified (--no-verify)" in out
    assert json.loads(sidecar_path(tmp_path / "u.csv").read_text())["dump_verified"] is False
    assert analyze(tmp_path / "d", verify=False, **FAST)  # the API's switch
