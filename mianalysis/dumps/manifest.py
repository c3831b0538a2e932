"""The manifest of a dump: what ``manifest.json`` holds and the checks every reader and
writer applies to it. Nothing here touches a file (:class:`~mianalysis.dumps.format.ParameterDump`
reads and writes the folder).

A manifest is one JSON object::

    format_version   1, or 2 for a sketched dump (FORMAT_VERSION, the newest read: a
                     reader refuses a newer one, so an older mianalysis refuses a sketch)
    meta             free-form description: task, its settings, seed (decides a resume)
    clients          unique client names, at least one
    checkpoints      training iteration of each checkpoint (unique integers within int64)
    n_runs           runs the dump holds when complete
    n_params         length of the flattened parameter vector
    layout           tensors {name, shape, offset, size}, in order, covering 0 to n_params - 1
    metrics          names of the per-checkpoint metrics (see check_metric_names)
    dtype            DTYPE.str ("<f4"): the array files' dtype
    chunks           written chunks {start, stop, sha256: {client: hex digest}}
    provenance       one record per writing session (mianalysis.provenance.collect), oldest first
    sketch           only in a sketched dump (mianalysis.dumps.sketch): kind, size, seed, nnz,
                     split and the tensors sketched {name, shape, size}; the layout is then
                     the sketch's (Sketch.layout of those tensors)

:func:`check_manifest` checks a parsed manifest field by field and :func:`parse_manifest`
parses one from the file's bytes; :func:`check_meta`, :func:`check_metric_names` and
:func:`check_checkpoints` are the rules a writer applies to what it stores.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeGuard

import numpy as np

from .sketch import sketch_from_record

__all__ = [
    "FORMAT_VERSION", "MANIFEST", "DTYPE", "CENTRAL", "OPTIMUM", "REFERENCE_CLIENTS", "DumpError", "METRIC_NAME", "RESERVED_METRIC_NAMES",
    "check_meta", "check_metric_names", "check_checkpoint", "check_checkpoints", "check_manifest", "parse_manifest"
]

FORMAT_VERSION = 2
# The version a dump without a sketch is written with: readable by every mianalysis.
FULL_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DTYPE = np.dtype("<f4")
# The name of a dump's reference client (trained beside the clients in each run, e.g.
# ParameterSampler(reference="central")): a dump convention, so it is in no client pair.
CENTRAL = "central"
# The name of a dump's optimum client: each run's exact minimiser theta* of the pooled objective
# (every client's data with the run's draws), recorded beside the clients where the task can
# compute it; like CENTRAL it is in no client pair.
OPTIMUM = "optimum"
# The reference clients: recorded beside the clients, in no client pair of an analysis and never
# combined; in the order a reference is preferred where none is named (the optimum first).
REFERENCE_CLIENTS = (OPTIMUM, CENTRAL)


class DumpError(ValueError):
    """A dump folder is missing, damaged, or does not match what was asked of it."""


def check_meta(meta: object) -> dict[str, Any]:
    """`meta` (a dict or None) as it reads back from the manifest; TypeError naming `meta`
    if it is not a dict or not JSON-serialisable."""
    if meta is not None and not isinstance(meta, dict):
        raise TypeError(f"`meta` must be a dict or None; got {type(meta).__name__}")
    try:
        return json.loads(json.dumps(meta or {}))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`meta` must be JSON-serialisable (it is stored in {MANIFEST}): {exc}") from exc


def _shown(value: object, limit: int = 60) -> str:
    """repr of a manifest value for a one-line message, shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# Metric names: each names an array of a zarr export and a variable of to_xarray beside the samples and coordinates.
METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
RESERVED_METRIC_NAMES = ("samples", "client", "checkpoint", "run", "parameter", "layer")


def check_metric_names(names: Iterable[str]) -> list[str]:
    """`names` as a list of str; ValueError naming the first that is reserved or not a plain
    name (the rule every writer of a dump applies)."""
    names = [str(m) for m in names]
    for name in names:
        if name in RESERVED_METRIC_NAMES:
            raise ValueError(f"metric name {name!r} is reserved: {', '.join(RESERVED_METRIC_NAMES)} name a dump's "
                             "samples and coordinates (in to_xarray and an export); choose another name")
        if not METRIC_NAME.fullmatch(name) or name.startswith("__"):
            raise ValueError(f"metric name {name!r} must be ASCII letters, digits, '_', '-' and '.', starting with a "
                             "letter, a digit or '_' (not '__'): it names an array of an export (a name with '/' "
                             "would be a folder); choose another name")
    return names


INT64 = (-(2**63), 2**63 - 1)  # the range of checkpoints: stored and exported as 64-bit integers


def check_checkpoint(value: object, name: str = "checkpoints", index: int | None = None) -> int:
    """`value` as an int if it is an integer within int64 (how a dump stores checkpoints).

    An integral float (``2.0``, ``np.float32(5)``) is taken as that integer.

    Parameters
    ----------
    value : object
        One checkpoint: the training iteration (or round) it was taken at.
    name : str, default "checkpoints"
        What the messages call it.
    index : int, optional
        Its position among the checkpoints, named in the messages.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        If `value` is a bool or not a number; the message names `name` and the value.
    ValueError
        If `value` is a float that is not an integer (``0.4``, NaN, inf) or an integer
        outside int64; the message names `name` and the value.
    """
    at = "" if index is None else f" at {name}[{index}]"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{name}` must be integers; got {value!r}{at} (a bool)")
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or not float(value).is_integer():
            raise ValueError(f"`{name}` must be integers (training iterations); got {value!r}{at}, which is not one "
                             "(a checkpoint is not rounded)")
        value = int(value)
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be integers; got {value!r}{at}")
    value = int(value)
    if not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"`{name}` must be integers within int64 ([-2**63, 2**63 - 1]: a dump and its exports store "
                         f"checkpoints as 64-bit integers); got {value}{at}")
    return value


def _repeated(values: list) -> list:
    """The values that occur more than once in `values`, sorted (empty if none)."""
    seen: set = set()
    repeated: set = set()
    for v in values:
        (repeated if v in seen else seen).add(v)
    return sorted(repeated)


def check_checkpoints(values: Iterable[object], name: str = "checkpoints") -> list[int]:
    """`values` as a list of unique int64 integers: the rule for the checkpoints of a dump,
    applied wherever checkpoints enter one (:meth:`ParameterDump.create
    <mianalysis.dumps.format.ParameterDump.create>`, ``from_arrays``,
    :class:`~mianalysis.dumps.writer.DumpWriter` and so the importers; a manifest is
    held to it by :func:`check_manifest`).

    Each value is checked by :func:`check_checkpoint` (an integral float such as ``2.0``
    is taken as ``2``; negative iterations within int64 are kept). A checkpoint is looked
    up by its value (``samples(iteration=t)``), so two equal values would make one of
    them unreachable and report the other twice: they are refused.

    Parameters
    ----------
    values : iterable
        The checkpoints (training iterations), in the order of the dump.
    name : str, default "checkpoints"
        What the messages call them.

    Returns
    -------
    list of int

    Raises
    ------
    TypeError
        If `values` is a string, or a value is a bool or not a number (named with its
        position).
    ValueError
        If a value is not an integer (``0.4``) or outside int64 (named with its
        position), or a value occurs more than once (the repeated values are named).

    Examples
    --------
    >>> from mianalysis.dumps.manifest import check_checkpoints
    >>> check_checkpoints([0, 5.0, 10])
    [0, 5, 10]
    >>> check_checkpoints([0, 0.4])
    Traceback (most recent call last):
        ...
    ValueError: `checkpoints` must be integers (training iterations); got 0.4 at checkpoints[1], which is not one (a checkpoint is not rounded)
    >>> check_checkpoints([0, 5, 0])
    Traceback (most recent call last):
        ...
    ValueError: `checkpoints` must be unique; got [0, 5, 0] (0 more than once): each checkpoint is read by its iteration
    """
    if isinstance(values, (str, bytes)):
        raise TypeError(f"`{name}` must be a sequence of integers; got the string {values!r}")
    checked = [check_checkpoint(v, name, i) for i, v in enumerate(values)]
    repeated = _repeated(checked)
    if repeated:
        shown = ", ".join(map(str, repeated[:5])) + (", ..." if len(repeated) > 5 else "")
        raise ValueError(f"`{name}` must be unique; got {_shown(checked, 120)} ({shown} more than once): each "
                         "checkpoint is read by its iteration")
    return checked


def check_manifest(manifest: object, mpath: str | os.PathLike) -> None:
    """Check a parsed manifest.json field by field; raise DumpError naming `mpath` and the
    first field that is missing, of the wrong type or inconsistent with the others.

    Checked: the format version; meta (an object); clients (unique strings, at least one);
    checkpoints (unique integers, at least one); n_runs and n_params (integers >= 1); the layout
    (objects with a string name, unique, a shape of integers >= 0, an integer offset, each
    tensor starting where the one before ends and the last ending at n_params); metrics
    (unique strings); dtype; chunks (objects with integer start and stop, 0 <= start <
    stop <= n_runs, in any order but no two overlapping, and a SHA-256 hex digest for every
    client and no other);
    provenance (a list of objects, when present); sketch (when present: format version 2,
    valid settings, and the layout the sketch's of the tensors it records). Every count is
    a Python int, so no size derived from the manifest overflows. File sizes are checked after this, before any
    file is mapped (see ParameterDump._check_files)."""

    def bad(field: str, want: str, got: object) -> NoReturn:
        raise DumpError(f"{mpath} is damaged: `{field}` must be {want}; got {_shown(got)}")

    if not isinstance(manifest, dict):
        bad("manifest", "a JSON object", type(manifest).__name__)
    if "format_version" in manifest:
        version = manifest["format_version"]
        if not _is_int(version) or version < 1:
            bad("format_version", "an integer >= 1", version)
        if version > FORMAT_VERSION:
            raise DumpError(f"{mpath} has format version {version!r}; this mianalysis reads up to "
                            f"{FORMAT_VERSION}: upgrade mianalysis")
    required = ("format_version", "meta", "clients", "checkpoints", "n_runs", "n_params", "layout", "metrics", "chunks")
    missing = [k for k in required if k not in manifest]
    if missing:
        raise DumpError(f"{mpath} is damaged: missing {missing}")
    if not isinstance(manifest["meta"], dict):
        bad("meta", "an object", manifest["meta"])

    clients = manifest["clients"]
    if not isinstance(clients, list) or not clients:
        bad("clients", "a non-empty list of client names", clients)
    for i, c in enumerate(clients):
        if not isinstance(c, str):
            bad(f"clients[{i}]", "a string", c)
    dupes = _repeated(clients)
    if dupes:
        bad("clients", "unique names", f"{dupes} more than once")
    checkpoints = manifest["checkpoints"]
    if not isinstance(checkpoints, list) or not checkpoints:
        bad("checkpoints", "a non-empty list of integer iterations", checkpoints)
    for i, c in enumerate(checkpoints):
        if not _is_int(c) or not INT64[0] <= c <= INT64[1]:
            bad(f"checkpoints[{i}]", "an integer iteration within int64", c)
    repeated = _repeated(checkpoints)
    if repeated:
        bad("checkpoints", "unique iterations", f"{repeated} more than once")
    for field in ("n_runs", "n_params"):
        if not _is_int(manifest[field]) or manifest[field] < 1:
            bad(field, "an integer >= 1", manifest[field])
    n_runs, n_params = manifest["n_runs"], manifest["n_params"]

    layout = manifest["layout"]
    if not isinstance(layout, list) or not layout:
        bad("layout", "a non-empty list of tensors {name, shape, offset}", layout)
    end, names = 0, set()
    for i, entry in enumerate(layout):
        if not isinstance(entry, dict) or any(k not in entry for k in ("name", "shape", "offset")):
            bad(f"layout[{i}]", "an object with name, shape and offset", entry)
        name, shape, offset = entry["name"], entry["shape"], entry["offset"]
        if not isinstance(name, str):
            bad(f"layout[{i}].name", "a string", name)
        if name in names:
            bad(f"layout[{i}].name", "unique", f"{name!r} twice")
        names.add(name)
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            bad(f"layout[{i}].shape", "a list of integers >= 0", shape)
        size = math.prod(shape)
        if "size" in entry and entry["size"] != size:
            bad(f"layout[{i}].size", f"the product of the shape {shape}, {size}", entry["size"])
        if not _is_int(offset) or offset < 0:
            bad(f"layout[{i}].offset", "an integer >= 0", offset)
        if offset != end:
            how = "overlapping the tensor before it" if offset < end else "leaving a gap after the tensor before it"
            bad(f"layout[{i}].offset", f"{end}, where the tensors before it end ({how})", offset)
        end = offset + size
    if end != n_params:
        raise DumpError(f"{mpath}: layout describes {end} parameters, n_params is {n_params} "
                        "(`layout` must cover the columns 0 to `n_params` - 1)")

    metrics = manifest["metrics"]
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        bad("metrics", "a list of metric names (strings)", metrics)
    if len(set(metrics)) != len(metrics):
        bad("metrics", "unique names", metrics)
    if "dtype" in manifest and manifest["dtype"] != DTYPE.str:
        bad("dtype", repr(DTYPE.str), manifest["dtype"])
    if "provenance" in manifest and (not isinstance(manifest["provenance"], list)
                                     or not all(isinstance(p, dict) for p in manifest["provenance"])):
        bad("provenance", "a list of objects", manifest["provenance"])
    if "sketch" in manifest:
        if manifest["format_version"] < 2:
            bad("format_version", "2 in a dump with a `sketch`", manifest["format_version"])
        try:
            sketch_from_record(manifest["sketch"], [(e["name"], e["shape"]) for e in layout])
        except ValueError as exc:
            raise DumpError(f"{mpath} is damaged: `sketch` {exc}") from None

    chunks = manifest["chunks"]
    if not isinstance(chunks, list):
        bad("chunks", "a list of written chunks {start, stop, sha256}", chunks)
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or any(k not in chunk for k in ("start", "stop", "sha256")):
            bad(f"chunks[{i}]", "an object with start, stop and sha256", chunk)
        for key in ("start", "stop"):
            if not _is_int(chunk[key]):
                bad(f"chunks[{i}].{key}", "an integer run", chunk[key])
        if chunk["start"] < 0:
            bad(f"chunks[{i}].start", "an integer run >= 0", chunk["start"])
        if not chunk["start"] < chunk["stop"] <= n_runs:
            bad(f"chunks[{i}].stop", f"in [{chunk['start'] + 1}, n_runs={n_runs}]", chunk["stop"])
        sha = chunk["sha256"]
        if not isinstance(sha, dict) or set(sha) != set(clients):
            bad(f"chunks[{i}].sha256", f"an object with a checksum for each client of {clients}", sha)
        for client, digest in sha.items():
            if not isinstance(digest, str) or not re.fullmatch("[0-9a-f]{64}", digest):
                bad(f"chunks[{i}].sha256[{client!r}]", "a SHA-256 digest (64 hex digits)", digest)
    overlap = _first_overlap(chunks)
    if overlap is not None:
        (i, a), (j, b) = overlap
        bad(f"chunks[{j}]", f"runs that no other chunk holds (chunks[{i}] holds runs {a['start']}-{a['stop']})",
            f"runs {b['start']}-{b['stop']}")


def _first_overlap(chunks: Sequence[Mapping[str, Any]]
                   ) -> tuple[tuple[int, Mapping[str, Any]], tuple[int, Mapping[str, Any]]] | None:
    """((i, chunk), (j, chunk)) of the first two chunks (by start) that share a run, or None."""
    order = sorted(range(len(chunks)), key=lambda k: (chunks[k]["start"], chunks[k]["stop"]))
    for i, j in zip(order, order[1:]):
        if chunks[j]["start"] < chunks[i]["stop"]:
            return (i, chunks[i]), (j, chunks[j])
    return None



def parse_manifest(raw: bytes, mpath: str | os.PathLike) -> dict[str, Any]:
    """The manifest in the bytes `raw` of the file `mpath`, parsed and checked (see
    :func:`check_manifest`); DumpError naming `mpath` if it is not valid JSON or not a
    valid manifest."""
    try:
        manifest = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DumpError(f"{mpath} is damaged (not valid JSON: {exc})") from exc
    check_manifest(manifest, mpath)  # before anything else reads it
    return manifest
