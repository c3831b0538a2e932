"""An edited manifest is a one-line damage report naming the file and the field.

Every edit below is something a person (or a broken tool) could do to manifest.json.
ParameterDump.open must answer each with a DumpError whose message names manifest.json
and the field, never a KeyError/TypeError/OverflowError or an attempt to map or allocate
more than the files hold; `mianalysis verify` and `mianalysis analyze` print that message
as one line and exit 2.
"""

import json
import re

import numpy as np
import pytest

from mianalysis.cli import main
from mianalysis.dumps import DumpError, ParameterDump

HEX = "0" * 64


@pytest.fixture
def dump_path(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"a": rng.standard_normal((3, 10, 5)), "b": rng.standard_normal((3, 10, 5))}
    metrics = {c: {"loss": np.arange(30.0).reshape(3, 10)} for c in arrays}
    ParameterDump.from_arrays(tmp_path / "d", arrays, checkpoints=[0, 2, 4], layout=[("w", (2, 2)), ("b", (1,))],
                              metrics=metrics, meta={"source": "test"})
    return tmp_path / "d"


class Replacement(list):
    """What an edit writes instead of the manifest object."""


def edit(path, change):
    """Apply `change` (edits the manifest dict in place, or returns a Replacement to write instead)."""
    m = path / "manifest.json"
    manifest = json.loads(m.read_text())
    replaced = change(manifest)
    replaced = replaced if isinstance(replaced, Replacement) else None  # e.g. a dict.pop's value is not one
    m.write_text(json.dumps(manifest if replaced is None else replaced))  # NaN/Infinity written as JSON allows


def _set(key, value):
    return lambda m: m.__setitem__(key, value)


def _del(key):
    return lambda m: m.pop(key)


def _layout(i, key, value):
    return lambda m: m["layout"][i].__setitem__(key, value)


def _chunk(key, value):
    return lambda m: m["chunks"][0].__setitem__(key, value)


def _split_chunks(second_start):
    def change(m):
        sha = m["chunks"][0]["sha256"]
        m["chunks"] = [{"start": 0, "stop": 5, "sha256": sha}, {"start": second_start, "stop": 10, "sha256": sha}]
    return change


# (id, edit, field named in the message)
EDITS = [
    ("not-an-object", lambda m: Replacement([m]), "manifest"),
    ("missing-layout", _del("layout"), "layout"),
    ("missing-chunks", _del("chunks"), "chunks"),
    ("version-string", _set("format_version", "1"), "format_version"),
    ("version-float", _set("format_version", 1.0), "format_version"),
    ("version-bool", _set("format_version", True), "format_version"),
    ("version-zero", _set("format_version", 0), "format_version"),
    ("meta-list", _set("meta", []), "meta"),
    ("clients-empty", _set("clients", []), "clients"),
    ("clients-null", _set("clients", None), "clients"),
    ("clients-duplicate", _set("clients", ["a", "a"]), "clients"),
    ("clients-not-strings", _set("clients", ["a", 5]), "clients"),
    ("checkpoints-empty", _set("checkpoints", []), "checkpoints"),
    ("checkpoints-string", _set("checkpoints", [0, "2", 4]), "checkpoints"),
    ("checkpoints-float", _set("checkpoints", [0, 2.5, 4]), "checkpoints"),
    ("checkpoints-not-list", _set("checkpoints", 3), "checkpoints"),
    ("n_runs-nan", _set("n_runs", float("nan")), "n_runs"),
    ("n_runs-inf", _set("n_runs", float("inf")), "n_runs"),
    ("n_runs-float", _set("n_runs", 10.0), "n_runs"),
    ("n_runs-negative", _set("n_runs", -10), "n_runs"),
    ("n_runs-string", _set("n_runs", "10"), "n_runs"),
    ("n_params-zero", _set("n_params", 0), "n_params"),
    ("n_params-nan", _set("n_params", float("nan")), "n_params"),
    ("layout-empty", _set("layout", []), "layout"),
    ("layout-entry-not-object", lambda m: m["layout"].__setitem__(0, "w"), "layout"),
    ("layout-missing-shape", lambda m: m["layout"][0].pop("shape"), "layout"),
    ("layout-negative-shape", _layout(0, "shape", [-2, -2]), "layout"),
    ("layout-float-shape", _layout(0, "shape", [2.5, 2]), "layout"),
    ("layout-shape-string", _layout(0, "shape", "22"), "layout"),
    ("layout-float-offset", _layout(1, "offset", 4.0), "layout"),
    ("layout-negative-offset", _layout(0, "offset", -1), "layout"),
    ("layout-overlap", _layout(1, "offset", 2), "layout"),
    ("layout-gap", _layout(1, "offset", 5), "layout"),
    ("layout-name-not-string", _layout(0, "name", 3), "layout"),
    ("layout-duplicate-names", _layout(1, "name", "w"), "layout"),
    ("layout-size-mismatch", _layout(0, "size", 7), "layout"),
    ("layout-not-covering", lambda m: m["layout"].pop(), "layout"),
    ("layout-huge-shape", _layout(0, "shape", [10**30, 2]), "layout"),
    ("metrics-string", _set("metrics", "loss"), "metrics"),
    ("metrics-not-strings", _set("metrics", [1]), "metrics"),
    ("metrics-duplicate", _set("metrics", ["loss", "loss"]), "metrics"),
    ("chunks-null", _set("chunks", None), "chunks"),
    ("chunk-not-object", lambda m: m["chunks"].__setitem__(0, "0-10"), "chunks"),
    ("chunk-missing-stop", lambda m: m["chunks"][0].pop("stop"), "chunks"),
    ("chunk-missing-sha256", lambda m: m["chunks"][0].pop("sha256"), "chunks"),
    ("chunk-string-start", _chunk("start", "0"), "chunks"),
    ("chunk-float-stop", _chunk("stop", 10.0), "chunks"),
    ("chunk-beyond-n_runs", _chunk("stop", 11), "chunks"),
    ("chunk-empty", _chunk("stop", 0), "chunks"),
    ("chunks-overlap", _split_chunks(4), "chunks"),
    ("chunks-overlap-out-of-order", lambda m: (_split_chunks(4)(m), m["chunks"].reverse()), "chunks"),
    ("chunk-negative-start", _chunk("start", -1), "chunks"),
    ("checksum-not-hex", lambda m: m["chunks"][0]["sha256"].__setitem__("a", "z" * 64), "chunks"),
    ("checksum-short", lambda m: m["chunks"][0]["sha256"].__setitem__("a", "abc"), "chunks"),
    ("checksum-missing-client", lambda m: m["chunks"][0]["sha256"].pop("b"), "chunks"),
    ("checksum-unknown-client", lambda m: m["chunks"][0]["sha256"].__setitem__("zz", HEX), "chunks"),
    ("dtype-float64", _set("dtype", "<f8"), "dtype"),
    ("provenance-string", _set("provenance", "me"), "provenance"),
]


@pytest.mark.parametrize("change, field", [pytest.param(c, f, id=i) for i, c, f in EDITS])
def test_edited_manifest_is_a_damage_report(dump_path, change, field):
    edit(dump_path, change)
    with pytest.raises(DumpError) as info:
        ParameterDump.open(dump_path)
    message = str(info.value)
    assert "manifest.json" in message and "\n" not in message
    assert re.search(rf"`{field}\b|\b{field}\b", message), message
    assert not isinstance(info.value.__cause__, (KeyError, AttributeError, TypeError, OverflowError)), message


# Sizes the files cannot hold: refused from the file sizes, before any memory map or allocation.
SIZES = [
    ("n_runs-huge", lambda m: m.__setitem__("n_runs", 10**15), r"\(3, 1000000000000000, 5\)"),
    ("n_runs-beyond-int64", lambda m: m.__setitem__("n_runs", 2**64 + 10), r"\(3, 18446744073709551626, 5\)"),
    ("n_params-huge", lambda m: (m.__setitem__("n_params", 10**20 + 1),
                                 m["layout"][0].update(shape=[10**10, 10**10], size=10**20),
                                 m["layout"][1].update(offset=10**20)) and None, r"\(3, 10, 100000000000000000001\)"),
    ("checkpoints-more", lambda m: m["checkpoints"].append(99), r"\(4, 10, 5\)"),
]


@pytest.mark.parametrize("change, shape", [pytest.param(c, s, id=i) for i, c, s in SIZES])
def test_impossible_sizes_are_refused_before_mapping(dump_path, change, shape, monkeypatch):
    edit(dump_path, change)

    def no_map(*args, **kwargs):
        raise AssertionError("memory-mapped a file whose size does not match the manifest")

    monkeypatch.setattr(np, "memmap", no_map)
    with pytest.raises(DumpError) as info:
        ParameterDump.open(dump_path)
    message = str(info.value)
    assert re.search(r"client_0.f32 has \d+ bytes; the manifest's shape " + shape, message), message
    assert "n_runs" in message and "checkpoints" in message and "n_params" in message  # the fields behind the shape


def test_valid_manifest_still_opens(dump_path):
    dump = ParameterDump.open(dump_path)
    assert dump.verify() == 10 and dump.clients == ["a", "b"]


@pytest.mark.parametrize("chunks, completed, missing", [
    ([(6, 10)], 0, [(0, 6)]),                 # a gap before: out-of-order chunks written first
    ([(6, 10), (0, 5)], 5, [(5, 6)]),         # listed out of order, a gap between
    ([(0, 5), (5, 10)], 10, []),
])
def test_chunk_lists_with_gaps_or_out_of_order_open(dump_path, chunks, completed, missing):
    sha = json.loads((dump_path / "manifest.json").read_text())["chunks"][0]["sha256"]
    edit(dump_path, lambda m: m.__setitem__("chunks", [{"start": a, "stop": b, "sha256": sha} for a, b in chunks]))
    dump = ParameterDump.open(dump_path)
    assert dump.completed_runs == completed and dump.missing_ranges() == missing
    assert dump.written_chunks() == sorted(chunks)


CLI_CASES = [
    ("chunks-null", _set("chunks", None), "chunks"),
    ("clients-empty", _set("clients", []), "clients"),
    ("layout-overlap", _layout(1, "offset", 2), "layout"),
    ("n_runs-nan", _set("n_runs", float("nan")), "n_runs"),
    ("chunk-missing-stop", lambda m: m["chunks"][0].pop("stop"), "chunks"),
]


@pytest.mark.parametrize("command", ["verify", "analyze"])
@pytest.mark.parametrize("change, field", [pytest.param(c, f, id=i) for i, c, f in CLI_CASES])
def test_cli_reports_an_edited_manifest_in_one_line(dump_path, tmp_path, capsys, change, field, command):
    edit(dump_path, change)
    args = [command, str(dump_path)] + (["--out", str(tmp_path / "t.csv"), "--no-progress"] if command == "analyze" else [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"mianalysis {command}: error: ") and captured.err.count("\n") == 1, captured.err
    assert "manifest.json" in captured.err and field in captured.err and "Traceback" not in captured.err
    assert not (tmp_path / "t.csv").exists()
