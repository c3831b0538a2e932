"""`mianalysis import` and import_checkpoints: ROOT/CLIENT/CHECKPOINT/RUN.{pt,safetensors}
read chunk by chunk through the writer, the same dump whatever the chunk size, resumed after
a failure, --layer, and every damaged file named."""

import json
import re
import sys

import numpy as np
import pytest

from mianalysis import ParameterDump
from mianalysis.cli import main
from mianalysis.dumps import DumpError

torch = pytest.importorskip("torch")
import mianalysis.dumps.importers as dump_import  # noqa: E402
from mianalysis.dumps.importers import import_checkpoints, scan_checkpoints  # noqa: E402

CLIENTS, CHECKPOINTS, RUNS = ("a", "b"), (0, 10, 20), 7


def state(client, t, r):
    g = torch.Generator().manual_seed(1000 * t + 10 * r + (client == "b"))
    return {"fc.weight": torch.randn(3, 2, generator=g), "fc.bias": torch.randn(3, generator=g),
            "bn.running_mean": torch.randn(3, generator=g), "bn.num_batches_tracked": torch.tensor(4),
            "head.weight": torch.randn(1, 3, generator=g)}


def flat(client, t, r, names=("fc.weight", "fc.bias", "bn.running_mean", "head.weight")):
    s = state(client, t, r)
    return np.concatenate([s[n].reshape(-1).numpy() for n in names])


def make_root(tmp_path, fmt="pt"):
    root = tmp_path / f"ckpts_{fmt}"
    for c in CLIENTS:
        for t in CHECKPOINTS:
            (root / c / str(t)).mkdir(parents=True)
            for r in range(RUNS):
                file = root / c / str(t) / f"{r}.{fmt}"
                if fmt == "pt":
                    torch.save(state(c, t, r), file)
                else:
                    from safetensors.torch import save_file

                    save_file(state(c, t, r), str(file))
    return root


def files(path):
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.f32"))}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_root(tmp_path_factory.mktemp("root"))


@pytest.fixture(scope="module")
def reference(root, tmp_path_factory):
    return import_checkpoints(root, tmp_path_factory.mktemp("ref") / "d")


def test_the_import_holds_the_files_values(reference):
    assert reference.clients == list(CLIENTS) and reference.checkpoints == list(CHECKPOINTS)
    assert [e.name for e in reference.layout] == ["fc.weight", "fc.bias", "bn.running_mean", "head.weight"]
    for c in CLIENTS:
        for i, t in enumerate(CHECKPOINTS):
            for r in range(RUNS):
                np.testing.assert_array_equal(reference.samples(c, index=i)[r], flat(c, t, r))
    assert reference.written_chunks() == [(0, RUNS)] and reference.meta["state_dict_key"] is None


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_any_chunk_size_gives_the_same_bytes(root, reference, tmp_path, chunk_size):
    dump = import_checkpoints(root, tmp_path / "d", chunk_size=chunk_size, progress=False)
    assert files(tmp_path / "d") == files(reference.path) and dump.verify() == RUNS
    cut = list(range(0, RUNS, chunk_size)) + [RUNS]
    assert dump.written_chunks() == list(zip(cut[:-1], cut[1:]))


def test_files_are_read_one_chunk_at_a_time_and_a_failed_import_resumes(root, reference, tmp_path, monkeypatch):
    """A damaged file in run 5: runs 0-4 are in the dump (chunks of 2), and the rerun reads only runs 4-6."""
    import shutil

    work = tmp_path / "root"
    shutil.copytree(root, work)
    bad = work / "b" / "10" / "5.pt"
    good = bad.read_bytes()
    bad.write_bytes(good[:50])
    read = []
    load = dump_import.load_state_dict
    monkeypatch.setattr(dump_import, "load_state_dict", lambda file, key=None: (read.append(file), load(file, key))[1])
    with pytest.raises(DumpError, match=r"b/10/5\.pt could not be read by torch\.load"):
        import_checkpoints(work, tmp_path / "d", chunk_size=2, progress=False)
    partial = ParameterDump.open(tmp_path / "d")
    assert partial.written_chunks() == [(0, 2), (2, 4)] and partial.verify() == 4
    assert len(read) == 1 + 4 * 6 + 1 + 6 + 4  # the first file, runs 0-3, run 4 and run 5 up to the damaged file
    bad.write_bytes(good)
    read.clear()
    dump = import_checkpoints(work, tmp_path / "d", chunk_size=2, progress=False)
    assert len(read) == 1 + 3 * 6 and dump.complete
    assert files(tmp_path / "d") == files(reference.path)


def test_layer_keeps_the_selected_tensors(root, tmp_path):
    dump = import_checkpoints(root, tmp_path / "d", layer=["head", "fc.bias"], progress=False)
    assert [(e.name, e.shape) for e in dump.layout] == [("fc.bias", (3,)), ("head.weight", (1, 3))]
    np.testing.assert_array_equal(dump.samples("b", index=2)[6], flat("b", 20, 6, names=("fc.bias", "head.weight")))
    assert dump.meta["layer"] == ["head", "fc.bias"]
    with pytest.raises(DumpError, match=r"0\.pt: `layer` 'conv' is not in the layout; tensors: \['fc.weight'"):
        import_checkpoints(root, tmp_path / "e", layer="conv", progress=False)
    assert not (tmp_path / "e").exists()


def test_safetensors_files_import_as_pt_files(tmp_path, reference):
    pytest.importorskip("safetensors")
    dump = import_checkpoints(make_root(tmp_path, "safetensors"), tmp_path / "d", chunk_size=3, progress=False)
    # A .safetensors file keeps no order of its tensors: they come sorted by name.
    assert [e.name for e in dump.layout] == sorted(e.name for e in reference.layout)
    for e in reference.layout:
        for t in range(3):
            np.testing.assert_array_equal(dump.samples("b", index=t, layer=e.name), reference.samples("b", index=t, layer=e.name))
    assert dump.meta["runs"] == [f"{r}.safetensors" for r in range(RUNS)]


def test_damaged_safetensors_and_key_are_named(tmp_path):
    pytest.importorskip("safetensors")
    root = make_root(tmp_path, "safetensors")
    with pytest.raises(DumpError, match=r"0\.safetensors is a \.safetensors file: .* `key` \('model'\) does not apply"):
        import_checkpoints(root, tmp_path / "d", key="model", progress=False)
    f = root / "a" / "20" / "3.safetensors"
    f.write_bytes(f.read_bytes()[:-7])
    with pytest.raises(DumpError, match=r"a/20/3\.safetensors could not be read by safetensors \(\w+"):
        import_checkpoints(root, tmp_path / "d", progress=False)


def test_without_the_safetensors_package_the_file_is_named(tmp_path, monkeypatch):
    root = tmp_path / "r"
    (root / "a" / "0").mkdir(parents=True)
    (root / "a" / "0" / "0.safetensors").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)  # import fails
    with pytest.raises(DumpError, match=r"0\.safetensors: reading \.safetensors files needs the safetensors package"):
        import_checkpoints(root, tmp_path / "d", progress=False)


def test_pt_and_safetensors_of_one_run_are_refused(tmp_path):
    root = tmp_path / "r"
    (root / "a" / "0").mkdir(parents=True)
    torch.save(state("a", 0, 0), root / "a" / "0" / "1.pt")
    (root / "a" / "0" / "1.safetensors").write_bytes(b"x")
    with pytest.raises(DumpError, match=r"1\.pt and .*1\.safetensors both name run 1"):
        scan_checkpoints(root)


@pytest.mark.parametrize("value, what", [(float("nan"), "1 NaN and 0 inf"), (float("inf"), "0 NaN and 1 inf")])
def test_non_finite_values_are_named_with_their_file(tmp_path, value, what):
    root = make_root(tmp_path)
    s = state("b", 20, 4)
    s["fc.bias"][1] = value
    torch.save(s, root / "b" / "20" / "4.pt")
    with pytest.raises(DumpError, match=rf"b/20/4\.pt holds non-finite values: {what} \(the first in tensor "
                                        r"'fc.bias', column 7\)"):
        import_checkpoints(root, tmp_path / "d", chunk_size=2, progress=False)
    assert ParameterDump.open(tmp_path / "d").written_chunks() == [(0, 2), (2, 4)]  # the chunks before stay


def test_other_shapes_in_a_later_chunk_are_named(tmp_path):
    root = make_root(tmp_path)
    s = state("a", 10, 6)
    s["head.weight"] = torch.zeros(2, 3)
    torch.save(s, root / "a" / "10" / "6.pt")
    with pytest.raises(DumpError, match=r"a/10/6\.pt: tensor 'head.weight' has shape \(2, 3\), not \(1, 3\), "
                                        r"compared with .*a/0/0\.pt"):
        import_checkpoints(root, tmp_path / "d", chunk_size=3, progress=False)
    assert ParameterDump.open(tmp_path / "d").written_runs == 6


def test_a_different_import_into_the_same_dump_is_refused(root, tmp_path):
    import_checkpoints(root, tmp_path / "d", chunk_size=3, progress=False)
    before = (tmp_path / "d" / "manifest.json").read_bytes()
    with pytest.raises(DumpError, match=r"holds a dump with other settings .*'layer': \(None, 'fc'\)"):
        import_checkpoints(root, tmp_path / "d", layer="fc", progress=False)
    assert (tmp_path / "d" / "manifest.json").read_bytes() == before


# ------------------------------------------------------------------ the command
def test_cli_imports_resumes_and_reports_errors_in_one_line(root, reference, tmp_path, capsys):
    out = tmp_path / "d"
    assert main(["import", str(root), "--out", str(out), "--chunk-size", "2", "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("wrote ParameterDump(") and files(out) == files(reference.path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert main(["import", str(root), "--out", str(out), "--chunk-size", "2", "--no-progress"]) == 0  # nothing left
    assert json.loads((out / "manifest.json").read_text())["chunks"] == manifest["chunks"]
    capsys.readouterr()
    assert main(["import", str(root), "--out", str(tmp_path / "e"), "--layer", "fc", "--layer", "head",
                 "--no-progress"]) == 0
    assert [e.name for e in ParameterDump.open(tmp_path / "e").layout] == ["fc.weight", "fc.bias", "head.weight"]
    capsys.readouterr()
    assert main(["import", str(tmp_path / "nowhere"), "--out", str(tmp_path / "f"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"mianalysis import: error: .*nowhere is not a folder\n", err) and not (tmp_path / "f").exists()
    assert main(["import", str(root), "--out", str(tmp_path / "g"), "--chunk-size", "0", "--no-progress"]) == 2
    assert "`chunk_size` must be >= 1; got 0" in capsys.readouterr().err
