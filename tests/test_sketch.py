"""Sketches (mianalysis.dumps.sketch): the Johnson-Lindenstrauss error stated in the
docstring holds on known data, the projection is linear, seeded and the same in every
process and batch, the numba kernel equals a plain NumPy reference, and a sketched dump
(DumpWriter, ParameterSampler with ModuleTask) records the sketch, reads back and says what
its analysis rows measure."""

import hashlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from mianalysis import DumpWriter, ParameterDump, ParameterSampler, Sketch, analyze
from mianalysis.dumps import JL_CONSTANT, DumpError, jl_error, jl_size
from mianalysis.dumps.sketch import SKETCH_SUFFIX
from mianalysis.tasks import ModuleTask

torch = pytest.importorskip("torch")


def reference_sketch(sketch, name, x, size):
    """The sparse sign sketch of the flat vector x, in plain NumPy: SplitMix64 hashes of
    (key, i, j) give each coordinate one row per block and a sign (the kernel's docstring)."""
    n, nnz = x.size, min(sketch.nnz, size)
    key = sketch._key(name, x.shape, size)
    i = np.repeat(np.arange(n, dtype=np.uint64), nnz)
    j = np.tile(np.arange(nnz, dtype=np.uint64), n)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (i * np.uint64(nnz) + j + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    lo = (j.astype(np.int64) * size) // nnz
    width = ((j.astype(np.int64) + 1) * size) // nnz - lo
    rows = lo + ((z >> np.uint64(32)) * width.astype(np.uint64) >> np.uint64(32)).astype(np.int64)
    signs = np.where(z & np.uint64(1), 1.0, -1.0)
    out = np.zeros(size)
    np.add.at(out, rows, signs * np.repeat(x.ravel().astype(np.float64), nnz))  # in order: coordinate, block
    return out / math.sqrt(nnz)


def relative_errors(sketch, x, y, size):
    """| |Sx - Sy| / |x - y| - 1 | of each pair of rows of x and y."""
    sx = sketch.project("w", x, size=size, batch_dims=1).astype(np.float64)
    sy = sketch.project("w", y, size=size, batch_dims=1).astype(np.float64)
    true = np.linalg.norm(x.astype(np.float64) - y.astype(np.float64), axis=1)
    return np.abs(np.linalg.norm(sx - sy, axis=1) / true - 1)


# ---------------------------------------------------------------------------- the JL statement
def test_distances_of_sketches_are_within_the_stated_error():
    # 1,000 pairs of 100,000-dim vectors (pair i: vectors i and i + 1 of 1,001), m = 2,048,
    # made and sketched 100 vectors at a time.
    rng = np.random.default_rng(0)
    m, delta = 2048, 0.05
    eps = jl_error(m, delta)
    assert eps == pytest.approx(math.sqrt(JL_CONSTANT * math.log(1 / delta) / m)) and 0.05 < eps < 0.06
    sketch = Sketch(size=m, seed=3)
    last = rng.random((1, 100_000), dtype=np.float32)
    last_sketch, errors = sketch.project("w", last, size=m, batch_dims=1), []
    for _ in range(10):
        x = np.concatenate([last, rng.random((100, 100_000), dtype=np.float32)])
        sx = np.concatenate([last_sketch, sketch.project("w", x[1:], size=m, batch_dims=1)]).astype(np.float64)
        true = np.linalg.norm(np.diff(x, axis=0), axis=1).astype(np.float64)
        errors.append(np.abs(np.linalg.norm(np.diff(sx, axis=0), axis=1) / true - 1))
        last, last_sketch = x[-1:], sx[-1:].astype(np.float32)
    errors = np.concatenate(errors)
    assert errors.size == 1000
    assert np.mean(errors > eps) <= delta
    # The error is as the docstring says: nearly normal with sd 1/sqrt(2m) (C = 2 leaves a margin).
    assert np.sqrt(np.mean(errors ** 2)) == pytest.approx(1 / math.sqrt(2 * m), rel=0.15)
    assert np.mean(errors > jl_error(m, 0.5)) <= 0.5


@pytest.mark.parametrize("kind", ["student-t", "sparse"])
def test_stated_error_holds_for_heavy_tailed_and_sparse_differences(kind):
    rng = np.random.default_rng(1)
    n, m, delta = 20_000, 1024, 0.05
    x = rng.standard_normal((300, n))
    d = rng.standard_t(3, (300, n)) if kind == "student-t" else \
        rng.standard_normal((300, n)) * (rng.random((300, n)) < 0.01)  # 1 % of the coordinates differ
    errors = relative_errors(Sketch(size=m, seed=5), x, x + d, m)
    assert np.mean(errors > jl_error(m, delta)) <= delta


def test_jl_size_and_error_are_inverse():
    for eps, delta in ((0.05, 0.05), (0.1, 0.01), (0.2, 0.1)):
        m = jl_size(eps, delta)
        assert jl_error(m, delta) <= eps < jl_error(m - 1, delta)
    with pytest.raises(ValueError, match="`delta`"):
        jl_size(0.1, 1.0)


def test_a_single_coordinate_is_kept_exactly():
    x = np.zeros(5000)
    x[1234] = 3.0
    assert np.linalg.norm(Sketch(size=64).project("w", x, size=64)) == pytest.approx(3.0, rel=1e-14)


# ---------------------------------------------------------------------------- the projection
def test_kernel_equals_the_numpy_reference():
    rng = np.random.default_rng(2)
    for nnz, size, shape in ((4, 37, (5, 60)), (1, 16, (100,)), (3, 2, (7, 3)), (8, 5, (40,))):
        sketch = Sketch(size=size, seed=11, nnz=nnz)
        x = rng.standard_normal(shape)
        got = sketch.project("layer.w", x, size=size)
        np.testing.assert_allclose(got, reference_sketch(sketch, "layer.w", x, size), rtol=1e-13, atol=1e-13)


def test_projection_is_linear():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 3000))
    sketch = Sketch(size=100, seed=4)
    lhs = sketch.project("w", 2.5 * x - 0.75 * y, size=100)
    rhs = 2.5 * sketch.project("w", x, size=100) - 0.75 * sketch.project("w", y, size=100)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12, atol=1e-12)


def test_projection_is_pinned_by_seed_name_and_shape():
    # Integer hashing only: these values are the same on every machine and NumPy version.
    got = Sketch(size=4, seed=0, nnz=2).project("w", np.arange(10.0), size=4)
    np.testing.assert_allclose(got, np.array([5.0, 20.0, 22.0, 1.0]) / math.sqrt(2), rtol=1e-15)
    got = Sketch(size=3, seed=7, nnz=1).project("layer.0.weight", np.arange(12.0).reshape(3, 4), size=3)
    assert got.tolist() == [35.0, -15.0, -2.0]
    x = np.random.default_rng(0).standard_normal(500)
    base = Sketch(size=32, seed=1).project("w", x, size=32)
    assert np.array_equal(base, Sketch(size=32, seed=1).project("w", x, size=32))  # across calls
    for other in (Sketch(size=32, seed=2).project("w", x, size=32), Sketch(size=32, seed=1).project("v", x, size=32),
                  Sketch(size=32, seed=1).project("w", x.reshape(20, 25), size=32)):
        assert not np.allclose(base, other)


def test_projection_is_the_same_in_another_process():
    code = ("import hashlib, numpy as np; from mianalysis import Sketch; "
            "x = np.random.default_rng(0).standard_normal((3, 4000)).astype(np.float32); "
            "print(hashlib.sha256(Sketch(size=256, seed=9).project('w', x, size=256, batch_dims=1).tobytes())"
            ".hexdigest())")
    x = np.random.default_rng(0).standard_normal((3, 4000)).astype(np.float32)
    here = hashlib.sha256(Sketch(size=256, seed=9).project("w", x, size=256, batch_dims=1).tobytes()).hexdigest()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


def test_a_replica_is_sketched_the_same_in_any_batch():
    x = np.random.default_rng(4).standard_normal((6, 2, 300)).astype(np.float32)
    sketch = Sketch(size=50, seed=2)
    batched = sketch.project("w", x, size=50, batch_dims=1)
    assert batched.shape == (6, 50) and batched.dtype == np.float32
    for r in range(6):
        assert np.array_equal(batched[r], sketch.project("w", x[r], size=50))


def test_sizes_and_layout():
    shapes = [("a.weight", (100, 30)), ("a.bias", (100,)), ("b.weight", (0, 4)), ("c", (1000,))]
    per_tensor = Sketch(size=200)
    assert per_tensor.sizes(shapes) == [200, 100, 0, 200]
    assert per_tensor.layout(shapes) == [("a.weight" + SKETCH_SUFFIX, (200,)), ("a.bias", (100,)),
                                         ("b.weight", (0, 4)), ("c" + SKETCH_SUFFIX, (200,))]
    total = Sketch(size=410, split="total")
    assert total.sizes(shapes) == [300, 10, 0, 100]  # in proportion to 3000, 100, 0 and 1000 values
    assert sum(Sketch(size=1000, split="total").sizes(shapes)) == 1000
    assert Sketch(size=10_000, split="total").sizes(shapes) == [3000, 100, 0, 1000]  # all kept whole
    named = [(n, np.ones(s)) for n, s in shapes]
    assert [(n, a.shape) for n, a in per_tensor.apply(named)] == per_tensor.layout(shapes)


@pytest.mark.parametrize("args, error, match", [
    ({"size": 0}, ValueError, "`size`"), ({"size": 2.5}, TypeError, "`size`"), ({"size": 8, "seed": -1}, ValueError,
                                                                                   "`seed`"),
    ({"size": 8, "kind": "gaussian"}, ValueError, "`kind`"), ({"size": 8, "nnz": 0}, ValueError, "`nnz`"),
    ({"size": 8, "split": "layer"}, ValueError, "`split`")])
def test_bad_settings_are_named(args, error, match):
    with pytest.raises(error, match=match):
        Sketch(**args)


# ---------------------------------------------------------------------------- sketched dumps
SHAPES = [("a.weight", (40, 30)), ("a.bias", (40,)), ("b.weight", (2000,))]


def params(rng, shared):
    return {n: (v + 0.5 * rng.standard_normal(v.shape)).astype(np.float32) for n, v in shared.items()}


def write(path, sketch, runs=24, seed=0, stop=None):
    rng = np.random.default_rng(seed)
    given = {}
    with DumpWriter(path, clients=["x", "y"], checkpoints=[0, 1], runs=runs, chunk_size=8, sketch=sketch) as w:
        for r in range(runs if stop is None else stop):
            shared = {n: rng.standard_normal(s) for n, s in SHAPES}
            for c in ("x", "y"):
                for t in (0, 1):
                    given[c, t, r] = params(rng, shared)
                    w.record(run=r, client=c, checkpoint=t, params=given[c, t, r])
    return given


def test_writer_records_the_sketch_and_the_manifest_the_seed(tmp_path):
    sketch = Sketch(size=128, seed=42)
    given = write(tmp_path / "d", sketch)
    dump = ParameterDump.open(tmp_path / "d")
    assert dump.sketch == sketch and dump.sketch_source == SHAPES
    assert [(e.name, e.shape) for e in dump.layout] == [("a.weight[sketch]", (128,)), ("a.bias", (40,)),
                                                        ("b.weight[sketch]", (128,))]
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    assert manifest["sketch"] == {"kind": "sparse-sign", "size": 128, "seed": 42, "nnz": 4, "split": "tensor",
                                  "tensors": [{"name": "a.weight", "shape": [40, 30], "size": 128},
                                              {"name": "a.bias", "shape": [40], "size": 40},
                                              {"name": "b.weight", "shape": [2000], "size": 128}]}
    assert dump.verify() == 24
    for (c, t, r), p in list(given.items())[:10]:
        expected = np.concatenate([a.ravel() for _, a in sketch.apply(list(p.items()))])
        assert np.array_equal(dump.samples(c, iteration=t)[r], expected)
    assert dump.samples("x", index=0, layer="a.weight").shape == (24, 128)  # the tensor's name selects its sketch
    assert dump.samples("x", index=0, layer="a").shape == (24, 168)


def test_full_dumps_keep_format_version_1_and_no_sketch(tmp_path):
    write(tmp_path / "full", None, runs=8)
    dump = ParameterDump.open(tmp_path / "full")
    assert dump.sketch is None and dump.sketch_source is None and dump.n_params == 3240
    manifest = json.loads((tmp_path / "full" / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and "sketch" not in manifest


def test_writer_resumes_with_the_same_sketch_only(tmp_path):
    sketch = Sketch(size=64, seed=1)
    write(tmp_path / "d", sketch, runs=16, stop=8)
    assert ParameterDump.open(tmp_path / "d").written_runs == 8
    with pytest.raises(DumpError, match="sketch"):
        write(tmp_path / "d", Sketch(size=64, seed=2), runs=16)
    with DumpWriter(tmp_path / "d", clients=["x", "y"], checkpoints=[0, 1], runs=16, chunk_size=8,
                    sketch=sketch) as w:
        assert w.missing_runs() == list(range(8, 16))
        for r in w.missing_runs():
            for c in ("x", "y"):
                for t in (0, 1):
                    w.record(run=r, client=c, checkpoint=t,
                             params={n: np.full(s, r, dtype=np.float32) for n, s in SHAPES})
    assert ParameterDump.open(tmp_path / "d").verify() == 16


def test_bad_sketch_arguments_are_named(tmp_path):
    with pytest.raises(TypeError, match="`sketch`"):
        DumpWriter(tmp_path / "d", clients=["x"], checkpoints=[0], runs=2, sketch={"size": 8})


@pytest.mark.parametrize("change, match", [
    (lambda s: s.update(size=64), "sizes must be"),
    (lambda s: s.update(kind="srht"), "`kind`"),
    (lambda s: s["tensors"].pop(), "layout must be"),
    (lambda s: s.update(seed="1"), "`seed`"),
])
def test_a_damaged_sketch_record_is_named(tmp_path, change, match):
    write(tmp_path / "d", Sketch(size=128), runs=8)
    path = tmp_path / "d" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest["sketch"])
    path.write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=match):
        ParameterDump.open(tmp_path / "d")


def test_a_sketch_needs_format_version_2(tmp_path):
    write(tmp_path / "d", Sketch(size=128), runs=8)
    path = tmp_path / "d" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["format_version"] = 1  # what an older mianalysis would read as a dump of parameters
    path.write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match="format_version"):
        ParameterDump.open(tmp_path / "d")


def test_analysis_rows_of_a_sketched_dump_say_what_they_measure(tmp_path):
    write(tmp_path / "d", Sketch(size=128, seed=1))
    table = analyze(tmp_path / "d", estimators=["gaussian"], metrics=["euclidean", "manhattan", "cosine_update"],
                    by="layer", verify=False)
    rows = {(r["layer"], r["quantity"]): r["note"] for r in table.rows if r["checkpoint"] == 1}
    mi = rows["a.weight[sketch]", "mi_gaussian"]
    assert "sketch of the parameters (sparse-sign, 128 rows per tensor, nnz 4, seed 1): MI of projections, at most " \
           "the parameters' (data processing)" in mi
    assert "within the JL error of the parameters' distances" in rows["b.weight[sketch]", "euclidean"]
    assert f"+-{100 * jl_error(128):.2g} %" in rows["b.weight[sketch]", "euclidean"]
    assert "not the parameters' manhattan distance" in rows["b.weight[sketch]", "manhattan"]
    assert "cosine of projected updates" in rows["b.weight[sketch]", "cosine_update"]
    assert "sketch" not in rows["a.bias", "mi_gaussian"] + rows["a.bias", "euclidean"]  # kept whole: exact


def test_analysis_of_a_full_dump_has_no_sketch_note(tmp_path):
    write(tmp_path / "full", None, runs=8)
    table = analyze(tmp_path / "full", estimators=["gaussian"], metrics=["euclidean"], layer="a.bias", verify=False)
    assert not any("sketch" in r["note"] for r in table.rows)


# ---------------------------------------------------------------------------- ModuleTask
def test_module_task_records_the_sketch_of_what_it_would_record(tmp_path):
    x = torch.linspace(-1, 1, 16)[:, None]
    data = [(x, 2 * x), (x, -x)]

    def model():
        return torch.nn.Sequential(torch.nn.Linear(1, 40), torch.nn.Tanh(), torch.nn.Linear(40, 1))

    sketch = Sketch(size=16, seed=1)
    loss = torch.nn.functional.mse_loss
    sketched = ModuleTask(model, data, loss, lr=0.1, batch_size=8, gradients="summed", sketch=sketch)
    assert sketched.settings["sketch"] == sketch.to_json() and sketched.parameter_shapes()[0] == ("0.weight", (40, 1))
    assert "sketch" not in ModuleTask(model, data, loss, lr=0.1, batch_size=8).settings
    dump = ParameterSampler(sketched, chunk_size=3, progress=False).sample(5, tmp_path / "s")
    full = ParameterSampler(ModuleTask(model, data, loss, lr=0.1, batch_size=8, gradients="summed"), chunk_size=3,
                            progress=False).sample(5, tmp_path / "f")
    assert dump.sketch == sketch and dump.sketch_source == [(e.name, e.shape) for e in full.layout]
    assert [e.name for e in dump.layout] == ["0.weight[sketch]", "0.bias[sketch]", "2.weight[sketch]", "2.bias"]
    for c in dump.clients:
        for t in range(len(dump.checkpoints)):
            assert np.array_equal(dump.samples(c, index=t), sketch.apply_vector(full.samples(c, index=t),
                                                                                dump.sketch_source))
    with pytest.raises(TypeError, match="`sketch`"):
        ModuleTask(model, data, loss, sketch=16)
