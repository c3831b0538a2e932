"""mianalysis.dumps.import_checkpoints: common checkpoint dicts are read, and every file
that is unreadable, extra, ambiguous or inconsistent with the others is named.

Layout: ROOT/CLIENT/CHECKPOINT/RUN.pt with tiny tensors. Nothing is written at the dump's
path when the import fails.
"""

import re

import numpy as np
import pytest

from mianalysis.dumps import DumpError, ParameterDump, import_checkpoints

torch = pytest.importorskip("torch")


def state(client, t, r):
    return {"fc.weight": torch.full((2, 2), float(100 * t + 10 * r)) + (client == "b"),
            "fc.bias": torch.tensor([float(r), -1.0]), "steps": torch.tensor(7)}


def flat(client, t, r):
    s = state(client, t, r)
    return np.concatenate([s["fc.weight"].reshape(-1).numpy(), s["fc.bias"].numpy()])


def make_root(tmp_path, wrap=lambda sd: sd, clients=("a", "b"), checkpoints=(0, 10), runs=("0", "1", "2")):
    root = tmp_path / "ckpts"
    for c in clients:
        for t in checkpoints:
            (root / c / str(t)).mkdir(parents=True)
            for r in runs:
                torch.save(wrap(state(c, t, int(r))), root / c / str(t) / f"{r}.pt")
    return root


def expect_error(tmp_path, root, pattern, **kwargs):
    with pytest.raises(DumpError) as info:
        import_checkpoints(root, tmp_path / "dump", **kwargs)
    message = str(info.value)
    assert re.search(pattern, message), message
    assert "\n" not in message
    assert not (tmp_path / "dump").exists()
    return message


def assert_imported(dump):
    assert dump.clients == ["a", "b"] and dump.checkpoints == [0, 10] and dump.n_params == 6
    assert [e.name for e in dump.layout] == ["fc.weight", "fc.bias"]
    for c in ("a", "b"):
        for t, it in enumerate((0, 10)):
            for r in range(3):
                np.testing.assert_array_equal(dump.samples(c, index=t)[r], flat(c, it, r))


# ------------------------------------------------------------------ checkpoint dicts
@pytest.mark.parametrize("wrap, key", [
    (lambda sd: sd, None),
    (lambda sd: {"model": sd, "epoch": 3, "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}}, "model"),
    (lambda sd: {"state_dict": sd, "loss": torch.tensor(0.5)}, "state_dict"),
    (lambda sd: {"model_state_dict": sd, "optimizer_state_dict": {"state": {}, "param_groups": []}, "step": 5},
     "model_state_dict"),
], ids=["state_dict", "model", "state_dict-key", "model_state_dict"])
def test_common_checkpoint_dicts_are_read(tmp_path, wrap, key):
    dump = import_checkpoints(make_root(tmp_path, wrap), tmp_path / "dump")
    assert_imported(dump)
    assert dump.meta["state_dict_key"] == key


def test_several_state_dicts_need_key(tmp_path):
    root = make_root(tmp_path, lambda sd: {"model": sd, "ema": {k: v * 2 for k, v in sd.items()}, "epoch": 1})
    expect_error(tmp_path, root, r"0\.pt holds several state dicts, under keys \['model', 'ema'\]; "
                                 r"choose one with key= \(keys in the file: \['model', 'ema', 'epoch'\]\)")
    assert_imported(import_checkpoints(root, tmp_path / "dump", key="model"))
    ema = import_checkpoints(root, tmp_path / "ema", key="ema")
    np.testing.assert_array_equal(ema.samples("b", index=1)[2], 2 * flat("b", 10, 2))


def test_no_state_dict_lists_the_keys(tmp_path):
    root = make_root(tmp_path, lambda sd: {"weights": list(sd), "epoch": 1})
    expect_error(tmp_path, root, r"0\.pt holds no state dict \(a dict of floating-point tensors\); its keys: \['weights', 'epoch'\]")


def test_key_that_is_not_there_lists_the_keys(tmp_path):
    root = make_root(tmp_path, lambda sd: {"model": sd, "epoch": 1})
    expect_error(tmp_path, root, r"0\.pt has no key 'net'; its keys: \['model', 'epoch'\]", key="net")
    expect_error(tmp_path, root, r"0\.pt\['epoch'\] is not a state dict", key="epoch")


def test_state_dict_under_different_keys_is_refused(tmp_path):
    root = make_root(tmp_path, lambda sd: {"model": sd})
    torch.save({"state_dict": state("b", 10, 1)}, root / "b" / "10" / "1.pt")
    expect_error(tmp_path, root, r"b/10/1\.pt holds its state dict under 'state_dict'; .*a/0/0\.pt under 'model'")


def test_a_pickled_module_is_named(tmp_path):
    root = make_root(tmp_path)
    torch.save(torch.nn.Linear(2, 2), root / "a" / "10" / "2.pt")
    expect_error(tmp_path, root, r"a/10/2\.pt could not be read by torch\.load \(\w+")


def test_no_floating_point_tensors(tmp_path):
    root = make_root(tmp_path, lambda sd: {"steps": sd["steps"]})
    expect_error(tmp_path, root, r"a/0/0\.pt holds no state dict \(a dict of floating-point tensors\); its keys: "
                                 r"\['steps'\]")
    root = make_root(tmp_path / "empty", lambda sd: {"w": torch.zeros(0, 2), "steps": sd["steps"]})
    expect_error(tmp_path, root, r"a/0/0\.pt holds no floating-point values \(tensors: \[\('w', \(0, 2\)\)\]\)")


# ------------------------------------------------------------------ unreadable files
def test_truncated_file_is_named(tmp_path):
    root = make_root(tmp_path)
    f = root / "b" / "10" / "1.pt"
    f.write_bytes(f.read_bytes()[:100])
    expect_error(tmp_path, root, r"b/10/1\.pt could not be read by torch\.load \(\w+: .*\): truncated, damaged")


@pytest.mark.parametrize("content", [b"", b"not a pickle at all\n\x00\x01"], ids=["empty", "garbage"])
def test_unreadable_file_is_named(tmp_path, content):
    root = make_root(tmp_path)
    (root / "a" / "0" / "2.pt").write_bytes(content)
    expect_error(tmp_path, root, r"a/0/2\.pt could not be read by torch\.load")


# ------------------------------------------------------------------ extra, ambiguous, missing files
def test_two_files_for_one_run(tmp_path):
    root = make_root(tmp_path, runs=("2", "10"))
    torch.save(state("a", 0, 10), root / "a" / "0" / "010.pt")
    expect_error(tmp_path, root, r"a/0/010\.pt and .*a/0/10\.pt both name run 10")


def test_two_folders_for_one_checkpoint(tmp_path):
    root = make_root(tmp_path)
    (root / "b" / "010").mkdir()
    expect_error(tmp_path, root, r"b/010 and .*b/10 both name checkpoint 10")


def test_runs_are_ordered_by_number(tmp_path):
    root = make_root(tmp_path, runs=("10", "2", "1"))
    dump = import_checkpoints(root, tmp_path / "dump")
    assert dump.meta["runs"] == ["1.pt", "2.pt", "10.pt"]
    np.testing.assert_array_equal(dump.samples("a", index=1)[2], flat("a", 10, 10))


def test_non_pt_file_is_named(tmp_path):
    root = make_root(tmp_path)
    (root / "b" / "0" / "notes.txt").write_text("lr 0.1")
    expect_error(tmp_path, root, r"b/0/notes\.txt is not a \.pt file")


def test_folder_inside_a_checkpoint_is_named(tmp_path):
    root = make_root(tmp_path)
    (root / "b" / "0" / "old").mkdir()
    expect_error(tmp_path, root, r"b/0/old is a folder")


def test_stray_files_in_root_and_client_folders(tmp_path):
    root = make_root(tmp_path)
    (root / "README").write_text("x")
    expect_error(tmp_path, root, r"ckpts/README is not a client folder")
    (root / "README").unlink()
    (root / "a" / "log.txt").write_text("x")
    expect_error(tmp_path, root, r"a/log\.txt is not a checkpoint folder")


def test_non_integer_checkpoint_folder_is_named(tmp_path):
    root = make_root(tmp_path)
    (root / "b" / "final").mkdir()
    expect_error(tmp_path, root, r"b/final: checkpoint folder 'final' is not an integer iteration")


def test_extra_run_in_one_folder(tmp_path):
    root = make_root(tmp_path)
    torch.save(state("b", 10, 3), root / "b" / "10" / "3.pt")
    expect_error(tmp_path, root, r"b/10/3\.pt has no counterpart in .*a/0")


def test_missing_run_in_one_folder(tmp_path):
    root = make_root(tmp_path)
    (root / "b" / "10" / "1.pt").unlink()
    expect_error(tmp_path, root, r"b/10/1\.pt is missing \(.*a/0 has it")


def test_missing_checkpoint_in_one_client(tmp_path):
    root = make_root(tmp_path)
    for f in (root / "b" / "10").iterdir():
        f.unlink()
    (root / "b" / "10").rmdir()
    expect_error(tmp_path, root, r"b has checkpoints \[0\]; .*a has \[0, 10\]")


# ------------------------------------------------------------------ inconsistent state dicts
@pytest.mark.parametrize("change, pattern", [
    (lambda sd: sd.pop("fc.bias"), r"lacks \['fc.bias'\]"),
    (lambda sd: sd.__setitem__("fc2.weight", torch.zeros(3)), r"has extra tensors \['fc2.weight'\]"),
    (lambda sd: sd.__setitem__("fc.bias", torch.zeros(3)), r"tensor 'fc.bias' has shape \(3,\), not \(2,\)"),
    (lambda sd: sd.move_to_end("fc.weight") if hasattr(sd, "move_to_end") else None, r"in another order"),
], ids=["missing-tensor", "extra-tensor", "shape", "order"])
def test_different_tensors_are_named(tmp_path, change, pattern):
    from collections import OrderedDict

    root = make_root(tmp_path)
    sd = OrderedDict(state("b", 0, 2))
    change(sd)
    torch.save(sd, root / "b" / "0" / "2.pt")
    expect_error(tmp_path, root, r"b/0/2\.pt: .*" + pattern + r".*, compared with .*a/0/0\.pt")
