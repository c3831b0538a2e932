"""ParameterDump: samples of clients' parameter vectors on disk.

A dump is a folder::

    manifest.json          format version, meta (task, settings, seed), clients,
                           checkpoints, parameter layout, metric names, completed chunks,
                           provenance (one record per writing session): its fields and
                           checks are :mod:`mianalysis.dumps.manifest`
    client_<i>.f32         float32, shape (n_checkpoints, n_runs, n_params), C order
    metrics_<i>.f32        float32, shape (n_metrics, n_checkpoints, n_runs), C order

Array files are raw little-endian float32, read by memory map. Runs are written in chunks;
after a chunk is written and flushed its SHA-256 checksums are added to the manifest, and
the manifest is replaced atomically (write a temporary file, fsync, rename). A dump killed
while writing is therefore always valid: every chunk the manifest lists is complete, and a
writer resumes by writing the runs it does not list.

Chunks may be written in any order (several workers, a user's own loop): any runs
[start, stop) that overlap no written chunk. The manifest lists them sorted by start.
:attr:`ParameterDump.completed_runs` is the length of the written prefix from run 0 (what
analysis reads), :attr:`ParameterDump.written_runs` counts every written run, and
:meth:`ParameterDump.missing_ranges` lists the gaps.

``provenance`` lists the sessions that wrote the dump, oldest first (see
:func:`mianalysis.provenance.collect`): code and package versions, machine, threads, command line,
start time, and the end time, threads and runs written as of the session's last completed
chunk.
It is not part of `meta`, so it never decides whether a rerun resumes.

One process writes a dump at a time: creating it, importing into it and writing chunks
take its writer lock, the hidden file ``.NAME.lock`` beside the folder (see
:mod:`mianalysis._internal.locking`); a second writer gets a LockedError naming the first. Readers
take no lock.

A dump's files are regular files inside its folder. A symbolic link, a folder or a fifo in
the place of one is damage (DumpError naming it, from open, verify and any read or write):
files are opened with ``O_NOFOLLOW`` and checked with ``fstat``, so nothing is ever read
from or written into a file outside the dump through a link placed in it.

The layout of the flattened parameter vector (which columns hold which tensor) is
:mod:`mianalysis.dumps.layout`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from .._internal.locking import WriterLock
from ..provenance import collect
from .layout import LayoutEntry, NonFinite, find_nonfinite, layout_columns, layout_from_shapes, select_layout
from .manifest import (DTYPE, FORMAT_VERSION, FULL_FORMAT_VERSION, MANIFEST, DumpError, check_checkpoints, check_meta,
                       check_metric_names, parse_manifest)
from .sketch import Sketch, sketch_from_record

__all__ = ["ParameterDump", "CREATING", "unwritten_dump_discarded", "discard_unwritten_dump", "check_creatable"]

CREATING = ".mianalysis-creating"  # in a folder a dump is being created in: the files it will hold


def _iterations_or_indices(checkpoints: Any, n: int) -> list[int]:
    """`checkpoints` as n ints where they are that, else 0, ..., n - 1 (for messages only)."""
    try:
        iterations = [int(c) for c in checkpoints]
    except (TypeError, ValueError):
        iterations = []
    return iterations if len(iterations) == n else list(range(n))


def _layout_or_none(named_shapes: Any) -> list[LayoutEntry] | None:
    """Layout entries of (name, shape) pairs, or None where they are not that (for messages only)."""
    try:
        return layout_from_shapes(named_shapes)
    except (TypeError, ValueError):
        return None


def _shown(value: object, limit: int = 60) -> str:
    """repr of a value for a one-line message, shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _client_file(index: int) -> str:
    return f"client_{index}.f32"


def _metrics_file(index: int) -> str:
    return f"metrics_{index}.f32"


def _not_regular(st: os.stat_result) -> str | None:
    """Why a file whose lstat is `st` cannot be a file of a dump, or None if it can."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    return None if stat.S_ISREG(st.st_mode) else "is not a regular file"


def _member_error(file: str | os.PathLike, what: str) -> DumpError:
    return DumpError(f"{file} {what}: the dump is damaged (a dump's files are regular files inside its folder, "
                     "and nothing is read or written through anything else); restore the file or recreate the dump")


def _manifest_identity(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of a manifest without its chunks and provenance: what never changes while a
    dump is written (its clients, checkpoints, runs, layout, metrics, meta)."""
    fixed = {k: v for k, v in manifest.items() if k not in ("chunks", "provenance")}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()


def _open_member(file: str | os.PathLike, flags: int) -> int:
    """A descriptor of the dump's file `file` opened with `flags` (O_RDONLY or O_RDWR), never
    through a symbolic link and only if it is a regular file; DumpError naming it otherwise."""
    try:  # O_NONBLOCK: opening a fifo must not wait for a writer (no effect on regular files)
        fd = os.open(file, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        try:
            what = _not_regular(os.lstat(file)) or "is not a regular file"
        except OSError:
            raise exc from None
        raise _member_error(file, what) from None
    why = _not_regular(os.fstat(fd))
    if why:
        os.close(fd)
        raise _member_error(file, why)
    return fd


def _create_file(path: str | os.PathLike, size: int = 0, data: bytes = b"") -> None:
    """Create the new regular file `path` holding `data`, then `size` bytes long (never
    through a link, never over an existing file: FileExistsError)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        if data:
            os.write(fd, data)
        if size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _create_array_file(path: str | os.PathLike, size: int) -> None:
    _create_file(path, size)


def _write_json_atomically(path: Path, obj: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        # A leftover temporary file (or anything planted in its place) is removed, never written through.
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as fh:
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


def _clear_killed_creation(folder: Path) -> None:
    """Remove what a creation of a dump in `folder` that was killed left there: the files its
    CREATING marker lists, the manifest's temporary file and the marker. Only when the folder
    holds nothing else and no manifest; otherwise nothing is touched (the folder is then
    refused as not empty)."""
    marker = folder / CREATING
    try:
        if _not_regular(os.lstat(marker)):
            return
        listed = json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return
    names = {p.name for p in folder.iterdir()}
    if MANIFEST in names or not names <= set(listed) | {MANIFEST + ".tmp", CREATING}:
        return
    for name in sorted(names - {CREATING}) + [CREATING]:
        (folder / name).unlink()  # a link is removed, never followed; a folder fails (OSError)



def check_creatable(path: str | os.PathLike) -> None:
    """DumpError unless a dump can be created at `path`: nothing there, or an empty folder
    (after removing what a killed creation left in it). Call it holding the writer lock."""
    path = Path(path)
    if path.is_dir():
        _clear_killed_creation(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DumpError(f"{path} already exists and is not an empty folder; nothing was written")


@contextmanager
def unwritten_dump_discarded(path: str | os.PathLike) -> Iterator[None]:
    """A block that may create a dump at `path`: if the block fails or is interrupted and
    `path` held no dump when it began, a dump it created without completing a chunk is
    removed again (:func:`discard_unwritten_dump`), so that nothing is left behind. Enter it
    with the writer lock held (``with WriterLock(path), unwritten_dump_discarded(path):``)."""
    path = Path(path)
    fresh, was_folder = not (path / MANIFEST).exists(), path.is_dir()
    try:
        yield
    except BaseException:
        if fresh:
            discard_unwritten_dump(path, keep_folder=was_folder)
        raise


def discard_unwritten_dump(path: str | os.PathLike, *, keep_folder: bool = False) -> bool:
    """Remove the dump at `path` if it holds no completed run, and its staging folder.

    A writer that created a dump and then failed or was interrupted before its first chunk
    calls this (holding the writer lock) so that nothing is left behind: a rerun with
    corrected settings is not refused because of an empty dump with the old ones. A dump
    with completed runs is kept (a rerun resumes it). `keep_folder` puts back the empty
    folder that `path` was before the dump was built in it:
    only the dump's own files are removed from it. Returns whether a dump was removed.
    """
    path = Path(path)
    shutil.rmtree(path.parent / f".{path.name}.creating", ignore_errors=True)
    try:
        chunks = json.loads((path / MANIFEST).read_text())["chunks"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if chunks:
        return False
    if not keep_folder:
        shutil.rmtree(path)
        return True
    # The dump was built inside a folder that existed (perhaps the working directory): only
    # its own files are removed, the folder itself stays where it is.
    n_clients = len(json.loads((path / MANIFEST).read_text())["clients"])
    names = [_client_file(i) for i in range(n_clients)] + [_metrics_file(i) for i in range(n_clients)]
    for name in names + [CREATING, MANIFEST + ".tmp", MANIFEST]:
        try:
            (path / name).unlink()  # a link is removed, never followed
        except FileNotFoundError:
            pass
    return True

def _read_manifest(path: Path) -> dict[str, Any]:
    """The checked manifest of the dump folder `path` (see
    :func:`~mianalysis.dumps.manifest.parse_manifest`); DumpError otherwise."""
    if not path.exists():
        raise DumpError(f"dump {path} does not exist")
    mpath = path / MANIFEST
    if not path.is_dir() or not os.path.lexists(mpath):
        raise DumpError(f"{path} is not a dump: no {MANIFEST} in it")
    with os.fdopen(_open_member(mpath, os.O_RDONLY), "rb") as fh:
        return parse_manifest(fh.read(), mpath)  # checked before anything else reads it


class ParameterDump:
    """Samples of several clients' flattened parameter vectors at training checkpoints.

    Use :meth:`open` for an existing dump, :meth:`create` to start one (the sampler does),
    :meth:`from_arrays` for your own arrays; :class:`~mianalysis.dumps.writer.DumpWriter`
    records your own training loop, :func:`~mianalysis.dumps.importers.import_checkpoints`
    imports a folder of PyTorch state_dict files, and :mod:`mianalysis.dumps.arrays` reads a
    dump as a Dask array or an xarray dataset.

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
        Runs written from run 0 without a gap (the dump is usable up to here).
    written_runs : int
        Runs written so far, in whatever order (see :meth:`missing_ranges`).
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
    sketch : Sketch or None
        The sketch recorded instead of the parameters (:mod:`mianalysis.dumps.sketch`):
        the layout is then the sketch's; None for a dump of the parameters themselves.
    sketch_source : list of (str, tuple) or None
        The (name, shape) of the tensors the sketch was taken of (None without a sketch).

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
    >>> dump.samples("b", iteration=10).shape       # (runs, params) at iteration 10
    (100, 3)
    >>> dump.samples("b", index=1, layer="b").shape  # the same checkpoint by position; only the tensor "b"
    (100, 1)
    >>> bool(np.all(dump.samples("b", index=1) == 2 * dump.samples("a", index=1)))   # float32 on disk
    True
    >>> dump.verify()                                # sizes and checksums: runs verified
    100
    """

    def __init__(self, path: str | os.PathLike, manifest: dict) -> None:
        self.path = Path(path)
        # Chunks sorted by start (a hand-edited manifest may list them otherwise); written back so.
        self._manifest = {**manifest, "chunks": sorted(manifest["chunks"], key=lambda c: c["start"])}
        self.clients = list(manifest["clients"])
        self.checkpoints = [int(c) for c in manifest["checkpoints"]]
        self.n_runs = int(manifest["n_runs"])
        self.layout = [LayoutEntry(e["name"], tuple(e["shape"]), int(e["offset"])) for e in manifest["layout"]]
        self.n_params = int(manifest["n_params"])
        self.metric_names = list(manifest["metrics"])
        self.meta = manifest["meta"]
        self.sketch: Sketch | None = None
        self.sketch_source: list[tuple[str, tuple[int, ...]]] | None = None
        if "sketch" in manifest:  # checked with the manifest (parse_manifest)
            self.sketch, self.sketch_source = sketch_from_record(manifest["sketch"],
                                                                 [(e.name, e.shape) for e in self.layout])
        self._session: dict[str, Any] | None = None  # this writer's provenance record, collected when it starts writing
        self._session_index: int | None = None  # its position in the manifest's provenance list, once written
        # (manifest identity, chunk records) on a copy that travelled (see __getstate__); checked on first read
        self._sent_identity: tuple[str, list[dict[str, Any]]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a copy sent to another process (a Dask worker) carries: the absolute path (a
        relative one would name a folder of the receiver's working folder) and the identity
        of the manifest this object was opened with, which the copy checks against the
        manifest at that path before it reads a file (:meth:`_check_sent`)."""
        state = self.__dict__.copy()
        state["path"] = Path(os.path.abspath(self.path))
        state["_sent_identity"] = (_manifest_identity(self._manifest), self._manifest["chunks"])
        return state

    def _check_sent(self) -> None:
        """DumpError (one line) unless the dump at this copy's path is the one it was sent as:
        the same manifest identity (everything but chunks and provenance) and every chunk
        the sender knew, with the same checksums (a sampler may have added chunks since)."""
        assert self._sent_identity is not None  # called only on a copy that travelled
        identity, chunks = self._sent_identity
        import socket

        where = f"on {socket.gethostname()} (working folder {os.getcwd()})"
        hint = ("a Dask worker reads the dump at the same path as this process: give the workers the same files at "
                "the same path (a shared file system)")
        try:
            found = type(self).open(self.path)
        except DumpError as exc:
            raise DumpError(f"cannot read the dump {self.path} {where}: {exc}; {hint}") from None
        known = {json.dumps(c, sort_keys=True) for c in found._manifest["chunks"]}
        missing = [c for c in chunks if json.dumps(c, sort_keys=True) not in known]
        if _manifest_identity(found._manifest) != identity or missing:
            cause = (f"its chunk of runs {missing[0]['start']}-{missing[0]['stop']} differs or is missing" if missing
                     and _manifest_identity(found._manifest) == identity else "its manifest differs")
            raise DumpError(f"the folder {self.path} {where} is not the dump this process opened ({cause}); {hint}")
        self._sent_identity = None

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, path: str | os.PathLike, *, clients: Sequence[str], checkpoints: Sequence[int], n_runs: int,
               layout: Sequence, metric_names: Sequence[str] = (), meta: dict | None = None,
               sketch: Sketch | None = None) -> ParameterDump:
        """Start an empty dump in a new (or empty) folder and return it.

        With `sketch` (a :class:`~mianalysis.dumps.sketch.Sketch`) the dump records the
        sketch of the parameters whose tensors `layout` describes: its layout is the
        sketch's (``sketch.layout``), its manifest records the sketch (format version 2),
        and what is written to it must be sketched already (the writer and the sampler do).

        The dump's writer lock (see :mod:`mianalysis._internal.locking`) is held while it is built,
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
        checkpoints = check_checkpoints(checkpoints)  # unique integers: a checkpoint is read by its iteration
        if not checkpoints:
            raise ValueError("`checkpoints` must not be empty")
        if int(n_runs) < 1:
            raise ValueError(f"`n_runs` must be >= 1; got {n_runs}")
        if not layout:
            raise ValueError("`layout` must describe at least one tensor")
        meta = check_meta(meta)  # stored in the manifest: checked before anything is created
        record = None
        if sketch is not None:
            if not isinstance(sketch, Sketch):
                raise TypeError(f"`sketch` must be a mianalysis.dumps.Sketch or None; got {type(sketch).__name__}")
            shapes = [(e.name, e.shape) for e in layout]
            record, layout = sketch.record(shapes), layout_from_shapes(sketch.layout(shapes))
        n_params = layout[-1].offset + layout[-1].size
        manifest = {
            "format_version": FULL_FORMAT_VERSION if sketch is None else FORMAT_VERSION,
            "meta": meta,
            "clients": clients,
            "checkpoints": checkpoints,
            "n_runs": int(n_runs),
            "n_params": int(n_params),
            "layout": [e.to_json() for e in layout],
            "metrics": check_metric_names(metric_names),
            "dtype": DTYPE.str,
            "chunks": [],
            "provenance": [{**collect(), "runs_written": None}],
        }
        if record is not None:
            manifest["sketch"] = record
        with WriterLock(path):  # held from the check until the dump is in place
            check_creatable(path)
            return cls._build(path, manifest)

    @classmethod
    def _build(cls, path: Path, manifest: dict[str, Any]) -> ParameterDump:
        """Write an empty dump with `manifest` in a hidden sibling folder and rename it to
        `path`, so that a process killed while creating leaves no half-made dump at `path`.
        The caller holds the writer lock (a staging folder found here is a killed creator's).
        An existing (empty) folder at `path` is never replaced: the dump is created in it."""
        if path.is_dir():  # a folder the user named, perhaps the working directory
            return cls._build_in_place(path, manifest)
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
            os.replace(staging, path)  # `path` does not exist (an existing folder is built in place)
        except BaseException as exc:  # an error or an interruption: no staging folder is left behind
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError):
                raise DumpError(f"could not create the dump {path} ({exc}); nothing was written there") from exc
            raise
        dump.path = path
        dump._session, dump._session_index = manifest["provenance"][0], 0
        return dump

    @classmethod
    def _build_in_place(cls, path: Path, manifest: dict[str, Any]) -> ParameterDump:
        """Write an empty dump with `manifest` into the empty folder `path`: first the hidden
        file CREATING listing the array files, then the array files, then the manifest
        (atomically), then CREATING is removed. A process killed on the way leaves no
        manifest, so nothing that opens as a dump; the next creation removes what CREATING
        lists (see _clear_killed_creation). The caller holds the writer lock."""
        dump = cls(path, manifest)
        files = [(name, int(np.prod(shape)) * DTYPE.itemsize) for i in range(len(dump.clients))
                 for name, shape in ((_client_file(i), dump._sample_shape()), (_metrics_file(i), dump._metric_shape()))]
        created = []
        try:
            _create_file(path / CREATING, data=json.dumps([name for name, _ in files]).encode())
            created.append(path / CREATING)
            for name, size in files:
                _create_array_file(path / name, size)
                created.append(path / name)
            _write_json_atomically(path / MANIFEST, manifest)
        except BaseException as exc:  # an error or an interruption: the folder is left as it was, empty
            for file in [path / MANIFEST, path / (MANIFEST + ".tmp")] + created[::-1]:
                try:
                    file.unlink(missing_ok=True)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise DumpError(f"could not create the dump {path} ({exc}); nothing was written there") from exc
            raise
        try:
            (path / CREATING).unlink()
        except OSError:
            pass  # the manifest is written: the dump is complete, the marker only a leftover
        dump._session, dump._session_index = manifest["provenance"][0], 0
        return dump

    @classmethod
    def open_or_create(cls, path: str | os.PathLike, *, meta: dict, **create_args: Any) -> ParameterDump:
        """Resume the dump at `path` if it was written with the same `meta`, else create it.

        The writer lock is held while deciding and creating; hold it yourself around the
        writing that follows (the sampler does) to keep other writers out in between.

        A dump that is resumed is verified first (:meth:`verify`: file sizes and the
        SHA-256 of every completed chunk), so that no run is added to a damaged dump. This
        reads the whole dump once, at the disk's (or page cache's) read speed
        (``python benchmarks/bench_verify.py`` measures it): small beside the sampling that
        follows, so every chunk is verified at any size.

        Raises
        ------
        DumpError
            If `path` holds a dump with other `meta` (the differences are listed), a damaged
            dump (the file and runs are named), or is a non-empty folder that is not a dump.
            Nothing there is changed.
        LockedError
            If another process is writing `path`.
        """
        meta = check_meta(meta)
        path = Path(path)
        with WriterLock(path):
            if os.path.lexists(path / MANIFEST):
                dump = cls.open(path)
                if dump.meta != meta:
                    diff = {k: (dump.meta.get(k), meta.get(k)) for k in [*meta, *(k for k in dump.meta if k not in meta)]
                            if dump.meta.get(k) != meta.get(k)}  # a setting only one side records too
                    raise DumpError(f"{path} holds a dump with other settings (existing, requested): {diff}; "
                                    "choose another folder")
                try:  # what the resume builds on: every completed chunk's checksums
                    dump.verify()
                except DumpError as exc:
                    raise DumpError(f"{exc}; the dump cannot be resumed (new runs would build on damaged ones): "
                                    "move it aside and start again in a new folder") from None
                dump._session = collect()  # added to the provenance with the first chunk this session writes
                return dump
            return cls.create(path, meta=meta, **create_args)

    @classmethod
    def from_arrays(cls, path: str | os.PathLike, samples: Mapping[str, ArrayLike], *,
                    checkpoints: Sequence[int] | None = None, layout: Sequence | None = None,
                    metrics: Mapping | None = None, meta: dict | None = None) -> ParameterDump:
        """Write your own samples as a dump.

        Parameters
        ----------
        path : str or Path
            A new folder.
        samples : dict of name -> array-like, or sequence of array-like
            For each client, an array of shape (n_checkpoints, n_runs, n_params), or
            (n_runs, n_params) for a single checkpoint. All clients the same shape.
        checkpoints : sequence of int, optional
            Iteration of each checkpoint, unique; default 0, 1, 2, ... An integral float
            (2.0) is taken as its integer; see
            :func:`~mianalysis.dumps.manifest.check_checkpoints`.
        layout : sequence of (name, shape), optional
            Tensors making up the parameter vector; default one tensor "params".
        metrics : dict of client -> dict of metric name -> array (n_checkpoints, n_runs), optional
        meta : dict, optional

        Returns
        -------
        ParameterDump
        """
        from .._internal.validation import check_samples

        if not isinstance(samples, dict):
            samples = {str(i): a for i, a in enumerate(samples)}
        if not samples:
            raise ValueError("`samples` must hold at least one client")
        if checkpoints is not None:  # unique integers, before a message about the samples names them
            checkpoints = check_checkpoints(checkpoints)
        arrays: dict[str, np.ndarray] = {}
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
        checkpoints = list(range(n_ckpt)) if checkpoints is None else checkpoints
        if len(checkpoints) != n_ckpt:
            raise ValueError(f"`checkpoints` has {len(checkpoints)} entries for {n_ckpt} checkpoints")
        layout = layout_from_shapes(layout if layout is not None else [("params", (n_params,))])
        if layout[-1].offset + layout[-1].size != n_params:
            raise ValueError(
                f"`layout` describes {layout[-1].offset + layout[-1].size} parameters; samples have {n_params}"
            )
        # Metrics and meta are checked here, before the dump is created: a rejected call leaves nothing.
        if metrics is None:
            metrics = {}
        if not isinstance(metrics, dict):
            raise TypeError(f"`metrics` must be a dict of client -> dict of metric name -> array; "
                            f"got {type(metrics).__name__}")
        metrics = {str(client): per for client, per in metrics.items()}
        unknown = sorted(set(metrics) - set(arrays))
        if unknown:
            raise ValueError(f"`metrics` names clients that have no samples: {unknown}; clients: {list(arrays)}")
        for client, per in metrics.items():
            if not isinstance(per, dict):
                raise TypeError(f"`metrics[{client!r}]` must be a dict of metric name -> array (n_checkpoints, "
                                f"n_runs); got {type(per).__name__}")
        metric_names = check_metric_names(sorted({str(m) for per in metrics.values() for m in per}))
        metric_arrays = {}
        for name in arrays:
            per = {str(k): v for k, v in metrics.get(name, {}).items()}
            m = np.full((len(metric_names), n_ckpt, n_runs), np.nan, dtype=np.float32)
            for j, mname in enumerate(metric_names):
                if mname in per:
                    value = np.asarray(per[mname])
                    label = f"`metrics[{name!r}][{mname!r}]`"
                    if value.dtype.kind not in "biuf":
                        raise TypeError(f"{label} must be numeric; got dtype {value.dtype}")
                    if value.shape != (n_ckpt, n_runs) and not (n_ckpt == 1 and value.shape == (n_runs,)):
                        raise ValueError(f"{label} must have shape {(n_ckpt, n_runs)} (checkpoints, runs); "
                                         f"got {value.shape}")
                    m[j] = value.astype(np.float32).reshape(n_ckpt, n_runs)
            metric_arrays[name] = m
        meta = check_meta(meta)
        # One writer from creation to the written samples; all or nothing: a failed write leaves no empty dump.
        with WriterLock(path), unwritten_dump_discarded(path):
            dump = cls.create(
                path, clients=list(arrays), checkpoints=checkpoints, n_runs=n_runs, layout=layout,
                metric_names=metric_names, meta=meta,
            )
            dump.write_chunk(0, n_runs, arrays, metric_arrays)
        return dump

    @classmethod
    def open(cls, path: str | os.PathLike) -> ParameterDump:
        """Open an existing dump, checking its manifest field by field (see
        :func:`~mianalysis.dumps.manifest.check_manifest`) and its file sizes, before any file
        is mapped (not checksums: see verify).

        Raises
        ------
        DumpError
            One line naming the file and the field or file that is missing or damaged.
        """
        path = Path(path)
        manifest = _read_manifest(path)
        try:
            dump = cls(path, manifest)
        except (KeyError, TypeError, ValueError) as exc:
            raise DumpError(f"{path / MANIFEST} is damaged: {exc!r}") from exc
        dump._check_files()
        return dump

    def _sample_shape(self) -> tuple[int, int, int]:
        return (len(self.checkpoints), self.n_runs, self.n_params)

    def _metric_shape(self) -> tuple[int, int, int]:
        return (len(self.metric_names), len(self.checkpoints), self.n_runs)

    def _check_files(self) -> None:
        layout_params = self.layout[-1].offset + self.layout[-1].size if self.layout else 0
        if layout_params != self.n_params:
            raise DumpError(f"{self.path / MANIFEST}: layout describes {layout_params} parameters, n_params is {self.n_params}")
        stop = 0
        for chunk in self._manifest["chunks"]:  # sorted by start
            if chunk["start"] < stop or not chunk["start"] < chunk["stop"] <= self.n_runs:
                raise DumpError(f"{self.path / MANIFEST}: chunk list is damaged at runs {chunk['start']}-{chunk['stop']}")
            stop = chunk["stop"]
        for i in range(len(self.clients)):
            for name, shape in ((_client_file(i), self._sample_shape()), (_metrics_file(i), self._metric_shape())):
                file = self.path / name
                try:
                    st = os.lstat(file)
                except FileNotFoundError:
                    raise DumpError(f"{file} is missing (client {self.clients[i]!r})") from None
                why = _not_regular(st)
                if why:
                    raise _member_error(file, why)
                want = math.prod(shape) * DTYPE.itemsize  # Python ints: exact at any size
                size = st.st_size
                if size != want:
                    fields = ("len(checkpoints), n_runs, n_params" if name.startswith("client")
                              else "len(metrics), len(checkpoints), n_runs")
                    raise DumpError(
                        f"{file} has {size} bytes; the manifest's shape {shape} ({fields}) needs {want} "
                        f"({'truncated' if size < want else 'too long'})"
                    )

    # ------------------------------------------------------------------ reading
    @property
    def provenance(self) -> list[dict]:
        """Records of the sessions that wrote the dump, oldest first (a copy of the list)."""
        return list(self._manifest.get("provenance", []))

    @property
    def completed_runs(self) -> int:
        """Runs written from run 0 without a gap: analysis reads runs [0, completed_runs)."""
        stop = 0
        for chunk in self._manifest["chunks"]:  # sorted by start
            if chunk["start"] != stop:
                break
            stop = chunk["stop"]
        return int(stop)

    @property
    def written_runs(self) -> int:
        """Runs written so far, counting those after a gap (chunks written out of order)."""
        return int(sum(c["stop"] - c["start"] for c in self._manifest["chunks"]))

    @property
    def complete(self) -> bool:
        """Whether every run is written."""
        return self.written_runs == self.n_runs

    def missing_ranges(self) -> list[tuple[int, int]]:
        """The runs not written yet, as a sorted list of (start, stop) ranges.

        Examples
        --------
        >>> import numpy as np
        >>> from mianalysis import ParameterDump
        >>> from mianalysis.dumps import layout_from_shapes
        >>> dump = ParameterDump.create("gaps", clients=["a"], checkpoints=[0], n_runs=10,
        ...                             layout=layout_from_shapes([("w", (2,))]))
        >>> dump.write_chunk(4, 6, {"a": np.zeros((1, 2, 2))})
        >>> dump.missing_ranges(), dump.completed_runs, dump.written_runs
        ([(0, 4), (6, 10)], 0, 2)
        """
        gaps, stop = [], 0
        for chunk in self._manifest["chunks"]:
            if chunk["start"] > stop:
                gaps.append((stop, int(chunk["start"])))
            stop = int(chunk["stop"])
        return gaps + ([(stop, self.n_runs)] if stop < self.n_runs else [])

    def missing_chunks(self, chunk_size: int) -> list[tuple[int, int]]:
        """The runs not written yet, cut at multiples of `chunk_size`: the chunks a writer
        of runs [k * chunk_size, (k + 1) * chunk_size) has still to write, in order. Writing
        exactly these gives the manifest that writing every chunk in order gives."""
        from .._internal.validation import check_int

        chunk_size = check_int(chunk_size, "chunk_size", low=1)
        chunks = []
        for start, stop in self.missing_ranges():
            while start < stop:
                end = min((start // chunk_size + 1) * chunk_size, stop)
                chunks.append((start, end))
                start = end
        return chunks

    def written_chunks(self) -> list[tuple[int, int]]:
        """The written chunks as a sorted list of (start, stop) ranges."""
        return [(int(c["start"]), int(c["stop"])) for c in self._manifest["chunks"]]

    def chunks_digest(self) -> str:
        """A fingerprint of the completed chunks: 16 hex digits of the SHA-256 of their
        records (runs and checksums) in the manifest. Equal for the same samples written in
        the same chunks; it changes when a chunk is added or rewritten, so a result can
        record which data it was computed from (:func:`mianalysis.analyze` keeps it in its
        sidecar's settings).

        Examples
        --------
        >>> import numpy as np
        >>> from mianalysis import ParameterDump
        >>> a = ParameterDump.from_arrays("a", [np.zeros((4, 2)), np.ones((4, 2))])
        >>> b = ParameterDump.from_arrays("b", [np.zeros((4, 2)), np.ones((4, 2))])
        >>> c = ParameterDump.from_arrays("c", [np.zeros((4, 2)), np.full((4, 2), 2.0)])
        >>> len(a.chunks_digest()), a.chunks_digest() == b.chunks_digest(), a.chunks_digest() == c.chunks_digest()
        (16, True, False)
        """
        return hashlib.sha256(json.dumps(self._manifest["chunks"], sort_keys=True).encode()).hexdigest()[:16]

    def _client_index(self, client: object) -> int:
        if isinstance(client, str) and client in self.clients:
            return self.clients.index(client)
        if isinstance(client, (int, np.integer)) and not isinstance(client, bool) and 0 <= client < len(self.clients):
            return int(client)
        raise ValueError(f"`client` must be one of {self.clients} or an index below {len(self.clients)}; got {client!r}")

    def _checkpoint_index(self, *, iteration: object = None, index: object = None) -> int:
        """The position in :attr:`checkpoints` of the checkpoint named by exactly one of
        `iteration` (its value) or `index` (its position); TypeError or ValueError otherwise."""
        if (iteration is None) == (index is None):
            raise TypeError(f"pass exactly one of `iteration` (one of {_shown(self.checkpoints, 120)}) or `index` "
                            f"(0-{len(self.checkpoints) - 1}); got "
                            + ("neither" if iteration is None else f"iteration={iteration!r} and index={index!r}"))
        name, value = ("iteration", iteration) if iteration is not None else ("index", index)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"`{name}` must be an integer; got {value!r}")
        if name == "iteration":
            if value not in self.checkpoints:
                raise ValueError(f"`iteration` {value!r} is not a checkpoint of {self.path}: its iterations are "
                                 f"{_shown(self.checkpoints, 120)} (pass index= for a position)")
            return self.checkpoints.index(int(value))
        if not 0 <= value < len(self.checkpoints):
            raise ValueError(f"`index` must be in [0, {len(self.checkpoints) - 1}] (a position in the checkpoints, "
                             f"iterations {_shown(self.checkpoints, 120)}); got {value!r}")
        return int(value)

    def _memmap(self, name: str, shape: tuple[int, ...], mode: Literal["r", "r+"] = "r") -> np.ndarray:
        if self._sent_identity is not None:  # a copy that travelled: first check it reads the same dump
            self._check_sent()
        if int(np.prod(shape)) == 0:  # a dump without metrics: nothing to map
            return np.zeros(shape, dtype=DTYPE)
        flags = os.O_RDONLY if mode == "r" else os.O_RDWR
        with os.fdopen(_open_member(self.path / name, flags), "rb" if mode == "r" else "r+b") as fh:
            return np.memmap(fh, dtype=DTYPE, mode=mode, shape=shape)  # the map outlives the file object

    def layer_columns(self, layer: str | Sequence[str] | None) -> slice | np.ndarray:
        """Column indices of `layer`: a tensor name, a prefix of names ("rnn.0" matches
        "rnn.0.weight" and "rnn.0.bias"), or a list of those. None means all columns."""
        if layer is None:
            return slice(0, self.n_params)
        return layout_columns(select_layout(self.layout, layer))

    def samples(self, client: str | int, *args: object, iteration: int | None = None, index: int | None = None,
                layer: str | Sequence[str] | None = None, **kwargs: object) -> np.ndarray:
        """Parameter samples of one client at one checkpoint: array of shape (runs, params).

        Only completed runs are returned. The array is a read-only memory map when `layer`
        is None.

        Parameters
        ----------
        client : str or int
            A client's name or its position in :attr:`clients`.
        iteration : int, optional
            The checkpoint by value: one of :attr:`checkpoints` (e.g. the training iteration),
            so that ``for t in dump.checkpoints: dump.samples(c, iteration=t)`` reads each.
        index : int, optional
            The checkpoint by position in :attr:`checkpoints`, from 0.
            Give exactly one of `iteration` and `index`.
        layer : str or list of str, optional
            Selects tensors (see :meth:`layer_columns`); None means every column.

        Raises
        ------
        TypeError
            The checkpoint given positionally or as ``checkpoint=`` (the form before
            `iteration`/`index`, refused as ambiguous: pass ``index=`` for the old meaning),
            neither or both of `iteration` and `index`, or a non-integer one.
        ValueError
            An unknown client, an `iteration` not in :attr:`checkpoints` (the message names
            them), an `index` out of range, or an unknown layer.
        """
        if args or "checkpoint" in kwargs:
            given = repr(args[0]) if args else f"checkpoint={kwargs['checkpoint']!r}"
            meant = args[0] if args else kwargs["checkpoint"]
            raise TypeError(
                f"`samples` no longer takes the checkpoint positionally or as `checkpoint=` (got {given}), which was "
                f"ambiguous: pass iteration=... (a value of `checkpoints`, {_shown(self.checkpoints, 120)}) or "
                f"index=... (a position, what the old form meant: samples({client!r}, index={meant!r}))")
        if kwargs:
            raise TypeError(f"`samples` got an unexpected keyword argument {sorted(kwargs)[0]!r}")
        c = self._client_index(client)
        t = self._checkpoint_index(iteration=iteration, index=index)
        cols = self.layer_columns(layer)
        data = self._memmap(_client_file(c), self._sample_shape())[t, : self.completed_runs]
        return data if layer is None else np.asarray(data[:, cols])

    def metric(self, client: str | int, name: str) -> np.ndarray:
        """Recorded metric `name` of one client: array of shape (n_checkpoints, completed runs)."""
        if name not in self.metric_names:
            raise ValueError(f"`name` must be one of {self.metric_names}; got {name!r}")
        c = self._client_index(client)
        data = self._memmap(_metrics_file(c), self._metric_shape())
        return np.asarray(data[self.metric_names.index(name), :, : self.completed_runs])

    def chunk_records(self) -> list[dict]:
        """The written chunks as the manifest records them: a list (sorted by start) of
        ``{"start", "stop", "sha256": {client: hex digest}}`` (copies), the digest being
        the SHA-256 of the chunk's samples (checkpoint by checkpoint) then its metrics."""
        return json.loads(json.dumps(self._manifest["chunks"]))

    def write_chunk(self, start: int, stop: int, samples: Mapping[str, ArrayLike],
                    metrics: Mapping[str, ArrayLike] | None = None) -> None:
        """Write runs [start, stop) of every client, flush, and record the chunk atomically.

        `samples` maps each client name to an array (n_checkpoints, stop - start, n_params);
        `metrics` each client name to (n_metrics, n_checkpoints, stop - start). Chunks may
        come in any order: [start, stop) must lie within [0, n_runs) and overlap no written
        chunk (DumpError naming both otherwise). The writer lock is
        held while writing (LockedError if another process holds it). Samples must be
        finite (as float32): a NaN or infinity is a DumpError naming the client, checkpoint,
        runs and tensor, and nothing of the chunk is written. Metrics may hold NaN (a
        metric not recorded) and infinities (e.g. a loss that overflows).
        """
        for name, value in (("start", start), ("stop", stop)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"`{name}` must be an integer run; got {value!r}")
        start, stop = int(start), int(stop)
        if not 0 <= start < stop <= self.n_runs:
            raise DumpError(f"chunk {start}-{stop} is not a range of runs within 0-{self.n_runs} of {self.path}")
        self._check_no_overlap(start, stop)
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
            self._reread_manifest()  # chunks another writer (another object of this folder) added stay
            self._check_no_overlap(start, stop)
            self._write_chunk_locked(start, stop, blocks)

    def _reread_manifest(self) -> None:
        """Take up the manifest on disk (the lock is held): the chunks and sessions written
        by any other writer of this folder since this object read it, so that the manifest
        this write commits keeps them. DumpError if the dump itself is not the one opened."""
        fresh = _read_manifest(self.path)
        ignored = ("chunks", "provenance")
        changed = [k for k in sorted(set(fresh) | set(self._manifest))
                   if k not in ignored and fresh.get(k) != self._manifest.get(k)]
        if changed:
            raise DumpError(f"{self.path / MANIFEST} changed since this ParameterDump opened it (fields "
                            f"{', '.join(f'`{k}`' for k in changed)}): it now holds another dump; nothing was "
                            "written: open it again")
        self._manifest = {**fresh, "chunks": sorted(fresh["chunks"], key=lambda c: c["start"])}

    def _check_no_overlap(self, start: int, stop: int) -> None:
        for chunk in self._manifest["chunks"]:
            if chunk["start"] < stop and start < chunk["stop"]:
                raise DumpError(f"chunk {start}-{stop} overlaps the written chunk {chunk['start']}-{chunk['stop']} of "
                                f"{self.path}; nothing was written (write only missing runs: "
                                f"{_shown(self.missing_ranges(), 120)})")

    def _write_chunk_locked(self, start: int, stop: int,
                            blocks: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Write checked (samples, metrics) `blocks` as runs [start, stop), then the manifest."""
        try:
            checksums: dict[str, str] = {}
            for i, (client, (block, mblock)) in enumerate(zip(self.clients, blocks)):
                self._write_runs(_client_file(i), self._sample_shape(), 1, start, block)
                self._write_runs(_metrics_file(i), self._metric_shape(), 2, start, mblock)
                checksums[client] = self._chunk_checksum(i, start, stop)
            chunks = sorted(self._manifest["chunks"] + [{"start": int(start), "stop": int(stop), "sha256": checksums}],
                            key=lambda c: c["start"])
            manifest = {**self._manifest, "chunks": chunks, "provenance": self._sessions_after(start, stop)}
            _write_json_atomically(self.path / MANIFEST, manifest)
        except OSError as exc:
            raise DumpError(f"writing runs {start}-{stop} to {self.path} failed ({exc}); the dump is intact up to "
                            f"run {self.completed_runs}: free space or fix the cause and rerun to resume") from exc
        self._manifest = manifest
        if self._session_index is None:
            self._session_index = len(manifest["provenance"]) - 1
        self._session = manifest["provenance"][self._session_index]

    def _sessions_after(self, start: int, stop: int) -> list[dict]:
        """The manifest's provenance list once this session has written runs [start, stop):
        its record appended (first chunk) or its end time and runs written updated."""
        sessions = self.provenance
        if self._session is None:  # a dump opened with open() and written to
            self._session = collect()
        first, last = self._session.get("runs_written") or [start, stop]  # out of order: the span written
        # A writer's own entries (DumpWriter(provenance=...)) stay; collect's are renewed.
        record = {**self._session, **collect(self._session["started"], finished=True),
                  "runs_written": [int(min(first, start)), int(max(last, stop))]}
        if self._session_index is None:
            sessions.append(record)
        else:
            sessions[self._session_index] = record
        return sessions

    def _write_runs(self, name: str, shape: tuple[int, ...], run_axis: int, start: int,
                    block: np.ndarray) -> None:
        """Write `block` into runs [start, start + block.shape[run_axis]) of the array file
        `name` of `shape` with ordinary file writes (a full disk raises OSError), then fsync."""
        if block.size == 0:
            return
        n_runs = shape[run_axis]
        inner = int(np.prod(shape[run_axis + 1:]))
        with os.fdopen(_open_member(self.path / name, os.O_RDWR), "r+b") as fh:
            for outer, index in enumerate(np.ndindex(*shape[:run_axis])):
                fh.seek((outer * n_runs + start) * inner * DTYPE.itemsize)
                fh.write(np.ascontiguousarray(block[index]).tobytes())
            fh.flush()
            os.fsync(fh.fileno())

    def _chunk_checksum(self, index: int, start: int, stop: int) -> str:
        h = hashlib.sha256()
        samples = self._memmap(_client_file(index), self._sample_shape())
        for t in range(len(self.checkpoints)):
            h.update(np.ascontiguousarray(samples[t, start:stop]).tobytes())
        metrics = self._memmap(_metrics_file(index), self._metric_shape())
        h.update(np.ascontiguousarray(metrics[:, :, start:stop]).tobytes())
        return h.hexdigest()

    def verify(self, *, finite: bool = True) -> int:
        """Check file sizes, every written chunk's checksums and that its samples are
        finite; raise DumpError naming the file and the runs that are damaged (for
        non-finite samples: the client, checkpoint, runs and tensor, as written by software
        that did not check them). Returns the number of verified runs (:attr:`written_runs`).

        ``finite=False`` checks sizes and checksums only (analyze does, and then checks the
        columns it analyses: a layer selection without the tensor that diverged can be
        analysed)."""
        self._check_files()
        for chunk in self._manifest["chunks"]:
            for i, client in enumerate(self.clients):
                if self._chunk_checksum(i, chunk["start"], chunk["stop"]) != chunk["sha256"].get(client):
                    raise DumpError(
                        f"{self.path / _client_file(i)} or {_metrics_file(i)}: runs {chunk['start']}-{chunk['stop']} "
                        f"of client {client!r} do not match their checksum (damaged)"
                    )
        for chunk in self._manifest["chunks"] if finite else ():  # after the checksums: damage is named as damage
            for i, client in enumerate(self.clients):
                where = self._find_nonfinite(i, chunk["start"], chunk["stop"])
                if where is not None:
                    raise DumpError(
                        f"{self.path / _client_file(i)}: client {client!r} has non-finite parameters at "
                        f"{where.describe()}; analysis cannot use them (sample again with settings that train "
                        "without diverging)")
        return self.written_runs

    def _find_nonfinite(self, index: int, start: int, stop: int) -> NonFinite | None:
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

    def __repr__(self) -> str:
        return (f"ParameterDump({str(self.path)!r}, clients={self.clients}, checkpoints={self.checkpoints}, "
                f"runs={self.completed_runs}/{self.n_runs}, params={self.n_params})")

