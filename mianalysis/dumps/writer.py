"""DumpWriter: record parameter vectors from your own training loop into a dump, chunk by chunk.

A training loop that already exists (yours, a Flower app's) calls :meth:`DumpWriter.record`
once per (run, client, checkpoint); the writer keeps the records of each chunk of runs in
memory and writes the chunk (:meth:`mianalysis.ParameterDump.write_chunk`, atomic and
checksummed) as soon as all its records are there. Memory is that of the chunks being
filled, whatever the number of runs. Get one with :class:`mianalysis.DumpWriter`.
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._internal.locking import WriterLock
from .._internal.validation import check_int
from ..provenance import collect
from .format import ParameterDump, check_creatable, discard_unwritten_dump, unwritten_dump_discarded
from .layout import LayoutEntry, find_nonfinite, layout_from_shapes
from .manifest import MANIFEST, DumpError, check_checkpoints, check_meta, check_metric_names
from .sketch import Sketch

if TYPE_CHECKING:  # names used only in type hints (this module never imports PyTorch)
    import torch

__all__ = ["DumpWriter", "IncompleteChunkWarning", "named_arrays", "layout_difference"]


class IncompleteChunkWarning(UserWarning):
    """A writer was closed while some runs of a chunk lacked records: those runs were not written."""


def named_arrays(params: torch.nn.Module | Mapping[str, Any] | ArrayLike) -> list[tuple[str, np.ndarray]] | None:
    """The floating-point tensors of `params` as a list of (name, array), or None for a flat vector.

    Parameters
    ----------
    params : torch.nn.Module, mapping of str -> tensor or array, or array-like
        A module gives its ``state_dict()``: every floating-point tensor, parameters and
        buffers (BatchNorm's running statistics) alike, the vector that
        ``torch.save(model.state_dict(), ...)`` and ``mianalysis import`` give. A mapping
        (a state_dict) gives its floating-point values in its order; integer values
        (``num_batches_tracked``) are skipped. Anything else is a flat parameter vector.
        Tensors of any floating-point type (bfloat16, float16, float64) become float32,
        bfloat16 and float16 exactly.

    Returns
    -------
    list of (str, numpy.ndarray) or None
        The named tensors as float32 arrays of their shapes; None when `params` is a flat
        vector (read it with :func:`numpy.asarray`).
    """
    torch = sys.modules.get("torch")  # a torch object exists only if torch is imported: never imported here
    if torch is not None and isinstance(params, torch.nn.Module):
        params = params.state_dict()
    if not isinstance(params, Mapping):
        return None
    named: list[tuple[str, np.ndarray]] = []
    for name, value in params.items():
        if torch is not None and torch.is_tensor(value):
            if value.is_floating_point():
                named.append((str(name), value.detach().to("cpu", torch.float32).numpy()))
        elif isinstance(value, np.ndarray) and value.dtype.kind == "f":
            named.append((str(name), value.astype(np.float32, copy=False)))
    return named


def _flat_array(params: Any) -> np.ndarray:
    """A flat parameter vector as a NumPy array; a floating-point tensor as float32 (bfloat16
    and float16 exactly: NumPy has no bfloat16, and a dump is float32 anyway)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.is_tensor(params):
        params = params.detach().to("cpu", torch.float32) if params.is_floating_point() else params.detach().cpu()
    return np.asarray(params)


def layout_difference(shapes: Iterable[tuple[str, Sequence[int]]], expected: Iterable[tuple[str, Sequence[int]]]
                      ) -> str:
    """How the (name, shape) list `shapes` differs from `expected`, in words ("" if it does not)."""
    names, want = dict(shapes), dict(expected)
    lacks = [n for n in want if n not in names]
    extra = [n for n in names if n not in want]
    if lacks:
        return f"lacks {_shown(lacks)}"
    if extra:
        return f"has extra tensors {_shown(extra)}"
    for n, s in want.items():
        if tuple(names[n]) != tuple(s):
            return f"tensor {n!r} has shape {tuple(names[n])}, not {tuple(s)}"
    return "" if list(names) == list(want) else "holds the same tensors in another order"


def _shown(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _as_pairs(layout: Iterable[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) pairs of a layout given as pairs or as LayoutEntry objects."""
    pairs: list[tuple[str, tuple[int, ...]]] = []
    for entry in layout:
        if hasattr(entry, "name") and hasattr(entry, "shape"):
            pairs.append((entry.name, tuple(entry.shape)))
        else:
            try:
                name, shape = entry
                pairs.append((str(name), tuple(int(s) for s in shape)))
            except (TypeError, ValueError):
                raise TypeError(f"`layout` must be a sequence of (name, shape) pairs; got the entry {entry!r}") from None
    if not pairs:
        raise ValueError("`layout` must describe at least one tensor")
    return pairs


class _Chunk:
    """The records of one chunk of runs [start, stop) while it fills: the metrics by name,
    since the dump's metric names may be known only when its first chunk is written."""

    def __init__(self, start: int, stop: int, n_clients: int, n_checkpoints: int, n_params: int) -> None:
        self.start, self.stop = start, stop
        n = stop - start
        self.samples = np.empty((n_clients, n_checkpoints, n, n_params), dtype=np.float32)
        self.metrics: dict[str, np.ndarray] = {}  # metric name -> (n_clients, n_checkpoints, n), NaN where not recorded
        self.filled = np.zeros((n_clients, n_checkpoints, n), dtype=bool)

    def complete_runs(self) -> np.ndarray:
        return np.asarray(self.filled.all(axis=(0, 1)))

    def store_metrics(self, c: int, t: int, i: int, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            if name not in self.metrics:
                self.metrics[name] = np.full(self.filled.shape, np.nan, dtype=np.float32)
            self.metrics[name][c, t, i] = value

    def metric_block(self, names: Sequence[str], a: int, b: int) -> np.ndarray:
        """(n_clients, n_metrics, n_checkpoints, b - a) metrics of runs [start + a, start + b) in the order of `names`."""
        n_clients, n_checkpoints, _ = self.filled.shape
        block = np.full((n_clients, len(names), n_checkpoints, b - a), np.nan, dtype=np.float32)
        for m, name in enumerate(names):
            if name in self.metrics:
                block[:, m] = self.metrics[name][:, :, a:b]
        return block


# The entries of a session's provenance record that the dump fills (collect() and runs_written).
SESSION_FIELDS = ("started", "ended", "argv", "mianalysis", "python", "packages", "platform", "cpu", "threads",
                  "runs_written")


def _check_provenance(provenance: object) -> dict[str, Any]:
    """`provenance` (a dict or None) as it reads back from the manifest; TypeError naming
    `provenance` if it is not a dict of JSON values, ValueError naming an entry the dump fills."""
    if provenance is None:
        return {}
    if not isinstance(provenance, Mapping):
        raise TypeError(f"`provenance` must be a dict or None; got {type(provenance).__name__}")
    taken = sorted(str(k) for k in provenance if str(k) in SESSION_FIELDS)
    if taken:
        raise ValueError(f"`provenance` must not set {taken}: the dump fills {', '.join(SESSION_FIELDS)} of a "
                         "session's record itself; choose other names")
    try:
        return check_meta(dict(provenance))
    except TypeError as exc:
        raise TypeError(str(exc).replace("`meta`", "`provenance`")) from None


class DumpWriter:
    """Writes the records of a training loop into a dump, one chunk of runs at a time.

    Make one with :class:`mianalysis.DumpWriter` and use it in a ``with`` block:
    the dump's writer lock is held from entry to exit. Each chunk of `chunk_size` runs
    (runs [k * chunk_size, (k + 1) * chunk_size)) is kept in memory until every (client,
    checkpoint, run) record of it has come, in any order, and is then written atomically.
    Memory is one chunk's samples per chunk being filled: record a chunk's runs before the
    next chunk's to keep it at one.

    Resuming: entering a writer for a folder that holds a dump with the same `meta`
    (and the same clients, checkpoints, runs and layout) continues it; :meth:`is_written`
    tells the loop which runs to skip, and :meth:`missing_runs` lists those left. A folder
    holding another dump is refused, and nothing there changes.

    The dump itself is created when its first chunk is written; its layout is that of the
    first record and, unless `metrics` is given, its metric names are those of the records
    held then (so checkpoint 0 may be recorded without the loss that later checkpoints
    have). A metric name first seen after that is an error naming `metrics`.

    Leaving the block writes the runs of a partly filled chunk that are complete, warns
    (:class:`IncompleteChunkWarning`) naming the records missing from the others, and
    drops those. A block that fails (an exception, Ctrl-C) writes nothing more: the chunks
    written before it stay, the records of partly filled ones are dropped (with the
    warning, except after the writer's own error for a metric the dump cannot hold, which
    says what to do), and a folder without any written chunk is left as it was.

    Parameters
    ----------
    path : str or Path
        The dump folder (new, empty, or holding the dump to resume).
    clients : sequence
        Client names (stored as strings; :meth:`record` takes the name or its string).
    checkpoints : sequence of int
        The checkpoints each client is recorded at, as iteration (or round) numbers,
        unique; :meth:`record` takes one of these values, not its index.
    runs : int
        Runs the dump holds when complete.
    layout : sequence of (name, shape), optional
        Tensors of the parameter vector. Default: taken from the first record (the
        state_dict's floating-point tensors, or one tensor "params" for a flat vector).
    chunk_size : int, default=64
        Runs written together.
    meta : dict, optional
        Free-form description stored in the manifest (JSON); a dump is resumed only with
        the same `meta`.
    metrics : sequence of str, optional
        Names of per-record metrics (e.g. ``["loss", "accuracy"]``); a record may give any
        of them (one not given is stored as NaN) and no other. Default: the sorted names
        found in the `metrics` of the records held when the first chunk is written (all
        the records of runs [0, chunk_size) when runs are recorded in order); a name first
        seen after that is a ValueError: give every name here when some metric appears only
        in later runs. A name is ASCII letters, digits, "_", "-" and "." (no "/"), and not
        one of the reserved names samples, client, checkpoint, run, parameter, layer
        (ValueError otherwise).
    provenance : dict, optional
        More entries for this writer's record in the dump's provenance (JSON values, under
        names other than those of :func:`mianalysis.provenance.collect` and
        ``runs_written``), stored with the first chunk it writes. Unlike `meta` they may
        differ from session to session and never decide a resume: e.g. the seed of the run
        one ``flwr run`` records (:func:`mianalysis.flower.record_deployment`).
    sketch : Sketch, optional
        Record each params' sketch (:class:`mianalysis.dumps.Sketch`) instead of the
        parameters: every record is checked against `layout` (the parameters' tensors)
        and the dump holds the sketch, its layout the sketch's (``NAME[sketch]`` tensors)
        and its manifest the sketch (:attr:`ParameterDump.sketch`). Memory is then one
        record's parameters plus the chunks' sketches. A dump is resumed only with the
        same sketch.

    Examples
    --------
    >>> import torch
    >>> from mianalysis import DumpWriter
    >>> with DumpWriter("own_loop", clients=["a", "b"], checkpoints=[0, 1],
    ...                           runs=6, chunk_size=4) as w:
    ...     for run in w.missing_runs():       # every run; after an interruption, those left
    ...         for client in ("a", "b"):
    ...             model = torch.nn.Linear(3, 2)
    ...             w.record(run=run, client=client, checkpoint=0, params=model, metrics={"loss": 1.0})
    ...             with torch.no_grad():
    ...                 _ = model.weight.mul_(0.5)     # your training
    ...             w.record(run=run, client=client, checkpoint=1, params=model, metrics={"loss": 0.5})
    >>> w.dump
    ParameterDump('own_loop', clients=['a', 'b'], checkpoints=[0, 1], runs=6/6, params=8)
    >>> [e.name for e in w.dump.layout], w.dump.metric_names
    (['weight', 'bias'], ['loss'])
    """

    def __init__(self, path: str | os.PathLike, *, clients: Sequence[str], checkpoints: Sequence[int], runs: int,
                 layout: Sequence | None = None, chunk_size: int = 64, meta: dict | None = None,
                 metrics: str | Sequence[str] | None = None, provenance: Mapping[str, Any] | None = None,
                 sketch: Sketch | None = None) -> None:
        self.path = Path(path)
        if sketch is not None and not isinstance(sketch, Sketch):
            raise TypeError(f"`sketch` must be a mianalysis.dumps.Sketch or None; got {type(sketch).__name__}")
        self.sketch = sketch
        self.clients = [str(c) for c in clients]
        if not self.clients:
            raise ValueError("`clients` must name at least one client")
        if len(set(self.clients)) != len(self.clients):
            raise ValueError(f"`clients` must be unique; got {self.clients}")
        self.checkpoints = check_checkpoints(checkpoints)  # unique integers (an integral float taken as one)
        if not self.checkpoints:
            raise ValueError("`checkpoints` must not be empty")
        self.n_runs = check_int(runs, "runs", low=1)
        self.chunk_size = check_int(chunk_size, "chunk_size", low=1)
        self.layout = None if layout is None else layout_from_shapes(_as_pairs(layout))
        self.meta = check_meta(meta)
        self.provenance = _check_provenance(provenance)
        if isinstance(metrics, str):
            metrics = [metrics]
        self.metric_names = None if metrics is None else check_metric_names(metrics)
        self._declared = metrics is not None  # the metric names were given (not taken from the records)
        self._seen: set[str] = set()  # metric names of the records held, before the dump exists
        if self.metric_names is not None and len(set(self.metric_names)) != len(self.metric_names):
            raise ValueError(f"`metrics` must be unique names; got {self.metric_names}")
        self.dump: ParameterDump | None = None
        self._client_index = {c: i for i, c in enumerate(self.clients)}
        self._checkpoint_index = {c: i for i, c in enumerate(self.checkpoints)}
        self._open: dict[int, _Chunk] = {}  # chunk start -> _Chunk being filled
        # The runs left to write, as chunks (start, stop), sorted: every run until a dump is resumed.
        self._missing = [(s, min(s + self.chunk_size, self.n_runs)) for s in range(0, self.n_runs, self.chunk_size)]
        self._stack: ExitStack | None = None
        self._fresh = self._was_folder = False
        self._flat_size = 0
        self._guard = threading.Lock()  # records may come from several threads (a Flower app's clients)
        self._refused: ValueError | None = None  # the error for a metric the written dump lacks: the block ends with it, unwarned

    # ------------------------------------------------------------------ the with block
    def __enter__(self) -> DumpWriter:
        stack = ExitStack()
        stack.enter_context(WriterLock(self.path, session=True))  # one open writer per dump
        try:
            self._fresh = not (self.path / MANIFEST).exists()
            self._was_folder = self.path.is_dir()
            stack.enter_context(unwritten_dump_discarded(self.path))
            if self._fresh:  # the dump is created with its first chunk; a folder it cannot be made in is refused now
                check_creatable(self.path)
            else:
                self._resume()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None  # set by __enter__
        try:
            self._close(failed=exc_type is not None, warn=exc is None or exc is not self._refused)
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        if exc_type is None and self._fresh and self.dump is not None and self.dump.written_runs == 0:
            discard_unwritten_dump(self.path, keep_folder=self._was_folder)  # nothing recorded: nothing left
        return stack.__exit__(exc_type, exc, tb)

    def _resume(self) -> None:
        dump = ParameterDump.open_or_create(self.path, meta=self.meta)  # the same meta, and verified
        want = {"clients": self.clients, "checkpoints": self.checkpoints, "runs": self.n_runs}
        have = {"clients": dump.clients, "checkpoints": dump.checkpoints, "runs": dump.n_runs}
        want["sketch"], have["sketch"] = self.sketch, dump.sketch
        if self.layout is not None:
            want["layout"] = [(e.name, e.shape) for e in self.layout]
            have["layout"] = [(e.name, e.shape) for e in _source_layout(dump)]
        if self.metric_names is not None:
            want["metrics"], have["metrics"] = self.metric_names, dump.metric_names
        diff = {k: (have[k], want[k]) for k in want if have[k] != want[k]}
        if diff:
            raise DumpError(f"{self.path} holds a dump with other settings (existing, requested): {diff}; nothing "
                            "was changed: choose another folder")
        self.layout = _source_layout(dump)
        self.metric_names = dump.metric_names
        self._attach(dump)

    def _attach(self, dump: ParameterDump) -> None:
        self.dump = dump
        if self.provenance:  # this session's record, written with its first chunk
            dump._session = {**(dump._session if dump._session is not None else collect()), **self.provenance}
        self._missing = dump.missing_chunks(self.chunk_size)

    def _create(self) -> ParameterDump:
        """Create the dump with its first chunk: the metric names, unless given, are those of
        the records held."""
        if self.metric_names is None:
            self.metric_names = sorted(self._seen)
        dump = ParameterDump.open_or_create(
            self.path, meta=self.meta, clients=self.clients, checkpoints=self.checkpoints, n_runs=self.n_runs,
            layout=self.layout, metric_names=self.metric_names, sketch=self.sketch)
        self._attach(dump)
        return dump

    # ------------------------------------------------------------------ records
    def is_written(self, run: int) -> bool:
        """Whether run `run` is already in the dump (written by this writer or before a resume)."""
        run = check_int(run, "run", low=0, high=self.n_runs - 1)
        with self._guard:
            return self._chunk_of(run) is None

    def missing_runs(self) -> list[int]:
        """The runs not yet written, in order (a resumed loop can iterate over these)."""
        with self._guard:
            return [r for start, stop in self._missing for r in range(start, stop)]

    def record(self, *, run: int, client: object, checkpoint: int,
               params: torch.nn.Module | Mapping[str, Any] | ArrayLike,
               metrics: Mapping[str, float] | None = None) -> None:
        """Record the parameters of `client` at `checkpoint` of run `run`.

        Parameters
        ----------
        run : int
            In [0, runs).
        client
            One of the writer's clients (its name, or anything whose ``str`` is one).
        checkpoint : int
            One of the writer's checkpoints (the value, e.g. the iteration, not its index).
        params : torch.nn.Module, state_dict, or array-like
            See :func:`named_arrays`: a module's ``state_dict()`` floating-point tensors, a
            state_dict's, or a flat vector of the layout's size. Copied: the model may
            train on after this call.
        metrics : dict of str -> float, optional
            Per-record metrics (e.g. ``{"loss": 0.3}``): any names until the first chunk is
            written, then those of the dump (the writer's `metrics`); one not given is
            stored as NaN.

        Raises
        ------
        ValueError
            Naming the record: an unknown client or checkpoint, a run out of range or already
            written, a record given twice, tensors or a size unlike the layout, non-finite
            parameters, an unknown metric. Nothing is stored for it and no written chunk
            changes.
        """
        if self._stack is None:
            raise RuntimeError("record inside the `with` block of the writer (`with DumpWriter(...) as w:`)")
        run = check_int(run, "run", low=0, high=self.n_runs - 1)
        what = f"the record of run {run}, client {client!r}, checkpoint {checkpoint!r}"
        c = self._client_index.get(str(client))
        if c is None:
            raise ValueError(f"{what}: `client` must be one of {self.clients}; got {client!r}")
        if isinstance(checkpoint, bool) or checkpoint not in self._checkpoint_index:
            raise ValueError(f"{what}: `checkpoint` must be one of {self.checkpoints} (the value, not its index); "
                             f"got {checkpoint!r}")
        t = self._checkpoint_index[checkpoint]
        if metrics is not None and not isinstance(metrics, Mapping):
            raise TypeError(f"{what}: `metrics` must be a dict of metric name -> number; got {type(metrics).__name__}")
        named = named_arrays(params)
        if named == []:
            raise ValueError(f"{what}: `params` holds no floating-point tensors")
        if named is None:
            flat = _flat_array(params)
            if flat.dtype.kind not in "biuf" or flat.ndim != 1:
                raise ValueError(f"{what}: `params` must be a module, a state_dict or a flat vector (1-D numbers); "
                                 f"got {type(params).__name__} of shape {flat.shape} and dtype {flat.dtype}")
            self._flat_size = flat.size
        with self._guard:
            if self.layout is None:
                self.layout = layout_from_shapes([(n, a.shape) for n, a in named] if named is not None
                                                 else [("params", (self._flat_size,))])
            vector = self._vector(named, flat if named is None else None, what)
            values = self._metric_values(metrics, what)
            where = find_nonfinite(vector[None, None, :], [checkpoint], checkpoints=[t], first_run=run,
                                   layout=self.layout)
            if where is not None:
                raise ValueError(f"{what}: the parameters are not finite: {where.values_text()}; a dump holds finite "
                                 "parameters only (nothing was recorded)")
            span = self._chunk_of(run)
            if span is None:
                raise ValueError(f"{what}: run {run} is already written in {self.path}; skip it "
                                 "(`if w.is_written(run): continue`)")
            if self.sketch is not None:  # what the dump holds: the sketch of the checked parameters
                vector = self.sketch.apply_vector(vector, [(e.name, e.shape) for e in self.layout])
            chunk = self._open.get(span[0])
            if chunk is None:
                chunk = self._open[span[0]] = _Chunk(*span, len(self.clients), len(self.checkpoints), vector.size)
            i = run - chunk.start
            if chunk.filled[c, t, i]:
                raise ValueError(f"{what} was given twice; each (run, client, checkpoint) is recorded once")
            chunk.samples[c, t, i] = vector
            chunk.store_metrics(c, t, i, values)
            chunk.filled[c, t, i] = True
            if self.dump is None:
                self._seen.update(values)
            if chunk.filled.all():
                self._write(chunk, chunk.start, chunk.stop)
                del self._open[chunk.start]

    def _vector(self, named: list[tuple[str, np.ndarray]] | None, flat: np.ndarray | None, what: str) -> np.ndarray:
        layout = self.layout
        assert layout is not None  # set by record from its first record
        n_params = layout[-1].offset + layout[-1].size
        if named is None:
            assert flat is not None  # record passes the flat vector when there are no named tensors
            if flat.size != n_params:
                raise ValueError(f"{what}: `params` has {flat.size} values; the layout has {n_params} "
                                 f"({_shown([(e.name, e.shape) for e in layout])})")
            return flat.astype(np.float32)
        expected = [(e.name, e.shape) for e in layout]
        shapes = [(n, a.shape) for n, a in named]
        diff = layout_difference(shapes, expected)
        if diff and not diff.endswith("another order"):  # the layout's order is used whatever the dict's
            raise ValueError(f"{what}: `params` {diff}, compared with the layout {_shown(expected)}")
        arrays = dict(named)
        return np.concatenate([arrays[e.name].reshape(-1) for e in layout]).astype(np.float32, copy=False)

    def _metric_values(self, metrics: Mapping[str, float] | None, what: str) -> dict[str, float]:
        """A record's metrics as {name: value}, checked: names the dump can hold, numbers."""
        values: dict[str, float] = {}
        for name, value in (metrics or {}).items():
            if self.metric_names is not None and name not in self.metric_names:
                raise self._unknown_metric(str(name), what, self.metric_names)
            try:
                values[str(name)] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"{what}: metric {name!r} must be a number; got {value!r}") from None
        check_metric_names(n for n in values if n not in self._seen)
        return values

    def _unknown_metric(self, name: str, what: str, names: list[str]) -> ValueError:
        """The error for metric `name`, which the dump (metric names `names`) cannot hold;
        the block ends with it without an IncompleteChunkWarning (the error says what to do)."""
        if self._declared:
            self._refused = ValueError(f"{what}: metric {name!r} is not one of {names} (the writer's `metrics`)")
            return self._refused
        every = sorted({*names, name})
        self._refused = ValueError(
            f"{what}: metric {name!r} is not one of {names}, the metric names of the dump {self.path}, fixed when its "
            f"first chunk was written (from the records held then); to record a metric that first appears later, "
            f"pass every name to the writer, DumpWriter(..., metrics={every}), and record into a new folder")
        return self._refused

    def _chunk_of(self, run: int) -> tuple[int, int] | None:
        """(start, stop) of the missing chunk holding `run`, or None if `run` is written."""
        i = bisect.bisect_right(self._missing, (run, float("inf"))) - 1
        if i >= 0 and self._missing[i][0] <= run < self._missing[i][1]:
            return self._missing[i]
        return None

    def _write(self, chunk: _Chunk, start: int, stop: int) -> None:
        """Write runs [start, stop) of `chunk` (all their records present), creating the dump
        with the first chunk."""
        dump = self.dump if self.dump is not None else self._create()
        assert self.metric_names is not None  # fixed by _create or _resume
        a, b = start - chunk.start, stop - chunk.start
        metrics = chunk.metric_block(self.metric_names, a, b)
        dump.write_chunk(start, stop, {c: chunk.samples[i, :, a:b] for i, c in enumerate(self.clients)},
                         {c: metrics[i] for i, c in enumerate(self.clients)})
        self._missing = dump.missing_chunks(self.chunk_size)

    def pending(self) -> list[tuple[int, str, int]]:
        """The records still missing from the chunks being filled: a list of (run, client,
        checkpoint) for every run that has at least one record."""
        with self._guard:
            missing = []
            for chunk in sorted(self._open.values(), key=lambda ch: ch.start):
                for i in np.flatnonzero(chunk.filled.any(axis=(0, 1))):
                    for c, t in zip(*np.nonzero(~chunk.filled[:, :, i])):
                        missing.append((chunk.start + int(i), self.clients[c], self.checkpoints[t]))
            return missing

    def _close(self, failed: bool, warn: bool = True) -> None:
        """Leaving the block: write the complete runs of partly filled chunks (not after a
        failure: then nothing more is written); warn about the runs left out (if `warn`)."""
        if not self._open:
            return
        missing = self.pending()
        lost = []
        for chunk in sorted(self._open.values(), key=lambda ch: ch.start):
            complete = chunk.complete_runs() & (not failed)
            for start, stop in _true_ranges(complete):
                self._write(chunk, chunk.start + start, chunk.start + stop)
            lost += [chunk.start + int(i) for i in np.flatnonzero(chunk.filled.any(axis=(0, 1)) & ~complete)]
        self._open.clear()
        if lost and warn:
            shown = ", ".join(f"(run {r}, client {c!r}, checkpoint {t})" for r, c, t in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            why = (f"the block failed before their chunks were complete (records missing: {shown}{more})" if failed
                   else f"records missing: {shown}{more}")
            warnings.warn(IncompleteChunkWarning(
                f"{self.path}: runs {_shown(lost, 80)} were not written: {why}; record them again (every client and "
                "checkpoint of a run) with the same settings to complete the dump"), stacklevel=3)


def _source_layout(dump: ParameterDump) -> list[LayoutEntry]:
    """The layout of the tensors a dump's records are taken of: its sketch's source, if it holds a sketch."""
    return dump.layout if dump.sketch_source is None else layout_from_shapes(dump.sketch_source)


def _true_ranges(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of True in a boolean vector."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]
