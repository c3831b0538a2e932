"""Reliability of the dump format, its writer, the importer and the zarr export: two writers
of one dump in one process, checkpoints outside int64, checkpoint folder names, two files of
one run, reserved and path-like metric names, two exports to one store, bfloat16 tensors,
and an import into its own root."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from mianalysis import DumpWriter, LockedError, ParameterDump
from mianalysis._internal.locking import WriterLock, lock_path
from mianalysis.dumps import DumpError, layout_from_shapes, to_xarray

torch = pytest.importorskip("torch")
from mianalysis.dumps.importers import import_checkpoints  # noqa: E402

CLIENTS = ["a", "b"]


def _record_runs(w, runs, checkpoints=(0, 1), n=3):
    for run in runs:
        for c in CLIENTS:
            for t in checkpoints:
                w.record(run=run, client=c, checkpoint=t, params=np.full(n, run + 0.5 * t, dtype=np.float32))


def _writer(path, **kw):
    args = {"clients": CLIENTS, "checkpoints": [0, 1], "runs": 8, "chunk_size": 4, **kw}
    return DumpWriter(path, **args)


def _chunks(path):
    return [(c["start"], c["stop"]) for c in json.loads((path / "manifest.json").read_text())["chunks"]]


# ---------------------------------------------------------------------- 1. two writers in one process
def test_second_writer_of_one_dump_in_one_process_is_refused_and_the_first_keeps_its_chunk(tmp_path):
    path = tmp_path / "d"
    with pytest.raises(LockedError, match=r"d is already being written by a writer of this process"):
        with _writer(path) as a, _writer(path) as b:  # the brief's case: A runs 0-3, B runs 4-7
            _record_runs(a, range(4))
            _record_runs(b, range(4, 8))
    assert not lock_path(path).exists()  # the refused writer gave back nothing of A's lock, A then gave it up

    # Opened and closed in the other orders: A open, B refused; A writes and closes, then B can.
    a = _writer(path).__enter__()
    _record_runs(a, range(4))
    with pytest.raises(LockedError, match="already being written by a writer of this process"):
        _writer(path).__enter__()
    assert lock_path(path).exists()  # still A's
    _record_runs(a, range(4, 6))
    a.__exit__(None, None, None)  # writes the complete runs 4-5 of the partly filled chunk
    assert not lock_path(path).exists()
    with _writer(path) as b:
        assert b.missing_runs() == [6, 7]
        _record_runs(b, range(6, 8))
    dump = ParameterDump.open(path)
    assert _chunks(path) == [(0, 4), (4, 6), (6, 8)] and dump.verify() == 8
    assert dump.samples("b", index=1)[:, 0].tolist() == [r + 0.5 for r in range(8)]


def test_a_writer_after_the_first_closed_resumes_it(tmp_path):
    path = tmp_path / "d"
    with _writer(path) as a:
        _record_runs(a, range(4))
    with _writer(path) as b:
        _record_runs(b, range(4, 8))
    assert _chunks(path) == [(0, 4), (4, 8)]


def test_two_dump_objects_of_one_folder_keep_each_others_chunks(tmp_path):
    path = tmp_path / "d"
    ParameterDump.create(path, clients=["0"], checkpoints=[0], n_runs=8, layout=layout_from_shapes([("p", (2,))]))
    first, second = ParameterDump.open(path), ParameterDump.open(path)
    first.write_chunk(0, 4, {"0": np.ones((1, 4, 2))})
    second.write_chunk(4, 8, {"0": np.full((1, 4, 2), 2.0)})  # re-reads the manifest under the lock
    assert _chunks(path) == [(0, 4), (4, 8)]
    with pytest.raises(DumpError, match=r"chunk 2-6 overlaps the written chunk 0-4"):
        second.write_chunk(2, 6, {"0": np.zeros((1, 4, 2))})  # first's chunk, never overwritten
    dump = ParameterDump.open(path)
    assert dump.verify() == 8 and dump.samples("0", index=0)[:, 0].tolist() == [1.0] * 4 + [2.0] * 4
    assert len(dump.provenance) == 3  # the creator's session, then each writer's


def test_a_dump_replaced_under_a_writer_is_refused(tmp_path):
    path = tmp_path / "d"
    dump = ParameterDump.create(path, clients=["0"], checkpoints=[0], n_runs=4,
                                layout=layout_from_shapes([("p", (2,))]))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["meta"] = {"other": 1}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=r"manifest.json changed since .* opened it .*`meta`"):
        dump.write_chunk(0, 2, {"0": np.ones((1, 2, 2))})


# ---------------------------------------------------------------------- 2. checkpoints outside int64
@pytest.mark.parametrize("checkpoint", [2**63, -(2**63) - 1])
def test_checkpoints_outside_int64_are_refused_naming_the_value(tmp_path, checkpoint):
    with pytest.raises(ValueError, match=rf"`checkpoints`.*int64.*got {checkpoint}"):
        DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0, checkpoint], runs=1)
    with pytest.raises(ValueError, match=rf"`checkpoints`.*int64.*got {checkpoint}"):
        ParameterDump.create(tmp_path / "d", clients=["a"], checkpoints=[checkpoint], n_runs=1,
                             layout=layout_from_shapes([("p", (1,))]))
    with pytest.raises(ValueError, match=rf"`checkpoints`.*int64.*got {checkpoint}"):
        ParameterDump.from_arrays(tmp_path / "d", [np.ones((1, 2, 2))], checkpoints=[checkpoint])
    assert not (tmp_path / "d").exists()


def test_the_int64_bounds_themselves_are_kept(tmp_path):
    with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[-(2**63), 2**63 - 1], runs=1) as w:
        for t in (-(2**63), 2**63 - 1):
            w.record(run=0, client="a", checkpoint=t, params=[1.0])
    assert ParameterDump.open(tmp_path / "d").checkpoints == [-(2**63), 2**63 - 1]


# ---------------------------------------------------------------------- 3. checkpoint folder names
def _root(tmp_path, checkpoint_names, runs=("0.pt",)):
    root = tmp_path / "ckpts"
    for name in checkpoint_names:
        (root / "a" / name).mkdir(parents=True)
        for run in runs:
            file = root / "a" / name / run
            if run.endswith(".pt"):
                torch.save({"w": torch.ones(2)}, file)
            else:
                from safetensors.torch import save_file

                save_file({"w": torch.ones(2)}, str(file))
    return root


@pytest.mark.parametrize("name", ["0_5", "\u0665", " 5", "5 ", "+5", "\uff15", "1e3"])
def test_checkpoint_folders_named_other_than_by_ascii_digits_are_refused(tmp_path, name):
    root = _root(tmp_path, ["0", name])
    with pytest.raises(DumpError, match=rf"checkpoint folder {re.escape(repr(name))} is not an integer iteration .*ASCII digits"):
        import_checkpoints(root, tmp_path / "d", progress=False)
    assert not (tmp_path / "d").exists()


def test_a_checkpoint_folder_beyond_int64_is_named(tmp_path):
    root = _root(tmp_path, ["0", str(2**63)])
    with pytest.raises(DumpError, match=rf"checkpoint folder '{2**63}'.*int64"):
        import_checkpoints(root, tmp_path / "d", progress=False)


# ---------------------------------------------------------------------- 4. two files of one run
def test_run_pt_beside_run_safetensors_is_refused_naming_both(tmp_path):
    pytest.importorskip("safetensors")
    root = _root(tmp_path, ["0"], runs=("run.pt", "run.safetensors", "other.pt"))
    with pytest.raises(DumpError, match=r"run\.pt and .*run\.safetensors both name run 'run'; keep one"):
        import_checkpoints(root, tmp_path / "d", progress=False)
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------------- 5. metric names
BAD_METRICS = ["a/b", "samples", "layer", "run", "client", "checkpoint", "parameter", "", "a b", "..", ".x", "-x",
               "__x", "a\\b", "lo\u0073s\u0301"]


@pytest.mark.parametrize("name", BAD_METRICS)
def test_reserved_or_path_like_metric_names_are_refused_by_the_writer(tmp_path, name):
    with pytest.raises(ValueError, match=rf"metric name {re.escape(repr(name))} .*(reserved|letters)"):
        DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1, metrics=[name])
    with pytest.raises(ValueError, match=rf"metric name {re.escape(repr(name))}"):
        with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1) as w:
            w.record(run=0, client="a", checkpoint=0, params=[1.0], metrics={name: 1.0})
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("name", ["a/b", "samples", "run"])
def test_reserved_or_path_like_metric_names_are_refused_everywhere_they_enter(tmp_path, name):
    with pytest.raises(ValueError, match=rf"metric name {re.escape(repr(name))}"):
        ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))}, metrics={"a": {name: np.ones((1, 2))}})
    with pytest.raises(ValueError, match=rf"metric name {re.escape(repr(name))}"):
        ParameterDump.create(tmp_path / "d", clients=["a"], checkpoints=[0], n_runs=1,
                             layout=layout_from_shapes([("p", (1,))]), metric_names=[name])
    assert not (tmp_path / "d").exists()


def test_plain_metric_names_are_kept(tmp_path):
    names = ["loss", "val_loss", "Top1", "_aux", "acc2", "num-examples", "top.1", "1st"]
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))},
                                     metrics={"a": {n: np.ones((1, 2)) for n in names}})
    assert dump.metric_names == sorted(names)


def test_an_old_dump_with_a_reserved_metric_name_keeps_its_samples_in_xarray(tmp_path):
    pytest.importorskip("xarray")
    pytest.importorskip("dask")
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))}, metrics={"a": {"x": np.zeros((1, 2))}})
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    manifest["metrics"] = ["samples"]  # written before the rule
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    ds = to_xarray(ParameterDump.open(dump.path))
    assert ds.samples.dims == ("client", "checkpoint", "run", "parameter")
    assert ds.metric_samples.attrs["metric"] == "samples"


def test_an_old_dump_with_a_path_like_metric_name_is_not_exported_as_a_group(tmp_path):
    pytest.importorskip("zarr")
    from mianalysis.dumps.arrays import export_zarr

    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))}, metrics={"a": {"x": np.zeros((1, 2))}})
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    manifest["metrics"] = ["a/b"]  # written before the rule
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=r"metric name 'a/b' cannot name an array of a zarr store"):
        export_zarr(ParameterDump.open(dump.path), tmp_path / "s.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


# ---------------------------------------------------------------------- 6. two exports to one store
HOLDER = r"""
import sys
from mianalysis._internal.locking import WriterLock
with WriterLock(sys.argv[1]):
    print("paused", flush=True)
    sys.stdin.read()
"""


def test_a_second_export_to_one_store_is_refused_in_one_line(tmp_path, cli):
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))})
    out = tmp_path / "s.zarr"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "paused\n"
        (tmp_path / ".s.zarr.exporting").mkdir()  # the first export's staging folder
        (tmp_path / ".s.zarr.exporting" / "zarr.json").write_text("{}")
        result = cli(["export", dump.path, "--zarr", out])
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"mianalysis export: error: {out} is being written by process {holder.pid}")
        assert (tmp_path / ".s.zarr.exporting" / "zarr.json").read_text() == "{}"  # the first's work untouched
    finally:
        holder.communicate("")
    assert holder.returncode == 0


def test_an_export_holds_the_stores_lock_while_it_writes(tmp_path, monkeypatch):
    zarr = pytest.importorskip("zarr")  # noqa: F841
    from mianalysis.dumps import arrays

    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.ones((1, 2, 2))})
    out = tmp_path / "s.zarr"
    seen = []
    write_store = arrays._write_store

    def spying(*args):
        seen.append(lock_path(out).exists())
        return write_store(*args)

    monkeypatch.setattr(arrays, "_write_store", spying)
    arrays.export_zarr(dump, out)
    assert seen == [True] and not lock_path(out).exists() and out.is_dir()


# ---------------------------------------------------------------------- 7. bfloat16
def test_a_bfloat16_flat_vector_is_recorded_as_float32_exactly(tmp_path):
    values = torch.tensor([1.5, -2.25, 3.0e38, 1e-3], dtype=torch.bfloat16)
    with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1) as w:
        w.record(run=0, client="a", checkpoint=0, params=values)
    got = ParameterDump.open(tmp_path / "d").samples("a", index=0)[0]
    assert got.tolist() == values.float().tolist()


def test_bfloat16_state_dicts_and_imports_are_float32_exactly(tmp_path):
    values = torch.tensor([1.5, -2.25, 1e-3], dtype=torch.bfloat16)
    with DumpWriter(tmp_path / "d", clients=["a"], checkpoints=[0], runs=1) as w:
        w.record(run=0, client="a", checkpoint=0, params={"w": values})
    assert ParameterDump.open(tmp_path / "d").samples("a", index=0)[0].tolist() == values.float().tolist()
    (tmp_path / "r" / "a" / "0").mkdir(parents=True)
    torch.save({"w": values}, tmp_path / "r" / "a" / "0" / "0.pt")
    dump = import_checkpoints(tmp_path / "r", tmp_path / "i", progress=False)
    assert dump.samples("a", index=0)[0].tolist() == values.float().tolist()


# ---------------------------------------------------------------------- 8. import into its own root
@pytest.mark.parametrize("out", ["dump", "a/dump", "."])
def test_import_into_its_own_root_is_refused_before_any_work(tmp_path, cli, out, monkeypatch):
    root = _root(tmp_path, ["0"])
    from mianalysis.dumps import importers

    monkeypatch.setattr(importers, "scan_checkpoints", lambda *a: pytest.fail("scanned"))
    result = cli(["import", root, "--out", root / out, "--no-progress"])
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "lies inside the folder being imported" in result.stderr
    assert sorted(p.name for p in root.iterdir()) == ["a"] and not lock_path(root / out).exists()


def test_a_manifest_the_dump_cannot_be_built_from_is_a_dump_error_naming_it(tmp_path, monkeypatch):
    # ParameterDump.open wraps what building the dump from a checked manifest raises; the
    # message named an undefined variable (a NameError instead of the DumpError).
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": np.zeros((1, 2, 3))})

    def broken(self, path, manifest):
        raise KeyError("clients")

    monkeypatch.setattr(ParameterDump, "__init__", broken)
    with pytest.raises(DumpError, match=r"manifest\.json is damaged: KeyError\('clients'\)"):
        ParameterDump.open(dump.path)
