"""ParameterDump: samples of clients' parameter vectors on disk.

A dump is a folder::

    manifest.json          format version, meta (task, settings, seed), clients,
                           checkpoints, parameter layout, metric names, completed chunks,
                           provenance (one record per writing session)
    client_<i>.f32         float32, shape (n_checkpoints, n_runs, n_params), C order
    metrics_<i>.f32        float32, shape (n_metrics, n_checkpoints, n_runs), C order

Array files are raw little-endian float32, read by memory map. Runs are written in chunks;
after a chunk is written and flushed its SHA-256 checksums are added to the manifest, and
the manifest is replaced atomically (write a temporary file, fsync, rename). A dump killed
while writing is therefore always valid up to its last completed chunk, and a writer can
resume from there.

``provenance`` lists the sessions that wrote the dump, oldest first (see
mianalysis._provenance.collect): code and package versions, machine, threads, command line,
start time, and the end time, threads and runs written as of the session's last completed
chunk.
It is not part of `meta`, so it never decides whether a rerun resumes.

One process writes a dump at a time: creating it, importing into it and writing chunks
take its writer lock, the hidden file ``.NAME.lock`` beside the folder (see
:mod:`mianalysis._locking`); a second writer gets a LockedError naming the first. Readers
take no lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ._locking import WriterLock
from ._provenance import collect

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DTYPE = np.dtype("<f4")


class DumpError(ValueError):
    """A dump folder is missing, damaged, or does not match what was asked of it."""


@dataclass(frozen=True)
class LayoutEntry:
    """One tensor of the flattened parameter vector: columns [offset, offset + size)."""

    name: str
    shape: tuple
    offset: int

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def to_json(self):
        return {"name": self.name, "shape": list(self.shape), "offset": self.offset, "size": self.size}


def layout_from_shapes(named_shapes):
    """Layout entries for tensors of the given (name, shape) pairs, flattened in order."""
    entries, offset = [], 0
    for name, shape in named_shapes:
        entry = LayoutEntry(str(name), tuple(int(s) for s in shape), offset)
        entries.append(entry)
        offset += entry.size
    return entries


def select_layout(layout, layer):
    """Entries of `layout` named by `layer`: a tensor name, a prefix of names ("rnn.0"
    matches "rnn.0.weight"), or a list of those; ValueError for a name that matches none.

    A selection is a set of tensors: each selected tensor comes once, in layout order,
    whatever the order of the names and however they overlap (``["rnn.1", "rnn.1.bias"]``,
    ``["head", "rnn.1"]`` and ``["rnn.1", "rnn.1"]`` select what their union does)."""
    names = [layer] if isinstance(layer, str) else list(layer)
    chosen = set()
    for name in names:
        found = {i for i, e in enumerate(layout) if e.name == name or e.name.startswith(name + ".")}
        if not found:
            raise ValueError(f"`layer` {name!r} is not in the layout; tensors: {[e.name for e in layout]}")
        chosen |= found
    return [layout[i] for i in sorted(chosen)]


def layout_columns(entries):
    """Indices of the flattened parameter vector covered by layout `entries`."""
    return np.concatenate([np.arange(e.offset, e.offset + e.size) for e in entries])


@dataclass(frozen=True)
class NonFinite:
    """Where a block of samples first holds a NaN or an infinity (see :func:`find_nonfinite`)."""

    checkpoint: int  # index of the first checkpoint with a non-finite value
    iteration: int  # its training iteration
    runs: tuple  # the runs with a non-finite value at that checkpoint
    n_nan: int  # NaN and infinities at that checkpoint
    n_inf: int
    column: int  # column of the parameter vector of the first one (in the first of `runs`)
    tensor: str  # the tensor holding that column ("" where the layout is not known)
    later: int  # further checkpoints with non-finite values

    def runs_text(self, word="run"):
        """"run 3" or "runs 0, 1, 2, 3, 4 and 7 more"."""
        shown = ", ".join(str(r) for r in self.runs[:5]) + (
            "" if len(self.runs) <= 5 else f" and {len(self.runs) - 5} more")
        return f"{word}{'s' if len(self.runs) > 1 else ''} {shown}"

    def place(self):
        """"tensor 'w', column 3" (or "column 3" without a layout)."""
        return f"tensor {self.tensor!r}, column {self.column}" if self.tensor else f"column {self.column}"

    def values_text(self):
        """"4 NaN and 0 inf (the first in tensor 'w', column 3)"."""
        return f"{self.n_nan} NaN and {self.n_inf} inf (the first in {self.place()})"

    def describe(self):
        later = f"; {self.later} later checkpoint(s) too" if self.later else ""
        return (f"checkpoint {self.checkpoint} (iteration {self.iteration}), {self.runs_text()}: "
                f"{self.values_text()}{later}")


def find_nonfinite(block, iterations, *, checkpoints=None, first_run=0, layout=None, columns=None):
    """None if every value of `block` (n_checkpoints, n_runs, n_params) is finite; else a
    :class:`NonFinite` naming its first checkpoint with a NaN or infinity.

    `iterations` are the checkpoints' training iterations and `checkpoints` their indices
    (default 0, 1, ...); `first_run` is the run of the block's first row; `columns` (an
    index array or slice) maps the block's columns to the parameter vector's, whose tensors
    `layout` names."""
    bad = ~np.isfinite(block)
    if not bad.any():
        return None
    per_checkpoint = bad.any(axis=(1, 2))
    t = int(np.argmax(per_checkpoint))
    run_rows = np.flatnonzero(bad[t].any(axis=1))
    column = int(np.argmax(bad[t, run_rows[0]]))
    if columns is not None:
        column = int(np.arange(max(block.shape[2], _layout_size(layout)))[columns][column])
    tensor = next((e.name for e in layout or () if e.offset <= column < e.offset + e.size), "")
    return NonFinite(
        checkpoint=int(t if checkpoints is None else checkpoints[t]), iteration=int(iterations[t]),
        runs=tuple(int(first_run + r) for r in run_rows), n_nan=int(np.isnan(block[t]).sum()),
        n_inf=int(np.isinf(block[t]).sum()), column=column, tensor=tensor, later=int(per_checkpoint[t + 1:].sum()))


def _layout_size(layout):
    return layout[-1].offset + layout[-1].size if layout else 0


def _iterations_or_indices(checkpoints, n):
    """`checkpoints` as n ints where they are that, else 0, ..., n - 1 (for messages only)."""
    try:
        iterations = [int(c) for c in checkpoints]
    except (TypeError, ValueError):
        iterations = []
    return iterations if len(iterations) == n else list(range(n))


def _layout_or_none(named_shapes):
    """Layout entries of (name, shape) pairs, or None where they are not that (for messages only)."""
    try:
        return layout_from_shapes(named_shapes)
    except (TypeError, ValueError):
        return None


def _client_file(index):
    return f"client_{index}.f32"


def _metrics_file(index):
    return f"metrics_{index}.f32"


def _write_json_atomically(path, obj):
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as fh:
            json.dump(obj, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class ParameterDump:
    """Samples of several clients' flattened parameter vectors at training checkpoints.

    Use :meth:`open` for an existing dump, :meth:`create` to start one (the sampler does),
    :meth:`from_arrays` for your own arrays and :meth:`from_torch_checkpoints` for a folder
    of PyTorch state_dict files.

    Attributes
    ----------
    path : pathlib.Path
    clients : list of str
        Client names.
    checkpoints : list of int
        Training iteration of each checkpoint (0 is the initial state).
    n_runs : int
        Runs the dump holds when complete.
    completed_runs : int
        Runs written so far (the dump is usable up to here).
    n_params : int
    layout : list of LayoutEntry
        Name, shape and column offset of each tensor in the flattened vector.
    metric_names : list of str
        Per-checkpoint metrics recorded for every client and run (e.g. "loss").
    meta : dict
        Free-form description: task, its settings, seed, sampler settings.
    provenance : list of dict
        One record per session that wrote the dump, oldest first (empty for dumps written
        before provenance was recorded).

    Examples
    --------
    Two clients, 2 checkpoints (iterations 0 and 10), 100 runs, a parameter vector made of
    a tensor "w" of 2 values and a tensor "b" of 1:

    >>> import numpy as np
    >>> from mianalysis import ParameterDump
    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((2, 100, 3))
    >>> ParameterDump.from_arrays("my_dump", {"a": a, "b": 2 * a}, checkpoints=[0, 10],
    ...                           layout=[("w", (2,)), ("b", (1,))])
    ParameterDump('my_dump', clients=['a', 'b'], checkpoints=[0, 10], runs=100/100, params=3)
    >>> dump = ParameterDump.open("my_dump")
    >>> dump.samples("b", checkpoint=1).shape        # (runs, params) at iteration 10
    (100, 3)
    >>> dump.samples("b", 1, layer="b").shape        # only the tensor "b"
    (100, 1)
    >>> bool(np.all(dump.samples("b", 1) == 2 * dump.samples("a", 1)))   # float32 on disk
    True
    >>> dump.verify()                                # sizes and checksums: runs verified
    100
    """

    def __init__(self, path, manifest):
        self.path = Path(path)
        self._manifest = manifest
        self.clients = list(manifest["clients"])
        self.checkpoints = [int(c) for c in manifest["checkpoints"]]
        self.n_runs = int(manifest["n_runs"])
        self.layout = [LayoutEntry(e["name"], tuple(e["shape"]), int(e["offset"])) for e in manifest["layout"]]
        self.n_params = int(manifest["n_params"])
        self.metric_names = list(manifest["metrics"])
        self.meta = manifest["meta"]
        self._session = None  # this writer's provenance record, collected when it starts writing
        self._session_index = None  # its position in the manifest's provenance list, once written

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, path, *, clients, checkpoints, n_runs, layout, metric_names=(), meta=None):
        """Start an empty dump in a new (or empty) folder and return it.

        The dump's writer lock (see :mod:`mianalysis._locking`) is held while it is built,
        so two processes creating the same dump cannot both build it.

        Raises
        ------
        DumpError
            If `path` exists and is not an empty folder: nothing there is changed.
        LockedError
            If another process is writing `path`: nothing is changed.
        """
        path = Path(path)
        clients = [str(c) for c in clients]
        if not clients:
            raise ValueError("`clients` must name at least one client")
        if len(set(clients)) != len(clients):
            raise ValueError(f"`clients` must be unique; got {clients}")
        checkpoints = [int(c) for c in checkpoints]
        if not checkpoints:
            raise ValueError("`checkpoints` must not be empty")
        if int(n_runs) < 1:
            raise ValueError(f"`n_runs` must be >= 1; got {n_runs}")
        if not layout:
            raise ValueError("`layout` must describe at least one tensor")
        n_params = layout[-1].offset + layout[-1].size
        manifest = {
            "format_version": FORMAT_VERSION,
            "meta": meta or {},
            "clients": clients,
            "checkpoints": checkpoints,
            "n_runs": int(n_runs),
            "n_params": int(n_params),
            "layout": [e.to_json() for e in layout],
            "metrics": [str(m) for m in metric_names],
            "dtype": DTYPE.str,
            "chunks": [],
            "provenance": [{**collect(), "runs_written": None}],
        }
        with WriterLock(path):  # held from the check until the dump is in place
            if path.exists() and (not path.is_dir() or any(path.iterdir())):
                raise DumpError(f"{path} already exists and is not an empty folder; nothing was written")
            return cls._build(path, manifest)

    @classmethod
    def _build(cls, path, manifest):
        """Write an empty dump with `manifest` in a hidden sibling folder and rename it to
        `path`, so that a process killed while creating leaves no half-made dump at `path`.
        The caller holds the writer lock (a staging folder found here is a killed creator's)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.creating"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        dump = cls(staging, manifest)
        try:
            for i in range(len(dump.clients)):
                for name, shape in ((_client_file(i), dump._sample_shape()), (_metrics_file(i), dump._metric_shape())):
                    with open(staging / name, "wb") as fh:
                        fh.truncate(int(np.prod(shape)) * DTYPE.itemsize)
            _write_json_atomically(staging / MANIFEST, manifest)
            os.replace(staging, path)  # an empty folder at `path` is replaced
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise DumpError(f"could not create the dump {path} ({exc}); nothing was written there") from exc
        dump.path = path
        dump._session, dump._session_index = manifest["provenance"][0], 0
        return dump

    @classmethod
    def open_or_create(cls, path, *, meta, **create_args):
        """Resume the dump at `path` if it was written with the same `meta`, else create it.

        The writer lock is held while deciding and creating; hold it yourself around the
        writing that follows (the sampler does) to keep other writers out in between.

        Raises
        ------
        DumpError
            If `path` holds a dump with other `meta` (the differences are listed), or is a
            non-empty folder that is not a dump. Nothing there is changed.
        LockedError
            If another process is writing `path`.
        """
        meta = json.loads(json.dumps(meta))
        path = Path(path)
        with WriterLock(path):
            if (path / MANIFEST).exists():
                dump = cls.open(path)
                if dump.meta != meta:
                    diff = {k: (dump.meta.get(k), v) for k, v in meta.items() if dump.meta.get(k) != v}
                    raise DumpError(f"{path} holds a dump with other settings (existing, requested): {diff}; "
                                    "choose another folder")
                dump._session = collect()  # added to the provenance with the first chunk this session writes
                return dump
            return cls.create(path, meta=meta, **create_args)

    @classmethod
    def from_arrays(cls, path, samples, *, checkpoints=None, layout=None, metrics=None, meta=None):
        """Write your own samples as a dump.

        Parameters
        ----------
        path : str or Path
            A new folder.
        samples : dict of name -> array-like, or sequence of array-like
            For each client, an array of shape (n_checkpoints, n_runs, n_params), or
            (n_runs, n_params) for a single checkpoint. All clients the same shape.
        checkpoints : sequence of int, optional
            Iteration of each checkpoint; default 0, 1, 2, ...
        layout : sequence of (name, shape), optional
            Tensors making up the parameter vector; default one tensor "params".
        metrics : dict of client -> dict of metric name -> array (n_checkpoints, n_runs), optional
        meta : dict, optional

        Returns
        -------
        ParameterDump
        """
        from ._validation import check_samples

        if not isinstance(samples, dict):
            samples = {str(i): a for i, a in enumerate(samples)}
        if not samples:
            raise ValueError("`samples` must hold at least one client")
        arrays = {}
        for name, a in samples.items():
            a = np.asarray(a)
            if a.ndim == 2:
                a = a[None]
            if a.ndim != 3:
                raise ValueError(
                    f"`samples[{name!r}]` must have shape (n_checkpoints, n_runs, n_params); got {a.shape}"
                )
            if a.dtype.kind == "f" and a.size:  # say where, before the generic check (as float32, as stored)
                with np.errstate(over="ignore"):
                    where = find_nonfinite(a.astype(DTYPE), _iterations_or_indices(checkpoints, a.shape[0]),
                                           layout=_layout_or_none(layout))
                if where is not None:
                    later = f", and at {where.later} later checkpoint(s)" if where.later else ""
                    raise ValueError(
                        f"`samples[{name!r}]` contains non-finite values: {where.n_nan} NaN and {where.n_inf} inf (as "
                        f"float32) at checkpoint {where.checkpoint} (iteration {where.iteration}), {where.runs_text()} "
                        f"(the first in {where.place()}){later}; a dump holds finite parameters only: nothing was "
                        "written")
            checked = check_samples(a.reshape(-1, a.shape[-1]), f"samples[{name!r}]", dtype=np.float32)
            arrays[str(name)] = checked.reshape(a.shape)
        shapes = {a.shape for a in arrays.values()}
        if len(shapes) != 1:
            raise ValueError(f"every client's samples must have the same shape; got {sorted(shapes)}")
        n_ckpt, n_runs, n_params = shapes.pop()
        checkpoints = list(range(n_ckpt)) if checkpoints is None else [int(c) for c in checkpoints]
        if len(checkpoints) != n_ckpt:
            raise ValueError(f"`checkpoints` has {len(checkpoints)} entries for {n_ckpt} checkpoints")
        layout = layout_from_shapes(layout if layout is not None else [("params", (n_params,))])
        if layout[-1].offset + layout[-1].size != n_params:
            raise ValueError(
                f"`layout` describes {layout[-1].offset + layout[-1].size} parameters; samples have {n_params}"
            )
        metric_names = sorted({m for per in (metrics or {}).values() for m in per})
        metric_arrays = {}
        for name in arrays:
            per = (metrics or {}).get(name, {})
            m = np.full((len(metric_names), n_ckpt, n_runs), np.nan, dtype=np.float32)
            for j, mname in enumerate(metric_names):
                if mname in per:
                    m[j] = np.asarray(per[mname], dtype=np.float32).reshape(n_ckpt, n_runs)
            metric_arrays[name] = m
        with WriterLock(path):  # one writer from creation to the written samples
            dump = cls.create(
                path, clients=list(arrays), checkpoints=checkpoints, n_runs=n_runs, layout=layout,
                metric_names=metric_names, meta=meta,
            )
            dump.write_chunk(0, n_runs, arrays, metric_arrays)
        return dump

    @classmethod
    def from_torch_checkpoints(cls, path, root, *, meta=None):
        """Import a folder of PyTorch state_dict files laid out as ``root/CLIENT/CHECKPOINT/RUN.pt``.

        CLIENT is any folder name; CHECKPOINT a folder named by the training iteration (an
        integer); RUN any file name, the same set under every client and checkpoint. Each
        file holds a state_dict (``torch.save(model.state_dict(), ...)``); its floating-point
        tensors, in the dict's order, make up the parameter vector (integer buffers such as
        BatchNorm's ``num_batches_tracked`` are skipped). Every file must hold the same
        tensors with the same shapes. The writer lock of `path` is held from before the
        files are read (LockedError at once if another process is writing `path`).
        """
        root = Path(root)
        if not root.is_dir():
            raise DumpError(f"{root} is not a folder")
        with WriterLock(path):  # a second importer of `path` fails now, not after reading every file
            samples, checkpoints, named_shapes, runs = _read_state_dicts(root)
            meta = dict(meta or {}, imported_from=str(root), runs=runs)
            return cls.from_arrays(path, samples, checkpoints=checkpoints, layout=named_shapes, meta=meta)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path):
        """Open an existing dump, checking its manifest and file sizes (not checksums: see verify)."""
        path = Path(path)
        if not path.exists():
            raise DumpError(f"dump {path} does not exist")
        mpath = path / MANIFEST
        if not path.is_dir() or not mpath.exists():
            raise DumpError(f"{path} is not a dump: no {MANIFEST} in it")
        try:
            manifest = json.loads(mpath.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DumpError(f"{mpath} is damaged (not valid JSON: {exc})") from exc
        required = ("format_version", "meta", "clients", "checkpoints", "n_runs", "n_params", "layout", "metrics", "chunks")
        if not isinstance(manifest, dict) or any(k not in manifest for k in required):
            missing = [k for k in required if not isinstance(manifest, dict) or k not in manifest]
            raise DumpError(f"{mpath} is damaged: missing {missing}")
        version = manifest["format_version"]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise DumpError(
                f"{mpath} has format version {version!r}; this mianalysis reads up to {FORMAT_VERSION}: upgrade mianalysis"
            )
        try:
            dump = cls(path, manifest)
        except (KeyError, TypeError, ValueError) as exc:
            raise DumpError(f"{mpath} is damaged: {exc!r}") from exc
        dump._check_files()
        return dump

    def _sample_shape(self):
        return (len(self.checkpoints), self.n_runs, self.n_params)

    def _metric_shape(self):
        return (len(self.metric_names), len(self.checkpoints), self.n_runs)

    def _check_files(self):
        layout_params = self.layout[-1].offset + self.layout[-1].size if self.layout else 0
        if layout_params != self.n_params:
            raise DumpError(f"{self.path / MANIFEST}: layout describes {layout_params} parameters, n_params is {self.n_params}")
        stop = 0
        for chunk in self._manifest["chunks"]:
            if chunk["start"] != stop or not chunk["start"] < chunk["stop"] <= self.n_runs:
                raise DumpError(f"{self.path / MANIFEST}: chunk list is damaged at runs {chunk['start']}-{chunk['stop']}")
            stop = chunk["stop"]
        for i in range(len(self.clients)):
            for name, shape in ((_client_file(i), self._sample_shape()), (_metrics_file(i), self._metric_shape())):
                file = self.path / name
                if not file.exists():
                    raise DumpError(f"{file} is missing (client {self.clients[i]!r})")
                want = int(np.prod(shape)) * DTYPE.itemsize
                size = file.stat().st_size
                if size != want:
                    raise DumpError(
                        f"{file} has {size} bytes; the manifest's shape {shape} needs {want} "
                        f"({'truncated' if size < want else 'too long'})"
                    )

    # ------------------------------------------------------------------ reading
    @property
    def provenance(self):
        """Records of the sessions that wrote the dump, oldest first (a copy of the list)."""
        return list(self._manifest.get("provenance", []))

    @property
    def completed_runs(self):
        chunks = self._manifest["chunks"]
        return int(chunks[-1]["stop"]) if chunks else 0

    @property
    def complete(self):
        return self.completed_runs == self.n_runs

    def _client_index(self, client):
        if isinstance(client, str) and client in self.clients:
            return self.clients.index(client)
        if isinstance(client, (int, np.integer)) and not isinstance(client, bool) and 0 <= client < len(self.clients):
            return int(client)
        raise ValueError(f"`client` must be one of {self.clients} or an index below {len(self.clients)}; got {client!r}")

    def _checkpoint_index(self, checkpoint):
        if not isinstance(checkpoint, (int, np.integer)) or isinstance(checkpoint, bool) or not 0 <= checkpoint < len(self.checkpoints):
            raise ValueError(
                f"`checkpoint` must be an index in [0, {len(self.checkpoints) - 1}] "
                f"(iterations {self.checkpoints}); got {checkpoint!r}"
            )
        return int(checkpoint)

    def _memmap(self, name, shape, mode="r"):
        if int(np.prod(shape)) == 0:  # a dump without metrics: nothing to map
            return np.zeros(shape, dtype=DTYPE)
        return np.memmap(self.path / name, dtype=DTYPE, mode=mode, shape=shape)

    def layer_columns(self, layer):
        """Column indices of `layer`: a tensor name, a prefix of names ("rnn.0" matches
        "rnn.0.weight" and "rnn.0.bias"), or a list of those. None means all columns."""
        if layer is None:
            return slice(0, self.n_params)
        return layout_columns(select_layout(self.layout, layer))

    def samples(self, client, checkpoint, layer=None):
        """Parameter samples of one client at one checkpoint: array of shape (runs, params).

        Only completed runs are returned. `checkpoint` is an index into :attr:`checkpoints`;
        `layer` selects tensors (see :meth:`layer_columns`). The array is a read-only memory
        map when `layer` is None.
        """
        c = self._client_index(client)
        t = self._checkpoint_index(checkpoint)
        cols = self.layer_columns(layer)
        data = self._memmap(_client_file(c), self._sample_shape())[t, : self.completed_runs]
        return data if layer is None else np.asarray(data[:, cols])

    def metric(self, client, name):
        """Recorded metric `name` of one client: array of shape (n_checkpoints, completed runs)."""
        if name not in self.metric_names:
            raise ValueError(f"`name` must be one of {self.metric_names}; got {name!r}")
        c = self._client_index(client)
        data = self._memmap(_metrics_file(c), self._metric_shape())
        return np.asarray(data[self.metric_names.index(name), :, : self.completed_runs])

    # ------------------------------------------------------------------ writing
    def write_chunk(self, start, stop, samples, metrics=None):
        """Write runs [start, stop) of every client, flush, and record the chunk atomically.

        `samples` maps each client name to an array (n_checkpoints, stop - start, n_params);
        `metrics` each client name to (n_metrics, n_checkpoints, stop - start). Chunks are
        written in order: `start` must equal :attr:`completed_runs`. The writer lock is
        held while writing (LockedError if another process holds it). Samples must be
        finite (as float32): a NaN or infinity is a DumpError naming the client, checkpoint,
        runs and tensor, and nothing of the chunk is written. Metrics may hold NaN (a
        metric not recorded) and infinities (e.g. a loss that overflows).
        """
        if start != self.completed_runs or not start < stop <= self.n_runs:
            raise DumpError(f"chunk {start}-{stop} does not follow the completed runs 0-{self.completed_runs} of {self.n_runs}")
        blocks = []
        for client in self.clients:  # check everything before writing anything
            block = np.asarray(samples[client], dtype=DTYPE)
            if block.shape != (len(self.checkpoints), stop - start, self.n_params):
                raise ValueError(f"samples of client {client!r} have shape {block.shape}; expected "
                                 f"{(len(self.checkpoints), stop - start, self.n_params)}")
            where = find_nonfinite(block, self.checkpoints, first_run=start, layout=self.layout)
            if where is not None:  # a dump holds finite parameters only: analysis could not use these
                raise DumpError(f"samples of client {client!r} are not finite at {where.describe()}; nothing of runs "
                                f"{start}-{stop} was written (the dump {self.path} is intact up to run "
                                f"{self.completed_runs})")
            mshape = self._metric_shape()[:2] + (stop - start,)
            mblock = np.asarray(metrics[client] if metrics else np.full(mshape, np.nan), dtype=DTYPE)
            if mblock.shape != mshape:
                raise ValueError(f"metrics of client {client!r} have shape {mblock.shape}; expected {mshape}")
            blocks.append((block, mblock))
        with WriterLock(self.path):  # outside the try: a busy dump is not a failed write
            self._write_chunk_locked(start, stop, blocks)

    def _write_chunk_locked(self, start, stop, blocks):
        """Write checked (samples, metrics) `blocks` as runs [start, stop), then the manifest."""
        try:
            checksums = {}
            for i, (client, (block, mblock)) in enumerate(zip(self.clients, blocks)):
                self._write_runs(_client_file(i), self._sample_shape(), 1, start, block)
                self._write_runs(_metrics_file(i), self._metric_shape(), 2, start, mblock)
                checksums[client] = self._chunk_checksum(i, start, stop)
            manifest = {**self._manifest, "chunks": self._manifest["chunks"] + [
                {"start": int(start), "stop": int(stop), "sha256": checksums}],
                "provenance": self._sessions_after(start, stop)}
            _write_json_atomically(self.path / MANIFEST, manifest)
        except OSError as exc:
            raise DumpError(f"writing runs {start}-{stop} to {self.path} failed ({exc}); the dump is intact up to "
                            f"run {self.completed_runs}: free space or fix the cause and rerun to resume") from exc
        self._manifest = manifest
        if self._session_index is None:
            self._session_index = len(manifest["provenance"]) - 1
        self._session = manifest["provenance"][self._session_index]

    def _sessions_after(self, start, stop):
        """The manifest's provenance list once this session has written runs [start, stop):
        its record appended (first chunk) or its end time and runs written updated."""
        sessions = self.provenance
        if self._session is None:  # a dump opened with open() and written to
            self._session = collect()
        first = (self._session.get("runs_written") or [start])[0]
        record = {**collect(self._session["started"], finished=True), "runs_written": [int(first), int(stop)]}
        if self._session_index is None:
            sessions.append(record)
        else:
            sessions[self._session_index] = record
        return sessions

    def _write_runs(self, name, shape, run_axis, start, block):
        """Write `block` into runs [start, start + block.shape[run_axis]) of the array file
        `name` of `shape` with ordinary file writes (a full disk raises OSError), then fsync."""
        if block.size == 0:
            return
        n_runs = shape[run_axis]
        inner = int(np.prod(shape[run_axis + 1:]))
        with open(self.path / name, "r+b") as fh:
            for outer, index in enumerate(np.ndindex(*shape[:run_axis])):
                fh.seek((outer * n_runs + start) * inner * DTYPE.itemsize)
                fh.write(np.ascontiguousarray(block[index]).tobytes())
            fh.flush()
            os.fsync(fh.fileno())

    def _chunk_checksum(self, index, start, stop):
        h = hashlib.sha256()
        samples = self._memmap(_client_file(index), self._sample_shape())
        for t in range(len(self.checkpoints)):
            h.update(np.ascontiguousarray(samples[t, start:stop]).tobytes())
        metrics = self._memmap(_metrics_file(index), self._metric_shape())
        h.update(np.ascontiguousarray(metrics[:, :, start:stop]).tobytes())
        return h.hexdigest()

    def verify(self):
        """Check file sizes, every completed chunk's checksums and that its samples are
        finite; raise DumpError naming the file and the runs that are damaged (for
        non-finite samples: the client, checkpoint, runs and tensor, as written by software
        that did not check them). Returns the number of verified runs."""
        self._check_files()
        for chunk in self._manifest["chunks"]:
            for i, client in enumerate(self.clients):
                if self._chunk_checksum(i, chunk["start"], chunk["stop"]) != chunk["sha256"].get(client):
                    raise DumpError(
                        f"{self.path / _client_file(i)} or {_metrics_file(i)}: runs {chunk['start']}-{chunk['stop']} "
                        f"of client {client!r} do not match their checksum (damaged)"
                    )
        for chunk in self._manifest["chunks"]:  # after the checksums: damage is named as damage
            for i, client in enumerate(self.clients):
                where = self._find_nonfinite(i, chunk["start"], chunk["stop"])
                if where is not None:
                    raise DumpError(
                        f"{self.path / _client_file(i)}: client {client!r} has non-finite parameters at "
                        f"{where.describe()}; analysis cannot use them (sample again with settings that train "
                        "without diverging)")
        return self.completed_runs

    def _find_nonfinite(self, index, start, stop):
        """find_nonfinite over runs [start, stop) of client `index`, reading one checkpoint at a time."""
        samples = self._memmap(_client_file(index), self._sample_shape())
        found = None
        for t, iteration in enumerate(self.checkpoints):
            if found is None:
                found = find_nonfinite(samples[t:t + 1, start:stop], [iteration], checkpoints=[t], first_run=start,
                                       layout=self.layout)
            elif not np.isfinite(samples[t, start:stop]).all():
                found = replace(found, later=found.later + 1)
        return found

    def __repr__(self):
        return (f"ParameterDump({str(self.path)!r}, clients={self.clients}, checkpoints={self.checkpoints}, "
                f"runs={self.completed_runs}/{self.n_runs}, params={self.n_params})")


def _int_name(name):
    try:
        return int(name)
    except ValueError as exc:
        raise DumpError(f"checkpoint folder {name!r} is not an integer iteration") from exc


def _read_state_dicts(root):
    """Samples of every client from ``root/CLIENT/CHECKPOINT/RUN.pt`` (see
    :meth:`ParameterDump.from_torch_checkpoints`): (samples, checkpoints, named shapes, run files)."""
    import torch

    clients = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not clients:
        raise DumpError(f"{root} has no client folders (expected root/CLIENT/CHECKPOINT/RUN.pt)")
    checkpoint_dirs = sorted((p.name for p in (root / clients[0]).iterdir() if p.is_dir()), key=_int_name)
    runs = sorted(p.name for p in (root / clients[0] / checkpoint_dirs[0]).glob("*.pt")) if checkpoint_dirs else []
    if not runs:
        raise DumpError(f"{root / clients[0]} has no CHECKPOINT/RUN.pt files")
    named_shapes = None
    samples = {}
    for client in clients:
        found = sorted((p.name for p in (root / client).iterdir() if p.is_dir()), key=_int_name)
        if found != checkpoint_dirs:
            raise DumpError(f"{root / client} has checkpoints {found}; {root / clients[0]} has {checkpoint_dirs}")
        out = None
        for t, ckpt in enumerate(checkpoint_dirs):
            for r, run in enumerate(runs):
                file = root / client / ckpt / run
                if not file.exists():
                    raise DumpError(f"{file} is missing (every client and checkpoint needs runs {runs[:3]}...)")
                state = torch.load(file, map_location="cpu", weights_only=True)
                tensors = [(k, v) for k, v in state.items() if torch.is_tensor(v) and v.is_floating_point()]
                shapes = [(k, tuple(v.shape)) for k, v in tensors]
                if named_shapes is None:
                    named_shapes = shapes
                    n_params = sum(int(np.prod(s)) for _, s in shapes)
                elif shapes != named_shapes:
                    raise DumpError(f"{file} holds tensors {shapes[:3]}...; expected {named_shapes[:3]}...")
                if out is None:
                    out = np.empty((len(checkpoint_dirs), len(runs), n_params), dtype=np.float32)
                out[t, r] = torch.cat([v.detach().reshape(-1).float() for _, v in tensors]).numpy()
        samples[client] = out
    return samples, [_int_name(c) for c in checkpoint_dirs], named_shapes, runs
