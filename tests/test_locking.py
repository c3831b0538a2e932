"""One writer per dump and per analysis table: a second writer is refused with a line naming
the first, a lock left by a killed writer blocks nobody, readers ignore the lock.

The first writer is a real `mianalysis` command run in a subprocess that pauses after each
chunk (or journal line) it writes, holding its lock, until the test lets it go on or kills
it; so nothing here depends on timing. The second writer, the readers and the resumed
command run in this process (the `cli` fixture): another process holds the lock all the same.
"""

import json
import os
import select
import signal
import subprocess
import sys

import numpy as np
import pytest

from mianalysis import LockedError, ParameterDump
from mianalysis._internal import locking as _locking
from mianalysis._internal.locking import WriterLock, command_line, lock_path
from mianalysis.dumps import import_checkpoints, layout_from_shapes

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
SAMPLE = ["sample", "--task", "signal-rnn", "--runs", "8", "--chunk-size", "4", "--set", "n_layers=2",
          "--set", "seq_len=16", "--set", "n_examples=32", "--set", "batch_size=8", "--no-progress"]
FEDERATE = ["federate", "--clients", "3", "--fraction", "1", "--rounds", "1", "--replicates", "2", "--record",
            "--chunk-size", "1", "--batch", "10", "--layer", "5", "--seed", "1", "--no-progress"]

# The `mianalysis` command (run as `python -m mianalysis.cli`), pausing after every chunk
# of a dump and every checkpoint of an analysis journal it writes until it reads a line
# on stdin (or stdin is closed).
PAUSING_CLI = r"""
import runpy, sys
from mianalysis import dumps
from mianalysis.analysis import journal

def pausing(write):
    def paused(*args, **kwargs):
        result = write(*args, **kwargs)
        print("paused", flush=True)
        sys.stdin.readline()
        return result
    return paused

dumps.ParameterDump.write_chunk = pausing(dumps.ParameterDump.write_chunk)
journal.Journal.append = pausing(journal.Journal.append)
sys.argv = ["mianalysis", *sys.argv[1:]]
runpy.run_module("mianalysis.cli", run_name="__main__", alter_sys=True)
"""

# Holds the lock of argv[1] through the library (recording nothing, with "raw") until stdin closes.
HOLDER = r"""
import fcntl, os, sys
if sys.argv[2:] == ["raw"]:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("paused", flush=True)
    sys.stdin.read()
else:
    from mianalysis._internal.locking import WriterLock
    with WriterLock(sys.argv[1]):
        print("paused", flush=True)
        sys.stdin.read()
"""


class Paused:
    """A subprocess running `code` with `args`, stopped at its first "paused" line."""

    def __init__(self, code, args, timeout=120):
        self.proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=ENV, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line != "paused\n":
            self.proc.kill()
            raise AssertionError(f"the first writer did not pause: {line!r} {self.proc.communicate()[1]}")

    def finish(self, timeout=120):
        """Let it run to the end (closing stdin answers every later pause); its exit status."""
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return self.proc.returncode

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=60)


def assert_refused(result, command, target, holder_pid, holder_command):
    """Exit status 2 and one stderr line naming the holder's pid and command."""
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"mianalysis {command}: error: {target} is being written by process "
                                    f"{holder_pid} ({holder_command}"), result.stderr
    assert result.stderr.endswith("); wait for it to finish or stop it\n"), result.stderr


def files_of(folder):
    """Every file's bytes; a manifest without its provenance (which sessions wrote it)."""
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    if "manifest.json" in files:
        manifest = json.loads(files["manifest.json"])
        files["manifest.json"] = {k: v for k, v in manifest.items() if k != "provenance"}
    return files


def _arrays(n_ckpt=3, runs=40, params=3, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, params))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, params))).astype(np.float32) for c in "abc"}


# ---------------------------------------------------------------------- sample
def test_second_sample_is_refused_while_the_first_writes_and_readers_go_on(tmp_path, cli):
    pytest.importorskip("torch")
    out = tmp_path / "d"
    first = Paused(PAUSING_CLI, SAMPLE + ["--out", out])  # paused after runs 0-4 of 8
    before = files_of(out)
    second = cli(SAMPLE + ["--out", out])
    assert_refused(second, "sample", out, first.pid, "mianalysis sample --task signal-rnn --runs 8")
    assert files_of(out) == before and lock_path(out).exists()
    # Readers need no lock and do not mind it.
    assert ParameterDump.open(out).verify() == 4
    verify = cli(["verify", out])
    assert verify.returncode == 0 and "OK, 4 runs verified, incomplete" in verify.stdout, verify.stderr
    analyze = cli(["analyze", out, "--out", tmp_path / "t.csv", "--estimators", "gaussian", "--no-progress"])
    assert analyze.returncode == 0, analyze.stderr
    first.finish()
    assert ParameterDump.open(out).verify() == 8 and not lock_path(out).exists()


def test_lock_left_by_a_killed_sampler_does_not_block_the_resume(tmp_path, cli):
    pytest.importorskip("torch")
    assert cli(SAMPLE + ["--out", tmp_path / "clean"]).returncode == 0
    out = tmp_path / "killed"
    first = Paused(PAUSING_CLI, SAMPLE + ["--out", out])
    first.kill()
    lock = lock_path(out)
    assert json.loads(lock.read_text())["pid"] == first.pid  # left behind, unlocked
    assert ParameterDump.open(out).verify() == 4  # and no reader minds it
    assert cli(["verify", out]).returncode == 0
    resumed = cli(SAMPLE + ["--out", out])
    assert resumed.returncode == 0, resumed.stderr
    assert files_of(out) == files_of(tmp_path / "clean")
    assert not lock.exists()


# ---------------------------------------------------------------------- analyze --out
def test_second_analyze_of_one_table_is_refused_and_a_killed_one_resumes(tmp_path, cli):
    ParameterDump.from_arrays(tmp_path / "d", _arrays())
    args = ["analyze", tmp_path / "d", "--permutations", "3", "--no-progress", "--out"]
    assert cli(args + [tmp_path / "clean.csv"]).returncode == 0
    table = tmp_path / "t.csv"
    journal = tmp_path / "t.csv.partial"
    first = Paused(PAUSING_CLI, args + [table])  # paused after checkpoint 0 of 3
    before = journal.read_bytes()
    assert_refused(cli(args + [table]), "analyze", table, first.pid, "mianalysis analyze")
    assert journal.read_bytes() == before and not table.exists()
    other = cli(args + [tmp_path / "other.csv"])  # another table of the same dump is fine
    assert other.returncode == 0, other.stderr
    first.kill()
    assert lock_path(table).exists() and journal.exists()
    resumed = cli(args + [table])
    assert resumed.returncode == 0, resumed.stderr
    assert table.read_bytes() == (tmp_path / "clean.csv").read_bytes()
    assert not journal.exists() and not lock_path(table).exists()


# ---------------------------------------------------------------------- federate --record
def test_second_federate_record_is_refused_and_a_killed_one_resumes(tmp_path, cli):
    pytest.importorskip("torch")
    from mianalysis.federated import FederatedConfig, FederatedData, FederatedSimulation, record_replicates

    out = tmp_path / "fl"
    first = Paused(PAUSING_CLI, FEDERATE + ["--out", out])  # paused after replicate 0 of 2
    before = files_of(out / "dump")
    assert_refused(cli(FEDERATE + ["--out", out]), "federate", out, first.pid, "mianalysis federate")
    # The library's recorder is refused by the dump's own lock.
    data = FederatedData.digits(3, "iid", seed=1)
    sim = FederatedSimulation("mlp", data, FederatedConfig(rounds=1, client_fraction=1.0, batch_size=10),
                              replicates=2, seed=1)
    with pytest.raises(LockedError, match=rf"dump is being written by process {first.pid} \(mianalysis federate"):
        record_replicates(sim, out / "dump", chunk_size=1, layer="5", progress=False)
    assert files_of(out / "dump") == before
    first.kill()
    assert lock_path(out / "dump").exists()  # a stale lock among OUT's files is one of its own
    resumed = cli(FEDERATE + ["--out", out])  # (test_reliability compares resumed bytes with a clean run)
    assert resumed.returncode == 0, resumed.stderr
    assert ParameterDump.open(out / "dump").verify() == 2 and (out / "history.csv").exists()
    assert not lock_path(out / "dump").exists() and not lock_path(out).exists()


# ---------------------------------------------------------------------- creating and importing
def test_creating_is_refused_while_another_process_creates(tmp_path):
    target = tmp_path / "d"
    staging = tmp_path / ".d.creating"  # what the first creator is building
    staging.mkdir()
    (staging / "client_0.f32").write_bytes(b"half made")
    holder = Paused(HOLDER, [target])
    layout = layout_from_shapes([("p", (2,))])
    with pytest.raises(LockedError, match=rf"d is being written by process {holder.pid} \(python -c"):
        ParameterDump.create(target, clients=["0"], checkpoints=[0], n_runs=2, layout=layout)
    with pytest.raises(LockedError, match=f"process {holder.pid}"):
        ParameterDump.from_arrays(target, [np.ones((2, 2))])
    assert (staging / "client_0.f32").read_bytes() == b"half made" and not target.exists()
    holder.finish()
    ParameterDump.from_arrays(target, [np.ones((2, 2))]).verify()
    assert not staging.exists() and not lock_path(target).exists()


def test_importing_is_refused_before_reading_the_checkpoints(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "ckpts" / "a" / "0").mkdir(parents=True)
    torch.save({"w": torch.ones(2)}, tmp_path / "ckpts" / "a" / "0" / "r.pt")
    holder = Paused(HOLDER, [tmp_path / "d"])
    with pytest.raises(LockedError, match=f"process {holder.pid}"):
        import_checkpoints(tmp_path / "ckpts", tmp_path / "d")
    holder.finish()
    assert import_checkpoints(tmp_path / "ckpts", tmp_path / "d").n_params == 2


def test_writing_chunks_is_refused_while_another_process_holds_the_lock(tmp_path):
    dump = ParameterDump.create(tmp_path / "d", clients=["0"], checkpoints=[0], n_runs=4,
                                layout=layout_from_shapes([("p", (2,))]))
    holder = Paused(HOLDER, [tmp_path / "d"])
    with pytest.raises(LockedError, match=f"process {holder.pid}"):  # not "free space or fix the cause"
        dump.write_chunk(0, 2, {"0": np.ones((1, 2, 2))})
    holder.finish()
    dump.write_chunk(0, 2, {"0": np.ones((1, 2, 2))})
    assert ParameterDump.open(tmp_path / "d").verify() == 2


def test_holder_that_recorded_nothing_is_still_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(_locking, "HOLDER_WAIT_S", 0.05)
    holder = Paused(HOLDER, [lock_path(tmp_path / "d"), "raw"])
    with pytest.raises(LockedError, match="is being written by another process \\(it has not recorded its pid\\)"):
        ParameterDump.from_arrays(tmp_path / "d", [np.ones((2, 2))])
    holder.finish()


# ---------------------------------------------------------------------- the lock itself
def test_stale_lock_file_is_taken_over_and_removed(tmp_path):
    lock_path(tmp_path / "d").write_text('{"pid": 999999999, "command": "gone"}')
    ParameterDump.from_arrays(tmp_path / "d", [np.ones((2, 2))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert ParameterDump.open(tmp_path / "d").verify() == 2


def test_lock_is_reentrant_within_a_process(tmp_path):
    lock = lock_path(tmp_path / "d")
    with WriterLock(tmp_path / "d"):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        with WriterLock(tmp_path / "d"):  # e.g. the sampler holds it, the dump takes it per chunk
            ParameterDump.from_arrays(tmp_path / "d", [np.ones((2, 2))])
        assert lock.exists()
    assert not lock.exists()


def test_lock_lives_beside_the_target():
    assert lock_path("/runs/rnn") == lock_path("/runs/x/../rnn/") == lock_path("/runs/rnn").parent / ".rnn.lock"
    with pytest.raises(ValueError, match="cannot lock / for writing: it is a file system root"):
        lock_path("/")


def test_without_fcntl_writing_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(_locking, "fcntl", None)
    with pytest.raises(OSError, match="writer locks need the fcntl module"):
        ParameterDump.from_arrays(tmp_path / "d", [np.ones((2, 2))])
    assert not any(tmp_path.iterdir())


def test_command_line_is_shown_as_typed():
    assert command_line(["/x/mianalysis/cli.py", "sample", "--out", "a b"], "mianalysis.cli") == \
        "mianalysis sample --out 'a b'"
    assert command_line(["/venv/bin/mianalysis", "verify", "d"], None) == "mianalysis verify d"
    assert command_line(["-c", "d"], None) == "python -c d"
    assert command_line(["/x/run.py"] + ["--flag"] * 100, None).endswith("...")
    assert len(command_line(["/x/run.py"] + ["--flag"] * 100, None)) == 200


CONTENDER = r"""
import sys, time
from pathlib import Path
from mianalysis import LockedError
from mianalysis._internal import locking as _locking
from mianalysis._internal.locking import WriterLock

_locking.HOLDER_WAIT_S = 0
counter = Path(sys.argv[1])
done = 0
while done < 100:
    try:
        with WriterLock(counter):
            n = int(counter.read_text())
            time.sleep(0.0005)
            counter.write_text(str(n + 1))
        done += 1
    except LockedError:
        pass
"""


def test_lock_excludes_under_contention_although_holders_remove_it(tmp_path):
    # Holders remove the lock file on release; a process that opened the old file just
    # before that must notice and lock the new one, or two writers would overlap here.
    counter = tmp_path / "n"
    counter.write_text("0")
    procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(counter)], env=ENV) for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert counter.read_text() == "300" and not lock_path(counter).exists()
