"""The parameter layout of a dump: which columns of the flattened parameter vector hold
which tensor, selections of tensors by name, and where a block of samples first holds a
NaN or an infinity.

A dump stores each client's parameters as one flat vector per run and checkpoint; its
manifest's ``layout`` lists the tensors in order, each a :class:`LayoutEntry` (name, shape,
offset). :func:`layout_from_shapes` builds a layout from (name, shape) pairs,
:func:`select_layout` picks tensors by name or prefix and :func:`layout_columns` gives the
columns they cover; :func:`find_nonfinite` names the first non-finite value of a block
(checkpoint, runs, tensor) as a :class:`NonFinite`.

Examples
--------
>>> from mianalysis.dumps import layout_columns, layout_from_shapes, select_layout
>>> layout = layout_from_shapes([("rnn.0.weight", (2, 3)), ("rnn.0.bias", (2,)), ("head", (1,))])
>>> [(e.name, e.offset, e.size) for e in layout]
[('rnn.0.weight', 0, 6), ('rnn.0.bias', 6, 2), ('head', 8, 1)]
>>> layout_columns(select_layout(layout, ["head", "rnn.0.bias"])).tolist()
[6, 7, 8]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .sketch import SKETCH_SUFFIX

__all__ = ["LayoutEntry", "layout_from_shapes", "select_layout", "layout_columns", "NonFinite", "find_nonfinite"]


@dataclass(frozen=True)
class LayoutEntry:
    """One tensor of the flattened parameter vector: columns [offset, offset + size)."""

    name: str
    shape: tuple
    offset: int

    @property
    def size(self) -> int:
        return math.prod(int(s) for s in self.shape)  # a Python int: never overflows

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "offset": self.offset, "size": self.size}


def layout_from_shapes(named_shapes: Iterable[tuple[str, Sequence[int]]]) -> list[LayoutEntry]:
    """Layout entries for tensors of the given (name, shape) pairs, flattened in order."""
    entries, offset = [], 0
    for name, shape in named_shapes:
        entry = LayoutEntry(str(name), tuple(int(s) for s in shape), offset)
        entries.append(entry)
        offset += entry.size
    return entries


def select_layout(layout: Sequence[LayoutEntry], layer: str | Iterable[str]) -> list[LayoutEntry]:
    """Entries of `layout` named by `layer`: a tensor name, a prefix of names ("rnn.0"
    matches "rnn.0.weight"), or a list of those; ValueError for a name that matches none.
    In a sketched dump a tensor's name selects its sketch ("fc.weight" matches
    "fc.weight[sketch]").

    A selection is a set of tensors: each selected tensor comes once, in layout order,
    whatever the order of the names and however they overlap (``["rnn.1", "rnn.1.bias"]``,
    ``["head", "rnn.1"]`` and ``["rnn.1", "rnn.1"]`` select what their union does)."""
    names = [layer] if isinstance(layer, str) else list(layer)
    chosen = set()
    for name in names:
        found = {i for i, e in enumerate(layout)
                 if e.name in (name, name + SKETCH_SUFFIX) or e.name.startswith(name + ".")}
        if not found:
            raise ValueError(f"`layer` {name!r} is not in the layout; tensors: {[e.name for e in layout]}")
        chosen |= found
    return [layout[i] for i in sorted(chosen)]


def layout_columns(entries: Iterable[LayoutEntry]) -> np.ndarray:
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

    def runs_text(self, word: str = "run") -> str:
        """"run 3" or "runs 0, 1, 2, 3, 4 and 7 more"."""
        shown = ", ".join(str(r) for r in self.runs[:5]) + (
            "" if len(self.runs) <= 5 else f" and {len(self.runs) - 5} more")
        return f"{word}{'s' if len(self.runs) > 1 else ''} {shown}"

    def place(self) -> str:
        """"tensor 'w', column 3" (or "column 3" without a layout)."""
        return f"tensor {self.tensor!r}, column {self.column}" if self.tensor else f"column {self.column}"

    def values_text(self) -> str:
        """"4 NaN and 0 inf (the first in tensor 'w', column 3)"."""
        return f"{self.n_nan} NaN and {self.n_inf} inf (the first in {self.place()})"

    def describe(self) -> str:
        later = f"; {self.later} later checkpoint(s) too" if self.later else ""
        return (f"checkpoint {self.checkpoint} (iteration {self.iteration}), {self.runs_text()}: "
                f"{self.values_text()}{later}")


def find_nonfinite(block: np.ndarray, iterations: Sequence[int], *, checkpoints: Sequence[int] | None = None,
                   first_run: int = 0, layout: Sequence[LayoutEntry] | None = None,
                   columns: np.ndarray | slice | None = None) -> NonFinite | None:
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


def _layout_size(layout: Sequence[LayoutEntry] | None) -> int:
    return layout[-1].offset + layout[-1].size if layout else 0

