"""Import a folder of saved models, ``ROOT/CLIENT/CHECKPOINT/RUN.{pt,safetensors}``, into a dump.

The files are read one at a time and recorded through a
:class:`~mianalysis.dumps.writer.DumpWriter`, so memory is one chunk of runs whatever the
number of files, and an interrupted import resumes (the same command again reads only the
runs the dump lacks). Every folder is checked before any file is read; a file that cannot
be read, holds other tensors or shapes than the first, or holds a NaN or an infinity is a
DumpError naming it.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.io import progress_bar
from .._internal.locking import WriterLock
from .._internal.validation import check_int
from .writer import DumpWriter, IncompleteChunkWarning, layout_difference, named_arrays
from .format import ParameterDump
from .layout import find_nonfinite, layout_from_shapes, select_layout
from .manifest import DumpError, check_checkpoint

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["import_checkpoints", "CheckpointFolder", "scan_checkpoints", "load_state_dict"]

SUFFIXES = (".pt", ".safetensors")


class CheckpointFolder:
    """What :func:`scan_checkpoints` found under a root folder.

    Attributes
    ----------
    root : pathlib.Path
    clients : list of str
        Client folder names, sorted.
    checkpoints : list of int
        Iterations, sorted.
    runs : list of str
        Run file names, the same in every checkpoint folder (by number where every name's
        stem is a number, else by name).
    """

    def __init__(self, root: Path, clients: list[str], checkpoints: list[int], runs: list[str],
                 folders: Mapping[tuple[str, int], Path]) -> None:
        self.root, self.clients, self.checkpoints, self.runs = root, clients, checkpoints, runs
        self._folders = folders  # (client, iteration) -> folder

    def file(self, client: str, checkpoint: int, run: int) -> Path:
        """Path of the file of `client` (a name), `checkpoint` (an iteration) and `run` (an index)."""
        return self._folders[client, checkpoint] / self.runs[run]


def _int_name(name: str, folder: Path) -> int:
    """The iteration a checkpoint folder's name spells: ASCII digits with an optional leading
    "-", within int64 (what ``int`` reads besides, "0_5", " 5", Arabic-Indic digits, is refused)."""
    if not re.fullmatch(r"-?[0-9]+", name):
        raise DumpError(f"{folder}: checkpoint folder {name!r} is not an integer iteration (a name of ASCII digits "
                        "0-9, optionally after a '-'); rename or move it")
    try:
        return check_checkpoint(int(name))
    except ValueError as exc:
        raise DumpError(f"{folder}: checkpoint folder {name!r}: {exc}") from None


def _checkpoint_folders(client_dir: Path) -> list[tuple[int, str]]:
    """[(iteration, folder name)] of a client folder, by iteration; DumpError naming a file
    that is not a checkpoint folder, a name that is not an integer, or two folders of one
    iteration ("10" and "010")."""
    found: dict[int, str] = {}
    for p in sorted(client_dir.iterdir()):
        if not p.is_dir():
            raise DumpError(f"{p} is not a checkpoint folder (expected ROOT/CLIENT/CHECKPOINT/RUN.pt); move it out "
                            f"of {client_dir}")
        iteration = _int_name(p.name, p)
        if iteration in found:
            raise DumpError(f"{client_dir / found[iteration]} and {p} both name checkpoint {iteration}; keep one")
        found[iteration] = p.name
    return sorted(found.items())


def _run_files(folder: Path) -> list[str]:
    """Names of the run files of a checkpoint folder, by run number where every stem is a
    number (else by name); DumpError naming a folder or a file that is neither .pt nor
    .safetensors, or two files of one run ("10.pt" and "010.pt", "1.pt" and "1.safetensors")."""
    names: list[str] = []
    numbers: dict[int, str] = {}
    runs: dict[int | str, str] = {}
    for p in sorted(folder.iterdir()):
        if p.is_dir():
            raise DumpError(f"{p} is a folder; a checkpoint folder holds only RUN.pt (or RUN.safetensors) files")
        if p.suffix not in SUFFIXES:
            raise DumpError(f"{p} is not a .pt file (nor .safetensors); a checkpoint folder holds only RUN.pt files "
                            f"(move it out of {folder})")
        run: int | str = int(p.stem) if re.fullmatch(r"[0-9]+", p.stem) else p.stem  # "run.pt" and "run.safetensors": one run
        if run in runs:
            raise DumpError(f"{folder / runs[run]} and {p} both name run {run!r}; keep one")
        runs[run] = p.name
        if isinstance(run, int):
            numbers[run] = p.name
        names.append(p.name)
    if len(numbers) == len(names):
        return [numbers[run] for run in sorted(numbers)]
    return names


def scan_checkpoints(root: str | os.PathLike) -> CheckpointFolder:
    """Check the folders of ``root/CLIENT/CHECKPOINT/RUN.{pt,safetensors}`` without reading a
    file: every client has the same checkpoints and every checkpoint folder the same run
    files. Returns a :class:`CheckpointFolder`; DumpError naming the first file or folder
    that is out of place, extra or missing."""
    root = Path(root)
    if not root.is_dir():
        raise DumpError(f"{root} is not a folder")
    entries = sorted(root.iterdir())
    for p in entries:
        if not p.is_dir():
            raise DumpError(f"{p} is not a client folder (expected ROOT/CLIENT/CHECKPOINT/RUN.pt); move it out of {root}")
    clients = [p.name for p in entries]
    if not clients:
        raise DumpError(f"{root} has no client folders (expected root/CLIENT/CHECKPOINT/RUN.pt)")
    checkpoints: list[tuple[int, str]] | None = None
    runs: list[str] | None = None
    first_folder: Path | None = None
    folders: dict[tuple[str, int], Path] = {}
    for client in clients:
        found = _checkpoint_folders(root / client)
        if checkpoints is None:
            checkpoints = found
        elif [t for t, _ in found] != [t for t, _ in checkpoints]:
            raise DumpError(f"{root / client} has checkpoints {[t for t, _ in found]}; {root / clients[0]} has "
                            f"{[t for t, _ in checkpoints]}")
        for iteration, name in found:
            folder = root / client / name
            files = _run_files(folder)
            if runs is None:
                runs, first_folder = files, folder
            elif set(files) != set(runs):
                missing = [r for r in runs if r not in files]
                if missing:
                    raise DumpError(f"{folder / missing[0]} is missing ({first_folder} has it; every client and "
                                    f"checkpoint needs the same runs)")
                extra = [r for r in files if r not in runs]
                raise DumpError(f"{folder / extra[0]} has no counterpart in {first_folder}: every client and "
                                "checkpoint folder must hold the same run files")
            folders[client, iteration] = folder
    if not runs:
        raise DumpError(f"{root / clients[0]} has no CHECKPOINT/RUN.pt files")
    assert checkpoints is not None  # found in the first client folder (there is one)
    return CheckpointFolder(root, clients, [t for t, _ in checkpoints], runs, folders)


def _shown(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_state_dict(obj: object, torch: Any) -> bool:
    """A flat dict of named tensors: at least one floating-point tensor, no nested dicts."""
    return (isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj)
            and any(torch.is_tensor(v) and v.is_floating_point() for v in obj.values())
            and not any(isinstance(v, Mapping) for v in obj.values()))


def _load_safetensors(file: Path, key: str | None) -> dict[str, torch.Tensor]:
    if key is not None:
        raise DumpError(f"{file} is a .safetensors file: it holds one flat dict of tensors, so `key` "
                        f"({key!r}) does not apply")
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise DumpError(f"{file}: reading .safetensors files needs the safetensors package (pip install "
                        "safetensors, or mianalysis[safetensors])") from None
    try:
        return load_file(str(file), device="cpu")
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error kinds on a damaged file
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise DumpError(f"{file} could not be read by safetensors ({why}): truncated or damaged") from exc


def load_state_dict(file: str | os.PathLike, key: str | None = None) -> tuple[Mapping[str, torch.Tensor], str | None]:
    """(state dict, the key it was found under or None) of one RUN.pt or RUN.safetensors file.

    For a .pt file: the file's dict itself, the one dict in it that is a state dict
    (``{"model": ..., "epoch": ...}``), or the one under `key`. A .safetensors file is one
    state dict. DumpError naming the file otherwise (unreadable, no state dict, several)."""
    import torch

    file = Path(file)
    if file.suffix == ".safetensors":
        obj = _load_safetensors(file, key)
        if not _is_state_dict(obj, torch):
            raise DumpError(f"{file} holds no floating-point tensors; its tensors: {_shown(list(obj), 200)}")
        return obj, None
    try:
        obj = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds on a damaged file
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise DumpError(f"{file} could not be read by torch.load ({why}): truncated, damaged, or not a "
                        "weights-only PyTorch file; save model.state_dict() (or a dict holding it)") from exc
    keys = list(obj) if isinstance(obj, Mapping) else None
    shown = _shown(keys, 200)
    if key is not None:
        if keys is None or key not in obj:
            raise DumpError(f"{file} has no key {key!r}; its keys: {shown}" if keys is not None else
                            f"{file} holds a {type(obj).__name__}, not a dict with a key {key!r}")
        if not _is_state_dict(obj[key], torch):
            raise DumpError(f"{file}[{key!r}] is not a state dict (a dict of floating-point tensors): a "
                            f"{type(obj[key]).__name__}; keys in the file: {shown}")
        return obj[key], key
    if _is_state_dict(obj, torch):
        return obj, None
    if keys is None:
        raise DumpError(f"{file} holds a {type(obj).__name__}, not a state dict; save model.state_dict()")
    found = [k for k, v in obj.items() if _is_state_dict(v, torch)]
    if len(found) > 1:
        raise DumpError(f"{file} holds several state dicts, under keys {_shown(found, 200)}; choose one with key= "
                        f"(keys in the file: {shown})")
    if not found:
        raise DumpError(f"{file} holds no state dict (a dict of floating-point tensors); its keys: {shown}; pass key= "
                        "naming the one that holds the model's state_dict")
    return obj[found[0]], found[0]


class _Reader:
    """Reads the files of one import, checking each against the first."""

    def __init__(self, key: str | None, layer: str | list[str] | None) -> None:
        self.key, self.layer = key, layer
        self.first_file: Path | None = None
        self.first_key: str | None = None
        self.shapes: list[tuple[str, tuple[int, ...]]] | None = None
        self.selected: list[tuple[str, tuple[int, ...]]] | None = None

    def read(self, file: Path, checkpoint: int, run: int) -> list[tuple[str, np.ndarray]]:
        """The selected tensors of `file` as [(name, float32 array)], checked against the first file."""
        state, used = load_state_dict(file, self.key)
        named = named_arrays(state)
        assert named is not None  # a state dict (a mapping) gives its tensors, never None
        shapes = [(n, a.shape) for n, a in named]
        if self.shapes is None:
            if sum(math.prod(s) for _, s in shapes) == 0:
                raise DumpError(f"{file} holds no floating-point values (tensors: {_shown(shapes, 120)})")
            self.first_file, self.first_key, self.shapes = file, used, shapes
            layout = layout_from_shapes(shapes)
            try:
                chosen = layout if self.layer is None else select_layout(layout, self.layer)
            except ValueError as exc:
                raise DumpError(f"{file}: {exc}") from None
            self.selected = [(e.name, e.shape) for e in chosen]
        elif used != self.first_key:
            raise DumpError(f"{file} holds its state dict under {used!r}; {self.first_file} under {self.first_key!r}: "
                            "pass key= to read the same one from every file")
        elif shapes != self.shapes:
            raise DumpError(f"{file}: {layout_difference(shapes, self.shapes)}, compared with {self.first_file} "
                            "(every file must hold the same tensors with the same shapes)")
        assert self.selected is not None  # chosen from the first file
        arrays = dict(named)
        kept = [(name, arrays[name]) for name, _ in self.selected]
        vector = np.concatenate([a.reshape(-1) for _, a in kept])
        layout = layout_from_shapes(self.selected)
        where = find_nonfinite(vector[None, None, :], [checkpoint], first_run=run, layout=layout)
        if where is not None:
            raise DumpError(f"{file} holds non-finite values: {where.values_text()}; a dump holds finite parameters "
                            "only: replace the file or leave its run out")
        return kept


def import_checkpoints(root: str | os.PathLike, out: str | os.PathLike, *, key: str | None = None,
                       layer: str | Sequence[str] | None = None, chunk_size: int | None = 64, progress: bool = True,
                       meta: dict | None = None) -> ParameterDump:
    """Import ``root/CLIENT/CHECKPOINT/RUN.{pt,safetensors}`` into the dump `out`, chunk by chunk.

    CLIENT is any folder name; CHECKPOINT a folder named by the training iteration (an
    integer); RUN a ``.pt`` file (``torch.save(model.state_dict(), ...)`` or a checkpoint
    dict holding one, such as ``{"model": ..., "optimizer": ..., "epoch": ...}``) or a
    ``.safetensors`` file (needs the ``safetensors`` package), the same run file names
    under every client and checkpoint. The floating-point tensors of each state dict, in
    the first file's order (a .safetensors file keeps none: its tensors come sorted by
    name), make up the parameter vector (integer buffers such as ``num_batches_tracked``
    are skipped).

    Parameters
    ----------
    root : str or Path
    out : str or Path
        The dump folder: new, empty, or holding an import of the same `root`, `key` and
        `layer` to resume (only the runs it lacks are read).
    key : str, optional
        The key of the state dict in .pt files holding several.
    layer : str or list of str, optional
        Keep only these tensors (a name, a prefix of names such as "fc" for "fc.weight"
        and "fc.bias", or a list; see :func:`mianalysis.dumps.select_layout`).
    chunk_size : int or None, default=64
        Runs read and written together: memory is about chunk_size x clients x
        checkpoints x parameters x 4 bytes. None: all runs in one chunk, so that nothing
        is written unless every file is read.
    progress : bool, default=True
        A progress bar over runs.
    meta : dict, optional
        Stored in the manifest with the import's own keys (``imported_from``, ``runs``,
        ``state_dict_key`` and ``layer`` when given).

    Returns
    -------
    ParameterDump

    Raises
    ------
    DumpError
        Naming the file or folder: a file that cannot be read (truncated, damaged); no
        state dict in a file, or several and no `key`; a file that is neither .pt nor
        .safetensors, or an extra or missing run in one folder; two files of one run or
        two folders of one checkpoint; tensors or shapes unlike the first file's; a NaN
        or an infinity. Every folder is checked before any file is read. The chunks
        written before the error stay (the same call resumes after the file is fixed); a
        dump without any is removed.
        Also, before anything else, when `out` is `root` or lies inside it.
    LockedError
        If another process is writing `out` (before any file is read).
    """
    if key is not None and not isinstance(key, str):
        raise TypeError(f"`key` must be a string or None; got {key!r}")
    if layer is not None and not isinstance(layer, str):
        layer = list(layer)
    inside = Path(out).resolve()
    if inside == Path(root).resolve() or Path(root).resolve() in inside.parents:
        raise DumpError(f"the dump {out} lies inside the folder being imported, {root}: its files would be read as "
                        "checkpoints; choose a dump folder outside it")
    with WriterLock(out):  # a second importer of `out` fails now, not after reading the files
        found = scan_checkpoints(root)
        n_runs = len(found.runs)
        chunk_size = n_runs if chunk_size is None else check_int(chunk_size, "chunk_size", low=1)
        reader = _Reader(key, layer)
        first = reader.read(found.file(found.clients[0], found.checkpoints[0], 0), 0, 0)
        meta = dict(meta or {}, imported_from=str(root), runs=found.runs, state_dict_key=reader.first_key)
        if layer is not None:
            meta["layer"] = layer
        writer = DumpWriter(out, clients=found.clients, checkpoints=found.checkpoints, runs=n_runs,
                            layout=[(n, a.shape) for n, a in first], chunk_size=chunk_size, meta=meta, metrics=[])
        with warnings.catch_warnings():
            # Runs left incomplete by an error: the error says what happened, the warning would repeat it.
            warnings.simplefilter("ignore", IncompleteChunkWarning)
            with writer as w:
                todo = w.missing_runs()
                bar = progress_bar(n_runs, initial=n_runs - len(todo), unit="run", desc="importing", enabled=progress)
                for run in todo:
                    for client in found.clients:
                        for checkpoint in found.checkpoints:
                            params = dict(reader.read(found.file(client, checkpoint, run), checkpoint, run))
                            w.record(run=run, client=client, checkpoint=checkpoint, params=params)
                    bar.update(1)
                bar.close()
    assert w.dump is not None  # opened on resuming, else created by the first of the runs (there is one)
    return w.dump


