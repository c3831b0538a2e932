import json

import numpy as np
import pytest

from mianalysis.dumps import FORMAT_VERSION, DumpError, ParameterDump, import_checkpoints, layout_from_shapes


@pytest.fixture
def arrays(rng):
    return {"a": rng.standard_normal((3, 10, 5)), "b": rng.standard_normal((3, 10, 5))}


def make_dump(path, arrays):
    metrics = {c: {"loss": np.arange(30.0).reshape(3, 10)} for c in arrays}
    return ParameterDump.from_arrays(path, arrays, checkpoints=[0, 2, 4], layout=[("w", (2, 2)), ("b", (1,))],
                                     metrics=metrics, meta={"source": "test"})


def test_round_trip(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.clients == ["a", "b"] and dump.checkpoints == [0, 2, 4]
    assert dump.n_runs == dump.completed_runs == 10 and dump.complete and dump.n_params == 5
    np.testing.assert_array_equal(dump.samples("b", index=1), arrays["b"][1].astype(np.float32))
    np.testing.assert_array_equal(dump.samples(0, index=2, layer="b"), arrays["a"][2][:, 4:].astype(np.float32))
    np.testing.assert_array_equal(dump.metric("a", "loss"), np.arange(30.0).reshape(3, 10))
    assert [e.to_json() for e in dump.layout] == [
        {"name": "w", "shape": [2, 2], "offset": 0, "size": 4}, {"name": "b", "shape": [1], "offset": 4, "size": 1}]
    assert dump.meta == {"source": "test"}
    assert dump.verify() == 10


def test_samples_are_memory_mapped(tmp_path, arrays):
    dump = make_dump(tmp_path / "d", arrays)
    assert isinstance(dump.samples("a", index=0), np.memmap)


def test_layer_prefix_selects_several_tensors(tmp_path, rng):
    layout = [("rnn.0.w", (2,)), ("rnn.0.b", (1,)), ("rnn.1.w", (2,)), ("head", (1,))]
    dump = ParameterDump.from_arrays(tmp_path / "d", [rng.standard_normal((4, 6))], layout=layout)
    np.testing.assert_array_equal(dump.layer_columns("rnn.0"), [0, 1, 2])
    np.testing.assert_array_equal(dump.layer_columns(["rnn.1", "head"]), [3, 4, 5])
    with pytest.raises(ValueError, match="`layer` 'rnn.2' is not in the layout"):
        dump.layer_columns("rnn.2")


def test_existing_folder_is_not_overwritten(tmp_path, arrays):
    target = tmp_path / "d"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(DumpError, match="already exists and is not an empty folder"):
        make_dump(target, arrays)
    assert (target / "notes.txt").read_text() == "keep me" and len(list(target.iterdir())) == 1


def test_chunks_may_come_out_of_order_and_only_the_prefix_is_read(tmp_path):
    dump = ParameterDump.create(tmp_path / "d", clients=["0"], checkpoints=[0], n_runs=6, layout=layout_from_shapes([("p", (2,))]))
    block = {"0": np.ones((1, 3, 2))}
    dump.write_chunk(3, 6, block)
    again = ParameterDump.open(tmp_path / "d")
    assert (again.completed_runs, again.written_runs, again.complete) == (0, 3, False)
    assert again.missing_ranges() == [(0, 3)] and again.samples("0", index=0).shape == (0, 2)
    with pytest.raises(DumpError, match="chunk 2-4 overlaps the written chunk 3-6"):
        dump.write_chunk(2, 4, {"0": np.ones((1, 2, 2))})
    dump.write_chunk(0, 3, block)
    assert ParameterDump.open(tmp_path / "d").completed_runs == 6 and ParameterDump.open(tmp_path / "d").complete
    assert ParameterDump.open(tmp_path / "d").samples("0", index=0).shape == (6, 2)


def test_bad_client_and_checkpoint(tmp_path, arrays):
    dump = make_dump(tmp_path / "d", arrays)
    with pytest.raises(ValueError, match=r"`client` must be one of \['a', 'b'\]"):
        dump.samples("c", index=0)
    with pytest.raises(ValueError, match=r"`index` must be in \[0, 2\] .*iterations \[0, 2, 4\]\); got 3"):
        dump.samples("a", index=3)
    with pytest.raises(ValueError, match=r"`index` must be in \[0, 2\]"):
        dump.samples("a", index=-1)
    with pytest.raises(ValueError, match=r"`iteration` 3 is not a checkpoint of .*: its iterations are \[0, 2, 4\]"):
        dump.samples("a", iteration=3)
    with pytest.raises(TypeError, match=r"pass exactly one of `iteration` \(one of \[0, 2, 4\]\) or `index` "
                                        r"\(0-2\); got neither"):
        dump.samples("a")
    with pytest.raises(TypeError, match=r"pass exactly one of .*; got iteration=2 and index=1"):
        dump.samples("a", iteration=2, index=1)
    with pytest.raises(TypeError, match=r"`iteration` must be an integer; got 2.0"):
        dump.samples("a", iteration=2.0)
    with pytest.raises(TypeError, match=r"`index` must be an integer; got True"):
        dump.samples("a", index=True)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'layers'"):
        dump.samples("a", index=0, layers="w")


@pytest.mark.parametrize("iterations", [[0, 5], [0, 2, 4, 6]])
def test_samples_by_iteration_reads_each_checkpoint(tmp_path, iterations):
    """gh-31: looping over `dump.checkpoints` reads each checkpoint, where the positional
    form raised for [0, 5] and read the wrong checkpoint for [0, 2, 4, 6]."""
    n = len(iterations)
    values = np.arange(n, dtype=np.float32)[:, None, None] + np.zeros((n, 3, 2), dtype=np.float32)
    dump = ParameterDump.from_arrays(tmp_path / "d", {"a": values, "b": -values}, checkpoints=iterations)
    for position, t in enumerate(dump.checkpoints):
        np.testing.assert_array_equal(dump.samples("a", iteration=t), np.full((3, 2), position))
        np.testing.assert_array_equal(dump.samples("b", iteration=np.int64(t)), np.full((3, 2), -position))
        np.testing.assert_array_equal(dump.samples("a", index=position), dump.samples("a", iteration=t))
        assert isinstance(dump.samples("a", iteration=t), np.memmap)
    np.testing.assert_array_equal(dump.samples("a", iteration=iterations[-1], layer=dump.layout[0].name),
                                  np.full((3, 2), n - 1))


@pytest.mark.parametrize("call, given", [
    (lambda d: d.samples("a", 1), "got 1"),
    (lambda d: d.samples("a", 1, "p"), "got 1"),
    (lambda d: d.samples("a", checkpoint=1), "got checkpoint=1"),
    (lambda d: d.samples("a", checkpoint=1, layer="p"), "got checkpoint=1"),
])
def test_old_positional_checkpoint_explains_the_migration(tmp_path, call, given):
    dump = ParameterDump.from_arrays(tmp_path / "d", [np.zeros((2, 3, 1))], checkpoints=[0, 5])
    with pytest.raises(TypeError, match=rf"no longer takes the checkpoint positionally or as `checkpoint=` "
                                        rf"\({given}\), which was ambiguous: pass iteration=\.\.\. \(a value of "
                                        rf"`checkpoints`, \[0, 5\]\) or index=\.\.\. \(a position, what the old "
                                        rf"form meant: samples\('a', index=1\)\)"):
        call(dump)


# ---------------------------------------------------------------- damage is detected
def test_missing_folder_and_not_a_dump(tmp_path):
    with pytest.raises(DumpError, match="does not exist"):
        ParameterDump.open(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(DumpError, match="is not a dump: no manifest.json"):
        ParameterDump.open(tmp_path / "plain")


def test_truncated_array_file(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    f = tmp_path / "d" / "client_1.f32"
    f.write_bytes(f.read_bytes()[:-7])
    with pytest.raises(DumpError, match=r"client_1.f32 has \d+ bytes; .* \(truncated\)"):
        ParameterDump.open(tmp_path / "d")


def test_flipped_byte_fails_checksum(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    f = tmp_path / "d" / "client_0.f32"
    raw = bytearray(f.read_bytes())
    raw[41] ^= 0x10
    f.write_bytes(bytes(raw))
    dump = ParameterDump.open(tmp_path / "d")
    with pytest.raises(DumpError, match=r"client_0.f32 or metrics_0.f32: runs 0-10 of client 'a' do not match their checksum"):
        dump.verify()


def test_damaged_manifest(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    m = tmp_path / "d" / "manifest.json"
    m.write_text(m.read_text()[:50])
    with pytest.raises(DumpError, match="manifest.json is damaged"):
        ParameterDump.open(tmp_path / "d")


def test_edited_manifest_shape(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    m = tmp_path / "d" / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["n_runs"] = 12
    m.write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=r"client_0.f32 has \d+ bytes; the manifest's shape \(3, 12, 5\)"):
        ParameterDump.open(tmp_path / "d")


def test_missing_client_file(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    (tmp_path / "d" / "client_1.f32").unlink()
    with pytest.raises(DumpError, match=r"client_1.f32 is missing \(client 'b'\)"):
        ParameterDump.open(tmp_path / "d")


def test_newer_format_version(tmp_path, arrays):
    make_dump(tmp_path / "d", arrays)
    m = tmp_path / "d" / "manifest.json"
    manifest = json.loads(m.read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    m.write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=f"format version {FORMAT_VERSION + 1}; this mianalysis reads up to "
                                        f"{FORMAT_VERSION}"):
        ParameterDump.open(tmp_path / "d")


# ---------------------------------------------------------------- importers
def test_from_arrays_bad_input(tmp_path, rng):
    with pytest.raises(ValueError, match="every client's samples must have the same shape"):
        ParameterDump.from_arrays(tmp_path / "d", [rng.standard_normal((4, 3)), rng.standard_normal((5, 3))])
    with pytest.raises(ValueError, match=r"`samples\['0'\]` contains non-finite values: 1 NaN"):
        ParameterDump.from_arrays(tmp_path / "e", [np.array([[np.nan, 1.0], [2.0, 3.0]])])
    with pytest.raises(ValueError, match="`layout` describes 4 parameters; samples have 3"):
        ParameterDump.from_arrays(tmp_path / "f", [rng.standard_normal((4, 3))], layout=[("w", (2, 2))])
    assert not (tmp_path / "d").exists() and not (tmp_path / "e").exists()


def test_import_checkpoints(tmp_path):
    torch = pytest.importorskip("torch")
    root = tmp_path / "ckpts"
    expected = {}
    for c in ("alice", "bob"):
        for t in (0, 10):
            (root / c / str(t)).mkdir(parents=True)
            for r in range(3):
                state = {"fc.weight": torch.full((2, 2), float(100 * t + 10 * r)) + (c == "bob"),
                         "fc.bias": torch.tensor([float(r), -1.0]), "steps": torch.tensor(7)}
                torch.save(state, root / c / str(t) / f"run{r}.pt")
                expected[c, t, r] = np.concatenate([state["fc.weight"].reshape(-1).numpy(), state["fc.bias"].numpy()])
    dump = import_checkpoints(root, tmp_path / "dump")
    assert dump.clients == ["alice", "bob"] and dump.checkpoints == [0, 10] and dump.n_params == 6
    assert [e.name for e in dump.layout] == ["fc.weight", "fc.bias"]
    np.testing.assert_array_equal(dump.samples("bob", index=1)[2], expected["bob", 10, 2])
    (root / "bob" / "10" / "run1.pt").unlink()
    with pytest.raises(DumpError, match="run1.pt is missing"):
        import_checkpoints(root, tmp_path / "dump2")


def test_creation_is_atomic_and_an_empty_folder_is_used(tmp_path):
    layout = layout_from_shapes([("p", (2,))])
    (tmp_path / "empty").mkdir()
    ParameterDump.create(tmp_path / "empty", clients=["0"], checkpoints=[0], n_runs=2, layout=layout)
    assert (tmp_path / "empty" / "manifest.json").exists()
    # A creation killed half-way leaves only a hidden staging folder, cleared next time.
    (tmp_path / ".d.creating").mkdir()
    (tmp_path / ".d.creating" / "client_0.f32").write_bytes(b"junk")
    ParameterDump.create(tmp_path / "d", clients=["0"], checkpoints=[0], n_runs=2, layout=layout)
    assert not (tmp_path / ".d.creating").exists() and ParameterDump.open(tmp_path / "d").n_runs == 2
