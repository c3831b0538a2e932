"""Dumps in the array ecosystem: a Dask array, an xarray Dataset, a zarr v3 store.

:func:`to_dask` and :func:`to_xarray` read a dump lazily, from its memory maps: nothing is
read until a value is computed, and each block of a computation is a view of one client's
file at one checkpoint (the blocks are whole checkpoints of whole parameter vectors, a run
range at a time). The objects in the task graph are the dump's description and a path,
never samples, so a Dask cluster whose workers see the dump's folder at the same path
reads it where it computes. The path travels made absolute, with the manifest's identity:
a worker that finds another dump at that path, or none, raises a DumpError naming it.

:func:`export_zarr` copies a dump into a new zarr v3 store (zarr is imported only there:
the ``zarr`` extra, Python >= 3.11), with every dump chunk's SHA-256 and a SHA-256 of
each exported array, checked against the store after writing.

Only the dump's completed runs (:attr:`ParameterDump.completed_runs`, the runs written
from run 0 without a gap) are read, as :meth:`ParameterDump.samples` does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.locking import WriterLock
from .format import ParameterDump
from .manifest import DTYPE, METRIC_NAME, RESERVED_METRIC_NAMES, DumpError

if TYPE_CHECKING:  # names used only in type hints (the dask extra)
    import dask.array
    import xarray

__all__ = ["to_dask", "to_xarray", "export_zarr", "DIMS", "BLOCK_BYTES", "ZARR_FORMAT_NAME"]

DIMS = ("client", "checkpoint", "run", "parameter")
BLOCK_BYTES = 64 * 2**20  # runs per block: about this many bytes of one client at one checkpoint
ZARR_FORMAT_NAME = "mianalysis-dump-export"
ZARR_FORMAT_VERSION = 1


def _runs_per_block(dump: ParameterDump, block_bytes: int = BLOCK_BYTES) -> int:
    return max(1, min(dump.completed_runs, block_bytes // (dump.n_params * DTYPE.itemsize)))


class _ClientSamples:
    """One client's completed samples (checkpoints, runs, parameters) as an array-like that
    Dask slices lazily; an index whose checkpoint part is one checkpoint (the blocks of
    :func:`to_dask` are) gives a view of the memory map."""

    def __init__(self, dump: ParameterDump, client: int) -> None:
        self.dump, self.client = dump, client
        self.shape = (len(dump.checkpoints), dump.completed_runs, dump.n_params)
        self.dtype = DTYPE
        self.ndim = 3

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (3 - len(key))
        checkpoints = range(self.shape[0])[key[0]] if isinstance(key[0], slice) else [key[0]]
        blocks = [self.dump.samples(self.client, index=int(t))[key[1], key[2]] for t in checkpoints]
        if not isinstance(key[0], slice):
            return blocks[0]
        if len(blocks) == 1:
            return blocks[0][np.newaxis]
        if not blocks:
            return np.empty(np.broadcast_to(np.empty((), DTYPE), self.shape)[key].shape, DTYPE)
        return np.stack(blocks)


def _check_dump(dump: ParameterDump | str | os.PathLike) -> ParameterDump:
    if not isinstance(dump, ParameterDump):
        dump = ParameterDump.open(dump)
    if dump.completed_runs == 0:
        raise DumpError(f"dump {dump.path} has no completed runs yet: nothing to read")
    return dump


def to_dask(dump: ParameterDump | str | os.PathLike) -> dask.array.Array:
    """A dump's completed samples as one lazy Dask array.

    Parameters
    ----------
    dump : ParameterDump or path

    Returns
    -------
    dask.array.Array of shape (n_clients, n_checkpoints, completed_runs, n_params), float32
        Dimensions :data:`DIMS` (client, checkpoint, run, parameter), in the dump's
        client order; ``x[c, t]`` equals ``dump.samples(c, index=t)``. Blocks of one client,
        one checkpoint, all parameters and about :data:`BLOCK_BYTES` of runs.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump
    >>> from mianalysis.dumps import to_dask
    >>> a = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    >>> dump = ParameterDump.from_arrays("lazy", {"a": a, "b": -a}, checkpoints=[0, 5])
    >>> x = to_dask(dump)
    >>> x.shape
    (2, 2, 4, 3)
    >>> bool((x[1, 1].compute() == dump.samples("b", index=1)).all())
    True
    """
    import dask.array as da

    dump = _check_dump(dump)
    runs = _runs_per_block(dump)
    token = hashlib.sha256(f"{Path(dump.path).resolve()}|{dump.chunks_digest()}|{dump.completed_runs}".encode())
    parts = [da.from_array(_ClientSamples(dump, c), chunks=(1, runs, dump.n_params), asarray=False, fancy=False,
                           meta=np.empty((0, 0, 0), dtype=DTYPE), name=f"dump-samples-{token.hexdigest()[:16]}-{c}")
             for c in range(len(dump.clients))]
    return da.stack(parts)


def _layer_names(dump: ParameterDump) -> np.ndarray:
    """The tensor of each column of the parameter vector (an array of n_params names)."""
    return np.repeat(np.array([e.name for e in dump.layout], dtype=object), [e.size for e in dump.layout])


def to_xarray(dump: ParameterDump | str | os.PathLike) -> xarray.Dataset:
    """A dump's completed samples and metrics as a lazy ``xarray.Dataset``.

    Parameters
    ----------
    dump : ParameterDump or path

    Returns
    -------
    xarray.Dataset
        ``samples`` (client, checkpoint, run, parameter): :func:`to_dask`'s array; one
        variable per recorded metric (client, checkpoint, run), e.g. ``loss``
        (``metric_NAME`` for a name, such as ``samples``, that a dump written before
        metric names were checked may hold), its attribute ``metric`` the metric's name. Coordinates:
        ``client`` (names), ``checkpoint`` (training iterations), ``run`` (0, 1, ...),
        ``parameter`` (column index) and ``layer`` along ``parameter`` (the tensor each
        column belongs to). Attributes: the dump's path, ``meta`` (task and sampler
        settings), runs and chunks digest.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis import ParameterDump
    >>> from mianalysis.dumps import to_xarray
    >>> a = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    >>> dump = ParameterDump.from_arrays("labelled", {"a": a, "b": -a}, checkpoints=[0, 5],
    ...                                  layout=[("w", (2,)), ("b", (1,))])
    >>> ds = to_xarray(dump)
    >>> ds.samples.sel(client="b", checkpoint=5, run=1).values.tolist()
    [-15.0, -16.0, -17.0]
    >>> ds.layer.values.tolist()
    ['w', 'w', 'b']
    """
    import xarray as xr

    dump = _check_dump(dump)
    variables: dict[str, tuple[Any, ...]] = {"samples": (DIMS, to_dask(dump))}
    for name in dump.metric_names:
        values = np.stack([dump.metric(c, name) for c in range(len(dump.clients))])
        key = f"metric_{name}" if name in RESERVED_METRIC_NAMES else name  # never replacing the samples
        variables[key] = (DIMS[:3], values, {"metric": name})
    coords = {"client": list(dump.clients), "checkpoint": list(dump.checkpoints),
              "run": np.arange(dump.completed_runs), "parameter": np.arange(dump.n_params),
              "layer": ("parameter", _layer_names(dump).astype(str))}
    attrs = {"dump": str(dump.path), "n_runs": dump.n_runs, "completed_runs": dump.completed_runs,
             "chunks_digest": dump.chunks_digest(), "meta": dump.meta}
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def _zarr() -> ModuleType:
    try:
        import zarr
    except ImportError:
        raise ImportError("exporting to zarr needs zarr >= 3 (Python >= 3.11): pip install 'mianalysis[zarr]'") \
            from None
    if int(zarr.__version__.split(".")[0]) < 3:
        raise ImportError(f"exporting to zarr needs zarr >= 3 (zarr v3 format); zarr {zarr.__version__} is "
                          "installed: pip install 'mianalysis[zarr]'")
    return zarr


def _metric_keys(dump: ParameterDump) -> dict[str, str]:
    """Metric name -> the name of its array in a zarr store: the metric's own name, or
    ``metric_NAME`` where that would clash with another array (or is not a plain name).
    Dumps written since metric names are checked (see ``format.METRIC_NAME``) hold none that
    clash; a name an older dump holds that is no array name ("a/b" would be a group) is a
    DumpError naming it."""
    taken = set(RESERVED_METRIC_NAMES)
    keys = {name: name if name not in taken and name.isidentifier() else f"metric_{name}"
            for name in dump.metric_names}
    for name in dump.metric_names:
        if not METRIC_NAME.fullmatch(name) and name not in taken:
            raise DumpError(f"{dump.path}: metric name {name!r} cannot name an array of a zarr store (a '/' would make "
                            "it a group; dumps written now refuse such names): rename it in the `metrics` list of "
                            "the dump's manifest.json (no checksum covers it) and export again")
    return keys


def _blocks(dump: ParameterDump, runs: int) -> Iterator[tuple[int, int, slice]]:
    """(client, checkpoint, run slice) of every block of the samples, in C order."""
    for c in range(len(dump.clients)):
        for t in range(len(dump.checkpoints)):
            for start in range(0, dump.completed_runs, runs):
                yield c, t, slice(start, min(start + runs, dump.completed_runs))


def export_zarr(dump: ParameterDump | str | os.PathLike, out: str | os.PathLike, *, verify: bool = True
                ) -> dict[str, str | int | dict[str, str]]:
    """Copy a dump's completed runs into a new zarr v3 store at `out`, with checksums.

    The store (a folder) holds ``samples`` (client, checkpoint, run, parameter; float32,
    chunks of one client and checkpoint and up to :data:`BLOCK_BYTES` of runs), one array
    per recorded metric (client, checkpoint, run), named by the metric (``loss``;
    ``metric_NAME`` for a name that is taken or not a plain word), and the coordinate
    arrays ``client``, ``checkpoint`` (iterations), ``run``, ``parameter`` and ``layer``
    (the tensor of each column), every array with zarr v3 ``dimension_names``, so that
    ``xarray.open_zarr(out, consolidated=False)`` reads it labelled. Attributes of the
    store: the dump's clients, checkpoints, layout, metric names, meta, provenance, runs,
    and ``dump_chunks``: each exported chunk's runs and its SHA-256 per client as the
    dump's manifest records them. Each data array's attribute ``sha256`` is the SHA-256
    of its values as little-endian float32 in C order.

    Parameters
    ----------
    dump : ParameterDump or path
    out : path
        A path that does not exist yet (nothing is ever replaced). The store is written
        in a hidden sibling folder, read back and checked against the checksums, and only
        then renamed to `out`: an export that fails or is interrupted leaves no `out`.
    verify : bool, default=True
        First check the dump's own chunk checksums (:meth:`ParameterDump.verify`).

    Returns
    -------
    dict
        ``{"path": out, "runs": completed runs, "sha256": {array name: digest}}``.

    Raises
    ------
    ImportError
        zarr (>= 3) is not installed.
    DumpError
        The dump is damaged (with `verify`), has no completed run, or the store read back
        does not match the checksums.
    ValueError
        `out` exists, or lies inside the dump.
    LockedError
        Another export (or writer) of `out` is running: nothing is changed.
    """
    dump = _check_dump(dump)
    _metric_keys(dump)  # a metric name that is no array name: refused before anything is written
    out = Path(out)
    dump_folder = Path(dump.path).resolve()
    if out.resolve() == dump_folder or dump_folder in out.resolve().parents:
        raise ValueError(f"{out} lies inside the dump {dump.path}; export to a path outside it")
    with WriterLock(out, session=True):  # a second export to `out` is refused, the first's staging left alone
        return _export_locked(dump, out, verify)


def _export_locked(dump: ParameterDump, out: Path, verify: bool) -> dict[str, str | int | dict[str, str]]:
    """export_zarr once the writer lock of `out` is held."""
    if os.path.lexists(out):
        raise ValueError(f"{out} already exists; an export never replaces anything: choose a new path")
    zarr = _zarr()
    if verify:
        dump.verify(finite=False)
    staging = out.parent / f".{out.name}.exporting"
    out.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(staging):  # a killed export's leftover: never written through
        shutil.rmtree(staging) if staging.is_dir() and not staging.is_symlink() else staging.unlink()
    try:
        digests = _write_store(zarr, dump, staging)
        _check_store(zarr, dump, staging, digests)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {"path": str(out), "runs": dump.completed_runs, "sha256": digests}


def _write_store(zarr: ModuleType, dump: ParameterDump, folder: Path) -> dict[str, str]:
    n_c, n_t, n_r, n_p = len(dump.clients), len(dump.checkpoints), dump.completed_runs, dump.n_params
    runs = _runs_per_block(dump)
    root = zarr.open_group(str(folder), mode="w-", zarr_format=3)
    coords = {"client": (np.array(dump.clients, dtype=str), str), "checkpoint": (np.array(dump.checkpoints), "int64"),
              "run": (np.arange(n_r), "int64"), "parameter": (np.arange(n_p), "int64")}
    for name, (values, dtype) in coords.items():
        root.create_array(name, shape=values.shape, dtype=dtype, dimension_names=[name])[...] = values
    root.create_array("layer", shape=(n_p,), dtype=str, dimension_names=["parameter"])[...] = \
        _layer_names(dump).astype(str)
    samples = root.create_array("samples", shape=(n_c, n_t, n_r, n_p), chunks=(1, 1, runs, n_p), dtype=DTYPE.str,
                                dimension_names=list(DIMS))
    digests: dict[str, str] = {}
    h = hashlib.sha256()
    for c, t, block in _blocks(dump, runs):
        values = np.ascontiguousarray(dump.samples(c, index=t)[block], dtype=DTYPE)
        samples[c, t, block] = values
        h.update(values.tobytes())
    digests["samples"] = samples.attrs["sha256"] = h.hexdigest()
    samples.attrs["coordinates"] = "layer"  # xarray reads `layer` as a coordinate (CF convention)
    for name, key in _metric_keys(dump).items():
        values = np.ascontiguousarray(np.stack([dump.metric(c, name) for c in range(n_c)]), dtype=DTYPE)
        array = root.create_array(key, shape=values.shape, chunks=values.shape, dtype=DTYPE.str,
                                  dimension_names=list(DIMS[:3]))
        array[...] = values
        array.attrs["metric"] = name
        digests[key] = array.attrs["sha256"] = hashlib.sha256(values.tobytes()).hexdigest()
    root.attrs.update({
        "format": ZARR_FORMAT_NAME, "format_version": ZARR_FORMAT_VERSION, "source": str(dump.path),
        "clients": list(dump.clients), "checkpoints": list(dump.checkpoints),
        "layout": [e.to_json() for e in dump.layout], "metric_names": list(dump.metric_names), "meta": dump.meta,
        "n_runs": dump.n_runs, "runs": n_r, "dump_chunks": [c for c in dump.chunk_records() if c["stop"] <= n_r],
        "dump_chunks_digest": dump.chunks_digest(), "provenance": dump.provenance, "sha256": digests})
    return digests


def _check_store(zarr: ModuleType, dump: ParameterDump, folder: Path, digests: dict[str, str]) -> None:
    """DumpError unless every data array of the store at `folder` reads back to its digest."""
    root = zarr.open_group(str(folder), mode="r")
    samples = root["samples"]
    h = hashlib.sha256()
    for c, t, block in _blocks(dump, _runs_per_block(dump)):
        h.update(np.ascontiguousarray(samples[c, t, block], dtype=DTYPE).tobytes())
    found = {"samples": h.hexdigest()}
    for key in _metric_keys(dump).values():
        found[key] = hashlib.sha256(np.ascontiguousarray(root[key][...], dtype=DTYPE).tobytes()).hexdigest()
    bad = [name for name in digests if found.get(name) != digests[name]]
    if bad:
        raise DumpError(f"the zarr store written to {folder} does not read back to its checksums ({bad}); "
                        "nothing was exported: check the disk and retry")
