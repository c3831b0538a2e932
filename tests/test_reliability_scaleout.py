"""Reliability of the Dask scheduler option (``--scheduler``, mianalysis.scaleout): workers
whose working folder differs, factories only the driver can import, a worker or the
scheduler killed mid-run, a bad scheduler file, Ctrl-C while local workers start.

The tcp tests start a real ``dask scheduler`` and ``dask worker`` as subprocesses on
127.0.0.1 (each test its own, killed when it ends) with a bounded wait everywhere."""

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from mianalysis import ParameterDump, analyze  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.dumps import DumpError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
START_TIMEOUT = 60  # seconds for a subprocess scheduler or worker to come up


def _stop(proc):
    """End a subprocess this test started: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_for(condition, what, timeout=START_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.1)


@contextmanager
def tcp_cluster(folder, worker_cwd=None, *, nanny=False):
    """A ``dask scheduler`` on 127.0.0.1 and one single-threaded ``dask worker`` (started in
    `worker_cwd`, without a nanny unless `nanny`) as subprocesses: yields (address,
    scheduler process, worker process); both are ended when the block ends."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "scheduler.json"
    procs = []
    try:
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(file)],
            env=ENV, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(scheduler)
        _wait_for(lambda: file.is_file() and file.stat().st_size > 0, "the scheduler file")
        address = json.loads(file.read_text())["address"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--host", "127.0.0.1",
             "--no-dashboard", "--death-timeout", "30"] + ([] if nanny else ["--no-nanny"]),
            env=ENV, cwd=worker_cwd or folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(worker)
        yield address, scheduler, worker
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _arrays(seed, n_ckpt=2, runs=30):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, 3))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, 3))).astype(np.float32) for c in "ab"}


# ----------------------------------------------------------- 1. relative dump paths


def test_relative_dump_path_is_read_from_the_drivers_folder_on_a_worker(tmp_path, monkeypatch, capsys):
    """The worker runs in another folder holding another dump of the same relative name:
    `analyze` and `to_dask` still read the driver's dump."""
    distributed = pytest.importorskip("distributed")
    driver, elsewhere = tmp_path / "driver", tmp_path / "worker"
    driver.mkdir()
    elsewhere.mkdir()
    ParameterDump.from_arrays(driver / "d", _arrays(0), checkpoints=[0, 5])
    ParameterDump.from_arrays(elsewhere / "d", _arrays(1), checkpoints=[0, 5])  # same shape, other values
    monkeypatch.chdir(driver)
    args = ["analyze", "d", "--estimators", "gaussian", "--ci-resamples", "0", "--no-progress"]
    assert main(args + ["--out", "local.csv"]) == 0
    with tcp_cluster(tmp_path / "cluster", worker_cwd=elsewhere) as (address, _, _):
        assert main(args + ["--out", "dask.csv", "--scheduler", address, "--scheduler-timeout", "30"]) == 0
        assert Path("dask.csv").read_bytes() == Path("local.csv").read_bytes()
        with distributed.Client(address, timeout=30) as client:
            opened = ParameterDump.open("d")
            values = opened.to_dask().compute(scheduler=client)
            assert np.array_equal(values, np.stack(list(_arrays(0).values())))
            # The path now holds another dump: the worker refuses it, in one line naming the path.
            os.rename("d", "moved")
            ParameterDump.from_arrays("d", _arrays(2), checkpoints=[0, 5])
            with pytest.raises(DumpError) as info:
                analyze(opened, estimators=["gaussian"], verify=False, ci_resamples=0, client=client)
    message = str(info.value)
    assert "\n" not in message and f"{driver / 'd'} on " in message and "is not the dump this process opened" in message


def test_a_dump_sent_elsewhere_is_checked_against_its_manifest(tmp_path, monkeypatch):
    """A dump object that travels (pickled, as to a Dask worker) carries its absolute path
    and its manifest's fingerprint: where the path holds another dump, or none, reading it
    there is a one-line DumpError naming the path and the cause."""
    monkeypatch.chdir(tmp_path)
    dump = ParameterDump.from_arrays("d", _arrays(0), checkpoints=[0, 5])
    sent = pickle.dumps(dump)
    assert pickle.loads(sent).path == tmp_path / "d"  # absolute: the same dump from any working folder
    os.rename("d", "moved")
    ParameterDump.from_arrays("d", _arrays(1), checkpoints=[0, 5])  # another dump at the same path
    with pytest.raises(DumpError) as info:
        pickle.loads(sent).samples("a", 0)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "d") in message and "not the dump" in message
    os.rename("d", "other")
    with pytest.raises(DumpError, match="does not exist") as info:
        pickle.loads(sent).samples("a", 0)
    assert str(tmp_path / "d") in str(info.value)
    os.rename("moved", "d")  # the same dump again, with more provenance: fine
    assert np.array_equal(pickle.loads(sent).samples("a", 1), _arrays(0)["a"][1])


# ----------------------------------------------------------- 2. factories of the working folder

FACTORY = '''import torch
import torch.nn.functional as F
from torch import nn

from mianalysis.tasks import ModuleSpec


def mlp():
    return nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1))


def spec():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 3, generator=g) for _ in range(2)]
    return ModuleSpec(model=mlp, data=[(x, x.sum(1, keepdim=True)) for x in xs], loss=F.mse_loss)
'''

# `mianalysis ARGS` as the installed command runs it: the working folder is not on sys.path.
COMMAND = ("import os, sys\n"
           "sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]\n"
           "from mianalysis.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")


def _command(args, cwd, timeout):
    """Run `mianalysis ARGS` in a new process group in `cwd`; (status, stderr). The whole
    group (the command and any worker it started) is killed if it runs past `timeout`."""
    proc = subprocess.Popen([sys.executable, "-c", COMMAND, *map(str, args)], cwd=cwd, env=ENV, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"mianalysis {' '.join(map(str, args))} still ran after {timeout} s: {err[-2000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # workers it may have left behind
        except ProcessLookupError:
            pass
    return proc.returncode, err


MODULE_SAMPLE = ["sample", "--task", "module", "--set", "factory=fac:spec", "--set", "batch_size=4", "--runs", "4",
                 "--chunk-size", "2", "--out", "d", "--no-progress"]


def test_a_factory_of_the_working_folder_trains_on_local_workers(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "fac.py").write_text(FACTORY)
    code, err = _command(MODULE_SAMPLE + ["--scheduler", "local:1", "--scheduler-timeout", "60"], tmp_path,
                         timeout=150)
    assert code == 0, err
    assert ParameterDump.open(tmp_path / "d").verify() == 4


def test_a_factory_a_worker_cannot_import_is_one_line(tmp_path):
    """A tcp worker in another folder cannot import `fac`: one line naming the module and
    what to do, no dump left behind."""
    pytest.importorskip("torch")
    (tmp_path / "fac.py").write_text(FACTORY)
    with tcp_cluster(tmp_path / "cluster") as (address, _, _):
        code, err = _command(MODULE_SAMPLE + ["--scheduler", address, "--scheduler-timeout", "60"], tmp_path,
                             timeout=120)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("mianalysis sample: error: a Dask worker cannot import the module 'fac'"), err
    assert "PYTHONPATH" in err and "install" in err
    assert not (tmp_path / "d").exists()
