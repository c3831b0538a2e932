"""Reliability of the Dask scheduler option (``--scheduler``, mianalysis.scaleout): workers
whose working folder differs, factories only the driver can import, a worker or the
scheduler killed mid-run, a bad scheduler file, Ctrl-C while local workers start.

The tcp tests start a real ``dask scheduler`` and ``dask worker`` as subprocesses on
127.0.0.1 (each test its own, killed when it ends) with a bounded wait everywhere."""

import asyncio
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from mianalysis import ParameterDump, analyze  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.dumps import DumpError, to_dask  # noqa: E402

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
            values = to_dask(opened).compute(scheduler=client)
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
        pickle.loads(sent).samples("a", index=0)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "d") in message and "not the dump" in message
    os.rename("d", "other")
    with pytest.raises(DumpError, match="does not exist") as info:
        pickle.loads(sent).samples("a", index=0)
    assert str(tmp_path / "d") in str(info.value)
    os.rename("moved", "d")  # the same dump again, with more provenance: fine
    assert np.array_equal(pickle.loads(sent).samples("a", index=1), _arrays(0)["a"][1])


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


# ----------------------------------------------------------- 3, 5. a worker or the scheduler killed mid-run

SIGNAL_SAMPLE = ["sample", "--task", "signal-rnn", "--runs", "60", "--chunk-size", "2", "--out", "d", "--no-progress",
                 "--set", "n_layers=2", "--set", "seq_len=8", "--set", "n_examples=20", "--set", "batch_size=8",
                 "--set", "hidden=3"]


def _written(dump):
    try:
        return len(json.loads((dump / "manifest.json").read_text())["chunks"])
    except (OSError, ValueError):
        return 0


def _killed_mid_sample(tmp_path, victim):
    """Sample on a tcp scheduler with one worker, kill `victim` ("worker" or "scheduler")
    with SIGKILL once a chunk is written: (status, stderr, chunks written before the kill)."""
    pytest.importorskip("torch")
    with tcp_cluster(tmp_path / "cluster") as (address, scheduler, worker):
        proc = subprocess.Popen([sys.executable, "-c", COMMAND, *SIGNAL_SAMPLE, "--scheduler", address,
                                 "--scheduler-timeout", "5"], cwd=tmp_path, env=ENV, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _wait_for(lambda: _written(tmp_path / "d") >= 1 or proc.poll() is not None, "a first chunk", 120)
            assert proc.poll() is None, proc.stderr.read()
            before = _written(tmp_path / "d")
            (worker if victim == "worker" else scheduler).kill()
            try:
                _, err = proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the driver still waits 90 s after the {victim} was killed") from None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    return proc.returncode, err, before


def _check_kept(tmp_path, err, before):
    dump = ParameterDump.open(tmp_path / "d")
    assert _written(tmp_path / "d") >= before and dump.written_runs == 2 * _written(tmp_path / "d")
    assert f"the dump d keeps the {dump.written_runs} runs written so far: rerun the same command to resume" in err
    assert dump.verify() == dump.written_runs  # what was written is whole (chunks need not be a prefix of the runs)


def test_the_only_worker_killed_mid_sample_stops_with_one_line(tmp_path):
    code, err, before = _killed_mid_sample(tmp_path, "worker")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("mianalysis sample: error: the Dask scheduler tcp://127.0.0.1:") and \
        "has had no worker for 5 s" in err, err
    _check_kept(tmp_path, err, before)


def test_the_scheduler_killed_mid_sample_stops_with_one_line(tmp_path):
    code, err, before = _killed_mid_sample(tmp_path, "scheduler")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("mianalysis sample: error: lost the connection to the Dask scheduler tcp://127.0.0.1:"), err
    _check_kept(tmp_path, err, before)


# ----------------------------------------------------------- 4. a bad scheduler file


@pytest.mark.parametrize("text, problem", [("", "is empty"), ("{not json", "is not JSON"),
                                           ('{"id": "Scheduler-1"}', "names no scheduler address"),
                                           ('["tcp://127.0.0.1:1"]', "names no scheduler address")])
def test_a_bad_scheduler_file_is_one_line_naming_it(tmp_path, text, problem, capsys):
    file = tmp_path / "scheduler.json"
    file.write_text(text)
    started = time.monotonic()
    assert main(["sample", "--task", "gaussian-sgd", "--runs", "4", "--out", str(tmp_path / "d"), "--no-progress",
                 "--scheduler", str(file), "--scheduler-timeout", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"mianalysis sample: error: scheduler file {file} {problem}"), err
    assert time.monotonic() - started < 10 and not (tmp_path / "d").exists()


# ----------------------------------------------------------- 6. Ctrl-C while local workers start


def test_ctrl_c_while_local_workers_start_is_one_line(tmp_path):
    """SIGINT as soon as the first worker process exists: the command's one line, and none
    of Dask's tracebacks after it (its exit hook closing the half-started cluster)."""
    psutil = pytest.importorskip("psutil")
    from interrupt import interrupt_when

    cmd = [sys.executable, "-m", "mianalysis.cli", "sample", "--task", "gaussian-sgd", "--runs", "8", "--out",
           str(tmp_path / "d"), "--no-progress", "--scheduler", "local:2"]
    started = []

    def workers_starting():
        if not started:
            return False
        try:
            return bool(psutil.Process(started[0]).children(recursive=True))
        except psutil.Error:
            return False

    real_popen = subprocess.Popen

    def popen(*args, **kwargs):  # the pid of the command, for workers_starting
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    subprocess.Popen = popen
    try:
        code, err = interrupt_when(cmd, workers_starting, env=ENV, timeout=120)
    finally:
        subprocess.Popen = real_popen
        for pid in started:
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    child.kill()
            except psutil.Error:
                pass
    assert code == 130 and err == "mianalysis sample: interrupted; nothing was written\n", err
    assert not (tmp_path / "d").exists()


def _sleep(seconds):
    import time

    time.sleep(seconds)


@pytest.fixture
def earlier_process():
    """A spawned process started before the test's cluster start (ended after the test)."""
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=_sleep, args=(60,))
    process.start()
    yield process
    process.terminate()
    process.join(timeout=10)


def test_a_start_interrupted_ends_the_worker_processes_it_spawned_and_no_others(monkeypatch, earlier_process):
    """A LocalCluster start that raises (Ctrl-C) leaves no process of its own starting:
    those it spawned are terminated before the cluster is closed; one spawned before is not
    touched."""
    import multiprocessing

    distributed = pytest.importorskip("distributed")
    from mianalysis import scaleout

    context = multiprocessing.get_context("spawn")
    spawned = []

    def start_then_interrupt(**kwargs):
        process = context.Process(target=_sleep, args=(60,))
        process.start()
        spawned.append(process)
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "LocalCluster", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        scaleout._local_cluster(distributed, 2)
    assert spawned and not spawned[0].is_alive() and spawned[0].exitcode == -signal.SIGTERM
    assert earlier_process.is_alive()


def test_a_worker_process_spawned_after_an_interrupted_start_is_ended_too(monkeypatch, earlier_process):
    """Distributed starts worker processes from a thread of its own, which can still do so
    after the start was interrupted and the cluster closed (seen in CI: a worker unpickling
    its start-up state after the command's exit printed a traceback). A process spawned by
    such a thread 0.2 s after the interruption is ended by SIGTERM before _local_cluster
    returns; one spawned before the start is not touched."""
    import multiprocessing
    import threading

    distributed = pytest.importorskip("distributed")
    from mianalysis import scaleout

    context = multiprocessing.get_context("spawn")
    late = []

    def spawn_later():
        _sleep(0.2)
        process = context.Process(target=_sleep, args=(60,))
        process.start()
        late.append(process)

    def interrupted_with_a_start_pending(**kwargs):
        threading.Thread(target=spawn_later, daemon=True).start()
        raise KeyboardInterrupt

    monkeypatch.setattr(distributed, "LocalCluster", interrupted_with_a_start_pending)
    try:
        with pytest.raises(KeyboardInterrupt):
            scaleout._local_cluster(distributed, 2)
        assert late and not late[0].is_alive() and late[0].exitcode == -signal.SIGTERM
        assert earlier_process.is_alive()
    finally:
        for process in late:
            process.terminate()
            process.join(timeout=10)


def _unretrieved_failure(loop):
    """Run a task on `loop` that fails, never retrieve its error, and collect it (what
    asyncio reports as "Task exception was never retrieved")."""
    import gc

    async def fail():
        raise RuntimeError("Nanny failed to start.")

    task = loop.create_task(fail())
    loop.run_until_complete(asyncio.sleep(0.01))
    assert task.done()
    del task
    gc.collect()


def test_an_interrupted_start_keeps_its_loops_unretrieved_task_errors_quiet(monkeypatch, caplog):
    """Ctrl-C while a LocalCluster starts can leave a worker's Nanny start failing on the
    cluster's loop after the command's one line (seen in a full run: "Task exception was
    never retrieved" and a traceback before the line). The interrupted cluster's loop drops
    those reports, from before its worker processes are ended (ending one fails its Nanny's
    start); other loops, and its other reports, still reach asyncio's logger."""
    distributed = pytest.importorskip("distributed")
    from distributed.deploy.spec import SpecCluster

    from mianalysis import scaleout

    class HalfStarted:
        def __init__(self):
            self.loop = types.SimpleNamespace(asyncio_loop=asyncio.new_event_loop())

        def close(self, timeout=None):
            pass

    made = []

    def start_then_interrupt(**kwargs):
        made.append(HalfStarted())
        SpecCluster._instances.add(made[-1])
        raise KeyboardInterrupt

    handled_when_terminating = []
    terminate = scaleout._terminate_spawned

    def record_then_terminate(before, **kwargs):  # ending a worker fails its Nanny's start at once
        handled_when_terminating.append(made[0].loop.asyncio_loop.get_exception_handler() is not None)
        return terminate(before, **kwargs)

    monkeypatch.setattr(distributed, "LocalCluster", start_then_interrupt)
    monkeypatch.setattr(scaleout, "_terminate_spawned", record_then_terminate)
    with pytest.raises(KeyboardInterrupt):
        scaleout._local_cluster(distributed, 2)
    assert handled_when_terminating and all(handled_when_terminating)
    other = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            _unretrieved_failure(made[0].loop.asyncio_loop)
            assert not caplog.records
            _unretrieved_failure(other)  # the control: without the handler asyncio reports it
            assert [r.getMessage().splitlines()[0] for r in caplog.records] == ["Task exception was never retrieved"]
            caplog.clear()
            made[0].loop.asyncio_loop.call_exception_handler({"message": "something else"})
            assert [r.getMessage() for r in caplog.records] == ["something else"]
    finally:
        other.close()
        made[0].loop.asyncio_loop.close()
    assert made[0] not in SpecCluster._instances
