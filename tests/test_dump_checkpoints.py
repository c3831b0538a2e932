"""The checkpoints of a dump are unique integers wherever they enter one (issue 50, item 3):
``ParameterDump.from_arrays``, ``ParameterDump.create``, ``DumpWriter`` (and so the
importers, which write through it) and a manifest read from disk. A repeated checkpoint
would make ``samples(iteration=t)`` read the first of the two and report it twice; a
non-integral one (0.4) used to be rounded to another iteration."""

import json
import re

import numpy as np
import pytest

from mianalysis.dumps import DumpError, DumpWriter, ParameterDump, layout_from_shapes
from mianalysis.dumps.manifest import check_checkpoint, check_checkpoints


def _from_arrays(path, checkpoints):
    samples = np.arange(len(checkpoints) * 3 * 2, dtype=np.float32).reshape(len(checkpoints), 3, 2)
    return ParameterDump.from_arrays(path, {"a": samples, "b": -samples}, checkpoints=checkpoints)


def _create(path, checkpoints):
    return ParameterDump.create(path, clients=["a"], checkpoints=checkpoints, n_runs=2,
                                layout=layout_from_shapes([("p", (2,))]))


def _writer(path, checkpoints):
    return DumpWriter(path, clients=["a"], checkpoints=checkpoints, runs=2)


WRITERS = [_from_arrays, _create, _writer]


# ---------------------------------------------------------------------- repeats
@pytest.mark.parametrize("make", WRITERS, ids=lambda f: f.__name__)
def test_repeated_checkpoints_are_refused_naming_the_repeated_value(tmp_path, make):
    with pytest.raises(ValueError, match=r"`checkpoints` must be unique; got \[0, 5, 0\] \(0 more than once\)"):
        make(tmp_path / "d", [0, 5, 0])
    assert not (tmp_path / "d").exists()


def test_from_arrays_refuses_the_repeat_that_read_the_first_checkpoint_twice(tmp_path):
    # The case: checkpoints=[0, 0] was accepted and samples(iteration=0) read index 0 only.
    with pytest.raises(ValueError, match=r"`checkpoints` must be unique; got \[0, 0\] \(0 more than once\)"):
        _from_arrays(tmp_path / "d", [0, 0])
    assert not (tmp_path / "d").exists()


def test_a_manifest_with_a_repeated_checkpoint_is_damaged(tmp_path):
    _from_arrays(tmp_path / "d", [0, 5])
    manifest_path = tmp_path / "d" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["checkpoints"] = [5, 5]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(DumpError, match=r"manifest.json is damaged: `checkpoints` must be unique iterations; "
                                        r"got '\[5\] more than once'"):
        ParameterDump.open(tmp_path / "d")


# ---------------------------------------------------------------------- non-integral values
@pytest.mark.parametrize("make", WRITERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", [0.4, np.float32(2.5), float("nan"), float("inf")])
def test_non_integral_checkpoints_are_refused_naming_the_value(tmp_path, make, bad):
    with pytest.raises(ValueError, match=rf"`checkpoints` must be integers .*got {re.escape(repr(bad))} at "
                                         r"checkpoints\[1\]"):
        make(tmp_path / "d", [0, bad])
    assert not (tmp_path / "d").exists()


def test_from_arrays_no_longer_rounds_fractional_checkpoints(tmp_path):
    # The case: [0.4, 0.6] was stored as [0, 0].
    with pytest.raises(ValueError, match=r"`checkpoints` must be integers .*got 0.4 at checkpoints\[0\]"):
        _from_arrays(tmp_path / "d", [0.4, 0.6])
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("make", WRITERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", [True, np.bool_(False)])
def test_bool_checkpoints_are_refused(tmp_path, make, bad):
    with pytest.raises(TypeError, match=rf"`checkpoints` must be integers; got {bad!r} at checkpoints\[1\] \(a bool\)"):
        make(tmp_path / "d", [5, bad])
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("make", WRITERS, ids=lambda f: f.__name__)
def test_strings_are_not_checkpoints(tmp_path, make):
    with pytest.raises(TypeError, match=r"`checkpoints` must be integers; got '3' at checkpoints\[1\]"):
        make(tmp_path / "d", [0, "3"])
    with pytest.raises(TypeError, match=r"`checkpoints` must be a sequence of integers; got the string '01'"):
        make(tmp_path / "d", "01")
    assert not (tmp_path / "d").exists()


# ---------------------------------------------------------------------- what is kept
@pytest.mark.parametrize("make", WRITERS, ids=lambda f: f.__name__)
def test_integral_floats_are_taken_as_their_integer(tmp_path, make):
    made = make(tmp_path / "d", [np.float64(0.0), 2.0, np.int32(7)])
    assert made.checkpoints == [0, 2, 7]
    assert all(type(t) is int for t in made.checkpoints)


def test_from_arrays_with_integral_floats_reads_each_checkpoint_by_its_iteration(tmp_path):
    dump = _from_arrays(tmp_path / "d", [0.0, 10.0])
    assert dump.checkpoints == [0, 10]
    assert ParameterDump.open(tmp_path / "d").checkpoints == [0, 10]
    assert dump.samples("a", iteration=10).tolist() == [[6, 7], [8, 9], [10, 11]]


def test_negative_checkpoints_are_kept(tmp_path):
    # As before: any integer within int64 is an iteration (tests/test_reliability_dumps.py keeps -2**63).
    dump = _from_arrays(tmp_path / "d", [-1, 0])
    assert dump.checkpoints == [-1, 0]
    assert dump.samples("b", iteration=-1).tolist() == [[-0.0, -1], [-2, -3], [-4, -5]]


def test_check_checkpoints_known_answers():
    assert check_checkpoints(range(3)) == [0, 1, 2]
    assert check_checkpoints(np.array([3, 1, 2])) == [3, 1, 2]
    assert check_checkpoint(np.uint64(2**63 - 1)) == 2**63 - 1
    with pytest.raises(ValueError, match=r"got \[1, 2, 1, 2\] \(1, 2 more than once\)"):
        check_checkpoints([1, 2, 1, 2])
    with pytest.raises(ValueError, match=r"int64.*got 9223372036854775808 at checkpoints\[0\]"):
        check_checkpoints([2.0**63])
