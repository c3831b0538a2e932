"""Scale-out on Dask: the same dump and the same table as a local run, a killed worker,
an unreachable scheduler, and dumps as Dask arrays, xarray datasets and zarr stores.

One LocalCluster (2 worker processes, one thread each, on loopback) serves the module."""

import hashlib
import json
import os
import signal
import socket

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("torch")

from tiny_settings import TINY_SIGNAL  # noqa: E402  (not conftest: Dask workers import this module by name)

from mianalysis import ParameterDump, ParameterSampler, analyze  # noqa: E402
from mianalysis.dumps import to_dask, to_xarray  # noqa: E402
from mianalysis.cli import main  # noqa: E402
from mianalysis.scaleout import SchedulerError, connect, parse_scheduler, run_unordered  # noqa: E402
from mianalysis.tasks import SignalRNNTask  # noqa: E402

RUNS, CHUNK = 20, 4


@pytest.fixture(scope="module")
def client():
    with connect("local:2") as dask:
        yield dask


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """signal-rnn (tiny), 20 runs in chunks of 4, sampled in this process."""
    out = tmp_path_factory.mktemp("reference") / "dump"
    return ParameterSampler(SignalRNNTask(**TINY_SIGNAL), chunk_size=CHUNK, progress=False).sample(RUNS, out)


def _files(dump):
    return {name: (dump.path / name).read_bytes() for name in sorted(os.listdir(dump.path)) if name.endswith(".f32")}


def _same_dump(dump, reference):
    dump = ParameterDump.open(dump.path)
    assert dump.complete and dump.verify() == RUNS
    assert _files(dump) == _files(reference)
    assert dump.chunk_records() == reference.chunk_records()  # the same chunks with the same checksums
    assert dump.meta == reference.meta


class KillOnce(SignalRNNTask):
    """signal-rnn whose first replica initialisation on a worker kills that worker's process
    (SIGKILL, as the out-of-memory killer would) unless `marker` exists; it creates the
    marker first, so the task Dask runs again trains normally."""

    def __init__(self, marker, **settings):
        super().__init__(**settings)
        self.marker = str(marker)

    def init_params(self, generator):
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return super().init_params(generator)
        os.kill(os.getpid(), signal.SIGKILL)


def test_parse_scheduler_names_each_kind():
    assert parse_scheduler("local:3") == ("local", 3)
    assert parse_scheduler("tls://10.1.2.3:8786") == ("address", "tls://10.1.2.3:8786")
    assert parse_scheduler("cluster/scheduler.json") == ("file", "cluster/scheduler.json")
    for bad in ("local:0", "local:two", "local:", ""):
        with pytest.raises(ValueError, match="scheduler"):
            parse_scheduler(bad)
    with pytest.raises(TypeError, match="`scheduler` must be a string"):
        parse_scheduler(2)


def test_sampled_on_workers_is_the_local_dump(tmp_path, client, reference):
    dump = ParameterSampler(SignalRNNTask(**TINY_SIGNAL), chunk_size=CHUNK, progress=False).sample(
        RUNS, tmp_path / "dump", client=client)
    _same_dump(dump, reference)


def test_cli_sample_on_a_scheduler_address(tmp_path, client, reference, capsys):
    address = client.scheduler.address  # tcp://127.0.0.1:PORT of the module's cluster
    settings = [f"--set={k}={json.dumps(v)}" for k, v in TINY_SIGNAL.items()]
    assert main(["sample", "--task", "signal-rnn", "--runs", str(RUNS), "--chunk-size", str(CHUNK), "--out",
                 str(tmp_path / "dump"), "--no-progress", "--scheduler", address] + settings) == 0
    _same_dump(ParameterDump.open(tmp_path / "dump"), reference)


def test_a_killed_worker_costs_nothing(tmp_path, client, reference):
    marker = tmp_path / "killed"
    task = KillOnce(marker, **TINY_SIGNAL)
    dump = ParameterSampler(task, chunk_size=CHUNK, progress=False).sample(RUNS, tmp_path / "dump", client=client)
    assert marker.exists()  # a worker process was killed in the middle of a chunk; Dask ran the chunk again
    _same_dump(dump, reference)
    client.wait_for_workers(2, timeout=60)  # its nanny restarted it


def test_resumes_the_missing_chunks_exactly(tmp_path, client, reference):
    """A driver stopped after two chunks that finished out of order (runs 8-12 and 16-20):
    the same call samples the rest on the workers."""
    sampler = ParameterSampler(SignalRNNTask(**TINY_SIGNAL), chunk_size=CHUNK, progress=False)
    dump = ParameterDump.create(tmp_path / "dump", clients=reference.clients, checkpoints=reference.checkpoints,
                                n_runs=RUNS, layout=reference.layout, metric_names=reference.metric_names,
                                meta=reference.meta)
    for start, stop in ((8, 12), (16, 20)):
        result = sampler.train_chunk(range(start, stop))
        dump.write_chunk(start, stop, dict(zip(dump.clients, result.samples)), dict(zip(dump.clients, result.metrics)))
    assert dump.missing_chunks(CHUNK) == [(0, 4), (4, 8), (12, 16)]
    _same_dump(sampler.sample(RUNS, tmp_path / "dump", client=client), reference)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_one_line_and_writes_nothing(tmp_path, reference, capsys):
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    assert main(["sample", "--task", "gaussian-sgd", "--runs", "8", "--out", str(tmp_path / "dump"), "--no-progress",
                 "--scheduler", address, "--scheduler-timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"mianalysis sample: error: cannot reach the Dask scheduler {address}")
    assert main(["analyze", str(reference.path), "--out", str(tmp_path / "t.csv"), "--no-progress",
                 "--scheduler", str(tmp_path / "scheduler.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scheduler file" in err and "does not exist" in err
    assert sorted(os.listdir(tmp_path)) == []
    with pytest.raises(SchedulerError, match="within 1 s"):
        with connect(address, timeout=1):
            pass


def _arrays(n_ckpt=3, runs=40, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_ckpt, runs, 5))
    return {c: (shared + rng.standard_normal((n_ckpt, runs, 5))).astype(np.float32) for c in "abc"}


def test_analysis_on_workers_is_the_local_table(tmp_path, client):
    dump = ParameterDump.from_arrays(tmp_path / "d", _arrays(), checkpoints=[0, 3, 6],
                                     layout=[("w", (3,)), ("b", (2,))])
    kwargs = {"n_permutations": 4, "by": "layer", "ci_resamples": 4, "random_state": 5}
    here = analyze(dump, **kwargs)
    there = analyze(dump, client=client, **kwargs)
    assert len(here) == len(there) and [r.keys() for r in here] == [r.keys() for r in there]
    for a, b in zip(here, there):  # the same rows in the same order, the same values (NaN where NaN)
        assert {k: v for k, v in a.items() if v == v} == {k: v for k, v in b.items() if v == v}
        assert [k for k, v in a.items() if v != v] == [k for k, v in b.items() if v != v]
    # The command line writes the same table, and resumes from its journal like a local analysis.
    args = ["analyze", str(tmp_path / "d"), "--permutations", "4", "--no-progress"]
    assert main(args + ["--out", str(tmp_path / "local.csv")]) == 0
    assert main(args + ["--out", str(tmp_path / "dask.csv"), "--scheduler", client.scheduler.address]) == 0
    assert (tmp_path / "dask.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()


def test_cosine_update_on_workers_is_the_local_table(tmp_path, client):
    # Each worker reads the start checkpoint itself: the analysis sends settings, never samples.
    dump = ParameterDump.from_arrays(tmp_path / "d", _arrays(), checkpoints=[0, 3, 6],
                                     layout=[("w", (3,)), ("b", (2,))])
    kwargs = {"estimators": [], "metrics": ["euclidean", "cosine_update"], "by": "layer"}
    here = analyze(dump, **kwargs)
    there = analyze(dump, client=client, **kwargs)
    assert [r["quantity"] for r in here] == [r["quantity"] for r in there] and here.select("cosine_update")
    np.testing.assert_array_equal([[r["value"], r["ci_low"], r["ci_high"]] for r in here],
                                  [[r["value"], r["ci_low"], r["ci_high"]] for r in there])


def test_run_unordered_yields_every_item_once_and_raises_a_task_error(client):
    seen = dict(run_unordered(client, abs, range(-5, 0), window=2))
    assert seen == {i: abs(i) for i in range(-5, 0)}
    with pytest.raises(TypeError):
        dict(run_unordered(client, abs, ["not a number"]))


def test_to_dask_and_to_xarray_are_the_samples(reference):
    x = to_dask(reference)
    assert x.shape == (3, len(reference.checkpoints), RUNS, reference.n_params) and x.dtype == np.float32
    values = x.compute()
    for c in range(3):
        for t in range(len(reference.checkpoints)):
            assert np.array_equal(values[c, t], reference.samples(c, index=t))
    ds = to_xarray(reference)
    assert ds.samples.dims == ("client", "checkpoint", "run", "parameter")
    assert list(ds.client.values) == reference.clients and list(ds.checkpoint.values) == reference.checkpoints
    last = reference.checkpoints[-1]
    assert np.array_equal(ds.samples.sel(client="2", checkpoint=last).values,
                          reference.samples("2", index=len(reference.checkpoints) - 1))
    head = reference.layout[-1]
    assert list(ds.layer.values[head.offset:]) == [head.name] * head.size
    assert np.array_equal(ds.loss.sel(client="1").values, reference.metric("1", "loss"))


def test_zarr_export_round_trip_with_checksums(tmp_path, reference, capsys):
    zarr = pytest.importorskip("zarr")
    xr = pytest.importorskip("xarray")
    out = tmp_path / "samples.zarr"
    assert main(["export", str(reference.path), "--zarr", str(out)]) == 0
    assert "exported 20 runs" in capsys.readouterr().out
    root = zarr.open_group(str(out), mode="r")
    samples = root["samples"][...]
    assert np.array_equal(samples, to_dask(reference).compute())
    assert root["samples"].attrs["sha256"] == hashlib.sha256(samples.astype("<f4").tobytes()).hexdigest()
    assert root.attrs["dump_chunks"] == reference.chunk_records()
    assert root.attrs["layout"] == [e.to_json() for e in reference.layout]
    ds = xr.open_zarr(out, consolidated=False)
    assert np.array_equal(ds.samples.values, samples) and np.array_equal(ds.loss.values,
                                                                         to_xarray(reference).loss.values)
    assert list(ds.layer.values) == list(to_xarray(reference).layer.values)
    assert sorted(os.listdir(tmp_path)) == ["samples.zarr"]  # no staging folder left
    # Nothing is ever replaced: a second export to the same path is refused.
    before = sorted(p.name for p in out.rglob("*"))
    assert main(["export", str(reference.path), "--zarr", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_zarr_missing_is_a_one_line_error(tmp_path, reference, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "zarr", None)  # import zarr raises ImportError
    assert main(["export", str(reference.path), "--zarr", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'mianalysis[zarr]'" in err
    assert not (tmp_path / "z").exists()
